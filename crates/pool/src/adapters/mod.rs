//! The pool's services implemented by the real layers: [`CodecService`]
//! over `barracuda-codec`'s `BlockCodec`, and [`FileService`] over any
//! `barracuda-io` `BlockFile`, whose page writes go through its doublewrite
//! area ([`doublewrite`]).

pub(crate) mod doublewrite;

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use barracuda_base::{Geometry, Lsn, PageId};
use barracuda_codec::{
    BlockCodec, Codec, CompressionStats, FitGuess, PAGE_HEADER_RESERVED_BYTES, PatchOutcome,
};
use barracuda_io::{AlignedBuf, BlockFile, CompletionSender, IoRequest};
use parking_lot::Mutex;

use crate::backend::{AppendOutcome, CompressOutcome, PageCodec, PageFile};
use crate::counters::CodecCounters;
use crate::error::{PoolError, Result};
use doublewrite::Doublewrite;

/// `barracuda-codec` as the pool's codec. A `BlockCodec` is a per-thread
/// context (library state and scratch buffer); this keeps a stack of them
/// and lends one per call, so after warm-up (one context per concurrently
/// compressing thread) nothing is allocated.
pub struct CodecService {
    codec: Codec,
    geometry: Geometry,
    stats: Arc<CompressionStats>,
    contexts: Mutex<Vec<BlockCodec>>,
    /// [`PageCodec::set_packing`]: compress with no log reserve.
    packing: AtomicBool,
    /// The last fits of [`PageCodec::compress_trial`], newest last.
    trials: Mutex<Vec<Trial>>,
    /// Compressions answered from `trials`.
    reused: AtomicU64,
    /// How this tree's pages compressed lately, for
    /// [`PageCodec::compress_guessing`] and trials.
    guess: FitGuess,
}

/// A page compressed to see whether it fits, and the block it gave: a
/// split compresses each image it stages, then commits the images, and
/// the commit compresses them again (the modification log cannot hold a
/// rebuilt page). Compression is a function of the page's bytes, its id
/// and whether the block is packed; the block's LSN is only stamped in its
/// header. So a commit of the same bytes takes the kept block and stamps
/// its own LSN: the block compressing afresh would give, bit for bit.
struct Trial {
    page_id: PageId,
    /// Compressed packed (no log reserve).
    packed: bool,
    page: Vec<u8>,
    block: Vec<u8>,
}

/// Trials kept: a split of one page into two checks two images, a split
/// up the tree one more per level. Each holds a copy of a page and of its
/// block (24 KiB at 16 KiB pages in 8 KiB blocks): at most 96 KiB beside
/// the pool's budget, used by writers only.
const TRIALS_KEPT: usize = 4;

impl CodecService {
    /// A service for one policy and geometry; checks them by building the
    /// first context.
    pub fn new(codec: Codec, geometry: Geometry) -> Result<Self> {
        let stats = Arc::new(CompressionStats::new());
        let first = BlockCodec::with_stats(codec.clone(), geometry, Arc::clone(&stats)).map_err(
            |source| PoolError::Codec {
                page_id: PageId(u64::MAX),
                source,
            },
        )?;
        Ok(Self {
            codec,
            geometry,
            stats,
            contexts: Mutex::new(vec![first]),
            packing: AtomicBool::new(false),
            trials: Mutex::new(Vec::with_capacity(TRIALS_KEPT)),
            reused: AtomicU64::new(0),
            guess: FitGuess::new(),
        })
    }

    /// The shared compression counters.
    pub fn stats(&self) -> &Arc<CompressionStats> {
        &self.stats
    }

    /// What compressing into `block` keeps of it: the LSN it carries (a
    /// new block has none yet), and whether to compress packed. A block
    /// packed by a compaction stays packed while the page fits it, so that
    /// a same-size overwrite does not split a packed page; read from the
    /// block, so recovery decides as the original run did.
    fn destination(&self, block: &[u8]) -> (Lsn, bool) {
        let lsn = barracuda_codec::read_header(block).map_or(Lsn(0), |header| header.lsn);
        let packed = barracuda_codec::is_packed(block) || self.packing.load(Ordering::Relaxed);
        (lsn, packed)
    }

