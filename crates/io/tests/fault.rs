//! Crash semantics and error schedules of the fault-injecting backend:
//! synced data survives, unsynced data may not, torn writes only at sector
//! boundaries, injected errors are reproducible, a failed sync is sticky.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use barracuda_io::{
    AlignedBuf, Backend, BlockFile, CrashReport, FaultConfig, FaultErrno, FaultFile, FaultOp,
    FaultRule, IoError, IoOptions, MemoryFile, SECTOR_SIZE_BYTES,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const SECTOR: usize = SECTOR_SIZE_BYTES;
/// Writes cover 1 to 8 sectors of a 64-sector span.
const SPAN_SECTORS: usize = 64;

/// A write whose every sector carries a distinct pattern (write id, sector
/// index), so a sector mixing two writes cannot match any candidate.
fn patterned(write_id: u32, sectors: usize) -> AlignedBuf {
    let mut buf = AlignedBuf::zeroed(sectors * SECTOR, SECTOR);
    for (index, chunk) in buf.chunks_mut(SECTOR).enumerate() {
        for (i, byte) in chunk.iter_mut().enumerate() {
            *byte = (write_id as usize * 31 + index * 7 + i) as u8 ^ (write_id >> 8) as u8;
        }
    }
    buf
}

fn read_all(file: &dyn BlockFile) -> Vec<u8> {
    let len = file.len().unwrap() as usize;
    let mut buf = AlignedBuf::zeroed(len, SECTOR);
    file.read_at(0, &mut buf).unwrap();
    buf.to_vec()
}

/// Runs random writes and syncs, crashes, and checks every sector is either
/// its synced content or one of the unsynced writes' content for it.
fn crash_round(inner: Arc<dyn BlockFile>, seed: u64, tear: bool) -> (CrashReport, Vec<u8>) {
    let file = FaultFile::new(inner, FaultConfig::default().seed(seed).tear_writes(tear));
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut synced: Vec<u8> = Vec::new();
    let mut current: Vec<u8> = Vec::new();
    // For each sector, the contents unsynced writes put there.
    let mut candidates: Vec<Vec<Vec<u8>>> = vec![Vec::new(); SPAN_SECTORS + 8];
    for write_id in 0..40u32 {
        let sectors = rng.random_range(1..=8);
        let first = rng.random_range(0..SPAN_SECTORS);
        let data = patterned(write_id, sectors);
        file.write_at((first * SECTOR) as u64, &data).unwrap();
        let end = (first + sectors) * SECTOR;
        if current.len() < end {
            current.resize(end, 0);
        }
        current[first * SECTOR..end].copy_from_slice(&data);
        for (i, chunk) in data.chunks(SECTOR).enumerate() {
            candidates[first + i].push(chunk.to_vec());
        }
        if rng.random_range(0..6) == 0 {
            file.sync_data().unwrap();
            synced.clone_from(&current);
            candidates.iter_mut().for_each(Vec::clear);
        }
    }
    let report = file.crash().unwrap();
    let after = read_all(&file);
    assert!(
        after.len() >= synced.len(),
        "synced length survives (no shrinks here)"
    );
    assert!(after.len() <= current.len());
    for (sector, chunk) in after.chunks(SECTOR).enumerate() {
        let old = synced.get(sector * SECTOR..(sector + 1) * SECTOR);
        let zeros = vec![0u8; SECTOR];
        let is_old = old.map_or(chunk == zeros.as_slice(), |old| chunk == old);
        let is_unsynced = candidates[sector].iter().any(|c| c.as_slice() == chunk);
        assert!(
            is_old || is_unsynced,
            "seed {seed}: sector {sector} is neither synced nor one unsynced write"
        );
    }
    (report, after)
}

#[test]
fn synced_survives_unsynced_may_not_torn_only_at_sectors() {
    let mut total = CrashReport::default();
    for seed in 0..60 {
        let (report, _) = crash_round(Arc::new(MemoryFile::new("m")), seed, true);
        total.kept_count += report.kept_count;
        total.dropped_count += report.dropped_count;
        total.torn_count += report.torn_count;
    }
    // The model must actually exercise every outcome.
    assert!(
        total.kept_count > 0 && total.dropped_count > 0 && total.torn_count > 0,
        "{total:?}"
    );
}

#[test]
fn without_tearing_writes_are_whole_or_absent() {
    for seed in 0..30 {
        let (report, _) = crash_round(Arc::new(MemoryFile::new("m")), seed, false);
        assert_eq!(report.torn_count, 0);
    }
}

#[test]
fn crash_over_a_real_file() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for seed in 0..5 {
        let path = dir.path().join(format!("f{seed}"));
        let inner =
            barracuda_io::open(&path, &IoOptions::default().backend(Backend::Uring)).unwrap();
        crash_round(inner, seed, true);
    }
}

#[test]
fn crashes_are_reproducible_from_the_seed() {
    let (a_report, a) = crash_round(Arc::new(MemoryFile::new("a")), 42, true);
    let (b_report, b) = crash_round(Arc::new(MemoryFile::new("b")), 42, true);
    assert_eq!(a_report, b_report);
    assert_eq!(a, b);
}

#[test]
fn everything_synced_is_exactly_kept() {
    let file = FaultFile::new(
        Arc::new(MemoryFile::new("m")),
        FaultConfig::default().seed(1),
    );
    file.write_at(0, &patterned(1, 8)).unwrap();
    file.set_len(16 * SECTOR as u64).unwrap();
    file.sync_data().unwrap();
    let before = read_all(&file);
    assert_eq!(file.unsynced_count(), 0);
    let report = file.crash().unwrap();
    assert_eq!(report, CrashReport::default());
    assert_eq!(read_all(&file), before);
}

