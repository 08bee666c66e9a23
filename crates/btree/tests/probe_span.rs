//! `page::probe_in` (a slot search that starts where the parent's key span
//! puts the key) answers exactly as `page::probe` (a binary search), for
//! every key, with the real span, with spans that are wrong, and with none.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use barracuda_btree::page::{self, KeySpan};
use barracuda_btree::{BTree, MemStore, PageStore, SplitPolicy, TreeConfig};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use std::sync::Arc;

/// How the test's keys look.
#[derive(Clone, Copy, Debug)]
enum Keys {
    /// 24 random bytes (hashes, UUIDs): the case spans are for.
    Random,
    /// `user:` and a decimal number: a shared prefix, digits after it.
    Prefixed,
    /// Random lengths from 0 to 12 over a four-letter alphabet: many
    /// prefixes of one another, and empty keys.
    Short,
}

fn key(keys: Keys, rng: &mut SmallRng) -> Vec<u8> {
    match keys {
        Keys::Random => {
            let mut k = vec![0; 24];
            rng.fill_bytes(&mut k);
            k
        }
        Keys::Prefixed => format!("user:{}", rng.random_range(0..1_000_000u32)).into_bytes(),
        Keys::Short => {
            let len = rng.random_range(0..=12);
            (0..len).map(|_| b"abcd"[rng.random_range(0..4)]).collect()
        }
    }
}

/// Every (parent, record offset, child) edge from an internal page to a
/// leaf, left to right.
fn leaf_edges(tree: &BTree<MemStore>) -> Vec<(u64, usize, u64)> {
    let store = tree.store();
    let mut out = Vec::new();
    let mut todo = vec![tree.root_page_id()];
    while let Some(id) = todo.pop() {
        let g = store.fix_shared(id).unwrap();
        if page::is_leaf(&g) {
            continue;
        }
        for off in page::records(&g) {
            let child = page::rec_child(&g, off);
            if page::level(&g) == 1 {
                out.push((id.0, off, child.0));
            } else {
                todo.push(child);
            }
        }
    }
    out
}

fn check(keys: Keys, seed: u64, count: usize, policy: SplitPolicy) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let store = Arc::new(MemStore::new(4096).unwrap());
    let config = TreeConfig {
        policy,
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config).unwrap();
    let mut present = Vec::new();
    for _ in 0..count {
        let k = key(keys, &mut rng);
        tree.insert(&k, b"v").unwrap();
        present.push(k);
    }
    // Some deletes leave merged and compacted groups behind.
    for k in present.iter().step_by(7) {
        tree.delete(k).unwrap();
    }
    let store = tree.store();
    let edges = leaf_edges(&tree);
    // 4 KiB pages of these keys: a root over leaves from about 200 keys on
    // (short keys repeat, and hundreds of them can fit one page).
    assert!(
        count < 300 || matches!(keys, Keys::Short) || edges.len() > 1,
        "{count} keys, {} leaves",
        edges.len()
    );
    let mut spanned = 0;
    for (parent, off, child) in edges {
        let p = store.fix_shared(barracuda_base::PageId(parent)).unwrap();
        let span = KeySpan::of_child(&p, off);
        spanned += usize::from(span.is_some());
        drop(p);
        let leaf = store.fix_shared(barracuda_base::PageId(child)).unwrap();
        let wrong = KeySpan::new(&key(keys, &mut rng), &key(keys, &mut rng));
        let mut probes: Vec<Vec<u8>> = page::records(&leaf)
            .map(|o| page::rec_key(&leaf, o).to_vec())
            .collect();
        probes.extend((0..20).map(|_| key(keys, &mut rng)));
        probes.push(Vec::new());
        probes.push(vec![0xff; 30]);
        for k in &probes {
            let expected = page::probe(&leaf, k);
            for s in [span.as_ref(), wrong.as_ref(), None] {
                assert_eq!(
                    page::probe_in(&leaf, k, s),
                    expected,
                    "{keys:?} {k:?} {s:?}"
                );
            }
        }
    }
    assert!(count < 3000 || spanned > 5, "{spanned} leaves with a span");
}

#[test]
fn spans_of_real_parents_are_exact() {
    check(Keys::Random, 1, 3000, SplitPolicy::Adaptive);
    check(Keys::Prefixed, 2, 3000, SplitPolicy::Adaptive);
    check(Keys::Short, 3, 3000, SplitPolicy::Half);
}

#[test]
fn a_span_puts_random_keys_near_their_slot() {
    // Not exactness (above) but use: with random keys, the estimate from
    // the parent's span is within two slots of the answer for most keys.
    let mut rng = SmallRng::seed_from_u64(9);
    let store = Arc::new(MemStore::new(16384).unwrap());
    let tree = BTree::create(store, TreeConfig::default()).unwrap();
    for _ in 0..20_000 {
        tree.insert(&key(Keys::Random, &mut rng), &[7; 100])
            .unwrap();
    }
    let store = tree.store();
    let (mut near, mut all) = (0, 0);
    for (parent, off, child) in leaf_edges(&tree) {
        let p = store.fix_shared(barracuda_base::PageId(parent)).unwrap();
        let Some(span) = KeySpan::of_child(&p, off) else {
            continue;
        };
        drop(p);
        let leaf = store.fix_shared(barracuda_base::PageId(child)).unwrap();
        let n = page::slot_count(&leaf);
        for o in page::records(&leaf) {
            let k = page::rec_key(&leaf, o);
            let slot = page::probe(&leaf, k).slot;
            all += 1;
            near += usize::from(span.estimate(k, n).abs_diff(slot) <= 2);
        }
    }
    assert!(near * 10 >= all * 8, "{near} of {all} within two slots");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn probe_in_equals_probe(seed in any::<u64>(), count in 1usize..2500, which in 0..3u8) {
        let keys = [Keys::Random, Keys::Prefixed, Keys::Short][usize::from(which)];
        check(keys, seed, count, SplitPolicy::Adaptive);
    }
}
