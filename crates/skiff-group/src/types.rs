//! Types shared by the consumer-group, share-group and classic-group state machines.

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
    /// `group.consumer.min.session.timeout.ms` (45 s): the lowest group-level
    /// `consumer.session.timeout.ms` override.
    pub consumer_min_session_timeout_ms: i64,
    /// `group.consumer.max.session.timeout.ms` (60 s): the highest group-level override.
    pub consumer_max_session_timeout_ms: i64,
    /// `group.consumer.min.heartbeat.interval.ms` (5 s): the lowest group-level
    /// `consumer.heartbeat.interval.ms` override.
    pub consumer_min_heartbeat_interval_ms: i64,
    /// `group.consumer.max.heartbeat.interval.ms` (15 s): the highest group-level override.
    pub consumer_max_heartbeat_interval_ms: i64,
    /// `group.consumer.max.size` (unbounded by default in Kafka: i32::MAX).
    pub consumer_max_size: usize,
    /// `group.consumer.assignors`: the first is the default (`uniform`).
    pub consumer_assignors: Vec<String>,
    /// `group.share.session.timeout.ms` (45 s): a KIP-932 share group member that sends no
    /// heartbeat for this long is removed.
    pub share_session_timeout_ms: i64,
    /// `group.share.heartbeat.interval.ms` (5 s): the interval share group members are told
    /// to heartbeat at.
    pub share_heartbeat_interval_ms: i64,
    /// `group.share.min.session.timeout.ms` (45 s): the lowest group-level
    /// `share.session.timeout.ms` override.
    pub share_min_session_timeout_ms: i64,
    /// `group.share.max.session.timeout.ms` (60 s): the highest group-level override.
    pub share_max_session_timeout_ms: i64,
    /// `group.share.min.heartbeat.interval.ms` (5 s): the lowest group-level
    /// `share.heartbeat.interval.ms` override.
    pub share_min_heartbeat_interval_ms: i64,
    /// `group.share.max.heartbeat.interval.ms` (15 s): the highest group-level override.
    pub share_max_heartbeat_interval_ms: i64,
    /// `group.share.max.size` (200; Kafka accepts 1 to 1000).
    pub share_max_size: usize,
    /// `group.share.initialize.retry.interval.ms` (30 s, an internal Kafka config): how long a
    /// request to initialize share-partition state may stay unanswered before the coordinator
    /// asks again. Kafka uses at least `offsets.commit.timeout.ms` (5 s); so does the broker
    /// that sets this.
    pub share_initialize_retry_interval_ms: i64,
    /// `group.share.record.lock.duration.ms` (30 s; Kafka accepts 1 s to 1 h): how long a share
    /// group member holds an acquired record.
    pub share_record_lock_duration_ms: i64,
    /// `group.share.min.record.lock.duration.ms` (15 s): the lowest group-level
    /// `share.record.lock.duration.ms` override.
    pub share_min_record_lock_duration_ms: i64,
    /// `group.share.max.record.lock.duration.ms` (60 s): the highest group-level override.
    pub share_max_record_lock_duration_ms: i64,
    /// `group.share.delivery.count.limit` (5; Kafka accepts 2 to 10): deliveries of a record
    /// before it is archived.
    pub share_delivery_count_limit: i64,
    /// `group.share.min.delivery.count.limit` (2): the lowest group-level
    /// `share.delivery.count.limit` override (KIP-1240).
    pub share_min_delivery_count_limit: i64,
    /// `group.share.max.delivery.count.limit` (10): the highest group-level override.
    pub share_max_delivery_count_limit: i64,
    /// `group.share.partition.max.record.locks` (2000; Kafka accepts 100 to 10,000): records a
    /// share partition keeps in flight at most.
    pub share_partition_max_record_locks: i64,
    /// `group.classic.min.session.timeout.ms` / `group.min.session.timeout.ms` (6 s).
    pub classic_min_session_timeout_ms: i64,
    /// `group.max.session.timeout.ms` (30 min).
    pub classic_max_session_timeout_ms: i64,
    /// `group.initial.rebalance.delay.ms` (3 s).
    pub classic_initial_rebalance_delay_ms: i64,
    /// `group.max.size` for classic groups (i32::MAX).
    pub classic_max_size: usize,
    /// `group.consumer.migration.policy`: which online conversions between classic and KIP-848
    /// consumer groups are allowed (Kafka 4.x default: both ways).
    pub consumer_migration_policy: MigrationPolicy,
}

