//! Broker configuration: a TOML file with Kafka-style keys, overridden by command-line flags.
//!
//! Keys may be written dotted (`num.partitions = 3`, which TOML reads as nested tables) or quoted
//! (`"num.partitions" = 3`); both are flattened to `num.partitions`. Skiff's own keys (listener,
//! data directory, node ID, flush policy, limits) are taken here; every other key is a Kafka broker
//! config handed to `skiff-meta`, which validates it against its registry.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

mod cluster;
mod security;

pub use cluster::ClusterConfig;
pub use security::{
    AuthorizerSettings, ClientAuth, InstanceBinding, OauthSettings, SaslMechanism, SecurityConfig,
    SecurityProtocol, TlsProtocol, TlsSettings,
};

/// Where the admin HTTP listener goes unless `admin.listen` says otherwise.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    9644,
));

/// `queued.max.request.bytes` unless set: 512 MiB.
pub const DEFAULT_QUEUED_MAX_REQUEST_BYTES: usize = 512 * 1024 * 1024;

/// `fetch.max.bytes` unless set: Kafka's 55 MiB.
pub const DEFAULT_FETCH_MAX_BYTES: i32 = 55 * 1024 * 1024;

/// When acknowledged appends reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushMode {
    /// Every append is fdatasynced (group-committed); acks=all is answered after its sync, acks 0/1
    /// do not wait for it. The default.
    Always,
    /// fdatasync every `flush.ms` milliseconds; acks=all does not wait for it.
    Interval { flush_ms: u64 },
}

/// One Kafka listener: its name, where it binds, and what clients connecting to it are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// The listener name (`PLAINTEXT`, `INTERNAL`, ...), as in `listeners`.
    pub name: String,
    pub addr: SocketAddr,
    /// From `advertised.listeners`; the bound address when absent.
    pub advertised: Option<(String, u16)>,
    /// From `listener.security.protocol.map`.
    pub protocol: SecurityProtocol,
    /// SSL and SASL_SSL listeners: the TLS settings.
    pub tls: Option<TlsSettings>,
    /// SASL_PLAINTEXT and SASL_SSL listeners: `sasl.enabled.mechanisms`.
    pub sasl_mechanisms: Vec<SaslMechanism>,
}

impl ListenerConfig {
    /// Whether the listener knows who its clients are: SASL, or TLS asking for certificates.
    pub fn authenticates(&self) -> bool {
        self.protocol.uses_sasl()
            || self
                .tls
                .as_ref()
                .is_some_and(|tls| tls.client_auth != ClientAuth::None)
    }

