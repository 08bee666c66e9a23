//! [`BlockCodec`]: the per-thread object that turns pages into blocks and back.

use std::sync::Arc;
use std::time::Instant;

use barracuda_base::{BLOCK_HEADER_BYTES, Geometry, Lsn, PageId};

use crate::codec::{Codec, CodecId};
use crate::engine::{Engines, compress_bound};
use crate::error::{CodecError, Result};
use crate::format::{self, BlockHeader, BlockInfo, NewBlock};
use crate::guess::FitGuess;
use crate::sparse;
use crate::stats::CompressionStats;

/// The smallest modification-log area a fitting block keeps free, whatever
/// its size: room for a few small patches (a slot, a header field, a short
/// record) before the page must be recompressed.
pub const LOG_RESERVE_BYTES_MIN: usize = 64;
/// A fitting block keeps at least `1 / LOG_RESERVE_FRACTION` of itself free for
/// the modification log: 1 KiB of a 16 KiB block, 256 bytes of a 4 KiB one.
/// This is the price of not recompressing on every change; it is also why the
/// B+tree must leave a page less full than it could (InnoDB's "padding").
pub const LOG_RESERVE_FRACTION: usize = 16;

/// The free log area a compressed block of `block_size_bytes` must keep for the
/// page to "fit" (the policy of [`BlockCodec::compress`]).
#[must_use]
pub fn log_reserve_bytes(block_size_bytes: usize) -> usize {
    (block_size_bytes / LOG_RESERVE_FRACTION).max(LOG_RESERVE_BYTES_MIN)
}

/// Whether `block` was compressed *packed* (by
/// [`BlockCodec::compress_reserving`] with less than the policy's reserve):
/// its image leaves less than [`log_reserve_bytes`] after it, which the
/// policy's [`BlockCodec::compress`] never does. A caller recompressing the
/// block's page can keep it packed while the page fits (the pool does).
/// False for an uncompressed block (it has no modification log) and for a
/// block whose header does not parse.
#[must_use]
pub fn is_packed(block: &[u8]) -> bool {
    format::read_header(block).is_ok_and(|header| {
        !header.geometry.is_uncompressed()
            && BLOCK_HEADER_BYTES + header.compressed_len_bytes + log_reserve_bytes(block.len())
                > block.len()
    })
}

/// What [`BlockCodec::compress`] produced.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompressOutcome {
    /// The block holds the page, sealed (checksum valid), with at least
    /// [`log_reserve_bytes`] (or the reserve asked of
    /// [`BlockCodec::compress_reserving`]) free for the modification log.
    Fits {
        /// The length of the compressed image.
        compressed_len: usize,
    },
    /// The page does not fit; the block is unchanged. A normal outcome: the
    /// B+tree splits the page (a "compression failure").
    DoesNotFit {
        /// The block size the page would have needed, log reserve included
        /// (stored sparse, when a guess skipped the compressor:
        /// [`BlockCodec::compress_guessing`]).
        needed_bytes: usize,
    },
}

/// A reusable compressor and decompressor for one codec policy and geometry.
///
/// Owns the compression library contexts and a scratch buffer, so that
/// compressing and decompressing allocate nothing. Create one per thread
/// (it is `Send`, not meant to be shared); share the counters through
/// [`BlockCodec::with_stats`].
///
/// Decompression reads any block whatever its codec (the header names it); a
/// zstd block compressed with a dictionary needs this object to hold the same
/// dictionary.
pub struct BlockCodec {
    codec: Codec,
    geometry: Geometry,
    dictionary_id: u32,
    engines: Engines,
    /// Compressed output lands here first, so that a page that does not fit
    /// leaves the caller's block untouched.
    scratch: Box<[u8]>,
    stats: Arc<CompressionStats>,
}

impl std::fmt::Debug for BlockCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCodec")
            .field("codec", &self.codec)
            .field("geometry", &self.geometry)
            .finish_non_exhaustive()
    }
}

impl BlockCodec {
    /// A codec with its own fresh counters.
    pub fn new(codec: Codec, geometry: Geometry) -> Result<BlockCodec> {
        BlockCodec::with_stats(codec, geometry, Arc::new(CompressionStats::new()))
    }

    /// A codec that counts into shared `stats`.
    ///
    /// `Codec::None` requires the uncompressed geometry and the other codecs a
    /// compressed block size (`InvalidConfig` otherwise); levels are validated.
    pub fn with_stats(
        codec: Codec,
        geometry: Geometry,
        stats: Arc<CompressionStats>,
    ) -> Result<BlockCodec> {
        codec.validate()?;
        let stored = codec.id() == CodecId::None;
        if stored != geometry.is_uncompressed() {
            return Err(CodecError::InvalidConfig {
                codec: codec.id().name(),
                reason: format!(
                    "codec none goes with the uncompressed block size and only with it (got {:?})",
                    geometry.block_size()
                ),
            });
        }
        Ok(BlockCodec {
            dictionary_id: codec.dictionary_id(),
            engines: Engines::new(&codec)?,
            scratch: vec![0; compress_bound(geometry.page_body_bytes())].into_boxed_slice(),
            codec,
            geometry,
            stats,
        })
    }

