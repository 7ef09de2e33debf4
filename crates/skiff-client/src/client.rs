//! The shared client: identity, bootstrap, one connection per broker (replaced with jittered
//! backoff when it breaks), the metadata cache with topic IDs, and group coordinator lookup.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use skiff_protocol::generated::metadata_request::MetadataRequestTopic;
use skiff_protocol::generated::{FindCoordinatorRequest, MetadataRequest};
use skiff_protocol::{ApiKey, Request, RequestBody, Response, Uuid, error_codes};
use tokio::time::Instant;

use crate::connection::{Connection, ConnectionSettings, typed_response};
use crate::error::{Error, Result};
use crate::security::SecurityConfig;
use crate::telemetry::{self, ClientMetrics, Telemetry, TelemetryTransport};
use crate::tls::TlsClient;
use crate::util::{backoff, lock};

/// FindCoordinator key types.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// Settings shared by producers, consumers and admin calls built on one [`Client`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Bootstrap brokers, `host:port`.
    pub bootstrap: Vec<String>,
    /// The Kafka `client.id` sent in every request header.
    pub client_id: String,
    /// How long one request may wait for its response.
    pub request_timeout: Duration,
    /// How long a TCP connect + ApiVersions handshake may take.
    pub connect_timeout: Duration,
    /// First reconnect delay (`reconnect.backoff.ms`), doubled per failure, jittered ±20 %.
    pub reconnect_backoff: Duration,
    /// Upper bound of the reconnect delay (`reconnect.backoff.max.ms`).
    pub reconnect_backoff_max: Duration,
    /// Delay before retrying a failed request (`retry.backoff.ms`), doubled per attempt.
    pub retry_backoff: Duration,
    /// Metadata older than this is refreshed on use.
    pub metadata_max_age: Duration,
    /// Largest response frame accepted.
    pub max_frame_size: usize,
    /// Let Metadata requests auto-create topics (when the broker allows it).
    pub allow_auto_create_topics: bool,
    /// KIP-714 `enable.metrics.push`: push this client's metrics when the cluster subscribes to
    /// them (GetTelemetrySubscriptions/PushTelemetry with the instance ID). Default on.
    pub enable_metrics_push: bool,
    /// `security.protocol` with its TLS and SASL settings. Default: PLAINTEXT.
    pub security: SecurityConfig,
}

impl ClientConfig {
    /// A config for a comma-separated bootstrap list (`"127.0.0.1:9092,other:9092"`).
    pub fn new(bootstrap: &str) -> ClientConfig {
        ClientConfig {
            bootstrap: bootstrap
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            ..ClientConfig::default()
        }
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            bootstrap: vec!["127.0.0.1:9092".into()],
            client_id: "skiff-client".into(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
            retry_backoff: Duration::from_millis(100),
            metadata_max_age: Duration::from_secs(300),
            max_frame_size: 256 * 1024 * 1024,
            allow_auto_create_topics: false,
            enable_metrics_push: true,
            security: SecurityConfig::default(),
        }
    }
}

/// A broker from Metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// One partition from Metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub error_code: i16,
}

/// One topic from Metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    pub id: Uuid,
    pub internal: bool,
    pub error_code: i16,
    pub partitions: Vec<PartitionMetadata>,
}

impl TopicMetadata {
    pub fn partition(&self, partition: i32) -> Option<&PartitionMetadata> {
        self.partitions.iter().find(|p| p.partition == partition)
    }
}

/// The cached cluster view. `generation` grows with every refresh, so a stale invalidation (one
/// based on an older view) is ignored.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: BTreeMap<String, TopicMetadata>,
    pub generation: u64,
}

impl Metadata {
    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicMetadata> {
        self.topics.values().find(|t| t.id == id)
    }
}

struct NodeSlot {
    conn: Option<Arc<Connection>>,
    failures: u32,
    next_attempt: Option<Instant>,
}

