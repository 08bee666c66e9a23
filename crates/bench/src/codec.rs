//! `barracuda-bench codec`: compress and decompress pages with every codec and
//! report the ratio and the speed, like a small `lzbench` over the block
//! format.
//!
//! Pages hold db_bench-style text (`--ratio`, like db_bench's
//! `compression_ratio`) or slices of any file (`--corpus`). Each codec
//! compresses every page into a block of `min(page, 16 KiB)` (the uncompressed
//! geometry for `none`), then decompresses every block that fit; each pass is
//! repeated `--rounds` times and the median is reported. MB/s counts
//! uncompressed page bytes, 10^6 bytes per MB.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use barracuda_base::{BlockSize, COMPRESSED_BLOCK_SIZE_BYTES_MAX, Geometry, Lsn, PageId};
use barracuda_codec::{BlockCodec, Codec, CompressOutcome, sample};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// The codecs measured unless `--codecs` says otherwise.
const CODECS_DEFAULT: &str = "none,zlib-1,zlib-6,zlib-9,zstd-1,zstd-3,zstd-9,zstd-19";

/// Options of `barracuda-bench codec`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The fraction of its size a page compresses to (db_bench's
    /// `compression_ratio`): 0.5 compresses to half; 0.05..=1.
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true,
          value_parser = super::harness::f64_in(0.05, 1.0))]
    pub ratio: f64,
    /// Take page text from this file instead of generating it.
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// The logical page size in KiB (4 to 64, a power of two).
    #[arg(long, default_value_t = 16, allow_negative_numbers = true, value_parser = super::harness::int_in::<usize>(4, 64))]
    pub page_kib: usize,
    /// How many distinct pages to compress.
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = super::harness::int_in::<usize>(1, 1_000_000))]
    pub pages: usize,
    /// Codecs to measure, comma-separated: none, zlib-LEVEL, zstd-LEVEL.
    #[arg(long, value_delimiter = ',', default_value = CODECS_DEFAULT)]
    pub codecs: Vec<String>,
    /// Passes over all pages per codec; the median pass is reported.
    #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = super::harness::int_in::<usize>(1, 1000))]
    pub rounds: usize,
    /// The seed of the generated text.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the results as a JSON array to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One codec's results (one JSON object).
#[derive(Debug, Serialize)]
struct Row {
    codec: String,
    level: i32,
    page_kib: usize,
    block_kib: usize,
    pages: usize,
    /// Original bytes / compressed image bytes, over all pages.
    ratio: f64,
    /// Pages whose block fit (with the modification-log reserve), percent.
    fit_percent: f64,
    compress_mb_s: f64,
    compress_us_per_page: f64,
    /// `None` when no page fit its block.
    decompress_mb_s: Option<f64>,
    decompress_us_per_page: Option<f64>,
}

/// Runs the workload.
pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.pages > 0, "--pages must be at least 1");
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.ratio),
        "--ratio must be within 0..=1"
    );
    let page_size_bytes = args.page_kib << 10;
    let codecs = args
        .codecs
        .iter()
        .map(|name| parse_codec(name))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let pages = generate_pages(args, page_size_bytes)?;
    let progress = progress_bar((codecs.len() * args.rounds * args.pages * 2) as u64);
    let mut rows = Vec::new();
    for (name, codec) in &codecs {
        progress.set_message(name.clone());
        rows.push(measure(name, codec, &pages, args.rounds, &progress)?);
    }
    progress.finish_and_clear();
    print_table(args, &rows);
    super::harness::print_legend(&[
        (
            "ratio",
            "page bytes over compressed bytes, over all pages (2.00: half the size)",
        ),
        (
            "fit%",
            "pages whose compressed image fits their block, with the modification-log reserve",
        ),
        (
            "compr, decompr",
            "MB/s of page bytes, and µs per page, median of the rounds",
        ),
    ]);
    println!("{}", codec_verdict(&rows));
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&rows)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// `none`, `zlib-6`, `zstd-3`, or a bare `zlib`/`zstd` for the default level.
fn parse_codec(name: &str) -> anyhow::Result<(String, Codec)> {
    let (algorithm, level) = match name.split_once('-') {
        Some((a, l)) => (
            a,
            Some(
                l.parse::<i32>()
                    .with_context(|| format!("level of {name}"))?,
            ),
        ),
        None => (name, None),
    };
    let codec = match (algorithm, level) {
        ("none", None) => Codec::None,
        ("zlib", level) => Codec::Zlib {
            level: u32::try_from(level.unwrap_or(6)).context("zlib level")?,
        },
        ("zstd", level) => Codec::Zstd {
            level: level.unwrap_or(3),
            dictionary: None,
        },
        _ => anyhow::bail!("unknown codec {name:?} (none, zlib-LEVEL, zstd-LEVEL)"),
    };
    codec.validate()?;
    Ok((name.to_owned(), codec))
}

fn generate_pages(args: &Args, page_size_bytes: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    let corpus = match &args.corpus {
        Some(path) => {
            let text =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            anyhow::ensure!(!text.is_empty(), "{} is empty", path.display());
            Some(text)
        }
        None => None,
    };
    let mut rng = sample::rng(args.seed);
    let pages = (0..args.pages)
        .map(|_| {
            let mut page = vec![0; page_size_bytes];
            match &corpus {
                Some(text) => sample::fill_from_corpus(&mut rng, text, &mut page),
                None => sample::fill_compressible(&mut rng, args.ratio, &mut page),
            }
            page
        })
        .collect();
    Ok(pages)
}

