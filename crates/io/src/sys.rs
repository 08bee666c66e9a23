//! Opening files: flags per flush method, alignment discovery, O_DIRECT
//! refusal, the sticky sync state, and positional syscalls with retries.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::buf::Alignment;
use crate::error::{IoError, OpKind};
use crate::options::{FlushMethod, IoOptions};

/// `f_type` of tmpfs in `statfs` (linux/magic.h). tmpfs accepts O_DIRECT
/// opens since Linux 6.6 but still goes through the page cache, so
/// Barracuda refuses it rather than pretend.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// An open file with what every backend needs to know about it.
#[derive(Debug)]
pub(crate) struct OpenedFile {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
    pub(crate) alignment: Alignment,
    pub(crate) flush_method: FlushMethod,
}

/// Opens `path` with the flags of the flush method and finds its alignment.
pub(crate) fn open_file(path: &Path, options: &IoOptions) -> Result<OpenedFile, IoError> {
    let method = options.flush_method;
    let mut flags = 0;
    if method.is_direct() {
        flags |= libc::O_DIRECT;
    }
    if method == FlushMethod::ODsync {
        flags |= libc::O_DSYNC;
    }
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create(options.create)
        .truncate(false)
        .custom_flags(flags)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if method.is_direct() && e.raw_os_error() == Some(libc::EINVAL) => {
            return Err(IoError::DirectIoUnsupported {
                path: path.to_path_buf(),
                reason: "open with O_DIRECT returned EINVAL".into(),
            });
        }
        Err(source) => return Err(os_error(OpKind::Open, path, 0, 0, source)),
    };
    let alignment = discover_alignment(&file, path, method.is_direct())?;
    Ok(OpenedFile {
        file,
        path: path.to_path_buf(),
        alignment,
        flush_method: method,
    })
}

/// statx `STATX_DIOALIGN` if the filesystem reports it, else the device's
/// logical block size; at least 512 either way.
fn discover_alignment(file: &File, path: &Path, direct: bool) -> Result<Alignment, IoError> {
    let unsupported = |reason: &str| IoError::DirectIoUnsupported {
        path: path.to_path_buf(),
        reason: reason.into(),
    };
    if let Some((offset_bytes, mem_bytes)) = statx_dio_align(file) {
        if offset_bytes == 0 {
            if direct {
                return Err(unsupported(
                    "statx reports no direct I/O support (STATX_DIOALIGN is 0)",
                ));
            }
            return Ok(Alignment::at_least_sector(
                logical_block_size_bytes(file),
                0,
            ));
        }
        return Ok(Alignment::at_least_sector(
            offset_bytes as usize,
            mem_bytes as usize,
        ));
    }
    if direct && is_tmpfs(file) {
        return Err(unsupported("tmpfs keeps files in the page cache"));
    }
    let block_bytes = logical_block_size_bytes(file);
    Ok(Alignment::at_least_sector(block_bytes, block_bytes))
}

/// `(stx_dio_offset_align, stx_dio_mem_align)` if the kernel and
/// filesystem report them.
fn statx_dio_align(file: &File) -> Option<(u32, u32)> {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, an empty NUL-terminated path with AT_EMPTY_PATH, and
    // a pointer to a statx struct we own.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    Some((stx.stx_dio_offset_align, stx.stx_dio_mem_align))
}

fn is_tmpfs(file: &File) -> bool {
    // SAFETY: statfs is plain old data; all-zero is a valid value.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and a pointer to a statfs struct we own.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) };
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets.
    let f_type = fs.f_type as i64;
    rc == 0 && f_type == TMPFS_MAGIC
}

/// The logical block size of the device holding the file, from sysfs
/// (the partition's parent disk if needed); 512 if unknown.
fn logical_block_size_bytes(file: &File) -> usize {
    let Ok(meta) = file.metadata() else {
        return 512;
    };
    let dev = std::os::unix::fs::MetadataExt::dev(&meta);
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = format!("/sys/dev/block/{major}:{minor}");
    for candidate in [
        format!("{base}/queue/logical_block_size"),
        format!("{base}/../queue/logical_block_size"),
    ] {
        if let Ok(text) = std::fs::read_to_string(&candidate)
            && let Ok(value) = text.trim().parse::<usize>()
        {
            return value;
        }
    }
    512
}

pub(crate) fn os_error(
    op: OpKind,
    path: &Path,
    offset_bytes: u64,
    len_bytes: usize,
    source: io::Error,
) -> IoError {
    IoError::Os {
        op,
        path: path.to_path_buf(),
        offset_bytes,
        len_bytes,
        source,
    }
}

/// Remembers a failed sync so that every later write and sync fails too.
#[derive(Debug, Default)]
pub(crate) struct SyncState {
    failed: AtomicBool,
    errno: Mutex<Option<i32>>,
}

