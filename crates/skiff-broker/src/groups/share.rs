//! KIP-932 share groups in the group coordinator: the persisted share-partition state and the
//! seam the share-partition leader ([`crate::share`], behind ShareFetch/ShareAcknowledge) reads
//! and writes it through.
//!
//! Skiff is its own share coordinator: where Kafka keeps share-partition state in
//! `__share_group_state` (InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
//! DeleteShareGroupState), Skiff keeps it in the group coordinator's store beside the group
//! records, one record per share partition:
//!
//! | key | value |
//! |---|---|
//! | `s\0<group ID>\0<topic ID>\0<partition>` | a [`skiff_share::Snapshot`] as JSON |
//!
//! The topic ID is Kafka's base64 form (22 characters), the partition decimal. Keys are parsed
//! from the right, so a group ID containing NUL bytes still round-trips.
//!
//! - **Initialization.** A ShareGroupHeartbeat that finds subscribed partitions without state
//!   asks for them ([`skiff_group::share::ShareHeartbeat::initialize`]). The handler resolves
//!   each partition's start offset from the group's `share.auto.offset.reset`
//!   ([`AutoOffsetReset`], [`resolve_start_offset`]) outside the coordinator's lock, then
//!   [`GroupCoordinator::initialize_share_partitions`] writes a snapshot at that offset, state
//!   epoch 0 and no batches, and tells the group which partitions are initialized (assigned from
//!   the next heartbeat on) and which failed (asked again). A partition that already has state
//!   keeps it: a stop between writing the state and the group's record must not move a share
//!   partition's position back.
//! - **Reads and writes** (the seam): [`GroupCoordinator::share_partition_state`] and
//!   [`GroupCoordinator::append_share_partition_state`]. A [`Delta`] is folded into the state
//!   with [`skiff_share::apply_delta`] and the result written, so the key's latest record is
//!   always the whole state and restoring needs no replay.
//! - **Deletion.** DeleteGroups of a share group tombstones its states; a topic that disappears
//!   (deleted, or recreated under a new ID) takes its states with it, as Kafka's
//!   `maybeCleanupShareGroupState` does; a topic deleted while the broker was down is noticed at
//!   the first topic refresh after the start.
//! - **Events** for the share-partition leader ([`crate::share`]): a member that leaves or whose
//!   session times out, and deleted states, are queued as [`ShareEvent`]s (bounded) and taken
//!   with [`GroupCoordinator::take_share_events`]; the leader never runs under this lock.

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError};

use bytes::Bytes;
use skiff_group::GroupError;
use skiff_group::share::{
    InitializeShareState, ShareGroup, describe_error, group_not_found, not_a_share_group,
    share_group_not_found, validate_heartbeat,
};
use skiff_protocol::generated::share_group_describe_response::DescribedGroup as ShareDescribed;
use skiff_protocol::generated::share_group_heartbeat_request::ShareGroupHeartbeatRequest;
use skiff_protocol::generated::share_group_heartbeat_response::ShareGroupHeartbeatResponse;
use skiff_protocol::{ByteString, Uuid, error_codes};
use skiff_share::{Delta, ShareConfig, Snapshot, apply_delta};

use super::{Group, GroupCoordinator, Inner, TopicsSource};
use skiff_group::consumer::{Assignment, ClientInfo};

/// Key prefix of share-partition state records.
pub(crate) const SHARE_STATE_PREFIX: &[u8] = b"s\0";

/// The group config key that decides where a new share partition starts.
pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";

/// The state epoch of a share partition initialized here (the task's choice: Kafka's
/// InitializeShareGroupState carries the group epoch; Skiff has no state epoch fencing yet).
pub const INITIAL_STATE_EPOCH: i32 = 0;

/// One share partition: a share group on one topic partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharePartitionKey {
    pub group_id: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

impl SharePartitionKey {
    pub fn new(group_id: impl Into<String>, topic_id: Uuid, partition: i32) -> Self {
        SharePartitionKey {
            group_id: group_id.into(),
            topic_id,
            partition,
        }
    }
}

