//! Benchmark workloads: each module owns one `barracuda bench <name>` command.

pub mod codec;
pub mod fill;
pub mod harness;
pub mod io;
pub mod plot;
pub mod sweep;
