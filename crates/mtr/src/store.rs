//! The buffer pool as a [`PageStore`]: the tree runs on `barracuda-pool`.
//!
//! [`PoolStore`] wraps a [`BufferPool`] and adds what the pool deliberately
//! does not have: page allocation, a persistent free list, and the order
//! "commit the page, then log the operation, then give the page its LSN".
//!
//! - Shared guards are the pool's [`SharedGuard`]; exclusive guards wrap its
//!   [`ExclusiveGuard`] ([`PoolExclusive`]). A write the pool rejects (out of
//!   the page, or on the codec's reserved header) is a tree bug and panics.
//! - [`PageWrite::commit`] copies the guard's pending patches, then calls
//!   [`ExclusiveGuard::commit_pending_lsn`]: the page is dirty at
//!   [`barracuda_pool::LSN_PENDING`], so the pool neither writes nor evicts
//!   it. On `Fits` the copies join the [`OpContext`]; on `DoesNotFit` the
//!   pool has rolled the page back and the copies are dropped.
//! - Who gives pages their LSN depends on how the store was made:
//!   - [`LsnMode::Counter`] (stand-alone, tests and benchmarks):
//!     [`PageStore::finish_op`] stamps every page the operation touched with
//!     one fresh LSN from an in-memory counter, which
//!     [`PoolStore::durable_lsn_provider`] reports as durable.
//!   - [`LsnMode::Logged`] (the database): the owner logs the `OpContext`
//!     as one redo group and calls [`PoolStore::stamp`] with the group's
//!     LSN. Operations the tree finishes itself ([`barracuda_btree::BTree::create`])
//!     are queued; the owner takes them with [`PoolStore::take_finished_ops`].
//! - **Page 0 is the store's meta page**: magic, format version, the next
//!   never-used page id, the head and length of the free list, and the
//!   tree's entry count. Every change to it is an ordinary logged patch, so
//!   the allocation state and the count are as durable and as recoverable
//!   as the tree itself.
//! - **The entry count** changes by a patch of page 0 in the same operation
//!   as the insert of a new key or the delete of a present one. A version 1
//!   meta page (written before counts were kept) has none:
//!   [`PageStore::entry_count`] answers `None` until the owner counts the
//!   leaves once and stores the count ([`barracuda_btree::BTree::recount_in`]), which
//!   rewrites the page as version 2.
//! - **The free list is a chain through the free pages**: a freed page is
//!   zeroed except a small header (magic and the next free page id) at the
//!   start of its body. Allocation pops the head (zeroing the page again);
//!   a never-used id is [`BufferPool::create`]d. Both are patches in the
//!   operation, so redo needs nothing but patches and images.
//! - Latch order: tree pages, then the meta page, then a free page. Nothing
//!   holds the meta page while waiting for a tree page.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use barracuda_base::{Lsn, PageId};
use barracuda_btree::recipe::{self, Recipe};
use barracuda_btree::store::diff_runs;
use barracuda_btree::{Error, Fit, LogicalKind, OpContext, PageStore, PageWrite, Result};
use barracuda_codec::PAGE_HEADER_RESERVED_BYTES;
use barracuda_pool::{
    Access, BufferPool, CommitOutcome, DurableLsn, ExclusiveGuard, PageIdHasher, SharedGuard,
};
use parking_lot::Mutex;

/// A set of page ids, hashed by one multiplication (page ids need no
/// flood-resistant hash, and SipHash showed in profiles of the write path).
pub(crate) type PageIdSet = HashSet<PageId, BuildHasherDefault<PageIdHasher>>;

/// The pages of a store imaged in the log since the last checkpoint and
/// still unwritten: a later change to one logs patches, not another image.
#[derive(Default)]
pub(crate) struct Imaged(pub(crate) Mutex<PageIdSet>);

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

