//! Page descriptors: what the pool knows about one cached page, in the part
//! that hits read without the pool mutex (pin count, latch, state, where the
//! frame and block are).

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

use barracuda_base::{Lsn, PageId};
use parking_lot::lock_api::{RawRwLock as _, RawRwLockDowngrade as _};

use crate::arena::NIL;

/// The state of a descriptor. Transitions happen under the pool mutex, and
/// those that change the frame or block of a pinned page also under its
/// exclusive latch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// Unused.
    Free = 0,
    /// A miss in progress: the reader holds the latch exclusively.
    Reading = 1,
    /// Only the compressed block is cached.
    Compressed = 2,
    /// Block and uncompressed frame are cached.
    Both = 3,
    /// Uncompressed pool: the frame is the page.
    Frame = 4,
    /// The read failed; waiters see this and give up. Reclaimed when unpinned.
    Failed = 5,
    /// A read-ahead read in flight: the latch is held exclusively on behalf
    /// of the read-ahead (no thread owns it); whoever installs the read's
    /// completion releases it. A fix waits by driving completions.
    ReadAhead = 6,
    /// A read-ahead read failed: waiters retry the lookup and read the page
    /// themselves, so the error reaches them as from any miss. Reclaimed
    /// when unpinned.
    Abandoned = 7,
    /// A compressed pool's clean page whose block was dropped: the frame
    /// alone, the file holds the block. Only the cost-aware policy makes
    /// such pages; an exclusive fix reads the block back first.
    FrameOnly = 8,
}

impl State {
    fn from_u8(value: u8) -> Self {
        match value {
            0 => State::Free,
            1 => State::Reading,
            2 => State::Compressed,
            3 => State::Both,
            4 => State::Frame,
            6 => State::ReadAhead,
            7 => State::Abandoned,
            8 => State::FrameOnly,
            _ => State::Failed,
        }
    }
}

pub(crate) struct Desc {
    latch: parking_lot::RawRwLock,
    pin_count: AtomicU32,
    state: AtomicU8,
    page_id: AtomicU64,
    frame_chunk: AtomicU32,
    block_slot: AtomicU32,
    /// Clock time of the first access since the page was cached, 0 = none.
    pub(crate) first_access_ms: AtomicU64,
    /// The pool's eviction clock when the page was last made young.
    pub(crate) young_clock: AtomicU64,
    /// Cached by read-ahead and not fixed since (for
    /// `read_ahead_evicted_unused`).
    pub(crate) prefetched: AtomicBool,
    /// Read from the device with the OS cache tier on and not hit in the
    /// pool since: the OS page cache holds a copy too, which the pool's
    /// next hit drops (`PoolConfig::os_cache_tier`).
    pub(crate) in_os_cache: AtomicBool,
}

impl Desc {
    pub(crate) fn new() -> Self {
        Self {
            latch: <parking_lot::RawRwLock as parking_lot::lock_api::RawRwLock>::INIT,
            pin_count: AtomicU32::new(0),
            state: AtomicU8::new(State::Free as u8),
            page_id: AtomicU64::new(u64::MAX),
            frame_chunk: AtomicU32::new(NIL),
            block_slot: AtomicU32::new(NIL),
            first_access_ms: AtomicU64::new(0),
            young_clock: AtomicU64::new(0),
            prefetched: AtomicBool::new(false),
            in_os_cache: AtomicBool::new(false),
        }
    }

    pub(crate) fn pin(&self) {
        self.pin_count.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn unpin(&self) {
        let before = self.pin_count.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "unpin of an unpinned page");
    }

    pub(crate) fn pins(&self) -> u32 {
        self.pin_count.load(Ordering::Acquire)
    }

    pub(crate) fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    pub(crate) fn set_state(&self, state: State) {
        self.state.store(state as u8, Ordering::Release);
    }

    pub(crate) fn page_id(&self) -> PageId {
        PageId(self.page_id.load(Ordering::Acquire))
    }

    pub(crate) fn set_page_id(&self, page_id: PageId) {
        self.page_id.store(page_id.0, Ordering::Release);
    }

    pub(crate) fn frame_chunk(&self) -> u32 {
        self.frame_chunk.load(Ordering::Acquire)
    }

    pub(crate) fn set_frame_chunk(&self, chunk: u32) {
        self.frame_chunk.store(chunk, Ordering::Release);
    }

    pub(crate) fn block_slot(&self) -> u32 {
        self.block_slot.load(Ordering::Acquire)
    }

    pub(crate) fn set_block_slot(&self, slot: u32) {
        self.block_slot.store(slot, Ordering::Release);
    }

    /// Blocks until the latch is held in the given mode.
    pub(crate) fn latch(&self, exclusive: bool) -> LatchGuard<'_> {
        if exclusive {
            self.latch.lock_exclusive();
        } else {
            self.latch.lock_shared();
        }
        LatchGuard {
            desc: self,
            exclusive,
        }
    }

    /// The latch held exclusively, if nobody holds it now.
    pub(crate) fn try_latch_exclusive(&self) -> Option<LatchGuard<'_>> {
        // `then`, not `then_some`: a guard built before the test would be
        // dropped on failure and release a latch it never held.
        self.latch.try_lock_exclusive().then(|| LatchGuard {
            desc: self,
            exclusive: true,
        })
    }

    /// The latch held shared, if no writer holds it now.
    pub(crate) fn try_latch_shared(&self) -> Option<LatchGuard<'_>> {
        // `then`, not `then_some`: see `try_latch_exclusive`.
        self.latch.try_lock_shared().then(|| LatchGuard {
            desc: self,
            exclusive: false,
        })
    }
}

