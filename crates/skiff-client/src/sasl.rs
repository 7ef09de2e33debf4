//! The client side of SASL mechanisms (PLAIN, SCRAM, OAUTHBEARER) as token exchanges, and when
//! to renew a session (KIP-368). The connection carries the tokens in SaslHandshake v1 and
//! SaslAuthenticate requests (`Connection::sasl_exchange`).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use skiff_auth::scram::ClientExchange;

use crate::security::{OauthTokenCallback, SaslConfig};
use crate::util::{now_ms, random_u64};

/// When to re-authenticate a session of `lifetime`: at a random point between 85 % and 95 % of
/// it, early enough for the exchange to end before the broker's deadline, and spread so that a
/// client's connections do not all re-authenticate at once.
pub(crate) fn reauthentication_delay(lifetime: Duration) -> Duration {
    let fraction = 0.85 + (random_u64() % 1001) as f64 / 10_000.0;
    lifetime.mul_f64(fraction)
}

/// The client's answer to an OAUTHBEARER error challenge (RFC 7628 §3.2.3).
const OAUTH_ERROR_ACK: u8 = 0x01;

/// The client side of one mechanism's exchange: the first token, then an answer to each broker
/// token until the broker's last one.
pub(crate) enum SaslClient {
    /// PLAIN: one token, which the broker accepts or refuses.
    Plain,
    /// SCRAM: the client-first went out, then the client-final (`final_sent`); the broker's last
    /// token proves that it knows the credential.
    Scram {
        exchange: ClientExchange,
        final_sent: bool,
    },
    /// OAUTHBEARER: the token went out. An empty answer accepts it; any other is an error
    /// challenge (RFC 7628 §3.2.2, as Kafka's brokers send), kept here and acknowledged, after
    /// which the broker fails the exchange.
    OauthBearer { challenge: Option<String> },
}

impl SaslClient {
    /// Starts the exchange: the client and its first token.
    pub(crate) async fn start(
        config: &SaslConfig,
    ) -> std::result::Result<(SaslClient, Vec<u8>), String> {
        match config {
            SaslConfig::Plain { username, password } => Ok((
                SaslClient::Plain,
                skiff_auth::plain::client_message(username, password.as_bytes()),
            )),
            SaslConfig::Scram {
                mechanism,
                username,
                password,
            } => {
                let nonce = client_nonce()?;
                let (exchange, first) =
                    ClientExchange::new(*mechanism, username, password.as_bytes(), &nonce);
                let client = SaslClient::Scram {
                    exchange,
                    final_sent: false,
                };
                Ok((client, first))
            }
            SaslConfig::OauthBearer { token } => {
                let token = oauth_token(token).await?;
                let first = skiff_auth::oauth::client_initial(&token, None, &Default::default());
                Ok((SaslClient::OauthBearer { challenge: None }, first))
            }
        }
    }

    /// The broker's token after an accepted one: the next token to send, or `None` when the
    /// exchange is over.
    pub(crate) fn step(&mut self, token: &[u8]) -> std::result::Result<Option<Vec<u8>>, String> {
        match self {
            SaslClient::Plain => Ok(None),
            SaslClient::Scram {
                exchange,
                final_sent,
            } if !*final_sent => {
                let last = exchange.server_first(token).map_err(|e| e.to_string())?;
                *final_sent = true;
                Ok(Some(last))
            }
            SaslClient::Scram { exchange, .. } => {
                exchange.server_final(token).map_err(|e| e.to_string())?;
                Ok(None)
            }
            SaslClient::OauthBearer { challenge: None } if token.is_empty() => Ok(None),
            SaslClient::OauthBearer { challenge } => match challenge {
                None => {
                    *challenge = Some(String::from_utf8_lossy(token).into_owned());
                    Ok(Some(vec![OAUTH_ERROR_ACK]))
                }
                Some(refusal) => Err(format!("the broker refused the token: {refusal}")),
            },
        }
    }
}

/// A fresh SCRAM client nonce: 24 random bytes in base64, 32 printable characters without `,`.
fn client_nonce() -> std::result::Result<String, String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a SCRAM nonce: {e}"))?;
    Ok(BASE64.encode(bytes))
}

