//! Splits that a split in two cannot make: pages that do not compress.
//!
//! A page of incompressible records (random values) holds about a block's
//! worth of bytes, not a page's. Two things then go wrong with an ordinary
//! split in two:
//!
//! - **The halves may not fit.** When no cut into two fits (checked with
//!   [`crate::PageStore::would_fit`]), the records are packed into as many
//!   pages as they need: first `k` parts of about equal bytes for a few
//!   `k`, else greedily, the largest prefix that fits per page (a binary
//!   search over cut points). One page becomes `k`; `k - 1` separators go to
//!   the parent, which may split in turn.
//! - **The right sibling may not take its new left link.** A full sibling's
//!   block holds an older compressed image plus a full modification log:
//!   any change, even 8 bytes of link, recompresses it, and it no longer
//!   fits. Such a sibling *gives records* to the split instead: the page's
//!   records and the sibling's are packed together over the page, new pages
//!   and the sibling (which keeps its right link), and the sibling's
//!   separator in the parent moves to its new first key. Only a sibling
//!   under the same parent gives records: the split holds that parent
//!   exclusively, so no reader can be between it and the sibling (a reader
//!   waiting on the sibling under another parent would miss the records
//!   that moved). A full sibling under another parent is split on its own
//!   first, from the root, and the operation tries again
//!   (`BTree::split_alone`).
//!
//! Everything here stages images and asks `would_fit`; nothing is written
//! until the whole change is known to fit.

use crate::change::{Change, Scratch};
use crate::error::Result;
use crate::page::{self, PAGE_HEADER_BYTES, RecBuf};
use crate::store::{OpContext, PageStore, PageWrite};
use crate::tree::{BTree, SplitKind, unreachable_err};
use barracuda_base::PageId;

/// Balanced packings tried (`k`, `k + 1`, ...) before the greedy one: for
/// random records, one more page than the uncompressed bytes ask for is
/// almost always enough, so this bounds the trial compressions of a split.
const BALANCED_TRIES: usize = 3;

/// A run of records to pack into pages, and where it sits.
pub(super) struct Run<'r> {
    /// Records in key order.
    pub(super) recs: &'r [RecBuf],
    /// Index of the inserted record, if any (the parts' last insert).
    pub(super) new_idx: Option<usize>,
    /// The page that keeps the first part (the page being split); `None`
    /// for a root split, whose parts all go to new pages.
    pub(super) first: Option<PageId>,
    /// The page that keeps the last part (a right sibling that gives
    /// records); its records are `recs[from_last..]`.
    pub(super) last: Option<PageId>,
    /// `recs[..from_first]` came from `first`, `recs[from_last..]` from
    /// `last`: only there do they keep their old heap offsets.
    pub(super) from_first: usize,
    pub(super) from_last: usize,
    /// Sibling links at the two ends of the run (leaves only).
    pub(super) left_end: Option<PageId>,
    pub(super) right_end: Option<PageId>,
}

/// A packing that fits: each part's page and image, in key order.
pub(super) struct Packed {
    pub(super) pages: Vec<PageId>,
    pub(super) bounds: Vec<usize>,
    pub(super) images: Vec<Scratch>,
}

impl Packed {
    /// Separators for the parent: one per part on a page other than the
    /// run's `first` and `last`.
    pub(super) fn separators(&self, run: &Run<'_>) -> Vec<RecBuf> {
        (0..self.pages.len())
            .filter(|&i| {
                let id = Some(self.pages[i]);
                id != run.first && id != run.last
            })
            .map(|i| RecBuf::child(run.recs[self.bounds[i]].key.clone(), self.pages[i]))
            .collect()
    }

    /// Takes the new pages this packing uses out of `spare` (once the
    /// caller keeps it).
    pub(super) fn take_from(&self, spare: &mut Vec<PageId>) {
        spare.retain(|id| !self.pages.contains(id));
    }

    /// The first key of the last part (the new lower bound of `run.last`).
    pub(super) fn last_key(&self, run: &Run<'_>) -> Vec<u8> {
        run.recs[self.bounds[self.bounds.len() - 2]].key.clone()
    }
}

