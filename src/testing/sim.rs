//! A differential crash simulator: random operations on a database whose
//! files inject power losses ([`FaultFile`]), checked against an in-memory
//! model, one map per tree.
//!
//! One seed picks everything: the trees and their page size, compression
//! and block size; the durability (`Sync`, or `NoSync` with explicit
//! [`Db::sync`]); the pool and log sizes; the key space and values; the
//! operations (puts, deletes, overwrites, [`crate::WriteBatch`]es across
//! trees, chunked writers, compactions, checkpoints, syncs, reads); where
//! each crash epoch ends; and which epochs fail a write or sync with an
//! injected I/O error. Each epoch opens the database (recovering the last
//! crash), checks it, runs its operations, stops as if the process died,
//! and has every file lose its unsynced writes, whole or torn at sectors.
//!
//! After each recovery the database must open, pass `check`, count its
//! entries exactly (`len`), answer gets as its scans do, and hold in every
//! tree the model's contents at one moment between the last durable
//! operation and the last one attempted. The model keeps the history since
//! the last durable point for that: a batch is one step, a chunked writer
//! (atomic only part by part) may be found partly applied.
//!
//! What a seed does not fix: the engine's background threads (the log
//! writer, the pools' page cleaners) write when they are scheduled, so
//! which writes are still unsynced at a crash may differ between runs of
//! one seed. The configuration, the operations and the crash's choices
//! among the unsynced writes are the same.
//!
//! The files are buffered (`FlushMethod::Fsync`, pread backend, one I/O
//! thread each way) so that a directory on tmpfs works: every write then
//! stays in memory.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use barracuda_io::{
    Backend, BlockFile, FaultConfig, FaultErrno, FaultFile, FaultOp, FaultRule, FlushMethod,
};
use parking_lot::Mutex;

use crate::{
    BlockSize, Compression, Db, Durability, Error, FileWrapper, Options, Tree, TreeOptions,
    WriteBatch,
};

/// A small seeded generator (the pattern family's SplitMix64): the simulator
/// must not depend on a generator crate's stream staying the same across
/// versions.
#[derive(Clone, Debug)]
pub struct SimRng(barracuda_btree::pattern::Rng);

