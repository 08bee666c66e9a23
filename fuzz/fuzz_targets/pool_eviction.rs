//! Fuzzes the buffer pool with operation sequences on a tiny budget (a few
//! chunks), with read and write failures injected on a schedule, and checks
//! `check_invariants()` plus a model of page contents after every step.
#![no_main]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arbitrary::Arbitrary;
use barracuda_base::{Lsn, PageId};
use barracuda_pool::testing::{HEADER_BYTES, MemoryFile, SimpleCodec};
use barracuda_pool::{
    BufferPool, CommitOutcome, EvictionPolicy, ManualClock, PageFile, PageFormat, PoolConfig,
    PoolError, Services,
};

const PAGE_SIZE_BYTES: usize = 4096;
/// Page ids 0..32: several times what the largest budget below holds.
const PAGE_ID_COUNT: u8 = 32;
/// Bounded input: at most this many operations per run.
const OPS_MAX: usize = 256;

#[derive(Arbitrary, Debug)]
enum Op {
    Create(u8),
    Read(u8),
    Write {
        page: u8,
        offset: u16,
        len: u8,
        byte: u8,
        noise: bool,
        commit: bool,
    },
    Flush(u8),
    Evict(u8),
    Advance(u16),
    FreezeLog(bool),
    PinAndRead {
        pinned: u8,
        others: Vec<u8>,
    },
    Status,
    /// Read-ahead of any ids (existing or not): failures are dropped.
    Prefetch(Vec<u8>),
    /// Lends this many bytes out of the budget (a record cache growing).
    Lend(u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    chunk_count: u8,
    block_shift: u8,
    uncompressed: bool,
    innodb: bool,
    /// Every n-th file operation fails (0: none).
    fail_every: u8,
    /// Writes per flush batch, 1..=4.
    queue_depth: u8,
    /// The OS cache tier over a modelled page cache.
    os_cache_tier: bool,
    ops: Vec<Op>,
}

/// A memory file that fails every `fail_every`-th read or write.
struct FaultyFile {
    inner: MemoryFile,
    count: AtomicU64,
    fail_every: u64,
    queue_depth: usize,
}

impl FaultyFile {
    fn fail(&self, operation: &'static str) -> barracuda_pool::Result<()> {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        if self.fail_every != 0 && n.is_multiple_of(self.fail_every) {
            return Err(PoolError::Io {
                page_id: PageId(u64::MAX),
                operation,
                message: "injected".into(),
            });
        }
        Ok(())
    }
}

impl PageFile for FaultyFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> barracuda_pool::Result<()> {
        self.fail("read")?;
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> barracuda_pool::Result<()> {
        self.fail("write")?;
        self.inner.write_at(offset, buf)
    }

    fn sync_data(&self) -> barracuda_pool::Result<()> {
        self.inner.sync_data()
    }

    fn read_if_cached(&self, offset: u64, buf: &mut [u8]) -> barracuda_pool::Result<bool> {
        self.fail("read")?;
        self.inner.read_if_cached(offset, buf)
    }

    fn uncache(&self, offset: u64, len_bytes: u64) {
        self.inner.uncache(offset, len_bytes);
    }

    fn queue_depth(&self) -> usize {
        self.queue_depth
    }
}

struct Harness {
    pool: BufferPool,
    clock: ManualClock,
    durable: Arc<AtomicU64>,
    frozen: bool,
    lsn: u64,
    model: BTreeMap<u64, Vec<u8>>,
    /// Reads submitted by `prefetch` so far.
    read_ahead_submitted: u64,
    /// Bytes lent so far, and the pool's chunks before any loan.
    lent_bytes: usize,
    chunk_count: u32,
}

impl Harness {
    /// Only conditions of the world may fail: injected I/O errors and
    /// exhaustion on a tiny pool. Anything else is a bug.
    fn expect_world(&self, error: &PoolError) {
        let world = matches!(
            error,
            PoolError::Io { .. } | PoolError::ReadFailed { .. } | PoolError::Exhausted { .. }
        );
        assert!(world, "unexpected error: {error}");
    }

