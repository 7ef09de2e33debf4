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
use skiff_txn::EndPlan;

use crate::clock::now_ms;
use crate::state::Broker;

/// Carries out `plan` (already persisted as preparing): markers, offsets, completion. Runs as
/// its own task; the returned error code is what EndTxn answers when it fails.
pub async fn finish(broker: Arc<Broker>, plan: EndPlan) -> Result<(), ErrorCode> {
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

/// Runs [`finish`] as its own task (it completes even if the requester goes away) and waits for
/// it.
pub async fn finish_detached(broker: Arc<Broker>, plan: EndPlan) -> Result<(), ErrorCode> {
    match tokio::spawn(finish(broker, plan)).await {
        Ok(result) => result,
        Err(e) => {
            tracing::error!(error = %e, "a transaction end task failed");
            Err(ErrorCode::UNKNOWN_SERVER_ERROR)
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
                tracing::error!(%code, "cannot persist a timed-out transaction's abort");
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
            let open = partition.open_transactions();
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
                if let Err(e) =
                    partition.append_marker(plan.producer_id, plan.producer_epoch, plan.commit, now)
                {
                    tracing::error!(error = %format!("{e:#}"), "cannot close a hanging transaction");
                }
            }
        }
    }
}
