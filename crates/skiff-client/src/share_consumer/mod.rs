//! The share consumer (KIP-932, "queues for Kafka"): a member of a share group, where the
//! brokers hand each record to one member at a time and the members acknowledge them one by one,
//! instead of owning partitions and committing offsets.
//!
//! Modelled on Kafka 4.2's `KafkaShareConsumer`:
//! - **membership** (a background task, [`membership`]): ShareGroupHeartbeat v1 with the client's
//!   instance ID as member ID (KIP-1313, as the KIP-848 [`crate::Consumer`] does), the subscribed
//!   topic names on join and whenever they changed or a heartbeat failed, heartbeats at the
//!   interval the broker gives, the assignment the broker sends applied as is (share groups
//!   revoke nothing first: partitions are shared), a rejoin with epoch 0 and the same ID after
//!   FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID, and a leave with epoch -1 on [`ShareConsumer::close`];
//! - **fetching** ([`fetch`]): [`ShareConsumer::poll`] sends one ShareFetch to the leader of each
//!   assigned partition, in one share session per broker ([`session`]: epoch 0 opens it with every
//!   partition, later requests add and forget partitions as the assignment changes), and returns
//!   only the records inside the AcquiredRecords ranges, each with its delivery count;
//! - **acknowledgement** ([`acks`]), as Kafka's `share.acknowledgement.mode`:
//!   [`AcknowledgementMode::Implicit`] (the default) accepts the records of a poll at the next
//!   poll, [`ShareConsumer::commit_sync`] or [`ShareConsumer::close`];
//!   [`AcknowledgementMode::Explicit`] takes [`ShareConsumer::acknowledge`] for each record
//!   (accept, release or reject) and refuses to poll again while a record of the last poll is
//!   unacknowledged. Acknowledgements ride on the next ShareFetch to the broker that delivered
//!   the record; `commit_sync` sends them at once with ShareAcknowledge and returns each
//!   partition's result; `close` sends what is left with ShareAcknowledge at epoch -1, closing each
//!   share session, then leaves the group. Acquired offsets that hold no record (control
//!   records, compacted ones) are acknowledged as gaps, as Kafka's client does; acquired records
//!   whose batch was not in the response are released.
//!
//! Acknowledgements can only travel in an open share session: when a session is lost (a broken
//! connection, SHARE_SESSION_NOT_FOUND) the acknowledgements waiting for that broker are dropped
//! with a warning, and the broker redelivers those records once their acquisition locks expire
//! (Kafka's client does the same).

mod acks;
mod fetch;
mod membership;
mod session;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use skiff_protocol::Uuid;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::consumer::TopicPartition;
use crate::error::{Error, Result};
use crate::util::lock;

pub use acks::AcknowledgeType;
use acks::Acknowledgements;
pub use fetch::AcknowledgementResults;
use session::ShareSession;

/// Kafka's `share.acknowledgement.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AcknowledgementMode {
    /// Every record a poll returned is accepted by the next poll, `commit_sync` or `close`.
    #[default]
    Implicit,
    /// Each record is acknowledged with [`ShareConsumer::acknowledge`] before the next poll.
    Explicit,
}

/// Share consumer settings.
#[derive(Debug, Clone)]
pub struct ShareConsumerConfig {
    /// The share group to join.
    pub group_id: String,
    pub acknowledgement_mode: AcknowledgementMode,
    /// ShareFetch long-poll wait (`fetch.max.wait.ms`).
    pub fetch_max_wait: Duration,
    pub fetch_min_bytes: i32,
    pub fetch_max_bytes: i32,
    /// Records one ShareFetch asks for (`max.poll.records`; also its `BatchSize`).
    pub max_poll_records: i32,
}

impl ShareConsumerConfig {
    pub fn new(group_id: impl Into<String>) -> ShareConsumerConfig {
        ShareConsumerConfig {
            group_id: group_id.into(),
            acknowledgement_mode: AcknowledgementMode::Implicit,
            fetch_max_wait: Duration::from_millis(500),
            fetch_min_bytes: 1,
            fetch_max_bytes: 50 * 1024 * 1024,
            max_poll_records: 500,
        }
    }
}

/// A record delivered to a share consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// How many times the record has been delivered, this delivery included (1 the first time).
    pub delivery_count: i16,
}

