//! A handle to one named tree of a [`crate::Db`], and its range iterator.

use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use barracuda_btree::TreeStats;
use barracuda_pool::PoolStatus;

use crate::db::limits::{
    BATCH_IMAGES_MORE, batch_ops_by_pool, check_write, image_bytes, worst_case_log_bytes,
};
use crate::db::{Db, DbInner, KeyValue, TreeInner, TreeSlot};
use crate::error::{Error, Result};
use crate::options::{Durability, TreeOptions};
use crate::records::{PoolGhosts, RecordCache, RecordCacheStatus};

/// Entries a range iterator copies on its first descent of the tree: a
/// short range (`take(10)`) should not copy a whole leaf's worth.
const RANGE_CHUNK_ENTRIES_FIRST: usize = 16;

/// The most entries a range iterator copies per descent; each refill
/// doubles the chunk up to this.
const RANGE_CHUNK_ENTRIES_MAX: usize = 1024;

/// One named tree. Cheap to clone; `Send + Sync`.
///
/// A handle names the tree, not its file: after [`crate::Db::compact`]
/// swaps in the rewritten tree, every existing handle (and every open
/// [`Range`]) reads and writes the new one.
#[derive(Clone)]
pub struct Tree {
    db: Arc<DbInner>,
    slot: Arc<TreeSlot>,
}

impl std::fmt::Debug for Tree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tree")
            .field("name", &self.slot.name)
            .finish()
    }
}

/// Whether `Tree` is shareable across threads (checked at compile time).
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tree>();
};

/// A database hands out its trees as [`Tree`] handles.
impl Db {
    /// The tree named `name`, created with the default tree options if it
    /// does not exist.
    pub fn tree(&self, name: &str) -> Result<Tree> {
        if let Some(tree) = self.inner.find_tree(name) {
            return Ok(Tree::new(Arc::clone(&self.inner), tree));
        }
        let options = self.inner.options.default_tree.clone();
        self.create_tree(name, options)
    }

    /// The tree named `name`, created with `options` if it does not exist.
    /// An existing tree with different options is an error.
    pub fn create_tree(&self, name: &str, options: TreeOptions) -> Result<Tree> {
        self.inner.check_writable()?;
        let tree = self.inner.create_tree(name, options)?;
        Ok(Tree::new(Arc::clone(&self.inner), tree))
    }

    /// The tree named `name`, which must exist.
    pub fn open_tree(&self, name: &str) -> Result<Tree> {
        match self.inner.find_tree(name) {
            Some(tree) => Ok(Tree::new(Arc::clone(&self.inner), tree)),
            None => Err(Error::TreeNotFound { name: name.into() }),
        }
    }
}

impl Tree {
    pub(crate) fn new(db: Arc<DbInner>, slot: Arc<TreeSlot>) -> Tree {
        Tree { db, slot }
    }

    /// The tree's current incarnation. Under the write mutex it cannot
    /// change (a compaction swaps it while holding that mutex).
    pub(crate) fn inner(&self) -> Arc<TreeInner> {
        self.slot.load()
    }

    /// Whether both handles name the same tree of the same database.
    pub(crate) fn same_tree(&self, other: &Tree) -> bool {
        Arc::ptr_eq(&self.slot, &other.slot)
    }

    /// The tree's record cache, if it has one.
    pub(crate) fn record_cache(&self) -> Option<&RecordCache> {
        self.slot.records.as_ref()
    }

    pub(crate) fn db(&self) -> &Arc<DbInner> {
        &self.db
    }

    /// The tree's name.
    pub fn name(&self) -> &str {
        &self.slot.name
    }

    /// The options the tree was created with.
    pub fn options(&self) -> TreeOptions {
        self.slot.load().entry.options()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if self.slot.records.is_some() {
            let mut value = Vec::new();
            return Ok(self.get_into(key, &mut value)?.then_some(value));
        }
        self.db.check_open()?;
        Ok(self.slot.read().tree.get(key)?)
    }

