//! The record cache: single records of one tree (a key and its value, the
//! value compressed), beside the tree's buffer pool and out of the same
//! budget ([`crate::Options::record_cache_bytes`]).
//!
//! A buffer pool caches whole pages. Under a skewed point-read load most of
//! a cached page's records are cold neighbours of its one hot record, so a
//! byte of pool holds little of what is read, and a hit on a compressed
//! block decompresses the whole page. The record cache holds the hot
//! records alone, so a hit costs no page decompression and the pool's
//! memory goes to the pages that are read for more than one record
//! (docs/design.md, "Record cache").
//!
//! Gets look here first; a miss reads the tree and fills the cache. Scans
//! never use it. Eviction is FIFO with reinsertion (a CLOCK, see
//! [`Shard`]); once a shard is full, admission is TinyLFU's (a fill only
//! if its key was read more often lately than the record it would evict).
//!
//! **Memory.** The budget is taken from the tree's buffer pool a shard at a
//! time, as fills first reach each shard ([`RecordCache::fill`] lends it
//! with `BufferPool::lend_bytes`): until gets fill the cache, the pool has
//! the whole budget (a bulk load that makes no gets loses nothing to it).
//!
//! **Size.** The cache keeps its shards only while they serve more gets
//! than the same memory would as pool ([`RecordCache::rebalance`]). One
//! shard, the probe, always holds records: its keys are a 64th of all, so
//! its hit ratio is the whole cache's. Every window of the probe's gets the
//! cache compares it with what the pool's evicted-block ghost list says the
//! other shards' bytes would catch as blocks (`BufferPool::ghost_blocks`),
//! and gives those shards' memory back to the pool
//! (`BufferPool::return_bytes`) when the probe does not serve at least
//! [`KEEP_FACTOR`] times that; it takes them again, as fills come, once the
//! probe serves [`ENABLE_FACTOR`] times that. Under a skewed load the few
//! hot records serve far more gets per byte than pages that hold them among
//! cold neighbours; under a uniform one a record serves what its page
//! would, so the cache only doubles what the pool holds and spends a
//! compression per fill.
//!
//! **Consistency.** The cache never serves a value that a get could not
//! have read from the tree at that moment. Every write of the tree (under
//! the database's write mutex) makes the tree's write epoch odd
//! ([`RecordCache::begin_write`]), removes each key it writes before it
//! changes it, and makes the epoch even again when it is applied. A get
//! notes the epoch before it reads the tree and fills the cache only if the
//! epoch is the same, even, under the shard's lock: a value read before or
//! during a write is never cached after it, and one cached before a write
//! is removed by it before the tree changes.
//!
//! **Layout.** `shard.rs` holds a shard's ring of records and its
//! eviction, `sketch.rs` the admission's frequency sketch, `compress.rs`
//! the values' compression, `balance.rs` the weighing against the pool,
//! and `status.rs` the counters and the invariant check.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use balance::Balance;
pub use balance::PoolGhosts;
use compress::{compress, decompress};
use shard::{FLAG_LIVE, FLAG_REFERENCED, HEADER_BYTES, Header, Ring, Shard, set_flags};
pub use status::RecordCacheStatus;

mod balance;
mod compress;
mod shard;
mod sketch;
mod status;
#[cfg(test)]
mod tests;

/// Shards of one cache: a get locks one, for a lookup and a copy.
const SHARDS: usize = 64;

/// The shard that always holds records: its hit ratio stands for the
/// cache's ([`RecordCache::rebalance`]).
const PROBE_SHARD: usize = 0;

/// Gets of the probe shard per window of [`RecordCache::rebalance`]: about
/// 32,000 gets of the tree.
const PROBE_WINDOW_GETS: u64 = 512;

/// The other shards are taken again once the probe serves this many times
/// the gets their memory would catch as pool (a served get may also have
/// been a pool hit, and a fill costs a compression).
pub const ENABLE_FACTOR: f64 = 2.0;

/// ... and given back once it serves fewer than this many times those.
pub const KEEP_FACTOR: f64 = 1.25;

/// Bytes of a shard's index per record, counted against the budget: the
/// hash table's slot (hash and offset, 16 bytes) and control byte at a
/// load of one half, and the frequency sketch's counters (four bytes).
/// At its lowest load (seven sixteenths, just after it grows) the table
/// takes 39 bytes a record, so a shard of the smallest planned records
/// may exceed its budget by about 1%.
const INDEX_BYTES_PER_RECORD: usize = 40;

