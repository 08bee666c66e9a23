//! One page's own structure, checked from its bytes alone: the record
//! list, the heap accounting and the directory. Debug builds check every
//! page a commit writes; the tree's invariant checker checks every page.

use super::*;
use barracuda_base::PageId;

/// The error of a broken invariant on page `page_id`.
pub(crate) fn violation(page_id: PageId, reason: impl Into<String>) -> Error {
    Error::Invariant {
        page_id,
        reason: reason.into(),
    }
}

/// Checks one page's own structure: record list, heap accounting, directory.
pub(crate) fn check_structure(p: &[u8], id: PageId) -> Result<()> {
    let n = record_count(p);
    let top = heap_top(p);
    if top < PAGE_HEADER_BYTES || top > directory_start(p) {
        return Err(violation(
            id,
            format!("heap top {top} outside the free area"),
        ));
    }
    let mut offs = Vec::with_capacity(n);
    let mut live_bytes = 0;
    let mut cur = first_record(p);
    while cur != 0 {
        if offs.len() == n || cur < PAGE_HEADER_BYTES || cur + RECORD_HEADER_BYTES > top {
            return Err(violation(
                id,
                "record list longer than the count or out of the heap",
            ));
        }
        let len = rec_len(p, cur);
        if cur + len > top {
            return Err(violation(
                id,
                format!("record at {cur} runs past the heap top"),
            ));
        }
        live_bytes += len;
        offs.push(cur);
        cur = rec_next(p, cur);
    }
    if offs.len() != n {
        return Err(violation(
            id,
            format!("{} records listed, {n} counted", offs.len()),
        ));
    }
    if live_bytes + garbage_bytes(p) + PAGE_HEADER_BYTES != top {
        return Err(violation(
            id,
            "live + garbage bytes do not add up to the heap top",
        ));
    }
    let mut at = 0;
    for s in 0..slot_count(p) {
        let (first, count) = slot(p, s);
        if count == 0 || count > GROUP_RECORDS_MAX || offs.get(at) != Some(&first) {
            return Err(violation(id, format!("directory slot {s} is wrong")));
        }
        at += count;
    }
    if at != n {
        return Err(violation(
            id,
            format!("directory covers {at} of {n} records"),
        ));
    }
    Ok(())
}
