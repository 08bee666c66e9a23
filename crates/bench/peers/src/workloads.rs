//! The two workloads: redb's benchmark (workload 1) and larger-than-memory
//! reads of compressible values (workload 2).

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::engines::{self, Engine, Op, Setup};

/// redb's harness: 24-byte keys, 150-byte values, seed 3.
pub const KEY_BYTES: usize = 24;
/// Value size of workload 1.
pub const VALUE_BYTES: usize = 150;
/// Seed of every generator (redb's `RNG_SEED`).
pub const SEED: u64 = 3;
/// Individual durable writes of workload 1.
pub const INDIVIDUAL_WRITES: usize = 1_000;
/// Transactions of workload 1's batch row, and writes in each.
pub const BATCH_TRANSACTIONS: usize = 100;
/// Writes per transaction in workload 1's batch row.
pub const BATCH_WRITES: usize = 1_000;
/// Entries per range in the range-read row.
pub const RANGE_ENTRIES: usize = 10;
/// Thread counts of the concurrent-read rows.
pub const READ_THREADS: &[usize] = &[4, 8, 16];
/// Value size of workload 2 (db_bench's default).
pub const LARGE_VALUE_BYTES: usize = 1_000;
/// Reader threads of workload 2.
pub const W2_THREADS: usize = 16;
/// Zipf exponent of workload 2's skewed pass.
pub const ZIPF_EXPONENT: f64 = 0.9;
/// Pairs per durable commit while loading workload 2.
pub const W2_LOAD_COMMIT_PAIRS: usize = 10_000;

/// One measured row.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurement {
    /// Row name (same in every engine's column).
    pub row: String,
    /// The number, in `unit`.
    pub value: Option<f64>,
    /// "ms" (lower is better), "bytes" (lower is better) or "ops/s" (higher).
    pub unit: String,
    /// Lowest and highest value of the runs, when `value` is their median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<[f64; 2]>,
}

impl Measurement {
    fn millis(row: &str, duration: Duration) -> Self {
        Self {
            row: row.to_string(),
            value: Some(duration.as_secs_f64() * 1e3),
            unit: "ms".to_string(),
            range: None,
        }
    }

    /// N/A (the engine could not run the row).
    pub fn missing(row: &str, unit: &str) -> Self {
        Self {
            row: row.to_string(),
            value: None,
            unit: unit.to_string(),
            range: None,
        }
    }

    /// A size (or N/A).
    pub fn bytes(row: &str, bytes: Option<u64>) -> Self {
        Self {
            row: row.to_string(),
            value: bytes.map(|b| b as f64),
            unit: "bytes".to_string(),
            range: None,
        }
    }

    fn rate(row: &str, ops: usize, duration: Duration) -> Self {
        Self {
            row: row.to_string(),
            value: Some(ops as f64 / duration.as_secs_f64()),
            unit: "ops/s".to_string(),
            range: None,
        }
    }
}

/// A key and value from the seeded generator, as redb's `gen_pair`.
pub fn gen_pair(rng: &mut SmallRng) -> (Vec<u8>, Vec<u8>) {
    let mut key = vec![0; KEY_BYTES];
    rng.fill_bytes(&mut key);
    let mut value = vec![0; VALUE_BYTES];
    rng.fill_bytes(&mut value);
    (key, value)
}

fn make_rng() -> SmallRng {
    SmallRng::seed_from_u64(SEED)
}

fn puts(rng: &mut SmallRng, count: usize) -> impl Iterator<Item = Op> + '_ {
    (0..count).map(move |_| {
        let (key, value) = gen_pair(rng);
        Op::Put(key, value)
    })
}

