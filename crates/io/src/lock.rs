//! The data directory's exclusive lock.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::IoError;

/// Name of the lock file inside the data directory.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// An exclusive `flock` on `<dir>/LOCK`, held until dropped.
///
/// flock locks belong to the open file description, so a second
/// `DirLock::acquire` of the same directory fails even inside one process,
/// and the kernel releases the lock when the process dies (no stale locks
/// after a crash).
#[derive(Debug)]
pub struct DirLock {
    dir: PathBuf,
    _file: File,
}

impl DirLock {
    /// Locks `dir` (which must exist), creating its `LOCK` file if needed.
    /// Fails at once with [`IoError::DirLocked`] if someone holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock, IoError> {
        let lock_error = |source| IoError::Lock {
            dir: dir.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE_NAME))
            .map_err(lock_error)?;
        // SAFETY: flock on a valid descriptor owned by `file`; no memory involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let source = std::io::Error::last_os_error();
            if source.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(IoError::DirLocked {
                    dir: dir.to_path_buf(),
                });
            }
            return Err(lock_error(source));
        }
        Ok(DirLock {
            dir: dir.to_path_buf(),
            _file: file,
        })
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
