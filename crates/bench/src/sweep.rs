//! `barracuda-bench sweep`: the compression study
//! (the reference study of InnoDB compression performance). A table of
//! `(id u64, old_id u32, text ~3,000 bytes, flags)` about 8x the pool, read
//! by 16 client threads with `id` uniform in `[1, range]`, each query
//! returning the first 100 bytes of the text; the range grows from a quarter
//! of what the pool holds uncompressed to all rows. Configurations:
//! uncompressed 16 KiB; zlib 16 KiB -> 8 KiB with `InnoDb` eviction and
//! with `CostAware`; zstd 16 KiB -> 8 KiB with `CostAware`.
//!
//! Rows are stored as records of at most [`FRAGMENT_TEXT_BYTES_MAX`] text
//! bytes under keys `(id u64 BE, part u8)`: the tree moves values above an
//! eighth of the page (2 KiB at 16 KiB) to overflow pages of their own, which
//! InnoDB would not do for a 3,000-byte row (it keeps rows up to half a page
//! inline). The fragments of a row are adjacent in one leaf (or two), so a
//! range of ids covers the same bytes of pages as InnoDB's clustered index,
//! and a query reads the first fragment, which holds `old_id`, the flags and
//! the start of the text.

use anyhow::Context;
use barracuda_base::BlockSize;
use barracuda_codec::{Codec, sample::TextGenerator};
use barracuda_io::FlushMethod;
use barracuda_pool::EvictionPolicy;
use rand::Rng;
use rand::rngs::SmallRng;
use serde::Serialize;
use std::path::Path;

use super::harness::{self, CommonArgs, DbStore, FileSpec, Measured, Store, TableSpec};
use super::plot;

/// Text bytes per record: with the part-0 header (old_id, flags) a record
/// stays below 2 KiB, the inline limit of a 16 KiB page.
pub const FRAGMENT_TEXT_BYTES_MAX: usize = 1_900;
/// The reference's Wikipedia rows average about 3,000 bytes of text.
const TEXT_BYTES_AVG: usize = 3_000;
/// Text lengths are uniform in `AVG ± SPREAD`.
const TEXT_BYTES_SPREAD: usize = 2_000;
/// A query returns this many bytes of text (`left(old_text, 100)`).
const QUERY_TEXT_BYTES: usize = 100;
/// Bytes of a row with its record overheads, on average (for sizing).
pub const ROW_BYTES_AVG: u64 = TEXT_BYTES_AVG as u64 + 100;
/// Default pool: 16 MiB, so that the default run (data about 8x the pool,
/// four configurations, twelve ranges) finishes within 3 minutes on 2 cores.
const POOL_MIB_DEFAULT: u64 = 16;
/// The table is about this many times the pool (uncompressed).
const DATA_TO_POOL: u64 = 8;
/// Bytes of the part-0 header: old_id u32, flags length u8.
const HEADER_BYTES: usize = 5;
/// The loading pool is this many times the uncompressed data (frames and
/// blocks of every page fit, so the load never evicts), capped.
const LOAD_POOL_FACTOR: f64 = 1.6;
/// Cap of the loading pool.
const LOAD_POOL_BYTES_MAX: u64 = 8 << 30;

