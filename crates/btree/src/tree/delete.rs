//! Delete and rebalance: an underfull page merges with a sibling or takes
//! records from it, and the root collapses when it has one child left.

use crate::change::{Change, Scratch};
use crate::error::{Error, Result};
use crate::page::{self, FLAG_GROWING, RecBuf};
use crate::store::{OpContext, PageStore, PageWrite};
use crate::tree::overflow::overflow_chain;
use crate::tree::split::Overfull;
use crate::tree::split::cut::fraction_cut;
use crate::tree::{
    Attempt, BTree, RETRIES_MAX, SplitKind, check_key, expect_node, unreachable_err,
};
use barracuda_base::PageId;
use std::sync::atomic::Ordering;

/// The sibling an underfull child is rebalanced with
/// ([`BTree::merge_sibling`]).
enum Sibling {
    /// The next child: its page and its record in the parent (whose key is
    /// the separator).
    Right { off: usize, id: PageId },
    /// The child before (the underfull child is the parent's last): its
    /// page, and the underfull child's record in the parent.
    Left { id: PageId, child_off: usize },
}

/// Two adjacent children of one parent being rebalanced: their records in
/// order (the right one's first key restored from the separator) and the
/// separator between them.
struct Siblings<'g, 'a, S: PageStore + 'a> {
    left: &'g S::Exclusive<'a>,
    right: &'g S::Exclusive<'a>,
    recs: &'g [RecBuf],
    sep_key: &'g [u8],
}

