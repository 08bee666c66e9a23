//! Criterion benchmarks of the buffer pool on 16 KiB pages of db_bench-style
//! text (compressible to 0.5) in 8 KiB zlib-6 blocks:
//! - `hit`: fix and release a page that has its frame (ns);
//! - `unzip_hit`: the frame was dropped, the fix decompresses the cached
//!   block (µs), next to the codec's own decompress of the same block;
//! - `miss`: the page was evicted, the fix reads its block from the file,
//!   verifies and decompresses it: from the io crate's memory file (the
//!   pool's own cost) and from a data file opened with the io crate's
//!   defaults (io_uring, O_DIRECT) under `target/`;
//! - `flush`: `flush_some` of 256 dirty pages, in batches of the file's
//!   queue depth through the write threads (depth 32, the default) and one
//!   page per batch (depth 1: the page-at-a-time path as before batching),
//!   on the memory file and on the O_DIRECT data file;
//! - `prefetch`: read 64 evicted pages ahead then fix them all, against
//!   64 plain misses, on the O_DIRECT data file.
//!
//! Run: `cargo bench -p barracuda-bench --bench pool`.

use std::hint::black_box;
use std::sync::Arc;

use barracuda_base::{BlockSize, Geometry, Lsn, PageId};
use barracuda_codec::{BlockCodec, Codec, PAGE_HEADER_RESERVED_BYTES, sample};
use barracuda_io::{BlockFile, IoOptions};
use barracuda_pool::{BufferPool, CodecService, FileService, PageFormat, PoolConfig, Services};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const PAGE_SIZE_BYTES: usize = 16 << 10;
const BLOCK_SIZE_BYTES: usize = 8 << 10;
/// Enough distinct pages that one page is not always in L1 cache.
const PAGE_COUNT: u64 = 64;
/// db_bench's default `compression_ratio`.
const RATIO: f64 = 0.5;

fn geometry() -> Geometry {
    Geometry::new(PAGE_SIZE_BYTES, BlockSize::Kib8).expect("16 KiB pages in 8 KiB blocks")
}

/// A pool with room for every page with its frame, filled with text pages,
/// flushed so that pages can be evicted.
fn pool(file: Arc<dyn BlockFile>) -> BufferPool {
    pool_of(file, PAGE_COUNT, barracuda_pool::FILE_QUEUE_DEPTH_DEFAULT)
}

/// As [`pool`], with `page_count` pages and batches of `queue_depth`.
fn pool_of(file: Arc<dyn BlockFile>, page_count: u64, queue_depth: usize) -> BufferPool {
    let services = Services {
        codec: Arc::new(CodecService::new(Codec::zlib_default(), geometry()).expect("zlib-6")),
        file: Arc::new(FileService::new(file).with_queue_depth(queue_depth)),
        durable_lsn: Arc::new(|| Lsn(u64::MAX)),
        clock: None,
    };
    let config = PoolConfig::default()
        .page_size_bytes(PAGE_SIZE_BYTES)
        .format(PageFormat::Compressed {
            block_size_bytes: BLOCK_SIZE_BYTES,
        })
        .buffer_pool_bytes(4 * page_count as usize * PAGE_SIZE_BYTES);
    let pool = BufferPool::open(config, services).expect("valid config");
    let mut rng = sample::rng(42);
    let mut text = vec![0; PAGE_SIZE_BYTES - PAGE_HEADER_RESERVED_BYTES];
    for page in 0..page_count {
        sample::fill_compressible(&mut rng, RATIO, &mut text);
        let mut guard = pool.create(PageId(page)).expect("room for every page");
        guard
            .write(PAGE_HEADER_RESERVED_BYTES, &text)
            .expect("in bounds");
        guard.commit(Lsn(page + 1)).expect("text at 0.5 fits 8 KiB");
    }
    pool.flush_all().expect("memory or local file");
    pool
}

fn hit_and_unzip(c: &mut Criterion) {
    let pool = pool(Arc::new(barracuda_io::MemoryFile::new("bench")));
    let mut group = c.benchmark_group("pool");
    group.throughput(Throughput::Elements(1));
    let mut page = 0;
    group.bench_function("hit", |b| {
        b.iter(|| {
            page = (page + 1) % PAGE_COUNT;
            black_box(pool.fix_shared(PageId(page)).expect("cached")[100]);
        })
    });
    group.throughput(Throughput::Bytes(PAGE_SIZE_BYTES as u64));
    group.bench_function("unzip_hit", |b| {
        b.iter(|| {
            page = (page + 1) % PAGE_COUNT;
            assert!(
                pool.drop_frame(PageId(page)),
                "frame of page {page} not droppable"
            );
            black_box(pool.fix_shared(PageId(page)).expect("cached")[100]);
        })
    });
    // The codec alone on the same kind of block: the floor of an unzip.
    let mut codec = BlockCodec::new(Codec::zlib_default(), geometry()).expect("zlib-6");
    let mut rng = sample::rng(42);
    let blocks: Vec<Vec<u8>> = (0..PAGE_COUNT)
        .map(|_| {
            let mut page = vec![0; PAGE_SIZE_BYTES];
            sample::fill_compressible(&mut rng, RATIO, &mut page[PAGE_HEADER_RESERVED_BYTES..]);
            let mut block = vec![0; BLOCK_SIZE_BYTES];
            let _ = codec
                .compress(&page, PageId(0), Lsn(1), &mut block)
                .expect("fits");
            block
        })
        .collect();
    let mut frame = vec![0; PAGE_SIZE_BYTES];
    group.bench_function("codec_decompress", |b| {
        b.iter(|| {
            page = (page + 1) % PAGE_COUNT;
            black_box(
                codec
                    .decompress(&blocks[page as usize], &mut frame)
                    .expect("valid"),
            );
        })
    });
    group.finish();
    println!("{}", pool.status().render());
}

