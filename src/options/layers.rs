//! The options of each layer under the facade, made from the user's
//! [`Options`] and [`TreeOptions`]: the file layer's ([`IoOptions`], one
//! set for the data files and one for the log), the log's
//! ([`WalOptions`]), a tree's geometry and its buffer pool's
//! ([`PoolConfig`]), and the B+tree's ([`TreeConfig`]). Opening a database
//! or a tree builds each layer's options here and nowhere else, so what a
//! user's option sets, and what the facade decides on its own, reads in
//! one place.

use barracuda_base::Geometry;
use barracuda_btree::TreeConfig;
use barracuda_io::{Backend, IoOptions};
use barracuda_pool::{PageFormat, PoolConfig};

use super::{Compression, Options, TreeOptions};
use crate::error::Result;
use crate::wal::WalOptions;

impl Options {
    /// The file layer's options of the data files: the user's backend,
    /// flush method, thread counts and queue depth. The database starts
    /// one set of I/O threads with them, which every tree's files share.
    pub(crate) fn io_options(&self) -> IoOptions {
        IoOptions::default()
            .backend(self.io_backend)
            .flush_method(self.flush_method)
            .read_io_threads(self.read_io_threads)
            .write_io_threads(self.write_io_threads)
            .queue_depth(self.io_queue_depth)
    }

    /// The file layer's options of the log's files: the data files' flush
    /// method, on pread/pwrite with one thread of each kind.
    pub(crate) fn log_io_options(&self) -> IoOptions {
        // The log writes one sequential run and syncs it per flush, from the
        // flushing thread: pwrite does that without an io_uring file's
        // threads, rings and buffers, which each segment would start again.
        // Its calls are all synchronous, on the caller's thread: one idle
        // worker of each kind instead of the data files' eight.
        self.io_options()
            .backend(Backend::Pread)
            .read_io_threads(1)
            .write_io_threads(1)
            .buffer_count(1)
            .buffer_size_bytes(4096)
    }

    /// The write-ahead log's options.
    pub(crate) fn wal_options(&self) -> WalOptions {
        WalOptions::default().log_bytes(self.log_bytes_or_default())
    }

    /// The options of the buffer pool of a tree whose blocks have
    /// `geometry` ([`TreeOptions::geometry`]).
    pub(crate) fn pool_config(&self, geometry: Geometry) -> PoolConfig {
        let format = if geometry.is_uncompressed() {
            PageFormat::Uncompressed
        } else {
            PageFormat::Compressed {
                block_size_bytes: geometry.block_size_bytes(),
            }
        };
        PoolConfig::default()
            .page_size_bytes(geometry.page_size_bytes())
            .format(format)
            // The whole budget: a record cache takes its part as it fills
            // (`RecordCache::fill`, `BufferPool::lend_bytes`).
            .buffer_pool_bytes(self.buffer_pool_bytes)
            .eviction_policy(self.eviction_policy)
            .huge_pages(self.huge_pages)
            .os_cache_tier(self.os_cache_tier)
    }

    /// The B+tree's options of a tree stored as `tree` says: its split
    /// policy and compression, and the database's read-ahead.
    pub(crate) fn tree_config(&self, tree: &TreeOptions) -> TreeConfig {
        TreeConfig {
            policy: tree.split_policy,
            compressed: tree.compression != Compression::None,
            read_ahead_pages: self.read_ahead_pages,
            ..TreeConfig::default()
        }
    }
}

impl TreeOptions {
    /// The geometry of the tree's blocks: its page size, and its block size
    /// when compressed (an uncompressed tree's block is its page).
    pub(crate) fn geometry(&self) -> Result<Geometry> {
        Ok(if self.compression == Compression::None {
            Geometry::uncompressed(self.page_size_bytes)?
        } else {
            Geometry::new(self.page_size_bytes, self.effective_block_size())?
        })
    }
}
