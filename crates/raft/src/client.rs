//! A client of the service that finds the leader: used by the tests and
//! the benchmark.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, bail};
use openraft::{BasicNode, RaftMetrics};
use parking_lot::Mutex;
use reqwest::StatusCode;
use serde::Deserialize;
use tokio::time::Instant;

use crate::{NodeId, Response};

/// How long one HTTP request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The pause before a request is tried again at another node.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// A client of a cluster: sends writes and linearizable reads to the
/// leader, following the nodes' redirects, and tries again (at another
/// node) until its deadline when a node is down or no leader is known.
/// Writes are idempotent puts and deletes, so sending one again after an
/// unanswered attempt is safe.
#[derive(Debug)]
pub struct Client {
    http: reqwest::Client,
    addrs: Vec<String>,
    /// The address believed to be the leader's.
    leader: Mutex<String>,
    /// How long an operation keeps trying.
    deadline: Duration,
}

#[derive(Deserialize)]
struct Redirect {
    leader_addr: String,
}

#[derive(Deserialize)]
struct Dump {
    applied: Option<u64>,
    pairs: Vec<(String, String)>,
}

impl Client {
    /// A client of the nodes at `addrs` (`127.0.0.1:port`), each operation
    /// trying for at most `deadline`.
    pub fn new(addrs: Vec<String>, deadline: Duration) -> anyhow::Result<Client> {
        let first = addrs
            .first()
            .context("a client needs a node's address")?
            .clone();
        Ok(Client {
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(REQUEST_TIMEOUT)
                .pool_max_idle_per_host(256)
                .build()?,
            addrs,
            leader: Mutex::new(first),
            deadline,
        })
    }

    /// Adds a node's address to those tried.
    pub fn add_node(&mut self, addr: String) {
        self.addrs.push(addr);
    }

    /// The address believed to be the leader's.
    pub fn leader(&self) -> String {
        self.leader.lock().clone()
    }

