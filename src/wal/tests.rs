//! Tests of the write-ahead log against a model of what was acknowledged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use barracuda_codec::{Lsn, PageId};
use barracuda_io::{BlockFile, FaultConfig, FaultFile, MemoryFile};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

/// The page a numbered group's last patch names; no other patch uses it.
const SEQUENCE_PAGE: PageId = PageId(u64::MAX);

/// A group whose content encodes its sequence number, so replay order and
/// completeness can be checked.
fn numbered_group(n: u64, rng: &mut SmallRng) -> RedoGroup {
    let mut group = RedoGroup::new();
    let pages = rng.random_range(1..4u64);
    for p in 0..pages {
        let len = rng.random_range(1..300usize);
        let mut bytes = vec![(n % 251) as u8; len];
        bytes[0] = p as u8;
        group.patch(PageId(n * 10 + p), (n % 4000) as u32, &bytes);
    }
    group.patch(SEQUENCE_PAGE, 0, &n.to_le_bytes());
    group
}

/// The sequence number a group replayed from the log carries.
fn sequence_of(group: &LoggedGroup) -> u64 {
    let entries = group.entries().unwrap();
    let RedoEntry::Patches {
        page_id,
        mut patches,
    } = *entries.last().unwrap()
    else {
        panic!("numbered groups end with a patch")
    };
    assert_eq!(page_id, SEQUENCE_PAGE);
    let (_, bytes) = patches.next().unwrap();
    u64::from_le_bytes(bytes.try_into().unwrap())
}

fn replay(file: Arc<dyn BlockFile>, options: &WalOptions) -> Result<(Wal, Vec<u64>)> {
    let mut seen = Vec::new();
    let (wal, _) = Wal::open(file, options, |group| {
        seen.push(sequence_of(group));
        Ok(())
    })?;
    Ok((wal, seen))
}

/// A log of `ring_bytes` with a 16 KiB buffer (flushes come often).
fn with_ring(ring_bytes: u64) -> WalOptions {
    WalOptions::default()
        .ring_bytes(ring_bytes)
        .buffer_bytes_max(16 << 10)
}

fn small() -> WalOptions {
    with_ring(256 << 10)
}

#[test]
fn appended_groups_replay_in_order_after_reopen() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let mut rng = SmallRng::seed_from_u64(1);
    let (wal, seen) = replay(file.clone(), &small()).unwrap();
    assert!(seen.is_empty());
    let mut last = Lsn(0);
    for n in 0..100 {
        let range = wal.append(&numbered_group(n, &mut rng)).unwrap();
        assert!(range.start >= last && range.end > range.start);
        last = range.end;
        if n % 7 == 0 {
            wal.flush_to(range.end).unwrap();
            assert!(wal.durable_lsn() >= range.end);
        }
    }
    wal.flush_to(last).unwrap();
    drop(wal);
    let (_, seen) = replay(file, &small()).unwrap();
    assert_eq!(seen, (0..100).collect::<Vec<_>>());
}

#[test]
fn the_log_wraps_around_its_ring_behind_checkpoints() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let options = WalOptions::default()
        .ring_bytes(64 << 10)
        .buffer_bytes_max(4 << 10);
    let mut rng = SmallRng::seed_from_u64(2);
    let (wal, _) = replay(file.clone(), &options).unwrap();
    let mut first_after_checkpoint = 0;
    for n in 0..2000u64 {
        let range = match wal.append(&numbered_group(n, &mut rng)) {
            Ok(range) => range,
            Err(Error::LogFull { .. }) => {
                // Everything so far is "in the data file": checkpoint at the
                // durable end and retry.
                wal.flush_to(wal.next_lsn()).unwrap();
                wal.checkpoint(wal.durable_lsn(), b"x").unwrap();
                first_after_checkpoint = n;
                wal.append(&numbered_group(n, &mut rng)).unwrap()
            }
            Err(e) => panic!("{e}"),
        };
        wal.flush_to(range.end).unwrap();
    }
    assert!(
        wal.stats().next_lsn > 4 * wal.ring_bytes(),
        "the ring wrapped several times"
    );
    drop(wal);
    let (_, seen) = replay(file, &options).unwrap();
    assert_eq!(seen, (first_after_checkpoint..2000).collect::<Vec<_>>());
}

