//! The in-memory page store: [`MemStore`], its guards, and the
//! [`FitCheck`] seam through which its pages are held to a compressed
//! block (uncompressed, a stand-in model, or real `barracuda-codec`
//! blocks).

use super::{Fit, OpContext, PageStore, PageWrite, Patch, PatchBuf, Patches, diff_runs};
use crate::error::{Error, Result};
use barracuda_base::{Geometry, Lsn, PageId};
use barracuda_codec::{BlockCodec, Codec, CompressOutcome, PatchOutcome, append_patch};
use parking_lot::{Mutex, RawRwLock, RwLock};
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Decides, at each commit, whether a page still fits its compressed block,
/// keeping whatever per-page block state it needs in `block`.
///
/// The internal seam where the codec plugs in: [`CodecBlocks`] keeps a real
/// `barracuda-codec` block per page (patches go to its modification log;
/// when the log is full the page is recompressed, and only then can it fail
/// to fit, as in InnoDB). [`NonZeroBudget`] is a deterministic stand-in.
pub trait FitCheck: Send + Sync {
    /// True if `page` (already patched with `patches`) fits. On `false`,
    /// `block` must be left as it was: the store rolls the page back.
    fn commit(
        &self,
        page_id: PageId,
        page: &[u8],
        patches: Patches<'_>,
        block: &mut Vec<u8>,
    ) -> bool;

    /// What [`FitCheck::commit`] would answer, without changing `block`.
    fn would_commit(
        &self,
        page_id: PageId,
        page: &[u8],
        patches: Patches<'_>,
        block: &[u8],
    ) -> bool;

    /// Whether a store that guesses, as the buffer pool's does, answers
    /// `page` does-not-fit without checking, for [`PageWrite::try_commit`]
    /// and [`PageStore::would_fit`] outside [`OpContext::exact_fit`]. The
    /// default never guesses; a test store may guess wrong.
    fn guesses_unfit(&self, _page: &[u8]) -> bool {
        false
    }
}

/// Uncompressed pages: everything fits.
#[derive(Clone, Copy, Debug, Default)]
pub struct AlwaysFits;

impl FitCheck for AlwaysFits {
    fn commit(&self, _: PageId, _: &[u8], _: Patches<'_>, _: &mut Vec<u8>) -> bool {
        true
    }

    fn would_commit(&self, _: PageId, _: &[u8], _: Patches<'_>, _: &[u8]) -> bool {
        true
    }
}

/// A stand-in compressor model: a page "compresses" to its count of non-zero
/// bytes plus a fixed block header, and fits if that is at most
/// `block_size_bytes`. Free space is zeroed by the tree, so this behaves like
/// a compressor that squeezes free space and nothing else: deterministic,
/// and cheap enough for property tests.
#[derive(Clone, Copy, Debug)]
pub struct NonZeroBudget {
    /// The compressed block size the page must fit.
    pub block_size_bytes: usize,
}

impl FitCheck for NonZeroBudget {
    fn commit(
        &self,
        page_id: PageId,
        page: &[u8],
        patches: Patches<'_>,
        block: &mut Vec<u8>,
    ) -> bool {
        self.would_commit(page_id, page, patches, block)
    }

    fn would_commit(&self, _: PageId, page: &[u8], _: Patches<'_>, _: &[u8]) -> bool {
        // The codec's block header and trailer, estimated.
        const BLOCK_OVERHEAD_BYTES: usize = 64;
        page.iter().filter(|b| **b != 0).count() + BLOCK_OVERHEAD_BYTES <= self.block_size_bytes
    }
}

/// Real compressed blocks from `barracuda-codec`: the first commit of a page
/// compresses it; later commits append their patches to the block's
/// modification log; a full log recompresses the page, which may not fit.
pub struct CodecBlocks {
    codec: Mutex<BlockCodec>,
    block_size_bytes: usize,
}

impl CodecBlocks {
    /// Blocks of `geometry`, compressed with `codec`.
    pub fn new(codec: Codec, geometry: Geometry) -> Result<Self> {
        let block_codec = BlockCodec::new(codec, geometry).map_err(|e| Error::Codec {
            reason: e.to_string(),
        })?;
        Ok(Self {
            codec: Mutex::new(block_codec),
            block_size_bytes: geometry.block_size_bytes(),
        })
    }
}

impl FitCheck for CodecBlocks {
    fn commit(
        &self,
        page_id: PageId,
        page: &[u8],
        patches: Patches<'_>,
        block: &mut Vec<u8>,
    ) -> bool {
        match self.trial(page_id, page, patches, block) {
            Some(next) => {
                *block = next;
                true
            }
            None => false,
        }
    }

