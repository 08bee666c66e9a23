//! Barracuda's file layer: one positional file trait, [`BlockFile`], and its
//! backends.
//!
//! - io_uring ([`Backend::Uring`]): O_DIRECT, aligned buffers registered
//!   with each ring (`ReadFixed`/`WriteFixed`), `read_io_threads` and
//!   `write_io_threads` each owning a ring. `read_at` runs on the calling
//!   thread (as InnoDB's ordinary page reads); batches (read-ahead,
//!   flushing) go through the I/O threads; every write goes through the
//!   write threads.
//! - pread/pwrite ([`Backend::Pread`]): the same trait and thread counts,
//!   chosen by configuration or when io_uring cannot be set up.
//! - in-memory ([`MemoryFile`]) for tests, and fault injection
//!   ([`FaultFile`]) wrapping any backend: simulated crashes that drop or
//!   tear unsynced writes, EIO/ENOSPC on a schedule, added latency.
//!
//! What it is not: a page cache (the buffer pool is), a file system, or a
//! log. It does not checksum: blocks carry their own CRC32C above it.
//!
//! Invariants and limits:
//! - Every request is aligned: offsets and lengths are multiples of
//!   [`BlockFile::alignment`]`().offset_bytes` and buffers are aligned to
//!   `mem_bytes` (both at least 512, from statx `STATX_DIOALIGN` or the
//!   device's logical block size). Every backend checks the same rules and
//!   returns [`IoError::Misaligned`] before the kernel sees the request.
//! - A write is durable only after a later `sync_data` returned `Ok`
//!   (with [`FlushMethod::ODsync`], when the write returned).
//! - A failed sync is sticky: every later write and sync fails with
//!   [`IoError::FsyncFailed`].
//! - Thread counts are 1 to 64 ([`IO_THREADS_MAX`]), queue depths 1 to 4096.
//!
//! ```
//! use barracuda_io::{BlockFile, MemoryFile};
//! let file = MemoryFile::new("example");
//! let mut page = file.alloc_buf(4096);
//! page[..5].copy_from_slice(b"hello");
//! file.write_at(8192, &page)?;
//! file.sync_data()?; // now durable (for a disk backend)
//! let mut back = file.alloc_buf(4096);
//! file.read_at(8192, &mut back)?;
//! assert_eq!(&back[..5], b"hello");
//! assert_eq!(file.len()?, 8192 + 4096);
//! # Ok::<(), barracuda_io::IoError>(())
//! ```

mod batch;
mod buf;
mod error;
#[cfg(feature = "testing")]
mod fault;
mod lock;
mod memory;
mod options;
mod pread;
mod read_only;
mod sys;
mod threads;
mod uring;

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

pub use batch::{Completion, CompletionQueue, CompletionSender, IoOp, IoRequest};
pub use buf::{AlignedBuf, Alignment, BufPool, SECTOR_SIZE_BYTES};
pub use error::{IoError, OpKind};
#[cfg(feature = "testing")]
pub use fault::{CrashReport, FaultConfig, FaultErrno, FaultFile, FaultOp, FaultRule};
pub use lock::{DirLock, LOCK_FILE_NAME};
pub use memory::MemoryFile;
pub use options::{
    BUFFER_COUNT_MAX, BUFFER_SIZE_BYTES_MAX, Backend, FlushMethod, IO_THREADS_DEFAULT,
    IO_THREADS_MAX, IoOptions, QUEUE_DEPTH_DEFAULT, QUEUE_DEPTH_MAX,
};
pub use pread::PreadFile;
pub use read_only::ReadOnlyFile;
pub use threads::IoThreads;
pub use uring::UringFile;

/// A file read and written at offsets, shared by many threads
/// (`Arc<dyn BlockFile>`).
///
/// Every request must be aligned (see [`BlockFile::alignment`]); a
/// misaligned one fails with [`IoError::Misaligned`] and changes nothing.
pub trait BlockFile: Send + Sync + Debug {
    /// Reads exactly `buf.len()` bytes at `offset_bytes`.
    ///
    /// Guarantees: on `Ok`, `buf` holds the bytes of the latest completed
    /// write to each sector (from any thread), or zeros where nothing was
    /// written below the length. Reading past [`BlockFile::len`] fails with
    /// [`IoError::ReadPastEnd`]. Many threads may read at once.
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoError>;

