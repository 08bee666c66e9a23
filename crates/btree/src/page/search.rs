//! Key search within a page: the sparse slot directory is binary-searched
//! (or searched from a guess when the parent's separators bound the key),
//! then at most one group of records is walked.

use super::*;
use barracuda_base::PageId;
use std::cmp::Ordering;

/// Compares the record's key with `key`; the first record of an internal
/// page stands for "minus infinity within this page".
fn cmp_rec(p: &[u8], off: usize, key: &[u8]) -> Ordering {
    if !is_leaf(p) && off == first_record(p) {
        return Ordering::Less;
    }
    cmp_keys(rec_key(p, off), key)
}

/// Lexicographic order of two keys. Most keys that differ do so in their
/// first eight bytes, and those compare as one big-endian word (the same
/// order) without a call to `memcmp`.
fn cmp_keys(a: &[u8], b: &[u8]) -> Ordering {
    if let (Some(x), Some(y)) = (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
    }
    a.cmp(b)
}

/// Where a key is (or would go) in a page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probe {
    /// The group of `found`, or of `pred` when not found.
    pub slot: usize,
    /// The record before `found` (or before the insert point), 0 if none.
    pub pred: usize,
    /// The record with an equal key, 0 if none.
    pub found: usize,
}

/// Finds `key`: binary search over the slots, then a walk of one group.
pub fn probe(p: &[u8], key: &[u8]) -> Probe {
    let slots_le = search_slots(p, key, 0, slot_count(p));
    walk_group(p, key, slots_le)
}

/// [`probe`], starting from where `span` (the page's key range, as its
/// parent bounds it) puts `key` among the slots: one or two records
/// compared instead of a binary search's log2(slots) when keys are spread
/// evenly (random keys: hashes, UUIDs), each of them a cache miss in a page
/// that is not in the CPU's caches. Any span gives the same answer as
/// [`probe`]; a poor one costs at most twice the binary search's compares.
pub fn probe_in(p: &[u8], key: &[u8], span: Option<&KeySpan>) -> Probe {
    let n = slot_count(p);
    let slots_le = match span {
        Some(span) if n >= SPAN_SLOTS_MIN => search_slots_from(p, key, span.estimate(key, n)),
        _ => search_slots(p, key, 0, n),
    };
    walk_group(p, key, slots_le)
}

/// Below this many slots a binary search takes at most three compares,
/// which a guess cannot beat by much.
const SPAN_SLOTS_MIN: usize = 8;

/// Whether slot `s`'s first record is at most `key`.
fn slot_le(p: &[u8], s: usize, key: &[u8]) -> bool {
    cmp_rec(p, slot(p, s).0, key) != Ordering::Greater
}