#[test]
fn a_full_ring_is_an_error_until_a_checkpoint() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let options = WalOptions::default()
        .ring_bytes(64 << 10)
        .buffer_bytes_max(4 << 10);
    let (wal, _) = replay(file, &options).unwrap();
    let mut group = RedoGroup::new();
    group.patch(PageId(1), 0, &[7; 1000]);
    let mut full = None;
    for _ in 0..100 {
        match wal.append(&group) {
            Ok(_) => {}
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    assert!(matches!(full, Some(Error::LogFull { .. })), "{full:?}");
    wal.flush_to(wal.next_lsn()).unwrap();
    wal.checkpoint(wal.durable_lsn(), &[]).unwrap();
    wal.append(&group).unwrap();
}

#[test]
fn concurrent_committers_share_syncs() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let options = WalOptions::default().ring_bytes(8 << 20);
    let (wal, _) = replay(file.clone(), &options).unwrap();
    let wal = Arc::new(wal);
    let next = Arc::new(AtomicU64::new(0));
    let threads = 8;
    let commits_per_thread = 100;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let wal = wal.clone();
            let next = next.clone();
            scope.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                for _ in 0..commits_per_thread {
                    // Sequence numbers are taken under no lock: the log
                    // order of two threads' groups is the append order,
                    // which the replay check below does not assume.
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let range = wal.append(&numbered_group(n, &mut rng)).unwrap();
                    wal.flush_to(range.end).unwrap();
                    assert!(wal.durable_lsn() >= range.end);
                }
            });
        }
    });
    let commits = threads * commits_per_thread;
    let flushes = wal.stats().flushes;
    assert!(
        flushes <= commits,
        "{flushes} flushes for {commits} commits"
    );
    drop(wal);
    let (_, mut seen) = replay(file, &options).unwrap();
    seen.sort_unstable();
    assert_eq!(seen, (0..commits).collect::<Vec<_>>());
}

/// One crash epoch: appends groups `first..first + count`, flushing now and
/// then, until a flush fails (the injected sync error: the moment of the
/// crash, with that flush's write in the file but not synced). Returns the
/// end of the acknowledged sequence numbers and of the appended ones.
fn run_until_crash(wal: &Wal, first: u64, count: u64, rng: &mut SmallRng) -> (u64, u64) {
    let mut acknowledged = first;
    for n in first..first + count {
        let range = wal.append(&numbered_group(n, rng)).unwrap();
        if rng.random_bool(0.3) {
            if wal.flush_to(range.end).is_err() {
                return (acknowledged, n + 1);
            }
            acknowledged = n + 1;
        }
    }
    (acknowledged, first + count)
}

/// Checks a replay after a crash: it is a prefix of what was appended, in
/// order, and holds everything acknowledged.
fn check_prefix(seen: &[u64], expected_start: u64, acknowledged: u64, appended: u64) {
    for (i, &n) in seen.iter().enumerate() {
        assert_eq!(
            n,
            expected_start + i as u64,
            "replay out of order: {seen:?}"
        );
    }
    let end = expected_start + seen.len() as u64;
    assert!(
        end >= acknowledged,
        "lost acknowledged groups: replayed to {end}, acknowledged {acknowledged}"
    );
    assert!(end <= appended);
}

/// A fault file over `inner` whose `nth` sync fails, leaving the write of
/// that flush unsynced for the crash to keep, drop or tear.
fn crashing_file(inner: &Arc<dyn BlockFile>, seed: u64, nth: u64) -> Arc<FaultFile> {
    use barracuda_io::{FaultErrno, FaultOp, FaultRule};
    let config = FaultConfig::default()
        .seed(seed)
        .tear_writes(true)
        .rule(FaultRule::Nth {
            op: FaultOp::Sync,
            nth,
            errno: FaultErrno::Eio,
        });
    Arc::new(FaultFile::new(inner.clone(), config))
}

