//! The write-ahead log: physiological redo in one circular file.
//!
//! ```text
//! file offset                       content
//! 0                                 checkpoint slot 0 (one sector)
//! sector                            checkpoint slot 1 (one sector)
//! ring_start = max(2 sectors, 4 KiB) the ring: LSN `l` lives at
//!                                   ring_start + (l % ring_bytes)
//! ```
//!
//! An LSN is a position in the endless log stream; the ring holds the part
//! from the checkpoint LSN up. Appends encode a [`RedoGroup`] into a memory
//! buffer and return the LSN just past it; [`Wal::flush_to`] makes the log
//! durable up to an LSN with one write and one `sync_data` for everything
//! buffered (group commit: writers that arrive during a sync share the next
//! one). A buffer that fills is flushed by the log writer thread, if one
//! runs ([`Wal::run_log_writer`]), while appends go on. Every flush starts
//! at a sector boundary with a flush-start marker and is padded with zeros
//! to the next boundary, so no synced sector is ever rewritten.
//!
//! The file grows with the ring's first lap: a new log, or one restarted
//! empty ([`Wal::restart_ring`]: at a clean close, after a compaction),
//! holds only its slots, and the flushes extend it a few MiB ahead of the
//! log until the ring is whole. Its checkpoint says so
//! ([`Checkpoint::ring_growing`]), and recovery reads the part past the
//! file's end as zeros.
//!
//! Recovery ([`Wal::open`]) reads the newest valid checkpoint slot and
//! replays groups from its LSN until the first one that is missing or fails
//! its CRC: that is the end of the log. Unsynced bytes can only lie in the
//! last flush, so a valid flush-start marker beyond the end proves that the
//! damaged group had been synced: that is reported as corruption instead of
//! being silently cut off. Recovery then zeroes the window where unsynced
//! bytes of the last flush may remain, so that a later crash can never
//! replay them after newer records.

mod checkpoint;
mod record;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use barracuda_codec::Lsn;
use barracuda_io::{AlignedBuf, BlockFile};
use parking_lot::{Condvar, Mutex};
use serde::Serialize;

pub use checkpoint::{
    CHECKPOINT_FORMAT_VERSION, CHECKPOINT_HEADER_BYTES, CHECKPOINT_MAGIC,
    CHECKPOINT_PAYLOAD_BYTES_MAX, Checkpoint,
};
pub use record::{
    ENTRY_HEADER_BYTES, GROUP_BYTES_MAX, GROUP_HEADER_BYTES, GROUP_MAGIC, GroupKind,
    IMAGE_OVERHEAD_BYTES_MAX, LoggedGroup, PATCH_HEADER_BYTES, Patches, RedoEntry, RedoGroup,
    ZERO_RUN_BYTES_MIN,
};

use crate::error::{Error, Result};
use record::{FLUSH_START_BYTES, GroupHeader};

/// Smallest ring: room for a few maximal flushes.
pub const RING_BYTES_MIN: u64 = 64 << 10;

/// Where the ring starts, at least: after the two checkpoint slots, on a
/// 4 KiB boundary so O_DIRECT devices with 4 KiB sectors work too.
const RING_START_BYTES_MIN: u64 = 4096;

/// How much the reader fetches per read during recovery.
const RECOVERY_READ_BYTES: u64 = 1 << 20;

/// Options of the write-ahead log.
#[derive(Clone, Debug)]
pub struct WalOptions {
    ring_bytes: u64,
    buffer_bytes_max: usize,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            ring_bytes: /* 128 MiB */ 128 << 20,
            buffer_bytes_max: /* 4 MiB */ 4 << 20,
        }
    }
}

impl WalOptions {
    /// Size of the log ring: the log a checkpoint must catch up with before
    /// writers stall. Rounded up to a multiple of the file's sector size.
    /// Default = 128 MiB.
    #[must_use]
    pub fn ring_bytes(mut self, ring_bytes: u64) -> Self {
        self.ring_bytes = ring_bytes;
        self
    }

    /// The most log bytes one flush writes: an append that would grow the
    /// buffer past it first flushes the buffer, or hands it to the log
    /// writer thread ([`Wal::run_log_writer`]). One flush is in flight at a
    /// time, so this (plus one group) bounds the window recovery must clean
    /// after a crash. Default = 4 MiB.
    #[must_use]
    pub fn buffer_bytes_max(mut self, buffer_bytes_max: usize) -> Self {
        self.buffer_bytes_max = buffer_bytes_max;
        self
    }
}

/// Where an appended group lies in the log: `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LsnRange {
    /// The LSN of the group's first byte.
    pub start: Lsn,
    /// The LSN just past the group.
    pub end: Lsn,
}

/// Counters of the log, for status output.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct WalStats {
    /// Groups appended since open.
    pub groups_appended: u64,
    /// Bytes appended since open (groups and markers, before padding).
    pub bytes_appended: u64,
    /// Flushes (one write plus one sync each).
    pub flushes: u64,
    /// The LSN just past the last appended group.
    pub next_lsn: u64,
    /// Everything before this LSN is durable.
    pub durable_lsn: u64,
    /// Recovery starts here.
    pub checkpoint_lsn: u64,
    /// Size of the ring.
    pub ring_bytes: u64,
    /// Times the ring was given back since open ([`Wal::restart_ring`]:
    /// after a compaction, when the database idles, at close).
    pub ring_restarts: u64,
}

