//! The write-ahead log: physiological redo in segment files.
//!
//! ```text
//! wal.log                      the two checkpoint slots (checkpoint.rs)
//! wal-<first LSN, 16 hex>.log  a segment: a header, then the log stream
//!                              from its first LSN to the next segment's
//! ```
//!
//! An LSN is a position in the endless log stream. Appends encode a
//! [`RedoGroup`] into a memory buffer and return the LSN just past it;
//! [`Wal::flush_to`] makes the log durable up to an LSN with one write and
//! one `sync_data` for everything buffered (group commit: writers that
//! arrive during a sync share the next one). A buffer that fills is flushed
//! by the log writer thread, if one runs ([`Wal::run_log_writer`]), while
//! appends go on. Every flush starts at a sector boundary with a
//! flush-start marker and is padded with zeros to the next boundary, so no
//! synced sector is ever rewritten.
//!
//! A checkpoint starts a new segment ([`Wal::rotate`], with appends kept
//! out) and records its first LSN; once recorded, the segments before it
//! are deleted. So the files hold the log since the last checkpoint began,
//! and the log's budget (`log_bytes`) bounds that, not the files' size: an
//! append that would pass it is [`Error::LogFull`] until a checkpoint.
//! Segments grow as the log is written, a few MiB of zeros ahead of it.
//!
//! Recovery ([`Wal::open`]) reads the newest valid checkpoint slot and
//! replays groups from its LSN, across segments, until the first one that
//! is missing or fails its CRC: that is the end of the log. Unsynced bytes
//! can only lie in the last flush, so a valid flush-start marker beyond the
//! end proves that the damaged group had been synced: that is reported as
//! corruption instead of being silently cut off. Recovery then zeroes the
//! window where unsynced bytes of the last flush may remain, so that a
//! later crash can never replay them after newer records. A log written by
//! an earlier build (a ring in `wal.log`, slot versions 1 to 6) is refused.

mod checkpoint;
mod reader;
mod record;
mod segment;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use barracuda_base::Lsn;
use barracuda_io::{AlignedBuf, BlockFile};
use parking_lot::{Condvar, Mutex};
use serde::Serialize;

pub use checkpoint::{CHECKPOINT_FORMAT_VERSION, CHECKPOINT_PAYLOAD_BYTES_MAX, Checkpoint};
pub use record::{
    GROUP_BYTES_MAX, IMAGE_OVERHEAD_BYTES_MAX, LoggedGroup, Patches, RedoEntry, RedoGroup,
};
#[cfg(test)]
use segment::MemLogDir;
#[cfg(any(test, feature = "testing"))]
pub use segment::segment_file_name;
pub use segment::{CONTROL_FILE_NAME, FileWrap, FsLogDir, LogDir, parse_segment_file_name};

use crate::error::{Error, Result};
use reader::{LogSource, Reader, Replayed};
use record::FLUSH_START_BYTES;
use segment::{Segment, SegmentSource};

/// Smallest budget: room for a few maximal flushes.
pub const LOG_BYTES_MIN: u64 = 64 << 10;

/// Largest budget, 1 TiB: far more than any checkpoint interval writes,
/// and far from the overflow of the LSN arithmetic.
pub const LOG_BYTES_MAX: u64 = 1 << 40;

/// Default budget: 128 MiB.
pub const LOG_BYTES_DEFAULT: u64 = 128 << 20;

/// Options of the write-ahead log.
#[derive(Clone, Debug)]
pub struct WalOptions {
    log_bytes: u64,
    buffer_bytes_max: usize,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            log_bytes: LOG_BYTES_DEFAULT,
            buffer_bytes_max: /* 4 MiB */ 4 << 20,
        }
    }
}

impl WalOptions {
    /// The most log the files may hold after the last checkpoint: an
    /// append past it is [`Error::LogFull`] until a checkpoint advances.
    /// Rounded up to a multiple of the files' sector size. Default =
    /// 128 MiB.
    #[must_use]
    pub fn log_bytes(mut self, log_bytes: u64) -> Self {
        self.log_bytes = log_bytes;
        self
    }

