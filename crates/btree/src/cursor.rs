//! Cursors: seek, first, last, next, prev.
//!
//! A cursor holds no latch between calls (so the thread that owns it may
//! write to the tree meanwhile). It copies one leaf's worth of entries at a
//! time under that leaf's shared latch. Moving forward past a leaf follows
//! the right sibling link with latch coupling (left to right, the same order
//! writers use). Moving backward never latches right to left while holding a
//! latch: it releases the leaf, latches the left sibling, and checks that the
//! sibling still links back to where it came from; if not (a merge or split
//! happened in between), it descends again from the root.
//!
//! Entries are not a snapshot: a cursor sees every key that was present for
//! the whole scan, and may or may not see keys inserted or deleted during it.
//!
//! # Read-ahead
//!
//! When [`Cursor::next`] moves to a new leaf and every leaf hinted before
//! has been reached, the cursor hints the next window of
//! [`crate::TreeConfig::read_ahead_pages`] leaves to the store
//! ([`PageStore::prefetch`]): the leaves after the new one in its parent's
//! child list, read while the descent held the parent anyway (or, at the
//! parent's last child, its right sibling, the first leaf under the next
//! parent). The hint is given after every latch is released, and each leaf
//! is hinted once, in scan order. Seeks, backward moves and point reads
//! hint nothing.

use crate::error::Result;
use crate::page;
use crate::store::PageStore;
use crate::tree::{BTree, check_key, expect_node};
use barracuda_base::PageId;
use std::collections::VecDeque;
use std::ops::Bound;

/// A key and its value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A position in a tree; see the module docs.
pub struct Cursor<'t, S: PageStore> {
    tree: &'t BTree<S>,
    batch: Vec<Entry>,
    index: usize,
    /// Leaves hinted to the store and not reached yet, in scan order.
    hinted: VecDeque<PageId>,
}

/// What [`BTree::forward_leaf`] hands each leaf to: the leaf, latched, and
/// the key span its parent gives it (the first leaf only); true if the
/// walk ends there.
pub(crate) type LeafVisitor<'v> = dyn FnMut(&[u8], Option<&page::KeySpan>) -> Result<bool> + 'v;

/// The leaf a forward batch came from, and what read-ahead needs to know
/// about the leaves after it.
pub(crate) struct Visited {
    leaf: PageId,
    /// Up to `read_ahead_pages` leaves after it under its parent.
    following: Vec<PageId>,
    /// Its right sibling.
    right: Option<PageId>,
}

impl<'t, S: PageStore> Cursor<'t, S> {
    pub(crate) fn new(tree: &'t BTree<S>) -> Self {
        Self {
            tree,
            batch: Vec::new(),
            index: 0,
            hinted: VecDeque::new(),
        }
    }

    /// The current entry, if the cursor is on one.
    pub fn entry(&self) -> Option<&Entry> {
        self.batch.get(self.index)
    }

    /// The current key.
    pub fn key(&self) -> Option<&[u8]> {
        self.entry().map(|e| e.0.as_slice())
    }

    /// The current value.
    pub fn value(&self) -> Option<&[u8]> {
        self.entry().map(|e| e.1.as_slice())
    }

    fn set_forward(&mut self, batch: Vec<Entry>) -> bool {
        self.batch = batch;
        self.index = 0;
        !self.batch.is_empty()
    }

    fn set_backward(&mut self, batch: Vec<Entry>) -> bool {
        self.index = batch.len().saturating_sub(1);
        self.batch = batch;
        !self.batch.is_empty()
    }

    /// Moves to the first key >= `key`; false if there is none.
    pub fn seek(&mut self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        let (batch, _) = self.tree.collect_forward(Bound::Included(key), 0)?;
        Ok(self.set_forward(batch))
    }

    /// Moves to the last key <= `key`; false if there is none.
    pub fn seek_for_prev(&mut self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        let batch = self.tree.collect_backward(Bound::Included(key))?;
        Ok(self.set_backward(batch))
    }