/// Options of `barracuda-bench sweep`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Buffer pool per configuration, MiB (before `--scale`).
    #[arg(long, default_value_t = POOL_MIB_DEFAULT, allow_negative_numbers = true, value_parser = harness::int_in::<u64>(1, 65536))]
    pool_mib: u64,
    /// Rows (default: about 8x the pool uncompressed, after `--scale`).
    #[arg(long, allow_negative_numbers = true, value_parser = harness::int_in::<u64>(100, 1_000_000_000))]
    rows: Option<u64>,
    /// Configurations, comma-separated: plain, zlib-innodb, zlib-cost,
    /// zstd-cost.
    #[arg(long, default_value = "plain,zlib-innodb,zlib-cost,zstd-cost")]
    configs: String,
    /// Threads that load the tables.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = harness::int_in::<usize>(1, 64))]
    load_threads: usize,
    /// Measures each range this many times, every configuration in turn
    /// each time, and reports the repeat with the median queries/s (in
    /// memory a query costs about a microsecond, and which core its
    /// threads share swings single measurements 2x on 2 cores).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = harness::int_in::<usize>(1, 100))]
    repeat: usize,
}

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    /// Always "sweep".
    pub workload: &'static str,
    /// Configuration label.
    pub config: String,
    /// none, zlib or zstd.
    pub codec: String,
    /// Page size, bytes.
    pub page_size_bytes: usize,
    /// Block size, bytes (the page size when uncompressed).
    pub block_size_bytes: usize,
    /// Eviction policy.
    pub eviction: String,
    /// Pool budget, bytes.
    pub pool_bytes: u64,
    /// Rows in the table.
    pub rows: u64,
    /// Pages the table uses.
    pub table_pages: u64,
    /// Queries pick `id` in `[1, range_rows]`.
    pub range_rows: u64,
    /// A (fits uncompressed), B (fits only compressed), C (fits neither).
    pub zone: char,
    /// Added device latency, µs.
    pub device_latency_us: u64,
    /// File flush method.
    pub flush_method: String,
    /// Client threads.
    pub threads: usize,
    /// Load average when the point was measured.
    pub load_average: String,
    /// Queries/s of every repeat (`--repeat`), in order; the figures are
    /// those of the median repeat.
    pub repeats_queries_per_s: Vec<f64>,
    /// The figures.
    #[serde(flatten)]
    pub measured: Measured,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DataKind {
    Plain,
    Zlib,
    Zstd,
}

fn specs(configs: &str) -> anyhow::Result<Vec<(DataKind, TableSpec)>> {
    let page = 16 << 10;
    configs
        .split(',')
        .map(|name| {
            Ok(match name.trim() {
                "plain" => (DataKind::Plain, TableSpec::plain("16K uncompressed", page)),
                "zlib-innodb" => (
                    DataKind::Zlib,
                    TableSpec::compressed(
                        "zlib 16K->8K InnoDb",
                        page,
                        BlockSize::Kib8,
                        Codec::zlib_default(),
                        EvictionPolicy::InnoDb,
                    ),
                ),
                "zlib-cost" => (
                    DataKind::Zlib,
                    TableSpec::compressed(
                        "zlib 16K->8K CostAware",
                        page,
                        BlockSize::Kib8,
                        Codec::zlib_default(),
                        EvictionPolicy::CostAware,
                    ),
                ),
                "zstd-cost" => (
                    DataKind::Zstd,
                    TableSpec::compressed(
                        "zstd 16K->8K CostAware",
                        page,
                        BlockSize::Kib8,
                        Codec::zstd_default(),
                        EvictionPolicy::CostAware,
                    ),
                ),
                other => anyhow::bail!(
                    "unknown configuration {other:?}: use plain, zlib-innodb, zlib-cost, zstd-cost"
                ),
            })
        })
        .collect()
}

/// The key of part `part` of row `id`.
pub fn row_key(id: u64, part: u8) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.extend_from_slice(&id.to_be_bytes());
    k.push(part);
    k
}

/// `old_id` of row `id`: a bijection on u32, so ids are unique but
/// unordered (Wikipedia's `old_id`s after the reference's `ORDER BY rand()`).
pub fn old_id(id: u64) -> u32 {
    (id as u32).wrapping_mul(0x9E37_79B1) ^ 0x5bd1_e995
}

