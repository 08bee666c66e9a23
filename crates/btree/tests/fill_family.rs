//! `Adaptive` against the simple policies over the pattern family's
//! parameters: never more than 0.02 of leaf fill below the better of
//! `Half` and `InnoDb`, and every tree passes its invariant check.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use barracuda_btree::pattern::{self, Family, Interleave, KeyShape, StreamOrder, ValueSizes};
use barracuda_btree::{BTree, MemStore, SplitPolicy, TreeConfig};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::sync::Arc;

/// Small pages, so that a few thousand operations make a few hundred
/// leaves and the run stays fast.
const PAGE_BYTES: usize = 4096;
const OPS: usize = 6_000;
/// How far below the better simple policy `Adaptive` may fall.
const TOLERANCE: f64 = 0.02;

fn fill(policy: SplitPolicy, family: &Family) -> f64 {
    let store = Arc::new(MemStore::new(PAGE_BYTES).unwrap());
    let config = TreeConfig {
        policy,
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config).unwrap();
    pattern::apply(&tree, &family.operations()).unwrap();
    tree.check_invariants().unwrap();
    tree.stats().unwrap().leaf_fill
}

fn family() -> impl Strategy<Value = Family> {
    (
        any::<u64>(),
        prop_oneof![1u32..=4, 5u32..=200, 200u32..=5_000, 5_000u32..=100_000],
        prop_oneof![
            Just(KeyShape::Fixed),
            Just(KeyShape::VarPrefix),
            Just(KeyShape::Composite)
        ],
        prop_oneof![
            Just(StreamOrder::Ascending),
            Just(StreamOrder::Descending),
            Just(StreamOrder::Mixed)
        ],
        prop_oneof![
            Just(Interleave::RoundRobin),
            Just(Interleave::Random),
            Just(Interleave::Bursts),
            Just(Interleave::Zipf)
        ],
        0u32..=100,
        prop_oneof![Just(0u32), 0u32..=50],
        prop_oneof![
            (10usize..=300).prop_map(ValueSizes::Fixed),
            Just(ValueSizes::Variable(10, 400))
        ],
        prop_oneof![Just(0u32), 0u32..=50],
    )
        .prop_map(
            |(seed, streams, shape, order, interleave, late, deletes, values, inc)| Family {
                seed,
                ops: OPS,
                streams,
                shape,
                order,
                interleave,
                late_per_mille: late,
                delete_per_mille: deletes,
                values,
                incompressible_percent: inc,
            },
        )
}

proptest! {
    // A fixed seed: the same points on every run, so the suite does not
    // depend on which points a run happens to draw.
    #![proptest_config(Config {
        cases: 24,
        rng_seed: RngSeed::Fixed(0x6669_6c6c),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn adaptive_holds_against_the_simple_policies(family in family()) {
        let half = fill(SplitPolicy::Half, &family);
        let innodb = fill(SplitPolicy::InnoDb, &family);
        let adaptive = fill(SplitPolicy::Adaptive, &family);
        prop_assert!(
            adaptive >= half.max(innodb) - TOLERANCE,
            "{}: adaptive {adaptive:.3}, half {half:.3}, innodb {innodb:.3}",
            family.label()
        );
    }
}

/// The two patterns the split policy was rebuilt for, at a small scale:
/// many per-entity streams with variable-length prefixes, and one
/// ascending stream with late arrivals.
#[test]
fn many_streams_and_late_arrivals_beat_the_simple_policies() {
    for seed in 1..=3 {
        for (streams, shape, late) in [(200, KeyShape::VarPrefix, 0), (1, KeyShape::Fixed, 20)] {
            let family = Family {
                seed,
                ops: 20_000,
                streams,
                shape,
                late_per_mille: late,
                ..Family::default()
            };
            let half = fill(SplitPolicy::Half, &family);
            let innodb = fill(SplitPolicy::InnoDb, &family);
            let adaptive = fill(SplitPolicy::Adaptive, &family);
            assert!(
                adaptive >= half.max(innodb) - TOLERANCE,
                "{}: adaptive {adaptive:.3}, half {half:.3}, innodb {innodb:.3}",
                family.label()
            );
        }
    }
}

/// Long streams at random (TPC-C order keys in small: each stream fills
/// many pages of its own): a stream leaves the small cold part it finds
/// in its page behind once, instead of carrying it to every page it
/// fills, so its pages end nearly full (without that rule, 16 streams
/// reached 0.92 to 0.93).
#[test]
fn long_streams_fill_their_own_pages() {
    for seed in 1..=2 {
        for streams in [4, 16] {
            for shape in [KeyShape::Fixed, KeyShape::Composite] {
                let family = Family {
                    seed,
                    ops: 30_000,
                    streams,
                    shape,
                    ..Family::default()
                };
                let adaptive = fill(SplitPolicy::Adaptive, &family);
                assert!(
                    adaptive >= 0.95,
                    "{}: adaptive {adaptive:.3}",
                    family.label()
                );
            }
        }
    }
}
