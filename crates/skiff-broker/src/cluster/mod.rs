//! Cluster mode inside the broker: this broker's registration (lease, epoch, fencing), its view
//! of the live brokers and of the topics (mirrored from PostgreSQL into the metadata store that
//! every handler reads), partition placement, the produce pipeline ([`produce`]) and the fetch
//! path ([`fetch`]). The storage itself is `skiff-cluster`'s.
//!
//! Background tasks keep the views fresh: the lease is renewed every third of `cluster.lease.ms`
//! (a refused renewal means the broker was fenced: it stops answering as a leader and registers
//! again); PostgreSQL's LISTEN/NOTIFY wakes long polls on commits and reloads brokers and topics
//! when they change, with a one-second poll behind it; unused objects are deleted after their
//! grace period, uploads that were never committed are swept, and retention runs for the
//! partitions this broker leads. Coordinator shards ([`coordination`]) are claimed, loaded,
//! written through and released as placement moves them.

pub mod clients;
pub mod coordination;
pub mod documents;
pub mod fetch;
pub mod placement;
pub mod produce;
pub mod share;
pub mod side;
mod tasks;
pub mod transactions;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, PoisonError, RwLock};

use anyhow::{Context, Result};
use skiff_cluster::Db;
use skiff_cluster::commit::PartitionKey;
use skiff_cluster::membership::{self, BrokerInfo, Registration};
use skiff_cluster::objects::Objects;
use skiff_protocol::Uuid;
use tokio::sync::watch;

use crate::config::ClusterConfig;

/// What the cluster's background tasks need of the broker (implemented by `Broker`: this
/// module does not depend on it).
pub trait Host: Send + Sync + 'static {
    /// Makes the broker's topics these (PostgreSQL's, as just read).
    fn mirror(&self, topics: Vec<skiff_meta::TopicInfo>);
    /// Makes every group's config overrides these (PostgreSQL's, as just read).
    fn mirror_group_configs(
        &self,
        all: std::collections::BTreeMap<String, BTreeMap<String, String>>,
    );
    /// Takes in a coordinator shard just claimed: its records, each under its coordinator's
    /// namespace byte, and the topics that exist (offsets of others are of deleted topics);
    /// `loaded` runs under the coordinator's lock once they are in (so that nothing sees the
    /// shard owned but empty, or loaded but not owned).
    fn load_shard(
        &self,
        shard: i32,
        records: Vec<(Vec<u8>, Vec<u8>)>,
        topics: &std::collections::BTreeSet<String>,
        loaded: &dyn Fn(),
    );
    /// Forgets a coordinator shard this broker no longer owns.
    fn unload_shard(&self, shard: i32);
    /// Makes a shared document (ACLs, credentials, telemetry subscriptions) these bytes.
    fn mirror_document(&self, name: &str, body: &[u8]);
    /// With `client.instance.id.binding` on: how long a claim holds after its last connection
    /// closes, and the instance IDs with an owner's connection open here (and their owners).
    fn held_instances(&self) -> Option<(i64, Vec<(Uuid, String)>)>;
    /// The topics with a retention limit, and their limits.
    fn retention_targets(&self) -> Vec<RetentionTarget>;
    /// How often retention runs: `log.retention.check.interval.ms`, at least
    /// [`crate::state::RETENTION_CHECK_MIN`].
    fn retention_check_interval(&self) -> std::time::Duration;
}

/// A topic whose log start retention may move.
pub struct RetentionTarget {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    pub ms: Option<i64>,
    pub bytes: Option<i64>,
}

/// Runs `work` to completion from synchronous code (a handler) that holds no lock: PostgreSQL is
/// waited for on the caller's worker thread (`block_in_place`), so cluster mode needs tokio's
/// multi-thread runtime (the broker binary's). Code that waits under a lock uses
/// [`Cluster::sync_db`] instead ([`side`]).
pub fn block_on<T>(work: impl std::future::Future<Output = T>) -> Result<T, &'static str> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            Ok(tokio::task::block_in_place(|| handle.block_on(work)))
        }
        _ => Err("needs tokio's multi-thread runtime"),
    }
}

/// The key of a partition in `skiff-cluster`'s terms.
pub fn key(topic_id: Uuid, partition: i32) -> PartitionKey {
    PartitionKey {
        topic_id: uuid::Uuid::from_u128(topic_id.as_u128()),
        partition,
    }
}

/// The shortest hold of an instance ID's claim in PostgreSQL: claims are renewed every third of
/// the hold (at most every 10 s), so a shorter one would lapse between renewals.
pub const INSTANCE_HOLD_MIN_MS: i64 = 3_000;

