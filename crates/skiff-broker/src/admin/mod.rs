//! The admin HTTP listener (`admin.listen`, default 127.0.0.1:9644): `/health`, Prometheus
//! `/metrics`, the client-instance view `/clients`, `/clients/{id}` (JSON, with each
//! membership's lag), each instance's journal `/clients/{id}/events` (JSON), the page
//! `/ui/clients` and `/ui/clients/{id}` (one self-contained HTML document that reads those; see
//! [`ui`]), and `/groups/{id}` (a group's members with, for share groups, the records each
//! holds acquired).
//!
//! Off loopback the listener must be protected, or the broker does not start: TLS
//! (`admin.ssl.*`, the listener TLS keys) and a bearer token (`admin.token.file`) that every
//! route but `/health` asks for. Both files are read again when they change (every
//! `ssl.reload.interval.ms`), so certificates and tokens rotate without a restart.
//!
//! Everything about one client instance is shown under its KIP-1313 ID: its connections, their
//! requests, its KIP-1313 rejections, its group memberships. Clients without an ID are listed
//! one per connection.
//!
//! In cluster mode the view is cluster-wide: each broker publishes its client instances to
//! PostgreSQL ([`publish_clients`], started by the server) and shows them merged with every
//! other live broker's.

mod access;
mod journal;
mod lag;
mod metrics;
mod ui;
mod views;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::extract::State;
use axum::middleware::{self};
use axum::response::Json;
use axum::routing::get;
use axum::serve::Listener;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::now_ms;
use crate::config::SecurityConfig;
use crate::security::tls::TlsServer;
use crate::shutdown::stopped;
use crate::state::Broker;
use access::{BearerToken, TlsListener, reload_files, require_token};
use metrics::metrics;
pub(crate) use views::publish_clients;
use views::{client, clients, group};

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
        .route("/clients/{id}/events", get(journal::events))
        .route("/groups/{id}", get(group))
        .route("/ui/clients", get(ui::page))
        .route("/ui/clients/{id}", get(ui::page));
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
