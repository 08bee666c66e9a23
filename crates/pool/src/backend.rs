//! The two services the pool needs from the layers below: a page codec
//! (compress, decompress, modification log, checksums) and a positional file.
//!
//! They are small traits so that the pool can be tested with in-memory
//! doubles ([`crate::testing`]) and so that the adapters to `barracuda-codec`
//! and `barracuda-io` stay in one place.

use barracuda_codec::{Lsn, PageId};

use crate::error::Result;
use crate::status::CodecCounters;

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
}

/// Tells the pool how far the write-ahead log is durable, so that a page is
/// written only after the log records of its changes are (the write-ahead
/// rule).
pub trait DurableLsn: Send + Sync {
    /// Every log record ending at or before this LSN is durable.
    fn durable_lsn(&self) -> Lsn;
}

impl<F: Fn() -> Lsn + Send + Sync> DurableLsn for F {
    fn durable_lsn(&self) -> Lsn {
        self()
    }
}
