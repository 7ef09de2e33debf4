//! [`MetadataStore`]: topics, partitions, topic IDs and dynamic configs, persisted in one file.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use skiff_protocol::Uuid;

use crate::config::resolve::{self, BrokerTiers, Level};
use crate::config::{
    AlterConfigOp, BrokerConfigScope, ConfigEntry, EffectiveTopicConfig, broker_config_def,
};
use crate::error::{MetaError, Result};
use crate::persist;
use crate::topic_name::{topic_names_collide, validate_topic_name};

/// The metadata file inside the data directory.
pub const METADATA_FILE: &str = "skiff-meta.dat";
/// The lock file that keeps two processes from opening the same directory.
pub const LOCK_FILE: &str = "skiff-meta.lock";
/// Skiff's policy limit on partitions per topic (POLICY_VIOLATION above it): each partition is a
/// directory of files, and a single node has no business hosting more.
pub const MAX_PARTITIONS_PER_TOPIC: i32 = 10_000;

/// A topic as the store knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    /// Random, non-zero, fixed for the topic's life (a re-created topic gets a new one).
    /// Zero only in the answer to a `validate_only` creation.
    pub id: Uuid,
    /// Partitions `0..partitions`; always at least 1.
    pub partitions: i32,
    /// The topic's config overrides, canonicalised (Kafka's DYNAMIC_TOPIC_CONFIG entries).
    pub configs: BTreeMap<String, String>,
}

/// A topic addressed by name or by ID (DeleteTopics v6+ accepts either).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicRef<'a> {
    Name(&'a str),
    Id(Uuid),
}

/// A CreateTopics request for one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    /// -1 for the broker's `num.partitions`.
    pub num_partitions: i32,
    /// -1 for the broker's `default.replication.factor`; a single node can only honour 1.
    pub replication_factor: i16,
    /// Topic config overrides (Kafka names; validated and canonicalised on creation).
    pub configs: BTreeMap<String, String>,
}

impl NewTopic {
    /// A topic with `num_partitions` partitions, the default replication factor and no overrides.
    pub fn new(name: impl Into<String>, num_partitions: i32) -> Self {
        NewTopic {
            name: name.into(),
            num_partitions,
            replication_factor: -1,
            configs: BTreeMap::new(),
        }
    }

    /// Adds a config override.
    pub fn config(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.insert(name.into(), value.into());
        self
    }
}

/// The in-memory state; replaced wholesale after each successful write.
#[derive(Clone, Default)]
struct State {
    topics: BTreeMap<String, TopicInfo>,
    by_id: HashMap<Uuid, String>,
    /// Dynamic configs for this broker (DYNAMIC_BROKER_CONFIG).
    broker: BTreeMap<String, String>,
    /// Dynamic cluster-wide defaults (DYNAMIC_DEFAULT_BROKER_CONFIG).
    cluster_default: BTreeMap<String, String>,
    /// Tombstones: topics deleted whose partition data may still be on disk. The broker removes
    /// a partition directory only when its topic ID is here (proof that this broker created and
    /// deleted it), then forgets the tombstone.
    deleted: BTreeMap<Uuid, TopicInfo>,
}

impl State {
    fn insert_topic(&mut self, topic: TopicInfo) {
        self.by_id.insert(topic.id, topic.name.clone());
        self.topics.insert(topic.name.clone(), topic);
    }
}

/// The snapshot's JSON shape (format version 1).
#[derive(Serialize, Deserialize)]
struct Snapshot {
    topics: Vec<TopicRecord>,
    #[serde(default)]
    broker_configs: BTreeMap<String, String>,
    #[serde(default)]
    cluster_default_broker_configs: BTreeMap<String, String>,
    #[serde(default)]
    deleted_topics: Vec<TopicRecord>,
}

#[derive(Serialize, Deserialize)]
struct TopicRecord {
    name: String,
    /// Kafka's 22-character text form.
    id: String,
    partitions: i32,
    #[serde(default)]
    configs: BTreeMap<String, String>,
}

