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

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::Serialize;

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

/// A value is kept compressed only if that saves at least an eighth.
const COMPRESSED_SHARE_MAX_EIGHTHS: usize = 7;

/// zstd's fastest level: a fill happens on a miss, next to a disk read.
const ZSTD_LEVEL: i32 = 1;

/// Bytes of a record's header in a shard's ring (see [`Shard`]).
const HEADER_BYTES: usize = 16;

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

/// A shard's frequency sketch has this many counters per record its ring
/// holds when full of records of the planned size, and halves them all
/// after ten gets per record (TinyLFU's sample).
const SKETCH_COUNTERS_PER_RECORD: usize = 4;
const SKETCH_SAMPLE_PER_RECORD: usize = 10;

/// Header flags.
const FLAG_LIVE: u8 = 1;
const FLAG_REFERENCED: u8 = 2;
const FLAG_PADDING: u8 = 4;

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
    /// Whether the shards besides the probe hold records now
    /// ([`RecordCache::rebalance`]).
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

/// What [`RecordCache::rebalance`] remembers between windows.
#[derive(Default)]
struct Balance {
    /// The cache's gets and the pool's ghost hits at the last window's end.
    last: Option<(u64, u64)>,
    rebalances: u64,
    releases: u64,
    probe_hits_per_mille: u64,
    pool_gain_per_mille: u64,
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

/// One shard: its records one after another in a ring of bytes, allocated
/// at its first fill, so that the cache's memory is its budget whatever the
/// records' sizes (an allocation per record left the memory of 16 reading
/// threads' allocator arenas at twice the budget); and an index from each
/// key's hash to its record's offset.
///
/// A record: a header (`len` u32: the record's bytes, a multiple of 8;
/// `value_len` u32; `stored_len` u32: the value's bytes as stored, zstd
/// when they differ; `key_len` u16; flags u8; one zero byte), the key, the
/// stored value, zeros to the next multiple of 8. A record that does not
/// fit before the ring's end leaves a padding record there (or, with less
/// room than a header, nothing) and goes to the start.
///
/// New records go at the head; room is made at the tail (FIFO with
/// reinsertion, a CLOCK): a record read since it was added or moved is
/// moved to the head with its bit cleared when the head has room for it
/// right there, and evicted otherwise.
#[derive(Default)]
struct Shard {
    ring: Ring,
    head: usize,
    tail: usize,
    /// Bytes from the tail to the head, padding and dead records included.
    used: usize,
    index: HashMap<u64, u32, HashOnly>,
    sketch: Sketch,
    scratch: Vec<u8>,
    fills: u64,
    fills_not_admitted: u64,
    evictions: u64,
    reinsertions: u64,
    invalidations: u64,
}

/// A shard's ring of bytes, in an anonymous mapping of its own, zeroed:
/// dropping it gives the memory back to the kernel at once. As a heap
/// allocation (about 110 KiB), a released shard's ring would stay with the
/// allocator while the pool used the same bytes again, and the process
/// would hold both. Empty
/// (`Default`) until allocated.
#[derive(Default)]
struct Ring(Option<memmap2::MmapMut>);

impl Ring {
    /// A zeroed ring of `len` bytes; `None` for 0 bytes (an empty ring is
    /// an unallocated one) or if the kernel refuses it.
    fn new(len: usize) -> Option<Ring> {
        if len == 0 {
            return None;
        }
        memmap2::MmapMut::map_anon(len)
            .ok()
            .map(|map| Ring(Some(map)))
    }
}

impl std::ops::Deref for Ring {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.as_deref().unwrap_or_default()
    }
}

impl std::ops::DerefMut for Ring {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().unwrap_or_default()
    }
}

/// The index's keys are hashes already.
#[derive(Clone, Copy, Default)]
struct HashOnly;

impl BuildHasher for HashOnly {
    type Hasher = PassThrough;
    fn build_hasher(&self) -> PassThrough {
        PassThrough(0)
    }
}

struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
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

