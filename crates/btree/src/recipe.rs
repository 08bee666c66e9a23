//! Rebuild recipes: a page rebuilt from its own records, logged by how it
//! was built rather than by the bytes that changed.
//!
//! A split's left page keeps about half its records, compacted: nearly every
//! kept record moves, so the byte difference from the old page is about half
//! a page (8 KiB of a 16 KiB page). The same holds for a merge's, a
//! redistribution's and a compaction's rebuilt pages. What made the image is
//! small: the layout, and for each record either the offset where the old
//! page holds it or, for a record the page did not hold, its bytes. Redo
//! runs the same deterministic build ([`crate::page::rebuilt_image`]) on the
//! page as recovery finds it, which is the page as it was when the rebuild
//! ran (redo applies a page's changes in order onto the data file's block,
//! which the doublewrite area keeps whole): the same image, to the byte.
//! This is the page-level logical redo of ARIES ("physiological") and of
//! InnoDB's `MLOG_LIST_END_DELETE` and `MLOG_PAGE_REORGANIZE`.
//!
//! Byte layout (integers little-endian):
//!
//! ```text
//! offset size field
//!      0    1 version          1 (RECIPE_VERSION)
//!      1    1 page_type        PageType as u8
//!      2    1 level
//!      3    1 insert_flags
//!      4    2 flags
//!      6    2 last_insert      index in the records, 0xFFFF none
//!      8    8 left             NO_PAGE none
//!     16    8 right            NO_PAGE none
//!     24    1 group_records    1..=GROUP_RECORDS_MAX
//!     25    1 heap_order       0 kept, 1 key
//!     26    2 record_count
//!     28    . records, in key order, each:
//!              tag u8 = 0: offset u16: the record the old page holds there
//!              tag u8 = 1: old_offset u16 (0xFFFF none), flags u8,
//!                          key_len u16, value_len u16, key, value
//! ```

use crate::page::{
    self, GROUP_RECORDS_MAX, HeapOrder, KEY_BYTES_MAX, Layout, NO_PAGE, PAGE_HEADER_BYTES, PageMut,
    PageType, Probe, RECORD_HEADER_BYTES, Rebuild, RecBuf, RecRef, SLOT_BYTES,
};
pub use crate::store::Recipe;
use crate::store::{LogicalKind, PageWrite, Patch, PatchRecorder};
use barracuda_base::PageId;

const RECIPE_VERSION: u8 = 1;
const HEADER_BYTES: usize = 28;
const TAG_AT: u8 = 0;
const TAG_INLINE: u8 = 1;
const NONE_U16: u16 = u16::MAX;

/// The recipe of the image [`page::rebuilt_image`] (or a compaction) builds
/// from `old` with these arguments. A record is named by its offset when
/// `old` holds exactly it there, else carried whole.
#[must_use]
pub fn encode(
    old: &[u8],
    layout: &Layout,
    recs: &[RecBuf],
    group_records: usize,
    order: HeapOrder,
) -> Recipe {
    let mut out = Vec::with_capacity(HEADER_BYTES + 3 * recs.len());
    out.push(RECIPE_VERSION);
    out.push(layout.page_type as u8);
    out.push(layout.level);
    out.push(layout.insert_flags);
    out.extend_from_slice(&layout.flags.to_le_bytes());
    out.extend_from_slice(&u16_or_none(layout.last_insert).to_le_bytes());
    out.extend_from_slice(&layout.left.map_or(NO_PAGE, |p| p.0).to_le_bytes());
    out.extend_from_slice(&layout.right.map_or(NO_PAGE, |p| p.0).to_le_bytes());
    out.push(u8::try_from(group_records).expect("groups are small"));
    out.push(match order {
        HeapOrder::Kept => 0,
        HeapOrder::Key => 1,
    });
    out.extend_from_slice(
        &u16::try_from(recs.len())
            .expect("a page holds fewer than 65536 records")
            .to_le_bytes(),
    );
    for rec in recs {
        let held = rec.old_offset.filter(|&off| holds(old, off, rec));
        match held {
            Some(off) => {
                out.push(TAG_AT);
                out.extend_from_slice(&crate::page::field16(off).to_le_bytes());
            }
            None => {
                out.push(TAG_INLINE);
                out.extend_from_slice(&u16_or_none(rec.old_offset).to_le_bytes());
                out.push(rec.flags);
                out.extend_from_slice(&crate::page::field16(rec.key.len()).to_le_bytes());
                out.extend_from_slice(&crate::page::field16(rec.value.len()).to_le_bytes());
                out.extend_from_slice(&rec.key);
                out.extend_from_slice(&rec.value);
            }
        }
    }
    Recipe {
        bytes: out,
        basis: crc32c::crc32c(old),
    }
}

