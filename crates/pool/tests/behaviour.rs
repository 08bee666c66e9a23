//! Behaviours of the pool one at a time: the write-ahead rule, rollback of a
//! page that no longer fits, one I/O for concurrent misses of one page, and
//! scan resistance of the midpoint LRU.

// Test helpers outside `#[test]` functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use barracuda_base::{BlockSize, Geometry, Lsn, PageId};
use barracuda_codec::{Codec, PAGE_HEADER_RESERVED_BYTES};
use barracuda_io::BlockFile;
use barracuda_pool::testing::{MemoryFile, SimpleCodec};
use barracuda_pool::{
    Access, BufferPool, CodecService, CommitOutcome, EvictionPolicy, FileService, ManualClock,
    PageFile, PageFormat, PoolConfig, Result, Services,
};

fn simple_pool(
    format: PageFormat,
    chunk_count: usize,
    file: Arc<dyn PageFile>,
    durable: Arc<AtomicU64>,
    clock: Option<ManualClock>,
) -> BufferPool {
    let services = Services {
        codec: Arc::new(if format == PageFormat::Uncompressed {
            SimpleCodec::stored()
        } else {
            SimpleCodec::default()
        }),
        file,
        durable_lsn: Arc::new(move || Lsn(durable.load(Ordering::Relaxed))),
        clock,
    };
    let config = PoolConfig::default()
        .page_size_bytes(4096)
        .format(format)
        .buffer_pool_bytes(chunk_count * 4096);
    BufferPool::open(config, services).unwrap()
}

#[test]
fn a_page_is_written_only_after_the_log_is_durable_up_to_its_lsn() {
    let file = Arc::new(MemoryFile::default());
    let durable = Arc::new(AtomicU64::new(5));
    let pool = simple_pool(
        PageFormat::Compressed {
            block_size_bytes: 1024,
        },
        4,
        file.clone(),
        durable.clone(),
        None,
    );
    let mut guard = pool.create(PageId(3)).unwrap();
    guard.write(100, b"redo first").unwrap();
    assert_eq!(guard.commit(Lsn(10)).unwrap(), CommitOutcome::Fits);
    drop(guard);
    assert_eq!(pool.oldest_dirty_lsn(), Some(Lsn(10)));
    assert_eq!(
        pool.flush_some(10).unwrap(),
        0,
        "written before its log record is durable"
    );
    assert_eq!(file.writes.load(Ordering::Relaxed), 0);
    assert!(!pool.evict(PageId(3)), "a dirty page cannot be evicted");
    durable.store(10, Ordering::Relaxed);
    assert_eq!(pool.flush_some(10).unwrap(), 1);
    assert_eq!(pool.dirty_page_count(), 0);
    // The block on disk is sealed with the page's LSN and verifies.
    let mut block = vec![0; 1024];
    file.read_at(3 * 1024, &mut block).unwrap();
    assert_eq!(u64::from_le_bytes(block[8..16].try_into().unwrap()), 10);
    assert!(pool.evict(PageId(3)));
    assert_eq!(
        &pool.fix_shared(PageId(3)).unwrap()[100..110],
        b"redo first"
    );
    pool.check_invariants();
}

