//! `Tree::len`: the entry count the meta page keeps. Puts of new keys and
//! deletes of present ones change it, overwrites and deletes of absent keys
//! do not, a batch counts each of its operations, a refused write changes
//! nothing, the count survives reopen and is checked by `check`, and a tree
//! file written before counts were kept (a version 1 meta page) is counted
//! once at open. Crash recovery of the count is checked by `crash.rs` and
//! `power_loss.rs` after every recovery.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use barracuda::{Compression, Error, TreeOptions, WriteBatch};
use barracuda_base::Geometry;
use barracuda_btree::{Fit, OpContext, PageStore, PageWrite};
use barracuda_codec::{Codec, PAGE_HEADER_RESERVED_BYTES};
use barracuda_mtr::{LsnCounter, LsnMode, META_PAGE_ID, PoolStore};
use barracuda_pool::{BufferPool, CodecService, FileService, PageFormat, PoolConfig, Services};
use common::{key, small, tempdir, two_trees};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[test]
fn len_counts_new_keys_not_overwrites_and_survives_reopen() {
    let dir = tempdir();
    let mut rng = SmallRng::seed_from_u64(11);
    let mut model = BTreeMap::new();
    {
        let db = small().open(dir.path()).unwrap();
        let tree = db.tree("t").unwrap();
        assert_eq!(tree.len().unwrap(), 0);
        assert!(tree.is_empty().unwrap());
        for step in 0..5000u64 {
            let i = rng.random_range(0..1500);
            if rng.random_range(0..3) == 0 {
                let existed = tree.delete(&key(i)).unwrap();
                assert_eq!(existed, model.remove(&key(i)).is_some());
            } else {
                let existed = tree.put(&key(i), &key(step)).unwrap();
                assert_eq!(existed, model.insert(key(i), key(step)).is_some());
            }
            assert_eq!(tree.len().unwrap(), model.len() as u64, "step {step}");
        }
        tree.check().unwrap();
        db.close().unwrap();
    }
    let db = small().open(dir.path()).unwrap();
    let tree = db.tree("t").unwrap();
    assert_eq!(tree.len().unwrap(), model.len() as u64);
    assert!(!tree.is_empty().unwrap());
    db.check().unwrap();
}

#[test]
fn batches_count_each_operation_and_refused_writes_count_nothing() {
    let dir = tempdir();
    let (db, a, b) = two_trees(dir.path());
    for i in 0..10 {
        a.put(&key(i), b"old").unwrap();
    }
    let mut batch = WriteBatch::new();
    batch.put(&a, &key(0), b"replaced"); // present: no change
    batch.put(&a, &key(100), b"new"); // +1
    batch.put(&a, &key(100), b"again"); // present by now: no change
    batch.delete(&a, &key(1)); // -1
    batch.delete(&a, &key(1)); // absent by now: no change
    batch.delete(&a, &key(999)); // absent: no change
    batch.put(&b, &key(5), b"in b"); // +1 in b
    batch.delete(&b, &key(6)); // absent in b
    db.write(batch).unwrap();
    assert_eq!(a.len().unwrap(), 10);
    assert_eq!(b.len().unwrap(), 1);
    // A key too long: refused before anything changes.
    assert!(a.put(&vec![1; 100_000], b"x").is_err());
    assert!(a.delete(&vec![1; 100_000]).is_err());
    // A batch too large: refused up front, as a whole.
    let mut huge = WriteBatch::new();
    for i in 0..2000 {
        huge.put(&a, &key(1000 + i), b"x");
    }
    huge.put(&b, &key(7), b"x");
    assert!(matches!(db.write(huge), Err(Error::BatchTooLarge { .. })));
    assert_eq!(a.len().unwrap(), 10);
    assert_eq!(b.len().unwrap(), 1);
    db.check().unwrap();
    db.close().unwrap();
    let db = small().open(dir.path()).unwrap();
    assert_eq!(db.open_tree("a").unwrap().len().unwrap(), 10);
    assert_eq!(db.open_tree("b").unwrap().len().unwrap(), 1);
}