#[test]
fn dropped_extension_and_shrink_are_undone() {
    // Find seeds where the single unsynced change is dropped.
    let mut dropped_seen = 0;
    for seed in 0..20 {
        let file = FaultFile::new(
            Arc::new(MemoryFile::new("m")),
            FaultConfig::default().seed(seed),
        );
        file.write_at(0, &patterned(1, 4)).unwrap();
        file.sync_data().unwrap();
        file.set_len(SECTOR as u64).unwrap();
        let report = file.crash().unwrap();
        let after = read_all(&file);
        if report.dropped_count == 1 {
            dropped_seen += 1;
            assert_eq!(
                after,
                patterned(1, 4).to_vec(),
                "a dropped shrink restores the cut bytes"
            );
        } else {
            assert_eq!(after, patterned(1, 1).to_vec());
        }
    }
    assert!(dropped_seen > 0);
}

#[test]
fn nth_write_fails_with_eio_and_changes_nothing() {
    let rule = FaultRule::Nth {
        op: FaultOp::Write,
        nth: 2,
        errno: FaultErrno::Eio,
    };
    let file = FaultFile::new(
        Arc::new(MemoryFile::new("m")),
        FaultConfig::default().rule(rule),
    );
    file.write_at(0, &patterned(1, 1)).unwrap();
    let error = file.write_at(0, &patterned(2, 1)).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc_eio()));
    assert!(
        matches!(
            error,
            IoError::Os {
                offset_bytes: 0,
                len_bytes: 512,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(read_all(&file), patterned(1, 1).to_vec());
    file.write_at(0, &patterned(3, 1)).unwrap();
}

#[test]
fn capacity_gives_enospc() {
    let file = FaultFile::new(
        Arc::new(MemoryFile::new("m")),
        FaultConfig::default().capacity_bytes(1024),
    );
    file.write_at(512, &patterned(1, 1)).unwrap();
    let error = file.write_at(1024, &patterned(2, 1)).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(28), "ENOSPC: {error}");
    assert_eq!(file.len().unwrap(), 1024);
}

#[test]
fn random_faults_are_reproducible() {
    let run = |seed| {
        let rule = FaultRule::Random {
            op: FaultOp::Read,
            probability: 0.3,
            errno: FaultErrno::Eio,
        };
        let file = FaultFile::new(
            Arc::new(MemoryFile::new("m")),
            FaultConfig::default().seed(seed).rule(rule),
        );
        file.write_at(0, &patterned(1, 1)).unwrap();
        let mut buf = AlignedBuf::zeroed(SECTOR, SECTOR);
        (0..100)
            .map(|_| file.read_at(0, &mut buf).is_err())
            .collect::<Vec<_>>()
    };
    let a = run(7);
    assert_eq!(a, run(7));
    let failures = a.iter().filter(|&&failed| failed).count();
    assert!((10..=50).contains(&failures), "about 30% fail: {failures}");
}

#[test]
fn failed_sync_is_sticky() {
    let rule = FaultRule::Nth {
        op: FaultOp::Sync,
        nth: 2,
        errno: FaultErrno::Eio,
    };
    let file = FaultFile::new(
        Arc::new(MemoryFile::new("m")),
        FaultConfig::default().rule(rule),
    );
    file.write_at(0, &patterned(1, 1)).unwrap();
    file.sync_data().unwrap();
    file.write_at(0, &patterned(2, 1)).unwrap();
    assert!(matches!(file.sync_data(), Err(IoError::FsyncFailed { .. })));
    // Later writes and syncs keep failing; reads still work.
    assert!(matches!(
        file.write_at(512, &patterned(3, 1)),
        Err(IoError::FsyncFailed { .. })
    ));
    assert!(matches!(file.sync_data(), Err(IoError::FsyncFailed { .. })));
    assert!(matches!(file.set_len(0), Err(IoError::FsyncFailed { .. })));
    let mut buf = AlignedBuf::zeroed(SECTOR, SECTOR);
    file.read_at(0, &mut buf).unwrap();
    // The failed sync left write 2 exposed: the crash keeps or drops it.
    assert_eq!(file.unsynced_count(), 1);
    file.crash().unwrap();
    file.write_at(512, &patterned(4, 1)).unwrap();
    file.sync_data().unwrap();
}

#[test]
fn batches_go_through_the_fault_model() {
    let rule = FaultRule::Nth {
        op: FaultOp::Write,
        nth: 3,
        errno: FaultErrno::Enospc,
    };
    let config = FaultConfig::default()
        .rule(rule)
        .latency(std::time::Duration::from_micros(200));
    let file = FaultFile::new(Arc::new(MemoryFile::new("m")), config);
    let requests = (0..4u64)
        .map(|i| barracuda_io::IoRequest::write(i * 512, patterned(i as u32, 1), i))
        .collect::<Vec<_>>();
    let mut done = file.submit_and_wait(requests);
    done.sort_by_key(|c| c.tag);
    let failed: Vec<bool> = done.iter().map(|c| c.result.is_err()).collect();
    assert_eq!(failed, vec![false, false, true, false]);
    assert_eq!(file.unsynced_count(), 3);
}

fn libc_eio() -> i32 {
    5
}
