//! Counters and the status report, like the buffer pool section of
//! `SHOW ENGINE INNODB STATUS` plus `INNODB_CMP`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use crate::cache::Cache;
use crate::counters::CodecCounters;
use crate::policy::{IntervalCounts, PolicyStatus};

/// A snapshot of the pool's state and counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolStatus {
    /// Hit rate per 1000 page gets since the previous status (1000 when no
    /// page was read).
    pub hit_rate_per_mille: u64,
    /// Page gets since the previous status.
    pub interval_page_gets: u64,
    /// Pages on the LRU (every cached page).
    pub lru_len: u64,
    /// Pages in the old sublist.
    pub old_lru_len: u64,
    /// Pages on the unzip_LRU (cached with a frame).
    pub unzip_lru_len: u64,
    /// I/O (reads + writes): sum over the 50-second window, current second.
    pub io_sum: u64,
    /// I/O in the current second.
    pub io_cur: u64,
    /// Decompressions: sum over the window.
    pub unzip_sum: u64,
    /// Decompressions in the current second.
    pub unzip_cur: u64,
    /// Fixes since open.
    pub page_gets: u64,
    /// Pages read from the file (misses).
    pub pages_read: u64,
    /// Of `pages_read`, those the OS page cache held (the OS cache tier).
    #[serde(default)]
    pub os_cache_reads: u64,
    /// Pages created.
    pub pages_created: u64,
    /// Pages written.
    pub pages_written: u64,
    /// Unzips of a cached block on a hit.
    pub unzips: u64,
    /// Frames dropped (block kept).
    pub frames_dropped: u64,
    /// Blocks of clean pages dropped, frame kept (the cost-aware policy
    /// while frames alone fit, or pay).
    pub blocks_dropped: u64,
    /// Blocks read back from the file for a write to a page kept as its
    /// frame alone.
    pub blocks_reloaded: u64,
    /// Whole pages evicted.
    pub pages_evicted: u64,
    /// Pages made young.
    pub pages_made_young: u64,
    /// Accesses to old pages that did not make them young.
    pub pages_not_made_young: u64,
    /// Slab chunks emptied by moving blocks (for a frame).
    pub compactions: u64,
    /// Recompressions because the modification log was full.
    pub recompressions: u64,
    /// Commits that did not fit the block (the tree split the page).
    pub compression_failures: u64,
    /// Writes put off because the log was not durable yet.
    pub write_ahead_waits: u64,
    /// Times a fix waited 1 ms for pinned pages to be released.
    pub memory_waits: u64,
    /// Pages cached by read-ahead ([`BufferPool::prefetch`](crate::BufferPool::prefetch)).
    #[serde(default)]
    pub read_ahead: u64,
    /// Read-ahead reads dropped because they failed (I/O error, bad block).
    #[serde(default)]
    pub read_ahead_failed: u64,
    /// Pages read ahead and evicted before any fix used them.
    #[serde(default)]
    pub read_ahead_evicted_unused: u64,
    /// Batches of page writes (each up to the file's queue depth).
    #[serde(default)]
    pub write_batches: u64,
    /// Dirty pages (on the flush list).
    pub dirty_pages: u64,
    /// Bytes of frames and blocks in use.
    pub bytes_used: u64,
    /// The budget, rounded down to whole pages, less the chunks lent out of
    /// it (`lent_bytes`, rounded up to whole pages).
    pub budget_bytes: u64,
    /// Bytes lent out of the budget to memory kept beside the pool (a
    /// record cache as it fills; `BufferPool::lend_bytes`).
    #[serde(default)]
    pub lent_bytes: u64,
    /// Uncompressed frames in use.
    pub frame_count: u64,
    /// Compressed blocks in use.
    pub block_count: u64,
    /// Free chunks.
    pub free_chunk_count: u64,
    /// Chunks the arena's prefault thread populated ahead of the pool.
    #[serde(default)]
    pub chunks_prefaulted: u64,
    /// Average time of a miss's read, ns.
    pub read_time_avg_ns: u64,
    /// Average time of a decompression, ns.
    pub unzip_time_avg_ns: u64,
    /// The eviction policy's state.
    pub policy: PolicyStatus,
    /// The codec's counters.
    pub codec: CodecCounters,
}

