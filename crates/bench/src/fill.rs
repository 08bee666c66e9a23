//! `barracuda-bench fill`: leaf fill factor of each split policy under an
//! insert pattern (reproduces the TPC-C order-table degradation of the
//! reference study of B-tree structure degradation under OLTP inserts).

use anyhow::{Context, bail};
use barracuda_btree::{BTree, MemStore, SplitPolicy, TreeConfig, TreeStats};
use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// TPC-C scale of the reference study: 16 warehouses.
const TPCC_WAREHOUSES: u32 = 16;
/// TPC-C districts per warehouse.
const TPCC_DISTRICTS: u8 = 10;
/// Zipf exponent, YCSB's default.
const ZIPF_THETA: f64 = 0.99;
/// Seed of every generator, so runs are repeatable.
const SEED: u64 = 0x4261_7272_6163_7564;

/// Options of `barracuda-bench fill`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Insert pattern: tpcc-orders, ascending, descending, random, zipf, or
    /// all; or `family` (one workload of the pattern family, set by the
    /// flags below) or `sweep` (a grid of `--points` family workloads of
    /// `--rows` operations, every policy beside the offline oracle).
    #[arg(long, default_value = "tpcc-orders")]
    pub(super) pattern: String,
    /// Split policy: half, innodb, adaptive, innodb-last-insert, or all.
    #[arg(long, default_value = "adaptive")]
    policy: String,
    /// Rows to insert (operations per point for family and sweep).
    #[arg(long, default_value_t = 1_000_000, allow_negative_numbers = true, value_parser = super::harness::int_in::<u64>(1, 100_000_000))]
    pub(super) rows: u64,
    /// Insert the keys of this file instead (one hex key per line, in order).
    #[arg(long)]
    keys_from: Option<PathBuf>,
    /// Bytes per value (a TPC-C order row is about 80); the smallest value
    /// with --value-bytes-max.
    #[arg(long, default_value_t = 80, allow_negative_numbers = true, value_parser = super::harness::int_in::<usize>(0, 4096))]
    pub(super) value_bytes: usize,
    /// Family: values of uniformly random length up to this many bytes.
    #[arg(long, allow_negative_numbers = true, value_parser = super::harness::int_in::<usize>(0, 4096))]
    pub(super) value_bytes_max: Option<usize>,
    /// Family: values (percent) of random bytes.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = super::harness::int_in::<u32>(0, 100))]
    pub(super) incompressible_percent: u32,
    /// Page size in KiB.
    #[arg(long, default_value_t = 16, allow_negative_numbers = true, value_parser = super::harness::int_in::<usize>(4, 64))]
    pub(super) page_kib: usize,
    /// Family and sweep: the seed of the workload (of the grid for sweep).
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Family: number of streams (1 to 100000).
    #[arg(long, default_value_t = 2_000, allow_negative_numbers = true, value_parser = super::harness::int_in::<u32>(1, 100_000))]
    pub(super) streams: u32,
    /// Family: late arrivals, percent of inserts (a key at a random earlier
    /// position of its stream).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = super::harness::f64_in(0.0, 100.0))]
    pub(super) noise: f64,
    /// Family: deletes of random live keys, percent of operations.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = super::harness::f64_in(0.0, 100.0))]
    pub(super) deletes: f64,
    /// Family: key shape, fixed, varprefix or composite.
    #[arg(long, default_value = "varprefix")]
    pub(super) shape: String,
    /// Family: direction within a stream, asc, desc or mixed.
    #[arg(long, default_value = "asc")]
    pub(super) order: String,
    /// Family: how streams interleave, random, rr, bursts or zipf.
    #[arg(long, default_value = "random")]
    pub(super) interleave: String,
    /// Sweep: number of grid points.
    #[arg(long, default_value_t = 240, allow_negative_numbers = true, value_parser = super::harness::int_in::<usize>(1, 100_000))]
    pub(super) points: usize,
    /// Sweep: raise a point's operations so that each of its streams gets
    /// this many records on average, if that takes at most --rows-max
    /// operations (0: every point runs --rows operations).
    #[arg(long, default_value_t = 100, allow_negative_numbers = true, value_parser = super::harness::int_in::<usize>(0, 1_000_000))]
    pub(super) stream_records: usize,
    /// Sweep: the most operations a point is raised to by --stream-records.
    #[arg(long, default_value_t = 200_000, allow_negative_numbers = true, value_parser = super::harness::int_in::<usize>(1, 100_000_000))]
    pub(super) rows_max: usize,
    /// Sweep: run only the grid points with at least this many streams (a
    /// sub-grid for quick comparisons; the summary covers what ran).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = super::harness::int_in::<u32>(1, 100_000))]
    pub(super) streams_min: u32,
    /// Sweep: run only the grid points with at most this many streams.
    #[arg(long, default_value_t = 100_000, allow_negative_numbers = true, value_parser = super::harness::int_in::<u32>(1, 100_000))]
    pub(super) streams_max: u32,
    /// Write results as JSON to this file (an object for one run, an array
    /// for a matrix).
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Sweep: draw every point's leaf fill per policy into this SVG file,
    /// the points in order of the better simple policy's fill.
    #[arg(long)]
    pub(super) plot: Option<PathBuf>,
}