/// Noise that zlib cannot compress.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[test]
fn a_change_that_no_longer_fits_is_rolled_back_and_reported() {
    let geometry = Geometry::new(16 << 10, BlockSize::Kib4).unwrap();
    let services = Services {
        codec: Arc::new(CodecService::new(Codec::zlib_default(), geometry).unwrap()),
        file: Arc::new(FileService::new(Arc::new(barracuda_io::MemoryFile::new(
            "fit",
        )))),
        durable_lsn: Arc::new(|| Lsn(u64::MAX)),
        clock: None,
    };
    let config = PoolConfig::default()
        .format(PageFormat::Compressed {
            block_size_bytes: 4096,
        })
        .buffer_pool_bytes(8 << 16);
    let pool = BufferPool::open(config, services).unwrap();
    assert_eq!(
        pool.create(PageId(1)).unwrap().commit(Lsn(1)).unwrap(),
        CommitOutcome::Fits
    );
    let mut committed = pool.fix_shared(PageId(1)).unwrap().page().to_vec();
    let mut offset = PAGE_HEADER_RESERVED_BYTES;
    let mut outcome = CommitOutcome::Fits;
    for round in 0..64 {
        let bytes = noise(round, 256);
        let mut guard = pool.fix_exclusive(PageId(1)).unwrap();
        guard.write(offset, &bytes).unwrap();
        outcome = guard.commit(Lsn(2 + round)).unwrap();
        if outcome == CommitOutcome::DoesNotFit {
            assert!(
                guard.page()[PAGE_HEADER_RESERVED_BYTES..]
                    == committed[PAGE_HEADER_RESERVED_BYTES..]
            );
            break;
        }
        committed[offset..offset + 256].copy_from_slice(&bytes);
        offset += 256;
    }
    assert_eq!(
        outcome,
        CommitOutcome::DoesNotFit,
        "4 KiB of noise cannot fit a 4 KiB block"
    );
    let status = pool.status();
    assert_eq!(status.compression_failures, 1);
    assert!(status.recompressions >= 1);
    // The block holds exactly the committed bytes: drop the frame and reload.
    pool.flush_all().unwrap();
    assert!(pool.evict(PageId(1)));
    let page = pool.fix_shared(PageId(1)).unwrap();
    assert!(page[PAGE_HEADER_RESERVED_BYTES..] == committed[PAGE_HEADER_RESERVED_BYTES..]);
    drop(page);
    pool.check_invariants();
}

/// A file whose reads take a while and are counted.
struct SlowFile {
    inner: MemoryFile,
    reads: AtomicU64,
}

impl PageFile for SlowFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(30));
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.inner.write_at(offset, buf)
    }

    fn sync_data(&self) -> Result<()> {
        self.inner.sync_data()
    }
}

#[test]
fn threads_missing_the_same_page_cause_one_read() {
    let file = Arc::new(SlowFile {
        inner: MemoryFile::default(),
        reads: AtomicU64::new(0),
    });
    let pool = Arc::new(simple_pool(
        PageFormat::Compressed {
            block_size_bytes: 1024,
        },
        8,
        file.clone(),
        Arc::new(AtomicU64::new(u64::MAX)),
        None,
    ));
    let mut guard = pool.create(PageId(9)).unwrap();
    guard.write(64, b"shared").unwrap();
    guard.commit(Lsn(1)).unwrap();
    drop(guard);
    pool.flush_all().unwrap();
    assert!(pool.evict(PageId(9)));
    let barrier = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (pool, barrier) = (Arc::clone(&pool), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                pool.fix_shared(PageId(9)).unwrap()[64..70].to_vec()
            })
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), b"shared");
    }
    assert_eq!(file.reads.load(Ordering::Relaxed), 1);
    pool.check_invariants();
}

#[test]
/// With 32 frames the old sublist holds 11 pages, enough for the 8 hot pages
/// to be accessed again (and made young) before they reach the tail; new
/// pages enter the old sublist, so a scan of 120 pages only cycles through it.
fn one_scan_does_not_flush_the_hot_set() {
    let (pool, clock) = clean_pages_over_32_frames();
    let hot: Vec<u64> = (0..8).collect();
    // Warm up: touch the hot set twice, more than old_blocks_time apart.
    for _ in 0..3 {
        for &page in &hot {
            drop(pool.fix_shared(PageId(page)).unwrap());
        }
        clock.advance_ms(1500);
    }
    for &page in &hot {
        drop(pool.fix_shared(PageId(page)).unwrap());
    }
    let cached = |page: u64| {
        pool.lru_snapshot()
            .iter()
            .any(|e| e.page_id == PageId(page))
    };
    assert!(
        hot.iter().all(|&p| cached(p)),
        "hot set not cached after warm-up: {:?}\n{}",
        pool.lru_snapshot(),
        pool.status().render()
    );
    // One scan over everything else, within one second.
    for page in 8..128 {
        drop(pool.fix_shared(PageId(page)).unwrap());
        pool.check_invariants();
    }
    assert!(
        hot.iter().all(|&p| cached(p)),
        "a scan flushed the hot set: {:?}",
        pool.lru_snapshot()
    );
}

