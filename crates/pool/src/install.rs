//! Page images for the write-ahead log.
//!
//! The database logs a page's whole image the first time the page changes
//! after a checkpoint (protection against torn writes), and recovery puts
//! such images back. The image is what the pool would write to the file:
//! the compressed block with its modification log for a compressed pool, the
//! page itself (with the codec's header) for an uncompressed one. It is not
//! sealed: its LSN and checksum fields are stale until the page is written.

use barracuda_base::{Lsn, PageId};

use crate::error::{PoolError, Result};
use crate::guard::SharedGuard;
use crate::pool::BufferPool;

impl BufferPool {
    /// The on-disk image of the page `guard` holds (see the module docs).
    pub fn image<'g>(&'g self, guard: &'g SharedGuard<'_>) -> &'g [u8] {
        let d = self.pinned_desc(guard.page_id());
        let desc = &self.cache.descs[d as usize];
        // Only clean pages are kept without their block, and the log asks
        // for images of pages an operation just changed.
        assert!(
            !self.cache.compressed || desc.block_slot() != crate::arena::NIL,
            "{}: image of a page kept as its frame alone",
            guard.page_id()
        );
        // SAFETY: `guard` holds the page pinned and latched shared, so its
        // block and frame are neither freed nor written while it lives, and
        // the returned slice borrows the guard.
        unsafe {
            if self.cache.compressed {
                self.cache.block(desc.block_slot())
            } else {
                self.cache.frame(desc.frame_chunk())
            }
        }
    }

    /// Recovery: makes `image` (from [`Self::image`], via the log) the
    /// page's content, dirty at `lsn`, whether or not the page was cached
    /// or exists in the file. The file is not read, so a torn block on disk
    /// does not matter.
    pub fn install_image(&self, page_id: PageId, image: &[u8], lsn: Lsn) -> Result<()> {
        let unit_bytes = if self.cache.compressed {
            self.config()
                .block_size_bytes()
                .unwrap_or(self.cache.page_size_bytes)
        } else {
            self.cache.page_size_bytes
        };
        if image.len() != unit_bytes {
            return Err(PoolError::Corrupted {
                page_id,
                reason: format!(
                    "logged image has {} bytes, the pool's unit is {unit_bytes}",
                    image.len()
                ),
            });
        }
        let cached = self.cache.table.with_entry(page_id, |d| d).is_some();
        let guard = if cached {
            self.fix_exclusive(page_id)?
        } else {
            self.create(page_id)?
        };
        let d = self.pinned_desc(page_id);
        let desc = &self.cache.descs[d as usize];
        // SAFETY: `guard` holds the page pinned and exclusively latched, and
        // a fixed page always has a frame; frame and block are distinct.
        let (frame, block) = unsafe {
            let block = self
                .cache
                .compressed
                .then(|| self.cache.block_mut(desc.block_slot()));
            (self.cache.frame_mut(desc.frame_chunk()), block)
        };
        match block {
            Some(block) => {
                // Decode first, so a bad image leaves the page as it was.
                let mut page = vec![0; self.cache.page_size_bytes];
                self.cache
                    .services
                    .codec
                    .decompress(page_id, image, &mut page)?;
                block.copy_from_slice(image);
                frame.copy_from_slice(&page);
            }
            None => frame.copy_from_slice(image),
        }
        self.cache.mark_dirty(d, lsn);
        drop(guard);
        Ok(())
    }

    /// Whether `page` (a whole uncompressed page) would fit the pool's block
    /// if compressed afresh; always true for an uncompressed pool. A page
    /// that fits afresh fits whatever its modification log holds, because
    /// a commit recompresses when the log is full. Changes nothing.
    /// `guessing`: a page fuller than its block whose tree's recent pages
    /// say compression cannot make it fit is a no without compressing
    /// ([`crate::PageCodec::compress_guessing`]); a yes is always real.
    pub fn would_fit(&self, page_id: PageId, page: &[u8], guessing: bool) -> Result<bool> {
        if !self.cache.compressed {
            return Ok(true);
        }
        let block_bytes = self
            .config()
            .block_size_bytes()
            .unwrap_or(self.cache.page_size_bytes);
        let mut block = vec![0u8; block_bytes];
        let outcome = self
            .cache
            .services
            .codec
            .compress_trial(page_id, page, &mut block, guessing)?;
        Ok(outcome == crate::backend::CompressOutcome::Fits)
    }

    /// The descriptor of a page the caller holds fixed.
    fn pinned_desc(&self, page_id: PageId) -> u32 {
        match self.cache.table.with_entry(page_id, |d| d) {
            Some(d) => d,
            None => unreachable!("{page_id} is fixed, so it is in the page table"),
        }
    }
}