    fn check(&self, page: u64, bytes: &[u8]) {
        let expected = &self.model[&page];
        assert!(
            bytes[HEADER_BYTES..] == expected[HEADER_BYTES..],
            "page {page} differs from the model"
        );
    }

    fn next_lsn(&mut self) -> Lsn {
        self.lsn += 1;
        if !self.frozen {
            self.durable.store(self.lsn, Ordering::Relaxed);
        }
        Lsn(self.lsn)
    }

    fn write(&mut self, page: u64, offset: u16, len: u8, byte: u8, noise: bool, commit: bool) {
        let offset = usize::from(offset).clamp(HEADER_BYTES, PAGE_SIZE_BYTES - 1);
        let len = usize::from(len).min(PAGE_SIZE_BYTES - offset);
        let mut state = u32::from(byte) | 1;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                if noise {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    state as u8
                } else {
                    byte
                }
            })
            .collect();
        let lsn = self.next_lsn();
        let mut guard = match self.pool.fix_exclusive(PageId(page)) {
            Ok(guard) => guard,
            Err(e) => return self.expect_world(&e),
        };
        self.check(page, guard.page());
        guard.write(offset, &bytes).expect("in bounds");
        if !commit {
            return;
        }
        match guard.commit(lsn).expect("the simple codec cannot fail") {
            CommitOutcome::Fits => self.model.get_mut(&page).expect("created")
                [offset..offset + len]
                .copy_from_slice(&bytes),
            CommitOutcome::DoesNotFit => {}
        }
        self.check(page, guard.page());
    }

    fn apply(&mut self, op: Op) {
        let exists = |page: &u8| self.model.contains_key(&u64::from(*page % PAGE_ID_COUNT));
        match op {
            Op::Create(page) => {
                let page = u64::from(page % PAGE_ID_COUNT);
                if self.model.contains_key(&page) {
                    return;
                }
                let lsn = self.next_lsn();
                match self
                    .pool
                    .create(PageId(page))
                    .and_then(|mut g| g.commit(lsn))
                {
                    Ok(_) => {
                        self.model.insert(page, vec![0; PAGE_SIZE_BYTES]);
                    }
                    Err(e) => self.expect_world(&e),
                }
            }
            Op::Read(page) if exists(&page) => {
                let page = u64::from(page % PAGE_ID_COUNT);
                match self.pool.fix_shared(PageId(page)) {
                    Ok(guard) => self.check(page, guard.page()),
                    Err(e) => self.expect_world(&e),
                }
            }
            Op::Write {
                page,
                offset,
                len,
                byte,
                noise,
                commit,
            } if exists(&page) => self.write(
                u64::from(page % PAGE_ID_COUNT),
                offset,
                len,
                byte,
                noise,
                commit,
            ),
            Op::Flush(count) => {
                if let Err(e) = self.pool.flush_some(usize::from(count)) {
                    self.expect_world(&e);
                }
            }
            Op::Evict(page) => {
                self.pool.evict(PageId(u64::from(page % PAGE_ID_COUNT)));
            }
            Op::Advance(ms) => self.clock.advance_ms(u64::from(ms)),
            Op::FreezeLog(frozen) => {
                self.frozen = frozen;
                self.durable.store(self.lsn, Ordering::Relaxed);
            }
            Op::PinAndRead { pinned, others } if exists(&pinned) => {
                let pinned = u64::from(pinned % PAGE_ID_COUNT);
                let guard = match self.pool.fix_shared(PageId(pinned)) {
                    Ok(guard) => guard,
                    Err(e) => return self.expect_world(&e),
                };
                for other in others.iter().take(16).filter(|p| exists(p)) {
                    let other = u64::from(*other % PAGE_ID_COUNT);
                    if other == pinned {
                        continue;
                    }
                    match self.pool.fix_shared(PageId(other)) {
                        Ok(g) => self.check(other, g.page()),
                        Err(e) => self.expect_world(&e),
                    }
                    self.pool.check_invariants();
                }
                let lru = self.pool.lru_snapshot();
                assert!(
                    lru.iter().any(|e| e.page_id == PageId(pinned) && e.pinned),
                    "pinned page evicted"
                );
                self.check(pinned, guard.page());
            }
            Op::Prefetch(pages) => {
                let ids: Vec<PageId> = pages
                    .iter()
                    .take(16)
                    .map(|p| PageId(u64::from(*p % PAGE_ID_COUNT)))
                    .collect();
                self.read_ahead_submitted += self.pool.prefetch(&ids) as u64;
                // The memory file completes inline: nothing stays in flight.
                assert_eq!(self.pool.read_ahead_in_flight(), 0);
                let status = self.pool.status();
                assert_eq!(
                    status.read_ahead + status.read_ahead_failed,
                    self.read_ahead_submitted
                );
                assert!(status.read_ahead_evicted_unused <= status.read_ahead);
            }
            Op::Lend(bytes) => {
                let bytes = usize::from(bytes);
                match self.pool.lend_bytes(bytes) {
                    Ok(true) => self.lent_bytes += bytes,
                    Ok(false) => {}
                    Err(e) => self.expect_world(&e),
                }
                assert_eq!(self.pool.lent_bytes(), self.lent_bytes);
                let lent_chunks = self.chunk_count - self.pool.chunk_count();
                assert!(lent_chunks as usize >= self.lent_bytes.div_ceil(PAGE_SIZE_BYTES));
                assert!(self.pool.chunk_count() >= self.chunk_count.div_ceil(2));
            }
            Op::Status => {
                let status = self.pool.status();
                assert!(status.bytes_used <= status.budget_bytes);
                let _ = status.render();
            }
            _ => {}
        }
    }
}

