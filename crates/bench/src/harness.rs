//! What every reference experiment shares: the common options, a
//! small [`Store`] trait with its implementation over a tree of the public
//! `barracuda::Db` API, the measurement loop (client threads, warm-up,
//! getrusage CPU time, pool counters), and the outputs (a table, `--json`,
//! `--plot`).
//!
//! The workloads talk to a [`Store`] only ([`DbStore`] implements it): one
//! database per table, in its own directory, with its own pool.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use barracuda_base::{BlockSize, Geometry};
use barracuda_codec::{Codec, sample::TextGenerator};
use barracuda_io::FlushMethod;
use barracuda_pool::{EvictionPolicy, PoolStatus};
use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde::Serialize;

/// Seed of every generator, so that runs are repeatable.
pub const SEED: u64 = 0x4261_7272_6163_7564;
/// A measurement is cut into slices of this length to decide when the
/// warm-up is over (the pool's counters are read between slices).
const WARMUP_SLICE_MS: u64 = 250;
/// The warm-up ends once a slice misses at most this share of its page
/// gets (the working set is cached) or the pool has started to evict.
const WARM_MISS_SHARE_MAX: f64 = 0.001;

/// Options every workload takes.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Write one JSON object per measured point (an array) to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the workload's curves into this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Directory for the data files, kept after the run (default: a new
    /// directory in the system's temporary directory, `TMPDIR` or `/tmp`,
    /// or `/var/tmp` when that is a tmpfs; removed at the end, also on
    /// Ctrl-C).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Grow rows and pool together by this factor, 0.01..=100.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true,
          value_parser = f64_in(0.01, 100.0))]
    pub scale: f64,
    /// Take row text from this file instead of the db_bench-style generator.
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// The fraction of its size generated text compresses to (db_bench's
    /// `compression_ratio`), 0.05..=1 (1: incompressible).
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true,
          value_parser = f64_in(0.05, 1.0))]
    pub ratio: f64,
    /// Latency added to every read, write and sync through the fault
    /// backend, µs (emulates the reference studies' slow disks).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = int_in::<u64>(0, 1_000_000))]
    pub device_latency_us: u64,
    /// Client threads.
    #[arg(long, default_value_t = 16, allow_negative_numbers = true, value_parser = int_in::<usize>(1, 1024))]
    pub threads: usize,
    /// Timed part of each point, ms.
    #[arg(long, default_value_t = 1500, allow_negative_numbers = true, value_parser = int_in::<u64>(100, 3_600_000))]
    pub measure_ms: u64,
    /// Least random warm-up of each point before timing, ms.
    #[arg(long, default_value_t = 500, allow_negative_numbers = true, value_parser = int_in::<u64>(0, 3_600_000))]
    pub warmup_ms: u64,
    /// Most random warm-up of each point, ms (it ends earlier once the pool
    /// is full or the working set is cached).
    #[arg(long, default_value_t = 3000, allow_negative_numbers = true, value_parser = int_in::<u64>(0, 3_600_000))]
    pub warmup_max_ms: u64,
}

impl CommonArgs {
    /// The added device latency as a chart title states it.
    pub fn latency_label(&self) -> String {
        if self.device_latency_us == 0 {
            "no added latency".to_string()
        } else {
            format!("+{} us device latency", self.device_latency_us)
        }
    }

    /// `value` grown by `--scale`, at least 1.
    pub fn scaled(&self, value: u64) -> u64 {
        ((value as f64 * self.scale).round() as u64).max(1)
    }

    /// The data directory: `--dir`, or a new temporary directory (see
    /// [`crate::cleanup::temp_parent`]) that the returned guard removes,
    /// also on Ctrl-C. Fails before anything is written if the filesystem
    /// has less than `needed_bytes` free.
    pub fn data_dir(
        &self,
        needed_bytes: u64,
    ) -> anyhow::Result<(PathBuf, Option<crate::cleanup::TempDir>)> {
        let (dir, guard) = match &self.dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                (dir.clone(), None)
            }
            None => {
                let temp = crate::cleanup::TempDir::new(
                    &crate::cleanup::temp_parent(),
                    "barracuda-bench-",
                )?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        crate::cleanup::ensure_free(&dir, needed_bytes, "this run")?;
        Ok((dir, guard))
    }

