//! The test drivers every store runs, generic over `S: PageStore`:
//!
//! - [`ModelMachine`] / [`TreeUnderTest`]: a state machine against
//!   `BTreeMap` (insert, delete, get, range scans in both directions) for
//!   every split policy, with `check_invariants()` and the record count
//!   after every step. A [`Setup`] says how to build the store for a drawn
//!   variant and what else to check.
//! - [`run_sixteen_threads`]: 16 threads of mixed inserts, deletes, gets and
//!   cursor scans on one tree; each thread owns the keys `n * 16 + thread`,
//!   so neighbouring keys belong to different threads and every page is
//!   shared. The final contents must equal the union of the threads' models.
#![allow(dead_code, reason = "each test binary uses part of this")]
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use barracuda_btree::{BTree, Error, PageStore, SplitPolicy, TreeConfig};
use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

/// Which values the model inserts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    /// Runs of one byte: mostly small, some near the inline limit, a few
    /// overflowing. Every codec squeezes them.
    Compressible,
    /// The same, plus random bytes (up to 1500), which fill compressed
    /// blocks so that commits fail to fit and pages roll back.
    Mixed,
    /// Mostly random bytes, inline and overflowing.
    Incompressible,
}

/// How a model test builds its store.
pub trait Setup: 'static {
    /// The store.
    type Store: PageStore + 'static;
    /// What a case draws besides the split policy (page size, codec, ...).
    type Variant: Clone + Debug + 'static;
    /// The values every case inserts.
    const VALUES: Values;

    /// The variants to draw from.
    fn variants() -> BoxedStrategy<Self::Variant>;

    /// A fresh store, and whether its pages are compressed.
    fn store(variant: &Self::Variant) -> (Arc<Self::Store>, bool);

    /// Checks of the store itself, after every step.
    fn check_store(_store: &Self::Store) {}
}

/// The reference state: the drawn configuration and the map.
#[derive(Clone, Debug)]
pub struct Model<V> {
    policy: SplitPolicy,
    variant: V,
    map: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// One step of a case.
#[derive(Clone, Debug)]
pub enum Step {
    /// Insert or replace.
    Insert(Vec<u8>, Vec<u8>),
    /// Delete (the key may be absent).
    Delete(Vec<u8>),
    /// Point lookup.
    Get(Vec<u8>),
    /// Keys in `lo..hi`, ascending.
    ScanForward(Vec<u8>, Vec<u8>),
    /// Keys in `lo..hi`, descending.
    ScanBackward(Vec<u8>, Vec<u8>),
}

/// Keys from a few shapes: short random, sequential within a group
/// (composite), and long.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (0u8..4, 0u16..400).prop_map(|(g, n)| {
            let mut k = vec![g];
            k.extend_from_slice(&n.to_be_bytes());
            k
        }),
        2 => proptest::collection::vec(any::<u8>(), 0..12),
        1 => (any::<u8>(), 100usize..=512).prop_map(|(b, n)| vec![b; n]),
    ]
}

/// Values of the kind `values` asks for. (The `Mixed` weights are those the
/// saved regression seed of `on_pool_model.rs` was found with.)
fn value(values: Values) -> BoxedStrategy<Vec<u8>> {
    let small = || (any::<u8>(), 0usize..300).prop_map(|(b, n)| vec![b; n]);
    let near_inline = || (any::<u8>(), 300usize..2048).prop_map(|(b, n)| vec![b; n]);
    let overflowing = || (any::<u8>(), 2049usize..40_000).prop_map(|(b, n)| vec![b; n]);
    let runs = || prop_oneof![6 => small(), 2 => near_inline(), 1 => overflowing()];
    let random = |max_bytes: usize| proptest::collection::vec(any::<u8>(), 0..max_bytes);
    match values {
        Values::Compressible => runs().boxed(),
        Values::Mixed => prop_oneof![
            6 => small(),
            2 => near_inline(),
            1 => overflowing(),
            1 => random(1500),
        ]
        .boxed(),
        Values::Incompressible => prop_oneof![
            1 => runs(),
            6 => random(1500),
            2 => random(4000),
            1 => random(20_000),
        ]
        .boxed(),
    }
}

