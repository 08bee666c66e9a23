//! Fuzzes the B+tree's split, merge and cursor paths with adversarial key
//! patterns: every operation is checked against `BTreeMap`, and the
//! invariant checker runs after every operation.
#![no_main]

use arbitrary::Arbitrary;
use barracuda_btree::{KEY_BYTES_MAX, MemStore, SplitPolicy, Tree, TreeConfig};
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

#[derive(Arbitrary, Debug)]
enum Op {
    Insert {
        key: KeySpec,
        value_len: u16,
        fill: u8,
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
    ops: Vec<Op>,
}

fn scan_matches(
    tree: &Tree<MemStore>,
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
}

libfuzzer_sys::fuzz_target!(|input: Input| {
    let page = if input.big_pages { 16 * 1024 } else { 4 * 1024 };
    let policy = match input.policy {
        Policy::Half => SplitPolicy::Half,
        Policy::InnoDb => SplitPolicy::InnoDb,
        Policy::Adaptive => SplitPolicy::Adaptive,
        Policy::InnoDbLastInsert => SplitPolicy::InnoDbLastInsert,
    };
    let store = Arc::new(MemStore::new(page).expect("page size"));
    let tree = Tree::create(
        store,
        TreeConfig {
            policy,
            ..TreeConfig::default()
        },
    )
    .expect("create");
    let mut model = BTreeMap::new();
    for op in input.ops.iter().take(OPS_MAX) {
        match op {
            Op::Insert {
                key,
                value_len,
                fill,
            } => {
                let k = key.bytes();
                let v = vec![*fill; usize::from(*value_len) % (3 * page)];
                let existed = tree.insert(&k, &v).expect("insert");
                assert_eq!(existed, model.insert(k, v).is_some());
            }
            Op::Delete { key } => {
                let k = key.bytes();
                assert_eq!(tree.delete(&k).expect("delete"), model.remove(&k).is_some());
            }
            Op::Get { key } => {
                let k = key.bytes();
                assert_eq!(tree.get(&k).expect("get"), model.get(&k).cloned());
            }
            Op::Scan {
                from,
                forward,
                count,
            } => scan_matches(&tree, &model, &from.bytes(), *forward, *count),
        }
        if let Err(e) = tree.check_invariants() {
            panic!("invariant: {e}");
        }
    }
    scan_matches(&tree, &model, &[], true, u8::MAX);
});
