//! [`FitGuess`]: whether compressing a page fuller than its block can make
//! it fit, guessed from the pages compressed before it.
//!
//! A page stored sparse ([`CodecId::Sparse`](crate::CodecId::Sparse)) costs
//! a copy; a page fuller than its block costs a compressor's pass, and when
//! the data does not compress (random bytes, values compressed already)
//! that pass fails, and the B+tree splits the page after paying for it,
//! once or more per split. Data of one tree tends to compress alike, so the
//! ratio of recent compressed images to their sparse sizes predicts the
//! next one: a page whose sparse size times that ratio (less twice its
//! spread) is still above the block's room is not compressed at all, and
//! the caller treats it as not fitting; so is any page fuller than its
//! block while the ratio says the data does not compress (saves less than
//! a sixteenth). One guess in
//! [`GUESS_TRY_EVERY`] is tried anyway, so that data that starts to
//! compress is noticed.
//!
//! Pages are guessed by kind (the first byte of the body, the B+tree's
//! page type): [`GUESS_CLASSES`].
//!
//! A guess may only say "does not fit" where that is a normal outcome the
//! caller handles by splitting. Recovery, which must make the commits the
//! original run made, never guesses.

use std::sync::atomic::{AtomicU32, Ordering};

/// Ratios are kept as fractions of this (16 bits after the point).
const ONE: u64 = 1 << 16;
/// Each new ratio moves the average this fraction (1/8) of the way.
const AVERAGE_SHIFT: u32 = 3;
/// Data whose pages compress to more than this (15/16 of their sparse
/// size) is taken for data that does not compress: a compression would
/// save less than a block's modification-log reserve, which is not worth a
/// compressor's pass at every recompression of the page, and such pages
/// are stored sparse and split when they outgrow their block.
const INCOMPRESSIBLE_RATIO: u64 = ONE * 15 / 16;
/// One page in this many of those guessed hopeless is compressed anyway.
pub const GUESS_TRY_EVERY: u32 = 64;

/// Kinds of pages a guess tells apart, by the first byte of the page body
/// modulo this: the B+tree's page type (1 leaf, 2 internal, 3 overflow).
/// A tree's kinds of pages compress differently (random values do not; the
/// keys and child ids of its internal pages do), and one average over them
/// would be right for none.
pub const GUESS_CLASSES: usize = 4;

/// The recent compressibility of one tree's pages, per kind of page
/// ([`GUESS_CLASSES`]), shared by its threads.
#[derive(Debug, Default)]
pub struct FitGuess {
    classes: [ClassGuess; GUESS_CLASSES],
}

impl FitGuess {
    /// No history: every page is compressed until compressions of its
    /// kind say otherwise.
    #[must_use]
    pub fn new() -> FitGuess {
        FitGuess::default()
    }

    /// Whether compressing a page whose body starts with `first_byte` and
    /// whose sparse image is `sparse_len` bytes is not worth trying for
    /// `room` bytes of block.
    #[must_use]
    pub fn hopeless(&self, first_byte: u8, sparse_len: usize, room: usize) -> bool {
        self.class(first_byte).hopeless(sparse_len, room)
    }

    /// Learns from a page whose body starts with `first_byte`, compressed
    /// to `compressed_len` bytes from a sparse image of `sparse_len`.
    pub fn learn(&self, first_byte: u8, sparse_len: usize, compressed_len: usize) {
        self.class(first_byte).learn(sparse_len, compressed_len);
    }

    fn class(&self, first_byte: u8) -> &ClassGuess {
        &self.classes[usize::from(first_byte) % GUESS_CLASSES]
    }
}

/// The recent compressibility of one kind of page (relaxed atomics: a
/// guess may read a ratio being updated; it is a guess).
#[derive(Debug)]
struct ClassGuess {
    /// Average compressed length / sparse length, in 1/65536.
    ratio: AtomicU32,
    /// Average distance of a ratio from the average, in 1/65536.
    spread: AtomicU32,
    /// Pages guessed hopeless so far (every [`GUESS_TRY_EVERY`]th is tried).
    hopeless: AtomicU32,
}

impl Default for ClassGuess {
    fn default() -> Self {
        ClassGuess::new()
    }
}

impl ClassGuess {
    /// No history: the first pages are compressed, whatever their size,
    /// until their ratios say otherwise (the average starts at 0, so a page
    /// guesses hopeless only once compressions have raised it).
    #[must_use]
    fn new() -> ClassGuess {
        ClassGuess {
            ratio: AtomicU32::new(0),
            spread: AtomicU32::new(0),
            hopeless: AtomicU32::new(0),
        }
    }

