//! A cluster of node processes on loopback ports, each with its database
//! in a temporary directory: for the tests and the benchmark. Dropping it
//! kills the processes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::time::Instant;

use crate::NodeId;
use crate::client::Client;

/// How many fresh ports a node tries when another process took the one it
/// was given.
const PORT_ATTEMPTS: usize = 5;

/// How long a started node may take to answer.
const START_DEADLINE: Duration = Duration::from_secs(60);

struct Node {
    addr: String,
    child: Option<Child>,
}

/// Node processes of the `barracuda-raft` binary.
pub struct Cluster {
    bin: PathBuf,
    root: tempfile::TempDir,
    snapshot_logs: u64,
    keep_logs: u64,
    nodes: BTreeMap<NodeId, Node>,
    http: reqwest::Client,
}

impl Cluster {
    /// A cluster of no node yet, of the binary at `bin`, whose nodes build
    /// a snapshot every `snapshot_logs` entries and keep `keep_logs` below
    /// it.
    pub fn new(
        bin: impl Into<PathBuf>,
        snapshot_logs: u64,
        keep_logs: u64,
    ) -> anyhow::Result<Cluster> {
        Ok(Cluster {
            bin: bin.into(),
            root: tempfile::Builder::new()
                .prefix("barracuda-raft")
                .tempdir()?,
            snapshot_logs,
            keep_logs,
            nodes: BTreeMap::new(),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()?,
        })
    }

    /// The directory of node `id`'s database.
    pub fn dir(&self, id: NodeId) -> PathBuf {
        self.root.path().join(format!("n{id}"))
    }

    /// The address of node `id`.
    pub fn addr(&self, id: NodeId) -> anyhow::Result<String> {
        Ok(self.nodes.get(&id).context("no such node")?.addr.clone())
    }

    /// The addresses of the nodes started so far.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.values().map(|n| n.addr.clone()).collect()
    }

    /// A client of the nodes started so far.
    pub fn client(&self, deadline: Duration) -> anyhow::Result<Client> {
        Client::new(self.addrs(), deadline)
    }

    fn spawn(&self, id: NodeId, addr: &str, pause_install: Option<&Path>) -> anyhow::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.path().join(format!("n{id}.log")))?;
        let mut command = Command::new(&self.bin);
        command
            .arg("node")
            .args(["--id", &id.to_string(), "--addr", addr])
            .arg("--dir")
            .arg(self.dir(id))
            .args(["--snapshot-logs", &self.snapshot_logs.to_string()])
            .args(["--keep-logs", &self.keep_logs.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(marker) = pause_install {
            command.arg("--pause-install").arg(marker);
        }
        Ok(command.spawn()?)
    }

    /// Starts node `id`: on a free loopback port the first time, on its
    /// port again after [`Cluster::kill`]. Returns its address once it
    /// answers.
    pub async fn start(
        &mut self,
        id: NodeId,
        pause_install: Option<&Path>,
    ) -> anyhow::Result<String> {
        if let Some(node) = self.nodes.get(&id) {
            if node.child.is_some() {
                bail!("node {id} runs already");
            }
            let addr = node.addr.clone();
            let mut child = self.spawn(id, &addr, pause_install)?;
            let up = self.wait_up(&addr, &mut child).await;
            self.nodes.get_mut(&id).context("no such node")?.child = Some(child);
            up?;
            return Ok(addr);
        }
        for _ in 0..PORT_ATTEMPTS {
            // A port the kernel says is free; another process may take it
            // before the node binds it, and then the node exits and
            // another port is tried.
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let addr = format!("127.0.0.1:{port}");
            let mut child = self.spawn(id, &addr, pause_install)?;
            match self.wait_up(&addr, &mut child).await {
                Ok(()) => {
                    self.nodes.insert(
                        id,
                        Node {
                            addr: addr.clone(),
                            child: Some(child),
                        },
                    );
                    return Ok(addr);
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    tracing::warn!("node {id} did not start on {addr}: {e}");
                }
            }
        }
        bail!("node {id} did not start on {PORT_ATTEMPTS} ports")
    }

    /// Waits until the node at `addr` answers, or its process exits.
    async fn wait_up(&self, addr: &str, child: &mut Child) -> anyhow::Result<()> {
        let give_up = Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = child.try_wait()? {
                bail!("the node at {addr} exited: {status}");
            }
            let url = format!("http://{addr}/admin/metrics");
            if let Ok(answer) = self.http.get(url).send().await
                && answer.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() >= give_up {
                bail!("the node at {addr} did not answer within {START_DEADLINE:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills node `id` with SIGKILL and reaps it.
    pub fn kill(&mut self, id: NodeId) -> anyhow::Result<()> {
        let node = self.nodes.get_mut(&id).context("no such node")?;
        if let Some(mut child) = node.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// The ids of the nodes started so far.
    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// The members argument of [`Client::init`] for these nodes.
    pub fn members(&self, ids: &[NodeId]) -> anyhow::Result<Vec<(NodeId, String)>> {
        ids.iter().map(|&id| Ok((id, self.addr(id)?))).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
