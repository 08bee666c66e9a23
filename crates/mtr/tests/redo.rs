//! The mini-transaction's round trip without the database: a tree on a
//! `PoolStore` changes pages in mini-transactions whose redo records go to
//! an in-memory log; the pool writes some pages on its own (a small pool
//! evicts), checkpoints write all of them and cut the log; then the
//! process "crashes" (the pool is dropped unwritten) and a fresh pool over
//! the same file redoes the log after the last checkpoint. The tree must
//! hold exactly the model's contents, pass its invariant checks and the
//! store's, across page formats, sizes of change and seeds.
#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

#[path = "../../btree/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use barracuda_base::{BlockSize, Geometry, Lsn, PageId};
use barracuda_btree::{BTree, LogicalKind, OpContext, TreeConfig};
use barracuda_codec::Codec;
use barracuda_mtr::{LsnMode, Mtr, MtrTree, PoolStore, Redo, RedoSink, Redone};
use barracuda_pool::testing::MemoryFile;
use barracuda_pool::{BufferPool, CodecService, PageFormat, PoolConfig, Services};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// One redo record as the sink got it.
#[derive(Clone, Debug)]
enum Record {
    Image(PageId, Vec<u8>),
    Patch(PageId, u32, Vec<u8>),
    EndCommit,
    Logical(PageId, LogicalKind, Vec<u8>),
}

#[derive(Default)]
struct Group(Vec<Record>);

impl RedoSink for Group {
    fn full_block(&mut self, tree_id: u16, page_id: PageId, block: &[u8]) {
        assert_eq!(tree_id, TREE_ID);
        self.0.push(Record::Image(page_id, block.to_vec()));
    }

    fn patch(&mut self, tree_id: u16, page_id: PageId, offset_bytes: u32, bytes: &[u8]) {
        assert_eq!(tree_id, TREE_ID);
        self.0
            .push(Record::Patch(page_id, offset_bytes, bytes.to_vec()));
    }

    fn logical(&mut self, tree_id: u16, page_id: PageId, kind: LogicalKind, bytes: &[u8]) {
        assert_eq!(tree_id, TREE_ID);
        self.0.push(Record::Logical(page_id, kind, bytes.to_vec()));
    }

    fn end_commit(&mut self) {
        self.0.push(Record::EndCommit);
    }
}

const TREE_ID: u16 = 3;

struct Tree(BTree<PoolStore>);

impl MtrTree for Tree {
    fn store(&self) -> &PoolStore {
        self.0.store()
    }

    fn tree_id(&self) -> u16 {
        TREE_ID
    }
}

/// The process's state that survives a crash: the data file and the log
/// after the last checkpoint, as (end LSN, records) per group.
struct Disk {
    file: Arc<MemoryFile>,
    log: Vec<(Lsn, Vec<Record>)>,
}

#[derive(Clone, Copy, Debug)]
enum Format {
    Zlib16k8k,
    Zlib4k2k,
    Plain4k,
}

fn pool(format: Format, file: &Arc<MemoryFile>, durable: &Arc<AtomicU64>) -> Arc<BufferPool> {
    let (page, block) = match format {
        Format::Zlib16k8k => (16 << 10, Some(BlockSize::Kib8)),
        Format::Zlib4k2k => (4 << 10, Some(BlockSize::Kib2)),
        Format::Plain4k => (4 << 10, None),
    };
    let (codec, geometry, pool_format) = match block {
        Some(block) => {
            let geometry = Geometry::new(page, block).unwrap();
            let block_size_bytes = geometry.block_size_bytes();
            (
                Codec::zlib_default(),
                geometry,
                PageFormat::Compressed { block_size_bytes },
            )
        }
        None => (
            Codec::None,
            Geometry::uncompressed(page).unwrap(),
            PageFormat::Uncompressed,
        ),
    };
    let durable = Arc::clone(durable);
    let services = Services {
        codec: Arc::new(CodecService::new(codec, geometry).unwrap()),
        file: Arc::clone(file) as _,
        durable_lsn: Arc::new(move || Lsn(durable.load(Ordering::Acquire))),
        clock: None,
    };
    // A few dozen pages: the pool writes and evicts pages all along.
    let config = PoolConfig::default()
        .page_size_bytes(page)
        .format(pool_format)
        .buffer_pool_bytes(48 * page);
    Arc::new(BufferPool::open(config, services).unwrap())
}

fn config(format: Format) -> TreeConfig {
    TreeConfig {
        compressed: !matches!(format, Format::Plain4k),
        ..TreeConfig::default()
    }
}

fn value(rng: &mut SmallRng) -> Vec<u8> {
    let len = match rng.random_range(0..10) {
        0 => rng.random_range(2_000..9_000),
        _ => rng.random_range(0..120),
    };
    // Half compressible text, half noise.
    if rng.random() {
        (0..len).map(|i| b"abcdefgh"[i % 8]).collect()
    } else {
        (0..len).map(|_| rng.random()).collect()
    }
}