    /// The text source: `--corpus` or generated text at `--ratio`.
    pub fn text(&self) -> anyhow::Result<TextGenerator> {
        match &self.corpus {
            Some(path) => {
                let corpus =
                    std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
                if corpus.is_empty() {
                    bail!("corpus {} is empty", path.display());
                }
                Ok(TextGenerator::from_corpus(&corpus))
            }
            None => Ok(TextGenerator::compressible(SEED, self.ratio)),
        }
    }

    /// The line every table starts with: what the numbers were measured on.
    pub fn banner(&self, what: &str) -> String {
        let latency = if self.device_latency_us == 0 {
            "no added device latency".to_string()
        } else {
            format!(
                "device latency {} us added to every I/O (fault backend)",
                self.device_latency_us
            )
        };
        format!(
            "# {what}; {} client threads; {latency}; text: {}; load average {}",
            self.threads,
            match &self.corpus {
                Some(p) => format!("corpus {}", p.display()),
                None => format!("generated, ratio {}", self.ratio),
            },
            load_average()
        )
    }
}

/// Prints a legend under a table: one line per column or term.
pub fn print_legend(entries: &[(&str, &str)]) {
    println!();
    println!("legend:");
    let width = entries
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0);
    for (name, meaning) in entries {
        println!("  {name:<width$}  {meaning}");
    }
}

/// Legend entries of the columns the query workloads share.
pub const QUERY_COLUMNS_LEGEND: [(&str, &str); 6] = [
    (
        "queries/s",
        "queries answered per second by all client threads, over the timed part",
    ),
    ("hit%", "page gets served from the pool without a read"),
    (
        "unzips/s",
        "decompressions: of cached blocks on hits, and after reads",
    ),
    ("I/Os/s", "pages read plus pages written per second"),
    (
        "LRU, unzip_LRU",
        "pages cached; of those, pages cached uncompressed (a frame)",
    ),
    (
        "blocks, cpu_us/q",
        "compressed blocks cached; CPU time of the process per query",
    ),
];

/// A value parser for floating-point flags: a number in `min..=max`, the
/// range named in the error (clap's ranges are for integers only).
pub fn f64_in(min: f64, max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |text| match text.parse::<f64>() {
        Ok(value) if (min..=max).contains(&value) => Ok(value),
        Ok(_) => Err(format!("{text} is not in {min}..={max}")),
        Err(e) => Err(format!("{e}; expected a number in {min}..={max}")),
    }
}

/// A value parser for integer flags: a whole number in `min..=max`, the
/// range named in every error (clap's own ranged parsers say only "number
/// too large to fit in target type" past the type's end).
pub fn int_in<T: TryFrom<u128>>(
    min: u128,
    max: u128,
) -> impl Fn(&str) -> Result<T, String> + Clone {
    move |text| {
        let range = || format!("{min}..={max}");
        let value = text
            .parse::<u128>()
            .map_err(|_| format!("{text} is not a whole number in {}", range()))?;
        if !(min..=max).contains(&value) {
            return Err(format!("{text} is not in {}", range()));
        }
        T::try_from(value).map_err(|_| format!("{text} is not in {}", range()))
    }
}

/// The first three fields of `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// How one table's pages are stored and cached.
#[derive(Clone, Debug)]
pub struct TableSpec {
    /// Name in tables and plots.
    pub label: String,
    /// Logical page size.
    pub page_size_bytes: usize,
    /// Compressed block size, or `None` for an uncompressed table.
    pub block: Option<BlockSize>,
    /// The codec (ignored when uncompressed).
    pub codec: Codec,
    /// Frame/page eviction rule.
    pub eviction: EvictionPolicy,
}

impl TableSpec {
    /// An uncompressed table.
    pub fn plain(label: &str, page_size_bytes: usize) -> Self {
        Self {
            label: label.into(),
            page_size_bytes,
            block: None,
            codec: Codec::None,
            eviction: EvictionPolicy::CostAware,
        }
    }

    /// A compressed table.
    pub fn compressed(
        label: &str,
        page_size_bytes: usize,
        block: BlockSize,
        codec: Codec,
        eviction: EvictionPolicy,
    ) -> Self {
        Self {
            label: label.into(),
            page_size_bytes,
            block: Some(block),
            codec,
            eviction,
        }
    }

    /// The codec's name, `none` when uncompressed.
    pub fn codec_name(&self) -> &'static str {
        match (&self.block, &self.codec) {
            (None, _) | (_, Codec::None) => "none",
            (_, Codec::Zlib { .. }) => "zlib",
            (_, Codec::Zstd { .. }) => "zstd",
            _ => "other",
        }
    }

    /// Bytes of one on-disk unit (block, or page when uncompressed).
    pub fn unit_bytes(&self) -> anyhow::Result<usize> {
        Ok(self.geometry()?.block_size_bytes())
    }

    fn geometry(&self) -> anyhow::Result<Geometry> {
        Ok(match self.block {
            Some(block) => Geometry::new(self.page_size_bytes, block)?,
            None => Geometry::uncompressed(self.page_size_bytes)?,
        })
    }
}

