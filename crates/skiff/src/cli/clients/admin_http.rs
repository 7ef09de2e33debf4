//! The broker's admin HTTP listener as `skiff clients` reads it: one JSON GET per call over
//! HTTP/1.1 (hyper), in the clear for an `http://` URL or over TLS (rustls) for an `https://` one,
//! with `Authorization: Bearer <token>` when a token file is given. The token is never printed.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::cli::{Failure, exit};

/// The largest response body accepted.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// An admin listener to GET from: where it is, how to reach it, and the token to present.
pub struct AdminHttp {
    /// The `--admin` URL without a trailing slash, for messages.
    base: String,
    target: Target,
    /// The TLS set-up of an `https://` URL.
    tls: Option<Tls>,
    /// `Bearer <token>` (marked sensitive), when a token file is given.
    authorization: Option<HeaderValue>,
    /// How long one GET may take, from connecting to the last byte of the body.
    timeout: Duration,
}

impl AdminHttp {
    /// The admin listener at `base` (`http://HOST[:PORT][/PREFIX]`, `https://...`, or
    /// `HOST:PORT` for `http://`). An `https://` listener's certificate must chain to a CA of
    /// `ca_file` (PEM), or to one of the system's; `token_file` holds the bearer token.
    pub fn new(
        base: &str,
        ca_file: Option<&Path>,
        token_file: Option<&Path>,
        timeout: Duration,
    ) -> Result<AdminHttp, Failure> {
        let target = Target::parse(base)?;
        let tls = match (target.https, ca_file) {
            (true, ca_file) => Some(Tls::new(&target.host, ca_file)?),
            (false, Some(_)) => {
                return Err(Failure::usage(
                    "--admin-ca-file is for an https:// --admin URL",
                ));
            }
            (false, None) => None,
        };
        Ok(AdminHttp {
            base: base.trim_end_matches('/').to_string(),
            target,
            tls,
            authorization: token_file.map(authorization).transpose()?,
            timeout,
        })
    }

    /// GETs `path` (under the URL's prefix) and parses the JSON body of a 200 answer; other
    /// answers are failures with their exit codes (401: [`exit::AUTHENTICATION`]).
    pub async fn get_json(&self, path: &str) -> Result<Value, Failure> {
        let url = format!("{}{path}", self.base);
        let (status, body) = tokio::time::timeout(self.timeout, self.get(path))
            .await
            .map_err(|_| fail(exit::UNREACHABLE, format!("admin {url}: timed out")))??;
        let text = String::from_utf8_lossy(&body);
        let text = text.trim();
        match status {
            StatusCode::OK => serde_json::from_slice(&body)
                .map_err(|e| fail(exit::FAILURE, format!("admin {url}: not JSON ({e})"))),
            StatusCode::UNAUTHORIZED => Err(fail(
                exit::AUTHENTICATION,
                format!("admin {url}: {}", self.unauthorized_reason()),
            )),
            StatusCode::NOT_FOUND => Err(fail(exit::NOT_FOUND, format!("admin {url}: {text}"))),
            StatusCode::BAD_REQUEST => Err(fail(exit::USAGE, format!("admin {url}: {text}"))),
            status => Err(fail(
                exit::FAILURE,
                format!("admin {url}: HTTP {status}: {text}"),
            )),
        }
    }