/// A single node's metadata: topics, partitions, topic IDs, topic and broker configs.
///
/// A plain struct: reads take `&self`, mutations `&mut self`, and every mutation is on disk
/// (written, fsynced, renamed, directory fsynced) before it returns; if the write fails the
/// in-memory state is unchanged. Sharing across tasks is the broker's job (an
/// `RwLock<MetadataStore>` suits: reads are cheap lookups, mutations are rare and brief).
///
/// The directory is locked (an OS file lock on [`LOCK_FILE`]) for as long as the store lives.
pub struct MetadataStore {
    dir: PathBuf,
    path: PathBuf,
    static_broker: BTreeMap<String, String>,
    state: State,
    /// Whether the metadata file existed when the store was opened.
    found: bool,
    _lock: File,
}

impl std::fmt::Debug for MetadataStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataStore")
            .field("dir", &self.dir)
            .field("topics", &self.state.topics.len())
            .finish_non_exhaustive()
    }
}

impl MetadataStore {
    /// Opens (creating if needed) the metadata in `data_dir` and loads the persisted state.
    ///
    /// `static_broker_configs` are the Kafka-named broker settings from the config file
    /// (STATIC_BROKER_CONFIG); an unknown key or invalid value is an error. A corrupt or truncated
    /// metadata file is an error ([`MetaError::Corrupt`]); an uncommitted temp file left by a
    /// crash is discarded.
    pub fn open(
        data_dir: impl AsRef<Path>,
        static_broker_configs: &BTreeMap<String, String>,
    ) -> Result<Self> {
        let dir = data_dir.as_ref().to_owned();
        fs::create_dir_all(&dir)
            .map_err(|e| MetaError::io(format!("creating {}", dir.display()), e))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| MetaError::io(format!("opening {}", lock_path.display()), e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(MetaError::Locked(dir)),
            Err(TryLockError::Error(e)) => {
                return Err(MetaError::io(format!("locking {}", lock_path.display()), e));
            }
        }
        let static_broker = resolve::normalize_all(static_broker_configs, Level::Broker)
            .map_err(|e| MetaError::InvalidStaticConfig(e.to_string()))?;

        let path = dir.join(METADATA_FILE);
        persist::remove_stale_temp(&path)?;
        let (state, found) = match persist::read(&path)? {
            Some(payload) => (load_state(&path, &payload)?, true),
            None => (State::default(), false),
        };
        tracing::info!(
            dir = %dir.display(),
            topics = state.topics.len(),
            "metadata loaded"
        );
        Ok(MetadataStore {
            dir,
            path,
            static_broker,
            state,
            found,
            _lock: lock,
        })
    }

    /// Writes the file of a new store (the broker calls it once it has checked that no data is
    /// orphaned), so that from then on a missing file always means a lost one.
    pub fn ensure_written(&mut self) -> Result<()> {
        if !self.path.exists() {
            self.commit(self.state.clone())?;
        }
        Ok(())
    }

    /// Whether the metadata file was there when the store was opened (false: a new store, or
    /// one whose file was lost; the broker then checks that no partition data is orphaned).
    /// See [`MetadataStore::ensure_written`].
    pub fn found_on_disk(&self) -> bool {
        self.found
    }

    /// The directory holding the metadata file.
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    // ----- Topic lookups ---------------------------------------------------------------------

