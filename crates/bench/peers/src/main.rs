//! `compare`: Barracuda side by side with redb, LMDB, RocksDB, sled and
//! fjall. Workload 1 is redb's benchmark; workload 2 reads compressible
//! values from data four times the memory budget. Every engine runs in its
//! own child process; in workload 2 each child runs in its own memory
//! cgroup (see [`limit`]). The parent prints a markdown table (one column
//! per engine), and writes `--json` and a `--plot` SVG.

mod engines;
mod limit;
mod plot;
mod workloads;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde::{Deserialize, Serialize};

use engines::{ENGINE_NAMES, Setup};
use limit::{Cgroup, LimitMode};
use workloads::Measurement;

/// redb's harness uses 5,000,000 pairs; the default here is 1,000,000.
const DEFAULT_PAIRS: f64 = 1_000_000.0;

/// Barracuda's page compression in workload 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum W2Codec {
    /// Zstandard (`Compression::Zstd`), level [`W2_ZSTD_LEVEL`].
    Zstd,
    /// zlib level 6, Barracuda's default.
    Zlib,
}

/// Barracuda's I/O backend in workload 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum W2Io {
    /// io_uring where available (`Backend::Auto`, the default).
    Auto,
    /// pread/pwrite (`Backend::Pread`).
    Pread,
}

/// Workload 2: how Barracuda's files are opened (`Options::flush_method`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum W2Flush {
    /// `O_DIRECT`, Barracuda's default: the buffer pool is its only cache.
    Odirect,
    /// Buffered I/O with fdatasync, as the other five engines: the OS page
    /// cache holds the blocks read last, as the pool does, within the same
    /// cgroup.
    Fsync,
    /// Buffered, with the OS page cache as a second tier of blocks that the
    /// pool does not hold (`Options::os_cache_tier`): what the cgroup
    /// leaves beside the pool holds other blocks than the pool's.
    Tier,
}

/// zstd's own default level.
const W2_ZSTD_LEVEL: i32 = 3;

