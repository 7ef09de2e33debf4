//! The admin HTTP listener (`admin.listen`, default 127.0.0.1:9644): `/health`, Prometheus
//! `/metrics`, and the client-instance view `/clients`, `/clients/{id}` (JSON) and `/ui/clients`
//! (a small HTML page, no scripts from anywhere else).
//!
//! Off loopback the listener must be protected, or the broker does not start: TLS
//! (`admin.ssl.*`, the listener TLS keys) and a bearer token (`admin.token.file`) that every
//! route but `/health` asks for. Both files are read again when they change (every
//! `ssl.reload.interval.ms`), so certificates and tokens rotate without a restart.
//!
//! Everything about one client instance is shown under its KIP-1313 ID: its connections, their
//! requests, its KIP-1313 rejections, its group memberships. Clients without an ID are listed
//! one per connection.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use axum::serve::Listener;
use serde::Serialize;
use skiff_protocol::{ApiKey, Uuid};
use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;

use crate::clients::{ConnectionRecord, Rejection};
use crate::clock::now_ms;
use crate::config::SecurityConfig;
use crate::groups::Group;
use crate::identity::RejectReason;
use crate::security::tls::TlsServer;
use crate::shutdown::stopped;
use crate::state::Broker;

/// Handshaken TLS connections waiting for the server to take them.
const TLS_READY_QUEUE: usize = 16;

/// Binds the admin listener; returns its address and the serving task. Off loopback the
/// listener needs TLS and a token (see [`check_exposure`]); a certificate or token file that
/// does not load is an error.
pub async fn start(
    addr: SocketAddr,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, JoinHandle<()>)> {
    let security = &broker.config.security;
    check_exposure(addr, security)?;
    let tls = security
        .admin_tls
        .as_ref()
        .map(TlsServer::load)
        .transpose()
        .context("admin listener: TLS (admin.ssl.*)")?
        .map(Arc::new);
    let token = security
        .admin_token_file
        .clone()
        .map(BearerToken::load)
        .transpose()?
        .map(Arc::new);
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the admin listener {addr}"))?;
    let local = listener.local_addr()?;
    if tls.is_some() || token.is_some() {
        let interval = Duration::from_millis(security.tls_reload_interval_ms);
        tokio::spawn(reload_files(
            tls.clone(),
            token.clone(),
            interval,
            shutdown.clone(),
        ));
    }
    let app = router(broker, token);
    let task = tokio::spawn(async move {
        let served = match tls {
            Some(tls) => serve(TlsListener::new(listener, tls, local), app, shutdown).await,
            None => serve(listener, app, shutdown).await,
        };
        if let Err(e) = served {
            tracing::error!(error = %e, "admin listener failed");
        }
    });
    Ok((local, task))
}

/// Refuses an admin listener that other hosts can reach unless it has both TLS and a token:
/// its pages name every client, principal and group of the broker.
fn check_exposure(addr: SocketAddr, security: &SecurityConfig) -> Result<()> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    let missing: Vec<&str> = [
        (security.admin_tls.is_none(), "admin.ssl.keystore.location"),
        (security.admin_token_file.is_none(), "admin.token.file"),
    ]
    .into_iter()
    .filter_map(|(missing, key)| missing.then_some(key))
    .collect();
    if missing.is_empty() {
        return Ok(());
    }
    bail!(
        "admin.listen {addr} is not loopback: set {}, or bind to 127.0.0.1",
        missing.join(" and ")
    )
}

/// The routes; with a token, every one but `/health` asks for it.
fn router(broker: Arc<Broker>, token: Option<Arc<BearerToken>>) -> Router {
    let mut app = Router::new()
        .route("/metrics", get(metrics))
        .route("/clients", get(clients))
        .route("/clients/{id}", get(client))
        .route("/ui/clients", get(ui));
    if let Some(token) = token {
        app = app.route_layer(middleware::from_fn_with_state(token, require_token));
    }
    app.route("/health", get(health)).with_state(broker)
}

/// Serves `app` on `listener` until the broker stops.
async fn serve<L>(
    listener: L,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()>
where
    L: Listener,
    L::Addr: std::fmt::Debug,
{
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stopped(&mut shutdown).await })
        .await
}

