//! Recovery's reader: replays redo groups from an LSN until the end of the
//! log, over a [`LogSource`] (the log's segment files).

use barracuda_base::Lsn;

use super::record::{self, GROUP_HEADER_BYTES, GroupHeader, GroupKind, LoggedGroup};
use crate::error::{Error, Result};

/// How much the reader fetches per read during recovery.
const RECOVERY_READ_BYTES: u64 = 1 << 20;

/// Where the bytes of the log stream lie, for the reader.
pub(crate) trait LogSource {
    /// The unit of the log's writes: flushes start on a multiple of it.
    fn sector_bytes(&self) -> u64;

    /// Reads `out.len()` bytes of the stream from `lsn` (a multiple of the
    /// sector, as is the length). What no file holds reads as zeros.
    fn read(&self, lsn: u64, out: &mut [u8]) -> Result<()>;

    /// No group lies at or past this LSN: the end of what the files hold.
    fn limit(&self) -> u64;
}

/// Where a replay ended.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replayed {
    /// Just past the last group applied.
    pub(crate) end_lsn: u64,
    /// Just past the last valid group: after `end_lsn` when the log ends
    /// inside an unfinished write.
    pub(crate) log_end: u64,
}

/// Reads the log during recovery through a window of sector-aligned reads.
pub(crate) struct Reader<'a, S: LogSource> {
    source: &'a S,
    window_lsn: u64,
    window: Vec<u8>,
    start_lsn: u64,
}

impl<'a, S: LogSource> Reader<'a, S> {
    pub(crate) fn new(source: &'a S, start_lsn: u64) -> Reader<'a, S> {
        Reader {
            source,
            window_lsn: 0,
            window: Vec::new(),
            start_lsn,
        }
    }

    fn round_up(&self, lsn: u64) -> u64 {
        lsn.next_multiple_of(self.source.sector_bytes())
    }

    /// The bytes `[lsn, lsn + len)`, which must lie before the source's
    /// limit (rounded up to a sector).
    fn bytes(&mut self, lsn: u64, len: usize) -> Result<&[u8]> {
        let end = lsn + len as u64;
        let covered = lsn >= self.window_lsn && end <= self.window_lsn + self.window.len() as u64;
        if !covered {
            let from = lsn - lsn % self.source.sector_bytes();
            let to = self
                .round_up(end.max(from + RECOVERY_READ_BYTES))
                .min(self.round_up(self.source.limit()))
                .max(self.round_up(end));
            self.window.resize((to - from) as usize, 0);
            self.source.read(from, &mut self.window)?;
            self.window_lsn = from;
        }
        let at = (lsn - self.window_lsn) as usize;
        Ok(&self.window[at..at + len])
    }

    /// The header of a group that validly starts at `lsn`, if any.
    fn header_at(&mut self, lsn: u64) -> Result<Option<GroupHeader>> {
        let limit = self.source.limit();
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
    pub(crate) fn replay(
        &mut self,
        apply: &mut impl FnMut(&LoggedGroup) -> Result<()>,
    ) -> Result<Replayed> {
        let mut lsn = self.start_lsn;
        let mut end_lsn = lsn;
        let mut unfinished: Vec<LoggedGroup> = Vec::new();
        loop {
            let Some(header) = self.header_at(lsn)? else {
                let aligned = self.round_up(lsn);
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

    /// Fails if a valid flush-start marker lies after `end_lsn` and before
    /// `limit`: the flush it starts was written only after everything
    /// before it was synced, so the group that ended replay at `end_lsn`
    /// was damaged after a sync.
    pub(crate) fn check_nothing_synced_after(&mut self, end_lsn: u64, limit: u64) -> Result<()> {
        let sector = self.source.sector_bytes();
        let limit = limit.min(self.source.limit());
        let mut lsn = self.round_up(end_lsn + 1);
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
            lsn += sector;
        }
        Ok(())
    }
}