/// Kafka's `ConsumerGroupMigrationPolicy`: a live classic group whose members restart with the
/// consumer protocol becomes a consumer group (upgrade), and a consumer group whose last
/// consumer-protocol member leaves while classic members remain becomes a classic group again
/// (downgrade).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MigrationPolicy {
    /// Both conversions.
    #[default]
    Bidirectional,
    /// Classic to consumer only.
    Upgrade,
    /// Consumer to classic only.
    Downgrade,
    /// Neither: a non-empty group of the other kind refuses the member.
    Disabled,
}

impl MigrationPolicy {
    /// Kafka's config value (`bidirectional`, `upgrade`, `downgrade`, `disabled`).
    pub fn name(self) -> &'static str {
        match self {
            MigrationPolicy::Bidirectional => "bidirectional",
            MigrationPolicy::Upgrade => "upgrade",
            MigrationPolicy::Downgrade => "downgrade",
            MigrationPolicy::Disabled => "disabled",
        }
    }

    /// Parses a config value, case-insensitively as Kafka does.
    pub fn parse(value: &str) -> Option<MigrationPolicy> {
        [
            MigrationPolicy::Bidirectional,
            MigrationPolicy::Upgrade,
            MigrationPolicy::Downgrade,
            MigrationPolicy::Disabled,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(value.trim()))
    }

    pub fn upgrade_enabled(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Upgrade
        )
    }

    pub fn downgrade_enabled(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Downgrade
        )
    }
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            consumer_min_session_timeout_ms: 45_000,
            consumer_max_session_timeout_ms: 60_000,
            consumer_min_heartbeat_interval_ms: 5_000,
            consumer_max_heartbeat_interval_ms: 15_000,
            consumer_max_size: i32::MAX as usize,
            consumer_assignors: vec!["uniform".into(), "range".into()],
            share_session_timeout_ms: 45_000,
            share_heartbeat_interval_ms: 5_000,
            share_min_session_timeout_ms: 45_000,
            share_max_session_timeout_ms: 60_000,
            share_min_heartbeat_interval_ms: 5_000,
            share_max_heartbeat_interval_ms: 15_000,
            share_max_size: 200,
            share_initialize_retry_interval_ms: 30_000,
            share_record_lock_duration_ms: 30_000,
            share_min_record_lock_duration_ms: 15_000,
            share_max_record_lock_duration_ms: 60_000,
            share_delivery_count_limit: 5,
            share_min_delivery_count_limit: 2,
            share_max_delivery_count_limit: 10,
            share_partition_max_record_locks: 2_000,
            classic_min_session_timeout_ms: 6_000,
            classic_max_session_timeout_ms: 1_800_000,
            classic_initial_rebalance_delay_ms: 3_000,
            classic_max_size: i32::MAX as usize,
            consumer_migration_policy: MigrationPolicy::Bidirectional,
        }
    }
}

impl GroupConfig {
    /// Group-level config key (Kafka's `GroupConfig`) for the KIP-848 session timeout.
    pub const CONSUMER_SESSION_TIMEOUT_MS: &'static str = "consumer.session.timeout.ms";
    /// Group-level config key for the KIP-848 heartbeat interval.
    pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &'static str = "consumer.heartbeat.interval.ms";
    /// Group-level config key for the KIP-932 share group session timeout.
    pub const SHARE_SESSION_TIMEOUT_MS: &'static str = "share.session.timeout.ms";
    /// Group-level config key for the KIP-932 share group heartbeat interval.
    pub const SHARE_HEARTBEAT_INTERVAL_MS: &'static str = "share.heartbeat.interval.ms";
    /// Group-level config key for the KIP-932 record lock duration.
    pub const SHARE_RECORD_LOCK_DURATION_MS: &'static str = "share.record.lock.duration.ms";
    /// Group-level config key for the KIP-932 delivery count limit (KIP-1240).
    pub const SHARE_DELIVERY_COUNT_LIMIT: &'static str = "share.delivery.count.limit";

