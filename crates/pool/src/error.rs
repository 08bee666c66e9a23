//! The pool's one error type.

use barracuda_base::PageId;

/// Everything that can go wrong in the buffer pool. Conditions of the world
/// (I/O errors, corrupt blocks, a pool too small for its pinned pages) are
/// returned; bugs in the pool itself panic.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The configuration is inconsistent (sizes, policy parameters).
    #[error("invalid buffer pool configuration: {reason}")]
    InvalidConfig {
        /// What is wrong, naming the option.
        reason: String,
    },
    /// Every frame and block is pinned or dirty and not yet flushable, so no
    /// memory can be freed for `page_id`.
    #[error("buffer pool exhausted while fixing {page_id}: {reason}")]
    Exhausted {
        /// The page that needed memory.
        page_id: PageId,
        /// Why nothing could be evicted.
        reason: &'static str,
    },
    /// Reading, writing or syncing the data file failed.
    #[error("I/O error on {page_id} during {operation}: {message}")]
    Io {
        /// The page being read or written.
        page_id: PageId,
        /// `read`, `write` or `sync`.
        operation: &'static str,
        /// The underlying error, rendered.
        message: String,
    },
    /// A block read from the file failed verification (checksum, page id,
    /// or format).
    #[error("corrupted block for {page_id}: {reason}")]
    Corrupted {
        /// The page whose block is corrupt.
        page_id: PageId,
        /// What the codec found.
        reason: String,
    },
    /// The codec rejected a block or page.
    #[error("codec error on {page_id}: {source}")]
    Codec {
        /// The page being compressed, decompressed or checked.
        page_id: PageId,
        /// What the codec reported.
        #[source]
        source: barracuda_codec::CodecError,
    },
    /// The file layer failed.
    #[error("file error during {operation} at offset {offset_bytes}: {source}")]
    File {
        /// `read` or `write` or `sync`.
        operation: &'static str,
        /// Where in the file.
        offset_bytes: u64,
        /// What the file layer reported.
        #[source]
        source: barracuda_io::IoError,
    },
    /// A page that an earlier caller was reading failed to load; the waiter
    /// gets this error and may retry.
    #[error("reading {page_id} failed in another thread")]
    ReadFailed {
        /// The page whose read failed.
        page_id: PageId,
    },
    /// `create` was called for a page that is already cached.
    #[error("{page_id} already exists in the buffer pool")]
    AlreadyExists {
        /// The page being created.
        page_id: PageId,
    },
    /// A patch falls outside the page, or on its reserved header.
    #[error(
        "patch at offset {offset} of {len} bytes is outside {page_id} ({page_size_bytes} bytes)"
    )]
    PatchOutOfBounds {
        /// The page being modified.
        page_id: PageId,
        /// First byte of the patch.
        offset: usize,
        /// Length of the patch.
        len: usize,
        /// The page size.
        page_size_bytes: usize,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = PoolError> = std::result::Result<T, E>;