/// Where things live in the log file.
#[derive(Clone, Copy, Debug)]
struct Layout {
    sector_bytes: u64,
    ring_start_bytes: u64,
    ring_bytes: u64,
}

impl Layout {
    fn new(file: &dyn BlockFile, options: &WalOptions) -> Result<Layout> {
        let sector_bytes = file.alignment().offset_bytes as u64;
        let ring_bytes = options
            .ring_bytes
            .max(RING_BYTES_MIN)
            .next_multiple_of(sector_bytes);
        let ring_start_bytes = (2 * sector_bytes)
            .max(RING_START_BYTES_MIN)
            .next_multiple_of(sector_bytes);
        Ok(Layout {
            sector_bytes,
            ring_start_bytes,
            ring_bytes,
        })
    }

    fn first_lsn(&self) -> Lsn {
        Lsn(self.sector_bytes.max(RING_START_BYTES_MIN))
    }

    fn file_len_bytes(&self) -> u64 {
        self.ring_start_bytes + self.ring_bytes
    }

    fn round_up(&self, lsn: u64) -> u64 {
        lsn.next_multiple_of(self.sector_bytes)
    }

    /// The first LSN of the lap of the ring that `lsn` lies in.
    fn lap_start(&self, lsn: u64) -> u64 {
        lsn - lsn % self.ring_bytes
    }

    /// The pieces of the file holding `[lsn, lsn + len)`: one, or two where
    /// the range wraps around the ring's end. `(file offset, len)`.
    fn pieces(&self, lsn: u64, len: u64) -> [(u64, u64); 2] {
        let at = lsn % self.ring_bytes;
        let first = len.min(self.ring_bytes - at);
        [
            (self.ring_start_bytes + at, first),
            (self.ring_start_bytes, len - first),
        ]
    }
}

struct State {
    /// Encoded groups from `buffer_lsn` on, not yet written.
    buffer: Vec<u8>,
    /// LSN of `buffer[0]`; on a sector boundary.
    buffer_lsn: u64,
    /// Whether a thread is writing and syncing the previous buffer.
    flushing: bool,
    /// The newest checkpoint written.
    checkpoint: Checkpoint,
    /// The first failure of a write or sync: the log is poisoned.
    failure: Option<String>,
    stats: WalStats,
    /// The aligned buffer of the last flush, kept for the next one (a
    /// fresh multi-megabyte buffer per flush cost page faults and zeroing:
    /// `AlignedBuf::zeroed` fell from 4.1 % to 2.1 % of a bulk load's
    /// profile). Not kept above [`FLUSH_BUF_KEPT_BYTES_MAX`].
    flush_buf: Option<AlignedBuf>,
    /// What of a growing ring lies past the file's end; `None` once the
    /// lap is written (the file is whole).
    unwritten: Option<Unwritten>,
    /// A full buffer an append took for the log writer thread to write and
    /// sync ([`Wal::run_log_writer`]); `flushing` is set from the hand-off
    /// until the flush is finished.
    handed_off: Option<Flush>,
    /// Whether a log writer thread takes full buffers off appends.
    log_writer_running: bool,
    /// Asks the log writer thread to finish its hand-off and return.
    log_writer_stop: bool,
}

/// One write and sync of the log: `padded_len` bytes of `buf` at LSN
/// `start`, then zeros over `zeros` (see [`Wal::write_and_sync`]).
struct Flush {
    start: u64,
    buf: AlignedBuf,
    padded_len: u64,
    zeros: Option<(u64, u64)>,
}

/// The largest flush buffer the log keeps between flushes.
const FLUSH_BUF_KEPT_BYTES_MAX: usize = 4 << 20;

/// How far ahead of the log a flush writes zeros while the ring grows
/// ([`Unwritten`]): the file is extended, and the file system's journal
/// committed, once per this many bytes of log, not once per sync.
const ZERO_AHEAD_BYTES: u64 = 4 << 20;

/// The part of a growing ring past the file's end, which no flush has
/// written yet: LSNs `[from_lsn, until_lsn)`, up to the end of the lap.
#[derive(Clone, Copy, Debug)]
struct Unwritten {
    from_lsn: u64,
    until_lsn: u64,
}

impl State {
    fn next_lsn(&self) -> u64 {
        self.buffer_lsn + self.buffer.len() as u64
    }
}

