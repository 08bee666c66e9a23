//! The write path: one writer at a time under the write mutex, its changes
//! logged as one redo group (or several, for a write too large for one),
//! and the wait for durability outside the mutex (group commit).

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use barracuda_base::{Lsn, PageId};
use barracuda_btree::OpContext;
use barracuda_pool::PageIdHasher;

use super::{DbInner, TreeInner, logged_page_id};
use crate::error::Result;
use crate::options::Durability;
use crate::wal::{GROUP_BYTES_MAX, RedoGroup};

/// A set of page ids, hashed by one multiplication (page ids need no
/// flood-resistant hash, and SipHash showed in profiles of `append_group`).
pub(super) type PageIdSet = HashSet<PageId, BuildHasherDefault<PageIdHasher>>;

/// What the write mutex guards.
#[derive(Default)]
pub(super) struct WriteState {
    /// Logged page ids of unwritten pages whose image is in the log (after
    /// the last checkpoint, or before it while that checkpoint writes them).
    pub(super) imaged: PageIdSet,
    /// The group being built (kept to reuse its buffer).
    group: RedoGroup,
}

/// The changes of one atomic write, per tree.
#[derive(Default)]
pub(crate) struct Writer {
    ops: Vec<(Arc<TreeInner>, OpContext)>,
    /// The pages changed by this write's earlier groups, if it spans
    /// several ([`GroupSplit::next_group`]): they stay pinned at the
    /// pending LSN and are stamped with its last group's end.
    logged: Vec<(Arc<TreeInner>, OpContext)>,
    /// Groups of this write appended so far, each marked continued.
    groups_appended: usize,
}

impl Writer {
    /// Whether any operation of this write changed a page.
    fn has_changes(&self) -> bool {
        self.groups_appended > 0
            || self.ops.iter().any(|(_, op)| {
                !op.pages().is_empty() || !op.allocated.is_empty() || !op.freed.is_empty()
            })
    }

    /// Moves the pages of the changes just logged (patches dropped) to
    /// `logged`, to be stamped with the write's last group.
    fn move_logged(&mut self) {
        for (tree, op) in &mut self.ops {
            let index = match self.logged.iter().position(|(t, _)| Arc::ptr_eq(t, tree)) {
                Some(index) => index,
                None => {
                    self.logged.push((Arc::clone(tree), OpContext::new()));
                    self.logged.len() - 1
                }
            };
            op.move_logged_to(&mut self.logged[index].1);
        }
    }

    /// Adds each tree's counted inserts and deletes to its meta page, once
    /// per write (`Tree::settle_entry_count`).
    fn settle_entry_counts(&mut self) -> Result<()> {
        for (tree, op) in &mut self.ops {
            tree.tree.settle_entry_count(op)?;
        }
        Ok(())
    }

    /// The operation context of `tree` within this write.
    pub(crate) fn op(&mut self, tree: &Arc<TreeInner>) -> &mut OpContext {
        let index = match self.ops.iter().position(|(t, _)| Arc::ptr_eq(t, tree)) {
            Some(index) => index,
            None => {
                self.ops.push((Arc::clone(tree), OpContext::new()));
                self.ops.len() - 1
            }
        };
        &mut self.ops[index].1
    }
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
            writer.move_logged();
            writer.groups_appended += 1;
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
            writer.settle_entry_counts()?;
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
        for (tree, op) in writer.ops.iter().chain(&writer.logged) {
            tree.tree.store().stamp(op, end);
        }
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
        let WriteState { imaged, group } = state;
        group.clear();
        for (tree, op) in &writer.ops {
            let pool = tree.pool();
            let touched = op
                .pages()
                .iter()
                .map(|p| p.page_id)
                .chain(op.allocated.iter().copied())
                .chain(op.freed.iter().copied());
            let mut imaged_now = PageIdSet::default();
            for page_id in touched {
                let logged = logged_page_id(tree.entry.id, page_id);
                if imaged.contains(&logged) || !pool.is_unwritten(page_id) {
                    continue;
                }
                let guard = pool.fix_shared(page_id)?;
                group.full_block(logged, pool.image(&guard));
                imaged.insert(logged);
                imaged_now.insert(page_id);
            }
            for page in op.pages() {
                if imaged_now.contains(&page.page_id) {
                    continue;
                }
                let logged = logged_page_id(tree.entry.id, page.page_id);
                if let Some((kind, bytes)) = op.logical(page) {
                    group.logical(logged, kind, bytes);
                    continue;
                }
                for (offset, bytes) in op.patches(page) {
                    group.patch(logged, offset, bytes);
                }
                group.end_commit();
            }
        }
        if group.is_empty() && (continued || writer.groups_appended == 0) {
            return Ok(None);
        }
        group.set_continued(continued);
        Ok(Some(self.wal.append(group)?.end))
    }
}
