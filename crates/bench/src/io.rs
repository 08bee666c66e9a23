//! `barracuda-bench io`: random O_DIRECT reads and writes on a preallocated
//! file through the file layer, optionally interleaved with fio on the same
//! file, reported as a table (IOPS, MB/s, p50/p99 latency) and JSON.
//!
//! What the knobs mean (each row is one configuration):
//! - `--path threads` (default): every request goes through the I/O threads
//!   (the read-ahead / flush path). `--threads T` is `read_io_threads` (or
//!   `write_io_threads` for writes) and `--depth D` is each thread's ring
//!   queue depth; one submitter keeps T x D requests outstanding, so each
//!   thread has D in flight. With T = 1 this is fio's single job at
//!   `--iodepth D`. With D = 1 each thread serves one request at a time, like
//!   InnoDB's simulated AIO threads, so raising T raises IOPS as in the
//!   reference experiment on read I/O threads.
//! - `--path direct`: `--depth D` caller threads each issue one synchronous
//!   `read_at` at a time on their own ring (InnoDB's ordinary page reads);
//!   D requests outstanding in total. `--threads` is ignored for reads.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use barracuda_io::{
    AlignedBuf, Backend, BlockFile, CompletionQueue, FlushMethod, IoOp, IoOptions, IoRequest,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Preallocation writes the file in pieces of this size.
const FILL_CHUNK_BYTES: usize = 1 << 20;

/// Options of `barracuda-bench io`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The data file (created and filled if shorter than --size-mib, and
    /// kept for the next run). Must be on a filesystem with O_DIRECT (not
    /// tmpfs). Default: a file in a new directory in the system's
    /// temporary directory (`/var/tmp` if that is a tmpfs), removed at the
    /// end, also on Ctrl-C.
    #[arg(long)]
    file: Option<PathBuf>,
    /// The file that is used: `--file` or the temporary one.
    #[arg(skip)]
    resolved_file: PathBuf,
    /// File size in MiB.
    #[arg(long, default_value_t = 2048, allow_negative_numbers = true, value_parser = super::harness::int_in::<u32>(1, 1_048_576))]
    size_mib: u32,
    /// Request size in KiB (a power of two).
    #[arg(long, default_value_t = 16, allow_negative_numbers = true, value_parser = super::harness::int_in::<u32>(1, 1024))]
    block_kib: u32,
    /// Backends to run: uring, pread (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "uring")]
    backend: Vec<String>,
    /// Operations: read, write (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "read")]
    op: Vec<String>,
    /// Submission paths: threads, direct (comma-separated; see the module docs).
    #[arg(long, value_delimiter = ',', default_value = "threads")]
    path: Vec<String>,
    /// I/O thread counts (read_io_threads or write_io_threads).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8",
          allow_negative_numbers = true, value_parser = super::harness::int_in::<usize>(1, 64))]
    threads: Vec<usize>,
    /// Queue depths: per I/O thread (path threads) or caller threads (path direct).
    #[arg(long, value_delimiter = ',', default_value = "1,4,32", allow_negative_numbers = true, value_parser = super::harness::int_in::<u32>(1, 4096))]
    depth: Vec<u32>,
    /// Seconds per configuration.
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true,
          value_parser = super::harness::f64_in(0.1, 3600.0))]
    seconds: f64,
    /// Path threads: the submitter offers this many times T x D requests,
    /// so each I/O thread finds its next request queued when one completes
    /// (as read-ahead, which queues many pages at once). 1 = no backlog.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = super::harness::int_in::<u32>(1, 64))]
    backlog: u32,
    /// Run every configuration this many times, interleaved.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = super::harness::int_in::<u32>(1, 100))]
    repeat: u32,
    /// Also run fio (ioengine io_uring, direct=1, one job) on the same file
    /// at each depth, right before the same-depth rows, for comparison.
    #[arg(long)]
    fio: bool,
    /// Write the results as a JSON array to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One measured configuration.
#[derive(Serialize, Debug, Clone)]
struct Row {
    backend: String,
    op: String,
    path: String,
    threads: usize,
    depth: u32,
    repeat: usize,
    seconds: f64,
    ios: u64,
    iops: f64,
    mb_per_s: f64,
    p50_us: f64,
    p99_us: f64,
}

