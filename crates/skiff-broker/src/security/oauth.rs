//! OAUTHBEARER's key set: the JWKS at `sasl.oauthbearer.jwks.endpoint.url`, fetched at start,
//! again every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and when a token names a key ID the
//! set does not have (keys rotate); tokens are checked against it by `skiff-auth`. An `https://`
//! endpoint is read with a plain GET (10 s at most, 1 MiB at most, no redirects), its certificate
//! checked against `sasl.oauthbearer.jwks.endpoint.truststore.location` or the system's CAs.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use skiff_auth::oauth::{Jwks, ValidatedToken};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};
use tokio_rustls::TlsConnector;

use crate::config::OauthSettings;

/// The settings and the key set in force.
pub struct OauthVerifier {
    settings: OauthSettings,
    jwks: RwLock<Option<Arc<Jwks>>>,
    /// Woken when a token's key is missing, so the keys are fetched before the next period.
    stale: Notify,
}

impl OauthVerifier {
    pub fn new(settings: OauthSettings) -> OauthVerifier {
        OauthVerifier {
            settings,
            jwks: RwLock::new(None),
            stale: Notify::new(),
        }
    }

    /// Checks a token; the error says why it is refused (never the token).
    pub fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, String> {
        let jwks = self.jwks.read().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(jwks) = jwks else {
            self.stale.notify_one();
            return Err("the JWKS has not been fetched yet".into());
        };
        self.settings
            .validator
            .validate(&jwks, token, now_ms)
            .map_err(|e| {
                if matches!(e, skiff_auth::oauth::OauthError::UnknownKey(_)) {
                    self.stale.notify_one();
                }
                e.to_string()
            })
    }

    /// Fetches the key set and puts it in force.
    pub async fn refresh(&self) -> Result<()> {
        let body = fetch(
            &self.settings.jwks_url,
            self.settings.jwks_truststore.as_deref(),
        )
        .await?;
        let jwks = Jwks::parse(&body)
            .with_context(|| format!("{}: not a usable JWKS", self.settings.jwks_url))?;
        *self.jwks.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(jwks));
        Ok(())
    }

    /// Keeps the key set fresh until the broker stops: every refresh period, and soon after a
    /// token names an unknown key (at most once a second).
    pub async fn keep_fresh(&self, mut shutdown: watch::Receiver<bool>) {
        let period = Duration::from_millis(self.settings.refresh_ms);
        loop {
            match self.refresh().await {
                Ok(()) => tracing::debug!(url = %self.settings.jwks_url, "JWKS fetched"),
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "fetching the JWKS failed; the keys in force stay")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = self.stale.notified() => {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = crate::shutdown::stopped(&mut shutdown) => return,
                    }
                }
                _ = crate::shutdown::stopped(&mut shutdown) => return,
            }
        }
    }
}

/// The most a JWKS may weigh.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// How long an `https://` fetch may take, from connecting to the last byte of the body.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The body at a `file://` or `https://` URL (at most 1 MiB). `truststore`: the CA certificates
/// an `https://` server's certificate must chain to (the system's when `None`).
async fn fetch(url: &str, truststore: Option<&Path>) -> Result<Vec<u8>> {
    if let Some(path) = url.strip_prefix("file://") {
        return read_file(path).await;
    }
    tokio::time::timeout(FETCH_TIMEOUT, fetch_https(url, truststore))
        .await
        .with_context(|| format!("GET {url}: no answer within {FETCH_TIMEOUT:?}"))?
        .with_context(|| format!("GET {url}"))
}

async fn read_file(path: &str) -> Result<Vec<u8>> {
    let meta = tokio::fs::metadata(path)
        .await
        .with_context(|| format!("reading {path}"))?;
    if meta.len() > MAX_JWKS_BYTES as u64 {
        bail!("{path} is larger than 1 MiB");
    }
    tokio::fs::read(path)
        .await
        .with_context(|| format!("reading {path}"))
}

