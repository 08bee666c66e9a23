//! `Options::read_only`: an open that writes nothing to the directory,
//! refuses every write, shares the lock with other readers, and refuses a
//! database that needs recovery; and the lock's messages within one
//! process.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use barracuda::{Durability, Error};
use common::{key, small, tempdir, two_trees};

/// Every file of `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
            (path.clone(), (std::fs::read(&path).unwrap(), modified))
        })
        .collect()
}

fn value(i: u64) -> Vec<u8> {
    format!("value {i} ")
        .repeat(1 + (i % 9) as usize)
        .into_bytes()
}

#[test]
fn a_read_only_open_reads_everything_and_changes_no_file() {
    for count in [0u64, 10, 3_000] {
        let dir = tempdir();
        {
            let (db, a, b) = two_trees(dir.path());
            for i in 0..count {
                a.put(&key(i), &value(i)).unwrap();
                b.put(&key(i), &value(i + 1)).unwrap();
            }
            db.close().unwrap();
        }
        let before = snapshot(dir.path());
        // Two readers at once: the shared lock admits both.
        let db = small().read_only(true).open(dir.path()).unwrap();
        let other = small().read_only(true).open(dir.path()).unwrap();
        let a = db.open_tree("a").unwrap();
        let b = other.open_tree("b").unwrap();
        assert_eq!(a.iter().count() as u64, count, "{count}");
        for i in (0..count).step_by(7) {
            assert_eq!(a.get(&key(i)).unwrap(), Some(value(i)));
            assert_eq!(b.get(&key(i)).unwrap(), Some(value(i + 1)));
        }
        db.check().unwrap();
        for refused in [
            a.put(b"k", b"v").map(|_| ()),
            a.delete_with(&key(0), Durability::Sync).map(|_| ()),
            db.tree("new").map(|_| ()),
            db.checkpoint(),
            db.compact("a").map(|_| ()),
        ] {
            assert!(
                matches!(refused, Err(Error::ReadOnly { .. })),
                "{count}: {refused:?}"
            );
        }
        // A writer is excluded while readers hold the lock.
        assert!(small().open(dir.path()).is_err());
        drop((a, b));
        db.close().unwrap();
        other.close().unwrap();
        assert_eq!(snapshot(dir.path()), before, "{count}: files changed");
        // And the database opens read-write as before.
        let db = small().open(dir.path()).unwrap();
        assert_eq!(db.open_tree("b").unwrap().iter().count() as u64, count);
        db.close().unwrap();
    }
}

#[test]
fn a_database_that_needs_recovery_is_refused_read_only_and_left_unchanged() {
    for count in [1u64, 500] {
        let dir = tempdir();
        let db = small()
            .durability(Durability::Sync)
            .open(dir.path())
            .unwrap();
        let tree = db.tree("t").unwrap();
        for i in 0..count {
            tree.put(&key(i), &value(i)).unwrap();
        }
        drop(tree);
        db.halt();
        let before = snapshot(dir.path());
        let error = small().read_only(true).open(dir.path()).unwrap_err();
        assert!(matches!(error, Error::ReadOnly { .. }), "{error}");
        assert!(error.to_string().contains("recovery"), "{error}");
        assert_eq!(snapshot(dir.path()), before, "files changed");
        let db = small().open(dir.path()).unwrap();
        assert_eq!(db.open_tree("t").unwrap().iter().count() as u64, count);
        db.close().unwrap();
    }
}

#[test]
fn a_read_only_open_creates_nothing() {
    let dir = tempdir();
    let missing = dir.path().join("missing");
    assert!(small().read_only(true).open(&missing).is_err());
    assert!(!missing.exists());
    // An empty directory: no LOCK, no log; nothing may be created.
    let error = small().read_only(true).open(dir.path());
    assert!(error.is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_second_open_in_this_process_says_so() {
    let dir = tempdir();
    let db = small().open(dir.path()).unwrap();
    for read_only in [false, true] {
        let error = small().read_only(read_only).open(dir.path()).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("already open in this process"), "{text}");
        assert!(!text.contains("another process"), "{text}");
    }
    db.close().unwrap();
    small().open(dir.path()).unwrap().close().unwrap();
}

/// A tree created and written but never checkpointed has an empty data
/// file (its pages are in the log alone): the read-only open refuses it
/// as needing recovery, whatever step of the open meets it first.
#[test]
fn a_tree_never_checkpointed_is_refused_as_needing_recovery() {
    for trees in [1usize, 3] {
        let dir = tempdir();
        let db = small()
            .durability(Durability::Sync)
            .open(dir.path())
            .unwrap();
        for t in 0..trees {
            db.tree(&format!("t{t}")).unwrap().put(b"k", b"v").unwrap();
        }
        db.halt();
        let before = snapshot(dir.path());
        let error = small().read_only(true).open(dir.path()).unwrap_err();
        assert!(matches!(error, Error::ReadOnly { .. }), "{error}");
        assert!(error.to_string().contains("recovery"), "{error}");
        assert_eq!(snapshot(dir.path()), before, "files changed");
    }
}
