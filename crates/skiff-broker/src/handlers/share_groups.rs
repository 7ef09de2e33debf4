//! KIP-932 share group membership: ShareGroupHeartbeat (key 76) and ShareGroupDescribe
//! (key 77), v1. Served unless `group.share.enable = false` (`Broker::serves`), like ShareFetch
//! and ShareAcknowledge ([`super::share_fetch`]).
//!
//! Authorization is Kafka's (`KafkaApis.handleShareGroupHeartbeat` / `handleShareGroupDescribe`):
//! READ on the group to heartbeat, then a valid member ID (INVALID_REQUEST "Invalid member id in
//! the request."), then DESCRIBE on every subscribed topic (TOPIC_AUTHORIZATION_FAILED); DESCRIBE
//! on each group to describe it, and a described group whose assignments name a topic the
//! principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED instead.
//!
//! A heartbeat that finds subscribed partitions without share-partition state initializes them
//! before it is answered: each partition's start offset is resolved from the group's
//! `share.auto.offset.reset` here, outside the coordinator's lock, and the coordinator writes the
//! states ([`crate::groups::share`]); the members are assigned them from their next heartbeat.

use std::collections::BTreeSet;

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_group::consumer::ClientInfo;
use skiff_group::share::{InitializeShareState, MAX_MEMBER_ID_LENGTH};
use skiff_protocol::generated::share_group_describe_response::{
    DescribedGroup, ShareGroupDescribeResponse,
};
use skiff_protocol::generated::share_group_heartbeat_response::ShareGroupHeartbeatResponse;
use skiff_protocol::generated::{ShareGroupDescribeRequest, ShareGroupHeartbeatRequest};
use skiff_protocol::{ErrorCode, Response, Uuid, error_codes};

use super::groups::{
    GROUP_DENIED, answer_checked, client_host, group_refusal, names_anothers_member,
    not_coordinating, on_group, on_topic, settled, store_owner,
};
use super::{Reply, RequestContext, bs};
use crate::clock::now_ms;
use crate::groups::share::{AutoOffsetReset, ResolvedStart, resolve_start_offset};
use crate::partition::Isolation;
use crate::state::Broker;

/// The member epoch of a heartbeat that leaves the share group.
const LEAVE_EPOCH: i32 = -1;

fn heartbeat_error(code: impl Into<ErrorCode>, message: Option<&str>) -> Response {
    Response::ShareGroupHeartbeat(ShareGroupHeartbeatResponse {
        error_code: code.into().code(),
        error_message: message.map(bs),
        ..Default::default()
    })
}

/// Kafka's `KafkaApis.isMemberIdValid`: not empty, at most 36 UTF-16 code units.
fn member_id_valid(member_id: &str) -> bool {
    !member_id.is_empty() && member_id.encode_utf16().count() <= MAX_MEMBER_ID_LENGTH
}

pub fn heartbeat(ctx: &RequestContext, request: ShareGroupHeartbeatRequest) -> Reply {
    if !on_group(ctx, AclOperation::Read, &request.group_id) {
        return heartbeat_error(ErrorCode::GROUP_AUTHORIZATION_FAILED, Some(GROUP_DENIED)).into();
    }
    if !member_id_valid(&request.member_id) {
        return heartbeat_error(
            ErrorCode::INVALID_REQUEST,
            Some("Invalid member id in the request."),
        )
        .into();
    }
    let subscribed: BTreeSet<&str> = request
        .subscribed_topic_names
        .iter()
        .flatten()
        .map(|name| &**name)
        .collect();
    if !subscribed
        .into_iter()
        .all(|name| on_topic(ctx, AclOperation::Describe, name))
    {
        return heartbeat_error(ErrorCode::TOPIC_AUTHORIZATION_FAILED, None).into();
    }
    if let Some(code) = not_coordinating(ctx, &request.group_id) {
        return heartbeat_error(code, None).into();
    }
    // A member ID belongs to the principal that first named it in the group (as for consumer
    // groups, unless `client.instance.id.binding = off`).
    if names_anothers_member(ctx, &request.group_id, &request.member_id, None) {
        return heartbeat_error(
            ErrorCode::UNKNOWN_MEMBER_ID,
            Some("The member ID belongs to another principal."),
        )
        .into();
    }
    let host = client_host(ctx);
    let client = ClientInfo {
        client_id: ctx.client_id.as_deref().unwrap_or(""),
        client_host: &host,
    };
    let now = now_ms();
    let answered = ctx
        .broker
        .groups
        .share_heartbeat(&ctx.broker, &request, client, now);
    super::journaling::heartbeat(
        ctx,
        &request.group_id,
        "share",
        &request.member_id,
        request.member_epoch,
        answered
            .as_ref()
            .map(|outcome| &outcome.response)
            .map_err(|e| e.code.code()),
    );
    let response = match answered {
        Ok(outcome) => {
            if request.member_epoch == LEAVE_EPOCH {
                // Left: the ID is free again.
                ctx.broker
                    .security
                    .owners
                    .forget_member(&request.group_id, &request.member_id);
                store_owner(&ctx.broker, &request.group_id, &request.member_id, None);
            }
            if let Some((init, reset)) = outcome.initialize {
                initialize(&ctx.broker, &request.group_id, &init, reset, now);
            }
            Response::ShareGroupHeartbeat(outcome.response)
        }
        Err(e) => heartbeat_error(e.code, Some(&e.message)),
    };
    settled(ctx, &request.group_id, response, |code| {
        heartbeat_error(code, Some("the group's state could not be stored"))
    })
}

