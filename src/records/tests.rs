//! Tests of the record cache: a model of gets, fills and writes, and its
//! memory, admission, eviction and weighing against the pool.

use std::collections::HashMap;

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