#[derive(Parser, Debug)]
#[command(
    name = "compare",
    about = "Barracuda against redb, LMDB, RocksDB, sled and fjall"
)]
struct Args {
    /// Workload: 1 (redb's benchmark), 2 (larger than memory) or all.
    #[arg(long, default_value = "all")]
    workload: String,
    /// Engines, comma separated (rocksdb needs `--features rocksdb`).
    #[arg(long, value_delimiter = ',', default_values_t = default_engines())]
    engines: Vec<String>,
    /// Workload 1 size: pairs = 1,000,000 x scale (redb's own run is 5).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Workload 1 cache of every engine, MiB.
    #[arg(long, default_value_t = 1024)]
    cache_mib: usize,
    /// Workload 2 memory budget (every engine's cache), MiB; the data is
    /// four times this.
    #[arg(long, default_value_t = 64)]
    budget_mib: usize,
    /// Workload 2 gets per pass (uniform, then Zipf).
    #[arg(long, default_value_t = 400_000)]
    reads: usize,
    /// Parent of the engines' data directories (must not be tmpfs:
    /// Barracuda uses O_DIRECT).
    #[arg(long, default_value = "target/peers-data")]
    dir: PathBuf,
    /// Writes every measurement as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Writes a bar chart (each row relative to its best engine) as SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Workload 2: how each engine's memory is limited: `cgroup` (its own
    /// memory cgroup of budget + overhead, which charges the OS page cache
    /// too, for the load and for the reads), `cgroup-reads` (for the reads
    /// only, the default: see docs/benchmarks.md on why the load is not)
    /// or `none` (the engines' cache settings only).
    #[arg(long, value_enum, default_value_t = LimitMode::CgroupReads)]
    memory_limit: LimitMode,
    /// Workload 2: MiB each cgroup allows on top of the budget, for the
    /// process itself. Peak RSS of the reads child of a 4 MiB dataset
    /// with a 1 MiB cache: Barracuda 21.5 MiB, sled 21.0, redb 18.3, LMDB
    /// 12.5 (its map included), fjall 10.5; plus the harness's key array
    /// and Zipf table at full size (8 MiB): about 30 MiB. With 32 MiB,
    /// redb's reads child was OOM-killed in its Zipf pass at full size;
    /// 48 is the next 16 MiB step.
    #[arg(long, default_value_t = 48)]
    overhead_mib: usize,
    /// Workload 2: Barracuda's page compression (16 KiB pages in 8 KiB
    /// blocks either way).
    #[arg(long, value_enum, default_value_t = W2Codec::Zstd)]
    barracuda_codec: W2Codec,
    /// Workload 2, diagnosis only: Barracuda's buffer pool in MiB instead
    /// of the budget (the memory a cgroup leaves it; not a fair column).
    #[arg(long)]
    barracuda_pool_mib: Option<usize>,
    /// Workload 2: Barracuda's page size in KiB, 16 (the tree default) or
    /// 8, compressed into blocks of half the page. A compaction packs 15 of
    /// workload 2's records into an 8 KiB block, where a 4 KiB block holds
    /// at most 7 (8 x 524 bytes of random half and key exceed 4,096): 137.0
    /// against 147.4 MiB. 8 KiB pages carry half as many cold neighbours of
    /// a hot key per cached block, but their reads were no faster within
    /// this host's noise, so the tree default stays.
    #[arg(long, default_value_t = 16)]
    barracuda_page_kib: usize,
    /// Workload 2: Barracuda's I/O backend.
    #[arg(long, value_enum, default_value_t = W2Io::Auto)]
    barracuda_io: W2Io,
    /// Workload 2: how Barracuda opens its files and whether it uses the
    /// OS page cache. The other five engines read through the page cache
    /// that their cgroup leaves beside their cache setting; with `odirect`
    /// Barracuda leaves that memory unused (peak 83 of 112 MiB), with
    /// `fsync` its page cache holds the blocks its pool holds too, and with
    /// `tier` (the default) it holds other blocks: four alternating rounds
    /// of Barracuda alone, `tier` against `odirect`, uniform 1.18x to 1.24x
    /// and Zipf 1.11x to 1.15x in the three fast-host rounds, 1.00x and
    /// 0.81x in the slow one, where the tier's extra CPU (page-cache inserts
    /// and drops, about a quarter more for the reads) counts
    /// (docs/benchmarks.md).
    #[arg(long, value_enum, default_value_t = W2Flush::Tier)]
    barracuda_flush: W2Flush,
    /// Workload 2: of Barracuda's cache budget (the same as every engine's),
    /// the MiB that may hold single records (`Options::record_cache_bytes`);
    /// the buffer pool has the rest, and all of it while the cache does not
    /// serve more gets than that memory would as pool (it weighs a probe
    /// shard's hits against the pool's ghost hits every ~32,000 gets).
    /// With 8: the uniform pass gives it back and reads 0.85% more pages
    /// than with 0 (what it filled before it weighed), the Zipf pass keeps
    /// it and reads 11.8% fewer (docs/benchmarks.md). The load
    /// opens with it too: it makes no gets, so the cache takes nothing from
    /// its pool.
    #[arg(long, default_value_t = 8)]
    barracuda_record_cache_mib: usize,
    /// Workload 2: Barracuda's buffer pool in transparent huge pages
    /// (`Options::huge_pages`; off, as the library's default). Eight
    /// alternating rounds of Barracuda alone: the uniform pass faster in
    /// all eight (median 1.06x; a descent misses the TLB less), the Zipf
    /// pass 1.02x at the median of the pairs but its decompressions slower
    /// (docs/design.md, "Memory"). The record cache's loans
    /// split the huge pages at the Zipf pass.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    barracuda_huge_pages: bool,
    /// Workload 2: the most write-ahead log Barracuda keeps after its last
    /// checkpoint (`Options::log_bytes`), MiB; the default is Barracuda's.
    /// A checkpoint runs when half of it is in use, so a small one makes
    /// the load slower (more checkpoints). The log's segment files hold
    /// what came after the last checkpoint, so this is not in the sizes.
    #[arg(long, default_value_t = 128)]
    barracuda_log_mib: u64,
    /// Workload 2: after the load, run each engine's compaction where it
    /// has one (Barracuda `Db::compact`, redb `compact`, fjall
    /// `major_compact`, RocksDB `compact_range`; LMDB and sled have none),
    /// report its time and the size after it, and read the compacted data.
    #[arg(long)]
    w2_compact: bool,
    /// Workload 1: the most write-ahead log Barracuda keeps after its last
    /// checkpoint (`Options::log_bytes`), MiB; unset, Barracuda's default
    /// (its pool's size: the cache, 1 GiB). Workload 1 takes its sizes with
    /// the engines open, so the log's segments since the last checkpoint
    /// count in them.
    #[arg(long)]
    barracuda_w1_log_mib: Option<u64>,
    /// Barracuda's idle checkpoint (`Options::idle_checkpoint`): ms without
    /// a log append before it checkpoints, which deletes the log's
    /// segments before it; 0 turns it off. 1000 is its default. Workload 1
    /// has no such pause; with 50 it runs during the reads, and its size
    /// after the removals counts only the removals' log (docs/benchmarks.md,
    /// workload 1).
    #[arg(long, default_value_t = 1000)]
    barracuda_idle_checkpoint_ms: u64,
    /// Workload 1: Barracuda's page size, KiB.
    #[arg(long, default_value_t = 16)]
    barracuda_w1_page_kib: usize,
    /// Reads columns from earlier `--json` files instead of running (for
    /// merging runs and redrawing the chart).
    #[arg(long, num_args = 1..)]
    from_json: Vec<PathBuf>,
    /// With `--from-json`: one column per workload and engine, each value
    /// the median of the files' (their min-max kept).
    #[arg(long)]
    median: bool,
    /// Internal: run one engine in this process and print its JSON.
    #[arg(long, hide = true)]
    child: Option<String>,
    /// Internal: the child moves itself into the cgroup of this
    /// `cgroup.procs` before it starts.
    #[arg(long, hide = true)]
    cgroup_procs: Option<PathBuf>,
    /// Internal: which of workload 2's two children this is.
    #[arg(long, hide = true, value_enum)]
    phase: Option<Phase>,
}

