//! The weighing of the cache against the buffer pool
//! ([`RecordCache::rebalance`]): see the module documentation.

use std::sync::atomic::Ordering;

use super::{ENABLE_FACTOR, KEEP_FACTOR, PROBE_SHARD, RecordCache};

/// What [`RecordCache::rebalance`] remembers between windows.
#[derive(Default)]
pub(super) struct Balance {
    /// The cache's gets and the pool's ghost hits at the last window's end.
    pub(super) last: Option<(u64, u64)>,
    pub(super) rebalances: u64,
    pub(super) releases: u64,
    pub(super) probe_hits_per_mille: u64,
    pub(super) pool_gain_per_mille: u64,
}

/// The pool's side of [`RecordCache::rebalance`]: its evicted-block ghost
/// list's hits so far and the bytes it stands for
/// (`barracuda_pool::GhostBlocks`).
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolGhosts {
    /// Hits so far.
    pub hits: u64,
    /// Bytes the entries stand for.
    pub bytes: u64,
}

impl RecordCache {
    /// Weighs the cache against the pool once a window of the probe
    /// shard's gets is complete (a cheap check otherwise): see the module
    /// documentation. `ghosts` reads the pool's evicted-block ghost list;
    /// `give_back` returns the bytes of a released shard to the pool.
    /// Returns whether the other shards hold records, if it weighed.
    pub fn rebalance(
        &self,
        ghosts: impl FnOnce() -> PoolGhosts,
        give_back: impl FnMut(usize),
    ) -> Option<bool> {
        if !self.due.load(Ordering::Relaxed) || !self.due.swap(false, Ordering::AcqRel) {
            return None;
        }
        let gets = self.probe_gets.swap(0, Ordering::Relaxed);
        let hits = self.probe_hits.swap(0, Ordering::Relaxed).min(gets);
        let probe_hits = if gets == 0 {
            0.0
        } else {
            hits as f64 / gets as f64
        };
        Some(self.weigh(probe_hits, ghosts(), give_back))
    }

    /// One weighing of [`RecordCache::rebalance`], with the probe's hit
    /// ratio given: public for the fuzz target and tests.
    pub fn weigh(&self, probe_hits: f64, ghosts: PoolGhosts, give_back: impl FnMut(usize)) -> bool {
        let on = self.others.load(Ordering::Relaxed);
        let gets = self.hits.load(Ordering::Relaxed) + self.misses.load(Ordering::Relaxed);
        let mut balance = self.balance.lock();
        balance.rebalances += 1;
        let Some((last_gets, last_ghost_hits)) = balance.last.replace((gets, ghosts.hits)) else {
            // The first window only sets where the pool's counters start.
            return on;
        };
        let window_gets = gets.saturating_sub(last_gets);
        let window_ghost_hits = ghosts.hits.saturating_sub(last_ghost_hits);
        let others_bytes = (self.budget_bytes - self.shard_bytes) as f64;
        // The gets the others' bytes would catch as blocks: the ghost hits
        // per get, over the share of the ghosts' bytes they make.
        let pool_gain = if window_gets == 0 || ghosts.bytes == 0 {
            0.0
        } else {
            window_ghost_hits as f64 / window_gets as f64
                * (others_bytes / ghosts.bytes as f64).min(1.0)
        };
        balance.probe_hits_per_mille = (probe_hits * 1000.0) as u64;
        balance.pool_gain_per_mille = (pool_gain * 1000.0) as u64;
        let want = if on {
            probe_hits >= KEEP_FACTOR * pool_gain
        } else {
            probe_hits >= ENABLE_FACTOR * pool_gain
        };
        if want != on {
            self.others.store(want, Ordering::Relaxed);
            if !want {
                balance.releases += 1;
                drop(balance);
                self.release_others(give_back);
            }
        }
        want
    }

    /// Empties the shards besides the probe and gives their memory back.
    fn release_others(&self, mut give_back: impl FnMut(usize)) {
        let _allocating = self.allocating.lock();
        for (index, shard) in self.shards.iter().enumerate() {
            if index == PROBE_SHARD {
                continue;
            }
            let ring = {
                let mut shard = shard.lock();
                if shard.ring.is_empty() {
                    continue;
                }
                shard.release()
            };
            drop(ring);
            self.allocated_shards.fetch_sub(1, Ordering::Relaxed);
            give_back(self.shard_bytes);
        }
    }
}
