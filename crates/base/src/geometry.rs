//! Page and block sizes: which combinations the format supports.

use serde::{Deserialize, Serialize};

use crate::error::{BaseError, Result};

/// The size of the block header. It belongs to the geometry because every
/// block, compressed or not, starts with it: it bounds how small a block may
/// be, and in the uncompressed geometry the header lives in the page's first
/// bytes, so it also decides how much of a page upper layers may use
/// ([`Geometry::page_body_bytes`]). The codec lays out its fields.
pub const BLOCK_HEADER_BYTES: usize = 40;
/// The smallest logical page: 4 KiB, the smallest O_DIRECT-friendly unit that
/// still holds a useful number of records.
pub const PAGE_SIZE_BYTES_MIN: usize = 4 << 10;
/// The largest logical page: 64 KiB, because modification-log offsets are
/// 16-bit (see `docs/design.md`).
pub const PAGE_SIZE_BYTES_MAX: usize = 64 << 10;
/// The smallest compressed block: 1 KiB, InnoDB's smallest `KEY_BLOCK_SIZE`.
pub const BLOCK_SIZE_BYTES_MIN: usize = 1 << 10;
/// The largest compressed block: 16 KiB, InnoDB's largest `KEY_BLOCK_SIZE`.
pub const COMPRESSED_BLOCK_SIZE_BYTES_MAX: usize = 16 << 10;

const _: () = assert!(PAGE_SIZE_BYTES_MIN.is_power_of_two());
const _: () = assert!(PAGE_SIZE_BYTES_MAX.is_power_of_two());
const _: () = assert!(BLOCK_SIZE_BYTES_MIN.is_power_of_two());
const _: () = assert!(COMPRESSED_BLOCK_SIZE_BYTES_MAX.is_power_of_two());
const _: () = assert!(PAGE_SIZE_BYTES_MIN <= PAGE_SIZE_BYTES_MAX);
const _: () = assert!(BLOCK_SIZE_BYTES_MIN <= COMPRESSED_BLOCK_SIZE_BYTES_MAX);
// Modification-log offsets are u16: every byte of the largest page must be
// addressable.
const _: () = assert!(PAGE_SIZE_BYTES_MAX - 1 <= u16::MAX as usize);
// Even the smallest block must hold its header and a useful payload.
const _: () = assert!(BLOCK_HEADER_BYTES * 8 <= BLOCK_SIZE_BYTES_MIN);

/// The size of a page's on-disk block, like InnoDB's `KEY_BLOCK_SIZE`.
///
/// The compressed sizes are 1 to 16 KiB and may not exceed the page size;
/// `Uncompressed` means the block is the page itself (see the design doc:
/// the header then lives in the page's first [`BLOCK_HEADER_BYTES`] bytes,
/// which the codec reserves in every page).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum BlockSize {
    /// 1 KiB compressed blocks.
    Kib1,
    /// 2 KiB compressed blocks.
    Kib2,
    /// 4 KiB compressed blocks.
    Kib4,
    /// 8 KiB compressed blocks.
    Kib8,
    /// 16 KiB compressed blocks.
    Kib16,
    /// No compression: the block is the page.
    #[default]
    Uncompressed,
}

impl BlockSize {
    /// Every block size, in the order of [`BlockSize::index`].
    pub const ALL: [BlockSize; 6] = [
        BlockSize::Kib1,
        BlockSize::Kib2,
        BlockSize::Kib4,
        BlockSize::Kib8,
        BlockSize::Kib16,
        BlockSize::Uncompressed,
    ];

    /// The compressed block size of `bytes` (1, 2, 4, 8 or 16 KiB), or `None`.
    #[must_use]
    pub fn from_compressed_bytes(bytes: usize) -> Option<BlockSize> {
        match bytes {
            1024 => Some(BlockSize::Kib1),
            2048 => Some(BlockSize::Kib2),
            4096 => Some(BlockSize::Kib4),
            8192 => Some(BlockSize::Kib8),
            16384 => Some(BlockSize::Kib16),
            _ => None,
        }
    }

    /// The block's size in bytes, or `None` for `Uncompressed` (whose size is
    /// the page size).
    #[must_use]
    pub fn compressed_bytes(self) -> Option<usize> {
        match self {
            BlockSize::Kib1 => Some(1 << 10),
            BlockSize::Kib2 => Some(2 << 10),
            BlockSize::Kib4 => Some(4 << 10),
            BlockSize::Kib8 => Some(8 << 10),
            BlockSize::Kib16 => Some(16 << 10),
            BlockSize::Uncompressed => None,
        }
    }

    /// A dense index (0..6) for per-block-size tables such as the counters.
    #[must_use]
    pub fn index(self) -> usize {
        match self {
            BlockSize::Kib1 => 0,
            BlockSize::Kib2 => 1,
            BlockSize::Kib4 => 2,
            BlockSize::Kib8 => 3,
            BlockSize::Kib16 => 4,
            BlockSize::Uncompressed => 5,
        }
    }

