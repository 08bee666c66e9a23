//! Shifts on insert: a full leaf gives records to a sibling under the same
//! parent that has room, instead of splitting (the B*-tree's overflow to a
//! sibling).
//!
//! A split leaves two pages, each with the free space of half a page, that
//! only later inserts fill; where inserts keep landing all over a leaf
//! (random keys, or many short streams interleaved) every online split
//! rule ends near ln 2 (0.69) of leaf fill. Moving records to a sibling
//! that has room instead fills that sibling's free space now, and a leaf
//! splits only once its neighbourhood is full. A shift costs what a split
//! costs (two leaves and the parent rewritten, all in one change), and is
//! made only where it frees at least [`SHIFT_GAIN_FRACTION`] of the leaf,
//! so that a leaf is not shifted again on its next insert.
//!
//! Only the `Adaptive` policy shifts (the other policies are the rules they
//! name), and not for a batch applied in key order with half splits
//! ([`OpContext::half_splits`]), whose leaves are meant to keep room.

use crate::change::{Change, Scratch};
use crate::error::Result;
use crate::page::{self, RecBuf};
use crate::store::{OpContext, PageStore, PageWrite};
use crate::tree::split::Overfull;
use crate::tree::{BTree, SplitPolicy, unreachable_err};
use barracuda_base::PageId;
use std::sync::atomic::Ordering;

/// A shift must leave the full leaf at least this fraction (num, den) of
/// its bytes free: less, and the leaf would shift or split again a few
/// inserts later, for the cost of a split each time.
const SHIFT_GAIN_FRACTION: (usize, usize) = (1, 8);

/// Which sibling a shift gives records to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Left,
    Right,
}

/// The sibling a shift gives records to: its latched page, its side, and
/// the parent's record of the right one of the two pages (whose separator
/// the shift changes).
struct Neighbour<'a, S: PageStore + 'a> {
    guard: S::Exclusive<'a>,
    side: Side,
    sep_off: usize,
}

impl<S: PageStore> BTree<S> {
    /// Whether a full leaf may shift records to a sibling in `op`.
    pub(in crate::tree) fn shifts(&self, op: &OpContext) -> bool {
        self.config.policy == SplitPolicy::Adaptive && !op.half_splits
    }

