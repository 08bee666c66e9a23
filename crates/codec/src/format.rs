//! The block format: header layout, structural checks, checksum, and the
//! modification log. Every function here is stateless on the block's bytes.
//!
//! The byte diagram is in `docs/design.md`, section "Compressed block format".

use barracuda_base::{
    BLOCK_HEADER_BYTES, BLOCK_SIZE_BYTES_MIN, BlockSize, COMPRESSED_BLOCK_SIZE_BYTES_MAX, Geometry,
    Lsn, PAGE_SIZE_BYTES_MAX, PAGE_SIZE_BYTES_MIN, PageId,
};
use serde::Serialize;

use crate::codec::CodecId;
use crate::error::{CodecError, Result};

/// The first four bytes of every block: `"BRCB"` read as a little-endian u32.
pub const BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"BRCB");
/// The format version this build reads and writes.
pub const FORMAT_VERSION: u8 = 1;
/// The bytes at the start of every page that belong to the codec: upper
/// layers (the B+tree) must not store anything there, and patches may not
/// touch them. They equal the block header because in the uncompressed
/// geometry the block *is* the page and its header lives in these bytes; after
/// decompression of any block, they hold a copy of the block's header.
pub const PAGE_HEADER_RESERVED_BYTES: usize = BLOCK_HEADER_BYTES;
/// The bytes a modification-log entry adds before its data: offset u16, length u16.
pub const LOG_ENTRY_HEADER_BYTES: usize = 4;
/// The page id errors name when a block is too short to record one.
pub const UNKNOWN_PAGE_ID: PageId = PageId(u64::MAX);

// Field offsets inside the header (see the byte diagram in docs/design.md).
const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 4;
const CODEC_AT: usize = 5;
const PAGE_SIZE_LOG2_AT: usize = 6;
const BLOCK_SIZE_LOG2_AT: usize = 7;
const PAGE_ID_AT: usize = 8;
const LSN_AT: usize = 16;
const COMPRESSED_LEN_AT: usize = 24;
const LOG_LEN_AT: usize = 28;
const DICTIONARY_ID_AT: usize = 32;
const CHECKSUM_AT: usize = 36;
const _: () = assert!(CHECKSUM_AT + 4 == BLOCK_HEADER_BYTES);
// Header fields are naturally aligned, so the header is cheap to parse.
const _: () = assert!(PAGE_ID_AT.is_multiple_of(8) && LSN_AT.is_multiple_of(8));

/// A block header after its structural checks: every length in it fits the
/// block it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BlockHeader {
    /// The page the block holds.
    pub page_id: PageId,
    /// The LSN stamped by the last `compress` or `seal`.
    pub lsn: Lsn,
    /// The codec of the image.
    pub codec_id: CodecId,
    /// The page size and block size.
    pub geometry: Geometry,
    /// The length of the compressed image after the header.
    pub compressed_len_bytes: usize,
    /// The used length of the modification log after the image.
    pub log_len_bytes: usize,
    /// The zstd dictionary fingerprint (0 = none).
    pub dictionary_id: u32,
    /// The CRC32C stored in the header (stale after `append_patch` until
    /// `seal`).
    pub checksum: u32,
}

/// `decompress` returns the header of the block it decoded.
pub type BlockInfo = BlockHeader;

impl BlockHeader {
    /// The block's free bytes after the modification log (the zero padding).
    #[must_use]
    pub fn free_bytes(&self) -> usize {
        self.geometry.block_size_bytes()
            - BLOCK_HEADER_BYTES
            - self.compressed_len_bytes
            - self.log_len_bytes
    }

    /// Whether the block is a page stored as it is.
    #[must_use]
    pub fn is_uncompressed(&self) -> bool {
        self.geometry.is_uncompressed()
    }
}

/// What `append_patch` did.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchOutcome {
    /// The patch is in the block (in its log, or written in place for an
    /// uncompressed block). The checksum is stale until `seal`.
    Appended,
    /// The log has no room for the patch; the block is unchanged. Recompress
    /// the page (which empties the log) and append again.
    LogFull,
}