    /// A PLAINTEXT listener.
    pub fn plaintext(name: &str, addr: SocketAddr, advertised: Option<(String, u16)>) -> Self {
        ListenerConfig {
            name: name.to_string(),
            addr,
            advertised,
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl_mechanisms: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `listen`: the Kafka listener address (one PLAINTEXT listener, unless `listeners` is set).
    pub listen: SocketAddr,
    /// `advertise`: host and port given to clients in Metadata (defaults to the bound address).
    pub advertise: Option<(String, u16)>,
    /// `listeners` (with `advertised.listeners` and `listener.security.protocol.map`): Kafka's
    /// listener list; empty means one PLAINTEXT listener at `listen` / `advertise`.
    pub listeners: Vec<ListenerConfig>,
    /// `data.dir`: where partitions and metadata live.
    pub data_dir: PathBuf,
    /// `node.id`.
    pub node_id: i32,
    /// `flush` (+ `flush.ms`).
    pub flush: FlushMode,
    /// `socket.request.max.bytes`: the largest request frame accepted.
    pub socket_request_max_bytes: usize,
    /// `max.connections`: connections beyond this wait in the accept queue.
    pub max_connections: usize,
    /// `queued.max.request.bytes`: bytes of requests read but not yet answered, over all
    /// connections; a connection whose next request does not fit waits (back-pressure).
    /// `None` (-1): unbounded.
    pub queued_max_request_bytes: Option<usize>,
    /// `fetch.max.bytes`: the most record bytes one Fetch response carries, whatever the client
    /// asks (Kafka's broker setting, 55 MiB).
    pub fetch_max_bytes: i32,
    /// `log.recovery.mode`: `torn-tail` (default: a torn tail of a partition's last segment is
    /// cut; damage followed by valid batches refuses to start, naming the file and position)
    /// or `truncate` (cut at the first damaged batch, dropping what follows).
    pub log_recovery: skiff_log::RecoveryMode,
    /// `log.open.files.max`: segment files kept open at once over all partitions (idle ones are
    /// closed and reopened when used); `None`: half the open-file limit, 64 to 10,000.
    pub log_open_files_max: Option<usize>,
    /// `metadata.rebuild` (`skiff broker --rebuild-metadata`): when the metadata file is lost
    /// but partition directories remain, register their topics again from the directories
    /// instead of refusing to start.
    pub rebuild_metadata: bool,
    /// `shutdown.timeout.ms`: how long a graceful stop waits for connections to finish before
    /// closing them.
    pub shutdown_timeout_ms: u64,
    /// `admin.listen`: the admin HTTP listener (`none` disables it). The command line and config
    /// files default to 127.0.0.1:9644; a config built in code has none unless it sets one.
    pub admin_listen: Option<SocketAddr>,
    /// `telemetry.enable`: serve KIP-714 client telemetry (GetTelemetrySubscriptions,
    /// PushTelemetry). On by default.
    pub telemetry_enabled: bool,
    /// `group.share.enable`: serve KIP-932 share groups (ShareGroupHeartbeat,
    /// ShareGroupDescribe, ShareFetch, ShareAcknowledge), single node only. On by default
    /// (`false` stops advertising them).
    pub share_groups_enabled: bool,
    /// `group.share.max.share.sessions` (2000, Kafka's): share sessions the broker keeps; a
    /// ShareFetch opening one more is SHARE_SESSION_LIMIT_REACHED.
    pub share_max_sessions: usize,
    /// `telemetry.max.bytes`: TelemetryMaxBytes given to clients (1 MiB).
    pub telemetry_max_bytes: i32,
    /// `telemetry.otlp.endpoint`: forward pushed metrics to this OTLP/HTTP collector.
    pub telemetry_otlp_endpoint: Option<crate::otlp::Endpoint>,
    /// `connections.max.idle.ms` (Kafka's 10 minutes): a connection with no request in progress
    /// that sends nothing for this long is closed; `None` (-1): never.
    pub connections_max_idle_ms: Option<u64>,
    /// `client.journal.max.events.per.instance`: journal events kept per client instance (the
    /// oldest go first).
    pub client_journal_max_events_per_instance: usize,
    /// `client.journal.max.events`: journal events kept over all client instances (the oldest
    /// go first); the journal's file holds at most twice as many lines.
    pub client_journal_max_events: usize,
    /// `client.lag.metrics.max.instances`: how many client instances `/metrics` shows lag
    /// gauges for (the furthest behind), so that their series stay few.
    pub client_lag_metrics_max_instances: usize,
    /// Group coordinator settings (`group.*` keys).
    pub groups: skiff_group::GroupConfig,
    /// Transaction coordinator settings (`transaction.max.timeout.ms`,
    /// `transactional.id.expiration.ms`).
    pub transactions: skiff_txn::TxnConfig,
    /// Authentication settings shared by the listeners.
    pub security: SecurityConfig,
    /// Cluster mode (`cluster.metadata` + `cluster.objects`); `None`: the embedded log.
    pub cluster: Option<ClusterConfig>,
    /// Every other key: static Kafka broker configs, validated by `skiff-meta`.
    pub kafka: BTreeMap<String, String>,
}

/// `client.journal.max.events.per.instance` default.
pub const DEFAULT_JOURNAL_PER_INSTANCE: usize = 256;
/// `client.journal.max.events` default.
pub const DEFAULT_JOURNAL_EVENTS: usize = 50_000;

/// `client.lag.metrics.max.instances` default.
pub const DEFAULT_LAG_METRICS_INSTANCES: usize = 20;

/// Kafka's `group.share.max.share.sessions` default.
pub const DEFAULT_SHARE_MAX_SESSIONS: usize = 2000;

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9092)),
            advertise: None,
            listeners: Vec::new(),
            data_dir: PathBuf::from("./skiff-data"),
            node_id: 1,
            flush: FlushMode::Always,
            socket_request_max_bytes: skiff_protocol::DEFAULT_MAX_FRAME_SIZE,
            max_connections: 10_000,
            queued_max_request_bytes: Some(DEFAULT_QUEUED_MAX_REQUEST_BYTES),
            fetch_max_bytes: DEFAULT_FETCH_MAX_BYTES,
            shutdown_timeout_ms: 30_000,
            rebuild_metadata: false,
            log_open_files_max: None,
            log_recovery: skiff_log::RecoveryMode::TornTail,
            admin_listen: None,
            telemetry_enabled: true,
            share_groups_enabled: true,
            share_max_sessions: DEFAULT_SHARE_MAX_SESSIONS,
            telemetry_max_bytes: 1024 * 1024,
            telemetry_otlp_endpoint: None,
            connections_max_idle_ms: Some(600_000),
            client_journal_max_events_per_instance: DEFAULT_JOURNAL_PER_INSTANCE,
            client_journal_max_events: DEFAULT_JOURNAL_EVENTS,
            client_lag_metrics_max_instances: DEFAULT_LAG_METRICS_INSTANCES,
            groups: skiff_group::GroupConfig::default(),
            transactions: skiff_txn::TxnConfig::default(),
            security: SecurityConfig::default(),
            cluster: None,
            kafka: BTreeMap::new(),
        }
    }
}

/// Values given on the command line; they win over the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<String>,
    pub advertise: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub node_id: Option<i32>,
    /// `key=value` pairs, as in the file.
    pub set: Vec<(String, String)>,
}

