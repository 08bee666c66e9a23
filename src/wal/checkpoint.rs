//! The checkpoint header: two slots at the start of the log's control file
//! (`wal.log`), written alternately, so that a torn write of one leaves the
//! other intact.
//!
//! Byte layout of a slot (integers little-endian; the slot is one aligned
//! sector, the rest zero):
//!
//! ```text
//! offset size field
//!      0    4 magic            "BRCK" (CHECKPOINT_MAGIC)
//!      4    4 format_version   CHECKPOINT_FORMAT_VERSION
//!      8    8 sequence         grows by one per checkpoint; the valid slot
//!                              with the highest sequence wins
//!     16    8 checkpoint_lsn   recovery replays the log from here
//!     24    8 log_bytes        version 7: the log's budget when written
//!                              (`Options::log_bytes`, informational);
//!                              versions 1 to 6: the size of the ring
//!     32    4 payload_len      bytes of payload that follow the header
//!     36    4 crc32c           over [0, 48 + payload_len) with this field zero
//!     40    4 flags            versions 2 to 6, bit 0: the ring is growing
//!                              (its first lap: the file may end before the
//!                              ring does); version 7: zero
//!     44    4 reserved         zero
//!     48    . payload          opaque to the log (the Db's catalog root, ...)
//! ```
//!
//! Version 1 slots (no flags, the payload at 40), version 2 slots (bit 0
//! meant "cut off at a clean close": a growing ring of which the file holds
//! nothing), version 3 slots (logs that image pages) and version 4 slots
//! (logs without zero-fill patches), version 5 slots (logs without logical
//! entries) and version 6 slots are still decoded, so that the log of an
//! earlier build is refused as such rather than taken for damage: up to
//! version 6 the log is a ring in the same file after the slots, a format
//! this build does not read; from version 7 it is in segment files
//! (`segment.rs`).

use barracuda_base::Lsn;

use crate::error::{Error, Result};

/// Marks a checkpoint slot.
pub const CHECKPOINT_MAGIC: u32 = u32::from_le_bytes(*b"BRCK");

/// Version of the slot layout above. Version 3 gave flag bit 0 the wider
/// meaning "growing": a build that knew only version 2 would take a growing
/// ring for an empty one and skip its records, so it must refuse the slot.
/// Version 4 (same layout) means the log no longer images a page before
/// its first change after a checkpoint: recovery starts from the data
/// file's blocks, which the doublewrite areas keep whole, and skips the
/// changes a block already holds. A version 3 build would apply them again,
/// so it must refuse the slot. Version 5 (same layout) means the log may
/// hold zero-fill patches (see `record.rs`), which a version 4 build would
/// read as damage. Version 6 (same layout) means the log may hold logical
/// entries (rebuild, insert, delete; see `record.rs`), which a version 5
/// build would read as damage. Version 7 (same layout) means the log is in
/// segment files beside the slots (`segment.rs`), which a version 6 build
/// would not find.
pub const CHECKPOINT_FORMAT_VERSION: u32 = 7;

/// The last version whose log is a ring in the slots' file (decoded to be
/// refused).
const CHECKPOINT_V6: u32 = 6;

/// The version whose logs hold no logical entries (decoded to be refused).
const CHECKPOINT_V5: u32 = 5;

/// The version whose logs hold no zero-fill patches (decoded to be
/// refused).
const CHECKPOINT_V4: u32 = 4;

/// The version whose flag bit 0 meant "cut off at a clean close".
const CHECKPOINT_V2: u32 = 2;

/// The version whose logs image every page before its first change after
/// a checkpoint (decoded to be refused).
const CHECKPOINT_V3: u32 = 3;

/// Bytes of a slot header before the payload.
pub const CHECKPOINT_HEADER_BYTES: usize = 48;

/// Bytes of a version 1 slot header (no flags).
const CHECKPOINT_V1_HEADER_BYTES: usize = 40;

/// Flag: the ring is growing ([`Checkpoint::ring_growing`]).
const FLAG_RING_GROWING: u32 = 1;

