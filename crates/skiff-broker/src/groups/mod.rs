//! The group coordinator's home in the broker: the map of groups (KIP-848 consumer groups,
//! classic groups and KIP-932 share groups share one namespace), committed offsets, share-partition
//! state ([`share`]), their persistence in the internal key-value log, parked classic requests,
//! and the timer that drives session and rebalance deadlines.
//!
//! The state machines in `skiff-group` do the protocol work; this module holds them under one
//! lock, writes a snapshot record whenever a group's persistent state changed, and turns their
//! completions into answers for parked requests.
//!
//! Group-level config overrides (Kafka's `GroupConfig` keys, set with IncrementalAlterConfigs on
//! GROUP resources) live here too, one record per group under `c\0<group>`; every call into a
//! group's state machine gets the broker's [`GroupConfig`] with that group's overrides applied.
//!
//! The records, by key prefix: `g\0<group>` a group's snapshot (consumer, classic or share),
//! `o\0<group>\0<topic>\0<partition>` a committed offset, `c\0<group>` config overrides,
//! `w\0<group>\0<member>` a member ID's owner (cluster mode), and
//! `s\0<group>\0<topic ID>\0<partition>` a share partition's state (see [`share`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::{Context, Result};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use skiff_group::classic::{ClassicGroup, ClassicGroupSnapshot, ClassicResponse, Completion};
use skiff_group::consumer::{ConsumerGroup, ConsumerGroupSnapshot};
use skiff_group::share::{ShareGroup, ShareGroupSnapshot};
use skiff_group::{CommittedOffset, GroupConfig, OffsetKey, OffsetStore, TopicsImage};
use tokio::sync::{Notify, oneshot};

pub mod requests;
pub mod share;
pub mod share_offsets;

use share::{SHARE_STATE_PREFIX, SharePartitionKey};

use crate::coordinator_store::{CoordinatorStore, Durable, Opened, StoreError};

/// What the group coordinator knows of the topics: an image of names, IDs and partition counts,
/// rebuilt when the generation changes (the broker implements it over its open topics).
pub trait TopicsSource {
    /// Changes whenever a topic is created, grown or deleted.
    fn topics_generation(&self) -> u64;
    /// The topics as they are now.
    fn topics_image(&self) -> TopicsImage;
}

impl<T: TopicsSource + ?Sized> TopicsSource for Arc<T> {
    fn topics_generation(&self) -> u64 {
        (**self).topics_generation()
    }

    fn topics_image(&self) -> TopicsImage {
        (**self).topics_image()
    }
}

/// One group: the protocols never share a group ID at the same time.
pub enum Group {
    Consumer(ConsumerGroup),
    Classic(ClassicGroup),
    Share(ShareGroup),
}

impl Group {
    pub fn is_empty(&self) -> bool {
        match self {
            Group::Consumer(g) => g.is_empty(),
            Group::Classic(g) => g.is_empty(),
            Group::Share(g) => g.is_empty(),
        }
    }

    pub fn state_name(&self) -> &'static str {
        match self {
            Group::Consumer(g) => g.state_name(),
            Group::Classic(g) => g.state_name(),
            Group::Share(g) => g.state_name(),
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Group::Consumer(_) => "consumer",
            Group::Classic(_) => "classic",
            Group::Share(_) => "share",
        }
    }

    fn change_counter(&self) -> u64 {
        match self {
            Group::Consumer(g) => g.change_counter(),
            Group::Classic(g) => g.change_counter(),
            Group::Share(g) => g.change_counter(),
        }
    }

    fn next_deadline(&self) -> Option<i64> {
        match self {
            Group::Consumer(g) => g.next_deadline(),
            Group::Classic(g) => g.next_deadline(),
            Group::Share(g) => g.next_deadline(),
        }
    }
}

/// What a group snapshot record holds.
#[derive(Serialize, Deserialize)]
enum StoredGroup {
    Consumer(ConsumerGroupSnapshot),
    Classic(ClassicGroupSnapshot),
    Share(ShareGroupSnapshot),
}

impl StoredGroup {
    fn of(group: &Group) -> StoredGroup {
        match group {
            Group::Consumer(g) => StoredGroup::Consumer(g.snapshot()),
            Group::Classic(g) => StoredGroup::Classic(g.snapshot()),
            Group::Share(g) => StoredGroup::Share(g.snapshot()),
        }
    }
}

const GROUP_PREFIX: &[u8] = b"g\0";
const OFFSET_PREFIX: &[u8] = b"o\0";
const CONFIG_PREFIX: &[u8] = b"c\0";
/// Cluster mode: the principal that owns a member ID, `w\0<group>\0<member>` (with security on).
const OWNER_PREFIX: &[u8] = b"w\0";

/// One group's config overrides: Kafka group config key -> value.
pub type GroupOverrides = BTreeMap<String, String>;

fn config_key(group: &str) -> Bytes {
    Bytes::from([CONFIG_PREFIX, group.as_bytes()].concat())
}

/// `base` with the group's overrides applied (borrowed when it has none).
fn effective<'a>(
    base: &'a GroupConfig,
    overrides: &BTreeMap<String, GroupOverrides>,
    group_id: &str,
) -> Cow<'a, GroupConfig> {
    match overrides.get(group_id) {
        Some(o) if !o.is_empty() => {
            Cow::Owned(base.with_overrides(o.iter().map(|(k, v)| (k.as_str(), v.as_str()))))
        }
        _ => Cow::Borrowed(base),
    }
}

fn group_key(group: &str) -> Bytes {
    Bytes::from([GROUP_PREFIX, group.as_bytes()].concat())
}