#[test]
fn a_page_committed_before_its_lsn_is_known_waits_for_it() {
    let file = Arc::new(MemoryFile::default());
    let durable = Arc::new(AtomicU64::new(u64::MAX));
    let pool = simple_pool(
        PageFormat::Compressed {
            block_size_bytes: 1024,
        },
        4,
        file.clone(),
        durable,
        None,
    );
    assert_eq!(
        pool.create(PageId(1)).unwrap().commit(Lsn(1)).unwrap(),
        CommitOutcome::Fits
    );
    pool.flush_all().unwrap();
    let mut guard = pool.fix_exclusive(PageId(1)).unwrap();
    guard.write(200, b"op").unwrap();
    let logged: Vec<(usize, Vec<u8>)> = guard
        .pending_patches()
        .map(|(o, b)| (o, b.to_vec()))
        .collect();
    assert_eq!(logged, vec![(200, b"op".to_vec())]);
    assert_eq!(guard.commit_pending_lsn().unwrap(), CommitOutcome::Fits);
    drop(guard);
    assert_eq!(
        pool.flush_some(8).unwrap(),
        0,
        "written before its log record exists"
    );
    assert!(!pool.evict(PageId(1)));
    assert!(pool.set_page_lsn(PageId(1), Lsn(7)));
    assert_eq!(pool.oldest_dirty_lsn(), Some(Lsn(7)));
    assert_eq!(pool.flush_some(8).unwrap(), 1);
    pool.check_invariants();
}

/// Writes pages `0..count` with their number at offset 100 and makes them
/// clean (written), then evicts them all, so the next fixes read.
fn written_pages(pool: &BufferPool, count: u64) {
    for page in 0..count {
        let mut guard = pool.create(PageId(page)).unwrap();
        guard.write(100, &page.to_le_bytes()).unwrap();
        assert_eq!(guard.commit(Lsn(1)).unwrap(), CommitOutcome::Fits);
    }
    pool.flush_all().unwrap();
    for page in 0..count {
        assert!(
            pool.evict(PageId(page)),
            "page {page} is clean and unpinned"
        );
    }
}

/// 16 chunks of 4 KiB with 1 KiB blocks, on a hand-moved clock: 14 pages
/// fit as frames alone (14 chunks) but not with their blocks (14 frames
/// and 4 slab chunks).
fn frames_pool(policy: EvictionPolicy) -> (BufferPool, ManualClock) {
    let clock = ManualClock::new();
    let config = PoolConfig::default()
        .page_size_bytes(4096)
        .format(PageFormat::Compressed {
            block_size_bytes: 1024,
        })
        .eviction_policy(policy)
        .buffer_pool_bytes(16 * 4096);
    let services = Services {
        codec: Arc::new(SimpleCodec::default()),
        file: Arc::new(MemoryFile::default()),
        durable_lsn: Arc::new(|| Lsn(u64::MAX)),
        clock: Some(clock.clone()),
    };
    (BufferPool::open(config, services).unwrap(), clock)
}

fn read_all(pool: &BufferPool, count: u64) {
    for page in 0..count {
        let guard = pool.fix_shared(PageId(page)).unwrap();
        assert_eq!(guard[100..108], page.to_le_bytes());
    }
}

