//! A database of many trees: a tree costs its two files' descriptors, not
//! threads (every tree's files share the database's I/O threads, one page
//! cleaner writes every tree's dirty pages, and a pool's prefault thread
//! runs only while the pool grows), so trees are created up to the
//! catalog's limits, and reopen with every key.
//!
//! One test in its own binary: it counts the process's threads and
//! descriptors. `BARRACUDA_MANY_TREES=N` sets how many trees (default 400).

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;

use std::collections::BTreeMap;

use barracuda::{Compression, Db, TreeOptions};

/// The process's threads by name, but the prefault threads, which end on
/// their own once their pool's chunks are populated, and the kernel's
/// io_uring workers, which come and go with blocking requests (their count
/// at any moment depends on scheduling).
fn threads() -> BTreeMap<String, usize> {
    let mut names = BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let comm = std::fs::read_to_string(task.unwrap().path().join("comm")).unwrap_or_default();
        let name = comm.trim().to_string();
        if name != "barracuda-prefa" && !name.starts_with("iou-") {
            *names.entry(name).or_default() += 1;
        }
    }
    names
}

fn descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn many_trees_share_threads_and_reopen() {
    let tree_count: usize = std::env::var("BARRACUDA_MANY_TREES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let dir = common::tempdir();
    let db = Db::options()
        .buffer_pool_bytes(4 << 20)
        .open(dir.path())
        .unwrap();
    // Compressed and uncompressed trees alike.
    let options = |i: usize| {
        if i.is_multiple_of(2) {
            TreeOptions::default()
        } else {
            TreeOptions::default().compression(Compression::None)
        }
    };
    let first = db.create_tree("t0", options(0)).unwrap();
    first.put(b"k", b"0").unwrap();
    let (threads_one, descriptors_one) = (threads(), descriptors());
    for i in 1..tree_count {
        let tree = db.create_tree(&format!("t{i}"), options(i)).unwrap();
        tree.put(b"k", i.to_string().as_bytes()).unwrap();
    }
    db.checkpoint().unwrap();
    assert_eq!(
        threads(),
        threads_one,
        "threads with 1 tree and with {tree_count}"
    );
    // Two files per tree (its data and doublewrite area); the log may have
    // opened a segment more meanwhile.
    let added = descriptors() - descriptors_one;
    let expected = 2 * (tree_count - 1);
    assert!(
        (expected..=expected + 2).contains(&added),
        "{added} descriptors for {} trees more",
        tree_count - 1
    );
    drop((first, db));
    let db = Db::open(dir.path()).unwrap();
    for i in (0..tree_count).step_by(7).chain([tree_count - 1]) {
        let tree = db.open_tree(&format!("t{i}")).unwrap();
        assert_eq!(tree.get(b"k").unwrap().unwrap(), i.to_string().as_bytes());
    }
    db.check().unwrap();
}