fn offset_key(group: &str, key: &OffsetKey) -> Bytes {
    Bytes::from(
        [
            OFFSET_PREFIX,
            group.as_bytes(),
            b"\0",
            key.topic.as_bytes(),
            b"\0",
            key.partition.to_string().as_bytes(),
        ]
        .concat(),
    )
}

fn parse_offset_key(key: &[u8]) -> Option<(String, OffsetKey)> {
    let rest = key.strip_prefix(OFFSET_PREFIX)?;
    let mut parts = rest.splitn(3, |b| *b == 0);
    let group = std::str::from_utf8(parts.next()?).ok()?;
    let topic = std::str::from_utf8(parts.next()?).ok()?;
    let partition = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    Some((
        group.to_string(),
        OffsetKey {
            topic: topic.to_string(),
            partition,
        },
    ))
}

/// Groups, offsets and configs read from a store's pairs.
struct Loaded {
    groups: HashMap<String, Group>,
    offsets: Vec<(String, OffsetKey, CommittedOffset)>,
    group_configs: BTreeMap<String, GroupOverrides>,
    owners: Vec<MemberOwner>,
    share_states: BTreeMap<SharePartitionKey, skiff_share::Snapshot>,
}

impl Loaded {
    /// Reads every record it understands; unreadable ones are logged and skipped.
    fn read(pairs: BTreeMap<Bytes, Bytes>, now_ms: i64) -> Loaded {
        let mut groups = HashMap::new();
        let mut offsets = Vec::new();
        let mut group_configs = BTreeMap::new();
        let mut owners = Vec::new();
        let mut share_states = BTreeMap::new();
        for (key, value) in pairs {
            if key.starts_with(SHARE_STATE_PREFIX) {
                let state = share::parse_state_key(&key).and_then(|k| {
                    serde_json::from_slice::<skiff_share::Snapshot>(&value)
                        .ok()
                        .map(|v| (k, v))
                });
                match state {
                    Some((k, v)) => {
                        share_states.insert(k, v);
                    }
                    None => tracing::error!("skipping an unreadable share partition state record"),
                }
            } else if key.starts_with(OWNER_PREFIX) {
                match parse_owner(&key, &value) {
                    Some(owner) => owners.push(owner),
                    None => tracing::error!("skipping an unreadable member owner record"),
                }
            } else if let Some(group_id) = key.strip_prefix(GROUP_PREFIX) {
                let group_id = String::from_utf8_lossy(group_id).to_string();
                let stored: StoredGroup = match serde_json::from_slice(&value) {
                    Ok(stored) => stored,
                    Err(e) => {
                        tracing::error!(group = %group_id, error = %e, "skipping an unreadable group record");
                        continue;
                    }
                };
                let group = match stored {
                    StoredGroup::Consumer(s) => Group::Consumer(ConsumerGroup::restore(s, now_ms)),
                    StoredGroup::Classic(s) => Group::Classic(ClassicGroup::restore(s, now_ms)),
                    StoredGroup::Share(s) => Group::Share(ShareGroup::restore(s, now_ms)),
                };
                groups.insert(group_id, group);
            } else if let Some(group_id) = key.strip_prefix(CONFIG_PREFIX) {
                let group_id = String::from_utf8_lossy(group_id).to_string();
                match serde_json::from_slice::<GroupOverrides>(&value) {
                    Ok(o) if !o.is_empty() => {
                        group_configs.insert(group_id, o);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::error!(group = %group_id, error = %e, "skipping an unreadable group config record")
                    }
                }
            } else if let Some((group, okey)) = parse_offset_key(&key) {
                match serde_json::from_slice::<CommittedOffset>(&value) {
                    Ok(committed) => offsets.push((group, okey, committed)),
                    Err(e) => {
                        tracing::error!(group = %group, error = %e, "skipping an unreadable offset record")
                    }
                }
            }
        }
        Loaded {
            groups,
            offsets,
            group_configs,
            owners,
            share_states,
        }
    }

    /// Adds what was read to the coordinator's state.
    fn add_to(self, inner: &mut Inner) {
        for (group_id, group) in self.groups {
            inner
                .persisted
                .insert(group_id.clone(), group.change_counter());
            inner.groups.insert(group_id, group);
        }
        for (group, key, committed) in self.offsets {
            inner.offsets.commit(&group, key, committed);
        }
        inner.group_configs.extend(self.group_configs);
        inner.share_states.extend(self.share_states);
    }
}

/// The group ID a record of the group store is about (`None` for keys it does not know).
pub fn record_group(key: &[u8]) -> Option<&str> {
    if key.starts_with(SHARE_STATE_PREFIX) {
        // The group ID is everything before the last two separators.
        let rest = key.get(SHARE_STATE_PREFIX.len()..)?;
        let mut parts = rest.rsplitn(3, |b| *b == 0);
        let (_, _, group) = (parts.next()?, parts.next()?, parts.next()?);
        return std::str::from_utf8(group).ok();
    }
    let rest = key
        .strip_prefix(GROUP_PREFIX)
        .or_else(|| key.strip_prefix(CONFIG_PREFIX))
        .map(|id| id as &[u8])
        .or_else(|| {
            key.strip_prefix(OFFSET_PREFIX)
                .or_else(|| key.strip_prefix(OWNER_PREFIX))
                .and_then(|rest| rest.split(|b| *b == 0).next())
        })?;
    std::str::from_utf8(rest).ok()
}

fn owner_key(group: &str, member: &str) -> Bytes {
    Bytes::from([OWNER_PREFIX, group.as_bytes(), b"\0", member.as_bytes()].concat())
}

/// A member ID's owner as stored: (group, member ID, principal).
pub type MemberOwner = (String, String, String);

