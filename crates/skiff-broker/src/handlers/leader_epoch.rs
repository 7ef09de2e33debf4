//! OffsetForLeaderEpoch (key 23, v2-4): KIP-320's position validation. A consumer that resumes
//! from a position it got under some leader epoch asks where that epoch's log ended; a position
//! past that end means the log lost records it had read (an unclean restart, a truncation), and
//! the consumer resets rather than skipping silently.
//!
//! On one node a partition's leader epoch is the broker's start count, and each partition keeps
//! the history of its epochs ([`crate::partition::epochs`]): Metadata, Fetch and ListOffsets say
//! the current epoch, every batch is stamped with it, and Kafka's
//! `LeaderEpochFileCache.endOffsetFor` over the history answers. In cluster mode leadership moves
//! between stateless brokers over one shared log that no move truncates: the epoch is 0 and the
//! history its one entry (epoch 0 ends at the high watermark; later ones are unknown).
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
use crate::partition::epochs::{UNDEFINED_EPOCH, UNDEFINED_OFFSET, end_offset_for};

/// Kafka's `Partition.checkCurrentLeaderEpoch`: a request's `current` epoch (-1: not checked)
/// against the partition's `leader` epoch.
pub fn current_epoch_error(current: i32, leader: i32) -> Option<ErrorCode> {
    match current {
        UNDEFINED_EPOCH => None,
        e if e > leader => Some(ErrorCode::UNKNOWN_LEADER_EPOCH),
        e if e < leader => Some(ErrorCode::FENCED_LEADER_EPOCH),
        _ => None,
    }
}

/// One partition's answer: the epoch at or below `requested` and where it ended.
fn answer(partition: i32, (leader_epoch, end_offset): (i32, i64)) -> EpochEndOffset {
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
                if let Some(code) =
                    current_epoch_error(p.current_leader_epoch, ctx.broker.leader_epoch())
                {
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
                        Some(log) => {
                            Plan::Done(answer(index, log.epoch_end_offset(p.leader_epoch)))
                        }
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
                        // One shared log, never truncated by a change of leader: one epoch.
                        Ok(Some(o)) => answer(
                            partition,
                            end_offset_for(
                                &[(crate::partition::CLUSTER_LEADER_EPOCH, o.log_start)],
                                requested,
                                o.high_watermark,
                            ),
                        ),
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
    fn the_current_epoch_is_checked_as_kafka_checks_it() {
        assert_eq!(current_epoch_error(-1, 3), None);
        assert_eq!(current_epoch_error(3, 3), None);
        assert_eq!(
            current_epoch_error(4, 3),
            Some(ErrorCode::UNKNOWN_LEADER_EPOCH)
        );
        assert_eq!(
            current_epoch_error(2, 3),
            Some(ErrorCode::FENCED_LEADER_EPOCH)
        );
        assert_eq!(
            current_epoch_error(-2, 0),
            Some(ErrorCode::FENCED_LEADER_EPOCH)
        );
    }
}
