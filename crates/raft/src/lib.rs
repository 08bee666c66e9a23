//! Barracuda as the storage of an [openraft](https://docs.rs/openraft/0.9)
//! cluster, and a small replicated key-value service built on it.
//!
//! [`open`] opens one Barracuda [`barracuda::Db`] and returns the two halves
//! openraft asks for: a [`LogStore`] (the log, the vote and the committed
//! index) and a [`StateMachine`] (a key-value tree applied from committed
//! entries, and its snapshots). Both live in trees of the same database:
//!
//! | tree          | keys                              | values                         |
//! |---------------|-----------------------------------|--------------------------------|
//! | `raft.log`    | log index, big-endian `u64`       | the entry (JSON)               |
//! | `raft.meta`   | `vote`, `committed`, `purged`     | JSON                           |
//! | `sm.meta`     | `applied`, `snapshot`             | JSON                           |
//! | `sm.kv.0`/`1` | the user's keys                   | the user's values              |
//! | `sm.snapshot` | generation `u64`, chunk `u32`, BE | the current snapshot's bytes   |
//!
//! The state machine's data is in one of two trees, named by `applied`; a
//! snapshot is installed into the other one, and one atomic write switches.
//!
//! The service ([`service`]) runs one node per process: HTTP between nodes
//! (axum and reqwest, as openraft's examples do), writes through the leader
//! and linearizable reads. The binary `barracuda-raft` runs a node
//! (`barracuda-raft node`) or a benchmark (`barracuda-raft bench`).

pub mod client;
pub mod cluster;
mod error;
pub mod service;
mod store;

pub use error::{Error, Result};
pub use store::{LogStore, StateMachine, StoreOptions, open, open_with};

use std::io::Cursor;

use serde::{Deserialize, Serialize};

/// A node's id in the cluster.
pub type NodeId = u64;

/// What a client asks the state machine to do: one entry of the log each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Sets `key` to `value`.
    Put {
        /// The key (at most [`barracuda::KEY_BYTES_MAX`] bytes).
        key: String,
        /// The value.
        value: String,
    },
    /// Removes `key`.
    Delete {
        /// The key.
        key: String,
    },
}

/// What the state machine answers to a [`Request`] once it is applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The index of the log entry that carried the request.
    pub index: u64,
}

openraft::declare_raft_types!(
    /// The openraft types of the replicated key-value store.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = openraft::BasicNode,
);

/// A log entry of this cluster.
pub type Entry = openraft::Entry<TypeConfig>;

/// The openraft instance of one node.
pub type Raft = openraft::Raft<TypeConfig>;