/// The write-ahead log. `Send + Sync`: many threads append and wait at once.
pub struct Wal {
    file: Arc<dyn BlockFile>,
    layout: Layout,
    buffer_bytes_max: usize,
    state: Mutex<State>,
    /// Serializes checkpoints; the state mutex is not held during their I/O.
    checkpoint_lock: Mutex<()>,
    flushed: Condvar,
    /// Wakes the log writer thread: a hand-off, or a stop.
    log_writer_wake: Condvar,
    durable_lsn: AtomicU64,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("file", &self.file.path())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Wal {
    /// Opens the log in `file`, creating it if the file is empty, and
    /// replays every redo group from the newest checkpoint through `apply`,
    /// in log order. Returns the log, ready for appends after the last
    /// replayed group, and the checkpoint recovery started from.
    pub fn open(
        file: Arc<dyn BlockFile>,
        options: &WalOptions,
        mut apply: impl FnMut(&LoggedGroup) -> Result<()>,
    ) -> Result<(Wal, Checkpoint)> {
        let mut layout = Layout::new(file.as_ref(), options)?;
        let (checkpoint, created) = match read_checkpoint(file.as_ref(), &layout)? {
            Some(checkpoint) => (checkpoint, false),
            None => (create(file.as_ref(), &layout)?, true),
        };
        if checkpoint.ring_bytes != layout.ring_bytes {
            // The ring is a property of the log file: an existing log keeps
            // its size (resizing is not supported), so a database opens
            // whatever `log_bytes` the caller asks for (an admin tool does
            // not know it). The checkpoint slot's CRC vouches for the value;
            // a ring the layout could not have made is damage.
            let ring_bytes = checkpoint.ring_bytes;
            if ring_bytes < RING_BYTES_MIN || !ring_bytes.is_multiple_of(layout.sector_bytes) {
                return Err(Error::LogCorrupted {
                    lsn: checkpoint.lsn,
                    reason: "checkpoint names an impossible ring size",
                });
            }
            tracing::warn!(
                ring_bytes,
                asked = layout.ring_bytes,
                "the log keeps the ring it was created with; log_bytes applies to new logs"
            );
            layout.ring_bytes = ring_bytes;
        }
        let mut checkpoint = checkpoint;
        let full_len = layout.file_len_bytes();
        let file_len = file.len()?;
        if file_len < full_len && !checkpoint.ring_growing {
            return Err(Error::LogCorrupted {
                lsn: checkpoint.lsn,
                reason: "log file shorter than its ring",
            });
        }
        // A growing ring has no log past the file's end (the flushes extend
        // it ahead of the log, and its lap cannot wrap before it is whole).
        let growing = file_len < full_len;
        let readable_end = if growing {
            layout.lap_start(checkpoint.lsn.0) + file_len.saturating_sub(layout.ring_start_bytes)
        } else {
            u64::MAX
        };
        let end_lsn = if created || readable_end <= checkpoint.lsn.0 {
            // Nothing to read: no replay, no synced record to look for
            // after the end, no tail to clean.
            checkpoint.lsn.0
        } else {
            let mut reader = Reader::new(file.as_ref(), layout, checkpoint.lsn.0, readable_end);
            let Replayed { end_lsn, log_end } = reader.replay(&mut apply)?;
            reader.check_nothing_synced_after(log_end, checkpoint.lsn.0)?;
            let tail = Tail {
                end_lsn,
                log_end,
                checkpoint_lsn: checkpoint.lsn.0,
                window_bytes: options.buffer_bytes_max as u64 + GROUP_BYTES_MAX as u64,
                readable_end,
            };
            clean_tail(file.as_ref(), &layout, &tail)?;
            end_lsn
        };
        let mut start = layout.round_up(end_lsn);
        let unwritten = if !growing {
            None
        } else if readable_end < start {
            // The file ends before the log starts (a ring cut at close by
            // an earlier build): restart at the next lap, so that the file
            // grows from the ring's start.
            checkpoint = restart(file.as_ref(), &layout, &checkpoint, start)?;
            start = checkpoint.lsn.0;
            Some(Unwritten {
                from_lsn: start,
                until_lsn: start + layout.ring_bytes,
            })
        } else {
            Some(Unwritten {
                from_lsn: readable_end.max(start),
                until_lsn: layout.lap_start(checkpoint.lsn.0) + layout.ring_bytes,
            })
        };
        tracing::debug!(
            checkpoint = checkpoint.lsn.0,
            end = end_lsn,
            "log recovered"
        );
        let stats = WalStats {
            next_lsn: start,
            durable_lsn: start,
            checkpoint_lsn: checkpoint.lsn.0,
            ring_bytes: layout.ring_bytes,
            ..WalStats::default()
        };
        let wal = Wal {
            file,
            layout,
            buffer_bytes_max: options.buffer_bytes_max,
            state: Mutex::new(State {
                buffer: Vec::new(),
                buffer_lsn: start,
                flushing: false,
                checkpoint: checkpoint.clone(),
                failure: None,
                stats,
                flush_buf: None,
                unwritten,
                handed_off: None,
                log_writer_running: false,
                log_writer_stop: false,
            }),
            checkpoint_lock: Mutex::new(()),
            flushed: Condvar::new(),
            log_writer_wake: Condvar::new(),
            durable_lsn: AtomicU64::new(start),
        };
        Ok((wal, checkpoint))
    }

    /// Appends `group` and returns where it lies in the log. Not durable
    /// until [`Wal::flush_to`] its end returned.
    ///
    /// A page changed by the group holds `end` as its page LSN; the first
    /// group that dirtied a page bounds the checkpoint by its `start`.
    ///
    /// Fails with [`Error::LogFull`] if the ring has no room until a
    /// checkpoint advances, and with [`Error::LogFailed`] once a write or
    /// sync of the log has failed.
    pub fn append(&self, group: &RedoGroup) -> Result<LsnRange> {
        let len = group.encoded_len();
        let group_bytes_max = GROUP_BYTES_MAX.min((self.layout.ring_bytes / 4) as usize);
        if len > group_bytes_max {
            return Err(Error::GroupTooLarge {
                group_bytes: len,
                group_bytes_max,
            });
        }
        let mut state = self.state.lock();
        if state.buffer.len() + len > self.buffer_bytes_max {
            if state.log_writer_running && !state.log_writer_stop {
                self.hand_off(&mut state)?;
            } else {
                let target = state.next_lsn();
                self.flush_locked(&mut state, target)?;
            }
        }
        check_failure(&state)?;
        self.check_room(&state, len)?;
        if state.buffer.is_empty() {
            let lsn = Lsn(state.buffer_lsn);
            record::encode_flush_start(lsn, &mut state.buffer);
        }
        let start = Lsn(state.next_lsn());
        group.encode_into(start, &mut state.buffer);
        state.stats.groups_appended += 1;
        state.stats.bytes_appended += len as u64;
        Ok(LsnRange {
            start,
            end: Lsn(state.next_lsn()),
        })
    }

    fn check_room(&self, state: &State, len: usize) -> Result<()> {
        // The group, a marker, and the padding of its flush must all fit in
        // front of the checkpoint.
        let need = (len + FLUSH_START_BYTES) as u64 + self.layout.sector_bytes;
        let used = state.next_lsn() - state.checkpoint.lsn.0;
        let free = self.layout.ring_bytes - used.min(self.layout.ring_bytes);
        if need > free {
            return Err(Error::LogFull {
                needed_bytes: need,
                free_bytes: free,
            });
        }
        Ok(())
    }

    /// Makes the log durable up to `lsn`: on return, every group that ends
    /// at or before it survives a crash. Writers that call it while another
    /// thread syncs wait and share the next sync (group commit).
    pub fn flush_to(&self, lsn: Lsn) -> Result<()> {
        if self.durable_lsn.load(Ordering::Acquire) >= lsn.0 {
            return Ok(());
        }
        let mut state = self.state.lock();
        self.flush_locked(&mut state, lsn.0)
    }

    fn flush_locked(
        &self,
        state: &mut parking_lot::MutexGuard<'_, State>,
        target: u64,
    ) -> Result<()> {
        loop {
            if self.durable_lsn.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            check_failure(state)?;
            if state.flushing {
                self.flushed.wait(state);
                continue;
            }
            if state.buffer.is_empty() {
                // Nothing buffered: `target` is past the end of the log.
                return Ok(());
            }
            self.flush_buffer(state)?;
        }
    }

    /// Writes and syncs the buffer, with the state unlocked during the I/O
    /// so that other threads keep appending.
    fn flush_buffer(&self, state: &mut parking_lot::MutexGuard<'_, State>) -> Result<()> {
        let flush = self.take_flush(state);
        let result = parking_lot::MutexGuard::unlocked(state, || self.write_flush(&flush));
        self.finish_flush(state, flush, result)
    }

    /// Hands the full buffer to the log writer thread, once the flush before
    /// it (if any) is finished, so that the appending thread goes on
    /// encoding into an empty buffer while the log writer writes and syncs
    /// this one: at most one flush is in flight, as with flushes on the
    /// appending thread, so a crash leaves no more unsynced log than they
    /// did (the recovery window).
    fn hand_off(&self, state: &mut parking_lot::MutexGuard<'_, State>) -> Result<()> {
        while state.flushing {
            check_failure(state)?;
            self.flushed.wait(state);
        }
        check_failure(state)?;
        if !state.buffer.is_empty() {
            let flush = self.take_flush(state);
            state.handed_off = Some(flush);
            self.log_writer_wake.notify_one();
        }
        Ok(())
    }

    /// Runs on a thread of its own (the database's "barracuda-log") until
    /// [`Wal::stop_log_writer`]: writes and syncs each buffer an append
    /// hands off when it fills ([`WalOptions::buffer_bytes_max`]). Without
    /// it, the appending thread writes and syncs a full buffer itself. A
    /// failed flush poisons the log as on any thread: appends and waits
    /// fail from then on.
    pub fn run_log_writer(&self) {
        let mut state = self.state.lock();
        if state.log_writer_stop {
            return;
        }
        state.log_writer_running = true;
        loop {
            if let Some(flush) = state.handed_off.take() {
                let result =
                    parking_lot::MutexGuard::unlocked(&mut state, || self.write_flush(&flush));
                // A failure is recorded in the state for every thread.
                let _ = self.finish_flush(&mut state, flush, result);
                continue;
            }
            if state.log_writer_stop {
                break;
            }
            self.log_writer_wake.wait(&mut state);
        }
        state.log_writer_running = false;
    }

    /// Makes [`Wal::run_log_writer`] return once the buffer handed to it
    /// (if any) is written; appends flush full buffers themselves again.
    pub fn stop_log_writer(&self) {
        self.state.lock().log_writer_stop = true;
        self.log_writer_wake.notify_all();
    }

    /// Takes the buffer for one flush: copies it, padded to a sector, into
    /// an aligned buffer, moves the buffer's LSN past it and marks the log
    /// flushing.
    fn take_flush(&self, state: &mut State) -> Flush {
        let start = state.buffer_lsn;
        let data_len = state.buffer.len() as u64;
        let padded_len = self.layout.round_up(data_len);
        let mut buf = match state.flush_buf.take() {
            Some(buf) if buf.len() >= padded_len as usize => buf,
            _ => AlignedBuf::zeroed(
                (padded_len as usize).next_power_of_two(),
                self.file.alignment().mem_bytes,
            ),
        };
        buf[..data_len as usize].copy_from_slice(&state.buffer);
        buf[data_len as usize..padded_len as usize].fill(0);
        state.buffer.clear();
        state.buffer_lsn = start + padded_len;
        state.flushing = true;
        let end = start + padded_len;
        // Zeros ahead of this flush, where the ring is still a hole.
        let zeros = state.unwritten.and_then(|u| {
            let from = u.from_lsn.max(end);
            let until = u
                .until_lsn
                .min(self.layout.round_up(from + ZERO_AHEAD_BYTES));
            (end > u.from_lsn && from < until).then_some((from, until))
        });
        Flush {
            start,
            buf,
            padded_len,
            zeros,
        }
    }

    fn write_flush(&self, flush: &Flush) -> Result<()> {
        let data = &flush.buf[..flush.padded_len as usize];
        self.write_and_sync(flush.start, data, flush.zeros)
    }

    /// Records the outcome of `flush`: the new durable LSN, or the failure
    /// that poisons the log; wakes the threads waiting for either.
    fn finish_flush(&self, state: &mut State, flush: Flush, result: Result<()>) -> Result<()> {
        let Flush {
            start,
            buf,
            padded_len,
            zeros,
        } = flush;
        let end = start + padded_len;
        state.flushing = false;
        if result.is_ok()
            && let Some(u) = &mut state.unwritten
        {
            u.from_lsn = u.from_lsn.max(zeros.map_or(end, |(_, until)| until));
            if u.from_lsn >= u.until_lsn {
                state.unwritten = None;
            }
        }
        if buf.len() <= FLUSH_BUF_KEPT_BYTES_MAX {
            state.flush_buf = Some(buf);
        }
        state.stats.flushes += 1;
        match result {
            Ok(()) => {
                self.durable_lsn.store(end, Ordering::Release);
                state.stats.durable_lsn = end;
                self.flushed.notify_all();
                Ok(())
            }
            Err(e) => {
                let message = e.to_string();
                tracing::error!("write-ahead log failed at LSN {start}: {message}");
                state.failure = Some(message);
                self.flushed.notify_all();
                Err(e)
            }
        }
    }

    /// Writes `data` at `lsn`, and zeros over the LSNs `zeros` (a hole of
    /// a fresh ring ahead of the log), then syncs once.
    fn write_and_sync(&self, lsn: u64, data: &[u8], zeros: Option<(u64, u64)>) -> Result<()> {
        write_ring(self.file.as_ref(), &self.layout, lsn, data)?;
        if let Some((from, until)) = zeros {
            for (offset, len) in self.layout.pieces(from, until - from) {
                self.file.write_zeros(offset, len)?;
            }
        }
        self.file.sync_data()?;
        Ok(())
    }

    /// Everything before this LSN is durable.
    pub fn durable_lsn(&self) -> Lsn {
        Lsn(self.durable_lsn.load(Ordering::Acquire))
    }

    /// The LSN the next group will start at (or a little after, once a flush
    /// pads to a sector).
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.state.lock().next_lsn())
    }

    /// Bytes of the ring in use, from the checkpoint to the end of the log.
    pub fn used_bytes(&self) -> u64 {
        let state = self.state.lock();
        state.next_lsn() - state.checkpoint.lsn.0
    }

    /// Bytes of the ring the log has taken since the ring was made or
    /// last restarted ([`Wal::restart_ring`]): what the file holds of it,
    /// the zeros written ahead aside; the whole ring once a lap is done.
    pub fn ring_taken_bytes(&self) -> u64 {
        let state = self.state.lock();
        match state.unwritten {
            Some(u) => state
                .next_lsn()
                .saturating_sub(u.until_lsn - self.layout.ring_bytes),
            None => self.layout.ring_bytes,
        }
    }

    /// Size of the ring.
    pub fn ring_bytes(&self) -> u64 {
        self.layout.ring_bytes
    }

    /// Records a checkpoint: recovery will start at `lsn`, which must be
    /// durable already (every page change before it is in the data file,
    /// and synced), and the ring before it is free for reuse. `payload` is
    /// stored with it for the layer above.
    ///
    /// The two slots are written alternately and synced, so a crash during
    /// this call leaves the previous checkpoint valid.
    pub fn checkpoint(&self, lsn: Lsn, payload: &[u8]) -> Result<()> {
        if payload.len() > CHECKPOINT_PAYLOAD_BYTES_MAX {
            return Err(Error::InvalidOptions {
                reason: format!(
                    "checkpoint payload of {} bytes exceeds {CHECKPOINT_PAYLOAD_BYTES_MAX}",
                    payload.len()
                ),
            });
        }
        // Checkpoints are serialized with each other, but the state mutex is
        // not held across the slot's write and sync, so appends and group
        // commits go on meanwhile; until the slot is durable, the old
        // checkpoint still bounds the ring (the conservative choice).
        let _checkpointing = self.checkpoint_lock.lock();
        let next = {
            let state = self.state.lock();
            check_failure(&state)?;
            let durable = self.durable_lsn.load(Ordering::Acquire);
            assert!(
                lsn.0 <= durable && lsn >= state.checkpoint.lsn,
                "checkpoint {lsn} outside [{}, {durable}]",
                state.checkpoint.lsn
            );
            Checkpoint {
                sequence: state.checkpoint.sequence + 1,
                lsn,
                ring_bytes: self.layout.ring_bytes,
                // Until the lap is whole, a crash may leave the file short.
                ring_growing: state.unwritten.is_some(),
                payload: payload.to_vec(),
            }
        };
        let slot = (next.sequence % 2) as usize;
        let written = write_checkpoint(self.file.as_ref(), &self.layout, slot, &next);
        let mut state = self.state.lock();
        if let Err(e) = written {
            state.failure = Some(e.to_string());
            self.flushed.notify_all();
            return Err(e);
        }
        state.stats.checkpoint_lsn = lsn.0;
        state.checkpoint = next;
        Ok(())
    }

    /// Restarts an empty log at the start of its ring and gives the ring's
    /// space back to the file system: if the log holds nothing after the
    /// checkpoint (a clean close, the end of a compaction), writes a slot at
    /// the next lap's first LSN, flagged [`Checkpoint::ring_growing`], then
    /// truncates the file to its two slots. The file grows again as the log
    /// is written, up to the ring. A crash between the two steps leaves a
    /// whole ring whose log starts at that LSN: empty. Returns whether it
    /// restarted. The caller keeps appends out (the Db's write mutex).
    pub fn restart_ring(&self) -> Result<bool> {
        let _checkpointing = self.checkpoint_lock.lock();
        // Held across the slot's write and the truncation (two syncs, at a
        // close or after a compaction), unlike a checkpoint's: an append in
        // between would land in the ring being cut.
        let mut state = self.state.lock();
        check_failure(&state)?;
        // Nothing but a flush's sector padding after the checkpoint.
        let empty_after = state.buffer.is_empty()
            && state.buffer_lsn <= self.layout.round_up(state.checkpoint.lsn.0);
        if !empty_after || state.flushing {
            return Ok(false);
        }
        let restarted = restart(
            self.file.as_ref(),
            &self.layout,
            &state.checkpoint,
            state.buffer_lsn,
        );
        let next = match restarted {
            Ok(next) => next,
            Err(e) => {
                state.failure = Some(e.to_string());
                self.flushed.notify_all();
                return Err(e);
            }
        };
        let lsn = next.lsn.0;
        state.buffer_lsn = lsn;
        state.unwritten = Some(Unwritten {
            from_lsn: lsn,
            until_lsn: lsn + self.layout.ring_bytes,
        });
        state.stats.durable_lsn = lsn;
        state.stats.checkpoint_lsn = lsn;
        state.stats.ring_restarts += 1;
        state.checkpoint = next;
        self.durable_lsn.store(lsn, Ordering::Release);
        Ok(true)
    }

    /// The newest checkpoint written.
    pub fn last_checkpoint(&self) -> Checkpoint {
        self.state.lock().checkpoint.clone()
    }

    /// Counters for status output.
    pub fn stats(&self) -> WalStats {
        let state = self.state.lock();
        let mut stats = state.stats.clone();
        stats.next_lsn = state.next_lsn();
        stats.durable_lsn = self.durable_lsn.load(Ordering::Acquire);
        stats
    }
}

