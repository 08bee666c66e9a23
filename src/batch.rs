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
    ops: Vec<(Tree, Op)>,
}

#[derive(Debug)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

impl WriteBatch {
    /// An empty batch.
    #[must_use]
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Sets `key` to `value` in `tree`.
    pub fn put(&mut self, tree: &Tree, key: &[u8], value: &[u8]) {
        self.ops
            .push((tree.clone(), Op::Put(key.to_vec(), value.to_vec())));
    }

    /// Removes `key` from `tree`.
    pub fn delete(&mut self, tree: &Tree, key: &[u8]) {
        self.ops.push((tree.clone(), Op::Delete(key.to_vec())));
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
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
        let mut done: Vec<&Tree> = Vec::new();
        for (tree, _) in &self.ops {
            if done.iter().any(|t| t.same_tree(tree)) {
                continue;
            }
            done.push(tree);
            let keys = self
                .ops
                .iter()
                .filter(|(t, _)| t.same_tree(tree))
                .map(|(_, op)| match op {
                    Op::Put(key, _) | Op::Delete(key) => key.as_slice(),
                });
            tree.inner().tree.prefetch_leaves(keys);
        }
    }

    pub(crate) fn apply(self, db: &std::sync::Arc<DbInner>, durability: Durability) -> Result<()> {
        let mut op_bytes = Vec::with_capacity(self.ops.len());
        let mut image_bytes_max = 0;
        for (tree, op) in &self.ops {
            if !std::sync::Arc::ptr_eq(tree.db(), db) {
                return Err(Error::InvalidOptions {
                    reason: format!("tree {:?} belongs to another database", tree.name()),
                });
            }
            let bytes = match op {
                Op::Put(key, value) => check_entry(db, &tree.inner(), key, Some(value))?,
                Op::Delete(key) => check_entry(db, &tree.inner(), key, None)?,
            };
            op_bytes.push(bytes);
            image_bytes_max = image_bytes_max.max(image_bytes(&tree.inner()));
        }
        // The levels above the parents and the meta pages, once per group.
        let group_more = BATCH_IMAGES_MORE * image_bytes_max;
        let group_limit = db.group_bytes_max();
        let new_group = group_starts(&op_bytes, group_more, group_limit);
        let groups = 1 + new_group.iter().filter(|&&starts| starts).count();
        let estimated = op_bytes.iter().sum::<usize>() + groups * group_more;
        // Every page a batch changes stays in its pool, pinned at the
        // pending LSN, until the batch is logged: at most half the pool.
        for (tree, _) in &self.ops {
            let ops = self.ops.iter().filter(|(t, _)| t.same_tree(tree)).count();
            let (pinned, limit) = batch_pinned_bytes(&tree.inner(), ops);
            if pinned > limit {
                return Err(Error::BatchTooLarge {
                    estimated_bytes: pinned,
                    limit_bytes: limit,
                });
            }
        }
        let limit = db.batch_bytes_max();
        if estimated > limit {
            return Err(Error::BatchTooLarge {
                estimated_bytes: estimated,
                limit_bytes: limit,
            });
        }
        self.prefetch_leaves();
        db.write_spanning(durability, estimated, |writer, split| {
            for ((tree, op), &starts) in self.ops.iter().zip(&new_group) {
                if starts {
                    split.next_group(writer)?;
                }
                // Loaded under the write mutex: a compaction cannot swap
                // the tree until this write is logged.
                let inner = tree.inner();
                let ctx = writer.op(&inner);
                match op {
                    Op::Put(key, value) => {
                        inner.tree.insert_in(ctx, key, value)?;
                    }
                    Op::Delete(key) => {
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