    /// [`Tree::get`] into `value` (cleared first): true if `key` is
    /// present. Reusing one buffer across gets allocates nothing per get
    /// (except for values larger than any before).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = barracuda::Db::open(dir.path())?;
    /// # let tree = db.tree("t")?;
    /// tree.put(b"a", b"1")?;
    /// let mut value = Vec::new();
    /// assert!(tree.get_into(b"a", &mut value)?);
    /// assert_eq!(value, b"1");
    /// assert!(!tree.get_into(b"b", &mut value)?);
    /// assert!(value.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_into(&self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        self.db.check_open()?;
        let Some(records) = &self.slot.records else {
            return Ok(self.slot.read().tree.get_into(key, value)?);
        };
        let hit = records.get_into(key, value);
        records.rebalance(
            || {
                let ghosts = self.slot.read().pool().ghost_blocks();
                PoolGhosts {
                    hits: ghosts.hits,
                    bytes: ghosts.bytes,
                }
            },
            |bytes| self.slot.read().pool().return_bytes(bytes),
        );
        if hit {
            return Ok(true);
        }
        let epoch = records.epoch();
        let found = self.slot.read().tree.get_into(key, value)?;
        if found {
            records.fill(epoch, key, value, |bytes| {
                self.slot
                    .read()
                    .pool()
                    .lend_bytes(bytes)
                    .unwrap_or_else(|e| {
                        // Counted in `allocations_refused`; a pool whose
                        // pages are all pinned would otherwise log per get.
                        tracing::debug!(
                            "record cache of {}: no memory from the pool: {e}",
                            self.slot.name
                        );
                        false
                    })
            });
        }
        Ok(found)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// The number of entries. O(1): the tree's meta page keeps the count,
    /// changed in the same logged operation as every put of a new key and
    /// every delete of a present one, so it is exact after a crash too.
    /// Costs one shared latch of the meta page, which every write touches
    /// and so is normally cached; never iterates.
    ///
    /// ```no_run
    /// # let db = barracuda::Db::options().open("/var/lib/myapp/db")?;
    /// let tree = db.tree("t")?;
    /// tree.put(b"a", b"1")?;
    /// tree.put(b"a", b"2")?; // replaces: still one entry
    /// tree.delete(b"zz")?; // absent: nothing removed
    /// assert_eq!(tree.len()?, 1);
    /// # Ok::<(), barracuda::Error>(())
    /// ```
    pub fn len(&self) -> Result<u64> {
        self.db.check_open()?;
        Ok(self.slot.read().tree.len()?)
    }

