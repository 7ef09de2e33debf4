//! TLS listeners: Kafka requests over TLS, client certificates (`ssl.client.auth`) and the
//! principal their subject maps to, clients the listener must refuse (plaintext, garbage,
//! untrusted or missing certificates, a disabled TLS version), and certificates reloaded from
//! changed files without a restart, and large requests that arrive in many TLS records.

mod common;

use std::path::Path;

use common::{Client, TIMEOUT, TestBroker, http_get};
use skiff_broker::{ClientAuth, ListenerConfig, SecurityProtocol, TlsProtocol, TlsSettings};
use skiff_protocol::Response;
use skiff_protocol::generated::{ApiVersionsRequest, MetadataRequest};
use skiff_testkit::certs::{TestCa, client_config, connect_tls, listener_files};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn tls_listener(dir: &Path, ca: &TestCa, client_auth: ClientAuth) -> ListenerConfig {
    let (keystore, truststore) = listener_files(dir, ca);
    ListenerConfig {
        protocol: SecurityProtocol::Ssl,
        tls: Some(TlsSettings {
            keystore,
            truststore: Some(truststore),
            client_auth,
            protocols: vec![TlsProtocol::V12, TlsProtocol::V13],
            cipher_suites: Vec::new(),
            principal_mapping_rules: "RULE:^CN=([^,]+),O=Acme$/$1/L,DEFAULT".into(),
        }),
        ..ListenerConfig::plaintext("SSL", "127.0.0.1:0".parse().expect("addr"), None)
    }
}

async fn start(client_auth: ClientAuth) -> (TestBroker, TestCa) {
    let ca = TestCa::new("skiff test CA");
    let certs = tempfile::tempdir().expect("tempdir");
    let listener = tls_listener(certs.path(), &ca, client_auth);
    let tb = TestBroker::start_with(|config| {
        config.listeners = vec![listener];
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
        config.security.tls_reload_interval_ms = 20;
    })
    .await;
    // The broker read the files at start; the reload test writes its own.
    std::mem::forget(certs);
    (tb, ca)
}

async fn tls_client(tb: &TestBroker, config: std::sync::Arc<rustls::ClientConfig>) -> Client {
    let stream = tokio::time::timeout(TIMEOUT, connect_tls(tb.addr, config))
        .await
        .expect("handshake in time")
        .expect("handshake");
    let (read, write) = tokio::io::split(stream);
    Client::over(read, write)
}

/// The principal and listener the admin endpoint's client view shows for the open connections.
async fn principals(tb: &TestBroker) -> Vec<(String, Option<String>)> {
    let admin = tb
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin");
    let (status, body) = http_get(admin, "/clients").await;
    assert_eq!(status, 200, "{body}");
    let views: serde_json::Value = serde_json::from_str(&body).expect("json");
    let mut out = Vec::new();
    for view in views.as_array().expect("array") {
        for c in view["connections"].as_array().expect("connections") {
            out.push((
                c["listener"].as_str().expect("listener").to_string(),
                c["principal"].as_str().map(str::to_string),
            ));
        }
    }
    out
}

/// Whether the broker hangs up on a handshake: the client sees an error or end of stream.
async fn refused(tb: &TestBroker, config: std::sync::Arc<rustls::ClientConfig>) -> bool {
    let Ok(stream) = tokio::time::timeout(TIMEOUT, connect_tls(tb.addr, config))
        .await
        .expect("in time")
    else {
        return true;
    };
    // TLS 1.3: the server checks the client certificate after the client's handshake ends, so
    // the refusal arrives on the first read.
    let (read, write) = tokio::io::split(stream);
    let mut client = Client::over(read, write);
    let request = skiff_protocol::Request::ApiVersions(ApiVersionsRequest::default());
    client.send(&request, 3).await;
    client.read_frame().await.is_none()
}

#[tokio::test]
async fn kafka_requests_are_served_over_tls_and_the_metadata_names_this_listener() {
    let (tb, ca) = start(ClientAuth::None).await;
    let mut c = tls_client(&tb, client_config(&ca.pem, None)).await;
    match c.call(ApiVersionsRequest::default(), 3).await {
        Response::ApiVersions(r) => assert_eq!(r.error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    match c.call(MetadataRequest::default(), 12).await {
        Response::Metadata(m) => {
            assert_eq!(m.brokers[0].port, i32::from(tb.addr.port()));
        }
        other => panic!("unexpected {other:?}"),
    }
    // No client certificate on an SSL listener: Kafka's User:ANONYMOUS.
    assert_eq!(
        principals(&tb).await,
        vec![("SSL".to_string(), Some("User:ANONYMOUS".to_string()))]
    );
}

#[tokio::test]
async fn a_client_certificate_is_required_and_its_subject_maps_to_the_principal() {
    let (tb, ca) = start(ClientAuth::Required).await;
    // No certificate, and one from another CA: refused.
    assert!(refused(&tb, client_config(&ca.pem, None)).await);
    let stranger = TestCa::new("another CA").client(&[("O", "Acme"), ("CN", "Mallory")]);
    assert!(refused(&tb, client_config(&ca.pem, Some(&stranger))).await);

    // `RULE:^CN=([^,]+),O=Acme$/$1/L` maps CN=Alice,O=Acme to alice; other subjects fall through
    // to DEFAULT, the whole DN.
    let alice = ca.client(&[("O", "Acme"), ("CN", "Alice")]);
    let mut a = tls_client(&tb, client_config(&ca.pem, Some(&alice))).await;
    let bob = ca.client(&[("O", "Other"), ("OU", "ops"), ("CN", "bob")]);
    let mut b = tls_client(&tb, client_config(&ca.pem, Some(&bob))).await;
    for c in [&mut a, &mut b] {
        match c.call(ApiVersionsRequest::default(), 3).await {
            Response::ApiVersions(r) => assert_eq!(r.error_code, 0),
            other => panic!("unexpected {other:?}"),
        }
    }
    let mut seen = principals(&tb).await;
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (
                "SSL".to_string(),
                Some("User:CN=bob,OU=ops,O=Other".to_string())
            ),
            ("SSL".to_string(), Some("User:alice".to_string())),
        ]
    );
}