    /// Compresses afresh; `guessing`: a page fuller than its block that
    /// recent pages say cannot fit is not compressed (`DoesNotFit`).
    fn compress_fresh(
        &self,
        page_id: PageId,
        page: &[u8],
        lsn: Lsn,
        packed: bool,
        block: &mut [u8],
        guessing: bool,
    ) -> Result<CompressOutcome> {
        let guess = guessing.then_some(&self.guess);
        let outcome = self.with_context(page_id, |c| {
            // An uncompressed block has no modification log to keep room for.
            let reserve = if packed || self.geometry.is_uncompressed() {
                0
            } else {
                barracuda_codec::log_reserve_bytes(block.len())
            };
            c.compress_guessing(page, page_id, lsn, block, reserve, guess)
        })?;
        Ok(match outcome {
            barracuda_codec::CompressOutcome::Fits { .. } => CompressOutcome::Fits,
            barracuda_codec::CompressOutcome::DoesNotFit { .. } => CompressOutcome::DoesNotFit,
        })
    }

    /// Whether a kept trial compressed these page bytes as `packed`: if
    /// so it is written to `block` (not yet stamped) and forgotten.
    fn take_trial(&self, page_id: PageId, packed: bool, page: &[u8], block: &mut [u8]) -> bool {
        let mut trials = self.trials.lock();
        let Some(at) = trials.iter().rposition(|t| {
            t.page_id == page_id
                && t.packed == packed
                && t.block.len() == block.len()
                && t.page == page
        }) else {
            return false;
        };
        let trial = trials.remove(at);
        block.copy_from_slice(&trial.block);
        true
    }

    fn with_context<T>(
        &self,
        page_id: PageId,
        f: impl FnOnce(&mut BlockCodec) -> barracuda_codec::Result<T>,
    ) -> Result<T> {
        let lent = self.contexts.lock().pop();
        let mut context = match lent {
            Some(context) => context,
            None => {
                BlockCodec::with_stats(self.codec.clone(), self.geometry, Arc::clone(&self.stats))
                    .map_err(|source| PoolError::Codec { page_id, source })?
            }
        };
        let result = f(&mut context);
        self.contexts.lock().push(context);
        result.map_err(|source| PoolError::Codec { page_id, source })
    }
}

impl CodecService {
    fn compress_or_guess(
        &self,
        page_id: PageId,
        page: &[u8],
        block: &mut [u8],
        guessing: bool,
    ) -> Result<CompressOutcome> {
        let (lsn, packed) = self.destination(block);
        if self.take_trial(page_id, packed, page, block) {
            barracuda_codec::seal(block, lsn)
                .map_err(|source| PoolError::Codec { page_id, source })?;
            self.reused.fetch_add(1, Ordering::Relaxed);
            return Ok(CompressOutcome::Fits);
        }
        self.compress_fresh(page_id, page, lsn, packed, block, guessing)
    }
}

impl PageCodec for CodecService {
    fn compress(&self, page_id: PageId, page: &[u8], block: &mut [u8]) -> Result<CompressOutcome> {
        self.compress_or_guess(page_id, page, block, false)
    }

    fn compress_guessing(
        &self,
        page_id: PageId,
        page: &[u8],
        block: &mut [u8],
    ) -> Result<CompressOutcome> {
        self.compress_or_guess(page_id, page, block, true)
    }

    fn compress_trial(
        &self,
        page_id: PageId,
        page: &[u8],
        block: &mut [u8],
        guessing: bool,
    ) -> Result<CompressOutcome> {
        let (lsn, packed) = self.destination(block);
        // A guessed no costs the split a less full page, never a broken
        // promise: a yes always comes from a real compression.
        let outcome = self.compress_fresh(page_id, page, lsn, packed, block, guessing)?;
        if outcome == CompressOutcome::Fits {
            let mut trials = self.trials.lock();
            // The oldest trial's buffers take the new one, once all are kept.
            let mut trial = if trials.len() == TRIALS_KEPT {
                trials.remove(0)
            } else {
                Trial {
                    page_id,
                    packed,
                    page: Vec::with_capacity(page.len()),
                    block: Vec::with_capacity(block.len()),
                }
            };
            trial.page_id = page_id;
            trial.packed = packed;
            trial.page.clear();
            trial.page.extend_from_slice(page);
            trial.block.clear();
            trial.block.extend_from_slice(block);
            trials.push(trial);
        }
        Ok(outcome)
    }

