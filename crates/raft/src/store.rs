//! openraft's storage traits on one Barracuda database.
//!
//! # When something is durable
//!
//! - [`LogStore`]'s `append` writes the entries (in as many atomic batches
//!   as their size needs, each applied whole or not at all) unsynced, and
//!   hands openraft's callback to a flusher thread, which syncs the
//!   database's log (`Db::sync`, one fsync for every append waiting) and
//!   only then calls the callbacks, in order: an entry openraft counts as
//!   flushed is on disk, and openraft goes on appending while the disk
//!   syncs, so that concurrent client writes share fsyncs.
//! - The vote is written with [`Durability::Sync`] before the call returns.
//! - The committed log id is written with [`Durability::NoSync`]: the next
//!   sync (of an append, usually within a millisecond) makes it durable.
//!   openraft uses it only at start, to apply the committed entries again
//!   before it hears from the leader; a value lost in a crash is an older
//!   committed id, which is still committed, so the node applies less at
//!   start and the rest when the leader's next message says it is
//!   committed. Syncing it would cost one fsync per commit in openraft's
//!   core loop, which handles one client write per turn: a node did 460 to
//!   700 writes/s so, against 1,260 now (`barracuda-raft bench`, one node,
//!   on a loaded 2-core machine).
//! - Truncation (`truncate`) deletes the entries from the end backwards, in
//!   atomic batches, and syncs: a crash in the middle leaves a shorter log
//!   with no hole. Purging (`purge`) first records the purged log id, in
//!   the same atomic batch as the first deletes, then deletes from the
//!   start: a crash leaves entries at or below the purged id, which [`open`]
//!   deletes.
//! - The state machine's applies are written with [`Durability::NoSync`]:
//!   a client is answered once its entry is committed (durable on a quorum)
//!   and applied, and a crash that loses the last applies is repaired by
//!   openraft at start, which applies the committed entries after the
//!   recovered `last_applied` again. Every apply batch holds the entries'
//!   changes and the last applied log id and membership they lead to, so
//!   that what is recovered is always a state of the log. The log is
//!   purged only up to a snapshot, and a snapshot is persisted after a
//!   sync of the database, which makes every apply before it durable: the
//!   recovered `last_applied` is never below the purged entries.
//! - Snapshots, built or installed, are synced before openraft is told.

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use barracuda::{Db, Durability, Options, Tree, WriteBatch};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, SnapshotMeta, StorageError, StoredMembership, Vote,
};
use parking_lot::{Mutex, RwLock};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::{Entry, NodeId, Request, Response, TypeConfig};

const LOG_TREE: &str = "raft.log";
const RAFT_META_TREE: &str = "raft.meta";
const SM_META_TREE: &str = "sm.meta";
const KV_TREES: [&str; 2] = ["sm.kv.0", "sm.kv.1"];
const SNAPSHOT_TREE: &str = "sm.snapshot";

const VOTE_KEY: &[u8] = b"vote";
const COMMITTED_KEY: &[u8] = b"committed";
const PURGED_KEY: &[u8] = b"purged";
const APPLIED_KEY: &[u8] = b"applied";
const SNAPSHOT_KEY: &[u8] = b"snapshot";

/// A persisted snapshot is cut into values of this size.
const SNAPSHOT_CHUNK_BYTES: usize = 256 << 10;

/// A batch is written once its operations take this share of the most one
/// batch may hold (`Tree::batch_ops_max`): the rest is room for the
/// records written with them.
const BATCH_SHARE_MAX: f64 = 0.5;

/// The default cache of each tree: the store has six, and a node's data is
/// small next to the default pool.
const BUFFER_POOL_BYTES_DEFAULT: usize = 32 << 20;

/// How the committed log id is written: unsynced, see the module's
/// documentation (`Durability::Sync` makes it durable when
/// `save_committed` returns, at one fsync per commit in openraft's core
/// loop).
const COMMITTED_DURABILITY: Durability = Durability::NoSync;

