//! The io_uring backend.
//!
//! Threads: `read_io_threads` + `write_io_threads` workers, each owning a
//! ring of `queue_depth` entries (plus one for its wake-up read). The
//! workers serve any number of files ([`crate::IoThreads`]): each request
//! names its file, so a database with many trees starts one set. Callers
//! hand requests to a worker over a channel and, if the worker is asleep in
//! `io_uring_enter`, wake it through an eventfd whose poll is always
//! pending in its ring. A worker with nothing to do sleeps in the kernel;
//! nothing spins. `read_at` by default runs on the calling thread on a
//! small thread-local ring (InnoDB's synchronous page reads); batches and
//! all writes go through the workers.
//!
//! Buffers: the workers' [`BufPool`] is registered with every ring, so
//! requests whose buffer lies in it use `ReadFixed`/`WriteFixed` (the
//! kernel skips pinning pages per request). Files are named by descriptor,
//! not registered: a ring serves files that come and go.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use io_uring::{IoUring, opcode, types};
use parking_lot::{Condvar, Mutex};

use crate::BlockFile;
use crate::batch::{Completion, CompletionSender, IoOp, IoRequest};
use crate::buf::{AlignedBuf, Alignment, BufPool};
use crate::error::{IoError, OpKind};
use crate::options::IoOptions;
use crate::sys::{DiskCore, OpenedFile, os_error, pread_exact, pwrite_all};

/// `user_data` of the eventfd read that wakes a sleeping worker.
const WAKE_USER_DATA: u64 = u64::MAX;
/// A thread-local ring serves one synchronous read at a time; 4 entries is
/// the smallest ring that leaves room for a retry.
const LOCAL_RING_ENTRIES: u32 = 4;
/// With SQPOLL, the kernel thread sleeps after this much idle time (ms), so
/// an idle file costs no CPU.
const SQPOLL_IDLE_MS: u32 = 50;
/// Largest single ring request (the SQE length is 32-bit); a longer
/// request finishes with pread/pwrite after the first part.
const RING_REQUEST_BYTES_MAX: usize = 1 << 30;

/// A one-shot slot a blocked caller waits on.
#[derive(Default)]
struct OneShot {
    result: Mutex<Option<Result<(), IoError>>>,
    ready: Condvar,
}

impl OneShot {
    fn set(&self, result: Result<(), IoError>) {
        *self.result.lock() = Some(result);
        self.ready.notify_one();
    }

    fn wait(&self) -> Result<(), IoError> {
        let mut slot = self.result.lock();
        loop {
            if let Some(result) = slot.take() {
                return result;
            }
            self.ready.wait(&mut slot);
        }
    }
}

thread_local! {
    /// Reused by `write_at` (and non-direct `read_at`) so the hot path does
    /// not allocate.
    static ONE_SHOT: Arc<OneShot> = Arc::new(OneShot::default());
    /// This thread's ring for direct reads; `None` until first use, or if
    /// it could not be set up (then pread serves).
    static LOCAL_RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// A request from a caller blocked until it completes, borrowing its buffer.
struct BorrowedIo {
    core: Arc<DiskCore>,
    op: IoOp,
    offset_bytes: u64,
    ptr: *mut u8,
    len_bytes: usize,
    done: Arc<OneShot>,
}

// SAFETY: the caller that made a BorrowedIo blocks in OneShot::wait until
// the worker has finished with the buffer, so the pointer stays valid and
// unaliased for the I/O's whole life on whichever thread runs it.
unsafe impl Send for BorrowedIo {}

enum Task {
    Batch(IoRequest, CompletionSender, Arc<DiskCore>),
    Borrowed(BorrowedIo),
}

impl Task {
    fn core(&self) -> &Arc<DiskCore> {
        match self {
            Task::Batch(_, _, core) => core,
            Task::Borrowed(io) => &io.core,
        }
    }

    /// (op, offset, buffer pointer, length)
    fn parts(&mut self) -> (IoOp, u64, *mut u8, usize) {
        match self {
            Task::Batch(request, _, _) => (
                request.op,
                request.offset_bytes,
                request.buf.as_mut_ptr(),
                request.buf.len(),
            ),
            Task::Borrowed(io) => (io.op, io.offset_bytes, io.ptr, io.len_bytes),
        }
    }

    fn deliver(self, result: Result<(), IoError>) {
        match self {
            Task::Batch(request, completions, _) => completions.send(request.complete(result)),
            Task::Borrowed(io) => io.done.set(result),
        }
    }
}

/// How callers wake a worker sleeping in `io_uring_enter`.
struct Wake {
    sleeping: AtomicBool,
    eventfd: OwnedFd,
}

impl Wake {
    fn new() -> std::io::Result<Wake> {
        // SAFETY: eventfd takes no pointers; we own the returned descriptor.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Wake {
            sleeping: AtomicBool::new(false),
            eventfd,
        })
    }

    /// Wakes the worker if it said it sleeps (after the caller queued work).
    fn notify(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.force();
        }
    }

    /// Resets the eventfd's counter after its poll fired.
    fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking
        // eventfd; EAGAIN (already drained) is harmless.
        let _ = unsafe { libc::read(self.eventfd.as_raw_fd(), (&raw mut value).cast(), 8) };
    }

    fn force(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd. A failure
        // (counter overflow) still leaves the eventfd readable, which is
        // all the worker needs.
        let _ = unsafe { libc::write(self.eventfd.as_raw_fd(), (&raw const one).cast(), 8) };
    }
}

