//! Carrying out transaction ends: markers into every partition of the transaction, the
//! transaction's offsets into the group coordinator, then the completed state in the
//! transaction log; timeouts, the ends a stop interrupted, and hanging transactions at start.
//!
//! An end runs as its own task, so a client that disconnects mid-way cannot leave it half done;
//! one persisted while preparing (a crash between markers) is carried out again at start.
//! Markers a second time are harmless: a marker for a producer with no open transaction on a
//! partition changes nothing there, and consumers skip control batches.
//!
//! Lock order: a partition's producers lock, then the coordinator's lock (see
//! [`crate::partition`]); nothing here takes a partition's lock while holding the coordinator's.

use std::sync::Arc;

use skiff_group::{CommittedOffset, OffsetKey};
use skiff_protocol::ErrorCode;
use skiff_txn::{EndPlan, Hanging};

use crate::clock::now_ms;
use crate::state::Broker;

/// Carries out `plan` (already persisted as preparing): markers, offsets, completion. Runs as
/// its own task; the returned error code is what EndTxn answers when it fails.
pub async fn finish(broker: Arc<Broker>, plan: EndPlan) -> Result<(), ErrorCode> {
    let now = now_ms();
    match broker.cluster().cloned() {
        Some(cluster) => finish_in_cluster(&broker, &cluster, &plan, now).await?,
        None => finish_locally(&broker, &plan, now).await?,
    }
    let end = {
        let mut inner = broker.txns.lock();
        let change = inner.state.complete(&plan, now_ms());
        inner.persist_if(change, &plan.transactional_id)?
    };
    if let Some(end) = end {
        broker.txns.wait_durable(end).await?;
    }
    Ok(())
}

/// Cluster mode: the markers go through this broker's produce pipeline into the cluster's
/// logs, and the offsets staged beside the transaction's groups are handed to them (a commit)
/// or dropped (an abort).
async fn finish_in_cluster(
    broker: &Broker,
    cluster: &crate::cluster::Cluster,
    plan: &EndPlan,
    now: i64,
) -> Result<(), ErrorCode> {
    let keys: Vec<_> = plan
        .partitions
        .iter()
        .filter_map(|(topic, index)| {
            let topic = broker.topic_by_name(topic)?;
            // Deleted since it joined the transaction: nothing left to mark.
            (0..topic.info.partitions)
                .contains(index)
                .then(|| crate::cluster::key(topic.info.id, *index))
        })
        .collect();
    crate::cluster::transactions::write_markers(
        cluster,
        &keys,
        plan.producer_id,
        plan.producer_epoch,
        plan.commit,
        now,
    )
    .await?;
    crate::cluster::transactions::end_offsets(cluster, plan.producer_id, &plan.groups, plan.commit)
        .await
}

/// A single node: markers into the local partitions, offsets into the group coordinator.
async fn finish_locally(broker: &Arc<Broker>, plan: &EndPlan, now: i64) -> Result<(), ErrorCode> {
    let mut syncs = Vec::new();
    for (topic, index) in &plan.partitions {
        let Some(partition) = broker
            .topic_by_name(topic)
            .and_then(|t| t.partition(*index).cloned())
        else {
            // Deleted since it joined the transaction: nothing left to mark.
            continue;
        };
        match partition.append_marker(plan.producer_id, plan.producer_epoch, plan.commit, now) {
            Ok(Some(end)) => syncs.push((partition, end)),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), transactional_id = %plan.transactional_id, "writing transaction markers failed; the end is retried at the next start");
                return Err(ErrorCode::KAFKA_STORAGE_ERROR);
            }
        }
    }
    if plan.commit {
        for (group, offsets) in &plan.offsets {
            let commits: Vec<(OffsetKey, CommittedOffset)> = offsets
                .iter()
                .map(|o| {
                    committed_offset(
                        &o.topic,
                        o.partition,
                        o.offset,
                        o.leader_epoch,
                        &o.metadata,
                        now,
                    )
                })
                .collect();
            let stored = {
                let mut inner = broker.groups.lock(broker, now);
                let stored = broker.groups.store_offsets(&mut inner, group, commits);
                broker.groups.after_change(&mut inner, group);
                stored
            };
            let synced = match stored {
                Ok(end) => broker
                    .groups
                    .wait_durable(end)
                    .await
                    .map_err(anyhow::Error::from),
                Err(e) => Err(e),
            };
            if let Err(e) = synced {
                tracing::error!(error = %format!("{e:#}"), group = %group, "storing transactional offsets failed");
                return Err(ErrorCode::KAFKA_STORAGE_ERROR);
            }
        }
    }
    for (partition, end) in syncs {
        if let Err(e) = partition.wait_durable(end).await {
            tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "syncing transaction markers failed");
            return Err(ErrorCode::KAFKA_STORAGE_ERROR);
        }
    }
    Ok(())
}

