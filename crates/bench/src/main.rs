//! The `barracuda-bench` command: Barracuda's reference benchmarks.
//!
//! Benchmark workloads: each module owns one `barracuda-bench <name>`
//! command and prints a table (and JSON with `--json`).

mod cleanup;
mod codec;
mod fill;
mod fill_family;
mod flush;
mod harness;
mod hotset;
mod io;
mod iothreads;
mod plot;
mod sweep;

use clap::{Parser, Subcommand};

/// Barracuda's reference benchmarks: each prints a table, a legend and a
/// verdict (and JSON with --json, a plot with --plot where it has one).
#[derive(Parser, Debug)]
#[command(name = "barracuda-bench", version, about)]
struct Cli {
    /// Print an error's backtrace too (as does BARRACUDA_BACKTRACE=1).
    #[arg(short = 'v', global = true)]
    backtrace: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Compress and decompress pages with every codec.
    Codec(codec::Args),
    /// Random O_DIRECT reads and writes through the file layer.
    Io(io::Args),
    /// Leaf fill factor of each split policy under an insert pattern.
    Fill(fill::Args),
    /// The compression study: queries/s against the key range, per
    /// configuration, zones A/B/C.
    Sweep(sweep::Args),
    /// Pages against rows: hot keys served at acceptable speed per page
    /// size and compression.
    Hotset(hotset::Args),
    /// Range scans with 1 to 8 read I/O threads.
    Iothreads(iothreads::Args),
    /// Buffered (Fsync) against O_DIRECT over pool and data sizes.
    Flush(flush::Args),
}

/// The environment variable that asks for backtraces of errors.
const BACKTRACE_VARIABLE: &str = "BARRACUDA_BACKTRACE";

fn main() {
    let cli = Cli::parse();
    let backtrace_wanted =
        cli.backtrace || std::env::var_os(BACKTRACE_VARIABLE).is_some_and(|v| v != "0");
    // Errors capture a backtrace only when asked here, whatever
    // RUST_BACKTRACE says (many shells set it): anyhow reads this variable
    // first.
    let capture = if backtrace_wanted { "1" } else { "0" };
    // SAFETY: no other thread exists yet (clap starts none), so nothing
    // reads the environment while it changes.
    unsafe { std::env::set_var("RUST_LIB_BACKTRACE", capture) };
    // Before any other thread exists too: every thread started later
    // inherits the blocked signals, which the cleanup thread then takes.
    cleanup::install();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Codec(args) => codec::run(&args),
        Command::Io(args) => io::run(&args),
        Command::Fill(args) => fill::run(&args),
        Command::Sweep(args) => sweep::run(&args),
        Command::Hotset(args) => hotset::run(&args),
        Command::Iothreads(args) => iothreads::run(&args),
        Command::Flush(args) => flush::run(&args),
    };
    if let Err(error) = result {
        // An error from data a signal's cleanup removed is not reported.
        cleanup::exit_if_signalled();
        eprint!("{}", error_text(&error));
        if backtrace_wanted {
            eprintln!("backtrace:\n{}", error.backtrace());
        }
        cleanup::exit(1);
    }
    cleanup::exit_if_signalled();
}

/// `error: ...` and one `caused by: ...` line per cause that adds
/// something: a cause whose text the line before already holds (a
/// transparent wrapper, a source its parent prints) is left out.
fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    let mut last = String::new();
    for (index, cause) in error.chain().enumerate() {
        let message = cause.to_string();
        if index > 0 && last.contains(&message) {
            continue;
        }
        let label = if index == 0 { "error" } else { "  caused by" };
        text.push_str(&format!("{label}: {message}\n"));
        last = message;
    }
    text
}