fn parse_owner(key: &[u8], value: &[u8]) -> Option<MemberOwner> {
    let rest = key.strip_prefix(OWNER_PREFIX)?;
    let split = rest.iter().position(|b| *b == 0)?;
    let (group, member) = (rest.get(..split)?, rest.get(split + 1..)?);
    Some((
        std::str::from_utf8(group).ok()?.to_string(),
        std::str::from_utf8(member).ok()?.to_string(),
        std::str::from_utf8(value).ok()?.to_string(),
    ))
}

/// Everything under the coordinator's lock.
pub struct Inner {
    pub groups: HashMap<String, Group>,
    pub offsets: OffsetStore,
    pub topics: TopicsImage,
    /// Group config overrides, by group ID (groups need not exist).
    pub group_configs: BTreeMap<String, GroupOverrides>,
    /// Share-partition states (see [`share`]).
    share_states: BTreeMap<SharePartitionKey, skiff_share::Snapshot>,
    /// What the share-partition leader must hear about (members gone, states deleted), taken
    /// with [`GroupCoordinator::take_share_events`]; `share_notify` is woken at each.
    share_events: Vec<share::ShareEvent>,
    share_notify: Arc<Notify>,
    topics_generation: u64,
    kv: Box<dyn CoordinatorStore>,
    persisted: HashMap<String, u64>,
    /// Parked classic requests: token -> (group ID, where the answer goes).
    pending: HashMap<u64, (String, oneshot::Sender<ClassicResponse>)>,
}

pub struct GroupCoordinator {
    inner: Mutex<Inner>,
    pub config: GroupConfig,
    durable: Option<Arc<dyn Durable>>,
    next_token: AtomicU64,
    /// The deadline the timer task sleeps until (i64::MAX: none).
    armed_deadline: AtomicI64,
    pub timers_changed: Notify,
}

impl GroupCoordinator {
    /// Restores every group and committed offset from an opened store.
    pub fn open(opened: Opened, config: GroupConfig, now_ms: i64) -> Result<Self> {
        let Opened {
            store: kv,
            pairs,
            durable,
        } = opened;
        let loaded = Loaded::read(pairs, now_ms);
        tracing::info!(groups = loaded.groups.len(), "group coordinator loaded");
        let mut inner = Inner {
            groups: HashMap::new(),
            offsets: OffsetStore::default(),
            topics: TopicsImage::default(),
            group_configs: BTreeMap::new(),
            share_states: BTreeMap::new(),
            share_events: Vec::new(),
            share_notify: Arc::new(Notify::new()),
            topics_generation: u64::MAX,
            kv,
            persisted: HashMap::new(),
            pending: HashMap::new(),
        };
        loaded.add_to(&mut inner);
        Ok(GroupCoordinator {
            inner: Mutex::new(inner),
            config,
            durable,
            next_token: AtomicU64::new(1),
            armed_deadline: AtomicI64::new(i64::MAX),
            timers_changed: Notify::new(),
        })
    }

    /// Cluster mode: takes in a shard's records (just claimed), replacing whatever this broker
    /// held of the shard's groups; their session and rebalance timers are armed afresh from
    /// `now_ms`. `owned` says which groups belong to the shard; `topics` are the topics that
    /// exist (offsets of any other were of a topic deleted while no broker held the shard: they
    /// go, as a deletion seen by the coordinator removes them); `done` runs under the lock once
    /// they are in.
    pub fn load_shard(
        &self,
        pairs: BTreeMap<Bytes, Bytes>,
        owned: impl Fn(&str) -> bool,
        topics: &BTreeSet<String>,
        now_ms: i64,
        done: &dyn Fn(),
    ) -> (usize, Vec<MemberOwner>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        Self::drop_groups(&mut inner, &owned);
        let mut loaded = Loaded::read(pairs, now_ms);
        let count = loaded.groups.len();
        let owners = std::mem::take(&mut loaded.owners);
        let (kept, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut loaded.offsets)
            .into_iter()
            .partition(|(_, key, _)| topics.contains(&key.topic));
        loaded.offsets = kept;
        loaded.add_to(&mut inner);
        done();
        if !gone.is_empty() {
            tracing::info!(
                offsets = gone.len(),
                "forgetting offsets of topics deleted while their groups' shard was not held"
            );
            let tombstones: Vec<(Bytes, Option<Bytes>)> = gone
                .iter()
                .map(|(group, key, _)| (offset_key(group, key), None))
                .collect();
            if let Err(e) = inner.kv.append(&tombstones) {
                tracing::warn!(error = %e, "cannot persist the removal of deleted topics' offsets");
            }
        }
        drop(inner);
        self.timers_changed.notify_one();
        (count, owners)
    }

    /// Cluster mode with security on: stores (or, with `None`, forgets) the principal that owns
    /// a member ID, with the group's state, so that the group's next coordinator knows it. A
    /// shard this broker no longer owns stores nothing (the request is refused anyway).
    pub fn store_member_owner(&self, group_id: &str, member_id: &str, principal: Option<&str>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let value = principal.map(|p| Bytes::copy_from_slice(p.as_bytes()));
        if let Err(e) = inner.kv.append(&[(owner_key(group_id, member_id), value)]) {
            tracing::debug!(group = group_id, error = %e, "the member's owner was not stored");
        }
    }

