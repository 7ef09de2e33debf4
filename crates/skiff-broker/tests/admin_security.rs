//! The admin HTTP listener's protection: TLS (`admin.ssl.*`) and a bearer token
//! (`admin.token.file`) that every page but `/health` asks for, both files re-read when they
//! change; and the refusal to start a listener other hosts can reach without both.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{TIMEOUT, TestBroker};
use skiff_broker::{BrokerConfig, ClientAuth, TlsProtocol, TlsSettings};
use skiff_testkit::certs::{TestCa, client_config, connect_tls, listener_files};
use tempfile::TempDir;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "s3cret-admin-token";

/// An HTTP/1.1 answer.
struct Answer {
    status: u16,
    /// The status line and headers, lowercased.
    head: String,
    body: String,
}

/// One GET over `stream`, with `Authorization: Bearer <token>` when a token is given; `None`
/// when no HTTP answer comes back.
async fn get(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    path: &str,
    token: Option<&str>,
) -> Option<Answer> {
    let authorization =
        token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    // A TLS stream closed without close_notify reads as an error after the answer.
    let _ = tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .expect("answer in time");
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    Some(Answer {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    })
}

/// A GET over TLS trusting `tls`'s CAs.
async fn https_get(
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    path: &str,
    token: Option<&str>,
) -> Answer {
    let stream = tokio::time::timeout(TIMEOUT, connect_tls(addr, Arc::clone(tls)))
        .await
        .expect("handshake in time")
        .expect("handshake");
    get(stream, path, token).await.expect("an HTTP answer")
}

/// A GET over plain TCP.
async fn http_get(addr: SocketAddr, path: &str, token: Option<&str>) -> Option<Answer> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    get(stream, path, token).await
}

/// The admin listener's TLS settings, with a server certificate of `ca` written in `dir`.
fn admin_tls(dir: &Path, ca: &TestCa) -> TlsSettings {
    let (keystore, _) = listener_files(dir, ca);
    TlsSettings {
        keystore,
        truststore: None,
        client_auth: ClientAuth::None,
        protocols: vec![TlsProtocol::V12, TlsProtocol::V13],
        cipher_suites: Vec::new(),
        principal_mapping_rules: "DEFAULT".into(),
    }
}

fn write_token(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("admin.token");
    std::fs::write(&path, format!("{token}\n")).expect("write token");
    path
}

/// A broker whose admin listener has TLS and the token [`TOKEN`], with the files it reads.
struct Protected {
    tb: TestBroker,
    admin: SocketAddr,
    /// A client configuration trusting the admin certificate's CA.
    tls: Arc<rustls::ClientConfig>,
    files: TempDir,
}

impl Protected {
    async fn start(listen: &str) -> Protected {
        let files = tempfile::tempdir().expect("tempdir");
        let ca = TestCa::new("admin CA");
        let tls = admin_tls(files.path(), &ca);
        let token = write_token(files.path(), TOKEN);
        let listen: SocketAddr = listen.parse().expect("addr");
        let tb = TestBroker::start_with(|config| {
            config.admin_listen = Some(listen);
            config.security.admin_tls = Some(tls);
            config.security.admin_token_file = Some(token);
            config.security.tls_reload_interval_ms = 20;
        })
        .await;
        let port = tb
            .running
            .as_ref()
            .and_then(|r| r.admin_addr)
            .expect("admin")
            .port();
        Protected {
            tb,
            admin: SocketAddr::from(([127, 0, 0, 1], port)),
            tls: client_config(&ca.pem, None),
            files,
        }
    }
}

/// Waits until `check` holds, polling; fails the test after [`TIMEOUT`].
async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn pages_need_the_token_over_tls_and_health_is_open() {
    let p = Protected::start("127.0.0.1:0").await;
    // A client that connects and never handshakes holds up no one.
    let _idle = TcpStream::connect(p.admin).await.expect("connect");

    let metrics = https_get(p.admin, &p.tls, "/metrics", Some(TOKEN)).await;
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    assert!(
        metrics.body.contains("skiff_connections_open"),
        "{}",
        metrics.body
    );
    let clients = https_get(p.admin, &p.tls, "/clients", Some(TOKEN)).await;
    assert_eq!(clients.status, 200, "{}", clients.body);

    for token in [None, Some("wrong"), Some("s3cret-admin-toke"), Some("")] {
        let refused = https_get(p.admin, &p.tls, "/metrics", token).await;
        assert_eq!(refused.status, 401, "token {token:?}");
        assert!(
            refused.head.contains("\r\nwww-authenticate: bearer"),
            "{}",
            refused.head
        );
        assert!(!refused.body.contains(TOKEN));
    }
    let ui = https_get(p.admin, &p.tls, "/ui/clients", None).await;
    assert_eq!(ui.status, 401);

    let health = https_get(p.admin, &p.tls, "/health", None).await;
    assert_eq!(health.status, 200);
    assert!(health.body.contains("\"status\":\"ok\""), "{}", health.body);

    // Plain HTTP on the TLS port gets no HTTP answer, even with the token.
    assert!(http_get(p.admin, "/health", None).await.is_none());
    assert!(http_get(p.admin, "/metrics", Some(TOKEN)).await.is_none());
    // And the listener goes on serving.
    let again = https_get(p.admin, &p.tls, "/metrics", Some(TOKEN)).await;
    assert_eq!(again.status, 200);
    p.tb.stop().await;
}