/// Leaves a range scan reads ahead unless a workload says otherwise: the
/// database's default (none).
pub const READ_AHEAD_PAGES_DEFAULT: usize = 0;

/// How the data file is opened.
#[derive(Clone, Copy, Debug)]
pub struct FileSpec {
    /// `Fsync` (buffered) or `ODirect`.
    pub flush_method: FlushMethod,
    /// Threads serving batched reads (read-ahead).
    pub read_io_threads: usize,
    /// Added latency per request, µs (0: none).
    pub device_latency_us: u64,
    /// Leaves a range scan reads ahead (0: none).
    pub read_ahead_pages: usize,
    /// Requests each I/O thread keeps in flight (its ring's depth).
    pub io_queue_depth: u32,
}

/// The operations the workloads need. See the module docs.
pub trait Store: Send + Sync {
    /// Inserts or replaces.
    fn put(&self, key: &[u8], value: &[u8]) -> anyhow::Result<()>;
    /// Point lookup.
    fn get(&self, key: &[u8]) -> anyhow::Result<Option<Vec<u8>>>;
    /// Visits entries with `from <= key` in key order until `visit` returns
    /// false.
    fn scan(&self, from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> anyhow::Result<()>;
    /// The pool's counters (resets the interval hit rate).
    fn status(&self) -> PoolStatus;
    /// Writes every dirty page and syncs the file.
    fn flush(&self) -> anyhow::Result<()>;
    /// Pages the table uses (allocated ids).
    fn page_count(&self) -> u64;
}

/// The Db refuses pools below 1 MiB; smaller scaled pools are raised to it.
pub const POOL_BYTES_MIN: u64 = 1 << 20;
/// Name of the one tree each benchmark database holds.
const TREE_NAME: &str = "rows";
/// The write-ahead log of a benchmark database: small, so that copies of a
/// loaded database stay cheap (a checkpoint runs when half of it is used).
const BENCH_LOG_BYTES: u64 = 64 << 20;

/// A [`Store`] over one tree of a `barracuda::Db` in its own directory.
pub struct DbStore {
    db: barracuda::Db,
    tree: barracuda::Tree,
    dir: PathBuf,
    unit_bytes: u64,
}

impl DbStore {
    /// A new database in `dir` (removed first if it exists) with one empty
    /// tree laid out as `spec`, writes not synced (`Durability::NoSync`).
    pub fn create(
        dir: &Path,
        spec: &TableSpec,
        file_spec: FileSpec,
        pool_bytes: usize,
    ) -> anyhow::Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        let db = db_options(spec, file_spec, pool_bytes)
            .open(dir)
            .with_context(|| format!("creating a database in {}", dir.display()))?;
        let tree = db.create_tree(TREE_NAME, tree_options(spec))?;
        Ok(Self {
            db,
            tree,
            dir: dir.to_path_buf(),
            unit_bytes: spec.unit_bytes()? as u64,
        })
    }

    /// Opens the database in `dir` with a pool of `pool_bytes` and `spec`'s
    /// eviction policy.
    pub fn open(
        dir: &Path,
        spec: &TableSpec,
        file_spec: FileSpec,
        pool_bytes: usize,
    ) -> anyhow::Result<Self> {
        let db = db_options(spec, file_spec, pool_bytes)
            .open(dir)
            .with_context(|| format!("opening the database in {}", dir.display()))?;
        let tree = db.tree(TREE_NAME)?;
        Ok(Self {
            db,
            tree,
            dir: dir.to_path_buf(),
            unit_bytes: spec.unit_bytes()? as u64,
        })
    }

    /// A copy of this (checkpointed) database in `dir`, opened with a pool
    /// of `pool_bytes` and `spec`'s eviction policy, so that several
    /// configurations can read the same data at once.
    pub fn copy_to(
        &self,
        dir: &Path,
        spec: &TableSpec,
        file_spec: FileSpec,
        pool_bytes: usize,
    ) -> anyhow::Result<Self> {
        self.flush()?;
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_name() == barracuda_io::LOCK_FILE_NAME {
                continue;
            }
            std::fs::copy(entry.path(), dir.join(entry.file_name()))
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
        Self::open(dir, spec, file_spec, pool_bytes)
    }

