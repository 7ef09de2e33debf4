//! DeleteRecords v0-2: moves a partition's log start offset forward, as Kafka's
//! `Partition.deleteRecordsOnLeader` does. Offset -1 means the high watermark (the log end offset
//! on a single node); a negative offset or one past the high watermark is OFFSET_OUT_OF_RANGE; a
//! compact-only topic is POLICY_VIOLATION. The answer carries the new low watermark.

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_protocol::generated::DeleteRecordsRequest;
use skiff_protocol::generated::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsResponse, DeleteRecordsTopicResult,
};
use skiff_protocol::{ErrorCode, Response, error_codes};

use super::RequestContext;
use crate::partition::Partition;
use crate::state::Broker;

/// DeleteRecords' "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;

pub fn handle(ctx: &RequestContext, request: DeleteRecordsRequest) -> Response {
    let broker = &ctx.broker;
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let deletable = ctx.authorized(AclOperation::Delete, ResourceType::Topic, &topic.name);
            let found = broker.topic_by_name(&topic.name);
            let compact_only = found
                .as_ref()
                .is_some_and(|t| is_compact_only(broker, &t.info.name));
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let outcome = match found.as_ref().and_then(|t| t.partition(p.partition_index))
                    {
                        _ if !deletable => Err(ErrorCode::TOPIC_AUTHORIZATION_FAILED),
                        None => Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                        Some(_) if compact_only => Err(ErrorCode::POLICY_VIOLATION),
                        Some(partition) => delete_before(partition, p.offset),
                    };
                    let (low_watermark, error_code) = match outcome {
                        Ok(low) => (low, error_codes::NONE),
                        Err(code) => (-1, code.code()),
                    };
                    DeleteRecordsPartitionResult {
                        partition_index: p.partition_index,
                        low_watermark,
                        error_code,
                        ..Default::default()
                    }
                })
                .collect();
            DeleteRecordsTopicResult {
                name: topic.name,
                partitions,
                ..Default::default()
            }
        })
        .collect();
    Response::DeleteRecords(DeleteRecordsResponse {
        topics,
        ..Default::default()
    })
}

fn is_compact_only(broker: &Broker, topic: &str) -> bool {
    broker
        .meta()
        .effective_topic_config(topic)
        .is_ok_and(|c| !c.cleanup_policy.delete)
}

/// Advances the log start to `offset`; returns the new low watermark or an error code.
fn delete_before(partition: &Partition, offset: i64) -> Result<i64, ErrorCode> {
    partition.delete_records_before(if offset == HIGH_WATERMARK { -1 } else { offset })
}