/// Parses and checks a header without the checksum: for blocks already in
/// memory, whose checksum may be stale.
pub fn read_header(block: &[u8]) -> Result<BlockHeader> {
    check_magic(block, None)?;
    parse_checked(block, None)
}

/// The LSN field of a block's header, or of the copy of it that a page's
/// reserved bytes hold after decompression (the LSN the block carried when
/// it was read), unchecked. A page created in memory reads 0.
///
/// # Panics
/// If `bytes` is shorter than a block header.
pub fn header_lsn(bytes: &[u8]) -> Lsn {
    Lsn(read_u64(bytes, LSN_AT))
}

/// Checks a block just read from disk: magic, checksum, version, codec,
/// lengths, the bounds of every modification-log entry, and that it belongs
/// to `expected_page_id`. Errors name `expected_page_id`.
pub fn verify(block: &[u8], expected_page_id: PageId) -> Result<BlockHeader> {
    check_magic(block, Some(expected_page_id))?;
    let stored = read_u32(block, CHECKSUM_AT);
    let computed = block_checksum(block);
    if stored != computed {
        return Err(CodecError::ChecksumMismatch {
            page_id: expected_page_id,
            stored,
            computed,
        });
    }
    let mut header = parse_checked(block, Some(expected_page_id))?;
    // Log errors name the caller's page too.
    header.page_id = expected_page_id;
    let image_end = BLOCK_HEADER_BYTES + header.compressed_len_bytes;
    for entry in LogEntries::new(&header, &block[image_end..image_end + header.log_len_bytes]) {
        entry?;
    }
    header.page_id = PageId(read_u64(block, PAGE_ID_AT));
    if header.page_id != expected_page_id {
        return Err(CodecError::PageIdMismatch {
            expected: expected_page_id,
            found: header.page_id,
        });
    }
    Ok(header)
}

/// Stamps `lsn` and a fresh checksum, just before the block is written.
pub fn seal(block: &mut [u8], lsn: Lsn) -> Result<BlockHeader> {
    let mut header = read_header(block)?;
    write_u64(block, LSN_AT, lsn.0);
    let checksum = block_checksum(block);
    write_u32(block, CHECKSUM_AT, checksum);
    header.lsn = lsn;
    header.checksum = checksum;
    Ok(header)
}

/// Appends the patch "write `bytes` at `offset` of the page" to the block's
/// modification log (an uncompressed block is patched in place).
///
/// Returns `LogFull`, leaving the block unchanged, when the log has no room;
/// an error when the block is malformed or the patch falls outside the page
/// body `[PAGE_HEADER_RESERVED_BYTES, page_size)`. An empty patch is a no-op.
pub fn append_patch(block: &mut [u8], offset: usize, bytes: &[u8]) -> Result<PatchOutcome> {
    let header = read_header(block)?;
    check_patch_bounds(&header, offset, bytes.len())?;
    if bytes.is_empty() {
        return Ok(PatchOutcome::Appended);
    }
    if header.is_uncompressed() {
        block[offset..offset + bytes.len()].copy_from_slice(bytes);
        return Ok(PatchOutcome::Appended);
    }
    let entry_bytes = LOG_ENTRY_HEADER_BYTES + bytes.len();
    if entry_bytes > header.free_bytes() {
        return Ok(PatchOutcome::LogFull);
    }
    let log_end = BLOCK_HEADER_BYTES + header.compressed_len_bytes + header.log_len_bytes;
    // Bounds checked above: offsets < 64 KiB (u16 by the geometry's limit) and
    // a patch no longer than the page body.
    let offset_u16 =
        u16::try_from(offset).map_err(|_| patch_error(&header, offset, bytes.len()))?;
    let len_u16 =
        u16::try_from(bytes.len()).map_err(|_| patch_error(&header, offset, bytes.len()))?;
    block[log_end..log_end + 2].copy_from_slice(&offset_u16.to_le_bytes());
    block[log_end + 2..log_end + 4].copy_from_slice(&len_u16.to_le_bytes());
    block[log_end + LOG_ENTRY_HEADER_BYTES..log_end + entry_bytes].copy_from_slice(bytes);
    let log_len = header.log_len_bytes + entry_bytes;
    write_u32(
        block,
        LOG_LEN_AT,
        u32::try_from(log_len).unwrap_or(u32::MAX),
    );
    Ok(PatchOutcome::Appended)
}

