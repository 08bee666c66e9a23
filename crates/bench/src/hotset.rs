//! `barracuda-bench hotset`: pages against rows
//! (the reference study of caching pages against rows). A sysbench
//! `sbtest` table with a pool scaled like 128 MB to 10M rows; a hot set of
//! random keys grows 20% per step, each hot key read once before timing,
//! then 16 clients read random hot keys. Hot keys are scattered, so each
//! costs a whole page of the pool: 16 KiB pages cache 4x fewer hot keys than
//! 4 KiB pages, and 16 KiB pages compressed into 4 KiB blocks can cache as
//! many as 4 KiB pages only if the pool keeps blocks rather than frames.
//!
//! Reported per configuration: the largest hot set still served at 25% of
//! its in-memory queries/s ("keys at acceptable speed") and the speed at 3x
//! the 16 KiB configuration's capacity.

use anyhow::Context;
use barracuda_base::BlockSize;
use barracuda_codec::{Codec, sample::TextGenerator};
use barracuda_io::FlushMethod;
use barracuda_pool::EvictionPolicy;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::Path;

use super::harness::{self, CommonArgs, DbStore, FileSpec, Measured, Store, TableSpec};
use super::plot;

/// The reference: 10M rows with a 128 MB pool.
const REFERENCE_ROWS: u64 = 10_000_000;
/// The reference's pool, bytes.
const REFERENCE_POOL_BYTES: u64 = 128 << 20;
/// Default rows: 400,000 (a 5 MiB pool), so the default run stays within a
/// few minutes.
const ROWS_DEFAULT: u64 = 400_000;
/// The hot set grows by 20% per step.
const GROWTH: f64 = 1.2;
/// The first hot set is this share of the 16 KiB configuration's capacity.
const FIRST_SHARE: f64 = 0.25;
/// The last hot set is this many times the 16 KiB capacity (past the 4 KiB
/// pages' 4x).
const LAST_MULTIPLE: f64 = 6.0;
/// "Acceptable": at least 25% of the in-memory queries/s.
const ACCEPTABLE_SHARE: f64 = 0.25;
/// The speed is also reported at this multiple of the 16 KiB capacity.
const SPEED_MULTIPLE: f64 = 3.0;
/// sysbench's `c`: 10 groups of 11 digits.
const C_GROUPS: usize = 10;
/// sysbench's `pad`: 5 groups of 11 digits.
const PAD_GROUPS: usize = 5;
/// Digits per group.
const GROUP_DIGITS: usize = 11;
/// sysbench's `k` is uniform in `[1, table_size]`.
const SEED_KEYS: u64 = 0x686f_7473_6574;

/// Options of `barracuda-bench hotset`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Rows of sbtest (before `--scale`); the pool is 128 MB per 10M rows.
    #[arg(long, default_value_t = ROWS_DEFAULT, allow_negative_numbers = true, value_parser = harness::int_in::<u64>(1000, 1_000_000_000))]
    rows: u64,
    /// Configurations, comma-separated: 16k, 4k, 16k-4k-innodb, 16k-4k-cost.
    #[arg(long, default_value = "16k,4k,16k-4k-innodb,16k-4k-cost")]
    configs: String,
    /// Threads that load the tables (the Db admits one writer at a time
    /// anyway; with two, a 16K->4K load failed once with "does not fit its
    /// compressed block even after a split").
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = harness::int_in::<usize>(1, 64))]
    load_threads: usize,
}

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct HotsetPoint {
    /// Always "hotset".
    pub workload: &'static str,
    /// Configuration label.
    pub config: String,
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
    /// Hot keys.
    pub hot_keys: u64,
    /// Hot keys as a multiple of the 16 KiB configuration's capacity.
    pub hot_over_capacity_16k: f64,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Plain16,
    Plain4,
    Zlib16To4,
}