/// The reference machine of a [`Setup`].
pub struct ModelMachine<T>(PhantomData<T>);

impl<T: Setup> ReferenceStateMachine for ModelMachine<T> {
    type State = Model<T::Variant>;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Self::State> {
        (
            prop_oneof![
                Just(SplitPolicy::Half),
                Just(SplitPolicy::InnoDb),
                Just(SplitPolicy::Adaptive),
                Just(SplitPolicy::InnoDbLastInsert)
            ],
            T::variants(),
        )
            .prop_map(|(policy, variant)| Model {
                policy,
                variant,
                map: BTreeMap::new(),
            })
            .boxed()
    }

    fn transitions(state: &Self::State) -> BoxedStrategy<Step> {
        let existing: Vec<Vec<u8>> = state.map.keys().cloned().collect();
        let known = if existing.is_empty() {
            key().boxed()
        } else {
            prop_oneof![key(), proptest::sample::select(existing)].boxed()
        };
        prop_oneof![
            8 => (key(), value(T::VALUES)).prop_map(|(k, v)| Step::Insert(k, v)),
            3 => known.clone().prop_map(Step::Delete),
            1 => known.prop_map(Step::Get),
            1 => (key(), key()).prop_map(|(a, b)| Step::ScanForward(a, b)),
            1 => (key(), key()).prop_map(|(a, b)| Step::ScanBackward(a, b)),
        ]
        .boxed()
    }

    fn apply(mut state: Self::State, step: &Step) -> Self::State {
        match step {
            Step::Insert(k, v) => {
                state.map.insert(k.clone(), v.clone());
            }
            Step::Delete(k) => {
                state.map.remove(k);
            }
            Step::Get(_) | Step::ScanForward(..) | Step::ScanBackward(..) => {}
        }
        state
    }
}

/// The tree under test, with its own copy of the map: an operation that
/// fails with `CompressionUnfit` must have changed nothing, so the tree's
/// map is the reference's map minus the failed operations.
pub struct TreeUnderTest<T: Setup> {
    tree: BTree<T::Store>,
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    failed_op_count: usize,
}

/// Keys in `lo..hi` through a cursor, ascending or descending.
pub fn scan<S: PageStore>(
    tree: &BTree<S>,
    lo: &[u8],
    hi: &[u8],
    forward: bool,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut c = tree.cursor();
    let mut out = Vec::new();
    if forward {
        let mut ok = c.seek(lo).unwrap();
        while ok && c.key().unwrap() < hi {
            out.push(c.entry().unwrap().clone());
            ok = c.next().unwrap();
        }
    } else {
        // Last key < hi: seek_for_prev(hi) then skip hi itself.
        let mut ok = c.seek_for_prev(hi).unwrap();
        if ok && c.key().unwrap() == hi {
            ok = c.prev().unwrap();
        }
        while ok && c.key().unwrap() >= lo {
            out.push(c.entry().unwrap().clone());
            ok = c.prev().unwrap();
        }
    }
    out
}

/// The leftmost leaf of `tree`: first children from the root down.
pub fn leftmost_leaf<S: PageStore>(tree: &BTree<S>) -> barracuda_base::PageId {
    let store = tree.store();
    let mut id = tree.root_page_id();
    loop {
        let g = store.fix_shared(id).unwrap();
        if barracuda_btree::page::is_leaf(&g) {
            return id;
        }
        id = barracuda_btree::page::rec_child(&g, barracuda_btree::page::first_record(&g));
    }
}

/// Every entry of the tree, by a forward scan.
pub fn contents<S: PageStore>(tree: &BTree<S>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut got = BTreeMap::new();
    let mut c = tree.cursor();
    let mut ok = c.first().unwrap();
    while ok {
        let (k, v) = c.entry().unwrap().clone();
        got.insert(k, v);
        ok = c.next().unwrap();
    }
    got
}