    /// Sends a request built by `send` to the leader until it is answered
    /// with success, and returns the answer's body.
    async fn to_leader(
        &self,
        send: impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> anyhow::Result<(StatusCode, String)> {
        let give_up = Instant::now() + self.deadline;
        let mut next = 0;
        let mut redirects = 0u32;
        loop {
            let addr = self.leader();
            let failure = match send(&addr).send().await {
                Ok(answer) => {
                    let status = answer.status();
                    let body = answer.text().await.unwrap_or_default();
                    if status.is_success() || status == StatusCode::NOT_FOUND {
                        return Ok((status, body));
                    }
                    if status == StatusCode::MISDIRECTED_REQUEST
                        && let Ok(redirect) = serde_json::from_str::<Redirect>(&body)
                    {
                        *self.leader.lock() = redirect.leader_addr;
                        redirects += 1;
                        // Nodes that disagree on the leader during an
                        // election may send a request back and forth.
                        if redirects.is_multiple_of(4) {
                            if Instant::now() >= give_up {
                                bail!(
                                    "no leader answered within {:?}; redirected {redirects} times",
                                    self.deadline
                                );
                            }
                            tokio::time::sleep(RETRY_PAUSE).await;
                        }
                        continue;
                    }
                    if status == StatusCode::BAD_REQUEST {
                        bail!("{addr} refused the request: {body}");
                    }
                    format!("{addr} answered {status}: {body}")
                }
                Err(e) => format!("{addr}: {e}"),
            };
            if Instant::now() >= give_up {
                bail!(
                    "no leader answered within {:?}; last: {failure}",
                    self.deadline
                );
            }
            // Another node may know the leader, or be it.
            next = (next + 1) % self.addrs.len();
            *self.leader.lock() = self.addrs[next].clone();
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Sets `key` to `value` through the leader; returns the log index of
    /// the write once the leader has applied it.
    pub async fn put(&self, key: &str, value: &str) -> anyhow::Result<u64> {
        let (_, body) = self
            .to_leader(|addr| {
                self.http
                    .put(format!("http://{addr}/kv/{key}"))
                    .body(value.to_owned())
            })
            .await?;
        Ok(serde_json::from_str::<Response>(&body)?.index)
    }

    /// Removes `key` through the leader.
    pub async fn delete(&self, key: &str) -> anyhow::Result<u64> {
        let (_, body) = self
            .to_leader(|addr| self.http.delete(format!("http://{addr}/kv/{key}")))
            .await?;
        Ok(serde_json::from_str::<Response>(&body)?.index)
    }

    /// The value of `key`, read linearizably at the leader.
    pub async fn get(&self, key: &str) -> anyhow::Result<Option<String>> {
        let (status, body) = self
            .to_leader(|addr| self.http.get(format!("http://{addr}/kv/{key}")))
            .await?;
        Ok((status != StatusCode::NOT_FOUND).then_some(body))
    }

    /// The value of `key` in the state machine of the node at `addr`.
    pub async fn local_get(&self, addr: &str, key: &str) -> anyhow::Result<Option<String>> {
        let answer = self
            .http
            .get(format!("http://{addr}/local/{key}"))
            .send()
            .await?;
        match answer.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => Ok(Some(answer.text().await?)),
            status => bail!("{addr} answered {status}"),
        }
    }

    /// The last applied index and every pair of the node at `addr`.
    pub async fn dump(&self, addr: &str) -> anyhow::Result<(Option<u64>, Vec<(String, String)>)> {
        let dump: Dump = self
            .http
            .get(format!("http://{addr}/dump"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok((dump.applied, dump.pairs))
    }

    /// openraft's metrics of the node at `addr`.
    pub async fn metrics(&self, addr: &str) -> anyhow::Result<RaftMetrics<NodeId, BasicNode>> {
        Ok(self
            .http
            .get(format!("http://{addr}/admin/metrics"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    async fn admin(&self, addr: &str, path: &str, body: serde_json::Value) -> anyhow::Result<()> {
        let answer: serde_json::Value = self
            .http
            .post(format!("http://{addr}/admin/{path}"))
            .timeout(self.deadline)
            .json(&body)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if let Some(e) = answer.get("Err") {
            bail!("{path} at {addr} failed: {e}");
        }
        Ok(())
    }

    /// Initializes the cluster at `addr` with these voters.
    pub async fn init(&self, addr: &str, members: &[(NodeId, String)]) -> anyhow::Result<()> {
        self.admin(addr, "init", serde_json::to_value(members)?)
            .await
    }

    /// Adds a learner through the leader at `addr`; returns when it has
    /// caught up.
    pub async fn add_learner(
        &self,
        addr: &str,
        id: NodeId,
        learner_addr: &str,
    ) -> anyhow::Result<()> {
        self.admin(
            addr,
            "add-learner",
            serde_json::to_value((id, learner_addr))?,
        )
        .await
    }

    /// Makes `voters` the voters, through the leader at `addr`.
    pub async fn change_membership(
        &self,
        addr: &str,
        voters: &BTreeSet<NodeId>,
    ) -> anyhow::Result<()> {
        self.admin(addr, "change-membership", serde_json::to_value(voters)?)
            .await
    }

    /// Waits until the metrics of the node at `addr` satisfy `condition`
    /// (a node that does not answer does not), for at most the client's
    /// deadline.
    pub async fn wait_for(
        &self,
        addr: &str,
        what: &str,
        condition: impl Fn(&RaftMetrics<NodeId, BasicNode>) -> bool,
    ) -> anyhow::Result<RaftMetrics<NodeId, BasicNode>> {
        let give_up = Instant::now() + self.deadline;
        loop {
            if let Ok(metrics) = self.metrics(addr).await
                && condition(&metrics)
            {
                return Ok(metrics);
            }
            if Instant::now() >= give_up {
                bail!("{addr}: {what}: not within {:?}", self.deadline);
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}
