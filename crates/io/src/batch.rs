//! The batch API: submit many reads or writes, then wait for completions.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::buf::AlignedBuf;
use crate::error::IoError;

/// Direction of a batched request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoOp {
    /// Read `buf.len()` bytes at the offset into the buffer.
    Read,
    /// Write the whole buffer at the offset.
    Write,
}

/// One request of a batch. It owns its buffer until the completion hands it
/// back, so the kernel can use it while the caller does something else.
#[derive(Debug)]
pub struct IoRequest {
    /// Read or write.
    pub op: IoOp,
    /// Where in the file.
    pub offset_bytes: u64,
    /// Data to write, or space to read into (its length is the request's).
    pub buf: AlignedBuf,
    /// The caller's label, returned in the completion.
    pub tag: u64,
}

impl IoRequest {
    /// A read of `buf.len()` bytes at `offset_bytes`.
    pub fn read(offset_bytes: u64, buf: AlignedBuf, tag: u64) -> IoRequest {
        IoRequest {
            op: IoOp::Read,
            offset_bytes,
            buf,
            tag,
        }
    }

    /// A write of `buf` at `offset_bytes`.
    pub fn write(offset_bytes: u64, buf: AlignedBuf, tag: u64) -> IoRequest {
        IoRequest {
            op: IoOp::Write,
            offset_bytes,
            buf,
            tag,
        }
    }

    /// Completes this request with `result`.
    pub fn complete(self, result: Result<(), IoError>) -> Completion {
        Completion {
            op: self.op,
            offset_bytes: self.offset_bytes,
            buf: self.buf,
            tag: self.tag,
            result,
        }
    }
}

/// The outcome of one request, with its buffer handed back.
#[derive(Debug)]
pub struct Completion {
    /// Read or write.
    pub op: IoOp,
    /// Where in the file.
    pub offset_bytes: u64,
    /// The request's buffer (filled, for a successful read).
    pub buf: AlignedBuf,
    /// The caller's label.
    pub tag: u64,
    /// Whether it succeeded. A write that succeeded is not durable until a
    /// later `sync_data` returns `Ok`.
    pub result: Result<(), IoError>,
}

/// Where a backend delivers completions: the sending half of a
/// [`CompletionQueue`].
#[derive(Clone, Debug)]
pub struct CompletionSender {
    tx: Sender<Completion>,
}

impl CompletionSender {
    /// Delivers one completion. If the queue is gone the completion (and
    /// its buffer) is dropped: nobody is waiting for it.
    pub fn send(&self, completion: Completion) {
        // A closed queue means the caller gave up waiting; dropping is right.
        let _closed = self.tx.send(completion);
    }
}

/// A caller's queue of completions. Submit batches with
/// [`crate::BlockFile::submit`] and `self.sender()`, then wait here.
/// Completions arrive in any order; every submitted request yields exactly
/// one. Waiting parks the thread (no spinning).
#[derive(Debug)]
pub struct CompletionQueue {
    tx: Sender<Completion>,
    rx: Receiver<Completion>,
}

impl Default for CompletionQueue {
    fn default() -> Self {
        CompletionQueue::new()
    }
}

impl CompletionQueue {
    /// An empty queue.
    pub fn new() -> CompletionQueue {
        let (tx, rx) = crossbeam_channel::unbounded();
        CompletionQueue { tx, rx }
    }

    /// The handle to pass to `submit`.
    pub fn sender(&self) -> CompletionSender {
        CompletionSender {
            tx: self.tx.clone(),
        }
    }

    /// Blocks until a completion arrives.
    ///
    /// Waiting with nothing submitted blocks forever: count what you submit.
    pub fn wait(&self) -> Completion {
        match self.rx.recv() {
            Ok(completion) => completion,
            // The queue holds a sender itself, so the channel cannot close.
            Err(_) => unreachable!("a CompletionQueue keeps its own sender"),
        }
    }

    /// A completion if one is ready.
    pub fn try_next(&self) -> Option<Completion> {
        self.rx.try_recv().ok()
    }

    /// Waits at most `timeout` for a completion.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Completion> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Blocks until `count` completions arrived and returns them.
    pub fn wait_many(&self, count: usize) -> Vec<Completion> {
        (0..count).map(|_| self.wait()).collect()
    }
}
