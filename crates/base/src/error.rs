//! The crate's one error type.

/// Everything that can go wrong in the base crate: a value that fails
/// validation. It is about no page and carries the offending values.
#[non_exhaustive]
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum BaseError {
    /// A page size or block size the format does not support.
    #[error(
        "invalid geometry: page {page_size_bytes} bytes, block {block_size_bytes} bytes: {reason}"
    )]
    InvalidGeometry {
        /// The page size asked for.
        page_size_bytes: u64,
        /// The block size asked for (the page size for uncompressed).
        block_size_bytes: u64,
        /// Which rule it breaks.
        reason: &'static str,
    },
}

/// The crate's result type.
pub type Result<T, E = BaseError> = std::result::Result<T, E>;
