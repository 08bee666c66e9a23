//! Atomic writes across trees.

use crate::db::DbInner;
use crate::db::limits::{
    BATCH_IMAGES_MORE, FREED_PAGE_LOG_BYTES, batch_ops_by_pool, batch_pinned_bytes, check_entry,
    check_write, image_bytes, overflow_pages,
};
use crate::error::{Error, Result};
use crate::options::Durability;
use crate::records::RecordCache;
use crate::tree::Tree;

/// Batches of fewer operations do not read their leaves ahead: they are
/// the sample that decides whether the rest are read ahead.
const PREFETCH_OPS_MIN: usize = barracuda_btree::PREFETCH_SAMPLE_KEYS;

/// Puts and deletes on any trees of one database, applied by [`crate::Db::write`]
/// all or nothing, also across a crash.
///
/// A batch is logged as one group, or as several when its worst case does
/// not fit one (16 MiB, and a quarter of the log budget): every group but the
/// last is marked continued, and recovery applies them only together with
/// the last. A batch's changed pages stay cached until its last group is
/// logged, and no checkpoint can pass it, so its worst case (three pages
/// per operation) must fit in half of each tree's pool, and its log size
/// in half the log budget (`log_bytes / 2`, where each operation counts three
/// page images): with the default log (as large as the pool, at least
/// 128 MiB), 907 puts of 150 bytes with the default trees and pool, 7,279
/// with a 1 GiB pool, and 5,458 with uncompressed 16 KiB pages and a 1 GiB
/// pool. A larger batch is refused with [`Error::BatchTooLarge`] before anything
/// changes.
/// [`Tree::batch_ops_max`] says how many operations of a given size fit.
///
/// Before it takes the write mutex, a batch of at least
/// `barracuda_btree::PREFETCH_SAMPLE_KEYS` operations starts reading the
/// leaves it will change that are not cached, as one asynchronous batch
/// (only when a sample of them misses the pool).
///
/// A batch is applied in key order (a stable sort: the operations on one
/// key keep their order). When fewer than three in four of its operations
/// come after their predecessor, its splits are half splits: the ascending
/// run is the sort's, not a sequential load for the split policy to pack
/// (packed leaves would be split again by the next writes among them, and
/// half splits leave room for them).
#[derive(Debug, Default)]
pub struct WriteBatch {
    /// The trees the operations name, each once.
    trees: Vec<Tree>,
    /// The operations, in order.
    ops: Vec<Op>,
    /// Every operation's key, then its value, one after the other (one
    /// buffer for the batch rather than two per operation).
    bytes: Vec<u8>,
}

/// One operation: an index into the batch's trees, and where its key and
/// value lie in the batch's bytes.
#[derive(Clone, Copy, Debug)]
struct Op {
    tree: usize,
    start: usize,
    key_len: usize,
    /// `None` for a delete.
    value_len: Option<usize>,
}

impl WriteBatch {
    /// An empty batch.
    #[must_use]
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Sets `key` to `value` in `tree`.
    pub fn put(&mut self, tree: &Tree, key: &[u8], value: &[u8]) {
        self.push(tree, key, Some(value));
    }

    /// Removes `key` from `tree`.
    pub fn delete(&mut self, tree: &Tree, key: &[u8]) {
        self.push(tree, key, None);
    }

