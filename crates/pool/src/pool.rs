//! The buffer pool: fix, miss, unzip, eviction and compaction.
//!
//! Lock order (never taken in the other direction):
//! 1. a page latch (held by a guard; a thread may hold several, in the
//!    order the tree chooses),
//! 2. the pool mutex (`inner`: lists, allocator, policy, dirty state),
//! 3. one page-table shard lock.
//!
//! A pin is taken under a shard's read lock; eviction checks "unpinned"
//! under the same shard's write lock, so a page cannot be pinned and evicted
//! at once. Latches are only taken by threads holding a pin, so an unpinned
//! page has no latch holder, and the evictor never waits for a latch. Where
//! the pool must latch a page it did not fix (flushing a victim while
//! holding another page's latch) it only tries, and moves on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use barracuda_codec::{PageId, UNKNOWN_PAGE_ID};
use parking_lot::{Mutex, MutexGuard};

use crate::arena::{Arena, ChunkAllocator, NIL};
use crate::backend::{DurableLsn, PageCodec, PageFile};
use crate::config::PoolConfig;
use crate::desc::{Desc, Dirty, LatchGuard, State};
use crate::error::{PoolError, Result};
use crate::lists::{List, Lru, OldFlags};
use crate::policy::{LruStats, PolicyState, Victim};
use crate::status::Counters;
use crate::table::PageTable;

/// Descriptors beyond one per block slot, for failed reads still pinned by
/// waiters (reclaimed when they unpin). 64 exceeds any plausible number of
/// threads waiting on failed reads at once.
const ZOMBIE_DESC_MARGIN: u32 = 64;
/// A fix retries memory allocation after flushing a dirty victim at most
/// this many times before reporting the pool exhausted; each retry writes
/// one page, so this also bounds the I/O a single fix can cause.
const ALLOC_RETRIES_MAX: u32 = 64;
/// How many framed pages from the unzip_LRU's tail a search for a block to
/// drop looks at: clean pages with both copies gather there while frames
/// alone fit, so a longer search would only hold the mutex longer.
const BLOCK_DROP_SCAN_MAX: u32 = 64;

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

/// What kind of access a fix is, for the LRU's young/old rule.
///
/// InnoDB's `innodb_old_blocks_time` keeps a page read into the old
/// sublist there until it has been cached for that long, so that a scan,
/// which touches each page many times in a burst, cannot flush the hot
/// pages out. It cannot tell a scan from a point read, so under point reads
/// of a skewed key set a hot page re-read within the window is not made
/// young and can be evicted from the old tail. The tree can tell: a point
/// read (`get`) touches each page once, so touching a page again is a new
/// reference, and it is made young at once. Scans and writes keep the
/// window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Access {
    /// A scan, a write or anything else: InnoDB's rule.
    #[default]
    Scan,
    /// One page of one point read.
    Point,
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

/// A buffer pool over one data file. See the crate documentation.
pub struct BufferPool {
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
    lru_len: AtomicU32,
    pub(crate) counters: Counters,
    /// Read-ahead reads in flight and their completions.
    pub(crate) read_ahead: crate::readahead::ReadAhead,
    /// A thread is writing a victim with a batch from the LRU list's tail
    /// ([`BufferPool::flush_victims`]): others write their victim alone.
    pub(crate) lru_flushing: std::sync::atomic::AtomicBool,
    /// Serializes [`BufferPool::lend_bytes`]; never held with another lock
    /// taken first.
    lending: Mutex<()>,
    /// Bytes lent out of the budget so far.
    lent_bytes: AtomicU64,
    /// Chunks lent, readable without a lock (the pool's usable size).
    lent_chunks: AtomicU32,
}

/// The least memory lending leaves the pool (or half its chunks, rounded
/// up, if fewer): a tree descent and a split pin a few pages at once, and a
/// pool of a few chunks thrashes. The database's options keep a record
/// cache within the same bound (`Options::record_cache_bytes`), so that
/// its loans are never refused.
pub const LEND_KEEP_BYTES_MIN: usize = 1 << 20;

