//! ShareFetch and ShareAcknowledge: `poll` (one ShareFetch per leader, acknowledgements
//! piggy-backed), the records of a response inside its AcquiredRecords ranges, `commit_sync`
//! and the closing ShareAcknowledge of `close`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use skiff_protocol::generated::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckRequestBatch,
};
use skiff_protocol::generated::share_fetch_request::{
    AcknowledgementBatch as FetchAckBatch, FetchPartition, FetchTopic, ForgottenTopic,
};
use skiff_protocol::generated::share_fetch_response::PartitionData;
use skiff_protocol::generated::{ShareAcknowledgeRequest, ShareFetchRequest};
use skiff_protocol::{Uuid, error_codes};
use skiff_records::RecordBatches;
use tokio::time::Instant;

use crate::consumer::TopicPartition;
use crate::error::{Error, Result, is_retriable_code};
use crate::util::{backoff, lock};

use super::acks::{
    self, AckBatch, Acknowledgements, Acquired, GAP, delivery_count, normalize_acquired,
    undelivered,
};
use super::session::{ShareSession, TopicIdPartition};
use super::{AcknowledgeType, AcknowledgementMode, Inner, Pending, ShareConsumer, ShareRecord};

/// Attempts of one acknowledgement answered with a retriable partition error.
const ACK_ATTEMPTS: u32 = 3;

/// Per-partition results of acknowledgements.
pub type AcknowledgementResults = BTreeMap<TopicPartition, Result<()>>;

/// Pending acknowledgements of one broker, by partition.
type NodeAcks = BTreeMap<TopicPartition, Pending>;

/// What one ShareFetch to one broker produced.
#[derive(Default)]
struct NodeFetch {
    records: Vec<ShareRecord>,
    /// A retriable error (session lost, leader moved): try again after a backoff.
    retry: bool,
    errors: Vec<Error>,
}