#[tokio::test]
async fn a_requested_certificate_may_be_absent() {
    let (tb, ca) = start(ClientAuth::Requested).await;
    let mut c = tls_client(&tb, client_config(&ca.pem, None)).await;
    match c.call(ApiVersionsRequest::default(), 3).await {
        Response::ApiVersions(r) => assert_eq!(r.error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        principals(&tb).await,
        vec![("SSL".to_string(), Some("User:ANONYMOUS".to_string()))]
    );
}

#[tokio::test]
async fn plaintext_and_garbage_on_a_tls_port_are_closed_and_the_broker_keeps_serving() {
    let (tb, ca) = start(ClientAuth::None).await;
    // A Kafka client speaking plaintext to the TLS port: its ApiVersions is not a ClientHello.
    let mut plain = Client::connect(tb.addr).await;
    let request = skiff_protocol::Request::ApiVersions(ApiVersionsRequest::default());
    plain.send(&request, 3).await;
    assert!(plain.is_closed().await);
    // A record header announcing a huge ClientHello, then garbage.
    let mut raw = tokio::net::TcpStream::connect(tb.addr)
        .await
        .expect("connect");
    raw.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 0x01, 0xff, 0xff, 0xff])
        .await
        .expect("write");
    raw.write_all(&[0xAB; 512]).await.expect("write");
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(TIMEOUT, raw.read_to_end(&mut rest))
        .await
        .expect("closed in time");

    let mut c = tls_client(&tb, client_config(&ca.pem, None)).await;
    match c.call(ApiVersionsRequest::default(), 3).await {
        Response::ApiVersions(r) => assert_eq!(r.error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    let admin = tb
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin");
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert!(
        metrics.contains("skiff_tls_handshake_failures_total 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_disabled_tls_version_is_refused() {
    let ca = TestCa::new("skiff test CA");
    let certs = tempfile::tempdir().expect("tempdir");
    let mut listener = tls_listener(certs.path(), &ca, ClientAuth::None);
    if let Some(tls) = listener.tls.as_mut() {
        tls.protocols = vec![TlsProtocol::V13];
    }
    let tb = TestBroker::start_with(|config| config.listeners = vec![listener]).await;
    let tls12_only = {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
            roots.add(cert.expect("pem")).expect("add");
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        std::sync::Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_protocol_versions(&[&rustls::version::TLS12])
                .expect("versions")
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    };
    assert!(refused(&tb, tls12_only).await);
    let mut c = tls_client(&tb, client_config(&ca.pem, None)).await;
    match c.call(ApiVersionsRequest::default(), 3).await {
        Response::ApiVersions(r) => assert_eq!(r.error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn changed_certificate_files_are_loaded_without_a_restart() {
    let old_ca = TestCa::new("old CA");
    let certs = tempfile::tempdir().expect("tempdir");
    let listener = tls_listener(certs.path(), &old_ca, ClientAuth::None);
    let keystore = listener.tls.as_ref().expect("tls").keystore.clone();
    let tb = TestBroker::start_with(|config| {
        config.listeners = vec![listener];
        config.security.tls_reload_interval_ms = 20;
    })
    .await;
    let new_ca = TestCa::new("new CA");
    let old_only = client_config(&old_ca.pem, None);
    let new_only = client_config(&new_ca.pem, None);
    assert!(connect_tls(tb.addr, old_only.clone()).await.is_ok());
    assert!(connect_tls(tb.addr, new_only.clone()).await.is_err());

    // A half-written file is not taken: the old certificate stays in force.
    std::fs::write(&keystore, "-----BEGIN PRIVATE KEY-----\ngarbage\n").expect("write");
    // Then the new key and certificate, replaced in one rename as a deployment tool would.
    let staged = certs.path().join("staged.pem");
    new_ca.server().write_keystore(&staged);
    std::fs::rename(&staged, &keystore).expect("rename");
    let mut attempts = 0;
    while connect_tls(tb.addr, new_only.clone()).await.is_err() {
        attempts += 1;
        assert!(attempts < 1000, "the new certificate was never served");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(connect_tls(tb.addr, old_only).await.is_err());
}

/// Answers of many sizes to a client that reads late (a small receive buffer, a pause before
/// reading) arrive whole over TLS. A TLS stream keeps the records it sealed while the socket
/// would block until it is flushed, and the broker once did not flush: an answer whose last
/// records were left that way never arrived. That hang depended on timing (raw_load showed it
/// with 4 connections x 8 requests in flight over SASL_SSL) and this test does not reliably
/// provoke it; it checks the path the fix runs through.
#[tokio::test]
async fn answers_to_a_reader_that_reads_late_arrive_whole_over_tls() {
    let (tb, ca) = start(ClientAuth::None).await;
    let mut c = tls_client(&tb, client_config(&ca.pem, None)).await;
    common::create_topic(&mut c, "sizes").await;
    let sizes: Vec<usize> = (1..=40).map(|i| i * 24 * 1024).collect();
    for size in &sizes {
        let value = vec![7u8; *size];
        let request = common::produce_request("sizes", 0, 1, common::batch(&[&value]));
        match c.call(request, 9).await {
            Response::Produce(r) => {
                assert_eq!(r.responses[0].partition_responses[0].error_code, 0)
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // (fetch offset, the fetch's byte limits, more record bytes than this must come back): one
    // record per answer, then one answer of several megabytes, more than the TLS records the
    // broker seals ahead of the socket (1 MiB).
    let mut cases: Vec<(i64, i32, usize)> = sizes
        .iter()
        .enumerate()
        .map(|(offset, size)| (offset as i64, 1, *size))
        .collect();
    cases.push((0, 4 << 20, 3 << 20));
    for (offset, max_bytes, size) in &cases {
        // A fresh connection whose receive buffer is small, so the broker's socket fills.
        let tcp = tokio::net::TcpSocket::new_v4().expect("socket");
        tcp.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        let tcp = tcp.connect(tb.addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let stream = tokio_rustls::TlsConnector::from(client_config(&ca.pem, None))
            .connect(name, tcp)
            .await
            .expect("handshake");
        let (read, write) = tokio::io::split(stream);
        let mut slow = Client::over(read, write);
        let mut fetch = common::fetch_request("sizes", skiff_protocol::Uuid::ZERO, *offset, 0, 0);
        fetch.max_bytes = *max_bytes;
        fetch.topics[0].partitions[0].partition_max_bytes = *max_bytes;
        let request = skiff_protocol::Request::Fetch(fetch);
        let id = slow.send(&request, 12).await;
        // Nothing to wait for: the broker writes until its socket is full, then waits.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        match slow.receive(skiff_protocol::ApiKey::Fetch, 12, id).await {
            Response::Fetch(r) => {
                let got = r.responses[0].partitions[0]
                    .records
                    .as_ref()
                    .map_or(0, |b| b.len());
                assert!(
                    got > *size,
                    "{got} bytes of records from offset {offset}, more than {size} expected"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A large produce request sent the way TLS clients send it, as many records with pauses in
/// between, is read whole by the broker (which gathers such pieces instead of reading each alone,
/// its socket out of the runtime's poller meanwhile) and its records come back intact.
#[tokio::test]
async fn a_large_request_sent_in_pieces_over_tls_is_read_whole() {
    let (tb, ca) = start(ClientAuth::None).await;
    let mut c = tls_client(&tb, client_config(&ca.pem, None)).await;
    let id = common::create_topic(&mut c, "pieces").await;
    let value: Vec<u8> = (0..900 * 1024).map(|i| (i % 251) as u8).collect();
    let request = skiff_protocol::Request::Produce(common::produce_request(
        "pieces",
        0,
        1,
        common::batch(&[&value]),
    ));
    let frame = skiff_protocol::header::encode_request_frame(&request, 9, 77, Some("t"), None)
        .expect("encode");
    for (i, piece) in frame.chunks(16 * 1024).enumerate() {
        c.send_raw(piece).await;
        tokio::task::yield_now().await;
        if i % 8 == 7 {
            // A client's pace: the broker's reader pauses, its socket leaves the poller, and
            // the pause brings nothing, so the reader must be woken by the next piece.
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        }
    }
    match c.receive(skiff_protocol::ApiKey::Produce, 9, 77).await {
        Response::Produce(r) => assert_eq!(r.responses[0].partition_responses[0].error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    let mut fetch = common::fetch_request("pieces", id, 0, 0, 0);
    fetch.topics[0].partitions[0].partition_max_bytes = 2 * 1024 * 1024;
    fetch.max_bytes = 2 * 1024 * 1024;
    match c.call(fetch, 12).await {
        Response::Fetch(r) => {
            let records = r.responses[0].partitions[0]
                .records
                .clone()
                .unwrap_or_default();
            let batch = skiff_records::RecordBatches::new(records)
                .next()
                .expect("a batch")
                .expect("a valid batch");
            let record = batch
                .records()
                .expect("records")
                .next()
                .expect("a record")
                .expect("valid");
            assert_eq!(record.value.as_deref(), Some(&value[..]));
        }
        other => panic!("unexpected {other:?}"),
    }
}