/// Options of [`open_with`].
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// The database's options.
    pub db: Options,
    /// For crash tests: when set, an install of a snapshot stops before
    /// its switch (its data and chunks written and synced), creates this
    /// file and waits forever, for the test to kill the process.
    pub pause_install: Option<PathBuf>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            db: Db::options()
                .buffer_pool_bytes(BUFFER_POOL_BYTES_DEFAULT)
                .durability(Durability::Sync),
            pause_install: None,
        }
    }
}

/// A snapshot's meta.
type Meta = SnapshotMeta<NodeId, BasicNode>;

/// The state machine's record, written with every apply.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Applied {
    last_applied: Option<LogId<NodeId>>,
    last_membership: StoredMembership<NodeId, BasicNode>,
    /// Which of the two key-value trees holds the data.
    active: usize,
}

/// The current snapshot's record: its chunks are the keys of
/// `SNAPSHOT_TREE` that start with `generation`.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SnapshotRecord {
    meta: SnapshotMeta<NodeId, BasicNode>,
    generation: u64,
    chunks: u32,
}

#[derive(Debug, Default)]
struct SnapshotState {
    current: Option<SnapshotRecord>,
    next_generation: u64,
}

struct Inner {
    db: Arc<Db>,
    /// Callbacks of appended entries, for the flusher thread to call once
    /// a sync covers them.
    flushes: Mutex<std::sync::mpsc::Sender<LogFlushed<TypeConfig>>>,
    log: Tree,
    raft_meta: Tree,
    sm_meta: Tree,
    kv: [Tree; 2],
    snapshots: Tree,
    /// The apply lock: held by an apply for its whole write, by a snapshot
    /// build while it reads the data, and by an install.
    applied: Mutex<Applied>,
    /// Which key-value tree readers read: changed, under the apply lock,
    /// only by an install.
    active: RwLock<usize>,
    /// Held while a snapshot is persisted or read (taken after `applied`
    /// when both are).
    snapshot: Mutex<SnapshotState>,
    /// See [`StoreOptions::pause_install`].
    pause_install: Option<PathBuf>,
}

/// openraft's log storage: the log, the vote and the committed index.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Inner>,
}

/// openraft's state machine: a key-value tree and its snapshots.
#[derive(Clone)]
pub struct StateMachine {
    inner: Arc<Inner>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("db", &self.inner.db.path())
            .finish()
    }
}

impl Debug for StateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachine")
            .field("db", &self.inner.db.path())
            .finish()
    }
}

/// Opens (or creates) the storage in `dir` with the default options.
pub fn open(dir: impl AsRef<Path>) -> Result<(LogStore, StateMachine)> {
    open_with(dir, StoreOptions::default())
}

/// Opens (or creates) the storage in `dir`, recovers the database and
/// finishes what a crash interrupted: entries at or below the purged log id
/// and chunks of snapshots other than the current one are deleted.
pub fn open_with(dir: impl AsRef<Path>, options: StoreOptions) -> Result<(LogStore, StateMachine)> {
    let dir = dir.as_ref();
    let db = options
        .db
        .open(dir)
        .map_err(Error::store(format!("open {}", dir.display())))?;
    let tree = |name: &str| {
        db.tree(name)
            .map_err(Error::store(format!("open tree {name}")))
    };
    let log = tree(LOG_TREE)?;
    let raft_meta = tree(RAFT_META_TREE)?;
    let sm_meta = tree(SM_META_TREE)?;
    let kv = [tree(KV_TREES[0])?, tree(KV_TREES[1])?];
    let snapshots = tree(SNAPSHOT_TREE)?;
    let applied: Applied = read_record(&sm_meta, APPLIED_KEY)?.unwrap_or_default();
    if applied.active > 1 {
        return Err(Error::Corrupted {
            reason: format!("the applied record names key-value tree {}", applied.active),
        });
    }
    let current: Option<SnapshotRecord> = read_record(&sm_meta, SNAPSHOT_KEY)?;
    let db = Arc::new(db);
    let (flushes, pending) = std::sync::mpsc::channel();
    let flusher_db = db.clone();
    std::thread::Builder::new()
        .name("raft-log-flusher".to_owned())
        .spawn(move || flush_appends(&flusher_db, &pending))
        .map_err(|source| Error::Io {
            context: "start the log flusher thread".to_owned(),
            source,
        })?;
    let inner = Inner {
        flushes: Mutex::new(flushes),
        active: RwLock::new(applied.active),
        applied: Mutex::new(applied),
        snapshot: Mutex::new(SnapshotState {
            next_generation: current.as_ref().map_or(0, |c| c.generation + 1),
            current,
        }),
        db,
        pause_install: options.pause_install,
        log,
        raft_meta,
        sm_meta,
        kv,
        snapshots,
    };
    inner.finish_interrupted()?;
    let inner = Arc::new(inner);
    Ok((
        LogStore {
            inner: inner.clone(),
        },
        StateMachine { inner },
    ))
}

