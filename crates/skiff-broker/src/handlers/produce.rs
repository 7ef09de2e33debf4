//! Produce v3-12: validate the producer's batches, check idempotent sequences, append them as-is
//! (offsets assigned in place), and with acks=all wait for the group-committed fdatasync.

use std::sync::Arc;

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_protocol::generated::ProduceRequest;
use skiff_protocol::generated::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use skiff_protocol::{ByteString, ErrorCode, KafkaError, Response, error_codes};

use super::{Reply, RequestContext};
use crate::clock::now_ms;
use crate::partition::Partition;

/// Record bytes in a request, over every topic and partition.
pub fn records_bytes(request: &ProduceRequest) -> usize {
    request
        .topic_data
        .iter()
        .flat_map(|t| &t.partition_data)
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .sum()
}

/// TOPIC_AUTHORIZATION_FAILED when the request may not WRITE to `topic` (checked only when the
/// request as a whole was not refused already).
fn write_refusal(
    ctx: &RequestContext,
    request_error: Option<&KafkaError>,
    topic: &str,
) -> Option<KafkaError> {
    (request_error.is_none() && !ctx.authorized(AclOperation::Write, ResourceType::Topic, topic))
        .then(|| {
            KafkaError::new(
                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                "not authorized to write to this topic",
            )
        })
}

pub fn handle(ctx: &RequestContext, request: ProduceRequest) -> Reply {
    if let Some(cluster) = ctx.broker.cluster() {
        return cluster_produce(ctx, Arc::clone(cluster), request);
    }
    let acks = request.acks;
    let now = now_ms();
    let mut waits: Vec<(usize, usize, Arc<Partition>, i64)> = Vec::new();
    let mut responses = Vec::with_capacity(request.topic_data.len());

    let transactional_id = request.transactional_id.as_deref();
    let request_error = if !matches!(acks, -1..=1) {
        Some(KafkaError::new(
            ErrorCode::INVALID_REQUIRED_ACKS,
            "acks must be 0, 1 or -1",
        ))
    } else if transactional_id
        .is_some_and(|id| !ctx.authorized(AclOperation::Write, ResourceType::TransactionalId, id))
    {
        Some(KafkaError::new(
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "not authorized to write with this transactional ID",
        ))
    } else {
        None
    };

    for (t, topic_data) in request.topic_data.into_iter().enumerate() {
        let topic_error = write_refusal(ctx, request_error.as_ref(), &topic_data.name);
        let request_error = request_error.as_ref().or(topic_error.as_ref());
        let topic = ctx.broker.topic_by_name(&topic_data.name);
        let mut partitions = Vec::with_capacity(topic_data.partition_data.len());
        for (p, data) in topic_data.partition_data.into_iter().enumerate() {
            let mut response = PartitionProduceResponse {
                index: data.index,
                base_offset: -1,
                log_append_time_ms: -1,
                log_start_offset: -1,
                ..Default::default()
            };
            let partition = topic.as_ref().and_then(|t| t.partition(data.index));
            let outcome = match (request_error, partition) {
                (Some(refused), _) => Err(refused.clone()),
                (None, None) => Err(KafkaError::new(
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    "this server does not host this topic-partition",
                )),
                (None, Some(partition)) => partition
                    .append(data.records.unwrap_or_default(), now, &ctx.broker.txns)
                    .map(|appended| (Arc::clone(partition), appended)),
            };
            match outcome {
                Ok((partition, appended)) => {
                    response.base_offset = appended.base_offset;
                    response.log_append_time_ms = appended.log_append_time;
                    response.log_start_offset = appended.log_start_offset;
                    if acks == -1 && partition.syncs_appends() {
                        waits.push((t, p, partition, appended.durable_end));
                    } else {
                        // `flush = always` syncs every append, as Kafka's flush.messages=1 does;
                        // acks 0/1 just do not wait for it.
                        partition.request_sync();
                    }
                }
                Err(refused) => {
                    tracing::debug!(topic = %topic_data.name, partition = data.index, error = %refused, "produce rejected");
                    response.error_code = refused.error_code();
                    response.error_message = refused.message.map(ByteString::from);
                }
            }
            partitions.push(response);
        }
        responses.push(TopicProduceResponse {
            name: topic_data.name,
            partition_responses: partitions,
            ..Default::default()
        });
    }

    let mut response = ProduceResponse {
        responses,
        ..Default::default()
    };
    if acks == 0 {
        return Reply::Nothing;
    }
    if waits.is_empty() {
        return Reply::Now(Response::Produce(response));
    }
    Reply::Later(Box::pin(async move {
        for (t, p, partition, end) in waits {
            let synced = partition.wait_durable(end).await;
            if let Err(e) = &synced {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "fdatasync failed");
            }
            if let Some((code, message)) = durable_outcome(synced, partition.is_removed())
                && let Some(r) = response
                    .responses
                    .get_mut(t)
                    .and_then(|topic| topic.partition_responses.get_mut(p))
            {
                r.error_code = code;
                r.error_message = Some(ByteString::from(message));
                r.base_offset = -1;
            }
        }
        Response::Produce(response)
    }))
}