fn specs(configs: &str) -> anyhow::Result<Vec<(Layout, TableSpec)>> {
    configs
        .split(',')
        .map(|name| {
            Ok(match name.trim() {
                "16k" => (Layout::Plain16, TableSpec::plain("16K", 16 << 10)),
                "4k" => (Layout::Plain4, TableSpec::plain("4K", 4 << 10)),
                "16k-4k-innodb" => (
                    Layout::Zlib16To4,
                    compressed("16K->4K InnoDb", EvictionPolicy::InnoDb),
                ),
                "16k-4k-cost" => (
                    Layout::Zlib16To4,
                    compressed("16K->4K CostAware", EvictionPolicy::CostAware),
                ),
                other => anyhow::bail!(
                    "unknown configuration {other:?}: use 16k, 4k, 16k-4k-innodb, 16k-4k-cost"
                ),
            })
        })
        .collect()
}

fn compressed(label: &str, eviction: EvictionPolicy) -> TableSpec {
    TableSpec::compressed(
        label,
        16 << 10,
        BlockSize::Kib4,
        Codec::zlib_default(),
        eviction,
    )
}

/// The key of row `id`.
pub fn sbtest_key(id: u64) -> Vec<u8> {
    id.to_be_bytes().to_vec()
}

fn digit_groups(rng: &mut SmallRng, groups: usize, out: &mut Vec<u8>) {
    for g in 0..groups {
        if g > 0 {
            out.push(b'-');
        }
        for _ in 0..GROUP_DIGITS {
            out.push(b'0' + rng.random_range(0..10u8));
        }
    }
}

/// An sbtest row: `k` u32, `c` (10 groups of 11 digits), `pad` (5 groups).
fn sbtest_row(i: u64, _text: &mut TextGenerator, rng: &mut SmallRng) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v = Vec::with_capacity(4 + 12 * (C_GROUPS + PAD_GROUPS));
    v.extend_from_slice(&rng.random_range(1..=u32::MAX).to_le_bytes());
    digit_groups(rng, C_GROUPS, &mut v);
    digit_groups(rng, PAD_GROUPS, &mut v);
    vec![(sbtest_key(i + 1), v)]
}

fn load_layout(
    dir: &Path,
    layout: Layout,
    file_spec: FileSpec,
    rows: u64,
    args: &Args,
    text: &TextGenerator,
) -> anyhow::Result<DbStore> {
    let spec = match layout {
        Layout::Plain16 => TableSpec::plain("load", 16 << 10),
        Layout::Plain4 => TableSpec::plain("load", 4 << 10),
        Layout::Zlib16To4 => compressed("load", EvictionPolicy::CostAware),
    };
    let path = dir.join(format!("hotset-{layout:?}").to_lowercase());
    // Frames and blocks of every page fit: the load never evicts.
    let load_pool = (rows * 600).clamp(64 << 20, 8 << 30) as usize;
    let store = DbStore::create(
        &path,
        &spec,
        FileSpec {
            device_latency_us: 0,
            read_ahead_pages: harness::READ_AHEAD_PAGES_DEFAULT,
            ..file_spec
        },
        load_pool,
    )?;
    harness::load(
        &store,
        rows,
        args.load_threads,
        &format!("load {layout:?}"),
        text,
        &sbtest_row,
    )?;
    Ok(store)
}