/// The image `recipe` builds from the page `old`: what [`encode`]'s
/// arguments built, if `old` is the page it was encoded against. An error
/// (a reason) if the recipe is malformed or names records `old` does not
/// hold; never a panic.
pub fn build(old: &[u8], recipe: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut r = Reader { bytes: recipe };
    if r.u8()? != RECIPE_VERSION {
        return Err("unknown rebuild recipe version");
    }
    let page_type = match r.u8()? {
        1 => PageType::Leaf,
        2 => PageType::Internal,
        _ => return Err("rebuild recipe of a page that is neither leaf nor internal"),
    };
    let level = r.u8()?;
    let insert_flags = r.u8()?;
    let flags = r.u16()?;
    let last_insert = none_or(r.u16()?);
    let left = link(r.u64()?);
    let right = link(r.u64()?);
    let group_records = usize::from(r.u8()?);
    if !(1..=GROUP_RECORDS_MAX).contains(&group_records) {
        return Err("rebuild recipe group size out of range");
    }
    let order = match r.u8()? {
        0 => HeapOrder::Kept,
        1 => HeapOrder::Key,
        _ => return Err("unknown rebuild recipe heap order"),
    };
    let count = usize::from(r.u16()?);
    let mut recs = Vec::with_capacity(count);
    for _ in 0..count {
        let rec = match r.u8()? {
            TAG_AT => {
                let off = usize::from(r.u16()?);
                read_checked(old, off).ok_or("rebuild recipe names no record of the page")?
            }
            TAG_INLINE => {
                let old_offset = none_or(r.u16()?);
                let flags = r.u8()?;
                let key_len = usize::from(r.u16()?);
                let value_len = usize::from(r.u16()?);
                RecBuf {
                    key: r.take(key_len)?.to_vec(),
                    flags,
                    value: r.take(value_len)?.to_vec(),
                    old_offset,
                }
            }
            _ => return Err("unknown rebuild recipe record tag"),
        };
        recs.push(rec);
    }
    if !r.bytes.is_empty() {
        return Err("bytes after a rebuild recipe's records");
    }
    if last_insert.is_some_and(|i| i >= recs.len()) {
        return Err("rebuild recipe's last insert past its records");
    }
    let slots = recs.len().div_ceil(group_records);
    let bytes =
        PAGE_HEADER_BYTES + recs.iter().map(RecBuf::len).sum::<usize>() + SLOT_BYTES * slots;
    if bytes > old.len() || old.len() < PAGE_HEADER_BYTES {
        return Err("rebuild recipe overflows its page");
    }
    let layout = Layout {
        page_type,
        level,
        flags,
        left,
        right,
        last_insert,
        insert_flags,
    };
    Ok(page::build_image(old, &layout, &recs, group_records, order))
}

/// The logged form of an insert of `rec` ([`insert_logged`]):
/// flags u8, key_len u16, value_len u16, key, value.
#[must_use]
pub fn encode_insert(rec: RecRef<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + rec.key.len() + rec.value.len());
    out.push(rec.flags);
    out.extend_from_slice(&crate::page::field16(rec.key.len()).to_le_bytes());
    out.extend_from_slice(&crate::page::field16(rec.value.len()).to_le_bytes());
    out.extend_from_slice(rec.key);
    out.extend_from_slice(rec.value);
    out
}

/// The patches, in order, that the logical change `body` of `kind` writes
/// on the page `old`: the tree's redo of a logged record
/// ([`redo_insert`], [`redo_delete`], [`redo_rebuild`]).
pub fn redo(kind: LogicalKind, old: &[u8], body: &[u8]) -> Result<Vec<Patch>, &'static str> {
    match kind {
        LogicalKind::Rebuild => redo_rebuild(old, body),
        LogicalKind::Insert => redo_insert(old, body),
        LogicalKind::Delete => redo_delete(old, body),
    }
}