/// The error an acks=all partition answers once its wait for durability is over, if any: the
/// sync failed, or the topic was deleted while the records waited (as Kafka's delayed produce
/// answers for a partition gone meanwhile), so that no acknowledgement names records whose
/// files are being removed (a delete answered before it would have made them lost).
fn durable_outcome(
    synced: Result<(), skiff_log::LogError>,
    removed: bool,
) -> Option<(i16, String)> {
    match synced {
        Err(e) => Some((
            error_codes::KAFKA_STORAGE_ERROR,
            format!("disk sync failed: {e}"),
        )),
        Ok(()) if removed => Some((
            error_codes::UNKNOWN_TOPIC_OR_PARTITION,
            "the topic was deleted before the records were durable".into(),
        )),
        Ok(()) => None,
    }
}

/// What a cluster-mode produce waits for, per partition.
struct Pending {
    topic: usize,
    partition: usize,
    log_append_time: bool,
    outcome: tokio::sync::oneshot::Receiver<crate::cluster::produce::Outcome>,
}

/// Checks one partition's records for the cluster pipeline: the batches as `BatchInfo`s.
fn cluster_batches(
    records: &bytes::Bytes,
    max_message_bytes: usize,
    log_append_time: bool,
) -> Result<Vec<skiff_cluster::commit::BatchInfo>, KafkaError> {
    let batches = skiff_records::RecordBatches::parse_produce(records.clone())
        .map_err(|e| KafkaError::new(crate::partition::records_error(&e), e.to_string()))?;
    let mut infos = Vec::with_capacity(batches.len());
    let mut at = 0u64;
    for batch in &batches {
        let size = batch.size_in_bytes();
        if size > max_message_bytes {
            return Err(KafkaError::new(
                ErrorCode::MESSAGE_TOO_LARGE,
                format!("a batch of {size} bytes is over max.message.bytes ({max_message_bytes})"),
            ));
        }
        if batch.is_control() {
            return Err(KafkaError::new(
                ErrorCode::INVALID_RECORD,
                "clients may not produce control batches",
            ));
        }
        if batch.is_transactional() && batch.producer_id() < 0 {
            return Err(KafkaError::new(
                ErrorCode::INVALID_RECORD,
                "a transactional batch needs a producer ID",
            ));
        }
        infos.push(skiff_cluster::commit::BatchInfo {
            byte_offset: at,
            byte_size: size as u32,
            record_count: batch.last_offset_delta() + 1,
            producer_id: batch.producer_id(),
            producer_epoch: batch.producer_epoch(),
            base_sequence: batch.base_sequence(),
            last_sequence: batch
                .base_sequence()
                .wrapping_add(batch.last_offset_delta()),
            max_timestamp: batch.max_timestamp(),
            log_append_time,
            // A transactional batch opens its producer's transaction on the partition (the
            // coordinator's markers close it).
            txn: if batch.is_transactional() {
                skiff_cluster::commit::TxnKind::Data
            } else {
                skiff_cluster::commit::TxnKind::None
            },
        });
        at += size as u64;
    }
    Ok(infos)
}