    fn set_packing(&self, packing: bool) {
        self.packing.store(packing, Ordering::Relaxed);
    }

    fn decompress(&self, page_id: PageId, block: &[u8], page: &mut [u8]) -> Result<()> {
        self.with_context(page_id, |c| c.decompress(block, page).map(|_| ()))
    }

    fn append_patch(&self, block: &mut [u8], offset: usize, bytes: &[u8]) -> Result<AppendOutcome> {
        match barracuda_codec::append_patch(block, offset, bytes) {
            Ok(PatchOutcome::Appended) => Ok(AppendOutcome::Appended),
            Ok(PatchOutcome::LogFull) => Ok(AppendOutcome::LogFull),
            Err(source) => {
                let page_id =
                    barracuda_codec::read_header(block).map_or(PageId(u64::MAX), |h| h.page_id);
                Err(PoolError::Codec { page_id, source })
            }
        }
    }

    fn verify(&self, page_id: PageId, block: &[u8]) -> Result<()> {
        barracuda_codec::verify(block, page_id)
            .map(|_| ())
            .map_err(|source| PoolError::Codec { page_id, source })
    }

    fn seal(&self, page_id: PageId, block: &mut [u8], lsn: Lsn) -> Result<()> {
        barracuda_codec::seal(block, lsn)
            .map(|_| ())
            .map_err(|source| PoolError::Codec { page_id, source })
    }

    fn page_header_reserved_bytes(&self) -> usize {
        PAGE_HEADER_RESERVED_BYTES
    }

    fn counters(&self) -> CodecCounters {
        let block_size = self.geometry.block_size();
        let snapshot = self.stats.snapshot();
        let row = snapshot.row(block_size).copied().unwrap_or_default();
        CodecCounters {
            block_size_bytes: self.geometry.block_size_bytes() as u64,
            compress_ops: row.compress_ops,
            compress_ops_ok: row.compress_ops_ok,
            compress_time_us: row.compress_time_ns / 1000,
            compress_reused: self.reused.load(Ordering::Relaxed),
            sparse_ops: row.sparse_ops,
            guessed_unfit: row.guessed_unfit,
            uncompress_ops: row.uncompress_ops,
            uncompress_time_us: row.uncompress_time_ns / 1000,
        }
    }
}

thread_local! {
    /// Bounce buffers for requests whose memory is not aligned as the file
    /// requires (blocks smaller than the memory alignment), reused per thread.
    static BOUNCE: RefCell<Vec<AlignedBuf>> = const { RefCell::new(Vec::new()) };
}

/// A `barracuda-io` file as the pool's data file. Requests whose buffer is
/// aligned go straight to the file (the pool's arena is 4096-aligned, so
/// blocks of 4 KiB and up always are); others go through a per-thread
/// aligned bounce buffer.
///
/// The file is written with zeros ahead of its pages, [`EXTEND_BYTES`] at
/// a time, so that a page write overwrites blocks the filesystem has
/// already allocated: on ext4 an `O_DIRECT` write past the end (or into a
/// hole) allocates blocks and changes the length under the inode's
/// exclusive lock, which io_uring cannot do without blocking, so it hands
/// the write to a kernel worker and the file's other writes wait behind
/// it. [`PageFile::trim`] cuts the zeros off again (at close).
pub struct FileService {
    file: Arc<dyn BlockFile>,
    queue_depth: usize,
    /// What the file holds, read from it at the first write.
    extent: Mutex<Option<Extent>>,
    /// Where page writes go first ([`FileService::with_doublewrite`]).
    pub(crate) doublewrite: Option<Doublewrite>,
}

