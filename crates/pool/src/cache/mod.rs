//! The cached pages: their descriptors, the memory of their frames and
//! blocks, the page table, and the lists and dirty state under the pool
//! mutex. Everything the pool's operations share; what each operation does
//! with it lives in the module of that operation ([`evict`]: finding memory,
//! [`page`]: a page's way into and out of the lists).
//!
//! The lock order is the pool's (see [`crate::BufferPool`]): a page latch,
//! then the mutex (`inner`), then one page-table shard lock.

mod evict;
mod page;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use barracuda_base::{Lsn, PageId};
use parking_lot::Mutex;

use crate::arena::{Arena, ChunkAllocator, NIL};
use crate::backend::{DurableLsn, PageCodec, PageFile};
use crate::config::PoolConfig;
use crate::counters::Counters;
use crate::desc::{Desc, Dirty, LSN_PENDING};
use crate::error::{PoolError, Result};
use crate::lists::{List, Lru, OldFlags};
use crate::policy::{LruStats, PolicyState};
use crate::table::PageTable;

/// Descriptors beyond one per block slot, for failed reads still pinned by
/// waiters (reclaimed when they unpin). 64 exceeds any plausible number of
/// threads waiting on failed reads at once.
const ZOMBIE_DESC_MARGIN: u32 = 64;
/// The services a pool needs: the codec, the data file, and the log's
/// durable LSN for the write-ahead rule.
#[derive(Clone)]
pub struct Services {
    /// Compression of pages into blocks (unused but for `verify`/`seal` in
    /// an uncompressed pool).
    pub codec: Arc<dyn PageCodec>,
    /// The data file.
    pub file: Arc<dyn PageFile>,
    /// How far the write-ahead log is durable.
    pub durable_lsn: Arc<dyn DurableLsn>,
    /// Time source; `None` = the real clock.
    pub clock: Option<ManualClock>,
}

/// A clock moved by hand, so tests can cross `old_blocks_time_ms` and the
/// one-second statistics intervals without sleeping.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward.
    pub fn advance_ms(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::Relaxed);
    }
}

enum Clock {
    Real(Instant),
    Manual(ManualClock),
}

impl Clock {
    /// Milliseconds since open, plus one so that 0 can mean "never".
    fn now_ms(&self) -> u64 {
        1 + match self {
            Clock::Real(start) => start.elapsed().as_millis() as u64,
            Clock::Manual(clock) => clock.0.load(Ordering::Relaxed),
        }
    }
}

/// Why memory could not be found right now.
pub(crate) enum AllocError {
    /// Only dirty pages are evictable; this one (pinned for the caller) must
    /// be written first.
    NeedFlush(u32),
    /// Nothing can be freed.
    Exhausted(&'static str),
}

/// Memory for one page: a descriptor, a frame chunk, a block slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageMemory {
    pub(crate) desc: u32,
    pub(crate) frame_chunk: u32,
    pub(crate) block_slot: u32,
}

/// Everything under the pool mutex.
pub(crate) struct Inner {
    pub(crate) alloc: ChunkAllocator,
    pub(crate) lru: Lru,
    pub(crate) unzip: List,
    pub(crate) flush: List,
    pub(crate) dirty: Vec<Dirty>,
    pub(crate) slot_owner: Vec<u32>,
    pub(crate) chunk_owner: Vec<u32>,
    pub(crate) free_descs: Vec<u32>,
    pub(crate) zombies: Vec<u32>,
    pub(crate) policy: PolicyState,
    pub(crate) stats: LruStats,
    pub(crate) reading_count: u32,
}

