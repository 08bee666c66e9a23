//! Barracuda: an embeddable key-value store for data that is larger than
//! memory and compresses well.
//!
//! The core is a B+tree over zlib- or zstd-compressed pages
//! ([`barracuda_btree`]), cached by a buffer pool that keeps compressed blocks
//! and uncompressed frames on separate LRU lists ([`barracuda_pool`]), over an
//! io_uring file layer with O_DIRECT ([`barracuda_io`]). The compressed block
//! format lives in [`barracuda_codec`]. [`Db`] ties them together with a
//! write-ahead log ([`wal`]), checkpoints and crash recovery.
//!
//! ```no_run
//! # fn main() -> barracuda::Result<()> {
//! let db = barracuda::Db::options()
//!     .buffer_pool_bytes(256 << 20)
//!     .open("/var/lib/myapp/db")?;
//! let users = db.tree("users")?;
//! users.put(b"alice", b"{\"age\": 31}")?;
//! assert_eq!(users.get(b"alice")?.as_deref(), Some(&b"{\"age\": 31}"[..]));
//! for entry in users.prefix(b"al") {
//!     let (key, value) = entry?;
//!     println!("{key:?} = {value:?}");
//! }
//! db.close()?;
//! # Ok(())
//! # }
//! ```

pub use barracuda_btree as btree;
pub use barracuda_codec as codec;
pub use barracuda_io as io;
pub use barracuda_pool as pool;

#[cfg(feature = "tokio")]
pub mod asynchronous;
mod batch;
mod catalog;
mod db;
mod error;
mod options;
mod records;
#[doc(hidden)]
pub mod testing;
mod tree;
pub mod wal;

pub use barracuda_btree::SplitPolicy;
pub use barracuda_codec::BlockSize;
pub use barracuda_io::FlushMethod;
pub use barracuda_pool::{EvictionPolicy, PoolStatus};
pub use batch::{ChunkedWriter, WriteBatch};
pub use catalog::CATALOG_FILE_NAME;
pub use db::{CompactStats, CompactStep, Db, LOG_FILE_NAME, RecoveryStats};
pub use error::{Error, Result};
pub use options::{
    Compression, Durability, FileWrapper, IO_QUEUE_DEPTH_DEFAULT, Options, TreeOptions,
};
pub use records::RecordCacheStatus;
pub use tree::{KeyValue, Range, Tree};
