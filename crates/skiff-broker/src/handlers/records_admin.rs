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

use super::{Reply, RequestContext};
use crate::partition::Partition;
use crate::state::Broker;

/// DeleteRecords' "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;

pub fn handle(ctx: &RequestContext, request: DeleteRecordsRequest) -> Reply {
    if let Some(cluster) = ctx.broker.cluster() {
        return cluster_delete_records(ctx, std::sync::Arc::clone(cluster), request);
    }
    Reply::Now(handle_local(ctx, request))
}

fn handle_local(ctx: &RequestContext, request: DeleteRecordsRequest) -> Response {
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

/// DeleteRecords in cluster mode: the log start moves in PostgreSQL.
fn cluster_delete_records(
    ctx: &RequestContext,
    cluster: std::sync::Arc<crate::cluster::Cluster>,
    request: DeleteRecordsRequest,
) -> Reply {
    let mut plan = Vec::new();
    for topic in request.topics {
        let deletable = ctx.authorized(AclOperation::Delete, ResourceType::Topic, &topic.name);
        let found = ctx.broker.topic_by_name(&topic.name);
        let partitions: Vec<_> = topic
            .partitions
            .into_iter()
            .map(|p| {
                let target = match &found {
                    _ if !deletable => Err(ErrorCode::TOPIC_AUTHORIZATION_FAILED),
                    Some(t) if (0..t.info.partitions).contains(&p.partition_index) => {
                        if cluster.leads(t.info.id, p.partition_index) {
                            Ok(crate::cluster::key(t.info.id, p.partition_index))
                        } else {
                            Err(ErrorCode::NOT_LEADER_OR_FOLLOWER)
                        }
                    }
                    _ => Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                };
                (p.partition_index, p.offset, target)
            })
            .collect();
        plan.push((topic.name, partitions));
    }
    Reply::Later(Box::pin(async move {
        let mut topics = Vec::with_capacity(plan.len());
        for (name, partitions) in plan {
            let mut results = Vec::with_capacity(partitions.len());
            for (index, offset, target) in partitions {
                let outcome = match target {
                    Err(code) => Err(code),
                    Ok(key) => cluster_delete_before(&cluster, key, offset).await,
                };
                let (low_watermark, error_code) = match outcome {
                    Ok(low) => (low, error_codes::NONE),
                    Err(code) => (-1, code.code()),
                };
                results.push(DeleteRecordsPartitionResult {
                    partition_index: index,
                    low_watermark,
                    error_code,
                    ..Default::default()
                });
            }
            topics.push(DeleteRecordsTopicResult {
                name,
                partitions: results,
                ..Default::default()
            });
        }
        Response::DeleteRecords(DeleteRecordsResponse {
            topics,
            ..Default::default()
        })
    }))
}

async fn cluster_delete_before(
    cluster: &crate::cluster::Cluster,
    key: skiff_cluster::commit::PartitionKey,
    offset: i64,
) -> Result<i64, ErrorCode> {
    let Some(reg) = cluster.registration() else {
        return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
    };
    let storage = |e: skiff_cluster::DbError| {
        tracing::warn!(error = %e, "DeleteRecords failed");
        match e {
            skiff_cluster::DbError::Fenced { .. } => {
                cluster.fenced(reg);
                ErrorCode::NOT_LEADER_OR_FOLLOWER
            }
            _ => ErrorCode::KAFKA_STORAGE_ERROR,
        }
    };
    let offsets = skiff_cluster::log::offsets(&cluster.db, key)
        .await
        .map_err(storage)?
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    let target = if offset == HIGH_WATERMARK {
        offsets.high_watermark
    } else {
        offset
    };
    if target < 0 || target > offsets.high_watermark {
        return Err(ErrorCode::OFFSET_OUT_OF_RANGE);
    }
    skiff_cluster::log::delete_before(&cluster.db, reg, key, target)
        .await
        .map_err(storage)?
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
}
