//! SASL listeners (SaslHandshake v0-1, SaslAuthenticate v0-2) with PLAIN and SCRAM against the
//! credential store that AlterUserScramCredentials fills, and what must close a connection:
//! requests before authentication, unknown mechanisms, wrong passwords (after
//! `connection.failed.authentication.delay.ms`), oversized and truncated tokens, expired sessions
//! (KIP-368) and re-authentication as someone else.

mod common;

use std::time::{Duration, Instant};

use common::sasl::{authenticate, handshake, scram_login};
use common::{Client, TestBroker, http_get};
use skiff_auth::scram::{ClientExchange, ScramMechanism};
use skiff_broker::{
    ClientAuth, ListenerConfig, SaslMechanism, SecurityProtocol, TlsProtocol, TlsSettings,
};
use skiff_protocol::Response;
use skiff_protocol::generated::alter_user_scram_credentials_request::{
    AlterUserScramCredentialsRequest, ScramCredentialDeletion, ScramCredentialUpsertion,
};
use skiff_protocol::generated::describe_user_scram_credentials_request::{
    DescribeUserScramCredentialsRequest, UserName,
};
use skiff_protocol::generated::{ApiVersionsRequest, MetadataRequest, SaslAuthenticateRequest};
use skiff_protocol::{ApiKey, Request, error_codes};
use skiff_testkit::certs::{TestCa, client_config, connect_tls, listener_files};

const DELAY_MS: u64 = 150;

/// A broker with a PLAINTEXT listener (first) and a SASL_PLAINTEXT one serving every mechanism.
async fn start(max_reauth_ms: i64) -> TestBroker {
    TestBroker::start_with(|config| {
        config.listeners = vec![
            ListenerConfig::plaintext("PLAIN", "127.0.0.1:0".parse().expect("addr"), None),
            ListenerConfig {
                protocol: SecurityProtocol::SaslPlaintext,
                sasl_mechanisms: vec![
                    SaslMechanism::Plain,
                    SaslMechanism::ScramSha256,
                    SaslMechanism::ScramSha512,
                ],
                ..ListenerConfig::plaintext("SASL", "127.0.0.1:0".parse().expect("addr"), None)
            },
        ];
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
        config.security.failed_authentication_delay_ms = DELAY_MS;
        config.security.max_reauth_ms = max_reauth_ms;
    })
    .await
}

fn sasl_addr(tb: &TestBroker) -> std::net::SocketAddr {
    tb.running.as_ref().expect("running").listener_addrs[1].1
}

fn upsertion(user: &str, mechanism: ScramMechanism, password: &str) -> ScramCredentialUpsertion {
    let salt = format!("salt-of-{user}").into_bytes();
    let salted = skiff_auth::scram::salted_password(mechanism, password.as_bytes(), &salt, 4096)
        .expect("salted password");
    ScramCredentialUpsertion {
        name: user.into(),
        mechanism: mechanism.code(),
        iterations: 4096,
        salt: salt.into(),
        salted_password: salted.into(),
        ..Default::default()
    }
}

/// Sets credentials over the PLAINTEXT listener; every result must be NONE.
async fn add_users(tb: &TestBroker, users: &[(&str, ScramMechanism, &str)]) {
    let mut admin = Client::connect(tb.addr).await;
    let request = AlterUserScramCredentialsRequest {
        upsertions: users.iter().map(|(u, m, p)| upsertion(u, *m, p)).collect(),
        ..Default::default()
    };
    match admin.call(request, 0).await {
        Response::AlterUserScramCredentials(r) => {
            for result in r.results {
                assert_eq!(result.error_code, 0, "{result:?}");
            }
        }
        other => panic!("unexpected {other:?}"),
    }
}

async fn metadata_ok(c: &mut Client) {
    match c.call(MetadataRequest::default(), 12).await {
        Response::Metadata(m) => assert_eq!(m.brokers.len(), 1),
        other => panic!("unexpected {other:?}"),
    }
}

