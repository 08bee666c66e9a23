//! 16 threads of mixed inserts, deletes, gets and cursor scans on one tree
//! with small pages (many splits and merges); each thread owns the keys
//! `n * 16 + thread`, so neighbouring keys belong to different threads and
//! every page is shared. The final contents must equal the union of the
//! threads' models, and the checker must pass.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use barracuda_btree::{MemStore, SplitPolicy, Tree, TreeConfig};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

const THREADS: u64 = 16;
const OPS_PER_THREAD: usize = 4_000;
const KEYS_PER_THREAD: u64 = 600;

fn key(n: u64, thread: u64) -> Vec<u8> {
    (n * THREADS + thread).to_be_bytes().to_vec()
}

fn worker(tree: &Tree<MemStore>, thread: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(thread);
    let mut model = BTreeMap::new();
    for step in 0..OPS_PER_THREAD {
        let k = key(rng.random_range(0..KEYS_PER_THREAD), thread);
        match rng.random_range(0..100) {
            0..55 => {
                let len = if rng.random_range(0..50) == 0 {
                    5000
                } else {
                    rng.random_range(1..300)
                };
                let v = vec![(step % 251) as u8; len];
                let existed = tree.insert(&k, &v).unwrap();
                assert_eq!(existed, model.insert(k, v).is_some());
            }
            55..85 => {
                assert_eq!(tree.delete(&k).unwrap(), model.remove(&k).is_some());
            }
            85..97 => {
                assert_eq!(tree.get(&k).unwrap(), model.get(&k).cloned());
            }
            _ => scan_is_ordered(tree, &k, rng.random()),
        }
    }
    model
}

/// A short scan from `from`: keys strictly ordered in the scan direction.
fn scan_is_ordered(tree: &Tree<MemStore>, from: &[u8], forward: bool) {
    let mut c = tree.cursor();
    let mut ok = if forward {
        c.seek(from).unwrap()
    } else {
        c.seek_for_prev(from).unwrap()
    };
    let mut prev: Option<Vec<u8>> = None;
    for _ in 0..200 {
        if !ok {
            break;
        }
        let k = c.key().unwrap().to_vec();
        if let Some(p) = &prev {
            assert!(if forward { *p < k } else { *p > k }, "scan out of order");
        }
        prev = Some(k);
        ok = if forward {
            c.next().unwrap()
        } else {
            c.prev().unwrap()
        };
    }
}

fn run(policy: SplitPolicy) {
    let store = Arc::new(MemStore::new(4096).unwrap());
    let config = TreeConfig {
        policy,
        ..TreeConfig::default()
    };
    let tree = Tree::create(store, config).unwrap();
    let models: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let tree = &tree;
                s.spawn(move || worker(tree, t))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let want: BTreeMap<Vec<u8>, Vec<u8>> = models.into_iter().flatten().collect();
    tree.check_invariants().unwrap();
    let mut got = BTreeMap::new();
    let mut c = tree.cursor();
    let mut ok = c.first().unwrap();
    while ok {
        let (k, v) = c.entry().unwrap().clone();
        got.insert(k, v);
        ok = c.next().unwrap();
    }
    assert_eq!(got.len(), want.len());
    assert!(got == want);
    let counts = tree.split_counts();
    assert!(counts.half + counts.sequential > 0, "no splits: {counts:?}");
    assert!(
        counts.merges + counts.redistributions > 0,
        "no rebalancing: {counts:?}"
    );
}

#[test]
fn sixteen_threads_adaptive() {
    run(SplitPolicy::Adaptive);
}

#[test]
fn sixteen_threads_innodb() {
    run(SplitPolicy::InnoDb);
}
