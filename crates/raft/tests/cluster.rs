//! Clusters of node processes on loopback ports: a leader killed with
//! SIGKILL under writes, and a node killed in the middle of a snapshot
//! install. Every step waits for a condition with a generous deadline.
//!
//! `BARRACUDA_RAFT_RUNS=20 cargo test --release -p barracuda-raft --test
//! cluster -- --nocapture` runs the scenarios 20 times and prints each
//! run's time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use barracuda_raft::NodeId;
use barracuda_raft::client::Client;
use barracuda_raft::cluster::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_barracuda-raft");

/// How long any one wait may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);

/// Client requests in flight at once.
const CONCURRENCY: usize = 64;

fn key(i: usize) -> String {
    format!("key{i:06}")
}

fn value(i: usize, round: u32) -> String {
    format!("value {i} of round {round}")
}

/// Puts `key(i)` = `value(i, round)` for every `i` in `range` through the
/// leader, `CONCURRENCY` at a time; fails if any is not acknowledged.
async fn put_all(
    client: &Arc<Client>,
    range: std::ops::Range<usize>,
    round: u32,
) -> anyhow::Result<()> {
    let next = Arc::new(AtomicUsize::new(range.start));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (client, next, end) = (client.clone(), next.clone(), range.end);
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    return anyhow::Ok(());
                }
                client.put(&key(i), &value(i, round)).await?;
            }
        });
    }
    while let Some(result) = workers.join_next().await {
        result??;
    }
    Ok(())
}

/// The leader's id, once the node at `addr` knows one.
async fn leader(client: &Client, addr: &str) -> anyhow::Result<NodeId> {
    let metrics = client
        .wait_for(addr, "a leader is known", |m| m.current_leader.is_some())
        .await?;
    Ok(metrics.current_leader.expect("waited for a leader"))
}

/// Waits until every node in `ids` has applied what the leader had
/// applied after a linearizable read, then checks that each holds exactly
/// `expected`.
///
/// The leader is the node that answered a linearizable read (it confirmed
/// its leadership with a quorum): a restarted node may believe for a while
/// that it still leads, and its metrics would say too little.
async fn check_all(
    cluster: &Cluster,
    client: &Client,
    ids: &[NodeId],
    expected: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let (probe, probe_value) = expected.iter().next().expect("some writes");
    assert_eq!(client.get(probe).await?.as_ref(), Some(probe_value));
    let leader_metrics = client.metrics(&client.leader()).await?;
    let applied = leader_metrics.last_applied.map(|l| l.index);
    for &id in ids {
        let addr = cluster.addr(id)?;
        client
            .wait_for(&addr, "caught up with the leader", |m| {
                m.last_applied.map(|l| l.index) >= applied
            })
            .await?;
        let (_, pairs) = client.dump(&addr).await?;
        let pairs: BTreeMap<String, String> = pairs.into_iter().collect();
        assert_eq!(
            pairs.len(),
            expected.len(),
            "node {id} holds as many pairs as acknowledged"
        );
        assert!(
            pairs == *expected,
            "node {id} holds every acknowledged write and nothing else"
        );
    }
    Ok(())
}

/// Three nodes; 10,000 writes; the leader killed; more writes and deletes
/// through the new leader; the old leader restarted catches up.
async fn leader_killed() -> anyhow::Result<()> {
    let mut cluster = Cluster::new(BIN, 10_000, 1_000)?;
    for id in 1..=3 {
        cluster.start(id, None).await?;
    }
    let client = Arc::new(cluster.client(DEADLINE)?);
    client
        .init(&cluster.addr(1)?, &cluster.members(&[1, 2, 3])?)
        .await?;
    let first = leader(&client, &cluster.addr(1)?).await?;

    let mut expected = BTreeMap::new();
    put_all(&client, 0..10_000, 0).await?;
    expected.extend((0..10_000).map(|i| (key(i), value(i, 0))));

    cluster.kill(first)?;
    let survivor = *cluster
        .ids()
        .iter()
        .find(|&&id| id != first)
        .expect("two survive");
    // Writes sent now wait for the new leader (the client tries the
    // survivors until one leads).
    put_all(&client, 5_000..12_000, 1).await?;
    expected.extend((5_000..12_000).map(|i| (key(i), value(i, 1))));
    for i in 0..100 {
        client.delete(&key(i)).await?;
        expected.remove(&key(i));
    }
    let second = leader(&client, &cluster.addr(survivor)?).await?;
    assert_ne!(second, first, "a new leader was elected");
    assert_eq!(client.get(&key(4_999)).await?, Some(value(4_999, 0)));
    assert_eq!(client.get(&key(5_000)).await?, Some(value(5_000, 1)));
    assert_eq!(client.get(&key(0)).await?, None);

    cluster.start(first, None).await?;
    check_all(&cluster, &client, &[1, 2, 3], &expected).await?;
    Ok(())
}

