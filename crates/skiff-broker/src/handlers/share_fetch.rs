//! KIP-932 ShareFetch (key 78) and ShareAcknowledge (key 79), v1-2, as Kafka's
//! `KafkaApis.handleShareFetchRequest` / `handleShareAcknowledgeRequest` serve them. Served unless
//! `group.share.enable = false` (`Broker::serves`); the share partitions and sessions are
//! [`crate::share`]'s. In cluster mode a partition's leader is its share partitions' leader, as in
//! Kafka (NOT_LEADER_OR_FOLLOWER elsewhere): its records are read from the object store ahead of
//! each acquisition, long polls wake on commits anywhere in the cluster, and opening a session
//! checks no membership (the group's coordinator may be another broker).
//!
//! Checks, in Kafka's order: READ on the group (GROUP_AUTHORIZATION_FAILED), a valid member ID
//! (INVALID_REQUEST), that the member ID is not another principal's (UNKNOWN_MEMBER_ID; Skiff's
//! `client.instance.id.binding`, as for groups), for a v2 `IsRenewAck` ShareFetch zero `MaxBytes`, `MinBytes`, `MaxRecords`
//! and `MaxWaitMs` (INVALID_REQUEST), then the share session ([`crate::share::session`]). A
//! ShareFetch opening a session must come from a current member of the share group
//! (GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID): Kafka does not check this; Skiff does, since a member
//! that left has had its records released. Per partition: an unknown topic ID is UNKNOWN_TOPIC_ID,
//! a topic the principal may not READ is TOPIC_AUTHORIZATION_FAILED, a partition the topic does
//! not have is UNKNOWN_TOPIC_OR_PARTITION.
//!
//! Acknowledgements (ShareAcknowledge's, or piggy-backed on a ShareFetch) are checked as Kafka's
//! `validateAcknowledgementBatches` does (INVALID_REQUEST for the partition: a batch ending before
//! it starts, or starting before the previous one ends, no types, not one type per offset, a type
//! above 3, or 4 (renew) where the request is not a v2 `IsRenewAck` one) and applied all or none
//! per partition; they are durable in the group log before the answer. A ShareFetch then acquires
//! records: the session's partitions in turn (rotated by the session epoch), each read from its
//! share partition's next fetch offset within what is left of `MaxBytes` (and the broker's
//! `fetch.max.bytes`; the first batch always) and of `MaxRecords` (per `ShareAcquireMode`), the
//! acquired ranges cut to `BatchSize`. With nothing acquired it waits up to `MaxWaitMs` (and for
//! at least `MinBytes` to be readable), woken by appends to its partitions and by records coming
//! back (released, expired); when the wait ends it takes what there is. A v2 `IsRenewAck`
//! ShareFetch acquires nothing (KIP-1222), and neither does a final (epoch -1) one, which closes
//! the session after its acknowledgements and releases what the member still holds.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use indexmap::IndexMap;
use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_group::share::MAX_MEMBER_ID_LENGTH;
use skiff_protocol::generated::share_acknowledge_response::{
    PartitionData as AckPartitionData, ShareAcknowledgeResponse, ShareAcknowledgeTopicResponse,
};
use skiff_protocol::generated::share_fetch_response::{
    AcquiredRecords, PartitionData, ShareFetchResponse, ShareFetchableTopicResponse,
};
use skiff_protocol::generated::{ShareAcknowledgeRequest, ShareFetchRequest};
use skiff_protocol::{ByteString, ErrorCode, Response, Uuid, error_codes};
use skiff_share::{AckBatch, AckType, AcquireMode};
use tokio::sync::watch;

use super::{Reply, RequestContext, bs};
use crate::clock::now_ms;
use crate::groups::share::{ShareGroupSettings, SharePartitionKey};
use crate::partition::{Isolation, Partition};
use crate::share::log_read::LogChunk;
use crate::share::session::{Context, FINAL_EPOCH, SessionKey, TopicPartition};
use crate::share::{AcquireRequest, ReadOutcome};
use crate::state::Broker;

/// Longest wait a client may ask for; longer requests are cut to this.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// Why a request naming another principal's member ID is refused (`client.instance.id.binding`).
const ANOTHERS_MEMBER: &str = "The member ID belongs to another principal.";

/// The highest acknowledge type before v2 (KIP-1222 adds 4, renew).
const MAX_ACK_TYPE_V1: i8 = 3;

/// The highest acknowledgement type a request of `version` may carry (renew is v2's).
fn max_ack_type(version: i16) -> i8 {
    if version >= 2 {
        AckType::Renew.code()
    } else {
        MAX_ACK_TYPE_V1
    }
}

