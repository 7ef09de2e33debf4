//! The transaction coordinator's home in the broker: the state machine of `skiff-txn` under one
//! lock, its persistence in an internal key-value log (`data.dir/__transactions`, what Kafka
//! keeps in `__transaction_state`), and the carrying out of transaction ends: markers into every
//! partition of the transaction, the transaction's offsets into the group coordinator, then the
//! completed state.
//!
//! An end runs as its own task, so a client that disconnects mid-way cannot leave it half done;
//! one persisted while preparing (a crash between markers) is carried out again at start.
//! Markers a second time are harmless: a marker for a producer with no open transaction on a
//! partition changes nothing there, and consumers skip control batches.
//!
//! Lock order: a partition's producers lock, then this coordinator's lock (produce checks a
//! transactional batch against its transaction while holding the producers lock, so that no
//! marker can slip in between the check and the append); nothing here takes a partition lock
//! while holding the coordinator's.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::{Context, Result};
use bytes::Bytes;
use skiff_group::{CommittedOffset, OffsetKey};
use skiff_log::{FlushPolicy, GroupCommitter};
use skiff_protocol::error_codes;
use skiff_records::ControlRecordType;
use skiff_txn::{Change, EndPlan, Transaction, TxnConfig, TxnCoordinator};

use crate::kv_log::KvLog;
use crate::clock::now_ms;
use crate::state::{Broker, Partition};