    /// Cluster mode: forgets the groups `owned` says belong to a shard this broker lost; their
    /// parked requests are answered NOT_COORDINATOR (their senders dropped).
    pub fn unload_shard(&self, owned: impl Fn(&str) -> bool) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        Self::drop_groups(&mut inner, &owned);
    }

    fn drop_groups(inner: &mut Inner, owned: &impl Fn(&str) -> bool) {
        inner.groups.retain(|id, _| !owned(id));
        inner.persisted.retain(|id, _| !owned(id));
        inner.pending.retain(|_, (group, _)| !owned(group));
        inner.share_states.retain(|key, _| !owned(&key.group_id));
        let gone: Vec<String> = inner
            .offsets
            .groups()
            .filter(|g| owned(g))
            .map(str::to_string)
            .collect();
        for group in gone {
            inner.offsets.delete_group(&group);
        }
    }

    /// Cluster mode: every group's config overrides, as the cluster holds them now.
    pub fn mirror_overrides(&self, all: BTreeMap<String, GroupOverrides>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.group_configs != all {
            inner.group_configs = all;
            drop(inner);
            self.timers_changed.notify_one();
        }
    }

    /// Cluster mode: sets one group's overrides in this broker's view (after writing them to
    /// the cluster), so that its answer and its next calls see them at once.
    pub fn mirror_group_overrides(&self, group_id: &str, overrides: GroupOverrides) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if overrides.is_empty() {
            inner.group_configs.remove(group_id);
        } else {
            inner.group_configs.insert(group_id.to_string(), overrides);
        }
        drop(inner);
        self.timers_changed.notify_one();
    }

    /// Waits until what was written about `id` so far is durable (cluster mode: in PostgreSQL,
    /// under the shard's epoch); NOT_COORDINATOR when this broker does not or no longer
    /// coordinates it.
    pub async fn settle(&self, id: &str) -> Result<(), skiff_protocol::ErrorCode> {
        let barrier = {
            let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            if !inner.kv.serves(id) {
                return Err(skiff_protocol::ErrorCode::NOT_COORDINATOR);
            }
            inner.kv.barrier(id)
        };
        match barrier {
            Some(end) => self.wait_durable(end).await.map_err(|e| {
                tracing::debug!(group = id, error = %e, "a group change did not become durable");
                e.code()
            }),
            None => Ok(()),
        }
    }

    /// Locks the state, refreshing the topics image first if topics changed since last time.
    pub fn lock(&self, topics: &impl TopicsSource, now_ms: i64) -> MutexGuard<'_, Inner> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = topics.topics_generation();
        if inner.topics_generation != generation {
            let image = topics.topics_image();
            let first = inner.topics_generation == u64::MAX;
            let previous = std::mem::replace(&mut inner.topics, image);
            inner.topics_generation = generation;
            self.forget_deleted_topics(&mut inner, &previous, first);
            share::forget_deleted_topics(&mut inner);
            let Inner { groups, topics, .. } = &mut *inner;
            for group in groups.values_mut() {
                match group {
                    Group::Consumer(g) => {
                        g.on_topics_changed(topics, now_ms);
                    }
                    Group::Share(g) => {
                        g.on_topics_changed(topics, now_ms);
                    }
                    Group::Classic(_) => {}
                }
            }
        }
        inner
    }

    /// Drops every group's committed offsets for topics that are gone from the image: deleted,
    /// or deleted and recreated under a new ID (a new topic must not inherit old positions), as
    /// Kafka's coordinator does when partitions are deleted. On the first refresh after startup,
    /// `previous` is empty and any offset of a topic missing from the image goes (a deletion
    /// the broker did not see through before stopping).
    fn forget_deleted_topics(&self, inner: &mut Inner, previous: &TopicsImage, first: bool) {
        let gone: Vec<String> = if first {
            let mut names: Vec<String> = inner
                .offsets
                .groups()
                .flat_map(|g| inner.offsets.fetch_all(g).map(|(k, _)| k.topic.clone()))
                .filter(|topic| !inner.topics.by_name.contains_key(topic))
                .collect();
            names.sort();
            names.dedup();
            names
        } else {
            previous
                .by_name
                .iter()
                .filter(|(name, (id, _))| {
                    inner.topics.by_name.get(*name).map(|(now, _)| now) != Some(id)
                })
                .map(|(name, _)| name.clone())
                .collect()
        };
        let mut tombstones = Vec::new();
        for topic in gone {
            for (group, key) in inner.offsets.delete_topic(&topic) {
                tombstones.push((offset_key(&group, &key), None));
            }
        }
        if tombstones.is_empty() {
            return;
        }
        tracing::info!(
            offsets = tombstones.len(),
            "forgetting offsets of deleted topics"
        );
        if let Err(e) = inner.kv.append(&tombstones) {
            tracing::error!(error = %e, "cannot persist the removal of deleted topics' offsets");
        }
    }

    /// The config a group runs with: the broker's, with the group's overrides applied.
    pub fn group_config<'a>(&'a self, inner: &Inner, group_id: &str) -> Cow<'a, GroupConfig> {
        effective(&self.config, &inner.group_configs, group_id)
    }

    /// Replaces a group's config overrides (none: removes them) and persists the change.
    pub fn set_group_overrides(
        &self,
        inner: &mut Inner,
        group_id: &str,
        overrides: GroupOverrides,
    ) -> Result<()> {
        let value = if overrides.is_empty() {
            if !inner.group_configs.contains_key(group_id) {
                return Ok(());
            }
            None
        } else {
            Some(Bytes::from(
                serde_json::to_vec(&overrides).context("serialising group configs")?,
            ))
        };
        inner.kv.append(&[(config_key(group_id), value)])?;
        if overrides.is_empty() {
            inner.group_configs.remove(group_id);
        } else {
            inner.group_configs.insert(group_id.to_string(), overrides);
        }
        // A shorter session timeout takes effect at the member's next heartbeat; wake the timer
        // so nothing waits on a deadline computed from the old value longer than needed.
        self.timers_changed.notify_one();
        self.maybe_compact(inner);
        Ok(())
    }

    pub fn next_token(&self) -> u64 {
        self.next_token.fetch_add(1, Ordering::Relaxed)
    }

    /// Parks a classic request: its answer arrives on the receiver.
    pub fn park(
        &self,
        inner: &mut Inner,
        token: u64,
        group_id: &str,
    ) -> oneshot::Receiver<ClassicResponse> {
        let (tx, rx) = oneshot::channel();
        inner.pending.insert(token, (group_id.to_string(), tx));
        rx
    }

    /// Turns a consumer group whose last KIP-848 member just left into a classic group of its
    /// remaining classic members (online downgrade, [`skiff_group::migration::downgrade`]).
    pub fn maybe_downgrade(&self, inner: &mut Inner, group_id: &str, now_ms: i64) {
        let Some(Group::Consumer(group)) = inner.groups.get_mut(group_id) else {
            return;
        };
        if !group.take_downgrade() {
            return;
        }
        let (classic, completions) =
            skiff_group::migration::downgrade(group, &inner.topics, now_ms);
        inner
            .groups
            .insert(group_id.to_string(), Group::Classic(classic));
        // The new group is stored whatever its change counter.
        inner.persisted.remove(group_id);
        self.deliver(inner, completions);
    }

    /// Answers parked requests.
    pub fn deliver(&self, inner: &mut Inner, completions: Vec<Completion>) {
        for completion in completions {
            if let Some((_, tx)) = inner.pending.remove(&completion.token) {
                let _ = tx.send(completion.response);
            }
        }
    }

    /// Writes the group's snapshot if its persistent state changed (or a tombstone if it is
    /// gone), and wakes the timer if the group now has an earlier deadline.
    pub fn after_change(&self, inner: &mut Inner, group_id: &str) {
        let change = match inner.groups.get(group_id) {
            Some(group) => {
                if let Some(deadline) = group.next_deadline()
                    && deadline < self.armed_deadline.load(Ordering::Relaxed)
                {
                    self.timers_changed.notify_one();
                }
                let counter = group.change_counter();
                if inner.persisted.get(group_id) == Some(&counter) {
                    return;
                }
                let stored = StoredGroup::of(group);
                match serde_json::to_vec(&stored) {
                    Ok(json) => {
                        inner.persisted.insert(group_id.to_string(), counter);
                        Some(Bytes::from(json))
                    }
                    Err(e) => {
                        tracing::error!(group = group_id, error = %e, "cannot serialise a group");
                        return;
                    }
                }
            }
            None => {
                if inner.persisted.remove(group_id).is_none() {
                    return;
                }
                None
            }
        };
        if let Err(e) = inner.kv.append(&[(group_key(group_id), change)]) {
            tracing::error!(group = group_id, error = %e, "cannot persist a group");
        }
    }

    /// Stores committed offsets; returns the log end offset to wait for.
    pub fn store_offsets(
        &self,
        inner: &mut Inner,
        group_id: &str,
        commits: Vec<(OffsetKey, CommittedOffset)>,
    ) -> Result<i64> {
        let mut changes = Vec::with_capacity(commits.len());
        for (key, value) in &commits {
            let json = serde_json::to_vec(value).context("serialising an offset")?;
            changes.push((offset_key(group_id, key), Some(Bytes::from(json))));
        }
        let end = inner.kv.append(&changes)?;
        for (key, value) in commits {
            inner.offsets.commit(group_id, key, value);
        }
        self.maybe_compact(inner);
        Ok(end)
    }

    /// Deletes committed offsets (OffsetDelete, DeleteGroups).
    pub fn delete_offsets(
        &self,
        inner: &mut Inner,
        group_id: &str,
        keys: &[OffsetKey],
    ) -> Result<()> {
        let mut changes = Vec::new();
        for key in keys {
            if inner.offsets.delete(group_id, &key.topic, key.partition) {
                changes.push((offset_key(group_id, key), None));
            }
        }
        inner.kv.append(&changes)?;
        Ok(())
    }

    fn maybe_compact(&self, inner: &mut Inner) {
        if !inner.kv.needs_compaction() {
            return;
        }
        let mut pairs = Vec::new();
        for (group_id, group) in &inner.groups {
            let stored = StoredGroup::of(group);
            if let Ok(json) = serde_json::to_vec(&stored) {
                pairs.push((group_key(group_id), Bytes::from(json)));
            }
        }
        for (group_id, overrides) in &inner.group_configs {
            if let Ok(json) = serde_json::to_vec(overrides) {
                pairs.push((config_key(group_id), Bytes::from(json)));
            }
        }
        for (key, state) in &inner.share_states {
            if let Ok(json) = serde_json::to_vec(state) {
                pairs.push((share::state_key(key), Bytes::from(json)));
            }
        }
        let groups: Vec<String> = inner.offsets.groups().map(str::to_string).collect();
        for group in groups {
            for (key, value) in inner.offsets.fetch_all(&group) {
                if let Ok(json) = serde_json::to_vec(value) {
                    pairs.push((offset_key(&group, key), Bytes::from(json)));
                }
            }
        }
        if let Err(e) = inner.kv.compact(&pairs) {
            tracing::error!(error = %e, "group log compaction failed");
        }
    }

    /// Waits until the group log is durable up to `end` (with `flush = always`).
    pub async fn wait_durable(&self, end: i64) -> Result<(), StoreError> {
        crate::coordinator_store::wait_durable(self.durable.as_ref(), end).await
    }

    /// The earliest deadline of any group.
    pub fn next_deadline(&self) -> Option<i64> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let next = inner.groups.values().filter_map(Group::next_deadline).min();
        self.armed_deadline
            .store(next.unwrap_or(i64::MAX), Ordering::Relaxed);
        next
    }

    /// Fires every due timer; returns the members removed for their session or rebalance
    /// timeout: (group, protocol, member ID).
    pub fn fire_timers(
        &self,
        topics: &impl TopicsSource,
        now_ms: i64,
    ) -> Vec<(String, &'static str, String)> {
        let mut expired = Vec::new();
        let mut inner = self.lock(topics, now_ms);
        // Cluster mode: a group created just as its shard went away belongs to no one here.
        let Inner { groups, kv, .. } = &mut *inner;
        groups.retain(|id, _| kv.serves(id));
        let due: Vec<String> = inner
            .groups
            .iter()
            .filter(|(_, g)| g.next_deadline().is_some_and(|d| d <= now_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for group_id in due {
            let Inner {
                groups,
                topics,
                group_configs,
                ..
            } = &mut *inner;
            let config = effective(&self.config, group_configs, &group_id);
            let mut gone_members = Vec::new();
            let completions = match groups.get_mut(&group_id) {
                Some(Group::Consumer(g)) => {
                    let removed = g.on_timer(topics, &config, now_ms);
                    if !removed.is_empty() {
                        tracing::info!(group = %group_id, members = ?removed, "members expired");
                    }
                    expired.extend(
                        removed
                            .into_iter()
                            .map(|m| (group_id.clone(), "consumer", m)),
                    );
                    Vec::new()
                }
                Some(Group::Classic(g)) => g.on_timer(&config, now_ms),
                Some(Group::Share(g)) => {
                    let removed = g.on_timer(topics, &config, now_ms);
                    if !removed.is_empty() {
                        tracing::info!(group = %group_id, members = ?removed, "share group members expired");
                    }
                    expired.extend(
                        removed
                            .iter()
                            .map(|m| (group_id.clone(), "share", m.clone())),
                    );
                    gone_members = removed;
                    Vec::new()
                }
                None => Vec::new(),
            };
            drop(config);
            self.maybe_downgrade(&mut inner, &group_id, now_ms);
            for member_id in gone_members {
                share::push_share_event(
                    &mut inner,
                    share::ShareEvent::MemberGone {
                        group_id: group_id.clone(),
                        member_id,
                    },
                );
            }
            self.deliver(&mut inner, completions);
            self.after_change(&mut inner, &group_id);
        }
        expired
    }

    /// Committed offsets of a group, for OffsetFetch with all topics.
    pub fn offsets_of(inner: &Inner, group: &str) -> BTreeMap<OffsetKey, CommittedOffset> {
        inner
            .offsets
            .fetch_all(group)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_keys_round_trip() {
        let key = owner_key("g", "group.instance.id:x");
        assert_eq!(record_group(&key), Some("g"));
        assert_eq!(
            parse_owner(&key, b"User:alice"),
            Some((
                "g".into(),
                "group.instance.id:x".into(),
                "User:alice".into()
            ))
        );
        assert_eq!(parse_owner(b"w\0no-separator", b"User:a"), None);
        assert_eq!(parse_owner(&key, &[0xff]), None);
    }

    #[test]
    fn offset_keys_round_trip() {
        let key = OffsetKey {
            topic: "t.1".into(),
            partition: 12,
        };
        let raw = offset_key("group-a", &key);
        assert_eq!(parse_offset_key(&raw), Some(("group-a".to_string(), key)));
        assert_eq!(parse_offset_key(b"g\0x"), None);
        assert_eq!(parse_offset_key(b"o\0g\0t\0nope"), None);
    }

    /// A coordinator store in memory whose pairs outlive the coordinator (a "restart" opens a
    /// new coordinator over the same map).
    #[derive(Clone, Default)]
    pub(super) struct MemoryStore(pub(super) Arc<Mutex<BTreeMap<Bytes, Bytes>>>);

    impl CoordinatorStore for MemoryStore {
        fn append(&mut self, changes: &[(Bytes, Option<Bytes>)]) -> Result<i64> {
            let mut pairs = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            for (key, value) in changes {
                match value {
                    Some(v) => pairs.insert(key.clone(), v.clone()),
                    None => pairs.remove(key),
                };
            }
            Ok(pairs.len() as i64)
        }

        fn needs_compaction(&self) -> bool {
            false
        }

        fn compact(&mut self, _live: &[(Bytes, Bytes)]) -> Result<()> {
            Ok(())
        }
    }

    struct Topics;

    impl TopicsSource for Topics {
        fn topics_generation(&self) -> u64 {
            1
        }

        fn topics_image(&self) -> TopicsImage {
            let mut image = TopicsImage::default();
            image.insert("orders", skiff_protocol::Uuid::from_u128(3), 2);
            image
        }
    }

    pub(super) fn open(store: &MemoryStore) -> GroupCoordinator {
        let pairs = store
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let opened = Opened {
            store: Box::new(store.clone()),
            pairs,
            durable: None,
        };
        GroupCoordinator::open(opened, GroupConfig::default(), 0).expect("open")
    }

    /// The coordinator writes through its storage seam: committed offsets and group configs
    /// stored in a second backend are there when a new coordinator opens it; offsets of a topic
    /// that no longer exists are forgotten with tombstones.
    #[test]
    fn committed_offsets_survive_a_restart_through_any_coordinator_store() {
        let store = MemoryStore::default();
        let coordinator = open(&store);
        let commit = |partition, offset| {
            (
                OffsetKey {
                    topic: "orders".into(),
                    partition,
                },
                CommittedOffset {
                    offset,
                    leader_epoch: -1,
                    metadata: None,
                    commit_timestamp_ms: 1,
                },
            )
        };
        {
            let mut inner = coordinator.lock(&Topics, 1);
            coordinator
                .store_offsets(&mut inner, "g", vec![commit(0, 42), commit(1, 7)])
                .expect("stored");
            let gone = OffsetKey {
                topic: "deleted".into(),
                partition: 0,
            };
            coordinator
                .store_offsets(&mut inner, "g", vec![(gone, commit(0, 1).1)])
                .expect("stored");
        }
        assert_eq!(store.0.lock().expect("pairs").len(), 3);
        drop(coordinator);

        let restarted = open(&store);
        let inner = restarted.lock(&Topics, 2);
        let offsets = GroupCoordinator::offsets_of(&inner, "g");
        let found: Vec<(i32, i64)> = offsets
            .iter()
            .map(|(k, v)| (k.partition, v.offset))
            .collect();
        assert_eq!(found, vec![(0, 42), (1, 7)]);
        // The offset of the topic missing from the image went, with a tombstone in the store.
        assert_eq!(store.0.lock().expect("pairs").len(), 2);
    }

    /// Topics whose image a test changes (a topic deletion bumps the generation).
    pub(super) struct ChangingTopics {
        pub(super) image: Mutex<TopicsImage>,
        pub(super) generation: AtomicU64,
    }

    impl TopicsSource for ChangingTopics {
        fn topics_generation(&self) -> u64 {
            self.generation.load(Ordering::Relaxed)
        }

        fn topics_image(&self) -> TopicsImage {
            self.image
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }
    }

    pub(super) fn share_join(
        group: &str,
        member: &str,
        epoch: i32,
        topics: Option<Vec<&str>>,
    ) -> skiff_protocol::generated::ShareGroupHeartbeatRequest {
        skiff_protocol::generated::ShareGroupHeartbeatRequest {
            group_id: group.into(),
            member_id: member.into(),
            member_epoch: epoch,
            subscribed_topic_names: topics.map(|t| t.into_iter().map(Into::into).collect()),
            ..Default::default()
        }
    }

    pub(super) const CLIENT: skiff_group::consumer::ClientInfo<'static> =
        skiff_group::consumer::ClientInfo {
            client_id: "c",
            client_host: "/127.0.0.1",
        };

    /// Share groups and their share-partition states go through the coordinator store: the
    /// initialization writes one snapshot per partition under `s\0...`, the seam reads and
    /// appends (a delta folded in), a restart restores group and states, a deleted topic's
    /// states go with it, and deleting the emptied group tombstones the rest.
    #[test]
    fn share_groups_and_their_partition_states_persist_through_the_store() {
        use share::{SharePartitionKey, ShareStateError, ShareStateRecord};
        use skiff_share::{DeliveryState, Delta, StateBatch};

        let orders = skiff_protocol::Uuid::from_u128(3);
        let audit = skiff_protocol::Uuid::from_u128(4);
        let mut image = TopicsImage::default();
        image.insert("orders", orders, 2);
        image.insert("audit", audit, 1);
        let topics = ChangingTopics {
            image: Mutex::new(image),
            generation: AtomicU64::new(1),
        };
        let store = MemoryStore::default();
        let coordinator = open(&store);

        // A join asks for the subscribed partitions to be initialized.
        let joined = coordinator
            .share_heartbeat(
                &topics,
                &share_join("sg", "m1", 0, Some(vec!["orders", "audit"])),
                CLIENT,
                10,
            )
            .expect("joined");
        let (init, reset) = joined.initialize.expect("initialization asked for");
        assert_eq!(reset, share::AutoOffsetReset::Latest);
        let asked: Vec<(skiff_protocol::Uuid, i32)> = init
            .partitions
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
            .collect();
        assert_eq!(asked, vec![(orders, 0), (orders, 1), (audit, 0)]);
        // orders-1 fails to resolve: it is asked for again later, the others are written.
        let resolved = vec![
            (orders, 0, Ok(40)),
            (orders, 1, Err("disk".to_string())),
            (audit, 0, Ok(7)),
        ];
        let done = coordinator.initialize_share_partitions(&topics, "sg", resolved, 11);
        assert_eq!(done.len(), 2);
        let key = SharePartitionKey::new("sg", orders, 0);
        let stored = store
            .0
            .lock()
            .expect("pairs")
            .get(&share::state_key(&key))
            .cloned();
        let stored: skiff_share::Snapshot =
            serde_json::from_slice(&stored.expect("a state record")).expect("a snapshot");
        assert_eq!((stored.start_offset, stored.state_epoch), (40, 0));
        assert!(stored.batches.is_empty());
        // The next heartbeat assigns what is initialized.
        let hb = coordinator
            .share_heartbeat(&topics, &share_join("sg", "m1", 1, None), CLIENT, 12)
            .expect("heartbeat");
        let assigned: Vec<(skiff_protocol::Uuid, Vec<i32>)> = hb
            .response
            .assignment
            .expect("assignment")
            .topic_partitions
            .into_iter()
            .map(|tp| (tp.topic_id, tp.partitions))
            .collect();
        assert_eq!(assigned, vec![(orders, vec![0]), (audit, vec![0])]);

        // The seam: a delta is folded into the stored state; a partition without state refuses.
        let batch = |first, last, state| StateBatch {
            first_offset: first,
            last_offset: last,
            delivery_state: state,
            delivery_count: 1,
        };
        let delta = Delta {
            start_offset: 40,
            batches: vec![batch(40, 44, DeliveryState::Acknowledged)],
        };
        coordinator
            .append_share_partition_state(&key, ShareStateRecord::Delta(delta))
            .expect("appended");
        let missing = SharePartitionKey::new("sg", orders, 1);
        assert!(matches!(
            coordinator.append_share_partition_state(
                &missing,
                ShareStateRecord::Delta(Delta {
                    start_offset: 0,
                    batches: vec![]
                })
            ),
            Err(ShareStateError::NotInitialized(_))
        ));
        drop(coordinator);

        // A restart restores the group (with its member) and the folded state.
        let restarted = open(&store);
        let state = restarted
            .share_partition_state(&key)
            .expect("state restored");
        assert_eq!(
            state.batches,
            vec![batch(40, 44, DeliveryState::Acknowledged)]
        );
        {
            let inner = restarted.lock(&topics, 20);
            match inner.groups.get("sg") {
                Some(Group::Share(g)) => assert!(g.has_member("m1")),
                _ => panic!("the share group was not restored"),
            }
        }
        // A snapshot replaces the state.
        let snapshot = skiff_share::Snapshot {
            start_offset: 45,
            state_epoch: 0,
            batches: vec![],
        };
        restarted
            .append_share_partition_state(&key, ShareStateRecord::Snapshot(snapshot.clone()))
            .expect("snapshot written");
        assert_eq!(restarted.share_partition_state(&key), Some(snapshot));

        // Deleting the topic "audit" takes its state with it.
        let audit_key = SharePartitionKey::new("sg", audit, 0);
        assert!(restarted.share_partition_state(&audit_key).is_some());
        topics.image.lock().expect("image").by_name.remove("audit");
        topics.generation.fetch_add(1, Ordering::Relaxed);
        drop(restarted.lock(&topics, 21));
        assert_eq!(restarted.share_partition_state(&audit_key), None);
        assert!(
            !store
                .0
                .lock()
                .expect("pairs")
                .contains_key(&share::state_key(&audit_key))
        );

        // A non-empty share group is not deleted; the emptied one goes with its states.
        let delete = skiff_protocol::generated::DeleteGroupsRequest {
            groups_names: vec!["sg".into()],
            ..Default::default()
        };
        let r = restarted.delete_groups(&topics, &delete, 22);
        assert_eq!(
            r.results[0].error_code,
            skiff_protocol::error_codes::NON_EMPTY_GROUP
        );
        restarted
            .share_heartbeat(&topics, &share_join("sg", "m1", -1, None), CLIENT, 23)
            .expect("left");
        let r = restarted.delete_groups(&topics, &delete, 24);
        assert_eq!(r.results[0].error_code, skiff_protocol::error_codes::NONE);
        assert_eq!(restarted.share_partition_state(&key), None);
        let pairs = store.0.lock().expect("pairs");
        assert!(
            pairs.keys().all(|k| record_group(k) != Some("sg")),
            "left: {:?}",
            pairs.keys().collect::<Vec<_>>()
        );
    }

    /// A share group ID is one type at a time: consumer heartbeats and classic joins are
    /// refused on it as Kafka refuses them, and a share heartbeat on another type's group is
    /// GROUP_ID_NOT_FOUND.
    #[test]
    fn share_groups_refuse_other_protocols_and_vice_versa() {
        let store = MemoryStore::default();
        let coordinator = open(&store);
        coordinator
            .share_heartbeat(
                &Topics,
                &share_join("sg", "m1", 0, Some(vec!["orders"])),
                CLIENT,
                1,
            )
            .expect("joined");
        coordinator
            .share_heartbeat(&Topics, &share_join("sg", "m1", -1, None), CLIENT, 2)
            .expect("left");
        // Even empty, a share group is not taken over by a consumer group.
        let consumer = skiff_protocol::generated::ConsumerGroupHeartbeatRequest {
            group_id: "sg".into(),
            member_id: "c1".into(),
            member_epoch: 0,
            rebalance_timeout_ms: 1000,
            subscribed_topic_names: Some(vec!["orders".into()]),
            topic_partitions: Some(vec![]),
            ..Default::default()
        };
        let e = coordinator
            .consumer_heartbeat(&Topics, &consumer, 1, CLIENT, 3)
            .expect_err("refused");
        assert_eq!(e.code, skiff_protocol::ErrorCode::GROUP_ID_NOT_FOUND);
        assert_eq!(e.message, "Group sg is not a consumer group.");
        let join = skiff_protocol::generated::JoinGroupRequest {
            group_id: "sg".into(),
            protocol_type: "consumer".into(),
            session_timeout_ms: 10_000,
            ..Default::default()
        };
        let joiner = requests::Joiner {
            client_id: "c",
            client_host: "/127.0.0.1",
        };
        assert_eq!(
            coordinator.join(&Topics, &join, 5, joiner, 4).err(),
            Some(skiff_protocol::ErrorCode::INCONSISTENT_GROUP_PROTOCOL)
        );
        // And the other way round.
        let consumer = skiff_protocol::generated::ConsumerGroupHeartbeatRequest {
            group_id: "cg".into(),
            ..consumer
        };
        coordinator
            .consumer_heartbeat(&Topics, &consumer, 1, CLIENT, 5)
            .expect("consumer joined");
        let e = coordinator
            .share_heartbeat(
                &Topics,
                &share_join("cg", "m1", 0, Some(vec!["orders"])),
                CLIENT,
                6,
            )
            .err()
            .expect("refused");
        assert_eq!(e.code, skiff_protocol::ErrorCode::GROUP_ID_NOT_FOUND);
        assert_eq!(e.message, "Group cg is not a share group.");
        // A share heartbeat that is not a join, to no group: GROUP_ID_NOT_FOUND, nothing made.
        let e = coordinator
            .share_heartbeat(&Topics, &share_join("none", "m1", 3, None), CLIENT, 7)
            .err()
            .expect("refused");
        assert_eq!(e.code, skiff_protocol::ErrorCode::GROUP_ID_NOT_FOUND);
        assert!(!coordinator.lock(&Topics, 8).groups.contains_key("none"));
    }
}