    /// The compression policy.
    #[must_use]
    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    /// The page and block sizes.
    #[must_use]
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The counters this codec updates.
    #[must_use]
    pub fn stats(&self) -> &Arc<CompressionStats> {
        &self.stats
    }

    /// Compresses `page` (one page; its first
    /// [`PAGE_HEADER_RESERVED_BYTES`](crate::PAGE_HEADER_RESERVED_BYTES) are
    /// ignored) into `block` (one block), stamped with `page_id` and `lsn` and
    /// sealed, keeping [`log_reserve_bytes`] free for the modification log.
    /// On `DoesNotFit` the block is unchanged.
    ///
    /// A page whose body without its longest run of zero bytes (its free
    /// space) fits the block is stored so, uncompressed
    /// ([`CodecId::Sparse`]), whatever the codec: only a page fuller than
    /// its block is compressed.
    ///
    /// # Panics
    /// If `page` is not one page or `block` not one block of this geometry.
    pub fn compress(
        &mut self,
        page: &[u8],
        page_id: PageId,
        lsn: Lsn,
        block: &mut [u8],
    ) -> Result<CompressOutcome> {
        let reserve_bytes = if self.geometry.is_uncompressed() {
            0
        } else {
            log_reserve_bytes(block.len())
        };
        self.compress_reserving(page, page_id, lsn, block, reserve_bytes)
    }

    /// [`compress`](Self::compress), keeping `reserve_bytes` free for the
    /// modification log instead of the policy's reserve. A *packed* block
    /// (`reserve_bytes` 0) is for a page that is written once and then
    /// mostly read, as a compaction writes them: it holds as much of the page
    /// as the block can. Whether a later change recompresses it packed is the
    /// caller's policy (the pool keeps a packed block packed while the page
    /// fits it).
    ///
    /// # Panics
    /// As [`compress`](Self::compress).
    pub fn compress_reserving(
        &mut self,
        page: &[u8],
        page_id: PageId,
        lsn: Lsn,
        block: &mut [u8],
        reserve_bytes: usize,
    ) -> Result<CompressOutcome> {
        self.compress_guessing(page, page_id, lsn, block, reserve_bytes, None)
    }

    /// [`compress_reserving`](Self::compress_reserving), except that a page
    /// fuller than its block is not compressed when `guess` says that
    /// compressing it is hopeless ([`FitGuess::hopeless`]): it is then
    /// `DoesNotFit`, with `needed_bytes` of its sparse image. Only for
    /// callers to whom `DoesNotFit` is a normal outcome (a split), never for
    /// one that must reproduce an earlier compression (recovery). Every
    /// compression it runs teaches `guess`.
    ///
    /// # Panics
    /// As [`compress`](Self::compress).
    pub fn compress_guessing(
        &mut self,
        page: &[u8],
        page_id: PageId,
        lsn: Lsn,
        block: &mut [u8],
        reserve_bytes: usize,
        guess: Option<&FitGuess>,
    ) -> Result<CompressOutcome> {
        assert_eq!(
            page.len(),
            self.geometry.page_size_bytes(),
            "page buffer must be one page"
        );
        assert_eq!(
            block.len(),
            self.geometry.block_size_bytes(),
            "block buffer must be one block"
        );
        let started = Instant::now();
        let codec_id = self.codec.id();
        let body = &page[BLOCK_HEADER_BYTES..];
        let room = block
            .len()
            .saturating_sub(BLOCK_HEADER_BYTES + reserve_bytes);
        let mut sparse_len = None;
        if codec_id != CodecId::None {
            let (len, hole) = sparse::sparse_len(body);
            sparse_len = Some(len);
            if len <= room {
                // The page fits its block without compression: a copy costs a
                // fraction of a compressor's pass, and reading it back is a copy
                // too. Data that does not compress reaches here until its page
                // is fuller than its block; then the compressor decides.
                sparse::store(body, hole, &mut self.scratch);
                let new = NewBlock {
                    page_id,
                    lsn,
                    codec_id: CodecId::Sparse,
                    geometry: self.geometry,
                    dictionary_id: 0,
                };
                format::write_block(block, &new, &self.scratch[..len]);
                self.stats
                    .record_sparse(self.geometry.block_size(), started.elapsed());
                return Ok(CompressOutcome::Fits {
                    compressed_len: len,
                });
            }
            if guess.is_some_and(|guess| guess.hopeless(body[0], len, room)) {
                self.stats.record_guessed(self.geometry.block_size());
                return Ok(CompressOutcome::DoesNotFit {
                    needed_bytes: BLOCK_HEADER_BYTES + len + reserve_bytes,
                });
            }
        }
        let compressed_len = self
            .engines
            .compress(codec_id, page_id, body, &mut self.scratch)?;
        if let (Some(guess), Some(sparse_len)) = (guess, sparse_len) {
            guess.learn(body[0], sparse_len, compressed_len);
        }
        let needed_bytes = BLOCK_HEADER_BYTES + compressed_len + reserve_bytes;
        let outcome = if needed_bytes <= block.len() {
            let new = NewBlock {
                page_id,
                lsn,
                codec_id,
                geometry: self.geometry,
                dictionary_id: self.dictionary_id,
            };
            format::write_block(block, &new, &self.scratch[..compressed_len]);
            CompressOutcome::Fits { compressed_len }
        } else {
            CompressOutcome::DoesNotFit { needed_bytes }
        };
        let ok = matches!(outcome, CompressOutcome::Fits { .. });
        self.stats
            .record_compress(self.geometry.block_size(), ok, started.elapsed());
        Ok(outcome)
    }

