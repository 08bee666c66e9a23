//! The 16-thread test of `common` on `MemStore` with 4 KiB pages (many
//! splits and merges), for two split policies.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;

use barracuda_btree::{BTree, MemStore, SplitPolicy, TreeConfig};
use std::sync::Arc;

fn run(policy: SplitPolicy) {
    let store = Arc::new(MemStore::new(4096).unwrap());
    let config = TreeConfig {
        policy,
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config).unwrap();
    common::run_sixteen_threads(&tree);
}

#[test]
fn sixteen_threads_adaptive() {
    run(SplitPolicy::Adaptive);
}

#[test]
fn sixteen_threads_innodb() {
    run(SplitPolicy::InnoDb);
}
