//! Where a full page is cut: the split policy's cut (see [`adaptive`]
//! for the `Adaptive` policy's), and the cuts of a page into more parts.

use super::{Overfull, adaptive};
use crate::page::{self, INSERT_WAS_MAX, INSERT_WAS_MIN, RecBuf};
use crate::store::{OpContext, PageStore};
use crate::tree::{BTree, SplitKind, SplitPolicy};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of records `recs[..cut]` before `cut`, for every cut.
pub(in crate::tree) fn prefix_bytes(recs: &[RecBuf]) -> Vec<usize> {
    let mut sums = Vec::with_capacity(recs.len() + 1);
    let mut total = 0;
    sums.push(0);
    for r in recs {
        total += r.len();
        sums.push(total);
    }
    sums
}

/// The cut in 1..n-1 whose left part is closest to `num/den` of the bytes.
pub(in crate::tree) fn fraction_cut(recs: &[RecBuf], num: usize, den: usize) -> usize {
    let sums = prefix_bytes(recs);
    let total = sums[recs.len()];
    let target = total * num / den;
    (1..recs.len())
        .min_by_key(|&c| sums[c].abs_diff(target))
        .unwrap_or(1)
}

/// Fixed-point one of `Counters::unexplained_splits`.
const UNEXPLAINED_SCALE: u64 = 1 << 16;

/// The average's weight of a new split: 1/256.
const UNEXPLAINED_SHIFT: u32 = 8;

/// `Adaptive` leaves headroom in the parts it freezes while more than 1 in
/// 100 of its recent splits were unexplained (measured on the pattern
/// family: 1 in 12 switched it off as soon as it worked, and ascending keys
/// with 2% late arrivals fell to 0.84).
const UNEXPLAINED_SPLITS_HEADROOM: u64 = UNEXPLAINED_SCALE / 100;

/// `Adaptive` takes the tree's streams for long (a stream fills pages of
/// its own, so that a cold part it would drag along is better left behind
/// once) while at most 1 in 10 of its recent splits did not extend a long
/// run. (Measured on the pattern family and TPC-C order keys: 1 in 4 put
/// one more family point below the simple policies and lowered the mean;
/// without the rule, each order stream carried a neighbour's first orders
/// to every page it filled, 0.92 of leaf fill instead of 0.95.)
const SHORT_RUN_SPLITS_LONG_STREAMS: u64 = UNEXPLAINED_SCALE / 10;

/// Where the page's last inserted record is in `recs`, if known.
pub(in crate::tree) fn last_insert_index(p: &[u8], recs: &[RecBuf]) -> Option<usize> {
    let last = page::last_insert(p);
    recs.iter()
        .position(|r| last != 0 && r.old_offset == Some(last))
}

impl<S: PageStore> BTree<S> {
    /// Candidate cuts for splitting the page `p` into `job.recs` (its
    /// records plus the new one at `job.new_idx`, if the split makes room
    /// for one), best first, and the kind of the first. The split policy
    /// has no say when `op` asks for half splits
    /// ([`OpContext::half_splits`]).
    pub(in crate::tree) fn cuts(
        &self,
        p: &[u8],
        job: &Overfull,
        op: &OpContext,
    ) -> (Vec<usize>, SplitKind) {
        let (recs, new_idx) = (&job.recs, job.new_idx);
        let n = recs.len();
        let limit = self.limit_bytes();
        let fits = |c: usize| {
            (1..n).contains(&c)
                && page::image_bytes(&recs[..c]) <= limit
                && page::image_bytes(&recs[c..]) <= limit
        };
        let policy_cut = new_idx
            .filter(|_| !op.half_splits)
            .and_then(|new_idx| self.policy_cut(p, recs, new_idx, job.reading));
        let mid = fraction_cut(recs, 1, 2);
        let mut out = Vec::new();
        let mut kind = SplitKind::Half;
        if let Some(c) = policy_cut.filter(|&c| fits(c)) {
            out.push(c);
            kind = SplitKind::Sequential;
        }
        out.push(mid);
        // Last resorts when padding squeezes the limit: any cut that fits.
        out.extend((1..n).filter(|&c| c != mid && fits(c)).take(2));
        (out, kind)
    }

