//! The database: trees on buffer pools, one write-ahead log, checkpoints and
//! recovery.
//!
//! # Files
//!
//! A database directory holds `LOCK` (an exclusive `flock`, so a second
//! process gets [`barracuda_io::IoError::DirLocked`]), `CATALOG` (the trees,
//! see [`crate::catalog`]), `wal.log` (the log's checkpoint slots) and its
//! segments `wal-<LSN>.log` (see [`crate::wal`]), and one data file
//! per tree, `tree-NNNNN.bdb`, with its own buffer pool. [`Db::compact`]
//! replaces a tree's file (see `compact.rs`); the catalog lists the files
//! of an unfinished one, which open deletes. Open refuses a directory whose
//! files do not match what its catalog and last checkpoint say, before it
//! changes anything (see `files.rs`).
//!
//! # Writes
//!
//! One writer at a time holds the write mutex while it changes the tree in
//! memory (every committed page is dirty at the pending LSN, so the pool can
//! neither write nor evict it), then logs the whole operation as one redo
//! group and stamps its pages with the group's end LSN; the mutex is released
//! and the writer waits for durability outside it, so concurrent writers share
//! fsyncs (group commit). Readers never take the write mutex.
//!
//! A group holds each changed page's patches, or its whole image after the
//! operation when the data file holds no block of it (a page created in
//! memory and not written since), once per checkpoint. Every page write
//! goes first to the tree's doublewrite area (`tree-NNNNN.dbw`, see
//! `barracuda_pool::FileService::with_doublewrite`), so a block that a
//! crash tears has a whole copy.
//!
//! # Checkpoints
//!
//! A checkpoint picks `C` = the end of the log under the write mutex (and
//! forgets the imaged new pages that were written since), syncs the log to
//! `C` and starts a new log segment there, writes every page whose oldest
//! change is before `C`, syncs the data files, records `C` in the log's
//! double-buffered header and deletes the segments before it. It runs in
//! the background every `checkpoint_interval`, when half the log is in use,
//! when a write finds that a write like it would lack room an eighth of the
//! log's budget from now (so that the next ones do not wait for a checkpoint of
//! their own: it runs beside them instead of in front of one of them, which
//! bounds the slowest write rather than the total), when the
//! log has been idle for `Options::idle_checkpoint`, and at close.
//!
//! # Recovery
//!
//! [`Db::open`] first writes back torn pages from the doublewrite areas,
//! then replays every group from the last checkpoint: images are installed,
//! patches applied through the pool (which compresses exactly as it did
//! before, so a page that fit then fits now), except those whose page's
//! block in the data file is already newer ([`RecoveryStats`]). A tree
//! whose meta page keeps no entry count (a file written before counts were
//! kept) is then counted once and the count logged, before any write.
//!
//! # Page ids in the log
//!
//! A logged page id is `tree_id << 48 | page_id`.
//!
//! # Layout
//!
//! The code is split by operation: `open.rs` opens the directory and its
//! trees, `recover.rs` replays the log into them, `write.rs` is the write
//! path (the write mutex, log groups, durability), `checkpoint.rs` runs
//! checkpoints and the background thread that schedules them, and
//! `shutdown.rs` closes; `compact.rs` and `files.rs` are described above.

use arc_swap::ArcSwap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use barracuda_base::{Lsn, PageId};
use barracuda_btree::BTree;
use barracuda_io::{BlockFile, DirLock, IoOptions};
use barracuda_mtr::PoolStore;
use barracuda_pool::{BufferPool, CleanerRegistration, DurableLsn, PageCleaner};
use parking_lot::{Condvar, Mutex, RwLock};

use crate::catalog::{Catalog, TreeEntry, directory_error};
use crate::error::{Error, Result};
use crate::options::{Durability, Options};
use crate::records::{RecordCache, WriteEpoch};
use crate::wal::{CONTROL_FILE_NAME, Wal};
pub use compact::{CompactStats, CompactStep};
use files::Inventory;
use write::WriteState;

/// A key and its value, owned.
pub type KeyValue = (Vec<u8>, Vec<u8>);

