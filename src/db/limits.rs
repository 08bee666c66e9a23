//! What one write may need of the log and of the pool, bounded before it
//! changes anything: a write whose worst case exceeds a log group or half
//! its tree's pool is refused up front ([`Error::WriteTooLarge`]), and a
//! batch is cut to what both hold.

use barracuda_btree::{KEY_BYTES_MAX, VALUE_BYTES_MAX};

use super::{DbInner, TreeInner};
use crate::error::{Error, Result};

/// Rejects keys and values the tree cannot take, and writes the log could
/// not hold in one group, before anything changes.
pub(crate) fn check_entry(
    db: &DbInner,
    tree: &TreeInner,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<usize> {
    if key.len() > KEY_BYTES_MAX {
        return Err(barracuda_btree::Error::KeyTooLong {
            len_bytes: key.len(),
            max_bytes: KEY_BYTES_MAX,
        }
        .into());
    }
    let value_len = value.map_or(0, <[u8]>::len);
    if value_len > VALUE_BYTES_MAX {
        return Err(barracuda_btree::Error::ValueTooLong {
            len_bytes: value_len,
            max_bytes: VALUE_BYTES_MAX,
        }
        .into());
    }
    let estimated = worst_case_log_bytes(tree, key.len(), value_len);
    let with_group = estimated + BATCH_IMAGES_MORE * image_bytes(tree);
    let limit = db.group_bytes_max();
    if with_group > limit {
        return Err(log_too_small(value_len, 0, with_group, limit));
    }
    Ok(estimated)
}

/// The refusal of a write whose worst case exceeds one log group.
fn log_too_small(value_bytes: usize, old_value_bytes: usize, needed: usize, limit: usize) -> Error {
    Error::WriteTooLarge {
        value_bytes,
        old_value_bytes,
        needed_bytes: needed,
        limit_bytes: limit,
        resource: "log",
        option: "Options::log_bytes (one write may take a quarter of it, at most 16 MiB)",
    }
}

/// [`check_entry`] for a single put (`value`) or delete (`None`), which
/// also frees the overflow pages of the value it replaces: that value's
/// freed pages must fit in the same log group, and every page the write
/// changes stays in the tree's pool until the write is logged, so they
/// must fit in half of it (as a batch's). Refused up front with
/// [`Error::WriteTooLarge`], so that a write too large for the options
/// changes nothing. The replaced value's length is looked up only when the
/// largest one would not fit.
pub(crate) fn check_write(
    db: &DbInner,
    tree: &TreeInner,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<()> {
    let estimated = check_entry(db, tree, key, value)?;
    let value_len = value.map_or(0, <[u8]>::len);
    let limit_log = db.group_bytes_max();
    let limit_pool = tree.pool().budget_bytes() / 2;
    let needs = |old_len: usize| {
        let old_pages = overflow_pages(tree, old_len);
        let log =
            estimated + BATCH_IMAGES_MORE * image_bytes(tree) + old_pages * FREED_PAGE_LOG_BYTES;
        let chain_pages = overflow_pages(tree, value_len) + old_pages;
        let pool = (PAGES_PER_OPERATION + BATCH_IMAGES_MORE) * cached_page_bytes(tree)
            + chain_pages * chain_page_pool_bytes(tree);
        (log, pool)
    };
    let (log, pool) = needs(VALUE_BYTES_MAX);
    if log <= limit_log && pool <= limit_pool {
        return Ok(());
    }
    let old_len = tree.tree.value_len(key)?.unwrap_or(0);
    let (log, pool) = needs(old_len);
    if log > limit_log {
        return Err(log_too_small(value_len, old_len, log, limit_log));
    }
    if pool > limit_pool {
        return Err(Error::WriteTooLarge {
            value_bytes: value_len,
            old_value_bytes: old_len,
            needed_bytes: pool,
            limit_bytes: limit_pool,
            resource: "buffer pool",
            option: "Options::buffer_pool_bytes (one write may take half of it)",
        });
    }
    Ok(())
}

/// Log bytes one freed overflow page may add: its zeroed body as a
/// zero-fill patch (or, if it was never written to the data file, its
/// image, which is all zeros but a header and compresses to a few bytes),
/// and the meta page's free-list patch.
pub(crate) const FREED_PAGE_LOG_BYTES: usize = 256;

/// Overflow pages a value of `value_len` bytes may take in `tree`: none if
/// it is stored inline; else its length over the least payload a page
/// holds ([`overflow_payload_floor_bytes`]).
pub(crate) fn overflow_pages(tree: &TreeInner, value_len: usize) -> usize {
    let page = tree.entry.page_size_bytes;
    if value_len <= barracuda_btree::page::value_inline_bytes_max(page) {
        return 0;
    }
    value_len.div_ceil(overflow_payload_floor_bytes(tree))
}

/// The least value bytes an overflow page of `tree` holds (but the
/// chain's last): uncompressed, the page body; compressed, what fits the
/// block's room for its image (the block less its 40-byte header and its
/// modification-log reserve). The tree fills that room to within 1/128
/// with bytes that do not compress (the least compressible), which the
/// codecs store with a few dozen bytes of framing; 15/16 of it leaves that
/// margin.
fn overflow_payload_floor_bytes(tree: &TreeInner) -> usize {
    let page = tree.entry.page_size_bytes;
    let body = barracuda_btree::page::overflow_payload_bytes_max(page);
    let block = block_bytes(tree);
    if block >= page {
        return body;
    }
    let room = barracuda_mtr::image_room_bytes(block);
    body.min(room * 15 / 16)
}

/// Log bytes one put or delete adds at most to its group: images of the
/// pages it may change (its leaf, and for a split or merge a sibling and
/// the parent) plus the entry twice (as patches and inside an image).
/// [`BATCH_IMAGES_MORE`] more images cover the deeper levels and the store's
/// meta page once per group.
///
/// A value in overflow pages is logged once, in those pages: each page as
/// its block image or as patches of its payload, whichever is larger, so
/// at most `image / floor` times its payload and patch headers (a page
/// holds at least the floor, [`overflow_payload_floor_bytes`]), plus one
/// image for the chain's last, short page.
pub(crate) fn worst_case_log_bytes(
    tree: &TreeInner,
    key_bytes: usize,
    value_bytes: usize,
) -> usize {
    let pages = overflow_pages(tree, value_bytes);
    let base = PAGES_PER_OPERATION * image_bytes(tree) + PATCH_OVERHEAD_BYTES;
    if pages == 0 {
        return base + 2 * (key_bytes + value_bytes);
    }
    let payload = value_bytes + pages * CHAIN_PAGE_PATCH_BYTES;
    let chain = (image_bytes(tree) * payload).div_ceil(overflow_payload_floor_bytes(tree));
    base + 2 * (key_bytes + barracuda_btree::page::OVERFLOW_REF_BYTES) + chain + image_bytes(tree)
}

/// Log bytes of an overflow page's patches besides its payload: the
/// entry's and the patches' headers and the page header.
const CHAIN_PAGE_PATCH_BYTES: usize = 128;

/// Pages one put or delete may change below the parent level: the leaf, a
/// sibling, the parent.
pub(crate) const PAGES_PER_OPERATION: usize = 3;

/// Images one group may need beyond those counted per operation: the
/// levels above the parent and the meta page.
pub(crate) const BATCH_IMAGES_MORE: usize = 8;

/// Log bytes of patch and entry headers per operation (generous).
const PATCH_OVERHEAD_BYTES: usize = 256;

/// The most log bytes of one page image: the block size and the entry's
/// headers (an image leaves out runs of zeros, so most take less).
pub(crate) fn image_bytes(tree: &TreeInner) -> usize {
    block_bytes(tree) + crate::wal::IMAGE_OVERHEAD_BYTES_MAX
}

/// Bytes of a page's block: the compressed block, or the page when
/// uncompressed.
fn block_bytes(tree: &TreeInner) -> usize {
    let page = tree.entry.page_size_bytes;
    tree.entry
        .options()
        .effective_block_size()
        .compressed_bytes()
        .unwrap_or(page)
}

/// Pool bytes `ops` operations of one batch on `tree` may keep pinned until
/// the batch is logged (three pages per operation, each a frame and a
/// block, the upper levels, and `chain_pages` overflow pages of long
/// values), and the limit: half the pool.
pub(crate) fn batch_pinned_bytes(
    tree: &TreeInner,
    ops: usize,
    chain_pages: usize,
) -> (usize, usize) {
    let pages = ops * PAGES_PER_OPERATION + BATCH_IMAGES_MORE;
    (
        pages * cached_page_bytes(tree) + chain_pages * chain_page_pool_bytes(tree),
        tree.pool().budget_bytes() / 2,
    )
}

/// Pool bytes one new or freed overflow page keeps until its write is
/// logged. Its guard is released at once, so a compressed page's frame
/// can be dropped and only its block stays (dirty), but the pool keeps
/// frames for at least a tenth of its pages (the unzip LRU's floor): a
/// block and an eighth of a frame. Uncompressed, as any page.
fn chain_page_pool_bytes(tree: &TreeInner) -> usize {
    let page = tree.pool().config().page_size_bytes;
    let block = block_bytes(tree);
    if block >= page {
        cached_page_bytes(tree)
    } else {
        block + page / 8
    }
}

/// The most operations one batch on `tree` may hold by
/// [`batch_pinned_bytes`]'s bound.
pub(crate) fn batch_ops_by_pool(tree: &TreeInner) -> usize {
    let (_, limit) = batch_pinned_bytes(tree, 0, 0);
    (limit / cached_page_bytes(tree)).saturating_sub(BATCH_IMAGES_MORE) / PAGES_PER_OPERATION
}

/// Pool bytes of one cached page: its frame and its block.
fn cached_page_bytes(tree: &TreeInner) -> usize {
    tree.pool().config().page_size_bytes + block_bytes(tree)
}
