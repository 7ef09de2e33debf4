//! Group commit: many appends, one fdatasync.
//!
//! Appenders write under the log's lock and then wait for their end offset to become durable.
//! One background task takes a [`SyncTarget`](crate::SyncTarget) under the lock (a cloned file
//! handle and the end offset), releases it, runs fdatasync on a blocking thread, marks the offset
//! durable and wakes every waiter it covers. Requests arriving during a sync coalesce into one
//! follow-up sync, so the number of syncs tracks disk latency, not the append rate.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::error::{LogError, Result};
use crate::log::{PartitionLog, SyncTarget};

/// What the committer needs from a log; implemented for `Mutex<PartitionLog>` and open to other
/// wrappers (a broker's partition state, a second storage backend).
pub trait SyncSource: Send + Sync + 'static {
    /// A sync handle, or `None` when everything appended is durable. Must be cheap and must not
    /// sync itself: it is called while appends wait for the lock.
    fn sync_target(&self) -> Result<Option<SyncTarget>>;
    /// Called after the target's fdatasync succeeded.
    fn mark_durable(&self, end_offset: i64);
    fn durable_offset(&self) -> i64;
}

impl SyncSource for Mutex<PartitionLog> {
    fn sync_target(&self) -> Result<Option<SyncTarget>> {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sync_target()
    }
    fn mark_durable(&self, end_offset: i64) {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .mark_durable(end_offset);
    }
    fn durable_offset(&self) -> i64 {
        self.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .durable_offset()
    }
}

#[derive(Debug, Clone)]
struct Durability {
    end_offset: i64,
    /// Once a sync fails the page cache state is unknown: every later wait fails too.
    failure: Option<Arc<io::Error>>,
}

#[derive(Debug)]
struct Shared {
    sync_requested: Notify,
    state: watch::Sender<Durability>,
    syncs: AtomicU64,
}

/// Batches fdatasync calls for one log; see the module docs. Dropping it stops the task.
#[derive(Debug)]
pub struct GroupCommitter {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl GroupCommitter {
    /// Starts the sync task on the current tokio runtime.
    pub fn spawn<S: SyncSource>(source: Arc<S>) -> Self {
        let (state, _) = watch::channel(Durability {
            end_offset: source.durable_offset(),
            failure: None,
        });
        let shared = Arc::new(Shared {
            sync_requested: Notify::new(),
            state,
            syncs: AtomicU64::new(0),
        });
        let task = tokio::spawn(run(source, Arc::clone(&shared)));
        Self { shared, task }
    }

    /// Asks for a sync without waiting (e.g. from a `flush.ms` timer).
    pub fn request_sync(&self) {
        self.shared.sync_requested.notify_one();
    }

    /// Waits until every offset below `end_offset` is durable, requesting a sync if needed.
    pub async fn wait_durable(&self, end_offset: i64) -> Result<()> {
        self.wait(end_offset, true).await
    }

    /// Waits until every offset below `end_offset` is durable without asking for a sync: for
    /// observers that must not cause the sync they are waiting for (tests of who requests them).
    pub async fn durable_reached(&self, end_offset: i64) -> Result<()> {
        self.wait(end_offset, false).await
    }

    async fn wait(&self, end_offset: i64, request: bool) -> Result<()> {
        let mut state = self.shared.state.subscribe();
        let covered =
            |state: &Durability| state.failure.is_some() || state.end_offset >= end_offset;
        if request && !covered(&state.borrow()) {
            self.shared.sync_requested.notify_one();
        }
        let state = state.wait_for(covered).await.map_err(|_| {
            LogError::SyncFailed(Arc::new(io::Error::other("group committer stopped")))
        })?;
        match &state.failure {
            Some(err) => Err(LogError::SyncFailed(Arc::clone(err))),
            None => Ok(()),
        }
    }

    /// Offsets below this are durable, as last published by the committer.
    pub fn durable_offset(&self) -> i64 {
        self.shared.state.borrow().end_offset
    }

    /// Number of fdatasync calls made so far.
    pub fn sync_count(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }
}

impl Drop for GroupCommitter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run<S: SyncSource>(source: Arc<S>, shared: Arc<Shared>) {
    loop {
        shared.sync_requested.notified().await;
        let result = match source.sync_target() {
            Ok(None) => Ok(source.durable_offset()),
            Ok(Some(target)) => {
                let synced = tokio::task::spawn_blocking(move || {
                    target.sync().map(|()| target.end_offset())
                })
                .await;
                match synced {
                    Ok(Ok(end_offset)) => {
                        shared.syncs.fetch_add(1, Ordering::Relaxed);
                        source.mark_durable(end_offset);
                        Ok(source.durable_offset())
                    }
                    Ok(Err(err)) => Err(err),
                    Err(join) => Err(LogError::SyncFailed(Arc::new(io::Error::other(
                        join.to_string(),
                    )))),
                }
            }
            Err(err) => Err(err),
        };
        match result {
            Ok(end_offset) => {
                shared.state.send_modify(|state| {
                    state.end_offset = state.end_offset.max(end_offset);
                });
            }
            Err(err) => {
                tracing::error!(error = %err, "fdatasync failed; log no longer durable");
                let failure = match err {
                    LogError::SyncFailed(inner) => inner,
                    LogError::Io { source, .. } => Arc::new(source),
                    other => Arc::new(io::Error::other(other.to_string())),
                };
                shared
                    .state
                    .send_modify(|state| state.failure = Some(failure));
                return;
            }
        }
    }
}
