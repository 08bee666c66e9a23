//! `barracuda-bench iothreads`: the range query of
//! the reference study of InnoDB I/O threads on SSDs,
//! `min(old_id) where id between r and r+1000` (a cursor over 1,000 rows)
//! over the sweep's uncompressed table, with `read_io_threads` 1, 2, 4 and
//! 8. Ordinary page reads run on the query's own thread (as InnoDB's); only
//! read-ahead goes through the read threads, so the thread count can matter
//! only where the tree prefetches (`--read-ahead-pages`). The query is a
//! visitor scan (`Tree::scan`), which reads `old_id` in place instead of
//! copying every entry. "read IOPS" counts every page read from the file:
//! misses on the query threads plus reads ahead.

use barracuda_io::FlushMethod;
use rand::Rng;
use rand::rngs::SmallRng;
use serde::Serialize;
use std::path::Path;

use super::harness::{self, CommonArgs, DbStore, FileSpec, Measured, Store, TableSpec};
use super::plot;
use super::sweep;

/// Rows a query covers.
const RANGE_ROWS: u64 = 1_000;
/// Read thread counts measured by default.
const THREADS_DEFAULT: &str = "1,2,4,8";
/// Pool, MiB (the table is about 8x larger).
const POOL_MIB_DEFAULT: u64 = 16;
/// The table is about this many times the pool.
const DATA_TO_POOL: u64 = 8;

/// Options of `barracuda-bench iothreads`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// `read_io_threads` values, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = THREADS_DEFAULT,
          allow_negative_numbers = true, value_parser = harness::int_in::<usize>(1, 64))]
    read_threads: Vec<usize>,
    /// Leaves each range scan reads ahead through the read threads (0:
    /// none, every page is an ordinary read on the query's thread).
    #[arg(long, default_value_t = harness::READ_AHEAD_PAGES_DEFAULT,
          allow_negative_numbers = true, value_parser = harness::int_in::<usize>(0, 1024))]
    read_ahead_pages: usize,
    /// Requests each read thread keeps in flight (`Options::io_queue_depth`;
    /// lower it to make the read threads bound the read-ahead concurrency,
    /// as InnoDB's simulated AIO threads did).
    #[arg(long, default_value_t = barracuda::IO_QUEUE_DEPTH_DEFAULT, allow_negative_numbers = true, value_parser = harness::int_in::<u32>(1, 4096))]
    io_depth: u32,
    /// Buffer pool, MiB (before `--scale`).
    #[arg(long, default_value_t = POOL_MIB_DEFAULT, allow_negative_numbers = true, value_parser = harness::int_in::<u64>(1, 65536))]
    pool_mib: u64,
    /// Threads that load the table.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = harness::int_in::<usize>(1, 64))]
    load_threads: usize,
}

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct IoThreadsPoint {
    /// Always "iothreads".
    pub workload: &'static str,
    /// `read_io_threads`.
    pub read_io_threads: usize,
    /// Pool budget, bytes.
    pub pool_bytes: u64,
    /// Rows in the table.
    pub rows: u64,
    /// Added device latency, µs.
    pub device_latency_us: u64,
    /// Client threads.
    pub threads: usize,
    /// Leaves each range scan reads ahead.
    pub read_ahead_pages: usize,
    /// Requests each read thread keeps in flight.
    pub io_queue_depth: u32,
    /// Load average when the point was measured.
    pub load_average: String,
    /// Pages read from the file per second: misses (`reads_per_s`) plus
    /// reads ahead (`read_ahead_per_s`).
    pub read_iops: f64,
    /// The figures.
    #[serde(flatten)]
    pub measured: Measured,
}

/// `min(old_id)` over ids `r..=r + 1000`.
pub fn range_min_old_id(store: &dyn Store, r: u64) -> anyhow::Result<Option<u32>> {
    let mut min: Option<u32> = None;
    let last = r + RANGE_ROWS;
    store.scan(&sweep::row_key(r, 0), &mut |key, value| {
        let id = key
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map_or(u64::MAX, u64::from_be_bytes);
        if id > last {
            return false;
        }
        if key.get(8) == Some(&0)
            && let Some(old) = value.get(..4).and_then(|b| b.try_into().ok())
        {
            let old = u32::from_le_bytes(old);
            min = Some(min.map_or(old, |m| m.min(old)));
        }
        true
    })?;
    Ok(min)
}

