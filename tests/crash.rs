//! Crash by SIGKILL: a child process (this test binary, re-executed) runs a
//! durable write workload and reports each acknowledged write on stdout; the
//! parent kills it at a random moment, reopens the directory and checks that
//! every acknowledged write is there, `check` is clean and `len` counts
//! exactly the entries found. The state carries
//! over from cycle to cycle, so later cycles crash recovered databases.
//! The child also compacts the tree every [`COMPACT_EVERY`] writes, so some
//! kills land inside a compaction: the reopened tree must still hold
//! exactly the acknowledged writes, in one tree file.
//!
//! A second child writes only `WriteBatch`es large enough to span two log
//! groups, with the log synced in the background every millisecond: each
//! batch must be found whole or not at all. (A kill keeps every write the
//! process made, synced or not, so it rarely separates a batch's groups;
//! `tests/power_loss.rs` drops a batch's last group deterministically.)
//!
//! A third child writes only `Db::chunked_writer`s of several parts: a kill
//! must keep every finished writer whole and a prefix of the one it cuts.
//!
//! Chance decides where most kills land. Every tenth cycle from the fourth
//! on, the child instead stops inside a compaction (in its progress
//! callback, after the first batch is copied) and says so, and the parent
//! kills it then; every tenth from the eighth on, it stops once a
//! checkpoint after its last write deleted log segments. So kills inside a
//! compaction and after segments were deleted happen on every run, however
//! slow the machine, and are asserted.
//!
//! 50 cycles by default (20 for the batches and for the chunked writes);
//! `BARRACUDA_CRASH_CYCLES=1000`
//! for the long run.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use barracuda::{Db, Durability, WriteBatch};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CHILD_DIR_VAR: &str = "BARRACUDA_CRASH_CHILD_DIR";
const CHILD_SEED_VAR: &str = "BARRACUDA_CRASH_CHILD_SEED";
/// Set for the batch child.
const CHILD_BATCHES_VAR: &str = "BARRACUDA_CRASH_CHILD_BATCHES";
/// Set for the chunked-writer child.
const CHILD_CHUNKS_VAR: &str = "BARRACUDA_CRASH_CHILD_CHUNKS";
/// Set for a child that stops at a moment for the kill: `compaction` or
/// `segments` (see [`Hold`]).
const CHILD_HOLD_VAR: &str = "BARRACUDA_CRASH_CHILD_HOLD";
const CYCLES_VAR: &str = "BARRACUDA_CRASH_CYCLES";
const CYCLES_DEFAULT: u64 = 50;
/// Distinct keys: small enough that updates and deletes hit existing keys.
const KEY_SPACE: u64 = 5000;
/// The child compacts its tree after this many writes.
const COMPACT_EVERY: u64 = 400;
/// The child pauses for [`IDLE_PAUSE`] after this many writes, long enough
/// for an idle checkpoint (`Options::idle_checkpoint`), which may give the
/// log ring back while the kill comes.
const IDLE_EVERY: u64 = 150;
const IDLE_PAUSE: Duration = Duration::from_millis(120);

fn options() -> barracuda::Options {
    Db::options()
        .buffer_pool_bytes(1 << 20)
        .log_bytes(4 << 20)
        .checkpoint_interval(Duration::from_millis(30))
        .idle_checkpoint(Some(Duration::from_millis(10)))
        .durability(Durability::Sync)
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(seed: u64, step: u64) -> Vec<u8> {
    let len = (seed * 31 + step * 17) % 700;
    format!("{seed}.{step}|")
        .bytes()
        .cycle()
        .take(len as usize)
        .collect()
}

/// Options of the batch child: a pool large enough for batches of
/// [`BATCH_PUTS`] (they stay pinned until logged), a log whose groups hold
/// fewer, and the log synced in the background every millisecond.
fn batch_options() -> barracuda::Options {
    options()
        .buffer_pool_bytes(16 << 20)
        .log_flush_interval(Duration::from_millis(1))
}

/// Puts per batch: more than one group of the 4 MiB log holds.
const BATCH_PUTS: std::ops::RangeInclusive<u64> = 45..=70;

/// Where a child of [`sigkill_loses_no_acknowledged_write`] stops for the
/// kill, instead of running until one comes at a random moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// Inside a compaction at the child's step `seed % 50`: its progress
    /// callback, after the first batch is copied, prints
    /// `compact progress N` and waits for the kill.
    Compaction,
    /// After the write of step `seed % 50`: waits until a checkpoint has
    /// deleted log segments, prints `segments removed` and waits for the
    /// kill.
    Segments,
}