struct Inner {
    config: ClientConfig,
    settings: ConnectionSettings,
    slots: Mutex<HashMap<i32, Arc<tokio::sync::Mutex<NodeSlot>>>>,
    /// Broker addresses learnt from Metadata and FindCoordinator.
    addresses: Mutex<HashMap<i32, String>>,
    metadata: Mutex<(Arc<Metadata>, Option<Instant>, bool)>,
    /// (key type: 0 group, 1 transaction; key) -> coordinator node.
    coordinators: Mutex<HashMap<(i8, String), i32>>,
    telemetry: Telemetry,
}

/// A Kafka client: one KIP-1313 instance ID for its whole life, shared by every connection,
/// producer, consumer and admin call made through it. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("instance_id", &self.inner.settings.instance_id)
            .field("bootstrap", &self.inner.config.bootstrap)
            .finish()
    }
}

/// The narrow handle telemetry gets: its state, the instance ID, the open connection count and
/// a typed request to any broker.
impl TelemetryTransport for Client {
    fn telemetry(&self) -> &Telemetry {
        &self.inner.telemetry
    }

    fn instance_id(&self) -> Uuid {
        self.inner.settings.instance_id
    }

    fn open_connections(&self) -> usize {
        Client::open_connections(self)
    }

    fn send<R>(&self, request: R) -> impl Future<Output = Result<R::Response>> + Send
    where
        R: RequestBody + Send + 'static,
        R::Response: Send,
    {
        self.request_any(move |_| request)
    }
}

/// Node IDs given to bootstrap addresses (Kafka uses negative IDs for them too).
fn bootstrap_node(index: usize) -> i32 {
    -1 - index as i32
}

impl Client {
    /// Creates a client with a fresh random instance ID. Nothing is connected yet.
    pub fn new(config: ClientConfig) -> Result<Client> {
        let instance_id = Uuid::random().map_err(|e| Error::Config(e.to_string()))?;
        Self::with_instance_id(config, instance_id)
    }

    /// Creates a client with a given (non-zero) instance ID; for tests and tools. The TLS files
    /// are read here: one that does not load is [`Error::Config`].
    pub fn with_instance_id(config: ClientConfig, instance_id: Uuid) -> Result<Client> {
        if config.bootstrap.is_empty() {
            return Err(Error::Config("no bootstrap broker given".into()));
        }
        if instance_id.is_zero() {
            return Err(Error::Config("the instance ID must not be zero".into()));
        }
        let security = &config.security;
        security.validate()?;
        let settings = ConnectionSettings {
            client_id: Arc::from(config.client_id.as_str()),
            instance_id,
            connect_timeout: config.connect_timeout,
            max_frame_size: config.max_frame_size,
            tls: security
                .protocol
                .uses_tls()
                .then(|| TlsClient::new(&security.tls))
                .transpose()?,
            sasl: security.sasl.clone(),
        };
        Ok(Client {
            inner: Arc::new(Inner {
                config,
                settings,
                slots: Mutex::new(HashMap::new()),
                addresses: Mutex::new(HashMap::new()),
                metadata: Mutex::new((Arc::new(Metadata::default()), None, true)),
                coordinators: Mutex::new(HashMap::new()),
                telemetry: Telemetry::new(),
            }),
        })
    }

    /// Creates a client and checks that the cluster answers (connect + Metadata).
    pub async fn connect(config: ClientConfig) -> Result<Client> {
        let client = Client::new(config)?;
        client.refresh_metadata(Some(&[])).await?;
        Ok(client)
    }

    /// The KIP-1313 client instance ID sent in every v2 request header; also the KIP-848 member ID
    /// (text form) and the KIP-714 telemetry client instance ID. Never changes.
    pub fn instance_id(&self) -> Uuid {
        self.inner.settings.instance_id
    }

    /// The instance ID in Kafka's text form (22 characters of URL-safe base64): the member ID.
    pub fn member_id(&self) -> String {
        self.inner.settings.instance_id.to_string()
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    fn from_inner(inner: Arc<Inner>) -> Client {
        Client { inner }
    }

    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.inner.telemetry
    }

    /// Open (not broken) broker connections right now.
    pub(crate) fn open_connections(&self) -> usize {
        lock(&self.inner.slots)
            .values()
            .filter(|slot| {
                slot.try_lock()
                    .is_ok_and(|s| s.conn.as_ref().is_some_and(|c| !c.is_broken()))
            })
            .count()
    }