impl BrokerConfig {
    /// Loads an optional TOML file, then applies the overrides.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<BrokerConfig> {
        let mut entries = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?;
                flatten_toml(&text).with_context(|| format!("in config file {}", path.display()))?
            }
            None => BTreeMap::new(),
        };
        for (k, v) in &overrides.set {
            entries.insert(k.clone(), v.clone());
        }
        if let Some(v) = &overrides.listen {
            entries.insert("listen".into(), v.clone());
        }
        if let Some(v) = &overrides.advertise {
            entries.insert("advertise".into(), v.clone());
        }
        if let Some(v) = &overrides.data_dir {
            entries.insert("data.dir".into(), v.display().to_string());
        }
        if let Some(v) = overrides.node_id {
            entries.insert("node.id".into(), v.to_string());
        }
        BrokerConfig::from_entries(entries)
    }

    /// Builds a config from flattened `key = value` entries.
    pub fn from_entries(mut entries: BTreeMap<String, String>) -> Result<BrokerConfig> {
        let mut config = BrokerConfig {
            admin_listen: Some(DEFAULT_ADMIN_LISTEN),
            ..BrokerConfig::default()
        };
        let listen = entries.remove("listen");
        let advertise = entries.remove("advertise");
        if let Some(v) = &listen {
            config.listen = v.parse().with_context(|| {
                format!("listen = {v:?}: expected HOST:PORT with an IP address")
            })?;
        }
        if let Some(v) = &advertise {
            config.advertise = Some(parse_host_port(v).context("advertise")?);
        }
        let protocol_map = entries.remove("listener.security.protocol.map");
        let advertised_listeners = entries.remove("advertised.listeners");
        match entries.remove("listeners") {
            Some(list) => {
                if listen.is_some() || advertise.is_some() {
                    bail!(
                        "listeners and listen/advertise both given: use listeners (and advertised.listeners) alone"
                    );
                }
                config.listeners = parse_listeners(
                    &list,
                    advertised_listeners.as_deref(),
                    protocol_map.as_deref(),
                )?;
            }
            None if advertised_listeners.is_some() || protocol_map.is_some() => {
                bail!("advertised.listeners and listener.security.protocol.map need listeners")
            }
            None => {}
        }
        security::take_listener_security(&mut entries, &mut config.listeners)?;
        let authenticates = config.listeners.iter().any(ListenerConfig::authenticates);
        config.security = security::take_security(&mut entries, authenticates)?;
        if let Some(v) = entries.remove("data.dir") {
            if v.trim().is_empty() {
                bail!("data.dir must not be empty");
            }
            config.data_dir = PathBuf::from(v);
        }
        if let Some(v) = entries.remove("node.id") {
            config.node_id = parse_num(&v, "node.id", 0, i64::from(i32::MAX))? as i32;
        }
        let flush_ms = entries
            .remove("flush.ms")
            .map(|v| parse_num(&v, "flush.ms", 1, 86_400_000))
            .transpose()?;
        match entries.remove("flush").as_deref() {
            None | Some("always") => {
                if flush_ms.is_some() {
                    bail!("flush.ms only applies with flush = \"interval\"");
                }
            }
            Some("interval") => {
                config.flush = FlushMode::Interval {
                    flush_ms: flush_ms.unwrap_or(1000) as u64,
                }
            }
            Some(other) => bail!("flush = {other:?}: expected \"always\" or \"interval\""),
        }
        if let Some(v) = entries.remove("socket.request.max.bytes") {
            config.socket_request_max_bytes =
                parse_num(&v, "socket.request.max.bytes", 1024, i64::from(i32::MAX))? as usize;
        }
        if let Some(v) = entries.remove("admin.listen") {
            config.admin_listen = match v.trim() {
                "" | "none" => None,
                addr => Some(addr.parse().with_context(|| {
                    format!("admin.listen = {v:?}: expected HOST:PORT with an IP address, or none")
                })?),
            };
        }
        if let Some(v) = entries.remove("telemetry.enable") {
            config.telemetry_enabled = parse_bool(&v, "telemetry.enable")?;
        }
        if let Some(v) = entries.remove("group.share.enable") {
            config.share_groups_enabled = parse_bool(&v, "group.share.enable")?;
        }
        if let Some(v) = entries.remove("group.share.max.share.sessions") {
            config.share_max_sessions =
                parse_num(&v, "group.share.max.share.sessions", 1, i64::from(i32::MAX))? as usize;
        }
        if let Some(v) = entries.remove("telemetry.max.bytes") {
            config.telemetry_max_bytes =
                parse_num(&v, "telemetry.max.bytes", 1024, 64 * 1024 * 1024)? as i32;
        }
        if let Some(v) = entries.remove("connections.max.idle.ms") {
            let ms = parse_num(&v, "connections.max.idle.ms", -1, i64::MAX)?;
            config.connections_max_idle_ms = u64::try_from(ms).ok().filter(|ms| *ms > 0);
        }
        if let Some(v) = entries.remove("client.journal.max.events.per.instance") {
            config.client_journal_max_events_per_instance =
                parse_num(&v, "client.journal.max.events.per.instance", 1, 100_000)? as usize;
        }
        if let Some(v) = entries.remove("client.journal.max.events") {
            config.client_journal_max_events =
                parse_num(&v, "client.journal.max.events", 1, 10_000_000)? as usize;
        }
        if let Some(v) = entries.remove("client.lag.metrics.max.instances") {
            config.client_lag_metrics_max_instances =
                parse_num(&v, "client.lag.metrics.max.instances", 0, 10_000)? as usize;
        }
        if let Some(v) = entries.remove("telemetry.otlp.endpoint") {
            config.telemetry_otlp_endpoint = match v.trim() {
                "" | "none" => None,
                url => Some(crate::otlp::Endpoint::parse(url).context("telemetry.otlp.endpoint")?),
            };
        }
        if let Some(v) = entries.remove("max.connections") {
            config.max_connections = parse_num(&v, "max.connections", 1, 1_000_000)? as usize;
        }
        if let Some(v) = entries.remove("queued.max.request.bytes") {
            config.queued_max_request_bytes =
                match parse_num(&v, "queued.max.request.bytes", -1, i64::from(i32::MAX))? {
                    -1 => None,
                    0 => bail!(
                        "queued.max.request.bytes = 0: expected -1 (unbounded) or a positive size"
                    ),
                    n => Some(n as usize),
                };
        }
        if let Some(v) = entries.remove("fetch.max.bytes") {
            config.fetch_max_bytes =
                parse_num(&v, "fetch.max.bytes", 1024, i64::from(i32::MAX))? as i32;
        }
        if let Some(v) = entries.remove("log.recovery.mode") {
            config.log_recovery = match v.trim() {
                "torn-tail" => skiff_log::RecoveryMode::TornTail,
                "truncate" => skiff_log::RecoveryMode::Truncate,
                other => {
                    bail!("log.recovery.mode = {other:?}: expected \"torn-tail\" or \"truncate\"")
                }
            };
        }
        if let Some(v) = entries.remove("log.open.files.max") {
            config.log_open_files_max =
                Some(parse_num(&v, "log.open.files.max", 16, 10_000_000)? as usize);
        }
        if let Some(v) = entries.remove("metadata.rebuild") {
            config.rebuild_metadata = parse_bool(&v, "metadata.rebuild")?;
        }
        if let Some(v) = entries.remove("shutdown.timeout.ms") {
            config.shutdown_timeout_ms = parse_num(&v, "shutdown.timeout.ms", 0, 3_600_000)? as u64;
        }
        if let Some(v) = entries.remove("transaction.max.timeout.ms") {
            config.transactions.max_timeout_ms =
                parse_num(&v, "transaction.max.timeout.ms", 1, i64::from(i32::MAX))? as i32;
        }
        if let Some(v) = entries.remove("transactional.id.expiration.ms") {
            config.transactions.id_expiration_ms =
                parse_num(&v, "transactional.id.expiration.ms", 1, i64::from(i32::MAX))?;
        }
        take_group_config(&mut entries, &mut config.groups)?;
        config.cluster = cluster::take_cluster(&mut entries)?;
        config.kafka = entries;
        Ok(config)
    }

    /// The listeners to bind, in order: `listeners`, or one PLAINTEXT listener at `listen`.
    pub fn effective_listeners(&self) -> Vec<ListenerConfig> {
        if self.listeners.is_empty() {
            vec![ListenerConfig::plaintext(
                "PLAINTEXT",
                self.listen,
                self.advertise.clone(),
            )]
        } else {
            self.listeners.clone()
        }
    }
}

