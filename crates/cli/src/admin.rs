//! Admin commands: look into a database (`stat`, `check`, `dump`, `get`),
//! change it (`put`, `del`, `load`) and rewrite its trees into full pages
//! (`compact`).
//!
//! Keys and values are UTF-8 text on the command line unless they start
//! with `0x` (the rest is hex) or `--hex` is given (every key and value is
//! hex); see [`KEYS_AND_VALUES_HELP`]. They are printed back the same way.
//!
//! Every command but `put` and `load` refuses a directory that holds no
//! database (no `wal.log`), so a typo never leaves an empty database
//! behind; `put` and `load` create the database and their trees (with the
//! default tree options) as needed. The commands that only look (`stat`,
//! `check`, `dump`, `get`) open the database read-only: they write no
//! file, so a damaged database can be inspected as it is.
//!
//! The data files use O_DIRECT; on a filesystem that refuses it (tmpfs) the
//! commands fall back to buffered I/O with fsync.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use barracuda::{
    Db, Durability, FlushMethod, KEY_BYTES_MAX, LOG_FILE_NAME, PoolStatus, Tree, TreeStats,
    VALUE_BYTES_MAX, WalStats, WriteBatch,
};
use indicatif::ProgressBar;
use serde::Serialize;
use std::time::Duration;

/// How keys and values are written, for `barracuda --help`.
pub const KEYS_AND_VALUES_HELP: &str = "\
Keys and values:
  On the command line (put, get, del) a key or value is UTF-8 text, as typed:
    barracuda put db users carol '{\"age\":22}'
  unless it starts with 0x, when the rest is hex (0x alone is empty):
    barracuda put db users 0xcafe 0x00ff
  With --hex every key and value is hex, without the 0x (- is empty).
  get prints a value as text when it is printable UTF-8, otherwise as 0x-hex
  (so a value that starts with 0x prints as hex too); with --hex, as hex.
  dump and load lines are `TREE KEY VALUE` and `put TREE KEY VALUE` /
  `del TREE KEY`, each KEY and VALUE one word: text when it has no space or
  control character and does not start with 0x, otherwise 0x-hex (dump
  writes them so, and load reads them back); with --hex, plain hex.

Read-only:
  stat, check, dump and get write no file. A database that was not closed
  cleanly needs recovery first, which writes: `barracuda recover DIR`.";

/// The admin commands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Trees, height, pages, fill, compression ratio, file sizes, pool
    /// status (read-only).
    Stat(StatArgs),
    /// Verify every block and every tree invariant; exit status 1 on damage
    /// (read-only).
    Check(DirArgs),
    /// Print `TREE KEY VALUE` lines, trees by name, keys in order
    /// (read-only).
    Dump(DumpArgs),
    /// Print the value of a key; exit status 1 if it is absent (read-only).
    Get(KeyArgs),
    /// Set a key (creates the database and the tree if needed).
    Put(PutArgs),
    /// Delete a key.
    Del(KeyArgs),
    /// Apply `put TREE KEY VALUE` / `del TREE KEY` lines in durable
    /// batches (creates the database and trees if needed).
    Load(LoadArgs),
    /// Open the database read-write and close it: recovery after a crash
    /// (replaying the log), so that the read-only commands can open it.
    Recover(DirArgs),
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
    #[arg(long, default_value_t = 64, allow_negative_numbers = true, value_parser = crate::ui::int_in::<u32>(1, 1_048_576))]
    pub pool_mib: u32,
    /// If another process has the database open, wait until it closes it
    /// instead of failing at once.
    #[arg(long)]
    pub wait: bool,
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
    /// Print keys and values in plain hex (`-` when empty).
    #[arg(long)]
    hex: bool,
}

/// `get` and `del`.
#[derive(clap::Args, Debug)]
pub struct KeyArgs {
    #[command(flatten)]
    db: DirArgs,
    /// The tree.
    tree: String,
    /// The key: text, or hex after `0x` (see `barracuda --help`).
    key: String,
    /// The key (and a printed value) in hex, without `0x`.
    #[arg(long)]
    hex: bool,
}

/// `put`.
#[derive(clap::Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    db: DirArgs,
    /// The tree.
    tree: String,
    /// The key: text, or hex after `0x` (see `barracuda --help`).
    key: String,
    /// The value: text, or hex after `0x`.
    value: String,
    /// The key and value in hex, without `0x`.
    #[arg(long)]
    hex: bool,
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
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = crate::ui::int_in::<u32>(1, 1_000_000))]
    batch: u32,
    /// Keys and values of the lines are plain hex (`-` when empty).
    #[arg(long)]
    hex: bool,
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
        Command::Recover(args) => recover(&args),
        Command::Compact(args) => compact(&args),
    }
}

