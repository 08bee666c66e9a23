//! Options of a [`crate::Db`] and of its trees, with documented defaults.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use barracuda_base::BlockSize;
use barracuda_btree::SplitPolicy;
use barracuda_codec::Codec;
use barracuda_io::{Backend, BlockFile, FlushMethod};
use barracuda_pool::EvictionPolicy;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod layers;

/// Default requests in flight per I/O thread: the file layer's default ring
/// depth, at which one thread already reaches fio's depth-32 IOPS on the
/// development machine's disk (`docs/benchmarks.md`, "I/O").
pub const IO_QUEUE_DEPTH_DEFAULT: u32 = barracuda_io::QUEUE_DEPTH_DEFAULT;

/// The range of [`Options::log_bytes`]: its minimum (the maximum is the
/// log's, `wal::LOG_BYTES_MAX`).
const LOG_BYTES_MIN: u64 = 1 << 20;

/// The range of [`Options::buffer_pool_bytes`].
const BUFFER_POOL_BYTES_MIN: usize = 1 << 20;
const BUFFER_POOL_BYTES_MAX: usize = 1 << 40;

/// The most [`Options::read_ahead_pages`]: 64 MiB of 16 KiB pages.
const READ_AHEAD_PAGES_MAX: usize = 4096;

const SECOND: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// When a write is durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Durability {
    /// Durable when the call returns: the commit waits for its log record's
    /// fsync. Writers that commit at the same time share one fsync (group
    /// commit). The default.
    #[default]
    Sync,
    /// Durable when the call returns, like `Sync`, but the committing
    /// thread first waits [`Options::group_commit_window`] so that more
    /// writers join its fsync: fewer fsyncs, longer commits.
    Group,
    /// Returns once the change is in the log buffer; a background thread
    /// syncs the log every [`Options::log_flush_interval`]. A crash loses
    /// at most the writes of the last interval, never consistency.
    NoSync,
}

/// How the pages of one tree are stored. Fixed when the tree is created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeOptions {
    pub(crate) page_size_bytes: usize,
    pub(crate) compression: Compression,
    pub(crate) block_size: BlockSize,
    pub(crate) split_policy: SplitPolicy,
}

impl Default for TreeOptions {
    fn default() -> Self {
        Self {
            page_size_bytes: /* InnoDB's default page */ barracuda_pool::PAGE_SIZE_BYTES_DEFAULT,
            compression: Compression::Zlib {
                level: barracuda_codec::ZLIB_LEVEL_DEFAULT,
            },
            block_size: /* InnoDB's KEY_BLOCK_SIZE=8 */ BlockSize::Kib8,
            split_policy: SplitPolicy::Adaptive,
        }
    }
}

/// The page compression of a tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compression {
    /// Uncompressed pages (the block size is ignored).
    None,
    /// zlib at `level` 1..=9 (6 is zlib's default).
    Zlib {
        /// 1..=9.
        level: u32,
    },
    /// Zstandard at `level` 1..=19.
    Zstd {
        /// 1..=19.
        level: i32,
    },
}

impl Compression {
    pub(crate) fn codec(self) -> Codec {
        match self {
            Compression::None => Codec::None,
            Compression::Zlib { level } => Codec::Zlib { level },
            Compression::Zstd { level } => Codec::Zstd {
                level,
                dictionary: None,
            },
        }
    }
}

impl TreeOptions {
    /// Uncompressed page size: a power of two from 4 KiB to 64 KiB.
    /// Default = 16 KiB.
    #[must_use]
    pub fn page_size_bytes(mut self, page_size_bytes: usize) -> Self {
        self.page_size_bytes = page_size_bytes;
        self
    }

    /// Page compression. Default = zlib level 6.
    #[must_use]
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Size of a compressed block on disk and in the cache, smaller than
    /// the page. Default = 8 KiB. Ignored for `Compression::None`.
    #[must_use]
    pub fn block_size(mut self, block_size: BlockSize) -> Self {
        self.block_size = block_size;
        self
    }

    /// How full pages split. Default = `Adaptive` (sequential inserts,
    /// also in the middle of the tree, leave pages nearly full).
    #[must_use]
    pub fn split_policy(mut self, split_policy: SplitPolicy) -> Self {
        self.split_policy = split_policy;
        self
    }

    /// Checks the page size, the block size against it and the
    /// compression level, as creating a tree with them would.
    pub(crate) fn validate(&self) -> Result<()> {
        self.compression.codec().validate()?;
        self.geometry()?;
        Ok(())
    }

