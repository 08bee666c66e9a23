//! A change's redo records: built from its operations, appended by the
//! owner, stamped on its pages.

use std::sync::Arc;

use crate::store::{PageIdSet, PoolStore, pool_error};
use barracuda_base::{Lsn, PageId};
use barracuda_btree::{LogicalKind, OpContext, Result};

/// Where a change's redo records go: the log group being built. Page ids
/// are the tree's own; `tree_id` names the tree ([`MtrTree::tree_id`]).
pub trait RedoSink {
    /// The page's whole block, as the data file would hold it.
    fn full_block(&mut self, tree_id: u16, page_id: PageId, block: &[u8]);
    /// One patch of a page commit.
    fn patch(&mut self, tree_id: u16, page_id: PageId, offset_bytes: u32, bytes: &[u8]);
    /// A page commit as the logical record that makes its patches.
    fn logical(&mut self, tree_id: u16, page_id: PageId, kind: LogicalKind, bytes: &[u8]);
    /// Ends the patches of one page commit.
    fn end_commit(&mut self);
}

/// A tree a mini-transaction changes: its store, and the id its records
/// carry in the log.
pub trait MtrTree {
    /// The tree's store.
    fn store(&self) -> &PoolStore;
    /// The tree's id in the log.
    fn tree_id(&self) -> u16;
}

impl PoolStore {
    /// Writes the redo records of `op` into `sink`: an image of each page
    /// it touched whose block the data file does not hold (a page created
    /// since it was last written, not imaged yet), then each page commit as
    /// its logical record or its patches. A page imaged here needs none of
    /// its commits: the image holds them.
    fn write_redo(&self, tree_id: u16, op: &OpContext, sink: &mut impl RedoSink) -> Result<()> {
        let touched = op
            .pages()
            .iter()
            .map(|p| p.page_id)
            .chain(op.allocated.iter().copied())
            .chain(op.freed.iter().copied());
        let mut imaged_now = PageIdSet::default();
        {
            let mut imaged = self.imaged().0.lock();
            for page_id in touched {
                if imaged.contains(&page_id) || !self.pool().is_unwritten(page_id) {
                    continue;
                }
                let guard = self.pool().fix_shared(page_id).map_err(pool_error)?;
                sink.full_block(tree_id, page_id, self.pool().image(&guard));
                imaged.insert(page_id);
                imaged_now.insert(page_id);
            }
        }
        for page in op.pages() {
            if imaged_now.contains(&page.page_id) {
                continue;
            }
            if let Some((kind, bytes)) = op.logical(page) {
                sink.logical(tree_id, page.page_id, kind, bytes);
                continue;
            }
            for (offset, bytes) in op.patches(page) {
                sink.patch(tree_id, page.page_id, offset, bytes);
            }
            sink.end_commit();
        }
        Ok(())
    }

    /// A checkpoint's target is picked: forgets the imaged pages written
    /// since. The others' images are before the target and the checkpoint
    /// writes them, so a change to them while it runs needs no second
    /// image. (Forgetting all of them would make every checkpoint log the
    /// images of new pages again, a cost that grows with how often
    /// checkpoints run.) The owner calls this where no change is logged
    /// (under its write mutex).
    pub fn forget_written_images(&self) {
        self.imaged()
            .0
            .lock()
            .retain(|&page_id| self.pool().is_unwritten(page_id));
    }

    /// Forgets every imaged page: for a checkpoint that writes every page
    /// before any change is logged again.
    pub fn forget_images(&self) {
        self.imaged().0.lock().clear();
    }
}

/// One atomic change over one or more trees: each tree's operation
/// context, and the pages of groups it logged already.
pub struct Mtr<T> {
    ops: Vec<(Arc<T>, OpContext)>,
    /// The pages changed by this change's earlier groups, if it spans
    /// several ([`Mtr::group_logged`]): they stay pinned at the pending LSN
    /// and are stamped with its last group's end.
    logged: Vec<(Arc<T>, OpContext)>,
    /// Groups of this change appended so far, each marked continued.
    groups_logged: usize,
}

impl<T> Default for Mtr<T> {
    fn default() -> Self {
        Self {
            ops: Vec::new(),
            logged: Vec::new(),
            groups_logged: 0,
        }
    }
}

impl<T: MtrTree> Mtr<T> {
    /// The operation context of `tree` within this change.
    pub fn op(&mut self, tree: &Arc<T>) -> &mut OpContext {
        let index = match self.ops.iter().position(|(t, _)| Arc::ptr_eq(t, tree)) {
            Some(index) => index,
            None => {
                self.ops.push((Arc::clone(tree), OpContext::new()));
                self.ops.len() - 1
            }
        };
        &mut self.ops[index].1
    }

    /// Each tree and its operation context not logged yet.
    pub fn ops_mut(&mut self) -> impl Iterator<Item = (&Arc<T>, &mut OpContext)> {
        self.ops.iter_mut().map(|(tree, op)| (&*tree, op))
    }

    /// Whether the change has changed a page (in a group logged already or
    /// in its operations since).
    pub fn has_changes(&self) -> bool {
        self.groups_logged > 0
            || self.ops.iter().any(|(_, op)| {
                !op.pages().is_empty() || !op.allocated.is_empty() || !op.freed.is_empty()
            })
    }

    /// Groups of this change logged so far ([`Mtr::group_logged`]).
    pub fn groups_logged(&self) -> usize {
        self.groups_logged
    }

    /// Writes the redo records of the operations not logged yet into
    /// `sink` (see [`RedoSink`]).
    pub fn write_redo(&self, sink: &mut impl RedoSink) -> Result<()> {
        for (tree, op) in &self.ops {
            tree.store().write_redo(tree.tree_id(), op, sink)?;
        }
        Ok(())
    }

    /// The records of [`Mtr::write_redo`] were appended as a group of a
    /// change that spans several: its pages wait, pinned, for the last
    /// group's LSN; their patches are dropped.
    pub fn group_logged(&mut self) {
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
        self.groups_logged += 1;
    }

    /// Gives every page the change touched, in every group, the LSN of its
    /// last group's end: once the log is durable there, the pool may write
    /// them.
    pub fn stamp(&self, end: Lsn) {
        for (tree, op) in self.ops.iter().chain(&self.logged) {
            tree.store().stamp(op, end);
        }
    }
}
