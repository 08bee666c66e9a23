//! Visitor scans: [`BTree::scan`] and [`BTree::scan_rev`] hand each entry of
//! a key range to a closure as borrowed `&[u8]` slices, without allocating
//! per entry.
//!
//! A cursor copies every entry into its own `Vec`s (and a `Range` above it
//! copies them again); a scan that only reads a few bytes of each value
//! (`min(old_id)` over 1,000 rows, ~2,200 entries and ~3 MB of values) spent
//! ~6 to 8 ms of CPU per query on those copies. A scan copies each leaf's
//! in-range entries once, back to back, into one buffer reused for every
//! leaf, under the leaf's shared latch; it then releases the latch and calls
//! the visitor on the copy. So the visitor runs with no latch held: it may
//! read or write the tree (what it writes may or may not be seen by the rest
//! of the scan), and a slow visitor does not block writers. Values in
//! overflow chains are read into the same buffer while the leaf is latched.
//! The first leaf is entered through its slot directory (a binary search,
//! not a walk from its first record), and only its first
//! `SCAN_FIRST_COPY_ENTRIES` entries are copied before the visitor first
//! runs: a short scan (a range of ten) copies ten-odd entries, not half a
//! leaf, and a long one pays one more descent for the rest of that leaf.
//!
//! Moving from one leaf to the next descends again from the root past the
//! last key visited, as [`crate::Cursor::next`] does, and a forward scan
//! reads ahead exactly as a cursor does (see [`crate::cursor`]). The view is
//! the cursor's: every key present for the whole scan is visited once, in
//! order; keys inserted or deleted during it may or may not be.

use std::collections::VecDeque;
use std::ops::{Bound, Range};

use crate::cursor::{above, below, hint_ahead};
use crate::error::Result;
use crate::page;
use crate::store::PageStore;
use crate::tree::BTree;

/// Entries a forward scan copies from its first leaf before it first
/// visits; the rest of that leaf is copied by a second descent, if wanted.
const SCAN_FIRST_COPY_ENTRIES: usize = 32;

/// One leaf's entries in the scan's range, copied out of the page: keys and
/// values back to back in one buffer, reused for every leaf of a scan.
#[derive(Default)]
struct LeafCopy {
    /// Entries the caller expects to copy from one leaf (sizes the buffers).
    expected: usize,
    bytes: Vec<u8>,
    /// Key and value of each entry, as ranges of `bytes`, in key order.
    entries: Vec<(Range<usize>, Range<usize>)>,
    /// The leaf had a key beyond the far end of the scan: it is the last.
    reached_end: bool,
}

impl LeafCopy {
    fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
        self.reached_end = false;
    }

    fn push<S: PageStore>(&mut self, tree: &BTree<S>, p: &[u8], off: usize) -> Result<()> {
        let key_start = self.bytes.len();
        let key_len = page::rec_key(p, off).len();
        if page::rec_flags(p, off) & page::REC_OVERFLOW == 0 {
            // Key and inline value lie together after the record header:
            // one copy, into buffers sized at the first entry for the
            // entries expected from this leaf (a range of ten grew them
            // eight times).
            let stored = page::rec_len(p, off) - page::RECORD_HEADER_BYTES;
            if self.entries.is_empty() {
                let expected = self.expected.clamp(1, page::record_count(p).max(1));
                self.bytes.reserve(stored * expected);
                self.entries.reserve(expected);
            }
            let start = off + page::RECORD_HEADER_BYTES;
            self.bytes.extend_from_slice(&p[start..start + stored]);
        } else {
            self.bytes.extend_from_slice(page::rec_key(p, off));
            // The leaf is latched, so an overflow chain cannot be freed
            // meanwhile.
            tree.load_value_into(p, off, &mut self.bytes)?;
        }
        let value_start = key_start + key_len;
        self.entries
            .push((key_start..value_start, value_start..self.bytes.len()));
        Ok(())
    }

    /// Calls `visit` on each entry (in reverse order if `rev`); false as
    /// soon as `visit` does.
    fn visit(&self, rev: bool, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> bool {
        let call = |(key, value): &(Range<usize>, Range<usize>)| {
            visit(&self.bytes[key.clone()], &self.bytes[value.clone()])
        };
        if rev {
            self.entries.iter().rev().all(call)
        } else {
            self.entries.iter().all(call)
        }
    }

    /// The last key copied (the first, for a reverse scan), to go on from.
    fn edge_key(&self, rev: bool, out: &mut Vec<u8>) {
        let edge = if rev {
            self.entries.first()
        } else {
            self.entries.last()
        };
        out.clear();
        if let Some((key, _)) = edge {
            out.extend_from_slice(&self.bytes[key.clone()]);
        }
    }
}