impl ShareConsumer {
    /// Waits up to `timeout` for records, sending the acknowledgements due first (implicit mode:
    /// the previous poll's records are accepted now). Returns an empty batch when none arrived
    /// in time. In explicit mode every record of the previous poll must have been acknowledged.
    pub async fn poll(&self, timeout: Duration) -> Result<Vec<ShareRecord>> {
        let deadline = Instant::now() + timeout;
        self.check_usable()?;
        let mut sessions = self.inner.sessions.lock().await;
        self.check_usable()?;
        {
            let mut state = lock(&self.inner.state);
            match self.inner.config.acknowledgement_mode {
                AcknowledgementMode::Implicit => {
                    state.acknowledge_in_flight(AcknowledgeType::Accept.code())
                }
                AcknowledgementMode::Explicit => {
                    let left: usize = state.in_flight.values().map(|f| f.offsets.len()).sum();
                    if left > 0 {
                        return Err(Error::Acknowledgement(format!(
                            "{left} record(s) of the last poll are not acknowledged: in explicit \
                             mode every delivered record must be acknowledged before the next poll"
                        )));
                    }
                }
            }
        }
        let client = &self.inner.client;
        let mut failures: u32 = 0;
        loop {
            if self.inner.closed.load(Ordering::Acquire) {
                return Err(Error::Closed("share consumer"));
            }
            if let Some(e) = lock(&self.inner.state).fatal.clone() {
                return Err(e);
            }
            let changed = self.inner.assignment_changed.notified();
            let targets = self.targets().await;
            let mut pending = take_pending(&self.inner);
            let mut nodes: BTreeSet<i32> = targets.keys().copied().collect();
            nodes.extend(pending.keys().copied());
            nodes.extend(
                sessions
                    .iter()
                    .filter(|(_, s)| s.is_open() && !s.partitions().is_empty())
                    .map(|(n, _)| *n),
            );
            if nodes.is_empty() {
                tokio::select! {
                    _ = changed => continue,
                    _ = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
                }
            }
            let wait = self
                .inner
                .config
                .fetch_max_wait
                .min(deadline.saturating_duration_since(Instant::now()));
            let started = Instant::now();
            let rounds = nodes.into_iter().map(|node| {
                let session = sessions.remove(&node).unwrap_or_default();
                let wanted = targets.get(&node).cloned().unwrap_or_default();
                let acks = pending.remove(&node).unwrap_or_default();
                fetch_from(Arc::clone(&self.inner), node, session, wanted, acks, wait)
            });
            let results = futures::future::join_all(rounds).await;
            let mut records = Vec::new();
            let mut error: Option<Error> = None;
            let mut retry = false;
            for (node, session, result) in results {
                sessions.insert(node, session);
                match result {
                    Ok(r) => {
                        records.extend(r.records);
                        retry |= r.retry;
                        if error.is_none() {
                            error = r.errors.into_iter().next();
                        }
                    }
                    Err(e) if e.is_retriable() => {
                        tracing::debug!(node, error = %e, "share fetch failed; will retry");
                        client.invalidate_metadata(client.cached_metadata().generation);
                        retry = true;
                    }
                    Err(e) => error = error.or(Some(e)),
                }
            }
            if !records.is_empty() {
                if let Some(e) = error {
                    lock(&self.inner.state).deferred = Some(e);
                }
                crate::telemetry::ClientMetrics::add(
                    &client.telemetry().metrics.records_consumed,
                    records.len() as u64,
                );
                return Ok(records);
            }
            if let Some(e) = error {
                return Err(e);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let pause = if retry {
                let delay = backoff(
                    client.config().retry_backoff,
                    Duration::from_secs(1),
                    failures,
                );
                failures = failures.saturating_add(1);
                Some(delay)
            } else {
                failures = 0;
                // A broker that answers at once with nothing is not polled in a tight loop.
                (now.saturating_duration_since(started) < wait / 2)
                    .then_some(client.config().retry_backoff)
            };
            if let Some(pause) = pause {
                tokio::time::sleep(pause.min(deadline.saturating_duration_since(now))).await;
            }
        }
    }

    /// Sends every acknowledgement made so far (implicit mode: the last poll's records are
    /// accepted) with ShareAcknowledge, and returns each partition's result. Partitions with
    /// nothing to acknowledge are not in the map.
    pub async fn commit_sync(&self) -> Result<AcknowledgementResults> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("share consumer"));
        }
        let mut sessions = self.inner.sessions.lock().await;
        if self.inner.config.acknowledgement_mode == AcknowledgementMode::Implicit {
            lock(&self.inner.state).acknowledge_in_flight(AcknowledgeType::Accept.code());
        }
        let pending = take_pending(&self.inner);
        let rounds = pending.into_iter().map(|(node, acks)| {
            let session = sessions.remove(&node).unwrap_or_default();
            acknowledge(Arc::clone(&self.inner), node, session, acks, false)
        });
        let mut out = AcknowledgementResults::new();
        for (node, session, results) in futures::future::join_all(rounds).await {
            sessions.insert(node, session);
            merge_results(&mut out, results);
        }
        Ok(out)
    }

    /// `close`'s first half: the last acknowledgements, each share session closed (epoch -1).
    pub(super) async fn close_sessions(&self) -> Result<()> {
        let mut sessions = self.inner.sessions.lock().await;
        {
            let mut state = lock(&self.inner.state);
            let code = match self.inner.config.acknowledgement_mode {
                AcknowledgementMode::Implicit => AcknowledgeType::Accept.code(),
                AcknowledgementMode::Explicit => AcknowledgeType::Release.code(),
            };
            state.acknowledge_in_flight(code);
        }
        let mut pending = take_pending(&self.inner);
        let mut nodes: BTreeSet<i32> = sessions
            .iter()
            .filter(|(_, s)| s.is_open())
            .map(|(n, _)| *n)
            .collect();
        nodes.extend(pending.keys().copied());
        let rounds = nodes.into_iter().map(|node| {
            let session = sessions.remove(&node).unwrap_or_default();
            let acks = pending.remove(&node).unwrap_or_default();
            acknowledge(Arc::clone(&self.inner), node, session, acks, true)
        });
        let mut out = AcknowledgementResults::new();
        for (node, session, results) in futures::future::join_all(rounds).await {
            sessions.insert(node, session);
            merge_results(&mut out, results);
        }
        match out.into_values().find_map(|r| r.err()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Refuses a closed or failed consumer; returns an error a previous poll put off.
    fn check_usable(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("share consumer"));
        }
        let mut state = lock(&self.inner.state);
        if let Some(e) = &state.fatal {
            return Err(e.clone());
        }
        match state.deferred.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The assigned partitions by leader.
    async fn targets(&self) -> BTreeMap<i32, BTreeMap<TopicIdPartition, TopicPartition>> {
        let client = &self.inner.client;
        let assigned = lock(&self.inner.state).assigned.clone();
        let mut out: BTreeMap<i32, BTreeMap<TopicIdPartition, TopicPartition>> = BTreeMap::new();
        for (tp, id) in assigned {
            let topic = match client.topic(&tp.topic).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(%tp, error = %e, "no metadata for an assigned partition");
                    continue;
                }
            };
            let id = if id.is_zero() { topic.id } else { id };
            match topic.partition(tp.partition) {
                Some(p) if p.leader >= 0 => {
                    out.entry(p.leader)
                        .or_default()
                        .insert((id, tp.partition), tp);
                }
                _ => client.invalidate_metadata(client.cached_metadata().generation),
            }
        }
        out
    }
}