#[test]
fn cost_aware_keeps_clean_pages_as_frames_alone_while_frames_alone_fit() {
    let (pool, clock) = frames_pool(EvictionPolicy::CostAware);
    let pages = 14;
    written_pages(&pool, pages);
    // Reading the evicted pages again are ghost hits: blocks stay for a
    // quiet interval.
    read_all(&pool, pages);
    assert_eq!(pool.status().blocks_dropped, 0);
    clock.advance_ms(barracuda_pool::FRAMES_ONLY_QUIET_MS);
    for _ in 0..3 {
        read_all(&pool, pages);
        pool.check_invariants();
    }
    let before = pool.status();
    read_all(&pool, pages);
    let status = pool.status();
    assert_eq!(status.lru_len, pages);
    assert_eq!(status.unzip_lru_len, pages, "every page keeps its frame");
    assert!(status.blocks_dropped > 0);
    assert_eq!(
        status.unzips, before.unzips,
        "no page decompressed on a hit"
    );
    assert_eq!(status.pages_read, pages, "each page read once");

    let frame_only: Vec<PageId> = pool
        .lru_snapshot()
        .iter()
        .filter(|e| e.has_frame && !e.has_block)
        .map(|e| e.page_id)
        .collect();
    // Only as many blocks go as the frames need.
    assert!(!frame_only.is_empty());
    assert!(status.block_count < pages);
    let page = frame_only[0];

    // A writer gets the block back from the file, and its change lands.
    let mut guard = pool.fix_exclusive(page).unwrap();
    guard.write(200, b"after").unwrap();
    assert_eq!(guard.commit(Lsn(2)).unwrap(), CommitOutcome::Fits);
    drop(guard);
    assert!(pool.status().blocks_reloaded >= 1);
    pool.check_invariants();
    pool.flush_all().unwrap();
    assert!(pool.evict(page));
    let guard = pool.fix_shared(page).unwrap();
    assert_eq!(&guard[200..205], b"after");
    assert_eq!(guard[100..108], page.0.to_le_bytes());
    drop(guard);
    pool.check_invariants();

    // InnoDB's rule never drops a block.
    let (innodb, clock) = frames_pool(EvictionPolicy::InnoDb);
    written_pages(&innodb, pages);
    clock.advance_ms(barracuda_pool::FRAMES_ONLY_QUIET_MS);
    for _ in 0..3 {
        read_all(&innodb, pages);
    }
    let status = innodb.status();
    assert_eq!(status.blocks_dropped, 0);
    assert!(status.unzip_lru_len < pages, "InnoDB's rule drops frames");
    innodb.check_invariants();
}

#[test]
fn pages_kept_as_frames_alone_give_way_once_the_working_set_outgrows_the_frames() {
    let (pool, clock) = frames_pool(EvictionPolicy::CostAware);
    written_pages(&pool, 40);
    read_all(&pool, 14);
    clock.advance_ms(barracuda_pool::FRAMES_ONLY_QUIET_MS);
    read_all(&pool, 14);
    read_all(&pool, 14);
    assert!(pool.status().blocks_dropped > 0);
    // 40 pages of 1 KiB blocks fit 64 KiB only as blocks: frame-only pages
    // must be evicted (they have no block to fall back to).
    for _ in 0..4 {
        read_all(&pool, 40);
        pool.check_invariants();
    }
    let status = pool.status();
    assert!(
        status.lru_len > 16,
        "more pages cached than frames fit: {}",
        status.lru_len
    );
}

/// Re-reads of a hot set within `old_blocks_time`, then 120 other pages read
/// once each: as point reads the re-reads make the hot pages young and they
/// stay cached; as scan accesses (InnoDB's rule) they stay old and the
/// 120 pages push them out.
#[test]
fn point_reads_make_a_reread_page_young_within_old_blocks_time() {
    let hot_cached_after = |access: Access| {
        let (pool, clock) = clean_pages_over_32_frames();
        let hot: Vec<u64> = (0..8).collect();
        for _ in 0..3 {
            for &page in &hot {
                drop(pool.fix_shared_as(PageId(page), access).unwrap());
            }
            clock.advance_ms(10);
        }
        for page in 8..128 {
            drop(pool.fix_shared_as(PageId(page), access).unwrap());
            pool.check_invariants();
        }
        let snapshot = pool.lru_snapshot();
        hot.iter()
            .filter(|&&p| snapshot.iter().any(|e| e.page_id == PageId(p)))
            .count()
    };
    assert_eq!(hot_cached_after(Access::Point), 8);
    assert_eq!(hot_cached_after(Access::Scan), 0);
}