fn check_failure(state: &State) -> Result<()> {
    match &state.failure {
        Some(reason) => Err(Error::LogFailed {
            reason: reason.clone(),
        }),
        None => Ok(()),
    }
}

fn read_checkpoint(file: &dyn BlockFile, layout: &Layout) -> Result<Option<Checkpoint>> {
    if file.len()? == 0 {
        return Ok(None);
    }
    let sector = layout.sector_bytes as usize;
    let mut buf = file.alloc_buf(2 * sector);
    file.read_at(0, &mut buf)?;
    let slots = [
        Checkpoint::decode(&buf[..sector], 0),
        Checkpoint::decode(&buf[sector..], 1),
    ];
    match checkpoint::newest(slots)? {
        Some((_, checkpoint)) => Ok(Some(checkpoint)),
        None => Err(Error::CheckpointCorrupted {
            slot: 0,
            reason: "no checkpoint in a log file that is not empty",
        }),
    }
}

/// Makes a new log: its slots, and the ring up to the first LSN (zeros);
/// the rest of the ring grows as the log is written.
fn create(file: &dyn BlockFile, layout: &Layout) -> Result<Checkpoint> {
    let lsn = layout.first_lsn();
    file.set_len(layout.ring_start_bytes + lsn.0 % layout.ring_bytes)?;
    let checkpoint = Checkpoint {
        sequence: 0,
        lsn,
        ring_bytes: layout.ring_bytes,
        ring_growing: true,
        payload: Vec::new(),
    };
    write_checkpoint(file, layout, 0, &checkpoint)?;
    Ok(checkpoint)
}

