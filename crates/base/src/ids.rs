//! Identifiers shared by every layer: page ids and log sequence numbers.

use serde::{Deserialize, Serialize};

/// The number of a logical page in a data file.
///
/// A page's block lives at byte offset `page_id * block_size_bytes` in its file,
/// and every block carries its own page id so that a block read from the wrong
/// place is detected instead of served.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct PageId(pub u64);

impl std::fmt::Display for PageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "page {}", self.0)
    }
}

/// A log sequence number: the byte position in the write-ahead log just past a
/// record. LSNs only grow; a page stamped with LSN `n` contains every change
/// whose record ends at or before `n`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Lsn(pub u64);

impl std::fmt::Display for Lsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LSN {}", self.0)
    }
}