/// Re-reads the listener's certificates and token when their files change, every `interval`,
/// until the broker stops. A file that does not load is logged (a token file at every check
/// until it is mended) and what was read before stays in force.
async fn reload_files(
    tls: Option<Arc<TlsServer>>,
    token: Option<Arc<BearerToken>>,
    interval: Duration,
    shutdown: watch::Receiver<bool>,
) {
    crate::shutdown::every(interval, shutdown, || {
        if let Some(tls) = &tls {
            log_reload("TLS certificates", tls.reload_if_changed());
        }
        if let Some(token) = &token {
            log_reload("token", token.reload_if_changed());
        }
    })
    .await
}

fn log_reload(what: &str, reloaded: Result<bool>) {
    match reloaded {
        Ok(false) => {}
        Ok(true) => tracing::info!("admin listener: {what} reloaded"),
        Err(e) => tracing::error!(
            error = %format!("{e:#}"),
            "admin listener: reloading the {what} failed; what was loaded before stays in force"
        ),
    }
}

/// The admin token of `admin.token.file`, re-read when the file changes. It is never logged.
struct BearerToken {
    path: PathBuf,
    token: RwLock<Vec<u8>>,
}

impl BearerToken {
    fn load(path: PathBuf) -> Result<BearerToken> {
        let token = RwLock::new(read_token(&path)?);
        Ok(BearerToken { path, token })
    }

    /// Whether an `Authorization` header carries the token (compared in constant time).
    fn admits(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(presented) = authorization.and_then(bearer_credentials) else {
            return false;
        };
        let token = self.token.read().unwrap_or_else(|e| e.into_inner());
        presented.ct_eq(token.as_slice()).into()
    }

    /// Reads the file again: `Ok(true)` when it holds a new token, now in force. A file that is
    /// missing or empty leaves the token in force.
    fn reload_if_changed(&self) -> Result<bool> {
        let fresh = read_token(&self.path)?;
        let mut token = self.token.write().unwrap_or_else(|e| e.into_inner());
        if *token == fresh {
            return Ok(false);
        }
        *token = fresh;
        Ok(true)
    }
}

/// The token in a file: its content less surrounding whitespace, which must leave something.
fn read_token(path: &std::path::Path) -> Result<Vec<u8>> {
    let content = std::fs::read_to_string(path)
        .with_context(|| format!("admin.token.file: reading {}", path.display()))?;
    let token = content.trim();
    if token.is_empty() {
        bail!("admin.token.file: {} is empty", path.display());
    }
    Ok(token.as_bytes().to_vec())
}

/// The credentials of `Authorization: Bearer <credentials>` (the scheme is case-insensitive).
fn bearer_credentials(authorization: &HeaderValue) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"Bearer ";
    let (scheme, credentials) = authorization.as_bytes().split_at_checked(SCHEME.len())?;
    scheme.eq_ignore_ascii_case(SCHEME).then_some(credentials)
}

/// Lets a request through only with the admin token; else 401 with `WWW-Authenticate: Bearer`.
async fn require_token(
    State(token): State<Arc<BearerToken>>,
    request: Request,
    next: Next,
) -> Response {
    if token.admits(request.headers().get(header::AUTHORIZATION)) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "this page needs Authorization: Bearer <the token of admin.token.file>\n",
    )
        .into_response()
}

/// The admin listener with TLS, for `axum::serve`: TCP connections are accepted by a task of
/// their own and each is handshaken in another (at most [`crate::security::TLS_HANDSHAKE_TIMEOUT`]), so a slow
/// client holds up no one; a failed handshake is dropped with a debug log.
struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Starts accepting on `tcp` (bound at `local`); accepting stops when the listener is
    /// dropped.
    fn new(tcp: TcpListener, tls: Arc<TlsServer>, local: SocketAddr) -> TlsListener {
        let (ready_tx, ready) = mpsc::channel(TLS_READY_QUEUE);
        tokio::spawn(accept_tls(tcp, tls, ready_tx));
        TlsListener { local, ready }
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task stops only once this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Accepts TCP connections and hands each to `ready` once its TLS handshake is done, until the
/// receiving [`TlsListener`] is dropped.
async fn accept_tls(
    tcp: TcpListener,
    tls: Arc<TlsServer>,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = tcp.accept() => accepted,
            () = ready.closed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "admin listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let handshake = tls.acceptor().accept(stream);
        let ready = ready.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(crate::security::TLS_HANDSHAKE_TIMEOUT, handshake).await {
                Ok(Ok(stream)) => {
                    // Fails only when the listener is gone, and the connection with it.
                    let _ = ready.send((stream, peer)).await;
                }
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "admin listener: TLS handshake failed")
                }
                Err(_) => tracing::debug!(%peer, "admin listener: TLS handshake timed out"),
            }
        });
    }
}

