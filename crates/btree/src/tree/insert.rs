//! Insert: the optimistic try within one leaf, then the exclusively latched
//! path that the split staging works on.

use crate::error::{Error, Result};
use crate::page::{self, FLAG_GROWING, REC_OVERFLOW, RecBuf};
use crate::store::{OpContext, PageStore, PageWrite};
use crate::tree::overflow::{decode_overflow_ref, overflow_chain};
use crate::tree::split::{Overfull, cut};
use crate::tree::{Attempt, BTree, LeafOutcome, RETRIES_MAX, SplitKind, check_key, check_value};

impl<S: PageStore> BTree<S> {
    /// Inserts or replaces `key`; true if it replaced a value.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        let mut op = OpContext::new();
        let result = self.insert_in(&mut op, key, value);
        let settled = self.settle_entry_count(&mut op);
        self.store.finish_op(op);
        let existed = result?;
        settled?;
        Ok(existed)
    }

    /// [`BTree::insert`] within the caller's operation context (for a caller
    /// that logs several tree operations as one group).
    pub fn insert_in(&self, op: &mut OpContext, key: &[u8], value: &[u8]) -> Result<bool> {
        check_key(key)?;
        check_value(value)?;
        let result = self.insert_fitting(op, key, value);
        if self.config.compressed
            && !op.exact_fit
            && matches!(result, Err(Error::CompressionUnfit { .. }))
        {
            // The store's guesses that compression could not make a page
            // fit (`OpContext::exact_fit`) may have refused every way to
            // split; the failed try changed no contents.
            op.exact_fit = true;
            let result = self.insert_fitting(op, key, value);
            op.exact_fit = false;
            return result;
        }
        result
    }

    /// [`BTree::insert_in`] of a checked key and value: inline, or with
    /// the value in overflow pages when the record fits no block inline.
    fn insert_fitting(&self, op: &mut OpContext, key: &[u8], value: &[u8]) -> Result<bool> {
        match self.insert_encoded(op, key, value, true) {
            // A record whose value does not compress may not fit a block
            // even alone (a value of up to an eighth of the page, in a block
            // of less than that), nor with any neighbours: with its value in
            // overflow pages, which hold any bytes, the record keeps only
            // the key and a reference. The failed try changed no contents.
            Err(Error::CompressionUnfit { .. })
                if self.config.compressed && value.len() > page::OVERFLOW_REF_BYTES =>
            {
                self.insert_encoded(op, key, value, false)
            }
            result => result,
        }
    }

    /// [`BTree::insert_in`] of a checked key and value, inline if `inline`
    /// allows it ([`BTree::encode_value`]).
    fn insert_encoded(
        &self,
        op: &mut OpContext,
        key: &[u8],
        value: &[u8],
        inline: bool,
    ) -> Result<bool> {
        let (flags, stored) = self.encode_value(op, value, inline)?;
        let rec = page::RecRef {
            key,
            flags,
            value: &stored,
        };
        let chain = (flags & REC_OVERFLOW != 0).then(|| decode_overflow_ref(rec.value).0);
        let result = self.upsert(op, rec);
        match (result, chain) {
            (Err(e), Some(first)) => {
                // Nothing of the insert was committed but its new overflow
                // chain: give it back. (The first error is the one to
                // report.)
                let _ = self.free_chain(op, first);
                Err(e)
            }
            (Err(e), None) => Err(e),
            (Ok(true), _) => Ok(true),
            (Ok(false), _) => {
                // A new key: counted in the same operation, when it settles
                // (`settle_entry_count`, after every tree latch was
                // released: the meta page comes last).
                op.entry_delta += 1;
                Ok(false)
            }
        }
    }

    /// Inserts or replaces `rec`: optimistically in its leaf, else on an
    /// exclusively latched path, splitting as needed.
    fn upsert(&self, op: &mut OpContext, rec: page::RecRef<'_>) -> Result<bool> {
        let key = rec.key;
        {
            let (mut leaf, hint) = self.leaf_exclusive(key)?;
            let span = hint.span.as_ref();
            if let LeafOutcome::Done(existed) = self.leaf_upsert(&mut leaf, op, rec, span)? {
                return Ok(existed);
            }
        }
        let len = rec.len();
        for _ in 0..RETRIES_MAX {
            let mut path = self.path_exclusive(key, self.config.compressed, |p| {
                self.safe_for_insert(p, len)
            })?;
            match self.insert_on_path(&mut path, op, rec.to_buf())? {
                Attempt::Done(existed) => return Ok(existed),
                Attempt::SplitFirst(first) => {
                    drop(path);
                    self.split_alone(op, first)?;
                }
            }
        }
        Err(Error::CompressionUnfit { page_id: self.root })
    }

    /// Inserts or replaces `rec` in `leaf` if it fits, finding its place
    /// from `span` (the leaf's key range as its parent gave it, if known).
    fn leaf_upsert<G: PageWrite>(
        &self,
        leaf: &mut G,
        op: &mut OpContext,
        rec: page::RecRef<'_>,
        span: Option<&page::KeySpan>,
    ) -> Result<LeafOutcome> {
        let pr = page::probe_in(leaf, rec.key, span);
        // The replaced record: its length, its value's, and its chain.
        let old = (pr.found != 0).then(|| {
            (
                page::rec_len(leaf, pr.found),
                page::rec_value(leaf, pr.found).len(),
                overflow_chain(leaf, pr.found),
            )
        });
        let limit = self.limit_bytes();
        match old {
            Some((_, value_len, _)) if value_len == rec.value.len() => {
                page::overwrite_value(leaf, pr.found, rec.flags, rec.value);
            }
            Some((old_len, _, _)) => {
                if page::used_bytes(leaf) - old_len + rec.len() + 2 * page::SLOT_BYTES > limit {
                    return Ok(LeafOutcome::Full);
                }
                page::remove(leaf, pr);
                let pr = page::probe_in(leaf, rec.key, span);
                page::insert(leaf, pr, rec);
            }
            None => {
                if !page::has_room(leaf, rec.len(), limit) {
                    return Ok(LeafOutcome::Full);
                }
                crate::recipe::insert_logged(leaf, pr, rec);
            }
        }
        self.mark_if_sparse(leaf);
        if !self.try_commit(leaf, op) {
            return Ok(LeafOutcome::Unfit);
        }
        if let Some((_, _, chain)) = old {
            self.free_chain_of(op, chain)?;
        }
        Ok(LeafOutcome::Done(old.is_some()))
    }

    /// A value that shrank in place can leave a page below the merge
    /// threshold without a delete: mark it so the next delete rebalances it.
    pub(super) fn mark_if_sparse<G: PageWrite>(&self, g: &mut G) {
        if g.page_id() != self.root
            && page::used_bytes(g) < self.threshold_bytes()
            && page::flags(g) & FLAG_GROWING == 0
        {
            let f = page::flags(g) | FLAG_GROWING;
            page::set_flags(g, f);
        }
    }

    fn insert_on_path<'a>(
        &'a self,
        path: &mut Vec<S::Exclusive<'a>>,
        op: &mut OpContext,
        rec: RecBuf,
    ) -> Result<Attempt> {
        let last = path.len() - 1;
        let cause = match self.leaf_upsert(&mut path[last], op, rec.borrowed(), None)? {
            LeafOutcome::Done(existed) => return Ok(Attempt::Done(existed)),
            LeafOutcome::Full => None,
            LeafOutcome::Unfit => Some(SplitKind::CompressionFailure),
        };
        let leaf = &path[last];
        let mut recs = page::read_all(leaf);
        let old = match recs.binary_search_by(|r| r.key.as_slice().cmp(&rec.key)) {
            Ok(i) => Some(recs.remove(i)),
            Err(_) => None,
        };
        let new_idx = recs.partition_point(|r| r.key < rec.key);
        let key = rec.key.clone();
        recs.insert(new_idx, rec);
        let mut job = Overfull {
            recs,
            new_idx: Some(new_idx),
            cause,
            reading: None,
        };
        // A full leaf may give records to a sibling instead of splitting
        // (see `shift`), if the split policy would split it in the middle.
        let shifted = if job.cause.is_none() && self.shifts(op) {
            let last_insert = cut::last_insert_index(&path[last], &job.recs);
            let mut reading = None;
            let mut approve = || {
                let r = *reading
                    .get_or_insert_with(|| self.adaptive_outcome(last_insert, &job.recs, new_idx));
                // Where streams are long, a record that lands unexplained
                // is a stream's too (its first records in the page, say):
                // it stays in the leaf, whose room its next inserts should
                // find. With short streams moving it loses nothing, and
                // keeping it put a round robin of short streams of the
                // pattern family 0.03 below a middle split.
                r.cut.is_none().then(|| self.long_streams())
            };
            let shifted = self.shift_to_sibling(path, &job, &key, op, &mut approve)?;
            match reading {
                // A shift stands for the split it replaces.
                Some(r) if shifted => self.note_adaptive(r.explained, r.long_run),
                // The split reads the page as the shift did.
                reading => job.reading = reading,
            }
            shifted
        } else {
            false
        };
        if !shifted && let Some(first) = self.split_up(path, last, job, op)? {
            return Ok(Attempt::SplitFirst(first));
        }
        if let Some(o) = &old {
            self.free_value(op, o)?;
        }
        Ok(Attempt::Done(old.is_some()))
    }
}