mod checkpoint;
mod compact;
mod files;
pub(crate) mod limits;
mod open;
mod recover;
mod shutdown;
mod write;

/// The log's control file in the database directory: its checkpoint slots
/// (the log itself is in segment files beside it, `wal-<LSN>.log`).
pub const LOG_FILE_NAME: &str = CONTROL_FILE_NAME;

/// Bits of a logged page id that hold the page id within its tree.
const TREE_ID_SHIFT: u32 = 48;

fn logged_page_id(tree_id: u16, page_id: PageId) -> PageId {
    PageId((u64::from(tree_id) << TREE_ID_SHIFT) | page_id.0)
}

fn split_logged_page_id(logged: PageId) -> (u16, PageId) {
    let tree_id = (logged.0 >> TREE_ID_SHIFT) as u16;
    (tree_id, PageId(logged.0 & ((1 << TREE_ID_SHIFT) - 1)))
}

/// The pools' write-ahead rule: pages may be written once the log is
/// durable up to their LSN. During recovery (before the log is set) every
/// replayed change is durable by definition.
#[derive(Default)]
struct WalDurable {
    wal: OnceLock<Arc<Wal>>,
}

impl DurableLsn for WalDurable {
    fn durable_lsn(&self) -> Lsn {
        match self.wal.get() {
            Some(wal) => wal.durable_lsn(),
            // LSN_PENDING is u64::MAX; everything replayed is below this.
            None => Lsn(u64::MAX - 1),
        }
    }

    fn request_durable(&self) {
        if let Some(wal) = self.wal.get()
            && let Err(e) = wal.flush_to(wal.next_lsn())
        {
            tracing::warn!("log flush requested by the buffer pool failed: {e}");
        }
    }
}

/// One tree: its B+tree, pool and data file.
pub(crate) struct TreeInner {
    pub(crate) entry: TreeEntry,
    pub(crate) tree: BTree<PoolStore>,
    pub(crate) file: Arc<dyn BlockFile>,
    cleaner: Mutex<Option<CleanerRegistration>>,
}

impl TreeInner {
    pub(crate) fn pool(&self) -> &Arc<BufferPool> {
        self.tree.store().pool()
    }
}

/// A named tree and its current incarnation, shared by every [`Tree`]
/// handle of that name. [`Db::compact`] replaces the incarnation while it
/// holds the write mutex, so a writer sees one incarnation for its whole
/// operation; a reader that loaded the old one finishes on it (its file is
/// unlinked but stays open until the last reader drops it).
pub(crate) struct TreeSlot {
    pub(crate) name: String,
    /// Swapped by a compaction. An `ArcSwap` and not a lock: every point
    /// read loads it, and a lock's shared count would be one more cache line
    /// that all reading threads write.
    current: ArcSwap<TreeInner>,
    /// The tree's record cache ([`crate::Options::record_cache_bytes`]);
    /// it holds the tree's key-value mapping, which a compaction keeps, so
    /// it lives here and not in an incarnation.
    pub(crate) records: Option<RecordCache>,
}

impl TreeSlot {
    pub(super) fn new(inner: Arc<TreeInner>, record_cache_bytes: usize) -> Arc<TreeSlot> {
        Arc::new(TreeSlot {
            name: inner.entry.name.clone(),
            current: ArcSwap::new(inner),
            records: RecordCache::new(record_cache_bytes),
        })
    }

    /// The current incarnation, to hold across calls that may block on the
    /// write mutex or run user code (a scan's visitor).
    pub(crate) fn load(&self) -> Arc<TreeInner> {
        self.current.load_full()
    }

    /// The current incarnation for one short call that takes no write
    /// mutex (a point read): cheaper than [`TreeSlot::load`] (no reference
    /// count is touched). A reader still holding the old incarnation after
    /// a swap finishes on it; it is dropped after that reader lets go.
    pub(crate) fn read(&self) -> arc_swap::Guard<Arc<TreeInner>> {
        self.current.load()
    }

    fn replace(&self, inner: Arc<TreeInner>) -> Arc<TreeInner> {
        self.current.swap(inner)
    }

