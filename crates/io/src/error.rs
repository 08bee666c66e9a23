//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// The operation that failed, named in every error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpKind {
    /// Opening or creating the file.
    Open,
    /// A positional read.
    Read,
    /// A positional write.
    Write,
    /// `sync_data` (fdatasync).
    Sync,
    /// Querying the length.
    Len,
    /// Changing the length.
    SetLen,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            OpKind::Open => "open",
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Sync => "sync_data",
            OpKind::Len => "len",
            OpKind::SetLen => "set_len",
        };
        f.write_str(name)
    }
}

/// Every error of the file layer. Each variant names the file and, where
/// there is one, the offset and length of the request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// The operating system (or the fault injector, which fakes the same
    /// errno values) failed a request.
    #[error("{op} of {len_bytes} bytes at offset {offset_bytes} in {}: {source}", path.display())]
    Os {
        /// The operation.
        op: OpKind,
        /// The file.
        path: PathBuf,
        /// Where the request started (0 for whole-file operations).
        offset_bytes: u64,
        /// How many bytes it covered (0 for whole-file operations).
        len_bytes: usize,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The request breaks the file's alignment rules. Checked before the
    /// kernel sees it, so it never surfaces as a bare EINVAL.
    #[error(
        "misaligned {op} in {}: offset {offset_bytes}, length {len_bytes}, buffer address {buf_addr:#x}; \
         offsets and lengths must be multiples of {offset_align_bytes} and buffers aligned to {mem_align_bytes} bytes \
         (allocate buffers with BlockFile::alloc_buf or AlignedBuf)",
        path.display()
    )]
    Misaligned {
        /// The operation.
        op: OpKind,
        /// The file.
        path: PathBuf,
        /// The requested offset.
        offset_bytes: u64,
        /// The requested length.
        len_bytes: usize,
        /// The buffer's address.
        buf_addr: usize,
        /// Required multiple for offsets and lengths.
        offset_align_bytes: usize,
        /// Required alignment of the buffer address.
        mem_align_bytes: usize,
    },
    /// A read asked for bytes past the end of the file.
    #[error(
        "read of {len_bytes} bytes at offset {offset_bytes} in {} goes past its end ({file_len_bytes} bytes)",
        path.display()
    )]
    ReadPastEnd {
        /// The file.
        path: PathBuf,
        /// The requested offset.
        offset_bytes: u64,
        /// The requested length.
        len_bytes: usize,
        /// The file's length when the read ran.
        file_len_bytes: u64,
    },
    /// An fsync/fdatasync failed. This is sticky: the kernel may have
    /// dropped the dirty pages, so every later write and sync of this file
    /// returns this error too, until the file is reopened and recovered.
    #[error("sync_data of {} failed, the file refuses further writes and syncs: {source}", path.display())]
    FsyncFailed {
        /// The file.
        path: PathBuf,
        /// The error of the first failed sync (repeated to later callers).
        #[source]
        source: io::Error,
    },
    /// The filesystem does not support O_DIRECT (tmpfs, for one).
    #[error(
        "{} does not support O_DIRECT ({reason}); use FlushMethod::Fsync (buffered I/O + fdatasync) for this path",
        path.display()
    )]
    DirectIoUnsupported {
        /// The file.
        path: PathBuf,
        /// What showed it.
        reason: String,
    },
    /// Another process holds the data directory's lock.
    #[error("data directory {} is locked by another process (flock on its LOCK file)", dir.display())]
    DirLocked {
        /// The directory.
        dir: PathBuf,
    },
    /// This process holds the data directory's lock already: the directory
    /// is open (a `Db` not yet closed or dropped) elsewhere in this process.
    #[error(
        "data directory {} is already open in this process, which holds its lock (close or drop the other open first)",
        dir.display()
    )]
    DirOpenInProcess {
        /// The directory.
        dir: PathBuf,
    },
    /// A file opened read-only (`ReadOnlyFile`) was asked to change.
    #[error("{op} of {} refused: the file was opened read-only", path.display())]
    ReadOnly {
        /// What was asked.
        op: OpKind,
        /// The file.
        path: PathBuf,
    },
    /// Creating or locking the lock file failed for another reason.
    #[error("cannot lock data directory {}: {source}", dir.display())]
    Lock {
        /// The directory.
        dir: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The options are out of range.
    #[error("invalid I/O options: {reason}")]
    InvalidOptions {
        /// Which option and its allowed range.
        reason: String,
    },
    /// io_uring could not be set up and the configuration demanded it.
    #[error("cannot set up io_uring for {}: {source}", path.display())]
    RingSetup {
        /// The file.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The backend's I/O threads are gone (a bug, or the file is closing).
    #[error("the I/O threads of {} have stopped", path.display())]
    Shutdown {
        /// The file.
        path: PathBuf,
    },
}

impl IoError {
    /// The errno behind this error, if there is one (EIO, ENOSPC, ...).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            IoError::Os { source, .. }
            | IoError::FsyncFailed { source, .. }
            | IoError::Lock { source, .. }
            | IoError::RingSetup { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}
