//! `barracuda bench io`: not yet implemented (see the issue that fills it).

/// Options of `barracuda bench io`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs the workload.
pub fn run(_args: &Args) -> anyhow::Result<()> {
    anyhow::bail!("bench io is not implemented yet")
}