    /// The cut the split policy asks for, if the insert is sequential
    /// (`Adaptive`'s from `reading`, if the caller read the page already).
    fn policy_cut(
        &self,
        p: &[u8],
        recs: &[RecBuf],
        new_idx: usize,
        reading: Option<adaptive::Outcome>,
    ) -> Option<usize> {
        let n = recs.len();
        match self.config.policy {
            SplitPolicy::Half => None,
            SplitPolicy::InnoDb => {
                let f = page::insert_flags(p);
                if new_idx == n - 1 && f & INSERT_WAS_MAX != 0 {
                    Some(fraction_cut(recs, 15, 16).min(n - 1))
                } else if new_idx == 0 && f & INSERT_WAS_MIN != 0 {
                    Some(fraction_cut(recs, 1, 16).max(1))
                } else {
                    None
                }
            }
            SplitPolicy::InnoDbLastInsert => match last_insert_index(p, recs) {
                Some(l) if l + 1 == new_idx => {
                    // Keep one record after the new one on the left, for
                    // the next insert (InnoDB's comment), if there is one
                    // more after it; else the new record starts the right.
                    Some(if new_idx + 2 < n {
                        new_idx + 2
                    } else {
                        new_idx
                    })
                }
                Some(l) if new_idx + 1 == l => Some(new_idx + 1),
                _ => None,
            },
            SplitPolicy::Adaptive => {
                let outcome = reading.unwrap_or_else(|| {
                    self.adaptive_outcome(last_insert_index(p, recs), recs, new_idx)
                });
                self.note_adaptive(outcome.explained, outcome.long_run);
                outcome.cut
            }
        }
    }

    /// `Adaptive`'s reading of a split of `recs` (the page `p`'s records
    /// plus the new one at `new_idx`), from the page's history and the
    /// tree's trends; changes nothing.
    pub(in crate::tree) fn adaptive_outcome(
        &self,
        last: Option<usize>,
        recs: &[RecBuf],
        new_idx: usize,
    ) -> adaptive::Outcome {
        let sums = prefix_bytes(recs);
        let trends = adaptive::Trends {
            // Headroom once splits that no stream explains are common
            // (late arrivals into pages a stream left behind).
            headroom: self.counters.unexplained_splits.load(Ordering::Relaxed)
                >= UNEXPLAINED_SPLITS_HEADROOM,
            // Streams are long once nearly every split extends a run that
            // fills half of its page or more.
            long_streams: self.long_streams(),
        };
        adaptive::cut(recs, new_idx, last, &sums, trends)
    }

    /// Moves `Adaptive`'s two averages over the tree's recent splits (or
    /// shifts, which stand for the splits they replace) towards this one.
    /// They are updated without a lock: a lost update under concurrent
    /// splits only delays them.
    pub(in crate::tree) fn note_adaptive(&self, explained: bool, long_run: bool) {
        let average = |avg: &AtomicU64, hit: bool| {
            let score = avg.load(Ordering::Relaxed);
            let target = if hit { UNEXPLAINED_SCALE } else { 0 };
            avg.store(
                score - (score >> UNEXPLAINED_SHIFT) + (target >> UNEXPLAINED_SHIFT),
                Ordering::Relaxed,
            );
        };
        average(&self.counters.unexplained_splits, !explained);
        average(&self.counters.short_run_splits, !long_run);
    }

    /// Whether the tree's streams are long: nearly every recent split
    /// extended a run that fills half of its page or more.
    pub(in crate::tree) fn long_streams(&self) -> bool {
        self.counters.short_run_splits.load(Ordering::Relaxed) <= SHORT_RUN_SPLITS_LONG_STREAMS
    }
}