/// A record's header, read from or written to the ring.
#[derive(Clone, Copy, Debug)]
struct Header {
    len: usize,
    value_len: usize,
    stored_len: usize,
    key_len: usize,
    flags: u8,
}

impl Header {
    fn read(ring: &[u8], at: usize) -> Header {
        let u32_at = |i: usize| {
            u32::from_le_bytes([
                ring[at + i],
                ring[at + i + 1],
                ring[at + i + 2],
                ring[at + i + 3],
            ]) as usize
        };
        Header {
            len: u32_at(0),
            value_len: u32_at(4),
            stored_len: u32_at(8),
            key_len: u16::from_le_bytes([ring[at + 12], ring[at + 13]]) as usize,
            flags: ring[at + 14],
        }
    }

    fn write(&self, ring: &mut [u8], at: usize) {
        let header = &mut ring[at..at + HEADER_BYTES];
        header[0..4].copy_from_slice(&(self.len as u32).to_le_bytes());
        header[4..8].copy_from_slice(&(self.value_len as u32).to_le_bytes());
        header[8..12].copy_from_slice(&(self.stored_len as u32).to_le_bytes());
        header[12..14].copy_from_slice(&(self.key_len as u16).to_le_bytes());
        header[14] = self.flags;
        header[15] = 0;
    }

    fn record_len(key_len: usize, stored_len: usize) -> usize {
        (HEADER_BYTES + key_len + stored_len).next_multiple_of(8)
    }
}

fn set_flags(ring: &mut [u8], at: usize, set: u8, clear: u8) {
    ring[at + 14] = (ring[at + 14] | set) & !clear;
}

/// What starts at `at` of a ring, and its bytes: a record (or a padding
/// record) with its header, or `None` for the rest of a ring too short for
/// a header (padding without one).
fn record_at(ring: &[u8], at: usize) -> (Option<Header>, usize) {
    if ring.len() - at < HEADER_BYTES {
        return (None, ring.len() - at);
    }
    let header = Header::read(ring, at);
    (Some(header), header.len)
}

/// The key of the record at `at`, whose header is `header`.
fn key_at<'r>(ring: &'r [u8], at: usize, header: &Header) -> &'r [u8] {
    &ring[at + HEADER_BYTES..at + HEADER_BYTES + header.key_len]
}

thread_local! {
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// `value` compressed, if that saves an eighth; `None` to keep it as is.
fn compress(value: &[u8]) -> Option<Vec<u8>> {
    if value.len() < 64 {
        return None;
    }
    COMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(zstd::bulk::Compressor::new(ZSTD_LEVEL).ok()?);
        }
        let compressed = cell.as_mut()?.compress(value).ok()?;
        (compressed.len() * 8 <= value.len() * COMPRESSED_SHARE_MAX_EIGHTHS).then_some(compressed)
    })
}

