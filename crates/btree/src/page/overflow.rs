//! Overflow pages: one link of a long value's chain, its header and its
//! payload.

use super::*;
use barracuda_base::PageId;

/// Initializes an overflow page with `payload` (at most
/// [`overflow_payload_bytes_max`] bytes) and a next link.
pub(crate) fn write_overflow<G: PageMut>(g: &mut G, payload: &[u8], next: Option<PageId>) {
    let head = overflow_header(g.len(), payload, next);
    g.put(CODEC_RESERVED_BYTES, &head[CODEC_RESERVED_BYTES..]);
    g.put(PAGE_HEADER_BYTES, payload);
}

/// The image [`write_overflow`] gives a zeroed page of `page_size_bytes`
/// (the codec's reserved bytes zero).
pub(crate) fn overflow_image(
    page_size_bytes: usize,
    payload: &[u8],
    next: Option<PageId>,
) -> Vec<u8> {
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
pub(crate) fn overflow_payload(p: &[u8]) -> &[u8] {
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