/// The records of row `i` (id `i + 1`).
pub fn row(i: u64, text: &mut TextGenerator, rng: &mut SmallRng) -> Vec<(Vec<u8>, Vec<u8>)> {
    let id = i + 1;
    let len =
        rng.random_range(TEXT_BYTES_AVG - TEXT_BYTES_SPREAD..=TEXT_BYTES_AVG + TEXT_BYTES_SPREAD);
    let body = text.generate(len).to_vec();
    let flags: &[u8] = if rng.random_bool(0.5) {
        b"utf-8"
    } else {
        b"utf-8,gzip"
    };
    let parts = len.div_ceil(FRAGMENT_TEXT_BYTES_MAX);
    let per_part = len.div_ceil(parts);
    body.chunks(per_part)
        .enumerate()
        .map(|(part, chunk)| {
            let mut v = Vec::with_capacity(chunk.len() + HEADER_BYTES + flags.len());
            if part == 0 {
                v.extend_from_slice(&old_id(id).to_le_bytes());
                v.push(flags.len() as u8);
                v.extend_from_slice(flags);
            }
            v.extend_from_slice(chunk);
            (row_key(id, part as u8), v)
        })
        .collect()
}

/// The first 100 bytes of a part-0 record's text.
pub fn text_prefix(value: &[u8]) -> &[u8] {
    let flags = usize::from(value.get(4).copied().unwrap_or(0));
    let start = (HEADER_BYTES + flags).min(value.len());
    &value[start..(start + QUERY_TEXT_BYTES).min(value.len())]
}

/// A loaded table per data kind.
struct Loaded {
    kind: DataKind,
    store: DbStore,
}

fn load_table(
    dir: &Path,
    kind: DataKind,
    spec: &TableSpec,
    file_spec: FileSpec,
    rows: u64,
    args: &Args,
    text: &TextGenerator,
) -> anyhow::Result<Loaded> {
    let path = dir.join(format!("sweep-{kind:?}").to_lowercase());
    let store = load_into(&path, spec, file_spec, rows, args.load_threads, text)?;
    Ok(Loaded { kind, store })
}

/// Creates the sweep table of `rows` rows in a database in `path`, with a
/// pool large enough that the load never evicts, without added latency
/// (loading is not timed); reopen it with the measured pool.
pub fn load_into(
    path: &Path,
    spec: &TableSpec,
    file_spec: FileSpec,
    rows: u64,
    load_threads: usize,
    text: &TextGenerator,
) -> anyhow::Result<DbStore> {
    let data_bytes = rows * ROW_BYTES_AVG;
    let load_pool =
        ((data_bytes as f64 * LOAD_POOL_FACTOR) as u64).clamp(64 << 20, LOAD_POOL_BYTES_MAX);
    let load_file = FileSpec {
        device_latency_us: 0,
        read_ahead_pages: harness::READ_AHEAD_PAGES_DEFAULT,
        ..file_spec
    };
    let store = DbStore::create(path, spec, load_file, load_pool as usize)?;
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    harness::load(
        &store,
        rows,
        load_threads,
        &format!("load {name}"),
        text,
        &row,
    )?;
    Ok(store)
}

fn load_spec(kind: DataKind) -> TableSpec {
    let page = 16 << 10;
    let (codec, block) = match kind {
        DataKind::Plain => return TableSpec::plain("load", page),
        DataKind::Zlib => (Codec::zlib_default(), BlockSize::Kib8),
        DataKind::Zstd => (Codec::zstd_default(), BlockSize::Kib8),
    };
    TableSpec::compressed("load", page, block, codec, EvictionPolicy::CostAware)
}

/// Row capacity of the pool when every page of the table is cached as one
/// unit of `unit_bytes`.
fn capacity_rows(pool_bytes: u64, table_pages: u64, rows: u64, unit_bytes: u64) -> u64 {
    let bytes_per_row = (table_pages * unit_bytes) as f64 / rows.max(1) as f64;
    (pool_bytes as f64 / bytes_per_row) as u64
}