/// The patches, in order, that the insert `body` ([`encode_insert`])
/// writes on the page `old`: the same search and the same insert as when it
/// was logged, so the same bytes, in the same patches (a compressed block's
/// modification log takes them as they came). An error (a reason) if the
/// body is malformed, the key is on the page already, or the record does
/// not fit; never a panic.
pub fn redo_insert(old: &[u8], body: &[u8]) -> Result<Vec<Patch>, &'static str> {
    let mut r = Reader { bytes: body };
    let flags = r.u8()?;
    let key_len = usize::from(r.u16()?);
    let value_len = usize::from(r.u16()?);
    let key = r.take(key_len)?;
    let value = r.take(value_len)?;
    if !r.bytes.is_empty() {
        return Err("bytes after a logged insert's record");
    }
    if key_len > KEY_BYTES_MAX {
        return Err("logged insert's key too long");
    }
    check_page_for_redo(old)?;
    let rec = RecRef { key, flags, value };
    let pr = page::probe(old, key);
    if pr.found != 0 {
        return Err("logged insert of a key the page holds");
    }
    if !page::has_room(old, rec.len(), old.len()) {
        return Err("logged insert does not fit its page");
    }
    let mut recorder = PatchRecorder::new(PageId(0), old);
    page::insert(&mut recorder, pr, rec);
    Ok(recorder.into_patches())
}

/// The logged form of a delete of `key` that left the page's flags at
/// `flags` (`remove_logged`): flags u16, key_len u16, key.
#[must_use]
pub fn encode_delete(key: &[u8], flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + key.len());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&crate::page::field16(key.len()).to_le_bytes());
    out.extend_from_slice(key);
    out
}

/// The patches, in order, that the delete `body` ([`encode_delete`])
/// writes on the page `old`, as [`redo_insert`] does for an insert. An error
/// if the body is malformed or the page does not hold the key; never a
/// panic.
pub fn redo_delete(old: &[u8], body: &[u8]) -> Result<Vec<Patch>, &'static str> {
    let mut r = Reader { bytes: body };
    let flags = r.u16()?;
    let key_len = usize::from(r.u16()?);
    let key = r.take(key_len)?;
    if !r.bytes.is_empty() {
        return Err("bytes after a logged delete's key");
    }
    check_page_for_redo(old)?;
    let pr = page::probe(old, key);
    if pr.found == 0 {
        return Err("logged delete of a key the page does not hold");
    }
    if !page::is_leaf(old) && pr.pred == 0 {
        return Err("logged delete of an internal page's first record");
    }
    let mut recorder = PatchRecorder::new(PageId(0), old);
    page::remove(&mut recorder, pr);
    page::set_flags(&mut recorder, flags);
    Ok(recorder.into_patches())
}

/// Whether redo may search and change `old` as a page of the tree: a leaf
/// or internal page whose header, record chain and directory agree.
fn check_page_for_redo(old: &[u8]) -> Result<(), &'static str> {
    if old.len() < PAGE_HEADER_BYTES
        || !matches!(
            page::page_type(old),
            Some(PageType::Leaf | PageType::Internal)
        )
    {
        return Err("logged change of a page that is neither leaf nor internal");
    }
    let directory_fits = page::slot_count(old)
        .checked_mul(SLOT_BYTES)
        .is_some_and(|bytes| bytes + PAGE_HEADER_BYTES <= old.len());
    if !directory_fits || page::check_structure(old, PageId(0)).is_err() {
        return Err("logged change of a damaged page");
    }
    Ok(())
}

/// The patches, in order, that the rebuild `recipe` writes on the page
/// `old`: the runs where [`build`]'s image differs from it, as the rebuild
/// itself wrote them ([`PageWrite::write_diff`]).
pub fn redo_rebuild(old: &[u8], recipe: &[u8]) -> Result<Vec<Patch>, &'static str> {
    let image = build(old, recipe)?;
    let mut recorder = PatchRecorder::new(PageId(0), old);
    recorder.write_diff(&image);
    Ok(recorder.into_patches())
}

/// Whether `p` holds exactly `rec` at `off` (without copying it out).
fn holds(p: &[u8], off: usize, rec: &RecBuf) -> bool {
    fits_at(p, off)
        && page::rec_flags(p, off) == rec.flags
        && page::rec_key(p, off) == rec.key.as_slice()
        && page::rec_value(p, off) == rec.value.as_slice()
}

/// Whether a record's header and bytes at `off` lie inside `p` past the
/// page header (bounds only: `p` may be any bytes).
fn fits_at(p: &[u8], off: usize) -> bool {
    let header_end = off + RECORD_HEADER_BYTES;
    if off < PAGE_HEADER_BYTES || header_end > p.len() {
        return false;
    }
    let key_len = usize::from(u16::from_le_bytes([p[off + 2], p[off + 3]]));
    let value_len = usize::from(u16::from_le_bytes([p[off + 4], p[off + 5]]));
    header_end + key_len + value_len <= p.len()
}