impl SimRng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> SimRng {
        SimRng(barracuda_btree::pattern::Rng::from_state(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// A number in `low..=high`.
    fn range(&mut self, low: usize, high: usize) -> usize {
        low + self.below((high.saturating_sub(low) + 1) as u64) as usize
    }

    /// True with probability `numerator / denominator`.
    fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        self.below(denominator) < numerator
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// What a seed configures (see the module docs).
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The trees, named `t0`, `t1`, ...
    pub trees: Vec<TreeOptions>,
    /// The database's durability.
    pub durability: Durability,
    /// Distinct keys per tree.
    pub key_space: u64,
    /// Keys are `k` and five digits, then up to this many padding bytes.
    pub key_pad_bytes: usize,
    /// The most bytes of an ordinary value.
    pub value_bytes_max: usize,
    /// Whether some values are several pages long.
    pub large_values: bool,
    /// `Options::buffer_pool_bytes`.
    pub buffer_pool_bytes: usize,
    /// `Options::log_bytes`.
    pub log_bytes: u64,
    /// Whether a crash may tear unsynced writes at sectors.
    pub tear_writes: bool,
    /// Whether some epochs fail a write or sync with an I/O error.
    pub io_errors: bool,
    /// The most operations of one epoch.
    pub ops_per_epoch_max: usize,
}

impl SimConfig {
    /// The configuration of `seed`. One seed in four is the default tree
    /// (zlib, 16 KiB pages, 8 KiB blocks) under `Sync` with values of up to
    /// 1,500 bytes on 250 keys.
    pub fn from_seed(seed: u64) -> SimConfig {
        let mut rng = SimRng::new(seed ^ 0xC0F1_6000_0000_0000);
        if rng.chance(1, 4) {
            return SimConfig {
                trees: vec![TreeOptions::default()],
                durability: Durability::Sync,
                key_space: 250,
                key_pad_bytes: 0,
                value_bytes_max: 1_500,
                large_values: false,
                buffer_pool_bytes: 1 << 20,
                log_bytes: 8 << 20,
                tear_writes: true,
                io_errors: false,
                ops_per_epoch_max: 80,
            };
        }
        let tree_count = rng.range(1, 3);
        let trees: Vec<TreeOptions> = (0..tree_count).map(|_| random_tree(&mut rng)).collect();
        // A log of under 128 pages refuses even single small writes as
        // larger than an atomic write may be (a write's worst case counts
        // whole page images).
        let page_max = trees
            .iter()
            .map(|tree| tree.page_size_bytes as u64)
            .max()
            .unwrap_or(4 << 10);
        let log_bytes = rng.pick(&[1 << 20, 2 << 20, 8 << 20]).max(128 * page_max);
        // Likewise a pool of under 64 pages refuses a chunked writer's own
        // parts as larger than an atomic write may be.
        let buffer_pool_bytes = rng
            .pick(&[1 << 20, 2 << 20, 4 << 20])
            .max(64 * page_max as usize);
        let durability = if rng.chance(1, 2) {
            Durability::Sync
        } else {
            Durability::NoSync
        };
        SimConfig {
            trees,
            durability,
            key_space: rng.pick(&[8, 40, 250, 400]),
            key_pad_bytes: rng.pick(&[0, 0, 20, 100]),
            value_bytes_max: rng.pick(&[0, 100, 1_500, 1_500, 4_000]),
            large_values: rng.chance(1, 3),
            buffer_pool_bytes,
            log_bytes,
            tear_writes: rng.chance(3, 4),
            io_errors: rng.chance(1, 3),
            ops_per_epoch_max: rng.pick(&[10, 40, 80]),
        }
    }
}

fn random_tree(rng: &mut SimRng) -> TreeOptions {
    let page_size_bytes: usize = rng.pick(&[4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10]);
    let compression = match rng.below(5) {
        0 => Compression::None,
        1 | 2 => Compression::Zlib {
            level: rng.range(1, 9) as u32,
        },
        _ => Compression::Zstd {
            level: rng.range(1, 6) as i32,
        },
    };
    // A compressed block is smaller than its page (at most 16 KiB), and at
    // least a quarter of it: a block of an eighth of the page cannot hold
    // an incompressible value of the inline bound (an eighth of the page),
    // and writes of such values fail with `CompressionUnfit`.
    let sizes = [
        BlockSize::Kib1,
        BlockSize::Kib2,
        BlockSize::Kib4,
        BlockSize::Kib8,
        BlockSize::Kib16,
    ];
    let fitting: Vec<BlockSize> = sizes
        .into_iter()
        .filter(|size| {
            size.compressed_bytes()
                .is_some_and(|bytes| bytes < page_size_bytes && bytes * 4 >= page_size_bytes)
        })
        .collect();
    let block_size = rng.pick(&fitting);
    // An uncompressed tree is stored with the page as its block, and asking
    // for it again with another block size is refused as other options.
    let block_size = match compression {
        Compression::None => BlockSize::Uncompressed,
        _ => block_size,
    };
    TreeOptions::default()
        .page_size_bytes(page_size_bytes)
        .compression(compression)
        .block_size(block_size)
}

/// What one seed's run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Crashes, each followed by a checked recovery (or a failed open).
    pub cycles: u64,
    /// Operations attempted, reads included.
    pub ops: u64,
    /// Epochs cut short by an injected I/O error.
    pub io_errors: u64,
    /// Opens that an injected I/O error made fail.
    pub failed_opens: u64,
    /// Recoveries that found an operation after the last durable one.
    pub recovered_past_durable: u64,
    /// Recoveries that found a chunked writer partly applied.
    pub partial_chunked: u64,
    /// Writes refused as too large (nothing changed).
    pub refused: u64,
}

impl std::ops::AddAssign for SimStats {
    fn add_assign(&mut self, other: SimStats) {
        self.cycles += other.cycles;
        self.ops += other.ops;
        self.io_errors += other.io_errors;
        self.failed_opens += other.failed_opens;
        self.recovered_past_durable += other.recovered_past_durable;
        self.partial_chunked += other.partial_chunked;
        self.refused += other.refused;
    }
}

/// A run that found a bug: where, and what.
#[derive(Clone, Debug)]
pub struct SimFailure {
    /// The seed (reproduce with it).
    pub seed: u64,
    /// The crash epoch.
    pub epoch: u32,
    /// The last operation attempted (numbered from 1 over the whole run),
    /// 0 if none.
    pub op_index: u64,
    /// The seed's configuration.
    pub config: SimConfig,
    /// What went wrong, with the error's text.
    pub message: String,
    /// The last operations, oldest first.
    pub recent_ops: Vec<String>,
    /// What the run did before it failed.
    pub stats: SimStats,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} failed in epoch {} after operation {}: {}",
            self.seed, self.epoch, self.op_index, self.message
        )?;
        writeln!(f, "configuration: {:?}", self.config)?;
        writeln!(f, "last operations:")?;
        for op in &self.recent_ops {
            writeln!(f, "  {op}")?;
        }
        write!(f, "reproduce with BARRACUDA_SIM_SEED={}", self.seed)
    }
}