/// The member as the heartbeat task knows it.
#[derive(Debug, Clone, Default)]
struct Member {
    epoch: i32,
    heartbeat_interval: Duration,
    joined: bool,
    /// Whether the coordinator has the current subscription (sent with a successful heartbeat).
    subscription_sent: bool,
    heartbeats: u64,
    fencings: u64,
}

/// The records of the last poll from one broker and partition not acknowledged yet.
#[derive(Debug, Clone, Default)]
struct InFlight {
    topic_id: Uuid,
    offsets: BTreeSet<i64>,
}

/// Acknowledgements for one broker and partition, not sent yet.
#[derive(Debug, Clone, Default)]
struct Pending {
    topic_id: Uuid,
    acks: Acknowledgements,
}

/// (leader node, partition).
type NodePartition = (i32, TopicPartition);

struct State {
    subscription: Vec<String>,
    /// The assignment: partition -> topic ID.
    assigned: BTreeMap<TopicPartition, Uuid>,
    member: Member,
    fatal: Option<Error>,
    in_flight: BTreeMap<NodePartition, InFlight>,
    pending: BTreeMap<NodePartition, Pending>,
    /// An error met by a poll that also returned records: returned by the next poll.
    deferred: Option<Error>,
    acquisition_lock_timeout: Option<Duration>,
}

impl State {
    fn queue_ack(
        &mut self,
        node: i32,
        tp: &TopicPartition,
        topic_id: Uuid,
        f: i64,
        l: i64,
        code: i8,
    ) {
        let entry = self.pending.entry((node, tp.clone())).or_default();
        entry.topic_id = topic_id;
        entry.acks.add_range(f, l, code);
    }

    /// Moves every in-flight record to the pending acknowledgements with `code`.
    fn acknowledge_in_flight(&mut self, code: i8) {
        let in_flight = std::mem::take(&mut self.in_flight);
        for ((node, tp), f) in in_flight {
            for offset in f.offsets {
                self.queue_ack(node, &tp, f.topic_id, offset, offset, code);
            }
        }
    }
}

struct Inner {
    client: Client,
    config: ShareConsumerConfig,
    state: Mutex<State>,
    /// The share session with each broker. Held across each poll, commit and close, so their
    /// requests to one broker go out one at a time, in epoch order.
    sessions: tokio::sync::Mutex<BTreeMap<i32, ShareSession>>,
    wake_heartbeat: Notify,
    assignment_changed: Notify,
    /// `close` was called: polls and commits are refused.
    closed: AtomicBool,
    /// The membership task is to leave the group (after the final acknowledgements).
    leaving: AtomicBool,
}

/// A share group member. See the module docs.
pub struct ShareConsumer {
    inner: Arc<Inner>,
    membership: Mutex<Option<JoinHandle<()>>>,
}

impl ShareConsumer {
    pub fn new(client: Client, config: ShareConsumerConfig) -> Result<ShareConsumer> {
        if config.group_id.trim().is_empty() {
            return Err(Error::Config("group_id must not be blank".into()));
        }
        if config.max_poll_records < 1 {
            return Err(Error::Config("max_poll_records must be at least 1".into()));
        }
        Ok(ShareConsumer {
            inner: Arc::new(Inner {
                client,
                config,
                state: Mutex::new(State {
                    subscription: Vec::new(),
                    assigned: BTreeMap::new(),
                    member: Member::default(),
                    fatal: None,
                    in_flight: BTreeMap::new(),
                    pending: BTreeMap::new(),
                    deferred: None,
                    acquisition_lock_timeout: None,
                }),
                sessions: tokio::sync::Mutex::new(BTreeMap::new()),
                wake_heartbeat: Notify::new(),
                assignment_changed: Notify::new(),
                closed: AtomicBool::new(false),
                leaving: AtomicBool::new(false),
            }),
            membership: Mutex::new(None),
        })
    }

    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    pub fn group_id(&self) -> &str {
        &self.inner.config.group_id
    }

    pub fn acknowledgement_mode(&self) -> AcknowledgementMode {
        self.inner.config.acknowledgement_mode
    }

