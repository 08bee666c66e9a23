//! Benchmark workloads: each module owns one `barracuda bench <name>` command.

pub mod codec;
pub mod fill;
pub mod io;
