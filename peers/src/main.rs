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

/// Barracuda's log ring in workload 1: its default.
const W1_BARRACUDA_LOG_BYTES: u64 = /* 128 MiB */ 128 << 20;

/// Workload 2 rows the parent adds: the cgroup's peak charge.
const PEAK_CGROUP_ROW: &str = "peak cgroup memory";

/// Barracuda's page compression in workload 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum W2Codec {
    /// Zstandard (`Compression::Zstd`), level [`W2_ZSTD_LEVEL`].
    Zstd,
    /// zlib level 6, Barracuda's default.
    Zlib,
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
    /// too) or `none` (the engines' cache settings only).
    #[arg(long, value_enum, default_value_t = LimitMode::Cgroup)]
    memory_limit: LimitMode,
    /// Workload 2: MiB each cgroup allows on top of the budget, for the
    /// process itself (code, thread stacks, the harness's key array).
    #[arg(long, default_value_t = 32)]
    overhead_mib: usize,
    /// Workload 2: Barracuda's page compression (16 KiB pages in 8 KiB
    /// blocks either way).
    #[arg(long, value_enum, default_value_t = W2Codec::Zstd)]
    barracuda_codec: W2Codec,
    /// Workload 2: Barracuda's log ring (`Options::log_bytes`), MiB.
    #[arg(long, default_value_t = 32)]
    barracuda_log_mib: u64,
    /// Workload 1: Barracuda's trees as its defaults (zlib, 16 KiB pages in
    /// 8 KiB blocks) instead of uncompressed pages.
    #[arg(long)]
    barracuda_zlib: bool,
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
    /// Internal: the child joins the cgroup only after its load.
    #[arg(long, hide = true)]
    join_after_load: bool,
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
    for &workload in workloads.iter().filter(|_| args.from_json.is_empty()) {
        for engine in &args.engines {
            eprintln!("== workload {workload}: {engine}");
            match run_engine(&args, engine, workload) {
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

/// Runs one engine's child; in workload 2 under its memory limit.
fn run_engine(args: &Args, engine: &str, workload: u32) -> Result<Column> {
    if workload != 2 {
        return spawn_child(args, engine, workload, None);
    }
    let unlimited = |note: String| -> Result<Column> {
        let mut column = spawn_child(args, engine, workload, None)?;
        column.memory_limit = Some(note);
        column.rows.push(Measurement::bytes(PEAK_CGROUP_ROW, None));
        Ok(column)
    };
    if args.memory_limit == LimitMode::None {
        return unlimited("none (--memory-limit none): cache settings only".into());
    }
    let limit_bytes = ((args.budget_mib + args.overhead_mib) as u64) << 20;
    let cgroup = match Cgroup::create(engine, limit_bytes) {
        Ok(cgroup) => cgroup,
        Err(e) => {
            eprintln!("   memory limit: none, cache settings only ({e:#})");
            return unlimited(format!(
                "none (no memory cgroup: {e:#}): cache settings only"
            ));
        }
    };
    eprintln!("   memory limit: {}", cgroup.describe());
    match spawn_limited(args, engine, &cgroup, false) {
        Err(e) if cgroup.oom_kills().unwrap_or(0) > 0 => {
            eprintln!("   {engine} OOM-killed under the limit ({e:#}); again, loading outside it");
            drop(cgroup);
            let cgroup = Cgroup::create(engine, limit_bytes)?;
            let mut column = spawn_limited(args, engine, &cgroup, true).with_context(|| {
                format!("{engine} failed under the limit also with the load outside it")
            })?;
            column
                .notes
                .push("loaded outside the cgroup: it was OOM-killed loading inside".into());
            Ok(column)
        }
        other => other,
    }
}

/// One child in `cgroup`: it joins at start, or after its load.
fn spawn_limited(
    args: &Args,
    engine: &str,
    cgroup: &Cgroup,
    join_after_load: bool,
) -> Result<Column> {
    let joined = spawn_child(args, engine, 2, Some((cgroup, join_after_load)));
    let peak = cgroup.peak_bytes();
    let oom_kills = cgroup.oom_kills().unwrap_or(0);
    if oom_kills > 0 {
        eprintln!("   {engine}: {oom_kills} OOM kill(s) in its cgroup");
    }
    let mut column = joined?;
    let phase = if join_after_load {
        "reads only"
    } else {
        "load and reads"
    };
    column.memory_limit = Some(format!("{} ({phase})", cgroup.describe()));
    column.rows.push(Measurement::bytes(PEAK_CGROUP_ROW, peak));
    Ok(column)
}

fn spawn_child(
    args: &Args,
    engine: &str,
    workload: u32,
    cgroup: Option<(&Cgroup, bool)>,
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
        .arg("--barracuda-codec")
        .arg(format!("{:?}", args.barracuda_codec).to_lowercase())
        .args(args.barracuda_zlib.then_some("--barracuda-zlib"))
        .arg("--dir")
        .arg(&args.dir);
    if let Some((cgroup, join_after_load)) = cgroup {
        command.arg("--cgroup-procs").arg(cgroup.procs_file());
        command.args(join_after_load.then_some("--join-after-load"));
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

fn run_child(args: &Args, engine: &str, workload: u32) -> Result<()> {
    if let Some(procs) = args.cgroup_procs.as_deref()
        && !args.join_after_load
    {
        limit::join(procs)?;
    }
    let dir = args.dir.join(format!("w{workload}-{engine}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).context("remove old data")?;
    }
    let mut log = |line: &str| eprintln!("  {line}");
    let rows = if workload == 1 {
        let tree = if args.barracuda_zlib {
            barracuda::TreeOptions::default()
        } else {
            barracuda::TreeOptions::default().compression(barracuda::Compression::None)
        };
        let setup = Setup {
            cache_bytes: args.cache_mib << 20,
            dir: dir.clone(),
            barracuda_tree: tree,
            barracuda_log_bytes: W1_BARRACUDA_LOG_BYTES,
        };
        let pairs = (DEFAULT_PAIRS * args.scale) as usize;
        workloads::workload1(engine, &setup, pairs, &mut log)?
    } else {
        let compression = match args.barracuda_codec {
            W2Codec::Zstd => barracuda::Compression::Zstd {
                level: W2_ZSTD_LEVEL,
            },
            W2Codec::Zlib => barracuda::Compression::Zlib { level: 6 },
        };
        let setup = Setup {
            cache_bytes: args.budget_mib << 20,
            dir: dir.clone(),
            barracuda_tree: barracuda::TreeOptions::default().compression(compression),
            barracuda_log_bytes: args.barracuda_log_mib << 20,
        };
        let pair_bytes = workloads::KEY_BYTES + workloads::LARGE_VALUE_BYTES;
        let pairs = 4 * (args.budget_mib << 20) / pair_bytes;
        let mut before_reads = || cold_start(args, engine, &dir);
        workloads::workload2(
            engine,
            &setup,
            (pairs, args.reads),
            &mut before_reads,
            &mut log,
        )?
    };
    std::fs::remove_dir_all(&dir).context("remove data")?;
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

/// Between workload 2's load and its reads (the engine closed): joins the
/// cgroup if the load ran outside it, then drops the files' page cache.
fn cold_start(args: &Args, engine: &str, dir: &std::path::Path) -> Result<()> {
    if let Some(procs) = args.cgroup_procs.as_deref()
        && args.join_after_load
    {
        limit::join(procs)?;
    }
    let dropped = limit::drop_file_cache(dir)?;
    eprintln!(
        "  {engine}: page cache of its {:.1} MiB of files: {:.1} MiB before, {:.1} MiB after POSIX_FADV_DONTNEED",
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
    let higher_is_better = columns.first()?.rows.get(i)?.unit == "ops/s";
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
