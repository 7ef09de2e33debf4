//! OAUTHBEARER against a JWKS fetched over HTTPS: a test endpoint serves the keys over TLS (its
//! CA given as `sasl.oauthbearer.jwks.endpoint.truststore.location`), tokens signed by a key of
//! the set are accepted and others refused, a token naming a new key makes the broker fetch the
//! set again, and a redirect is not followed.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::{Client, TIMEOUT, TestBroker};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};
use skiff_auth::oauth::JwtValidator;
use skiff_broker::config::OauthSettings;
use skiff_broker::{ListenerConfig, SaslMechanism, SecurityProtocol};
use skiff_protocol::Response;
use skiff_protocol::error_codes;
use skiff_protocol::generated::{SaslAuthenticateRequest, SaslHandshakeRequest};
use skiff_testkit::certs::{Issued, TestCa, server_config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// An ES256 signing key and its JWK.
struct SigningKey {
    encoding_key: EncodingKey,
    jwk: Value,
}

impl SigningKey {
    fn es256(kid: &str) -> SigningKey {
        let rng = SystemRandom::new();
        let alg = &ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("key");
        let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("key pair");
        // An uncompressed point: 0x04, x, y.
        let (x, y) = pair.public_key().as_ref()[1..].split_at(32);
        SigningKey {
            encoding_key: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y)}),
        }
    }

    /// A token for `alice`, valid for an hour, signed by this key with `kid` in its header.
    fn token(&self, kid: &str) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let header = Header {
            kid: Some(kid.to_string()),
            ..Header::new(Algorithm::ES256)
        };
        let claims = json!({"sub": "alice", "iat": now, "exp": now + 3600});
        jsonwebtoken::encode(&header, &claims, &self.encoding_key).expect("sign")
    }
}

fn jwks(keys: &[&SigningKey]) -> String {
    let keys: Vec<&Value> = keys.iter().map(|key| &key.jwk).collect();
    json!({ "keys": keys }).to_string()
}

/// What the test endpoint answers every request with.
#[derive(Clone)]
struct Reply {
    status: &'static str,
    headers: String,
    body: String,
}

impl Reply {
    fn json(body: String) -> Reply {
        Reply {
            status: "200 OK",
            headers: "Content-Type: application/json\r\n".into(),
            body,
        }
    }

    fn redirect(location: &str) -> Reply {
        Reply {
            status: "302 Found",
            headers: format!("Location: {location}\r\n"),
            body: String::new(),
        }
    }
}

/// An HTTPS endpoint on 127.0.0.1 answering every request with the [`Reply`] in force; it
/// keeps the head of each request.
struct Endpoint {
    addr: SocketAddr,
    reply: Arc<Mutex<Reply>>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Endpoint {
    async fn start(identity: &Issued, reply: Reply) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = Endpoint {
            addr: listener.local_addr().expect("addr"),
            reply: Arc::new(Mutex::new(reply)),
            requests: Arc::default(),
        };
        let acceptor = TlsAcceptor::from(server_config(identity));
        let (reply, requests) = (Arc::clone(&endpoint.reply), Arc::clone(&endpoint.requests));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, reply, requests) =
                    (acceptor.clone(), Arc::clone(&reply), Arc::clone(&requests));
                tokio::spawn(async move {
                    let _ = answer(acceptor, tcp, &reply, &requests).await;
                });
            }
        });
        endpoint
    }

    fn url(&self) -> String {
        format!("https://{}/keys.json", self.addr)
    }

    fn set(&self, reply: Reply) {
        *self.reply.lock().expect("reply") = reply;
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("requests").clone()
    }
}

/// Reads one request head over TLS and writes the reply.
async fn answer(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    reply: &Mutex<Reply>,
    requests: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut stream = acceptor.accept(tcp).await?;
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if stream.read(&mut byte).await? == 0 || head.len() > 8192 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    requests
        .lock()
        .expect("requests")
        .push(String::from_utf8_lossy(&head).into_owned());
    let Reply {
        status,
        headers,
        body,
    } = reply.lock().expect("reply").clone();
    let response = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// A broker with a SASL_PLAINTEXT listener serving OAUTHBEARER with the keys at `jwks_url`, an
/// endpoint whose certificate chains to the CA in `truststore`.
async fn start_broker(jwks_url: String, truststore: &Path) -> TestBroker {
    TestBroker::start_with(|config| {
        config.listeners = vec![ListenerConfig {
            protocol: SecurityProtocol::SaslPlaintext,
            sasl_mechanisms: vec![SaslMechanism::OauthBearer],
            ..ListenerConfig::plaintext("SASL", "127.0.0.1:0".parse().expect("addr"), None)
        }];
        config.security.failed_authentication_delay_ms = 10;
        config.security.oauth = Some(OauthSettings {
            jwks_url,
            refresh_ms: 3_600_000,
            jwks_truststore: Some(truststore.to_path_buf()),
            validator: JwtValidator::default(),
        });
    })
    .await
}

/// SaslHandshake v1 and SaslAuthenticate v2 with `token` on a new connection: the error code.
async fn login(tb: &TestBroker, token: &str) -> i16 {
    let mut c = Client::connect(tb.addr).await;
    let handshake = SaslHandshakeRequest {
        mechanism: "OAUTHBEARER".into(),
        ..Default::default()
    };
    match c.call(handshake, 1).await {
        Response::SaslHandshake(r) => assert_eq!(r.error_code, 0, "{r:?}"),
        other => panic!("unexpected {other:?}"),
    }
    let initial = skiff_auth::oauth::client_initial(token, None, &BTreeMap::new());
    let authenticate = SaslAuthenticateRequest {
        auth_bytes: initial.into(),
        ..Default::default()
    };
    match c.call(authenticate, 2).await {
        Response::SaslAuthenticate(r) => r.error_code,
        other => panic!("unexpected {other:?}"),
    }
}

/// Logs in with `token` until it is accepted (the keys are fetched in the background); fails
/// the test after [`TIMEOUT`].
async fn login_eventually(tb: &TestBroker, token: &str) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while login(tb, token).await != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the token was never accepted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A CA in a temporary directory, its file, and a server certificate for 127.0.0.1.
fn ca_files() -> (tempfile::TempDir, std::path::PathBuf, Issued) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("JWKS CA");
    let truststore = dir.path().join("jwks-ca.pem");
    ca.write(&truststore);
    let server = ca.server();
    (dir, truststore, server)
}