/// Produce in cluster mode: checks each partition here (authorization, leadership, the
/// batches), hands its records to the pipeline, and answers once their object is committed
/// (acks=0: at once, without waiting).
fn cluster_produce(
    ctx: &RequestContext,
    cluster: Arc<crate::cluster::Cluster>,
    request: ProduceRequest,
) -> Reply {
    let acks = request.acks;
    let mut responses = Vec::with_capacity(request.topic_data.len());
    let mut pending = Vec::new();
    let request_error =
        if !matches!(acks, -1..=1) {
            Some(KafkaError::new(
                ErrorCode::INVALID_REQUIRED_ACKS,
                "acks must be 0, 1 or -1",
            ))
        } else if request.transactional_id.as_deref().is_some_and(|id| {
            !ctx.authorized(AclOperation::Write, ResourceType::TransactionalId, id)
        }) {
            Some(KafkaError::new(
                ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "not authorized to write with this transactional ID",
            ))
        } else {
            None
        };
    for (t, topic_data) in request.topic_data.into_iter().enumerate() {
        let topic_error = write_refusal(ctx, request_error.as_ref(), &topic_data.name);
        let request_error = request_error.as_ref().or(topic_error.as_ref());
        let topic = ctx.broker.topic_by_name(&topic_data.name);
        let config = topic
            .as_ref()
            .and_then(|t| ctx.broker.meta().effective_topic_config(&t.info.name).ok());
        let log_append_time = config
            .as_ref()
            .is_some_and(|c| c.message_timestamp_type == skiff_meta::TimestampType::LogAppendTime);
        let mut partitions = Vec::with_capacity(topic_data.partition_data.len());
        for (p, data) in topic_data.partition_data.into_iter().enumerate() {
            let mut response = PartitionProduceResponse {
                index: data.index,
                base_offset: -1,
                log_append_time_ms: -1,
                log_start_offset: -1,
                ..Default::default()
            };
            let checked = match (request_error, &topic, &config) {
                (Some(refused), _, _) => Err(refused.clone()),
                (None, Some(topic), Some(config))
                    if (0..topic.info.partitions).contains(&data.index) =>
                {
                    if cluster.leads(topic.info.id, data.index) {
                        let records = data.records.unwrap_or_default();
                        cluster_batches(
                            &records,
                            config.max_message_bytes as usize,
                            log_append_time,
                        )
                        .map(|infos| {
                            (
                                crate::cluster::key(topic.info.id, data.index),
                                records,
                                infos,
                            )
                        })
                    } else {
                        Err(KafkaError::new(
                            ErrorCode::NOT_LEADER_OR_FOLLOWER,
                            "another broker leads this partition",
                        ))
                    }
                }
                _ => Err(KafkaError::new(
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    "this topic-partition does not exist",
                )),
            };
            match checked {
                Ok((key, records, infos)) => {
                    let outcome = cluster.pipeline.submit(key, &records, infos);
                    pending.push(Pending {
                        topic: t,
                        partition: p,
                        log_append_time,
                        outcome,
                    });
                }
                Err(refused) => {
                    response.error_code = refused.error_code();
                    response.error_message = refused.message.map(ByteString::from);
                }
            }
            partitions.push(response);
        }
        responses.push(TopicProduceResponse {
            name: topic_data.name,
            partition_responses: partitions,
            ..Default::default()
        });
    }
    if acks == 0 {
        return Reply::Nothing;
    }
    let mut response = ProduceResponse {
        responses,
        ..Default::default()
    };
    if pending.is_empty() {
        return Reply::Now(Response::Produce(response));
    }
    Reply::Later(Box::pin(async move {
        use crate::cluster::produce::Outcome;
        use skiff_cluster::commit::Verdict;
        for wait in pending {
            let outcome = wait.outcome.await.unwrap_or_else(|_| Outcome::Failed {
                code: ErrorCode::KAFKA_STORAGE_ERROR,
                message: "the broker stopped before committing".into(),
            });
            let Some(r) = response
                .responses
                .get_mut(wait.topic)
                .and_then(|topic| topic.partition_responses.get_mut(wait.partition))
            else {
                continue;
            };
            let refused = |r: &mut PartitionProduceResponse, code: ErrorCode, message: String| {
                r.error_code = code.code();
                r.error_message = Some(ByteString::from(message));
            };
            match outcome {
                Outcome::Committed {
                    verdict,
                    log_start,
                    commit_ms,
                } => match verdict {
                    Verdict::Appended { base_offset, .. }
                    | Verdict::Duplicate { base_offset, .. } => {
                        r.base_offset = base_offset;
                        r.log_start_offset = log_start;
                        if wait.log_append_time {
                            r.log_append_time_ms = commit_ms;
                        }
                    }
                    Verdict::InvalidProducerEpoch => refused(
                        r,
                        ErrorCode::INVALID_PRODUCER_EPOCH,
                        "the producer's epoch is older than the partition has seen".into(),
                    ),
                    Verdict::OutOfOrderSequence => refused(
                        r,
                        ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER,
                        "the sequence does not continue the producer's last one".into(),
                    ),
                    Verdict::UnknownPartition => refused(
                        r,
                        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                        "the partition went away".into(),
                    ),
                    // Only markers, which clients cannot send, get these.
                    Verdict::Invalid | Verdict::NothingOpen => {
                        refused(r, ErrorCode::INVALID_RECORD, "no records".into())
                    }
                },
                Outcome::Failed { code, message } => refused(r, code, message),
            }
        }
        Response::Produce(response)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An acks=all answer is a success only for records synced into a partition that still
    /// exists: a sync failure is KAFKA_STORAGE_ERROR, and a topic deleted during the wait is
    /// UNKNOWN_TOPIC_OR_PARTITION (its files are being removed: an acknowledgement would be a
    /// lie), whatever the sync did.
    #[test]
    fn an_acks_all_answer_after_the_wait_names_the_sync_and_the_deletion() {
        let failed = || {
            Err(skiff_log::LogError::Io {
                op: "fdatasync",
                path: "/x".into(),
                source: std::io::Error::other("EIO"),
            })
        };
        assert_eq!(durable_outcome(Ok(()), false), None);
        assert_eq!(
            durable_outcome(Ok(()), true).map(|(code, _)| code),
            Some(error_codes::UNKNOWN_TOPIC_OR_PARTITION)
        );
        assert_eq!(
            durable_outcome(failed(), false).map(|(code, _)| code),
            Some(error_codes::KAFKA_STORAGE_ERROR)
        );
        assert_eq!(
            durable_outcome(failed(), true).map(|(code, _)| code),
            Some(error_codes::KAFKA_STORAGE_ERROR)
        );
    }
}
