//! Limits through the public API: every value a tree accepts is stored
//! whole, whatever the page size, block size, codec, value length and
//! compressibility; every valid write is stored, never refused because its
//! data does not compress; and the documented limits are the ones enforced,
//! with refusals that leave the database usable.
//!
//! Regressions: a 64 KiB page's overflow page of a full body stored its
//! heap top (65,536) in 16 bits as 0, so values above 65,448 bytes read back
//! short; random values replaced in place filled a leaf's heap with the
//! old values' bytes until the leaf no longer compressed into its block,
//! and a leaf of one record could not split, so the put was refused with
//! `CompressionUnfit`.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;

use barracuda::{BlockSize, Compression, Db, Durability, TreeOptions};
use common::tempdir;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

const PAGE_SIZES_BYTES: [usize; 5] = [4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10];

/// Every codec, and for the compressed ones the smallest block and the
/// largest below the page.
fn geometries(page_size_bytes: usize) -> Vec<TreeOptions> {
    let base = TreeOptions::default().page_size_bytes(page_size_bytes);
    let largest = match page_size_bytes {
        4096 => BlockSize::Kib2,
        8192 => BlockSize::Kib4,
        16384 => BlockSize::Kib8,
        _ => BlockSize::Kib16,
    };
    let mut out = vec![base.clone().compression(Compression::None)];
    for compression in [
        Compression::Zlib { level: 6 },
        Compression::Zstd { level: 3 },
    ] {
        for block in [BlockSize::Kib1, largest] {
            out.push(base.clone().compression(compression).block_size(block));
        }
    }
    out
}

fn db_options() -> barracuda::Options {
    Db::options()
        .buffer_pool_bytes(64 << 20)
        .log_bytes(64 << 20)
        .durability(Durability::NoSync)
}

/// A value of `len` bytes: random, or a compressible pattern.
fn value(rng: &mut SmallRng, len: usize, compressible: bool) -> Vec<u8> {
    if compressible {
        (0..len)
            .map(|i| b"barracuda-value-"[i % 16] ^ (i / 1000) as u8)
            .collect()
    } else {
        (0..len).map(|_| rng.random()).collect()
    }
}

