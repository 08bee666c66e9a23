//! Fuzzes the record cache (`barracuda::testing::RecordCache`) on a tiny
//! budget, so its rings wrap, evict and reinsert all the time: gets, fills
//! (admitted or not by its frequency sketch) and writes against a model of
//! the tree's values. A get from the cache must return the model's value;
//! `check_invariants()` walks every ring after every step. Some of the
//! shards' loans from the pool are refused, and weighings against the pool
//! give shards back (and let them fill again): the cache must hold exactly
//! the loans it was granted less those it returned.
#![no_main]

use std::cell::Cell;
use std::collections::HashMap;

use arbitrary::Arbitrary;
use barracuda::testing::{PoolGhosts, RecordCache};
use libfuzzer_sys::fuzz_target;

/// Bounded input: at most this many operations per run.
const OPS_MAX: usize = 512;

#[derive(Arbitrary, Debug)]
enum Op {
    /// A get of key `k`: from the cache, or a miss that the tree answers
    /// and fills (as `Tree::get_into` does).
    Get(u16),
    /// A get whose fill raced a write: the epoch is read, a write runs,
    /// then the fill comes with the stale value.
    RacingFill(u16),
    /// A write of key `k` (removed before it changes, as the Db does).
    Write { key: u16, len: u16 },
    /// A weighing against the pool: the probe's hit ratio (per mille) and
    /// the pool's ghost hits since the last one.
    Weigh { probe_per_mille: u16, ghost_hits: u8 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// The budget: 1 to 8 KiB per shard (64 shards), so that a few
    /// records fill a shard.
    budget: u8,
    /// Every n-th loan a shard asks for is refused (0: none).
    refuse_every: u8,
    ops: Vec<Op>,
}

/// The value of version `version`, `len` bytes: half repeated (it
/// compresses), half varied.
fn value(version: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            if i % 2 == 0 {
                version as u8
            } else {
                (i as u32).wrapping_mul(31).wrapping_add(version) as u8
            }
        })
        .collect()
}

/// Keys 0..512: about eight per shard.
const KEYS: u16 = 512;

/// Values up to this long: a few fill the smallest shard's ring (a record
/// longer than a quarter of the ring is never cached).
const VALUE_BYTES_MAX: u16 = 600;

fn key(k: u16) -> [u8; 3] {
    let k = k % KEYS;
    [k as u8, (k >> 8) as u8 ^ 0x5a, 7]
}

fuzz_target!(|input: Input| {
    let budget = 64 * 1024 * (1 + usize::from(input.budget % 8));
    let cache = RecordCache::new(budget).expect("a budget");
    // The tree: key -> (version, value length).
    let mut tree: HashMap<u16, (u32, usize)> = HashMap::new();
    let mut version = 0u32;
    let mut out = Vec::new();
    let refuse_every = u32::from(input.refuse_every % 4);
    let (asked, granted, returned) = (Cell::new(0u32), Cell::new(0usize), Cell::new(0usize));
    let mut ghost_hits = 0u64;
    let lend = |bytes: usize| {
        asked.set(asked.get() + 1);
        let refused = refuse_every != 0 && asked.get().is_multiple_of(refuse_every);
        if !refused {
            granted.set(granted.get() + bytes);
        }
        !refused
    };
    for op in input.ops.into_iter().take(OPS_MAX) {
        match op {
            Op::Get(k) => {
                let k = k % KEYS;
                let (v, len) = *tree.entry(k).or_insert((0, 100));
                if cache.get_into(&key(k), &mut out) {
                    assert_eq!(
                        out,
                        value(v, len),
                        "key {k}: the cache served a stale value"
                    );
                } else {
                    let epoch = cache.epoch();
                    cache.fill(epoch, &key(k), &value(v, len), &lend);
                }
            }
            Op::RacingFill(k) => {
                let k = k % KEYS;
                let (v, len) = *tree.entry(k).or_insert((0, 100));
                let epoch = cache.epoch();
                let stale = value(v, len);
                {
                    let write = cache.begin_write();
                    cache.remove(&write, &key(k));
                    version += 1;
                    tree.insert(k, (version, len));
                }
                cache.fill(epoch, &key(k), &stale, &lend);
            }
            Op::Write { key: k, len } => {
                let k = k % KEYS;
                let write = cache.begin_write();
                cache.remove(&write, &key(k));
                version += 1;
                tree.insert(k, (version, usize::from(len % VALUE_BYTES_MAX)));
            }
            Op::Weigh {
                probe_per_mille,
                ghost_hits: hits,
            } => {
                ghost_hits += u64::from(hits);
                let ghosts = PoolGhosts {
                    hits: ghost_hits,
                    bytes: 1 << 20,
                };
                let probe = f64::from(probe_per_mille % 1001) / 1000.0;
                cache.weigh(probe, ghosts, |bytes| {
                    returned.set(returned.get() + bytes);
                });
            }
        }
        cache.check_invariants();
        let status = cache.status();
        assert_eq!(
            status.allocated_bytes,
            (granted.get() - returned.get()) as u64,
            "loans"
        );
        assert!(status.bytes_used <= status.allocated_bytes, "{status:?}");
    }
});