/// An acknowledgement outcome per partition: error code and message.
type AckResults = IndexMap<TopicPartition, (i16, Option<ByteString>)>;

/// Kafka's `KafkaApis.isMemberIdValid`: not empty, at most 36 UTF-16 code units.
fn member_id_valid(member_id: &str) -> bool {
    !member_id.is_empty() && member_id.encode_utf16().count() <= MAX_MEMBER_ID_LENGTH
}

fn fetch_error(code: ErrorCode, message: Option<&str>) -> Response {
    Response::ShareFetch(ShareFetchResponse {
        error_code: code.code(),
        error_message: message.map(bs),
        ..Default::default()
    })
}

fn ack_error(code: ErrorCode, message: Option<&str>) -> Response {
    Response::ShareAcknowledge(ShareAcknowledgeResponse {
        error_code: code.code(),
        error_message: message.map(bs),
        ..Default::default()
    })
}

/// Where a share partition's records are read from.
enum Source {
    /// A partition log of this broker.
    Local(Arc<Partition>),
    /// Cluster mode: a partition this broker leads; `true` when its topic stamps
    /// `LogAppendTime`.
    Cluster(skiff_cluster::commit::PartitionKey, bool),
}

/// The partition of a topic the request may READ, or the per-partition error. In cluster mode
/// only the partition's leader is its share partitions' leader (as in Kafka):
/// NOT_LEADER_OR_FOLLOWER elsewhere, and whatever this broker held of the group's share
/// partition there is dropped (another broker owns its state now).
fn resolve(ctx: &RequestContext, group_id: &str, tp: TopicPartition) -> Result<Source, ErrorCode> {
    let topic = ctx
        .broker
        .topic_by_id(tp.0)
        .ok_or(ErrorCode::UNKNOWN_TOPIC_ID)?;
    if !ctx.authorized(AclOperation::Read, ResourceType::Topic, &topic.info.name) {
        return Err(ErrorCode::TOPIC_AUTHORIZATION_FAILED);
    }
    let Some(cluster) = ctx.broker.cluster() else {
        return topic
            .partition(tp.1)
            .cloned()
            .map(Source::Local)
            .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    };
    if tp.1 < 0 || tp.1 >= topic.info.partitions {
        return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    }
    if !cluster.leads(topic.info.id, tp.1) {
        ctx.broker
            .share
            .evict(&SharePartitionKey::new(group_id, tp.0, tp.1));
        return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
    }
    let log_append_time = ctx
        .broker
        .meta()
        .effective_topic_config(&topic.info.name)
        .is_ok_and(|c| c.message_timestamp_type == skiff_meta::TimestampType::LogAppendTime);
    Ok(Source::Cluster(
        crate::cluster::key(topic.info.id, tp.1),
        log_append_time,
    ))
}

/// One partition's acknowledgement batches, as the request carries them.
struct RawBatch<'a> {
    first: i64,
    last: i64,
    types: &'a [i8],
}

impl<'a> RawBatch<'a> {
    fn new(first: i64, last: i64, types: &'a [i8]) -> Self {
        RawBatch { first, last, types }
    }
}

/// Kafka's `validateAcknowledgementBatches` for one partition, then the batches as the share
/// partition takes them. `max_type`: 4 for v2, 3 before; `renew`: the request's `IsRenewAck`.
fn ack_batches(
    batches: &[RawBatch<'_>],
    max_type: i8,
    renew: bool,
) -> Result<Vec<AckBatch>, String> {
    let mut previous_last: Option<i64> = None;
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let (first, last) = (batch.first, batch.last);
        if first > last {
            return Err(format!("batch {first}-{last} ends before it starts"));
        }
        if previous_last.is_some_and(|prev| first < prev) {
            return Err(format!(
                "batch {first}-{last} starts before the previous one ends"
            ));
        }
        let count = i128::from(last) - i128::from(first) + 1;
        let types = batch.types.len() as i128;
        if types == 0 {
            return Err(format!("batch {first}-{last} has no acknowledge types"));
        }
        if types > 1 && types != count {
            return Err(format!(
                "batch {first}-{last} has {types} acknowledge types, neither one nor one per offset"
            ));
        }
        if let Some(bad) = batch.types.iter().find(|t| **t < 0 || **t > max_type) {
            return Err(format!("acknowledge type {bad} is not valid here"));
        }
        if !renew && batch.types.contains(&AckType::Renew.code()) {
            return Err("a renew acknowledgement in a request that is not a renew one".into());
        }
        let types = batch
            .types
            .iter()
            .map(|t| AckType::from_code(*t).map_err(|e| e.to_string()))
            .collect::<Result<Vec<AckType>, String>>()?;
        out.push(AckBatch {
            first_offset: first,
            last_offset: last,
            types,
        });
        previous_last = Some(last);
    }
    Ok(out)
}