    /// Writes all of `data` at `offset_bytes`, extending the file if needed.
    ///
    /// Guarantees: on `Ok`, later reads see the data. It is NOT durable: a
    /// crash may drop it, or tear it at 512-byte sectors, until a later
    /// `sync_data` returns `Ok` (with `FlushMethod::ODsync`, it is durable on
    /// return). After a failed sync, fails with [`IoError::FsyncFailed`].
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), IoError>;

    /// Writes the buffers of `bufs` one after the other from `offset_bytes`,
    /// as one `write_at` of their concatenation would (each buffer aligned
    /// as a `write_at` buffer must be). The disk backends write them with
    /// one `pwritev`, from the buffers themselves; the default copies them
    /// into one buffer first.
    ///
    /// Guarantees: those of `write_at`, for the whole range.
    fn write_vectored_at(&self, offset_bytes: u64, bufs: &[&[u8]]) -> Result<(), IoError> {
        match bufs {
            [] => Ok(()),
            [one] => self.write_at(offset_bytes, one),
            _ => {
                let len_bytes = bufs.iter().map(|b| b.len()).sum();
                let mut joined = self.alloc_buf(len_bytes);
                let mut at = 0;
                for buf in bufs {
                    joined[at..at + buf.len()].copy_from_slice(buf);
                    at += buf.len();
                }
                self.write_at(offset_bytes, &joined)
            }
        }
    }

    /// Makes every write and length change that completed before this call
    /// durable (fdatasync).
    ///
    /// Guarantees: on `Ok`, those writes survive a crash or power loss. On
    /// error the file is poisoned: this and every later write and sync
    /// return [`IoError::FsyncFailed`], since the kernel may have dropped
    /// the unwritten pages and a retry would falsely report success.
    fn sync_data(&self) -> Result<(), IoError>;

    /// The file's length in bytes, including completed unsynced writes.
    fn len(&self) -> Result<u64, IoError>;

    /// Whether the file is empty.
    fn is_empty(&self) -> Result<bool, IoError> {
        Ok(self.len()? == 0)
    }

    /// Truncates or extends (with zeros) the file to `len_bytes`, which must
    /// be a multiple of `alignment().offset_bytes`.
    ///
    /// Guarantees: visible at once; durable after the next `sync_data`.
    fn set_len(&self, len_bytes: u64) -> Result<(), IoError>;

    /// What requests must be aligned to.
    fn alignment(&self) -> Alignment;

    /// The file's path (or name, for memory files), used in errors.
    fn path(&self) -> &Path;

    /// An aligned buffer of `len_bytes`, from the file's registered pool
    /// when one is free and large enough (io_uring then uses fixed-buffer
    /// opcodes), otherwise newly allocated. Contents are unspecified bytes.
    fn alloc_buf(&self, len_bytes: usize) -> AlignedBuf {
        AlignedBuf::zeroed(len_bytes, self.alignment().mem_bytes)
    }

    /// Reads `buf.len()` bytes at `offset_bytes` only if the OS page cache
    /// holds all of them (`preadv2` with `RWF_NOWAIT`): `Ok(true)` with
    /// `buf` filled, `Ok(false)` (contents unspecified) when any of it would
    /// have to come from the device. Always `Ok(false)` for a file opened
    /// with `O_DIRECT` and for files without a page cache (the default).
    /// How the pool uses the page cache as a second tier of blocks
    /// (`PoolConfig::os_cache_tier`).
    fn read_if_cached(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<bool, IoError> {
        let _ = (offset_bytes, buf);
        Ok(false)
    }

    /// Asks the kernel to drop the clean page-cache pages of the range
    /// (`posix_fadvise(POSIX_FADV_DONTNEED)`; dirty pages stay until they
    /// are written). A hint: the data is unchanged either way. Nothing for
    /// `O_DIRECT` files and files without a page cache (the default).
    fn uncache(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), IoError> {
        let _ = (offset_bytes, len_bytes);
        Ok(())
    }

    /// Submits a batch of reads and writes without waiting. Each request
    /// yields exactly one [`Completion`] on `completions`, in any order;
    /// requests of one batch may run concurrently and in any order, so a
    /// batch must not contain overlapping writes, or a read overlapping a
    /// write, whose order matters.
    ///
    /// Guarantees: the same per request as `read_at` and `write_at`; a
    /// completed write is durable only after a later `sync_data`.
    fn submit(&self, requests: Vec<IoRequest>, completions: &CompletionSender);

    /// Submits a batch and waits for all of its completions.
    fn submit_and_wait(&self, requests: Vec<IoRequest>) -> Vec<Completion> {
        let queue = CompletionQueue::new();
        let count = requests.len();
        self.submit(requests, &queue.sender());
        queue.wait_many(count)
    }

    /// Writes `len_bytes` of zeros at `offset_bytes` (both aligned), in
    /// sequential writes of up to [`ZERO_WRITE_BYTES_MAX`] from one buffer:
    /// how the log and the pool's data files extend themselves ahead of
    /// their writes, so that those overwrite blocks the file system has
    /// already allocated (on ext4 an `O_DIRECT` write into a hole or past
    /// the end allocates blocks under the inode's exclusive lock, which
    /// io_uring hands to a kernel worker). Same guarantees as `write_at`.
    fn write_zeros(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), IoError> {
        if len_bytes == 0 {
            return Ok(());
        }
        let chunk = len_bytes.min(ZERO_WRITE_BYTES_MAX);
        let owned;
        let zeros: &[u8] = match shared_zeros(self.alignment().mem_bytes) {
            Some(zeros) => zeros,
            None => {
                owned = AlignedBuf::zeroed(chunk as usize, self.alignment().mem_bytes);
                &owned
            }
        };
        let end = offset_bytes + len_bytes;
        let mut at = offset_bytes;
        while at < end {
            let len = (end - at).min(chunk);
            self.write_at(at, &zeros[..len as usize])?;
            at += len;
        }
        Ok(())
    }
}

