//! Compression counters per block size, like InnoDB's `INNODB_CMP` table.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use barracuda_base::BlockSize;
use serde::{Deserialize, Serialize};

/// Counters for one block size. Relaxed atomics: each counter is exact, the
/// set is not a consistent cut (as in InnoDB).
#[derive(Debug, Default)]
struct Row {
    compress_ops: AtomicU64,
    compress_ops_ok: AtomicU64,
    compress_time_ns: AtomicU64,
    sparse_ops: AtomicU64,
    sparse_time_ns: AtomicU64,
    guessed_unfit: AtomicU64,
    uncompress_ops: AtomicU64,
    uncompress_time_ns: AtomicU64,
}

/// Shared compression counters, one row per [`BlockSize`]. Cheap to update
/// from many threads: a few relaxed atomic adds per operation.
#[derive(Debug, Default)]
pub struct CompressionStats {
    rows: [Row; BlockSize::ALL.len()],
}

impl CompressionStats {
    /// Fresh counters, all zero.
    #[must_use]
    pub fn new() -> CompressionStats {
        CompressionStats::default()
    }

    /// Counts one compression attempt (`ok`: the page fit its block).
    pub fn record_compress(&self, block_size: BlockSize, ok: bool, elapsed: Duration) {
        let row = &self.rows[block_size.index()];
        row.compress_ops.fetch_add(1, Ordering::Relaxed);
        if ok {
            row.compress_ops_ok.fetch_add(1, Ordering::Relaxed);
        }
        row.compress_time_ns
            .fetch_add(duration_ns(elapsed), Ordering::Relaxed);
    }

    /// Counts one page stored sparse instead of compressed (it fit its
    /// block uncompressed): not a compression attempt.
    pub fn record_sparse(&self, block_size: BlockSize, elapsed: Duration) {
        let row = &self.rows[block_size.index()];
        row.sparse_ops.fetch_add(1, Ordering::Relaxed);
        row.sparse_time_ns
            .fetch_add(duration_ns(elapsed), Ordering::Relaxed);
    }

    /// Counts one page not compressed because a guess said it could not
    /// fit ([`crate::FitGuess`]): not a compression attempt.
    pub fn record_guessed(&self, block_size: BlockSize) {
        self.rows[block_size.index()]
            .guessed_unfit
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one decompression.
    pub fn record_uncompress(&self, block_size: BlockSize, elapsed: Duration) {
        let row = &self.rows[block_size.index()];
        row.uncompress_ops.fetch_add(1, Ordering::Relaxed);
        row.uncompress_time_ns
            .fetch_add(duration_ns(elapsed), Ordering::Relaxed);
    }

    /// A serializable copy of every row, in [`BlockSize::ALL`] order.
    #[must_use]
    pub fn snapshot(&self) -> CompressionStatsSnapshot {
        let rows = BlockSize::ALL
            .iter()
            .zip(&self.rows)
            .map(|(&block_size, row)| BlockSizeStats {
                block_size,
                compress_ops: row.compress_ops.load(Ordering::Relaxed),
                compress_ops_ok: row.compress_ops_ok.load(Ordering::Relaxed),
                compress_time_ns: row.compress_time_ns.load(Ordering::Relaxed),
                sparse_ops: row.sparse_ops.load(Ordering::Relaxed),
                sparse_time_ns: row.sparse_time_ns.load(Ordering::Relaxed),
                guessed_unfit: row.guessed_unfit.load(Ordering::Relaxed),
                uncompress_ops: row.uncompress_ops.load(Ordering::Relaxed),
                uncompress_time_ns: row.uncompress_time_ns.load(Ordering::Relaxed),
            })
            .collect();
        CompressionStatsSnapshot { rows }
    }
}

fn duration_ns(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}

/// One row of [`CompressionStatsSnapshot`], InnoDB's `INNODB_CMP` columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSizeStats {
    /// The block size the row counts.
    pub block_size: BlockSize,
    /// Compression attempts (`COMPRESS_OPS`).
    pub compress_ops: u64,
    /// Attempts whose result fit the block (`COMPRESS_OPS_OK`).
    pub compress_ops_ok: u64,
    /// Time spent compressing, nanoseconds (`COMPRESS_TIME`, which InnoDB
    /// gives in seconds).
    pub compress_time_ns: u64,
    /// Pages stored sparse, without their free space, because they fit
    /// their block uncompressed (no compression attempted; not in
    /// `compress_ops`).
    #[serde(default)]
    pub sparse_ops: u64,
    /// Time spent storing pages sparse, nanoseconds.
    #[serde(default)]
    pub sparse_time_ns: u64,
    /// Pages fuller than their block not compressed, because recent pages
    /// said compression could not make them fit (`FitGuess`); not in
    /// `compress_ops`.
    #[serde(default)]
    pub guessed_unfit: u64,
    /// Decompressions (`UNCOMPRESS_OPS`, sparse blocks included).
    pub uncompress_ops: u64,
    /// Time spent decompressing, nanoseconds (`UNCOMPRESS_TIME`).
    pub uncompress_time_ns: u64,
}

/// A point-in-time copy of [`CompressionStats`], serde-serializable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressionStatsSnapshot {
    /// One row per block size, in [`BlockSize::ALL`] order.
    pub rows: Vec<BlockSizeStats>,
}

impl CompressionStatsSnapshot {
    /// The row of `block_size`.
    #[must_use]
    pub fn row(&self, block_size: BlockSize) -> Option<&BlockSizeStats> {
        self.rows.iter().find(|row| row.block_size == block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_their_block_size_row() {
        let stats = CompressionStats::new();
        stats.record_compress(BlockSize::Kib8, true, Duration::from_nanos(100));
        stats.record_compress(BlockSize::Kib8, false, Duration::from_nanos(50));
        stats.record_uncompress(BlockSize::Kib4, Duration::from_nanos(7));
        let snap = stats.snapshot();
        let kib8 = snap.row(BlockSize::Kib8).unwrap();
        assert_eq!(
            (
                kib8.compress_ops,
                kib8.compress_ops_ok,
                kib8.compress_time_ns
            ),
            (2, 1, 150)
        );
        let kib4 = snap.row(BlockSize::Kib4).unwrap();
        assert_eq!(
            (
                kib4.uncompress_ops,
                kib4.uncompress_time_ns,
                kib4.compress_ops
            ),
            (1, 7, 0)
        );
        let json = serde_json::to_string(&snap).unwrap();
        let back: CompressionStatsSnapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, snap);
    }
}