struct Worker {
    tx: Option<Sender<Task>>,
    wake: Arc<Wake>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    fn send(&self, task: Task) -> Result<(), Task> {
        let Some(tx) = &self.tx else { return Err(task) };
        tx.send(task).map_err(|e| e.into_inner())?;
        self.wake.notify();
        Ok(())
    }
}

/// The io_uring workers of one [`crate::IoThreads`], shared by its files,
/// and the buffers registered with their rings.
pub(crate) struct UringWorkers {
    bufs: BufPool,
    readers: Vec<Worker>,
    writers: Vec<Worker>,
    next_reader: AtomicUsize,
    next_writer: AtomicUsize,
}

impl UringWorkers {
    /// Starts the workers; `label` names them in errors (a file, or the
    /// directory whose files they serve).
    pub(crate) fn start(
        label: &Path,
        options: &IoOptions,
        align_bytes: usize,
    ) -> Result<UringWorkers, IoError> {
        let bufs = BufPool::new(
            options.buffer_count.max(1),
            options.buffer_size_bytes,
            align_bytes,
        );
        let spawn = |kind: &str, index: usize| {
            spawn_worker(label, &bufs, options, format!("bcuda-uring-{kind}-{index}"))
        };
        let readers = (0..options.read_io_threads)
            .map(|i| spawn("read", i))
            .collect::<Result<Vec<_>, _>>()?;
        let writers = (0..options.write_io_threads)
            .map(|i| spawn("write", i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(UringWorkers {
            bufs,
            readers,
            writers,
            next_reader: AtomicUsize::new(0),
            next_writer: AtomicUsize::new(0),
        })
    }

    pub(crate) fn bufs(&self) -> &BufPool {
        &self.bufs
    }

    pub(crate) fn thread_count(&self) -> usize {
        self.readers.len() + self.writers.len()
    }

    fn pick(&self, op: IoOp) -> &Worker {
        let (workers, next) = match op {
            IoOp::Read => (&self.readers, &self.next_reader),
            IoOp::Write => (&self.writers, &self.next_writer),
        };
        &workers[next.fetch_add(1, Ordering::Relaxed) % workers.len()]
    }
}

impl Drop for UringWorkers {
    fn drop(&mut self) {
        // Each worker finishes what is in its ring and queue, then exits.
        for worker in self.readers.iter_mut().chain(self.writers.iter_mut()) {
            worker.tx = None;
            worker.wake.force();
        }
        for worker in self.readers.iter_mut().chain(self.writers.iter_mut()) {
            if let Some(handle) = worker.handle.take() {
                let _ = handle.join();
            }
        }
    }
}

/// A file served by io_uring.
pub struct UringFile {
    core: Arc<DiskCore>,
    workers: Arc<UringWorkers>,
    direct_reads: bool,
}

impl std::fmt::Debug for UringFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringFile")
            .field("path", &self.core.path())
            .field("read_io_threads", &self.workers.readers.len())
            .field("write_io_threads", &self.workers.writers.len())
            .field("direct_reads", &self.direct_reads)
            .finish()
    }
}