/// The store key of a share partition's state: `s\0<group>\0<topic ID>\0<partition>`.
pub(crate) fn state_key(key: &SharePartitionKey) -> Bytes {
    Bytes::from(
        [
            SHARE_STATE_PREFIX,
            key.group_id.as_bytes(),
            b"\0",
            key.topic_id.to_string().as_bytes(),
            b"\0",
            key.partition.to_string().as_bytes(),
        ]
        .concat(),
    )
}

/// The share partition a state key names (`None` for anything else).
pub(crate) fn parse_state_key(raw: &[u8]) -> Option<SharePartitionKey> {
    let rest = raw.strip_prefix(SHARE_STATE_PREFIX)?;
    let mut parts = rest.rsplitn(3, |b| *b == 0);
    let partition: i32 = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let topic_id: Uuid = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let group_id = std::str::from_utf8(parts.next()?).ok()?.to_string();
    (partition >= 0).then_some(SharePartitionKey {
        group_id,
        topic_id,
        partition,
    })
}

/// What the share-partition leader writes for a share partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareStateRecord {
    /// The whole state (Kafka's `ShareSnapshotValue`): replaces what was stored.
    Snapshot(Snapshot),
    /// What changed (Kafka's `ShareUpdateValue`): folded into the stored state.
    Delta(Delta),
}

/// Why a share-partition state write was refused.
#[derive(Debug, thiserror::Error)]
pub enum ShareStateError {
    /// The share partition has no state: never initialized, or its group or topic was
    /// deleted.
    #[error("share partition {0:?} has no state")]
    NotInitialized(SharePartitionKey),
    /// The record could not be written.
    #[error("cannot store share partition state: {0:#}")]
    Storage(anyhow::Error),
    /// Cluster mode: another broker has claimed the share partition since this one loaded it
    /// (it leads the partition now).
    #[error("share partition state owned elsewhere: {0}")]
    NotLeader(String),
}

/// `share.auto.offset.reset` (Kafka's `ShareGroupAutoOffsetResetStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    /// The high watermark (Kafka's default).
    #[default]
    Latest,
    /// The log start offset.
    Earliest,
    /// The first record at or after now minus this many milliseconds.
    ByDuration(i64),
}

impl AutoOffsetReset {
    /// Parses a value as Kafka validates it: `earliest`, `latest` (any case) or
    /// `by_duration:<ISO-8601 duration>` (the prefix in any case; no negative durations).
    pub fn parse(value: &str) -> Option<AutoOffsetReset> {
        let value = value.trim();
        let lower = value.to_ascii_lowercase();
        match lower.as_str() {
            "latest" => Some(AutoOffsetReset::Latest),
            "earliest" => Some(AutoOffsetReset::Earliest),
            _ if lower.starts_with("by_duration:") => value
                .get("by_duration:".len()..)
                .and_then(parse_iso_duration_ms)
                .map(AutoOffsetReset::ByDuration),
            _ => None,
        }
    }
}

/// A `java.time.Duration.parse` text without a sign (`PnDTnHnMn.nS`, units in that order, each
/// optional but at least one) in milliseconds; `None` when it is not one, or overflows.
pub fn parse_iso_duration_ms(text: &str) -> Option<i64> {
    let upper = text.to_ascii_uppercase();
    let rest = upper.strip_prefix('P')?;
    let (days, time) = match rest.split_once('T') {
        Some((_, "")) => return None,
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let number = |s: &str| -> Option<i128> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse::<i128>().ok()
    };
    let mut total: i128 = 0;
    if days.is_empty() {
        time?;
    } else {
        total = number(days.strip_suffix('D')?)?.checked_mul(86_400_000)?;
    }
    if let Some(mut t) = time {
        for (unit, ms) in [('H', 3_600_000_i128), ('M', 60_000)] {
            if let Some((n, after)) = t.split_once(unit)
                && let Some(n) = number(n)
            {
                total = total.checked_add(n.checked_mul(ms)?)?;
                t = after;
            }
        }
        if !t.is_empty() {
            let seconds = t.strip_suffix('S')?;
            let (whole, fraction) = match seconds.split_once(['.', ',']) {
                Some((w, f)) => (w, f),
                None => (seconds, ""),
            };
            if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let millis: i128 = format!("{fraction:0<3}")
                .get(..3)
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            total = total.checked_add(number(whole)?.checked_mul(1000)?.checked_add(millis)?)?;
        }
    }
    i64::try_from(total).ok()
}