/// Lengths around every boundary a value meets in a page of
/// `page_size_bytes`: empty, the inline limit (an eighth of the page), one
/// overflow page's payload (the page less its 88-byte header), whole pages
/// and multiples, the 16-bit limits, and values of several 64 KiB pages.
fn lengths(page_size_bytes: usize) -> Vec<usize> {
    let mut out = vec![0, 1, 65_535, 65_536, 70_000, 200_000];
    let mut around = |centre: usize| {
        for d in [0, 1, 3] {
            out.push(centre + d);
            out.push(centre.saturating_sub(d));
        }
    };
    around(page_size_bytes / 8);
    for k in 1..=3 {
        around(k * page_size_bytes);
        around(k * (page_size_bytes - 88));
    }
    around(65_448);
    for bit in [4, 8, 12, 13, 14, 15, 16, 17] {
        for len in [(1 << bit) - 1, 1 << bit, (1 << bit) + 1] {
            out.push(len);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

fn key(i: usize) -> Vec<u8> {
    format!("value{i:05}").into_bytes()
}

/// Every length in `options`' tree: put, read, overwrite with another
/// length, delete every third, check, reopen, read and check again.
fn lengths_in(options: &TreeOptions, seed: u64) {
    let page_size_bytes = options_page_size(options);
    let dir = tempdir();
    let mut rng = SmallRng::seed_from_u64(seed);
    let lens = lengths(page_size_bytes);
    let mut model = BTreeMap::new();
    {
        let db = db_options().open(dir.path()).unwrap();
        let tree = db.create_tree("t", options.clone()).unwrap();
        let mut put = |i: usize, len: usize, model: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
            let v = value(&mut rng, len, i.is_multiple_of(2));
            if let Err(e) = tree.put(&key(i), &v) {
                panic!("{options:?}: put of {len} bytes refused: {e}");
            }
            let back = tree.get(&key(i)).unwrap();
            assert!(
                back.as_ref() == Some(&v),
                "{options:?}: {len} bytes read back differ"
            );
            model.insert(key(i), v);
        };
        for (i, &len) in lens.iter().enumerate() {
            put(i, len, &mut model);
        }
        for (i, &len) in lens.iter().rev().enumerate() {
            put(i, len, &mut model);
        }
        for i in (0..lens.len()).step_by(3) {
            assert!(tree.delete(&key(i)).unwrap());
            model.remove(&key(i));
        }
        tree.check().unwrap();
        db.check().unwrap();
        db.close().unwrap();
    }
    let db = db_options().open(dir.path()).unwrap();
    let tree = db.open_tree("t").unwrap();
    db.check().unwrap();
    let all: BTreeMap<_, _> = tree.iter().map(Result::unwrap).collect();
    assert!(all == model, "{options:?}: contents differ after reopen");
    for (k, v) in &model {
        assert!(tree.get(k).unwrap().as_ref() == Some(v));
    }
}

fn options_page_size(options: &TreeOptions) -> usize {
    // TreeOptions keeps its fields private; its Debug output names them.
    let debug = format!("{options:?}");
    let at = debug.find("page_size_bytes: ").unwrap() + "page_size_bytes: ".len();
    debug[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn every_value_length_in_every_geometry() {
    for (p, &page_size_bytes) in PAGE_SIZES_BYTES.iter().enumerate() {
        for (g, options) in geometries(page_size_bytes).iter().enumerate() {
            lengths_in(options, (p * 16 + g) as u64);
        }
    }
}

/// The first report: a 70,000-byte value in 64 KiB pages read back as 4,552
/// bytes, also after a reopen.
#[test]
fn a_value_above_one_64k_page_reads_back_whole() {
    let dir = tempdir();
    let v = vec![0x41; 70_000];
    {
        let db = db_options().open(dir.path()).unwrap();
        let tree = db
            .create_tree("t", TreeOptions::default().page_size_bytes(64 << 10))
            .unwrap();
        tree.put(b"k", &v).unwrap();
        assert!(tree.get(b"k").unwrap() == Some(v.clone()));
        db.close().unwrap();
    }
    let db = db_options().open(dir.path()).unwrap();
    let tree = db.open_tree("t").unwrap();
    assert!(tree.get(b"k").unwrap() == Some(v));
    db.check().unwrap();
}

/// Random puts, overwrites and deletes of random values (0..4 KiB, so
/// inline and overflowed, never compressible) over `key_space` keys; no
/// write may be refused, and the tree must equal a `BTreeMap` model.
fn random_writes(options: TreeOptions, key_space: usize, ops: usize, seed: u64) {
    let dir = tempdir();
    let db = db_options().open(dir.path()).unwrap();
    let tree = db.create_tree("t", options.clone()).unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    for i in 0..ops {
        let k = format!("k{:06}", rng.random_range(0..key_space)).into_bytes();
        if rng.random_range(0..8) == 0 {
            let existed = tree.delete(&k).unwrap_or_else(|e| {
                panic!("{options:?}, {key_space} keys: delete {i} refused: {e}")
            });
            assert_eq!(existed, model.remove(&k).is_some());
        } else {
            let len = rng.random_range(0..4096);
            let v = value(&mut rng, len, false);
            if let Err(e) = tree.put(&k, &v) {
                panic!("{options:?}, {key_space} keys: put {i} of {len} bytes refused: {e}");
            }
            model.insert(k, v);
        }
    }
    tree.check().unwrap();
    let all: BTreeMap<_, _> = tree.iter().map(Result::unwrap).collect();
    assert!(
        all == model,
        "{options:?}, {key_space} keys: contents differ"
    );
    assert_eq!(tree.len().unwrap(), model.len() as u64);
}

/// The second report: 250 keys of a default tree overwritten with random
/// values of 0.7 to 1.6 KB were refused after a few hundred puts.
#[test]
fn incompressible_overwrites_of_a_default_tree_are_stored() {
    let dir = tempdir();
    let db = db_options().open(dir.path()).unwrap();
    let tree = db.create_tree("t", TreeOptions::default()).unwrap();
    let mut rng = SmallRng::seed_from_u64(250);
    let mut model = BTreeMap::new();
    for i in 0..5_000 {
        let k = format!("key{:04}", rng.random_range(0..250)).into_bytes();
        let len = rng.random_range(700..1600);
        let v = value(&mut rng, len, false);
        if let Err(e) = tree.put(&k, &v) {
            panic!("put {i} refused: {e}");
        }
        model.insert(k, v);
    }
    tree.check().unwrap();
    let all: BTreeMap<_, _> = tree.iter().map(Result::unwrap).collect();
    assert!(all == model);
}

/// [`random_writes`] in every geometry of `page_size_bytes` with a
/// compressed codec, over small to large key spaces.
fn random_writes_in(page_size_bytes: usize) {
    for (g, options) in geometries(page_size_bytes).into_iter().skip(1).enumerate() {
        for (s, key_space) in [8, 250, 5_000].into_iter().enumerate() {
            let seed = (page_size_bytes + g * 8 + s) as u64;
            random_writes(options.clone(), key_space, 800, seed);
        }
    }
}

#[test]
fn random_writes_of_incompressible_values_are_all_stored_4k() {
    random_writes_in(4 << 10);
}

#[test]
fn random_writes_of_incompressible_values_are_all_stored_16k() {
    random_writes_in(16 << 10);
}

#[test]
fn random_writes_of_incompressible_values_are_all_stored_64k() {
    random_writes_in(64 << 10);
}

/// The third report: values above about 7.96 MiB were refused as a batch
/// too large though the documented limit was 16 MiB. The limit is now
/// `VALUE_BYTES_MAX` (8 MiB), and every value up to it is stored with the
/// default options, also when it replaces another of the same size.
#[test]
fn values_up_to_the_limit_are_stored_with_the_default_options() {
    let max = barracuda::VALUE_BYTES_MAX;
    let dir = tempdir();
    let db = Db::options()
        .durability(Durability::NoSync)
        .open(dir.path())
        .unwrap();
    let tree = db.create_tree("t", TreeOptions::default()).unwrap();
    let mut rng = SmallRng::seed_from_u64(8);
    // Random values replace random values of the limit's size twice, so
    // that the second frees pages the first wrote (not yet in the data
    // file, so logged as images).
    for (i, (len, compressible)) in [
        (max, false),
        (max, false),
        (max, true),
        (max - 1, false),
        (max / 2 + 3, false),
    ]
    .into_iter()
    .enumerate()
    {
        let v = value(&mut rng, len, compressible);
        if let Err(e) = tree.put(b"k", &v) {
            panic!("put {i} of {len} bytes refused: {e}");
        }
        assert!(tree.get(b"k").unwrap() == Some(v));
    }
    let too_long = vec![0u8; max + 1];
    let err = tree.put(b"k", &too_long).unwrap_err();
    assert!(
        matches!(err, barracuda::Error::ValueTooLong { .. }),
        "{err}"
    );
    assert!(tree.delete(b"k").unwrap());
    tree.check().unwrap();
    db.check().unwrap();
}

/// With small pools (1, 4 and 16 MiB), values from empty to the limit
/// replace each other: each put is stored, or refused with
/// `WriteTooLarge` before anything changes, after which the old value
/// reads back and the next valid write is accepted. Regression: a 5 MiB
/// value over a 4 MiB one ran the pool out of pages halfway, the database
/// then refused every write and reads of the key said "page corrupted".
#[test]
fn small_pools_store_or_refuse_each_write_cleanly() {
    let trees = [
        TreeOptions::default(),
        TreeOptions::default()
            .compression(Compression::Zstd { level: 3 })
            .block_size(BlockSize::Kib4),
        TreeOptions::default().compression(Compression::None),
    ];
    for (p, pool_bytes) in [1usize << 20, 4 << 20, 16 << 20].into_iter().enumerate() {
        for (t, tree_options) in trees.iter().enumerate() {
            pool_writes(pool_bytes, tree_options, (p * 8 + t) as u64);
        }
    }
}

fn pool_writes(pool_bytes: usize, tree_options: &TreeOptions, seed: u64) {
    let max = barracuda::VALUE_BYTES_MAX;
    {
        let dir = tempdir();
        let options = Db::options()
            .buffer_pool_bytes(pool_bytes)
            .durability(Durability::NoSync);
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let (mut stored, mut refused) = (0, 0);
        {
            let db = options.clone().open(dir.path()).unwrap();
            let tree = db.create_tree("t", tree_options.clone()).unwrap();
            let lens = [
                0,
                100,
                5_000,
                50_000,
                200_000,
                1 << 20,
                4 << 20,
                5 << 20,
                3 << 20,
                max,
                700_000,
                max,
                0,
            ];
            for (i, &len) in lens.iter().enumerate() {
                let k = format!("big{}", i % 2).into_bytes();
                let v = value(&mut rng, len, (i as u64 + seed).is_multiple_of(2));
                match tree.put(&k, &v) {
                    Ok(_) => {
                        stored += 1;
                        model.insert(k.clone(), v);
                    }
                    Err(barracuda::Error::WriteTooLarge { .. }) => refused += 1,
                    Err(e) => {
                        panic!("{pool_bytes}-byte pool, {tree_options:?}: put of {len} bytes: {e}")
                    }
                }
                assert!(
                    tree.get(&k).unwrap().as_ref() == model.get(&k),
                    "{pool_bytes}-byte pool: after the put of {len} bytes"
                );
                // The next valid write is accepted.
                let small = format!("small{i}").into_bytes();
                tree.put(&small, b"after").unwrap();
                model.insert(small, b"after".to_vec());
            }
            // A delete of a value too large to free at once is refused
            // as cleanly.
            for k in [b"big0".to_vec(), b"big1".to_vec()] {
                match tree.delete(&k) {
                    Ok(existed) => {
                        assert_eq!(existed, model.remove(&k).is_some());
                    }
                    Err(barracuda::Error::WriteTooLarge { .. }) => {}
                    Err(e) => panic!("{pool_bytes}-byte pool: delete: {e}"),
                }
            }
            tree.check().unwrap();
            db.close().unwrap();
        }
        eprintln!("{pool_bytes}-byte pool, {tree_options:?}: {stored} stored, {refused} refused");
        assert!(stored > 0);
        let db = options.open(dir.path()).unwrap();
        let tree = db.open_tree("t").unwrap();
        db.check().unwrap();
        let all: BTreeMap<_, _> = tree.iter().map(Result::unwrap).collect();
        assert!(all == model, "{pool_bytes}-byte pool: contents differ");
    }
}

/// A batch that replaces or deletes long values frees their overflow pages,
/// which stay in the pool until the batch is logged, as its new pages do:
/// it is stored whole, or refused before it changes anything, and the
/// database stays usable either way. Over pools of 2 to 40 MiB, batches
/// of 1 to 12 long values of 300 KB and 3 MB, deletes and overwrites.
#[test]
fn batches_that_free_long_values_are_stored_or_refused_cleanly() {
    let mut rng = SmallRng::seed_from_u64(0xba7c);
    let (mut stored, mut refused) = (0, 0);
    // Values of 300 KB in pools of 2 to 16 MiB, and ten times larger in a
    // pool ten times larger.
    let cases = [
        (2usize << 20, 300_000),
        (4 << 20, 300_000),
        (16 << 20, 300_000),
        (40 << 20, 3_000_000),
    ];
    for (pool_bytes, value_len) in cases {
        for values in [1usize, 4, 12] {
            for overwrite in [false, true] {
                let (dir, db, tree) = small_pool_tree(pool_bytes);
                let mut model = BTreeMap::new();
                for i in 0..values {
                    let v = value(&mut rng, value_len, false);
                    // Each long value alone fits (or is refused up front).
                    if tree.put(&key(i), &v).is_ok() {
                        model.insert(key(i), v);
                    }
                }
                let mut batch = barracuda::WriteBatch::new();
                let mut after = model.clone();
                for i in 0..values {
                    if overwrite {
                        batch.put(&tree, &key(i), b"short");
                        after.insert(key(i), b"short".to_vec());
                    } else {
                        batch.delete(&tree, &key(i));
                        after.remove(&key(i));
                    }
                }
                let label =
                    format!("{pool_bytes}-byte pool, {values} values, overwrite {overwrite}");
                match db.write(batch) {
                    Ok(()) => {
                        stored += 1;
                        model = after;
                    }
                    Err(
                        barracuda::Error::BatchTooLarge { .. }
                        | barracuda::Error::WriteTooLarge { .. },
                    ) => refused += 1,
                    Err(e) => panic!("{label}: {e}"),
                }
                // Usable: the next write is accepted, and reads agree.
                tree.put(b"next", b"write").unwrap();
                model.insert(b"next".to_vec(), b"write".to_vec());
                let all: BTreeMap<_, _> = tree.iter().map(Result::unwrap).collect();
                assert!(all == model, "{label}: contents differ");
                db.close().unwrap();
                let db = Db::open(dir.path()).unwrap();
                let tree = db.open_tree("t").unwrap();
                let all: BTreeMap<_, _> = tree.iter().map(Result::unwrap).collect();
                assert!(all == model, "{label}: contents differ after reopen");
                db.check().unwrap();
            }
        }
    }
    // The family holds both outcomes: it tests the bound, not one side.
    assert!(
        stored > 0 && refused > 0,
        "{stored} stored, {refused} refused"
    );
}

/// A chunked writer's parts are sized by their new pages; the long values
/// its deletes and overwrites free are found when a part is applied, and a
/// part refused for them is applied in halves: every operation is applied,
/// in a pool a fraction of the values' size.
#[test]
fn a_chunked_writer_frees_long_values_in_a_small_pool() {
    let mut rng = SmallRng::seed_from_u64(0xc4a1);
    for overwrite in [false, true] {
        let (_dir, db, tree) = small_pool_tree(4 << 20);
        for i in 0..40 {
            tree.put(&key(i), &value(&mut rng, 300_000, false)).unwrap();
        }
        let mut writer = db.chunked_writer();
        for i in 0..40 {
            if overwrite {
                writer.put(&tree, &key(i), b"short").unwrap();
            } else {
                writer.delete(&tree, &key(i)).unwrap();
            }
        }
        writer.finish().unwrap();
        let all: Vec<_> = tree.iter().map(Result::unwrap).collect();
        if overwrite {
            assert_eq!(all.len(), 40);
            assert!(all.iter().all(|(_, v)| v == b"short"));
        } else {
            assert!(all.is_empty(), "{} left", all.len());
        }
        db.check().unwrap();
    }
}

/// Threads that overwrite the same keys with long and short values in a
/// small pool: each put is stored or refused up front, never failed midway
/// (which would leave the database refusing writes). The size of the value
/// a put replaces is checked under the write mutex, so a concurrent
/// overwrite cannot slip a longer one in between the check and the put.
#[test]
fn concurrent_overwrites_of_long_values_are_stored_or_refused_cleanly() {
    let (_dir, db, tree) = small_pool_tree(4 << 20);
    let (stored, refused) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..3u64)
            .map(|t| {
                let tree = tree.clone();
                scope.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    let (mut stored, mut refused) = (0, 0);
                    for _ in 0..60 {
                        let len = *[10, 300_000, 900_000, 1_500_000]
                            .get(rng.random_range(0..4))
                            .unwrap();
                        let k = key(rng.random_range(0..2));
                        match tree.put(&k, &value(&mut rng, len, false)) {
                            Ok(_) => stored += 1,
                            Err(barracuda::Error::WriteTooLarge { .. }) => refused += 1,
                            Err(e) => panic!("thread {t}: put of {len} bytes: {e}"),
                        }
                    }
                    (stored, refused)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    eprintln!("{stored} stored, {refused} refused");
    // 1.5 MB of random bytes alone needs more than half the pool: both
    // outcomes happen whatever the interleaving.
    assert!(
        stored > 0 && refused > 0,
        "{stored} stored, {refused} refused"
    );
    tree.put(b"next", b"write").unwrap();
    db.check().unwrap();
}

/// A database of a `pool_bytes` pool and `NoSync` writes, with one default
/// tree "t".
fn small_pool_tree(pool_bytes: usize) -> (tempfile::TempDir, Db, barracuda::Tree) {
    let dir = tempdir();
    let db = Db::options()
        .buffer_pool_bytes(pool_bytes)
        .durability(Durability::NoSync)
        .open(dir.path())
        .unwrap();
    let tree = db.create_tree("t", TreeOptions::default()).unwrap();
    (dir, db, tree)
}
