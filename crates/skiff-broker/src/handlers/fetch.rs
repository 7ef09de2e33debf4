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
use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_protocol::generated::FetchRequest;
use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic};
use skiff_protocol::generated::fetch_response::{
    AbortedTransaction, FetchResponse, FetchableTopicResponse, PartitionData,
};
use skiff_protocol::{ByteString, ErrorCode, Response, Uuid, error_codes};
use tokio::sync::watch;

use super::{Reply, RequestContext};
use crate::clock::now_ms;
use crate::fetch_session::{self, FetchContext, PartitionKey, SessionPartition};
use crate::partition::{Isolation, Partition, PartitionRead};
use crate::state::Broker;

/// Longest wait a client may ask for; longer requests are cut to this.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// Where a requested partition's records are.
enum Source {
    /// A partition of this broker's log.
    Local(Arc<Partition>),
    /// A partition in the cluster's storage; `true` when its topic stamps `LogAppendTime`.
    Cluster(skiff_cluster::commit::PartitionKey, bool),
}

/// One requested partition, resolved once.
struct Target {
    topic: usize,
    partition: Result<Source, ErrorCode>,
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
    /// The partitions' leader epoch (each target's `CurrentLeaderEpoch` is checked against it).
    leader_epoch: i32,
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
                error_code: code.code(),
                session_id: 0,
                ..Default::default()
            }));
        }
    };
    let topics = match &session {
        FetchContext::Full { .. } => std::mem::take(&mut request.topics),
        FetchContext::Incremental { partitions, .. } => session_topics(partitions),
    };
    let readable = |topic: &str| ctx.authorized(AclOperation::Read, ResourceType::Topic, topic);
    let plan = plan(&ctx.broker, version, &topics, &request, session, readable);
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let max_wait =
        Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    if let Some(cluster) = ctx.broker.cluster() {
        return Reply::Later(Box::pin(cluster_fetch(
            Arc::clone(&ctx.broker),
            Arc::clone(cluster),
            plan,
            min_bytes,
            max_wait,
            ctx.shutdown.clone(),
        )));
    }
    let (response, bytes, errors) = read(&plan);
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
        .filter_map(|t| match &t.partition {
            Ok(Source::Local(p)) => Some(p.watch_end_offset()),
            _ => None,
        })
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