/// Checks that io_uring can be set up with these options (one ring, then
/// dropped); the workers build their own rings on their own threads.
pub(crate) fn probe(options: &IoOptions) -> std::io::Result<()> {
    build_ring(options.queue_depth + 1, options.sqpoll).map(drop)
}

/// Builds a ring for the calling thread. Without SQPOLL it asks for
/// single-issuer, deferred and cooperative task work (completions are run
/// when the owner waits, without interrupting it; fio does the same), and
/// falls back to a plain ring on kernels before 6.1.
fn build_ring(entries: u32, sqpoll: bool) -> std::io::Result<IoUring> {
    if sqpoll {
        return IoUring::builder()
            .setup_sqpoll(SQPOLL_IDLE_MS)
            .build(entries);
    }
    let tuned = IoUring::builder()
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries);
    match tuned {
        Ok(ring) => Ok(ring),
        Err(e) => {
            tracing::debug!("io_uring without deferred task work: {e}");
            IoUring::builder().build(entries)
        }
    }
}

impl UringFile {
    /// Opens `path` with io_uring; fails with [`IoError::RingSetup`] if
    /// io_uring cannot be set up (use [`crate::open`] for the fallback).
    pub fn open(path: &Path, options: &IoOptions) -> Result<UringFile, IoError> {
        options.validate()?;
        probe(options).map_err(|source| IoError::RingSetup {
            path: path.to_path_buf(),
            source,
        })?;
        let opened = crate::sys::open_file(path, options)?;
        let workers = match options.threads.as_ref().and_then(crate::IoThreads::uring) {
            Some(shared) => shared,
            None => Arc::new(UringWorkers::start(
                path,
                options,
                opened.alignment.mem_bytes,
            )?),
        };
        Ok(UringFile::from_opened(opened, workers, options))
    }

    /// A file served by `workers` (its own, or those of shared
    /// [`crate::IoThreads`]).
    pub(crate) fn from_opened(
        opened: OpenedFile,
        workers: Arc<UringWorkers>,
        options: &IoOptions,
    ) -> UringFile {
        UringFile {
            core: Arc::new(DiskCore::new(opened)),
            workers,
            direct_reads: options.direct_reads,
        }
    }

    /// Hands a borrowed-buffer request to a worker and blocks until done.
    fn through_worker(
        &self,
        op: IoOp,
        offset_bytes: u64,
        ptr: *mut u8,
        len: usize,
    ) -> Result<(), IoError> {
        let done = ONE_SHOT.with(Arc::clone);
        let io = BorrowedIo {
            core: Arc::clone(&self.core),
            op,
            offset_bytes,
            ptr,
            len_bytes: len,
            done: Arc::clone(&done),
        };
        match self.workers.pick(op).send(Task::Borrowed(io)) {
            Ok(()) => done.wait(),
            Err(_) => Err(IoError::Shutdown {
                path: self.core.path().to_path_buf(),
            }),
        }
    }
}

fn spawn_worker(
    label: &Path,
    bufs: &BufPool,
    options: &IoOptions,
    name: String,
) -> Result<Worker, IoError> {
    let wake = Arc::new(Wake::new().map_err(|e| os_error(OpKind::Open, label, 0, 0, e))?);
    let (tx, rx) = crossbeam_channel::unbounded();
    let (setup_tx, setup_rx) = std::sync::mpsc::sync_channel(1);
    let (entries, sqpoll, depth) = (options.queue_depth + 1, options.sqpoll, options.queue_depth);
    let (bufs_in, wake_in) = (bufs.clone(), Arc::clone(&wake));
    // The ring is built on its own thread: a single-issuer ring belongs to
    // the thread that creates it.
    let body = move || {
        let ring = match build_ring(entries, sqpoll) {
            Ok(ring) => ring,
            Err(e) => return drop(setup_tx.send(Err(e))),
        };
        let fixed = register_buffers(&ring, &bufs_in);
        let _ = setup_tx.send(Ok(()));
        RingLoop::new(ring, bufs_in, fixed, rx, wake_in, depth).run();
    };
    let spawned = std::thread::Builder::new().name(name).spawn(body);
    let handle = spawned.map_err(|e| os_error(OpKind::Open, label, 0, 0, e))?;
    let setup = setup_rx
        .recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("I/O thread exited during setup")));
    if let Err(source) = setup {
        let _ = handle.join();
        return Err(IoError::RingSetup {
            path: label.to_path_buf(),
            source,
        });
    }
    Ok(Worker {
        tx: Some(tx),
        wake,
        handle: Some(handle),
    })
}

