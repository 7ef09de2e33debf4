//! Produce v3-12: validate the producer's batches, check idempotent sequences, append them as-is
//! (offsets assigned in place), and with acks=all wait for the group-committed fdatasync.

use std::sync::Arc;

use bytes::Bytes;
use skiff_log::LogError;
use skiff_protocol::generated::ProduceRequest;
use skiff_protocol::generated::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use skiff_protocol::{ByteString, Response, error_codes};
use skiff_records::{RecordBatches, RecordsError};

use super::{Reply, RequestContext};
use crate::producer::SequenceCheck;
use crate::clock::now_ms;
use crate::state::{Partition};
use crate::txns::TransactionCoordinator;

/// The outcome of appending to one partition.
struct Appended {
    base_offset: i64,
    /// Offsets below this must be durable before acks=all is answered.
    durable_end: i64,
    log_append_time: i64,
    log_start_offset: i64,
}

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

    let request_error = if !matches!(acks, -1..=1) {
        Some((
            error_codes::INVALID_REQUIRED_ACKS,
            "acks must be 0, 1 or -1",
        ))
    } else {
        None
    };

    for (t, topic_data) in request.topic_data.into_iter().enumerate() {
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
                (Some((code, message)), _) => Err((code, message.to_string())),
                (None, None) => Err((
                    error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                    "this server does not host this topic-partition".to_string(),
                )),
                (None, Some(partition)) => append(&ctx.broker.txns, partition, data.records, now)
                    .map(|appended| (Arc::clone(partition), appended)),
            };
            match outcome {
                Ok((partition, appended)) => {
                    response.base_offset = appended.base_offset;
                    response.log_append_time_ms = appended.log_append_time;
                    response.log_start_offset = appended.log_start_offset;
                    if let Some(committer) = &partition.committer {
                        if acks == -1 {
                            waits.push((t, p, partition, appended.durable_end));
                        } else {
                            // `flush = always` syncs every append, as Kafka's flush.messages=1
                            // does; acks 0/1 just do not wait for it. Besides durability, this
                            // keeps dirty pages from piling up until the kernel throttles writes.
                            committer.request_sync();
                        }
                    }
                }
                Err((code, message)) => {
                    tracing::debug!(topic = %topic_data.name, partition = data.index, code, %message, "produce rejected");
                    response.error_code = code;
                    response.error_message = Some(ByteString::from(message));
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
            let Some(committer) = &partition.committer else {
                continue;
            };
            if let Err(e) = committer.wait_durable(end).await {
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

fn records_error(e: &RecordsError) -> i16 {
    match e {
        RecordsError::UnsupportedMagic { .. } => error_codes::UNSUPPORTED_FOR_MESSAGE_FORMAT,
        RecordsError::CrcMismatch { .. } => error_codes::CORRUPT_MESSAGE,
        _ => error_codes::INVALID_RECORD,
    }
}

fn append(
    txns: &TransactionCoordinator,
    partition: &Partition,
    records: Option<Bytes>,
    now: i64,
) -> Result<Appended, (i16, String)> {
    let records = records.unwrap_or_default();
    // Headers only: the log checks every batch's CRC when it appends (one pass over the bytes).
    let batches =
        RecordBatches::produce_headers(&records).map_err(|e| (records_error(&e), e.to_string()))?;
    for batch in &batches {
        if batch.is_control() {
            return Err((
                error_codes::INVALID_RECORD,
                "clients may not produce control batches".into(),
            ));
        }
        if batch.is_transactional() && batch.producer_id < 0 {
            return Err((
                error_codes::INVALID_RECORD,
                "a transactional batch needs a producer ID".into(),
            ));
        }
    }

    // Producer state first, then the log: the same order everywhere.
    let mut producers = partition.lock_producers();
    // Transactional batches must belong to their producer's transaction in progress, with this
    // partition added (KIP-890's check): a late batch after the transaction ended would open
    // a transaction here that no marker ever closes. Checked under the producers lock, so no
    // marker can come between the check and the append.
    let transactional = batches.iter().any(|b| b.is_transactional());
    if transactional {
        let txns = txns.lock();
        for batch in batches.iter().filter(|b| b.is_transactional()) {
            if let Err(code) = txns.state.verify_produce(
                batch.producer_id,
                batch.producer_epoch,
                (&partition.topic, partition.index),
            ) {
                return Err((
                    code,
                    format!(
                        "producer {} epoch {} has no transaction in progress with this partition",
                        batch.producer_id, batch.producer_epoch
                    ),
                ));
            }
        }
    }
    let mut single_duplicate = None;
    for batch in &batches {
        let last_seq = batch.base_sequence.wrapping_add(batch.last_offset_delta);
        match producers.check(
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            last_seq,
        ) {
            Ok(SequenceCheck::Append) => {}
            Ok(SequenceCheck::Duplicate { base_offset }) if batches.len() == 1 => {
                single_duplicate = Some(base_offset);
            }
            Ok(SequenceCheck::Duplicate { .. }) => {
                return Err((
                    error_codes::DUPLICATE_SEQUENCE_NUMBER,
                    "a retried batch arrived together with other batches".into(),
                ));
            }
            Err(code) => {
                return Err((
                    code,
                    format!(
                        "producer {} epoch {} sequence {} does not follow the last one",
                        batch.producer_id, batch.producer_epoch, batch.base_sequence
                    ),
                ));
            }
        }
    }

    let mut log = partition.lock_log();
    if partition.is_removed() {
        // Looked up before its topic was deleted (perhaps re-created since under the same
        // name): nothing may be acknowledged into files that are being removed.
        return Err((
            error_codes::UNKNOWN_TOPIC_OR_PARTITION,
            "the topic was deleted".into(),
        ));
    }
    if let Some(base_offset) = single_duplicate {
        return Ok(Appended {
            base_offset,
            durable_end: log.log_end_offset(),
            log_append_time: -1,
            log_start_offset: log.log_start_offset(),
        });
    }
    let segment_before = log.active_segment_base_offset();
    if transactional {
        // Read_committed fetches must not see these records before the producer state records
        // them as an open transaction (after the append): hold them back from here now.
        partition.hold_unstable_from(log.log_end_offset());
    }
    let info = log.append(records, now).map_err(|e| {
        let code = match &e {
            LogError::MessageTooLarge { .. } => error_codes::MESSAGE_TOO_LARGE,
            LogError::RecordSetTooLarge { .. } => error_codes::RECORD_LIST_TOO_LARGE,
            LogError::InvalidRecords(inner) => records_error(inner),
            _ => error_codes::KAFKA_STORAGE_ERROR,
        };
        if code == error_codes::KAFKA_STORAGE_ERROR {
            tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "append failed");
        }
        (code, e.to_string())
    });
    let info = match info {
        Ok(info) => info,
        Err(refused) => {
            // Nothing was appended: release the hold on read_committed readers.
            partition.publish_txn_state(&producers);
            return Err(refused);
        }
    };
    let rolled = log.active_segment_base_offset() != segment_before;
    drop(log);

    let mut next_base = info.base_offset;
    for batch in &batches {
        let last_seq = batch.base_sequence.wrapping_add(batch.last_offset_delta);
        producers.record(
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            last_seq,
            next_base,
            now,
        );
        if batch.is_transactional() {
            producers.record_txn_data(batch.producer_id, next_base);
        }
        next_base += i64::from(batch.last_offset_delta) + 1;
    }
    let end = info.last_offset + 1;
    partition.after_append(&producers, end, rolled);
    drop(producers);

    partition.end_offset.send_replace(end);
    Ok(Appended {
        base_offset: info.base_offset,
        durable_end: end,
        log_append_time: info.log_append_time,
        log_start_offset: info.log_start_offset,
    })
}