/// The store of the closed database's only tree file (uncompressed 16 KiB
/// pages), on a pool of its own.
fn open_store(dir: &std::path::Path) -> PoolStore {
    let path = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "bdb"))
        .unwrap();
    let page = 16 << 10;
    let geometry = Geometry::uncompressed(page).unwrap();
    let file = barracuda_io::open(&path, &barracuda_io::IoOptions::default()).unwrap();
    let lsns = LsnCounter::new();
    let services = Services {
        codec: Arc::new(CodecService::new(Codec::None, geometry).unwrap()),
        file: Arc::new(FileService::new(file)),
        durable_lsn: PoolStore::durable_lsn_provider(&lsns),
        clock: None,
    };
    let config = PoolConfig::default()
        .page_size_bytes(page)
        .format(PageFormat::Uncompressed)
        .buffer_pool_bytes(64 * page);
    let pool = Arc::new(BufferPool::open(config, services).unwrap());
    PoolStore::open(pool, LsnMode::Counter(lsns)).unwrap()
}

/// Rewrites page 0 of the closed database's only tree file as a version 1
/// meta page without a count, as the format before counts were kept wrote
/// it, at the LSN the block had (the open checks it against the one its
/// last checkpoint recorded).
fn downgrade_meta_page(dir: &std::path::Path) {
    let path = dir.join("tree-00001.bdb");
    let block_bytes = 16 << 10;
    let original = std::fs::read(&path).unwrap();
    let lsn = barracuda_codec::read_header(&original[..block_bytes])
        .unwrap()
        .lsn;
    downgrade_meta_page_at_any_lsn(dir);
    let mut block = std::fs::read(&path).unwrap()[..block_bytes].to_vec();
    barracuda_codec::seal(&mut block, lsn).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&block, 0)
        .unwrap();
}

fn downgrade_meta_page_at_any_lsn(dir: &std::path::Path) {
    let store = open_store(dir);
    assert!(store.entry_count().unwrap().is_some());
    let h = PAGE_HEADER_RESERVED_BYTES;
    let mut op = OpContext::new();
    {
        let mut meta = store.fix_exclusive(META_PAGE_ID).unwrap();
        meta.write(h + 4, &1u32.to_le_bytes());
        meta.write(h + 32, &[0u8; 8]);
        assert_eq!(meta.commit(&mut op), Fit::Fits);
    }
    store.finish_op(op);
    assert_eq!(store.entry_count().unwrap(), None);
    store.pool().flush_all().unwrap();
}

#[test]
fn a_tree_file_without_a_count_is_counted_once_at_open() {
    let dir = tempdir();
    let options =
        || small().default_tree_options(TreeOptions::default().compression(Compression::None));
    {
        let db = options().open(dir.path()).unwrap();
        let tree = db.tree("old").unwrap();
        for i in 0..3000 {
            tree.put(&key(i), &key(i)).unwrap();
        }
        db.close().unwrap();
    }
    downgrade_meta_page(dir.path());
    {
        let db = options().open(dir.path()).unwrap();
        let tree = db.tree("old").unwrap();
        assert_eq!(tree.len().unwrap(), 3000);
        tree.put(b"new", b"entry").unwrap();
        tree.delete(&key(0)).unwrap();
        assert_eq!(tree.len().unwrap(), 3000);
        db.check().unwrap();
        // No close, no checkpoint: the upgrade and the writes must come
        // back from the log.
        db.sync().unwrap();
        db.halt();
    }
    let db = options().open(dir.path()).unwrap();
    let tree = db.tree("old").unwrap();
    assert_eq!(tree.len().unwrap(), 3000);
    assert_eq!(tree.iter().count(), 3000);
    db.check().unwrap();
    db.close().unwrap();
    // The count is stored in the file now, not counted at each open.
    assert_eq!(open_store(dir.path()).entry_count().unwrap(), Some(3000));
}