/// Runs the workload.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let size_bytes = u64::from(args.size_mib) << 20;
    let block_bytes = (args.block_kib as usize) << 10;
    if block_bytes == 0 || !block_bytes.is_power_of_two() {
        bail!("--block-kib must be a power of two");
    }
    let (file, _temp) = match &args.file {
        Some(file) => (file.clone(), None),
        None => {
            let temp = crate::cleanup::TempDir::new(
                &crate::cleanup::temp_parent(),
                "barracuda-bench-io-",
            )?;
            (temp.path().join("bench-io.dat"), Some(temp))
        }
    };
    let existing_bytes = std::fs::metadata(&file).map_or(0, |m| m.len());
    if let Some(parent) = file.parent() {
        let parent = if parent.as_os_str().is_empty() {
            std::path::Path::new(".")
        } else {
            parent
        };
        crate::cleanup::ensure_free(
            parent,
            size_bytes.saturating_sub(existing_bytes),
            "bench io",
        )?;
    }
    let args = &Args {
        resolved_file: file,
        ..args.clone()
    };
    prepare_file(&args.resolved_file, size_bytes)?;
    let mut rows = Vec::new();
    print_header();
    for repeat in 0..args.repeat as usize {
        for op in &args.op {
            for &depth in &args.depth {
                if args.fio {
                    let row = run_fio(args, op, depth, repeat)?;
                    print_row(&row);
                    rows.push(row);
                }
                for row in run_depth(args, op, depth, repeat)? {
                    print_row(&row);
                    rows.push(row);
                }
            }
        }
    }
    if args.fio {
        print_ratios(&rows);
    }
    super::harness::print_legend(&[
        (
            "path",
            "threads: requests go through the file's I/O threads; direct: callers submit",
        ),
        (
            "threads, depth",
            "I/O threads (or callers), and requests each keeps in flight",
        ),
        ("IOPS, MB/s", "requests and bytes per second over the run"),
        (
            "p50 us, p99 us",
            "latency of one request: the median and the 99th percentile",
        ),
        (
            "IOPS / fio",
            "against fio on the same file at the same depth (--fio): 1.00 is as fast",
        ),
    ]);
    if let Some(best) = rows
        .iter()
        .filter(|r| r.backend != "fio")
        .max_by(|a, b| a.iops.total_cmp(&b.iops))
    {
        println!(
            "verdict: most IOPS {:.0} ({} {} {}, {} threads, depth {}), p99 {:.0} us",
            best.iops, best.backend, best.op, best.path, best.threads, best.depth, best.p99_us
        );
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&rows).context("serialize results")?;
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// All configurations at one depth for one operation.
fn run_depth(args: &Args, op: &str, depth: u32, repeat: usize) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for backend in &args.backend {
        for path in &args.path {
            // The direct path has no thread dimension.
            let threads: &[usize] = if path == "direct" {
                &[1]
            } else {
                &args.threads
            };
            for &thread_count in threads {
                let config = Config {
                    backend,
                    op,
                    path,
                    threads: thread_count,
                    depth,
                };
                rows.push(measure(args, &config, repeat)?);
            }
        }
    }
    Ok(rows)
}

struct Config<'a> {
    backend: &'a str,
    op: &'a str,
    path: &'a str,
    threads: usize,
    depth: u32,
}

fn measure(args: &Args, config: &Config<'_>, repeat: usize) -> anyhow::Result<Row> {
    let backend = match config.backend {
        "uring" => Backend::Uring,
        "pread" => Backend::Pread,
        other => bail!("unknown backend {other} (uring or pread)"),
    };
    let op = match config.op {
        "read" => IoOp::Read,
        "write" => IoOp::Write,
        other => bail!("unknown op {other} (read or write)"),
    };
    let block_bytes = (args.block_kib as usize) << 10;
    let outstanding = config.threads * config.depth as usize;
    let options = IoOptions::default()
        .backend(backend)
        .flush_method(FlushMethod::ODirect)
        .read_io_threads(config.threads)
        .write_io_threads(config.threads)
        .queue_depth(config.depth)
        .buffer_count(outstanding * args.backlog.max(1) as usize)
        .buffer_size_bytes(block_bytes.max(4096));
    let file = barracuda_io::open(&args.resolved_file, &options)
        .with_context(|| format!("open {}", args.resolved_file.display()))?;
    let workload = Workload {
        file,
        op,
        block_bytes,
        block_count: (u64::from(args.size_mib) << 20) / block_bytes as u64,
        duration: Duration::from_secs_f64(args.seconds),
    };
    let started = Instant::now();
    let mut latencies_ns = match config.path {
        "threads" => workload.through_threads(outstanding * args.backlog.max(1) as usize)?,
        "direct" => workload.direct(config.depth as usize)?,
        other => bail!("unknown path {other} (threads or direct)"),
    };
    let elapsed = started.elapsed().as_secs_f64();
    Ok(summarize(
        config,
        repeat,
        elapsed,
        block_bytes,
        &mut latencies_ns,
    ))
}

