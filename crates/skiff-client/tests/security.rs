//! TLS and SASL against an in-process broker with a PLAINTEXT listener (for set-up) and a
//! secured one: produce and consume over SASL_SSL SCRAM-SHA-512, SASL_PLAINTEXT PLAIN and SSL
//! with a client certificate, and OAUTHBEARER with tokens from a callback; host name checks on
//! and off; a wrong password refused quickly; KIP-368 re-authentication keeping connections alive
//! past `connections.max.reauth.ms`.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{TIMEOUT, TestBroker, client, client_config, eventually};
use skiff_broker::{
    BrokerConfig, ClientAuth, ListenerConfig, Overrides, SaslMechanism,
    SecurityProtocol as ListenerProtocol, TlsProtocol, TlsSettings,
};
use skiff_client::{
    Admin, Client, ClientConfig, Consumer, ConsumerConfig, EndpointIdentification, Error, NewTopic,
    OauthTokenCallback, OffsetReset, Producer, ProducerConfig, ProducerRecord, SaslConfig,
    ScramMechanism, SecurityConfig, SecurityProtocol, TlsConfig, TopicPartition,
};
use skiff_testkit::certs::TestCa;
use tempfile::TempDir;
use tokio::time::timeout;

/// A broker whose second listener is secured, with the CA of its certificate and the
/// directory of the PEM files (kept while the broker runs).
struct SecureBroker {
    broker: TestBroker,
    ca: TestCa,
    files: TempDir,
}

impl SecureBroker {
    /// `secured` is the second listener; `server_names` are the names its certificate is for.
    async fn start(
        protocol: ListenerProtocol,
        client_auth: ClientAuth,
        mechanisms: Vec<SaslMechanism>,
        server_names: &[&str],
        adjust: impl FnOnce(&mut BrokerConfig),
    ) -> SecureBroker {
        let ca = TestCa::new("skiff client test CA");
        let files = tempfile::tempdir().expect("tempdir");
        let tls = protocol.uses_tls().then(|| {
            let keystore = files.path().join("broker.pem");
            let truststore = files.path().join("ca.pem");
            ca.server_for(server_names).write_keystore(&keystore);
            ca.write(&truststore);
            TlsSettings {
                keystore,
                truststore: Some(truststore),
                client_auth,
                protocols: vec![TlsProtocol::V12, TlsProtocol::V13],
                cipher_suites: Vec::new(),
                principal_mapping_rules: "DEFAULT".into(),
            }
        });
        let secured = ListenerConfig {
            protocol,
            tls,
            sasl_mechanisms: mechanisms,
            ..ListenerConfig::plaintext("SECURED", "127.0.0.1:0".parse().expect("addr"), None)
        };
        let broker = TestBroker::start_with(|config| {
            config.listeners = vec![
                ListenerConfig::plaintext("PLAIN", "127.0.0.1:0".parse().expect("addr"), None),
                secured,
            ];
            config.security.failed_authentication_delay_ms = 50;
            adjust(config);
        })
        .await;
        SecureBroker { broker, ca, files }
    }

    /// The secured listener's address.
    fn secured(&self) -> String {
        let running = self.broker.running.as_ref().expect("running");
        running.listener_addrs[1].1.to_string()
    }

    fn dir(&self) -> &Path {
        self.files.path()
    }

    /// The CA certificate as a client's `ssl.ca.location`.
    fn ca_file(&self) -> std::path::PathBuf {
        self.dir().join("ca.pem")
    }

    /// Gives `user` a SCRAM credential over the PLAINTEXT listener.
    async fn add_user(&self, user: &str, mechanism: ScramMechanism, password: &str) {
        let admin = Admin::new(client(&self.broker.bootstrap()));
        admin
            .set_scram_credential(user, mechanism, password.as_bytes(), 4096)
            .await
            .expect("set the credential");
        admin.client().close().await;
    }

    fn metric(&self, read: impl Fn(&skiff_broker::Broker) -> u64) -> u64 {
        read(&self.broker.running.as_ref().expect("running").broker)
    }
}

