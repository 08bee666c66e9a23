//! Deterministic runs on real zlib blocks (`CodecBlocks`) with random
//! (incompressible) and mixed values and many deletes: commits fail to fit,
//! pages split on compression failure, deletes meet pages that no longer
//! compress into their blocks and rebalances that would not fit. Every
//! operation must complete, or fail with `CompressionUnfit` having changed
//! nothing; the contents must match a `BTreeMap` and `check_invariants()`
//! must pass after every step.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;
mod pool_common;

use barracuda_base::{BlockSize, Geometry};
use barracuda_btree::store::CodecBlocks;
use barracuda_btree::{BTree, Error, MemStore, PageStore, SplitPolicy, TreeConfig};
use barracuda_codec::Codec;
use barracuda_pool::EvictionPolicy;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Steps per run: enough for a tree of a few levels on 2 KiB blocks.
const STEPS: usize = 3_000;

/// Outcome counts of one run.
#[derive(Debug, Default)]
struct Counts {
    failed_ops: usize,
    deletes: usize,
}

fn random_value(rng: &mut SmallRng, random_percent: u32, page_size_bytes: usize) -> Vec<u8> {
    let len = match rng.random_range(0..20) {
        0 => rng.random_range(page_size_bytes / 8..3 * page_size_bytes),
        1..5 => rng.random_range(200..page_size_bytes / 8),
        _ => rng.random_range(0..200),
    };
    if rng.random_range(0..100) < random_percent {
        (0..len).map(|_| rng.random()).collect()
    } else {
        vec![rng.random(); len]
    }
}

fn run(page_size_bytes: usize, block: BlockSize, random_percent: u32, seed: u64) -> Counts {
    let geometry = Geometry::new(page_size_bytes, block).unwrap();
    let fit = CodecBlocks::new(Codec::zlib_default(), geometry).unwrap();
    let store = Arc::new(MemStore::with_fit(page_size_bytes, fit).unwrap());
    let policy = [
        SplitPolicy::Adaptive,
        SplitPolicy::Half,
        SplitPolicy::InnoDb,
    ][seed as usize % 3];
    let config = TreeConfig {
        policy,
        compressed: true,
        ..TreeConfig::default()
    };
    let tree = BTree::create(Arc::clone(&store), config).unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    let mut counts = Counts::default();
    for step in 0..STEPS {
        // A small key space, so deletes hit and pages empty out again.
        let k = rng.random_range(0..400u32).to_be_bytes().to_vec();
        let delete = rng.random_range(0..100) < 40;
        let result = if delete {
            counts.deletes += 1;
            tree.delete(&k).map(|existed| {
                assert_eq!(existed, model.remove(&k).is_some(), "step {step}");
            })
        } else {
            let v = random_value(&mut rng, random_percent, page_size_bytes);
            tree.insert(&k, &v).map(|existed| {
                assert_eq!(existed, model.insert(k.clone(), v).is_some(), "step {step}");
            })
        };
        if let Err(e) = result {
            assert!(
                matches!(e, Error::CompressionUnfit { .. }),
                "step {step}: {e}"
            );
            counts.failed_ops += 1;
            assert!(
                common::contents(&tree) == model,
                "step {step}: failed op changed the tree"
            );
        }
        if let Err(e) = tree.check_invariants() {
            panic!("step {step}: {e}");
        }
        assert_eq!(tree.get(&k).unwrap(), model.get(&k).cloned(), "step {step}");
    }
    assert!(common::contents(&tree) == model);
    let splits = tree.split_counts();
    assert!(
        store.stats().fit_failure_count > 0,
        "no commit failed to fit"
    );
    assert!(splits.compression_failures > 0, "{splits:?}");
    eprintln!(
        "{page_size_bytes} / {block:?}, {random_percent}% random, seed {seed}: {counts:?}, {splits:?}"
    );
    counts
}

#[test]
fn zlib_4k_in_2k_incompressible() {
    for seed in 0..3 {
        run(4 << 10, BlockSize::Kib2, 90, seed);
    }
}

#[test]
fn zlib_4k_in_2k_mixed() {
    for seed in 0..3 {
        run(4 << 10, BlockSize::Kib2, 30, seed);
    }
}

#[test]
fn zlib_16k_in_8k_incompressible() {
    for seed in 0..2 {
        run(16 << 10, BlockSize::Kib8, 90, seed);
    }
}

#[test]
fn zlib_16k_in_4k_mixed() {
    for seed in 0..2 {
        run(16 << 10, BlockSize::Kib4, 30, seed);
    }
}

// ------------------------------------------------ redb's benchmark workload

/// Rows of redb's benchmark workload: 24-byte random keys, 150-byte random
/// values (both incompressible). Enough rows for a tree of a few hundred
/// leaves, whose leaves split many times over.
const RANDOM_ROWS: usize = 20_000;
const RANDOM_KEY_BYTES: usize = 24;
const RANDOM_VALUE_BYTES: usize = 150;

