//! The 16-thread test of `concurrent.rs` on the buffer pool: mixed inserts,
//! deletes, gets and cursor scans on one tree of small pages, each thread
//! owning the keys `n * 16 + thread`, on a pool of only `BUDGET_PAGES` pages,
//! zlib-compressed (4 KiB -> 2 KiB) and uncompressed, with both eviction
//! policies. The final contents must equal the union of the threads' models,
//! the tree's and the pool's checkers must pass, and the pool must have
//! evicted pages (or dropped frames).
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod pool_common;

use barracuda_btree::{PoolStore, SplitPolicy, Tree, TreeConfig};
use barracuda_pool::EvictionPolicy;
use pool_common::Format;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

const THREADS: u64 = 16;
const OPS_PER_THREAD: usize = 4_000;
const KEYS_PER_THREAD: u64 = 600;
/// A few dozen pages for 16 threads, each of which may hold a root-to-leaf
/// path, a new page, a sibling and a two-page overflow chain (and its
/// pending pages until its operation finishes): a tree of some 650 pages
/// evicts on nearly every miss without exhausting the pool.
const BUDGET_PAGES: usize = 32;

fn key(n: u64, thread: u64) -> Vec<u8> {
    (n * THREADS + thread).to_be_bytes().to_vec()
}

fn worker(tree: &Tree<PoolStore>, thread: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
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
fn scan_is_ordered(tree: &Tree<PoolStore>, from: &[u8], forward: bool) {
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

fn run(format: Format, eviction: EvictionPolicy) {
    let store = pool_common::store(format, eviction, BUDGET_PAGES);
    let config = TreeConfig {
        policy: SplitPolicy::Adaptive,
        compressed: format.compressed(),
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
    tree.store().check_invariants().unwrap();
    // Every finished operation stamped its pages with a real LSN: nothing is
    // left pending, so everything can be written.
    let pool = tree.store().pool();
    pool.flush_all().unwrap();
    assert_eq!(pool.dirty_page_count(), 0, "pages left at the pending LSN");
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
    let store = tree.store();
    let status = store.pool().status();
    eprintln!(
        "{format:?} {eviction:?}: {} pages in a pool of {BUDGET_PAGES}: {} evicted, {} frames dropped, {} read, {} written, {} compression failures",
        store.page_count(),
        status.pages_evicted,
        status.frames_dropped,
        status.pages_read,
        status.pages_written,
        status.compression_failures,
    );
    assert!(
        store.page_count() > BUDGET_PAGES as u64,
        "tree fits the pool"
    );
    assert!(status.pages_evicted > 0, "no page evicted: {status:?}");
    assert!(status.pages_read > 0, "no page read back: {status:?}");
}

#[test]
fn sixteen_threads_zlib_innodb() {
    run(Format::Zlib4k2k, EvictionPolicy::InnoDb);
}

#[test]
fn sixteen_threads_zlib_cost_aware() {
    run(Format::Zlib4k2k, EvictionPolicy::CostAware);
}

#[test]
fn sixteen_threads_plain_innodb() {
    run(Format::Plain4k, EvictionPolicy::InnoDb);
}

#[test]
fn sixteen_threads_plain_cost_aware() {
    run(Format::Plain4k, EvictionPolicy::CostAware);
}