/// About 12 ranges: four in zone A, four in zone B, four geometric in zone
/// C ending at all rows.
fn ranges(cap_plain: u64, cap_compressed: u64, rows: u64) -> Vec<u64> {
    let mut out: Vec<u64> = [0.25, 0.5, 0.75, 0.95]
        .iter()
        .map(|f| (cap_plain as f64 * f) as u64)
        .collect();
    let b_span = cap_compressed.saturating_sub(cap_plain) as f64;
    out.extend(
        [0.2, 0.45, 0.7, 0.95]
            .iter()
            .map(|f| cap_plain + (b_span * f) as u64),
    );
    let c_start = cap_compressed as f64 * 1.25;
    let c_ratio = (rows as f64 / c_start).max(1.0).powf(1.0 / 3.0);
    out.extend((0..4).map(|i| (c_start * c_ratio.powi(i)) as u64));
    let mut out: Vec<u64> = out.into_iter().map(|r| r.clamp(1, rows)).collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn zone(range: u64, cap_plain: u64, cap_compressed: u64) -> char {
    if range <= cap_plain {
        'A'
    } else if range <= cap_compressed {
        'B'
    } else {
        'C'
    }
}

/// Runs the workload.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let common = &args.common;
    let pool_bytes = common
        .scaled(args.pool_mib << 20)
        .max(harness::POOL_BYTES_MIN);
    let rows = args
        .rows
        .unwrap_or_else(|| pool_bytes * DATA_TO_POOL / ROW_BYTES_AVG);
    let configs = specs(&args.configs)?;
    // Up to three loaded tables and a copy per configuration, each at most
    // the rows' bytes over a leaf fill of two thirds.
    let table_bytes = rows.saturating_mul(ROW_BYTES_AVG).saturating_mul(3) / 2;
    let (dir, _temp) = common.data_dir(table_bytes.saturating_mul(3 + configs.len() as u64))?;
    let text = common.text()?;
    let file_spec = FileSpec {
        flush_method: FlushMethod::ODirect,
        read_io_threads: 4,
        device_latency_us: common.device_latency_us,
        read_ahead_pages: harness::READ_AHEAD_PAGES_DEFAULT,
        io_queue_depth: barracuda::IO_QUEUE_DEPTH_DEFAULT,
    };
    // Capacities always come from the plain and zlib layouts.
    let mut loaded: Vec<Loaded> = Vec::new();
    for kind in [DataKind::Plain, DataKind::Zlib, DataKind::Zstd] {
        if kind == DataKind::Zstd && !configs.iter().any(|c| c.0 == kind) {
            continue;
        }
        let spec = load_spec(kind);
        loaded.push(load_table(&dir, kind, &spec, file_spec, rows, args, &text)?);
    }
    let pages = |kind| {
        loaded
            .iter()
            .find(|l| l.kind == kind)
            .map_or(0, |l| l.store.page_count())
    };
    let cap_plain = capacity_rows(pool_bytes, pages(DataKind::Plain), rows, 16 << 10);
    let cap_zlib = capacity_rows(pool_bytes, pages(DataKind::Zlib), rows, 8 << 10);
    let ranges = ranges(cap_plain, cap_zlib, rows);
    println!(
        "{}",
        common.banner(&format!(
            "bench sweep: {rows} rows, pool {} MiB, O_DIRECT",
            pool_bytes >> 20
        ))
    );
    println!(
        "# table pages: plain {} (16K), zlib {} (8K blocks), zstd {}; pool holds {cap_plain} rows uncompressed, {cap_zlib} zlib-compressed",
        pages(DataKind::Plain),
        pages(DataKind::Zlib),
        pages(DataKind::Zstd)
    );
    let bar = harness::progress(
        (configs.len() * ranges.len() * args.repeat.max(1)) as u64,
        "sweep",
    );
    // Every configuration is open at once and each range is measured for
    // all of them in turn, so that a change in the machine's load (it is
    // shared) hits every configuration alike.
    let mut stores = Vec::new();
    for (i, (kind, spec)) in configs.iter().enumerate() {
        let base = loaded
            .iter()
            .find(|l| l.kind == *kind)
            .context("table not loaded")?;
        let copy = dir.join(format!("sweep-config-{i}"));
        let store = base
            .store
            .copy_to(&copy, spec, file_spec, pool_bytes as usize)?;
        stores.push((spec, store, 0u64));
    }
    let mut points = Vec::new();
    for &range in &ranges {
        let mut repeats: Vec<Vec<Measured>> = vec![Vec::new(); stores.len()];
        for _ in 0..args.repeat.max(1) {
            for ((spec, store, warmed), measured) in stores.iter_mut().zip(&mut repeats) {
                bar.set_message(format!("{} {range}", spec.label));
                let keys: Vec<Vec<u8>> = (*warmed + 1..=range).map(|id| row_key(id, 0)).collect();
                harness::touch_all(store, &keys, common.threads)?;
                *warmed = (*warmed).max(range);
                let store = &*store;
                measured.push(harness::measure(store, common, &|rng: &mut SmallRng| {
                    let id = rng.random_range(1..=range);
                    let value = store
                        .get(&row_key(id, 0))?
                        .with_context(|| format!("row {id} missing"))?;
                    std::hint::black_box(text_prefix(&value));
                    Ok(())
                })?);
                bar.inc(1);
            }
        }
        for ((spec, store, _), measured) in stores.iter().zip(repeats) {
            let repeats_queries_per_s: Vec<f64> =
                measured.iter().map(|m| m.queries_per_s).collect();
            let mut by_speed = measured;
            by_speed.sort_by(|a, b| a.queries_per_s.total_cmp(&b.queries_per_s));
            let measured = by_speed.swap_remove(by_speed.len() / 2);
            points.push(SweepPoint {
                workload: "sweep",
                config: spec.label.clone(),
                codec: spec.codec_name().into(),
                page_size_bytes: spec.page_size_bytes,
                block_size_bytes: spec.unit_bytes()?,
                eviction: format!("{:?}", spec.eviction),
                pool_bytes,
                rows,
                table_pages: store.page_count(),
                range_rows: range,
                zone: zone(range, cap_plain, cap_zlib),
                device_latency_us: common.device_latency_us,
                flush_method: "ODirect".into(),
                threads: common.threads,
                load_average: harness::load_average(),
                repeats_queries_per_s,
                measured,
            });
        }
    }
    let order = |c: &str| {
        configs
            .iter()
            .position(|(_, s)| s.label == c)
            .unwrap_or(usize::MAX)
    };
    points.sort_by_key(|p| (order(&p.config), p.range_rows));
    bar.finish_and_clear();
    print_table(&points);
    print_ratios(&points, &ranges);
    print_legend(cap_plain, cap_zlib);
    for line in verdict(&points, &common.latency_label()) {
        println!("{line}");
    }
    if let Some(path) = &common.json {
        harness::write_json(path, &points)?;
    }
    if let Some(path) = &common.plot {
        draw(path, &points, cap_plain, cap_zlib, common)?;
    }
    // Keep the tables alive until here (their files are in `dir`).
    drop(loaded);
    Ok(())
}

