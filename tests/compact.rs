//! `Db::compact`: the same entries in fewer pages and a smaller file, for
//! compressed and uncompressed trees; handles and iterators that follow the
//! swap; and a crash after each step reopening to the old or the new tree,
//! complete.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;
use std::collections::BTreeMap;
use std::path::Path;

use barracuda::{CompactStep, Compression, Db, Durability, TreeOptions, WriteBatch};
use common::{half_random_value, key, tempdir};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn options() -> barracuda::Options {
    Db::options()
        .buffer_pool_bytes(4 << 20)
        .log_bytes(16 << 20)
        .durability(Durability::NoSync)
}

fn value(rng: &mut SmallRng, i: u64) -> Vec<u8> {
    let len = rng.random_range(20..300);
    format!("value {i} ").bytes().cycle().take(len).collect()
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// `count` keys inserted in random order, then every other one deleted:
/// leaves half empty and free pages in the file.
fn fill_and_thin(tree: &barracuda::Tree, count: u64, seed: u64) -> Model {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ids: Vec<u64> = (0..count).collect();
    ids.shuffle(&mut rng);
    let mut model = Model::new();
    for i in ids {
        let v = value(&mut rng, i);
        tree.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    for i in (0..count).step_by(2) {
        tree.delete(&key(i)).unwrap();
        model.remove(&key(i));
    }
    model
}

fn assert_same(tree: &barracuda::Tree, model: &Model) {
    let all: Vec<_> = tree.iter().map(Result::unwrap).collect();
    let expected: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all.len(), expected.len());
    assert!(all == expected, "tree differs from the model");
}

/// The tree files of `dir`: data files and their doublewrite files.
fn tree_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tree-"))
        .collect();
    names.sort();
    names
}

fn compacts_and_shrinks(compression: Compression) {
    let dir = tempdir();
    let db = options().open(dir.path()).unwrap();
    let tree = db
        .create_tree("t", TreeOptions::default().compression(compression))
        .unwrap();
    let model = fill_and_thin(&tree, 20_000, 1);
    db.checkpoint().unwrap();
    let leaves_before = tree.stats().unwrap().leaf_pages;
    let options_before = tree.options();
    let stats = db.compact("t").unwrap();
    assert_eq!(stats.entries, model.len() as u64);
    assert!(
        stats.pages_after * 2 < stats.pages_before,
        "pages {stats:?}"
    );
    assert!(
        stats.file_bytes_after < stats.file_bytes_before,
        "{stats:?}"
    );
    let after = tree.stats().unwrap();
    // Deleting half the keys merged some leaves already; the rest were
    // about half full, the rewritten ones are nearly full.
    assert!(
        after.leaf_pages * 4 < leaves_before * 3,
        "leaves {leaves_before} -> {after:?}"
    );
    assert!(after.leaf_fill > 0.9, "fill {}", after.leaf_fill);
    eprintln!(
        "{compression:?}: leaves {leaves_before} -> {}, fill -> {:.2}, {stats:?}",
        after.leaf_pages, after.leaf_fill
    );
    assert_eq!(tree.file_bytes().unwrap(), stats.file_bytes_after);
    assert_eq!(tree.options(), options_before);
    tree.check().unwrap();
    db.check().unwrap();
    assert_same(&tree, &model);
    assert_eq!(tree_files(dir.path()), ["tree-00002.bdb", "tree-00002.dbw"]);
    db.close().unwrap();

    let db = options().open(dir.path()).unwrap();
    db.check().unwrap();
    let tree = db.open_tree("t").unwrap();
    assert_same(&tree, &model);
    tree.put(b"after", b"compaction").unwrap();
    db.close().unwrap();
}

#[test]
fn compact_zlib_tree_keeps_entries_in_fewer_pages() {
    compacts_and_shrinks(Compression::Zlib { level: 6 });
}

#[test]
fn compact_uncompressed_tree_keeps_entries_in_fewer_pages() {
    compacts_and_shrinks(Compression::None);
}

/// A compaction ends with nothing logged after its checkpoint, which
/// deletes the log before it; the log grows again with the writes after
/// it, and those survive a crash.
#[test]
fn a_compaction_gives_the_log_back() {
    let dir = tempdir();
    let log_len = || common::log_bytes(dir.path());
    let db = options().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    // (20,000 made 8 MiB of patches; 4 MiB once inserts and deletes logged
    // their records and keys, and rebuilds their recipes.)
    let mut model = fill_and_thin(&tree, 50_000, 3);
    let before = log_len();
    // The log since the last checkpoint, and the zeros a segment writes
    // ahead of itself.
    assert!(before >= 1 << 20, "a log of {before} bytes before");
    db.compact("t").unwrap();
    let after = log_len();
    assert!(after <= 8192, "a log of {after} bytes after compaction");
    for i in 0..200u64 {
        let k = format!("after {i}").into_bytes();
        tree.put(&k, b"compaction").unwrap();
        model.insert(k, b"compaction".to_vec());
    }
    db.sync().unwrap();
    // The 200 puts log far less than 1 MiB, and a segment writes up to 4
    // MiB of zeros ahead of its end; a background checkpoint meanwhile
    // starts a second segment before it deletes the first. (Not against
    // `before`, only what was logged since the last checkpoint: the
    // background checkpoints make that anything from about 4 MiB up.)
    let grown = log_len();
    assert!(grown > after && grown < after + (9 << 20), "{grown}");
    db.halt();
    let db = options().open(dir.path()).unwrap();
    let tree = db.open_tree("t").unwrap();
    assert_same(&tree, &model);
    db.check().unwrap();
    db.close().unwrap();
}