/// Decompresses `stored` (of a value of `value_len` bytes) into `out`.
fn decompress(stored: &[u8], value_len: usize, out: &mut Vec<u8>) -> bool {
    out.clear();
    out.reserve(value_len);
    DECOMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            match zstd::bulk::Decompressor::new() {
                Ok(decompressor) => *cell = Some(decompressor),
                Err(_) => return false,
            }
        }
        let Some(decompressor) = cell.as_mut() else {
            return false;
        };
        matches!(decompressor.decompress_to_buffer(stored, out), Ok(n) if n == value_len)
    })
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
    pub fn check_invariants(&self) {
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

impl Shard {
    /// Drops every record, the index and the frequency sketch (their
    /// memory goes back to the pool); returns the ring.
    fn release(&mut self) -> Ring {
        self.index = HashMap::default();
        self.sketch = Sketch::default();
        self.head = 0;
        self.tail = 0;
        self.used = 0;
        std::mem::take(&mut self.ring)
    }

    /// TinyLFU's admission: true if the ring has room for `len` more bytes
    /// without evicting, or if the record of `hash` was read more often
    /// lately than the record it would evict (or none is found among the
    /// first few from the tail).
    fn admit(&mut self, hash: u64, len: usize) -> bool {
        if self.used + len <= self.ring.len() || self.ring.is_empty() {
            return true;
        }
        let Some(victim) = self.tail_record_hash() else {
            return true;
        };
        let admitted = self.sketch.estimate(hash) > self.sketch.estimate(victim);
        if !admitted {
            self.fills_not_admitted += 1;
        }
        admitted
    }

    /// The hash of the record eviction would take next: the first live,
    /// unreferenced one from the tail, among the first few.
    fn tail_record_hash(&self) -> Option<u64> {
        let mut at = self.tail;
        let mut walked = 0;
        for _ in 0..8 {
            if walked >= self.used {
                return None;
            }
            let (header, len) = record_at(&self.ring, at);
            // A referenced record would move to the head, not go.
            if let Some(header) = header
                && header.flags & (FLAG_LIVE | FLAG_REFERENCED) == FLAG_LIVE
            {
                return Some(key_hash(key_at(&self.ring, at, &header)));
            }
            walked += len;
            at = (at + len) % self.ring.len();
        }
        None
    }

    /// The offset of `key`'s live record, if indexed.
    fn find(&self, hash: u64, key: &[u8]) -> Option<usize> {
        let at = *self.index.get(&hash)? as usize;
        let header = Header::read(&self.ring, at);
        (header.flags & FLAG_LIVE != 0 && key_at(&self.ring, at, &header) == key).then_some(at)
    }

    /// Appends a record (replacing any under the same hash), making room at
    /// the tail.
    fn insert(&mut self, hash: u64, header: &Header, key: &[u8], stored: &[u8]) {
        debug_assert!(!self.ring.is_empty(), "the ring is allocated first");
        if let Some(at) = self.index.remove(&hash) {
            set_flags(&mut self.ring, at as usize, 0, FLAG_LIVE);
        }
        let at = self.make_room(header.len);
        header.write(&mut self.ring, at);
        let key_at = at + HEADER_BYTES;
        self.ring[key_at..key_at + key.len()].copy_from_slice(key);
        let stored_at = key_at + key.len();
        self.ring[stored_at..stored_at + stored.len()].copy_from_slice(stored);
        self.ring[stored_at + stored.len()..at + header.len].fill(0);
        // A record that ends at the ring's end leaves the head at its start.
        self.head = (at + header.len) % self.ring.len();
        self.used += header.len;
        self.index.insert(hash, at as u32);
        self.fills += 1;
    }

    /// Room for `len` contiguous bytes at the head: returns where they
    /// start (the head, or the ring's start after a padding record). The
    /// caller writes them and moves the head past them.
    fn make_room(&mut self, len: usize) -> usize {
        loop {
            if self.used == 0 {
                self.head = 0;
                self.tail = 0;
            }
            let wrapped = self.head < self.tail || (self.used > 0 && self.head == self.tail);
            if wrapped {
                if self.tail - self.head >= len {
                    return self.head;
                }
            } else {
                if self.ring.len() - self.head >= len {
                    return self.head;
                }
                // Pad to the end and go on at the start.
                let rest = self.ring.len() - self.head;
                if rest >= HEADER_BYTES {
                    let padding = Header {
                        len: rest,
                        value_len: 0,
                        stored_len: 0,
                        key_len: 0,
                        flags: FLAG_PADDING,
                    };
                    padding.write(&mut self.ring, self.head);
                }
                self.used += rest;
                self.head = 0;
                continue;
            }
            self.reclaim_tail();
        }
    }

    /// Frees the record at the tail: skips padding and dead records,
    /// evicts an unreferenced one, and moves a referenced one to the head
    /// (bit cleared) if the head has room for it there, evicting it
    /// otherwise.
    fn reclaim_tail(&mut self) {
        let at = self.tail;
        let (header, len) = record_at(&self.ring, at);
        self.tail = (at + len) % self.ring.len();
        self.used -= len;
        let Some(header) = header.filter(|header| header.flags & FLAG_LIVE != 0) else {
            return;
        };
        let hash = key_hash(key_at(&self.ring, at, &header));
        let referenced = header.flags & FLAG_REFERENCED != 0;
        // After the tail moved, room at the head right there: the gap up
        // to the tail (wrapped), which now includes this record's bytes.
        let room = if self.used == 0 {
            self.ring.len()
        } else {
            self.tail.saturating_sub(self.head)
        };
        if referenced && room >= header.len && self.used > 0 {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.extend_from_slice(&self.ring[at..at + header.len]);
            let to = self.head;
            self.ring[to..to + header.len].copy_from_slice(&scratch);
            set_flags(&mut self.ring, to, 0, FLAG_REFERENCED);
            self.head = (to + header.len) % self.ring.len();
            self.used += header.len;
            self.index.insert(hash, to as u32);
            self.scratch = scratch;
            self.reinsertions += 1;
        } else {
            self.index.remove(&hash);
            self.evictions += 1;
        }
    }
}

/// How often each key was read lately: a count-min sketch of two rows in
/// one table of saturating 8-bit counters (conservative increments), all
/// halved after a sample of reads (TinyLFU's aging). Allocated at its
/// first read.
#[derive(Default)]
struct Sketch {
    counters: Vec<u8>,
    reads: usize,
    sample: usize,
}

impl Sketch {
    fn slots(&self, hash: u64) -> [usize; 2] {
        let mask = self.counters.len() - 1;
        [hash as usize & mask, (hash >> 32) as usize & mask]
    }

    /// Counts a read of the key of `hash`.
    fn record(&mut self, ring_bytes: usize, hash: u64) {
        if self.counters.is_empty() {
            let records = (ring_bytes / RECORD_BYTES_PLANNED_MIN).max(1);
            self.counters = vec![0; (records * SKETCH_COUNTERS_PER_RECORD).next_power_of_two()];
            self.sample = records * SKETCH_SAMPLE_PER_RECORD;
        }
        let [a, b] = self.slots(hash);
        let least = self.counters[a].min(self.counters[b]);
        for slot in [a, b] {
            if self.counters[slot] == least {
                self.counters[slot] = least.saturating_add(1);
            }
        }
        self.reads += 1;
        if self.reads >= self.sample {
            self.reads /= 2;
            for counter in &mut self.counters {
                *counter /= 2;
            }
        }
    }

    /// How often the key of `hash` was read lately (an overestimate).
    fn estimate(&self, hash: u64) -> u8 {
        if self.counters.is_empty() {
            return 0;
        }
        let [a, b] = self.slots(hash);
        self.counters[a].min(self.counters[b])
    }
}

/// An odd epoch of a [`RecordCache`]: a write of its tree is applied.
pub struct WriteEpoch<'a>(&'a RecordCache);

