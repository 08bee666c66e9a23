//! The choice between dropping an uncompressed frame (keep the block) and
//! evicting a whole page, for both policies, with the counters they read.

use std::collections::{HashMap, VecDeque};

use barracuda_base::PageId;
use serde::{Deserialize, Serialize};

use crate::config::EvictionPolicy;

/// InnoDB's `BUF_LRU_STAT_N_INTERVAL`: the I/O and unzip averages cover 50
/// intervals.
pub const STAT_INTERVAL_COUNT: usize = 50;
/// InnoDB updates the LRU statistics once per second (`buf_LRU_stat_update`
/// from the master thread).
pub(crate) const STAT_INTERVAL_MS: u64 = 1000;
/// InnoDB's `BUF_LRU_IO_TO_UNZIP_FACTOR`: one I/O is taken to cost as much as
/// 50 decompressions.
pub const IO_TO_UNZIP_FACTOR: u64 = 50;
/// InnoDB never drops frames while the unzip_LRU is at most 10% of the LRU,
/// so hot decompressed pages stay.
pub const UNZIP_LRU_FLOOR_DIVISOR: u32 = 10;
/// Weight of a new sample in the cost averages (1/16: a few dozen samples
/// dominate, so the estimate follows a changing load within a second).
const COST_EWMA_WEIGHT: f64 = 1.0 / 16.0;
/// Cost estimates before the first measurement: the design's figures for a
/// zlib inflate of a 16 KiB page (~46 us) and a random O_DIRECT read (~75 us).
const UNZIP_COST_NS_INITIAL: f64 = 46_000.0;
const MISS_COST_NS_INITIAL: f64 = 75_000.0;
/// One ghost hit moves the target by at most this many frames, so one very
/// slow outlier I/O cannot swing the balance.
const TARGET_STEP_FRAMES_MAX: f64 = 8.0;
/// The cost-aware target starts at half the LRU with frames, between
/// InnoDB's two extremes (1:1 with free memory, the 10% floor under pressure).
const TARGET_SHARE_INITIAL: f64 = 0.5;
/// At this target (a frame for every page) the cost-aware policy keeps
/// clean pages as frames alone.
const TARGET_SHARE_FRAMES_ONLY: f64 = 1.0;
/// Frames alone are kept only after this long without a read of a
/// recently evicted page: one InnoDB statistics interval.
pub const FRAMES_ONLY_QUIET_MS: u64 = STAT_INTERVAL_MS;

/// What to free next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Victim {
    /// Drop the uncompressed frame of the unzip_LRU's tail page.
    Frame,
    /// Evict a whole clean page from the LRU's tail.
    Page,
}

/// I/O and unzip counts of one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntervalCounts {
    /// Pages read plus pages written.
    pub io: u64,
    /// Decompressions.
    pub unzip: u64,
}

/// InnoDB's `buf_LRU_stat_arr`: a ring of per-second counts.
pub(crate) struct LruStats {
    window: [IntervalCounts; STAT_INTERVAL_COUNT],
    window_index: usize,
    sum: IntervalCounts,
    cur: IntervalCounts,
    interval_start_ms: u64,
}

impl LruStats {
    pub(crate) fn new(now_ms: u64) -> Self {
        Self {
            window: [IntervalCounts::default(); STAT_INTERVAL_COUNT],
            window_index: 0,
            sum: IntervalCounts::default(),
            cur: IntervalCounts::default(),
            interval_start_ms: now_ms,
        }
    }

    /// Closes every interval that ended before `now_ms`.
    pub(crate) fn advance(&mut self, now_ms: u64) {
        let mut closed = 0;
        while now_ms >= self.interval_start_ms + STAT_INTERVAL_MS && closed <= STAT_INTERVAL_COUNT {
            let expired = self.window[self.window_index];
            self.sum.io = self.sum.io + self.cur.io - expired.io;
            self.sum.unzip = self.sum.unzip + self.cur.unzip - expired.unzip;
            self.window[self.window_index] = self.cur;
            self.window_index = (self.window_index + 1) % STAT_INTERVAL_COUNT;
            self.cur = IntervalCounts::default();
            self.interval_start_ms += STAT_INTERVAL_MS;
            closed += 1;
        }
        if closed > STAT_INTERVAL_COUNT {
            // Idle for longer than the window: everything has expired.
            *self = Self::new(now_ms);
        }
    }

