//! The record cache's counters and its invariant check.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::RecordCache;

/// Counters of a tree's record cache.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct RecordCacheStatus {
    /// The cache's budget, bytes (0: no record cache).
    pub budget_bytes: u64,
    /// Of the budget, the bytes its shards took from the buffer pool so
    /// far (each at its first fill).
    pub allocated_bytes: u64,
    /// Fills dropped because the pool could not lend their shard's memory.
    pub allocations_refused: u64,
    /// Bytes of its rings that records (live or not yet reclaimed) take.
    pub bytes_used: u64,
    /// Records held.
    pub entries: u64,
    /// Gets answered from the cache.
    pub hits: u64,
    /// Gets that read the tree.
    pub misses: u64,
    /// Records added after a miss.
    pub fills: u64,
    /// Fills refused because a write ran meanwhile.
    pub fills_refused: u64,
    /// Fills not admitted: the record was read less often lately than the
    /// one it would evict (TinyLFU).
    pub fills_not_admitted: u64,
    /// Records evicted to make room.
    pub evictions: u64,
    /// Referenced records moved to the head of the ring instead.
    pub reinsertions: u64,
    /// Records removed by writes.
    pub invalidations: u64,
    /// Whether the shards besides the probe hold records now (the cache
    /// weighs them against the pool in windows of probe gets).
    pub others_enabled: bool,
    /// Windows the cache weighed its shards against the pool.
    pub rebalances: u64,
    /// Times it gave the other shards' memory back to the pool.
    pub releases: u64,
    /// The last window's probe hit ratio, per mille of its gets.
    pub probe_hits_per_mille: u64,
    /// The last window's estimate of the gets the other shards' bytes would
    /// catch as pool, per mille of all gets.
    pub pool_gain_per_mille: u64,
}

impl RecordCache {
    /// Counters.
    pub fn status(&self) -> RecordCacheStatus {
        let mut status = RecordCacheStatus {
            budget_bytes: self.budget_bytes as u64,
            allocated_bytes: self.allocated_bytes() as u64,
            allocations_refused: self.allocations_refused.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            fills_refused: self.fills_refused.load(Ordering::Relaxed),
            others_enabled: self.others.load(Ordering::Relaxed),
            ..RecordCacheStatus::default()
        };
        {
            let balance = self.balance.lock();
            status.rebalances = balance.rebalances;
            status.releases = balance.releases;
            status.probe_hits_per_mille = balance.probe_hits_per_mille;
            status.pool_gain_per_mille = balance.pool_gain_per_mille;
        }
        for shard in self.shards.iter() {
            let shard = shard.lock();
            status.bytes_used += shard.used as u64;
            status.entries += shard.index.len() as u64;
            status.fills += shard.fills;
            status.fills_not_admitted += shard.fills_not_admitted;
            status.evictions += shard.evictions;
            status.reinsertions += shard.reinsertions;
            status.invalidations += shard.invalidations;
        }
        status
    }

    /// Checks every shard: walking its ring from the tail reaches the head
    /// over `used` bytes; every live record is indexed under its key's hash
    /// and every index entry names a live record. Panics otherwise.
    #[cfg(any(test, feature = "testing"))]
    pub fn check_invariants(&self) {
        use super::key_hash;
        use super::shard::{FLAG_LIVE, HEADER_BYTES, key_at, record_at};
        for shard in self.shards.iter() {
            let shard = shard.lock();
            let ring = &shard.ring;
            let mut at = shard.tail;
            let mut walked = 0;
            let mut live = 0;
            while walked < shard.used {
                let (header, len) = record_at(ring, at);
                if let Some(header) = header {
                    assert!(header.len >= HEADER_BYTES && header.len.is_multiple_of(8));
                    if header.flags & FLAG_LIVE != 0 {
                        live += 1;
                        let key = key_at(ring, at, &header);
                        assert_eq!(shard.index.get(&key_hash(key)), Some(&(at as u32)));
                    }
                }
                walked += len;
                at = (at + len) % ring.len();
            }
            assert_eq!(walked, shard.used, "the ring's walk overran");
            assert!(
                shard.used == 0 || at == shard.head,
                "the walk ends off the head"
            );
            assert_eq!(live, shard.index.len());
            assert!(shard.used <= self.ring_bytes);
        }
    }
}