/// The record at `off` of `p`, if one fits there (bounds checked: `p` may
/// be any bytes).
fn read_checked(p: &[u8], off: usize) -> Option<RecBuf> {
    fits_at(p, off).then(|| RecBuf::read(p, off))
}

fn u16_or_none(value: Option<usize>) -> u16 {
    value.map_or(NONE_U16, |v| {
        u16::try_from(v)
            .ok()
            .filter(|&v| v != NONE_U16)
            .expect("in-page offsets and indexes are below 65535")
    })
}

fn none_or(value: u16) -> Option<usize> {
    (value != NONE_U16).then_some(usize::from(value))
}

fn link(raw: u64) -> Option<PageId> {
    (raw != NO_PAGE).then_some(PageId(raw))
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], &'static str> {
        if self.bytes.len() < len {
            return Err("rebuild recipe ends early");
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u64(&mut self) -> Result<u64, &'static str> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
}

/// Every store guard is a page the layout code can write: its writes are
/// recorded patches, and a rebuild carries its recipe, which a store that
/// logs may log instead of the bytes ([`PageWrite::write_rebuilt`]).
impl<G: PageWrite> PageMut for G {
    fn put(&mut self, offset: usize, bytes: &[u8]) {
        self.write(offset, bytes);
    }

    fn put_rebuilt(&mut self, image: &[u8], how: &Rebuild<'_>) {
        self.write_rebuilt(image, |old| {
            encode(old, how.layout, how.recs, how.group_records, how.order)
        });
    }
}

/// [`page::insert`], where `pr` is what [`page::probe`] answers for `rec`'s key (or
/// [`page::probe_in`], which answers the same): the guard may log the record
/// instead of the bytes, and redo inserts it the same way
/// ([`redo_insert`]).
pub fn insert_logged<G: PageWrite>(g: &mut G, pr: Probe, rec: RecRef<'_>) {
    g.write_logged(LogicalKind::Insert, &mut |g| {
        page::insert(g, pr, rec);
        encode_insert(rec)
    });
}