/// Runs workload 1 with `pairs` initial pairs; `log` gets progress lines.
pub fn workload1(
    name: &str,
    setup: &Setup,
    pairs: usize,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<Measurement>> {
    let mut engine = engines::open(name, setup)?;
    let mut rows = Vec::new();
    let mut rng = make_rng();

    let start = Instant::now();
    engine.commit(&mut puts(&mut rng, pairs), true)?;
    rows.push(Measurement::millis("bulk load", start.elapsed()));
    log(&format!(
        "{name}: bulk load {pairs} in {:?}",
        start.elapsed()
    ));

    let start = Instant::now();
    for _ in 0..INDIVIDUAL_WRITES {
        engine.commit(&mut puts(&mut rng, 1), true)?;
    }
    rows.push(Measurement::millis("individual writes", start.elapsed()));

    let start = Instant::now();
    for _ in 0..BATCH_TRANSACTIONS {
        engine.commit(&mut puts(&mut rng, BATCH_WRITES), true)?;
    }
    rows.push(Measurement::millis("batch writes", start.elapsed()));
    log(&format!("{name}: writes done"));

    let expected_len = (pairs + INDIVIDUAL_WRITES + BATCH_TRANSACTIONS * BATCH_WRITES) as u64;
    {
        let reader = engine.reader()?;
        let start = Instant::now();
        let len = reader.len()?;
        rows.push(Measurement::millis("len()", start.elapsed()));
        ensure!(
            len == expected_len,
            "{name}: len {len}, expected {expected_len}"
        );

        let gets = pairs / 5;
        for pass in ["random reads", "random reads (2nd pass)"] {
            let mut rng = make_rng();
            let start = Instant::now();
            let (mut checksum, mut expected) = (0u64, 0u64);
            for _ in 0..gets {
                let (key, value) = gen_pair(&mut rng);
                let found = reader.get(&key, &mut |v| checksum += u64::from(v[0]))?;
                ensure!(found, "{name}: key missing");
                expected += u64::from(value[0]);
            }
            ensure!(checksum == expected, "{name}: checksum");
            rows.push(Measurement::millis(pass, start.elapsed()));
        }

        let ranges = pairs / 10;
        for pass in ["random range reads", "random range reads (2nd pass)"] {
            let mut rng = make_rng();
            let start = Instant::now();
            let mut sum = 0u64;
            for _ in 0..ranges {
                let (key, _value) = gen_pair(&mut rng);
                reader.scan(&key, RANGE_ENTRIES, &mut |v| sum += u64::from(v[0]))?;
            }
            ensure!(sum > 0, "{name}: ranges read nothing");
            rows.push(Measurement::millis(pass, start.elapsed()));
        }
    }
    log(&format!("{name}: single-thread reads done"));

    for &threads in READ_THREADS {
        let duration = concurrent_reads(engine.as_ref(), pairs, threads)?;
        rows.push(Measurement::millis(
            &format!("random reads ({threads} threads)"),
            duration,
        ));
    }

    if let Some(counters) = engine.counters() {
        log(&format!("{name} counters before removals: {counters}"));
    }
    let start = Instant::now();
    let mut rng = make_rng();
    let mut deletes = (0..pairs / 2).map(|_| Op::Delete(gen_pair(&mut rng).0));
    engine.commit(&mut deletes, true)?;
    rows.push(Measurement::millis("removals", start.elapsed()));
    log(&format!("{name}: removals in {:?}", start.elapsed()));

    if let Some(counters) = engine.counters() {
        log(&format!("{name} counters: {counters}"));
    }
    let size = engines::directory_bytes(&setup.dir);
    log(&format!("{name} files: {}", file_sizes(&setup.dir)));
    rows.push(Measurement::bytes("uncompacted size", Some(size)));
    // Not a row of redb's: the same files once the engine has closed (a
    // final checkpoint or flush, logs given back), as workload 2 measures
    // its sizes. The engine opens again for the compaction.
    engine.close()?;
    let closed = engines::directory_bytes(&setup.dir);
    log(&format!("{name} files closed: {}", file_sizes(&setup.dir)));
    rows.push(Measurement::bytes("uncompacted size, closed", Some(closed)));
    engine = engines::open(name, setup)?;
    let compacted = if engine.compact()? {
        engine.commit(&mut puts(&mut rng, 1), true)?;
        Some(engines::directory_bytes(&setup.dir))
    } else {
        None
    };
    rows.push(Measurement::bytes("compacted size", compacted));
    engine.close()?;
    Ok(rows)
}

/// `pairs` gets of the loaded keys shared over `threads` threads, each
/// from its own shard of the generator's sequence, as redb's harness.
fn concurrent_reads(engine: &dyn Engine, pairs: usize, threads: usize) -> Result<Duration> {
    let per_thread = pairs / threads;
    let mut rngs: Vec<SmallRng> = (0..threads)
        .map(|i| {
            let mut rng = make_rng();
            for _ in 0..i * per_thread {
                gen_pair(&mut rng);
            }
            rng
        })
        .collect();
    let start = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let handles: Vec<_> = rngs
            .drain(..)
            .map(|mut rng| {
                scope.spawn(move || -> Result<()> {
                    let reader = engine.reader()?;
                    let (mut checksum, mut expected) = (0u64, 0u64);
                    for _ in 0..per_thread {
                        let (key, value) = gen_pair(&mut rng);
                        let found = reader.get(&key, &mut |v| checksum += u64::from(v[0]))?;
                        ensure!(found, "key missing");
                        expected += u64::from(value[0]);
                    }
                    ensure!(checksum == expected, "checksum");
                    Ok(())
                })
            })
            .collect();
        for handle in handles {
            handle.join().expect("reader thread panicked")?;
        }
        Ok(())
    })?;
    Ok(start.elapsed())
}