    pub(crate) fn add_io(&mut self, count: u64) {
        self.cur.io += count;
    }

    pub(crate) fn add_unzip(&mut self) {
        self.cur.unzip += 1;
    }

    /// Sum over the window and the current interval.
    pub(crate) fn sum_and_cur(&self) -> (IntervalCounts, IntervalCounts) {
        (self.sum, self.cur)
    }

    /// InnoDB's formula: averages over the window plus the current interval.
    fn io_bound(&self) -> bool {
        let n = STAT_INTERVAL_COUNT as u64;
        let io_avg = self.sum.io / n + self.cur.io;
        let unzip_avg = self.sum.unzip / n + self.cur.unzip;
        unzip_avg <= io_avg * IO_TO_UNZIP_FACTOR
    }
}

/// A bounded FIFO set of recently dropped page ids (ARC's ghost lists).
struct Ghosts {
    order: VecDeque<(PageId, u64)>,
    members: HashMap<PageId, u64>,
    capacity: usize,
    sequence: u64,
}

impl Ghosts {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            order: VecDeque::with_capacity(capacity),
            members: HashMap::with_capacity(capacity),
            capacity,
            sequence: 0,
        }
    }

    pub(crate) fn insert(&mut self, page_id: PageId) {
        if self.capacity == 0 {
            return;
        }
        if self.order.len() == self.capacity
            && let Some((old, sequence)) = self.order.pop_front()
            && self.members.get(&old) == Some(&sequence)
        {
            self.members.remove(&old);
        }
        self.sequence += 1;
        self.order.push_back((page_id, self.sequence));
        self.members.insert(page_id, self.sequence);
    }

    /// Removes `page_id`, returning whether it was a ghost.
    pub(crate) fn take(&mut self, page_id: PageId) -> bool {
        self.members.remove(&page_id).is_some()
    }

    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }
}

/// An exponentially weighted moving average of a duration.
#[derive(Clone, Copy, Debug)]
struct Ewma {
    value_ns: f64,
}

impl Ewma {
    fn add(&mut self, sample_ns: f64) {
        self.value_ns += COST_EWMA_WEIGHT * (sample_ns - self.value_ns);
    }
}

/// State of the eviction policy, under the pool mutex.
pub(crate) struct PolicyState {
    policy: EvictionPolicy,
    unzip_cost: Ewma,
    miss_cost: Ewma,
    ghost_frames: Ghosts,
    ghost_blocks: Ghosts,
    /// Target share of LRU pages that keep a frame (cost-aware policy).
    target_share: f64,
    pub(crate) ghost_frame_hits: u64,
    pub(crate) ghost_block_hits: u64,
    /// Clock time of the last ghost block hit.
    ghost_block_hit_ms: Option<u64>,
}

/// What the cost-aware policy currently believes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyStatus {
    /// Average time of one decompression, ns.
    pub unzip_cost_ns: u64,
    /// Average time of one miss (read and verify), ns.
    pub miss_cost_ns: u64,
    /// Target share of LRU pages that keep a frame, per mille.
    pub target_frame_share_per_mille: u32,
    /// Entries in the dropped-frame ghost list.
    pub ghost_frames_len: u64,
    /// Entries in the evicted-block ghost list.
    pub ghost_blocks_len: u64,
    /// Unzips of a page whose frame had recently been dropped.
    pub ghost_frame_hits: u64,
    /// Misses of a page whose block had recently been evicted.
    pub ghost_block_hits: u64,
}

