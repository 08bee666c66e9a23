//! Shared setup of the on-pool tests: a `PoolStore` over a small buffer pool
//! (a few dozen pages, so that eviction happens constantly) with the real
//! zlib codec or the uncompressed format, and either eviction policy.
#![allow(dead_code, reason = "each test binary uses part of this")]
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use barracuda_base::{BlockSize, Geometry};
use barracuda_codec::{Codec, CompressionStats};
use barracuda_mtr::{LsnCounter, PoolStore};
use barracuda_pool::testing::MemoryFile;
use barracuda_pool::{BufferPool, CodecService, EvictionPolicy, PageFormat, PoolConfig, Services};
use std::sync::Arc;

/// Page format of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// 16 KiB pages in 8 KiB zlib blocks.
    Zlib16k8k,
    /// 16 KiB pages in 4 KiB zlib blocks (not in [`Format::ALL`]: only
    /// compressible data fits a quarter of the page without a many-way
    /// split, so the model tests leave it to `incompressible.rs`).
    Zlib16k4k,
    /// 4 KiB pages in 2 KiB zlib blocks.
    Zlib4k2k,
    /// Uncompressed 4 KiB pages (the real codec's stored format).
    Plain4k,
    /// Uncompressed 16 KiB pages.
    Plain16k,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 4] = [
        Format::Zlib16k8k,
        Format::Zlib4k2k,
        Format::Plain4k,
        Format::Plain16k,
    ];

    /// The logical page size.
    pub fn page_size_bytes(self) -> usize {
        match self {
            Format::Zlib16k8k | Format::Zlib16k4k | Format::Plain16k => 16 << 10,
            Format::Zlib4k2k | Format::Plain4k => 4 << 10,
        }
    }

    /// Whether pages are compressed (the tree must then be configured so).
    pub fn compressed(self) -> bool {
        matches!(
            self,
            Format::Zlib16k8k | Format::Zlib16k4k | Format::Zlib4k2k
        )
    }

    fn block_size(self) -> Option<BlockSize> {
        match self {
            Format::Zlib16k8k => Some(BlockSize::Kib8),
            Format::Zlib16k4k => Some(BlockSize::Kib4),
            Format::Zlib4k2k => Some(BlockSize::Kib2),
            Format::Plain4k | Format::Plain16k => None,
        }
    }
}

/// A store over a fresh pool of `budget_pages` pages (the byte budget is
/// `budget_pages` logical pages; compressed pools fit more blocks in it).
pub fn store(format: Format, eviction: EvictionPolicy, budget_pages: usize) -> Arc<PoolStore> {
    store_counting(format, eviction, budget_pages).0
}

/// [`store`], and the codec's counters (compressions tried and fitted).
pub fn store_counting(
    format: Format,
    eviction: EvictionPolicy,
    budget_pages: usize,
) -> (Arc<PoolStore>, Arc<CompressionStats>) {
    let page = format.page_size_bytes();
    let (codec, geometry, pool_format) = match format.block_size() {
        Some(block) => {
            let geometry = Geometry::new(page, block).unwrap();
            (
                Codec::zlib_default(),
                geometry,
                PageFormat::Compressed {
                    block_size_bytes: geometry.block_size_bytes(),
                },
            )
        }
        None => (
            Codec::None,
            Geometry::uncompressed(page).unwrap(),
            PageFormat::Uncompressed,
        ),
    };
    let lsns = LsnCounter::new();
    let codec = Arc::new(CodecService::new(codec, geometry).unwrap());
    let stats = Arc::clone(codec.stats());
    let services = Services {
        codec,
        file: Arc::new(MemoryFile::default()),
        durable_lsn: PoolStore::durable_lsn_provider(&lsns),
        clock: None,
    };
    let config = PoolConfig::default()
        .page_size_bytes(page)
        .format(pool_format)
        .buffer_pool_bytes(budget_pages * page)
        .eviction_policy(eviction);
    let pool = Arc::new(BufferPool::open(config, services).unwrap());
    (Arc::new(PoolStore::new(pool, lsns).unwrap()), stats)
}

/// Pages evicted plus frames dropped so far.
pub fn evictions(store: &PoolStore) -> u64 {
    let status = store.pool().status();
    status.pages_evicted + status.frames_dropped
}