    /// The block size actually used: the page size when uncompressed.
    pub(crate) fn effective_block_size(&self) -> BlockSize {
        match self.compression {
            Compression::None => BlockSize::Uncompressed,
            _ => self.block_size,
        }
    }

    /// These options as a tree created with them keeps them: the block
    /// size of an uncompressed tree is the page, whatever was asked for,
    /// so that asking for such a tree again with the same options finds
    /// the one that exists.
    pub(crate) fn normalized(&self) -> TreeOptions {
        TreeOptions {
            block_size: self.effective_block_size(),
            ..self.clone()
        }
    }
}

/// Wraps each file the database opens (its path, the opened file), e.g.
/// in a fault-injecting file for power-loss tests (feature `testing`).
#[derive(Clone)]
#[doc(hidden)]
pub struct FileWrapper(pub Arc<WrapFn>);

/// The function of a [`FileWrapper`].
pub type WrapFn = dyn Fn(&Path, Arc<dyn BlockFile>) -> Arc<dyn BlockFile> + Send + Sync;

impl std::fmt::Debug for FileWrapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileWrapper")
    }
}

/// Options of a database, from [`Db::options`](crate::Db::options); `open` creates or opens.
#[derive(Clone, Debug)]
pub struct Options {
    pub(crate) buffer_pool_bytes: usize,
    pub(crate) eviction_policy: EvictionPolicy,
    pub(crate) read_io_threads: usize,
    pub(crate) write_io_threads: usize,
    pub(crate) io_backend: Backend,
    pub(crate) flush_method: FlushMethod,
    pub(crate) durability: Durability,
    pub(crate) group_commit_window: Duration,
    pub(crate) log_flush_interval: Duration,
    pub(crate) checkpoint_interval: Duration,
    pub(crate) idle_checkpoint: Option<Duration>,
    /// `None`: [`Options::log_bytes`]'s default, which follows the pool.
    pub(crate) log_bytes: Option<u64>,
    pub(crate) device_latency: Duration,
    pub(crate) default_tree: TreeOptions,
    pub(crate) file_wrapper: Option<FileWrapper>,
    pub(crate) read_ahead_pages: usize,
    pub(crate) io_queue_depth: u32,
    pub(crate) huge_pages: bool,
    pub(crate) record_cache_bytes: usize,
    pub(crate) os_cache_tier: bool,
    pub(crate) read_only: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            buffer_pool_bytes: /* 128 MiB */ 128 << 20,
            eviction_policy: EvictionPolicy::CostAware,
            read_io_threads: /* InnoDB's default */ barracuda_io::IO_THREADS_DEFAULT,
            write_io_threads: /* InnoDB's default */ barracuda_io::IO_THREADS_DEFAULT,
            io_backend: Backend::Auto,
            flush_method: FlushMethod::ODirect,
            durability: Durability::Sync,
            group_commit_window: Duration::from_micros(200),
            log_flush_interval: /* InnoDB's flush_log_at_trx_commit=2 */ Duration::from_secs(1),
            checkpoint_interval: Duration::from_secs(10),
            idle_checkpoint: Some(Duration::from_secs(1)),
            log_bytes: None,
            device_latency: Duration::ZERO,
            default_tree: TreeOptions::default(),
            file_wrapper: None,
            read_ahead_pages: 0,
            io_queue_depth: IO_QUEUE_DEPTH_DEFAULT,
            huge_pages: false,
            record_cache_bytes: 0,
            os_cache_tier: false,
            read_only: false,
        }
    }
}

impl Options {
    /// Cache budget of **each tree** (every tree has its own buffer pool and
    /// data file): uncompressed frames and compressed blocks together.
    /// Memory is used as the tree caches pages, but a pool's bookkeeping,
    /// about 1.6% of the budget, is allocated when the tree opens: a
    /// database of thousands of small trees wants a smaller budget.
    /// Default = 128 MiB; 1 MiB to 1 TiB.
    #[must_use]
    pub fn buffer_pool_bytes(mut self, buffer_pool_bytes: usize) -> Self {
        self.buffer_pool_bytes = buffer_pool_bytes;
        self
    }

