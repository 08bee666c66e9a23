//! The `Adaptive` split policy's cut: find where the page's insert streams
//! will go on, and freeze the part of the page they will not touch.
//!
//! A page remembers its inserts for free: records are appended to the heap
//! in insert order, and the page a split keeps is rebuilt in that order
//! (`HeapOrder::Kept`), so the heap offsets rank the records by age. (A
//! split's new page starts in key order, and a compaction rebuilds in key
//! order: such a page's history starts afresh, and reads as one ascending
//! run until new inserts land.) A record is a stream's
//! *head* if it was inserted after both its neighbours (a local maximum of
//! recency) and recently; the stream goes on past it, in the direction of
//! the neighbour it shares more key prefix with (its own stream's previous
//! record; a stream's keys share a prefix, as `user:17:` + a timestamp, or
//! a district id + an order id). The gap on that side is *hot*. Random
//! inserts make heads anywhere, so their hot gaps cover the page; streams
//! make few heads, and the records outside the outermost hot gaps are
//! *cold*: no insert will land among them.
//!
//! The split acts only when the new record itself lands on a gap that the
//! page's history predicted (or right next to the page's last insert): the
//! page is then being written by streams, not at random. It cuts at the
//! outermost hot gap that leaves the larger cold part on one side, if that
//! part is large enough to be worth freezing ([`FREEZE_MIN_FRACTION`]). A
//! single stream between two cold parts keeps its own run, and the other
//! part is frozen if it is one stream's records, none recent, and not tiny
//! ([`SINGLE_FREEZE_MIN_FRACTION`]). Otherwise the cut is the caller's (the
//! middle).
//!
//! Long streams: a stream's head may sit just before a small cold part (a
//! neighbour's first records, say). Leaving that part behind costs one
//! page's free space once; taking it along costs its bytes on every page
//! the stream fills from then on. So the part is left behind only if it is
//! not tiny ([`SINGLE_FREEZE_MIN_FRACTION`]), or if the tree's streams are
//! long: nearly all of its recent splits extended a run that fills half of
//! its page by itself (the caller keeps that average, as it does for the
//! headroom below), as with TPC-C order keys.
//!
//! Headroom: a frozen part keeps [`HEADROOM_FRACTION`] of a page free for
//! late arrivals (the 1/16 of InnoDB's sequential split) once the tree has
//! seen many splits that no stream explains (the caller decides, from the
//! tree's split counts): a clean stream then fills its pages whole, and a
//! noisy one leaves room for its late records instead of splitting a full
//! page in half for each.

use crate::page::RecBuf;
use std::borrow::Borrow;