impl Hold {
    fn name(self) -> &'static str {
        match self {
            Hold::Compaction => "compaction",
            Hold::Segments => "segments",
        }
    }

    /// The line the child prints when it holds.
    fn marker(self) -> &'static str {
        match self {
            Hold::Compaction => "compact progress",
            Hold::Segments => "segments removed",
        }
    }

    /// The hold, if any, of cycle `cycle`.
    fn of_cycle(cycle: u64) -> Option<Hold> {
        match cycle % 10 {
            3 => Some(Hold::Compaction),
            7 => Some(Hold::Segments),
            _ => None,
        }
    }

    /// The step of the child with `seed` at which it holds.
    fn step(seed: u64) -> u64 {
        seed % 50
    }
}

/// Waits for the parent's kill.
fn wait_for_the_kill() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The child: writes until killed. Before each write it prints `begin`,
/// after it returns (durable) `put I STEP` or `del I`.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_VAR) else {
        return; // Run as a normal test: nothing to do.
    };
    let seed: u64 = std::env::var(CHILD_SEED_VAR).unwrap().parse().unwrap();
    if std::env::var(CHILD_BATCHES_VAR).is_ok() {
        batch_child(Path::new(&dir), seed);
        return;
    }
    if std::env::var(CHILD_CHUNKS_VAR).is_ok() {
        chunk_child(Path::new(&dir), seed);
        return;
    }
    let hold = match std::env::var(CHILD_HOLD_VAR).as_deref() {
        Ok("compaction") => Some(Hold::Compaction),
        Ok("segments") => Some(Hold::Segments),
        _ => None,
    };
    let db = options().open(&dir).unwrap();
    let tree = db.tree("crash").unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // The test harness printed "test crash_child ... " without a newline.
    writeln!(out).unwrap();
    for step in 0.. {
        if hold == Some(Hold::Compaction) && step == Hold::step(seed) {
            writeln!(out, "compacting").unwrap();
            out.flush().unwrap();
            let _ = db.compact_with_progress("crash", |copied| {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{} {copied}", Hold::Compaction.marker()).unwrap();
                out.flush().unwrap();
                wait_for_the_kill()
            });
            unreachable!("the compaction waits for the kill");
        }
        let segments_before = db.log_stats().segments_removed;
        if step % IDLE_EVERY == IDLE_EVERY - 1 {
            let removed = db.log_stats().segments_removed;
            std::thread::sleep(IDLE_PAUSE);
            if db.log_stats().segments_removed > removed {
                writeln!(out, "segments removed").unwrap();
            }
        }
        if step % COMPACT_EVERY == COMPACT_EVERY - 1 {
            // Changes no entry: the model is unaffected, whenever the kill.
            writeln!(out, "compacting").unwrap();
            out.flush().unwrap();
            db.compact("crash").unwrap();
            writeln!(out, "compacted").unwrap();
        }
        let i = rng.random_range(0..KEY_SPACE);
        writeln!(out, "begin {i}").unwrap();
        out.flush().unwrap();
        if rng.random_range(0..4) == 0 {
            tree.delete(&key(i)).unwrap();
            writeln!(out, "del {i}").unwrap();
        } else {
            tree.put(&key(i), &value(seed, step)).unwrap();
            writeln!(out, "put {i} {step}").unwrap();
        }
        out.flush().unwrap();
        if hold == Some(Hold::Segments) && step == Hold::step(seed) {
            // The write went to a segment that the next checkpoint (every
            // 30 ms) passes and deletes. The bound only keeps a broken
            // checkpoint from hanging the test, which then fails.
            let deadline = Instant::now() + Duration::from_secs(120);
            while db.log_stats().segments_removed == segments_before && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if db.log_stats().segments_removed > segments_before {
                writeln!(out, "{}", Hold::Segments.marker()).unwrap();
                out.flush().unwrap();
                wait_for_the_kill();
            }
            writeln!(out, "segments kept").unwrap();
            out.flush().unwrap();
        }
    }
}

