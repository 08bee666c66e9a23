//! The replicated key-value service: one node per process, HTTP between
//! nodes and to clients.
//!
//! | method and path                | body                 | answer                                    |
//! |--------------------------------|----------------------|-------------------------------------------|
//! | `PUT /kv/{key}`                | the value            | `{"index": n}` once applied on the leader |
//! | `DELETE /kv/{key}`             |                      | `{"index": n}`                            |
//! | `GET /kv/{key}`                |                      | the value, linearizable (leader only)     |
//! | `GET /local/{key}`             |                      | the value in this node's state machine    |
//! | `GET /dump`                    |                      | `{"applied": n, "pairs": [[k, v], ...]}`  |
//! | `POST /admin/init`             | `[[id, "addr"], ...]`| initializes the cluster (empty: alone)    |
//! | `POST /admin/add-learner`      | `[id, "addr"]`       | adds a learner, waits for it to catch up  |
//! | `POST /admin/change-membership`| `[id, ...]`          | makes these nodes the voters              |
//! | `GET /admin/metrics`           |                      | openraft's metrics of this node           |
//! | `POST /raft/{append,vote,snapshot}` | openraft's RPCs | between nodes                             |
//!
//! A write or linearizable read sent to a node that is not the leader is
//! answered `421 Misdirected Request` with `{"leader_id": .., "leader_addr": ..}`
//! when the leader is known (`503` when not): the client retries there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post, put};
use openraft::error::{
    CheckIsLeaderError, ClientWriteError, ForwardToLeader, InstallSnapshotError, NetworkError,
    RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, SnapshotPolicy};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::store::StoreOptions;
use crate::{NodeId, Raft, Request, StateMachine, TypeConfig};

/// The largest value a client may write: larger entries would make the
/// log's batches and the replication messages large.
pub const VALUE_BYTES_MAX: usize = 1 << 20;

/// How one node runs.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The node's id in the cluster.
    pub id: NodeId,
    /// The address it listens on, `127.0.0.1:port`; also its address in
    /// the cluster.
    pub addr: String,
    /// The database directory.
    pub dir: PathBuf,
    /// A snapshot is built after this many log entries since the last.
    pub snapshot_logs: u64,
    /// Log entries kept below a snapshot when the log is purged.
    pub keep_logs: u64,
    /// The storage's options.
    pub store: StoreOptions,
}

/// The openraft configuration of a node: timeouts generous enough for a
/// loaded machine (a heartbeat every 100 ms, an election after 1 to 2 s of
/// silence).
pub fn raft_config(snapshot_logs: u64, keep_logs: u64) -> anyhow::Result<Config> {
    let config = Config {
        cluster_name: "barracuda-raft".to_owned(),
        heartbeat_interval: 100,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
        install_snapshot_timeout: 10_000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_logs),
        max_in_snapshot_log_to_keep: keep_logs,
        ..Config::default()
    };
    Ok(config.validate()?)
}

struct App {
    id: NodeId,
    addr: String,
    raft: Raft,
    state_machine: StateMachine,
}

/// Opens the node's storage, starts openraft and serves HTTP until the
/// process ends.
pub async fn run(config: NodeConfig) -> anyhow::Result<()> {
    let (log, state_machine) = crate::open_with(&config.dir, config.store.clone())?;
    let raft_config = Arc::new(raft_config(config.snapshot_logs, config.keep_logs)?);
    let network = Network {
        http: reqwest::Client::builder().no_proxy().build()?,
    };
    let raft = Raft::new(config.id, raft_config, network, log, state_machine.clone()).await?;
    let app = Arc::new(App {
        id: config.id,
        addr: config.addr.clone(),
        raft,
        state_machine,
    });
    let router = Router::new()
        .route("/kv/{key}", put(kv_put).delete(kv_delete).get(kv_get))
        .route("/local/{key}", get(local_get))
        .route("/dump", get(dump))
        .route("/admin/init", post(init))
        .route("/admin/add-learner", post(add_learner))
        .route("/admin/change-membership", post(change_membership))
        .route("/admin/metrics", get(metrics))
        .route("/raft/append", post(raft_append))
        .route("/raft/vote", post(raft_vote))
        .route("/raft/snapshot", post(raft_snapshot))
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(&config.addr).await?;
    tracing::info!(id = config.id, addr = %config.addr, "serving");
    axum::serve(listener, router).await?;
    Ok(())
}

type AppState = State<Arc<App>>;

fn error(status: StatusCode, message: impl std::fmt::Display) -> HttpResponse {
    (
        status,
        Json(serde_json::json!({ "error": message.to_string() })),
    )
        .into_response()
}

/// The answer to a request that only the leader can serve.
fn not_leader(
    forward: Option<&ForwardToLeader<NodeId, BasicNode>>,
    message: impl std::fmt::Display,
) -> HttpResponse {
    match forward {
        Some(ForwardToLeader {
            leader_id: Some(leader_id),
            leader_node: Some(node),
        }) => (
            StatusCode::MISDIRECTED_REQUEST,
            Json(serde_json::json!({ "leader_id": leader_id, "leader_addr": node.addr })),
        )
            .into_response(),
        Some(_) => error(StatusCode::SERVICE_UNAVAILABLE, "no leader is known"),
        None => error(StatusCode::INTERNAL_SERVER_ERROR, message),
    }
}