    /// Of each tree's cache budget ([`Options::buffer_pool_bytes`]), the
    /// bytes that hold single records (a key and its value, the value
    /// compressed with zstd when that saves an eighth) beside the buffer
    /// pool, which gets the rest. Gets look there first; scans do not.
    /// Under a skewed point-read load, a page in the pool is mostly cold
    /// records next to one hot record, and the record cache keeps the hot
    /// records alone; under uniform reads it only takes room from the pool.
    /// The cache takes its memory from the pool as gets fill it, a 64th of
    /// this budget at a time (`BufferPool::lend_bytes`): a load that makes
    /// no gets keeps the whole budget as its pool. It gives all but a 64th
    /// back while it serves fewer gets than that memory would as pool (the
    /// pool's ghost hits tell), and takes it again when it serves twice as
    /// many, so this is its most. Must leave the pool at least 1 MiB.
    /// Default = 0: no record cache (a workload whose data fits the pool
    /// gains nothing from it and pays a lookup per get).
    #[must_use]
    pub fn record_cache_bytes(mut self, record_cache_bytes: usize) -> Self {
        self.record_cache_bytes = record_cache_bytes;
        self
    }

    /// Whether each buffer pool asks the kernel for transparent huge pages
    /// (`madvise(MADV_HUGEPAGE)`, honoured when
    /// `/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` or
    /// `always`): fewer page faults as the pool fills and fewer TLB misses
    /// on descents, and memory resident 2 MiB at a time. Default = false:
    /// it cuts both ways (docs/design.md, "Memory"): gets over a large pool
    /// miss the TLB less, but a filling pool zeroes 2 MiB at a time, which
    /// writes into a growing pool pay for, and the record cache's loans
    /// split the huge pages they come from.
    #[must_use]
    pub fn huge_pages(mut self, huge_pages: bool) -> Self {
        self.huge_pages = huge_pages;
        self
    }

    /// Whether each buffer pool uses the OS page cache as a second tier of
    /// compressed blocks, exclusive of the pool (2Q). Needs a buffered
    /// [`Options::flush_method`] (`FlushMethod::Fsync`): the pool's budget
    /// stays [`Options::buffer_pool_bytes`], and blocks the pool evicts can
    /// come back from whatever memory the OS page cache has, the memory
    /// buffered engines read through. A block read from the device enters
    /// the pool on probation at its LRU tail and stays in the page cache; a
    /// block found in the page cache (`preadv2(RWF_NOWAIT)`), or hit in the
    /// pool while on probation, is kept by the pool and dropped from the
    /// page cache (`POSIX_FADV_DONTNEED`), so the two hold different blocks.
    /// Plain buffered I/O holds the blocks read last in both, which is why
    /// it brings nothing. Blocks the pool writes stay in the page cache
    /// until the kernel reclaims them. Default = false (`O_DIRECT`, the
    /// pool is the only cache): the page cache is the kernel's memory,
    /// unbounded without a memory limit, and the tier costs CPU per read.
    #[must_use]
    pub fn os_cache_tier(mut self, os_cache_tier: bool) -> Self {
        self.os_cache_tier = os_cache_tier;
        self
    }

    /// How the pool chooses between dropping an uncompressed frame and
    /// evicting a whole page. Default = `CostAware`.
    #[must_use]
    pub fn eviction_policy(mut self, eviction_policy: EvictionPolicy) -> Self {
        self.eviction_policy = eviction_policy;
        self
    }

    /// Threads (each with its own io_uring) for read-ahead, 1..=64, shared
    /// by every tree of the database. Default = 4. Ordinary page reads are
    /// submitted by the reading thread.
    #[must_use]
    pub fn read_io_threads(mut self, count: usize) -> Self {
        self.read_io_threads = count;
        self
    }

    /// Requests each I/O thread keeps in flight (the entries of its
    /// io_uring), 1..=`barracuda_io::QUEUE_DEPTH_MAX`. Default = 32. With
    /// `read_io_threads`, it bounds how many reads ahead reach the device
    /// at once; the pread backend ignores it (one request per thread).
    #[must_use]
    pub fn io_queue_depth(mut self, depth: u32) -> Self {
        self.io_queue_depth = depth;
        self
    }

    /// Threads for page writes, 1..=64, shared by every tree of the
    /// database. Default = 4.
    #[must_use]
    pub fn write_io_threads(mut self, count: usize) -> Self {
        self.write_io_threads = count;
        self
    }

    /// io_uring, pread/pwrite, or io_uring when available (default).
    #[must_use]
    pub fn io_backend(mut self, backend: Backend) -> Self {
        self.io_backend = backend;
        self
    }

    /// As InnoDB's `innodb_flush_method`. Default = `ODirect` (the page
    /// cache is bypassed; the buffer pool is the only cache). Use `Fsync`
    /// on filesystems that refuse O_DIRECT (tmpfs).
    #[must_use]
    pub fn flush_method(mut self, flush_method: FlushMethod) -> Self {
        self.flush_method = flush_method;
        self
    }

