//! Fetch v4-17: whole batches straight from segment bytes. A fetch that finds fewer than
//! `min_bytes` waits (up to `max_wait_ms`) for an append to one of its partitions, woken by the
//! partitions' end-offset signals rather than by polling.
//!
//! Incremental fetch sessions (KIP-227) are kept by [`crate::fetch_session`]: this handler asks
//! it how to serve each request, reads the partitions that implies, and lets it trim the
//! response of an incremental fetch to the partitions with something new.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use skiff_log::LogError;
use skiff_protocol::generated::FetchRequest;
use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic};
use skiff_protocol::generated::fetch_response::{
    AbortedTransaction, FetchResponse, FetchableTopicResponse, PartitionData,
};
use skiff_protocol::{ByteString, Response, Uuid, error_codes};
use skiff_records::BatchHeader;
use tokio::sync::watch;

use super::{Reply, RequestContext};
use crate::fetch_session::{self, FetchContext, PartitionKey, SessionPartition};
use crate::clock::now_ms;
use crate::state::{Broker, Partition};

/// Longest wait a client may ask for; longer requests are cut to this.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// One requested partition, resolved once.
struct Target {
    topic: usize,
    partition: Result<Arc<Partition>, i16>,
    index: i32,
    fetch_offset: i64,
    max_bytes: usize,
    leader_epoch: i32,
}

/// Everything needed to (re)read the response.
struct Plan {
    topics: Vec<(ByteString, Uuid)>,
    targets: Vec<Target>,
    max_bytes: usize,
    read_committed: bool,
    /// How the fetch session (if any) serves this request.
    session: FetchContext,
}

/// A random session ID (0, meaning none, if the system has no randomness to give).
fn random_session_id() -> i32 {
    getrandom::u32().map_or(0, |v| (v >> 1) as i32)
}

pub fn handle(ctx: &RequestContext, mut request: FetchRequest) -> Reply {
    let version = ctx.version;
    // Sessionless fetches (librdkafka's) never take the shared session cache's lock.
    let begun = if fetch_session::is_sessionless(&request, version) {
        Ok(FetchContext::Full { session_id: 0 })
    } else {
        ctx.broker
            .lock_fetch_sessions()
            .begin(&request, version, now_ms(), random_session_id)
    };
    let session = match begun {
        Ok(session) => session,
        Err(code) => {
            return Reply::Now(Response::Fetch(FetchResponse {
                error_code: code,
                session_id: 0,
                ..Default::default()
            }));
        }
    };
    let topics = match &session {
        FetchContext::Full { .. } => std::mem::take(&mut request.topics),
        FetchContext::Incremental { partitions, .. } => session_topics(partitions),
    };
    let plan = plan(&ctx.broker, version, &topics, &request, session);
    let (response, bytes, errors) = read(&plan);
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let max_wait =
        Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    if bytes >= min_bytes || errors || max_wait.is_zero() || plan.targets.is_empty() {
        return Reply::Now(complete(&ctx.broker, &plan, response));
    }
    Reply::Later(Box::pin(long_poll(
        Arc::clone(&ctx.broker),
        plan,
        min_bytes,
        max_wait,
        ctx.shutdown.clone(),
    )))
}

/// The session's partitions as request topics, in session order: consecutive partitions of one
/// topic share an entry, so a topic can appear more than once (as in Kafka's own responses).
fn session_topics(partitions: &[(PartitionKey, SessionPartition)]) -> Vec<FetchTopic> {
    let mut topics: Vec<(PartitionKey, FetchTopic)> = Vec::new();
    for (key, p) in partitions {
        let partition = FetchPartition {
            partition: key.1,
            fetch_offset: p.fetch_offset,
            partition_max_bytes: p.max_bytes,
            current_leader_epoch: p.leader_epoch,
            ..Default::default()
        };
        match topics.last_mut() {
            Some((last, topic)) if last.0 == key.0 => topic.partitions.push(partition),
            _ => topics.push((
                key.clone(),
                FetchTopic {
                    topic: p.topic.clone(),
                    topic_id: p.topic_id,
                    partitions: vec![partition],
                    ..Default::default()
                },
            )),
        }
    }
    topics.into_iter().map(|(_, topic)| topic).collect()
}

/// The response as sent: the session sets its ID and, for an incremental fetch, keeps only the
/// partitions with something new. Runs once per request, on the response that goes out.
fn complete(broker: &Broker, plan: &Plan, mut response: FetchResponse) -> Response {
    if plan.session != (FetchContext::Full { session_id: 0 }) {
        broker
            .lock_fetch_sessions()
            .finish(&plan.session, &mut response);
    }
    Response::Fetch(response)
}