    /// Closes the database (a final checkpoint).
    pub fn close(self) -> anyhow::Result<PathBuf> {
        let dir = self.dir.clone();
        drop(self.tree);
        self.db.close()?;
        Ok(dir)
    }

    /// The tree's data file.
    pub fn data_file(&self) -> anyhow::Result<PathBuf> {
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "bdb") {
                return Ok(path);
            }
        }
        bail!("no data file in {}", self.dir.display())
    }
}

fn db_options(spec: &TableSpec, file_spec: FileSpec, pool_bytes: usize) -> barracuda::Options {
    barracuda::Db::options()
        .buffer_pool_bytes(pool_bytes)
        .eviction_policy(spec.eviction)
        .read_io_threads(file_spec.read_io_threads)
        .read_ahead_pages(file_spec.read_ahead_pages)
        .io_queue_depth(file_spec.io_queue_depth)
        .flush_method(file_spec.flush_method)
        .durability(barracuda::Durability::NoSync)
        .log_bytes(BENCH_LOG_BYTES)
        .device_latency(Duration::from_micros(file_spec.device_latency_us))
}

fn tree_options(spec: &TableSpec) -> barracuda::TreeOptions {
    let compression = match (&spec.block, &spec.codec) {
        (Some(_), Codec::Zlib { level }) => barracuda::Compression::Zlib { level: *level },
        (Some(_), Codec::Zstd { level, .. }) => barracuda::Compression::Zstd { level: *level },
        _ => barracuda::Compression::None,
    };
    barracuda::TreeOptions::default()
        .page_size_bytes(spec.page_size_bytes)
        .compression(compression)
        .block_size(spec.block.unwrap_or(BlockSize::Uncompressed))
}

impl Store for DbStore {
    fn put(&self, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
        self.tree.put(key, value)?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
        Ok(self.tree.get(key)?)
    }

    fn scan(&self, from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> anyhow::Result<()> {
        // The visitor scan: no copy of each entry into owned vectors.
        self.tree.scan(from.., visit)?;
        Ok(())
    }

    fn status(&self) -> PoolStatus {
        self.tree.pool_status()
    }

    fn flush(&self) -> anyhow::Result<()> {
        self.db.checkpoint()?;
        Ok(())
    }

    fn page_count(&self) -> u64 {
        self.tree.file_bytes().unwrap_or(0) / self.unit_bytes.max(1)
    }
}

/// Drops the OS page cache of `path` (`posix_fadvise(DONTNEED)`), so a
/// buffered run starts cold.
pub fn drop_os_cache(path: &Path) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: `file` is open for the whole call; fadvise only reads its
    // arguments and touches no memory of ours.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        bail!(
            "posix_fadvise(DONTNEED) on {} failed: errno {rc}",
            path.display()
        );
    }
    Ok(())
}

