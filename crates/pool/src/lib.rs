//! Barracuda's buffer pool: compressed blocks and uncompressed frames of
//! pages, on an LRU and an unzip_LRU, within one byte budget.
//!
//! What it is: the cache between the B+tree and the data file. A page of a
//! compressed tree is cached in one of two states, *compressed only* (its
//! block) or *both* (block and uncompressed frame), never uncompressed only:
//! the block is the primary copy and carries every committed change in its
//! modification log, so even a dirty frame can be dropped. An uncompressed
//! pool keeps frames only, on the LRU alone.
//!
//! What it is not: a page allocator, a log, or a tree. The tree asks for
//! pages by id; the log tells the pool how far it is durable
//! ([`DurableLsn`]), and the pool never writes a page before its changes are.
//!
//! Hard limits: pages of 4..=64 KiB, blocks of 1 KiB..=page; the budget
//! ([`PoolConfig::buffer_pool_bytes`]) is allocated once at open, aligned for
//! `O_DIRECT`, and never exceeded; nothing on the read path allocates.
//!
//! Invariants, checked by [`BufferPool::check_invariants`]:
//! - every cached page is on the LRU and in the page table; the unzip_LRU
//!   holds exactly the LRU's pages that have a frame, in the same order;
//! - the old sublist is 37% (`old_blocks_pct`) of the LRU, at its tail;
//! - frames are dropped only while the unzip_LRU is above 10% of the LRU;
//! - pinned pages are never evicted; dirty pages are on the flush list,
//!   ordered by oldest modification;
//! - bytes of frames and blocks in use stay within the budget.
//!
//! ```
//! use std::sync::Arc;
//! use barracuda_base::{Lsn, PageId};
//! use barracuda_pool::testing::{MemoryFile, SimpleCodec};
//! use barracuda_pool::{BufferPool, CommitOutcome, PoolConfig, Services};
//!
//! let services = Services {
//!     codec: Arc::new(SimpleCodec::default()),
//!     file: Arc::new(MemoryFile::default()),
//!     durable_lsn: Arc::new(|| Lsn(u64::MAX)),
//!     clock: None,
//! };
//! let pool = BufferPool::open(PoolConfig::default().buffer_pool_bytes(1 << 20), services)?;
//! {
//!     let mut page = pool.create(PageId(7))?;
//!     page.write(100, b"hello")?;
//!     assert_eq!(page.commit(Lsn(1))?, CommitOutcome::Fits);
//! }
//! assert_eq!(&pool.fix_shared(PageId(7))?[100..105], b"hello");
//! pool.check_invariants();
//! # Ok::<(), barracuda_pool::PoolError>(())
//! ```

mod adapters;
mod arena;
mod backend;
mod cache;
mod cleaner;
mod config;
mod counters;
mod desc;
mod error;
mod flush;
mod guard;
mod install;
mod invariants;
mod lists;
mod policy;
mod pool;
mod prefault;
mod readahead;
mod status;
mod table;
#[cfg(feature = "testing")]
pub mod testing;

pub use adapters::doublewrite::{DOUBLEWRITE_SLOTS, RestoreReport};
pub use adapters::{CodecService, EXTEND_BYTES, FILE_QUEUE_DEPTH_DEFAULT, FileService};
pub use backend::{
    AppendOutcome, CompressOutcome, DurableLsn, PageCodec, PageFile, UNIT_ALIGNMENT_BYTES_DEFAULT,
};
pub use cache::{ManualClock, Services};
pub use cleaner::{CleanerRegistration, FlusherHandle, PageCleaner};
pub use config::{
    ARENA_ALIGNMENT_BYTES, BLOCK_SIZE_BYTES_MIN, EXHAUSTED_WAIT_MS_DEFAULT, EvictionPolicy,
    OLD_BLOCKS_PCT_DEFAULT, OLD_BLOCKS_TIME_MS_DEFAULT, PAGE_SIZE_BYTES_DEFAULT,
    PAGE_SIZE_BYTES_MAX, PAGE_SIZE_BYTES_MIN, PageFormat, PoolConfig,
};
pub use counters::CodecCounters;
pub use desc::LSN_PENDING;
pub use error::{PoolError, Result};
pub use guard::{CommitOutcome, ExclusiveGuard, SharedGuard};
pub use policy::{
    FRAMES_ONLY_QUIET_MS, IO_TO_UNZIP_FACTOR, IntervalCounts, PolicyStatus, STAT_INTERVAL_COUNT,
    UNZIP_LRU_FLOOR_DIVISOR,
};
pub use pool::{Access, BufferPool, GhostBlocks, LEND_KEEP_BYTES_MIN};
pub use readahead::{READ_AHEAD_IN_FLIGHT_DIVISOR, READ_AHEAD_WAIT_STRIPES};
pub use status::{LruEntry, PoolStatus};
pub use table::PageIdHasher;