fn hot_sizes(capacity_16k: u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut h = (capacity_16k as f64 * FIRST_SHARE).max(8.0);
    while h <= capacity_16k as f64 * LAST_MULTIPLE {
        sizes.push(h as u64);
        h *= GROWTH;
    }
    sizes.push((capacity_16k as f64 * SPEED_MULTIPLE) as u64);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Runs the workload.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let common = &args.common;
    let rows = common.scaled(args.rows);
    let pool_bytes = ((rows as f64 * REFERENCE_POOL_BYTES as f64 / REFERENCE_ROWS as f64) as u64)
        .max(harness::POOL_BYTES_MIN);
    let configs = specs(&args.configs)?;
    // A table per layout: sbtest rows of about 200 bytes, at most twice
    // that with page fill and overheads.
    let (dir, _temp) = common.data_dir(rows.saturating_mul(400 * configs.len() as u64))?;
    let text = common.text()?;
    let file_spec = FileSpec {
        flush_method: FlushMethod::ODirect,
        read_io_threads: 4,
        device_latency_us: common.device_latency_us,
        read_ahead_pages: harness::READ_AHEAD_PAGES_DEFAULT,
        io_queue_depth: barracuda::IO_QUEUE_DEPTH_DEFAULT,
    };
    let mut layouts: Vec<Layout> = configs.iter().map(|c| c.0).collect();
    layouts.dedup();
    let mut loaded = Vec::new();
    for layout in layouts {
        loaded.push((
            layout,
            load_layout(&dir, layout, file_spec, rows, args, &text)?,
        ));
    }
    let capacity_16k = pool_bytes / (16 << 10);
    let sizes = hot_sizes(capacity_16k);
    let mut ids: Vec<u64> = (1..=rows).collect();
    ids.shuffle(&mut SmallRng::seed_from_u64(SEED_KEYS));
    println!(
        "{}",
        common.banner(&format!(
            "bench hotset: {rows} sbtest rows, pool {} KiB (128 MB per 10M rows), O_DIRECT; 16K capacity {capacity_16k} hot keys",
            pool_bytes >> 10
        ))
    );
    let bar = harness::progress((configs.len() * sizes.len()) as u64, "hotset");
    let mut points = Vec::new();
    for (i, (layout, spec)) in configs.iter().enumerate() {
        let base = &loaded
            .iter()
            .find(|(l, _)| l == layout)
            .context("layout not loaded")?
            .1;
        let copy = dir.join(format!("hotset-config-{i}"));
        let store = base.copy_to(&copy, spec, file_spec, pool_bytes as usize)?;
        for &hot in &sizes {
            bar.set_message(format!("{} {hot}", spec.label));
            let hot_ids = &ids[..(hot as usize).min(ids.len())];
            let keys: Vec<Vec<u8>> = hot_ids.iter().map(|&id| sbtest_key(id)).collect();
            harness::touch_all(&store, &keys, common.threads)?;
            let measured = harness::measure(&store, common, &|rng: &mut SmallRng| {
                let id = hot_ids[rng.random_range(0..hot_ids.len())];
                store
                    .get(&sbtest_key(id))?
                    .with_context(|| format!("row {id} missing"))?;
                Ok(())
            })?;
            points.push(HotsetPoint {
                workload: "hotset",
                config: spec.label.clone(),
                page_size_bytes: spec.page_size_bytes,
                block_size_bytes: spec.unit_bytes()?,
                eviction: format!("{:?}", spec.eviction),
                pool_bytes,
                rows,
                hot_keys: hot,
                hot_over_capacity_16k: hot as f64 / capacity_16k.max(1) as f64,
                device_latency_us: common.device_latency_us,
                threads: common.threads,
                load_average: harness::load_average(),
                measured,
            });
            bar.inc(1);
        }
        let copy = store.close()?;
        std::fs::remove_dir_all(&copy).with_context(|| format!("removing {}", copy.display()))?;
    }
    bar.finish_and_clear();
    print_table(&points);
    print_summary(&points, capacity_16k);
    let mut entries = vec![
        (
            "hot_keys",
            "each query reads one of this many keys, uniformly",
        ),
        (
            "x16K",
            "hot keys over the keys whose 16K pages fit the pool uncompressed",
        ),
    ];
    entries.extend(harness::QUERY_COLUMNS_LEGEND);
    entries.extend([
        ("keys at acceptable", "the most hot keys served at a quarter or more of the configuration's in-memory queries/s"),
        ("x 16K", "those keys over uncompressed 16K pages' (above 1: more keys served fast)"),
    ]);
    harness::print_legend(&entries);
    let summary = summary(&points, capacity_16k);
    if let Some(best) = summary.iter().max_by_key(|row| row.1) {
        let base = summary
            .iter()
            .find(|r| r.0 == "16K")
            .map_or(0, |r| r.1)
            .max(1);
        println!(
            "verdict ({}): {} serves the most hot keys at acceptable speed, {} ({:.2}x uncompressed 16K)",
            common.latency_label(),
            best.0,
            best.1,
            best.1 as f64 / base as f64
        );
    }
    if let Some(path) = &common.json {
        harness::write_json(path, &points)?;
    }
    if let Some(path) = &common.plot {
        draw(path, &points, capacity_16k, common)?;
    }
    Ok(())
}