    /// The subscription the broker last answered to this client's GetTelemetrySubscriptions:
    /// (subscription ID, requested metric prefixes, push interval), if any.
    pub fn telemetry_subscription(&self) -> Option<(i32, Vec<String>, Duration)> {
        lock(&self.inner.telemetry.subscription)
            .as_ref()
            .map(|s| (s.subscription_id, s.requested.clone(), s.push_interval))
    }

    fn address(&self, node: i32) -> Option<String> {
        if node < 0 {
            let index = usize::try_from(-1 - node).ok()?;
            return self.inner.config.bootstrap.get(index).cloned();
        }
        lock(&self.inner.addresses).get(&node).cloned()
    }

    fn slot(&self, node: i32) -> Arc<tokio::sync::Mutex<NodeSlot>> {
        Arc::clone(lock(&self.inner.slots).entry(node).or_insert_with(|| {
            Arc::new(tokio::sync::Mutex::new(NodeSlot {
                conn: None,
                failures: 0,
                next_attempt: None,
            }))
        }))
    }

    /// The live connection to `node` (negative: a bootstrap address), connecting if needed.
    /// Reconnects wait a jittered exponential backoff after each failed attempt.
    pub async fn connection(&self, node: i32) -> Result<Arc<Connection>> {
        let slot = self.slot(node);
        let mut slot = slot.lock().await;
        if let Some(conn) = &slot.conn
            && !conn.is_broken()
        {
            return Ok(Arc::clone(conn));
        }
        slot.conn = None;
        if let Some(at) = slot.next_attempt {
            tokio::time::sleep_until(at).await;
        }
        let Some(addr) = self.address(node) else {
            return Err(Error::Connect {
                api: "ApiVersions",
                broker: format!("node {node}"),
                reason: "no address known for this node".into(),
            });
        };
        match Connection::connect(node, &addr, &self.inner.settings).await {
            Ok(conn) => {
                ClientMetrics::add(&self.inner.telemetry.metrics.connections_created, 1);
                if self.inner.config.enable_metrics_push {
                    let weak = Arc::downgrade(&self.inner);
                    telemetry::start(self, move || weak.upgrade().map(Client::from_inner));
                }
                slot.failures = 0;
                slot.next_attempt = None;
                slot.conn = Some(Arc::clone(&conn));
                Ok(conn)
            }
            Err(e) => {
                let delay = backoff(
                    self.inner.config.reconnect_backoff,
                    self.inner.config.reconnect_backoff_max,
                    slot.failures,
                );
                slot.failures = slot.failures.saturating_add(1);
                slot.next_attempt = Some(Instant::now() + delay);
                Err(e)
            }
        }
    }