/// How far a [`FileService`]'s file holds pages and, past them, zeros.
#[derive(Clone, Copy, Debug)]
struct Extent {
    /// The end of the last unit a page write reached (or the file's length
    /// when it was opened): what [`PageFile::trim`] keeps.
    pages_end: u64,
    /// The file's length: zeros from `pages_end` to here.
    len: u64,
    /// Writing zeros failed once: `len` is no longer known (a page write
    /// may have extended the file past it since), so no more zeros are
    /// written, which could land on such a page.
    zeros_failed: bool,
}

/// How much a [`FileService`] extends its file by, with zeros, when a page
/// write would end past it. Large enough that the extending write is rare
/// and sequential, small enough to be no matter in the file's size.
pub const EXTEND_BYTES: u64 = 1 << 20;

/// Batch size of a [`FileService`] unless told otherwise: `barracuda-io`'s
/// default `queue_depth`, so one batch fills each ring once.
pub const FILE_QUEUE_DEPTH_DEFAULT: usize = barracuda_io::QUEUE_DEPTH_DEFAULT as usize;

impl FileService {
    /// Wraps an open file, batching [`FILE_QUEUE_DEPTH_DEFAULT`] requests.
    pub fn new(file: Arc<dyn BlockFile>) -> Self {
        Self {
            file,
            queue_depth: FILE_QUEUE_DEPTH_DEFAULT,
            extent: Mutex::new(None),
            doublewrite: None,
        }
    }

    /// Batches up to `depth` requests (at least 1): pass the file's
    /// `IoOptions::queue_depth`, which `BlockFile` does not expose.
    pub fn with_queue_depth(mut self, depth: usize) -> Self {
        self.queue_depth = depth.max(1);
        self
    }

    /// The wrapped file.
    pub fn file(&self) -> &Arc<dyn BlockFile> {
        &self.file
    }

    fn extent(&self, extent: &mut Option<Extent>) -> Result<Extent> {
        if let Some(known) = *extent {
            return Ok(known);
        }
        let len = self.file.len().map_err(|source| PoolError::File {
            operation: "len",
            offset_bytes: 0,
            source,
        })?;
        let known = Extent {
            pages_end: len,
            len,
            zeros_failed: false,
        };
        *extent = Some(known);
        Ok(known)
    }

    /// Records page writes ending at `end_bytes`, and makes the file reach
    /// past it first: zeros from its end to the next multiple of
    /// [`EXTEND_BYTES`] at or after `end_bytes` ([`BlockFile::write_zeros`]).
    /// Every page write is below the file's end when it starts, and zeros
    /// go only past it, so none lands on a page. If the zeros cannot be
    /// written, page writes extend the file themselves from then on (and
    /// report their own errors): this is only for speed.
    ///
    /// The lock is held across the zero writes on purpose: one extension
    /// at a time is what keeps zeros off pages, and a page write past the
    /// end waits for them anyway. A write below the end takes the lock
    /// without I/O, once per batch.
    fn prepare(&self, end_bytes: u64) {
        let mut guard = self.extent.lock();
        let Ok(mut extent) = self.extent(&mut guard) else {
            return;
        };
        extent.pages_end = extent.pages_end.max(end_bytes);
        if end_bytes > extent.len && !extent.zeros_failed {
            let target = end_bytes.next_multiple_of(EXTEND_BYTES);
            match self.file.write_zeros(extent.len, target - extent.len) {
                Ok(()) => extent.len = target,
                Err(e) => {
                    tracing::warn!("writing zeros ahead of the pages failed: {e}");
                    extent.zeros_failed = true;
                }
            }
        }
        *guard = Some(extent);
    }

    fn aligned(&self, offset_bytes: u64, buf: &[u8]) -> bool {
        let alignment = self.file.alignment();
        (buf.as_ptr() as usize).is_multiple_of(alignment.mem_bytes)
            && buf.len().is_multiple_of(alignment.offset_bytes)
            && offset_bytes.is_multiple_of(alignment.offset_bytes as u64)
    }