/// The directory of the transaction log, inside the data directory.
pub const TXN_LOG_DIR: &str = "__transactions";
/// How often open transactions are checked against their timeouts (Kafka:
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms`, 10 s; shorter here because the
/// check is a scan of a map).
pub const TIMEOUT_CHECK_INTERVAL_MS: u64 = 1_000;

/// The coordinator state and the log it is persisted in.
pub struct Inner {
    pub state: TxnCoordinator,
    kv: KvLog,
}

pub struct TransactionCoordinator {
    inner: Mutex<Inner>,
    committer: Option<Arc<GroupCommitter>>,
}

impl TransactionCoordinator {
    /// Opens the transaction log in `dir` and restores every transactional ID.
    pub fn open(dir: &Path, flush: FlushPolicy, config: TxnConfig) -> Result<Self> {
        let (kv, pairs) = KvLog::open(dir, flush)?;
        let mut txns = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            match serde_json::from_slice::<Transaction>(&value) {
                Ok(txn) => txns.push(txn),
                Err(e) => tracing::error!(
                    transactional_id = %String::from_utf8_lossy(&key),
                    error = %e,
                    "skipping an unreadable transaction record"
                ),
            }
        }
        tracing::info!(
            transactional_ids = txns.len(),
            "transaction coordinator loaded"
        );
        let committer = kv.committer_arc();
        Ok(TransactionCoordinator {
            inner: Mutex::new(Inner {
                state: TxnCoordinator::restore(config, txns),
                kv,
            }),
            committer,
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the transaction log is durable up to `end` (with `flush = always`).
    pub async fn wait_durable(&self, end: i64) -> Result<(), i16> {
        match &self.committer {
            Some(c) => c.wait_durable(end).await.map_err(|e| {
                tracing::error!(error = %e, "syncing the transaction log failed");
                error_codes::KAFKA_STORAGE_ERROR
            }),
            None => Ok(()),
        }
    }
}

impl Inner {
    /// Persists the current state of `transactional_id` (or its deletion); returns the log end
    /// offset to wait for.
    pub fn persist(&mut self, transactional_id: &str) -> Result<i64, i16> {
        let value = match self.state.get(transactional_id) {
            Some(txn) => Some(Bytes::from(serde_json::to_vec(txn).map_err(|e| {
                tracing::error!(error = %e, "serialising a transaction");
                error_codes::UNKNOWN_SERVER_ERROR
            })?)),
            None => None,
        };
        let key = Bytes::copy_from_slice(transactional_id.as_bytes());
        let end = self.kv.append(&[(key, value)]).map_err(|e| {
            tracing::error!(error = %format!("{e:#}"), "cannot persist a transaction");
            error_codes::KAFKA_STORAGE_ERROR
        })?;
        self.maybe_compact();
        Ok(end)
    }

    /// Persists `transactional_id` if `change` says it changed.
    pub fn persist_if(&mut self, change: Change, transactional_id: &str) -> Result<i64, i16> {
        match change {
            Change::Changed => self.persist(transactional_id),
            Change::Unchanged => Ok(-1),
        }
    }

    fn maybe_compact(&mut self) {
        if !self.kv.needs_compaction() {
            return;
        }
        let pairs: Vec<(Bytes, Bytes)> = self
            .state
            .all()
            .into_iter()
            .filter_map(|txn| {
                let json = serde_json::to_vec(txn).ok()?;
                Some((
                    Bytes::copy_from_slice(txn.transactional_id.as_bytes()),
                    Bytes::from(json),
                ))
            })
            .collect();
        if let Err(e) = self.kv.compact(&pairs) {
            tracing::error!(error = %e, "transaction log compaction failed");
        }
    }
}

/// Appends the marker of `plan` to `partition`; returns the offset after it, or `None` when
/// the partition's producer state already has a newer epoch (the marker would be fenced there,
/// as Kafka's leader refuses it; nothing of this transaction can be open on it).
fn write_marker(partition: &Partition, plan: &EndPlan, now: i64) -> Result<Option<i64>> {
    let kind = if plan.commit {
        ControlRecordType::Commit
    } else {
        ControlRecordType::Abort
    };
    let mut producers = partition.lock_producers();
    if producers
        .check_marker(plan.producer_id, plan.producer_epoch)
        .is_err()
    {
        tracing::warn!(topic = %partition.topic, partition = partition.index, producer_id = plan.producer_id, epoch = plan.producer_epoch, "transaction marker from an old epoch not written");
        return Ok(None);
    }
    let marker = skiff_records::end_txn_marker(plan.producer_id, plan.producer_epoch, kind, 0, now)
        .context("building a transaction marker")?;
    let mut log = partition.lock_log();
    let segment_before = log.active_segment_base_offset();
    let info = log.append(marker.into_bytes(), now).with_context(|| {
        format!(
            "appending a marker to {}-{}",
            partition.topic, partition.index
        )
    })?;
    let rolled = log.active_segment_base_offset() != segment_before;
    drop(log);
    producers.record_marker(
        plan.producer_id,
        plan.producer_epoch,
        kind,
        info.base_offset,
        now,
    );
    let end = info.last_offset + 1;
    partition.after_append(&producers, end, rolled);
    drop(producers);
    partition.end_offset.send_replace(end);
    if let Some(committer) = &partition.committer {
        committer.request_sync();
    }
    Ok(Some(end))
}

/// Carries out `plan` (already persisted as preparing): markers, offsets, completion. Runs as
/// its own task; the returned error code is what EndTxn answers when it fails.
pub async fn finish(broker: Arc<Broker>, plan: EndPlan) -> Result<(), i16> {
    let now = now_ms();
    let mut syncs = Vec::new();
    for (topic, index) in &plan.partitions {
        let Some(partition) = broker
            .topic_by_name(topic)
            .and_then(|t| t.partition(*index).cloned())
        else {
            // Deleted since it joined the transaction: nothing left to mark.
            continue;
        };
        match write_marker(&partition, &plan, now) {
            Ok(Some(end)) => syncs.push((partition, end)),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), transactional_id = %plan.transactional_id, "writing transaction markers failed; the end is retried at the next start");
                return Err(error_codes::KAFKA_STORAGE_ERROR);
            }
        }
    }
    if plan.commit {
        for (group, offsets) in &plan.offsets {
            let commits: Vec<(OffsetKey, CommittedOffset)> = offsets
                .iter()
                .map(|o| {
                    (
                        OffsetKey {
                            topic: o.topic.clone(),
                            partition: o.partition,
                        },
                        CommittedOffset {
                            offset: o.offset,
                            leader_epoch: o.leader_epoch,
                            metadata: o.metadata.clone(),
                            commit_timestamp_ms: now,
                        },
                    )
                })
                .collect();
            let stored = {
                let mut inner = broker.groups.lock(&broker, now);
                let stored = broker.groups.store_offsets(&mut inner, group, commits);
                broker.groups.after_change(&mut inner, group);
                stored
            };
            let synced = match stored {
                Ok(end) => broker.groups.wait_durable(end).await,
                Err(e) => Err(e),
            };
            if let Err(e) = synced {
                tracing::error!(error = %format!("{e:#}"), group = %group, "storing transactional offsets failed");
                return Err(error_codes::KAFKA_STORAGE_ERROR);
            }
        }
    }
    for (partition, end) in syncs {
        if let Some(committer) = &partition.committer
            && let Err(e) = committer.wait_durable(end).await
        {
            tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "syncing transaction markers failed");
            return Err(error_codes::KAFKA_STORAGE_ERROR);
        }
    }
    let end = {
        let mut inner = broker.txns.lock();
        let change = inner.state.complete(&plan, now_ms());
        inner.persist_if(change, &plan.transactional_id)?
    };
    if end >= 0 {
        broker.txns.wait_durable(end).await?;
    }
    Ok(())
}

/// Runs [`finish`] as its own task (it completes even if the requester goes away) and waits for
/// it.
pub async fn finish_detached(broker: Arc<Broker>, plan: EndPlan) -> Result<(), i16> {
    match tokio::spawn(finish(broker, plan)).await {
        Ok(result) => result,
        Err(e) => {
            tracing::error!(error = %e, "a transaction end task failed");
            Err(error_codes::UNKNOWN_SERVER_ERROR)
        }
    }
}

/// Carries out the ends persisted while preparing (at start) and aborts timed-out transactions;
/// forgets transactional IDs idle past their expiration.
pub async fn tick(broker: &Arc<Broker>) {
    let now = now_ms();
    let (plans, expired) = {
        let mut inner = broker.txns.lock();
        let plans = inner.state.abort_timed_out(now);
        for plan in &plans {
            tracing::info!(transactional_id = %plan.transactional_id, producer_id = plan.producer_id, "aborting a transaction past its timeout");
            if let Err(code) = inner.persist(&plan.transactional_id) {
                tracing::error!(code, "cannot persist a timed-out transaction's abort");
            }
        }
        let expired = inner.state.expire_ids(now);
        for id in &expired {
            let _ = inner.persist(id);
        }
        (plans, expired.len())
    };
    if expired > 0 {
        tracing::debug!(expired, "idle transactional IDs forgotten");
    }
    for plan in plans {
        let _ = finish_detached(Arc::clone(broker), plan).await;
    }
}

/// Carries out, at start, the ends a stop interrupted, then closes the transactions left open
/// on partitions that their coordinator no longer has in progress there.
pub async fn resume_unfinished(broker: &Arc<Broker>) {
    let plans = broker.txns.lock().state.unfinished();
    for plan in plans {
        tracing::info!(transactional_id = %plan.transactional_id, commit = plan.commit, "finishing a transaction end interrupted by a stop");
        let _ = finish_detached(Arc::clone(broker), plan).await;
    }
    close_hanging(broker);
}

/// A partition's open transaction whose coordinator has no transaction in progress with that
/// partition would hold its last stable offset back forever (a "hanging" transaction: its marker
/// was lost with an unsynced tail under `flush = interval`, or the coordinator's log was lost).
/// Each gets the marker its coordinator decided (commit after CompleteCommit), an abort
/// otherwise.
fn close_hanging(broker: &Arc<Broker>) {
    let now = now_ms();
    for topic in broker.all_topics() {
        for partition in &topic.partitions {
            let open = partition.lock_producers().open_transactions();
            for (producer_id, epoch) in open {
                let plan = {
                    let inner = broker.txns.lock();
                    let coordinator = inner.state.by_producer(producer_id);
                    let in_progress = inner
                        .state
                        .verify_produce(producer_id, epoch, (&partition.topic, partition.index))
                        .is_ok();
                    if in_progress {
                        continue;
                    }
                    let commit =
                        coordinator.is_some_and(|t| t.state == skiff_txn::TxnState::CompleteCommit);
                    EndPlan {
                        transactional_id: coordinator
                            .map(|t| t.transactional_id.clone())
                            .unwrap_or_default(),
                        producer_id,
                        producer_epoch: coordinator.map_or(epoch, |t| t.producer_epoch.max(epoch)),
                        commit,
                        partitions: vec![(partition.topic.clone(), partition.index)],
                        offsets: Default::default(),
                    }
                };
                tracing::warn!(topic = %partition.topic, partition = partition.index, producer_id, commit = plan.commit, "closing a transaction its coordinator does not have in progress");
                if let Err(e) = write_marker(partition, &plan, now) {
                    tracing::error!(error = %format!("{e:#}"), "cannot close a hanging transaction");
                }
            }
        }
    }
}