/// Where a new share partition starts, as Kafka's `SharePartition` resolves a start offset of
/// -1: `latest` the high watermark, `earliest` the log start offset, `by_duration` the first
/// record at or after `now_ms - duration` (ListOffsets by timestamp, read_uncommitted:
/// `at_or_after`), or the high watermark when every record is older (ListOffsets would answer
/// -1, which no share partition can start at). Never below the log start offset.
pub fn resolve_start_offset<E>(
    reset: AutoOffsetReset,
    log_start: i64,
    high_watermark: i64,
    now_ms: i64,
    at_or_after: impl FnOnce(i64) -> Result<Option<i64>, E>,
) -> Result<i64, E> {
    let offset = match reset {
        AutoOffsetReset::Latest => high_watermark,
        AutoOffsetReset::Earliest => log_start,
        AutoOffsetReset::ByDuration(ms) => {
            let timestamp = now_ms.saturating_sub(ms).max(0);
            match at_or_after(timestamp)? {
                Some(offset) if offset < high_watermark => offset,
                _ => high_watermark,
            }
        }
    };
    Ok(offset.max(log_start))
}

/// A ShareGroupHeartbeat the coordinator accepted.
pub struct ShareHeartbeatOutcome {
    pub response: ShareGroupHeartbeatResponse,
    /// Share partitions to initialize, and where the group starts them.
    pub initialize: Option<(InitializeShareState, AutoOffsetReset)>,
}

/// One share partition to initialize, resolved: its start offset, or why it has none.
pub type ResolvedStart = (Uuid, i32, Result<i64, String>);

impl GroupCoordinator {
    /// ShareGroupHeartbeat (KIP-932): creates the group on a join (member epoch 0) when the ID
    /// is free; a group of another type is GROUP_ID_NOT_FOUND (Kafka converts no group to or
    /// from a share group). A group created for a join that then fails leaves nothing behind.
    pub fn share_heartbeat(
        &self,
        topics_source: &impl TopicsSource,
        request: &ShareGroupHeartbeatRequest,
        client: ClientInfo<'_>,
        now: i64,
    ) -> Result<ShareHeartbeatOutcome, GroupError> {
        validate_heartbeat(request)?;
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        let group_id = request.group_id.to_string();
        match inner.groups.get(&group_id) {
            Some(Group::Share(_)) => {}
            Some(_) => return Err(not_a_share_group(&group_id)),
            None if request.member_epoch == 0 => {
                inner
                    .groups
                    .insert(group_id.clone(), Group::Share(ShareGroup::new(&group_id)));
            }
            None => return Err(share_group_not_found(&group_id)),
        }
        let config = self.group_config(inner, &group_id);
        let reset = inner
            .group_configs
            .get(&group_id)
            .and_then(|o| o.get(SHARE_AUTO_OFFSET_RESET))
            .and_then(|v| AutoOffsetReset::parse(v))
            .unwrap_or_default();
        let Inner { groups, topics, .. } = inner;
        let result = match groups.get_mut(&group_id) {
            Some(Group::Share(group)) => group.heartbeat(request, client, topics, &config, now),
            _ => Err(GroupError::new(
                error_codes::GROUP_ID_NOT_FOUND,
                "group vanished",
            )),
        };
        drop(config);
        if result.is_err()
            && matches!(inner.groups.get(&group_id), Some(Group::Share(g)) if g.is_unused())
        {
            inner.groups.remove(&group_id);
        }
        if result.is_ok() && request.member_epoch == LEAVE_MEMBER_EPOCH {
            push_share_event(
                inner,
                ShareEvent::MemberGone {
                    group_id: group_id.clone(),
                    member_id: request.member_id.to_string(),
                },
            );
        }
        self.after_change(inner, &group_id);
        result.map(|hb| ShareHeartbeatOutcome {
            response: hb.response,
            initialize: hb.initialize.map(|init| (init, reset)),
        })
    }

