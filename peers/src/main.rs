//! `compare`: Barracuda side by side with redb, LMDB, RocksDB, sled and
//! fjall. Workload 1 is redb's benchmark; workload 2 reads compressible
//! values from data four times the memory budget. Every engine runs in its
//! own child process; the parent prints a markdown table (one column per
//! engine), and writes `--json` and a `--plot` SVG.

mod engines;
mod plot;
mod workloads;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde::{Deserialize, Serialize};

use engines::{ENGINE_NAMES, Setup};
use workloads::Measurement;

/// redb's harness uses 5,000,000 pairs; the default here is 1,000,000.
const DEFAULT_PAIRS: f64 = 1_000_000.0;

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
    /// Workload 1: Barracuda's trees as its defaults (zlib, 16 KiB pages in
    /// 8 KiB blocks) instead of uncompressed pages.
    #[arg(long)]
    barracuda_zlib: bool,
    /// Reads columns from earlier `--json` files instead of running (for
    /// merging runs and redrawing the chart).
    #[arg(long, num_args = 1..)]
    from_json: Vec<PathBuf>,
    /// Internal: run one engine in this process and print its JSON.
    #[arg(long, hide = true)]
    child: Option<String>,
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
            match spawn_child(&args, engine, workload) {
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

fn spawn_child(args: &Args, engine: &str, workload: u32) -> Result<Column> {
    let exe = std::env::current_exe().context("own path")?;
    let output = Command::new(exe)
        .args(["--child", engine, "--workload", &workload.to_string()])
        .args(["--scale", &args.scale.to_string()])
        .args(["--cache-mib", &args.cache_mib.to_string()])
        .args(["--budget-mib", &args.budget_mib.to_string()])
        .args(["--reads", &args.reads.to_string()])
        .args(args.barracuda_zlib.then_some("--barracuda-zlib"))
        .arg("--dir")
        .arg(&args.dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("spawn child")?;
    if !output.status.success() {
        bail!("{engine} (workload {workload}) failed: {}", output.status);
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn run_child(args: &Args, engine: &str, workload: u32) -> Result<()> {
    let dir = args.dir.join(format!("w{workload}-{engine}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).context("remove old data")?;
    }
    let mut log = |line: &str| eprintln!("  {line}");
    let rows = if workload == 1 {
        let setup = Setup {
            cache_bytes: args.cache_mib << 20,
            dir: dir.clone(),
            barracuda_uncompressed: !args.barracuda_zlib,
        };
        let pairs = (DEFAULT_PAIRS * args.scale) as usize;
        workloads::workload1(engine, &setup, pairs, &mut log)?
    } else {
        let setup = Setup {
            cache_bytes: args.budget_mib << 20,
            dir: dir.clone(),
            barracuda_uncompressed: false,
        };
        let pair_bytes = workloads::KEY_BYTES + workloads::LARGE_VALUE_BYTES;
        let pairs = 4 * (args.budget_mib << 20) / pair_bytes;
        workloads::workload2(engine, &setup, pairs, args.reads, &mut log)?
    };
    std::fs::remove_dir_all(&dir).context("remove data")?;
    let column = Column {
        workload,
        engine: engine.to_string(),
        rows,
    };
    println!("{}", serde_json::to_string(&column)?);
    Ok(())
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
    match measurement.value {
        None => "N/A".to_string(),
        Some(v) => match measurement.unit.as_str() {
            "ms" => format!("{v:.0}ms"),
            "bytes" => format!("{:.2} MiB", v / f64::from(1 << 20)),
            _ => format!("{v:.0} ops/s"),
        },
    }
}

fn print_table(columns: &[Column], workload: u32) {
    let columns: Vec<&Column> = columns.iter().filter(|c| c.workload == workload).collect();
    let Some(first) = columns.first() else {
        return;
    };
    println!();
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
