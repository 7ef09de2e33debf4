//! Security at the edge: what each listener asks of a connection (TLS, SASL) and the principal a
//! connection acts as. The rules themselves (mechanisms, principal mapping, ACLs) are
//! `skiff-auth`'s; this module holds the files, the sockets and the clock.

pub mod acls;
pub mod credentials;
pub mod oauth;
pub mod parking;
pub mod sasl;
pub mod tls;

use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use anyhow::{Context, Result};
use skiff_auth::principal::KafkaPrincipal;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::cluster::documents::SharedDocuments;
use crate::config::{BrokerConfig, ListenerConfig, SaslMechanism, SecurityProtocol};
use credentials::Credentials;
use oauth::OauthVerifier;
use tls::TlsServer;

/// The broker's security state: credentials and the OAuth key set.
pub struct SecurityState {
    data_dir: PathBuf,
    /// Cluster mode: where the credentials (and ACLs) are kept.
    shared: Option<Arc<dyn SharedDocuments>>,
    credentials: RwLock<Credentials>,
    pub oauth: Option<OauthVerifier>,
    /// The ACLs, when `authorizer = "standard"`.
    pub acls: Option<acls::Acls>,
    /// `User:ANONYMOUS`, shared.
    pub anonymous: Arc<KafkaPrincipal>,
    /// Which principal owns which client instance and member ID.
    pub owners: crate::owners::Owners,
}

impl SecurityState {
    /// Loads the credential store of the data directory; with `shared` (cluster mode) the
    /// credentials and ACLs are the cluster's documents instead (mirrored, written through).
    pub fn open(
        config: &BrokerConfig,
        shared: Option<Arc<dyn SharedDocuments>>,
    ) -> Result<SecurityState> {
        let credentials = match shared {
            Some(_) => Credentials::default(),
            None => Credentials::load(&config.data_dir)?,
        };
        Ok(SecurityState {
            data_dir: config.data_dir.clone(),
            shared: shared.clone(),
            credentials: RwLock::new(credentials),
            oauth: config.security.oauth.clone().map(OauthVerifier::new),
            acls: config
                .security
                .authorizer
                .as_ref()
                .map(|settings| acls::Acls::open(&config.data_dir, settings, shared.clone()))
                .transpose()?,
            anonymous: Arc::new(KafkaPrincipal::anonymous()),
            owners: crate::owners::Owners::new(config.security.instance_binding_ms),
        })
    }

    pub fn credentials(&self) -> RwLockReadGuard<'_, Credentials> {
        self.credentials.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the credentials and saves them before returning; a failed save leaves the store
    /// as it was.
    pub fn alter_credentials<R>(&self, change: impl FnOnce(&mut Credentials) -> R) -> Result<R> {
        let mut credentials = self.credentials.write().unwrap_or_else(|e| e.into_inner());
        let Some(shared) = &self.shared else {
            let mut changed = credentials.clone();
            let result = change(&mut changed);
            changed.save(&self.data_dir)?;
            *credentials = changed;
            return Ok(result);
        };
        // Cluster mode: the change applies to the cluster's current credentials, under their
        // lock.
        let mut change = Some(change);
        let mut outcome = None;
        shared.update(crate::cluster::documents::CREDENTIALS, &mut |current| {
            let mut changed = match current {
                Some(body) => Credentials::decode(body)?,
                None => Credentials::default(),
            };
            let change = change
                .take()
                .ok_or_else(|| anyhow::anyhow!("a credential change ran twice"))?;
            let result = change(&mut changed);
            let body = changed.encode()?;
            outcome = Some((result, changed));
            Ok(body)
        })?;
        let (result, changed) =
            outcome.ok_or_else(|| anyhow::anyhow!("the credential change did not run"))?;
        *credentials = changed;
        Ok(result)
    }

    /// Cluster mode: the credentials are now these (the cluster's document, as just read).
    pub fn mirror_credentials(&self, body: &[u8]) -> Result<()> {
        let decoded = Credentials::decode(body)?;
        *self.credentials.write().unwrap_or_else(|e| e.into_inner()) = decoded;
        Ok(())
    }
}

/// A fresh SCRAM server nonce: 18 random bytes as base64 (printable, no `,`); `None` only if
/// the operating system has no randomness to give.
pub fn nonce() -> Option<String> {
    use base64::Engine;
    let mut bytes = [0u8; 18];
    getrandom::fill(&mut bytes).ok()?;
    Some(base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes))
}

/// A bound listener's security: its protocol, its TLS configuration and SASL mechanisms.
pub struct Listener {
    /// The listener's index in `BrokerConfig::effective_listeners`.
    pub index: usize,
    pub name: String,
    pub protocol: SecurityProtocol,
    pub tls: Option<TlsServer>,
    pub sasl_mechanisms: Vec<SaslMechanism>,
}