    /// ShareGroupDescribe: each group, or its error (INVALID_GROUP_ID for an empty ID,
    /// GROUP_ID_NOT_FOUND for a missing group or one of another type).
    pub fn share_describe(
        &self,
        topics_source: &impl TopicsSource,
        group_ids: &[ByteString],
        now: i64,
    ) -> Vec<ShareDescribed> {
        let inner = self.lock(topics_source, now);
        group_ids
            .iter()
            .map(|id| match inner.groups.get(&**id) {
                _ if id.is_empty() => ShareDescribed {
                    group_id: id.clone(),
                    error_code: error_codes::INVALID_GROUP_ID,
                    ..Default::default()
                },
                Some(Group::Share(g)) => g.describe(&inner.topics),
                Some(_) => describe_error(id, &not_a_share_group(id)),
                None => describe_error(id, &group_not_found(id)),
            })
            .collect()
    }

    /// Writes the initial state of share partitions a heartbeat asked for (each resolved to a
    /// start offset, or failed), then tells the group which are initialized and which failed.
    /// Partitions of topics gone meanwhile, or beyond their topic's partition count, are
    /// neither (the group ignores them). Returns the partitions initialized.
    pub fn initialize_share_partitions(
        &self,
        topics_source: &impl TopicsSource,
        group_id: &str,
        resolved: Vec<ResolvedStart>,
        now: i64,
    ) -> Assignment {
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        if !matches!(inner.groups.get(group_id), Some(Group::Share(_))) {
            // Deleted (or replaced) meanwhile: nothing to initialize for.
            return Assignment::new();
        }
        let mut initialized = Assignment::new();
        let mut failed = Assignment::new();
        let mut writes = Vec::new();
        let mut fresh = Vec::new();
        for (topic_id, partition, start) in resolved {
            let exists = inner
                .topics
                .by_id(topic_id)
                .is_some_and(|(_, count)| (0..count).contains(&partition));
            if !exists {
                continue;
            }
            let start = match start {
                Ok(offset) => offset,
                Err(reason) => {
                    tracing::warn!(group = group_id, topic = %topic_id, partition, %reason, "cannot initialize a share partition");
                    failed.entry(topic_id).or_default().insert(partition);
                    continue;
                }
            };
            let key = SharePartitionKey::new(group_id, topic_id, partition);
            if !inner.share_states.contains_key(&key) {
                let snapshot = Snapshot {
                    start_offset: start,
                    state_epoch: INITIAL_STATE_EPOCH,
                    batches: Vec::new(),
                };
                match serde_json::to_vec(&snapshot) {
                    Ok(json) => {
                        writes.push((state_key(&key), Some(Bytes::from(json))));
                        fresh.push((key, snapshot));
                    }
                    Err(e) => {
                        tracing::error!(group = group_id, error = %e, "cannot serialise a share partition state");
                        failed.entry(topic_id).or_default().insert(partition);
                        continue;
                    }
                }
            }
            initialized.entry(topic_id).or_default().insert(partition);
        }
        if !writes.is_empty() {
            match inner.kv.append(&writes) {
                Ok(_) => inner.share_states.extend(fresh),
                Err(e) => {
                    tracing::error!(group = group_id, error = %format!("{e:#}"), "cannot store share partition states");
                    for (key, _) in &fresh {
                        if let Some(set) = initialized.get_mut(&key.topic_id) {
                            set.remove(&key.partition);
                        }
                        failed
                            .entry(key.topic_id)
                            .or_default()
                            .insert(key.partition);
                    }
                    initialized.retain(|_, set| !set.is_empty());
                }
            }
        }
        let Inner { groups, topics, .. } = inner;
        if let Some(Group::Share(group)) = groups.get_mut(group_id) {
            group.on_partitions_initialized(&initialized, topics);
            group.on_initialize_failed(&failed);
        }
        self.after_change(inner, group_id);
        self.maybe_compact(inner);
        initialized
    }

