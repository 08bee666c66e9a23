//! The batch API: submit many reads or writes, then wait for completions.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

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

/// Completions waiting for their caller, shared by a [`CompletionQueue`]
/// and its senders.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct State {
    items: VecDeque<Completion>,
    /// Threads parked in `wait`; a sender only signals when it is non-zero.
    waiters: usize,
    /// The queue was dropped: nobody will take completions any more.
    closed: bool,
}

/// Where a backend delivers completions: the sending half of a
/// [`CompletionQueue`].
///
/// Delivery is a short mutex section and, only if the caller is parked, one
/// wake-up. It used to be a crossbeam channel, whose `recv` spins and calls
/// `sched_yield` before parking: on two cores that spinning took a third of
/// the submitting thread's CPU in `barracuda-bench io` (see "File layer" in
/// `docs/design.md`).
#[derive(Clone, Debug)]
pub struct CompletionSender {
    shared: Arc<Shared>,
}

impl CompletionSender {
    /// Delivers one completion. If the queue is gone the completion (and
    /// its buffer) is dropped: nobody is waiting for it.
    pub fn send(&self, completion: Completion) {
        self.send_all(std::iter::once(completion));
    }

    /// Delivers several completions under one lock and with at most one
    /// wake-up call (an I/O thread hands out all it reaped at once).
    pub fn send_all(&self, completions: impl IntoIterator<Item = Completion>) {
        let (count, waiters) = {
            let mut state = self.shared.state.lock();
            if state.closed {
                return;
            }
            let before = state.items.len();
            state.items.extend(completions);
            (state.items.len() - before, state.waiters)
        };
        match (count, waiters) {
            (0, _) | (_, 0) => {}
            (1, _) | (_, 1) => {
                self.shared.ready.notify_one();
            }
            _ => {
                self.shared.ready.notify_all();
            }
        }
    }

    /// Whether `self` and `other` deliver to the same queue.
    pub fn same_queue(&self, other: &CompletionSender) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

/// A caller's queue of completions. Submit batches with
/// [`crate::BlockFile::submit`] and `self.sender()`, then wait here.
/// Completions arrive in any order; every submitted request yields exactly
/// one. Waiting parks the thread at once (no spinning, no yielding).
#[derive(Debug)]
pub struct CompletionQueue {
    shared: Arc<Shared>,
}

impl Default for CompletionQueue {
    fn default() -> Self {
        CompletionQueue::new()
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.closed = true;
        state.items.clear();
    }
}

impl CompletionQueue {
    /// An empty queue.
    pub fn new() -> CompletionQueue {
        CompletionQueue {
            shared: Arc::new(Shared::default()),
        }
    }

    /// The handle to pass to `submit`.
    pub fn sender(&self) -> CompletionSender {
        CompletionSender {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Blocks until a completion arrives.
    ///
    /// Waiting with nothing submitted blocks forever: count what you submit.
    pub fn wait(&self) -> Completion {
        let mut state = self.shared.state.lock();
        loop {
            if let Some(completion) = state.items.pop_front() {
                return completion;
            }
            state.waiters += 1;
            self.shared.ready.wait(&mut state);
            state.waiters -= 1;
        }
    }

    /// A completion if one is ready.
    pub fn try_next(&self) -> Option<Completion> {
        self.shared.state.lock().items.pop_front()
    }

    /// Moves every ready completion to `out` (one lock); returns how many.
    pub fn drain_into(&self, out: &mut Vec<Completion>) -> usize {
        let mut state = self.shared.state.lock();
        let count = state.items.len();
        out.extend(state.items.drain(..));
        count
    }

    /// Waits at most `timeout` for a completion.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Completion> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state.lock();
        loop {
            if let Some(completion) = state.items.pop_front() {
                return Some(completion);
            }
            state.waiters += 1;
            let timed_out = self
                .shared
                .ready
                .wait_until(&mut state, deadline)
                .timed_out();
            state.waiters -= 1;
            if timed_out {
                return state.items.pop_front();
            }
        }
    }

    /// Blocks until `count` completions arrived and returns them.
    pub fn wait_many(&self, count: usize) -> Vec<Completion> {
        (0..count).map(|_| self.wait()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(tag: u64) -> Completion {
        IoRequest::read(0, AlignedBuf::zeroed(512, 512), tag).complete(Ok(()))
    }

    #[test]
    fn send_all_delivers_every_completion_in_order() {
        let queue = CompletionQueue::new();
        queue.sender().send_all((0..5).map(done));
        let tags: Vec<u64> = queue.wait_many(5).iter().map(|c| c.tag).collect();
        assert_eq!(tags, vec![0, 1, 2, 3, 4]);
        assert!(queue.try_next().is_none());
    }

    #[test]
    fn a_parked_waiter_is_woken_by_another_thread() {
        let queue = CompletionQueue::new();
        let sender = queue.sender();
        let waiter = std::thread::scope(|scope| {
            let waiter = scope.spawn(|| queue.wait().tag);
            std::thread::sleep(Duration::from_millis(20));
            sender.send(done(7));
            waiter.join().unwrap()
        });
        assert_eq!(waiter, 7);
    }

    #[test]
    fn wait_timeout_gives_up_and_drain_takes_all() {
        let queue = CompletionQueue::new();
        assert!(queue.wait_timeout(Duration::from_millis(5)).is_none());
        let sender = queue.sender();
        sender.send(done(1));
        sender.send(done(2));
        let mut out = Vec::new();
        assert_eq!(queue.drain_into(&mut out), 2);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn senders_know_their_queue_and_a_dropped_queue_drops_completions() {
        let queue = CompletionQueue::new();
        let other = CompletionQueue::new();
        let sender = queue.sender();
        assert!(sender.same_queue(&queue.sender()));
        assert!(!sender.same_queue(&other.sender()));
        drop(queue);
        sender.send(done(3));
        assert_eq!(sender.shared.state.lock().items.len(), 0);
    }
}