    /// The bounds a group-level `consumer.session.timeout.ms` must lie within: the broker's
    /// `group.consumer.min/max.session.timeout.ms`, widened to include the broker's own
    /// session timeout (Kafka refuses to start when it lies outside them; Skiff does not
    /// refuse a broker whose timeout was set without the bounds).
    pub fn consumer_session_timeout_bounds(&self) -> (i64, i64) {
        (
            self.consumer_min_session_timeout_ms
                .min(self.consumer_session_timeout_ms),
            self.consumer_max_session_timeout_ms
                .max(self.consumer_session_timeout_ms),
        )
    }

    /// The bounds of a group-level `consumer.heartbeat.interval.ms`, as for the session timeout.
    pub fn consumer_heartbeat_interval_bounds(&self) -> (i64, i64) {
        (
            self.consumer_min_heartbeat_interval_ms
                .min(self.consumer_heartbeat_interval_ms),
            self.consumer_max_heartbeat_interval_ms
                .max(self.consumer_heartbeat_interval_ms),
        )
    }

    /// The bounds of a group-level `share.session.timeout.ms`, as for consumer groups.
    pub fn share_session_timeout_bounds(&self) -> (i64, i64) {
        (
            self.share_min_session_timeout_ms
                .min(self.share_session_timeout_ms),
            self.share_max_session_timeout_ms
                .max(self.share_session_timeout_ms),
        )
    }

    /// The bounds of a group-level `share.heartbeat.interval.ms`, as for consumer groups.
    pub fn share_heartbeat_interval_bounds(&self) -> (i64, i64) {
        (
            self.share_min_heartbeat_interval_ms
                .min(self.share_heartbeat_interval_ms),
            self.share_max_heartbeat_interval_ms
                .max(self.share_heartbeat_interval_ms),
        )
    }

    /// The bounds of a group-level `share.record.lock.duration.ms`, as for the session timeout.
    pub fn share_record_lock_duration_bounds(&self) -> (i64, i64) {
        (
            self.share_min_record_lock_duration_ms
                .min(self.share_record_lock_duration_ms),
            self.share_max_record_lock_duration_ms
                .max(self.share_record_lock_duration_ms),
        )
    }

    /// The bounds of a group-level `share.delivery.count.limit`, as for the session timeout.
    pub fn share_delivery_count_limit_bounds(&self) -> (i64, i64) {
        (
            self.share_min_delivery_count_limit
                .min(self.share_delivery_count_limit),
            self.share_max_delivery_count_limit
                .max(self.share_delivery_count_limit),
        )
    }

    /// This config with a group's overrides (Kafka's group config keys) applied: the keys the
    /// coordinator acts on replace the broker's values; other keys are ignored.
    pub fn with_overrides<'a>(
        &self,
        overrides: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> GroupConfig {
        let mut config = self.clone();
        for (key, value) in overrides {
            let Ok(v) = value.trim().parse::<i64>() else {
                continue;
            };
            match key {
                Self::CONSUMER_SESSION_TIMEOUT_MS => config.consumer_session_timeout_ms = v,
                Self::CONSUMER_HEARTBEAT_INTERVAL_MS => config.consumer_heartbeat_interval_ms = v,
                Self::SHARE_SESSION_TIMEOUT_MS => config.share_session_timeout_ms = v,
                Self::SHARE_HEARTBEAT_INTERVAL_MS => config.share_heartbeat_interval_ms = v,
                Self::SHARE_RECORD_LOCK_DURATION_MS => config.share_record_lock_duration_ms = v,
                Self::SHARE_DELIVERY_COUNT_LIMIT => config.share_delivery_count_limit = v,
                _ => {}
            }
        }
        config
    }
}

/// A request the coordinator refuses: a Kafka error code and a message for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (error {code})")]
pub struct GroupError {
    pub code: skiff_protocol::ErrorCode,
    pub message: String,
}

impl GroupError {
    pub fn new(code: impl Into<skiff_protocol::ErrorCode>, message: impl Into<String>) -> Self {
        GroupError {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl From<GroupError> for skiff_protocol::KafkaError {
    fn from(e: GroupError) -> Self {
        skiff_protocol::KafkaError::new(e.code, e.message)
    }
}
