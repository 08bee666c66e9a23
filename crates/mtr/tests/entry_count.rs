//! The stored entry count (`BTree::len`): it follows inserts of new keys and
//! deletes of present ones, not overwrites or deletes of absent keys, on the
//! in-memory store and on the buffer pool; a failed operation leaves it
//! unchanged; the checker catches a wrong count; a version 1 meta page
//! (written before counts were kept) is counted once and then kept.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod pool_common;

use barracuda_btree::{BTree, Error, MemStore, OpContext, PageStore, PageWrite, TreeConfig};
use barracuda_codec::PAGE_HEADER_RESERVED_BYTES;
use barracuda_mtr::{LsnMode, META_PAGE_ID, PoolStore};
use barracuda_pool::EvictionPolicy;
use pool_common::Format;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Random puts (some replacing, some with overflow values) and deletes
/// (some of absent keys), checking `len` against a model after each.
fn follow_model<S: PageStore>(tree: &BTree<S>, seed: u64, steps: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    assert_eq!(tree.len().unwrap(), 0);
    assert!(tree.is_empty().unwrap());
    for step in 0..steps {
        let key = format!("k{:05}", rng.random_range(0..1500u32)).into_bytes();
        if rng.random_range(0..3) == 0 {
            let existed = tree.delete(&key).unwrap();
            assert_eq!(existed, model.remove(&key).is_some());
        } else {
            let len = if rng.random_range(0..20) == 0 {
                3000
            } else {
                40
            };
            let value = vec![(step % 251) as u8; len];
            let replaced = tree.insert(&key, &value).unwrap();
            assert_eq!(replaced, model.insert(key, value).is_some());
        }
        assert_eq!(tree.len().unwrap(), model.len() as u64, "step {step}");
        if step % 1000 == 0 {
            tree.check_invariants().unwrap();
        }
    }
    tree.check_invariants().unwrap();
    for key in model.keys() {
        tree.delete(key).unwrap();
    }
    assert_eq!(tree.len().unwrap(), 0);
    assert!(tree.is_empty().unwrap());
    tree.check_invariants().unwrap();
}

#[test]
fn len_follows_the_model_in_memory() {
    let store = Arc::new(MemStore::new(4096).unwrap());
    let tree = BTree::create(store, TreeConfig::default()).unwrap();
    follow_model(&tree, 1, 6000);
}

#[test]
fn len_follows_the_model_on_the_pool() {
    for format in [Format::Zlib16k8k, Format::Plain4k] {
        let store = pool_common::store(format, EvictionPolicy::InnoDb, 48);
        let config = TreeConfig {
            compressed: format.compressed(),
            ..TreeConfig::default()
        };
        let tree = BTree::create(Arc::clone(&store), config).unwrap();
        follow_model(&tree, 2, 4000);
        store.check_invariants().unwrap();
    }
}

#[test]
fn failed_operations_leave_len_unchanged() {
    let store = pool_common::store(Format::Plain4k, EvictionPolicy::InnoDb, 48);
    let tree = BTree::create(store, TreeConfig::default()).unwrap();
    for i in 0..100u32 {
        tree.insert(&i.to_be_bytes(), b"v").unwrap();
    }
    let long_key = vec![7u8; 10_000];
    assert!(matches!(
        tree.insert(&long_key, b"v"),
        Err(Error::KeyTooLong { .. })
    ));
    assert!(matches!(
        tree.insert(b"new", &vec![0u8; (16 << 20) + 1]),
        Err(Error::ValueTooLong { .. })
    ));
    assert!(matches!(
        tree.delete(&long_key),
        Err(Error::KeyTooLong { .. })
    ));
    assert_eq!(tree.len().unwrap(), 100);
    tree.check_invariants().unwrap();
}

