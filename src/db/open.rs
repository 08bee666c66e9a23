//! Opening a database: the directory's files are checked against the
//! catalog and the last checkpoint, each tree's pool is opened (restoring
//! torn pages), the log is replayed (`recover.rs`), and the trees are
//! attached; also the creation of a tree.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use barracuda_base::PageId;
use barracuda_btree::{BTree, OpContext, PageStore};
use barracuda_io::{BlockFile, DirLock, IoOptions, IoThreads};
use barracuda_mtr::{LsnMode, META_PAGE_ID, PoolStore, Redo};
use barracuda_pool::{BufferPool, CodecService, DurableLsn, FileService, PageCleaner, Services};
use parking_lot::{Condvar, Mutex, RwLock};

use super::checkpoint::background;
use super::files::{self, FileStamps, Inventory};
use super::recover::replay;
use super::write::{WriteState, Writer};
use super::{Db, DbInner, LOG_FILE_NAME, RecoveryStats, TreeInner, TreeSlot, WalDurable};
use crate::catalog::{Catalog, TreeEntry, directory_error};
use crate::error::{Error, Result};
use crate::options::{Options, TreeOptions};
use crate::wal::{FileWrap, FsLogDir, Wal};

/// The root page of every tree: the first page allocated after the store's
/// meta page (page 0).
const ROOT_PAGE_ID: PageId = PageId(1);

/// How often the page cleaner writes dirty pages, and how many per tree.
const PAGE_CLEANER_INTERVAL: Duration = Duration::from_millis(100);
const PAGE_CLEANER_BATCH_PAGES: usize = 256;

impl Db {
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
        let io_options = options.io_options();
        let wrap: Option<FileWrap> = (options.file_wrapper.is_some() || read_only).then(|| {
            let options = options.clone();
            Arc::new(move |path: &Path, file| options.wrap(path, file)) as FileWrap
        });
        let log_dir = Arc::new(FsLogDir::new(dir, options.log_io_options(), wrap));
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
                    // An earlier build's log is refused before the trees'
                    // files are opened (which may restore torn pages).
                    checkpoint.check_supported()?;
                    FileStamps::decode(&checkpoint.payload)?.map(|stamps| (checkpoint.lsn, stamps))
                }
                Ok(None) => {
                    unreachable!("a log that is not new has a control file that is not empty")
                }
                // The creation of a database cut short before the log's
                // first checkpoint was synced: no tree was ever created, so
                // there is nothing to lose, and the log is created anew. The
                // control file may also be shorter than its slots.
                Err(
                    Error::CheckpointCorrupted { .. }
                    | Error::Io { .. }
                    | Error::Corrupted { .. }
                    | Error::Internal { .. },
                ) if catalog.never_held_a_tree() && !read_only => {
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
        let wal_options = options.wal_options();
        let mut redo: HashMap<u16, Redo> = pools
            .iter()
            .map(|(&id, (pool, _))| (id, Redo::new(Arc::clone(pool))))
            .collect();
        let started = Instant::now();
        let (wal, checkpoint) = Wal::open(log_dir, &wal_options, |group| {
            if read_only {
                // Replayed pages are dirty, and would be written back.
                return Err(Error::ReadOnly {
                    path: dir.to_path_buf(),
                    reason: "it was not closed cleanly and needs recovery, which writes; open it read-write once".into(),
                });
            }
            replay(&mut redo, group, &mut recovery)
        })?;
        recovery.checkpoint_lsn = checkpoint.lsn.0;
        let pages_replayed: usize = redo.values().map(Redo::pages).sum();
        recovery.pages_replayed = pages_replayed as u64;
        tracing::info!(
            checkpoint = checkpoint.lsn.0,
            pages = pages_replayed,
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
            let meta_known = redo
                .get(&entry.id)
                .is_some_and(|redo| redo.has_redone(META_PAGE_ID))
                || file.len()? > 0;
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
    let geometry = tree_options.geometry()?;
    let path = dir.join(entry.file_name());
    let file = options.wrap_data_file(&path, barracuda_io::open(&path, io_options)?);
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
    // Batches (read-ahead, flushing) of the file layer's default ring depth.
    // A page write is one block (an uncompressed page's block is the page).
    let file_service = FileService::new(Arc::clone(&file))
        .with_queue_depth(barracuda_pool::FILE_QUEUE_DEPTH_DEFAULT)
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
    let config = options.pool_config(geometry);
    // Shared, so that read-ahead is installed on the pool's own thread.
    let pool = BufferPool::open_shared(config, services)?;
    Ok((pool, file, restored.restored))
}

impl DbInner {
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
            let config = self.options.tree_config(&entry.options());
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

    /// Formats a new tree (the meta page and the root, logged as one group
    /// and made durable) under the write mutex.
    pub(super) fn format_tree(
        &self,
        state: &mut WriteState,
        entry: TreeEntry,
        pool: Arc<BufferPool>,
        file: Arc<dyn BlockFile>,
    ) -> Result<Arc<TreeInner>> {
        let config = self.options.tree_config(&entry.options());
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
    pub(super) fn open_new_pool(
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

    pub(crate) fn create_tree(&self, name: &str, options: TreeOptions) -> Result<Arc<TreeSlot>> {
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
}

/// Options open a database: the builder ends where the database starts.
impl Options {
    /// Opens the database in `dir`, creating the directory and the database
    /// if needed, and recovers from a crash if there was one.
    pub fn open(self, dir: impl AsRef<Path>) -> Result<Db> {
        let dir = dir.as_ref();
        if !self.read_only {
            return Db::open_with(dir, self);
        }
        Db::open_with(dir, self).map_err(|error| {
            // A file refused a write during the open: recovery had work to
            // do (a torn page to restore, a log tail to repair).
            if refused_write(&error) {
                Error::ReadOnly {
                    path: dir.to_path_buf(),
                    reason: format!(
                        "it needs recovery, which writes ({error}); open it read-write once"
                    ),
                }
            } else {
                error
            }
        })
    }
}

/// Whether `error` is a read-only file's refusal (the file layer's refusal
/// is classified as [`Error::ReadOnly`] wherever it happened).
fn refused_write(error: &Error) -> bool {
    matches!(error, Error::ReadOnly { .. })
}
