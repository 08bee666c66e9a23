//! Criterion benchmarks of the B+tree in memory: sequential and random
//! inserts, and point lookups, for 4 and 16 KiB pages.

use barracuda_btree::{BTree, MemStore, SplitPolicy, TreeConfig};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use std::sync::Arc;

/// Rows per insert batch: enough for a tree of a few levels.
const ROWS: u64 = 20_000;
/// A TPC-C-order-sized value.
const VALUE: [u8; 80] = [b'v'; 80];
const PAGE_SIZES_BYTES: [usize; 2] = [4096, 16384];

fn new_tree(page_size_bytes: usize) -> BTree<MemStore> {
    let store = Arc::new(MemStore::new(page_size_bytes).expect("valid page size"));
    let config = TreeConfig {
        policy: SplitPolicy::Adaptive,
        ..TreeConfig::default()
    };
    BTree::create(store, config).expect("create tree")
}

fn random_keys(n: u64) -> Vec<[u8; 8]> {
    let mut rng = SmallRng::seed_from_u64(42);
    (0..n).map(|_| rng.random::<u64>().to_be_bytes()).collect()
}

fn insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("btree_insert");
    group.throughput(Throughput::Elements(ROWS));
    group.sample_size(10);
    let random = random_keys(ROWS);
    for page in PAGE_SIZES_BYTES {
        group.bench_with_input(BenchmarkId::new("sequential", page), &page, |b, &page| {
            b.iter(|| {
                let tree = new_tree(page);
                for i in 0..ROWS {
                    tree.insert(&i.to_be_bytes(), &VALUE).expect("insert");
                }
                tree
            });
        });
        group.bench_with_input(BenchmarkId::new("random", page), &page, |b, &page| {
            b.iter(|| {
                let tree = new_tree(page);
                for k in &random {
                    tree.insert(k, &VALUE).expect("insert");
                }
                tree
            });
        });
    }
    group.finish();
}

fn lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("btree_get");
    group.throughput(Throughput::Elements(1));
    let keys = random_keys(ROWS);
    for page in PAGE_SIZES_BYTES {
        let tree = new_tree(page);
        for k in &keys {
            tree.insert(k, &VALUE).expect("insert");
        }
        let mut i = 0usize;
        group.bench_with_input(BenchmarkId::new("point", page), &page, |b, _| {
            b.iter(|| {
                i = (i + 7919) % keys.len();
                black_box(tree.get(&keys[i]).expect("get"))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, insert, lookup);
criterion_main!(benches);