/// The smallest record a shard's budget is planned for (its index): a
/// header, a short key and a short value.
const RECORD_BYTES_PLANNED_MIN: usize = 256;

/// The record cache of one tree. `Send + Sync`. Public only through
/// [`crate::testing`], for the fuzz target.
pub struct RecordCache {
    shards: Box<[Mutex<Shard>]>,
    ring_bytes: usize,
    budget_bytes: usize,
    /// A shard's part of the budget: its ring and index.
    shard_bytes: usize,
    /// Held while a shard's memory is lent and allocated, and by a
    /// compaction that moves the lent memory to a new pool
    /// ([`RecordCache::hold_allocations`]); never while a shard is locked.
    allocating: Mutex<()>,
    /// Shards whose ring is allocated.
    allocated_shards: AtomicU64,
    /// Fills dropped because their shard could not get its memory.
    allocations_refused: AtomicU64,
    /// Odd while a write of the tree is applied (see the module
    /// documentation).
    epoch: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    fills_refused: AtomicU64,
    /// Whether the shards besides the probe may hold records.
    others: AtomicBool,
    /// The probe's gets and hits in the current window.
    probe_gets: AtomicU64,
    probe_hits: AtomicU64,
    /// The window is complete: the next [`RecordCache::rebalance`] weighs.
    due: AtomicBool,
    /// The weighing's state.
    balance: Mutex<Balance>,
}

/// A 64-bit hash of a key (FxHash's multiply-rotate over 8-byte words,
/// then a final mix): the index's key, and its top bits pick the shard.
fn key_hash(key: &[u8]) -> u64 {
    let mut hash = key.len() as u64;
    for chunk in key.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        hash = (hash.rotate_left(5) ^ u64::from_le_bytes(word))
            .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    // The multiply leaves the low bits weak and the table uses them.
    (hash ^ (hash >> 29)).wrapping_mul(0xbf_58_47_6d_1c_e4_e5_b9) ^ (hash >> 32)
}