/// Inserts and deletes in one operation context count into it; the meta
/// page changes once, when the context settles, by the net count.
#[test]
fn one_context_changes_the_count_once_when_it_settles() {
    let store = pool_common::store(Format::Plain4k, EvictionPolicy::InnoDb, 48);
    let tree = BTree::create(Arc::clone(&store), TreeConfig::default()).unwrap();
    tree.insert(b"old", b"v").unwrap();
    let mut op = OpContext::new();
    for i in 0..300u32 {
        tree.insert_in(&mut op, &i.to_be_bytes(), b"v").unwrap();
    }
    // A replaced key and an absent one do not count.
    tree.insert_in(&mut op, b"old", b"w").unwrap();
    assert!(!tree.delete_in(&mut op, b"absent").unwrap());
    assert!(tree.delete_in(&mut op, &7u32.to_be_bytes()).unwrap());
    assert_eq!(op.entry_delta, 299);
    let meta_changes = |op: &OpContext| {
        op.pages()
            .iter()
            .filter(|p| p.page_id == META_PAGE_ID && p.patch_count() > 0)
            .count()
    };
    // Splits allocated pages through the meta page; no count yet.
    let before = meta_changes(&op);
    assert_eq!(tree.len().unwrap(), 1);
    tree.settle_entry_count(&mut op).unwrap();
    assert_eq!(op.entry_delta, 0);
    assert_eq!(meta_changes(&op), before + 1);
    assert_eq!(tree.len().unwrap(), 300);
    // Settling again changes nothing.
    tree.settle_entry_count(&mut op).unwrap();
    assert_eq!(meta_changes(&op), before + 1);
    store.finish_op(op);
    tree.check_invariants().unwrap();
}

#[test]
fn the_checker_catches_a_wrong_count() {
    let store = Arc::new(MemStore::new(4096).unwrap());
    let tree = BTree::create(Arc::clone(&store), TreeConfig::default()).unwrap();
    tree.insert(b"a", b"1").unwrap();
    store.set_entry_count(5, &mut OpContext::new()).unwrap();
    let err = tree.check_invariants().unwrap_err();
    assert!(matches!(err, Error::Invariant { .. }), "{err}");
    // A count that would go below zero is corruption, not a wrap.
    store.set_entry_count(0, &mut OpContext::new()).unwrap();
    assert!(matches!(tree.delete(b"a"), Err(Error::Corrupted { .. })));
}

/// Rewrites the meta page as version 1 (no count), as a file written before
/// counts were kept has it.
fn downgrade_meta_page(store: &PoolStore) {
    let h = PAGE_HEADER_RESERVED_BYTES;
    let mut op = OpContext::new();
    {
        let mut meta = store.fix_exclusive(META_PAGE_ID).unwrap();
        meta.write(h + 4, &1u32.to_le_bytes());
        meta.write(h + 32, &[0u8; 8]);
        assert_eq!(meta.commit(&mut op), barracuda_btree::Fit::Fits);
    }
    store.finish_op(op);
}

#[test]
fn a_version_1_meta_page_is_counted_once_then_kept() {
    let store = pool_common::store(Format::Zlib16k8k, EvictionPolicy::InnoDb, 48);
    let config = TreeConfig {
        compressed: true,
        ..TreeConfig::default()
    };
    let tree = BTree::create(Arc::clone(&store), config).unwrap();
    for i in 0..3000u32 {
        tree.insert(&i.to_be_bytes(), &[1u8; 60]).unwrap();
    }
    downgrade_meta_page(&store);
    // An old store opens; it keeps no count, and `len` counts the leaves.
    let reopened = PoolStore::open(Arc::clone(store.pool()), LsnMode::Logged).unwrap();
    assert_eq!(reopened.entry_count().unwrap(), None);
    assert_eq!(store.entry_count().unwrap(), None);
    assert_eq!(tree.len().unwrap(), 3000);
    // Writes before the upgrade keep it without a count (and keep it a
    // valid version 1 page, allocation included).
    for i in 3000..3100u32 {
        tree.insert(&i.to_be_bytes(), &[2u8; 60]).unwrap();
    }
    tree.delete(&0u32.to_be_bytes()).unwrap();
    assert_eq!(store.entry_count().unwrap(), None);
    store.check_invariants().unwrap();
    tree.check_invariants().unwrap();
    // The upgrade: counted once, stored as an ordinary patch.
    let mut op = OpContext::new();
    assert_eq!(tree.recount_in(&mut op).unwrap(), 3099);
    assert!(op.pages().iter().any(|p| p.page_id == META_PAGE_ID));
    store.finish_op(op);
    assert_eq!(store.entry_count().unwrap(), Some(3099));
    tree.insert(b"after", b"upgrade").unwrap();
    assert_eq!(tree.len().unwrap(), 3100);
    tree.check_invariants().unwrap();
    store.check_invariants().unwrap();
}
