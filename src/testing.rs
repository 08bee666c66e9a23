//! Internals exposed for the fuzz targets (`fuzz/`), the tests and the
//! benchmarks, behind the `testing` feature; not an API: the record cache,
//! checked against a model with its `check_invariants()`, the differential
//! crash simulator ([`sim`]), and the names of the log's segment files.

pub mod sim;

pub use crate::records::{PoolGhosts, RecordCache, WriteEpoch};
pub use crate::wal::{parse_segment_file_name, segment_file_name};