/// User plus system CPU time of the whole process so far, µs.
pub fn process_cpu_us() -> u64 {
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage for the call's duration.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// A progress style from `template`, which may use `{rate}`: items per
/// second as a whole number (indicatif's `{per_sec}` prints four decimals,
/// `22,022.5982/s`).
pub fn progress_style(template: &str) -> anyhow::Result<ProgressStyle> {
    Ok(ProgressStyle::with_template(template)
        .with_context(|| format!("progress template {template:?}"))?
        .with_key(
            "rate",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            },
        ))
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(len: u64, message: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = progress_style("{msg:32} {bar:40} {human_pos}/{human_len} {rate} eta {eta}")
    {
        bar.set_style(style);
    }
    bar.set_message(message.to_string());
    bar
}

/// Makes the records (key, value) of row `i` from the text source and a
/// random generator.
pub type RowFn = dyn Fn(u64, &mut TextGenerator, &mut SmallRng) -> Vec<(Vec<u8>, Vec<u8>)> + Sync;

/// Inserts `count` rows made by `row(i, text)` (one or more key-value
/// pairs each) with `threads` threads over disjoint ranges of `i`.
pub fn load(
    store: &dyn Store,
    count: u64,
    threads: usize,
    message: &str,
    text: &TextGenerator,
    row: &RowFn,
) -> anyhow::Result<()> {
    let bar = progress(count, message);
    let done = AtomicU64::new(0);
    let threads = threads.max(1) as u64;
    let per_thread = count.div_ceil(threads);
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (bar, done) = (&bar, &done);
                let mut text = text.clone();
                s.spawn(move || -> anyhow::Result<()> {
                    let mut rng = SmallRng::seed_from_u64(SEED ^ t);
                    // Each thread skips ahead in the text so threads differ.
                    let _ = text.generate(((t as usize) * 4099) % 65_536);
                    let first = t * per_thread;
                    for i in first..(first + per_thread).min(count) {
                        for (k, v) in row(i, &mut text, &mut rng) {
                            store.put(&k, &v)?;
                        }
                        let n = done.fetch_add(1, Ordering::Relaxed);
                        if n.is_multiple_of(1024) {
                            bar.set_position(n);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    store.flush()
}

/// What one measurement saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Measured {
    /// Timed queries.
    pub queries: u64,
    /// Timed seconds.
    pub elapsed_s: f64,
    /// Queries per second.
    pub queries_per_s: f64,
    /// Buffer pool hit rate over the timed part (1 - reads / page gets).
    pub hit_rate: f64,
    /// Decompressions per second (on hits and after reads).
    pub unzips_per_s: f64,
    /// Decompressions of cached blocks on hits, per second.
    pub hit_unzips_per_s: f64,
    /// Pages read plus pages written, per second.
    pub ios_per_s: f64,
    /// Pages read per second by fixes (misses; read-ahead not included).
    pub reads_per_s: f64,
    /// Pages read ahead (through the read threads) and installed, per
    /// second.
    pub read_ahead_per_s: f64,
    /// Pages read ahead and evicted before any fix used them, per second.
    pub read_ahead_evicted_unused_per_s: f64,
    /// Page gets per second.
    pub page_gets_per_s: f64,
    /// `LRU len` at the end.
    pub lru_len: u64,
    /// `unzip_LRU len` at the end.
    pub unzip_lru_len: u64,
    /// unzip_LRU : LRU.
    pub unzip_lru_share: f64,
    /// Frames dropped per second.
    pub frames_dropped_per_s: f64,
    /// Blocks of clean pages dropped per second (the page keeps its frame
    /// alone: `CostAware` while frames alone fit).
    pub blocks_dropped_per_s: f64,
    /// Cached compressed blocks at the end (`LRU len` minus this is the
    /// number of pages kept as their frame alone).
    pub block_count: u64,
    /// Whole pages evicted per second.
    pub pages_evicted_per_s: f64,
    /// Pages made young per second (each takes the pool mutex).
    pub made_young_per_s: f64,
    /// User + system CPU of the process per query, µs (getrusage).
    pub cpu_us_per_query: f64,
    /// The cost-aware policy's target frame share at the end, per mille.
    pub target_frame_share_per_mille: u32,
    /// Measured average unzip time, ns.
    pub unzip_time_avg_ns: u64,
    /// Measured average read time, ns.
    pub read_time_avg_ns: u64,
    /// Warm-up spent before timing, s.
    pub warmup_s: f64,
}

/// Runs `query` on `threads` threads: a random warm-up of at least
/// `--warmup-ms` (until the pool evicts or misses at most 0.1% of its page
/// gets, or `--warmup-max-ms`), then `--measure-ms` timed.
pub fn measure(
    store: &dyn Store,
    args: &CommonArgs,
    query: &(dyn Fn(&mut SmallRng) -> anyhow::Result<()> + Sync),
) -> anyhow::Result<Measured> {
    let stop = AtomicBool::new(false);
    let count = AtomicU64::new(0);
    let failed: std::sync::Mutex<Option<anyhow::Error>> = std::sync::Mutex::new(None);
    std::thread::scope(|s| -> anyhow::Result<Measured> {
        for t in 0..args.threads.max(1) {
            let (stop, count, failed) = (&stop, &count, &failed);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(SEED.wrapping_add(t as u64 * 7919));
                while !stop.load(Ordering::Relaxed) {
                    if let Err(e) = query(&mut rng) {
                        if let Ok(mut slot) = failed.lock() {
                            slot.get_or_insert(e);
                        }
                        stop.store(true, Ordering::Relaxed);
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let result = timed(store, args, &count, &stop);
        stop.store(true, Ordering::Relaxed);
        result
    })
    .and_then(|m| match failed.lock().ok().and_then(|mut f| f.take()) {
        Some(e) => Err(e.context("a query failed")),
        None => Ok(m),
    })
}

fn timed(
    store: &dyn Store,
    args: &CommonArgs,
    count: &AtomicU64,
    stop: &AtomicBool,
) -> anyhow::Result<Measured> {
    let warm_start = Instant::now();
    let mut before = store.status();
    loop {
        std::thread::sleep(Duration::from_millis(WARMUP_SLICE_MS));
        let now = store.status();
        let warm_ms = warm_start.elapsed().as_millis() as u64;
        let gets = now.page_gets.saturating_sub(before.page_gets).max(1);
        let reads = now.pages_read.saturating_sub(before.pages_read);
        let freed = |s: &PoolStatus| s.pages_evicted + s.frames_dropped + s.blocks_dropped;
        let evicting = freed(&now) > freed(&before);
        let settled = evicting || (reads as f64) <= WARM_MISS_SHARE_MAX * gets as f64;
        before = now;
        if stop.load(Ordering::Relaxed)
            || warm_ms >= args.warmup_max_ms
            || (warm_ms >= args.warmup_ms && settled)
        {
            break;
        }
    }
    let warmup_s = warm_start.elapsed().as_secs_f64();
    let start_status = store.status();
    let start_count = count.load(Ordering::Relaxed);
    let start_cpu = process_cpu_us();
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(args.measure_ms));
    let end_count = count.load(Ordering::Relaxed);
    let elapsed_s = start.elapsed().as_secs_f64();
    let end_cpu = process_cpu_us();
    let end = store.status();
    Ok(derive(
        &start_status,
        &end,
        end_count - start_count,
        elapsed_s,
        end_cpu.saturating_sub(start_cpu),
        warmup_s,
    ))
}

fn derive(
    a: &PoolStatus,
    b: &PoolStatus,
    queries: u64,
    elapsed_s: f64,
    cpu_us: u64,
    warmup_s: f64,
) -> Measured {
    let per_s = |x: u64, y: u64| y.saturating_sub(x) as f64 / elapsed_s.max(1e-9);
    let gets = b.page_gets.saturating_sub(a.page_gets);
    let reads = b.pages_read.saturating_sub(a.pages_read);
    let compressed = b.codec.block_size_bytes != 0 && b.block_count > 0;
    let unzips_total = |s: &PoolStatus| s.unzips + if compressed { s.pages_read } else { 0 };
    Measured {
        queries,
        elapsed_s,
        queries_per_s: queries as f64 / elapsed_s.max(1e-9),
        hit_rate: if gets == 0 {
            1.0
        } else {
            1.0 - reads as f64 / gets as f64
        },
        unzips_per_s: per_s(unzips_total(a), unzips_total(b)),
        hit_unzips_per_s: per_s(a.unzips, b.unzips),
        ios_per_s: per_s(
            a.pages_read + a.pages_written,
            b.pages_read + b.pages_written,
        ),
        reads_per_s: per_s(a.pages_read, b.pages_read),
        read_ahead_per_s: per_s(a.read_ahead, b.read_ahead),
        read_ahead_evicted_unused_per_s: per_s(
            a.read_ahead_evicted_unused,
            b.read_ahead_evicted_unused,
        ),
        page_gets_per_s: per_s(a.page_gets, b.page_gets),
        lru_len: b.lru_len,
        unzip_lru_len: b.unzip_lru_len,
        unzip_lru_share: b.unzip_lru_len as f64 / b.lru_len.max(1) as f64,
        frames_dropped_per_s: per_s(a.frames_dropped, b.frames_dropped),
        blocks_dropped_per_s: per_s(a.blocks_dropped, b.blocks_dropped),
        block_count: b.block_count,
        pages_evicted_per_s: per_s(a.pages_evicted, b.pages_evicted),
        made_young_per_s: per_s(a.pages_made_young, b.pages_made_young),
        cpu_us_per_query: cpu_us as f64 / queries.max(1) as f64,
        target_frame_share_per_mille: b.policy.target_frame_share_per_mille,
        unzip_time_avg_ns: b.unzip_time_avg_ns,
        read_time_avg_ns: b.read_time_avg_ns,
        warmup_s,
    }
}

/// Reads every key of `keys` once, on `threads` threads (a warm-up that
/// touches each page of a working set).
pub fn touch_all(store: &dyn Store, keys: &[Vec<u8>], threads: usize) -> anyhow::Result<()> {
    let threads = threads.max(1);
    let chunk = keys.len().div_ceil(threads).max(1);
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = keys
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || -> anyhow::Result<()> {
                    for k in part {
                        store.get(k)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("a warm-up thread panicked"))??;
        }
        Ok(())
    })
}

/// Writes `points` as a JSON array.
pub fn write_json<T: Serialize>(path: &Path, points: &[T]) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(points)?;
    std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))
}