    /// The topic called `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.state.topics.get(name)
    }

    /// The topic with this ID (never the zero ID).
    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicInfo> {
        self.state
            .by_id
            .get(&id)
            .and_then(|name| self.state.topics.get(name))
    }

    /// The ID of the topic called `name`.
    pub fn topic_id(&self, name: &str) -> Option<Uuid> {
        self.topic(name).map(|t| t.id)
    }

    /// The topic `topic` refers to, or UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID.
    pub fn resolve(&self, topic: TopicRef<'_>) -> Result<&TopicInfo> {
        match topic {
            TopicRef::Name(name) => self
                .topic(name)
                .ok_or_else(|| MetaError::UnknownTopic(name.to_owned())),
            TopicRef::Id(id) => self.topic_by_id(id).ok_or(MetaError::UnknownTopicId(id)),
        }
    }

    /// All topics, sorted by name.
    pub fn topics(&self) -> impl ExactSizeIterator<Item = &TopicInfo> {
        self.state.topics.values()
    }

    /// The deleted topic with this ID whose data may still be on disk (a tombstone).
    pub fn deleted_topic(&self, id: Uuid) -> Option<&TopicInfo> {
        self.state.deleted.get(&id)
    }

    /// Every tombstone: deleted topics whose data may still be on disk.
    pub fn deleted_topics(&self) -> impl ExactSizeIterator<Item = &TopicInfo> {
        self.state.deleted.values()
    }

    /// Forgets a tombstone once the topic's data is gone from disk.
    pub fn forget_deleted_topic(&mut self, id: Uuid) -> Result<()> {
        if !self.state.deleted.contains_key(&id) {
            return Ok(());
        }
        let mut next = self.state.clone();
        next.deleted.remove(&id);
        self.commit(next)
    }

    /// Re-registers a topic found on disk (name, ID, partition count) when the metadata file
    /// was lost: its configs are the defaults again. Errors: a bad name, the zero ID, or a
    /// name or ID already taken.
    pub fn restore_topic(&mut self, name: &str, id: Uuid, partitions: i32) -> Result<TopicInfo> {
        validate_topic_name(name)?;
        check_partition_count(partitions)?;
        if id.is_zero() || self.state.by_id.contains_key(&id) {
            return Err(MetaError::InvalidTopic {
                name: name.to_owned(),
                reason: format!("topic ID {id} is zero or taken"),
            });
        }
        if self.state.topics.contains_key(name) {
            return Err(MetaError::TopicAlreadyExists(name.to_owned()));
        }
        let topic = TopicInfo {
            name: name.to_owned(),
            id,
            partitions,
            configs: BTreeMap::new(),
        };
        let mut next = self.state.clone();
        next.insert_topic(topic.clone());
        self.commit(next)?;
        tracing::warn!(topic = %topic.name, id = %topic.id, partitions, "topic restored from its partition directories (configs are the defaults)");
        Ok(topic)
    }

    /// Makes the topics exactly `topics` (cluster mode: PostgreSQL holds the topics and this
    /// store mirrors them, so every reader of topics and configs works unchanged). Writes only
    /// when something changed; returns whether it did. Topics that left are not tombstoned:
    /// their data is the cluster's, not this broker's.
    pub fn mirror_topics(&mut self, topics: Vec<TopicInfo>) -> Result<bool> {
        let same = topics.len() == self.state.topics.len()
            && topics
                .iter()
                .all(|t| self.state.topics.get(&t.name) == Some(t));
        if same {
            return Ok(false);
        }
        let mut next = self.state.clone();
        next.topics.clear();
        next.by_id.clear();
        for topic in topics {
            next.insert_topic(topic);
        }
        self.commit(next)?;
        Ok(true)
    }

    // ----- Topic mutations -------------------------------------------------------------------

    /// Creates a topic (CreateTopics). With `validate_only` nothing is written and the returned
    /// topic has the zero ID.
    ///
    /// Errors: INVALID_TOPIC_EXCEPTION (bad name, or a name that collides with an existing one
    /// when `.` and `_` are treated alike), TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
    /// INVALID_REPLICATION_FACTOR (anything but 1 on a single node), INVALID_CONFIG,
    /// POLICY_VIOLATION (more than [`MAX_PARTITIONS_PER_TOPIC`]).
    pub fn create_topic(&mut self, new: &NewTopic, validate_only: bool) -> Result<TopicInfo> {
        if validate_only {
            return self.prepare_topic(&self.state, new);
        }
        self.create_topics(std::slice::from_ref(new))
            .pop()
            .unwrap_or_else(|| Err(MetaError::Random("no topic created".into())))
    }

    /// Creates several topics with one write (auto-creation of many topics at once): each
    /// result is what [`MetadataStore::create_topic`] would give, and the valid ones are
    /// committed together (so thousands of topics cost one write, not thousands).
    pub fn create_topics(&mut self, news: &[NewTopic]) -> Vec<Result<TopicInfo>> {
        let mut next = self.state.clone();
        let mut results = Vec::with_capacity(news.len());
        for new in news {
            let created = self.prepare_topic(&next, new).and_then(|mut topic| {
                topic.id = fresh_topic_id(&next)?;
                next.insert_topic(topic.clone());
                Ok(topic)
            });
            results.push(created);
        }
        if !results.iter().any(Result::is_ok) {
            return results;
        }
        match self.commit(next) {
            Ok(()) => {
                for topic in results.iter().flatten() {
                    tracing::info!(topic = %topic.name, id = %topic.id, partitions = topic.partitions, "topic created");
                }
                results
            }
            Err(e) => {
                // Nothing was written: every topic of the batch failed with the write.
                let (context, kind, message) = match &e {
                    MetaError::Io { context, source } => {
                        (context.clone(), source.kind(), source.to_string())
                    }
                    other => (
                        "writing the metadata".to_owned(),
                        std::io::ErrorKind::Other,
                        other.to_string(),
                    ),
                };
                results
                    .into_iter()
                    .map(|r| {
                        r.and_then(|_| {
                            Err(MetaError::io(
                                context.clone(),
                                std::io::Error::new(kind, message.clone()),
                            ))
                        })
                    })
                    .collect()
            }
        }
    }

    /// Checks a new topic against `state` and the broker's configs; the result has the zero ID.
    fn prepare_topic(&self, state: &State, new: &NewTopic) -> Result<TopicInfo> {
        validate_topic_name(&new.name)?;
        if state.topics.contains_key(&new.name) {
            return Err(MetaError::TopicAlreadyExists(new.name.clone()));
        }
        if let Some(other) = state
            .topics
            .keys()
            .find(|existing| topic_names_collide(existing, &new.name))
        {
            return Err(MetaError::InvalidTopic {
                name: new.name.clone(),
                reason: format!(
                    "it collides with existing topic '{other}' ('.' and '_' are alike in metric names)"
                ),
            });
        }
        let partitions = match new.num_partitions {
            -1 => self.broker_int("num.partitions")?,
            n => n,
        };
        check_partition_count(partitions)?;
        self.check_replication_factor(new.replication_factor)?;
        let configs = resolve::normalize_all(&new.configs, Level::Topic)?;
        resolve::validate_topic_values(&resolve::topic_values(&configs, self.tiers())?)?;
        Ok(TopicInfo {
            name: new.name.clone(),
            id: Uuid::ZERO,
            partitions,
            configs,
        })
    }

    /// Deletes a topic by name or ID (DeleteTopics) and returns what it was, so the caller can
    /// remove its partitions' data. Errors: UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID,
    /// TOPIC_DELETION_DISABLED (`delete.topic.enable=false`).
    pub fn delete_topic(&mut self, topic: TopicRef<'_>) -> Result<TopicInfo> {
        if self.broker_value("delete.topic.enable").as_deref() == Some("false") {
            self.resolve(topic)?;
            return Err(MetaError::TopicDeletionDisabled);
        }
        self.remove_topic(topic)
    }

    /// Takes back a topic whose creation could not be completed (its partitions could not be
    /// opened): deleted whatever `delete.topic.enable` says, with a tombstone for its data.
    pub fn undo_create_topic(&mut self, id: Uuid) -> Result<TopicInfo> {
        self.remove_topic(TopicRef::Id(id))
    }

    fn remove_topic(&mut self, topic: TopicRef<'_>) -> Result<TopicInfo> {
        let removed = self.resolve(topic)?.clone();
        let mut next = self.state.clone();
        next.topics.remove(&removed.name);
        next.by_id.remove(&removed.id);
        next.deleted.insert(removed.id, removed.clone());
        self.commit(next)?;
        tracing::info!(topic = %removed.name, id = %removed.id, "topic deleted");
        Ok(removed)
    }

    /// Raises a topic's partition count to `new_total` (CreatePartitions); it can only grow.
    /// Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, POLICY_VIOLATION.
    pub fn create_partitions(
        &mut self,
        name: &str,
        new_total: i32,
        validate_only: bool,
    ) -> Result<TopicInfo> {
        let mut topic = self.resolve(TopicRef::Name(name))?.clone();
        if new_total < topic.partitions {
            return Err(MetaError::InvalidPartitions(format!(
                "Topic currently has {} partitions, which is higher than the requested {new_total}.",
                topic.partitions
            )));
        }
        if new_total == topic.partitions {
            return Err(MetaError::InvalidPartitions(format!(
                "Topic already has {} partitions.",
                topic.partitions
            )));
        }
        check_partition_count(new_total)?;
        topic.partitions = new_total;
        if validate_only {
            return Ok(topic);
        }
        let mut next = self.state.clone();
        next.insert_topic(topic.clone());
        self.commit(next)?;
        tracing::info!(topic = %name, partitions = new_total, "partitions added");
        Ok(topic)
    }

    /// Checks a CreateTopics replication factor: -1 (the default, which must itself be 1) or 1.
    pub fn check_replication_factor(&self, replication_factor: i16) -> Result<()> {
        let factor = match replication_factor {
            -1 => self.broker_int("default.replication.factor")?,
            n if n < 1 => {
                return Err(MetaError::InvalidReplicationFactor(
                    "Replication factor must be larger than 0, or -1 to use the default value."
                        .into(),
                ));
            }
            n => i32::from(n),
        };
        if factor != 1 {
            return Err(MetaError::InvalidReplicationFactor(format!(
                "Unable to replicate the partition {factor} time(s): The target replication factor \
                 of {factor} cannot be reached because only 1 broker(s) are registered."
            )));
        }
        Ok(())
    }

    // ----- Topic configs ---------------------------------------------------------------------

    /// DescribeConfigs for a topic: every topic key, sorted by name.
    pub fn describe_topic_configs(&self, name: &str) -> Result<Vec<ConfigEntry>> {
        let topic = self.resolve(TopicRef::Name(name))?;
        resolve::describe_topic(&topic.configs, self.tiers())
    }

    /// What DescribeConfigs would report for a topic created with these overrides (CreateTopics
    /// v5+ returns it); validates them like `create_topic`.
    pub fn preview_topic_configs(
        &self,
        configs: &BTreeMap<String, String>,
    ) -> Result<Vec<ConfigEntry>> {
        let configs = resolve::normalize_all(configs, Level::Topic)?;
        resolve::describe_topic(&configs, self.tiers())
    }

    /// IncrementalAlterConfigs for a topic. Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG
    /// (unknown key, bad value, APPEND/SUBTRACT on a non-LIST key), INVALID_REQUEST (duplicate
    /// key, missing value). Nothing is applied unless every op is valid.
    /// The overrides a topic would have after `ops`, checked as
    /// [`MetadataStore::incremental_alter_topic_configs`] checks them, without changing anything
    /// (cluster mode stores them elsewhere first).
    pub fn plan_topic_configs(
        &self,
        name: &str,
        ops: &[AlterConfigOp],
    ) -> Result<BTreeMap<String, String>> {
        let topic = self.resolve(TopicRef::Name(name))?;
        let configs = resolve::apply_ops(&topic.configs, ops, Level::Topic)?;
        resolve::validate_topic_values(&resolve::topic_values(&configs, self.tiers())?)?;
        Ok(configs)
    }

    pub fn incremental_alter_topic_configs(
        &mut self,
        name: &str,
        ops: &[AlterConfigOp],
        validate_only: bool,
    ) -> Result<()> {
        let configs = self.plan_topic_configs(name, ops)?;
        let topic = self.resolve(TopicRef::Name(name))?;
        if validate_only || configs == topic.configs {
            return Ok(());
        }
        let mut updated = topic.clone();
        updated.configs = configs;
        let mut next = self.state.clone();
        next.insert_topic(updated);
        self.commit(next)?;
        tracing::info!(topic = %name, "topic configs altered");
        Ok(())
    }

    /// The typed effective config of a topic.
    pub fn effective_topic_config(&self, name: &str) -> Result<EffectiveTopicConfig> {
        let topic = self.resolve(TopicRef::Name(name))?;
        EffectiveTopicConfig::from_values(&resolve::topic_values(&topic.configs, self.tiers())?)
    }

    /// The effective config a topic without overrides gets (the broker-level defaults).
    pub fn default_topic_config(&self) -> Result<EffectiveTopicConfig> {
        EffectiveTopicConfig::from_values(&resolve::topic_values(&BTreeMap::new(), self.tiers())?)
    }

    // ----- Broker configs --------------------------------------------------------------------

    /// DescribeConfigs for a broker resource (see [`BrokerConfigScope`]).
    pub fn describe_broker_configs(&self, scope: BrokerConfigScope) -> Vec<ConfigEntry> {
        resolve::describe_broker(self.tiers(), scope)
    }

    /// The dynamic broker configs set at `scope` (the keys legacy AlterConfigs replaces).
    pub fn dynamic_broker_configs(&self, scope: BrokerConfigScope) -> BTreeMap<String, String> {
        match scope {
            BrokerConfigScope::ThisBroker => self.state.broker.clone(),
            BrokerConfigScope::ClusterDefault => self.state.cluster_default.clone(),
        }
    }

    /// IncrementalAlterConfigs for a broker resource: only dynamic keys may change (INVALID_CONFIG
    /// for read-only or unknown keys).
    pub fn incremental_alter_broker_configs(
        &mut self,
        scope: BrokerConfigScope,
        ops: &[AlterConfigOp],
        validate_only: bool,
    ) -> Result<()> {
        let mut next = self.state.clone();
        let target = match scope {
            BrokerConfigScope::ThisBroker => &mut next.broker,
            BrokerConfigScope::ClusterDefault => &mut next.cluster_default,
        };
        *target = resolve::apply_ops(target, ops, Level::Broker)?;
        let tiers = BrokerTiers {
            dynamic_broker: &next.broker,
            dynamic_default: &next.cluster_default,
            static_broker: &self.static_broker,
        };
        resolve::validate_topic_values(&resolve::topic_values(&BTreeMap::new(), tiers)?)?;
        if validate_only
            || (next.broker == self.state.broker
                && next.cluster_default == self.state.cluster_default)
        {
            return Ok(());
        }
        self.commit(next)?;
        tracing::info!(?scope, "broker configs altered");
        Ok(())
    }

    /// A broker key's current value (dynamic > cluster default > static > default); `None` for an
    /// unknown key or a key with no value.
    pub fn broker_value(&self, name: &str) -> Option<String> {
        broker_config_def(name).and_then(|def| self.tiers().value(def))
    }

    /// `auto.create.topics.enable`.
    pub fn auto_create_topics_enable(&self) -> bool {
        self.broker_value("auto.create.topics.enable").as_deref() != Some("false")
    }

    /// `num.partitions`: the partition count of a topic created with -1 or auto-created.
    pub fn default_num_partitions(&self) -> Result<i32> {
        self.broker_int("num.partitions")
    }

    // ----- Internals -------------------------------------------------------------------------

    fn tiers(&self) -> BrokerTiers<'_> {
        BrokerTiers {
            dynamic_broker: &self.state.broker,
            dynamic_default: &self.state.cluster_default,
            static_broker: &self.static_broker,
        }
    }

    fn broker_int(&self, name: &str) -> Result<i32> {
        let value = self.broker_value(name).unwrap_or_default();
        value
            .parse()
            .map_err(|_| MetaError::InvalidConfig(format!("{name}={value} is not an INT")))
    }

    /// Persists `next` and makes it current; on failure the current state is unchanged.
    fn commit(&mut self, next: State) -> Result<()> {
        let record = |t: &TopicInfo| TopicRecord {
            name: t.name.clone(),
            id: t.id.to_string(),
            partitions: t.partitions,
            configs: t.configs.clone(),
        };
        let snapshot = Snapshot {
            topics: next.topics.values().map(record).collect(),
            broker_configs: next.broker.clone(),
            cluster_default_broker_configs: next.cluster_default.clone(),
            deleted_topics: next.deleted.values().map(record).collect(),
        };
        let payload = serde_json::to_vec(&snapshot)
            .map_err(|e| MetaError::io("encoding metadata snapshot", std::io::Error::other(e)))?;
        persist::write_atomically(&self.path, &payload)?;
        self.state = next;
        Ok(())
    }
}