/// Restarts an empty log (see [`Wal::restart_ring`]): a slot at the first
/// LSN at or after `from_lsn` where a lap starts, flagged growing, then the
/// file cut to its slots. Everything before `from_lsn` must be durable and
/// checkpointed. Returns the new checkpoint.
fn restart(
    file: &dyn BlockFile,
    layout: &Layout,
    checkpoint: &Checkpoint,
    from_lsn: u64,
) -> Result<Checkpoint> {
    let next = Checkpoint {
        sequence: checkpoint.sequence + 1,
        lsn: Lsn(from_lsn.next_multiple_of(layout.ring_bytes)),
        ring_bytes: layout.ring_bytes,
        ring_growing: true,
        payload: checkpoint.payload.clone(),
    };
    write_checkpoint(file, layout, (next.sequence % 2) as usize, &next)?;
    file.set_len(layout.ring_start_bytes)?;
    file.sync_data()?;
    Ok(next)
}

fn write_checkpoint(
    file: &dyn BlockFile,
    layout: &Layout,
    slot: usize,
    checkpoint: &Checkpoint,
) -> Result<()> {
    let mut sector = file.alloc_buf(layout.sector_bytes as usize);
    checkpoint.encode(&mut sector);
    file.write_at(slot as u64 * layout.sector_bytes, &sector)?;
    file.sync_data()?;
    Ok(())
}

