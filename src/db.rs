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

use arc_swap::ArcSwap;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use barracuda_btree::{LsnMode, OpContext, PageStore, PoolStore, Tree as BTree, TreeConfig};
use barracuda_codec::{Geometry, Lsn, PageId};
use barracuda_io::{BlockFile, DirLock, FaultFile, IoOptions, IoThreads};
use barracuda_pool::{
    BufferPool, CleanerRegistration, CodecService, CommitOutcome, DurableLsn, FileService,
    PageCleaner, PageFormat, PageIdHasher, PoolConfig, Services,
};
use parking_lot::{Condvar, Mutex, RwLock};

use crate::catalog::{Catalog, TreeEntry, directory_error};
use crate::error::{Error, Result};
use crate::options::{Compression, Durability, Options, TreeOptions};
use crate::records::{RecordCache, WriteEpoch};
use crate::tree::Tree;
pub use compact::{CompactStats, CompactStep};
use files::{FileStamps, Inventory};

mod compact;
mod files;

use crate::wal::{
    CONTROL_FILE_NAME, FileWrap, FsLogDir, GROUP_BYTES_MAX, LoggedGroup, RedoEntry, RedoGroup, Wal,
    WalOptions,
};

/// The log's control file in the database directory: its checkpoint slots
/// (the log itself is in segment files beside it, `wal-<LSN>.log`).
pub const LOG_FILE_NAME: &str = CONTROL_FILE_NAME;

/// Bits of a logged page id that hold the page id within its tree.
const TREE_ID_SHIFT: u32 = 48;

/// The root page of every tree: the first page allocated after the store's
/// meta page (page 0).
const ROOT_PAGE_ID: PageId = PageId(1);

/// How often the background thread looks at the log's fill level.
const BACKGROUND_TICK: Duration = Duration::from_millis(50);

/// An idle checkpoint runs only once the log holds at least this share of
/// its budget after the last checkpoint (1/32: 4 MiB of the default
/// 128 MiB), so that a trickle of writes does not checkpoint every spell.
const IDLE_CHECKPOINT_SHARE: u64 = 32;

/// Requests a pool keeps in flight per batch (read-ahead, flushing): the
/// file layer's default ring depth.
const QUEUE_DEPTH: usize = 32;

/// How often the page cleaner writes dirty pages, and how many per tree.
const PAGE_CLEANER_INTERVAL: Duration = Duration::from_millis(100);
const PAGE_CLEANER_BATCH_PAGES: usize = 256;

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
    fn new(inner: Arc<TreeInner>, record_cache_bytes: usize) -> Arc<TreeSlot> {
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

/// A set of page ids, hashed by one multiplication (page ids need no
/// flood-resistant hash, and SipHash showed in profiles of `append_group`).
type PageIdSet = HashSet<PageId, BuildHasherDefault<PageIdHasher>>;

/// What the write mutex guards.
#[derive(Default)]
struct WriteState {
    /// Logged page ids of unwritten pages whose image is in the log (after
    /// the last checkpoint, or before it while that checkpoint writes them).
    imaged: PageIdSet,
    /// The group being built (kept to reuse its buffer).
    group: RedoGroup,
}

/// The changes of one atomic write, per tree.
#[derive(Default)]
pub(crate) struct Writer {
    ops: Vec<(Arc<TreeInner>, OpContext)>,
    /// The pages changed by this write's earlier groups, if it spans
    /// several ([`GroupSplit::next_group`]): they stay pinned at the
    /// pending LSN and are stamped with its last group's end.
    logged: Vec<(Arc<TreeInner>, OpContext)>,
    /// Groups of this write appended so far, each marked continued.
    groups_appended: usize,
}

impl Writer {
    /// Whether any operation of this write changed a page.
    fn has_changes(&self) -> bool {
        self.groups_appended > 0
            || self.ops.iter().any(|(_, op)| {
                !op.pages().is_empty() || !op.allocated.is_empty() || !op.freed.is_empty()
            })
    }

    /// Moves the pages of the changes just logged (patches dropped) to
    /// `logged`, to be stamped with the write's last group.
    fn move_logged(&mut self) {
        for (tree, op) in &mut self.ops {
            let index = match self.logged.iter().position(|(t, _)| Arc::ptr_eq(t, tree)) {
                Some(index) => index,
                None => {
                    self.logged.push((Arc::clone(tree), OpContext::new()));
                    self.logged.len() - 1
                }
            };
            op.move_logged_to(&mut self.logged[index].1);
        }
    }

    /// Adds each tree's counted inserts and deletes to its meta page, once
    /// per write (`Tree::settle_entry_count`).
    fn settle_entry_counts(&mut self) -> Result<()> {
        for (tree, op) in &mut self.ops {
            tree.tree.settle_entry_count(op)?;
        }
        Ok(())
    }

    /// The operation context of `tree` within this write.
    pub(crate) fn op(&mut self, tree: &Arc<TreeInner>) -> &mut OpContext {
        let index = match self.ops.iter().position(|(t, _)| Arc::ptr_eq(t, tree)) {
            Some(index) => index,
            None => {
                self.ops.push((Arc::clone(tree), OpContext::new()));
                self.ops.len() - 1
            }
        };
        &mut self.ops[index].1
    }
}

/// Lets a write that may span several log groups end one between two of
/// its operations ([`DbInner::write_spanning`]).
pub(crate) struct GroupSplit<'a> {
    db: &'a DbInner,
    state: &'a mut WriteState,
}

