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
//!
//! This module owns the public types and the [`Consumer`] handle (subscribe/assign, positions,
//! seek, pause/resume, close); [`fetch`] owns `poll` and Fetch, [`offsets`] positions from
//! committed offsets or ListOffsets and commits, [`membership`] the group protocol task.

mod fetch;
mod membership;
mod offsets;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use skiff_protocol::Uuid;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::util::lock;

use membership::membership_loop;
pub(crate) use offsets::commit_as;
use offsets::commit_positions;
pub(crate) use offsets::list_offsets;

pub use crate::topic_partition::TopicPartition;

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
    pub fn group_metadata(&self) -> Option<GroupMetadata> {
        let group_id = self.inner.config.group_id.clone()?;
        let state = lock(&self.inner.state);
        Some(GroupMetadata {
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

/// What `send_offsets_to_transaction` needs of the consumer whose progress it commits (Kafka's
/// `ConsumerGroupMetadata`): the group, and the member ID with its generation (classic) or
/// member epoch (KIP-848), which the coordinator checks; `-1`/empty for a consumer that is not a
/// group member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    pub group_id: String,
    pub member_id: String,
    pub generation_id: i32,
}