    /// The persisted state of a share partition (its latest snapshot, every delta written since
    /// folded in); `None` when it has none (not initialized, or its group or topic is gone).
    pub fn share_partition_state(&self, key: &SharePartitionKey) -> Option<Snapshot> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.share_states.get(key).cloned()
    }

    /// Appends a snapshot or a delta to a share partition's state (only to one that has state:
    /// initialization goes through the heartbeat). Returns the group-log end offset to wait for
    /// with [`GroupCoordinator::wait_durable`] before acknowledging anything that depends on it.
    pub fn append_share_partition_state(
        &self,
        key: &SharePartitionKey,
        record: ShareStateRecord,
    ) -> Result<i64, ShareStateError> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(current) = inner.share_states.get(key) else {
            return Err(ShareStateError::NotInitialized(key.clone()));
        };
        let next = match record {
            ShareStateRecord::Snapshot(snapshot) => snapshot,
            ShareStateRecord::Delta(delta) => apply_delta(current, &delta),
        };
        let json = serde_json::to_vec(&next).map_err(|e| ShareStateError::Storage(e.into()))?;
        let end = inner
            .kv
            .append(&[(state_key(key), Some(Bytes::from(json)))])
            .map_err(ShareStateError::Storage)?;
        inner.share_states.insert(key.clone(), next);
        self.maybe_compact(&mut inner);
        Ok(end)
    }

    /// The share partitions of a group that have state.
    pub fn share_partitions_of(&self, group_id: &str) -> Vec<SharePartitionKey> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        share_keys_of(&inner, group_id)
    }

    /// Whether `member_id` is a current member of the share group `group_id`: GROUP_ID_NOT_FOUND
    /// when there is no such share group, UNKNOWN_MEMBER_ID when it has no such member.
    pub fn share_member_check(&self, group_id: &str, member_id: &str) -> Result<(), GroupError> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match inner.groups.get(group_id) {
            Some(Group::Share(group)) if group.has_member(member_id) => Ok(()),
            Some(Group::Share(_)) => Err(GroupError::new(
                error_codes::UNKNOWN_MEMBER_ID,
                format!("Member {member_id} is not a member of share group {group_id}."),
            )),
            Some(_) => Err(not_a_share_group(group_id)),
            None => Err(group_not_found(group_id)),
        }
    }

    /// The settings the share partitions of `group_id` run with: the broker's, with the group's
    /// `share.record.lock.duration.ms`, `share.delivery.count.limit` and `share.isolation.level`
    /// overrides.
    pub fn share_settings(&self, group_id: &str) -> ShareGroupSettings {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let config = self.group_config(&inner, group_id);
        let read_committed = inner
            .group_configs
            .get(group_id)
            .and_then(|o| o.get(SHARE_ISOLATION_LEVEL))
            .is_some_and(|v| v.trim() == "read_committed");
        ShareGroupSettings {
            share: ShareConfig {
                record_lock_duration_ms: config.share_record_lock_duration_ms.max(1),
                delivery_count_limit: i16::try_from(config.share_delivery_count_limit)
                    .unwrap_or(i16::MAX)
                    .max(1),
                max_record_locks: u32::try_from(config.share_partition_max_record_locks)
                    .unwrap_or(u32::MAX)
                    .max(1),
            },
            read_committed,
        }
    }

    /// The events queued for the share-partition leader since the last call, oldest first.
    pub fn take_share_events(&self) -> Vec<ShareEvent> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut inner.share_events)
    }

    /// Woken whenever a share event is queued.
    pub fn share_events_notify(&self) -> Arc<tokio::sync::Notify> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(&inner.share_notify)
    }
}

