//! Compaction: a tree rewritten in key order into a new file, then swapped
//! in through the catalog (see `docs/design.md`, "Compaction").
//!
//! The steps, all under the catalog lock, the checkpoint lock and the write
//! mutex (in that order, the order `create_tree` and `checkpoint` take
//! them), so no other write and no other checkpoint runs in between:
//!
//! 1. format a new tree with a fresh id, `N`, in its own file; it is not in
//!    the catalog, so recovery skips its log records;
//! 2. copy the old tree in key order, in `NoSync` batches (the split
//!    policy sees an ascending stream and leaves full pages behind);
//! 3. checkpoint: the new file is complete and synced, and recovery starts
//!    after every record of both trees (the log before it is deleted);
//! 4. replace the old entry by `N` in `CATALOG` (write-sync-rename-sync):
//!    the commit point;
//! 5. swap the incarnation every `Tree` handle reads, delete the old file.
//!
//! The checkpoint of step 3 starts a new log segment and deletes the
//! others, so the log's files give their space back along with the tree's
//! free pages.
//!
//! Before step 1 the catalog lists `N` as pending deletion; step 4 lists
//! the old id instead. A crash before 4 reopens the old tree (`N`'s file is
//! an orphan the catalog lists, deleted at open, and a checkpoint then
//! moves recovery past its records so that a later tree reusing id `N`
//! never sees them); a crash after 4 reopens the new tree, complete since
//! 3, with nothing after 3 to replay but its own later writes (the old file
//! is an orphan the catalog lists, deleted at open).

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::KeyValue;
use super::limits::{BATCH_IMAGES_MORE, batch_ops_by_pool, image_bytes, worst_case_log_bytes};
use super::{DbInner, TreeInner, TreeSlot, WriteState};
use crate::catalog::{Catalog, TreeEntry};
use crate::error::{Error, Result};

/// The most entries one copy batch holds: the write batches an application
/// would use (a few hundred operations fill a log group of 8 KiB images),
/// and a bound on the memory the copy holds.
const COMPACT_BATCH_OPS_MAX: usize = 1024;

/// The copy packs the new tree's blocks (`BufferPool::set_packing`): no
/// room kept for the modification log, so each page holds what its block
/// can. The pool leaves packing when this is dropped, before anything else
/// writes to the tree. A packed block stays packed while its page fits it
/// (the pool sees it in the block: less room than the reserve), so later
/// changes compress the same way in the original run and in recovery
/// (which never replays the copy itself).
struct Packing<'a>(&'a TreeInner);

impl<'a> Packing<'a> {
    fn start(tree: &'a TreeInner) -> Self {
        tree.pool().set_packing(true);
        Self(tree)
    }
}

impl Drop for Packing<'_> {
    fn drop(&mut self) {
        self.0.pool().set_packing(false);
    }
}

/// What a compaction did: the tree's file before and after.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactStats {
    /// Entries copied (the tree's entries).
    pub entries: u64,
    /// Pages of the old file: every page id it handed out (tree pages,
    /// free pages, the meta page).
    pub pages_before: u64,
    /// Pages of the new file (it has no free pages).
    pub pages_after: u64,
    /// Size of the old file after a checkpoint.
    pub file_bytes_before: u64,
    /// Size of the new file.
    pub file_bytes_after: u64,
}

/// Where [`crate::Db::compact_interrupted`] stops, for crash tests: after
/// this step, as if the process died there.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactStep {
    /// The new tree is formatted, nothing copied.
    Formatted,
    /// One batch is copied and logged.
    FirstBatch,
    /// Everything is copied and logged, not checkpointed.
    Copied,
    /// The checkpoint is written; the catalog still names the old tree.
    Checkpointed,
    /// The catalog names the new tree; the old file still exists.
    CatalogSwapped,
}

/// Entries per copy batch, bounded like a `WriteBatch`: its pages must fit
/// in half the new tree's pool, its log group in the group limit.
struct BatchLimits {
    ops_max: usize,
    log_bytes_max: usize,
}

