//! Read-ahead (`BufferPool::prefetch`) and batched flushing: one read per
//! page, old sublist and compressed-only placement, the budget, concurrent
//! fixes, failed reads, and batches of writes that keep the write-ahead rule
//! and the `writing` semantics.

// Test helpers outside `#[test]` functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use barracuda_base::{Lsn, PageId};
use barracuda_io::{
    AlignedBuf, CompletionSender, FaultConfig, FaultErrno, FaultFile, FaultOp, FaultRule, IoRequest,
};
use barracuda_pool::testing::{MemoryFile, SimpleCodec};
use barracuda_pool::{
    BufferPool, FileService, PageFile, PageFormat, PoolConfig, PoolError, Result, Services,
};
use parking_lot::Mutex;

const PAGE_BYTES: usize = 4096;
const BLOCK_BYTES: usize = 1024;

/// A file that counts single reads, batched reads and write batches, and can
/// hold a write batch until told to go on.
struct CountingFile {
    inner: Arc<dyn PageFile>,
    reads: AtomicU64,
    batched_reads: AtomicU64,
    write_batches: AtomicU64,
    depth: usize,
    /// When set, `write_batch` waits on this barrier twice (entered, go on).
    hold_writes: Mutex<Option<Arc<Barrier>>>,
}

impl CountingFile {
    fn new(inner: Arc<dyn PageFile>, depth: usize) -> Self {
        Self {
            inner,
            reads: AtomicU64::new(0),
            batched_reads: AtomicU64::new(0),
            write_batches: AtomicU64::new(0),
            depth,
            hold_writes: Mutex::new(None),
        }
    }

    fn all_reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed) + self.batched_reads.load(Ordering::Relaxed)
    }
}

impl PageFile for CountingFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.inner.write_at(offset, buf)
    }

    fn sync_data(&self) -> Result<()> {
        self.inner.sync_data()
    }

    fn queue_depth(&self) -> usize {
        self.depth
    }

    fn alloc_buf(&self, len_bytes: usize) -> AlignedBuf {
        self.inner.alloc_buf(len_bytes)
    }

    fn submit_reads(&self, requests: Vec<IoRequest>, completions: &CompletionSender) {
        self.batched_reads
            .fetch_add(requests.len() as u64, Ordering::Relaxed);
        self.inner.submit_reads(requests, completions);
    }

    fn write_batch(&self, requests: Vec<IoRequest>) -> Vec<(u64, Result<()>)> {
        self.write_batches.fetch_add(1, Ordering::Relaxed);
        let hold = self.hold_writes.lock().clone();
        if let Some(barrier) = hold {
            barrier.wait();
            barrier.wait();
        }
        self.inner.write_batch(requests)
    }
}

fn pool_over(file: Arc<dyn PageFile>, chunk_count: usize, format: PageFormat) -> BufferPool {
    let services = Services {
        codec: Arc::new(if format == PageFormat::Uncompressed {
            SimpleCodec::stored()
        } else {
            SimpleCodec::default()
        }),
        file,
        durable_lsn: Arc::new(|| Lsn(u64::MAX)),
        clock: None,
    };
    let config = PoolConfig::default()
        .page_size_bytes(PAGE_BYTES)
        .format(format)
        .buffer_pool_bytes(chunk_count * PAGE_BYTES);
    BufferPool::open(config, services).unwrap()
}

fn compressed() -> PageFormat {
    PageFormat::Compressed {
        block_size_bytes: BLOCK_BYTES,
    }
}

/// Creates pages `0..count` with a byte naming each, writes them and evicts
/// them, so that every later access reads the file.
fn write_pages(pool: &BufferPool, count: u64) {
    for page in 0..count {
        let mut guard = pool.create(PageId(page)).unwrap();
        guard.write(100, &page.to_le_bytes()).unwrap();
        guard.commit(Lsn(page + 1)).unwrap();
        drop(guard);
        pool.flush_all().unwrap();
        assert!(pool.evict(PageId(page)));
    }
}

