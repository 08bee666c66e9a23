//! The fault-injecting backend: wraps any [`BlockFile`], seeded and
//! reproducible.
//!
//! Fault model:
//! - **Crash** ([`FaultFile::crash`]): every write and `set_len` since the
//!   last successful `sync_data` is, independently and in order, kept,
//!   dropped, or (writes only, if tearing is on) torn: each of its
//!   sectors (512 bytes, or the inner file's alignment if larger) is kept
//!   or dropped on its own. A sector is never torn inside. Everything that
//!   a successful `sync_data` covered survives. A dropped write that had
//!   extended the file takes the extension with it; a dropped shrink brings
//!   the cut bytes back. Afterwards the file behaves as if reopened: the
//!   sticky sync failure is cleared.
//! - **Errors on a schedule** ([`FaultRule`]): the n-th read, write or sync
//!   (counted from 1 since creation), or each with a seeded probability,
//!   fails with EIO or ENOSPC. A failed write or read changes nothing; a
//!   failed sync makes the file refuse writes and syncs (sticky) and leaves
//!   the unsynced writes exposed to the next crash.
//! - **Capacity**: a write or `set_len` ending past `capacity_bytes` fails
//!   with ENOSPC and changes nothing.
//! - **Latency**: every read, write and sync sleeps `latency` first,
//!   without holding any lock, so concurrent requests overlap like on a
//!   device with a queue; a batch sleeps once, on its own thread.
//!
//! Crash tracking keeps the old and new bytes of every unsynced write in
//! memory until the next sync; turn it off for latency-only use.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::BlockFile;
use crate::batch::{CompletionSender, IoOp, IoRequest};
use crate::buf::{AlignedBuf, Alignment, SECTOR_SIZE_BYTES};
use crate::error::{IoError, OpKind};
use crate::sys::SyncState;

/// Which operation a [`FaultRule`] targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOp {
    /// `read_at` and batched reads.
    Read,
    /// `write_at` and batched writes.
    Write,
    /// `sync_data`.
    Sync,
}

/// The error a rule injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultErrno {
    /// EIO: the device failed.
    Eio,
    /// ENOSPC: no space left.
    Enospc,
}

impl FaultErrno {
    fn raw(self) -> i32 {
        match self {
            FaultErrno::Eio => libc::EIO,
            FaultErrno::Enospc => libc::ENOSPC,
        }
    }
}

/// When to inject an error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FaultRule {
    /// The `nth` operation of kind `op` (1-based) fails.
    Nth {
        /// Which operations are counted.
        op: FaultOp,
        /// Which one fails.
        nth: u64,
        /// With what.
        errno: FaultErrno,
    },
    /// Each operation of kind `op` fails with this probability (seeded).
    Random {
        /// Which operations.
        op: FaultOp,
        /// Probability in 0..=1.
        probability: f64,
        /// With what.
        errno: FaultErrno,
    },
}

/// Configuration of a [`FaultFile`]. `Default` injects nothing and tracks
/// crashes with tearing on.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultConfig {
    seed: u64,
    latency: Duration,
    tear_writes: bool,
    track_crashes: bool,
    capacity_bytes: Option<u64>,
    rules: Vec<FaultRule>,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            seed: 0,
            latency: Duration::ZERO,
            tear_writes: true,
            track_crashes: true,
            capacity_bytes: None,
            rules: Vec::new(),
        }
    }
}

impl FaultConfig {
    /// Seed of every random choice. Default = 0.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Added device latency per request (`--device-latency-us`). Default = 0.
    #[must_use]
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// Whether a crash may tear unsynced writes at sectors (else it keeps
    /// or drops whole writes). Default = true.
    #[must_use]
    pub fn tear_writes(mut self, enabled: bool) -> Self {
        self.tear_writes = enabled;
        self
    }

    /// Whether to remember unsynced writes for [`FaultFile::crash`].
    /// Default = true; turn off for latency-only use.
    #[must_use]
    pub fn track_crashes(mut self, enabled: bool) -> Self {
        self.track_crashes = enabled;
        self
    }

    /// Writes ending past this size fail with ENOSPC. Default = unlimited.
    #[must_use]
    pub fn capacity_bytes(mut self, capacity_bytes: u64) -> Self {
        self.capacity_bytes = Some(capacity_bytes);
        self
    }

    /// Adds an error rule. Default = none.
    #[must_use]
    pub fn rule(mut self, rule: FaultRule) -> Self {
        self.rules.push(rule);
        self
    }
}