    /// Subscribes to `topics` (replacing the previous subscription) and joins the group.
    pub fn subscribe(&self, topics: &[&str]) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("share consumer"));
        }
        if topics.iter().any(|t| t.trim().is_empty()) {
            return Err(Error::Config("topic names must not be blank".into()));
        }
        {
            let mut state = lock(&self.inner.state);
            state.subscription = topics.iter().map(|t| t.to_string()).collect();
            state.member.subscription_sent = false;
        }
        let mut membership = lock(&self.membership);
        if membership.is_none() {
            *membership = Some(tokio::spawn(membership::membership_loop(Arc::clone(
                &self.inner,
            ))));
        } else {
            self.inner.wake_heartbeat.notify_one();
        }
        Ok(())
    }

    /// The subscribed topics.
    pub fn subscription(&self) -> Vec<String> {
        lock(&self.inner.state).subscription.clone()
    }

    /// The partitions currently assigned (shared with other members of the group).
    pub fn assignment(&self) -> Vec<TopicPartition> {
        lock(&self.inner.state).assigned.keys().cloned().collect()
    }

    /// The member ID: the client's instance ID in Kafka's text form (KIP-1313).
    pub fn member_id(&self) -> String {
        self.inner.client.member_id()
    }

    pub fn member_epoch(&self) -> i32 {
        lock(&self.inner.state).member.epoch
    }

    /// How many times the member was fenced (or found unknown) and rejoined.
    pub fn fencing_count(&self) -> u64 {
        lock(&self.inner.state).member.fencings
    }

    /// How long the broker holds the records it hands out (the last ShareFetch's
    /// `AcquisitionLockTimeoutMs`); `None` before the first answer.
    pub fn acquisition_lock_timeout(&self) -> Option<Duration> {
        lock(&self.inner.state).acquisition_lock_timeout
    }

    /// Acknowledges a record of the last poll ([`AcknowledgementMode::Explicit`] only). The
    /// acknowledgement is sent with the next poll or [`ShareConsumer::commit_sync`]. A record
    /// can be acknowledged once.
    pub fn acknowledge(&self, record: &ShareRecord, kind: AcknowledgeType) -> Result<()> {
        if self.inner.config.acknowledgement_mode != AcknowledgementMode::Explicit {
            return Err(Error::Acknowledgement(
                "acknowledge needs AcknowledgementMode::Explicit (share.acknowledgement.mode=explicit)"
                    .into(),
            ));
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("share consumer"));
        }
        let tp = TopicPartition::new(record.topic.clone(), record.partition);
        let mut state = lock(&self.inner.state);
        let key = state
            .in_flight
            .iter()
            .find(|((_, t), f)| *t == tp && f.offsets.contains(&record.offset))
            .map(|(k, f)| (k.clone(), f.topic_id));
        let Some(((node, tp), topic_id)) = key else {
            return Err(Error::Acknowledgement(format!(
                "{tp} offset {} is not waiting for an acknowledgement (not delivered by the last \
                 poll, or acknowledged already)",
                record.offset
            )));
        };
        if let Some(f) = state.in_flight.get_mut(&(node, tp.clone())) {
            f.offsets.remove(&record.offset);
            if f.offsets.is_empty() {
                state.in_flight.remove(&(node, tp.clone()));
            }
        }
        state.queue_ack(
            node,
            &tp,
            topic_id,
            record.offset,
            record.offset,
            kind.code(),
        );
        Ok(())
    }

    /// Records of the last poll not acknowledged yet (explicit mode).
    pub fn unacknowledged(&self) -> usize {
        lock(&self.inner.state)
            .in_flight
            .values()
            .map(|f| f.offsets.len())
            .sum()
    }

    /// Leaves the group: acknowledges what is left (implicit mode: accepts the last poll's
    /// records; explicit mode: releases the ones not acknowledged) with ShareAcknowledge at
    /// epoch -1, which closes each share session, then sends the leave heartbeat (epoch -1).
    /// Returns the first acknowledgement that failed, if any; the group is left either way.
    pub async fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.assignment_changed.notify_waiters();
        let result = self.close_sessions().await;
        self.inner.leaving.store(true, Ordering::Release);
        let handle = lock(&self.membership).take();
        if let Some(mut handle) = handle {
            self.inner.wake_heartbeat.notify_one();
            let timeout = self.inner.client.config().request_timeout;
            if tokio::time::timeout(timeout, &mut handle).await.is_err() {
                tracing::debug!(group = %self.inner.config.group_id, "leave heartbeat did not finish in time");
                handle.abort();
            }
        }
        result
    }
}

impl Drop for ShareConsumer {
    fn drop(&mut self) {
        if let Some(handle) = lock(&self.membership).take() {
            handle.abort();
        }
    }
}