/// The state every operation of a pool shares.
pub(crate) struct Cache {
    pub(crate) config: PoolConfig,
    pub(crate) page_size_bytes: usize,
    /// Size of a page's on-disk unit: the block size, or the page size when
    /// uncompressed.
    pub(crate) unit_size_bytes: usize,
    pub(crate) compressed: bool,
    pub(crate) arena: Arena,
    pub(crate) descs: Box<[Desc]>,
    pub(crate) old_flags: OldFlags,
    pub(crate) table: PageTable,
    pub(crate) inner: Mutex<Inner>,
    pub(crate) services: Services,
    clock: Clock,
    /// InnoDB's `freed_page_clock`: pages removed from the LRU so far.
    pub(crate) evict_clock: AtomicU64,
    /// LRU length, readable without the mutex.
    pub(crate) lru_len: AtomicU32,
    pub(crate) counters: Counters,
    /// Chunks lent ([`crate::BufferPool::lend_bytes`]), readable without a
    /// lock (the pool's usable size).
    pub(crate) lent_chunks: AtomicU32,
}

impl Inner {
    /// Inserts `d`, whose oldest modification is `lsn`, at its place in the
    /// flush list's order (head = newest).
    pub(crate) fn insert_into_flush_list(&mut self, d: u32, lsn: Lsn) {
        let mut after = NIL;
        let mut next = self.flush.head();
        while next != NIL && self.dirty[next as usize].oldest > lsn {
            after = next;
            next = self.flush.next(next);
        }
        self.flush.insert_after(after, d);
    }
}

impl Cache {
    /// Allocates the whole budget: an empty cache.
    pub(crate) fn new(config: PoolConfig, services: Services) -> Result<Self> {
        config.validate()?;
        let page = config.page_size_bytes;
        let unit = config.block_size_bytes().unwrap_or(page);
        let chunk_count = u32::try_from(config.buffer_pool_bytes / page).map_err(|_| {
            PoolError::InvalidConfig {
                reason: "more than 2^32 pages".into(),
            }
        })?;
        let slots_per_chunk = (page / unit) as u32;
        let desc_count = chunk_count * slots_per_chunk + ZOMBIE_DESC_MARGIN;
        let arena = Arena::new(page, chunk_count, config.huge_pages)?;
        let now_ms = 1;
        let inner = Inner {
            alloc: ChunkAllocator::new(chunk_count, slots_per_chunk),
            lru: Lru::new(desc_count, config.old_blocks_pct),
            unzip: List::new(desc_count),
            flush: List::new(desc_count),
            dirty: vec![Dirty::default(); desc_count as usize],
            slot_owner: vec![NIL; (chunk_count * slots_per_chunk) as usize],
            chunk_owner: vec![NIL; chunk_count as usize],
            free_descs: (0..desc_count).rev().collect(),
            zombies: Vec::with_capacity(ZOMBIE_DESC_MARGIN as usize),
            policy: PolicyState::new(
                config.eviction_policy,
                chunk_count as usize,
                (chunk_count * slots_per_chunk) as usize,
            ),
            stats: LruStats::new(now_ms),
            reading_count: 0,
        };
        let clock = match services.clock.clone() {
            Some(manual) => Clock::Manual(manual),
            None => Clock::Real(Instant::now()),
        };
        Ok(Self {
            page_size_bytes: page,
            unit_size_bytes: unit,
            compressed: config.block_size_bytes().is_some(),
            arena,
            descs: (0..desc_count).map(|_| Desc::new()).collect(),
            old_flags: OldFlags::new(desc_count),
            table: PageTable::new(),
            inner: Mutex::new(inner),
            services,
            clock,
            evict_clock: AtomicU64::new(0),
            lru_len: AtomicU32::new(0),
            counters: Counters::default(),
            lent_chunks: AtomicU32::new(0),
            config,
        })
    }

