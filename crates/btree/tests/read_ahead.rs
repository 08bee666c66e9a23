//! Read-ahead of forward scans: a store that records `prefetch` hints shows
//! that a scan hints exactly the leaves it then visits, in order, each once,
//! in windows of at most `read_ahead_pages`, across parents; and that point
//! reads, seeks, backward scans and `read_ahead_pages = 0` hint nothing.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use barracuda_base::PageId;
use barracuda_btree::store::{AlwaysFits, MemExclusive, MemShared};
use barracuda_btree::{BTree, MemStore, OpContext, PageStore, Result, TreeConfig, page};
use parking_lot::Mutex;
use std::sync::Arc;

/// A `MemStore` that records every `prefetch` call.
struct Recording {
    inner: MemStore,
    hints: Mutex<Vec<Vec<PageId>>>,
}

impl PageStore for Recording {
    type Shared<'a> = MemShared;
    type Exclusive<'a> = MemExclusive<'a, AlwaysFits>;

    fn page_size_bytes(&self) -> usize {
        self.inner.page_size_bytes()
    }
    fn fix_shared(&self, page_id: PageId) -> Result<MemShared> {
        self.inner.fix_shared(page_id)
    }
    fn fix_exclusive(&self, page_id: PageId) -> Result<Self::Exclusive<'_>> {
        self.inner.fix_exclusive(page_id)
    }
    fn allocate(&self, op: &mut OpContext) -> Result<Self::Exclusive<'_>> {
        self.inner.allocate(op)
    }
    fn free(&self, guard: Self::Exclusive<'_>, op: &mut OpContext) -> Result<()> {
        self.inner.free(guard, op)
    }
    fn free_page_ids(&self) -> Vec<PageId> {
        self.inner.free_page_ids()
    }
    fn would_fit(
        &self,
        guard: &Self::Exclusive<'_>,
        image: &[u8],
        op: &mut OpContext,
    ) -> Result<bool> {
        self.inner.would_fit(guard, image, op)
    }
    fn prefetch(&self, page_ids: &[PageId]) -> usize {
        self.hints.lock().push(page_ids.to_vec());
        0
    }
    fn entry_count(&self) -> Result<Option<u64>> {
        self.inner.entry_count()
    }
    fn add_entry_count(&self, delta: i64, op: &mut OpContext) -> Result<()> {
        self.inner.add_entry_count(delta, op)
    }
    fn set_entry_count(&self, count: u64, op: &mut OpContext) -> Result<()> {
        self.inner.set_entry_count(count, op)
    }
}

const KEYS: u32 = 20_000;
const VALUE_BYTES: usize = 100;

/// A tree of 4 KiB pages with a few hundred leaves under several parents.
fn tree(read_ahead_pages: usize) -> BTree<Recording> {
    let store = Arc::new(Recording {
        inner: MemStore::new(4096).unwrap(),
        hints: Mutex::new(Vec::new()),
    });
    let config = TreeConfig {
        read_ahead_pages,
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config).unwrap();
    for i in 0..KEYS {
        // Scattered order (7919 is prime to KEYS), so leaves are not
        // allocated in key order.
        let k = ((u64::from(i) * 7919 % u64::from(KEYS)) as u32).to_be_bytes();
        tree.insert(&k, &[7u8; VALUE_BYTES]).unwrap();
    }
    tree.store().hints.lock().clear();
    tree
}

/// The leaves in key order, by the sibling links from the leftmost leaf,
/// and the number of level-1 pages (the root must be at level 2).
fn leaves(tree: &BTree<Recording>) -> (Vec<PageId>, usize) {
    let store = tree.store();
    let root = store.fix_shared(tree.root_page_id()).unwrap();
    assert_eq!(page::level(&root), 2, "the test wants a three-level tree");
    let parents = page::record_count(&root);
    let mut id = page::rec_child(&root, page::first_record(&root));
    drop(root);
    loop {
        let g = store.fix_shared(id).unwrap();
        if page::is_leaf(&g) {
            break;
        }
        id = page::rec_child(&g, page::first_record(&g));
    }
    let mut out = Vec::new();
    let mut next = Some(id);
    while let Some(id) = next {
        out.push(id);
        next = page::right(&store.fix_shared(id).unwrap());
    }
    (out, parents)
}

fn hints(tree: &BTree<Recording>) -> Vec<Vec<PageId>> {
    tree.store().hints.lock().clone()
}

