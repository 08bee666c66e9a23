//! The crate's one error type.

use barracuda_base::{BaseError, PageId};

/// Everything that can go wrong in the codec layer.
///
/// Errors about a block name the page: the caller's expected page id when the
/// caller supplied one (`verify`), otherwise the page id recorded in the block
/// (or [`UNKNOWN_PAGE_ID`](crate::UNKNOWN_PAGE_ID) when the block is too short to
/// hold one). Configuration errors ([`CodecError::InvalidLevel`],
/// [`CodecError::InvalidGeometry`], [`CodecError::InvalidConfig`]) are not about
/// any page and carry the offending values instead.
#[non_exhaustive]
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// The block's CRC32C does not match its contents: bytes rotted on disk or
    /// in transit, or a write was torn.
    #[error("{page_id}: checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    ChecksumMismatch {
        /// The page the block was read for.
        page_id: PageId,
        /// The CRC32C recorded in the header.
        stored: u32,
        /// The CRC32C computed over the block's bytes.
        computed: u32,
    },
    /// The block does not start with the block magic: it is not a Barracuda
    /// block at all (never written, zeroed, or a misdirected read).
    #[error("{page_id}: bad block magic {found:#010x} (expected {expected:#010x})")]
    BadMagic {
        /// The page the block was read for.
        page_id: PageId,
        /// The four bytes found where the magic belongs (little-endian).
        found: u32,
        /// The magic every block starts with.
        expected: u32,
    },
    /// The block was written by a format version this build cannot read.
    #[error("{page_id}: unsupported block format version {found} (this build reads {supported})")]
    UnsupportedVersion {
        /// The page the block belongs to.
        page_id: PageId,
        /// The version byte found in the header.
        found: u8,
        /// The version this build reads and writes.
        supported: u8,
    },
    /// The header names a codec id this build does not know.
    #[error("{page_id}: unknown codec id {codec_id}")]
    UnknownCodec {
        /// The page the block belongs to.
        page_id: PageId,
        /// The codec id byte found in the header.
        codec_id: u8,
    },
    /// A size or length in the header (or a buffer handed in by the caller) is
    /// impossible: out of the supported range or pointing past the block.
    #[error("{page_id}: impossible {what}: {value} (limit {limit})")]
    ImpossibleLength {
        /// The page the block belongs to.
        page_id: PageId,
        /// Which length is wrong, e.g. "compressed length".
        what: &'static str,
        /// The value found.
        value: u64,
        /// The largest (or the only) value allowed.
        limit: u64,
    },
    /// The block is intact but belongs to another page: a misdirected write or
    /// read.
    #[error("expected {expected}, the block belongs to {found}")]
    PageIdMismatch {
        /// The page the caller asked for.
        expected: PageId,
        /// The page id recorded in the block.
        found: PageId,
    },
    /// A patch (being appended, or found in a block's modification log) writes
    /// outside the page body.
    #[error(
        "{page_id}: patch at offset {offset} of {len} bytes is outside the page body \
         [{body_start}, {page_size_bytes})"
    )]
    PatchOutOfBounds {
        /// The page the block belongs to.
        page_id: PageId,
        /// The patch's first byte offset within the page.
        offset: u64,
        /// The patch's length in bytes.
        len: u64,
        /// The first byte of the page the codec lets upper layers change
        /// ([`PAGE_HEADER_RESERVED_BYTES`](crate::PAGE_HEADER_RESERVED_BYTES)).
        body_start: u64,
        /// The page size.
        page_size_bytes: u64,
    },
    /// The compressed image is not a valid stream for its codec, or does not
    /// decompress to exactly one page body.
    #[error("{page_id}: corrupted {codec} image: {reason}")]
    Corrupted {
        /// The page the block belongs to.
        page_id: PageId,
        /// The codec named in the header.
        codec: &'static str,
        /// What the decompressor reported.
        reason: String,
    },
    /// The block was compressed with a zstd dictionary other than the one this
    /// codec object holds.
    #[error(
        "{page_id}: block needs zstd dictionary {block_dictionary_id:#010x}, codec has {configured_dictionary_id:#010x}"
    )]
    DictionaryMismatch {
        /// The page the block belongs to.
        page_id: PageId,
        /// The dictionary fingerprint recorded in the block.
        block_dictionary_id: u32,
        /// The fingerprint of the configured dictionary (0 = none).
        configured_dictionary_id: u32,
    },
    /// The compressor failed on valid input (should not happen: the output
    /// buffer is sized by the codec's bound). Reported instead of a panic.
    #[error("{page_id}: {codec} compression failed: {reason}")]
    CompressFailed {
        /// The page being compressed.
        page_id: PageId,
        /// The codec in use.
        codec: &'static str,
        /// What the library reported.
        reason: String,
    },
    /// A compression level outside the codec's range.
    #[error("{codec} level {level} is outside {min}..={max}")]
    InvalidLevel {
        /// The codec's name.
        codec: &'static str,
        /// The level asked for.
        level: i32,
        /// The lowest level allowed.
        min: i32,
        /// The highest level allowed.
        max: i32,
    },
    /// A page size or block size the format does not support: the base
    /// crate's check ([`Geometry::new`](barracuda_base::Geometry::new)),
    /// passed on with its message.
    #[error(transparent)]
    InvalidGeometry(#[from] BaseError),
    /// A codec and geometry that cannot be used together, or a dictionary the
    /// compression library refused.
    #[error("invalid codec configuration ({codec}): {reason}")]
    InvalidConfig {
        /// The codec's name.
        codec: &'static str,
        /// Which rule it breaks.
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T, E = CodecError> = std::result::Result<T, E>;