/// Where recovery ended, for [`clean_tail`].
struct Tail {
    /// The end of the last group applied: the log goes on from here.
    end_lsn: u64,
    /// The end of the last valid group (after `end_lsn` if the log ends
    /// inside a write that spans several groups).
    log_end: u64,
    checkpoint_lsn: u64,
    window_bytes: u64,
    /// A growing ring's file ends at this LSN (`u64::MAX`: a whole ring).
    readable_end: u64,
}

/// Zeroes the part of the ring after the end of the log that the last,
/// interrupted flush may have written, and syncs. Nothing there was
/// acknowledged; left in place, a record of it could be replayed after a
/// later crash, behind records written after this recovery. The groups of
/// an unfinished write (between `end_lsn` and `log_end`) are zeroed too:
/// a group appended after them must never finish that write. A growing
/// ring's file holds nothing past its end, so that part is left alone.
fn clean_tail(file: &dyn BlockFile, layout: &Layout, tail: &Tail) -> Result<()> {
    let start = tail.end_lsn - tail.end_lsn % layout.sector_bytes;
    let live_end = tail.checkpoint_lsn + layout.ring_bytes;
    let live_end = live_end - live_end % layout.sector_bytes;
    let limit = live_end
        .min(layout.round_up(tail.log_end + tail.window_bytes))
        .min(tail.readable_end);
    if limit <= start {
        return Ok(());
    }
    // Keep the bytes of the sector that holds the end of the log.
    let mut first = file.alloc_buf(layout.sector_bytes as usize);
    read_ring(file, layout, start, &mut first)?;
    first[(tail.end_lsn - start) as usize..].fill(0);
    write_ring(file, layout, start, &first)?;
    let zeros = vec![0u8; RECOVERY_READ_BYTES as usize];
    let mut at = start + layout.sector_bytes;
    while at < limit {
        let len = (limit - at).min(RECOVERY_READ_BYTES);
        write_ring(file, layout, at, &zeros[..len as usize])?;
        at += len;
    }
    file.sync_data()?;
    Ok(())
}

