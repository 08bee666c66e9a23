//! The directory's files: a missing, emptied, older or unknown file is
//! refused at open with an error naming it, never re-created empty or
//! deleted; only a directory without any of the store's files is
//! initialised; options are validated before anything is created.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;

use std::path::Path;

use barracuda::{BlockSize, Compression, Db, Error, TreeOptions};

/// The store's files, sorted (the lock file aside: it is only a lock).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "LOCK")
        .collect();
    names.sort();
    names
}

/// A closed database with `trees` trees of 500 entries each.
fn database(dir: &Path, trees: usize) {
    let db = common::small().open(dir).unwrap();
    for t in 0..trees {
        let options = match t % 3 {
            0 => TreeOptions::default(),
            1 => TreeOptions::default().compression(Compression::Zstd { level: 3 }),
            _ => TreeOptions::default().compression(Compression::None),
        };
        let tree = db.create_tree(&format!("t{t}"), options).unwrap();
        for i in 0..500 {
            tree.put(&common::key(i), &[t as u8; 300]).unwrap();
        }
    }
    db.close().unwrap();
}

/// Opening `dir` fails with an error that mentions each of `named`, and
/// changes no file.
fn refused(dir: &Path, named: &[&str]) -> String {
    let before = listing(dir);
    let error = common::small().open(dir).unwrap_err();
    let text = error.to_string();
    for name in named {
        assert!(text.contains(name), "{name} not in: {text}");
    }
    assert_eq!(listing(dir), before, "the refused open changed the files");
    text
}

#[test]
fn a_missing_catalog_is_refused_and_no_tree_file_is_deleted() {
    for trees in [1, 3] {
        let dir = common::tempdir();
        database(dir.path(), trees);
        std::fs::remove_file(dir.path().join("CATALOG")).unwrap();
        refused(dir.path(), &["CATALOG is missing", "tree-00001.bdb"]);
        // The same again: the first refusal changed nothing.
        refused(dir.path(), &["CATALOG is missing"]);
    }
}

#[test]
fn check_fails_once_a_file_is_gone_under_an_open_database() {
    for file in ["CATALOG", "wal.log", "tree-00001.bdb", "tree-00002.bdb"] {
        let dir = common::tempdir();
        database(dir.path(), 2);
        let db = common::small().open(dir.path()).unwrap();
        db.check().unwrap();
        std::fs::remove_file(dir.path().join(file)).unwrap();
        let error = db.check().unwrap_err();
        assert!(error.to_string().contains(file), "{file}: {error}");
        db.halt();
    }
}

#[test]
fn a_missing_or_empty_log_control_file_is_refused() {
    for empty in [false, true] {
        let dir = common::tempdir();
        database(dir.path(), 2);
        let path = dir.path().join("wal.log");
        if empty {
            std::fs::File::create(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
        let what = if empty {
            "wal.log is empty"
        } else {
            "wal.log is missing"
        };
        refused(dir.path(), &[what]);
    }
}

#[test]
fn a_missing_emptied_or_cut_tree_file_is_refused() {
    for (tree, file) in [
        (0, "tree-00001.bdb"),
        (1, "tree-00002.bdb"),
        (2, "tree-00003.bdb"),
    ] {
        for damage in ["delete", "empty", "one byte"] {
            let dir = common::tempdir();
            database(dir.path(), 3);
            let path = dir.path().join(file);
            match damage {
                "delete" => std::fs::remove_file(&path).unwrap(),
                "empty" => std::fs::File::create(&path).unwrap().set_len(0).unwrap(),
                _ => std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(1)
                    .unwrap(),
            }
            let text = refused(dir.path(), &[file]);
            assert!(text.contains(&format!("t{tree}")), "{damage}: {text}");
        }
    }
}

#[test]
fn an_older_copy_of_a_tree_file_or_the_catalog_is_refused() {
    let dir = common::tempdir();
    let old = common::tempdir();
    database(dir.path(), 2);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), old.path().join(entry.file_name())).unwrap();
    }
    let db = common::small().open(dir.path()).unwrap();
    let tree = db.open_tree("t0").unwrap();
    for i in 500..700 {
        tree.put(&common::key(i), b"newer").unwrap();
    }
    db.create_tree("t2", TreeOptions::default()).unwrap();
    db.close().unwrap();
    let saved = std::fs::read(dir.path().join("tree-00001.bdb")).unwrap();
    std::fs::copy(
        old.path().join("tree-00001.bdb"),
        dir.path().join("tree-00001.bdb"),
    )
    .unwrap();
    refused(dir.path(), &["tree-00001.bdb", "older copy"]);
    std::fs::write(dir.path().join("tree-00001.bdb"), saved).unwrap();
    std::fs::copy(old.path().join("CATALOG"), dir.path().join("CATALOG")).unwrap();
    refused(dir.path(), &["CATALOG", "older copy"]);
}

#[test]
fn a_tree_file_the_catalog_does_not_name_is_refused_not_deleted() {
    for (name, bytes) in [("tree-00009.bdb", 8192), ("tree-00009.dbw", 4096)] {
        let dir = common::tempdir();
        database(dir.path(), 1);
        std::fs::write(dir.path().join(name), vec![7u8; bytes]).unwrap();
        refused(dir.path(), &[name]);
        assert!(dir.path().join(name).exists());
    }
    // An empty one is what a tree creation cut short leaves: it holds
    // nothing, and goes.
    let dir = common::tempdir();
    database(dir.path(), 1);
    std::fs::write(dir.path().join("tree-00002.bdb"), b"").unwrap();
    let db = common::small().open(dir.path()).unwrap();
    db.check().unwrap();
    db.close().unwrap();
    assert!(!dir.path().join("tree-00002.bdb").exists());
}

