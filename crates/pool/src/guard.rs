//! Guards: a pin plus a latch on one page, released on drop. Exclusive
//! guards record every change as a byte patch so it can go into the block's
//! modification log, or be rolled back when the page no longer fits.

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use barracuda_base::{Lsn, PageId};

use crate::arena::NIL;
use crate::backend::{AppendOutcome, CompressOutcome};
use crate::cache::Cache;
use crate::desc::{LSN_PENDING, LatchGuard};
use crate::error::{PoolError, Result};

/// Result of [`ExclusiveGuard::commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The changes are in the frame and in the block (its modification log,
    /// or a recompressed image); the page is dirty at the given LSN.
    Fits,
    /// The recompressed page no longer fits its block: the frame was rolled
    /// back to its bytes before the uncommitted patches; the tree must split
    /// the page and retry.
    DoesNotFit,
}

thread_local! {
    /// Copy of a block taken before a commit changes it, reused across
    /// commits of one thread so the write path does not allocate per commit.
    static BLOCK_BACKUP: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Patch and undo buffers of dropped exclusive guards, for this thread's
    /// next guards: a write fixes a few pages, and each guard would
    /// otherwise allocate both buffers again.
    static GUARD_BUFFERS: RefCell<Vec<(Vec<Patch>, Vec<u8>)>> = const { RefCell::new(Vec::new()) };
}

/// Spare guard buffer pairs kept per thread: more than a split holds.
const GUARD_BUFFERS_KEPT: usize = 16;
/// An undo buffer larger than this is not kept (a page rebuilt many times
/// over in one guard), so a thread's spares stay small.
const GUARD_UNDO_KEPT_BYTES_MAX: usize = 256 * 1024;

/// Shared access to a fixed page. The page cannot be evicted or changed
/// while the guard lives.
pub struct SharedGuard<'a> {
    pool: &'a Cache,
    desc: u32,
    page_id: PageId,
    /// The page's latch, held shared; `None` only while dropping, where it
    /// is released before the pin.
    latch: Option<LatchGuard<'a>>,
}

impl<'a> SharedGuard<'a> {
    pub(crate) fn new(pool: &'a Cache, desc: u32, page_id: PageId, latch: LatchGuard<'a>) -> Self {
        Self {
            pool,
            desc,
            page_id,
            latch: Some(latch),
        }
    }

    /// The page this guard fixes.
    pub fn page_id(&self) -> PageId {
        self.page_id
    }

    /// The uncompressed page.
    pub fn page(&self) -> &[u8] {
        let chunk = self.pool.descs[self.desc as usize].frame_chunk();
        debug_assert_ne!(chunk, NIL);
        // SAFETY: we hold the page pinned and shared-latched: its frame
        // cannot be dropped or written while the guard lives.
        unsafe { self.pool.frame(chunk) }
    }
}

impl std::ops::Deref for SharedGuard<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.page()
    }
}

impl Drop for SharedGuard<'_> {
    fn drop(&mut self) {
        // The latch goes before the pin: an unpinned page has no latch
        // holder, which eviction and reuse of its descriptor rely on.
        drop(self.latch.take());
        self.pool.descs[self.desc as usize].unpin();
    }
}

/// The most unchanged bytes between two writes that [`ExclusiveGuard::write`]
/// still records as one patch: a patch costs a header of about this size
/// wherever it is recorded (the log, a block's modification log).
const PATCH_GAP_MERGE_BYTES: usize = 8;

/// One recorded change: `len` bytes at `offset`, whose previous contents are
/// at `undo_offset` of the guard's undo buffer.
#[derive(Clone, Copy, Debug)]
struct Patch {
    offset: u32,
    len: u32,
    undo_offset: u32,
}

/// Exclusive access to a fixed page. Changes go through [`Self::write`] and
/// become durable-able with [`Self::commit`]; uncommitted changes are rolled
/// back when the guard drops.
pub struct ExclusiveGuard<'a> {
    pool: &'a Cache,
    desc: u32,
    page_id: PageId,
    /// The page's latch, held exclusively; `None` only while dropping, where
    /// it is released before the pin.
    latch: Option<LatchGuard<'a>>,
    patches: Vec<Patch>,
    undo: Vec<u8>,
    /// A created page is dirty at its first commit even without patches.
    created: bool,
}

