//! Finding memory: free descriptors, frames and block slots, by compaction
//! and eviction under the pool's policy (InnoDB's `buf_LRU_get_free_block`
//! and `buf_buddy_relocate`). All of it runs under the pool mutex; none of
//! it waits for a latch.

use std::sync::atomic::Ordering;

use crate::arena::NIL;
use crate::desc::State;
use crate::policy::{PolicyState, Victim};

use super::{AllocError, Cache, Inner, PageMemory};

/// How many framed pages from the unzip_LRU's tail a search for a block to
/// drop looks at: clean pages with both copies gather there while frames
/// alone fit, so a longer search would only hold the mutex longer.
const BLOCK_DROP_SCAN_MAX: u32 = 64;
impl Cache {
    /// Memory for a page being read or created.
    pub(crate) fn alloc_page_memory(&self, inner: &mut Inner) -> Result<PageMemory, AllocError> {
        let desc = self.alloc_desc(inner)?;
        let frame_chunk = match self.alloc_frame(inner, NIL) {
            Ok(chunk) => chunk,
            Err(e) => {
                inner.free_descs.push(desc);
                return Err(e);
            }
        };
        let block_slot = if self.compressed {
            match self.alloc_slot(inner) {
                Ok(slot) => slot,
                Err(e) => {
                    inner.alloc.free_frame(frame_chunk);
                    inner.free_descs.push(desc);
                    return Err(e);
                }
            }
        } else {
            NIL
        };
        Ok(PageMemory {
            desc,
            frame_chunk,
            block_slot,
        })
    }

    /// Returns memory that was never published.
    pub(crate) fn free_page_memory(&self, inner: &mut Inner, memory: PageMemory) {
        if memory.frame_chunk != NIL {
            inner.alloc.free_frame(memory.frame_chunk);
        }
        if memory.block_slot != NIL {
            inner.alloc.free_slot(memory.block_slot);
        }
        inner.free_descs.push(memory.desc);
    }

    pub(crate) fn alloc_desc(&self, inner: &mut Inner) -> Result<u32, AllocError> {
        loop {
            if let Some(d) = inner.free_descs.pop() {
                return Ok(d);
            }
            let mut i = 0;
            while i < inner.zombies.len() {
                let d = inner.zombies[i];
                if self.descs[d as usize].pins() == 0 {
                    inner.zombies.swap_remove(i);
                    self.descs[d as usize].set_state(State::Free);
                    inner.free_descs.push(d);
                } else {
                    i += 1;
                }
            }
            if !inner.free_descs.is_empty() {
                continue;
            }
            self.evict_tail_page(inner)?;
        }
    }

    /// A free chunk for a frame. `own` is the page the caller holds pinned
    /// and exclusively latched (or `NIL`): its block may be moved by
    /// compaction, because the caller reads its block slot afterwards.
    pub(crate) fn alloc_frame(&self, inner: &mut Inner, own: u32) -> Result<u32, AllocError> {
        loop {
            if let Some(chunk) = inner.alloc.alloc_frame() {
                self.arena.chunk_taken(chunk);
                return Ok(chunk);
            }
            if inner.alloc.free_slot_count() >= inner.alloc.slots_per_chunk()
                && self.compact(inner, own)
            {
                continue;
            }
            self.evict_one(inner)?;
        }
    }

    pub(crate) fn alloc_slot(&self, inner: &mut Inner) -> Result<u32, AllocError> {
        loop {
            if let Some(slot) = inner.alloc.alloc_slot() {
                self.arena.chunk_taken(slot / inner.alloc.slots_per_chunk());
                return Ok(slot);
            }
            self.evict_one(inner)?;
        }
    }

    /// Frees memory by one step of the eviction policy.
    fn evict_one(&self, inner: &mut Inner) -> Result<(), AllocError> {
        let lru_len = inner.lru.list().len();
        // Room for one more page, the one the memory is for.
        let frames_only = self.compressed
            && inner
                .policy
                .frames_only(self.frames_fit(lru_len + 1), self.now_ms());
        if frames_only && self.drop_tail_block(inner) {
            return Ok(());
        }
        let victim = if frames_only {
            Victim::Page
        } else {
            inner.policy.choose(
                lru_len,
                inner.unzip.len(),
                self.evict_clock.load(Ordering::Relaxed) != 0,
                &inner.stats,
            )
        };
        if victim == Victim::Frame && self.drop_tail_frame(inner) {
            return Ok(());
        }
        self.evict_tail_page(inner)
    }

