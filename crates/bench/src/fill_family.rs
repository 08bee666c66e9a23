//! `barracuda-bench fill --pattern family|sweep`: leaf fill of every split
//! policy on workloads of the pattern family
//! (`barracuda_btree::pattern`), beside the offline oracle's.

use super::fill::Args;
use anyhow::{Context, bail};
use barracuda_btree::pattern::{self, Family, Interleave, KeyShape, Op, StreamOrder, ValueSizes};
use barracuda_btree::{BTree, MemStore, SplitPolicy, TreeConfig};
use std::sync::Arc;

/// The policies a family run compares.
const POLICIES: [(&str, SplitPolicy); 3] = [
    ("half", SplitPolicy::Half),
    ("innodb", SplitPolicy::InnoDb),
    ("adaptive", SplitPolicy::Adaptive),
];

/// A point counts as many-stream from this many streams on.
const MANY_STREAMS: u32 = 1_000;
/// How far below the better simple policy `Adaptive` may fall.
const TOLERANCE: f64 = 0.02;

/// One point's results.
#[derive(serde::Serialize)]
struct PointResult {
    label: String,
    family: Family,
    half: f64,
    innodb: f64,
    adaptive: f64,
    oracle: f64,
}

impl PointResult {
    fn best_simple(&self) -> f64 {
        self.half.max(self.innodb)
    }
}

fn family_of(args: &Args) -> anyhow::Result<Family> {
    let shape = match args.shape.as_str() {
        "fixed" => KeyShape::Fixed,
        "varprefix" => KeyShape::VarPrefix,
        "composite" => KeyShape::Composite,
        other => bail!("unknown --shape {other:?}: use fixed, varprefix or composite"),
    };
    let order = match args.order.as_str() {
        "asc" => StreamOrder::Ascending,
        "desc" => StreamOrder::Descending,
        "mixed" => StreamOrder::Mixed,
        other => bail!("unknown --order {other:?}: use asc, desc or mixed"),
    };
    let interleave = match args.interleave.as_str() {
        "random" => Interleave::Random,
        "rr" => Interleave::RoundRobin,
        "bursts" => Interleave::Bursts,
        "zipf" => Interleave::Zipf,
        other => bail!("unknown --interleave {other:?}: use random, rr, bursts or zipf"),
    };
    if !(1..=100_000).contains(&args.streams) {
        bail!("--streams must be 1 to 100000");
    }
    let values = match args.value_bytes_max {
        Some(max) if max > args.value_bytes => ValueSizes::Variable(args.value_bytes, max),
        _ => ValueSizes::Fixed(args.value_bytes),
    };
    Ok(Family {
        seed: args.seed,
        ops: usize::try_from(args.rows).context("--rows")?,
        streams: args.streams,
        shape,
        order,
        interleave,
        late_per_mille: per_mille(args.noise, "--noise")?,
        delete_per_mille: per_mille(args.deletes, "--deletes")?,
        values,
        incompressible_percent: args.incompressible_percent.min(100),
    })
}

fn per_mille(percent: f64, name: &str) -> anyhow::Result<u32> {
    if !(0.0..=100.0).contains(&percent) {
        bail!("{name} is a percentage");
    }
    Ok((percent * 10.0).round() as u32)
}

/// Leaf fill of `policy` on `ops`, after checking the tree's invariants.
fn policy_fill(policy: SplitPolicy, ops: &[Op], page_size_bytes: usize) -> anyhow::Result<f64> {
    let store = Arc::new(MemStore::new(page_size_bytes)?);
    let config = TreeConfig {
        policy,
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config)?;
    pattern::apply(&tree, ops)?;
    tree.check_invariants()
        .with_context(|| format!("invariants after {policy:?}"))?;
    Ok(tree.stats()?.leaf_fill)
}

fn run_point(family: Family, page_size_bytes: usize) -> anyhow::Result<PointResult> {
    let ops = family.operations();
    let mut fills = [0.0; 3];
    for (fill, (_, policy)) in fills.iter_mut().zip(POLICIES) {
        *fill = policy_fill(policy, &ops, page_size_bytes)?;
    }
    Ok(PointResult {
        label: family.label(),
        family,
        half: fills[0],
        innodb: fills[1],
        adaptive: fills[2],
        oracle: pattern::oracle_leaf_fill(&ops, page_size_bytes),
    })
}

fn print_rows(results: &[PointResult]) {
    println!(
        "{:>4} {:<52} {:>7} {:>6} {:>6} {:>8} {:>6} {:>7}",
        "#", "point", "ops", "half", "innodb", "adaptive", "oracle", "margin"
    );
    for (i, r) in results.iter().enumerate() {
        println!(
            "{:>4} {:<52} {:>7} {:>6.3} {:>6.3} {:>8.3} {:>6.3} {:>+7.3}",
            i,
            r.label,
            r.family.ops,
            r.half,
            r.innodb,
            r.adaptive,
            r.oracle,
            r.adaptive - r.best_simple()
        );
    }
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { sum / n as f64 }
}