fn print_table(points: &[SweepPoint]) {
    println!(
        "{:<24} {:>8} {:>4} {:>10} {:>7} {:>9} {:>9} {:>7} {:>9} {:>7} {:>8} {:>7}",
        "config",
        "range",
        "zone",
        "queries/s",
        "hit%",
        "unzips/s",
        "I/Os/s",
        "LRU",
        "unzip_LRU",
        "blocks",
        "cpu_us/q",
        "target"
    );
    for p in points {
        let m = &p.measured;
        println!(
            "{:<24} {:>8} {:>4} {:>10.0} {:>7.2} {:>9.0} {:>9.0} {:>7} {:>9} {:>7} {:>8.1} {:>7}",
            p.config,
            p.range_rows,
            p.zone,
            m.queries_per_s,
            m.hit_rate * 100.0,
            m.unzips_per_s,
            m.ios_per_s,
            m.lru_len,
            m.unzip_lru_len,
            m.block_count,
            m.cpu_us_per_query,
            if p.eviction == "CostAware" && p.codec != "none" {
                format!("{}", m.target_frame_share_per_mille)
            } else {
                "-".into()
            }
        );
    }
}

fn qps(points: &[SweepPoint], config: &str, range: u64) -> Option<f64> {
    points
        .iter()
        .find(|p| p.config == config && p.range_rows == range)
        .map(|p| p.measured.queries_per_s)
}