/// A transaction's offset for one partition as the group coordinator stores it.
fn committed_offset(
    topic: &str,
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: &Option<String>,
    commit_timestamp_ms: i64,
) -> (OffsetKey, CommittedOffset) {
    (
        OffsetKey {
            topic: topic.to_string(),
            partition,
        },
        CommittedOffset {
            offset,
            leader_epoch,
            metadata: metadata.clone(),
            commit_timestamp_ms,
        },
    )
}

/// Runs [`finish`] as its own task (it completes even if the requester goes away; see
/// [`Broker::spawn_detached`]) and waits for it.
pub async fn finish_detached(broker: Arc<Broker>, plan: EndPlan) -> Result<(), ErrorCode> {
    let id = plan.transactional_id.clone();
    spawn_finish(&broker, plan).await.unwrap_or_else(|_| {
        // It panicked, or the broker is stopping: the end is persisted, and carried out at
        // the next start (or by the shard's next coordinator).
        tracing::error!(transactional_id = %id, "a transaction end task did not finish");
        Err(ErrorCode::UNKNOWN_SERVER_ERROR)
    })
}

/// Starts [`finish`] as a task of its own; the receiver gets its result. The end counts as
/// being carried out ([`crate::txns::TransactionCoordinator::is_ending`]) from now until that task is
/// gone, however it ends.
fn spawn_finish(
    broker: &Arc<Broker>,
    plan: EndPlan,
) -> tokio::sync::oneshot::Receiver<Result<(), ErrorCode>> {
    broker.txns.start_ending(&plan.transactional_id);
    let ending = Ending {
        broker: Arc::clone(broker),
        transactional_id: plan.transactional_id.clone(),
    };
    let (done, result) = tokio::sync::oneshot::channel();
    broker.spawn_detached(async move {
        let _ = done.send(finish(Arc::clone(&ending.broker), plan).await);
        drop(ending);
    });
    result
}

/// Marks a transaction's end as no longer carried out when dropped (done, panicked or aborted).
struct Ending {
    broker: Arc<Broker>,
    transactional_id: String,
}

impl Drop for Ending {
    fn drop(&mut self) {
        self.broker.txns.stop_ending(&self.transactional_id);
    }
}

/// Aborts timed-out transactions; forgets transactional IDs idle past their expiration. In
/// cluster mode also carries out the ends of the shards this broker loaded (or whose end
/// failed) that no task is carrying out.
pub async fn tick(broker: &Arc<Broker>) {
    let now = now_ms();
    let (plans, expired) = {
        let mut inner = broker.txns.lock();
        let plans: Vec<_> = inner
            .state
            .abort_timed_out(now)
            .into_iter()
            .filter_map(|plan| {
                tracing::info!(transactional_id = %plan.transactional_id, producer_id = plan.producer_id, "aborting a transaction past its timeout");
                match inner.persist(&plan.transactional_id) {
                    Ok(end) => Some((plan, end)),
                    Err(code) => {
                        tracing::warn!(%code, "cannot persist a timed-out transaction's abort");
                        None
                    }
                }
            })
            .collect();
        let expired = inner.state.expire_ids(now);
        for id in &expired {
            let _ = inner.persist(id);
        }
        (plans, expired.len())
    };
    if expired > 0 {
        tracing::debug!(expired, "idle transactional IDs forgotten");
    }
    for (plan, end) in plans {
        if broker.txns.wait_durable(end).await.is_ok() {
            let _ = finish_detached(Arc::clone(broker), plan).await;
        }
    }
    if broker.cluster().is_some() {
        let unfinished = broker.txns.lock().state.unfinished();
        for plan in unfinished {
            if !broker.txns.is_ending(&plan.transactional_id) {
                tracing::info!(transactional_id = %plan.transactional_id, commit = plan.commit, "finishing a transaction end (its shard was loaded here, or its end failed)");
                // Nobody waits for its result: a failed end stays unfinished for a later tick.
                drop(spawn_finish(broker, plan));
            }
        }
    }
}