impl<'a> ExclusiveGuard<'a> {
    pub(crate) fn new(
        pool: &'a Cache,
        desc: u32,
        page_id: PageId,
        latch: LatchGuard<'a>,
        created: bool,
    ) -> Self {
        let (patches, undo) = GUARD_BUFFERS
            .try_with(|spares| spares.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_default();
        Self {
            pool,
            desc,
            page_id,
            latch: Some(latch),
            patches,
            undo,
            created,
        }
    }

    /// The page this guard fixes.
    pub fn page_id(&self) -> PageId {
        self.page_id
    }

    fn frame_chunk(&self) -> u32 {
        let chunk = self.pool.descs[self.desc as usize].frame_chunk();
        debug_assert_ne!(chunk, NIL);
        chunk
    }

    /// The uncompressed page, with uncommitted patches applied.
    pub fn page(&self) -> &[u8] {
        // SAFETY: pinned and exclusively latched by this guard.
        unsafe { self.pool.frame(self.frame_chunk()) }
    }

    /// Writes `bytes` at `offset` of the page, remembering the old bytes. A
    /// write that starts at most 8 bytes after the last patch's end extends
    /// that patch (over the bytes between, unchanged) instead of adding one.
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<()> {
        let page_size_bytes = self.pool.page_size_bytes;
        let reserved_bytes = self.pool.services.codec.page_header_reserved_bytes();
        if offset < reserved_bytes
            || offset
                .checked_add(bytes.len())
                .is_none_or(|end| end > page_size_bytes)
        {
            return Err(PoolError::PatchOutOfBounds {
                page_id: self.page_id,
                offset,
                len: bytes.len(),
                page_size_bytes,
            });
        }
        if bytes.is_empty() {
            return Ok(());
        }
        // SAFETY: pinned and exclusively latched by this guard.
        let frame = unsafe { self.pool.frame_mut(self.frame_chunk()) };
        // A write that starts at most `PATCH_GAP_MERGE_BYTES` after the last
        // patch ends extends it over the gap (whose bytes it logs as they
        // are): an insert's header fields are one patch, not three.
        if let Some(last) = self.patches.last_mut() {
            let last_end = (last.offset + last.len) as usize;
            if (last_end..=last_end + PATCH_GAP_MERGE_BYTES).contains(&offset) {
                // Past `last_end` (the write is not empty): the gap and the
                // write's bytes join the patch's undo, which ends the buffer.
                let end = offset + bytes.len();
                self.undo.extend_from_slice(&frame[last_end..end]);
                last.len = (end - last.offset as usize) as u32;
                frame[offset..end].copy_from_slice(bytes);
                return Ok(());
            }
        }
        let target = &mut frame[offset..offset + bytes.len()];
        let undo_offset = self.undo.len() as u32;
        self.undo.extend_from_slice(target);
        target.copy_from_slice(bytes);
        self.patches.push(Patch {
            offset: offset as u32,
            len: bytes.len() as u32,
            undo_offset,
        });
        Ok(())
    }

    /// Number of uncommitted patches.
    pub fn pending_patch_count(&self) -> usize {
        self.patches.len()
    }

    /// Restores the frame to its bytes before the uncommitted patches.
    pub fn rollback(&mut self) {
        if self.patches.is_empty() {
            return;
        }
        // SAFETY: pinned and exclusively latched by this guard.
        let frame = unsafe { self.pool.frame_mut(self.frame_chunk()) };
        for patch in self.patches.iter().rev() {
            let (offset, len, undo) = (
                patch.offset as usize,
                patch.len as usize,
                patch.undo_offset as usize,
            );
            frame[offset..offset + len].copy_from_slice(&self.undo[undo..undo + len]);
        }
        self.patches.clear();
        self.undo.clear();
    }

    /// Makes the uncommitted patches part of the page: appends them to the
    /// block's modification log, recompressing when the log is full, and
    /// marks the page dirty at `lsn`. When the page no longer fits its block
    /// the patches are rolled back and `DoesNotFit` is returned.
    pub fn commit(&mut self, lsn: Lsn) -> Result<CommitOutcome> {
        self.commit_or_guess(lsn, false)
    }

    fn commit_or_guess(&mut self, lsn: Lsn, guessing: bool) -> Result<CommitOutcome> {
        if self.patches.is_empty() && !self.created {
            return Ok(CommitOutcome::Fits);
        }
        if self.pool.compressed {
            let outcome =
                BLOCK_BACKUP.with(|backup| self.apply_to_block(&mut backup.borrow_mut(), guessing));
            match outcome {
                Ok(CommitOutcome::Fits) => {}
                Ok(CommitOutcome::DoesNotFit) => {
                    self.rollback();
                    self.pool
                        .counters
                        .compression_failures
                        .fetch_add(1, Ordering::Relaxed);
                    return Ok(CommitOutcome::DoesNotFit);
                }
                Err(e) => {
                    self.rollback();
                    return Err(e);
                }
            }
        }
        self.pool.mark_dirty(self.desc, lsn);
        self.patches.clear();
        self.undo.clear();
        self.created = false;
        Ok(CommitOutcome::Fits)
    }

    /// Like [`Self::commit`] for callers that learn the LSN only after the
    /// log record is written (the tree commits a page, the write-ahead log
    /// later assigns the whole operation's LSN): the page becomes dirty at
    /// [`LSN_PENDING`], which no durable LSN reaches, so it is neither
    /// evicted nor written until [`BufferPool::set_page_lsn`](crate::BufferPool::set_page_lsn) gives it the
    /// real LSN.
    pub fn commit_pending_lsn(&mut self) -> Result<CommitOutcome> {
        self.commit(LSN_PENDING)
    }

    /// [`Self::commit_pending_lsn`] for a change the caller undoes by
    /// splitting the page when it does not fit (an insert into a leaf):
    /// a page fuller than its block is not compressed when the tree's
    /// recent pages say compression cannot make it fit
    /// ([`PageCodec::compress_guessing`](crate::PageCodec::compress_guessing)),
    /// which spares data that does not compress a failed compression per
    /// split. Recovery commits with [`Self::commit`], which never guesses.
    pub fn try_commit_pending_lsn(&mut self) -> Result<CommitOutcome> {
        self.commit_or_guess(LSN_PENDING, true)
    }

    /// The uncommitted patches, as `(offset, current bytes)` in the order
    /// they were written (later patches may overwrite earlier ones), so the
    /// caller can log them before committing.
    pub fn pending_patches(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        let page = self.page();
        self.patches.iter().map(move |patch| {
            let (offset, len) = (patch.offset as usize, patch.len as usize);
            (offset, &page[offset..offset + len])
        })
    }

    /// Appends the patches to the modification log or recompresses; on
    /// failure the block is restored from `backup`.
    fn apply_to_block(&self, backup: &mut Vec<u8>, guessing: bool) -> Result<CommitOutcome> {
        let desc = &self.pool.descs[self.desc as usize];
        // SAFETY: pinned and exclusively latched by this guard.
        let block = unsafe { self.pool.block_mut(desc.block_slot()) };
        // SAFETY: as above; the frame and the block are distinct chunks.
        let frame = unsafe { self.pool.frame(self.frame_chunk()) };
        backup.clear();
        backup.extend_from_slice(block);
        let mut log_full = false;
        for patch in &self.patches {
            let (offset, len) = (patch.offset as usize, patch.len as usize);
            match self
                .pool
                .services
                .codec
                .append_patch(block, offset, &frame[offset..offset + len])
            {
                Ok(AppendOutcome::Appended) => {}
                Ok(AppendOutcome::LogFull) => {
                    log_full = true;
                    break;
                }
                Err(e) => {
                    block.copy_from_slice(backup);
                    return Err(e);
                }
            }
        }
        if !log_full {
            return Ok(CommitOutcome::Fits);
        }
        self.pool
            .counters
            .recompressions
            .fetch_add(1, Ordering::Relaxed);
        let codec = &self.pool.services.codec;
        let outcome = if guessing {
            codec.compress_guessing(self.page_id, frame, block)
        } else {
            codec.compress(self.page_id, frame, block)
        };
        match outcome {
            Ok(CompressOutcome::Fits) => Ok(CommitOutcome::Fits),
            Ok(CompressOutcome::DoesNotFit) => {
                block.copy_from_slice(backup);
                Ok(CommitOutcome::DoesNotFit)
            }
            Err(e) => {
                block.copy_from_slice(backup);
                Err(e)
            }
        }
    }
}

impl std::ops::Deref for ExclusiveGuard<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.page()
    }
}

impl Drop for ExclusiveGuard<'_> {
    fn drop(&mut self) {
        self.rollback();
        // The latch goes before the pin, as for a shared guard.
        drop(self.latch.take());
        self.pool.descs[self.desc as usize].unpin();
        if self.undo.capacity() <= GUARD_UNDO_KEPT_BYTES_MAX {
            let buffers = (
                std::mem::take(&mut self.patches),
                std::mem::take(&mut self.undo),
            );
            // At thread exit the spares are gone: the buffers are freed.
            let _ = GUARD_BUFFERS.try_with(|spares| {
                let mut spares = spares.borrow_mut();
                if spares.len() < GUARD_BUFFERS_KEPT {
                    spares.push(buffers);
                }
            });
        }
    }
}