/// `NAME://HOST:PORT` (Kafka's listener syntax); an empty host is every interface.
fn parse_listener_entry(entry: &str, key: &str) -> Result<(String, String, u16)> {
    let (name, rest) = entry
        .split_once("://")
        .with_context(|| format!("{key}: {entry:?} is not NAME://HOST:PORT"))?;
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        bail!("{key}: {name:?} is not a listener name (letters, digits, _ and -)");
    }
    let (host, port) = rest
        .rsplit_once(':')
        .with_context(|| format!("{key}: {entry:?} has no port"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("{key}: {entry:?} has no valid port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((name.to_ascii_uppercase(), host.to_string(), port))
}

/// Parses Kafka's `listeners`, `advertised.listeners` and `listener.security.protocol.map`.
fn parse_listeners(
    list: &str,
    advertised: Option<&str>,
    protocol_map: Option<&str>,
) -> Result<Vec<ListenerConfig>> {
    let mut protocols: BTreeMap<String, SecurityProtocol> = SecurityProtocol::ALL
        .iter()
        .map(|p| (p.name().to_string(), *p))
        .collect();
    if let Some(map) = protocol_map {
        protocols.clear();
        for pair in map.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, protocol) = pair.split_once(':').with_context(|| {
                format!("listener.security.protocol.map: {pair:?} is not NAME:PROTOCOL")
            })?;
            let protocol = SecurityProtocol::parse(protocol).with_context(|| {
                format!(
                    "listener.security.protocol.map: {:?} is not one of {}",
                    protocol.trim(),
                    SecurityProtocol::ALL.map(SecurityProtocol::name).join(", ")
                )
            })?;
            protocols.insert(name.trim().to_ascii_uppercase(), protocol);
        }
    }
    let mut listeners: Vec<ListenerConfig> = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, host, port) = parse_listener_entry(entry, "listeners")?;
        let ip: std::net::IpAddr = if host.is_empty() {
            std::net::IpAddr::from([0, 0, 0, 0])
        } else {
            host.parse().with_context(|| {
                format!("listeners: {entry:?}: the host must be an IP address (or empty for all)")
            })?
        };
        let protocol = *protocols.get(&name).with_context(|| {
            format!("listeners: {name} has no security protocol in listener.security.protocol.map")
        })?;
        if listeners.iter().any(|l| l.name == name) {
            bail!("listeners: {name} is listed twice");
        }
        listeners.push(ListenerConfig {
            protocol,
            ..ListenerConfig::plaintext(&name, SocketAddr::new(ip, port), None)
        });
    }
    if listeners.is_empty() {
        bail!("listeners is empty");
    }
    for entry in advertised
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let (name, host, port) = parse_listener_entry(entry, "advertised.listeners")?;
        if host.is_empty() {
            bail!("advertised.listeners: {entry:?} needs a host clients can reach");
        }
        let listener = listeners
            .iter_mut()
            .find(|l| l.name == name)
            .with_context(|| format!("advertised.listeners: {name} is not in listeners"))?;
        listener.advertised = Some((host, port));
    }
    Ok(listeners)
}