/// What the batch and chunked-writer children start with: the database
/// (with [`batch_options`]), its tree, the seeded generator, and stdout,
/// past the test harness's unfinished line.
fn batch_child_setup(
    dir: &Path,
    seed: u64,
) -> (Db, barracuda::Tree, SmallRng, std::io::StdoutLock<'static>) {
    let db = batch_options().open(dir).unwrap();
    let tree = db.tree("crash").unwrap();
    let mut out = std::io::stdout().lock();
    // The test harness printed "test crash_child ... " without a newline.
    writeln!(out).unwrap();
    (db, tree, SmallRng::seed_from_u64(seed), out)
}

/// The batch child: writes batches of distinct keys until killed. Before
/// each it prints `batch STEP GROUPS I...` (the groups its last batch took),
/// after it returns (durable) `done STEP`.
fn batch_child(dir: &Path, seed: u64) {
    let (db, tree, mut rng, mut out) = batch_child_setup(dir, seed);
    let mut groups = 0;
    for step in 0.. {
        let count = rng.random_range(BATCH_PUTS);
        let keys = distinct_keys(&mut rng, count);
        let listed: Vec<String> = keys.iter().map(u64::to_string).collect();
        writeln!(out, "batch {step} {groups} {}", listed.join(" ")).unwrap();
        out.flush().unwrap();
        let mut batch = WriteBatch::new();
        for &i in &keys {
            batch.put(&tree, &key(i), &value(seed, step));
        }
        let before = db.log_stats().groups_appended;
        db.write(batch).unwrap();
        groups = db.log_stats().groups_appended - before;
        writeln!(out, "done {step}").unwrap();
        out.flush().unwrap();
    }
}

/// Operations per chunked write: several parts each with the batch
/// child's options (27 operations per part, by the pool's bound).
const CHUNK_OPS: std::ops::RangeInclusive<u64> = 60..=250;

/// The value a chunked write of `step` puts: unique per seed and step.
fn chunk_value(seed: u64, step: u64) -> Vec<u8> {
    format!("chunk {seed}.{step}").into_bytes()
}

/// The chunked-writer child: writes `Db::chunked_writer`s of distinct
/// keys until killed, puts in two steps of three and deletes in the
/// third. Before each it prints `chunk STEP put|del I...`, after its
/// `finish` returns (durable) `done STEP`.
fn chunk_child(dir: &Path, seed: u64) {
    let (db, tree, mut rng, mut out) = batch_child_setup(dir, seed);
    for step in 0.. {
        let deletes = step % 3 == 2;
        let count = rng.random_range(CHUNK_OPS);
        let keys = distinct_keys(&mut rng, count);
        let kind = if deletes { "del" } else { "put" };
        let listed: Vec<String> = keys.iter().map(u64::to_string).collect();
        // One write of the whole line (under PIPE_BUF): a kill cannot cut
        // it, where `writeln!` may write its pieces separately.
        let line = format!("chunk {step} {kind} {}\n", listed.join(" "));
        out.write_all(line.as_bytes()).unwrap();
        out.flush().unwrap();
        let mut writer = db.chunked_writer();
        for &i in &keys {
            if deletes {
                writer.delete(&tree, &key(i)).unwrap();
            } else {
                writer
                    .put(&tree, &key(i), &chunk_value(seed, step))
                    .unwrap();
            }
        }
        writer.finish().unwrap();
        writeln!(out, "done {step}").unwrap();
        out.flush().unwrap();
    }
}