    /// Any usable connection: an open one first, then known brokers, then bootstrap addresses.
    pub async fn any_connection(&self) -> Result<Arc<Connection>> {
        let mut candidates: Vec<i32> = {
            let slots = lock(&self.inner.slots);
            let mut open = Vec::new();
            for (node, slot) in slots.iter() {
                if let Ok(slot) = slot.try_lock()
                    && slot.conn.as_ref().is_some_and(|c| !c.is_broken())
                {
                    open.push(*node);
                }
            }
            open.sort_by_key(|n| (*n < 0, *n));
            open
        };
        let mut known: Vec<i32> = lock(&self.inner.addresses).keys().copied().collect();
        known.sort();
        candidates.extend(known);
        candidates.extend((0..self.inner.config.bootstrap.len()).map(bootstrap_node));
        candidates.dedup();
        let mut last = None;
        for node in candidates {
            match self.connection(node).await {
                Ok(conn) => return Ok(conn),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(Error::Config("no broker to connect to".into())))
    }

    /// Sends a request to `node`, built for the negotiated version, and waits for the answer.
    pub async fn call<F>(&self, node: i32, api: ApiKey, build: F) -> Result<Response>
    where
        F: FnOnce(i16) -> Request,
    {
        self.call_with_timeout(node, api, self.inner.config.request_timeout, build)
            .await
    }

    /// [`Client::call`] with an explicit timeout (long polls add their wait to it).
    pub async fn call_with_timeout<F>(
        &self,
        node: i32,
        api: ApiKey,
        timeout: Duration,
        build: F,
    ) -> Result<Response>
    where
        F: FnOnce(i16) -> Request,
    {
        let conn = self.connection(node).await?;
        let version = conn.version(api)?;
        conn.call(build(version), version, timeout).await
    }

    /// Sends a request to any broker (Metadata, admin calls in a single-node cluster).
    pub async fn call_any<F>(&self, api: ApiKey, build: F) -> Result<Response>
    where
        F: FnOnce(i16) -> Request,
    {
        let conn = self.any_connection().await?;
        let version = conn.version(api)?;
        conn.call(build(version), version, self.inner.config.request_timeout)
            .await
    }

    /// Sends a typed request to `node`, built for the negotiated version, and returns the typed
    /// response: the request type names its API and its response type ([`RequestBody`]), so an
    /// answer of another API is one [`Error::Protocol`] here rather than at every call site.
    pub async fn request<R, F>(&self, node: i32, build: F) -> Result<R::Response>
    where
        R: RequestBody,
        F: FnOnce(i16) -> R,
    {
        let response = self.call(node, R::API_KEY, |v| build(v).into()).await?;
        typed_response::<R>(response)
    }

    /// [`Client::request`] with an explicit timeout (long polls add their wait to it).
    pub async fn request_with_timeout<R, F>(
        &self,
        node: i32,
        timeout: Duration,
        build: F,
    ) -> Result<R::Response>
    where
        R: RequestBody,
        F: FnOnce(i16) -> R,
    {
        let response = self
            .call_with_timeout(node, R::API_KEY, timeout, |v| build(v).into())
            .await?;
        typed_response::<R>(response)
    }

    /// [`Client::request`] to any broker (Metadata, admin calls in a single-node cluster).
    pub async fn request_any<R, F>(&self, build: F) -> Result<R::Response>
    where
        R: RequestBody,
        F: FnOnce(i16) -> R,
    {
        let response = self.call_any(R::API_KEY, |v| build(v).into()).await?;
        typed_response::<R>(response)
    }

    /// [`Client::request`] to `group`'s coordinator, forgetting it as
    /// [`Client::call_coordinator`] does.
    pub async fn request_coordinator<R, F>(&self, group: &str, build: F) -> Result<R::Response>
    where
        R: RequestBody,
        F: FnOnce(i16) -> R,
    {
        let response = self
            .call_coordinator(group, R::API_KEY, |v| build(v).into())
            .await?;
        typed_response::<R>(response)
    }

    /// The cached metadata (possibly empty or stale).
    pub fn cached_metadata(&self) -> Arc<Metadata> {
        Arc::clone(&lock(&self.inner.metadata).0)
    }

    /// Marks the metadata stale if it is still the view of `generation` (so the next lookup
    /// refreshes it); a newer view is kept.
    pub fn invalidate_metadata(&self, generation: u64) {
        let mut md = lock(&self.inner.metadata);
        if md.0.generation <= generation {
            md.2 = true;
        }
    }

    /// Fetches Metadata for `topics` (`None`: every topic; `Some(&[])`: brokers only) and merges
    /// it into the cache.
    pub async fn refresh_metadata(&self, topics: Option<&[String]>) -> Result<Arc<Metadata>> {
        let auto_create = self.inner.config.allow_auto_create_topics;
        let response = self
            .request_any(|_| MetadataRequest {
                topics: topics.map(|names| {
                    names
                        .iter()
                        .map(|n| MetadataRequestTopic {
                            name: Some(n.as_str().into()),
                            ..Default::default()
                        })
                        .collect()
                }),
                allow_auto_topic_creation: auto_create,
                ..Default::default()
            })
            .await?;
        let mut brokers = BTreeMap::new();
        {
            let mut addresses = lock(&self.inner.addresses);
            for b in &response.brokers {
                let info = BrokerInfo {
                    node_id: b.node_id,
                    host: b.host.to_string(),
                    port: b.port,
                    rack: b.rack.as_ref().map(|r| r.to_string()),
                };
                addresses.insert(b.node_id, format!("{}:{}", info.host, info.port));
                brokers.insert(b.node_id, info);
            }
        }
        let mut md = lock(&self.inner.metadata);
        let mut next = (*md.0).clone();
        next.generation += 1;
        next.cluster_id = response.cluster_id.as_ref().map(|c| c.to_string());
        next.controller_id = response.controller_id;
        next.brokers = brokers;
        if topics.is_none() {
            next.topics.clear();
        }
        for t in &response.topics {
            let Some(name) = &t.name else { continue };
            if t.error_code != error_codes::NONE && t.partitions.is_empty() {
                next.topics.remove(name.as_ref() as &str);
                if t.error_code != error_codes::UNKNOWN_TOPIC_OR_PARTITION {
                    next.topics.insert(
                        name.to_string(),
                        TopicMetadata {
                            name: name.to_string(),
                            id: t.topic_id,
                            internal: t.is_internal,
                            error_code: t.error_code,
                            partitions: Vec::new(),
                        },
                    );
                }
                continue;
            }
            let mut partitions: Vec<PartitionMetadata> = t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    partition: p.partition_index,
                    leader: p.leader_id,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.clone(),
                    isr: p.isr_nodes.clone(),
                    error_code: p.error_code,
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            next.topics.insert(
                name.to_string(),
                TopicMetadata {
                    name: name.to_string(),
                    id: t.topic_id,
                    internal: t.is_internal,
                    error_code: t.error_code,
                    partitions,
                },
            );
        }
        let next = Arc::new(next);
        *md = (Arc::clone(&next), Some(Instant::now()), false);
        Ok(next)
    }

    /// A topic's metadata, from the cache when fresh, refreshed otherwise. Retries while the
    /// topic has no leader yet (being created); an unknown topic is [`Error::UnknownTopic`].
    pub async fn topic(&self, name: &str) -> Result<TopicMetadata> {
        {
            let md = lock(&self.inner.metadata);
            let fresh = !md.2
                && md
                    .1
                    .is_some_and(|at| at.elapsed() < self.inner.config.metadata_max_age);
            if let Some(t) = md.0.topics.get(name)
                && fresh
                && t.error_code == error_codes::NONE
                && !t.partitions.is_empty()
            {
                return Ok(t.clone());
            }
        }
        let deadline = Instant::now() + self.inner.config.request_timeout;
        let mut attempt = 0;
        loop {
            let md = self.refresh_metadata(Some(&[name.to_string()])).await?;
            match md.topics.get(name) {
                Some(t) if t.error_code == error_codes::NONE && !t.partitions.is_empty() => {
                    return Ok(t.clone());
                }
                Some(t) if !crate::error::is_retriable_code(t.error_code) => {
                    return Err(Error::broker_for("Metadata", t.error_code, name, None));
                }
                None if !self.inner.config.allow_auto_create_topics => {
                    return Err(Error::UnknownTopic(name.to_string()));
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(Error::UnknownTopic(name.to_string()));
            }
            tokio::time::sleep(backoff(
                self.inner.config.retry_backoff,
                Duration::from_secs(1),
                attempt,
            ))
            .await;
            attempt += 1;
        }
    }

    /// The name of the topic with ID `id` (refreshing all topics' metadata if it is not cached).
    pub async fn topic_name(&self, id: Uuid) -> Result<String> {
        if let Some(t) = self.cached_metadata().topic_by_id(id) {
            return Ok(t.name.clone());
        }
        let md = self.refresh_metadata(None).await?;
        md.topic_by_id(id)
            .map(|t| t.name.clone())
            .ok_or_else(|| Error::UnknownTopic(format!("with ID {id}")))
    }

    /// A group assignment (topic IDs and partitions) by partition name, with each topic's ID; a
    /// topic not in the metadata yet is left out (until the next assignment names it again).
    pub(crate) async fn named_assignment(
        &self,
        target: Vec<(Uuid, Vec<i32>)>,
    ) -> BTreeMap<crate::topic_partition::TopicPartition, Uuid> {
        let mut named = BTreeMap::new();
        for (id, partitions) in target {
            let name = match self.topic_name(id).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!(topic_id = %id, error = %e, "assigned topic not in metadata yet");
                    continue;
                }
            };
            for p in partitions {
                named.insert(
                    crate::topic_partition::TopicPartition::new(name.clone(), p),
                    id,
                );
            }
        }
        named
    }