fn print_ratios(points: &[SweepPoint], ranges: &[u64]) {
    let plain = "16K uncompressed";
    let innodb = "zlib 16K->8K InnoDb";
    let cost = "zlib 16K->8K CostAware";
    let zstd = "zstd 16K->8K CostAware";
    println!();
    println!(
        "{:>8} {:>4} {:>14} {:>14} {:>20} {:>14}",
        "range", "zone", "InnoDb/plain", "Cost/plain", "Cost/best(plain,Inno)", "zstd/plain"
    );
    for &range in ranges {
        let zone = points
            .iter()
            .find(|p| p.range_rows == range)
            .map_or('?', |p| p.zone);
        let (p, i, c, z) = (
            qps(points, plain, range),
            qps(points, innodb, range),
            qps(points, cost, range),
            qps(points, zstd, range),
        );
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        let best = match (p, i) {
            (Some(p), Some(i)) => Some(p.max(i)),
            (a, b) => a.or(b),
        };
        println!(
            "{:>8} {:>4} {:>14} {:>14} {:>20} {:>14}",
            range,
            zone,
            ratio(i, p),
            ratio(c, p),
            ratio(c, best),
            ratio(z, p)
        );
    }
}

/// What the columns of both tables mean, printed under them.
fn print_legend(cap_plain: u64, cap_zlib: u64) {
    let zone_a = format!("range <= {cap_plain} rows: the range's pages fit the pool uncompressed");
    let zone_b =
        format!("range <= {cap_zlib} rows: they fit the pool only compressed (zlib, 8K blocks)");
    let mut entries = vec![
        (
            "range",
            "each query reads a row whose id is uniform in [1, range]",
        ),
        ("zone A", zone_a.as_str()),
        ("zone B", zone_b.as_str()),
        (
            "zone C",
            "larger: they fit in neither, and queries read from the disk",
        ),
    ];
    entries.extend(harness::QUERY_COLUMNS_LEGEND);
    entries.extend([
        ("target", "CostAware's target share of the pool for frames, per mille"),
        ("X/plain", "queries/s of configuration X over the uncompressed table's at the same range: above 1, X is faster"),
        ("Cost/best(plain,Inno)", "zlib CostAware over the faster of uncompressed and zlib InnoDb"),
    ]);
    harness::print_legend(&entries);
}