/// The flusher thread: waits for the callbacks of appended entries, syncs
/// the database once for all those waiting, then calls them in order. It
/// ends when the store is dropped.
fn flush_appends(db: &Db, pending: &std::sync::mpsc::Receiver<LogFlushed<TypeConfig>>) {
    while let Ok(first) = pending.recv() {
        let mut callbacks = vec![first];
        callbacks.extend(pending.try_iter());
        match db.sync() {
            Ok(()) => {
                for callback in callbacks {
                    callback.log_io_completed(Ok(()));
                }
            }
            Err(e) => {
                for callback in callbacks {
                    callback
                        .log_io_completed(Err(std::io::Error::other(format!("sync the log: {e}"))));
                }
            }
        }
    }
}

fn read_record<T: DeserializeOwned>(tree: &Tree, key: &[u8]) -> Result<Option<T>> {
    let context = || format!("{} {}", tree.name(), String::from_utf8_lossy(key));
    match tree.get(key).map_err(Error::store(context()))? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(Error::codec(context())),
    }
}

fn encode<T: Serialize>(value: &T, what: &str) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(Error::codec(what))
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_index(key: &[u8]) -> Result<u64> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| Error::Corrupted {
        reason: format!("a log key of {} bytes", key.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

fn chunk_key(generation: u64, chunk: u32) -> [u8; 12] {
    let mut key = [0; 12];
    key[..8].copy_from_slice(&generation.to_be_bytes());
    key[8..].copy_from_slice(&chunk.to_be_bytes());
    key
}

/// The keys of `tree` in `range`.
fn keys_in(tree: &Tree, range: impl RangeBounds<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    tree.scan(range, |key, _value| {
        keys.push(key.to_vec());
        true
    })
    .map_err(Error::store(format!("scan {}", tree.name())))?;
    Ok(keys)
}

/// Cuts a stream of operations into atomic batches that the database
/// accepts: each batch is written when it is full, with
/// [`Durability::NoSync`]; `finish` writes the last one.
struct Batcher<'a> {
    db: &'a Db,
    batch: WriteBatch,
    /// The share of the most one batch may hold that `batch` takes.
    share: f64,
    context: &'static str,
}

impl<'a> Batcher<'a> {
    fn new(db: &'a Db, context: &'static str) -> Self {
        Batcher {
            db,
            batch: WriteBatch::new(),
            share: 0.0,
            context,
        }
    }

    fn share_of(tree: &Tree, key: &[u8], value_bytes: usize) -> f64 {
        1.0 / tree.batch_ops_max(key.len(), value_bytes) as f64
    }

    /// Whether an operation would take the batch past its share.
    fn would_fill(&self, tree: &Tree, key: &[u8], value_bytes: usize) -> bool {
        !self.batch.is_empty()
            && self.share + Self::share_of(tree, key, value_bytes) > BATCH_SHARE_MAX
    }

    /// Adds a put, writing the batch first if it is full.
    fn put(&mut self, tree: &Tree, key: &[u8], value: &[u8]) -> Result<()> {
        if self.would_fill(tree, key, value.len()) {
            self.flush()?;
        }
        self.put_unchecked(tree, key, value);
        Ok(())
    }

    /// Adds a put to this batch, whatever its share.
    fn put_unchecked(&mut self, tree: &Tree, key: &[u8], value: &[u8]) {
        self.share += Self::share_of(tree, key, value.len());
        self.batch.put(tree, key, value);
    }

    /// Adds a delete, writing the batch first if it is full.
    fn delete(&mut self, tree: &Tree, key: &[u8]) -> Result<()> {
        if self.would_fill(tree, key, 0) {
            self.flush()?;
        }
        self.delete_unchecked(tree, key);
        Ok(())
    }

    fn delete_unchecked(&mut self, tree: &Tree, key: &[u8]) {
        self.share += Self::share_of(tree, key, 0);
        self.batch.delete(tree, key);
    }

    /// Writes the batch, not synced.
    fn flush(&mut self) -> Result<()> {
        self.share = 0.0;
        let batch = std::mem::take(&mut self.batch);
        if batch.is_empty() {
            return Ok(());
        }
        self.db
            .write_with(batch, Durability::NoSync)
            .map_err(Error::store(self.context))
    }

    /// Writes the last batch with `durability`; with [`Durability::Sync`],
    /// every batch before it is durable too.
    fn finish(self, durability: Durability) -> Result<()> {
        if self.batch.is_empty() {
            if durability != Durability::NoSync {
                self.db.sync().map_err(Error::store(self.context))?;
            }
            return Ok(());
        }
        self.db
            .write_with(self.batch, durability)
            .map_err(Error::store(self.context))
    }
}

/// Runs blocking storage work off the async runtime's workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Task {
            reason: e.to_string(),
        })?
}

