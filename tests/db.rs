//! The embedded store end to end: API against a model, reopen, recovery
//! without a clean close, bad input, the directory lock.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;
use std::collections::BTreeMap;

use barracuda::{Compression, Db, Durability, Error, TreeOptions, WriteBatch};
use common::{key, log_bytes, log_files, small, tempdir, two_trees};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn value(rng: &mut SmallRng, i: u64) -> Vec<u8> {
    let len = rng.random_range(0..400);
    let word = format!("value {i} ");
    word.bytes().cycle().take(len).collect()
}

fn assert_same(tree: &barracuda::Tree, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let all: Vec<_> = tree.iter().map(Result::unwrap).collect();
    let expected: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all.len(), expected.len());
    assert!(all == expected, "tree differs from the model");
    let rev: Vec<_> = tree.iter().rev().map(Result::unwrap).collect();
    assert!(rev.iter().eq(expected.iter().rev()), "reverse scan differs");
}

#[test]
fn model_then_reopen() {
    let dir = tempdir();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut model = BTreeMap::new();
    {
        let db = small().open(dir.path()).unwrap();
        let tree = db.tree("t").unwrap();
        for step in 0..6000u64 {
            let i = rng.random_range(0..2000);
            if rng.random_range(0..4) == 0 {
                assert_eq!(
                    tree.delete(&key(i)).unwrap(),
                    model.remove(&key(i)).is_some()
                );
            } else {
                let v = value(&mut rng, step);
                assert_eq!(
                    tree.put(&key(i), &v).unwrap(),
                    model.insert(key(i), v).is_some()
                );
            }
            if step % 2000 == 0 {
                db.checkpoint().unwrap();
            }
        }
        assert_same(&tree, &model);
        db.check().unwrap();
        db.close().unwrap();
    }
    let db = small().open(dir.path()).unwrap();
    let tree = db.open_tree("t").unwrap();
    assert_same(&tree, &model);
    db.check().unwrap();
}

/// `get_into` answers as `get` into one reused buffer, for inline values,
/// values in overflow pages, absent keys (the buffer left empty) and a
/// short value after a long one.
#[test]
fn get_into_reuses_one_buffer() {
    let dir = tempdir();
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    let long: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    tree.put(b"long", &long).unwrap();
    tree.put(b"short", b"s").unwrap();
    let mut buf = Vec::new();
    for key in [&b"long"[..], b"short", b"absent", b"long", b"short"] {
        let found = tree.get_into(key, &mut buf).unwrap();
        match tree.get(key).unwrap() {
            Some(value) => assert!(found && buf == value, "{key:?}"),
            None => assert!(!found && buf.is_empty(), "{key:?}"),
        }
    }
    assert!(buf.capacity() >= long.len());
}

#[test]
fn ranges_prefixes_first_last() {
    let dir = tempdir();
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("r").unwrap();
    for i in 0..1000u64 {
        tree.put(&key(i), &i.to_le_bytes()).unwrap();
    }
    fn keys(r: impl Iterator<Item = barracuda::Result<barracuda::KeyValue>>) -> Vec<Vec<u8>> {
        r.map(|e| e.unwrap().0).collect()
    }
    assert_eq!(
        keys(tree.range(key(10)..key(20))),
        (10..20).map(key).collect::<Vec<_>>()
    );
    assert_eq!(
        keys(tree.range(key(10)..=key(20)).rev()),
        (10..=20).rev().map(key).collect::<Vec<_>>()
    );
    assert_eq!(
        keys(tree.prefix(b"key0000099")),
        vec![
            key(990),
            key(991),
            key(992),
            key(993),
            key(994),
            key(995),
            key(996),
            key(997),
            key(998),
            key(999)
        ]
    );
    assert_eq!(tree.first().unwrap().unwrap().0, key(0));
    assert_eq!(tree.last().unwrap().unwrap().0, key(999));
    // Both ends at once meet in the middle without repeating an entry.
    let mut range = tree.range(key(100)..key(700));
    let mut seen = Vec::new();
    loop {
        match (range.next(), range.next_back()) {
            (None, None) => break,
            (a, b) => {
                seen.extend(a.map(|e| e.unwrap().0));
                seen.extend(b.map(|e| e.unwrap().0));
            }
        }
    }
    seen.sort();
    assert_eq!(seen, (100..700).map(key).collect::<Vec<_>>());
}

