//! Internals exposed for the fuzz targets (`fuzz/`), not an API: the
//! record cache, checked against a model with its `check_invariants()`.

#[doc(hidden)]
pub use crate::records::{PoolGhosts, RecordCache, WriteEpoch};