/// The number of slots whose first record is at most `key`, knowing that
/// it is at least `lo` and at most `hi`: a binary search.
fn search_slots(p: &[u8], key: &[u8], mut lo: usize, mut hi: usize) -> usize {
    while lo < hi {
        let mid = (lo + hi) / 2;
        if slot_le(p, mid, key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// [`search_slots`] over all slots, starting at slot `guess`: steps of 1,
/// 2, 4, ... away from it until the answer is bracketed, then a binary
/// search inside the bracket.
fn search_slots_from(p: &[u8], key: &[u8], guess: usize) -> usize {
    let n = slot_count(p);
    let guess = guess.min(n - 1);
    // The first compares read the records of the guess and of one of its
    // neighbours, each a cache miss in a page the CPU has not touched:
    // start loading all three at once rather than one after the other.
    for s in guess.saturating_sub(1)..=(guess + 1).min(n - 1) {
        prefetch(p, slot(p, s).0);
    }
    let (mut lo, mut hi) = (0, n);
    let mut step = 1;
    if slot_le(p, guess, key) {
        lo = guess + 1;
        while lo < n {
            let at = (guess + step).min(n - 1);
            if !slot_le(p, at, key) {
                hi = at;
                break;
            }
            lo = at + 1;
            step *= 2;
        }
    } else {
        hi = guess;
        while hi > 0 {
            let at = guess.saturating_sub(step);
            if slot_le(p, at, key) {
                lo = at + 1;
                break;
            }
            hi = at;
            step *= 2;
        }
    }
    search_slots(p, key, lo, hi)
}

/// Asks the CPU to start loading the cache line of `p[at]` (a hint: it
/// reads nothing and cannot fault; nothing on other architectures).
#[inline]
fn prefetch(p: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(byte) = p.get(at) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE, which the intrinsic needs, is part of every x86_64
        // CPU; a prefetch neither reads nor writes memory, and the address
        // is inside `p` anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(byte).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, at);
}

/// The key range of a child page as its parent bounds it, reduced to
/// numbers: the bytes after the bounds' common prefix, as big-endian words.
/// Keys between the bounds map to numbers between them, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpan {
    prefix_len: usize,
    low: u64,
    high: u64,
}

impl KeySpan {
    /// The span between `low` (at most every key of the page) and `high`
    /// (above every key), if the words after their common prefix differ.
    #[must_use]
    pub fn new(low: &[u8], high: &[u8]) -> Option<KeySpan> {
        let prefix_len = low.iter().zip(high).take_while(|(a, b)| a == b).count();
        let (low, high) = (word_after(low, prefix_len), word_after(high, prefix_len));
        (low < high).then_some(KeySpan {
            prefix_len,
            low,
            high,
        })
    }

    /// The span of the child of internal page `p` that record `off` points
    /// to: from its separator to the next one. `None` for the first child
    /// (its lower bound is the page's own) and the last (likewise above).
    #[must_use]
    pub fn of_child(p: &[u8], off: usize) -> Option<KeySpan> {
        let next = rec_next(p, off);
        if off == first_record(p) || next == 0 {
            return None;
        }
        KeySpan::new(rec_key(p, off), rec_key(p, next))
    }

    /// Where `key` falls among `n` evenly spread slots: 0..n.
    #[must_use]
    pub fn estimate(&self, key: &[u8], n: usize) -> usize {
        let at = word_after(key, self.prefix_len).clamp(self.low, self.high) - self.low;
        let index = u128::from(at) * n as u128 / u128::from(self.high - self.low);
        usize::try_from(index).unwrap_or(n).min(n.saturating_sub(1))
    }
}

/// The eight bytes of `key` after `prefix_len`, zero-padded, big-endian.
fn word_after(key: &[u8], prefix_len: usize) -> u64 {
    let tail = key.get(prefix_len..).unwrap_or(&[]);
    let mut word = [0u8; 8];
    let n = tail.len().min(8);
    word[..n].copy_from_slice(&tail[..n]);
    u64::from_be_bytes(word)
}

/// The lookup's end: the group of slot `slots_le - 1` walked for `key`.
fn walk_group(p: &[u8], key: &[u8], slots_le: usize) -> Probe {
    if slots_le == 0 {
        return Probe::default();
    }
    let s = slots_le - 1;
    let (mut cur, count) = slot(p, s);
    let mut pred = 0;
    for _ in 0..count {
        match cmp_rec(p, cur, key) {
            Ordering::Equal => {
                if pred == 0 && s > 0 {
                    pred = last_of_group(p, s - 1);
                }
                return Probe {
                    slot: s,
                    pred,
                    found: cur,
                };
            }
            Ordering::Greater => break,
            Ordering::Less => {
                pred = cur;
                cur = rec_next(p, cur);
            }
        }
    }
    Probe {
        slot: s,
        pred,
        found: 0,
    }
}

fn last_of_group(p: &[u8], s: usize) -> usize {
    let (mut cur, count) = slot(p, s);
    for _ in 1..count {
        cur = rec_next(p, cur);
    }
    cur
}

/// The child of an internal page that covers `key`: the last record whose
/// key is <= `key` (the first record counts as minus infinity).
pub(crate) fn child_for(p: &[u8], key: &[u8]) -> (usize, PageId) {
    let pr = probe(p, key);
    let off = if pr.found != 0 {
        pr.found
    } else if pr.pred != 0 {
        pr.pred
    } else {
        first_record(p)
    };
    (off, rec_child(p, off))
}

#[cfg(test)]
mod tests {
    use super::cmp_keys;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cmp_keys_is_lexicographic(
            a in proptest::collection::vec(0u8..3, 0..20),
            b in proptest::collection::vec(0u8..3, 0..20),
        ) {
            prop_assert_eq!(cmp_keys(&a, &b), a.cmp(&b));
        }
    }
}