/// Runs `epochs` crash epochs of `seed` in a new directory under `base_dir`
/// (removed afterwards, unless `BARRACUDA_SIM_KEEP` is set).
///
/// # Errors
/// The first disagreement with the model, or error where none was
/// injected.
pub fn run_seed(base_dir: &Path, seed: u64, epochs: u32) -> Result<SimStats, Box<SimFailure>> {
    run_seed_with(base_dir, seed, epochs, |_| {})
}

/// [`run_seed`] with the seed's configuration changed by `adjust` first
/// (e.g. to leave out a class of values).
///
/// # Errors
/// As [`run_seed`].
pub fn run_seed_with(
    base_dir: &Path,
    seed: u64,
    epochs: u32,
    adjust: impl FnOnce(&mut SimConfig),
) -> Result<SimStats, Box<SimFailure>> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let dir = base_dir.join(format!("sim-{seed}-{}-{run}", std::process::id()));
    let mut config = SimConfig::from_seed(seed);
    adjust(&mut config);
    let mut sim = Sim::new(seed, config, dir.clone());
    let result = sim.run(epochs);
    if std::env::var_os("BARRACUDA_SIM_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result.map(|()| sim.stats)
}

/// The model: one map per tree.
type Model = Vec<BTreeMap<Vec<u8>, Vec<u8>>>;

/// One key's change by an operation.
#[derive(Clone, Debug)]
struct Change {
    tree: usize,
    key: Vec<u8>,
    old: Option<Vec<u8>>,
    new: Option<Vec<u8>>,
}

/// An operation since the last durable point.
#[derive(Debug)]
struct Step {
    changes: Vec<Change>,
    /// False for a chunked writer, which a crash may cut between parts.
    atomic: bool,
}

/// How an operation ended.
enum Outcome {
    /// Returned `Ok`; durable if it said so.
    Done { durable: bool },
    /// Refused before changing anything (too large).
    Refused,
    /// Failed after an injected I/O error: it may or may not be there.
    Uncertain,
}

type Files = Arc<Mutex<Vec<Arc<FaultFile>>>>;

/// The error rule every file of an epoch gets, if any.
type InjectedFault = Option<FaultRule>;

const HOUR: Duration = Duration::from_secs(3600);

/// Operations remembered for a failure report.
const RECENT_OPS: usize = 16;

struct Sim {
    seed: u64,
    config: SimConfig,
    dir: PathBuf,
    rng: SimRng,
    model: Model,
    /// Steps since the last durable point, oldest first.
    journal: Vec<Step>,
    op_index: u64,
    epoch: u32,
    recent: VecDeque<String>,
    stats: SimStats,
    /// Whether every operation is printed (`BARRACUDA_SIM_TRACE`).
    trace: bool,
}

impl Sim {
    fn new(seed: u64, config: SimConfig, dir: PathBuf) -> Sim {
        let model = vec![BTreeMap::new(); config.trees.len()];
        Sim {
            seed,
            config,
            dir,
            rng: SimRng::new(seed),
            model,
            journal: Vec::new(),
            op_index: 0,
            epoch: 0,
            recent: VecDeque::new(),
            stats: SimStats::default(),
            trace: std::env::var_os("BARRACUDA_SIM_TRACE").is_some(),
        }
    }

    fn failure(&self, message: String) -> Box<SimFailure> {
        Box::new(SimFailure {
            seed: self.seed,
            epoch: self.epoch,
            op_index: self.op_index,
            config: self.config.clone(),
            message,
            recent_ops: self.recent.iter().cloned().collect(),
            stats: self.stats,
        })
    }

    fn note(&mut self, op: String) {
        if self.trace {
            eprintln!(
                "seed {} epoch {} #{} {op}",
                self.seed, self.epoch, self.op_index
            );
        }
        if self.recent.len() == RECENT_OPS {
            self.recent.pop_front();
        }
        self.recent.push_back(format!("#{} {op}", self.op_index));
    }