#[test]
fn compact_empty_tree() {
    let dir = tempdir();
    let db = options().open(dir.path()).unwrap();
    let tree = db.tree("empty").unwrap();
    let stats = db.compact("empty").unwrap();
    assert_eq!(stats.entries, 0);
    assert_eq!(tree.iter().count(), 0);
    tree.check().unwrap();
    tree.put(b"k", b"v").unwrap();
    assert!(matches!(
        db.compact("missing"),
        Err(barracuda::Error::TreeNotFound { .. })
    ));
    db.close().unwrap();
    let db = options().open(dir.path()).unwrap();
    assert_eq!(
        db.open_tree("empty").unwrap().get(b"k").unwrap().unwrap(),
        b"v"
    );
    db.close().unwrap();
}

#[test]
fn handles_and_iterators_follow_the_swap() {
    let dir = tempdir();
    let db = options().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    let other = db.tree("other").unwrap();
    other.put(b"o", b"1").unwrap();
    let mut model = fill_and_thin(&tree, 3000, 2);
    let clone = tree.clone();
    let mut iter = tree.iter();
    let head: Vec<_> = iter.by_ref().take(100).map(Result::unwrap).collect();
    let all = db.compact_all().unwrap();
    assert_eq!(all.len(), 2);
    let rest: Vec<_> = iter.map(Result::unwrap).collect();
    let seen: Vec<_> = head.into_iter().chain(rest).collect();
    let expected: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert!(seen == expected, "an iterator across the swap differs");
    clone.put(b"new", b"value").unwrap();
    model.insert(b"new".to_vec(), b"value".to_vec());
    let mut batch = WriteBatch::new();
    batch.delete(&tree, &key(1));
    batch.put(&other, b"o", b"2");
    db.write(batch).unwrap();
    model.remove(&key(1));
    assert_same(&tree, &model);
    assert_same(&clone, &model);
    assert_eq!(other.get(b"o").unwrap().unwrap(), b"2");
    db.check().unwrap();
    db.close().unwrap();
    let db = options().open(dir.path()).unwrap();
    assert_same(&db.open_tree("t").unwrap(), &model);
    db.close().unwrap();
}

/// A crash right after each step reopens to the old tree (before the
/// catalog names the new one) or the new one, complete; the leftover file
/// is deleted at open; a second compaction and later writes work (the
/// aborted tree's id is reused without its log records being replayed).
#[test]
fn crash_after_each_compaction_step_reopens_old_or_new_tree() {
    let steps = [
        (CompactStep::Formatted, "tree-00001"),
        (CompactStep::FirstBatch, "tree-00001"),
        (CompactStep::Copied, "tree-00001"),
        (CompactStep::Checkpointed, "tree-00001"),
        (CompactStep::CatalogSwapped, "tree-00002"),
    ];
    for (step, file) in steps {
        let dir = tempdir();
        let db = options().open(dir.path()).unwrap();
        let tree = db.tree("t").unwrap();
        let mut model = fill_and_thin(&tree, 4000, 3);
        db.compact_interrupted("t", step).unwrap();
        db.halt();
        drop(tree);

        let db = options().open(dir.path()).unwrap();
        db.check().unwrap();
        assert_eq!(
            tree_files(dir.path()),
            [format!("{file}.bdb"), format!("{file}.dbw")],
            "after {step:?}"
        );
        let tree = db.open_tree("t").unwrap();
        assert_same(&tree, &model);
        tree.put(b"after", b"crash").unwrap();
        model.insert(b"after".to_vec(), b"crash".to_vec());
        // Crash again without a checkpoint: recovery must replay only the
        // write above onto whichever tree has the reused id.
        let reused = db.tree("second").unwrap();
        reused.put(b"s", b"1").unwrap();
        db.sync().unwrap();
        db.halt();
        drop((tree, reused));

        let db = options().open(dir.path()).unwrap();
        db.check().unwrap();
        let tree = db.open_tree("t").unwrap();
        assert_same(&tree, &model);
        let second = db.open_tree("second").unwrap();
        assert_eq!(second.iter().count(), 1, "after {step:?}");
        db.compact("t").unwrap();
        assert_same(&tree, &model);
        db.close().unwrap();
        let db = options().open(dir.path()).unwrap();
        db.check().unwrap();
        assert_same(&db.open_tree("t").unwrap(), &model);
        db.close().unwrap();
    }
}