/// How long past the longest transaction timeout a transaction no coordinator of this broker
/// knows is left open before it is aborted.
const ORPHAN_GRACE_MS: i64 = 60_000;

/// Cluster mode: closes transactions left open on partitions that their coordinator no longer
/// has in progress there (a batch that arrived after its transaction's marker, or a producer
/// whose transactional ID is gone), open for over `cluster.transaction.hanging.ms`. For a
/// producer this broker coordinates, the marker is the
/// coordinator's decision (commit after CompleteCommit, abort otherwise; nothing while it is
/// ending or still has the partition in progress); a producer no coordinator here knows is
/// aborted once its transaction is older than the longest timeout allowed.
pub async fn sweep_hanging(broker: &Arc<Broker>) {
    let now = now_ms();
    let Some(cluster) = broker.cluster().cloned() else {
        return;
    };
    let open = match skiff_cluster::log::open_transactions_before(
        &cluster.db,
        now - i64::try_from(cluster.config.hanging_txn_ms).unwrap_or(i64::MAX),
        1000,
    )
    .await
    {
        Ok(open) => open,
        Err(e) => {
            tracing::debug!(error = %e, "reading open transactions failed");
            return;
        }
    };
    let orphan_before =
        now - i64::from(broker.config.transactions.max_timeout_ms) - ORPHAN_GRACE_MS;
    for row in open {
        let name = broker
            .topic_by_id(skiff_protocol::Uuid::from_u128(row.key.topic_id.as_u128()))
            .map(|t| t.info.name.clone())
            .unwrap_or_default();
        let (hanging, ending) = {
            let inner = broker.txns.lock();
            let hanging = inner.state.hanging(
                row.producer_id,
                row.producer_epoch,
                (&name, row.key.partition),
            );
            let ending = inner
                .state
                .by_producer(row.producer_id)
                .is_some_and(|t| broker.txns.is_ending(&t.transactional_id));
            (hanging, ending)
        };
        let decision = match hanging {
            Hanging::Close { commit, epoch } if !ending => Some((commit, epoch)),
            Hanging::Unknown if row.opened_ms < orphan_before => Some((false, row.producer_epoch)),
            _ => None,
        };
        let Some((commit, epoch)) = decision else {
            continue;
        };
        tracing::warn!(topic_id = %row.key.topic_id, partition = row.key.partition, producer_id = row.producer_id, commit, "closing a transaction its coordinator does not have in progress");
        if let Err(code) = crate::cluster::transactions::write_markers(
            &cluster,
            &[row.key],
            row.producer_id,
            epoch,
            commit,
            now,
        )
        .await
        {
            tracing::warn!(%code, "closing a hanging transaction failed");
        }
    }
}

