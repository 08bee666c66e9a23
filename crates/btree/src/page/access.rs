//! Layout accessors: the header fields and the records of a page, read
//! from its bytes.

use super::*;
use barracuda_base::PageId;

/// The page type, or `None` for an unknown byte.
pub(crate) fn page_type(p: &[u8]) -> Option<PageType> {
    match p[H_TYPE] {
        0 => Some(PageType::Free),
        1 => Some(PageType::Leaf),
        2 => Some(PageType::Internal),
        3 => Some(PageType::Overflow),
        _ => None,
    }
}
/// True for a leaf page.
pub fn is_leaf(p: &[u8]) -> bool {
    p[H_TYPE] == PageType::Leaf as u8
}
/// Level: 0 for leaves.
pub fn level(p: &[u8]) -> u8 {
    p[H_LEVEL]
}
/// Page flags.
pub fn flags(p: &[u8]) -> u16 {
    u16_at(p, H_FLAGS) as u16
}
/// Records in the page.
pub fn record_count(p: &[u8]) -> usize {
    u16_at(p, H_RECORD_COUNT)
}
/// End of the record heap.
pub(crate) fn heap_top(p: &[u8]) -> usize {
    u16_at(p, H_HEAP_TOP)
}
/// Bytes of deleted records still in the heap.
pub(crate) fn garbage_bytes(p: &[u8]) -> usize {
    u16_at(p, H_GARBAGE)
}
/// Directory slots.
pub fn slot_count(p: &[u8]) -> usize {
    u16_at(p, H_SLOT_COUNT)
}
/// Offset of the smallest record, 0 if none.
pub fn first_record(p: &[u8]) -> usize {
    u16_at(p, H_FIRST_RECORD)
}
/// Offset of the last inserted record, 0 if unknown.
pub(crate) fn last_insert(p: &[u8]) -> usize {
    u16_at(p, H_LAST_INSERT)
}
/// [`INSERT_WAS_MAX`] / [`INSERT_WAS_MIN`] of the last insert.
pub(crate) fn insert_flags(p: &[u8]) -> u8 {
    p[H_INSERT_FLAGS]
}
/// Left sibling (leaves only).
pub fn left(p: &[u8]) -> Option<PageId> {
    link(u64_at(p, H_LEFT))
}
/// Right sibling (leaves), or next link (overflow pages).
pub fn right(p: &[u8]) -> Option<PageId> {
    link(u64_at(p, H_RIGHT))
}
pub(super) fn link(raw: u64) -> Option<PageId> {
    (raw != NO_PAGE).then_some(PageId(raw))
}
pub(super) fn raw_link(id: Option<PageId>) -> u64 {
    id.map_or(NO_PAGE, |p| p.0)
}
/// Bytes in use: header, live records and directory.
pub fn used_bytes(p: &[u8]) -> usize {
    heap_top(p) - garbage_bytes(p) + SLOT_BYTES * slot_count(p)
}
/// Bytes of live records (with their headers): what a rebuilt page keeps
/// besides its header and directory.
pub fn record_bytes(p: &[u8]) -> usize {
    heap_top(p) - garbage_bytes(p) - PAGE_HEADER_BYTES
}
/// Start of the directory.
pub(crate) fn directory_start(p: &[u8]) -> usize {
    p.len() - SLOT_BYTES * slot_count(p)
}

/// Directory slot `i`: (first record offset, record count).
pub fn slot(p: &[u8], i: usize) -> (usize, usize) {
    let at = p.len() - SLOT_BYTES * (i + 1);
    (u16_at(p, at), u16_at(p, at + 2))
}

/// Next record in key order, 0 at the end.
pub(crate) fn rec_next(p: &[u8], off: usize) -> usize {
    u16_at(p, off)
}
/// Total bytes of the record at `off`.
pub(crate) fn rec_len(p: &[u8], off: usize) -> usize {
    RECORD_HEADER_BYTES + u16_at(p, off + 2) + u16_at(p, off + 4)
}
/// Key of the record at `off`.
pub fn rec_key(p: &[u8], off: usize) -> &[u8] {
    let klen = u16_at(p, off + 2);
    &p[off + RECORD_HEADER_BYTES..off + RECORD_HEADER_BYTES + klen]
}
/// Stored value bytes (inline value, overflow reference, or child id).
pub fn rec_value(p: &[u8], off: usize) -> &[u8] {
    let klen = u16_at(p, off + 2);
    let vlen = u16_at(p, off + 4);
    let start = off + RECORD_HEADER_BYTES + klen;
    &p[start..start + vlen]
}
/// Record flags.
pub fn rec_flags(p: &[u8], off: usize) -> u8 {
    p[off + 6]
}
/// Child id of an internal record.
pub fn rec_child(p: &[u8], off: usize) -> PageId {
    let v = rec_value(p, off);
    let mut b = [0u8; 8];
    b.copy_from_slice(&v[..8]);
    PageId(u64::from_le_bytes(b))
}

/// Record offsets in key order.
pub fn records(p: &[u8]) -> RecordIter<'_> {
    RecordIter {
        page: p,
        next: first_record(p),
        left: record_count(p),
    }
}

/// Record offsets in key order from the first key past `bound` of a leaf,
/// found through the slot directory ([`probe_in`], with the key span its
/// parent gives the leaf, if known) instead of a walk from the first record.
pub(crate) fn leaf_records_from<'a>(
    p: &'a [u8],
    bound: std::ops::Bound<&[u8]>,
    span: Option<&KeySpan>,
) -> RecordIter<'a> {
    debug_assert!(is_leaf(p));
    let next = match bound {
        std::ops::Bound::Unbounded => first_record(p),
        std::ops::Bound::Included(key) | std::ops::Bound::Excluded(key) => {
            let pr = probe_in(p, key, span);
            if pr.found != 0 {
                if matches!(bound, std::ops::Bound::Included(_)) {
                    pr.found
                } else {
                    rec_next(p, pr.found)
                }
            } else if pr.pred == 0 {
                first_record(p)
            } else {
                rec_next(p, pr.pred)
            }
        }
    };
    RecordIter {
        page: p,
        next,
        left: record_count(p),
    }
}

/// Iterator over record offsets in key order (bounded by the record count,
/// so a corrupt cycle cannot loop forever).
pub struct RecordIter<'a> {
    page: &'a [u8],
    next: usize,
    left: usize,
}

impl Iterator for RecordIter<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.next == 0 || self.left == 0 {
            return None;
        }
        let off = self.next;
        self.left -= 1;
        self.next = rec_next(self.page, off);
        Some(off)
    }
}
