//! Fuzzes the B+tree's split, merge and cursor paths with adversarial key
//! patterns and values (runs of one byte, or random bytes that do not
//! compress), on uncompressed pages or real zlib blocks (`CodecBlocks`):
//! every operation is checked against `BTreeMap` (an operation may fail only
//! with `CompressionUnfit` on a compressed tree, and then must have changed
//! nothing), and the invariant checker runs after every operation.
#![no_main]

use arbitrary::Arbitrary;
use barracuda_btree::store::CodecBlocks;
use barracuda_btree::{Error, KEY_BYTES_MAX, MemStore, PageStore, SplitPolicy, BTree, TreeConfig};
use barracuda_base::{BlockSize, Geometry};
use barracuda_codec::Codec;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Bounds on the input, so one run stays fast.
const OPS_MAX: usize = 400;
const RAW_KEY_BYTES_MAX: usize = 40;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Policy {
    Half,
    InnoDb,
    Adaptive,
    InnoDbLastInsert,
}

#[derive(Arbitrary, Debug)]
enum KeySpec {
    /// Arbitrary short bytes.
    Raw(Vec<u8>),
    /// A composite key: a sequential stream inside a group, like TPC-C orders.
    Composite { group: u8, seq: u16 },
    /// A long key of one repeated byte, up to the key limit.
    Long { fill: u8, len: u16 },
    /// A descending counter.
    Reverse(u16),
    /// Common prefix then a varying tail.
    Prefixed { tail: u8 },
}

impl KeySpec {
    fn bytes(&self) -> Vec<u8> {
        match self {
            KeySpec::Raw(v) => v.iter().take(RAW_KEY_BYTES_MAX).copied().collect(),
            KeySpec::Composite { group, seq } => {
                let mut k = vec![b'c', *group % 8];
                k.extend_from_slice(&seq.to_be_bytes());
                k
            }
            KeySpec::Long { fill, len } => vec![*fill; usize::from(*len) % (KEY_BYTES_MAX + 1)],
            KeySpec::Reverse(n) => {
                let mut k = vec![b'r'];
                k.extend_from_slice(&(u16::MAX - n).to_be_bytes());
                k
            }
            KeySpec::Prefixed { tail } => {
                let mut k = vec![b'p'; 200];
                k.push(*tail);
                k
            }
        }
    }
}

/// How pages are stored.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Blocks {
    Uncompressed,
    /// Zlib blocks of half the page.
    ZlibHalf,
    /// Zlib blocks of a quarter of the page.
    ZlibQuarter,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Insert {
        key: KeySpec,
        value_len: u16,
        fill: u8,
        /// Random (incompressible) bytes from `fill` as the seed, instead of
        /// a run of `fill`.
        random: bool,
    },
    Delete {
        key: KeySpec,
    },
    Get {
        key: KeySpec,
    },
    Scan {
        from: KeySpec,
        forward: bool,
        count: u8,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    policy: Policy,
    big_pages: bool,
    blocks: Blocks,
    ops: Vec<Op>,
}