/// A progress callback that returns false cancels the compaction: the new
/// file is gone, the tree and its file are as they were, writers go on,
/// and a later compaction (and a reopen) work.
#[test]
fn a_compaction_cancelled_by_its_callback_changes_nothing() {
    let dir = tempdir();
    let db = options().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    let mut model = fill_and_thin(&tree, 20_000, 4);
    // Pages allocated since the last checkpoint are not in the file yet; a
    // checkpoint during the compaction would write them and grow it.
    db.checkpoint().unwrap();
    let file_bytes = tree.file_bytes().unwrap();
    let mut calls = 0;
    let cancelled = db.compact_with_progress("t", |copied| {
        calls += 1;
        assert!(copied > 0);
        calls < 2
    });
    assert!(
        matches!(&cancelled, Err(barracuda::Error::CompactionCancelled { name }) if name == "t"),
        "{cancelled:?}"
    );
    assert_eq!(calls, 2, "stopped at the second batch");
    assert_eq!(tree_files(dir.path()), ["tree-00001.bdb", "tree-00001.dbw"]);
    assert_eq!(tree.file_bytes().unwrap(), file_bytes);
    assert_same(&tree, &model);
    tree.put(b"after", b"cancel").unwrap();
    model.insert(b"after".to_vec(), b"cancel".to_vec());
    db.check().unwrap();
    let stats = db.compact("t").unwrap();
    assert_eq!(stats.entries, model.len() as u64);
    assert_same(&tree, &model);
    db.close().unwrap();
    let db = options().open(dir.path()).unwrap();
    assert_same(&db.open_tree("t").unwrap(), &model);
    db.check().unwrap();
}

/// workload 2's records (peers): a random 24-byte key and a value that
/// compresses to about half, about 530 bytes in all once compressed.
fn half_random_record(rng: &mut SmallRng) -> (Vec<u8>, Vec<u8>) {
    let mut key = vec![0; 24];
    rng.fill(&mut key[..]);
    (key, half_random_value(rng))
}

/// A compaction packs a compressed tree: each leaf holds what its block
/// can, with no room kept for the modification log. Fifteen of these
/// records fit an 8 KiB block (15 x 530 bytes) but not with the 512-byte log
/// reserve, so an unpacked copy holds 14 per leaf (measured: 3,000 records
/// in 215 leaves; packed, 200). A packed leaf stays packed while its page
/// fits the block: overwriting every value with one of the same size splits
/// none (when a packed leaf took the reserve back at its first
/// recompression, this test had 300 leaves after the overwrites, and 3,000
/// overwrites among 30,000 records took 2,000 leaves to 3,572). Inserts
/// split them, and everything survives a crash.
#[test]
fn a_compaction_packs_compressed_blocks() {
    let dir = tempdir();
    let db = options().open(dir.path()).unwrap();
    let tree_options = TreeOptions::default().compression(Compression::Zstd { level: 3 });
    let tree = db.create_tree("t", tree_options).unwrap();
    let mut rng = SmallRng::seed_from_u64(8);
    let mut model = Model::new();
    for _ in 0..3_000 {
        let (key, value) = half_random_record(&mut rng);
        tree.put(&key, &value).unwrap();
        model.insert(key, value);
    }
    db.compact("t").unwrap();
    let leaves = tree.stats().unwrap().leaf_pages;
    assert!(leaves * 15 <= 3_000 + 15, "{leaves} leaves: not packed");
    tree.check().unwrap();
    assert_same(&tree, &model);

    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    for key in &keys {
        let (_, value) = half_random_record(&mut rng);
        tree.put(key, &value).unwrap();
        model.insert(key.clone(), value);
    }
    let overwritten = tree.stats().unwrap().leaf_pages;
    assert_eq!(
        overwritten, leaves,
        "same-size overwrites split packed leaves"
    );

    // New keys between the old ones, spread over every leaf.
    for old in keys.iter().step_by(7) {
        let (mut key, value) = half_random_record(&mut rng);
        key[..4].copy_from_slice(&old[..4]);
        tree.put(&key, &value).unwrap();
        model.insert(key, value);
    }
    tree.check().unwrap();
    db.check().unwrap();
    assert_same(&tree, &model);
    assert!(tree.stats().unwrap().leaf_pages > leaves, "no leaf split");
    db.sync().unwrap();
    db.halt();

    let db = options().open(dir.path()).unwrap();
    db.check().unwrap();
    let tree = db.open_tree("t").unwrap();
    assert_same(&tree, &model);
    db.close().unwrap();
}