    /// Moves to the smallest key; false if the tree is empty.
    pub fn first(&mut self) -> Result<bool> {
        let (batch, _) = self.tree.collect_forward(Bound::Unbounded, 0)?;
        Ok(self.set_forward(batch))
    }

    /// Moves to the largest key; false if the tree is empty.
    pub fn last(&mut self) -> Result<bool> {
        let batch = self.tree.collect_backward(Bound::Unbounded)?;
        Ok(self.set_backward(batch))
    }

    /// Moves to the next key; false (and off the tree) at the end.
    #[allow(
        clippy::should_implement_trait,
        reason = "fallible, returns Result<bool>"
    )]
    pub fn next(&mut self) -> Result<bool> {
        if self.index + 1 < self.batch.len() {
            self.index += 1;
            return Ok(true);
        }
        let Some((key, _)) = self.entry() else {
            return Ok(false);
        };
        let key = key.clone();
        let window = self.tree.config.read_ahead_pages;
        let (batch, visited) = self.tree.collect_forward(Bound::Excluded(&key), window)?;
        // No latch is held here: hinting cannot wait on one.
        if window > 0 && !batch.is_empty() {
            self.read_ahead(visited);
        }
        Ok(self.set_forward(batch))
    }

    /// The scan reached `visited.leaf`: see [`hint_ahead`].
    fn read_ahead(&mut self, visited: Visited) {
        hint_ahead(self.tree.store.as_ref(), &mut self.hinted, visited);
    }

    /// Moves to the previous key; false (and off the tree) at the start.
    pub fn prev(&mut self) -> Result<bool> {
        if self.index > 0 && self.index < self.batch.len() {
            self.index -= 1;
            return Ok(true);
        }
        let Some((key, _)) = self.entry() else {
            return Ok(false);
        };
        let key = key.clone();
        let batch = self.tree.collect_backward(Bound::Excluded(&key))?;
        Ok(self.set_backward(batch))
    }
}

pub(crate) fn above(key: &[u8], bound: Bound<&[u8]>) -> bool {
    match bound {
        Bound::Included(b) => key >= b,
        Bound::Excluded(b) => key > b,
        Bound::Unbounded => true,
    }
}

pub(crate) fn below(key: &[u8], bound: Bound<&[u8]>) -> bool {
    match bound {
        Bound::Included(b) => key <= b,
        Bound::Excluded(b) => key < b,
        Bound::Unbounded => true,
    }
}

/// A forward scan reached `visited.leaf`: forget the leaves hinted up to
/// it, and once none is left, hint the next window (see the module docs).
pub(crate) fn hint_ahead<S: PageStore>(store: &S, hinted: &mut VecDeque<PageId>, visited: Visited) {
    match hinted.iter().position(|&h| h == visited.leaf) {
        Some(i) => drop(hinted.drain(..=i)),
        // Not where the last window led (a seek, or the tree changed).
        None => hinted.clear(),
    }
    if !hinted.is_empty() {
        return;
    }
    let window: Vec<PageId> = if visited.following.is_empty() {
        // The parent's last child: the next leaf is under the next
        // parent, and only this leaf's link knows it.
        visited.right.into_iter().collect()
    } else {
        visited.following
    };
    if !window.is_empty() {
        store.prefetch(&window);
        hinted.extend(window);
    }
}

