//! The group membership task (KIP-848): join, heartbeat, reconcile a target assignment (revoke
//! before acknowledging), rejoin with the same member ID after fencing, leave on close.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use skiff_protocol::generated::ConsumerGroupHeartbeatRequest;
use skiff_protocol::generated::consumer_group_heartbeat_request::TopicPartitions as HbTopicPartitions;
use skiff_protocol::{ApiKey, Uuid, error_codes};

use crate::error::{Error, Result};
use crate::util::{backoff, lock};

use super::offsets::commit_positions;
use super::{Inner, PartState, TopicPartition};

/// The membership task: joins, heartbeats, reconciles, rejoins after fencing, leaves on close.
pub(super) async fn membership_loop(inner: Arc<Inner>) {
    let Some(group) = inner.config.group_id.clone() else {
        return;
    };
    let client = inner.client.clone();
    let mut full = true;
    let mut failures: u32 = 0;
    loop {
        let closing = inner.closed.load(Ordering::Acquire);
        let result = heartbeat_once(&inner, &group, full, closing).await;
        if closing {
            if let Err(e) = result {
                tracing::debug!(error = %e, "leave heartbeat failed");
            }
            let mut state = lock(&inner.state);
            state.member.joined = false;
            state.member.epoch = -1;
            return;
        }
        let interval = match result {
            Ok(HeartbeatOutcome::Ok { acknowledge }) => {
                full = false;
                failures = 0;
                if acknowledge {
                    continue; // report the reconciled partitions right away
                }
                lock(&inner.state).member.heartbeat_interval
            }
            Ok(HeartbeatOutcome::Rejoin) => {
                full = true;
                failures = 0;
                continue;
            }
            Ok(HeartbeatOutcome::Retry(e)) | Err(e) => {
                tracing::debug!(group = %group, error = %e, "heartbeat failed; retrying with the same member ID");
                full = true;
                if matches!(
                    e,
                    Error::Connect { .. } | Error::ConnectionBroken { .. } | Error::Timeout { .. }
                ) || matches!(e.code(), Some(c) if crate::error::is_retriable_code(c))
                {
                    client.invalidate_coordinator(&group);
                }
                let delay = backoff(
                    client.config().retry_backoff,
                    Duration::from_secs(2),
                    failures,
                );
                failures = failures.saturating_add(1);
                delay
            }
            Ok(HeartbeatOutcome::Fatal(e)) => {
                tracing::warn!(group = %group, error = %e, "consumer group membership failed");
                lock(&inner.state).fatal = Some(e);
                inner.assignment_changed.notify_waiters();
                return;
            }
        };
        let wake = inner.wake_heartbeat.notified();
        tokio::select! {
            _ = wake => {}
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

pub(super) enum HeartbeatOutcome {
    Ok { acknowledge: bool },
    Rejoin,
    Retry(Error),
    Fatal(Error),
}

pub(super) async fn heartbeat_once(
    inner: &Arc<Inner>,
    group: &str,
    full: bool,
    leaving: bool,
) -> Result<HeartbeatOutcome> {
    let client = &inner.client;
    let node = client.coordinator(group).await?;
    let conn = client.connection(node).await?;
    let version = conn.version(ApiKey::ConsumerGroupHeartbeat)?;
    let (request, sent_owned) = {
        let mut state = lock(&inner.state);
        if state.member.version != Some(version) {
            // KIP-1082 (v1): the member ID is the client's instance ID, chosen by the client.
            // v0: the broker generates it on the first join.
            if version >= 1 {
                state.member.id = client.member_id();
            } else if state.member.version.is_some_and(|v| v >= 1) {
                state.member.id.clear();
            }
            state.member.version = Some(version);
        }
        if leaving {
            if state.member.id.is_empty() {
                return Ok(HeartbeatOutcome::Ok { acknowledge: false });
            }
            let request = ConsumerGroupHeartbeatRequest {
                group_id: group.into(),
                member_id: state.member.id.as_str().into(),
                member_epoch: -1,
                ..Default::default()
            };
            (request, None)
        } else {
            let owned: BTreeSet<TopicPartition> = state.assigned.keys().cloned().collect();
            let epoch = state.member.epoch;
            let send_owned = full || state.reported.as_ref() != Some(&owned);
            let mut by_topic: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
            for (tp, p) in &state.assigned {
                by_topic.entry(p.topic_id).or_default().push(tp.partition);
            }
            let request = ConsumerGroupHeartbeatRequest {
                group_id: group.into(),
                member_id: state.member.id.as_str().into(),
                member_epoch: epoch,
                rebalance_timeout_ms: if full {
                    inner
                        .config
                        .rebalance_timeout
                        .as_millis()
                        .min(i32::MAX as u128) as i32
                } else {
                    -1
                },
                subscribed_topic_names: (full || !state.member.joined).then(|| {
                    state
                        .subscription
                        .iter()
                        .map(|t| t.as_str().into())
                        .collect()
                }),
                server_assignor: if full {
                    inner.config.server_assignor.as_deref().map(Into::into)
                } else {
                    None
                },
                topic_partitions: send_owned.then(|| {
                    if epoch == 0 {
                        Vec::new()
                    } else {
                        by_topic
                            .into_iter()
                            .map(|(topic_id, partitions)| HbTopicPartitions {
                                topic_id,
                                partitions,
                                ..Default::default()
                            })
                            .collect()
                    }
                }),
                ..Default::default()
            };
            (request, send_owned.then_some(owned))
        }
    };
    let r = conn
        .request(request, version, client.config().request_timeout)
        .await?;
    let message = r.error_message.as_ref().map(|m| m.to_string());
    match r.error_code {
        error_codes::NONE => {}
        error_codes::FENCED_MEMBER_EPOCH | error_codes::UNKNOWN_MEMBER_ID => {
            if leaving {
                return Ok(HeartbeatOutcome::Ok { acknowledge: false });
            }
            let lost: Vec<TopicPartition> = {
                let mut state = lock(&inner.state);
                state.member.epoch = 0;
                state.member.joined = false;
                state.member.fencings += 1;
                state.reported = None;
                let lost = state.assigned.keys().cloned().collect();
                state.assigned.clear();
                lost
            };
            tracing::info!(group, code = r.error_code, "member fenced; rejoining with the same member ID");
            if !lost.is_empty() {
                let listener = lock(&inner.listener).clone();
                if let Some(l) = listener {
                    l.on_partitions_lost(&lost);
                }
            }
            inner.assignment_changed.notify_waiters();
            return Ok(HeartbeatOutcome::Rejoin);
        }
        error_codes::NOT_COORDINATOR
        | error_codes::COORDINATOR_NOT_AVAILABLE
        | 14 // COORDINATOR_LOAD_IN_PROGRESS
        | error_codes::THROTTLING_QUOTA_EXCEEDED => {
            client.invalidate_coordinator(group);
            return Ok(HeartbeatOutcome::Retry(Error::broker_for(
                "ConsumerGroupHeartbeat",
                r.error_code,
                format!("group {group}"),
                message,
            )));
        }
        code => {
            return Ok(HeartbeatOutcome::Fatal(Error::broker_for(
                "ConsumerGroupHeartbeat",
                code,
                format!("group {group}"),
                message,
            )));
        }
    }
    if leaving {
        return Ok(HeartbeatOutcome::Ok { acknowledge: false });
    }
    {
        let mut state = lock(&inner.state);
        if let Some(id) = &r.member_id {
            if version == 0 {
                state.member.id = id.to_string();
            } else if id.as_ref() as &str != state.member.id {
                tracing::warn!(ours = %state.member.id, theirs = %id, "broker answered a different member ID; keeping ours (KIP-1082)");
            }
        }
        state.member.epoch = r.member_epoch;
        state.member.joined = true;
        state.member.heartbeats += 1;
        if r.heartbeat_interval_ms > 0 {
            state.member.heartbeat_interval = Duration::from_millis(r.heartbeat_interval_ms as u64);
        } else if state.member.heartbeat_interval.is_zero() {
            state.member.heartbeat_interval = Duration::from_secs(5);
        }
        if let Some(owned) = sent_owned {
            state.reported = Some(owned);
        }
    }
    let acknowledge = match r.assignment {
        Some(assignment) => {
            let target: Vec<(Uuid, Vec<i32>)> = assignment
                .topic_partitions
                .into_iter()
                .map(|t| (t.topic_id, t.partitions))
                .collect();
            reconcile(inner, target).await
        }
        None => false,
    };
    Ok(HeartbeatOutcome::Ok { acknowledge })
}

/// Applies a target assignment: revoke first (callback + commit), then add. Returns whether the
/// owned set changed (so an acknowledging heartbeat is due).
pub(super) async fn reconcile(inner: &Arc<Inner>, target: Vec<(Uuid, Vec<i32>)>) -> bool {
    let wanted = inner.client.named_assignment(target).await;
    let (revoked, added): (Vec<TopicPartition>, Vec<TopicPartition>) = {
        let state = lock(&inner.state);
        (
            state
                .assigned
                .keys()
                .filter(|tp| !wanted.contains_key(*tp))
                .cloned()
                .collect(),
            wanted
                .keys()
                .filter(|tp| !state.assigned.contains_key(*tp))
                .cloned()
                .collect(),
        )
    };
    if revoked.is_empty() && added.is_empty() {
        return false;
    }
    let listener = lock(&inner.listener).clone();
    if !revoked.is_empty() {
        if let Some(l) = &listener {
            l.on_partitions_revoked(&revoked);
        }
        if inner.config.enable_auto_commit
            && let Err(e) = commit_positions(inner, Some(&revoked)).await
        {
            tracing::debug!(error = %e, "commit before revocation failed");
        }
        let mut state = lock(&inner.state);
        for tp in &revoked {
            state.assigned.remove(tp);
        }
    }
    if !added.is_empty() {
        {
            let mut state = lock(&inner.state);
            for tp in &added {
                let topic_id = wanted.get(tp).copied().unwrap_or_default();
                state.assigned.insert(
                    tp.clone(),
                    PartState {
                        topic_id,
                        position: None,
                        paused: false,
                        high_watermark: -1,
                    },
                );
            }
        }
        if let Some(l) = &listener {
            l.on_partitions_assigned(&added);
        }
    }
    inner.assignment_changed.notify_waiters();
    true
}