/// The settings, member and session of one request.
struct Who {
    group_id: String,
    member_id: String,
    settings: ShareGroupSettings,
}

/// Applies each partition's acknowledgements; returns the outcome per partition and the last
/// group-log offset written.
fn acknowledge_all(
    ctx: &RequestContext,
    who: &Who,
    partitions: Vec<(TopicPartition, Vec<RawBatch<'_>>)>,
    max_type: i8,
    renew: bool,
) -> (AckResults, Option<i64>) {
    let mut results = AckResults::new();
    let mut written = None;
    let now = now_ms();
    for (tp, raw) in partitions {
        let outcome: Result<(), (ErrorCode, Option<String>)> = (|| {
            if ctx.broker.topic_by_id(tp.0).is_none() {
                return Err((ErrorCode::UNKNOWN_TOPIC_ID, None));
            }
            let batches = ack_batches(&raw, max_type, renew)
                .map_err(|why| (ErrorCode::INVALID_REQUEST, Some(why)))?;
            resolve(ctx, &who.group_id, tp).map_err(|code| (code, None))?;
            if batches.is_empty() {
                return Ok(());
            }
            let key = SharePartitionKey::new(who.group_id.clone(), tp.0, tp.1);
            let end = ctx
                .broker
                .share
                .acknowledge(
                    ctx.broker.share_store(),
                    &key,
                    &who.member_id,
                    &batches,
                    who.settings.share,
                    now,
                )
                .map_err(|e| (e.code, Some(e.message)))?;
            written = written.max(end);
            Ok(())
        })();
        let entry = match outcome {
            Ok(()) => (error_codes::NONE, None),
            Err((code, message)) => (code.code(), message.map(bs)),
        };
        results.insert(tp, entry);
    }
    (results, written)
}

/// Waits until the group log is durable at `end`; acknowledgements that succeeded become
/// KAFKA_STORAGE_ERROR when it is not.
async fn durable(broker: &Broker, end: Option<i64>, acks: &mut AckResults) {
    let Some(end) = end else {
        return;
    };
    if let Err(e) = broker.share_durable(end).await {
        tracing::warn!(error = %e, "share state did not become durable");
        for (code, message) in acks.values_mut() {
            if *code == error_codes::NONE {
                *code = error_codes::KAFKA_STORAGE_ERROR;
                *message = Some(bs("the acknowledgement could not be made durable"));
            }
        }
    }
}

fn lock_timeout_ms(settings: &ShareGroupSettings) -> i32 {
    i32::try_from(settings.share.record_lock_duration_ms).unwrap_or(i32::MAX)
}

// -------------------------------------------------------------------------------------------
// ShareFetch
// -------------------------------------------------------------------------------------------

/// One partition a ShareFetch reads.
struct Target {
    tp: TopicPartition,
    partition: Result<Source, ErrorCode>,
}

/// Cluster mode: what was read for a partition ahead of its acquisition (reads from the object
/// store are waited for before the share partition is locked): the offset read from, and the
/// outcome with the log's start offset.
type Prefetched = std::collections::HashMap<TopicPartition, (i64, ReadOutcome, i64)>;

/// Everything a ShareFetch needs to (re)try its acquisition and answer.
struct Plan {
    who: Who,
    session: SessionKey,
    /// Answer only the partitions with something to say (an existing session).
    incremental: bool,
    targets: Vec<Target>,
    /// Whether records are fetched at all.
    fetching: bool,
    max_records: u32,
    max_bytes: usize,
    min_bytes: usize,
    batch_size: i32,
    mode: AcquireMode,
}

impl Plan {
    fn isolation(&self) -> Isolation {
        if self.who.settings.read_committed {
            Isolation::ReadCommitted
        } else {
            Isolation::ReadUncommitted
        }
    }

    fn key(&self, tp: TopicPartition) -> SharePartitionKey {
        SharePartitionKey::new(self.who.group_id.clone(), tp.0, tp.1)
    }

    /// Where the share partition of `tp` reads next, when it could acquire anything.
    fn next_offset(&self, broker: &Broker, tp: TopicPartition) -> Option<i64> {
        broker
            .share
            .next_fetch_offset(broker.share_store(), &self.key(tp), self.who.settings.share)
            .ok()
            .flatten()
    }

    /// Whether any partition can be read (the others are errors).
    fn has_readable(&self) -> bool {
        self.targets.iter().any(|t| t.partition.is_ok())
    }

    /// Bytes readable now from the partitions' next fetch offsets, up to `min_bytes` each.
    fn readable_bytes(&self, broker: &Broker) -> usize {
        let mut total = 0usize;
        for target in &self.targets {
            let Ok(source) = &target.partition else {
                continue;
            };
            let Some(offset) = self.next_offset(broker, target.tp) else {
                continue;
            };
            match source {
                Source::Local(partition) => {
                    let read = partition.read(offset, self.min_bytes.max(1), self.isolation());
                    total = total.saturating_add(read.records.map_or(0, |r| r.len()));
                }
                // What is known without reading: records past the offset count as MinBytes.
                Source::Cluster(key, _) => {
                    let known = broker.cluster().and_then(|c| c.known.get(key));
                    let upto = known.map_or(0, |k| {
                        if self.who.settings.read_committed {
                            k.last_stable
                        } else {
                            k.high_watermark
                        }
                    });
                    if upto > offset {
                        total = total.saturating_add(self.min_bytes.max(1));
                    }
                }
            }
            if total >= self.min_bytes {
                break;
            }
        }
        total
    }

    /// Cluster mode: reads each partition from its share partition's next fetch offset (up to
    /// the request's byte limit) before [`Plan::attempt`] locks the share partitions.
    async fn prefetch(&self, broker: &Broker) -> Prefetched {
        let mut out = Prefetched::new();
        let Some(cluster) = broker.cluster() else {
            return out;
        };
        if !self.fetching {
            return out;
        }
        for target in &self.targets {
            let Ok(Source::Cluster(key, log_append_time)) = &target.partition else {
                continue;
            };
            let Some(offset) = self.next_offset(broker, target.tp) else {
                continue;
            };
            let read = crate::cluster::fetch::read(
                cluster,
                *key,
                offset,
                self.max_bytes.max(1),
                *log_append_time,
                self.who.settings.read_committed,
            )
            .await;
            let (outcome, log_start) = match read {
                Ok(mut read) => {
                    let mut records = bytes::BytesMut::new();
                    for batch in &read.batches {
                        records.extend_from_slice(batch);
                    }
                    let aborted = read.aborted_transactions();
                    let chunk = LogChunk::parse(records.freeze(), aborted.as_deref());
                    (ReadOutcome::Chunk(chunk), read.log_start)
                }
                Err((ErrorCode::OFFSET_OUT_OF_RANGE, _)) => {
                    let log_start = cluster.known.get(key).map_or(0, |k| k.log_start);
                    (ReadOutcome::OutOfRange { log_start }, log_start)
                }
                Err((code, message)) => {
                    tracing::warn!(error = %message, "a share fetch's read failed");
                    (ReadOutcome::Failed(code), 0)
                }
            };
            out.insert(target.tp, (offset, outcome, log_start));
        }
        out
    }

    /// [`Plan::attempt`], reading ahead first in cluster mode.
    async fn attempt_ahead(&self, broker: &Broker) -> (Vec<(TopicPartition, PartitionData)>, u64) {
        let prefetched = self.prefetch(broker).await;
        self.attempt(broker, prefetched)
    }

    /// One acquisition over every partition, in order. Returns the partitions' data and how
    /// many records were acquired.
    fn attempt(
        &self,
        broker: &Broker,
        mut prefetched: Prefetched,
    ) -> (Vec<(TopicPartition, PartitionData)>, u64) {
        let now = now_ms();
        let isolation = self.isolation();
        let mut out = Vec::with_capacity(self.targets.len());
        let mut budget = self.max_bytes;
        let mut bytes_total = 0usize;
        let mut acquired_total: u64 = 0;
        for target in &self.targets {
            let mut data = PartitionData {
                partition_index: target.tp.1,
                records: Some(Bytes::new()),
                ..Default::default()
            };
            match &target.partition {
                Err(code) => data.error_code = code.code(),
                // Not fetching: only the partitions in error are answered, as in Kafka.
                Ok(_) if !self.fetching => continue,
                Ok(source) => {
                    let left = u64::from(self.max_records).saturating_sub(acquired_total);
                    let want = if budget > 0 || bytes_total == 0 {
                        budget.max(1)
                    } else {
                        0
                    };
                    if left > 0 && want > 0 {
                        let mut ahead = prefetched.remove(&target.tp);
                        let log_start = match (source, &ahead) {
                            (Source::Local(partition), _) => partition.log_start_offset(),
                            (Source::Cluster(..), Some((_, _, log_start))) => *log_start,
                            (Source::Cluster(..), None) => 0,
                        };
                        let request = AcquireRequest {
                            member: &self.who.member_id,
                            config: self.who.settings.share,
                            max_records: u32::try_from(left).unwrap_or(u32::MAX),
                            mode: self.mode,
                            batch_size: self.batch_size,
                            log_start,
                            now_ms: now,
                        };
                        let mut read = |offset: i64| match source {
                            Source::Local(partition) => {
                                let read = partition.read(offset, want, isolation);
                                match read.records {
                                    Ok(records) => ReadOutcome::Chunk(LogChunk::parse(
                                        records,
                                        read.aborted.as_deref(),
                                    )),
                                    Err(ErrorCode::OFFSET_OUT_OF_RANGE) => {
                                        ReadOutcome::OutOfRange {
                                            log_start: read.log_start_offset,
                                        }
                                    }
                                    Err(code) => ReadOutcome::Failed(code),
                                }
                            }
                            // The read made ahead, when it is of this offset; nothing now
                            // otherwise (the next attempt reads from where the share
                            // partition stands then).
                            Source::Cluster(..) => match ahead.take() {
                                Some((at, outcome, _)) if at == offset => outcome,
                                _ => ReadOutcome::Chunk(LogChunk::parse(Bytes::new(), None)),
                            },
                        };
                        match broker.share.acquire(
                            broker.share_store(),
                            &self.key(target.tp),
                            &request,
                            &mut read,
                        ) {
                            Ok(acquired) => {
                                let n = acquired.records.len();
                                bytes_total = bytes_total.saturating_add(n);
                                budget = budget.saturating_sub(n);
                                acquired_total = acquired_total.saturating_add(acquired.count);
                                data.acquired_records = acquired
                                    .ranges
                                    .iter()
                                    .map(|r| AcquiredRecords {
                                        first_offset: r.first_offset,
                                        last_offset: r.last_offset,
                                        delivery_count: r.delivery_count,
                                        ..Default::default()
                                    })
                                    .collect();
                                data.records = Some(acquired.records);
                            }
                            Err(e) => {
                                data.error_code = e.code.code();
                                data.error_message = Some(bs(e.message));
                            }
                        }
                    }
                }
            }
            out.push((target.tp, data));
        }
        (out, acquired_total)
    }

    /// The response: the partitions to answer (all for a new session, the changed ones for an
    /// existing one) with the acknowledgement outcomes merged in.
    fn respond(
        &self,
        broker: &Broker,
        fetched: Vec<(TopicPartition, PartitionData)>,
        mut acks: AckResults,
    ) -> Response {
        let mut answered: Vec<(TopicPartition, PartitionData)> = if self.incremental {
            let mut sessions = broker.share.lock_sessions();
            fetched
                .into_iter()
                .filter(|(tp, data)| {
                    let has_records = data.records.as_ref().is_some_and(|r| !r.is_empty());
                    let has_error = data.error_code != error_codes::NONE;
                    sessions.must_answer(&self.session, *tp, has_records, has_error)
                })
                .collect()
        } else {
            fetched
        };
        for (tp, data) in &mut answered {
            if let Some((code, message)) = acks.shift_remove(tp) {
                data.acknowledge_error_code = code;
                data.acknowledge_error_message = message;
            }
        }
        for (tp, (code, message)) in acks {
            answered.push((
                tp,
                PartitionData {
                    partition_index: tp.1,
                    acknowledge_error_code: code,
                    acknowledge_error_message: message,
                    records: Some(Bytes::new()),
                    ..Default::default()
                },
            ));
        }
        let mut topics: IndexMap<Uuid, Vec<PartitionData>> = IndexMap::new();
        for ((topic_id, _), data) in answered {
            topics.entry(topic_id).or_default().push(data);
        }
        Response::ShareFetch(ShareFetchResponse {
            acquisition_lock_timeout_ms: lock_timeout_ms(&self.who.settings),
            responses: topics
                .into_iter()
                .map(|(topic_id, partitions)| ShareFetchableTopicResponse {
                    topic_id,
                    partitions,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }
}

/// The request's partitions as (topic ID, partition), first appearance kept.
fn request_partitions(request: &ShareFetchRequest) -> Vec<TopicPartition> {
    let mut seen = IndexMap::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            seen.insert((topic.topic_id, p.partition_index), ());
        }
    }
    seen.into_keys().collect()
}

pub fn share_fetch(ctx: &RequestContext, request: ShareFetchRequest) -> Reply {
    let group_id = request.group_id.as_deref().unwrap_or_default().to_string();
    let member_id = request.member_id.as_deref().unwrap_or_default().to_string();
    if !ctx.authorized(AclOperation::Read, ResourceType::Group, &group_id) {
        return fetch_error(ErrorCode::GROUP_AUTHORIZATION_FAILED, None).into();
    }
    if !member_id_valid(&member_id) {
        return fetch_error(
            ErrorCode::INVALID_REQUEST,
            Some("Invalid member id in the request."),
        )
        .into();
    }
    if super::groups::names_anothers_member(ctx, &group_id, &member_id, None) {
        return fetch_error(ErrorCode::UNKNOWN_MEMBER_ID, Some(ANOTHERS_MEMBER)).into();
    }
    let renew = ctx.version >= 2 && request.is_renew_ack;
    if renew {
        let mut why = String::new();
        for (name, value) in [
            ("maxBytes", request.max_bytes),
            ("minBytes", request.min_bytes),
            ("maxRecords", request.max_records),
            ("maxWaitMs", request.max_wait_ms),
        ] {
            if value != 0 {
                why.push_str(&format!("{name} must be set to 0, "));
            }
        }
        if !why.is_empty() {
            why.push_str("if isRenewAck is true.");
            return fetch_error(ErrorCode::INVALID_REQUEST, Some(&why)).into();
        }
    }
    let mode = match AcquireMode::from_code(request.share_acquire_mode) {
        Ok(mode) => mode,
        Err(e) => return fetch_error(ErrorCode::INVALID_REQUEST, Some(&e.to_string())).into(),
    };
    ctx.broker.share_events();
    let epoch = request.share_session_epoch;
    let has_acks = request
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .any(|p| !p.acknowledgement_batches.is_empty());
    let session = SessionKey::new(group_id.clone(), member_id.clone());
    // Cluster mode: the group's coordinator may be another broker (Kafka checks nothing here).
    if epoch == crate::share::session::INITIAL_EPOCH
        && !has_acks
        && ctx.broker.cluster().is_none()
        && let Err(e) = ctx.broker.groups.share_member_check(&group_id, &member_id)
    {
        return fetch_error(e.code, Some(&e.message)).into();
    }
    let add = request_partitions(&request);
    let forget: Vec<TopicPartition> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    let max_wait =
        Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    let context = ctx.broker.share.lock_sessions().fetch(
        &session,
        epoch,
        &add,
        &forget,
        has_acks,
        ctx.connection_id,
    );
    let context = match context {
        Ok(context) => context,
        Err(crate::share::session::SessionError::LimitReached) => {
            // As Kafka: the refusal waits out MaxWaitMs, so that the client does not spin.
            let mut shutdown = ctx.shutdown.clone();
            return Reply::Later(Box::pin(async move {
                tokio::select! {
                    _ = tokio::time::sleep(max_wait) => {}
                    _ = crate::shutdown::stopped(&mut shutdown) => {}
                }
                fetch_error(ErrorCode::SHARE_SESSION_LIMIT_REACHED, None)
            }));
        }
        Err(e) => return fetch_error(e.code(), Some(&e.to_string())).into(),
    };
    let who = Who {
        settings: ctx.broker.groups.share_settings(&group_id),
        group_id,
        member_id,
    };

    // Acknowledgements first (every partition of the request has an outcome when any has one).
    let (mut acks, mut written) = if has_acks {
        let partitions = request
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    let raw = p.acknowledgement_batches.iter().map(|b| {
                        RawBatch::new(b.first_offset, b.last_offset, &b.acknowledge_types)
                    });
                    ((t.topic_id, p.partition_index), raw.collect())
                })
            })
            .collect();
        let max_type = max_ack_type(ctx.version);
        acknowledge_all(ctx, &who, partitions, max_type, renew)
    } else {
        (AckResults::new(), None)
    };

    let (partitions, incremental) = match context {
        Context::Full { partitions } => (partitions, false),
        Context::Incremental { partitions } => (partitions, true),
        Context::Final => (Vec::new(), false),
    };
    if epoch == FINAL_EPOCH {
        written = written.max(
            ctx.broker
                .share
                .close_session(ctx.broker.share_store(), &session),
        );
    }
    let group_id = who.group_id.clone();
    let mut targets: Vec<Target> = partitions
        .into_iter()
        .map(|tp| Target {
            tp,
            partition: resolve(ctx, &group_id, tp),
        })
        .collect();
    if renew {
        // KIP-1222: a renewing ShareFetch fetches nothing and answers its acknowledgements only.
        targets.clear();
    }
    // Round robin over the session's partitions, by epoch, as Kafka rotates them.
    if !targets.is_empty() {
        let shift = usize::try_from(epoch.max(0)).unwrap_or(0) % targets.len();
        targets.rotate_left(shift);
    }
    let max_bytes =
        usize::try_from(request.max_bytes.min(ctx.broker.config.fetch_max_bytes)).unwrap_or(0);
    let max_records = u32::try_from(request.max_records).unwrap_or(0);
    let plan = Plan {
        who,
        session,
        incremental,
        fetching: !renew && max_records > 0 && max_bytes > 0,
        targets,
        max_records,
        max_bytes,
        min_bytes: usize::try_from(request.min_bytes)
            .unwrap_or(0)
            .min(max_bytes),
        batch_size: request.batch_size,
        mode,
    };

    let ready =
        !plan.fetching || plan.min_bytes <= 1 || plan.readable_bytes(&ctx.broker) >= plan.min_bytes;
    let may_wait = plan.fetching && plan.has_readable() && !max_wait.is_zero();
    // Without a wait ahead, what there is now is taken even below MinBytes (as Kafka's delayed
    // share fetch does when it expires).
    let attempt_now = ready || !may_wait;
    let broker = Arc::clone(&ctx.broker);
    let shutdown = ctx.shutdown.clone();
    if broker.cluster().is_some() {
        // Cluster mode reads the object store: everything after the checks is asynchronous.
        return Reply::Later(Box::pin(async move {
            let (fetched, acquired) = if attempt_now {
                plan.attempt_ahead(&broker).await
            } else {
                (Vec::new(), 0)
            };
            let fetched = if answered_at_once(&fetched, acquired, may_wait, ready) {
                fetched
            } else {
                long_poll(&broker, &plan, max_wait, shutdown).await
            };
            durable(&broker, written, &mut acks).await;
            plan.respond(&broker, fetched, acks)
        }));
    }
    let (fetched, acquired) = if attempt_now {
        plan.attempt(&broker, Prefetched::new())
    } else {
        (Vec::new(), 0)
    };
    let done = answered_at_once(&fetched, acquired, may_wait, ready);
    if done && written.is_none() {
        return Reply::Now(plan.respond(&broker, fetched, acks));
    }
    Reply::Later(Box::pin(async move {
        let fetched = if done {
            fetched
        } else {
            long_poll(&broker, &plan, max_wait, shutdown).await
        };
        durable(&broker, written, &mut acks).await;
        plan.respond(&broker, fetched, acks)
    }))
}

