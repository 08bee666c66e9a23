//! 16 threads of mixed operations on several trees against a model: each
//! thread owns its keys (its id is in every key), so its model is exact
//! while other threads write around it; scans check order. The trees are
//! then compared with the models again after a reopen.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use std::collections::BTreeMap;

use barracuda::{Compression, Db, Durability, TreeOptions, WriteBatch};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const THREADS: u64 = 16;
const OPS_PER_THREAD: u64 = 1500;
const TREES: [&str; 3] = ["zlib", "zstd", "plain"];

type Models = Vec<BTreeMap<Vec<u8>, Vec<u8>>>;

fn key(thread: u64, i: u64) -> Vec<u8> {
    // The thread id last, so that threads interleave on the same pages.
    format!("{i:05}-{thread:02}").into_bytes()
}

fn worker(db: &Db, thread: u64) -> Models {
    let trees: Vec<_> = TREES.iter().map(|n| db.open_tree(n).unwrap()).collect();
    let mut models: Models = vec![BTreeMap::new(); TREES.len()];
    let mut rng = SmallRng::seed_from_u64(thread);
    for step in 0..OPS_PER_THREAD {
        let t = rng.random_range(0..TREES.len());
        let k = key(thread, rng.random_range(0..300));
        match rng.random_range(0..100) {
            0..50 => {
                let v = vec![(step % 251) as u8; rng.random_range(0..500)];
                let existed = trees[t].put(&k, &v).unwrap();
                assert_eq!(existed, models[t].insert(k, v).is_some());
            }
            50..70 => {
                assert_eq!(trees[t].delete(&k).unwrap(), models[t].remove(&k).is_some());
            }
            70..75 => {
                // One batch over all trees.
                let mut batch = WriteBatch::new();
                for (tree, model) in trees.iter().zip(models.iter_mut()) {
                    let v = format!("batch {step}").into_bytes();
                    batch.put(tree, &k, &v);
                    model.insert(k.clone(), v);
                }
                db.write(batch).unwrap();
            }
            75..95 => assert_eq!(trees[t].get(&k).unwrap(), models[t].get(&k).cloned()),
            _ => {
                let keys: Vec<_> = trees[t]
                    .range(k.clone()..)
                    .take(50)
                    .map(|e| e.unwrap().0)
                    .collect();
                assert!(keys.windows(2).all(|w| w[0] < w[1]), "scan out of order");
            }
        }
    }
    models
}

fn compare(db: &Db, all: &[Models]) {
    for (t, name) in TREES.iter().enumerate() {
        let tree = db.open_tree(name).unwrap();
        let mut expected = BTreeMap::new();
        for models in all {
            expected.extend(models[t].iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let found: BTreeMap<_, _> = tree.iter().map(Result::unwrap).collect();
        assert!(
            found == expected,
            "tree {name}: {} keys, {} expected",
            found.len(),
            expected.len()
        );
    }
}

#[test]
fn sixteen_threads_three_trees() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let options = || {
        Db::options()
            .buffer_pool_bytes(1 << 20)
            .log_bytes(16 << 20)
            .checkpoint_interval(std::time::Duration::from_millis(50))
            .durability(Durability::Group)
    };
    let db = options().open(dir.path()).unwrap();
    db.create_tree("zlib", TreeOptions::default()).unwrap();
    db.create_tree(
        "zstd",
        TreeOptions::default().compression(Compression::Zstd { level: 3 }),
    )
    .unwrap();
    db.create_tree(
        "plain",
        TreeOptions::default().compression(Compression::None),
    )
    .unwrap();
    let all: Vec<Models> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                let db = &db;
                s.spawn(move || worker(db, thread))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    compare(&db, &all);
    db.check().unwrap();
    db.close().unwrap();
    let db = options().open(dir.path()).unwrap();
    compare(&db, &all);
    db.check().unwrap();
}

/// Read-ahead end to end: threads scan a tree several times larger than
/// its pool (so most leaves are read ahead by the pool's installer thread
/// and evicted again) while another thread rewrites rows; every scan must
/// see each row exactly once, in order, with a value of the right length.
#[test]
fn scans_with_read_ahead_on_a_small_pool() {
    const ROWS: u64 = 4000;
    const VALUE_BYTES: usize = 600;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let options = || {
        Db::options()
            .buffer_pool_bytes(1 << 20)
            .log_bytes(16 << 20)
            .durability(Durability::NoSync)
            .read_ahead_pages(8)
            .read_io_threads(2)
    };
    let plain = TreeOptions::default().compression(Compression::None);
    {
        let db = options().open(dir.path()).unwrap();
        let tree = db.create_tree("t", plain.clone()).unwrap();
        for i in 0..ROWS {
            tree.put(&i.to_be_bytes(), &[(i % 251) as u8; VALUE_BYTES])
                .unwrap();
        }
        db.close().unwrap();
    }
    let db = options().open(dir.path()).unwrap();
    let tree = db.open_tree("t").unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in (0..ROWS).step_by(7) {
                tree.put(&i.to_be_bytes(), &[1; VALUE_BYTES]).unwrap();
            }
        });
        for thread in 0..4u64 {
            let tree = &tree;
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(thread);
                for _ in 0..6 {
                    let from = rng.random_range(0..ROWS / 2);
                    let mut next = from;
                    tree.scan(from.to_be_bytes().., |k, v| {
                        assert_eq!(k, next.to_be_bytes(), "a row skipped or repeated");
                        assert_eq!(v.len(), VALUE_BYTES);
                        next += 1;
                        true
                    })
                    .unwrap();
                    assert_eq!(next, ROWS);
                }
            });
        }
    });
    let status = tree.pool_status();
    assert!(status.read_ahead > 0, "nothing was read ahead: {status:?}");
    assert_eq!(status.read_ahead_failed, 0);
    db.check().unwrap();
}
