//! The benchmark.

/// The benchmark's options.
#[derive(clap::Args)]
pub struct Args {}

pub async fn run(_args: Args) -> anyhow::Result<()> {
    Ok(())
}