/// A 1,000-byte value that compresses to about half, as db_bench's
/// `CompressibleString`: 500 random bytes written twice.
fn compressible_value(rng: &mut SmallRng) -> Vec<u8> {
    let mut value = vec![0; LARGE_VALUE_BYTES];
    let half = LARGE_VALUE_BYTES / 2;
    rng.fill_bytes(&mut value[..half]);
    value.copy_within(..half, half);
    value
}

/// Zipf ranks over `n` items by inverse CDF.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, exponent: f64) -> Self {
        let mut total = 0.0;
        let cumulative = (1..=n)
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(exponent);
                total
            })
            .collect();
        Self { cumulative }
    }

    fn sample(&self, rng: &mut SmallRng) -> usize {
        let total = *self.cumulative.last().expect("n > 0");
        let target = rng.random::<f64>() * total;
        self.cumulative
            .partition_point(|&c| c < target)
            .min(self.cumulative.len() - 1)
    }
}

/// Spreads Zipf ranks over the key space: hot keys are not neighbours.
fn scatter(rank: usize, n: usize) -> usize {
    const MULTIPLIER: u128 = 0x9E37_79B9_7F4A_7C15;
    ((rank as u128 * MULTIPLIER) % n as u128) as usize
}

/// Workload 2's keys: `pairs` from the seeded generator, in one flat array
/// (6 MiB at 262,144 keys, not a `Vec` per key: the harness's own memory
/// counts against every engine's limit).
fn w2_keys(pairs: usize) -> Vec<[u8; KEY_BYTES]> {
    let mut rng = make_rng();
    (0..pairs)
        .map(|_| {
            let mut key = [0; KEY_BYTES];
            rng.fill_bytes(&mut key);
            key
        })
        .collect()
}

/// Workload 2's load: `pairs` compressible pairs in durable commits of
/// [`W2_LOAD_COMMIT_PAIRS`], and the engine is closed; with `compact` it is
/// reopened for its compaction where it has one and closed again. Rows:
/// load time, size on disk after the load (closed), and with `compact` the
/// compaction's time and the size after it (N/A for engines without one).
pub fn workload2_load(
    name: &str,
    setup: &Setup,
    (pairs, compact): (usize, bool),
    log: &mut dyn FnMut(&str),
) -> Result<Vec<Measurement>> {
    let keys = w2_keys(pairs);
    let engine = engines::open(name, setup)?;
    let start = Instant::now();
    let mut values = make_rng();
    for chunk in keys.chunks(W2_LOAD_COMMIT_PAIRS) {
        let mut ops = chunk
            .iter()
            .map(|key| Op::Put(key.to_vec(), compressible_value(&mut values)));
        engine.commit(&mut ops, true)?;
    }
    let mut rows = vec![Measurement::millis("load", start.elapsed())];
    if let Some(counters) = engine.counters() {
        log(&format!("{name} counters after load: {counters}"));
    }
    engine.close()?;
    log(&format!(
        "{name}: loaded {pairs} in {:.1} s",
        rows[0].value.unwrap_or(0.0) / 1e3
    ));
    // Measured after close in both modes (a close may flush or truncate).
    rows.push(Measurement::bytes(
        "size on disk",
        Some(engines::directory_bytes(&setup.dir)),
    ));
    if compact {
        log(&format!(
            "{name} files after the load: {}",
            file_sizes(&setup.dir)
        ));
        let mut engine = engines::open(name, setup)?;
        let start = Instant::now();
        let compacted = engine.compact()?;
        let took = start.elapsed();
        engine.close()?;
        if compacted {
            log(&format!("{name}: compacted in {took:?}"));
            rows.push(Measurement::millis("compaction", took));
            rows.push(Measurement::bytes(
                "size after compaction",
                Some(engines::directory_bytes(&setup.dir)),
            ));
        } else {
            rows.push(Measurement::missing("compaction", "ms"));
            rows.push(Measurement::bytes("size after compaction", None));
        }
    }
    log(&format!("{name} files: {}", file_sizes(&setup.dir)));
    Ok(rows)
}