impl Inner {
    /// Finishes a purge or a snapshot switch that a crash interrupted.
    fn finish_interrupted(&self) -> Result<()> {
        let purged: Option<LogId<NodeId>> = read_record(&self.raft_meta, PURGED_KEY)?;
        let mut batcher = Batcher::new(&self.db, "finish an interrupted purge");
        if let Some(purged) = purged {
            for key in keys_in(&self.log, ..=index_key(purged.index).to_vec())? {
                batcher.delete(&self.log, &key)?;
            }
        }
        let generation = self.snapshot.lock().current.as_ref().map(|c| c.generation);
        for key in keys_in(&self.snapshots, ..)? {
            if generation.is_none_or(|g| key.len() < 8 || key[..8] != g.to_be_bytes()) {
                batcher.delete(&self.snapshots, &key)?;
            }
        }
        batcher.finish(Durability::Sync)
    }

    fn log_state(&self) -> Result<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId<NodeId>> = read_record(&self.raft_meta, PURGED_KEY)?;
        let last = self
            .log
            .last()
            .map_err(Error::store("read the last log entry"))?;
        let last_log_id = match last {
            Some((_key, value)) => {
                let entry: Entry =
                    serde_json::from_slice(&value).map_err(Error::codec("the last log entry"))?;
                Some(entry.log_id)
            }
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    fn entries(&self, start: Bound<u64>, end: Bound<u64>) -> Result<Vec<Entry>> {
        let bound = |b: Bound<u64>| match b {
            Bound::Included(i) => Bound::Included(index_key(i).to_vec()),
            Bound::Excluded(i) => Bound::Excluded(index_key(i).to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut entries = Vec::new();
        let mut failure = None;
        self.log
            .scan((bound(start), bound(end)), |key, value| {
                let entry = key_index(key).and_then(|index| {
                    let entry: Entry = serde_json::from_slice(value)
                        .map_err(Error::codec(format!("log entry {index}")))?;
                    if entry.log_id.index != index {
                        return Err(Error::Corrupted {
                            reason: format!("log key {index} holds entry {}", entry.log_id),
                        });
                    }
                    Ok(entry)
                });
                match entry {
                    Ok(entry) => {
                        entries.push(entry);
                        true
                    }
                    Err(e) => {
                        failure = Some(e);
                        false
                    }
                }
            })
            .map_err(Error::store("read log entries"))?;
        match failure {
            Some(e) => Err(e),
            None => Ok(entries),
        }
    }

    /// Writes the entries, unsynced: the flusher thread syncs them.
    fn append(&self, entries: Vec<Entry>) -> Result<()> {
        let mut batcher = Batcher::new(&self.db, "append log entries");
        for entry in &entries {
            let value = encode(entry, "a log entry")?;
            batcher.put(&self.log, &index_key(entry.log_id.index), &value)?;
        }
        batcher.finish(Durability::NoSync)
    }

    /// Deletes the entries from `index` on, the last first.
    fn truncate(&self, index: u64) -> Result<()> {
        let keys = keys_in(&self.log, index_key(index).to_vec()..)?;
        let mut batcher = Batcher::new(&self.db, "truncate the log");
        for key in keys.iter().rev() {
            batcher.delete(&self.log, key)?;
        }
        batcher.finish(Durability::Sync)
    }

    /// Records `log_id` as purged, then deletes the entries up to it, the
    /// first first.
    fn purge(&self, log_id: LogId<NodeId>) -> Result<()> {
        let keys = keys_in(&self.log, ..=index_key(log_id.index).to_vec())?;
        let mut batcher = Batcher::new(&self.db, "purge the log");
        batcher.put(
            &self.raft_meta,
            PURGED_KEY,
            &encode(&log_id, "the purged log id")?,
        )?;
        for key in &keys {
            batcher.delete(&self.log, key)?;
        }
        batcher.finish(Durability::Sync)
    }

    fn put_meta(&self, key: &[u8], value: Vec<u8>, durability: Durability) -> Result<()> {
        self.raft_meta
            .put_with(key, &value, durability)
            .map(|_| ())
            .map_err(Error::store(format!(
                "write {}",
                String::from_utf8_lossy(key)
            )))
    }

    fn apply(&self, entries: Vec<Entry>) -> Result<Vec<Response>> {
        let mut applied = self.applied.lock();
        let data = &self.kv[applied.active];
        let mut batcher = Batcher::new(&self.db, "apply log entries");
        let mut responses = Vec::with_capacity(entries.len());
        for entry in entries {
            // The operation's size, for the batch's share.
            let (key, value_bytes) = match &entry.payload {
                EntryPayload::Normal(Request::Put { key, value }) => (key.as_bytes(), value.len()),
                EntryPayload::Normal(Request::Delete { key }) => (key.as_bytes(), 0),
                _ => (&b""[..], 0),
            };
            if batcher.would_fill(data, key, value_bytes) {
                // Each batch carries the state its entries lead to.
                batcher.put_unchecked(
                    &self.sm_meta,
                    APPLIED_KEY,
                    &encode(&*applied, "the applied record")?,
                );
                batcher.flush()?;
            }
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(Request::Put { key, value }) => {
                    batcher.put_unchecked(data, key.as_bytes(), value.as_bytes());
                }
                EntryPayload::Normal(Request::Delete { key }) => {
                    batcher.delete_unchecked(data, key.as_bytes());
                }
                EntryPayload::Membership(membership) => {
                    applied.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                }
            }
            applied.last_applied = Some(entry.log_id);
            responses.push(Response {
                index: entry.log_id.index,
            });
        }
        batcher.put_unchecked(
            &self.sm_meta,
            APPLIED_KEY,
            &encode(&*applied, "the applied record")?,
        );
        batcher.finish(Durability::NoSync)?;
        Ok(responses)
    }

    /// Builds a snapshot of the state machine and persists it.
    ///
    /// The database offers no point-in-time read: a range read sees writes
    /// made while it runs. The data is therefore read under the apply lock,
    /// which stalls applies for one scan of the data (in memory when the
    /// pool holds it) but makes the snapshot exactly the state at
    /// `last_applied`, which is what its meta claims.
    fn build_snapshot(&self) -> Result<(Meta, Vec<u8>)> {
        let (pairs, last_applied, last_membership) = {
            let applied = self.applied.lock();
            let data = &self.kv[applied.active];
            let mut pairs: Vec<(String, String)> = Vec::new();
            let mut failure = None;
            data.scan::<&[u8], _>(.., |key, value| {
                match (std::str::from_utf8(key), std::str::from_utf8(value)) {
                    (Ok(key), Ok(value)) => {
                        pairs.push((key.to_owned(), value.to_owned()));
                        true
                    }
                    _ => {
                        failure = Some(Error::Corrupted {
                            reason: format!("a key or value that is not UTF-8 in {}", data.name()),
                        });
                        false
                    }
                }
            })
            .map_err(Error::store("read the state machine"))?;
            if let Some(e) = failure {
                return Err(e);
            }
            (pairs, applied.last_applied, applied.last_membership.clone())
        };
        let bytes = encode(&pairs, "the snapshot")?;
        let mut state = self.snapshot.lock();
        let generation = state.next_generation;
        let snapshot_id = match last_applied {
            Some(last) => format!("{}-{}-{generation}", last.leader_id, last.index),
            None => format!("--{generation}"),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership,
            snapshot_id,
        };
        // An install may have persisted a newer snapshot while this one
        // was read: keep the newer.
        let newer = state
            .current
            .as_ref()
            .is_some_and(|c| c.meta.last_log_id > meta.last_log_id);
        if !newer {
            let mut batcher = Batcher::new(&self.db, "persist a snapshot");
            let record = self.write_chunks(&mut batcher, &meta, generation, &bytes)?;
            self.db.sync().map_err(Error::store("persist a snapshot"))?;
            batcher.put_unchecked(
                &self.sm_meta,
                SNAPSHOT_KEY,
                &encode(&record, "the snapshot record")?,
            );
            batcher.finish(Durability::Sync)?;
            self.replace_snapshot(&mut state, record)?;
        }
        Ok((meta, bytes))
    }

    /// Writes a snapshot's chunks, unsynced, and returns its record.
    fn write_chunks(
        &self,
        batcher: &mut Batcher<'_>,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        generation: u64,
        bytes: &[u8],
    ) -> Result<SnapshotRecord> {
        let mut chunks = 0u32;
        for chunk in bytes.chunks(SNAPSHOT_CHUNK_BYTES) {
            batcher.put(&self.snapshots, &chunk_key(generation, chunks), chunk)?;
            chunks += 1;
        }
        batcher.flush()?;
        Ok(SnapshotRecord {
            meta: meta.clone(),
            generation,
            chunks,
        })
    }

    /// Makes `record` the current snapshot in memory (it is on disk) and
    /// deletes the previous snapshot's chunks.
    fn replace_snapshot(&self, state: &mut SnapshotState, record: SnapshotRecord) -> Result<()> {
        state.next_generation = record.generation + 1;
        let previous = state.current.replace(record);
        if let Some(previous) = previous {
            let mut batcher = Batcher::new(&self.db, "delete a snapshot");
            for chunk in 0..previous.chunks {
                batcher.delete(&self.snapshots, &chunk_key(previous.generation, chunk))?;
            }
            batcher.finish(Durability::NoSync)?;
        }
        Ok(())
    }

    fn current_snapshot(&self) -> Result<Option<(Meta, Vec<u8>)>> {
        let state = self.snapshot.lock();
        let Some(record) = &state.current else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        for chunk in 0..record.chunks {
            let value = self
                .snapshots
                .get(&chunk_key(record.generation, chunk))
                .map_err(Error::store("read a snapshot"))?
                .ok_or_else(|| Error::Corrupted {
                    reason: format!(
                        "chunk {chunk} of snapshot {} is missing",
                        record.meta.snapshot_id
                    ),
                })?;
            bytes.extend_from_slice(&value);
        }
        Ok(Some((record.meta.clone(), bytes)))
    }

    /// Installs a snapshot received from the leader.
    ///
    /// The data goes into the key-value tree that is not in use (cleared
    /// first), with the snapshot's chunks, all unsynced; then a sync, and
    /// one atomic synced batch switches the state machine to that tree and
    /// makes the snapshot current. A crash before the switch leaves the
    /// previous state and snapshot in place (the half-loaded tree is not
    /// read, and is cleared by the next install; the orphan chunks are
    /// deleted at open); openraft did not acknowledge the snapshot, so the
    /// leader sends it again.
    fn install_snapshot(
        &self,
        meta: SnapshotMeta<NodeId, BasicNode>,
        bytes: Vec<u8>,
    ) -> Result<()> {
        let pairs: Vec<(String, String)> =
            serde_json::from_slice(&bytes).map_err(Error::codec("a received snapshot"))?;
        let mut applied = self.applied.lock();
        let mut state = self.snapshot.lock();
        let target = 1 - applied.active;
        let data = &self.kv[target];
        let mut batcher = Batcher::new(&self.db, "install a snapshot");
        for key in keys_in(data, ..)? {
            batcher.delete(data, &key)?;
        }
        for (key, value) in &pairs {
            batcher.put(data, key.as_bytes(), value.as_bytes())?;
        }
        let record = self.write_chunks(&mut batcher, &meta, state.next_generation, &bytes)?;
        self.db.sync().map_err(Error::store("install a snapshot"))?;
        if let Some(marker) = &self.pause_install {
            std::fs::write(marker, meta.snapshot_id.as_bytes()).map_err(|source| Error::Io {
                context: format!("create {}", marker.display()),
                source,
            })?;
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
        let installed = Applied {
            last_applied: meta.last_log_id,
            last_membership: meta.last_membership.clone(),
            active: target,
        };
        batcher.put_unchecked(
            &self.sm_meta,
            APPLIED_KEY,
            &encode(&installed, "the applied record")?,
        );
        batcher.put_unchecked(
            &self.sm_meta,
            SNAPSHOT_KEY,
            &encode(&record, "the snapshot record")?,
        );
        batcher.finish(Durability::Sync)?;

        let previous = applied.active;
        *applied = installed;
        *self.active.write() = target;
        self.replace_snapshot(&mut state, record)?;
        // The previous data is not read any more; it would be cleared by
        // the next install, but its space is better returned now.
        let old = &self.kv[previous];
        let mut batcher = Batcher::new(&self.db, "clear the previous state");
        for key in keys_in(old, ..)? {
            batcher.delete(old, &key)?;
        }
        batcher.finish(Durability::NoSync)
    }
}

impl StateMachine {
    /// The value of `key` in this node's state machine: what the entries
    /// applied so far left there.
    pub async fn get(&self, key: String) -> Result<Option<String>> {
        let inner = self.inner.clone();
        blocking(move || {
            let active = inner.active.read();
            let value = inner.kv[*active]
                .get(key.as_bytes())
                .map_err(Error::store("read the state machine"))?;
            Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
        })
        .await
    }

    /// Every pair of this node's state machine, in key order, and the last
    /// applied log index.
    pub async fn dump(&self) -> Result<(Option<u64>, Vec<(String, String)>)> {
        let inner = self.inner.clone();
        blocking(move || {
            // Under the apply lock, so that the pairs are those of the
            // index.
            let applied = inner.applied.lock();
            let mut pairs = Vec::new();
            inner.kv[applied.active]
                .scan::<&[u8], _>(.., |key, value| {
                    pairs.push((
                        String::from_utf8_lossy(key).into_owned(),
                        String::from_utf8_lossy(value).into_owned(),
                    ));
                    true
                })
                .map_err(Error::store("read the state machine"))?;
            Ok((applied.last_applied.map(|l| l.index), pairs))
        })
        .await
    }
}

type StorageResult<T> = std::result::Result<T, StorageError<NodeId>>;

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry>> {
        let inner = self.inner.clone();
        let (start, end) = (range.start_bound().cloned(), range.end_bound().cloned());
        blocking(move || inner.entries(start, end))
            .await
            .map_err(|e| e.into_storage(ErrorSubject::Logs, ErrorVerb::Read))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let inner = self.inner.clone();
        blocking(move || inner.log_state())
            .await
            .map_err(|e| e.into_storage(ErrorSubject::Logs, ErrorVerb::Read))
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        let inner = self.inner.clone();
        let vote = *vote;
        blocking(move || inner.put_meta(VOTE_KEY, encode(&vote, "the vote")?, Durability::Sync))
            .await
            .map_err(|e| e.into_storage(ErrorSubject::Vote, ErrorVerb::Write))
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        let inner = self.inner.clone();
        blocking(move || read_record(&inner.raft_meta, VOTE_KEY))
            .await
            .map_err(|e| e.into_storage(ErrorSubject::Vote, ErrorVerb::Read))
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        // On openraft's task, as `append`: a write of one small record.
        encode(&committed, "the committed log id")
            .and_then(|value| {
                self.inner
                    .put_meta(COMMITTED_KEY, value, COMMITTED_DURABILITY)
            })
            .map_err(|e| e.into_storage(ErrorSubject::Store, ErrorVerb::Write))
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        let inner = self.inner.clone();
        blocking(move || {
            let committed: Option<Option<LogId<NodeId>>> =
                read_record(&inner.raft_meta, COMMITTED_KEY)?;
            Ok(committed.flatten())
        })
        .await
        .map_err(|e| e.into_storage(ErrorSubject::Store, ErrorVerb::Read))
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let inner = self.inner.clone();
        let entries: Vec<Entry> = entries.into_iter().collect();
        // Written on openraft's task, not on the blocking pool: an unsynced
        // write copies the entries into the database's log buffer (and the
        // leaves they go to are the log's last, cached), and openraft calls
        // `append` once per client write, so that a thread hand-off per
        // call would cost more than the write.
        let written = inner.append(entries);
        match written {
            Ok(()) => {
                // openraft may count the entries once the flusher's sync,
                // which starts after this, covers them; meanwhile it goes
                // on appending (the flusher syncs for all that wait).
                inner
                    .flushes
                    .lock()
                    .send(callback)
                    .map_err(|_| Error::Task {
                        reason: "the log flusher thread ended".to_owned(),
                    })
                    .map_err(|e| e.into_storage(ErrorSubject::Logs, ErrorVerb::Write))
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e.into_storage(ErrorSubject::Logs, ErrorVerb::Write))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let inner = self.inner.clone();
        blocking(move || inner.truncate(log_id.index))
            .await
            .map_err(|e| e.into_storage(ErrorSubject::Logs, ErrorVerb::Delete))
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let inner = self.inner.clone();
        blocking(move || inner.purge(log_id))
            .await
            .map_err(|e| e.into_storage(ErrorSubject::Logs, ErrorVerb::Delete))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let inner = self.inner.clone();
        let (meta, bytes) = blocking(move || inner.build_snapshot())
            .await
            .map_err(|e| e.into_storage(ErrorSubject::Snapshot(None), ErrorVerb::Write))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>)> {
        let applied = self.inner.applied.lock();
        Ok((applied.last_applied, applied.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let inner = self.inner.clone();
        let entries: Vec<Entry> = entries.into_iter().collect();
        blocking(move || inner.apply(entries))
            .await
            .map_err(|e| e.into_storage(ErrorSubject::StateMachine, ErrorVerb::Write))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let inner = self.inner.clone();
        let signature = meta.signature();
        let meta = meta.clone();
        let bytes = snapshot.into_inner();
        blocking(move || inner.install_snapshot(meta, bytes))
            .await
            .map_err(|e| e.into_storage(ErrorSubject::Snapshot(Some(signature)), ErrorVerb::Write))
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let inner = self.inner.clone();
        let current = blocking(move || inner.current_snapshot())
            .await
            .map_err(|e| e.into_storage(ErrorSubject::Snapshot(None), ErrorVerb::Read))?;
        Ok(current.map(|(meta, bytes)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}