    /// The coordinator node of `group` (cached after the first FindCoordinator).
    pub async fn coordinator(&self, group: &str) -> Result<i32> {
        self.coordinator_of(KEY_TYPE_GROUP, group).await
    }

    /// The transaction coordinator of `transactional_id` (cached after the first lookup).
    pub async fn transaction_coordinator(&self, transactional_id: &str) -> Result<i32> {
        self.coordinator_of(KEY_TYPE_TRANSACTION, transactional_id)
            .await
    }

    /// Forgets the cached transaction coordinator of `transactional_id`.
    pub fn invalidate_transaction_coordinator(&self, transactional_id: &str) {
        lock(&self.inner.coordinators)
            .remove(&(KEY_TYPE_TRANSACTION, transactional_id.to_string()));
    }

    async fn coordinator_of(&self, key_type: i8, key: &str) -> Result<i32> {
        let cache_key = (key_type, key.to_string());
        if let Some(node) = lock(&self.inner.coordinators).get(&cache_key) {
            return Ok(*node);
        }
        let deadline = Instant::now() + self.inner.config.request_timeout;
        let mut attempt = 0;
        loop {
            match self.find_coordinator(key_type, key).await {
                Ok(node) => {
                    lock(&self.inner.coordinators).insert(cache_key, node);
                    return Ok(node);
                }
                Err(e) if e.is_retriable() && Instant::now() < deadline => {
                    tokio::time::sleep(backoff(
                        self.inner.config.retry_backoff,
                        Duration::from_secs(1),
                        attempt,
                    ))
                    .await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Forgets the cached coordinator of `group` (after NOT_COORDINATOR or a broken connection).
    pub fn invalidate_coordinator(&self, group: &str) {
        lock(&self.inner.coordinators).remove(&(KEY_TYPE_GROUP, group.to_string()));
    }

    async fn find_coordinator(&self, key_type: i8, key: &str) -> Result<i32> {
        let r = self
            .request_any(|v| {
                if v >= 4 {
                    FindCoordinatorRequest {
                        key_type,
                        coordinator_keys: vec![key.into()],
                        ..Default::default()
                    }
                } else {
                    FindCoordinatorRequest {
                        key_type,
                        key: key.into(),
                        ..Default::default()
                    }
                }
            })
            .await?;
        let (code, message, node, host, port) = match r.coordinators.first() {
            Some(c) => (
                c.error_code,
                c.error_message.clone(),
                c.node_id,
                c.host.clone(),
                c.port,
            ),
            None => (r.error_code, r.error_message, r.node_id, r.host, r.port),
        };
        if code != error_codes::NONE {
            return Err(Error::broker_for(
                "FindCoordinator",
                code,
                if key_type == KEY_TYPE_GROUP {
                    format!("group {key}")
                } else {
                    format!("transactional ID {key}")
                },
                message.map(|m| m.to_string()),
            ));
        }
        lock(&self.inner.addresses).insert(node, format!("{host}:{port}"));
        Ok(node)
    }

    /// Sends a request to `group`'s coordinator; a NOT_COORDINATOR/COORDINATOR_NOT_AVAILABLE
    /// answer or a broken connection forgets the coordinator so the next call looks it up again.
    pub async fn call_coordinator<F>(&self, group: &str, api: ApiKey, build: F) -> Result<Response>
    where
        F: FnOnce(i16) -> Request,
    {
        let node = self.coordinator(group).await?;
        let result = self.call(node, api, build).await;
        if let Err(e) = &result
            && matches!(
                e,
                Error::Connect { .. } | Error::ConnectionBroken { .. } | Error::Timeout { .. }
            )
        {
            self.invalidate_coordinator(group);
        }
        result
    }

    /// Sends a terminating telemetry push (when subscribed), then closes every connection
    /// (pending requests fail with a broken-connection error).
    pub async fn close(&self) {
        telemetry::terminate(self).await;
        let slots: Vec<_> = lock(&self.inner.slots).drain().map(|(_, s)| s).collect();
        for slot in slots {
            slot.lock().await.conn = None;
        }
    }
}
