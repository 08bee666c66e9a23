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
//! Readers here take `&[u8]`; writers take a [`PageWrite`] guard so that every
//! change is a recorded patch.

use crate::error::{Error, Result};
use crate::store::PageWrite;
use barracuda_codec::PageId;
use std::cmp::Ordering;

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

/// The page type, or `None` for an unknown byte.
pub fn page_type(p: &[u8]) -> Option<PageType> {
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
pub fn heap_top(p: &[u8]) -> usize {
    u16_at(p, H_HEAP_TOP)
}
/// Bytes of deleted records still in the heap.
pub fn garbage_bytes(p: &[u8]) -> usize {
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
pub fn last_insert(p: &[u8]) -> usize {
    u16_at(p, H_LAST_INSERT)
}
/// [`INSERT_WAS_MAX`] / [`INSERT_WAS_MIN`] of the last insert.
pub fn insert_flags(p: &[u8]) -> u8 {
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
fn link(raw: u64) -> Option<PageId> {
    (raw != NO_PAGE).then_some(PageId(raw))
}
fn raw_link(id: Option<PageId>) -> u64 {
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
pub fn directory_start(p: &[u8]) -> usize {
    p.len() - SLOT_BYTES * slot_count(p)
}

/// Directory slot `i`: (first record offset, record count).
pub fn slot(p: &[u8], i: usize) -> (usize, usize) {
    let at = p.len() - SLOT_BYTES * (i + 1);
    (u16_at(p, at), u16_at(p, at + 2))
}

/// Next record in key order, 0 at the end.
pub fn rec_next(p: &[u8], off: usize) -> usize {
    u16_at(p, off)
}
/// Total bytes of the record at `off`.
pub fn rec_len(p: &[u8], off: usize) -> usize {
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
pub fn leaf_records_from<'a>(
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

/// Compares the record's key with `key`; the first record of an internal
/// page stands for "minus infinity within this page".
fn cmp_rec(p: &[u8], off: usize, key: &[u8]) -> Ordering {
    if !is_leaf(p) && off == first_record(p) {
        return Ordering::Less;
    }
    cmp_keys(rec_key(p, off), key)
}

/// Lexicographic order of two keys. Most keys that differ do so in their
/// first eight bytes, and those compare as one big-endian word (the same
/// order) without a call to `memcmp`.
fn cmp_keys(a: &[u8], b: &[u8]) -> Ordering {
    if let (Some(x), Some(y)) = (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
    }
    a.cmp(b)
}

/// Where a key is (or would go) in a page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probe {
    /// The group of `found`, or of `pred` when not found.
    pub slot: usize,
    /// The record before `found` (or before the insert point), 0 if none.
    pub pred: usize,
    /// The record with an equal key, 0 if none.
    pub found: usize,
}

/// Finds `key`: binary search over the slots, then a walk of one group.
pub fn probe(p: &[u8], key: &[u8]) -> Probe {
    let slots_le = search_slots(p, key, 0, slot_count(p));
    walk_group(p, key, slots_le)
}

/// [`probe`], starting from where `span` (the page's key range, as its
/// parent bounds it) puts `key` among the slots: one or two records
/// compared instead of a binary search's log2(slots) when keys are spread
/// evenly (random keys: hashes, UUIDs), each of them a cache miss in a page
/// that is not in the CPU's caches. Any span gives the same answer as
/// [`probe`]; a poor one costs at most twice the binary search's compares.
pub fn probe_in(p: &[u8], key: &[u8], span: Option<&KeySpan>) -> Probe {
    let n = slot_count(p);
    let slots_le = match span {
        Some(span) if n >= SPAN_SLOTS_MIN => search_slots_from(p, key, span.estimate(key, n)),
        _ => search_slots(p, key, 0, n),
    };
    walk_group(p, key, slots_le)
}

/// Below this many slots a binary search takes at most three compares,
/// which a guess cannot beat by much.
const SPAN_SLOTS_MIN: usize = 8;

/// Whether slot `s`'s first record is at most `key`.
fn slot_le(p: &[u8], s: usize, key: &[u8]) -> bool {
    cmp_rec(p, slot(p, s).0, key) != Ordering::Greater
}

/// The number of slots whose first record is at most `key`, knowing that
/// it is at least `lo` and at most `hi`: a binary search.
fn search_slots(p: &[u8], key: &[u8], mut lo: usize, mut hi: usize) -> usize {
    while lo < hi {
        let mid = (lo + hi) / 2;
        if slot_le(p, mid, key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// [`search_slots`] over all slots, starting at slot `guess`: steps of 1,
/// 2, 4, ... away from it until the answer is bracketed, then a binary
/// search inside the bracket.
fn search_slots_from(p: &[u8], key: &[u8], guess: usize) -> usize {
    let n = slot_count(p);
    let guess = guess.min(n - 1);
    // The first compares read the records of the guess and of one of its
    // neighbours, each a cache miss in a page the CPU has not touched:
    // start loading all three at once rather than one after the other.
    for s in guess.saturating_sub(1)..=(guess + 1).min(n - 1) {
        prefetch(p, slot(p, s).0);
    }
    let (mut lo, mut hi) = (0, n);
    let mut step = 1;
    if slot_le(p, guess, key) {
        lo = guess + 1;
        while lo < n {
            let at = (guess + step).min(n - 1);
            if !slot_le(p, at, key) {
                hi = at;
                break;
            }
            lo = at + 1;
            step *= 2;
        }
    } else {
        hi = guess;
        while hi > 0 {
            let at = guess.saturating_sub(step);
            if slot_le(p, at, key) {
                lo = at + 1;
                break;
            }
            hi = at;
            step *= 2;
        }
    }
    search_slots(p, key, lo, hi)
}

/// Asks the CPU to start loading the cache line of `p[at]` (a hint: it
/// reads nothing and cannot fault; nothing on other architectures).
#[inline]
fn prefetch(p: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(byte) = p.get(at) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE, which the intrinsic needs, is part of every x86_64
        // CPU; a prefetch neither reads nor writes memory, and the address
        // is inside `p` anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(byte).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, at);
}

/// The key range of a child page as its parent bounds it, reduced to
/// numbers: the bytes after the bounds' common prefix, as big-endian words.
/// Keys between the bounds map to numbers between them, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpan {
    prefix_len: usize,
    low: u64,
    high: u64,
}

impl KeySpan {
    /// The span between `low` (at most every key of the page) and `high`
    /// (above every key), if the words after their common prefix differ.
    #[must_use]
    pub fn new(low: &[u8], high: &[u8]) -> Option<KeySpan> {
        let prefix_len = low.iter().zip(high).take_while(|(a, b)| a == b).count();
        let (low, high) = (word_after(low, prefix_len), word_after(high, prefix_len));
        (low < high).then_some(KeySpan {
            prefix_len,
            low,
            high,
        })
    }

    /// The span of the child of internal page `p` that record `off` points
    /// to: from its separator to the next one. `None` for the first child
    /// (its lower bound is the page's own) and the last (likewise above).
    #[must_use]
    pub fn of_child(p: &[u8], off: usize) -> Option<KeySpan> {
        let next = rec_next(p, off);
        if off == first_record(p) || next == 0 {
            return None;
        }
        KeySpan::new(rec_key(p, off), rec_key(p, next))
    }

    /// Where `key` falls among `n` evenly spread slots: 0..n.
    #[must_use]
    pub fn estimate(&self, key: &[u8], n: usize) -> usize {
        let at = word_after(key, self.prefix_len).clamp(self.low, self.high) - self.low;
        let index = u128::from(at) * n as u128 / u128::from(self.high - self.low);
        usize::try_from(index).unwrap_or(n).min(n.saturating_sub(1))
    }
}

/// The eight bytes of `key` after `prefix_len`, zero-padded, big-endian.
fn word_after(key: &[u8], prefix_len: usize) -> u64 {
    let tail = key.get(prefix_len..).unwrap_or(&[]);
    let mut word = [0u8; 8];
    let n = tail.len().min(8);
    word[..n].copy_from_slice(&tail[..n]);
    u64::from_be_bytes(word)
}

/// The lookup's end: the group of slot `slots_le - 1` walked for `key`.
fn walk_group(p: &[u8], key: &[u8], slots_le: usize) -> Probe {
    if slots_le == 0 {
        return Probe::default();
    }
    let s = slots_le - 1;
    let (mut cur, count) = slot(p, s);
    let mut pred = 0;
    for _ in 0..count {
        match cmp_rec(p, cur, key) {
            Ordering::Equal => {
                if pred == 0 && s > 0 {
                    pred = last_of_group(p, s - 1);
                }
                return Probe {
                    slot: s,
                    pred,
                    found: cur,
                };
            }
            Ordering::Greater => break,
            Ordering::Less => {
                pred = cur;
                cur = rec_next(p, cur);
            }
        }
    }
    Probe {
        slot: s,
        pred,
        found: 0,
    }
}

fn last_of_group(p: &[u8], s: usize) -> usize {
    let (mut cur, count) = slot(p, s);
    for _ in 1..count {
        cur = rec_next(p, cur);
    }
    cur
}

/// The child of an internal page that covers `key`: the last record whose
/// key is <= `key` (the first record counts as minus infinity).
pub fn child_for(p: &[u8], key: &[u8]) -> (usize, PageId) {
    let pr = probe(p, key);
    let off = if pr.found != 0 {
        pr.found
    } else if pr.pred != 0 {
        pr.pred
    } else {
        first_record(p)
    };
    (off, rec_child(p, off))
}

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

    fn encode_into(&self, out: &mut [u8], next: usize, key: &[u8]) {
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

    fn encode_into(&self, out: &mut [u8], next: usize, key: &[u8]) {
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
    records(p).map(|off| RecBuf::read(p, off)).collect()
}

/// Bytes a rebuilt page with these records would use.
pub fn image_bytes(recs: &[RecBuf]) -> usize {
    let groups = recs.len().div_ceil(GROUP_RECORDS_BUILD);
    PAGE_HEADER_BYTES + recs.iter().map(RecBuf::len).sum::<usize>() + SLOT_BYTES * groups
}

/// Header fields of a rebuilt page.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Leaf or internal.
    pub page_type: PageType,
    /// Level (0 = leaf).
    pub level: u8,
    /// Page flags.
    pub flags: u16,
    /// Left sibling.
    pub left: Option<PageId>,
    /// Right sibling.
    pub right: Option<PageId>,
    /// Index (in the record list) of the last inserted record.
    pub last_insert: Option<usize>,
    /// Insert flags to keep.
    pub insert_flags: u8,
}

impl Layout {
    /// An empty tree's leaf: no siblings, no insert history.
    pub fn leaf() -> Self {
        Self {
            page_type: PageType::Leaf,
            level: 0,
            flags: 0,
            left: None,
            right: None,
            last_insert: None,
            insert_flags: 0,
        }
    }

    /// A new root above pages of `level - 1`: internal, no siblings, no
    /// insert history.
    pub fn new_root(level: u8) -> Self {
        Self {
            page_type: PageType::Internal,
            level,
            flags: 0,
            left: None,
            right: None,
            last_insert: None,
            insert_flags: 0,
        }
    }
}

/// Rebuilds the page from `recs` (key order), compacting the heap but keeping
/// records in their old heap order so unchanged records mostly stay in place,
/// and writes only the differing bytes. Keeps the page LSN.
pub fn rebuild<G: PageWrite>(g: &mut G, layout: &Layout, recs: &[RecBuf], order: HeapOrder) {
    let image = build_image(&g[..], layout, recs, GROUP_RECORDS_BUILD, order);
    g.write_rebuilt(&image, |old| {
        crate::recipe::encode(old, layout, recs, GROUP_RECORDS_BUILD, order)
    });
}

/// How a rebuilt page lays out its heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapOrder {
    /// Records keep their old heap order (by [`RecBuf::old_offset`]), so
    /// unchanged records mostly stay in place; records without an old
    /// offset go last.
    Kept,
    /// Key order, whatever the records' old offsets (a new page).
    Key,
}

/// The image [`rebuild`] would give the page whose bytes are `old`, without
/// writing it anywhere: a split builds its pages' images this way and
/// writes each once, as the difference from the page it replaces.
pub fn rebuilt_image(old: &[u8], layout: &Layout, recs: &[RecBuf], order: HeapOrder) -> Vec<u8> {
    build_image(old, layout, recs, GROUP_RECORDS_BUILD, order)
}

/// Like [`rebuild`], but with groups of [`GROUP_RECORDS_MAX`], so the
/// directory is never larger than any valid directory of the same records:
/// records that fitted the page still fit after the compaction. Used where a
/// page is compacted in place (to make room, to restore, to absorb a child).
pub fn compact<G: PageWrite>(g: &mut G, layout: &Layout, recs: &[RecBuf], order: HeapOrder) {
    let image = build_image(&g[..], layout, recs, GROUP_RECORDS_MAX, order);
    g.write_rebuilt(&image, |old| {
        crate::recipe::encode(old, layout, recs, GROUP_RECORDS_MAX, order)
    });
}

pub(crate) fn build_image(
    old: &[u8],
    layout: &Layout,
    recs: &[RecBuf],
    group_records: usize,
    heap_order: HeapOrder,
) -> Vec<u8> {
    let size = old.len();
    let slots = recs.len().div_ceil(group_records);
    let bytes =
        PAGE_HEADER_BYTES + recs.iter().map(RecBuf::len).sum::<usize>() + SLOT_BYTES * slots;
    assert!(bytes <= size, "rebuilt page overflows");
    let mut img = vec![0u8; size];
    // The codec's bytes are not ours: keep them, so the diff never touches them.
    img[..CODEC_RESERVED_BYTES].copy_from_slice(&old[..CODEC_RESERVED_BYTES]);
    let internal = layout.page_type == PageType::Internal;
    // The first record of an internal page is stored without its key.
    let stored_len = |i: usize| {
        if internal && i == 0 {
            RECORD_HEADER_BYTES + recs[i].value.len()
        } else {
            recs[i].len()
        }
    };
    let mut order: Vec<usize> = (0..recs.len()).collect();
    if heap_order == HeapOrder::Kept {
        order.sort_by_key(|&i| recs[i].old_offset.unwrap_or(usize::MAX));
    }
    let mut offsets = vec![0usize; recs.len()];
    let mut pos = PAGE_HEADER_BYTES;
    for &i in &order {
        offsets[i] = pos;
        pos += stored_len(i);
    }
    for (i, r) in recs.iter().enumerate() {
        let next = offsets.get(i + 1).copied().unwrap_or(0);
        let key: &[u8] = if internal && i == 0 { &[] } else { &r.key };
        let start = offsets[i];
        r.encode_into(
            &mut img[start..start + RECORD_HEADER_BYTES + key.len() + r.value.len()],
            next,
            key,
        );
    }
    let groups: Vec<(usize, usize)> = (0..recs.len())
        .step_by(group_records)
        .map(|i| (offsets[i], group_records.min(recs.len() - i)))
        .collect();
    for (s, (off, count)) in groups.iter().enumerate() {
        let at = size - SLOT_BYTES * (s + 1);
        img[at..at + 2].copy_from_slice(&field16(*off).to_le_bytes());
        img[at + 2..at + 4].copy_from_slice(&field16(*count).to_le_bytes());
    }
    img[H_TYPE] = layout.page_type as u8;
    img[H_LEVEL] = layout.level;
    put16(&mut img, H_FLAGS, usize::from(layout.flags));
    put16(&mut img, H_RECORD_COUNT, recs.len());
    put16(&mut img, H_HEAP_TOP, pos);
    put16(&mut img, H_SLOT_COUNT, groups.len());
    put16(
        &mut img,
        H_FIRST_RECORD,
        offsets.first().copied().unwrap_or(0),
    );
    put16(
        &mut img,
        H_LAST_INSERT,
        layout.last_insert.map_or(0, |i| offsets[i]),
    );
    img[H_PAGE_LSN..H_PAGE_LSN + 8].copy_from_slice(&old[H_PAGE_LSN..H_PAGE_LSN + 8]);
    img[H_LEFT..H_LEFT + 8].copy_from_slice(&raw_link(layout.left).to_le_bytes());
    img[H_RIGHT..H_RIGHT + 8].copy_from_slice(&raw_link(layout.right).to_le_bytes());
    img[H_INSERT_FLAGS] = layout.insert_flags;
    img
}

/// Runs `f` on `len` zeroed bytes: on the stack when they are few (most
/// records, a few directory slots), else allocated.
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    if len <= SMALL_BUF_BYTES {
        let mut small = [0u8; SMALL_BUF_BYTES];
        f(&mut small[..len])
    } else {
        f(&mut vec![0u8; len])
    }
}

fn put16(img: &mut [u8], off: usize, v: usize) {
    img[off..off + 2].copy_from_slice(&field16(v).to_le_bytes());
}

fn write16<G: PageWrite>(g: &mut G, off: usize, v: usize) {
    g.write(off, &field16(v).to_le_bytes());
}

/// `v` as a 16-bit page field. Every caller stores an offset, a count or a
/// length that the page layout bounds by [`PAGE_FIELD_MAX`]; a larger one
/// is a bug (it would wrap silently and lose data), so it panics.
pub(crate) fn field16(v: usize) -> u16 {
    match u16::try_from(v) {
        Ok(v) => v,
        Err(_) => panic!("in-page quantity {v} does not fit its 16-bit field"),
    }
}

/// The current layout of a page (to rebuild it with the same header).
pub fn layout_of(p: &[u8]) -> Layout {
    Layout {
        page_type: page_type(p).unwrap_or(PageType::Free),
        level: level(p),
        flags: flags(p),
        left: left(p),
        right: right(p),
        last_insert: None,
        insert_flags: 0,
    }
}

/// Sets the page flags.
pub fn set_flags<G: PageWrite>(g: &mut G, value: u16) {
    if flags(g) != value {
        write16(g, H_FLAGS, usize::from(value));
    }
}
/// Sets the left sibling.
pub fn set_left<G: PageWrite>(g: &mut G, id: Option<PageId>) {
    g.write(H_LEFT, &raw_link(id).to_le_bytes());
}
/// Sets the right sibling (or overflow next link).
pub fn set_right<G: PageWrite>(g: &mut G, id: Option<PageId>) {
    g.write(H_RIGHT, &raw_link(id).to_le_bytes());
}

/// True if a record of `len` bytes can be inserted within `limit_bytes` of
/// used space, possibly after compacting garbage.
pub fn has_room(p: &[u8], len: usize, limit_bytes: usize) -> bool {
    // Two slots: a group split may add one after the record takes its place.
    used_bytes(p) + len + 2 * SLOT_BYTES <= limit_bytes.min(p.len())
}

/// Compacts the heap if the contiguous free space is too small for `len`;
/// true if it did.
fn make_room<G: PageWrite>(g: &mut G, len: usize) -> bool {
    if heap_top(g) + len + 2 * SLOT_BYTES <= directory_start(g) {
        return false;
    }
    let recs = read_all(g);
    let mut layout = layout_of(g);
    let last = last_insert(g);
    layout.last_insert = recs.iter().position(|r| r.old_offset == Some(last));
    layout.insert_flags = insert_flags(g);
    // Compact fully: order by key, forgetting old positions.
    compact(g, &layout, &recs, HeapOrder::Key);
    true
}

/// [`insert`], where `pr` is what [`probe`] answers for `rec`'s key (or
/// [`probe_in`], which answers the same): the guard may log the record
/// instead of the bytes, and redo inserts it the same way
/// ([`crate::recipe::redo_insert`]).
pub fn insert_logged<G: PageWrite>(g: &mut G, pr: Probe, rec: RecRef<'_>) {
    g.write_logged(crate::store::LogicalKind::Insert, &mut |g| {
        insert(g, pr, rec);
        crate::recipe::encode_insert(rec)
    });
}

/// [`remove`] of the record `pr` found for `key` (as [`probe`] or
/// [`probe_in`] finds it), then [`set_flags`] to what `flags` answers for
/// the page after the removal: the guard may log the key and the flags
/// instead of the bytes, and redo makes the same change
/// ([`crate::recipe::redo_delete`]).
pub fn remove_logged<G: PageWrite>(
    g: &mut G,
    pr: Probe,
    key: &[u8],
    flags: impl Fn(&[u8]) -> u16,
) -> u16 {
    let mut set = 0;
    g.write_logged(crate::store::LogicalKind::Delete, &mut |g| {
        remove(g, pr);
        set = flags(g);
        set_flags(g, set);
        crate::recipe::encode_delete(key, set)
    });
    set
}

/// Inserts `rec` at the point `pr` found (which must be a miss). The caller
/// checked [`has_room`]. Returns the new record's offset.
pub fn insert<G: PageWrite>(g: &mut G, pr: Probe, rec: RecRef<'_>) -> usize {
    debug_assert_eq!(pr.found, 0);
    // A compaction moves records: probe again (cheap, in-page).
    let pr = if make_room(g, rec.len()) {
        probe(g, rec.key)
    } else {
        pr
    };
    let off = heap_top(g);
    let next = if pr.pred == 0 {
        first_record(g)
    } else {
        rec_next(g, pr.pred)
    };
    let internal = !is_leaf(g);
    let key: &[u8] = if internal && pr.pred == 0 && record_count(g) == 0 {
        &[]
    } else {
        rec.key
    };
    let len = RECORD_HEADER_BYTES + key.len() + rec.value.len();
    with_scratch(len, |buf| {
        rec.encode_into(buf, next, key);
        g.write(off, buf);
    });
    if pr.pred == 0 {
        write16(g, H_FIRST_RECORD, off);
    } else {
        write16(g, pr.pred, off);
    }
    add_to_group(g, pr, off);
    write16(g, H_RECORD_COUNT, record_count(g) + 1);
    write16(g, H_HEAP_TOP, off + len);
    write16(g, H_LAST_INSERT, off);
    let mut iflags = 0;
    if next == 0 {
        iflags |= INSERT_WAS_MAX;
    }
    if pr.pred == 0 {
        iflags |= INSERT_WAS_MIN;
    }
    if insert_flags(g) != iflags {
        g.write(H_INSERT_FLAGS, &[iflags]);
    }
    off
}

fn add_to_group<G: PageWrite>(g: &mut G, pr: Probe, off: usize) {
    let n = slot_count(g);
    if n == 0 {
        write_slots(g, 0, &[(off, 1)], 0);
        return;
    }
    let s = if pr.pred == 0 { 0 } else { pr.slot };
    let (first, count) = slot(g, s);
    let first = if pr.pred == 0 { off } else { first };
    let count = count + 1;
    if count <= GROUP_RECORDS_SPLIT {
        write_slots(g, s, &[(first, count)], 1);
        return;
    }
    let half = count / 2;
    let mut mid = first;
    for _ in 0..half {
        mid = rec_next(g, mid);
    }
    write_slots(g, s, &[(first, half), (mid, count - half)], 1);
}

/// Replaces `old_count` slots starting at `s` with `new` slots, shifting the
/// directory tail only when the slot count changes, in one patch.
fn write_slots<G: PageWrite>(g: &mut G, s: usize, new: &[(usize, usize)], old_count: usize) {
    let n = slot_count(g);
    let size = g.len();
    // The slots from `s` on: `new`, then (if the count changes) the old
    // tail after the replaced ones, shifted.
    let shifted = if new.len() == old_count {
        0
    } else {
        n - (s + old_count)
    };
    let all_len = new.len() + shifted;
    let new_n = if new.len() == old_count {
        n
    } else {
        s + all_len
    };
    // Slots s..s+all_len occupy [size - 4*(s+len), size - 4*s), highest
    // index lowest; a shrinking directory also zeroes the slots it gave up.
    let covered = if new.len() == old_count {
        s + all_len
    } else {
        new_n.max(n)
    };
    let low = size - SLOT_BYTES * covered;
    let high = size - SLOT_BYTES * s;
    if high > low {
        with_scratch(high - low, |buf| {
            let tail = (s + old_count..s + old_count + shifted).map(|i| slot(g, i));
            for (k, (off, count)) in new.iter().copied().chain(tail).enumerate() {
                let at = size - SLOT_BYTES * (s + k + 1) - low;
                buf[at..at + 2].copy_from_slice(&field16(off).to_le_bytes());
                buf[at + 2..at + 4].copy_from_slice(&field16(count).to_le_bytes());
            }
            g.write(low, buf);
        });
    }
    if new_n != n {
        write16(g, H_SLOT_COUNT, new_n);
    }
}

/// Removes the record `pr.found`. Returns its length.
pub fn remove<G: PageWrite>(g: &mut G, pr: Probe) -> usize {
    let off = pr.found;
    debug_assert_ne!(off, 0);
    let len = rec_len(g, off);
    let next = rec_next(g, off);
    let internal = !is_leaf(g);
    if pr.pred == 0 {
        write16(g, H_FIRST_RECORD, next);
    } else {
        write16(g, pr.pred, next);
    }
    let s = pr.slot;
    let (first, count) = slot(g, s);
    if count == 1 {
        write_slots(g, s, &[], 1);
    } else if first == off {
        write_slots(g, s, &[(next, count - 1)], 1);
    } else {
        write_slots(g, s, &[(first, count - 1)], 1);
    }
    merge_small_group(g, if count == 1 { s.saturating_sub(1) } else { s });
    write16(g, H_RECORD_COUNT, record_count(g) - 1);
    write16(g, H_GARBAGE, garbage_bytes(g) + len);
    if last_insert(g) == off {
        write16(g, H_LAST_INSERT, 0);
        g.write(H_INSERT_FLAGS, &[0]);
    }
    // Merges only ever remove the right one of two children, so the first
    // record of an internal page (minus infinity) is never removed.
    debug_assert!(
        !internal || pr.pred != 0,
        "removing an internal page's first record"
    );
    len
}

fn merge_small_group<G: PageWrite>(g: &mut G, s: usize) {
    // Groups below this size merge with the next one, keeping the directory
    // sparse after deletes.
    const GROUP_RECORDS_MIN: usize = 2;
    if s + 1 >= slot_count(g) {
        return;
    }
    let (first, count) = slot(g, s);
    let (_, next_count) = slot(g, s + 1);
    if count < GROUP_RECORDS_MIN && count + next_count <= GROUP_RECORDS_SPLIT {
        write_slots(g, s, &[(first, count + next_count)], 2);
    }
}

/// Overwrites the flags and stored value of the record at `off` with a value
/// of the same length.
pub fn overwrite_value<G: PageWrite>(g: &mut G, off: usize, flags: u8, value: &[u8]) {
    let klen = u16_at(g, off + 2);
    debug_assert_eq!(u16_at(g, off + 4), value.len());
    if rec_flags(g, off) != flags {
        g.write(off + 6, &[flags]);
    }
    g.write(off + RECORD_HEADER_BYTES + klen, value);
}

/// Initializes an overflow page with `payload` (at most
/// [`overflow_payload_bytes_max`] bytes) and a next link.
pub fn write_overflow<G: PageWrite>(g: &mut G, payload: &[u8], next: Option<PageId>) {
    let head = overflow_header(g.len(), payload, next);
    g.write(CODEC_RESERVED_BYTES, &head[CODEC_RESERVED_BYTES..]);
    g.write(PAGE_HEADER_BYTES, payload);
}

/// The image [`write_overflow`] gives a zeroed page of `page_size_bytes`
/// (the codec's reserved bytes zero).
pub fn overflow_image(page_size_bytes: usize, payload: &[u8], next: Option<PageId>) -> Vec<u8> {
    let mut image = vec![0u8; page_size_bytes];
    let head = overflow_header(page_size_bytes, payload, next);
    image[CODEC_RESERVED_BYTES..PAGE_HEADER_BYTES].copy_from_slice(&head[CODEC_RESERVED_BYTES..]);
    image[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + payload.len()].copy_from_slice(payload);
    image
}

fn overflow_header(
    page_size_bytes: usize,
    payload: &[u8],
    next: Option<PageId>,
) -> [u8; PAGE_HEADER_BYTES] {
    assert!(
        payload.len() <= overflow_payload_bytes_max(page_size_bytes),
        "overflow payload of {} bytes exceeds its page",
        payload.len()
    );
    let mut head = [0u8; PAGE_HEADER_BYTES];
    head[H_TYPE] = PageType::Overflow as u8;
    head[H_HEAP_TOP..H_HEAP_TOP + 2]
        .copy_from_slice(&field16(PAGE_HEADER_BYTES + payload.len()).to_le_bytes());
    head[H_LEFT..H_LEFT + 8].copy_from_slice(&NO_PAGE.to_le_bytes());
    head[H_RIGHT..H_RIGHT + 8].copy_from_slice(&raw_link(next).to_le_bytes());
    head
}

/// Payload of an overflow page.
pub fn overflow_payload(p: &[u8]) -> &[u8] {
    let end = match heap_top(p) {
        // Files written before payloads were bounded by
        // `overflow_payload_bytes_max` hold full 64 KiB overflow pages whose
        // heap top wrapped from 65,536 to 0; no overflow page ends at 0
        // otherwise (its header comes first), so 0 means the page end.
        0 if p.len() > PAGE_FIELD_MAX => p.len(),
        top => top.clamp(PAGE_HEADER_BYTES, p.len()),
    };
    &p[PAGE_HEADER_BYTES..end]
}

#[cfg(test)]
mod tests {
    use super::cmp_keys;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cmp_keys_is_lexicographic(
            a in proptest::collection::vec(0u8..3, 0..20),
            b in proptest::collection::vec(0u8..3, 0..20),
        ) {
            prop_assert_eq!(cmp_keys(&a, &b), a.cmp(&b));
        }
    }
}
