//! The pread/pwrite backend. `read_at` and `write_at` run on the calling
//! thread; batches go to `read_io_threads` and `write_io_threads` workers,
//! each doing one synchronous request at a time (InnoDB's simulated AIO).
//! As with io_uring, the workers may serve many files ([`crate::IoThreads`]).

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use crate::BlockFile;
use crate::batch::{CompletionSender, IoOp, IoRequest};
use crate::buf::{AlignedBuf, Alignment, BufPool};
use crate::error::{IoError, OpKind};
use crate::options::IoOptions;
use crate::sys::{DiskCore, OpenedFile, os_error, pread_exact, pwrite_all};

type Job = (IoRequest, CompletionSender, Arc<DiskCore>);

/// The pread/pwrite workers of one [`crate::IoThreads`], shared by its
/// files, and the buffers `alloc_buf` hands out.
#[derive(Debug)]
pub(crate) struct PreadWorkers {
    bufs: BufPool,
    read_tx: Option<Sender<Job>>,
    write_tx: Option<Sender<Job>>,
    workers: Vec<JoinHandle<()>>,
}

impl PreadWorkers {
    /// Starts the workers; `label` names them in errors.
    pub(crate) fn start(
        label: &Path,
        options: &IoOptions,
        align_bytes: usize,
    ) -> Result<PreadWorkers, IoError> {
        let bufs = BufPool::new(
            options.buffer_count.max(1),
            options.buffer_size_bytes,
            align_bytes,
        );
        let (read_tx, read_rx) = crossbeam_channel::unbounded::<Job>();
        let (write_tx, write_rx) = crossbeam_channel::unbounded::<Job>();
        let mut started = PreadWorkers {
            bufs,
            read_tx: Some(read_tx),
            write_tx: Some(write_tx),
            workers: Vec::new(),
        };
        for (rx, count, kind) in [
            (read_rx, options.read_io_threads, "read"),
            (write_rx, options.write_io_threads, "write"),
        ] {
            for index in 0..count {
                let rx = rx.clone();
                let name = format!("bcuda-{kind}-{index}");
                let spawned = std::thread::Builder::new()
                    .name(name)
                    .spawn(move || worker(&rx));
                // On an error, dropping `started` stops the workers so far.
                let handle = spawned.map_err(|e| os_error(OpKind::Open, label, 0, 0, e))?;
                started.workers.push(handle);
            }
        }
        Ok(started)
    }

    pub(crate) fn bufs(&self) -> &BufPool {
        &self.bufs
    }

    pub(crate) fn thread_count(&self) -> usize {
        self.workers.len()
    }
}

impl Drop for PreadWorkers {
    fn drop(&mut self) {
        // Closing the channels lets the workers finish queued jobs and exit.
        self.read_tx = None;
        self.write_tx = None;
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}

/// A file served by pread/pwrite.
#[derive(Debug)]
pub struct PreadFile {
    core: Arc<DiskCore>,
    workers: Arc<PreadWorkers>,
}

impl PreadFile {
    /// Opens `path` with `options` (its backend field is ignored).
    pub fn open(path: &Path, options: &IoOptions) -> Result<PreadFile, IoError> {
        options.validate()?;
        let opened = crate::sys::open_file(path, options)?;
        let workers = match options.threads.as_ref().and_then(crate::IoThreads::pread) {
            Some(shared) => shared,
            None => Arc::new(PreadWorkers::start(
                path,
                options,
                opened.alignment.mem_bytes,
            )?),
        };
        Ok(PreadFile::from_opened(opened, workers))
    }

    /// A file served by `workers` (its own, or those of shared
    /// [`crate::IoThreads`]).
    pub(crate) fn from_opened(opened: OpenedFile, workers: Arc<PreadWorkers>) -> PreadFile {
        PreadFile {
            core: Arc::new(DiskCore::new(opened)),
            workers,
        }
    }
}

fn worker(rx: &Receiver<Job>) {
    while let Ok((mut request, completions, core)) = rx.recv() {
        let result = match request.op {
            IoOp::Read => read(&core, request.offset_bytes, &mut request.buf),
            IoOp::Write => write(&core, request.offset_bytes, &request.buf),
        };
        completions.send(request.complete(result));
    }
}

fn read(core: &DiskCore, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoError> {
    core.check_request(OpKind::Read, offset_bytes, buf.as_ptr() as usize, buf.len())?;
    pread_exact(&core.opened, offset_bytes, buf)
}

fn write(core: &DiskCore, offset_bytes: u64, data: &[u8]) -> Result<(), IoError> {
    core.check_request(
        OpKind::Write,
        offset_bytes,
        data.as_ptr() as usize,
        data.len(),
    )?;
    pwrite_all(&core.opened, offset_bytes, data)
}

impl BlockFile for PreadFile {
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoError> {
        read(&self.core, offset_bytes, buf)
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), IoError> {
        write(&self.core, offset_bytes, data)
    }

    fn write_vectored_at(&self, offset_bytes: u64, bufs: &[&[u8]]) -> Result<(), IoError> {
        self.core.write_vectored_at(offset_bytes, bufs)
    }

    fn read_if_cached(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<bool, IoError> {
        self.core.read_if_cached(offset_bytes, buf)
    }

    fn uncache(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), IoError> {
        self.core.uncache(offset_bytes, len_bytes)
    }

    fn sync_data(&self) -> Result<(), IoError> {
        self.core.sync_data()
    }

    fn len(&self) -> Result<u64, IoError> {
        self.core.len()
    }

    fn set_len(&self, len_bytes: u64) -> Result<(), IoError> {
        self.core.set_len(len_bytes)
    }

    fn alignment(&self) -> Alignment {
        self.core.opened.alignment
    }

    fn path(&self) -> &Path {
        self.core.path()
    }

    fn alloc_buf(&self, len_bytes: usize) -> AlignedBuf {
        let align_bytes = self.alignment().mem_bytes;
        self.workers
            .bufs
            .take_aligned(len_bytes, align_bytes)
            .unwrap_or_else(|| AlignedBuf::zeroed(len_bytes, align_bytes))
    }

    fn submit(&self, requests: Vec<IoRequest>, completions: &CompletionSender) {
        for request in requests {
            let tx = match request.op {
                IoOp::Read => &self.workers.read_tx,
                IoOp::Write => &self.workers.write_tx,
            };
            let Some(tx) = tx else {
                unreachable!("channels live until drop")
            };
            if let Err(crossbeam_channel::SendError((request, completions, _))) =
                tx.send((request, completions.clone(), Arc::clone(&self.core)))
            {
                let path = self.path().to_path_buf();
                completions.send(request.complete(Err(IoError::Shutdown { path })));
            }
        }
    }
}
