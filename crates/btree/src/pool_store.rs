//! The buffer pool as a [`PageStore`]: the tree runs on `barracuda-pool`.
//!
//! [`PoolStore`] wraps a [`BufferPool`] and adds what the pool deliberately
//! does not have: page allocation, a free list, and the order "commit the
//! page, then log the operation, then give the page its LSN".
//!
//! - Shared guards are the pool's [`SharedGuard`]; exclusive guards wrap its
//!   [`ExclusiveGuard`] ([`PoolExclusive`]). A write the pool rejects (out of
//!   the page, or on the codec's reserved header) is a tree bug and panics.
//! - [`PageWrite::commit`] copies the guard's pending patches, then calls
//!   [`ExclusiveGuard::commit_pending_lsn`]: the page is dirty at
//!   [`barracuda_pool::LSN_PENDING`], so the pool neither writes nor evicts
//!   it. On `Fits` the copies join the [`OpContext`]; on `DoesNotFit` the
//!   pool has rolled the page back and the copies are dropped.
//! - [`PageStore::finish_op`] stamps every page the operation committed,
//!   allocated or freed with one fresh LSN from an in-memory counter
//!   ([`BufferPool::set_page_lsn`]), after which the pages are flushable.
//!   [`PoolStore::durable_lsn_provider`] reports that same counter as
//!   durable, so the write-ahead rule never holds a page back. **This is a
//!   stand-in for the write-ahead log**: the Db will log the `OpContext` as
//!   one redo group and stamp the group's real LSN instead.
//! - Allocation: a never-used page id (from a counter) is
//!   [`BufferPool::create`]d; a reused id from the free list is fixed
//!   exclusively and zeroed (all but the codec's reserved header bytes,
//!   which the pool refuses to patch). The allocation is committed at once
//!   (pending LSN) so that the page is dirty and cannot be evicted unwritten.
//!   Zeroing is not logged as patches: the operation lists the page in
//!   `allocated`, and redo of an allocation zeroes the page. A freed page is
//!   zeroed the same way and listed in `freed`.
//! - The free list and the next page id live **in memory only**: a
//!   `PoolStore` does not survive a reopen. Persisting them (a free-list
//!   page chain or a Db header) is the Db's job.

use crate::error::{Error, Result};
use crate::store::{Fit, OpContext, PagePatches, PageStore, PageWrite, Patch};
use barracuda_codec::{Lsn, PAGE_HEADER_RESERVED_BYTES, PageId};
use barracuda_pool::{BufferPool, CommitOutcome, DurableLsn, ExclusiveGuard, SharedGuard};
use parking_lot::Mutex;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The stand-in log's LSN counter, shared by the store (which hands out LSNs)
/// and the pool's [`DurableLsn`] provider (which reports them all durable).
#[derive(Clone, Debug, Default)]
pub struct LsnCounter(Arc<AtomicU64>);

impl LsnCounter {
    /// A counter at LSN 0 (nothing logged).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The last LSN handed out.
    #[must_use]
    pub fn current(&self) -> Lsn {
        Lsn(self.0.load(Ordering::Acquire))
    }

    /// Hands out the next LSN.
    fn next(&self) -> Lsn {
        Lsn(self.0.fetch_add(1, Ordering::AcqRel) + 1)
    }
}

impl DurableLsn for LsnCounter {
    fn durable_lsn(&self) -> Lsn {
        self.current()
    }
}

/// A [`PageStore`] over a [`BufferPool`]. See the module documentation.
pub struct PoolStore {
    pool: Arc<BufferPool>,
    lsns: LsnCounter,
    next_page_id: AtomicU64,
    free_list: Mutex<Vec<PageId>>,
}

impl PoolStore {
    /// A store over `pool`, whose `Services::durable_lsn` must be
    /// [`Self::durable_lsn_provider`] of the same `lsns` (otherwise stamped
    /// pages may never become writable). Page ids are handed out from 0: the
    /// pool's file must hold no pages yet.
    pub fn new(pool: Arc<BufferPool>, lsns: LsnCounter) -> Result<Self> {
        crate::page::check_page_size(pool.config().page_size_bytes)?;
        Ok(Self {
            pool,
            lsns,
            next_page_id: AtomicU64::new(0),
            free_list: Mutex::new(Vec::new()),
        })
    }

    /// The provider to put in the pool's `Services::durable_lsn`: every LSN
    /// the store has handed out is durable.
    #[must_use]
    pub fn durable_lsn_provider(lsns: &LsnCounter) -> Arc<dyn DurableLsn> {
        Arc::new(lsns.clone())
    }

    /// The pool underneath.
    #[must_use]
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// The last LSN stamped on a page.
    #[must_use]
    pub fn lsn(&self) -> Lsn {
        self.lsns.current()
    }

    /// Page ids handed out so far (allocated or free).
    #[must_use]
    pub fn page_count(&self) -> u64 {
        self.next_page_id.load(Ordering::Relaxed)
    }

    /// Checks the store's own invariants: free page ids are distinct and
    /// were handed out; then the pool's (which panics on a violation).
    pub fn check_invariants(&self) -> Result<()> {
        let page_count = self.page_count();
        let mut free = self.free_page_ids();
        free.sort_unstable();
        for pair in free.windows(2) {
            if pair[0] == pair[1] {
                return Err(Error::Invariant {
                    page_id: pair[0],
                    reason: "on the free list twice".into(),
                });
            }
        }
        if let Some(&last) = free.last()
            && last.0 >= page_count
        {
            return Err(Error::Invariant {
                page_id: last,
                reason: format!("free but never allocated ({page_count} pages handed out)"),
            });
        }
        self.pool.check_invariants();
        Ok(())
    }

