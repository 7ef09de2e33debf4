//! DescribeTopicPartitions (key 75, v0; KIP-966): the Java AdminClient's `describeTopics` since
//! Kafka 3.8, with paging by cursor. Kafka's `DescribeTopicPartitionsRequestHandler` and
//! `KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse`:
//!
//! - No topics named: every topic, by name, from the cursor's topic on; topics the principal may
//!   not DESCRIBE are left out. Topics named: those from the cursor's topic on (the cursor's topic
//!   must be among them, else INVALID_REQUEST), in name order; one the principal may not DESCRIBE
//!   is TOPIC_AUTHORIZATION_FAILED (with no topic ID), an unknown one UNKNOWN_TOPIC_OR_PARTITION.
//! - Partitions are listed from the cursor's partition of its topic (a negative one is
//!   INVALID_REQUEST), up to `ResponsePartitionLimit` (at most [`MAX_PARTITIONS`]) in all; when
//!   the limit cuts a topic, `NextCursor` names its next partition, and when the limit is used up
//!   at a topic's end with more topics to go, the next topic's partition 0.
//! - Each partition: its leader (this node, or in cluster mode the broker placed to lead it), the
//!   leader epoch, the leader as its only replica and in-sync replica, no eligible leader replicas
//!   and no offline replicas; each topic its authorized operations.

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_protocol::generated::describe_topic_partitions_request::DescribeTopicPartitionsRequest;
use skiff_protocol::generated::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponse, DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
};
use skiff_protocol::{ErrorCode, Response, Uuid, error_codes};

use super::{RequestContext, bs};

/// Kafka's `max.request.partition.size.limit` default: the most partitions one response lists.
pub const MAX_PARTITIONS: i32 = 2000;

/// The whole request refused (Kafka's InvalidRequestException): each topic named gets the error.
fn refused(
    request: DescribeTopicPartitionsRequest,
    version: i16,
    code: ErrorCode,
    message: &str,
) -> Response {
    skiff_protocol::error_response::error_response(
        &skiff_protocol::Request::DescribeTopicPartitions(request),
        version,
        code.code(),
        Some(message),
    )
}

fn topic_result(
    code: i16,
    name: &str,
    topic_id: Uuid,
    partitions: Vec<DescribeTopicPartitionsResponsePartition>,
) -> DescribeTopicPartitionsResponseTopic {
    DescribeTopicPartitionsResponseTopic {
        error_code: code,
        name: Some(bs(name)),
        topic_id,
        is_internal: false,
        partitions,
        ..Default::default()
    }
}

pub fn handle(ctx: &RequestContext, request: DescribeTopicPartitionsRequest) -> Response {
    let all = request.topics.is_empty();
    let cursor_topic = request
        .cursor
        .as_ref()
        .map(|c| c.topic_name.to_string())
        .unwrap_or_default();
    let mut names: Vec<String> = if all {
        ctx.broker
            .all_topics()
            .into_iter()
            .map(|t| t.info.name.clone())
            .filter(|n| *n >= cursor_topic)
            .collect()
    } else {
        request
            .topics
            .iter()
            .map(|t| t.name.to_string())
            .filter(|n| *n >= cursor_topic)
            .collect()
    };
    names.sort();
    names.dedup();
    if let Some(cursor) = &request.cursor {
        let why = if !all && !names.iter().any(|n| *n == *cursor.topic_name) {
            Some(format!(
                "DescribeTopicPartitionsRequest topic list should contain the cursor topic: {}",
                cursor.topic_name
            ))
        } else if cursor.partition_index < 0 {
            Some("DescribeTopicPartitionsRequest cursor partition must be valid".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            return refused(request, ctx.version, ErrorCode::INVALID_REQUEST, &why);
        }
    }
    let mut denied = Vec::new();
    let allowed: Vec<String> = names
        .into_iter()
        .filter(|name| {
            let ok = ctx.authorized(AclOperation::Describe, ResourceType::Topic, name);
            if !ok && !all {
                denied.push(topic_result(
                    error_codes::TOPIC_AUTHORIZATION_FAILED,
                    name,
                    Uuid::ZERO,
                    Vec::new(),
                ));
            }
            ok
        })
        .collect();
    let limit = request.response_partition_limit.clamp(0, MAX_PARTITIONS);
    let mut remaining = limit;
    let mut topics = Vec::new();
    let mut next_cursor = None;
    let epoch = ctx.broker.leader_epoch();
    for name in allowed {
        if remaining <= 0 {
            next_cursor = Some(Cursor {
                topic_name: bs(name.as_str()),
                partition_index: 0,
                ..Default::default()
            });
            break;
        }
        let Some(topic) = ctx.broker.topic_by_name(&name) else {
            if !all {
                topics.push(topic_result(
                    error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                    &name,
                    Uuid::ZERO,
                    Vec::new(),
                ));
            }
            continue;
        };
        let start = match &request.cursor {
            Some(c) if *c.topic_name == *name => c.partition_index,
            _ => 0,
        };
        let count = topic.info.partitions;
        let upper = count.min(start.saturating_add(remaining));
        let partitions: Vec<DescribeTopicPartitionsResponsePartition> = (start.min(upper)..upper)
            .map(|index| match ctx.broker.partition_leader(&topic, index) {
                Some(node) => DescribeTopicPartitionsResponsePartition {
                    partition_index: index,
                    leader_id: node,
                    leader_epoch: epoch,
                    replica_nodes: vec![node],
                    isr_nodes: vec![node],
                    eligible_leader_replicas: Some(Vec::new()),
                    last_known_elr: Some(Vec::new()),
                    offline_replicas: Vec::new(),
                    ..Default::default()
                },
                None => DescribeTopicPartitionsResponsePartition {
                    error_code: error_codes::LEADER_NOT_AVAILABLE,
                    partition_index: index,
                    leader_id: -1,
                    leader_epoch: epoch,
                    replica_nodes: Vec::new(),
                    isr_nodes: Vec::new(),
                    eligible_leader_replicas: Some(Vec::new()),
                    last_known_elr: Some(Vec::new()),
                    ..Default::default()
                },
            })
            .collect();
        remaining -= i32::try_from(partitions.len()).unwrap_or(i32::MAX);
        let mut result = topic_result(error_codes::NONE, &name, topic.info.id, partitions);
        result.topic_authorized_operations = ctx.authorized_operations(ResourceType::Topic, &name);
        topics.push(result);
        if upper < count {
            next_cursor = Some(Cursor {
                topic_name: bs(name.as_str()),
                partition_index: upper,
                ..Default::default()
            });
            break;
        }
    }
    topics.extend(denied);
    Response::DescribeTopicPartitions(DescribeTopicPartitionsResponse {
        topics,
        next_cursor,
        ..Default::default()
    })
}
