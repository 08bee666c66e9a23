//! The `barracuda` command: admin commands over a database directory.
//!
//! The reference benchmarks are the `barracuda-bench` binary
//! (`crates/bench`).

mod admin;
mod ui;

use clap::Parser;

/// Barracuda: an embeddable key-value store over compressed pages.
#[derive(Parser, Debug)]
#[command(name = "barracuda", version, about, after_help = admin::KEYS_AND_VALUES_HELP)]
struct Cli {
    /// Print an error's backtrace too (as does BARRACUDA_BACKTRACE=1).
    #[arg(short = 'v', global = true)]
    backtrace: bool,
    /// Admin commands: stat, check, dump, get, put, del, load, recover,
    /// compact.
    #[command(subcommand)]
    command: admin::Command,
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(error) = admin::run(cli.command) {
        eprint!("{}", error_text(&error));
        if backtrace_wanted {
            eprintln!("backtrace:\n{}", error.backtrace());
        }
        std::process::exit(1);
    }
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
