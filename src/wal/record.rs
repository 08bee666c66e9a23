//! Redo groups: the unit of atomicity in the write-ahead log.
//!
//! A group holds every page change of one atomic operation (a tree insert
//! that splits touches several pages; a `WriteBatch` touches several trees).
//! Recovery applies a group whole or not at all: its CRC32C covers every
//! byte, so a group torn by a crash fails its check and ends the log. A
//! write too large for one group spans several: every group but its last
//! carries the flag `continued`, and recovery applies them only once it
//! has read the last (see `Reader::replay`).
//!
//! Byte layout of a group (integers little-endian):
//!
//! ```text
//! offset size field
//!      0    4 magic            "BRWL" (GROUP_MAGIC)
//!      4    4 group_len_bytes  header + body, at most GROUP_BYTES_MAX
//!      8    8 lsn              where the group starts in the log
//!     16    1 kind             1 = redo, 2 = flush start
//!     17    1 flags            bit 0 continued: the write goes on in the
//!                              next redo group (other bits reserved, zero)
//!     18    2 reserved         zero
//!     20    4 entry_count
//!     24    4 crc32c           over [0, group_len_bytes) with this field zero
//!     28    4 reserved         zero
//!     32    . entries
//! ```
//!
//! An entry names one page:
//!
//! ```text
//!      0    8 page_id
//!      8    1 kind             1 = patches, 2 = full block, 3 = sparse block,
//!                              4 = rebuild, 5 = insert, 6 = delete
//!      9    3 reserved         zero
//!     12    4 body_len_bytes
//!     16    . body: patches are repeated (offset u32, len u32, bytes);
//!               a len with bit 31 set (ZERO_FILL_FLAG) is a zero-fill
//!               patch: len & !ZERO_FILL_FLAG zero bytes, none stored;
//!               a full block is the block's bytes; a sparse block is
//!               block_len u32, reserved u32, then segments encoded as
//!               patches: the block's bytes with every run of at least
//!               ZERO_RUN_BYTES_MIN zero bytes left out; a rebuild is
//!               the recipe of a page rebuilt from its own records
//!               (`barracuda_btree::recipe`), which redo runs again on the
//!               page as it finds it; an insert is a record (flags u8,
//!               key_len u16, value_len u16, key, value) that redo inserts
//!               where the page's search puts it; a delete is the page's
//!               flags after it (u16), key_len u16 and the key, which redo
//!               removes where the page's search finds it
//! ```
//!
//! Images are written sparse. A compressed block's padding and an
//! uncompressed page's free gap are zeros, so an image costs the log about
//! the bytes the page uses, not its size (PostgreSQL leaves out its pages'
//! "hole" the same way). Full-block entries are still read. Patches are
//! written sparse too: a run of at least ZERO_RUN_BYTES_MIN zero bytes in a
//! patch (the records a split moved out of its left page, a freed page)
//! becomes a zero-fill patch of 8 bytes. Logs of checkpoint version 4 and
//! older hold none.
//!
//! Rebuild entries replace the patches of a page rebuilt from its own
//! records (a split's left page, a merge, a compaction): about half a page of
//! moved records becomes three bytes per record. Insert entries replace the
//! patches of a record inserted into a page (the record, its predecessor's
//! link, its directory slot and the page header's counts): the record alone;
//! delete entries, the key alone. Logs of checkpoint version 5 and older hold
//! none of these.

use std::borrow::Cow;

use barracuda_base::{Lsn, PageId};
use barracuda_btree::LogicalKind;

use crate::error::{Error, Result};

/// Marks the first bytes of every group.
pub const GROUP_MAGIC: u32 = u32::from_le_bytes(*b"BRWL");

/// Bytes of a group header.
pub const GROUP_HEADER_BYTES: usize = 32;

/// Bytes of an entry header.
pub const ENTRY_HEADER_BYTES: usize = 16;

/// Bytes of a patch header inside a patches entry.
pub const PATCH_HEADER_BYTES: usize = 8;

/// The largest group. A group must fit the log ring with room to spare, and
/// one operation touches a bounded number of pages (a split of every level
/// of a tree of height 8, plus overflow pages, is far below this).
pub const GROUP_BYTES_MAX: usize = 16 << 20;

