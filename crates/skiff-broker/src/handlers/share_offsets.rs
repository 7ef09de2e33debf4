//! The KIP-932 share group offset admin APIs: DescribeShareGroupOffsets (key 90, v0-1),
//! AlterShareGroupOffsets (91, v0) and DeleteShareGroupOffsets (92, v0). Served like the other
//! share group APIs (`group.share.enable`, `Broker::serves`), by the group's coordinator
//! (NOT_COORDINATOR elsewhere in cluster mode). In cluster mode each share partition's current
//! state is its leader's, in PostgreSQL ([`crate::cluster::share`]): describe reads it there (and
//! the high watermark), alter replaces it there (fencing the leader's copy) and delete deletes
//! it, after the coordinator's own records are durable.
//!
//! Authorization is Kafka's (`KafkaApis.handleDescribeShareGroupOffsetsRequest`,
//! `handleAlterShareGroupOffsetsRequest`, `handleDeleteShareGroupOffsetsRequest`):
//!
//! - Describe: DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED for that group), DESCRIBE on
//!   each topic: a named topic the principal may not describe is answered
//!   TOPIC_AUTHORIZATION_FAILED per partition, and without a topic list such topics are left out.
//! - Alter: READ on the group (the whole request refused), READ on each topic (its partitions
//!   TOPIC_AUTHORIZATION_FAILED); an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
//! - Delete: DELETE on the group, READ on each topic (TOPIC_AUTHORIZATION_FAILED for it).
//!
//! Topic refusals come first in an answer, then the coordinator's (Kafka's response builders);
//! a refusal of the whole request answers alone. The coordinator's work is in
//! [`crate::groups::share_offsets`]; alter and delete answer once what they wrote is durable, and
//! drop the share-partition leader's loaded copies of the partitions they rewrote.

use std::sync::Arc;

use skiff_auth::acl::AclOperation;
use skiff_group::GroupError;
use skiff_protocol::generated::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponse, AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
};
use skiff_protocol::generated::delete_share_group_offsets_response::{
    DeleteShareGroupOffsetsResponse, DeleteShareGroupOffsetsResponseTopic,
};
use skiff_protocol::generated::describe_share_group_offsets_request::{
    DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
};
use skiff_protocol::generated::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponse, DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition, DescribeShareGroupOffsetsResponseTopic,
};
use skiff_protocol::generated::{
    AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequest,
};
use skiff_protocol::{ByteString, ErrorCode, Response, Uuid, error_codes};

use super::groups::{GROUP_DENIED, not_coordinating, on_group, on_topic};
use super::{Reply, RequestContext, bs};
use crate::clock::now_ms;
use crate::groups::share::SharePartitionKey;
use crate::groups::share_offsets::{ShareOffsetsTopic, ShareStateSummary, UNKNOWN_TOPIC_MESSAGE};
use crate::partition::Isolation;
use crate::state::Broker;

/// Kafka's message of TOPIC_AUTHORIZATION_FAILED.
const TOPIC_DENIED: &str = "Topic authorization failed.";

/// The start offset of a share partition without state.
const NO_START_OFFSET: i64 = -1;
/// The lag of a share partition without one.
const NO_LAG: i64 = -1;

// ---------------------------------------------------------------------------------------------
// DescribeShareGroupOffsets