/// A cold part is frozen only if it holds at least this fraction (num,
/// den) of the page's bytes: a frozen part never grows, so a small one
/// would be waste. A stream's run this large counts as long. (Measured on
/// two seeded family grids together with [`SINGLE_FREEZE_MIN_FRACTION`]
/// and [`RECENT_DEN`]: 5/8 left more points below the simple policies,
/// 3/4 lowered the mean fill.)
const FREEZE_MIN_FRACTION: (usize, usize) = (1, 2);
/// The part a single stream leaves behind is frozen only if it holds at
/// least this fraction of the page's bytes (or the tree's streams are
/// long): below it, the part is more likely a few records of streams the
/// page's history did not show than a neighbour's finished run (measured
/// on the pattern family: 2/16 loses on many short streams).
const SINGLE_FREEZE_MIN_FRACTION: (usize, usize) = (1, 4);
/// Bytes (fraction of the page's bytes) a frozen part leaves free for late
/// arrivals and updates.
const HEADROOM_FRACTION: (usize, usize) = (1, 16);
/// A local maximum of recency counts as a head only among the page's most
/// recent `1/RECENT_DEN` records (at least [`RECENT_MIN`]); a part is cold
/// if none of its records is among them. (Measured on the pattern family:
/// a quarter left more round-robin points below the simple policies.)
const RECENT_DEN: usize = 2;
const RECENT_MIN: usize = 4;

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Hot gaps of `recs` (gap `g` lies between `recs[g - 1]` and `recs[g]`;
/// gap 0 before the first record, gap `n` after the last), in order.
/// `age[i]` ranks record `i` by recency (0 = most recent).
/// Each gap comes with the direction of its stream (true: ascending, the
/// head is `recs[g - 1]`; false: descending, the head is `recs[g]`).
fn hot_gaps<R: Borrow<RecBuf>>(recs: &[R], age: &[usize]) -> Vec<(usize, bool)> {
    let n = recs.len();
    let recent = (n / RECENT_DEN).max(RECENT_MIN);
    let mut gaps = Vec::new();
    for i in 0..n {
        let newer_than = |j: Option<usize>| j.is_none_or(|j| age[i] < age[j]);
        let left = i.checked_sub(1);
        let right = (i + 1 < n).then_some(i + 1);
        if age[i] >= recent || !newer_than(left) || !newer_than(right) {
            continue;
        }
        let key = |j: usize| recs[j].borrow().key.as_slice();
        let lcp_left = left.map(|j| common_prefix(key(j), key(i)));
        let lcp_right = right.map(|j| common_prefix(key(i), key(j)));
        // The stream runs away from the neighbour it shares its prefix with.
        let ascending = match (lcp_left, lcp_right) {
            (Some(l), Some(r)) => l >= r,
            (Some(_), None) => true,
            (None, _) => false,
        };
        gaps.push((if ascending { i + 1 } else { i }, ascending));
    }
    gaps.sort_unstable();
    gaps.dedup_by_key(|g| g.0);
    gaps
}

/// Recency ranks of `recs` by heap offset; records without one (the new
/// record, records moved in by a split) count as the most recent, in key
/// order.
fn ages<R: Borrow<RecBuf>>(recs: &[R], new_idx: Option<usize>) -> Vec<usize> {
    // Most recent first: the new record, then by heap offset descending.
    // Ties (records without an offset) keep key order: the index breaks
    // them, so an unstable sort gives the stable order. The three parts
    // are packed in one integer, which sorts several times faster than a
    // tuple (a page offset and a record index are below 2^24).
    const FIELD_BITS: u32 = 24;
    const FIELD_MAX: u64 = (1 << FIELD_BITS) - 1;
    let mut order: Vec<u64> = recs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let older = u64::from(Some(i) != new_idx);
            // Newer records lie higher in the heap; no offset is newest.
            let rank = r
                .borrow()
                .old_offset
                .map_or(0, |off| FIELD_MAX - (off as u64).min(FIELD_MAX - 1));
            debug_assert!((i as u64) < FIELD_MAX);
            (older << (2 * FIELD_BITS)) | (rank << FIELD_BITS) | i as u64
        })
        .collect();
    order.sort_unstable();
    let mut age = vec![0; recs.len()];
    for (rank, key) in order.iter().enumerate() {
        age[(key & FIELD_MAX) as usize] = rank;
    }
    age
}

/// What the tree's recent splits say about its workload.
#[derive(Clone, Copy, Debug)]
pub(super) struct Trends {
    /// A part frozen whole keeps [`HEADROOM_FRACTION`] free.
    pub headroom: bool,
    /// The tree's streams are long: nearly all its recent splits extended a
    /// run that fills half of its page or more.
    pub long_streams: bool,
}

/// The cut `Adaptive` asks for, and what the split tells about the
/// workload.
#[derive(Clone, Copy, Debug)]
pub(in crate::tree) struct Outcome {
    /// The cut (`1..n`), or `None` for the middle.
    pub cut: Option<usize>,
    /// An insert stream explained the split: the new record landed where
    /// the page's history predicted.
    pub explained: bool,
    /// The new record extends one stream's run that fills a large part of
    /// the page ([`FREEZE_MIN_FRACTION`]).
    pub long_run: bool,
}

/// The cut `Adaptive` asks for when `recs[new_idx]` was just inserted into
/// a page whose last insert was `recs[last]`. `sums` are the prefix sums
/// of the records' bytes.
pub(super) fn cut(
    recs: &[RecBuf],
    new_idx: usize,
    last: Option<usize>,
    sums: &[usize],
    trends: Trends,
) -> Outcome {
    let n = recs.len();
    if n < 3 {
        return Outcome {
            cut: None,
            explained: true,
            long_run: false,
        };
    }
    // Was the new record's gap predicted by the page's history?
    let next_to_last = last.is_some_and(|l| l + 1 == new_idx || new_idx + 1 == l);
    let predicted = next_to_last || {
        let old: Vec<&RecBuf> = recs[..new_idx].iter().chain(&recs[new_idx + 1..]).collect();
        hot_gaps(&old, &ages(&old, None))
            .iter()
            .any(|g| g.0 == new_idx)
    };
    if !predicted {
        return Outcome {
            cut: None,
            explained: false,
            long_run: false,
        };
    }
    Outcome {
        cut: freeze(recs, new_idx, sums, trends),
        explained: true,
        long_run: long_run(recs, new_idx, sums),
    }
}