    fn push(&mut self, tree: &Tree, key: &[u8], value: Option<&[u8]>) {
        // Most batches name one tree: the last one is tried first.
        let index = match self.trees.iter().rposition(|t| t.same_tree(tree)) {
            Some(index) => index,
            None => {
                self.trees.push(tree.clone());
                self.trees.len() - 1
            }
        };
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        if let Some(value) = value {
            self.bytes.extend_from_slice(value);
        }
        self.ops.push(Op {
            tree: index,
            start,
            key_len: key.len(),
            value_len: value.map(<[u8]>::len),
        });
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    fn key(&self, op: &Op) -> &[u8] {
        &self.bytes[op.start..op.start + op.key_len]
    }

    fn value(&self, op: &Op) -> Option<&[u8]> {
        let at = op.start + op.key_len;
        op.value_len.map(|len| &self.bytes[at..at + len])
    }

    /// Orders `ops` by tree and key, keeping the order of those on the same
    /// key (a stable sort): the outcome is the same, since operations on
    /// different keys commute, and consecutive operations then descend to
    /// the same or neighbouring leaves, whose pages and the inner pages
    /// above them are still in the CPU's caches.
    fn sort_by_key(&self, ops: &mut [Op]) {
        ops.sort_by(|a, b| {
            a.tree
                .cmp(&b.tree)
                .then_with(|| self.key(a).cmp(self.key(b)))
        });
    }

    /// Starts reading the leaves `ops` will change, per tree, before the
    /// write mutex is taken (`barracuda_btree::BTree::prefetch_leaves`):
    /// with data larger than the pool, a batch of random writes then waits
    /// for its misses in parallel, not one read at a time under the mutex.
    /// Batches below [`PREFETCH_OPS_MIN`] skip it.
    fn prefetch_leaves(&self, ops: &[Op]) {
        if ops.len() < PREFETCH_OPS_MIN {
            return;
        }
        for (index, tree) in self.trees.iter().enumerate() {
            let keys = ops
                .iter()
                .filter(|op| op.tree == index)
                .map(|op| self.key(op));
            tree.inner().tree.prefetch_leaves(keys);
        }
    }

    /// The overflow pages `ops` may free, of the values they replace or
    /// delete. Per tree, a bound (its pages, or every operation replacing
    /// the longest value) where the batch's pool bound holds even with it
    /// and not `exact`; else each operation's old value is looked up (a
    /// descent per operation).
    fn freed_pages(
        &self,
        ops: &[Op],
        inners: &[std::sync::Arc<crate::db::TreeInner>],
        ops_per_tree: &[usize],
        chain_pages: &[usize],
        exact: bool,
    ) -> Result<FreedPages> {
        let mut freed = FreedPages {
            per_op: vec![0; ops.len()],
            bound_per_tree: vec![0; inners.len()],
        };
        for (tree, inner) in inners.iter().enumerate() {
            let longest = overflow_pages(inner, barracuda_btree::VALUE_BYTES_MAX);
            let pages = usize::try_from(inner.tree.store().page_count()).unwrap_or(usize::MAX);
            let bound = (ops_per_tree[tree].saturating_mul(longest)).min(pages);
            let (pinned, limit) =
                batch_pinned_bytes(inner, ops_per_tree[tree], chain_pages[tree] + bound);
            if !exact && pinned <= limit {
                freed.bound_per_tree[tree] = bound;
                continue;
            }
            for (op, pages) in ops.iter().zip(&mut freed.per_op) {
                if op.tree == tree {
                    let old_len = inner.tree.value_len(self.key(op))?.unwrap_or(0);
                    *pages = overflow_pages(inner, old_len);
                }
            }
        }
        Ok(freed)
    }

    /// Refuses trees of another database.
    fn check_database(&self, db: &std::sync::Arc<DbInner>) -> Result<()> {
        for tree in &self.trees {
            if !std::sync::Arc::ptr_eq(tree.db(), db) {
                return Err(Error::InvalidOptions {
                    reason: format!("tree {:?} belongs to another database", tree.name()),
                });
            }
        }
        Ok(())
    }

    /// Checks every operation (see [`check_entry`]) and returns each one's
    /// worst-case log bytes, before anything changes.
    fn check_ops(&self, db: &DbInner, ops: &[Op]) -> Result<Vec<usize>> {
        let inners: Vec<_> = self.trees.iter().map(Tree::inner).collect();
        ops.iter()
            .map(|op| check_entry(db, &inners[op.tree], self.key(op), self.value(op)))
            .collect()
    }

    /// [`crate::Db::write_with`]: the whole batch as one atomic write, in
    /// key order; with half splits unless the caller's order was mostly
    /// that already (as a chunked writer's puts).
    pub(crate) fn apply(
        mut self,
        db: &std::sync::Arc<DbInner>,
        durability: Durability,
    ) -> Result<()> {
        self.check_database(db)?;
        let mut ops = std::mem::take(&mut self.ops);
        let half_splits = !self.mostly_in_order(&ops);
        self.sort_by_key(&mut ops);
        let op_bytes = self.check_ops(db, &ops)?;
        self.apply_ops(db, &ops, &op_bytes, durability, half_splits)
    }

    /// Applies the batch as consecutive atomic writes (see
    /// [`ChunkedWriter`]), each at most a [`CHUNK_SHARE`] of what one may
    /// hold by either of its bounds (log bytes, pinned pool pages), and
    /// empties it (keeping its memory). Does not sync. A batch of deletes
    /// alone, or of puts mostly out of key order, is applied in key order
    /// as a whole (the puts with half splits).
    fn apply_chunked(&mut self, db: &std::sync::Arc<DbInner>) -> Result<()> {
        self.check_database(db)?;
        let mut ops = std::mem::take(&mut self.ops);
        let sorted_here =
            ops.iter().all(|op| op.value_len.is_none()) || !self.mostly_in_order(&ops);
        if sorted_here {
            self.sort_by_key(&mut ops);
        }
        let result = self.apply_parts(db, &mut ops, sorted_here);
        ops.clear();
        self.ops = ops;
        self.bytes.clear();
        result
    }

    /// Whether at least three in four of `ops` come after their predecessor
    /// in key order (by tree, then key): an ascending stream, or a few
    /// interleaved ones, which the split policy should see as written. Random
    /// keys score about one in two.
    fn mostly_in_order(&self, ops: &[Op]) -> bool {
        let in_order = ops
            .windows(2)
            .filter(|w| (w[0].tree, self.key(&w[0])) <= (w[1].tree, self.key(&w[1])))
            .count();
        4 * in_order >= 3 * ops.len().saturating_sub(1)
    }

    /// Applies `ops` in parts (see [`WriteBatch::apply_chunked`]);
    /// `half_splits` when this writer put them in key order.
    fn apply_parts(
        &self,
        db: &std::sync::Arc<DbInner>,
        ops: &mut [Op],
        half_splits: bool,
    ) -> Result<()> {
        let op_bytes = self.check_ops(db, ops)?;
        let inners: Vec<_> = self.trees.iter().map(Tree::inner).collect();
        let ops_max: Vec<usize> = inners
            .iter()
            .map(|inner| (batch_ops_by_pool(inner) / CHUNK_SHARE).max(1))
            .collect();
        drop(inners);
        let ends = chunk_ends(ops, &op_bytes, &ops_max, db.batch_bytes_max() / CHUNK_SHARE);
        let mut start = 0;
        for end in ends {
            let part = &mut ops[start..end];
            self.sort_by_key(part);
            let part_bytes = &op_bytes[start..end];
            self.apply_part(db, part, part_bytes, half_splits)?;
            start = end;
        }
        Ok(())
    }

    /// Applies one part; a part refused as too large (the long values its
    /// operations replace free pages the part's bound does not count, and
    /// a refusal changes nothing) is applied in halves.
    fn apply_part(
        &self,
        db: &std::sync::Arc<DbInner>,
        part: &[Op],
        part_bytes: &[usize],
        half_splits: bool,
    ) -> Result<()> {
        match self.apply_ops(db, part, part_bytes, Durability::NoSync, half_splits) {
            Err(Error::BatchTooLarge { .. }) if part.len() > 1 => {
                let half = part.len() / 2;
                self.apply_part(db, &part[..half], &part_bytes[..half], half_splits)?;
                self.apply_part(db, &part[half..], &part_bytes[half..], half_splits)
            }
            other => other,
        }
    }

    /// Applies `ops` (with their worst-case log bytes `op_bytes`) as one
    /// atomic write, or refuses them with [`Error::BatchTooLarge`] before
    /// anything changes. `half_splits`: see
    /// [`barracuda_btree::OpContext::half_splits`].
    fn apply_ops(
        &self,
        db: &std::sync::Arc<DbInner>,
        ops: &[Op],
        op_bytes: &[usize],
        durability: Durability,
        half_splits: bool,
    ) -> Result<()> {
        let inners: Vec<_> = self.trees.iter().map(Tree::inner).collect();
        // Every page a batch changes stays in its pool, pinned at the
        // pending LSN, until the batch is logged: at most half the pool.
        // Long values add their overflow pages, and replaced or deleted
        // long values the pages they free.
        let mut ops_per_tree = vec![0; self.trees.len()];
        let mut chain_pages = vec![0; self.trees.len()];
        for op in ops {
            ops_per_tree[op.tree] += 1;
            chain_pages[op.tree] += overflow_pages(&inners[op.tree], op.value_len.unwrap_or(0));
        }
        // The leaves are read ahead first: looking up the values the batch
        // replaces then waits for reads in flight, not for one at a time.
        self.prefetch_leaves(ops);
        let image_bytes_max = inners.iter().map(|inner| image_bytes(inner)).max();
        let group_limit = db.group_bytes_max();
        let limit = db.batch_bytes_max();
        // First with a bound on the freed pages where it fits the pool; if
        // the batch then does not fit, with every old value looked up.
        let mut exact = false;
        let (new_group, estimated) = loop {
            let freed = self.freed_pages(ops, &inners, &ops_per_tree, &chain_pages, exact)?;
            let bounded = freed.bound_per_tree.iter().any(|&bound| bound > 0);
            let mut freed_per_tree = vec![0; self.trees.len()];
            for (op, &pages) in ops.iter().zip(&freed.per_op) {
                freed_per_tree[op.tree] += pages;
            }
            let mut refused = None;
            for (tree, inner) in inners.iter().enumerate() {
                let chain = chain_pages[tree] + freed_per_tree[tree] + freed.bound_per_tree[tree];
                let (pinned, pool_limit) = batch_pinned_bytes(inner, ops_per_tree[tree], chain);
                if pinned > pool_limit {
                    refused = Some(Error::BatchTooLarge {
                        estimated_bytes: pinned,
                        limit_bytes: pool_limit,
                    });
                }
            }
            // The levels above the parents and the meta pages, once per
            // group, and the freed pages not looked up, in every group.
            let group_more = BATCH_IMAGES_MORE * image_bytes_max.unwrap_or(0)
                + freed.bound_per_tree.iter().sum::<usize>() * FREED_PAGE_LOG_BYTES;
            let op_bytes: Vec<usize> = op_bytes
                .iter()
                .zip(&freed.per_op)
                .map(|(&bytes, &pages)| bytes + pages * FREED_PAGE_LOG_BYTES)
                .collect();
            let new_group = group_starts(&op_bytes, group_more, group_limit);
            let groups = 1 + new_group.iter().filter(|&&starts| starts).count();
            let estimated = op_bytes.iter().sum::<usize>() + groups * group_more;
            if refused.is_none() && estimated > limit {
                refused = Some(Error::BatchTooLarge {
                    estimated_bytes: estimated,
                    limit_bytes: limit,
                });
            }
            match refused {
                None => break (new_group, estimated),
                Some(_) if bounded && !exact => exact = true,
                Some(error) => return Err(error),
            }
        };
        drop(inners);
        db.write_spanning(durability, estimated, |writer, split| {
            // Loaded under the write mutex: a compaction cannot swap a
            // tree until this write is logged.
            let inners: Vec<_> = self.trees.iter().map(Tree::inner).collect();
            // No get fills a record cache until the batch is applied; each
            // key leaves it before it changes.
            let epochs: Vec<_> = self
                .trees
                .iter()
                .map(|tree| tree.record_cache().map(RecordCache::begin_write))
                .collect();
            for (op, &starts) in ops.iter().zip(&new_group) {
                if starts {
                    split.next_group(writer)?;
                }
                let inner = &inners[op.tree];
                let key = self.key(op);
                if let (Some(records), Some(epoch)) =
                    (self.trees[op.tree].record_cache(), &epochs[op.tree])
                {
                    records.remove(epoch, key);
                }
                let ctx = writer.op(inner);
                ctx.half_splits = half_splits;
                match self.value(op) {
                    Some(value) => {
                        inner.tree.insert_in(ctx, key, value)?;
                    }
                    None => {
                        inner.tree.delete_in(ctx, key)?;
                    }
                }
            }
            Ok(())
        })
    }
}

/// The share of one atomic write's bounds that each part of a chunked
/// write takes: a quarter. Each part reserves its worst case in the log
/// budget before it starts (three page images per operation), so parts
/// near the bound leave no room without a checkpoint first, and each such
/// part would wait for one; a quarter lets several parts pass between
/// checkpoints while each stays large enough to amortise its log group
/// (a few hundred small puts).
pub(crate) const CHUNK_SHARE: usize = 4;

/// Where [`WriteBatch::apply_chunked`] ends its parts (exclusive ends, the
/// last `ops.len()`): a part ends before the operation that would take its
/// worst-case log bytes past `log_bytes_max`, or its operations on one
/// tree past that tree's `ops_max`. Every part holds at least one
/// operation.
fn chunk_ends(
    ops: &[Op],
    op_bytes: &[usize],
    ops_max: &[usize],
    log_bytes_max: usize,
) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut bytes = 0;
    let mut per_tree = vec![0; ops_max.len()];
    let mut in_part = 0;
    for (i, (op, &op_bytes)) in ops.iter().zip(op_bytes).enumerate() {
        let full = bytes + op_bytes > log_bytes_max || per_tree[op.tree] + 1 > ops_max[op.tree];
        if in_part > 0 && full {
            ends.push(i);
            bytes = 0;
            per_tree.iter_mut().for_each(|count| *count = 0);
            in_part = 0;
        }
        bytes += op_bytes;
        per_tree[op.tree] += 1;
        in_part += 1;
    }
    if in_part > 0 {
        ends.push(ops.len());
    }
    ends
}