async fn principals(tb: &TestBroker) -> Vec<Option<String>> {
    let admin = tb
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin");
    let (_, body) = http_get(admin, "/clients").await;
    let views: serde_json::Value = serde_json::from_str(&body).expect("json");
    let mut out: Vec<Option<String>> = views
        .as_array()
        .expect("array")
        .iter()
        .flat_map(|v| v["connections"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["listener"] == "SASL")
        .map(|c| c["principal"].as_str().map(str::to_string))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn scram_and_plain_logins_then_requests_as_the_user() {
    let tb = start(0).await;
    add_users(
        &tb,
        &[
            ("alice", ScramMechanism::Sha512, "alice-secret"),
            ("bob", ScramMechanism::Sha256, "bob-secret"),
        ],
    )
    .await;

    let mut a = Client::connect(sasl_addr(&tb)).await;
    // ApiVersions is served before authentication, and lists the SASL APIs.
    match a.call(ApiVersionsRequest::default(), 3).await {
        Response::ApiVersions(r) => {
            let keys: Vec<i16> = r.api_keys.iter().map(|k| k.api_key).collect();
            assert!(keys.contains(&ApiKey::SaslHandshake.key()));
            assert!(keys.contains(&ApiKey::SaslAuthenticate.key()));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        scram_login(&mut a, ScramMechanism::Sha512, "alice", "alice-secret").await,
        (0, 0)
    );
    metadata_ok(&mut a).await;

    let mut b = Client::connect(sasl_addr(&tb)).await;
    assert_eq!(
        scram_login(&mut b, ScramMechanism::Sha256, "bob", "bob-secret")
            .await
            .0,
        0
    );
    metadata_ok(&mut b).await;

    // PLAIN checks the password against the SCRAM credential.
    let mut p = Client::connect(sasl_addr(&tb)).await;
    assert_eq!(handshake(&mut p, "PLAIN", 1).await.0, 0);
    let token = skiff_auth::plain::client_message("alice", b"alice-secret");
    assert_eq!(authenticate(&mut p, token, 1).await.0, 0);
    metadata_ok(&mut p).await;

    assert_eq!(
        principals(&tb).await,
        vec![
            Some("User:alice".to_string()),
            Some("User:alice".to_string()),
            Some("User:bob".to_string()),
        ]
    );
}

#[tokio::test]
async fn a_wrong_password_fails_after_the_delay_and_closes() {
    let tb = start(0).await;
    add_users(&tb, &[("alice", ScramMechanism::Sha512, "right")]).await;
    for (mechanism, user) in [
        (ScramMechanism::Sha512, "alice"),
        (ScramMechanism::Sha512, "nobody"),
        // alice has no SCRAM-SHA-256 credential.
        (ScramMechanism::Sha256, "alice"),
    ] {
        let mut c = Client::connect(sasl_addr(&tb)).await;
        let started = Instant::now();
        let (code, _) = scram_login(&mut c, mechanism, user, "wrong").await;
        assert_eq!(code, error_codes::SASL_AUTHENTICATION_FAILED, "{user}");
        assert!(started.elapsed() >= Duration::from_millis(DELAY_MS));
        assert!(c.is_closed().await);
    }
    let mut c = Client::connect(sasl_addr(&tb)).await;
    assert_eq!(handshake(&mut c, "PLAIN", 1).await.0, 0);
    let request = SaslAuthenticateRequest {
        auth_bytes: skiff_auth::plain::client_message("alice", b"wrong").into(),
        ..Default::default()
    };
    match c.call(request, 2).await {
        Response::SaslAuthenticate(r) => {
            assert_eq!(r.error_code, error_codes::SASL_AUTHENTICATION_FAILED);
            let message = r.error_message.expect("a message").to_string();
            assert!(message.contains("invalid credentials"), "{message}");
            assert!(!message.contains("wrong"), "the password leaked: {message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(c.is_closed().await);
    let admin = tb
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin");
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert!(
        metrics.contains("skiff_sasl_authentications_total{result=\"failed\"} 4"),
        "{metrics}"
    );
}

#[tokio::test]
async fn requests_before_authentication_and_bad_exchanges_close_the_connection() {
    let tb = start(0).await;
    add_users(&tb, &[("alice", ScramMechanism::Sha512, "pw")]).await;
    let addr = sasl_addr(&tb);

    // Metadata before authentication.
    let mut c = Client::connect(addr).await;
    c.send(&Request::Metadata(MetadataRequest::default()), 12)
        .await;
    assert!(c.is_closed().await);

    // An unknown or disabled mechanism: the enabled ones are listed, then the connection closes.
    let mut c = Client::connect(addr).await;
    let (code, mechanisms) = handshake(&mut c, "GSSAPI", 1).await;
    assert_eq!(code, error_codes::UNSUPPORTED_SASL_MECHANISM);
    assert_eq!(mechanisms, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
    assert!(c.is_closed().await);

    // SaslAuthenticate without a handshake.
    let mut c = Client::connect(addr).await;
    let (code, _, _) = authenticate(&mut c, b"n,,n=alice,r=abc".to_vec(), 1).await;
    assert_eq!(code, error_codes::SASL_AUTHENTICATION_FAILED);
    assert!(c.is_closed().await);

    // Truncated and garbage SCRAM messages: a clear failure, never a panic.
    for token in [
        &b"n,,n=alice"[..],
        b"n,,",
        b"",
        b"\xff\xfe",
        b"p=tls-unique,,n=alice,r=x",
    ] {
        let mut c = Client::connect(addr).await;
        assert_eq!(handshake(&mut c, "SCRAM-SHA-512", 1).await.0, 0);
        let (code, _, _) = authenticate(&mut c, token.to_vec(), 1).await;
        assert_eq!(code, error_codes::SASL_AUTHENTICATION_FAILED, "{token:?}");
        assert!(c.is_closed().await);
    }

    // A frame far larger than a SASL token (512 KiB before authentication).
    let mut c = Client::connect(addr).await;
    c.send_raw(&(64 * 1024 * 1024i32).to_be_bytes()).await;
    assert!(c.is_closed().await);

    // The broker still serves.
    let mut c = Client::connect(addr).await;
    assert_eq!(
        scram_login(&mut c, ScramMechanism::Sha512, "alice", "pw")
            .await
            .0,
        0
    );
}

#[tokio::test]
async fn sasl_requests_on_a_plaintext_listener_are_illegal_sasl_state() {
    let tb = start(0).await;
    let mut c = Client::connect(tb.addr).await;
    assert_eq!(
        handshake(&mut c, "PLAIN", 1).await.0,
        error_codes::ILLEGAL_SASL_STATE
    );
    let (code, _, _) = authenticate(&mut c, b"x".to_vec(), 1).await;
    assert_eq!(code, error_codes::ILLEGAL_SASL_STATE);
    metadata_ok(&mut c).await;
}

#[tokio::test]
async fn a_v0_handshake_takes_bare_tokens() {
    let tb = start(0).await;
    add_users(&tb, &[("alice", ScramMechanism::Sha256, "pw")]).await;
    let mut c = Client::connect(sasl_addr(&tb)).await;
    assert_eq!(handshake(&mut c, "SCRAM-SHA-256", 0).await.0, 0);
    let (mut exchange, first) =
        ClientExchange::new(ScramMechanism::Sha256, "alice", b"pw", "abcdefgh");
    let bare = |token: &[u8]| {
        let mut frame = (token.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(token);
        frame
    };
    c.send_raw(&bare(&first)).await;
    let server_first = c.read_frame().await.expect("server-first");
    let last = exchange.server_first(&server_first).expect("client-final");
    c.send_raw(&bare(&last)).await;
    let server_final = c.read_frame().await.expect("server-final");
    exchange.server_final(&server_final).expect("verified");
    metadata_ok(&mut c).await;

    // A wrong password over bare tokens: the connection closes without an answer.
    let mut c = Client::connect(sasl_addr(&tb)).await;
    assert_eq!(handshake(&mut c, "PLAIN", 0).await.0, 0);
    c.send_raw(&bare(&skiff_auth::plain::client_message("alice", b"nope")))
        .await;
    assert!(c.is_closed().await);
}

#[tokio::test]
async fn sessions_end_unless_the_same_principal_reauthenticates() {
    let tb = start(1_000).await;
    add_users(
        &tb,
        &[
            ("alice", ScramMechanism::Sha512, "a"),
            ("bob", ScramMechanism::Sha512, "b"),
        ],
    )
    .await;
    let addr = sasl_addr(&tb);

    // The lifetime is told to SaslAuthenticate v1+ clients; re-authenticating renews it.
    let mut c = Client::connect(addr).await;
    let (code, lifetime) = scram_login(&mut c, ScramMechanism::Sha512, "alice", "a").await;
    assert_eq!(code, 0);
    assert!(lifetime > 0 && lifetime <= 1_000, "{lifetime}");
    assert_eq!(
        scram_login(&mut c, ScramMechanism::Sha512, "alice", "a")
            .await
            .0,
        0
    );
    metadata_ok(&mut c).await;

    // Re-authenticating as someone else fails and closes.
    let mut c = Client::connect(addr).await;
    assert_eq!(
        scram_login(&mut c, ScramMechanism::Sha512, "alice", "a")
            .await
            .0,
        0
    );
    assert_eq!(
        scram_login(&mut c, ScramMechanism::Sha512, "bob", "b")
            .await
            .0,
        error_codes::SASL_AUTHENTICATION_FAILED
    );
    assert!(c.is_closed().await);

    // A request after the session ended closes the connection.
    let mut c = Client::connect(addr).await;
    let started = Instant::now();
    assert_eq!(
        scram_login(&mut c, ScramMechanism::Sha512, "alice", "a")
            .await
            .0,
        0
    );
    tokio::time::sleep(
        Duration::from_millis(1_000).saturating_sub(started.elapsed()) + Duration::from_millis(50),
    )
    .await;
    c.send(&Request::Metadata(MetadataRequest::default()), 12)
        .await;
    assert!(c.is_closed().await);
}

#[tokio::test]
async fn scram_credentials_are_described_altered_and_kept_across_restarts() {
    let tb = start(0).await;
    add_users(
        &tb,
        &[
            ("alice", ScramMechanism::Sha512, "a"),
            ("bob", ScramMechanism::Sha256, "b"),
        ],
    )
    .await;
    let mut admin = Client::connect(tb.addr).await;
    // A user changed twice, a deletion of a credential that does not exist, too few
    // iterations, an unknown mechanism, an empty name.
    let mut few = upsertion("dave", ScramMechanism::Sha256, "d");
    few.iterations = 1000;
    let mut unknown = upsertion("erin", ScramMechanism::Sha256, "e");
    unknown.mechanism = 9;
    let request = AlterUserScramCredentialsRequest {
        deletions: vec![
            ScramCredentialDeletion {
                name: "bob".into(),
                mechanism: ScramMechanism::Sha512.code(),
                ..Default::default()
            },
            ScramCredentialDeletion {
                name: "alice".into(),
                mechanism: ScramMechanism::Sha512.code(),
                ..Default::default()
            },
        ],
        upsertions: vec![
            upsertion("alice", ScramMechanism::Sha256, "x"),
            upsertion("carol", ScramMechanism::Sha512, "c"),
            few,
            unknown,
            upsertion("", ScramMechanism::Sha256, "x"),
        ],
        ..Default::default()
    };
    let mut results: Vec<(String, i16)> = match admin.call(request, 0).await {
        Response::AlterUserScramCredentials(r) => r
            .results
            .into_iter()
            .map(|r| (r.user.to_string(), r.error_code))
            .collect(),
        other => panic!("unexpected {other:?}"),
    };
    results.sort();
    assert_eq!(
        results,
        vec![
            (String::new(), error_codes::UNACCEPTABLE_CREDENTIAL),
            ("alice".into(), error_codes::DUPLICATE_RESOURCE),
            ("bob".into(), error_codes::RESOURCE_NOT_FOUND),
            ("carol".into(), error_codes::NONE),
            ("dave".into(), error_codes::UNACCEPTABLE_CREDENTIAL),
            ("erin".into(), error_codes::UNSUPPORTED_SASL_MECHANISM),
        ]
    );

    let tb = tb
        .restart_with(|config| {
            config.listeners = vec![
                ListenerConfig::plaintext("PLAIN", "127.0.0.1:0".parse().expect("addr"), None),
                ListenerConfig {
                    protocol: SecurityProtocol::SaslPlaintext,
                    sasl_mechanisms: vec![SaslMechanism::ScramSha512],
                    ..ListenerConfig::plaintext("SASL", "127.0.0.1:0".parse().expect("addr"), None)
                },
            ];
        })
        .await;
    let mut admin = Client::connect(tb.addr).await;
    let describe = |users: Option<Vec<&str>>| DescribeUserScramCredentialsRequest {
        users: users.map(|u| {
            u.into_iter()
                .map(|name| UserName {
                    name: name.into(),
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    };
    match admin.call(describe(None), 0).await {
        Response::DescribeUserScramCredentials(r) => {
            let users: Vec<(String, Vec<(i8, i32)>)> = r
                .results
                .iter()
                .map(|u| {
                    (
                        u.user.to_string(),
                        u.credential_infos
                            .iter()
                            .map(|c| (c.mechanism, c.iterations))
                            .collect(),
                    )
                })
                .collect();
            assert_eq!(
                users,
                vec![
                    ("alice".into(), vec![(2, 4096)]),
                    ("bob".into(), vec![(1, 4096)]),
                    ("carol".into(), vec![(2, 4096)]),
                ]
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    match admin
        .call(describe(Some(vec!["bob", "zed", "bob"])), 0)
        .await
    {
        Response::DescribeUserScramCredentials(r) => {
            let codes: Vec<(String, i16)> = r
                .results
                .iter()
                .map(|u| (u.user.to_string(), u.error_code))
                .collect();
            assert_eq!(
                codes,
                vec![
                    ("bob".into(), error_codes::DUPLICATE_RESOURCE),
                    ("zed".into(), error_codes::RESOURCE_NOT_FOUND),
                ]
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    // carol logs in on the restarted broker with the password her credential was made from.
    let sasl = tb.running.as_ref().expect("running").listener_addrs[1].1;
    let mut c = Client::connect(sasl).await;
    assert_eq!(
        scram_login(&mut c, ScramMechanism::Sha512, "carol", "c")
            .await
            .0,
        0
    );
}

#[tokio::test]
async fn sasl_over_tls() {
    let ca = TestCa::new("skiff test CA");
    let certs = tempfile::tempdir().expect("tempdir");
    let (keystore, truststore) = listener_files(certs.path(), &ca);
    let tb = TestBroker::start_with(|config| {
        config.listeners = vec![
            ListenerConfig::plaintext("PLAIN", "127.0.0.1:0".parse().expect("addr"), None),
            ListenerConfig {
                protocol: SecurityProtocol::SaslSsl,
                sasl_mechanisms: vec![SaslMechanism::ScramSha512],
                tls: Some(TlsSettings {
                    keystore,
                    truststore: Some(truststore),
                    client_auth: ClientAuth::None,
                    protocols: vec![TlsProtocol::V12, TlsProtocol::V13],
                    cipher_suites: Vec::new(),
                    principal_mapping_rules: "DEFAULT".into(),
                }),
                ..ListenerConfig::plaintext("SASL_SSL", "127.0.0.1:0".parse().expect("addr"), None)
            },
        ];
    })
    .await;
    add_users(&tb, &[("alice", ScramMechanism::Sha512, "pw")]).await;
    let addr = tb.running.as_ref().expect("running").listener_addrs[1].1;
    let stream = connect_tls(addr, client_config(&ca.pem, None))
        .await
        .expect("handshake");
    let (read, write) = tokio::io::split(stream);
    let mut c = Client::over(read, write);
    assert_eq!(
        scram_login(&mut c, ScramMechanism::Sha512, "alice", "pw")
            .await
            .0,
        0
    );
    metadata_ok(&mut c).await;
}