    /// A short label: `"1K"` .. `"16K"`, or `"uncompressed"`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            BlockSize::Kib1 => "1K",
            BlockSize::Kib2 => "2K",
            BlockSize::Kib4 => "4K",
            BlockSize::Kib8 => "8K",
            BlockSize::Kib16 => "16K",
            BlockSize::Uncompressed => "uncompressed",
        }
    }
}

/// A validated pair of page size and block size.
///
/// Invariants: the page size is a power of two in
/// [`PAGE_SIZE_BYTES_MIN`]..=[`PAGE_SIZE_BYTES_MAX`]; a compressed block size
/// is at most the page size; an uncompressed block is exactly the page.
///
/// Serializable for reports; not deserializable, so that every value went
/// through [`Geometry::new`]'s checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Geometry {
    page_size_bytes: u32,
    block_size: BlockSize,
}

impl Geometry {
    /// A geometry, or `InvalidGeometry` if the format does not support it.
    pub fn new(page_size_bytes: usize, block_size: BlockSize) -> Result<Geometry> {
        let block_size_bytes = block_size.compressed_bytes().unwrap_or(page_size_bytes);
        let invalid = |reason| BaseError::InvalidGeometry {
            page_size_bytes: page_size_bytes as u64,
            block_size_bytes: block_size_bytes as u64,
            reason,
        };
        if !page_size_bytes.is_power_of_two() {
            return Err(invalid("the page size must be a power of two"));
        }
        if !(PAGE_SIZE_BYTES_MIN..=PAGE_SIZE_BYTES_MAX).contains(&page_size_bytes) {
            return Err(invalid("the page size must be 4 to 64 KiB"));
        }
        if block_size_bytes > page_size_bytes {
            return Err(invalid(
                "a compressed block may not be larger than its page",
            ));
        }
        let page_size_bytes = u32::try_from(page_size_bytes)
            .map_err(|_| invalid("the page size must be 4 to 64 KiB"))?;
        Ok(Geometry {
            page_size_bytes,
            block_size,
        })
    }

    /// The uncompressed geometry for `page_size_bytes` (block = page).
    pub fn uncompressed(page_size_bytes: usize) -> Result<Geometry> {
        Geometry::new(page_size_bytes, BlockSize::Uncompressed)
    }

    /// The logical page size.
    #[must_use]
    pub fn page_size_bytes(self) -> usize {
        self.page_size_bytes as usize
    }

    /// The block size class.
    #[must_use]
    pub fn block_size(self) -> BlockSize {
        self.block_size
    }

    /// The block size in bytes (the page size when uncompressed).
    #[must_use]
    pub fn block_size_bytes(self) -> usize {
        self.block_size
            .compressed_bytes()
            .unwrap_or(self.page_size_bytes as usize)
    }

    /// Whether blocks are pages stored as they are.
    #[must_use]
    pub fn is_uncompressed(self) -> bool {
        self.block_size == BlockSize::Uncompressed
    }

    /// The bytes of a page the codec compresses and upper layers may change:
    /// everything after the reserved header bytes.
    #[must_use]
    pub fn page_body_bytes(self) -> usize {
        self.page_size_bytes() - BLOCK_HEADER_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_supported_combination() {
        for page_log2 in 12..=16 {
            let page = 1usize << page_log2;
            for block in BlockSize::ALL {
                let ok = block.compressed_bytes().is_none_or(|b| b <= page);
                assert_eq!(Geometry::new(page, block).is_ok(), ok, "{page} {block:?}");
            }
        }
    }

    #[test]
    fn rejects_bad_page_sizes() {
        for page in [0, 1000, 2048, 6000, 128 << 10] {
            let err = Geometry::new(page, BlockSize::Kib1).unwrap_err();
            assert!(matches!(err, BaseError::InvalidGeometry { .. }), "{err}");
        }
    }

    #[test]
    fn the_error_names_the_sizes_and_the_rule() {
        let err = Geometry::new(1000, BlockSize::Kib1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid geometry: page 1000 bytes, block 1024 bytes: the page size must be a power of two"
        );
        let err = Geometry::new(4 << 10, BlockSize::Kib8).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid geometry: page 4096 bytes, block 8192 bytes: a compressed block may not be larger than its page"
        );
    }

    #[test]
    fn block_size_round_trips_through_bytes() {
        for block in BlockSize::ALL {
            if let Some(bytes) = block.compressed_bytes() {
                assert_eq!(BlockSize::from_compressed_bytes(bytes), Some(block));
            }
        }
        assert_eq!(BlockSize::from_compressed_bytes(3000), None);
    }
}
