//! Randomized differential runs against `BTreeMap` for every policy, with the
//! invariant checker after every operation.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use barracuda_btree::{BTree, MemStore, SplitPolicy, TreeConfig};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

fn run(policy: SplitPolicy, page: usize, seed: u64, ops: usize, key_space: u32, big: bool) {
    let store = Arc::new(MemStore::new(page).unwrap());
    let tree = BTree::create(
        store,
        TreeConfig {
            policy,
            ..TreeConfig::default()
        },
    )
    .unwrap();
    let mut model = BTreeMap::new();
    let mut rng = SmallRng::seed_from_u64(seed);
    for step in 0..ops {
        let k: u32 = rng.random_range(0..key_space);
        let key = format!("key{k:08}").into_bytes();
        let r = rng.random_range(0..100);
        if r < 60 {
            let len = if big && rng.random_range(0..10) == 0 {
                rng.random_range(0..3 * page)
            } else {
                rng.random_range(0..200)
            };
            let v: Vec<u8> = (0..len).map(|i| (i as u8) ^ (k as u8)).collect();
            let existed = tree.insert(&key, &v).unwrap();
            assert_eq!(
                existed,
                model.insert(key.clone(), v).is_some(),
                "step {step}"
            );
        } else if r < 90 {
            let existed = tree.delete(&key).unwrap();
            assert_eq!(existed, model.remove(&key).is_some(), "step {step}");
        } else {
            assert_eq!(
                tree.get(&key).unwrap(),
                model.get(&key).cloned(),
                "step {step}"
            );
        }
        if let Err(e) = tree.check_invariants() {
            panic!("step {step}: {e}");
        }
    }
    let mut c = tree.cursor();
    let mut got = Vec::new();
    let mut ok = c.first().unwrap();
    while ok {
        got.push(c.entry().unwrap().clone());
        ok = c.next().unwrap();
    }
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want);
    let mut back = Vec::new();
    let mut ok = c.last().unwrap();
    while ok {
        back.push(c.entry().unwrap().clone());
        ok = c.prev().unwrap();
    }
    back.reverse();
    assert!(back == want);
}

#[test]
fn random_ops_all_policies() {
    for policy in [
        SplitPolicy::Half,
        SplitPolicy::InnoDb,
        SplitPolicy::Adaptive,
    ] {
        for seed in 0..3 {
            run(policy, 4096, seed, 3000, 2000, seed == 2);
        }
    }
}

/// Compressed mode with the stand-in compressor: pages must fit a 2 KiB block
/// out of 4 KiB, so commits fail, pages split on compression failure, and
/// the pad grows.
#[test]
fn compressed_pages_split_on_fit_failure() {
    use barracuda_btree::store::NonZeroBudget;
    let fit = NonZeroBudget {
        block_size_bytes: 2048,
    };
    let store = Arc::new(MemStore::with_fit(4096, fit).unwrap());
    let config = TreeConfig {
        compressed: true,
        ..TreeConfig::default()
    };
    let tree = BTree::create(Arc::clone(&store), config).unwrap();
    let mut model = BTreeMap::new();
    let mut rng = SmallRng::seed_from_u64(7);
    for step in 0..6000 {
        let k = format!("{:06}", rng.random_range(0..3000u32)).into_bytes();
        if rng.random_range(0..4) == 0 {
            assert_eq!(tree.delete(&k).unwrap(), model.remove(&k).is_some());
        } else {
            let v: Vec<u8> = (0..rng.random_range(1..120))
                .map(|_| rng.random_range(1..=255))
                .collect();
            tree.insert(&k, &v).unwrap();
            model.insert(k, v);
        }
        if step % 97 == 0 {
            tree.check_invariants().unwrap();
        }
    }
    tree.check_invariants().unwrap();
    for (k, v) in &model {
        assert_eq!(tree.get(k).unwrap().as_ref(), Some(v));
    }
    let counts = tree.split_counts();
    assert!(counts.compression_failures > 0, "{counts:?}");
    assert!(counts.compression_failure > 0, "{counts:?}");
    assert!(tree.zip_pad_bytes() > 0, "pad never grew: {counts:?}");
    assert!(store.stats().fit_failure_count > 0);
}

/// An insert that does not split writes the record plus a few directory and
/// header bytes, not a memmove of half the page.
#[test]
fn insert_patches_stay_small() {
    use barracuda_btree::OpContext;
    let store = Arc::new(MemStore::new(16384).unwrap());
    let tree = BTree::create(store, TreeConfig::default()).unwrap();
    let mut rng = SmallRng::seed_from_u64(3);
    let value = [5u8; 100];
    let record_bytes = 8 + 8 + value.len();
    let mut total = 0;
    let inserts = 120;
    for _ in 0..inserts {
        let key = rng.random::<u64>().to_be_bytes();
        let mut op = OpContext::new();
        tree.insert_in(&mut op, &key, &value).unwrap();
        let bytes = op.patch_bytes();
        // Record, predecessor link, slot(s), header; a group split shifts at
        // most the directory of ~30 slots.
        assert!(
            bytes <= record_bytes + 160,
            "{bytes} patch bytes for one insert"
        );
        total += bytes;
    }
    assert_eq!(
        tree.stats().unwrap().leaf_pages,
        1,
        "the test must not split"
    );
    let average = total as f64 / f64::from(inserts);
    println!("average patch bytes per random insert: {average:.1} (record {record_bytes})");
    assert!(average < (record_bytes + 40) as f64, "average {average}");
}