/// Who stamps the LSN of changed pages; see the module documentation.
#[derive(Clone, Debug)]
pub enum LsnMode {
    /// [`PageStore::finish_op`] stamps from this stand-in counter.
    Counter(LsnCounter),
    /// The owner logs each operation and calls [`PoolStore::stamp`].
    Logged,
}

/// The bytes of a compressed block of `block_size_bytes` that a page's
/// compressed image may fill while the block keeps its room for the
/// modification log: the block less the codec's reserved header and the
/// log's reserve.
#[must_use]
pub fn image_room_bytes(block_size_bytes: usize) -> usize {
    block_size_bytes
        .saturating_sub(PAGE_HEADER_RESERVED_BYTES)
        .saturating_sub(barracuda_codec::log_reserve_bytes(block_size_bytes))
}

/// The meta page: page 0 of every store.
pub const META_PAGE_ID: PageId = PageId(0);

/// "BRMT": marks the meta page.
const META_MAGIC: u32 = u32::from_le_bytes(*b"BRMT");
/// Version of the meta page and free-page layouts: 2 added the entry count.
const META_VERSION: u32 = 2;
/// The version before the entry count, still read (and written, until the
/// count is stored) so that old files open.
const META_VERSION_UNCOUNTED: u32 = 1;
/// "BRFR": marks a page on the free list.
const FREE_MAGIC: u32 = u32::from_le_bytes(*b"BRFR");
/// "No page" in the free-list links.
const NO_PAGE: u64 = u64::MAX;

/// Byte offsets in the meta page, after the codec's reserved header.
mod meta {
    use super::PAGE_HEADER_RESERVED_BYTES as H;
    pub const MAGIC: usize = H;
    pub const VERSION: usize = H + 4;
    pub const NEXT_PAGE_ID: usize = H + 8;
    pub const FREE_HEAD: usize = H + 16;
    pub const FREE_COUNT: usize = H + 24;
    /// Version 2 on.
    pub const ENTRY_COUNT: usize = H + 32;
    pub const END: usize = H + 40;
}

/// Byte offsets in a free page.
mod free {
    use super::PAGE_HEADER_RESERVED_BYTES as H;
    pub const MAGIC: usize = H;
    pub const NEXT: usize = H + 8;
}

fn read_u32(page: &[u8], at: usize) -> u32 {
    let mut b = [0; 4];
    b.copy_from_slice(&page[at..at + 4]);
    u32::from_le_bytes(b)
}

