//! Setup shared by the integration tests (each test file is its own crate
//! and uses part of this).

#![allow(dead_code, reason = "each test crate uses part of this module")]

use barracuda::{Db, Durability};

/// A directory under target/: an ext4 filesystem where O_DIRECT works
/// (not tmpfs).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temporary directory under target/")
}

/// Small options for quick tests: a 1 MiB pool, a 16 MiB log ring,
/// `NoSync` writes.
pub fn small() -> barracuda::Options {
    Db::options()
        .buffer_pool_bytes(1 << 20)
        .log_bytes(16 << 20)
        .durability(Durability::NoSync)
}

/// Key `i`, ordered as `i`.
pub fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// A database in `dir` (a 16 MiB pool) with two trees: "a" with the default
/// options and "b" uncompressed.
pub fn two_trees(dir: &std::path::Path) -> (Db, barracuda::Tree, barracuda::Tree) {
    let db = small()
        .buffer_pool_bytes(16 << 20)
        .open(dir)
        .expect("open the database");
    let a = db.tree("a").expect("tree a");
    let b = db
        .create_tree(
            "b",
            barracuda::TreeOptions::default().compression(barracuda::Compression::None),
        )
        .expect("tree b");
    (db, a, b)
}

/// Workload 2's value (peers): 1,000 bytes whose second half repeats a
/// first half of random bytes. It compresses to about half, so an 8 KiB
/// block, not a 16 KiB page, bounds how many fit a leaf.
pub fn half_random_value(rng: &mut impl rand::Rng) -> Vec<u8> {
    let mut value = vec![0; 1_000];
    rng.fill(&mut value[..500]);
    value.copy_within(..500, 500);
    value
}

/// The log's files in a database directory: `wal.log` (the checkpoint
/// slots) and its segments, `wal-<LSN>.log`, in name order.
pub fn log_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("the database directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name == barracuda::LOG_FILE_NAME
                || barracuda::testing::parse_segment_file_name(&name).is_some()
        })
        .collect();
    files.sort();
    files
}

/// Bytes of the log's files ([`log_files`]).
pub fn log_bytes(dir: &std::path::Path) -> u64 {
    log_files(dir)
        .iter()
        .map(|path| std::fs::metadata(path).map_or(0, |m| m.len()))
        .sum()
}
