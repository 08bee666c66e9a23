//! Barracuda: an embeddable key-value store for data that is larger than
//! memory and compresses well.
//!
//! The core is a B+tree over zlib- or zstd-compressed pages
//! ([`barracuda_btree`]), cached by a buffer pool that keeps compressed blocks
//! and uncompressed frames on separate LRU lists ([`barracuda_pool`]), over an
//! io_uring file layer with O_DIRECT ([`barracuda_io`]). The compressed block
//! format lives in [`barracuda_codec`].
//!
//! The embedded `Db` API, the write-ahead log and recovery are filled by issue 6.

pub use barracuda_btree as btree;
pub use barracuda_codec as codec;
pub use barracuda_io as io;
pub use barracuda_pool as pool;

mod error;
pub mod wal;

pub use error::{Error, Result};