fn print_table(points: &[HotsetPoint]) {
    println!(
        "{:<20} {:>8} {:>6} {:>10} {:>7} {:>9} {:>9} {:>7} {:>9} {:>7} {:>8}",
        "config",
        "hot_keys",
        "x16K",
        "queries/s",
        "hit%",
        "unzips/s",
        "I/Os/s",
        "LRU",
        "unzip_LRU",
        "blocks",
        "cpu_us/q"
    );
    for p in points {
        let m = &p.measured;
        println!(
            "{:<20} {:>8} {:>6.2} {:>10.0} {:>7.2} {:>9.0} {:>9.0} {:>7} {:>9} {:>7} {:>8.1}",
            p.config,
            p.hot_keys,
            p.hot_over_capacity_16k,
            m.queries_per_s,
            m.hit_rate * 100.0,
            m.unzips_per_s,
            m.ios_per_s,
            m.lru_len,
            m.unzip_lru_len,
            m.block_count,
            m.cpu_us_per_query
        );
    }
}

/// Per configuration: (keys at acceptable speed, queries/s at 3x capacity).
pub fn summary(points: &[HotsetPoint], capacity_16k: u64) -> Vec<(String, u64, f64)> {
    let mut configs: Vec<String> = points.iter().map(|p| p.config.clone()).collect();
    configs.dedup();
    let at_3x = (capacity_16k as f64 * SPEED_MULTIPLE) as u64;
    configs
        .into_iter()
        .map(|c| {
            let mine: Vec<&HotsetPoint> = points.iter().filter(|p| p.config == c).collect();
            let in_memory = mine.first().map_or(0.0, |p| p.measured.queries_per_s);
            let acceptable = mine
                .iter()
                .filter(|p| p.measured.queries_per_s >= ACCEPTABLE_SHARE * in_memory)
                .map(|p| p.hot_keys)
                .max()
                .unwrap_or(0);
            let speed = mine
                .iter()
                .find(|p| p.hot_keys == at_3x)
                .map_or(0.0, |p| p.measured.queries_per_s);
            (c, acceptable, speed)
        })
        .collect()
}

fn print_summary(points: &[HotsetPoint], capacity_16k: u64) {
    let rows = summary(points, capacity_16k);
    let base = rows.iter().find(|r| r.0 == "16K").map_or(0, |r| r.1).max(1);
    println!();
    println!(
        "{:<20} {:>22} {:>10} {:>22}",
        "config", "keys at acceptable", "x 16K", "queries/s at 3x 16K cap"
    );
    for (c, keys, speed) in rows {
        println!(
            "{:<20} {:>22} {:>10.2} {:>22.0}",
            c,
            keys,
            keys as f64 / base as f64,
            speed
        );
    }
}

fn draw(
    path: &Path,
    points: &[HotsetPoint],
    capacity_16k: u64,
    common: &CommonArgs,
) -> anyhow::Result<()> {
    let series = |f: &dyn Fn(&Measured) -> f64| {
        plot::series_by_config(
            points,
            |p| &p.config,
            |p| p.hot_keys as f64,
            |p| f(&p.measured),
        )
    };
    let latency = common.latency_label();
    let marks = vec![
        (capacity_16k as f64, "16K cap".to_string()),
        ((capacity_16k * 4) as f64, "4x".to_string()),
    ];
    let panel = |title: &str, y: &str, log_y: bool, s| {
        plot::log_x_panel(title, &latency, ("hot keys", y), log_y, &marks, s)
    };
    plot::draw(
        path,
        &[
            panel(
                "queries/s against hot set",
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
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbtest_rows_have_sysbench_columns() {
        let mut text = TextGenerator::compressible(1, 0.5);
        let mut rng = SmallRng::seed_from_u64(3);
        let records = sbtest_row(41, &mut text, &mut rng);
        assert_eq!(records.len(), 1);
        let (key, value) = &records[0];
        assert_eq!(key, &42u64.to_be_bytes().to_vec());
        // k, then c (119 chars) and pad (59 chars).
        assert_eq!(value.len(), 4 + 119 + 59);
        assert!(value[4..].iter().all(|b| b.is_ascii_digit() || *b == b'-'));
    }

    #[test]
    fn hot_sets_grow_by_a_fifth_and_include_three_times_capacity() {
        let sizes = hot_sizes(327);
        assert!(sizes.contains(&981));
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        assert!(*sizes.last().unwrap_or(&0) as f64 >= 327.0 * 5.0);
    }
}
