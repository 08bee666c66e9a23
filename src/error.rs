//! Errors of the embedded store.
//!
//! [`Error`] names the store's own conditions. The internal crates' errors
//! are classified into them here, in one place, and their text kept as the
//! message: a change inside an internal crate changes no variant a user
//! matches on.

use std::path::PathBuf;

use barracuda_base::{BaseError, Lsn};
use barracuda_codec::CodecError;
use barracuda_io::IoError;
use barracuda_pool::PoolError;

/// Everything that can go wrong in Barracuda, with the context to act on it.
///
/// Conditions of the world (I/O errors, damaged files, full disks, bad
/// input) are errors; bugs in Barracuda itself panic.
///
/// `Debug` prints the same text as `Display`: a `main` that returns
/// `Result<(), barracuda::Error>` prints its error with `Debug`, and the
/// reader needs the message and its hint (for example, on tmpfs, to use
/// `FlushMethod::Fsync`), not the variant's fields.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A read, write, sync or open of a file failed (the message names the
    /// file, offset and operation; `source` is the operating system's
    /// error, e.g. `ENOSPC` for a full disk).
    #[error("{message}")]
    Io {
        /// What failed, where.
        message: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file system of `path` does not support `O_DIRECT` (tmpfs, for
    /// one): open with `FlushMethod::Fsync`.
    #[error("{message}")]
    DirectIoUnsupported {
        /// The file.
        path: PathBuf,
        /// The message, with its hint.
        message: String,
    },
    /// The database directory is open in another process, or already in
    /// this one.
    #[error("{message}")]
    Locked {
        /// The database directory.
        path: PathBuf,
        /// Who holds it.
        message: String,
    },
    /// A block, page or file is damaged: a checksum that does not match, an
    /// impossible length, a page that breaks the tree's invariants (the
    /// message names the page). Nothing damaged is ever returned as data.
    #[error("{message}")]
    Corrupted {
        /// What is damaged, where.
        message: String,
    },
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
    /// The buffer pool had no page to evict within its wait: every frame is
    /// pinned or dirty and unlogged. Raise `buffer_pool_bytes`, or hold
    /// fewer iterators open at once.
    #[error("{message}")]
    CacheExhausted {
        /// The pool's report.
        message: String,
    },
    /// An internal operation failed in a way no input should cause; the
    /// message says which. Nothing was changed by the failed operation.
    #[error("internal error: {message}")]
    Internal {
        /// What failed.
        message: String,
    },
    /// No tree has this name.
    #[error("no tree named {name:?}")]
    TreeNotFound {
        /// The name asked for.
        name: String,
    },
    /// A tree with this name exists already, with other options.
    #[error("tree {name:?} exists with other options: {reason}")]
    TreeOptionsMismatch {
        /// The tree.
        name: String,
        /// What differs.
        reason: String,
    },
    /// [`crate::Db::compact_with_progress`]'s callback returned `false`:
    /// the new file was deleted and the tree is as it was.
    #[error(
        "compaction of tree {name:?} cancelled by its progress callback; the tree is unchanged"
    )]
    CompactionCancelled {
        /// The tree.
        name: String,
    },
    /// A batch could need more log (or pool) than one atomic write may
    /// take; split it. (A single put or delete too large is
    /// [`Error::WriteTooLarge`].)
    #[error(
        "an atomic write of up to {estimated_bytes} log bytes exceeds the limit of {limit_bytes}; split the batch"
    )]
    BatchTooLarge {
        /// The worst-case log bytes of the write.
        estimated_bytes: usize,
        /// The most one atomic group may hold.
        limit_bytes: usize,
    },
    /// One put or delete could need more of the log or of its tree's buffer
    /// pool than one write may take: its value's overflow pages, and those
    /// of the value it replaces or removes, all change in one atomic write,
    /// which stays in the pool until it is logged. Nothing was changed;
    /// raise the option named, or store a smaller value.
    #[error(
        "a write of a {value_bytes}-byte value (replacing {old_value_bytes} bytes) could need {needed_bytes} bytes of {resource}, more than the {limit_bytes} one write may take; raise {option} or store a smaller value"
    )]
    WriteTooLarge {
        /// The value written (0 for a delete).
        value_bytes: usize,
        /// The value it replaces or removes (0 if none).
        old_value_bytes: usize,
        /// The write's worst case.
        needed_bytes: usize,
        /// What one write may take.
        limit_bytes: usize,
        /// "log" or "buffer pool".
        resource: &'static str,
        /// The option that sets the limit.
        option: &'static str,
    },
    /// An earlier write could not be logged; the database accepts no more
    /// writes (reopen it to recover to the last logged state).
    #[error("the database failed earlier and accepts no more writes: {reason}")]
    Failed {
        /// The first failure.
        reason: String,
    },
    /// The database was closed.
    #[error("the database is closed")]
    Closed,
    /// The write-ahead log holds a damaged record that recovery cannot skip.
    #[error("write-ahead log corrupted at {lsn}: {reason}")]
    LogCorrupted {
        /// Where the damage starts.
        lsn: Lsn,
        /// What is wrong.
        reason: &'static str,
    },
    /// A checkpoint slot of the log is damaged and no other one is valid.
    #[error("checkpoint slot {slot} of the write-ahead log is corrupted: {reason}")]
    CheckpointCorrupted {
        /// Slot 0 or 1.
        slot: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// The log budget has no room until a checkpoint advances.
    #[error(
        "the write-ahead log is full: {needed_bytes} bytes needed, {free_bytes} free until the next checkpoint"
    )]
    LogFull {
        /// Bytes the append needed.
        needed_bytes: u64,
        /// Bytes free in the log budget.
        free_bytes: u64,
    },
    /// A write or sync of the log failed earlier; the log accepts nothing
    /// more, because what it acknowledged next could not be trusted.
    #[error("the write-ahead log failed and accepts no more writes: {reason}")]
    LogFailed {
        /// The first failure.
        reason: String,
    },
    /// One atomic operation changed more than the log can hold in a group.
    #[error(
        "an atomic operation of {group_bytes} log bytes exceeds the limit of {group_bytes_max}"
    )]
    GroupTooLarge {
        /// Bytes of the group.
        group_bytes: usize,
        /// The limit.
        group_bytes_max: usize,
    },
    /// An option is out of range or contradicts the files on disk.
    #[error("invalid options: {reason}")]
    InvalidOptions {
        /// What is wrong, with the value.
        reason: String,
    },
    /// The database was opened read-only ([`crate::Options::read_only`]):
    /// a write was refused, or the open was, because the database needs
    /// recovery, which writes.
    #[error("database {path} is open read-only: {reason}")]
    ReadOnly {
        /// The database directory.
        path: PathBuf,
        /// What was refused.
        reason: String,
    },
    /// The database directory is in use or not usable.
    #[error("database directory {path}: {reason}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// `Result` with Barracuda's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O failure the operating system did not report itself (a read
    /// that failed in another thread, stopped I/O threads): its `source`
    /// carries the same message.
    fn io_without_os_error(message: String) -> Error {
        Error::Io {
            source: std::io::Error::other(message.clone()),
            message,
        }
    }
}

