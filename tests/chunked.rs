//! `Db::chunked_writer`: transactions too large for one atomic write,
//! applied in parts, against a model; runs of deletes applied in key order;
//! bad input refused by the call that names it.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;
use std::collections::BTreeMap;

use barracuda::{Db, Durability, Error, WriteBatch};
use common::{key, small, tempdir, two_trees};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn assert_same(tree: &barracuda::Tree, model: &Model) {
    let all: Vec<_> = tree.iter().map(Result::unwrap).collect();
    let expected: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all.len(), expected.len());
    assert!(all == expected, "tree differs from the model");
    tree.check().unwrap();
}

/// Far more operations than one atomic write may hold, on two trees, with
/// runs of puts and runs of deletes over the same keys (a key deleted,
/// then put again, then deleted), against a model applied in order.
#[test]
fn a_chunked_write_has_the_outcome_of_its_operations_in_order() {
    let dir = tempdir();
    let (db, a, b) = two_trees(dir.path());
    assert!(
        a.batch_ops_max(12, 100) < 3_000,
        "the writes below need parts"
    );
    let mut rng = SmallRng::seed_from_u64(11);
    let (mut model_a, mut model_b) = (Model::new(), Model::new());
    for round in 0..4u64 {
        let mut writer = db.chunked_writer();
        // Runs of 0 to 3,000 operations of one kind, alternating, so that
        // a run of deletes is sorted and applied before the puts after it.
        for run in 0..6 {
            let deletes = run % 2 == 1;
            for _ in 0..rng.random_range(0..3_000) {
                let i = rng.random_range(0..4_000);
                let (tree, model) = if rng.random_bool(0.5) {
                    (&a, &mut model_a)
                } else {
                    (&b, &mut model_b)
                };
                if deletes {
                    writer.delete(tree, &key(i)).unwrap();
                    model.remove(&key(i));
                } else {
                    let value = format!("round {round} value {i} ")
                        .repeat(rng.random_range(0..8))
                        .into_bytes();
                    writer.put(tree, &key(i), &value).unwrap();
                    model.insert(key(i), value);
                }
            }
        }
        writer.finish().unwrap();
        assert_same(&a, &model_a);
        assert_same(&b, &model_b);
    }
    db.close().unwrap();
    let db = small()
        .buffer_pool_bytes(16 << 20)
        .open(dir.path())
        .unwrap();
    assert_same(&db.open_tree("a").unwrap(), &model_a);
    assert_same(&db.open_tree("b").unwrap(), &model_b);
}

/// A run of deletes is applied in key order, but not past the put after
/// it: a key deleted and then put again stays.
#[test]
fn a_put_after_deletes_of_its_key_stays() {
    let dir = tempdir();
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    let mut writer = db.chunked_writer();
    for i in 0..2_000 {
        writer.put(&tree, &key(i), b"first").unwrap();
    }
    for i in (0..2_000).rev() {
        writer.delete(&tree, &key(i)).unwrap();
    }
    writer.put(&tree, &key(7), b"again").unwrap();
    writer.delete(&tree, &key(8)).unwrap();
    writer.finish().unwrap();
    let all: Vec<_> = tree.iter().map(Result::unwrap).collect();
    assert_eq!(all, vec![(key(7), b"again".to_vec())]);
}

/// An oversize key, or a tree of another database, is refused by the call
/// that names it, and the writer goes on; what `finish` makes durable is
/// durable.
#[test]
fn bad_input_is_refused_by_its_call_and_finish_syncs() {
    let dir = tempdir();
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    let other_dir = tempdir();
    let other = small().open(other_dir.path()).unwrap();
    let foreign = other.tree("t").unwrap();

    let mut writer = db.chunked_writer_with(Durability::Sync);
    writer.put(&tree, &key(1), b"one").unwrap();
    let err = writer.put(&tree, &vec![1; 100_000], b"x").unwrap_err();
    assert!(err.to_string().contains("key"), "{err}");
    let err = writer.delete(&foreign, &key(1)).unwrap_err();
    assert!(matches!(err, Error::InvalidOptions { .. }), "{err}");
    writer.put(&tree, &key(2), b"two").unwrap();
    writer.finish().unwrap();
    let stats = db.log_stats();
    assert_eq!(stats.durable_lsn, stats.next_lsn, "finish synced the log");
    assert_eq!(tree.iter().count(), 2);
    assert_eq!(foreign.iter().count(), 0);
}

