//! Barracuda's compressed block format: how a logical page (4 to 64 KiB) is
//! stored in a block of 1 to 16 KiB (or uncompressed, block = page).
//!
//! A block is a 40-byte header (magic, version, codec, sizes, page id, LSN,
//! lengths, CRC32C), the compressed page image, a modification log of byte
//! patches `(offset, bytes)` growing into the free space, and zero padding.
//! The byte diagram and the policies are in `docs/design.md`.
//!
//! What this crate is not: it does not decide when to compress, cache blocks
//! or write them; the buffer pool does. Nor does it define the identifiers and
//! sizes every layer shares ([`PageId`](barracuda_base::PageId),
//! [`Lsn`](barracuda_base::Lsn), [`Geometry`](barracuda_base::Geometry),
//! [`BlockSize`](barracuda_base::BlockSize), the header's size
//! [`BLOCK_HEADER_BYTES`](barracuda_base::BLOCK_HEADER_BYTES)): those belong
//! to the `barracuda-base` crate, and the codec takes them from there like
//! every other layer.
//!
//! Hard limits and invariants:
//! - Pages are 4..=64 KiB, powers of two; compressed blocks 1, 2, 4, 8, 16 KiB
//!   and never larger than the page ([`Geometry`](barracuda_base::Geometry)).
//! - The first [`PAGE_HEADER_RESERVED_BYTES`] of every page belong to the
//!   codec: they are not compressed, patches may not touch them, and after
//!   decompression they hold a copy of the block header.
//! - A block that [`BlockCodec::compress`] reports as fitting keeps at least
//!   [`log_reserve_bytes`] free for the modification log.
//! - Decoding never panics and never reads out of bounds on any input; bad
//!   blocks are a [`CodecError`] naming the page.
//! - [`verify`] (after a read from disk) checks the CRC32C; decoding a block in
//!   memory does not, because appended patches leave it stale until [`seal`].
//! - The hot path allocates nothing: [`BlockCodec`] owns its library contexts
//!   and scratch buffer and decompresses into the caller's frame.
//!
//! ```
//! use barracuda_base::{BlockSize, Geometry, Lsn, PageId};
//! use barracuda_codec::{BlockCodec, Codec, CompressOutcome};
//!
//! let geometry = Geometry::new(16 << 10, BlockSize::Kib8)?;
//! let mut codec = BlockCodec::new(Codec::zlib_default(), geometry)?;
//! let mut page = vec![0u8; geometry.page_size_bytes()];
//! barracuda_codec::sample::fill_compressible(&mut barracuda_codec::sample::rng(7), 0.5, &mut page);
//! let mut block = vec![0u8; geometry.block_size_bytes()];
//! let outcome = codec.compress(&page, PageId(3), Lsn(100), &mut block)?;
//! assert!(matches!(outcome, CompressOutcome::Fits { .. }));
//!
//! // A change to the page, recorded in the block's modification log.
//! let _ = barracuda_codec::append_patch(&mut block, 100, b"hello")?;
//! page[100..105].copy_from_slice(b"hello");
//! barracuda_codec::seal(&mut block, Lsn(101))?;
//! barracuda_codec::verify(&block, PageId(3))?;
//!
//! let mut frame = vec![0u8; geometry.page_size_bytes()];
//! codec.decompress(&block, &mut frame)?;
//! assert_eq!(frame[barracuda_codec::PAGE_HEADER_RESERVED_BYTES..], page[barracuda_codec::PAGE_HEADER_RESERVED_BYTES..]);
//! # Ok::<(), barracuda_codec::CodecError>(())
//! ```

mod block_codec;
mod codec;
mod engine;
mod error;
mod format;
mod guess;
#[cfg(feature = "testing")]
pub mod sample;
mod sparse;
mod stats;

pub use block_codec::{
    BlockCodec, CompressOutcome, LOG_RESERVE_BYTES_MIN, LOG_RESERVE_FRACTION, is_packed,
    log_reserve_bytes,
};
pub use codec::{
    Codec, CodecId, ZLIB_LEVEL_DEFAULT, ZLIB_LEVEL_MAX, ZLIB_LEVEL_MIN, ZSTD_LEVEL_DEFAULT,
    ZSTD_LEVEL_MAX, ZSTD_LEVEL_MIN, dictionary_fingerprint,
};
pub use error::{CodecError, Result};
pub use format::{
    BLOCK_MAGIC, BlockHeader, BlockInfo, FORMAT_VERSION, LOG_ENTRY_HEADER_BYTES, LogEntries,
    PAGE_HEADER_RESERVED_BYTES, PatchOutcome, UNKNOWN_PAGE_ID, append_patch, block_checksum,
    check_invariants, header_lsn, log_entries, read_header, seal, verify,
};
pub use guess::{FitGuess, GUESS_CLASSES, GUESS_TRY_EVERY};
pub use stats::{BlockSizeStats, CompressionStats, CompressionStatsSnapshot};
