//! Page builders: a whole page image built from its records and a layout,
//! as rebuilds, compactions and splits make them.

use super::*;
use barracuda_base::PageId;

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
pub fn rebuild<G: PageMut>(g: &mut G, layout: &Layout, recs: &[RecBuf], order: HeapOrder) {
    let image = build_image(&g[..], layout, recs, GROUP_RECORDS_BUILD, order);
    g.put_rebuilt(
        &image,
        &Rebuild {
            layout,
            recs,
            group_records: GROUP_RECORDS_BUILD,
            order,
        },
    );
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
pub fn compact<G: PageMut>(g: &mut G, layout: &Layout, recs: &[RecBuf], order: HeapOrder) {
    let image = build_image(&g[..], layout, recs, GROUP_RECORDS_MAX, order);
    g.put_rebuilt(
        &image,
        &Rebuild {
            layout,
            recs,
            group_records: GROUP_RECORDS_MAX,
            order,
        },
    );
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
pub(super) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
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
pub(crate) fn layout_of(p: &[u8]) -> Layout {
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