#[test]
fn only_a_directory_without_store_files_is_initialised() {
    // A new directory, one with unrelated files, one with only a lock.
    for extra in [None, Some("notes.txt"), Some("LOCK")] {
        let dir = common::tempdir();
        if let Some(extra) = extra {
            std::fs::write(dir.path().join(extra), b"").unwrap();
        }
        let db = common::small().open(dir.path()).unwrap();
        db.tree("t").unwrap().put(b"k", b"v").unwrap();
        db.close().unwrap();
        let db = common::small().open(dir.path()).unwrap();
        assert_eq!(db.open_tree("t").unwrap().get(b"k").unwrap().unwrap(), b"v");
        db.close().unwrap();
    }
    // A database without trees (its catalog and log are all it has).
    let dir = common::tempdir();
    common::small().open(dir.path()).unwrap().close().unwrap();
    assert!(dir.path().join("CATALOG").exists());
    common::small().open(dir.path()).unwrap().close().unwrap();
    // Any one store file without the rest is refused.
    let whole = common::tempdir();
    database(whole.path(), 1);
    for keep in listing(whole.path()) {
        let dir = common::tempdir();
        std::fs::copy(whole.path().join(&keep), dir.path().join(&keep)).unwrap();
        let before = listing(dir.path());
        let result = common::small().open(dir.path());
        assert!(result.is_err(), "{keep} alone was opened");
        assert_eq!(listing(dir.path()), before, "{keep} alone: files changed");
    }
}

#[test]
fn invalid_options_are_refused_before_anything_is_created() {
    let cases: Vec<(&str, barracuda::Options)> = vec![
        ("log_bytes", Db::options().log_bytes(u64::MAX)),
        ("log_bytes", Db::options().log_bytes((1 << 40) + 1)),
        ("log_bytes", Db::options().log_bytes(1000)),
        (
            "buffer_pool_bytes",
            Db::options().buffer_pool_bytes(usize::MAX),
        ),
        ("buffer_pool_bytes", Db::options().buffer_pool_bytes(0)),
        (
            "checkpoint_interval",
            Db::options().checkpoint_interval(std::time::Duration::MAX),
        ),
        (
            "group_commit_window",
            Db::options().group_commit_window(std::time::Duration::from_secs(5)),
        ),
        (
            "idle_checkpoint",
            Db::options().idle_checkpoint(Some(std::time::Duration::MAX)),
        ),
        (
            "read_ahead_pages",
            Db::options().read_ahead_pages(usize::MAX),
        ),
        (
            "default_tree_options",
            Db::options().default_tree_options(TreeOptions::default().page_size_bytes(1000)),
        ),
        (
            "default_tree_options",
            Db::options().default_tree_options(
                TreeOptions::default().compression(Compression::Zlib { level: 99 }),
            ),
        ),
    ];
    for (name, options) in cases {
        let dir = common::tempdir();
        let path = dir.path().join("db");
        let error = options.open(&path).unwrap_err();
        assert!(
            matches!(&error, Error::InvalidOptions { reason } if reason.contains(name)),
            "{name}: {error}"
        );
        assert!(!path.exists(), "{name}: the directory was created");
    }
    // The largest log budget is accepted, and writes work under it.
    let dir = common::tempdir();
    let db = common::small().log_bytes(1 << 40).open(dir.path()).unwrap();
    db.tree("t").unwrap().put(b"k", b"v").unwrap();
    db.close().unwrap();
}

#[test]
fn an_empty_path_is_refused_and_creates_nothing() {
    let cwd = std::env::current_dir().unwrap();
    let before: Vec<bool> = ["LOCK", "wal.log", "CATALOG"]
        .iter()
        .map(|f| cwd.join(f).exists())
        .collect();
    let error = Db::open("").unwrap_err();
    assert!(matches!(error, Error::InvalidOptions { .. }), "{error}");
    let after: Vec<bool> = ["LOCK", "wal.log", "CATALOG"]
        .iter()
        .map(|f| cwd.join(f).exists())
        .collect();
    assert_eq!(before, after);
}

#[test]
fn creating_a_tree_again_with_the_same_options_finds_it() {
    let dir = common::tempdir();
    let db = common::small().open(dir.path()).unwrap();
    let mut n = 0;
    for compression in [
        Compression::None,
        Compression::Zlib { level: 6 },
        Compression::Zstd { level: 3 },
    ] {
        for block_size in [BlockSize::Kib4, BlockSize::Kib8] {
            for page_size in [8 << 10, 16 << 10] {
                if compression != Compression::None
                    && block_size.compressed_bytes().unwrap() >= page_size
                {
                    continue;
                }
                let options = TreeOptions::default()
                    .page_size_bytes(page_size)
                    .compression(compression)
                    .block_size(block_size);
                let name = format!("t{n}");
                n += 1;
                db.create_tree(&name, options.clone()).unwrap();
                db.create_tree(&name, options.clone()).unwrap();
                // An uncompressed tree ignores the block size.
                if compression == Compression::None {
                    db.create_tree(&name, options.block_size(BlockSize::Kib2))
                        .unwrap();
                }
            }
        }
    }
    db.close().unwrap();
}
