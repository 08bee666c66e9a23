//! Root-to-leaf descent: latch coupling for readers, and the exclusively
//! latched path that a writer holds from the highest page its change may
//! reach down to the leaf.

use crate::error::{Error, Result};
use crate::page;
use crate::store::{PageStore, PageWrite};
use crate::tree::{BTree, expect_node};
use barracuda_base::PageId;

/// A leaf found for a key ([`BTree::leaf_shared_following`]), latched, with
/// what its parent said about it.
pub(crate) struct FoundLeaf<G> {
    pub(crate) guard: G,
    pub(crate) id: PageId,
    /// Up to the asked number of leaves after it under the same parent.
    pub(crate) following: Vec<PageId>,
    /// The key span its parent gives it.
    pub(crate) span: Option<page::KeySpan>,
}

/// The ancestor that holds the separator bounding the right neighbour of
/// leaf `path[j]` from the left: the lowest `path[at]` whose child on the
/// path is not its last; that separator's index and child. `None` if the
/// path does not reach up that far.
pub(super) fn right_bound<G: PageWrite>(path: &[G], j: usize) -> Option<(usize, PageId)> {
    (0..j).rev().find_map(|at| {
        let p = &path[at];
        let below = path[at + 1].page_id();
        let mut offs = page::records(p).skip_while(|&o| page::rec_child(p, o) != below);
        offs.next()?;
        offs.next().map(|next| (at, page::rec_child(p, next)))
    })
}

/// What the parent said of a leaf as an optimistic descent passed it.
#[derive(Default)]
pub(super) struct LeafHint {
    /// The parent had a child after the leaf: the leaf's right link was
    /// its merge sibling.
    pub(super) right_in_parent: bool,
    /// The leaf's key range (for [`page::probe_in`]).
    pub(super) span: Option<page::KeySpan>,
}