impl PolicyState {
    /// `ghost_frames_capacity` frames and `ghost_blocks_capacity` blocks
    /// should cover the same memory (one budget each), so that a ghost hit
    /// on either side stands for the same number of bytes.
    pub(crate) fn new(
        policy: EvictionPolicy,
        ghost_frames_capacity: usize,
        ghost_blocks_capacity: usize,
    ) -> Self {
        Self {
            policy,
            unzip_cost: Ewma {
                value_ns: UNZIP_COST_NS_INITIAL,
            },
            miss_cost: Ewma {
                value_ns: MISS_COST_NS_INITIAL,
            },
            ghost_frames: Ghosts::new(ghost_frames_capacity),
            ghost_blocks: Ghosts::new(ghost_blocks_capacity),
            target_share: TARGET_SHARE_INITIAL,
            ghost_frame_hits: 0,
            ghost_block_hits: 0,
            ghost_block_hit_ms: None,
        }
    }

    /// Hits on the evicted-block ghost list so far, and its length.
    pub(crate) fn ghost_blocks_sample(&self) -> (u64, u64) {
        (self.ghost_block_hits, self.ghost_blocks.len() as u64)
    }

    /// The minimum unzip_LRU length under which frames are never dropped.
    pub(crate) fn floor_len(lru_len: u32) -> u32 {
        lru_len / UNZIP_LRU_FLOOR_DIVISOR
    }

    /// Picks what to free. `eviction_started` is InnoDB's
    /// `freed_page_clock != 0`.
    pub(crate) fn choose(
        &self,
        lru_len: u32,
        unzip_len: u32,
        eviction_started: bool,
        stats: &LruStats,
    ) -> Victim {
        if unzip_len == 0 || unzip_len <= Self::floor_len(lru_len) {
            return Victim::Page;
        }
        match self.policy {
            EvictionPolicy::InnoDb => {
                // "If eviction hasn't started yet, we assume by default that a
                // workload is disk bound."
                if !eviction_started || stats.io_bound() {
                    Victim::Frame
                } else {
                    Victim::Page
                }
            }
            EvictionPolicy::CostAware => {
                let target_len = self.target_share * f64::from(lru_len);
                if f64::from(unzip_len) > target_len {
                    Victim::Frame
                } else {
                    Victim::Page
                }
            }
        }
    }

    /// Whether a clean page should be kept as its frame alone, its block
    /// dropped (the file holds it). Never under InnoDB's rule. Under the
    /// cost-aware policy: when every cached page would fit the budget as a
    /// frame alone (`frames_fit`), so that no page needs decompressing at
    /// all, and no recently evicted page was read again for
    /// [`FRAMES_ONLY_QUIET_MS`] (such a read says the working set is larger
    /// than the frames: blocks, twice as many, may hold it); or when the
    /// target wants a frame for every page (decompressing costs more than
    /// reading), where a block beside a frame is wasted memory.
    pub(crate) fn frames_only(&self, frames_fit: bool, now_ms: u64) -> bool {
        match self.policy {
            EvictionPolicy::InnoDb => false,
            EvictionPolicy::CostAware => {
                let quiet = self
                    .ghost_block_hit_ms
                    .is_none_or(|hit_ms| now_ms >= hit_ms + FRAMES_ONLY_QUIET_MS);
                (frames_fit && quiet) || self.target_share >= TARGET_SHARE_FRAMES_ONLY
            }
        }
    }

    /// A frame was dropped; remember the page.
    pub(crate) fn frame_dropped(&mut self, page_id: PageId) {
        self.ghost_frames.insert(page_id);
    }

    /// A whole page was evicted; remember it.
    pub(crate) fn page_evicted(&mut self, page_id: PageId) {
        self.ghost_frames.take(page_id);
        self.ghost_blocks.insert(page_id);
    }

