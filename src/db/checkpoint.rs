//! Checkpoints, the log's budget that calls for them, and the background
//! thread that runs them.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use barracuda_base::Lsn;

use super::files::{self, FileStamps};
use super::{DbInner, TreeInner};
use crate::error::Result;
use crate::options::Durability;

/// How often the background thread looks at the log's fill level.
const BACKGROUND_TICK: Duration = Duration::from_millis(50);

/// An idle checkpoint runs only once the log holds at least this share of
/// its budget after the last checkpoint (1/32: 4 MiB of the default
/// 128 MiB), so that a trickle of writes does not checkpoint every spell.
const IDLE_CHECKPOINT_SHARE: u64 = 32;

impl DbInner {
    /// Whether the log has room for `log_bytes` (and an eighth of its budget
    /// to spare).
    pub(super) fn log_has_room(&self, log_bytes: usize) -> bool {
        let budget = self.wal.log_bytes();
        let free = budget.saturating_sub(self.wal.used_bytes());
        free >= log_bytes as u64 + (budget / 8)
    }

    /// See the module documentation.
    pub(super) fn checkpoint(&self) -> Result<()> {
        let _checkpointing = self.checkpoint_lock.lock();
        self.checkpoint_with_lock_held()
    }

    /// A checkpoint that makes room for `log_bytes`, unless one that ran
    /// while this caller waited for the checkpoint lock (the background
    /// thread's) already made it: a writer short of room waits for the
    /// running checkpoint rather than running a second one after it.
    pub(super) fn checkpoint_for_room(&self, log_bytes: usize) -> Result<()> {
        let _checkpointing = self.checkpoint_lock.lock();
        if self.log_has_room(log_bytes) {
            return Ok(());
        }
        self.checkpoint_with_lock_held()
    }

    /// [`DbInner::checkpoint`], with the checkpoint lock held.
    ///
    /// Each tree forgets its pages imaged in the log and written since
    /// (`PoolStore::forget_written_images`), under the write mutex, where
    /// the target is picked.
    fn checkpoint_with_lock_held(&self) -> Result<()> {
        let trees: Vec<_> = self.trees.read().iter().map(|t| t.load()).collect();
        let target = {
            let _state = self.write.lock();
            for tree in &trees {
                tree.tree.store().forget_written_images();
            }
            // The end of the log, where a new segment starts: once the
            // checkpoint is recorded, the segments before it go.
            self.wal.rotate()?
        };
        self.checkpoint_to(target, &[])
    }

    /// A checkpoint at `target` (picked under the write mutex, the trees'
    /// imaged pages reduced to unwritten ones, or forgotten while the write
    /// mutex is held throughout), also flushing `more` trees that are not in the
    /// catalog yet (a compaction's new tree). The caller holds the
    /// checkpoint lock.
    pub(super) fn checkpoint_to(&self, target: Lsn, more: &[&TreeInner]) -> Result<()> {
        self.wal.flush_to(target)?;
        let trees: Vec<_> = self.trees.read().iter().map(|t| t.load()).collect();
        let mut stamps = FileStamps {
            catalog_generation: self.catalog_generation.load(Ordering::Acquire),
            complete: true,
            trees: Vec::with_capacity(trees.len()),
        };
        for tree in &trees {
            match self.flush_tree_before(tree, target)? {
                Some(lsn) => stamps.trees.push((tree.entry.id, lsn)),
                None => stamps.complete = false,
            }
        }
        for tree in more {
            self.flush_tree_before(tree, target)?;
        }
        self.wal.checkpoint(target, &stamps.encode())?;
        tracing::debug!(lsn = target.0, "checkpoint");
        Ok(())
    }

    /// Writes every page of `tree` whose oldest change is before `target`
    /// (and, when its pool is short of memory, every other dirty page:
    /// `BufferPool::flush_for_checkpoint`), then syncs its file. Returns
    /// the LSN of the meta page's block in the file as the sync made it
    /// durable, at least (for [`FileStamps`]), if the file held a whole one.
    fn flush_tree_before(&self, tree: &TreeInner, target: Lsn) -> Result<Option<Lsn>> {
        let pool = tree.pool();
        loop {
            pool.flush_for_checkpoint(target)?;
            match pool.oldest_dirty_lsn() {
                None => break,
                Some(oldest) if oldest > target => break,
                // A page older than the target is being changed again right
                // now (its newest change is pending or not yet durable).
                Some(_) => {
                    self.wal.flush_to(self.wal.next_lsn())?;
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
        // Read before the sync: a block read now was written before the
        // sync began, so the sync makes it (or a newer one) durable; read
        // after it, a page cleaner's newer, unsynced write could be seen.
        // A block that fails its checks (a write in progress, or none yet:
        // the tree's format is still only in the log) records nothing.
        let block_bytes = files::tree_geometry(&tree.entry)?.block_size_bytes();
        let meta_lsn = match barracuda_mtr::meta_block_lsn(tree.file.as_ref(), block_bytes)? {
            Some(Ok(lsn)) => Some(lsn),
            Some(Err(_)) | None => None,
        };
        tree.file.sync_data()?;
        Ok(meta_lsn)
    }
}

/// The background thread: syncs the log under `NoSync`, runs checkpoints
/// on schedule, when half the log is in use, when a write asks for one
/// ([`DbInner::checkpoint_wanted`]), or when the log has been idle
/// (`Options::idle_checkpoint`). Each deletes the log before it.
pub(super) fn background(db: Weak<DbInner>) {
    let mut last_checkpoint = Instant::now();
    let mut last_log_flush = Instant::now();
    // The log's end as last seen, since when it has not moved, and whether
    // this idle spell had its checkpoint (one per spell).
    let mut log_end = Lsn(0);
    let mut log_end_since = Instant::now();
    let mut idle_done = false;
    loop {
        let Some(db) = db.upgrade() else { return };
        {
            let mut stop = db.stop.lock();
            if *stop {
                return;
            }
            db.wake.wait_for(&mut stop, BACKGROUND_TICK);
            if *stop {
                return;
            }
        }
        if db.failure.lock().is_some() {
            continue;
        }
        if db.options.durability == Durability::NoSync
            && last_log_flush.elapsed() >= db.options.log_flush_interval
        {
            last_log_flush = Instant::now();
            if let Err(e) = db.wal.flush_to(db.wal.next_lsn()) {
                db.fail(&e);
            }
        }
        let used = db.wal.used_bytes();
        let half_full = used * 2 > db.wal.log_bytes();
        let wanted = db.checkpoint_wanted.swap(false, Ordering::Relaxed);
        let end = db.wal.next_lsn();
        if end != log_end {
            (log_end, log_end_since, idle_done) = (end, Instant::now(), false);
        }
        let idle = !idle_done
            && db.options.idle_checkpoint.is_some_and(|after| {
                log_end_since.elapsed() >= after
                    && used >= db.wal.log_bytes() / IDLE_CHECKPOINT_SHARE
            });
        idle_done |= idle;
        if half_full
            || wanted
            || idle
            || last_checkpoint.elapsed() >= db.options.checkpoint_interval
        {
            last_checkpoint = Instant::now();
            if let Err(e) = db.checkpoint() {
                tracing::warn!("background checkpoint failed: {e}");
            } else if idle {
                tracing::debug!("idle checkpoint");
            }
            // Asked for while it ran: the room it made answers that.
            db.checkpoint_wanted.store(false, Ordering::Relaxed);
        }
    }
}
