//! Read-ahead: [`BufferPool::prefetch`](crate::BufferPool::prefetch) reads pages that are not cached
//! through the file layer's read threads, as one batch, and caches them
//! compressed-only at the LRU midpoint, as InnoDB caches read-ahead pages.
//!
//! A page being read ahead is in the page table in state `ReadAhead`,
//! pinned and exclusively latched on behalf of the read (no thread owns
//! that latch). Installing a completion copies the read into the page,
//! verifies it, publishes it on the LRU and releases that latch; it takes
//! the pool mutex and a table shard (for a failed read), never a page
//! latch, so it fits the pool's lock order below any latch a fixing thread
//! holds.
//!
//! Who installs completions depends on how the pool was opened:
//!
//! - **Installer thread** (a pool from [`BufferPool::open_shared`](crate::BufferPool::open_shared), as the
//!   database opens it): the first `prefetch` starts one pool-owned thread,
//!   `bcuda-readahead`, that blocks on the completion queue and installs
//!   every completion as it arrives. Client threads never install. A fix
//!   that finds its page in flight parks until that page (and only that
//!   page) is installed, then latches it: it does not queue behind other
//!   pages' installs. It parks on a condition variable of one of
//!   [`READ_AHEAD_WAIT_STRIPES`] stripes (by descriptor), not on the page
//!   latch: a latch waiter spins and calls `sched_yield` before it parks,
//!   and with 16 clients waiting ~100 µs for reads those yields took a
//!   third of the process's CPU. A stripe's mutex is a leaf lock (nothing
//!   is taken while holding it). The thread holds the pool only
//!   weakly between completions, and stops when the pool is dropped (the
//!   drop wakes it and joins it, unless the drop runs on the thread itself,
//!   which then exits on its own).
//! - **Caller installs** (a pool from [`BufferPool::open`](crate::BufferPool::open), not behind an
//!   `Arc`): completions are installed by whichever thread calls into the
//!   pool next: `prefetch` itself, a fix that finds the page in flight (it
//!   waits by installing completions, one installer at a time, so the page
//!   is read once), or an allocation that ran out of memory. This is the
//!   deterministic mode the tests and the fuzzer use with files that
//!   complete reads inline.
//!
//! Installing by callers only does not scale: with 16 clients each fix of
//! a page in flight queues behind the others' installs on one mutex, which
//! halved the range-scan rate of `barracuda-bench iothreads` with
//! read-ahead on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use barracuda_base::PageId;
use barracuda_io::{AlignedBuf, Completion, CompletionQueue, IoRequest};
use parking_lot::{Condvar, Mutex};

use crate::arena::NIL;
use crate::cache::{AllocError, Cache, Inner, PageMemory};
use crate::desc::{LatchGuard, State};
use crate::error::{PoolError, Result};

/// At most this fraction (1/n) of the pool's block slots may be held by
/// read-ahead reads in flight, so that a large prefetch cannot pin the
/// whole budget and starve fixes (InnoDB stops read-ahead when pending
/// reads exceed half the pool; a quarter leaves room for misses too).
pub const READ_AHEAD_IN_FLIGHT_DIVISOR: u32 = 4;

/// How long a fix waiting for a page read ahead (caller-installs mode)
/// sleeps on the completion queue before looking at the page again
/// (another thread may have installed it meanwhile): short, since it only
/// bounds that hand-over.
const READ_AHEAD_WAIT_STEP: Duration = Duration::from_millis(1);

/// Condition variables fixes wait on for pages in flight (installer-thread
/// mode), chosen by descriptor: more than the client threads a process
/// plausibly runs, so waiters of different pages rarely share one (they
/// would only wake each other for a recheck).
pub const READ_AHEAD_WAIT_STRIPES: usize = 64;

/// One stripe: a waiter checks its page's state under `lock`, and the
/// installer takes `lock` after changing a state and before notifying, so
/// no wake-up is lost.
#[derive(Default)]
struct WaitStripe {
    lock: Mutex<()>,
    installed: Condvar,
}