impl SyncState {
    /// `Err(FsyncFailed)` if a sync of this file ever failed.
    pub(crate) fn check(&self, path: &Path) -> Result<(), IoError> {
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let errno = self.errno.lock().unwrap_or(libc::EIO);
        Err(IoError::FsyncFailed {
            path: path.to_path_buf(),
            source: io::Error::from_raw_os_error(errno),
        })
    }

    /// Records a failed sync and returns the error to report.
    pub(crate) fn fail(&self, path: &Path, source: io::Error) -> IoError {
        let mut errno = self.errno.lock();
        if errno.is_none() {
            *errno = Some(source.raw_os_error().unwrap_or(libc::EIO));
        }
        self.failed.store(true, Ordering::Release);
        IoError::FsyncFailed {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Forgets a failure (the fault backend after a simulated crash and
    /// reopen).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn reset(&self) {
        *self.errno.lock() = None;
        self.failed.store(false, Ordering::Release);
    }
}

/// pread until `buf` is full; a zero-byte read means the end of the file.
pub(crate) fn pread_exact(
    opened: &OpenedFile,
    offset_bytes: u64,
    buf: &mut [u8],
) -> Result<(), IoError> {
    let mut done_bytes = 0;
    while done_bytes < buf.len() {
        let at = offset_bytes + done_bytes as u64;
        match opened.file.read_at(&mut buf[done_bytes..], at) {
            Ok(0) => return Err(read_past_end(opened, offset_bytes, buf.len())),
            Ok(n) => done_bytes += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(os_error(
                    OpKind::Read,
                    &opened.path,
                    offset_bytes,
                    buf.len(),
                    e,
                ));
            }
        }
    }
    Ok(())
}

pub(crate) fn read_past_end(opened: &OpenedFile, offset_bytes: u64, len_bytes: usize) -> IoError {
    let file_len_bytes = opened.file.metadata().map(|m| m.len()).unwrap_or(0);
    IoError::ReadPastEnd {
        path: opened.path.clone(),
        offset_bytes,
        len_bytes,
        file_len_bytes,
    }
}

/// pwrite until all of `data` is written.
pub(crate) fn pwrite_all(
    opened: &OpenedFile,
    offset_bytes: u64,
    data: &[u8],
) -> Result<(), IoError> {
    let mut done_bytes = 0;
    while done_bytes < data.len() {
        let at = offset_bytes + done_bytes as u64;
        match opened.file.write_at(&data[done_bytes..], at) {
            Ok(0) => {
                let e = io::Error::from_raw_os_error(libc::ENOSPC);
                return Err(os_error(
                    OpKind::Write,
                    &opened.path,
                    offset_bytes,
                    data.len(),
                    e,
                ));
            }
            Ok(n) => done_bytes += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(os_error(
                    OpKind::Write,
                    &opened.path,
                    offset_bytes,
                    data.len(),
                    e,
                ));
            }
        }
    }
    Ok(())
}