fn secured_config(addr: &str, security: SecurityConfig) -> ClientConfig {
    let mut config = client_config(addr);
    config.security = security;
    config
}

fn sasl(mechanism: &str, user: &str, password: &str) -> Option<SaslConfig> {
    Some(SaslConfig::with_password(mechanism, user, password).expect("mechanism"))
}

/// Creates `topic`, produces `n` records and reads them back, all through `client`.
async fn round_trip(client: &Client, topic: &str, n: usize) {
    Admin::new(client.clone())
        .create_topics(&[NewTopic::new(topic, 1)])
        .await
        .expect("create topic");
    let producer = Producer::new(client.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    for i in 0..n {
        let delivery = producer
            .send(ProducerRecord::new(topic, format!("value-{i}")))
            .await
            .expect("send");
        timeout(TIMEOUT, delivery)
            .await
            .expect("delivered in time")
            .expect("delivered");
    }
    producer.close().await.expect("close");

    let consumer = Consumer::new(
        client.clone(),
        ConsumerConfig {
            auto_offset_reset: OffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(50),
            ..Default::default()
        },
    )
    .expect("consumer");
    consumer
        .assign(&[TopicPartition::new(topic, 0)])
        .expect("assign");
    let mut values = Vec::new();
    timeout(TIMEOUT, async {
        while values.len() < n {
            let records = consumer
                .poll(Duration::from_millis(200))
                .await
                .expect("poll");
            values.extend(records.into_iter().map(|r| r.value));
        }
    })
    .await
    .expect("every record read in time");
    let expected: Vec<Option<bytes::Bytes>> = (0..n)
        .map(|i| Some(bytes::Bytes::from(format!("value-{i}"))))
        .collect();
    assert_eq!(values, expected);
    consumer.close().await.expect("close consumer");
}

#[tokio::test]
async fn sasl_ssl_scram_sha_512_produces_and_consumes() {
    let secure = SecureBroker::start(
        ListenerProtocol::SaslSsl,
        ClientAuth::None,
        vec![SaslMechanism::ScramSha512],
        &["127.0.0.1"],
        |_| {},
    )
    .await;
    secure
        .add_user("alice", ScramMechanism::Sha512, "alice-secret")
        .await;
    let security = SecurityConfig {
        protocol: SecurityProtocol::SaslSsl,
        tls: TlsConfig {
            ca_location: Some(secure.ca_file()),
            ..Default::default()
        },
        sasl: sasl("SCRAM-SHA-512", "alice", "alice-secret"),
    };
    let client = Client::connect(secured_config(&secure.secured(), security))
        .await
        .expect("connect over SASL_SSL");
    round_trip(&client, "scram-over-tls", 20).await;

    let users = Admin::new(client.clone())
        .describe_scram_users(None)
        .await
        .expect("describe users");
    assert_eq!(users.len(), 1);
    assert_eq!(users[0].name, "alice");
    assert_eq!(users[0].credentials, vec![(ScramMechanism::Sha512, 4096)]);
    client.close().await;
}

#[tokio::test]
async fn sasl_plaintext_plain_produces_and_consumes() {
    let secure = SecureBroker::start(
        ListenerProtocol::SaslPlaintext,
        ClientAuth::None,
        vec![SaslMechanism::Plain],
        &[],
        |_| {},
    )
    .await;
    // PLAIN checks the password against the user's SCRAM credential.
    secure
        .add_user("bob", ScramMechanism::Sha256, "bob-secret")
        .await;
    let security = SecurityConfig {
        protocol: SecurityProtocol::SaslPlaintext,
        sasl: sasl("PLAIN", "bob", "bob-secret"),
        ..Default::default()
    };
    let client = Client::connect(secured_config(&secure.secured(), security))
        .await
        .expect("connect over SASL_PLAINTEXT");
    round_trip(&client, "plain", 10).await;
    client.close().await;
}

#[tokio::test]
async fn ssl_with_a_client_certificate_produces_and_consumes() {
    let secure = SecureBroker::start(
        ListenerProtocol::Ssl,
        ClientAuth::Required,
        Vec::new(),
        &["127.0.0.1"],
        |_| {},
    )
    .await;
    let (certificate, key) = secure
        .ca
        .client_cn("carol")
        .write_pair(secure.dir(), "carol");
    let with_certificate = SecurityConfig {
        protocol: SecurityProtocol::Ssl,
        tls: TlsConfig {
            ca_location: Some(secure.ca_file()),
            certificate_location: Some(certificate),
            key_location: Some(key),
            ..Default::default()
        },
        sasl: None,
    };
    let client = Client::connect(secured_config(&secure.secured(), with_certificate))
        .await
        .expect("connect with a client certificate");
    round_trip(&client, "mtls", 10).await;
    client.close().await;

    // Without a certificate the broker hangs up (after the handshake, with TLS 1.3).
    let without = SecurityConfig {
        protocol: SecurityProtocol::Ssl,
        tls: TlsConfig {
            ca_location: Some(secure.ca_file()),
            ..Default::default()
        },
        sasl: None,
    };
    let refused = timeout(
        TIMEOUT,
        Client::connect(secured_config(&secure.secured(), without)),
    )
    .await
    .expect("refused in time");
    assert!(refused.is_err(), "no client certificate: {refused:?}");
}

#[tokio::test]
async fn host_name_checks_can_be_turned_off_but_the_chain_is_still_checked() {
    let secure = SecureBroker::start(
        ListenerProtocol::Ssl,
        ClientAuth::None,
        Vec::new(),
        &["broker.elsewhere.example"],
        |_| {},
    )
    .await;
    let tls = |ca_location, endpoint_identification| SecurityConfig {
        protocol: SecurityProtocol::Ssl,
        tls: TlsConfig {
            ca_location: Some(ca_location),
            endpoint_identification,
            ..Default::default()
        },
        sasl: None,
    };
    let connect = |security| Client::connect(secured_config(&secure.secured(), security));

    match connect(tls(secure.ca_file(), EndpointIdentification::Https)).await {
        Err(Error::Authentication { reason, .. }) => {
            assert!(reason.contains("TLS handshake"), "{reason}")
        }
        other => panic!("a certificate for another name: {other:?}"),
    }
    let client = connect(tls(secure.ca_file(), EndpointIdentification::None))
        .await
        .expect("any name, a trusted chain");
    client.close().await;

    let stranger = TestCa::new("another CA");
    let stranger_file = secure.dir().join("stranger.pem");
    stranger.write(&stranger_file);
    match connect(tls(stranger_file, EndpointIdentification::None)).await {
        Err(Error::Authentication { reason, .. }) => {
            assert!(reason.contains("TLS handshake"), "{reason}")
        }
        other => panic!("a certificate from an untrusted CA: {other:?}"),
    }
}

#[tokio::test]
async fn a_wrong_password_is_an_authentication_error_at_once() {
    let secure = SecureBroker::start(
        ListenerProtocol::SaslPlaintext,
        ClientAuth::None,
        vec![SaslMechanism::ScramSha256],
        &[],
        |_| {},
    )
    .await;
    secure
        .add_user("alice", ScramMechanism::Sha256, "right-password")
        .await;
    let security = SecurityConfig {
        protocol: SecurityProtocol::SaslPlaintext,
        sasl: sasl("SCRAM-SHA-256", "alice", "wrong-password"),
        ..Default::default()
    };
    let started = Instant::now();
    let result = Client::connect(secured_config(&secure.secured(), security)).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    match result {
        Err(e @ Error::Authentication { .. }) => {
            let text = e.to_string();
            assert!(text.contains("invalid credentials"), "{text}");
            assert!(!text.contains("wrong-password"), "{text}");
            assert!(!e.is_retriable());
        }
        other => panic!("expected an authentication error, got {other:?}"),
    }

    // A mechanism the listener does not serve names the ones it does.
    let security = SecurityConfig {
        protocol: SecurityProtocol::SaslPlaintext,
        sasl: sasl("PLAIN", "alice", "right-password"),
        ..Default::default()
    };
    match Client::connect(secured_config(&secure.secured(), security)).await {
        Err(Error::Authentication { reason, .. }) => {
            assert!(reason.contains("UNSUPPORTED_SASL_MECHANISM"), "{reason}");
            assert!(reason.contains("SCRAM-SHA-256"), "{reason}");
        }
        other => panic!("expected an authentication error, got {other:?}"),
    }
}

#[tokio::test]
async fn reauthentication_keeps_connections_alive_past_the_session_lifetime() {
    const MAX_REAUTH_MS: i64 = 1500;
    let secure = SecureBroker::start(
        ListenerProtocol::SaslPlaintext,
        ClientAuth::None,
        vec![SaslMechanism::ScramSha512],
        &[],
        |config| config.security.max_reauth_ms = MAX_REAUTH_MS,
    )
    .await;
    secure
        .add_user("alice", ScramMechanism::Sha512, "alice-secret")
        .await;
    let security = SecurityConfig {
        protocol: SecurityProtocol::SaslPlaintext,
        sasl: sasl("SCRAM-SHA-512", "alice", "alice-secret"),
        ..Default::default()
    };
    let client = Client::connect(secured_config(&secure.secured(), security))
        .await
        .expect("connect");
    Admin::new(client.clone())
        .create_topics(&[NewTopic::new("steady", 1)])
        .await
        .expect("create topic");
    let producer = Producer::new(client.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    let send = |i: usize| {
        let producer = &producer;
        async move {
            let delivery = producer
                .send(ProducerRecord::new("steady", format!("value-{i}")))
                .await
                .expect("send");
            timeout(TIMEOUT, delivery)
                .await
                .expect("delivered in time")
                .expect("delivered")
        }
    };
    // The first delivery opens every connection the producer uses.
    send(0).await;
    let accepted = secure.metric(|b| b.metrics.connections_accepted.load(Ordering::Relaxed));
    let logins = secure.metric(|b| b.metrics.sasl_successes.load(Ordering::Relaxed));

    let started = Instant::now();
    let mut sent = 1;
    while started.elapsed() < Duration::from_millis(4000) {
        let metadata = send(sent).await;
        assert_eq!(metadata.offset, sent as i64, "every record once, in order");
        sent += 1;
    }

    assert_eq!(
        secure.metric(|b| b.metrics.connections_accepted.load(Ordering::Relaxed)),
        accepted,
        "no connection was replaced"
    );
    let reauthentications =
        secure.metric(|b| b.metrics.sasl_successes.load(Ordering::Relaxed)) - logins;
    assert!(
        reauthentications >= 2,
        "4 s of 1.5 s sessions: {reauthentications} re-authentications"
    );
    producer.close().await.expect("close");
    client.close().await;
}

#[tokio::test]
async fn an_idle_connection_renews_its_session_before_it_ends() {
    let secure = SecureBroker::start(
        ListenerProtocol::SaslPlaintext,
        ClientAuth::None,
        vec![SaslMechanism::ScramSha256],
        &[],
        |config| config.security.max_reauth_ms = 1000,
    )
    .await;
    secure
        .add_user("alice", ScramMechanism::Sha256, "alice-secret")
        .await;
    let mut config = secured_config(
        &secure.secured(),
        SecurityConfig {
            protocol: SecurityProtocol::SaslPlaintext,
            sasl: sasl("SCRAM-SHA-256", "alice", "alice-secret"),
            ..Default::default()
        },
    );
    // Nothing but the renewals goes out while the client is idle.
    config.enable_metrics_push = false;
    let client = Client::connect(config).await.expect("connect");
    let accepted = secure.metric(|b| b.metrics.connections_accepted.load(Ordering::Relaxed));
    let logins = secure.metric(|b| b.metrics.sasl_successes.load(Ordering::Relaxed));

    eventually("two renewals of an idle connection's session", || {
        secure.metric(|b| b.metrics.sasl_successes.load(Ordering::Relaxed)) >= logins + 2
    })
    .await;
    client
        .refresh_metadata(Some(&[]))
        .await
        .expect("a request on the renewed session");
    assert_eq!(
        secure.metric(|b| b.metrics.connections_accepted.load(Ordering::Relaxed)),
        accepted,
        "the same connection"
    );
    client.close().await;
}

/// An ES256 key that signs OAUTHBEARER tokens, and the JWKS that holds it.
struct TokenIssuer {
    key: jsonwebtoken::EncodingKey,
    jwks: serde_json::Value,
}

impl TokenIssuer {
    fn new() -> TokenIssuer {
        use base64::Engine as _;
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let alg = &ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("key");
        let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("key pair");
        // The public key is an uncompressed point: 0x04, x, y.
        let (x, y) = pair.public_key().as_ref()[1..].split_at(32);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        TokenIssuer {
            key: jsonwebtoken::EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwks: serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1",
                "use": "sig", "x": b64.encode(x), "y": b64.encode(y)}]}),
        }
    }

    /// A token for `sub`, valid for an hour, and its expiry in ms since the epoch.
    fn token(&self, sub: &str) -> (String, i64) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let header = jsonwebtoken::Header {
            kid: Some("k1".into()),
            ..jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256)
        };
        let claims = serde_json::json!({"sub": sub, "iat": now, "exp": now + 3600});
        let token = jsonwebtoken::encode(&header, &claims, &self.key).expect("sign");
        (token, (now as i64 + 3600) * 1000)
    }
}