impl<S: PageStore> BTree<S> {
    /// Descends toward `key` from the root by latch coupling, every page
    /// fixed by `fix` (shared, or as a point read's: see
    /// [`PageStore::fix_shared_point`]), and returns the first page at
    /// `level` or below (0: the leaf) with its id. Every descent of a key
    /// goes through here.
    fn descend<'a>(
        &'a self,
        key: &[u8],
        level: u8,
        fix: impl Fn(PageId) -> Result<S::Shared<'a>>,
    ) -> Result<(S::Shared<'a>, PageId)> {
        let mut g = fix(self.root)?;
        let mut id = self.root;
        loop {
            expect_node(&g, id)?;
            if page::is_leaf(&g) || page::level(&g) <= level {
                return Ok((g, id));
            }
            id = page::child_for(&g, key).1;
            g = fix(id)?;
        }
    }

    /// The leaf covering `key`, latched shared, by latch coupling.
    pub(crate) fn leaf_shared(&self, key: &[u8]) -> Result<(S::Shared<'_>, PageId)> {
        self.descend(key, 0, |id| self.store.fix_shared(id))
    }

    /// The distinct leaves `keys` fall in (see [`BTree::leaf_id_for`]),
    /// sorted; as many as were found before an error.
    pub(super) fn leaf_ids_for<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> Vec<PageId> {
        let mut leaves = Vec::new();
        for key in keys {
            match self.leaf_id_for(key) {
                Ok(Some(leaf)) => leaves.push(leaf),
                // The root is the only leaf, and it is cached.
                Ok(None) | Err(_) => break,
            }
        }
        leaves.sort_unstable();
        leaves.dedup();
        leaves
    }

    /// The id of the leaf `key` falls in, read from its parent without
    /// fixing the leaf; `None` when the root is a leaf.
    fn leaf_id_for(&self, key: &[u8]) -> Result<Option<PageId>> {
        let (parent, _) = self.descend(key, 1, |id| self.store.fix_shared(id))?;
        Ok((!page::is_leaf(&parent)).then(|| page::child_for(&parent, key).1))
    }

    /// [`BTree::leaf_shared`] for a point read: every page is fixed with
    /// [`PageStore::fix_shared_point`].
    pub(super) fn leaf_shared_point(
        &self,
        key: &[u8],
    ) -> Result<(S::Shared<'_>, Option<page::KeySpan>)> {
        let found = self.leaf_found(key, 0, |id| self.store.fix_shared_point(id))?;
        Ok((found.guard, found.span))
    }

    /// Like [`BTree::leaf_shared`], and also the ids of up to `max` leaves
    /// after it under the same parent (empty when the root is the leaf) and
    /// the key span the parent gives the leaf (for [`page::probe_in`]).
    pub(crate) fn leaf_shared_following(
        &self,
        key: &[u8],
        max: usize,
    ) -> Result<FoundLeaf<S::Shared<'_>>> {
        self.leaf_found(key, max, |id| self.store.fix_shared(id))
    }

    /// [`BTree::leaf_shared_following`], every page fixed with `fix`.
    fn leaf_found<'a>(
        &'a self,
        key: &[u8],
        max: usize,
        fix: impl Fn(PageId) -> Result<S::Shared<'a>>,
    ) -> Result<FoundLeaf<S::Shared<'a>>> {
        let (parent, parent_id) = self.descend(key, 1, &fix)?;
        if page::is_leaf(&parent) {
            return Ok(FoundLeaf {
                guard: parent,
                id: parent_id,
                following: Vec::new(),
                span: None,
            });
        }
        let (off, id) = page::child_for(&parent, key);
        let span = page::KeySpan::of_child(&parent, off);
        let following = page::records(&parent)
            .skip_while(|&o| o != off)
            .skip(1)
            .take(max)
            .map(|o| page::rec_child(&parent, o))
            .collect();
        // Fixed while the parent is still latched (latch coupling).
        let leaf = fix(id)?;
        expect_node(&leaf, id)?;
        if !page::is_leaf(&leaf) {
            return Err(Error::Corrupted {
                page_id: id,
                reason: "a child of a level-1 page is not a leaf".into(),
            });
        }
        drop(parent);
        Ok(FoundLeaf {
            guard: leaf,
            id,
            following,
            span,
        })
    }

    /// The leftmost or rightmost leaf, latched shared.
    pub(crate) fn edge_leaf_shared(&self, rightmost: bool) -> Result<(S::Shared<'_>, PageId)> {
        let mut g = self.store.fix_shared(self.root)?;
        let mut id = self.root;
        loop {
            expect_node(&g, id)?;
            if page::is_leaf(&g) {
                return Ok((g, id));
            }
            let off = if rightmost {
                page::records(&g).last()
            } else {
                page::records(&g).next()
            };
            let off = off.ok_or_else(|| Error::Corrupted {
                page_id: id,
                reason: "internal page without records".into(),
            })?;
            id = page::rec_child(&g, off);
            let child = self.store.fix_shared(id)?;
            g = child;
        }
    }

    /// The leaf covering `key`, latched exclusively, with shared latches on
    /// the way down (the optimistic path), and what the parent said of it
    /// when the descent passed (hints: the parent is no longer latched).
    pub(super) fn leaf_exclusive(&self, key: &[u8]) -> Result<(S::Exclusive<'_>, LeafHint)> {
        loop {
            let mut g = self.store.fix_shared(self.root)?;
            let mut id = self.root;
            expect_node(&g, id)?;
            if page::is_leaf(&g) {
                drop(g);
                let x = self.store.fix_exclusive(self.root)?;
                if page::is_leaf(&x) {
                    return Ok((x, LeafHint::default()));
                }
                // The root split while unlatched: descend again.
                continue;
            }
            loop {
                let (off, child) = page::child_for(&g, key);
                if page::level(&g) == 1 {
                    let hint = LeafHint {
                        right_in_parent: page::rec_next(&g, off) != 0,
                        span: page::KeySpan::of_child(&g, off),
                    };
                    let x = self.store.fix_exclusive(child)?;
                    expect_node(&x, child)?;
                    return Ok((x, hint));
                }
                id = child;
                let next = self.store.fix_shared(id)?;
                g = next;
                expect_node(&g, id)?;
            }
        }
    }

    /// The path to the leaf covering `key`, latched exclusively top-down;
    /// ancestors are released as soon as a child is `safe` (unless
    /// `keep_all`). The first element is the root or the parent of the
    /// highest page a structure change may reach.
    pub(super) fn path_exclusive(
        &self,
        key: &[u8],
        keep_all: bool,
        safe: impl Fn(&[u8]) -> bool,
    ) -> Result<Vec<S::Exclusive<'_>>> {
        let mut path = vec![self.store.fix_exclusive(self.root)?];
        loop {
            let top = &path[path.len() - 1];
            expect_node(top, top.page_id())?;
            if page::is_leaf(top) {
                return Ok(path);
            }
            let child = page::child_for(top, key).1;
            let g = self.store.fix_exclusive(child)?;
            if !keep_all && safe(&g) {
                path.clear();
            }
            path.push(g);
        }
    }

    pub(super) fn safe_for_insert(&self, p: &[u8], leaf_record_bytes: usize) -> bool {
        let need = if page::is_leaf(p) {
            leaf_record_bytes
        } else {
            self.record_bytes_max(false)
        };
        page::has_room(p, need, self.limit_bytes())
    }

    pub(super) fn safe_for_delete(&self, p: &[u8]) -> bool {
        page::used_bytes(p) >= self.threshold_bytes() + self.record_bytes_max(page::is_leaf(p))
    }
}