/// Whether the new record extends one stream's run that fills a large part
/// of the page by itself ([`FREEZE_MIN_FRACTION`]) from the page's edge: the run's
/// neighbouring keys share more prefix with each other than with any key
/// across its ends.
fn long_run(recs: &[RecBuf], new_idx: usize, sums: &[usize]) -> bool {
    let n = recs.len();
    let total = sums[n];
    let lcp = |i: usize| common_prefix(&recs[i - 1].key, &recs[i].key);
    let one_stream = |r: std::ops::Range<usize>| {
        let inner = (r.start + 1..r.end).map(lcp).min().unwrap_or(0);
        let left = (r.start > 0).then(|| lcp(r.start));
        let right = (r.end < n).then(|| lcp(r.end));
        inner > 0 && left.is_none_or(|a| a < inner) && right.is_none_or(|a| a < inner)
    };
    let large = |bytes: usize| bytes * FREEZE_MIN_FRACTION.1 >= total * FREEZE_MIN_FRACTION.0;
    (large(sums[new_idx + 1]) && one_stream(0..new_idx + 1))
        || (large(total - sums[new_idx]) && one_stream(new_idx..n))
}

/// The cut of a split the page's streams explain.
fn freeze(recs: &[RecBuf], new_idx: usize, sums: &[usize], trends: Trends) -> Option<usize> {
    let n = recs.len();
    let age = ages(recs, Some(new_idx));
    let gaps = hot_gaps(recs, &age);
    let (first, last_gap) = (gaps.first()?.0, gaps.last()?.0);
    let recent = (n / RECENT_DEN).max(RECENT_MIN);
    // A part is cold if it has no recent record, and one stream's if its
    // keys share more prefix with each other than with the key across the
    // cut (`user:17:` + timestamps: yes; `user:17:...`, `user:18:...`: no).
    let cold = |r: &std::ops::Range<usize>| age[r.clone()].iter().all(|&a| a >= recent);
    let one_stream = |r: &std::ops::Range<usize>| {
        let across = if r.start > 0 {
            common_prefix(&recs[r.start - 1].key, &recs[r.start].key)
        } else {
            common_prefix(&recs[r.end - 1].key, &recs[r.end].key)
        };
        (r.start + 1..r.end).all(|i| common_prefix(&recs[i - 1].key, &recs[i].key) > across)
    };
    if let [(g, ascending)] = gaps[..]
        && (1..n).contains(&g)
    {
        let (frozen, kept) = if ascending || g < 2 {
            (g..n, 0..g)
        } else {
            (0..g - 1, g - 1..n)
        };
        let bytes = |r: &std::ops::Range<usize>| sums[r.end] - sums[r.start];
        let at_least = |b: usize, (num, den): (usize, usize)| b * den >= sums[n] * num;
        // In a tree of long streams, a stream whose own run already fills
        // half of the page leaves any cold part behind, however small.
        let long_run =
            trends.long_streams && at_least(bytes(&kept), FREEZE_MIN_FRACTION) && one_stream(&kept);
        if cold(&frozen)
            && one_stream(&frozen)
            && (long_run || at_least(bytes(&frozen), SINGLE_FREEZE_MIN_FRACTION))
        {
            // One stream between two cold parts: the stream keeps its own run
            // (the side it shares its prefix with) and the other part is
            // frozen now, though not full. Freezing costs the frozen part's
            // free space once; leaving it with the stream would cost its bytes
            // at every later split of the stream's page: a small part is
            // worth leaving with a stream that ends soon, not with one that
            // goes on for pages.
            return Some(if ascending || g < 2 { g } else { g - 1 });
        }
    }
    let total = sums[n];
    let min_frozen = total * FREEZE_MIN_FRACTION.0 / FREEZE_MIN_FRACTION.1;
    let headroom = if trends.headroom {
        total * HEADROOM_FRACTION.0 / HEADROOM_FRACTION.1
    } else {
        0
    };
    // Cold prefix: records before the first hot gap's head, `recs[..first
    // - 1]` (the head moves right, so the gap's inserts go right too).
    let prefix = first
        .checked_sub(1)
        .filter(|&c| c >= 1)
        .map(|c| (c, sums[c]));
    // Cold suffix: records after the last hot gap, `recs[last_gap..]` (the
    // gap's inserts go left, below the separator).
    let suffix = (last_gap < n)
        .then(|| last_gap.max(1))
        .map(|c| (c, total - sums[c]));
    let frozen_max = total - headroom;
    match (prefix, suffix) {
        (Some((c, b)), s) if b >= min_frozen && s.is_none_or(|(_, sb)| b >= sb) => {
            // Freeze the left part, less the headroom.
            let limit = sums[c].min(frozen_max);
            Some((1..=c).rev().find(|&k| sums[k] <= limit).unwrap_or(1))
        }
        (_, Some((c, b))) if b >= min_frozen => {
            // Freeze the right part, less the headroom.
            let limit = (total - sums[c]).min(frozen_max);
            Some((c..n).find(|&k| total - sums[k] <= limit).unwrap_or(n - 1))
        }
        _ => None,
    }
}