fn read_u64(page: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&page[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The allocation state and entry count held by the meta page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Meta {
    next_page_id: u64,
    free_head: u64,
    free_count: u64,
    /// `None` on a version 1 page, which has no count.
    entry_count: Option<u64>,
}

impl Meta {
    fn read(page: &[u8]) -> Result<Meta> {
        let magic = read_u32(page, meta::MAGIC);
        let version = read_u32(page, meta::VERSION);
        let entry_count = match (magic, version) {
            (META_MAGIC, META_VERSION) => Some(read_u64(page, meta::ENTRY_COUNT)),
            (META_MAGIC, META_VERSION_UNCOUNTED) => None,
            _ => {
                return Err(Error::Corrupted {
                    page_id: META_PAGE_ID,
                    reason: format!("not a meta page (magic {magic:#x}, version {version})"),
                });
            }
        };
        Ok(Meta {
            next_page_id: read_u64(page, meta::NEXT_PAGE_ID),
            free_head: read_u64(page, meta::FREE_HEAD),
            free_count: read_u64(page, meta::FREE_COUNT),
            entry_count,
        })
    }

    /// Writes the fields that differ from the page, as one patch spanning
    /// the first to the last changed byte: for a count change, a few bytes.
    /// A page without a count stays version 1 (its bytes after the free
    /// count are left alone).
    fn write(&self, guard: &mut PoolExclusive<'_>) {
        let mut bytes = [0u8; meta::END - meta::MAGIC];
        let version = match self.entry_count {
            Some(_) => META_VERSION,
            None => META_VERSION_UNCOUNTED,
        };
        bytes[0..4].copy_from_slice(&META_MAGIC.to_le_bytes());
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.next_page_id.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.free_head.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.free_count.to_le_bytes());
        let end = match self.entry_count {
            Some(count) => {
                bytes[32..40].copy_from_slice(&count.to_le_bytes());
                meta::END
            }
            None => meta::ENTRY_COUNT,
        };
        let new = &bytes[..end - meta::MAGIC];
        let old = &guard[meta::MAGIC..end];
        let first = old.iter().zip(new).position(|(a, b)| a != b);
        let last = old.iter().zip(new).rposition(|(a, b)| a != b);
        if let (Some(first), Some(last)) = (first, last) {
            guard.write(meta::MAGIC + first, &new[first..=last]);
        }
    }
}

/// A [`PageStore`] over a [`BufferPool`]. See the module documentation.
pub struct PoolStore {
    pool: Arc<BufferPool>,
    mode: LsnMode,
    /// Mirror of the meta page's next page id, for [`Self::page_count`].
    next_page_id: AtomicU64,
    /// Operations finished by the tree itself, in [`LsnMode::Logged`].
    finished: Mutex<Vec<OpContext>>,
    /// Pages imaged in the log and not written since (written by the change that imaged them; see `log.rs`).
    imaged: Imaged,
}

impl PoolStore {
    /// A store over `pool`, whose file must hold no pages yet, with
    /// stand-alone LSNs: the pool's `Services::durable_lsn` must be
    /// [`Self::durable_lsn_provider`] of the same `lsns`. Formats the meta
    /// page.
    pub fn new(pool: Arc<BufferPool>, lsns: LsnCounter) -> Result<Self> {
        let mut op = OpContext::new();
        let store = Self::format(pool, LsnMode::Counter(lsns), &mut op)?;
        store.finish_op(op);
        Ok(store)
    }

    /// A new store over `pool` (whose file holds no pages yet): formats the
    /// meta page within `op`, which the caller logs (in
    /// [`LsnMode::Logged`]) or finishes.
    pub fn format(pool: Arc<BufferPool>, mode: LsnMode, op: &mut OpContext) -> Result<Self> {
        barracuda_btree::page::check_page_size(pool.config().page_size_bytes)?;
        let store = Self::with_mode(pool, mode, 1);
        {
            let mut guard =
                PoolExclusive::new(store.pool.create(META_PAGE_ID).map_err(pool_error)?);
            op.allocated.push(META_PAGE_ID);
            let meta = Meta {
                next_page_id: 1,
                free_head: NO_PAGE,
                free_count: 0,
                entry_count: Some(0),
            };
            meta.write(&mut guard);
            guard.commit_or_unfit(op)?;
        }
        Ok(store)
    }

    /// Opens the store whose meta page is in `pool`'s file (or cache, after
    /// recovery).
    pub fn open(pool: Arc<BufferPool>, mode: LsnMode) -> Result<Self> {
        barracuda_btree::page::check_page_size(pool.config().page_size_bytes)?;
        let meta = {
            let guard = pool.fix_shared(META_PAGE_ID).map_err(pool_error)?;
            Meta::read(&guard)?
        };
        Ok(Self::with_mode(pool, mode, meta.next_page_id))
    }

    fn with_mode(pool: Arc<BufferPool>, mode: LsnMode, next_page_id: u64) -> Self {
        Self {
            pool,
            mode,
            next_page_id: AtomicU64::new(next_page_id),
            finished: Mutex::new(Vec::new()),
            imaged: Imaged::default(),
        }
    }

    /// The provider to put in the pool's `Services::durable_lsn`: every LSN
    /// the store has handed out is durable.
    #[must_use]
    pub fn durable_lsn_provider(lsns: &LsnCounter) -> Arc<dyn DurableLsn> {
        Arc::new(lsns.clone())
    }

    pub(crate) fn imaged(&self) -> &Imaged {
        &self.imaged
    }

    /// The pool underneath.
    #[must_use]
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// The last LSN stamped from the stand-in counter (0 in
    /// [`LsnMode::Logged`]).
    #[must_use]
    pub fn lsn(&self) -> Lsn {
        match &self.mode {
            LsnMode::Counter(lsns) => lsns.current(),
            LsnMode::Logged => Lsn(0),
        }
    }

    /// Page ids handed out so far (allocated or free, meta page included).
    #[must_use]
    pub fn page_count(&self) -> u64 {
        self.next_page_id.load(Ordering::Relaxed)
    }

    /// Gives every page `op` touched the LSN of its log record, after which
    /// the pages may be written (once the log is durable up to `lsn`).
    pub fn stamp(&self, op: &OpContext, lsn: Lsn) {
        let pages = op.pages().iter().map(|p| p.page_id);
        for page_id in pages
            .chain(op.allocated.iter().copied())
            .chain(op.freed.iter().copied())
        {
            // A page committed in this operation is dirty at the pending LSN
            // and therefore still cached; `false` means another stamp of
            // this operation already covered it.
            self.pool.set_page_lsn(page_id, lsn);
        }
    }

    /// The operations the tree finished itself since the last call, in
    /// order ([`LsnMode::Logged`] only; the owner must log and stamp them).
    pub fn take_finished_ops(&self) -> Vec<OpContext> {
        std::mem::take(&mut *self.finished.lock())
    }

    /// Checks the store's own invariants: the meta page is valid, the free
    /// list is a chain of distinct free pages of the announced length below
    /// the next page id; then the pool's (which panics on a violation).
    pub fn check_invariants(&self) -> Result<()> {
        let meta = {
            let guard = self.fix_shared(META_PAGE_ID)?;
            Meta::read(&guard)?
        };
        if meta.next_page_id != self.page_count() {
            return Err(Error::Invariant {
                page_id: META_PAGE_ID,
                reason: format!(
                    "next page id {} but {} handed out",
                    meta.next_page_id,
                    self.page_count()
                ),
            });
        }
        let free = self.free_page_ids();
        if free.len() as u64 != meta.free_count {
            return Err(Error::Invariant {
                page_id: META_PAGE_ID,
                reason: format!(
                    "free list has {} pages, meta page says {}",
                    free.len(),
                    meta.free_count
                ),
            });
        }
        self.pool.check_invariants();
        Ok(())
    }

    /// Rewrites the meta page's entry count as `change` makes it from the
    /// old one (`None`: a version 1 page), within `op`. A page given a
    /// count becomes version 2.
    fn update_entry_count(
        &self,
        op: &mut OpContext,
        change: impl FnOnce(Option<u64>) -> Result<Option<u64>>,
    ) -> Result<()> {
        let mut guard = self.fix_exclusive(META_PAGE_ID)?;
        let mut meta = Meta::read(&guard)?;
        meta.entry_count = change(meta.entry_count)?;
        meta.write(&mut guard);
        guard.commit_or_unfit(op)
    }

    /// Walks the free list from the meta page, checking each link.
    fn walk_free_list(&self) -> Result<Vec<PageId>> {
        let meta = {
            let guard = self.fix_shared(META_PAGE_ID)?;
            Meta::read(&guard)?
        };
        let mut ids = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut next = meta.free_head;
        while next != NO_PAGE {
            let page_id = PageId(next);
            if next == 0 || next >= meta.next_page_id || !seen.insert(next) {
                return Err(Error::Corrupted {
                    page_id,
                    reason: format!(
                        "bad free-list link (next page id {}, {} pages listed)",
                        meta.next_page_id,
                        ids.len()
                    ),
                });
            }
            let guard = self.fix_shared(page_id)?;
            if read_u32(&guard, free::MAGIC) != FREE_MAGIC {
                return Err(Error::Corrupted {
                    page_id,
                    reason: "on the free list but not marked free".into(),
                });
            }
            next = read_u64(&guard, free::NEXT);
            ids.push(page_id);
        }
        Ok(ids)
    }

    /// Rewrites a page as a free page (`link = Some(next)`) or as zeros.
    fn rewrite_page(guard: &mut PoolExclusive<'_>, link: Option<u64>) {
        let mut image = guard.to_vec();
        image[PAGE_HEADER_RESERVED_BYTES..].fill(0);
        if let Some(next) = link {
            image[free::MAGIC..free::MAGIC + 4].copy_from_slice(&FREE_MAGIC.to_le_bytes());
            image[free::NEXT..free::NEXT + 8].copy_from_slice(&next.to_le_bytes());
        }
        guard.write_diff(&image);
    }
}

/// The pool's error, as the tree carries a store's.
pub(crate) fn pool_error(source: barracuda_pool::PoolError) -> Error {
    Error::Store {
        source: Box::new(source),
    }
}

/// An exclusive guard of a [`PoolStore`]: the pool's guard plus the
/// `OpContext` bookkeeping.
pub struct PoolExclusive<'a> {
    inner: ExclusiveGuard<'a>,
    /// The logical change that made every pending patch, if one did
    /// ([`PageWrite::write_rebuilt`], [`PageWrite::write_logged`]): the
    /// commit logs it instead of them.
    logical: Option<(LogicalKind, Vec<u8>)>,
    /// Inside [`PageWrite::write_logged`]: its writes are the logged
    /// change's.
    in_logged_change: bool,
}