impl<T: Setup> TreeUnderTest<T> {
    /// An operation failed: it must be a compression failure of a
    /// compressed tree, and the tree must be exactly as before.
    fn failed(&mut self, what: &str, error: &Error) {
        assert!(
            matches!(error, Error::CompressionUnfit { .. }) && self.tree.config().compressed,
            "{what} failed: {error}"
        );
        self.failed_op_count += 1;
        assert!(
            contents(&self.tree) == self.map,
            "{what} failed ({error}) but changed the tree"
        );
    }
}

impl<T: Setup> StateMachineTest for TreeUnderTest<T> {
    type SystemUnderTest = Self;
    type Reference = ModelMachine<T>;

    fn init_test(model: &Model<T::Variant>) -> Self {
        let (store, compressed) = T::store(&model.variant);
        let config = TreeConfig {
            policy: model.policy,
            compressed,
            ..TreeConfig::default()
        };
        Self {
            tree: BTree::create(store, config).unwrap(),
            map: BTreeMap::new(),
            failed_op_count: 0,
        }
    }

    fn apply(mut sut: Self, _: &Model<T::Variant>, step: Step) -> Self {
        match &step {
            Step::Insert(k, v) => match sut.tree.insert(k, v) {
                Ok(existed) => {
                    assert_eq!(existed, sut.map.insert(k.clone(), v.clone()).is_some());
                }
                Err(e) => sut.failed("insert", &e),
            },
            Step::Delete(k) => match sut.tree.delete(k) {
                Ok(existed) => assert_eq!(existed, sut.map.remove(k).is_some()),
                Err(e) => sut.failed("delete", &e),
            },
            Step::Get(k) => assert_eq!(sut.tree.get(k).unwrap(), sut.map.get(k).cloned()),
            Step::ScanForward(lo, hi) | Step::ScanBackward(lo, hi) => {
                let forward = matches!(step, Step::ScanForward(..));
                let got = scan(&sut.tree, lo, hi, forward);
                let mut want: Vec<(Vec<u8>, Vec<u8>)> = if lo < hi {
                    sut.map
                        .range(lo.clone()..hi.clone())
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                } else {
                    Vec::new()
                };
                if !forward {
                    want.reverse();
                }
                assert!(got == want, "scan {lo:?}..{hi:?} forward={forward}");
            }
        }
        sut
    }

    fn check_invariants(sut: &Self, model: &Model<T::Variant>) {
        sut.tree.check_invariants().unwrap();
        T::check_store(sut.tree.store());
        let stats = sut.tree.stats().unwrap();
        assert_eq!(stats.record_count, sut.map.len() as u64);
        if sut.failed_op_count == 0 {
            assert_eq!(sut.map.len(), model.map.len());
        }
    }
}

/// Threads of the concurrent test.
pub const THREADS: u64 = 16;
const OPS_PER_THREAD: usize = 4_000;
const KEYS_PER_THREAD: u64 = 600;

fn thread_key(n: u64, thread: u64) -> Vec<u8> {
    (n * THREADS + thread).to_be_bytes().to_vec()
}

fn worker<S: PageStore>(tree: &BTree<S>, thread: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(thread);
    let mut model = BTreeMap::new();
    for step in 0..OPS_PER_THREAD {
        let k = thread_key(rng.random_range(0..KEYS_PER_THREAD), thread);
        match rng.random_range(0..100) {
            0..55 => {
                let len = if rng.random_range(0..50) == 0 {
                    5000
                } else {
                    rng.random_range(1..300)
                };
                let v = vec![(step % 251) as u8; len];
                let existed = tree.insert(&k, &v).unwrap();
                assert_eq!(existed, model.insert(k, v).is_some());
            }
            55..85 => {
                assert_eq!(tree.delete(&k).unwrap(), model.remove(&k).is_some());
            }
            85..97 => {
                assert_eq!(tree.get(&k).unwrap(), model.get(&k).cloned());
            }
            _ => scan_is_ordered(tree, &k, rng.random()),
        }
    }
    model
}