    /// When writes are durable. Default = `Sync`.
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How long a `Group` commit waits for others before its fsync.
    /// Default = 200 µs; at most 1 s.
    #[must_use]
    pub fn group_commit_window(mut self, window: Duration) -> Self {
        self.group_commit_window = window;
        self
    }

    /// How often the log is synced under `NoSync`. Default = 1 s; at most
    /// a day.
    #[must_use]
    pub fn log_flush_interval(mut self, interval: Duration) -> Self {
        self.log_flush_interval = interval;
        self
    }

    /// How often a background checkpoint runs (one also runs when half the
    /// log is in use, and at close). Default = 10 s; at most a day.
    #[must_use]
    pub fn checkpoint_interval(mut self, interval: Duration) -> Self {
        self.checkpoint_interval = interval;
        self
    }

    /// How long the log must go without an append before the background
    /// thread checkpoints (once per idle spell, and only once the log holds
    /// at least 1/32 of `log_bytes` after the last checkpoint). Like every
    /// checkpoint, it deletes the log's segments before it, so an idle
    /// database keeps a short log on disk and reopens after a crash without
    /// replaying it. Seen at the background thread's 50 ms ticks. `None`
    /// turns it off. Default = 1 s; at most a day.
    #[must_use]
    pub fn idle_checkpoint(mut self, after: Option<Duration>) -> Self {
        self.idle_checkpoint = after;
        self
    }

    /// The most write-ahead log kept after the last checkpoint: a checkpoint
    /// runs when half of it is in use, and a write that would pass it waits
    /// for one. The log is in segment files (`wal-<LSN>.log`) that each
    /// checkpoint deletes up to itself, so its files hold what was logged
    /// since the last checkpoint began, a few MiB ahead at most, not this
    /// much. Any value works for an existing database. Default = the
    /// buffer pool's budget ([`Options::buffer_pool_bytes`]), at least
    /// 128 MiB: a checkpoint writes the pool's dirty pages, so with a log
    /// of the pool's size it writes each page at most once per half a
    /// pool of log, where a smaller log rewrites a tree that fits the pool
    /// at every checkpoint, and a large load (whose checkpoints grow in
    /// number with its size) then costs more per record the larger it is.
    /// The price is the log a crash replays: up to half of it. 1 MiB to
    /// 1 TiB.
    #[must_use]
    pub fn log_bytes(mut self, log_bytes: u64) -> Self {
        self.log_bytes = Some(log_bytes);
        self
    }

    /// [`Options::log_bytes`], its default resolved.
    pub(crate) fn log_bytes_or_default(&self) -> u64 {
        self.log_bytes.unwrap_or_else(|| {
            let pool = u64::try_from(self.buffer_pool_bytes).unwrap_or(u64::MAX);
            // An invalid pool size is reported as itself, not as the log's.
            crate::wal::LOG_BYTES_DEFAULT
                .max(pool)
                .min(crate::wal::LOG_BYTES_MAX)
        })
    }

    /// Adds this latency to every data-file read and write (through the
    /// fault-injecting backend), to emulate a slow disk in benchmarks.
    /// Default = none; at most 1 s. Feature `testing` only.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    #[must_use]
    pub fn device_latency(mut self, latency: Duration) -> Self {
        self.device_latency = latency;
        self
    }

    /// Leaves a forward range scan asks the pool to read ahead (through the
    /// read I/O threads) once it enters a new leaf; 0 disables read-ahead.
    /// Default = 0: point lookups gain nothing from it, and each page read
    /// ahead costs a copy and two thread hand-offs; long forward scans gain
    /// (`barracuda-bench iothreads --read-ahead-pages 0|8`, see
    /// docs/benchmarks.md). At most 4,096.
    #[must_use]
    pub fn read_ahead_pages(mut self, pages: usize) -> Self {
        self.read_ahead_pages = pages;
        self
    }

    /// Options of trees created by [`Db::tree`](crate::Db::tree) without options.
    #[must_use]
    pub fn default_tree_options(mut self, options: TreeOptions) -> Self {
        self.default_tree = options;
        self
    }

    /// Wraps every file the database opens (data files and the log) with
    /// `wrapper`: for fault-injection and power-loss tests. Default = none.
    /// Feature `testing` only.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    #[must_use]
    pub fn wrap_files(mut self, wrapper: FileWrapper) -> Self {
        self.file_wrapper = Some(wrapper);
        self
    }