/// Writes `data` at `lsn` of the ring, in two pieces where it wraps. Data
/// already aligned for the file and not wrapping is written without a copy
/// (a flush's buffer); anything else goes through aligned copies.
fn write_ring(file: &dyn BlockFile, layout: &Layout, lsn: u64, data: &[u8]) -> Result<()> {
    let aligned = (data.as_ptr() as usize).is_multiple_of(file.alignment().mem_bytes);
    let mut done = 0usize;
    for (offset, len) in layout.pieces(lsn, data.len() as u64) {
        if len == 0 {
            continue;
        }
        let len = len as usize;
        if aligned && done == 0 && len == data.len() {
            file.write_at(offset, data)?;
        } else {
            let mut piece = file.alloc_buf(len);
            piece.copy_from_slice(&data[done..done + len]);
            file.write_at(offset, &piece)?;
        }
        done += len;
    }
    Ok(())
}

fn read_ring(file: &dyn BlockFile, layout: &Layout, lsn: u64, out: &mut [u8]) -> Result<()> {
    let mut done = 0usize;
    for (offset, len) in layout.pieces(lsn, out.len() as u64) {
        if len == 0 {
            continue;
        }
        let mut piece = file.alloc_buf(len as usize);
        file.read_at(offset, &mut piece)?;
        out[done..done + len as usize].copy_from_slice(&piece);
        done += len as usize;
    }
    Ok(())
}

/// Where a replay ended.
struct Replayed {
    /// Just past the last group applied.
    end_lsn: u64,
    /// Just past the last valid group: after `end_lsn` when the log ends
    /// inside an unfinished write.
    log_end: u64,
}

/// Reads the ring during recovery through a window of sector-aligned reads.
struct Reader<'a> {
    file: &'a dyn BlockFile,
    layout: Layout,
    window_lsn: u64,
    window: Vec<u8>,
    start_lsn: u64,
    /// Past this LSN the file has ended: zeros (a growing ring).
    readable_end: u64,
}

