//! Criterion benchmarks of the codec layer: compress and decompress 16 KiB
//! pages with zlib 1 and 6, zstd 1 and 3 and none, each next to the raw
//! library call on the same bytes with the same context reuse (one context,
//! reset per page) as the floor.
//!
//! Pages are db_bench-style text compressible to 0.5; set
//! `BARRACUDA_BENCH_CORPUS=/path/to/text` to slice pages from a real text file
//! instead. Run: `cargo bench -p barracuda-bench --bench codec`.

use std::hint::black_box;

use barracuda_base::{BLOCK_HEADER_BYTES, BlockSize, Geometry, Lsn, PageId};
use barracuda_codec::{BlockCodec, Codec, CompressOutcome, read_header, sample};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

const PAGE_BYTES: usize = 16 << 10;
/// Enough distinct pages that the benchmark is not one page in L1 cache.
const PAGE_COUNT: usize = 32;
/// db_bench's default `compression_ratio`.
const RATIO: f64 = 0.5;

fn pages() -> Vec<Vec<u8>> {
    let corpus = std::env::var_os("BARRACUDA_BENCH_CORPUS")
        .map(|path| std::fs::read(&path).expect("BARRACUDA_BENCH_CORPUS must be a readable file"));
    let mut rng = sample::rng(42);
    (0..PAGE_COUNT)
        .map(|_| {
            let mut page = vec![0; PAGE_BYTES];
            match &corpus {
                Some(text) => sample::fill_from_corpus(&mut rng, text, &mut page),
                None => sample::fill_compressible(&mut rng, RATIO, &mut page),
            }
            page
        })
        .collect()
}

fn configs() -> Vec<(&'static str, Codec)> {
    vec![
        ("zlib-1", Codec::Zlib { level: 1 }),
        ("zlib-6", Codec::Zlib { level: 6 }),
        (
            "zstd-1",
            Codec::Zstd {
                level: 1,
                dictionary: None,
            },
        ),
        (
            "zstd-3",
            Codec::Zstd {
                level: 3,
                dictionary: None,
            },
        ),
        ("none", Codec::None),
    ]
}

fn block_codec(codec: &Codec) -> BlockCodec {
    let block_size = if *codec == Codec::None {
        BlockSize::Uncompressed
    } else {
        BlockSize::Kib16
    };
    let geometry = Geometry::new(PAGE_BYTES, block_size).expect("16 KiB pages, 16 KiB blocks");
    BlockCodec::new(codec.clone(), geometry).expect("valid levels")
}

/// The raw library, one context per direction reused with a reset per page,
/// exactly as `BlockCodec` does.
// One value per benchmark: the size difference between variants is irrelevant.
#[allow(clippy::large_enum_variant)]
enum Raw {
    Zlib(Compress, Decompress),
    Zstd(
        zstd::bulk::Compressor<'static>,
        zstd::bulk::Decompressor<'static>,
    ),
    Copy,
}

impl Raw {
    fn new(codec: &Codec) -> Raw {
        match codec {
            Codec::Zlib { level } => Raw::Zlib(
                Compress::new(Compression::new(*level), true),
                Decompress::new(true),
            ),
            Codec::Zstd { level, .. } => Raw::Zstd(
                zstd::bulk::Compressor::new(*level).expect("zstd context"),
                zstd::bulk::Decompressor::new().expect("zstd context"),
            ),
            _ => Raw::Copy,
        }
    }

    fn compress(&mut self, input: &[u8], out: &mut [u8]) -> usize {
        match self {
            Raw::Zlib(c, _) => {
                c.reset();
                let status = c
                    .compress(input, out, FlushCompress::Finish)
                    .expect("deflate");
                assert_eq!(status, Status::StreamEnd);
                c.total_out() as usize
            }
            Raw::Zstd(c, _) => c.compress_to_buffer(input, out).expect("zstd compress"),
            Raw::Copy => {
                out[..input.len()].copy_from_slice(input);
                input.len()
            }
        }
    }

    fn decompress(&mut self, input: &[u8], out: &mut [u8]) {
        match self {
            Raw::Zlib(_, d) => {
                d.reset(true);
                let status = d
                    .decompress(input, out, FlushDecompress::Finish)
                    .expect("inflate");
                assert_eq!(status, Status::StreamEnd);
            }
            Raw::Zstd(_, d) => {
                d.decompress_to_buffer(input, out).expect("zstd decompress");
            }
            Raw::Copy => out.copy_from_slice(input),
        }
    }
}

/// Each page compressed into a block, and the compressed image alone (the
/// same bytes the raw decompressor gets).
fn blocks(coder: &mut BlockCodec, pages: &[Vec<u8>]) -> Vec<(Vec<u8>, Vec<u8>)> {
    pages
        .iter()
        .enumerate()
        .map(|(i, page)| {
            let mut block = vec![0; coder.geometry().block_size_bytes()];
            let outcome = coder
                .compress(page, PageId(i as u64), Lsn(1), &mut block)
                .expect("compress");
            assert!(
                matches!(outcome, CompressOutcome::Fits { .. }),
                "bench pages must fit 16 KiB blocks"
            );
            let header = read_header(&block).expect("a fresh block");
            let image = block[BLOCK_HEADER_BYTES..BLOCK_HEADER_BYTES + header.compressed_len_bytes]
                .to_vec();
            (block, image)
        })
        .collect()
}

fn bench_compress(c: &mut Criterion) {
    let pages = pages();
    let mut group = c.benchmark_group("codec/compress");
    group.throughput(Throughput::Bytes(PAGE_BYTES as u64));
    for (name, codec) in configs() {
        let mut coder = block_codec(&codec);
        let mut block = vec![0; coder.geometry().block_size_bytes()];
        let mut i = 0;
        group.bench_function(BenchmarkId::new("barracuda", name), |b| {
            b.iter(|| {
                i = (i + 1) % pages.len();
                coder
                    .compress(black_box(&pages[i]), PageId(1), Lsn(1), &mut block)
                    .expect("compress")
            })
        });
        let mut raw = Raw::new(&codec);
        let mut out = vec![0; 2 * PAGE_BYTES];
        group.bench_function(BenchmarkId::new("raw", name), |b| {
            b.iter(|| {
                i = (i + 1) % pages.len();
                raw.compress(black_box(&pages[i][BLOCK_HEADER_BYTES..]), &mut out)
            })
        });
    }
    group.finish();
}

fn bench_decompress(c: &mut Criterion) {
    let pages = pages();
    let mut group = c.benchmark_group("codec/decompress");
    group.throughput(Throughput::Bytes(PAGE_BYTES as u64));
    for (name, codec) in configs() {
        let mut coder = block_codec(&codec);
        let blocks = blocks(&mut coder, &pages);
        let mut frame = vec![0; PAGE_BYTES];
        let mut i = 0;
        group.bench_function(BenchmarkId::new("barracuda", name), |b| {
            b.iter(|| {
                i = (i + 1) % blocks.len();
                coder
                    .decompress(black_box(&blocks[i].0), &mut frame)
                    .expect("decompress")
            })
        });
        let mut raw = Raw::new(&codec);
        let mut body = vec![0; PAGE_BYTES - BLOCK_HEADER_BYTES];
        group.bench_function(BenchmarkId::new("raw", name), |b| {
            b.iter(|| {
                i = (i + 1) % blocks.len();
                raw.decompress(black_box(&blocks[i].1), &mut body)
            })
        });
    }
    group.finish();
}

fn config() -> Criterion {
    // Short runs: the machine is shared; medians over many 16 KiB pages are stable.
    Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_compress, bench_decompress
}
criterion_main!(benches);
