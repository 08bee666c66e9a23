//! `barracuda-bench flush`: buffered I/O (`Fsync`) against `O_DIRECT` over
//! pool sizes and data sizes (the reference study of `innodb_flush_method`).
//! The sweep's uncompressed table, read by 16 clients with `id` uniform over
//! all rows; the OS cache of the data file is dropped
//! (`posix_fadvise(DONTNEED)`) before each run. Buffered reads can be served
//! by the OS cache, a second-level cache below the pool; `O_DIRECT` reads
//! always reach the device.

use anyhow::Context;
use barracuda_io::FlushMethod;
use rand::Rng;
use rand::rngs::SmallRng;
use serde::Serialize;
use std::path::Path;

use super::harness::{self, CommonArgs, DbStore, FileSpec, Measured, Store, TableSpec};
use super::plot;
use super::sweep;

/// Pool sizes, MiB (the reference's range, 8 MiB to 512 MiB).
const POOLS_MIB_DEFAULT: &str = "8,32,128,512";
/// Data sizes, MiB: one that fits the largest pool, one that does not.
const DATA_MIB_DEFAULT: &str = "192,768";

/// Options of `barracuda-bench flush`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Pool sizes, MiB, comma-separated (before `--scale`).
    #[arg(long, value_delimiter = ',', default_value = POOLS_MIB_DEFAULT, allow_negative_numbers = true, value_parser = harness::int_in::<u64>(1, 65536))]
    pools_mib: Vec<u64>,
    /// Data sizes, MiB, comma-separated (before `--scale`).
    #[arg(long, value_delimiter = ',', default_value = DATA_MIB_DEFAULT, allow_negative_numbers = true, value_parser = harness::int_in::<u64>(1, 1_048_576))]
    data_mib: Vec<u64>,
    /// Threads that load the tables.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = harness::int_in::<usize>(1, 64))]
    load_threads: usize,
}

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct FlushPoint {
    /// Always "flush".
    pub workload: &'static str,
    /// Fsync (buffered) or ODirect.
    pub flush_method: String,
    /// Pool budget, bytes.
    pub pool_bytes: u64,
    /// Rows in the table.
    pub rows: u64,
    /// Bytes of the data file.
    pub data_bytes: u64,
    /// Added device latency, µs.
    pub device_latency_us: u64,
    /// Client threads.
    pub threads: usize,
    /// Load average when the point was measured.
    pub load_average: String,
    /// The figures.
    #[serde(flatten)]
    pub measured: Measured,
}