    fn run(&mut self, epochs: u32) -> Result<(), Box<SimFailure>> {
        if self.trace {
            eprintln!("seed {}: {:?}", self.seed, self.config);
        }
        for epoch in 0..epochs {
            self.epoch = epoch;
            self.run_epoch()?;
        }
        // A last recovery, checked, and a clean close.
        self.epoch = epochs;
        let (wrapper, files) = self.wrapper(None);
        let db = self
            .options(wrapper)
            .open(&self.dir)
            .map_err(|e| self.failure(format!("open after the last crash failed: {e}")))?;
        self.verify(&db)?;
        db.close()
            .map_err(|e| self.failure(format!("close failed: {e}")))?;
        drop(files);
        Ok(())
    }

    fn options(&self, wrapper: FileWrapper) -> Options {
        Db::options()
            .buffer_pool_bytes(self.config.buffer_pool_bytes)
            .log_bytes(self.config.log_bytes)
            .durability(self.config.durability)
            .flush_method(FlushMethod::Fsync)
            .io_backend(Backend::Pread)
            .read_io_threads(1)
            .write_io_threads(1)
            // The operations checkpoint and sync; background ones would
            // only make a seed's run depend on timing more.
            .checkpoint_interval(HOUR)
            .idle_checkpoint(None)
            .log_flush_interval(HOUR)
            .wrap_files(wrapper)
    }

    /// A wrapper that puts each file this epoch opens in a `FaultFile`.
    fn wrapper(&self, fault: InjectedFault) -> (FileWrapper, Files) {
        let files: Files = Arc::default();
        let captured = Arc::clone(&files);
        let seed = self.seed.wrapping_mul(1 << 20) ^ (u64::from(self.epoch) << 8);
        let tear = self.config.tear_writes;
        let wrapper = FileWrapper(Arc::new(move |_: &Path, file: Arc<dyn BlockFile>| {
            let mut files = captured.lock();
            let index = files.len();
            let mut config = FaultConfig::default()
                .seed(seed ^ index as u64)
                .tear_writes(tear)
                .track_crashes(true);
            if let Some(rule) = fault {
                config = config.rule(rule);
            }
            let fault = Arc::new(FaultFile::new(file, config));
            files.push(Arc::clone(&fault));
            fault as Arc<dyn BlockFile>
        }));
        (wrapper, files)
    }

    fn crash(&self, db: Db, files: &Files) -> Result<(), Box<SimFailure>> {
        if self.trace {
            eprintln!("seed {} epoch {}: crash", self.seed, self.epoch);
        }
        db.halt();
        for file in files.lock().iter() {
            file.crash()
                .map_err(|e| self.failure(format!("the simulated crash failed: {e}")))?;
        }
        Ok(())
    }

    fn run_epoch(&mut self) -> Result<(), Box<SimFailure>> {
        let fault = if self.config.io_errors && self.rng.chance(1, 3) {
            let op = if self.rng.chance(1, 4) {
                FaultOp::Sync
            } else {
                FaultOp::Write
            };
            let errno = if self.rng.chance(1, 4) {
                FaultErrno::Enospc
            } else {
                FaultErrno::Eio
            };
            // Every file fails each such request with this probability
            // (the data files write rarely, the log at every commit).
            let probability = self.rng.pick(&[0.01, 0.03, 0.1]);
            Some(FaultRule::Random {
                op,
                probability,
                errno,
            })
        } else {
            None
        };
        if self.trace {
            eprintln!(
                "seed {} epoch {}: injected {fault:?}",
                self.seed, self.epoch
            );
        }
        let (wrapper, files) = self.wrapper(fault);
        let db = match self.options(wrapper).open(&self.dir) {
            Ok(db) => db,
            Err(e) if fault.is_some() => {
                // The files are closed; the next epoch recovers this.
                self.stats.failed_opens += 1;
                self.stats.cycles += 1;
                for file in files.lock().iter() {
                    file.crash()
                        .map_err(|e| self.failure(format!("the simulated crash failed: {e}")))?;
                }
                self.note(format!("open failed by the injected fault: {e}"));
                return Ok(());
            }
            Err(e) => {
                let what = if self.epoch == 0 {
                    "open"
                } else {
                    "reopen after a crash"
                };
                return Err(self.failure(format!("{what} failed: {e}")));
            }
        };
        if self.epoch > 0 {
            self.verify(&db)?;
        }
        let mut trees = Vec::new();
        for (index, options) in self.config.trees.clone().into_iter().enumerate() {
            match db.create_tree(&format!("t{index}"), options) {
                Ok(tree) => trees.push(tree),
                Err(_) if fault.is_some() => {
                    self.stats.io_errors += 1;
                    self.stats.cycles += 1;
                    return self.crash(db, &files);
                }
                Err(e) => return Err(self.failure(format!("creating tree t{index}: {e}"))),
            }
        }
        let ops = self.rng.range(1, self.config.ops_per_epoch_max);
        for _ in 0..ops {
            self.op_index += 1;
            self.stats.ops += 1;
            let outcome = self.step(&db, &trees, fault.is_some())?;
            if matches!(outcome, Outcome::Uncertain) {
                self.stats.io_errors += 1;
                break;
            }
        }
        drop(trees);
        self.stats.cycles += 1;
        self.crash(db, &files)
    }