/// Cut points `0 = b[0] < b[1] < ... < b[k] = n` of `k` parts of about
/// equal bytes, or `None` if there are fewer than `k` records.
fn balanced_bounds(recs: &[RecBuf], k: usize) -> Option<Vec<usize>> {
    let n = recs.len();
    if k < 2 || k > n {
        return None;
    }
    let sums = super::cut::prefix_bytes(recs);
    let total = sums[n];
    let mut bounds = vec![0];
    for i in 1..k {
        let target = total * i / k;
        let lo = bounds[i - 1] + 1;
        let hi = n - (k - i);
        let cut = (lo..=hi).min_by_key(|&c| sums[c].abs_diff(target))?;
        bounds.push(cut);
    }
    bounds.push(n);
    Some(bounds)
}

impl<S: PageStore> BTree<S> {
    /// The pages the uncompressed bytes of `recs` need at least.
    fn pages_needed(&self, recs: &[RecBuf]) -> usize {
        let body = page::image_bytes(recs) - PAGE_HEADER_BYTES;
        body.div_ceil(self.limit_bytes() - PAGE_HEADER_BYTES)
    }

    /// Packs `run` into as many pages as it needs (at least `k_min`), each
    /// image checked with `would_fit` against its own page; `None` if even
    /// a page per record does not fit. New pages come from `spare` (pages
    /// this change allocated) and are allocated as needed; a caller that
    /// keeps the packing calls [`Packed::take_from`].
    pub(super) fn pack<'a>(
        &'a self,
        template: &S::Exclusive<'a>,
        run: &Run<'_>,
        k_min: usize,
        spare: &mut Vec<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Packed>> {
        let k0 = k_min.max(self.pages_needed(run.recs));
        for k in k0..k0 + BALANCED_TRIES {
            let Some(bounds) = balanced_bounds(run.recs, k) else {
                break;
            };
            if let Some(packed) = self.try_bounds(template, run, bounds, spare, change, op)? {
                return Ok(Some(packed));
            }
        }
        let Some(bounds) = self.greedy_bounds(template, run, spare, change, op)? else {
            return Ok(None);
        };
        self.try_bounds(template, run, bounds, spare, change, op)
    }

    /// Builds every part's image on its page and checks it; `None` at the
    /// first that does not fit (or exceeds the uncompressed limit).
    fn try_bounds<'a>(
        &'a self,
        template: &S::Exclusive<'a>,
        run: &Run<'_>,
        bounds: Vec<usize>,
        spare: &mut Vec<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Packed>> {
        let k = bounds.len() - 1;
        let limit = self.limit_bytes();
        if (0..k).any(|i| page::image_bytes(&run.recs[bounds[i]..bounds[i + 1]]) > limit) {
            return Ok(None);
        }
        let new_count = k - usize::from(run.first.is_some()) - usize::from(run.last.is_some());
        while spare.len() < new_count {
            let g = self.store.allocate(op)?;
            spare.push(g.page_id());
            change.allocated.push(g.page_id());
            change.held.push(g);
        }
        let mut news = spare.iter().copied();
        let pages: Vec<PageId> = (0..k)
            .map(|i| match (i, run.first, run.last) {
                (0, Some(first), _) => first,
                (i, _, Some(last)) if i + 1 == k => last,
                _ => news.next().unwrap_or(PageId(u64::MAX)),
            })
            .collect();
        let mut images = Vec::with_capacity(k);
        for i in 0..k {
            let g = self.guard_of(template, change, pages[i])?;
            let image = self.part_image(template, g, run, &bounds, &pages, i);
            if !self.would_fit(g, &image, op)? {
                return Ok(None);
            }
            images.push(image);
        }
        Ok(Some(Packed {
            pages,
            bounds,
            images,
        }))
    }

    /// The guard of `id`: the template (the page being split) or a page the
    /// change holds.
    fn guard_of<'g, 'a>(
        &self,
        template: &'g S::Exclusive<'a>,
        change: &'g Change<'a, S>,
        id: PageId,
    ) -> Result<&'g S::Exclusive<'a>> {
        if template.page_id() == id {
            return Ok(template);
        }
        change.held(id).ok_or_else(|| unreachable_err(id))
    }

