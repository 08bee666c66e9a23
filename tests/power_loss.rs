//! Power loss through the fault backend: every file the database opens is
//! wrapped in a `FaultFile`; after a workload the database halts as if the
//! process died, each file loses its unsynced writes (whole, or torn at
//! sectors), and the reopened database must hold every write acknowledged
//! as durable, pass `check` (stored entry count included), count its
//! entries exactly (`len`), and accept new writes. Also: I/O errors give
//! errors and no damage after reopen; bit flips give errors, never panics.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use barracuda::io::{BlockFile, FaultConfig, FaultErrno, FaultFile, FaultOp, FaultRule};
use barracuda::{Db, Durability, FileWrapper};
use common::tempdir;
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn options() -> barracuda::Options {
    Db::options()
        .buffer_pool_bytes(1 << 20)
        .log_bytes(8 << 20)
        .checkpoint_interval(std::time::Duration::from_millis(20))
        .durability(Durability::Sync)
}

type Files = Arc<Mutex<Vec<Arc<FaultFile>>>>;

fn faulty(seed: u64, rules: Vec<FaultRule>) -> (FileWrapper, Files) {
    let files: Files = Arc::default();
    let captured = Arc::clone(&files);
    let wrapper = FileWrapper(Arc::new(move |_: &Path, file: Arc<dyn BlockFile>| {
        let mut config = FaultConfig::default()
            .seed(seed + captured.lock().len() as u64)
            .tear_writes(true)
            .track_crashes(true);
        for rule in &rules {
            config = config.rule(*rule);
        }
        let fault = Arc::new(FaultFile::new(file, config));
        captured.lock().push(Arc::clone(&fault));
        fault as Arc<dyn BlockFile>
    }));
    (wrapper, files)
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

fn value(seed: u64, i: u64, len: usize) -> Vec<u8> {
    format!("{seed}:{i};").bytes().cycle().take(len).collect()
}

/// Checks the reopened database against `model`; `uncertain` (a write that
/// returned an error, or was never acknowledged) may be there or not.
fn verify(dir: &Path, model: &BTreeMap<Vec<u8>, Vec<u8>>, uncertain: Option<&[u8]>) {
    let db = options().open(dir).unwrap();
    db.check().unwrap();
    let tree = db.tree("t").unwrap();
    for (k, v) in model {
        assert_eq!(tree.get(k).unwrap().as_ref(), Some(v), "lost {k:?}");
    }
    let mut count = tree.iter().count();
    if let Some(k) = uncertain
        && !model.contains_key(k)
        && tree.get(k).unwrap().is_some()
    {
        count -= 1;
    }
    assert_eq!(count, model.len(), "keys that were never written");
    // The stored count was recovered with the entries it counts.
    assert_eq!(
        tree.len().unwrap(),
        tree.iter().count() as u64,
        "entry count after recovery"
    );
    tree.put(b"after", b"recovery").unwrap();
    db.close().unwrap();
}

#[test]
fn power_loss_keeps_every_synced_write() {
    for seed in 0..12u64 {
        let dir = tempdir();
        let mut model = BTreeMap::new();
        let mut rng = SmallRng::seed_from_u64(seed);
        // Two epochs: the second crash happens on a recovered database.
        for epoch in 0..2 {
            let (wrapper, files) = faulty(seed * 100 + epoch, Vec::new());
            let db = options().wrap_files(wrapper).open(dir.path()).unwrap();
            let tree = db.tree("t").unwrap();
            for _ in 0..rng.random_range(200..1200) {
                let i = rng.random_range(0..3000);
                if rng.random_range(0..5) == 0 {
                    tree.delete(&key(i)).unwrap();
                    model.remove(&key(i));
                } else {
                    let len = rng.random_range(0..600);
                    let v = value(seed, i, len);
                    tree.put(&key(i), &v).unwrap();
                    model.insert(key(i), v);
                }
            }
            // Unsynced, un-acknowledged: may or may not survive.
            let pending = key(999_999);
            tree.put_with(&pending, b"maybe", Durability::NoSync)
                .unwrap();
            db.halt();
            for file in files.lock().iter() {
                file.crash().unwrap();
            }
            verify(dir.path(), &model, Some(&pending));
            let reopened = options().open(dir.path()).unwrap();
            reopened.tree("t").unwrap().delete(&pending).unwrap();
            reopened.close().unwrap();
            let reopened = options().open(dir.path()).unwrap();
            reopened.tree("t").unwrap().delete(b"after").unwrap();
            reopened.close().unwrap();
        }
    }
}

#[test]
fn io_errors_fail_cleanly_and_damage_nothing() {
    for nth in [3u64, 10, 40, 120] {
        for op in [FaultOp::Write, FaultOp::Sync] {
            let dir = tempdir();
            let mut model = BTreeMap::new();
            let mut uncertain = None;
            let (wrapper, files) = faulty(
                nth,
                vec![FaultRule::Nth {
                    op,
                    nth,
                    errno: FaultErrno::Eio,
                }],
            );
            // Opening may fail too (the log is created by writes): with an
            // error, and leaving a directory that opens cleanly later.
            if let Ok(db) = options().wrap_files(wrapper).open(dir.path()) {
                if let Ok(tree) = db.tree("t") {
                    for i in 0..400u64 {
                        if tree.put(&key(i), &value(nth, i, 100)).is_err() {
                            uncertain = Some(key(i));
                            break;
                        }
                        model.insert(key(i), value(nth, i, 100));
                    }
                }
                // Once a write failed, later ones are refused, not lost.
                if let Ok(tree) = db.tree("t")
                    && model.len() < 400
                {
                    assert!(
                        tree.put(b"later", b"x").is_err(),
                        "write accepted after a failure"
                    );
                }
                db.halt();
            }
            for file in files.lock().iter() {
                file.crash().unwrap();
            }
            if model.is_empty() {
                // The tree may not even exist yet.
                let db = options().open(dir.path()).unwrap();
                db.check().unwrap();
                db.close().unwrap();
            } else {
                verify(dir.path(), &model, uncertain.as_deref());
            }
        }
    }
}
