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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use barracuda_base::{Lsn, PageId};
use barracuda_codec::UNKNOWN_PAGE_ID;
use barracuda_io::Completion;
use parking_lot::{Mutex, MutexGuard};

use crate::arena::NIL;
use crate::cache::{AllocError, Cache, Inner, PageMemory, Services};
use crate::config::PoolConfig;
use crate::desc::{LatchGuard, State};
use crate::error::{PoolError, Result};
use crate::flush::Flusher;
use crate::guard::{ExclusiveGuard, SharedGuard};
use crate::invariants;
use crate::policy::PolicyState;
use crate::readahead::{Install, ReadAhead};
use crate::status::{LruEntry, PoolStatus};

/// A fix retries memory allocation after flushing a dirty victim at most
/// this many times before reporting the pool exhausted; each retry writes
/// one page, so this also bounds the I/O a single fix can cause.
const ALLOC_RETRIES_MAX: u32 = 64;

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

/// A buffer pool over one data file. See the crate documentation.
pub struct BufferPool {
    /// The cached pages and everything the operations below share.
    pub(crate) cache: Cache,
    /// Writes dirty pages.
    flusher: Flusher,
    /// Read-ahead reads in flight and their completions.
    read_ahead: ReadAhead,
    /// Serializes [`BufferPool::lend_bytes`]; never held with another lock
    /// taken first.
    lending: Mutex<()>,
    /// Bytes lent out of the budget so far.
    lent_bytes: AtomicU64,
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
        Ok(Self {
            cache: Cache::new(config, services)?,
            flusher: Flusher::default(),
            read_ahead: ReadAhead::default(),
            lending: Mutex::new(()),
            lent_bytes: AtomicU64::new(0),
        })
    }

    /// Opens a pool behind an `Arc`, so that read-ahead installs its
    /// completions on a pool-owned thread (started by the first
    /// [`BufferPool::prefetch`]) instead of on the threads that fix pages;
    /// see the module docs. Otherwise as [`BufferPool::open`].
    pub fn open_shared(config: PoolConfig, services: Services) -> Result<Arc<Self>> {
        let pool = Arc::new(Self::open(config, services)?);
        let owner = Arc::downgrade(&pool);
        let owner: std::sync::Weak<dyn Install> = owner;
        pool.read_ahead.set_owner(owner);
        Ok(pool)
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
        let chunk_bytes = self.cache.arena.chunk_size_bytes();
        let total = self.cache.arena.chunk_count();
        let want = lent_bytes.div_ceil(chunk_bytes);
        let keep = (LEND_KEEP_BYTES_MIN.div_ceil(chunk_bytes) as u32).min(total.div_ceil(2));
        if want > (total - keep) as usize {
            return Ok(false);
        }
        while (self.cache.lent_chunks.load(Ordering::Relaxed) as usize) < want {
            let (mut inner, chunk) =
                self.with_memory(UNKNOWN_PAGE_ID, |inner| self.cache.alloc_frame(inner, NIL))?;
            inner.alloc.lend(chunk);
            self.cache
                .lent_chunks
                .store(inner.alloc.lent_chunk_count(), Ordering::Relaxed);
            drop(inner);
            self.cache.arena.release(chunk);
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
        let want = lent_bytes.div_ceil(self.cache.arena.chunk_size_bytes());
        let mut inner = self.cache.inner.lock();
        while inner.alloc.lent_chunk_count() as usize > want {
            if inner.alloc.take_back().is_none() {
                break;
            }
        }
        self.cache
            .lent_chunks
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
        let inner = self.cache.inner.lock();
        let (hits, len) = inner.policy.ghost_blocks_sample();
        let slot_bytes =
            self.cache.arena.chunk_size_bytes() / inner.alloc.slots_per_chunk() as usize;
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
        &self.cache.config
    }

    /// Packs pages from now on (or stops): a page fits its block when its
    /// compressed image does, with no room kept for the modification log
    /// ([`PageCodec::set_packing`](crate::PageCodec::set_packing)). A compaction packs the tree it writes.
    /// Afterwards a packed block stays packed while its page fits it (a
    /// change that does not fit the little log room left recompresses it,
    /// again with no reserve), and the tree splits the page once it does
    /// not fit.
    pub fn set_packing(&self, packing: bool) {
        self.cache.services.codec.set_packing(packing);
    }

    /// Whether `page_id` is cached, was created in memory
    /// ([`BufferPool::create`]) and has not been written to the file since:
    /// the file holds no block of it to recover from, so the log must carry
    /// its whole image. False for a page that is not cached (a page leaves
    /// the pool only written).
    pub fn is_unwritten(&self, page_id: PageId) -> bool {
        self.flusher.is_unwritten(&self.cache, page_id)
    }

    /// Gives a page committed with `commit_pending_lsn` the LSN of its log
    /// record. Returns false if the page is not cached or not dirty.
    pub fn set_page_lsn(&self, page_id: PageId, lsn: Lsn) -> bool {
        self.flusher.set_page_lsn(&self.cache, page_id, lsn)
    }

    /// Writes dirty pages from the LRU list's tail, a batch at a time,
    /// until a look at its last 256 pages finds none or that many were
    /// written: what the page cleaner does while memory is short (InnoDB's
    /// LRU flush), so that threads that need memory find clean pages to
    /// evict instead of writing victims themselves. A batch is at most the
    /// file's queue depth and 1/32 of the pool, and a page whose latch is
    /// taken is left for later (its holder may be waiting for memory).
    /// Returns the number written.
    pub fn flush_lru_tail(&self) -> Result<usize> {
        self.flusher.flush_lru_tail(&self.cache)
    }

    /// Writes up to `page_count_max` dirty pages, oldest modification first,
    /// skipping pages whose changes are not yet durable in the log. Pages
    /// go out in batches of up to the file's queue depth, each page copied
    /// once into an aligned buffer under its shared latch, which is released
    /// before the I/O. Returns the number written.
    pub fn flush_some(&self, page_count_max: usize) -> Result<usize> {
        self.flusher.flush_some(&self.cache, page_count_max)
    }

    /// Writes what a checkpoint at `target` needs: the dirty pages whose
    /// oldest modification is at or before `target`, oldest first, as
    /// [`BufferPool::flush_some`] does. Pages first changed after `target`
    /// are left for later, so a checkpoint does not chase the writers that
    /// keep changing pages while it runs, unless the pool is short of
    /// memory (less than a quarter free): then eviction needs clean pages
    /// (a dirty victim is written alone, on the thread that needs the
    /// memory), and every dirty page is written. Returns the number written.
    pub fn flush_for_checkpoint(&self, target: Lsn) -> Result<usize> {
        self.flusher.flush_for_checkpoint(&self.cache, target)
    }

    /// Writes every dirty page whose changes are durable, then syncs the
    /// file. Returns the number of pages written.
    pub fn flush_all(&self) -> Result<usize> {
        self.flusher.flush_all(&self.cache)
    }

    /// Number of dirty pages.
    pub fn dirty_page_count(&self) -> u32 {
        self.flusher.dirty_page_count(&self.cache)
    }

    /// The oldest modification LSN of any dirty page (the checkpoint may not
    /// move past it), or `None` when nothing is dirty.
    pub fn oldest_dirty_lsn(&self) -> Option<Lsn> {
        self.flusher.oldest_dirty_lsn(&self.cache)
    }

    /// Gives back what the data file holds past its last page: the zeros
    /// the file layer writes ahead of new pages, and the doublewrite area
    /// ([`PageFile::trim`]). For a clean close and the end of a compaction,
    /// when no page is dirty.
    ///
    /// [`PageFile::trim`]: crate::PageFile::trim
    pub fn trim_file(&self) -> Result<()> {
        self.cache.services.file.trim()
    }

    /// Whether `page_id` is cached (or being read into the cache): a fix of
    /// it reads nothing from the file. A hint only: the page may be evicted
    /// or read in right after.
    pub fn is_cached(&self, page_id: PageId) -> bool {
        self.cache.table.with_entry(page_id, |_| ()).is_some()
    }

    /// Hints that `page_ids` will be fixed soon. Pages that are not cached
    /// (nor being read) are read asynchronously as one batch through the
    /// file layer, verified, and cached compressed-only in the old sublist;
    /// a fix of a page still in flight waits for that read.
    ///
    /// Never waits for a latch or for I/O and never exceeds the budget: it
    /// only takes memory it can get by evicting clean, unpinned pages, and
    /// stops at the first page it cannot place (or when read-ahead already
    /// holds a quarter of the pool). Failed reads are dropped from the
    /// read-ahead (logged, counted in `read_ahead_failed`), and a later fix
    /// of the page reads it again and reports the error.
    ///
    /// Returns the number of reads submitted.
    pub fn prefetch(&self, page_ids: &[PageId]) -> usize {
        self.read_ahead.prefetch(&self.cache, page_ids)
    }

    /// Reads ahead submitted and not yet installed.
    pub fn read_ahead_in_flight(&self) -> u32 {
        self.read_ahead.in_flight_count()
    }

    /// Installs every read-ahead completion that has arrived, unless another
    /// thread is installing (or the pool's installer thread does it). Never
    /// waits. Returns how many it installed.
    pub fn drain_read_ahead(&self) -> usize {
        self.read_ahead.drain(&self.cache)
    }

    /// Fixes a page for reading: pins it, latches it shared, and makes sure
    /// its frame holds the page (reading or decompressing as needed).
    pub fn fix_shared(&self, page_id: PageId) -> Result<SharedGuard<'_>> {
        self.fix_shared_as(page_id, Access::Scan)
    }

    /// Fixes a page for reading, telling the LRU what kind of access this is
    /// ([`Access`]: a point read's re-reference makes an old page young).
    pub fn fix_shared_as(&self, page_id: PageId, access: Access) -> Result<SharedGuard<'_>> {
        let (desc, latch) = self.fix(page_id, false, access)?;
        Ok(SharedGuard::new(&self.cache, desc, page_id, latch))
    }

    /// Fixes a page for writing.
    pub fn fix_exclusive(&self, page_id: PageId) -> Result<ExclusiveGuard<'_>> {
        let (desc, latch) = self.fix(page_id, true, Access::Scan)?;
        Ok(ExclusiveGuard::new(
            &self.cache,
            desc,
            page_id,
            latch,
            false,
        ))
    }

    /// Caches a new, zero-filled page (no read), exclusively fixed. It
    /// becomes dirty at its first `commit`.
    pub fn create(&self, page_id: PageId) -> Result<ExclusiveGuard<'_>> {
        let (desc, latch) = self.create_page(page_id)?;
        Ok(ExclusiveGuard::new(&self.cache, desc, page_id, latch, true))
    }

    /// A snapshot of the counters; the hit rate covers the time since the
    /// previous call, as InnoDB's does since the previous status printout.
    pub fn status(&self) -> PoolStatus {
        PoolStatus::collect(&self.cache, self.lent_bytes())
    }

    /// The LRU from head (most recent) to tail, for tests, `barracuda dump`
    /// and debugging. Takes the pool mutex for the whole walk.
    pub fn lru_snapshot(&self) -> Vec<LruEntry> {
        LruEntry::snapshot(&self.cache)
    }

    /// Checks every invariant of the pool and panics on the first broken
    /// one. Holds the pool mutex; meant for tests, fuzzing and debug builds.
    /// Concurrent fixes may run, but reads in flight are allowed for.
    pub fn check_invariants(&self) {
        invariants::check(&self.cache);
    }

    /// Number of the pool's chunks (page-size units of the budget), less
    /// those lent ([`BufferPool::lend_bytes`]).
    pub fn chunk_count(&self) -> u32 {
        self.cache.chunk_count()
    }

    /// Bytes of the budget the pool uses (its chunks, less those lent,
    /// times the page size).
    pub fn budget_bytes(&self) -> usize {
        self.cache.budget_bytes()
    }

    /// Evicts a page if it is cached, clean and unpinned (for tests and
    /// tools: forces the next fix to read). Returns whether it did.
    pub fn evict(&self, page_id: PageId) -> bool {
        let mut inner = self.cache.inner.lock();
        let Some(d) = self.cache.table.with_entry(page_id, |d| d) else {
            return false;
        };
        if inner.dirty[d as usize].dirty || !inner.lru.list().contains(d) {
            return false;
        }
        self.cache.try_evict_page(&mut inner, d)
    }

    /// Drops a page's uncompressed frame if it has one, is unpinned, and the
    /// unzip_LRU stays above its floor (for tests, benchmarks and tools: the
    /// next fix unzips). Returns whether it did.
    pub fn drop_frame(&self, page_id: PageId) -> bool {
        let mut inner = self.cache.inner.lock();
        let Some(d) = self.cache.table.with_entry(page_id, |d| d) else {
            return false;
        };
        let above_floor = inner.unzip.len() > PolicyState::floor_len(inner.lru.list().len());
        let frame_only = self.cache.descs[d as usize].state() == State::FrameOnly;
        if !inner.unzip.contains(d) || !above_floor || frame_only {
            return false;
        }
        self.cache.try_drop_frame(&mut inner, d)
    }

    /// Fixes a page: on return it is pinned and latched (shared or
    /// exclusive, the returned latch) and its frame holds the page.
    fn fix(
        &self,
        page_id: PageId,
        exclusive: bool,
        access: Access,
    ) -> Result<(u32, LatchGuard<'_>)> {
        self.cache.counters.page_gets.add(1);
        loop {
            let pinned = self.cache.table.with_entry(page_id, |d| {
                self.cache.descs[d as usize].pin();
                d
            });
            if let Some(d) = pinned {
                if self.cache.descs[d as usize].state() == State::ReadAhead {
                    self.read_ahead.wait(&self.cache, d);
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
        let desc = &self.cache.descs[d as usize];
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
        let desc = &self.cache.descs[d as usize];
        if desc.in_os_cache.load(Ordering::Relaxed) {
            // A page on probation hit in the pool: the pool keeps it.
            self.uncache_page(d);
        }
        let first_ms = desc.first_access_ms.load(Ordering::Relaxed);
        if first_ms == 0 {
            // The first access of a page read ahead (or racing with one).
            desc.first_access_ms
                .store(self.cache.now_ms(), Ordering::Relaxed);
            desc.prefetched.store(false, Ordering::Relaxed);
            return;
        }
        let evict_clock = self.cache.evict_clock.load(Ordering::Relaxed);
        if evict_clock == 0 {
            // No eviction yet: warm-up or an in-memory load; InnoDB does not
            // reorder the LRU then.
            return;
        }
        // The clock is read only for an old page a scan touches: a hit on a
        // young page (most hits) costs no clock call.
        let too_old = if self.cache.old_flags.get(d) {
            access == Access::Point
                || self.cache.now_ms().saturating_sub(first_ms)
                    >= self.cache.config.old_blocks_time_ms
        } else {
            // Young pages move only once they drifted a quarter of the young
            // sublist from the head (InnoDB's `buf_page_peek_if_young`).
            let lru_len = u64::from(self.cache.lru_len.load(Ordering::Relaxed));
            let distance = lru_len * u64::from(100 - self.cache.config.old_blocks_pct) / 400;
            evict_clock > desc.young_clock.load(Ordering::Relaxed) + distance
        };
        if too_old {
            let mut inner = self.cache.inner.lock();
            self.cache.make_young(&mut inner, d);
        } else if self.cache.old_flags.get(d) {
            self.cache
                .counters
                .not_made_young
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Decompresses the block of a pinned, exclusively latched,
    /// compressed-only page into a new frame. For a reader (`!for_writer`)
    /// the block is then dropped if the policy keeps frames alone.
    fn unzip(&self, d: u32, page_id: PageId, for_writer: bool) -> Result<()> {
        let desc = &self.cache.descs[d as usize];
        let (inner, chunk) = self.with_memory(page_id, |inner| self.cache.alloc_frame(inner, d))?;
        drop(inner);
        let started = Instant::now();
        let decompressed = {
            // SAFETY: the block slot and the new frame belong to this page,
            // which we hold pinned and exclusively latched; the frame chunk
            // was just allocated and is reachable by nobody else.
            let (block, frame) = unsafe {
                (
                    self.cache.block(desc.block_slot()),
                    self.cache.frame_mut(chunk),
                )
            };
            self.cache.services.codec.decompress(page_id, block, frame)
        };
        let cost_ns = started.elapsed().as_nanos() as f64;
        let mut inner = self.cache.inner.lock();
        if let Err(e) = decompressed {
            inner.alloc.free_frame(chunk);
            return Err(e);
        }
        desc.set_frame_chunk(chunk);
        inner.chunk_owner[chunk as usize] = d;
        desc.set_state(State::Both);
        self.cache.unzip_insert(&mut inner, d);
        inner.stats.advance(self.cache.now_ms());
        inner.stats.add_unzip();
        let lru_len = inner.lru.list().len();
        inner.policy.unzipped(page_id, cost_ns, true, lru_len);
        if !for_writer {
            self.cache.shed_block_if_frames_only(&mut inner, d);
        }
        self.cache.counters.unzips.fetch_add(1, Ordering::Relaxed);
        self.cache
            .counters
            .unzip_time_ns
            .fetch_add(cost_ns as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Runs an allocation under the pool mutex, writing dirty victims and
    /// retrying as needed. Returns with the mutex held.
    fn with_memory<T>(
        &self,
        page_id: PageId,
        mut alloc: impl FnMut(&mut Inner) -> Result<T, AllocError>,
    ) -> Result<(MutexGuard<'_, Inner>, T)> {
        let mut waited_ms = 0;
        for _ in 0..ALLOC_RETRIES_MAX + self.cache.config.exhausted_wait_ms {
            let mut inner = self.cache.inner.lock();
            inner.stats.advance(self.cache.now_ms());
            match alloc(&mut inner) {
                Ok(value) => return Ok((inner, value)),
                Err(AllocError::NeedFlush(victim)) => {
                    drop(inner);
                    self.flusher.flush_victims(&self.cache, victim)?;
                }
                Err(AllocError::Exhausted(reason)) => {
                    // Pages are pinned by other threads: wait for them to be
                    // released, as InnoDB's `buf_LRU_get_free_block` does,
                    // but not forever.
                    drop(inner);
                    // Read-ahead pages may be pinned only because nobody
                    // installed their completed reads yet.
                    if self.read_ahead.drain(&self.cache) > 0 {
                        continue;
                    }
                    // Dirty pages may wait only for the log (a database that
                    // does not sync every commit): ask for it.
                    self.cache.services.durable_lsn.request_durable();
                    if waited_ms >= self.cache.config.exhausted_wait_ms {
                        return Err(PoolError::Exhausted { page_id, reason });
                    }
                    self.cache
                        .counters
                        .memory_waits
                        .fetch_add(1, Ordering::Relaxed);
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

    /// Reads the block of a pinned, exclusively latched `FrameOnly` page
    /// back from the file (the page is clean, so the file holds its block),
    /// making it `Both` again.
    fn reload_block(&self, d: u32, page_id: PageId) -> Result<()> {
        let desc = &self.cache.descs[d as usize];
        let (inner, slot) = self.with_memory(page_id, |inner| {
            let slot = self.cache.alloc_slot(inner)?;
            // Owned from now on, so compaction sees a pinned page's slot
            // and leaves it alone.
            inner.slot_owner[slot as usize] = d;
            Ok(slot)
        })?;
        drop(inner);
        // SAFETY: the slot was just allocated and is reachable by nobody
        // else; the page is pinned and exclusively latched by us.
        let loaded = self.read_unit(page_id, unsafe { self.cache.block_mut(slot) });
        let mut inner = self.cache.inner.lock();
        if let Err(e) = loaded {
            inner.alloc.free_slot(slot);
            inner.slot_owner[slot as usize] = NIL;
            return Err(e);
        }
        desc.set_block_slot(slot);
        desc.set_state(State::Both);
        // With the tier, the page cache may hold the block now too: the
        // fix's `touch` drops it, as for any page the pool keeps.
        if self.cache.config.os_cache_tier {
            desc.in_os_cache.store(true, Ordering::Relaxed);
        }
        inner.stats.advance(self.cache.now_ms());
        inner.stats.add_io(1);
        drop(inner);
        // Not a miss: `pages_read` and the miss time stay the misses'.
        self.cache
            .counters
            .blocks_reloaded
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A miss: reads, verifies and decompresses the page. `None` if another
    /// thread cached it meanwhile (the caller retries the lookup).
    fn read_page(&self, page_id: PageId, exclusive: bool) -> Result<Option<(u32, LatchGuard<'_>)>> {
        let (mut inner, memory) =
            self.with_memory(page_id, |inner| self.cache.alloc_page_memory(inner))?;
        let Some(mut latch) = self.cache.claim(&mut inner, page_id, memory) else {
            self.cache.free_page_memory(&mut inner, memory);
            return Ok(None);
        };
        inner.reading_count += 1;
        drop(inner);
        let d = memory.desc;
        match self.load(page_id, memory) {
            Ok((read_ns, unzip_ns, source)) => {
                let on_probation = self.cache.config.os_cache_tier && source == Source::Device;
                let mut inner = self.cache.inner.lock();
                inner.reading_count -= 1;
                if on_probation {
                    self.cache.publish_on_probation(&mut inner, memory);
                } else {
                    self.cache.publish(&mut inner, memory, false);
                }
                let lru_len = inner.lru.list().len();
                inner.stats.advance(self.cache.now_ms());
                inner.stats.add_io(1);
                inner
                    .policy
                    .missed(page_id, read_ns, lru_len, self.cache.now_ms());
                if self.cache.compressed {
                    inner.stats.add_unzip();
                    inner.policy.unzipped(page_id, unzip_ns, false, lru_len);
                    self.cache
                        .counters
                        .unzip_time_ns
                        .fetch_add(unzip_ns as u64, Ordering::Relaxed);
                    if !exclusive {
                        self.cache.shed_block_if_frames_only(&mut inner, d);
                    }
                }
                drop(inner);
                self.cache
                    .counters
                    .pages_read
                    .fetch_add(1, Ordering::Relaxed);
                self.cache
                    .counters
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
                    self.cache
                        .counters
                        .os_cache_reads
                        .fetch_add(1, Ordering::Relaxed);
                    self.cache.services.file.uncache(
                        self.cache.unit_offset(page_id),
                        self.cache.unit_size_bytes as u64,
                    );
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
        let frame = unsafe { self.cache.frame_mut(memory.frame_chunk) };
        if !self.cache.compressed {
            let source = self.read_unit(page_id, frame)?;
            return Ok((started.elapsed().as_nanos() as f64, 0.0, source));
        }
        // SAFETY: as above, for the block slot.
        let block = unsafe { self.cache.block_mut(memory.block_slot) };
        let source = self.read_unit(page_id, block)?;
        let read_ns = started.elapsed().as_nanos() as f64;
        let started = Instant::now();
        self.cache
            .services
            .codec
            .decompress(page_id, block, frame)?;
        Ok((read_ns, started.elapsed().as_nanos() as f64, source))
    }

    /// Reads the page's on-disk unit (its block, or the page when
    /// uncompressed) into `unit` and verifies its checksum and page id.
    /// With the OS cache tier, from the OS page cache if it holds the unit.
    fn read_unit(&self, page_id: PageId, unit: &mut [u8]) -> Result<Source> {
        let offset = self.cache.unit_offset(page_id);
        let file = &self.cache.services.file;
        let source = if self.cache.config.os_cache_tier && file.read_if_cached(offset, unit)? {
            Source::OsCache
        } else {
            file.read_at(offset, unit)?;
            Source::Device
        };
        self.cache.services.codec.verify(page_id, unit)?;
        Ok(source)
    }

    /// Drops the OS page cache's copy of a page the pool now keeps (the OS
    /// cache tier), if it may hold one.
    fn uncache_page(&self, d: u32) {
        let desc = &self.cache.descs[d as usize];
        if desc.in_os_cache.swap(false, Ordering::Relaxed) {
            self.cache.services.file.uncache(
                self.cache.unit_offset(desc.page_id()),
                self.cache.unit_size_bytes as u64,
            );
        }
    }

    /// Undoes a claimed read that failed: waiters will see `Failed`.
    fn abort_read(&self, page_id: PageId, memory: PageMemory, latch: LatchGuard<'_>) {
        self.cache
            .abort_claim(page_id, memory, State::Failed, latch);
    }

    /// Caches a new page, zero-filled, exclusively latched. Its block is
    /// compressed from the zero page; the caller's `commit` makes it dirty.
    fn create_page(&self, page_id: PageId) -> Result<(u32, LatchGuard<'_>)> {
        let (mut inner, memory) =
            self.with_memory(page_id, |inner| self.cache.alloc_page_memory(inner))?;
        let Some(latch) = self.cache.claim(&mut inner, page_id, memory) else {
            self.cache.free_page_memory(&mut inner, memory);
            return Err(PoolError::AlreadyExists { page_id });
        };
        inner.reading_count += 1;
        drop(inner);
        if let Err(e) = self.format_new(page_id, memory) {
            self.abort_read(page_id, memory, latch);
            return Err(e);
        }
        let mut inner = self.cache.inner.lock();
        inner.reading_count -= 1;
        inner.dirty[memory.desc as usize].unwritten = true;
        self.cache.publish(&mut inner, memory, true);
        self.cache
            .counters
            .pages_created
            .fetch_add(1, Ordering::Relaxed);
        Ok((memory.desc, latch))
    }

    /// Zero-fills a claimed page and compresses the zero page into its block.
    fn format_new(&self, page_id: PageId, memory: PageMemory) -> Result<()> {
        // SAFETY: just claimed for this page, pinned and latched by us.
        let frame = unsafe { self.cache.frame_mut(memory.frame_chunk) };
        frame.fill(0);
        let outcome = if self.cache.compressed {
            // SAFETY: as above.
            let block = unsafe { self.cache.block_mut(memory.block_slot) };
            block.fill(0);
            self.cache.services.codec.compress(page_id, frame, block)?
        } else {
            // The on-disk image of an uncompressed page is the page with the
            // codec's header: store it once to write that header.
            let mut image = vec![0; self.cache.page_size_bytes];
            let outcome = self
                .cache
                .services
                .codec
                .compress(page_id, frame, &mut image)?;
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
}

impl Install for BufferPool {
    fn install(&self, completion: Completion) {
        self.read_ahead.install(&self.cache, completion);
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