/// A transaction that one atomic write refuses goes through the writer.
#[test]
fn the_writer_takes_what_one_write_refuses() {
    let dir = tempdir();
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    let mut batch = WriteBatch::new();
    let mut writer = db.chunked_writer();
    for i in 0..5_000 {
        batch.put(&tree, &key(i), b"x");
        writer.put(&tree, &key(i), b"x").unwrap();
    }
    assert!(matches!(db.write(batch), Err(Error::BatchTooLarge { .. })));
    assert_eq!(tree.iter().count(), 0);
    writer.finish().unwrap();
    assert_eq!(tree.iter().count(), 5_000);
    assert_eq!(tree.len().unwrap(), 5_000);
    tree.check().unwrap();
    db.close().unwrap();
    let db: Db = small().open(dir.path()).unwrap();
    assert_eq!(db.open_tree("t").unwrap().iter().count(), 5_000);
}

/// A database with a 32 MiB pool and two trees, "random" and "ascending".
fn random_and_ascending(dir: &std::path::Path) -> (Db, barracuda::Tree, barracuda::Tree) {
    let db = small().buffer_pool_bytes(32 << 20).open(dir).unwrap();
    let random = db.tree("random").unwrap();
    let ascending = db.tree("ascending").unwrap();
    (db, random, ascending)
}

/// A `WriteBatch` is applied in key order too: random keys with half
/// splits, ascending ones as the split policy sees them.
#[test]
fn a_random_write_batch_splits_in_half_an_ascending_one_by_the_policy() {
    let dir = tempdir();
    let (db, random, ascending) = random_and_ascending(dir.path());
    let mut rng = SmallRng::seed_from_u64(9);
    let per_batch = random.batch_ops_max(11, 100).min(500);
    let mut model = Model::new();
    for _ in 0..20 {
        let mut batch = WriteBatch::new();
        for _ in 0..per_batch {
            let k = key(rng.random_range(0..1_000_000));
            batch.put(&random, &k, &[4; 100]);
            model.insert(k, vec![4; 100]);
        }
        db.write(batch).unwrap();
    }
    assert_same(&random, &model);
    let splits = random.stats().unwrap().splits;
    assert!(splits.half > 10, "{splits:?}");
    assert_eq!(splits.sequential, 0, "{splits:?}");
    for b in 0..20u64 {
        let mut batch = WriteBatch::new();
        for i in 0..per_batch as u64 {
            batch.put(&ascending, &key(b * per_batch as u64 + i), &[4; 100]);
        }
        db.write(batch).unwrap();
    }
    let splits = ascending.stats().unwrap().splits;
    assert!(splits.sequential > 10 * splits.half, "{splits:?}");
    ascending.check().unwrap();
}

/// Puts mostly out of key order are applied sorted, with half splits (the
/// order is the writer's doing, not the caller's); an ascending load keeps
/// its order and the split policy packs its leaves. Both hold every entry.
#[test]
fn random_puts_are_applied_sorted_with_half_splits_ascending_ones_as_written() {
    let dir = tempdir();
    let (db, random, ascending) = random_and_ascending(dir.path());
    let mut rng = SmallRng::seed_from_u64(5);
    let mut model = Model::new();
    let mut writer = db.chunked_writer();
    for _ in 0..20_000 {
        let k = key(rng.random_range(0..1_000_000));
        writer.put(&random, &k, &[3; 100]).unwrap();
        model.insert(k, vec![3; 100]);
    }
    writer.finish().unwrap();
    assert_same(&random, &model);
    let random_stats = random.stats().unwrap();
    assert!(random_stats.splits.half > 100, "{:?}", random_stats.splits);
    assert_eq!(
        random_stats.splits.sequential, 0,
        "{:?}",
        random_stats.splits
    );

    let mut writer = db.chunked_writer();
    for i in 0..20_000 {
        writer.put(&ascending, &key(i), &[3; 100]).unwrap();
    }
    writer.finish().unwrap();
    assert_eq!(ascending.len().unwrap(), 20_000);
    let ascending_stats = ascending.stats().unwrap();
    assert!(
        ascending_stats.splits.sequential > 10 * ascending_stats.splits.half,
        "{:?}",
        ascending_stats.splits
    );
    assert!(ascending_stats.leaf_fill > random_stats.leaf_fill + 0.2);
    ascending.check().unwrap();
}