#[test]
fn crash_without_close_keeps_synced_writes() {
    let dir = tempdir();
    let options = || small().durability(Durability::Sync);
    {
        let db = options().open(dir.path()).unwrap();
        let tree = db.tree("c").unwrap();
        for i in 0..3000u64 {
            tree.put(&key(i), &key(i * 7)).unwrap();
            if i == 1500 {
                db.checkpoint().unwrap();
            }
        }
        // No close, no final checkpoint: the log alone must carry the writes.
        std::mem::forget(db);
    }
    // The forgotten Db still holds the lock in this process; a second
    // open of the directory must say so.
    match options().open(dir.path()) {
        Err(e @ Error::Locked { .. }) => assert!(e.to_string().contains("lock"), "{e}"),
        other => panic!("second open: {other:?}"),
    }
}

#[test]
fn batches_are_atomic_across_trees_and_bad_input_is_refused() {
    let dir = tempdir();
    let (db, a, b) = two_trees(dir.path());
    let mut batch = WriteBatch::new();
    for i in 0..50 {
        batch.put(&a, &key(i), b"in a");
        batch.put(&b, &key(i), b"in b");
    }
    batch.delete(&a, &key(0));
    db.write(batch).unwrap();
    assert_eq!(a.iter().count(), 49);
    assert_eq!(b.iter().count(), 50);
    // Oversize key: a clear error, nothing written.
    let err = a.put(&vec![1; 100_000], b"x").unwrap_err();
    assert!(err.to_string().contains("key"), "{err}");
    // Reopening a tree with other options is refused.
    let err = db
        .create_tree(
            "b",
            TreeOptions::default().compression(Compression::Zstd { level: 3 }),
        )
        .unwrap_err();
    assert!(matches!(err, Error::TreeOptionsMismatch { .. }), "{err}");
    assert!(matches!(
        db.open_tree("nope"),
        Err(Error::TreeNotFound { .. })
    ));
    // A batch whose pages could not all stay cached is refused up front.
    let mut huge = WriteBatch::new();
    for i in 0..2000 {
        huge.put(&a, &key(i), b"x");
    }
    assert!(matches!(db.write(huge), Err(Error::BatchTooLarge { .. })));
    db.close().unwrap();
    let db = small().open(dir.path()).unwrap();
    assert_eq!(db.tree_names(), vec!["a".to_string(), "b".to_string()]);
    assert_eq!(
        db.open_tree("b").unwrap().get(&key(3)).unwrap().as_deref(),
        Some(&b"in b"[..])
    );
}

#[test]
fn a_filesystem_refusing_o_direct_gets_a_clear_error() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        return; // Nothing to test on this machine.
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    match small().open(dir.path()) {
        Err(e) => assert!(e.to_string().contains("Fsync"), "{e}"),
        // Some kernels' tmpfs accept O_DIRECT; then the database must work.
        Ok(db) => {
            db.tree("t").unwrap().put(b"k", b"v").unwrap();
            db.close().unwrap();
        }
    }
    // With buffered I/O it works there.
    let db = small()
        .flush_method(barracuda::FlushMethod::Fsync)
        .open(dir.path())
        .unwrap();
    db.tree("t").unwrap().put(b"k", b"v").unwrap();
    db.close().unwrap();
}