    fn with_bounce<T>(&self, len_bytes: usize, f: impl FnOnce(&mut AlignedBuf) -> T) -> T {
        let align_bytes = self.file.alignment().mem_bytes;
        BOUNCE.with(|bounce| {
            let mut bounce = bounce.borrow_mut();
            let position = bounce
                .iter()
                .position(|b| b.len() == len_bytes && b.addr().is_multiple_of(align_bytes));
            let mut buf = match position {
                Some(position) => bounce.swap_remove(position),
                None => AlignedBuf::zeroed(len_bytes, align_bytes),
            };
            let result = f(&mut buf);
            bounce.push(buf);
            result
        })
    }
}

impl PageFile for FileService {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let error = |source| PoolError::File {
            operation: "read",
            offset_bytes: offset,
            source,
        };
        if self.aligned(offset, buf) {
            return self.file.read_at(offset, buf).map_err(error);
        }
        self.with_bounce(buf.len(), |bounce| {
            self.file.read_at(offset, bounce).map_err(error)?;
            buf.copy_from_slice(bounce);
            Ok(())
        })
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        let error = |source| PoolError::File {
            operation: "write",
            offset_bytes: offset,
            source,
        };
        self.prepare(offset + buf.len() as u64);
        if self.aligned(offset, buf) {
            return self.file.write_at(offset, buf).map_err(error);
        }
        self.with_bounce(buf.len(), |bounce| {
            bounce.copy_from_slice(buf);
            self.file.write_at(offset, bounce).map_err(error)
        })
    }

    fn read_if_cached(&self, offset: u64, buf: &mut [u8]) -> Result<bool> {
        if !self.aligned(offset, buf) {
            // The pool's slots are aligned; a bounce would cost the copy the
            // tier saves.
            return Ok(false);
        }
        self.file
            .read_if_cached(offset, buf)
            .map_err(|source| PoolError::File {
                operation: "read",
                offset_bytes: offset,
                source,
            })
    }

    fn uncache(&self, offset: u64, len_bytes: u64) {
        if let Err(e) = self.file.uncache(offset, len_bytes) {
            // A hint: the data is the same either way, only the OS cache
            // keeps a copy the pool holds too.
            tracing::debug!("dropping {len_bytes} bytes at {offset} from the page cache: {e}");
        }
    }

    fn sync_data(&self) -> Result<()> {
        self.file.sync_data().map_err(|source| PoolError::File {
            operation: "sync",
            offset_bytes: 0,
            source,
        })
    }

    fn trim(&self) -> Result<()> {
        self.empty_doublewrite()?;
        let mut guard = self.extent.lock();
        let Some(mut extent) = *guard else {
            return Ok(());
        };
        let error = |operation, source| PoolError::File {
            operation,
            offset_bytes: extent.pages_end,
            source,
        };
        let len = self.file.len().map_err(|e| error("len", e))?;
        if len > extent.pages_end {
            self.file
                .set_len(extent.pages_end)
                .map_err(|e| error("set_len", e))?;
            self.file.sync_data().map_err(|e| error("sync", e))?;
        }
        extent.len = extent.pages_end;
        *guard = Some(extent);
        Ok(())
    }

    fn queue_depth(&self) -> usize {
        self.queue_depth
    }

    fn alloc_buf(&self, len_bytes: usize) -> AlignedBuf {
        self.file.alloc_buf(len_bytes)
    }

    fn submit_reads(&self, requests: Vec<IoRequest>, completions: &CompletionSender) {
        self.file.submit(requests, completions);
    }

    fn write_batch(&self, requests: Vec<IoRequest>) -> Vec<(u64, Result<()>)> {
        match &self.doublewrite {
            Some(doublewrite) => self.write_batch_doubled(doublewrite, requests),
            None => self.write_batch_home(requests),
        }
    }
}

