//! The `barracuda` command: reference benchmarks and admin commands.

mod admin;
mod bench;

use clap::{Parser, Subcommand};

/// Barracuda: an embeddable key-value store over compressed pages.
#[derive(Parser, Debug)]
#[command(name = "barracuda", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a benchmark workload and print a table (and JSON with --json).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Admin commands: stat, check, dump, get, put, del, load, compact.
    #[command(flatten)]
    Admin(admin::Command),
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Compress and decompress pages with every codec.
    Codec(bench::codec::Args),
    /// Random O_DIRECT reads and writes through the file layer.
    Io(bench::io::Args),
    /// Leaf fill factor of each split policy under an insert pattern.
    Fill(bench::fill::Args),
    /// The compression study: queries/s against the key range, per
    /// configuration, zones A/B/C.
    Sweep(bench::sweep::Args),
    /// Pages against rows: hot keys served at acceptable speed per page
    /// size and compression.
    Hotset(bench::hotset::Args),
    /// Range scans with 1 to 8 read I/O threads.
    Iothreads(bench::iothreads::Args),
    /// Buffered (Fsync) against O_DIRECT over pool and data sizes.
    Flush(bench::flush::Args),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(BenchCommand::Codec(args)) => bench::codec::run(&args),
        Command::Bench(BenchCommand::Io(args)) => bench::io::run(&args),
        Command::Bench(BenchCommand::Fill(args)) => bench::fill::run(&args),
        Command::Bench(BenchCommand::Sweep(args)) => bench::sweep::run(&args),
        Command::Bench(BenchCommand::Hotset(args)) => bench::hotset::run(&args),
        Command::Bench(BenchCommand::Iothreads(args)) => bench::iothreads::run(&args),
        Command::Bench(BenchCommand::Flush(args)) => bench::flush::run(&args),
        Command::Admin(command) => admin::run(command),
    }
}