/// Runs the workload.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let common = &args.common;
    let pools: Vec<u64> = args
        .pools_mib
        .iter()
        .map(|m| common.scaled(m << 20))
        .collect();
    let datas: Vec<u64> = args
        .data_mib
        .iter()
        .map(|m| common.scaled(m << 20))
        .collect();
    // A table per data size, each at most 1.5x its data.
    let total = datas.iter().fold(0u64, |sum, d| sum.saturating_add(*d));
    let (dir, _temp) = common.data_dir(total.saturating_mul(3) / 2)?;
    let text = common.text()?;
    println!(
        "{}",
        common.banner("bench flush: uncompressed 16K sweep table, random ids over all rows, OS cache dropped before each run")
    );
    let bar = harness::progress((pools.len() * datas.len() * 2) as u64, "flush");
    let mut points = Vec::new();
    for &data in &datas {
        let rows = data / sweep::ROW_BYTES_AVG;
        let spec = TableSpec::plain("16K uncompressed", 16 << 10);
        let direct = FileSpec {
            flush_method: FlushMethod::ODirect,
            read_io_threads: 4,
            device_latency_us: common.device_latency_us,
            read_ahead_pages: harness::READ_AHEAD_PAGES_DEFAULT,
            io_queue_depth: barracuda::IO_QUEUE_DEPTH_DEFAULT,
        };
        let db_dir = dir.join(format!("flush-{}", data >> 20));
        let base = sweep::load_into(&db_dir, &spec, direct, rows, args.load_threads, &text)?;
        let path = base.data_file()?;
        let data_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        base.close()?;
        for &pool in &pools {
            for method in [FlushMethod::Fsync, FlushMethod::ODirect] {
                bar.set_message(format!(
                    "{} MiB data, {} MiB pool, {method:?}",
                    data >> 20,
                    pool >> 20
                ));
                harness::drop_os_cache(&path)?;
                let file_spec = FileSpec {
                    flush_method: method,
                    ..direct
                };
                let store = DbStore::open(&db_dir, &spec, file_spec, pool as usize)?;
                let measured = harness::measure(&store, common, &|rng: &mut SmallRng| {
                    let id = rng.random_range(1..=rows);
                    store
                        .get(&sweep::row_key(id, 0))?
                        .with_context(|| format!("row {id} missing"))?;
                    Ok(())
                })?;
                store.close()?;
                points.push(FlushPoint {
                    workload: "flush",
                    flush_method: format!("{method:?}"),
                    pool_bytes: pool,
                    rows,
                    data_bytes,
                    device_latency_us: common.device_latency_us,
                    threads: common.threads,
                    load_average: harness::load_average(),
                    measured,
                });
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    print_table(&points);
    harness::print_legend(&[
        (
            "method",
            "Fsync: buffered I/O through the OS page cache; ODirect: around it",
        ),
        (
            "queries/s, hit%",
            "point queries per second; page gets served from the pool",
        ),
        (
            "reads/s, read_us",
            "pages read per second; the average time of one read",
        ),
        (
            "Fsync/ODirect",
            "queries/s buffered over queries/s direct: above 1, the page cache helps",
        ),
    ]);
    let ratios: Vec<f64> = points
        .iter()
        .filter(|p| p.flush_method == "Fsync")
        .filter_map(|p| {
            let direct = points.iter().find(|q| {
                q.flush_method == "ODirect"
                    && q.pool_bytes == p.pool_bytes
                    && q.data_bytes == p.data_bytes
            })?;
            Some(p.measured.queries_per_s / direct.measured.queries_per_s.max(1e-9))
        })
        .collect();
    if let (Some(low), Some(high)) = (
        ratios.iter().copied().reduce(f64::min),
        ratios.iter().copied().reduce(f64::max),
    ) {
        println!(
            "verdict ({}): buffered Fsync runs at {low:.2}x to {high:.2}x O_DIRECT's queries/s",
            common.latency_label()
        );
    }
    if let Some(path) = &common.json {
        harness::write_json(path, &points)?;
    }
    if let Some(path) = &common.plot {
        draw(path, &points)?;
    }
    Ok(())
}

fn print_table(points: &[FlushPoint]) {
    println!(
        "{:>9} {:>9} {:<8} {:>10} {:>7} {:>9} {:>8} {:>10}",
        "data_MiB", "pool_MiB", "method", "queries/s", "hit%", "reads/s", "cpu_us/q", "read_us"
    );
    for p in points {
        let m = &p.measured;
        println!(
            "{:>9} {:>9} {:<8} {:>10.0} {:>7.2} {:>9.0} {:>8.1} {:>10.1}",
            p.data_bytes >> 20,
            p.pool_bytes >> 20,
            p.flush_method,
            m.queries_per_s,
            m.hit_rate * 100.0,
            m.reads_per_s,
            m.cpu_us_per_query,
            m.read_time_avg_ns as f64 / 1000.0
        );
    }
    println!();
    println!(
        "{:>9} {:>9} {:>16}",
        "data_MiB", "pool_MiB", "Fsync/ODirect"
    );
    for p in points.iter().filter(|p| p.flush_method == "Fsync") {
        if let Some(d) = points.iter().find(|q| {
            q.flush_method == "ODirect"
                && q.pool_bytes == p.pool_bytes
                && q.data_bytes == p.data_bytes
        }) {
            println!(
                "{:>9} {:>9} {:>16.2}",
                p.data_bytes >> 20,
                p.pool_bytes >> 20,
                p.measured.queries_per_s / d.measured.queries_per_s.max(1e-9)
            );
        }
    }
}

fn draw(path: &Path, points: &[FlushPoint]) -> anyhow::Result<()> {
    let mut keys: Vec<(u64, String)> = points
        .iter()
        .map(|p| (p.data_bytes, p.flush_method.clone()))
        .collect();
    keys.dedup();
    let series = keys
        .iter()
        .map(|(data, method)| plot::Series {
            label: format!("{} MiB data, {method}", data >> 20),
            points: points
                .iter()
                .filter(|p| p.data_bytes == *data && &p.flush_method == method)
                .map(|p| ((p.pool_bytes >> 20) as f64, p.measured.queries_per_s))
                .collect(),
        })
        .collect();
    plot::draw(
        path,
        &[plot::Panel {
            title: "queries/s against pool size".into(),
            x_label: "pool MiB".into(),
            y_label: "queries/s".into(),
            log_x: true,
            log_y: true,
            marks: Vec::new(),
            series,
        }],
    )
}