/// The closing lines: per zone, the best (zones B and C) or worst (zone
/// A) ratio of each compressed configuration to the uncompressed table.
fn verdict(points: &[SweepPoint], latency: &str) -> Vec<String> {
    let plain = "16K uncompressed";
    let mut configs: Vec<&str> = Vec::new();
    for p in points {
        if p.config != plain && !configs.contains(&p.config.as_str()) {
            configs.push(&p.config);
        }
    }
    let ratios = |config: &str, zone: char| -> Vec<f64> {
        points
            .iter()
            .filter(|p| p.config == config && p.zone == zone)
            .filter_map(|p| {
                let base = qps(points, plain, p.range_rows)?;
                (base > 0.0).then(|| p.measured.queries_per_s / base)
            })
            .collect()
    };
    let mut parts = Vec::new();
    for config in &configs {
        let worst_a = ratios(config, 'A').into_iter().reduce(f64::min);
        let best_b = ratios(config, 'B').into_iter().reduce(f64::max);
        let best_c = ratios(config, 'C').into_iter().reduce(f64::max);
        let show = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}x"));
        parts.push(format!(
            "{config}: zone A {} at worst, zone B {} and zone C {} at best",
            show(worst_a),
            show(best_b),
            show(best_c)
        ));
    }
    if parts.is_empty() {
        return vec![format!(
            "verdict ({latency}): no compressed configuration to compare with uncompressed"
        )];
    }
    vec![
        format!("verdict ({latency}), queries/s against uncompressed: {}.", parts.join("; ")),
        "single points swing up to 2x on a loaded machine: --repeat 3 reports each point's median run".to_string(),
    ]
}

fn draw(
    path: &Path,
    points: &[SweepPoint],
    cap_plain: u64,
    cap_zlib: u64,
    common: &CommonArgs,
) -> anyhow::Result<()> {
    let series = |f: &dyn Fn(&Measured) -> f64| {
        plot::series_by_config(
            points,
            |p| &p.config,
            |p| p.range_rows as f64,
            |p| f(&p.measured),
        )
    };
    let marks = vec![
        (cap_plain as f64, "A|B".to_string()),
        (cap_zlib as f64, "B|C".to_string()),
    ];
    let latency = common.latency_label();
    let panel = |title: &str, y: &str, log_y: bool, s| {
        plot::log_x_panel(
            title,
            &latency,
            ("search range (rows)", y),
            log_y,
            &marks,
            s,
        )
    };
    plot::draw(
        path,
        &[
            panel(
                "queries/s against range",
                "queries/s",
                true,
                series(&|m| m.queries_per_s),
            ),
            panel(
                "buffer pool hit rate",
                "hit rate %",
                false,
                series(&|m| m.hit_rate * 100.0),
            ),
            panel(
                "unzip_LRU : LRU",
                "share",
                false,
                series(&|m| m.unzip_lru_share),
            ),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn rows_split_into_inline_records_that_reassemble() {
        let mut text = TextGenerator::compressible(1, 0.5);
        let mut rng = SmallRng::seed_from_u64(2);
        for i in 0..200 {
            let records = row(i, &mut text, &mut rng);
            let inline_max = barracuda_btree::page::value_inline_bytes_max(16 << 10);
            assert!(records.iter().all(|(_, v)| v.len() <= inline_max));
            let parts: Vec<u8> = records.iter().map(|(k, _)| k[8]).collect();
            assert_eq!(parts, (0..records.len() as u8).collect::<Vec<_>>());
            assert!(records.iter().all(|(k, _)| k[..8] == (i + 1).to_be_bytes()));
            let first = &records[0].1;
            assert_eq!(first[..4], old_id(i + 1).to_le_bytes());
            assert_eq!(text_prefix(first).len(), QUERY_TEXT_BYTES);
            let text_bytes: usize = records.iter().map(|(_, v)| v.len()).sum::<usize>()
                - HEADER_BYTES
                - usize::from(first[4]);
            let spread = TEXT_BYTES_AVG - TEXT_BYTES_SPREAD..=TEXT_BYTES_AVG + TEXT_BYTES_SPREAD;
            assert!(spread.contains(&text_bytes), "{text_bytes}");
        }
    }

    #[test]
    fn ranges_cover_every_zone_and_end_at_all_rows() {
        let (plain, compressed, rows) = (5_000, 10_000, 43_000);
        let r = ranges(plain, compressed, rows);
        assert!(r.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(r.last(), Some(&rows));
        for z in ['A', 'B', 'C'] {
            assert_eq!(
                r.iter()
                    .filter(|&&x| zone(x, plain, compressed) == z)
                    .count(),
                4
            );
        }
    }
}