/// A short scan from `from`: keys strictly ordered in the scan direction.
fn scan_is_ordered<S: PageStore>(tree: &BTree<S>, from: &[u8], forward: bool) {
    let mut c = tree.cursor();
    let mut ok = if forward {
        c.seek(from).unwrap()
    } else {
        c.seek_for_prev(from).unwrap()
    };
    let mut prev: Option<Vec<u8>> = None;
    for _ in 0..200 {
        if !ok {
            break;
        }
        let k = c.key().unwrap().to_vec();
        if let Some(p) = &prev {
            assert!(if forward { *p < k } else { *p > k }, "scan out of order");
        }
        prev = Some(k);
        ok = if forward {
            c.next().unwrap()
        } else {
            c.prev().unwrap()
        };
    }
}

/// Runs the 16 threads on `tree` (whose pages should be small, for many
/// splits and merges), then checks the invariants, that the contents equal
/// the union of the threads' models, and that the tree split and
/// rebalanced.
pub fn run_sixteen_threads<S: PageStore>(tree: &BTree<S>) {
    let models: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| s.spawn(move || worker(tree, t)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let want: BTreeMap<Vec<u8>, Vec<u8>> = models.into_iter().flatten().collect();
    tree.check_invariants().unwrap();
    let got = contents(tree);
    assert_eq!(got.len(), want.len());
    assert!(got == want);
    let counts = tree.split_counts();
    assert!(counts.half + counts.sequential > 0, "no splits: {counts:?}");
    assert!(
        counts.merges + counts.redistributions > 0,
        "no rebalancing: {counts:?}"
    );
}

// ------------------------------------------------ redb's benchmark workload

/// Rows of redb's benchmark workload: 24-byte random keys, 150-byte random
/// values (both incompressible). Enough rows for a tree of a few hundred
/// leaves, whose leaves split many times over.
pub const RANDOM_ROWS: usize = 20_000;
pub const RANDOM_KEY_BYTES: usize = 24;
pub const RANDOM_VALUE_BYTES: usize = 150;

pub fn random_rows(seed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut bytes = |len: usize| (0..len).map(|_| rng.random()).collect::<Vec<u8>>();
    (0..RANDOM_ROWS)
        .map(|_| (bytes(RANDOM_KEY_BYTES), bytes(RANDOM_VALUE_BYTES)))
        .collect()
}

/// Inserts every row (each must be stored: the values are far below the
/// size limits), then checks the contents and the invariants. Returns the
/// rows' key and value bytes per byte of leaf blocks (leaf pages x block
/// size): how full the compressed leaves are.
pub fn load_random_rows<S: PageStore>(tree: &BTree<S>, block_size_bytes: usize, what: &str) -> f64 {
    let rows = random_rows(RANDOM_ROWS as u64);
    for (i, (k, v)) in rows.iter().enumerate() {
        if let Err(e) = tree.insert(k, v) {
            panic!("{what}: row {i} of {RANDOM_ROWS} refused: {e}");
        }
        if i % 4096 == 0 {
            tree.check_invariants().unwrap();
        }
    }
    tree.check_invariants().unwrap();
    for (k, v) in &rows {
        assert_eq!(tree.get(k).unwrap().as_ref(), Some(v), "{what}");
    }
    let stats = tree.stats().unwrap();
    assert_eq!(stats.record_count, RANDOM_ROWS as u64, "{what}");
    let data_bytes = RANDOM_ROWS * (RANDOM_KEY_BYTES + RANDOM_VALUE_BYTES);
    let block_fill = data_bytes as f64 / (stats.leaf_pages as f64 * block_size_bytes as f64);
    eprintln!(
        "{what}: {} leaves ({:?} per level), data / leaf blocks {block_fill:.3}, \
         leaf fill {:.3}, pad {} B, {:?}",
        stats.leaf_pages, stats.pages_per_level, stats.leaf_fill, stats.zip_pad_bytes, stats.splits
    );
    block_fill
}
