//! The page cleaner: one thread that writes the dirty pages of many pools
//! (InnoDB's `page_cleaner`), so that a database of many trees does not
//! start a thread per tree.
//!
//! Every `interval` it writes up to `batch_pages` dirty pages of each pool,
//! oldest change first ([`BufferPool::flush_some`]); a pool whose memory is
//! short and which holds dirty pages has the dirty pages at its LRU list's
//! tail written ([`BufferPool::flush_lru_tail`]) ten times per `interval`
//! instead, so that its readers find clean victims.

use std::sync::Arc;
use std::sync::Weak;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use crate::pool::BufferPool;

/// While memory is short, a pool's tail is written this many times per
/// interval.
const LRU_FLUSH_INTERVAL_DIVISOR: u32 = 10;

/// One thread cleaning the pools registered with it. Dropping it stops the
/// thread (after the pass in progress).
pub struct PageCleaner {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Keeps a pool registered with a [`PageCleaner`]; dropping it removes the
/// pool and waits for a pass in progress, so that the cleaner writes none
/// of the pool's pages after it (a checkpoint or a close relies on that).
pub struct CleanerRegistration {
    shared: Arc<Shared>,
    id: u64,
}

struct Member {
    id: u64,
    pool: Weak<BufferPool>,
    /// Memory was short with dirty pages at the last look.
    short: bool,
}

struct Shared {
    interval: Duration,
    batch_pages: usize,
    members: Mutex<Vec<Member>>,
    /// Held by the thread for a whole pass.
    pass: Mutex<()>,
    stop: AtomicBool,
    next_id: AtomicU64,
}

impl PageCleaner {
    /// Starts the thread. If the system refuses a thread, nothing cleans in
    /// the background (logged): pools then write dirty victims themselves
    /// and checkpoints write the rest, slower but correct.
    pub fn start(interval: Duration, batch_pages: usize) -> PageCleaner {
        let shared = Arc::new(Shared {
            interval,
            batch_pages,
            members: Mutex::new(Vec::new()),
            pass: Mutex::new(()),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("barracuda-cleaner".into())
            .spawn(move || run(&thread_shared))
            .map_err(|e| tracing::warn!("no page cleaner thread: {e}"))
            .ok();
        PageCleaner { shared, thread }
    }

    /// Cleans `pool` from now until the registration is dropped (or the
    /// pool is gone).
    pub fn register(&self, pool: &Arc<BufferPool>) -> CleanerRegistration {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        self.shared.members.lock().push(Member {
            id,
            pool: Arc::downgrade(pool),
            short: false,
        });
        CleanerRegistration {
            shared: Arc::clone(&self.shared),
            id,
        }
    }

    /// How many pools are registered.
    pub fn pool_count(&self) -> usize {
        self.shared.members.lock().len()
    }
}

impl Drop for PageCleaner {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl Drop for CleanerRegistration {
    fn drop(&mut self) {
        self.shared.members.lock().retain(|m| m.id != self.id);
        // The pass in progress may hold the pool: wait for it to end.
        drop(self.shared.pass.lock());
    }
}

fn run(shared: &Shared) {
    let tick = shared.interval / LRU_FLUSH_INTERVAL_DIVISOR;
    let mut ticks: u32 = 0;
    let mut pools: Vec<(u64, Arc<BufferPool>, bool)> = Vec::new();
    while !shared.stop.load(Ordering::Acquire) {
        std::thread::park_timeout(tick);
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
        ticks = ticks.wrapping_add(1);
        let full = ticks.is_multiple_of(LRU_FLUSH_INTERVAL_DIVISOR);
        let _pass = shared.pass.lock();
        {
            let mut members = shared.members.lock();
            members.retain(|m| m.pool.strong_count() > 0);
            pools.extend(
                members
                    .iter()
                    .filter(|m| full || m.short)
                    .filter_map(|m| Some((m.id, m.pool.upgrade()?, m.short))),
            );
        }
        let mut shortness = Vec::with_capacity(pools.len());
        for (id, pool, was_short) in pools.drain(..) {
            if full
                && !was_short
                && let Err(e) = pool.flush_some(shared.batch_pages)
            {
                tracing::warn!("background flush failed: {e}");
            }
            let short = pool.cache.memory_is_short() && pool.dirty_page_count() > 0;
            if short && let Err(e) = pool.flush_lru_tail() {
                tracing::warn!("background LRU flush failed: {e}");
            }
            shortness.push((id, short));
        }
        let mut members = shared.members.lock();
        for (id, short) in shortness {
            if let Some(member) = members.iter_mut().find(|m| m.id == id) {
                member.short = short;
            }
        }
    }
}

impl BufferPool {
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
}

/// Stops the background flusher of [`BufferPool::spawn_flusher`] when
/// dropped.
pub struct FlusherHandle {
    // Dropped first: the pool leaves the cleaner, then the cleaner stops.
    _registration: CleanerRegistration,
    _cleaner: PageCleaner,
}
