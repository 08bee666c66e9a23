//! Options of a buffer pool, fixed at open.

use serde::{Deserialize, Serialize};

use crate::error::{PoolError, Result};

/// Smallest logical page: 4 KiB, as the design allows 4..=64 KiB pages.
pub const PAGE_SIZE_BYTES_MIN: usize = 4 << 10;
/// Largest logical page: 64 KiB, as the design allows 4..=64 KiB pages.
pub const PAGE_SIZE_BYTES_MAX: usize = 64 << 10;
/// Default logical page: 16 KiB, InnoDB's default page.
pub const PAGE_SIZE_BYTES_DEFAULT: usize = 16 << 10;
/// Smallest compressed block: 1 KiB, InnoDB's smallest `KEY_BLOCK_SIZE`.
pub const BLOCK_SIZE_BYTES_MIN: usize = 1 << 10;
/// The arena is aligned for `O_DIRECT`, which needs 4096-byte alignment on
/// 4K-sector devices.
pub const ARENA_ALIGNMENT_BYTES: usize = 4096;
/// InnoDB's `innodb_old_blocks_pct` default: the old sublist holds 37% (3/8)
/// of the LRU.
pub const OLD_BLOCKS_PCT_DEFAULT: u8 = 37;
/// InnoDB's `innodb_old_blocks_time` default: a page must stay 1000 ms in the
/// old sublist after its first access before another access makes it young.
pub const OLD_BLOCKS_TIME_MS_DEFAULT: u64 = 1000;

const _: () = assert!(PAGE_SIZE_BYTES_MIN.is_power_of_two());
const _: () = assert!(PAGE_SIZE_BYTES_MAX.is_power_of_two());
const _: () = assert!(PAGE_SIZE_BYTES_DEFAULT.is_power_of_two());
const _: () = assert!(PAGE_SIZE_BYTES_MIN <= PAGE_SIZE_BYTES_DEFAULT);
const _: () = assert!(PAGE_SIZE_BYTES_DEFAULT <= PAGE_SIZE_BYTES_MAX);
const _: () = assert!(PAGE_SIZE_BYTES_MIN.is_multiple_of(ARENA_ALIGNMENT_BYTES));

/// How long a fix waits, by default, for other threads to release pinned
/// pages (or for the log to become durable) before it reports the pool
/// exhausted: a second is far beyond any latch hold time of a healthy tree,
/// so waiting longer would only hide a pool too small for its thread count.
pub const EXHAUSTED_WAIT_MS_DEFAULT: u32 = 1000;

/// Which rule picks between dropping an uncompressed frame and evicting a
/// whole page when the pool needs memory.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum EvictionPolicy {
    /// InnoDB's `buf_LRU_evict_from_unzip_LRU`: drop frames while the load
    /// is I/O-bound (`unzip_avg <= io_avg * 50` over 50 one-second
    /// intervals), else evict whole pages.
    InnoDb,
    /// Measures the cost of an unzip and of a miss, keeps ghost entries of
    /// dropped frames and evicted blocks, and moves the frame/block balance
    /// toward whichever would have saved more time. See `docs/design.md`.
    #[default]
    CostAware,
}

/// How pages of the pool are stored on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PageFormat {
    /// Pages are compressed into blocks of this size (a power of two,
    /// `1 KiB..=page size`); the pool keeps blocks and optional frames.
    Compressed {
        /// Size of one compressed block.
        block_size_bytes: usize,
    },
    /// Pages are stored as they are; the pool keeps frames on the LRU alone.
    Uncompressed,
}

/// Options of a [`crate::BufferPool`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolConfig {
    /// Size of a logical page. Default = 16 KiB.
    pub page_size_bytes: usize,
    /// Compressed or not. Default = compressed into 8 KiB blocks.
    pub format: PageFormat,
    /// The one memory budget for frames and blocks. Default = 64 MiB.
    pub buffer_pool_bytes: usize,
    /// Frame/page eviction rule. Default = [`EvictionPolicy::CostAware`].
    pub eviction_policy: EvictionPolicy,
    /// Share of the LRU in the old sublist, percent. Default = 37.
    pub old_blocks_pct: u8,
    /// Minimum age of an old page before it is made young. Default = 1000 ms.
    pub old_blocks_time_ms: u64,
    /// How long a fix waits for memory before failing. Default = 1000 ms.
    pub exhausted_wait_ms: u32,
    /// Asks the kernel for transparent huge pages for the arena
    /// (`madvise(MADV_HUGEPAGE)`). Default = false (see
    /// `barracuda::Options::huge_pages` for why).
    #[serde(default)]
    pub huge_pages: bool,
    /// Uses the OS page cache of a buffered file (`FlushMethod::Fsync`) as a
    /// second tier of blocks, exclusive of the pool (2Q): a page read from
    /// the device enters the pool at the LRU tail and stays in the OS page
    /// cache; a page found there (`BlockFile::read_if_cached`) or hit again
    /// in the pool is dropped from it and kept by the pool as any other.
    /// Default = false. Nothing happens with `O_DIRECT` files.
    #[serde(default)]
    pub os_cache_tier: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            page_size_bytes: PAGE_SIZE_BYTES_DEFAULT,
            format: PageFormat::Compressed {
                block_size_bytes: /* 8 KiB */ 8 << 10,
            },
            buffer_pool_bytes: /* 64 MiB */ 64 << 20,
            eviction_policy: EvictionPolicy::CostAware,
            old_blocks_pct: OLD_BLOCKS_PCT_DEFAULT,
            old_blocks_time_ms: OLD_BLOCKS_TIME_MS_DEFAULT,
            exhausted_wait_ms: EXHAUSTED_WAIT_MS_DEFAULT,
            huge_pages: false,
            os_cache_tier: false,
        }
    }
}