    /// Runs one random operation; a write's changes go to the model and,
    /// unless durable, to the journal.
    fn step(&mut self, db: &Db, trees: &[Tree], faulty: bool) -> Result<Outcome, Box<SimFailure>> {
        let no_sync = self.config.durability == Durability::NoSync;
        let roll = self.rng.below(100);
        let outcome = match roll {
            0..=39 => self.single_write(trees, faulty, true),
            40..=51 => self.single_write(trees, faulty, false),
            52..=63 => self.batch(db, trees, faulty),
            64..=67 => self.chunked(db, trees, faulty),
            68 => {
                let tree = self.rng.below(trees.len() as u64) as usize;
                self.note(format!("compact t{tree}"));
                let result = db.compact(&format!("t{tree}")).map(|_| ());
                self.finish(Vec::new(), true, true, result, faulty)
            }
            69..=70 => {
                self.note("checkpoint".into());
                let result = db.checkpoint();
                self.finish(Vec::new(), true, true, result, faulty)
            }
            71..=76 if no_sync => {
                self.note("sync".into());
                let result = db.sync();
                self.finish(Vec::new(), true, true, result, faulty)
            }
            77..=79 => {
                let tree = self.rng.below(trees.len() as u64) as usize;
                self.note(format!("scan t{tree}"));
                self.scan_check(&trees[tree], tree, faulty)
                    .map(|()| Outcome::Done { durable: false })
            }
            _ => {
                let tree = self.rng.below(trees.len() as u64) as usize;
                let key = self.key();
                self.note(format!("get t{tree} {}", show_key(&key)));
                self.get_check(&trees[tree], tree, &key, faulty)
                    .map(|()| Outcome::Done { durable: false })
            }
        };
        outcome.map_err(|message| self.failure(message))
    }

    fn key(&mut self) -> Vec<u8> {
        let i = self.rng.below(self.config.key_space);
        let pad = (i as usize * 7) % (self.config.key_pad_bytes + 1);
        let mut key = format!("k{i:05}").into_bytes();
        key.resize(key.len() + pad, b'p');
        key
    }

    fn value(&mut self, page_size_bytes: usize) -> (Vec<u8>, &'static str) {
        let len = match self.rng.below(100) {
            0..=4 => 0,
            5..=7 if self.config.large_values => {
                self.rng.range(page_size_bytes / 2, 3 * page_size_bytes)
            }
            _ => self.rng.range(0, self.config.value_bytes_max),
        };
        let mut value = vec![0; len];
        let kind = match self.rng.below(5) {
            0 => {
                self.rng.fill(&mut value);
                "random"
            }
            1 => {
                let half = len / 2;
                self.rng.fill(&mut value[..half]);
                value.copy_within(..half, half);
                "half random"
            }
            2 => "zeros",
            _ => {
                let mut pattern = vec![0; self.rng.range(1, 24)];
                self.rng.fill(&mut pattern);
                for (byte, p) in value.iter_mut().zip(pattern.iter().cycle()) {
                    *byte = *p;
                }
                "compressible"
            }
        };
        (value, kind)
    }

    fn page_size_bytes(&self, tree: usize) -> usize {
        self.config.trees[tree].page_size_bytes
    }

    /// A durability for one write: mostly the database's, sometimes the
    /// other one.
    fn durability(&mut self) -> Durability {
        if self.rng.chance(1, 8) {
            match self.config.durability {
                Durability::NoSync => Durability::Sync,
                _ => Durability::NoSync,
            }
        } else {
            self.config.durability
        }
    }