/// Workload 2's reads, on the data [`workload2_load`] left (cold: the
/// caller dropped its page cache): `reads` gets from [`W2_THREADS`]
/// threads, uniform and Zipf. Rows: the two rates, the peak RSS.
pub fn workload2_reads(
    name: &str,
    setup: &Setup,
    (pairs, reads): (usize, usize),
    log: &mut dyn FnMut(&str),
) -> Result<Vec<Measurement>> {
    let keys = w2_keys(pairs);
    let mut rows = Vec::new();
    let engine = engines::open(name, setup)?;
    let zipf = Zipf::new(pairs, ZIPF_EXPONENT);
    let cpu_before = cpu_time();
    let disk_before = disk_read_bytes();
    for (row, skewed) in [
        ("uniform reads (16 threads)", false),
        ("Zipf 0.9 reads (16 threads)", true),
    ] {
        let duration = w2_reads(engine.as_ref(), &keys, reads, skewed.then_some(&zipf))?;
        rows.push(Measurement::rate(row, reads, duration));
        log(&format!("{name}: {row} {duration:?}"));
        if let Some(counters) = engine.counters() {
            log(&format!("{name} counters: {counters}"));
        }
    }
    rows.push(Measurement::millis(
        "CPU time of the reads (user+sys)",
        cpu_time().saturating_sub(cpu_before),
    ));
    let disk_bytes = disk_read_bytes()
        .zip(disk_before)
        .map(|(after, before)| after.saturating_sub(before));
    rows.push(Measurement::bytes(
        "read from the disk by the reads",
        disk_bytes,
    ));
    engine.close()?;
    rows.push(Measurement::bytes("peak RSS (reads)", peak_rss_bytes()));
    Ok(rows)
}

fn w2_reads(
    engine: &dyn Engine,
    keys: &[[u8; KEY_BYTES]],
    reads: usize,
    zipf: Option<&Zipf>,
) -> Result<Duration> {
    let per_thread = reads / W2_THREADS;
    let start = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let handles: Vec<_> = (0..W2_THREADS)
            .map(|thread| {
                scope.spawn(move || -> Result<()> {
                    let mut rng = SmallRng::seed_from_u64(SEED + 1 + thread as u64);
                    let reader = engine.reader()?;
                    for _ in 0..per_thread {
                        let index = match zipf {
                            Some(zipf) => scatter(zipf.sample(&mut rng), keys.len()),
                            None => rng.random_range(0..keys.len()),
                        };
                        let mut length = 0;
                        let found = reader.get(&keys[index], &mut |v| length = v.len())?;
                        ensure!(found && length == LARGE_VALUE_BYTES, "value missing");
                    }
                    Ok(())
                })
            })
            .collect();
        for handle in handles {
            handle.join().expect("reader thread panicked")?;
        }
        Ok(())
    })?;
    Ok(start.elapsed())
}

/// Bytes this process has had read from storage (`read_bytes` of
/// /proc/self/io: O_DIRECT reads, page-cache misses and map faults alike).
fn disk_read_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let line = io.lines().find(|line| line.starts_with("read_bytes:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// User + system CPU time of the whole process so far (all threads).
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid out-pointer for one `rusage`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return Duration::ZERO;
    }
    // SAFETY: getrusage filled it (rc == 0); zeroed is valid anyway.
    let usage = unsafe { usage.assume_init() };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// The process's peak resident set (VmHWM), in bytes.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// "name=bytes" of every file directly in `dir`, for the log.
fn file_sizes(dir: &std::path::Path) -> String {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return String::new();
    };
    let mut sizes: Vec<String> = entries
        .flatten()
        .map(|entry| {
            let bytes = engines::directory_bytes(&entry.path());
            format!("{}={bytes}", entry.file_name().to_string_lossy())
        })
        .collect();
    sizes.sort();
    sizes.join(" ")
}