/// How a command opens the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Reads only: writes no file (`Options::read_only`).
    ReadOnly,
    /// Reads and writes an existing database.
    Write,
    /// Reads and writes, creating the database if needed.
    Create,
}

/// How often `--wait` tries the lock again.
const LOCK_RETRY_INTERVAL: Duration = Duration::from_millis(20);

/// Opens the database in `args.dir`, which must exist unless `Create`.
fn open(args: &DirArgs, mode: Mode) -> anyhow::Result<Db> {
    let dir = &args.dir;
    if mode != Mode::Create && !dir.join(LOG_FILE_NAME).is_file() {
        bail!(
            "{} is not a barracuda database (it has no {LOG_FILE_NAME})",
            dir.display()
        );
    }
    let options = || {
        Db::options()
            .buffer_pool_bytes((args.pool_mib as usize) << 20)
            .read_only(mode == Mode::ReadOnly)
    };
    let mut waiting = false;
    loop {
        let db = match options().open(dir) {
            Err(barracuda::Error::DirectIoUnsupported { .. }) => {
                options().flush_method(FlushMethod::Fsync).open(dir)
            }
            other => other,
        };
        match db {
            Err(barracuda::Error::Locked { .. }) if args.wait => {
                if !waiting {
                    eprintln!("waiting for another process to close {}", dir.display());
                    waiting = true;
                }
                std::thread::sleep(LOCK_RETRY_INTERVAL);
            }
            Err(error @ barracuda::Error::Locked { .. }) => {
                return Err(error).with_context(|| {
                    format!(
                        "opening {} (--wait waits for the other process)",
                        dir.display()
                    )
                });
            }
            Err(error @ barracuda::Error::ReadOnly { .. }) => {
                return Err(error).with_context(|| {
                    format!(
                        "opening {} read-only (`barracuda recover {}` recovers it)",
                        dir.display(),
                        dir.display()
                    )
                });
            }
            other => return other.with_context(|| format!("opening {}", dir.display())),
        }
    }
}

/// `recover`: opens read-write (which recovers) and closes cleanly.
fn recover(args: &DirArgs) -> anyhow::Result<()> {
    let db = open(args, Mode::Write)?;
    let stats = db.recovery_stats();
    db.close()?;
    println!(
        "recovered: {} pages replayed, {} torn pages restored; closed cleanly",
        stats.pages_replayed, stats.pages_restored
    );
    Ok(())
}

/// Parses a key or value word: hex after `0x` or with `hex` (where `-` is
/// empty too), otherwise the text's UTF-8 bytes.
fn parse_bytes(word: &str, hex: bool) -> anyhow::Result<Vec<u8>> {
    match word.strip_prefix("0x") {
        Some(digits) => parse_hex(digits),
        None if hex && word == "-" => Ok(Vec::new()),
        None if hex => parse_hex(word),
        None => Ok(word.as_bytes().to_vec()),
    }
}

/// Whether `bytes` print as themselves: UTF-8 without control characters,
/// not starting with `0x` (which would read back as hex).
fn is_plain_text(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes)
        .is_ok_and(|text| !text.starts_with("0x") && !text.chars().any(char::is_control))
}

/// A value as `get` prints it: the text itself when [`is_plain_text`],
/// otherwise `0x` and hex; plain hex with `hex` (`-` when empty).
fn show(bytes: &[u8], hex_only: bool) -> String {
    if hex_only {
        hex(bytes)
    } else if is_plain_text(bytes) {
        String::from_utf8_lossy(bytes).into_owned()
    } else {
        format!("0x{}", hex_digits(bytes))
    }
}

/// A key or value as one word of a `dump` line: like [`show`], and hex too
/// when empty or holding white space, so that `load` reads it back.
fn word(bytes: &[u8], hex_only: bool) -> String {
    let spaced = bytes.iter().any(u8::is_ascii_whitespace)
        || std::str::from_utf8(bytes).is_ok_and(|t| t.chars().any(char::is_whitespace));
    if hex_only || !bytes.is_empty() && !spaced && is_plain_text(bytes) {
        show(bytes, hex_only)
    } else {
        format!("0x{}", hex_digits(bytes))
    }
}

/// Parses hex digits.
fn parse_hex(text: &str) -> anyhow::Result<Vec<u8>> {
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
    hex_digits(bytes)
}