/// An uncompressed pool of 32 frames, on a hand-moved clock, after 128
/// pages were created and written (so pages have been evicted and the LRU
/// is past its warm-up).
fn clean_pages_over_32_frames() -> (BufferPool, ManualClock) {
    let clock = ManualClock::new();
    let pool = simple_pool(
        PageFormat::Uncompressed,
        32,
        Arc::new(MemoryFile::default()),
        Arc::new(AtomicU64::new(u64::MAX)),
        Some(clock.clone()),
    );
    for page in 0..128 {
        pool.create(PageId(page))
            .unwrap()
            .commit(Lsn(page))
            .unwrap();
        pool.flush_some(usize::MAX).unwrap();
    }
    (pool, clock)
}

/// Exclusive guards reuse the patch and undo buffers of the thread's
/// dropped guards: a guard dropped with uncommitted patches rolls its page
/// back and hands on empty buffers, so the next guard neither sees its
/// patches nor restores its bytes.
#[test]
fn a_guard_dropped_uncommitted_leaves_nothing_to_the_next_guard() {
    let pool = simple_pool(
        PageFormat::Uncompressed,
        8,
        Arc::new(MemoryFile::default()),
        Arc::new(AtomicU64::new(u64::MAX)),
        None,
    );
    let mut a = pool.create(PageId(1)).unwrap();
    a.write(100, b"kept").unwrap();
    assert_eq!(a.commit(Lsn(1)).unwrap(), CommitOutcome::Fits);
    a.write(100, b"lost").unwrap();
    a.write(200, b"lost too").unwrap();
    drop(a);
    let mut b = pool.create(PageId(2)).unwrap();
    assert_eq!(b.pending_patch_count(), 0);
    b.write(300, b"b's").unwrap();
    assert_eq!(b.pending_patches().count(), 1);
    b.rollback();
    assert_eq!(&b[300..303], &[0, 0, 0]);
    drop(b);
    let a = pool.fix_exclusive(PageId(1)).unwrap();
    assert_eq!(a.pending_patch_count(), 0);
    assert_eq!(&a[100..104], b"kept");
    assert_eq!(&a[200..208], &[0; 8]);
    drop(a);
    pool.check_invariants();
}

/// A write that starts at most 8 bytes after the last patch's end extends
/// that patch over the bytes between; a rollback still restores every byte.
#[test]
fn writes_close_after_the_last_patch_extend_it() {
    let pool = durable_pool(8);
    let mut g = pool.create(PageId(1)).unwrap();
    g.write(100, b"abcd").unwrap();
    assert_eq!(g.commit(Lsn(1)).unwrap(), CommitOutcome::Fits);
    g.write(100, b"xy").unwrap();
    g.write(102, b"z").unwrap(); // adjacent
    g.write(111, b"w").unwrap(); // 8 unchanged bytes between
    assert_eq!(g.pending_patch_count(), 1);
    let patches: Vec<(usize, Vec<u8>)> =
        g.pending_patches().map(|(o, b)| (o, b.to_vec())).collect();
    let mut expected = b"xyzd".to_vec();
    expected.extend_from_slice(&[0; 7]);
    expected.push(b'w');
    assert_eq!(patches, vec![(100, expected)]);
    g.write(121, b"v").unwrap(); // 9 bytes after: a patch of its own
    g.write(50, b"u").unwrap(); // before: a patch of its own
    assert_eq!(g.pending_patch_count(), 3);
    g.rollback();
    assert_eq!(&g[100..104], b"abcd");
    assert!(g[104..130].iter().chain(&g[48..52]).all(|&b| b == 0));
    drop(g);
    pool.check_invariants();
}

/// An uncompressed pool of `frames` frames whose log is always durable.
fn durable_pool(frames: usize) -> BufferPool {
    let durable = Arc::new(AtomicU64::new(u64::MAX));
    let file = Arc::new(MemoryFile::default());
    simple_pool(PageFormat::Uncompressed, frames, file, durable, None)
}

/// Creates `page`, changed and committed at `lsn` (dirty).
fn dirty_page(pool: &BufferPool, page: u64, lsn: u64) {
    let mut guard = pool.create(PageId(page)).unwrap();
    guard.write(100, b"changed").unwrap();
    guard.commit(Lsn(lsn)).unwrap();
}