/// Applies every entry of a modification log to a decompressed page.
pub(crate) fn apply_log(header: &BlockHeader, log: &[u8], frame: &mut [u8]) -> Result<()> {
    for entry in LogEntries::new(header, log) {
        let (offset, data) = entry?;
        frame[offset..offset + data.len()].copy_from_slice(data);
    }
    Ok(())
}

/// The patches of a block's modification log, oldest first.
pub fn log_entries(block: &[u8]) -> Result<LogEntries<'_>> {
    let header = read_header(block)?;
    let image_end = BLOCK_HEADER_BYTES + header.compressed_len_bytes;
    Ok(LogEntries::new(
        &header,
        &block[image_end..image_end + header.log_len_bytes],
    ))
}

/// Checks everything about a block that does not need decompression: the
/// header's structure and every log entry's bounds (not the checksum, which
/// may be stale in memory). Used by tests, fuzzing and `barracuda check`.
pub fn check_invariants(block: &[u8]) -> Result<BlockHeader> {
    let header = read_header(block)?;
    for entry in log_entries(block)? {
        entry?;
    }
    Ok(header)
}

/// An iterator over a modification log: `(page offset, bytes)` per patch, or
/// an error (and then nothing more) for a malformed entry.
#[derive(Clone, Debug)]
pub struct LogEntries<'a> {
    header: BlockHeader,
    log: &'a [u8],
    at: usize,
}