/// Batches per partition the recent index keeps (a few seconds of a busy partition).
const RECENT_BATCHES_PER_PARTITION: usize = 256;

/// This broker's part in the cluster.
pub struct Cluster {
    pub config: ClusterConfig,
    pub db: Db,
    pub objects: Objects,
    pub node_id: i32,
    /// The addresses this broker registers (its listeners' advertised addresses).
    pub endpoints: membership::Endpoints,
    /// The current registration; `None` while fenced (until registered again).
    registration: RwLock<Option<Registration>>,
    /// The live brokers, by node ID.
    live: RwLock<Vec<BrokerInfo>>,
    /// Bumped at every commit this broker hears of (its own and, through NOTIFY, the others'):
    /// what long polls wait on.
    pub commits: watch::Sender<u64>,
    pub cache: fetch::ObjectCache,
    /// Partitions' offsets as last heard.
    pub known: fetch::KnownOffsets,
    /// The batches this broker committed last, per partition.
    pub recent: fetch::RecentIndex,
    pub pipeline: produce::Pipeline,
    /// The cluster's ID (the same on every broker, kept in PostgreSQL).
    pub cluster_id: String,
    pub stats: Stats,
    /// The producer IDs left in this broker's block: next, end (exclusive).
    producer_ids: std::sync::Mutex<(i64, i64)>,
    /// The coordinator shards this broker owns, and their writes.
    pub coordination: Arc<coordination::Coordination>,
    /// The shared documents' versions this broker has read.
    documents: documents::Seen,
    /// Woken when a transaction's end hands offsets to groups (announced by NOTIFY): the
    /// groups' coordinators apply them.
    pub txn_offsets_committed: tokio::sync::Notify,
    /// The share partitions this broker leads, and the epochs it claimed them at.
    pub share_epochs: share::ShareEpochs,
    /// PostgreSQL for share-partition state, on a thread of its own.
    pub share_db: share::ShareDb,
    /// PostgreSQL for synchronous work under locks (shared documents, instance claims), driven
    /// by a thread of its own.
    pub sync_db: side::SideDb,
}

/// Counters of the cluster's storage traffic (admin metrics, benchmarks).
#[derive(Default)]
pub struct Stats {
    pub objects_put: AtomicU64,
    pub bytes_put: AtomicU64,
    pub upload_failures: AtomicU64,
    pub commit_failures: AtomicU64,
    pub commits: AtomicU64,
    /// Partition reads answered from what this broker knew (at the high watermark, or from its
    /// recent index), and those that asked PostgreSQL's batch index.
    pub reads_local: AtomicU64,
    pub reads_postgres: AtomicU64,
}

impl Cluster {
    /// Connects, migrates the schema, and registers this broker.
    pub async fn join(
        config: ClusterConfig,
        node_id: i32,
        endpoints: membership::Endpoints,
    ) -> Result<Arc<Cluster>> {
        // A third of the lease: a paused broker's open commit releases its row locks, and a
        // commit stuck behind them gives up, well before the others' leases are at risk.
        let db = Db::with_limits(
            &config.metadata_url,
            config.pool_size,
            Some((config.lease_ms / 3).max(100)),
        )
        .context("cluster.metadata")?;
        let share_db =
            share::ShareDb::start(&config.metadata_url, 2, (config.lease_ms / 3).max(100))
                .context("cluster.metadata (share-state connections)")?;
        let sync_db = side::SideDb::start(
            "skiff-sync-db",
            &config.metadata_url,
            2,
            (config.lease_ms / 3).max(100),
        )
        .context("cluster.metadata (connections for synchronous callers)")?;
        let objects = Objects::open(&config.objects_url, &config.s3).context("cluster.objects")?;
        let (before, after) = skiff_cluster::schema::migrate(&db)
            .await
            .context("preparing the cluster's schema in PostgreSQL")?;
        if before != after {
            tracing::info!(from = before, to = after, "cluster schema migrated");
        }
        let candidate = crate::node_file::new_cluster_id();
        let cluster_id = skiff_cluster::schema::cluster_id(&db, &candidate)
            .await
            .context("reading the cluster ID")?;
        let reg = membership::register(
            &db,
            node_id,
            &endpoints,
            config.rack.as_deref(),
            config.lease_ms as i64,
        )
        .await
        .context("registering this broker")?;
        tracing::info!(node_id, epoch = reg.epoch, "registered in the cluster");
        let live = membership::live_brokers(&db).await?;
        let cache = fetch::ObjectCache::new(config.fetch_cache_max_bytes);
        let pipeline = produce::Pipeline::new(config.buffer_max_bytes);
        Ok(Arc::new(Cluster {
            config,
            db,
            objects,
            node_id,
            endpoints,
            registration: RwLock::new(Some(reg)),
            live: RwLock::new(live),
            commits: watch::Sender::new(0),
            cache,
            known: fetch::KnownOffsets::default(),
            recent: fetch::RecentIndex::new(RECENT_BATCHES_PER_PARTITION),
            pipeline,
            cluster_id,
            stats: Stats::default(),
            producer_ids: std::sync::Mutex::new((0, 0)),
            coordination: Arc::default(),
            documents: documents::Seen::default(),
            txn_offsets_committed: tokio::sync::Notify::new(),
            share_epochs: share::ShareEpochs::default(),
            share_db,
            sync_db,
        }))
    }

