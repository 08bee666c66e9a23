//! Test doubles: a simple page codec and an in-memory file, so that the pool
//! can be tested (and fuzzed) without the real codec and file layer. Not for
//! production use.
//!
//! `SimpleCodec`'s block: `[page_id u64][lsn u64][checksum u32][body_len u32]
//! [body][log: (offset u32, len u32, bytes)* ][end marker u32::MAX]`, where
//! the body is the page with its trailing zeros cut off. With
//! [`SimpleCodec::stored`] (for uncompressed pools) an image is the header
//! followed by the page's bytes after it. A page "compresses"
//! as well as it ends in zeros, which tests control exactly.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use barracuda_base::{Lsn, PageId};
use parking_lot::Mutex;

use crate::backend::{AppendOutcome, CompressOutcome, PageCodec, PageFile};
use crate::counters::CodecCounters;
use crate::error::{PoolError, Result};

/// Bytes at the start of a block (and, in an uncompressed pool, of a page
/// image on disk) that `SimpleCodec` uses for its header; an uncompressed
/// page's owner must leave them alone, as a tree leaves its page header to
/// the checksum code.
pub const HEADER_BYTES: usize = 24;
const LOG_END: u32 = u32::MAX;
const LOG_ENTRY_HEADER_BYTES: usize = 8;

/// A codec whose compression is trailing-zero trimming, with a modification
/// log and a checksum, for tests.
#[derive(Default)]
pub struct SimpleCodec {
    /// Images are the page as it is (for an uncompressed pool).
    stored: bool,
    compress_ops: AtomicU64,
    compress_ops_ok: AtomicU64,
    uncompress_ops: AtomicU64,
}

impl SimpleCodec {
    /// The codec of an uncompressed pool: an image is the header followed
    /// by the page's bytes after it.
    pub fn stored() -> Self {
        Self {
            stored: true,
            ..Self::default()
        }
    }
}