/// Two crash epochs on a new log with `options`: appends until an injected
/// sync failure, crashes, recovers (`after_first` sees the file then), and
/// does it again with new numbers; what epoch 1 lost must never come back,
/// even after the second crash. Returns whether the first crash cut the
/// log's tail.
fn crash_twice(seed: u64, options: &WalOptions, after_first: impl Fn(&dyn BlockFile)) -> bool {
    let inner: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let mut rng = SmallRng::seed_from_u64(seed);

    // Epoch 1: a new log (2 syncs to create), crashing mid-flush.
    let fault = crashing_file(&inner, seed, rng.random_range(3..12));
    let (wal, _) = replay(fault.clone(), options).unwrap();
    let (ack1, appended1) = run_until_crash(&wal, 0, 80, &mut rng);
    drop(wal);
    fault.crash().unwrap();
    let (wal, seen1) = replay(inner.clone(), options).unwrap();
    drop(wal);
    check_prefix(&seen1, 0, ack1, appended1);
    after_first(inner.as_ref());

    // Epoch 2 continues with new numbers after recovery (1 sync to clean
    // the tail).
    let base = 1000;
    let fault = crashing_file(&inner, seed + 1000, rng.random_range(2..12));
    let (wal, seen) = replay(fault.clone(), options).unwrap();
    assert_eq!(seen, seen1);
    let (ack2, appended2) = run_until_crash(&wal, base, 80, &mut rng);
    drop(wal);
    fault.crash().unwrap();
    let (_, seen2) = replay(inner, options).unwrap();
    assert_eq!(
        &seen2[..seen1.len()],
        &seen1[..],
        "seed {seed}: epoch 1 replay changed"
    );
    check_prefix(&seen2[seen1.len()..], base, ack2, appended2);
    (seen1.len() as u64) < appended1
}

#[test]
fn crashes_lose_nothing_acknowledged_and_resurrect_nothing() {
    let torn_tails = (0..60u64)
        .filter(|&seed| crash_twice(seed, &small(), |_| {}))
        .count();
    assert!(torn_tails > 20, "too few crashes cut the log: {torn_tails}");
}

#[test]
fn damage_to_synced_records_is_reported_not_cut_off() {
    let memory = Arc::new(MemoryFile::new("wal"));
    let file: Arc<dyn BlockFile> = memory.clone();
    let mut rng = SmallRng::seed_from_u64(3);
    let (wal, _) = replay(file.clone(), &small()).unwrap();
    let first = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(first.end).unwrap();
    for n in 1..5 {
        let range = wal.append(&numbered_group(n, &mut rng)).unwrap();
        wal.flush_to(range.end).unwrap();
    }
    drop(wal);
    // Flip a bit inside the first group's body.
    let layout = Layout::new(file.as_ref(), &small()).unwrap();
    let (offset, _) = layout.pieces(first.start.0 + 40, 1)[0];
    let sector = offset - offset % 512;
    let mut buf = file.alloc_buf(512);
    file.read_at(sector, &mut buf).unwrap();
    buf[(offset - sector) as usize] ^= 0x10;
    file.write_at(sector, &buf).unwrap();
    let err = replay(file, &small()).expect_err("damage must be reported");
    assert!(
        matches!(err, Error::LogCorrupted { lsn, .. } if lsn == first.start),
        "{err}"
    );
}

#[test]
fn the_checkpoint_payload_survives_reopen() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let mut rng = SmallRng::seed_from_u64(4);
    let (wal, checkpoint) = Wal::open(file.clone(), &small(), |_| Ok(())).unwrap();
    assert_eq!(checkpoint.sequence, 0);
    let range = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    wal.checkpoint(range.start, b"catalog at page 1").unwrap();
    drop(wal);
    let (_, checkpoint) = Wal::open(file.clone(), &small(), |_| Ok(())).unwrap();
    assert_eq!(checkpoint.lsn, range.start);
    assert_eq!(checkpoint.payload, b"catalog at page 1");
    // The group after the checkpoint LSN is replayed again.
    let (_, seen) = replay(file, &small()).unwrap();
    assert_eq!(seen, vec![0]);
}

