//! Bench and test data: text that compresses to a chosen ratio, generated the
//! way LevelDB/RocksDB's `db_bench` does it, or slices of a real text corpus.
//!
//! `db_bench`'s `CompressibleString(rnd, ratio, len)` draws `ratio * len`
//! random printable characters (`' ' + Uniform(95)`) and repeats them to fill
//! `len`; its value generator concatenates 100-byte such pieces. With ratio
//! 0.5, zlib compresses the result to roughly half (the random half costs
//! about log2(95) = 6.6 bits a byte, the repeat almost nothing).
//!
//! Everything is deterministic from a seed, so the CLI, the benches and the
//! workloads see the same bytes.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// `db_bench` builds its data from pieces of this many bytes, each
/// compressible to the requested ratio on its own.
pub const DB_BENCH_PIECE_BYTES: usize = 100;
/// The number of printable ASCII characters `db_bench` draws from (`' '..='~'`).
const PRINTABLE_CHAR_COUNT: u8 = 95;
/// `db_bench`'s value generator keeps 1 MiB of data and hands out slices.
pub const TEXT_GENERATOR_BYTES: usize = 1 << 20;

/// The generator every sample uses: fast, seedable, stable across runs.
#[must_use]
pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// Fills `out` with `db_bench`-style text compressible to `ratio` (0.5 =
/// compresses to half; clamped to 0..=1; 1 = random printable text).
pub fn fill_compressible<R: Rng + ?Sized>(rng: &mut R, ratio: f64, out: &mut [u8]) {
    for piece in out.chunks_mut(DB_BENCH_PIECE_BYTES) {
        compressible_piece(rng, ratio, piece);
    }
}

/// One `CompressibleString`: `ratio * len` random characters (at least one),
/// repeated to fill `piece`.
fn compressible_piece<R: Rng + ?Sized>(rng: &mut R, ratio: f64, piece: &mut [u8]) {
    let ratio = if ratio.is_nan() {
        1.0
    } else {
        ratio.clamp(0.0, 1.0)
    };
    // Truncation as in db_bench's `static_cast<int>(len * fraction)`.
    let raw_bytes = ((piece.len() as f64 * ratio) as usize).clamp(1, piece.len().max(1));
    let raw_bytes = raw_bytes.min(piece.len());
    for byte in &mut piece[..raw_bytes] {
        *byte = b' ' + rng.random_range(0..PRINTABLE_CHAR_COUNT);
    }
    for at in raw_bytes..piece.len() {
        piece[at] = piece[at - raw_bytes];
    }
}

/// Fills `out` with the bytes of `corpus` starting at a random offset,
/// wrapping around at its end.
///
/// # Panics
/// If `corpus` is empty.
pub fn fill_from_corpus<R: Rng + ?Sized>(rng: &mut R, corpus: &[u8], out: &mut [u8]) {
    assert!(!corpus.is_empty(), "the corpus must not be empty");
    let mut from = rng.random_range(0..corpus.len());
    let mut filled = 0;
    while filled < out.len() {
        let n = (corpus.len() - from).min(out.len() - filled);
        out[filled..filled + n].copy_from_slice(&corpus[from..from + n]);
        filled += n;
        from = 0;
    }
}

/// `db_bench`'s `RandomGenerator`: 1 MiB of sample text, handed out as
/// consecutive slices (wrapping to the start), so that values of any length
/// share the statistics of the whole.
#[derive(Clone, Debug)]
pub struct TextGenerator {
    data: Vec<u8>,
    position: usize,
}

impl TextGenerator {
    /// `db_bench`-style text compressible to `ratio`, from `seed`.
    #[must_use]
    pub fn compressible(seed: u64, ratio: f64) -> TextGenerator {
        let mut data = vec![0; TEXT_GENERATOR_BYTES];
        fill_compressible(&mut rng(seed), ratio, &mut data);
        TextGenerator { data, position: 0 }
    }

    /// Text taken from `corpus` (at least 1 MiB of it, repeated if shorter).
    ///
    /// # Panics
    /// If `corpus` is empty.
    #[must_use]
    pub fn from_corpus(corpus: &[u8]) -> TextGenerator {
        assert!(!corpus.is_empty(), "the corpus must not be empty");
        let len = corpus.len().max(TEXT_GENERATOR_BYTES);
        let data = corpus.iter().copied().cycle().take(len).collect();
        TextGenerator { data, position: 0 }
    }

    /// The next `len` bytes (from the start again when the data runs out).
    ///
    /// # Panics
    /// If `len` exceeds the generator's data ([`TEXT_GENERATOR_BYTES`] or the
    /// corpus length).
    pub fn generate(&mut self, len: usize) -> &[u8] {
        assert!(
            len <= self.data.len(),
            "asked for more than the generator holds"
        );
        if self.position + len > self.data.len() {
            self.position = 0;
        }
        self.position += len;
        &self.data[self.position - len..self.position]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_ratio_pieces_repeat_their_first_half() {
        let mut out = [0u8; 250];
        fill_compressible(&mut rng(1), 0.5, &mut out);
        assert_eq!(out[..50], out[50..100]);
        assert_ne!(out[..50], out[100..150]);
        assert_eq!(out[200..225], out[225..250]);
        assert!(out.iter().all(|b| (b' '..=b'~').contains(b)));
    }

    #[test]
    fn same_seed_same_bytes() {
        let (mut a, mut b) = ([0u8; 1000], [0u8; 1000]);
        fill_compressible(&mut rng(9), 0.3, &mut a);
        fill_compressible(&mut rng(9), 0.3, &mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn corpus_wraps_around() {
        let mut out = [0u8; 10];
        fill_from_corpus(&mut rng(3), b"abc", &mut out);
        let s = std::str::from_utf8(&out).unwrap();
        assert!(s.contains("abcabc"), "{s}");
    }

    #[test]
    fn generator_hands_out_consecutive_slices() {
        let mut g = TextGenerator::from_corpus(b"0123456789");
        assert_eq!(g.generate(4), b"0123");
        assert_eq!(g.generate(4), b"4567");
    }
}
