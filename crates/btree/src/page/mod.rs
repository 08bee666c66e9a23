//! Page layout: header, record heap, sparse slot directory (see the byte
//! diagram in `docs/design.md`, "B+tree").
//!
//! Records live in a heap that grows up from the header, in insertion order,
//! and are chained in key order by a 2-byte `next` offset. A sparse directory
//! at the end of the page (growing down) holds one 4-byte slot per *group* of
//! 1..=[`GROUP_RECORDS_MAX`] consecutive records: the offset of the group's
//! first record and the group's record count. A lookup binary-searches the
//! slots, then walks at most one group. An insert writes the new record, the
//! predecessor's `next`, one slot's count and a few header bytes; only when a
//! group overflows does a directory tail shift (4 bytes per later slot).
//!
//! Readers here take `&[u8]`; writers take a [`PageMut`]. This layer only
//! arranges bytes: it knows nothing of stores, patches or the log. The
//! recipe layer makes every store guard a [`PageMut`] whose writes become
//! recorded patches, and whose rebuilds ([`Rebuild`]) carry what a store
//! that logs may log instead of the bytes.
//!
//! By role, as a page is used: `access` reads header fields and records,
//! `search` finds a key, `record` holds records out of their page,
//! `build` makes whole images, `mutate` changes a page in place,
//! `overflow` lays out the links of long values' chains, and `check`
//! checks one page's own structure.

mod access;
mod build;
mod check;
mod mutate;
mod overflow;
mod record;
mod search;

pub use access::*;
pub use build::*;
pub(crate) use check::{check_structure, violation};
pub use mutate::*;
pub(crate) use overflow::*;
pub use record::*;
pub use search::*;

use crate::error::{Error, Result};
use std::ops::Deref;

/// The first bytes of every page belong to the codec (a copy of the block
/// header after decompression; patches may not touch them). The tree's own
/// header starts right after.
pub const CODEC_RESERVED_BYTES: usize = barracuda_codec::PAGE_HEADER_RESERVED_BYTES;
/// Bytes of the tree's own header fields (offsets below, relative to
/// [`CODEC_RESERVED_BYTES`]).
const TREE_HEADER_BYTES: usize = 48;
/// Bytes before the record heap: the codec's reserved bytes, then the tree's
/// header.
pub const PAGE_HEADER_BYTES: usize = CODEC_RESERVED_BYTES + TREE_HEADER_BYTES;
/// Bytes of a record header: next u16, key length u16, value length u16,
/// flags u8, reserved u8.
pub const RECORD_HEADER_BYTES: usize = 8;
/// Bytes of one directory slot: first-record offset u16, record count u16.
pub const SLOT_BYTES: usize = 4;
/// The most records a group may have (checked): a lookup walks at most this
/// many records after the slot search (InnoDB uses 4..=8 as well).
pub const GROUP_RECORDS_MAX: usize = 8;
/// An insert splits a group that grows above this many records (into
/// halves): groups of 2 to 4, so that a lookup walks few records.
const GROUP_RECORDS_SPLIT: usize = 4;
/// Bytes of the stack buffer [`with_scratch`] lends.
const SMALL_BUF_BYTES: usize = 512;
/// Records per group when a page is rebuilt, leaving room to grow before the
/// next group split.
pub(crate) const GROUP_RECORDS_BUILD: usize = 3;
/// Smallest page: 4 KiB, so that [`KEY_BYTES_MAX`] keys still fit several per
/// internal page.
pub const PAGE_SIZE_BYTES_MIN: usize = 4 * 1024;
/// Largest page: 64 KiB, because in-page offsets are 16-bit (the directory
/// occupies the last bytes, so no record starts at 65536).
pub const PAGE_SIZE_BYTES_MAX: usize = 64 * 1024;
/// The largest number a 16-bit page field holds. Every offset into a page
/// is below the page size, so it fits; a length or an end can reach the
/// page size itself (65,536 in a 64 KiB page), which does not, so such
/// quantities are bounded by this instead (see
/// [`overflow_payload_bytes_max`]).
pub const PAGE_FIELD_MAX: usize = u16::MAX as usize;
/// The largest key: a 4 KiB internal page must hold at least 6 separators of
/// this size (6 * (8 + 512 + 8 + 4) < 4096 - 48), so that splits always leave
/// two non-empty halves and merges have room.
pub const KEY_BYTES_MAX: usize = 512;
/// The largest value, 8 MiB. One put is one atomic write, logged as one
/// redo group of at most 16 MiB, and its value's overflow pages are logged
/// whole: a value that does not compress takes up to about 1.2 times its
/// bytes of log (each block's reserve and headers), and a replaced value's
/// chain is freed in the same group. 8 MiB leaves room for both with the
/// default options; 16 MiB would not fit at all. It also bounds what one
/// `get` allocates.
pub const VALUE_BYTES_MAX: usize = 8 << 20;
/// Bytes a record stores inline for an overflowed value: first page id u64,
/// total length u64.
pub const OVERFLOW_REF_BYTES: usize = 16;
/// Bytes of a child pointer in an internal record.
pub const CHILD_BYTES: usize = 8;

