//! A node of the replicated key-value service, or its benchmark.
//!
//! ```text
//! barracuda-raft node --id 1 --addr 127.0.0.1:21001 --dir n1
//! barracuda-raft bench
//! ```

use std::path::PathBuf;

use barracuda_raft::service::{self, NodeConfig};
use barracuda_raft::{NodeId, StoreOptions};
use clap::{Parser, Subcommand};

mod bench;

#[derive(Parser)]
#[command(about = "A replicated key-value service on Barracuda and openraft")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs one node: its database in --dir, HTTP on --addr.
    Node {
        /// The node's id in the cluster.
        #[arg(long)]
        id: NodeId,
        /// The address to listen on, which is also the node's address in
        /// the cluster (127.0.0.1:port).
        #[arg(long)]
        addr: String,
        /// The database directory (created if missing).
        #[arg(long)]
        dir: PathBuf,
        /// Build a snapshot after this many log entries since the last.
        #[arg(long, default_value_t = 10_000)]
        snapshot_logs: u64,
        /// Log entries kept below a snapshot when the log is purged.
        #[arg(long, default_value_t = 1_000)]
        keep_logs: u64,
        /// For crash tests: stop before the switch of a snapshot install,
        /// create this file and wait to be killed.
        #[arg(long, hide = true)]
        pause_install: Option<PathBuf>,
    },
    /// Measures replicated writes and reads on clusters of 1 and 3 nodes
    /// (processes of this binary on loopback ports, in temporary
    /// directories) beside one database written directly.
    Bench(bench::Args),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Node {
            id,
            addr,
            dir,
            snapshot_logs,
            keep_logs,
            pause_install,
        } => runtime.block_on(service::run(NodeConfig {
            id,
            addr,
            dir,
            snapshot_logs,
            keep_logs,
            store: StoreOptions {
                pause_install,
                ..StoreOptions::default()
            },
        })),
        Command::Bench(args) => runtime.block_on(bench::run(args)),
    }
}
