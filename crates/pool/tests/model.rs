//! Model-based tests of the buffer pool (proptest-state-machine): random
//! sequences of create, read, write/commit/rollback, flush, clock moves and
//! pinned scans on a tiny pool, checked against a model of page contents,
//! with `check_invariants()` after every step.

// Test helpers outside `#[test]` functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use barracuda_base::{BlockSize, Geometry};
use barracuda_base::{Lsn, PageId};
use barracuda_codec::Codec;
use barracuda_pool::testing::{MemoryFile, SimpleCodec};
use barracuda_pool::{
    BufferPool, CommitOutcome, EvictionPolicy, ManualClock, PageFormat, PoolConfig, PoolError,
    Services,
};
use barracuda_pool::{CodecService, FileService, PageCodec, PageFile};
use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

const PAGE_SIZE_BYTES: usize = 4096;
const PAGE_COUNT_MAX: u64 = 40;
/// The real codec reserves 40 header bytes (`PAGE_HEADER_RESERVED_BYTES`),
/// the simple one 24: the model leaves the larger alone.
const HEADER_BYTES: usize = barracuda_codec::PAGE_HEADER_RESERVED_BYTES;
const _: () = assert!(HEADER_BYTES >= barracuda_pool::testing::HEADER_BYTES);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    CompressedCostAware,
    CompressedInnoDb,
    Uncompressed,
    /// The real zlib codec and the io crate's memory file.
    ZlibCostAware,
    /// The real codec's stored format, uncompressed pool.
    RealUncompressed,
}

impl Variant {
    fn real(self) -> bool {
        matches!(self, Variant::ZlibCostAware | Variant::RealUncompressed)
    }

    fn compressed(self) -> bool {
        !matches!(self, Variant::Uncompressed | Variant::RealUncompressed)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Create(u64),
    Read(u64),
    Write {
        page: u64,
        offset: u16,
        len: u16,
        byte: u8,
        commit: bool,
    },
    Flush(u8),
    Advance(u64),
    /// Freeze the durable LSN (true) or let it follow every commit (false).
    FreezeLog(bool),
    PinAndScan {
        pinned: u64,
        scan: Vec<u64>,
    },
    /// Read-ahead of created pages (completes inline on these files).
    Prefetch(Vec<u64>),
}

#[derive(Clone, Debug)]
struct Reference {
    variant: Variant,
    chunk_count: usize,
    created: Vec<u64>,
}

impl ReferenceStateMachine for Reference {
    type State = Self;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Self> {
        (
            prop_oneof![
                Just(Variant::CompressedCostAware),
                Just(Variant::CompressedInnoDb),
                Just(Variant::Uncompressed),
                Just(Variant::ZlibCostAware),
                Just(Variant::RealUncompressed),
            ],
            3usize..8,
        )
            .prop_map(|(variant, chunk_count)| Reference {
                variant,
                chunk_count,
                created: Vec::new(),
            })
            .boxed()
    }

    fn transitions(state: &Self) -> BoxedStrategy<Op> {
        let fresh = (0..PAGE_COUNT_MAX).prop_map(Op::Create);
        if state.created.is_empty() {
            return fresh.boxed();
        }
        let pages = state.created.clone();
        let page = proptest::sample::select(pages);
        prop_oneof![
            2 => fresh,
            6 => page.clone().prop_map(Op::Read),
            6 => (page.clone(), prop_oneof![9 => 0u16..600, 1 => 0u16..4000], 1u16..96, any::<u8>(), prop::bool::weighted(0.85))
                .prop_map(|(page, offset, len, byte, commit)| Op::Write { page, offset, len, byte, commit }),
            1 => (1u8..8).prop_map(Op::Flush),
            1 => prop_oneof![Just(10u64), Just(1000u64), Just(3000u64)].prop_map(Op::Advance),
            1 => any::<bool>().prop_map(Op::FreezeLog),
            1 => (page.clone(), prop::collection::vec(page.clone(), 1..24)).prop_map(|(pinned, scan)| Op::PinAndScan { pinned, scan }),
            1 => prop::collection::vec(page, 1..8).prop_map(Op::Prefetch),
        ]
        .boxed()
    }

