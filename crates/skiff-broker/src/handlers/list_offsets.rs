//! ListOffsets v1-10: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4),
//! latest tiered (-5, none here), and the first offset at or after a timestamp.

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_protocol::generated::ListOffsetsRequest;
use skiff_protocol::generated::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use skiff_protocol::{ErrorCode, Response, error_codes};

use super::RequestContext;
use crate::partition::{Isolation, Partition};

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;
const EARLIEST_PENDING_UPLOAD: i64 = -6;

pub fn handle(ctx: &RequestContext, request: ListOffsetsRequest) -> Response {
    // v2+: read_committed answers stop at the last stable offset, as its fetches do.
    let read_committed = request.isolation_level == 1;
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let described =
                ctx.authorized(AclOperation::Describe, ResourceType::Topic, &topic.name);
            let found = ctx.broker.topic_by_name(&topic.name);
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let mut response = ListOffsetsPartitionResponse {
                        partition_index: p.partition_index,
                        timestamp: -1,
                        offset: -1,
                        leader_epoch: -1,
                        ..Default::default()
                    };
                    match found.as_ref().and_then(|t| t.partition(p.partition_index)) {
                        _ if !described => {
                            response.error_code = error_codes::TOPIC_AUTHORIZATION_FAILED;
                        }
                        None => response.error_code = error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                        Some(_) if p.current_leader_epoch > 0 => {
                            response.error_code = error_codes::UNKNOWN_LEADER_EPOCH;
                        }
                        Some(partition) => match lookup(partition, p.timestamp, read_committed) {
                            Ok((timestamp, offset)) => {
                                response.timestamp = timestamp;
                                response.offset = offset;
                                response.leader_epoch = if offset >= 0 { 0 } else { -1 };
                            }
                            Err(code) => response.error_code = code.code(),
                        },
                    }
                    response
                })
                .collect();
            ListOffsetsTopicResponse {
                name: topic.name,
                partitions,
                ..Default::default()
            }
        })
        .collect();
    Response::ListOffsets(ListOffsetsResponse {
        topics,
        ..Default::default()
    })
}

/// (timestamp, offset) for one partition; -1/-1 when there is no such record (or, for
/// read_committed, none below the last stable offset).
fn lookup(
    partition: &Partition,
    timestamp: i64,
    read_committed: bool,
) -> Result<(i64, i64), ErrorCode> {
    let fetchable_end = partition.fetchable_end(if read_committed {
        Isolation::ReadCommitted
    } else {
        Isolation::ReadUncommitted
    });
    let fetchable = |found: Option<skiff_log::TimestampOffset>| {
        found
            .filter(|t| t.offset < fetchable_end)
            .map_or((-1, -1), |t| (t.timestamp, t.offset))
    };
    let storage = |e: skiff_log::LogError| {
        tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "offset lookup failed");
        ErrorCode::KAFKA_STORAGE_ERROR
    };
    match timestamp {
        LATEST => Ok((-1, fetchable_end)),
        EARLIEST | EARLIEST_LOCAL => Ok((-1, partition.log_start_offset())),
        LATEST_TIERED | EARLIEST_PENDING_UPLOAD => Ok((-1, -1)),
        MAX_TIMESTAMP => Ok(fetchable(
            partition.max_timestamp_offset().map_err(storage)?,
        )),
        ts if ts >= 0 => Ok(fetchable(
            partition.offset_for_timestamp(ts).map_err(storage)?,
        )),
        _ => Err(ErrorCode::INVALID_REQUEST),
    }
}
