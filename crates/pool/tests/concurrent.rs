//! Sixteen threads fixing, modifying and releasing pages of a pool much
//! smaller than the data, with a background flusher and a thread checking
//! invariants, checked against a model at the end.
//!
//! Each thread owns the pages `p` with `p % THREAD_COUNT == thread` and is
//! their only writer, so its own model of their versions is exact; readers
//! of any page check that the page is self-consistent (never torn, never
//! another page's bytes).

// Test helpers outside `#[test]` functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use barracuda_base::{BlockSize, Geometry, Lsn, PageId};
use barracuda_codec::{Codec, PAGE_HEADER_RESERVED_BYTES};
use barracuda_pool::{
    BufferPool, CodecService, CommitOutcome, EvictionPolicy, FileService, PageFormat, PoolConfig,
    Services,
};

const THREAD_COUNT: u64 = 16;
const PAGE_COUNT: u64 = 320;
const PAGE_SIZE_BYTES: usize = 16 << 10;
const BLOCK_SIZE_BYTES: usize = 8 << 10;
/// 64 chunks (1 MiB): room for 128 blocks, or 64 frames: the 16 threads pin
/// at most 32 pages, and the 320 pages' blocks take 2.5 MiB.
const CHUNK_COUNT: usize = 64;
const OPS_PER_THREAD: u64 = 2000;
/// Where the version stamp lives: right after the codec's header.
const STAMP_OFFSET: usize = PAGE_HEADER_RESERVED_BYTES;
const BODY_OFFSET: usize = STAMP_OFFSET + 16;
const BODY_BYTES: usize = 512;

/// The bytes a page holds at a version: a stamp (page, version) and a body
/// derived from both.
fn body(page: u64, version: u64) -> Vec<u8> {
    (0..BODY_BYTES)
        .map(|i| ((page * 31 + version * 7 + i as u64 / 16) % 251) as u8)
        .collect()
}

fn check_page(page: u64, bytes: &[u8]) -> u64 {
    let stamp_page = u64::from_le_bytes(bytes[STAMP_OFFSET..STAMP_OFFSET + 8].try_into().unwrap());
    let version = u64::from_le_bytes(
        bytes[STAMP_OFFSET + 8..STAMP_OFFSET + 16]
            .try_into()
            .unwrap(),
    );
    assert_eq!(
        stamp_page, page,
        "page {page} holds page {stamp_page}'s bytes"
    );
    assert!(
        bytes[BODY_OFFSET..BODY_OFFSET + BODY_BYTES] == body(page, version)[..],
        "page {page} v{version} torn"
    );
    version
}

fn open(policy: EvictionPolicy) -> Arc<BufferPool> {
    let geometry = Geometry::new(PAGE_SIZE_BYTES, BlockSize::Kib8).unwrap();
    let services = Services {
        codec: Arc::new(CodecService::new(Codec::zlib_default(), geometry).unwrap()),
        file: Arc::new(FileService::new(Arc::new(barracuda_io::MemoryFile::new(
            "concurrent",
        )))),
        durable_lsn: Arc::new(|| Lsn(u64::MAX)),
        clock: None,
    };
    let config = PoolConfig::default()
        .page_size_bytes(PAGE_SIZE_BYTES)
        .format(PageFormat::Compressed {
            block_size_bytes: BLOCK_SIZE_BYTES,
        })
        .buffer_pool_bytes(CHUNK_COUNT * PAGE_SIZE_BYTES)
        .eviction_policy(policy)
        .old_blocks_time_ms(5);
    Arc::new(BufferPool::open(config, services).unwrap())
}

fn write_version(pool: &BufferPool, page: u64, version: u64, lsn: &AtomicU64) {
    let mut guard = pool.fix_exclusive(PageId(page)).unwrap();
    let mut stamp = page.to_le_bytes().to_vec();
    stamp.extend_from_slice(&version.to_le_bytes());
    guard.write(STAMP_OFFSET, &stamp).unwrap();
    guard.write(BODY_OFFSET, &body(page, version)).unwrap();
    let outcome = guard
        .commit(Lsn(lsn.fetch_add(1, Ordering::Relaxed)))
        .unwrap();
    assert_eq!(
        outcome,
        CommitOutcome::Fits,
        "a 16 KiB page with 0.5 KiB of data fits 8 KiB"
    );
}