fn default_engines() -> Vec<String> {
    ENGINE_NAMES
        .iter()
        .filter(|name| cfg!(feature = "rocksdb") || **name != "rocksdb")
        .map(|name| name.to_string())
        .collect()
}

/// One engine's column of one workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Column {
    workload: u32,
    engine: String,
    rows: Vec<Measurement>,
    /// How the child's memory was limited (workload 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory_limit: Option<String>,
    /// What else a reader of the numbers must know.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let workloads: Vec<u32> = match args.workload.as_str() {
        "1" => vec![1],
        "2" => vec![2],
        "all" => vec![1, 2],
        other => bail!("unknown workload {other}"),
    };
    if let Some(engine) = &args.child {
        return run_child(&args, engine, workloads[0]);
    }
    let mut columns = Vec::new();
    if !args.from_json.is_empty() {
        for path in &args.from_json {
            let text = std::fs::read_to_string(path).context("read json")?;
            let more: Vec<Column> = serde_json::from_str(&text)?;
            columns.extend(more);
        }
        if args.median {
            columns = medians(&columns);
        }
        let mut seen: Vec<u32> = columns.iter().map(|c| c.workload).collect();
        seen.sort_unstable();
        seen.dedup();
        for workload in seen {
            print_table(&columns, workload);
        }
    }
    let limit = if workloads.contains(&2) && args.from_json.is_empty() {
        limit::remove_stale();
        let limit = Limit::decide(&args);
        eprintln!("== workload 2 memory limit: {}", limit.describe());
        limit
    } else {
        Limit::None("not used".into())
    };
    for &workload in workloads.iter().filter(|_| args.from_json.is_empty()) {
        for engine in &args.engines {
            if workload != 1 && engine == engines::BARRACUDA_UNCOMPRESSED {
                continue;
            }
            eprintln!("== workload {workload}: {engine}");
            match run_engine(&args, engine, workload, &limit) {
                Ok(column) => columns.push(column),
                Err(e) => eprintln!("   {engine} skipped: {e:#}"),
            }
        }
        print_table(&columns, workload);
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&columns)?;
        std::fs::write(path, text).context("write json")?;
    }
    if let Some(path) = &args.plot {
        plot::bar_chart(&columns_by_workload(&columns), path)?;
    }
    Ok(())
}

/// Per workload: its title and each engine's rows.
type ByWorkload = Vec<(String, Vec<(String, Vec<Measurement>)>)>;

fn columns_by_workload(columns: &[Column]) -> ByWorkload {
    let mut workloads: Vec<u32> = columns.iter().map(|c| c.workload).collect();
    workloads.sort_unstable();
    workloads.dedup();
    workloads
        .into_iter()
        .map(|w| {
            let engines = columns
                .iter()
                .filter(|c| c.workload == w)
                .map(|c| (c.engine.clone(), c.rows.clone()))
                .collect();
            (format!("workload {w}"), engines)
        })
        .collect()
}

