//! Internals exposed for the fuzz targets (`fuzz/`) and the tests, not an
//! API: the record cache, checked against a model with its
//! `check_invariants()`, and the differential crash simulator ([`sim`]).

pub mod sim;

#[doc(hidden)]
pub use crate::records::{PoolGhosts, RecordCache, WriteEpoch};
