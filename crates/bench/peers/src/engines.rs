//! One adapter per engine behind the [`Engine`] trait: each opened with its
//! documented durable-commit setting and the same cache size.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Engines this build knows, in table order.
pub const ENGINE_NAMES: &[&str] = &["barracuda", "redb", "lmdb", "rocksdb", "sled", "fjall"];

/// Barracuda with uncompressed pages instead of its default trees: a
/// labelled column of workload 1 (`--engines barracuda,barracuda-uncompressed,...`),
/// not one of the defaults.
pub const BARRACUDA_UNCOMPRESSED: &str = "barracuda-uncompressed";

/// One write in a transaction.
pub enum Op {
    /// Set key to value.
    Put(Vec<u8>, Vec<u8>),
    /// Remove key.
    Delete(Vec<u8>),
}

/// A read view (one read transaction where the engine has them).
pub trait Reader {
    /// Calls `f` with the value of `key`; false when absent.
    fn get(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool>;
    /// Calls `f` with the values of up to `count` entries from `from` on;
    /// returns how many.
    fn scan(&self, from: &[u8], count: usize, f: &mut dyn FnMut(&[u8])) -> Result<usize>;
    /// Number of entries.
    fn len(&self) -> Result<u64>;
}

/// A key-value engine under test.
pub trait Engine: Send + Sync {
    /// Applies `ops` as one transaction; durable on return when `durable`.
    fn commit(&self, ops: &mut dyn Iterator<Item = Op>, durable: bool) -> Result<()>;
    /// A read view.
    fn reader(&self) -> Result<Box<dyn Reader + '_>>;
    /// Full compaction where the engine has it: Ok(false) when it has none.
    fn compact(&mut self) -> Result<bool>;
    /// Flushes and closes; after this the directory holds the whole database.
    fn close(self: Box<Self>) -> Result<()>;
    /// The engine's own counters, where it has them.
    fn counters(&self) -> Option<String> {
        None
    }
}

/// Settings shared by every engine.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Cache (buffer pool, block cache, page cache) in bytes.
    pub cache_bytes: usize,
    /// The engine's own directory (created empty).
    pub dir: PathBuf,
    /// Barracuda only: how its tree stores pages (workload 1's random
    /// values do not compress: uncompressed pages there; workload 2's
    /// compressible values: zstd by default).
    pub barracuda_tree: barracuda::TreeOptions,
    /// Barracuda only: the most log it keeps after its last checkpoint
    /// (`Options::log_bytes`; `None`: its default); its files hold only the
    /// log since then.
    pub barracuda_log_bytes: Option<u64>,
    /// Barracuda only: its I/O backend (`Options::io_backend`).
    pub barracuda_io: barracuda_io::Backend,
    /// Barracuda only: `Options::flush_method`.
    pub barracuda_flush: barracuda_io::FlushMethod,
    /// Barracuda only: `Options::os_cache_tier`.
    pub barracuda_os_cache_tier: bool,
    /// Barracuda only: the part of `cache_bytes` its record cache may take
    /// from the pool as gets fill it (`Options::record_cache_bytes`).
    pub barracuda_record_cache_bytes: usize,
    /// Barracuda only: `Options::huge_pages` (transparent huge pages for
    /// its buffer pool's arena).
    pub barracuda_huge_pages: bool,
    /// Barracuda only: `Options::idle_checkpoint`.
    pub barracuda_idle_checkpoint: Option<std::time::Duration>,
    /// LMDB only: `MDB_NORDAHEAD`, its documented setting for random reads
    /// of a database larger than memory (workload 2). With the kernel's
    /// 128 KiB read-ahead on every fault of its map, LMDB read 166 GB from
    /// the disk in six minutes under the memory cgroup and did not finish.
    pub lmdb_no_read_ahead: bool,
}

/// Opens engine `name` in `setup.dir`.
pub fn open(name: &str, setup: &Setup) -> Result<Box<dyn Engine>> {
    std::fs::create_dir_all(&setup.dir).context("create data directory")?;
    Ok(match name {
        "barracuda" | BARRACUDA_UNCOMPRESSED => Box::new(BarracudaEngine::open(setup)?),
        "redb" => Box::new(RedbEngine::open(setup)?),
        "lmdb" => Box::new(LmdbEngine::open(setup)?),
        "sled" => Box::new(SledEngine::open(setup)?),
        "fjall" => Box::new(FjallEngine::open(setup)?),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Box::new(rocks::RocksEngine::open(setup)?),
        #[cfg(not(feature = "rocksdb"))]
        "rocksdb" => bail!("rocksdb: build with --features rocksdb"),
        other => bail!("unknown engine {other}"),
    })
}