fn checksum(bytes: &[u8]) -> u32 {
    // FNV-1a: enough to catch a wrong or torn block in tests.
    let mut hash = 0x811c_9dc5_u32;
    for &b in bytes {
        hash = (hash ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    hash
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// Where the log ends (the position of its end marker).
fn log_end(block: &[u8]) -> Result<usize> {
    let corrupt = |reason: &str| PoolError::Corrupted {
        page_id: PageId(read_u64(block, 0)),
        reason: reason.into(),
    };
    let mut at = HEADER_BYTES + read_u32(block, 20) as usize;
    loop {
        if at + 4 > block.len() {
            return Err(corrupt("log runs past the block"));
        }
        let offset = read_u32(block, at);
        if offset == LOG_END {
            return Ok(at);
        }
        let len = read_u32(block, at + 4) as usize;
        at += LOG_ENTRY_HEADER_BYTES + len;
    }
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

impl PageCodec for SimpleCodec {
    fn compress(&self, page_id: PageId, page: &[u8], block: &mut [u8]) -> Result<CompressOutcome> {
        self.compress_ops.fetch_add(1, Ordering::Relaxed);
        if self.stored {
            // An uncompressed pool's image: the header, then the page as it is.
            block[0..8].copy_from_slice(&page_id.0.to_le_bytes());
            block[8..HEADER_BYTES].fill(0);
            block[HEADER_BYTES..].copy_from_slice(&page[HEADER_BYTES..]);
            self.compress_ops_ok.fetch_add(1, Ordering::Relaxed);
            return Ok(CompressOutcome::Fits);
        }
        let body_len = page
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |last| last + 1);
        if HEADER_BYTES + body_len + 4 > block.len() {
            return Ok(CompressOutcome::DoesNotFit);
        }
        block[0..8].copy_from_slice(&page_id.0.to_le_bytes());
        block[8..16].fill(0);
        block[20..24].copy_from_slice(&(body_len as u32).to_le_bytes());
        block[HEADER_BYTES..HEADER_BYTES + body_len].copy_from_slice(&page[..body_len]);
        let end = HEADER_BYTES + body_len;
        block[end..end + 4].copy_from_slice(&LOG_END.to_le_bytes());
        block[end + 4..].fill(0);
        self.compress_ops_ok.fetch_add(1, Ordering::Relaxed);
        Ok(CompressOutcome::Fits)
    }

    fn decompress(&self, page_id: PageId, block: &[u8], page: &mut [u8]) -> Result<()> {
        self.uncompress_ops.fetch_add(1, Ordering::Relaxed);
        let body_len = read_u32(block, 20) as usize;
        if HEADER_BYTES + body_len > block.len() || body_len > page.len() {
            return Err(PoolError::Corrupted {
                page_id,
                reason: "body length".into(),
            });
        }
        page[..body_len].copy_from_slice(&block[HEADER_BYTES..HEADER_BYTES + body_len]);
        page[body_len..].fill(0);
        let end = log_end(block)?;
        let mut at = HEADER_BYTES + body_len;
        while at < end {
            let offset = read_u32(block, at) as usize;
            let len = read_u32(block, at + 4) as usize;
            if offset + len > page.len() {
                return Err(PoolError::Corrupted {
                    page_id,
                    reason: "log entry outside the page".into(),
                });
            }
            page[offset..offset + len].copy_from_slice(&block[at + 8..at + 8 + len]);
            at += LOG_ENTRY_HEADER_BYTES + len;
        }
        Ok(())
    }

    fn append_patch(&self, block: &mut [u8], offset: usize, bytes: &[u8]) -> Result<AppendOutcome> {
        let end = log_end(block)?;
        let needed = LOG_ENTRY_HEADER_BYTES + bytes.len() + 4;
        if end + needed > block.len() {
            return Ok(AppendOutcome::LogFull);
        }
        block[end..end + 4].copy_from_slice(&(offset as u32).to_le_bytes());
        block[end + 4..end + 8].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        block[end + 8..end + 8 + bytes.len()].copy_from_slice(bytes);
        let marker = end + 8 + bytes.len();
        block[marker..marker + 4].copy_from_slice(&LOG_END.to_le_bytes());
        Ok(AppendOutcome::Appended)
    }

    fn verify(&self, page_id: PageId, block: &[u8]) -> Result<()> {
        let stored_id = read_u64(block, 0);
        if stored_id != page_id.0 {
            return Err(PoolError::Corrupted {
                page_id,
                reason: format!("block names page {stored_id}"),
            });
        }
        let expected = read_u32(block, 16);
        let mut copy = block.to_vec();
        copy[16..20].fill(0);
        let actual = checksum(&copy);
        if expected != actual {
            return Err(PoolError::Corrupted {
                page_id,
                reason: format!("checksum {actual:#x}, expected {expected:#x}"),
            });
        }
        Ok(())
    }

    fn seal(&self, page_id: PageId, block: &mut [u8], lsn: Lsn) -> Result<()> {
        block[0..8].copy_from_slice(&page_id.0.to_le_bytes());
        block[8..16].copy_from_slice(&lsn.0.to_le_bytes());
        block[16..20].fill(0);
        let sum = checksum(block);
        block[16..20].copy_from_slice(&sum.to_le_bytes());
        Ok(())
    }

    fn page_header_reserved_bytes(&self) -> usize {
        HEADER_BYTES
    }

    fn counters(&self) -> CodecCounters {
        CodecCounters {
            compress_ops: self.compress_ops.load(Ordering::Relaxed),
            compress_ops_ok: self.compress_ops_ok.load(Ordering::Relaxed),
            uncompress_ops: self.uncompress_ops.load(Ordering::Relaxed),
            ..CodecCounters::default()
        }
    }
}

/// An in-memory file that grows on write; reads past the end fail.
#[derive(Default)]
pub struct MemoryFile {
    bytes: Mutex<Vec<u8>>,
    /// Number of reads, for tests that count I/O (the device's: not those
    /// `read_if_cached` serves).
    pub reads: AtomicU64,
    /// Number of writes.
    pub writes: AtomicU64,
    /// A model of the OS page cache without a size limit, when on
    /// ([`MemoryFile::with_os_cache`]): the offsets of the units read or
    /// written and not dropped since.
    os_cache: Option<Mutex<BTreeSet<u64>>>,
    /// Reads `read_if_cached` served.
    pub cached_reads: AtomicU64,
}

impl MemoryFile {
    /// A file with a modelled OS page cache, empty (as after
    /// `POSIX_FADV_DONTNEED` of the whole file).
    pub fn with_os_cache() -> Self {
        Self {
            os_cache: Some(Mutex::default()),
            ..Self::default()
        }
    }

    /// The offsets the modelled page cache holds, ascending.
    pub fn os_cached(&self) -> Vec<u64> {
        self.os_cache
            .as_ref()
            .map_or_else(Vec::new, |cache| cache.lock().iter().copied().collect())
    }

    /// Empties the modelled page cache.
    pub fn drop_os_cache(&self) {
        if let Some(cache) = &self.os_cache {
            cache.lock().clear();
        }
    }

    fn cache_unit(&self, offset: u64) {
        if let Some(cache) = &self.os_cache {
            cache.lock().insert(offset);
        }
    }
}

impl PageFile for MemoryFile {
    fn read_if_cached(&self, offset: u64, buf: &mut [u8]) -> Result<bool> {
        let cached = self
            .os_cache
            .as_ref()
            .is_some_and(|cache| cache.lock().contains(&offset));
        if !cached {
            return Ok(false);
        }
        self.cached_reads.fetch_add(1, Ordering::Relaxed);
        let bytes = self.bytes.lock();
        let start = offset as usize;
        buf.copy_from_slice(&bytes[start..start + buf.len()]);
        Ok(true)
    }

    fn uncache(&self, offset: u64, len_bytes: u64) {
        if let Some(cache) = &self.os_cache {
            cache
                .lock()
                .retain(|unit| !(offset..offset + len_bytes).contains(unit));
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.cache_unit(offset);
        let bytes = self.bytes.lock();
        let start = offset as usize;
        let Some(source) = bytes.get(start..start + buf.len()) else {
            return Err(PoolError::Io {
                page_id: PageId(u64::MAX),
                operation: "read",
                message: format!(
                    "read of {} bytes at {offset} past the end ({})",
                    buf.len(),
                    bytes.len()
                ),
            });
        };
        buf.copy_from_slice(source);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.cache_unit(offset);
        let mut bytes = self.bytes.lock();
        let start = offset as usize;
        if bytes.len() < start + buf.len() {
            bytes.resize(start + buf.len(), 0);
        }
        bytes[start..start + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing (`pool_eviction`): an uncompressed pool's image was
    /// the compressed format, whose log marker landed in the page's bytes.
    #[test]
    fn a_stored_image_is_the_page() {
        let codec = SimpleCodec::stored();
        let mut page = vec![0u8; 4096];
        page[HEADER_BYTES] = 7;
        let mut image = vec![0u8; 4096];
        assert_eq!(
            codec.compress(PageId(1), &page, &mut image).unwrap(),
            CompressOutcome::Fits
        );
        assert_eq!(image[HEADER_BYTES..], page[HEADER_BYTES..]);
    }

    /// Found by fuzzing: a compressed pool whose block is as large as its
    /// page must still get a modification log.
    #[test]
    fn a_page_sized_block_has_a_log() {
        let codec = SimpleCodec::default();
        let page = vec![0u8; 4096];
        let mut block = vec![0u8; 4096];
        assert_eq!(
            codec.compress(PageId(1), &page, &mut block).unwrap(),
            CompressOutcome::Fits
        );
        assert_eq!(
            codec.append_patch(&mut block, 100, b"x").unwrap(),
            AppendOutcome::Appended
        );
        let mut back = vec![0u8; 4096];
        codec.decompress(PageId(1), &block, &mut back).unwrap();
        assert_eq!(back[100], b'x');
    }
}