impl GroupSplit<'_> {
    /// Logs the changes `writer` made so far as a group marked continued:
    /// recovery applies it only with the rest of the write, and drops it
    /// if the log ends first. Its pages stay pinned until the write's last
    /// group is logged, so none reaches the data file before; no checkpoint
    /// can pass it either (the write holds the write mutex).
    pub(crate) fn next_group(&mut self, writer: &mut Writer) -> Result<()> {
        if self.db.append_group(self.state, writer, true)?.is_some() {
            writer.move_logged();
            writer.groups_appended += 1;
        }
        Ok(())
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
/// (or its [`Tree`] handles) between threads.
pub struct Db {
    inner: Arc<DbInner>,
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

    pub(crate) fn open_with(dir: &Path, options: Options) -> Result<Db> {
        // Everything that can be refused is refused before anything is
        // created, changed or deleted.
        options.validate()?;
        if dir.as_os_str().is_empty() {
            return Err(Error::InvalidOptions {
                reason: "the database directory is an empty path".into(),
            });
        }
        let read_only = options.is_read_only();
        let lock = if read_only {
            // Nothing is created: a missing directory is an error.
            if !dir.is_dir() {
                return Err(directory_error(dir, "does not exist".into()));
            }
            if !dir.join(LOG_FILE_NAME).is_file() {
                return Err(directory_error(
                    dir,
                    format!(
                        "holds no database (no {LOG_FILE_NAME}), and a read-only open creates none"
                    ),
                ));
            }
            DirLock::acquire_shared(dir)?
        } else {
            std::fs::create_dir_all(dir)
                .map_err(|e| directory_error(dir, format!("cannot create: {e}")))?;
            Some(DirLock::acquire(dir)?)
        };
        let inventory = Inventory::take(dir)?;
        let catalog = match Catalog::load(dir)? {
            None if inventory.is_new() && !read_only => {
                // The first file of a new database: with it and no tree,
                // an interrupted initialisation may create the log later.
                let mut catalog = Catalog::default();
                catalog.store(dir)?;
                catalog
            }
            loaded => inventory.require_catalog(dir, loaded)?,
        };
        let create_log = inventory.check_log(dir, &catalog)?;
        let orphans = inventory.check_tree_files(dir, &catalog)?;
        let io_options = IoOptions::default()
            .backend(options.io_backend)
            .flush_method(options.flush_method)
            .read_io_threads(options.read_io_threads)
            .write_io_threads(options.write_io_threads)
            .queue_depth(options.io_queue_depth);
        let wrap: Option<FileWrap> = (options.file_wrapper.is_some() || read_only).then(|| {
            let options = options.clone();
            Arc::new(move |path: &Path, file| options.wrap(path, file)) as FileWrap
        });
        // The log writes one sequential run and syncs it per flush, from the
        // flushing thread: pwrite does that without an io_uring file's
        // threads, rings and buffers, which each segment would start again.
        // Its calls are all synchronous, on the caller's thread: one idle
        // worker of each kind instead of the data files' eight.
        let log_options = io_options
            .clone()
            .backend(barracuda_io::Backend::Pread)
            .read_io_threads(1)
            .write_io_threads(1)
            .buffer_count(1)
            .buffer_size_bytes(4096);
        let log_dir = Arc::new(FsLogDir::new(dir, log_options, wrap));
        // Every tree's files share one set of I/O threads and registered
        // buffers: a tree costs its descriptors, not a thread pool.
        let io_options = io_options
            .clone()
            .threads(IoThreads::start(dir, &io_options)?);
        let stamps = if create_log {
            None
        } else {
            match Wal::peek_checkpoint(log_dir.as_ref()) {
                Ok(Some(checkpoint)) => {
                    FileStamps::decode(&checkpoint.payload)?.map(|stamps| (checkpoint.lsn, stamps))
                }
                Ok(None) => {
                    unreachable!("a log that is not new has a control file that is not empty")
                }
                // The creation of a database cut short before the log's
                // first checkpoint was synced: no tree was ever created, so
                // there is nothing to lose, and the log is created anew. The
                // control file may also be shorter than its slots.
                Err(Error::CheckpointCorrupted { .. } | Error::Io(_))
                    if catalog.never_held_a_tree() && !read_only =>
                {
                    tracing::warn!("the log's creation was cut short; creating it again");
                    Wal::forget_unfinished_creation(log_dir.as_ref())?;
                    None
                }
                Err(e) => return Err(e),
            }
        };
        if let Some((_, stamps)) = &stamps {
            stamps.check_catalog(dir, &catalog)?;
        }
        let durable = Arc::new(WalDurable::default());
        let mut pools = HashMap::new();
        let mut recovery = RecoveryStats::default();
        for entry in &catalog.trees {
            let (pool, file, restored) = open_pool(dir, entry, &options, &io_options, &durable)?;
            if let Some((checkpoint_lsn, stamps)) = &stamps
                && let Some(recorded) = stamps.meta_lsn(entry.id)
            {
                files::check_tree_file(dir, entry, file.as_ref(), recorded, *checkpoint_lsn)?;
            }
            recovery.pages_restored += restored as u64;
            pools.insert(entry.id, (pool, file));
        }
        let wal_options = WalOptions::default().log_bytes(options.log_bytes);
        let mut replayed = HashMap::new();
        let started = Instant::now();
        let (wal, checkpoint) = Wal::open(log_dir, &wal_options, |group| {
            if read_only {
                // Replayed pages are dirty, and would be written back.
                return Err(Error::ReadOnly {
                    path: dir.to_path_buf(),
                    reason: "it was not closed cleanly and needs recovery, which writes; open it read-write once".into(),
                });
            }
            replay(&pools, group, &mut replayed, &mut recovery)
        })?;
        recovery.checkpoint_lsn = checkpoint.lsn.0;
        recovery.pages_replayed = replayed.len() as u64;
        tracing::info!(
            checkpoint = checkpoint.lsn.0,
            pages = replayed.len(),
            restored = recovery.pages_restored,
            applied = recovery.changes_applied,
            skipped = recovery.changes_skipped,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "recovered"
        );
        let wal = Arc::new(wal);
        if durable.wal.set(Arc::clone(&wal)).is_err() {
            unreachable!("the log is set once, here");
        }
        let inner = Arc::new(DbInner {
            dir: dir.to_path_buf(),
            options,
            io_options,
            cleaner: PageCleaner::start(PAGE_CLEANER_INTERVAL, PAGE_CLEANER_BATCH_PAGES),
            wal,
            durable,
            trees: RwLock::new(Vec::new()),
            catalog: Mutex::new(catalog.clone()),
            catalog_generation: AtomicU64::new(catalog.generation),
            write: Mutex::new(WriteState::default()),
            checkpoint_lock: Mutex::new(()),
            failure: Mutex::new(None),
            closed: AtomicBool::new(false),
            stop: Mutex::new(false),
            log_writer: Mutex::new(None),
            wake: Condvar::new(),
            checkpoint_wanted: AtomicBool::new(false),
            background: Mutex::new(None),
            lock: Mutex::new(lock),
            recovery,
        });
        // Files of an interrupted compaction (or tree creation): their
        // trees are not in the catalog, and recovery skipped their log
        // records. Only those the catalog accounts for are deleted (see
        // `files.rs`), then it forgets them. A read-only open leaves them.
        let orphans = if read_only {
            0
        } else {
            files::remove_files(dir, &orphans)?;
            if !catalog.pending.is_empty() {
                let mut next = catalog.clone();
                next.pending.clear();
                next.store(dir)?;
                *inner.catalog.lock() = next;
            }
            orphans.len()
        };
        inner
            .catalog_generation
            .store(inner.catalog.lock().generation, Ordering::Release);
        for entry in catalog.trees {
            let Some((pool, file)) = pools.remove(&entry.id) else {
                unreachable!("every catalog tree has a pool");
            };
            let meta_known = replayed.contains_key(&(entry.id, PageId(0))) || file.len()? > 0;
            let tree = inner.attach_tree(entry, pool, file, meta_known)?;
            inner
                .trees
                .write()
                .push(TreeSlot::new(tree, inner.options.record_cache_bytes));
        }
        if orphans > 0 {
            // The orphans' records are still in the log after the
            // checkpoint; move the checkpoint past them before a new tree
            // can reuse their tree id and have them replayed onto it.
            inner.checkpoint()?;
        }
        if !read_only {
            // Its work (checkpoints, log syncs) writes.
            let weak = Arc::downgrade(&inner);
            let handle = std::thread::Builder::new()
                .name("barracuda-background".into())
                .spawn(move || background(weak))
                .map_err(|e| directory_error(dir, format!("cannot start a thread: {e}")))?;
            *inner.background.lock() = Some(handle);
        }
        let wal = Arc::clone(&inner.wal);
        let handle = std::thread::Builder::new()
            .name("barracuda-log".into())
            .spawn(move || wal.run_log_writer())
            .map_err(|e| directory_error(dir, format!("cannot start a thread: {e}")))?;
        *inner.log_writer.lock() = Some(handle);
        Ok(Db { inner })
    }

    /// The tree named `name`, created with the default tree options if it
    /// does not exist.
    pub fn tree(&self, name: &str) -> Result<Tree> {
        if let Some(tree) = self.inner.find_tree(name) {
            return Ok(Tree::new(Arc::clone(&self.inner), tree));
        }
        let options = self.inner.options.default_tree.clone();
        self.create_tree(name, options)
    }

    /// The tree named `name`, created with `options` if it does not exist.
    /// An existing tree with different options is an error.
    pub fn create_tree(&self, name: &str, options: TreeOptions) -> Result<Tree> {
        self.inner.check_writable()?;
        let tree = self.inner.create_tree(name, options)?;
        Ok(Tree::new(Arc::clone(&self.inner), tree))
    }

    /// The tree named `name`, which must exist.
    pub fn open_tree(&self, name: &str) -> Result<Tree> {
        match self.inner.find_tree(name) {
            Some(tree) => Ok(Tree::new(Arc::clone(&self.inner), tree)),
            None => Err(Error::TreeNotFound { name: name.into() }),
        }
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
    /// memory) into a new tree with the same [`TreeOptions`], in a new
    /// file, then swaps the new tree in and deletes the old file. After
    /// random inserts leaves are about 70% full, after deleting half the
    /// keys often under 50%, and freed pages never leave the file; the
    /// rewrite leaves them nearly full (the split policy sees an ascending
    /// stream) and the file holds no free pages.
    ///
    /// Writers to any tree wait until it ends (it holds the write mutex);
    /// readers keep reading the old tree until the swap. Existing [`Tree`]
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

/// Opens the data file, doublewrite area and buffer pool of one tree,
/// restoring torn pages from the area first. Returns the pool, the data
/// file and how many pages were restored.
fn open_pool(
    dir: &Path,
    entry: &TreeEntry,
    options: &Options,
    io_options: &IoOptions,
    durable: &Arc<WalDurable>,
) -> Result<(Arc<BufferPool>, Arc<dyn BlockFile>, usize)> {
    let tree_options = entry.options();
    let page = tree_options.page_size_bytes;
    let block_size = tree_options.effective_block_size();
    let geometry = if tree_options.compression == Compression::None {
        Geometry::uncompressed(page)?
    } else {
        Geometry::new(page, block_size)?
    };
    let format = if geometry.is_uncompressed() {
        PageFormat::Uncompressed
    } else {
        PageFormat::Compressed {
            block_size_bytes: geometry.block_size_bytes(),
        }
    };
    let path = dir.join(entry.file_name());
    let mut file = options.wrap(&path, barracuda_io::open(&path, io_options)?);
    if !options.device_latency.is_zero() {
        file = Arc::new(FaultFile::with_latency(file, options.device_latency));
    }
    // One sequential write and one sync per batch of pages, on the
    // writing thread (`write_vectored_at`), and reads at open; on the
    // database's shared I/O threads it costs no thread of its own.
    let doublewrite_path = dir.join(entry.doublewrite_file_name());
    let doublewrite = options.wrap(
        &doublewrite_path,
        barracuda_io::open(&doublewrite_path, io_options)?,
    );
    if file.len()? == 0 {
        // A new tree, or one no checkpoint has synced yet, whose every page
        // is imaged in the log: copies in an old area (of a tree that had
        // this id before) must not be restored into it.
        doublewrite.set_len(0)?;
    }
    // A page write is one block (an uncompressed page's block is the page).
    let file_service = FileService::new(Arc::clone(&file))
        .with_queue_depth(QUEUE_DEPTH)
        .with_doublewrite(doublewrite, geometry.block_size_bytes())?;
    let restored = file_service.restore_torn_pages()?;
    if restored.restored > 0 {
        tracing::warn!(
            file = %path.display(),
            copies = restored.copies,
            restored = restored.restored,
            "pages restored from the doublewrite area"
        );
    }
    let durable_lsn: Arc<dyn DurableLsn> = durable.clone();
    let services = Services {
        codec: Arc::new(CodecService::new(
            tree_options.compression.codec(),
            geometry,
        )?),
        file: Arc::new(file_service),
        durable_lsn,
        clock: None,
    };
    let config = PoolConfig::default()
        .page_size_bytes(page)
        .format(format)
        // The whole budget: a record cache takes its part as it fills
        // (`RecordCache::fill`, `BufferPool::lend_bytes`).
        .buffer_pool_bytes(options.buffer_pool_bytes)
        .eviction_policy(options.eviction_policy)
        .huge_pages(options.huge_pages)
        .os_cache_tier(options.os_cache_tier);
    // Shared, so that read-ahead is installed on the pool's own thread.
    let pool = BufferPool::open_shared(config, services)?;
    Ok((pool, file, restored.restored))
}

/// Replays one logged group into the pools. `replayed` maps each page
/// replayed so far to the LSN its changes apply after: the LSN of its
/// block in the data file when its first entry was patches (the changes
/// the block holds are skipped), or zero after an image (every later
/// change applies).
fn replay(
    pools: &HashMap<u16, (Arc<BufferPool>, Arc<dyn BlockFile>)>,
    group: &LoggedGroup,
    replayed: &mut HashMap<(u16, PageId), Lsn>,
    stats: &mut RecoveryStats,
) -> Result<()> {
    for entry in group.entries()? {
        match entry {
            RedoEntry::FullBlock { page_id, block } => {
                let (tree_id, page_id) = split_logged_page_id(page_id);
                // A tree missing from the catalog was never created: its
                // creation writes the catalog before logging anything.
                let Some((pool, _)) = pools.get(&tree_id) else {
                    continue;
                };
                pool.install_image(page_id, &block, group.end_lsn)?;
                replayed.insert((tree_id, page_id), Lsn(0));
                stats.images_installed += 1;
            }
            RedoEntry::Patches { page_id, patches } => {
                let (tree_id, page_id) = split_logged_page_id(page_id);
                let Some((pool, _)) = pools.get(&tree_id) else {
                    continue;
                };
                replay_change(
                    pool,
                    tree_id,
                    page_id,
                    group.into(),
                    replayed,
                    stats,
                    |guard| {
                        for (offset, bytes) in patches {
                            guard.write(offset as usize, bytes)?;
                        }
                        Ok(())
                    },
                )?;
            }
            RedoEntry::Rebuild { page_id, recipe } => {
                let applied = replay_writes(pools, page_id, group, replayed, stats, |page| {
                    barracuda_btree::recipe::redo_rebuild(page, recipe)
                })?;
                stats.rebuilds_applied += u64::from(applied);
            }
            RedoEntry::Insert { page_id, record } => {
                let applied = replay_writes(pools, page_id, group, replayed, stats, |page| {
                    barracuda_btree::recipe::redo_insert(page, record)
                })?;
                stats.inserts_applied += u64::from(applied);
            }
            RedoEntry::Delete { page_id, key } => {
                let applied = replay_writes(pools, page_id, group, replayed, stats, |page| {
                    barracuda_btree::recipe::redo_delete(page, key)
                })?;
                stats.deletes_applied += u64::from(applied);
            }
        }
    }
    Ok(())
}

/// Replays a logged rebuild, insert or delete: `writes` answers the writes
/// it makes on the page as redo finds it ([`replay_change`]). Returns
/// whether it applied them.
fn replay_writes(
    pools: &HashMap<u16, (Arc<BufferPool>, Arc<dyn BlockFile>)>,
    logged_page_id: PageId,
    group: &LoggedGroup,
    replayed: &mut HashMap<(u16, PageId), Lsn>,
    stats: &mut RecoveryStats,
    writes: impl Fn(&[u8]) -> std::result::Result<Vec<barracuda_btree::store::Patch>, &'static str>,
) -> Result<bool> {
    let (tree_id, page_id) = split_logged_page_id(logged_page_id);
    let Some((pool, _)) = pools.get(&tree_id) else {
        return Ok(false);
    };
    replay_change(
        pool,
        tree_id,
        page_id,
        group.into(),
        replayed,
        stats,
        |guard| {
            let writes = writes(guard.page()).map_err(|reason| Error::LogCorrupted {
                lsn: group.lsn,
                reason,
            })?;
            for patch in writes {
                guard.write(patch.offset as usize, &patch.bytes)?;
            }
            Ok(())
        },
    )
}

/// Where a logged group starts and ends.
#[derive(Clone, Copy)]
struct GroupLsns {
    lsn: Lsn,
    end_lsn: Lsn,
}

impl From<&LoggedGroup> for GroupLsns {
    fn from(group: &LoggedGroup) -> Self {
        GroupLsns {
            lsn: group.lsn,
            end_lsn: group.end_lsn,
        }
    }
}

/// Replays one change of a group (patches, or a logical change, which
/// `change` writes into the page) onto page `page_id` of tree `tree_id`, unless the
/// data file's block holds it already (see [`replay`]). Returns whether it
/// applied the change.
///
/// Each entry is one commit of the running system, redone as one commit
/// from the block the running system had, so a compressed page's block
/// goes through the same appends and recompressions and fits as it did.
/// Should it not (a codec library whose output grew since the log was
/// written), the change is committed once more into a packed block (no
/// room kept for the modification log): the page holds no more than it
/// held in the running system, whose block held it with a log, and a
/// compaction or the next split makes room again. Only a page that fits
/// no block at all is `LogCorrupted`.
fn replay_change(
    pool: &BufferPool,
    tree_id: u16,
    page_id: PageId,
    group: GroupLsns,
    replayed: &mut HashMap<(u16, PageId), Lsn>,
    stats: &mut RecoveryStats,
    mut change: impl FnMut(&mut barracuda_pool::ExclusiveGuard<'_>) -> Result<()>,
) -> Result<bool> {
    let mut guard = pool.fix_exclusive(page_id)?;
    let after = *replayed
        .entry((tree_id, page_id))
        .or_insert_with(|| barracuda_codec::header_lsn(guard.page()));
    if group.end_lsn <= after {
        // The data file's block was written after this change.
        stats.changes_skipped += 1;
        return Ok(false);
    }
    stats.changes_applied += 1;
    change(&mut guard)?;
    if guard.commit(group.end_lsn)? == CommitOutcome::Fits {
        return Ok(true);
    }
    // The commit rolled the page back; recovery runs on one thread, so
    // packing is on for this commit alone.
    tracing::warn!("{page_id}: a redone change did not fit its block as logged; packing it");
    stats.changes_packed += 1;
    pool.set_packing(true);
    let packed = change(&mut guard).and_then(|()| Ok(guard.commit(group.end_lsn)?));
    pool.set_packing(false);
    if packed? == CommitOutcome::DoesNotFit {
        return Err(Error::LogCorrupted {
            lsn: group.lsn,
            reason: "a logged change no longer fits its page's block",
        });
    }
    Ok(true)
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
    fn check_writable(&self) -> Result<()> {
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

    fn find_tree(&self, name: &str) -> Option<Arc<TreeSlot>> {
        self.trees.read().iter().find(|t| t.name == name).cloned()
    }

    /// Opens the tree of `entry` on its pool, formatting it if it was
    /// created but never formatted (a crash between the catalog write and
    /// the first log record).
    fn attach_tree(
        &self,
        entry: TreeEntry,
        pool: Arc<BufferPool>,
        file: Arc<dyn BlockFile>,
        meta_known: bool,
    ) -> Result<Arc<TreeInner>> {
        if meta_known {
            let config = self.tree_config(&entry);
            let cleaner = self.cleaner.register(&pool);
            let store = Arc::new(PoolStore::open(pool, LsnMode::Logged)?);
            let tree = BTree::open(store, ROOT_PAGE_ID, config);
            let inner = Arc::new(TreeInner {
                entry,
                tree,
                file,
                cleaner: Mutex::new(Some(cleaner)),
            });
            if inner.tree.store().entry_count()?.is_none() {
                self.store_entry_count(&inner)?;
            }
            return Ok(inner);
        }
        let mut state = self.write.lock();
        self.format_tree(&mut state, entry, pool, file)
    }

    fn tree_config(&self, entry: &TreeEntry) -> TreeConfig {
        TreeConfig {
            policy: entry.split_policy,
            compressed: entry.compression != Compression::None,
            read_ahead_pages: self.options.read_ahead_pages,
            ..TreeConfig::default()
        }
    }

    /// Formats a new tree (the meta page and the root, logged as one group
    /// and made durable) under the write mutex.
    fn format_tree(
        &self,
        state: &mut WriteState,
        entry: TreeEntry,
        pool: Arc<BufferPool>,
        file: Arc<dyn BlockFile>,
    ) -> Result<Arc<TreeInner>> {
        let config = self.tree_config(&entry);
        let cleaner = self.cleaner.register(&pool);
        let id = entry.id;
        let mut op = OpContext::new();
        let store = Arc::new(PoolStore::format(pool, LsnMode::Logged, &mut op)?);
        let tree = BTree::create(Arc::clone(&store), config)?;
        if tree.root_page_id() != ROOT_PAGE_ID {
            unreachable!("the first page after the meta page is the root");
        }
        let inner = Arc::new(TreeInner {
            entry,
            tree,
            file,
            cleaner: Mutex::new(Some(cleaner)),
        });
        let mut writer = Writer::default();
        *writer.op(&inner) = op;
        for finished in store.take_finished_ops() {
            writer.op(&inner).append_changes(finished);
        }
        let end = self.log_ops(state, &writer).inspect_err(|e| self.fail(e))?;
        if let Some(end) = end {
            self.wal.flush_to(end)?;
        }
        tracing::debug!(tree = id, "tree formatted");
        Ok(inner)
    }

    /// Opens the pool of a tree about to be created (`entry` is not in the
    /// catalog yet): its file must be new and empty.
    pub(crate) fn open_new_pool(
        &self,
        entry: &TreeEntry,
    ) -> Result<(Arc<BufferPool>, Arc<dyn BlockFile>)> {
        let (pool, file, _) = open_pool(
            &self.dir,
            entry,
            &self.options,
            &self.io_options,
            &self.durable,
        )?;
        if file.len()? != 0 {
            return Err(directory_error(
                &self.dir,
                format!("{} exists but is not in the catalog", entry.file_name()),
            ));
        }
        Ok((pool, file))
    }

    /// Upgrades a tree whose meta page keeps no entry count (a file written
    /// before counts were kept): counts its leaves once, after recovery and
    /// before any write, and logs the count as one group.
    fn store_entry_count(&self, tree: &Arc<TreeInner>) -> Result<()> {
        let mut state = self.write.lock();
        let mut writer = Writer::default();
        let counted = tree.tree.recount_in(writer.op(tree)).map_err(Error::from);
        let logged = counted.and_then(|_| self.log_ops(&mut state, &writer));
        drop(state);
        let end = logged.inspect_err(|e| self.fail(e))?;
        if let Some(end) = end {
            self.wal.flush_to(end)?;
        }
        tracing::info!(
            tree = tree.entry.id,
            "entry count stored (meta page upgraded)"
        );
        Ok(())
    }

    fn create_tree(&self, name: &str, options: TreeOptions) -> Result<Arc<TreeSlot>> {
        let mut catalog = self.catalog.lock();
        if let Some(existing) = self.find_tree(name) {
            let have = existing.load().entry.options();
            if have != options.normalized() {
                return Err(Error::TreeOptionsMismatch {
                    name: name.into(),
                    reason: format!("exists as {have:?}, asked for {options:?}"),
                });
            }
            return Ok(existing);
        }
        if catalog.trees.iter().any(|t| t.name == name) {
            // In the catalog but not open: formatting it failed after the
            // catalog was written (an I/O error). A second entry of the
            // same name would make the catalog ambiguous; reopening
            // formats the tree.
            return Err(Error::Failed {
                reason: format!(
                    "tree {name:?} was created but could not be formatted; reopen the database"
                ),
            });
        }
        if name.is_empty() || name.len() > 255 {
            return Err(Error::InvalidOptions {
                reason: format!("a tree name must have 1 to 255 bytes, not {}", name.len()),
            });
        }
        let entry = TreeEntry {
            id: catalog.next_id()?,
            name: name.into(),
            page_size_bytes: options.page_size_bytes,
            compression: options.compression,
            block_size: options.effective_block_size(),
            split_policy: options.split_policy,
        };
        // Validate the format before anything is written.
        let (pool, file) = self.open_new_pool(&entry)?;
        let mut next = catalog.clone();
        next.trees.push(entry.clone());
        next.store(&self.dir)?;
        self.catalog_generation
            .store(next.generation, Ordering::Release);
        *catalog = next;
        let tree = TreeSlot::new(
            self.attach_tree(entry, pool, file, false)?,
            self.options.record_cache_bytes,
        );
        self.trees.write().push(Arc::clone(&tree));
        Ok(tree)
    }

    /// Runs `f` as one atomic write: its changes are logged as one group.
    pub(crate) fn write<R>(
        &self,
        durability: Durability,
        f: impl FnOnce(&mut Writer) -> Result<R>,
    ) -> Result<R> {
        self.write_spanning(durability, self.group_bytes_max(), |writer, _| f(writer))
    }

    /// Runs `f` as one atomic write that may span several log groups: `f`
    /// may end a group between two operations with [`GroupSplit`]. The log
    /// must hold all of it (no checkpoint passes a write): `log_bytes` is
    /// its most, at most [`DbInner::batch_bytes_max`], and the write mutex
    /// is taken once the log has that much room.
    pub(crate) fn write_spanning<R>(
        &self,
        durability: Durability,
        log_bytes: usize,
        f: impl FnOnce(&mut Writer, &mut GroupSplit<'_>) -> Result<R>,
    ) -> Result<R> {
        self.check_failure()?;
        let mut state = self.lock_with_log_room(log_bytes)?;
        let applied = self.write_locked(&mut state, f);
        drop(state);
        let (value, end) = applied?;
        if let Some(end) = end {
            self.wait_durable(durability, end)?;
        }
        Ok(value)
    }

    /// Runs `f` as one atomic write under the write mutex (held by the
    /// caller) and logs it; returns its value and its last group's end, if
    /// it changed anything. Does not wait for durability.
    fn write_locked<R>(
        &self,
        state: &mut WriteState,
        f: impl FnOnce(&mut Writer, &mut GroupSplit<'_>) -> Result<R>,
    ) -> Result<(R, Option<Lsn>)> {
        let mut writer = Writer::default();
        let mut split = GroupSplit { db: self, state };
        let result = f(&mut writer, &mut split).and_then(|value| {
            writer.settle_entry_counts()?;
            Ok(value)
        });
        if let Err(error) = &result
            && writer.has_changes()
        {
            // An operation failed after changing pages (an I/O error in the
            // middle of a split, a pool with no memory left for a batch).
            // Logging part of it would break atomicity and its pages cannot
            // be rolled back: refuse all further writes; reopening recovers
            // the state before it.
            self.fail(error);
            return result.map(|value| (value, None));
        }
        let end = self.log_ops(state, &writer).inspect_err(|e| self.fail(e))?;
        Ok((result?, end))
    }

    /// Makes everything logged so far durable, unless `durability` is
    /// [`Durability::NoSync`]: the end of a write made of several.
    pub(crate) fn make_durable(&self, durability: Durability) -> Result<()> {
        match durability {
            Durability::Sync | Durability::Group => self.wal.flush_to(self.wal.next_lsn()),
            Durability::NoSync => Ok(()),
        }
    }

    fn wait_durable(&self, durability: Durability, end: Lsn) -> Result<()> {
        match durability {
            Durability::Sync => self.wal.flush_to(end),
            Durability::Group => {
                if self.wal.durable_lsn() < end {
                    std::thread::sleep(self.options.group_commit_window);
                }
                self.wal.flush_to(end)
            }
            Durability::NoSync => Ok(()),
        }
    }

    /// The write mutex, once the log has room for `log_bytes`; makes room
    /// with a checkpoint (without the mutex) if needed.
    fn lock_with_log_room(
        &self,
        log_bytes: usize,
    ) -> Result<parking_lot::MutexGuard<'_, WriteState>> {
        loop {
            let state = self.write.lock();
            if self.log_has_room(log_bytes) {
                // The head start: an eighth of the budget, so that the
                // checkpoint can finish before the writers reach the end.
                let head_start = (self.wal.log_bytes() / 8) as usize;
                if !self.log_has_room(log_bytes + head_start)
                    && !self.checkpoint_wanted.swap(true, Ordering::Relaxed)
                {
                    self.wake.notify_all();
                }
                return Ok(state);
            }
            drop(state);
            self.checkpoint_for_room(log_bytes)?;
        }
    }

    /// Whether the log has room for `log_bytes` (and an eighth of its budget
    /// to spare).
    fn log_has_room(&self, log_bytes: usize) -> bool {
        let budget = self.wal.log_bytes();
        let free = budget.saturating_sub(self.wal.used_bytes());
        free >= log_bytes as u64 + (budget / 8)
    }

    /// The most log bytes one log group may need: one operation's worst
    /// case must fit.
    pub(crate) fn group_bytes_max(&self) -> usize {
        GROUP_BYTES_MAX.min((self.wal.log_bytes() / 4) as usize)
    }

    /// The most log bytes one atomic write may need in all: half the budget.
    /// A write larger than a group spans several, and no checkpoint can
    /// pass it while it is applied, so the budget must hold all of it.
    pub(crate) fn batch_bytes_max(&self) -> usize {
        (self.wal.log_bytes() / 2) as usize
    }

    /// Logs the operations of `writer` as its last group (or its only one)
    /// and stamps every page it changed, in this group and in earlier ones.
    /// Returns the group's end, or `None` if nothing changed.
    fn log_ops(&self, state: &mut WriteState, writer: &Writer) -> Result<Option<Lsn>> {
        let Some(end) = self.append_group(state, writer, false)? else {
            return Ok(None);
        };
        for (tree, op) in writer.ops.iter().chain(&writer.logged) {
            tree.tree.store().stamp(op, end);
        }
        Ok(Some(end))
    }

    /// Appends the changes `writer` holds as one group, marked `continued`
    /// or not, and returns its end. Nothing is appended (`None`) for no
    /// changes, unless they end a write whose earlier groups were appended:
    /// its last group is then empty, the mark that finishes it.
    fn append_group(
        &self,
        state: &mut WriteState,
        writer: &Writer,
        continued: bool,
    ) -> Result<Option<Lsn>> {
        let WriteState { imaged, group } = state;
        group.clear();
        for (tree, op) in &writer.ops {
            let pool = tree.pool();
            let touched = op
                .pages()
                .iter()
                .map(|p| p.page_id)
                .chain(op.allocated.iter().copied())
                .chain(op.freed.iter().copied());
            let mut imaged_now = PageIdSet::default();
            for page_id in touched {
                let logged = logged_page_id(tree.entry.id, page_id);
                if imaged.contains(&logged) || !pool.is_unwritten(page_id) {
                    continue;
                }
                let guard = pool.fix_shared(page_id)?;
                group.full_block(logged, pool.image(&guard));
                imaged.insert(logged);
                imaged_now.insert(page_id);
            }
            for page in op.pages() {
                if imaged_now.contains(&page.page_id) {
                    continue;
                }
                let logged = logged_page_id(tree.entry.id, page.page_id);
                if let Some((kind, bytes)) = op.logical(page) {
                    group.logical(logged, kind, bytes);
                    continue;
                }
                for (offset, bytes) in op.patches(page) {
                    group.patch(logged, offset, bytes);
                }
                group.end_commit();
            }
        }
        if group.is_empty() && (continued || writer.groups_appended == 0) {
            return Ok(None);
        }
        group.set_continued(continued);
        Ok(Some(self.wal.append(group)?.end))
    }

    /// See the module documentation.
    pub(crate) fn checkpoint(&self) -> Result<()> {
        let _checkpointing = self.checkpoint_lock.lock();
        self.checkpoint_with_lock_held()
    }

    /// A checkpoint that makes room for `log_bytes`, unless one that ran
    /// while this caller waited for the checkpoint lock (the background
    /// thread's) already made it: a writer short of room waits for the
    /// running checkpoint rather than running a second one after it.
    fn checkpoint_for_room(&self, log_bytes: usize) -> Result<()> {
        let _checkpointing = self.checkpoint_lock.lock();
        if self.log_has_room(log_bytes) {
            return Ok(());
        }
        self.checkpoint_with_lock_held()
    }

    /// [`DbInner::checkpoint`], with the checkpoint lock held.
    ///
    /// The imaged set keeps the pages still unwritten when the target is
    /// picked: their image is before the target, and the checkpoint writes
    /// them (their oldest change is before it too), so recovery from the
    /// target reads them from the data file, and a change to them while the
    /// checkpoint runs needs no second image. (Cleared, each checkpoint would
    /// make the changes of new pages made while it ran log their images
    /// again, a cost that grows with how often checkpoints run.) Pages of a
    /// tree it does not find are forgotten, which only
    /// costs an image.
    fn checkpoint_with_lock_held(&self) -> Result<()> {
        let trees: Vec<_> = self.trees.read().iter().map(|t| t.load()).collect();
        let target = {
            let mut state = self.write.lock();
            state.imaged.retain(|&logged| {
                let (tree_id, page_id) = split_logged_page_id(logged);
                trees
                    .iter()
                    .find(|tree| tree.entry.id == tree_id)
                    .is_some_and(|tree| tree.pool().is_unwritten(page_id))
            });
            // The end of the log, where a new segment starts: once the
            // checkpoint is recorded, the segments before it go.
            self.wal.rotate()?
        };
        self.checkpoint_to(target, &[])
    }

    /// A checkpoint at `target` (picked under the write mutex, with the
    /// imaged set reduced to unwritten pages, or cleared while the write
    /// mutex is held throughout), also flushing `more` trees that are not in the
    /// catalog yet (a compaction's new tree). The caller holds the
    /// checkpoint lock.
    fn checkpoint_to(&self, target: Lsn, more: &[&TreeInner]) -> Result<()> {
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
        let meta_lsn = match files::meta_block_lsn(tree.file.as_ref(), block_bytes)? {
            Some(Ok(lsn)) => Some(lsn),
            Some(Err(_)) | None => None,
        };
        tree.file.sync_data()?;
        Ok(meta_lsn)
    }

    fn halt(&self) {
        self.fail(&Error::Closed);
        let _ = self.shutdown();
    }

    fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        *self.stop.lock() = true;
        self.wake.notify_all();
        if let Some(handle) = self.background.lock().take() {
            let _ = handle.join();
        }
        // A read-only database writes nothing, at close neither.
        let failed = self.failure.lock().is_some() || self.options.is_read_only();
        let result = if failed {
            // Memory may hold changes the log does not: write nothing more.
            Ok(())
        } else {
            // The last checkpoint starts an empty segment and deletes the
            // others: a closed database keeps no log.
            self.checkpoint()
        };
        self.wal.stop_log_writer();
        if let Some(handle) = self.log_writer.lock().take() {
            let _ = handle.join();
        }
        for tree in self.trees.read().iter() {
            tree.load().cleaner.lock().take();
        }
        // A closed database keeps no zeros past its pages either (the data
        // files hold some ahead of their pages: `barracuda_pool::FileService`).
        let result = if failed {
            result
        } else {
            result.and_then(|()| {
                self.trees
                    .read()
                    .iter()
                    .try_for_each(|tree| tree.load().pool().trim_file().map_err(Error::from))
            })
        };
        self.lock.lock().take();
        result
    }
}

/// The background thread: syncs the log under `NoSync`, runs checkpoints
/// on schedule, when half the log is in use, when a write asks for one
/// ([`DbInner::checkpoint_wanted`]), or when the log has been idle
/// (`Options::idle_checkpoint`). Each deletes the log before it.
fn background(db: Weak<DbInner>) {
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

/// Whether `Db` is shareable across threads (checked at compile time).
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Db>();
    assert_send_sync::<Tree>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use barracuda_codec::{BlockSize, Codec, Geometry, PAGE_HEADER_RESERVED_BYTES};
    use barracuda_pool::{CodecService, FileService, PageFormat, Services};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// A change redone into a block it fits only packed is committed
    /// packed: a log whose commits recompress differently (a codec that
    /// compressed smaller when the log was written) still replays.
    #[test]
    fn a_redone_change_that_fits_only_packed_is_packed() {
        let geometry = Geometry::new(16 << 10, BlockSize::Kib8).unwrap();
        let services = Services {
            codec: Arc::new(CodecService::new(Codec::zlib_default(), geometry).unwrap()),
            file: Arc::new(FileService::new(Arc::new(barracuda_io::MemoryFile::new(
                "redo",
            )))),
            durable_lsn: Arc::new(|| Lsn(u64::MAX)),
            clock: None,
        };
        let config = barracuda_pool::PoolConfig::default()
            .format(PageFormat::Compressed {
                block_size_bytes: 8192,
            })
            .buffer_pool_bytes(1 << 20);
        let pool = BufferPool::open(config, services).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut noise = |len: usize| -> Vec<u8> { (0..len).map(|_| rng.random()).collect() };
        // 7,000 random bytes, recompressed with the log's reserve, then 700
        // more appended to its modification log: the page fits its 8 KiB
        // block only because its log holds part of it.
        pool.create(PageId(1)).unwrap().commit(Lsn(1)).unwrap();
        let at = PAGE_HEADER_RESERVED_BYTES;
        for (offset, len, lsn) in [(at, 7000, 2), (at + 7000, 700, 3)] {
            let mut guard = pool.fix_exclusive(PageId(1)).unwrap();
            guard.write(offset, &noise(len)).unwrap();
            assert_eq!(guard.commit(Lsn(lsn)).unwrap(), CommitOutcome::Fits);
        }
        // 500 bytes rewritten: the log is full, and the page recompressed
        // with the reserve no longer fits; packed, it does.
        let rewrite = noise(500);
        let mut replayed = HashMap::new();
        let mut stats = RecoveryStats::default();
        let lsns = GroupLsns {
            lsn: Lsn(10),
            end_lsn: Lsn(20),
        };
        let applied = replay_change(
            &pool,
            1,
            PageId(1),
            lsns,
            &mut replayed,
            &mut stats,
            |guard| Ok(guard.write(at + 100, &rewrite)?),
        )
        .unwrap();
        assert!(applied);
        assert_eq!(stats.changes_packed, 1);
        let guard = pool.fix_shared(PageId(1)).unwrap();
        assert_eq!(&guard.page()[at + 100..at + 600], &rewrite[..]);
    }

    #[test]
    fn logged_page_ids_round_trip() {
        for (tree, page) in [(1, 0), (7, 12345), (u16::MAX, (1 << TREE_ID_SHIFT) - 1)] {
            let logged = logged_page_id(tree, PageId(page));
            assert_eq!(split_logged_page_id(logged), (tree, PageId(page)));
        }
    }
}