#[tokio::test]
async fn tokens_are_checked_against_keys_fetched_over_https() {
    let (_dir, truststore, identity) = ca_files();
    let key = SigningKey::es256("a");
    let endpoint = Endpoint::start(&identity, Reply::json(jwks(&[&key]))).await;
    let tb = start_broker(endpoint.url(), &truststore).await;

    login_eventually(&tb, &key.token("a")).await;
    // Another key claiming the same key ID fails the signature check.
    let impostor = SigningKey::es256("a");
    assert_eq!(
        login(&tb, &impostor.token("a")).await,
        error_codes::SASL_AUTHENTICATION_FAILED
    );

    let requests = endpoint.requests();
    let first = requests.first().expect("a request").to_ascii_lowercase();
    assert!(first.starts_with("get /keys.json http/1.1\r\n"), "{first}");
    let host = format!("\r\nhost: {}\r\n", endpoint.addr);
    assert!(first.contains(&host), "{first}");
    tb.stop().await;
}

#[tokio::test]
async fn a_token_of_a_new_key_makes_the_broker_fetch_the_keys_again() {
    let (_dir, truststore, identity) = ca_files();
    let old = SigningKey::es256("old");
    let endpoint = Endpoint::start(&identity, Reply::json(jwks(&[&old]))).await;
    let tb = start_broker(endpoint.url(), &truststore).await;
    login_eventually(&tb, &old.token("old")).await;
    let fetched = endpoint.requests().len();

    // The identity provider rotates its key; the refresh period (an hour) is far off.
    let new = SigningKey::es256("new");
    endpoint.set(Reply::json(jwks(&[&new])));
    login_eventually(&tb, &new.token("new")).await;
    assert!(endpoint.requests().len() > fetched);
    assert_eq!(
        login(&tb, &old.token("old")).await,
        error_codes::SASL_AUTHENTICATION_FAILED,
        "the retired key is gone"
    );
    tb.stop().await;
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let (_dir, truststore, identity) = ca_files();
    let key = SigningKey::es256("a");
    let keys = Endpoint::start(&identity, Reply::json(jwks(&[&key]))).await;
    let redirecting = Endpoint::start(&identity, Reply::redirect(&keys.url())).await;
    let tb = start_broker(redirecting.url(), &truststore).await;

    // Each refused token asks for a fetch: wait for the start-up one and a second.
    let token = key.token("a");
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while redirecting.requests().len() < 2 {
        assert_eq!(
            login(&tb, &token).await,
            error_codes::SASL_AUTHENTICATION_FAILED
        );
        assert!(tokio::time::Instant::now() < deadline, "no second fetch");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(keys.requests().is_empty(), "the redirect was followed");
    assert_eq!(
        login(&tb, &token).await,
        error_codes::SASL_AUTHENTICATION_FAILED
    );
    tb.stop().await;
}

#[test]
fn the_endpoint_truststore_key() {
    let parse = |pairs: &[(&str, &str)]| {
        let entries = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        skiff_broker::BrokerConfig::from_entries(entries).map_err(|e| format!("{e:#}"))
    };
    const URL: &str = "sasl.oauthbearer.jwks.endpoint.url";
    const TRUSTSTORE: &str = "sasl.oauthbearer.jwks.endpoint.truststore.location";

    let config = parse(&[
        (URL, "https://idp.example/keys"),
        (TRUSTSTORE, " /etc/idp-ca.pem "),
    ])
    .expect("parses");
    let oauth = config.security.oauth.expect("oauth");
    assert_eq!(
        oauth.jwks_truststore.as_deref(),
        Some(Path::new("/etc/idp-ca.pem"))
    );
    let config = parse(&[(URL, "https://idp.example/keys")]).expect("parses");
    assert_eq!(config.security.oauth.expect("oauth").jwks_truststore, None);

    let error = parse(&[(TRUSTSTORE, "/etc/idp-ca.pem")]).expect_err("no URL");
    assert!(error.contains(URL), "{error}");
    let error = parse(&[
        (URL, "file:///etc/keys.json"),
        (TRUSTSTORE, "/etc/idp-ca.pem"),
    ])
    .expect_err("a file has no certificate");
    assert!(error.contains("is for an https:// JWKS URL"), "{error}");
}
