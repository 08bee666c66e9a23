//! Open options: backend, flush method, I/O threads, queue depth.

use crate::error::IoError;

/// InnoDB's range for `innodb_read_io_threads` and `innodb_write_io_threads`.
pub const IO_THREADS_MAX: usize = 64;
/// Default read and write I/O threads each: InnoDB's default for
/// `innodb_read_io_threads` and `innodb_write_io_threads`.
pub const IO_THREADS_DEFAULT: usize = 4;
/// Default requests in flight per I/O thread (the entries of its ring).
pub const QUEUE_DEPTH_DEFAULT: u32 = 32;
/// Upper bound of a ring's queue depth: io_uring allows 32768 entries, but
/// more than 4096 outstanding 16 KiB requests per thread is 64 MiB in flight,
/// far past what any disk queue needs.
pub const QUEUE_DEPTH_MAX: u32 = 4096;
/// At most this many registered buffers per file (each ring registers them
/// all; the kernel caps a registration at 16384 iovecs).
pub const BUFFER_COUNT_MAX: usize = 16384;
/// Registered buffers are at most 1 MiB each (the kernel's per-iovec limit
/// is 1 GiB; pages are at most 64 KiB).
pub const BUFFER_SIZE_BYTES_MAX: usize = 1 << 20;

/// Which implementation serves the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Backend {
    /// io_uring if it can be set up, else pread/pwrite (the reason is logged).
    #[default]
    Auto,
    /// io_uring only; opening fails if it cannot be set up.
    Uring,
    /// pread/pwrite with thread pools for batches.
    Pread,
}

/// How writes reach the disk, as InnoDB's `innodb_flush_method`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FlushMethod {
    /// Buffered I/O (page cache); `sync_data` calls fdatasync.
    Fsync,
    /// Opened with O_DSYNC: each write is durable when it returns;
    /// `sync_data` still calls fdatasync (for length changes).
    ODsync,
    /// O_DIRECT (bypass the page cache); `sync_data` calls fdatasync so that
    /// the device's write cache and the file's metadata are flushed.
    #[default]
    ODirect,
    /// O_DIRECT, and `sync_data` skips fdatasync unless the length changed
    /// since the last sync (InnoDB's `O_DIRECT_NO_FSYNC`). Only safe on a
    /// device without a volatile write cache.
    ODirectNoFsync,
}

impl FlushMethod {
    /// Whether the file is opened with O_DIRECT.
    pub fn is_direct(self) -> bool {
        matches!(self, FlushMethod::ODirect | FlushMethod::ODirectNoFsync)
    }
}

/// Options for [`crate::open`]. Build with `IoOptions::default()` and the
/// `#[must_use]` methods below, each of which says its default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoOptions {
    pub(crate) backend: Backend,
    pub(crate) flush_method: FlushMethod,
    pub(crate) read_io_threads: usize,
    pub(crate) write_io_threads: usize,
    pub(crate) queue_depth: u32,
    pub(crate) sqpoll: bool,
    pub(crate) direct_reads: bool,
    pub(crate) buffer_count: usize,
    pub(crate) buffer_size_bytes: usize,
    pub(crate) create: bool,
    pub(crate) threads: Option<crate::IoThreads>,
}

impl Default for IoOptions {
    fn default() -> Self {
        IoOptions {
            backend: Backend::Auto,
            flush_method: FlushMethod::ODirect,
            read_io_threads: IO_THREADS_DEFAULT,
            write_io_threads: IO_THREADS_DEFAULT,
            queue_depth: QUEUE_DEPTH_DEFAULT,
            sqpoll: false,
            direct_reads: true,
            buffer_count: 64,
            buffer_size_bytes: /* 64 KiB, the largest page */ 64 << 10,
            create: true,
            threads: None,
        }
    }
}

impl IoOptions {
    /// Which backend serves the file. Default = `Backend::Auto`.
    #[must_use]
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// How writes are made durable. Default = `FlushMethod::ODirect`.
    #[must_use]
    pub fn flush_method(mut self, flush_method: FlushMethod) -> Self {
        self.flush_method = flush_method;
        self
    }