impl<'a> LogEntries<'a> {
    fn new(header: &BlockHeader, log: &'a [u8]) -> LogEntries<'a> {
        LogEntries {
            header: *header,
            log,
            at: 0,
        }
    }

    fn entry(&self) -> Result<(usize, &'a [u8], usize)> {
        let (log, at) = (self.log, self.at);
        let page_id = self.header.page_id;
        let Some(entry_header) = log.get(at..at + LOG_ENTRY_HEADER_BYTES) else {
            return Err(impossible(
                page_id,
                "modification log entry header",
                at as u64,
                log.len() as u64,
            ));
        };
        let offset = usize::from(u16::from_le_bytes([entry_header[0], entry_header[1]]));
        let len = usize::from(u16::from_le_bytes([entry_header[2], entry_header[3]]));
        check_patch_bounds(&self.header, offset, len)?;
        let data_at = at + LOG_ENTRY_HEADER_BYTES;
        let Some(data) = log.get(data_at..data_at + len) else {
            return Err(impossible(
                page_id,
                "modification log entry length",
                len as u64,
                (log.len() - data_at) as u64,
            ));
        };
        Ok((offset, data, data_at + len))
    }
}

impl<'a> Iterator for LogEntries<'a> {
    type Item = Result<(usize, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.log.len() {
            return None;
        }
        match self.entry() {
            Ok((offset, data, next_at)) => {
                self.at = next_at;
                Some(Ok((offset, data)))
            }
            Err(e) => {
                // Stop after the first malformed entry.
                self.at = self.log.len();
                Some(Err(e))
            }
        }
    }
}

/// The fields `write_block` stamps into a header.
pub(crate) struct NewBlock {
    pub page_id: PageId,
    pub lsn: Lsn,
    pub codec_id: CodecId,
    pub geometry: Geometry,
    pub dictionary_id: u32,
}

/// Writes a header, `image`, an empty log and zero padding into `block`, and
/// seals it. The caller has checked that the image fits.
pub(crate) fn write_block(block: &mut [u8], new: &NewBlock, image: &[u8]) {
    let block_size_bytes = new.geometry.block_size_bytes();
    assert_eq!(
        block.len(),
        block_size_bytes,
        "block buffer must be one block"
    );
    assert!(
        BLOCK_HEADER_BYTES + image.len() <= block_size_bytes,
        "image must fit"
    );
    write_u32(block, MAGIC_AT, BLOCK_MAGIC);
    block[VERSION_AT] = FORMAT_VERSION;
    block[CODEC_AT] = new.codec_id as u8;
    block[PAGE_SIZE_LOG2_AT] = log2(new.geometry.page_size_bytes());
    block[BLOCK_SIZE_LOG2_AT] = log2(block_size_bytes);
    write_u64(block, PAGE_ID_AT, new.page_id.0);
    write_u64(block, LSN_AT, new.lsn.0);
    write_u32(
        block,
        COMPRESSED_LEN_AT,
        u32::try_from(image.len()).unwrap_or(u32::MAX),
    );
    write_u32(block, LOG_LEN_AT, 0);
    write_u32(block, DICTIONARY_ID_AT, new.dictionary_id);
    let image_end = BLOCK_HEADER_BYTES + image.len();
    block[BLOCK_HEADER_BYTES..image_end].copy_from_slice(image);
    block[image_end..].fill(0);
    let checksum = block_checksum(block);
    write_u32(block, CHECKSUM_AT, checksum);
}

/// The CRC32C of a block: every byte except the checksum field itself.
#[must_use]
pub fn block_checksum(block: &[u8]) -> u32 {
    let head = crc32c::crc32c(&block[..CHECKSUM_AT]);
    crc32c::crc32c_append(head, &block[BLOCK_HEADER_BYTES..])
}

fn check_patch_bounds(header: &BlockHeader, offset: usize, len: usize) -> Result<()> {
    let in_bounds = offset >= PAGE_HEADER_RESERVED_BYTES
        && offset
            .checked_add(len)
            .is_some_and(|end| end <= header.geometry.page_size_bytes());
    if in_bounds {
        Ok(())
    } else {
        Err(patch_error(header, offset, len))
    }
}

fn patch_error(header: &BlockHeader, offset: usize, len: usize) -> CodecError {
    CodecError::PatchOutOfBounds {
        page_id: header.page_id,
        offset: offset as u64,
        len: len as u64,
        body_start: PAGE_HEADER_RESERVED_BYTES as u64,
        page_size_bytes: header.geometry.page_size_bytes() as u64,
    }
}

/// Length and magic: the checks that come before the checksum.
fn check_magic(block: &[u8], name: Option<PageId>) -> Result<()> {
    let page_id = name.unwrap_or_else(|| recorded_page_id(block));
    if block.len() < BLOCK_HEADER_BYTES {
        return Err(impossible(
            page_id,
            "block length",
            block.len() as u64,
            BLOCK_HEADER_BYTES as u64,
        ));
    }
    let found = read_u32(block, MAGIC_AT);
    if found != BLOCK_MAGIC {
        return Err(CodecError::BadMagic {
            page_id,
            found,
            expected: BLOCK_MAGIC,
        });
    }
    Ok(())
}

/// Every structural check after the magic; errors name `name`, or the block's
/// own page id.
fn parse_checked(block: &[u8], name: Option<PageId>) -> Result<BlockHeader> {
    let recorded = PageId(read_u64(block, PAGE_ID_AT));
    let page_id = name.unwrap_or(recorded);
    let version = block[VERSION_AT];
    if version != FORMAT_VERSION {
        return Err(CodecError::UnsupportedVersion {
            page_id,
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let codec_byte = block[CODEC_AT];
    let codec_id = CodecId::from_byte(codec_byte).ok_or(CodecError::UnknownCodec {
        page_id,
        codec_id: codec_byte,
    })?;
    let geometry = parse_geometry(block, page_id, codec_id)?;
    let compressed_len_bytes = read_u32(block, COMPRESSED_LEN_AT) as usize;
    let log_len_bytes = read_u32(block, LOG_LEN_AT) as usize;
    check_lengths(
        geometry,
        codec_id,
        page_id,
        compressed_len_bytes,
        log_len_bytes,
    )?;
    Ok(BlockHeader {
        page_id: recorded,
        lsn: Lsn(read_u64(block, LSN_AT)),
        codec_id,
        geometry,
        compressed_len_bytes,
        log_len_bytes,
        dictionary_id: read_u32(block, DICTIONARY_ID_AT),
        checksum: read_u32(block, CHECKSUM_AT),
    })
}

fn parse_geometry(block: &[u8], page_id: PageId, codec_id: CodecId) -> Result<Geometry> {
    let page_size_bytes = size_from_log2(block[PAGE_SIZE_LOG2_AT]);
    if !(PAGE_SIZE_BYTES_MIN..=PAGE_SIZE_BYTES_MAX).contains(&page_size_bytes) {
        return Err(impossible(
            page_id,
            "page size",
            page_size_bytes as u64,
            PAGE_SIZE_BYTES_MAX as u64,
        ));
    }
    let block_size_bytes = size_from_log2(block[BLOCK_SIZE_LOG2_AT]);
    // Stored pages ("none") use the uncompressed geometry: block = page.
    let block_size = if codec_id == CodecId::None {
        (block_size_bytes == page_size_bytes).then_some(BlockSize::Uncompressed)
    } else {
        BlockSize::from_compressed_bytes(block_size_bytes)
            .filter(|_| block_size_bytes <= page_size_bytes)
    };
    let limit = if codec_id == CodecId::None {
        page_size_bytes
    } else {
        COMPRESSED_BLOCK_SIZE_BYTES_MAX.min(page_size_bytes)
    };
    let block_size = block_size
        .ok_or_else(|| impossible(page_id, "block size", block_size_bytes as u64, limit as u64))?;
    if block.len() != block_size_bytes {
        return Err(impossible(
            page_id,
            "block length",
            block.len() as u64,
            block_size_bytes as u64,
        ));
    }
    debug_assert!(block_size_bytes >= BLOCK_SIZE_BYTES_MIN);
    Geometry::new(page_size_bytes, block_size)
        .map_err(|_| impossible(page_id, "block size", block_size_bytes as u64, limit as u64))
}

fn check_lengths(
    geometry: Geometry,
    codec_id: CodecId,
    page_id: PageId,
    compressed_len_bytes: usize,
    log_len_bytes: usize,
) -> Result<()> {
    let room = geometry.block_size_bytes() - BLOCK_HEADER_BYTES;
    if codec_id == CodecId::None {
        if compressed_len_bytes != room {
            return Err(impossible(
                page_id,
                "stored length",
                compressed_len_bytes as u64,
                room as u64,
            ));
        }
        if log_len_bytes != 0 {
            return Err(impossible(
                page_id,
                "modification log length of a stored page",
                log_len_bytes as u64,
                0,
            ));
        }
        return Ok(());
    }
    if compressed_len_bytes == 0 || compressed_len_bytes > room {
        return Err(impossible(
            page_id,
            "compressed length",
            compressed_len_bytes as u64,
            room as u64,
        ));
    }
    if log_len_bytes > room - compressed_len_bytes {
        return Err(impossible(
            page_id,
            "modification log length",
            log_len_bytes as u64,
            (room - compressed_len_bytes) as u64,
        ));
    }
    Ok(())
}

fn impossible(page_id: PageId, what: &'static str, value: u64, limit: u64) -> CodecError {
    CodecError::ImpossibleLength {
        page_id,
        what,
        value,
        limit,
    }
}

fn recorded_page_id(block: &[u8]) -> PageId {
    block
        .get(PAGE_ID_AT..PAGE_ID_AT + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(UNKNOWN_PAGE_ID, |b| PageId(u64::from_le_bytes(b)))
}

/// `1 << log2`, or 0 (an impossible size) when the exponent is out of range.
fn size_from_log2(log2: u8) -> usize {
    if log2 < 32 { 1usize << log2 } else { 0 }
}

fn log2(size: usize) -> u8 {
    debug_assert!(size.is_power_of_two());
    size.trailing_zeros() as u8
}

fn read_u32(block: &[u8], at: usize) -> u32 {
    let mut bytes = [0; 4];
    bytes.copy_from_slice(&block[at..at + 4]);
    u32::from_le_bytes(bytes)
}

fn read_u64(block: &[u8], at: usize) -> u64 {
    let mut bytes = [0; 8];
    bytes.copy_from_slice(&block[at..at + 8]);
    u64::from_le_bytes(bytes)
}

fn write_u32(block: &mut [u8], at: usize, value: u32) {
    block[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn write_u64(block: &mut [u8], at: usize, value: u64) {
    block[at..at + 8].copy_from_slice(&value.to_le_bytes());
}