    /// Part `i` of the run as an image of page `g`.
    fn part_image(
        &self,
        template: &[u8],
        g: &S::Exclusive<'_>,
        run: &Run<'_>,
        bounds: &[usize],
        pages: &[PageId],
        i: usize,
    ) -> Scratch {
        let (lo, hi) = (bounds[i], bounds[i + 1]);
        let id = pages[i];
        let part: Vec<RecBuf> = run.recs[lo..hi]
            .iter()
            .enumerate()
            .map(|(x, r)| {
                let from_here = (Some(id) == run.first && lo + x < run.from_first)
                    || (Some(id) == run.last && lo + x >= run.from_last);
                if from_here {
                    r.clone()
                } else {
                    RecBuf {
                        old_offset: None,
                        ..r.clone()
                    }
                }
            })
            .collect();
        let new_in_part = run.new_idx.filter(|x| (lo..hi).contains(x)).map(|x| x - lo);
        let mut layout = self.part_layout(template, &part, new_in_part);
        let leaf = page::is_leaf(template);
        let left = if i == 0 {
            run.left_end
        } else {
            Some(pages[i - 1])
        };
        let right = pages.get(i + 1).copied().or(run.right_end);
        layout.left = left.filter(|_| leaf);
        layout.right = right.filter(|_| leaf);
        Scratch::rebuilt(g, &layout, &part, page::HeapOrder::Kept)
    }

    /// Cut points found greedily: for each page, the largest prefix of the
    /// remaining records that fits (binary search; fit is close enough to
    /// monotone in the prefix, and [`BTree::try_bounds`] checks the result
    /// exactly). Probes compress on a new page of the change. `None` if a
    /// single record does not fit a page.
    fn greedy_bounds<'a>(
        &'a self,
        template: &S::Exclusive<'a>,
        run: &Run<'_>,
        spare: &mut Vec<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Vec<usize>>> {
        if spare.is_empty() {
            let g = self.store.allocate(op)?;
            spare.push(g.page_id());
            change.allocated.push(g.page_id());
            change.held.push(g);
        }
        let probe = spare[0];
        let n = run.recs.len();
        let mut fits = |lo: usize, hi: usize, change: &Change<'a, S>| -> Result<bool> {
            let part = &run.recs[lo..hi];
            if page::image_bytes(part) > self.limit_bytes() {
                return Ok(false);
            }
            let g = change.held(probe).ok_or_else(|| unreachable_err(probe))?;
            let layout = self.part_layout(template, part, None);
            let image = Scratch::rebuilt(g, &layout, part, page::HeapOrder::Key);
            self.would_fit(g, &image, op)
        };
        let mut bounds = vec![0];
        let mut start = 0;
        while start < n {
            if bounds.len() >= 2 && fits(start, n, change)? {
                bounds.push(n);
                return Ok(Some(bounds));
            }
            // Largest `end` in start+1..n with `fits(start, end)`; at least
            // one record must stay for a later part.
            let (mut lo, mut hi) = (start, n - 1);
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if fits(start, mid, change)? {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            if lo == start {
                return Ok(None);
            }
            bounds.push(lo);
            start = lo;
        }
        Ok(None)
    }

    /// Frees the pages this change allocated but did not use.
    pub(super) fn free_spare<'a>(
        &'a self,
        spare: Vec<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<()> {
        for id in spare {
            change.allocated.retain(|a| *a != id);
            let g = change.take_held(id).ok_or_else(|| unreachable_err(id))?;
            self.store.free(g, op)?;
        }
        Ok(())
    }

    /// The kind of a split the policy did not choose.
    pub(super) fn packed_kind(cause: Option<SplitKind>) -> SplitKind {
        cause.unwrap_or(SplitKind::CompressionFailure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recs(lens: &[usize]) -> Vec<RecBuf> {
        lens.iter()
            .enumerate()
            .map(|(i, &len)| RecBuf {
                key: vec![i as u8],
                flags: 0,
                value: vec![0; len],
                old_offset: None,
            })
            .collect()
    }

    #[test]
    fn balanced_bounds_split_bytes_evenly() {
        let r = recs(&[100; 9]);
        assert_eq!(balanced_bounds(&r, 3), Some(vec![0, 3, 6, 9]));
        assert_eq!(balanced_bounds(&r, 9).map(|b| b.len()), Some(10));
        assert_eq!(balanced_bounds(&r, 10), None);
        // One big record: the parts are non-empty even so.
        let r = recs(&[1000, 10, 10, 10]);
        assert_eq!(balanced_bounds(&r, 3), Some(vec![0, 1, 2, 4]));
    }
}