    /// Tries to make room for `job` (the new contents of the full leaf
    /// `path[last]`, which did not fit only for want of bytes) by giving
    /// records to its left sibling, else its right one, under the same
    /// parent `path[last - 1]`. True if the change was applied; false if no
    /// sibling can take enough, and then nothing was written and `path` is
    /// as it was (the leaf may have been released and latched again, with
    /// its parent latched throughout, so its contents are the same).
    /// `approve` is asked once a sibling has room: `None` to split instead,
    /// else whether the new record must stay in the leaf.
    pub(in crate::tree) fn shift_to_sibling<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        job: &Overfull,
        key: &[u8],
        op: &mut OpContext,
        approve: &mut dyn FnMut() -> Option<bool>,
    ) -> Result<bool> {
        let last = path.len() - 1;
        if last == 0 || !page::is_leaf(&path[last]) || path[last].page_id() == self.root {
            return Ok(false);
        }
        let child_id = path[last].page_id();
        let parent = &path[last - 1];
        let (child_off, id) = page::child_for(parent, key);
        if id != child_id {
            return Err(unreachable_err(child_id));
        }
        let left = page::records(parent)
            .take_while(|&off| off != child_off)
            .last()
            .map(|off| (off, page::rec_child(parent, off)));
        let next = page::rec_next(parent, child_off);
        let right = (next != 0).then(|| (next, page::rec_child(parent, next)));
        // A sibling that is not cached is left alone: reading it under the
        // path's exclusive latches, for a shift the split can do without,
        // would stall every operation on the path behind a random read.
        let cached = |id: &(usize, PageId)| self.store.is_cached(id.1);
        let left = left.filter(cached);
        let right = right.filter(cached);
        if let Some((_, left_id)) = left {
            // Latch left to right: release the leaf first (nobody can reach
            // it meanwhile: its parent is latched exclusively).
            drop(path.pop());
            let guard = self.store.fix_exclusive(left_id)?;
            let leaf = self.store.fix_exclusive(child_id)?;
            path.push(leaf);
            let left = Neighbour {
                guard,
                side: Side::Left,
                sep_off: child_off,
            };
            if self.stage_shift(path, left, job, op, approve)? {
                return Ok(true);
            }
        }
        if let Some((right_off, right_id)) = right {
            let right = Neighbour {
                guard: self.store.fix_exclusive(right_id)?,
                side: Side::Right,
                sep_off: right_off,
            };
            if self.stage_shift(path, right, job, op, approve)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Moves records from the full leaf `path[last]` (new contents `job`)
    /// to its sibling `to`, so that both hold about the same bytes, and
    /// gives the parent the new separator of the right one of the two.
    /// Applied if it frees enough of the leaf and every page fits; else
    /// nothing is written and false is returned.
    fn stage_shift<'a>(
        &'a self,
        path: &mut [S::Exclusive<'a>],
        to: Neighbour<'a, S>,
        job: &Overfull,
        op: &mut OpContext,
        approve: &mut dyn FnMut() -> Option<bool>,
    ) -> Result<bool> {
        let Neighbour {
            guard: sibling,
            side,
            sep_off,
        } = to;
        let last = path.len() - 1;
        let limit = self.limit_bytes();
        let gain = limit * SHIFT_GAIN_FRACTION.0 / SHIFT_GAIN_FRACTION.1;
        // Cheap first: a sibling without the room for half the gain cannot
        // leave the leaf enough after an even share.
        if page::used_bytes(&sibling) + gain > limit {
            return Ok(false);
        }
        let Some(keep_new) = approve() else {
            return Ok(false);
        };
        let n_leaf = job.recs.len();
        if n_leaf < 2 {
            return Ok(false);
        }
        // The leaf keeps `k` records (from the left, giving the rest to its
        // right sibling; from the right, giving the first to its left
        // one), so that the two pages hold about the same bytes.
        let leaf_bytes: usize = job.recs.iter().map(RecBuf::len).sum();
        let give_bytes = leaf_bytes.saturating_sub(page::record_bytes(&sibling)) / 2;
        // The new record stays in the leaf if the policy asks for it.
        let new_idx = job.new_idx.filter(|_| keep_new);
        let k = match side {
            Side::Left => {
                let k = given_from_left(&job.recs, give_bytes);
                new_idx.map_or(k, |i| k.min(i))
            }
            Side::Right => {
                let k = n_leaf - given_from_left(job.recs.iter().rev(), give_bytes);
                new_idx.map_or(k, |i| k.max(i + 1))
            }
        }
        .clamp(1, n_leaf - 1);
        let (leaf_part, moved) = match side {
            Side::Left => (&job.recs[k..], &job.recs[..k]),
            Side::Right => (&job.recs[..k], &job.recs[k..]),
        };
        if page::image_bytes(leaf_part) + gain > limit {
            return Ok(false);
        }
        // The parent: the right page's separator becomes its new first key.
        let leaf_g = &path[last];
        let right_id = match side {
            Side::Left => leaf_g.page_id(),
            Side::Right => sibling.page_id(),
        };
        let sep = RecBuf::child(job.recs[k].key.clone(), right_id);
        let parent = &path[last - 1];
        let old_key = page::rec_key(parent, sep_off);
        let Some(parent_image) = self.with_separator(parent, old_key, &sep)? else {
            return Ok(false);
        };
        // The sibling takes the moved records in place (they are new to
        // its heap, which ranks its own records by age).
        let mut sibling_image = Scratch::of_guard(&sibling);
        for r in moved {
            if !page::has_room(&sibling_image, r.len(), limit) {
                return Ok(false);
            }
            let pr = page::probe(&sibling_image, &r.key);
            page::insert(&mut sibling_image, pr, r.borrowed());
        }
        let leaf_new = match (side, job.new_idx) {
            (Side::Left, Some(i)) => i.checked_sub(k),
            (Side::Right, Some(i)) => (i < k).then_some(i),
            (_, None) => None,
        };
        let layout = self.part_layout(leaf_g, leaf_part, leaf_new);
        let leaf_image = Scratch::rebuilt(leaf_g, &layout, leaf_part, page::HeapOrder::Kept);
        if !self.would_fit(leaf_g, &leaf_image, op)?
            || !self.would_fit(&sibling, &sibling_image, op)?
            || !self.would_fit(parent, &parent_image, op)?
        {
            return Ok(false);
        }
        let mut change = Change::new();
        change.stage(leaf_image);
        change.stage(sibling_image);
        change.stage(parent_image);
        change.held.push(sibling);
        self.apply(path, change, op)?;
        self.counters.shifts.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}

/// How many of `recs`, from the first, hold about `bytes` (the count whose
/// bytes come closest to it).
fn given_from_left<'r>(recs: impl IntoIterator<Item = &'r RecBuf>, bytes: usize) -> usize {
    let mut sum = 0;
    let mut count = 0;
    for r in recs {
        let next = sum + r.len();
        if next.abs_diff(bytes) > sum.abs_diff(bytes) {
            break;
        }
        sum = next;
        count += 1;
    }
    count
}
