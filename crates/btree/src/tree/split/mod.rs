//! Split staging: a full page's records are cut into parts (see [`cut`]),
//! each part's image is staged and checked against its block, and the
//! separators go up the path, which may split in turn. Pages that do not
//! compress are packed into as many pages as they need (see [`pack`]).
//! Nothing is written until the whole change is known to fit.

mod adaptive;
pub(in crate::tree) use adaptive::Outcome as AdaptiveReading;
pub(in crate::tree) mod cut;
mod pack;

use crate::change::{Change, Scratch};
use crate::error::{Error, Result};
use crate::page::{self, FLAG_GROWING, INSERT_WAS_MAX, INSERT_WAS_MIN, Layout, RecBuf};
use crate::store::{OpContext, PageStore, PageWrite};
use crate::tree::descend::right_bound;
use crate::tree::{BTree, RETRIES_MAX, SplitKind, unreachable_err};
use barracuda_base::PageId;
use std::sync::atomic::Ordering;

/// The new contents of a page that must split: its records plus the new
/// one (at `new_idx`; none when a delete splits a page that no longer fits
/// its block), and why, if not for the split policy to say.
pub(in crate::tree) struct Overfull {
    pub(in crate::tree) recs: Vec<RecBuf>,
    pub(in crate::tree) new_idx: Option<usize>,
    pub(in crate::tree) cause: Option<SplitKind>,
    /// `Adaptive`'s reading of this split, if the caller made it already
    /// (to shift instead): the split uses it rather than reading again.
    pub(in crate::tree) reading: Option<AdaptiveReading>,
}

/// What a staged split of a non-root page asks of the levels above.
struct Split {
    kind: SplitKind,
    /// Separators of the new pages, in key order, for the parent.
    seps: Vec<RecBuf>,
    /// Set when a right sibling gave records to the split.
    rebound: Option<Rebound>,
}

/// A right sibling that gave records to a split has a new first key: the
/// separator that bounds its subtree from the left, in `path[at]` (the
/// lowest common ancestor of the two leaves), must become `key`.
struct Rebound {
    at: usize,
    /// The child of `path[at]` whose separator changes.
    child: PageId,
    key: Vec<u8>,
}

/// What became of the separators handed to a page.
enum Edited {
    /// They fit in place; its new image is staged.
    Staged,
    /// They do not: the page must split with these contents.
    Split(Overfull),
}

impl<S: PageStore> BTree<S> {
    pub(in crate::tree) fn part_layout(
        &self,
        p: &[u8],
        part: &[RecBuf],
        new_in_part: Option<usize>,
    ) -> Layout {
        let mut layout = page::layout_of(p);
        layout.flags = if page::image_bytes(part) < self.threshold_bytes() {
            FLAG_GROWING
        } else {
            0
        };
        layout.last_insert = new_in_part;
        layout.insert_flags = match new_in_part {
            Some(i) => {
                let mut f = 0;
                if i + 1 == part.len() {
                    f |= INSERT_WAS_MAX;
                }
                if i == 0 {
                    f |= INSERT_WAS_MIN;
                }
                f
            }
            None => 0,
        };
        layout
    }