fn summarize(
    config: &Config<'_>,
    repeat: usize,
    elapsed: f64,
    block_bytes: usize,
    latencies_ns: &mut [u64],
) -> Row {
    latencies_ns.sort_unstable();
    let ios = latencies_ns.len() as u64;
    let iops = ios as f64 / elapsed;
    Row {
        backend: config.backend.to_string(),
        op: config.op.to_string(),
        path: config.path.to_string(),
        threads: config.threads,
        depth: config.depth,
        repeat,
        seconds: elapsed,
        ios,
        iops,
        mb_per_s: iops * block_bytes as f64 / 1e6,
        p50_us: percentile_us(latencies_ns, 0.50),
        p99_us: percentile_us(latencies_ns, 0.99),
    }
}

fn percentile_us(sorted_ns: &[u64], quantile: f64) -> f64 {
    if sorted_ns.is_empty() {
        return 0.0;
    }
    let index = ((sorted_ns.len() - 1) as f64 * quantile).round() as usize;
    sorted_ns[index] as f64 / 1e3
}

struct Workload {
    file: Arc<dyn BlockFile>,
    op: IoOp,
    block_bytes: usize,
    block_count: u64,
    duration: Duration,
}

impl Workload {
    fn request(&self, rng: &mut SmallRng, buf: AlignedBuf, tag: u64) -> IoRequest {
        let offset_bytes = rng.random_range(0..self.block_count) * self.block_bytes as u64;
        IoRequest {
            op: self.op,
            offset_bytes,
            buf,
            tag,
        }
    }

    /// One submitter keeps `outstanding` requests in flight through the
    /// I/O threads; returns each request's latency.
    fn through_threads(&self, outstanding: usize) -> anyhow::Result<Vec<u64>> {
        let mut rng = SmallRng::seed_from_u64(1);
        let queue = CompletionQueue::new();
        let sender = queue.sender();
        let mut started_at = vec![Instant::now(); outstanding];
        let mut latencies_ns = Vec::with_capacity(1 << 20);
        let first = (0..outstanding)
            .map(|slot| {
                self.request(
                    &mut rng,
                    self.fill(self.file.alloc_buf(self.block_bytes)),
                    slot as u64,
                )
            })
            .collect();
        let begin = Instant::now();
        self.file.submit(first, &sender);
        let mut in_flight = outstanding;
        let mut again = Vec::with_capacity(outstanding);
        while in_flight > 0 {
            let mut next = Some(queue.wait());
            while let Some(completion) = next {
                completion.result.context("benchmark request failed")?;
                let now = Instant::now();
                let slot = completion.tag as usize;
                latencies_ns.push((now - started_at[slot]).as_nanos() as u64);
                in_flight -= 1;
                if now - begin < self.duration {
                    started_at[slot] = now;
                    again.push(self.request(&mut rng, completion.buf, slot as u64));
                }
                next = queue.try_next();
            }
            in_flight += again.len();
            self.file.submit(std::mem::take(&mut again), &sender);
        }
        Ok(latencies_ns)
    }

    /// `callers` threads each doing one synchronous request at a time.
    fn direct(&self, callers: usize) -> anyhow::Result<Vec<u64>> {
        let begin = Instant::now();
        let results: Vec<anyhow::Result<Vec<u64>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..callers)
                .map(|caller| scope.spawn(move || self.direct_caller(caller as u64, begin)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("caller panicked")))
                })
                .collect()
        });
        let mut all = Vec::new();
        for result in results {
            all.extend(result?);
        }
        Ok(all)
    }

    fn direct_caller(&self, seed: u64, begin: Instant) -> anyhow::Result<Vec<u64>> {
        let mut rng = SmallRng::seed_from_u64(seed + 100);
        let mut buf = self.fill(self.file.alloc_buf(self.block_bytes));
        let mut latencies_ns = Vec::with_capacity(1 << 18);
        while begin.elapsed() < self.duration {
            let offset_bytes = rng.random_range(0..self.block_count) * self.block_bytes as u64;
            let start = Instant::now();
            match self.op {
                IoOp::Read => self.file.read_at(offset_bytes, &mut buf)?,
                IoOp::Write => self.file.write_at(offset_bytes, &buf)?,
            }
            latencies_ns.push(start.elapsed().as_nanos() as u64);
        }
        Ok(latencies_ns)
    }

    /// Fills write buffers with incompressible bytes (reads overwrite them).
    fn fill(&self, mut buf: AlignedBuf) -> AlignedBuf {
        if self.op == IoOp::Write {
            SmallRng::seed_from_u64(buf.addr() as u64).fill(&mut buf[..]);
        }
        buf
    }
}