/// A random topic ID that `state` uses neither for a topic nor for a tombstone.
fn fresh_topic_id(state: &State) -> Result<Uuid> {
    // A collision among 122 random bits is not expected; retry a few times regardless.
    for _ in 0..8 {
        let id = Uuid::random().map_err(|e| MetaError::Random(e.to_string()))?;
        if !state.by_id.contains_key(&id) && !state.deleted.contains_key(&id) {
            return Ok(id);
        }
    }
    Err(MetaError::Random(
        "every generated topic ID was taken".into(),
    ))
}

fn check_partition_count(partitions: i32) -> Result<()> {
    if partitions < 1 {
        return Err(MetaError::InvalidPartitions(
            "Number of partitions was set to an invalid non-positive value.".into(),
        ));
    }
    if partitions > MAX_PARTITIONS_PER_TOPIC {
        return Err(MetaError::PolicyViolation(format!(
            "{partitions} partitions exceeds Skiff's limit of {MAX_PARTITIONS_PER_TOPIC} per topic."
        )));
    }
    Ok(())
}

/// Parses and checks a snapshot; anything inconsistent is reported as corruption.
fn load_state(path: &Path, payload: &[u8]) -> Result<State> {
    let corrupt = |reason: String| MetaError::Corrupt {
        path: path.to_owned(),
        reason,
    };
    let snapshot: Snapshot =
        serde_json::from_slice(payload).map_err(|e| corrupt(format!("bad snapshot: {e}")))?;
    let mut state = State {
        broker: resolve::normalize_all(&snapshot.broker_configs, Level::Broker)
            .map_err(|e| corrupt(format!("broker configs: {e}")))?,
        cluster_default: resolve::normalize_all(
            &snapshot.cluster_default_broker_configs,
            Level::Broker,
        )
        .map_err(|e| corrupt(format!("cluster default broker configs: {e}")))?,
        ..State::default()
    };
    for record in snapshot.topics {
        validate_topic_name(&record.name).map_err(|e| corrupt(e.to_string()))?;
        let id: Uuid = record.id.parse().map_err(|e| {
            corrupt(format!(
                "topic {}: bad ID {:?}: {e}",
                record.name, record.id
            ))
        })?;
        if id.is_zero() {
            return Err(corrupt(format!("topic {} has the zero ID", record.name)));
        }
        if record.partitions < 1 {
            return Err(corrupt(format!(
                "topic {} has {} partitions",
                record.name, record.partitions
            )));
        }
        if state.topics.contains_key(&record.name) || state.by_id.contains_key(&id) {
            return Err(corrupt(format!(
                "topic {} or its ID {id} appears twice",
                record.name
            )));
        }
        let configs = resolve::normalize_all(&record.configs, Level::Topic)
            .map_err(|e| corrupt(format!("topic {}: {e}", record.name)))?;
        state.insert_topic(TopicInfo {
            name: record.name,
            id,
            partitions: record.partitions,
            configs,
        });
    }
    for record in snapshot.deleted_topics {
        let id: Uuid = record.id.parse().map_err(|e| {
            corrupt(format!(
                "deleted topic {}: bad ID {:?}: {e}",
                record.name, record.id
            ))
        })?;
        if id.is_zero() || record.partitions < 1 || state.by_id.contains_key(&id) {
            return Err(corrupt(format!(
                "deleted topic {} ({id}, {} partitions) is not a valid tombstone",
                record.name, record.partitions
            )));
        }
        state.deleted.insert(
            id,
            TopicInfo {
                name: record.name,
                id,
                partitions: record.partitions,
                configs: BTreeMap::new(),
            },
        );
    }
    Ok(state)
}

#[cfg(test)]
mod tests;