    /// Whether `page_count` pages would fit the budget as frames alone.
    fn frames_fit(&self, page_count: u32) -> bool {
        page_count <= self.chunk_count()
    }

    /// Drops the block of page `d`, which the caller holds pinned and
    /// exclusively latched, if it is clean and the policy keeps frames
    /// alone now.
    pub(crate) fn shed_block_if_frames_only(&self, inner: &mut Inner, d: u32) {
        let frames_fit = self.frames_fit(inner.lru.list().len());
        if inner.policy.frames_only(frames_fit, self.now_ms()) && !inner.dirty[d as usize].dirty {
            self.shed_block(inner, d);
        }
    }

    /// Frees the block of a clean page with a frame, which nobody else can
    /// reach (pinned and latched by the caller, or unpinned under its shard
    /// lock): it becomes `FrameOnly`.
    fn shed_block(&self, inner: &mut Inner, d: u32) {
        let desc = &self.descs[d as usize];
        debug_assert_eq!(desc.state(), State::Both);
        debug_assert!(!inner.dirty[d as usize].dirty && !inner.dirty[d as usize].writing);
        let slot = desc.block_slot();
        desc.set_block_slot(NIL);
        desc.set_state(State::FrameOnly);
        inner.alloc.free_slot(slot);
        inner.slot_owner[slot as usize] = NIL;
        self.counters.blocks_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops the block of the least recent unpinned clean page that has a
    /// frame, looking at most [`BLOCK_DROP_SCAN_MAX`] pages from the
    /// unzip_LRU's tail.
    fn drop_tail_block(&self, inner: &mut Inner) -> bool {
        let mut d = inner.unzip.tail();
        let mut scanned = 0;
        while d != NIL && scanned < BLOCK_DROP_SCAN_MAX {
            let dirty = inner.dirty[d as usize];
            let desc = &self.descs[d as usize];
            if !dirty.dirty && !dirty.writing && desc.state() == State::Both {
                let shard = self.table.lock(desc.page_id());
                if desc.pins() == 0 {
                    self.shed_block(inner, d);
                    drop(shard);
                    return true;
                }
            }
            scanned += 1;
            d = inner.unzip.prev(d);
        }
        false
    }

    /// Drops the frame of the least recent unpinned page of the unzip_LRU
    /// (a page kept as its frame alone is evicted whole).
    fn drop_tail_frame(&self, inner: &mut Inner) -> bool {
        let mut d = inner.unzip.tail();
        while d != NIL {
            if self.try_drop_frame(inner, d) {
                return true;
            }
            d = inner.unzip.prev(d);
        }
        false
    }

    pub(crate) fn try_drop_frame(&self, inner: &mut Inner, d: u32) -> bool {
        // Rule 4 of the design: the unzip_LRU never falls below 10% of the LRU.
        assert!(
            inner.unzip.len() > PolicyState::floor_len(inner.lru.list().len()),
            "frame drop below the unzip_LRU floor"
        );
        let desc = &self.descs[d as usize];
        if desc.state() == State::FrameOnly {
            // No block to fall back to: the frame goes with the page.
            return !inner.dirty[d as usize].dirty && self.try_evict_page(inner, d);
        }
        let page_id = desc.page_id();
        let shard = self.table.lock(page_id);
        if desc.pins() != 0 {
            return false;
        }
        let chunk = desc.frame_chunk();
        desc.set_frame_chunk(NIL);
        desc.set_state(State::Compressed);
        drop(shard);
        inner.unzip.remove(d);
        inner.alloc.free_frame(chunk);
        inner.chunk_owner[chunk as usize] = NIL;
        inner.policy.frame_dropped(page_id);
        self.counters.frames_dropped.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Evicts the least recent unpinned clean page; failing that, drops a
    /// frame (above the floor) or asks for a dirty victim to be written.
    fn evict_tail_page(&self, inner: &mut Inner) -> Result<(), AllocError> {
        let durable = self.services.durable_lsn.durable_lsn();
        let mut dirty_victim = NIL;
        let mut d = inner.lru.list().tail();
        while d != NIL {
            let dirty = inner.dirty[d as usize];
            if !dirty.dirty {
                if self.try_evict_page(inner, d) {
                    return Ok(());
                }
            } else if dirty_victim == NIL
                && !dirty.writing
                && self.durable_at(dirty.newest, durable)
                && self.descs[d as usize].pins() == 0
            {
                dirty_victim = d;
            }
            d = inner.lru.list().prev(d);
        }
        if inner.unzip.len() > PolicyState::floor_len(inner.lru.list().len())
            && self.drop_tail_frame(inner)
        {
            return Ok(());
        }
        if dirty_victim != NIL {
            let page_id = self.descs[dirty_victim as usize].page_id();
            let pinned = self.table.with_entry(page_id, |e| {
                debug_assert_eq!(e, dirty_victim);
                self.descs[e as usize].pin();
            });
            if pinned.is_some() {
                return Err(AllocError::NeedFlush(dirty_victim));
            }
        }
        Err(AllocError::Exhausted(
            "every page is pinned, or dirty and waiting for the log",
        ))
    }

    pub(crate) fn try_evict_page(&self, inner: &mut Inner, d: u32) -> bool {
        let desc = &self.descs[d as usize];
        let page_id = desc.page_id();
        let mut shard = self.table.lock(page_id);
        if desc.pins() != 0 {
            return false;
        }
        shard.remove(&page_id);
        drop(shard);
        if desc.prefetched.swap(false, Ordering::Relaxed) {
            self.counters
                .read_ahead_evicted_unused
                .fetch_add(1, Ordering::Relaxed);
        }
        self.release_cached(inner, d);
        desc.set_state(State::Free);
        inner.free_descs.push(d);
        if self.compressed {
            inner.policy.page_evicted(page_id);
        }
        self.evict_clock.fetch_add(1, Ordering::Relaxed);
        self.counters.pages_evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Takes a cached page off the lists and frees its memory.
    fn release_cached(&self, inner: &mut Inner, d: u32) {
        let desc = &self.descs[d as usize];
        inner.lru.remove(d, &self.old_flags);
        self.lru_len
            .store(inner.lru.list().len(), Ordering::Relaxed);
        if inner.unzip.contains(d) {
            inner.unzip.remove(d);
        }
        let chunk = desc.frame_chunk();
        if chunk != NIL {
            inner.alloc.free_frame(chunk);
            inner.chunk_owner[chunk as usize] = NIL;
            desc.set_frame_chunk(NIL);
        }
        let slot = desc.block_slot();
        if slot != NIL {
            inner.alloc.free_slot(slot);
            inner.slot_owner[slot as usize] = NIL;
            desc.set_block_slot(NIL);
        }
        desc.first_access_ms.store(0, Ordering::Relaxed);
    }

    /// Moves the blocks of the emptiest slab chunk into free slots of other
    /// chunks, freeing it for a frame (InnoDB's `buf_buddy_relocate`).
    fn compact(&self, inner: &mut Inner, own: u32) -> bool {
        for chunk in inner.alloc.partial_slabs_by_use() {
            let slots: Vec<u32> = inner.alloc.used_slots(chunk).collect();
            for slot in slots {
                if !self.relocate(inner, slot, chunk, own) {
                    break;
                }
            }
            if inner.alloc.chunk_use(chunk) == crate::arena::ChunkUse::Free {
                self.counters.compactions.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Moves one unpinned block (or the caller's own) out of `chunk`.
    fn relocate(&self, inner: &mut Inner, slot: u32, chunk: u32, own: u32) -> bool {
        let d = inner.slot_owner[slot as usize];
        let desc = &self.descs[d as usize];
        let page_id = desc.page_id();
        let _shard = self.table.lock(page_id);
        if d != own && desc.pins() != 0 {
            return false;
        }
        let Some(new_slot) = inner.alloc.alloc_slot_outside(chunk) else {
            return false;
        };
        // SAFETY: the page is unpinned and its shard write-locked, so no
        // guard can reach either slot (or it is the caller's own page, whose
        // block the caller does not touch during allocation); the two slots
        // are distinct.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.slot_ptr(slot),
                self.slot_ptr(new_slot),
                self.unit_size_bytes,
            )
        };
        desc.set_block_slot(new_slot);
        inner.slot_owner[new_slot as usize] = d;
        inner.slot_owner[slot as usize] = NIL;
        inner.alloc.free_slot(slot);
        true
    }
}