/// Runs the workload.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let common = &args.common;
    let counts: Vec<usize> = args.read_threads.clone();
    let pool_bytes = common
        .scaled(args.pool_mib << 20)
        .max(harness::POOL_BYTES_MIN);
    let rows = pool_bytes * DATA_TO_POOL / sweep::ROW_BYTES_AVG;
    // One table, at most the rows' bytes over a leaf fill of two thirds.
    let (dir, _temp) = common.data_dir(rows.saturating_mul(sweep::ROW_BYTES_AVG) * 3 / 2)?;
    let text = common.text()?;
    let spec = TableSpec::plain("16K uncompressed", 16 << 10);
    let base_file = FileSpec {
        flush_method: FlushMethod::ODirect,
        read_io_threads: 4,
        device_latency_us: common.device_latency_us,
        read_ahead_pages: args.read_ahead_pages,
        io_queue_depth: args.io_depth,
    };
    let db_dir = dir.join("iothreads");
    let base = sweep::load_into(&db_dir, &spec, base_file, rows, args.load_threads, &text)?;
    base.close()?;
    println!(
        "{}",
        common.banner(&format!(
            "bench iothreads: min(old_id) over 1,000 ids, {rows} rows, pool {} MiB, O_DIRECT, \
             read-ahead {} pages, {} requests in flight per read thread",
            pool_bytes >> 20,
            args.read_ahead_pages,
            args.io_depth
        ))
    );
    let bar = harness::progress(counts.len() as u64, "iothreads");
    let mut points = Vec::new();
    for &n in &counts {
        let file_spec = FileSpec {
            read_io_threads: n,
            ..base_file
        };
        let store = DbStore::open(&db_dir, &spec, file_spec, pool_bytes as usize)?;
        let measured = harness::measure(&store, common, &|rng: &mut SmallRng| {
            let r = rng.random_range(1..=rows.saturating_sub(RANGE_ROWS).max(1));
            std::hint::black_box(range_min_old_id(&store, r)?);
            Ok(())
        })?;
        points.push(IoThreadsPoint {
            workload: "iothreads",
            read_io_threads: n,
            pool_bytes,
            rows,
            device_latency_us: common.device_latency_us,
            threads: common.threads,
            read_ahead_pages: args.read_ahead_pages,
            io_queue_depth: args.io_depth,
            load_average: harness::load_average(),
            read_iops: measured.reads_per_s + measured.read_ahead_per_s,
            measured,
        });
        store.close()?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    println!(
        "{:>15} {:>10} {:>10} {:>9} {:>11} {:>7} {:>8} {:>11}",
        "read_io_threads",
        "queries/s",
        "read IOPS",
        "misses/s",
        "read-ahead/s",
        "hit%",
        "cpu_us/q",
        "RA unused/s"
    );
    for p in &points {
        let m = &p.measured;
        println!(
            "{:>15} {:>10.1} {:>10.0} {:>9.0} {:>11.0} {:>7.2} {:>8.0} {:>11.0}",
            p.read_io_threads,
            m.queries_per_s,
            p.read_iops,
            m.reads_per_s,
            m.read_ahead_per_s,
            m.hit_rate * 100.0,
            m.cpu_us_per_query,
            m.read_ahead_evicted_unused_per_s
        );
    }
    harness::print_legend(&[
        (
            "read_io_threads",
            "threads that serve the pool's batched reads (read-ahead)",
        ),
        (
            "queries/s",
            "range queries of 1,000 ids (min(old_id)) per second, all client threads",
        ),
        (
            "read IOPS",
            "pages read per second: misses plus pages read ahead",
        ),
        ("misses/s", "pages a query waited for (read on a miss)"),
        (
            "read-ahead/s, RA unused/s",
            "pages read ahead; of those, evicted before any use",
        ),
        (
            "hit%, cpu_us/q",
            "page gets served without a read; CPU time of the process per query",
        ),
    ]);
    if let (Some(first), Some(best)) = (
        points.first(),
        points.iter().max_by(|a, b| {
            a.measured
                .queries_per_s
                .total_cmp(&b.measured.queries_per_s)
        }),
    ) {
        println!(
            "verdict ({}): most queries/s with {} read threads, {:.2}x {} thread(s)",
            common.latency_label(),
            best.read_io_threads,
            best.measured.queries_per_s / first.measured.queries_per_s.max(1e-9),
            first.read_io_threads
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

fn draw(path: &Path, points: &[IoThreadsPoint]) -> anyhow::Result<()> {
    let line = |label: &str, f: &dyn Fn(&Measured) -> f64| plot::Series {
        label: label.into(),
        points: points
            .iter()
            .map(|p| (p.read_io_threads as f64, f(&p.measured)))
            .collect(),
    };
    plot::draw(
        path,
        &[
            plot::Panel {
                title: "range queries/s against read_io_threads".into(),
                x_label: "read_io_threads".into(),
                y_label: "queries/s".into(),
                log_x: true,
                log_y: false,
                marks: Vec::new(),
                series: vec![line("queries/s", &|m| m.queries_per_s)],
            },
            plot::Panel {
                title: "read IOPS against read_io_threads".into(),
                x_label: "read_io_threads".into(),
                y_label: "reads/s".into(),
                log_x: true,
                log_y: false,
                marks: Vec::new(),
                series: vec![
                    line("read IOPS", &|m| m.reads_per_s + m.read_ahead_per_s),
                    line("misses/s", &|m| m.reads_per_s),
                ],
            },
        ],
    )
}