impl<S: PageStore> BTree<S> {
    /// A cursor on this tree (positioned nowhere until a seek).
    pub fn cursor(&self) -> Cursor<'_, S> {
        Cursor::new(self)
    }

    fn leaf_entries(&self, p: &[u8], offsets: impl Iterator<Item = usize>) -> Result<Vec<Entry>> {
        offsets
            .map(|off| Ok((page::rec_key(p, off).to_vec(), self.load_value(p, off)?)))
            .collect()
    }

    /// The entries past `bound` in the first leaf that has any, and that
    /// leaf (with up to `read_ahead` leaves after it under its parent).
    fn collect_forward(
        &self,
        bound: Bound<&[u8]>,
        read_ahead: usize,
    ) -> Result<(Vec<Entry>, Visited)> {
        let mut entries = Vec::new();
        let visited = self.forward_leaf(bound, read_ahead, &mut |p, span| {
            // Entered by a slot search (as a scan), not walked from the
            // leaf's first record.
            entries = self.leaf_entries(p, page::leaf_records_from(p, bound, span))?;
            Ok(!entries.is_empty())
        })?;
        Ok((entries, visited))
    }

    /// Hands `take` the first leaf (latched shared) whose keys go past
    /// `bound`, with the key span its parent gives it (for the first leaf
    /// only): `take` returns whether the leaf has a key past it, and if
    /// not, the walk moves right. Returns that leaf (with up to
    /// `read_ahead` leaves after it under its parent).
    pub(crate) fn forward_leaf(
        &self,
        bound: Bound<&[u8]>,
        read_ahead: usize,
        take: &mut LeafVisitor<'_>,
    ) -> Result<Visited> {
        // A move past a leaf's last key descends to that leaf and steps
        // right: one more id than the window, for the one stepped onto.
        let ids_max = if read_ahead > 0 { read_ahead + 1 } else { 0 };
        let (mut g, mut id, mut following, mut span) = match bound {
            Bound::Included(k) | Bound::Excluded(k) => {
                let found = self.leaf_shared_following(k, ids_max)?;
                (found.guard, found.id, found.following, found.span)
            }
            Bound::Unbounded => {
                let (g, id) = self.edge_leaf_shared(false)?;
                (g, id, Vec::new(), None)
            }
        };
        loop {
            // The parent's span bounds the first leaf only.
            let found = take(&g, span.take().as_ref())?;
            let right = page::right(&g);
            let Some(next) = right.filter(|_| !found) else {
                following.truncate(read_ahead);
                return Ok(Visited {
                    leaf: id,
                    following,
                    right,
                });
            };
            // Coupling: latch the right sibling before releasing this leaf.
            let ng = self.store.fix_shared(next)?;
            expect_node(&ng, next)?;
            g = ng;
            id = next;
            // The parent's list goes on past this leaf only if it named it.
            match following.iter().position(|&f| f == next) {
                Some(i) => drop(following.drain(..=i)),
                None => following.clear(),
            }
        }
    }

    /// The entries before `bound` in the last leaf that has any.
    fn collect_backward(&self, bound: Bound<&[u8]>) -> Result<Vec<Entry>> {
        let mut entries = Vec::new();
        self.backward_leaf(bound, &mut |p| {
            // Ascending records: the first not below the bound ends them.
            let before = page::records(p).take_while(|&off| below(page::rec_key(p, off), bound));
            entries = self.leaf_entries(p, before)?;
            Ok(!entries.is_empty())
        })?;
        Ok(entries)
    }

    /// Hands `take` the last leaf (latched shared) whose keys go before
    /// `bound`: `take` returns whether the leaf has a key before it, and if
    /// not, the walk moves left (never latching right to left while holding
    /// a latch; see the module docs).
    pub(crate) fn backward_leaf(
        &self,
        bound: Bound<&[u8]>,
        take: &mut dyn FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        'descend: loop {
            let (g, mut came_from) = match bound {
                Bound::Included(k) | Bound::Excluded(k) => self.leaf_shared(k)?,
                Bound::Unbounded => self.edge_leaf_shared(true)?,
            };
            if take(&g)? {
                return Ok(());
            }
            let mut left = page::left(&g);
            drop(g);
            while let Some(id) = left {
                let lg = self.store.fix_shared(id)?;
                if !page::is_leaf(&lg) || page::right(&lg) != Some(came_from) {
                    continue 'descend;
                }
                if take(&lg)? {
                    return Ok(());
                }
                came_from = id;
                left = page::left(&lg);
            }
            return Ok(());
        }
    }
}