/// Tag of the completion that tells the installer thread to exit. Real
/// tags are descriptor indexes (u32), so this one cannot collide.
const STOP_TAG: u64 = u64::MAX;

/// What the installer thread installs completions into: the pool that owns
/// the read-ahead, which it holds weakly.
pub(crate) trait Install: Send + Sync {
    /// Installs one completed read ([`ReadAhead::install`]).
    fn install(&self, completion: Completion);
}

/// Read-ahead state of a pool.
pub(crate) struct ReadAhead {
    /// Completions of read-ahead reads (shared with the installer thread,
    /// which must not keep the pool alive while it waits).
    queue: Arc<CompletionQueue>,
    /// Reads submitted and not yet installed.
    in_flight: AtomicU32,
    /// Caller-installs mode: held while installing completions, one
    /// installer at a time, so a waiter knows its page's completion is not
    /// in another thread's hands once it holds this and the page is still
    /// in flight.
    installer: Mutex<()>,
    /// The pool itself, weakly, when it was opened behind an `Arc`: what
    /// the installer thread runs on.
    owner: OnceLock<Weak<dyn Install>>,
    /// The installer thread, once started (`None` inside: it could not be
    /// spawned, and callers install).
    thread: OnceLock<Option<JoinHandle<()>>>,
    /// Where fixes wait for pages in flight (installer-thread mode).
    stripes: Box<[WaitStripe]>,
}

impl Default for ReadAhead {
    fn default() -> Self {
        Self {
            queue: Arc::default(),
            in_flight: AtomicU32::new(0),
            installer: Mutex::new(()),
            owner: OnceLock::new(),
            thread: OnceLock::new(),
            stripes: (0..READ_AHEAD_WAIT_STRIPES)
                .map(|_| WaitStripe::default())
                .collect(),
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        let Some(Some(handle)) = self.thread.take() else {
            return;
        };
        let stop = IoRequest::read(0, AlignedBuf::zeroed(0, 1), STOP_TAG).complete(Ok(()));
        self.queue.sender().send(stop);
        // The thread itself may have dropped the last reference to the
        // pool: it exits when it reads the stop, and cannot join itself.
        if handle.thread().id() != std::thread::current().id() && handle.join().is_err() {
            tracing::error!("the read-ahead installer thread panicked");
        }
    }
}

impl ReadAhead {
    /// Makes the installer thread, once started, install into `owner` (the
    /// pool opened behind an `Arc` that holds this read-ahead).
    pub(crate) fn set_owner(&self, owner: Weak<dyn Install>) {
        // A fresh pool: nobody else can have set it.
        let _ = self.owner.set(owner);
    }

    /// Whether a pool-owned thread installs the completions.
    fn installer_thread(&self) -> bool {
        self.thread.get().is_some_and(Option::is_some)
    }

    fn stripe(&self, d: u32) -> &WaitStripe {
        &self.stripes[d as usize % READ_AHEAD_WAIT_STRIPES]
    }

    /// Wakes the fixes waiting for descriptor `d`, whose state just left
    /// `ReadAhead`.
    fn wake(&self, d: u32) {
        let stripe = self.stripe(d);
        drop(stripe.lock.lock());
        stripe.installed.notify_all();
    }
}

/// The installer thread: installs completions as they arrive, holding the
/// pool only while it has some to install.
fn install_loop(queue: &CompletionQueue, owner: &Weak<dyn Install>) {
    loop {
        let mut completion = queue.wait();
        if completion.tag == STOP_TAG {
            return;
        }
        // The pool is being dropped: nothing to install into.
        let Some(pool) = owner.upgrade() else {
            return;
        };
        loop {
            pool.install(completion);
            match queue.try_next() {
                Some(next) if next.tag != STOP_TAG => completion = next,
                Some(_) => return,
                None => break,
            }
        }
    }
}

impl ReadAhead {
    /// See [`BufferPool::prefetch`](crate::BufferPool::prefetch).
    pub(crate) fn prefetch(&self, cache: &Cache, page_ids: &[PageId]) -> usize {
        let background = self.start_installer();
        if !background {
            self.drain(cache);
        }
        let requests = self.claim(cache, page_ids);
        let submitted = requests.len();
        if submitted > 0 {
            cache
                .services
                .file
                .submit_reads(requests, &self.queue.sender());
            // A file that completes inline (tests, no batch path) has
            // delivered everything: without an installer thread, install
            // it now.
            if !background {
                self.drain(cache);
            }
        }
        submitted
    }

