//! The consumer: a KIP-848 group member (ConsumerGroupHeartbeat v1, member ID = the client's
//! instance ID, KIP-1082) or a plain assigned consumer; offsets, long-poll fetch, seek,
//! pause/resume.
//!
//! The group membership runs in a background task:
//! - join (epoch 0) with a full heartbeat: subscription, rebalance timeout, owned partitions;
//! - heartbeat at the interval the broker sets; owned partitions are reported whenever they
//!   changed; after any error the next heartbeat is full again;
//! - a new target assignment is reconciled at once: revoked partitions go to the listener's
//!   `on_partitions_revoked` (and are committed with auto-commit) *before* the acknowledging
//!   heartbeat gives them up;
//! - FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: owned partitions are dropped (`on_partitions_lost`)
//!   and the member rejoins with epoch 0 and the **same** ID;
//! - a failed or timed-out heartbeat (the first one included) is retried, jittered, with the same
//!   ID and epoch;
//! - brokers offering only ConsumerGroupHeartbeat v0 get an empty member ID on join and the
//!   server-generated ID afterwards;
//! - close: revoke callback, final commit (auto-commit), leave with epoch -1.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use skiff_protocol::generated::consumer_group_heartbeat_request::TopicPartitions as HbTopicPartitions;
use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic};
use skiff_protocol::generated::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use skiff_protocol::generated::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use skiff_protocol::generated::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use skiff_protocol::generated::{
    ConsumerGroupHeartbeatRequest, FetchRequest, ListOffsetsRequest, OffsetCommitRequest,
    OffsetFetchRequest,
};
use skiff_protocol::{ApiKey, Uuid, error_codes};
use skiff_records::RecordBatches;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::util::{backoff, lock};

/// A topic partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Which records a consumer reads (`isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    /// Every record, including those of open and aborted transactions.
    ReadUncommitted,
    /// Only records of committed transactions (and non-transactional ones), up to the last
    /// stable offset: librdkafka's default, and the default here.
    ReadCommitted,
}

impl IsolationLevel {
    /// The wire value of Fetch and ListOffsets.
    pub fn code(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// Where to start when there is no committed offset (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    Latest,
    /// Fail the poll.
    None,
}

/// Bound on the decompressed size of one fetched batch: four times the larger fetch limit, and
/// at least 1 MiB. A compressed batch that would inflate past it is a decompression bomb and
/// fails the poll instead of exhausting memory.
fn max_decompressed_bytes(config: &ConsumerConfig) -> usize {
    let fetch = config.fetch_max_bytes.max(config.max_partition_fetch_bytes);
    usize::try_from(fetch)
        .unwrap_or(0)
        .saturating_mul(4)
        .max(1 << 20)
}

/// Consumer settings.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// The group to join (`None`: a plain consumer using [`Consumer::assign`]).
    pub group_id: Option<String>,
    pub auto_offset_reset: OffsetReset,
    pub enable_auto_commit: bool,
    pub auto_commit_interval: Duration,
    /// Fetch long-poll wait (`fetch.max.wait.ms`).
    pub fetch_max_wait: Duration,
    pub fetch_min_bytes: i32,
    pub fetch_max_bytes: i32,
    pub max_partition_fetch_bytes: i32,
    /// KIP-848 rebalance timeout sent on join.
    pub rebalance_timeout: Duration,
    /// KIP-848 server-side assignor (`None`: the broker's default).
    pub server_assignor: Option<String>,
    pub isolation_level: IsolationLevel,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            group_id: None,
            auto_offset_reset: OffsetReset::Latest,
            enable_auto_commit: true,
            auto_commit_interval: Duration::from_secs(5),
            fetch_max_wait: Duration::from_millis(500),
            fetch_min_bytes: 1,
            fetch_max_bytes: 50 * 1024 * 1024,
            max_partition_fetch_bytes: 1024 * 1024,
            rebalance_timeout: Duration::from_secs(60),
            server_assignor: None,
            isolation_level: IsolationLevel::ReadCommitted,
        }
    }
}

/// Callbacks around assignment changes. They run in the membership task, before the
/// heartbeat that acknowledges the change is sent.
pub trait RebalanceListener: Send + Sync {
    /// Partitions about to be given up; still owned while this runs.
    fn on_partitions_revoked(&self, _partitions: &[TopicPartition]) {}
    /// Partitions newly assigned.
    fn on_partitions_assigned(&self, _partitions: &[TopicPartition]) {}
    /// Partitions lost without a chance to commit (fenced or unknown member).
    fn on_partitions_lost(&self, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(partitions);
    }
}

/// A fetched record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

#[derive(Debug, Clone)]
struct PartState {
    topic_id: Uuid,
    position: Option<i64>,
    paused: bool,
    high_watermark: i64,
}

/// The member as the heartbeat task knows it.
#[derive(Debug, Clone, Default)]
struct Member {
    id: String,
    epoch: i32,
    version: Option<i16>,
    heartbeat_interval: Duration,
    joined: bool,
    /// Count of successful heartbeats (tests and diagnostics).
    heartbeats: u64,
    fencings: u64,
}

struct State {
    subscription: Vec<String>,
    assigned: BTreeMap<TopicPartition, PartState>,
    member: Member,
    fatal: Option<Error>,
    last_commit: Instant,
    /// Owned partitions as last reported to the coordinator.
    reported: Option<BTreeSet<TopicPartition>>,
}