impl Listener {
    /// Loads what the listener needs (its certificates): an error names the listener and file.
    /// `oauth`: whether OAUTHBEARER tokens can be checked (`sasl.oauthbearer.jwks.endpoint.url`).
    pub fn open(index: usize, config: &ListenerConfig, oauth: bool) -> Result<Listener> {
        if config.protocol.uses_sasl() && config.sasl_mechanisms.is_empty() {
            anyhow::bail!("listener {}: no SASL mechanism is enabled", config.name);
        }
        if config.sasl_mechanisms.contains(&SaslMechanism::OauthBearer) && !oauth {
            anyhow::bail!(
                "listener {}: OAUTHBEARER needs sasl.oauthbearer.jwks.endpoint.url",
                config.name
            );
        }
        let tls = config
            .tls
            .as_ref()
            .map(TlsServer::load)
            .transpose()
            .with_context(|| format!("listener {}: TLS", config.name))?;
        Ok(Listener {
            index,
            name: config.name.clone(),
            protocol: config.protocol,
            tls,
            sasl_mechanisms: config.sasl_mechanisms.clone(),
        })
    }
}

/// Reloads the listeners' certificates when their files change, checking every `interval`,
/// until the broker stops. A file that does not load is logged and the previous certificates
/// stay in force.
pub async fn reload_certificates(
    listeners: Vec<Arc<Listener>>,
    interval: Duration,
    shutdown: watch::Receiver<bool>,
) {
    crate::shutdown::every(interval, shutdown, || {
        for listener in &listeners {
            let Some(tls) = &listener.tls else { continue };
            match tls.reload_if_changed() {
                Ok(false) => {}
                Ok(true) => {
                    tracing::info!(listener = %listener.name, files = ?tls.files(), "TLS certificates reloaded");
                }
                Err(e) => tracing::error!(
                    listener = %listener.name,
                    error = %format!("{e:#}"),
                    "TLS files changed but do not load; the previous certificates stay in force"
                ),
            }
        }
    })
    .await
}

/// How long a client has to finish the TLS handshake.
pub(crate) const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The buffer under a TLS connection's reads.
const TLS_READ_BUFFER: usize = 32 * 1024;

/// How much an answer rustls seals ahead of the socket (its default, 64 KiB, took a write system
/// call, and a wake-up of the client, per 64 KiB: a fetch answer of 1 MiB took sixteen). Only
/// an answer being written fills it; an idle connection holds none. Over SASL_SSL it took the
/// broker's CPU per MB consumed by confluent-kafka from 0.87-1.00 to 0.59-0.81 ms (README,
/// "TLS + SASL").
const TLS_WRITE_BUFFER: usize = 1024 * 1024;

/// The reading half of a connection's byte stream (plain TCP or TLS).
pub type ReadHalf = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
/// The writing half of a connection's byte stream.
pub type WriteHalf = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// A connection's byte stream once the listener's transport (TLS or none) is in place.
pub struct Transport {
    pub read: ReadHalf,
    pub write: WriteHalf,
    /// Who the transport says the client is: the client certificate's principal on an SSL
    /// listener, `User:ANONYMOUS` on PLAINTEXT; `None` when SASL will say.
    pub principal: Option<KafkaPrincipal>,
    /// Takes a TLS connection's socket out of the runtime's poller while its reader pauses
    /// (see [`parking`]); `None` on plain TCP.
    pub parker: Option<parking::Parker>,
}

/// Puts the listener's transport on an accepted socket: the TLS handshake (bounded in time) on
/// SSL and SASL_SSL listeners, nothing on the others.
pub async fn accept(listener: &Listener, tcp: TcpStream) -> Result<Transport> {
    let sasl = listener.protocol.uses_sasl();
    let Some(tls) = &listener.tls else {
        let (read, write) = tcp.into_split();
        return Ok(Transport {
            read: Box::new(read),
            write: Box::new(write),
            principal: (!sasl).then(KafkaPrincipal::anonymous),
            parker: None,
        });
    };
    let (tcp, parker) = parking::ParkingTcp::new(tcp);
    // rustls reads the socket 4 KiB at a time: a buffer under it turns most of those reads
    // into copies instead of system calls (a 1 MiB produce batch took 256 reads).
    let tcp = tokio::io::BufReader::with_capacity(TLS_READ_BUFFER, tcp);
    let mut stream = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.acceptor().accept(tcp))
        .await
        .context("TLS handshake timed out")?
        .context("TLS handshake failed")?;
    // (The limit also bounds plaintext queued before the handshake ends: none, by now.)
    stream.get_mut().1.set_buffer_limit(Some(TLS_WRITE_BUFFER));
    let principal = if sasl {
        None
    } else {
        Some(tls.principal(stream.get_ref().1)?)
    };
    let (read, write) = tokio::io::split(stream);
    Ok(Transport {
        read: Box::new(read),
        write: Box::new(write),
        principal,
        parker: Some(parker),
    })
}