/// One run's results.
#[derive(serde::Serialize, Debug)]
struct FillResult {
    pattern: String,
    policy: String,
    rows: u64,
    page_kib: usize,
    value_bytes: usize,
    leaf_fill: f64,
    leaf_pages: u64,
    height: usize,
    record_count: u64,
    pages_per_level: Vec<u64>,
    splits_half: u64,
    splits_sequential: u64,
    shifts: u64,
    patch_bytes_per_insert: f64,
    inserts_per_second: f64,
}

fn policies(name: &str) -> anyhow::Result<Vec<(&'static str, SplitPolicy)>> {
    let all = [
        ("half", SplitPolicy::Half),
        ("innodb", SplitPolicy::InnoDb),
        ("adaptive", SplitPolicy::Adaptive),
        ("innodb-last-insert", SplitPolicy::InnoDbLastInsert),
    ];
    if name == "all" {
        return Ok(all.to_vec());
    }
    match all.iter().find(|(n, _)| *n == name) {
        Some(p) => Ok(vec![*p]),
        None => {
            bail!("unknown policy {name:?}: use half, innodb, adaptive, innodb-last-insert or all")
        }
    }
}

fn patterns(args: &Args) -> anyhow::Result<Vec<String>> {
    const ALL: [&str; 5] = ["tpcc-orders", "ascending", "descending", "random", "zipf"];
    if args.keys_from.is_some() {
        return Ok(vec!["keys-from".into()]);
    }
    if args.pattern == "all" {
        return Ok(ALL.iter().map(|s| (*s).to_string()).collect());
    }
    if !ALL.contains(&args.pattern.as_str()) {
        bail!(
            "unknown pattern {:?}: use {}, all, family or sweep",
            args.pattern,
            ALL.join(", ")
        );
    }
    Ok(vec![args.pattern.clone()])
}

/// Generates the keys of a pattern, in insert order.
fn keys(pattern: &str, args: &Args) -> anyhow::Result<Vec<Vec<u8>>> {
    let n = args.rows;
    let mut rng = SmallRng::seed_from_u64(SEED);
    Ok(match pattern {
        "keys-from" => read_keys(args.keys_from.as_ref().context("no --keys-from")?)?,
        "ascending" => (0..n).map(|i| i.to_be_bytes().to_vec()).collect(),
        "descending" => (0..n).map(|i| (n - i).to_be_bytes().to_vec()).collect(),
        "random" => (0..n)
            .map(|_| rng.random::<u64>().to_be_bytes().to_vec())
            .collect(),
        "zipf" => zipf_keys(n, &mut rng),
        "tpcc-orders" => tpcc_keys(n, &mut rng),
        other => bail!("unknown pattern {other:?}"),
    })
}

/// `(w_id u32 BE, d_id u8, o_id u32 BE)`: new orders arrive at random
/// districts; each district's `o_id` ascends.
fn tpcc_keys(n: u64, rng: &mut SmallRng) -> Vec<Vec<u8>> {
    let districts = (TPCC_WAREHOUSES * u32::from(TPCC_DISTRICTS)) as usize;
    let mut next_o_id = vec![1u32; districts];
    (0..n)
        .map(|_| {
            let d = rng.random_range(0..districts);
            let w_id = (d / usize::from(TPCC_DISTRICTS)) as u32 + 1;
            let d_id = (d % usize::from(TPCC_DISTRICTS)) as u8 + 1;
            let o_id = next_o_id[d];
            next_o_id[d] += 1;
            let mut k = Vec::with_capacity(9);
            k.extend_from_slice(&w_id.to_be_bytes());
            k.push(d_id);
            k.extend_from_slice(&o_id.to_be_bytes());
            k
        })
        .collect()
}

/// Zipf-distributed ranks over `n` items (inverse CDF on a cumulative
/// table), scrambled over the key space like YCSB's scrambled zipfian.
/// Repeated keys become updates.
fn zipf_keys(n: u64, rng: &mut SmallRng) -> Vec<Vec<u8>> {
    let mut cdf = Vec::with_capacity(n as usize);
    let mut sum = 0.0;
    for rank in 1..=n {
        sum += 1.0 / (rank as f64).powf(ZIPF_THETA);
        cdf.push(sum);
    }
    (0..n)
        .map(|_| {
            let u = rng.random::<f64>() * sum;
            let rank = cdf.partition_point(|c| *c < u) as u64;
            // Fibonacci hashing spreads hot ranks over the key space.
            rank.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .to_be_bytes()
                .to_vec()
        })
        .collect()
}

fn read_keys(path: &PathBuf) -> anyhow::Result<Vec<Vec<u8>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| decode_hex(l.trim()).with_context(|| format!("line {}", i + 1)))
        .collect()
}