/// Whether a first attempt answers the fetch: something acquired, no wait allowed, or (as
/// Kafka) every partition in error.
fn answered_at_once(
    fetched: &[(TopicPartition, PartitionData)],
    acquired: u64,
    may_wait: bool,
    ready: bool,
) -> bool {
    let all_failed = fetched
        .iter()
        .all(|(_, data)| data.error_code != error_codes::NONE);
    acquired > 0 || !may_wait || (ready && all_failed)
}

/// Waits for records to acquire (appends to the partitions, records coming back) until
/// `max_wait` passes or the broker stops, then answers with what it acquired.
async fn long_poll(
    broker: &Arc<Broker>,
    plan: &Plan,
    max_wait: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> Vec<(TopicPartition, PartitionData)> {
    let deadline = tokio::time::Instant::now() + max_wait;
    let mut returned = broker.share.subscribe();
    let mut appends: Vec<watch::Receiver<i64>> = plan
        .targets
        .iter()
        .filter_map(|t| match &t.partition {
            Ok(Source::Local(p)) => Some(p.watch_end_offset()),
            _ => None,
        })
        .collect();
    // Cluster mode: commits anywhere in the cluster (this broker's, and the others' through
    // NOTIFY).
    let mut commits = broker
        .cluster()
        .filter(|_| {
            plan.targets
                .iter()
                .any(|t| matches!(t.partition, Ok(Source::Cluster(..))))
        })
        .map(|c| c.commits.subscribe());
    loop {
        let any_append = async {
            if appends.is_empty() && commits.is_none() {
                std::future::pending::<()>().await;
            }
            let commit = async {
                match commits.as_mut() {
                    Some(c) => {
                        let _ = c.changed().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let append = async {
                if appends.is_empty() {
                    std::future::pending::<()>().await;
                }
                let waits = appends.iter_mut().map(|s| Box::pin(s.changed()));
                let _ = futures::future::select_all(waits).await;
            };
            tokio::select! {
                _ = commit => {}
                _ = append => {}
            }
        };
        let finished = tokio::select! {
            woken = tokio::time::timeout_at(deadline, any_append) => woken.is_err(),
            changed = returned.changed() => changed.is_err(),
            _ = crate::shutdown::stopped(&mut shutdown) => true,
        };
        broker.share_events();
        if finished || plan.readable_bytes(broker) >= plan.min_bytes.max(1) {
            let (fetched, acquired) = plan.attempt_ahead(broker).await;
            if acquired > 0 || finished {
                return fetched;
            }
        }
    }
}

// -------------------------------------------------------------------------------------------
// ShareAcknowledge
// -------------------------------------------------------------------------------------------

pub fn share_acknowledge(ctx: &RequestContext, request: ShareAcknowledgeRequest) -> Reply {
    let group_id = request.group_id.as_deref().unwrap_or_default().to_string();
    let member_id = request.member_id.as_deref().unwrap_or_default().to_string();
    if !ctx.authorized(AclOperation::Read, ResourceType::Group, &group_id) {
        return ack_error(ErrorCode::GROUP_AUTHORIZATION_FAILED, None).into();
    }
    if !member_id_valid(&member_id) {
        return ack_error(
            ErrorCode::INVALID_REQUEST,
            Some("Invalid member id in the request."),
        )
        .into();
    }
    if super::groups::names_anothers_member(ctx, &group_id, &member_id, None) {
        return ack_error(ErrorCode::UNKNOWN_MEMBER_ID, Some(ANOTHERS_MEMBER)).into();
    }
    ctx.broker.share_events();
    let epoch = request.share_session_epoch;
    let session = SessionKey::new(group_id.clone(), member_id.clone());
    if let Err(e) = ctx
        .broker
        .share
        .lock_sessions()
        .acknowledge(&session, epoch)
    {
        return ack_error(e.code(), Some(&e.to_string())).into();
    }
    let who = Who {
        settings: ctx.broker.groups.share_settings(&group_id),
        group_id,
        member_id,
    };
    let renew = ctx.version >= 2 && request.is_renew_ack;
    let max_type = max_ack_type(ctx.version);
    let partitions = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                let raw = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| RawBatch::new(b.first_offset, b.last_offset, &b.acknowledge_types));
                ((t.topic_id, p.partition_index), raw.collect())
            })
        })
        .collect();
    let (mut acks, mut written) = acknowledge_all(ctx, &who, partitions, max_type, renew);
    if epoch == FINAL_EPOCH {
        written = written.max(
            ctx.broker
                .share
                .close_session(ctx.broker.share_store(), &session),
        );
    }
    let lock_ms = lock_timeout_ms(&who.settings);
    let respond = move |acks: AckResults| {
        let mut topics: IndexMap<Uuid, Vec<AckPartitionData>> = IndexMap::new();
        for ((topic_id, partition), (code, message)) in acks {
            topics.entry(topic_id).or_default().push(AckPartitionData {
                partition_index: partition,
                error_code: code,
                error_message: message,
                ..Default::default()
            });
        }
        Response::ShareAcknowledge(ShareAcknowledgeResponse {
            acquisition_lock_timeout_ms: lock_ms,
            responses: topics
                .into_iter()
                .map(|(topic_id, partitions)| ShareAcknowledgeTopicResponse {
                    topic_id,
                    partitions,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    };
    if written.is_none() {
        return Reply::Now(respond(acks));
    }
    let broker = Arc::clone(&ctx.broker);
    Reply::Later(Box::pin(async move {
        durable(&broker, written, &mut acks).await;
        respond(acks)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(first: i64, last: i64, types: &[i8]) -> RawBatch<'_> {
        RawBatch { first, last, types }
    }

    #[test]
    fn acknowledgement_batches_are_checked_as_kafka_checks_them() {
        let ok = ack_batches(&[raw(0, 4, &[1]), raw(5, 6, &[2, 3])], 3, false).expect("valid");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].types, vec![AckType::Release, AckType::Reject]);
        for bad in [
            vec![raw(5, 4, &[1])],
            vec![raw(0, 5, &[1]), raw(3, 7, &[1])],
            vec![raw(0, 1, &[])],
            vec![raw(0, 2, &[1, 1])],
            vec![raw(0, 0, &[5])],
            vec![raw(0, 0, &[-1])],
            vec![raw(i64::MIN, i64::MAX, &[1, 1])],
        ] {
            assert!(ack_batches(&bad, 4, true).is_err(), "accepted");
        }
        // Renew (4): only in a v2 renew request.
        assert!(ack_batches(&[raw(0, 0, &[4])], 3, false).is_err());
        assert!(ack_batches(&[raw(0, 0, &[4])], 4, false).is_err());
        assert!(ack_batches(&[raw(0, 0, &[4])], 4, true).is_ok());
        // Kafka lets a batch start at the previous one's last offset (the share partition then
        // refuses it); a million offsets with one type is one batch, no allocation per offset.
        assert!(ack_batches(&[raw(0, 5, &[1]), raw(5, 7, &[1])], 3, false).is_ok());
        let huge = ack_batches(&[raw(0, 999_999, &[1])], 3, false).expect("valid");
        assert_eq!(huge[0].types.len(), 1);
        assert!(member_id_valid("m"));
        assert!(!member_id_valid(""));
        assert!(!member_id_valid(&"x".repeat(37)));
    }
}
