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

pub fn handle(ctx: &RequestContext, request: ProduceRequest) -> Reply {
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
        let topic_error = (request_error.is_none()
            && !ctx.authorized(AclOperation::Write, ResourceType::Topic, &topic_data.name))
        .then(|| {
            KafkaError::new(
                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                "not authorized to write to this topic",
            )
        });
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
            if let Err(e) = partition.wait_durable(end).await {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "fdatasync failed");
                if let Some(r) = response
                    .responses
                    .get_mut(t)
                    .and_then(|topic| topic.partition_responses.get_mut(p))
                {
                    r.error_code = error_codes::KAFKA_STORAGE_ERROR;
                    r.error_message = Some(ByteString::from(format!("disk sync failed: {e}")));
                    r.base_offset = -1;
                }
            }
        }
        Response::Produce(response)
    }))
}