/// One cycle: run the child for a random time, kill it, return the
/// acknowledged operations applied to `model` and the key in flight.
/// What the kill cycles of [`sigkill_loses_no_acknowledged_write`] saw.
#[derive(Default)]
struct Counts {
    acknowledged: usize,
    /// Kills that came inside a compaction.
    killed_compacting: usize,
    /// Idle pauses of the child in which a checkpoint deleted log segments.
    segments_removed: usize,
}

fn run_child(
    dir: &Path,
    seed: u64,
    run: Duration,
    hold: Option<Hold>,
    model: &mut BTreeMap<u64, Vec<u8>>,
    output: &mut Vec<String>,
    counts: &mut Counts,
) -> Option<u64> {
    *output = match hold {
        Some(hold) => kill_child_held(dir, seed, hold),
        None => kill_child(dir, seed, run, None),
    };
    let mut in_flight = None;
    let last_compaction = output.iter().rev().find(|line| line.starts_with("compact"));
    if last_compaction.is_some_and(|line| line != "compacted") {
        counts.killed_compacting += 1;
    }
    counts.segments_removed += output.iter().filter(|l| *l == "segments removed").count();
    for line in output.iter() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["begin", i] => in_flight = Some(i.parse().unwrap()),
            ["put", i, step] => {
                model.insert(i.parse().unwrap(), value(seed, step.parse().unwrap()));
                in_flight = None;
                counts.acknowledged += 1;
            }
            ["del", i] => {
                model.remove(&i.parse::<u64>().unwrap());
                in_flight = None;
                counts.acknowledged += 1;
            }
            _ => {} // The test harness's own output, or a line cut by the kill.
        }
    }
    in_flight
}

/// Runs the child (the one `mode`, an environment variable, selects) for
/// `run`, kills it, and returns what it printed.
fn kill_child(dir: &Path, seed: u64, run: Duration, mode: Option<&str>) -> Vec<String> {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_VAR, dir)
        .env(CHILD_SEED_VAR, seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(mode) = mode {
        command.env(mode, "1");
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    std::thread::sleep(run);
    // SIGKILL: no destructor, no final checkpoint.
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap()
}

/// Runs the child with `hold`, kills it once it says it holds, and returns
/// what it printed.
fn kill_child_held(dir: &Path, seed: u64, hold: Hold) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_VAR, dir)
        .env(CHILD_SEED_VAR, seed.to_string())
        .env(CHILD_HOLD_VAR, hold.name())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (sender, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut output = Vec::new();
    // A bound against a child that never gets there (a failure, below),
    // not a timing assumption: the holds come within a second unloaded.
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut held = false;
    while !held {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                held = line.starts_with(hold.marker());
                output.push(line);
            }
            // The child exited, or the time is up: fail below.
            Err(_) => break,
        }
    }
    // SIGKILL: no destructor, no final checkpoint.
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    output.extend(lines.try_iter());
    assert!(
        held,
        "the child (seed {seed}) never held for {hold:?}; its last lines: {:?}",
        &output[output.len().saturating_sub(5)..]
    );
    output
}

/// Every entry of the tree, by key number.
fn entries(tree: &barracuda::Tree) -> BTreeMap<u64, Vec<u8>> {
    tree.iter()
        .map(|entry| {
            let (k, v) = entry.unwrap();
            (std::str::from_utf8(&k[3..]).unwrap().parse().unwrap(), v)
        })
        .collect()
}

/// Cycles of the batch and chunked-writer tests: two fifths of the
/// others'.
fn batch_cycles() -> u64 {
    std::env::var(CYCLES_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CYCLES_DEFAULT)
        .min(1000)
        / 5
        * 2
}

