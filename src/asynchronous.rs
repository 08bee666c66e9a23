//! The store from async code on a tokio runtime (feature `tokio`).
//!
//! Every operation of [`Db`] and [`Tree`] may block its thread: a read that
//! misses the buffer pool waits for its io_uring completion, a durable write
//! waits for the group commit's fsync, a checkpoint writes pages. A blocked
//! tokio worker stops every task scheduled on it, so [`AsyncDb`] and
//! [`AsyncTree`] run each operation on tokio's blocking thread pool
//! ([`tokio::task::spawn_blocking`]) and return a future of its result: the
//! worker threads only ever await.
//!
//! Each call costs a hand-off to a blocking thread and back (microseconds),
//! so a service with a hot working set that fits the pool pays it on hits
//! too; batch small writes with [`AsyncDb::write`].
//!
//! Dropping a future does not cancel its operation: a write that was handed
//! to a blocking thread completes (or fails) on its own, as a synchronous
//! call would have.
//!
//! Every method must be called from within a tokio runtime (current-thread
//! or multi-thread); it panics otherwise, as `spawn_blocking` does.
//!
//! ```no_run
//! # async fn run() -> barracuda::Result<()> {
//! use barracuda::asynchronous::AsyncDb;
//!
//! let db = AsyncDb::open(barracuda::Db::options(), "/var/lib/myapp/db").await?;
//! let users = db.tree("users").await?;
//! users.put(b"alice", b"31").await?;
//! assert_eq!(users.get(b"alice").await?.as_deref(), Some(&b"31"[..]));
//! let everyone = users.range_collect::<&[u8], _>(..).await?;
//! assert_eq!(everyone.len(), 1);
//! db.close().await?;
//! # Ok(())
//! # }
//! ```

use std::ops::{Bound, RangeBounds};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use barracuda_btree::TreeStats;
use barracuda_pool::PoolStatus;

use crate::batch::WriteBatch;
use crate::db::Db;
use crate::db::KeyValue;
use crate::error::{Error, Result};
use crate::options::{Durability, Options, TreeOptions};
use crate::tree::Tree;

/// How long [`AsyncDb::close`] sleeps between looks at operations whose
/// futures were dropped but which still run on a blocking thread.
const CLOSE_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// Runs `f` on tokio's blocking pool and awaits its result.
async fn blocking<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down and dropped the queued task; the
        // operation never ran.
        Err(_) => Err(Error::Closed),
    }
}

/// Turns borrowed range bounds into owned ones a blocking thread can take.
fn own_bounds<K: AsRef<[u8]>, R: RangeBounds<K>>(range: &R) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let own = |b: Bound<&K>| match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    (own(range.start_bound()), own(range.end_bound()))
}

/// A [`Db`] whose operations are futures. Cheap to clone: clones share the
/// database, which [`AsyncDb::close`] closes once the last clone closes it.
#[derive(Clone, Debug)]
pub struct AsyncDb {
    db: Arc<Db>,
    /// Counts the `AsyncDb` clones (in-flight operations hold `db` only).
    handles: Arc<()>,
}

impl AsyncDb {
    /// Opens (or creates) the database in `dir` with `options`, recovering
    /// it if needed, on a blocking thread.
    pub async fn open(options: Options, dir: impl Into<PathBuf>) -> Result<AsyncDb> {
        let dir = dir.into();
        let db = blocking(move || options.open(dir)).await?;
        Ok(AsyncDb::from_db(db))
    }

    /// Wraps an open database.
    pub fn from_db(db: Db) -> AsyncDb {
        AsyncDb {
            db: Arc::new(db),
            handles: Arc::new(()),
        }
    }

    /// The synchronous database, for calls that never block (such as
    /// [`Db::tree_names`] or [`Db::log_stats`]).
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Runs `f` with the database on a blocking thread.
    async fn with_db<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&Db) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let db = Arc::clone(&self.db);
        blocking(move || f(&db)).await
    }

    /// [`Db::tree`]: the tree named `name`, created with the default tree
    /// options if it does not exist.
    pub async fn tree(&self, name: &str) -> Result<AsyncTree> {
        let name = name.to_owned();
        let tree = self.with_db(move |db| db.tree(&name)).await?;
        Ok(AsyncTree { tree })
    }

    /// [`Db::create_tree`].
    pub async fn create_tree(&self, name: &str, options: TreeOptions) -> Result<AsyncTree> {
        let name = name.to_owned();
        let tree = self
            .with_db(move |db| db.create_tree(&name, options))
            .await?;
        Ok(AsyncTree { tree })
    }

    /// [`Db::open_tree`]: the tree named `name`, which must exist. Never
    /// blocks, so it is not a future.
    pub fn open_tree(&self, name: &str) -> Result<AsyncTree> {
        Ok(AsyncTree {
            tree: self.db.open_tree(name)?,
        })
    }

    /// [`Db::write`]: applies `batch` atomically with the database's
    /// durability; a durable commit awaits the group commit's fsync.
    pub async fn write(&self, batch: WriteBatch) -> Result<()> {
        self.with_db(move |db| db.write(batch)).await
    }

    /// [`Db::write_with`].
    pub async fn write_with(&self, batch: WriteBatch, durability: Durability) -> Result<()> {
        self.with_db(move |db| db.write_with(batch, durability))
            .await
    }

    /// [`Db::sync`]: makes every write so far durable.
    pub async fn sync(&self) -> Result<()> {
        self.with_db(Db::sync).await
    }

    /// [`Db::checkpoint`].
    pub async fn checkpoint(&self) -> Result<()> {
        self.with_db(Db::checkpoint).await
    }

    /// [`Db::check`]: reads and verifies every page of every tree.
    pub async fn check(&self) -> Result<()> {
        self.with_db(Db::check).await
    }

    /// Closes the database ([`Db::close`]) if this is the last `AsyncDb`
    /// clone; otherwise only this handle goes, and the last one closes it
    /// (dropping the last clone closes it too, without reporting errors).
    /// First waits for operations whose futures were dropped to finish.
    pub async fn close(self) -> Result<()> {
        let AsyncDb { db, handles } = self;
        if Arc::strong_count(&handles) > 1 {
            return Ok(());
        }
        blocking(move || {
            let mut db = db;
            loop {
                // Only in-flight operations hold other references, and
                // each finishes on its own.
                match Arc::try_unwrap(db) {
                    Ok(db) => return db.close(),
                    Err(shared) => {
                        db = shared;
                        std::thread::sleep(CLOSE_POLL_INTERVAL);
                    }
                }
            }
        })
        .await
    }
}