/// Writes `bufs` one after the other from `offset_bytes` with `pwritev`,
/// going on after a short write and retrying after `EINTR`.
pub(crate) fn pwritev_all(
    opened: &OpenedFile,
    offset_bytes: u64,
    bufs: &[&[u8]],
) -> Result<(), IoError> {
    let total_bytes: usize = bufs.iter().map(|b| b.len()).sum();
    let error = |e| os_error(OpKind::Write, &opened.path, offset_bytes, total_bytes, e);
    let mut iovecs: Vec<libc::iovec> = bufs
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| libc::iovec {
            iov_base: b.as_ptr().cast_mut().cast(),
            iov_len: b.len(),
        })
        .collect();
    let mut first = 0;
    let mut done_bytes = 0usize;
    while first < iovecs.len() {
        let count = (iovecs.len() - first).min(IOV_MAX);
        let at = libc::off_t::try_from(offset_bytes + done_bytes as u64)
            .map_err(|_| error(io::Error::from_raw_os_error(libc::EFBIG)))?;
        // SAFETY: every iovec points into a live slice of `bufs` (advanced
        // below only within it), and the kernel only reads from them.
        let n = unsafe {
            libc::pwritev(
                opened.file.as_raw_fd(),
                iovecs[first..].as_ptr(),
                count as libc::c_int,
                at,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error(e));
        }
        let mut n = n as usize;
        if n == 0 {
            return Err(error(io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        done_bytes += n;
        while n > 0 {
            let iov = &mut iovecs[first];
            if n >= iov.iov_len {
                n -= iov.iov_len;
                first += 1;
            } else {
                // SAFETY: `n` is inside this iovec's buffer.
                iov.iov_base = unsafe { iov.iov_base.cast::<u8>().add(n).cast() };
                iov.iov_len -= n;
                n = 0;
            }
        }
    }
    Ok(())
}

/// The most buffers one `pwritev` takes (Linux's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// The shared, backend-independent part of a disk file: length, set_len,
/// and sync per flush method, with the sticky failure.
#[derive(Debug)]
pub(crate) struct DiskCore {
    pub(crate) opened: OpenedFile,
    pub(crate) sync_state: SyncState,
    /// Length at the last successful sync (for `ODirectNoFsync`).
    synced_len_bytes: Mutex<Option<u64>>,
}

impl DiskCore {
    pub(crate) fn new(opened: OpenedFile) -> DiskCore {
        DiskCore {
            opened,
            sync_state: SyncState::default(),
            synced_len_bytes: Mutex::new(None),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.opened.path
    }

    pub(crate) fn check_request(
        &self,
        op: OpKind,
        offset_bytes: u64,
        addr: usize,
        len: usize,
    ) -> Result<(), IoError> {
        if op == OpKind::Write {
            self.sync_state.check(self.path())?;
        }
        self.opened
            .alignment
            .check(self.path(), op, offset_bytes, addr, len)
    }

    /// `BlockFile::write_vectored_at` on the calling thread: every buffer
    /// checked as a write of its own, then one `pwritev`.
    pub(crate) fn write_vectored_at(
        &self,
        offset_bytes: u64,
        bufs: &[&[u8]],
    ) -> Result<(), IoError> {
        let mut at = offset_bytes;
        for buf in bufs {
            self.check_request(OpKind::Write, at, buf.as_ptr() as usize, buf.len())?;
            at += buf.len() as u64;
        }
        pwritev_all(&self.opened, offset_bytes, bufs)
    }

    pub(crate) fn len(&self) -> Result<u64, IoError> {
        let meta = self.opened.file.metadata();
        meta.map(|m| m.len())
            .map_err(|e| os_error(OpKind::Len, self.path(), 0, 0, e))
    }

    pub(crate) fn set_len(&self, len_bytes: u64) -> Result<(), IoError> {
        self.sync_state.check(self.path())?;
        self.opened.alignment.check_len(self.path(), len_bytes)?;
        let result = self.opened.file.set_len(len_bytes);
        result.map_err(|e| os_error(OpKind::SetLen, self.path(), len_bytes, 0, e))
    }

    /// `BlockFile::read_if_cached`: one `preadv2(RWF_NOWAIT)`, which
    /// returns `EAGAIN` (or a short count) unless the page cache holds the
    /// whole range.
    pub(crate) fn read_if_cached(
        &self,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<bool, IoError> {
        if self.opened.flush_method.is_direct() {
            return Ok(false);
        }
        self.check_request(OpKind::Read, offset_bytes, buf.as_ptr() as usize, buf.len())?;
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        loop {
            // SAFETY: one iovec over `buf`, which we borrow mutably for the
            // call; a valid fd; the offset fits off_t (the file is smaller).
            let n = unsafe {
                libc::preadv2(
                    self.opened.file.as_raw_fd(),
                    &iov,
                    1,
                    offset_bytes as libc::off_t,
                    libc::RWF_NOWAIT,
                )
            };
            if n >= 0 {
                return Ok(n as usize == buf.len());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                // Not cached, or a kernel without RWF_NOWAIT for this file.
                Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::EINVAL) => return Ok(false),
                _ => {
                    return Err(os_error(
                        OpKind::Read,
                        self.path(),
                        offset_bytes,
                        buf.len(),
                        e,
                    ));
                }
            }
        }
    }

    /// `BlockFile::uncache`: `posix_fadvise(POSIX_FADV_DONTNEED)`.
    pub(crate) fn uncache(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), IoError> {
        if self.opened.flush_method.is_direct() || len_bytes == 0 {
            return Ok(());
        }
        // SAFETY: a valid fd; fadvise only reads its integer arguments.
        let rc = unsafe {
            libc::posix_fadvise(
                self.opened.file.as_raw_fd(),
                offset_bytes as libc::off_t,
                len_bytes as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::from_raw_os_error(rc);
        Err(os_error(
            OpKind::Read,
            self.path(),
            offset_bytes,
            len_bytes as usize,
            e,
        ))
    }

    pub(crate) fn sync_data(&self) -> Result<(), IoError> {
        self.sync_state.check(self.path())?;
        let len_bytes = self.len()?;
        if self.opened.flush_method == FlushMethod::ODirectNoFsync
            && *self.synced_len_bytes.lock() == Some(len_bytes)
        {
            // O_DIRECT writes reached the device; only a length change
            // (file metadata) would need fdatasync.
            return Ok(());
        }
        match self.opened.file.sync_data() {
            Ok(()) => {
                *self.synced_len_bytes.lock() = Some(len_bytes);
                Ok(())
            }
            Err(e) => Err(self.sync_state.fail(self.path(), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_sync_stays_failed_with_the_first_errno() {
        let state = SyncState::default();
        let path = Path::new("/data/file");
        state.check(path).unwrap();
        let first = state.fail(path, io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(first, IoError::FsyncFailed { .. }));
        state.fail(path, io::Error::from_raw_os_error(libc::ENOSPC));
        for _ in 0..3 {
            let again = state.check(path).unwrap_err();
            assert_eq!(again.raw_os_error(), Some(libc::EIO));
            assert!(again.to_string().contains("/data/file"));
        }
        state.reset();
        state.check(path).unwrap();
    }
}