/// Bytes of every file under `path` (what the engine keeps on disk,
/// logs included), as redb's harness counts.
pub fn directory_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    };
    entries
        .flatten()
        .map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                directory_bytes(&path)
            } else {
                entry.metadata().map(|m| m.len()).unwrap_or(0)
            }
        })
        .sum()
}

// ---------------------------------------------------------------- barracuda

struct BarracudaEngine {
    db: Option<barracuda::Db>,
    tree: barracuda::Tree,
}

impl BarracudaEngine {
    fn open(setup: &Setup) -> Result<Self> {
        let mut options = barracuda::Db::options();
        if let Some(log_bytes) = setup.barracuda_log_bytes {
            options = options.log_bytes(log_bytes);
        }
        let db = options
            .default_tree_options(setup.barracuda_tree.clone())
            .io_backend(setup.barracuda_io)
            .flush_method(setup.barracuda_flush)
            .os_cache_tier(setup.barracuda_os_cache_tier)
            .buffer_pool_bytes(setup.cache_bytes)
            .record_cache_bytes(setup.barracuda_record_cache_bytes)
            .idle_checkpoint(setup.barracuda_idle_checkpoint)
            .durability(barracuda::Durability::Sync)
            .huge_pages(setup.barracuda_huge_pages)
            .open(&setup.dir)
            .context("barracuda open")?;
        let tree = db.tree("bench").context("barracuda tree")?;
        Ok(Self { db: Some(db), tree })
    }

    fn db(&self) -> &barracuda::Db {
        self.db.as_ref().expect("open until close")
    }
}

impl Engine for BarracudaEngine {
    /// A transaction that fits one `WriteBatch` (`Tree::batch_ops_max` for
    /// the first operation's size: workload 1's 1,000 writes) is one batch,
    /// atomic as in the other engines (`Db::write_with`). A larger one (the
    /// bulk load, the removals, workload 2's commits) cannot be: it goes
    /// through `Db::chunked_writer_with`, which applies it as consecutive
    /// atomic batches with one fsync at the end: durable together, not
    /// atomic.
    fn commit(&self, ops: &mut dyn Iterator<Item = Op>, durable: bool) -> Result<()> {
        let mut ops = ops.peekable();
        let atomic_max = match ops.peek() {
            Some(Op::Put(key, value)) => self.tree.batch_ops_max(key.len(), value.len()),
            Some(Op::Delete(key)) => self.tree.batch_ops_max(key.len(), 0),
            None => return Ok(()),
        };
        let durability = if durable {
            barracuda::Durability::Sync
        } else {
            barracuda::Durability::NoSync
        };
        let first: Vec<Op> = ops.by_ref().take(atomic_max + 1).collect();
        if first.len() <= atomic_max {
            let mut batch = barracuda::WriteBatch::new();
            for op in first {
                match op {
                    Op::Put(key, value) => batch.put(&self.tree, &key, &value),
                    Op::Delete(key) => batch.delete(&self.tree, &key),
                }
            }
            return self
                .db()
                .write_with(batch, durability)
                .context("barracuda write");
        }
        let mut writer = self.db().chunked_writer_with(durability);
        for op in first.into_iter().chain(ops) {
            match op {
                Op::Put(key, value) => writer.put(&self.tree, &key, &value),
                Op::Delete(key) => writer.delete(&self.tree, &key),
            }
            .context("barracuda write")?;
        }
        writer.finish().context("barracuda write")
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(BarracudaReader(
            self.tree.clone(),
            std::cell::RefCell::default(),
        )))
    }

    /// `Db::compact`: rewrites the tree into full pages in a new file and
    /// deletes the old one; `self.tree` follows the swap.
    fn compact(&mut self) -> Result<bool> {
        self.db()
            .compact(self.tree.name())
            .context("barracuda compact")?;
        Ok(true)
    }

    fn counters(&self) -> Option<String> {
        Some(format!(
            "{:?} {:?} {:?}",
            self.tree.pool_status(),
            self.tree.record_cache_status(),
            self.db().log_stats()
        ))
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        let db = self.db.take().expect("open until close");
        drop(self);
        db.close().context("barracuda close")
    }
}

