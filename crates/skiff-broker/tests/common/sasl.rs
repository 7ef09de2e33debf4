//! SASL from the client side: SaslHandshake and SaslAuthenticate exchanges, SCRAM users written
//! into a data directory before the broker starts.

use std::path::Path;

use skiff_auth::scram::{ClientExchange, ScramCredential, ScramMechanism};
use skiff_protocol::Response;
use skiff_protocol::generated::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use skiff_protocol::generated::{SaslAuthenticateRequest, SaslHandshakeRequest};

use super::Client;

/// AlterUserScramCredentials upsertions of SCRAM-SHA-512 `users`, each with `password(user)`
/// (salt `salt-of-<user>`, 4096 iterations).
pub fn scram_upsertions(
    users: &[&str],
    password: impl Fn(&str) -> String,
) -> Vec<ScramCredentialUpsertion> {
    let mechanism = ScramMechanism::Sha512;
    users
        .iter()
        .map(|user| {
            let salt = format!("salt-of-{user}").into_bytes();
            let salted = skiff_auth::scram::salted_password(
                mechanism,
                password(user).as_bytes(),
                &salt,
                4096,
            )
            .expect("salted password");
            ScramCredentialUpsertion {
                name: (*user).into(),
                mechanism: mechanism.code(),
                iterations: 4096,
                salt: salt.into(),
                salted_password: salted.into(),
                ..Default::default()
            }
        })
        .collect()
}

/// SaslHandshake: the error code and the broker's mechanisms.
pub async fn handshake(c: &mut Client, mechanism: &str, version: i16) -> (i16, Vec<String>) {
    let request = SaslHandshakeRequest {
        mechanism: mechanism.into(),
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::SaslHandshake(r) => (
            r.error_code,
            r.mechanisms.iter().map(|m| m.to_string()).collect(),
        ),
        other => panic!("unexpected {other:?}"),
    }
}

/// SaslAuthenticate: the error code, the broker's bytes and the session lifetime.
pub async fn authenticate(c: &mut Client, bytes: Vec<u8>, version: i16) -> (i16, Vec<u8>, i64) {
    let request = SaslAuthenticateRequest {
        auth_bytes: bytes.into(),
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::SaslAuthenticate(r) => {
            (r.error_code, r.auth_bytes.to_vec(), r.session_lifetime_ms)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// A full SCRAM exchange over SaslHandshake v1 + SaslAuthenticate v2: the final error code and
/// the session lifetime. A success also checks the broker's proof.
pub async fn scram_login(
    c: &mut Client,
    mechanism: ScramMechanism,
    user: &str,
    password: &str,
) -> (i16, i64) {
    let (code, _) = handshake(c, mechanism.name(), 1).await;
    assert_eq!(code, 0);
    let (mut exchange, first) = ClientExchange::new(
        mechanism,
        user,
        password.as_bytes(),
        "fyko+d2lbbFgONRv9qkxdawL",
    );
    let (code, server_first, _) = authenticate(c, first, 2).await;
    if code != 0 {
        return (code, 0);
    }
    let last = exchange.server_first(&server_first).expect("server-first");
    let (code, server_final, lifetime) = authenticate(c, last, 2).await;
    if code == 0 {
        exchange
            .server_final(&server_final)
            .expect("the broker proves it knows the key");
    }
    (code, lifetime)
}

/// Writes SCRAM-SHA-512 credentials for (user, password) pairs into a data directory (before
/// the broker starts, as `skiff user set --data-dir` does).
pub fn write_users(data_dir: &Path, users: &[(&str, &str)]) {
    std::fs::create_dir_all(data_dir).expect("data dir");
    let mut store = skiff_broker::Credentials::load(data_dir).expect("load");
    for (user, password) in users {
        let credential = ScramCredential::from_password(
            ScramMechanism::Sha512,
            password.as_bytes(),
            format!("salt-{user}").as_bytes(),
            4096,
        )
        .expect("credential");
        store.set(user, ScramMechanism::Sha512, credential);
    }
    store.save(data_dir).expect("save");
}
