//! The two services the pool needs from the layers below: a page codec
//! (compress, decompress, modification log, checksums) and a positional file.
//!
//! They are small traits so that the pool can be tested with in-memory
//! doubles ([`crate::testing`]) and so that the adapters to `barracuda-codec`
//! and `barracuda-io` stay in one place.

use barracuda_base::{Lsn, PageId};
use barracuda_io::{AlignedBuf, CompletionSender, IoError, IoRequest, OpKind};

use crate::counters::CodecCounters;
use crate::error::{PoolError, Result};

/// Did a page fit its block?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompressOutcome {
    /// The compressed page and an empty modification log fit the block.
    Fits,
    /// The page no longer fits: the tree must split it.
    DoesNotFit,
}

/// Did a patch fit the block's modification log?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The patch was appended; decompressing the block now yields the page
    /// with the patch applied.
    Appended,
    /// The log is full; the block is unchanged and must be recompressed.
    LogFull,
}

/// Compression of pages into blocks, as the pool uses it. Implementations
/// must be usable from many threads at once (per-thread contexts inside).
pub trait PageCodec: Send + Sync {
    /// Compresses `page` into `block` (its whole length), with an empty
    /// modification log. On `DoesNotFit` the block's bytes are unspecified
    /// and the caller restores them.
    fn compress(&self, page_id: PageId, page: &[u8], block: &mut [u8]) -> Result<CompressOutcome>;
    /// [`compress`](Self::compress), except that a page whose recent
    /// fellows say compression cannot make it fit may be `DoesNotFit`
    /// without being compressed. For commits whose `DoesNotFit` the caller
    /// handles by splitting; never for recovery, which must commit what
    /// the original run committed.
    fn compress_guessing(
        &self,
        page_id: PageId,
        page: &[u8],
        block: &mut [u8],
    ) -> Result<CompressOutcome> {
        self.compress(page_id, page, block)
    }
    /// [`compress`](Self::compress) to see whether `page` fits, into a
    /// scratch `block`. A codec may keep the result for the `compress` of
    /// the same page bytes that commonly follows (the split that checked
    /// its images commits them), which must then produce the same block as
    /// compressing afresh would. With `guessing`, a trial may guess as
    /// [`compress_guessing`](Self::compress_guessing) does: its no lets a
    /// split choose another image, and its yes comes from a compression.
    fn compress_trial(
        &self,
        page_id: PageId,
        page: &[u8],
        block: &mut [u8],
        guessing: bool,
    ) -> Result<CompressOutcome> {
        if guessing {
            self.compress_guessing(page_id, page, block)
        } else {
            self.compress(page_id, page, block)
        }
    }
    /// Decompresses `block` into `page` (its whole length) and applies the
    /// block's modification log.
    fn decompress(&self, page_id: PageId, block: &[u8], page: &mut [u8]) -> Result<()>;
    /// Appends one patch (`bytes` written at `offset` of the page) to the
    /// block's modification log.
    fn append_patch(&self, block: &mut [u8], offset: usize, bytes: &[u8]) -> Result<AppendOutcome>;
    /// Checks a block just read: checksum, page id, format.
    fn verify(&self, page_id: PageId, block: &[u8]) -> Result<()>;
    /// Stamps the LSN and checksum into a block about to be written.
    fn seal(&self, page_id: PageId, block: &mut [u8], lsn: Lsn) -> Result<()>;
    /// Bytes at the start of every page that belong to the codec (a copy of
    /// the block header): patches may not touch them.
    fn page_header_reserved_bytes(&self) -> usize {
        0
    }
    /// The codec's compression counters, for the pool's status.
    fn counters(&self) -> CodecCounters {
        CodecCounters::default()
    }
    /// While `packing`, [`compress`](Self::compress) keeps no room for the
    /// modification log: a page fits when its compressed image fits the
    /// block. For pages written once in key order and then mostly read (a
    /// compaction's); see `BlockCodec::compress_reserving`. A block packed
    /// so stays packed when recompressed later, while the page fits it. A
    /// codec without a reserve ignores it.
    fn set_packing(&self, _packing: bool) {}
}

