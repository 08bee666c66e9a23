//! Admin commands: look into a database (`stat`, `check`, `dump`, `get`),
//! change it (`put`, `del`, `load`) and rewrite its trees into full pages
//! (`compact`).
//!
//! Keys and values are written in hex on the command line and in `dump` and
//! `load` lines; an empty key or value is written `-` (hex cannot express
//! it as a separate word).
//!
//! Every command but `put` and `load` refuses a directory that holds no
//! database (no `wal.log`), so a typo never leaves an empty database
//! behind; `put` and `load` create the database and their trees (with the
//! default tree options) as needed.
//!
//! The data files use O_DIRECT; on a filesystem that refuses it (tmpfs) the
//! commands fall back to buffered I/O with fsync.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use barracuda::btree::{KEY_BYTES_MAX, TreeStats, VALUE_BYTES_MAX};
use barracuda::io::IoError;
use barracuda::{Db, Durability, FlushMethod, LOG_FILE_NAME, PoolStatus, Tree, WriteBatch};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// The admin commands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Trees, height, pages, fill, compression ratio, file sizes, pool status.
    Stat(StatArgs),
    /// Verify every block and every tree invariant; exit status 1 on damage.
    Check(DirArgs),
    /// Print `TREE HEXKEY HEXVALUE` lines, trees by name, keys in order.
    Dump(DumpArgs),
    /// Print the hex value of a key; exit status 1 if it is absent.
    Get(KeyArgs),
    /// Set a key (creates the database and the tree if needed).
    Put(PutArgs),
    /// Delete a key.
    Del(KeyArgs),
    /// Apply `put TREE HEXKEY HEXVALUE` / `del TREE HEXKEY` lines in durable
    /// batches (creates the database and trees if needed).
    Load(LoadArgs),
    /// Rewrite trees into full pages and give free space back to the
    /// filesystem (`Db::compact`); prints pages and file sizes before and
    /// after.
    Compact(DumpArgs),
}

/// Options every admin command takes.
#[derive(clap::Args, Debug)]
pub struct DirArgs {
    /// The database directory.
    pub dir: PathBuf,
    /// Buffer pool of each tree, MiB.
    #[arg(long, default_value_t = 64)]
    pub pool_mib: usize,
}

/// `stat`.
#[derive(clap::Args, Debug)]
pub struct StatArgs {
    #[command(flatten)]
    db: DirArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Also print each pool's full status (InnoDB style).
    #[arg(long)]
    verbose: bool,
}

/// `dump` and `compact`.
#[derive(clap::Args, Debug)]
pub struct DumpArgs {
    #[command(flatten)]
    db: DirArgs,
    /// Only this tree.
    #[arg(long)]
    tree: Option<String>,
}

/// `get` and `del`.
#[derive(clap::Args, Debug)]
pub struct KeyArgs {
    #[command(flatten)]
    db: DirArgs,
    /// The tree.
    tree: String,
    /// The key in hex (`-` for the empty key).
    key: String,
}

/// `put`.
#[derive(clap::Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    db: DirArgs,
    /// The tree.
    tree: String,
    /// The key in hex (`-` for the empty key).
    key: String,
    /// The value in hex (`-` for the empty value).
    value: String,
}

/// `load`.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    db: DirArgs,
    /// The operations file, `-` for standard input.
    #[arg(long)]
    ops: PathBuf,
    /// Lines per durable commit.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Applies every line through one `Db::chunked_writer` instead: atomic
    /// parts, one sync at the end, a run of deletes in key order; not
    /// atomic as a whole, and `committed K` is printed once, at the end. A
    /// bad line stops the load after the lines before it are applied and
    /// synced. For bulk loads and mass deletes. `--batch` is ignored.
    #[arg(long)]
    chunked: bool,
}

/// Runs an admin command. An error (also "damaged" and "not found") makes
/// the process exit with status 1.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Stat(args) => stat(&args),
        Command::Check(args) => check(&args),
        Command::Dump(args) => dump(&args),
        Command::Get(args) => get(&args),
        Command::Put(args) => put(&args),
        Command::Del(args) => del(&args),
        Command::Load(args) => load(&args),
        Command::Compact(args) => compact(&args),
    }
}

