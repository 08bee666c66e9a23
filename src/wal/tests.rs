//! Tests of the write-ahead log against a model of what was acknowledged.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use barracuda_base::{Lsn, PageId};
use barracuda_io::{
    BlockFile, CompletionSender, FaultConfig, FaultFile, IoError, IoRequest, MemoryFile,
};
use parking_lot::Mutex;
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

/// Opens the log in `dir`, returning it and the sequence numbers replayed.
fn replay(dir: &Arc<MemLogDir>, options: &WalOptions) -> Result<(Wal, Vec<u64>)> {
    let mut seen = Vec::new();
    let (wal, _) = Wal::open(dir.clone(), options, |group| {
        seen.push(sequence_of(group));
        Ok(())
    })?;
    Ok((wal, seen))
}

/// A log with a budget of `log_bytes` and a 16 KiB buffer (flushes come
/// often).
fn with_budget(log_bytes: u64) -> WalOptions {
    WalOptions::default()
        .log_bytes(log_bytes)
        .buffer_bytes_max(16 << 10)
}

fn small() -> WalOptions {
    with_budget(256 << 10)
}

fn new_dir() -> Arc<MemLogDir> {
    Arc::new(MemLogDir::default())
}

/// Starts a segment and checkpoints at its start, as the Db does once the
/// pages are written (here: nothing to write).
fn checkpoint_now(wal: &Wal, payload: &[u8]) -> Lsn {
    let lsn = wal.rotate().unwrap();
    wal.checkpoint(lsn, payload).unwrap();
    lsn
}

#[test]
fn appended_groups_replay_in_order_after_reopen() {
    let dir = new_dir();
    let mut rng = SmallRng::seed_from_u64(1);
    let (wal, seen) = replay(&dir, &small()).unwrap();
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
    let (_, seen) = replay(&dir, &small()).unwrap();
    assert_eq!(seen, (0..100).collect::<Vec<_>>());
}

#[test]
fn checkpoints_delete_the_segments_before_them() {
    let dir = new_dir();
    let options = WalOptions::default()
        .log_bytes(64 << 10)
        .buffer_bytes_max(4 << 10);
    let mut rng = SmallRng::seed_from_u64(2);
    let (wal, _) = replay(&dir, &options).unwrap();
    let mut first_after_checkpoint = 0;
    let mut checkpoints = 0;
    for n in 0..2000u64 {
        let range = match wal.append(&numbered_group(n, &mut rng)) {
            Ok(range) => range,
            Err(Error::LogFull { .. }) => {
                // Everything so far is "in the data file": checkpoint at
                // the end of the log and retry.
                checkpoint_now(&wal, b"x");
                checkpoints += 1;
                first_after_checkpoint = n;
                wal.append(&numbered_group(n, &mut rng)).unwrap()
            }
            Err(e) => panic!("{e}"),
        };
        wal.flush_to(range.end).unwrap();
        // Never more than the segment being written and one before it.
        assert!(dir.segments().unwrap().len() <= 2);
    }
    assert!(checkpoints > 10, "{checkpoints} checkpoints");
    let stats = wal.stats();
    assert_eq!(stats.segments_removed, checkpoints);
    assert_eq!(stats.segments, 1);
    assert!(
        stats.file_bytes < (64 << 10) + ZERO_AHEAD_BYTES + (16 << 10),
        "{stats:?}"
    );
    drop(wal);
    let (_, seen) = replay(&dir, &options).unwrap();
    assert_eq!(seen, (first_after_checkpoint..2000).collect::<Vec<_>>());
}

#[test]
fn a_full_log_is_an_error_until_a_checkpoint() {
    let dir = new_dir();
    let options = WalOptions::default()
        .log_bytes(64 << 10)
        .buffer_bytes_max(4 << 10);
    let (wal, _) = replay(&dir, &options).unwrap();
    let mut group = RedoGroup::new();
    group.patch(PageId(1), 0, &[7; 1000]);
    let mut full = None;
    for _ in 0..100 {
        if let Err(e) = wal.append(&group) {
            full = Some(e);
            break;
        }
    }
    assert!(matches!(full, Some(Error::LogFull { .. })), "{full:?}");
    checkpoint_now(&wal, &[]);
    wal.append(&group).unwrap();
}

