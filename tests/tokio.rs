//! The async API on a current-thread tokio runtime: concurrent tasks see
//! each other's writes, batches and ranges work, and the runtime's only
//! thread keeps running other tasks while durable commits wait for fsync.
//!
//! Run with `cargo test --features tokio --test tokio`.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]

mod common;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use barracuda::asynchronous::AsyncDb;
use barracuda::{Db, Durability, WriteBatch};
use common::tempdir;

fn options() -> barracuda::Options {
    Db::options()
        .buffer_pool_bytes(1 << 20)
        .log_bytes(16 << 20)
        .durability(Durability::Sync)
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

#[tokio::test(flavor = "current_thread")]
async fn concurrent_tasks_batches_ranges_and_reopen() {
    let dir = tempdir();
    let db = AsyncDb::open(options(), dir.path()).await.unwrap();
    let tree = db.tree("t").await.unwrap();
    let mut tasks = Vec::new();
    for task in 0..4u64 {
        let tree = tree.clone();
        tasks.push(tokio::spawn(async move {
            for i in (task..200).step_by(4) {
                assert!(!tree.put(&key(i), &i.to_le_bytes()).await.unwrap());
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        tree.get(&key(77)).await.unwrap().as_deref(),
        Some(&77u64.to_le_bytes()[..])
    );
    assert!(tree.delete(&key(77)).await.unwrap());
    assert!(!tree.contains_key(&key(77)).await.unwrap());
    let other = db.tree("other").await.unwrap();
    let mut batch = WriteBatch::new();
    batch.put(other.tree(), b"x", b"1");
    batch.delete(tree.tree(), &key(0));
    db.write(batch).await.unwrap();
    let range = tree.range_collect(key(10)..key(20)).await.unwrap();
    let keys: Vec<_> = range.into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, (10..20).map(key).collect::<Vec<_>>());
    let page = tree.range_take(key(100).., 5).await.unwrap();
    assert_eq!(page.len(), 5);
    assert_eq!(page[4].0, key(104));
    assert_eq!(tree.prefix_collect(b"key00019").await.unwrap().len(), 10);
    assert_eq!(tree.first().await.unwrap().unwrap().0, key(1));
    assert_eq!(tree.last().await.unwrap().unwrap().0, key(199));
    assert_eq!(tree.stats().await.unwrap().record_count, 198);
    assert_eq!(tree.len().await.unwrap(), 198);
    assert!(!tree.is_empty().await.unwrap());
    db.check().await.unwrap();
    // A second handle closes nothing; the last one closes the database.
    db.clone().close().await.unwrap();
    assert_eq!(other.get(b"x").await.unwrap().as_deref(), Some(&b"1"[..]));
    db.close().await.unwrap();
    assert!(matches!(
        tree.get(&key(1)).await,
        Err(barracuda::Error::Closed)
    ));
    let db = AsyncDb::open(options(), dir.path()).await.unwrap();
    let tree = db.open_tree("t").unwrap();
    assert_eq!(tree.range_collect::<&[u8], _>(..).await.unwrap().len(), 198);
    assert_eq!(
        db.open_tree("other")
            .unwrap()
            .get(b"x")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"1"[..])
    );
    db.close().await.unwrap();
}

/// The runtime has one thread. If a put blocked it for its fsync, the
/// ticker could not tick while the puts run; with the puts on the blocking
/// pool it ticks throughout.
#[tokio::test(flavor = "current_thread")]
async fn runtime_stays_responsive_during_durable_puts() {
    const PUT_COUNT: u64 = 100;
    const TICK: Duration = Duration::from_millis(1);
    let dir = tempdir();
    let db = AsyncDb::open(options(), dir.path()).await.unwrap();
    let tree = db.tree("t").await.unwrap();
    let ticks = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (ticks, done) = (Arc::clone(&ticks), Arc::clone(&done));
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(TICK);
            while !done.load(Ordering::Relaxed) {
                interval.tick().await;
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Let the ticker start, then count only ticks during the puts.
    tokio::task::yield_now().await;
    let before = ticks.load(Ordering::Relaxed);
    let mut ticks_between_puts = Vec::new();
    for i in 0..PUT_COUNT {
        let at = ticks.load(Ordering::Relaxed);
        tree.put_with(&key(i), b"durable", Durability::Sync)
            .await
            .unwrap();
        ticks_between_puts.push(ticks.load(Ordering::Relaxed) - at);
    }
    done.store(true, Ordering::Relaxed);
    ticker.await.unwrap();
    let during = ticks.load(Ordering::Relaxed) - before;
    // Every put crosses an await on the blocking pool, during which the
    // single thread is free: the ticker ran while puts were in flight. A
    // blocking put would leave no room for a tick until it returned, and
    // `during` would count at most the ticks between puts.
    let puts_with_ticks = ticks_between_puts.iter().filter(|&&t| t > 0).count();
    assert!(
        puts_with_ticks > 0 && during > 0,
        "ticker starved: {during} ticks during {PUT_COUNT} puts"
    );
    // Each put waited for its own log flush (one write and one fsync).
    assert!(db.db().log_stats().flushes >= PUT_COUNT);
    db.close().await.unwrap();
}