    /// Publishes the LRU length for readers without the mutex.
    pub(crate) fn set_lru_len(&self, len: u32) {
        self.lru_len.store(len, Ordering::Relaxed);
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The frame bytes of a chunk.
    fn frame_ptr(&self, chunk: u32) -> *mut u8 {
        self.arena
            .ptr(chunk as usize * self.page_size_bytes, self.page_size_bytes)
    }

    /// The block bytes of a slot.
    pub(super) fn slot_ptr(&self, slot: u32) -> *mut u8 {
        self.arena
            .ptr(slot as usize * self.unit_size_bytes, self.unit_size_bytes)
    }

    /// A block's bytes.
    ///
    /// # Safety
    /// The caller holds the page's latch (or it is otherwise unreachable)
    /// and no one writes the block meanwhile.
    pub(crate) unsafe fn block(&self, slot: u32) -> &[u8] {
        // SAFETY: the caller guarantees exclusion; the pointer is in bounds.
        unsafe { std::slice::from_raw_parts(self.slot_ptr(slot), self.unit_size_bytes) }
    }

    /// A block's bytes, writable.
    ///
    /// # Safety
    /// The caller holds the page's latch exclusively (or it is unreachable).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn block_mut(&self, slot: u32) -> &mut [u8] {
        // SAFETY: the caller guarantees exclusion; the pointer is in bounds.
        unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(slot), self.unit_size_bytes) }
    }

    /// A frame's bytes.
    ///
    /// # Safety
    /// As [`Cache::block`].
    pub(crate) unsafe fn frame(&self, chunk: u32) -> &[u8] {
        // SAFETY: the caller guarantees exclusion; the pointer is in bounds.
        unsafe { std::slice::from_raw_parts(self.frame_ptr(chunk), self.page_size_bytes) }
    }

    /// A frame's bytes, writable.
    ///
    /// # Safety
    /// As [`Cache::block_mut`].
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn frame_mut(&self, chunk: u32) -> &mut [u8] {
        // SAFETY: the caller guarantees exclusion; the pointer is in bounds.
        unsafe { std::slice::from_raw_parts_mut(self.frame_ptr(chunk), self.page_size_bytes) }
    }

    /// Where the page's unit (block, or page when uncompressed) is in the
    /// file.
    pub(crate) fn unit_offset(&self, page_id: PageId) -> u64 {
        page_id.0 * self.unit_size_bytes as u64
    }

    /// Number of the pool's chunks (page-size units of the budget), less
    /// those lent ([`BufferPool::lend_bytes`](crate::BufferPool::lend_bytes)).
    pub fn chunk_count(&self) -> u32 {
        self.arena.chunk_count() - self.lent_chunks.load(Ordering::Relaxed)
    }

    /// Bytes of the budget the pool uses (its chunks, less those lent,
    /// times the page size).
    pub fn budget_bytes(&self) -> usize {
        self.chunk_count() as usize * self.arena.chunk_size_bytes()
    }

    /// Marks a page dirty at `lsn`, keeping the flush list ordered by oldest
    /// modification (head = newest).
    pub(crate) fn mark_dirty(&self, d: u32, lsn: Lsn) {
        let mut inner = self.inner.lock();
        let dirty = &mut inner.dirty[d as usize];
        dirty.version += 1;
        dirty.newest = dirty.newest.max(lsn);
        if dirty.dirty {
            return;
        }
        dirty.dirty = true;
        dirty.oldest = lsn;
        dirty.newest = lsn;
        inner.insert_into_flush_list(d, lsn);
    }

    /// Whether a page whose newest change is `newest` may be written now.
    pub(crate) fn writable(&self, newest: Lsn) -> bool {
        self.durable_at(newest, self.services.durable_lsn.durable_lsn())
    }

    /// The write-ahead rule: the log is durable up to the page's newest
    /// change, which is a real LSN (not [`LSN_PENDING`]).
    pub(crate) fn durable_at(&self, newest: Lsn, durable: Lsn) -> bool {
        newest != LSN_PENDING && newest <= durable
    }

    /// Whether less than a quarter of the pool's memory is free: eviction
    /// runs or soon will.
    pub(crate) fn memory_is_short(&self) -> bool {
        self.inner.lock().alloc.free_chunk_count() < self.chunk_count() / 4
    }
}
