//! Each invariant `check_invariants()` enforces, broken on purpose by writing
//! page bytes behind the tree's back, and seen reported.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;

use barracuda_base::PageId;
use barracuda_btree::page::{self, REC_OVERFLOW, RECORD_HEADER_BYTES};
use barracuda_btree::store::MemExclusive;
use barracuda_btree::{
    BTree, Error, MemStore, OpContext, PageStore, PageWrite, SplitPolicy, TreeConfig,
};
use std::sync::Arc;

fn tree_with(rows: usize) -> BTree<MemStore> {
    let store = Arc::new(MemStore::new(4096).unwrap());
    let config = TreeConfig {
        policy: SplitPolicy::Half,
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config).unwrap();
    for i in 0..rows {
        tree.insert(format!("k{i:06}").as_bytes(), &[7u8; 100])
            .unwrap();
    }
    tree.check_invariants().unwrap();
    tree
}

/// Leaf ids from left to right.
fn leaves(tree: &BTree<MemStore>) -> Vec<PageId> {
    let store = tree.store();
    let mut out = vec![common::leftmost_leaf(tree)];
    while let Some(next) = page::right(&store.fix_shared(*out.last().unwrap()).unwrap()) {
        out.push(next);
    }
    out
}

fn mutate(
    tree: &BTree<MemStore>,
    id: PageId,
    f: impl FnOnce(&mut MemExclusive<'_, barracuda_btree::store::AlwaysFits>),
) {
    let mut g = tree.store().fix_exclusive(id).unwrap();
    f(&mut g);
    g.commit(&mut OpContext::new());
}

fn expect_violation(tree: &BTree<MemStore>, needle: &str) {
    match tree.check_invariants() {
        Err(Error::Invariant { reason, .. }) => {
            assert!(
                reason.contains(needle),
                "reported {reason:?}, expected {needle:?}"
            );
        }
        other => panic!("expected a violation containing {needle:?}, got {other:?}"),
    }
}

fn record_offsets(tree: &BTree<MemStore>, id: PageId) -> Vec<usize> {
    page::records(&tree.store().fix_shared(id).unwrap()).collect()
}

#[test]
fn key_order_within_a_page() {
    let tree = tree_with(10);
    let leaf = leaves(&tree)[0];
    let second = record_offsets(&tree, leaf)[1];
    mutate(&tree, leaf, |g| {
        g.write(second + RECORD_HEADER_BYTES, b"\0")
    });
    expect_violation(&tree, "out of order");
}

#[test]
fn separators_bound_children() {
    let tree = tree_with(400);
    let leaf = leaves(&tree)[0];
    let last = *record_offsets(&tree, leaf).last().unwrap();
    mutate(&tree, leaf, |g| g.write(last + RECORD_HEADER_BYTES, b"z"));
    expect_violation(&tree, "outside the range");
}

#[test]
fn leaves_at_one_depth() {
    let tree = tree_with(20_000);
    assert!(tree.stats().unwrap().height >= 3);
    let root = tree.root_page_id();
    let second = record_offsets(&tree, root)[1];
    // The last leaf: first reached through the root's second child.
    let leaf = *leaves(&tree).last().unwrap();
    mutate(&tree, root, |g| {
        let at = second + RECORD_HEADER_BYTES + page::rec_key(g, second).len();
        g.write(at, &leaf.0.to_le_bytes());
    });
    expect_violation(&tree, "wrong level");
}

#[test]
fn sibling_links_agree() {
    let tree = tree_with(400);
    let leaf = leaves(&tree)[0];
    mutate(&tree, leaf, |g| page::set_right(g, None));
    expect_violation(&tree, "sibling links");
}

#[test]
fn fill_above_merge_threshold() {
    let tree = tree_with(400);
    let leaf = leaves(&tree)[1];
    mutate(&tree, leaf, |g| {
        while page::record_count(g) > 2 {
            let key = page::rec_key(g, page::first_record(g)).to_vec();
            let pr = page::probe(g, &key);
            page::remove(g, pr);
        }
        page::set_flags(g, 0);
    });
    expect_violation(&tree, "below the merge floor");
}

#[test]
fn overflow_chain_valid() {
    let tree = tree_with(10);
    tree.insert(b"k000003", &vec![9u8; 10_000]).unwrap();
    tree.check_invariants().unwrap();
    let leaf = leaves(&tree)[0];
    let g = tree.store().fix_shared(leaf).unwrap();
    let off = page::records(&g)
        .find(|&o| page::rec_flags(&g, o) & REC_OVERFLOW != 0)
        .unwrap();
    let v = page::rec_value(&g, off);
    let first = PageId(u64::from_le_bytes(v[..8].try_into().unwrap()));
    drop(g);
    // Shorten the first link's payload.
    let short = (page::PAGE_HEADER_BYTES + 100) as u16;
    mutate(&tree, first, |g| {
        g.write(page::H_HEAP_TOP, &short.to_le_bytes())
    });
    expect_violation(&tree, "overflow chain holds");
}

#[test]
fn no_page_reachable_twice() {
    let tree = tree_with(400);
    let root = tree.root_page_id();
    let offs = record_offsets(&tree, root);
    let first_child = page::rec_child(&tree.store().fix_shared(root).unwrap(), offs[0]);
    mutate(&tree, root, |g| {
        let at = offs[1] + RECORD_HEADER_BYTES + page::rec_key(g, offs[1]).len();
        g.write(at, &first_child.0.to_le_bytes());
    });
    expect_violation(&tree, "reachable twice");
}

#[test]
fn free_pages_disjoint_from_the_tree() {
    let tree = tree_with(400);
    let leaf = leaves(&tree)[2];
    let g = tree.store().fix_exclusive(leaf).unwrap();
    tree.store().free(g, &mut OpContext::new()).unwrap();
    expect_violation(&tree, "free page is reachable");
}

#[test]
fn directory_agrees_with_records() {
    let tree = tree_with(10);
    let leaf = leaves(&tree)[0];
    mutate(&tree, leaf, |g| {
        let at = g.len() - 2;
        g.write(at, &9u16.to_le_bytes());
    });
    expect_violation(&tree, "directory");
}

#[test]
fn key_and_value_limits_are_clear_errors() {
    let tree = tree_with(1);
    let long_key = vec![1u8; barracuda_btree::KEY_BYTES_MAX + 1];
    assert!(matches!(
        tree.insert(&long_key, b"v"),
        Err(Error::KeyTooLong { len_bytes, max_bytes }) if len_bytes == max_bytes + 1
    ));
    let long_value = vec![1u8; barracuda_btree::VALUE_BYTES_MAX + 1];
    assert!(matches!(
        tree.insert(b"k", &long_value),
        Err(Error::ValueTooLong { .. })
    ));
    tree.check_invariants().unwrap();
}