#[test]
fn an_existing_log_keeps_its_ring_size() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let (wal, _) = Wal::open(file.clone(), &small(), |_| Ok(())).unwrap();
    let created = wal.ring_bytes();
    let mut rng = SmallRng::seed_from_u64(9);
    let range = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    drop(wal);
    let other = WalOptions::default().ring_bytes(created * 4);
    let mut replayed = 0;
    let (wal, _) = Wal::open(file, &other, |_| {
        replayed += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(wal.ring_bytes(), created);
    assert_eq!(replayed, 1, "the group logged before reopening is replayed");
}

#[test]
fn a_failed_sync_poisons_the_log() {
    use barracuda_io::{FaultErrno, FaultOp, FaultRule};
    let inner: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    // Opening a new log syncs once (its first checkpoint; a fresh ring has
    // no tail to clean); fail the third sync, the second flush.
    let config = FaultConfig::default().seed(5).rule(FaultRule::Nth {
        op: FaultOp::Sync,
        nth: 3,
        errno: FaultErrno::Eio,
    });
    let file: Arc<dyn BlockFile> = Arc::new(FaultFile::new(inner, config));
    let (wal, _) = replay(file, &small()).unwrap();
    let mut rng = SmallRng::seed_from_u64(5);
    let range = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    let range = wal.append(&numbered_group(1, &mut rng)).unwrap();
    assert!(
        wal.flush_to(range.end).is_err(),
        "the injected EIO must surface"
    );
    assert!(wal.durable_lsn() < range.end);
    // Every later append and flush fails: nothing is acknowledged again.
    let err = wal
        .append(&numbered_group(2, &mut rng))
        .expect_err("poisoned");
    assert!(matches!(err, Error::LogFailed { .. }), "{err}");
    assert!(matches!(
        wal.flush_to(range.end),
        Err(Error::LogFailed { .. })
    ));
}

/// A ring large enough that the file stays shorter than it for a while
/// (the flushes extend it 4 MiB ahead of the log).
fn large() -> WalOptions {
    with_ring(32 << 20)
}

#[test]
fn a_new_log_grows_with_its_ring_and_replays_from_a_short_file() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let mut rng = SmallRng::seed_from_u64(11);
    let (wal, checkpoint) = Wal::open(file.clone(), &large(), |_| Ok(())).unwrap();
    assert!(checkpoint.ring_growing);
    assert!(file.len().unwrap() <= 8 << 10, "a new log is its slots");
    let mut end = Lsn(0);
    for n in 0..50 {
        end = wal.append(&numbered_group(n, &mut rng)).unwrap().end;
    }
    wal.flush_to(end).unwrap();
    let grown = file.len().unwrap();
    assert!(
        grown > end.0 && grown < (8 << 20),
        "{grown} bytes: the log and 4 MiB of zeros ahead"
    );
    // A checkpoint while the ring grows keeps the flag: the file is short.
    wal.checkpoint(wal.durable_lsn(), b"").unwrap();
    assert!(wal.last_checkpoint().ring_growing);
    for n in 50..60 {
        end = wal.append(&numbered_group(n, &mut rng)).unwrap().end;
    }
    wal.flush_to(end).unwrap();
    drop(wal);
    let (wal, seen) = replay(file.clone(), &large()).unwrap();
    assert_eq!(seen, (50..60).collect::<Vec<_>>());
    // Appends go on where the replay ended, into the short file.
    for n in 60..70 {
        end = wal.append(&numbered_group(n, &mut rng)).unwrap().end;
    }
    wal.flush_to(end).unwrap();
    drop(wal);
    let (_, seen) = replay(file.clone(), &large()).unwrap();
    assert_eq!(seen, (50..70).collect::<Vec<_>>());
    assert!(file.len().unwrap() < 32 << 20);
}

#[test]
fn a_whole_ring_checkpoints_without_the_flag_and_a_cut_file_is_damage() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let mut rng = SmallRng::seed_from_u64(13);
    let (wal, _) = Wal::open(file.clone(), &small(), |_| Ok(())).unwrap();
    // One flush writes zeros to the end of the small ring: it is whole.
    let range = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    let layout = Layout::new(file.as_ref(), &small()).unwrap();
    assert_eq!(file.len().unwrap(), layout.file_len_bytes());
    wal.checkpoint(range.start, b"").unwrap();
    assert!(!wal.last_checkpoint().ring_growing);
    drop(wal);
    file.set_len(layout.file_len_bytes() - 4096).unwrap();
    let err = Wal::open(file, &small(), |_| Ok(())).expect_err("a short whole ring");
    assert!(matches!(err, Error::LogCorrupted { .. }), "{err}");
}

