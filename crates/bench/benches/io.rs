//! Criterion benchmarks of the file layer's submit/complete path: the cost
//! of a batch round trip on the memory backend (pure overhead: hand-off,
//! buffers, completions), of batches of 16 KiB O_DIRECT reads through one
//! io_uring I/O thread, and of single 16 KiB O_DIRECT reads through io_uring
//! (direct on the caller's ring, and through one I/O thread) and pread on a
//! small file under the target directory.

use std::hint::black_box;
use std::sync::Arc;

use barracuda_io::{
    Backend, BlockFile, CompletionQueue, FlushMethod, IoOptions, IoRequest, MemoryFile,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const BLOCK_BYTES: usize = 16 << 10;
/// Small enough to create quickly, large enough to span many blocks.
const FILE_BYTES: u64 = 64 << 20;

fn batch_round_trip(file: &dyn BlockFile, queue: &CompletionQueue, batch: &mut Vec<IoRequest>) {
    let count = batch.len();
    file.submit(std::mem::take(batch), &queue.sender());
    for _ in 0..count {
        let completion = queue.wait();
        black_box(&completion.result);
        batch.push(IoRequest::read(
            completion.offset_bytes,
            completion.buf,
            completion.tag,
        ));
    }
}

fn memory_batches(c: &mut Criterion) {
    let file = MemoryFile::new("bench");
    file.set_len(FILE_BYTES).expect("set_len of a memory file");
    let mut group = c.benchmark_group("submit_complete/memory");
    for batch_size in [1u64, 8, 32] {
        group.throughput(Throughput::Elements(batch_size));
        let queue = CompletionQueue::new();
        let mut batch: Vec<IoRequest> = (0..batch_size)
            .map(|i| IoRequest::read(i * BLOCK_BYTES as u64, file.alloc_buf(BLOCK_BYTES), i))
            .collect();
        group.bench_function(BenchmarkId::from_parameter(batch_size), |b| {
            b.iter(|| batch_round_trip(&file, &queue, &mut batch));
        });
    }
    group.finish();
}

fn disk_file(backend: Backend, direct_reads: bool, dir: &std::path::Path) -> Arc<dyn BlockFile> {
    let options = IoOptions::default()
        .backend(backend)
        .flush_method(FlushMethod::ODirect)
        .read_io_threads(1)
        .direct_reads(direct_reads);
    let file = barracuda_io::open(&dir.join("bench.dat"), &options).expect("open the bench file");
    if file.len().expect("len") < FILE_BYTES {
        let mut chunk = file.alloc_buf(1 << 20);
        chunk.fill(0x5A);
        for offset in (0..FILE_BYTES).step_by(1 << 20) {
            file.write_at(offset, &chunk).expect("fill the bench file");
        }
        file.sync_data().expect("sync the bench file");
    }
    file
}

fn disk_reads(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch dir under target/");
    let mut group = c.benchmark_group("read_16k_odirect");
    group.throughput(Throughput::Bytes(BLOCK_BYTES as u64));
    group.sample_size(20);
    let block_count = FILE_BYTES / BLOCK_BYTES as u64;
    for (name, backend, direct) in [
        ("uring_direct", Backend::Uring, true),
        ("uring_thread", Backend::Uring, false),
        ("pread", Backend::Pread, true),
    ] {
        let file = disk_file(backend, direct, dir.path());
        let mut buf = file.alloc_buf(BLOCK_BYTES);
        let mut block: u64 = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                // A stride of 7919 (prime) blocks defeats any read-ahead.
                block = (block + 7919) % block_count;
                file.read_at(block * BLOCK_BYTES as u64, &mut buf)
                    .expect("read");
            });
        });
    }
    group.finish();
}

fn uring_batches(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch dir under target/");
    let file = disk_file(Backend::Uring, false, dir.path());
    let block_count = FILE_BYTES / BLOCK_BYTES as u64;
    let mut group = c.benchmark_group("submit_complete/uring_thread");
    group.sample_size(20);
    for batch_size in [1u64, 8, 32] {
        group.throughput(Throughput::Elements(batch_size));
        let queue = CompletionQueue::new();
        // Spread over the file (a prime stride) so no two reads share a block.
        let mut batch: Vec<IoRequest> = (0..batch_size)
            .map(|i| {
                let block = (i * 7919) % block_count;
                IoRequest::read(block * BLOCK_BYTES as u64, file.alloc_buf(BLOCK_BYTES), i)
            })
            .collect();
        group.bench_function(BenchmarkId::from_parameter(batch_size), |b| {
            b.iter(|| batch_round_trip(file.as_ref(), &queue, &mut batch));
        });
    }
    group.finish();
}

criterion_group!(benches, memory_batches, uring_batches, disk_reads);
criterion_main!(benches);