    /// Applies `change` (whose `old` is filled in here) to the model.
    fn apply(&mut self, tree: usize, key: Vec<u8>, new: Option<Vec<u8>>) -> Change {
        if self.trace {
            eprintln!(
                "    t{tree} {} <- {}",
                show_key(&key),
                show_value(new.as_deref())
            );
        }
        let map = &mut self.model[tree];
        let old = match &new {
            Some(value) => map.insert(key.clone(), value.clone()),
            None => map.remove(&key),
        };
        Change {
            tree,
            key,
            old,
            new,
        }
    }

    fn undo(&mut self, changes: &[Change]) {
        for change in changes.iter().rev() {
            let map = &mut self.model[change.tree];
            match &change.old {
                Some(value) => map.insert(change.key.clone(), value.clone()),
                None => map.remove(&change.key),
            };
        }
    }

    /// Ends a write: keeps, journals or undoes its changes by how it went.
    fn finish<T>(
        &mut self,
        changes: Vec<Change>,
        atomic: bool,
        durable: bool,
        result: crate::Result<T>,
        faulty: bool,
    ) -> Result<Outcome, String> {
        // A write that changes nothing (a delete of an absent key) logs
        // nothing, and its sync covers nothing before it either.
        let changed = changes.is_empty() || changes.iter().any(|c| c.old != c.new);
        let outcome = match result {
            Ok(_) => Outcome::Done {
                durable: durable && changed,
            },
            Err(
                Error::BatchTooLarge { .. }
                | Error::GroupTooLarge { .. }
                | Error::WriteTooLarge { .. },
            ) => Outcome::Refused,
            Err(_) if faulty => Outcome::Uncertain,
            Err(e) => return Err(format!("operation failed: {e}")),
        };
        match outcome {
            Outcome::Done { durable: true } => self.journal.clear(),
            Outcome::Done { durable: false } | Outcome::Uncertain => {
                if !changes.is_empty() {
                    self.journal.push(Step { changes, atomic });
                }
            }
            Outcome::Refused => {
                self.undo(&changes);
                self.stats.refused += 1;
                self.note("(refused: too large)".into());
            }
        }
        Ok(outcome)
    }

    fn single_write(&mut self, trees: &[Tree], faulty: bool, put: bool) -> Result<Outcome, String> {
        let tree = self.rng.below(trees.len() as u64) as usize;
        let key = self.key();
        let durability = self.durability();
        let durable = durability == Durability::Sync;
        if put {
            let (value, kind) = self.value(self.page_size_bytes(tree));
            self.note(format!(
                "put t{tree} {} {} bytes {kind} {durability:?}",
                show_key(&key),
                value.len()
            ));
            let result = trees[tree].put_with(&key, &value, durability);
            let change = self.apply(tree, key, Some(value));
            self.finish(vec![change], true, durable, result, faulty)
        } else {
            self.note(format!("delete t{tree} {} {durability:?}", show_key(&key)));
            let result = trees[tree].delete_with(&key, durability);
            let change = self.apply(tree, key, None);
            self.finish(vec![change], true, durable, result, faulty)
        }
    }

    fn batch(&mut self, db: &Db, trees: &[Tree], faulty: bool) -> Result<Outcome, String> {
        let count = self.rng.range(1, 12);
        let mut batch = WriteBatch::new();
        let mut changes = Vec::new();
        let mut bytes = 0;
        for _ in 0..count {
            let tree = self.rng.below(trees.len() as u64) as usize;
            let key = self.key();
            if self.rng.chance(1, 4) {
                batch.delete(&trees[tree], &key);
                changes.push(self.apply(tree, key, None));
            } else {
                let (value, _) = self.value(self.page_size_bytes(tree));
                bytes += value.len();
                batch.put(&trees[tree], &key, &value);
                changes.push(self.apply(tree, key, Some(value)));
            }
        }
        let durability = self.durability();
        self.note(format!(
            "batch of {count} ({bytes} value bytes) {durability:?}"
        ));
        let result = db.write_with(batch, durability);
        self.finish(
            changes,
            true,
            durability == Durability::Sync,
            result,
            faulty,
        )
    }