    /// Threads (each owning a ring) that serve batched reads (read-ahead),
    /// 1 to 64 as `innodb_read_io_threads`. Default = 4.
    #[must_use]
    pub fn read_io_threads(mut self, count: usize) -> Self {
        self.read_io_threads = count;
        self
    }

    /// Threads (each owning a ring) that serve all writes, 1 to 64 as
    /// `innodb_write_io_threads`. Default = 4.
    #[must_use]
    pub fn write_io_threads(mut self, count: usize) -> Self {
        self.write_io_threads = count;
        self
    }

    /// Outstanding requests per I/O thread (its ring's size), 1 to 4096.
    /// Default = 32.
    #[must_use]
    pub fn queue_depth(mut self, depth: u32) -> Self {
        self.queue_depth = depth;
        self
    }

    /// Let a kernel thread poll each ring's submission queue (IORING_SETUP_SQPOLL).
    /// Costs a core per ring while busy. Default = false.
    #[must_use]
    pub fn sqpoll(mut self, enabled: bool) -> Self {
        self.sqpoll = enabled;
        self
    }

    /// Serve `read_at` on the calling thread (as InnoDB does for ordinary
    /// page reads) instead of handing it to a read thread. Batches always go
    /// through the I/O threads. Default = true.
    #[must_use]
    pub fn direct_reads(mut self, enabled: bool) -> Self {
        self.direct_reads = enabled;
        self
    }

    /// How many aligned buffers the file allocates once, at open, and
    /// registers with each ring; `alloc_buf` hands them out. Default = 64.
    #[must_use]
    pub fn buffer_count(mut self, count: usize) -> Self {
        self.buffer_count = count;
        self
    }

    /// Size of each registered buffer. Default = 64 KiB.
    #[must_use]
    pub fn buffer_size_bytes(mut self, size_bytes: usize) -> Self {
        self.buffer_size_bytes = size_bytes;
        self
    }

    /// Create the file if it does not exist. Default = true.
    #[must_use]
    pub fn create(mut self, enabled: bool) -> Self {
        self.create = enabled;
        self
    }

    /// Serve the file with these shared threads and their buffers instead
    /// of starting its own; the backend, thread counts, queue depth and
    /// buffers are then the set's, and the options' own are not used.
    /// Default = none: each file starts its own.
    #[must_use]
    pub fn threads(mut self, threads: crate::IoThreads) -> Self {
        self.threads = Some(threads);
        self
    }

    /// The configured backend.
    pub fn get_backend(&self) -> Backend {
        self.backend
    }

    /// The configured flush method.
    pub fn get_flush_method(&self) -> FlushMethod {
        self.flush_method
    }

    /// Checks every option against its range.
    pub fn validate(&self) -> Result<(), IoError> {
        let invalid = |reason: String| Err(IoError::InvalidOptions { reason });
        if !(1..=IO_THREADS_MAX).contains(&self.read_io_threads) {
            return invalid(format!(
                "read_io_threads {} not in 1..={IO_THREADS_MAX}",
                self.read_io_threads
            ));
        }
        if !(1..=IO_THREADS_MAX).contains(&self.write_io_threads) {
            return invalid(format!(
                "write_io_threads {} not in 1..={IO_THREADS_MAX}",
                self.write_io_threads
            ));
        }
        if !(1..=QUEUE_DEPTH_MAX).contains(&self.queue_depth) {
            return invalid(format!(
                "queue_depth {} not in 1..={QUEUE_DEPTH_MAX}",
                self.queue_depth
            ));
        }
        if self.buffer_count > BUFFER_COUNT_MAX {
            return invalid(format!(
                "buffer_count {} above {BUFFER_COUNT_MAX}",
                self.buffer_count
            ));
        }
        if !(512..=BUFFER_SIZE_BYTES_MAX).contains(&self.buffer_size_bytes)
            || !self.buffer_size_bytes.is_power_of_two()
        {
            return invalid(format!(
                "buffer_size_bytes {} not a power of two in 512..={BUFFER_SIZE_BYTES_MAX}",
                self.buffer_size_bytes
            ));
        }
        Ok(())
    }
}