    /// Whether compressing a page of `sparse_len` bytes stored sparse is
    /// not worth trying for `room` bytes of block.
    #[must_use]
    fn hopeless(&self, sparse_len: usize, room: usize) -> bool {
        let ratio = u64::from(self.ratio.load(Ordering::Relaxed));
        let spread = u64::from(self.spread.load(Ordering::Relaxed));
        let optimistic = ratio.saturating_sub(2 * spread);
        let incompressible = ratio >= INCOMPRESSIBLE_RATIO;
        if sparse_len <= room
            || (!incompressible && (sparse_len as u64) * optimistic <= (room as u64) * ONE)
        {
            return false;
        }
        let seen = self.hopeless.fetch_add(1, Ordering::Relaxed);
        seen % GUESS_TRY_EVERY != GUESS_TRY_EVERY - 1
    }

    /// Learns from a page compressed to `compressed_len` bytes whose sparse
    /// image was `sparse_len` bytes.
    fn learn(&self, sparse_len: usize, compressed_len: usize) {
        if sparse_len == 0 {
            return;
        }
        let sample = ((compressed_len as u64) * ONE / sparse_len as u64).min(2 * ONE);
        let ratio = u64::from(self.ratio.load(Ordering::Relaxed));
        let spread = u64::from(self.spread.load(Ordering::Relaxed));
        // The first sample sets the average; later ones move it.
        let (ratio, spread) = if ratio == 0 {
            (sample, 0)
        } else {
            let moved = |average: u64, sample: u64| {
                (average * ((1 << AVERAGE_SHIFT) - 1) + sample) >> AVERAGE_SHIFT
            };
            (moved(ratio, sample), moved(spread, sample.abs_diff(ratio)))
        };
        let narrow = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        self.ratio.store(narrow(ratio), Ordering::Relaxed);
        self.spread.store(narrow(spread), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_of_pages_are_guessed_apart() {
        let guess = FitGuess::new();
        for _ in 0..20 {
            guess.learn(1, 8_000, 8_050);
            guess.learn(2, 8_000, 5_000);
        }
        let leaves = (0..GUESS_TRY_EVERY)
            .filter(|_| !guess.hopeless(1, 8_200, 7_600))
            .count();
        assert_eq!(leaves, 1, "random leaves: sampled only");
        assert!(
            (0..100).all(|_| !guess.hopeless(2, 8_200, 7_600)),
            "internal pages compress"
        );
        assert!(
            (0..100).all(|_| !guess.hopeless(3, 8_200, 7_600)),
            "overflow pages: no history"
        );
    }

    #[test]
    fn incompressible_pages_are_guessed_hopeless_and_still_sampled() {
        let guess = ClassGuess::new();
        // No history: everything is tried.
        assert!(!guess.hopeless(20_000, 7_000));
        for _ in 0..20 {
            guess.learn(8_000, 8_050);
        }
        // A page over the room is hopeless but for one in GUESS_TRY_EVERY.
        let tried = (0..GUESS_TRY_EVERY * 4)
            .filter(|_| !guess.hopeless(7_700, 7_600))
            .count();
        assert_eq!(tried, 4);
        // One that fits stored sparse needs no compression to fit.
        assert!(!guess.hopeless(7_500, 7_600));
    }

    #[test]
    fn pages_that_save_less_than_a_sixteenth_are_not_compressed() {
        let nearly = ClassGuess::new();
        for _ in 0..20 {
            // 0.95: a compression would fit a page 5% over its room.
            nearly.learn(8_000, 7_600);
        }
        let tried = (0..GUESS_TRY_EVERY)
            .filter(|_| !nearly.hopeless(7_900, 7_600))
            .count();
        assert_eq!(tried, 1);
        let some = ClassGuess::new();
        for _ in 0..20 {
            some.learn(8_000, 7_200);
        }
        assert!(
            (0..100).all(|_| !some.hopeless(8_200, 7_600)),
            "0.9 of it fits"
        );
    }

    #[test]
    fn compressible_pages_are_tried_up_to_their_ratio_and_spread() {
        let guess = ClassGuess::new();
        for i in 0..40 {
            // Ratios 0.45 to 0.55.
            guess.learn(10_000, 4_500 + (i % 11) * 100);
        }
        assert!(!guess.hopeless(14_000, 7_600), "about 0.5 of it fits");
        assert!(!guess.hopeless(16_000, 7_600), "within twice the spread");
        let tried = (0..GUESS_TRY_EVERY)
            .filter(|_| !guess.hopeless(30_000, 7_600))
            .count();
        assert_eq!(tried, 1, "far beyond the ratio: sampled only");
    }

    #[test]
    fn data_that_starts_to_compress_is_noticed() {
        let guess = ClassGuess::new();
        for _ in 0..50 {
            guess.learn(8_000, 8_100);
        }
        // Pages now compress to 0.4: the caller compresses those it is
        // told to try, and learns from them.
        let mut skipped = 0;
        for _ in 0..4 * GUESS_TRY_EVERY {
            if guess.hopeless(9_000, 7_600) {
                skipped += 1;
            } else {
                guess.learn(9_000, 3_600);
            }
        }
        assert!(skipped < 2 * GUESS_TRY_EVERY, "{skipped} skipped");
        assert!((0..100).all(|_| !guess.hopeless(9_000, 7_600)));
    }
}