#[test]
fn a_checkpoint_flush_leaves_pages_first_changed_after_its_target() {
    // 16 frames for 4 pages: memory is not short.
    let pool = durable_pool(16);
    for (page, lsn) in [(1, 10), (2, 20), (3, 30), (4, 40)] {
        dirty_page(&pool, page, lsn);
    }
    assert_eq!(
        pool.flush_for_checkpoint(Lsn(20)).unwrap(),
        2,
        "pages 1 and 2"
    );
    assert_eq!(pool.oldest_dirty_lsn(), Some(Lsn(30)));
    assert_eq!(pool.dirty_page_count(), 2);
    // A page first changed before the target and changed again after it
    // is written, with its newer change.
    let mut guard = pool.fix_exclusive(PageId(3)).unwrap();
    guard.write(100, b"again!!").unwrap();
    guard.commit(Lsn(50)).unwrap();
    drop(guard);
    assert_eq!(pool.flush_for_checkpoint(Lsn(30)).unwrap(), 1, "page 3");
    assert_eq!(pool.oldest_dirty_lsn(), Some(Lsn(40)));
    assert_eq!(pool.flush_some(usize::MAX).unwrap(), 1, "page 4");
    assert_eq!(pool.dirty_page_count(), 0);
    pool.check_invariants();
}

#[test]
fn a_checkpoint_flush_writes_every_dirty_page_when_memory_is_short() {
    let pool = durable_pool(8);
    // 6 of 8 frames taken: a quarter free, not short.
    for page in 1..=6 {
        dirty_page(&pool, page, page);
    }
    assert_eq!(pool.flush_for_checkpoint(Lsn(2)).unwrap(), 2);
    assert_eq!(pool.dirty_page_count(), 4);
    // 7 of 8 taken (clean pages take memory too): short.
    dirty_page(&pool, 7, 7);
    assert_eq!(
        pool.flush_for_checkpoint(Lsn(3)).unwrap(),
        5,
        "pages 3 to 7"
    );
    assert_eq!(pool.dirty_page_count(), 0);
    pool.check_invariants();
}

#[test]
fn the_data_file_is_written_with_zeros_ahead_of_its_pages_and_trimmed_back() {
    let memory = Arc::new(barracuda_io::MemoryFile::new("ahead"));
    let file = Arc::new(FileService::new(memory.clone()));
    let durable = Arc::new(AtomicU64::new(u64::MAX));
    let pool = simple_pool(PageFormat::Uncompressed, 8, file, durable, None);
    let extend = barracuda_pool::EXTEND_BYTES;
    let written = |page: u64, text: &[u8]| {
        let mut guard = pool.create(PageId(page)).unwrap();
        guard.write(100, text).unwrap();
        guard.commit(Lsn(page)).unwrap();
        drop(guard);
        assert_eq!(pool.flush_some(usize::MAX).unwrap(), 1);
    };
    written(2, b"page two");
    assert_eq!(memory.len().unwrap(), extend, "zeros to the next MiB");
    pool.trim_file().unwrap();
    assert_eq!(memory.len().unwrap(), 3 * 4096, "through page 2");
    // A page past a whole extension, then one below the end.
    let far = extend / 4096 + 5;
    written(far, b"far page");
    assert_eq!(memory.len().unwrap(), 2 * extend);
    written(1, b"page one");
    assert_eq!(
        memory.len().unwrap(),
        2 * extend,
        "no extension below the end"
    );
    pool.trim_file().unwrap();
    assert_eq!(memory.len().unwrap(), (far + 1) * 4096);
    for (page, text) in [(1, b"page one"), (2, b"page two"), (far, b"far page")] {
        assert!(pool.evict(PageId(page)));
        assert_eq!(&pool.fix_shared(PageId(page)).unwrap()[100..108], text);
    }
    pool.check_invariants();
}

/// A pool of 600 chunks of 1 KiB blocks holding `pages` pages, each with
/// its number at byte 100 (the lending tests' start).
fn lending_pool(pages: u64) -> BufferPool {
    let pool = simple_pool(
        PageFormat::Compressed {
            block_size_bytes: 1024,
        },
        600,
        Arc::new(MemoryFile::default()),
        Arc::new(AtomicU64::new(u64::MAX)),
        None,
    );
    for page in 0..pages {
        let mut guard = pool.create(PageId(page)).unwrap();
        guard.write(100, &page.to_le_bytes()).unwrap();
        assert_eq!(guard.commit(Lsn(1)).unwrap(), CommitOutcome::Fits);
    }
    pool
}

