//! The conformance suite: written once, generic over the backend, run for
//! every backend and flush method. Each check compares the file against a
//! model (a `Vec<u8>`).

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use barracuda_io::{
    AlignedBuf, Backend, BlockFile, CompletionQueue, FaultConfig, FaultFile, FlushMethod, IoError,
    IoOptions, IoRequest, MemoryFile, ZERO_WRITE_BYTES_MAX,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Every request in the suite is a multiple of this (4 KiB also satisfies
/// devices with 4 KiB logical blocks).
const UNIT_BYTES: usize = 4096;
/// The region random operations touch.
const SPAN_UNITS: u64 = 64;

fn scratch_dir() -> tempfile::TempDir {
    // Never /tmp-if-tmpfs: O_DIRECT needs a real filesystem (ext4 here).
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// A backend under test and the directory keeping its file alive.
struct Subject {
    file: Arc<dyn BlockFile>,
    _dir: Option<tempfile::TempDir>,
}

fn disk(options: IoOptions) -> Subject {
    let dir = scratch_dir();
    let path: PathBuf = dir.path().join("data");
    let file = barracuda_io::open(&path, &options).unwrap();
    Subject {
        file,
        _dir: Some(dir),
    }
}

fn memory() -> Subject {
    Subject {
        file: Arc::new(MemoryFile::new("memory")),
        _dir: None,
    }
}

fn unit_buf(file: &dyn BlockFile, units: usize, fill: u8) -> AlignedBuf {
    let mut buf = AlignedBuf::zeroed(units * UNIT_BYTES, file.alignment().mem_bytes);
    buf.fill(fill);
    buf
}

fn random_data(file: &dyn BlockFile, rng: &mut SmallRng, units: usize) -> AlignedBuf {
    let mut buf = unit_buf(file, units, 0);
    rng.fill(&mut buf[..]);
    buf
}

fn write_model(model: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if model.len() < offset + data.len() {
        model.resize(offset + data.len(), 0);
    }
    model[offset..offset + data.len()].copy_from_slice(data);
}

/// Random reads, writes (of data and of zeros), batches, syncs and length
/// changes against a model.
fn random_ops_match_model(file: &dyn BlockFile, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model: Vec<u8> = Vec::new();
    for step in 0..600 {
        let units = rng.random_range(1..=4usize);
        let offset = rng.random_range(0..SPAN_UNITS) as usize * UNIT_BYTES;
        match rng.random_range(0..100) {
            0..30 => {
                let data = random_data(file, &mut rng, units);
                file.write_at(offset as u64, &data).unwrap();
                write_model(&mut model, offset, &data);
            }
            30..36 => {
                // Several buffers written as one range.
                let parts: Vec<AlignedBuf> = (0..units)
                    .map(|_| {
                        let part_units = rng.random_range(1..=2usize);
                        random_data(file, &mut rng, part_units)
                    })
                    .collect();
                let bufs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
                file.write_vectored_at(offset as u64, &bufs).unwrap();
                write_model(&mut model, offset, &bufs.concat());
            }
            36..40 => {
                // Now and then more zeros than one write of them takes.
                let len = if rng.random_range(0..4) == 0 {
                    ZERO_WRITE_BYTES_MAX as usize + units * UNIT_BYTES
                } else {
                    units * UNIT_BYTES
                };
                file.write_zeros(offset as u64, len as u64).unwrap();
                write_model(&mut model, offset, &vec![0; len]);
            }
            40..75 => check_read(file, &model, offset, units, step),
            75..85 => batch_round(file, &mut model, &mut rng),
            85..95 => file.sync_data().unwrap(),
            _ => {
                let len = rng.random_range(0..SPAN_UNITS) as usize * UNIT_BYTES;
                file.set_len(len as u64).unwrap();
                model.resize(len, 0);
            }
        }
        assert_eq!(
            file.len().unwrap(),
            model.len() as u64,
            "length after step {step}"
        );
    }
}

fn check_read(file: &dyn BlockFile, model: &[u8], offset: usize, units: usize, step: usize) {
    let mut buf = unit_buf(file, units, 0xEE);
    let result = file.read_at(offset as u64, &mut buf);
    if offset + buf.len() <= model.len() {
        result.unwrap();
        assert!(
            buf[..] == model[offset..offset + buf.len()],
            "read at {offset} differs at step {step}"
        );
    } else {
        assert!(
            matches!(result, Err(IoError::ReadPastEnd { .. })),
            "step {step}: {result:?}"
        );
    }
}

/// A batch of non-overlapping writes, then a batch reading them back.
fn batch_round(file: &dyn BlockFile, model: &mut Vec<u8>, rng: &mut SmallRng) {
    let count = rng.random_range(1..=8u64);
    let first = rng.random_range(0..SPAN_UNITS - count);
    let writes = (0..count)
        .map(|i| {
            IoRequest::write(
                (first + i) * UNIT_BYTES as u64,
                random_data(file, rng, 1),
                i,
            )
        })
        .collect::<Vec<_>>();
    for request in &writes {
        write_model(model, request.offset_bytes as usize, &request.buf);
    }
    let done = file.submit_and_wait(writes);
    assert_eq!(done.len(), count as usize);
    assert!(done.iter().all(|c| c.result.is_ok()), "{done:?}");
    let queue = CompletionQueue::new();
    let reads = (0..count)
        .map(|i| {
            IoRequest::read(
                (first + i) * UNIT_BYTES as u64,
                file.alloc_buf(UNIT_BYTES),
                i,
            )
        })
        .collect();
    file.submit(reads, &queue.sender());
    let mut tags_seen = vec![false; count as usize];
    for completion in queue.wait_many(count as usize) {
        completion.result.unwrap();
        let at = completion.offset_bytes as usize;
        assert!(
            completion.buf[..] == model[at..at + UNIT_BYTES],
            "batched read at {at}"
        );
        tags_seen[completion.tag as usize] = true;
    }
    assert!(
        tags_seen.iter().all(|&seen| seen),
        "every request completes exactly once"
    );
    assert!(queue.try_next().is_none());
}

/// 16 threads at once: each owns a region it writes, reads and syncs,
/// and all of them read a shared region written before they start.
fn sixteen_threads(file: &Arc<dyn BlockFile>) {
    const THREADS: u64 = 16;
    const REGION_UNITS: u64 = 8;
    let shared_base = THREADS * REGION_UNITS * UNIT_BYTES as u64;
    let shared = random_data(file.as_ref(), &mut SmallRng::seed_from_u64(99), 4);
    file.write_at(shared_base, &shared).unwrap();
    let shared = Arc::new(shared.to_vec());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (file, shared) = (Arc::clone(file), Arc::clone(&shared));
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let base = t * REGION_UNITS * UNIT_BYTES as u64;
                let mut model = vec![0u8; (REGION_UNITS as usize) * UNIT_BYTES];
                for _ in 0..150 {
                    let unit = rng.random_range(0..REGION_UNITS) as usize;
                    let at = unit * UNIT_BYTES;
                    match rng.random_range(0..10) {
                        0..4 => {
                            let data = random_data(file.as_ref(), &mut rng, 1);
                            file.write_at(base + at as u64, &data).unwrap();
                            model[at..at + UNIT_BYTES].copy_from_slice(&data);
                        }
                        4..6 => {
                            let mut buf = file.alloc_buf(4 * UNIT_BYTES);
                            file.read_at(shared_base, &mut buf).unwrap();
                            assert!(buf[..] == shared[..], "shared region, thread {t}");
                        }
                        6 => file.sync_data().unwrap(),
                        _ => {
                            let mut buf = file.alloc_buf(UNIT_BYTES);
                            file.read_at(base + at as u64, &mut buf).unwrap();
                            assert!(
                                buf[..] == model[at..at + UNIT_BYTES],
                                "thread {t} unit {unit}"
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

/// Misaligned offsets, lengths and buffers fail clearly and change nothing.
fn misaligned_requests_fail_clearly(file: &dyn BlockFile) {
    let data = unit_buf(file, 2, 7);
    file.write_at(0, &data).unwrap();
    let odd = file.write_at(100, &data);
    assert!(
        matches!(
            odd,
            Err(IoError::Misaligned {
                offset_bytes: 100,
                ..
            })
        ),
        "{odd:?}"
    );
    let vectored = file.write_vectored_at(0, &[&data[..], &data[..100]]);
    assert!(
        matches!(vectored, Err(IoError::Misaligned { .. })),
        "{vectored:?}"
    );
    let short = file.write_at(0, &data[..100]);
    assert!(
        matches!(short, Err(IoError::Misaligned { len_bytes: 100, .. })),
        "{short:?}"
    );
    let mut big = unit_buf(file, 3, 0);
    let shifted = file.read_at(0, &mut big[1..1 + UNIT_BYTES]);
    assert!(
        matches!(shifted, Err(IoError::Misaligned { .. })),
        "{shifted:?}"
    );
    let message = shifted.unwrap_err().to_string();
    assert!(message.contains("misaligned read"), "{message}");
    assert!(matches!(
        file.set_len(1000),
        Err(IoError::Misaligned { .. })
    ));
    let mut back = unit_buf(file, 2, 0);
    file.read_at(0, &mut back).unwrap();
    assert!(back[..] == data[..], "a refused request changed nothing");
}

/// Pool buffers run out and come back; more buffers than the pool still work.
fn many_buffers(file: &dyn BlockFile) {
    let data = unit_buf(file, 1, 3);
    file.write_at(0, &data).unwrap();
    let queue = CompletionQueue::new();
    let count = 200;
    let reads = (0..count)
        .map(|i| IoRequest::read(0, file.alloc_buf(UNIT_BYTES), i))
        .collect();
    file.submit(reads, &queue.sender());
    for completion in queue.wait_many(count as usize) {
        completion.result.unwrap();
        assert!(completion.buf[..] == data[..]);
    }
}

macro_rules! conformance {
    ($name:ident, $make:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn random_ops() {
                for seed in 0..3 {
                    let subject = $make;
                    random_ops_match_model(subject.file.as_ref(), seed);
                }
            }

            #[test]
            fn concurrent() {
                let subject = $make;
                sixteen_threads(&subject.file);
            }

            #[test]
            fn misaligned() {
                let subject = $make;
                misaligned_requests_fail_clearly(subject.file.as_ref());
            }

            #[test]
            fn buffers() {
                let subject = $make;
                many_buffers(subject.file.as_ref());
            }
        }
    };
}

fn options(backend: Backend, flush_method: FlushMethod) -> IoOptions {
    IoOptions::default()
        .backend(backend)
        .flush_method(flush_method)
}

conformance!(memory_backend, memory());
conformance!(
    pread_fsync,
    disk(options(Backend::Pread, FlushMethod::Fsync))
);
conformance!(
    pread_odsync,
    disk(options(Backend::Pread, FlushMethod::ODsync))
);
conformance!(
    pread_odirect,
    disk(options(Backend::Pread, FlushMethod::ODirect))
);
conformance!(
    uring_fsync,
    disk(options(Backend::Uring, FlushMethod::Fsync))
);
conformance!(
    uring_odirect,
    disk(options(Backend::Uring, FlushMethod::ODirect))
);
conformance!(
    uring_odirect_nofsync,
    disk(options(Backend::Uring, FlushMethod::ODirectNoFsync))
);
conformance!(
    uring_reads_through_threads,
    disk(
        options(Backend::Uring, FlushMethod::ODirect)
            .direct_reads(false)
            .read_io_threads(2)
            .queue_depth(4)
    )
);
conformance!(
    uring_one_thread_depth_one,
    disk(
        options(Backend::Uring, FlushMethod::ODirect)
            .read_io_threads(1)
            .write_io_threads(1)
            .queue_depth(1)
    )
);
conformance!(
    uring_sqpoll,
    disk(
        options(Backend::Uring, FlushMethod::ODirect)
            .sqpoll(true)
            .read_io_threads(1)
            .write_io_threads(1)
    )
);
conformance!(auto_backend, disk(IoOptions::default()));
conformance!(
    fault_over_memory,
    Subject {
        file: Arc::new(FaultFile::new(
            memory().file,
            FaultConfig::default().seed(5)
        )),
        _dir: None
    }
);
conformance!(fault_over_uring_with_latency, {
    let inner = disk(options(Backend::Uring, FlushMethod::ODirect));
    let config = FaultConfig::default()
        .seed(6)
        .latency(Duration::from_micros(20));
    Subject {
        file: Arc::new(FaultFile::new(inner.file, config)),
        _dir: inner._dir,
    }
});
