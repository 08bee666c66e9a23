//! Records out of their page: owned copies to rebuild pages from, and
//! borrowed records to insert.

use super::*;
use barracuda_base::PageId;

/// An owned record, used to rebuild pages in splits, merges and reorganizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecBuf {
    /// The key (ignored for the first record of an internal page).
    pub key: Vec<u8>,
    /// Record flags.
    pub flags: u8,
    /// Stored value bytes (inline value, overflow reference, or child id).
    pub value: Vec<u8>,
    /// Offset in the page it came from, used to keep records in place.
    pub old_offset: Option<usize>,
}

impl RecBuf {
    /// Bytes this record takes in a page (without directory).
    #[allow(clippy::len_without_is_empty, reason = "a record is never empty")]
    pub fn len(&self) -> usize {
        self.borrowed().len()
    }

    /// Reads the record at `off`.
    pub fn read(p: &[u8], off: usize) -> Self {
        Self {
            key: rec_key(p, off).to_vec(),
            flags: rec_flags(p, off),
            value: rec_value(p, off).to_vec(),
            old_offset: Some(off),
        }
    }

    /// An internal record pointing at `child`.
    pub fn child(key: Vec<u8>, child: PageId) -> Self {
        Self {
            key,
            flags: 0,
            value: child.0.to_le_bytes().to_vec(),
            old_offset: None,
        }
    }

    /// The record, borrowed (what [`insert`] takes).
    #[must_use]
    pub fn borrowed(&self) -> RecRef<'_> {
        RecRef {
            key: &self.key,
            flags: self.flags,
            value: &self.value,
        }
    }

    pub(super) fn encode_into(&self, out: &mut [u8], next: usize, key: &[u8]) {
        self.borrowed().encode_into(out, next, key);
    }
}

/// A record to insert, borrowed from its caller: an insert that fits its
/// leaf copies its key and value once, into the page, where an owned
/// [`RecBuf`] would first copy them into two allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecRef<'a> {
    /// The key (ignored for the first record of an internal page).
    pub key: &'a [u8],
    /// Record flags.
    pub flags: u8,
    /// Stored value bytes (inline value, overflow reference, or child id).
    pub value: &'a [u8],
}

impl RecRef<'_> {
    /// Bytes this record takes in a page (without directory).
    #[allow(clippy::len_without_is_empty, reason = "a record is never empty")]
    #[must_use]
    pub fn len(&self) -> usize {
        RECORD_HEADER_BYTES + self.key.len() + self.value.len()
    }

    /// An owned copy (for a split, which rebuilds pages from owned records).
    #[must_use]
    pub fn to_buf(&self) -> RecBuf {
        RecBuf {
            key: self.key.to_vec(),
            flags: self.flags,
            value: self.value.to_vec(),
            old_offset: None,
        }
    }

    pub(super) fn encode_into(&self, out: &mut [u8], next: usize, key: &[u8]) {
        out[0..2].copy_from_slice(&field16(next).to_le_bytes());
        out[2..4].copy_from_slice(&field16(key.len()).to_le_bytes());
        out[4..6].copy_from_slice(&field16(self.value.len()).to_le_bytes());
        out[6] = self.flags;
        out[7] = 0;
        let k_end = RECORD_HEADER_BYTES + key.len();
        out[RECORD_HEADER_BYTES..k_end].copy_from_slice(key);
        out[k_end..k_end + self.value.len()].copy_from_slice(self.value);
    }
}

/// All records of a page, in key order.
pub fn read_all(p: &[u8]) -> Vec<RecBuf> {
    // One more than the page holds: a split or shift adds the new record.
    let mut recs = Vec::with_capacity(record_count(p) + 1);
    recs.extend(records(p).map(|off| RecBuf::read(p, off)));
    recs
}

/// Bytes a rebuilt page with these records would use.
pub fn image_bytes(recs: &[RecBuf]) -> usize {
    let groups = recs.len().div_ceil(GROUP_RECORDS_BUILD);
    PAGE_HEADER_BYTES + recs.iter().map(RecBuf::len).sum::<usize>() + SLOT_BYTES * groups
}