/// Largest payload: a slot must fit one 512-byte sector, the unit the
/// storage writes atomically.
pub const CHECKPOINT_PAYLOAD_BYTES_MAX: usize = 512 - CHECKPOINT_HEADER_BYTES;

const CRC_OFFSET: usize = 36;

/// The control file's size: the two slots, on a 4 KiB boundary.
pub(crate) fn control_file_bytes(sector_bytes: u64) -> u64 {
    (2 * sector_bytes).max(4096).next_multiple_of(sector_bytes)
}

/// The content of a checkpoint slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The slot's format version: [`CHECKPOINT_FORMAT_VERSION`] for every
    /// slot this build writes; 6 or less for a log that is a ring in the
    /// slots' file, which open refuses ([`Checkpoint::check_supported`]).
    pub format_version: u32,
    /// Grows by one per checkpoint written.
    pub sequence: u64,
    /// Recovery replays the log from here: every change before it is in the
    /// data file, durably.
    pub lsn: Lsn,
    /// Version 7: the log's budget when the slot was written. Versions 1 to
    /// 6: the size of the ring the slot was written for.
    pub log_bytes: u64,
    /// Versions 2 to 6: the ring is in its first lap since it was made (a
    /// new log) or restarted empty (at a clean close, after a compaction):
    /// the file may end before the ring does. Decoded only: such a log is
    /// refused. Always false in version 7.
    pub ring_growing: bool,
    /// Opaque bytes for the layer above (at most
    /// [`CHECKPOINT_PAYLOAD_BYTES_MAX`]).
    pub payload: Vec<u8>,
}

impl Checkpoint {
    /// Refuses the slot of a log this build does not read: a log written by
    /// an earlier build (versions 1 to 6, a ring in the control file). The
    /// slot decodes, so it is not damage; the log is left as it is.
    pub(crate) fn check_supported(&self) -> Result<()> {
        if self.format_version == CHECKPOINT_FORMAT_VERSION {
            return Ok(());
        }
        Err(Error::CheckpointCorrupted {
            slot: (self.sequence % 2) as usize,
            reason: "the log was written by an earlier build, in a format (a ring in \
                     the control file, slot version 1 to 6) that is not supported",
        })
    }

