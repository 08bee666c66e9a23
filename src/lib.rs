//! Barracuda: an embeddable key-value store for data that is larger than
//! memory and compresses well.
//!
//! The core is a B+tree over zlib- or zstd-compressed pages
//! (`barracuda-btree`), cached by a buffer pool that keeps compressed blocks
//! and uncompressed frames on separate LRU lists (`barracuda-pool`), over an
//! io_uring file layer with O_DIRECT (`barracuda-io`). The compressed block
//! format lives in `barracuda-codec`. [`Db`] ties them together with a
//! write-ahead log, checkpoints and crash recovery. Those crates are internal:
//! this crate exports the whole API, listed in one place below, and its
//! [`Error`] names the store's conditions, not theirs.
//!
//! What it is not: a server, a SQL or document database, or a distributed
//! store. It has no multi-statement transactions with reads: a
//! [`WriteBatch`] is atomic, but readers see each write as it commits. One
//! process opens a database directory at a time (a lock file refuses a
//! second).
//!
//! What it guarantees:
//! - With [`Durability::Sync`] (the default), a write that returned `Ok` is
//!   found after any crash, power loss included; a [`WriteBatch`] is found
//!   whole or not at all.
//! - A torn page write is repaired at open from the tree's doublewrite
//!   area; a damaged block is an [`Error`] naming the page, never a panic
//!   or wrong data.
//! - Each tree's pool and record cache together stay within
//!   `buffer_pool_bytes` (the OS page cache of `os_cache_tier` is the
//!   kernel's memory, outside it).
//! - Every structure has a `check_invariants()` (the tree, the pool, the
//!   record cache); [`Tree::check`] and `barracuda check DIR` verify every
//!   block and tree invariant of a database.
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

/// The README's code blocks, compiled as doc tests so that its example
/// cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(feature = "tokio")]
pub mod asynchronous;
mod batch;
mod catalog;
mod db;
mod error;
mod options;
mod records;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
mod tree;
mod wal;

// The public API, in one list. The internal crates (`barracuda-io`,
// `-codec`, `-pool`, `-btree`) are not re-exported: the few of their types
// an embedding user meets (options' enums, statistics) are named here, so
// that a change inside an internal crate does not break users.

// Opening a database and working with its trees.
pub use batch::{ChunkedWriter, WriteBatch};
pub use db::Db;
pub use db::KeyValue;
pub use error::{Error, Result};
pub use tree::{Range, Tree};

// Options and their values.
pub use barracuda_base::BlockSize;
pub use barracuda_btree::SplitPolicy;
pub use barracuda_io::{Backend, FlushMethod};
pub use barracuda_pool::EvictionPolicy;
pub use options::{Compression, Durability, IO_QUEUE_DEPTH_DEFAULT, Options, TreeOptions};

// Limits of keys and values.
pub use barracuda_btree::{KEY_BYTES_MAX, VALUE_BYTES_MAX};

// Statistics and reports.
pub use barracuda_btree::{SplitCounts, TreeStats};
pub use barracuda_pool::{CodecCounters, PolicyStatus, PoolStatus};
pub use db::{CompactStats, CompactStep, RecoveryStats};
pub use records::RecordCacheStatus;
pub use wal::WalStats;

// The files of a database directory, for tools that inspect one.
pub use catalog::CATALOG_FILE_NAME;
pub use db::LOG_FILE_NAME;

#[cfg(feature = "testing")]
#[doc(hidden)]
pub use options::FileWrapper;
