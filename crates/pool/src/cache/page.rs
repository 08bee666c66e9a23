//! A page's way through the cache: claimed for a read, published on the
//! LRU (and unzip_LRU), made young, marked dirty, or given up when its read
//! fails.

use std::sync::atomic::Ordering;

use barracuda_base::PageId;

use crate::arena::NIL;
use crate::desc::{Dirty, LatchGuard, State};

use super::{Cache, Inner, PageMemory};

impl Cache {
    /// Registers memory for `page_id` in the page table, pinned and
    /// exclusively latched by the caller (the returned latch), in state
    /// `Reading`. `None` if the page is already there.
    pub(crate) fn claim(
        &self,
        inner: &mut Inner,
        page_id: PageId,
        memory: PageMemory,
    ) -> Option<LatchGuard<'_>> {
        self.claim_as(inner, page_id, memory, State::Reading)
    }

    /// As [`Cache::claim`], in `state` (`Reading` or `ReadAhead`).
    pub(crate) fn claim_as(
        &self,
        inner: &mut Inner,
        page_id: PageId,
        memory: PageMemory,
        state: State,
    ) -> Option<LatchGuard<'_>> {
        let mut shard = self.table.lock(page_id);
        if shard.contains_key(&page_id) {
            return None;
        }
        let d = memory.desc;
        let desc = &self.descs[d as usize];
        assert_eq!(desc.pins(), 0, "free descriptor {d} is pinned");
        let Some(latch) = desc.try_latch_exclusive() else {
            panic!("free descriptor {d} is latched");
        };
        desc.pin();
        desc.set_page_id(page_id);
        desc.set_state(state);
        desc.in_os_cache.store(false, Ordering::Relaxed);
        desc.set_frame_chunk(memory.frame_chunk);
        desc.set_block_slot(memory.block_slot);
        if memory.frame_chunk != NIL {
            inner.chunk_owner[memory.frame_chunk as usize] = d;
        }
        if memory.block_slot != NIL {
            inner.slot_owner[memory.block_slot as usize] = d;
        }
        inner.dirty[d as usize] = Dirty::default();
        shard.insert(page_id, d);
        Some(latch)
    }

    /// Publishes a page whose frame (and block) hold its contents: LRU
    /// (midpoint, or head when `young`), unzip_LRU.
    pub(crate) fn publish(&self, inner: &mut Inner, memory: PageMemory, young: bool) {
        let placement = if young {
            Placement::Young
        } else {
            Placement::Midpoint
        };
        self.publish_at(inner, memory, placement);
    }

    /// Publishes a page read from the device with the OS cache tier on: at
    /// the LRU tail, so that the pool evicts it first while the OS page
    /// cache keeps it; a hit in either makes the pool keep it (2Q's A1in).
    pub(crate) fn publish_on_probation(&self, inner: &mut Inner, memory: PageMemory) {
        self.descs[memory.desc as usize]
            .in_os_cache
            .store(true, Ordering::Relaxed);
        self.publish_at(inner, memory, Placement::Tail);
    }

    fn publish_at(&self, inner: &mut Inner, memory: PageMemory, placement: Placement) {
        self.descs[memory.desc as usize]
            .prefetched
            .store(false, Ordering::Relaxed);
        let d = memory.desc;
        let desc = &self.descs[d as usize];
        match placement {
            Placement::Young => {
                inner.lru.insert_new(d, &self.old_flags);
                inner.lru.make_young(d, &self.old_flags);
            }
            Placement::Midpoint => inner.lru.insert_new(d, &self.old_flags),
            Placement::Tail => inner.lru.insert_tail(d, &self.old_flags),
        }
        self.lru_len
            .store(inner.lru.list().len(), Ordering::Relaxed);
        desc.young_clock
            .store(self.evict_clock.load(Ordering::Relaxed), Ordering::Relaxed);
        desc.first_access_ms.store(self.now_ms(), Ordering::Relaxed);
        if self.compressed {
            desc.set_state(State::Both);
            self.unzip_insert(inner, d);
        } else {
            desc.set_state(State::Frame);
        }
    }

    pub(crate) fn make_young(&self, inner: &mut Inner, d: u32) {
        if !inner.lru.list().contains(d) {
            return;
        }
        inner.lru.make_young(d, &self.old_flags);
        if inner.unzip.contains(d) {
            inner.unzip.remove(d);
            inner.unzip.insert_after(NIL, d);
        }
        self.descs[d as usize]
            .young_clock
            .store(self.evict_clock.load(Ordering::Relaxed), Ordering::Relaxed);
        self.counters.made_young.fetch_add(1, Ordering::Relaxed);
    }

    /// Puts `d`, which just got a frame, on the unzip_LRU as InnoDB's
    /// `buf_unzip_LRU_add_block` does: at the tail if the page is in the
    /// LRU's old sublist (its frame is the first to go unless the page is
    /// made young), else at the head. O(1): keeping the unzip_LRU in the
    /// LRU's exact order meant walking the LRU back to the nearest framed
    /// page, thousands of steps under the pool mutex when frames are few and
    /// young (a fifth of the CPU of a larger-than-memory read workload).
    pub(crate) fn unzip_insert(&self, inner: &mut Inner, d: u32) {
        if self.old_flags.get(d) {
            inner.unzip.insert_before(NIL, d);
        } else {
            inner.unzip.insert_after(NIL, d);
        }
    }

    /// Undoes a claimed read, leaving the descriptor in `state` (`Failed`
    /// or `Abandoned`) for its waiters, then unlatches and unpins it.
    /// `latch` is the exclusive latch `claim` took (for a read-ahead: on its
    /// behalf, taken over by the caller, who installs its completion).
    pub(crate) fn abort_claim(
        &self,
        page_id: PageId,
        memory: PageMemory,
        state: State,
        latch: LatchGuard<'_>,
    ) {
        let d = memory.desc;
        let desc = &self.descs[d as usize];
        let mut inner = self.inner.lock();
        inner.reading_count -= 1;
        self.table.lock(page_id).remove(&page_id);
        if memory.frame_chunk != NIL {
            inner.alloc.free_frame(memory.frame_chunk);
            inner.chunk_owner[memory.frame_chunk as usize] = NIL;
        }
        if memory.block_slot != NIL {
            inner.alloc.free_slot(memory.block_slot);
            inner.slot_owner[memory.block_slot as usize] = NIL;
        }
        desc.set_frame_chunk(NIL);
        desc.set_block_slot(NIL);
        desc.set_state(state);
        inner.zombies.push(d);
        drop(inner);
        drop(latch);
        desc.unpin();
    }
}

/// Where a page enters the LRU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// Head of the young sublist (a page just created).
    Young,
    /// Head of the old sublist (InnoDB's midpoint insertion).
    Midpoint,
    /// Tail: evicted first (on probation with the OS cache tier).
    Tail,
}