    /// Before a write changes `key` (under the write mutex): takes it out
    /// of the record cache, which no get fills until the returned epoch is
    /// dropped, once the change is applied. `None` without a record cache.
    pub(crate) fn forget(&self, key: &[u8]) -> Option<WriteEpoch<'_>> {
        let records = self.records.as_ref()?;
        let epoch = records.begin_write();
        records.remove(&epoch, key);
        Some(epoch)
    }
}

pub(crate) struct DbInner {
    dir: PathBuf,
    pub(crate) options: Options,
    io_options: IoOptions,
    /// Writes every tree's dirty pages in the background, on one thread.
    cleaner: PageCleaner,
    wal: Arc<Wal>,
    durable: Arc<WalDurable>,
    trees: RwLock<Vec<Arc<TreeSlot>>>,
    catalog: Mutex<Catalog>,
    /// The catalog's generation, for checkpoints (which must not take the
    /// catalog lock: a compaction holds it while it checkpoints).
    catalog_generation: AtomicU64,
    write: Mutex<WriteState>,
    checkpoint_lock: Mutex<()>,
    failure: Mutex<Option<String>>,
    closed: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
    /// A write found room in the log for itself, but the next one like it
    /// would find none an eighth of the log's budget later: the background thread
    /// checkpoints at once rather than at its next look at the fill level,
    /// so that the next writes find room instead of waiting for a
    /// checkpoint of their own.
    checkpoint_wanted: AtomicBool,
    background: Mutex<Option<JoinHandle<()>>>,
    /// The log writer thread ([`Wal::run_log_writer`]).
    log_writer: Mutex<Option<JoinHandle<()>>>,
    /// Released at close, even while `Tree` handles live on.
    lock: Mutex<Option<DirLock>>,
    /// What the open that made this database recovered.
    recovery: RecoveryStats,
}

/// What [`Db::open`] did to recover ([`Db::recovery_stats`]). All zero
/// after a clean close, but for `checkpoint_lsn`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryStats {
    /// Where replay started: the last checkpoint's LSN.
    pub checkpoint_lsn: u64,
    /// Pages written back from the trees' doublewrite areas because their
    /// blocks in the data files were torn (or older than the copy).
    pub pages_restored: u64,
    /// Pages that replay changed.
    pub pages_replayed: u64,
    /// Logged page images installed (a page created since the checkpoint).
    pub images_installed: u64,
    /// Logged changes of a page applied to it.
    pub changes_applied: u64,
    /// Logged changes skipped because the page's block in the data file
    /// already held them (it was written after them).
    pub changes_skipped: u64,
    /// Of the changes applied, the pages rebuilt from their own records by
    /// a logged recipe (a split's, a merge's or a compaction's).
    pub rebuilds_applied: u64,
    /// Of the changes applied, the records inserted from a logged insert.
    pub inserts_applied: u64,
    /// Of the changes applied, the records removed by a logged delete.
    pub deletes_applied: u64,
    /// Of the changes applied, those that fit their compressed block only
    /// packed (no room kept for the modification log): a log written by a
    /// build whose codec compressed smaller. Zero when the log was written
    /// by this build.
    pub changes_packed: u64,
}

/// An embedded key-value store: named B+trees over compressed pages. See the
/// module documentation for how it keeps data safe. `Send + Sync`: share it
/// (or its [`Tree`](crate::Tree) handles) between threads.
pub struct Db {
    pub(crate) inner: Arc<DbInner>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("dir", &self.inner.dir).finish()
    }
}

impl Db {
    /// Options with documented defaults; finish with `.open(dir)`.
    #[must_use]
    pub fn options() -> Options {
        Options::default()
    }