    /// What a 401 answer means, given whether a token was sent.
    fn unauthorized_reason(&self) -> &'static str {
        if self.authorization.is_some() {
            "the admin listener refused the token of --admin-token-file"
        } else {
            "the admin listener needs a token: --admin-token-file"
        }
    }

    /// One GET on a fresh connection: the answer's status and body (at most [`MAX_BODY`]).
    async fn get(&self, path: &str) -> Result<(StatusCode, Bytes), Failure> {
        let request = self.request(path)?;
        let tcp = TcpStream::connect((self.target.host.as_str(), self.target.port))
            .await
            .map_err(|e| fail(exit::UNREACHABLE, format!("admin {}: {e}", self.base)))?;
        match &self.tls {
            None => self.exchange(tcp, request).await,
            Some(tls) => {
                let stream = tls.connector.connect(tls.server_name.clone(), tcp).await;
                let stream = stream.map_err(|e| {
                    fail(
                        exit::AUTHENTICATION,
                        format!("admin {}: TLS handshake failed: {e}", self.base),
                    )
                })?;
                self.exchange(stream, request).await
            }
        }
    }

    /// The GET of `path`, with the token when there is one.
    fn request(&self, path: &str) -> Result<Request<Empty<Bytes>>, Failure> {
        let mut request = Request::get(format!("{}{path}", self.target.prefix))
            .header(header::HOST, self.target.authority.as_str())
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, "skiff-cli")
            .header(header::CONNECTION, "close");
        if let Some(authorization) = &self.authorization {
            request = request.header(header::AUTHORIZATION, authorization.clone());
        }
        request
            .body(Empty::new())
            .map_err(|e| Failure::usage(format!("admin {}{path}: {e}", self.base)))
    }

    /// Sends `request` over `io` with HTTP/1.1 and reads the answer.
    async fn exchange<S>(
        &self,
        io: S,
        request: Request<Empty<Bytes>>,
    ) -> Result<(StatusCode, Bytes), Failure>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| self.http_failure(&e))?;
        let exchange = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| self.http_failure(&e))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| self.body_failure(&*e))?;
            Ok((status, body.to_bytes()))
        };
        // The connection is driven alongside the exchange and ends by itself once the answer
        // is read; its error, if it fails first, says more than the exchange's.
        tokio::select! {
            answer = exchange => answer,
            Err(e) = connection => Err(self.http_failure(&e)),
        }
    }

    /// An HTTP exchange that failed. An answer that is not HTTP, to an `http://` URL, most
    /// likely came from a listener with TLS.
    fn http_failure(&self, error: &hyper::Error) -> Failure {
        let hint = if self.tls.is_none() && error.is_parse() {
            " (does the admin listener need https://?)"
        } else {
            ""
        };
        fail(exit::FAILURE, format!("admin {}: {error}{hint}", self.base))
    }

    /// A body that could not be read: too large, or cut off.
    fn body_failure(&self, error: &(dyn std::error::Error + 'static)) -> Failure {
        let reason = if error.is::<LengthLimitError>() {
            "the answer is larger than 64 MiB".to_string()
        } else {
            format!("reading the answer: {error}")
        };
        fail(exit::FAILURE, format!("admin {}: {reason}", self.base))
    }
}

fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// Where an `--admin` URL points.
#[derive(Debug)]
struct Target {
    /// Whether the URL is `https://`.
    https: bool,
    /// The host to connect to (an IPv6 address without its brackets).
    host: String,
    port: u16,
    /// The URL's host and port as written: the `Host` header.
    authority: String,
    /// The URL's path without a trailing slash; the admin routes are under it.
    prefix: String,
}