/// Where [`WriteBatch::apply`] ends a log group: before each operation
/// marked `true`, the one that would take the open group's worst case
/// (with `group_more`) past `group_limit`.
fn group_starts(op_bytes: &[usize], group_more: usize, group_limit: usize) -> Vec<bool> {
    let mut in_group = 0;
    op_bytes
        .iter()
        .map(|&bytes| {
            let starts = in_group > 0 && in_group + bytes + group_more > group_limit;
            if starts {
                in_group = 0;
            }
            in_group += bytes;
            starts
        })
        .collect()
}

/// What [`WriteBatch::freed_pages`] found.
struct FreedPages {
    /// Looked up: the overflow pages each operation frees.
    per_op: Vec<usize>,
    /// Not looked up: a bound on the pages the tree's operations free.
    bound_per_tree: Vec<usize>,
}

/// Pending puts a [`ChunkedWriter`] applies at once: enough for a few dozen
/// parts, little enough to stay in the CPU's caches between being copied
/// in and being applied.
const CHUNKED_PUT_BYTES: usize = 4 << 20;

/// Pending deletes a [`ChunkedWriter`] holds at most before it applies
/// them (sorted): 64 MiB of keys, 2.8 million 24-byte keys.
const CHUNKED_DELETE_BYTES: usize = 64 << 20;