/// What a simulated crash did to the unsynced operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Writes and length changes that survived whole.
    pub kept_count: usize,
    /// Writes and length changes that were lost whole.
    pub dropped_count: usize,
    /// Writes of which only some sectors survived.
    pub torn_count: usize,
}

/// One unsynced change, with what is needed to undo and redo it.
#[derive(Debug)]
enum Change {
    Write {
        offset_bytes: u64,
        old_len_bytes: u64,
        old: Vec<u8>,
        new: Vec<u8>,
    },
    SetLen {
        old_len_bytes: u64,
        new_len_bytes: u64,
        cut: Vec<u8>,
    },
}

#[derive(Debug)]
struct FaultState {
    rng: SmallRng,
    /// Unsynced changes in the order they were applied, with their sequence
    /// numbers.
    unsynced: Vec<(u64, Change)>,
    next_seq: u64,
}

impl FaultState {
    fn log(&mut self, change: Change) {
        self.unsynced.push((self.next_seq, change));
        self.next_seq += 1;
    }
}

#[derive(Debug)]
struct Shared {
    inner: Arc<dyn BlockFile>,
    config: FaultConfig,
    state: Mutex<FaultState>,
    sync_state: SyncState,
    op_counts: [AtomicU64; 3],
}

/// A [`BlockFile`] that injects faults into another one (see the module
/// docs for the fault model).
#[derive(Debug, Clone)]
pub struct FaultFile {
    shared: Arc<Shared>,
}

impl FaultFile {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn BlockFile>, config: FaultConfig) -> FaultFile {
        let rng = SmallRng::seed_from_u64(config.seed);
        let state = Mutex::new(FaultState {
            rng,
            unsynced: Vec::new(),
            next_seq: 0,
        });
        let shared = Shared {
            inner,
            config,
            state,
            sync_state: SyncState::default(),
            op_counts: Default::default(),
        };
        FaultFile {
            shared: Arc::new(shared),
        }
    }

    /// Wraps `inner`, only adding `latency` per request (no crash tracking).
    pub fn with_latency(inner: Arc<dyn BlockFile>, latency: Duration) -> FaultFile {
        FaultFile::new(
            inner,
            FaultConfig::default().latency(latency).track_crashes(false),
        )
    }

    /// The wrapped file.
    pub fn inner(&self) -> &Arc<dyn BlockFile> {
        &self.shared.inner
    }

    /// How many unsynced changes a crash would now act on.
    pub fn unsynced_count(&self) -> usize {
        self.shared.state.lock().unsynced.len()
    }

    /// Simulates a crash and reopen (see the module docs). Requests running
    /// concurrently with a crash are a caller bug.
    ///
    /// # Errors
    /// If the inner file fails while rewinding, or crash tracking is off
    /// ([`IoError::InvalidOptions`]).
    pub fn crash(&self) -> Result<CrashReport, IoError> {
        self.shared.crash()
    }
}

impl Shared {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn sleep(&self) {
        if !self.config.latency.is_zero() {
            std::thread::sleep(self.config.latency);
        }
    }

    /// A seeded coin with probability `p` of heads.
    fn roll(&self, p: f64) -> bool {
        self.state.lock().rng.random_bool(p.clamp(0.0, 1.0))
    }

    /// Counts the operation and returns the injected error, if any.
    fn injected(&self, op: FaultOp, offset_bytes: u64, len_bytes: usize) -> Result<(), IoError> {
        let nth = self.op_counts[op as usize].fetch_add(1, Ordering::Relaxed) + 1;
        let mut errno = None;
        for rule in &self.config.rules {
            match *rule {
                FaultRule::Nth {
                    op: o,
                    nth: n,
                    errno: e,
                } if o == op && n == nth => errno = Some(e),
                FaultRule::Random {
                    op: o,
                    probability,
                    errno: e,
                } if o == op && self.roll(probability) => errno = Some(e),
                _ => {}
            }
        }
        let Some(errno) = errno else { return Ok(()) };
        let kind = match op {
            FaultOp::Read => OpKind::Read,
            FaultOp::Write => OpKind::Write,
            FaultOp::Sync => OpKind::Sync,
        };
        let source = std::io::Error::from_raw_os_error(errno.raw());
        Err(IoError::Os {
            op: kind,
            path: self.path().to_path_buf(),
            offset_bytes,
            len_bytes,
            source,
        })
    }

