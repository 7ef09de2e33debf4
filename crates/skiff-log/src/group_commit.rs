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
    /// Once an fdatasync fails the page cache state is unknown: every later wait fails too
    /// (the log is offline).
    failure: Option<Arc<io::Error>>,
    /// Rounds that failed before any fdatasync (the log could not be asked for a target):
    /// nothing written was lost, so only the waiters of that round fail.
    transient_failures: u64,
    last_transient: Option<Arc<io::Error>>,
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
            transient_failures: 0,
            last_transient: None,
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
        let failed_before = state.borrow().transient_failures;
        let covered = |state: &Durability| {
            state.failure.is_some()
                || state.end_offset >= end_offset
                || state.transient_failures > failed_before
        };
        if request && !covered(&state.borrow()) {
            self.shared.sync_requested.notify_one();
        }
        let state = state.wait_for(covered).await.map_err(|_| {
            LogError::SyncFailed(Arc::new(io::Error::other("group committer stopped")))
        })?;
        if let Some(err) = &state.failure {
            return Err(LogError::SyncFailed(Arc::clone(err)));
        }
        if state.end_offset >= end_offset {
            return Ok(());
        }
        Err(LogError::TransientSync(
            state
                .last_transient
                .clone()
                .unwrap_or_else(|| Arc::new(io::Error::other("sync round failed"))),
        ))
    }

    /// Whether an fdatasync failed: the log can no longer promise durability (offline).
    pub fn is_offline(&self) -> bool {
        self.shared.state.borrow().failure.is_some()
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

/// How a sync round ended.
enum Round {
    Durable(i64),
    /// Nothing was synced, nothing lost (no target could be taken, or the blocking task did
    /// not run): the round's waiters fail, the log stays usable.
    Transient(Arc<io::Error>),
    /// fdatasync itself failed: written data may be lost; the log goes offline.
    Lost(Arc<io::Error>),
}

fn as_io(err: LogError) -> Arc<io::Error> {
    match err {
        LogError::SyncFailed(inner) | LogError::TransientSync(inner) => inner,
        LogError::Io { source, .. } => Arc::new(source),
        other => Arc::new(io::Error::other(other.to_string())),
    }
}

async fn run<S: SyncSource>(source: Arc<S>, shared: Arc<Shared>) {
    loop {
        shared.sync_requested.notified().await;
        let round = match source.sync_target() {
            Ok(None) => Round::Durable(source.durable_offset()),
            Ok(Some(target)) => {
                let synced = tokio::task::spawn_blocking(move || {
                    target.sync().map(|()| target.end_offset())
                })
                .await;
                match synced {
                    Ok(Ok(end_offset)) => {
                        shared.syncs.fetch_add(1, Ordering::Relaxed);
                        source.mark_durable(end_offset);
                        Round::Durable(source.durable_offset())
                    }
                    Ok(Err(err)) => Round::Lost(as_io(err)),
                    Err(join) => Round::Transient(Arc::new(io::Error::other(join.to_string()))),
                }
            }
            Err(err) => Round::Transient(as_io(err)),
        };
        match round {
            Round::Durable(end_offset) => {
                shared.state.send_modify(|state| {
                    state.end_offset = state.end_offset.max(end_offset);
                });
            }
            Round::Transient(err) => {
                tracing::warn!(error = %err, "a sync round failed before fdatasync; its waiters fail, the log stays online");
                shared.state.send_modify(|state| {
                    state.transient_failures += 1;
                    state.last_transient = Some(err);
                });
            }
            Round::Lost(err) => {
                tracing::error!(error = %err, "fdatasync failed; log no longer durable (offline)");
                shared.state.send_modify(|state| state.failure = Some(err));
                return;
            }
        }
    }
}