/// A write too large for one atomic [`crate::Db::write`], applied as it is
/// written in consecutive atomic parts and made durable by
/// [`ChunkedWriter::finish`]: bulk loads, mass deletes. Made by
/// [`crate::Db::chunked_writer`].
///
/// It is not atomic: after a crash, or an error, the first parts may be
/// there without the rest (of puts or deletes applied in key order, those
/// of the smallest keys). Dropped without `finish`, the parts applied stay
/// (not synced) and the pending ones are discarded.
///
/// - Each part takes at most a quarter of what one atomic write may hold
///   (by log bytes and by pinned pool pages) and holds its operations in
///   key order.
/// - Puts are applied 4 MiB at a time. When fewer than three in four of
///   them come after their predecessor in key order (random keys: about
///   one in two), those 4 MiB are applied in key order, so that the puts
///   into one leaf follow each other while it is in the CPU's caches, and
///   every split they cause is a half split
///   ([`barracuda_btree::OpContext::half_splits`]). Sorted, they would be
///   an ascending stream, whose leaves the split policy packs full, and
///   the next random puts would split them all again: in
///   `crates/bench/examples/profile_rows.rs` (`single`), 1,000 random puts after a load
///   in key order split 648 leaves. Applied sorted with half splits, a
///   random load leaves its leaves about two-thirds full, as random
///   inserts do, and each leaf's puts still arrive together while it is
///   in the CPU's caches, which is cheaper than applying them as written.
///   Puts mostly in order
///   (an ascending load, a few interleaved ascending streams) are applied
///   as written, for the split policy to see.
/// - A run of deletes (up to the next put, [`ChunkedWriter::finish`], or
///   64 MiB of keys) is applied in key order as a whole: the deletes then
///   empty one leaf after the other, its path in the CPU's caches.
///   Deletes commute with each other, so the outcome is the same.
/// - A key or value over the limits, or a tree of another database, is
///   refused by the call that names it; the writer stays usable.
/// - One sync, at `finish`, covers every part.
///
/// ```no_run
/// # fn main() -> barracuda::Result<()> {
/// let db = barracuda::Db::options().open("/var/lib/myapp/db")?;
/// let events = db.tree("events")?;
/// let mut expire = db.chunked_writer();
/// for day in 0..365u32 {
///     for n in 0..10_000u32 {
///         let key = [day.to_be_bytes(), n.to_be_bytes()].concat();
///         expire.delete(&events, &key)?;
///     }
/// }
/// expire.finish()?; // one sync for all of it
/// # Ok(())
/// # }
/// ```
pub struct ChunkedWriter<'db> {
    db: &'db std::sync::Arc<DbInner>,
    durability: Durability,
    pending: WriteBatch,
    /// Whether `pending` holds deletes (then only deletes).
    deletes: bool,
    /// The pending puts of long values (with overflow pages), by tree id
    /// and key: a later write of the same key frees their pages, which
    /// its check (made against the tree) cannot see until they are applied.
    long_pending: std::collections::HashMap<u16, std::collections::HashSet<Vec<u8>>>,
}

