//! Atomic writes across trees.

use crate::db::DbInner;
use crate::error::{Error, Result};
use crate::options::Durability;
use crate::tree::{BATCH_IMAGES_MORE, Tree, batch_pinned_bytes, check_entry, image_bytes};

/// Batches of fewer operations do not read their leaves ahead: they are
/// the sample that decides whether the rest are read ahead.
const PREFETCH_OPS_MIN: usize = barracuda_btree::PREFETCH_SAMPLE_KEYS;

/// Puts and deletes on any trees of one database, applied by [`crate::Db::write`]
/// all or nothing, also across a crash.
///
/// A batch is logged as one group, or as several when its worst case does
/// not fit one (16 MiB, and a quarter of the ring): every group but the
/// last is marked continued, and recovery applies them only together with
/// the last. A batch's changed pages stay cached until its last group is
/// logged, and no checkpoint can pass it, so its worst case (three pages
/// per operation) must fit in half of each tree's pool, and its log size
/// in half the ring (`log_bytes / 2`, where each operation counts three
/// page images): with the default log, 907 puts of 150 bytes with the
/// default trees and pool (the pool's bound), 2,644 with a 1 GiB pool, and
/// 1,332 with uncompressed 16 KiB pages and a 1 GiB pool (the log's). A
/// larger batch is refused with [`Error::BatchTooLarge`] before anything
/// changes.
/// [`Tree::batch_ops_max`] says how many operations of a given size fit.
///
/// Before it takes the write mutex, a batch of at least
/// `barracuda_btree::PREFETCH_SAMPLE_KEYS` operations starts reading the
/// leaves it will change that are not cached, as one asynchronous batch
/// (only when a sample of them misses the pool).
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

    /// Starts reading the leaves the batch will change, per tree, before
    /// the write mutex is taken (`barracuda_btree::Tree::prefetch_leaves`):
    /// with data larger than the pool, a batch of random writes then waits
    /// for its misses in parallel, not one read at a time under the mutex.
    /// Batches below [`PREFETCH_OPS_MIN`] skip it.
    fn prefetch_leaves(&self) {
        if self.ops.len() < PREFETCH_OPS_MIN {
            return;
        }
        for (index, tree) in self.trees.iter().enumerate() {
            let keys = self
                .ops
                .iter()
                .filter(|op| op.tree == index)
                .map(|op| self.key(op));
            tree.inner().tree.prefetch_leaves(keys);
        }
    }

    pub(crate) fn apply(self, db: &std::sync::Arc<DbInner>, durability: Durability) -> Result<()> {
        for tree in &self.trees {
            if !std::sync::Arc::ptr_eq(tree.db(), db) {
                return Err(Error::InvalidOptions {
                    reason: format!("tree {:?} belongs to another database", tree.name()),
                });
            }
        }
        let inners: Vec<_> = self.trees.iter().map(Tree::inner).collect();
        let mut op_bytes = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            let inner = &inners[op.tree];
            op_bytes.push(check_entry(db, inner, self.key(op), self.value(op))?);
        }
        let image_bytes_max = inners.iter().map(|inner| image_bytes(inner)).max();
        // The levels above the parents and the meta pages, once per group.
        let group_more = BATCH_IMAGES_MORE * image_bytes_max.unwrap_or(0);
        let group_limit = db.group_bytes_max();
        let new_group = group_starts(&op_bytes, group_more, group_limit);
        let groups = 1 + new_group.iter().filter(|&&starts| starts).count();
        let estimated = op_bytes.iter().sum::<usize>() + groups * group_more;
        // Every page a batch changes stays in its pool, pinned at the
        // pending LSN, until the batch is logged: at most half the pool.
        let mut ops_per_tree = vec![0; self.trees.len()];
        for op in &self.ops {
            ops_per_tree[op.tree] += 1;
        }
        for (inner, &ops) in inners.iter().zip(&ops_per_tree) {
            let (pinned, limit) = batch_pinned_bytes(inner, ops);
            if pinned > limit {
                return Err(Error::BatchTooLarge {
                    estimated_bytes: pinned,
                    limit_bytes: limit,
                });
            }
        }
        drop(inners);
        let limit = db.batch_bytes_max();
        if estimated > limit {
            return Err(Error::BatchTooLarge {
                estimated_bytes: estimated,
                limit_bytes: limit,
            });
        }
        self.prefetch_leaves();
        db.write_spanning(durability, estimated, |writer, split| {
            // Loaded under the write mutex: a compaction cannot swap a
            // tree until this write is logged.
            let inners: Vec<_> = self.trees.iter().map(Tree::inner).collect();
            for (op, &starts) in self.ops.iter().zip(&new_group) {
                if starts {
                    split.next_group(writer)?;
                }
                let inner = &inners[op.tree];
                let ctx = writer.op(inner);
                let key = self.key(op);
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