fn decode_hex(s: &str) -> anyhow::Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        bail!("odd number of hex digits");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).context("not hex"))
        .collect()
}

/// A value shaped like a TPC-C order row: ids, a date, counts, then text.
fn value(i: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&(i % 3000).to_le_bytes());
    v.extend_from_slice(&(1_700_000_000 + i).to_le_bytes());
    let filler = b"order-line carrier 5 items 10 all-local 1 ";
    while v.len() < len {
        v.push(filler[v.len() % filler.len()]);
    }
    v.truncate(len);
    v
}

fn run_one(
    pattern: &str,
    policy: (&str, SplitPolicy),
    keys: &[Vec<u8>],
    args: &Args,
) -> anyhow::Result<FillResult> {
    let store = Arc::new(MemStore::new(args.page_kib * 1024)?);
    let config = TreeConfig {
        policy: policy.1,
        ..TreeConfig::default()
    };
    let tree = BTree::create(Arc::clone(&store), config)?;
    let bar = ProgressBar::new(keys.len() as u64).with_style(
        super::harness::progress_style("{msg:24} {bar:40} {human_pos}/{human_len} {rate}")
            .context("progress template")?,
    );
    bar.set_message(format!("{pattern}/{}", policy.0));
    let start = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        tree.insert(k, &value(i as u64, args.value_bytes))?;
        if i.is_multiple_of(4096) {
            bar.set_position(i as u64);
        }
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let stats: TreeStats = tree.stats()?;
    let store_stats = store.stats();
    Ok(FillResult {
        pattern: pattern.to_string(),
        policy: policy.0.to_string(),
        rows: keys.len() as u64,
        page_kib: args.page_kib,
        value_bytes: args.value_bytes,
        leaf_fill: stats.leaf_fill,
        leaf_pages: stats.leaf_pages,
        height: stats.height,
        record_count: stats.record_count,
        pages_per_level: stats.pages_per_level,
        splits_half: stats.splits.half,
        splits_sequential: stats.splits.sequential,
        shifts: stats.splits.shifts,
        // The first operation created the root.
        patch_bytes_per_insert: store_stats.patch_bytes as f64 / keys.len().max(1) as f64,
        inserts_per_second: keys.len() as f64 / elapsed_s.max(1e-9),
    })
}

/// What the columns mean, and the closing line: the fullest leaves.
fn print_legend_and_verdict(results: &[FillResult]) {
    super::harness::print_legend(&[
        (
            "leaf_fill",
            "bytes of entries over bytes of leaf pages (1.000: full)",
        ),
        (
            "split_half, split_seq",
            "leaf splits at the middle, and at the insert point (sequential)",
        ),
        (
            "shifts",
            "full leaves that gave records to a sibling instead of splitting",
        ),
        ("patch_B/ins", "bytes of page changes logged per insert"),
    ]);
    if let Some(best) = results
        .iter()
        .max_by(|a, b| a.leaf_fill.total_cmp(&b.leaf_fill))
    {
        let worst = results
            .iter()
            .map(|r| r.leaf_fill)
            .fold(f64::INFINITY, f64::min);
        println!(
            "verdict: fullest leaves {:.3} ({} with {}); emptiest {worst:.3}",
            best.leaf_fill, best.pattern, best.policy
        );
    }
}

fn print_table(results: &[FillResult]) {
    println!(
        "{:<12} {:<18} {:>9} {:>9} {:>10} {:>6} {:>10} {:>10} {:>7} {:>12} {:>11}",
        "pattern",
        "policy",
        "rows",
        "leaf_fill",
        "leaf_pages",
        "height",
        "split_half",
        "split_seq",
        "shifts",
        "patch_B/ins",
        "inserts/s"
    );
    for r in results {
        println!(
            "{:<12} {:<18} {:>9} {:>9.3} {:>10} {:>6} {:>10} {:>10} {:>7} {:>12.1} {:>11.0}",
            r.pattern,
            r.policy,
            r.rows,
            r.leaf_fill,
            r.leaf_pages,
            r.height,
            r.splits_half,
            r.splits_sequential,
            r.shifts,
            r.patch_bytes_per_insert,
            r.inserts_per_second
        );
    }
}

/// Runs the workload.
pub fn run(args: &Args) -> anyhow::Result<()> {
    if matches!(args.pattern.as_str(), "family" | "sweep") {
        return super::fill_family::run(args);
    }
    let policies = policies(&args.policy)?;
    let mut results = Vec::new();
    for pattern in patterns(args)? {
        let keys = keys(&pattern, args)?;
        for policy in &policies {
            results.push(run_one(&pattern, *policy, &keys, args)?);
        }
    }
    print_table(&results);
    print_legend_and_verdict(&results);
    if let Some(path) = &args.json {
        let json = if results.len() == 1 {
            serde_json::to_string_pretty(&results[0])?
        } else {
            serde_json::to_string_pretty(&results)?
        };
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
