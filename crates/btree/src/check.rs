//! The invariant checker and statistics. Both walk the whole tree taking one
//! shared latch at a time, so they expect a quiescent tree (no concurrent
//! writers); under concurrent writes they may report false violations.

use crate::error::Result;
use crate::page::{self, FLAG_GROWING, PageType, REC_OVERFLOW, check_structure, violation};
use crate::store::PageStore;
use crate::tree::{BTree, SplitCounts, decode_overflow_ref};
use barracuda_base::PageId;
use std::collections::HashSet;

/// Shape and fill of a tree.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TreeStats {
    /// Levels, 1 for a tree that is a single leaf.
    pub height: usize,
    /// Pages per level, index 0 = leaves.
    pub pages_per_level: Vec<u64>,
    /// Leaf pages.
    pub leaf_pages: u64,
    /// Records in leaves.
    pub record_count: u64,
    /// Bytes used by leaves (header, live records, directory).
    pub leaf_used_bytes: u64,
    /// `leaf_used_bytes / (leaf_pages * page size)`.
    pub leaf_fill: f64,
    /// Pages in overflow chains.
    pub overflow_pages: u64,
    /// Split, merge and compression counters since the tree was opened.
    pub splits: SplitCounts,
    /// The current compression pad.
    pub zip_pad_bytes: usize,
}

struct Walk {
    free: HashSet<PageId>,
    visited: HashSet<PageId>,
    leaves: Vec<(PageId, Option<PageId>, Option<PageId>)>,
    leaf_depth: Option<usize>,
    /// Records in the leaves visited.
    entry_count: u64,
}

impl<S: PageStore> BTree<S> {
    /// Checks every structural invariant (see the crate docs); the first
    /// violation is returned as [`crate::Error::Invariant`].
    pub fn check_invariants(&self) -> Result<()> {
        let mut free = HashSet::new();
        for id in self.store.free_page_ids() {
            if !free.insert(id) {
                return Err(violation(id, "page is on the free list twice"));
            }
        }
        let mut walk = Walk {
            free,
            visited: HashSet::new(),
            leaves: Vec::new(),
            leaf_depth: None,
            entry_count: 0,
        };
        self.check_page(self.root, 0, None, None, None, &mut walk)?;
        self.check_siblings(&walk.leaves)?;
        self.check_entry_count(walk.entry_count)
    }

    /// The count the store keeps (if it keeps one) equals the leaves'
    /// records.
    fn check_entry_count(&self, counted: u64) -> Result<()> {
        match self.store.entry_count()? {
            Some(stored) if stored != counted => Err(violation(
                self.root,
                format!("stored entry count {stored}, but the leaves hold {counted}"),
            )),
            _ => Ok(()),
        }
    }

    fn check_page(
        &self,
        id: PageId,
        depth: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        level: Option<u8>,
        walk: &mut Walk,
    ) -> Result<()> {
        if walk.free.contains(&id) {
            return Err(violation(id, "free page is reachable from the tree"));
        }
        if !walk.visited.insert(id) {
            return Err(violation(id, "page reachable twice"));
        }
        let g = self.store.fix_shared(id)?;
        let leaf = match page::page_type(&g) {
            Some(PageType::Leaf) => true,
            Some(PageType::Internal) => false,
            other => return Err(violation(id, format!("tree page of type {other:?}"))),
        };
        if level.is_some_and(|l| l != page::level(&g)) || leaf != (page::level(&g) == 0) {
            return Err(violation(id, format!("wrong level {}", page::level(&g))));
        }
        check_structure(&g, id)?;
        self.check_keys(&g, id, lo, hi)?;
        self.check_fill(&g, id)?;
        if leaf {
            if *walk.leaf_depth.get_or_insert(depth) != depth {
                return Err(violation(id, "leaves at different depths"));
            }
            walk.leaves.push((id, page::left(&g), page::right(&g)));
            walk.entry_count += page::record_count(&g) as u64;
            return self.check_overflow(&g, walk);
        }
        if page::record_count(&g) == 0 {
            return Err(violation(id, "internal page without children"));
        }
        let offs: Vec<usize> = page::records(&g).collect();
        let keys: Vec<Vec<u8>> = offs
            .iter()
            .map(|&o| page::rec_key(&g, o).to_vec())
            .collect();
        let children: Vec<PageId> = offs.iter().map(|&o| page::rec_child(&g, o)).collect();
        let child_level = page::level(&g) - 1;
        drop(g);
        for (i, child) in children.iter().enumerate() {
            let clo = if i == 0 { lo } else { Some(keys[i].as_slice()) };
            let chi = keys.get(i + 1).map(Vec::as_slice).or(hi);
            self.check_page(*child, depth + 1, clo, chi, Some(child_level), walk)?;
        }
        Ok(())
    }