/// [`page::remove`] of the record `pr` found for `key` (as [`page::probe`] or
/// [`page::probe_in`] finds it), then [`page::set_flags`] to what `flags` answers for
/// the page after the removal: the guard may log the key and the flags
/// instead of the bytes, and redo makes the same change
/// ([`redo_delete`]).
pub(crate) fn remove_logged<G: PageWrite>(
    g: &mut G,
    pr: Probe,
    key: &[u8],
    flags: impl Fn(&[u8]) -> u16,
) -> u16 {
    let mut set = 0;
    g.write_logged(LogicalKind::Delete, &mut |g| {
        page::remove(g, pr);
        set = flags(g);
        page::set_flags(g, set);
        encode_delete(key, set)
    });
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::GROUP_RECORDS_BUILD;
    use proptest::prelude::*;

    const PAGE: usize = 16 * 1024;

    /// `old` with `patches` written, in order.
    fn patched(old: &[u8], patches: &[Patch]) -> Vec<u8> {
        let mut page = old.to_vec();
        for patch in patches {
            let at = patch.offset as usize;
            page[at..at + patch.bytes.len()].copy_from_slice(&patch.bytes);
        }
        page
    }

    /// A leaf (or internal page) of `count` records with keys `2i` (so
    /// odd keys are free for new records) and values of `value_len`
    /// bytes, in a heap order shuffled by `seed`.
    fn page_of(count: usize, value_len: usize, internal: bool, seed: u64) -> Vec<u8> {
        let recs: Vec<RecBuf> = (0..count)
            .map(|i| RecBuf {
                key: (2 * i as u32).to_be_bytes().to_vec(),
                flags: 0,
                value: vec![(i as u8).wrapping_mul(31); if internal { 8 } else { value_len }],
                old_offset: Some((i * 7919 + seed as usize) % 1000),
            })
            .collect();
        let layout = Layout {
            page_type: if internal {
                PageType::Internal
            } else {
                PageType::Leaf
            },
            level: u8::from(internal),
            flags: 0,
            left: Some(PageId(7)),
            right: None,
            last_insert: count.checked_sub(1),
            insert_flags: 0,
        };
        let mut old = vec![0u8; PAGE];
        old[..PAGE_HEADER_BYTES].fill(0xA5);
        page::build_image(&old, &layout, &recs, GROUP_RECORDS_BUILD, HeapOrder::Kept)
    }

    proptest! {
        /// Whatever a rebuild keeps, changes or adds, the recipe builds the
        /// same image from the old page, and names kept records by offset.
        #[test]
        fn a_recipe_rebuilds_the_image_it_describes(
            count in 1usize..60,
            value_len in 0usize..150,
            internal in any::<bool>(),
            seed in any::<u64>(),
            keep_from in 0usize..60,
            keep_len in 0usize..60,
            changed in proptest::collection::vec(any::<bool>(), 60),
            added in 0usize..4,
            group_records in 1usize..=GROUP_RECORDS_MAX,
            key_order in any::<bool>(),
            last in any::<bool>(),
        ) {
            let old = page_of(count, value_len, internal, seed);
            let all = page::read_all(&old);
            let start = keep_from.min(all.len());
            let mut recs: Vec<RecBuf> = all[start..(start + keep_len).min(all.len())].to_vec();
            for (rec, &change) in recs.iter_mut().zip(&changed) {
                if change {
                    // Same place, new value: carried whole.
                    rec.value.push(1);
                }
            }
            for i in 0..added.min(recs.len()) {
                let mut key = recs[i].key.clone();
                key.push(0xFF);
                recs.insert(i + 1, RecBuf { key, flags: 0, value: vec![9; 8], old_offset: None });
            }
            let mut layout = page::layout_of(&old);
            layout.right = Some(PageId(99));
            layout.last_insert = (last && !recs.is_empty()).then(|| recs.len() - 1);
            let order = if key_order { HeapOrder::Key } else { HeapOrder::Kept };
            let image = page::build_image(&old, &layout, &recs, group_records, order);
            let recipe = encode(&old, &layout, &recs, group_records, order).bytes;
            prop_assert_eq!(build(&old, &recipe), Ok(image.clone()));
            // Redo writes the runs that make the page that image.
            let patches = redo_rebuild(&old, &recipe).unwrap();
            prop_assert_eq!(&patched(&old, &patches)[PAGE_HEADER_BYTES..], &image[PAGE_HEADER_BYTES..]);
            // Records kept as they were cost three bytes each.
            if added == 0 && !changed.iter().take(recs.len()).any(|&c| c) {
                prop_assert_eq!(recipe.len(), HEADER_BYTES + 3 * recs.len());
            }
        }

        /// A recipe cut short or with any byte changed builds an image or
        /// fails with a reason: it never panics (redo reads it from disk).
        #[test]
        fn a_damaged_recipe_is_an_error_not_a_panic(
            count in 1usize..40,
            cut in 0usize..400,
            flip_at in 0usize..400,
            flip in 1u8..=255,
            junk in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let old = page_of(count, 100, false, 3);
            let recs = page::read_all(&old);
            let layout = page::layout_of(&old);
            let recipe = encode(&old, &layout, &recs, GROUP_RECORDS_BUILD, HeapOrder::Kept).bytes;
            let cut_recipe = &recipe[..cut.min(recipe.len().saturating_sub(1))];
            prop_assert!(build(&old, cut_recipe).is_err());
            let mut flipped = recipe.clone();
            let at = flip_at % flipped.len();
            flipped[at] ^= flip;
            let _ = build(&old, &flipped);
            let _ = build(&old, &junk);
            let mut extended = recipe;
            extended.extend_from_slice(&junk);
            prop_assert_eq!(build(&old, &extended).is_err(), !junk.is_empty());
        }
    }

    proptest! {
        /// Redo of a logged insert makes the insert's own writes, in order:
        /// the page they give holds the record where a search finds it.
        #[test]
        fn a_logged_insert_redoes_the_same_writes(
            count in 0usize..80,
            value_len in 0usize..150,
            internal in any::<bool>(),
            seed in any::<u64>(),
            at in 0usize..80,
            new_len in 0usize..200,
        ) {
            let old = page_of(count, value_len, internal, seed);
            // Odd keys are free: between two records, or past the last.
            let key = (2 * at as u32 + 1).to_be_bytes();
            let value = vec![0x5A; if internal { 8 } else { new_len }];
            let rec = RecRef { key: &key, flags: 0, value: &value };
            prop_assume!(page::has_room(&old, rec.len(), PAGE));
            let mut direct = PatchRecorder::new(PageId(0), &old);
            page::insert(&mut direct, page::probe(&old, &key), rec);
            let patches = redo_insert(&old, &encode_insert(rec)).unwrap();
            prop_assert_eq!(&patches, &direct.into_patches());
            let page = patched(&old, &patches);
            // (An internal page's first record keeps no key.)
            if !internal {
                let pr = page::probe(&page, &key);
                prop_assert_ne!(pr.found, 0);
                prop_assert_eq!(page::rec_value(&page, pr.found), value.as_slice());
            }
        }

        /// Redo of a logged delete makes the delete's own writes, in order.
        #[test]
        fn a_logged_delete_redoes_the_same_writes(
            count in 1usize..80,
            value_len in 0usize..150,
            seed in any::<u64>(),
            at in 0usize..80,
            flags in 0u16..2,
        ) {
            let old = page_of(count, value_len, false, seed);
            let key = (2 * (at % count) as u32).to_be_bytes();
            let mut direct = PatchRecorder::new(PageId(0), &old);
            page::remove(&mut direct, page::probe(&old, &key));
            page::set_flags(&mut direct, flags);
            let patches = redo_delete(&old, &encode_delete(&key, flags)).unwrap();
            prop_assert_eq!(&patches, &direct.into_patches());
            let page = patched(&old, &patches);
            prop_assert_eq!(page::probe(&page, &key).found, 0);
            prop_assert_eq!(page::record_count(&page), count - 1);
            // A second redo finds nothing to remove.
            prop_assert!(redo_delete(&page, &encode_delete(&key, flags)).is_err());
        }

        /// A logged insert that is damaged, of a key the page holds, or
        /// into a damaged page is an error, never a panic.
        #[test]
        fn a_damaged_insert_is_an_error_not_a_panic(
            count in 1usize..40,
            junk in proptest::collection::vec(any::<u8>(), 0..64),
            flips in proptest::collection::vec((0usize..PAGE, any::<u8>()), 0..8),
        ) {
            let old = page_of(count, 100, false, 5);
            let _ = redo_insert(&old, &junk);
            let held = page::read_all(&old)[0].clone();
            let again = encode_insert(held.borrowed());
            prop_assert_eq!(
                redo_insert(&old, &again),
                Err("logged insert of a key the page holds")
            );
            let fresh = encode_insert(RecRef { key: b"\x00\x00\x00\x01", flags: 0, value: b"v" });
            prop_assert!(redo_insert(&old, &fresh[..fresh.len() - 1]).is_err());
            let mut damaged = old.clone();
            for (at, byte) in flips {
                damaged[at] ^= byte;
            }
            let _ = redo_insert(&damaged, &fresh);
            let _ = redo_delete(&damaged, &encode_delete(&held.key, 0));
            let _ = redo_delete(&old, &junk);
        }
    }

    #[test]
    fn a_record_the_page_does_not_hold_there_is_carried_whole() {
        let old = page_of(10, 50, false, 1);
        let mut recs = page::read_all(&old);
        let layout = page::layout_of(&old);
        // Points at another record's offset: not what the page holds there.
        recs[0].old_offset = recs[1].old_offset;
        let recipe = encode(&old, &layout, &recs, GROUP_RECORDS_BUILD, HeapOrder::Kept).bytes;
        assert_eq!(
            recipe.len(),
            HEADER_BYTES + 3 * 9 + 1 + 2 + 1 + 2 + 2 + recs[0].key.len() + recs[0].value.len()
        );
        let image = page::build_image(&old, &layout, &recs, GROUP_RECORDS_BUILD, HeapOrder::Kept);
        assert_eq!(build(&old, &recipe), Ok(image));
    }

    #[test]
    fn a_recipe_is_made_from_its_page_only() {
        let old = page_of(10, 50, false, 1);
        let recs = page::read_all(&old);
        let layout = page::layout_of(&old);
        let recipe = encode(
            &old,
            &layout,
            &recs[1..],
            GROUP_RECORDS_BUILD,
            HeapOrder::Kept,
        );
        assert!(recipe.made_from(&old));
        let mut changed = old.clone();
        changed[PAGE_HEADER_BYTES + 20] ^= 1;
        assert!(!recipe.made_from(&changed));
    }

    #[test]
    fn a_recipe_that_overflows_its_page_is_refused() {
        let old = page_of(4, 50, false, 1);
        let layout = page::layout_of(&old);
        let big = RecBuf {
            key: vec![1; 500],
            flags: 0,
            value: vec![2; 2000],
            old_offset: None,
        };
        let recs = vec![big; 8];
        let recipe = encode(&old, &layout, &recs, GROUP_RECORDS_BUILD, HeapOrder::Key);
        assert_eq!(
            build(&old, &recipe.bytes),
            Err("rebuild recipe overflows its page")
        );
    }
}