/// Takes the `group.*` keys Kafka brokers use for the group coordinator.
fn take_group_config(
    entries: &mut BTreeMap<String, String>,
    groups: &mut skiff_group::GroupConfig,
) -> Result<()> {
    let mut take = |key: &str, min: i64, max: i64| -> Result<Option<i64>> {
        entries
            .remove(key)
            .map(|v| parse_num(&v, key, min, max))
            .transpose()
    };
    if let Some(v) = take("group.consumer.session.timeout.ms", 1, i64::from(i32::MAX))? {
        groups.consumer_session_timeout_ms = v;
    }
    if let Some(v) = take(
        "group.consumer.heartbeat.interval.ms",
        1,
        i64::from(i32::MAX),
    )? {
        groups.consumer_heartbeat_interval_ms = v;
    }
    // Bounds of group-level overrides (Kafka: the broker's own value must lie within them;
    // checked only when a bound is set, so a broker configured without them keeps working).
    let mut bounded = false;
    if let Some(v) = take(
        "group.consumer.min.session.timeout.ms",
        1,
        i64::from(i32::MAX),
    )? {
        groups.consumer_min_session_timeout_ms = v;
        bounded = true;
    }
    if let Some(v) = take(
        "group.consumer.max.session.timeout.ms",
        1,
        i64::from(i32::MAX),
    )? {
        groups.consumer_max_session_timeout_ms = v;
        bounded = true;
    }
    if let Some(v) = take(
        "group.consumer.min.heartbeat.interval.ms",
        1,
        i64::from(i32::MAX),
    )? {
        groups.consumer_min_heartbeat_interval_ms = v;
        bounded = true;
    }
    if let Some(v) = take(
        "group.consumer.max.heartbeat.interval.ms",
        1,
        i64::from(i32::MAX),
    )? {
        groups.consumer_max_heartbeat_interval_ms = v;
        bounded = true;
    }
    if bounded {
        let g = &*groups;
        if !(g.consumer_min_session_timeout_ms..=g.consumer_max_session_timeout_ms)
            .contains(&g.consumer_session_timeout_ms)
        {
            bail!(
                "group.consumer.session.timeout.ms must lie within group.consumer.min.session.timeout.ms and group.consumer.max.session.timeout.ms"
            );
        }
        if !(g.consumer_min_heartbeat_interval_ms..=g.consumer_max_heartbeat_interval_ms)
            .contains(&g.consumer_heartbeat_interval_ms)
        {
            bail!(
                "group.consumer.heartbeat.interval.ms must lie within group.consumer.min.heartbeat.interval.ms and group.consumer.max.heartbeat.interval.ms"
            );
        }
    }
    if let Some(v) = take("group.consumer.max.size", 1, i64::from(i32::MAX))? {
        groups.consumer_max_size = v as usize;
    }
    take_share_group_config(&mut take, groups)?;
    if let Some(v) = take("group.min.session.timeout.ms", 1, i64::from(i32::MAX))? {
        groups.classic_min_session_timeout_ms = v;
    }
    if let Some(v) = take("group.max.session.timeout.ms", 1, i64::from(i32::MAX))? {
        groups.classic_max_session_timeout_ms = v;
    }
    if let Some(v) = take("group.initial.rebalance.delay.ms", 0, i64::from(i32::MAX))? {
        groups.classic_initial_rebalance_delay_ms = v;
    }
    if let Some(v) = take("group.max.size", 1, i64::from(i32::MAX))? {
        groups.classic_max_size = v as usize;
    }
    if let Some(v) = entries.remove("group.consumer.assignors") {
        let names: Vec<String> = v
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if names.is_empty() || names.iter().any(|n| n != "uniform" && n != "range") {
            bail!("group.consumer.assignors = {v:?}: the assignors are uniform and range");
        }
        groups.consumer_assignors = names;
    }
    if let Some(v) = entries.remove("group.consumer.migration.policy") {
        groups.consumer_migration_policy = skiff_group::MigrationPolicy::parse(&v).ok_or_else(|| {
            anyhow::anyhow!(
                "group.consumer.migration.policy = {v:?}: one of bidirectional, upgrade, downgrade, disabled"
            )
        })?;
    }
    if groups.consumer_heartbeat_interval_ms >= groups.consumer_session_timeout_ms {
        bail!(
            "group.consumer.heartbeat.interval.ms must be below group.consumer.session.timeout.ms"
        );
    }
    if groups.classic_min_session_timeout_ms > groups.classic_max_session_timeout_ms {
        bail!("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms");
    }
    Ok(())
}

/// The `group.share.*` keys (KIP-932), with Kafka's ranges (`GroupCoordinatorConfig` and
/// `ShareGroupConfig`). As for consumer groups, the session timeout and heartbeat interval must
/// lie within their min/max bounds only when a bound is set.
fn take_share_group_config(
    take: &mut impl FnMut(&str, i64, i64) -> Result<Option<i64>>,
    groups: &mut skiff_group::GroupConfig,
) -> Result<()> {
    let int_max = i64::from(i32::MAX);
    let mut bounded = false;
    {
        let mut set = |key: &str, min: i64, max: i64, field: &mut i64, bound: bool| {
            let value = take(key, min, max)?;
            if let Some(v) = value {
                *field = v;
                bounded |= bound;
            }
            Ok::<(), anyhow::Error>(())
        };
        let g = &mut *groups;
        set(
            "group.share.session.timeout.ms",
            1,
            int_max,
            &mut g.share_session_timeout_ms,
            false,
        )?;
        set(
            "group.share.heartbeat.interval.ms",
            1,
            int_max,
            &mut g.share_heartbeat_interval_ms,
            false,
        )?;
        set(
            "group.share.min.session.timeout.ms",
            1,
            int_max,
            &mut g.share_min_session_timeout_ms,
            true,
        )?;
        set(
            "group.share.max.session.timeout.ms",
            1,
            int_max,
            &mut g.share_max_session_timeout_ms,
            true,
        )?;
        set(
            "group.share.min.heartbeat.interval.ms",
            1,
            int_max,
            &mut g.share_min_heartbeat_interval_ms,
            true,
        )?;
        set(
            "group.share.max.heartbeat.interval.ms",
            1,
            int_max,
            &mut g.share_max_heartbeat_interval_ms,
            true,
        )?;
        set(
            "group.share.record.lock.duration.ms",
            1000,
            3_600_000,
            &mut g.share_record_lock_duration_ms,
            false,
        )?;
        set(
            "group.share.min.record.lock.duration.ms",
            1000,
            30_000,
            &mut g.share_min_record_lock_duration_ms,
            false,
        )?;
        set(
            "group.share.max.record.lock.duration.ms",
            30_000,
            3_600_000,
            &mut g.share_max_record_lock_duration_ms,
            false,
        )?;
        set(
            "group.share.delivery.count.limit",
            2,
            10,
            &mut g.share_delivery_count_limit,
            false,
        )?;
        set(
            "group.share.partition.max.record.locks",
            100,
            10_000,
            &mut g.share_partition_max_record_locks,
            false,
        )?;
    }
    if let Some(v) = take("group.share.max.size", 1, 1000)? {
        groups.share_max_size = v as usize;
    }
    let g = &*groups;
    if bounded {
        if !(g.share_min_session_timeout_ms..=g.share_max_session_timeout_ms)
            .contains(&g.share_session_timeout_ms)
        {
            bail!(
                "group.share.session.timeout.ms must lie within group.share.min.session.timeout.ms and group.share.max.session.timeout.ms"
            );
        }
        if !(g.share_min_heartbeat_interval_ms..=g.share_max_heartbeat_interval_ms)
            .contains(&g.share_heartbeat_interval_ms)
        {
            bail!(
                "group.share.heartbeat.interval.ms must lie within group.share.min.heartbeat.interval.ms and group.share.max.heartbeat.interval.ms"
            );
        }
    }
    if g.share_heartbeat_interval_ms >= g.share_session_timeout_ms {
        bail!("group.share.heartbeat.interval.ms must be below group.share.session.timeout.ms");
    }
    Ok(())
}