pub fn describe(ctx: &RequestContext, request: DescribeShareGroupOffsetsRequest) -> Reply {
    let planned: Vec<Described> = request
        .groups
        .iter()
        .map(|group| plan_group(ctx, group))
        .collect();
    let version = ctx.version;
    let respond = |groups| {
        Response::DescribeShareGroupOffsets(DescribeShareGroupOffsetsResponse {
            groups,
            ..Default::default()
        })
    };
    let broker = Arc::clone(&ctx.broker);
    let Some(cluster) = broker.cluster().cloned() else {
        let groups = planned
            .into_iter()
            .map(|d| {
                d.answer(|topic| {
                    let open = broker.topic_by_id(topic.topic_id);
                    let end = |p: i32| {
                        open.as_ref()
                            .and_then(|t| t.partition(p))
                            .map(|p| p.fetchable_end(Isolation::ReadUncommitted))
                    };
                    with_lag(version, broker.leader_epoch(), topic, end)
                })
            })
            .collect();
        return respond(groups).into();
    };
    // Cluster mode: each share partition's state is its leader's, in PostgreSQL.
    Reply::Later(Box::pin(async move {
        let mut groups = Vec::with_capacity(planned.len());
        for described in planned {
            let group = match described {
                Described::Done(group) => group,
                Described::Topics {
                    group_id,
                    found,
                    denied,
                } => {
                    let mut topics = Vec::with_capacity(found.len() + denied.len());
                    for topic in found {
                        let (topic, ends) = cluster_summaries(&cluster, &group_id, topic).await;
                        topics.push(with_lag(version, broker.leader_epoch(), topic, |p| {
                            ends.get(&p).copied()
                        }));
                    }
                    topics.extend(denied);
                    DescribeShareGroupOffsetsResponseGroup {
                        group_id,
                        topics,
                        ..Default::default()
                    }
                }
            };
            groups.push(group);
        }
        respond(groups)
    }))
}

/// One group of a DescribeShareGroupOffsets: refused, or what the coordinator has for it (the
/// partitions' summaries) and the topics the principal may not describe.
enum Described {
    Done(DescribeShareGroupOffsetsResponseGroup),
    Topics {
        group_id: ByteString,
        found: Vec<ShareOffsetsTopic>,
        denied: Vec<DescribeShareGroupOffsetsResponseTopic>,
    },
}

impl Described {
    fn answer(
        self,
        with_lag: impl Fn(ShareOffsetsTopic) -> DescribeShareGroupOffsetsResponseTopic,
    ) -> DescribeShareGroupOffsetsResponseGroup {
        match self {
            Described::Done(group) => group,
            Described::Topics {
                group_id,
                found,
                denied,
            } => {
                let mut topics: Vec<_> = found.into_iter().map(with_lag).collect();
                topics.extend(denied);
                DescribeShareGroupOffsetsResponseGroup {
                    group_id,
                    topics,
                    ..Default::default()
                }
            }
        }
    }
}