fn print_summary(results: &[PointResult], stream_records: usize) {
    let worst = results
        .iter()
        .enumerate()
        .min_by(|a, b| {
            let ma = a.1.adaptive - a.1.best_simple();
            let mb = b.1.adaptive - b.1.best_simple();
            ma.total_cmp(&mb)
        })
        .map(|(i, r)| (i, r.adaptive - r.best_simple()));
    let below = results
        .iter()
        .filter(|r| r.adaptive < r.best_simple() - TOLERANCE)
        .count();
    println!();
    println!("points: {}", results.len());
    if let Some((i, m)) = worst {
        println!("worst margin of adaptive over max(half, innodb): {m:+.3} (point {i})");
    }
    println!("points where adaptive < max(half, innodb) - {TOLERANCE}: {below}");
    let long = format!("many-stream, streams of {stream_records} records or more");
    let short = format!("many-stream, streams of fewer than {stream_records} records");
    for (name, pred) in [
        (
            "all",
            Box::new(|_: &PointResult| true) as Box<dyn Fn(&PointResult) -> bool>,
        ),
        (
            "many-stream (>= 1000 streams)",
            Box::new(|r: &PointResult| r.family.streams >= MANY_STREAMS),
        ),
        (
            long.as_str(),
            Box::new(move |r: &PointResult| {
                r.family.streams >= MANY_STREAMS && r.family.records_per_stream() >= stream_records
            }),
        ),
        (
            short.as_str(),
            Box::new(move |r: &PointResult| {
                r.family.streams >= MANY_STREAMS && r.family.records_per_stream() < stream_records
            }),
        ),
        (
            "1000-10000 streams, variable-length prefix",
            Box::new(|r: &PointResult| {
                (1_000..=10_000).contains(&r.family.streams)
                    && r.family.shape == KeyShape::VarPrefix
            }),
        ),
    ] {
        let sel: Vec<&PointResult> = results.iter().filter(|r| pred(r)).collect();
        println!(
            "mean over {name} ({} points): half {:.3} innodb {:.3} adaptive {:.3} oracle {:.3}; \
             adaptive - max(half, innodb) {:+.3}",
            sel.len(),
            mean(sel.iter().map(|r| r.half)),
            mean(sel.iter().map(|r| r.innodb)),
            mean(sel.iter().map(|r| r.adaptive)),
            mean(sel.iter().map(|r| r.oracle)),
            mean(sel.iter().map(|r| r.adaptive - r.best_simple())),
        );
    }
}

/// What the columns mean, and the closing line: how often `Adaptive` holds
/// against the better simple policy.
fn print_legend_and_verdict(results: &[PointResult]) {
    super::harness::print_legend(&[
        (
            "half, innodb, adaptive",
            "leaf fill under each split policy (1.000: full)",
        ),
        (
            "oracle",
            "leaf fill of splits that know every future insert (a yardstick, not a bound)",
        ),
        (
            "ops",
            "operations of the point (raised by --stream-records)",
        ),
        ("margin", "adaptive - max(half, innodb)"),
    ]);
    let held = results
        .iter()
        .filter(|r| r.adaptive >= r.best_simple() - TOLERANCE)
        .count();
    println!(
        "verdict: adaptive within {TOLERANCE} of max(half, innodb) or above on {held} of {} points; \
         mean margin {:+.3}",
        results.len(),
        mean(results.iter().map(|r| r.adaptive - r.best_simple()))
    );
}

/// Runs `--pattern family` (one point from the flags) or `--pattern sweep`
/// (`--points` points of the grid seeded by `--seed`).
pub fn run(args: &Args) -> anyhow::Result<()> {
    let page_size_bytes = args.page_kib * 1024;
    let ops = usize::try_from(args.rows).context("--rows")?;
    let points = match args.pattern.as_str() {
        "family" => vec![family_of(args)?],
        "sweep" => pattern::grid(args.points, ops, args.seed)
            .into_iter()
            .filter(|f| (args.streams_min..=args.streams_max).contains(&f.streams))
            .map(|f| f.with_records_per_stream(args.stream_records, args.rows_max))
            .collect(),
        other => bail!("not a family pattern: {other:?}"),
    };
    let mut results = Vec::with_capacity(points.len());
    for (i, family) in points.into_iter().enumerate() {
        let r = run_point(family, page_size_bytes)?;
        if args.pattern == "sweep" {
            eprintln!(
                "{i:>4} {:<52} adaptive {:.3} best simple {:.3} oracle {:.3}",
                r.label,
                r.adaptive,
                r.best_simple(),
                r.oracle
            );
        }
        results.push(r);
    }
    print_rows(&results);
    if results.len() > 1 {
        print_summary(&results, args.stream_records);
    }
    print_legend_and_verdict(&results);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string(&results)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        plot_points(path, &results)?;
    }
    Ok(())
}

/// One line per policy and the oracle over the points, sorted by the
/// better simple policy's fill: where `adaptive` runs above that line it
/// beats both simple policies, and the oracle's line shows what is left.
fn plot_points(path: &std::path::Path, results: &[PointResult]) -> anyhow::Result<()> {
    let mut order: Vec<&PointResult> = results.iter().collect();
    order.sort_by(|a, b| a.best_simple().total_cmp(&b.best_simple()));
    let line = |label: &str, fill: fn(&PointResult) -> f64| super::plot::Series {
        label: label.to_owned(),
        points: order
            .iter()
            .enumerate()
            .map(|(i, r)| (i as f64, fill(r)))
            .collect(),
    };
    let panel = super::plot::Panel {
        title: format!(
            "Leaf fill over {} insert patterns of the family, in order of max(half, innodb)",
            results.len()
        ),
        x_label: "pattern (sorted by max(half, innodb))".into(),
        y_label: "leaf fill".into(),
        log_x: false,
        log_y: false,
        marks: Vec::new(),
        series: vec![
            line("max(half, innodb)", PointResult::best_simple),
            line("adaptive", |r| r.adaptive),
            line("oracle", |r| r.oracle),
        ],
    };
    super::plot::draw(path, &[panel])
}
