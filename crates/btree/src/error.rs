//! The B+tree's error type.

use barracuda_base::PageId;

/// Everything that can go wrong in the B+tree. Bugs in the tree itself panic;
/// these are conditions of the input or of the stored bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A key longer than [`crate::KEY_BYTES_MAX`].
    #[error("key of {len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    KeyTooLong {
        /// The key's length.
        len_bytes: usize,
        /// The limit.
        max_bytes: usize,
    },
    /// A value longer than [`crate::VALUE_BYTES_MAX`].
    #[error("value of {len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    ValueTooLong {
        /// The value's length.
        len_bytes: usize,
        /// The limit.
        max_bytes: usize,
    },
    /// A page size outside 4..=64 KiB or not a power of two.
    #[error("page size {page_size_bytes} is not a power of two in 4096..=65536")]
    BadPageSize {
        /// The rejected size.
        page_size_bytes: usize,
    },
    /// A page id beyond the store's pages.
    #[error("{page_id} is out of range (the store has {page_count} pages)")]
    PageOutOfRange {
        /// The page asked for.
        page_id: PageId,
        /// Pages in the store.
        page_count: u64,
    },
    /// A page's bytes contradict the tree's structure.
    #[error("{page_id} is corrupted: {reason}")]
    Corrupted {
        /// The page.
        page_id: PageId,
        /// What is wrong.
        reason: String,
    },
    /// `check_invariants` found a violation.
    #[error("invariant violated at {page_id}: {reason}")]
    Invariant {
        /// The page where it was seen.
        page_id: PageId,
        /// Which invariant, and how.
        reason: String,
    },
    /// The codec refused a configuration.
    #[error("codec: {reason}")]
    Codec {
        /// The codec's error.
        reason: String,
    },
    /// A page could not be made to fit its compressed block even after
    /// splitting it down to a single record.
    #[error("{page_id} does not fit its compressed block even after a split")]
    CompressionUnfit {
        /// The page.
        page_id: PageId,
    },
    /// The page store failed (the buffer pool under `barracuda-mtr`'s
    /// store: I/O, a corrupt block, or no memory left for the pages the
    /// operation needs pinned); the store's error names the page. The tree
    /// knows stores only by their trait, so their errors only by this box.
    #[error("{source}")]
    Store {
        /// What the store reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