/// Connects once the broker has its keys: it fetches the JWKS in the background after it starts
/// and shows no event for it, so a login before then is retried (bounded by `TIMEOUT`).
async fn connect_once_the_keys_are_fetched(config: ClientConfig) -> Client {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match Client::connect(config.clone()).await {
            Ok(client) => return client,
            Err(Error::Authentication { reason, .. })
                if reason.contains("not been fetched") && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("connect with a token: {e}"),
        }
    }
}

#[tokio::test]
async fn oauthbearer_authenticates_with_the_callbacks_token() {
    let issuer = Arc::new(TokenIssuer::new());
    let jwks = tempfile::tempdir().expect("tempdir");
    let jwks_file = jwks.path().join("jwks.json");
    std::fs::write(&jwks_file, issuer.jwks.to_string()).expect("write JWKS");
    // The OAuth settings as the broker reads them from its keys.
    let keys = Overrides {
        set: vec![(
            "sasl.oauthbearer.jwks.endpoint.url".into(),
            format!("file://{}", jwks_file.display()),
        )],
        ..Default::default()
    };
    let oauth = BrokerConfig::load(None, &keys)
        .expect("OAuth keys")
        .security
        .oauth;
    let secure = SecureBroker::start(
        ListenerProtocol::SaslPlaintext,
        ClientAuth::None,
        vec![SaslMechanism::OauthBearer],
        &[],
        |config| config.security.oauth = oauth,
    )
    .await;

    let calls = Arc::new(AtomicUsize::new(0));
    let token: OauthTokenCallback = {
        let (issuer, calls) = (Arc::clone(&issuer), Arc::clone(&calls));
        Arc::new(move || {
            calls.fetch_add(1, Ordering::Relaxed);
            Ok(issuer.token("alice"))
        })
    };
    let security = SecurityConfig {
        protocol: SecurityProtocol::SaslPlaintext,
        sasl: Some(SaslConfig::OauthBearer { token }),
        ..Default::default()
    };
    let client =
        connect_once_the_keys_are_fetched(secured_config(&secure.secured(), security)).await;
    round_trip(&client, "tokens", 5).await;
    assert!(calls.load(Ordering::Relaxed) >= 1);
    client.close().await;

    let refusing: OauthTokenCallback = Arc::new(|| Err("no token today".to_string()));
    let security = SecurityConfig {
        protocol: SecurityProtocol::SaslPlaintext,
        sasl: Some(SaslConfig::OauthBearer { token: refusing }),
        ..Default::default()
    };
    match Client::connect(secured_config(&secure.secured(), security)).await {
        Err(Error::Authentication { reason, .. }) => {
            assert!(reason.contains("no token today"), "{reason}")
        }
        other => panic!("expected an authentication error, got {other:?}"),
    }
}