fn check_page(pool: &BufferPool, page: u64) {
    let guard = pool.fix_shared(PageId(page)).unwrap();
    assert_eq!(guard[100..108], page.to_le_bytes(), "page {page}");
}

/// Four threads, released at once, check `pages` in order, each taking
/// every fourth page.
fn check_from_four_threads(pool: &Arc<BufferPool>, pages: Vec<u64>) {
    let pages = Arc::new(pages);
    let barrier = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (pool, barrier, pages) =
                (Arc::clone(pool), Arc::clone(&barrier), Arc::clone(&pages));
            std::thread::spawn(move || {
                barrier.wait();
                for &page in pages.iter().filter(|&&p| p % 4 == t) {
                    check_page(&pool, page);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

fn ids(range: std::ops::Range<u64>) -> Vec<PageId> {
    range.map(PageId).collect()
}

#[test]
fn prefetched_pages_are_read_once_and_cached_compressed_in_the_old_sublist() {
    let file = Arc::new(CountingFile::new(Arc::new(MemoryFile::default()), 4));
    let pool = pool_over(file.clone(), 64, compressed());
    write_pages(&pool, 40);
    // A hot set the read-ahead must land behind.
    for page in 0..20 {
        check_page(&pool, page);
    }
    let reads_before = file.all_reads();
    let unzip_before = pool.status().unzip_lru_len;

    for page in 20..30 {
        assert_eq!(pool.prefetch(&[PageId(page)]), 1);
        let entry = pool
            .lru_snapshot()
            .into_iter()
            .find(|e| e.page_id == PageId(page))
            .unwrap();
        assert!(entry.old, "{page} read ahead into the young sublist");
        assert!(!entry.has_frame, "{page} read ahead with a frame");
    }
    assert_eq!(file.batched_reads.load(Ordering::Relaxed), 10);
    let status = pool.status();
    assert_eq!(status.read_ahead, 10);
    assert_eq!(status.unzip_lru_len, unzip_before, "read-ahead unzipped");
    pool.check_invariants();

    // Cached or in-flight pages are skipped.
    assert_eq!(pool.prefetch(&ids(25..32)), 2);
    for page in 20..32 {
        check_page(&pool, page);
    }
    assert_eq!(
        file.all_reads() - reads_before,
        12,
        "a second read of a page read ahead"
    );
    assert_eq!(
        pool.status().pages_read,
        20,
        "fixes after read-ahead counted as misses"
    );
    pool.check_invariants();
}

#[test]
fn prefetch_never_exceeds_the_budget_and_counts_unused_evictions() {
    let file = Arc::new(MemoryFile::default());
    let pool = pool_over(file, 16, compressed());
    write_pages(&pool, 200);
    let budget = pool.status().budget_bytes;
    let mut submitted = 0;
    for start in (0..200).step_by(20) {
        submitted += pool.prefetch(&ids(start..start + 20));
        let status = pool.status();
        assert!(
            status.bytes_used <= budget,
            "{} over {budget}",
            status.bytes_used
        );
        pool.check_invariants();
    }
    let status = pool.status();
    assert!(submitted > 0);
    assert_eq!(status.read_ahead, submitted as u64);
    // 16 chunks of 4 blocks hold 64 pages: most read-ahead was evicted unused.
    assert!(
        status.read_ahead_evicted_unused >= submitted as u64 - 64,
        "{status:?}"
    );
    // A quarter of the block slots per call at most.
    assert!(submitted <= 10 * 16);
    // Fixing the last ones works and they are no longer "unused".
    let cached: Vec<u64> = pool.lru_snapshot().iter().map(|e| e.page_id.0).collect();
    for &page in &cached {
        check_page(&pool, page);
    }
    pool.check_invariants();
}

#[test]
fn an_uncompressed_pool_reads_ahead_into_frames() {
    let file = Arc::new(CountingFile::new(Arc::new(MemoryFile::default()), 4));
    let pool = pool_over(file.clone(), 32, PageFormat::Uncompressed);
    write_pages(&pool, 8);
    let reads_before = file.all_reads();
    assert_eq!(pool.prefetch(&ids(0..8)), 8);
    for page in 0..8 {
        check_page(&pool, page);
    }
    assert_eq!(file.all_reads() - reads_before, 8);
    pool.check_invariants();
}

#[test]
fn fixes_during_an_asynchronous_read_ahead_wait_for_it() {
    // Batches wait on their own thread until the gate opens, like a device
    // that has not answered yet: whether prefetch waited for them does not
    // depend on how fast this machine is.
    let io_file = Arc::new(barracuda_io::MemoryFile::new("readahead"));
    let gate = Arc::new(Gate::default());
    let gated = Arc::new(GatedFile {
        inner: io_file,
        gate: Arc::clone(&gate),
    });
    let file = Arc::new(CountingFile::new(Arc::new(FileService::new(gated)), 8));
    let pool = Arc::new(pool_over(file.clone(), 64, compressed()));
    write_pages(&pool, 16);
    let reads_before = file.all_reads();

    gate.close();
    assert_eq!(pool.prefetch(&ids(0..16)), 16);
    // Had prefetch waited for its reads, it would have returned only once
    // the gate gave up waiting for this test to open it.
    assert!(!gate.gave_up(), "prefetch waited for its reads");
    assert!(pool.read_ahead_in_flight() > 0);
    // The fixes start while the reads are held, and wait for them. When
    // the gate opens only changes how many of them are waiting by then
    // (on an idle machine, all of them), not what they must find.
    std::thread::scope(|scope| {
        scope.spawn(|| check_from_four_threads(&pool, (0..16).collect()));
        std::thread::sleep(Duration::from_millis(50));
        gate.open();
    });
    assert_eq!(file.all_reads() - reads_before, 16, "a page read twice");
    assert_eq!(pool.read_ahead_in_flight(), 0);
    assert_eq!(pool.status().read_ahead, 16);
    pool.check_invariants();
}

#[test]
fn failed_read_ahead_is_dropped_and_the_fix_reports_the_error() {
    let io_file = Arc::new(barracuda_io::MemoryFile::new("faulty"));
    let rule = FaultRule::Random {
        op: FaultOp::Read,
        probability: 1.0,
        errno: FaultErrno::Eio,
    };
    let faulty = Arc::new(FaultFile::new(io_file, FaultConfig::default().rule(rule)));
    let pool = pool_over(Arc::new(FileService::new(faulty)), 16, compressed());
    write_pages(&pool, 4);
    pool.prefetch(&ids(0..4));
    while pool.read_ahead_in_flight() > 0 {
        pool.drain_read_ahead();
        std::thread::yield_now();
    }
    let status = pool.status();
    assert_eq!((status.read_ahead, status.read_ahead_failed), (0, 4));
    pool.check_invariants();
    match pool.fix_shared(PageId(2)) {
        Err(PoolError::File { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(EIO));
        }
        other => panic!("expected EIO, got {:?}", other.map(|_| ())),
    }
    pool.check_invariants();
}

/// EIO's value on Linux (the crate does not depend on libc).
const EIO: i32 = 5;

#[test]
fn a_corrupt_block_read_ahead_is_reported_by_the_fix() {
    let file = Arc::new(MemoryFile::default());
    let pool = pool_over(file.clone(), 16, compressed());
    write_pages(&pool, 4);
    file.write_at(2 * BLOCK_BYTES as u64 + 200, b"bit rot")
        .unwrap();
    pool.prefetch(&ids(0..4));
    let status = pool.status();
    assert_eq!((status.read_ahead, status.read_ahead_failed), (3, 1));
    pool.check_invariants();
    assert!(matches!(
        pool.fix_shared(PageId(2)),
        Err(PoolError::Corrupted { .. })
    ));
    check_page(&pool, 3);
    pool.check_invariants();
}

#[test]
fn flushing_writes_batches_of_the_queue_depth() {
    let file = Arc::new(CountingFile::new(Arc::new(MemoryFile::default()), 8));
    let pool = pool_over(file.clone(), 64, compressed());
    for page in 0..50 {
        let mut guard = pool.create(PageId(page)).unwrap();
        guard.write(100, &page.to_le_bytes()).unwrap();
        guard.commit(Lsn(page + 1)).unwrap();
    }
    assert_eq!(pool.flush_some(20).unwrap(), 20);
    assert_eq!(file.write_batches.load(Ordering::Relaxed), 3, "8 + 8 + 4");
    assert_eq!(pool.oldest_dirty_lsn(), Some(Lsn(21)), "oldest first");
    assert_eq!(pool.flush_all().unwrap(), 30);
    assert_eq!(file.write_batches.load(Ordering::Relaxed), 7);
    assert_eq!(pool.status().write_batches, 7);
    assert_eq!(pool.dirty_page_count(), 0);
    for page in 0..50 {
        assert!(pool.evict(PageId(page)));
    }
    for page in 0..50 {
        check_page(&pool, page);
    }
    pool.check_invariants();
}

#[test]
fn batched_flushing_keeps_the_write_ahead_rule() {
    let durable = Arc::new(AtomicU64::new(10));
    let seen = Arc::clone(&durable);
    let services = Services {
        codec: Arc::new(SimpleCodec::default()),
        file: Arc::new(CountingFile::new(Arc::new(MemoryFile::default()), 4)),
        durable_lsn: Arc::new(move || Lsn(seen.load(Ordering::Relaxed))),
        clock: None,
    };
    let config = PoolConfig::default()
        .page_size_bytes(PAGE_BYTES)
        .format(compressed())
        .buffer_pool_bytes(32 * PAGE_BYTES);
    let pool = BufferPool::open(config, services).unwrap();
    for page in 0..20 {
        let mut guard = pool.create(PageId(page)).unwrap();
        guard.write(100, b"x").unwrap();
        guard.commit(Lsn(page + 1)).unwrap();
    }
    assert_eq!(pool.flush_all().unwrap(), 10, "LSNs 1..=10 only");
    assert_eq!(pool.oldest_dirty_lsn(), Some(Lsn(11)));
    durable.store(u64::MAX, Ordering::Relaxed);
    assert_eq!(pool.flush_all().unwrap(), 10);
    pool.check_invariants();
}

#[test]
fn a_commit_during_a_write_keeps_the_page_dirty() {
    let file = Arc::new(CountingFile::new(Arc::new(MemoryFile::default()), 4));
    let pool = Arc::new(pool_over(file.clone(), 16, compressed()));
    let mut guard = pool.create(PageId(1)).unwrap();
    guard.write(100, b"first").unwrap();
    guard.commit(Lsn(1)).unwrap();
    drop(guard);
    let barrier = Arc::new(Barrier::new(2));
    *file.hold_writes.lock() = Some(Arc::clone(&barrier));
    let flusher = {
        let pool = Arc::clone(&pool);
        std::thread::spawn(move || pool.flush_some(1).unwrap())
    };
    barrier.wait(); // the write is in flight, the latch released
    let mut guard = pool.fix_exclusive(PageId(1)).unwrap();
    guard.write(100, b"second").unwrap();
    guard.commit(Lsn(2)).unwrap();
    drop(guard);
    // A second flusher skips the page being written.
    *file.hold_writes.lock() = None;
    assert_eq!(pool.flush_some(10).unwrap(), 0);
    barrier.wait();
    assert_eq!(flusher.join().unwrap(), 1);
    assert_eq!(
        pool.dirty_page_count(),
        1,
        "written image predates a commit"
    );
    assert_eq!(pool.oldest_dirty_lsn(), Some(Lsn(1)));
    assert_eq!(pool.flush_all().unwrap(), 1);
    assert_eq!(pool.dirty_page_count(), 0);
    assert!(pool.evict(PageId(1)));
    assert_eq!(&pool.fix_shared(PageId(1)).unwrap()[100..106], b"second");
    pool.check_invariants();
}

#[test]
fn prefetch_on_a_pool_of_pinned_pages_returns_at_once() {
    let file = Arc::new(MemoryFile::default());
    let pool = pool_over(file, 4, compressed());
    write_pages(&pool, 40);
    // Three pinned pages with frames leave one slab chunk of four blocks.
    let guards: Vec<_> = (0..3)
        .map(|p| pool.fix_shared(PageId(p)).unwrap())
        .collect();
    // Returning at all is the point: this thread holds the pinned pages,
    // so a prefetch that waited for one would never return. (How fast it
    // returns depends on the machine's load, and is not asserted.)
    let submitted = pool.prefetch(&ids(20..40));
    assert!(
        submitted <= 4,
        "{submitted} reads ahead in a one-chunk space"
    );
    pool.check_invariants();
    drop(guards);
    pool.check_invariants();
}

/// Holds the batches of a [`GatedFile`] while closed.
#[derive(Debug)]
struct Gate {
    open: Mutex<bool>,
    changed: parking_lot::Condvar,
    /// Whether a batch stopped waiting for the gate to open.
    gave_up: std::sync::atomic::AtomicBool,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            open: Mutex::new(true),
            changed: parking_lot::Condvar::new(),
            gave_up: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Gate {
    fn close(&self) {
        *self.open.lock() = false;
    }

    fn open(&self) {
        *self.open.lock() = true;
        self.changed.notify_all();
    }

    fn gave_up(&self) -> bool {
        self.gave_up.load(Ordering::SeqCst)
    }

    /// Waits until the gate is open, or gives up after two minutes, so that
    /// a test that wrongly waits for a held batch fails instead of hanging.
    fn pass(&self) {
        let mut open = self.open.lock();
        while !*open {
            if self
                .changed
                .wait_for(&mut open, Duration::from_secs(120))
                .timed_out()
            {
                self.gave_up.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// A memory file whose batches run on their own thread once its gate lets
/// them (single reads and writes run at once).
#[derive(Debug)]
struct GatedFile {
    inner: Arc<barracuda_io::MemoryFile>,
    gate: Arc<Gate>,
}

impl barracuda_io::BlockFile for GatedFile {
    fn read_at(
        &self,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> std::result::Result<(), barracuda_io::IoError> {
        self.inner.read_at(offset_bytes, buf)
    }

    fn write_at(
        &self,
        offset_bytes: u64,
        data: &[u8],
    ) -> std::result::Result<(), barracuda_io::IoError> {
        self.inner.write_at(offset_bytes, data)
    }

    fn sync_data(&self) -> std::result::Result<(), barracuda_io::IoError> {
        self.inner.sync_data()
    }

    fn len(&self) -> std::result::Result<u64, barracuda_io::IoError> {
        self.inner.len()
    }

    fn set_len(&self, len_bytes: u64) -> std::result::Result<(), barracuda_io::IoError> {
        self.inner.set_len(len_bytes)
    }

    fn alignment(&self) -> barracuda_io::Alignment {
        self.inner.alignment()
    }

    fn path(&self) -> &std::path::Path {
        self.inner.path()
    }

    fn submit(&self, requests: Vec<IoRequest>, completions: &CompletionSender) {
        let inner = Arc::clone(&self.inner);
        let gate = Arc::clone(&self.gate);
        let completions = completions.clone();
        std::thread::spawn(move || {
            gate.pass();
            inner.submit(requests, &completions);
        });
    }
}

/// A pool opened with `open_shared` over a file whose batches complete
/// 50 ms later on another thread, like a device.
fn shared_slow_pool(file: Arc<CountingFile>) -> Arc<BufferPool> {
    let services = Services {
        codec: Arc::new(SimpleCodec::default()),
        file,
        durable_lsn: Arc::new(|| Lsn(u64::MAX)),
        clock: None,
    };
    let config = PoolConfig::default()
        .page_size_bytes(PAGE_BYTES)
        .format(compressed())
        .buffer_pool_bytes(64 * PAGE_BYTES);
    BufferPool::open_shared(config, services).unwrap()
}

fn slow_file() -> Arc<CountingFile> {
    let io_file = Arc::new(barracuda_io::MemoryFile::new("readahead"));
    let slow = Arc::new(FaultFile::with_latency(io_file, Duration::from_millis(50)));
    Arc::new(CountingFile::new(Arc::new(FileService::new(slow)), 8))
}

#[test]
fn a_shared_pool_installs_read_ahead_without_its_callers() {
    let file = slow_file();
    let pool = shared_slow_pool(file.clone());
    write_pages(&pool, 16);
    assert_eq!(pool.prefetch(&ids(0..16)), 16);
    // Nobody calls into the pool: only the installer thread can install.
    // (A pool whose callers install would never get here; the bound only
    // turns that hang into a failure.)
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while pool.read_ahead_in_flight() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(pool.read_ahead_in_flight(), 0, "nobody installed");
    assert_eq!(pool.drain_read_ahead(), 0, "a caller installed");
    let status = pool.status();
    assert_eq!(status.read_ahead, 16);
    assert_eq!(status.pages_read, 0);
    let reads_before = file.all_reads();
    for page in 0..16 {
        check_page(&pool, page);
    }
    assert_eq!(
        file.all_reads(),
        reads_before,
        "a page read ahead was read again"
    );
    pool.check_invariants();
}

#[test]
fn fixes_on_a_shared_pool_wait_for_their_own_pages() {
    let file = slow_file();
    let pool = shared_slow_pool(file.clone());
    write_pages(&pool, 32);
    let reads_before = file.all_reads();
    // Two batches in flight at once; each thread fixes pages of both.
    assert_eq!(pool.prefetch(&ids(0..16)), 16);
    assert_eq!(pool.prefetch(&ids(16..32)), 16);
    check_from_four_threads(&pool, (0..32).rev().collect());
    assert_eq!(file.all_reads() - reads_before, 32, "a page read twice");
    assert_eq!(pool.read_ahead_in_flight(), 0);
    let status = pool.status();
    assert_eq!((status.read_ahead, status.pages_read), (32, 0));
    pool.check_invariants();
}

#[test]
fn a_shared_pool_dropped_with_reads_in_flight_shuts_down() {
    let io_file = Arc::new(barracuda_io::MemoryFile::new("readahead"));
    let slow = Arc::new(FaultFile::with_latency(io_file, Duration::from_millis(50)));
    let file: Arc<dyn PageFile> = Arc::new(FileService::new(slow));
    let pool = shared_slow_pool(Arc::new(CountingFile::new(Arc::clone(&file), 8)));
    write_pages(&pool, 16);
    assert_eq!(pool.prefetch(&ids(0..16)), 16);
    assert!(pool.read_ahead_in_flight() > 0);
    let weak = Arc::downgrade(&pool);
    drop(pool);
    assert!(
        weak.upgrade().is_none(),
        "the installer keeps the pool alive"
    );
    // The late completions go nowhere; the file serves a new pool.
    std::thread::sleep(Duration::from_millis(100));
    let pool = shared_slow_pool(Arc::new(CountingFile::new(file, 8)));
    assert_eq!(pool.prefetch(&ids(0..16)), 16);
    for page in 0..16 {
        check_page(&pool, page);
    }
    pool.check_invariants();
}