/// Initializes the share partitions a heartbeat asked for: each start offset resolved from the
/// partition's log, then written by the coordinator.
fn initialize(
    broker: &std::sync::Arc<Broker>,
    group_id: &str,
    init: &InitializeShareState,
    reset: AutoOffsetReset,
    now: i64,
) {
    let resolved: Vec<ResolvedStart> = init
        .partitions
        .iter()
        .flat_map(|(topic, partitions)| partitions.iter().map(move |p| (*topic, *p)))
        .map(|(topic, partition)| {
            let start = start_offset(broker, topic, partition, reset, now);
            (topic, partition, start)
        })
        .collect();
    let initialized = broker
        .groups
        .initialize_share_partitions(broker, group_id, resolved, now);
    if !initialized.is_empty() {
        tracing::debug!(group = group_id, partitions = ?initialized, "share partitions initialized");
    }
}

/// Where a new share partition of `topic`/`partition` starts under `reset`.
fn start_offset(
    broker: &Broker,
    topic: Uuid,
    partition: i32,
    reset: AutoOffsetReset,
    now: i64,
) -> Result<i64, String> {
    let found = broker
        .topic_by_id(topic)
        .ok_or_else(|| format!("topic {topic} is not open"))?;
    if let Some(cluster) = broker.cluster() {
        let log_append_time = broker
            .meta()
            .effective_topic_config(&found.info.name)
            .is_ok_and(|c| c.message_timestamp_type == skiff_meta::TimestampType::LogAppendTime);
        let key = crate::cluster::key(topic, partition);
        return crate::cluster::block_on(cluster_start_offset(
            cluster,
            key,
            reset,
            now,
            log_append_time,
        ))
        .map_err(str::to_string)?;
    }
    let partition = found
        .partition(partition)
        .ok_or_else(|| format!("topic {topic} has no partition {partition}"))?;
    resolve_start_offset(
        reset,
        partition.log_start_offset(),
        partition.fetchable_end(Isolation::ReadUncommitted),
        now,
        |timestamp| {
            partition
                .offset_for_timestamp(timestamp)
                .map(|found| found.map(|t| t.offset))
                .map_err(|e| format!("offset lookup failed: {e}"))
        },
    )
}

/// [`start_offset`] in cluster mode: the log's offsets, and the record at a time, from
/// PostgreSQL (and the object store).
async fn cluster_start_offset(
    cluster: &crate::cluster::Cluster,
    key: skiff_cluster::commit::PartitionKey,
    reset: AutoOffsetReset,
    now: i64,
    log_append_time: bool,
) -> Result<i64, String> {
    let offsets = skiff_cluster::log::offsets(&cluster.db, key)
        .await
        .map_err(|e| format!("offset lookup failed: {e}"))?
        .ok_or_else(|| "the partition has no log".to_string())?;
    let mut at_time = None;
    if let AutoOffsetReset::ByDuration(ms) = reset {
        let timestamp = now.saturating_sub(ms).max(0);
        let (_, offset) =
            super::list_offsets::cluster_lookup(cluster, key, timestamp, log_append_time, false)
                .await
                .map_err(|code| format!("offset lookup failed: {code:?}"))?;
        at_time = Some(offset);
    }
    resolve_start_offset(
        reset,
        offsets.log_start,
        offsets.high_watermark,
        now,
        |_| Ok::<_, String>(at_time.filter(|o| *o >= 0)),
    )
}

pub fn describe(ctx: &RequestContext, request: ShareGroupDescribeRequest) -> Response {
    let mut groups = answer_checked(
        &request.group_ids,
        |id| group_refusal(ctx, AclOperation::Describe, id),
        |allowed| {
            ctx.broker
                .groups
                .share_describe(&ctx.broker, &allowed, now_ms())
        },
        |id, code| DescribedGroup {
            group_id: id.clone(),
            error_code: code,
            ..Default::default()
        },
    );
    if request.include_authorized_operations {
        for group in &mut groups {
            if group.error_code == error_codes::NONE {
                group.authorized_operations =
                    ctx.authorized_operations(ResourceType::Group, &group.group_id);
            }
        }
    }
    hide_undescribable_assignments(ctx, &mut groups);
    Response::ShareGroupDescribe(ShareGroupDescribeResponse {
        groups,
        ..Default::default()
    })
}

/// As Kafka, a described group whose members' assignments name a topic the principal may not
/// DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED instead.
fn hide_undescribable_assignments(ctx: &RequestContext, groups: &mut [DescribedGroup]) {
    let assigned = |group: &DescribedGroup| -> BTreeSet<String> {
        group
            .members
            .iter()
            .flat_map(|m| &m.assignment.topic_partitions)
            .map(|tp| tp.topic_name.to_string())
            .collect()
    };
    let topics: BTreeSet<String> = groups.iter().flat_map(assigned).collect();
    let denied: BTreeSet<String> = topics
        .into_iter()
        .filter(|topic| !on_topic(ctx, AclOperation::Describe, topic))
        .collect();
    if denied.is_empty() {
        return;
    }
    for group in groups {
        if !assigned(group).is_disjoint(&denied) {
            *group = DescribedGroup {
                group_id: group.group_id.clone(),
                error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
                error_message: Some(bs(
                    "The group has described topic(s) that the client is not authorized to describe.",
                )),
                ..Default::default()
            };
        }
    }
}
