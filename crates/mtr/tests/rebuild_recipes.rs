//! Logical changes: on the buffer pool, a split's left page and a merge's
//! page commit as a rebuild recipe of a few bytes per record, where their
//! patches were about half a page, an insert into a leaf commits as its
//! record and a delete as its key (`OpContext::logical`); on the in-memory store (which logs
//! nothing) the same operations commit patches.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod pool_common;

use barracuda_btree::{BTree, LogicalKind, MemStore, OpContext, PageStore, TreeConfig};
use barracuda_pool::EvictionPolicy;
use pool_common::Format;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// What a phase's operations committed.
#[derive(Default, Debug)]
struct Tally {
    /// Commits logged as inserts.
    inserts: u64,
    /// Commits logged as deletes.
    deletes: u64,
    /// Commits logged as recipes.
    recipes: u64,
    /// Their bytes.
    recipe_bytes: usize,
    /// Of the recipes, those of pages the operation did not allocate (a
    /// split's left page, not its new one), and their bytes.
    old_page_recipes: u64,
    old_page_recipe_bytes: usize,
    /// The patch bytes of the other commits.
    patch_bytes: usize,
}

impl Tally {
    fn add(&mut self, op: &OpContext) {
        for page in op.pages() {
            match op.logical(page) {
                Some((LogicalKind::Insert, record)) => {
                    self.inserts += 1;
                    // Flags, key and value lengths, the 16-byte key and
                    // the 150-byte value.
                    assert_eq!(record.len(), 5 + 16 + 150);
                }
                Some((LogicalKind::Delete, key)) => {
                    self.deletes += 1;
                    // Flags, key length and the 16-byte key.
                    assert_eq!(key.len(), 4 + 16);
                }
                Some((LogicalKind::Rebuild, recipe)) => {
                    self.recipes += 1;
                    self.recipe_bytes += recipe.len();
                    if !op.allocated.contains(&page.page_id) {
                        self.old_page_recipes += 1;
                        self.old_page_recipe_bytes += recipe.len();
                    }
                }
                None => self.patch_bytes += op.patches(page).map(|(_, b)| b.len()).sum::<usize>(),
            }
        }
    }
}

/// `steps` random inserts, then deletes of most keys, one operation each:
/// what each phase committed, and the splits and shifts (together) and the
/// merges the tree made.
fn run<S: PageStore>(tree: &BTree<S>, steps: u32) -> (Tally, Tally, u64, u64) {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut keys = Vec::new();
    let (mut inserts, mut deletes) = (Tally::default(), Tally::default());
    for _ in 0..steps {
        let key: [u8; 16] = rng.random();
        let mut op = OpContext::new();
        tree.insert_in(&mut op, &key, &[rng.random(); 150]).unwrap();
        tree.settle_entry_count(&mut op).unwrap();
        inserts.add(&op);
        tree.store().finish_op(op);
        keys.push(key);
    }
    for key in keys.iter().filter(|k| k[0] % 8 != 0) {
        let mut op = OpContext::new();
        assert!(tree.delete_in(&mut op, key).unwrap());
        tree.settle_entry_count(&mut op).unwrap();
        deletes.add(&op);
        tree.store().finish_op(op);
    }
    tree.check_invariants().unwrap();
    let counts = tree.split_counts();
    (
        inserts,
        deletes,
        counts.half + counts.sequential + counts.shifts,
        counts.merges,
    )
}