const KIND_REDO: u8 = 1;
const KIND_FLUSH_START: u8 = 2;
const ENTRY_PATCHES: u8 = 1;
const ENTRY_FULL_BLOCK: u8 = 2;
const ENTRY_SPARSE_BLOCK: u8 = 3;
const ENTRY_REBUILD: u8 = 4;
const ENTRY_INSERT: u8 = 5;
const ENTRY_DELETE: u8 = 6;
/// Bit 31 of a patch's length: a zero-fill patch, whose bytes are all zero
/// and not stored. (A patch lies inside a page of at most 64 KiB.)
const ZERO_FILL_FLAG: u32 = 1 << 31;
/// The zero bytes a zero-fill patch reads back as: a page's size at most.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
/// Bytes of a sparse block's header: block length u32, reserved u32.
const SPARSE_HEADER_BYTES: usize = 8;
/// A sparse image leaves out runs of zero bytes at least this long (whole
/// aligned 8-byte words): a segment header costs 8 bytes.
pub const ZERO_RUN_BYTES_MIN: usize = 64;
/// The most an image entry adds to its block's bytes: the entry header, the
/// sparse header and one segment header (a left-out run saves more than the
/// segment header it costs).
pub const IMAGE_OVERHEAD_BYTES_MAX: usize =
    ENTRY_HEADER_BYTES + SPARSE_HEADER_BYTES + PATCH_HEADER_BYTES;
const CRC_OFFSET: usize = 24;

/// The kind of a group found in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKind {
    /// Page changes of one atomic operation.
    Redo,
    /// Written at the start of every flush: everything before it in the log
    /// was durable when it was written. Recovery uses it to tell a torn tail
    /// (benign: never acknowledged) from damage to synced records.
    FlushStart,
}

/// The page changes of one atomic operation, built before it is appended.
///
/// Consecutive patches to the same page share one entry until
/// [`RedoGroup::end_commit`]: an entry is one commit of its page, because
/// redo commits each entry as the running system committed it. A compressed
/// page's block depends on where its commits fell (each appends to the
/// block's modification log, and a full log recompresses the page as it is
/// at that commit), so two commits redone as one can recompress a page the
/// running system never recompressed, into a block it does not fit.
#[derive(Debug, Default, Clone)]
pub struct RedoGroup {
    body: Vec<u8>,
    entry_count: u32,
    /// Not the last group of its write ([`RedoGroup::set_continued`]).
    continued: bool,
    /// Start of the last entry if it is a patches entry, and its page.
    open_patches: Option<(usize, PageId)>,
}

impl RedoGroup {
    /// An empty group.
    #[cfg(test)]
    pub fn new() -> RedoGroup {
        RedoGroup::default()
    }

    /// Whether the group holds no change.
    pub fn is_empty(&self) -> bool {
        self.entry_count == 0
    }

    /// Number of entries (runs of changes to one page).
    #[cfg(test)]
    pub fn entry_count(&self) -> u32 {
        self.entry_count
    }

    /// Empties the group, keeping its memory.
    pub fn clear(&mut self) {
        self.body.clear();
        self.entry_count = 0;
        self.continued = false;
        self.open_patches = None;
    }

    /// Marks the group as not the last of its write: recovery applies it
    /// only together with the rest of the write, up to a group without the
    /// mark, and drops it if the log ends first.
    pub fn set_continued(&mut self, continued: bool) {
        self.continued = continued;
    }

    /// Ends the current commit: the next patch starts a new entry, even for
    /// the same page.
    pub fn end_commit(&mut self) {
        self.open_patches = None;
    }

