//! ListOffsets v1-10: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4),
//! latest tiered (-5, none here), and the first offset at or after a timestamp.

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_protocol::generated::ListOffsetsRequest;
use skiff_protocol::generated::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use skiff_protocol::{ErrorCode, Response, error_codes};

use super::{Reply, RequestContext};
use crate::partition::{Isolation, Partition};

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;
const EARLIEST_PENDING_UPLOAD: i64 = -6;

pub fn handle(ctx: &RequestContext, request: ListOffsetsRequest) -> Reply {
    if let Some(cluster) = ctx.broker.cluster() {
        return cluster_list_offsets(ctx, std::sync::Arc::clone(cluster), request);
    }
    Reply::Now(handle_local(ctx, request))
}

fn handle_local(ctx: &RequestContext, request: ListOffsetsRequest) -> Response {
    // v2+: read_committed answers stop at the last stable offset, as its fetches do.
    let read_committed = request.isolation_level == 1;
    let epoch = ctx.broker.leader_epoch();
    let epoch_error =
        |current: i32| super::leader_epoch::current_epoch_error(current, ctx.broker.leader_epoch());
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
                        Some(_) if epoch_error(p.current_leader_epoch).is_some() => {
                            response.error_code = epoch_error(p.current_leader_epoch)
                                .map_or(error_codes::NONE, |c| c.code());
                        }
                        Some(partition) => match lookup(partition, p.timestamp, read_committed) {
                            Ok((timestamp, offset)) => {
                                response.timestamp = timestamp;
                                response.offset = offset;
                                response.leader_epoch = if offset >= 0 { epoch } else { -1 };
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

/// ListOffsets in cluster mode: offsets from PostgreSQL; by time, the exact record from the
/// batch the index points at.
fn cluster_list_offsets(
    ctx: &RequestContext,
    cluster: std::sync::Arc<crate::cluster::Cluster>,
    request: ListOffsetsRequest,
) -> Reply {
    // Resolved now (authorization, topics, leadership); looked up later.
    let read_committed = request.isolation_level == 1;
    let mut plan = Vec::new();
    for topic in request.topics {
        let described = ctx.authorized(AclOperation::Describe, ResourceType::Topic, &topic.name);
        let found = ctx.broker.topic_by_name(&topic.name);
        let log_append_time = found.as_ref().is_some_and(|t| {
            ctx.broker
                .meta()
                .effective_topic_config(&t.info.name)
                .is_ok_and(|c| c.message_timestamp_type == skiff_meta::TimestampType::LogAppendTime)
        });
        let partitions: Vec<_> = topic
            .partitions
            .into_iter()
            .map(|p| {
                let target = match &found {
                    _ if !described => Err(ErrorCode::TOPIC_AUTHORIZATION_FAILED),
                    None => Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                    Some(t) if !(0..t.info.partitions).contains(&p.partition_index) => {
                        Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
                    }
                    Some(_) if p.current_leader_epoch > 0 => Err(ErrorCode::UNKNOWN_LEADER_EPOCH),
                    Some(t) if !cluster.leads(t.info.id, p.partition_index) => {
                        Err(ErrorCode::NOT_LEADER_OR_FOLLOWER)
                    }
                    Some(t) => Ok(crate::cluster::key(t.info.id, p.partition_index)),
                };
                (p.partition_index, p.timestamp, target)
            })
            .collect();
        plan.push((topic.name, log_append_time, partitions));
    }
    Reply::Later(Box::pin(async move {
        let mut topics = Vec::with_capacity(plan.len());
        for (name, log_append_time, partitions) in plan {
            let mut answers = Vec::with_capacity(partitions.len());
            for (index, timestamp, target) in partitions {
                let mut response = ListOffsetsPartitionResponse {
                    partition_index: index,
                    timestamp: -1,
                    offset: -1,
                    leader_epoch: -1,
                    ..Default::default()
                };
                let looked = match target {
                    Err(code) => Err(code),
                    Ok(key) => {
                        cluster_lookup(&cluster, key, timestamp, log_append_time, read_committed)
                            .await
                    }
                };
                match looked {
                    Ok((timestamp, offset)) => {
                        response.timestamp = timestamp;
                        response.offset = offset;
                        response.leader_epoch = if offset >= 0 { 0 } else { -1 };
                    }
                    Err(code) => response.error_code = code.code(),
                }
                answers.push(response);
            }
            topics.push(ListOffsetsTopicResponse {
                name,
                partitions: answers,
                ..Default::default()
            });
        }
        Response::ListOffsets(ListOffsetsResponse {
            topics,
            ..Default::default()
        })
    }))
}

pub(crate) async fn cluster_lookup(
    cluster: &crate::cluster::Cluster,
    key: skiff_cluster::commit::PartitionKey,
    timestamp: i64,
    log_append_time: bool,
    read_committed: bool,
) -> Result<(i64, i64), ErrorCode> {
    let storage = |e: skiff_cluster::DbError| {
        tracing::warn!(error = %e, "cluster offset lookup failed");
        ErrorCode::KAFKA_STORAGE_ERROR
    };
    let offsets = || async {
        skiff_cluster::log::offsets(&cluster.db, key)
            .await
            .map_err(storage)?
            .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    };
    let batch = match timestamp {
        // v2+: read_committed ends at the last stable offset, as its fetches do.
        LATEST if read_committed => return Ok((-1, offsets().await?.last_stable)),
        LATEST => return Ok((-1, offsets().await?.high_watermark)),
        EARLIEST | EARLIEST_LOCAL => return Ok((-1, offsets().await?.log_start)),
        LATEST_TIERED | EARLIEST_PENDING_UPLOAD => return Ok((-1, -1)),
        MAX_TIMESTAMP => skiff_cluster::log::batch_with_max_time(&cluster.db, key)
            .await
            .map_err(storage)?,
        ts if ts >= 0 => skiff_cluster::log::batch_at_time(&cluster.db, key, ts)
            .await
            .map_err(storage)?,
        _ => return Err(ErrorCode::INVALID_REQUEST),
    };
    let Some(batch) = batch else {
        return Ok((-1, -1));
    };
    let log_start = offsets().await?.log_start;
    let loaded =
        crate::cluster::fetch::load(cluster, std::slice::from_ref(&batch), log_append_time)
            .await
            .map_err(|(code, message)| {
                tracing::warn!(error = %message, "reading a batch for ListOffsets failed");
                code
            })?;
    let Some(bytes) = loaded.into_iter().next() else {
        return Ok((-1, -1));
    };
    let parsed =
        skiff_records::RecordBatch::parse(bytes).map_err(|_| ErrorCode::CORRUPT_MESSAGE)?;
    let records = parsed
        .decompressed_records(64 * 1024 * 1024)
        .map_err(|_| ErrorCode::CORRUPT_MESSAGE)?;
    // The first record (at or after the log start) at or after the time, or with the largest
    // timestamp.
    let mut best: Option<(i64, i64)> = None;
    for record in records {
        let record = record.map_err(|_| ErrorCode::CORRUPT_MESSAGE)?;
        if record.offset < log_start {
            continue;
        }
        match timestamp {
            MAX_TIMESTAMP => {
                if best.is_none_or(|(t, _)| record.timestamp > t) {
                    best = Some((record.timestamp, record.offset));
                }
            }
            ts => {
                if record.timestamp >= ts {
                    return Ok((record.timestamp, record.offset));
                }
            }
        }
    }
    Ok(best.unwrap_or((-1, -1)))
}