    /// Whether the tree has no entries ([`Tree::len`] is 0).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Sets `key` to `value` with the database's durability. Returns whether
    /// the key existed.
    ///
    /// Keys hold at most [`barracuda_btree::KEY_BYTES_MAX`] (512) bytes and
    /// values at most [`barracuda_btree::VALUE_BYTES_MAX`] (8 MiB); longer
    /// ones are refused with the B+tree's `KeyTooLong` / `ValueTooLong`.
    /// One put is one atomic write: the overflow pages of a long value, and
    /// those of the value it replaces, are logged in one group of at most a
    /// quarter of `Options::log_bytes` (and 16 MiB), and stay in the tree's
    /// buffer pool until logged, so they may take half of it. Every value up
    /// to the limit fits with the default options; a put that could need
    /// more than the options allow is refused up front with
    /// [`Error::WriteTooLarge`], which names the option to raise, and
    /// changes nothing.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.put_with(key, value, self.db.options.durability)
    }

    /// [`Tree::put`] with the given durability.
    pub fn put_with(&self, key: &[u8], value: &[u8], durability: Durability) -> Result<bool> {
        self.db.write(durability, |writer| {
            let inner = self.slot.load();
            // Under the write mutex: the value it replaces cannot change
            // between the check and the write. It changes nothing if it
            // refuses.
            check_write(&self.db, &inner, key, Some(value))?;
            let _epoch = self.slot.forget(key);
            let op = writer.op(&inner);
            Ok(inner.tree.insert_in(op, key, value)?)
        })
    }

    /// Removes `key`. Returns whether it existed. Freeing a long value's
    /// overflow pages is bounded as a [`Tree::put`]'s: a delete that could
    /// need more log or pool than the options allow is refused with
    /// [`Error::WriteTooLarge`] and changes nothing.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.delete_with(key, self.db.options.durability)
    }

    /// [`Tree::delete`] with the given durability.
    pub fn delete_with(&self, key: &[u8], durability: Durability) -> Result<bool> {
        self.db.write(durability, |writer| {
            let inner = self.slot.load();
            check_write(&self.db, &inner, key, None)?;
            let _epoch = self.slot.forget(key);
            let op = writer.op(&inner);
            Ok(inner.tree.delete_in(op, key)?)
        })
    }

    /// The entries with keys in `range`, in key order; `.rev()` for
    /// descending order. Holds no latch between items: entries written
    /// during the iteration may or may not be seen.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Range {
        let own = |b: Bound<&K>| match b {
            Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        Range {
            tree: self.clone(),
            front: own(range.start_bound()),
            back: own(range.end_bound()),
            front_buf: VecDeque::new(),
            back_buf: VecDeque::new(),
            done: false,
            chunk: RANGE_CHUNK_ENTRIES_FIRST,
        }
    }

    /// Calls `visit(key, value)` on every entry with a key in `range`, in
    /// key order, until `visit` returns false; the cheap way to read a range
    /// when only part of each entry matters.
    ///
    /// Unlike [`Tree::range`], nothing is allocated per entry (only values
    /// stored in overflow pages are read into a buffer): each leaf's entries
    /// in the range are copied once into one reused buffer, and `visit` gets
    /// slices of it, valid for the call. No latch is held while `visit`
    /// runs, so it may read or write this tree; entries written during the
    /// scan may or may not be visited. Reads ahead like a range (the
    /// database's `read_ahead_pages`).
    ///
    /// ```no_run
    /// # let db = barracuda::Db::options().open("/var/lib/myapp/db")?;
    /// let tree = db.tree("t")?;
    /// for (k, v) in [(b"a", 3u8), (b"b", 1), (b"c", 2)] {
    ///     tree.put(k, &[v])?;
    /// }
    /// let mut min = u8::MAX;
    /// tree.scan(b"a".as_slice()..b"c".as_slice(), |_key, value| {
    ///     min = min.min(value[0]);
    ///     true
    /// })?;
    /// assert_eq!(min, 1);
    /// # Ok::<(), barracuda::Error>(())
    /// ```
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
        visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.db.check_open()?;
        let (start, end) = borrowed_bounds(&range);
        Ok(self.slot.load().tree.scan(start, end, visit)?)
    }

    /// [`Tree::scan`] of at most the first `limit` entries of `range`;
    /// returns how many were visited. Prefer it when the count is known (a
    /// page of results, "the next ten"): only those entries are copied out
    /// of their leaf, where `scan` copies a few dozen before its visitor
    /// can say stop.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = barracuda::Db::open(dir.path())?;
    /// # let tree = db.tree("t")?;
    /// for i in 0u8..100 {
    ///     tree.put(&[i], b"v")?;
    /// }
    /// let mut keys = Vec::new();
    /// let visited = tree.scan_limit([10u8].as_slice().., 3, |key, _value| {
    ///     keys.push(key[0]);
    ///     true
    /// })?;
    /// assert_eq!((visited, keys), (3, vec![10, 11, 12]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn scan_limit<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
        limit: usize,
        visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize> {
        self.db.check_open()?;
        let (start, end) = borrowed_bounds(&range);
        Ok(self.slot.load().tree.scan_limit(start, end, limit, visit)?)
    }

    /// [`Tree::scan`] in descending key order. Does not read ahead.
    pub fn scan_rev<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
        visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.db.check_open()?;
        let (start, end) = borrowed_bounds(&range);
        Ok(self.slot.load().tree.scan_rev(start, end, visit)?)
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> Range {
        self.range::<&[u8], _>(..)
    }

    /// The entries whose keys start with `prefix`, in key order.
    pub fn prefix(&self, prefix: &[u8]) -> Range {
        let start = Bound::Included(prefix.to_vec());
        let end = match prefix_successor(prefix) {
            Some(next) => Bound::Excluded(next),
            None => Bound::Unbounded,
        };
        self.range((start, end))
    }

    /// The entry with the smallest key.
    pub fn first(&self) -> Result<Option<KeyValue>> {
        self.iter().next().transpose()
    }

    /// The entry with the largest key.
    pub fn last(&self) -> Result<Option<KeyValue>> {
        self.iter().next_back().transpose()
    }

    /// Counters of the tree's record cache (all zero without one:
    /// [`crate::Options::record_cache_bytes`]).
    pub fn record_cache_status(&self) -> RecordCacheStatus {
        self.slot
            .records
            .as_ref()
            .map(RecordCache::status)
            .unwrap_or_default()
    }

    /// The tree's buffer pool status (hit rate, LRU lengths, I/O, unzips).
    pub fn pool_status(&self) -> PoolStatus {
        self.slot.read().pool().status()
    }

    /// Height, page counts, fill factor and compression of the tree (reads
    /// every page).
    pub fn stats(&self) -> Result<TreeStats> {
        Ok(self.slot.load().tree.stats()?)
    }

    /// Checks the tree's structure and its store's free list (reads every
    /// page, verifying its block).
    pub fn check(&self) -> Result<()> {
        let inner = self.slot.load();
        inner.tree.check_invariants()?;
        inner.tree.store().check_invariants()?;
        Ok(())
    }

    /// Size of the tree's data file in bytes.
    pub fn file_bytes(&self) -> Result<u64> {
        Ok(self.slot.read().file.len()?)
    }

    /// The most puts of `key_bytes`-byte keys and `value_bytes`-byte values
    /// that one [`crate::WriteBatch`] on this tree alone may hold (a delete
    /// counts as a put of an empty value); a larger batch is refused with
    /// [`Error::BatchTooLarge`]. The bound comes from the log budget
    /// (`Options::log_bytes`) and this tree's pool, so callers that split
    /// large transactions can ask instead of guessing. At least 1.
    pub fn batch_ops_max(&self, key_bytes: usize, value_bytes: usize) -> usize {
        let inner = self.slot.load();
        let per_op = worst_case_log_bytes(&inner, key_bytes, value_bytes);
        let group_more = BATCH_IMAGES_MORE * image_bytes(&inner);
        // `WriteBatch::apply` ends a group before the operation that would
        // take it past the group limit: `per_group` operations each.
        let per_group = (self.db.group_bytes_max().saturating_sub(group_more) / per_op).max(1);
        let log_bytes = |ops: usize| ops * per_op + ops.div_ceil(per_group) * group_more;
        let limit = self.db.batch_bytes_max();
        let mut ops = (limit / (per_op + group_more.div_ceil(per_group)))
            .min(batch_ops_by_pool(&inner))
            .max(1);
        while ops > 1 && log_bytes(ops) > limit {
            ops -= 1;
        }
        ops
    }
}