    /// Records that `bytes` were written at `offset_bytes` of page `page_id`
    /// (its runs of zeros as zero-fill patches), in the commit the last
    /// patch is in if that was of the same page.
    pub fn patch(&mut self, page_id: PageId, offset_bytes: u32, bytes: &[u8]) {
        let start = match self.open_patches {
            Some((start, open_page)) if open_page == page_id => start,
            _ => {
                let start = self.begin_entry(page_id, ENTRY_PATCHES);
                self.open_patches = Some((start, page_id));
                start
            }
        };
        let body = &mut self.body;
        for_segments(bytes, |segment, zero| {
            let offset = offset_bytes + u32::try_from(segment.start).expect("inside a page");
            let len = u32::try_from(segment.len()).expect("a patch is smaller than a page");
            debug_assert!(len < ZERO_FILL_FLAG, "a patch is smaller than a page");
            body.extend_from_slice(&offset.to_le_bytes());
            if zero {
                body.extend_from_slice(&(len | ZERO_FILL_FLAG).to_le_bytes());
            } else {
                body.extend_from_slice(&len.to_le_bytes());
                body.extend_from_slice(&bytes[segment]);
            }
        });
        self.finish_entry(start);
    }

    /// Records the whole block of `page_id` (compressed, or the page when
    /// uncompressed): the first change to a page after a checkpoint logs it,
    /// so a torn page write is always repairable. Runs of zeros are left out
    /// (see the module documentation); the entry reads back whole.
    pub fn full_block(&mut self, page_id: PageId, block: &[u8]) {
        let start = self.begin_entry(page_id, ENTRY_SPARSE_BLOCK);
        let block_len = u32::try_from(block.len()).expect("a block is smaller than 4 GiB");
        self.body.extend_from_slice(&block_len.to_le_bytes());
        self.body.extend_from_slice(&0u32.to_le_bytes());
        let body = &mut self.body;
        for_nonzero_segments(block, |segment| {
            let offset = u32::try_from(segment.start).expect("inside the block");
            let len = u32::try_from(segment.len()).expect("inside the block");
            body.extend_from_slice(&offset.to_le_bytes());
            body.extend_from_slice(&len.to_le_bytes());
            body.extend_from_slice(&block[segment]);
        });
        self.finish_entry(start);
        self.open_patches = None;
    }

    /// Records a logical change of `page_id` (`barracuda_btree::recipe`),
    /// in place of the patches it made.
    pub fn logical(&mut self, page_id: PageId, kind: LogicalKind, bytes: &[u8]) {
        let entry_kind = match kind {
            LogicalKind::Rebuild => ENTRY_REBUILD,
            LogicalKind::Insert => ENTRY_INSERT,
            LogicalKind::Delete => ENTRY_DELETE,
        };
        let start = self.begin_entry(page_id, entry_kind);
        self.body.extend_from_slice(bytes);
        self.finish_entry(start);
        self.open_patches = None;
    }

    /// Bytes the group takes in the log.
    pub fn encoded_len(&self) -> usize {
        GROUP_HEADER_BYTES + self.body.len()
    }

    fn begin_entry(&mut self, page_id: PageId, kind: u8) -> usize {
        let start = self.body.len();
        self.body.extend_from_slice(&page_id.0.to_le_bytes());
        self.body.extend_from_slice(&[kind, 0, 0, 0]);
        self.body.extend_from_slice(&0u32.to_le_bytes());
        self.entry_count += 1;
        start
    }

    fn finish_entry(&mut self, start: usize) {
        let body_len = self.body.len() - start - ENTRY_HEADER_BYTES;
        let body_len = u32::try_from(body_len).expect("an entry is bounded by GROUP_BYTES_MAX");
        self.body[start + 12..start + 16].copy_from_slice(&body_len.to_le_bytes());
    }

    /// Appends the encoded group, starting at `lsn`, to `out`.
    pub(crate) fn encode_into(&self, lsn: Lsn, out: &mut Vec<u8>) {
        let flags = if self.continued { FLAG_CONTINUED } else { 0 };
        encode_group(KIND_REDO, flags, lsn, self.entry_count, &self.body, out);
    }
}

/// Appends a flush-start marker at `lsn` to `out`.
pub(crate) fn encode_flush_start(lsn: Lsn, out: &mut Vec<u8>) {
    encode_group(KIND_FLUSH_START, 0, lsn, 0, &[], out);
}

/// Bytes of a flush-start marker.
pub(crate) const FLUSH_START_BYTES: usize = GROUP_HEADER_BYTES;