impl<S: PageStore> BTree<S> {
    /// Calls `visit(key, value)` on every entry with a key between `start`
    /// and `end`, in ascending key order, until `visit` returns false.
    ///
    /// The slices are valid for the call only. No latch is held while
    /// `visit` runs (see the module docs), and nothing is allocated per
    /// entry but the values of overflow chains.
    pub fn scan(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.scan_limit(start, end, usize::MAX, visit).map(|_| ())
    }

    /// [`BTree::scan`] of at most the first `limit` entries of the range;
    /// returns how many were visited. Only those are copied out of their
    /// leaves: a range of ten copies ten entries, where a plain scan copies
    /// up to `SCAN_FIRST_COPY_ENTRIES` before it learns the visitor is done.
    pub fn scan_limit(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        let mut visited_entries = 0;
        if limit == 0 {
            return Ok(0);
        }
        let window = self.config.read_ahead_pages;
        let mut copy = LeafCopy::default();
        let mut last = Vec::new();
        let mut hinted = VecDeque::new();
        let mut first = true;
        loop {
            let from = if first {
                start
            } else {
                Bound::Excluded(last.as_slice())
            };
            // A seek hints nothing; later leaves read ahead (as a cursor).
            let read_ahead = if first { 0 } else { window };
            // Short scans are common (a range of ten, a `Range`'s first
            // chunk): the first leaf is copied only in part, and a scan
            // that wants more descends once more for the rest.
            let left = limit - visited_entries;
            let copy_max = if first {
                left.min(SCAN_FIRST_COPY_ENTRIES)
            } else {
                left
            };
            copy.expected = copy_max;
            let visited = self.forward_leaf(from, read_ahead, &mut |p, span| {
                copy.clear();
                let mut found = false;
                for off in page::leaf_records_from(p, from, span) {
                    debug_assert!(above(page::rec_key(p, off), from));
                    found = true;
                    if !below(page::rec_key(p, off), end) {
                        copy.reached_end = true;
                        break;
                    }
                    copy.push(self, p, off)?;
                    if copy.entries.len() >= copy_max {
                        break;
                    }
                }
                Ok(found)
            })?;
            if read_ahead > 0 && !copy.entries.is_empty() {
                hint_ahead(self.store.as_ref(), &mut hinted, visited);
            }
            let go_on = copy.visit(false, &mut |key, value| {
                visited_entries += 1;
                visit(key, value)
            });
            if !go_on || copy.reached_end || copy.entries.is_empty() || visited_entries == limit {
                return Ok(visited_entries);
            }
            copy.edge_key(false, &mut last);
            first = false;
        }
    }

    /// [`BTree::scan`] in descending key order: from `end` down to `start`.
    /// Does not read ahead.
    pub fn scan_rev(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut copy = LeafCopy::default();
        let mut last = Vec::new();
        let mut first = true;
        loop {
            let to = if first {
                end
            } else {
                Bound::Excluded(last.as_slice())
            };
            self.backward_leaf(to, &mut |p| {
                copy.clear();
                let mut found = false;
                // Records are in ascending order: the ones below `start`
                // come first, and mean this leaf is the scan's last.
                for off in page::records(p).take_while(|&off| below(page::rec_key(p, off), to)) {
                    found = true;
                    if !above(page::rec_key(p, off), start) {
                        copy.reached_end = true;
                        continue;
                    }
                    copy.push(self, p, off)?;
                }
                Ok(found)
            })?;
            if !copy.visit(true, &mut visit) || copy.reached_end || copy.entries.is_empty() {
                return Ok(());
            }
            copy.edge_key(true, &mut last);
            first = false;
        }
    }
}

#[cfg(test)]
mod tests {
    // Test code unwraps: a failure is a test failure.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::store::MemStore;
    use crate::tree::TreeConfig;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    /// A tree of several levels with inline and overflow values, and its
    /// model.
    fn tree_and_model() -> (BTree<MemStore>, BTreeMap<Vec<u8>, Vec<u8>>) {
        let store = Arc::new(MemStore::new(4096).unwrap());
        let tree = BTree::create(store, TreeConfig::default()).unwrap();
        let mut model = BTreeMap::new();
        for i in 0u32..3000 {
            // Every 97th value is longer than an eighth of the page; long
            // keys keep internal pages small, so the tree has three levels.
            let len = if i % 97 == 0 {
                1500
            } else {
                (i % 50) as usize + 100
            };
            let key = key_of((i * 7919) % 3000);
            let value = vec![(i % 251) as u8; len];
            tree.insert(&key, &value).unwrap();
            model.insert(key, value);
        }
        for i in (0u32..3000).step_by(3) {
            let key = key_of(i);
            tree.delete(&key).unwrap();
            model.remove(&key);
        }
        (tree, model)
    }