/// A tree and the buffer its gets reuse (`Tree::get_into`: no allocation
/// per get). One reader per thread.
struct BarracudaReader(barracuda::Tree, std::cell::RefCell<Vec<u8>>);

impl Reader for BarracudaReader {
    fn get(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let mut value = self.1.borrow_mut();
        let found = self.0.get_into(key, &mut value)?;
        if found {
            f(&value);
        }
        Ok(found)
    }

    /// The visitor scan of the first `count` entries (`Tree::scan_limit`):
    /// no per-entry allocation (`Tree::range` copies each entry into owned
    /// vectors), and only `count` entries copied out of the leaf.
    fn scan(&self, from: &[u8], count: usize, f: &mut dyn FnMut(&[u8])) -> Result<usize> {
        Ok(self.0.scan_limit(from.., count, |_key, value| {
            f(value);
            true
        })?)
    }

    fn len(&self) -> Result<u64> {
        // The count the tree's meta page keeps: O(1), as redb's and LMDB's.
        Ok(self.0.len()?)
    }
}

// ---------------------------------------------------------------- redb

const REDB_TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("bench");

struct RedbEngine {
    db: redb::Database,
}

impl RedbEngine {
    fn open(setup: &Setup) -> Result<Self> {
        let db = redb::Database::builder()
            .set_cache_size(setup.cache_bytes)
            .create(setup.dir.join("redb.db"))?;
        Ok(Self { db })
    }
}