/// Group flag: the write goes on in the next redo group.
const FLAG_CONTINUED: u8 = 1;

fn encode_group(kind: u8, flags: u8, lsn: Lsn, entry_count: u32, body: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    let group_len = u32::try_from(GROUP_HEADER_BYTES + body.len()).expect("bounded group");
    out.extend_from_slice(&GROUP_MAGIC.to_le_bytes());
    out.extend_from_slice(&group_len.to_le_bytes());
    out.extend_from_slice(&lsn.0.to_le_bytes());
    out.extend_from_slice(&[kind, flags, 0, 0]);
    out.extend_from_slice(&entry_count.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out[start..]);
    out[start + CRC_OFFSET..start + CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
}

/// A group header read from the log, before its body is checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupHeader {
    pub(crate) group_len_bytes: usize,
    pub(crate) lsn: Lsn,
    pub(crate) kind: GroupKind,
    pub(crate) entry_count: u32,
    /// The write goes on in the next redo group.
    pub(crate) continued: bool,
}

/// Parses a header; `None` if it cannot start a group.
pub(crate) fn parse_header(bytes: &[u8; GROUP_HEADER_BYTES]) -> Option<GroupHeader> {
    let u32_at =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    if u32_at(0) != GROUP_MAGIC {
        return None;
    }
    let group_len_bytes = u32_at(4) as usize;
    if !(GROUP_HEADER_BYTES..=GROUP_BYTES_MAX).contains(&group_len_bytes) {
        return None;
    }
    let mut lsn = [0u8; 8];
    lsn.copy_from_slice(&bytes[8..16]);
    let kind = match bytes[16] {
        KIND_REDO => GroupKind::Redo,
        KIND_FLUSH_START => GroupKind::FlushStart,
        _ => return None,
    };
    Some(GroupHeader {
        group_len_bytes,
        lsn: Lsn(u64::from_le_bytes(lsn)),
        kind,
        entry_count: u32_at(20),
        continued: bytes[17] & FLAG_CONTINUED != 0,
    })
}

/// Whether `group` (header and body) carries a correct CRC32C.
pub(crate) fn crc_matches(group: &[u8]) -> bool {
    if group.len() < GROUP_HEADER_BYTES {
        return false;
    }
    let stored = u32::from_le_bytes([
        group[CRC_OFFSET],
        group[CRC_OFFSET + 1],
        group[CRC_OFFSET + 2],
        group[CRC_OFFSET + 3],
    ]);
    let crc = crc32c::crc32c(&group[..CRC_OFFSET]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    let crc = crc32c::crc32c_append(crc, &group[CRC_OFFSET + 4..]);
    crc == stored
}

/// A redo group read back from the log, its CRC verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedGroup {
    /// Where the group starts.
    pub lsn: Lsn,
    /// Where the group ends: the LSN a page holds once the group is applied.
    pub end_lsn: Lsn,
    entry_count: u32,
    bytes: Vec<u8>,
}

impl LoggedGroup {
    pub(crate) fn new(header: GroupHeader, bytes: Vec<u8>) -> LoggedGroup {
        LoggedGroup {
            lsn: header.lsn,
            end_lsn: Lsn(header.lsn.0 + header.group_len_bytes as u64),
            entry_count: header.entry_count,
            bytes,
        }
    }