/// Runs one engine: workload 1 in one child, workload 2 in two.
fn run_engine(args: &Args, engine: &str, workload: u32, limit: &Limit) -> Result<Column> {
    if workload == 1 {
        return spawn_child(args, engine, 1, None, None);
    }
    let mut notes = Vec::new();
    let load_limit = match args.memory_limit {
        LimitMode::Cgroup => limit,
        _ => &Limit::None(String::new()),
    };
    let (mut rows, load_peak) = match run_phase(args, engine, Phase::Load, load_limit) {
        Err(e) if e.downcast_ref::<OomKilled>().is_some() => {
            eprintln!("   {e:#}: loading again outside the cgroup");
            notes.push(format!("{e}: loaded outside the cgroup, read inside"));
            let rows = spawn_child(args, engine, 2, Some(Phase::Load), None)?.rows;
            (rows, None)
        }
        other => other?,
    };
    let reads_peak = match run_phase(args, engine, Phase::Reads, limit) {
        Ok((reads, peak)) => {
            rows.extend(reads);
            peak
        }
        Err(e) if e.downcast_ref::<OomKilled>().is_some() => {
            eprintln!("   {e:#}");
            notes.push(e.to_string());
            std::fs::remove_dir_all(args.dir.join(format!("w2-{engine}"))).ok();
            for (row, unit) in W2_READ_ROWS {
                rows.push(Measurement::missing(row, unit));
            }
            None
        }
        Err(e) => return Err(e),
    };
    rows.push(Measurement::bytes("peak cgroup memory (load)", load_peak));
    rows.push(Measurement::bytes("peak cgroup memory (reads)", reads_peak));
    Ok(Column {
        workload: 2,
        engine: engine.to_string(),
        rows,
        memory_limit: Some(limit.describe()),
        notes,
    })
}

/// Rows of workload 2's reads child (N/A when it was OOM-killed).
const W2_READ_ROWS: [(&str, &str); 5] = [
    ("uniform reads (16 threads)", "ops/s"),
    ("Zipf 0.9 reads (16 threads)", "ops/s"),
    ("CPU time of the reads (user+sys)", "ms"),
    ("read from the disk by the reads", "bytes"),
    ("peak RSS (reads)", "bytes"),
];

/// The two children of workload 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    /// Loads and closes; leaves the data directory.
    Load,
    /// Drops the files' page cache, reopens, reads; removes the directory.
    Reads,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Load => "load",
            Phase::Reads => "reads",
        })
    }
}

/// A child the kernel's OOM killer killed in its cgroup.
#[derive(Debug)]
struct OomKilled {
    phase: Phase,
    limit_mib: u64,
}

impl std::fmt::Display for OomKilled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OOM-killed in its {} under the {} MiB limit",
            self.phase, self.limit_mib
        )
    }
}

impl std::error::Error for OomKilled {}

/// How workload 2's children are limited, decided once per run.
enum Limit {
    /// A fresh cgroup per child, of this many bytes; the mechanism.
    Cgroup(u64, String),
    /// No limit, and why.
    None(String),
}

impl Limit {
    /// Probes the machine (creates and removes one cgroup) when
    /// `--memory-limit cgroup`.
    fn decide(args: &Args) -> Limit {
        if args.memory_limit == LimitMode::None {
            return Limit::None("none (--memory-limit none): cache settings only".into());
        }
        let bytes = ((args.budget_mib + args.overhead_mib) as u64) << 20;
        match Cgroup::create("probe", bytes) {
            Ok(cgroup) => Limit::Cgroup(
                bytes,
                format!(
                    "{} per engine process ({} MiB budget + {} MiB process overhead), \
                     load and reads in separate processes, {}",
                    cgroup.describe(),
                    args.budget_mib,
                    args.overhead_mib,
                    match args.memory_limit {
                        LimitMode::CgroupReads => "the reads limited, the load not",
                        _ => "both limited",
                    }
                ),
            ),
            Err(e) => Limit::None(format!(
                "none (no memory cgroup: {e:#}): cache settings only"
            )),
        }
    }

    fn describe(&self) -> String {
        match self {
            Limit::Cgroup(_, text) | Limit::None(text) => text.clone(),
        }
    }
}