#[test]
fn a_full_scan_hints_exactly_the_leaves_it_visits_next() {
    let tree = tree(8);
    let (leaves, parents) = leaves(&tree);
    assert!(leaves.len() > 100, "{} leaves", leaves.len());
    assert!(parents > 1, "one parent: the test would not cross parents");
    let mut c = tree.cursor();
    let mut ok = c.first().unwrap();
    let mut count = 0;
    while ok {
        count += 1;
        ok = c.next().unwrap();
    }
    assert_eq!(count, KEYS);
    let calls = hints(&tree);
    assert!(
        calls.iter().all(|w| !w.is_empty() && w.len() <= 8),
        "{calls:?}"
    );
    let full_windows = calls.iter().filter(|w| w.len() == 8).count();
    assert!(full_windows >= leaves.len() / 8 - 2 * parents, "{calls:?}");
    let hinted: Vec<PageId> = calls.concat();
    // The first move to a new leaf (the second leaf) hints from the third
    // on; then every leaf is hinted once, in scan order.
    assert_eq!(hinted, leaves[2..].to_vec());
    // Windows, not one hint per leaf: one per 8 leaves, plus at each parent
    // boundary a short window (the parent's last children) and two
    // single-leaf hints (by the right links, until a descent again passes
    // through the new parent).
    assert!(
        calls.len() <= leaves.len() / 8 + 3 * parents + 1,
        "{} hints for {} leaves under {parents} parents: {calls:?}",
        calls.len(),
        leaves.len()
    );
}

#[test]
fn a_scan_from_a_seek_hints_the_leaves_after_it() {
    let tree = tree(4);
    let (leaves, _) = leaves(&tree);
    let start = (KEYS / 3).to_be_bytes();
    let mut c = tree.cursor();
    assert!(c.seek(&start).unwrap());
    assert!(hints(&tree).is_empty(), "a seek hinted");
    // Visit the leaves of 40 batches; record which leaves they are.
    let mut visited = Vec::new();
    let store = tree.store();
    for _ in 0..40 * 30 {
        assert!(c.next().unwrap());
        let key = c.key().unwrap().to_vec();
        let leaf = leaves
            .iter()
            .copied()
            .find(|&l| {
                let g = store.fix_shared(l).unwrap();
                page::probe(&g, &key).found != 0
            })
            .unwrap();
        if visited.last() != Some(&leaf) {
            visited.push(leaf);
        }
    }
    let hinted: Vec<PageId> = hints(&tree).concat();
    assert!(hinted.len() >= visited.len() - 2, "hinted {hinted:?}");
    // Hints run ahead of the scan, naming the leaves it visits in order.
    let visited_after = &visited[2..];
    assert_eq!(&hinted[..visited_after.len()], visited_after);
    assert!(hints(&tree).iter().all(|w| w.len() <= 4));
}

#[test]
fn point_reads_seeks_and_backward_scans_hint_nothing() {
    let tree = tree(8);
    for i in (0..KEYS).step_by(97) {
        assert!(tree.get(&i.to_be_bytes()).unwrap().is_some());
    }
    let mut c = tree.cursor();
    assert!(c.seek(&100u32.to_be_bytes()).unwrap());
    let mut ok = c.last().unwrap();
    let mut count = 0;
    while ok {
        count += 1;
        ok = c.prev().unwrap();
    }
    assert_eq!(count, KEYS);
    assert!(hints(&tree).is_empty(), "{:?}", hints(&tree));
}

#[test]
fn zero_disables_read_ahead() {
    let tree = tree(0);
    let mut c = tree.cursor();
    let mut ok = c.first().unwrap();
    while ok {
        ok = c.next().unwrap();
    }
    assert!(hints(&tree).is_empty());
}

#[test]
fn a_visitor_scan_hints_what_a_cursor_hints() {
    let cursor_tree = tree(8);
    let mut c = cursor_tree.cursor();
    let mut ok = c.first().unwrap();
    while ok {
        ok = c.next().unwrap();
    }
    let scan_tree = tree(8);
    let mut count = 0;
    scan_tree
        .scan(
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            |_, _| {
                count += 1;
                true
            },
        )
        .unwrap();
    assert_eq!(count, KEYS);
    let (leaves, _) = leaves(&scan_tree);
    assert_eq!(hints(&scan_tree).concat(), leaves[2..].to_vec());
    assert_eq!(hints(&scan_tree), hints(&cursor_tree));
    // Backward scans hint nothing.
    let before = hints(&scan_tree).len();
    scan_tree
        .scan_rev(
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            |_, _| true,
        )
        .unwrap();
    assert_eq!(hints(&scan_tree).len(), before);
}