/// Takes every pending acknowledgement, by broker.
fn take_pending(inner: &Inner) -> BTreeMap<i32, NodeAcks> {
    let pending = std::mem::take(&mut lock(&inner.state).pending);
    let mut out: BTreeMap<i32, NodeAcks> = BTreeMap::new();
    for ((node, tp), p) in pending {
        if !p.acks.is_empty() {
            out.entry(node).or_default().insert(tp, p);
        }
    }
    out
}

/// Adds `more` to `out`, a partition's first error winning.
fn merge_results(out: &mut AcknowledgementResults, more: AcknowledgementResults) {
    for (tp, r) in more {
        match out.get(&tp) {
            Some(Err(_)) => {}
            _ => {
                out.insert(tp, r);
            }
        }
    }
}

fn fetch_batches(acks: &Acknowledgements) -> Vec<FetchAckBatch> {
    acks.batches()
        .into_iter()
        .map(|AckBatch { first, last, types }| FetchAckBatch {
            first_offset: first,
            last_offset: last,
            acknowledge_types: types,
            ..Default::default()
        })
        .collect()
}

fn acknowledge_batches(acks: &Acknowledgements) -> Vec<AckRequestBatch> {
    acks.batches()
        .into_iter()
        .map(|AckBatch { first, last, types }| AckRequestBatch {
            first_offset: first,
            last_offset: last,
            acknowledge_types: types,
            ..Default::default()
        })
        .collect()
}

fn dropped(node: i32, acks: &NodeAcks, why: &str) {
    if !acks.is_empty() {
        let partitions: Vec<String> = acks.keys().map(|tp| tp.to_string()).collect();
        tracing::warn!(
            node,
            ?partitions,
            "{why}: acknowledgements dropped (the records will be delivered again when their locks expire)"
        );
    }
}

/// One poll round with one broker: acknowledgements for partitions it no longer fetches go in a
/// ShareAcknowledge, then one ShareFetch (with the rest of the acknowledgements).
async fn fetch_from(
    inner: Arc<Inner>,
    node: i32,
    mut session: ShareSession,
    wanted: BTreeMap<TopicIdPartition, TopicPartition>,
    acks: NodeAcks,
    wait: Duration,
) -> (i32, ShareSession, Result<NodeFetch>) {
    let (piggy, ack_only): (NodeAcks, NodeAcks) = acks
        .into_iter()
        .partition(|(tp, p)| wanted.contains_key(&(p.topic_id, tp.partition)));
    if !ack_only.is_empty() {
        let (_, s, results) = acknowledge(Arc::clone(&inner), node, session, ack_only, false).await;
        session = s;
        for (tp, r) in results {
            if let Err(e) = r {
                tracing::warn!(%tp, node, error = %e, "acknowledgement failed");
            }
        }
    }
    if wanted.is_empty() && (!session.is_open() || session.partitions().is_empty()) {
        // Nothing to fetch here (an open session stays open for later acknowledgements and
        // is closed by `close`).
        dropped(node, &piggy, "no share session");
        return (node, session, Ok(NodeFetch::default()));
    }
    let result = share_fetch(&inner, node, &mut session, &wanted, piggy, wait).await;
    (node, session, result)
}