/// `count` distinct key numbers.
fn distinct_keys(rng: &mut SmallRng, count: u64) -> Vec<u64> {
    let mut keys: Vec<u64> = Vec::new();
    while (keys.len() as u64) < count {
        let i = rng.random_range(0..KEY_SPACE);
        if !keys.contains(&i) {
            keys.push(i);
        }
    }
    keys
}

/// Reopens the batch or chunked-writer child's database after a kill,
/// checks it, and returns it with its entries, whose count `len` must
/// agree with.
fn reopen_checked(dir: &Path, cycle: u64) -> (Db, BTreeMap<u64, Vec<u8>>) {
    let db = batch_options().open(dir).unwrap();
    db.check()
        .unwrap_or_else(|e| panic!("cycle {cycle}: check failed: {e}"));
    let tree = db.tree("crash").unwrap();
    let found = entries(&tree);
    assert_eq!(tree.len().unwrap(), found.len() as u64, "cycle {cycle}");
    (db, found)
}

/// Runs the batch or chunked-writer tests' kill cycles of the child
/// `mode` in one directory, each for a random time drawn from `rng_seed`,
/// and hands `check` the directory, the cycle, the child's seed and what
/// it printed. Returns the number of cycles.
fn kill_cycles(
    mode: &str,
    rng_seed: u64,
    mut check: impl FnMut(&Path, u64, u64, &[String]),
) -> u64 {
    let cycles = batch_cycles();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut rng = SmallRng::seed_from_u64(rng_seed);
    for cycle in 0..cycles {
        let seed = cycle + 1;
        let run = Duration::from_millis(rng.random_range(50..400));
        let output = kill_child(dir.path(), seed, run, Some(mode));
        check(dir.path(), cycle, seed, &output);
    }
    cycles
}

#[test]
fn sigkill_keeps_batches_whole() {
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let (mut batches_done, mut spanning, mut cut_found_whole, mut cut_found_none) = (0, 0, 0, 0);
    let cycles = kill_cycles(CHILD_BATCHES_VAR, 0xBA7C, |dir, cycle, seed, output| {
        let mut in_flight: Option<(u64, Vec<u64>)> = None;
        for line in output {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["batch", step, groups, keys @ ..] => {
                    spanning += usize::from(groups.parse::<u64>().unwrap() > 1);
                    let keys = keys.iter().map(|k| k.parse().unwrap()).collect();
                    in_flight = Some((step.parse().unwrap(), keys));
                }
                ["done", step] => {
                    let (batch_step, keys) = in_flight.take().unwrap();
                    assert_eq!(batch_step, step.parse::<u64>().unwrap());
                    for i in keys {
                        model.insert(i, value(seed, batch_step));
                    }
                    batches_done += 1;
                }
                _ => {}
            }
        }
        let (db, found) = reopen_checked(dir, cycle);
        // The batch in flight is there whole or not at all.
        if let Some((step, keys)) = in_flight {
            let new = value(seed, step);
            let applied = keys.iter().filter(|i| found.get(i) == Some(&new)).count();
            assert!(
                applied == 0 || applied == keys.len(),
                "cycle {cycle}: {applied} of the {} puts of batch {step} survived",
                keys.len()
            );
            if applied == keys.len() {
                cut_found_whole += 1;
                for i in keys {
                    model.insert(i, new.clone());
                }
            } else {
                cut_found_none += 1;
            }
        }
        assert!(
            found == model,
            "cycle {cycle}: the tree differs from the acknowledged batches"
        );
        db.close().unwrap();
    });
    assert!(
        spanning > batches_done / 2,
        "{spanning} of {batches_done} batches spanned several log groups"
    );
    eprintln!(
        "{cycles} SIGKILL cycles over batches: {batches_done} acknowledged ({spanning} over several log groups), all present; the batch cut by the kill found whole {cut_found_whole} times, absent {cut_found_none} times"
    );
}

/// Whether a chunked writer applies these puts in key order: when fewer
/// than three in four come after their predecessor (`ChunkedWriter`'s
/// rule; the keys here are ordered as their numbers).
fn sorted_by_the_writer(keys: &[u64]) -> bool {
    let in_order = keys.windows(2).filter(|w| w[0] <= w[1]).count();
    4 * in_order < 3 * keys.len().saturating_sub(1)
}