fn geometry_for(codec: &Codec, page_size_bytes: usize) -> anyhow::Result<Geometry> {
    let block_size = if *codec == Codec::None {
        BlockSize::Uncompressed
    } else {
        let bytes = page_size_bytes.min(COMPRESSED_BLOCK_SIZE_BYTES_MAX);
        BlockSize::from_compressed_bytes(bytes).context("a block size for this page size")?
    };
    Ok(Geometry::new(page_size_bytes, block_size)?)
}

fn measure(
    name: &str,
    codec: &Codec,
    pages: &[Vec<u8>],
    rounds: usize,
    progress: &ProgressBar,
) -> anyhow::Result<Row> {
    let page_size_bytes = pages[0].len();
    let geometry = geometry_for(codec, page_size_bytes)?;
    let mut coder = BlockCodec::new(codec.clone(), geometry)?;
    let mut blocks = vec![vec![0u8; geometry.block_size_bytes()]; pages.len()];
    let mut fits = vec![false; pages.len()];
    let mut compressed_bytes = 0usize;
    let mut compress_times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        compressed_bytes = 0;
        let started = Instant::now();
        for (i, page) in pages.iter().enumerate() {
            let outcome = coder.compress(page, PageId(i as u64), Lsn(1), &mut blocks[i])?;
            compressed_bytes += image_bytes(outcome, geometry);
            fits[i] = matches!(outcome, CompressOutcome::Fits { .. });
        }
        compress_times.push(started.elapsed());
        progress.inc(pages.len() as u64);
    }
    let fit_blocks: Vec<&Vec<u8>> = blocks
        .iter()
        .zip(&fits)
        .filter(|(_, fit)| **fit)
        .map(|(b, _)| b)
        .collect();
    let mut frame = vec![0u8; page_size_bytes];
    let mut decompress_times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        for block in &fit_blocks {
            coder.decompress(block, &mut frame)?;
        }
        decompress_times.push(started.elapsed());
        progress.inc(pages.len() as u64);
    }
    let total_bytes = (page_size_bytes * pages.len()) as f64;
    let fit_count = fit_blocks.len();
    let compress = median(&mut compress_times);
    let decompress = median(&mut decompress_times);
    Ok(Row {
        codec: name.to_owned(),
        level: codec.level(),
        page_kib: page_size_bytes >> 10,
        block_kib: geometry.block_size_bytes() >> 10,
        pages: pages.len(),
        ratio: total_bytes / compressed_bytes.max(1) as f64,
        fit_percent: 100.0 * fit_count as f64 / pages.len() as f64,
        compress_mb_s: total_bytes / compress.as_secs_f64().max(1e-9) / 1e6,
        compress_us_per_page: compress.as_secs_f64() * 1e6 / pages.len() as f64,
        decompress_mb_s: (fit_count > 0).then(|| {
            (page_size_bytes * fit_count) as f64 / decompress.as_secs_f64().max(1e-9) / 1e6
        }),
        decompress_us_per_page: (fit_count > 0)
            .then(|| decompress.as_secs_f64() * 1e6 / fit_count as f64),
    })
}

/// The compressed image's size, whether or not it fit its block.
fn image_bytes(outcome: CompressOutcome, geometry: Geometry) -> usize {
    match outcome {
        CompressOutcome::Fits { compressed_len } => compressed_len,
        CompressOutcome::DoesNotFit { needed_bytes } => {
            let reserve_bytes = barracuda_codec::log_reserve_bytes(geometry.block_size_bytes());
            needed_bytes - barracuda_base::BLOCK_HEADER_BYTES - reserve_bytes
        }
    }
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn progress_bar(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {msg:>8} [{bar:40}] {pos}/{len} pages ({eta} left)")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The closing line: the best ratio, and the fastest decompression among
/// the codecs that compress.
fn codec_verdict(rows: &[Row]) -> String {
    let best = rows
        .iter()
        .filter(|r| r.codec != "none")
        .max_by(|a, b| a.ratio.total_cmp(&b.ratio));
    let fastest = rows
        .iter()
        .filter(|r| r.codec != "none")
        .filter_map(|r| Some((r, r.decompress_mb_s?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    match (best, fastest) {
        (Some(best), Some((fast, mb_s))) => format!(
            "verdict: best ratio {}-{} ({:.2}); fastest decompression {}-{} ({mb_s:.0} MB/s, ratio {:.2})",
            best.codec, best.level, best.ratio, fast.codec, fast.level, fast.ratio
        ),
        _ => "verdict: no compressing codec measured".to_string(),
    }
}

fn print_table(args: &Args, rows: &[Row]) {
    let source = match &args.corpus {
        Some(path) => format!("corpus {}", path.display()),
        None => format!("db_bench text, ratio {}", args.ratio),
    };
    println!(
        "{} pages of {} KiB, {source}, median of {} rounds",
        args.pages, args.page_kib, args.rounds
    );
    println!(
        "{:<9} {:>5} {:>6} {:>6} {:>12} {:>10} {:>14} {:>10}",
        "codec", "level", "ratio", "fit%", "compr MB/s", "compr us", "decompr MB/s", "decompr us"
    );
    let dash =
        |v: Option<f64>, precision: usize| v.map_or("-".to_owned(), |v| format!("{v:.precision$}"));
    for row in rows {
        println!(
            "{:<9} {:>5} {:>6.2} {:>6.1} {:>12.1} {:>10.1} {:>14} {:>10}",
            row.codec,
            row.level,
            row.ratio,
            row.fit_percent,
            row.compress_mb_s,
            row.compress_us_per_page,
            dash(row.decompress_mb_s, 1),
            dash(row.decompress_us_per_page, 1),
        );
    }
}