    pub fn registration(&self) -> Option<Registration> {
        *self
            .registration
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn set_registration(&self, reg: Option<Registration>) {
        *self
            .registration
            .write()
            .unwrap_or_else(PoisonError::into_inner) = reg;
    }

    /// Forgets the registration after PostgreSQL refused it: until the renewal task registers
    /// again, this broker leads nothing.
    pub fn fenced(&self, reg: Registration) {
        let mut current = self
            .registration
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if *current == Some(reg) {
            tracing::warn!(
                node_id = reg.node_id,
                epoch = reg.epoch,
                "fenced: this broker's lease lapsed; registering again"
            );
            *current = None;
        }
    }

    /// The live brokers (this one included while registered), by node ID.
    pub fn live(&self) -> Vec<BrokerInfo> {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_live(&self, live: Vec<BrokerInfo>) {
        let ids = |brokers: &[BrokerInfo]| -> Vec<(i32, i64)> {
            brokers.iter().map(|b| (b.node_id, b.epoch)).collect()
        };
        let mut current = self.live.write().unwrap_or_else(PoisonError::into_inner);
        let changed = ids(&current) != ids(&live);
        *current = live;
        drop(current);
        if changed {
            // Coordinator shards follow the live set at once.
            self.coordination.wake.notify_one();
        }
    }

    /// The lowest live node ID (Metadata's controller), or this broker's.
    pub fn controller(&self) -> i32 {
        self.live().first().map_or(self.node_id, |b| b.node_id)
    }

    /// The node leading a partition, by this broker's view of the live set.
    pub fn leader(&self, topic_id: Uuid, partition: i32) -> Option<i32> {
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        let ids: Vec<i32> = live.iter().map(|b| b.node_id).collect();
        placement::leader(topic_id, partition, &ids)
    }

    /// Whether this broker leads the partition now (registered, and chosen by placement).
    pub fn leads(&self, topic_id: Uuid, partition: i32) -> bool {
        self.registration().is_some() && self.leader(topic_id, partition) == Some(self.node_id)
    }

    /// Takes in logs' new offsets from this broker's own commits.
    pub fn learn(&self, changes: &[skiff_cluster::log::LogChange]) {
        self.known.learn(changes);
    }

    /// Takes in announced changes (any broker's commits and log-start moves).
    pub fn announced(&self, changes: &[skiff_cluster::log::LogChange]) {
        self.recent.announced(changes);
        self.known.learn(changes);
    }

    /// Forgets what was heard (announcements may have been missed).
    pub fn forget_heard(&self) {
        self.known.clear();
        self.recent.clear();
    }

    /// Ends this broker's registration (a clean stop): its partitions move to the others at
    /// once instead of after the lease.
    pub async fn leave(&self) {
        if let Some(reg) = self.registration()
            && let Err(e) = membership::deregister(&self.db, reg).await
        {
            tracing::warn!(error = %e, "leaving the cluster failed; the lease will lapse");
        }
    }

    /// The next producer ID of this broker's block, if any is left.
    pub fn next_producer_id(&self) -> Option<i64> {
        let mut ids = self
            .producer_ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (ids.0 < ids.1).then(|| {
            ids.0 += 1;
            ids.0 - 1
        })
    }

    /// Installs a new block `first..first + count` and hands out its first ID.
    pub fn take_producer_id_block(&self, first: i64, count: i64) -> i64 {
        let mut ids = self
            .producer_ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *ids = (first + 1, first + count);
        first
    }

    /// Tells long polls that something was committed.
    pub fn notify_commit(&self) {
        self.commits.send_modify(|n| *n = n.wrapping_add(1));
    }
}

pub use tasks::{spawn_tasks, sync_metadata, topic_info};