/// A positional data file holding one block (or, uncompressed, one page) per
/// page id at `page_id * unit size`.
pub trait PageFile: Send + Sync {
    /// Fills `buf` from `offset`. A short file is an error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Writes `buf` at `offset`; durable only after [`PageFile::sync_data`].
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()>;
    /// Makes every write that returned durable.
    fn sync_data(&self) -> Result<()>;

    /// Fills `buf` from `offset` only if the OS page cache holds all of it
    /// (see `barracuda_io::BlockFile::read_if_cached`); `Ok(false)` if not,
    /// and always for a file without a page cache (the default).
    fn read_if_cached(&self, offset: u64, buf: &mut [u8]) -> Result<bool> {
        let _ = (offset, buf);
        Ok(false)
    }

    /// Drops the OS page cache's clean copy of the range, a hint that
    /// cannot fail (see `barracuda_io::BlockFile::uncache`). The default
    /// holds no copy.
    fn uncache(&self, offset: u64, len_bytes: u64) {
        let _ = (offset, len_bytes);
    }

    /// Gives back what the file holds past its last page (zeros written
    /// ahead of the pages) and its doublewrite area if it has one, and
    /// syncs the new lengths. Call it with no page write running. The
    /// default holds nothing extra.
    fn trim(&self) -> Result<()> {
        Ok(())
    }

    /// How many requests of one batch the file layer runs at once: the pool
    /// writes at most this many pages per batch.
    fn queue_depth(&self) -> usize {
        1
    }

    /// An aligned buffer of `len_bytes` for a batched request (from the file
    /// layer's registered buffers when it has them). Contents unspecified.
    fn alloc_buf(&self, len_bytes: usize) -> AlignedBuf {
        AlignedBuf::zeroed(len_bytes, UNIT_ALIGNMENT_BYTES_DEFAULT)
    }

    /// Starts the reads of `requests` (all [`barracuda_io::IoOp::Read`])
    /// without waiting for them; each yields exactly one completion on
    /// `completions`, in any order, with its buffer. The default reads them
    /// one by one on the calling thread before returning.
    fn submit_reads(&self, requests: Vec<IoRequest>, completions: &CompletionSender) {
        for mut request in requests {
            let result = self
                .read_at(request.offset_bytes, &mut request.buf)
                .map_err(|e| as_io_error(OpKind::Read, request.offset_bytes, request.buf.len(), e));
            completions.send(request.complete(result));
        }
    }

    /// Writes every buffer of `requests` (all writes, to distinct units) and
    /// waits for them; returns `(tag, result)` per request, in any order.
    /// The default writes them one by one on the calling thread.
    fn write_batch(&self, requests: Vec<IoRequest>) -> Vec<(u64, Result<()>)> {
        requests
            .into_iter()
            .map(|request| {
                (
                    request.tag,
                    self.write_at(request.offset_bytes, &request.buf),
                )
            })
            .collect()
    }
}

/// Alignment of the default [`PageFile::alloc_buf`]: a page of memory, which
/// satisfies every `O_DIRECT` rule the file layer knows.
pub const UNIT_ALIGNMENT_BYTES_DEFAULT: usize = 4096;

/// A pool error as a file-layer error, for completions of batches that a
/// [`PageFile`] without a batch path runs inline.
fn as_io_error(op: OpKind, offset_bytes: u64, len_bytes: usize, error: PoolError) -> IoError {
    IoError::Os {
        op,
        path: "page file".into(),
        offset_bytes,
        len_bytes,
        source: std::io::Error::other(error.to_string()),
    }
}

/// Tells the pool how far the write-ahead log is durable, so that a page is
/// written only after the log records of its changes are (the write-ahead
/// rule).
pub trait DurableLsn: Send + Sync {
    /// Every log record ending at or before this LSN is durable.
    fn durable_lsn(&self) -> Lsn;

    /// The pool found no free memory because dirty pages wait for the log:
    /// make everything logged so far durable, if possible. Called without
    /// the pool's mutex (the caller may hold page latches). Default: nothing.
    fn request_durable(&self) {}
}

impl<F: Fn() -> Lsn + Send + Sync> DurableLsn for F {
    fn durable_lsn(&self) -> Lsn {
        self()
    }
}
