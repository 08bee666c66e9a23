//! The entry count: kept by the store, or counted leaf by leaf for a store
//! that keeps none yet.

use crate::error::{Error, Result};
use crate::page;
use crate::store::{OpContext, PageStore};
use crate::tree::BTree;

impl<S: PageStore> BTree<S> {
    /// The number of entries: the count the store keeps, changed by every
    /// insert of a new key and every delete of a present one in the same
    /// operation, so reading it costs one shared latch of the store's meta
    /// page. A store that keeps no count yet (a file written before counts
    /// were kept) is counted leaf by leaf instead, until
    /// [`BTree::recount_in`] stores the count.
    ///
    /// Under concurrent writers the count may lag an operation that has
    /// changed its leaf but not yet the count.
    pub fn len(&self) -> Result<u64> {
        match self.store.entry_count()? {
            Some(count) => Ok(count),
            None => self.count_entries(),
        }
    }

    /// Whether the tree holds no entry ([`BTree::len`] is 0).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Counts the leaves' entries and stores the count in the store within
    /// `op`: the upgrade of a store that kept none. Expects no concurrent
    /// writer. Returns the count.
    pub fn recount_in(&self, op: &mut OpContext) -> Result<u64> {
        let count = self.count_entries()?;
        self.store.set_entry_count(count, op)?;
        Ok(count)
    }

    /// The entries in the leaves, following the right links from the
    /// leftmost leaf with latch coupling (reads every leaf).
    pub(crate) fn count_entries(&self) -> Result<u64> {
        let (mut g, mut id) = self.edge_leaf_shared(false)?;
        let mut count = 0u64;
        loop {
            if !page::is_leaf(&g) {
                return Err(Error::Corrupted {
                    page_id: id,
                    reason: "a leaf's right link leads to a non-leaf".into(),
                });
            }
            count += page::record_count(&g) as u64;
            let Some(next) = page::right(&g) else {
                return Ok(count);
            };
            let right = self.store.fix_shared(next)?;
            (g, id) = (right, next);
        }
    }

    /// Adds the entries `op`'s inserts and deletes counted
    /// ([`OpContext::entry_delta`]) to the store's kept count, within `op`.
    /// A caller of the `_in` operations calls this once before logging
    /// `op`; [`BTree::insert`] and [`BTree::delete`] do it themselves. Takes
    /// the meta page's latch: call it with no latch of this tree held.
    pub fn settle_entry_count(&self, op: &mut OpContext) -> Result<()> {
        let delta = std::mem::take(&mut op.entry_delta);
        if delta == 0 {
            return Ok(());
        }
        self.store.add_entry_count(delta, op)
    }
}
