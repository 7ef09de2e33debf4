//! The broker's shared state: metadata, open partition logs, and counters.
//!
//! Locks are `std` locks held for short, non-async critical sections; nothing awaits while
//! holding one. fdatasync happens outside every lock (group commit in `skiff-log`).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use skiff_log::{FlushPolicy, LogConfig, PartitionLog, TimestampPolicy};
use skiff_meta::{EffectiveTopicConfig, MetadataStore, TimestampType, TopicInfo};
use skiff_protocol::{ApiKey, Uuid};
use skiff_telemetry::subscriptions::Subscriptions;

use crate::clock::now_ms;
use crate::config::{BrokerConfig, FlushMode};
use crate::identity::RejectReason;
pub use crate::partition::{Partition, Topic};

/// The directory of the internal group log, inside the data directory (its name cannot be a
/// partition directory's, which always ends in `-<number>`).
pub const GROUP_LOG_DIR: &str = "__groups";

/// The log's flush policy for the broker's `flush` setting.
fn flush_policy(mode: FlushMode) -> FlushPolicy {
    match mode {
        FlushMode::Always => FlushPolicy::Always,
        FlushMode::Interval { flush_ms } => FlushPolicy::Interval { flush_ms },
    }
}

/// The shortest time between two retention runs, whatever `log.retention.check.interval.ms` says
/// (each run visits every partition).
pub(crate) const RETENTION_CHECK_MIN: std::time::Duration = std::time::Duration::from_millis(100);

/// The client metrics subscriptions, inside the data directory.
pub const SUBSCRIPTIONS_FILE: &str = "client-metrics.json";

