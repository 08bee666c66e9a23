//! Every split policy on every page format and both eviction policies, on a
//! pool of `BUDGET_PAGES` pages: a deterministic mix of sequential and random
//! inserts, overwrites and deletes grows the tree to many times the pool, so
//! eviction is certain; the contents must match a `BTreeMap`, both checkers
//! must pass, and the pool must have evicted pages and read them back.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod pool_common;

use barracuda_btree::{BTree, SplitPolicy, TreeConfig};
use barracuda_pool::EvictionPolicy;
use pool_common::Format;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

const BUDGET_PAGES: usize = 24;
const OPS: usize = 6_000;

fn run(format: Format, eviction: EvictionPolicy, policy: SplitPolicy) {
    let store = pool_common::store(format, eviction, BUDGET_PAGES);
    let config = TreeConfig {
        policy,
        compressed: format.compressed(),
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config).unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut model = BTreeMap::new();
    for step in 0..OPS {
        // Half sequential (appends), half random: both split shapes.
        let n: u32 = if step % 2 == 0 {
            step as u32
        } else {
            rng.random_range(0..OPS as u32)
        };
        let k = format!("key{n:08}").into_bytes();
        if rng.random_range(0..4) == 0 {
            assert_eq!(tree.delete(&k).unwrap(), model.remove(&k).is_some());
        } else {
            let len = if rng.random_range(0..40) == 0 {
                9_000
            } else {
                rng.random_range(1..400)
            };
            let v = vec![(step % 251) as u8; len];
            assert_eq!(tree.insert(&k, &v).unwrap(), model.insert(k, v).is_some());
        }
    }
    tree.check_invariants().unwrap();
    let store = tree.store();
    store.check_invariants().unwrap();
    // Every finished operation stamped its pages with a real LSN: nothing is
    // left pending, so everything can be written.
    let pool = tree.store().pool();
    pool.flush_all().unwrap();
    assert_eq!(pool.dirty_page_count(), 0, "pages left at the pending LSN");
    let mut c = tree.cursor();
    let mut ok = c.first().unwrap();
    let mut got = BTreeMap::new();
    while ok {
        let (k, v) = c.entry().unwrap().clone();
        got.insert(k, v);
        ok = c.next().unwrap();
    }
    assert!(got == model, "{format:?} {eviction:?} {policy:?}");
    let status = store.pool().status();
    eprintln!(
        "{format:?} {eviction:?} {policy:?}: {} pages in a pool of {BUDGET_PAGES}: {} evicted, {} frames dropped, {} read",
        store.page_count(),
        status.pages_evicted,
        status.frames_dropped,
        status.pages_read
    );
    assert!(store.page_count() > 4 * BUDGET_PAGES as u64);
    assert!(
        status.pages_evicted > 0 && status.pages_read > 0,
        "{status:?}"
    );
}

fn all_policies(format: Format) {
    for eviction in [EvictionPolicy::InnoDb, EvictionPolicy::CostAware] {
        for policy in [
            SplitPolicy::Half,
            SplitPolicy::InnoDb,
            SplitPolicy::Adaptive,
            SplitPolicy::InnoDbLastInsert,
        ] {
            run(format, eviction, policy);
        }
    }
}

#[test]
fn zlib_16k_in_8k() {
    all_policies(Format::Zlib16k8k);
}

#[test]
fn zlib_4k_in_2k() {
    all_policies(Format::Zlib4k2k);
}

#[test]
fn plain_4k() {
    all_policies(Format::Plain4k);
}

#[test]
fn plain_16k() {
    all_policies(Format::Plain16k);
}