/// Opens the database in `args.dir`, which must exist unless `create`.
fn open(args: &DirArgs, create: bool) -> anyhow::Result<Db> {
    let dir = &args.dir;
    if !create && !dir.join(LOG_FILE_NAME).is_file() {
        bail!(
            "{} is not a barracuda database (it has no {LOG_FILE_NAME})",
            dir.display()
        );
    }
    let options = || Db::options().buffer_pool_bytes(args.pool_mib << 20);
    let db = match options().open(dir) {
        Err(barracuda::Error::Io(IoError::DirectIoUnsupported { .. })) => {
            options().flush_method(FlushMethod::Fsync).open(dir)
        }
        other => other,
    };
    db.with_context(|| format!("opening {}", dir.display()))
}

/// Parses hex (`-` = empty).
fn parse_hex(text: &str) -> anyhow::Result<Vec<u8>> {
    if text == "-" {
        return Ok(Vec::new());
    }
    if !text.len().is_multiple_of(2) {
        bail!("{text:?} is not hex: odd number of digits");
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => bail!("{text:?} is not hex: {:?}", char::from(c)),
    };
    text.as_bytes()
        .chunks(2)
        .map(|pair| Ok(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// Formats hex (`-` = empty).
fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A key and value that the tree will take, or why not.
fn parse_entry(key: &str, value: Option<&str>) -> anyhow::Result<(Vec<u8>, Option<Vec<u8>>)> {
    let key = parse_hex(key).context("key")?;
    if key.len() > KEY_BYTES_MAX {
        bail!("key of {} bytes exceeds {KEY_BYTES_MAX}", key.len());
    }
    let value = value.map(parse_hex).transpose().context("value")?;
    if let Some(value) = &value
        && value.len() > VALUE_BYTES_MAX
    {
        bail!("value of {} bytes exceeds {VALUE_BYTES_MAX}", value.len());
    }
    Ok((key, value))
}

fn get(args: &KeyArgs) -> anyhow::Result<()> {
    let (key, _) = parse_entry(&args.key, None)?;
    let db = open(&args.db, false)?;
    let value = db.open_tree(&args.tree)?.get(&key)?;
    db.close()?;
    match value {
        Some(value) => {
            println!("{}", hex(&value));
            Ok(())
        }
        None => bail!("not found: key {} in tree {:?}", args.key, args.tree),
    }
}

fn put(args: &PutArgs) -> anyhow::Result<()> {
    let (key, value) = parse_entry(&args.key, Some(&args.value))?;
    let db = open(&args.db, true)?;
    let existed =
        db.tree(&args.tree)?
            .put_with(&key, &value.unwrap_or_default(), Durability::Sync)?;
    db.close()?;
    println!("{}", if existed { "replaced" } else { "inserted" });
    Ok(())
}

fn del(args: &KeyArgs) -> anyhow::Result<()> {
    let (key, _) = parse_entry(&args.key, None)?;
    let db = open(&args.db, false)?;
    let existed = db
        .open_tree(&args.tree)?
        .delete_with(&key, Durability::Sync)?;
    db.close()?;
    println!("{}", if existed { "deleted" } else { "absent" });
    Ok(())
}

fn dump(args: &DumpArgs) -> anyhow::Result<()> {
    let db = open(&args.db, false)?;
    let names = match &args.tree {
        Some(name) => vec![db.open_tree(name)?.name().to_owned()],
        None => sorted(db.tree_names()),
    };
    let written = write_entries(&db, &names);
    db.close()?;
    match written {
        // The reader went away (`dump | head`): not an error.
        Err(e) if is_broken_pipe(&e) => Ok(()),
        other => other,
    }
}

/// Prints the entries of the trees `names` as `dump` lines.
fn write_entries(db: &Db, names: &[String]) -> anyhow::Result<()> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    for name in names {
        for entry in db.open_tree(name)?.iter() {
            let (key, value) = entry.with_context(|| format!("reading tree {name:?}"))?;
            writeln!(out, "{name} {} {}", hex(&key), hex(&value))?;
        }
    }
    out.flush()?;
    Ok(())
}

/// `compact`: every tree (or `--tree`), with a spinner counting entries.
fn compact(args: &DumpArgs) -> anyhow::Result<()> {
    let db = open(&args.db, false)?;
    let names = match &args.tree {
        Some(name) => vec![db.open_tree(name)?.name().to_owned()],
        None => sorted(db.tree_names()),
    };
    for name in &names {
        let bar = ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {msg} {pos} entries {per_sec}")
                .context("progress template")?,
        );
        bar.set_message(format!("compacting {name}:"));
        let stats = db
            .compact_with_progress(name, |entries| {
                bar.set_position(entries);
                true
            })
            .with_context(|| format!("compacting tree {name:?}"))?;
        bar.finish_and_clear();
        println!(
            "tree {name}: {} entries, {} -> {} pages, {} -> {} bytes",
            stats.entries,
            stats.pages_before,
            stats.pages_after,
            stats.file_bytes_before,
            stats.file_bytes_after
        );
    }
    db.close()?;
    Ok(())
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

fn check(args: &DirArgs) -> anyhow::Result<()> {
    let db = open(args, false)?;
    let names = sorted(db.tree_names());
    db.check_files()
        .with_context(|| format!("checking the files of {}", args.dir.display()))?;
    println!("files: OK");
    let mut damaged = 0;
    for name in &names {
        match db.open_tree(name)?.check() {
            Ok(()) => println!("tree {name}: OK"),
            Err(e) => {
                damaged += 1;
                println!("tree {name}: DAMAGED: {e}");
            }
        }
    }
    db.close()?;
    if damaged > 0 {
        bail!("{damaged} of {} trees damaged", names.len());
    }
    println!("OK: {} trees checked", names.len());
    Ok(())
}

/// One line of a `load` file.
#[derive(Debug)]
struct LoadOp {
    tree: String,
    key: Vec<u8>,
    /// `None` for a delete.
    value: Option<Vec<u8>>,
}

/// Parses one `load` line: `put TREE HEXKEY HEXVALUE` or `del TREE HEXKEY`.
fn parse_op(line: &str) -> anyhow::Result<LoadOp> {
    let words: Vec<&str> = line.split_ascii_whitespace().collect();
    let (tree, key, value) = match words.as_slice() {
        ["put", tree, key, value] => (tree, key, Some(*value)),
        ["del", tree, key] => (tree, key, None),
        _ => bail!("expected `put TREE HEXKEY HEXVALUE` or `del TREE HEXKEY`"),
    };
    let (key, value) = parse_entry(key, value)?;
    Ok(LoadOp {
        tree: (*tree).to_owned(),
        key,
        value,
    })
}

fn load(args: &LoadArgs) -> anyhow::Result<()> {
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let input: Box<dyn BufRead> = if args.ops == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(&args.ops)
            .with_context(|| format!("opening {}", args.ops.display()))?;
        Box::new(std::io::BufReader::new(file))
    };
    let db = open(&args.db, true)?;
    let result = if args.chunked {
        load_chunked(&db, input)
    } else {
        load_lines(&db, input, args.batch)
    };
    let closed = db.close();
    result?;
    closed?;
    Ok(())
}

/// Applies the lines of `input` in batches of `batch_lines` operations.
fn load_lines(db: &Db, input: Box<dyn BufRead>, batch_lines: usize) -> anyhow::Result<()> {
    let mut trees = HashMap::new();
    let mut pending = Vec::with_capacity(batch_lines);
    let mut applied_count = 0usize;
    let mut first_line = 1;
    let mut stdout = std::io::stdout().lock();
    for (index, line) in input.lines().enumerate() {
        let line_number = index + 1;
        let line = line.with_context(|| format!("reading line {line_number}"))?;
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        if pending.is_empty() {
            first_line = line_number;
        }
        let op = parse_op(text).with_context(|| {
            format!("line {line_number}: {text:?} (nothing of lines {first_line}..={line_number} applied)")
        })?;
        pending.push(op);
        if pending.len() == batch_lines {
            commit(db, &mut trees, &mut pending)
                .with_context(|| format!("committing lines {first_line}..={line_number}"))?;
            applied_count += batch_lines;
            writeln!(stdout, "committed {applied_count}")?;
            stdout.flush()?;
        }
    }
    if !pending.is_empty() {
        let count = pending.len();
        commit(db, &mut trees, &mut pending)
            .with_context(|| format!("committing the lines from {first_line} to the end"))?;
        applied_count += count;
        writeln!(stdout, "committed {applied_count}")?;
        stdout.flush()?;
    }
    Ok(())
}

/// Applies the lines of `input` through one chunked writer (`load
/// --chunked`), then syncs and prints `committed K`. A line that cannot be
/// read, parsed or written stops the load; the lines before it are
/// applied and synced first.
fn load_chunked(db: &Db, input: Box<dyn BufRead>) -> anyhow::Result<()> {
    let mut trees: HashMap<String, Tree> = HashMap::new();
    let mut writer = db.chunked_writer_with(Durability::Sync);
    let mut applied_count = 0usize;
    let mut stopped = None;
    let bar = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{spinner} loading: {pos} lines {per_sec}")
            .context("progress template")?,
    );
    for (index, line) in input.lines().enumerate() {
        let line_number = index + 1;
        let written = line
            .with_context(|| format!("reading line {line_number}"))
            .and_then(|line| {
                let text = line.trim();
                if text.is_empty() || text.starts_with('#') {
                    return Ok(false);
                }
                let op = parse_op(text).with_context(|| format!("line {line_number}: {text:?}"))?;
                if !trees.contains_key(&op.tree) {
                    let tree = match op.value {
                        Some(_) => Some(db.tree(&op.tree)?),
                        // A delete from a tree that does not exist does nothing.
                        None => db.open_tree(&op.tree).ok(),
                    };
                    if let Some(tree) = tree {
                        trees.insert(op.tree.clone(), tree);
                    }
                }
                let tree = trees.get(&op.tree);
                if let Some(tree) = tree {
                    match &op.value {
                        Some(value) => writer.put(tree, &op.key, value),
                        None => writer.delete(tree, &op.key),
                    }
                    .with_context(|| format!("line {line_number}: {text:?}"))?;
                }
                Ok(true)
            });
        match written {
            Ok(counted) => {
                applied_count += usize::from(counted);
                if applied_count.is_multiple_of(10_000) {
                    bar.set_position(applied_count as u64);
                }
            }
            Err(error) => {
                stopped = Some(error);
                break;
            }
        }
    }
    writer.finish().context("finishing the chunked write")?;
    bar.finish_and_clear();
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "committed {applied_count}")?;
    stdout.flush()?;
    match stopped {
        Some(error) => Err(error.context(format!(
            "stopped; the {applied_count} lines before it are applied"
        ))),
        None => Ok(()),
    }
}