    /// Zeroes the page after the codec's reserved header and commits that at
    /// the pending LSN, without logging it (allocation and freeing are
    /// logged as such).
    fn zero_and_commit(guard: &mut PoolExclusive<'_>) -> Result<()> {
        guard.inner.rollback();
        let mut image = guard.inner.page().to_vec();
        image[PAGE_HEADER_RESERVED_BYTES..].fill(0);
        guard.write_diff(&image);
        guard.commit_unlogged()
    }
}

fn pool_error(source: barracuda_pool::PoolError) -> Error {
    Error::Pool { source }
}

/// An exclusive guard of a [`PoolStore`]: the pool's guard plus the
/// `OpContext` bookkeeping.
pub struct PoolExclusive<'a> {
    inner: ExclusiveGuard<'a>,
}

impl PoolExclusive<'_> {
    /// Commits pending patches at the pending LSN without adding them to an
    /// operation. A zeroed page always fits.
    fn commit_unlogged(&mut self) -> Result<()> {
        match self.inner.commit_pending_lsn().map_err(pool_error)? {
            CommitOutcome::Fits => Ok(()),
            CommitOutcome::DoesNotFit => Err(Error::CompressionUnfit {
                page_id: self.inner.page_id(),
            }),
        }
    }
}

impl Deref for PoolExclusive<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.inner.page()
    }
}

impl PageWrite for PoolExclusive<'_> {
    fn page_id(&self) -> PageId {
        self.inner.page_id()
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        if let Err(e) = self.inner.write(offset, bytes) {
            panic!(
                "tree bug: rejected write of {} bytes at {offset}: {e}",
                bytes.len()
            );
        }
    }

    fn commit(&mut self, op: &mut OpContext) -> Fit {
        if self.inner.pending_patch_count() == 0 {
            return Fit::Fits;
        }
        let patches: Vec<Patch> = self
            .inner
            .pending_patches()
            .map(|(offset, bytes)| Patch {
                offset: offset as u32,
                bytes: bytes.to_vec(),
            })
            .collect();
        match self.inner.commit_pending_lsn() {
            Ok(CommitOutcome::Fits) => {
                op.pages.push(PagePatches {
                    page_id: self.inner.page_id(),
                    patches,
                });
                Fit::Fits
            }
            Ok(CommitOutcome::DoesNotFit) => Fit::DoesNotFit,
            // The pool rolled the page back; a codec error on a page the
            // tree just built cannot be handled by splitting.
            Err(e) => panic!("commit of {} failed: {e}", self.inner.page_id()),
        }
    }
}

impl Drop for PoolExclusive<'_> {
    fn drop(&mut self) {
        // As in `MemStore`: uncommitted patches at release are a tree bug
        // (the pool would silently roll them back).
        if !std::thread::panicking() {
            debug_assert_eq!(
                self.inner.pending_patch_count(),
                0,
                "{} released with uncommitted patches",
                self.inner.page_id()
            );
        }
    }
}

impl PageStore for PoolStore {
    type Shared<'a>
        = SharedGuard<'a>
    where
        Self: 'a;
    type Exclusive<'a>
        = PoolExclusive<'a>
    where
        Self: 'a;

    fn page_size_bytes(&self) -> usize {
        self.pool.config().page_size_bytes
    }

    fn fix_shared(&self, page_id: PageId) -> Result<SharedGuard<'_>> {
        self.pool.fix_shared(page_id).map_err(pool_error)
    }

    fn fix_exclusive(&self, page_id: PageId) -> Result<PoolExclusive<'_>> {
        let inner = self.pool.fix_exclusive(page_id).map_err(pool_error)?;
        Ok(PoolExclusive { inner })
    }

    fn allocate(&self, op: &mut OpContext) -> Result<PoolExclusive<'_>> {
        let reused = self.free_list.lock().pop();
        let mut guard = match reused {
            Some(page_id) => match self.fix_exclusive(page_id) {
                Ok(guard) => guard,
                Err(e) => {
                    self.free_list.lock().push(page_id);
                    return Err(e);
                }
            },
            None => {
                let page_id = PageId(self.next_page_id.fetch_add(1, Ordering::Relaxed));
                let inner = self.pool.create(page_id).map_err(pool_error)?;
                PoolExclusive { inner }
            }
        };
        op.allocated.push(guard.page_id());
        Self::zero_and_commit(&mut guard)?;
        Ok(guard)
    }

    fn free(&self, mut guard: PoolExclusive<'_>, op: &mut OpContext) -> Result<()> {
        let page_id = guard.page_id();
        Self::zero_and_commit(&mut guard)?;
        drop(guard);
        op.freed.push(page_id);
        self.free_list.lock().push(page_id);
        Ok(())
    }

    fn free_page_ids(&self) -> Vec<PageId> {
        self.free_list.lock().clone()
    }

    fn finish_op(&self, op: OpContext) {
        if op.pages.is_empty() && op.allocated.is_empty() && op.freed.is_empty() {
            return;
        }
        let lsn = self.lsns.next();
        let pages = op.pages.iter().map(|p| p.page_id);
        for page_id in pages.chain(op.allocated.iter().copied()).chain(op.freed) {
            // A page committed in this operation is dirty at the pending LSN
            // and therefore still cached; `false` means another operation's
            // stamp already covered it.
            self.pool.set_page_lsn(page_id, lsn);
        }
    }
}
