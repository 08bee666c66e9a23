//! Page mutators: in-place changes of one page (header fields, an insert,
//! a removal, a value overwritten), written through a [`PageMut`].

use super::*;
use barracuda_base::PageId;

fn write16<G: PageMut>(g: &mut G, off: usize, v: usize) {
    g.put(off, &field16(v).to_le_bytes());
}

/// Sets the page flags.
pub fn set_flags<G: PageMut>(g: &mut G, value: u16) {
    if flags(g) != value {
        write16(g, H_FLAGS, usize::from(value));
    }
}
/// Sets the left sibling.
pub(crate) fn set_left<G: PageMut>(g: &mut G, id: Option<PageId>) {
    g.put(H_LEFT, &raw_link(id).to_le_bytes());
}
/// Sets the right sibling (or overflow next link).
pub fn set_right<G: PageMut>(g: &mut G, id: Option<PageId>) {
    g.put(H_RIGHT, &raw_link(id).to_le_bytes());
}

/// True if a record of `len` bytes can be inserted within `limit_bytes` of
/// used space, possibly after compacting garbage.
pub fn has_room(p: &[u8], len: usize, limit_bytes: usize) -> bool {
    // Two slots: a group split may add one after the record takes its place.
    used_bytes(p) + len + 2 * SLOT_BYTES <= limit_bytes.min(p.len())
}

/// Compacts the heap if the contiguous free space is too small for `len`;
/// true if it did.
fn make_room<G: PageMut>(g: &mut G, len: usize) -> bool {
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

/// Inserts `rec` at the point `pr` found (which must be a miss). The caller
/// checked [`has_room`]. Returns the new record's offset.
pub fn insert<G: PageMut>(g: &mut G, pr: Probe, rec: RecRef<'_>) -> usize {
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
        g.put(off, buf);
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
        g.put(H_INSERT_FLAGS, &[iflags]);
    }
    off
}

fn add_to_group<G: PageMut>(g: &mut G, pr: Probe, off: usize) {
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
fn write_slots<G: PageMut>(g: &mut G, s: usize, new: &[(usize, usize)], old_count: usize) {
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
            g.put(low, buf);
        });
    }
    if new_n != n {
        write16(g, H_SLOT_COUNT, new_n);
    }
}

/// Removes the record `pr.found`. Returns its length.
pub fn remove<G: PageMut>(g: &mut G, pr: Probe) -> usize {
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
        g.put(H_INSERT_FLAGS, &[0]);
    }
    // Merges only ever remove the right one of two children, so the first
    // record of an internal page (minus infinity) is never removed.
    debug_assert!(
        !internal || pr.pred != 0,
        "removing an internal page's first record"
    );
    len
}

fn merge_small_group<G: PageMut>(g: &mut G, s: usize) {
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
pub(crate) fn overwrite_value<G: PageMut>(g: &mut G, off: usize, flags: u8, value: &[u8]) {
    let klen = u16_at(g, off + 2);
    debug_assert_eq!(u16_at(g, off + 4), value.len());
    if rec_flags(g, off) != flags {
        g.put(off + 6, &[flags]);
    }
    g.put(off + RECORD_HEADER_BYTES + klen, value);
}