impl DbInner {
    /// See [`crate::Db::compact`]. Stops after `stop` if given (for crash
    /// tests) and then returns `Ok(None)`.
    pub(crate) fn compact(
        &self,
        name: &str,
        progress: &mut dyn FnMut(u64) -> bool,
        stop: Option<CompactStep>,
    ) -> Result<Option<CompactStats>> {
        self.check_failure()?;
        let mut catalog = self.catalog.lock();
        let slot = self
            .find_tree(name)
            .ok_or_else(|| Error::TreeNotFound { name: name.into() })?;
        let _checkpointing = self.checkpoint_lock.lock();
        let mut state = self.write.lock();
        self.check_failure()?;
        let old = slot.load();
        let entry = TreeEntry {
            id: catalog.next_id()?,
            ..old.entry.clone()
        };
        // The new tree's files may be deleted at open until the swap
        // names it: the catalog says so before they exist.
        let mut next = catalog.clone();
        next.pending.push(entry.id);
        next.store(&self.dir)?;
        self.catalog_generation
            .store(next.generation, Ordering::Release);
        *catalog = next;
        let (pool, file) = self.open_new_pool(&entry)?;
        if !self.log_has_room(self.group_bytes_max()) {
            self.checkpoint_locked(&mut state, &[])?;
        }
        let new = self.format_tree(&mut state, entry, pool, file)?;
        match self.copy_and_checkpoint(&mut state, &old, &new, progress, stop) {
            Ok(Some(entries)) => {
                let stats = CompactStats {
                    entries,
                    pages_before: old.tree.store().page_count(),
                    pages_after: new.tree.store().page_count(),
                    file_bytes_before: old.file.len()?,
                    file_bytes_after: new.file.len()?,
                };
                if stop == Some(CompactStep::Checkpointed) {
                    return Ok(None);
                }
                self.swap(&mut catalog, &slot, new, stop)?;
                if stop.is_some() {
                    return Ok(None);
                }
                Ok(Some(stats))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.abandon(&mut state, new);
                Err(e)
            }
        }
    }

    /// Steps 2 and 3: copies `old` into `new` and checkpoints. Returns the
    /// entries copied, or `None` if it stopped at `stop` before the end.
    fn copy_and_checkpoint(
        &self,
        state: &mut WriteState,
        old: &TreeInner,
        new: &Arc<TreeInner>,
        progress: &mut dyn FnMut(u64) -> bool,
        stop: Option<CompactStep>,
    ) -> Result<Option<u64>> {
        if stop == Some(CompactStep::Formatted) {
            return Ok(None);
        }
        let packing = Packing::start(new);
        let limits = self.batch_limits(new);
        let mut batch: Vec<KeyValue> = Vec::new();
        let mut batch_log_bytes = 0;
        let mut copied = 0u64;
        let mut failed = None;
        let mut stopped = false;
        old.tree
            .scan(Bound::Unbounded, Bound::Unbounded, |key, value| {
                let bytes = worst_case_log_bytes(new, key.len(), value.len());
                if !batch.is_empty()
                    && (batch.len() >= limits.ops_max
                        || batch_log_bytes + bytes > limits.log_bytes_max)
                {
                    if let Err(e) = self.insert_batch(state, new, &mut batch) {
                        failed = Some(e);
                        return false;
                    }
                    batch_log_bytes = 0;
                    copied = match self.copied(&new.entry.name, copied, &mut batch, progress) {
                        Ok(copied) => copied,
                        Err(e) => {
                            failed = Some(e);
                            return false;
                        }
                    };
                    if stop == Some(CompactStep::FirstBatch) {
                        stopped = true;
                        return false;
                    }
                }
                batch.push((key.to_vec(), value.to_vec()));
                batch_log_bytes += bytes;
                true
            })
            .map_err(Error::from)?;
        if let Some(e) = failed {
            return Err(e);
        }
        if stopped {
            return Ok(None);
        }
        self.insert_batch(state, new, &mut batch)?;
        copied = self.copied(&new.entry.name, copied, &mut batch, progress)?;
        drop(packing);
        if stop == Some(CompactStep::FirstBatch) || stop == Some(CompactStep::Copied) {
            return Ok(None);
        }
        new.tree.store().check_invariants()?;
        self.checkpoint_locked(state, &[new])?;
        new.pool().trim_file()?;
        Ok(Some(copied))
    }

    /// Counts a copied batch and reports it; `CompactionCancelled` if the
    /// callback says stop.
    fn copied(
        &self,
        name: &str,
        copied: u64,
        batch: &mut Vec<KeyValue>,
        progress: &mut dyn FnMut(u64) -> bool,
    ) -> Result<u64> {
        let copied = copied + batch.len() as u64;
        batch.clear();
        if !progress(copied) {
            return Err(Error::CompactionCancelled { name: name.into() });
        }
        Ok(copied)
    }