impl FileService {
    /// Writes `requests` to their places in the data file.
    pub(crate) fn write_batch_home(&self, requests: Vec<IoRequest>) -> Vec<(u64, Result<()>)> {
        let count = requests.len();
        let end = requests
            .iter()
            .map(|r| r.offset_bytes + r.buf.len() as u64)
            .max()
            .unwrap_or(0);
        self.prepare(end);
        let done: Vec<(u64, Result<()>)> = self
            .file
            .submit_and_wait(requests)
            .into_iter()
            .map(|completion| {
                let offset_bytes = completion.offset_bytes;
                let result = completion.result.map_err(|source| PoolError::File {
                    operation: "write",
                    offset_bytes,
                    source,
                });
                (completion.tag, result)
            })
            .collect();
        debug_assert_eq!(done.len(), count);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use barracuda_base::BlockSize;

    const PAGE: usize = 16 << 10;
    const BLOCK: usize = 8 << 10;

    fn service() -> CodecService {
        let geometry = Geometry::new(PAGE, BlockSize::Kib8).unwrap();
        CodecService::new(Codec::zstd_default(), geometry).unwrap()
    }

    /// A page of text-like bytes (compresses well), varied by `seed`.
    fn page(seed: u8) -> Vec<u8> {
        let mut page = vec![0u8; PAGE];
        for (i, b) in page.iter_mut().enumerate().skip(PAGE_HEADER_RESERVED_BYTES) {
            *b = b"barracuda keeps pages compressed "[i % 33]
                .wrapping_add(seed * (i % 7 == 0) as u8);
        }
        page
    }

    /// Compresses page `seed` as page `id` into `block` (a trial if
    /// `trial`), which must fit.
    fn fits(codec: &CodecService, id: u64, seed: u8, block: &mut [u8], trial: bool) {
        let outcome = if trial {
            codec.compress_trial(PageId(id), &page(seed), block, false)
        } else {
            codec.compress(PageId(id), &page(seed), block)
        };
        assert_eq!(outcome.unwrap(), CompressOutcome::Fits);
    }

    /// A destination block that already holds a page and carries `lsn`.
    fn destination(codec: &CodecService, lsn: Lsn) -> Vec<u8> {
        let mut block = vec![0u8; BLOCK];
        fits(codec, 9, 200, &mut block, false);
        barracuda_codec::seal(&mut block, lsn).unwrap();
        block
    }

    #[test]
    fn a_commit_after_its_trial_gives_the_block_compressing_afresh_gives() {
        let fresh = service();
        let mut expected = destination(&fresh, Lsn(77));
        fits(&fresh, 9, 1, &mut expected, false);

        let tried = service();
        let mut scratch = vec![0u8; BLOCK];
        fits(&tried, 9, 1, &mut scratch, true);
        let mut block = destination(&tried, Lsn(77));
        fits(&tried, 9, 1, &mut block, false);
        assert_eq!(tried.counters().compress_reused, 1);
        assert!(
            block == expected,
            "the reused block differs from a fresh compression"
        );
        assert_eq!(barracuda_codec::read_header(&block).unwrap().lsn, Lsn(77));
        barracuda_codec::verify(&block, PageId(9)).unwrap();
        // Used once: the same commit again compresses.
        fits(&tried, 9, 1, &mut block, false);
        assert_eq!(tried.counters().compress_reused, 1);
    }

    #[test]
    fn a_trial_of_other_bytes_another_page_or_another_mode_is_not_reused() {
        let codec = service();
        let mut scratch = vec![0u8; BLOCK];
        for (id, seed) in [(9, 1), (10, 2)] {
            fits(&codec, id, seed, &mut scratch, true);
        }
        let mut block = destination(&codec, Lsn(5));
        // Bytes changed since the trial.
        fits(&codec, 9, 3, &mut block, false);
        // Another page's trial.
        fits(&codec, 11, 2, &mut block, false);
        // Packing since the trial: compressed with no reserve instead.
        codec.set_packing(true);
        fits(&codec, 10, 2, &mut block, false);
        codec.set_packing(false);
        assert_eq!(codec.counters().compress_reused, 0);
        // The trial of page 10 is still kept.
        let mut block = destination(&codec, Lsn(5));
        fits(&codec, 10, 2, &mut block, false);
        assert_eq!(codec.counters().compress_reused, 1);
    }
}