fn check_key(key: &str) -> Result<(), Box<HttpResponse>> {
    if key.is_empty() || key.len() > barracuda::KEY_BYTES_MAX {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            format!("a key has 1 to {} bytes", barracuda::KEY_BYTES_MAX),
        )));
    }
    Ok(())
}

async fn write(app: &App, request: Request) -> HttpResponse {
    match app.raft.client_write(request).await {
        Ok(response) => Json(response.data).into_response(),
        Err(e) => {
            let forward = match &e {
                RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => Some(f),
                _ => None,
            };
            not_leader(forward, &e)
        }
    }
}

async fn kv_put(State(app): AppState, Path(key): Path<String>, value: Bytes) -> HttpResponse {
    if let Err(answer) = check_key(&key) {
        return *answer;
    }
    if value.len() > VALUE_BYTES_MAX {
        return error(
            StatusCode::BAD_REQUEST,
            format!("a value has at most {VALUE_BYTES_MAX} bytes"),
        );
    }
    let Ok(value) = String::from_utf8(value.to_vec()) else {
        return error(StatusCode::BAD_REQUEST, "a value is UTF-8 text");
    };
    write(&app, Request::Put { key, value }).await
}

async fn kv_delete(State(app): AppState, Path(key): Path<String>) -> HttpResponse {
    if let Err(answer) = check_key(&key) {
        return *answer;
    }
    write(&app, Request::Delete { key }).await
}

async fn read_local(app: &App, key: String) -> HttpResponse {
    match app.state_machine.get(key).await {
        Ok(Some(value)) => value.into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, "no such key"),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// A linearizable read: the leader confirms with a quorum that it still
/// leads and waits until its state machine has applied everything
/// committed before the read, then reads locally.
async fn kv_get(State(app): AppState, Path(key): Path<String>) -> HttpResponse {
    match app.raft.ensure_linearizable().await {
        Ok(_) => read_local(&app, key).await,
        Err(e) => {
            let forward = match &e {
                RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => Some(f),
                _ => None,
            };
            not_leader(forward, &e)
        }
    }
}

async fn local_get(State(app): AppState, Path(key): Path<String>) -> HttpResponse {
    read_local(&app, key).await
}

#[derive(Serialize)]
struct Dump {
    applied: Option<u64>,
    pairs: Vec<(String, String)>,
}

async fn dump(State(app): AppState) -> HttpResponse {
    match app.state_machine.dump().await {
        Ok((applied, pairs)) => Json(Dump { applied, pairs }).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn init(State(app): AppState, Json(members): Json<Vec<(NodeId, String)>>) -> HttpResponse {
    let mut nodes = BTreeMap::new();
    if members.is_empty() {
        nodes.insert(app.id, BasicNode::new(&app.addr));
    }
    for (id, addr) in members {
        nodes.insert(id, BasicNode::new(addr));
    }
    Json(app.raft.initialize(nodes).await).into_response()
}

async fn add_learner(
    State(app): AppState,
    Json((id, addr)): Json<(NodeId, String)>,
) -> HttpResponse {
    Json(app.raft.add_learner(id, BasicNode::new(addr), true).await).into_response()
}

async fn change_membership(
    State(app): AppState,
    Json(voters): Json<BTreeSet<NodeId>>,
) -> HttpResponse {
    Json(app.raft.change_membership(voters, false).await).into_response()
}

async fn metrics(State(app): AppState) -> HttpResponse {
    let metrics = app.raft.metrics().borrow().clone();
    Json(metrics).into_response()
}

async fn raft_append(
    State(app): AppState,
    Json(request): Json<AppendEntriesRequest<TypeConfig>>,
) -> HttpResponse {
    Json(app.raft.append_entries(request).await).into_response()
}

async fn raft_vote(State(app): AppState, Json(request): Json<VoteRequest<NodeId>>) -> HttpResponse {
    Json(app.raft.vote(request).await).into_response()
}

async fn raft_snapshot(
    State(app): AppState,
    Json(request): Json<InstallSnapshotRequest<TypeConfig>>,
) -> HttpResponse {
    Json(app.raft.install_snapshot(request).await).into_response()
}

/// openraft's network: JSON over HTTP, one shared connection pool.
struct Network {
    http: reqwest::Client,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Connection {
        Connection {
            http: self.http.clone(),
            target,
            addr: node.addr.clone(),
        }
    }
}

/// The RPCs to one node.
struct Connection {
    http: reqwest::Client,
    target: NodeId,
    addr: String,
}

impl Connection {
    async fn call<Req, Resp, Err>(
        &self,
        path: &str,
        request: Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, Err>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        Err: std::error::Error + DeserializeOwned,
    {
        let url = format!("http://{}/raft/{path}", self.addr);
        let answer = self
            .http
            .post(url)
            .timeout(timeout)
            .json(&request)
            .send()
            .await
            .map_err(|e| {
                // A refused connection is a node that is down: openraft
                // backs off instead of retrying at once.
                if e.is_connect() {
                    RPCError::Unreachable(Unreachable::new(&e))
                } else {
                    RPCError::Network(NetworkError::new(&e))
                }
            })?;
        let result: Result<Resp, Err> = answer
            .json()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        request: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("append", request, option.hard_ttl()).await
    }

    async fn install_snapshot(
        &mut self,
        request: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call("snapshot", request, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        request: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("vote", request, option.hard_ttl()).await
    }
}
