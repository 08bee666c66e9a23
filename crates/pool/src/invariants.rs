//! `check_invariants()`: every rule of the pool, checked in one pass.

use std::collections::HashMap;

use crate::arena::{ChunkUse, NIL};
use crate::cache::{Cache, Inner};
use crate::desc::State;
use crate::policy::PolicyState;

/// Checks every invariant of the pool and panics on the first broken one
/// ([`crate::BufferPool::check_invariants`]).
pub(crate) fn check(cache: &Cache) {
    let inner = cache.inner.lock();
    inner.alloc.check_invariants();
    inner.lru.check_invariants(&cache.old_flags);
    inner.unzip.check_invariants("unzip_LRU");
    inner.flush.check_invariants("flush list");

    // The unzip_LRU holds only pages of the LRU (which of them have a
    // frame is checked per page below); its order is InnoDB's, which
    // follows the LRU's only approximately (`unzip_insert`).
    let lru: Vec<u32> = inner.lru.list().iter().collect();
    for d in inner.unzip.iter() {
        assert!(
            inner.lru.list().contains(d),
            "descriptor {d} is on the unzip_LRU but not on the LRU"
        );
    }

    let table: HashMap<_, _> = cache.table.entries().into_iter().collect();
    for &d in &lru {
        check_cached(cache, &inner, d, &table);
    }
    let reading = table.len() - lru.len();
    assert_eq!(
        reading as u32, inner.reading_count,
        "page table entries not on the LRU"
    );

    // Dirty pages are on the flush list, ordered by oldest modification.
    let mut previous = None;
    for d in inner.flush.iter() {
        let dirty = inner.dirty[d as usize];
        assert!(
            dirty.dirty && inner.lru.list().contains(d),
            "flush list page {d} not dirty or cached"
        );
        assert!(dirty.oldest <= dirty.newest);
        if let Some(previous) = previous {
            assert!(previous >= dirty.oldest, "flush list out of LSN order");
        }
        previous = Some(dirty.oldest);
    }

    // The budget.
    let (frames, blocks) = inner.alloc.usage();
    let used_bytes = frames as usize * cache.page_size_bytes
        + if cache.compressed {
            blocks as usize * cache.unit_size_bytes
        } else {
            0
        };
    assert!(
        used_bytes <= cache.config.buffer_pool_bytes,
        "{used_bytes} bytes used, over the budget"
    );
    assert!(cache.budget_bytes() <= cache.config.buffer_pool_bytes);
    let _ = PolicyState::floor_len(0);
}

/// Checks one page on the LRU.
fn check_cached(
    cache: &Cache,
    inner: &Inner,
    d: u32,
    table: &HashMap<barracuda_base::PageId, u32>,
) {
    let desc = &cache.descs[d as usize];
    let page_id = desc.page_id();
    assert_eq!(
        table.get(&page_id),
        Some(&d),
        "{page_id} on the LRU but not in the page table"
    );
    let state = desc.state();
    let chunk = desc.frame_chunk();
    let slot = desc.block_slot();
    if cache.compressed {
        // Never uncompressed-only, except a clean page the cost-aware
        // policy keeps as its frame alone (the file holds its block).
        assert!(
            matches!(state, State::Compressed | State::Both | State::FrameOnly),
            "{page_id} in state {state:?}"
        );
        if state == State::FrameOnly {
            let dirty = inner.dirty[d as usize];
            assert!(
                !dirty.dirty && !dirty.writing,
                "{page_id} is dirty without its block"
            );
            assert_eq!(slot, NIL, "{page_id} frame-only with a block");
        } else {
            assert_ne!(slot, NIL, "{page_id} cached without a block");
            assert_eq!(
                inner.slot_owner[slot as usize], d,
                "slot owner of {page_id}"
            );
        }
        let framed = matches!(state, State::Both | State::FrameOnly);
        assert_eq!(
            framed,
            inner.unzip.contains(d),
            "{page_id}: frame vs unzip_LRU"
        );
        assert_eq!(framed, chunk != NIL, "{page_id}: frame vs state");
    } else {
        assert_eq!(state, State::Frame, "{page_id} in state {state:?}");
        assert!(!inner.unzip.contains(d));
    }
    if chunk != NIL {
        assert_eq!(
            inner.alloc.chunk_use(chunk),
            ChunkUse::Frame,
            "frame chunk of {page_id}"
        );
        assert_eq!(
            inner.chunk_owner[chunk as usize], d,
            "chunk owner of {page_id}"
        );
    }
    assert_eq!(
        inner.dirty[d as usize].dirty,
        inner.flush.contains(d),
        "{page_id}: dirty vs flush list"
    );
}