#[tokio::test]
async fn a_rewritten_token_file_takes_over_without_a_restart() {
    let p = Protected::start("127.0.0.1:0").await;
    let token_file = p.files.path().join("admin.token");

    // An emptied file (a rotation half done) leaves the token in force.
    std::fs::write(&token_file, "").expect("empty the token file");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let during = https_get(p.admin, &p.tls, "/metrics", Some(TOKEN)).await;
    assert_eq!(during.status, 200);

    write_token(p.files.path(), "rotated-token");
    eventually("the rotated token is accepted", || async {
        https_get(p.admin, &p.tls, "/metrics", Some("rotated-token"))
            .await
            .status
            == 200
    })
    .await;
    let old = https_get(p.admin, &p.tls, "/metrics", Some(TOKEN)).await;
    assert_eq!(old.status, 401);
    p.tb.stop().await;
}

#[tokio::test]
async fn changed_certificate_files_are_served_without_a_restart() {
    let p = Protected::start("127.0.0.1:0").await;
    let new_ca = TestCa::new("new admin CA");
    let new_only = client_config(&new_ca.pem, None);
    assert!(connect_tls(p.admin, Arc::clone(&new_only)).await.is_err());

    // Replaced in one rename, as a deployment tool would.
    let staged = p.files.path().join("staged.pem");
    new_ca.server().write_keystore(&staged);
    std::fs::rename(&staged, p.files.path().join("broker.pem")).expect("rename");
    eventually("the new certificate is served", || async {
        connect_tls(p.admin, Arc::clone(&new_only)).await.is_ok()
    })
    .await;
    let metrics = https_get(p.admin, &new_only, "/metrics", Some(TOKEN)).await;
    assert_eq!(metrics.status, 200);
    p.tb.stop().await;
}

/// Starts a broker with this admin listener; the error, if it does not start.
async fn start_admin(
    listen: &str,
    tls: Option<TlsSettings>,
    token_file: Option<PathBuf>,
) -> Result<(), String> {
    let data = tempfile::tempdir().expect("tempdir");
    let config = BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: data.path().to_path_buf(),
        admin_listen: Some(listen.parse().expect("addr")),
        security: skiff_broker::SecurityConfig {
            admin_tls: tls,
            admin_token_file: token_file,
            ..Default::default()
        },
        ..Default::default()
    };
    let running = skiff_broker::start(config)
        .await
        .map_err(|e| format!("{e:#}"))?;
    tokio::time::timeout(TIMEOUT, running.shutdown())
        .await
        .expect("shutdown in time")
        .expect("clean shutdown");
    Ok(())
}

#[tokio::test]
async fn off_loopback_the_listener_needs_tls_and_a_token() {
    let files = tempfile::tempdir().expect("tempdir");
    let tls = admin_tls(files.path(), &TestCa::new("admin CA"));
    let token = write_token(files.path(), TOKEN);

    let error = start_admin("0.0.0.0:0", None, None)
        .await
        .expect_err("refused");
    assert!(
        error.contains(
            "admin.listen 0.0.0.0:0 is not loopback: set admin.ssl.keystore.location and admin.token.file, or bind to 127.0.0.1"
        ),
        "{error}"
    );
    let error = start_admin("0.0.0.0:0", Some(tls.clone()), None)
        .await
        .expect_err("TLS alone is refused");
    assert!(
        error.contains("is not loopback: set admin.token.file, or"),
        "{error}"
    );
    let error = start_admin("0.0.0.0:0", None, Some(token.clone()))
        .await
        .expect_err("a token alone is refused");
    assert!(
        error.contains("is not loopback: set admin.ssl.keystore.location, or"),
        "{error}"
    );
    start_admin("0.0.0.0:0", Some(tls), Some(token))
        .await
        .expect("TLS and a token are enough");
}

#[tokio::test]
async fn off_loopback_with_tls_and_a_token_pages_are_served() {
    let p = Protected::start("0.0.0.0:0").await;
    let metrics = https_get(p.admin, &p.tls, "/metrics", Some(TOKEN)).await;
    assert_eq!(metrics.status, 200);
    let refused = https_get(p.admin, &p.tls, "/metrics", None).await;
    assert_eq!(refused.status, 401);
    p.tb.stop().await;
}

#[tokio::test]
async fn on_loopback_a_token_or_tls_alone_is_allowed() {
    let files = tempfile::tempdir().expect("tempdir");
    let token = write_token(files.path(), TOKEN);
    let tb = TestBroker::start_with(|config| {
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
        config.security.admin_token_file = Some(token);
    })
    .await;
    let admin = tb
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin");
    let refused = http_get(admin, "/metrics", None).await.expect("answer");
    assert_eq!(refused.status, 401);
    let served = http_get(admin, "/metrics", Some(TOKEN))
        .await
        .expect("answer");
    assert_eq!(served.status, 200);
    tb.stop().await;

    let ca = TestCa::new("admin CA");
    let tls = admin_tls(files.path(), &ca);
    let tb = TestBroker::start_with(|config| {
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
        config.security.admin_tls = Some(tls);
    })
    .await;
    let admin = tb
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin");
    let served = https_get(admin, &client_config(&ca.pem, None), "/metrics", None).await;
    assert_eq!(served.status, 200);
    tb.stop().await;
}

#[tokio::test]
async fn an_empty_or_missing_token_file_is_refused_at_start() {
    let files = tempfile::tempdir().expect("tempdir");
    let empty = write_token(files.path(), "  ");
    let error = start_admin("127.0.0.1:0", None, Some(empty))
        .await
        .expect_err("empty token file");
    assert!(
        error.contains("admin.token.file") && error.contains("is empty"),
        "{error}"
    );
    let missing = files.path().join("absent");
    let error = start_admin("127.0.0.1:0", None, Some(missing))
        .await
        .expect_err("missing token file");
    assert!(error.contains("admin.token.file: reading"), "{error}");
}
