//! Dirty pages: the flush list ordered by oldest modification, page writes
//! under the write-ahead rule, and a background flusher.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use barracuda_codec::Lsn;

use crate::arena::NIL;
use crate::error::Result;
use crate::pool::BufferPool;

thread_local! {
    /// The image being written, sealed; reused across writes of one thread.
    static WRITE_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl BufferPool {
    /// Marks a page dirty at `lsn`, keeping the flush list ordered by oldest
    /// modification (head = newest).
    pub(crate) fn mark_dirty(&self, d: u32, lsn: Lsn) {
        let mut inner = self.inner.lock();
        let dirty = &mut inner.dirty[d as usize];
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

    /// Writes a victim the caller pinned, if its latch is free right now
    /// (the caller may hold other latches, so it must not wait).
    pub(crate) fn flush_victim(&self, d: u32) -> Result<()> {
        let desc = &self.descs[d as usize];
        if !desc.try_lock_shared() {
            return Ok(());
        }
        let written = self.write_latched(d);
        // SAFETY: locked shared just above.
        unsafe { desc.unlock(false) };
        written.map(|_| ())
    }

    /// Writes a pinned, latched page if it is dirty and its last change is
    /// durable in the log. Returns whether it wrote.
    fn write_latched(&self, d: u32) -> Result<bool> {
        let desc = &self.descs[d as usize];
        let page_id = desc.page_id();
        let newest = {
            let mut inner = self.inner.lock();
            let dirty = &mut inner.dirty[d as usize];
            if !dirty.dirty || dirty.writing {
                return Ok(false);
            }
            if !self.writable(dirty.newest) {
                self.counters
                    .write_ahead_waits
                    .fetch_add(1, Ordering::Relaxed);
                return Ok(false);
            }
            dirty.writing = true;
            dirty.newest
        };
        // SAFETY: the page is pinned and latched (shared), so its block and
        // frame are not written while we copy them.
        let image = unsafe {
            if self.compressed {
                self.block(desc.block_slot())
            } else {
                self.frame(desc.frame_chunk())
            }
        };
        let written = WRITE_BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            buffer.clear();
            buffer.extend_from_slice(image);
            self.services.codec.seal(page_id, &mut buffer, newest)?;
            self.services
                .file
                .write_at(page_id.0 * self.unit_size_bytes as u64, &buffer)
        });
        let mut inner = self.inner.lock();
        inner.dirty[d as usize].writing = false;
        written?;
        // Shared latches held by every writer of this page kept it unchanged
        // since we read `newest`.
        inner.dirty[d as usize].dirty = false;
        inner.flush.remove(d);
        inner.stats.advance(self.now_ms());
        inner.stats.add_io(1);
        self.counters.pages_written.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Writes up to `page_count_max` dirty pages, oldest modification first,
    /// skipping pages whose changes are not yet durable in the log. Returns
    /// the number written.
    pub fn flush_some(&self, page_count_max: usize) -> Result<usize> {
        let mut written = 0;
        let mut skipped = 0;
        while written < page_count_max {
            let Some(d) = self.pin_flush_candidate(skipped) else {
                break;
            };
            let desc = &self.descs[d as usize];
            desc.lock(false);
            let result = self.write_latched(d);
            // SAFETY: locked shared just above.
            unsafe { desc.unlock(false) };
            desc.unpin();
            if result? {
                written += 1;
            } else {
                skipped += 1;
            }
        }
        Ok(written)
    }

    /// Pins the `skip`-th oldest dirty page whose changes are durable.
    fn pin_flush_candidate(&self, skip: usize) -> Option<u32> {
        let durable = self.services.durable_lsn.durable_lsn();
        let inner = self.inner.lock();
        let mut d = inner.flush.tail();
        let mut to_skip = skip;
        while d != NIL {
            if self.durable_at(inner.dirty[d as usize].newest, durable) {
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
    /// `interval`. It stops when the handle is dropped or the pool is gone.
    pub fn spawn_flusher(
        self: &Arc<Self>,
        interval: Duration,
        batch_pages: usize,
    ) -> FlusherHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let pool: Weak<Self> = Arc::downgrade(self);
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("barracuda-flusher".into())
            .spawn(move || {
                while !thread_stop.load(Ordering::Relaxed) {
                    std::thread::park_timeout(interval);
                    let Some(pool) = pool.upgrade() else { break };
                    if let Err(e) = pool.flush_some(batch_pages) {
                        tracing::warn!("background flush failed: {e}");
                    }
                }
            })
            .ok();
        FlusherHandle { stop, thread }
    }
}

/// Stops the background flusher when dropped.
pub struct FlusherHandle {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for FlusherHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}
