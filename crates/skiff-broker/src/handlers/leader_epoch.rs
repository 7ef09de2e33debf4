//! OffsetForLeaderEpoch (key 23, v2-4): KIP-320's position validation. A consumer that resumes
//! from a position it got under some leader epoch asks where that epoch's log ended; a position
//! past that end means the log lost records it had read (an unclean restart, a truncation), and
//! the consumer resets rather than skipping silently.
//!
//! Skiff's leader epoch is 0 for every partition, on one node and in cluster mode (leadership
//! moves between stateless brokers there, but the log is one, so nothing is ever truncated by a
//! change of leader): Metadata, Fetch and ListOffsets say 0, and every batch is stamped 0. The
//! epoch history of a partition is therefore the one entry (epoch 0, from the log start offset),
//! and Kafka's `LeaderEpochFileCache.endOffsetFor` over it gives the answers: epoch 0 ends at the
//! log end offset; a later epoch is unknown (-1, -1); an earlier one ends where epoch 0 starts.
//!
//! Checks are Kafka's: DESCRIBE on the topic (TOPIC_AUTHORIZATION_FAILED), CLUSTER_ACTION for a
//! request from a replica (`ReplicaId` >= 0; Skiff has none, so only an authorized tool gets
//! answers), the partition exists (UNKNOWN_TOPIC_OR_PARTITION), `CurrentLeaderEpoch` (-1: not
//! checked) is the current epoch (above: UNKNOWN_LEADER_EPOCH, below: FENCED_LEADER_EPOCH), and in
//! cluster mode this broker leads the partition (NOT_LEADER_OR_FOLLOWER).

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_protocol::generated::offset_for_leader_epoch_request::OffsetForLeaderEpochRequest;
use skiff_protocol::generated::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult,
};
use skiff_protocol::{ErrorCode, Response};

use super::{Reply, RequestContext};
use crate::partition::LEADER_EPOCH;

/// Kafka's `UNDEFINED_EPOCH` and `UNDEFINED_EPOCH_OFFSET`.
const UNDEFINED_EPOCH: i32 = -1;
const UNDEFINED_OFFSET: i64 = -1;

/// Kafka's `LeaderEpochFileCache.endOffsetFor`: the epoch at or below `requested` and where it
/// ended, over `epochs` (epoch, start offset), ascending, the last one current until
/// `log_end_offset`.
pub fn end_offset_for(epochs: &[(i32, i64)], requested: i32, log_end_offset: i64) -> (i32, i64) {
    if requested == UNDEFINED_EPOCH {
        return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
    }
    if epochs.last().is_some_and(|(epoch, _)| *epoch == requested) {
        return (requested, log_end_offset);
    }
    let Some(&(_, higher_start)) = epochs.iter().find(|(epoch, _)| *epoch > requested) else {
        // Later than any epoch known.
        return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
    };
    match epochs.iter().rev().find(|(epoch, _)| *epoch <= requested) {
        Some(&(floor, _)) => (floor, higher_start),
        // Earlier than any epoch known.
        None => (requested, higher_start),
    }
}

/// Kafka's `Partition.checkCurrentLeaderEpoch`.
fn current_epoch_error(current: i32) -> Option<ErrorCode> {
    match current {
        UNDEFINED_EPOCH => None,
        e if e > LEADER_EPOCH => Some(ErrorCode::UNKNOWN_LEADER_EPOCH),
        e if e < LEADER_EPOCH => Some(ErrorCode::FENCED_LEADER_EPOCH),
        _ => None,
    }
}

/// One partition's answer from its log start and end offsets.
fn answer(partition: i32, requested: i32, log_start: i64, log_end: i64) -> EpochEndOffset {
    let (leader_epoch, end_offset) =
        end_offset_for(&[(LEADER_EPOCH, log_start)], requested, log_end);
    EpochEndOffset {
        partition,
        leader_epoch,
        end_offset,
        ..Default::default()
    }
}

fn failed(partition: i32, code: ErrorCode) -> EpochEndOffset {
    EpochEndOffset {
        error_code: code.code(),
        partition,
        leader_epoch: UNDEFINED_EPOCH,
        end_offset: UNDEFINED_OFFSET,
        ..Default::default()
    }
}

/// What one partition needs: an answer now, or (cluster mode) a lookup of its offsets.
enum Plan {
    Done(EpochEndOffset),
    Lookup {
        partition: i32,
        requested: i32,
        key: skiff_cluster::commit::PartitionKey,
    },
}