/// Registers the pool's buffers with `ring`; false (logged) if refused,
/// e.g. by RLIMIT_MEMLOCK, in which case plain Read/Write opcodes serve.
fn register_buffers(ring: &IoUring, bufs: &BufPool) -> bool {
    let iovecs = bufs.iovecs();
    // SAFETY: the iovecs point into the pool's slab, which lives as long as
    // the BufPool clone the worker keeps (longer than the ring).
    match unsafe { ring.submitter().register_buffers(&iovecs) } {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("io_uring buffer registration refused, using unregistered buffers: {e}");
            false
        }
    }
}

/// The SQE of one request on `$fd` (a `types::Fd` or `types::Fixed`), with
/// a registered buffer if `$fixed_index` names one. A macro because the
/// crate's descriptor trait is sealed.
macro_rules! build_entry {
    ($fd:expr, $op:expr, $offset_bytes:expr, $ptr:expr, $len:expr, $fixed_index:expr) => {
        match ($op, $fixed_index) {
            (IoOp::Read, Some(index)) => opcode::ReadFixed::new($fd, $ptr, $len, index)
                .offset($offset_bytes)
                .build(),
            (IoOp::Read, None) => opcode::Read::new($fd, $ptr, $len)
                .offset($offset_bytes)
                .build(),
            (IoOp::Write, Some(index)) => opcode::WriteFixed::new($fd, $ptr, $len, index)
                .offset($offset_bytes)
                .build(),
            (IoOp::Write, None) => opcode::Write::new($fd, $ptr, $len)
                .offset($offset_bytes)
                .build(),
        }
    };
}

/// One worker's state: its ring, the tasks in flight by slot.
struct RingLoop {
    ring: IoUring,
    bufs: BufPool,
    fixed: bool,
    rx: Receiver<Task>,
    wake: Arc<Wake>,
    slots: Vec<Option<Task>>,
    free_slots: Vec<usize>,
    wake_armed: bool,
    closing: bool,
    reaped: Vec<(u64, i32)>,
    finished: Vec<(Task, Result<(), IoError>)>,
    /// Completions of one queue, gathered to be delivered at once.
    delivering: Vec<Completion>,
    counters: LoopCounters,
}

/// What a worker did, logged (debug) when it exits: how often it waited in
/// the kernel, how often with nothing in flight (starved: the submitter was
/// late), and how often a caller had to wake it through the eventfd.
#[derive(Debug, Default)]
struct LoopCounters {
    requests: u64,
    waits: u64,
    starved_waits: u64,
    wake_polls: u64,
}

impl RingLoop {
    fn new(
        ring: IoUring,
        bufs: BufPool,
        fixed: bool,
        rx: Receiver<Task>,
        wake: Arc<Wake>,
        depth: u32,
    ) -> RingLoop {
        let depth = depth as usize;
        RingLoop {
            ring,
            bufs,
            fixed,
            rx,
            wake,
            slots: (0..depth).map(|_| None).collect(),
            free_slots: (0..depth).rev().collect(),
            wake_armed: false,
            closing: false,
            reaped: Vec::with_capacity(depth + 1),
            finished: Vec::with_capacity(depth),
            delivering: Vec::with_capacity(depth),
            counters: LoopCounters::default(),
        }
    }

    fn in_flight(&self) -> usize {
        self.slots.len() - self.free_slots.len() + usize::from(self.wake_armed)
    }