/// Lending takes chunks out of the budget as a miss would take memory
/// (evicting pages, writing dirty ones first), rounds the lent bytes up to
/// whole chunks, keeps the pool its minimum, and loses no page.
#[test]
fn lending_evicts_like_a_miss_and_keeps_every_page() {
    let pages = 590u64;
    let pool = lending_pool(pages);
    assert_eq!(pool.status().free_chunk_count, 0, "the pages fill the pool");
    // 300 chunks less 102 bytes, in three loans: 300 chunks lent.
    for _ in 0..3 {
        assert!(pool.lend_bytes(100 * 4096 - 34).unwrap());
        pool.check_invariants();
    }
    assert_eq!(pool.chunk_count(), 300);
    assert_eq!(pool.budget_bytes(), 300 * 4096);
    assert_eq!(pool.lent_bytes(), 300 * 4096 - 102);
    // The pool keeps 1 MiB (256 chunks): 44 more may go, 45 may not.
    assert!(!pool.lend_bytes(45 * 4096).unwrap());
    assert_eq!(pool.chunk_count(), 300);
    assert!(pool.lend_bytes(44 * 4096).unwrap());
    assert_eq!(pool.chunk_count(), 256);
    let status = pool.status();
    assert_eq!(status.lent_bytes, 344 * 4096 - 102);
    assert!(status.bytes_used <= status.budget_bytes, "{status:?}");
    for page in 0..pages {
        let guard = pool.fix_shared(PageId(page)).unwrap();
        assert_eq!(guard[100..108], page.to_le_bytes(), "page {page}");
    }
    pool.check_invariants();
}

/// Lent bytes given back return their chunks to the pool, which uses them
/// again (pages read into them hold what they held), and only whole
/// chunks the lent sum no longer reaches come back.
#[test]
fn returned_bytes_give_their_chunks_back_to_the_pool() {
    let pages = 1_000u64;
    let pool = lending_pool(pages);
    assert!(pool.lend_bytes(200 * 4096).unwrap());
    assert_eq!(pool.chunk_count(), 400);
    // Half a chunk back: no chunk yet.
    pool.return_bytes(2048);
    assert_eq!(pool.chunk_count(), 400);
    assert_eq!(pool.lent_bytes(), 200 * 4096 - 2048);
    pool.check_invariants();
    // The rest of that chunk and 99 more.
    pool.return_bytes(2048 + 99 * 4096);
    assert_eq!(pool.chunk_count(), 500);
    assert_eq!(pool.lent_bytes(), 100 * 4096);
    pool.check_invariants();
    // More than is lent: all of it.
    pool.return_bytes(1 << 30);
    assert_eq!((pool.chunk_count(), pool.lent_bytes()), (600, 0));
    // The chunks are used again: every page read back into the pool whole.
    for page in 0..pages {
        let guard = pool.fix_shared(PageId(page)).unwrap();
        assert_eq!(guard[100..108], page.to_le_bytes(), "page {page}");
    }
    assert_eq!(pool.status().budget_bytes, 600 * 4096);
    pool.check_invariants();
    // And lent again.
    assert!(pool.lend_bytes(10 * 4096).unwrap());
    assert_eq!(pool.chunk_count(), 590);
    pool.check_invariants();
}

