//! One phase of `peers` workload 1 on its own, for `perf record`: a load of
//! N random pairs (24-byte keys, 150-byte values, uncompressed pages,
//! through `Db::chunked_writer` as the peers adapter writes them; in key
//! order with `PROFILE_ROWS_SORTED_LOAD=1`), then one of
//!
//! - `get`: 1,000,000 gets of loaded keys;
//! - `into`: the same through `Tree::get_into` and one buffer;
//! - `range`: 200,000 ranges of 10 entries through `Tree::range`;
//! - `scan`: the same ranges through the visitor `Tree::scan`;
//! - `limit`: the same ranges through `Tree::scan_limit` (the peers
//!   adapter's call);
//! - `rev`: 200,000 reverse ranges of 10 entries, `range(..=key).rev()`;
//! - `remove`: deletes of half the keys through one chunked writer (as the
//!   peers adapter), then the tree's
//!   shape (leaves, fill, merges) and 200,000 `scan_limit` ranges of ten
//!   over what is left;
//! - `batch`: 100 transactions of 1,000 new random pairs, each written as
//!   the peers adapter does (one atomic batch, synced);
//! - `single`: 1,000 puts of new random pairs, each its own synced write,
//!   then the tree's shape;
//! - `ckpt`: the `batch` phase, then ranges as `limit` alone, beside a
//!   checkpoint on another thread, and after it (ranges per ms each), then
//!   the `batch` phase again and a checkpoint alone (its time);
//! - `load`: nothing (the load alone).
//!
//! ```sh
//! cargo build --release -p barracuda-bench --example profile_rows
//! perf record -g target/release/examples/profile_rows get 100000 /mnt/ext4/dir
//! ```
//!
//! Prints the time of the load and of the phase, the tree's shape (leaves,
//! fill, pages, split counters) and the log's counters.

use std::time::Instant;

use barracuda::{Compression, Db, Durability, TreeOptions, WriteBatch};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