struct Inner {
    client: Client,
    config: ConsumerConfig,
    state: Mutex<State>,
    listener: Mutex<Option<Arc<dyn RebalanceListener>>>,
    wake_heartbeat: Notify,
    assignment_changed: Notify,
    closed: AtomicBool,
}

/// An async consumer. See the module docs for the group protocol.
pub struct Consumer {
    inner: Arc<Inner>,
    membership: Mutex<Option<JoinHandle<()>>>,
}

impl Consumer {
    pub fn new(client: Client, config: ConsumerConfig) -> Result<Consumer> {
        if let Some(group) = &config.group_id
            && group.trim().is_empty()
        {
            return Err(Error::Config("group_id must not be blank".into()));
        }
        Ok(Consumer {
            inner: Arc::new(Inner {
                client,
                config,
                state: Mutex::new(State {
                    subscription: Vec::new(),
                    assigned: BTreeMap::new(),
                    member: Member::default(),
                    fatal: None,
                    last_commit: Instant::now(),
                    reported: None,
                }),
                listener: Mutex::new(None),
                wake_heartbeat: Notify::new(),
                assignment_changed: Notify::new(),
                closed: AtomicBool::new(false),
            }),
            membership: Mutex::new(None),
        })
    }

    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Installs the rebalance callbacks.
    pub fn set_rebalance_listener(&self, listener: Arc<dyn RebalanceListener>) {
        *lock(&self.inner.listener) = Some(listener);
    }

    /// Subscribes to `topics` and joins the group (starts the membership task).
    pub fn subscribe(&self, topics: &[&str]) -> Result<()> {
        if self.inner.config.group_id.is_none() {
            return Err(Error::Config("subscribe needs a group_id".into()));
        }
        {
            let mut state = lock(&self.inner.state);
            state.subscription = topics.iter().map(|t| t.to_string()).collect();
        }
        let mut membership = lock(&self.membership);
        if membership.is_none() {
            *membership = Some(tokio::spawn(membership_loop(Arc::clone(&self.inner))));
        } else {
            lock(&self.inner.state).member.joined = false;
            self.inner.wake_heartbeat.notify_one();
        }
        Ok(())
    }

    /// Consumes exactly these partitions, without group membership.
    pub fn assign(&self, partitions: &[TopicPartition]) -> Result<()> {
        if lock(&self.membership).is_some() {
            return Err(Error::Config(
                "assign cannot be mixed with subscribe".into(),
            ));
        }
        let mut state = lock(&self.inner.state);
        state.assigned.retain(|tp, _| partitions.contains(tp));
        for tp in partitions {
            state.assigned.entry(tp.clone()).or_insert(PartState {
                topic_id: Uuid::ZERO,
                position: None,
                paused: false,
                high_watermark: -1,
            });
        }
        drop(state);
        self.inner.assignment_changed.notify_waiters();
        Ok(())
    }