/// Creates `path` and writes it to `size_bytes` with random bytes, unless
/// it is already that long (fallocate alone would leave unwritten extents
/// that read as zeros without touching the disk).
fn prepare_file(path: &Path, size_bytes: u64) -> anyhow::Result<()> {
    let existing = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if existing >= size_bytes {
        return Ok(());
    }
    eprintln!("writing {} MiB to {} ...", size_bytes >> 20, path.display());
    let options = IoOptions::default()
        .flush_method(FlushMethod::ODirect)
        .write_io_threads(4);
    let file =
        barracuda_io::open(path, &options).with_context(|| format!("open {}", path.display()))?;
    let mut rng = SmallRng::seed_from_u64(7);
    let chunk_count = size_bytes.div_ceil(FILL_CHUNK_BYTES as u64);
    let batch_size = 8;
    for batch_start in (0..chunk_count).step_by(batch_size) {
        let requests = (batch_start..(batch_start + batch_size as u64).min(chunk_count))
            .map(|chunk| {
                let mut buf = AlignedBuf::zeroed(FILL_CHUNK_BYTES, file.alignment().mem_bytes);
                rng.fill(&mut buf[..]);
                IoRequest::write(chunk * FILL_CHUNK_BYTES as u64, buf, chunk)
            })
            .collect();
        for completion in file.submit_and_wait(requests) {
            completion.result.context("preallocating the bench file")?;
        }
    }
    file.set_len(size_bytes)?;
    file.sync_data()?;
    Ok(())
}

/// Runs fio on the same file and reads its JSON report.
fn run_fio(args: &Args, op: &str, depth: u32, repeat: usize) -> anyhow::Result<Row> {
    let rw = if op == "write" {
        "randwrite"
    } else {
        "randread"
    };
    let fio_args = [
        "--name=r".to_string(),
        format!("--filename={}", args.resolved_file.display()),
        "--ioengine=io_uring".into(),
        "--direct=1".into(),
        format!("--bs={}k", args.block_kib),
        format!("--rw={rw}"),
        format!("--iodepth={depth}"),
        format!("--runtime={}", args.seconds.ceil() as u64),
        "--time_based".into(),
        format!("--size={}m", args.size_mib),
        "--output-format=json".into(),
    ];
    if repeat == 0 {
        eprintln!("fio {}", fio_args.join(" "));
    }
    let output = Command::new("fio")
        .args(&fio_args)
        .output()
        .context("run fio (apt-get install -y fio)")?;
    if !output.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("parse fio's JSON")?;
    let job = &report["jobs"][0][if op == "write" { "write" } else { "read" }];
    let iops = job["iops"].as_f64().context("fio iops")?;
    let percentile = |key: &str| job["clat_ns"]["percentile"][key].as_f64().unwrap_or(0.0) / 1e3;
    Ok(Row {
        backend: "fio".into(),
        op: op.into(),
        path: "io_uring".into(),
        threads: 1,
        depth,
        repeat,
        seconds: args.seconds.ceil(),
        ios: job["total_ios"].as_u64().unwrap_or(0),
        iops,
        mb_per_s: iops * f64::from(args.block_kib) * 1024.0 / 1e6,
        p50_us: percentile("50.000000"),
        p99_us: percentile("99.000000"),
    })
}

/// Median over repeats of each configuration's IOPS divided by fio's IOPS
/// at the same depth, operation and repeat (fio ran right before it).
fn print_ratios(rows: &[Row]) {
    let mut ratios: std::collections::BTreeMap<(String, String, String, usize, u32), Vec<f64>> =
        std::collections::BTreeMap::new();
    for row in rows.iter().filter(|r| r.backend != "fio") {
        let fio = rows.iter().find(|f| {
            f.backend == "fio" && f.op == row.op && f.depth == row.depth && f.repeat == row.repeat
        });
        if let Some(fio) = fio.filter(|f| f.iops > 0.0) {
            let key = (
                row.backend.clone(),
                row.op.clone(),
                row.path.clone(),
                row.threads,
                row.depth,
            );
            ratios.entry(key).or_default().push(row.iops / fio.iops);
        }
    }
    println!("\nIOPS / fio IOPS at the same depth (median over repeats, then all values):");
    for ((backend, op, path, threads, depth), mut values) in ratios {
        values.sort_by(f64::total_cmp);
        let median = values[values.len() / 2];
        let all: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
        println!(
            "{backend:<6} {op:<5} {path:<8} threads {threads:>2} depth {depth:>3}: {median:.2}  [{}]",
            all.join(" ")
        );
    }
}

fn print_header() {
    println!(
        "{:<6} {:<5} {:<8} {:>7} {:>5} {:>10} {:>8} {:>9} {:>9}",
        "backend", "op", "path", "threads", "depth", "IOPS", "MB/s", "p50 us", "p99 us"
    );
}

fn print_row(row: &Row) {
    println!(
        "{:<6} {:<5} {:<8} {:>7} {:>5} {:>10.0} {:>8.1} {:>9.1} {:>9.1}",
        row.backend,
        row.op,
        row.path,
        row.threads,
        row.depth,
        row.iops,
        row.mb_per_s,
        row.p50_us,
        row.p99_us
    );
}
