//! Atomic writes across trees.

use crate::db::DbInner;
use crate::error::{Error, Result};
use crate::options::Durability;
use crate::tree::{BATCH_IMAGES_MORE, Tree, batch_pinned_bytes, check_entry, image_bytes};

/// Batches of fewer operations do not read their leaves ahead: they are
/// the sample that decides whether the rest are read ahead.
const PREFETCH_OPS_MIN: usize = barracuda_btree::PREFETCH_SAMPLE_KEYS;

/// Puts and deletes on any trees of one database, applied by [`crate::Db::write`]
/// all or nothing, also across a crash (one log group).
///
/// A batch's changed pages stay cached until it is logged, and the log
/// bounds one group, so a batch's worst case (three pages per operation) must
/// fit in half of each tree's pool, and its log size is limited
/// (about `log_bytes / 4`, at most 16 MiB, where each operation counts
/// three page images: about 680 operations with the default log and 8 KiB
/// blocks); a larger batch is refused with [`Error::BatchTooLarge`]
/// before anything changes. [`Tree::batch_ops_max`] says how many
/// operations of a given size fit.
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
        let mut estimated = 0usize;
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
            estimated += bytes;
            image_bytes_max = image_bytes_max.max(image_bytes(&tree.inner()));
        }
        estimated += BATCH_IMAGES_MORE * image_bytes_max;
        let limit = db.group_bytes_max();
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
        if estimated > limit {
            return Err(Error::BatchTooLarge {
                estimated_bytes: estimated,
                limit_bytes: limit,
            });
        }
        self.prefetch_leaves();
        db.write(durability, |writer| {
            for (tree, op) in &self.ops {
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