    /// Encodes the slot into `sector` (zeroing the rest of it), as version
    /// `format_version` (this build writes only its own; tests write older
    /// ones).
    pub(crate) fn encode(&self, sector: &mut [u8]) {
        assert!(self.payload.len() <= CHECKPOINT_PAYLOAD_BYTES_MAX);
        assert!(sector.len() >= CHECKPOINT_HEADER_BYTES + self.payload.len());
        sector.fill(0);
        sector[0..4].copy_from_slice(&CHECKPOINT_MAGIC.to_le_bytes());
        sector[4..8].copy_from_slice(&self.format_version.to_le_bytes());
        sector[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        sector[16..24].copy_from_slice(&self.lsn.0.to_le_bytes());
        sector[24..32].copy_from_slice(&self.log_bytes.to_le_bytes());
        let payload_len = u32::try_from(self.payload.len()).expect("bounded payload");
        sector[32..36].copy_from_slice(&payload_len.to_le_bytes());
        let flags = if self.ring_growing {
            FLAG_RING_GROWING
        } else {
            0
        };
        sector[40..44].copy_from_slice(&flags.to_le_bytes());
        let end = CHECKPOINT_HEADER_BYTES + self.payload.len();
        sector[CHECKPOINT_HEADER_BYTES..end].copy_from_slice(&self.payload);
        let crc = crc32c::crc32c(&sector[..end]);
        sector[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decodes a slot: `Ok(None)` for a never-written (all-zero) slot, an
    /// error for a damaged one.
    pub(crate) fn decode(sector: &[u8], slot: usize) -> Result<Option<Checkpoint>> {
        let header = sector
            .get(..CHECKPOINT_HEADER_BYTES)
            .ok_or(Error::CheckpointCorrupted {
                slot,
                reason: "slot shorter than its header",
            })?;
        if header.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let corrupted = |reason| Error::CheckpointCorrupted { slot, reason };
        let u32_at =
            |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap_or([0; 4]));
        let u64_at =
            |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or([0; 8]));
        if u32_at(0) != CHECKPOINT_MAGIC {
            return Err(corrupted("bad magic"));
        }
        let (header_bytes, flags) = match u32_at(4) {
            1 => (CHECKPOINT_V1_HEADER_BYTES, 0),
            CHECKPOINT_V2
            | CHECKPOINT_V3
            | CHECKPOINT_V4
            | CHECKPOINT_V5
            | CHECKPOINT_V6
            | CHECKPOINT_FORMAT_VERSION => (CHECKPOINT_HEADER_BYTES, u32_at(40)),
            _ => return Err(corrupted("unknown format version")),
        };
        let payload_len = u32_at(32) as usize;
        if header_bytes + payload_len > sector.len().min(512) {
            return Err(corrupted("payload length too large"));
        }
        let end = header_bytes + payload_len;
        let crc = crc32c::crc32c(&sector[..CRC_OFFSET]);
        let crc = crc32c::crc32c_append(crc, &[0; 4]);
        let crc = crc32c::crc32c_append(crc, &sector[CRC_OFFSET + 4..end]);
        if crc != u32_at(CRC_OFFSET) {
            return Err(corrupted("checksum mismatch"));
        }
        let version = u32_at(4);
        let known_flags = if version == CHECKPOINT_FORMAT_VERSION {
            0
        } else {
            FLAG_RING_GROWING
        };
        if flags & !known_flags != 0 {
            return Err(corrupted("unknown flags"));
        }
        Ok(Some(Checkpoint {
            format_version: version,
            sequence: u64_at(8),
            lsn: Lsn(u64_at(16)),
            log_bytes: u64_at(24),
            ring_growing: flags & FLAG_RING_GROWING != 0,
            payload: sector[header_bytes..end].to_vec(),
        }))
    }
}

/// Chooses the newest valid slot. One damaged slot is tolerated (a torn
/// checkpoint write); two damaged slots are an error.
pub(crate) fn newest(
    slots: [Result<Option<Checkpoint>>; 2],
) -> Result<Option<(usize, Checkpoint)>> {
    let [a, b] = slots;
    match (a, b) {
        (Err(e), Err(_)) => Err(e),
        (Ok(a), Err(_)) => Ok(a.map(|c| (0, c))),
        (Err(_), Ok(b)) => Ok(b.map(|c| (1, c))),
        (Ok(a), Ok(b)) => Ok(match (a, b) {
            (Some(a), Some(b)) if b.sequence > a.sequence => Some((1, b)),
            (Some(a), _) => Some((0, a)),
            (None, Some(b)) => Some((1, b)),
            (None, None) => None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot of this build's version.
    fn checkpoint(sequence: u64) -> Checkpoint {
        Checkpoint {
            format_version: CHECKPOINT_FORMAT_VERSION,
            sequence,
            lsn: Lsn(4096 * sequence),
            log_bytes: 1 << 20,
            ring_growing: false,
            payload: b"catalog".to_vec(),
        }
    }

    /// A slot of an earlier build's version, its ring growing for odd
    /// sequences.
    fn ring_checkpoint(version: u32, sequence: u64) -> Checkpoint {
        Checkpoint {
            format_version: version,
            ring_growing: sequence % 2 == 1,
            ..checkpoint(sequence)
        }
    }

    #[test]
    fn round_trip_and_newest_wins() {
        let mut a = [0u8; 512];
        let mut b = [0u8; 512];
        checkpoint(3).encode(&mut a);
        checkpoint(4).encode(&mut b);
        let chosen = newest([Checkpoint::decode(&a, 0), Checkpoint::decode(&b, 1)]).unwrap();
        assert_eq!(chosen, Some((1, checkpoint(4))));
    }

    #[test]
    fn one_torn_slot_falls_back_to_the_other() {
        let mut a = [0u8; 512];
        let mut b = [0u8; 512];
        checkpoint(3).encode(&mut a);
        checkpoint(4).encode(&mut b);
        b[17] ^= 0x40;
        assert!(matches!(
            Checkpoint::decode(&b, 1),
            Err(Error::CheckpointCorrupted { slot: 1, .. })
        ));
        let chosen = newest([Checkpoint::decode(&a, 0), Checkpoint::decode(&b, 1)]).unwrap();
        assert_eq!(chosen, Some((0, checkpoint(3))));
        a[2] ^= 1;
        assert!(newest([Checkpoint::decode(&a, 0), Checkpoint::decode(&b, 1)]).is_err());
    }

    #[test]
    fn empty_slots_mean_a_new_log() {
        let zero = [0u8; 512];
        let chosen = newest([Checkpoint::decode(&zero, 0), Checkpoint::decode(&zero, 1)]).unwrap();
        assert_eq!(chosen, None);
    }

    #[test]
    fn a_version_1_slot_still_reads() {
        // Version 1: the payload right after a 40-byte header, no flags.
        let mut v1 = [0u8; 512];
        v1[0..4].copy_from_slice(&CHECKPOINT_MAGIC.to_le_bytes());
        v1[4..8].copy_from_slice(&1u32.to_le_bytes());
        v1[8..16].copy_from_slice(&7u64.to_le_bytes());
        v1[16..24].copy_from_slice(&8192u64.to_le_bytes());
        v1[24..32].copy_from_slice(&(1u64 << 20).to_le_bytes());
        v1[32..36].copy_from_slice(&3u32.to_le_bytes());
        v1[40..43].copy_from_slice(b"abc");
        let crc = crc32c::crc32c(&v1[..43]);
        v1[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        let read = Checkpoint::decode(&v1, 0).unwrap().unwrap();
        assert_eq!(
            read,
            Checkpoint {
                format_version: 1,
                sequence: 7,
                lsn: Lsn(8192),
                log_bytes: 1 << 20,
                ring_growing: false,
                payload: b"abc".to_vec(),
            }
        );
    }

    #[test]
    fn version_3_to_6_slots_still_read() {
        for version in [CHECKPOINT_V3, CHECKPOINT_V4, CHECKPOINT_V5, CHECKPOINT_V6] {
            let mut slot = [0u8; 512];
            ring_checkpoint(version, 3).encode(&mut slot);
            assert_eq!(
                Checkpoint::decode(&slot, 0).unwrap(),
                Some(ring_checkpoint(version, 3)),
                "version {version}"
            );
        }
        // A growing flag in this build's version is damage.
        let mut slot = [0u8; 512];
        ring_checkpoint(CHECKPOINT_FORMAT_VERSION, 3).encode(&mut slot);
        assert!(Checkpoint::decode(&slot, 0).is_err());
        // A version after this build's is refused, not guessed at.
        let mut slot = [0u8; 512];
        checkpoint(3).encode(&mut slot);
        slot[4..8].copy_from_slice(&(CHECKPOINT_FORMAT_VERSION + 1).to_le_bytes());
        assert!(Checkpoint::decode(&slot, 0).is_err());
    }

    #[test]
    fn a_version_2_cut_flag_reads_as_growing() {
        let mut slot = [0u8; 512];
        ring_checkpoint(CHECKPOINT_V2, 3).encode(&mut slot);
        let read = Checkpoint::decode(&slot, 0).unwrap().unwrap();
        assert!(read.ring_growing);
        assert_eq!(read, ring_checkpoint(CHECKPOINT_V2, 3));
    }

    #[test]
    fn unknown_flags_are_corruption() {
        let mut slot = [0u8; 512];
        checkpoint(2).encode(&mut slot);
        slot[41] = 0x80;
        let crc = {
            let c = crc32c::crc32c(&slot[..CRC_OFFSET]);
            let c = crc32c::crc32c_append(c, &[0; 4]);
            crc32c::crc32c_append(c, &slot[CRC_OFFSET + 4..CHECKPOINT_HEADER_BYTES + 7])
        };
        slot[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Checkpoint::decode(&slot, 0),
            Err(Error::CheckpointCorrupted { slot: 0, .. })
        ));
    }
}