    fn key_of(i: u32) -> Vec<u8> {
        format!("k{i:05}{}", "-".repeat(100)).into_bytes()
    }

    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    fn scanned(tree: &BTree<MemStore>, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Entries {
        let mut out = Vec::new();
        tree.scan(start, end, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        out
    }

    fn scanned_rev(tree: &BTree<MemStore>, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Entries {
        let mut out = Vec::new();
        tree.scan_rev(start, end, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        out
    }

    fn modelled(
        model: &BTreeMap<Vec<u8>, Vec<u8>>,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Entries {
        // Filtered, not `BTreeMap::range`, which panics on empty ranges.
        model
            .iter()
            .filter(|(k, _)| above(k, start) && below(k, end))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    #[test]
    fn scans_match_the_model_for_every_kind_of_bound() {
        let (tree, model) = tree_and_model();
        assert!(tree.stats().unwrap().height >= 3, "a deeper tree is needed");
        // Present keys (the first, one inside, the last), absent ones
        // between them, and keys before and after everything.
        let (present, absent) = (key_of(1501), key_of(1500));
        let (first, last) = (model.keys().next().unwrap(), model.keys().last().unwrap());
        let keys: [&[u8]; 7] = [b"", first, b"k01", &absent, &present, last, b"l"];
        let mut bounds: Vec<Bound<&[u8]>> = vec![Bound::Unbounded];
        for key in keys {
            bounds.push(Bound::Included(key));
            bounds.push(Bound::Excluded(key));
        }
        for &start in &bounds {
            for &end in &bounds {
                let expected = modelled(&model, start, end);
                assert_eq!(scanned(&tree, start, end), expected, "{start:?}..{end:?}");
                let mut reversed = expected;
                reversed.reverse();
                assert_eq!(
                    scanned_rev(&tree, start, end),
                    reversed,
                    "rev {start:?}..{end:?}"
                );
            }
        }
    }

    #[test]
    fn a_scan_stops_when_the_visitor_says_so_and_agrees_with_a_cursor() {
        let (tree, model) = tree_and_model();
        let mut seen = Vec::new();
        let from = key_of(1000);
        tree.scan(Bound::Included(&from), Bound::Unbounded, |k, _| {
            seen.push(k.to_vec());
            seen.len() < 300
        })
        .unwrap();
        let expected: Vec<Vec<u8>> = model
            .range(from.clone()..)
            .take(300)
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(seen, expected);
        let mut cursor = tree.cursor();
        let mut on = cursor.seek(&from).unwrap();
        for key in &seen {
            assert!(on);
            assert_eq!(cursor.key(), Some(key.as_slice()));
            on = cursor.next().unwrap();
        }
    }

    #[test]
    fn a_visitor_may_write_to_the_tree() {
        let (tree, model) = tree_and_model();
        let mut count = 0;
        // Deleting each key as it is visited would deadlock if the scan
        // held the leaf's latch.
        tree.scan(Bound::Unbounded, Bound::Unbounded, |k, _| {
            tree.delete(k).unwrap();
            count += 1;
            true
        })
        .unwrap();
        assert_eq!(count, model.len());
        assert!(scanned(&tree, Bound::Unbounded, Bound::Unbounded).is_empty());
        tree.check_invariants().unwrap();
    }

    #[test]
    fn a_limited_scan_visits_the_first_entries_of_its_range() {
        let (tree, model) = tree_and_model();
        let from = key_of(1000);
        let until = key_of(1400);
        let in_range = modelled(&model, Bound::Included(&from), Bound::Excluded(&until));
        // Within the first leaf, across leaves, the whole range and beyond.
        for limit in [
            0,
            1,
            10,
            31,
            32,
            33,
            200,
            in_range.len(),
            in_range.len() + 5,
        ] {
            let mut seen = Vec::new();
            let visited = tree
                .scan_limit(
                    Bound::Included(&from),
                    Bound::Excluded(&until),
                    limit,
                    |k, v| {
                        seen.push((k.to_vec(), v.to_vec()));
                        true
                    },
                )
                .unwrap();
            let expected: Entries = in_range.iter().take(limit).cloned().collect();
            assert_eq!(visited, expected.len(), "limit {limit}");
            assert!(seen == expected, "limit {limit}");
        }
        // The visitor may still stop first.
        let visited = tree
            .scan_limit(Bound::Included(&from), Bound::Unbounded, 50, |_, _| false)
            .unwrap();
        assert_eq!(visited, 1);
    }
}