/// Writes `ops` as one durable batch. Trees that the batch puts into are
/// created first; a delete from a tree that does not exist does nothing.
fn commit(db: &Db, trees: &mut HashMap<String, Tree>, ops: &mut Vec<LoadOp>) -> anyhow::Result<()> {
    let put_trees: BTreeSet<&str> = ops
        .iter()
        .filter(|op| op.value.is_some())
        .map(|op| op.tree.as_str())
        .collect();
    for name in put_trees {
        if !trees.contains_key(name) {
            trees.insert(name.to_owned(), db.tree(name)?);
        }
    }
    let mut batch = WriteBatch::new();
    for op in ops.drain(..) {
        if !trees.contains_key(&op.tree)
            && let Ok(tree) = db.open_tree(&op.tree)
        {
            trees.insert(op.tree.clone(), tree);
        }
        let Some(tree) = trees.get(&op.tree) else {
            continue;
        };
        match &op.value {
            Some(value) => batch.put(tree, &op.key, value),
            None => batch.delete(tree, &op.key),
        }
    }
    db.write_with(batch, Durability::Sync)?;
    Ok(())
}

/// What `stat` reports about one tree.
#[derive(Serialize)]
struct TreeReport {
    name: String,
    /// The creation options, from the catalog.
    options: serde_json::Value,
    stats: TreeStats,
    /// The entry count the tree's meta page keeps (`Tree::len`); `records`
    /// in `stats` is counted by reading every leaf, and the two agree
    /// unless the file is damaged (`barracuda check` says where).
    len: u64,
    file_bytes: u64,
    /// Uncompressed bytes of the tree's pages per byte of its file.
    compression_ratio: f64,
    pool: PoolStatus,
}