    fn batch_limits(&self, new: &TreeInner) -> BatchLimits {
        let image = image_bytes(new);
        BatchLimits {
            ops_max: batch_ops_by_pool(new).clamp(1, COMPACT_BATCH_OPS_MAX),
            log_bytes_max: self
                .group_bytes_max()
                .saturating_sub(BATCH_IMAGES_MORE * image),
        }
    }

    /// Inserts `batch` into `new` as one logged group (not synced: the
    /// checkpoint at the end syncs everything once).
    fn insert_batch(
        &self,
        state: &mut WriteState,
        new: &Arc<TreeInner>,
        batch: &mut [KeyValue],
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if !self.log_has_room(self.group_bytes_max()) {
            self.checkpoint_locked(state, &[new])?;
        }
        self.write_locked(state, |writer, _| {
            let op = writer.op(new);
            for (key, value) in batch.iter() {
                new.tree.insert_in(op, key, value)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// A checkpoint while holding the checkpoint lock and the write mutex.
    fn checkpoint_locked(&self, _state: &mut WriteState, more: &[&TreeInner]) -> Result<()> {
        let trees: Vec<_> = self.trees.read().iter().map(|t| t.load()).collect();
        for tree in trees.iter().map(|t| &**t).chain(more.iter().copied()) {
            tree.tree.store().forget_images();
        }
        let target = self.wal.rotate()?;
        self.checkpoint_to(target, more)
    }

    /// Steps 4 and 5: the catalog names `new` instead of the old tree, the
    /// handles read `new`, the old file is deleted.
    fn swap(
        &self,
        catalog: &mut Catalog,
        slot: &TreeSlot,
        new: Arc<TreeInner>,
        stop: Option<CompactStep>,
    ) -> Result<()> {
        let old_id = slot.load().entry.id;
        let mut next = catalog.clone();
        for entry in &mut next.trees {
            if entry.id == old_id {
                *entry = new.entry.clone();
            }
        }
        // The old tree's files go next, the new one's stay.
        next.pending.retain(|&id| id != new.entry.id);
        next.pending.push(old_id);
        if let Err(e) = next.store(&self.dir) {
            // The rename may or may not have reached the disk: which tree a
            // reopen finds is unknown, so write to neither.
            self.fail(&e);
            return Err(e);
        }
        self.catalog_generation
            .store(next.generation, Ordering::Release);
        *catalog = next;
        if stop == Some(CompactStep::CatalogSwapped) {
            return Ok(());
        }
        // The record cache's memory was lent by the old pool: the new one
        // lends it before any reader can allocate more on the old one.
        let allocations = slot.records.as_ref().map(|records| {
            let held = records.hold_allocations();
            let owed = records.allocated_bytes();
            match new.pool().lend_bytes(owed) {
                Ok(true) => {}
                Ok(false) => tracing::warn!(
                    "compaction of {}: the new pool is too small to lend the record cache's {owed} bytes",
                    slot.name
                ),
                Err(e) => tracing::warn!(
                    "compaction of {}: the new pool could not lend the record cache's {owed} bytes: {e}",
                    slot.name
                ),
            }
            held
        });
        let old = slot.replace(new);
        drop(allocations);
        old.cleaner.lock().take();
        // Readers still on the old tree keep its file open; a failure here
        // leaves an orphan that the next open deletes.
        remove_tree_files(&self.dir, &old.entry);
        Ok(())
    }

    /// Undoes a compaction that failed before the catalog changed: deletes
    /// the new file, and checkpoints so that its log records are never
    /// replayed onto a later tree that reuses its id.
    fn abandon(&self, state: &mut WriteState, new: Arc<TreeInner>) {
        new.cleaner.lock().take();
        let entry = new.entry.clone();
        drop(new);
        remove_tree_files(&self.dir, &entry);
        if self.failure.lock().is_none()
            && let Err(e) = self.checkpoint_locked(state, &[])
        {
            self.fail(&e);
        }
    }
}

/// Deletes a tree's data file and doublewrite file, warning on failure
/// (the next open deletes what is left).
fn remove_tree_files(dir: &Path, entry: &TreeEntry) {
    for name in [entry.file_name(), entry.doublewrite_file_name()] {
        let path = dir.join(name);
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!("compaction: cannot delete {}: {e}", path.display());
        }
    }
}