/// One child of workload 2, in a fresh cgroup when limited: its rows and
/// the cgroup's peak charge.
fn run_phase(
    args: &Args,
    engine: &str,
    phase: Phase,
    limit: &Limit,
) -> Result<(Vec<Measurement>, Option<u64>)> {
    let Limit::Cgroup(bytes, _) = limit else {
        return Ok((spawn_child(args, engine, 2, Some(phase), None)?.rows, None));
    };
    let cgroup = Cgroup::create(&format!("{engine}-{phase}"), *bytes)?;
    let result = spawn_child(args, engine, 2, Some(phase), Some(&cgroup));
    let peak = cgroup.peak_bytes();
    if cgroup.oom_kills().unwrap_or(0) > 0 && result.is_err() {
        let oom = OomKilled {
            phase,
            limit_mib: bytes >> 20,
        };
        return Err(anyhow::Error::new(oom));
    }
    Ok((result?.rows, peak))
}

fn spawn_child(
    args: &Args,
    engine: &str,
    workload: u32,
    phase: Option<Phase>,
    cgroup: Option<&Cgroup>,
) -> Result<Column> {
    let exe = std::env::current_exe().context("own path")?;
    let mut command = Command::new(exe);
    command
        .args(["--child", engine, "--workload", &workload.to_string()])
        .args(["--scale", &args.scale.to_string()])
        .args(["--cache-mib", &args.cache_mib.to_string()])
        .args(["--budget-mib", &args.budget_mib.to_string()])
        .args(["--reads", &args.reads.to_string()])
        .args(["--barracuda-log-mib", &args.barracuda_log_mib.to_string()])
        .args(
            args.barracuda_w1_log_mib
                .map(|mib| format!("--barracuda-w1-log-mib={mib}")),
        )
        .args([
            "--barracuda-w1-page-kib",
            &args.barracuda_w1_page_kib.to_string(),
            "--barracuda-idle-checkpoint-ms",
            &args.barracuda_idle_checkpoint_ms.to_string(),
        ])
        .arg("--barracuda-codec")
        .arg(format!("{:?}", args.barracuda_codec).to_lowercase())
        .args(
            args.barracuda_pool_mib
                .map(|mib| format!("--barracuda-pool-mib={mib}")),
        )
        .args(["--barracuda-page-kib", &args.barracuda_page_kib.to_string()])
        .arg("--barracuda-io")
        .arg(format!("{:?}", args.barracuda_io).to_lowercase())
        .arg("--barracuda-flush")
        .arg(format!("{:?}", args.barracuda_flush).to_lowercase())
        .args([
            "--barracuda-record-cache-mib",
            &args.barracuda_record_cache_mib.to_string(),
        ])
        .arg(format!(
            "--barracuda-huge-pages={}",
            args.barracuda_huge_pages
        ))
        .args(args.w2_compact.then_some("--w2-compact"))
        .arg("--dir")
        .arg(&args.dir);
    if let Some(phase) = phase {
        command.args(["--phase", &phase.to_string()]);
    }
    if let Some(cgroup) = cgroup {
        command.arg("--cgroup-procs").arg(cgroup.procs_file());
    }
    let output = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("spawn child")?;
    if !output.status.success() {
        bail!("{engine} (workload {workload}) failed: {}", output.status);
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// `--barracuda-idle-checkpoint-ms` as `Options::idle_checkpoint`.
fn idle_checkpoint(args: &Args) -> Option<std::time::Duration> {
    (args.barracuda_idle_checkpoint_ms > 0)
        .then(|| std::time::Duration::from_millis(args.barracuda_idle_checkpoint_ms))
}

fn run_child(args: &Args, engine: &str, workload: u32) -> Result<()> {
    // First, before the workload allocates anything.
    if let Some(procs) = args.cgroup_procs.as_deref() {
        limit::join(procs)?;
    }
    let dir = args.dir.join(format!("w{workload}-{engine}"));
    let phase = args.phase.unwrap_or(Phase::Load);
    if (workload == 1 || phase == Phase::Load) && dir.exists() {
        std::fs::remove_dir_all(&dir).context("remove old data")?;
    }
    let mut log = |line: &str| eprintln!("  {line}");
    let rows = if workload == 1 {
        // Barracuda's trees are its defaults (zlib, 16 KiB pages in 8 KiB
        // blocks), as a user following the README gets; the values do not
        // compress, which the tree notices. `barracuda-uncompressed` is the
        // same engine with uncompressed pages, a labelled column of its own.
        let tree = if engine == engines::BARRACUDA_UNCOMPRESSED {
            barracuda::TreeOptions::default().compression(barracuda::Compression::None)
        } else {
            barracuda::TreeOptions::default()
        }
        .page_size_bytes(args.barracuda_w1_page_kib << 10);
        let setup = Setup {
            cache_bytes: args.cache_mib << 20,
            dir: dir.clone(),
            barracuda_tree: tree,
            barracuda_log_bytes: args.barracuda_w1_log_mib.map(|mib| mib << 20),
            barracuda_io: barracuda_io::Backend::Auto,
            barracuda_flush: barracuda_io::FlushMethod::ODirect,
            barracuda_os_cache_tier: false,
            barracuda_record_cache_bytes: 0,
            barracuda_huge_pages: false,
            barracuda_idle_checkpoint: idle_checkpoint(args),
            lmdb_no_read_ahead: false,
        };
        let pairs = (DEFAULT_PAIRS * args.scale) as usize;
        let rows = workloads::workload1(engine, &setup, pairs, &mut log)?;
        std::fs::remove_dir_all(&dir).context("remove data")?;
        rows
    } else {
        let compression = match args.barracuda_codec {
            W2Codec::Zstd => barracuda::Compression::Zstd {
                level: W2_ZSTD_LEVEL,
            },
            W2Codec::Zlib => barracuda::Compression::Zlib { level: 6 },
        };
        let cache_mib = match engine {
            "barracuda" => args.barracuda_pool_mib.unwrap_or(args.budget_mib),
            _ => args.budget_mib,
        };
        let setup = Setup {
            cache_bytes: cache_mib << 20,
            dir: dir.clone(),
            barracuda_tree: barracuda::TreeOptions::default()
                .compression(compression)
                .page_size_bytes(args.barracuda_page_kib << 10)
                .block_size(match args.barracuda_page_kib {
                    8 => barracuda::BlockSize::Kib4,
                    _ => barracuda::BlockSize::Kib8,
                }),
            barracuda_log_bytes: Some(args.barracuda_log_mib << 20),
            barracuda_io: match args.barracuda_io {
                W2Io::Auto => barracuda_io::Backend::Auto,
                W2Io::Pread => barracuda_io::Backend::Pread,
            },
            barracuda_flush: match args.barracuda_flush {
                W2Flush::Odirect => barracuda_io::FlushMethod::ODirect,
                W2Flush::Fsync | W2Flush::Tier => barracuda_io::FlushMethod::Fsync,
            },
            barracuda_os_cache_tier: matches!(args.barracuda_flush, W2Flush::Tier),
            barracuda_record_cache_bytes: args.barracuda_record_cache_mib << 20,
            barracuda_huge_pages: args.barracuda_huge_pages,
            barracuda_idle_checkpoint: idle_checkpoint(args),
            lmdb_no_read_ahead: true,
        };
        let pair_bytes = workloads::KEY_BYTES + workloads::LARGE_VALUE_BYTES;
        let pairs = 4 * (args.budget_mib << 20) / pair_bytes;
        match phase {
            Phase::Load => {
                workloads::workload2_load(engine, &setup, (pairs, args.w2_compact), &mut log)?
            }
            Phase::Reads => {
                drop_cache(engine, &dir)?;
                let rows =
                    workloads::workload2_reads(engine, &setup, (pairs, args.reads), &mut log)?;
                std::fs::remove_dir_all(&dir).context("remove data")?;
                rows
            }
        }
    };
    let column = Column {
        workload,
        engine: engine.to_string(),
        rows,
        memory_limit: None,
        notes: Vec::new(),
    };
    println!("{}", serde_json::to_string(&column)?);
    Ok(())
}

/// Before workload 2's reads: the files closed by the load's process lose
/// their page cache, so every engine starts its reads cold.
fn drop_cache(engine: &str, dir: &std::path::Path) -> Result<()> {
    let dropped = limit::drop_file_cache(dir)?;
    eprintln!(
        "  {engine}: page cache of its {:.1} MiB of files: {:.1} MiB before, \
         {:.1} MiB after POSIX_FADV_DONTNEED",
        dropped.file_bytes as f64 / f64::from(1 << 20),
        dropped.resident_before_bytes as f64 / f64::from(1 << 20),
        dropped.resident_after_bytes as f64 / f64::from(1 << 20),
    );
    Ok(())
}

/// One column per (workload, engine), in first-seen order: each value the
/// median of that engine's runs, with their min-max.
fn medians(columns: &[Column]) -> Vec<Column> {
    let mut merged: Vec<Column> = Vec::new();
    for column in columns {
        let same = |c: &Column| c.workload == column.workload && c.engine == column.engine;
        if merged.iter().any(same) {
            continue;
        }
        let runs: Vec<&Column> = columns.iter().filter(|c| same(c)).collect();
        let rows = column
            .rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let mut values: Vec<f64> = runs
                    .iter()
                    .filter_map(|run| run.rows.get(i)?.value)
                    .collect();
                values.sort_by(f64::total_cmp);
                let mut row = row.clone();
                row.value = median(&values);
                row.range = (values.len() > 1).then(|| [values[0], values[values.len() - 1]]);
                row
            })
            .collect();
        let mut notes: Vec<String> = runs.iter().flat_map(|r| r.notes.clone()).collect();
        for (i, row) in column.rows.iter().enumerate() {
            let measured = runs
                .iter()
                .filter(|run| run.rows.get(i).is_some_and(|m| m.value.is_some()))
                .count();
            if measured > 0 && measured < runs.len() {
                notes.push(format!(
                    "{}: median of {measured} of {} runs (N/A in the others)",
                    row.row,
                    runs.len()
                ));
            }
        }
        notes.sort();
        notes.dedup();
        merged.push(Column {
            workload: column.workload,
            engine: column.engine.clone(),
            rows,
            memory_limit: column.memory_limit.clone(),
            notes,
        });
    }
    merged
}

fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// Index of the best engine of row `i` (lowest ms/bytes, highest ops/s).
fn best(columns: &[&Column], i: usize) -> Option<usize> {
    let higher_is_better = columns
        .iter()
        .filter_map(|c| c.rows.get(i))
        .any(|m| m.unit == "ops/s");
    let mut best: Option<(usize, f64)> = None;
    for (j, column) in columns.iter().enumerate() {
        let Some(value) = column.rows.get(i).and_then(|m| m.value) else {
            continue;
        };
        let better = match best {
            None => true,
            Some((_, b)) => (value > b) == higher_is_better && value != b,
        };
        if better {
            best = Some((j, value));
        }
    }
    best.map(|(j, _)| j)
}

fn format_value(measurement: &Measurement) -> String {
    let Some(v) = measurement.value else {
        return "N/A".to_string();
    };
    let number = |v: f64| match measurement.unit.as_str() {
        "bytes" => format!("{:.2}", v / f64::from(1 << 20)),
        _ => format!("{v:.0}"),
    };
    let unit = match measurement.unit.as_str() {
        "ms" => "ms",
        "bytes" => " MiB",
        _ => " ops/s",
    };
    match measurement.range {
        Some([low, high]) if number(low) != number(high) => {
            format!("{}{unit} ({}-{})", number(v), number(low), number(high))
        }
        _ => format!("{}{unit}", number(v)),
    }
}

fn print_table(columns: &[Column], workload: u32) {
    let columns: Vec<&Column> = columns.iter().filter(|c| c.workload == workload).collect();
    let Some(first) = columns.first() else {
        return;
    };
    println!();
    let mut limits: Vec<&str> = Vec::new();
    for limit in columns.iter().filter_map(|c| c.memory_limit.as_deref()) {
        if !limits.contains(&limit) {
            limits.push(limit);
        }
    }
    for limit in limits {
        println!("memory limit: {limit}");
    }
    for column in columns.iter().filter(|c| !c.notes.is_empty()) {
        println!("{}: {}", column.engine, column.notes.join("; "));
    }
    print!("| workload {workload} |");
    for column in &columns {
        print!(" {} |", column.engine);
    }
    println!();
    println!("|---|{}", "---:|".repeat(columns.len()));
    for (i, row) in first.rows.iter().enumerate() {
        let best = best(&columns, i);
        print!("| {} |", row.row);
        for (j, column) in columns.iter().enumerate() {
            let text = column.rows.get(i).map(format_value).unwrap_or_default();
            if Some(j) == best {
                print!(" **{text}** |");
            } else {
                print!(" {text} |");
            }
        }
        println!();
    }
}