    /// Splits `path[i]`, whose new contents do not fit it, and carries the
    /// separators up as far as needed. Every page is staged and checked
    /// first: if some page does not fit, nothing is written, the pages
    /// allocated for the split are freed, and the error names `path[i]`;
    /// or, if only a full leaf this path does not reach stands in the way,
    /// nothing is written and a key of that leaf is returned: split it on
    /// its own ([`BTree::split_alone`]) and try again.
    pub(in crate::tree) fn split_up<'a>(
        &'a self,
        path: &mut [S::Exclusive<'a>],
        i: usize,
        job: Overfull,
        op: &mut OpContext,
    ) -> Result<Option<Vec<u8>>> {
        let page_id = path[i].page_id();
        let mut change = Change::new();
        match self.stage_splits(path, i, job, &mut change, op) {
            Ok(Some(kinds)) => {
                self.apply(path, change, op)?;
                for (kind, root) in kinds {
                    self.count_split(kind);
                    if root {
                        self.counters.split_root.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(None)
            }
            Ok(None) => {
                let first = change.split_first.take();
                self.abandon(change, op)?;
                match first {
                    Some(key) => Ok(Some(key)),
                    None => Err(Error::CompressionUnfit { page_id }),
                }
            }
            Err(e) => {
                // The first error is the one to report; pages the abandoned
                // split could not free stay allocated.
                let _ = self.abandon(change, op);
                Err(e)
            }
        }
    }

    /// Stages the split of `path[j]` and of every ancestor the separators
    /// do not fit; the kinds of the splits (and whether each was the
    /// root's), or `None` if some split cannot be made to fit.
    fn stage_splits<'a>(
        &'a self,
        path: &[S::Exclusive<'a>],
        mut j: usize,
        mut job: Overfull,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Vec<(SplitKind, bool)>>> {
        let mut kinds = Vec::new();
        // A separator an ancestor owes a right sibling that gave records.
        let mut rebound: Option<Rebound> = None;
        loop {
            if self.stage_compacted(&path[j], &job, change, op)? {
                // No split at this level, so no separators for the parent;
                // only a separator owed higher up is left to stage.
                let Some(rb) = &rebound else {
                    return Ok(Some(kinds));
                };
                j = rb.at;
                match self.stage_edits(&path[j], &[], rebound.as_ref(), change, op)? {
                    Edited::Staged => return Ok(Some(kinds)),
                    Edited::Split(next) => {
                        rebound = None;
                        job = next;
                        continue;
                    }
                }
            }
            if job.recs.len() < 2 {
                return Ok(None);
            }
            if path[j].page_id() == self.root {
                let Some(kind) = self.stage_root_split(&path[j], &job, change, op)? else {
                    return Ok(None);
                };
                kinds.push((kind, true));
                return Ok(Some(kinds));
            }
            if j == 0 {
                // Only a page judged safe is latched without its parent, and
                // a safe page does not split (unless the store is compressed
                // while the tree is not configured so).
                return Ok(None);
            }
            let Some(split) = self.stage_split(path, j, &job, change, op)? else {
                return Ok(None);
            };
            kinds.push((split.kind, false));
            if split.rebound.is_some() {
                rebound = split.rebound;
            }
            j -= 1;
            let mut seps = split.seps;
            // Hand the separators to the parent, and the rebound to the
            // ancestor that holds it, in place while they fit.
            loop {
                let owed = rebound.as_ref().filter(|rb| rb.at == j);
                let edited = self.stage_edits(&path[j], &seps, owed, change, op)?;
                if owed.is_some() {
                    rebound = None;
                }
                match (edited, &rebound) {
                    (Edited::Staged, None) => return Ok(Some(kinds)),
                    (Edited::Staged, Some(rb)) => {
                        j = rb.at;
                        seps = Vec::new();
                    }
                    (Edited::Split(next), _) => {
                        job = next;
                        break;
                    }
                }
            }
        }
    }

    /// Stages `g` rebuilt from the job's records if the job is a page that
    /// did not fit its block (`SplitKind::CompressionFailure`) and the
    /// rebuilt image does: true if it did. A page's heap keeps the bytes of
    /// removed and replaced records until it is compacted, and those bytes
    /// are compressed with it; random values replaced in place fill a page
    /// with such garbage until the page no longer compresses into its block
    /// although its live records would. Rebuilding drops the garbage, as
    /// InnoDB reorganizes a page before it splits it; a page of one record
    /// has no other way to fit.
    fn stage_compacted<'a>(
        &'a self,
        g: &S::Exclusive<'a>,
        job: &Overfull,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<bool> {
        if job.cause != Some(SplitKind::CompressionFailure)
            || job.recs.is_empty()
            || page::image_bytes(&job.recs) > self.limit_bytes()
        {
            return Ok(false);
        }
        let layout = self.part_layout(g, &job.recs, job.new_idx);
        let image = Scratch::rebuilt(g, &layout, &job.recs, page::HeapOrder::Kept);
        if !self.would_fit(g, &image, op)? {
            return Ok(false);
        }
        change.stage(image);
        Ok(true)
    }

    /// Stages `seps` (and the rebound `owed`, if any) into `g` in place;
    /// if they do not fit, the split job `g` becomes instead.
    fn stage_edits<'a>(
        &'a self,
        g: &S::Exclusive<'a>,
        seps: &[RecBuf],
        owed: Option<&Rebound>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Edited> {
        let limit = self.limit_bytes();
        let mut image = Scratch::of_guard(g);
        let mut room = true;
        if let Some(rb) = owed {
            let off = page::records(&image)
                .find(|&o| page::rec_child(&image, o) == rb.child)
                .ok_or_else(|| unreachable_err(rb.child))?;
            let pr = page::probe(&image, page::rec_key(&image, off));
            page::remove(&mut image, pr);
            let rec = RecBuf::child(rb.key.clone(), rb.child);
            room = page::has_room(&image, rec.len(), limit);
            if room {
                let pr = page::probe(&image, &rec.key);
                page::insert(&mut image, pr, rec.borrowed());
            }
        }
        for sep in seps {
            room = room && page::has_room(&image, sep.len(), limit);
            if room {
                let pr = page::probe(&image, &sep.key);
                debug_assert_eq!(pr.found, 0, "separator already in parent");
                page::insert(&mut image, pr, sep.borrowed());
            }
        }
        let mut cause = None;
        if room {
            if self.would_fit(g, &image, op)? {
                change.stage(image);
                return Ok(Edited::Staged);
            }
            cause = Some(SplitKind::CompressionFailure);
        }
        let mut recs = page::read_all(g);
        if let Some(rb) = owed
            && let Some(r) = recs
                .iter_mut()
                .skip(1)
                .find(|r| r.value == rb.child.0.to_le_bytes())
        {
            r.key.clone_from(&rb.key);
        }
        let mut new_idx = None;
        for sep in seps {
            let at = 1 + recs[1..].partition_point(|r| r.key < sep.key);
            recs.insert(at, sep.clone());
            new_idx = Some(at);
        }
        Ok(Edited::Split(Overfull {
            recs,
            new_idx,
            cause,
            reading: None,
        }))
    }

    /// Stages the split of the non-root leaf or internal page `path[j]`:
    /// into itself and a new right sibling at a cut of the split policy if
    /// one fits, else into as many pages as it needs (see [`split`]). A
    /// leaf whose right sibling cannot take its new left link packs that
    /// sibling's records too if it is under the same parent, else sets
    /// `change.split_first` to have it split on its own first. `None` if
    /// nothing fits.
    fn stage_split<'a>(
        &'a self,
        path: &[S::Exclusive<'a>],
        j: usize,
        job: &Overfull,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Split>> {
        let old = &path[j];
        let leaf = page::is_leaf(old);
        let n = self.store.allocate(op)?;
        let n_id = n.page_id();
        change.allocated.push(n_id);
        change.held.push(n);
        let mut spare = vec![n_id];
        let rr = if leaf { page::right(old) } else { None };
        let mut rr_takes_link = true;
        if let Some(rr) = rr {
            // Left to right: the new page, then the old right sibling.
            let g = self.store.fix_exclusive(rr)?;
            let mut image = Scratch::of_guard(&g);
            page::set_left(&mut image, Some(n_id));
            rr_takes_link = self.would_fit(&g, &image, op)?;
            change.held.push(g);
            if rr_takes_link {
                change.stage(image);
            }
        }
        if rr_takes_link {
            if let Some(split) = self.stage_split_two(old, job, n_id, rr, change, op)? {
                return Ok(Some(split));
            }
            let split = self.stage_split_many(old, job, rr, &mut spare, change, op)?;
            self.free_spare(spare, change, op)?;
            // If the page's own records cannot be packed, neither can they
            // with the sibling's.
            return Ok(split);
        }
        let Some(rr) = rr else {
            return Ok(None);
        };
        let Some((at, child)) = right_bound(path, j) else {
            return Ok(None);
        };
        if at + 1 != j {
            // `rr` is under another parent, which this split does not hold:
            // a reader latched on it may be waiting for `rr`, and would miss
            // the records `rr` gave away (and taking that parent would latch
            // bottom-up). Instead, the caller splits `rr` on its own, from
            // the root, and tries again.
            let g = change.held(rr).ok_or_else(|| unreachable_err(rr))?;
            change.split_first = page::records(g)
                .next()
                .map(|o| page::rec_key(g, o).to_vec());
            return Ok(None);
        }
        let bound = Rebound {
            at,
            child,
            key: Vec::new(),
        };
        let split = self.stage_split_absorbing(old, job, rr, bound, &mut spare, change, op)?;
        self.free_spare(spare, change, op)?;
        Ok(split)
    }

    /// The split of `old` into itself and the new page `n_id` at a cut of
    /// the split policy (or the middle, or any cut) that fits; `rr` took its
    /// new left link already.
    fn stage_split_two<'a>(
        &'a self,
        old: &S::Exclusive<'a>,
        job: &Overfull,
        n_id: PageId,
        rr: Option<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Split>> {
        let recs = &job.recs;
        let (cuts, policy_kind) = self.cuts(old, job, op);
        let leaf = page::is_leaf(old);
        for (k, &cut) in cuts.iter().enumerate() {
            let (l, r) = recs.split_at(cut);
            let n = change.held(n_id).ok_or_else(|| unreachable_err(n_id))?;
            let mut rl = self.part_layout(old, r, job.new_idx.and_then(|x| x.checked_sub(cut)));
            rl.left = leaf.then_some(old.page_id());
            rl.right = rr;
            let right = Scratch::rebuilt(n, &rl, r, page::HeapOrder::Key);
            let mut ll = self.part_layout(old, l, job.new_idx.filter(|&x| x < cut));
            ll.right = leaf.then_some(n_id);
            let left = Scratch::rebuilt(old, &ll, l, page::HeapOrder::Kept);
            if !self.would_fit(n, &right, op)? || !self.would_fit(old, &left, op)? {
                continue;
            }
            change.stage(right);
            change.stage(left);
            let kind = job
                .cause
                .unwrap_or(if k == 0 { policy_kind } else { SplitKind::Half });
            let seps = vec![RecBuf::child(r[0].key.clone(), n_id)];
            return Ok(Some(Split {
                kind,
                seps,
                rebound: None,
            }));
        }
        Ok(None)
    }

    /// The split of `old` into three or more pages, when no cut into two
    /// fits; the old right sibling `rr` (if any) takes its new left link.
    fn stage_split_many<'a>(
        &'a self,
        old: &S::Exclusive<'a>,
        job: &Overfull,
        rr: Option<PageId>,
        spare: &mut Vec<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Split>> {
        let leaf = page::is_leaf(old);
        let run = pack::Run {
            recs: &job.recs,
            new_idx: job.new_idx,
            first: Some(old.page_id()),
            last: None,
            from_first: job.recs.len(),
            from_last: job.recs.len(),
            left_end: page::left(old).filter(|_| leaf),
            right_end: rr,
        };
        let Some(packed) = self.pack(old, &run, 3, spare, change, op)? else {
            return Ok(None);
        };
        packed.take_from(spare);
        if let Some(rr) = rr {
            let last = packed.pages[packed.pages.len() - 1];
            let g = change.held(rr).ok_or_else(|| unreachable_err(rr))?;
            let mut image = Scratch::of_guard(g);
            page::set_left(&mut image, Some(last));
            if !self.would_fit(g, &image, op)? {
                // Its pages go back to the spares, for the caller's next try.
                spare.extend(packed.pages[1..].iter().copied());
                return Ok(None);
            }
            change.stage(image);
        }
        let seps = packed.separators(&run);
        for image in packed.images {
            change.stage(image);
        }
        self.counters.split_many.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Split {
            kind: Self::packed_kind(job.cause),
            seps,
            rebound: None,
        }))
    }

    /// The split of leaf `old` whose right sibling `rr` (held by the change)
    /// cannot take a new left link: both pages' records are packed over
    /// `old`, new pages and `rr`, and `bound` gets `rr`'s new first key.
    #[allow(
        clippy::too_many_arguments,
        reason = "the split's pages, owed bound and change, as the callers hold them"
    )]
    fn stage_split_absorbing<'a>(
        &'a self,
        old: &S::Exclusive<'a>,
        job: &Overfull,
        rr: PageId,
        mut bound: Rebound,
        spare: &mut Vec<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<Split>> {
        let g = change.held(rr).ok_or_else(|| unreachable_err(rr))?;
        let mut recs = job.recs.clone();
        recs.extend(page::read_all(g));
        let run = pack::Run {
            recs: &recs,
            new_idx: job.new_idx,
            first: Some(old.page_id()),
            last: Some(rr),
            from_first: job.recs.len(),
            from_last: job.recs.len(),
            left_end: page::left(old),
            right_end: page::right(g),
        };
        let Some(packed) = self.pack(old, &run, 3, spare, change, op)? else {
            return Ok(None);
        };
        packed.take_from(spare);
        let seps = packed.separators(&run);
        bound.key = packed.last_key(&run);
        for image in packed.images {
            change.stage(image);
        }
        self.counters
            .split_absorbing
            .fetch_add(1, Ordering::Relaxed);
        Ok(Some(Split {
            kind: Self::packed_kind(job.cause),
            seps,
            rebound: Some(bound),
        }))
    }

