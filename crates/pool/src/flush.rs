//! Dirty pages: writes of the pages on the flush list (ordered by oldest
//! modification) and at the LRU list's tail, under the write-ahead rule.
//! The flush list and the pages' dirty state are the cache's, under the
//! pool mutex; the background flusher is a page cleaner of one pool
//! ([`BufferPool::spawn_flusher`](crate::BufferPool::spawn_flusher)).

use std::sync::atomic::{AtomicBool, Ordering};

use barracuda_base::Lsn;
use barracuda_io::IoRequest;

use crate::arena::NIL;
use crate::cache::Cache;
use crate::desc::LSN_PENDING;
use crate::error::Result;

/// How many pages from the LRU list's tail [`Flusher::flush_victims`]
/// looks at for dirty pages to write with a victim (InnoDB's
/// `innodb_lru_scan_depth` is per buffer pool instance and larger; this
/// bounds the work under the pool mutex).
const LRU_FLUSH_SCAN_MAX: usize = 256;

/// A victim's batch from the LRU list's tail takes at most this share of
/// the pool's chunks (1/32).
const LRU_FLUSH_POOL_SHARE: usize = 32;

/// The pool's writer of dirty pages: the flush list's walks and the LRU
/// list's tail, batched under the write-ahead rule. The dirty state itself
/// is the cache's, under the pool mutex.
#[derive(Default)]
pub(crate) struct Flusher {
    /// A thread is writing a victim with a batch from the LRU list's tail
    /// ([`Flusher::flush_victims`]): others write their victim alone.
    lru_flushing: AtomicBool,
}

impl Flusher {
    /// See [`BufferPool::is_unwritten`](crate::BufferPool::is_unwritten).
    pub(crate) fn is_unwritten(&self, cache: &Cache, page_id: barracuda_base::PageId) -> bool {
        let Some(d) = cache.table.with_entry(page_id, |d| d) else {
            return false;
        };
        let inner = cache.inner.lock();
        cache.descs[d as usize].page_id() == page_id && inner.dirty[d as usize].unwritten
    }

    /// See [`BufferPool::set_page_lsn`](crate::BufferPool::set_page_lsn).
    pub(crate) fn set_page_lsn(
        &self,
        cache: &Cache,
        page_id: barracuda_base::PageId,
        lsn: Lsn,
    ) -> bool {
        let mut inner = cache.inner.lock();
        let Some(d) = cache.table.with_entry(page_id, |d| d) else {
            return false;
        };
        let dirty = &mut inner.dirty[d as usize];
        if !dirty.dirty {
            return false;
        }
        if dirty.newest == LSN_PENDING {
            dirty.newest = lsn;
        }
        if dirty.oldest == LSN_PENDING {
            // Re-insert at its place in the flush list's LSN order.
            dirty.oldest = lsn;
            inner.flush.remove(d);
            inner.insert_into_flush_list(d, lsn);
        }
        true
    }

    /// See [`BufferPool::flush_lru_tail`](crate::BufferPool::flush_lru_tail).
    pub(crate) fn flush_lru_tail(&self, cache: &Cache) -> Result<usize> {
        let share = cache.chunk_count() as usize / LRU_FLUSH_POOL_SHARE;
        let batch_max = cache.services.file.queue_depth().min(share).max(1);
        let mut written = 0;
        while written < LRU_FLUSH_SCAN_MAX {
            let mut victims = Vec::with_capacity(batch_max);
            self.pin_lru_dirty(cache, NIL, batch_max, &mut victims);
            if victims.is_empty() {
                break;
            }
            let (batch, outcome) = self.write_pinned(cache, &victims);
            written += batch;
            outcome?;
            if batch == 0 {
                break;
            }
        }
        Ok(written)
    }

    /// See [`BufferPool::flush_some`](crate::BufferPool::flush_some).
    pub(crate) fn flush_some(&self, cache: &Cache, page_count_max: usize) -> Result<usize> {
        self.flush_oldest(cache, page_count_max, Lsn(u64::MAX))
    }

    /// See [`BufferPool::flush_for_checkpoint`](crate::BufferPool::flush_for_checkpoint).
    pub(crate) fn flush_for_checkpoint(&self, cache: &Cache, target: Lsn) -> Result<usize> {
        let through = if cache.memory_is_short() {
            Lsn(u64::MAX)
        } else {
            target
        };
        self.flush_oldest(cache, usize::MAX, through)
    }