    /// The group's entries in the order they were recorded.
    ///
    /// The CRC matched, so a malformed entry means the group was written by
    /// a bug or a different format: it is reported as corruption.
    pub fn entries(&self) -> Result<Vec<RedoEntry<'_>>> {
        let mut entries = Vec::with_capacity(self.entry_count as usize);
        let mut rest = &self.bytes[GROUP_HEADER_BYTES..];
        for _ in 0..self.entry_count {
            let (entry, tail) = self.parse_entry(rest)?;
            entries.push(entry);
            rest = tail;
        }
        if !rest.is_empty() {
            return Err(self.corrupted("bytes after the last entry"));
        }
        Ok(entries)
    }

    fn parse_entry<'a>(&'a self, bytes: &'a [u8]) -> Result<(RedoEntry<'a>, &'a [u8])> {
        if bytes.len() < ENTRY_HEADER_BYTES {
            return Err(self.corrupted("entry header past the group's end"));
        }
        let page_id = PageId(read_u64(bytes, 0));
        let body_len = read_u32(bytes, 12) as usize;
        let body = bytes
            .get(ENTRY_HEADER_BYTES..ENTRY_HEADER_BYTES + body_len)
            .ok_or_else(|| self.corrupted("entry body past the group's end"))?;
        let rest = &bytes[ENTRY_HEADER_BYTES + body_len..];
        let entry = match bytes[8] {
            ENTRY_PATCHES => {
                check_patches(body).map_err(|reason| self.corrupted(reason))?;
                RedoEntry::Patches {
                    page_id,
                    patches: Patches { bytes: body },
                }
            }
            ENTRY_FULL_BLOCK => RedoEntry::FullBlock {
                page_id,
                block: Cow::Borrowed(body),
            },
            ENTRY_SPARSE_BLOCK => RedoEntry::FullBlock {
                page_id,
                block: Cow::Owned(sparse_block(body).map_err(|reason| self.corrupted(reason))?),
            },
            ENTRY_REBUILD => RedoEntry::Rebuild {
                page_id,
                recipe: body,
            },
            ENTRY_INSERT => RedoEntry::Insert {
                page_id,
                record: body,
            },
            ENTRY_DELETE => RedoEntry::Delete { page_id, key: body },
            _ => return Err(self.corrupted("unknown entry kind")),
        };
        Ok((entry, rest))
    }

    fn corrupted(&self, reason: &'static str) -> Error {
        Error::LogCorrupted {
            lsn: self.lsn,
            reason,
        }
    }
}

fn check_patches(mut body: &[u8]) -> std::result::Result<(), &'static str> {
    while !body.is_empty() {
        if body.len() < PATCH_HEADER_BYTES {
            return Err("patch header past the entry's end");
        }
        let len = read_u32(body, 4);
        let stored = if len & ZERO_FILL_FLAG == 0 {
            len as usize
        } else if (len & !ZERO_FILL_FLAG) as usize <= ZEROS.len() {
            0
        } else {
            return Err("zero-fill patch longer than a page");
        };
        body = body
            .get(PATCH_HEADER_BYTES + stored..)
            .ok_or("patch bytes past the entry's end")?;
    }
    Ok(())
}

/// Calls `keep` on each range of `block` a sparse image keeps, in order:
/// everything but the runs of at least [`ZERO_RUN_BYTES_MIN`] zero bytes
/// made of whole aligned words. (No allocation: it runs under the write
/// mutex, once per image.)
fn for_nonzero_segments(block: &[u8], mut keep: impl FnMut(std::ops::Range<usize>)) {
    for_segments(block, |segment, zero| {
        if !zero {
            keep(segment);
        }
    });
}

/// Cuts `bytes` into the ranges [`for_nonzero_segments`] keeps and the
/// zero runs between them, and calls `f` on each in order with whether it
/// is a zero run. Shorter than a run, `bytes` is one kept range (most
/// patches: a record, a few header bytes).
fn for_segments(bytes: &[u8], mut f: impl FnMut(std::ops::Range<usize>, bool)) {
    const WORD: usize = 8;
    if bytes.len() < ZERO_RUN_BYTES_MIN {
        if !bytes.is_empty() {
            f(0..bytes.len(), false);
        }
        return;
    }
    let words = bytes.len() / WORD;
    let zero_at = |word: usize| bytes[word * WORD..(word + 1) * WORD] == [0; WORD];
    let mut kept_from = 0;
    let mut word = 0;
    while word < words {
        if !zero_at(word) {
            word += 1;
            continue;
        }
        let run_start = word;
        while word < words && zero_at(word) {
            word += 1;
        }
        if (word - run_start) * WORD >= ZERO_RUN_BYTES_MIN {
            if kept_from < run_start * WORD {
                f(kept_from..run_start * WORD, false);
            }
            f(run_start * WORD..word * WORD, true);
            kept_from = word * WORD;
        }
    }
    if kept_from < bytes.len() {
        f(kept_from..bytes.len(), false);
    }
}

