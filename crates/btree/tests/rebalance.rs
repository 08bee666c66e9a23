//! What a delete that leaves a page underfull does: merge with the sibling
//! when both fit one page; otherwise nothing until the page falls below
//! half the merge threshold, and only then take records from the sibling.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;

use barracuda_base::PageId;
use barracuda_btree::{BTree, MemStore, PageStore, SplitPolicy, TreeConfig, page};
use std::sync::Arc;

const PAGE: usize = 4096;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

/// A tree of `rows` keys in order, split by `policy`.
fn tree_with(rows: u32, policy: SplitPolicy) -> BTree<MemStore> {
    let store = Arc::new(MemStore::new(PAGE).unwrap());
    let config = TreeConfig {
        policy,
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config).unwrap();
    for i in 0..rows {
        tree.insert(&key(i), &[7u8; 100]).unwrap();
    }
    tree.check_invariants().unwrap();
    tree
}

/// The leftmost leaf, its used bytes and its right sibling's (0 if none).
fn first_two_leaves(tree: &BTree<MemStore>) -> (PageId, usize, usize) {
    let store = tree.store();
    let id = common::leftmost_leaf(tree);
    let g = store.fix_shared(id).unwrap();
    let right_used = page::right(&g).map_or(0, |right| {
        page::used_bytes(&store.fix_shared(right).unwrap())
    });
    (id, page::used_bytes(&g), right_used)
}

#[test]
fn an_underfull_page_next_to_a_full_one_waits_until_half_the_threshold() {
    // Sequential inserts leave the leaves nearly full, so the first leaf's
    // sibling never has room for a merge.
    let tree = tree_with(300, SplitPolicy::Adaptive);
    let threshold = PAGE / 2;
    let (first, used, right_used) = first_two_leaves(&tree);
    assert!(
        used > threshold && right_used > PAGE * 3 / 4,
        "{used} {right_used}"
    );
    let mut next = 0;
    // Down to just above half the threshold: no merge fits, and no
    // records move.
    while first_two_leaves(&tree).1 >= threshold / 2 + 200 {
        assert!(tree.delete(&key(next)).unwrap());
        next += 1;
        tree.check_invariants().unwrap();
    }
    let counts = tree.split_counts();
    assert_eq!(
        (counts.merges, counts.redistributions),
        (0, 0),
        "{counts:?}"
    );
    let (leaf, used, _) = first_two_leaves(&tree);
    assert_eq!(leaf, first);
    assert!(used < threshold, "{used} is not underfull");
    // Below half the threshold, it takes records from its sibling.
    while tree.split_counts().redistributions == 0 {
        let (_, used, _) = first_two_leaves(&tree);
        assert!(
            used >= threshold / 2 - 200,
            "{used} bytes and not redistributed"
        );
        assert!(tree.delete(&key(next)).unwrap());
        next += 1;
        tree.check_invariants().unwrap();
    }
    let (_, used, _) = first_two_leaves(&tree);
    assert!(used >= threshold / 2, "{used} after a redistribution");
    assert_eq!(tree.split_counts().merges, 0);
    for i in next..300 {
        assert_eq!(tree.get(&key(i)).unwrap().unwrap(), [7u8; 100]);
    }
}

#[test]
fn underfull_siblings_merge() {
    // Splits in the middle leave pages half full: deleting every other
    // key makes neighbours that fit one page together.
    let tree = tree_with(600, SplitPolicy::Half);
    let leaves_before = tree.stats().unwrap().leaf_pages;
    for i in (0..600).step_by(2) {
        assert!(tree.delete(&key(i)).unwrap());
        tree.check_invariants().unwrap();
    }
    let counts = tree.split_counts();
    let stats = tree.stats().unwrap();
    assert!(counts.merges > 0, "{counts:?}");
    assert!(
        stats.leaf_pages < leaves_before * 3 / 4,
        "{} leaves of {leaves_before}",
        stats.leaf_pages
    );
    assert!(stats.leaf_fill > 0.5, "fill {}", stats.leaf_fill);
    for i in 0..600 {
        assert_eq!(tree.get(&key(i)).unwrap().is_some(), i % 2 == 1);
    }
}

#[test]
fn deletes_from_an_underfull_leaf_whose_sibling_cannot_take_it_stay_on_the_leaf() {
    let tree = Arc::new(tree_with(300, SplitPolicy::Adaptive));
    let threshold = PAGE / 2;
    let mut next = 0;
    while first_two_leaves(&tree).1 >= threshold {
        assert!(tree.delete(&key(next)).unwrap());
        next += 1;
    }
    // The leaf is underfull, its full sibling cannot take its records and
    // no redistribution is due yet. With the root latched shared, a delete
    // that took the exclusive path from the root would wait; one that
    // checks the sibling from the leaf does not.
    let root = tree.store().fix_shared(tree.root_page_id()).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let deleter = {
        let tree = Arc::clone(&tree);
        std::thread::spawn(move || {
            let deleted = tree.delete(&key(next)).unwrap();
            done_tx.send(deleted).unwrap();
        })
    };
    // A delete that waits for the latch waits until it is dropped below,
    // forever but for this bound, which a loaded machine's delete that
    // does not wait stays far below.
    let done = done_rx.recv_timeout(std::time::Duration::from_secs(120));
    drop(root);
    deleter.join().unwrap();
    assert_eq!(done, Ok(true), "the delete waited for the root's latch");
    tree.check_invariants().unwrap();
    let (_, used, _) = first_two_leaves(&tree);
    assert!(used < threshold, "{used} is not underfull");
    let counts = tree.split_counts();
    assert_eq!(
        (counts.merges, counts.redistributions),
        (0, 0),
        "{counts:?}"
    );
}