    fn apply(mut state: Self, op: &Op) -> Self {
        if let Op::Create(page) = op
            && !state.created.contains(page)
        {
            state.created.push(*page);
        }
        state
    }

    fn preconditions(state: &Self, op: &Op) -> bool {
        match op {
            Op::Create(page) => !state.created.contains(page),
            Op::Read(page) | Op::Write { page, .. } => state.created.contains(page),
            Op::PinAndScan { pinned, scan } => {
                state.created.contains(pinned) && scan.iter().all(|p| state.created.contains(p))
            }
            Op::Prefetch(pages) => pages.iter().all(|p| state.created.contains(p)),
            _ => true,
        }
    }
}

struct Sut {
    pool: BufferPool,
    file: Arc<MemoryFile>,
    clock: ManualClock,
    durable: Arc<AtomicU64>,
    log_frozen: bool,
    next_lsn: u64,
    /// The model: committed contents of every created page.
    pages: BTreeMap<u64, Vec<u8>>,
}

impl Sut {
    fn open(reference: &Reference) -> Self {
        let format = if reference.variant.compressed() {
            PageFormat::Compressed {
                block_size_bytes: 1024,
            }
        } else {
            PageFormat::Uncompressed
        };
        let policy = match reference.variant {
            Variant::CompressedInnoDb => EvictionPolicy::InnoDb,
            _ => EvictionPolicy::CostAware,
        };
        let config = PoolConfig::default()
            .page_size_bytes(PAGE_SIZE_BYTES)
            .format(format)
            .eviction_policy(policy)
            // A frozen log makes exhaustion an expected outcome here: fail at once.
            .exhausted_wait_ms(0)
            .buffer_pool_bytes(reference.chunk_count * PAGE_SIZE_BYTES);
        let file = Arc::new(MemoryFile::default());
        let clock = ManualClock::new();
        let (codec, page_file): (Arc<dyn PageCodec>, Arc<dyn PageFile>) =
            if reference.variant.real() {
                let geometry = if reference.variant.compressed() {
                    Geometry::new(PAGE_SIZE_BYTES, BlockSize::Kib1).unwrap()
                } else {
                    Geometry::uncompressed(PAGE_SIZE_BYTES).unwrap()
                };
                let codec = if reference.variant.compressed() {
                    Codec::zlib_default()
                } else {
                    Codec::None
                };
                let io_file = Arc::new(barracuda_io::MemoryFile::new("model"));
                (
                    Arc::new(CodecService::new(codec, geometry).unwrap()),
                    Arc::new(FileService::new(io_file)),
                )
            } else {
                let codec = if reference.variant.compressed() {
                    SimpleCodec::default()
                } else {
                    SimpleCodec::stored()
                };
                (Arc::new(codec), file.clone())
            };
        let durable = Arc::new(AtomicU64::new(u64::MAX));
        let durable_in = Arc::clone(&durable);
        let services = Services {
            codec,
            file: page_file,
            durable_lsn: Arc::new(move || Lsn(durable_in.load(Ordering::Relaxed))),
            clock: Some(clock.clone()),
        };
        let pool = BufferPool::open(config, services).unwrap();
        Sut {
            pool,
            file,
            clock,
            durable,
            log_frozen: false,
            next_lsn: 1,
            pages: BTreeMap::new(),
        }
    }

    fn lsn(&mut self) -> Lsn {
        self.next_lsn += 1;
        if !self.log_frozen {
            self.durable.store(u64::MAX, Ordering::Relaxed);
        }
        Lsn(self.next_lsn)
    }

    /// Exhaustion is a legal outcome on a tiny pool whose dirty pages wait
    /// for a frozen log; anything else is a failure.
    fn allowed(&self, error: &PoolError) {
        assert!(
            matches!(error, PoolError::Exhausted { .. }) && self.log_frozen,
            "unexpected error: {error}"
        );
    }

