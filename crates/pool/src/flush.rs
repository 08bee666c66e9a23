//! Dirty pages: the flush list ordered by oldest modification, page writes
//! under the write-ahead rule, and a background flusher.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use barracuda_codec::Lsn;
use barracuda_io::IoRequest;

use crate::arena::NIL;
use crate::cleaner::{CleanerRegistration, PageCleaner};
use crate::error::Result;
use crate::pool::BufferPool;

/// How many pages from the LRU list's tail [`BufferPool::flush_victims`]
/// looks at for dirty pages to write with a victim (InnoDB's
/// `innodb_lru_scan_depth` is per buffer pool instance and larger; this
/// bounds the work under the pool mutex).
pub(crate) const LRU_FLUSH_SCAN_MAX: usize = 256;

/// A victim's batch from the LRU list's tail takes at most this share of
/// the pool's chunks (1/32).
pub(crate) const LRU_FLUSH_POOL_SHARE: usize = 32;

impl BufferPool {
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
        let mut after = NIL;
        let mut next = inner.flush.head();
        while next != NIL && inner.dirty[next as usize].oldest > lsn {
            after = next;
            next = inner.flush.next(next);
        }
        inner.flush.insert_after(after, d);
    }

    /// Whether `page_id` is cached, was created in memory
    /// ([`BufferPool::create`]) and has not been written to the file since:
    /// the file holds no block of it to recover from, so the log must carry
    /// its whole image. False for a page that is not cached (a page leaves
    /// the pool only written).
    pub fn is_unwritten(&self, page_id: barracuda_codec::PageId) -> bool {
        let Some(d) = self.table.with_entry(page_id, |d| d) else {
            return false;
        };
        let inner = self.inner.lock();
        self.descs[d as usize].page_id() == page_id && inner.dirty[d as usize].unwritten
    }

    /// Whether a page whose newest change is `newest` may be written now.
    pub(crate) fn writable(&self, newest: Lsn) -> bool {
        self.durable_at(newest, self.services.durable_lsn.durable_lsn())
    }

    /// The write-ahead rule: the log is durable up to the page's newest
    /// change, which is a real LSN (not [`crate::LSN_PENDING`]).
    pub(crate) fn durable_at(&self, newest: Lsn, durable: Lsn) -> bool {
        newest != crate::guard::LSN_PENDING && newest <= durable
    }

    /// Gives a page committed with `commit_pending_lsn` the LSN of its log
    /// record. Returns false if the page is not cached or not dirty.
    pub fn set_page_lsn(&self, page_id: barracuda_codec::PageId, lsn: Lsn) -> bool {
        let mut inner = self.inner.lock();
        let Some(d) = self.table.with_entry(page_id, |d| d) else {
            return false;
        };
        let dirty = &mut inner.dirty[d as usize];
        if !dirty.dirty {
            return false;
        }
        if dirty.newest == crate::guard::LSN_PENDING {
            dirty.newest = lsn;
        }
        if dirty.oldest == crate::guard::LSN_PENDING {
            // Re-insert at its place in the flush list's LSN order.
            dirty.oldest = lsn;
            inner.flush.remove(d);
            let mut after = NIL;
            let mut next = inner.flush.head();
            while next != NIL && inner.dirty[next as usize].oldest > lsn {
                after = next;
                next = inner.flush.next(next);
            }
            inner.flush.insert_after(after, d);
        }
        true
    }

    /// Writes a victim the caller pinned, with up to a batch of other dirty
    /// pages from the LRU list's tail, as InnoDB's LRU flush does: the next
    /// allocations then find clean pages at the tail instead of each
    /// writing one page, and a batch of page writes costs one sync of the
    /// doublewrite area. One thread at a time writes such a batch (others
    /// write their victim alone), of at most the file's queue depth and
    /// [`LRU_FLUSH_POOL_SHARE`] of the pool: pages being written can be
    /// neither evicted nor chosen as victims, and a small pool shared by
    /// many threads would run out of both. Each page is written only if its
    /// latch is free right now (the caller may hold other latches, so it
    /// must not wait). Unpins `first`, which the caller pinned.
    pub(crate) fn flush_victims(&self, first: u32) -> Result<()> {
        let mut victims = vec![first];
        let batching = !self.lru_flushing.swap(true, Ordering::AcqRel);
        if batching {
            let share = self.chunk_count() as usize / LRU_FLUSH_POOL_SHARE;
            let batch_max = self.services.file.queue_depth().min(share).max(1);
            self.pin_lru_dirty(first, batch_max, &mut victims);
        }
        let (_, outcome) = self.write_pinned(&victims);
        if batching {
            self.lru_flushing.store(false, Ordering::Release);
        }
        outcome
    }

    /// Writes the pinned pages `victims` whose latches are free right now,
    /// as one batch, and unpins them all. Returns how many were written and
    /// the first error.
    fn write_pinned(&self, victims: &[u32]) -> (usize, Result<()>) {
        let mut requests = Vec::with_capacity(victims.len());
        let mut versions = Vec::with_capacity(victims.len());
        let mut outcome = Ok(());
        for &d in victims {
            let desc = &self.descs[d as usize];
            if outcome.is_ok()
                && let Some(latch) = desc.try_latch_shared()
            {
                let copied = self.copy_for_write(d, requests.len() as u64);
                drop(latch);
                match copied {
                    Ok(Some((request, version))) => {
                        requests.push(request);
                        versions.push((d, version));
                    }
                    Ok(None) => {}
                    Err(e) => outcome = Err(e),
                }
            }
            // A page being written stays dirty (so it is not evicted)
            // until its write ends: the pin is no longer needed.
            desc.unpin();
        }
        if requests.is_empty() {
            return (0, outcome);
        }
        let (written, write_error) = self.write_copied(requests, &versions);
        match write_error {
            Some(e) if outcome.is_ok() => (written, Err(e)),
            _ => (written, outcome),
        }
    }

    /// Pins dirty pages (but `skip`) from the LRU list's tail that may be
    /// written now, until `victims` holds `count_max` or
    /// [`LRU_FLUSH_SCAN_MAX`] pages were looked at.
    fn pin_lru_dirty(&self, skip: u32, count_max: usize, victims: &mut Vec<u32>) {
        let durable = self.services.durable_lsn.durable_lsn();
        let inner = self.inner.lock();
        let mut d = inner.lru.list().tail();
        let mut scanned = 0;
        while d != NIL && victims.len() < count_max && scanned < LRU_FLUSH_SCAN_MAX {
            let dirty = inner.dirty[d as usize];
            let desc = &self.descs[d as usize];
            if d != skip
                && dirty.dirty
                && !dirty.writing
                && self.durable_at(dirty.newest, durable)
                && desc.pins() == 0
            {
                let page_id = desc.page_id();
                if let Some(e) = self.table.with_entry(page_id, |e| {
                    self.descs[e as usize].pin();
                    e
                }) {
                    victims.push(e);
                }
            }
            scanned += 1;
            d = inner.lru.list().prev(d);
        }
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
        let share = self.chunk_count() as usize / LRU_FLUSH_POOL_SHARE;
        let batch_max = self.services.file.queue_depth().min(share).max(1);
        let mut written = 0;
        while written < LRU_FLUSH_SCAN_MAX {
            let mut victims = Vec::with_capacity(batch_max);
            self.pin_lru_dirty(NIL, batch_max, &mut victims);
            if victims.is_empty() {
                break;
            }
            let (batch, outcome) = self.write_pinned(&victims);
            written += batch;
            outcome?;
            if batch == 0 {
                break;
            }
        }
        Ok(written)
    }

    /// Copies a pinned page, latched shared by the caller, into an aligned
    /// buffer of the file layer (the only copy a write makes), sealed with
    /// its newest LSN, and marks it `writing`. `None` if it is clean, being
    /// written by another flusher, or its changes are not durable in the
    /// log yet. Returns the write request (tagged `tag`) and the page's
    /// version at the copy.
    fn copy_for_write(&self, d: u32, tag: u64) -> Result<Option<(IoRequest, u64)>> {
        let desc = &self.descs[d as usize];
        let page_id = desc.page_id();
        let (newest, version) = {
            let mut inner = self.inner.lock();
            let dirty = &mut inner.dirty[d as usize];
            if !dirty.dirty || dirty.writing {
                return Ok(None);
            }
            if !self.writable(dirty.newest) {
                self.counters
                    .write_ahead_waits
                    .fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
            dirty.writing = true;
            (dirty.newest, dirty.version)
        };
        let mut buf = self.services.file.alloc_buf(self.unit_size_bytes);
        // SAFETY: the page is pinned and latched (shared), so its block and
        // frame are not written while we copy them.
        let image = unsafe {
            if self.compressed {
                self.block(desc.block_slot())
            } else {
                self.frame(desc.frame_chunk())
            }
        };
        buf.copy_from_slice(image);
        if let Err(e) = self.services.codec.seal(page_id, &mut buf, newest) {
            self.inner.lock().dirty[d as usize].writing = false;
            return Err(e);
        }
        let offset_bytes = self.unit_offset(page_id);
        Ok(Some((IoRequest::write(offset_bytes, buf, tag), version)))
    }

    /// Ends the write of a page copied at `version`: clears `writing`, and
    /// cleans the page unless a commit came after the copy (then it stays
    /// dirty with its older `oldest`, which only holds the checkpoint back).
    /// Returns whether the page was written.
    fn finish_write(&self, d: u32, version: u64, result: Result<()>) -> Result<bool> {
        let mut inner = self.inner.lock();
        inner.dirty[d as usize].writing = false;
        result?;
        inner.dirty[d as usize].unwritten = false;
        if inner.dirty[d as usize].version == version {
            inner.dirty[d as usize].dirty = false;
            inner.flush.remove(d);
        }
        inner.stats.advance(self.now_ms());
        inner.stats.add_io(1);
        self.counters.pages_written.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Writes up to `page_count_max` dirty pages, oldest modification first,
    /// skipping pages whose changes are not yet durable in the log. Pages
    /// go out in batches of up to the file's queue depth, each page copied
    /// once into an aligned buffer under its shared latch, which is released
    /// before the I/O. Returns the number written.
    pub fn flush_some(&self, page_count_max: usize) -> Result<usize> {
        self.flush_oldest(page_count_max, Lsn(u64::MAX))
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
        let through = if self.memory_is_short() {
            Lsn(u64::MAX)
        } else {
            target
        };
        self.flush_oldest(usize::MAX, through)
    }

    /// Writes up to `page_count_max` dirty pages whose oldest modification
    /// is at or before `through`, oldest first.
    fn flush_oldest(&self, page_count_max: usize, through: Lsn) -> Result<usize> {
        let depth = self.services.file.queue_depth().max(1);
        let mut written = 0;
        let mut skipped = 0;
        while written < page_count_max {
            let batch_max = depth.min(page_count_max - written);
            let (requests, versions, copy_error) =
                self.copy_batch(batch_max, through, &mut skipped);
            if requests.is_empty() {
                return copy_error.map_or(Ok(written), Err);
            }
            let (batch, write_error) = self.write_copied(requests, &versions);
            written += batch;
            if let Some(e) = copy_error.or(write_error) {
                return Err(e);
            }
        }
        Ok(written)
    }

    /// Writes copied pages as one batch (`requests` tagged with their index
    /// in `versions`, each page's descriptor and version at the copy) and
    /// ends each write. Returns how many were written and the first error.
    fn write_copied(
        &self,
        requests: Vec<IoRequest>,
        versions: &[(u32, u64)],
    ) -> (usize, Option<crate::PoolError>) {
        let results = self.services.file.write_batch(requests);
        self.counters.write_batches.fetch_add(1, Ordering::Relaxed);
        let mut written = 0;
        let mut first_error = None;
        for (tag, result) in results {
            let (d, version) = versions[tag as usize];
            match self.finish_write(d, version, result) {
                Ok(_) => written += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        (written, first_error)
    }

    /// Copies up to `batch_max` flush candidates for one batch. Latches one
    /// page at a time (a flusher holding several could deadlock with a tree
    /// thread). Returns the requests (tag = index in the versions), each
    /// page's descriptor and version, and a copy error that ended the batch.
    #[allow(clippy::type_complexity)]
    fn copy_batch(
        &self,
        batch_max: usize,
        through: Lsn,
        skipped: &mut usize,
    ) -> (Vec<IoRequest>, Vec<(u32, u64)>, Option<crate::PoolError>) {
        let mut requests = Vec::with_capacity(batch_max);
        let mut versions = Vec::with_capacity(batch_max);
        while requests.len() < batch_max {
            let Some(d) = self.pin_flush_candidate(*skipped, through) else {
                break;
            };
            let desc = &self.descs[d as usize];
            let latch = desc.latch(false);
            let copied = self.copy_for_write(d, requests.len() as u64);
            drop(latch);
            desc.unpin();
            match copied {
                Ok(Some((request, version))) => {
                    requests.push(request);
                    versions.push((d, version));
                }
                Ok(None) => *skipped += 1,
                Err(e) => return (requests, versions, Some(e)),
            }
        }
        (requests, versions, None)
    }

    /// Pins the `skip`-th oldest dirty page whose changes are durable, that
    /// no flusher is writing, and whose oldest change is at or before
    /// `through`.
    fn pin_flush_candidate(&self, skip: usize, through: Lsn) -> Option<u32> {
        let durable = self.services.durable_lsn.durable_lsn();
        let inner = self.inner.lock();
        let mut d = inner.flush.tail();
        let mut to_skip = skip;
        while d != NIL {
            let dirty = inner.dirty[d as usize];
            if dirty.oldest > through {
                // The list is in oldest-change order: all the rest are
                // newer.
                return None;
            }
            if !dirty.writing && self.durable_at(dirty.newest, durable) {
                if to_skip == 0 {
                    let page_id = self.descs[d as usize].page_id();
                    return self.table.with_entry(page_id, |e| {
                        self.descs[e as usize].pin();
                        e
                    });
                }
                to_skip -= 1;
            }
            d = inner.flush.prev(d);
        }
        None
    }

    /// Writes every dirty page whose changes are durable, then syncs the
    /// file. Returns the number of pages written.
    pub fn flush_all(&self) -> Result<usize> {
        let written = self.flush_some(usize::MAX)?;
        self.services.file.sync_data()?;
        Ok(written)
    }

    /// Gives back what the data file holds past its last page: the zeros
    /// the file layer writes ahead of new pages, and the doublewrite area
    /// ([`PageFile::trim`]). For a clean close and the end of a compaction,
    /// when no page is dirty.
    ///
    /// [`PageFile::trim`]: crate::PageFile::trim
    pub fn trim_file(&self) -> Result<()> {
        self.services.file.trim()
    }

    /// Number of dirty pages.
    pub fn dirty_page_count(&self) -> u32 {
        self.inner.lock().flush.len()
    }

    /// The oldest modification LSN of any dirty page (the checkpoint may not
    /// move past it), or `None` when nothing is dirty.
    pub fn oldest_dirty_lsn(&self) -> Option<Lsn> {
        let inner = self.inner.lock();
        let tail = inner.flush.tail();
        (tail != NIL).then(|| inner.dirty[tail as usize].oldest)
    }

    /// Starts a thread that writes up to `batch_pages` dirty pages every
    /// `interval`, oldest change first ([`BufferPool::flush_some`]), and
    /// while memory is short and pages are dirty, the dirty pages at the
    /// LRU list's tail ([`BufferPool::flush_lru_tail`]) ten times per
    /// `interval` instead: a [`PageCleaner`] of this pool alone.
    /// It stops when the handle is dropped or the pool is gone.
    pub fn spawn_flusher(
        self: &Arc<Self>,
        interval: Duration,
        batch_pages: usize,
    ) -> FlusherHandle {
        let cleaner = PageCleaner::start(interval, batch_pages);
        let registration = cleaner.register(self);
        FlusherHandle {
            _registration: registration,
            _cleaner: cleaner,
        }
    }

    /// Whether less than a quarter of the pool's memory is free: eviction
    /// runs or soon will.
    pub(crate) fn memory_is_short(&self) -> bool {
        self.inner.lock().alloc.free_chunk_count() < self.chunk_count() / 4
    }
}

/// Stops the background flusher of [`BufferPool::spawn_flusher`] when
/// dropped.
pub struct FlusherHandle {
    // Dropped first: the pool leaves the cleaner, then the cleaner stops.
    _registration: CleanerRegistration,
    _cleaner: PageCleaner,
}
