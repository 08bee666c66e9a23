//! Benchmark workloads: each module owns one `barracuda bench <name>` command.

pub mod codec;
pub mod fill;
mod fill_family;
pub mod flush;
pub mod harness;
pub mod hotset;
pub mod io;
pub mod iothreads;
pub mod plot;
pub mod sweep;
