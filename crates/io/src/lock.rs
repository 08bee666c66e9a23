//! The data directory's lock: exclusive for a writer, shared for readers.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::error::IoError;

/// Name of the lock file inside the data directory.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// The lock files this process holds a lock on, by device and inode, with
/// how many locks each: flock cannot tell a conflict with this process from
/// one with another, and the two call for different advice.
static HELD: Mutex<Option<HashMap<(u64, u64), usize>>> = Mutex::new(None);

/// A `flock` on `<dir>/LOCK`, held until dropped: exclusive
/// ([`DirLock::acquire`]) or shared ([`DirLock::acquire_shared`]).
///
/// flock locks belong to the open file description, so a second
/// `DirLock::acquire` of the same directory fails even inside one process
/// (with [`IoError::DirOpenInProcess`] there, [`IoError::DirLocked`] when
/// another process holds it), and the kernel releases the lock when the
/// process dies (no stale locks after a crash).
#[derive(Debug)]
pub struct DirLock {
    dir: PathBuf,
    /// The lock file's device and inode, its key in [`HELD`].
    key: (u64, u64),
    _file: File,
}

impl DirLock {
    /// Locks `dir` (which must exist) exclusively, creating its `LOCK`
    /// file if needed. Fails at once with [`IoError::DirLocked`] or
    /// [`IoError::DirOpenInProcess`] if someone holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock, IoError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE_NAME))
            .map_err(|source| lock_error(dir, source))?;
        DirLock::lock(dir, file, libc::LOCK_EX)
    }

    /// Locks `dir` shared, for a reader that writes nothing: other shared
    /// locks may be held at once, an exclusive one not. The `LOCK` file is
    /// opened read-only and never created: `Ok(None)` if it does not exist
    /// (no writer has opened the directory, or it was removed).
    pub fn acquire_shared(dir: &Path) -> Result<Option<DirLock>, IoError> {
        let file = match File::open(dir.join(LOCK_FILE_NAME)) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(lock_error(dir, source)),
        };
        DirLock::lock(dir, file, libc::LOCK_SH).map(Some)
    }

    fn lock(dir: &Path, file: File, operation: libc::c_int) -> Result<DirLock, IoError> {
        let metadata = file.metadata().map_err(|source| lock_error(dir, source))?;
        let key = (metadata.dev(), metadata.ino());
        // SAFETY: flock on a valid descriptor owned by `file`; no memory involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) };
        if rc != 0 {
            let source = std::io::Error::last_os_error();
            if source.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let dir = dir.to_path_buf();
                let held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
                return Err(match held.as_ref().and_then(|h| h.get(&key)) {
                    Some(_) => IoError::DirOpenInProcess { dir },
                    None => IoError::DirLocked { dir },
                });
            }
            return Err(lock_error(dir, source));
        }
        *HELD
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(HashMap::new)
            .entry(key)
            .or_insert(0) += 1;
        Ok(DirLock {
            dir: dir.to_path_buf(),
            key,
            _file: file,
        })
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = held.as_mut()
            && let Some(count) = held.get_mut(&self.key)
        {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

fn lock_error(dir: &Path, source: std::io::Error) -> IoError {
    IoError::Lock {
        dir: dir.to_path_buf(),
        source,
    }
}