    fn run(mut self) {
        self.arm_wake();
        loop {
            self.fill();
            if self.closing && self.in_flight() == 0 {
                tracing::debug!("io_uring worker done: {:?}", self.counters);
                return;
            }
            let may_sleep = !self.free_slots.is_empty() && !self.closing;
            self.counters.waits += 1;
            if may_sleep {
                self.counters.starved_waits += u64::from(self.free_slots.len() == self.slots.len());
                self.wake.sleeping.store(true, Ordering::SeqCst);
                if !self.rx.is_empty() {
                    self.wake.sleeping.store(false, Ordering::SeqCst);
                    continue;
                }
            }
            if let Err(e) = self.ring.submit_and_wait(1)
                && !matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)
                )
            {
                tracing::error!("io_uring_enter failed: {e}");
            }
            self.wake.sleeping.store(false, Ordering::SeqCst);
            self.reap();
        }
    }

    fn arm_wake(&mut self) {
        let fd = types::Fd(self.wake.eventfd.as_raw_fd());
        // A poll, not a read: a read of a blocking eventfd could park an
        // io-wq kernel thread, whose wake-up costs a second scheduling.
        let entry = opcode::PollAdd::new(fd, libc::POLLIN as u32)
            .build()
            .user_data(WAKE_USER_DATA);
        self.push(&entry);
        self.wake_armed = true;
    }

    /// Moves queued tasks into the ring while slots are free.
    fn fill(&mut self) {
        while !self.free_slots.is_empty() && !self.closing {
            match self.rx.try_recv() {
                Ok(task) => self.start(task),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    // Complete the pending eventfd read so the loop can end.
                    self.closing = true;
                    self.wake.force();
                }
            }
        }
    }

    fn start(&mut self, mut task: Task) {
        let Some(slot) = self.free_slots.pop() else {
            unreachable!("fill checks for a free slot")
        };
        let (op, offset_bytes, ptr, len_bytes) = task.parts();
        let len = len_bytes.min(RING_REQUEST_BYTES_MAX) as u32;
        let fixed_index = if self.fixed {
            self.bufs.slot_of(ptr as usize, len_bytes)
        } else {
            None
        };
        let fd = types::Fd(task.core().opened.file.as_raw_fd());
        let entry = build_entry!(fd, op, offset_bytes, ptr, len, fixed_index);
        self.slots[slot] = Some(task);
        self.push(&entry.user_data(slot as u64));
    }

    fn push(&mut self, entry: &io_uring::squeue::Entry) {
        loop {
            // SAFETY: the entry's buffer belongs to a task kept in `slots`
            // until its completion is reaped (the wake poll has no buffer).
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return;
            }
            // The ring has depth + 1 entries and at most depth + 1 requests
            // are in flight, so a full SQ only needs a submit.
            if let Err(e) = self.ring.submit() {
                tracing::error!("io_uring submit failed: {e}");
            }
        }
    }

    fn reap(&mut self) {
        self.reaped.clear();
        self.reaped.extend(
            self.ring
                .completion()
                .map(|cqe| (cqe.user_data(), cqe.result())),
        );
        for index in 0..self.reaped.len() {
            let (user_data, result) = self.reaped[index];
            if user_data == WAKE_USER_DATA {
                self.counters.wake_polls += 1;
                self.wake.drain();
                self.wake_armed = false;
                if !self.closing {
                    self.arm_wake();
                }
                continue;
            }
            self.counters.requests += 1;
            let slot = user_data as usize;
            let Some(mut task) = self.slots[slot].take() else {
                unreachable!("completion of an empty slot {slot}")
            };
            self.free_slots.push(slot);
            let (op, offset_bytes, ptr, len_bytes) = task.parts();
            let outcome = finish(task.core(), op, offset_bytes, ptr, len_bytes, result);
            self.finished.push((task, outcome));
        }
        if self.finished.is_empty() {
            return;
        }
        // Start the queued requests before waking the callers, so the
        // device does not idle while completions are handed out.
        self.fill();
        if !self.ring.submission().is_empty()
            && let Err(e) = self.ring.submit()
        {
            tracing::error!("io_uring submit failed: {e}");
        }
        self.deliver_finished();
    }

    /// Hands out the finished tasks: batch completions that go to the same
    /// queue are delivered under one lock with one wake-up.
    fn deliver_finished(&mut self) {
        let mut run: Option<CompletionSender> = None;
        for (task, outcome) in self.finished.drain(..) {
            match task {
                Task::Borrowed(io) => io.done.set(outcome),
                Task::Batch(request, completions, _) => {
                    if let Some(current) = &run
                        && !current.same_queue(&completions)
                    {
                        current.send_all(self.delivering.drain(..));
                    }
                    self.delivering.push(request.complete(outcome));
                    run = Some(completions);
                }
            }
        }
        if let Some(current) = run {
            current.send_all(self.delivering.drain(..));
        }
    }
}