fn plan_group(ctx: &RequestContext, group: &DescribeShareGroupOffsetsRequestGroup) -> Described {
    let refused = |code: i16| {
        Described::Done(DescribeShareGroupOffsetsResponseGroup {
            group_id: group.group_id.clone(),
            error_code: code,
            ..Default::default()
        })
    };
    if !on_group(ctx, AclOperation::Describe, &group.group_id) {
        return refused(error_codes::GROUP_AUTHORIZATION_FAILED);
    }
    if let Some(code) = not_coordinating(ctx, &group.group_id) {
        return refused(code.code());
    }
    let broker = &ctx.broker;
    let now = now_ms();
    let (found, denied) = match &group.topics {
        None => {
            let found = broker
                .groups
                .describe_share_offsets(broker, &group.group_id, None, now)
                .into_iter()
                .filter(|topic| on_topic(ctx, AclOperation::Describe, &topic.name))
                .collect();
            (found, Vec::new())
        }
        Some(topics) if topics.is_empty() => (Vec::new(), Vec::new()),
        Some(topics) => {
            let (allowed, denied): (Vec<&DescribeShareGroupOffsetsRequestTopic>, Vec<_>) = topics
                .iter()
                .partition(|topic| on_topic(ctx, AclOperation::Describe, &topic.topic_name));
            let allowed: Vec<DescribeShareGroupOffsetsRequestTopic> =
                allowed.into_iter().cloned().collect();
            let found =
                broker
                    .groups
                    .describe_share_offsets(broker, &group.group_id, Some(&allowed), now);
            let denied = denied
                .into_iter()
                .map(|topic| DescribeShareGroupOffsetsResponseTopic {
                    topic_name: topic.topic_name.clone(),
                    topic_id: Uuid::ZERO,
                    partitions: topic
                        .partitions
                        .iter()
                        .map(|p| DescribeShareGroupOffsetsResponsePartition {
                            partition_index: *p,
                            start_offset: NO_START_OFFSET,
                            lag: NO_LAG,
                            error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
                            error_message: Some(bs(TOPIC_DENIED)),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect();
            (found, denied)
        }
    };
    Described::Topics {
        group_id: group.group_id.clone(),
        found,
        denied,
    }
}

/// Cluster mode: the summaries of a topic's share partitions from their states in PostgreSQL
/// (the coordinator knows only what it initialized), and the partitions' high watermarks.
async fn cluster_summaries(
    cluster: &crate::cluster::Cluster,
    group_id: &str,
    mut topic: ShareOffsetsTopic,
) -> (ShareOffsetsTopic, std::collections::HashMap<i32, i64>) {
    let mut ends = std::collections::HashMap::new();
    for (partition, summary) in &mut topic.partitions {
        if summary.is_none() {
            continue;
        }
        let key = SharePartitionKey::new(group_id, topic.topic_id, *partition);
        match cluster.share_state(&key).await {
            Ok(Some(state)) => *summary = Some(ShareStateSummary::of(&state)),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(group = group_id, error = %e, "reading a share partition's state failed");
            }
        }
        let log = crate::cluster::key(key.topic_id, key.partition);
        match skiff_cluster::log::offsets(&cluster.db, log).await {
            Ok(Some(offsets)) => {
                ends.insert(*partition, offsets.high_watermark);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(group = group_id, error = %e, "reading a partition's offsets failed");
            }
        }
    }
    (topic, ends)
}

/// A described topic with each partition's lag (v1+): the partition's high watermark less the
/// start offset less the records delivered for good, as Kafka computes it.
fn with_lag(
    version: i16,
    epoch: i32,
    topic: ShareOffsetsTopic,
    end_of: impl Fn(i32) -> Option<i64>,
) -> DescribeShareGroupOffsetsResponseTopic {
    let partitions = topic
        .partitions
        .into_iter()
        .map(|(partition_index, summary)| {
            let Some(summary) = summary else {
                return DescribeShareGroupOffsetsResponsePartition {
                    partition_index,
                    start_offset: NO_START_OFFSET,
                    lag: NO_LAG,
                    ..Default::default()
                };
            };
            match end_of(partition_index) {
                Some(end) => DescribeShareGroupOffsetsResponsePartition {
                    partition_index,
                    start_offset: summary.start_offset,
                    leader_epoch: epoch,
                    lag: if version >= 1 {
                        summary.lag(end)
                    } else {
                        NO_LAG
                    },
                    ..Default::default()
                },
                // Deleted since the coordinator answered.
                None => DescribeShareGroupOffsetsResponsePartition {
                    partition_index,
                    start_offset: NO_START_OFFSET,
                    lag: NO_LAG,
                    error_code: error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                    error_message: Some(bs(UNKNOWN_TOPIC_MESSAGE)),
                    ..Default::default()
                },
            }
        })
        .collect();
    DescribeShareGroupOffsetsResponseTopic {
        topic_name: ByteString::from(topic.name),
        topic_id: topic.topic_id,
        partitions,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// AlterShareGroupOffsets

fn alter_refused(code: impl Into<ErrorCode>, message: &str) -> Response {
    Response::AlterShareGroupOffsets(AlterShareGroupOffsetsResponse {
        error_code: code.into().code(),
        error_message: Some(bs(message)),
        ..Default::default()
    })
}

pub fn alter(ctx: &RequestContext, mut request: AlterShareGroupOffsetsRequest) -> Reply {
    if !on_group(ctx, AclOperation::Read, &request.group_id) {
        return alter_refused(ErrorCode::GROUP_AUTHORIZATION_FAILED, GROUP_DENIED).into();
    }
    if let Some(code) = not_coordinating(ctx, &request.group_id) {
        return alter_refused(code, "this broker does not coordinate the group").into();
    }
    let broker = Arc::clone(&ctx.broker);
    let mut refused = Vec::new();
    request.topics.retain(|topic| {
        let error = if !on_topic(ctx, AclOperation::Read, &topic.topic_name) {
            (error_codes::TOPIC_AUTHORIZATION_FAILED, TOPIC_DENIED)
        } else if broker.topic_by_name(&topic.topic_name).is_none() {
            (
                error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                UNKNOWN_TOPIC_MESSAGE,
            )
        } else {
            return true;
        };
        refused.push(AlterShareGroupOffsetsResponseTopic {
            topic_name: topic.topic_name.clone(),
            topic_id: broker
                .topic_by_name(&topic.topic_name)
                .map_or(Uuid::ZERO, |t| t.info.id),
            partitions: topic
                .partitions
                .iter()
                .map(|p| AlterShareGroupOffsetsResponsePartition {
                    partition_index: p.partition_index,
                    error_code: error.0,
                    error_message: Some(bs(error.1)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        false
    });
    let now = now_ms();
    let group_id = request.group_id.to_string();
    let keys = broker.groups.share_keys_of_topics(
        &broker,
        &group_id,
        request.topics.iter().map(|t| &*t.topic_name),
        now,
    );
    let outcome = broker.share.rewrite_states(&keys, || {
        broker
            .groups
            .alter_share_offsets(&broker, &group_id, &request.topics, now)
    });
    let change = match outcome {
        Ok(change) => change,
        Err(e) => return refused_by_coordinator(&e, alter_refused).into(),
    };
    // Cluster mode: the partitions' leaders keep their states in PostgreSQL; the altered ones are
    // replaced there once the coordinator's records are durable.
    let altered: Vec<SharePartitionKey> = change
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.error_code == error_codes::NONE)
                .map(|p| SharePartitionKey::new(group_id.clone(), t.topic_id, p.partition_index))
        })
        .collect();
    let mut topics = refused;
    topics.extend(change.topics);
    let response = AlterShareGroupOffsetsResponse {
        responses: topics,
        ..Default::default()
    };
    if let Some(cluster) = broker.cluster().cloned() {
        return Reply::Later(Box::pin(async move {
            if let Some(end) = change.written
                && let Err(e) = broker.groups.wait_durable(end).await
            {
                tracing::warn!(error = %e, "share group offsets not durable");
                return alter_refused(e.code(), "the share group offsets could not be stored");
            }
            for key in &altered {
                let Some(state) = broker.groups.share_partition_state(key) else {
                    continue;
                };
                if let Err(e) = cluster.replace_share_state(key, &state).await {
                    tracing::warn!(group = %key.group_id, error = %e, "replacing a share partition's state failed");
                    return alter_refused(
                        ErrorCode::KAFKA_STORAGE_ERROR,
                        "the share group offsets could not be stored",
                    );
                }
            }
            Response::AlterShareGroupOffsets(response)
        }));
    }
    durable(
        broker,
        change.written,
        response,
        Response::AlterShareGroupOffsets,
        |code| alter_refused(code, "the share group offsets could not be stored"),
    )
}

// ---------------------------------------------------------------------------------------------
// DeleteShareGroupOffsets

fn delete_refused(code: impl Into<ErrorCode>, message: &str) -> Response {
    Response::DeleteShareGroupOffsets(DeleteShareGroupOffsetsResponse {
        error_code: code.into().code(),
        error_message: Some(bs(message)),
        ..Default::default()
    })
}

pub fn delete(ctx: &RequestContext, mut request: DeleteShareGroupOffsetsRequest) -> Reply {
    if !on_group(ctx, AclOperation::Delete, &request.group_id) {
        return delete_refused(ErrorCode::GROUP_AUTHORIZATION_FAILED, GROUP_DENIED).into();
    }
    if let Some(code) = not_coordinating(ctx, &request.group_id) {
        return delete_refused(code, "this broker does not coordinate the group").into();
    }
    let mut refused = Vec::new();
    request.topics.retain(|topic| {
        if on_topic(ctx, AclOperation::Read, &topic.topic_name) {
            return true;
        }
        refused.push(DeleteShareGroupOffsetsResponseTopic {
            topic_name: topic.topic_name.clone(),
            topic_id: Uuid::ZERO,
            error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
            error_message: Some(bs(TOPIC_DENIED)),
            ..Default::default()
        });
        false
    });
    let broker = Arc::clone(&ctx.broker);
    let now = now_ms();
    let group_id = request.group_id.to_string();
    let names: Vec<ByteString> = request
        .topics
        .iter()
        .map(|t| t.topic_name.clone())
        .collect();
    let keys =
        broker
            .groups
            .share_keys_of_topics(&broker, &group_id, names.iter().map(|n| &**n), now);
    let outcome = broker.share.rewrite_states(&keys, || {
        broker
            .groups
            .delete_share_offsets(&broker, &group_id, &names, now)
    });
    let change = match outcome {
        Ok(change) => change,
        Err(e) => return refused_by_coordinator(&e, delete_refused).into(),
    };
    let deleted: Vec<Uuid> = change
        .topics
        .iter()
        .filter(|t| t.error_code == error_codes::NONE)
        .map(|t| t.topic_id)
        .collect();
    let mut topics = refused;
    topics.extend(change.topics);
    let response = DeleteShareGroupOffsetsResponse {
        responses: topics,
        ..Default::default()
    };
    // Cluster mode: the partitions' states in PostgreSQL go too, once the coordinator's
    // tombstones are durable.
    if let Some(cluster) = broker.cluster().cloned() {
        return Reply::Later(Box::pin(async move {
            if let Some(end) = change.written
                && let Err(e) = broker.groups.wait_durable(end).await
            {
                tracing::warn!(error = %e, "share group offsets not deleted durably");
                return delete_refused(
                    e.code(),
                    "the share group offsets could not be deleted durably",
                );
            }
            for topic_id in deleted {
                let topic = uuid::Uuid::from_u128(topic_id.as_u128());
                if let Err(e) =
                    skiff_cluster::share_states::delete(&cluster.db, &group_id, Some(topic)).await
                {
                    tracing::warn!(group = %group_id, error = %e, "deleting share partition states failed");
                    return delete_refused(
                        ErrorCode::KAFKA_STORAGE_ERROR,
                        "the share group offsets could not be deleted durably",
                    );
                }
            }
            Response::DeleteShareGroupOffsets(response)
        }));
    }
    durable(
        broker,
        change.written,
        response,
        Response::DeleteShareGroupOffsets,
        |code| delete_refused(code, "the share group offsets could not be deleted durably"),
    )
}

/// The coordinator's refusal of a whole request, as its top-level error.
fn refused_by_coordinator(e: &GroupError, answer: fn(ErrorCode, &str) -> Response) -> Response {
    answer(e.code, &e.message)
}

/// Answers `response` once the group log is durable up to `written` (at once when nothing was
/// written), else `failed`'s answer with the storage error's code.
fn durable<T: Send + 'static>(
    broker: Arc<Broker>,
    written: Option<i64>,
    response: T,
    wrap: fn(T) -> Response,
    failed: impl FnOnce(ErrorCode) -> Response + Send + 'static,
) -> Reply {
    let Some(end) = written else {
        return wrap(response).into();
    };
    Reply::Later(Box::pin(async move {
        match broker.groups.wait_durable(end).await {
            Ok(()) => wrap(response),
            Err(e) => {
                tracing::warn!(error = %e, "share group offsets not durable");
                failed(e.code())
            }
        }
    }))
}