/// Real compressed blocks from `barracuda-codec` (zlib, 16 KiB pages in 4 KiB
/// blocks, values of text that compresses about 2:1): patches go to each
/// block's modification log, full logs recompress, pages that no longer fit
/// split, and the pad grows.
#[test]
fn codec_blocks_split_on_compression_failure() {
    use barracuda_base::{BlockSize, Geometry};
    use barracuda_btree::store::CodecBlocks;
    use barracuda_codec::{Codec, sample};
    let geometry = Geometry::new(16 << 10, BlockSize::Kib4).unwrap();
    let fit = CodecBlocks::new(Codec::zlib_default(), geometry).unwrap();
    let store = Arc::new(MemStore::with_fit(16 << 10, fit).unwrap());
    let config = TreeConfig {
        compressed: true,
        ..TreeConfig::default()
    };
    let tree = BTree::create(Arc::clone(&store), config).unwrap();
    let mut text = sample::TextGenerator::compressible(11, 0.5);
    let mut model = BTreeMap::new();
    let mut rng = SmallRng::seed_from_u64(5);
    for i in 0..3000u32 {
        let k = rng.random_range(0..100_000u32).to_be_bytes().to_vec();
        let v = text.generate(60 + (i as usize % 120)).to_vec();
        tree.insert(&k, &v).unwrap();
        model.insert(k, v);
    }
    tree.check_invariants().unwrap();
    for (k, v) in &model {
        assert_eq!(tree.get(k).unwrap().as_ref(), Some(v));
    }
    let counts = tree.split_counts();
    assert!(counts.compression_failure > 0, "{counts:?}");
    assert!(store.stats().fit_failure_count > 0);
    println!(
        "codec blocks: {counts:?}, pad {} bytes",
        tree.zip_pad_bytes()
    );
}

/// Regression (found by the 16-thread test as a page whose record heap ran
/// into its directory): compacting a page to make room rebuilt its
/// directory with smaller groups than it had, so more slots, and a page that
/// had room before the compaction had none after. One nearly full leaf with
/// groups grown by random inserts; then delete one record and insert another
/// of the same size, over and over, so that inserts need compactions while
/// the page is full.
#[test]
fn compaction_never_grows_the_directory() {
    for seed in 0..20 {
        let store = Arc::new(MemStore::new(4096).unwrap());
        let tree = BTree::create(store, TreeConfig::default()).unwrap();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut keys = Vec::new();
        loop {
            let stats = tree.stats().unwrap();
            if stats.leaf_used_bytes > 4096 - 40 {
                break;
            }
            let k = rng.random::<u32>().to_be_bytes();
            tree.insert(&k, &[1u8; 3]).unwrap();
            keys.push(k);
            assert_eq!(tree.stats().unwrap().leaf_pages, 1, "seed {seed} split");
        }
        for _ in 0..300 {
            let i = rng.random_range(0..keys.len());
            tree.delete(&keys[i]).unwrap();
            keys[i] = rng.random::<u32>().to_be_bytes();
            tree.insert(&keys[i], &[2u8; 3]).unwrap();
            tree.check_invariants().unwrap();
        }
    }
}

/// An ascending run splits at its insertion point (pages left full), unless
/// the operation asks for half splits: a writer that sorted random keys
/// itself must not leave the full pages of a sequential load behind.
#[test]
fn half_splits_override_the_split_policy() {
    for half_splits in [false, true] {
        let store = Arc::new(MemStore::new(4096).unwrap());
        let tree = BTree::create(Arc::clone(&store), TreeConfig::default()).unwrap();
        let mut op = barracuda_btree::OpContext::new();
        op.half_splits = half_splits;
        for i in 0..3000u32 {
            tree.insert_in(&mut op, &i.to_be_bytes(), &[7; 40]).unwrap();
        }
        tree.settle_entry_count(&mut op).unwrap();
        tree.check_invariants().unwrap();
        let counts = tree.split_counts();
        assert!(counts.half + counts.sequential > 20, "{counts:?}");
        if half_splits {
            assert_eq!(counts.sequential, 0, "{counts:?}");
        } else {
            assert!(counts.sequential > counts.half, "{counts:?}");
        }
        for i in (0..3000u32).step_by(7) {
            assert_eq!(tree.get(&i.to_be_bytes()).unwrap(), Some(vec![7; 40]));
        }
    }
}
