//! Shifts through the database, with the README's default trees (zlib, 16
//! KiB pages in 8 KiB blocks) and uncompressed ones: random single puts
//! make full leaves give records to their siblings, and after a crash the
//! database reopens with every synced put, its trees valid.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;
use std::collections::BTreeMap;

use barracuda::{Compression, Db, Durability, TreeOptions};
use common::{key, tempdir};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[test]
fn random_puts_shift_and_survive_a_crash() {
    for compression in [None, Some(Compression::None)] {
        let dir = tempdir();
        let options = || {
            Db::options()
                .buffer_pool_bytes(8 << 20)
                .durability(Durability::NoSync)
        };
        let db = options().open(dir.path()).unwrap();
        let tree = match compression {
            None => db.tree("t").unwrap(),
            Some(c) => db
                .create_tree("t", TreeOptions::default().compression(c))
                .unwrap(),
        };
        let mut rng = SmallRng::seed_from_u64(11);
        let mut model = BTreeMap::new();
        for i in 0..20_000u64 {
            // Text that compresses about 3:1, so that compressed pages fill
            // by bytes rather than by blocks.
            let k = key(rng.random_range(0..1_000_000));
            let v = format!("value {i} of the shift test ")
                .repeat(1 + (i as usize % 5))
                .into_bytes();
            tree.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        let splits = tree.stats().unwrap().splits;
        assert!(splits.shifts > 0, "{compression:?}: {splits:?}");
        db.sync().unwrap();
        db.halt();
        let db = options().open(dir.path()).unwrap();
        let tree = db.open_tree("t").unwrap();
        let all: Vec<_> = tree.iter().map(Result::unwrap).collect();
        let expected: Vec<_> = model.into_iter().collect();
        assert!(
            all == expected,
            "{compression:?}: the tree differs from the model"
        );
        db.check().unwrap();
        db.close().unwrap();
    }
}