/// A page latch held in one mode, released when dropped.
///
/// The latch of a page read ahead is held on behalf of the read, by no
/// thread: [`LatchGuard::hand_over`] leaves it held past the guard, and
/// whoever installs the read's completion takes it back with
/// [`LatchGuard::take_over`] (parking_lot's raw latch has no owner thread).
#[must_use = "the latch is released when the guard drops"]
pub(crate) struct LatchGuard<'a> {
    desc: &'a Desc,
    exclusive: bool,
}

impl<'a> LatchGuard<'a> {
    /// Takes over a latch that [`LatchGuard::hand_over`] left held.
    ///
    /// # Safety
    /// The latch of `desc` is held in the given mode on behalf of nobody
    /// else: its guard was handed over, and nothing will release it but the
    /// guard returned here.
    pub(crate) unsafe fn take_over(desc: &'a Desc, exclusive: bool) -> Self {
        Self { desc, exclusive }
    }

    /// Leaves the latch held after the guard is gone, for a holder that is
    /// not a thread (a read in flight); see [`LatchGuard::take_over`].
    pub(crate) fn hand_over(self) {
        std::mem::forget(self);
    }

    /// Turns an exclusive latch into a shared one without letting a writer in.
    pub(crate) fn downgrade(&mut self) {
        assert!(self.exclusive, "downgrade of a shared latch");
        // SAFETY: this guard holds the latch exclusively (checked above).
        unsafe { self.desc.latch.downgrade() };
        self.exclusive = false;
    }
}

impl Drop for LatchGuard<'_> {
    fn drop(&mut self) {
        // A guard releases only a latch it holds: a release of a free latch
        // would corrupt the lock's state for its next holder. (While a
        // reader holds it, a waiting writer may already have set the writer
        // bit, so a shared guard can only check that the latch is held.)
        if self.exclusive {
            debug_assert!(
                self.desc.latch.is_locked_exclusive(),
                "release of an exclusive latch that is not held"
            );
        } else {
            debug_assert!(
                self.desc.latch.is_locked(),
                "release of a shared latch that is not held"
            );
        }
        if self.exclusive {
            // SAFETY: this guard holds the latch exclusively.
            unsafe { self.desc.latch.unlock_exclusive() };
        } else {
            // SAFETY: this guard holds the latch shared.
            unsafe { self.desc.latch.unlock_shared() };
        }
    }
}

/// The LSN of a page committed with
/// [`ExclusiveGuard::commit_pending_lsn`](crate::ExclusiveGuard::commit_pending_lsn)
/// until the log assigns its real one.
pub const LSN_PENDING: Lsn = Lsn(u64::MAX);

/// Dirty state of a page, under the pool mutex.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Dirty {
    pub(crate) dirty: bool,
    /// A write of the page is in flight (InnoDB's `io_fix` for writes): two
    /// flushers holding shared latches must not both write and clean it.
    pub(crate) writing: bool,
    /// LSN of the first change since the page was last written.
    pub(crate) oldest: Lsn,
    /// LSN of the last change.
    pub(crate) newest: Lsn,
    /// Commits since the page was cached: a write copied at one version
    /// cleans the page only if no commit came after the copy.
    pub(crate) version: u64,
    /// Created in memory ([`crate::BufferPool::create`]) and not written to
    /// the file since: the file holds no block of it that recovery could
    /// start from ([`crate::BufferPool::is_unwritten`]).
    pub(crate) unwritten: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A latch attempt that fails leaves the latch exactly as its holder
    /// has it: the failed attempt releases nothing.
    #[test]
    fn a_failed_try_latch_leaves_the_latch_alone() {
        let desc = Desc::new();
        let writer = desc.latch(true);
        assert!(desc.try_latch_shared().is_none());
        assert!(desc.try_latch_exclusive().is_none());
        assert!(desc.latch.is_locked_exclusive());
        drop(writer);

        let reader = desc.latch(false);
        assert!(desc.try_latch_exclusive().is_none());
        let second = desc.try_latch_shared().expect("readers share the latch");
        drop(second);
        assert!(desc.latch.is_locked() && !desc.latch.is_locked_exclusive());
        drop(reader);

        assert!(!desc.latch.is_locked());
        let again = desc.try_latch_exclusive().expect("the latch is free");
        drop(again);
        assert!(!desc.latch.is_locked());
    }

    /// The page cleaner's case: a reader holds the latch and a writer waits
    /// for it (its writer bit set), so the cleaner's attempt fails. The
    /// attempt must not count as a reader leaving: after the reader and
    /// then the writer are done, the latch is free.
    #[test]
    fn a_failed_try_latch_beside_a_waiting_writer_leaves_the_readers_alone() {
        let desc = Desc::new();
        let reader = desc.latch(false);
        std::thread::scope(|scope| {
            let writer = scope.spawn(|| drop(desc.latch(true)));
            // The writer sets its bit before it waits for the readers.
            while !desc.latch.is_locked_exclusive() {
                std::thread::yield_now();
            }
            assert!(desc.try_latch_shared().is_none());
            drop(reader);
            writer.join().expect("the writer ends");
        });
        assert!(!desc.latch.is_locked(), "the latch's state was corrupted");
        drop(desc.try_latch_exclusive().expect("the latch is free"));
    }
}
