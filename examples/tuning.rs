//! Tuning the cache and the compression: the same rows in trees with no
//! compression, zlib and zstd, on a small buffer pool, then the file size,
//! compression ratio, fill and buffer pool hit rate of each.
//!
//! ```sh
//! cargo run --release --example tuning [-- DIR]
//! ```

use std::path::PathBuf;
use std::time::Instant;

use barracuda::{BlockSize, Compression, Db, EvictionPolicy, TreeOptions, WriteBatch};

/// Rows per tree: enough for several hundred pages, more than the pool holds.
const ROW_COUNT: u64 = 20_000;

/// Rows per atomic write while loading, at most: the pages one write
/// changes stay pinned in the pool until it is logged, so they must fit in
/// it, and `Tree::batch_ops_max` says how many do on a 4 MiB pool.
const ROWS_PER_BATCH_MAX: usize = 50;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp;
    let dir: PathBuf = match std::env::args_os().nth(1) {
        Some(path) => path.into(),
        None => {
            temp = tempfile::tempdir_in(".")?;
            temp.path().join("db")
        }
    };
    let db = Db::options()
        // Each tree has its own pool of this size: small, so that reads miss.
        .buffer_pool_bytes(4 << 20)
        // Cost-aware eviction keeps compressed blocks when unzipping is
        // cheaper than a read (the default); InnoDb is the classic rule.
        .eviction_policy(EvictionPolicy::CostAware)
        .open(&dir)?;
    println!(
        "database in {}, 4 MiB pool per tree, {ROW_COUNT} rows per tree",
        dir.display()
    );
    let variants = [
        (
            "none",
            TreeOptions::default().compression(Compression::None),
        ),
        (
            "zlib6_8k",
            TreeOptions::default().compression(Compression::Zlib { level: 6 }),
        ),
        (
            "zstd3_8k",
            TreeOptions::default().compression(Compression::Zstd { level: 3 }),
        ),
        (
            "zstd3_4k",
            TreeOptions::default()
                .compression(Compression::Zstd { level: 3 })
                .block_size(BlockSize::Kib4),
        ),
    ];
    println!(
        "{:<10} {:>8} {:>12} {:>7} {:>6} {:>9} {:>10}",
        "tree", "load_ms", "file_bytes", "ratio", "fill", "hit/1000", "pages_read"
    );
    for (name, options) in variants {
        let tree = db.create_tree(name, options)?;
        let started = Instant::now();
        // Loading: one durable commit per batch, not per row, each batch as
        // large as the tree takes (the longest row has about 130 bytes).
        let per_batch = tree
            .batch_ops_max(key(0).len(), 160)
            .min(ROWS_PER_BATCH_MAX);
        for chunk in (0..ROW_COUNT).collect::<Vec<_>>().chunks(per_batch) {
            let mut batch = WriteBatch::new();
            for &i in chunk {
                batch.put(&tree, &key(i), &row(i));
            }
            db.write(batch)?;
        }
        let load_ms = started.elapsed().as_millis();
        db.checkpoint()?;
        // Read every 7th row back through the small pool; the first status
        // call starts the hit rate's interval.
        let _ = tree.pool_status();
        for i in (0..ROW_COUNT).step_by(7) {
            tree.get(&key(i))?.ok_or("row missing")?;
        }
        let pool = tree.pool_status();
        let stats = tree.stats()?;
        let file_bytes = tree.file_bytes()?;
        let page_bytes: u64 = 16 << 10;
        let pages: u64 = stats.pages_per_level.iter().sum();
        println!(
            "{name:<10} {load_ms:>8} {file_bytes:>12} {:>7.2} {:>6.3} {:>9} {:>10}",
            (pages * page_bytes) as f64 / file_bytes as f64,
            stats.leaf_fill,
            pool.hit_rate_per_mille,
            pool.pages_read
        );
    }
    db.close()?;
    Ok(())
}

fn key(i: u64) -> Vec<u8> {
    // Spread keys so that inserts land all over the tree.
    format!("user{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000).into_bytes()
}

/// A row that compresses about as well as JSON records do.
fn row(i: u64) -> Vec<u8> {
    format!(
        "{{\"id\": {i}, \"name\": \"user {i}\", \"email\": \"user{i}@example.com\", \"plan\": \"{}\", \"visits\": {}}}",
        ["free", "pro", "team"][(i % 3) as usize],
        i % 1000
    )
    .into_bytes()
}