/// Hex digits of `bytes` (nothing when empty).
fn hex_digits(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A key and value that the tree will take, or why not.
fn parse_entry(
    key: &str,
    value: Option<&str>,
    hex: bool,
) -> anyhow::Result<(Vec<u8>, Option<Vec<u8>>)> {
    let key = parse_bytes(key, hex).context("key")?;
    if key.len() > KEY_BYTES_MAX {
        bail!("key of {} bytes exceeds {KEY_BYTES_MAX}", key.len());
    }
    let value = value
        .map(|value| parse_bytes(value, hex))
        .transpose()
        .context("value")?;
    if let Some(value) = &value
        && value.len() > VALUE_BYTES_MAX
    {
        bail!("value of {} bytes exceeds {VALUE_BYTES_MAX}", value.len());
    }
    Ok((key, value))
}

fn get(args: &KeyArgs) -> anyhow::Result<()> {
    let (key, _) = parse_entry(&args.key, None, args.hex)?;
    let db = open(&args.db, Mode::ReadOnly)?;
    let value = db.open_tree(&args.tree)?.get(&key)?;
    db.close()?;
    match value {
        Some(value) => {
            println!("{}", show(&value, args.hex));
            Ok(())
        }
        None => bail!("not found: key {} in tree {:?}", args.key, args.tree),
    }
}

fn put(args: &PutArgs) -> anyhow::Result<()> {
    let (key, value) = parse_entry(&args.key, Some(&args.value), args.hex)?;
    let db = open(&args.db, Mode::Create)?;
    let existed =
        db.tree(&args.tree)?
            .put_with(&key, &value.unwrap_or_default(), Durability::Sync)?;
    db.close()?;
    println!("{}", if existed { "replaced" } else { "inserted" });
    Ok(())
}

fn del(args: &KeyArgs) -> anyhow::Result<()> {
    let (key, _) = parse_entry(&args.key, None, args.hex)?;
    let db = open(&args.db, Mode::Write)?;
    let existed = db
        .open_tree(&args.tree)?
        .delete_with(&key, Durability::Sync)?;
    db.close()?;
    println!("{}", if existed { "deleted" } else { "absent" });
    Ok(())
}

fn dump(args: &DumpArgs) -> anyhow::Result<()> {
    let db = open(&args.db, Mode::ReadOnly)?;
    let names = match &args.tree {
        Some(name) => vec![db.open_tree(name)?.name().to_owned()],
        None => sorted(db.tree_names()),
    };
    let written = write_entries(&db, &names, args.hex);
    db.close()?;
    match written {
        // The reader went away (`dump | head`): not an error.
        Err(e) if is_broken_pipe(&e) => Ok(()),
        other => other,
    }
}

/// Prints the entries of the trees `names` as `dump` lines.
fn write_entries(db: &Db, names: &[String], hex: bool) -> anyhow::Result<()> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    for name in names {
        for entry in db.open_tree(name)?.iter() {
            let (key, value) = entry.with_context(|| format!("reading tree {name:?}"))?;
            writeln!(out, "{name} {} {}", word(&key, hex), word(&value, hex))?;
        }
    }
    out.flush()?;
    Ok(())
}