/// What `stat` reports.
#[derive(Serialize)]
struct Report {
    dir: PathBuf,
    trees: Vec<TreeReport>,
    log: barracuda::wal::WalStats,
}

/// The catalog's entry of every tree by name (the catalog is JSON, see
/// `barracuda::CATALOG_FILE_NAME`); the public API has no getters for a
/// tree's page size and compression.
fn catalog_entries(dir: &Path) -> anyhow::Result<HashMap<String, serde_json::Value>> {
    let path = dir.join(barracuda::CATALOG_FILE_NAME);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let catalog: serde_json::Value = serde_json::from_slice(&text)?;
    let trees = catalog["trees"].as_array().cloned().unwrap_or_default();
    Ok(trees
        .into_iter()
        .filter_map(|t| Some((t["name"].as_str()?.to_owned(), t)))
        .collect())
}

fn tree_report(tree: &Tree, options: serde_json::Value) -> anyhow::Result<TreeReport> {
    let stats = tree.stats()?;
    let file_bytes = tree.file_bytes()?;
    let page_bytes = options["page_size_bytes"].as_u64().unwrap_or(0);
    let page_count: u64 = stats.pages_per_level.iter().sum::<u64>() + stats.overflow_pages;
    let compression_ratio = if file_bytes == 0 {
        0.0
    } else {
        (page_count * page_bytes) as f64 / file_bytes as f64
    };
    Ok(TreeReport {
        name: tree.name().to_owned(),
        options,
        stats,
        len: tree.len()?,
        file_bytes,
        compression_ratio,
        pool: tree.pool_status(),
    })
}

