//! Counters: events the pool counts without its mutex, and the codec's
//! compression counters. The status report ([`crate::PoolStatus`]) reads
//! them.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// A counter bumped by every thread on every page get: striped over
/// cache-line-sized cells, each thread adding to its own, so that readers on
/// different cores do not pass one cache line back and forth (three times
/// per lookup, once per tree level). Reading it sums the cells.
#[derive(Default)]
pub(crate) struct StripedCounter([StripeCell; STRIPES]);

const STRIPES: usize = 16;

#[derive(Default)]
#[repr(align(128))]
struct StripeCell(AtomicU64);

impl StripedCounter {
    pub(crate) fn add(&self, n: u64) {
        thread_local! {
            static STRIPE: usize = {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed) as usize % STRIPES
            };
        }
        let stripe = STRIPE.with(|s| *s);
        self.0[stripe].0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn load(&self) -> u64 {
        self.0.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
    }
}

/// Event counters, updated without the pool mutex.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) page_gets: StripedCounter,
    pub(crate) pages_read: AtomicU64,
    pub(crate) os_cache_reads: AtomicU64,
    pub(crate) pages_created: AtomicU64,
    pub(crate) pages_written: AtomicU64,
    pub(crate) unzips: AtomicU64,
    pub(crate) unzip_time_ns: AtomicU64,
    pub(crate) read_time_ns: AtomicU64,
    pub(crate) frames_dropped: AtomicU64,
    pub(crate) blocks_dropped: AtomicU64,
    pub(crate) blocks_reloaded: AtomicU64,
    pub(crate) pages_evicted: AtomicU64,
    pub(crate) made_young: AtomicU64,
    pub(crate) not_made_young: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) recompressions: AtomicU64,
    pub(crate) compression_failures: AtomicU64,
    pub(crate) write_ahead_waits: AtomicU64,
    pub(crate) memory_waits: AtomicU64,
    pub(crate) read_ahead: AtomicU64,
    pub(crate) read_ahead_failed: AtomicU64,
    pub(crate) read_ahead_evicted_unused: AtomicU64,
    pub(crate) write_batches: AtomicU64,
    /// `page_gets` and `pages_read` at the previous status, for the hit rate
    /// over the last interval.
    pub(crate) last_gets: AtomicU64,
    pub(crate) last_reads: AtomicU64,
}

/// Compression counters of the codec, like `INNODB_CMP` for one block size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodecCounters {
    /// Block size these counters are for.
    pub block_size_bytes: u64,
    /// Compressions attempted.
    pub compress_ops: u64,
    /// Compressions that fit the block.
    pub compress_ops_ok: u64,
    /// Time spent compressing, µs.
    pub compress_time_us: u64,
    /// Compressions not run again: the page's bytes were compressed just
    /// before, to see whether they fit, and the block was kept
    /// (`PageCodec::compress_trial`). Not in `compress_ops`.
    #[serde(default)]
    pub compress_reused: u64,
    /// Pages stored sparse (uncompressed, without their free space)
    /// because they fit their block so. Not in `compress_ops`.
    #[serde(default)]
    pub sparse_ops: u64,
    /// Pages fuller than their block not compressed for a split or a
    /// trial, because recent pages said compression could not make them
    /// fit. Not in `compress_ops`.
    #[serde(default)]
    pub guessed_unfit: u64,
    /// Decompressions.
    pub uncompress_ops: u64,
    /// Time spent decompressing, µs.
    pub uncompress_time_us: u64,
}