/// Turns a CQE result into the request's outcome; a short or retryable
/// result finishes with pread/pwrite (which also reports end of file).
fn finish(
    core: &DiskCore,
    op: IoOp,
    offset_bytes: u64,
    ptr: *mut u8,
    len_bytes: usize,
    result: i32,
) -> Result<(), IoError> {
    let done_bytes = match result {
        r if r >= 0 => (r as usize).min(len_bytes),
        r if matches!(-r, libc::EAGAIN | libc::EINTR) => 0,
        r => {
            let kind = if op == IoOp::Read {
                OpKind::Read
            } else {
                OpKind::Write
            };
            let source = std::io::Error::from_raw_os_error(-r);
            return Err(os_error(kind, core.path(), offset_bytes, len_bytes, source));
        }
    };
    if done_bytes == len_bytes {
        return Ok(());
    }
    let at = offset_bytes + done_bytes as u64;
    // SAFETY: ptr..ptr+len_bytes is the request's buffer, still owned by its
    // task (or its blocked caller) and not used by the kernel any more.
    let rest =
        unsafe { std::slice::from_raw_parts_mut(ptr.add(done_bytes), len_bytes - done_bytes) };
    match op {
        IoOp::Read => {
            pread_exact(&core.opened, at, rest).map_err(|e| rebase(e, offset_bytes, len_bytes))
        }
        IoOp::Write => {
            pwrite_all(&core.opened, at, rest).map_err(|e| rebase(e, offset_bytes, len_bytes))
        }
    }
}

/// Reports an error of a request's tail as an error of the whole request.
fn rebase(error: IoError, offset_bytes: u64, len_bytes: usize) -> IoError {
    match error {
        IoError::Os {
            op, path, source, ..
        } => IoError::Os {
            op,
            path,
            offset_bytes,
            len_bytes,
            source,
        },
        IoError::ReadPastEnd {
            path,
            file_len_bytes,
            ..
        } => IoError::ReadPastEnd {
            path,
            offset_bytes,
            len_bytes,
            file_len_bytes,
        },
        other => other,
    }
}

/// A synchronous read on this thread's own ring.
fn local_ring_read(core: &DiskCore, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoError> {
    let fd: RawFd = core.opened.file.as_raw_fd();
    let result = LOCAL_RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = build_ring(LOCAL_RING_ENTRIES, false).ok();
        }
        let ring = slot.as_mut()?;
        let len = buf.len().min(RING_REQUEST_BYTES_MAX) as u32;
        let entry = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), len)
            .offset(offset_bytes)
            .build()
            .user_data(0);
        // SAFETY: `buf` outlives the request: we wait for its completion below.
        unsafe { ring.submission().push(&entry) }.ok()?;
        loop {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // The request may be in flight; waiting again is the only
                // safe choice, so only a hard error gives up the ring.
                Err(_) => {}
            }
            if let Some(cqe) = ring.completion().next() {
                return Some(cqe.result());
            }
        }
    });
    match result {
        Some(r) => finish(
            core,
            IoOp::Read,
            offset_bytes,
            buf.as_mut_ptr(),
            buf.len(),
            r,
        ),
        None => pread_exact(&core.opened, offset_bytes, buf),
    }
}

impl BlockFile for UringFile {
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.core
            .check_request(OpKind::Read, offset_bytes, buf.as_ptr() as usize, buf.len())?;
        if self.direct_reads {
            return local_ring_read(&self.core, offset_bytes, buf);
        }
        self.through_worker(IoOp::Read, offset_bytes, buf.as_mut_ptr(), buf.len())
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), IoError> {
        self.core.check_request(
            OpKind::Write,
            offset_bytes,
            data.as_ptr() as usize,
            data.len(),
        )?;
        // The kernel only reads from a write's buffer; the cast to *mut is
        // for the shared request type.
        self.through_worker(
            IoOp::Write,
            offset_bytes,
            data.as_ptr().cast_mut(),
            data.len(),
        )
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
            let op_kind = if request.op == IoOp::Read {
                OpKind::Read
            } else {
                OpKind::Write
            };
            let checked = self.core.check_request(
                op_kind,
                request.offset_bytes,
                request.buf.addr(),
                request.buf.len(),
            );
            if let Err(e) = checked {
                completions.send(request.complete(Err(e)));
                continue;
            }
            let worker = self.workers.pick(request.op);
            let task = Task::Batch(request, completions.clone(), Arc::clone(&self.core));
            if let Err(task) = worker.send(task) {
                task.deliver(Err(IoError::Shutdown {
                    path: self.core.path().to_path_buf(),
                }));
            }
        }
    }
}