fn miss(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool_miss");
    group.throughput(Throughput::Bytes(PAGE_SIZE_BYTES as u64));
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-pool.data");
    let files: Vec<(&str, Arc<dyn BlockFile>)> = vec![
        ("memory", Arc::new(barracuda_io::MemoryFile::new("bench"))),
        (
            "file-odirect",
            barracuda_io::open(&path, &IoOptions::default()).expect("data file under target/"),
        ),
    ];
    for (name, file) in files {
        let pool = pool(file);
        let mut page = 0;
        group.bench_function(BenchmarkId::new("miss", name), |b| {
            b.iter(|| {
                page = (page + 1) % PAGE_COUNT;
                assert!(pool.evict(PageId(page)), "page {page} not evictable");
                black_box(pool.fix_shared(PageId(page)).expect("readable")[100]);
            })
        });
        println!("{name}: {}", pool.status().render());
    }
    group.finish();
}

/// Dirty pages per `flush` iteration.
const FLUSH_PAGE_COUNT: u64 = 256;

fn flush(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool_flush");
    group.throughput(Throughput::Elements(FLUSH_PAGE_COUNT));
    group.sample_size(20);
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-flush.data");
    for (name, odirect) in [("memory", false), ("file-odirect", true)] {
        let file: Arc<dyn BlockFile> = if odirect {
            barracuda_io::open(&path, &IoOptions::default()).expect("data file under target/")
        } else {
            Arc::new(barracuda_io::MemoryFile::new("bench"))
        };
        for depth in [1, barracuda_pool::FILE_QUEUE_DEPTH_DEFAULT] {
            let pool = pool_of(Arc::clone(&file), FLUSH_PAGE_COUNT, depth);
            let mut lsn = FLUSH_PAGE_COUNT;
            let id = BenchmarkId::new(format!("{name}-depth{depth}"), FLUSH_PAGE_COUNT);
            group.bench_function(id, |b| {
                b.iter_batched(
                    || {
                        for page in 0..FLUSH_PAGE_COUNT {
                            lsn += 1;
                            let mut guard = pool.fix_exclusive(PageId(page)).expect("cached");
                            guard
                                .write(PAGE_HEADER_RESERVED_BYTES, &lsn.to_le_bytes())
                                .expect("in bounds");
                            guard.commit(Lsn(lsn)).expect("a patch fits");
                        }
                    },
                    |()| {
                        let written = pool.flush_some(usize::MAX).expect("writable");
                        assert_eq!(written as u64, FLUSH_PAGE_COUNT);
                    },
                    BatchSize::PerIteration,
                )
            });
            println!("{name} depth {depth}: {}", pool.status().render());
        }
    }
    group.finish();
}

/// Pages per `prefetch` iteration.
const PREFETCH_PAGE_COUNT: u64 = 64;

fn prefetch(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool_prefetch");
    group.throughput(Throughput::Elements(PREFETCH_PAGE_COUNT));
    group.sample_size(20);
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-prefetch.data");
    let file = barracuda_io::open(&path, &IoOptions::default()).expect("data file under target/");
    let pool = pool_of(
        file,
        PREFETCH_PAGE_COUNT,
        barracuda_pool::FILE_QUEUE_DEPTH_DEFAULT,
    );
    let ids: Vec<PageId> = (0..PREFETCH_PAGE_COUNT).map(PageId).collect();
    let evict_all = || {
        for &id in &ids {
            assert!(pool.evict(id), "{id} not evictable");
        }
    };
    for read_ahead in [false, true] {
        let name = if read_ahead {
            "prefetch_then_fix"
        } else {
            "fix_misses"
        };
        group.bench_function(name, |b| {
            b.iter_batched(
                evict_all,
                |()| {
                    if read_ahead {
                        pool.prefetch(&ids);
                    }
                    for &id in &ids {
                        black_box(pool.fix_shared(id).expect("readable")[100]);
                    }
                },
                BatchSize::PerIteration,
            )
        });
    }
    println!("prefetch: {}", pool.status().render());
    group.finish();
}

criterion_group!(benches, hit_and_unzip, miss, flush, prefetch);
criterion_main!(benches);