impl PoolStatus {
    /// Reads the counters and the lists of `cache`, of which `lent_bytes`
    /// are lent ([`crate::BufferPool::status`]).
    pub(crate) fn collect(cache: &Cache, lent_bytes: usize) -> PoolStatus {
        let c = &cache.counters;
        let gets = c.page_gets.load();
        let reads = c.pages_read.load(Ordering::Relaxed);
        let interval_gets = gets - c.last_gets.swap(gets, Ordering::Relaxed);
        let interval_reads = reads.saturating_sub(c.last_reads.swap(reads, Ordering::Relaxed));
        let hit_rate_per_mille = (interval_reads * 1000)
            .checked_div(interval_gets)
            .map_or(1000, |miss_rate| 1000 - miss_rate.min(1000));
        let inner = cache.inner.lock();
        let (sum, cur): (IntervalCounts, IntervalCounts) = inner.stats.sum_and_cur();
        let (frames, blocks) = inner.alloc.usage();
        let unzip_ops = c.unzips.load(Ordering::Relaxed) + if cache.compressed { reads } else { 0 };
        PoolStatus {
            hit_rate_per_mille,
            interval_page_gets: interval_gets,
            lru_len: u64::from(inner.lru.list().len()),
            old_lru_len: u64::from(inner.lru.old_len()),
            unzip_lru_len: u64::from(inner.unzip.len()),
            io_sum: sum.io,
            io_cur: cur.io,
            unzip_sum: sum.unzip,
            unzip_cur: cur.unzip,
            page_gets: gets,
            pages_read: reads,
            os_cache_reads: c.os_cache_reads.load(Ordering::Relaxed),
            pages_created: c.pages_created.load(Ordering::Relaxed),
            pages_written: c.pages_written.load(Ordering::Relaxed),
            unzips: c.unzips.load(Ordering::Relaxed),
            frames_dropped: c.frames_dropped.load(Ordering::Relaxed),
            blocks_dropped: c.blocks_dropped.load(Ordering::Relaxed),
            blocks_reloaded: c.blocks_reloaded.load(Ordering::Relaxed),
            pages_evicted: c.pages_evicted.load(Ordering::Relaxed),
            pages_made_young: c.made_young.load(Ordering::Relaxed),
            pages_not_made_young: c.not_made_young.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            recompressions: c.recompressions.load(Ordering::Relaxed),
            compression_failures: c.compression_failures.load(Ordering::Relaxed),
            write_ahead_waits: c.write_ahead_waits.load(Ordering::Relaxed),
            memory_waits: c.memory_waits.load(Ordering::Relaxed),
            read_ahead: c.read_ahead.load(Ordering::Relaxed),
            read_ahead_failed: c.read_ahead_failed.load(Ordering::Relaxed),
            read_ahead_evicted_unused: c.read_ahead_evicted_unused.load(Ordering::Relaxed),
            write_batches: c.write_batches.load(Ordering::Relaxed),
            dirty_pages: u64::from(inner.flush.len()),
            bytes_used: u64::from(frames) * cache.page_size_bytes as u64
                + u64::from(blocks) * cache.unit_size_bytes as u64,
            budget_bytes: cache.budget_bytes() as u64,
            lent_bytes: lent_bytes as u64,
            frame_count: u64::from(frames),
            block_count: u64::from(blocks),
            free_chunk_count: u64::from(inner.alloc.free_chunk_count()),
            chunks_prefaulted: cache.arena.prefaulted_chunks(),
            read_time_avg_ns: c.read_time_ns.load(Ordering::Relaxed) / reads.max(1),
            unzip_time_avg_ns: c.unzip_time_ns.load(Ordering::Relaxed) / unzip_ops.max(1),
            policy: inner.policy.status(),
            codec: cache.services.codec.counters(),
        }
    }
}