    fn check_capacity(
        &self,
        op: OpKind,
        offset_bytes: u64,
        len_bytes: usize,
        end_bytes: u64,
    ) -> Result<(), IoError> {
        match self.config.capacity_bytes {
            Some(capacity) if end_bytes > capacity => Err(IoError::Os {
                op,
                path: self.path().to_path_buf(),
                offset_bytes,
                len_bytes,
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            }),
            _ => Ok(()),
        }
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.injected(FaultOp::Read, offset_bytes, buf.len())?;
        self.inner.read_at(offset_bytes, buf)
    }

    fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<(), IoError> {
        self.sync_state.check(self.path())?;
        let alignment = self.inner.alignment();
        alignment.check(
            self.path(),
            OpKind::Write,
            offset_bytes,
            data.as_ptr() as usize,
            data.len(),
        )?;
        self.injected(FaultOp::Write, offset_bytes, data.len())?;
        self.check_capacity(
            OpKind::Write,
            offset_bytes,
            data.len(),
            offset_bytes + data.len() as u64,
        )?;
        if !self.config.track_crashes {
            return self.inner.write_at(offset_bytes, data);
        }
        let mut state = self.state.lock();
        let old_len_bytes = self.inner.len()?;
        let old = self.read_existing(offset_bytes, data.len(), old_len_bytes)?;
        self.inner.write_at(offset_bytes, data)?;
        state.log(Change::Write {
            offset_bytes,
            old_len_bytes,
            old,
            new: data.to_vec(),
        });
        Ok(())
    }

    /// The bytes of `[offset, offset + len)` that exist below `len_bytes`.
    fn read_existing(
        &self,
        offset_bytes: u64,
        len: usize,
        file_len_bytes: u64,
    ) -> Result<Vec<u8>, IoError> {
        let end = (offset_bytes + len as u64).min(file_len_bytes);
        if end <= offset_bytes {
            return Ok(Vec::new());
        }
        let mut buf = AlignedBuf::zeroed(
            (end - offset_bytes) as usize,
            self.inner.alignment().mem_bytes,
        );
        self.inner.read_at(offset_bytes, &mut buf)?;
        Ok(buf.to_vec())
    }

    fn set_len(&self, len_bytes: u64) -> Result<(), IoError> {
        self.sync_state.check(self.path())?;
        self.inner.alignment().check_len(self.path(), len_bytes)?;
        self.check_capacity(OpKind::SetLen, len_bytes, 0, len_bytes)?;
        if !self.config.track_crashes {
            return self.inner.set_len(len_bytes);
        }
        let mut state = self.state.lock();
        let old_len_bytes = self.inner.len()?;
        let cut = self.read_existing(
            len_bytes,
            old_len_bytes.saturating_sub(len_bytes) as usize,
            old_len_bytes,
        )?;
        self.inner.set_len(len_bytes)?;
        state.log(Change::SetLen {
            old_len_bytes,
            new_len_bytes: len_bytes,
            cut,
        });
        Ok(())
    }