impl<'a> PoolExclusive<'a> {
    fn new(inner: ExclusiveGuard<'a>) -> Self {
        Self {
            inner,
            logical: None,
            in_logged_change: false,
        }
    }

    /// Commits within `op`; a page the store itself rewrote (meta, free or
    /// zeroed page) that does not fit is an error, not a split.
    fn commit_or_unfit(&mut self, op: &mut OpContext) -> Result<()> {
        match self.commit(op) {
            Fit::Fits => Ok(()),
            Fit::DoesNotFit => Err(Error::CompressionUnfit {
                page_id: self.inner.page_id(),
            }),
        }
    }

    /// Commits a page just created by the pool (zero, no patches), which
    /// makes it dirty at the pending LSN.
    fn commit_created(&mut self) -> Result<()> {
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

    fn write_rebuilt(&mut self, image: &[u8], recipe: impl FnOnce(&[u8]) -> Recipe) {
        self.rebuild_logged(image, recipe);
    }

    fn write_logged(&mut self, kind: LogicalKind, change: &mut dyn FnMut(&mut Self) -> Vec<u8>) {
        let alone = self.inner.pending_patch_count() == 0 && !self.in_logged_change;
        self.in_logged_change = true;
        let body = change(self);
        self.in_logged_change = false;
        // After other pending changes (a rebuild's recipe among them), the
        // commit logs patches: one logical change cannot tell them all.
        self.logical = (alone && self.inner.pending_patch_count() > 0).then_some((kind, body));
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        // A write besides the logical change's: it no longer tells the
        // whole change.
        if !self.in_logged_change {
            self.logical = None;
        }
        if let Err(e) = self.inner.write(offset, bytes) {
            panic!(
                "tree bug: rejected write of {} bytes at {offset}: {e}",
                bytes.len()
            );
        }
    }

    fn commit(&mut self, op: &mut OpContext) -> Fit {
        self.commit_or_guess(op, false)
    }

    fn try_commit(&mut self, op: &mut OpContext) -> Fit {
        let guessing = !op.exact_fit;
        self.commit_or_guess(op, guessing)
    }
}

impl PoolExclusive<'_> {
    /// Commits within `op`; `guessing`: the pool may answer `DoesNotFit`
    /// for a page whose recent fellows say it cannot fit
    /// (`ExclusiveGuard::try_commit_pending_lsn`).
    fn commit_or_guess(&mut self, op: &mut OpContext, guessing: bool) -> Fit {
        let logical = self.logical.take();
        if self.inner.pending_patch_count() == 0 {
            return Fit::Fits;
        }
        // Recorded before the commit, which may roll the page back; taken
        // back out if it does.
        match logical {
            Some((kind, bytes)) => op.commit_page_logical(self.inner.page_id(), kind, &bytes),
            None => op.commit_page(self.inner.page_id(), self.inner.pending_patches()),
        }
        let outcome = if guessing {
            self.inner.try_commit_pending_lsn()
        } else {
            self.inner.commit_pending_lsn()
        };
        match outcome {
            Ok(CommitOutcome::Fits) => Fit::Fits,
            Ok(CommitOutcome::DoesNotFit) => {
                op.forget_last_commit();
                Fit::DoesNotFit
            }
            // The pool rolled the page back; a codec error on a page the
            // tree just built cannot be handled by splitting.
            Err(e) => panic!("commit of {} failed: {e}", self.inner.page_id()),
        }
    }
}