    /// Opens `dir` with default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Db> {
        Options::default().open(dir)
    }

    /// The names of all trees, in creation order.
    pub fn tree_names(&self) -> Vec<String> {
        self.inner
            .trees
            .read()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    /// Applies `batch` atomically (all or nothing, also across trees and
    /// across a crash) with the database's durability.
    pub fn write(&self, batch: crate::WriteBatch) -> Result<()> {
        self.write_with(batch, self.inner.options.durability)
    }

    /// [`Db::write`] with the given durability.
    pub fn write_with(&self, batch: crate::WriteBatch, durability: Durability) -> Result<()> {
        batch.apply(&self.inner, durability)
    }

    /// A writer for a transaction too large for one [`Db::write`] (more
    /// operations than [`Tree::batch_ops_max`]): bulk loads, mass deletes.
    /// It applies what it is given in consecutive atomic parts, durable
    /// together with the database's durability at
    /// [`ChunkedWriter::finish`]; not atomic. See [`ChunkedWriter`].
    ///
    /// [`Tree::batch_ops_max`]: crate::Tree::batch_ops_max
    /// [`ChunkedWriter`]: crate::ChunkedWriter
    /// [`ChunkedWriter::finish`]: crate::ChunkedWriter::finish
    pub fn chunked_writer(&self) -> crate::ChunkedWriter<'_> {
        self.chunked_writer_with(self.inner.options.durability)
    }

    /// [`Db::chunked_writer`] with the given durability.
    pub fn chunked_writer_with(&self, durability: Durability) -> crate::ChunkedWriter<'_> {
        crate::ChunkedWriter::new(&self.inner, durability)
    }

    /// Makes every write so far durable (useful under `NoSync`).
    pub fn sync(&self) -> Result<()> {
        self.inner.make_durable(Durability::Sync)
    }

    /// What opening this database recovered: torn pages restored from the
    /// doublewrite areas, and the log's changes applied or skipped.
    pub fn recovery_stats(&self) -> RecoveryStats {
        self.inner.recovery
    }

    /// Runs a checkpoint now: writes every dirty page and moves the log's
    /// recovery start to the present.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.check_writable()?;
        self.inner.checkpoint()
    }

    /// Rewrites the tree `name` into full pages and gives the space back:
    /// reads it in key order (streaming, never more than one batch in
    /// memory) into a new tree with the same [`TreeOptions`](crate::TreeOptions), in a new
    /// file, then swaps the new tree in and deletes the old file. After
    /// random inserts leaves are about 70% full, after deleting half the
    /// keys often under 50%, and freed pages never leave the file; the
    /// rewrite leaves them nearly full (the split policy sees an ascending
    /// stream) and the file holds no free pages.
    ///
    /// Writers to any tree wait until it ends (it holds the write mutex);
    /// readers keep reading the old tree until the swap. Existing [`Tree`](crate::Tree)
    /// handles and open iterators keep working and see the new tree after
    /// the swap. A crash at any moment reopens to the old tree or the new
    /// one, each complete (see `docs/design.md`, "Compaction"); files of
    /// an interrupted compaction are deleted at open.
    ///
    /// Needs free disk space for a second copy of the tree (its compacted
    /// size), and as much log as it copies between checkpoints.
    pub fn compact(&self, name: &str) -> Result<CompactStats> {
        self.compact_with_progress(name, |_| true)
    }

    /// [`Db::compact`], calling `progress(entries copied so far)` after
    /// each batch. Writers wait while a compaction runs; `progress`
    /// returning `false` cancels it: the new file is deleted, the tree is
    /// unchanged, and the call returns [`Error::CompactionCancelled`].
    ///
    /// ```no_run
    /// # let db = barracuda::Db::open("/var/lib/myapp/db")?;
    /// let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    /// match db.compact_with_progress("t", |_copied| std::time::Instant::now() < deadline) {
    ///     Ok(stats) => println!("{} -> {} bytes", stats.file_bytes_before, stats.file_bytes_after),
    ///     Err(barracuda::Error::CompactionCancelled { .. }) => println!("later, then"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), barracuda::Error>(())
    /// ```
    pub fn compact_with_progress(
        &self,
        name: &str,
        mut progress: impl FnMut(u64) -> bool,
    ) -> Result<CompactStats> {
        self.inner.check_open()?;
        match self.inner.compact(name, &mut progress, None)? {
            Some(stats) => Ok(stats),
            None => unreachable!("a compaction without a stop step runs to the end"),
        }
    }

    /// [`Db::compact`] on every tree, in creation order.
    pub fn compact_all(&self) -> Result<Vec<(String, CompactStats)>> {
        let mut all = Vec::new();
        for name in self.tree_names() {
            let stats = self.compact(&name)?;
            all.push((name, stats));
        }
        Ok(all)
    }

    /// Runs a compaction up to `step` and leaves it there; follow with
    /// [`Db::halt`] to simulate a crash right after that step. For crash
    /// tests.
    #[doc(hidden)]
    pub fn compact_interrupted(&self, name: &str, step: CompactStep) -> Result<()> {
        self.inner.check_open()?;
        self.inner.compact(name, &mut |_| true, Some(step))?;
        Ok(())
    }

    /// The write-ahead log's counters.
    pub fn log_stats(&self) -> crate::wal::WalStats {
        self.inner.wal.stats()
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Checks every tree: its structure and every page's block (each page
    /// is read and verified). Returns the first problem found.
    ///
    /// Checks the directory first ([`Db::check_files`]).
    pub fn check(&self) -> Result<()> {
        self.check_files()?;
        for slot in self.inner.trees.read().iter() {
            let tree = slot.load();
            tree.tree.check_invariants()?;
            tree.tree.store().check_invariants()?;
        }
        Ok(())
    }

    /// Checks the directory's files: `CATALOG` is there, intact and names
    /// the trees this database has open; `wal.log` is there and not empty;
    /// every tree's data file is there; and every other tree file is one
    /// the catalog lets the store delete (see `docs/safety.md`, "Damaged
    /// and missing files").
    pub fn check_files(&self) -> Result<()> {
        let dir = &self.inner.dir;
        let inventory = Inventory::take(dir)?;
        let catalog = inventory.require_catalog(dir, Catalog::load(dir)?)?;
        let open = self.inner.catalog.lock().trees.clone();
        if catalog.trees != open {
            return Err(directory_error(
                dir,
                format!(
                    "{} names trees {:?}, but the database has {:?} open",
                    crate::CATALOG_FILE_NAME,
                    catalog.trees.iter().map(|t| &t.name).collect::<Vec<_>>(),
                    open.iter().map(|t| &t.name).collect::<Vec<_>>()
                ),
            ));
        }
        if inventory.check_log(dir, &catalog)? {
            return Err(directory_error(
                dir,
                format!("{LOG_FILE_NAME} is missing or empty"),
            ));
        }
        inventory.check_tree_files(dir, &catalog)?;
        Ok(())
    }

    /// Stops as if the process had died: background work stops, nothing
    /// more is written (no final checkpoint), the directory is unlocked.
    /// For crash tests; data is safe only as far as the log was synced.
    #[doc(hidden)]
    pub fn halt(self) {
        self.inner.halt();
    }

    /// Stops the background work, writes a final checkpoint and closes the
    /// files. Dropping a `Db` does the same but cannot report errors.
    pub fn close(self) -> Result<()> {
        self.inner.shutdown()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Err(e) = self.inner.shutdown() {
            tracing::error!("closing {}: {e}", self.inner.dir.display());
        }
    }
}

impl DbInner {
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn check_failure(&self) -> Result<()> {
        self.check_writable()?;
        match &*self.failure.lock() {
            Some(reason) => Err(Error::Failed {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Open, and not read-only ([`crate::Options::read_only`]).
    pub(crate) fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.options.is_read_only() {
            return Err(Error::ReadOnly {
                path: self.dir.clone(),
                reason: "writes are refused".into(),
            });
        }
        Ok(())
    }

    fn fail(&self, error: &Error) {
        let mut failure = self.failure.lock();
        if failure.is_none() {
            tracing::error!("database failed, writes refused until reopened: {error}");
            *failure = Some(error.to_string());
        }
    }

    pub(crate) fn find_tree(&self, name: &str) -> Option<Arc<TreeSlot>> {
        self.trees.read().iter().find(|t| t.name == name).cloned()
    }
}

/// Whether `Db` is shareable across threads (checked at compile time).
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Db>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_page_ids_round_trip() {
        for (tree, page) in [(1, 0), (7, 12345), (u16::MAX, (1 << TREE_ID_SHIFT) - 1)] {
            let logged = logged_page_id(tree, PageId(page));
            assert_eq!(split_logged_page_id(logged), (tree, PageId(page)));
        }
    }
}