/// The group config key that makes a share group read committed records only.
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";

/// The member epoch of a ShareGroupHeartbeat that leaves.
const LEAVE_MEMBER_EPOCH: i32 = -1;

/// The most events kept for the share-partition leader; beyond, the oldest go (a member's
/// records then come back when their locks expire).
const MAX_SHARE_EVENTS: usize = 10_000;

/// What a share group's partitions run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupSettings {
    pub share: ShareConfig,
    /// `share.isolation.level = read_committed`.
    pub read_committed: bool,
}

/// Something the share-partition leader must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareEvent {
    /// A member left (a heartbeat with epoch -1) or its session timed out: its share session
    /// closes and its acquired records go back.
    MemberGone { group_id: String, member_id: String },
    /// These share-partition states were deleted (their group or topic was): the leader drops
    /// what it holds of them.
    StatesDeleted(Vec<SharePartitionKey>),
}

/// Queues an event for the share-partition leader and wakes it.
pub(crate) fn push_share_event(inner: &mut Inner, event: ShareEvent) {
    if inner.share_events.len() >= MAX_SHARE_EVENTS {
        tracing::debug!("too many share events queued; dropping the oldest");
        inner.share_events.remove(0);
    }
    inner.share_events.push(event);
    inner.share_notify.notify_one();
}

/// The share-partition state keys of one group.
pub(crate) fn share_keys_of(inner: &Inner, group_id: &str) -> Vec<SharePartitionKey> {
    let from = SharePartitionKey::new(group_id, Uuid::ZERO, i32::MIN);
    inner
        .share_states
        .range(from..)
        .map(|(key, _)| key)
        .take_while(|key| key.group_id == group_id)
        .cloned()
        .collect()
}

/// Forgets the share-partition states of `keys` with tombstones; true when stored.
pub(crate) fn delete_share_states(inner: &mut Inner, keys: &[SharePartitionKey]) -> bool {
    match try_delete_share_states(inner, keys) {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "cannot delete share partition states");
            false
        }
    }
}

/// Forgets the share-partition states of `keys` with tombstones and tells the share-partition
/// leader; the group-log end offset to wait for (`None`: nothing to delete).
pub(crate) fn try_delete_share_states(
    inner: &mut Inner,
    keys: &[SharePartitionKey],
) -> anyhow::Result<Option<i64>> {
    if keys.is_empty() {
        return Ok(None);
    }
    let tombstones: Vec<(Bytes, Option<Bytes>)> =
        keys.iter().map(|key| (state_key(key), None)).collect();
    let end = inner.kv.append(&tombstones)?;
    for key in keys {
        inner.share_states.remove(key);
    }
    push_share_event(inner, ShareEvent::StatesDeleted(keys.to_vec()));
    Ok(Some(end))
}