impl<'a> Reader<'a> {
    fn new(
        file: &'a dyn BlockFile,
        layout: Layout,
        start_lsn: u64,
        readable_end: u64,
    ) -> Reader<'a> {
        Reader {
            file,
            layout,
            window_lsn: 0,
            window: Vec::new(),
            start_lsn,
            readable_end,
        }
    }

    /// The bytes `[lsn, lsn + len)`, which must lie within one ring's span
    /// of the checkpoint.
    fn bytes(&mut self, lsn: u64, len: usize) -> Result<&[u8]> {
        let end = lsn + len as u64;
        let covered = lsn >= self.window_lsn && end <= self.window_lsn + self.window.len() as u64;
        if !covered {
            let from = lsn - lsn % self.layout.sector_bytes;
            let to = self.layout.round_up(end.max(from + RECOVERY_READ_BYTES));
            let to = to
                .min(from + self.layout.ring_bytes)
                .max(self.layout.round_up(end));
            self.window.resize((to - from) as usize, 0);
            let readable = self.readable_end.clamp(from, to);
            let (file_part, past_end) = self.window.split_at_mut((readable - from) as usize);
            read_ring(self.file, &self.layout, from, file_part)?;
            past_end.fill(0);
            self.window_lsn = from;
        }
        let at = (lsn - self.window_lsn) as usize;
        Ok(&self.window[at..at + len])
    }

    /// The header of a group that validly starts at `lsn`, if any.
    fn header_at(&mut self, lsn: u64) -> Result<Option<GroupHeader>> {
        let limit = self.start_lsn + self.layout.ring_bytes;
        if lsn + GROUP_HEADER_BYTES as u64 > limit {
            return Ok(None);
        }
        let bytes: [u8; GROUP_HEADER_BYTES] = self
            .bytes(lsn, GROUP_HEADER_BYTES)?
            .try_into()
            .map_err(|_| Error::LogCorrupted {
                lsn: Lsn(lsn),
                reason: "short read",
            })?;
        let Some(header) = record::parse_header(&bytes) else {
            return Ok(None);
        };
        if header.lsn.0 != lsn || lsn + header.group_len_bytes as u64 > limit {
            return Ok(None);
        }
        Ok(Some(header))
    }

    /// Replays groups from the start until the end of the log. A write
    /// that spans several groups (each but its last marked `continued`) is
    /// applied only once its last group is read; if the log ends before,
    /// its groups are dropped: it was never acknowledged, and none of its
    /// pages reached the data file (they stay pinned until it is logged).
    fn replay(&mut self, apply: &mut impl FnMut(&LoggedGroup) -> Result<()>) -> Result<Replayed> {
        let mut lsn = self.start_lsn;
        let mut end_lsn = lsn;
        let mut unfinished: Vec<LoggedGroup> = Vec::new();
        loop {
            let Some(header) = self.header_at(lsn)? else {
                let aligned = self.layout.round_up(lsn);
                if aligned != lsn && self.is_zero(lsn, (aligned - lsn) as usize)? {
                    // Padding at the end of a flush; the next one starts at
                    // the sector boundary.
                    if self.header_at(aligned)?.is_some() {
                        lsn = aligned;
                        continue;
                    }
                }
                break;
            };
            let bytes = self.bytes(lsn, header.group_len_bytes)?;
            if !record::crc_matches(bytes) {
                break;
            }
            if header.kind == GroupKind::Redo {
                let group = LoggedGroup::new(header, bytes.to_vec());
                if header.continued {
                    unfinished.push(group);
                } else {
                    for earlier in unfinished.drain(..) {
                        apply(&earlier)?;
                    }
                    apply(&group)?;
                }
            }
            lsn += header.group_len_bytes as u64;
            if unfinished.is_empty() {
                end_lsn = lsn;
            }
        }
        if let Some(first) = unfinished.first() {
            tracing::warn!(
                groups = unfinished.len(),
                lsn = first.lsn.0,
                "recovery dropped a write whose last log group is missing"
            );
        }
        Ok(Replayed {
            end_lsn,
            log_end: lsn,
        })
    }

    fn is_zero(&mut self, lsn: u64, len: usize) -> Result<bool> {
        Ok(self.bytes(lsn, len)?.iter().all(|&b| b == 0))
    }

    /// Fails if a valid flush-start marker lies after `end_lsn`: the flush
    /// it starts was written only after everything before it was synced, so
    /// the group that ended replay at `end_lsn` was damaged after a sync.
    fn check_nothing_synced_after(&mut self, end_lsn: u64, checkpoint_lsn: u64) -> Result<()> {
        let limit = (checkpoint_lsn + self.layout.ring_bytes).min(self.readable_end);
        let mut lsn = self.layout.round_up(end_lsn + 1);
        while lsn + GROUP_HEADER_BYTES as u64 <= limit {
            if let Some(header) = self.header_at(lsn)?
                && header.kind == GroupKind::FlushStart
                && record::crc_matches(self.bytes(lsn, header.group_len_bytes)?)
            {
                return Err(Error::LogCorrupted {
                    lsn: Lsn(end_lsn),
                    reason: "a damaged group is followed by synced records",
                });
            }
            lsn += self.layout.sector_bytes;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