fn stat(args: &StatArgs) -> anyhow::Result<()> {
    let db = open(&args.db, false)?;
    let mut catalog = catalog_entries(&args.db.dir)?;
    let mut trees = Vec::new();
    for name in sorted(db.tree_names()) {
        let options = catalog.remove(&name).unwrap_or_default();
        let tree = db.open_tree(&name)?;
        trees.push(tree_report(&tree, options).with_context(|| format!("tree {name:?}"))?);
    }
    let report = Report {
        dir: args.db.dir.clone(),
        trees,
        log: db.log_stats(),
    };
    db.close()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report, args.verbose);
    }
    Ok(())
}

fn print_report(report: &Report, verbose: bool) {
    let log = &report.log;
    println!(
        "database {}: {} trees; log budget {} MiB, {} KiB in {} segment(s), checkpoint at LSN {}",
        report.dir.display(),
        report.trees.len(),
        log.log_bytes >> 20,
        log.file_bytes >> 10,
        log.segments,
        log.checkpoint_lsn
    );
    for tree in &report.trees {
        print_tree(tree, verbose);
    }
}

fn print_tree(tree: &TreeReport, verbose: bool) {
    let s = &tree.stats;
    let o = &tree.options;
    let p = &tree.pool;
    println!("tree {}", tree.name);
    println!(
        "  options: page {} bytes, compression {}, block {}, split {}",
        o["page_size_bytes"], o["compression"], o["block_size"], o["split_policy"]
    );
    println!(
        "  height {}, pages per level (leaves first) {:?}, overflow pages {}",
        s.height, s.pages_per_level, s.overflow_pages
    );
    let kept = if tree.len == s.record_count {
        String::new()
    } else {
        format!(
            " (the meta page counts {}: run `barracuda check`)",
            tree.len
        )
    };
    println!(
        "  records {}{kept}, leaf fill {:.3}",
        s.record_count, s.leaf_fill
    );
    println!(
        "  file {} bytes, compression ratio {:.2} (page bytes / file bytes)",
        tree.file_bytes, tree.compression_ratio
    );
    println!(
        "  pool: {} of {} bytes used, hit rate {}/1000, LRU {} (old {}), unzip_LRU {}, pages read {}, written {}, dirty {}",
        p.bytes_used,
        p.budget_bytes,
        p.hit_rate_per_mille,
        p.lru_len,
        p.old_lru_len,
        p.unzip_lru_len,
        p.pages_read,
        p.pages_written,
        p.dirty_pages
    );
    if verbose {
        for line in p.render().lines() {
            println!("    {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_junk() {
        for bytes in [&b""[..], b"\x00", b"abc\xff"] {
            assert_eq!(parse_hex(&hex(bytes)).expect("valid hex"), bytes);
        }
        assert_eq!(parse_hex("0aFf").expect("valid hex"), vec![0x0a, 0xff]);
        assert!(parse_hex("abc").is_err());
        assert!(parse_hex("zz").is_err());
    }

    #[test]
    fn load_lines_parse() {
        let op = parse_op("put t 6b 76").expect("valid line");
        assert_eq!((op.tree.as_str(), &op.key[..]), ("t", &b"k"[..]));
        assert_eq!(op.value.as_deref(), Some(&b"v"[..]));
        assert!(parse_op("del t 6b").expect("valid").value.is_none());
        assert!(parse_op("put t 6b").is_err());
        assert!(parse_op("del t 6b 76").is_err());
        assert!(parse_op("upsert t 6b 76").is_err());
    }
}
