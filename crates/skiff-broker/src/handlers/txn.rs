//! Transactions: InitProducerId with a transactional ID, AddPartitionsToTxn v0-3 (the client
//! versions; v4+ are broker-to-broker), AddOffsetsToTxn, TxnOffsetCommit, EndTxn, and the admin
//! views DescribeTransactions, ListTransactions and DescribeProducers.
//!
//! The protocol work is `skiff-txn`'s; these handlers check the request against the broker's
//! topics and groups, persist every change before answering (and with `flush = always` wait for
//! it to be durable), and run transaction ends through [`crate::txn_end::finish_detached`].
//!
//! Authorization comes first, as in Kafka's `KafkaApis`: WRITE on the transactional ID for every
//! request of a producer, then READ on the group for offsets, WRITE on each topic added and READ
//! on each topic whose offsets are committed; the admin views need DESCRIBE on each
//! transactional ID they show and READ on each topic DescribeProducers looks into.

use std::collections::BTreeSet;
use std::sync::Arc;

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_protocol::generated::add_offsets_to_txn_response::AddOffsetsToTxnResponse;
use skiff_protocol::generated::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use skiff_protocol::generated::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResponse, AddPartitionsToTxnTopicResult,
};
use skiff_protocol::generated::describe_producers_request::TopicRequest;
use skiff_protocol::generated::describe_producers_response::{
    DescribeProducersResponse, PartitionResponse, ProducerState, TopicResponse,
};
use skiff_protocol::generated::describe_transactions_response::{
    DescribeTransactionsResponse, TransactionState,
};
use skiff_protocol::generated::end_txn_response::EndTxnResponse;
use skiff_protocol::generated::init_producer_id_response::InitProducerIdResponse;
use skiff_protocol::generated::txn_offset_commit_request::TxnOffsetCommitRequestTopic;
use skiff_protocol::generated::txn_offset_commit_response::{
    TxnOffsetCommitResponse, TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use skiff_protocol::generated::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, DescribeProducersRequest,
    DescribeTransactionsRequest, EndTxnRequest, ListTransactionsRequest, TxnOffsetCommitRequest,
};
use skiff_protocol::{ErrorCode, Response, error_codes};
use skiff_txn::{InitOutcome, PendingOffset, TopicPartition};

use super::groups::not_coordinating;
use super::{Reply, RequestContext, bs};
use crate::clock::now_ms;
use crate::groups::requests::MAX_OFFSET_METADATA;
use crate::state::Broker;
use crate::txn_end::finish_detached;
use crate::txns::Persisted;

/// PRODUCER_FENCED for the versions that know it, INVALID_PRODUCER_EPOCH for older ones (as
/// Kafka downgrades it).
fn fenced(code: ErrorCode, knows_fenced: bool) -> i16 {
    if code == ErrorCode::PRODUCER_FENCED && !knows_fenced {
        error_codes::INVALID_PRODUCER_EPOCH
    } else {
        code.code()
    }
}

/// Whether the request may WRITE with the transactional ID.
fn may_write(ctx: &RequestContext, transactional_id: &str) -> bool {
    ctx.authorized(
        AclOperation::Write,
        ResourceType::TransactionalId,
        transactional_id,
    )
}

/// Whether the request may do `operation` on the topic.
fn on_topic(ctx: &RequestContext, operation: AclOperation, topic: &str) -> bool {
    ctx.authorized(operation, ResourceType::Topic, topic)
}

/// Hands out a fresh producer ID.
fn allocate(broker: &Broker) -> Result<i64, ErrorCode> {
    broker.allocate_producer_id().map_err(|e| {
        tracing::error!(error = %format!("{e:#}"), "producer ID allocation failed");
        ErrorCode::UNKNOWN_SERVER_ERROR
    })
}