#[test]
fn no_sync_writes_do_not_exhaust_a_small_pool() {
    // Every dirty page waits for the log under NoSync: the pool must ask
    // for a log flush instead of running out of memory.
    let dir = tempdir();
    let db = Db::options()
        .buffer_pool_bytes(2 << 20)
        .durability(Durability::NoSync)
        .open(dir.path())
        .unwrap();
    let tree = db
        .create_tree(
            "none",
            TreeOptions::default().compression(Compression::None),
        )
        .unwrap();
    for i in 0..20_000u64 {
        let k = format!("user{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000);
        tree.put(k.as_bytes(), &[b'x'; 130]).unwrap();
    }
    db.check().unwrap();
}

#[test]
fn pages_kept_as_frames_alone_take_writes_and_survive_reopen() {
    // 1 MiB is 64 frames of 16 KiB: the table below (~52 pages) fits as
    // frames alone but not as frames and 8 KiB blocks, so the default
    // cost-aware pool drops clean pages' blocks; writes read them back.
    let dir = tempdir();
    let compressible = |i: u64, round: u64| -> Vec<u8> {
        format!("row {i} round {round} ")
            .bytes()
            .cycle()
            .take(900)
            .collect()
    };
    let rows = 800u64;
    {
        let db = small().open(dir.path()).unwrap();
        let tree = db.tree("t").unwrap();
        for i in 0..rows {
            tree.put(&key(i), &compressible(i, 0)).unwrap();
        }
        db.checkpoint().unwrap();
        // Frames alone are kept after a quiet second without re-reads of
        // evicted pages (the load evicted some).
        std::thread::sleep(std::time::Duration::from_millis(1100));
        for _ in 0..3 {
            for i in 0..rows {
                assert_eq!(tree.get(&key(i)).unwrap().unwrap(), compressible(i, 0));
            }
        }
        let status = tree.pool_status();
        assert!(status.blocks_dropped > 0, "{}", status.render());
        for i in 0..rows {
            tree.put(&key(i), &compressible(i, 1)).unwrap();
        }
        let status = tree.pool_status();
        assert!(status.blocks_reloaded > 0, "{}", status.render());
        for i in 0..rows {
            assert_eq!(tree.get(&key(i)).unwrap().unwrap(), compressible(i, 1));
        }
        db.check().unwrap();
        db.close().unwrap();
    }
    let db = small().open(dir.path()).unwrap();
    let tree = db.open_tree("t").unwrap();
    for i in 0..rows {
        assert_eq!(tree.get(&key(i)).unwrap().unwrap(), compressible(i, 1));
    }
    db.check().unwrap();
}

/// `Tree::scan` and `Tree::scan_rev` against `Tree::range` and a model, on
/// random bounds of every kind, with values inline and in overflow pages.
#[test]
fn scans_agree_with_ranges_and_the_model() {
    use std::ops::Bound;
    let dir = tempdir();
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("s").unwrap();
    let mut rng = SmallRng::seed_from_u64(11);
    let mut model = BTreeMap::new();
    for step in 0..3000u64 {
        let i = rng.random_range(0..1500);
        let mut v = value(&mut rng, step);
        if step % 50 == 0 {
            v = vec![b'o'; 5000 + step as usize];
        }
        tree.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    let bound = |rng: &mut SmallRng| -> Bound<Vec<u8>> {
        let k = key(rng.random_range(0..1600));
        match rng.random_range(0..3) {
            0 => Bound::Included(k),
            1 => Bound::Excluded(k),
            _ => Bound::Unbounded,
        }
    };
    for _ in 0..200 {
        let (start, end) = (bound(&mut rng), bound(&mut rng));
        let in_range = |k: &[u8]| {
            let after = match &start {
                Bound::Included(s) => k >= s.as_slice(),
                Bound::Excluded(s) => k > s.as_slice(),
                Bound::Unbounded => true,
            };
            let before = match &end {
                Bound::Included(e) => k <= e.as_slice(),
                Bound::Excluded(e) => k < e.as_slice(),
                Bound::Unbounded => true,
            };
            after && before
        };
        let expected: Vec<(Vec<u8>, Vec<u8>)> = model
            .iter()
            .filter(|(k, _)| in_range(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut scanned = Vec::new();
        tree.scan((start.clone(), end.clone()), |k, v| {
            scanned.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        assert!(scanned == expected, "scan {start:?}..{end:?}");
        let ranged: Vec<_> = tree
            .range((start.clone(), end.clone()))
            .map(Result::unwrap)
            .collect();
        assert!(ranged == scanned, "range {start:?}..{end:?}");
        let mut reversed = Vec::new();
        tree.scan_rev((start.clone(), end.clone()), |k, v| {
            reversed.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        reversed.reverse();
        assert!(reversed == expected, "scan_rev {start:?}..{end:?}");
        // Stopping early visits a prefix.
        let mut first_three = Vec::new();
        tree.scan((start.clone(), end.clone()), |k, _| {
            first_three.push(k.to_vec());
            first_three.len() < 3
        })
        .unwrap();
        let keys: Vec<_> = expected.iter().take(3).map(|(k, _)| k.clone()).collect();
        assert_eq!(first_three, keys);
    }
}

/// The log's budget is an option of each open, not of the files:
/// reopening with another `log_bytes` (as an admin tool that does not know
/// it would) uses it and loses nothing.
#[test]
fn reopening_with_another_log_budget_loses_nothing() {
    let dir = tempdir();
    let db = small().log_bytes(4 << 20).open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    for i in 0..500 {
        tree.put(&key(i), b"v").unwrap();
    }
    drop(tree);
    // Halted, not closed: the reopen replays the log under its own budget.
    db.sync().unwrap();
    db.halt();
    for (round, asked) in [64u64 << 20, 1 << 20].into_iter().enumerate() {
        let db = small().log_bytes(asked).open(dir.path()).unwrap();
        assert_eq!(db.log_stats().log_bytes, asked);
        let tree = db.tree("t").unwrap();
        assert_eq!(tree.len().unwrap(), 500 + round as u64);
        assert_eq!(tree.get(&key(499)).unwrap().as_deref(), Some(&b"v"[..]));
        tree.put(&key(1000 + round as u64), b"w").unwrap();
        drop(tree);
        db.close().unwrap();
    }
}

/// `Tree::batch_ops_max` is exact: a batch of that many puts is taken,
/// one more is refused before anything changes. Checked where the pool
/// bounds it (a small pool) and where the log does (a small ring).
#[test]
fn batch_ops_max_is_the_bound_write_applies() {
    for (pool_bytes, log_bytes) in [(4 << 20, 64 << 20), (256 << 20, 1 << 20)] {
        let dir = tempdir();
        let db = small()
            .buffer_pool_bytes(pool_bytes)
            .log_bytes(log_bytes)
            .open(dir.path())
            .unwrap();
        let tree = db.tree("t").unwrap();
        let value = [7u8; 150];
        let max = tree.batch_ops_max(key(0).len(), value.len());
        assert!(max > 1, "{max}");
        let batch_of = |n: usize, from: u64| {
            let mut batch = WriteBatch::new();
            for i in 0..n as u64 {
                batch.put(&tree, &key(from + i), &value);
            }
            batch
        };
        assert!(matches!(
            db.write(batch_of(max + 1, 0)),
            Err(Error::BatchTooLarge { .. })
        ));
        assert_eq!(tree.len().unwrap(), 0);
        db.write(batch_of(max, 0)).unwrap();
        assert_eq!(tree.len().unwrap(), max as u64);
    }
}

/// A batch of random writes to a tree larger than its pool reads its
/// leaves ahead, as one asynchronous batch, and still writes exactly what
/// it says.
#[test]
fn a_batch_reads_its_leaves_ahead() {
    let dir = tempdir();
    let db = small()
        .buffer_pool_bytes(2 << 20)
        .default_tree_options(
            TreeOptions::default()
                .page_size_bytes(4096)
                .compression(Compression::None),
        )
        .open(dir.path())
        .unwrap();
    let tree = db.tree("t").unwrap();
    let value = |i: u64| format!("{i:0200}").into_bytes();
    let batch_ops = tree.batch_ops_max(key(0).len(), value(0).len());
    assert!(batch_ops >= 16, "{batch_ops}");
    // About 6 MiB of pages: three times the pool.
    let mut i = 0u64;
    while i < 20_000 {
        let mut batch = WriteBatch::new();
        for _ in 0..batch_ops.min((20_000 - i) as usize) {
            let k = i * 7 % 20_000;
            batch.put(&tree, &key(k), &value(k));
            i += 1;
        }
        db.write(batch).unwrap();
    }
    let before = tree.pool_status().read_ahead;
    let mut rng = SmallRng::seed_from_u64(11);
    let mut batch = WriteBatch::new();
    let mut changed = Vec::new();
    for _ in 0..batch_ops {
        let i = rng.random_range(0..20_000u64);
        batch.put(&tree, &key(i), b"new");
        changed.push(i);
    }
    db.write(batch).unwrap();
    let read_ahead = tree.pool_status().read_ahead - before;
    assert!(read_ahead > 0, "no leaf was read ahead");
    for i in changed {
        assert_eq!(tree.get(&key(i)).unwrap().as_deref(), Some(&b"new"[..]));
    }
    assert_eq!(tree.len().unwrap(), 20_000);
    db.check().unwrap();
}

/// A clean close leaves the log as its two checkpoint slots and an empty
/// segment (it holds nothing to replay); the segment grows with the writes
/// after a reopen, and nothing is lost either way: through a close, and
/// through a crash after the reopen.
#[test]
fn a_closed_database_keeps_no_log() {
    let dir = tempdir();
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    for i in 0..500 {
        tree.put(&key(i), b"before close").unwrap();
    }
    db.close().unwrap();
    let closed_len = log_bytes(dir.path());
    assert!(closed_len <= 8192, "a closed log of {closed_len} bytes");
    assert_eq!(log_files(dir.path()).len(), 2, "the slots and one segment");
    let db = small().open(dir.path()).unwrap();
    let reopened_len = log_bytes(dir.path());
    assert!(
        reopened_len <= 8192,
        "a reopened log of {reopened_len} bytes"
    );
    let tree = db.tree("t").unwrap();
    assert_eq!(tree.len().unwrap(), 500);
    for i in 500..600 {
        tree.put(&key(i), b"after reopen").unwrap();
    }
    db.sync().unwrap();
    // The segment grows with the log (and 4 MiB of zeros ahead).
    let grown_len = log_bytes(dir.path());
    assert!(
        (4 << 20..16 << 20).contains(&grown_len),
        "a log of {grown_len} bytes after 100 writes"
    );
    db.halt();
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    assert_eq!(tree.len().unwrap(), 600);
    assert_eq!(
        tree.get(&key(599)).unwrap().as_deref(),
        Some(&b"after reopen"[..])
    );
    db.check().unwrap();
}

/// A tree's data file is written with zeros ahead of its pages (a MiB at a
/// time, so a page write overwrites blocks the file system has allocated,
/// instead of extending the file), and a clean close cuts the zeros off.
#[test]
fn a_data_file_holds_zeros_ahead_of_its_pages_only_while_open() {
    let dir = tempdir();
    let data_file = || {
        let mut files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "bdb"))
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files.pop().unwrap()
    };
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    for i in 0..2_000 {
        tree.put(&key(i), &[7; 100]).unwrap();
    }
    db.checkpoint().unwrap();
    let open_len = tree.file_bytes().unwrap();
    assert!(
        open_len > 0 && open_len.is_multiple_of(1 << 20),
        "{open_len} bytes while open"
    );
    db.close().unwrap();
    let closed_len = std::fs::metadata(data_file()).unwrap().len();
    assert!(
        closed_len < open_len && closed_len.is_multiple_of(4096),
        "{closed_len} bytes closed, {open_len} open"
    );
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    assert_eq!(tree.len().unwrap(), 2_000);
    assert_eq!(
        tree.get(&key(1_999)).unwrap().as_deref(),
        Some(&[7; 100][..])
    );
    db.check().unwrap();
}

/// A log segment grows with the log: the log writes zeros a few MiB ahead
/// of itself, so that its syncs do not allocate blocks one commit at a time.
/// Checked through the blocks the file system allocated for the log's files.
#[test]
fn a_log_segment_is_written_ahead_of_the_log() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempdir();
    let allocated = || {
        log_files(dir.path())
            .iter()
            .map(|path| std::fs::metadata(path).unwrap().blocks() * 512)
            .sum::<u64>()
    };
    for reopen in [false, true] {
        let db = small()
            .durability(Durability::Sync)
            .open(dir.path())
            .unwrap();
        let tree = db.tree("t").unwrap();
        tree.put(b"first", b"write").unwrap();
        let after_one = allocated();
        assert!(
            (4 << 20..16 << 20).contains(&after_one),
            "reopen {reopen}: {after_one} bytes allocated after one write"
        );
        // Past the zeroed part, the next flush zeros further ahead.
        let start = db.log_stats().next_lsn;
        let mut i = 0u64;
        while db.log_stats().next_lsn < start + (5 << 20) {
            tree.put(&key(i), &[7; 2000]).unwrap();
            i += 1;
        }
        assert!(
            allocated() > after_one.max(5 << 20),
            "reopen {reopen}: {} bytes allocated after 5 MiB of log",
            allocated()
        );
        db.close().unwrap();
    }
}

/// An idle database checkpoints and deletes its log
/// (`Options::idle_checkpoint`): the log's files shrink to its slots and an
/// empty segment, the writes after it go on in that segment, and a crash
/// then loses none of them. With the option off the log stays.
#[test]
fn an_idle_database_deletes_its_log() {
    let dir = tempdir();
    let log_len = || log_bytes(dir.path());
    // More than 1/32 of the 16 MiB budget (`small`), synced.
    let fill = |tree: &barracuda::Tree, db: &Db, keys: std::ops::Range<u64>| {
        for i in keys {
            tree.put(&key(i), &[i as u8; 1000]).unwrap();
        }
        db.sync().unwrap();
    };
    let idle = std::time::Duration::from_millis(100);
    // The bound only keeps a broken idle checkpoint from hanging the test
    // (a loaded machine may take seconds); the wait ends at the shrink.
    let wait_for_shrink = |from: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while log_len() >= from && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        log_len()
    };

    // Off: the log stays as written, also past the default's 1 s (so the
    // option reached the background thread, not the default).
    let db = small().idle_checkpoint(None).open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    fill(&tree, &db, 0..1_000);
    let written = log_len();
    assert!(written > 1 << 20, "{written} bytes of log");
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    assert_eq!(
        log_len(),
        written,
        "the log was deleted with the option off"
    );
    db.close().unwrap();

    // On: idle for 100 ms, the log is deleted.
    let db = small()
        .idle_checkpoint(Some(idle))
        .open(dir.path())
        .unwrap();
    let tree = db.tree("t").unwrap();
    fill(&tree, &db, 1_000..2_000);
    let written = log_len();
    assert!(written > 1 << 20, "{written} bytes of log");
    let idle_len = wait_for_shrink(written);
    assert!(idle_len <= 8192, "{idle_len} bytes of log after idling");
    let stats = db.log_stats();
    assert_eq!(stats.segments_removed, 1, "{stats:?}");
    assert_eq!(stats.segments, 1, "{stats:?}");
    // The next writes go on in the new segment; a crash keeps all of them.
    fill(&tree, &db, 2_000..2_100);
    db.halt();
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    assert_eq!(tree.len().unwrap(), 2_100);
    for i in [0, 999, 1_000, 1_999, 2_000, 2_099] {
        assert_eq!(
            tree.get(&key(i)).unwrap().as_deref(),
            Some(&[i as u8; 1000][..]),
            "key {i}"
        );
    }
    db.check().unwrap();
}

/// Inserts, deletes and the splits and merges they cause are logged by what
/// they did (a record, a key, a rebuild recipe; see `recipe.rs` in the tree
/// crate); after a kill, recovery makes each again on the page it finds and
/// the tree holds exactly what was acknowledged. Compressed and plain
/// pages: a compressed block's modification log must take the same writes.
#[test]
fn logged_inserts_deletes_and_rebuilds_replay_after_a_kill() {
    let hour = std::time::Duration::from_secs(3600);
    for compression in [Compression::Zlib { level: 6 }, Compression::None] {
        let dir = tempdir();
        let options = || {
            Db::options()
                .buffer_pool_bytes(64 << 20)
                .default_tree_options(TreeOptions::default().compression(compression))
                .checkpoint_interval(hour)
                .idle_checkpoint(None)
                .durability(Durability::Sync)
        };
        let mut rng = SmallRng::seed_from_u64(11);
        let mut model = BTreeMap::new();
        {
            let db = options().open(dir.path()).unwrap();
            let tree = db.tree("t").unwrap();
            for i in 0..1000u64 {
                let v = value(&mut rng, i);
                tree.put(&key(i * 16), &v).unwrap();
                model.insert(key(i * 16), v);
            }
            db.checkpoint().unwrap();
            // After the checkpoint: only the log has these.
            for _ in 0..3000 {
                let i = rng.random_range(0..16_000u64);
                if rng.random_range(0..3) == 0 {
                    tree.delete(&key(i)).unwrap();
                    model.remove(&key(i));
                } else {
                    let v = value(&mut rng, i);
                    tree.put(&key(i), &v).unwrap();
                    model.insert(key(i), v);
                }
            }
            for i in 0..12_000u64 {
                if i % 4 != 0 {
                    tree.delete(&key(i)).unwrap();
                    model.remove(&key(i));
                }
            }
            db.halt();
        }
        let db = options().open(dir.path()).unwrap();
        let recovery = db.recovery_stats();
        assert!(
            recovery.inserts_applied > 500
                && recovery.deletes_applied > 500
                && recovery.rebuilds_applied > 10,
            "{compression:?}: {recovery:?}"
        );
        db.check().unwrap();
        assert_same(&db.tree("t").unwrap(), &model);
        db.close().unwrap();
    }
}
