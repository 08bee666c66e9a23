//! The model test of `common` on the buffer pool: a state machine against
//! `BTreeMap` (insert, delete, get, range scans in both directions) for every
//! split policy, zlib-compressed (16 KiB -> 8 KiB, 4 KiB -> 2 KiB) and
//! uncompressed pages, and both eviction policies, on a pool of only
//! `BUDGET_PAGES` pages, with the tree's and the pool's `check_invariants()`
//! after every step; once with compressible values and once with some
//! random ones, which fill 2 KiB blocks so that commits fail to fit and the
//! pool rolls pages back.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

#[path = "../../btree/tests/common/mod.rs"]
mod common;
mod pool_common;

use barracuda_mtr::PoolStore;
use barracuda_pool::EvictionPolicy;
use common::{Setup, TreeUnderTest, Values};
use pool_common::Format;
use proptest::prelude::*;
use proptest_state_machine::prop_state_machine;
use std::sync::Arc;

/// The pool's budget in logical pages: a few dozen, so a tree of more than
/// that many pages evicts constantly (an overflow value of 40 KB alone pins
/// eleven 4 KiB pages while it is written).
const BUDGET_PAGES: usize = 32;

fn variants() -> BoxedStrategy<(Format, EvictionPolicy)> {
    (
        proptest::sample::select(Format::ALL.to_vec()),
        prop_oneof![
            Just(EvictionPolicy::InnoDb),
            Just(EvictionPolicy::CostAware)
        ],
    )
        .boxed()
}

fn store(&(format, eviction): &(Format, EvictionPolicy)) -> (Arc<PoolStore>, bool) {
    let store = pool_common::store(format, eviction, BUDGET_PAGES);
    (store, format.compressed())
}

fn check_store(store: &PoolStore) {
    store.check_invariants().unwrap();
    // More pages than the pool holds: some must have been evicted (or,
    // compressed, had their frames dropped).
    if store.page_count() > BUDGET_PAGES as u64 {
        assert!(
            pool_common::evictions(store) > 0,
            "{} pages in a pool of {BUDGET_PAGES} without eviction",
            store.page_count()
        );
    }
}

/// Compressible values.
struct Pool;

impl Setup for Pool {
    type Store = PoolStore;
    type Variant = (Format, EvictionPolicy);
    const VALUES: Values = Values::Compressible;

    fn variants() -> BoxedStrategy<Self::Variant> {
        variants()
    }

    fn store(variant: &Self::Variant) -> (Arc<PoolStore>, bool) {
        store(variant)
    }

    fn check_store(store: &PoolStore) {
        check_store(store);
    }
}

/// Some random values too.
struct PoolMixed;

impl Setup for PoolMixed {
    type Store = PoolStore;
    type Variant = (Format, EvictionPolicy);
    const VALUES: Values = Values::Mixed;

    fn variants() -> BoxedStrategy<Self::Variant> {
        variants()
    }

    fn store(variant: &Self::Variant) -> (Arc<PoolStore>, bool) {
        store(variant)
    }

    fn check_store(store: &PoolStore) {
        check_store(store);
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        max_shrink_iters: 2000,
        .. ProptestConfig::default()
    })]
    #[test]
    fn tree_on_pool_matches_btreemap(sequential 1..300 => TreeUnderTest<Pool>);

    /// Regression: deletes used to fail with `CompressionUnfit` halfway
    /// through a merge (the saved seed); every operation must now complete
    /// or fail having changed nothing.
    #[test]
    fn tree_on_pool_with_incompressible_values(sequential 1..300 => TreeUnderTest<PoolMixed>);
}