/// GETs an `https://` URL over HTTP/1.1, one request on a fresh connection. Only a 200 answer
/// is a body: redirects are not followed.
async fn fetch_https(url: &str, truststore: Option<&Path>) -> Result<Vec<u8>> {
    let target = HttpsTarget::parse(url)?;
    let connector = TlsConnector::from(client_config(truststore)?);
    let tcp = TcpStream::connect((target.host.as_str(), target.port))
        .await
        .with_context(|| format!("connecting to {}", target.authority))?;
    let stream = connector
        .connect(target.server_name, tcp)
        .await
        .context("TLS handshake")?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let request = Request::get(target.path)
        .header(header::HOST, target.authority)
        .header(header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())?;
    let exchange = async move {
        let response = sender.send_request(request).await?;
        let status = response.status();
        if status != StatusCode::OK {
            let redirect = if status.is_redirection() {
                " (redirects are not followed)"
            } else {
                ""
            };
            bail!("answered HTTP {status}, not 200{redirect}");
        }
        let body = Limited::new(response.into_body(), MAX_JWKS_BYTES)
            .collect()
            .await
            .map_err(|e| anyhow!("reading the body (at most 1 MiB): {e}"))?;
        Ok(body.to_bytes().to_vec())
    };
    // The connection is driven alongside the exchange; it ends by itself once the answer is
    // read, and its error, if it fails first, says more than the exchange's.
    tokio::select! {
        body = exchange => body,
        Err(e) = connection => Err(e.into()),
    }
}

/// Where an `https://` URL points: what to connect to, the name the certificate must carry, and
/// what to ask for.
struct HttpsTarget {
    /// The host to connect to (an IPv6 address without its brackets).
    host: String,
    port: u16,
    /// The URL's host and port as written: the `Host` header.
    authority: String,
    server_name: ServerName<'static>,
    /// The path and query.
    path: String,
}

impl HttpsTarget {
    fn parse(url: &str) -> Result<HttpsTarget> {
        let uri: hyper::Uri = url.parse().context("not a URL")?;
        if uri.scheme_str() != Some("https") {
            bail!("not an https:// URL");
        }
        let authority = uri.authority().context("no host in the URL")?;
        if authority.as_str().contains('@') {
            bail!("user information in the URL is not supported");
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let server_name =
            ServerName::try_from(host.clone()).with_context(|| format!("{host:?}: not a host"))?;
        Ok(HttpsTarget {
            port: authority.port_u16().unwrap_or(443),
            authority: authority.as_str().to_string(),
            server_name,
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
            host,
        })
    }
}

/// A TLS client trusting the CA certificates of the PEM file `truststore`, or the system's.
fn client_config(truststore: Option<&Path>) -> Result<Arc<ClientConfig>> {
    let roots = match truststore {
        Some(path) => super::tls::read_roots(path)?,
        None => system_roots()?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The operating system's CA certificates (`SSL_CERT_FILE` and `SSL_CERT_DIR` override where
/// they are looked for).
fn system_roots() -> Result<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::debug!(%error, "reading the system CA certificates");
    }
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        bail!(
            "no system CA certificates found: set sasl.oauthbearer.jwks.endpoint.truststore.location"
        );
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::HttpsTarget;

    /// What a target connects to, and what its request says: host, port, `Host` header, path.
    fn parts(url: &str) -> (String, u16, String, String) {
        let target = HttpsTarget::parse(url).expect("a usable URL");
        (target.host, target.port, target.authority, target.path)
    }

    #[test]
    fn https_urls_name_what_to_connect_to_and_ask_for() {
        let expected = |host: &str, port, authority: &str, path: &str| {
            (
                host.to_string(),
                port,
                authority.to_string(),
                path.to_string(),
            )
        };
        assert_eq!(
            parts("https://idp.example/keys"),
            expected("idp.example", 443, "idp.example", "/keys")
        );
        assert_eq!(
            parts("https://idp.example:8443/jwks?tenant=a"),
            expected("idp.example", 8443, "idp.example:8443", "/jwks?tenant=a")
        );
        assert_eq!(
            parts("https://[::1]:8443"),
            expected("::1", 8443, "[::1]:8443", "/")
        );
    }

    #[test]
    fn unusable_urls_are_refused() {
        for url in [
            "http://idp.example/keys",
            "https://user:secret@idp.example/keys",
            "https:///keys",
            "idp.example/keys",
        ] {
            assert!(HttpsTarget::parse(url).is_err(), "{url}");
        }
    }
}