/// Rebuilds a sparse block's bytes from its entry body.
fn sparse_block(body: &[u8]) -> std::result::Result<Vec<u8>, &'static str> {
    if body.len() < SPARSE_HEADER_BYTES {
        return Err("sparse block header past the entry's end");
    }
    let segments = &body[SPARSE_HEADER_BYTES..];
    check_patches(segments)?;
    let mut block = vec![0; read_u32(body, 0) as usize];
    for (offset, bytes) in (Patches { bytes: segments }) {
        block
            .get_mut(offset as usize..offset as usize + bytes.len())
            .ok_or("sparse block segment past the block's end")?
            .copy_from_slice(bytes);
    }
    Ok(block)
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// One entry of a logged group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedoEntry<'a> {
    /// Byte patches to apply to the page's uncompressed image, in order.
    Patches {
        /// The page changed.
        page_id: PageId,
        /// The patches.
        patches: Patches<'a>,
    },
    /// The page rebuilt from its own records, as `recipe` describes
    /// (`barracuda_btree::recipe::build` on the page as redo finds it).
    Rebuild {
        /// The page changed.
        page_id: PageId,
        /// The recipe's bytes.
        recipe: &'a [u8],
    },
    /// A record inserted where the page's search puts it
    /// (`barracuda_btree::recipe::redo_insert`).
    Insert {
        /// The page changed.
        page_id: PageId,
        /// The logged record.
        record: &'a [u8],
    },
    /// A record removed where the page's search finds its key, and the
    /// page's flags set (`barracuda_btree::recipe::redo_delete`).
    Delete {
        /// The page changed.
        page_id: PageId,
        /// The logged key and flags.
        key: &'a [u8],
    },
    /// The page's whole image (compressed block with its modification log,
    /// or the uncompressed page). The database logs it *after* the group's
    /// changes to that page and logs no patches for it in the same group.
    FullBlock {
        /// The page logged.
        page_id: PageId,
        /// The block's bytes (rebuilt whole from a sparse entry).
        block: Cow<'a, [u8]>,
    },
}

/// The patches of one entry; iterate for `(offset_bytes, bytes)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patches<'a> {
    bytes: &'a [u8],
}