#[test]
fn concurrent_committers_share_syncs() {
    let dir = new_dir();
    let options = WalOptions::default().log_bytes(8 << 20);
    let (wal, _) = replay(&dir, &options).unwrap();
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
    let (_, mut seen) = replay(&dir, &options).unwrap();
    seen.sort_unstable();
    assert_eq!(seen, (0..commits).collect::<Vec<_>>());
}

/// A file of a crashing log: its syncs are counted over all the log's
/// files, and from the `fail_at`-th on they fail (the moment of the crash)
/// without reaching the fault file below, whose unsynced writes the crash
/// then keeps, drops or tears.
#[derive(Debug)]
struct CrashAt {
    inner: Arc<FaultFile>,
    syncs: Arc<AtomicU64>,
    fail_at: u64,
}

impl BlockFile for CrashAt {
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> std::result::Result<(), IoError> {
        self.inner.read_at(offset_bytes, buf)
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> std::result::Result<(), IoError> {
        self.inner.write_at(offset_bytes, data)
    }

    fn sync_data(&self) -> std::result::Result<(), IoError> {
        if self.syncs.fetch_add(1, Ordering::Relaxed) + 1 >= self.fail_at {
            return Err(IoError::FsyncFailed {
                path: self.path().to_path_buf(),
                source: std::io::Error::other("the power went out"),
            });
        }
        self.inner.sync_data()
    }

    fn len(&self) -> std::result::Result<u64, IoError> {
        self.inner.len()
    }

    fn set_len(&self, len_bytes: u64) -> std::result::Result<(), IoError> {
        self.inner.set_len(len_bytes)
    }

    fn alignment(&self) -> barracuda_io::Alignment {
        self.inner.alignment()
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn submit(&self, requests: Vec<IoRequest>, completions: &CompletionSender) {
        self.inner.submit(requests, completions);
    }
}

/// A log whose files crash at the `fail_at`-th sync (see [`CrashAt`]),
/// over the memory files of `base` (new ones are made there too).
struct Crashing {
    dir: Arc<MemLogDir>,
    faults: Arc<Mutex<Vec<Arc<FaultFile>>>>,
}

impl Crashing {
    fn new(base: &MemLogDir, seed: u64, fail_at: u64) -> Crashing {
        let faults: Arc<Mutex<Vec<Arc<FaultFile>>>> = Arc::default();
        let syncs = Arc::new(AtomicU64::new(0));
        let captured = faults.clone();
        let make: FileWrap = Arc::new(move |_: &Path, file: Arc<dyn BlockFile>| {
            let mut faults = captured.lock();
            let config = FaultConfig::default()
                .seed(seed * 100 + faults.len() as u64)
                .tear_writes(true);
            let fault = Arc::new(FaultFile::new(file, config));
            faults.push(fault.clone());
            Arc::new(CrashAt {
                inner: fault,
                syncs: syncs.clone(),
                fail_at,
            }) as Arc<dyn BlockFile>
        });
        Crashing {
            dir: Arc::new(base.reopen_with(make)),
            faults,
        }
    }

    /// Every file loses what it did not sync; returns the files as they
    /// are then.
    fn crash(self) -> Arc<MemLogDir> {
        for fault in self.faults.lock().iter() {
            fault.crash().unwrap();
        }
        Arc::new(self.dir.reopen_with(Arc::new(|_: &Path, file| file)))
    }
}

/// What one crash epoch did: acknowledged and appended sequence numbers
/// (ends), and where the replay may start: the first number after the last
/// checkpoint recorded (the epoch's first if none), or either of two if
/// the crash came while the last one was being recorded.
struct Epoch {
    acknowledged: u64,
    appended: u64,
    starts: Vec<u64>,
}

/// One crash epoch: appends groups `first..first + count`, flushing now and
/// then and now and then checkpointing (a new segment), until a flush fails
/// (the injected sync error: the moment of the crash, with that flush's
/// write in the file but not synced).
fn run_until_crash(wal: &Wal, first: u64, count: u64, rng: &mut SmallRng) -> Epoch {
    let mut epoch = Epoch {
        acknowledged: first,
        appended: first,
        starts: vec![first],
    };
    for n in first..first + count {
        let Ok(range) = wal.append(&numbered_group(n, rng)) else {
            return epoch;
        };
        epoch.appended = n + 1;
        if rng.random_bool(0.3) {
            if wal.flush_to(range.end).is_err() {
                return epoch;
            }
            epoch.acknowledged = n + 1;
        }
        if rng.random_bool(0.08) {
            let Ok(lsn) = wal.rotate() else {
                return epoch;
            };
            epoch.acknowledged = n + 1;
            if wal.checkpoint(lsn, b"").is_err() {
                epoch.starts.push(n + 1);
                return epoch;
            }
            epoch.starts = vec![n + 1];
        }
    }
    epoch
}

/// Checks the replay after an epoch's crash: `prefix` (what the epoch
/// started from) then the epoch's groups from `base`, if no checkpoint of
/// the epoch took; else the epoch's groups from where one did. Returns
/// whether the crash cut the epoch's groups short.
fn check_replay(seed: u64, seen: &[u64], prefix: &[u64], base: u64, epoch: &Epoch) -> bool {
    let latest = epoch.starts.iter().copied().max().unwrap_or(base);
    let continues = epoch.starts.contains(&base)
        && seen.starts_with(prefix)
        && seen.get(prefix.len()) == Some(&base);
    let (ours, start) = if continues {
        (&seen[prefix.len()..], base)
    } else if let Some(&first) = seen.first().filter(|&&n| n >= base) {
        assert!(
            epoch.starts.contains(&first),
            "seed {seed}: replay starts at {first}, not at one of {:?}: {seen:?}",
            epoch.starts
        );
        (seen, first)
    } else if seen.is_empty() {
        // Nothing replayed: from the epoch's latest checkpoint, if one took.
        (seen, latest)
    } else {
        // What the epoch started from, and nothing of its own.
        assert_eq!(seen, prefix, "seed {seed}");
        (&seen[..0], base)
    };
    check_prefix(
        ours,
        start,
        epoch.acknowledged.max(start),
        epoch.appended.max(start),
    );
    start + (ours.len() as u64) < epoch.appended
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

/// Two crash epochs on a new log with `options`: appends until an injected
/// sync failure, crashes, recovers (`after_first` sees the files then), and
/// does it again with new numbers; what epoch 1 lost must never come back,
/// even after the second crash. Returns whether the first crash cut the
/// log's tail.
fn crash_twice(seed: u64, options: &WalOptions, after_first: impl Fn(&MemLogDir)) -> bool {
    let mut rng = SmallRng::seed_from_u64(seed);

    // Epoch 1: a new log (2 syncs and a directory sync to create),
    // crashing mid-flush, or at a new segment.
    let crashing = Crashing::new(&MemLogDir::default(), seed, rng.random_range(3..16));
    let (wal, _) = replay(&crashing.dir, options).unwrap();
    let epoch1 = run_until_crash(&wal, 0, 80, &mut rng);
    drop(wal);
    let dir = crashing.crash();
    let (wal, seen1) = replay(&dir, options).unwrap();
    drop(wal);
    let cut = check_replay(seed, &seen1, &[], 0, &epoch1);
    after_first(&dir);

    // Epoch 2 continues with new numbers after recovery (1 sync to clean
    // the tail).
    let crashing = Crashing::new(&dir, seed + 1000, rng.random_range(2..16));
    let (wal, seen) = replay(&crashing.dir, options).unwrap();
    assert_eq!(seen, seen1);
    let epoch2 = run_until_crash(&wal, 1000, 80, &mut rng);
    drop(wal);
    let dir = crashing.crash();
    let (_, seen2) = replay(&dir, options).unwrap();
    check_replay(seed, &seen2, &seen1, 1000, &epoch2);
    cut
}

#[test]
fn crashes_lose_nothing_acknowledged_and_resurrect_nothing() {
    let torn_tails = (0..60u64)
        .filter(|&seed| crash_twice(seed, &small(), |_| {}))
        .count();
    assert!(torn_tails > 20, "too few crashes cut the log: {torn_tails}");
}

#[test]
fn crashes_around_new_segments_lose_nothing_acknowledged() {
    // A small budget: the appends run out of it and checkpoint often.
    for seed in 0..40u64 {
        crash_twice(seed, &with_budget(64 << 10), |dir| {
            assert!(dir.segments().unwrap().len() <= 3, "seed {seed}");
        });
    }
}

/// The segment file whose stream holds `lsn`.
fn segment_of(dir: &MemLogDir, lsn: u64) -> (u64, Arc<MemoryFile>) {
    let first = dir
        .segments()
        .unwrap()
        .into_iter()
        .rev()
        .find(|&f| f <= lsn)
        .unwrap();
    (first, dir.file(&segment_file_name(first)).unwrap())
}

#[test]
fn damage_to_synced_records_is_reported_not_cut_off() {
    let dir = new_dir();
    let mut rng = SmallRng::seed_from_u64(3);
    let (wal, _) = replay(&dir, &small()).unwrap();
    let first = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(first.end).unwrap();
    for n in 1..5 {
        let range = wal.append(&numbered_group(n, &mut rng)).unwrap();
        wal.flush_to(range.end).unwrap();
    }
    drop(wal);
    // Flip a bit inside the first group's body.
    let (first_lsn, file) = segment_of(&dir, first.start.0);
    let offset = segment::header_bytes(512) + first.start.0 + 40 - first_lsn;
    let sector = offset - offset % 512;
    let mut buf = file.alloc_buf(512);
    file.read_at(sector, &mut buf).unwrap();
    buf[(offset - sector) as usize] ^= 0x10;
    file.write_at(sector, &buf).unwrap();
    let err = replay(&dir, &small()).expect_err("damage must be reported");
    assert!(
        matches!(err, Error::LogCorrupted { lsn, .. } if lsn == first.start),
        "{err}"
    );
}

#[test]
fn the_checkpoint_payload_survives_reopen() {
    let dir = new_dir();
    let mut rng = SmallRng::seed_from_u64(4);
    let (wal, checkpoint) = Wal::open(dir.clone(), &small(), |_| Ok(())).unwrap();
    assert_eq!(checkpoint.sequence, 0);
    assert_eq!(checkpoint.format_version, CHECKPOINT_FORMAT_VERSION);
    let range = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    wal.checkpoint(range.start, b"catalog at page 1").unwrap();
    drop(wal);
    let (_, checkpoint) = Wal::open(dir.clone(), &small(), |_| Ok(())).unwrap();
    assert_eq!(checkpoint.lsn, range.start);
    assert_eq!(checkpoint.payload, b"catalog at page 1");
    // The group after the checkpoint LSN is replayed again.
    let (_, seen) = replay(&dir, &small()).unwrap();
    assert_eq!(seen, vec![0]);
}

#[test]
fn a_failed_sync_poisons_the_log() {
    use barracuda_io::{FaultErrno, FaultOp, FaultRule};
    // Opening a new log creates its segment (a sync), then opens it again
    // for the appends: fail that file's second sync, the second flush.
    let make: FileWrap = Arc::new(|path: &Path, file: Arc<dyn BlockFile>| {
        if path == Path::new(CONTROL_FILE_NAME) {
            return file;
        }
        let config = FaultConfig::default().seed(5).rule(FaultRule::Nth {
            op: FaultOp::Sync,
            nth: 2,
            errno: FaultErrno::Eio,
        });
        Arc::new(FaultFile::new(file, config)) as Arc<dyn BlockFile>
    });
    let dir = Arc::new(MemLogDir::new(make));
    let (wal, _) = replay(&dir, &small()).unwrap();
    let mut rng = SmallRng::seed_from_u64(5);
    let range = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    let range = wal.append(&numbered_group(1, &mut rng)).unwrap();
    assert!(
        wal.flush_to(range.end).is_err(),
        "the injected EIO must surface"
    );
    assert!(wal.durable_lsn() < range.end);
    // Every later append, flush and new segment fails: nothing is
    // acknowledged again.
    let err = wal
        .append(&numbered_group(2, &mut rng))
        .expect_err("poisoned");
    assert!(matches!(err, Error::LogFailed { .. }), "{err}");
    assert!(matches!(
        wal.flush_to(range.end),
        Err(Error::LogFailed { .. })
    ));
    assert!(matches!(wal.rotate(), Err(Error::LogFailed { .. })));
}

#[test]
fn a_segment_grows_a_few_mib_ahead_of_its_log() {
    let dir = new_dir();
    let mut rng = SmallRng::seed_from_u64(11);
    let options = with_budget(32 << 20);
    let (wal, _) = Wal::open(dir.clone(), &options, |_| Ok(())).unwrap();
    assert!(
        dir.total_bytes() <= 8 << 10,
        "a new log is its slots and a segment's header"
    );
    let mut end = Lsn(0);
    for n in 0..50 {
        end = wal.append(&numbered_group(n, &mut rng)).unwrap().end;
    }
    wal.flush_to(end).unwrap();
    let grown = dir.total_bytes();
    assert!(
        grown > end.0 && grown < (8 << 20),
        "{grown} bytes: the log and 4 MiB of zeros ahead"
    );
    // A checkpoint starts a new segment and deletes the old one: the files
    // shrink to what came after it.
    checkpoint_now(&wal, b"");
    assert!(dir.total_bytes() <= 8 << 10, "{} bytes", dir.total_bytes());
    for n in 50..60 {
        end = wal.append(&numbered_group(n, &mut rng)).unwrap().end;
    }
    wal.flush_to(end).unwrap();
    drop(wal);
    let (wal, seen) = replay(&dir, &options).unwrap();
    assert_eq!(seen, (50..60).collect::<Vec<_>>());
    // Appends go on where the replay ended.
    for n in 60..70 {
        end = wal.append(&numbered_group(n, &mut rng)).unwrap().end;
    }
    wal.flush_to(end).unwrap();
    drop(wal);
    let (_, seen) = replay(&dir, &options).unwrap();
    assert_eq!(seen, (50..70).collect::<Vec<_>>());
    assert!(dir.total_bytes() < 8 << 20);
}

#[test]
fn a_checkpoint_with_nothing_logged_starts_no_segment() {
    let dir = new_dir();
    let (wal, _) = replay(&dir, &small()).unwrap();
    let first = checkpoint_now(&wal, b"");
    assert_eq!(checkpoint_now(&wal, b""), first);
    assert_eq!(dir.segments().unwrap().len(), 1);
    assert_eq!(wal.stats().segments_started, 0);
}

#[test]
fn groups_appended_while_the_checkpoint_runs_survive_it() {
    let dir = new_dir();
    let mut rng = SmallRng::seed_from_u64(16);
    let (wal, _) = replay(&dir, &small()).unwrap();
    for n in 0..10 {
        wal.append(&numbered_group(n, &mut rng)).unwrap();
    }
    let lsn = wal.rotate().unwrap();
    assert_eq!(
        wal.durable_lsn(),
        lsn,
        "a new segment starts after synced log"
    );
    // The pages are being written; meanwhile the log goes on.
    let mut end = Lsn(0);
    for n in 10..20 {
        end = wal.append(&numbered_group(n, &mut rng)).unwrap().end;
    }
    wal.flush_to(end).unwrap();
    assert_eq!(dir.segments().unwrap().len(), 2);
    wal.checkpoint(lsn, b"").unwrap();
    assert_eq!(dir.segments().unwrap(), vec![lsn.0]);
    drop(wal);
    let (_, seen) = replay(&dir, &small()).unwrap();
    assert_eq!(seen, (10..20).collect::<Vec<_>>());
}

#[test]
fn replay_runs_across_segments_until_the_checkpoint_passes_them() {
    let dir = new_dir();
    let mut rng = SmallRng::seed_from_u64(17);
    let (wal, _) = replay(&dir, &small()).unwrap();
    let mut end = Lsn(0);
    for n in 0..30 {
        end = wal.append(&numbered_group(n, &mut rng)).unwrap().end;
        if n % 10 == 9 {
            // A checkpoint that started a segment but was not recorded (a
            // crash while it wrote pages).
            wal.rotate().unwrap();
        }
    }
    wal.flush_to(end).unwrap();
    drop(wal);
    assert_eq!(dir.segments().unwrap().len(), 4);
    let (_, seen) = replay(&dir, &small()).unwrap();
    assert_eq!(seen, (0..30).collect::<Vec<_>>());
}

#[test]
fn segments_a_checkpoint_did_not_get_to_delete_are_deleted_at_open() {
    let dir = new_dir();
    let mut rng = SmallRng::seed_from_u64(18);
    let (wal, _) = replay(&dir, &small()).unwrap();
    let old = dir.segments().unwrap()[0];
    let old_file = dir.file(&segment_file_name(old)).unwrap();
    let range = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    checkpoint_now(&wal, b"");
    let range = wal.append(&numbered_group(1, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    drop(wal);
    // The deletion did not reach the disk: the old segment is back.
    let _ = dir.open_name(&segment_file_name(old), true).unwrap();
    let resurrected = dir.file(&segment_file_name(old)).unwrap();
    let mut bytes = old_file.alloc_buf(old_file.len().unwrap() as usize);
    old_file.read_at(0, &mut bytes).unwrap();
    resurrected.write_at(0, &bytes).unwrap();
    assert_eq!(dir.segments().unwrap().len(), 2);
    let (_, seen) = replay(&dir, &small()).unwrap();
    assert_eq!(seen, vec![1], "only what follows the checkpoint");
    assert_eq!(dir.segments().unwrap().len(), 1, "the stale one is gone");
}

#[test]
fn a_segment_whose_creation_was_cut_short_is_removed_at_open() {
    let dir = new_dir();
    let mut rng = SmallRng::seed_from_u64(19);
    let (wal, _) = replay(&dir, &small()).unwrap();
    let range = wal.append(&numbered_group(0, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    let next = wal.durable_lsn().0;
    drop(wal);
    // The file of the next segment exists, its header never written.
    let _ = dir.open_name(&segment_file_name(next), true);
    let (wal, seen) = replay(&dir, &small()).unwrap();
    assert_eq!(seen, vec![0]);
    assert_eq!(dir.segments().unwrap().len(), 1);
    let range = wal.append(&numbered_group(1, &mut rng)).unwrap();
    wal.flush_to(range.end).unwrap();
    drop(wal);
    assert_eq!(replay(&dir, &small()).unwrap().1, vec![0, 1]);
}

#[test]
fn a_missing_or_damaged_segment_is_an_error() {
    let dir = new_dir();
    let mut rng = SmallRng::seed_from_u64(20);
    let (wal, _) = replay(&dir, &small()).unwrap();
    for n in 0..3 {
        let range = wal.append(&numbered_group(n, &mut rng)).unwrap();
        wal.flush_to(range.end).unwrap();
        wal.rotate().unwrap();
    }
    drop(wal);
    let segments = dir.segments().unwrap();
    assert_eq!(segments.len(), 4);
    // A damaged header in the middle.
    let file = dir.file(&segment_file_name(segments[1])).unwrap();
    let mut header = file.alloc_buf(512);
    file.read_at(0, &mut header).unwrap();
    header[9] ^= 1;
    file.write_at(0, &header).unwrap();
    let err = replay(&dir, &small()).expect_err("a damaged header");
    assert!(matches!(err, Error::LogCorrupted { .. }), "{err}");
    header[9] ^= 1;
    file.write_at(0, &header).unwrap();
    assert_eq!(replay(&dir, &small()).unwrap().1, vec![0, 1, 2]);
    // A segment in the middle gone: the log ends before the last one.
    dir.remove_segment(segments[1]).unwrap();
    let err = replay(&dir, &small()).expect_err("a missing segment");
    assert!(matches!(err, Error::LogCorrupted { .. }), "{err}");
    // The checkpoint's own segment gone.
    dir.remove_segment(segments[0]).unwrap();
    let err = replay(&dir, &small()).expect_err("no segment for the checkpoint");
    assert!(matches!(err, Error::LogCorrupted { .. }), "{err}");
}

/// The log of an earlier build (a version 6 slot, its ring after the
/// slots in the control file) is refused as a format this build does not
/// read, and left as it was: no segment made, the control file unchanged.
#[test]
fn the_log_of_an_earlier_build_is_refused_and_left_as_it_was() {
    let dir = new_dir();
    let control = dir.control().unwrap();
    control
        .set_len(checkpoint::control_file_bytes(512) + (256 << 10))
        .unwrap();
    let slot = Checkpoint {
        format_version: 6,
        sequence: 5,
        lsn: Lsn(4096),
        log_bytes: 256 << 10,
        ring_growing: false,
        payload: b"catalog".to_vec(),
    };
    write_checkpoint(control.as_ref(), 512, 1, &slot).unwrap();
    let read_all = || {
        let mut bytes = control.alloc_buf(control.len().unwrap() as usize);
        control.read_at(0, &mut bytes).unwrap();
        bytes.to_vec()
    };
    let before = read_all();
    let err = replay(&dir, &small()).expect_err("an earlier build's log");
    assert!(matches!(err, Error::CheckpointCorrupted { .. }), "{err}");
    assert!(err.to_string().contains("not supported"), "{err}");
    assert!(read_all() == before, "the control file changed");
    assert!(dir.segments().unwrap().is_empty());
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
    let dir = new_dir();
    let mut rng = SmallRng::seed_from_u64(21);
    let (wal, _) = replay(&dir, &small()).unwrap();
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
    let (wal, seen) = replay(&dir, &small()).unwrap();
    assert_eq!(seen, vec![1001, 1002, 1003, 1], "the whole write, in order");
    // A write after recovery starts where the whole one ended: it can never
    // finish the dropped one.
    assert!(wal.next_lsn().0 < cut.end.0);
    let next = wal.append(&numbered_group(3, &mut rng)).unwrap();
    wal.flush_to(next.end).unwrap();
    drop(wal);
    let (_, seen) = replay(&dir, &small()).unwrap();
    assert_eq!(seen, vec![1001, 1002, 1003, 1, 3]);
}

#[test]
fn crashes_keep_writes_over_several_groups_whole() {
    for seed in 0..60u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let crashing = Crashing::new(&MemLogDir::default(), seed, rng.random_range(3..14));
        let (wal, _) = replay(&crashing.dir, &small()).unwrap();
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
        let dir = crashing.crash();
        let (_, seen) = replay(&dir, &small()).unwrap();
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
        let mut rng = SmallRng::seed_from_u64(seed);
        let crashing = Crashing::new(&MemLogDir::default(), seed, rng.random_range(3..14));
        let (wal, _) = replay(&crashing.dir, &small()).unwrap();
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
        let dir = crashing.crash();
        let (_, seen) = replay(&dir, &small()).unwrap();
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
    let make: FileWrap = Arc::new(move |_: &Path, file: Arc<dyn BlockFile>| {
        Arc::new(FaultFile::with_latency(file, latency)) as Arc<dyn BlockFile>
    });
    let dir = Arc::new(MemLogDir::new(make));
    let (wal, _) = replay(&dir, &small()).unwrap();
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
    // A new segment waits for the hand-off, and starts after it.
    let end = wal.next_lsn();
    let lsn = wal.rotate().unwrap();
    assert!(lsn >= end && wal.durable_lsn() >= end);
    wal.stop_log_writer();
    writer.join().unwrap();
    drop(wal);
    let dir = Arc::new(dir.reopen_with(Arc::new(|_: &Path, file| file)));
    let (_, seen) = replay(&dir, &small()).unwrap();
    assert_eq!(seen, (0..n).collect::<Vec<_>>());
}