/// Resolves the requested partitions; a topic the request may not READ (`readable`) is answered
/// TOPIC_AUTHORIZATION_FAILED, whether it exists or not.
fn plan(
    broker: &Broker,
    version: i16,
    fetch_topics: &[FetchTopic],
    request: &FetchRequest,
    session: FetchContext,
    readable: impl Fn(&str) -> bool,
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
            ErrorCode::UNKNOWN_TOPIC_ID
        } else {
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        };
        let name = match &topic {
            Some(topic) => Some(topic.info.name.as_str()),
            None if by_id => None,
            None => Some(&*fetch_topic.topic),
        };
        let denied = name.is_some_and(|name| !readable(name));
        let log_append_time = match (&topic, broker.cluster()) {
            (Some(topic), Some(_)) => broker
                .meta()
                .effective_topic_config(&topic.info.name)
                .is_ok_and(|c| {
                    c.message_timestamp_type == skiff_meta::TimestampType::LogAppendTime
                }),
            _ => false,
        };
        for p in &fetch_topic.partitions {
            let partition = match (&topic, broker.cluster()) {
                _ if denied => Err(ErrorCode::TOPIC_AUTHORIZATION_FAILED),
                (None, _) => Err(missing),
                (Some(topic), Some(cluster)) => {
                    if p.partition < 0 || p.partition >= topic.info.partitions {
                        Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
                    } else if !cluster.leads(topic.info.id, p.partition) {
                        Err(ErrorCode::NOT_LEADER_OR_FOLLOWER)
                    } else {
                        Ok(Source::Cluster(
                            crate::cluster::key(topic.info.id, p.partition),
                            log_append_time,
                        ))
                    }
                }
                (Some(topic), None) => topic
                    .partition(p.partition)
                    .cloned()
                    .map(Source::Local)
                    .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
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
        leader_epoch: broker.leader_epoch(),
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

/// Reads every target once. Returns the response, the bytes of records in it, and whether any
/// partition has an error (which ends a long poll at once).
fn read(plan: &Plan) -> (FetchResponse, usize, bool) {
    let isolation = if plan.read_committed {
        Isolation::ReadCommitted
    } else {
        Isolation::ReadUncommitted
    };
    assemble(plan, |_, source, offset, want| match source {
        Source::Local(partition) => partition.read(offset, want, isolation),
        // Cluster partitions are read by `cluster_fetch`, never here.
        Source::Cluster(..) => failed_read(ErrorCode::NOT_LEADER_OR_FOLLOWER),
    })
}

/// Kafka's current-leader-epoch check of a partition of the fetch: FENCED_LEADER_EPOCH below
/// the partition's epoch, UNKNOWN_LEADER_EPOCH above it (-1 is not checked).
fn epoch_error(target: &Target, plan: &Plan) -> Option<ErrorCode> {
    super::leader_epoch::current_epoch_error(target.leader_epoch, plan.leader_epoch)
}

/// A read that answers `code` for its partition.
fn failed_read(code: ErrorCode) -> PartitionRead {
    PartitionRead {
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        records: Err(code),
        aborted: None,
    }
}

/// Builds the response from one read per target (`read_one(index, source, offset, want)`),
/// within the request's byte budget.
fn assemble(
    plan: &Plan,
    mut read_one: impl FnMut(usize, &Source, i64, usize) -> PartitionRead,
) -> (FetchResponse, usize, bool) {
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
    for (i, target) in plan.targets.iter().enumerate() {
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
                data.error_code = code.code();
                any_error = true;
            }
            Ok(_) if epoch_error(target, plan).is_some() => {
                data.error_code = epoch_error(target, plan).map_or(error_codes::NONE, |c| c.code());
                any_error = true;
            }
            Ok(source) => {
                // The first batch is returned even if larger than the budget (KIP-74); after the
                // budget is spent, partitions get no records.
                let limit = target.max_bytes.min(budget);
                let want = if limit > 0 || total == 0 {
                    limit.max(1)
                } else {
                    0
                };
                let read = read_one(i, source, target.fetch_offset, want);
                data.high_watermark = read.high_watermark;
                data.last_stable_offset = read.last_stable_offset;
                data.log_start_offset = read.log_start_offset;
                match read.records {
                    Ok(records) => {
                        let n = records.len();
                        total += n;
                        budget = budget.saturating_sub(n);
                        data.records = Some(records);
                    }
                    Err(code) => {
                        data.error_code = code.code();
                        any_error = true;
                    }
                }
                if let Some(aborted) = read.aborted {
                    data.aborted_transactions = Some(
                        aborted
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

/// Reads the cluster partitions of `plan` (each up to its own and the request's limit),
/// then assembles the response within the request's budget from whole batches.
async fn cluster_read(
    cluster: &crate::cluster::Cluster,
    plan: &Plan,
) -> (FetchResponse, usize, bool) {
    let mut reads: Vec<Option<Result<crate::cluster::fetch::Read, ErrorCode>>> =
        Vec::with_capacity(plan.targets.len());
    for target in &plan.targets {
        let read = match &target.partition {
            Ok(Source::Cluster(key, log_append_time)) if epoch_error(target, plan).is_none() => {
                let want = target.max_bytes.min(plan.max_bytes).max(1);
                Some(
                    crate::cluster::fetch::read(
                        cluster,
                        *key,
                        target.fetch_offset,
                        want,
                        *log_append_time,
                        plan.read_committed,
                    )
                    .await
                    .map_err(|(code, message)| {
                        if code == ErrorCode::KAFKA_STORAGE_ERROR {
                            tracing::warn!(error = %message, "cluster fetch failed");
                        }
                        code
                    }),
                )
            }
            _ => None,
        };
        reads.push(read);
    }
    assemble(plan, |i, _, _, want| {
        let Some(Some(read)) = reads.get_mut(i).map(Option::take) else {
            return failed_read(ErrorCode::UNKNOWN_SERVER_ERROR);
        };
        match read {
            Err(code) => failed_read(code),
            Ok(mut read) => {
                // Whole batches within `want` (the first whole even if larger); none once the
                // request's budget is spent (`want` 0).
                let mut records = bytes::BytesMut::new();
                for batch in read.batches.iter().take_while(|_| want > 0) {
                    if !records.is_empty() && records.len() + batch.len() > want {
                        break;
                    }
                    records.extend_from_slice(batch);
                }
                PartitionRead {
                    high_watermark: read.high_watermark,
                    last_stable_offset: read.last_stable,
                    log_start_offset: read.log_start,
                    records: Ok(records.freeze()),
                    aborted: read.aborted_transactions(),
                }
            }
        }
    })
}

/// A fetch in cluster mode: read now, and when there is less than `min_bytes`, wait for commits
/// (this broker's and, through NOTIFY, the others') until `max_wait`.
async fn cluster_fetch(
    broker: Arc<Broker>,
    cluster: Arc<crate::cluster::Cluster>,
    plan: Plan,
    min_bytes: usize,
    max_wait: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> Response {
    let deadline = tokio::time::Instant::now() + max_wait;
    let mut commits = cluster.commits.subscribe();
    loop {
        commits.borrow_and_update();
        let (response, bytes, errors) = cluster_read(&cluster, &plan).await;
        if bytes >= min_bytes || errors || max_wait.is_zero() || plan.targets.is_empty() {
            return complete(&broker, &plan, response);
        }
        let finished = tokio::select! {
            woken = tokio::time::timeout_at(deadline, commits.changed()) => woken.is_err(),
            _ = crate::shutdown::stopped(&mut shutdown) => true,
        };
        if finished || tokio::time::Instant::now() >= deadline {
            let (response, _, _) = cluster_read(&cluster, &plan).await;
            return complete(&broker, &plan, response);
        }
    }
}