impl<'db> ChunkedWriter<'db> {
    pub(crate) fn new(db: &'db std::sync::Arc<DbInner>, durability: Durability) -> Self {
        ChunkedWriter {
            db,
            durability,
            pending: WriteBatch::new(),
            deletes: false,
            long_pending: std::collections::HashMap::new(),
        }
    }

    /// Sets `key` to `value` in `tree`.
    pub fn put(&mut self, tree: &Tree, key: &[u8], value: &[u8]) -> Result<()> {
        self.check(tree, key, Some(value))?;
        if self.deletes {
            self.apply_pending()?;
        }
        self.deletes = false;
        self.pending.put(tree, key, value);
        if self.pending.bytes.len() >= CHUNKED_PUT_BYTES {
            self.apply_pending()?;
        }
        Ok(())
    }

    /// Removes `key` from `tree`.
    pub fn delete(&mut self, tree: &Tree, key: &[u8]) -> Result<()> {
        self.check(tree, key, None)?;
        if !self.deletes {
            self.apply_pending()?;
        }
        self.deletes = true;
        self.pending.delete(tree, key);
        if self.pending.bytes.len() >= CHUNKED_DELETE_BYTES {
            self.apply_pending()?;
        }
        Ok(())
    }

    /// Applies what is pending and makes every part durable (unless the
    /// writer's durability is [`Durability::NoSync`]).
    pub fn finish(mut self) -> Result<()> {
        self.apply_pending()?;
        self.db.make_durable(self.durability)
    }

    fn check(&mut self, tree: &Tree, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        if !std::sync::Arc::ptr_eq(tree.db(), self.db) {
            return Err(Error::InvalidOptions {
                reason: format!("tree {:?} belongs to another database", tree.name()),
            });
        }
        let inner = tree.inner();
        // Looked up by the borrowed key: no copy per operation.
        if self
            .long_pending
            .get(&inner.entry.id)
            .is_some_and(|keys| keys.contains(key))
        {
            // The pending long value is the one this write replaces.
            self.apply_pending()?;
        }

        // As a put's or delete's own check: an operation that could not
        // be written alone (with the value it replaces) is refused here,
        // so every part the writer cuts can be applied.
        check_write(self.db, &inner, key, value)?;
        if value.is_some_and(|v| overflow_pages(&inner, v.len()) > 0) {
            self.long_pending
                .entry(inner.entry.id)
                .or_default()
                .insert(key.to_vec());
        }
        Ok(())
    }

    fn apply_pending(&mut self) -> Result<()> {
        self.long_pending.clear();
        if self.pending.is_empty() {
            return Ok(());
        }
        self.pending.apply_chunked(self.db)
    }
}