/// The largest single write of [`BlockFile::write_zeros`] (and its buffer).
pub const ZERO_WRITE_BYTES_MAX: u64 = 1 << 20;

/// Alignment of [`shared_zeros`]'s buffer: a page, which every
/// [`Alignment`] the files ask for divides.
const SHARED_ZEROS_ALIGN_BYTES: usize = 4096;

/// One buffer of [`ZERO_WRITE_BYTES_MAX`] zeros for every
/// [`BlockFile::write_zeros`] of the process, if `mem_bytes` divides its
/// alignment. (Each call used to allocate its own: a fresh mapping of 1 MiB,
/// faulted in, zeroed and unmapped again, on the writer's thread when the
/// log or a data file grows.)
fn shared_zeros(mem_bytes: usize) -> Option<&'static [u8]> {
    static ZEROS: std::sync::OnceLock<AlignedBuf> = std::sync::OnceLock::new();
    SHARED_ZEROS_ALIGN_BYTES
        .is_multiple_of(mem_bytes.max(1))
        .then(|| {
            &ZEROS.get_or_init(|| {
                AlignedBuf::zeroed(ZERO_WRITE_BYTES_MAX as usize, SHARED_ZEROS_ALIGN_BYTES)
            })[..]
        })
}

/// Opens (creating by default) the file at `path` with the backend, flush
/// method and threads of `options`.
///
/// With `Backend::Auto`, io_uring is tried first and pread/pwrite used if
/// it cannot be set up (the reason is logged at `warn`).
pub fn open(path: &Path, options: &IoOptions) -> Result<Arc<dyn BlockFile>, IoError> {
    options.validate()?;
    if let Some(threads) = &options.threads {
        let opened = sys::open_file(path, options)?;
        return Ok(match (threads.uring(), threads.pread()) {
            (Some(workers), _) => Arc::new(UringFile::from_opened(opened, workers, options)),
            (None, Some(workers)) => Arc::new(PreadFile::from_opened(opened, workers)),
            (None, None) => unreachable!("a set of threads runs one backend"),
        });
    }
    let use_uring = choose_uring(path, options)?;
    let opened = sys::open_file(path, options)?;
    let align_bytes = opened.alignment.mem_bytes;
    if use_uring {
        let workers = Arc::new(uring::UringWorkers::start(path, options, align_bytes)?);
        Ok(Arc::new(UringFile::from_opened(opened, workers, options)))
    } else {
        let workers = Arc::new(pread::PreadWorkers::start(path, options, align_bytes)?);
        Ok(Arc::new(PreadFile::from_opened(opened, workers)))
    }
}

/// Whether `options` get io_uring: `Backend::Auto` probes it and falls back
/// to pread/pwrite (logged at `warn`); `Backend::Uring` fails if it cannot
/// be set up.
pub(crate) fn choose_uring(path: &Path, options: &IoOptions) -> Result<bool, IoError> {
    Ok(match options.backend {
        Backend::Pread => false,
        Backend::Uring => {
            let probed = uring::probe(options);
            let path = path.to_path_buf();
            probed.map_err(|source| IoError::RingSetup { path, source })?;
            true
        }
        Backend::Auto => match uring::probe(options) {
            Ok(()) => true,
            Err(e) => {
                let shown = path.display();
                tracing::warn!("io_uring unavailable for {shown}, using pread/pwrite: {e}");
                false
            }
        },
    })
}

/// Runs a batch one request at a time on the calling thread.
pub(crate) fn run_inline<F: BlockFile + ?Sized>(
    file: &F,
    requests: Vec<IoRequest>,
    completions: &CompletionSender,
) {
    for mut request in requests {
        let result = match request.op {
            IoOp::Read => file.read_at(request.offset_bytes, &mut request.buf),
            IoOp::Write => file.write_at(request.offset_bytes, &request.buf),
        };
        completions.send(request.complete(result));
    }
}