fn random_rows(seed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
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
fn load_random_rows<S: PageStore>(tree: &BTree<S>, block_size_bytes: usize, what: &str) -> f64 {
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

fn random_rows_on_codec_blocks(block: BlockSize, policy: SplitPolicy) -> f64 {
    let page_size_bytes = 16 << 10;
    let geometry = Geometry::new(page_size_bytes, block).unwrap();
    let fit = CodecBlocks::new(Codec::zlib_default(), geometry).unwrap();
    let store = Arc::new(MemStore::with_fit(page_size_bytes, fit).unwrap());
    let config = TreeConfig {
        policy,
        compressed: true,
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config).unwrap();
    let what = format!("codec blocks 16K -> {block:?}, {policy:?}");
    load_random_rows(&tree, geometry.block_size_bytes(), &what)
}

fn random_rows_on_pool(format: pool_common::Format) {
    let (store, codec) = pool_common::store_counting(format, EvictionPolicy::CostAware, 64);
    let config = TreeConfig {
        compressed: true,
        ..TreeConfig::default()
    };
    let block = match format {
        pool_common::Format::Zlib16k8k => BlockSize::Kib8,
        pool_common::Format::Zlib16k4k => BlockSize::Kib4,
        other => panic!("{other:?} is not a 16 KiB compressed format"),
    };
    let tree = BTree::create(store, config).unwrap();
    let block_size_bytes = block.compressed_bytes().unwrap();
    let fill = load_random_rows(&tree, block_size_bytes, &format!("pool {format:?}"));
    let cmp = *codec.snapshot().row(block).unwrap();
    eprintln!(
        "pool {format:?}: {:.2} compressions per row ({} of {} fitted)",
        cmp.compress_ops as f64 / RANDOM_ROWS as f64,
        cmp.compress_ops_ok,
        cmp.compress_ops
    );
    // The pool's fit check compresses afresh, so full right siblings refuse
    // their new link and give records: the path this test is about.
    let splits = tree.split_counts();
    assert!(splits.absorbing > 0, "{splits:?}");
    // Random inserts split at random points: leaves settle near ln 2 of
    // what a block holds (the block keeps 1/16 free for its log).
    assert!(fill > 0.55, "data / leaf blocks {fill:.3}");
}

/// Regression (reported with redb's benchmark workload): 16 KiB pages of
/// random rows compress to about 16 KiB, so a split in two left halves that
/// did not fit an 8 KiB block and inserts failed with `CompressionUnfit`.
#[test]
fn random_rows_16k_in_8k() {
    for policy in [SplitPolicy::Adaptive, SplitPolicy::Half] {
        let fill = random_rows_on_codec_blocks(BlockSize::Kib8, policy);
        assert!(fill > 0.55, "data / leaf blocks {fill:.3}");
    }
    random_rows_on_pool(pool_common::Format::Zlib16k8k);
}

/// The same in blocks of a quarter of the page.
#[test]
fn random_rows_16k_in_4k() {
    let fill = random_rows_on_codec_blocks(BlockSize::Kib4, SplitPolicy::InnoDb);
    assert!(fill > 0.55, "data / leaf blocks {fill:.3}");
    random_rows_on_pool(pool_common::Format::Zlib16k4k);
}

/// Long random keys (400 bytes) make internal pages of a few dozen children,
/// and random rows of them do not compress: every leaf split is a split
/// for a block that no longer fits, at every level, and every row is
/// stored. (With the split points of an earlier `Adaptive`, leaves that
/// ended their parent were also split on their own, next to full leaves
/// under the next parent; no current policy takes that path here, so its
/// count is printed, not asserted.)
#[test]
fn long_random_keys_16k_in_8k() {
    let (store, _) = pool_common::store_counting(
        pool_common::Format::Zlib16k8k,
        EvictionPolicy::CostAware,
        64,
    );
    let config = TreeConfig {
        compressed: true,
        ..TreeConfig::default()
    };
    let tree = BTree::create(store, config).unwrap();
    let mut rng = SmallRng::seed_from_u64(11);
    let mut model = BTreeMap::new();
    for i in 0..LONG_KEY_ROWS {
        let k: Vec<u8> = (0..LONG_KEY_BYTES).map(|_| rng.random()).collect();
        let v: Vec<u8> = (0..RANDOM_VALUE_BYTES).map(|_| rng.random()).collect();
        if let Err(e) = tree.insert(&k, &v) {
            panic!("row {i} refused: {e}");
        }
        model.insert(k, v);
        if i % 500 == 0 {
            tree.check_invariants().unwrap();
        }
    }
    tree.check_invariants().unwrap();
    assert!(common::contents(&tree) == model);
    let stats = tree.stats().unwrap();
    eprintln!(
        "long keys: {:?} per level, {:?}",
        stats.pages_per_level, stats.splits
    );
    assert!(stats.splits.compression_failure > 0, "{:?}", stats.splits);
    assert!(
        stats.pages_per_level.len() >= 3,
        "{:?}",
        stats.pages_per_level
    );
}

const LONG_KEY_ROWS: usize = 6_000;
const LONG_KEY_BYTES: usize = 400;