    /// The most log bytes one flush writes: an append that would grow the
    /// buffer past it first flushes the buffer, or hands it to the log
    /// writer thread ([`Wal::run_log_writer`]). One flush is in flight at a
    /// time, so this (plus one group) bounds the window recovery must clean
    /// after a crash. Default = 4 MiB.
    #[cfg(test)]
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
    /// The log's budget after a checkpoint (`Options::log_bytes`).
    pub log_bytes: u64,
    /// Segment files now.
    pub segments: u64,
    /// Segments started since open (one per checkpoint that had log to
    /// pass).
    pub segments_started: u64,
    /// Segments deleted since open, once a checkpoint passed them.
    pub segments_removed: u64,
    /// Bytes of the log's files now: the control file and the segments
    /// (the zeros written ahead of the log included).
    pub file_bytes: u64,
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
    /// The segments, oldest first; appends go to the last one.
    segments: Vec<Segment>,
    /// The last segment's file holds log or zeros up to this LSN.
    extent_lsn: u64,
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
/// `start` of `segment`, then zeros over `zeros` (see
/// [`Wal::write_and_sync`]).
struct Flush {
    segment: Segment,
    start: u64,
    buf: AlignedBuf,
    padded_len: u64,
    zeros: Option<(u64, u64)>,
}

/// The largest flush buffer the log keeps between flushes.
const FLUSH_BUF_KEPT_BYTES_MAX: usize = 4 << 20;

/// How far ahead of the log a flush writes zeros when it passes the end of
/// its segment's file: the file is extended, and the file system's journal
/// committed, once per this many bytes of log, not once per sync.
const ZERO_AHEAD_BYTES: u64 = 4 << 20;

impl State {
    fn next_lsn(&self) -> u64 {
        self.buffer_lsn + self.buffer.len() as u64
    }

