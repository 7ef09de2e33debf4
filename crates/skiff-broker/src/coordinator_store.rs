//! The storage seam of the group and transaction coordinators: a key-value record stream they
//! write every change to (a `None` value deletes the key) and read back whole at start. The
//! compacted internal logs `data.dir/__groups` and `data.dir/__transactions` ([`KvLog`]) are
//! the first implementation; cluster mode's coordinator shards in PostgreSQL
//! ([`crate::cluster::coordination`]) the second, and the coordinators do not change beyond
//! loading and unloading the shards a broker is given and loses.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use bytes::Bytes;
use futures::future::BoxFuture;
use skiff_log::{FlushPolicy, GroupCommitter, LogError};

use crate::kv_log::KvLog;

/// Where a coordinator's records go. Called under the coordinator's lock.
pub trait CoordinatorStore: Send {
    /// Appends changes (a `None` value deletes the key); returns the end offset to wait for
    /// with [`Durable::wait_durable`].
    fn append(&mut self, changes: &[(Bytes, Option<Bytes>)]) -> Result<i64>;
    /// Whether the store has grown enough beyond its live pairs to be rewritten.
    fn needs_compaction(&self) -> bool;
    /// Rewrites the store with only `live` (the coordinator's current state).
    fn compact(&mut self, live: &[(Bytes, Bytes)]) -> Result<()>;
    /// Whether this broker coordinates `id` (a group or transactional ID) now: always on one
    /// node; in cluster mode, only for the shards it owns and has loaded.
    fn serves(&self, _id: &str) -> bool {
        true
    }
    /// What to wait for before answering a request about `id` in cluster mode: the last
    /// append to its shard (`None`: nothing to wait for).
    fn barrier(&self, _id: &str) -> Option<i64> {
        None
    }
}

/// Why appends did not become durable.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Log(#[from] LogError),
    /// Cluster mode: the shard's write was refused or failed; this broker no longer
    /// coordinates it (until it has loaded it again).
    #[error("not the coordinator: {0}")]
    NotCoordinator(String),
}

impl StoreError {
    /// The error code a client gets.
    pub fn code(&self) -> skiff_protocol::ErrorCode {
        match self {
            StoreError::Log(_) => skiff_protocol::ErrorCode::KAFKA_STORAGE_ERROR,
            StoreError::NotCoordinator(_) => skiff_protocol::ErrorCode::NOT_COORDINATOR,
        }
    }
}

/// Waits, outside the coordinator's lock, until appends are durable.
pub trait Durable: Send + Sync {
    fn wait_durable(&self, end: i64) -> BoxFuture<'_, Result<(), StoreError>>;
}

/// An opened store: the store, every live pair in it, and its durability waiter (`None`
/// when appends are durable once written, or never waited for: `flush = interval`).
pub struct Opened {
    pub store: Box<dyn CoordinatorStore>,
    pub pairs: BTreeMap<Bytes, Bytes>,
    pub durable: Option<Arc<dyn Durable>>,
}

/// Waits until a store with the waiter `durable` is durable up to `end` (at once without one).
pub async fn wait_durable(durable: Option<&Arc<dyn Durable>>, end: i64) -> Result<(), StoreError> {
    match durable {
        Some(d) => d.wait_durable(end).await,
        None => Ok(()),
    }
}

/// Opens (creating if needed) the local compacted log in `dir`. Must run inside a tokio
/// runtime when `flush` is `Always` (its group committer is a task).
pub fn open_local(dir: &Path, flush: FlushPolicy) -> Result<Opened> {
    let (kv, pairs) = KvLog::open(dir, flush)?;
    let durable = kv.committer_arc().map(|c| -> Arc<dyn Durable> { c });
    Ok(Opened {
        store: Box::new(kv),
        pairs,
        durable,
    })
}

impl CoordinatorStore for KvLog {
    fn append(&mut self, changes: &[(Bytes, Option<Bytes>)]) -> Result<i64> {
        KvLog::append(self, changes)
    }

    fn needs_compaction(&self) -> bool {
        KvLog::needs_compaction(self)
    }

    fn compact(&mut self, live: &[(Bytes, Bytes)]) -> Result<()> {
        KvLog::compact(self, live)
    }
}

impl Durable for GroupCommitter {
    fn wait_durable(&self, end: i64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move { Ok(GroupCommitter::wait_durable(self, end).await?) })
    }
}