    /// Decompresses `block` into `frame` (one page of the block's page size)
    /// and applies its modification log. Does not check the checksum (see
    /// [`verify`](crate::verify)); checks every length, so a corrupted block is
    /// an error, never a panic or an out-of-bounds access. Allocates nothing
    /// (except to format an error message).
    ///
    /// Afterwards `frame[..PAGE_HEADER_RESERVED_BYTES]` holds a copy of the
    /// block header. On error the frame's contents are unspecified.
    pub fn decompress(&mut self, block: &[u8], frame: &mut [u8]) -> Result<BlockInfo> {
        let started = Instant::now();
        let header = format::read_header(block)?;
        let page_size_bytes = header.geometry.page_size_bytes();
        if frame.len() != page_size_bytes {
            return Err(CodecError::ImpossibleLength {
                page_id: header.page_id,
                what: "frame length for the block's page size",
                value: frame.len() as u64,
                limit: page_size_bytes as u64,
            });
        }
        if header.is_uncompressed() {
            frame.copy_from_slice(block);
        } else {
            self.decompress_image(&header, block, frame)?;
        }
        self.stats
            .record_uncompress(header.geometry.block_size(), started.elapsed());
        Ok(header)
    }

    fn decompress_image(
        &mut self,
        header: &BlockHeader,
        block: &[u8],
        frame: &mut [u8],
    ) -> Result<()> {
        if header.dictionary_id != 0 && header.dictionary_id != self.dictionary_id {
            return Err(CodecError::DictionaryMismatch {
                page_id: header.page_id,
                block_dictionary_id: header.dictionary_id,
                configured_dictionary_id: self.dictionary_id,
            });
        }
        let image_end = BLOCK_HEADER_BYTES + header.compressed_len_bytes;
        let log_end = image_end + header.log_len_bytes;
        let (frame_header, body) = frame.split_at_mut(BLOCK_HEADER_BYTES);
        frame_header.copy_from_slice(&block[..BLOCK_HEADER_BYTES]);
        self.engines.decompress(
            header.codec_id,
            header.page_id,
            &block[BLOCK_HEADER_BYTES..image_end],
            body,
        )?;
        format::apply_log(header, &block[image_end..log_end], frame)
    }

    /// Recompresses a block whose log is full: decompresses it (log applied)
    /// into `scratch_frame` (one page), then compresses that image back into
    /// `block` with this codec, keeping the page id and LSN. On `DoesNotFit`
    /// the block is unchanged and `scratch_frame` holds the current page.
    ///
    /// A caller that holds the page's up-to-date frame should call
    /// [`BlockCodec::compress`] on it instead, which saves the decompression.
    pub fn recompress(
        &mut self,
        block: &mut [u8],
        scratch_frame: &mut [u8],
    ) -> Result<CompressOutcome> {
        let header = self.decompress(block, scratch_frame)?;
        if header.geometry != self.geometry {
            return Err(CodecError::InvalidConfig {
                codec: self.codec.id().name(),
                reason: format!(
                    "cannot recompress a {:?} block with a codec for {:?}",
                    header.geometry, self.geometry
                ),
            });
        }
        self.compress(scratch_frame, header.page_id, header.lsn, block)
    }
}

// The pool gives each thread its own codec, so it must move between threads.
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<BlockCodec>();
};
