//! `barracuda bench codec`: not yet implemented (see the issue that fills it).

/// Options of `barracuda bench codec`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs the workload.
pub fn run(_args: &Args) -> anyhow::Result<()> {
    anyhow::bail!("bench codec is not implemented yet")
}