#[derive(Serialize)]
struct HealthView {
    status: &'static str,
    cluster_id: String,
    node_id: i32,
    uptime_ms: i64,
}

async fn health(State(broker): State<Arc<Broker>>) -> Json<HealthView> {
    Json(HealthView {
        status: "ok",
        cluster_id: broker.cluster_id.clone(),
        node_id: broker.node_id(),
        uptime_ms: now_ms() - broker.started_ms,
    })
}

/// Prometheus text exposition format, version 0.0.4.
async fn metrics(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    // Broker metrics, then the latest client telemetry labelled by client instance ID.
    let mut text = render_metrics(&broker);
    text.push_str(&broker.lock_telemetry().render_prometheus());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

pub fn render_metrics(broker: &Broker) -> String {
    let m = &broker.metrics;
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, kind: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    gauge(
        "skiff_connections_open",
        "Open client connections.",
        "gauge",
        m.connections_open.load(Ordering::Relaxed),
    );
    let (sessions, session_partitions) = {
        let sessions = broker.lock_fetch_sessions();
        (sessions.len(), sessions.total_partitions())
    };
    gauge(
        "skiff_fetch_sessions",
        "Incremental fetch sessions held (KIP-227).",
        "gauge",
        sessions as u64,
    );
    gauge(
        "skiff_fetch_session_partitions",
        "Partitions held by all incremental fetch sessions.",
        "gauge",
        session_partitions as u64,
    );
    let (transactional_ids, ongoing) = {
        let inner = broker.txns.lock();
        let all = inner.state.all();
        let ongoing = all
            .iter()
            .filter(|t| t.state == skiff_txn::TxnState::Ongoing)
            .count();
        (all.len(), ongoing)
    };
    gauge(
        "skiff_transactional_ids",
        "Transactional IDs the transaction coordinator knows.",
        "gauge",
        transactional_ids as u64,
    );
    gauge(
        "skiff_transactions_ongoing",
        "Transactions in progress (partitions added, not yet committed or aborted).",
        "gauge",
        ongoing as u64,
    );
    let (partitions, offline) = broker
        .all_topics()
        .iter()
        .flat_map(|t| t.partitions.iter())
        .fold((0u64, 0u64), |(all, offline), p| {
            (all + 1, offline + u64::from(p.is_offline()))
        });
    gauge(
        "skiff_partitions",
        "Partitions this broker holds.",
        "gauge",
        partitions,
    );
    gauge(
        "skiff_segment_files_open",
        "Segment files whose descriptor is open (bounded by log.open.files.max; idle partitions hold none).",
        "gauge",
        broker.files.0.open_files() as u64,
    );
    gauge(
        "skiff_segment_file_opens_total",
        "Times a segment file was opened (a growing rate means log.open.files.max is too small for the partitions in use).",
        "counter",
        broker.files.0.opens() as u64,
    );
    gauge(
        "skiff_partitions_offline",
        "Partitions offline after a disk fault (a failed fdatasync or segment write): they answer KAFKA_STORAGE_ERROR to appends until the broker restarts.",
        "gauge",
        offline,
    );
    gauge(
        "skiff_connections_accepted_total",
        "Client connections accepted.",
        "counter",
        m.connections_accepted.load(Ordering::Relaxed),
    );
    gauge(
        "skiff_authorization_denials_total",
        "Requests (or parts of them) refused by the ACL authorizer.",
        "counter",
        broker
            .security
            .acls
            .as_ref()
            .map_or(0, |acls| acls.denials.load(Ordering::Relaxed)),
    );
    gauge(
        "skiff_identity_conflicts_total",
        "Client instance IDs or group member IDs presented by a principal other than their owner (client.instance.id.binding).",
        "counter",
        broker.security.owners.conflicts.load(Ordering::Relaxed),
    );
    gauge(
        "skiff_tls_handshake_failures_total",
        "Connections closed because their TLS handshake failed or timed out (a plaintext client on a TLS port, an untrusted or missing client certificate).",
        "counter",
        m.tls_handshake_failures.load(Ordering::Relaxed),
    );
    let _ = writeln!(
        out,
        "# HELP skiff_connections_identified_total Connections whose KIP-1313 identity was fixed, by whether it carries an ID.\n# TYPE skiff_connections_identified_total counter"
    );
    let _ = writeln!(
        out,
        "skiff_connections_identified_total{{client_instance_id=\"present\"}} {}",
        m.connections_with_instance_id.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "skiff_connections_identified_total{{client_instance_id=\"absent\"}} {}",
        m.connections_without_instance_id.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP skiff_sasl_authentications_total SASL authentications and re-authentications, by result.\n# TYPE skiff_sasl_authentications_total counter"
    );
    for (result, counter) in [
        ("succeeded", &m.sasl_successes),
        ("failed", &m.sasl_failures),
    ] {
        let _ = writeln!(
            out,
            "skiff_sasl_authentications_total{{result=\"{result}\"}} {}",
            counter.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "# HELP skiff_kip1313_rejections_total Requests rejected for breaking the connection's client instance ID.\n# TYPE skiff_kip1313_rejections_total counter"
    );
    for reason in RejectReason::ALL {
        let _ = writeln!(
            out,
            "skiff_kip1313_rejections_total{{reason=\"{}\"}} {}",
            reason.label(),
            m.rejections(reason)
        );
    }
    let _ = writeln!(
        out,
        "# HELP skiff_requests_total Requests received, by API.\n# TYPE skiff_requests_total counter"
    );
    for &api in ApiKey::ALL {
        let count = usize::try_from(api.key())
            .ok()
            .and_then(|i| m.requests.get(i))
            .map_or(0, |c| c.load(Ordering::Relaxed));
        if count > 0 {
            let _ = writeln!(
                out,
                "skiff_requests_total{{api=\"{}\"}} {count}",
                api.name()
            );
        }
    }
    out
}

/// A group membership of a client instance.
#[derive(Serialize, Clone)]
struct Membership {
    group: String,
    protocol: &'static str,
    member_id: String,
    member_epoch: Option<i32>,
    /// topic name -> partitions (KIP-848 members).
    assigned: std::collections::BTreeMap<String, Vec<i32>>,
    /// The member ID is not the client instance ID (KIP-1082 recommends they be equal).
    member_id_differs: bool,
}

/// A producer ID the client instance was given, with its transaction if it is transactional.
#[derive(Serialize, Clone)]
struct ProducerView {
    producer_id: i64,
    producer_epoch: i16,
    transactional_id: Option<String>,
    /// The coordinator's state of the transactional ID (Empty, Ongoing, ...), while it is
    /// bound to this producer ID.
    transaction_state: Option<&'static str>,
    /// topic name -> partitions of the transaction in progress.
    transaction_partitions: std::collections::BTreeMap<String, Vec<i32>>,
    since_ms: i64,
}

#[derive(Serialize)]
struct InstanceView {
    /// The KIP-1313 client instance ID, or null for a connection without one.
    client_instance_id: Option<String>,
    connections: Vec<ConnectionRecord>,
    memberships: Vec<Membership>,
    /// Producer IDs InitProducerId handed to it (idempotent and transactional producers).
    producers: Vec<ProducerView>,
    kip1313_rejections: Vec<Rejection>,
    /// KIP-714: the instance's subscription and latest pushed metrics, if it pushes.
    telemetry: Option<skiff_telemetry::InstanceView>,
}

fn memberships(broker: &Broker) -> Vec<(Option<Uuid>, Membership)> {
    let inner = broker.groups.lock(broker, now_ms());
    let mut out = Vec::new();
    for (group_id, group) in &inner.groups {
        match group {
            Group::Consumer(g) => {
                for member in g.members() {
                    let id = member.member_id().to_string();
                    let instance = broker
                        .clients
                        .member_instance(group_id, &id)
                        .or_else(|| id.parse().ok());
                    let assigned = member
                        .assigned_partitions()
                        .iter()
                        .map(|(topic, parts)| {
                            let name = inner
                                .topics
                                .by_id(*topic)
                                .map_or_else(|| topic.to_string(), |(n, _)| n.to_string());
                            (name, parts.iter().copied().collect())
                        })
                        .collect();
                    out.push((
                        instance,
                        Membership {
                            group: group_id.clone(),
                            protocol: "consumer",
                            member_epoch: Some(member.member_epoch()),
                            assigned,
                            member_id_differs: instance.is_none_or(|i| i.to_string() != id),
                            member_id: id,
                        },
                    ));
                }
            }
            Group::Classic(g) => {
                for member in g.members() {
                    let id = member.member_id.to_string();
                    let instance = broker.clients.member_instance(group_id, &id);
                    out.push((
                        instance,
                        Membership {
                            group: group_id.clone(),
                            protocol: "classic",
                            member_epoch: None,
                            assigned: Default::default(),
                            member_id_differs: instance.is_none_or(|i| i.to_string() != id),
                            member_id: id,
                        },
                    ));
                }
            }
        }
    }
    out
}

fn producers(broker: &Broker, instance: Uuid) -> Vec<ProducerView> {
    let notes = broker.clients.producers_of(instance);
    if notes.is_empty() {
        return Vec::new();
    }
    let txns = broker.txns.lock();
    notes
        .into_iter()
        .map(|note| {
            let txn = note
                .transactional_id
                .as_deref()
                .and_then(|id| txns.state.get(id))
                .filter(|t| t.producer_id == note.producer_id);
            let mut partitions: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
            for (topic, index) in txn.map(|t| &t.partitions).into_iter().flatten() {
                partitions.entry(topic.clone()).or_default().push(*index);
            }
            ProducerView {
                producer_id: note.producer_id,
                producer_epoch: txn.map_or(note.producer_epoch, |t| t.producer_epoch),
                transaction_state: txn.map(|t| t.state.name()),
                transaction_partitions: partitions,
                transactional_id: note.transactional_id,
                since_ms: note.at_ms,
            }
        })
        .collect()
}

fn instance_views(broker: &Broker) -> Vec<InstanceView> {
    let connections = broker.clients.connections();
    let members = memberships(broker);
    let telemetry: std::collections::HashMap<String, skiff_telemetry::InstanceView> = broker
        .lock_telemetry()
        .instances()
        .into_iter()
        .map(|v| (v.client_instance_id.clone(), v))
        .collect();
    let mut ids = broker.clients.known_instances();
    ids.extend(members.iter().filter_map(|(i, _)| *i));
    ids.extend(broker.clients.producer_instances());
    ids.extend(telemetry.keys().filter_map(|k| k.parse::<Uuid>().ok()));
    ids.sort();
    ids.dedup();
    let mut views: Vec<InstanceView> = ids
        .into_iter()
        .map(|id| {
            let text = id.to_string();
            InstanceView {
                connections: connections
                    .iter()
                    .filter(|c| c.client_instance_id.as_deref() == Some(&text))
                    .cloned()
                    .collect(),
                memberships: members
                    .iter()
                    .filter(|(i, _)| *i == Some(id))
                    .map(|(_, m)| m.clone())
                    .collect(),
                producers: producers(broker, id),
                kip1313_rejections: broker.clients.rejections_of(Some(id)),
                telemetry: telemetry.get(&text).cloned(),
                client_instance_id: Some(text),
            }
        })
        .collect();
    for c in connections
        .iter()
        .filter(|c| c.client_instance_id.is_none())
    {
        views.push(InstanceView {
            client_instance_id: None,
            connections: vec![c.clone()],
            memberships: Vec::new(),
            producers: Vec::new(),
            kip1313_rejections: Vec::new(),
            telemetry: None,
        });
    }
    views
}

async fn clients(State(broker): State<Arc<Broker>>) -> Json<Vec<InstanceView>> {
    Json(instance_views(&broker))
}

async fn client(State(broker): State<Arc<Broker>>, Path(id): Path<String>) -> Response {
    let Ok(uuid) = id.parse::<Uuid>() else {
        return (
            StatusCode::BAD_REQUEST,
            "not a Kafka UUID (22 characters of URL-safe base64)",
        )
            .into_response();
    };
    match instance_views(&broker)
        .into_iter()
        .find(|v| v.client_instance_id.as_deref() == Some(&uuid.to_string()))
    {
        Some(view) => Json(view).into_response(),
        None => (StatusCode::NOT_FOUND, "unknown client instance").into_response(),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A server-rendered page: one row per client instance, details below each.
async fn ui(State(broker): State<Arc<Broker>>) -> Html<String> {
    let views = instance_views(&broker);
    let mut page = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Skiff clients</title><style>\
         body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}\
         td,th{border:1px solid #bbb;padding:.3em .6em;text-align:left}th{background:#eef}\
         .id{font-family:monospace}.warn{color:#a40}</style></head><body>",
    );
    let _ = write!(
        page,
        "<h1>Client instances</h1><p>Cluster <span class=\"id\">{}</span>, node {}. {} instance(s).</p>",
        escape(&broker.cluster_id),
        broker.node_id(),
        views.len()
    );
    page.push_str("<table id=\"instances\"><tr><th>client instance ID</th><th>client ID</th><th>software</th><th>connections</th><th>groups</th><th>KIP-1313 rejections</th></tr>");
    for v in &views {
        let first = v.connections.first();
        let _ = write!(
            page,
            "<tr><td class=\"id\"><a href=\"#{0}\">{0}</a></td><td>{1}</td><td>{2}</td><td>{3}</td><td>{4}</td><td>{5}</td></tr>",
            escape(v.client_instance_id.as_deref().unwrap_or("(none)")),
            escape(first.and_then(|c| c.client_id.as_deref()).unwrap_or("")),
            escape(&first.map_or(String::new(), |c| format!(
                "{} {}",
                c.software_name.as_deref().unwrap_or(""),
                c.software_version.as_deref().unwrap_or("")
            ))),
            v.connections.len(),
            escape(
                &v.memberships
                    .iter()
                    .map(|m| m.group.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            v.kip1313_rejections.len(),
        );
    }
    page.push_str("</table>");
    for v in &views {
        let id = v.client_instance_id.as_deref().unwrap_or("(none)");
        let _ = write!(page, "<h2 id=\"{0}\" class=\"id\">{0}</h2>", escape(id));
        page.push_str(
            "<table><tr><th>connection</th><th>peer</th><th>listener</th><th>principal</th><th>since (ms)</th><th>requests</th></tr>",
        );
        for c in &v.connections {
            let requests = c
                .requests
                .iter()
                .map(|(api, n)| format!("{api}: {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = write!(
                page,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                c.id,
                escape(&c.peer),
                escape(&c.listener),
                escape(c.principal.as_deref().unwrap_or("(not authenticated)")),
                c.connected_since_ms,
                escape(&requests)
            );
        }
        page.push_str("</table>");
        if !v.memberships.is_empty() {
            page.push_str("<table><tr><th>group</th><th>protocol</th><th>member ID</th><th>epoch</th><th>assigned</th></tr>");
            for m in &v.memberships {
                let assigned = m
                    .assigned
                    .iter()
                    .map(|(t, p)| format!("{t}{p:?}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                let _ = write!(
                    page,
                    "<tr><td>{}</td><td>{}</td><td class=\"id{}\">{}</td><td>{}</td><td>{}</td></tr>",
                    escape(&m.group),
                    m.protocol,
                    if m.member_id_differs { " warn" } else { "" },
                    escape(&m.member_id),
                    m.member_epoch.map_or(String::new(), |e| e.to_string()),
                    escape(&assigned)
                );
            }
            page.push_str("</table>");
        }
        if !v.producers.is_empty() {
            page.push_str("<table><tr><th>producer ID</th><th>epoch</th><th>transactional ID</th><th>transaction</th><th>partitions</th></tr>");
            for p in &v.producers {
                let partitions = p
                    .transaction_partitions
                    .iter()
                    .map(|(t, parts)| format!("{t}{parts:?}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                let _ = write!(
                    page,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    p.producer_id,
                    p.producer_epoch,
                    escape(p.transactional_id.as_deref().unwrap_or("")),
                    p.transaction_state.unwrap_or(""),
                    escape(&partitions)
                );
            }
            page.push_str("</table>");
        }
    }
    page.push_str("</body></html>");
    Html(page)
}