    fn create(&mut self, page: u64) {
        let lsn = self.lsn();
        let result = self
            .pool
            .create(PageId(page))
            .and_then(|mut guard| guard.commit(lsn));
        match result {
            Ok(outcome) => {
                assert_eq!(outcome, CommitOutcome::Fits);
                self.pages.insert(page, vec![0; PAGE_SIZE_BYTES]);
                let lru = self.pool.lru_snapshot();
                assert_eq!(
                    lru[0].page_id,
                    PageId(page),
                    "a created page goes to the LRU head"
                );
            }
            Err(e) => self.allowed(&e),
        }
    }

    fn read(&mut self, page: u64) {
        let reads_before = self.pool.status().pages_read;
        match self.pool.fix_shared(PageId(page)) {
            Ok(guard) => {
                let expected = self
                    .pages
                    .get(&page)
                    .map_or(&[0u8; PAGE_SIZE_BYTES][..], |p| p);
                assert!(
                    guard.page()[HEADER_BYTES..] == expected[HEADER_BYTES..],
                    "contents of page {page} differ from the model"
                );
            }
            Err(e) => return self.allowed(&e),
        }
        if self.pool.status().pages_read > reads_before {
            // A miss enters at the midpoint: the head of the old sublist, or
            // the tail while the LRU is too short to have one.
            let lru = self.pool.lru_snapshot();
            let position = lru.iter().position(|e| e.page_id == PageId(page)).unwrap();
            let first_old = lru.iter().position(|e| e.old);
            match first_old {
                Some(first_old) => {
                    assert!(lru[position].old, "a miss enters the old sublist");
                    assert!(position <= first_old + 1, "miss not at the midpoint");
                }
                None => assert_eq!(
                    position,
                    lru.len() - 1,
                    "miss not at the tail of a short LRU"
                ),
            }
        }
    }

    fn write(&mut self, page: u64, offset: u16, len: u16, byte: u8, commit: bool) {
        // The header belongs to the codec (see `HEADER_BYTES`).
        let offset = usize::from(offset).clamp(HEADER_BYTES, PAGE_SIZE_BYTES - 1);
        let len = usize::from(len).min(PAGE_SIZE_BYTES - offset);
        // Every fourth value writes noise, which compresses badly, so that
        // pages stop fitting their blocks; the rest write runs.
        let bytes: Vec<u8> = if byte.is_multiple_of(4) {
            let mut state = u32::from(byte) | 1;
            (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    state as u8
                })
                .collect()
        } else {
            vec![byte; len]
        };
        let lsn = self.lsn();
        let mut guard = match self.pool.fix_exclusive(PageId(page)) {
            Ok(guard) => guard,
            Err(e) => return self.allowed(&e),
        };
        guard.write(offset, &bytes).unwrap();
        if !commit {
            drop(guard);
            return;
        }
        let outcome = guard.commit(lsn).unwrap();
        let model = self.pages.get_mut(&page).unwrap();
        match outcome {
            CommitOutcome::Fits => model[offset..offset + len].copy_from_slice(&bytes),
            CommitOutcome::DoesNotFit => {}
        }
        assert!(
            guard.page()[HEADER_BYTES..] == model[HEADER_BYTES..],
            "page {page} after commit ({outcome:?}) differs from the model"
        );
    }

    fn pin_and_scan(&mut self, pinned: u64, scan: &[u64]) {
        let guard = match self.pool.fix_shared(PageId(pinned)) {
            Ok(guard) => guard,
            Err(e) => return self.allowed(&e),
        };
        for &page in scan {
            if page == pinned {
                continue;
            }
            if let Err(e) = self.pool.fix_shared(PageId(page)) {
                self.allowed(&e);
            }
            self.pool.check_invariants();
        }
        let lru = self.pool.lru_snapshot();
        let entry = lru
            .iter()
            .find(|e| e.page_id == PageId(pinned))
            .expect("pinned page evicted");
        assert!(
            entry.pinned && entry.has_frame,
            "pinned page lost its frame"
        );
        assert!(guard.page()[HEADER_BYTES..] == self.pages[&pinned][HEADER_BYTES..]);
    }
}