/// `compact`: every tree (or `--tree`), with a spinner counting entries.
fn compact(args: &DumpArgs) -> anyhow::Result<()> {
    let db = open(&args.db, Mode::Write)?;
    let names = match &args.tree {
        Some(name) => vec![db.open_tree(name)?.name().to_owned()],
        None => sorted(db.tree_names()),
    };
    for name in &names {
        let bar = ProgressBar::new_spinner().with_style(
            crate::ui::progress_style("{spinner} {msg} {human_pos} entries {rate}")
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
    let db = open(args, Mode::ReadOnly)?;
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

/// Parses one `load` line: `put TREE KEY VALUE` or `del TREE KEY`.
fn parse_op(line: &str, hex: bool) -> anyhow::Result<LoadOp> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (tree, key, value) = match words.as_slice() {
        ["put", tree, key, value] => (tree, key, Some(*value)),
        ["del", tree, key] => (tree, key, None),
        _ => bail!("expected `put TREE KEY VALUE` or `del TREE KEY`"),
    };
    let (key, value) = parse_entry(key, value, hex)?;
    Ok(LoadOp {
        tree: (*tree).to_owned(),
        key,
        value,
    })
}

fn load(args: &LoadArgs) -> anyhow::Result<()> {
    let input: Box<dyn BufRead> = if args.ops == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(&args.ops)
            .with_context(|| format!("opening {}", args.ops.display()))?;
        Box::new(std::io::BufReader::new(file))
    };
    let db = open(&args.db, Mode::Create)?;
    let result = if args.chunked {
        load_chunked(&db, input, args.hex)
    } else {
        load_lines(&db, input, args.batch as usize, args.hex)
    };
    let closed = db.close();
    result?;
    closed?;
    Ok(())
}

/// Applies the lines of `input` in batches of `batch_lines` operations.
fn load_lines(
    db: &Db,
    input: Box<dyn BufRead>,
    batch_lines: usize,
    hex: bool,
) -> anyhow::Result<()> {
    let mut trees = HashMap::new();
    let mut pending = Vec::new();
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
        let op = parse_op(text, hex).with_context(|| {
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
fn load_chunked(db: &Db, input: Box<dyn BufRead>, hex: bool) -> anyhow::Result<()> {
    let mut trees: HashMap<String, Tree> = HashMap::new();
    let mut writer = db.chunked_writer_with(Durability::Sync);
    let mut applied_count = 0usize;
    let mut stopped = None;
    let bar = ProgressBar::new_spinner().with_style(
        crate::ui::progress_style("{spinner} loading: {human_pos} lines {rate}")
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
                let op =
                    parse_op(text, hex).with_context(|| format!("line {line_number}: {text:?}"))?;
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
    log: WalStats,
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
    let db = open(&args.db, Mode::ReadOnly)?;
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
            assert_eq!(parse_bytes(&hex(bytes), true).expect("valid hex"), bytes);
        }
        assert_eq!(parse_hex("0aFf").expect("valid hex"), vec![0x0a, 0xff]);
        assert!(parse_hex("abc").is_err());
        assert!(parse_hex("zz").is_err());
    }

    /// Every printed form reads back as the same bytes: text, text that
    /// looks like hex, `0x`-text, spaces, control bytes, invalid UTF-8,
    /// empty, non-ASCII.
    #[test]
    fn printed_keys_and_values_read_back() {
        let cases: [&[u8]; 10] = [
            b"carol",
            b"{\"age\":22}",
            b"cafe",
            b"0xcafe",
            b"two words",
            b"tab\there",
            b"\xff\xfe",
            b"",
            "caf\u{e9} \u{65e5}\u{672c}".as_bytes(),
            "\u{65e5}\u{672c}".as_bytes(),
        ];
        for bytes in cases {
            for hex_only in [false, true] {
                let printed = word(bytes, hex_only);
                assert!(!printed.is_empty() && !printed.contains(char::is_whitespace));
                assert_eq!(parse_bytes(&printed, hex_only).expect("reads"), bytes);
                let shown = show(bytes, hex_only);
                if !bytes.is_empty() || hex_only {
                    assert_eq!(parse_bytes(&shown, hex_only).expect("reads"), bytes);
                }
            }
        }
        assert_eq!(show(b"carol", false), "carol");
        assert_eq!(
            show("\u{65e5}\u{672c}".as_bytes(), false),
            "\u{65e5}\u{672c}"
        );
        assert_eq!(show(b"cafe", false), "cafe");
        assert_eq!(show(b"\xff", false), "0xff");
        assert_eq!(parse_bytes("cafe", false).expect("text"), b"cafe");
        assert_eq!(parse_bytes("0xcafe", false).expect("hex"), [0xca, 0xfe]);
        assert_eq!(parse_bytes("cafe", true).expect("hex"), [0xca, 0xfe]);
    }

    #[test]
    fn load_lines_parse() {
        let op = parse_op("put t 0x6b 0x76", false).expect("valid line");
        assert_eq!((op.tree.as_str(), &op.key[..]), ("t", &b"k"[..]));
        assert_eq!(op.value.as_deref(), Some(&b"v"[..]));
        let op = parse_op("put t k v", false).expect("valid line");
        assert_eq!(
            (&op.key[..], op.value.as_deref()),
            (&b"k"[..], Some(&b"v"[..]))
        );
        let op = parse_op("put t 6b 76", true).expect("valid line");
        assert_eq!(
            (&op.key[..], op.value.as_deref()),
            (&b"k"[..], Some(&b"v"[..]))
        );
        assert!(parse_op("del t k", false).expect("valid").value.is_none());
        assert!(parse_op("put t k", false).is_err());
        assert!(parse_op("del t k v", false).is_err());
        assert!(parse_op("upsert t k v", false).is_err());
    }
}