    fn would_commit(
        &self,
        page_id: PageId,
        page: &[u8],
        patches: Patches<'_>,
        block: &[u8],
    ) -> bool {
        self.trial(page_id, page, patches, block).is_some()
    }
}

impl CodecBlocks {
    /// The block after committing `patches` (which made `page`), if it fits:
    /// the patches appended to the modification log, or else the page
    /// compressed afresh.
    fn trial(
        &self,
        page_id: PageId,
        page: &[u8],
        patches: Patches<'_>,
        block: &[u8],
    ) -> Option<Vec<u8>> {
        if !block.is_empty() {
            let mut trial = block.to_vec();
            let logged = patches.iter().all(|(offset, bytes)| {
                matches!(
                    append_patch(&mut trial, offset, bytes),
                    Ok(PatchOutcome::Appended)
                )
            });
            if logged {
                return Some(trial);
            }
        }
        let mut fresh = vec![0u8; self.block_size_bytes];
        let outcome = self
            .codec
            .lock()
            .compress(page, page_id, Lsn(0), &mut fresh);
        matches!(outcome, Ok(CompressOutcome::Fits { .. })).then_some(fresh)
    }
}

/// A page copy that records the patches written to it: the patches a guard
/// would get from the same writes.
pub(crate) struct PatchRecorder {
    page_id: PageId,
    bytes: Vec<u8>,
    patches: Vec<Patch>,
}

impl PatchRecorder {
    /// A copy of `page` (whose id is `page_id`) with no patches yet.
    pub(crate) fn new(page_id: PageId, page: &[u8]) -> Self {
        Self {
            page_id,
            bytes: page.to_vec(),
            patches: Vec::new(),
        }
    }

    /// The patches written, in order.
    pub(crate) fn into_patches(self) -> Vec<Patch> {
        self.patches
    }
}

impl Deref for PatchRecorder {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl PageWrite for PatchRecorder {
    fn page_id(&self) -> PageId {
        self.page_id
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.bytes[offset..offset + bytes.len()].copy_from_slice(bytes);
        self.patches.push(Patch {
            offset: offset as u32,
            bytes: bytes.to_vec(),
        });
    }

    fn commit(&mut self, _: &mut OpContext) -> Fit {
        Fit::Fits
    }
}

/// Counters of a [`MemStore`], for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemStoreStats {
    /// Operations handed to `finish_op`.
    pub op_count: u64,
    /// Patches in those operations.
    pub patch_count: u64,
    /// Patch payload bytes in those operations.
    pub patch_bytes: u64,
    /// Commits answered `DoesNotFit`.
    pub fit_failure_count: u64,
    /// Pages allocated so far (including reused ones).
    pub allocate_count: u64,
}

/// A page and its per-page block state (empty for uncompressed stores).
pub struct Frame {
    page: Box<[u8]>,
    block: Vec<u8>,
}
type FrameLock = RwLock<Frame>;

/// An in-memory page store with parking_lot latches.
pub struct MemStore<F: FitCheck = AlwaysFits> {
    page_size_bytes: usize,
    frames: RwLock<Vec<Arc<FrameLock>>>,
    free_list: Mutex<Vec<PageId>>,
    fit: F,
    op_count: AtomicU64,
    patch_count: AtomicU64,
    patch_bytes: AtomicU64,
    fit_failure_count: AtomicU64,
    allocate_count: AtomicU64,
    /// The tree's entry count. Nothing here is logged, so a plain counter
    /// is as durable as the pages themselves.
    entry_count: AtomicU64,
}

impl MemStore<AlwaysFits> {
    /// An uncompressed store of `page_size_bytes` pages.
    pub fn new(page_size_bytes: usize) -> Result<Self> {
        Self::with_fit(page_size_bytes, AlwaysFits)
    }
}

impl<F: FitCheck> MemStore<F> {
    /// A store whose commits check fit with `fit`.
    pub fn with_fit(page_size_bytes: usize, fit: F) -> Result<Self> {
        crate::page::check_page_size(page_size_bytes)?;
        Ok(Self {
            page_size_bytes,
            frames: RwLock::new(Vec::new()),
            free_list: Mutex::new(Vec::new()),
            fit,
            op_count: AtomicU64::new(0),
            patch_count: AtomicU64::new(0),
            patch_bytes: AtomicU64::new(0),
            fit_failure_count: AtomicU64::new(0),
            allocate_count: AtomicU64::new(0),
            entry_count: AtomicU64::new(0),
        })
    }