impl PoolConfig {
    /// Sets the page size. Default = 16 KiB.
    #[must_use]
    pub fn page_size_bytes(mut self, page_size_bytes: usize) -> Self {
        self.page_size_bytes = page_size_bytes;
        self
    }

    /// Sets the page format. Default = compressed into 8 KiB blocks.
    #[must_use]
    pub fn format(mut self, format: PageFormat) -> Self {
        self.format = format;
        self
    }

    /// Sets the memory budget. Default = 64 MiB.
    #[must_use]
    pub fn buffer_pool_bytes(mut self, buffer_pool_bytes: usize) -> Self {
        self.buffer_pool_bytes = buffer_pool_bytes;
        self
    }

    /// Sets the eviction policy. Default = [`EvictionPolicy::CostAware`].
    #[must_use]
    pub fn eviction_policy(mut self, eviction_policy: EvictionPolicy) -> Self {
        self.eviction_policy = eviction_policy;
        self
    }

    /// Sets the old sublist share in percent (5..=95). Default = 37.
    #[must_use]
    pub fn old_blocks_pct(mut self, old_blocks_pct: u8) -> Self {
        self.old_blocks_pct = old_blocks_pct;
        self
    }

    /// Sets the minimum age of an old page before it is made young.
    /// Default = 1000 ms.
    #[must_use]
    pub fn old_blocks_time_ms(mut self, old_blocks_time_ms: u64) -> Self {
        self.old_blocks_time_ms = old_blocks_time_ms;
        self
    }

    /// Sets how long a fix waits for memory before failing with
    /// `Exhausted`. Default = 1000 ms.
    #[must_use]
    pub fn exhausted_wait_ms(mut self, exhausted_wait_ms: u32) -> Self {
        self.exhausted_wait_ms = exhausted_wait_ms;
        self
    }

    /// Whether the arena asks for transparent huge pages. Default = false.
    #[must_use]
    pub fn huge_pages(mut self, huge_pages: bool) -> Self {
        self.huge_pages = huge_pages;
        self
    }

    /// Whether the pool uses the OS page cache as a second tier of blocks.
    /// Default = false.
    #[must_use]
    pub fn os_cache_tier(mut self, os_cache_tier: bool) -> Self {
        self.os_cache_tier = os_cache_tier;
        self
    }

    /// The block size, or `None` for an uncompressed pool.
    pub fn block_size_bytes(&self) -> Option<usize> {
        match self.format {
            PageFormat::Compressed { block_size_bytes } => Some(block_size_bytes),
            PageFormat::Uncompressed => None,
        }
    }

    /// Checks every relation between the options.
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| Err(PoolError::InvalidConfig { reason });
        let page = self.page_size_bytes;
        if !page.is_power_of_two() || !(PAGE_SIZE_BYTES_MIN..=PAGE_SIZE_BYTES_MAX).contains(&page) {
            return invalid(format!(
                "page_size_bytes {page} must be a power of two in {PAGE_SIZE_BYTES_MIN}..={PAGE_SIZE_BYTES_MAX}"
            ));
        }
        if let Some(block) = self.block_size_bytes()
            && (!block.is_power_of_two() || !(BLOCK_SIZE_BYTES_MIN..=page).contains(&block))
        {
            return invalid(format!(
                "block_size_bytes {block} must be a power of two in {BLOCK_SIZE_BYTES_MIN}..={page}"
            ));
        }
        if self.buffer_pool_bytes < 2 * page {
            return invalid(format!(
                "buffer_pool_bytes {} must hold at least two pages of {page} bytes",
                self.buffer_pool_bytes
            ));
        }
        if !(5..=95).contains(&self.old_blocks_pct) {
            return invalid(format!(
                "old_blocks_pct {} must be in 5..=95",
                self.old_blocks_pct
            ));
        }
        Ok(())
    }
}