/// A compressed pool of 16 chunks (4 KiB pages, 1 KiB blocks) over a file
/// with a modelled OS page cache, the cache tier on or off, after `count`
/// pages were written, evicted and the page cache emptied (as the next
/// process sees the file after `POSIX_FADV_DONTNEED`).
fn tiered_pool(tier: bool, count: u64) -> (BufferPool, Arc<MemoryFile>) {
    let file = Arc::new(MemoryFile::with_os_cache());
    let config = PoolConfig::default()
        .page_size_bytes(4096)
        .format(PageFormat::Compressed {
            block_size_bytes: 1024,
        })
        .buffer_pool_bytes(16 * 4096)
        .os_cache_tier(tier);
    let services = Services {
        codec: Arc::new(SimpleCodec::default()),
        file: file.clone(),
        durable_lsn: Arc::new(|| Lsn(u64::MAX)),
        clock: None,
    };
    let pool = BufferPool::open(config, services).unwrap();
    for page in 0..count {
        let mut guard = pool.create(PageId(page)).unwrap();
        guard.write(100, &page.to_le_bytes()).unwrap();
        assert_eq!(guard.commit(Lsn(1)).unwrap(), CommitOutcome::Fits);
        drop(guard);
        pool.flush_some(usize::MAX).unwrap();
    }
    pool.flush_all().unwrap();
    for page in 0..count {
        pool.evict(PageId(page));
    }
    assert!(pool.lru_snapshot().is_empty());
    file.drop_os_cache();
    file.reads.store(0, Ordering::Relaxed);
    (pool, file)
}

fn cached_pages(pool: &BufferPool) -> Vec<u64> {
    pool.lru_snapshot().iter().map(|e| e.page_id.0).collect()
}

/// With the tier, a page the pool evicted comes back from the page cache,
/// not the device, and the page cache then drops it, as it drops a page
/// hit in the pool: the two hold different pages. Without it, every pass
/// reads the device again.
#[test]
fn the_os_cache_tier_holds_other_pages_than_the_pool() {
    // The pool holds at most 64 of the 256 (16 chunks of 1 KiB blocks).
    let pages = 256;
    let (pool, file) = tiered_pool(true, pages);
    read_all(&pool, pages);
    pool.check_invariants();
    assert_eq!(file.reads.load(Ordering::Relaxed), pages);
    assert_eq!(pool.status().os_cache_reads, 0);
    // Every page read is in the page cache; the pool holds some of them
    // too, on probation.
    assert_eq!(file.os_cached().len() as u64, pages);

    read_all(&pool, pages);
    pool.check_invariants();
    let status = pool.status();
    assert_eq!(file.reads.load(Ordering::Relaxed), pages, "no device read");
    assert_eq!(
        file.cached_reads.load(Ordering::Relaxed),
        status.os_cache_reads
    );
    assert!(status.os_cache_reads >= pages - 64, "{status:?}");
    assert_eq!(status.pages_read, pages + status.os_cache_reads);
    // Read again, each page was either found in the page cache or hit in
    // the pool; either way the page cache dropped it.
    assert_eq!(file.os_cached(), Vec::<u64>::new());

    let (pool, file) = tiered_pool(false, pages);
    read_all(&pool, pages);
    read_all(&pool, pages);
    assert!(file.reads.load(Ordering::Relaxed) >= 2 * pages - 64);
    assert_eq!(file.cached_reads.load(Ordering::Relaxed), 0);
    assert_eq!(pool.status().os_cache_reads, 0);
}

/// A page read from the device enters at the LRU tail: once the pool is
/// full, pages read once give way to each other and take about one page of
/// the pool, where the midpoint lets them fill the old sublist; a page
/// read twice stays either way.
#[test]
fn pages_read_once_from_the_device_give_way_to_each_other() {
    let once_read_cached = |tier: bool| {
        let (pool, _file) = tiered_pool(tier, 256);
        // Fill the pool, then read page 5 again: the pool keeps it.
        read_all(&pool, 64);
        drop(pool.fix_shared(PageId(5)).unwrap());
        for page in 100..200 {
            drop(pool.fix_shared(PageId(page)).unwrap());
            pool.check_invariants();
        }
        let cached = cached_pages(&pool);
        assert!(cached.contains(&5), "tier {tier}: {cached:?}");
        if tier {
            assert_eq!(cached.last(), Some(&199), "the last read is the tail");
        }
        cached.iter().filter(|&&p| p >= 100).count()
    };
    let with_tier = once_read_cached(true);
    let without = once_read_cached(false);
    assert!(with_tier <= 2, "{with_tier} pages read once kept");
    assert!(
        without >= 10,
        "{without} pages read once kept at the midpoint"
    );
}