impl PoolStatus {
    /// Renders the status like InnoDB's `BUFFER POOL AND MEMORY` section.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "----------------------\nBUFFER POOL AND MEMORY\n----------------------"
        );
        let _ = writeln!(
            out,
            "Buffer pool size (bytes) {} (lent {})",
            self.budget_bytes, self.lent_bytes
        );
        let _ = writeln!(out, "Bytes used       {}", self.bytes_used);
        let _ = writeln!(
            out,
            "Free chunks      {} (prefaulted {})",
            self.free_chunk_count, self.chunks_prefaulted
        );
        let _ = writeln!(out, "Frames           {}", self.frame_count);
        let _ = writeln!(out, "Blocks           {}", self.block_count);
        let _ = writeln!(out, "Modified db pages {}", self.dirty_pages);
        let _ = writeln!(
            out,
            "Pages made young {}, not young {}",
            self.pages_made_young, self.pages_not_made_young
        );
        let _ = writeln!(
            out,
            "Pages read {} ({} from the OS cache), created {}, written {}",
            self.pages_read, self.os_cache_reads, self.pages_created, self.pages_written
        );
        let _ = writeln!(
            out,
            "Pages read ahead {}, evicted without access {}, failed {}; write batches {}",
            self.read_ahead,
            self.read_ahead_evicted_unused,
            self.read_ahead_failed,
            self.write_batches
        );
        let _ = writeln!(
            out,
            "Frames dropped {}, blocks dropped {} (reloaded {}), pages evicted {}, compactions {}",
            self.frames_dropped,
            self.blocks_dropped,
            self.blocks_reloaded,
            self.pages_evicted,
            self.compactions
        );
        let _ = writeln!(
            out,
            "Buffer pool hit rate {} / 1000",
            self.hit_rate_per_mille
        );
        let _ = writeln!(
            out,
            "LRU len: {}, unzip_LRU len: {}, old LRU len: {}",
            self.lru_len, self.unzip_lru_len, self.old_lru_len
        );
        let _ = writeln!(
            out,
            "I/O sum[{}]:cur[{}], unzip sum[{}]:cur[{}]",
            self.io_sum, self.io_cur, self.unzip_sum, self.unzip_cur
        );
        let p = &self.policy;
        let _ = writeln!(
            out,
            "Policy: unzip {} ns, miss {} ns, frame target {}/1000, ghost hits frames {} blocks {}",
            p.unzip_cost_ns,
            p.miss_cost_ns,
            p.target_frame_share_per_mille,
            p.ghost_frame_hits,
            p.ghost_block_hits
        );
        let z = &self.codec;
        let _ = writeln!(
            out,
            "Compression ({} B blocks): compress ops {}, ok {}, time {} us; sparse {}, guessed unfit {}; uncompress ops {}, time {} us",
            z.block_size_bytes,
            z.compress_ops,
            z.compress_ops_ok,
            z.compress_time_us,
            z.sparse_ops,
            z.guessed_unfit,
            z.uncompress_ops,
            z.uncompress_time_us
        );
        let _ = writeln!(
            out,
            "Recompressions {}, compression failures {}, write-ahead waits {}",
            self.recompressions, self.compression_failures, self.write_ahead_waits
        );
        out
    }
}

/// One page of the LRU, as [`BufferPool::lru_snapshot`](crate::BufferPool::lru_snapshot) reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LruEntry {
    /// The page.
    pub page_id: barracuda_base::PageId,
    /// In the old sublist.
    pub old: bool,
    /// Has an uncompressed frame (on the unzip_LRU).
    pub has_frame: bool,
    /// Has its compressed block (false for an uncompressed pool, and for a
    /// clean page kept as its frame alone).
    pub has_block: bool,
    /// Has changes not yet written.
    pub dirty: bool,
    /// Fixed by at least one guard.
    pub pinned: bool,
}

impl LruEntry {
    /// The LRU of `cache` ([`crate::BufferPool::lru_snapshot`]).
    pub(crate) fn snapshot(cache: &Cache) -> Vec<LruEntry> {
        let inner = cache.inner.lock();
        inner
            .lru
            .list()
            .iter()
            .map(|d| {
                let desc = &cache.descs[d as usize];
                LruEntry {
                    page_id: desc.page_id(),
                    old: cache.old_flags.get(d),
                    has_frame: desc.frame_chunk() != crate::arena::NIL,
                    has_block: desc.block_slot() != crate::arena::NIL,
                    dirty: inner.dirty[d as usize].dirty,
                    pinned: desc.pins() != 0,
                }
            })
            .collect()
    }
}
