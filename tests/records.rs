//! The record cache (`Options::record_cache_bytes`): gets through it see
//! every write (puts, deletes, batches, chunked writes, a compaction, a
//! reopen), also while a writer runs beside the readers; a budget that
//! leaves the pool nothing is refused.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use barracuda::{Error, WriteBatch};
use common::{half_random_value, key, small, tempdir};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn with_records() -> barracuda::Options {
    small()
        .buffer_pool_bytes(8 << 20)
        .record_cache_bytes(2 << 20)
}

fn assert_gets(tree: &barracuda::Tree, model: &BTreeMap<Vec<u8>, Vec<u8>>, keys: u64) {
    let mut value = Vec::new();
    for i in 0..keys {
        let k = key(i);
        let found = tree.get_into(&k, &mut value).unwrap();
        match model.get(&k) {
            Some(expected) => assert!(found && value == *expected, "key {i}"),
            None => assert!(!found, "key {i} deleted but found"),
        }
        assert_eq!(tree.get(&k).unwrap().as_ref(), model.get(&k), "key {i}");
    }
}

/// Every kind of write, each after the cache was filled with the values it
/// replaces, against a model; twice through the keys, so the second pass
/// reads from the cache.
#[test]
fn gets_through_the_record_cache_see_every_write() {
    let dir = tempdir();
    let db = with_records().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    let mut rng = SmallRng::seed_from_u64(5);
    let mut model = BTreeMap::new();
    const KEYS: u64 = 600;
    for i in 0..KEYS {
        let value = half_random_value(&mut rng);
        tree.put(&key(i), &value).unwrap();
        model.insert(key(i), value);
    }
    for round in 0..5 {
        assert_gets(&tree, &model, KEYS);
        assert_gets(&tree, &model, KEYS);
        match round {
            0 => {
                for i in (0..KEYS).step_by(3) {
                    let value = half_random_value(&mut rng);
                    tree.put(&key(i), &value).unwrap();
                    model.insert(key(i), value);
                }
                for i in (1..KEYS).step_by(7) {
                    tree.delete(&key(i)).unwrap();
                    model.remove(&key(i));
                }
            }
            1 => {
                let mut batch = WriteBatch::new();
                for i in (0..KEYS).step_by(20) {
                    let value = vec![round as u8; 300 + i as usize];
                    batch.put(&tree, &key(i), &value);
                    model.insert(key(i), value);
                }
                batch.delete(&tree, &key(2));
                model.remove(&key(2));
                db.write(batch).unwrap();
            }
            2 => {
                let mut writer = db.chunked_writer();
                for i in (0..KEYS).rev() {
                    let value = half_random_value(&mut rng);
                    writer.put(&tree, &key(i), &value).unwrap();
                    model.insert(key(i), value);
                }
                writer.finish().unwrap();
            }
            3 => {
                db.compact("t").unwrap();
                tree.put(&key(4), b"after the compaction").unwrap();
                model.insert(key(4), b"after the compaction".to_vec());
            }
            _ => {}
        }
    }
    let status = tree.record_cache_status();
    assert!(status.hits > 0 && status.fills > 0, "{status:?}");
    assert!(status.invalidations > 0, "{status:?}");
    assert!(status.bytes_used <= status.budget_bytes, "{status:?}");
    drop(tree);
    db.close().unwrap();
    let db = with_records().open(dir.path()).unwrap();
    assert_gets(&db.tree("t").unwrap(), &model, KEYS);
}

/// A writer sets each key to ever higher versions and publishes a version
/// once its put has returned; readers (through the cache) must never read
/// a version older than one published before their get began.
#[test]
fn a_get_never_reads_a_value_older_than_a_finished_write() {
    const KEYS: u64 = 64;
    let dir = tempdir();
    let db = with_records().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    let published: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let versioned = |version: u64| {
        let mut value = version.to_le_bytes().to_vec();
        value.resize(400, b'v');
        value
    };
    for i in 0..KEYS {
        tree.put(&key(i), &versioned(0)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|seed| {
            let (tree, published, stop) = (tree.clone(), published.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed);
                let mut value = Vec::new();
                let mut gets = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let i = rng.random_range(0..KEYS);
                    let floor = published[i as usize].load(Ordering::SeqCst);
                    assert!(tree.get_into(&key(i), &mut value).unwrap());
                    let read = u64::from_le_bytes(value[..8].try_into().unwrap());
                    assert!(
                        read >= floor,
                        "key {i}: read version {read} after {floor} was written"
                    );
                    gets += 1;
                }
                gets
            })
        })
        .collect();
    let mut rng = SmallRng::seed_from_u64(99);
    for version in 1..=3_000u64 {
        let i = rng.random_range(0..KEYS);
        if version % 10 == 0 {
            let mut batch = WriteBatch::new();
            batch.put(&tree, &key(i), &versioned(version));
            db.write(batch).unwrap();
        } else {
            tree.put(&key(i), &versioned(version)).unwrap();
        }
        published[i as usize].store(version, Ordering::SeqCst);
    }
    // The readers go on until the cache answered some gets (on a loaded
    // machine the writes can all finish before it has). The bound only
    // keeps a broken cache from hanging the test: it ends at the first hit.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while tree.record_cache_status().hits == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    let gets: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(gets > 0);
    assert!(tree.record_cache_status().hits > 0);
}

#[test]
fn a_record_cache_that_leaves_the_pool_less_than_a_mib_is_refused() {
    let dir = tempdir();
    let refused = small()
        .buffer_pool_bytes(4 << 20)
        .record_cache_bytes(7 << 19)
        .open(dir.path());
    assert!(matches!(refused, Err(Error::InvalidOptions { .. })));
    let db = small()
        .buffer_pool_bytes(4 << 20)
        .record_cache_bytes(3 << 20)
        .open(dir.path())
        .unwrap();
    assert_eq!(
        db.tree("t").unwrap().record_cache_status().budget_bytes,
        3 << 20
    );
}

/// The record cache takes its part of the budget from the pool as gets fill
/// it: a tree that is only written keeps the whole budget as its pool; once
/// gets have filled every shard, pool and cache share the budget, also
/// after a compaction has moved the tree to a new pool.
#[test]
fn the_record_cache_takes_its_budget_from_the_pool_as_gets_fill_it() {
    let dir = tempdir();
    let db = with_records().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    const KEYS: u64 = 2_000;
    for i in 0..KEYS {
        tree.put(&key(i), &half_random_value(&mut rng)).unwrap();
    }
    let shares = |tree: &barracuda::Tree| {
        let pool = tree.pool_status();
        let records = tree.record_cache_status();
        (pool.budget_bytes, pool.lent_bytes, records.allocated_bytes)
    };
    assert_eq!(shares(&tree), (8 << 20, 0, 0));
    let mut value = Vec::new();
    for i in 0..KEYS {
        assert!(tree.get_into(&key(i), &mut value).unwrap());
    }
    assert_eq!(shares(&tree), (6 << 20, 2 << 20, 2 << 20));
    db.compact("t").unwrap();
    assert_eq!(shares(&tree), (6 << 20, 2 << 20, 2 << 20));
    for i in 0..KEYS {
        assert!(tree.get_into(&key(i), &mut value).unwrap());
    }
    assert!(tree.record_cache_status().hits >= KEYS / 2);
}
