//! A node of the replicated key-value service, or its benchmark.

fn main() {}
