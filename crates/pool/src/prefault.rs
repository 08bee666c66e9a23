//! Populating the arena a little ahead of the pool's use, on a thread of its
//! own.
//!
//! The arena is an anonymous mapping, backed on first touch (see
//! `arena.rs`): the first use of a chunk costs a page fault per 4 KiB and
//! the kernel's zeroing of the page. The pool takes fresh chunks in order
//! (its free list hands out chunk 0, 1, 2, ... before any it got back), so
//! a writer that grows a tree (a split's new page, a read into an empty
//! pool) pays those faults on its own thread: 17% of `profile_rows batch`'s
//! write path, `clear_page_erms` and the fault around it.
//!
//! Here the pool reports every chunk it takes ([`Prefault::chunk_taken`]),
//! and a thread populates the chunks after it with
//! `madvise(MADV_POPULATE_WRITE)`, which faults them in without changing a
//! byte (so it may race with the pool's own use of a chunk). It keeps
//! `window` chunks ready beyond the highest taken, where the window grows
//! with use up to [`WINDOW_BYTES_MAX`] (like a vector's capacity): a pool
//! that used 1 MiB holds at most 1 MiB more resident, one that used 64 MiB
//! at most 4 MiB more. The thread starts when the pool asks for chunks and
//! ends once they are populated, so that a pool that does not grow (most
//! trees of a database of many) costs no thread; a growing pool starts one
//! each half window it takes (128 KiB to 2 MiB). Where the kernel refuses the advice (before
//! Linux 5.14, or short of memory), no thread starts again and the pool
//! faults its chunks in itself, as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;

use parking_lot::Mutex;

/// The most the thread keeps populated ahead of the pool.
const WINDOW_BYTES_MAX: usize = 4 << 20;

/// The least it asks for at a time: a wake-up of the thread per chunk would
/// cost more than the fault it saves.
const WINDOW_BYTES_MIN: usize = 256 << 10;

/// The most one `madvise` call populates, so that stopping (the arena
/// closing) waits for at most one step.
const STEP_BYTES: usize = 1 << 20;

/// The prefault thread of one arena.
pub(crate) struct Prefault {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The arena's base address, chunk size and chunk count.
    base: usize,
    chunk_size_bytes: usize,
    chunk_count: u32,
}

struct Shared {
    /// Chunks `[0, requested)` are to be populated.
    requested: AtomicU32,
    /// Chunks `[0, done)` are populated.
    done: AtomicU32,
    /// A thread runs (or is about to). Cleared by the thread, under `lock`,
    /// when it finds nothing more to do.
    running: AtomicBool,
    /// Chunks the thread populated, for tests and status.
    populated: AtomicU64,
    stop: AtomicBool,
    /// Held by the thread when it decides to end, and by a caller when it
    /// decides whether to start one: a request made before the thread's
    /// last look is seen by it, one made after finds it ended.
    lock: Mutex<()>,
}

impl Prefault {
    /// The thread of the arena at `base`, not started yet.
    pub(crate) fn new(base: usize, chunk_size_bytes: usize, chunk_count: u32) -> Self {
        Prefault {
            shared: Arc::new(Shared {
                requested: AtomicU32::new(0),
                done: AtomicU32::new(0),
                running: AtomicBool::new(false),
                populated: AtomicU64::new(0),
                stop: AtomicBool::new(false),
                lock: Mutex::new(()),
            }),
            thread: Mutex::new(None),
            base,
            chunk_size_bytes,
            chunk_count,
        }
    }

    /// The pool took `chunk`: asks for the chunks after it to be populated
    /// once the pool comes within half a window of the last asked for. One
    /// atomic load when there is nothing to do.
    pub(crate) fn chunk_taken(&self, chunk: u32) {
        let requested = self.shared.requested.load(Ordering::Relaxed);
        let window = self.window_chunks(chunk);
        if requested.saturating_sub(chunk) > window / 2 {
            return;
        }
        let target = chunk.saturating_add(1).saturating_add(window);
        let target = target.min(self.chunk_count);
        if target <= requested {
            return;
        }
        self.shared.requested.fetch_max(target, Ordering::Relaxed);
        self.start();
    }