#[test]
fn a_restart_gives_the_ring_back_and_the_log_goes_on() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let mut rng = SmallRng::seed_from_u64(12);
    let (wal, _) = Wal::open(file.clone(), &small(), |_| Ok(())).unwrap();
    let mut end = Lsn(0);
    for n in 0..20 {
        end = wal.append(&numbered_group(n, &mut rng)).unwrap().end;
    }
    // Groups after the checkpoint: nothing is restarted.
    wal.flush_to(end).unwrap();
    let whole = file.len().unwrap();
    assert!(!wal.restart_ring().unwrap());
    assert_eq!(file.len().unwrap(), whole);
    wal.checkpoint(end, b"root").unwrap();
    assert!(wal.restart_ring().unwrap());
    let cut_len = file.len().unwrap();
    assert!(cut_len <= 4096, "{cut_len} bytes left");
    let restarted = wal.last_checkpoint();
    assert!(restarted.ring_growing);
    assert_eq!(restarted.lsn.0 % wal.ring_bytes(), 0, "at a lap's start");
    assert!(restarted.lsn > end);
    assert_eq!(wal.next_lsn(), restarted.lsn);
    // Reopened as it is (no close): nothing to replay, the same checkpoint.
    drop(wal);
    let (wal, checkpoint) = Wal::open(file.clone(), &small(), |_| {
        panic!("an empty log replays nothing")
    })
    .unwrap();
    assert_eq!(checkpoint, restarted);
    assert_eq!(&checkpoint.payload[..], b"root");
    assert!(
        file.len().unwrap() <= cut_len,
        "opening reads, it does not grow"
    );
    // The log goes on from the lap's start, and replays what it was given.
    let first = wal.append(&numbered_group(20, &mut rng)).unwrap();
    assert!(
        first.start > restarted.lsn && first.start.0 < restarted.lsn.0 + 512,
        "after the flush-start marker at {}: {}",
        restarted.lsn,
        first.start
    );
    end = first.end;
    for n in 21..30 {
        end = wal.append(&numbered_group(n, &mut rng)).unwrap().end;
    }
    wal.flush_to(end).unwrap();
    drop(wal);
    let (_, seen) = replay(file, &small()).unwrap();
    assert_eq!(seen, (20..30).collect::<Vec<_>>());
}

#[test]
fn a_version_2_ring_cut_at_close_restarts_at_open() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let mut rng = SmallRng::seed_from_u64(14);
    let (wal, _) = Wal::open(file.clone(), &small(), |_| Ok(())).unwrap();
    let range = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    wal.checkpoint(range.end, b"catalog").unwrap();
    let last = wal.last_checkpoint();
    drop(wal);
    // What an earlier build's close left: the slot (same LSN, the flag)
    // and the file cut to its slots; the LSN is not at a lap's start.
    let cut = Checkpoint {
        sequence: last.sequence + 1,
        ring_growing: true,
        ..last
    };
    let layout = Layout::new(file.as_ref(), &small()).unwrap();
    write_checkpoint(file.as_ref(), &layout, (cut.sequence % 2) as usize, &cut).unwrap();
    file.set_len(layout.ring_start_bytes).unwrap();
    let (wal, checkpoint) = Wal::open(file.clone(), &small(), |_| {
        panic!("an empty log replays nothing")
    })
    .unwrap();
    assert!(checkpoint.ring_growing);
    assert_eq!(checkpoint.lsn.0 % wal.ring_bytes(), 0, "restarted at a lap");
    assert_eq!(checkpoint.payload, b"catalog");
    assert_eq!(log_one_then_replay(wal, file, 1, &mut rng), vec![1]);
}

#[test]
fn a_crash_between_the_restart_slot_and_the_cut_opens_empty() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let mut rng = SmallRng::seed_from_u64(15);
    let (wal, _) = Wal::open(file.clone(), &small(), |_| Ok(())).unwrap();
    // Several laps of groups, so old records lie all over the ring.
    for n in 0..400 {
        let range = match wal.append(&numbered_group(n, &mut rng)) {
            Ok(range) => range,
            Err(Error::LogFull { .. }) => {
                wal.flush_to(wal.next_lsn()).unwrap();
                wal.checkpoint(wal.durable_lsn(), b"").unwrap();
                wal.append(&numbered_group(n, &mut rng)).unwrap()
            }
            Err(e) => panic!("{e}"),
        };
        wal.flush_to(range.end).unwrap();
    }
    wal.checkpoint(wal.durable_lsn(), b"").unwrap();
    let last = wal.last_checkpoint();
    let next_lsn = wal.next_lsn();
    drop(wal);
    // What `restart_ring` writes first; the crash comes before the cut.
    let layout = Layout::new(file.as_ref(), &small()).unwrap();
    let flagged = Checkpoint {
        sequence: last.sequence + 1,
        lsn: Lsn(next_lsn.0.next_multiple_of(layout.ring_bytes)),
        ring_growing: true,
        ..last
    };
    write_checkpoint(
        file.as_ref(),
        &layout,
        (flagged.sequence % 2) as usize,
        &flagged,
    )
    .unwrap();
    let whole = file.len().unwrap();
    let (wal, checkpoint) = Wal::open(file.clone(), &small(), |_| {
        panic!("records of earlier laps are not this lap's")
    })
    .unwrap();
    assert_eq!(checkpoint, flagged);
    assert_eq!(file.len().unwrap(), whole);
    assert_eq!(log_one_then_replay(wal, file, 1000, &mut rng), vec![1000]);
}