    fn check_keys(&self, p: &[u8], id: PageId, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
        let skip = usize::from(!page::is_leaf(p));
        let mut prev: Option<&[u8]> = None;
        for off in page::records(p).skip(skip) {
            let k = page::rec_key(p, off);
            if prev.is_some_and(|pk| pk >= k) {
                return Err(violation(id, "keys out of order within the page"));
            }
            if lo.is_some_and(|l| k < l) || hi.is_some_and(|h| k >= h) {
                return Err(violation(id, "key outside the range its separators allow"));
            }
            prev = Some(k);
        }
        Ok(())
    }

    fn check_fill(&self, p: &[u8], id: PageId) -> Result<()> {
        if id == self.root || page::flags(p) & FLAG_GROWING != 0 {
            return Ok(());
        }
        // Variable-length records make the exact threshold unreachable after
        // a redistribution; one maximal record of slack is allowed.
        let slack = self.record_bytes_max(page::is_leaf(p));
        let floor = self.merge_floor_bytes().saturating_sub(slack);
        if page::used_bytes(p) < floor {
            return Err(violation(
                id,
                format!(
                    "fill {} bytes below the merge floor {floor}",
                    page::used_bytes(p)
                ),
            ));
        }
        Ok(())
    }

    fn check_overflow(&self, p: &[u8], walk: &mut Walk) -> Result<()> {
        for off in page::records(p) {
            if page::rec_flags(p, off) & REC_OVERFLOW == 0 {
                continue;
            }
            let (first, total) = decode_overflow_ref(page::rec_value(p, off));
            let mut seen = 0;
            let mut next = Some(first);
            while let Some(id) = next {
                if walk.free.contains(&id) {
                    return Err(violation(id, "free page is reachable from the tree"));
                }
                if !walk.visited.insert(id) {
                    return Err(violation(id, "overflow page reachable twice"));
                }
                let g = self.store.fix_shared(id)?;
                if page::page_type(&g) != Some(PageType::Overflow) {
                    return Err(violation(id, "overflow chain reaches a non-overflow page"));
                }
                seen += page::overflow_payload(&g).len();
                next = page::right(&g);
            }
            if seen != total {
                return Err(violation(
                    first,
                    format!("overflow chain holds {seen} of {total} bytes"),
                ));
            }
        }
        Ok(())
    }

    fn check_siblings(&self, leaves: &[(PageId, Option<PageId>, Option<PageId>)]) -> Result<()> {
        for (i, (id, left, right)) in leaves.iter().enumerate() {
            let want_left = i.checked_sub(1).map(|j| leaves[j].0);
            let want_right = leaves.get(i + 1).map(|l| l.0);
            if *left != want_left || *right != want_right {
                return Err(violation(
                    *id,
                    format!(
                        "sibling links {left:?}/{right:?}, expected {want_left:?}/{want_right:?}"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Height, pages per level, leaf fill, overflow pages and split counts.
    pub fn stats(&self) -> Result<TreeStats> {
        let mut stats = TreeStats {
            splits: self.split_counts(),
            zip_pad_bytes: self.zip_pad_bytes(),
            ..TreeStats::default()
        };
        let mut level_ids = vec![self.root];
        while !level_ids.is_empty() {
            let mut next = Vec::new();
            let mut count = 0;
            for id in level_ids {
                let g = self.store.fix_shared(id)?;
                count += 1;
                if page::is_leaf(&g) {
                    stats.leaf_pages += 1;
                    stats.record_count += page::record_count(&g) as u64;
                    stats.leaf_used_bytes += page::used_bytes(&g) as u64;
                    stats.overflow_pages += self.count_overflow(&g)?;
                } else {
                    next.extend(page::records(&g).map(|o| page::rec_child(&g, o)));
                }
            }
            stats.pages_per_level.push(count);
            level_ids = next;
        }
        stats.pages_per_level.reverse();
        stats.height = stats.pages_per_level.len();
        stats.leaf_fill = stats.leaf_used_bytes as f64
            / (stats.leaf_pages.max(1) as f64 * self.page_size() as f64);
        Ok(stats)
    }

    fn count_overflow(&self, p: &[u8]) -> Result<u64> {
        let mut pages = 0;
        for off in page::records(p) {
            if page::rec_flags(p, off) & REC_OVERFLOW == 0 {
                continue;
            }
            let mut next = Some(decode_overflow_ref(page::rec_value(p, off)).0);
            while let Some(id) = next {
                pages += 1;
                next = page::right(&self.store.fix_shared(id)?);
            }
        }
        Ok(pages)
    }
}