    /// The partitions currently owned.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        lock(&self.inner.state).assigned.keys().cloned().collect()
    }

    /// The member ID used with the coordinator (the instance ID text with v1; the
    /// server-generated ID with v0; empty before a v0 join).
    pub fn member_id(&self) -> String {
        lock(&self.inner.state).member.id.clone()
    }

    pub fn member_epoch(&self) -> i32 {
        lock(&self.inner.state).member.epoch
    }

    /// What a transactional producer needs to commit this consumer's progress in its
    /// transaction ([`crate::Producer::send_offsets_to_transaction`]); `None` without a group.
    pub fn group_metadata(&self) -> Option<crate::GroupMetadata> {
        let group_id = self.inner.config.group_id.clone()?;
        let state = lock(&self.inner.state);
        Some(crate::GroupMetadata {
            group_id,
            member_id: state.member.id.clone(),
            generation_id: state.member.epoch,
        })
    }

    /// The ConsumerGroupHeartbeat version in use (once known).
    pub fn heartbeat_version(&self) -> Option<i16> {
        lock(&self.inner.state).member.version
    }

    /// How many times the member was fenced (or found unknown) and rejoined.
    pub fn fencing_count(&self) -> u64 {
        lock(&self.inner.state).member.fencings
    }

    /// The next offset to be returned for `tp`.
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        lock(&self.inner.state)
            .assigned
            .get(tp)
            .and_then(|p| p.position)
    }

    /// Records left to read in the owned partitions (by the last fetch's high watermarks).
    pub fn lag(&self) -> i64 {
        lock(&self.inner.state)
            .assigned
            .values()
            .filter_map(|p| match (p.position, p.high_watermark) {
                (Some(pos), hw) if hw >= 0 => Some((hw - pos).max(0)),
                _ => None,
            })
            .sum()
    }

    /// Moves the position of an owned partition.
    pub fn seek(&self, tp: &TopicPartition, offset: i64) -> Result<()> {
        let mut state = lock(&self.inner.state);
        let part = state
            .assigned
            .get_mut(tp)
            .ok_or_else(|| Error::Config(format!("{tp} is not assigned")))?;
        part.position = Some(offset.max(0));
        Ok(())
    }

    /// Stops fetching these partitions until [`Consumer::resume`].
    pub fn pause(&self, partitions: &[TopicPartition]) {
        let mut state = lock(&self.inner.state);
        for tp in partitions {
            if let Some(p) = state.assigned.get_mut(tp) {
                p.paused = true;
            }
        }
    }

    pub fn resume(&self, partitions: &[TopicPartition]) {
        let mut state = lock(&self.inner.state);
        for tp in partitions {
            if let Some(p) = state.assigned.get_mut(tp) {
                p.paused = false;
            }
        }
        drop(state);
        self.inner.assignment_changed.notify_waiters();
    }

    /// Waits up to `timeout` for records. Returns an empty batch when none arrived in time.
    pub async fn poll(&self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.inner.closed.load(Ordering::Acquire) {
                return Err(Error::Closed("consumer"));
            }
            if let Some(e) = lock(&self.inner.state).fatal.clone() {
                return Err(e);
            }
            self.maybe_auto_commit().await;
            let changed = self.inner.assignment_changed.notified();
            self.initialize_positions().await?;
            let fetchable = self.fetchable();
            if fetchable.is_empty() {
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
            let records = self.fetch(fetchable, wait).await?;
            crate::telemetry::ClientMetrics::add(
                &self.inner.client.telemetry().metrics.records_consumed,
                records.len() as u64,
            );
            if !records.is_empty() || Instant::now() >= deadline {
                return Ok(records);
            }
        }
    }

    fn fetchable(&self) -> Vec<(TopicPartition, Uuid, i64)> {
        lock(&self.inner.state)
            .assigned
            .iter()
            .filter(|(_, p)| !p.paused)
            .filter_map(|(tp, p)| p.position.map(|pos| (tp.clone(), p.topic_id, pos)))
            .collect()
    }

    async fn fetch(
        &self,
        partitions: Vec<(TopicPartition, Uuid, i64)>,
        wait: Duration,
    ) -> Result<Vec<ConsumerRecord>> {
        let client = &self.inner.client;
        let mut by_node: BTreeMap<i32, Vec<(TopicPartition, Uuid, i64)>> = BTreeMap::new();
        for (tp, id, pos) in partitions {
            let topic = client.topic(&tp.topic).await?;
            let id = if id.is_zero() { topic.id } else { id };
            let leader = topic
                .partition(tp.partition)
                .map(|p| p.leader)
                .ok_or_else(|| Error::UnknownPartition {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                })?;
            by_node.entry(leader).or_default().push((tp, id, pos));
        }
        let futures = by_node
            .into_iter()
            .map(|(node, parts)| self.fetch_from(node, parts, wait));
        let results = futures::future::join_all(futures).await;
        let mut out = Vec::new();
        let mut first_err = None;
        for r in results {
            match r {
                Ok(records) => out.extend(records),
                Err(e) if e.is_retriable() => {
                    let generation = client.cached_metadata().generation;
                    client.invalidate_metadata(generation);
                    tracing::debug!(error = %e, "fetch failed; will retry");
                    if out.is_empty() {
                        tokio::time::sleep(backoff(
                            client.config().retry_backoff,
                            Duration::from_secs(1),
                            0,
                        ))
                        .await;
                    }
                }
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        match first_err {
            Some(e) if out.is_empty() => Err(e),
            _ => Ok(out),
        }
    }

    async fn fetch_from(
        &self,
        node: i32,
        parts: Vec<(TopicPartition, Uuid, i64)>,
        wait: Duration,
    ) -> Result<Vec<ConsumerRecord>> {
        let config = &self.inner.config;
        let mut topics: BTreeMap<(String, Uuid), Vec<FetchPartition>> = BTreeMap::new();
        for (tp, id, pos) in &parts {
            topics
                .entry((tp.topic.clone(), *id))
                .or_default()
                .push(FetchPartition {
                    partition: tp.partition,
                    fetch_offset: *pos,
                    partition_max_bytes: config.max_partition_fetch_bytes,
                    ..Default::default()
                });
        }
        let names_by_id: HashMap<Uuid, String> =
            topics.keys().map(|(n, id)| (*id, n.clone())).collect();
        let request = FetchRequest {
            isolation_level: config.isolation_level.code(),
            max_wait_ms: wait.as_millis().min(i32::MAX as u128) as i32,
            min_bytes: config.fetch_min_bytes,
            max_bytes: config.fetch_max_bytes,
            topics: topics
                .into_iter()
                .map(|((name, id), partitions)| FetchTopic {
                    topic: name.into(),
                    topic_id: id,
                    partitions,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let timeout = self.inner.client.config().request_timeout + wait;
        let response = self
            .inner
            .client
            .request_with_timeout(node, timeout, |_| request)
            .await?;
        if response.error_code != error_codes::NONE {
            return Err(Error::broker("Fetch", response.error_code, None));
        }
        let (out, reset) = self.apply_fetch(response, &names_by_id, &parts)?;
        if !reset.is_empty() {
            self.reset_positions(&reset).await?;
        }
        Ok(out)
    }

    /// Applies a Fetch response to the positions; returns the records and the partitions whose
    /// offset was out of range.
    #[allow(clippy::type_complexity)]
    fn apply_fetch(
        &self,
        response: skiff_protocol::generated::FetchResponse,
        names_by_id: &HashMap<Uuid, String>,
        parts: &[(TopicPartition, Uuid, i64)],
    ) -> Result<(Vec<ConsumerRecord>, Vec<TopicPartition>)> {
        let mut out = Vec::new();
        let mut reset = Vec::new();
        let mut state = lock(&self.inner.state);
        let state = &mut *state;
        for topic in response.responses {
            let name = if topic.topic.is_empty() {
                match names_by_id.get(&topic.topic_id) {
                    Some(n) => n.clone(),
                    None => continue,
                }
            } else {
                topic.topic.to_string()
            };
            for p in topic.partitions {
                let tp = TopicPartition::new(name.clone(), p.partition_index);
                let Some(part) = state.assigned.get_mut(&tp) else {
                    continue; // revoked meanwhile
                };
                if p.error_code == error_codes::OFFSET_OUT_OF_RANGE {
                    part.position = None;
                    reset.push(tp);
                    continue;
                }
                if p.error_code != error_codes::NONE {
                    tracing::debug!(%tp, code = p.error_code, "fetch partition error");
                    if crate::error::is_retriable_code(p.error_code) {
                        let generation = self.inner.client.cached_metadata().generation;
                        self.inner.client.invalidate_metadata(generation);
                        continue;
                    }
                    return Err(Error::broker_for(
                        "Fetch",
                        p.error_code,
                        tp.to_string(),
                        None,
                    ));
                }
                // Lag is measured to what this consumer can read: for read_committed, the last
                // stable offset (as Kafka's consumers do).
                part.high_watermark = match self.inner.config.isolation_level {
                    IsolationLevel::ReadCommitted if p.last_stable_offset >= 0 => {
                        p.last_stable_offset
                    }
                    _ => p.high_watermark,
                };
                let Some(mut position) = part.position else {
                    continue;
                };
                let requested = parts
                    .iter()
                    .find(|(t, _, _)| *t == tp)
                    .map(|(_, _, pos)| *pos);
                if requested != Some(position) {
                    continue; // seeked meanwhile
                }
                let records = p.records.unwrap_or_default();
                let max_decompressed = max_decompressed_bytes(&self.inner.config);
                let mut aborted = AbortedFilter::new(p.aborted_transactions.unwrap_or_default());
                for batch in RecordBatches::new(records) {
                    let Ok(batch) = batch else { break }; // partial trailing batch
                    if batch.next_offset() <= position {
                        continue;
                    }
                    if aborted.skips(&batch) {
                        position = batch.next_offset();
                        continue;
                    }
                    let iter = batch
                        .decompressed_records(max_decompressed)
                        .map_err(|e| Error::Records(format!("{tp}: {e}")))?;
                    for record in iter {
                        let record = record.map_err(|e| Error::Records(format!("{tp}: {e}")))?;
                        if record.offset < position {
                            continue;
                        }
                        position = record.offset + 1;
                        out.push(ConsumerRecord {
                            topic: name.clone(),
                            partition: p.partition_index,
                            offset: record.offset,
                            timestamp: record.timestamp,
                            key: record.key,
                            value: record.value,
                            headers: record
                                .headers
                                .iter()
                                .map(|h| (String::from_utf8_lossy(&h.key).into_owned(), h.value))
                                .collect(),
                        });
                    }
                    position = position.max(batch.next_offset());
                }
                part.position = Some(position);
            }
        }
        Ok((out, reset))
    }

    /// Sets positions for owned partitions that have none: committed offset, else the reset
    /// policy (ListOffsets).
    async fn initialize_positions(&self) -> Result<()> {
        let missing: Vec<TopicPartition> = lock(&self.inner.state)
            .assigned
            .iter()
            .filter(|(_, p)| p.position.is_none())
            .map(|(tp, _)| tp.clone())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut need_reset = missing.clone();
        if self.inner.config.group_id.is_some() {
            match self.committed(&missing).await {
                Ok(committed) => {
                    let mut state = lock(&self.inner.state);
                    for (tp, offset) in committed {
                        if offset >= 0 {
                            if let Some(p) = state.assigned.get_mut(&tp)
                                && p.position.is_none()
                            {
                                p.position = Some(offset);
                            }
                            need_reset.retain(|t| *t != tp);
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "OffsetFetch failed; retrying on next poll");
                    return Ok(());
                }
            }
        }
        self.reset_positions(&need_reset).await
    }

    async fn reset_positions(&self, partitions: &[TopicPartition]) -> Result<()> {
        if partitions.is_empty() {
            return Ok(());
        }
        let timestamp = match self.inner.config.auto_offset_reset {
            OffsetReset::Earliest => -2,
            OffsetReset::Latest => -1,
            OffsetReset::None => {
                return Err(Error::Config(format!(
                    "no committed offset for {} and auto_offset_reset is None",
                    partitions
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        };
        let offsets = list_offsets(
            &self.inner.client,
            partitions,
            timestamp,
            self.inner.config.isolation_level.code(),
        )
        .await?;
        let mut state = lock(&self.inner.state);
        for (tp, offset) in offsets {
            if let Some(p) = state.assigned.get_mut(&tp)
                && p.position.is_none()
            {
                p.position = Some(offset);
            }
        }
        Ok(())
    }

    /// The committed offsets of `partitions` in the group (-1: none).
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, i64)>> {
        let group = self
            .inner
            .config
            .group_id
            .clone()
            .ok_or_else(|| Error::Config("committed offsets need a group_id".into()))?;
        let (member_id, epoch) = {
            let state = lock(&self.inner.state);
            (state.member.id.clone(), state.member.epoch)
        };
        let member = lock(&self.membership).is_some() && !member_id.is_empty();
        let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for tp in partitions {
            by_topic
                .entry(tp.topic.clone())
                .or_default()
                .push(tp.partition);
        }
        let mut ids = BTreeMap::new();
        for name in by_topic.keys() {
            ids.insert(name.clone(), self.inner.client.topic(name).await?.id);
        }
        let r = self
            .inner
            .client
            .request_coordinator(&group, |v| {
                if v >= 8 {
                    OffsetFetchRequest {
                        groups: vec![OffsetFetchRequestGroup {
                            group_id: group.as_str().into(),
                            member_id: member.then(|| member_id.as_str().into()),
                            member_epoch: if member { epoch } else { -1 },
                            topics: Some(
                                by_topic
                                    .iter()
                                    .map(|(name, parts)| OffsetFetchRequestTopics {
                                        name: name.as_str().into(),
                                        topic_id: ids.get(name).copied().unwrap_or_default(),
                                        partition_indexes: parts.clone(),
                                        ..Default::default()
                                    })
                                    .collect(),
                            ),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }
                } else {
                    OffsetFetchRequest {
                        group_id: group.as_str().into(),
                        topics: Some(
                            by_topic
                                .iter()
                                .map(|(name, parts)| OffsetFetchRequestTopic {
                                    name: name.as_str().into(),
                                    partition_indexes: parts.clone(),
                                    ..Default::default()
                                })
                                .collect(),
                        ),
                        ..Default::default()
                    }
                }
            })
            .await?;
        let mut out = Vec::new();
        if let Some(g) = r.groups.first() {
            if g.error_code != error_codes::NONE {
                return Err(Error::broker_for(
                    "OffsetFetch",
                    g.error_code,
                    format!("group {group}"),
                    None,
                ));
            }
            for t in &g.topics {
                let name = if t.name.is_empty() {
                    ids.iter()
                        .find(|(_, id)| **id == t.topic_id)
                        .map(|(n, _)| n.clone())
                        .unwrap_or_default()
                } else {
                    t.name.to_string()
                };
                for p in &t.partitions {
                    if p.error_code != error_codes::NONE {
                        return Err(Error::broker_for(
                            "OffsetFetch",
                            p.error_code,
                            format!("{name}-{}", p.partition_index),
                            None,
                        ));
                    }
                    out.push((
                        TopicPartition::new(name.clone(), p.partition_index),
                        p.committed_offset,
                    ));
                }
            }
        } else {
            if r.error_code != error_codes::NONE {
                return Err(Error::broker_for(
                    "OffsetFetch",
                    r.error_code,
                    format!("group {group}"),
                    None,
                ));
            }
            for t in &r.topics {
                for p in &t.partitions {
                    if p.error_code != error_codes::NONE {
                        return Err(Error::broker_for(
                            "OffsetFetch",
                            p.error_code,
                            format!("{}-{}", t.name, p.partition_index),
                            None,
                        ));
                    }
                    out.push((
                        TopicPartition::new(t.name.to_string(), p.partition_index),
                        p.committed_offset,
                    ));
                }
            }
        }
        Ok(out)
    }

    async fn maybe_auto_commit(&self) {
        if !self.inner.config.enable_auto_commit || self.inner.config.group_id.is_none() {
            return;
        }
        let due =
            lock(&self.inner.state).last_commit.elapsed() >= self.inner.config.auto_commit_interval;
        if due && let Err(e) = self.commit().await {
            tracing::debug!(error = %e, "auto-commit failed");
        }
    }

    /// Commits the current positions of every owned partition.
    pub async fn commit(&self) -> Result<()> {
        commit_positions(&self.inner, None).await
    }

    /// Commits the given offsets (the next offset to read, as Kafka does).
    pub async fn commit_offsets(&self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        commit_offsets(&self.inner, offsets).await
    }

    /// Leaves the group (revoke callback, final auto-commit, heartbeat with epoch -1) and stops.
    pub async fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let handle = lock(&self.membership).take();
        let mut result = Ok(());
        if let Some(handle) = handle {
            let owned = self.assignment();
            if !owned.is_empty() {
                let listener = lock(&self.inner.listener).clone();
                if let Some(l) = listener {
                    l.on_partitions_revoked(&owned);
                }
                if self.inner.config.enable_auto_commit {
                    result = commit_positions(&self.inner, None).await;
                }
            }
            self.inner.wake_heartbeat.notify_one();
            let _ = tokio::time::timeout(self.inner.client.config().request_timeout, handle).await;
        }
        self.inner.assignment_changed.notify_waiters();
        result
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if let Some(handle) = lock(&self.membership).take() {
            handle.abort();
        }
    }
}

/// Drops the records of aborted transactions from a read_committed Fetch, as Kafka's consumers do:
/// a transactional batch of a producer whose aborted transaction (listed by the broker with its
/// first offset) has started is skipped until that producer's abort marker; control batches
/// (markers) are never returned.
struct AbortedFilter {
    /// Aborted transactions not reached yet, by first offset (smallest last).
    pending: Vec<(i64, i64)>,
    /// Producers inside an aborted transaction at the current batch.
    active: std::collections::HashSet<i64>,
}

impl AbortedFilter {
    fn new(
        list: Vec<skiff_protocol::generated::fetch_response::AbortedTransaction>,
    ) -> AbortedFilter {
        let mut pending: Vec<(i64, i64)> = list
            .into_iter()
            .map(|a| (a.first_offset, a.producer_id))
            .collect();
        pending.sort_unstable_by(|a, b| b.cmp(a));
        AbortedFilter {
            pending,
            active: Default::default(),
        }
    }

    /// Whether `batch` is not for the application: a marker, or data of an aborted transaction.
    fn skips(&mut self, batch: &skiff_records::RecordBatch) -> bool {
        if batch.is_control() {
            if skiff_records::control_record_type(batch)
                == Some(skiff_records::ControlRecordType::Abort)
            {
                self.active.remove(&batch.producer_id());
            }
            return true;
        }
        if !batch.is_transactional() {
            return false;
        }
        while let Some(&(first, producer_id)) = self.pending.last() {
            if first > batch.last_offset() {
                break;
            }
            self.active.insert(producer_id);
            self.pending.pop();
        }
        self.active.contains(&batch.producer_id())
    }
}

/// ListOffsets for `partitions` at `timestamp` (-2 earliest, -1 latest), sent to each leader.
/// `isolation_level` 1 (read_committed) makes "latest" the last stable offset.
pub(crate) async fn list_offsets(
    client: &Client,
    partitions: &[TopicPartition],
    timestamp: i64,
    isolation_level: i8,
) -> Result<Vec<(TopicPartition, i64)>> {
    let mut by_node: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for tp in partitions {
        let topic = client.topic(&tp.topic).await?;
        let leader = topic
            .partition(tp.partition)
            .map(|p| p.leader)
            .ok_or_else(|| Error::UnknownPartition {
                topic: tp.topic.clone(),
                partition: tp.partition,
            })?;
        by_node
            .entry(leader)
            .or_default()
            .entry(tp.topic.clone())
            .or_default()
            .push(tp.partition);
    }
    let mut out = Vec::new();
    for (node, topics) in by_node {
        let r = client
            .request(node, |_| ListOffsetsRequest {
                replica_id: -1,
                isolation_level,
                topics: topics
                    .iter()
                    .map(|(name, parts)| ListOffsetsTopic {
                        name: name.as_str().into(),
                        partitions: parts
                            .iter()
                            .map(|p| ListOffsetsPartition {
                                partition_index: *p,
                                timestamp,
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .await?;
        for t in r.topics {
            for p in t.partitions {
                let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
                if p.error_code != error_codes::NONE {
                    return Err(Error::broker_for(
                        "ListOffsets",
                        p.error_code,
                        tp.to_string(),
                        None,
                    ));
                }
                out.push((tp, p.offset));
            }
        }
    }
    Ok(out)
}

async fn commit_positions(inner: &Arc<Inner>, only: Option<&[TopicPartition]>) -> Result<()> {
    let offsets: Vec<(TopicPartition, i64)> = {
        let state = lock(&inner.state);
        state
            .assigned
            .iter()
            .filter(|(tp, _)| only.is_none_or(|o| o.contains(tp)))
            .filter_map(|(tp, p)| p.position.map(|pos| (tp.clone(), pos)))
            .collect()
    };
    lock(&inner.state).last_commit = Instant::now();
    if offsets.is_empty() {
        return Ok(());
    }
    commit_offsets(inner, &offsets).await
}

async fn commit_offsets(inner: &Arc<Inner>, offsets: &[(TopicPartition, i64)]) -> Result<()> {
    let group = inner
        .config
        .group_id
        .clone()
        .ok_or_else(|| Error::Config("commit needs a group_id".into()))?;
    let (member_id, epoch, joined) = {
        let state = lock(&inner.state);
        (
            state.member.id.clone(),
            state.member.epoch,
            state.member.joined,
        )
    };
    // A plain (assigned) consumer commits as an admin: no member, epoch -1.
    let (member_id, epoch) = if joined {
        (member_id, epoch)
    } else {
        (String::new(), -1)
    };
    let mut by_topic: BTreeMap<String, Vec<(i32, i64)>> = BTreeMap::new();
    for (tp, offset) in offsets {
        by_topic
            .entry(tp.topic.clone())
            .or_default()
            .push((tp.partition, *offset));
    }
    let mut ids = BTreeMap::new();
    for name in by_topic.keys() {
        ids.insert(name.clone(), inner.client.topic(name).await?.id);
    }
    let r = inner
        .client
        .request_coordinator(&group, |_| OffsetCommitRequest {
            group_id: group.as_str().into(),
            generation_id_or_member_epoch: epoch,
            member_id: member_id.as_str().into(),
            group_instance_id: None,
            retention_time_ms: -1,
            topics: by_topic
                .iter()
                .map(|(name, parts)| OffsetCommitRequestTopic {
                    name: name.as_str().into(),
                    topic_id: ids.get(name).copied().unwrap_or_default(),
                    partitions: parts
                        .iter()
                        .map(|(p, o)| OffsetCommitRequestPartition {
                            partition_index: *p,
                            committed_offset: *o,
                            committed_leader_epoch: -1,
                            committed_metadata: Some("".into()),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .await?;
    for t in &r.topics {
        let name = if t.name.is_empty() {
            ids.iter()
                .find(|(_, id)| **id == t.topic_id)
                .map(|(n, _)| n.clone())
                .unwrap_or_default()
        } else {
            t.name.to_string()
        };
        for p in &t.partitions {
            if p.error_code != error_codes::NONE {
                if matches!(
                    p.error_code,
                    error_codes::NOT_COORDINATOR | error_codes::COORDINATOR_NOT_AVAILABLE
                ) {
                    inner.client.invalidate_coordinator(&group);
                }
                return Err(Error::broker_for(
                    "OffsetCommit",
                    p.error_code,
                    format!("{name}-{}", p.partition_index),
                    None,
                ));
            }
        }
    }
    Ok(())
}

/// The membership task: joins, heartbeats, reconciles, rejoins after fencing, leaves on close.
async fn membership_loop(inner: Arc<Inner>) {
    let Some(group) = inner.config.group_id.clone() else {
        return;
    };
    let client = inner.client.clone();
    let mut full = true;
    let mut failures: u32 = 0;
    loop {
        let closing = inner.closed.load(Ordering::Acquire);
        let result = heartbeat_once(&inner, &group, full, closing).await;
        if closing {
            if let Err(e) = result {
                tracing::debug!(error = %e, "leave heartbeat failed");
            }
            let mut state = lock(&inner.state);
            state.member.joined = false;
            state.member.epoch = -1;
            return;
        }
        let interval = match result {
            Ok(HeartbeatOutcome::Ok { acknowledge }) => {
                full = false;
                failures = 0;
                if acknowledge {
                    continue; // report the reconciled partitions right away
                }
                lock(&inner.state).member.heartbeat_interval
            }
            Ok(HeartbeatOutcome::Rejoin) => {
                full = true;
                failures = 0;
                continue;
            }
            Ok(HeartbeatOutcome::Retry(e)) | Err(e) => {
                tracing::debug!(group = %group, error = %e, "heartbeat failed; retrying with the same member ID");
                full = true;
                if matches!(
                    e,
                    Error::Connect { .. } | Error::ConnectionBroken { .. } | Error::Timeout { .. }
                ) || matches!(e.code(), Some(c) if crate::error::is_retriable_code(c))
                {
                    client.invalidate_coordinator(&group);
                }
                let delay = backoff(
                    client.config().retry_backoff,
                    Duration::from_secs(2),
                    failures,
                );
                failures = failures.saturating_add(1);
                delay
            }
            Ok(HeartbeatOutcome::Fatal(e)) => {
                tracing::warn!(group = %group, error = %e, "consumer group membership failed");
                lock(&inner.state).fatal = Some(e);
                inner.assignment_changed.notify_waiters();
                return;
            }
        };
        let wake = inner.wake_heartbeat.notified();
        tokio::select! {
            _ = wake => {}
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

enum HeartbeatOutcome {
    Ok { acknowledge: bool },
    Rejoin,
    Retry(Error),
    Fatal(Error),
}

async fn heartbeat_once(
    inner: &Arc<Inner>,
    group: &str,
    full: bool,
    leaving: bool,
) -> Result<HeartbeatOutcome> {
    let client = &inner.client;
    let node = client.coordinator(group).await?;
    let conn = client.connection(node).await?;
    let version = conn.version(ApiKey::ConsumerGroupHeartbeat)?;
    let (request, sent_owned) = {
        let mut state = lock(&inner.state);
        if state.member.version != Some(version) {
            // KIP-1082 (v1): the member ID is the client's instance ID, chosen by the client.
            // v0: the broker generates it on the first join.
            if version >= 1 {
                state.member.id = client.member_id();
            } else if state.member.version.is_some_and(|v| v >= 1) {
                state.member.id.clear();
            }
            state.member.version = Some(version);
        }
        if leaving {
            if state.member.id.is_empty() {
                return Ok(HeartbeatOutcome::Ok { acknowledge: false });
            }
            let request = ConsumerGroupHeartbeatRequest {
                group_id: group.into(),
                member_id: state.member.id.as_str().into(),
                member_epoch: -1,
                ..Default::default()
            };
            (request, None)
        } else {
            let owned: BTreeSet<TopicPartition> = state.assigned.keys().cloned().collect();
            let epoch = state.member.epoch;
            let send_owned = full || state.reported.as_ref() != Some(&owned);
            let mut by_topic: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
            for (tp, p) in &state.assigned {
                by_topic.entry(p.topic_id).or_default().push(tp.partition);
            }
            let request = ConsumerGroupHeartbeatRequest {
                group_id: group.into(),
                member_id: state.member.id.as_str().into(),
                member_epoch: epoch,
                rebalance_timeout_ms: if full {
                    inner
                        .config
                        .rebalance_timeout
                        .as_millis()
                        .min(i32::MAX as u128) as i32
                } else {
                    -1
                },
                subscribed_topic_names: (full || !state.member.joined).then(|| {
                    state
                        .subscription
                        .iter()
                        .map(|t| t.as_str().into())
                        .collect()
                }),
                server_assignor: if full {
                    inner.config.server_assignor.as_deref().map(Into::into)
                } else {
                    None
                },
                topic_partitions: send_owned.then(|| {
                    if epoch == 0 {
                        Vec::new()
                    } else {
                        by_topic
                            .into_iter()
                            .map(|(topic_id, partitions)| HbTopicPartitions {
                                topic_id,
                                partitions,
                                ..Default::default()
                            })
                            .collect()
                    }
                }),
                ..Default::default()
            };
            (request, send_owned.then_some(owned))
        }
    };
    let r = conn
        .request(request, version, client.config().request_timeout)
        .await?;
    let message = r.error_message.as_ref().map(|m| m.to_string());
    match r.error_code {
        error_codes::NONE => {}
        error_codes::FENCED_MEMBER_EPOCH | error_codes::UNKNOWN_MEMBER_ID => {
            if leaving {
                return Ok(HeartbeatOutcome::Ok { acknowledge: false });
            }
            let lost: Vec<TopicPartition> = {
                let mut state = lock(&inner.state);
                state.member.epoch = 0;
                state.member.joined = false;
                state.member.fencings += 1;
                state.reported = None;
                let lost = state.assigned.keys().cloned().collect();
                state.assigned.clear();
                lost
            };
            tracing::info!(group, code = r.error_code, "member fenced; rejoining with the same member ID");
            if !lost.is_empty() {
                let listener = lock(&inner.listener).clone();
                if let Some(l) = listener {
                    l.on_partitions_lost(&lost);
                }
            }
            inner.assignment_changed.notify_waiters();
            return Ok(HeartbeatOutcome::Rejoin);
        }
        error_codes::NOT_COORDINATOR
        | error_codes::COORDINATOR_NOT_AVAILABLE
        | 14 // COORDINATOR_LOAD_IN_PROGRESS
        | error_codes::THROTTLING_QUOTA_EXCEEDED => {
            client.invalidate_coordinator(group);
            return Ok(HeartbeatOutcome::Retry(Error::broker_for(
                "ConsumerGroupHeartbeat",
                r.error_code,
                format!("group {group}"),
                message,
            )));
        }
        code => {
            return Ok(HeartbeatOutcome::Fatal(Error::broker_for(
                "ConsumerGroupHeartbeat",
                code,
                format!("group {group}"),
                message,
            )));
        }
    }
    if leaving {
        return Ok(HeartbeatOutcome::Ok { acknowledge: false });
    }
    {
        let mut state = lock(&inner.state);
        if let Some(id) = &r.member_id {
            if version == 0 {
                state.member.id = id.to_string();
            } else if id.as_ref() as &str != state.member.id {
                tracing::warn!(ours = %state.member.id, theirs = %id, "broker answered a different member ID; keeping ours (KIP-1082)");
            }
        }
        state.member.epoch = r.member_epoch;
        state.member.joined = true;
        state.member.heartbeats += 1;
        if r.heartbeat_interval_ms > 0 {
            state.member.heartbeat_interval = Duration::from_millis(r.heartbeat_interval_ms as u64);
        } else if state.member.heartbeat_interval.is_zero() {
            state.member.heartbeat_interval = Duration::from_secs(5);
        }
        if let Some(owned) = sent_owned {
            state.reported = Some(owned);
        }
    }
    let acknowledge = match r.assignment {
        Some(assignment) => {
            let target: Vec<(Uuid, Vec<i32>)> = assignment
                .topic_partitions
                .into_iter()
                .map(|t| (t.topic_id, t.partitions))
                .collect();
            reconcile(inner, target).await
        }
        None => false,
    };
    Ok(HeartbeatOutcome::Ok { acknowledge })
}

/// Applies a target assignment: revoke first (callback + commit), then add. Returns whether the
/// owned set changed (so an acknowledging heartbeat is due).
async fn reconcile(inner: &Arc<Inner>, target: Vec<(Uuid, Vec<i32>)>) -> bool {
    let mut wanted: BTreeMap<TopicPartition, Uuid> = BTreeMap::new();
    for (id, partitions) in target {
        let name = match inner.client.topic_name(id).await {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(topic_id = %id, error = %e, "assigned topic not in metadata yet");
                continue;
            }
        };
        for p in partitions {
            wanted.insert(TopicPartition::new(name.clone(), p), id);
        }
    }
    let (revoked, added): (Vec<TopicPartition>, Vec<TopicPartition>) = {
        let state = lock(&inner.state);
        (
            state
                .assigned
                .keys()
                .filter(|tp| !wanted.contains_key(*tp))
                .cloned()
                .collect(),
            wanted
                .keys()
                .filter(|tp| !state.assigned.contains_key(*tp))
                .cloned()
                .collect(),
        )
    };
    if revoked.is_empty() && added.is_empty() {
        return false;
    }
    let listener = lock(&inner.listener).clone();
    if !revoked.is_empty() {
        if let Some(l) = &listener {
            l.on_partitions_revoked(&revoked);
        }
        if inner.config.enable_auto_commit
            && let Err(e) = commit_positions(inner, Some(&revoked)).await
        {
            tracing::debug!(error = %e, "commit before revocation failed");
        }
        let mut state = lock(&inner.state);
        for tp in &revoked {
            state.assigned.remove(tp);
        }
    }
    if !added.is_empty() {
        {
            let mut state = lock(&inner.state);
            for tp in &added {
                let topic_id = wanted.get(tp).copied().unwrap_or_default();
                state.assigned.insert(
                    tp.clone(),
                    PartState {
                        topic_id,
                        position: None,
                        paused: false,
                        high_watermark: -1,
                    },
                );
            }
        }
        if let Some(l) = &listener {
            l.on_partitions_assigned(&added);
        }
    }
    inner.assignment_changed.notify_waiters();
    true
}
