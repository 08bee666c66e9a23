//! The 16-thread test of `common` on the buffer pool: one tree of small
//! pages on a pool of only `BUDGET_PAGES` pages, zlib-compressed
//! (4 KiB -> 2 KiB) and uncompressed, with both eviction policies. Besides
//! the common checks, the pool's checker must pass, nothing may be left
//! dirty after `flush_all`, and the pool must have evicted pages and read
//! them back.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

#[path = "../../btree/tests/common/mod.rs"]
mod common;
mod pool_common;

use barracuda_btree::{BTree, SplitPolicy, TreeConfig};
use barracuda_pool::EvictionPolicy;
use pool_common::Format;

/// A few dozen pages for 16 threads, each of which may hold a root-to-leaf
/// path, a new page, a sibling and a two-page overflow chain (and its
/// pending pages until its operation finishes): a tree of some 650 pages
/// evicts on nearly every miss without exhausting the pool.
const BUDGET_PAGES: usize = 32;

fn run(format: Format, eviction: EvictionPolicy) {
    let store = pool_common::store(format, eviction, BUDGET_PAGES);
    let config = TreeConfig {
        policy: SplitPolicy::Adaptive,
        compressed: format.compressed(),
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config).unwrap();
    common::run_sixteen_threads(&tree);
    let store = tree.store();
    store.check_invariants().unwrap();
    // Every finished operation stamped its pages with a real LSN: nothing is
    // left pending, so everything can be written.
    let pool = store.pool();
    pool.flush_all().unwrap();
    assert_eq!(pool.dirty_page_count(), 0, "pages left at the pending LSN");
    let status = pool.status();
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