const _: () = assert!(PAGE_SIZE_BYTES_MAX.is_power_of_two());
// Every in-page offset (below the page size) fits a 16-bit field.
const _: () = assert!(PAGE_SIZE_BYTES_MAX - 1 <= PAGE_FIELD_MAX);
const _: () = assert!(PAGE_SIZE_BYTES_MIN.is_power_of_two());
const _: () = assert!(
    6 * (RECORD_HEADER_BYTES + KEY_BYTES_MAX + CHILD_BYTES + SLOT_BYTES)
        < PAGE_SIZE_BYTES_MIN - PAGE_HEADER_BYTES
);

/// Values longer than this go to an overflow chain: an eighth of the page, so
/// that a leaf record (with a maximal key) is at most about a quarter page.
pub fn value_inline_bytes_max(page_size_bytes: usize) -> usize {
    page_size_bytes / 8
}

/// The most payload bytes one overflow page holds: the page after its
/// header, but no more than keeps the heap top (header + payload, a 16-bit
/// field) at most [`PAGE_FIELD_MAX`]: a 64 KiB page holds one byte less
/// than its body, since a heap top of 65,536 would wrap to 0.
pub fn overflow_payload_bytes_max(page_size_bytes: usize) -> usize {
    page_size_bytes.min(PAGE_FIELD_MAX) - PAGE_HEADER_BYTES
}

/// Validates a page size.
pub fn check_page_size(page_size_bytes: usize) -> Result<()> {
    if !(PAGE_SIZE_BYTES_MIN..=PAGE_SIZE_BYTES_MAX).contains(&page_size_bytes)
        || !page_size_bytes.is_power_of_two()
    {
        return Err(Error::BadPageSize { page_size_bytes });
    }
    Ok(())
}

// Header offsets.
const H_TYPE: usize = CODEC_RESERVED_BYTES;
const H_LEVEL: usize = CODEC_RESERVED_BYTES + 1;
const H_FLAGS: usize = CODEC_RESERVED_BYTES + 2;
const H_RECORD_COUNT: usize = CODEC_RESERVED_BYTES + 4;
/// Offset of the heap top field (public for corruption tests).
pub const H_HEAP_TOP: usize = CODEC_RESERVED_BYTES + 6;
const H_GARBAGE: usize = CODEC_RESERVED_BYTES + 8;
const H_SLOT_COUNT: usize = CODEC_RESERVED_BYTES + 10;
const H_FIRST_RECORD: usize = CODEC_RESERVED_BYTES + 12;
const H_LAST_INSERT: usize = CODEC_RESERVED_BYTES + 14;
/// Offset of the page LSN, stamped by the write-ahead log.
pub const H_PAGE_LSN: usize = CODEC_RESERVED_BYTES + 16;
const H_LEFT: usize = CODEC_RESERVED_BYTES + 24;
const H_RIGHT: usize = CODEC_RESERVED_BYTES + 32;
const H_INSERT_FLAGS: usize = CODEC_RESERVED_BYTES + 40;

/// Page flag: this page was born from a split and has not been shrunk by a
/// delete since, so it may be below the merge threshold.
pub const FLAG_GROWING: u16 = 1;
/// Insert flag: the last insert was the page's largest key.
pub const INSERT_WAS_MAX: u8 = 1;
/// Insert flag: the last insert was the page's smallest key.
pub const INSERT_WAS_MIN: u8 = 2;
/// Record flag: the value is an overflow reference.
pub const REC_OVERFLOW: u8 = 1;
/// "No page" in sibling and overflow links.
pub const NO_PAGE: u64 = u64::MAX;

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageType {
    /// Zeroed or freed.
    Free = 0,
    /// Leaf: keys and values.
    Leaf = 1,
    /// Internal: keys and child page ids.
    Internal = 2,
    /// A link of an overflow value chain.
    Overflow = 3,
}

fn u16_at(p: &[u8], off: usize) -> usize {
    usize::from(u16::from_le_bytes([p[off], p[off + 1]]))
}

fn u64_at(p: &[u8], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&p[off..off + 8]);
    u64::from_le_bytes(b)
}

/// The write side of a page as the layout code sees it: bytes written at an
/// offset, and whole rebuilt images. Every store guard is one (the recipe
/// layer implements this for every store guard): its writes become
/// recorded patches, and a rebuild may be logged by how it was made.
pub trait PageMut: Deref<Target = [u8]> {
    /// Writes `bytes` at `offset`.
    fn put(&mut self, offset: usize, bytes: &[u8]);

    /// Writes `image`, a rebuild of this page made as `how` says from the
    /// page as it is now.
    fn put_rebuilt(&mut self, image: &[u8], how: &Rebuild<'_>);
}

/// How a page image was rebuilt from records ([`rebuild`], [`compact`]):
/// enough to make the same image again from the page it replaces, which a
/// store that logs may log instead of the bytes (a rebuild recipe).
#[derive(Clone, Copy)]
pub struct Rebuild<'a> {
    /// The rebuilt page's header fields.
    pub layout: &'a Layout,
    /// The records, in key order.
    pub recs: &'a [RecBuf],
    /// Records per directory group.
    pub group_records: usize,
    /// How the heap is laid out.
    pub order: HeapOrder,
}
