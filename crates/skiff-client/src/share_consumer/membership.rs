//! The share group membership task (ShareGroupHeartbeat v1): join with the instance ID as member
//! ID, heartbeat at the broker's interval, apply assignments, rejoin after fencing, leave.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use skiff_protocol::generated::ShareGroupHeartbeatRequest;
use skiff_protocol::{ApiKey, Uuid, error_codes};

use crate::error::{Error, Result, is_retriable_code};
use crate::util::{backoff, lock};

use super::Inner;

/// The epoch of a leave heartbeat.
const LEAVE_EPOCH: i32 = -1;

/// The heartbeat interval until the broker gives one.
const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

enum Outcome {
    Ok,
    Rejoin,
    Retry(Error),
    Fatal(Error),
}

/// Joins, heartbeats, follows the assignment, rejoins after fencing; leaves when `leaving` is set.
pub(super) async fn membership_loop(inner: Arc<Inner>) {
    let group = inner.config.group_id.clone();
    let client = inner.client.clone();
    let mut full = true;
    let mut failures: u32 = 0;
    loop {
        if inner.leaving.load(Ordering::Acquire) {
            if let Err(e) = heartbeat_once(&inner, &group, false, true).await {
                tracing::debug!(group = %group, error = %e, "leave heartbeat failed");
            }
            let mut state = lock(&inner.state);
            state.member.joined = false;
            state.member.epoch = LEAVE_EPOCH;
            state.assigned.clear();
            drop(state);
            inner.assignment_changed.notify_waiters();
            return;
        }
        let outcome = match heartbeat_once(&inner, &group, full, false).await {
            Ok(o) => o,
            Err(e) if e.is_retriable() => Outcome::Retry(e),
            Err(e) => Outcome::Fatal(e),
        };
        let interval = match outcome {
            Outcome::Ok => {
                full = false;
                failures = 0;
                lock(&inner.state).member.heartbeat_interval
            }
            Outcome::Rejoin => {
                full = true;
                failures = 0;
                continue;
            }
            Outcome::Retry(e) => {
                tracing::debug!(group = %group, error = %e, "share heartbeat failed; retrying with the same member ID");
                full = true;
                if matches!(
                    e,
                    Error::Connect { .. } | Error::ConnectionBroken { .. } | Error::Timeout { .. }
                ) || e.code().is_some_and(is_retriable_code)
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
            Outcome::Fatal(e) => {
                tracing::warn!(group = %group, error = %e, "share group membership failed");
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

async fn heartbeat_once(
    inner: &Arc<Inner>,
    group: &str,
    full: bool,
    leaving: bool,
) -> Result<Outcome> {
    let client = &inner.client;
    let node = client.coordinator(group).await?;
    let conn = client.connection(node).await?;
    let version = conn.version(ApiKey::ShareGroupHeartbeat)?;
    // KIP-1313: the member ID is the client's instance ID (as the KIP-848 consumer's, KIP-1082).
    let member_id = client.member_id();
    let (request, sent_subscription) = {
        let state = lock(&inner.state);
        if leaving {
            let request = ShareGroupHeartbeatRequest {
                group_id: group.into(),
                member_id: member_id.as_str().into(),
                member_epoch: LEAVE_EPOCH,
                ..Default::default()
            };
            (request, false)
        } else {
            let send_subscription = full || !state.member.joined || !state.member.subscription_sent;
            let request = ShareGroupHeartbeatRequest {
                group_id: group.into(),
                member_id: member_id.as_str().into(),
                member_epoch: state.member.epoch,
                subscribed_topic_names: send_subscription.then(|| {
                    state
                        .subscription
                        .iter()
                        .map(|t| t.as_str().into())
                        .collect()
                }),
                ..Default::default()
            };
            (request, send_subscription)
        }
    };
    let result = conn
        .request(request, version, client.config().request_timeout)
        .await;
    let r = match result {
        Ok(r) => r,
        Err(e) => {
            if matches!(e, Error::ConnectionBroken { .. } | Error::Timeout { .. }) {
                client.invalidate_coordinator(group);
            }
            return Err(e);
        }
    };
    let message = r.error_message.as_ref().map(|m| m.to_string());
    match r.error_code {
        error_codes::NONE => {}
        error_codes::FENCED_MEMBER_EPOCH | error_codes::UNKNOWN_MEMBER_ID => {
            if leaving {
                return Ok(Outcome::Ok);
            }
            {
                let mut state = lock(&inner.state);
                state.member.epoch = 0;
                state.member.joined = false;
                state.member.fencings += 1;
                state.assigned.clear();
            }
            tracing::info!(
                group,
                code = r.error_code,
                "share group member fenced; rejoining with the same member ID"
            );
            inner.assignment_changed.notify_waiters();
            return Ok(Outcome::Rejoin);
        }
        code if code == error_codes::NOT_COORDINATOR
            || code == error_codes::COORDINATOR_NOT_AVAILABLE
            || code == error_codes::COORDINATOR_LOAD_IN_PROGRESS =>
        {
            client.invalidate_coordinator(group);
            return Ok(Outcome::Retry(Error::broker_for(
                "ShareGroupHeartbeat",
                code,
                format!("group {group}"),
                message,
            )));
        }
        code if is_retriable_code(code) => {
            return Ok(Outcome::Retry(Error::broker_for(
                "ShareGroupHeartbeat",
                code,
                format!("group {group}"),
                message,
            )));
        }
        code => {
            return Ok(Outcome::Fatal(Error::broker_for(
                "ShareGroupHeartbeat",
                code,
                format!("group {group}"),
                message,
            )));
        }
    }
    if leaving {
        return Ok(Outcome::Ok);
    }
    {
        let mut state = lock(&inner.state);
        if let Some(id) = &r.member_id
            && id.as_ref() as &str != member_id
        {
            tracing::warn!(ours = %member_id, theirs = %id, "broker answered a different member ID; keeping ours (KIP-1313)");
        }
        state.member.epoch = r.member_epoch;
        state.member.joined = true;
        state.member.heartbeats += 1;
        if sent_subscription {
            state.member.subscription_sent = true;
        }
        if r.heartbeat_interval_ms > 0 {
            state.member.heartbeat_interval =
                Duration::from_millis(u64::try_from(r.heartbeat_interval_ms).unwrap_or(5000));
        } else if state.member.heartbeat_interval.is_zero() {
            state.member.heartbeat_interval = DEFAULT_HEARTBEAT_INTERVAL;
        }
    }
    if let Some(assignment) = r.assignment {
        let target: Vec<(Uuid, Vec<i32>)> = assignment
            .topic_partitions
            .into_iter()
            .map(|t| (t.topic_id, t.partitions))
            .collect();
        apply_assignment(inner, target).await;
    }
    Ok(Outcome::Ok)
}

/// Replaces the assignment with `target` (topic IDs resolved to names through metadata; a topic
/// not in the metadata yet is left out until the next assignment).
async fn apply_assignment(inner: &Arc<Inner>, target: Vec<(Uuid, Vec<i32>)>) {
    let wanted = inner.client.named_assignment(target).await;
    let changed = {
        let mut state = lock(&inner.state);
        if state.assigned == wanted {
            false
        } else {
            tracing::debug!(group = %inner.config.group_id, partitions = wanted.len(), "share assignment changed");
            state.assigned = wanted;
            true
        }
    };
    if changed {
        inner.assignment_changed.notify_waiters();
    }
}