/// Three nodes that snapshot every 500 entries and purge the log at once;
/// a fourth node added later needs a snapshot, and is killed in the middle
/// of installing it (its data written, the switch not made). Restarted, it
/// receives the snapshot again and catches up, and then joins as a voter.
async fn killed_during_snapshot_install() -> anyhow::Result<()> {
    let mut cluster = Cluster::new(BIN, 500, 0)?;
    for id in 1..=3 {
        cluster.start(id, None).await?;
    }
    let client = cluster.client(DEADLINE)?;
    client
        .init(&cluster.addr(1)?, &cluster.members(&[1, 2, 3])?)
        .await?;
    let leader_id = leader(&client, &cluster.addr(1)?).await?;
    let client_arc = Arc::new(client);
    put_all(&client_arc, 0..3_000, 0).await?;
    let mut expected: BTreeMap<String, String> =
        (0..3_000).map(|i| (key(i), value(i, 0))).collect();
    let leader_addr = cluster.addr(leader_id)?;
    client_arc
        .wait_for(&leader_addr, "the log purged", |m| {
            m.purged.is_some_and(|p| p.index > 0)
        })
        .await?;

    let marker = cluster.dir(4).with_extension("paused");
    let addr4 = cluster.start(4, Some(&marker)).await?;
    // The leader's log starts after the purged entries: node 4 can only
    // catch up from a snapshot. The call returns once it has.
    let adding = {
        let client = client_arc.clone();
        let (leader_addr, addr4) = (leader_addr.clone(), addr4.clone());
        tokio::spawn(async move { client.add_learner(&leader_addr, 4, &addr4).await })
    };
    let give_up = Instant::now() + DEADLINE;
    while !marker.exists() {
        assert!(
            Instant::now() < give_up,
            "node 4 did not start installing a snapshot"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.kill(4)?;
    cluster.start(4, None).await?;
    adding.await??;
    client_arc
        .wait_for(&addr4, "holds the installed snapshot", |m| {
            m.snapshot.is_some()
        })
        .await?;

    client_arc
        .change_membership(&leader_addr, &BTreeSet::from([1, 2, 3, 4]))
        .await?;
    let mut client = Arc::try_unwrap(client_arc).expect("no other user");
    client.add_node(addr4);
    let client = Arc::new(client);
    put_all(&client, 2_500..3_500, 1).await?;
    expected.extend((2_500..3_500).map(|i| (key(i), value(i, 1))));
    check_all(&cluster, &client, &[1, 2, 3, 4], &expected).await?;
    Ok(())
}

fn runs() -> usize {
    std::env::var("BARRACUDA_RAFT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_survives_kills() {
    for run in 1..=runs() {
        let start = Instant::now();
        tokio::time::timeout(Duration::from_secs(300), leader_killed())
            .await
            .expect("the leader scenario ends within 5 minutes")
            .expect("the leader scenario");
        let leader_time = start.elapsed();
        let start = Instant::now();
        tokio::time::timeout(Duration::from_secs(300), killed_during_snapshot_install())
            .await
            .expect("the snapshot scenario ends within 5 minutes")
            .expect("the snapshot scenario");
        eprintln!(
            "run {run}: leader killed {:.1} s, killed during snapshot install {:.1} s",
            leader_time.as_secs_f64(),
            start.elapsed().as_secs_f64()
        );
    }
}