struct PoolMachine;

impl StateMachineTest for PoolMachine {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(reference: &Reference) -> Sut {
        Sut::open(reference)
    }

    fn apply(mut sut: Sut, _reference: &Reference, op: Op) -> Sut {
        // A page whose creation failed (pool exhausted) does not exist.
        let exists = |page: &u64| sut.pages.contains_key(page);
        let skip = match &op {
            Op::Read(page) | Op::Write { page, .. } => !exists(page),
            Op::PinAndScan { pinned, scan } => !exists(pinned) || !scan.iter().all(exists),
            Op::Prefetch(pages) => !pages.iter().all(exists),
            _ => false,
        };
        if skip {
            return sut;
        }
        match op {
            Op::Create(page) => sut.create(page),
            Op::Read(page) => sut.read(page),
            Op::Write {
                page,
                offset,
                len,
                byte,
                commit,
            } => sut.write(page, offset, len, byte, commit),
            Op::Flush(count) => {
                sut.pool.flush_some(usize::from(count)).unwrap();
            }
            Op::Advance(ms) => sut.clock.advance_ms(ms),
            Op::FreezeLog(frozen) => {
                sut.log_frozen = frozen;
                let durable = if frozen { sut.next_lsn } else { u64::MAX };
                sut.durable.store(durable, Ordering::Relaxed);
            }
            Op::PinAndScan { pinned, scan } => sut.pin_and_scan(pinned, &scan),
            Op::Prefetch(pages) => {
                let ids: Vec<PageId> = pages.into_iter().map(PageId).collect();
                sut.pool.prefetch(&ids);
                assert_eq!(sut.pool.read_ahead_in_flight(), 0);
                let status = sut.pool.status();
                assert_eq!(
                    status.read_ahead_failed, 0,
                    "read-ahead of a written page failed"
                );
            }
        }
        sut
    }

    fn check_invariants(sut: &Sut, _reference: &Reference) {
        sut.pool.check_invariants();
        let status = sut.pool.status();
        assert!(status.bytes_used <= status.budget_bytes, "over budget");
        assert!(status.lru_len <= sut.pages.len() as u64);
        let _ = sut.file.reads.load(Ordering::Relaxed);
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig { cases: 200, max_shrink_iters: 4096, ..ProptestConfig::default() })]
    #[test]
    fn pool_matches_model(sequential 1..120 => PoolMachine);
}

/// Every page written, evicted and read back returns its last committed
/// bytes, on a pool far smaller than the data, with each codec.
#[test]
fn evict_and_reload_returns_last_written_contents() {
    for variant in [
        Variant::CompressedCostAware,
        Variant::ZlibCostAware,
        Variant::RealUncompressed,
    ] {
        let reference = Reference {
            variant,
            chunk_count: 4,
            created: Vec::new(),
        };
        let mut sut = Sut::open(&reference);
        for page in 0..30 {
            sut.create(page);
            sut.write(page, 48, 16, page as u8 + 1, true);
        }
        for page in 0..30 {
            sut.read(page);
            sut.pool.check_invariants();
        }
        // The page just read is cached; some early ones left the pool, and
        // a fix of them would read the file.
        assert!(sut.pool.is_cached(PageId(29)), "{variant:?}");
        assert!(
            (0..30).any(|p| !sut.pool.is_cached(PageId(p))),
            "{variant:?}: every page cached"
        );
        assert!(!sut.pool.is_cached(PageId(1_000)), "{variant:?}");
        let status = sut.pool.status();
        assert!(
            status.pages_evicted > 0 && status.pages_written > 0 && status.pages_read > 0,
            "{variant:?}: {}",
            status.render()
        );
    }
}
