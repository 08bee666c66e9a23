//! Regression tests for cases a new user found with ordinary API calls.
//! Each one failed before its fix.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;
use std::collections::BTreeMap;

use barracuda::{BlockSize, Compression, Db, Durability, Tree, TreeOptions, WriteBatch};
use common::tempdir;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn user_value(rng: &mut SmallRng) -> Vec<u8> {
    let len = rng.random_range(0..1500);
    if rng.random_bool(0.5) {
        (0..len).map(|_| rng.random()).collect()
    } else {
        vec![rng.random(); len]
    }
}

/// Puts, deletes and batches on a compressed tree, then a halt as if the
/// process died: the database must reopen with every synced write. Redo
/// once merged two commits of one page within a batch into one, which
/// recompressed the page where the running system had appended to its
/// block's modification log, into a block it no longer fit ("a logged
/// change no longer fits its page's block"; found with the default options,
/// `Durability::Sync` and a zlib tree, seed 1 below).
#[test]
fn a_compressed_tree_reopens_after_a_crash_with_batches() {
    let trees = [
        TreeOptions::default(),
        TreeOptions::default().compression(Compression::Zstd { level: 3 }),
        TreeOptions::default()
            .page_size_bytes(4 << 10)
            .block_size(BlockSize::Kib2),
        TreeOptions::default()
            .page_size_bytes(64 << 10)
            .block_size(BlockSize::Kib16),
    ];
    for (config, tree_options) in trees.iter().enumerate() {
        // The zlib default on more seeds: seed 1 is the one that failed.
        let seeds = if config == 0 { 4 } else { 2 };
        for seed in 0..seeds {
            let dir = tempdir();
            let mut rng = SmallRng::seed_from_u64(seed);
            let model = {
                let db = Db::options()
                    .durability(Durability::NoSync)
                    .buffer_pool_bytes(8 << 20)
                    .open(dir.path())
                    .unwrap();
                let tree = db.create_tree("t", tree_options.clone()).unwrap();
                let model = random_writes(&db, &tree, &mut rng, 4000);
                db.sync().unwrap();
                db.halt();
                model
            };
            let db = Db::open(dir.path()).unwrap_or_else(|e| panic!("{config}/{seed}: {e}"));
            let tree = db.open_tree("t").unwrap();
            let all: BTreeMap<_, _> = tree.iter().map(Result::unwrap).collect();
            assert!(
                all == model,
                "{config}/{seed}: contents differ from the model"
            );
            db.check().unwrap();
        }
    }
}

/// `ops` writes on 250 keys as a new user tried them: half puts of 0 to
/// 1,499 bytes (half random, half one repeated byte), a fifth deletes, the
/// rest batches of 2 to 7 puts and deletes. Returns the expected contents.
fn random_writes(
    db: &Db,
    tree: &Tree,
    rng: &mut SmallRng,
    ops: usize,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = BTreeMap::new();
    for _ in 0..ops {
        let roll = rng.random_range(0..10);
        let key = format!("key{}", rng.random_range(0..250)).into_bytes();
        if roll < 5 {
            let value = user_value(rng);
            tree.put(&key, &value).unwrap();
            model.insert(key, value);
        } else if roll < 7 {
            tree.delete(&key).unwrap();
            model.remove(&key);
        } else {
            let mut batch = WriteBatch::new();
            for _ in 0..rng.random_range(2..8) {
                let key = format!("key{}", rng.random_range(0..250)).into_bytes();
                if rng.random_bool(0.7) {
                    let value = user_value(rng);
                    batch.put(tree, &key, &value);
                    model.insert(key, value);
                } else {
                    batch.delete(tree, &key);
                    model.remove(&key);
                }
            }
            db.write(batch).unwrap();
        }
    }
    model
}
