//! Corruption: random bit flips in a tree's data file give an error that
//! names the page (from `check` or from reads), never a panic; bit flips in
//! the log give an error at open or a database that checks clean.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use barracuda::{Db, Durability, Error};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn options() -> barracuda::Options {
    Db::options()
        .buffer_pool_bytes(1 << 20)
        .log_bytes(4 << 20)
        .durability(Durability::NoSync)
}

/// Fills a tree; returns the end of the log and where its newest segment
/// starts.
fn fill(dir: &Path, close: bool) -> (u64, u64) {
    let db = options().open(dir).unwrap();
    let tree = db.tree("t").unwrap();
    for i in 0..3000u64 {
        tree.put(format!("{i:06}").as_bytes(), &[i as u8; 200])
            .unwrap();
        // Several flushes: damage to a flush that a later one followed is
        // damage to synced records (refused at open), while the last one
        // may be a torn tail.
        if i % 300 == 299 {
            db.sync().unwrap();
        }
    }
    db.sync().unwrap();
    let end = db.log_stats().next_lsn;
    if close {
        db.close().unwrap();
    } else {
        db.halt();
    }
    let newest = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            barracuda::testing::parse_segment_file_name(&e.unwrap().file_name().to_string_lossy())
        })
        .max()
        .unwrap();
    (end, newest)
}

fn flip_bits(path: &Path, rng: &mut SmallRng, flips: usize, from: u64, to: u64) -> Vec<u64> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let len = file.metadata().unwrap().len().min(to);
    let mut offsets = Vec::new();
    for _ in 0..flips {
        let offset = rng.random_range(from..len);
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, offset).unwrap();
        byte[0] ^= 1 << rng.random_range(0..8);
        file.write_all_at(&byte, offset).unwrap();
        offsets.push(offset);
    }
    offsets
}

/// The page a reported error names, if any.
fn named_page(error: &Error) -> bool {
    let text = error.to_string();
    text.contains("page")
}

#[test]
fn data_file_bit_flips_are_reported_with_the_page() {
    for seed in 0..16u64 {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let _ = fill(dir.path(), true);
        let mut rng = SmallRng::seed_from_u64(seed);
        let data = dir.path().join("tree-00001.bdb");
        // Skip the meta page's block, so that open itself succeeds; a flip
        // there is covered below.
        let block = 8 << 10;
        flip_bits(&data, &mut rng, 1 + seed as usize % 3, block, u64::MAX);
        match options().open(dir.path()) {
            Ok(db) => {
                let error = db.check().expect_err("a flipped block must fail its check");
                assert!(named_page(&error), "error does not name the page: {error}");
                // Reading every key gives values or errors, never a panic.
                let tree = db.tree("t").unwrap();
                for i in 0..3000u64 {
                    let _ = tree.get(format!("{i:06}").as_bytes());
                }
            }
            Err(error) => assert!(named_page(&error), "{error}"),
        }
    }
}

#[test]
fn meta_page_flip_fails_open_with_the_page() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let _ = fill(dir.path(), true);
    let data = dir.path().join("tree-00001.bdb");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .unwrap();
    file.write_all_at(&[0xA5; 16], 100).unwrap();
    let error = options().open(dir.path()).unwrap_err();
    assert!(
        error.to_string().contains("page 0") || named_page(&error),
        "{error}"
    );
}

#[test]
fn log_bit_flips_fail_open_or_check_clean() {
    let mut outcomes = Vec::new();
    for seed in 0..16u64 {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        // Halted, not closed: recovery has to replay the log.
        let (end, newest) = fill(dir.path(), false);
        let mut rng = SmallRng::seed_from_u64(seed);
        if seed % 4 == 3 {
            // A checkpoint slot.
            let control = dir.path().join(barracuda::LOG_FILE_NAME);
            flip_bits(&control, &mut rng, 1, 0, 1024);
        } else {
            // The newest segment, its header and its log (after 4 KiB).
            let segment = dir
                .path()
                .join(barracuda::testing::segment_file_name(newest));
            flip_bits(&segment, &mut rng, 1, 0, 4096 + end - newest);
        }
        match options().open(dir.path()) {
            Ok(db) => db.check().unwrap(),
            Err(e) => outcomes.push(e.to_string()),
        }
    }
    // Most flips land in logged groups: recovery must have refused some.
    assert!(!outcomes.is_empty(), "no flip was detected");
    eprintln!(
        "{} of 16 flips refused at open: {outcomes:?}",
        outcomes.len()
    );
}