async fn share_fetch(
    inner: &Arc<Inner>,
    node: i32,
    session: &mut ShareSession,
    wanted: &BTreeMap<TopicIdPartition, TopicPartition>,
    mut piggy: NodeAcks,
    wait: Duration,
) -> Result<NodeFetch> {
    let client = &inner.client;
    let config = &inner.config;
    if !session.is_open() {
        // A session cannot be opened with acknowledgements.
        dropped(node, &piggy, "new share session");
        piggy.clear();
    }
    let wanted_set: BTreeSet<TopicIdPartition> = wanted.keys().copied().collect();
    let plan = session.plan_fetch(&wanted_set);
    let mut topics: BTreeMap<Uuid, BTreeMap<i32, FetchPartition>> = BTreeMap::new();
    for (id, partition) in &plan.send {
        topics.entry(*id).or_default().insert(
            *partition,
            FetchPartition {
                partition_index: *partition,
                ..Default::default()
            },
        );
    }
    let mut names: HashMap<Uuid, String> = HashMap::new();
    for ((id, _), tp) in wanted {
        names.insert(*id, tp.topic.clone());
    }
    for (tp, p) in &piggy {
        names.insert(p.topic_id, tp.topic.clone());
        let entry = topics
            .entry(p.topic_id)
            .or_default()
            .entry(tp.partition)
            .or_insert_with(|| FetchPartition {
                partition_index: tp.partition,
                ..Default::default()
            });
        entry.acknowledgement_batches = fetch_batches(&p.acks);
    }
    let mut forgotten: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
    for (id, partition) in &plan.forget {
        forgotten.entry(*id).or_default().push(*partition);
    }
    let member_id = client.member_id();
    let wait = if wanted.is_empty() {
        Duration::ZERO
    } else {
        wait
    };
    let request = ShareFetchRequest {
        group_id: Some(config.group_id.as_str().into()),
        member_id: Some(member_id.as_str().into()),
        share_session_epoch: plan.epoch,
        max_wait_ms: i32::try_from(wait.as_millis()).unwrap_or(i32::MAX),
        min_bytes: config.fetch_min_bytes,
        max_bytes: config.fetch_max_bytes,
        max_records: config.max_poll_records,
        batch_size: config.max_poll_records,
        topics: topics
            .into_iter()
            .map(|(topic_id, partitions)| FetchTopic {
                topic_id,
                partitions: partitions.into_values().collect(),
                ..Default::default()
            })
            .collect(),
        forgotten_topics_data: forgotten
            .into_iter()
            .map(|(topic_id, partitions)| ForgottenTopic {
                topic_id,
                partitions,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let timeout = client.config().request_timeout + wait;
    let response = match client
        .request_with_timeout(node, timeout, |_| request)
        .await
    {
        Ok(r) => r,
        Err(e) => {
            session.reset();
            dropped(node, &piggy, "ShareFetch failed");
            return Err(e);
        }
    };
    session.on_response(response.error_code);
    let mut out = NodeFetch::default();
    let message = response.error_message.as_ref().map(|m| m.to_string());
    match response.error_code {
        error_codes::NONE => {}
        code if code == error_codes::SHARE_SESSION_NOT_FOUND
            || code == error_codes::INVALID_SHARE_SESSION_EPOCH =>
        {
            tracing::debug!(node, code, "share session lost; opening a new one");
            dropped(node, &piggy, "share session lost");
            out.retry = true;
            return Ok(out);
        }
        code if is_retriable_code(code) => {
            out.retry = true;
            return Ok(out);
        }
        code => {
            out.errors.push(Error::broker_for(
                "ShareFetch",
                code,
                format!("group {} at broker {node}", config.group_id),
                message,
            ));
            return Ok(out);
        }
    }
    if response.acquisition_lock_timeout_ms > 0 {
        lock(&inner.state).acquisition_lock_timeout = Some(Duration::from_millis(
            u64::try_from(response.acquisition_lock_timeout_ms).unwrap_or(0),
        ));
    }
    let max_decompressed = usize::try_from(config.fetch_max_bytes)
        .unwrap_or(0)
        .saturating_mul(4)
        .max(1 << 20);
    for topic in response.responses {
        let name = match names.get(&topic.topic_id) {
            Some(n) => n.clone(),
            None => match client.cached_metadata().topic_by_id(topic.topic_id) {
                Some(t) => t.name.clone(),
                None => {
                    tracing::warn!(topic_id = %topic.topic_id, "ShareFetch answered an unknown topic; skipped");
                    continue;
                }
            },
        };
        for p in topic.partitions {
            let tp = TopicPartition::new(name.clone(), p.partition_index);
            if p.acknowledge_error_code != error_codes::NONE {
                tracing::warn!(
                    %tp,
                    node,
                    error = crate::error::error_name(p.acknowledge_error_code),
                    message = p.acknowledge_error_message.as_deref().unwrap_or(""),
                    "acknowledgement failed"
                );
            }
            if p.error_code != error_codes::NONE {
                if is_retriable_code(p.error_code) {
                    tracing::debug!(%tp, code = p.error_code, "share fetch partition error; refreshing metadata");
                    client.invalidate_metadata(client.cached_metadata().generation);
                    out.retry = true;
                } else {
                    out.errors.push(Error::broker_for(
                        "ShareFetch",
                        p.error_code,
                        tp.to_string(),
                        p.error_message.as_ref().map(|m| m.to_string()),
                    ));
                }
                continue;
            }
            let topic_id = topic.topic_id;
            let delivered = partition_records(&tp, p, max_decompressed);
            let mut state = lock(&inner.state);
            let mut queue = |ranges: &[(i64, i64)], code: i8| {
                for &(f, l) in ranges {
                    state.queue_ack(node, &tp, topic_id, f, l, code);
                }
            };
            queue(&delivered.gaps, GAP);
            queue(&delivered.rejected, AcknowledgeType::Reject.code());
            queue(&delivered.missing, AcknowledgeType::Release.code());
            if !delivered.records.is_empty() {
                let f = state.in_flight.entry((node, tp.clone())).or_default();
                f.topic_id = topic_id;
                f.offsets.extend(delivered.records.iter().map(|r| r.offset));
            }
            drop(state);
            if let Some(e) = delivered.error {
                out.errors.push(e);
            }
            out.records.extend(delivered.records);
        }
    }
    Ok(out)
}

/// The records of one partition of a ShareFetch response, and what to acknowledge of the rest.
#[derive(Debug, Default)]
struct Delivered {
    records: Vec<ShareRecord>,
    /// Acquired offsets inside a batch that hold no record.
    gaps: Vec<(i64, i64)>,
    /// Acquired offsets of a batch that could not be read (corrupt, or over the decompression
    /// bound): rejected, as Kafka's client does.
    rejected: Vec<(i64, i64)>,
    /// Acquired offsets whose batch was not in the response: released.
    missing: Vec<(i64, i64)>,
    error: Option<Error>,
}

fn partition_records(tp: &TopicPartition, p: PartitionData, max_decompressed: usize) -> Delivered {
    let mut out = Delivered::default();
    let acquired = normalize_acquired(
        p.acquired_records
            .iter()
            .map(|a| Acquired {
                first: a.first_offset,
                last: a.last_offset,
                delivery_count: a.delivery_count,
            })
            .collect(),
    );
    if acquired.is_empty() {
        return out;
    }
    let mut records: BTreeMap<i64, ShareRecord> = BTreeMap::new();
    let mut covered: Vec<(i64, i64)> = Vec::new();
    let mut corrupt: Vec<(i64, i64)> = Vec::new();
    for batch in RecordBatches::new(p.records.unwrap_or_default()) {
        let Ok(batch) = batch else { break }; // a partial trailing batch
        let (base, last) = (batch.base_offset(), batch.last_offset());
        if last < base {
            continue;
        }
        if batch.is_control() {
            covered.push((base, last));
            continue;
        }
        let decoded = batch
            .decompressed_records(max_decompressed)
            .and_then(|iter| iter.collect::<std::result::Result<Vec<_>, _>>());
        let decoded = match decoded {
            Ok(d) => d,
            Err(e) => {
                corrupt.push((base, last));
                out.error = out
                    .error
                    .or_else(|| Some(Error::Records(format!("{tp}: batch at offset {base}: {e}"))));
                continue;
            }
        };
        covered.push((base, last));
        for record in decoded {
            if records.contains_key(&record.offset) {
                continue;
            }
            let Some(count) = delivery_count(&acquired, record.offset) else {
                continue; // not acquired for this member
            };
            records.insert(
                record.offset,
                ShareRecord {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset: record.offset,
                    timestamp: record.timestamp,
                    key: record.key,
                    value: record.value,
                    headers: record
                        .headers
                        .iter()
                        .map(|h| (String::from_utf8_lossy(&h.key).into_owned(), h.value))
                        .collect(),
                    delivery_count: count,
                },
            );
        }
    }
    let offsets: Vec<i64> = records.keys().copied().collect();
    let rest = undelivered(&acquired, &offsets, &covered);
    out.gaps = rest.gaps;
    let missing: Vec<Acquired> = rest
        .missing
        .iter()
        .map(|&(first, last)| Acquired {
            first,
            last,
            delivery_count: 0,
        })
        .collect();
    let unread = acks::undelivered(&missing, &[], &corrupt);
    out.rejected = unread.gaps;
    out.missing = unread.missing;
    out.records = records.into_values().collect();
    out
}

/// Sends `acks` to `node` with ShareAcknowledge in its share session (`closing`: at epoch -1,
/// closing the session, even with nothing to acknowledge). Partitions answered with a retriable
/// error are sent again, at most [`ACK_ATTEMPTS`] times in all.
async fn acknowledge(
    inner: Arc<Inner>,
    node: i32,
    mut session: ShareSession,
    mut acks: NodeAcks,
    closing: bool,
) -> (i32, ShareSession, AcknowledgementResults) {
    let client = &inner.client;
    let mut results = AcknowledgementResults::new();
    let mut attempt: u32 = 0;
    loop {
        let epoch = if closing {
            session.close()
        } else {
            session.acknowledge_epoch()
        };
        let Some(epoch) = epoch else {
            dropped(node, &acks, "no share session");
            for tp in std::mem::take(&mut acks).into_keys() {
                results.insert(
                    tp,
                    Err(Error::Acknowledgement(format!(
                        "no open share session with broker {node}: the records will be \
                         delivered again when their acquisition locks expire"
                    ))),
                );
            }
            break;
        };
        if acks.is_empty() && !closing {
            break;
        }
        let by_id: HashMap<TopicIdPartition, TopicPartition> = acks
            .iter()
            .map(|(tp, p)| ((p.topic_id, tp.partition), tp.clone()))
            .collect();
        let mut topics: BTreeMap<Uuid, Vec<AcknowledgePartition>> = BTreeMap::new();
        for (tp, p) in &acks {
            topics
                .entry(p.topic_id)
                .or_default()
                .push(AcknowledgePartition {
                    partition_index: tp.partition,
                    acknowledgement_batches: acknowledge_batches(&p.acks),
                    ..Default::default()
                });
        }
        let request = ShareAcknowledgeRequest {
            group_id: Some(inner.config.group_id.as_str().into()),
            member_id: Some(client.member_id().as_str().into()),
            share_session_epoch: epoch,
            topics: topics
                .into_iter()
                .map(|(topic_id, partitions)| AcknowledgeTopic {
                    topic_id,
                    partitions,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let response = match client.request(node, |_| request).await {
            Ok(r) => r,
            Err(e) => {
                session.reset();
                for tp in std::mem::take(&mut acks).into_keys() {
                    results.insert(tp, Err(e.clone()));
                }
                break;
            }
        };
        if !closing {
            session.on_response(response.error_code);
        }
        if response.error_code != error_codes::NONE {
            let e = Error::broker_for(
                "ShareAcknowledge",
                response.error_code,
                format!("group {} at broker {node}", inner.config.group_id),
                response.error_message.as_ref().map(|m| m.to_string()),
            );
            for tp in std::mem::take(&mut acks).into_keys() {
                results.insert(tp, Err(e.clone()));
            }
            break;
        }
        attempt += 1;
        let mut retriable: BTreeMap<TopicPartition, Error> = BTreeMap::new();
        for topic in response.responses {
            for p in topic.partitions {
                let Some(tp) = by_id.get(&(topic.topic_id, p.partition_index)) else {
                    continue;
                };
                if !acks.contains_key(tp) {
                    continue; // answered twice
                }
                if p.error_code == error_codes::NONE {
                    acks.remove(tp);
                    results.insert(tp.clone(), Ok(()));
                    continue;
                }
                let e = Error::broker_for(
                    "ShareAcknowledge",
                    p.error_code,
                    tp.to_string(),
                    p.error_message.as_ref().map(|m| m.to_string()),
                );
                if is_retriable_code(p.error_code) {
                    if matches!(
                        p.error_code,
                        error_codes::NOT_LEADER_OR_FOLLOWER
                            | error_codes::UNKNOWN_TOPIC_OR_PARTITION
                    ) {
                        client.invalidate_metadata(client.cached_metadata().generation);
                    }
                    retriable.insert(tp.clone(), e);
                } else {
                    acks.remove(tp);
                    results.insert(tp.clone(), Err(e));
                }
            }
        }
        if acks.is_empty() {
            break;
        }
        if closing || attempt >= ACK_ATTEMPTS {
            for tp in std::mem::take(&mut acks).into_keys() {
                let e = retriable.remove(&tp).unwrap_or_else(|| {
                    Error::protocol("ShareAcknowledge", format!("no answer for {tp}"))
                });
                results.insert(tp, Err(e));
            }
            break;
        }
        tracing::debug!(
            node,
            partitions = acks.len(),
            attempt,
            "acknowledgements to send again"
        );
        tokio::time::sleep(backoff(
            client.config().retry_backoff,
            Duration::from_secs(1),
            attempt,
        ))
        .await;
    }
    (node, session, results)
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use skiff_protocol::generated::share_fetch_response::AcquiredRecords;
    use skiff_records::RecordBatchBuilder;

    use super::*;

    fn batch(base: i64, values: &[&str], control: bool) -> Bytes {
        let mut b = RecordBatchBuilder::new().base_offset(base).control(control);
        for v in values {
            b.append(1, None, Some(v.as_bytes()), &[]).expect("append");
        }
        b.build().expect("build").into_bytes()
    }

    fn acquired(first: i64, last: i64, delivery_count: i16) -> AcquiredRecords {
        AcquiredRecords {
            first_offset: first,
            last_offset: last,
            delivery_count,
            ..Default::default()
        }
    }

    #[test]
    fn only_acquired_records_are_returned_with_their_delivery_counts() {
        let mut bytes = BytesMut::new();
        bytes.extend_from_slice(&batch(0, &["a", "b", "c"], false));
        bytes.extend_from_slice(&batch(3, &["marker"], true));
        bytes.extend_from_slice(&batch(4, &["e", "f"], false));
        let partial = batch(6, &["g"], false);
        bytes.extend_from_slice(partial.get(..partial.len() / 2).unwrap_or_default());
        let p = PartitionData {
            partition_index: 0,
            records: Some(bytes.freeze()),
            acquired_records: vec![acquired(5, 7, 1), acquired(1, 4, 2)],
            ..Default::default()
        };
        let tp = TopicPartition::new("t", 0);
        let d = partition_records(&tp, p, 1 << 20);
        let got: Vec<(i64, &str, i16)> = d
            .records
            .iter()
            .map(|r| {
                (
                    r.offset,
                    std::str::from_utf8(r.value.as_deref().unwrap_or_default()).unwrap_or(""),
                    r.delivery_count,
                )
            })
            .collect();
        // Offset 0 was not acquired for this member; 3 is a control record (a gap); 6-7's
        // batch was cut short (released).
        assert_eq!(
            got,
            vec![(1, "b", 2), (2, "c", 2), (4, "e", 2), (5, "f", 1)]
        );
        assert_eq!(d.gaps, vec![(3, 3)]);
        assert_eq!(d.missing, vec![(6, 7)]);
        assert!(d.rejected.is_empty());
        assert!(d.error.is_none());
    }

    #[test]
    fn no_acquired_records_means_nothing_is_returned() {
        let p = PartitionData {
            records: Some(batch(0, &["a"], false)),
            acquired_records: vec![acquired(3, 1, 1)],
            ..Default::default()
        };
        let d = partition_records(&TopicPartition::new("t", 0), p, 1 << 20);
        assert!(d.records.is_empty() && d.gaps.is_empty() && d.missing.is_empty());
    }
}