    fn sync(&self) -> Result<(), IoError> {
        self.sync_state.check(self.path())?;
        self.sleep();
        // Changes logged before the sync starts are the ones it covers.
        let covered_seq = self.state.lock().next_seq;
        let outcome = self
            .injected(FaultOp::Sync, 0, 0)
            .and_then(|()| self.inner.sync_data());
        if let Err(e) = outcome {
            let source = std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO));
            return Err(self.sync_state.fail(self.path(), source));
        }
        // Another sync may have drained some of them already.
        self.state
            .lock()
            .unsynced
            .retain(|(seq, _)| *seq >= covered_seq);
        Ok(())
    }

    fn crash(&self) -> Result<CrashReport, IoError> {
        if !self.config.track_crashes {
            let reason = "FaultFile::crash needs FaultConfig::track_crashes(true)".to_string();
            return Err(IoError::InvalidOptions { reason });
        }
        let mut state = self.state.lock();
        let changes = std::mem::take(&mut state.unsynced);
        for (_, change) in changes.iter().rev() {
            self.undo(change)?;
        }
        let mut report = CrashReport::default();
        for (_, change) in &changes {
            self.redo_some(change, &mut state.rng, &mut report)?;
        }
        self.inner.sync_data()?;
        self.sync_state.reset();
        Ok(report)
    }

    fn undo(&self, change: &Change) -> Result<(), IoError> {
        match change {
            Change::Write {
                offset_bytes,
                old_len_bytes,
                old,
                new,
            } => {
                if !old.is_empty() {
                    self.inner.write_at(*offset_bytes, &self.aligned(old))?;
                }
                if offset_bytes + new.len() as u64 > *old_len_bytes {
                    self.inner.set_len(*old_len_bytes)?;
                }
            }
            Change::SetLen {
                old_len_bytes,
                new_len_bytes,
                cut,
            } => {
                self.inner.set_len(*old_len_bytes)?;
                if !cut.is_empty() {
                    self.inner.write_at(*new_len_bytes, &self.aligned(cut))?;
                }
            }
        }
        Ok(())
    }

    /// Re-applies `change` whole, not at all, or sector by sector.
    fn redo_some(
        &self,
        change: &Change,
        rng: &mut SmallRng,
        report: &mut CrashReport,
    ) -> Result<(), IoError> {
        let choices = if self.config.tear_writes && matches!(change, Change::Write { .. }) {
            3
        } else {
            2
        };
        match (rng.random_range(0..choices), change) {
            (0, _) => report.dropped_count += 1,
            (
                1,
                Change::Write {
                    offset_bytes, new, ..
                },
            ) => {
                report.kept_count += 1;
                self.inner.write_at(*offset_bytes, &self.aligned(new))?;
            }
            (1, Change::SetLen { new_len_bytes, .. }) => {
                report.kept_count += 1;
                self.inner.set_len(*new_len_bytes)?;
            }
            (
                _,
                Change::Write {
                    offset_bytes, new, ..
                },
            ) => {
                report.torn_count += 1;
                self.redo_torn(*offset_bytes, new, rng)?;
            }
            (_, Change::SetLen { .. }) => unreachable!("length changes are never torn"),
        }
        Ok(())
    }

    fn redo_torn(&self, offset_bytes: u64, new: &[u8], rng: &mut SmallRng) -> Result<(), IoError> {
        let sector_bytes = self.inner.alignment().offset_bytes.max(SECTOR_SIZE_BYTES);
        for (index, sector) in new.chunks(sector_bytes).enumerate() {
            if rng.random_bool(0.5) {
                let at = offset_bytes + (index * sector_bytes) as u64;
                self.inner.write_at(at, &self.aligned(sector))?;
            }
        }
        Ok(())
    }

    fn aligned(&self, data: &[u8]) -> AlignedBuf {
        AlignedBuf::from_slice(data, self.inner.alignment().mem_bytes)
    }

    fn run_batch(&self, requests: Vec<IoRequest>, completions: &CompletionSender) {
        self.sleep();
        for mut request in requests {
            let result = match request.op {
                IoOp::Read => self.read(request.offset_bytes, &mut request.buf),
                IoOp::Write => self.write(request.offset_bytes, &request.buf),
            };
            completions.send(request.complete(result));
        }
    }
}

impl BlockFile for FaultFile {
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.shared.sleep();
        self.shared.read(offset_bytes, buf)
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), IoError> {
        self.shared.sleep();
        self.shared.write(offset_bytes, data)
    }

    fn sync_data(&self) -> Result<(), IoError> {
        self.shared.sync()
    }

    fn len(&self) -> Result<u64, IoError> {
        self.shared.inner.len()
    }

    fn set_len(&self, len_bytes: u64) -> Result<(), IoError> {
        self.shared.set_len(len_bytes)
    }

    fn alignment(&self) -> Alignment {
        self.shared.inner.alignment()
    }

    fn path(&self) -> &Path {
        self.shared.path()
    }

    fn alloc_buf(&self, len_bytes: usize) -> AlignedBuf {
        self.shared.inner.alloc_buf(len_bytes)
    }

    fn submit(&self, requests: Vec<IoRequest>, completions: &CompletionSender) {
        if self.shared.config.latency.is_zero() {
            return self.shared.run_batch(requests, completions);
        }
        // Sleep on another thread so the caller goes on, as with a device.
        let shared = Arc::clone(&self.shared);
        let sender = completions.clone();
        let parked = Arc::new(Mutex::new(Some(requests)));
        let in_thread = Arc::clone(&parked);
        let spawned = std::thread::Builder::new()
            .name("bcuda-fault-batch".into())
            .spawn(move || {
                if let Some(requests) = in_thread.lock().take() {
                    shared.run_batch(requests, &sender);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(
                "fault backend cannot spawn a batch thread, running the batch inline: {e}"
            );
            if let Some(requests) = parked.lock().take() {
                self.shared.run_batch(requests, completions);
            }
        }
    }
}