impl Engine for RedbEngine {
    /// redb's default durability (`Durability::Immediate`) fsyncs at commit.
    fn commit(&self, ops: &mut dyn Iterator<Item = Op>, durable: bool) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        if !durable {
            txn.set_durability(redb::Durability::None);
        }
        {
            let mut table = txn.open_table(REDB_TABLE)?;
            for op in ops {
                match op {
                    Op::Put(key, value) => {
                        table.insert(key.as_slice(), value.as_slice())?;
                    }
                    Op::Delete(key) => {
                        table.remove(key.as_slice())?;
                    }
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        let txn = self.db.begin_read()?;
        Ok(Box::new(RedbReader(txn.open_table(REDB_TABLE)?)))
    }

    fn compact(&mut self) -> Result<bool> {
        Ok(self.db.compact()?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

struct RedbReader(redb::ReadOnlyTable<&'static [u8], &'static [u8]>);

impl Reader for RedbReader {
    fn get(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        Ok(match self.0.get(key)? {
            Some(value) => {
                f(value.value());
                true
            }
            None => false,
        })
    }

    fn scan(&self, from: &[u8], count: usize, f: &mut dyn FnMut(&[u8])) -> Result<usize> {
        let mut seen = 0;
        for entry in self.0.range(from..)?.take(count) {
            let (_key, value) = entry?;
            f(value.value());
            seen += 1;
        }
        Ok(seen)
    }

    fn len(&self) -> Result<u64> {
        use redb::ReadableTableMetadata;
        Ok(self.0.len()?)
    }
}

// ---------------------------------------------------------------- LMDB

/// LMDB maps the whole file: room for the largest run.
const LMDB_MAP_BYTES: usize = 32 << 30;

struct LmdbEngine {
    env: heed::Env,
    db: heed::Database<heed::types::Bytes, heed::types::Bytes>,
}

impl LmdbEngine {
    /// LMDB has no cache setting of its own: its cache is the OS page cache.
    /// Default flags: every commit is durable (fsync).
    fn open(setup: &Setup) -> Result<Self> {
        // SAFETY: the directory is opened once by this process (the load
        // and the reads are separate processes), and NO_READ_AHEAD is not
        // one of the flags that weaken LMDB's guarantees.
        let env = unsafe {
            let mut options = heed::EnvOpenOptions::new();
            options.map_size(LMDB_MAP_BYTES).max_readers(64);
            if setup.lmdb_no_read_ahead {
                options.flags(heed::EnvFlags::NO_READ_AHEAD);
            }
            options.open(&setup.dir)?
        };
        let mut txn = env.write_txn()?;
        let db = env.create_database(&mut txn, None)?;
        txn.commit()?;
        Ok(Self { env, db })
    }
}

impl Engine for LmdbEngine {
    fn commit(&self, ops: &mut dyn Iterator<Item = Op>, _durable: bool) -> Result<()> {
        let mut txn = self.env.write_txn()?;
        for op in ops {
            match op {
                Op::Put(key, value) => self.db.put(&mut txn, &key, &value)?,
                Op::Delete(key) => {
                    self.db.delete(&mut txn, &key)?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(LmdbReader {
            txn: self.env.read_txn()?,
            db: self.db,
        }))
    }

    fn compact(&mut self) -> Result<bool> {
        Ok(false)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.env.force_sync()?;
        Ok(())
    }
}

struct LmdbReader<'e> {
    txn: heed::RoTxn<'e, heed::WithTls>,
    db: heed::Database<heed::types::Bytes, heed::types::Bytes>,
}

impl Reader for LmdbReader<'_> {
    fn get(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        Ok(match self.db.get(&self.txn, key)? {
            Some(value) => {
                f(value);
                true
            }
            None => false,
        })
    }

    fn scan(&self, from: &[u8], count: usize, f: &mut dyn FnMut(&[u8])) -> Result<usize> {
        let mut seen = 0;
        let range = (std::ops::Bound::Included(from), std::ops::Bound::Unbounded);
        for entry in self.db.range(&self.txn, &range)?.take(count) {
            let (_key, value) = entry?;
            f(value);
            seen += 1;
        }
        Ok(seen)
    }

    fn len(&self) -> Result<u64> {
        Ok(self.db.len(&self.txn)?)
    }
}

// ---------------------------------------------------------------- sled

struct SledEngine {
    db: sled::Db,
}

impl SledEngine {
    /// Retries while the previous handle's background flusher still holds
    /// the directory's lock (sled releases it asynchronously after drop).
    fn open(setup: &Setup) -> Result<Self> {
        const LOCK_RETRIES: usize = 100;
        let mut tries = 0;
        loop {
            let opened = sled::Config::new()
                .path(&setup.dir)
                .cache_capacity(setup.cache_bytes as u64)
                .open();
            match opened {
                Ok(db) => return Ok(Self { db }),
                Err(_) if tries < LOCK_RETRIES => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Engine for SledEngine {
    /// `apply_batch` is atomic; `flush` makes it durable (sled's documented
    /// way: writes are otherwise flushed every 500 ms).
    fn commit(&self, ops: &mut dyn Iterator<Item = Op>, durable: bool) -> Result<()> {
        let mut batch = sled::Batch::default();
        for op in ops {
            match op {
                Op::Put(key, value) => batch.insert(key, value),
                Op::Delete(key) => batch.remove(key),
            }
        }
        self.db.apply_batch(batch)?;
        if durable {
            self.db.flush()?;
        }
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(SledReader(&self.db)))
    }

    fn compact(&mut self) -> Result<bool> {
        Ok(false)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }
}

struct SledReader<'a>(&'a sled::Db);

impl Reader for SledReader<'_> {
    fn get(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        Ok(match self.0.get(key)? {
            Some(value) => {
                f(&value);
                true
            }
            None => false,
        })
    }

    fn scan(&self, from: &[u8], count: usize, f: &mut dyn FnMut(&[u8])) -> Result<usize> {
        let mut seen = 0;
        for entry in self.0.range(from..).take(count) {
            let (_key, value) = entry?;
            f(&value);
            seen += 1;
        }
        Ok(seen)
    }

    fn len(&self) -> Result<u64> {
        Ok(self.0.len() as u64)
    }
}

// ---------------------------------------------------------------- fjall

struct FjallEngine {
    keyspace: fjall::Keyspace,
    partition: fjall::PartitionHandle,
}

impl FjallEngine {
    fn open(setup: &Setup) -> Result<Self> {
        let keyspace = fjall::Config::new(&setup.dir)
            .cache_size(setup.cache_bytes as u64)
            .open()?;
        let partition =
            keyspace.open_partition("bench", fjall::PartitionCreateOptions::default())?;
        Ok(Self {
            keyspace,
            partition,
        })
    }
}

impl Engine for FjallEngine {
    /// A batch is atomic; `PersistMode::SyncAll` fsyncs the journal.
    fn commit(&self, ops: &mut dyn Iterator<Item = Op>, durable: bool) -> Result<()> {
        let mut batch = self.keyspace.batch();
        if durable {
            batch = batch.durability(Some(fjall::PersistMode::SyncAll));
        }
        for op in ops {
            match op {
                Op::Put(key, value) => batch.insert(&self.partition, key, value),
                Op::Delete(key) => batch.remove(&self.partition, key),
            }
        }
        batch.commit()?;
        Ok(())
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>> {
        Ok(Box::new(FjallReader(self.partition.snapshot())))
    }

    fn compact(&mut self) -> Result<bool> {
        self.partition.major_compact()?;
        Ok(true)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.keyspace.persist(fjall::PersistMode::SyncAll)?;
        Ok(())
    }
}

struct FjallReader(fjall::Snapshot);

impl Reader for FjallReader {
    fn get(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        Ok(match self.0.get(key)? {
            Some(value) => {
                f(&value);
                true
            }
            None => false,
        })
    }

    fn scan(&self, from: &[u8], count: usize, f: &mut dyn FnMut(&[u8])) -> Result<usize> {
        let mut seen = 0;
        for entry in self.0.range(from..).take(count) {
            let (_key, value) = entry?;
            f(&value);
            seen += 1;
        }
        Ok(seen)
    }

    fn len(&self) -> Result<u64> {
        Ok(self.0.len()? as u64)
    }
}

// ---------------------------------------------------------------- RocksDB

#[cfg(feature = "rocksdb")]
mod rocks {
    use super::{Engine, Op, Reader, Setup};
    use anyhow::Result;

    pub(super) struct RocksEngine {
        db: rocksdb::DB,
        sync: rocksdb::WriteOptions,
        nosync: rocksdb::WriteOptions,
    }

    impl RocksEngine {
        pub(super) fn open(setup: &Setup) -> Result<Self> {
            let mut table = rocksdb::BlockBasedOptions::default();
            table.set_block_cache(&rocksdb::Cache::new_lru_cache(setup.cache_bytes));
            let mut options = rocksdb::Options::default();
            options.set_block_based_table_factory(&table);
            options.create_if_missing(true);
            let db = rocksdb::DB::open(&options, &setup.dir)?;
            let mut sync = rocksdb::WriteOptions::default();
            sync.set_sync(true);
            Ok(Self {
                db,
                sync,
                nosync: rocksdb::WriteOptions::default(),
            })
        }
    }

    impl Engine for RocksEngine {
        /// A `WriteBatch` is atomic; `set_sync(true)` fsyncs the WAL.
        fn commit(&self, ops: &mut dyn Iterator<Item = Op>, durable: bool) -> Result<()> {
            let mut batch = rocksdb::WriteBatch::default();
            for op in ops {
                match op {
                    Op::Put(key, value) => batch.put(key, value),
                    Op::Delete(key) => batch.delete(key),
                }
            }
            let options = if durable { &self.sync } else { &self.nosync };
            self.db.write_opt(batch, options)?;
            Ok(())
        }

        fn reader(&self) -> Result<Box<dyn Reader + '_>> {
            Ok(Box::new(RocksReader(&self.db)))
        }

        fn compact(&mut self) -> Result<bool> {
            self.db.compact_range::<&[u8], &[u8]>(None, None);
            Ok(true)
        }

        fn close(self: Box<Self>) -> Result<()> {
            self.db.flush()?;
            Ok(())
        }
    }

    struct RocksReader<'a>(&'a rocksdb::DB);

    impl Reader for RocksReader<'_> {
        fn get(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
            Ok(match self.0.get_pinned(key)? {
                Some(value) => {
                    f(&value);
                    true
                }
                None => false,
            })
        }

        fn scan(&self, from: &[u8], count: usize, f: &mut dyn FnMut(&[u8])) -> Result<usize> {
            let mut seen = 0;
            let mode = rocksdb::IteratorMode::From(from, rocksdb::Direction::Forward);
            for entry in self.0.iterator(mode).take(count) {
                let (_key, value) = entry?;
                f(&value);
                seen += 1;
            }
            Ok(seen)
        }

        fn len(&self) -> Result<u64> {
            let mut count = 0;
            for entry in self.0.iterator(rocksdb::IteratorMode::Start) {
                entry?;
                count += 1;
            }
            Ok(count)
        }
    }
}