/// Whether `applied` is true up to some point and false after it.
fn is_prefix(applied: &[bool]) -> bool {
    applied.windows(2).all(|pair| pair[0] || !pair[1])
}

/// A chunked write is applied as consecutive atomic parts: a kill keeps
/// every finished writer whole, and of the writer it cuts, a prefix of its
/// parts. A run of deletes goes in key order, and so do puts mostly out of
/// key order (these random ones: see [`sorted_by_the_writer`]), so the
/// operations that survive are those of the smallest keys; puts mostly in
/// order go as written, and the first ones written survive.
#[test]
fn sigkill_keeps_a_prefix_of_a_chunked_write() {
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let (mut writers_done, mut cut_whole, mut cut_none, mut cut_part) = (0, 0, 0, 0);
    let cycles = kill_cycles(CHILD_CHUNKS_VAR, 0xC4C4, |dir, cycle, seed, output| {
        let mut in_flight: Option<(u64, bool, Vec<u64>)> = None;
        for line in output {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["chunk", step, kind, keys @ ..] => {
                    let keys = keys.iter().map(|k| k.parse().unwrap()).collect();
                    in_flight = Some((step.parse().unwrap(), *kind == "del", keys));
                }
                ["done", step] => {
                    let (chunk_step, deletes, keys) = in_flight.take().unwrap();
                    assert_eq!(chunk_step, step.parse::<u64>().unwrap());
                    for i in keys {
                        if deletes {
                            model.remove(&i);
                        } else {
                            model.insert(i, chunk_value(seed, chunk_step));
                        }
                    }
                    writers_done += 1;
                }
                _ => {}
            }
        }
        let (db, found) = reopen_checked(dir, cycle);
        if let Some((step, deletes, mut keys)) = in_flight {
            let applied: Vec<bool> = if deletes {
                // Keys absent before say nothing; the rest in key order.
                keys.retain(|i| model.contains_key(i));
                keys.sort_unstable();
                keys.iter().map(|i| !found.contains_key(i)).collect()
            } else {
                if sorted_by_the_writer(&keys) {
                    keys.sort_unstable();
                }
                let new = chunk_value(seed, step);
                keys.iter().map(|i| found.get(i) == Some(&new)).collect()
            };
            assert!(
                is_prefix(&applied),
                "cycle {cycle}: the surviving operations of chunked write {step} are not a prefix: {applied:?}"
            );
            let survived = applied.iter().filter(|&&a| a).count();
            match survived {
                0 => cut_none += 1,
                n if n == applied.len() => cut_whole += 1,
                _ => cut_part += 1,
            }
            for (&i, &applied) in keys.iter().zip(&applied) {
                if applied {
                    if deletes {
                        model.remove(&i);
                    } else {
                        model.insert(i, chunk_value(seed, step));
                    }
                }
            }
        }
        assert!(
            found == model,
            "cycle {cycle}: the tree differs from the acknowledged chunked writes"
        );
        db.close().unwrap();
    });
    assert!(writers_done > 0, "no chunked write finished");
    eprintln!(
        "{cycles} SIGKILL cycles over chunked writes: {writers_done} finished, all present; the writer cut by the kill found whole {cut_whole} times, in part {cut_part} times, absent {cut_none} times"
    );
}