impl PoolExclusive<'_> {
    /// [`PageWrite::write_rebuilt`]: keeps the recipe for the commit when
    /// the rebuild is the page's only pending change, the recipe was made
    /// from the page as it is now (what redo will find; then it rebuilds
    /// exactly `image`, property-tested in `recipe.rs`), and it is shorter
    /// than the patches. Inside a logged change (an insert may compact the
    /// page first) that change is what is logged.
    fn rebuild_logged(&mut self, image: &[u8], recipe: impl FnOnce(&[u8]) -> Recipe) {
        assert_eq!(image.len(), self.len(), "image size must equal page size");
        let runs = diff_runs(self, image);
        // Inside a logged change, or after other changes, the recipe would
        // not tell the commit's whole change: it is not even made.
        let alone = self.inner.pending_patch_count() == 0 && !self.in_logged_change;
        let recipe = alone.then(|| recipe(self)).filter(|recipe| {
            let patch_bytes: usize = runs
                .iter()
                .map(|(start, end)| end - start + PATCH_HEADER_BYTES)
                .sum();
            recipe.bytes.len() < patch_bytes && recipe.made_from(self)
        });
        debug_assert!(
            recipe.as_ref().is_none_or(|recipe| {
                recipe::build(self, &recipe.bytes).is_ok_and(|built| built == image)
            }),
            "a recipe made from this page rebuilds another image"
        );
        for (start, end) in runs {
            self.write(start, &image[start..end]);
        }
        if let Some(recipe) = recipe.filter(|_| self.inner.pending_patch_count() > 0) {
            self.logical = Some((LogicalKind::Rebuild, recipe.bytes));
        }
    }
}

