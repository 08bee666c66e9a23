//! Shifts: under `Adaptive`, a full leaf that no insert stream explains
//! gives records to a sibling with room instead of splitting, so random
//! inserts fill leaves past the ln 2 of a split in the middle; the other
//! policies never shift; every tree stays valid and holds every record,
//! also with deletes mixed in and with compressed blocks.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use barracuda_base::PageId;
use barracuda_btree::store::{AlwaysFits, MemExclusive, MemShared};
use barracuda_btree::{BTree, MemStore, OpContext, PageStore, Result, SplitPolicy, TreeConfig};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

const PAGE: usize = 4096;

fn tree(policy: SplitPolicy) -> BTree<MemStore> {
    let store = Arc::new(MemStore::new(PAGE).unwrap());
    let config = TreeConfig {
        policy,
        ..TreeConfig::default()
    };
    BTree::create(store, config).unwrap()
}

/// Inserts `n` random keys (with `delete_percent` of the operations
/// deleting a present key instead), checks the tree against a model, and
/// returns it.
fn random_inserts<S: barracuda_btree::PageStore>(
    tree: &BTree<S>,
    n: u32,
    delete_percent: u32,
    seed: u64,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    for i in 0..n {
        if rng.random_range(0..100) < delete_percent && !model.is_empty() {
            let k: Vec<u8> = rng.random_range(0..u32::MAX).to_be_bytes().to_vec();
            let victim = model
                .range(k..)
                .next()
                .map(|(k, _): (&Vec<u8>, _)| k.clone());
            if let Some(victim) = victim {
                assert!(tree.delete(&victim).unwrap());
                model.remove(&victim);
            }
            continue;
        }
        let k = rng.random_range(0..u32::MAX).to_be_bytes().to_vec();
        let v = vec![(i % 251) as u8; 20 + (i as usize * 7919) % 120];
        tree.insert(&k, &v).unwrap();
        model.insert(k, v);
    }
    tree.check_invariants().unwrap();
    assert_eq!(tree.len().unwrap(), model.len() as u64);
    for (k, v) in &model {
        assert_eq!(tree.get(k).unwrap().as_ref(), Some(v));
    }
    let mut scanned = Vec::new();
    tree.scan(Bound::Unbounded, Bound::Unbounded, |k, _| {
        scanned.push(k.to_vec());
        true
    })
    .unwrap();
    assert!(
        scanned.iter().eq(model.keys()),
        "a scan misses or repeats keys"
    );
}

#[test]
fn random_inserts_shift_and_fill_leaves_past_a_middle_split() {
    let adaptive = tree(SplitPolicy::Adaptive);
    random_inserts(&adaptive, 20_000, 0, 1);
    let half = tree(SplitPolicy::Half);
    random_inserts(&half, 20_000, 0, 1);
    let (a, h) = (adaptive.stats().unwrap(), half.stats().unwrap());
    println!(
        "leaf fill: adaptive {:.3} ({} shifts), half {:.3}",
        a.leaf_fill, a.splits.shifts, h.leaf_fill
    );
    assert!(a.splits.shifts > 0, "{:?}", a.splits);
    assert_eq!(h.splits.shifts, 0, "{:?}", h.splits);
    // A middle split gives about ln 2; shifting to siblings with room
    // lifts it well past that.
    assert!(h.leaf_fill < 0.72, "half {}", h.leaf_fill);
    assert!(
        a.leaf_fill > h.leaf_fill + 0.05,
        "adaptive {} half {}",
        a.leaf_fill,
        h.leaf_fill
    );
}

#[test]
fn no_policy_but_adaptive_shifts() {
    for policy in [
        SplitPolicy::Half,
        SplitPolicy::InnoDb,
        SplitPolicy::InnoDbLastInsert,
    ] {
        let t = tree(policy);
        random_inserts(&t, 5_000, 0, 2);
        assert_eq!(t.split_counts().shifts, 0, "{policy:?}");
    }
}

#[test]
fn shifts_with_deletes_mixed_in_keep_the_tree_valid() {
    for seed in 0..4 {
        let t = tree(SplitPolicy::Adaptive);
        random_inserts(&t, 8_000, 30, seed);
        let counts = t.split_counts();
        assert!(counts.shifts > 0, "{counts:?}");
    }
}

#[test]
fn shifts_into_compressed_blocks_keep_every_record() {
    use barracuda_base::{BlockSize, Geometry};
    use barracuda_btree::store::CodecBlocks;
    use barracuda_codec::Codec;
    let geometry = Geometry::new(16 << 10, BlockSize::Kib8).unwrap();
    let fit = CodecBlocks::new(Codec::zlib_default(), geometry).unwrap();
    let store = Arc::new(MemStore::with_fit(16 << 10, fit).unwrap());
    let config = TreeConfig {
        compressed: true,
        ..TreeConfig::default()
    };
    let t = BTree::create(store, config).unwrap();
    // Values of repeated bytes compress well: pages fill by bytes, not by
    // blocks, and shift as uncompressed pages do.
    random_inserts(&t, 12_000, 10, 3);
    let counts = t.split_counts();
    println!("compressed: {counts:?}");
    assert!(counts.shifts > 0, "{counts:?}");
}

/// A `MemStore` that says no page is cached, as a pool says of pages it
/// would have to read from the file.
struct NothingCached(MemStore);

impl PageStore for NothingCached {
    type Shared<'a> = MemShared;
    type Exclusive<'a> = MemExclusive<'a, AlwaysFits>;

    fn page_size_bytes(&self) -> usize {
        self.0.page_size_bytes()
    }
    fn fix_shared(&self, page_id: PageId) -> Result<MemShared> {
        self.0.fix_shared(page_id)
    }
    fn fix_exclusive(&self, page_id: PageId) -> Result<Self::Exclusive<'_>> {
        self.0.fix_exclusive(page_id)
    }
    fn allocate(&self, op: &mut OpContext) -> Result<Self::Exclusive<'_>> {
        self.0.allocate(op)
    }
    fn free(&self, guard: Self::Exclusive<'_>, op: &mut OpContext) -> Result<()> {
        self.0.free(guard, op)
    }
    fn free_page_ids(&self) -> Vec<PageId> {
        self.0.free_page_ids()
    }
    fn would_fit(&self, g: &Self::Exclusive<'_>, image: &[u8], op: &mut OpContext) -> Result<bool> {
        self.0.would_fit(g, image, op)
    }
    fn is_cached(&self, _: PageId) -> bool {
        false
    }
    fn entry_count(&self) -> Result<Option<u64>> {
        self.0.entry_count()
    }
    fn add_entry_count(&self, delta: i64, op: &mut OpContext) -> Result<()> {
        self.0.add_entry_count(delta, op)
    }
    fn set_entry_count(&self, count: u64, op: &mut OpContext) -> Result<()> {
        self.0.set_entry_count(count, op)
    }
}

/// A sibling the store would have to read is not worth a read under the
/// path's latches: no shift, a split instead, and the tree as valid.
#[test]
fn siblings_that_are_not_cached_are_not_shifted_to() {
    let store = Arc::new(NothingCached(MemStore::new(PAGE).unwrap()));
    let t = BTree::create(store, TreeConfig::default()).unwrap();
    random_inserts(&t, 5_000, 10, 4);
    let counts = t.split_counts();
    assert_eq!(counts.shifts, 0, "{counts:?}");
    assert!(counts.half > 0, "{counts:?}");
}