/// Cluster mode: applies the transactional offsets that committed transactions handed to
/// the groups this broker coordinates: into the group's state (written through its shard,
/// waited for), then gone from PostgreSQL. Applying twice (a broker dying in between) writes
/// the same offsets again.
pub async fn apply_committed_offsets(broker: &Arc<Broker>) {
    let Some(cluster) = broker.cluster().cloned() else {
        return;
    };
    let rows = match skiff_cluster::txn_offsets::committed(&cluster.db).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::debug!(error = %e, "reading committed transactional offsets failed");
            return;
        }
    };
    let mut by_group: std::collections::BTreeMap<String, Vec<_>> = Default::default();
    for (group, producer_id, offset) in rows {
        if cluster.coordination.refusal(&group).is_none() {
            by_group
                .entry(group)
                .or_default()
                .push((producer_id, offset));
        }
    }
    for (group, mut rows) in by_group {
        rows.sort_by_key(|(_, o)| o.commit_ms);
        let commits: Vec<(OffsetKey, CommittedOffset)> = rows
            .iter()
            .map(|(_, o)| {
                committed_offset(
                    &o.topic,
                    o.partition,
                    o.offset,
                    o.leader_epoch,
                    &o.metadata,
                    o.commit_ms,
                )
            })
            .collect();
        let stored = {
            let mut inner = broker.groups.lock(broker, now_ms());
            let stored = broker.groups.store_offsets(&mut inner, &group, commits);
            broker.groups.after_change(&mut inner, &group);
            stored
        };
        let durable = match stored {
            Ok(end) => broker.groups.wait_durable(end).await.is_ok(),
            Err(e) => {
                tracing::warn!(group = %group, error = %format!("{e:#}"), "applying transactional offsets failed");
                false
            }
        };
        if !durable {
            continue;
        }
        let keys: Vec<_> = rows
            .iter()
            .map(|(producer_id, o)| (group.clone(), *producer_id, o.topic.clone(), o.partition))
            .collect();
        if let Err(e) = skiff_cluster::txn_offsets::forget(&cluster.db, &keys).await {
            tracing::warn!(group = %group, error = %e, "forgetting applied transactional offsets failed");
        }
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
            let open = partition.open_transactions();
            for (producer_id, epoch) in open {
                let plan = {
                    let inner = broker.txns.lock();
                    let (commit, epoch) = match inner.state.hanging(
                        producer_id,
                        epoch,
                        (&partition.topic, partition.index),
                    ) {
                        Hanging::InProgress => continue,
                        Hanging::Unknown => (false, epoch),
                        Hanging::Close { commit, epoch } => (commit, epoch),
                    };
                    EndPlan {
                        transactional_id: inner
                            .state
                            .by_producer(producer_id)
                            .map(|t| t.transactional_id.clone())
                            .unwrap_or_default(),
                        producer_id,
                        producer_epoch: epoch,
                        commit,
                        partitions: vec![(partition.topic.clone(), partition.index)],
                        offsets: Default::default(),
                        groups: Vec::new(),
                    }
                };
                tracing::warn!(topic = %partition.topic, partition = partition.index, producer_id, commit = plan.commit, "closing a transaction its coordinator does not have in progress");
                if let Err(e) =
                    partition.append_marker(plan.producer_id, plan.producer_epoch, plan.commit, now)
                {
                    tracing::error!(error = %format!("{e:#}"), "cannot close a hanging transaction");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    /// A requester that goes away (a client disconnecting during EndTxn) leaves its end running
    /// in its own task, and once that task is done the end no longer counts as being carried
    /// out, so a later tick may carry out an end that failed.
    #[tokio::test]
    async fn an_end_whose_requester_went_away_stops_counting_as_carried_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let running = crate::server::start_for_test(dir.path()).await;
        let broker = Arc::clone(&running.broker);
        let plan = EndPlan {
            transactional_id: "gone".into(),
            producer_id: 1,
            producer_epoch: 0,
            commit: false,
            partitions: Vec::new(),
            offsets: Default::default(),
            groups: Vec::new(),
        };
        // Polled once, then dropped: its end has started, and nobody waits for it.
        assert!(
            finish_detached(Arc::clone(&broker), plan)
                .now_or_never()
                .is_none()
        );
        assert!(broker.txns.is_ending("gone"));
        let done = async {
            while broker.txns.is_ending("gone") {
                tokio::task::yield_now().await;
            }
        };
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(10), done)
                .await
                .is_ok(),
            "the end still counts as carried out"
        );
        drop(broker);
        running.shutdown().await.expect("shutdown");
    }
}
