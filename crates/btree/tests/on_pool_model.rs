//! The model test of `model.rs` on the buffer pool: a state machine against
//! `BTreeMap` (insert, delete, get, range scans in both directions) for every
//! split policy, zlib-compressed (16 KiB -> 8 KiB, 4 KiB -> 2 KiB) and
//! uncompressed pages, and both eviction policies, on a pool of only
//! `BUDGET_PAGES` pages, with the tree's and the pool's `check_invariants()`
//! after every step.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod pool_common;

use barracuda_btree::{PoolStore, SplitPolicy, Tree, TreeConfig};
use barracuda_pool::EvictionPolicy;
use pool_common::Format;
use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use std::collections::BTreeMap;

/// The pool's budget in logical pages: a few dozen, so a tree of more than
/// that many pages evicts constantly (an overflow value of 40 KB alone pins
/// eleven 4 KiB pages while it is written).
const BUDGET_PAGES: usize = 32;

#[derive(Clone, Debug)]
struct Model {
    policy: SplitPolicy,
    format: Format,
    eviction: EvictionPolicy,
    /// Some values are random bytes (see [`IncompressibleMachine`]).
    incompressible: bool,
    map: BTreeMap<Vec<u8>, Vec<u8>>,
}

#[derive(Clone, Debug)]
enum Step {
    Insert(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Get(Vec<u8>),
    ScanForward(Vec<u8>, Vec<u8>),
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

/// Values: mostly small, some near the inline limit, a few overflowing;
/// with `incompressible`, also random bytes, which fill 2 KiB blocks so that
/// commits fail to fit and the pool rolls pages back. (The weights are those
/// the saved regression seed was found with.)
fn value(incompressible: bool) -> BoxedStrategy<Vec<u8>> {
    let random_weight = u32::from(incompressible);
    prop_oneof![
        6 => (any::<u8>(), 0usize..300).prop_map(|(b, n)| vec![b; n]),
        2 => (any::<u8>(), 300usize..2048).prop_map(|(b, n)| vec![b; n]),
        1 => (any::<u8>(), 2049usize..40_000).prop_map(|(b, n)| vec![b; n]),
        random_weight => proptest::collection::vec(any::<u8>(), 0..1500),
    ]
    .boxed()
}

struct ModelMachine;

impl ReferenceStateMachine for ModelMachine {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        (
            prop_oneof![
                Just(SplitPolicy::Half),
                Just(SplitPolicy::InnoDb),
                Just(SplitPolicy::Adaptive),
                Just(SplitPolicy::InnoDbLastInsert)
            ],
            proptest::sample::select(Format::ALL.to_vec()),
            prop_oneof![
                Just(EvictionPolicy::InnoDb),
                Just(EvictionPolicy::CostAware)
            ],
        )
            .prop_map(|(policy, format, eviction)| Model {
                policy,
                format,
                eviction,
                incompressible: false,
                map: BTreeMap::new(),
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Step> {
        let existing: Vec<Vec<u8>> = state.map.keys().cloned().collect();
        let known = if existing.is_empty() {
            key().boxed()
        } else {
            prop_oneof![key(), proptest::sample::select(existing)].boxed()
        };
        prop_oneof![
            8 => (key(), value(state.incompressible)).prop_map(|(k, v)| Step::Insert(k, v)),
            3 => known.clone().prop_map(Step::Delete),
            1 => known.prop_map(Step::Get),
            1 => (key(), key()).prop_map(|(a, b)| Step::ScanForward(a, b)),
            1 => (key(), key()).prop_map(|(a, b)| Step::ScanBackward(a, b)),
        ]
        .boxed()
    }

    fn apply(mut state: Model, step: &Step) -> Model {
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

/// The machine with incompressible values too: the tree's delete path
/// assumes a page that loses bytes still fits its block, which the real
/// codec does not promise (a rebuilt page can compress worse, and a full
/// modification log forces a recompression); see the ignored test below.
struct IncompressibleMachine;

impl ReferenceStateMachine for IncompressibleMachine {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        ModelMachine::init_state()
            .prop_map(|model| Model {
                incompressible: true,
                ..model
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Step> {
        ModelMachine::transitions(state)
    }

    fn apply(state: Model, step: &Step) -> Model {
        <ModelMachine as ReferenceStateMachine>::apply(state, step)
    }
}

struct TreeUnderTest<M> {
    tree: Tree<PoolStore>,
    machine: std::marker::PhantomData<M>,
}

fn scan(tree: &Tree<PoolStore>, lo: &[u8], hi: &[u8], forward: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
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

impl<M: ReferenceStateMachine<State = Model, Transition = Step>> StateMachineTest
    for TreeUnderTest<M>
{
    type SystemUnderTest = Self;
    type Reference = M;

    fn init_test(model: &Model) -> Self {
        let store = pool_common::store(model.format, model.eviction, BUDGET_PAGES);
        let config = TreeConfig {
            policy: model.policy,
            compressed: model.format.compressed(),
            ..TreeConfig::default()
        };
        Self {
            tree: Tree::create(store, config).unwrap(),
            machine: std::marker::PhantomData,
        }
    }

    fn apply(sut: Self, model: &Model, step: Step) -> Self {
        match &step {
            Step::Insert(k, v) => {
                sut.tree.insert(k, v).unwrap();
            }
            Step::Delete(k) => {
                sut.tree.delete(k).unwrap();
            }
            Step::Get(k) => assert_eq!(sut.tree.get(k).unwrap(), model.map.get(k).cloned()),
            Step::ScanForward(lo, hi) | Step::ScanBackward(lo, hi) => {
                let forward = matches!(step, Step::ScanForward(..));
                let got = scan(&sut.tree, lo, hi, forward);
                let mut want: Vec<(Vec<u8>, Vec<u8>)> = if lo < hi {
                    model
                        .map
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

    fn check_invariants(sut: &Self, model: &Model) {
        sut.tree.check_invariants().unwrap();
        let store = sut.tree.store();
        store.check_invariants().unwrap();
        // More pages than the pool holds: some must have been evicted (or,
        // compressed, had their frames dropped).
        if store.page_count() > BUDGET_PAGES as u64 {
            assert!(
                pool_common::evictions(store) > 0,
                "{} pages in a pool of {BUDGET_PAGES} without eviction",
                store.page_count()
            );
        }
        let stats = sut.tree.stats().unwrap();
        assert_eq!(stats.record_count, model.map.len() as u64);
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        max_shrink_iters: 2000,
        .. ProptestConfig::default()
    })]
    #[test]
    fn tree_on_pool_matches_btreemap(sequential 1..300 => TreeUnderTest<ModelMachine>);

    /// Fails today with `CompressionUnfit` on a delete (a tree limitation,
    /// not the pool's: see [`IncompressibleMachine`]; the saved seed's
    /// operations fail the same way on `MemStore` with `CodecBlocks`).
    #[test]
    #[ignore = "known failure: deletes assume a shrinking page still fits its block"]
    fn tree_on_pool_with_incompressible_values(sequential 1..300 => TreeUnderTest<IncompressibleMachine>);
}