async fn long_poll(
    broker: Arc<Broker>,
    plan: Plan,
    min_bytes: usize,
    max_wait: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> Response {
    let deadline = tokio::time::Instant::now() + max_wait;
    let mut signals: Vec<watch::Receiver<i64>> = plan
        .targets
        .iter()
        .filter_map(|t| t.partition.as_ref().ok().map(|p| p.end_offset.subscribe()))
        .collect();
    loop {
        let any_append = async {
            let waits = signals.iter_mut().map(|s| Box::pin(s.changed()));
            let _ = futures::future::select_all(waits).await;
        };
        // A shutdown ends the wait like a timeout: the client gets what there is now.
        let finished = tokio::select! {
            woken = tokio::time::timeout_at(deadline, any_append) => woken.is_err(),
            _ = crate::shutdown::stopped(&mut shutdown) => true,
        };
        let (response, bytes, errors) = read(&plan);
        if finished || bytes >= min_bytes || errors {
            return complete(&broker, &plan, response);
        }
    }
}

fn plan(
    broker: &Broker,
    version: i16,
    fetch_topics: &[FetchTopic],
    request: &FetchRequest,
    session: FetchContext,
) -> Plan {
    let by_id = version >= 13;
    let mut topics = Vec::with_capacity(fetch_topics.len());
    let mut targets = Vec::new();
    for (t, fetch_topic) in fetch_topics.iter().enumerate() {
        let topic = if by_id {
            broker.topic_by_id(fetch_topic.topic_id)
        } else {
            broker.topic_by_name(&fetch_topic.topic)
        };
        topics.push((fetch_topic.topic.clone(), fetch_topic.topic_id));
        let missing = if by_id {
            error_codes::UNKNOWN_TOPIC_ID
        } else {
            error_codes::UNKNOWN_TOPIC_OR_PARTITION
        };
        for p in &fetch_topic.partitions {
            let partition = match &topic {
                None => Err(missing),
                Some(topic) => topic
                    .partition(p.partition)
                    .cloned()
                    .ok_or(error_codes::UNKNOWN_TOPIC_OR_PARTITION),
            };
            targets.push(Target {
                topic: t,
                partition,
                index: p.partition,
                fetch_offset: p.fetch_offset,
                max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0),
                leader_epoch: p.current_leader_epoch,
            });
        }
    }
    Plan {
        topics,
        targets,
        // The broker's `fetch.max.bytes` caps every response, whatever the client asks (before
        // v3 a request has no limit of its own).
        max_bytes: {
            let asked = if version >= 3 {
                request.max_bytes
            } else {
                i32::MAX
            };
            usize::try_from(asked.min(broker.config.fetch_max_bytes)).unwrap_or(0)
        },
        read_committed: request.isolation_level == 1,
        session,
    }
}

/// The batches of `records` that start below `stable` (the last stable offset), and the offset
/// after the last of them. A batch never straddles the last stable offset: it is the base
/// offset of the first batch of the oldest open transaction, or the log end.
fn stable_prefix(records: Bytes, stable: i64) -> (Bytes, i64) {
    let mut position = 0usize;
    let mut next = i64::MIN;
    // Headers only (no CRC pass); the walk stops at the first batch it cannot read.
    while let Some(Ok(header)) = records.get(position..).map(BatchHeader::parse) {
        if header.base_offset >= stable {
            break;
        }
        next = header.last_offset().saturating_add(1);
        // A trailing partial batch (cut by max_bytes) is returned as it is.
        position = position
            .saturating_add(header.total_len())
            .min(records.len());
    }
    (records.slice(..position), next)
}

