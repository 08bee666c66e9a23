//! The write path: one writer at a time under the write mutex, its changes
//! logged as one redo group (or several, for a write too large for one),
//! and the wait for durability outside the mutex (group commit).

use std::sync::atomic::Ordering;

use barracuda_base::{Lsn, PageId};
use barracuda_btree::LogicalKind;
use barracuda_mtr::{Mtr, MtrTree, PoolStore, RedoSink};

use super::{DbInner, TreeInner, logged_page_id};
use crate::error::Result;
use crate::options::Durability;
use crate::wal::{GROUP_BYTES_MAX, RedoGroup};

/// What the write mutex guards.
#[derive(Default)]
pub(super) struct WriteState {
    /// The group being built (kept to reuse its buffer).
    group: RedoGroup,
}

/// The changes of one atomic write: a mini-transaction over the trees it
/// changes.
pub(crate) type Writer = Mtr<TreeInner>;

impl MtrTree for TreeInner {
    fn store(&self) -> &PoolStore {
        self.tree.store()
    }

    fn tree_id(&self) -> u16 {
        self.entry.id
    }
}

/// The log group being built, as the mini-transaction writes its records:
/// a page is named in the log by its tree and its id ([`logged_page_id`]).
impl RedoSink for RedoGroup {
    fn full_block(&mut self, tree_id: u16, page_id: PageId, block: &[u8]) {
        RedoGroup::full_block(self, logged_page_id(tree_id, page_id), block);
    }

    fn patch(&mut self, tree_id: u16, page_id: PageId, offset_bytes: u32, bytes: &[u8]) {
        RedoGroup::patch(self, logged_page_id(tree_id, page_id), offset_bytes, bytes);
    }

    fn logical(&mut self, tree_id: u16, page_id: PageId, kind: LogicalKind, bytes: &[u8]) {
        RedoGroup::logical(self, logged_page_id(tree_id, page_id), kind, bytes);
    }

    fn end_commit(&mut self) {
        RedoGroup::end_commit(self);
    }
}

/// Adds each tree's counted inserts and deletes to its meta page, once per
/// write (`BTree::settle_entry_count`).
fn settle_entry_counts(writer: &mut Writer) -> Result<()> {
    for (tree, op) in writer.ops_mut() {
        tree.tree.settle_entry_count(op)?;
    }
    Ok(())
}

/// Lets a write that may span several log groups end one between two of
/// its operations ([`DbInner::write_spanning`]).
pub(crate) struct GroupSplit<'a> {
    db: &'a DbInner,
    state: &'a mut WriteState,
}

impl GroupSplit<'_> {
    /// Logs the changes `writer` made so far as a group marked continued:
    /// recovery applies it only with the rest of the write, and drops it
    /// if the log ends first. Its pages stay pinned until the write's last
    /// group is logged, so none reaches the data file before; no checkpoint
    /// can pass it either (the write holds the write mutex).
    pub(crate) fn next_group(&mut self, writer: &mut Writer) -> Result<()> {
        if self.db.append_group(self.state, writer, true)?.is_some() {
            writer.group_logged();
        }
        Ok(())
    }
}

impl DbInner {
    /// Runs `f` as one atomic write: its changes are logged as one group.
    pub(crate) fn write<R>(
        &self,
        durability: Durability,
        f: impl FnOnce(&mut Writer) -> Result<R>,
    ) -> Result<R> {
        self.write_spanning(durability, self.group_bytes_max(), |writer, _| f(writer))
    }