fn parse_bool(text: &str, key: &str) -> Result<bool> {
    match text.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => bail!("{key} = {other:?}: expected true or false"),
    }
}

fn parse_num(text: &str, key: &str, min: i64, max: i64) -> Result<i64> {
    let v: i64 = text
        .trim()
        .parse()
        .with_context(|| format!("{key} = {text:?}: expected a whole number"))?;
    if v < min || v > max {
        bail!("{key} = {v}: must be between {min} and {max}");
    }
    Ok(v)
}

fn parse_host_port(text: &str) -> Result<(String, u16)> {
    let (host, port) = text
        .rsplit_once(':')
        .with_context(|| format!("{text:?}: expected HOST:PORT"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        bail!("{text:?}: the host is empty");
    }
    let port: u16 = port
        .parse()
        .with_context(|| format!("{text:?}: bad port"))?;
    Ok((host.to_string(), port))
}

/// Flattens a TOML document into `a.b.c = value` entries with string values.
pub fn flatten_toml(text: &str) -> Result<BTreeMap<String, String>> {
    let table: toml::Table = text.parse().context("invalid TOML")?;
    let mut out = BTreeMap::new();
    flatten_into(&mut out, "", &table)?;
    Ok(out)
}

fn flatten_into(
    out: &mut BTreeMap<String, String>,
    prefix: &str,
    table: &toml::Table,
) -> Result<()> {
    for (key, value) in table {
        let name = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let text = match value {
            toml::Value::Table(inner) => {
                flatten_into(out, &name, inner)?;
                continue;
            }
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => {
                let mut parts = Vec::new();
                for item in items {
                    match item {
                        toml::Value::String(s) => parts.push(s.clone()),
                        toml::Value::Integer(i) => parts.push(i.to_string()),
                        other => bail!("{name}: unsupported list element {other}"),
                    }
                }
                parts.join(",")
            }
            toml::Value::Datetime(d) => bail!("{name}: dates are not config values ({d})"),
        };
        if out.insert(name.clone(), text).is_some() {
            bail!("{name} is set twice");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_and_quoted_keys_flatten_the_same() {
        let a = flatten_toml("num.partitions = 3\nlog.retention.ms = 1000\n").unwrap_or_default();
        let b = flatten_toml("\"num.partitions\" = 3\n\"log.retention.ms\" = 1000\n")
            .unwrap_or_default();
        assert_eq!(a, b);
        assert_eq!(a.get("num.partitions").map(String::as_str), Some("3"));
    }

    #[test]
    fn skiff_keys_are_taken_and_the_rest_passed_on() {
        let entries = flatten_toml(
            // `flush` and `flush.ms` must be quoted: dotted, `flush` would be both a value and a table.
            "listen = \"127.0.0.1:19092\"\ndata.dir = \"/tmp/x\"\nnode.id = 7\n\"flush\" = \"interval\"\n\"flush.ms\" = 50\nnum.partitions = 4\ntransaction.max.timeout.ms = 60000\ntransactional.id.expiration.ms = 3600000\n",
        )
        .expect("valid TOML");
        let config = BrokerConfig::from_entries(entries).expect("valid");
        assert_eq!(config.listen.port(), 19092);
        assert_eq!(config.node_id, 7);
        assert_eq!(config.flush, FlushMode::Interval { flush_ms: 50 });
        assert_eq!(config.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(config.transactions.max_timeout_ms, 60_000);
        assert_eq!(config.transactions.id_expiration_ms, 3_600_000);
        assert_eq!(
            config.kafka.get("num.partitions").map(String::as_str),
            Some("4")
        );
    }

    #[test]
    fn share_group_keys_have_kafkas_defaults_and_ranges() {
        let config = BrokerConfig::from_entries(BTreeMap::new()).expect("defaults");
        assert!(config.share_groups_enabled);
        assert_eq!(config.share_max_sessions, 2000);
        let g = &config.groups;
        assert_eq!(
            (
                g.share_session_timeout_ms,
                g.share_heartbeat_interval_ms,
                g.share_record_lock_duration_ms,
                g.share_delivery_count_limit,
                g.share_partition_max_record_locks,
                g.share_max_size,
            ),
            (45_000, 5_000, 30_000, 5, 2_000, 200)
        );
        let entries = flatten_toml(
            "group.share.enable = false
group.share.session.timeout.ms = 1500
group.share.heartbeat.interval.ms = 500
group.share.record.lock.duration.ms = 1000
group.share.delivery.count.limit = 10
group.share.partition.max.record.locks = 100
group.share.max.size = 1000
group.share.max.share.sessions = 3
",
        )
        .expect("valid TOML");
        let config = BrokerConfig::from_entries(entries).expect("valid");
        assert!(!config.share_groups_enabled);
        assert_eq!(config.share_max_sessions, 3);
        let g = &config.groups;
        assert_eq!(
            (
                g.share_session_timeout_ms,
                g.share_heartbeat_interval_ms,
                g.share_record_lock_duration_ms,
                g.share_delivery_count_limit,
                g.share_partition_max_record_locks,
                g.share_max_size,
            ),
            (1_500, 500, 1_000, 10, 100, 1_000)
        );
        // The group-level bounds widen to the broker's own value.
        assert_eq!(g.share_session_timeout_bounds(), (1_500, 60_000));
        for (key, value) in [
            ("group.share.enable", "yes"),
            ("group.share.record.lock.duration.ms", "999"),
            ("group.share.delivery.count.limit", "1"),
            ("group.share.delivery.count.limit", "11"),
            ("group.share.partition.max.record.locks", "10001"),
            ("group.share.max.size", "1001"),
            ("group.share.max.size", "0"),
            ("group.share.max.share.sessions", "0"),
            ("group.share.heartbeat.interval.ms", "45000"),
            ("group.share.min.session.timeout.ms", "50000"),
        ] {
            let entries = BTreeMap::from([(key.to_string(), value.to_string())]);
            assert!(
                BrokerConfig::from_entries(entries).is_err(),
                "{key} = {value} accepted"
            );
        }
    }

    #[test]
    fn limits_have_kafkas_defaults_and_can_be_set() {
        let config = BrokerConfig::from_entries(BTreeMap::new()).expect("defaults");
        assert_eq!(config.queued_max_request_bytes, Some(512 * 1024 * 1024));
        assert_eq!(config.fetch_max_bytes, 55 * 1024 * 1024);
        assert_eq!(config.shutdown_timeout_ms, 30_000);
        let entries = flatten_toml(
            "queued.max.request.bytes = -1
fetch.max.bytes = 1048576
shutdown.timeout.ms = 0
",
        )
        .expect("valid TOML");
        let config = BrokerConfig::from_entries(entries).expect("valid");
        assert_eq!(config.queued_max_request_bytes, None);
        assert_eq!(config.fetch_max_bytes, 1 << 20);
        assert_eq!(config.shutdown_timeout_ms, 0);
        assert!(config.kafka.is_empty(), "{:?}", config.kafka);
    }

    #[test]
    fn bad_values_are_clear_errors() {
        for bad in [
            "listen = \"nowhere\"",
            "flush = \"sometimes\"",
            "flush.ms = 10",
            "node.id = -1",
            "socket.request.max.bytes = 10",
            "advertise = \"host\"",
            "transaction.max.timeout.ms = 0",
            "transactional.id.expiration.ms = 99999999999",
            "queued.max.request.bytes = 0",
            "queued.max.request.bytes = -2",
            "fetch.max.bytes = 10",
            "shutdown.timeout.ms = -1",
            "log.recovery.mode = \"sometimes\"",
        ] {
            let entries = flatten_toml(bad).unwrap_or_default();
            assert!(BrokerConfig::from_entries(entries).is_err(), "{bad}");
        }
        assert!(flatten_toml("a = [").is_err());
        assert!(flatten_toml("a.b = 1\n\"a.b\" = 2").is_err());
    }

    #[test]
    fn overrides_win_over_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("skiff.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:1\"\nnode.id = 2\n").expect("write");
        let config = BrokerConfig::load(
            Some(&path),
            &Overrides {
                listen: Some("127.0.0.1:2".into()),
                ..Default::default()
            },
        )
        .expect("load");
        assert_eq!(config.listen.port(), 2);
        assert_eq!(config.node_id, 2);
    }

    fn listeners_of(toml: &str) -> Result<Vec<ListenerConfig>> {
        let entries = flatten_toml(toml)?;
        BrokerConfig::from_entries(entries).map(|c| c.effective_listeners())
    }

    #[test]
    fn kafka_listener_keys_are_read() {
        let listeners = listeners_of(
            "listeners = \"PLAINTEXT://127.0.0.1:9092, internal://:9094\"\n\
             advertised.listeners = \"INTERNAL://broker-1.example:19094\"\n\
             listener.security.protocol.map = \"PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT\"\n",
        )
        .expect("valid");
        assert_eq!(
            listeners,
            vec![
                ListenerConfig::plaintext(
                    "PLAINTEXT",
                    "127.0.0.1:9092".parse().expect("addr"),
                    None
                ),
                ListenerConfig::plaintext(
                    "INTERNAL",
                    "0.0.0.0:9094".parse().expect("addr"),
                    Some(("broker-1.example".into(), 19094)),
                ),
            ]
        );
        // Without `listeners`: one PLAINTEXT listener at `listen` / `advertise`.
        let listeners =
            listeners_of("listen = \"127.0.0.1:7000\"\nadvertise = \"kafka.example:7001\"\n")
                .expect("valid");
        assert_eq!(
            listeners,
            vec![ListenerConfig::plaintext(
                "PLAINTEXT",
                "127.0.0.1:7000".parse().expect("addr"),
                Some(("kafka.example".into(), 7001)),
            )]
        );
    }

    #[test]
    fn listener_security_keys_are_read_per_listener_then_shared() {
        let config = BrokerConfig::from_entries(
            flatten_toml(
                "listeners = \"SASL_SSL://127.0.0.1:9093,SSL://127.0.0.1:9094,CLEAR://127.0.0.1:9095\"\n\
                 listener.security.protocol.map = \"SASL_SSL:SASL_SSL,SSL:SSL,CLEAR:SASL_PLAINTEXT\"\n\
                 ssl.keystore.location = \"/etc/skiff/broker.pem\"\n\
                 ssl.keystore.type = \"PEM\"\n\
                 \"listener.name.ssl.ssl.client.auth\" = \"required\"\n\
                 \"listener.name.ssl.ssl.truststore.location\" = \"/etc/skiff/ca.pem\"\n\
                 ssl.enabled.protocols = \"TLSv1.3\"\n\
                 sasl.enabled.mechanisms = \"SCRAM-SHA-512\"\n\
                 \"listener.name.clear.sasl.enabled.mechanisms\" = \"PLAIN, SCRAM-SHA-256\"\n\
                 connections.max.reauth.ms = 60000\n",
            )
            .expect("toml"),
        )
        .expect("valid");
        let [sasl_ssl, ssl, clear] = &config.listeners[..] else {
            panic!("three listeners: {:?}", config.listeners);
        };
        let tls = sasl_ssl.tls.as_ref().expect("SASL_SSL has TLS");
        assert_eq!(tls.keystore, PathBuf::from("/etc/skiff/broker.pem"));
        assert_eq!(tls.client_auth, ClientAuth::None);
        assert_eq!(tls.protocols, vec![TlsProtocol::V13]);
        assert_eq!(sasl_ssl.sasl_mechanisms, vec![SaslMechanism::ScramSha512]);
        let tls = ssl.tls.as_ref().expect("SSL has TLS");
        assert_eq!(tls.client_auth, ClientAuth::Required);
        assert_eq!(tls.truststore, Some(PathBuf::from("/etc/skiff/ca.pem")));
        assert!(ssl.sasl_mechanisms.is_empty());
        assert_eq!(clear.protocol, SecurityProtocol::SaslPlaintext);
        assert!(clear.tls.is_none());
        assert_eq!(
            clear.sasl_mechanisms,
            vec![SaslMechanism::Plain, SaslMechanism::ScramSha256]
        );
        assert_eq!(config.security.max_reauth_ms, 60_000);
        // Every security key was taken: none is left for the Kafka config registry.
        assert!(config.kafka.is_empty(), "{:?}", config.kafka);
    }

    #[test]
    fn listener_mistakes_and_unserved_protocols_are_refused_with_a_message() {
        for (toml, says) in [
            (
                "listeners = \"SSL://127.0.0.1:9093\"",
                "ssl.keystore.location is needed",
            ),
            (
                "listeners = \"X://127.0.0.1:1\"\nlistener.security.protocol.map = \"X:SASL_SSL\"\nlistener.name.x.ssl.keystore.location = \"k.pem\"\nlistener.name.x.sasl.enabled.mechanisms = \"GSSAPI\"",
                "is not served",
            ),
            (
                "listeners = \"SSL://127.0.0.1:1\"\nssl.keystore.location = \"k.pem\"\nssl.keystore.type = \"JKS\"",
                "PEM files only",
            ),
            (
                "listeners = \"SSL://127.0.0.1:1\"\nssl.keystore.location = \"k.pem\"\nssl.client.auth = \"required\"",
                "needs ssl.truststore.location",
            ),
            (
                "listeners = \"SSL://127.0.0.1:1\"\nssl.keystore.location = \"k.pem\"\nssl.enabled.protocols = \"TLSv1.1\"",
                "not TLSv1.2 or TLSv1.3",
            ),
            (
                "listeners = \"SSL://127.0.0.1:1\"\nssl.keystore.location = \"k.pem\"\nlistener.name.other.ssl.client.auth = \"none\"",
                "not a key Skiff reads per listener",
            ),
            (
                "listeners = \"CUSTOM://127.0.0.1:1\"",
                "no security protocol",
            ),
            (
                "listeners = \"A://127.0.0.1:1\"\nlistener.security.protocol.map = \"A:TLS\"",
                "is not one of",
            ),
            (
                "listeners = \"PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2\"",
                "twice",
            ),
            (
                "listeners = \"PLAINTEXT://kafka:1\"",
                "must be an IP address",
            ),
            ("listeners = \"PLAINTEXT:/127.0.0.1:1\"", "NAME://HOST:PORT"),
            ("listeners = \"PLAINTEXT://127.0.0.1\"", "port"),
            ("listeners = \"\"", "empty"),
            (
                "listeners = \"PLAINTEXT://127.0.0.1:1\"\nlisten = \"127.0.0.1:2\"",
                "both given",
            ),
            (
                "listeners = \"PLAINTEXT://127.0.0.1:1\"\nadvertised.listeners = \"OTHER://h:1\"",
                "not in listeners",
            ),
            (
                "advertised.listeners = \"PLAINTEXT://h:1\"",
                "need listeners",
            ),
        ] {
            let error = listeners_of(toml).expect_err(toml);
            let message = format!("{error:#}");
            assert!(message.contains(says), "{toml}: {message}");
        }
    }
}