impl<'a> Iterator for Patches<'a> {
    type Item = (u32, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.bytes.len() < PATCH_HEADER_BYTES {
            return None;
        }
        let offset = read_u32(self.bytes, 0);
        let len = read_u32(self.bytes, 4);
        // Lengths were checked when the entry was parsed.
        if len & ZERO_FILL_FLAG != 0 {
            self.bytes = &self.bytes[PATCH_HEADER_BYTES..];
            return Some((offset, ZEROS.get(..(len & !ZERO_FILL_FLAG) as usize)?));
        }
        let len = len as usize;
        let patch = self
            .bytes
            .get(PATCH_HEADER_BYTES..PATCH_HEADER_BYTES + len)?;
        self.bytes = &self.bytes[PATCH_HEADER_BYTES + len..];
        Some((offset, patch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logged(group: &RedoGroup, lsn: Lsn) -> LoggedGroup {
        let mut out = Vec::new();
        group.encode_into(lsn, &mut out);
        let header = parse_header(out[..GROUP_HEADER_BYTES].try_into().unwrap()).unwrap();
        assert!(crc_matches(&out));
        LoggedGroup::new(header, out)
    }

    #[test]
    fn patches_to_one_page_share_an_entry() {
        let mut group = RedoGroup::new();
        group.patch(PageId(7), 100, b"abc");
        group.patch(PageId(7), 200, b"de");
        group.full_block(PageId(8), &[9; 40]);
        group.patch(PageId(8), 0, b"x");
        group.patch(PageId(7), 1, b"y");
        assert_eq!(group.entry_count(), 4);
        let logged = logged(&group, Lsn(4096));
        assert_eq!(logged.end_lsn.0, 4096 + group.encoded_len() as u64);
        let entries = logged.entries().unwrap();
        let RedoEntry::Patches { page_id, patches } = entries[0].clone() else {
            panic!("first entry is patches")
        };
        assert_eq!(page_id, PageId(7));
        assert_eq!(
            patches.collect::<Vec<_>>(),
            vec![(100, &b"abc"[..]), (200, &b"de"[..])]
        );
        assert_eq!(
            entries[1],
            RedoEntry::FullBlock {
                page_id: PageId(8),
                block: Cow::Borrowed(&[9; 40][..])
            }
        );
        assert!(matches!(
            entries[3],
            RedoEntry::Patches {
                page_id: PageId(7),
                ..
            }
        ));
    }

    /// Two commits of one page stay two entries, so that redo commits them
    /// as they were committed (see [`RedoGroup`]).
    #[test]
    fn each_commit_of_a_page_is_its_own_entry() {
        let mut group = RedoGroup::new();
        group.patch(PageId(7), 100, b"abc");
        group.patch(PageId(7), 200, b"de");
        group.end_commit();
        group.patch(PageId(7), 300, b"f");
        group.end_commit();
        assert_eq!(group.entry_count(), 2);
        let logged = logged(&group, Lsn(4096));
        let entries = logged.entries().unwrap();
        let commits: Vec<Vec<(u32, &[u8])>> = entries
            .iter()
            .map(|entry| match entry.clone() {
                RedoEntry::Patches { page_id, patches } => {
                    assert_eq!(page_id, PageId(7));
                    patches.collect()
                }
                other => panic!("a patches entry, not {other:?}"),
            })
            .collect();
        assert_eq!(
            commits,
            vec![
                vec![(100, &b"abc"[..]), (200, &b"de"[..])],
                vec![(300, &b"f"[..])]
            ]
        );
    }

    #[test]
    fn zero_runs_in_patches_are_logged_as_zero_fills() {
        // The run is cut on whole words from the patch's start.
        let mut bytes = vec![7u8; 24];
        bytes.extend_from_slice(&[0; 200]);
        bytes.extend_from_slice(&[9; 13]);
        let mut group = RedoGroup::new();
        group.patch(PageId(3), 1000, &bytes);
        // A short run of zeros stays in its patch.
        group.patch(PageId(3), 50, &[0; 40]);
        // Three patch headers and the 37 nonzero bytes, for 237 bytes.
        let patch_bytes = 3 * PATCH_HEADER_BYTES + 37 + PATCH_HEADER_BYTES + 40;
        assert_eq!(
            group.encoded_len(),
            GROUP_HEADER_BYTES + ENTRY_HEADER_BYTES + patch_bytes
        );
        let logged = logged(&group, Lsn(4096));
        let entries = logged.entries().unwrap();
        let RedoEntry::Patches { patches, .. } = entries[0].clone() else {
            panic!("a patches entry")
        };
        // Applied in order, the patches rebuild the bytes.
        let mut page = vec![0xaa; 2000];
        for (offset, patch) in patches {
            page[offset as usize..offset as usize + patch.len()].copy_from_slice(patch);
        }
        assert_eq!(&page[1000..1000 + bytes.len()], &bytes[..]);
        assert_eq!(&page[50..90], &[0; 40]);
        assert!(page[..50].iter().chain(&page[90..1000]).all(|&b| b == 0xaa));
    }

    #[test]
    fn a_zero_fill_longer_than_a_page_is_corruption() {
        let mut group = RedoGroup::new();
        group.patch(PageId(1), 0, &[0; 128]);
        // The zero-fill's length field, made 64 KiB + 8.
        let at = GROUP_HEADER_BYTES + ENTRY_HEADER_BYTES + 4;
        let len = (ZEROS.len() as u32 + 8) | ZERO_FILL_FLAG;
        let logged = logged_with_u32_at(&group, at, len);
        assert!(matches!(
            logged.entries(),
            Err(Error::LogCorrupted { lsn: Lsn(512), .. })
        ));
    }

    #[test]
    fn a_flipped_bit_fails_the_crc() {
        let mut group = RedoGroup::new();
        group.patch(PageId(1), 10, &[1, 2, 3]);
        let mut out = Vec::new();
        group.encode_into(Lsn(512), &mut out);
        for bit in 0..out.len() * 8 {
            let mut damaged = out.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(!crc_matches(&damaged), "bit {bit} flip undetected");
        }
    }

    #[test]
    fn malformed_entries_are_corruption_not_panics() {
        let mut group = RedoGroup::new();
        group.patch(PageId(1), 10, &[1, 2, 3]);
        // Claim a longer body than the group has.
        let logged = logged_with_u32_at(&group, GROUP_HEADER_BYTES + 12, 1000);
        assert!(matches!(
            logged.entries(),
            Err(Error::LogCorrupted { lsn: Lsn(512), .. })
        ));
    }

    /// `group` logged at LSN 512 with `value` written over the u32 at `at`,
    /// and its CRC made right again: damage only the parser can see.
    fn logged_with_u32_at(group: &RedoGroup, at: usize, value: u32) -> LoggedGroup {
        let mut out = Vec::new();
        group.encode_into(Lsn(512), &mut out);
        out[at..at + 4].copy_from_slice(&value.to_le_bytes());
        out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&[0; 4]);
        let crc = crc32c::crc32c(&out);
        out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        let header = parse_header(out[..GROUP_HEADER_BYTES].try_into().unwrap()).unwrap();
        LoggedGroup::new(header, out)
    }

    fn logged_block(block: &[u8]) -> (usize, Vec<u8>) {
        let mut group = RedoGroup::new();
        group.full_block(PageId(3), block);
        let logged = logged(&group, Lsn(64));
        let entries = logged.entries().unwrap();
        let RedoEntry::FullBlock { page_id, block } = &entries[0] else {
            panic!("a full block entry")
        };
        assert_eq!(*page_id, PageId(3));
        (group.encoded_len(), block.to_vec())
    }

    #[test]
    fn an_image_leaves_out_its_zero_gap() {
        // A page's header and records, its free gap, its slot directory.
        let mut page = vec![0u8; 16 << 10];
        page[..6000].fill(0xAB);
        page[(16 << 10) - 200..].fill(0xCD);
        let (logged_bytes, back) = logged_block(&page);
        assert_eq!(back, page);
        assert!(
            logged_bytes < 6000 + 200 + 128,
            "{logged_bytes} bytes logged for 6,200 used"
        );
    }

    #[test]
    fn a_full_block_entry_still_reads() {
        let mut group = RedoGroup::new();
        let start = group.begin_entry(PageId(5), ENTRY_FULL_BLOCK);
        group.body.extend_from_slice(&[7; 48]);
        group.finish_entry(start);
        let logged = logged(&group, Lsn(64));
        let entries = logged.entries().unwrap();
        assert_eq!(
            entries[0],
            RedoEntry::FullBlock {
                page_id: PageId(5),
                block: Cow::Borrowed(&[7; 48][..])
            }
        );
    }

    #[test]
    fn a_sparse_segment_past_the_block_is_corruption() {
        let mut group = RedoGroup::new();
        let start = group.begin_entry(PageId(5), ENTRY_SPARSE_BLOCK);
        group.body.extend_from_slice(&16u32.to_le_bytes());
        group.body.extend_from_slice(&0u32.to_le_bytes());
        group.body.extend_from_slice(&12u32.to_le_bytes());
        group.body.extend_from_slice(&8u32.to_le_bytes());
        group.body.extend_from_slice(&[1; 8]);
        group.finish_entry(start);
        assert!(matches!(
            logged(&group, Lsn(64)).entries(),
            Err(Error::LogCorrupted { lsn: Lsn(64), .. })
        ));
    }

    proptest::proptest! {
        /// Any block, with zero runs of any length at any offset, reads
        /// back byte for byte.
        #[test]
        fn sparse_images_read_back_exactly(
            len_words in 1usize..600,
            tail in 0usize..8,
            runs in proptest::collection::vec((0usize..4800, 0usize..700), 0..6),
            fill in 1u8..=255,
        ) {
            let len = len_words * 8 + tail;
            let mut block: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) | fill).collect();
            for (start, run) in runs {
                let start = start.min(len);
                let end = (start + run).min(len);
                block[start..end].fill(0);
            }
            let (_, back) = logged_block(&block);
            proptest::prop_assert_eq!(back, block);
        }
    }
}