    /// Whether a thread runs (or is about to).
    #[cfg(test)]
    pub(crate) fn running(&self) -> bool {
        self.shared.running.load(Ordering::Relaxed)
    }

    /// Chunks populated so far.
    pub(crate) fn populated_chunks(&self) -> u64 {
        self.shared.populated.load(Ordering::Relaxed)
    }

    /// The window after `chunk`: as many chunks as the pool took, between
    /// [`WINDOW_BYTES_MIN`] and [`WINDOW_BYTES_MAX`].
    fn window_chunks(&self, chunk: u32) -> u32 {
        let chunks =
            |bytes: usize| u32::try_from(bytes / self.chunk_size_bytes).unwrap_or(u32::MAX);
        (chunk + 1).clamp(
            chunks(WINDOW_BYTES_MIN).max(1),
            chunks(WINDOW_BYTES_MAX).max(1),
        )
    }

    fn start(&self) {
        let mut thread = self.thread.lock();
        {
            let _locked = self.shared.lock.lock();
            if self.shared.running.load(Ordering::Relaxed)
                || self.shared.stop.load(Ordering::Relaxed)
            {
                return;
            }
            self.shared.running.store(true, Ordering::Relaxed);
        }
        // The previous thread said it ends; reap it.
        if let Some(handle) = thread.take() {
            let _ = handle.join();
        }
        let shared = Arc::clone(&self.shared);
        let (base, chunk_size_bytes) = (self.base, self.chunk_size_bytes);
        let spawned = std::thread::Builder::new()
            .name("barracuda-prefault".into())
            .spawn(move || run(&shared, base, chunk_size_bytes));
        match spawned {
            Ok(handle) => *thread = Some(handle),
            // Only an optimization: the pool faults its chunks in itself.
            Err(e) => {
                tracing::debug!("no prefault thread: {e}");
                self.shared.stop.store(true, Ordering::Relaxed);
                self.shared.running.store(false, Ordering::Relaxed);
            }
        }
    }

    /// Stops the thread and waits for it: the arena may be unmapped after.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.thread.lock().take() {
            let _ = handle.join();
        }
    }
}

fn run(shared: &Shared, base: usize, chunk_size_bytes: usize) {
    let step_chunks = u32::try_from(STEP_BYTES / chunk_size_bytes)
        .unwrap_or(u32::MAX)
        .max(1);
    loop {
        let (mut done, target) = {
            let _locked = shared.lock.lock();
            let requested = shared.requested.load(Ordering::Relaxed);
            let done = shared.done.load(Ordering::Relaxed);
            if shared.stop.load(Ordering::Relaxed) || requested <= done {
                shared.running.store(false, Ordering::Relaxed);
                return;
            }
            (done, requested)
        };
        while done < target {
            if shared.stop.load(Ordering::Relaxed) {
                shared.running.store(false, Ordering::Relaxed);
                return;
            }
            let end = done.saturating_add(step_chunks).min(target);
            let at = base + done as usize * chunk_size_bytes;
            let len = (end - done) as usize * chunk_size_bytes;
            // SAFETY: `[at, at + len)` lies inside the arena's mapping, which
            // `Prefault::stop` keeps mapped until this thread has returned;
            // the advice changes no byte of it, so the pool may be using
            // those chunks meanwhile.
            let rc =
                unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
            if rc != 0 {
                tracing::debug!(
                    "buffer pool not populated ahead: {}",
                    std::io::Error::last_os_error()
                );
                // No thread starts again: the pool faults its chunks itself.
                shared.stop.store(true, Ordering::Relaxed);
                shared.running.store(false, Ordering::Relaxed);
                return;
            }
            shared
                .populated
                .fetch_add(u64::from(end - done), Ordering::Relaxed);
            done = end;
            shared.done.store(done, Ordering::Relaxed);
        }
    }
}
