//! The benchmark: replicated writes per second and read latencies of
//! clusters of 1 and 3 node processes, beside one database used directly.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use barracuda::{Db, Durability};
use barracuda_raft::cluster::Cluster;

/// How long one client operation may keep trying.
const DEADLINE: Duration = Duration::from_secs(60);

/// The benchmark's options.
#[derive(clap::Args)]
pub struct Args {
    /// Writes per setup (puts of 16-byte keys and 100-byte values).
    #[arg(long, default_value_t = 20_000)]
    writes: usize,
    /// Writes in flight at once (client tasks, or threads for the database
    /// used directly).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Reads per setup and kind, one at a time, of keys written before.
    #[arg(long, default_value_t = 2_000)]
    reads: usize,
}

fn key(i: usize) -> String {
    format!("bench{i:011}")
}

fn value(i: usize) -> String {
    format!("{i:0>100}")
}

/// The median and 99th percentile of `samples`, in microseconds.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let index = ((samples.len() as f64 * q) as usize).min(samples.len().saturating_sub(1));
        samples.get(index).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    (at(0.5), at(0.99))
}

struct Row {
    setup: String,
    writes_per_second: f64,
    linearizable: Option<(f64, f64)>,
    local: (f64, f64),
}

/// One database, written by `concurrency` threads with `Durability::Sync`
/// (their commits share fsyncs) and read by one.
fn direct(args: &Args) -> anyhow::Result<Row> {
    let dir = tempfile::Builder::new()
        .prefix("barracuda-raft-bench")
        .tempdir()?;
    let db = Arc::new(
        Db::options()
            .durability(Durability::Sync)
            .open(dir.path())?,
    );
    let tree = db.tree("kv")?;
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..args.concurrency)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= args.writes {
                            return Ok(());
                        }
                        tree.put(key(i).as_bytes(), value(i).as_bytes())?;
                    }
                })
            })
            .collect();
        for worker in workers {
            worker
                .join()
                .map_err(|_| anyhow::anyhow!("a writer panicked"))??;
        }
        Ok(())
    })?;
    let writes_per_second = args.writes as f64 / start.elapsed().as_secs_f64();
    let mut samples = Vec::with_capacity(args.reads);
    for n in 0..args.reads {
        let i = n * 7919 % args.writes;
        let start = Instant::now();
        let found = tree.get(key(i).as_bytes())?;
        samples.push(start.elapsed());
        anyhow::ensure!(found.is_some(), "key {i} is missing");
    }
    Ok(Row {
        setup: "Db, Durability::Sync".to_owned(),
        writes_per_second,
        linearizable: None,
        local: percentiles(samples),
    })
}

/// A cluster of `nodes` processes of this binary.
async fn replicated(args: &Args, nodes: u64) -> anyhow::Result<Row> {
    let mut cluster = Cluster::new(std::env::current_exe()?, 10_000, 1_000)?;
    for id in 1..=nodes {
        cluster.start(id, None).await?;
    }
    let ids: Vec<u64> = (1..=nodes).collect();
    let client = Arc::new(cluster.client(DEADLINE)?);
    client
        .init(&cluster.addr(1)?, &cluster.members(&ids)?)
        .await?;
    client
        .wait_for(&cluster.addr(1)?, "a leader is known", |m| {
            m.current_leader.is_some()
        })
        .await?;
    // One write finds the leader before the clock starts.
    client.put(&key(0), &value(0)).await?;

    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency {
        let (client, next, writes) = (client.clone(), next.clone(), args.writes);
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= writes {
                    return anyhow::Ok(());
                }
                client.put(&key(i), &value(i)).await?;
            }
        });
    }
    while let Some(result) = workers.join_next().await {
        result??;
    }
    let writes_per_second = args.writes as f64 / start.elapsed().as_secs_f64();

    let mut linearizable = Vec::with_capacity(args.reads);
    for n in 0..args.reads {
        let i = n * 7919 % args.writes;
        let start = Instant::now();
        let found = client.get(&key(i)).await?;
        linearizable.push(start.elapsed());
        anyhow::ensure!(found.is_some(), "key {i} is missing");
    }
    // Local reads at a follower when there is one.
    let leader = client.leader();
    let reader = cluster
        .addrs()
        .into_iter()
        .find(|a| *a != leader)
        .unwrap_or(leader);
    let mut local = Vec::with_capacity(args.reads);
    for n in 0..args.reads {
        let i = n * 7919 % args.writes;
        let start = Instant::now();
        let found = client.local_get(&reader, &key(i)).await?;
        local.push(start.elapsed());
        anyhow::ensure!(found.is_some(), "key {i} is missing at {reader}");
    }
    Ok(Row {
        setup: format!("{nodes} node{}", if nodes == 1 { "" } else { "s" }),
        writes_per_second,
        linearizable: Some(percentiles(linearizable)),
        local: percentiles(local),
    })
}

/// Runs the setups and prints a table.
pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.writes > 0 && args.concurrency > 0,
        "--writes and --concurrency must be positive"
    );
    let mut rows = vec![direct(&args)?];
    rows.push(replicated(&args, 1).await?);
    rows.push(replicated(&args, 3).await?);
    println!(
        "{} puts ({} in flight), {} reads one at a time; latencies p50 / p99 in µs",
        args.writes, args.concurrency, args.reads
    );
    println!("| setup | writes/s | linearizable read | local read |");
    println!("|---|---:|---:|---:|");
    for row in rows {
        let linearizable = row
            .linearizable
            .map_or("-".to_owned(), |(p50, p99)| format!("{p50:.0} / {p99:.0}"));
        println!(
            "| {} | {:.0} | {} | {:.0} / {:.0} |",
            row.setup, row.writes_per_second, linearizable, row.local.0, row.local.1
        );
    }
    Ok(())
}