    fn current(&self) -> &Segment {
        self.segments
            .last()
            .unwrap_or_else(|| unreachable!("a log always has a segment"))
    }
}

/// The write-ahead log. `Send + Sync`: many threads append and wait at once.
pub struct Wal {
    dir: Arc<dyn LogDir>,
    control: Arc<dyn BlockFile>,
    sector_bytes: u64,
    header_bytes: u64,
    log_bytes: u64,
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
            .field("control", &self.control.path())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Wal {
    /// Opens the log in `dir`, creating it if its control file is empty,
    /// and replays every redo group from the newest checkpoint through
    /// `apply`, in log order. Returns the log, ready for appends after the
    /// last replayed group, and the checkpoint recovery started from.
    pub fn open(
        dir: Arc<dyn LogDir>,
        options: &WalOptions,
        mut apply: impl FnMut(&LoggedGroup) -> Result<()>,
    ) -> Result<(Wal, Checkpoint)> {
        let control = dir.control()?;
        let sector_bytes = control.alignment().offset_bytes as u64;
        let header_bytes = segment::header_bytes(sector_bytes);
        if options.log_bytes > LOG_BYTES_MAX {
            return Err(Error::InvalidOptions {
                reason: format!(
                    "log_bytes {} is above the maximum of {LOG_BYTES_MAX} (1 TiB)",
                    options.log_bytes
                ),
            });
        }
        let log_bytes = options
            .log_bytes
            .max(LOG_BYTES_MIN)
            .next_multiple_of(sector_bytes);
        let checkpoint = match read_checkpoint(control.as_ref(), sector_bytes)? {
            Some(checkpoint) => checkpoint,
            None => create(dir.as_ref(), control.as_ref(), sector_bytes, log_bytes)?,
        };
        checkpoint.check_supported()?;
        let window_bytes = options.buffer_bytes_max as u64 + GROUP_BYTES_MAX as u64;
        let (segments, start) = recover(
            dir.as_ref(),
            &checkpoint,
            sector_bytes,
            window_bytes,
            &mut apply,
        )?;
        let current = segments
            .last()
            .unwrap_or_else(|| unreachable!("recovery leaves a segment"));
        let extent_lsn = current.first_lsn + current.file.len()?.saturating_sub(header_bytes);
        tracing::debug!(
            checkpoint = checkpoint.lsn.0,
            end = start,
            segments = segments.len(),
            "log recovered"
        );
        let stats = WalStats {
            next_lsn: start,
            durable_lsn: start,
            checkpoint_lsn: checkpoint.lsn.0,
            log_bytes,
            ..WalStats::default()
        };
        let wal = Wal {
            dir,
            control,
            sector_bytes,
            header_bytes,
            log_bytes,
            buffer_bytes_max: options.buffer_bytes_max,
            state: Mutex::new(State {
                buffer: Vec::new(),
                buffer_lsn: start,
                flushing: false,
                checkpoint: checkpoint.clone(),
                failure: None,
                stats,
                flush_buf: None,
                segments,
                extent_lsn,
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

    /// The newest valid checkpoint of the log in `dir`, read without
    /// opening the log (nothing is replayed, created or changed): `None`
    /// if its control file is empty.
    pub fn peek_checkpoint(dir: &dyn LogDir) -> Result<Option<Checkpoint>> {
        let control = dir.control()?;
        let sector_bytes = control.alignment().offset_bytes as u64;
        read_checkpoint(control.as_ref(), sector_bytes)
    }

    /// Empties the control file of a log whose creation was cut short
    /// before its first checkpoint was synced (no slot holds a checkpoint),
    /// so that the next [`Wal::open`] creates the log again. The caller
    /// knows the database never held data: any other log without a
    /// checkpoint is damage, and [`Wal::open`] refuses it.
    pub fn forget_unfinished_creation(dir: &dyn LogDir) -> Result<()> {
        let control = dir.control()?;
        control.set_len(0)?;
        control.sync_data()?;
        Ok(())
    }

    fn round_up(&self, lsn: u64) -> u64 {
        lsn.next_multiple_of(self.sector_bytes)
    }

    /// Appends `group` and returns where it lies in the log. Not durable
    /// until [`Wal::flush_to`] its end returned.
    ///
    /// A page changed by the group holds `end` as its page LSN; the first
    /// group that dirtied a page bounds the checkpoint by its `start`.
    ///
    /// Fails with [`Error::LogFull`] if the log's budget has no room until
    /// a checkpoint advances, and with [`Error::LogFailed`] once a write or
    /// sync of the log has failed.
    pub fn append(&self, group: &RedoGroup) -> Result<LsnRange> {
        let len = group.encoded_len();
        let group_bytes_max = GROUP_BYTES_MAX.min((self.log_bytes / 4) as usize);
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
        // the budget after the checkpoint.
        let need = (len + FLUSH_START_BYTES) as u64 + self.sector_bytes;
        let used = state.next_lsn() - state.checkpoint.lsn.0;
        let free = self.log_bytes - used.min(self.log_bytes);
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
        let padded_len = self.round_up(data_len);
        let mut buf = match state.flush_buf.take() {
            Some(buf) if buf.len() >= padded_len as usize => buf,
            _ => AlignedBuf::zeroed(
                (padded_len as usize).next_power_of_two(),
                self.control.alignment().mem_bytes,
            ),
        };
        buf[..data_len as usize].copy_from_slice(&state.buffer);
        buf[data_len as usize..padded_len as usize].fill(0);
        state.buffer.clear();
        state.buffer_lsn = start + padded_len;
        state.flushing = true;
        let end = start + padded_len;
        // Zeros ahead of this flush, once it passes what its file holds.
        let zeros = (end > state.extent_lsn).then(|| (end, self.round_up(end + ZERO_AHEAD_BYTES)));
        Flush {
            segment: state.current().clone(),
            start,
            buf,
            padded_len,
            zeros,
        }
    }

    fn write_flush(&self, flush: &Flush) -> Result<()> {
        let data = &flush.buf[..flush.padded_len as usize];
        self.write_and_sync(&flush.segment, flush.start, data, flush.zeros)
    }

    /// Records the outcome of `flush`: the new durable LSN, or the failure
    /// that poisons the log; wakes the threads waiting for either.
    fn finish_flush(&self, state: &mut State, flush: Flush, result: Result<()>) -> Result<()> {
        let Flush {
            start,
            buf,
            padded_len,
            zeros,
            ..
        } = flush;
        let end = start + padded_len;
        state.flushing = false;
        if result.is_ok() {
            let written = zeros.map_or(end, |(_, until)| until);
            state.extent_lsn = state.extent_lsn.max(written);
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

    /// Writes `data` at `lsn` of `segment`, and zeros over the LSNs
    /// `zeros` (ahead of the log, past the file's end), then syncs once.
    fn write_and_sync(
        &self,
        segment: &Segment,
        lsn: u64,
        data: &[u8],
        zeros: Option<(u64, u64)>,
    ) -> Result<()> {
        let offset = |lsn: u64| self.header_bytes + (lsn - segment.first_lsn);
        segment.file.write_at(offset(lsn), data)?;
        if let Some((from, until)) = zeros {
            segment.file.write_zeros(offset(from), until - from)?;
        }
        segment.file.sync_data()?;
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

    /// Bytes of the log's budget in use, from the checkpoint to the end of
    /// the log.
    pub fn used_bytes(&self) -> u64 {
        let state = self.state.lock();
        state.next_lsn() - state.checkpoint.lsn.0
    }

    /// The log's budget after a checkpoint ([`WalOptions::log_bytes`]).
    pub fn log_bytes(&self) -> u64 {
        self.log_bytes
    }

    /// Ends the current segment and starts the next one, for a checkpoint:
    /// writes and syncs everything appended, then, if the current segment
    /// holds any log, creates a segment starting at the next LSN. Returns
    /// that LSN: everything before it is durable, and a checkpoint there
    /// lets [`Wal::checkpoint`] delete every segment before it. The caller
    /// keeps appends out (the Db's write mutex), so the LSN is the end of
    /// the log; appends that come anyway are written first, and the
    /// segment starts after them.
    pub fn rotate(&self) -> Result<Lsn> {
        let mut state = self.state.lock();
        loop {
            check_failure(&state)?;
            if state.flushing {
                self.flushed.wait(&mut state);
            } else if !state.buffer.is_empty() {
                self.flush_buffer(&mut state)?;
            } else {
                break;
            }
        }
        let lsn = state.buffer_lsn;
        if state.current().first_lsn == lsn {
            return Ok(Lsn(lsn));
        }
        // With the state locked: a flush must not pick the old segment now.
        match segment::create(self.dir.as_ref(), lsn) {
            Ok(file) => {
                state.segments.push(Segment {
                    first_lsn: lsn,
                    file,
                });
                state.extent_lsn = lsn;
                state.stats.segments_started += 1;
                Ok(Lsn(lsn))
            }
            Err(e) => {
                // A half-made segment may be left; recovery removes it.
                state.failure = Some(e.to_string());
                self.flushed.notify_all();
                Err(e)
            }
        }
    }

    /// Records a checkpoint: recovery will start at `lsn`, which must be
    /// durable already (every page change before it is in the data file,
    /// and synced). `payload` is stored with it for the layer above. Then
    /// deletes the segments that end at or before `lsn` (a checkpoint at
    /// the LSN [`Wal::rotate`] returned deletes all but the newest).
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
        // checkpoint still bounds the log (the conservative choice).
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
                format_version: CHECKPOINT_FORMAT_VERSION,
                sequence: state.checkpoint.sequence + 1,
                lsn,
                log_bytes: self.log_bytes,
                ring_growing: false,
                payload: payload.to_vec(),
            }
        };
        let slot = (next.sequence % 2) as usize;
        let written = write_checkpoint(self.control.as_ref(), self.sector_bytes, slot, &next);
        let dead: Vec<Segment> = {
            let mut state = self.state.lock();
            if let Err(e) = written {
                state.failure = Some(e.to_string());
                self.flushed.notify_all();
                return Err(e);
            }
            state.stats.checkpoint_lsn = lsn.0;
            state.checkpoint = next;
            // A segment is dead once the next one starts at or before the
            // checkpoint; the newest never is.
            let live_from = state
                .segments
                .iter()
                .rposition(|s| s.first_lsn <= lsn.0)
                .unwrap_or(0);
            state.stats.segments_removed += live_from as u64;
            state.segments.drain(..live_from).collect()
        };
        // No flush writes to a segment before the newest, and recovery reads
        // none before the checkpoint's: deleting them needs no lock.
        for segment in dead {
            let first_lsn = segment.first_lsn;
            drop(segment);
            if let Err(e) = self.dir.remove_segment(first_lsn) {
                // Only space is lost: recovery deletes it too.
                tracing::warn!(first_lsn, "cannot delete a log segment: {e}");
            }
        }
        Ok(())
    }

    /// Counters for status output.
    pub fn stats(&self) -> WalStats {
        let (mut stats, files) = {
            let state = self.state.lock();
            let files: Vec<_> = state.segments.iter().map(|s| s.file.clone()).collect();
            let mut stats = state.stats.clone();
            stats.next_lsn = state.next_lsn();
            (stats, files)
        };
        stats.durable_lsn = self.durable_lsn.load(Ordering::Acquire);
        stats.segments = files.len() as u64;
        stats.file_bytes = std::iter::once(&self.control)
            .chain(&files)
            .map(|f| f.len().unwrap_or(0))
            .sum();
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

/// The newest checkpoint slot of the control file; `None` for an empty
/// file (a new log).
fn read_checkpoint(control: &dyn BlockFile, sector_bytes: u64) -> Result<Option<Checkpoint>> {
    if control.len()? == 0 {
        return Ok(None);
    }
    let sector = sector_bytes as usize;
    let mut buf = control.alloc_buf(2 * sector);
    control.read_at(0, &mut buf)?;
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

/// The first LSN of a new log.
fn first_lsn(sector_bytes: u64) -> u64 {
    sector_bytes.max(4096)
}

/// Makes a new log: its first segment, then the control file with its
/// first checkpoint. Segment files found without a checkpoint were made by
/// a creation cut short and hold nothing; any that holds log is damage.
fn create(
    dir: &dyn LogDir,
    control: &dyn BlockFile,
    sector_bytes: u64,
    log_bytes: u64,
) -> Result<Checkpoint> {
    let header_bytes = segment::header_bytes(sector_bytes);
    for first_lsn in dir.segments()? {
        if dir.open_segment(first_lsn, false)?.len()? > header_bytes {
            return Err(Error::LogCorrupted {
                lsn: Lsn(first_lsn),
                reason: "a log segment holds log but the log has no checkpoint",
            });
        }
        dir.remove_segment(first_lsn)?;
    }
    let lsn = first_lsn(sector_bytes);
    segment::create(dir, lsn)?;
    control.set_len(checkpoint::control_file_bytes(sector_bytes))?;
    let checkpoint = Checkpoint {
        format_version: CHECKPOINT_FORMAT_VERSION,
        sequence: 0,
        lsn: Lsn(lsn),
        log_bytes,
        ring_growing: false,
        payload: Vec::new(),
    };
    write_checkpoint(control, sector_bytes, 0, &checkpoint)?;
    Ok(checkpoint)
}

fn write_checkpoint(
    control: &dyn BlockFile,
    sector_bytes: u64,
    slot: usize,
    checkpoint: &Checkpoint,
) -> Result<()> {
    let mut sector = control.alloc_buf(sector_bytes as usize);
    checkpoint.encode(&mut sector);
    control.write_at(slot as u64 * sector_bytes, &sector)?;
    control.sync_data()?;
    Ok(())
}

/// Opens the segments from the one holding `checkpoint` on (deleting those
/// before it, which a checkpoint did not get to delete), replays them, and
/// cleans the tail. Returns the segments and the LSN where appends go on.
fn recover(
    dir: &dyn LogDir,
    checkpoint: &Checkpoint,
    sector_bytes: u64,
    window_bytes: u64,
    apply: &mut impl FnMut(&LoggedGroup) -> Result<()>,
) -> Result<(Vec<Segment>, u64)> {
    let header_bytes = segment::header_bytes(sector_bytes);
    let round_up = |lsn: u64| lsn.next_multiple_of(sector_bytes);
    let mut firsts = dir.segments()?;
    let Some(at) = firsts.iter().rposition(|&f| f <= checkpoint.lsn.0) else {
        return Err(Error::LogCorrupted {
            lsn: checkpoint.lsn,
            reason: "the log segment holding the checkpoint is missing",
        });
    };
    for &first_lsn in &firsts[..at] {
        dir.remove_segment(first_lsn)?;
    }
    firsts.drain(..at);
    let mut segments: Vec<Segment> = Vec::new();
    for (i, &first_lsn) in firsts.iter().enumerate() {
        let file = dir.open_segment(first_lsn, false)?;
        if !segment::header_is_valid(file.as_ref(), first_lsn)? {
            // A segment whose creation was cut short: the newest, after the
            // checkpoint's, and nothing in it (appends wait for its header).
            if i > 0 && i + 1 == firsts.len() && file.len()? <= header_bytes {
                drop(file);
                dir.remove_segment(first_lsn)?;
                break;
            }
            return Err(Error::LogCorrupted {
                lsn: Lsn(first_lsn),
                reason: "a log segment's header is damaged",
            });
        }
        segments.push(Segment { first_lsn, file });
    }
    let source = SegmentSource::new(&segments, sector_bytes)?;
    let mut reader = Reader::new(&source, checkpoint.lsn.0);
    let Replayed { end_lsn, log_end } = reader.replay(apply)?;
    let last_first = segments.last().map_or(checkpoint.lsn.0, |s| s.first_lsn);
    if round_up(log_end) < last_first {
        // A segment starts only once everything before it is synced.
        return Err(Error::LogCorrupted {
            lsn: Lsn(log_end),
            reason: "the log ends before its last segment starts",
        });
    }
    reader.check_nothing_synced_after(log_end, source.limit())?;
    // Zero what the interrupted flush may have written after the end (one
    // buffer plus one group), and the groups of an unfinished write.
    let limit = round_up(log_end + window_bytes).min(source.limit());
    clean_tail(&segments, sector_bytes, end_lsn, limit)?;
    Ok((segments, round_up(end_lsn).max(last_first)))
}

/// Zeroes the log stream over `[end_lsn, limit)` where the segments' files
/// hold it, keeping the bytes before `end_lsn` in its sector, and syncs.
/// Nothing there was acknowledged; left in place, a record of it could be
/// replayed after a later crash, behind records written after this
/// recovery. The groups of an unfinished write (after `end_lsn`) are
/// zeroed too: a group appended after them must never finish that write.
fn clean_tail(segments: &[Segment], sector_bytes: u64, end_lsn: u64, limit: u64) -> Result<()> {
    let header_bytes = segment::header_bytes(sector_bytes);
    for (i, segment) in segments.iter().enumerate() {
        let until = segments.get(i + 1).map_or(u64::MAX, |s| s.first_lsn);
        let file_end = segment.first_lsn + segment.file.len()?.saturating_sub(header_bytes);
        let from = end_lsn.max(segment.first_lsn);
        let to = limit.min(until).min(file_end);
        if from >= to {
            continue;
        }
        let offset = |lsn: u64| header_bytes + (lsn - segment.first_lsn);
        let mut at = from - from % sector_bytes;
        if at < from {
            let mut first = segment.file.alloc_buf(sector_bytes as usize);
            segment.file.read_at(offset(at), &mut first)?;
            first[(from - at) as usize..].fill(0);
            segment.file.write_at(offset(at), &first)?;
            at += sector_bytes;
        }
        if at < to {
            segment.file.write_zeros(offset(at), to - at)?;
        }
        segment.file.sync_data()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