    /// Opens the database for reading only, writing nothing to its
    /// directory: no file is created, changed or removed (the `LOCK` file
    /// is locked shared, so readers exclude a writer and not each other).
    /// Every write, tree creation, checkpoint and compaction fails with
    /// [`Error::ReadOnly`]; closing writes no checkpoint. A database that
    /// was not closed cleanly needs recovery, which writes, so its
    /// read-only open fails with [`Error::ReadOnly`]: open it read-write
    /// once. For inspection tools (`barracuda stat`, `check`, `dump`,
    /// `get`): a damaged database can be looked at without changing it.
    /// Default = false.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// A tree's data file as the database uses it: wrapped like every file
    /// ([`Options::wrap`]), then slowed by the emulated device latency.
    pub(crate) fn wrap_data_file(
        &self,
        path: &Path,
        file: Arc<dyn BlockFile>,
    ) -> Arc<dyn BlockFile> {
        let file = self.wrap(path, file);
        #[cfg(feature = "testing")]
        if !self.device_latency.is_zero() {
            return Arc::new(barracuda_io::FaultFile::with_latency(
                file,
                self.device_latency,
            ));
        }
        file
    }

    pub(crate) fn wrap(&self, path: &Path, file: Arc<dyn BlockFile>) -> Arc<dyn BlockFile> {
        let file = match &self.file_wrapper {
            Some(wrapper) => (wrapper.0)(path, file),
            None => file,
        };
        if self.read_only {
            // Whatever would write (a recovery step, a flush) fails instead.
            Arc::new(barracuda_io::ReadOnlyFile::new(file))
        } else {
            file
        }
    }

    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let invalid = |reason: String| Err(Error::InvalidOptions { reason });
        if !(1..=64).contains(&self.read_io_threads) || !(1..=64).contains(&self.write_io_threads) {
            return invalid(format!(
                "read and write I/O threads must be 1..=64, not {} and {}",
                self.read_io_threads, self.write_io_threads
            ));
        }
        if !(1..=barracuda_io::QUEUE_DEPTH_MAX).contains(&self.io_queue_depth) {
            return invalid(format!(
                "io_queue_depth must be 1..={}, not {}",
                barracuda_io::QUEUE_DEPTH_MAX,
                self.io_queue_depth
            ));
        }
        let log_bytes = self.log_bytes_or_default();
        if !(LOG_BYTES_MIN..=crate::wal::LOG_BYTES_MAX).contains(&log_bytes) {
            return invalid(format!(
                "log_bytes must be 1 MiB..=1 TiB ({LOG_BYTES_MIN}..={}), not {log_bytes}",
                crate::wal::LOG_BYTES_MAX,
            ));
        }
        if !(BUFFER_POOL_BYTES_MIN..=BUFFER_POOL_BYTES_MAX).contains(&self.buffer_pool_bytes) {
            return invalid(format!(
                "buffer_pool_bytes must be 1 MiB..=1 TiB ({BUFFER_POOL_BYTES_MIN}..={BUFFER_POOL_BYTES_MAX}), not {}",
                self.buffer_pool_bytes
            ));
        }
        for (name, value, max) in [
            ("group_commit_window", self.group_commit_window, SECOND),
            ("device_latency", self.device_latency, SECOND),
            ("log_flush_interval", self.log_flush_interval, DAY),
            ("checkpoint_interval", self.checkpoint_interval, DAY),
            (
                "idle_checkpoint",
                self.idle_checkpoint.unwrap_or_default(),
                DAY,
            ),
        ] {
            if value > max {
                return invalid(format!("{name} must be at most {max:?}, not {value:?}"));
            }
        }
        if self.read_ahead_pages > READ_AHEAD_PAGES_MAX {
            return invalid(format!(
                "read_ahead_pages must be 0..={READ_AHEAD_PAGES_MAX}, not {}",
                self.read_ahead_pages
            ));
        }
        self.default_tree
            .validate()
            .map_err(|e| Error::InvalidOptions {
                reason: format!("default_tree_options: {e}"),
            })?;
        if self.os_cache_tier && self.flush_method.is_direct() {
            return invalid(format!(
                "os_cache_tier needs a buffered flush_method (FlushMethod::Fsync): \
                 {:?} bypasses the OS page cache",
                self.flush_method
            ));
        }
        // The pool lends the record cache its memory down to this floor.
        if self
            .buffer_pool_bytes
            .saturating_sub(self.record_cache_bytes)
            < barracuda_pool::LEND_KEEP_BYTES_MIN
        {
            return invalid(format!(
                "record_cache_bytes {} leaves the buffer pool less than 1 MiB of \
                 buffer_pool_bytes {}",
                self.record_cache_bytes, self.buffer_pool_bytes
            ));
        }
        Ok(())
    }
}