    fn chunked(&mut self, db: &Db, trees: &[Tree], faulty: bool) -> Result<Outcome, String> {
        let count = self.rng.range(1, 150);
        let durability = self.durability();
        let mut writer = db.chunked_writer_with(durability);
        let mut changes = Vec::new();
        let mut failed = None;
        for _ in 0..count {
            let tree = self.rng.below(trees.len() as u64) as usize;
            let key = self.key();
            let result = if self.rng.chance(1, 3) {
                let result = writer.delete(&trees[tree], &key);
                changes.push(self.apply(tree, key, None));
                result
            } else {
                let (value, _) = self.value(self.page_size_bytes(tree));
                let result = writer.put(&trees[tree], &key, &value);
                changes.push(self.apply(tree, key, Some(value)));
                result
            };
            match result {
                Ok(()) => {}
                // Refused alone; the writer stays usable. (A part the
                // writer cut itself refused as too large is a failure.)
                Err(e @ (Error::GroupTooLarge { .. } | Error::WriteTooLarge { .. })) => {
                    if self.trace {
                        eprintln!("    refused: {e}");
                    }
                    if let Some(change) = changes.pop() {
                        self.undo(&[change]);
                    }
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        self.note(format!(
            "chunked writer of {count} ({} kept) {durability:?}",
            changes.len()
        ));
        let result = match failed {
            Some(e @ Error::BatchTooLarge { .. }) => {
                return Err(format!("a chunked writer refused its own part: {e}"));
            }
            Some(e) => Err(e),
            None => writer.finish(),
        };
        self.finish(
            changes,
            false,
            durability == Durability::Sync,
            result,
            faulty,
        )
    }

    fn get_check(
        &mut self,
        tree: &Tree,
        index: usize,
        key: &[u8],
        faulty: bool,
    ) -> Result<(), String> {
        match tree.get(key) {
            Ok(found) => {
                let expected = self.model[index].get(key);
                if found.as_ref() != expected {
                    return Err(format!(
                        "get t{index} {}: found {}, the model has {}",
                        show_key(key),
                        show_value(found.as_deref()),
                        show_value(expected.map(Vec::as_slice))
                    ));
                }
                Ok(())
            }
            Err(_) if faulty => Ok(()),
            Err(e) => Err(format!("get t{index} {} failed: {e}", show_key(key))),
        }
    }

    fn scan_check(&mut self, tree: &Tree, index: usize, faulty: bool) -> Result<(), String> {
        match contents(tree, index) {
            Ok(found) => {
                if found != self.model[index] {
                    return Err(format!(
                        "a scan of t{index} differs from the model: {}",
                        differences(&self.model[index], &found)
                    ));
                }
                Ok(())
            }
            Err(_) if faulty => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Checks the recovered database against the model's history since the
    /// last durable point, and makes what it found the model.
    fn verify(&mut self, db: &Db) -> Result<(), Box<SimFailure>> {
        self.verify_inner(db)
            .map_err(|message| self.failure(message))
    }

    fn verify_inner(&mut self, db: &Db) -> Result<(), String> {
        db.check()
            .map_err(|e| format!("check after recovery failed: {e}"))?;
        let mut found: Model = Vec::new();
        for index in 0..self.config.trees.len() {
            let tree = match db.open_tree(&format!("t{index}")) {
                Ok(tree) => tree,
                // Not created yet when the crash came (an injected error).
                Err(Error::TreeNotFound { .. }) => {
                    found.push(BTreeMap::new());
                    continue;
                }
                Err(e) => return Err(format!("opening t{index} after recovery: {e}")),
            };
            let entries = contents(&tree, index)?;
            let len = tree
                .len()
                .map_err(|e| format!("len of t{index} after recovery: {e}"))?;
            if len != entries.len() as u64 {
                return Err(format!(
                    "t{index} counts {len} entries after recovery, its scan finds {}",
                    entries.len()
                ));
            }
            // Gets agree with the scan, for present and absent keys.
            let keys: Vec<&Vec<u8>> = entries.keys().chain(self.model[index].keys()).collect();
            for _ in 0..keys.len().min(24) {
                let key = keys[self.rng.below(keys.len() as u64) as usize];
                let got = tree
                    .get(key)
                    .map_err(|e| format!("get t{index} {} after recovery: {e}", show_key(key)))?;
                if got.as_ref() != entries.get(key) {
                    return Err(format!(
                        "after recovery, get t{index} {} finds {} where the scan finds {}",
                        show_key(key),
                        show_value(got.as_deref()),
                        show_value(entries.get(key).map(Vec::as_slice))
                    ));
                }
            }
            found.push(entries);
        }
        let mut state = self.model.clone();
        let mut mismatched: BTreeSet<(usize, Vec<u8>)> = BTreeSet::new();
        for (index, (expected, got)) in state.iter().zip(&found).enumerate() {
            for key in expected.keys().chain(got.keys()) {
                if expected.get(key) != got.get(key) {
                    mismatched.insert((index, key.clone()));
                }
            }
        }
        let mut position = self.journal.len();
        loop {
            if mismatched.is_empty() {
                break;
            }
            if position > 0 && !self.journal[position - 1].atomic {
                // A chunked writer cut between its parts: each key it
                // touched holds a value it had before or during it.
                let step = &self.journal[position - 1];
                let explained = mismatched.iter().all(|(index, key)| {
                    let got = found[*index].get(key);
                    let touched: Vec<&Change> = step
                        .changes
                        .iter()
                        .filter(|c| c.tree == *index && &c.key == key)
                        .collect();
                    !touched.is_empty()
                        && touched
                            .iter()
                            .any(|c| c.old.as_ref() == got || c.new.as_ref() == got)
                });
                if explained {
                    self.stats.partial_chunked += 1;
                    break;
                }
            }
            if position == 0 {
                let described: Vec<String> = mismatched
                    .iter()
                    .take(5)
                    .map(|(index, key)| {
                        format!(
                            "t{index} {}: found {}, durable model {}",
                            show_key(key),
                            show_value(found[*index].get(key).map(Vec::as_slice)),
                            show_value(state[*index].get(key).map(Vec::as_slice))
                        )
                    })
                    .collect();
                return Err(format!(
                    "after recovery the trees match no state between the last durable \
                     operation and the last attempted one ({} not durable); at the durable \
                     point {} keys differ: {described:?}",
                    self.journal.len(),
                    mismatched.len()
                ));
            }
            position -= 1;
            for change in self.journal[position].changes.iter().rev() {
                let map = &mut state[change.tree];
                match &change.old {
                    Some(value) => map.insert(change.key.clone(), value.clone()),
                    None => map.remove(&change.key),
                };
                let id = (change.tree, change.key.clone());
                if map.get(&change.key) == found[change.tree].get(&change.key) {
                    mismatched.remove(&id);
                } else {
                    mismatched.insert(id);
                }
            }
        }
        if self.trace {
            eprintln!(
                "seed {} epoch {}: recovered to {position} of {} steps past the durable point",
                self.seed,
                self.epoch,
                self.journal.len()
            );
        }
        if position > 0 {
            self.stats.recovered_past_durable += 1;
        }
        self.model = found;
        self.journal.clear();
        Ok(())
    }
}

/// A tree's entries by a full scan, which must be in strictly ascending
/// key order.
fn contents(tree: &Tree, index: usize) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, String> {
    let mut entries = BTreeMap::new();
    let mut last: Option<Vec<u8>> = None;
    for entry in tree.iter() {
        let (key, value) = entry.map_err(|e| format!("scan of t{index} failed: {e}"))?;
        if last.as_ref().is_some_and(|last| *last >= key) {
            return Err(format!(
                "a scan of t{index} returned {} after {}",
                show_key(&key),
                show_key(last.as_deref().unwrap_or_default())
            ));
        }
        last = Some(key.clone());
        entries.insert(key, value);
    }
    Ok(entries)
}

fn differences(
    expected: &BTreeMap<Vec<u8>, Vec<u8>>,
    found: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> String {
    let keys: BTreeSet<&Vec<u8>> = expected.keys().chain(found.keys()).collect();
    let diffs: Vec<String> = keys
        .into_iter()
        .filter(|key| expected.get(*key) != found.get(*key))
        .take(5)
        .map(|key| {
            format!(
                "{}: found {}, expected {}",
                show_key(key),
                show_value(found.get(key).map(Vec::as_slice)),
                show_value(expected.get(key).map(Vec::as_slice))
            )
        })
        .collect();
    diffs.join("; ")
}

fn show_key(key: &[u8]) -> String {
    String::from_utf8_lossy(&key[..key.len().min(12)]).into_owned()
}

/// A value by its length and a checksum, which tell versions apart.
fn show_value(value: Option<&[u8]>) -> String {
    match value {
        None => "nothing".into(),
        Some(value) => format!("{} bytes crc {:08x}", value.len(), crc32c::crc32c(value)),
    }
}