    /// The counters so far.
    pub fn stats(&self) -> MemStoreStats {
        MemStoreStats {
            op_count: self.op_count.load(Ordering::Relaxed),
            patch_count: self.patch_count.load(Ordering::Relaxed),
            patch_bytes: self.patch_bytes.load(Ordering::Relaxed),
            fit_failure_count: self.fit_failure_count.load(Ordering::Relaxed),
            allocate_count: self.allocate_count.load(Ordering::Relaxed),
        }
    }

    /// The number of pages ever created (allocated or free).
    pub fn page_count(&self) -> usize {
        self.frames.read().len()
    }

    fn frame(&self, page_id: PageId) -> Result<Arc<FrameLock>> {
        let frames = self.frames.read();
        usize::try_from(page_id.0)
            .ok()
            .and_then(|i| frames.get(i))
            .cloned()
            .ok_or(Error::PageOutOfRange {
                page_id,
                page_count: frames.len() as u64,
            })
    }
}

/// A shared guard of a [`MemStore`].
pub struct MemShared {
    guard: parking_lot::lock_api::ArcRwLockReadGuard<RawRwLock, Frame>,
}

impl Deref for MemShared {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.guard.page
    }
}

/// An exclusive guard of a [`MemStore`].
pub struct MemExclusive<'a, F: FitCheck> {
    store: &'a MemStore<F>,
    page_id: PageId,
    guard: parking_lot::lock_api::ArcRwLockWriteGuard<RawRwLock, Frame>,
    /// The patches written since the last commit.
    pending: PatchBuf,
    /// The bytes those patches replaced, for a roll back.
    undo: PatchBuf,
}

thread_local! {
    /// Patch buffers of dropped exclusive guards, for this thread's next
    /// guards: an insert fixes a few pages, and buffers that start empty
    /// would grow again on every one.
    static SPARE_PATCH_BUFS: std::cell::RefCell<Vec<(PatchBuf, PatchBuf)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The most spare buffer pairs a thread keeps: a tree operation holds a
/// path's guards at once, rarely more than a few.
const SPARE_PATCH_BUFS_MAX: usize = 16;

fn take_patch_bufs() -> (PatchBuf, PatchBuf) {
    SPARE_PATCH_BUFS
        .with(|spare| spare.borrow_mut().pop())
        .unwrap_or_default()
}

fn give_back_patch_bufs(mut pending: PatchBuf, mut undo: PatchBuf) {
    pending.clear();
    undo.clear();
    SPARE_PATCH_BUFS.with(|spare| {
        let mut spare = spare.borrow_mut();
        if spare.len() < SPARE_PATCH_BUFS_MAX {
            spare.push((pending, undo));
        }
    });
}

impl<F: FitCheck> Deref for MemExclusive<'_, F> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.guard.page
    }
}

impl<F: FitCheck> PageWrite for MemExclusive<'_, F> {
    fn page_id(&self) -> PageId {
        self.page_id
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        let range = offset..offset + bytes.len();
        self.undo.push(offset, &self.guard.page[range.clone()]);
        self.guard.page[range].copy_from_slice(bytes);
        self.pending.push(offset, bytes);
    }

    fn commit(&mut self, op: &mut OpContext) -> Fit {
        if self.pending.is_empty() {
            return Fit::Fits;
        }
        let frame = &mut *self.guard;
        let fits = self.store.fit.commit(
            self.page_id,
            &frame.page,
            self.pending.view(),
            &mut frame.block,
        );
        if !fits {
            return self.roll_back();
        }
        self.undo.clear();
        op.commit_page(self.page_id, self.pending.view().iter());
        self.pending.clear();
        Fit::Fits
    }

    fn try_commit(&mut self, op: &mut OpContext) -> Fit {
        if !op.exact_fit
            && !self.pending.is_empty()
            && self.store.fit.guesses_unfit(&self.guard.page)
        {
            return self.roll_back();
        }
        self.commit(op)
    }
}

impl<F: FitCheck> MemExclusive<'_, F> {
    /// Undoes the pending patches of a commit that did not fit.
    fn roll_back(&mut self) -> Fit {
        let frame = &mut *self.guard;
        let undo = &self.undo;
        for p in undo.list.iter().rev() {
            let start = p.offset as usize;
            frame.page[start..start + p.len].copy_from_slice(&undo.bytes[p.start..p.start + p.len]);
        }
        self.undo.clear();
        self.pending.clear();
        self.store.fit_failure_count.fetch_add(1, Ordering::Relaxed);
        Fit::DoesNotFit
    }
}

