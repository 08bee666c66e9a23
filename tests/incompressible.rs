//! Incompressible data through the public API: redb's benchmark workload
//! (24-byte random keys, 150-byte random values) into zlib trees of 16 KiB
//! pages in 8 KiB and in 4 KiB blocks. Every row is far below the size
//! limits, so every put must succeed, whatever the data compresses to.
//!
//! Regression: both trees refused rows with `CompressionUnfit` ("does not
//! fit even after a split") after a few hundred rows: a split had to change
//! the left link of a full right sibling, and a full sibling of random bytes
//! takes no change at all without being recompressed, which it no longer
//! survives.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;

use barracuda::{BlockSize, Compression, Db, Durability, TreeOptions};
use common::tempdir;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Enough rows for a tree of hundreds of leaves, so that leaves split many
/// times, next to full siblings and at the edges of their parents.
const ROWS: usize = 20_000;
const KEY_BYTES: usize = 24;
const VALUE_BYTES: usize = 150;

fn random_rows(seed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut bytes = |len: usize| (0..len).map(|_| rng.random()).collect::<Vec<u8>>();
    (0..ROWS)
        .map(|_| (bytes(KEY_BYTES), bytes(VALUE_BYTES)))
        .collect()
}

fn db_options() -> barracuda::Options {
    Db::options()
        .buffer_pool_bytes(8 << 20)
        .log_bytes(64 << 20)
        .durability(Durability::NoSync)
}

fn load(block_size: BlockSize) {
    let dir = tempdir();
    let db = db_options().open(dir.path()).unwrap();
    let options = TreeOptions::default()
        .page_size_bytes(16 << 10)
        .compression(Compression::Zlib { level: 6 })
        .block_size(block_size);
    let tree = db.create_tree("random", options).unwrap();
    let block_bytes = block_size.compressed_bytes().unwrap();
    let rows = random_rows(block_bytes as u64);
    for (i, (k, v)) in rows.iter().enumerate() {
        if let Err(e) = tree.put(k, v) {
            panic!("{block_size:?}: row {i} of {ROWS} refused: {e}");
        }
    }
    tree.check().unwrap();
    let mut sorted = rows.clone();
    sorted.sort();
    let all: Vec<_> = tree.iter().map(Result::unwrap).collect();
    assert!(all == sorted, "{block_size:?}: contents differ");
    let stats = tree.stats().unwrap();
    let data_bytes = ROWS * (KEY_BYTES + VALUE_BYTES);
    eprintln!(
        "{block_size:?}: {} leaves, data / leaf blocks {:.3}, {:?}",
        stats.leaf_pages,
        data_bytes as f64 / (stats.leaf_pages as f64 * block_bytes as f64),
        stats.splits
    );
    db.close().unwrap();
    // And after a clean reopen.
    let db = db_options().open(dir.path()).unwrap();
    let tree = db.open_tree("random").unwrap();
    tree.check().unwrap();
    assert_eq!(tree.iter().count(), ROWS);
}

#[test]
fn random_rows_16k_in_8k() {
    load(BlockSize::Kib8);
}

#[test]
fn random_rows_16k_in_4k() {
    load(BlockSize::Kib4);
}
