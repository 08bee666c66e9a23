//! I/O threads shared by many files.
//!
//! Each file opened without [`IoOptions::threads`] starts its own
//! `read_io_threads + write_io_threads` workers and registered buffers. A
//! database of many trees opens two files per tree, so it starts one
//! [`IoThreads`] and opens every data file on it: a tree then costs its
//! descriptors, not a thread pool (about 13 threads, 16 descriptors and
//! 4 MiB of locked buffers per tree before). Requests carry their file, so
//! a worker serves any of them; the buffers registered with each ring are
//! the set's, handed out by every file's `alloc_buf`.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::error::IoError;
use crate::options::{Backend, IoOptions};
use crate::pread::PreadWorkers;
use crate::uring::UringWorkers;

/// Alignment of the shared buffers: the largest direct-I/O memory alignment
/// of the devices this runs on (a file that needs more gets heap buffers).
const SHARED_ALIGN_BYTES: usize = 4096;

/// A set of I/O threads (and their registered buffers) that files opened
/// with [`IoOptions::threads`] share. Cheap to clone; the threads stop when
/// the last clone and the last file using them are dropped, after finishing
/// what was queued.
#[derive(Clone)]
pub struct IoThreads {
    workers: Workers,
}

#[derive(Clone)]
enum Workers {
    Uring(Arc<UringWorkers>),
    Pread(Arc<PreadWorkers>),
}

impl IoThreads {
    /// Starts `read_io_threads + write_io_threads` workers of the backend
    /// `options` asks for (with `Backend::Auto`, io_uring if it can be set
    /// up), with `buffer_count` buffers of `buffer_size_bytes`. `label`
    /// names them in errors (the directory whose files they serve).
    pub fn start(label: &Path, options: &IoOptions) -> Result<IoThreads, IoError> {
        options.validate()?;
        let use_uring = crate::choose_uring(label, options)?;
        let workers = if use_uring {
            Workers::Uring(Arc::new(UringWorkers::start(
                label,
                options,
                SHARED_ALIGN_BYTES,
            )?))
        } else {
            Workers::Pread(Arc::new(PreadWorkers::start(
                label,
                options,
                SHARED_ALIGN_BYTES,
            )?))
        };
        Ok(IoThreads { workers })
    }

    /// The backend the threads run (never `Auto`).
    pub fn backend(&self) -> Backend {
        match self.workers {
            Workers::Uring(_) => Backend::Uring,
            Workers::Pread(_) => Backend::Pread,
        }
    }

    /// How many threads the set runs.
    pub fn thread_count(&self) -> usize {
        match &self.workers {
            Workers::Uring(workers) => workers.thread_count(),
            Workers::Pread(workers) => workers.thread_count(),
        }
    }

    /// How many of the set's buffers are free now.
    pub fn free_buffer_count(&self) -> usize {
        match &self.workers {
            Workers::Uring(workers) => workers.bufs().free_count(),
            Workers::Pread(workers) => workers.bufs().free_count(),
        }
    }

    pub(crate) fn uring(&self) -> Option<Arc<UringWorkers>> {
        match &self.workers {
            Workers::Uring(workers) => Some(Arc::clone(workers)),
            Workers::Pread(_) => None,
        }
    }

    pub(crate) fn pread(&self) -> Option<Arc<PreadWorkers>> {
        match &self.workers {
            Workers::Pread(workers) => Some(Arc::clone(workers)),
            Workers::Uring(_) => None,
        }
    }

    fn id(&self) -> usize {
        match &self.workers {
            Workers::Uring(workers) => Arc::as_ptr(workers) as usize,
            Workers::Pread(workers) => Arc::as_ptr(workers) as usize,
        }
    }
}

impl fmt::Debug for IoThreads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoThreads")
            .field("backend", &self.backend())
            .field("threads", &self.thread_count())
            .finish()
    }
}

/// Two handles are equal when they name the same set of threads.
impl PartialEq for IoThreads {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl Eq for IoThreads {}
