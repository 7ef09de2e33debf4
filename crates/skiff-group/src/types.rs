//! Types shared by the consumer-group and classic-group state machines.

use std::collections::BTreeMap;

use skiff_protocol::Uuid;

/// The topics a coordinator can assign, as the broker's metadata shows them now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicsImage {
    /// Topic name -> (topic ID, partition count).
    pub by_name: BTreeMap<String, (Uuid, i32)>,
}

impl TopicsImage {
    pub fn by_id(&self, id: Uuid) -> Option<(&str, i32)> {
        self.by_name
            .iter()
            .find(|(_, (topic_id, _))| *topic_id == id)
            .map(|(name, (_, partitions))| (name.as_str(), *partitions))
    }

    pub fn insert(&mut self, name: &str, id: Uuid, partitions: i32) {
        self.by_name.insert(name.to_string(), (id, partitions));
    }
}

/// Group settings, with Kafka's broker config names and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.consumer.session.timeout.ms` (45 s).
    pub consumer_session_timeout_ms: i64,
    /// `group.consumer.heartbeat.interval.ms` (5 s).
    pub consumer_heartbeat_interval_ms: i64,
    /// `group.consumer.max.size` (unbounded by default in Kafka: i32::MAX).
    pub consumer_max_size: usize,
    /// `group.consumer.assignors`: the first is the default (`uniform`).
    pub consumer_assignors: Vec<String>,
    /// `group.classic.min.session.timeout.ms` / `group.min.session.timeout.ms` (6 s).
    pub classic_min_session_timeout_ms: i64,
    /// `group.max.session.timeout.ms` (30 min).
    pub classic_max_session_timeout_ms: i64,
    /// `group.initial.rebalance.delay.ms` (3 s).
    pub classic_initial_rebalance_delay_ms: i64,
    /// `group.max.size` for classic groups (i32::MAX).
    pub classic_max_size: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            consumer_max_size: i32::MAX as usize,
            consumer_assignors: vec!["uniform".into(), "range".into()],
            classic_min_session_timeout_ms: 6_000,
            classic_max_session_timeout_ms: 1_800_000,
            classic_initial_rebalance_delay_ms: 3_000,
            classic_max_size: i32::MAX as usize,
        }
    }
}

/// A request the coordinator refuses: a Kafka error code and a message for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (error {code})")]
pub struct GroupError {
    pub code: i16,
    pub message: String,
}

impl GroupError {
    pub fn new(code: i16, message: impl Into<String>) -> Self {
        GroupError {
            code,
            message: message.into(),
        }
    }
}