/// Reads every target once. Returns the response, the bytes of records in it, and whether any
/// partition has an error (which ends a long poll at once).
fn read(plan: &Plan) -> (FetchResponse, usize, bool) {
    let mut topics: Vec<FetchableTopicResponse> = plan
        .topics
        .iter()
        .map(|(name, id)| FetchableTopicResponse {
            topic: name.clone(),
            topic_id: *id,
            partitions: Vec::new(),
            ..Default::default()
        })
        .collect();
    let mut budget = plan.max_bytes;
    let mut total = 0usize;
    let mut any_error = false;
    for target in &plan.targets {
        let mut data = PartitionData {
            partition_index: target.index,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            aborted_transactions: plan.read_committed.then(Vec::new),
            records: Some(Bytes::new()),
            ..Default::default()
        };
        match &target.partition {
            Err(code) => {
                data.error_code = *code;
                any_error = true;
            }
            Ok(_) if target.leader_epoch > 0 => {
                // Skiff's single node always leads with epoch 0.
                data.error_code = error_codes::UNKNOWN_LEADER_EPOCH;
                any_error = true;
            }
            Ok(partition) => {
                let log = partition.lock_log();
                let end = log.log_end_offset();
                let stable = partition.last_stable_offset(end);
                data.high_watermark = end;
                data.last_stable_offset = stable;
                data.log_start_offset = log.log_start_offset();
                // The first batch is returned even if larger than the budget (KIP-74); after the
                // budget is spent, partitions get no records.
                let limit = target.max_bytes.min(budget);
                let mut aborted_range = None;
                if limit > 0 || total == 0 {
                    let read = if plan.read_committed
                        && target.fetch_offset >= stable
                        && target.fetch_offset <= end
                        && target.fetch_offset >= data.log_start_offset
                    {
                        // Nothing stable to read yet (an open transaction starts here).
                        Ok(Bytes::new())
                    } else {
                        log.read(target.fetch_offset, limit.max(1)).map(|result| {
                            // Without open or aborted transactions (the usual case) the
                            // records need no walk: all lie below the last stable offset.
                            if plan.read_committed
                                && (stable < end || partition.has_aborted_transactions())
                            {
                                let (records, next) = stable_prefix(result.records, stable);
                                if !records.is_empty() && partition.has_aborted_transactions() {
                                    aborted_range = Some((target.fetch_offset, next));
                                }
                                records
                            } else {
                                result.records
                            }
                        })
                    };
                    match read {
                        Ok(records) => {
                            let n = records.len();
                            total += n;
                            budget = budget.saturating_sub(n);
                            data.records = Some(records);
                        }
                        Err(LogError::OffsetOutOfRange { .. }) => {
                            data.error_code = error_codes::OFFSET_OUT_OF_RANGE;
                            any_error = true;
                        }
                        Err(e) => {
                            tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "read failed");
                            data.error_code = error_codes::KAFKA_STORAGE_ERROR;
                            any_error = true;
                        }
                    }
                }
                drop(log);
                // The producers lock comes before the log lock everywhere, so only now.
                if let Some((from, until)) = aborted_range {
                    data.aborted_transactions = Some(
                        partition
                            .lock_producers()
                            .aborted_between(from, until)
                            .into_iter()
                            .map(|a| AbortedTransaction {
                                producer_id: a.producer_id,
                                first_offset: a.first_offset,
                                ..Default::default()
                            })
                            .collect(),
                    );
                }
            }
        }
        if let Some(topic) = topics.get_mut(target.topic) {
            topic.partitions.push(data);
        }
    }
    (
        FetchResponse {
            session_id: 0,
            responses: topics,
            ..Default::default()
        },
        total,
        any_error,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batches(spans: &[(i64, usize)]) -> Bytes {
        let mut out = Vec::new();
        for &(base, count) in spans {
            let mut b = skiff_records::RecordBatchBuilder::new().base_offset(base);
            for _ in 0..count {
                b.append(1, None, Some(b"v"), &[]).expect("append");
            }
            out.extend_from_slice(b.build().expect("batch").as_bytes());
        }
        Bytes::from(out)
    }

    #[test]
    fn the_stable_prefix_stops_at_the_first_batch_at_or_past_the_last_stable_offset() {
        let all = batches(&[(0, 2), (2, 3), (5, 1)]);
        let (prefix, next) = stable_prefix(all.clone(), 5);
        assert_eq!(prefix, batches(&[(0, 2), (2, 3)]));
        assert_eq!(next, 5);
        let (prefix, next) = stable_prefix(all.clone(), i64::MAX);
        assert_eq!((prefix, next), (all.clone(), 6));
        let (prefix, next) = stable_prefix(all.clone(), 0);
        assert!(prefix.is_empty());
        assert_eq!(next, i64::MIN);
        // A trailing partial batch (max_bytes cut it) below the limit is kept as it is.
        let cut = all.slice(..all.len() - 3);
        let (prefix, next) = stable_prefix(cut.clone(), i64::MAX);
        assert_eq!((prefix, next), (cut, 6));
    }

    proptest::proptest! {
        /// Whatever bytes a segment read returns, the prefix is a prefix and nothing panics.
        #[test]
        fn any_bytes_give_a_prefix(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256), stable in proptest::num::i64::ANY) {
            let bytes = Bytes::from(bytes);
            let (prefix, _) = stable_prefix(bytes.clone(), stable);
            proptest::prop_assert!(bytes.starts_with(&prefix));
        }
    }
}