/// Bytes a patch costs in the log besides its own (offset and length), to
/// weigh a recipe against the patches it replaces.
const PATCH_HEADER_BYTES: usize = 8;

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

    fn fix_shared_point(&self, page_id: PageId) -> Result<SharedGuard<'_>> {
        self.pool
            .fix_shared_as(page_id, Access::Point)
            .map_err(pool_error)
    }

    fn fix_exclusive(&self, page_id: PageId) -> Result<PoolExclusive<'_>> {
        let inner = self.pool.fix_exclusive(page_id).map_err(pool_error)?;
        Ok(PoolExclusive::new(inner))
    }

    fn allocate(&self, op: &mut OpContext) -> Result<PoolExclusive<'_>> {
        let mut meta_guard = self.fix_exclusive(META_PAGE_ID)?;
        let mut meta = Meta::read(&meta_guard)?;
        let guard = if meta.free_head == NO_PAGE {
            let page_id = PageId(meta.next_page_id);
            let mut guard = PoolExclusive::new(self.pool.create(page_id).map_err(pool_error)?);
            meta.next_page_id += 1;
            meta.write(&mut meta_guard);
            meta_guard.commit_or_unfit(op)?;
            // A created page is zero; committing it makes it dirty.
            guard.commit_created()?;
            self.next_page_id
                .store(meta.next_page_id, Ordering::Relaxed);
            guard
        } else {
            let page_id = PageId(meta.free_head);
            let mut guard = self.fix_exclusive(page_id)?;
            if read_u32(&guard, free::MAGIC) != FREE_MAGIC {
                return Err(Error::Corrupted {
                    page_id,
                    reason: "free-list head is not marked free".into(),
                });
            }
            meta.free_head = read_u64(&guard, free::NEXT);
            meta.free_count = meta.free_count.saturating_sub(1);
            meta.write(&mut meta_guard);
            meta_guard.commit_or_unfit(op)?;
            Self::rewrite_page(&mut guard, None);
            guard.commit_or_unfit(op)?;
            guard
        };
        op.allocated.push(guard.page_id());
        Ok(guard)
    }

    fn free(&self, mut guard: PoolExclusive<'_>, op: &mut OpContext) -> Result<()> {
        let page_id = guard.page_id();
        let mut meta_guard = self.fix_exclusive(META_PAGE_ID)?;
        let mut meta = Meta::read(&meta_guard)?;
        Self::rewrite_page(&mut guard, Some(meta.free_head));
        guard.commit_or_unfit(op)?;
        drop(guard);
        meta.free_head = page_id.0;
        meta.free_count += 1;
        meta.write(&mut meta_guard);
        meta_guard.commit_or_unfit(op)?;
        op.freed.push(page_id);
        Ok(())
    }

    /// Whether `image` compressed afresh fits the block: conservative,
    /// because a commit that finds the modification log full recompresses
    /// the whole page, and a page that fits afresh fits.
    fn would_fit(
        &self,
        guard: &PoolExclusive<'_>,
        image: &[u8],
        op: &mut OpContext,
    ) -> Result<bool> {
        let mut page = image.to_vec();
        // The codec's reserved bytes stay the page's own.
        page[..PAGE_HEADER_RESERVED_BYTES].copy_from_slice(&guard[..PAGE_HEADER_RESERVED_BYTES]);
        self.pool
            .would_fit(guard.page_id(), &page, !op.exact_fit)
            .map_err(pool_error)
    }

    fn is_cached(&self, page_id: PageId) -> bool {
        self.pool.is_cached(page_id)
    }

    fn prefetch(&self, page_ids: &[PageId]) -> usize {
        // Asynchronous read-ahead through the file layer's read threads;
        // it never blocks on a latch and drops its own errors.
        self.pool.prefetch(page_ids)
    }

    fn free_page_ids(&self) -> Vec<PageId> {
        match self.walk_free_list() {
            Ok(ids) => ids,
            Err(e) => {
                tracing::error!("free list unreadable: {e}");
                Vec::new()
            }
        }
    }

    fn entry_count(&self) -> Result<Option<u64>> {
        let guard = self.fix_shared(META_PAGE_ID)?;
        Ok(Meta::read(&guard)?.entry_count)
    }

    fn add_entry_count(&self, delta: i64, op: &mut OpContext) -> Result<()> {
        self.update_entry_count(op, |count| {
            let Some(count) = count else {
                // A version 1 page: no count to keep until one is stored.
                return Ok(None);
            };
            match count.checked_add_signed(delta) {
                Some(next) => Ok(Some(next)),
                None => Err(Error::Corrupted {
                    page_id: META_PAGE_ID,
                    reason: format!("entry count {count} cannot change by {delta}"),
                }),
            }
        })
    }

    fn set_entry_count(&self, count: u64, op: &mut OpContext) -> Result<()> {
        self.update_entry_count(op, |_| Ok(Some(count)))
    }

    fn finish_op(&self, op: OpContext) {
        if op.pages().is_empty() && op.allocated.is_empty() && op.freed.is_empty() {
            return;
        }
        match &self.mode {
            LsnMode::Counter(lsns) => self.stamp(&op, lsns.next()),
            LsnMode::Logged => self.finished.lock().push(op),
        }
    }
}