/// A token from the OAUTHBEARER callback, called on a blocking-friendly thread; an expired one
/// is refused here rather than sent.
async fn oauth_token(callback: &OauthTokenCallback) -> std::result::Result<String, String> {
    let callback = Arc::clone(callback);
    let (token, expires_ms) = tokio::task::spawn_blocking(move || callback())
        .await
        .map_err(|e| format!("the OAUTHBEARER token callback did not finish: {e}"))?
        .map_err(|e| format!("the OAUTHBEARER token callback failed: {e}"))?;
    if expires_ms <= now_ms() {
        return Err("the OAUTHBEARER token callback gave an expired token".into());
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use skiff_auth::scram::{ScramCredential, ScramMechanism, ServerExchange, parse_client_first};

    use super::*;

    /// A SCRAM-SHA-256 exchange for alice up to her client-final: the client waiting for the
    /// server-final, the broker's side, and the client-final.
    async fn scram_to_client_final() -> (SaslClient, ServerExchange, Vec<u8>) {
        let config = SaslConfig::with_password("SCRAM-SHA-256", "alice", "secret").expect("sasl");
        let credential =
            ScramCredential::from_password(ScramMechanism::Sha256, b"secret", b"salt", 4096)
                .expect("credential");
        let (mut client, first) = SaslClient::start(&config).await.expect("start");
        let first = parse_client_first(&first).expect("client-first");
        assert_eq!(first.username, "alice");
        let (server, server_first) =
            ServerExchange::server_first(ScramMechanism::Sha256, &first, &credential, "server")
                .expect("server-first");
        let client_final = client.step(&server_first).expect("client-final");
        (client, server, client_final.expect("a token"))
    }

    #[tokio::test]
    async fn scram_ends_with_the_brokers_proof() {
        let (mut client, server, client_final) = scram_to_client_final().await;
        let server_final = server.client_final(&client_final).expect("proof accepted");
        assert_eq!(client.step(&server_final), Ok(None));
    }

    #[tokio::test]
    async fn scram_refuses_a_broker_that_proves_nothing() {
        let (mut client, _, _) = scram_to_client_final().await;
        assert!(client.step(b"v=AAAA").is_err());
    }

    #[tokio::test]
    async fn plain_and_oauthbearer_send_one_token_and_oauth_errors_are_acknowledged() {
        let config = SaslConfig::with_password("PLAIN", "bob", "pw").expect("sasl");
        let (mut client, token) = SaslClient::start(&config).await.expect("start");
        assert_eq!(token, b"\0bob\0pw");
        assert_eq!(client.step(b""), Ok(None));

        let expires = now_ms() + 60_000;
        let config = SaslConfig::OauthBearer {
            token: Arc::new(move || Ok(("abc.def.ghi".to_string(), expires))),
        };
        let (_, token) = SaslClient::start(&config).await.expect("start");
        let parsed = skiff_auth::oauth::parse_client_initial(&token).expect("initial response");
        assert_eq!(parsed.token(), "abc.def.ghi");

        let (mut client, _) = SaslClient::start(&config).await.expect("start");
        let challenge = br#"{"status":"invalid_token"}"#;
        assert_eq!(client.step(challenge), Ok(Some(vec![OAUTH_ERROR_ACK])));
        let refused = client.step(b"").expect_err("refused");
        assert!(refused.contains("invalid_token"), "{refused}");

        let expired = SaslConfig::OauthBearer {
            token: Arc::new(|| Ok(("abc.def.ghi".to_string(), 1))),
        };
        let refused = SaslClient::start(&expired).await.err();
        assert!(refused.is_some_and(|e| e.contains("expired")));
    }

    #[test]
    fn nonces_are_32_printable_characters_and_differ() {
        let (a, b) = (
            client_nonce().expect("nonce"),
            client_nonce().expect("nonce"),
        );
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_graphic() && c != b','));
        assert_ne!(a, b);
    }

    #[test]
    fn reauthentication_comes_between_85_and_95_percent_of_the_lifetime() {
        let lifetime = Duration::from_millis(10_000);
        for _ in 0..100 {
            let delay = reauthentication_delay(lifetime);
            assert!(
                (Duration::from_millis(8_500)..=Duration::from_millis(9_500)).contains(&delay),
                "{delay:?}"
            );
        }
    }
}