/// The smallest key greater than every key starting with `prefix`, if any.
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut next = prefix.to_vec();
    while let Some(last) = next.pop() {
        if last < u8::MAX {
            next.push(last + 1);
            return Some(next);
        }
    }
    None
}

/// An iterator over a key range, from [`Tree::range`]. Double-ended.
pub struct Range {
    tree: Tree,
    /// Keys not yet fetched from the front are past this bound.
    front: Bound<Vec<u8>>,
    /// Keys not yet fetched from the back are before this bound.
    back: Bound<Vec<u8>>,
    front_buf: VecDeque<KeyValue>,
    back_buf: VecDeque<KeyValue>,
    done: bool,
    /// Entries to copy on the next refill of either end.
    chunk: usize,
}

impl Range {
    /// Copies the next chunk of entries from the front: a limited visitor
    /// scan (`Tree::scan_limit` of the B+tree) that copies only the entries
    /// it keeps.
    fn fill_front(&mut self) -> Result<()> {
        self.tree.db.check_open()?;
        let inner = self.tree.inner();
        let (chunk, buf) = (self.chunk, &mut self.front_buf);
        // `scan_limit`: only `chunk` entries leave their leaves (a `scan`
        // stopped by its visitor would copy up to a leaf's worth first).
        inner.tree.scan_limit(
            borrowed(&self.front),
            borrowed(&self.back),
            chunk.saturating_sub(buf.len()),
            |key, value| {
                buf.push_back((key.to_vec(), value.to_vec()));
                true
            },
        )?;
        self.chunk = (self.chunk * 2).min(RANGE_CHUNK_ENTRIES_MAX);
        match self.front_buf.back() {
            Some((key, _)) => self.front = Bound::Excluded(key.clone()),
            None => self.done = true,
        }
        Ok(())
    }

    /// Copies the next chunk of entries from the back.
    fn fill_back(&mut self) -> Result<()> {
        self.tree.db.check_open()?;
        let inner = self.tree.inner();
        let (chunk, buf) = (self.chunk, &mut self.back_buf);
        inner
            .tree
            .scan_rev(borrowed(&self.front), borrowed(&self.back), |key, value| {
                buf.push_back((key.to_vec(), value.to_vec()));
                buf.len() < chunk
            })?;
        self.chunk = (self.chunk * 2).min(RANGE_CHUNK_ENTRIES_MAX);
        match self.back_buf.back() {
            Some((key, _)) => self.back = Bound::Excluded(key.clone()),
            None => self.done = true,
        }
        Ok(())
    }
}

/// A range's bounds as byte slices.
fn borrowed_bounds<'r, K: AsRef<[u8]> + 'r, R: RangeBounds<K>>(
    range: &'r R,
) -> (Bound<&'r [u8]>, Bound<&'r [u8]>) {
    (
        range.start_bound().map(AsRef::as_ref),
        range.end_bound().map(AsRef::as_ref),
    )
}

fn borrowed(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    bound.as_ref().map(Vec::as_slice)
}

impl Iterator for Range {
    type Item = Result<KeyValue>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.front_buf.is_empty()
            && !self.done
            && let Err(e) = self.fill_front()
        {
            self.done = true;
            return Some(Err(e));
        }
        if let Some(entry) = self.front_buf.pop_front() {
            return Some(Ok(entry));
        }
        // The back may have fetched the rest already (front meets back).
        self.back_buf.pop_back().map(Ok)
    }
}

impl DoubleEndedIterator for Range {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.back_buf.is_empty()
            && !self.done
            && let Err(e) = self.fill_back()
        {
            self.done = true;
            return Some(Err(e));
        }
        if let Some(entry) = self.back_buf.pop_front() {
            return Some(Ok(entry));
        }
        self.front_buf.pop_back().map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_successor;

    #[test]
    fn prefix_successor_carries() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xff, 0xff]), None);
        assert_eq!(prefix_successor(b""), None);
    }
}