impl Target {
    fn parse(base: &str) -> Result<Target, Failure> {
        let usage = |reason: &str| Failure::usage(format!("--admin {base:?}: {reason}"));
        let url = if base.contains("://") {
            base.to_string()
        } else {
            format!("http://{base}")
        };
        let uri: Uri = url.parse().map_err(|_| usage("not a URL"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(usage("expected an http:// or https:// URL")),
        };
        let authority = uri.authority().ok_or_else(|| usage("no host"))?;
        if authority.host().is_empty() {
            return Err(usage("no host"));
        }
        if authority.as_str().contains('@') {
            return Err(usage("user information in the URL is not supported"));
        }
        if uri.query().is_some() {
            return Err(usage("a query in the URL is not supported"));
        }
        let port = match authority.port_u16() {
            Some(port) => port,
            // What follows the host is not a port number.
            None if authority.as_str() != authority.host() => return Err(usage("a bad port")),
            None if https => 443,
            None => 80,
        };
        Ok(Target {
            https,
            host: authority
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            authority: authority.as_str().to_string(),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }
}

/// The TLS set-up for an `https://` admin listener.
struct Tls {
    connector: TlsConnector,
    /// The name the listener's certificate must carry: the URL's host.
    server_name: ServerName<'static>,
}

impl Tls {
    /// A TLS client for `host` trusting the CA certificates of `ca_file`, or the system's.
    fn new(host: &str, ca_file: Option<&Path>) -> Result<Tls, Failure> {
        let server_name = ServerName::try_from(host.to_string()).map_err(|e| {
            Failure::usage(format!("--admin: {host:?} is not a TLS server name: {e}"))
        })?;
        let roots = match ca_file {
            Some(path) => read_roots(path)?,
            None => system_roots()?,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(exit::FAILURE, format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
        })
    }
}

/// The CA certificates of the PEM file `path` (at least one).
fn read_roots(path: &Path) -> Result<RootCertStore, Failure> {
    let usage =
        |reason: String| Failure::usage(format!("--admin-ca-file {}: {reason}", path.display()));
    let pem = std::fs::read(path).map_err(|e| usage(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        let certificate = certificate.map_err(|e| usage(format!("reading certificates: {e}")))?;
        roots
            .add(certificate)
            .map_err(|e| usage(format!("a CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(usage("no certificate in the file".into()));
    }
    Ok(roots)
}

/// The operating system's CA certificates (`SSL_CERT_FILE` and `SSL_CERT_DIR` override where
/// they are looked for).
fn system_roots() -> Result<RootCertStore, Failure> {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if roots.is_empty() {
        return Err(fail(
            exit::FAILURE,
            "no CA certificate found on this system: use --admin-ca-file",
        ));
    }
    Ok(roots)
}

/// The `Authorization` header for the token in `path`: the file's content less surrounding
/// whitespace, which must leave something. Messages name the file, never the token.
fn authorization(path: &Path) -> Result<HeaderValue, Failure> {
    let usage =
        |reason: String| Failure::usage(format!("--admin-token-file {}: {reason}", path.display()));
    let content = std::fs::read_to_string(path).map_err(|e| usage(e.to_string()))?;
    let token = content.trim();
    if token.is_empty() {
        return Err(usage("the file is empty".into()));
    }
    let mut value = HeaderValue::try_from(format!("Bearer {token}"))
        .map_err(|_| usage("the token has characters an HTTP header cannot carry".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(base: &str) -> Option<(bool, String, u16, String, String)> {
        let t = Target::parse(base).ok()?;
        Some((t.https, t.host, t.port, t.authority, t.prefix))
    }

    fn expected(
        https: bool,
        host: &str,
        port: u16,
        authority: &str,
        prefix: &str,
    ) -> Option<(bool, String, u16, String, String)> {
        Some((https, host.into(), port, authority.into(), prefix.into()))
    }

    #[test]
    fn admin_urls_name_what_to_connect_to_and_ask_for() {
        assert_eq!(
            target("http://127.0.0.1:9644"),
            expected(false, "127.0.0.1", 9644, "127.0.0.1:9644", "")
        );
        assert_eq!(
            target("localhost:1/x/"),
            expected(false, "localhost", 1, "localhost:1", "/x")
        );
        assert_eq!(target("http://h"), expected(false, "h", 80, "h", ""));
        assert_eq!(
            target("https://broker.example/admin/"),
            expected(true, "broker.example", 443, "broker.example", "/admin")
        );
        assert_eq!(
            target("https://[::1]:9644"),
            expected(true, "::1", 9644, "[::1]:9644", "")
        );
    }

    #[test]
    fn unusable_admin_urls_are_usage_errors() {
        for base in [
            "ftp://h",
            "http://",
            "https://user:secret@h",
            "http://h/clients?x=1",
            "http://h:port",
            "http://h:",
            "h:99999",
        ] {
            let failure = Target::parse(base).expect_err(base);
            assert_eq!(failure.code, exit::USAGE, "{base}");
        }
    }

    #[test]
    fn a_ca_file_needs_an_https_url() {
        let failure = AdminHttp::new(
            "http://127.0.0.1:9644",
            Some(Path::new("ca.pem")),
            None,
            Duration::from_secs(1),
        )
        .err()
        .expect("refused");
        assert_eq!(failure.code, exit::USAGE);
        assert!(
            failure.message.contains("--admin-ca-file"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn the_token_file_is_trimmed_and_never_quoted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, " s3cret\n").expect("write");
        let value = authorization(&file).expect("a header");
        assert_eq!(value.as_bytes(), b"Bearer s3cret");
        assert!(value.is_sensitive());

        for content in ["\n \n", "s3cret\u{7f}token"] {
            std::fs::write(&file, content).expect("write");
            let failure = authorization(&file).expect_err("refused");
            assert_eq!(failure.code, exit::USAGE);
            assert!(!failure.message.contains("s3cret"), "{}", failure.message);
        }
        let failure = authorization(&dir.path().join("missing")).expect_err("refused");
        assert!(
            failure.message.contains("--admin-token-file"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("ca.pem");
        std::fs::write(&file, "not a certificate\n").expect("write");
        let failure = read_roots(&file).expect_err("refused");
        assert_eq!(failure.code, exit::USAGE);
        assert!(
            failure.message.contains("no certificate"),
            "{}",
            failure.message
        );
    }
}