#[test]
fn splits_and_merges_on_the_pool_log_recipes() {
    for format in [Format::Plain16k, Format::Zlib16k8k] {
        let store = pool_common::store(format, EvictionPolicy::InnoDb, 64);
        let config = TreeConfig {
            compressed: format.compressed(),
            ..TreeConfig::default()
        };
        let tree = BTree::create(Arc::clone(&store), config).unwrap();
        let (inserts, deletes, splits, merges) = run(&tree, 4000);
        assert!(
            splits > 20 && merges > 20,
            "{format:?}: {splits} splits, {merges} merges"
        );
        // Every split rebuilds its left page, every merge the page it keeps.
        assert!(
            inserts.old_page_recipes >= splits,
            "{format:?}: {inserts:?}, {splits} splits"
        );
        assert!(
            deletes.old_page_recipes >= merges,
            "{format:?}: {deletes:?}, {merges} merges"
        );
        // A left page's: three bytes a kept record (a 16 KiB page holds
        // about 90 of these) and the new record whole, where its patches
        // were about half a page.
        let mean = inserts.old_page_recipe_bytes / inserts.old_page_recipes as usize;
        assert!(mean < 600, "{format:?}: {mean} bytes a left page's recipe");
        // Inserts that fit their leaf: every one but those that split it or
        // shift its records to a sibling (those rebuild the leaf).
        assert!(
            inserts.inserts >= 4000 - splits * 2,
            "{format:?}: {inserts:?}, {splits} splits"
        );
        // Deletes that leave their leaf alone or mark it: all but those
        // that merge or redistribute (those rebuild pages).
        assert!(
            deletes.deletes >= 3500 - merges * 4,
            "{format:?}: {deletes:?}"
        );
    }
}

#[test]
fn the_in_memory_store_commits_patches() {
    let tree = BTree::create(
        Arc::new(MemStore::new(16 << 10).unwrap()),
        TreeConfig {
            compressed: false,
            ..TreeConfig::default()
        },
    )
    .unwrap();
    let (inserts, deletes, splits, merges) = run(&tree, 4000);
    assert!(splits > 20 && merges > 20);
    assert_eq!(
        inserts.recipes + deletes.recipes + inserts.inserts + deletes.deletes,
        0
    );
    assert!(inserts.patch_bytes > 0 && deletes.patch_bytes > 0);
}

/// A commit logs a logical change only when it is the page's whole change:
/// an insert after a rebuild in the same commit (or a rebuild after other
/// writes) commits patches.
#[test]
fn a_logical_change_after_others_commits_patches() {
    use barracuda_btree::PageWrite;
    use barracuda_btree::page::{self, HeapOrder, Layout, RecBuf, RecRef};
    use barracuda_btree::recipe;
    let store = pool_common::store(Format::Plain16k, EvictionPolicy::InnoDb, 64);
    let _tree = BTree::create(Arc::clone(&store), TreeConfig::default()).unwrap();
    let layout = Layout::leaf();
    let recs: Vec<RecBuf> = (0..10u8)
        .map(|i| RecBuf {
            key: vec![2 * i],
            flags: 0,
            value: vec![i; 100],
            old_offset: None,
        })
        .collect();
    let rec = RecRef {
        key: &[5],
        flags: 0,
        value: b"v",
    };
    let last = |op: &OpContext| op.logical(op.pages().last().unwrap()).map(|(kind, _)| kind);
    let mut op = OpContext::new();
    let mut g = store.allocate(&mut op).unwrap();
    g.commit(&mut op);
    page::rebuild(&mut g, &layout, &recs, HeapOrder::Key);
    g.commit(&mut op);
    // A rebuild alone: its recipe.
    let recs = page::read_all(&g);
    page::rebuild(&mut g, &layout, &recs[..9], HeapOrder::Kept);
    g.commit(&mut op);
    assert_eq!(last(&op), Some(LogicalKind::Rebuild));
    // An insert alone: its record.
    let pr = page::probe(&g, rec.key);
    recipe::insert_logged(&mut g, pr, rec);
    g.commit(&mut op);
    assert_eq!(last(&op), Some(LogicalKind::Insert));
    // A rebuild, then an insert, in one commit: patches.
    let recs = page::read_all(&g);
    page::rebuild(&mut g, &layout, &recs[1..], HeapOrder::Kept);
    let pr = page::probe(&g, &[7]);
    recipe::insert_logged(&mut g, pr, RecRef { key: &[7], ..rec });
    g.commit(&mut op);
    assert_eq!(last(&op), None);
    assert!(op.pages().last().unwrap().patch_count() > 0);
    // A write, then an insert: patches.
    page::set_flags(&mut g, 1);
    let pr = page::probe(&g, &[9]);
    recipe::insert_logged(&mut g, pr, RecRef { key: &[9], ..rec });
    g.commit(&mut op);
    assert_eq!(last(&op), None);
    store.free(g, &mut op).unwrap();
}