/// `len` bytes of xorshift output seeded by `seed`: incompressible.
fn random_bytes(seed: u8, len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(seed);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn contents<S: PageStore>(tree: &BTree<S>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut c = tree.cursor();
    let mut out = BTreeMap::new();
    let mut ok = c.first().expect("first");
    while ok {
        let (k, v) = c.entry().expect("entry").clone();
        out.insert(k, v);
        ok = c.next().expect("next");
    }
    out
}

/// An operation failed: only a compression failure of a compressed tree
/// may, and it must have changed nothing.
fn failed<S: PageStore>(tree: &BTree<S>, model: &BTreeMap<Vec<u8>, Vec<u8>>, e: &Error) {
    assert!(
        matches!(e, Error::CompressionUnfit { .. }) && tree.config().compressed,
        "operation failed: {e}"
    );
    assert!(
        contents(tree) == *model,
        "failed operation changed the tree"
    );
}

fn scan_matches<S: PageStore>(
    tree: &BTree<S>,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    from: &[u8],
    forward: bool,
    count: u8,
) {
    let mut c = tree.cursor();
    let mut got = Vec::new();
    let mut ok = if forward {
        c.seek(from).expect("seek")
    } else {
        c.seek_for_prev(from).expect("seek_for_prev")
    };
    while ok && got.len() < usize::from(count) {
        got.push(c.entry().expect("entry").clone());
        ok = if forward {
            c.next().expect("next")
        } else {
            c.prev().expect("prev")
        };
    }
    let want: Vec<(Vec<u8>, Vec<u8>)> = if forward {
        model
            .range(from.to_vec()..)
            .take(usize::from(count))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    } else {
        model
            .range(..=from.to_vec())
            .rev()
            .take(usize::from(count))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    assert!(got == want, "scan from {from:?} forward={forward} differs");
    if forward {
        let mut limited = Vec::new();
        let visited = tree
            .scan_limit(
                std::ops::Bound::Included(from),
                std::ops::Bound::Unbounded,
                usize::from(count),
                |k, v| {
                    limited.push((k.to_vec(), v.to_vec()));
                    true
                },
            )
            .expect("scan_limit");
        assert_eq!(visited, limited.len());
        assert!(limited == want, "scan_limit from {from:?} differs");
    }
}

fn run<S: PageStore>(tree: &BTree<S>, ops: &[Op], page: usize) {
    let mut model = BTreeMap::new();
    for op in ops.iter().take(OPS_MAX) {
        match op {
            Op::Insert {
                key,
                value_len,
                fill,
                random,
            } => {
                let k = key.bytes();
                let len = usize::from(*value_len) % (3 * page);
                let v = if *random {
                    random_bytes(*fill, len)
                } else {
                    vec![*fill; len]
                };
                match tree.insert(&k, &v) {
                    Ok(existed) => assert_eq!(existed, model.insert(k, v).is_some()),
                    Err(e) => failed(tree, &model, &e),
                }
            }
            Op::Delete { key } => {
                let k = key.bytes();
                match tree.delete(&k) {
                    Ok(existed) => assert_eq!(existed, model.remove(&k).is_some()),
                    Err(e) => failed(tree, &model, &e),
                }
            }
            Op::Get { key } => {
                let k = key.bytes();
                assert_eq!(tree.get(&k).expect("get"), model.get(&k).cloned());
            }
            Op::Scan {
                from,
                forward,
                count,
            } => scan_matches(tree, &model, &from.bytes(), *forward, *count),
        }
        if let Err(e) = tree.check_invariants() {
            panic!("invariant: {e}");
        }
        assert_eq!(
            tree.len().expect("len"),
            model.len() as u64,
            "the meta page's count differs from the model"
        );
    }
    scan_matches(tree, &model, &[], true, u8::MAX);
}

libfuzzer_sys::fuzz_target!(|input: Input| {
    let page = if input.big_pages { 16 * 1024 } else { 4 * 1024 };
    let policy = match input.policy {
        Policy::Half => SplitPolicy::Half,
        Policy::InnoDb => SplitPolicy::InnoDb,
        Policy::Adaptive => SplitPolicy::Adaptive,
        Policy::InnoDbLastInsert => SplitPolicy::InnoDbLastInsert,
    };
    let block = match input.blocks {
        Blocks::Uncompressed => None,
        Blocks::ZlibHalf if input.big_pages => Some(BlockSize::Kib8),
        Blocks::ZlibHalf => Some(BlockSize::Kib2),
        Blocks::ZlibQuarter if input.big_pages => Some(BlockSize::Kib4),
        Blocks::ZlibQuarter => Some(BlockSize::Kib1),
    };
    let config = TreeConfig {
        policy,
        compressed: block.is_some(),
        ..TreeConfig::default()
    };
    match block {
        None => {
            let store = Arc::new(MemStore::new(page).expect("page size"));
            let tree = BTree::create(store, config).expect("create");
            run(&tree, &input.ops, page);
        }
        Some(block) => {
            let geometry = Geometry::new(page, block).expect("geometry");
            let fit = CodecBlocks::new(Codec::zlib_default(), geometry).expect("codec");
            let store = Arc::new(MemStore::with_fit(page, fit).expect("page size"));
            let tree = BTree::create(store, config).expect("create");
            run(&tree, &input.ops, page);
        }
    }
});