/// Drops the share-partition states of topics the image no longer has (deleted, or recreated
/// under a new ID).
pub(crate) fn forget_deleted_topics(inner: &mut Inner) {
    let live: BTreeSet<Uuid> = inner.topics.by_name.values().map(|(id, _)| *id).collect();
    let gone: Vec<SharePartitionKey> = inner
        .share_states
        .keys()
        .filter(|key| !live.contains(&key.topic_id))
        .cloned()
        .collect();
    if gone.is_empty() {
        return;
    }
    tracing::info!(
        states = gone.len(),
        "forgetting share partition states of deleted topics"
    );
    delete_share_states(inner, &gone);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_keys_round_trip_and_document_their_layout() {
        let topic = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let key = SharePartitionKey::new("orders-workers", topic, 7);
        let raw = state_key(&key);
        let expected = format!("s\0orders-workers\0{topic}\0{}", 7);
        assert_eq!(&raw[..], expected.as_bytes());
        assert_eq!(parse_state_key(&raw), Some(key.clone()));
        // A group ID with NUL bytes still parses (keys are read from the right).
        let odd = SharePartitionKey::new("a\0b", topic, 0);
        assert_eq!(parse_state_key(&state_key(&odd)), Some(odd));
        assert_eq!(
            super::super::record_group(&state_key(&key)),
            Some("orders-workers")
        );
        for bad in [
            &b"s\0g\0t\0\x31"[..],
            b"s\0g\0AAAAAAAAAAAAAAAAAAAAAA\0-1",
            b"s\0g\0AAAAAAAAAAAAAAAAAAAAAA\0x",
            b"s\0only",
            b"g\0group",
        ] {
            assert_eq!(parse_state_key(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn iso_durations_in_milliseconds() {
        for (text, ms) in [
            ("PT1H", 3_600_000),
            ("P1D", 86_400_000),
            ("P1DT2H3M4.5S", 93_784_500),
            ("PT0S", 0),
            ("pt10m", 600_000),
            ("PT1,25S", 1_250),
            ("PT1.S", 1_000),
            ("PT1M30S", 90_000),
            ("PT0.000999999S", 0),
        ] {
            assert_eq!(parse_iso_duration_ms(text), Some(ms), "{text}");
        }
        for bad in [
            "",
            "P",
            "PT",
            "1H",
            "PT-1H",
            "P1H",
            "PTS",
            "PT1.S2",
            "PT1.0000000001S",
            "P99999999999999999999D",
        ] {
            assert_eq!(parse_iso_duration_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn auto_offset_reset_values_parse_as_kafka_accepts_them() {
        assert_eq!(
            AutoOffsetReset::parse("latest"),
            Some(AutoOffsetReset::Latest)
        );
        assert_eq!(
            AutoOffsetReset::parse("EARLIEST"),
            Some(AutoOffsetReset::Earliest)
        );
        assert_eq!(
            AutoOffsetReset::parse("By_Duration:PT1M"),
            Some(AutoOffsetReset::ByDuration(60_000))
        );
        assert_eq!(AutoOffsetReset::parse("by_duration:-PT1M"), None);
        assert_eq!(AutoOffsetReset::parse("none"), None);
        assert_eq!(AutoOffsetReset::default(), AutoOffsetReset::Latest);
    }

    #[test]
    fn start_offsets_follow_the_reset_strategy() {
        let never = |_| -> Result<Option<i64>, ()> { panic!("no timestamp lookup expected") };
        assert_eq!(
            resolve_start_offset(AutoOffsetReset::Latest, 5, 42, 1_000, never),
            Ok(42)
        );
        assert_eq!(
            resolve_start_offset(AutoOffsetReset::Earliest, 5, 42, 1_000, never),
            Ok(5)
        );
        // by_duration looks up now - duration.
        let mut asked = None;
        let found = resolve_start_offset(
            AutoOffsetReset::ByDuration(300),
            5,
            42,
            1_000,
            |ts| -> Result<Option<i64>, ()> {
                asked = Some(ts);
                Ok(Some(17))
            },
        );
        assert_eq!((found, asked), (Ok(17), Some(700)));
        // Every record older: the high watermark, as a share partition cannot start at -1.
        let none = |_| -> Result<Option<i64>, ()> { Ok(None) };
        assert_eq!(
            resolve_start_offset(AutoOffsetReset::ByDuration(300), 5, 42, 1_000, none),
            Ok(42)
        );
        // Never below the log start; a duration longer than the epoch asks for timestamp 0.
        let below = |ts: i64| -> Result<Option<i64>, ()> {
            assert_eq!(ts, 0);
            Ok(Some(2))
        };
        assert_eq!(
            resolve_start_offset(AutoOffsetReset::ByDuration(i64::MAX), 5, 42, 1_000, below),
            Ok(5)
        );
        assert_eq!(
            resolve_start_offset(AutoOffsetReset::ByDuration(1), 0, 3, 10, |_| Err::<
                Option<i64>,
                &str,
            >(
                "disk"
            )),
            Err("disk")
        );
    }
}
