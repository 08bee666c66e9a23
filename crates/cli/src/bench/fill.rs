//! `barracuda bench fill`: not yet implemented (see the issue that fills it).

/// Options of `barracuda bench fill`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs the workload.
pub fn run(_args: &Args) -> anyhow::Result<()> {
    anyhow::bail!("bench fill is not implemented yet")
}