    /// See [`BufferPool::flush_all`](crate::BufferPool::flush_all).
    pub(crate) fn flush_all(&self, cache: &Cache) -> Result<usize> {
        let written = self.flush_some(cache, usize::MAX)?;
        cache.services.file.sync_data()?;
        Ok(written)
    }

    /// See [`BufferPool::dirty_page_count`](crate::BufferPool::dirty_page_count).
    pub(crate) fn dirty_page_count(&self, cache: &Cache) -> u32 {
        cache.inner.lock().flush.len()
    }

    /// See [`BufferPool::oldest_dirty_lsn`](crate::BufferPool::oldest_dirty_lsn).
    pub(crate) fn oldest_dirty_lsn(&self, cache: &Cache) -> Option<Lsn> {
        let inner = cache.inner.lock();
        let tail = inner.flush.tail();
        (tail != NIL).then(|| inner.dirty[tail as usize].oldest)
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
    pub(crate) fn flush_victims(&self, cache: &Cache, first: u32) -> Result<()> {
        let mut victims = vec![first];
        let batching = !self.lru_flushing.swap(true, Ordering::AcqRel);
        if batching {
            let share = cache.chunk_count() as usize / LRU_FLUSH_POOL_SHARE;
            let batch_max = cache.services.file.queue_depth().min(share).max(1);
            self.pin_lru_dirty(cache, first, batch_max, &mut victims);
        }
        let (_, outcome) = self.write_pinned(cache, &victims);
        if batching {
            self.lru_flushing.store(false, Ordering::Release);
        }
        outcome
    }

    /// Writes the pinned pages `victims` whose latches are free right now,
    /// as one batch, and unpins them all. Returns how many were written and
    /// the first error.
    fn write_pinned(&self, cache: &Cache, victims: &[u32]) -> (usize, Result<()>) {
        let mut requests = Vec::with_capacity(victims.len());
        let mut versions = Vec::with_capacity(victims.len());
        let mut outcome = Ok(());
        for &d in victims {
            let desc = &cache.descs[d as usize];
            if outcome.is_ok()
                && let Some(latch) = desc.try_latch_shared()
            {
                let copied = self.copy_for_write(cache, d, requests.len() as u64);
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
        let (written, write_error) = self.write_copied(cache, requests, &versions);
        match write_error {
            Some(e) if outcome.is_ok() => (written, Err(e)),
            _ => (written, outcome),
        }
    }

    /// Pins dirty pages (but `skip`) from the LRU list's tail that may be
    /// written now, until `victims` holds `count_max` or
    /// [`LRU_FLUSH_SCAN_MAX`] pages were looked at.
    fn pin_lru_dirty(&self, cache: &Cache, skip: u32, count_max: usize, victims: &mut Vec<u32>) {
        let durable = cache.services.durable_lsn.durable_lsn();
        let inner = cache.inner.lock();
        let mut d = inner.lru.list().tail();
        let mut scanned = 0;
        while d != NIL && victims.len() < count_max && scanned < LRU_FLUSH_SCAN_MAX {
            let dirty = inner.dirty[d as usize];
            let desc = &cache.descs[d as usize];
            if d != skip
                && dirty.dirty
                && !dirty.writing
                && cache.durable_at(dirty.newest, durable)
                && desc.pins() == 0
            {
                let page_id = desc.page_id();
                if let Some(e) = cache.table.with_entry(page_id, |e| {
                    cache.descs[e as usize].pin();
                    e
                }) {
                    victims.push(e);
                }
            }
            scanned += 1;
            d = inner.lru.list().prev(d);
        }
    }

    /// Copies a pinned page, latched shared by the caller, into an aligned
    /// buffer of the file layer (the only copy a write makes), sealed with
    /// its newest LSN, and marks it `writing`. `None` if it is clean, being
    /// written by another flusher, or its changes are not durable in the
    /// log yet. Returns the write request (tagged `tag`) and the page's
    /// version at the copy.
    fn copy_for_write(&self, cache: &Cache, d: u32, tag: u64) -> Result<Option<(IoRequest, u64)>> {
        let desc = &cache.descs[d as usize];
        let page_id = desc.page_id();
        let (newest, version) = {
            let mut inner = cache.inner.lock();
            let dirty = &mut inner.dirty[d as usize];
            if !dirty.dirty || dirty.writing {
                return Ok(None);
            }
            if !cache.writable(dirty.newest) {
                cache
                    .counters
                    .write_ahead_waits
                    .fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
            dirty.writing = true;
            (dirty.newest, dirty.version)
        };
        let mut buf = cache.services.file.alloc_buf(cache.unit_size_bytes);
        // SAFETY: the page is pinned and latched (shared), so its block and
        // frame are not written while we copy them.
        let image = unsafe {
            if cache.compressed {
                cache.block(desc.block_slot())
            } else {
                cache.frame(desc.frame_chunk())
            }
        };
        buf.copy_from_slice(image);
        if let Err(e) = cache.services.codec.seal(page_id, &mut buf, newest) {
            cache.inner.lock().dirty[d as usize].writing = false;
            return Err(e);
        }
        let offset_bytes = cache.unit_offset(page_id);
        Ok(Some((IoRequest::write(offset_bytes, buf, tag), version)))
    }

    /// Ends the write of a page copied at `version`: clears `writing`, and
    /// cleans the page unless a commit came after the copy (then it stays
    /// dirty with its older `oldest`, which only holds the checkpoint back).
    /// Returns whether the page was written.
    fn finish_write(
        &self,
        cache: &Cache,
        d: u32,
        version: u64,
        result: Result<()>,
    ) -> Result<bool> {
        let mut inner = cache.inner.lock();
        inner.dirty[d as usize].writing = false;
        result?;
        inner.dirty[d as usize].unwritten = false;
        if inner.dirty[d as usize].version == version {
            inner.dirty[d as usize].dirty = false;
            inner.flush.remove(d);
        }
        inner.stats.advance(cache.now_ms());
        inner.stats.add_io(1);
        cache.counters.pages_written.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Writes up to `page_count_max` dirty pages whose oldest modification
    /// is at or before `through`, oldest first.
    fn flush_oldest(&self, cache: &Cache, page_count_max: usize, through: Lsn) -> Result<usize> {
        let depth = cache.services.file.queue_depth().max(1);
        let mut written = 0;
        let mut skipped = 0;
        while written < page_count_max {
            let batch_max = depth.min(page_count_max - written);
            let (requests, versions, copy_error) =
                self.copy_batch(cache, batch_max, through, &mut skipped);
            if requests.is_empty() {
                return copy_error.map_or(Ok(written), Err);
            }
            let (batch, write_error) = self.write_copied(cache, requests, &versions);
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
        cache: &Cache,
        requests: Vec<IoRequest>,
        versions: &[(u32, u64)],
    ) -> (usize, Option<crate::PoolError>) {
        let results = cache.services.file.write_batch(requests);
        cache.counters.write_batches.fetch_add(1, Ordering::Relaxed);
        let mut written = 0;
        let mut first_error = None;
        for (tag, result) in results {
            let (d, version) = versions[tag as usize];
            match self.finish_write(cache, d, version, result) {
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
        cache: &Cache,
        batch_max: usize,
        through: Lsn,
        skipped: &mut usize,
    ) -> (Vec<IoRequest>, Vec<(u32, u64)>, Option<crate::PoolError>) {
        let mut requests = Vec::with_capacity(batch_max);
        let mut versions = Vec::with_capacity(batch_max);
        while requests.len() < batch_max {
            let Some(d) = self.pin_flush_candidate(cache, *skipped, through) else {
                break;
            };
            let desc = &cache.descs[d as usize];
            let latch = desc.latch(false);
            let copied = self.copy_for_write(cache, d, requests.len() as u64);
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
    fn pin_flush_candidate(&self, cache: &Cache, skip: usize, through: Lsn) -> Option<u32> {
        let durable = cache.services.durable_lsn.durable_lsn();
        let inner = cache.inner.lock();
        let mut d = inner.flush.tail();
        let mut to_skip = skip;
        while d != NIL {
            let dirty = inner.dirty[d as usize];
            if dirty.oldest > through {
                // The list is in oldest-change order: all the rest are
                // newer.
                return None;
            }
            if !dirty.writing && cache.durable_at(dirty.newest, durable) {
                if to_skip == 0 {
                    let page_id = cache.descs[d as usize].page_id();
                    return cache.table.with_entry(page_id, |e| {
                        cache.descs[e as usize].pin();
                        e
                    });
                }
                to_skip -= 1;
            }
            d = inner.flush.prev(d);
        }
        None
    }
}