/// InitProducerId for a (non-empty) transactional ID: fences the previous producer of the ID,
/// aborting its open transaction first.
pub fn init_producer_id(
    ctx: &RequestContext,
    transactional_id: String,
    timeout_ms: i32,
    expected: Option<(i64, i16)>,
) -> Reply {
    let broker = Arc::clone(&ctx.broker);
    let knows_fenced = ctx.version >= 4;
    let instance = ctx.instance_id;
    let journal_instance = ctx.journal_instance();
    let refusal = not_coordinating(ctx, &transactional_id);
    Reply::Later(Box::pin(async move {
        let failed = |code: ErrorCode| {
            Response::InitProducerId(InitProducerIdResponse {
                error_code: fenced(code, knows_fenced),
                producer_id: -1,
                producer_epoch: -1,
                ..Default::default()
            })
        };
        if let Some(code) = refusal {
            return failed(code);
        }
        // At most one abort of a previous producer's transaction comes first.
        for _ in 0..2 {
            let initialised = broker.txns.init_producer_id(
                &transactional_id,
                timeout_ms,
                expected,
                now_ms(),
                &mut || allocate(&broker),
            );
            let (outcome, end) = match initialised {
                Ok(pair) => pair,
                Err(code) => return failed(code),
            };
            if let Some(end) = end
                && let Err(code) = broker.txns.wait_durable(end).await
            {
                return failed(code);
            }
            match outcome {
                InitOutcome::Ready {
                    producer_id,
                    producer_epoch,
                } => {
                    let previous = broker.clients.note_producer(
                        instance,
                        producer_id,
                        producer_epoch,
                        Some(&transactional_id),
                        now_ms(),
                    );
                    super::journaling::producer_granted(
                        &broker,
                        journal_instance,
                        producer_id,
                        producer_epoch,
                        Some(&transactional_id),
                        previous,
                    );
                    return Response::InitProducerId(InitProducerIdResponse {
                        error_code: error_codes::NONE,
                        producer_id,
                        producer_epoch,
                        ..Default::default()
                    });
                }
                InitOutcome::AbortFirst(plan) => {
                    tracing::info!(transactional_id = %plan.transactional_id, producer_id = plan.producer_id, "a new producer fences the previous one; aborting its transaction");
                    if let Err(code) = finish_detached(Arc::clone(&broker), plan).await {
                        return failed(code);
                    }
                }
            }
        }
        // Another producer raced in; the client retries this code.
        failed(ErrorCode::CONCURRENT_TRANSACTIONS)
    }))
}

/// Answers with `respond(code)`: at once for a refusal, else once the transaction log is durable
/// up to `persisted`'s end (NONE, or the storage error).
fn when_durable(
    broker: &Arc<Broker>,
    persisted: Result<Persisted, ErrorCode>,
    respond: impl FnOnce(ErrorCode) -> Response + Send + 'static,
) -> Reply {
    match persisted {
        Err(code) => Reply::Now(respond(code)),
        Ok(None) => Reply::Now(respond(ErrorCode::NONE)),
        Ok(Some(end)) => {
            let broker = Arc::clone(broker);
            Reply::Later(Box::pin(async move {
                respond(
                    broker
                        .txns
                        .wait_durable(end)
                        .await
                        .err()
                        .unwrap_or(ErrorCode::NONE),
                )
            }))
        }
    }
}