/// Appends group `n` to `wal` (a `small()` log in `file`), syncs it, and
/// returns what a reopen replays.
fn log_one_then_replay(wal: Wal, file: Arc<dyn BlockFile>, n: u64, rng: &mut SmallRng) -> Vec<u64> {
    let range = wal.append(&numbered_group(n, rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    drop(wal);
    replay(file, &small()).unwrap().1
}

#[test]
fn crashes_while_the_ring_grows_lose_nothing_acknowledged() {
    for seed in 0..20u64 {
        crash_twice(seed, &large(), |file| {
            let len = file.len().unwrap();
            assert!(
                len < 32 << 20,
                "seed {seed}: a ring of {len} bytes is whole"
            );
        });
    }
}

/// Appends write `n` as `groups` groups (all but the last continued), the
/// last one numbered `n`, the earlier ones `n * 1000 + k`.
fn append_write(wal: &Wal, n: u64, groups: u64, rng: &mut SmallRng) -> LsnRange {
    for k in 1..groups {
        let mut group = numbered_group(n * 1000 + k, rng);
        group.set_continued(true);
        wal.append(&group).unwrap();
    }
    wal.append(&numbered_group(n, rng)).unwrap()
}

#[test]
fn a_write_over_several_groups_replays_whole_or_not_at_all() {
    let file: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let mut rng = SmallRng::seed_from_u64(21);
    let (wal, _) = replay(file.clone(), &small()).unwrap();
    let whole = append_write(&wal, 1, 4, &mut rng);
    wal.flush_to(whole.end).unwrap();
    // The next write's first two groups are synced, its last never written.
    let mut unfinished = numbered_group(2001, &mut rng);
    unfinished.set_continued(true);
    wal.append(&unfinished).unwrap();
    unfinished = numbered_group(2002, &mut rng);
    unfinished.set_continued(true);
    let cut = wal.append(&unfinished).unwrap();
    wal.flush_to(cut.end).unwrap();
    drop(wal);
    let (wal, seen) = replay(file.clone(), &small()).unwrap();
    assert_eq!(seen, vec![1001, 1002, 1003, 1], "the whole write, in order");
    // A write after recovery starts where the whole one ended: it can never
    // finish the dropped one.
    assert!(wal.next_lsn().0 < cut.end.0);
    let next = wal.append(&numbered_group(3, &mut rng)).unwrap();
    wal.flush_to(next.end).unwrap();
    drop(wal);
    let (_, seen) = replay(file, &small()).unwrap();
    assert_eq!(seen, vec![1001, 1002, 1003, 1, 3]);
}

#[test]
fn crashes_keep_writes_over_several_groups_whole() {
    for seed in 0..60u64 {
        let inner: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
        let mut rng = SmallRng::seed_from_u64(seed);
        let fault = crashing_file(&inner, seed, rng.random_range(3..12));
        let (wal, _) = replay(fault.clone(), &small()).unwrap();
        // Writes of one to four groups; some synced (acknowledged).
        let mut acknowledged = 0;
        let mut appended = 0;
        for n in 1..60u64 {
            let range = append_write(&wal, n, rng.random_range(1..5), &mut rng);
            appended = n;
            if rng.random_bool(0.3) {
                if wal.flush_to(range.end).is_err() {
                    break;
                }
                acknowledged = n;
            }
        }
        drop(wal);
        fault.crash().unwrap();
        let (_, seen) = replay(inner, &small()).unwrap();
        // Whole writes, in order: each write's earlier groups right before
        // its last one, and nothing of a write after the last replayed.
        let mut expected_next = 1;
        let mut pending: Vec<u64> = Vec::new();
        for &s in &seen {
            if s >= 1000 {
                pending.push(s);
                continue;
            }
            assert_eq!(s, expected_next, "seed {seed}: {seen:?}");
            let parts: Vec<u64> = (1..=pending.len() as u64).map(|k| s * 1000 + k).collect();
            assert_eq!(pending, parts, "seed {seed}: write {s} not whole: {seen:?}");
            pending.clear();
            expected_next += 1;
        }
        assert!(pending.is_empty(), "seed {seed}: part of a write: {seen:?}");
        let last = expected_next - 1;
        assert!(
            last >= acknowledged && last <= appended,
            "seed {seed}: {last}"
        );
    }
}

/// A log with a log writer thread, as the database runs it, once the
/// thread takes hand-offs (until then, appends flush full buffers
/// themselves).
fn with_log_writer(wal: Wal) -> (Arc<Wal>, std::thread::JoinHandle<()>) {
    let wal = Arc::new(wal);
    let writer = {
        let wal = Arc::clone(&wal);
        std::thread::spawn(move || wal.run_log_writer())
    };
    while !wal.state.lock().log_writer_running {
        std::thread::yield_now();
    }
    (wal, writer)
}

#[test]
fn crashes_with_a_log_writer_lose_nothing_acknowledged_and_resurrect_nothing() {
    let mut torn_tails = 0;
    let mut handed_off = 0;
    for seed in 0..40u64 {
        let inner: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
        let mut rng = SmallRng::seed_from_u64(seed);
        let fault = crashing_file(&inner, seed, rng.random_range(3..12));
        let (wal, _) = replay(fault.clone(), &small()).unwrap();
        let (wal, writer) = with_log_writer(wal);
        let (mut acknowledged, mut appended) = (0, 0);
        for n in 0..200 {
            // A flush that failed on the log writer poisons the log: the
            // append fails, as a flush on this thread would have.
            let Ok(range) = wal.append(&numbered_group(n, &mut rng)) else {
                break;
            };
            appended = n + 1;
            if rng.random_bool(0.1) {
                if wal.flush_to(range.end).is_err() {
                    break;
                }
                acknowledged = n + 1;
            }
        }
        let flushes = wal.stats().flushes;
        wal.stop_log_writer();
        writer.join().unwrap();
        drop(wal);
        fault.crash().unwrap();
        let (_, seen) = replay(inner, &small()).unwrap();
        check_prefix(&seen, 0, acknowledged, appended);
        torn_tails += u64::from((seen.len() as u64) < appended);
        // More flushes than acknowledged syncs: some were hand-offs.
        handed_off += u64::from(flushes > acknowledged.min(1));
    }
    assert!(torn_tails > 10, "too few crashes cut the log: {torn_tails}");
    assert!(
        handed_off > 10,
        "the log writer flushed too rarely: {handed_off}"
    );
}

#[test]
fn an_append_that_fills_the_buffer_leaves_its_write_to_the_log_writer() {
    let latency = std::time::Duration::from_millis(300);
    let inner: Arc<dyn BlockFile> = Arc::new(MemoryFile::new("wal"));
    let slow: Arc<dyn BlockFile> = Arc::new(FaultFile::with_latency(inner.clone(), latency));
    let (wal, _) = replay(slow, &small()).unwrap();
    let (wal, writer) = with_log_writer(wal);
    let mut rng = SmallRng::seed_from_u64(9);
    // Fill the 16 KiB buffer: the append past it hands the buffer off,
    // which the log writer then takes 300 ms to write.
    let mut n = 0;
    let mut slowest = std::time::Duration::ZERO;
    while n < 1000 {
        let started = std::time::Instant::now();
        wal.append(&numbered_group(n, &mut rng)).unwrap();
        slowest = slowest.max(started.elapsed());
        n += 1;
        if wal.state.lock().flushing {
            break;
        }
    }
    assert!(wal.state.lock().flushing, "no hand-off after {n} groups");
    assert!(
        slowest < latency,
        "an append waited {slowest:?} for a write of {latency:?}"
    );
    // The hand-off becomes durable without this thread writing anything.
    let end = wal.next_lsn();
    wal.flush_to(end).unwrap();
    wal.stop_log_writer();
    writer.join().unwrap();
    drop(wal);
    let (_, seen) = replay(inner, &small()).unwrap();
    assert_eq!(seen, (0..n).collect::<Vec<_>>());
}
