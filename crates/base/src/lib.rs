//! Barracuda's shared vocabulary: the identifiers and sizes every layer names.
//!
//! - [`PageId`] and [`Lsn`]: which page, and how far the write-ahead log has
//!   come.
//! - [`Geometry`] and [`BlockSize`]: a validated pair of logical page size
//!   (4 to 64 KiB) and on-disk block size (1 to 16 KiB compressed, or the page
//!   itself), with the limits ([`PAGE_SIZE_BYTES_MIN`] ..) and the block
//!   header's size ([`BLOCK_HEADER_BYTES`]) that the geometry depends on.
//!
//! What this crate is not: the block format (the codec crate encodes and
//! checks blocks) or anything with behaviour beyond validation. It exists so
//! that the buffer pool, the B+tree and the facade share these types without
//! depending on the codec for them; it depends on nothing of Barracuda's.
//!
//! ```
//! use barracuda_base::{BlockSize, Geometry, PageId};
//!
//! let geometry = Geometry::new(16 << 10, BlockSize::Kib8)?;
//! assert_eq!(geometry.block_size_bytes(), 8 << 10);
//! assert!(Geometry::new(4 << 10, BlockSize::Kib8).is_err());
//! assert_eq!(PageId(3).to_string(), "page 3");
//! # Ok::<(), barracuda_base::BaseError>(())
//! ```

mod error;
mod geometry;
mod ids;

pub use error::{BaseError, Result};
pub use geometry::{
    BLOCK_HEADER_BYTES, BLOCK_SIZE_BYTES_MIN, BlockSize, COMPRESSED_BLOCK_SIZE_BYTES_MAX, Geometry,
    PAGE_SIZE_BYTES_MAX, PAGE_SIZE_BYTES_MIN,
};
pub use ids::{Lsn, PageId};
