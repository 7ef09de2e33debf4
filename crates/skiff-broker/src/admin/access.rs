//! What guards the admin listener: TLS (a listener that handshakes each connection in its own
//! task), the bearer token, and re-reading both when their files change.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::Listener;
use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::server::TlsStream;

use crate::security::tls::TlsServer;

/// Handshaken TLS connections waiting for the server to take them.
const TLS_READY_QUEUE: usize = 16;

/// Re-reads the listener's certificates and token when their files change, every `interval`,
/// until the broker stops. A file that does not load is logged (a token file at every check
/// until it is mended) and what was read before stays in force.
pub(super) async fn reload_files(
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
pub(super) struct BearerToken {
    path: PathBuf,
    token: RwLock<Vec<u8>>,
}

impl BearerToken {
    pub(super) fn load(path: PathBuf) -> Result<BearerToken> {
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
pub(super) async fn require_token(
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
pub(super) struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Starts accepting on `tcp` (bound at `local`); accepting stops when the listener is
    /// dropped.
    pub(super) fn new(tcp: TcpListener, tls: Arc<TlsServer>, local: SocketAddr) -> TlsListener {
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