impl RecordCache {
    /// A cache of `budget_bytes`, or `None` for 0 (no record cache).
    pub fn new(budget_bytes: usize) -> Option<RecordCache> {
        if budget_bytes == 0 {
            return None;
        }
        // Each shard's ring, and its index planned for the smallest
        // records: their sum is the budget.
        let shard_bytes = budget_bytes / SHARDS;
        let ring_bytes = (shard_bytes * RECORD_BYTES_PLANNED_MIN
            / (RECORD_BYTES_PLANNED_MIN + INDEX_BYTES_PER_RECORD))
            / 8
            * 8;
        Some(RecordCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            ring_bytes,
            budget_bytes,
            shard_bytes,
            allocating: Mutex::new(()),
            allocated_shards: AtomicU64::new(0),
            allocations_refused: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            fills_refused: AtomicU64::new(0),
            others: AtomicBool::new(true),
            probe_gets: AtomicU64::new(0),
            probe_hits: AtomicU64::new(0),
            due: AtomicBool::new(true),
            balance: Mutex::new(Balance::default()),
        })
    }

    fn shard_index(hash: u64) -> usize {
        (hash >> 58) as usize % SHARDS
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        &self.shards[Self::shard_index(hash)]
    }

    /// Whether the shard of `hash` may hold records now.
    fn in_use(&self, hash: u64) -> bool {
        Self::shard_index(hash) == PROBE_SHARD || self.others.load(Ordering::Relaxed)
    }

    /// Copies the value of `key` into `value` (cleared first) if cached.
    pub fn get_into(&self, key: &[u8], value: &mut Vec<u8>) -> bool {
        let hash = key_hash(key);
        if !self.in_use(hash) {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut shard = self.shard(hash).lock();
        shard.sketch.record(self.ring_bytes, hash);
        let found = shard.find(hash, key).is_some_and(|at| {
            set_flags(&mut shard.ring, at, FLAG_REFERENCED, 0);
            let header = Header::read(&shard.ring, at);
            let from = at + HEADER_BYTES + header.key_len;
            let stored = &shard.ring[from..from + header.stored_len];
            if header.stored_len == header.value_len {
                value.clear();
                value.extend_from_slice(stored);
                true
            } else {
                decompress(stored, header.value_len, value)
            }
        });
        drop(shard);
        let counter = if found { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        if Self::shard_index(hash) == PROBE_SHARD {
            if found {
                self.probe_hits.fetch_add(1, Ordering::Relaxed);
            }
            if self.probe_gets.fetch_add(1, Ordering::Relaxed) + 1 >= PROBE_WINDOW_GETS {
                self.due.store(true, Ordering::Relaxed);
            }
        }
        found
    }

    /// The epoch to pass to [`RecordCache::fill`], read before the tree.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Adds `key` with `value`, read from the tree after [`RecordCache::epoch`]
    /// returned `epoch`, unless a write began since (or was running then).
    /// The first fill of a shard allocates its ring after `lend` agreed to
    /// take the shard's part of the budget out of the pool (called with no
    /// shard locked); if it refuses, the fill is dropped.
    pub fn fill(&self, epoch: u64, key: &[u8], value: &[u8], lend: impl FnOnce(usize) -> bool) {
        if key.len() > usize::from(u16::MAX)
            || Header::record_len(key.len(), value.len()) > self.ring_bytes / 4
        {
            return;
        }
        let hash = key_hash(key);
        if !self.in_use(hash) {
            return;
        }
        let (admitted, allocated) = {
            let mut shard = self.shard(hash).lock();
            let admitted = shard.admit(hash, Header::record_len(key.len(), value.len()));
            (admitted, !shard.ring.is_empty())
        };
        if !admitted || !allocated && !self.allocate(hash, lend) {
            return;
        }
        // Compressed outside the shard's lock.
        let compressed = compress(value);
        let stored = compressed.as_deref().unwrap_or(value);
        let len = Header::record_len(key.len(), stored.len());
        let mut shard = self.shard(hash).lock();
        if !epoch.is_multiple_of(2) || self.epoch.load(Ordering::SeqCst) != epoch {
            drop(shard);
            self.fills_refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if shard.ring.is_empty() {
            // Given back to the pool meanwhile.
            return;
        }
        let header = Header {
            len,
            value_len: value.len(),
            stored_len: stored.len(),
            key_len: key.len(),
            flags: FLAG_LIVE,
        };
        shard.insert(hash, &header, key, stored);
    }

    /// Allocates the ring of the shard of `hash` if `lend` takes its memory
    /// out of the pool. Returns whether the shard has its ring.
    fn allocate(&self, hash: u64, lend: impl FnOnce(usize) -> bool) -> bool {
        let _allocating = self.allocating.lock();
        if !self.shard(hash).lock().ring.is_empty() {
            return true;
        }
        // Checked under the allocation lock, which a release takes after
        // it clears the flag: no shard it released is taken again.
        if !self.in_use(hash) {
            return false;
        }
        // The mapping first: a ring the kernel refuses asks the pool for
        // nothing.
        let Some(ring) = Ring::new(self.ring_bytes) else {
            self.allocations_refused.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        if !lend(self.shard_bytes) {
            self.allocations_refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.shard(hash).lock().ring = ring;
        self.allocated_shards.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Bytes of the budget the allocated shards hold: what was lent out of
    /// the pool.
    pub fn allocated_bytes(&self) -> usize {
        self.allocated_shards.load(Ordering::Relaxed) as usize * self.shard_bytes
    }

    /// Keeps shards from being allocated while the guard lives, so that
    /// [`RecordCache::allocated_bytes`] stays what it was (a compaction
    /// lends it to the new pool before readers move to it).
    pub(crate) fn hold_allocations(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.allocating.lock()
    }

    /// Starts a write of the tree: no get fills the cache until the
    /// returned guard is dropped, after the write is applied.
    pub fn begin_write(&self) -> WriteEpoch<'_> {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        WriteEpoch(self)
    }

    /// Removes `key` (a write is about to change it).
    pub fn remove(&self, _write: &WriteEpoch<'_>, key: &[u8]) {
        let hash = key_hash(key);
        let mut shard = self.shard(hash).lock();
        if let Some(at) = shard.find(hash, key) {
            shard.index.remove(&hash);
            set_flags(&mut shard.ring, at, 0, FLAG_LIVE);
            shard.invalidations += 1;
        }
    }
}

/// An odd epoch of a [`RecordCache`]: a write of its tree is applied.
pub struct WriteEpoch<'a>(&'a RecordCache);

impl Drop for WriteEpoch<'_> {
    fn drop(&mut self) {
        self.0.epoch.fetch_add(1, Ordering::SeqCst);
    }
}