/// The evicted-block ghost list of a pool ([`BufferPool::ghost_blocks`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GhostBlocks {
    /// Misses, since the pool opened, of pages whose block had recently
    /// been evicted.
    pub hits: u64,
    /// Bytes the list's entries stand for (entries times the block size).
    pub bytes: u64,
}

impl BufferPool {
    /// Allocates the whole budget and opens an empty pool.
    pub fn open(config: PoolConfig, services: Services) -> Result<Self> {
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
            read_ahead: crate::readahead::ReadAhead::default(),
            lru_flushing: std::sync::atomic::AtomicBool::new(false),
            lending: Mutex::new(()),
            lent_bytes: AtomicU64::new(0),
            lent_chunks: AtomicU32::new(0),
            config,
        })
    }

    /// Takes `bytes` more out of the budget, until [`BufferPool::return_bytes`],
    /// for memory that its owner keeps beside the pool out of the same
    /// budget (a record cache that grows as gets fill it): frees whole
    /// chunks as a miss would
    /// (evicting pages, writing dirty victims), stops using them and gives
    /// their memory back to the kernel. Lent bytes add up; chunks are lent
    /// as their sum crosses each chunk. Returns `Ok(false)`, lending
    /// nothing, where that would leave the pool less than
    /// [`LEND_KEEP_BYTES_MIN`] (or half its chunks, rounded up, if fewer).
    /// Waits as a miss does for memory while every page is pinned, and
    /// fails as it does.
    pub fn lend_bytes(&self, bytes: usize) -> Result<bool> {
        let _lending = self.lending.lock();
        let lent_bytes = self.lent_bytes() + bytes;
        let chunk_bytes = self.arena.chunk_size_bytes();
        let total = self.arena.chunk_count();
        let want = lent_bytes.div_ceil(chunk_bytes);
        let keep = (LEND_KEEP_BYTES_MIN.div_ceil(chunk_bytes) as u32).min(total.div_ceil(2));
        if want > (total - keep) as usize {
            return Ok(false);
        }
        while (self.lent_chunks.load(Ordering::Relaxed) as usize) < want {
            let (mut inner, chunk) =
                self.with_memory(UNKNOWN_PAGE_ID, |inner| self.alloc_frame(inner, NIL))?;
            inner.alloc.lend(chunk);
            self.lent_chunks
                .store(inner.alloc.lent_chunk_count(), Ordering::Relaxed);
            drop(inner);
            self.arena.release(chunk);
        }
        self.lent_bytes.store(lent_bytes as u64, Ordering::Relaxed);
        Ok(true)
    }

    /// Gives back `bytes` of what [`BufferPool::lend_bytes`] lent (at most
    /// all of it): the chunks the lent sum no longer reaches are free
    /// again, and the pool uses them as its own.
    pub fn return_bytes(&self, bytes: usize) {
        let _lending = self.lending.lock();
        let lent_bytes = self.lent_bytes().saturating_sub(bytes);
        let want = lent_bytes.div_ceil(self.arena.chunk_size_bytes());
        let mut inner = self.inner.lock();
        while inner.alloc.lent_chunk_count() as usize > want {
            if inner.alloc.take_back().is_none() {
                break;
            }
        }
        self.lent_chunks
            .store(inner.alloc.lent_chunk_count(), Ordering::Relaxed);
        drop(inner);
        self.lent_bytes.store(lent_bytes as u64, Ordering::Relaxed);
    }

    /// The eviction policy's list of recently evicted blocks (ARC's ghosts):
    /// the misses so far that hit it, and the bytes its entries stand for.
    /// A hit is a miss that that much more memory would have caught, so
    /// hits per get over the ghosts' bytes estimate what a byte more of
    /// pool is worth (the record cache sizes itself by it).
    pub fn ghost_blocks(&self) -> GhostBlocks {
        let inner = self.inner.lock();
        let (hits, len) = inner.policy.ghost_blocks_sample();
        let slot_bytes = self.arena.chunk_size_bytes() / inner.alloc.slots_per_chunk() as usize;
        GhostBlocks {
            hits,
            bytes: len * slot_bytes as u64,
        }
    }

    /// Bytes lent out of the budget ([`BufferPool::lend_bytes`]).
    pub fn lent_bytes(&self) -> usize {
        self.lent_bytes.load(Ordering::Relaxed) as usize
    }

    /// The options the pool was opened with.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Packs pages from now on (or stops): a page fits its block when its
    /// compressed image does, with no room kept for the modification log
    /// ([`PageCodec::set_packing`]). A compaction packs the tree it writes.
    /// Afterwards a packed block stays packed while its page fits it (a
    /// change that does not fit the little log room left recompresses it,
    /// again with no reserve), and the tree splits the page once it does
    /// not fit.
    pub fn set_packing(&self, packing: bool) {
        self.services.codec.set_packing(packing);
    }

    /// Publishes the LRU length for readers without the mutex.
    pub(crate) fn set_lru_len(&self, len: u32) {
        self.lru_len.store(len, Ordering::Relaxed);
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The frame bytes of a chunk.
    pub(crate) fn frame_ptr(&self, chunk: u32) -> *mut u8 {
        self.arena
            .ptr(chunk as usize * self.page_size_bytes, self.page_size_bytes)
    }

    /// The block bytes of a slot.
    pub(crate) fn slot_ptr(&self, slot: u32) -> *mut u8 {
        self.arena
            .ptr(slot as usize * self.unit_size_bytes, self.unit_size_bytes)
    }

    /// Fixes a page: on return it is pinned and latched (shared or
    /// exclusive, the returned latch) and its frame holds the page.
    pub(crate) fn fix(
        &self,
        page_id: PageId,
        exclusive: bool,
        access: Access,
    ) -> Result<(u32, LatchGuard<'_>)> {
        self.counters.page_gets.add(1);
        loop {
            let pinned = self.table.with_entry(page_id, |d| {
                self.descs[d as usize].pin();
                d
            });
            if let Some(d) = pinned {
                if self.descs[d as usize].state() == State::ReadAhead {
                    self.wait_read_ahead(d);
                }
                match self.latch_pinned(d, page_id, exclusive, access)? {
                    Some(latch) => return Ok((d, latch)),
                    None => continue,
                }
            }
            if let Some(fixed) = self.read_page(page_id, exclusive)? {
                return Ok(fixed);
            }
        }
    }

    /// Latches a pinned page and makes sure it has a frame. `None` when a
    /// read-ahead of the page failed: the caller looks it up again. On an
    /// error or `None` the page is unlatched and unpinned.
    fn latch_pinned(
        &self,
        d: u32,
        page_id: PageId,
        exclusive: bool,
        access: Access,
    ) -> Result<Option<LatchGuard<'_>>> {
        let desc = &self.descs[d as usize];
        let mut latch = desc.latch(exclusive);
        // The latch is released before the pin on every way out: an
        // unpinned page has no latch holder.
        let release = |latch: LatchGuard<'_>| {
            drop(latch);
            desc.unpin();
        };
        match desc.state() {
            State::Both | State::Frame => {}
            State::FrameOnly if !exclusive => {}
            State::FrameOnly => {
                // A writer changes the block too: read it back first.
                if let Err(e) = self.reload_block(d, page_id) {
                    release(latch);
                    return Err(e);
                }
            }
            State::Compressed => {
                if !exclusive {
                    drop(latch);
                    latch = desc.latch(true);
                }
                if desc.state() == State::Compressed
                    && let Err(e) = self.unzip(d, page_id, exclusive)
                {
                    release(latch);
                    return Err(e);
                }
                if !exclusive {
                    latch.downgrade();
                }
            }
            State::Failed => {
                release(latch);
                return Err(PoolError::ReadFailed { page_id });
            }
            State::Abandoned => {
                release(latch);
                return Ok(None);
            }
            state @ (State::Free | State::Reading | State::ReadAhead) => {
                panic!("{page_id}: descriptor {d} in state {state:?} after latching")
            }
        }
        self.touch(d, access);
        Ok(Some(latch))
    }

    /// Records an access; makes the page young when InnoDB would, except
    /// that a point read ([`Access::Point`]) of an old page makes it young
    /// without waiting out `old_blocks_time_ms` (see [`Access`]).
    fn touch(&self, d: u32, access: Access) {
        let desc = &self.descs[d as usize];
        if desc.in_os_cache.load(Ordering::Relaxed) {
            // A page on probation hit in the pool: the pool keeps it.
            self.uncache_page(d);
        }
        let first_ms = desc.first_access_ms.load(Ordering::Relaxed);
        if first_ms == 0 {
            // The first access of a page read ahead (or racing with one).
            desc.first_access_ms.store(self.now_ms(), Ordering::Relaxed);
            desc.prefetched.store(false, Ordering::Relaxed);
            return;
        }
        let evict_clock = self.evict_clock.load(Ordering::Relaxed);
        if evict_clock == 0 {
            // No eviction yet: warm-up or an in-memory load; InnoDB does not
            // reorder the LRU then.
            return;
        }
        // The clock is read only for an old page a scan touches: a hit on a
        // young page (most hits) costs no clock call.
        let too_old = if self.old_flags.get(d) {
            access == Access::Point
                || self.now_ms().saturating_sub(first_ms) >= self.config.old_blocks_time_ms
        } else {
            // Young pages move only once they drifted a quarter of the young
            // sublist from the head (InnoDB's `buf_page_peek_if_young`).
            let lru_len = u64::from(self.lru_len.load(Ordering::Relaxed));
            let distance = lru_len * u64::from(100 - self.config.old_blocks_pct) / 400;
            evict_clock > desc.young_clock.load(Ordering::Relaxed) + distance
        };
        if too_old {
            let mut inner = self.inner.lock();
            self.make_young(&mut inner, d);
        } else if self.old_flags.get(d) {
            self.counters.not_made_young.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn make_young(&self, inner: &mut Inner, d: u32) {
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

    /// Decompresses the block of a pinned, exclusively latched,
    /// compressed-only page into a new frame. For a reader (`!for_writer`)
    /// the block is then dropped if the policy keeps frames alone.
    fn unzip(&self, d: u32, page_id: PageId, for_writer: bool) -> Result<()> {
        let desc = &self.descs[d as usize];
        let (inner, chunk) = self.with_memory(page_id, |inner| self.alloc_frame(inner, d))?;
        drop(inner);
        let started = Instant::now();
        let decompressed = {
            // SAFETY: the block slot and the new frame belong to this page,
            // which we hold pinned and exclusively latched; the frame chunk
            // was just allocated and is reachable by nobody else.
            let (block, frame) = unsafe { (self.block(desc.block_slot()), self.frame_mut(chunk)) };
            self.services.codec.decompress(page_id, block, frame)
        };
        let cost_ns = started.elapsed().as_nanos() as f64;
        let mut inner = self.inner.lock();
        if let Err(e) = decompressed {
            inner.alloc.free_frame(chunk);
            return Err(e);
        }
        desc.set_frame_chunk(chunk);
        inner.chunk_owner[chunk as usize] = d;
        desc.set_state(State::Both);
        self.unzip_insert(&mut inner, d);
        inner.stats.advance(self.now_ms());
        inner.stats.add_unzip();
        let lru_len = inner.lru.list().len();
        inner.policy.unzipped(page_id, cost_ns, true, lru_len);
        if !for_writer {
            self.shed_block_if_frames_only(&mut inner, d);
        }
        self.counters.unzips.fetch_add(1, Ordering::Relaxed);
        self.counters
            .unzip_time_ns
            .fetch_add(cost_ns as u64, Ordering::Relaxed);
        Ok(())
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
    /// As [`BufferPool::block`].
    pub(crate) unsafe fn frame(&self, chunk: u32) -> &[u8] {
        // SAFETY: the caller guarantees exclusion; the pointer is in bounds.
        unsafe { std::slice::from_raw_parts(self.frame_ptr(chunk), self.page_size_bytes) }
    }

    /// A frame's bytes, writable.
    ///
    /// # Safety
    /// As [`BufferPool::block_mut`].
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn frame_mut(&self, chunk: u32) -> &mut [u8] {
        // SAFETY: the caller guarantees exclusion; the pointer is in bounds.
        unsafe { std::slice::from_raw_parts_mut(self.frame_ptr(chunk), self.page_size_bytes) }
    }

    /// Runs an allocation under the pool mutex, writing dirty victims and
    /// retrying as needed. Returns with the mutex held.
    pub(crate) fn with_memory<T>(
        &self,
        page_id: PageId,
        mut alloc: impl FnMut(&mut Inner) -> Result<T, AllocError>,
    ) -> Result<(MutexGuard<'_, Inner>, T)> {
        let mut waited_ms = 0;
        for _ in 0..ALLOC_RETRIES_MAX + self.config.exhausted_wait_ms {
            let mut inner = self.inner.lock();
            inner.stats.advance(self.now_ms());
            match alloc(&mut inner) {
                Ok(value) => return Ok((inner, value)),
                Err(AllocError::NeedFlush(victim)) => {
                    drop(inner);
                    self.flush_victims(victim)?;
                }
                Err(AllocError::Exhausted(reason)) => {
                    // Pages are pinned by other threads: wait for them to be
                    // released, as InnoDB's `buf_LRU_get_free_block` does,
                    // but not forever.
                    drop(inner);
                    // Read-ahead pages may be pinned only because nobody
                    // installed their completed reads yet.
                    if self.drain_read_ahead() > 0 {
                        continue;
                    }
                    // Dirty pages may wait only for the log (a database that
                    // does not sync every commit): ask for it.
                    self.services.durable_lsn.request_durable();
                    if waited_ms >= self.config.exhausted_wait_ms {
                        return Err(PoolError::Exhausted { page_id, reason });
                    }
                    self.counters.memory_waits.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    waited_ms += 1;
                }
            }
        }
        Err(PoolError::Exhausted {
            page_id,
            reason: "dirty victims kept reappearing",
        })
    }

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
    fn shed_block_if_frames_only(&self, inner: &mut Inner, d: u32) {
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

    /// Reads the block of a pinned, exclusively latched `FrameOnly` page
    /// back from the file (the page is clean, so the file holds its block),
    /// making it `Both` again.
    fn reload_block(&self, d: u32, page_id: PageId) -> Result<()> {
        let desc = &self.descs[d as usize];
        let (inner, slot) = self.with_memory(page_id, |inner| {
            let slot = self.alloc_slot(inner)?;
            // Owned from now on, so compaction sees a pinned page's slot
            // and leaves it alone.
            inner.slot_owner[slot as usize] = d;
            Ok(slot)
        })?;
        drop(inner);
        // SAFETY: the slot was just allocated and is reachable by nobody
        // else; the page is pinned and exclusively latched by us.
        let loaded = self.read_unit(page_id, unsafe { self.block_mut(slot) });
        let mut inner = self.inner.lock();
        if let Err(e) = loaded {
            inner.alloc.free_slot(slot);
            inner.slot_owner[slot as usize] = NIL;
            return Err(e);
        }
        desc.set_block_slot(slot);
        desc.set_state(State::Both);
        // With the tier, the page cache may hold the block now too: the
        // fix's `touch` drops it, as for any page the pool keeps.
        if self.config.os_cache_tier {
            desc.in_os_cache.store(true, Ordering::Relaxed);
        }
        inner.stats.advance(self.now_ms());
        inner.stats.add_io(1);
        drop(inner);
        // Not a miss: `pages_read` and the miss time stay the misses'.
        self.counters
            .blocks_reloaded
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
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

    fn try_drop_frame(&self, inner: &mut Inner, d: u32) -> bool {
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

    fn try_evict_page(&self, inner: &mut Inner, d: u32) -> bool {
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
    fn publish_on_probation(&self, inner: &mut Inner, memory: PageMemory) {
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

    /// As [`BufferPool::claim`], in `state` (`Reading` or `ReadAhead`).
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

    /// A miss: reads, verifies and decompresses the page. `None` if another
    /// thread cached it meanwhile (the caller retries the lookup).
    fn read_page(&self, page_id: PageId, exclusive: bool) -> Result<Option<(u32, LatchGuard<'_>)>> {
        let (mut inner, memory) =
            self.with_memory(page_id, |inner| self.alloc_page_memory(inner))?;
        let Some(mut latch) = self.claim(&mut inner, page_id, memory) else {
            self.free_page_memory(&mut inner, memory);
            return Ok(None);
        };
        inner.reading_count += 1;
        drop(inner);
        let d = memory.desc;
        match self.load(page_id, memory) {
            Ok((read_ns, unzip_ns, source)) => {
                let on_probation = self.config.os_cache_tier && source == Source::Device;
                let mut inner = self.inner.lock();
                inner.reading_count -= 1;
                if on_probation {
                    self.publish_on_probation(&mut inner, memory);
                } else {
                    self.publish(&mut inner, memory, false);
                }
                let lru_len = inner.lru.list().len();
                inner.stats.advance(self.now_ms());
                inner.stats.add_io(1);
                inner
                    .policy
                    .missed(page_id, read_ns, lru_len, self.now_ms());
                if self.compressed {
                    inner.stats.add_unzip();
                    inner.policy.unzipped(page_id, unzip_ns, false, lru_len);
                    self.counters
                        .unzip_time_ns
                        .fetch_add(unzip_ns as u64, Ordering::Relaxed);
                    if !exclusive {
                        self.shed_block_if_frames_only(&mut inner, d);
                    }
                }
                drop(inner);
                self.counters.pages_read.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .read_time_ns
                    .fetch_add(read_ns as u64, Ordering::Relaxed);
                if !exclusive {
                    latch.downgrade();
                }
                if source == Source::OsCache {
                    // The pool keeps it now: the OS page cache makes room
                    // for pages the pool does not hold (after the
                    // downgrade, so that readers of the page do not wait
                    // for the syscall).
                    self.counters.os_cache_reads.fetch_add(1, Ordering::Relaxed);
                    self.services
                        .file
                        .uncache(self.unit_offset(page_id), self.unit_size_bytes as u64);
                }
                Ok(Some((d, latch)))
            }
            Err(e) => {
                self.abort_read(page_id, memory, latch);
                Err(e)
            }
        }
    }

    /// Reads the page's unit into its block (or frame), verifies it and
    /// decompresses it. Returns the read and unzip times in ns and where
    /// the unit came from.
    fn load(&self, page_id: PageId, memory: PageMemory) -> Result<(f64, f64, Source)> {
        let started = Instant::now();
        // SAFETY: the memory was just claimed for this page, which we hold
        // pinned and exclusively latched; nobody else can reach it.
        let frame = unsafe { self.frame_mut(memory.frame_chunk) };
        if !self.compressed {
            let source = self.read_unit(page_id, frame)?;
            return Ok((started.elapsed().as_nanos() as f64, 0.0, source));
        }
        // SAFETY: as above, for the block slot.
        let block = unsafe { self.block_mut(memory.block_slot) };
        let source = self.read_unit(page_id, block)?;
        let read_ns = started.elapsed().as_nanos() as f64;
        let started = Instant::now();
        self.services.codec.decompress(page_id, block, frame)?;
        Ok((read_ns, started.elapsed().as_nanos() as f64, source))
    }

    /// Reads the page's on-disk unit (its block, or the page when
    /// uncompressed) into `unit` and verifies its checksum and page id.
    /// With the OS cache tier, from the OS page cache if it holds the unit.
    fn read_unit(&self, page_id: PageId, unit: &mut [u8]) -> Result<Source> {
        let offset = self.unit_offset(page_id);
        let file = &self.services.file;
        let source = if self.config.os_cache_tier && file.read_if_cached(offset, unit)? {
            Source::OsCache
        } else {
            file.read_at(offset, unit)?;
            Source::Device
        };
        self.services.codec.verify(page_id, unit)?;
        Ok(source)
    }

    /// Drops the OS page cache's copy of a page the pool now keeps (the OS
    /// cache tier), if it may hold one.
    fn uncache_page(&self, d: u32) {
        let desc = &self.descs[d as usize];
        if desc.in_os_cache.swap(false, Ordering::Relaxed) {
            self.services.file.uncache(
                self.unit_offset(desc.page_id()),
                self.unit_size_bytes as u64,
            );
        }
    }

    /// Where the page's unit (block, or page when uncompressed) is in the
    /// file.
    pub(crate) fn unit_offset(&self, page_id: PageId) -> u64 {
        page_id.0 * self.unit_size_bytes as u64
    }

    /// Undoes a claimed read that failed: waiters will see `Failed`.
    fn abort_read(&self, page_id: PageId, memory: PageMemory, latch: LatchGuard<'_>) {
        self.abort_claim(page_id, memory, State::Failed, latch);
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

    /// Caches a new page, zero-filled, exclusively latched. Its block is
    /// compressed from the zero page; the caller's `commit` makes it dirty.
    pub(crate) fn create_page(&self, page_id: PageId) -> Result<(u32, LatchGuard<'_>)> {
        let (mut inner, memory) =
            self.with_memory(page_id, |inner| self.alloc_page_memory(inner))?;
        let Some(latch) = self.claim(&mut inner, page_id, memory) else {
            self.free_page_memory(&mut inner, memory);
            return Err(PoolError::AlreadyExists { page_id });
        };
        inner.reading_count += 1;
        drop(inner);
        if let Err(e) = self.format_new(page_id, memory) {
            self.abort_read(page_id, memory, latch);
            return Err(e);
        }
        let mut inner = self.inner.lock();
        inner.reading_count -= 1;
        inner.dirty[memory.desc as usize].unwritten = true;
        self.publish(&mut inner, memory, true);
        self.counters.pages_created.fetch_add(1, Ordering::Relaxed);
        Ok((memory.desc, latch))
    }

    /// Zero-fills a claimed page and compresses the zero page into its block.
    fn format_new(&self, page_id: PageId, memory: PageMemory) -> Result<()> {
        // SAFETY: just claimed for this page, pinned and latched by us.
        let frame = unsafe { self.frame_mut(memory.frame_chunk) };
        frame.fill(0);
        let outcome = if self.compressed {
            // SAFETY: as above.
            let block = unsafe { self.block_mut(memory.block_slot) };
            block.fill(0);
            self.services.codec.compress(page_id, frame, block)?
        } else {
            // The on-disk image of an uncompressed page is the page with the
            // codec's header: store it once to write that header.
            let mut image = vec![0; self.page_size_bytes];
            let outcome = self.services.codec.compress(page_id, frame, &mut image)?;
            frame.copy_from_slice(&image);
            outcome
        };
        if outcome == crate::backend::CompressOutcome::DoesNotFit {
            return Err(PoolError::Corrupted {
                page_id,
                reason: "a zero page does not fit its block".into(),
            });
        }
        Ok(())
    }

    /// Number of the pool's chunks (page-size units of the budget), less
    /// those lent ([`BufferPool::lend_bytes`]).
    pub fn chunk_count(&self) -> u32 {
        self.arena.chunk_count() - self.lent_chunks.load(Ordering::Relaxed)
    }

    /// Bytes of the budget the pool uses (its chunks, less those lent,
    /// times the page size).
    pub fn budget_bytes(&self) -> usize {
        self.chunk_count() as usize * self.arena.chunk_size_bytes()
    }
}

impl BufferPool {
    /// Evicts a page if it is cached, clean and unpinned (for tests and
    /// tools: forces the next fix to read). Returns whether it did.
    pub fn evict(&self, page_id: PageId) -> bool {
        let mut inner = self.inner.lock();
        let Some(d) = self.table.with_entry(page_id, |d| d) else {
            return false;
        };
        if inner.dirty[d as usize].dirty || !inner.lru.list().contains(d) {
            return false;
        }
        self.try_evict_page(&mut inner, d)
    }
}

impl BufferPool {
    /// Drops a page's uncompressed frame if it has one, is unpinned, and the
    /// unzip_LRU stays above its floor (for tests, benchmarks and tools: the
    /// next fix unzips). Returns whether it did.
    pub fn drop_frame(&self, page_id: PageId) -> bool {
        let mut inner = self.inner.lock();
        let Some(d) = self.table.with_entry(page_id, |d| d) else {
            return false;
        };
        let above_floor = inner.unzip.len() > PolicyState::floor_len(inner.lru.list().len());
        let frame_only = self.descs[d as usize].state() == State::FrameOnly;
        if !inner.unzip.contains(d) || !above_floor || frame_only {
            return false;
        }
        self.try_drop_frame(&mut inner, d)
    }
}

/// Where a miss found the page's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Read from the device (or, without the OS cache tier, from wherever
    /// the file layer read it).
    Device,
    /// Found whole in the OS page cache (the OS cache tier).
    OsCache,
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