#[test]
fn sigkill_loses_no_acknowledged_write() {
    let cycles = std::env::var(CYCLES_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CYCLES_DEFAULT);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut rng = SmallRng::seed_from_u64(0xC4A5);
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let started = Instant::now();
    let mut counts = Counts::default();
    let (mut held_compaction, mut held_segments) = (0, 0);
    for cycle in 0..cycles {
        let run = Duration::from_millis(rng.random_range(30..400));
        let previous = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        if std::env::var("BARRACUDA_CRASH_KEEP").is_ok() {
            for entry in std::fs::read_dir(dir.path()).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), previous.path().join(entry.file_name())).unwrap();
            }
        }
        let mut last_output = Vec::new();
        let hold = Hold::of_cycle(cycle);
        held_compaction += u64::from(hold == Some(Hold::Compaction));
        held_segments += u64::from(hold == Some(Hold::Segments));
        let in_flight = run_child(
            dir.path(),
            cycle + 1,
            run,
            hold,
            &mut model,
            &mut last_output,
            &mut counts,
        );
        let db = options().open(dir.path()).unwrap();
        db.check()
            .unwrap_or_else(|e| panic!("cycle {cycle}: check failed: {e}"));
        // A compaction the kill interrupted left no second tree file (a
        // data file and its doublewrite file).
        let tree_files = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with("tree-")
            })
            .count();
        assert_eq!(tree_files, 2, "cycle {cycle}: tree files after recovery");
        let tree = db.tree("crash").unwrap();
        let mut found = BTreeMap::new();
        for entry in tree.iter() {
            let (k, v) = entry.unwrap();
            let i: u64 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
            found.insert(i, v);
        }
        // The stored count was recovered with the entries it counts.
        assert_eq!(
            tree.len().unwrap(),
            found.len() as u64,
            "cycle {cycle}: entry count after recovery"
        );
        // The write in flight may or may not have happened: adopt what the
        // database says for that one key.
        if let Some(i) = in_flight {
            match found.get(&i) {
                Some(v) => model.insert(i, v.clone()),
                None => model.remove(&i),
            };
        }
        if found != model {
            let keys: std::collections::BTreeSet<u64> =
                found.keys().chain(model.keys()).copied().collect();
            let diffs: Vec<String> = keys
                .into_iter()
                .filter(|k| found.get(k) != model.get(k))
                .take(5)
                .map(|k| {
                    let show = |v: Option<&Vec<u8>>| {
                        v.map(|v| String::from_utf8_lossy(&v[..v.len().min(20)]).into_owned())
                    };
                    let got = tree.get(&key(k)).unwrap();
                    format!(
                        "key {k}: found {:?}, expected {:?}, get {:?}",
                        show(found.get(&k)),
                        show(model.get(&k)),
                        show(got.as_ref())
                    )
                })
                .collect();
            drop(tree);
            db.halt();
            if let Ok(keep) = std::env::var("BARRACUDA_CRASH_KEEP") {
                let copy = |from: &Path, to: &str| {
                    let to = Path::new(&keep).join(to);
                    std::fs::create_dir_all(&to).unwrap();
                    for entry in std::fs::read_dir(from).unwrap() {
                        let entry = entry.unwrap();
                        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
                    }
                };
                copy(dir.path(), "after");
                copy(previous.path(), "before");
                std::fs::write(Path::new(&keep).join("child.log"), last_output.join("\n")).unwrap();
            }
            panic!(
                "cycle {cycle} (in flight {in_flight:?}): {} keys found, {} expected: {diffs:#?}",
                found.len(),
                model.len()
            );
        }
        db.close().unwrap();
    }
    // The held cycles landed where they held; the others may add to both
    // counts by chance, on a fast machine.
    assert!(
        counts.killed_compacting as u64 >= held_compaction,
        "{} kills inside a compaction, {held_compaction} cycles held there",
        counts.killed_compacting
    );
    assert!(
        counts.segments_removed as u64 >= held_segments,
        "{} pauses deleted log segments, {held_segments} cycles held for it",
        counts.segments_removed
    );
    eprintln!(
        "{cycles} SIGKILL cycles ({} inside a compaction, {} pauses that deleted log segments; {held_compaction} and {held_segments} of them held for it), {} acknowledged writes, all present; {} keys at the end, {:.1} s",
        counts.killed_compacting,
        counts.segments_removed,
        counts.acknowledged,
        model.len(),
        started.elapsed().as_secs_f64()
    );
}