#[doc(hidden)]
impl From<IoError> for Error {
    fn from(error: IoError) -> Error {
        let message = error.to_string();
        match error {
            IoError::Os { source, .. }
            | IoError::FsyncFailed { source, .. }
            | IoError::Lock { source, .. }
            | IoError::RingSetup { source, .. } => Error::Io { message, source },
            IoError::DirectIoUnsupported { path, .. } => {
                Error::DirectIoUnsupported { path, message }
            }
            IoError::DirLocked { dir } | IoError::DirOpenInProcess { dir } => {
                Error::Locked { path: dir, message }
            }
            IoError::ReadOnly { path, .. } => Error::ReadOnly {
                path,
                reason: message,
            },
            IoError::InvalidOptions { reason } => Error::InvalidOptions { reason },
            // A file shorter than what refers to it was cut or damaged.
            IoError::ReadPastEnd { .. } => Error::Corrupted { message },
            IoError::Shutdown { .. } => Error::io_without_os_error(message),
            _ => Error::Internal { message },
        }
    }
}

#[doc(hidden)]
impl From<BaseError> for Error {
    fn from(error: BaseError) -> Error {
        // Every base error is a value that fails validation, such as a page
        // size and block size from the options that no geometry supports.
        Error::InvalidOptions {
            reason: error.to_string(),
        }
    }
}

#[doc(hidden)]
impl From<CodecError> for Error {
    fn from(error: CodecError) -> Error {
        let message = error.to_string();
        match error {
            CodecError::InvalidLevel { .. }
            | CodecError::InvalidGeometry { .. }
            | CodecError::InvalidConfig { .. } => Error::InvalidOptions { reason: message },
            CodecError::CompressFailed { .. } => Error::Internal { message },
            // Every other codec error is a block that fails to decode or
            // verify.
            _ => Error::Corrupted { message },
        }
    }
}

#[doc(hidden)]
impl From<PoolError> for Error {
    fn from(error: PoolError) -> Error {
        let message = error.to_string();
        match error {
            PoolError::InvalidConfig { reason } => Error::InvalidOptions { reason },
            PoolError::Exhausted { .. } => Error::CacheExhausted { message },
            PoolError::File { source, .. } => Error::from(source),
            PoolError::Codec { source, .. } => Error::from(source),
            PoolError::Corrupted { .. } => Error::Corrupted { message },
            PoolError::Io { .. } | PoolError::ReadFailed { .. } => {
                Error::io_without_os_error(message)
            }
            _ => Error::Internal { message },
        }
    }
}

#[doc(hidden)]
impl From<barracuda_btree::Error> for Error {
    fn from(error: barracuda_btree::Error) -> Error {
        use barracuda_btree::Error as TreeError;
        let message = error.to_string();
        match error {
            TreeError::KeyTooLong {
                len_bytes,
                max_bytes,
            } => Error::KeyTooLong {
                len_bytes,
                max_bytes,
            },
            TreeError::ValueTooLong {
                len_bytes,
                max_bytes,
            } => Error::ValueTooLong {
                len_bytes,
                max_bytes,
            },
            TreeError::Store { source } => match source.downcast::<PoolError>() {
                Ok(error) => Error::from(*error),
                Err(source) => Error::Internal {
                    message: source.to_string(),
                },
            },
            TreeError::BadPageSize { .. } => Error::InvalidOptions { reason: message },
            TreeError::PageOutOfRange { .. }
            | TreeError::Corrupted { .. }
            | TreeError::Invariant { .. }
            | TreeError::Codec { .. } => Error::Corrupted { message },
            _ => Error::Internal { message },
        }
    }
}

#[cfg(test)]
mod tests {
    use barracuda_base::{BlockSize, Geometry};

    use super::*;

    #[test]
    fn an_invalid_geometry_is_an_options_error_with_the_base_message() {
        let expected = "invalid geometry: page 1000 bytes, block 1024 bytes: \
                        the page size must be a power of two";
        let base = Geometry::new(1000, BlockSize::Kib1).unwrap_err();
        // Directly, and passed on by the codec: the same class and text.
        for error in [
            Error::from(base.clone()),
            Error::from(CodecError::from(base)),
        ] {
            assert!(
                matches!(&error, Error::InvalidOptions { reason } if reason == expected),
                "{error}"
            );
        }
    }
}
