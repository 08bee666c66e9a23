//! Intrusive doubly linked lists over descriptor indices: the LRU with
//! InnoDB's midpoint insertion, and plain lists for the unzip_LRU and the
//! flush list. Links live in vectors sized at open, so list operations never
//! allocate.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::arena::NIL;

/// A doubly linked list of descriptor indices, head = most recent.
pub(crate) struct List {
    prev: Vec<u32>,
    next: Vec<u32>,
    member: Vec<bool>,
    head: u32,
    tail: u32,
    len: u32,
}

impl List {
    /// An empty list for descriptors `0..capacity`.
    pub(crate) fn new(capacity: u32) -> Self {
        let n = capacity as usize;
        Self {
            prev: vec![NIL; n],
            next: vec![NIL; n],
            member: vec![false; n],
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    /// Number of members.
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// First member (most recent), or `NIL`.
    pub(crate) fn head(&self) -> u32 {
        self.head
    }

    /// Last member (least recent), or `NIL`.
    pub(crate) fn tail(&self) -> u32 {
        self.tail
    }

    /// The member after `d` (toward the tail), or `NIL`.
    pub(crate) fn next(&self, d: u32) -> u32 {
        self.next[d as usize]
    }

    /// The member before `d` (toward the head), or `NIL`.
    pub(crate) fn prev(&self, d: u32) -> u32 {
        self.prev[d as usize]
    }

    /// Whether `d` is on the list.
    pub(crate) fn contains(&self, d: u32) -> bool {
        self.member[d as usize]
    }

    /// Inserts `d` after `after` (`NIL`: at the head).
    pub(crate) fn insert_after(&mut self, after: u32, d: u32) {
        assert!(!self.member[d as usize], "descriptor {d} inserted twice");
        let next = if after == NIL {
            self.head
        } else {
            self.next[after as usize]
        };
        self.prev[d as usize] = after;
        self.next[d as usize] = next;
        if after == NIL {
            self.head = d;
        } else {
            self.next[after as usize] = d;
        }
        if next == NIL {
            self.tail = d;
        } else {
            self.prev[next as usize] = d;
        }
        self.member[d as usize] = true;
        self.len += 1;
    }

    /// Inserts `d` before `before` (`NIL`: at the tail).
    pub(crate) fn insert_before(&mut self, before: u32, d: u32) {
        let after = if before == NIL {
            self.tail
        } else {
            self.prev[before as usize]
        };
        self.insert_after(after, d);
    }

    /// Unlinks `d`.
    pub(crate) fn remove(&mut self, d: u32) {
        assert!(
            self.member[d as usize],
            "descriptor {d} removed but not listed"
        );
        let (prev, next) = (self.prev[d as usize], self.next[d as usize]);
        if prev == NIL {
            self.head = next;
        } else {
            self.next[prev as usize] = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.prev[next as usize] = prev;
        }
        self.prev[d as usize] = NIL;
        self.next[d as usize] = NIL;
        self.member[d as usize] = false;
        self.len -= 1;
    }

    /// Members from head to tail.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors(Some(self.head).filter(|&d| d != NIL), move |&d| {
            Some(self.next[d as usize]).filter(|&n| n != NIL)
        })
    }

    /// Checks links, length and membership flags.
    pub(crate) fn check_invariants(&self, name: &str) {
        let mut count = 0u32;
        let mut prev = NIL;
        for d in self.iter() {
            assert!(
                self.member[d as usize],
                "{name}: {d} linked but not a member"
            );
            assert_eq!(self.prev[d as usize], prev, "{name}: back link of {d}");
            prev = d;
            count += 1;
            assert!(count <= self.len, "{name}: cycle or long list");
        }
        assert_eq!(prev, self.tail, "{name}: tail");
        assert_eq!(count, self.len, "{name}: length");
        assert_eq!(
            self.member.iter().filter(|&&m| m).count() as u32,
            self.len,
            "{name}: members"
        );
    }
}

/// Old-sublist flags, one per descriptor, readable without the pool mutex so
/// that a hit can decide whether it needs the mutex to make its page young.
pub(crate) struct OldFlags(Box<[AtomicBool]>);

impl OldFlags {
    pub(crate) fn new(capacity: u32) -> Self {
        Self((0..capacity).map(|_| AtomicBool::new(false)).collect())
    }

    pub(crate) fn get(&self, d: u32) -> bool {
        self.0[d as usize].load(Ordering::Relaxed)
    }

    fn set(&self, d: u32, old: bool) {
        self.0[d as usize].store(old, Ordering::Relaxed);
    }
}

/// The LRU of every cached page, split as InnoDB's into a young sublist
/// (head side) and an old sublist (tail side, `old_pct` of the pages). New
/// pages enter at the head of the old sublist, so a scan that touches each
/// page once only cycles through the old sublist and cannot flush the young
/// (hot) pages.
pub(crate) struct Lru {
    list: List,
    /// Headmost old page, or `NIL` when the old sublist is empty.
    old_first: u32,
    old_len: u32,
    old_pct: u32,
}