impl<F: FitCheck> Drop for MemExclusive<'_, F> {
    fn drop(&mut self) {
        // A guard dropped with uncommitted patches is a tree bug: those
        // changes would never reach the log.
        if !std::thread::panicking() {
            debug_assert!(
                self.pending.is_empty(),
                "{} released with uncommitted patches",
                self.page_id
            );
        }
        give_back_patch_bufs(
            std::mem::take(&mut self.pending),
            std::mem::take(&mut self.undo),
        );
    }
}

impl<F: FitCheck> PageStore for MemStore<F> {
    type Shared<'a>
        = MemShared
    where
        Self: 'a;
    type Exclusive<'a>
        = MemExclusive<'a, F>
    where
        Self: 'a;

    fn page_size_bytes(&self) -> usize {
        self.page_size_bytes
    }

    fn fix_shared(&self, page_id: PageId) -> Result<MemShared> {
        let frame = self.frame(page_id)?;
        Ok(MemShared {
            guard: frame.read_arc(),
        })
    }

    fn fix_exclusive(&self, page_id: PageId) -> Result<MemExclusive<'_, F>> {
        let frame = self.frame(page_id)?;
        let guard = frame.write_arc();
        let (pending, undo) = take_patch_bufs();
        Ok(MemExclusive {
            store: self,
            page_id,
            guard,
            pending,
            undo,
        })
    }

    fn allocate(&self, op: &mut OpContext) -> Result<MemExclusive<'_, F>> {
        self.allocate_count.fetch_add(1, Ordering::Relaxed);
        let reused = self.free_list.lock().pop();
        let page_id = match reused {
            Some(page_id) => page_id,
            None => {
                let mut frames = self.frames.write();
                let page_id = PageId(frames.len() as u64);
                frames.push(Arc::new(RwLock::new(Frame {
                    page: vec![0u8; self.page_size_bytes].into_boxed_slice(),
                    block: Vec::new(),
                })));
                page_id
            }
        };
        op.allocated.push(page_id);
        let mut guard = self.fix_exclusive(page_id)?;
        // A reused page is zeroed directly: its old bytes belong to nobody,
        // and the log records the allocation, not a patch.
        guard.guard.page.fill(0);
        guard.guard.block.clear();
        Ok(guard)
    }

    fn free(&self, mut guard: MemExclusive<'_, F>, op: &mut OpContext) -> Result<()> {
        let page_id = guard.page_id;
        guard.pending.clear();
        guard.undo.clear();
        guard.guard.page.fill(0);
        guard.guard.block.clear();
        drop(guard);
        op.freed.push(page_id);
        self.free_list.lock().push(page_id);
        Ok(())
    }

    fn free_page_ids(&self) -> Vec<PageId> {
        self.free_list.lock().clone()
    }

    fn would_fit(
        &self,
        guard: &MemExclusive<'_, F>,
        image: &[u8],
        op: &mut OpContext,
    ) -> Result<bool> {
        debug_assert!(guard.pending.is_empty(), "would_fit with pending patches");
        if !op.exact_fit && self.fit.guesses_unfit(image) {
            return Ok(false);
        }
        let frame = &*guard.guard;
        let mut patches = PatchBuf::default();
        for (start, end) in diff_runs(&frame.page, image) {
            patches.push(start, &image[start..end]);
        }
        Ok(self
            .fit
            .would_commit(guard.page_id, image, patches.view(), &frame.block))
    }

    fn entry_count(&self) -> Result<Option<u64>> {
        Ok(Some(self.entry_count.load(Ordering::Acquire)))
    }

    fn add_entry_count(&self, delta: i64, _: &mut OpContext) -> Result<()> {
        self.entry_count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                n.checked_add_signed(delta)
            })
            .map(drop)
            .map_err(|n| Error::Corrupted {
                page_id: PageId(0),
                reason: format!("entry count {n} cannot change by {delta}"),
            })
    }

    fn set_entry_count(&self, count: u64, _: &mut OpContext) -> Result<()> {
        self.entry_count.store(count, Ordering::Release);
        Ok(())
    }

    fn finish_op(&self, op: OpContext) {
        self.op_count.fetch_add(1, Ordering::Relaxed);
        let patches = op.pages.iter().map(|p| p.patch_count() as u64).sum::<u64>();
        self.patch_count.fetch_add(patches, Ordering::Relaxed);
        self.patch_bytes
            .fetch_add(op.patch_bytes() as u64, Ordering::Relaxed);
    }
}