impl Drop for WriteEpoch<'_> {
    fn drop(&mut self) {
        self.0.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One step of the model test.
    #[derive(Clone, Debug)]
    enum Step {
        Get(u8),
        Fill(u8, u16),
        Write(u8),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => any::<u8>().prop_map(Step::Get),
            3 => (any::<u8>(), 0u16..600).prop_map(|(k, len)| Step::Fill(k, len)),
            1 => any::<u8>().prop_map(Step::Write),
        ]
    }

    proptest! {
        /// Against a model of the tree (key -> value, changed by writes):
        /// a get from the cache returns the model's value, whatever the
        /// fills, writes, evictions and record sizes; the rings stay whole.
        #[test]
        fn the_cache_never_serves_a_value_the_tree_does_not_hold(
            steps in proptest::collection::vec(step(), 1..400),
        ) {
            // Shards of under a KiB of ring: a few records fill one, so
            // evictions, reinsertions and wraps happen often.
            let cache = RecordCache::new(SHARDS * 1024).unwrap();
            let mut tree: HashMap<u8, (u8, u16)> = HashMap::new();
            let mut version = 0u8;
            let mut out = Vec::new();
            for step in steps {
                match step {
                    Step::Get(k) => {
                        if cache.get_into(&[k, 7, k], &mut out) {
                            let (v, len) = tree[&k];
                            prop_assert_eq!(&out, &value(v, len as usize));
                        }
                    }
                    Step::Fill(k, len) => {
                        let (v, len) = *tree.entry(k).or_insert((0, len));
                        let epoch = cache.epoch();
                        cache.fill(epoch, &[k, 7, k], &value(v, len as usize), |_| true);
                    }
                    Step::Write(k) => {
                        let epoch = cache.begin_write();
                        cache.remove(&epoch, &[k, 7, k]);
                        version = version.wrapping_add(1);
                        let len = tree.get(&k).map_or(100, |&(_, len)| len);
                        tree.insert(k, (version, len.wrapping_mul(7) % 600));
                    }
                }
                cache.check_invariants();
            }
        }
    }

    fn value(seed: u8, len: usize) -> Vec<u8> {
        // Half repeated, half varied: compresses to about half.
        (0..len)
            .map(|i| {
                if i % 2 == 0 {
                    seed
                } else {
                    (i * 7 + seed as usize) as u8
                }
            })
            .collect()
    }

    fn fill_now(cache: &RecordCache, key: &[u8], value: &[u8]) {
        cache.fill(cache.epoch(), key, value, |_| true);
    }

    #[test]
    fn a_filled_record_is_served_and_a_write_removes_it() {
        let cache = RecordCache::new(1 << 20).unwrap();
        let mut out = Vec::new();
        assert!(!cache.get_into(b"k", &mut out));
        let epoch = cache.epoch();
        cache.fill(epoch, b"k", &value(1, 1000), |_| true);
        assert!(cache.get_into(b"k", &mut out));
        assert_eq!(out, value(1, 1000));
        {
            let write = cache.begin_write();
            cache.remove(&write, b"k");
        }
        assert!(!cache.get_into(b"k", &mut out));
        let status = cache.status();
        assert_eq!(
            (status.hits, status.misses, status.invalidations),
            (1, 2, 1)
        );
        assert_eq!(status.fills, 1);
        cache.check_invariants();
    }

    #[test]
    fn a_fill_read_before_or_during_a_write_is_refused() {
        let cache = RecordCache::new(1 << 20).unwrap();
        let before = cache.epoch();
        let write = cache.begin_write();
        let during = cache.epoch();
        cache.fill(before, b"a", b"old", |_| true);
        cache.fill(during, b"a", b"old", |_| true);
        drop(write);
        cache.fill(during, b"a", b"old", |_| true);
        let mut out = Vec::new();
        assert!(!cache.get_into(b"a", &mut out));
        assert_eq!(cache.status().fills_refused, 3);
        fill_now(&cache, b"a", b"new");
        assert!(cache.get_into(b"a", &mut out));
        assert_eq!(out, b"new");
    }

    #[test]
    fn a_shard_takes_its_memory_at_its_first_fill_and_a_refused_loan_drops_the_fill() {
        let cache = RecordCache::new(SHARDS << 16).unwrap();
        let mut out = Vec::new();
        let lent = std::cell::Cell::new(0);
        let lend = |bytes| {
            lent.set(lent.get() + bytes);
            true
        };
        assert_eq!(cache.status().allocated_bytes, 0);
        cache.fill(cache.epoch(), b"a", b"1", |_| false);
        assert!(!cache.get_into(b"a", &mut out));
        assert_eq!(cache.status().allocations_refused, 1);
        assert_eq!(cache.status().allocated_bytes, 0);
        cache.fill(cache.epoch(), b"a", b"1", lend);
        cache.fill(cache.epoch(), b"a", b"2", |_| {
            panic!("lent twice for one shard")
        });
        assert!(cache.get_into(b"a", &mut out));
        assert_eq!(out, b"2");
        assert_eq!(lent.get(), 1 << 16);
        // Keys in every shard: the whole budget, lent once per shard.
        for k in 0..4096u32 {
            cache.fill(cache.epoch(), &k.to_le_bytes(), b"v", lend);
        }
        assert_eq!(lent.get(), SHARDS << 16);
        assert_eq!(cache.status().allocated_bytes, (SHARDS << 16) as u64);
        cache.check_invariants();
    }

    /// A key of shard `shard`, the `n`-th found.
    fn key_in_shard(shard: usize, n: usize) -> Vec<u8> {
        (0u32..)
            .map(u32::to_le_bytes)
            .filter(|key| RecordCache::shard_index(key_hash(key)) == shard)
            .nth(n)
            .unwrap()
            .to_vec()
    }

    #[test]
    fn shards_that_serve_less_than_the_pool_would_give_their_memory_back() {
        let cache = RecordCache::new(SHARDS << 16).unwrap();
        let (lent, returned) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let lend = |bytes| {
            lent.set(lent.get() + bytes);
            true
        };
        let give_back = |bytes| returned.set(returned.get() + bytes);
        let mut out = Vec::new();
        for shard in 0..SHARDS {
            cache.fill(cache.epoch(), &key_in_shard(shard, 0), b"v", lend);
        }
        assert_eq!(cache.allocated_bytes(), SHARDS << 16);
        // The first weighing only notes the pool's counters.
        let ghosts = |hits| PoolGhosts {
            hits,
            bytes: 64 << 20,
        };
        assert!(cache.weigh(0.05, ghosts(0), give_back));
        // Gets since then: 100 (the fills' gets were not counted), and 40
        // ghost hits: the others' 63 x 64 KiB would catch 40 / 100 x
        // (4,128,768 / 64 MiB) = 2.46% of the gets. A probe serving 3.5%
        // keeps them (over 1.25x)...
        for _ in 0..100 {
            cache.get_into(b"no such key", &mut out);
        }
        assert!(cache.weigh(0.035, ghosts(40), give_back));
        assert_eq!(returned.get(), 0);
        // ... 2% does not: every shard but the probe is emptied and its
        // memory given back.
        for _ in 0..100 {
            cache.get_into(b"no such key", &mut out);
        }
        assert!(!cache.weigh(0.02, ghosts(80), give_back));
        assert_eq!(returned.get(), (SHARDS - 1) << 16);
        assert_eq!(cache.allocated_bytes(), 1 << 16);
        let status = cache.status();
        assert!(!status.others_enabled);
        assert_eq!((status.releases, status.entries), (1, 1));
        assert_eq!(status.probe_hits_per_mille, 20);
        assert_eq!(status.pool_gain_per_mille, 24);
        cache.check_invariants();
        // Meanwhile other shards neither serve nor fill, nor lend; the
        // probe does.
        let (probe_key, other_key) = (key_in_shard(PROBE_SHARD, 1), key_in_shard(5, 1));
        cache.fill(cache.epoch(), &other_key, b"w", |_| {
            panic!("lent while released")
        });
        assert!(!cache.get_into(&other_key, &mut out));
        assert!(cache.get_into(&key_in_shard(PROBE_SHARD, 0), &mut out));
        cache.fill(cache.epoch(), &probe_key, b"p", lend);
        assert!(cache.get_into(&probe_key, &mut out));
        // A probe serving twice what the pool would takes them again, as
        // fills come.
        for _ in 0..100 {
            cache.get_into(b"no such key", &mut out);
        }
        assert!(!cache.weigh(0.04, ghosts(120), give_back), "under 2x");
        assert!(cache.weigh(0.06, ghosts(160), give_back));
        cache.fill(cache.epoch(), &other_key, b"w", lend);
        assert!(cache.get_into(&other_key, &mut out));
        assert_eq!(out, b"w");
        assert_eq!(cache.allocated_bytes(), 2 << 16);
        assert_eq!(lent.get() - returned.get(), cache.allocated_bytes());
        cache.check_invariants();
    }

    #[test]
    fn rebalance_weighs_once_per_window_of_probe_gets() {
        let cache = RecordCache::new(SHARDS << 16).unwrap();
        let mut out = Vec::new();
        let ghosts = || PoolGhosts {
            hits: 0,
            bytes: 64 << 20,
        };
        // Due at the start: the first call notes the counters.
        assert_eq!(cache.rebalance(ghosts, |_| {}), Some(true));
        assert_eq!(cache.rebalance(ghosts, |_| {}), None);
        let probe_key = key_in_shard(PROBE_SHARD, 0);
        for _ in 0..PROBE_WINDOW_GETS - 1 {
            cache.get_into(&probe_key, &mut out);
            assert_eq!(cache.rebalance(ghosts, |_| {}), None);
        }
        cache.get_into(&probe_key, &mut out);
        // No ghost hits: the pool would gain nothing, the cache stays.
        assert_eq!(cache.rebalance(ghosts, |_| {}), Some(true));
        assert_eq!(cache.status().rebalances, 2);
    }

    #[test]
    fn values_compress_and_incompressible_ones_are_kept_as_they_are() {
        let cache = RecordCache::new(1 << 20).unwrap();
        let random: Vec<u8> = (0..1000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        fill_now(&cache, b"c", &value(3, 1000));
        fill_now(&cache, b"r", &random);
        let used = cache.status().bytes_used as usize;
        assert!(
            used < 1000 + 1000 + 600,
            "compressible value kept whole: {used}"
        );
        let mut out = Vec::new();
        assert!(cache.get_into(b"c", &mut out));
        assert_eq!(out, value(3, 1000));
        assert!(cache.get_into(b"r", &mut out));
        assert_eq!(out, random);
        cache.check_invariants();
    }

    #[test]
    fn the_budget_holds_and_referenced_records_survive_eviction() {
        let cache = RecordCache::new(SHARDS * (8 << 10)).unwrap();
        let mut out = Vec::new();
        let hot = b"hot-key".to_vec();
        let shard_of = |key: &[u8]| (key_hash(key) >> 58) as usize % SHARDS;
        fill_now(&cache, &hot, &value(9, 500));
        for i in 0..20_000u32 {
            let key = i.to_be_bytes();
            if shard_of(&key) != shard_of(&hot) {
                continue;
            }
            assert!(cache.get_into(&hot, &mut out), "hot record evicted at {i}");
            // Read (missed) four times before the fill: more often lately
            // than the older records it may evict, whose counts the
            // sketch's aging has halved since.
            for _ in 0..4 {
                assert!(!cache.get_into(&key, &mut out));
            }
            fill_now(&cache, &key, &value(i as u8, 500));
        }
        let status = cache.status();
        assert!(status.evictions > 0, "{status:?}");
        assert!(status.bytes_used <= status.budget_bytes);
        cache.check_invariants();
    }

    #[test]
    fn a_full_cache_admits_a_record_read_more_often_than_its_victim() {
        let cache = RecordCache::new(SHARDS * (8 << 10)).unwrap();
        let shard_of = |key: &[u8]| (key_hash(key) >> 58) as usize % SHARDS;
        let mut out = Vec::new();
        let keys: Vec<[u8; 4]> = (0..20_000u32)
            .map(u32::to_be_bytes)
            .filter(|key| shard_of(key) == 0)
            .collect();
        // Fill shard 0 with records read once each.
        let mut filled = 0;
        for key in &keys {
            assert!(!cache.get_into(key, &mut out));
            fill_now(&cache, key, &value(1, 500));
            filled += 1;
            if cache.status().fills_not_admitted > 0 {
                break;
            }
        }
        assert!(filled < keys.len(), "the shard never filled up");
        // A record read once more than the rest gets in; one read once
        // does not.
        let (once, thrice) = (&keys[filled], &keys[filled + 1]);
        assert!(!cache.get_into(once, &mut out));
        fill_now(&cache, once, &value(2, 500));
        assert!(
            !cache.get_into(once, &mut out),
            "a record read once was admitted"
        );
        for _ in 0..3 {
            assert!(!cache.get_into(thrice, &mut out));
        }
        fill_now(&cache, thrice, &value(3, 500));
        assert!(
            cache.get_into(thrice, &mut out),
            "a record read thrice was not admitted"
        );
        cache.check_invariants();
    }
}