    /// See [`BufferPool::read_ahead_in_flight`](crate::BufferPool::read_ahead_in_flight).
    pub(crate) fn in_flight_count(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// See [`BufferPool::drain_read_ahead`](crate::BufferPool::drain_read_ahead).
    pub(crate) fn drain(&self, cache: &Cache) -> usize {
        if self.in_flight.load(Ordering::Acquire) == 0 || self.installer_thread() {
            return 0;
        }
        let Some(_installer) = self.installer.try_lock() else {
            return 0;
        };
        let mut installed = 0;
        while let Some(completion) = self.queue.try_next() {
            self.install(cache, completion);
            installed += 1;
        }
        installed
    }

    /// Starts the installer thread if the pool is shared and it is not
    /// running yet. Returns whether it runs.
    fn start_installer(&self) -> bool {
        let Some(owner) = self.owner.get() else {
            return false;
        };
        let thread = self.thread.get_or_init(|| {
            let queue = Arc::clone(&self.queue);
            let owner = owner.clone();
            let spawned = std::thread::Builder::new()
                .name("bcuda-readahead".into())
                .spawn(move || install_loop(&queue, &owner));
            spawned
                .map_err(|e| {
                    tracing::warn!("no read-ahead installer thread, callers install: {e}");
                })
                .ok()
        });
        thread.is_some()
    }

    /// Waits until the read-ahead of the pinned page `d` is installed (or
    /// dropped): parked on its stripe with an installer thread, else
    /// installing completions meanwhile.
    pub(crate) fn wait(&self, cache: &Cache, d: u32) {
        let desc = &cache.descs[d as usize];
        if self.installer_thread() {
            let stripe = self.stripe(d);
            let mut waiting = stripe.lock.lock();
            while desc.state() == State::ReadAhead {
                stripe.installed.wait(&mut waiting);
            }
            return;
        }
        while desc.state() == State::ReadAhead {
            let _installer = self.installer.lock();
            if desc.state() != State::ReadAhead {
                break;
            }
            if let Some(completion) = self.queue.wait_timeout(READ_AHEAD_WAIT_STEP) {
                self.install(cache, completion);
            }
        }
    }

    /// Claims memory and a table entry for each page to read ahead and
    /// returns their read requests (tag = descriptor).
    fn claim(&self, cache: &Cache, page_ids: &[PageId]) -> Vec<IoRequest> {
        let slot_count =
            cache.chunk_count() * (cache.page_size_bytes / cache.unit_size_bytes) as u32;
        let in_flight_max = (slot_count / READ_AHEAD_IN_FLIGHT_DIVISOR).max(1);
        let mut requests = Vec::new();
        for &page_id in page_ids {
            if cache.table.with_entry(page_id, |_| ()).is_some() {
                continue;
            }
            if self.in_flight.load(Ordering::Acquire) >= in_flight_max {
                break;
            }
            let mut inner = cache.inner.lock();
            inner.stats.advance(cache.now_ms());
            let memory = match self.alloc_memory(cache, &mut inner) {
                Ok(memory) => memory,
                Err(AllocError::NeedFlush(victim)) => {
                    // Writing is the flusher's job, not a hint's.
                    cache.descs[victim as usize].unpin();
                    break;
                }
                Err(AllocError::Exhausted(_)) => break,
            };
            let Some(latch) = cache.claim_as(&mut inner, page_id, memory, State::ReadAhead) else {
                cache.free_page_memory(&mut inner, memory);
                continue;
            };
            // Held on behalf of the read until its completion is installed.
            latch.hand_over();
            inner.reading_count += 1;
            self.in_flight.fetch_add(1, Ordering::AcqRel);
            drop(inner);
            let offset_bytes = cache.unit_offset(page_id);
            let buf = cache.services.file.alloc_buf(cache.unit_size_bytes);
            requests.push(IoRequest::read(offset_bytes, buf, u64::from(memory.desc)));
        }
        requests
    }

    /// A descriptor and the unit the page is read into: a block slot (no
    /// frame: read-ahead caches compressed-only), or a frame when the pool
    /// is uncompressed.
    fn alloc_memory(&self, cache: &Cache, inner: &mut Inner) -> Result<PageMemory, AllocError> {
        let desc = cache.alloc_desc(inner)?;
        let unit = if cache.compressed {
            cache.alloc_slot(inner)
        } else {
            cache.alloc_frame(inner, NIL)
        };
        match unit {
            Ok(unit) if cache.compressed => Ok(PageMemory {
                desc,
                frame_chunk: NIL,
                block_slot: unit,
            }),
            Ok(unit) => Ok(PageMemory {
                desc,
                frame_chunk: unit,
                block_slot: NIL,
            }),
            Err(e) => {
                inner.free_descs.push(desc);
                Err(e)
            }
        }
    }

    /// Copies a completed read into its page, verifies it and publishes the
    /// page at the LRU midpoint; on failure drops it from the read-ahead.
    pub(crate) fn install(&self, cache: &Cache, completion: Completion) {
        let d = completion.tag as u32;
        let desc = &cache.descs[d as usize];
        let page_id = desc.page_id();
        let memory = PageMemory {
            desc: d,
            frame_chunk: desc.frame_chunk(),
            block_slot: desc.block_slot(),
        };
        debug_assert_eq!(desc.state(), State::ReadAhead);
        // SAFETY: `claim_as` latched the page exclusively on behalf of this
        // read and handed the latch over; the read's completion, which we
        // hold, is what releases it, and only once.
        let latch = unsafe { LatchGuard::take_over(desc, true) };
        let offset_bytes = completion.offset_bytes;
        let checked = completion
            .result
            .map_err(|source| PoolError::File {
                operation: "read-ahead",
                offset_bytes,
                source,
            })
            .and_then(|()| {
                // SAFETY: the page is pinned and exclusively latched on
                // behalf of this read, whose completion we hold: nobody else
                // reaches its unit.
                let unit = unsafe {
                    if cache.compressed {
                        cache.block_mut(memory.block_slot)
                    } else {
                        cache.frame_mut(memory.frame_chunk)
                    }
                };
                unit.copy_from_slice(&completion.buf);
                cache.services.codec.verify(page_id, unit)
            });
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Err(e) = checked {
            tracing::warn!("read-ahead of {page_id} dropped: {e}");
            cache
                .counters
                .read_ahead_failed
                .fetch_add(1, Ordering::Relaxed);
            cache.abort_claim(page_id, memory, State::Abandoned, latch);
            self.wake(d);
            return;
        }
        let mut inner = cache.inner.lock();
        inner.reading_count -= 1;
        self.publish(cache, &mut inner, d);
        inner.stats.advance(cache.now_ms());
        inner.stats.add_io(1);
        drop(inner);
        cache.counters.read_ahead.fetch_add(1, Ordering::Relaxed);
        // The read is over and the page published: its latch is released
        // (before the pin, as always).
        drop(latch);
        desc.unpin();
        self.wake(d);
    }

    /// Publishes a page read ahead: LRU midpoint (old sublist), no frame,
    /// not yet accessed (its first fix does not make it young).
    fn publish(&self, cache: &Cache, inner: &mut Inner, d: u32) {
        let desc = &cache.descs[d as usize];
        inner.lru.insert_new(d, &cache.old_flags);
        cache.set_lru_len(inner.lru.list().len());
        desc.young_clock
            .store(cache.evict_clock.load(Ordering::Relaxed), Ordering::Relaxed);
        desc.first_access_ms.store(0, Ordering::Relaxed);
        desc.prefetched.store(true, Ordering::Relaxed);
        desc.set_state(if cache.compressed {
            State::Compressed
        } else {
            State::Frame
        });
    }
}
