//! The OS page cache as a second tier of blocks (`Options::os_cache_tier`):
//! refused with `O_DIRECT`, and through a reopen with a pool far smaller
//! than the data, every get sees its value while pages the pool evicted
//! come back from the page cache.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;
use barracuda::FlushMethod;
use barracuda::{Db, Error};
use common::{half_random_value, key, small, tempdir};
use rand::SeedableRng;
use rand::rngs::SmallRng;

#[test]
fn the_tier_needs_a_buffered_flush_method() {
    let dir = tempdir();
    let refused = small().os_cache_tier(true).open(dir.path());
    let Err(error) = refused else {
        panic!("the tier with O_DIRECT opened");
    };
    assert!(matches!(error, Error::InvalidOptions { .. }), "{error}");
    assert!(error.to_string().contains("FlushMethod::Fsync"), "{error}");
}

#[test]
fn gets_through_the_tier_see_every_value() {
    let dir = tempdir();
    let options = || small().flush_method(FlushMethod::Fsync).os_cache_tier(true);
    // About 4 MiB of compressed pages against a 1 MiB pool.
    const KEYS: u64 = 8_000;
    let mut rng = SmallRng::seed_from_u64(23);
    let values: Vec<Vec<u8>> = (0..KEYS).map(|_| half_random_value(&mut rng)).collect();
    {
        let db = options().open(dir.path()).unwrap();
        let tree = db.tree("t").unwrap();
        for (i, value) in values.iter().enumerate() {
            tree.put(&key(i as u64), value).unwrap();
        }
        db.close().unwrap();
    }
    let db: Db = options().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    for _ in 0..2 {
        for (i, value) in values.iter().enumerate() {
            assert_eq!(
                tree.get(&key(i as u64)).unwrap().as_deref(),
                Some(&value[..])
            );
        }
    }
    let status = tree.pool_status();
    // The second pass found the pages the pool evicted in the page cache
    // (the close synced them, and the machine has the memory to keep 4 MiB).
    assert!(status.os_cache_reads > 0, "{status:?}");
    assert!(status.os_cache_reads <= status.pages_read);
}