/// The telemetry manager with the data directory's subscriptions (none in cluster mode: they are
/// the cluster's, mirrored once read).
fn open_telemetry(
    config: &BrokerConfig,
    cluster: bool,
) -> Result<skiff_telemetry::TelemetryManager> {
    let path = config.data_dir.join(SUBSCRIPTIONS_FILE);
    let read = if cluster {
        Err(std::io::Error::from(std::io::ErrorKind::NotFound))
    } else {
        std::fs::read(&path)
    };
    let subscriptions = match read {
        Ok(bytes) => {
            let snapshot: skiff_telemetry::subscriptions::SubscriptionsSnapshot =
                serde_json::from_slice(&bytes)
                    .with_context(|| format!("{} is not valid", path.display()))?;
            skiff_telemetry::subscriptions::Subscriptions::from_snapshot(&snapshot).map_err(
                |(name, e)| anyhow::anyhow!("{}: subscription {name}: {e}", path.display()),
            )?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            skiff_telemetry::subscriptions::Subscriptions::new()
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let telemetry_config = skiff_telemetry::TelemetryConfig {
        telemetry_max_bytes: config.telemetry_max_bytes,
        ..Default::default()
    };
    Ok(skiff_telemetry::TelemetryManager::with_subscriptions(
        telemetry_config,
        subscriptions,
    ))
}

/// Subscriptions from their stored JSON snapshot.
fn decode_subscriptions(body: &[u8]) -> Result<Subscriptions> {
    let snapshot: skiff_telemetry::subscriptions::SubscriptionsSnapshot =
        serde_json::from_slice(body).context("client metrics subscriptions")?;
    Subscriptions::from_snapshot(&snapshot)
        .map_err(|(name, e)| anyhow::anyhow!("subscription {name}: {e}"))
}

impl crate::groups::TopicsSource for Broker {
    fn topics_generation(&self) -> u64 {
        self.topics_generation.load(Ordering::Relaxed)
    }

    fn topics_image(&self) -> skiff_group::TopicsImage {
        let mut image = skiff_group::TopicsImage::default();
        for topic in self.all_topics() {
            image.insert(&topic.info.name, topic.info.id, topic.info.partitions);
        }
        image
    }
}

impl crate::cluster::Host for Broker {
    fn mirror(&self, topics: Vec<TopicInfo>) {
        let mirrored = self.meta_mut().mirror_topics(topics);
        match mirrored {
            Ok(_) => {
                self.mirror_cluster_topics();
            }
            Err(e) => tracing::error!(error = %e, "mirroring the cluster's topics failed"),
        }
    }

    fn mirror_group_configs(&self, all: BTreeMap<String, BTreeMap<String, String>>) {
        self.groups.mirror_overrides(all);
    }

    fn load_shard(
        &self,
        shard: i32,
        records: Vec<(Vec<u8>, Vec<u8>)>,
        topics: &std::collections::BTreeSet<String>,
        loaded: &dyn Fn(),
    ) {
        use crate::cluster::coordination::{GROUPS, TRANSACTIONS};
        let mut pairs: BTreeMap<Bytes, Bytes> = BTreeMap::new();
        let mut txn_pairs: BTreeMap<Bytes, Bytes> = BTreeMap::new();
        for (key, value) in records {
            match key.split_first() {
                Some((&GROUPS, rest)) => {
                    pairs.insert(Bytes::copy_from_slice(rest), Bytes::from(value));
                }
                Some((&TRANSACTIONS, rest)) => {
                    txn_pairs.insert(Bytes::copy_from_slice(rest), Bytes::from(value));
                }
                _ => {}
            }
        }
        let in_shard = |id: &str| skiff_cluster::coordinators::shard_of(id) == shard;
        // Transactions first: the shard counts as owned (`loaded`) once the groups are in too.
        let txns = self.txns.load_shard(txn_pairs, in_shard);
        // The shard's member owners are the stored ones, not what this broker last knew.
        self.security.owners.forget_members_of(in_shard);
        let (groups, owners) = self
            .groups
            .load_shard(pairs, in_shard, topics, now_ms(), loaded);
        for (group, member, principal) in owners {
            match skiff_auth::principal::KafkaPrincipal::parse(&principal) {
                Ok(principal) => {
                    self.security
                        .owners
                        .claim_member(&group, &member, &Arc::new(principal));
                }
                Err(e) => {
                    tracing::error!(%group, error = %e, "skipping an unreadable member owner")
                }
            }
        }
        tracing::debug!(shard, groups, txns, "groups and transactions loaded");
        if let Some(cluster) = &self.cluster {
            // Transactional offsets handed to these groups while nobody held them.
            cluster.txn_offsets_committed.notify_one();
        }
    }

    fn mirror_document(&self, name: &str, body: &[u8]) {
        use crate::cluster::documents::{ACLS, CLIENT_METRICS, CREDENTIALS};
        let mirrored = match name {
            ACLS => match &self.security.acls {
                Some(acls) => acls.mirror(body),
                None => Ok(()),
            },
            CREDENTIALS => self.security.mirror_credentials(body),
            CLIENT_METRICS => self.mirror_subscriptions(body),
            crate::cluster::documents::CLIENT_QUOTAS => {
                crate::quotas::decode(body).map(|q| self.quotas.set(q))
            }
            _ => Ok(()),
        };
        if let Err(e) = mirrored {
            tracing::error!(document = name, error = %format!("{e:#}"), "cannot read a shared document of the cluster");
        }
    }

    fn held_instances(&self) -> Option<(i64, Vec<(Uuid, String)>)> {
        let security = &self.config.security;
        (security.instance_binding != crate::config::InstanceBinding::Off).then(|| {
            (
                security.instance_binding_ms,
                self.security.owners.open_instances(),
            )
        })
    }

    fn unload_shard(&self, shard: i32) {
        let in_shard = |id: &str| skiff_cluster::coordinators::shard_of(id) == shard;
        self.groups.unload_shard(in_shard);
        self.txns.unload_shard(in_shard);
        self.security.owners.forget_members_of(in_shard);
    }

    fn retention_targets(&self) -> Vec<crate::cluster::RetentionTarget> {
        self.all_topics()
            .into_iter()
            .filter_map(|topic| {
                let config = self.meta().effective_topic_config(&topic.info.name).ok()?;
                let ms = (config.retention_ms >= 0).then_some(config.retention_ms);
                let bytes = (config.retention_bytes >= 0).then_some(config.retention_bytes);
                (ms.is_some() || bytes.is_some()).then(|| crate::cluster::RetentionTarget {
                    name: topic.info.name.clone(),
                    id: topic.info.id,
                    partitions: topic.info.partitions,
                    ms,
                    bytes,
                })
            })
            .collect()
    }

    fn retention_check_interval(&self) -> std::time::Duration {
        Broker::retention_check_interval(self)
    }
}

/// A broker as Metadata lists it.
pub(crate) struct Node {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// Counters shown on the admin endpoint and in logs.
pub struct Metrics {
    pub connections_accepted: AtomicU64,
    pub connections_open: AtomicU64,
    /// Connections closed because the TLS handshake failed (or timed out).
    pub tls_handshake_failures: AtomicU64,
    /// SASL authentications (and re-authentications) that succeeded, and that failed.
    pub sasl_successes: AtomicU64,
    pub sasl_failures: AtomicU64,
    pub connections_with_instance_id: AtomicU64,
    pub connections_without_instance_id: AtomicU64,
    pub identity_rejections: [AtomicU64; 3],
    pub requests: [AtomicU64; 128],
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            connections_accepted: AtomicU64::new(0),
            connections_open: AtomicU64::new(0),
            tls_handshake_failures: AtomicU64::new(0),
            sasl_successes: AtomicU64::new(0),
            sasl_failures: AtomicU64::new(0),
            connections_with_instance_id: AtomicU64::new(0),
            connections_without_instance_id: AtomicU64::new(0),
            identity_rejections: std::array::from_fn(|_| AtomicU64::new(0)),
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Metrics {
    pub fn count_request(&self, api_key: ApiKey) {
        if let Some(counter) = usize::try_from(api_key.key())
            .ok()
            .and_then(|i| self.requests.get(i))
        {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn count_rejection(&self, reason: RejectReason) {
        let index = RejectReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        if let Some(counter) = self.identity_rejections.get(index) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn rejections(&self, reason: RejectReason) -> u64 {
        RejectReason::ALL
            .iter()
            .position(|r| *r == reason)
            .and_then(|i| self.identity_rejections.get(i))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// Everything the handlers share.
pub struct Broker {
    pub config: BrokerConfig,
    pub cluster_id: String,
    /// The leader epoch of this broker's partitions: its start count on one node (every start
    /// is a new epoch, as when a Kafka partition's only replica comes back), 0 in cluster mode.
    leader_epoch: i32,
    /// Per listener (in `BrokerConfig::effective_listeners` order): the host and port clients
    /// connecting to it are told.
    pub advertised: Vec<(String, u16)>,
    meta: RwLock<MetadataStore>,
    topics: RwLock<HashMap<Uuid, Arc<Topic>>>,
    pub metrics: Metrics,
    producer_ids: Mutex<crate::producer_ids::ProducerIdAllocator>,
    /// Bumped whenever a topic is created, grown or deleted (the group coordinator's cue to
    /// refresh its view of the topics).
    topics_generation: AtomicU64,
    pub(crate) groups: crate::groups::GroupCoordinator,
    /// KIP-932 share partitions and share sessions (ShareFetch, ShareAcknowledge).
    pub(crate) share: crate::share::ShareManager,
    /// Client quotas: the configured ones and the meters (see [`crate::quotas`]).
    pub(crate) quotas: crate::quotas::QuotaManager,
    /// Held while a single node's quotas file is rewritten (one change at a time).
    quota_writes: Mutex<()>,
    pub(crate) txns: crate::txns::TransactionCoordinator,
    pub(crate) clients: crate::clients::ClientRegistry,
    /// What happened to each client instance, in order (see [`crate::journal`]).
    pub(crate) journal: Arc<crate::journal::ClientJournal>,
    /// KIP-714 client metrics: subscriptions, instances, latest values.
    telemetry: Mutex<skiff_telemetry::TelemetryManager>,
    /// Sends accepted pushes to the OTLP collector, when one is configured.
    pub otlp: Option<crate::otlp::Forwarder>,
    /// When the broker started (ms since the epoch).
    pub started_ms: i64,
    /// KIP-227 incremental fetch sessions.
    fetch_sessions: Mutex<crate::fetch_session::FetchSessions>,
    /// The segment files' descriptors, shared by every partition and bounded
    /// (`log.open.files.max`): idle partitions hold none.
    pub files: skiff_log::FileCacheHandle,
    /// Credentials and the OAuth key set.
    pub(crate) security: crate::security::SecurityState,
    /// Cluster mode: PostgreSQL and object storage hold the topics and their records; the
    /// topics here are a mirror without local partitions.
    pub(crate) cluster: Option<Arc<crate::cluster::Cluster>>,
    /// Work that outlives the request that started it (transaction ends), but not the broker:
    /// see [`Broker::spawn_detached`].
    detached: Mutex<tokio::task::JoinSet<()>>,
    /// Last, so it is dropped after every other field, the data directory's lock included:
    /// [`Broker::released`] waits for it.
    released: tokio::sync::watch::Sender<()>,
}

impl Broker {
    /// `log.retention.check.interval.ms`: how often retention runs (Kafka's default, 5 minutes,
    /// when unset or unreadable), at least [`RETENTION_CHECK_MIN`] apart.
    pub(crate) fn retention_check_interval(&self) -> std::time::Duration {
        let ms = self
            .meta()
            .broker_value("log.retention.check.interval.ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(300_000);
        std::time::Duration::from_millis(ms).max(RETENTION_CHECK_MIN)
    }

    /// Runs `work` as a task of its own, which goes on when its caller goes away (a transaction
    /// end completes even if its requester disconnects) and stops with the broker: the broker's
    /// shutdown aborts what is left ([`Broker::stop_detached`]), since such a task holds the
    /// broker's state and may wait on services that stopped before it.
    pub(crate) fn spawn_detached(&self, work: impl Future<Output = ()> + Send + 'static) {
        let mut detached = self.detached.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget the finished ones, so that the set holds only what still runs.
        while detached.try_join_next().is_some() {}
        detached.spawn(work);
    }

    /// Aborts every task of [`Broker::spawn_detached`] and waits until they are gone (at
    /// shutdown, once nothing starts new ones).
    pub(crate) async fn stop_detached(&self) {
        let mut detached =
            std::mem::take(&mut *self.detached.lock().unwrap_or_else(PoisonError::into_inner));
        detached.abort_all();
        while detached.join_next().await.is_some() {}
    }

    /// Resolves once this broker's state is dropped (every `Arc` to it gone) and the data
    /// directory is free for another broker.
    pub fn released(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut receiver = self.released.subscribe();
        async move {
            // Nothing is ever sent: `changed` ends only when the sender is dropped.
            while receiver.changed().await.is_ok() {}
        }
    }

    /// Opens the data directory: metadata, every partition log (with recovery), producer IDs.
    /// Must run inside a tokio runtime (group committers are tasks).
    /// `bound`: the address each listener bound, in `BrokerConfig::effective_listeners` order.
    pub fn open(config: BrokerConfig, bound: &[SocketAddr]) -> Result<Arc<Broker>> {
        Broker::open_in(config, bound, None)
    }

    /// [`Broker::open`]; with `cluster`, in cluster mode: `topics` (as PostgreSQL holds them)
    /// replace the local metadata's, and no partition is opened on local disk.
    pub(crate) fn open_in(
        config: BrokerConfig,
        bound: &[SocketAddr],
        cluster: Option<(Arc<crate::cluster::Cluster>, Vec<TopicInfo>)>,
    ) -> Result<Arc<Broker>> {
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("creating data directory {}", config.data_dir.display()))?;
        let mut meta = MetadataStore::open(&config.data_dir, &config.kafka)
            .with_context(|| format!("opening metadata in {}", config.data_dir.display()))?;
        let (cluster, cluster_topics) = match cluster {
            Some((c, topics)) => (Some(c), Some(topics)),
            None => (None, None),
        };
        let found = if cluster_topics.is_some() {
            Vec::new()
        } else {
            crate::partition_dirs::scan(&config.data_dir)?
        };
        if let Some(topics) = cluster_topics {
            meta.mirror_topics(topics)
                .context("mirroring the cluster's topics")?;
        } else if !meta.found_on_disk() && !found.is_empty() {
            restore_lost_metadata(&mut meta, &found, &config)?;
        }
        meta.ensure_written().context("writing the metadata file")?;
        let cluster_id = match &cluster {
            Some(c) => c.cluster_id.clone(),
            None => crate::node_file::load_or_create_cluster_id(&config.data_dir)?,
        };
        let leader_epoch = match &cluster {
            Some(_) => crate::partition::CLUSTER_LEADER_EPOCH,
            None => crate::node_file::next_leader_epoch(&config.data_dir)?,
        };
        let producer_ids = crate::producer_ids::ProducerIdAllocator::open(&config.data_dir)?;
        let advertised = config
            .effective_listeners()
            .into_iter()
            .zip(bound)
            .map(|(listener, bound)| {
                listener
                    .advertised
                    .unwrap_or_else(|| (bound.ip().to_string(), bound.port()))
            })
            .collect();
        let group_store = match &cluster {
            // Cluster mode: the groups are in PostgreSQL, loaded shard by shard as this broker
            // is given them.
            Some(c) => crate::coordinator_store::Opened {
                store: Box::new(c.coordination.store(
                    crate::cluster::coordination::GROUPS,
                    crate::groups::record_group,
                )),
                pairs: BTreeMap::new(),
                durable: Some(Arc::clone(&c.coordination.writer) as _),
            },
            None => crate::coordinator_store::open_local(
                &config.data_dir.join(GROUP_LOG_DIR),
                flush_policy(config.flush),
            )?,
        };
        let groups =
            crate::groups::GroupCoordinator::open(group_store, config.groups.clone(), now_ms())?;
        let txn_store = match &cluster {
            // Cluster mode: transactions live in the same shards, under their own namespace.
            Some(c) => crate::coordinator_store::Opened {
                store: Box::new(c.coordination.store(
                    crate::cluster::coordination::TRANSACTIONS,
                    crate::txns::record_transaction,
                )),
                pairs: BTreeMap::new(),
                durable: Some(Arc::clone(&c.coordination.writer) as _),
            },
            None => crate::coordinator_store::open_local(
                &config.data_dir.join(crate::txns::TXN_LOG_DIR),
                flush_policy(config.flush),
            )?,
        };
        let txns = crate::txns::TransactionCoordinator::open(txn_store, config.transactions)?;
        let telemetry = crate::state::open_telemetry(&config, cluster.is_some())?;
        let shared = cluster
            .as_ref()
            .map(|c| Arc::clone(c) as Arc<dyn crate::cluster::documents::SharedDocuments>);
        let security = crate::security::SecurityState::open(&config, shared)?;
        let open_files_max = config
            .log_open_files_max
            .unwrap_or_else(default_open_files_max);
        let otlp = config
            .telemetry_otlp_endpoint
            .clone()
            .map(crate::otlp::Forwarder::start);
        let share = crate::share::ShareManager::new(config.share_max_sessions);
        let quotas = crate::quotas::QuotaManager::open(&config.data_dir, cluster.is_some())?;
        let journal = Arc::new(crate::journal::ClientJournal::open(
            &config.data_dir,
            crate::journal::Bounds {
                per_instance: config.client_journal_max_events_per_instance,
                total: config.client_journal_max_events,
            },
        ));
        let broker = Arc::new(Broker {
            config,
            cluster_id,
            leader_epoch,
            advertised,
            meta: RwLock::new(meta),
            topics: RwLock::new(HashMap::new()),
            metrics: Metrics::default(),
            producer_ids: Mutex::new(producer_ids),
            fetch_sessions: Mutex::default(),
            topics_generation: AtomicU64::new(0),
            share,
            quotas,
            quota_writes: Mutex::new(()),
            groups,
            txns,
            clients: crate::clients::ClientRegistry::default(),
            journal,
            telemetry: Mutex::new(telemetry),
            otlp,
            started_ms: now_ms(),
            files: skiff_log::FileCacheHandle(skiff_log::FileCache::new(open_files_max)),
            security,
            cluster,
            detached: Mutex::new(tokio::task::JoinSet::new()),
            released: tokio::sync::watch::Sender::new(()),
        });
        if broker.cluster.is_some() {
            broker.mirror_cluster_topics();
            return Ok(broker);
        }
        let infos: Vec<TopicInfo> = broker.meta().topics().cloned().collect();
        // The markers the scan read: each partition directory is read once at start.
        let scanned: HashMap<PathBuf, Option<crate::partition_dirs::Marker>> = found
            .iter()
            .map(|f| (f.dir.clone(), f.marker.clone()))
            .collect();
        for info in infos {
            broker.open_topic_with(
                info,
                crate::partition_dirs::Durability::Synced,
                Some(&scanned),
            )?;
        }
        broker.clean_up_partition_dirs(&found)?;
        broker.keep_producer_ids_unique();
        Ok(broker)
    }

    /// Cluster mode's state, when the broker runs in it.
    pub(crate) fn cluster(&self) -> Option<&Arc<crate::cluster::Cluster>> {
        self.cluster.as_ref()
    }

    /// Cluster mode: makes the registered topics match the (mirrored) metadata, without local
    /// partitions. Returns whether anything changed.
    pub(crate) fn mirror_cluster_topics(&self) -> bool {
        let infos: Vec<TopicInfo> = self.meta().topics().cloned().collect();
        let mut topics = self.topics.write().unwrap_or_else(PoisonError::into_inner);
        let same = topics.len() == infos.len()
            && infos
                .iter()
                .all(|i| topics.get(&i.id).is_some_and(|t| t.info == *i));
        if same {
            return false;
        }
        *topics = infos
            .into_iter()
            .map(|info| {
                (
                    info.id,
                    Arc::new(Topic {
                        info,
                        partitions: Vec::new(),
                    }),
                )
            })
            .collect();
        drop(topics);
        self.topics_changed();
        true
    }

    pub fn meta(&self) -> RwLockReadGuard<'_, MetadataStore> {
        self.meta.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn meta_mut(&self) -> RwLockWriteGuard<'_, MetadataStore> {
        self.meta.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn lock_fetch_sessions(&self) -> MutexGuard<'_, crate::fetch_session::FetchSessions> {
        self.fetch_sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn lock_telemetry(&self) -> MutexGuard<'_, skiff_telemetry::TelemetryManager> {
        self.telemetry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the client metrics subscriptions and stores them: in the data directory
    /// (crash-safe replace), or in cluster mode in the cluster's document (the change applies
    /// to its current content, under its lock). `Ok(Err(_))`: `change` refused, nothing changed.
    pub fn alter_subscriptions<E>(
        &self,
        change: impl FnOnce(&mut Subscriptions) -> Result<(), E>,
    ) -> Result<Result<(), E>> {
        let mut telemetry = self.lock_telemetry();
        let Some(cluster) = &self.cluster else {
            let mut changed = telemetry.subscriptions().clone();
            if let Err(refusal) = change(&mut changed) {
                return Ok(Err(refusal));
            }
            let json = serde_json::to_vec_pretty(&changed.snapshot())
                .context("serialising subscriptions")?;
            crate::node_file::write_atomically(
                &self.config.data_dir.join(SUBSCRIPTIONS_FILE),
                &json,
            )?;
            *telemetry.subscriptions_mut() = changed;
            return Ok(Ok(()));
        };
        use crate::cluster::documents::SharedDocuments;
        let mut change = Some(change);
        let mut refused = None;
        let mut changed_to = None;
        let stored = cluster.update(crate::cluster::documents::CLIENT_METRICS, &mut |current| {
            let mut subs = match current {
                Some(body) => decode_subscriptions(body)?,
                None => Subscriptions::new(),
            };
            let change = change
                .take()
                .ok_or_else(|| anyhow::anyhow!("a subscription change ran twice"))?;
            if let Err(refusal) = change(&mut subs) {
                refused = Some(refusal);
                anyhow::bail!("refused");
            }
            let json = serde_json::to_vec_pretty(&subs.snapshot())?;
            changed_to = Some(subs);
            Ok(json)
        });
        if let Some(refusal) = refused {
            return Ok(Err(refusal));
        }
        stored?;
        if let Some(subs) = changed_to {
            *telemetry.subscriptions_mut() = subs;
        }
        Ok(Ok(()))
    }

    /// Changes the client quotas and stores them: in the data directory (crash-safe replace), or
    /// in cluster mode in the cluster's document (the change applies to its current content,
    /// under its lock). `Ok(Err(_))`: `change` refused, nothing changed.
    pub fn alter_quotas<E>(
        &self,
        change: impl FnOnce(&mut skiff_quota::entity::Quotas) -> Result<(), E>,
    ) -> Result<Result<(), E>> {
        let Some(cluster) = &self.cluster else {
            let _one_at_a_time = self
                .quota_writes
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let mut changed = self.quotas.quotas();
            if let Err(refusal) = change(&mut changed) {
                return Ok(Err(refusal));
            }
            crate::node_file::write_atomically(
                &self.config.data_dir.join(crate::quotas::QUOTAS_FILE),
                &crate::quotas::encode(&changed)?,
            )?;
            self.quotas.set(changed);
            return Ok(Ok(()));
        };
        use crate::cluster::documents::SharedDocuments;
        let mut change = Some(change);
        let mut refused = None;
        let mut changed_to = None;
        let stored = cluster.update(crate::cluster::documents::CLIENT_QUOTAS, &mut |current| {
            let mut quotas = match current {
                Some(body) => crate::quotas::decode(body)?,
                None => skiff_quota::entity::Quotas::default(),
            };
            let change = change
                .take()
                .ok_or_else(|| anyhow::anyhow!("a quota change ran twice"))?;
            if let Err(refusal) = change(&mut quotas) {
                refused = Some(refusal);
                anyhow::bail!("refused");
            }
            let body = crate::quotas::encode(&quotas)?;
            changed_to = Some(quotas);
            Ok(body)
        });
        if let Some(refusal) = refused {
            return Ok(Err(refusal));
        }
        stored?;
        if let Some(quotas) = changed_to {
            self.quotas.set(quotas);
        }
        Ok(Ok(()))
    }

    /// Cluster mode: the subscriptions are now these (the cluster's document, as just read).
    fn mirror_subscriptions(&self, body: &[u8]) -> Result<()> {
        let subs = decode_subscriptions(body)?;
        *self.lock_telemetry().subscriptions_mut() = subs;
        Ok(())
    }

    /// The versions this broker serves of `api` (what ApiVersions advertises).
    pub fn serves(&self, api: ApiKey) -> Option<(i16, i16)> {
        // Cluster mode has no broker-to-broker markers (a coordinator commits its markers
        // itself) and no local partitions or producer states to describe.
        if self.cluster.is_some()
            && matches!(
                api,
                ApiKey::WriteTxnMarkers
                    | ApiKey::DescribeProducers
                    | ApiKey::DescribeLogDirs
                    | ApiKey::AlterPartitionReassignments
            )
        {
            return None;
        }
        if !self.config.telemetry_enabled
            && matches!(
                api,
                ApiKey::GetTelemetrySubscriptions | ApiKey::PushTelemetry
            )
        {
            return None;
        }
        // KIP-932 share groups, unless turned off (`group.share.enable`).
        if !self.config.share_groups_enabled
            && matches!(
                api,
                ApiKey::ShareGroupHeartbeat
                    | ApiKey::ShareGroupDescribe
                    | ApiKey::ShareFetch
                    | ApiKey::ShareAcknowledge
                    | ApiKey::DescribeShareGroupOffsets
                    | ApiKey::AlterShareGroupOffsets
                    | ApiKey::DeleteShareGroupOffsets
            )
        {
            return None;
        }
        crate::versions::supported_versions(api)
    }

    /// Acts on what the group coordinator queued for the share-partition leader (members gone,
    /// states deleted). Returns the last group-log offset written.
    /// The leader epoch of this broker's partitions (see the field).
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    pub(crate) fn share_events(&self) -> Option<i64> {
        self.share
            .take_and_handle_events(self.share_store(), || self.groups.take_share_events())
    }

    /// Where share-partition state is kept: the group coordinator's log on a single node, the
    /// share partitions' own rows in PostgreSQL in cluster mode (claimed by the partition's
    /// leader, [`crate::cluster::share`]).
    pub(crate) fn share_store(&self) -> &dyn crate::share::StateStore {
        match &self.cluster {
            Some(cluster) => cluster.as_ref(),
            None => &self.groups,
        }
    }

    /// Waits until share-state writes up to `end` (what [`Broker::share_store`] returned) are
    /// durable: the group log's group commit on a single node; cluster mode's writes are durable
    /// when they return.
    pub(crate) async fn share_durable(&self, end: i64) -> Result<(), String> {
        if self.cluster.is_some() {
            return Ok(());
        }
        self.groups
            .wait_durable(end)
            .await
            .map_err(|e| format!("{e:#}"))
    }

    /// A connection closed: the share sessions it opened close and their members' records are
    /// released.
    pub(crate) fn share_connection_closed(&self, connection: u64) {
        if self.config.share_groups_enabled {
            self.share_events();
            self.share.connection_closed(self.share_store(), connection);
        }
    }

    /// Test support: the share partitions of `group_id` that have persisted state, as
    /// (topic ID, partition, start offset, state epoch), in order.
    #[doc(hidden)]
    pub fn share_partition_states(&self, group_id: &str) -> Vec<(Uuid, i32, i64, i32)> {
        self.groups
            .share_partitions_of(group_id)
            .into_iter()
            .filter_map(|key| {
                let state = self.groups.share_partition_state(&key)?;
                Some((
                    key.topic_id,
                    key.partition,
                    state.start_offset,
                    state.state_epoch,
                ))
            })
            .collect()
    }

    fn topics_changed(&self) {
        self.topics_generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Test support: decides and persists the end of a transaction as EndTxn does, without
    /// carrying it out (as if the broker stopped right after persisting PrepareCommit or
    /// PrepareAbort); `Ok(true)` when an end is now pending. In cluster mode it waits until the
    /// prepare is in PostgreSQL, and this broker never carries the end out (a successor will).
    #[doc(hidden)]
    pub fn prepare_transaction_end(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<bool, skiff_protocol::ErrorCode> {
        let planned = self
            .txns
            .end(transactional_id, producer_id, epoch, commit, now_ms())?;
        let Some((_, end)) = planned else {
            return Ok(false);
        };
        if self.cluster.is_some() {
            self.txns.start_ending(transactional_id);
            if let Some(end) = end {
                crate::cluster::block_on(self.txns.wait_durable(end))
                    .map_err(|_| skiff_protocol::ErrorCode::UNKNOWN_SERVER_ERROR)??;
            }
        }
        Ok(true)
    }

    /// Hands out a fresh producer ID (never one handed out before, across restarts).
    pub fn allocate_producer_id(&self) -> Result<i64> {
        if self.cluster.is_some() {
            return self
                .cluster_allocate_producer_id()
                .map_err(|e| anyhow::anyhow!("{e}"));
        }
        self.producer_ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .allocate()
    }

    /// The brokers Metadata and DescribeCluster list, with their addresses for clients of
    /// listener `listener`: this broker alone, or in cluster mode the live brokers.
    pub(crate) fn nodes_for(&self, listener: usize) -> Vec<Node> {
        let Some(cluster) = &self.cluster else {
            let (host, port) = self.advertised_for(listener);
            return vec![Node {
                node_id: self.node_id(),
                host: host.to_owned(),
                port: i32::from(port),
                rack: None,
            }];
        };
        let name = self
            .config
            .effective_listeners()
            .into_iter()
            .nth(listener)
            .map(|l| l.name)
            .unwrap_or_default();
        cluster
            .live()
            .iter()
            .map(|b| {
                let (host, port) = b.address(&name);
                Node {
                    node_id: b.node_id,
                    host: host.to_owned(),
                    port,
                    rack: b.rack.clone(),
                }
            })
            .collect()
    }

    /// Cluster mode: the live broker coordinating group `key` (placed like a partition), with
    /// its address for clients of `listener`.
    pub(crate) fn group_coordinator(&self, key: &str, listener: usize) -> Option<Node> {
        let cluster = self.cluster.as_ref()?;
        let ids: Vec<i32> = cluster.live().iter().map(|b| b.node_id).collect();
        let shard = skiff_cluster::coordinators::shard_of(key);
        let owner = crate::cluster::coordination::shard_owner(shard, &ids)?;
        self.nodes_for(listener)
            .into_iter()
            .find(|n| n.node_id == owner)
    }

    /// The controller Metadata names: this broker, or in cluster mode the lowest live one.
    pub(crate) fn controller_id(&self) -> i32 {
        self.cluster
            .as_ref()
            .map_or(self.node_id(), |c| c.controller())
    }

    /// Whether the topic named `name` has a partition `index` (on a single node, open here; in
    /// cluster mode, in the cluster's metadata).
    pub(crate) fn has_partition(&self, name: &str, index: i32) -> bool {
        self.topic_by_name(name).is_some_and(|t| {
            if self.cluster.is_some() {
                (0..t.info.partitions).contains(&index)
            } else {
                t.partition(index).is_some()
            }
        })
    }

    /// The leader of partition `index` of `topic` (`None`: no live broker, or no such
    /// partition).
    pub(crate) fn partition_leader(&self, topic: &Topic, index: i32) -> Option<i32> {
        match &self.cluster {
            Some(cluster) if (0..topic.info.partitions).contains(&index) => {
                cluster.leader(topic.info.id, index)
            }
            Some(_) => None,
            None => topic.partition(index).map(|_| self.node_id()),
        }
    }

    /// The host and port advertised to clients of listener `listener` (the first listener's
    /// for an index out of range).
    pub fn advertised_for(&self, listener: usize) -> (&str, u16) {
        self.advertised
            .get(listener)
            .or(self.advertised.first())
            .map_or(("127.0.0.1", 0), |(host, port)| (host.as_str(), *port))
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned()
    }

    pub fn topic_by_name(&self, name: &str) -> Option<Arc<Topic>> {
        let id = self.meta().topic_id(name)?;
        self.topic_by_id(id)
    }

    pub fn all_topics(&self) -> Vec<Arc<Topic>> {
        let mut topics: Vec<Arc<Topic>> = self
            .topics
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        topics.sort_by(|a, b| a.info.name.cmp(&b.info.name));
        topics
    }

    fn partition_dir(&self, topic: &str, index: i32) -> PathBuf {
        self.config
            .data_dir
            .join(crate::partition_dirs::dir_name(topic, index))
    }

    /// The log settings of a topic, from its effective config and the broker's flush mode.
    pub fn log_config(&self, topic: &EffectiveTopicConfig) -> LogConfig {
        let flush = flush_policy(self.config.flush);
        let positive = |v: i64| u64::try_from(v).ok();
        LogConfig {
            segment_bytes: u64::from(topic.segment_bytes),
            segment_ms: positive(topic.segment_ms),
            index_interval_bytes: u64::from(topic.index_interval_bytes.max(1)),
            max_message_bytes: topic.max_message_bytes as usize,
            timestamp_policy: match topic.message_timestamp_type {
                TimestampType::LogAppendTime => TimestampPolicy::LogAppendTime,
                _ => TimestampPolicy::CreateTime,
            },
            retention_ms: positive(topic.retention_ms),
            retention_bytes: positive(topic.retention_bytes),
            flush,
            recovery: self.config.log_recovery,
            files: self.files.clone(),
        }
    }

    /// Opens (creating if needed) the partitions of a topic and registers it.
    pub fn open_topic(&self, info: TopicInfo) -> Result<Arc<Topic>> {
        self.open_topic_with(info, crate::partition_dirs::Durability::Synced, None)
    }

    /// [`Broker::open_topic`]; with [`Durability::Deferred`](crate::partition_dirs::Durability)
    /// the new partitions' files are not synced one by one: the caller syncs the file system
    /// once before answering. `scanned`: the partition directories' markers as the start-up
    /// scan read them (`None`: read each from disk).
    fn open_topic_with(
        &self,
        info: TopicInfo,
        durability: crate::partition_dirs::Durability,
        scanned: Option<&Scanned>,
    ) -> Result<Arc<Topic>> {
        let effective = self.meta().effective_topic_config(&info.name)?;
        let log_config = self.log_config(&effective);
        let mut partitions = Vec::new();
        for index in 0..info.partitions {
            partitions.push(self.open_partition(
                &info,
                index,
                log_config.clone(),
                durability,
                scanned,
            )?);
        }
        let topic = Arc::new(Topic { info, partitions });
        self.topics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.info.id, Arc::clone(&topic));
        self.topics_changed();
        Ok(topic)
    }

    fn open_partition(
        &self,
        info: &TopicInfo,
        index: i32,
        config: LogConfig,
        durability: crate::partition_dirs::Durability,
        scanned: Option<&Scanned>,
    ) -> Result<Arc<Partition>> {
        let dir = self.partition_dir(&info.name, index);
        let created = self.claim_partition_dir(info, index, &dir, durability, scanned)?;
        let always = config.flush == FlushPolicy::Always;
        let mut log = if created && durability == crate::partition_dirs::Durability::Deferred {
            PartitionLog::open_unsynced(&dir, config)
        } else {
            PartitionLog::open(&dir, config)
        }
        .with_context(|| format!("opening partition {}-{index}", info.name))?;
        let epoch = self.leader_epoch();
        log.set_leader_epoch(Some(epoch));
        let end = log.log_end_offset();
        let epochs = crate::partition::epochs::EpochHistory::open(&dir, epoch, end);
        let partition = Partition::open(info, index, Box::new(log), epochs, always, now_ms());
        Ok(Arc::new(partition))
    }

    /// Creates a topic in the metadata and opens its partitions.
    pub fn create_topic(
        &self,
        new: &skiff_meta::NewTopic,
        validate_only: bool,
    ) -> Result<Arc<Topic>, skiff_meta::MetaError> {
        if self.cluster.is_some() && !validate_only {
            return self
                .cluster_create_topics(std::slice::from_ref(new))
                .pop()
                .unwrap_or_else(|| {
                    Err(skiff_meta::MetaError::io(
                        "creating a topic",
                        std::io::Error::other("nothing created"),
                    ))
                });
        }
        let info = self.meta_mut().create_topic(new, validate_only)?;
        if validate_only {
            return Ok(Arc::new(Topic {
                info,
                partitions: Vec::new(),
            }));
        }
        self.open_new_topic(info)
    }

    /// Opens the partitions of a topic just added to the metadata; on failure, undoes it.
    fn open_new_topic(&self, info: TopicInfo) -> Result<Arc<Topic>, skiff_meta::MetaError> {
        let name = info.name.clone();
        match self.open_new_topics(vec![info]).pop() {
            Some(result) => result,
            None => Err(skiff_meta::MetaError::io(
                format!("opening the partitions of {name}"),
                std::io::Error::other("nothing opened"),
            )),
        }
    }

    /// Opens the partitions of topics just added to the metadata, with one file-system sync for
    /// all of them before anyone is told of them. A topic that cannot be opened (all of them,
    /// when the sync fails) is undone: out of the metadata, its directories off the disk.
    fn open_new_topics(
        &self,
        infos: Vec<TopicInfo>,
    ) -> Vec<Result<Arc<Topic>, skiff_meta::MetaError>> {
        let durability = crate::partition_dirs::Durability::Deferred;
        let mut opened: Vec<Result<Arc<Topic>, (TopicInfo, String)>> = infos
            .into_iter()
            .map(|info| {
                self.open_topic_with(info.clone(), durability, None)
                    .map_err(|e| (info, format!("{e:#}")))
            })
            .collect();
        if opened.iter().any(Result::is_ok)
            && let Err(e) = crate::partition_dirs::sync_file_system(&self.config.data_dir)
        {
            let message = format!("{e:#}");
            opened = opened
                .into_iter()
                .map(|r| r.and_then(|topic| Err((topic.info.clone(), message.clone()))))
                .collect();
        }
        opened
            .into_iter()
            .map(|r| r.map_err(|(info, message)| self.undo_new_topic(&info, message)))
            .collect()
    }

    /// Leaves nothing of a topic whose creation failed: unregistered, out of the metadata, its
    /// directories off the disk.
    fn undo_new_topic(&self, info: &TopicInfo, message: String) -> skiff_meta::MetaError {
        tracing::error!(topic = %info.name, error = %message, "creating the partitions of a new topic failed; undoing it");
        if self
            .topics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&info.id)
            .is_some()
        {
            self.topics_changed();
        }
        // Bound first: the metadata's write lock must be released before the directories go
        // (removing them takes it again to drop the tombstone).
        let undone = self.meta_mut().undo_create_topic(info.id);
        match undone {
            Ok(_) => self.remove_partition_dirs(info),
            Err(undo) => {
                tracing::error!(topic = %info.name, error = %undo, "undoing the topic failed")
            }
        }
        skiff_meta::MetaError::io(
            "opening the partitions of a new topic",
            std::io::Error::other(message),
        )
    }

    /// Creates several topics with one metadata write (auto-creation of many topics by one
    /// Metadata request) and one file-system sync; a topic whose partitions cannot be opened
    /// is undone like in [`Broker::create_topic`].
    pub fn create_topics(
        &self,
        news: &[skiff_meta::NewTopic],
    ) -> Vec<Result<Arc<Topic>, skiff_meta::MetaError>> {
        if self.cluster.is_some() {
            return self.cluster_create_topics(news);
        }
        let created = self.meta_mut().create_topics(news);
        let infos: Vec<TopicInfo> = created.iter().flatten().cloned().collect();
        let mut opened = self.open_new_topics(infos).into_iter();
        created
            .into_iter()
            .map(|c| {
                c.and_then(|_| {
                    opened.next().unwrap_or_else(|| {
                        Err(skiff_meta::MetaError::io(
                            "opening a new topic",
                            std::io::Error::other("not opened"),
                        ))
                    })
                })
            })
            .collect()
    }

    /// Grows a registered topic to `info.partitions` partitions.
    pub fn grow_topic(&self, info: TopicInfo) -> Result<()> {
        let Some(old) = self.topic_by_id(info.id) else {
            self.open_topic(info)?;
            return Ok(());
        };
        let effective = self.meta().effective_topic_config(&info.name)?;
        let log_config = self.log_config(&effective);
        let mut partitions = old.partitions.clone();
        let durability = crate::partition_dirs::Durability::Deferred;
        for index in old.partitions.len() as i32..info.partitions {
            partitions.push(self.open_partition(
                &info,
                index,
                log_config.clone(),
                durability,
                None,
            )?);
        }
        crate::partition_dirs::sync_file_system(&self.config.data_dir)?;
        self.topics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(info.id, Arc::new(Topic { info, partitions }));
        self.topics_changed();
        Ok(())
    }

    /// Re-reads a topic's effective config and applies the log settings it implies to every
    /// open partition (after its config or a broker default changed). Unknown topics are ignored.
    pub fn reconfigure_topic(&self, name: &str) -> Result<()> {
        let Some(topic) = self.topic_by_name(name) else {
            return Ok(());
        };
        let effective = self.meta().effective_topic_config(name)?;
        let log_config = self.log_config(&effective);
        for partition in &topic.partitions {
            partition.reconfigure(&log_config)?;
        }
        Ok(())
    }

    /// [`Broker::reconfigure_topic`] for every topic (after a broker-level config change).
    pub fn reconfigure_all_topics(&self) -> Result<()> {
        for topic in self.all_topics() {
            self.reconfigure_topic(&topic.info.name)?;
        }
        Ok(())
    }

    /// Unregisters a deleted topic and deletes its partition directories (those whose marker
    /// carries its ID); the tombstone goes once they are gone.
    pub fn remove_topic(&self, id: Uuid) -> Result<()> {
        let removed = self
            .topics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        self.topics_changed();
        if let Some(topic) = removed {
            for partition in &topic.partitions {
                partition.mark_removed();
            }
            self.remove_partition_dirs(&topic.info);
        }
        Ok(())
    }

    /// Deletes the directories of `info`'s partitions that carry its ID, then forgets its
    /// tombstone if all went; a failure leaves the tombstone for the next start.
    fn remove_partition_dirs(&self, info: &TopicInfo) {
        let mut all_gone = true;
        for index in 0..info.partitions {
            let dir = self.partition_dir(&info.name, index);
            let ours = crate::partition_dirs::read_marker(&dir)
                .ok()
                .flatten()
                .and_then(|m| m.id(&dir).ok())
                == Some(info.id);
            if !ours {
                if dir.exists() {
                    tracing::warn!(dir = %dir.display(), "not deleted: its marker does not name the deleted topic");
                }
                continue;
            }
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::error!(dir = %dir.display(), error = %e, "deleting a partition directory failed; retried at the next start");
                all_gone = false;
            }
        }
        if all_gone && let Err(e) = self.meta_mut().forget_deleted_topic(info.id) {
            tracing::warn!(topic = %info.name, error = %e, "forgetting the tombstone failed; retried at the next start");
        }
    }

    /// Makes `dir` the directory of partition `index` of `info`: creates it with its marker, or
    /// checks the marker of the one there. A directory left by a deleted topic of the same name
    /// (its ID has a tombstone) is replaced; one of a topic the metadata does not know is an
    /// error, never overwritten.
    /// Returns whether the directory was created.
    fn claim_partition_dir(
        &self,
        info: &TopicInfo,
        index: i32,
        dir: &Path,
        durability: crate::partition_dirs::Durability,
        scanned: Option<&Scanned>,
    ) -> Result<bool> {
        use crate::partition_dirs::{self, Marker};
        let marker = Marker::new(&info.name, info.id, index);
        let on_disk = match scanned {
            // Not in the scan: no marker there (or no directory at all).
            Some(scanned) => scanned.get(dir).cloned().flatten(),
            None => partition_dirs::read_marker(dir)?,
        };
        match on_disk {
            Some(found) if found.id(dir)? == info.id => Ok(false),
            Some(found) => {
                let id = found.id(dir)?;
                if self.meta().deleted_topic(id).is_none() {
                    bail!(
                        "{} holds partition {} of topic {} ({id}), which the metadata does not know: \
                         move it away to open partition {index} of {} ({})",
                        dir.display(),
                        found.partition,
                        found.topic,
                        info.name,
                        info.id
                    );
                }
                tracing::info!(dir = %dir.display(), deleted = %id, "removing what a deleted topic of the same name left");
                std::fs::remove_dir_all(dir)
                    .with_context(|| format!("deleting {}", dir.display()))?;
                partition_dirs::create(&self.config.data_dir, dir, &marker, durability)?;
                Ok(true)
            }
            // A directory an older version created (no marker): the metadata names it.
            None if dir.exists() => partition_dirs::write_marker(dir, &marker).map(|()| false),
            None => {
                partition_dirs::create(&self.config.data_dir, dir, &marker, durability)?;
                Ok(true)
            }
        }
    }

    /// At start: deletes the directories of deleted topics (marker and tombstone agree) and
    /// forgets tombstones with nothing left on disk; leaves everything else alone. A directory
    /// named like a partition of a live topic was claimed when the topic was opened (its marker
    /// checked, written, or the deleted topic's data it held replaced).
    fn clean_up_partition_dirs(&self, found: &[crate::partition_dirs::Found]) -> Result<()> {
        let mut on_disk = std::collections::HashSet::new();
        for f in found {
            let live = crate::partition_dirs::parse_name(&f.name).and_then(|(name, index)| {
                self.topic_by_name(name)
                    .filter(|t| index < t.info.partitions)
            });
            if let Some(topic) = live {
                on_disk.insert(topic.info.id);
                continue;
            }
            let id = match &f.marker {
                Some(marker) => Some(marker.id(&f.dir)?),
                None => None,
            };
            match id {
                Some(id) if self.meta().deleted_topic(id).is_some() => {
                    tracing::info!(dir = %f.dir.display(), "removing the directory of a deleted topic");
                    if let Err(e) = std::fs::remove_dir_all(&f.dir) {
                        tracing::error!(dir = %f.dir.display(), error = %e, "deleting failed");
                        on_disk.insert(id);
                    }
                }
                _ => {
                    tracing::warn!(dir = %f.dir.display(), "left alone: not a partition of any topic the metadata knows");
                    on_disk.extend(id);
                }
            }
        }
        let tombstones: Vec<Uuid> = self.meta().deleted_topics().map(|t| t.id).collect();
        for id in tombstones {
            if !on_disk.contains(&id) {
                self.meta_mut().forget_deleted_topic(id)?;
            }
        }
        Ok(())
    }

    /// Producer IDs are never handed out twice: the allocator stays above every ID a partition
    /// or the transaction coordinator still knows, whatever its file says.
    fn keep_producer_ids_unique(&self) {
        let mut highest = self.txns.lock().state.max_producer_id();
        for topic in self.all_topics() {
            for partition in &topic.partitions {
                highest = highest.max(partition.max_producer_id());
            }
        }
        if let Some(highest) = highest {
            self.producer_ids
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .stay_above(highest);
        }
    }

    /// Applies retention to every partition (called periodically).
    pub fn apply_retention(&self) {
        let now = now_ms();
        for topic in self.all_topics() {
            for partition in &topic.partitions {
                partition.apply_retention(now);
            }
        }
    }

    /// Snapshots every partition's producer state (at a clean shutdown, after the final flush).
    pub fn snapshot_producers(&self) {
        for topic in self.all_topics() {
            for partition in &topic.partitions {
                partition.snapshot_producers();
            }
        }
    }

    /// Flushes every partition whose `flush.ms` is due (flush = interval), or all with `force`.
    pub fn flush_due(&self, force: bool) {
        let now = now_ms();
        for topic in self.all_topics() {
            for partition in &topic.partitions {
                partition.flush_if_due(now, force);
            }
        }
    }
}

/// Partition directories and the markers the start-up scan read in them.
type Scanned = HashMap<PathBuf, Option<crate::partition_dirs::Marker>>;

/// `log.open.files.max` unless set: half the open-file limit (the rest is for connections and
/// the broker's own files), at least 64 and at most 10,000.
pub fn default_open_files_max() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(20_000);
    usize::try_from(limit / 2)
        .unwrap_or(10_000)
        .clamp(64, 10_000)
}

/// The metadata file is missing while partition directories are present: refuse to start over
/// them, unless the operator asked to register their topics again (`--rebuild-metadata`).
fn restore_lost_metadata(
    meta: &mut MetadataStore,
    found: &[crate::partition_dirs::Found],
    config: &BrokerConfig,
) -> Result<()> {
    let file = config.data_dir.join(skiff_meta::METADATA_FILE);
    let examples: Vec<&str> = found.iter().take(3).map(|f| f.name.as_str()).collect();
    if !config.rebuild_metadata {
        bail!(
            "the metadata file {} is missing, but {} holds {} partition directories ({}{}): \
             refusing to start over them. Restore the file from a backup, or start once with \
             `skiff broker --rebuild-metadata` to register their topics again from the \
             directories (topic configs return to the defaults)",
            file.display(),
            config.data_dir.display(),
            found.len(),
            examples.join(", "),
            if found.len() > examples.len() {
                ", ..."
            } else {
                ""
            }
        );
    }
    for (name, id, partitions) in crate::partition_dirs::topics_on_disk(found)? {
        meta.restore_topic(&name, id, partitions)
            .with_context(|| format!("restoring topic {name}"))?;
    }
    tracing::warn!(file = %file.display(), topics = meta.topics().len(), "metadata rebuilt from the partition directories");
    Ok(())
}