impl<S: PageStore> BTree<S> {
    /// Deletes `key`; true if it was present.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let mut op = OpContext::new();
        let result = self.delete_in(&mut op, key);
        let settled = self.settle_entry_count(&mut op);
        self.store.finish_op(op);
        let existed = result?;
        settled?;
        Ok(existed)
    }

    /// [`BTree::delete`] within the caller's operation context.
    pub fn delete_in(&self, op: &mut OpContext, key: &[u8]) -> Result<bool> {
        let mut removed = self.remove(op, key);
        if self.config.compressed
            && !op.exact_fit
            && matches!(removed, Err(Error::CompressionUnfit { .. }))
        {
            // As an insert's (`BTree::insert_in`): once more without the
            // store's guesses, which may have refused every split.
            op.exact_fit = true;
            removed = self.remove(op, key);
            op.exact_fit = false;
        }
        let existed = removed?;
        if existed {
            // Counted in the same operation when it settles.
            op.entry_delta -= 1;
        }
        Ok(existed)
    }

    /// Removes `key` if present: optimistically from its leaf, else on an
    /// exclusively latched path, rebalancing as needed. True if it was
    /// present.
    fn remove(&self, op: &mut OpContext, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        {
            let (mut leaf, hint) = self.leaf_exclusive(key)?;
            let pr = page::probe_in(&leaf, key, hint.span.as_ref());
            if pr.found == 0 {
                return Ok(false);
            }
            let len = page::rec_len(&leaf, pr.found);
            let stays_full = page::used_bytes(&leaf) - len >= self.threshold_bytes();
            let root = leaf.page_id() == self.root;
            if root || stays_full || (hint.right_in_parent && self.stays_unmerged(&leaf, len)?) {
                let chain = overflow_chain(&leaf, pr.found);
                crate::recipe::remove_logged(&mut leaf, pr, key, |p| {
                    if root || stays_full {
                        page::flags(p) & !FLAG_GROWING
                    } else {
                        page::flags(p) | FLAG_GROWING
                    }
                });
                // A delete leaves its record's bytes in the heap: the page's
                // sparse image does not shrink, and a page that was fuller
                // than its block must compress to take the change. If it
                // cannot, the path below compacts it.
                if self.try_commit(&mut leaf, op) {
                    self.free_chain_of(op, chain)?;
                    return Ok(true);
                }
            }
        }
        for _ in 0..RETRIES_MAX {
            let mut path =
                self.path_exclusive(key, self.config.compressed, |p| self.safe_for_delete(p))?;
            match self.delete_on_path(&mut path, op, key)? {
                Attempt::Done(existed) => return Ok(existed),
                Attempt::SplitFirst(first) => {
                    drop(path);
                    self.split_alone(op, first)?;
                }
            }
        }
        Err(Error::CompressionUnfit { page_id: self.root })
    }

    /// Whether the pessimistic path would leave `leaf`, once `len` bytes of
    /// record are removed from it, as it is (underfull, marked growing):
    /// no redistribution is due, and its right neighbour (its merge
    /// sibling, when the parent has a child after it) holds too many
    /// records for both to fit one page ([`BTree::merge_may_fit`]).
    /// [`BTree::rebalance_child`]'s first test, made with the leaf's right neighbour latched shared (left to
    /// right, the latch order) instead of the whole path exclusively: most
    /// deletes from an underfull leaf find no merge that fits, and latching
    /// the whole path for each of them would serialise them for nothing.
    fn stays_unmerged(&self, leaf: &S::Exclusive<'_>, len: usize) -> Result<bool> {
        // A removal can also drop two directory slots.
        let used_after = page::used_bytes(leaf) - len - 2 * page::SLOT_BYTES;
        if used_after < self.redistribution_bytes() {
            return Ok(false);
        }
        let Some(right_id) = page::right(leaf) else {
            return Ok(false);
        };
        let right = self.store.fix_shared(right_id)?;
        expect_node(&right, right_id)?;
        let records_bytes = page::record_bytes(leaf) - len + page::record_bytes(&right);
        Ok(!self.merge_may_fit(records_bytes))
    }

    /// Whether two siblings holding `records_bytes` of records together may
    /// merge: a merged page holds at least those records and a header (its
    /// directory comes on top, checked once the records are copied).
    fn merge_may_fit(&self, records_bytes: usize) -> bool {
        page::PAGE_HEADER_BYTES + records_bytes <= self.limit_bytes()
    }

    fn delete_on_path<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        op: &mut OpContext,
        key: &[u8],
    ) -> Result<Attempt> {
        let last = path.len() - 1;
        let leaf = &mut path[last];
        let pr = page::probe(leaf, key);
        if pr.found == 0 {
            return Ok(Attempt::Done(false));
        }
        let chain = overflow_chain(leaf, pr.found);
        // A page left underfull is marked in the same commit, so that a
        // rebalance that cannot be made leaves a valid tree behind.
        let root = leaf.page_id() == self.root;
        let threshold = self.threshold_bytes();
        let flags = crate::recipe::remove_logged(leaf, pr, key, |p| {
            if !root && page::used_bytes(p) < threshold {
                page::flags(p) | FLAG_GROWING
            } else {
                page::flags(p) & !FLAG_GROWING
            }
        });
        if !self.try_commit(leaf, op) {
            // Removing a record can make the page compress worse, or meet a
            // full modification log: rebuild it compactly, which drops the
            // removed bytes.
            let recs: Vec<RecBuf> = page::read_all(leaf)
                .into_iter()
                .filter(|r| r.key != key)
                .collect();
            let mut layout = page::layout_of(leaf);
            layout.flags = flags;
            page::compact(leaf, &layout, &recs, page::HeapOrder::Key);
            if !self.commit(leaf, op) {
                // Not even the compact page fits its block: split it, as an
                // insert would (nothing is committed if that fails too).
                let job = Overfull {
                    recs,
                    new_idx: None,
                    cause: Some(SplitKind::CompressionFailure),
                    reading: None,
                };
                if let Some(first) = self.split_up(path, last, job, op)? {
                    return Ok(Attempt::SplitFirst(first));
                }
                self.free_chain_of(op, chain)?;
                return Ok(Attempt::Done(true));
            }
        }
        self.rebalance_up(path, last, key, op)?;
        self.free_chain_of(op, chain)?;
        Ok(Attempt::Done(true))
    }

    /// Rebalances `path[i]` (just left underfull by this operation) and, as
    /// long as each rebalance leaves the parent underfull, the parent. Never
    /// fails for want of space: a rebalance that does not fit is skipped,
    /// and the page keeps the `FLAG_GROWING` mark it was committed with.
    fn rebalance_up<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        mut i: usize,
        key: &[u8],
        op: &mut OpContext,
    ) -> Result<()> {
        loop {
            if path[i].page_id() == self.root {
                return self.collapse_root(&mut path[i], op);
            }
            let g = &path[i];
            if page::used_bytes(g) >= self.threshold_bytes() {
                return Ok(());
            }
            if i == 0 {
                // Only a page judged safe is left without its parent, and a
                // safe page does not fall below the threshold.
                debug_assert!(false, "{} underflowed without its parent", g.page_id());
                return Ok(());
            }
            if !self.rebalance_child(path, i, key, op)? {
                return Ok(());
            }
            path.truncate(i);
            i -= 1;
        }
    }

    /// Fixes an underfull `path[i]` with a sibling under `path[i - 1]`: merge
    /// if both fit one page; else, if the page fell below half the
    /// threshold, redistribute; else leave it underfull with its
    /// `FLAG_GROWING` mark (see [`BTree::redistribution_bytes`]). True if the
    /// parent changed and should be looked at next (it was not already
    /// marked growing).
    fn rebalance_child<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        i: usize,
        key: &[u8],
        op: &mut OpContext,
    ) -> Result<bool> {
        let child_id = path[i].page_id();
        let redistribute = page::used_bytes(&path[i]) < self.redistribution_bytes();
        let Some(siblings) = Self::merge_sibling(&path[i - 1], key, child_id)? else {
            // No sibling: the page stays as committed, marked growing.
            return Ok(false);
        };
        // Latch siblings left to right: with the right sibling, keep the
        // child; with the left one, release the child first (nobody can reach
        // it meanwhile: its parent is latched exclusively).
        let (left, right, right_off) = match siblings {
            Sibling::Right { off, id } => {
                let right = self.store.fix_exclusive(id)?;
                let left = path.pop().ok_or_else(|| unreachable_err(child_id))?;
                (left, right, off)
            }
            Sibling::Left { id, child_off } => {
                drop(path.pop());
                let left = self.store.fix_exclusive(id)?;
                let right = self.store.fix_exclusive(child_id)?;
                (left, right, child_off)
            }
        };
        // When no merge can fit and no redistribution is due, stop before
        // copying the records (a page left this way is retried on each
        // delete that reaches this path).
        let records_bytes = page::record_bytes(&left) + page::record_bytes(&right);
        if !redistribute && !self.merge_may_fit(records_bytes) {
            return Ok(false);
        }
        let parent = &path[i - 1];
        let parent_was_growing = page::flags(parent) & FLAG_GROWING != 0;
        let sep_key = page::rec_key(parent, right_off).to_vec();
        let mut recs = page::read_all(&left);
        // The right page's records are new to the left one: after its own,
        // in key order.
        let mut right_recs = page::read_all(&right);
        for r in &mut right_recs {
            r.old_offset = None;
        }
        if let Some(first) = right_recs.first_mut()
            && !page::is_leaf(&right)
        {
            first.key.clone_from(&sep_key);
        }
        recs.append(&mut right_recs);
        let pair = Siblings {
            left: &left,
            right: &right,
            recs: &recs,
            sep_key: &sep_key,
        };
        let mut change = Change::new();
        let merge = page::image_bytes(&recs) <= self.limit_bytes();
        if !merge && !redistribute {
            return Ok(false);
        }
        let staged = if merge {
            self.stage_merge(parent, &pair, &mut change, op)?
        } else {
            self.stage_redistribute(parent, &pair, &mut change, op)?
        };
        if !staged {
            // Nothing was written; the child keeps its growing mark.
            return Ok(false);
        }
        change.held.push(left);
        change.held.push(right);
        self.apply(&mut path[..i], change, op)?;
        let counter = if merge {
            &self.counters.merges
        } else {
            &self.counters.redistributions
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(!parent_was_growing)
    }

    /// The sibling of `child_id` that [`BTree::rebalance_child`] merges it
    /// with, under `parent`, whose child covering `key` it is: the next
    /// child, else the one before (the last child), else none. The child's
    /// record is found by a probe, not a walk over the parent's hundreds
    /// of records; only the last child walks, to find its predecessor.
    fn merge_sibling(
        parent: &S::Exclusive<'_>,
        key: &[u8],
        child_id: PageId,
    ) -> Result<Option<Sibling>> {
        let (child_off, id) = page::child_for(parent, key);
        if id != child_id {
            return Err(Error::Corrupted {
                page_id: parent.page_id(),
                reason: format!("does not point to its child {child_id}"),
            });
        }
        let next = page::rec_next(parent, child_off);
        if next != 0 {
            let id = page::rec_child(parent, next);
            return Ok(Some(Sibling::Right { off: next, id }));
        }
        let before = page::records(parent)
            .take_while(|&off| off != child_off)
            .last();
        Ok(before.map(|off| Sibling::Left {
            id: page::rec_child(parent, off),
            child_off,
        }))
    }

    /// Stages the merge of `pair.right` into `pair.left`: the left page's
    /// new image, the right-right sibling's left link, and the parent
    /// without the separator; the right page is freed once applied. False if
    /// some page would not fit.
    fn stage_merge<'a>(
        &'a self,
        parent: &S::Exclusive<'a>,
        pair: &Siblings<'_, 'a, S>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<bool> {
        let (left, right) = (pair.left, pair.right);
        let leaf = page::is_leaf(left);
        let mut layout = page::layout_of(left);
        layout.right = if leaf { page::right(right) } else { None };
        layout.flags = if page::image_bytes(pair.recs) < self.threshold_bytes() {
            FLAG_GROWING
        } else {
            0
        };
        let left_image = Scratch::rebuilt(left, &layout, pair.recs, page::HeapOrder::Kept);
        if !self.would_fit(left, &left_image, op)? {
            return Ok(false);
        }
        if let (true, Some(rr)) = (leaf, page::right(right)) {
            let g = self.store.fix_exclusive(rr)?;
            let mut image = Scratch::of_guard(&g);
            page::set_left(&mut image, Some(left.page_id()));
            let fits = self.would_fit(&g, &image, op)?;
            change.held.push(g);
            if !fits {
                return Ok(false);
            }
            change.stage(image);
        }
        let mut parent_image = Scratch::of_guard(parent);
        let pr = page::probe(&parent_image, pair.sep_key);
        debug_assert_ne!(pr.found, 0, "separator of merged child missing");
        page::remove(&mut parent_image, pr);
        self.mark_if_sparse(&mut parent_image);
        if !self.would_fit(parent, &parent_image, op)? {
            return Ok(false);
        }
        change.stage(left_image);
        change.stage(parent_image);
        change.to_free.push(right.page_id());
        Ok(true)
    }

    /// Stages a redistribution of `pair.recs` between the two siblings, by
    /// bytes, and the parent's new separator. False if the parent has no
    /// room for the new separator (a delete never splits) or some page would
    /// not fit.
    fn stage_redistribute<'a>(
        &'a self,
        parent: &S::Exclusive<'a>,
        pair: &Siblings<'_, 'a, S>,
        change: &mut Change<'a, S>,
        op: &mut OpContext,
    ) -> Result<bool> {
        let (left, right, recs) = (pair.left, pair.right, pair.recs);
        let cut = fraction_cut(recs, 1, 2);
        let new_sep = RecBuf::child(recs[cut].key.clone(), right.page_id());
        // A delete never splits: no room for the new separator, no
        // redistribution.
        let Some(parent_image) = self.with_separator(parent, pair.sep_key, &new_sep)? else {
            return Ok(false);
        };
        let (l, r) = recs.split_at(cut);
        let images = [(left, l), (right, r)].map(|(g, part)| {
            let mut layout = page::layout_of(g);
            layout.flags = if page::image_bytes(part) < self.threshold_bytes() {
                FLAG_GROWING
            } else {
                0
            };
            Scratch::rebuilt(g, &layout, part, page::HeapOrder::Kept)
        });
        let [left_image, right_image] = images;
        if !self.would_fit(left, &left_image, op)?
            || !self.would_fit(right, &right_image, op)?
            || !self.would_fit(parent, &parent_image, op)?
        {
            return Ok(false);
        }
        change.stage(left_image);
        change.stage(right_image);
        change.stage(parent_image);
        Ok(true)
    }

    /// While the root is internal with a single child, pulls that child's
    /// contents into the root (the root keeps its id) and frees the child.
    /// A root whose block cannot take the child's contents keeps its single
    /// child (a valid tree, one level taller than needed).
    fn collapse_root<G: PageWrite>(&self, root: &mut G, op: &mut OpContext) -> Result<()> {
        while !page::is_leaf(root) && page::record_count(root) == 1 {
            let child_id = page::rec_child(root, page::first_record(root));
            let child = self.store.fix_exclusive(child_id)?;
            let recs = page::read_all(&child);
            let mut layout = page::layout_of(&child);
            layout.flags = 0;
            layout.left = None;
            layout.right = None;
            page::compact(root, &layout, &recs, page::HeapOrder::Key);
            if !self.commit(root, op) {
                return Ok(());
            }
            self.store.free(child, op)?;
        }
        Ok(())
    }
}