impl Lru {
    pub(crate) fn new(capacity: u32, old_pct: u8) -> Self {
        Self {
            list: List::new(capacity),
            old_first: NIL,
            old_len: 0,
            old_pct: u32::from(old_pct),
        }
    }

    /// The underlying list.
    pub(crate) fn list(&self) -> &List {
        &self.list
    }

    /// Pages in the old sublist.
    pub(crate) fn old_len(&self) -> u32 {
        self.old_len
    }

    /// Inserts a newly cached page at the midpoint: right after the first
    /// old page, as InnoDB's `buf_LRU_add_block_low` does, so the new page
    /// is old whatever the boundary adjustment does.
    pub(crate) fn insert_new(&mut self, d: u32, flags: &OldFlags) {
        if self.old_first == NIL {
            self.list.insert_before(NIL, d);
            self.old_first = d;
        } else {
            self.list.insert_after(self.old_first, d);
        }
        flags.set(d, true);
        self.old_len += 1;
        self.adjust(flags);
    }

    /// Inserts a newly cached page at the tail, the next to be evicted: a
    /// page on probation, kept by the OS page cache (the pool's
    /// `os_cache_tier`).
    pub(crate) fn insert_tail(&mut self, d: u32, flags: &OldFlags) {
        self.list.insert_before(NIL, d);
        if self.old_first == NIL {
            self.old_first = d;
        }
        flags.set(d, true);
        self.old_len += 1;
        self.adjust(flags);
    }

    /// Moves a page to the head of the young sublist.
    pub(crate) fn make_young(&mut self, d: u32, flags: &OldFlags) {
        self.remove(d, flags);
        self.list.insert_after(NIL, d);
        flags.set(d, false);
        self.adjust(flags);
    }

    /// Removes a page.
    pub(crate) fn remove(&mut self, d: u32, flags: &OldFlags) {
        if d == self.old_first {
            self.old_first = self.list.next(d);
        }
        if flags.get(d) {
            self.old_len -= 1;
            flags.set(d, false);
        }
        self.list.remove(d);
        self.adjust(flags);
    }

    /// Old pages the LRU should hold: `old_pct` percent, rounded down.
    fn old_len_target(&self) -> u32 {
        self.list.len() * self.old_pct / 100
    }

    /// Moves the young/old boundary until the old sublist has its target size.
    fn adjust(&mut self, flags: &OldFlags) {
        let target = self.old_len_target();
        while self.old_len < target {
            let grow = if self.old_first == NIL {
                self.list.tail()
            } else {
                self.list.prev(self.old_first)
            };
            flags.set(grow, true);
            self.old_first = grow;
            self.old_len += 1;
        }
        while self.old_len > target {
            flags.set(self.old_first, false);
            self.old_first = self.list.next(self.old_first);
            self.old_len -= 1;
        }
    }

    /// Checks the list and that exactly the tail `old_len` pages are old.
    pub(crate) fn check_invariants(&self, flags: &OldFlags) {
        self.list.check_invariants("LRU");
        assert_eq!(self.old_len, self.old_len_target(), "old sublist length");
        let mut seen_old = false;
        let mut old_count = 0;
        for d in self.list.iter() {
            let old = flags.get(d);
            if d == self.old_first {
                seen_old = true;
            }
            assert_eq!(old, seen_old, "page {d}: old flag vs position");
            old_count += u32::from(old);
        }
        assert_eq!(old_count, self.old_len, "old count");
        assert_eq!(self.old_first == NIL, self.old_len == 0, "old boundary");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn midpoint_insertion_keeps_three_eighths_old() {
        let flags = OldFlags::new(100);
        let mut lru = Lru::new(100, 37);
        for d in 0..100 {
            lru.insert_new(d, &flags);
            lru.check_invariants(&flags);
        }
        assert_eq!(lru.old_len(), 37);
        // A page made young goes to the head and stays young.
        lru.make_young(99, &flags);
        assert_eq!(lru.list().head(), 99);
        assert!(!flags.get(99));
        for d in (0..100).step_by(3) {
            lru.remove(d, &flags);
            lru.check_invariants(&flags);
        }
    }

    #[test]
    fn list_insert_remove() {
        let mut list = List::new(8);
        list.insert_after(NIL, 1);
        list.insert_before(NIL, 2);
        list.insert_after(1, 3);
        assert_eq!(list.iter().collect::<Vec<_>>(), vec![1, 3, 2]);
        list.remove(3);
        list.check_invariants("test");
        assert_eq!(list.iter().collect::<Vec<_>>(), vec![1, 2]);
    }
}