/// The AddPartitionsToTxn response giving each partition of `topics` its code.
fn add_partitions_response(
    topics: &[AddPartitionsToTxnTopic],
    code_of: impl Fn(&str, i32) -> i16,
) -> Response {
    Response::AddPartitionsToTxn(AddPartitionsToTxnResponse {
        results_by_topic_v3_and_below: topics
            .iter()
            .map(|t| AddPartitionsToTxnTopicResult {
                name: t.name.clone(),
                results_by_partition: t
                    .partitions
                    .iter()
                    .map(|p| AddPartitionsToTxnPartitionResult {
                        partition_index: *p,
                        partition_error_code: code_of(&t.name, *p),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

pub fn add_partitions_to_txn(ctx: &RequestContext, request: AddPartitionsToTxnRequest) -> Reply {
    let broker = &ctx.broker;
    let knows_fenced = ctx.version >= 2;
    let topics = request.v3_and_below_topics;
    if !may_write(ctx, &request.v3_and_below_transactional_id) {
        return Reply::Now(add_partitions_response(&topics, |_, _| {
            error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        }));
    }
    if let Some(code) = not_coordinating(ctx, &request.v3_and_below_transactional_id) {
        return Reply::Now(add_partitions_response(&topics, |_, _| code.code()));
    }
    let names: BTreeSet<&str> = topics.iter().map(|t| &*t.name).collect();
    let unwritable: BTreeSet<&str> = names
        .into_iter()
        .filter(|name| !on_topic(ctx, AclOperation::Write, name))
        .collect();
    // Every partition must be writable and exist; if one is not, none is added (Kafka: the
    // others get OPERATION_NOT_ATTEMPTED).
    let refusal = |name: &str, index: i32| {
        if unwritable.contains(name) {
            Some(error_codes::TOPIC_AUTHORIZATION_FAILED)
        } else if !broker.has_partition(name, index) {
            Some(error_codes::UNKNOWN_TOPIC_OR_PARTITION)
        } else {
            None
        }
    };
    if topics
        .iter()
        .any(|t| t.partitions.iter().any(|p| refusal(&t.name, *p).is_some()))
    {
        return Reply::Now(add_partitions_response(&topics, |name, index| {
            refusal(name, index).unwrap_or(error_codes::OPERATION_NOT_ATTEMPTED)
        }));
    }
    let partitions: Vec<TopicPartition> = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.to_string(), *p)))
        .collect();
    let persisted = broker.txns.add_partitions(
        &request.v3_and_below_transactional_id,
        request.v3_and_below_producer_id,
        request.v3_and_below_producer_epoch,
        &partitions,
        now_ms(),
    );
    when_durable(broker, persisted, move |code| {
        add_partitions_response(&topics, |_, _| fenced(code, knows_fenced))
    })
}

pub fn add_offsets_to_txn(ctx: &RequestContext, request: AddOffsetsToTxnRequest) -> Reply {
    let respond = |code: i16| {
        Response::AddOffsetsToTxn(AddOffsetsToTxnResponse {
            error_code: code,
            ..Default::default()
        })
    };
    if !may_write(ctx, &request.transactional_id) {
        return Reply::Now(respond(error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED));
    }
    if !ctx.authorized(AclOperation::Read, ResourceType::Group, &request.group_id) {
        return Reply::Now(respond(error_codes::GROUP_AUTHORIZATION_FAILED));
    }
    if request.group_id.is_empty() {
        return Reply::Now(respond(error_codes::INVALID_GROUP_ID));
    }
    if let Some(code) = not_coordinating(ctx, &request.transactional_id) {
        return Reply::Now(respond(code.code()));
    }
    let knows_fenced = ctx.version >= 2;
    let persisted = ctx.broker.txns.add_offsets(
        &request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        &request.group_id,
        now_ms(),
    );
    when_durable(&ctx.broker, persisted, move |code| {
        respond(fenced(code, knows_fenced))
    })
}

/// Kafka's refusal of a whole TxnOffsetCommit: WRITE on the transactional ID, then READ on the
/// group.
fn txn_commit_refusal(ctx: &RequestContext, request: &TxnOffsetCommitRequest) -> Option<i16> {
    if !may_write(ctx, &request.transactional_id) {
        Some(error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    } else if !ctx.authorized(AclOperation::Read, ResourceType::Group, &request.group_id) {
        Some(error_codes::GROUP_AUTHORIZATION_FAILED)
    } else {
        None
    }
}

/// The TxnOffsetCommit answer for topics the request may not READ.
fn unreadable_commits(topics: &[TxnOffsetCommitRequestTopic]) -> Vec<TxnOffsetCommitResponseTopic> {
    topics
        .iter()
        .map(|topic| TxnOffsetCommitResponseTopic {
            name: topic.name.clone(),
            partitions: topic
                .partitions
                .iter()
                .map(|p| TxnOffsetCommitResponsePartition {
                    partition_index: p.partition_index,
                    error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect()
}

pub fn txn_offset_commit(ctx: &RequestContext, request: TxnOffsetCommitRequest) -> Reply {
    if let Some(code) = txn_commit_refusal(ctx, &request) {
        return Reply::Now(skiff_protocol::error_response::error_response(
            &request.into(),
            ctx.version,
            code,
            None,
        ));
    }
    let broker = &ctx.broker;
    let now = now_ms();
    let group_id = request.group_id.to_string();
    let (topics, unreadable): (Vec<_>, Vec<_>) = request
        .topics
        .into_iter()
        .partition(|t| on_topic(ctx, AclOperation::Read, &t.name));
    let unreadable = unreadable_commits(&unreadable);
    // Per-partition checks; the accepted offsets go to the transaction together.
    let mut offsets = Vec::new();
    let mut codes: Vec<Vec<i16>> = Vec::with_capacity(topics.len());
    for topic in &topics {
        codes.push(
            topic
                .partitions
                .iter()
                .map(|p| {
                    if !broker.has_partition(&topic.name, p.partition_index) {
                        error_codes::UNKNOWN_TOPIC_OR_PARTITION
                    } else if p
                        .committed_metadata
                        .as_ref()
                        .is_some_and(|m| m.len() > MAX_OFFSET_METADATA)
                    {
                        error_codes::OFFSET_METADATA_TOO_LARGE
                    } else {
                        offsets.push(PendingOffset {
                            topic: topic.name.to_string(),
                            partition: p.partition_index,
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                        });
                        error_codes::NONE
                    }
                })
                .collect(),
        );
    }
    let nothing_left = topics.is_empty() && !unreadable.is_empty();
    let checked = if nothing_left {
        // Nothing left to commit: Kafka does not ask the coordinator.
        Ok(false)
    } else if group_id.is_empty() {
        Err(ErrorCode::INVALID_GROUP_ID)
    } else if let Some(code) = not_coordinating(ctx, &group_id) {
        // Cluster mode: the group's coordinator takes its transactional offsets.
        Err(code)
    } else {
        broker
            .groups
            .validate_txn_commit(
                broker,
                &group_id,
                &request.member_id,
                request.generation_id,
                request.group_instance_id.as_deref(),
                now,
            )
            .map(|()| true)
    };
    let mut staged = None;
    let persisted = match (checked, broker.cluster()) {
        (Err(code), _) => Err(code),
        (Ok(false), _) => Ok(None),
        // Cluster mode: the offsets wait beside the group, not in the transaction (whose
        // coordinator may be another broker), until the transaction's end hands them over.
        (Ok(true), Some(cluster)) => {
            staged = Some((Arc::clone(cluster), offsets));
            Ok(None)
        }
        (Ok(true), None) => broker.txns.commit_offsets(
            &request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            &group_id,
            offsets,
            now,
        ),
    };
    let respond = move |group_code: ErrorCode| {
        let answered =
            topics
                .iter()
                .zip(&codes)
                .map(|(topic, codes)| TxnOffsetCommitResponseTopic {
                    name: topic.name.clone(),
                    partitions: topic
                        .partitions
                        .iter()
                        .zip(codes)
                        .map(|(p, code)| TxnOffsetCommitResponsePartition {
                            partition_index: p.partition_index,
                            error_code: if !group_code.is_none() {
                                group_code.code()
                            } else {
                                *code
                            },
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                });
        Response::TxnOffsetCommit(TxnOffsetCommitResponse {
            topics: answered.chain(unreadable).collect(),
            ..Default::default()
        })
    };
    if let Some((cluster, offsets)) = staged {
        let (producer_id, epoch) = (request.producer_id, request.producer_epoch);
        let broker = Arc::clone(broker);
        return Reply::Later(Box::pin(async move {
            let offsets: Vec<_> = offsets
                .into_iter()
                .map(|o| skiff_cluster::txn_offsets::TxnOffset {
                    topic: o.topic,
                    partition: o.partition,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: o.metadata,
                    commit_ms: now,
                })
                .collect();
            let partitions: std::collections::BTreeSet<(&str, i32)> = offsets
                .iter()
                .map(|o| (o.topic.as_str(), o.partition))
                .collect();
            let stage = || {
                skiff_cluster::txn_offsets::stage(
                    &cluster.db,
                    &group_id,
                    producer_id,
                    epoch,
                    &offsets,
                )
            };
            let mut staged = stage().await;
            if staged
                .as_ref()
                .is_ok_and(|written| (*written as usize) < partitions.len())
            {
                // An earlier commit's offsets for these partitions wait to be applied to the
                // group (this broker is its coordinator): apply them, then stage again.
                crate::txn_end::apply_committed_offsets(&broker).await;
                staged = stage().await;
            }
            respond(match staged {
                Ok(written) if written as usize == partitions.len() => ErrorCode::NONE,
                // Still refused: a newer epoch of this producer staged offsets here (this one
                // is a zombie), or the earlier offsets could not be applied yet; the client
                // retries, and a zombie's transaction fails at its end.
                Ok(_) => ErrorCode::CONCURRENT_TRANSACTIONS,
                Err(e) => {
                    tracing::warn!(error = %e, group = %group_id, "staging transactional offsets failed");
                    ErrorCode::KAFKA_STORAGE_ERROR
                }
            })
        }));
    }
    when_durable(broker, persisted, respond)
}

pub fn end_txn(ctx: &RequestContext, request: EndTxnRequest) -> Reply {
    let knows_fenced = ctx.version >= 2;
    let respond = move |code: ErrorCode| {
        Response::EndTxn(EndTxnResponse {
            error_code: fenced(code, knows_fenced),
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        })
    };
    if !may_write(ctx, &request.transactional_id) {
        return Reply::Now(respond(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED));
    }
    if let Some(code) = not_coordinating(ctx, &request.transactional_id) {
        return Reply::Now(respond(code));
    }
    let outcome = ctx.broker.txns.end(
        &request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
        now_ms(),
    );
    let instance = ctx.journal_instance();
    let journaled = {
        let broker = Arc::clone(&ctx.broker);
        let transactional_id = request.transactional_id.to_string();
        let (producer_id, producer_epoch, committed) = (
            request.producer_id,
            request.producer_epoch,
            request.committed,
        );
        move |code: ErrorCode| {
            super::journaling::transaction_ended(
                &broker,
                instance,
                &transactional_id,
                producer_id,
                producer_epoch,
                committed,
                code,
            );
            respond(code)
        }
    };
    match outcome {
        Err(code) => Reply::Now(journaled(code)),
        Ok(None) => Reply::Now(journaled(ErrorCode::NONE)),
        Ok(Some((plan, end))) => {
            let broker = Arc::clone(&ctx.broker);
            Reply::Later(Box::pin(async move {
                if let Some(end) = end
                    && let Err(code) = broker.txns.wait_durable(end).await
                {
                    return journaled(code);
                }
                journaled(
                    finish_detached(broker, plan)
                        .await
                        .err()
                        .unwrap_or(ErrorCode::NONE),
                )
            }))
        }
    }
}

/// Whether the request may DESCRIBE the transactional ID.
fn may_describe(ctx: &RequestContext, transactional_id: &str) -> bool {
    ctx.authorized(
        AclOperation::Describe,
        ResourceType::TransactionalId,
        transactional_id,
    )
}

/// The transactions asked for that the request may DESCRIBE, each showing only the topics it
/// may DESCRIBE; TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the others.
pub fn describe_transactions(
    ctx: &RequestContext,
    request: DescribeTransactionsRequest,
) -> Response {
    let mut transaction_states = super::groups::answer_allowed(
        &request.transactional_ids,
        |id| may_describe(ctx, id),
        |allowed| ctx.broker.txns.describe(&allowed),
        |id| TransactionState {
            error_code: error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            transactional_id: id.clone(),
            ..Default::default()
        },
    );
    for state in &mut transaction_states {
        state
            .topics
            .retain(|t| on_topic(ctx, AclOperation::Describe, &t.topic));
        if state.error_code != error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            && let Some(code) = not_coordinating(ctx, &state.transactional_id)
        {
            // Cluster mode: another broker coordinates it (the admin client asks that one).
            *state = TransactionState {
                error_code: code.code(),
                transactional_id: state.transactional_id.clone(),
                transaction_state: bs(""),
                producer_id: -1,
                producer_epoch: -1,
                transaction_start_time_ms: -1,
                ..Default::default()
            };
        }
    }
    Response::DescribeTransactions(DescribeTransactionsResponse {
        transaction_states,
        ..Default::default()
    })
}

/// The transactions the request may DESCRIBE.
pub fn list_transactions(ctx: &RequestContext, request: ListTransactionsRequest) -> Response {
    let mut response = ctx.broker.txns.list(&request, now_ms());
    response
        .transaction_states
        .retain(|t| may_describe(ctx, &t.transactional_id));
    Response::ListTransactions(response)
}

/// DescribeProducers' answer for a topic the request may not READ: TOPIC_AUTHORIZATION_FAILED on
/// each partition, whether the topic exists or not.
fn unreadable_topic(topic: &TopicRequest) -> TopicResponse {
    TopicResponse {
        name: topic.name.clone(),
        partitions: topic
            .partition_indexes
            .iter()
            .map(|index| PartitionResponse {
                partition_index: *index,
                error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
                error_message: Some(bs("Topic authorization failed.")),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// DescribeProducers: the producers each partition of a topic the request may READ knows, with
/// their open transaction's start (what `kafka-transactions.sh describe-producers` and
/// `find-hanging` read).
pub fn describe_producers(ctx: &RequestContext, request: DescribeProducersRequest) -> Response {
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            if !on_topic(ctx, AclOperation::Read, &topic.name) {
                return unreadable_topic(topic);
            }
            let found = ctx.broker.topic_by_name(&topic.name);
            TopicResponse {
                name: topic.name.clone(),
                partitions: topic
                    .partition_indexes
                    .iter()
                    .map(
                        |index| match found.as_ref().and_then(|t| t.partition(*index)) {
                            None => PartitionResponse {
                                partition_index: *index,
                                error_code: error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                                error_message: Some(bs(
                                    "this server does not host this topic-partition",
                                )),
                                ..Default::default()
                            },
                            Some(partition) => PartitionResponse {
                                partition_index: *index,
                                error_code: error_codes::NONE,
                                active_producers: partition
                                    .producers()
                                    .into_iter()
                                    .map(|p| ProducerState {
                                        producer_id: p.producer_id,
                                        producer_epoch: i32::from(p.producer_epoch),
                                        last_sequence: p.last_sequence,
                                        last_timestamp: p.last_timestamp,
                                        coordinator_epoch: -1,
                                        current_txn_start_offset: p.current_txn_start_offset,
                                        ..Default::default()
                                    })
                                    .collect(),
                                ..Default::default()
                            },
                        },
                    )
                    .collect(),
                ..Default::default()
            }
        })
        .collect();
    Response::DescribeProducers(DescribeProducersResponse {
        topics,
        ..Default::default()
    })
}