    /// Runs `f` as one atomic write that may span several log groups: `f`
    /// may end a group between two operations with [`GroupSplit`]. The log
    /// must hold all of it (no checkpoint passes a write): `log_bytes` is
    /// its most, at most [`DbInner::batch_bytes_max`], and the write mutex
    /// is taken once the log has that much room.
    pub(crate) fn write_spanning<R>(
        &self,
        durability: Durability,
        log_bytes: usize,
        f: impl FnOnce(&mut Writer, &mut GroupSplit<'_>) -> Result<R>,
    ) -> Result<R> {
        self.check_failure()?;
        let mut state = self.lock_with_log_room(log_bytes)?;
        let applied = self.write_locked(&mut state, f);
        drop(state);
        let (value, end) = applied?;
        if let Some(end) = end {
            self.wait_durable(durability, end)?;
        }
        Ok(value)
    }

    /// Runs `f` as one atomic write under the write mutex (held by the
    /// caller) and logs it; returns its value and its last group's end, if
    /// it changed anything. Does not wait for durability.
    pub(super) fn write_locked<R>(
        &self,
        state: &mut WriteState,
        f: impl FnOnce(&mut Writer, &mut GroupSplit<'_>) -> Result<R>,
    ) -> Result<(R, Option<Lsn>)> {
        let mut writer = Writer::default();
        let mut split = GroupSplit { db: self, state };
        let result = f(&mut writer, &mut split).and_then(|value| {
            settle_entry_counts(&mut writer)?;
            Ok(value)
        });
        if let Err(error) = &result
            && writer.has_changes()
        {
            // An operation failed after changing pages (an I/O error in the
            // middle of a split, a pool with no memory left for a batch).
            // Logging part of it would break atomicity and its pages cannot
            // be rolled back: refuse all further writes; reopening recovers
            // the state before it.
            self.fail(error);
            return result.map(|value| (value, None));
        }
        let end = self.log_ops(state, &writer).inspect_err(|e| self.fail(e))?;
        Ok((result?, end))
    }

    /// Makes everything logged so far durable, unless `durability` is
    /// [`Durability::NoSync`]: the end of a write made of several.
    pub(crate) fn make_durable(&self, durability: Durability) -> Result<()> {
        match durability {
            Durability::Sync | Durability::Group => self.wal.flush_to(self.wal.next_lsn()),
            Durability::NoSync => Ok(()),
        }
    }

    fn wait_durable(&self, durability: Durability, end: Lsn) -> Result<()> {
        match durability {
            Durability::Sync => self.wal.flush_to(end),
            Durability::Group => {
                if self.wal.durable_lsn() < end {
                    std::thread::sleep(self.options.group_commit_window);
                }
                self.wal.flush_to(end)
            }
            Durability::NoSync => Ok(()),
        }
    }

    /// The write mutex, once the log has room for `log_bytes`; makes room
    /// with a checkpoint (without the mutex) if needed.
    fn lock_with_log_room(
        &self,
        log_bytes: usize,
    ) -> Result<parking_lot::MutexGuard<'_, WriteState>> {
        loop {
            let state = self.write.lock();
            if self.log_has_room(log_bytes) {
                // The head start: an eighth of the budget, so that the
                // checkpoint can finish before the writers reach the end.
                let head_start = (self.wal.log_bytes() / 8) as usize;
                if !self.log_has_room(log_bytes + head_start)
                    && !self.checkpoint_wanted.swap(true, Ordering::Relaxed)
                {
                    self.wake.notify_all();
                }
                return Ok(state);
            }
            drop(state);
            self.checkpoint_for_room(log_bytes)?;
        }
    }

    /// The most log bytes one log group may need: one operation's worst
    /// case must fit.
    pub(crate) fn group_bytes_max(&self) -> usize {
        GROUP_BYTES_MAX.min((self.wal.log_bytes() / 4) as usize)
    }

    /// The most log bytes one atomic write may need in all: half the budget.
    /// A write larger than a group spans several, and no checkpoint can
    /// pass it while it is applied, so the budget must hold all of it.
    pub(crate) fn batch_bytes_max(&self) -> usize {
        (self.wal.log_bytes() / 2) as usize
    }

    /// Logs the operations of `writer` as its last group (or its only one)
    /// and stamps every page it changed, in this group and in earlier ones.
    /// Returns the group's end, or `None` if nothing changed.
    pub(super) fn log_ops(&self, state: &mut WriteState, writer: &Writer) -> Result<Option<Lsn>> {
        let Some(end) = self.append_group(state, writer, false)? else {
            return Ok(None);
        };
        writer.stamp(end);
        Ok(Some(end))
    }

    /// Appends the changes `writer` holds as one group, marked `continued`
    /// or not, and returns its end. Nothing is appended (`None`) for no
    /// changes, unless they end a write whose earlier groups were appended:
    /// its last group is then empty, the mark that finishes it.
    fn append_group(
        &self,
        state: &mut WriteState,
        writer: &Writer,
        continued: bool,
    ) -> Result<Option<Lsn>> {
        let group = &mut state.group;
        group.clear();
        writer.write_redo(group)?;
        if group.is_empty() && (continued || writer.groups_logged() == 0) {
            return Ok(None);
        }
        group.set_continued(continued);
        Ok(Some(self.wal.append(group)?.end))
    }
}