/// Runs `changes` mini-transactions of 1 to `ops_max` operations each and
/// returns the disk as a crash leaves it and the model of what was logged.
fn run(
    format: Format,
    seed: u64,
    changes: usize,
    ops_max: usize,
) -> (Disk, BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let file = Arc::new(MemoryFile::default());
    let durable = Arc::new(AtomicU64::new(0));
    let pool = pool(format, &file, &durable);
    let mut lsn = 0;
    let mut log = Vec::new();
    let mut append = |mtr: &Mtr<Tree>, log: &mut Vec<(Lsn, Vec<Record>)>| {
        let mut group = Group::default();
        mtr.write_redo(&mut group).unwrap();
        lsn += 1 + group.0.len() as u64;
        log.push((Lsn(lsn), group.0));
        mtr.stamp(Lsn(lsn));
        // The log is durable at once: the pool may write what it likes.
        durable.store(lsn, Ordering::Release);
    };
    let mut op = OpContext::new();
    let store = Arc::new(PoolStore::format(pool, LsnMode::Logged, &mut op).unwrap());
    let tree = Arc::new(Tree(
        BTree::create(Arc::clone(&store), config(format)).unwrap(),
    ));
    let mut mtr = Mtr::default();
    *mtr.op(&tree) = op;
    for finished in store.take_finished_ops() {
        mtr.op(&tree).append_changes(finished);
    }
    append(&mtr, &mut log);
    let mut model = BTreeMap::new();
    for change in 0..changes {
        let mut mtr = Mtr::default();
        for _ in 0..rng.random_range(1..=ops_max) {
            let key = format!("key{:05}", rng.random_range(0..3_000)).into_bytes();
            let op = mtr.op(&tree);
            if rng.random_range(0..4) == 0 {
                tree.0.delete_in(op, &key).unwrap();
                model.remove(&key);
            } else {
                let value = value(&mut rng);
                tree.0.insert_in(op, &key, &value).unwrap();
                model.insert(key, value);
            }
        }
        for (tree, op) in mtr.ops_mut() {
            tree.0.settle_entry_count(op).unwrap();
        }
        append(&mtr, &mut log);
        if rng.random_range(0..4) == 0 {
            // The page cleaner writes a few dirty pages: their blocks then
            // hold some of the log's records, which redo must skip.
            store.pool().flush_some(rng.random_range(1..8)).unwrap();
        }
        if change % 97 == 96 {
            // A checkpoint: every page written, the log before it cut.
            store.pool().flush_all().unwrap();
            store.forget_written_images();
            log.clear();
        }
    }
    tree.0.check_invariants().unwrap();
    (Disk { file, log }, model)
}

/// The crash and the recovery: a fresh pool over the file redoes the log.
fn recover(format: Format, disk: &Disk) -> (BTree<PoolStore>, [u64; 3]) {
    let durable = Arc::new(AtomicU64::new(u64::MAX));
    let pool = pool(format, &disk.file, &durable);
    let mut redo = Redo::new(Arc::clone(&pool));
    let mut counts = [0; 3];
    for (end, records) in &disk.log {
        let mut patches: Vec<(u32, &[u8])> = Vec::new();
        let mut patch_page = None;
        for record in records {
            let redone = match record {
                Record::Image(page_id, block) => {
                    redo.image(*page_id, block, *end).unwrap();
                    None
                }
                Record::Patch(page_id, offset, bytes) => {
                    patch_page = Some(*page_id);
                    patches.push((*offset, bytes));
                    None
                }
                Record::EndCommit => {
                    let page_id = patch_page.take().unwrap();
                    let redone = redo
                        .patches(page_id, *end, std::mem::take(&mut patches))
                        .unwrap();
                    Some(redone)
                }
                Record::Logical(page_id, kind, body) => {
                    Some(redo.logical(*page_id, *end, *kind, body).unwrap())
                }
            };
            match redone {
                Some(Redone::Skipped) => counts[0] += 1,
                Some(Redone::Applied) => counts[1] += 1,
                Some(Redone::Packed) => counts[2] += 1,
                None => {}
            }
        }
    }
    let store = Arc::new(PoolStore::open(pool, LsnMode::Logged).unwrap());
    store.check_invariants().unwrap();
    (BTree::open(store, PageId(1), config(format)), counts)
}

/// Returns the records redone and skipped.
fn round_trip(format: Format, seed: u64, changes: usize, ops_max: usize) -> (u64, u64) {
    let (disk, model) = run(format, seed, changes, ops_max);
    let (tree, [skipped, applied, packed]) = recover(format, &disk);
    let what = format!("{format:?} seed {seed}, {changes} changes of up to {ops_max}");
    tree.check_invariants()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    eprintln!("{what}: {applied} redone, {skipped} skipped, {packed} packed");
    let found = common::contents(&tree);
    assert!(
        found == model,
        "{what}: {} entries found, {} logged",
        found.len(),
        model.len()
    );
    assert_eq!(tree.len().unwrap(), model.len() as u64, "{what}");
    (applied, skipped)
}

#[test]
fn redo_rebuilds_what_was_logged_after_the_last_checkpoint() {
    for (i, format) in [Format::Zlib16k8k, Format::Zlib4k2k, Format::Plain4k]
        .into_iter()
        .enumerate()
    {
        let (mut applied, mut skipped) = (0, 0);
        for (seed, changes, ops_max) in [(1, 150, 1), (2, 300, 8), (3, 40, 60)] {
            let (a, s) = round_trip(format, seed + 10 * i as u64, changes, ops_max);
            applied += a;
            skipped += s;
        }
        // The runs logged changes after their last checkpoint, and the
        // cleaner wrote pages in between: redo both applied records and
        // skipped ones the blocks held.
        assert!(
            applied > 0 && skipped > 0,
            "{format:?}: {applied} redone, {skipped} skipped"
        );
    }
}