    /// A cached block was decompressed in `cost_ns`. `for_hit` is false for
    /// the decompression that completes a miss.
    pub(crate) fn unzipped(&mut self, page_id: PageId, cost_ns: f64, for_hit: bool, lru_len: u32) {
        self.unzip_cost.add(cost_ns);
        if for_hit && self.ghost_frames.take(page_id) {
            // One more frame would have saved this unzip: raise the target.
            self.ghost_frame_hits += 1;
            self.move_target(self.unzip_cost.value_ns, lru_len);
        }
    }

    /// A page was read from the file in `cost_ns`.
    pub(crate) fn missed(&mut self, page_id: PageId, cost_ns: f64, lru_len: u32, now_ms: u64) {
        self.miss_cost.add(cost_ns);
        self.ghost_frames.take(page_id);
        if self.ghost_blocks.take(page_id) {
            // One more block would have saved this read: lower the target.
            self.ghost_block_hits += 1;
            self.ghost_block_hit_ms = Some(now_ms);
            self.move_target(-self.miss_cost.value_ns, lru_len);
        }
    }

    /// Moves the target by `saved_ns` expressed in frames: a step of the
    /// mean of the two costs is one frame.
    fn move_target(&mut self, saved_ns: f64, lru_len: u32) {
        let unit_ns = (self.unzip_cost.value_ns + self.miss_cost.value_ns) / 2.0;
        let step_frames =
            (saved_ns / unit_ns).clamp(-TARGET_STEP_FRAMES_MAX, TARGET_STEP_FRAMES_MAX);
        let lru_len = f64::from(lru_len.max(1));
        let floor = 1.0 / f64::from(UNZIP_LRU_FLOOR_DIVISOR);
        self.target_share = (self.target_share + step_frames / lru_len).clamp(floor, 1.0);
    }

    pub(crate) fn status(&self) -> PolicyStatus {
        PolicyStatus {
            unzip_cost_ns: self.unzip_cost.value_ns as u64,
            miss_cost_ns: self.miss_cost.value_ns as u64,
            target_frame_share_per_mille: (self.target_share * 1000.0) as u32,
            ghost_frames_len: self.ghost_frames.len() as u64,
            ghost_blocks_len: self.ghost_blocks.len() as u64,
            ghost_frame_hits: self.ghost_frame_hits,
            ghost_block_hits: self.ghost_block_hits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn innodb_rule_follows_the_window() {
        let mut stats = LruStats::new(0);
        let state = PolicyState::new(EvictionPolicy::InnoDb, 4, 8);
        // Below the floor: always the LRU.
        assert_eq!(state.choose(100, 10, true, &stats), Victim::Page);
        // Before eviction started: frames.
        assert_eq!(state.choose(100, 50, false, &stats), Victim::Frame);
        // 1 I/O, 51 unzips in the current interval: CPU-bound.
        stats.add_io(1);
        for _ in 0..51 {
            stats.add_unzip();
        }
        assert_eq!(state.choose(100, 50, true, &stats), Victim::Page);
        stats.add_io(1);
        assert_eq!(state.choose(100, 50, true, &stats), Victim::Frame);
        // After the window expires, everything is forgotten.
        stats.advance(1000 * 60);
        assert_eq!(stats.sum_and_cur().0, IntervalCounts::default());
    }

    #[test]
    fn cost_aware_moves_toward_the_side_that_would_have_saved_time() {
        let mut state = PolicyState::new(EvictionPolicy::CostAware, 16, 32);
        let stats = LruStats::new(0);
        let before = state.target_share;
        state.frame_dropped(PageId(1));
        state.unzipped(PageId(1), 50_000.0, true, 100);
        assert!(state.target_share > before);
        let raised = state.target_share;
        state.page_evicted(PageId(2));
        state.missed(PageId(2), 100_000.0, 100, 1);
        assert!(state.target_share < raised);
        // With the share at 10% the floor decides.
        state.target_share = 0.1;
        assert_eq!(state.choose(100, 11, true, &stats), Victim::Frame);
        assert_eq!(state.choose(100, 10, true, &stats), Victim::Page);
    }
}
