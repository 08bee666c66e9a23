//! The page table: page id to descriptor index, in shards with their own
//! read-write locks so that hits on different pages do not serialize.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use barracuda_base::PageId;
use parking_lot::{RwLock, RwLockWriteGuard};

/// 64 shards: several times the core count of the machines we target, so two
/// threads rarely meet on one shard lock.
const SHARD_COUNT: usize = 64;
const _: () = assert!(SHARD_COUNT.is_power_of_two());

/// Fibonacci hashing of a page id: page ids are dense integers, so one
/// multiplication spreads them well, at a fraction of SipHash's cost. Also
/// for other sets of page ids (the database's set of pages imaged in the
/// log since its checkpoint, looked up for every page a write touches).
#[derive(Default)]
pub struct PageIdHasher(u64);

impl Hasher for PageIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Entries a shard holds before it first grows.
const SHARD_CAPACITY_INITIAL: usize = 16;

type Shard = HashMap<PageId, u32, BuildHasherDefault<PageIdHasher>>;

pub(crate) struct PageTable {
    shards: Box<[RwLock<Shard>]>,
}

impl PageTable {
    /// An empty table. Its shards grow with the pages the pool holds rather
    /// than being sized for the pool's capacity up front: for a 1 GiB pool of
    /// 16 KiB pages that was 4 MiB of mostly empty buckets, where every
    /// lookup missed the CPU's caches twice (control bytes and bucket), and
    /// first touches of the table cost page faults while the pool filled.
    /// A shard grows by doubling, under its write lock.
    pub(crate) fn new() -> Self {
        let shards = (0..SHARD_COUNT)
            .map(|_| {
                RwLock::new(Shard::with_capacity_and_hasher(
                    SHARD_CAPACITY_INITIAL,
                    BuildHasherDefault::default(),
                ))
            })
            .collect();
        Self { shards }
    }

    fn shard_of(page_id: PageId) -> usize {
        (page_id.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARD_COUNT
    }

    /// Runs `f` on the descriptor of `page_id` under the shard's read lock
    /// (the pool pins inside `f`, so eviction, which holds the write lock,
    /// cannot race with the pin).
    pub(crate) fn with_entry<T>(&self, page_id: PageId, f: impl FnOnce(u32) -> T) -> Option<T> {
        let shard = self.shards[Self::shard_of(page_id)].read();
        shard.get(&page_id).map(|&d| f(d))
    }

    /// The write-locked shard holding `page_id`.
    pub(crate) fn lock(&self, page_id: PageId) -> RwLockWriteGuard<'_, Shard> {
        self.shards[Self::shard_of(page_id)].write()
    }

    /// Every entry (for invariant checks).
    pub(crate) fn entries(&self) -> Vec<(PageId, u32)> {
        self.shards
            .iter()
            .flat_map(|s| s.read().iter().map(|(&p, &d)| (p, d)).collect::<Vec<_>>())
            .collect()
    }
}