    fn count_split(&self, kind: SplitKind) {
        let c = match kind {
            SplitKind::Half => &self.counters.split_half,
            SplitKind::Sequential => &self.counters.split_sequential,
            SplitKind::CompressionFailure => &self.counters.split_compression,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Stages a root split: the root's contents move into two new children
    /// and the root page becomes their parent, keeping its id. The split's
    /// kind, or `None` if no cut fits.
    fn stage_root_split<'a>(
        &'a self,
        root: &S::Exclusive<'a>,
        job: &Overfull,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<SplitKind>> {
        let recs = &job.recs;
        let (cuts, policy_kind) = self.cuts(root, job, op);
        let leaf = page::is_leaf(root);
        let level = page::level(root);
        let mut ids = [root.page_id(); 2];
        for id in &mut ids {
            let g = self.store.allocate(op)?;
            *id = g.page_id();
            change.allocated.push(*id);
            change.held.push(g);
        }
        let [l_id, r_id] = ids;
        for (k, &cut) in cuts.iter().enumerate() {
            let (l, r) = recs.split_at(cut);
            let mut ll = self.part_layout(root, l, job.new_idx.filter(|&x| x < cut));
            ll.left = None;
            ll.right = leaf.then_some(r_id);
            let mut rl = self.part_layout(root, r, job.new_idx.and_then(|x| x.checked_sub(cut)));
            rl.left = leaf.then_some(l_id);
            rl.right = None;
            let lg = change.held(l_id).ok_or_else(|| unreachable_err(l_id))?;
            let rg = change.held(r_id).ok_or_else(|| unreachable_err(r_id))?;
            let left = Scratch::rebuilt(lg, &ll, l, page::HeapOrder::Key);
            let right = Scratch::rebuilt(rg, &rl, r, page::HeapOrder::Key);
            let top = [
                RecBuf::child(Vec::new(), l_id),
                RecBuf::child(r[0].key.clone(), r_id),
            ];
            let layout = Layout::new_root(level + 1);
            let top_image = Scratch::rebuilt(root, &layout, &top, page::HeapOrder::Kept);
            if !self.would_fit(lg, &left, op)?
                || !self.would_fit(rg, &right, op)?
                || !self.would_fit(root, &top_image, op)?
            {
                continue;
            }
            change.stage(left);
            change.stage(right);
            change.stage(top_image);
            let kind = job
                .cause
                .unwrap_or(if k == 0 { policy_kind } else { SplitKind::Half });
            return Ok(Some(kind));
        }
        self.stage_root_split_many(root, job, ids.to_vec(), change, op)
    }

    /// A root split into three or more children, when no cut into two fits
    /// (`spare`: the two pages allocated for a split in two).
    fn stage_root_split_many<'a>(
        &'a self,
        root: &S::Exclusive<'a>,
        job: &Overfull,
        mut spare: Vec<PageId>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<Option<SplitKind>> {
        let run = pack::Run {
            recs: &job.recs,
            new_idx: job.new_idx,
            first: None,
            last: None,
            from_first: 0,
            from_last: job.recs.len(),
            left_end: None,
            right_end: None,
        };
        let Some(packed) = self.pack(root, &run, 3, &mut spare, change, op)? else {
            return Ok(None);
        };
        let mut top: Vec<RecBuf> = packed.separators(&run);
        top[0].key.clear();
        let layout = Layout::new_root(page::level(root) + 1);
        let top_image = Scratch::rebuilt(root, &layout, &top, page::HeapOrder::Kept);
        if !self.would_fit(root, &top_image, op)? {
            return Ok(None);
        }
        packed.take_from(&mut spare);
        for image in packed.images {
            change.stage(image);
        }
        change.stage(top_image);
        self.free_spare(spare, change, op)?;
        self.counters.split_many.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Self::packed_kind(job.cause)))
    }

    /// Splits the leaf covering `first` on its own, in `op`: a full leaf
    /// whose neighbour's split could not change it. Its contents stay; only
    /// the tree's shape changes. Splitting it may first need its own right
    /// neighbour split, and so on, at most [`RETRIES_MAX`] leaves.
    pub(in crate::tree) fn split_alone(&self, op: &mut OpContext, first: Vec<u8>) -> Result<()> {
        let mut todo = vec![first];
        for _ in 0..RETRIES_MAX {
            let Some(key) = todo.last() else {
                return Ok(());
            };
            let mut path = self.path_exclusive(key, true, |_| false)?;
            let last = path.len() - 1;
            let recs = page::read_all(&path[last]);
            if recs.len() < 2 || path[last].page_id() == self.root {
                todo.pop();
                continue;
            }
            let job = Overfull {
                recs,
                new_idx: None,
                cause: Some(SplitKind::CompressionFailure),
                reading: None,
            };
            match self.split_up(&mut path, last, job, op)? {
                None => {
                    self.counters.split_alone.fetch_add(1, Ordering::Relaxed);
                    todo.pop();
                }
                Some(next) => todo.push(next),
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        Err(Error::CompressionUnfit { page_id: self.root })
    }
}