/// One worker: writes its own pages, reads anyone's, sometimes holds two
/// shared latches (in page order, the tree's rule) across fixes.
fn worker(pool: &BufferPool, thread: u64, lsn: &AtomicU64) -> Vec<u64> {
    let own: Vec<u64> = (0..PAGE_COUNT)
        .filter(|p| p % THREAD_COUNT == thread)
        .collect();
    let mut versions = vec![0u64; own.len()];
    let mut state = thread * 7919 + 1;
    for _ in 0..OPS_PER_THREAD {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let choice = (state >> 33) % 10;
        // A skewed key choice: half the reads go to the first 32 pages.
        let any = if (state >> 20).is_multiple_of(2) {
            (state >> 40) % 32
        } else {
            (state >> 40) % PAGE_COUNT
        };
        match choice {
            0..=2 => {
                let index = ((state >> 45) as usize) % own.len();
                versions[index] += 1;
                write_version(pool, own[index], versions[index], lsn);
            }
            3 => {
                let (low, high) = (any.min(any ^ 1), any.max(any ^ 1));
                let first = pool.fix_shared(PageId(low)).unwrap();
                let second = pool.fix_shared(PageId(high)).unwrap();
                check_page(low, first.page());
                check_page(high, second.page());
            }
            9 if (state >> 50).is_multiple_of(4) => {
                // Read-ahead of a few pages others may be fixing right now.
                let ids: Vec<PageId> = (any..any + 4).map(|p| PageId(p % PAGE_COUNT)).collect();
                pool.prefetch(&ids);
            }
            _ => {
                let guard = pool.fix_shared(PageId(any)).unwrap();
                let version = check_page(any, guard.page());
                if any % THREAD_COUNT == thread {
                    let index = own.iter().position(|&p| p == any).unwrap();
                    assert_eq!(version, versions[index], "own page {any} lost a write");
                }
            }
        }
    }
    versions
}

fn run(policy: EvictionPolicy) {
    let pool = open(policy);
    let lsn = Arc::new(AtomicU64::new(1));
    for page in 0..PAGE_COUNT {
        let created = pool.create(PageId(page)).unwrap().commit(Lsn(0)).unwrap();
        assert_eq!(created, CommitOutcome::Fits);
        write_version(&pool, page, 0, &lsn);
    }
    let flusher = pool.spawn_flusher(Duration::from_millis(2), 16);
    let stop = Arc::new(AtomicBool::new(false));
    let checker = {
        let (pool, stop) = (Arc::clone(&pool), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut checks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                pool.check_invariants();
                checks += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            checks
        })
    };
    let workers: Vec<_> = (0..THREAD_COUNT)
        .map(|thread| {
            let (pool, lsn) = (Arc::clone(&pool), Arc::clone(&lsn));
            std::thread::spawn(move || worker(&pool, thread, &lsn))
        })
        .collect();
    let finals: Vec<Vec<u64>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let checks = checker.join().unwrap();
    drop(flusher);
    pool.check_invariants();
    for page in 0..PAGE_COUNT {
        let thread = page % THREAD_COUNT;
        let index = (page / THREAD_COUNT) as usize;
        let guard = pool.fix_shared(PageId(page)).unwrap();
        assert_eq!(
            check_page(page, guard.page()),
            finals[thread as usize][index],
            "page {page}"
        );
    }
    pool.check_invariants();
    let status = pool.status();
    assert!(checks > 0);
    assert!(
        status.pages_read > 0
            && status.pages_evicted > 0
            && status.unzips > 0
            && status.read_ahead > 0,
        "{}",
        status.render()
    );
    assert!(status.bytes_used <= status.budget_bytes);
    // Dirty data survives: everything flushed can be read back from the file.
    pool.flush_all().unwrap();
    assert_eq!(pool.dirty_page_count(), 0);
}

#[test]
fn sixteen_threads_cost_aware() {
    run(EvictionPolicy::CostAware);
}

#[test]
fn sixteen_threads_innodb() {
    run(EvictionPolicy::InnoDb);
}