libfuzzer_sys::fuzz_target!(|input: Input| {
    let chunk_count = 3 + usize::from(input.chunk_count % 6);
    let block_size_bytes = 1024 << (input.block_shift % 3);
    let format = if input.uncompressed {
        PageFormat::Uncompressed
    } else {
        PageFormat::Compressed { block_size_bytes }
    };
    let policy = if input.innodb {
        EvictionPolicy::InnoDb
    } else {
        EvictionPolicy::CostAware
    };
    let config = PoolConfig::default()
        .page_size_bytes(PAGE_SIZE_BYTES)
        .format(format)
        .buffer_pool_bytes(chunk_count * PAGE_SIZE_BYTES)
        .eviction_policy(policy)
        .exhausted_wait_ms(0)
        .os_cache_tier(input.os_cache_tier);
    let clock = ManualClock::new();
    let durable = Arc::new(AtomicU64::new(0));
    let durable_in = Arc::clone(&durable);
    let file = FaultyFile {
        inner: if input.os_cache_tier {
            MemoryFile::with_os_cache()
        } else {
            MemoryFile::default()
        },
        count: AtomicU64::new(0),
        fail_every: u64::from(input.fail_every % 16),
        queue_depth: 1 + usize::from(input.queue_depth % 4),
    };
    let services = Services {
        codec: Arc::new(if input.uncompressed {
            SimpleCodec::stored()
        } else {
            SimpleCodec::default()
        }),
        file: Arc::new(file),
        durable_lsn: Arc::new(move || Lsn(durable_in.load(Ordering::Relaxed))),
        clock: Some(clock.clone()),
    };
    let pool = BufferPool::open(config, services).expect("valid config");
    let mut harness = Harness {
        pool,
        clock,
        durable,
        frozen: false,
        lsn: 0,
        model: BTreeMap::new(),
        read_ahead_submitted: 0,
        lent_bytes: 0,
        chunk_count: chunk_count as u32,
    };
    for op in input.ops.into_iter().take(OPS_MAX) {
        harness.apply(op);
        harness.pool.check_invariants();
    }
});