/// A [`Tree`] whose operations are futures. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AsyncTree {
    tree: Tree,
}

impl AsyncTree {
    /// Wraps a tree handle.
    pub fn from_tree(tree: Tree) -> AsyncTree {
        AsyncTree { tree }
    }

    /// The synchronous tree, for [`WriteBatch`] and non-blocking calls.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// The tree's name.
    pub fn name(&self) -> &str {
        self.tree.name()
    }

    /// Runs `f` with the tree on a blocking thread.
    async fn with_tree<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&Tree) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let tree = self.tree.clone();
        blocking(move || f(&tree)).await
    }

    /// [`Tree::get`]: a miss awaits the page read.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let key = key.to_vec();
        self.with_tree(move |t| t.get(&key)).await
    }

    /// [`Tree::len`]: the count the tree's meta page keeps.
    pub async fn len(&self) -> Result<u64> {
        self.with_tree(Tree::len).await
    }

    /// [`Tree::is_empty`].
    pub async fn is_empty(&self) -> Result<bool> {
        Ok(self.len().await? == 0)
    }

    /// [`Tree::contains_key`].
    pub async fn contains_key(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get(key).await?.is_some())
    }

    /// [`Tree::put`] with the database's durability. Returns whether the
    /// key existed.
    pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        let (key, value) = (key.to_vec(), value.to_vec());
        self.with_tree(move |t| t.put(&key, &value)).await
    }

    /// [`Tree::put_with`].
    pub async fn put_with(&self, key: &[u8], value: &[u8], durability: Durability) -> Result<bool> {
        let (key, value) = (key.to_vec(), value.to_vec());
        self.with_tree(move |t| t.put_with(&key, &value, durability))
            .await
    }

    /// [`Tree::delete`]. Returns whether the key existed.
    pub async fn delete(&self, key: &[u8]) -> Result<bool> {
        let key = key.to_vec();
        self.with_tree(move |t| t.delete(&key)).await
    }

    /// [`Tree::delete_with`].
    pub async fn delete_with(&self, key: &[u8], durability: Durability) -> Result<bool> {
        let key = key.to_vec();
        self.with_tree(move |t| t.delete_with(&key, durability))
            .await
    }

    /// Every entry of [`Tree::range`], in key order, collected on a
    /// blocking thread. For a large range, page with
    /// [`AsyncTree::range_take`].
    pub async fn range_collect<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
    ) -> Result<Vec<KeyValue>> {
        self.range_take(range, usize::MAX).await
    }

    /// The first `count_max` entries of [`Tree::range`], in key order. To
    /// page through a range, start the next call just past the last key.
    pub async fn range_take<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
        count_max: usize,
    ) -> Result<Vec<KeyValue>> {
        let bounds = own_bounds(&range);
        self.with_tree(move |t| {
            let mut out = Vec::new();
            t.scan_limit(bounds, count_max, |key, value| {
                out.push((key.to_vec(), value.to_vec()));
                true
            })?;
            Ok(out)
        })
        .await
    }

    /// Every entry whose key starts with `prefix` ([`Tree::prefix`]).
    pub async fn prefix_collect(&self, prefix: &[u8]) -> Result<Vec<KeyValue>> {
        let prefix = prefix.to_vec();
        self.with_tree(move |t| t.prefix(&prefix).collect()).await
    }

    /// [`Tree::first`].
    pub async fn first(&self) -> Result<Option<KeyValue>> {
        self.with_tree(Tree::first).await
    }

    /// [`Tree::last`].
    pub async fn last(&self) -> Result<Option<KeyValue>> {
        self.with_tree(Tree::last).await
    }

    /// [`Tree::stats`] (reads every page).
    pub async fn stats(&self) -> Result<TreeStats> {
        self.with_tree(Tree::stats).await
    }

    /// [`Tree::check`] (reads and verifies every page).
    pub async fn check(&self) -> Result<()> {
        self.with_tree(Tree::check).await
    }

    /// [`Tree::pool_status`]; takes only the pool's mutex, never waits for
    /// I/O, so it is not a future.
    pub fn pool_status(&self) -> PoolStatus {
        self.tree.pool_status()
    }
}
