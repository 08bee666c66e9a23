//! Barracuda's compressed block format (filled by issue 2, "Foundation").
//!
//! Identifiers shared by every crate of the engine live here, because the codec
//! is the lowest layer that names pages: every block carries its page id and LSN.

mod ids;

pub use ids::{Lsn, PageId};
