//! Logs written by earlier builds (checkpoint slot versions 1 to 6): one
//! circular file, read once at open and then replaced by segments.
//!
//! ```text
//! file offset                        content
//! 0                                  checkpoint slot 0 (one sector)
//! sector                             checkpoint slot 1 (one sector)
//! ring_start = max(2 sectors, 4 KiB) the ring: LSN `l` lives at
//!                                    ring_start + (l % ring_bytes)
//! ```
//!
//! A ring flagged growing ([`Checkpoint::ring_growing`]) may end before its
//! lap does; nothing of that lap lies past the file's end, which reads as
//! zeros. [`convert`] moves the log after the checkpoint into a segment of
//! this build's format and cuts the ring off the file.

use barracuda_io::BlockFile;

use super::checkpoint::{CHECKPOINT_FORMAT_VERSION, Checkpoint};
use super::reader::{LogSource, RECOVERY_READ_BYTES, Reader, Replayed};
use super::record::LoggedGroup;
use super::segment::{self, LogDir};
use crate::error::{Error, Result};

/// The part of the file before the ring: the two slots, on a 4 KiB
/// boundary (also the size of this build's control file).
pub(crate) fn ring_start_bytes(sector_bytes: u64) -> u64 {
    (2 * sector_bytes).max(4096).next_multiple_of(sector_bytes)
}

/// A ring as a [`LogSource`], from its checkpoint on.
struct RingSource<'a> {
    file: &'a dyn BlockFile,
    sector_bytes: u64,
    ring_start_bytes: u64,
    ring_bytes: u64,
    checkpoint_lsn: u64,
    /// Past this LSN the file has ended: zeros (a growing ring).
    readable_end: u64,
}

impl RingSource<'_> {
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

impl LogSource for RingSource<'_> {
    fn sector_bytes(&self) -> u64 {
        self.sector_bytes
    }

    fn read(&self, lsn: u64, out: &mut [u8]) -> Result<()> {
        let end = lsn + out.len() as u64;
        let readable = self.readable_end.clamp(lsn, end);
        let (file_part, past_end) = out.split_at_mut((readable - lsn) as usize);
        past_end.fill(0);
        let mut done = 0usize;
        for (offset, len) in self.pieces(lsn, file_part.len() as u64) {
            if len == 0 {
                continue;
            }
            let mut piece = self.file.alloc_buf(len as usize);
            self.file.read_at(offset, &mut piece)?;
            file_part[done..done + len as usize].copy_from_slice(&piece);
            done += len as usize;
        }
        Ok(())
    }

    fn limit(&self) -> u64 {
        self.checkpoint_lsn + self.ring_bytes
    }
}

/// The ring of `file` from `checkpoint` (a version 1 to 6 slot) as a
/// source; `None` if the file holds nothing after the checkpoint (a ring
/// cut at a clean close).
fn source<'a>(file: &'a dyn BlockFile, checkpoint: &Checkpoint) -> Result<Option<RingSource<'a>>> {
    let sector_bytes = file.alignment().offset_bytes as u64;
    let ring_bytes = checkpoint.log_bytes;
    if ring_bytes < (64 << 10) || !ring_bytes.is_multiple_of(sector_bytes) {
        return Err(Error::LogCorrupted {
            lsn: checkpoint.lsn,
            reason: "checkpoint names an impossible ring size",
        });
    }
    let ring_start_bytes = ring_start_bytes(sector_bytes);
    let file_len = file.len()?;
    let full_len = ring_start_bytes + ring_bytes;
    if file_len < full_len && !checkpoint.ring_growing {
        return Err(Error::LogCorrupted {
            lsn: checkpoint.lsn,
            reason: "log file shorter than its ring",
        });
    }
    let lsn = checkpoint.lsn.0;
    let readable_end = if file_len < full_len {
        lsn - lsn % ring_bytes + file_len.saturating_sub(ring_start_bytes)
    } else {
        u64::MAX
    };
    Ok((readable_end > lsn).then_some(RingSource {
        file,
        sector_bytes,
        ring_start_bytes,
        ring_bytes,
        checkpoint_lsn: lsn,
        readable_end,
    }))
}

/// Replays the ring of `file` from `checkpoint` (a version 1 to 6 slot)
/// through `apply`. Returns where the log ended; nothing is written.
pub(crate) fn replay(
    file: &dyn BlockFile,
    checkpoint: &Checkpoint,
    apply: &mut impl FnMut(&LoggedGroup) -> Result<()>,
) -> Result<Replayed> {
    let lsn = checkpoint.lsn.0;
    let Some(source) = source(file, checkpoint)? else {
        return Ok(Replayed {
            end_lsn: lsn,
            log_end: lsn,
        });
    };
    let mut reader = Reader::new(&source, lsn);
    let replayed = reader.replay(apply)?;
    reader.check_nothing_synced_after(replayed.log_end, source.readable_end)?;
    Ok(replayed)
}

/// Moves the log of an earlier build's ring into a segment: checks the
/// ring and finds its end (a replay that applies nothing), copies the
/// stream from the checkpoint's sector to the end into a new segment at the
/// same LSNs, records a checkpoint of this build's version at the same LSN,
/// and cuts the ring off the control file. Recovery then replays the
/// segment as any other. A crash before the slot leaves the ring in
/// charge: the next open converts again (removing the segments a
/// conversion cut short made, which hold nothing else).
pub(crate) fn convert(
    dir: &dyn LogDir,
    control: &dyn BlockFile,
    checkpoint: &Checkpoint,
) -> Result<Checkpoint> {
    let sector_bytes = control.alignment().offset_bytes as u64;
    let lsn = checkpoint.lsn.0;
    let log_end = replay(control, checkpoint, &mut |_| Ok(()))?.log_end;
    for first_lsn in dir.segments()? {
        dir.remove_segment(first_lsn)?;
    }
    let first_lsn = lsn - lsn % sector_bytes;
    let segment = segment::create(dir, first_lsn)?;
    if let Some(source) = source(control, checkpoint)? {
        let header_bytes = segment::header_bytes(sector_bytes);
        let end = log_end.next_multiple_of(sector_bytes);
        let mut at = first_lsn;
        while at < end {
            let len = (end - at).min(RECOVERY_READ_BYTES);
            let mut piece = segment.alloc_buf(len as usize);
            source.read(at, &mut piece)?;
            segment.write_at(header_bytes + (at - first_lsn), &piece)?;
            at += len;
        }
        segment.sync_data()?;
    }
    let converted = Checkpoint {
        format_version: CHECKPOINT_FORMAT_VERSION,
        sequence: checkpoint.sequence + 1,
        lsn: checkpoint.lsn,
        log_bytes: checkpoint.log_bytes,
        ring_growing: false,
        payload: checkpoint.payload.clone(),
    };
    super::write_checkpoint(
        control,
        sector_bytes,
        (converted.sequence % 2) as usize,
        &converted,
    )?;
    control.set_len(ring_start_bytes(sector_bytes))?;
    control.sync_data()?;
    tracing::info!(
        checkpoint = lsn,
        log_bytes = log_end - lsn,
        "moved the log of an earlier build's ring into a segment"
    );
    Ok(converted)
}