pub fn handle(ctx: &RequestContext, request: OffsetForLeaderEpochRequest) -> Reply {
    let replica = ctx.version >= 3 && request.replica_id >= 0;
    let cluster_action = !replica || ctx.authorized_on_cluster(AclOperation::ClusterAction);
    let cluster = ctx.broker.cluster().cloned();
    let mut plans: Vec<(skiff_protocol::ByteString, Vec<Plan>)> = Vec::new();
    for topic in request.topics {
        let described = ctx.authorized(AclOperation::Describe, ResourceType::Topic, &topic.topic);
        let found = ctx.broker.topic_by_name(&topic.topic);
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let index = p.partition;
                let refusal = if !cluster_action {
                    Some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
                } else if !described {
                    Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED)
                } else {
                    None
                };
                if let Some(code) = refusal {
                    return Plan::Done(failed(index, code));
                }
                let Some(found) = &found else {
                    return Plan::Done(failed(index, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION));
                };
                if !(0..found.info.partitions).contains(&index) {
                    return Plan::Done(failed(index, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION));
                }
                if let Some(code) = current_epoch_error(p.current_leader_epoch) {
                    return Plan::Done(failed(index, code));
                }
                match &cluster {
                    Some(c) if !c.leads(found.info.id, index) => {
                        Plan::Done(failed(index, ErrorCode::NOT_LEADER_OR_FOLLOWER))
                    }
                    Some(_) => Plan::Lookup {
                        partition: index,
                        requested: p.leader_epoch,
                        key: crate::cluster::key(found.info.id, index),
                    },
                    None => match found.partition(index) {
                        Some(log) if log.is_offline() => {
                            Plan::Done(failed(index, ErrorCode::KAFKA_STORAGE_ERROR))
                        }
                        Some(log) => Plan::Done(answer(
                            index,
                            p.leader_epoch,
                            log.log_start_offset(),
                            log.log_end_offset(),
                        )),
                        None => Plan::Done(failed(index, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)),
                    },
                }
            })
            .collect();
        plans.push((topic.topic, partitions));
    }
    let respond = |topics: Vec<OffsetForLeaderTopicResult>| {
        Response::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse {
            topics,
            ..Default::default()
        })
    };
    let Some(cluster) = cluster else {
        let topics = plans
            .into_iter()
            .map(|(topic, partitions)| OffsetForLeaderTopicResult {
                topic,
                partitions: partitions
                    .into_iter()
                    .map(|plan| match plan {
                        Plan::Done(answer) => answer,
                        Plan::Lookup { partition, .. } => {
                            failed(partition, ErrorCode::UNKNOWN_SERVER_ERROR)
                        }
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        return Reply::Now(respond(topics));
    };
    Reply::Later(Box::pin(async move {
        let mut topics = Vec::with_capacity(plans.len());
        for (topic, partitions) in plans {
            let mut answers = Vec::with_capacity(partitions.len());
            for plan in partitions {
                answers.push(match plan {
                    Plan::Done(answer) => answer,
                    Plan::Lookup {
                        partition,
                        requested,
                        key,
                    } => match skiff_cluster::log::offsets(&cluster.db, key).await {
                        Ok(Some(o)) => answer(partition, requested, o.log_start, o.high_watermark),
                        Ok(None) => failed(partition, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                        Err(e) => {
                            tracing::warn!(error = %e, "an epoch end offset lookup failed");
                            failed(partition, ErrorCode::KAFKA_STORAGE_ERROR)
                        }
                    },
                });
            }
            topics.push(OffsetForLeaderTopicResult {
                topic,
                partitions: answers,
                ..Default::default()
            });
        }
        respond(topics)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offsets_follow_kafkas_epoch_cache() {
        // One epoch (Skiff's): it ends at the log end; later ones are unknown.
        let one = [(0, 5)];
        assert_eq!(end_offset_for(&one, 0, 42), (0, 42));
        assert_eq!(end_offset_for(&one, 1, 42), (-1, -1));
        assert_eq!(end_offset_for(&one, -1, 42), (-1, -1));
        assert_eq!(end_offset_for(&one, -5, 42), (-5, 5));
        assert_eq!(end_offset_for(&[], 0, 42), (-1, -1));
        // Several epochs, as a Kafka log with leader changes has them.
        let many = [(1, 0), (3, 10), (6, 25)];
        assert_eq!(end_offset_for(&many, 6, 40), (6, 40));
        assert_eq!(end_offset_for(&many, 1, 40), (1, 10));
        assert_eq!(end_offset_for(&many, 2, 40), (1, 10));
        assert_eq!(end_offset_for(&many, 4, 40), (3, 25));
        assert_eq!(end_offset_for(&many, 0, 40), (0, 0));
        assert_eq!(end_offset_for(&many, 7, 40), (-1, -1));
    }

    #[test]
    fn the_current_epoch_is_checked_as_kafka_checks_it() {
        assert_eq!(current_epoch_error(-1), None);
        assert_eq!(current_epoch_error(0), None);
        assert_eq!(
            current_epoch_error(1),
            Some(ErrorCode::UNKNOWN_LEADER_EPOCH)
        );
        assert_eq!(
            current_epoch_error(-2),
            Some(ErrorCode::FENCED_LEADER_EPOCH)
        );
    }
}