/// Ranges of the `range` and `scan` phases.
const RANGES: usize = 200_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let phase = args.next().unwrap_or_else(|| "get".into());
    let pairs: usize = args.next().map_or(Ok(100_000), |n| n.parse())?;
    let dir = args.next().unwrap_or_else(|| "target/profile-rows".into());
    let _ = std::fs::remove_dir_all(&dir);
    // Workload 1's values are random bytes: `peers` stores them in
    // uncompressed pages; PROFILE_ROWS_DEFAULT_TREE=1 keeps the default
    // (compressed) tree, as a user following the README gets.
    let tree_options = if std::env::var_os("PROFILE_ROWS_DEFAULT_TREE").is_some() {
        TreeOptions::default()
    } else {
        TreeOptions::default().compression(Compression::None)
    };
    let mut options = Db::options();
    // PROFILE_ROWS_LOG_MIB=N: the log budget (`Options::log_bytes`), MiB.
    if let Ok(mib) = std::env::var("PROFILE_ROWS_LOG_MIB") {
        options = options.log_bytes(mib.parse::<u64>()? << 20);
    }
    let db = options
        .default_tree_options(tree_options)
        .buffer_pool_bytes(1 << 30)
        .durability(Durability::Sync)
        .open(&dir)?;
    let tree = db.tree("bench")?;
    let mut rng = SmallRng::seed_from_u64(3);
    let keys: Vec<[u8; 24]> = (0..pairs)
        .map(|_| {
            let mut key = [0; 24];
            rng.fill_bytes(&mut key);
            key
        })
        .collect();

    let mut load_keys = keys.clone();
    if std::env::var_os("PROFILE_ROWS_SORTED_LOAD").is_some() {
        load_keys.sort_unstable();
    }
    let started = Instant::now();
    let mut writer = db.chunked_writer_with(Durability::NoSync);
    for key in &load_keys {
        let mut value = [0; 150];
        rng.fill_bytes(&mut value);
        writer.put(&tree, key, &value)?;
    }
    writer.finish()?;
    db.sync()?;
    eprintln!("load of {pairs}: {:?}", started.elapsed());

    let started = Instant::now();
    let mut sum = 0u64;
    match phase.as_str() {
        "get" => {
            for key in keys.iter().cycle().take(1_000_000) {
                sum += tree.get(key)?.map_or(0, |v| u64::from(v[0]));
            }
        }
        "into" => {
            let mut value = Vec::new();
            for key in keys.iter().cycle().take(1_000_000) {
                if tree.get_into(key, &mut value)? {
                    sum += u64::from(value[0]);
                }
            }
        }
        "range" => {
            for key in keys.iter().cycle().take(RANGES) {
                for entry in tree.range(key.as_slice()..).take(10) {
                    sum += u64::from(entry?.1[0]);
                }
            }
        }
        "scan" => {
            for key in keys.iter().cycle().take(RANGES) {
                let mut seen = 0;
                tree.scan(key.as_slice().., |_key, value| {
                    sum += u64::from(value[0]);
                    seen += 1;
                    seen < 10
                })?;
            }
        }
        "limit" => {
            for key in keys.iter().cycle().take(RANGES) {
                tree.scan_limit(key.as_slice().., 10, |_key, value| {
                    sum += u64::from(value[0]);
                    true
                })?;
            }
        }
        "rev" => {
            for key in keys.iter().cycle().take(RANGES) {
                for entry in tree.range(..=key.as_slice()).rev().take(10) {
                    sum += u64::from(entry?.1[0]);
                }
            }
        }
        "remove" => {
            let mut writer = db.chunked_writer_with(Durability::NoSync);
            for key in &keys[..pairs / 2] {
                writer.delete(&tree, key)?;
            }
            writer.finish()?;
            eprintln!("remove: {:?}", started.elapsed());
            let stats = tree.stats()?;
            eprintln!(
                "after the removals: {} leaves, fill {:.2}, {} merges, {} redistributions",
                stats.leaf_pages,
                stats.leaf_fill,
                stats.splits.merges,
                stats.splits.redistributions
            );
            let ranges = Instant::now();
            for key in keys[pairs / 2..].iter().cycle().take(RANGES) {
                tree.scan_limit(key.as_slice().., 10, |_key, value| {
                    sum += u64::from(value[0]);
                    true
                })?;
            }
            eprintln!("ranges after the removals: {:?}", ranges.elapsed());
        }
        "batch" => batches(&db, &tree, &mut rng)?,
        "ckpt" => {
            // What a checkpoint after workload 1's writes and the reads
            // beside it do to each other: ranges alone, ranges while a
            // checkpoint runs on another thread, ranges after it; then the
            // same writes again and a checkpoint alone.
            batches(&db, &tree, &mut rng)?;
            let ranges = |count: usize, sum: &mut u64| -> Result<f64, barracuda::Error> {
                let t = Instant::now();
                for key in keys.iter().cycle().take(count) {
                    tree.scan_limit(key.as_slice().., 10, |_key, value| {
                        *sum += u64::from(value[0]);
                        true
                    })?;
                }
                Ok(count as f64 / t.elapsed().as_secs_f64() / 1000.0)
            };
            let alone = ranges(RANGES / 4, &mut sum)?;
            let done = std::sync::atomic::AtomicBool::new(false);
            let (checkpoint, beside, count) = std::thread::scope(|s| {
                let checkpointer = s.spawn(|| {
                    let t = Instant::now();
                    let result = db.checkpoint();
                    done.store(true, std::sync::atomic::Ordering::Release);
                    result.map(|()| t.elapsed())
                });
                let t = Instant::now();
                let mut count = 0;
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    ranges(1_000, &mut sum)?;
                    count += 1_000;
                }
                let rate = count as f64 / t.elapsed().as_secs_f64() / 1000.0;
                let checkpoint = checkpointer.join().expect("checkpoint thread")?;
                Ok::<_, barracuda::Error>((checkpoint, rate, count))
            })?;
            let after = ranges(RANGES / 4, &mut sum)?;
            eprintln!(
                "ranges/ms: alone {alone:.1}, beside the checkpoint {beside:.1} ({count} ranges), after {after:.1}; checkpoint {checkpoint:?}"
            );
            batches(&db, &tree, &mut rng)?;
            let t = Instant::now();
            db.checkpoint()?;
            eprintln!("checkpoint alone: {:?}", t.elapsed());
        }
        "single" => {
            for _ in 0..1_000 {
                let (mut key, mut value) = ([0; 24], [0; 150]);
                rng.fill_bytes(&mut key);
                rng.fill_bytes(&mut value);
                let mut batch = WriteBatch::new();
                batch.put(&tree, &key, &value);
                db.write_with(batch, Durability::Sync)?;
            }
            let stats = tree.stats()?;
            eprintln!(
                "after the puts: {} leaves, fill {:.2}, splits {:?}",
                stats.leaf_pages, stats.leaf_fill, stats.splits
            );
        }
        "load" => {}
        other => {
            return Err(format!(
                "unknown phase {other:?}: get, into, range, scan, limit, rev, remove, batch, ckpt or load"
            )
            .into());
        }
    }
    eprintln!("{phase}: {:?} (checksum {sum})", started.elapsed());
    let stats = tree.stats()?;
    eprintln!(
        "tree: {} leaves, fill {:.3}, {} pages; splits {:?}",
        stats.leaf_pages,
        stats.leaf_fill,
        stats.pages_per_level.iter().sum::<u64>(),
        stats.splits
    );
    eprintln!("{:?}", db.log_stats());
    eprint!("{}", tree.pool_status().render());
    db.close()?;
    Ok(())
}

/// As the peers adapter commits workload 1's transactions: 100 atomic
/// batches of 1,000 new random pairs, each synced.
fn batches(
    db: &Db,
    tree: &barracuda::Tree,
    rng: &mut SmallRng,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut times = Vec::new();
    let mut syncs = Vec::new();
    for _ in 0..100 {
        let mut batch = WriteBatch::new();
        for _ in 0..1_000 {
            let (mut key, mut value) = ([0; 24], [0; 150]);
            rng.fill_bytes(&mut key);
            rng.fill_bytes(&mut value);
            batch.put(tree, &key, &value);
        }
        let t = Instant::now();
        db.write_with(batch, Durability::NoSync)?;
        let t2 = Instant::now();
        db.sync()?;
        times.push(t.elapsed());
        syncs.push(t2.elapsed());
    }
    times.sort();
    syncs.sort();
    eprintln!(
        "sync times: min {:?} median {:?} p90 {:?} max {:?} sum {:?}",
        syncs[0],
        syncs[50],
        syncs[90],
        syncs[99],
        syncs.iter().sum::<std::time::Duration>()
    );
    eprintln!(
        "batch times: min {:?} median {:?} p90 {:?} max {:?} sum {:?}",
        times[0],
        times[50],
        times[90],
        times[99],
        times.iter().sum::<std::time::Duration>()
    );
    Ok(())
}
