//! A connection's SASL session on a SASL listener (Kafka's `SaslServerAuthenticator`), as plain
//! data and functions with the time passed in:
//!
//! - before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served;
//!   anything else closes the connection;
//! - SaslHandshake picks one of the listener's mechanisms; v0 means the tokens that follow come as
//!   bare length-prefixed frames (Kafka's pre-KIP-152 clients), v1 as SaslAuthenticate requests;
//! - SaslAuthenticate runs the mechanism (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) to a principal,
//!   or fails, which closes the connection;
//! - with `connections.max.reauth.ms`, a session has a lifetime (KIP-368): the client
//!   re-authenticates on the same connection before it ends, as the same principal, and a
//!   request after it ended closes the connection.

use skiff_auth::principal::KafkaPrincipal;
use skiff_auth::scram::{ScramMechanism, ServerExchange};
use skiff_protocol::{ApiKey, error_codes};

use super::credentials::Credentials;
use super::oauth::OauthVerifier;
use crate::config::SaslMechanism;

/// What a connection does with a request, given its SASL session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Dispatch it to its handler.
    Serve,
    /// It belongs to the SASL exchange: [`SaslSession::handshake`] / [`SaslSession::authenticate`].
    Sasl,
    /// Close the connection (the reason is for the log).
    Close(&'static str),
}

/// Who authenticated, how, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub principal: KafkaPrincipal,
    pub mechanism: SaslMechanism,
    /// When the session ends (`connections.max.reauth.ms`, or an OAuth token's expiry).
    pub expires_at_ms: Option<i64>,
}

#[derive(Debug)]
enum State {
    /// Waiting for SaslHandshake (first authentication or a re-authentication).
    Idle,
    /// SaslHandshake chose a mechanism; the first token is next.
    Handshaken {
        mechanism: SaslMechanism,
        legacy: bool,
    },
    /// SCRAM: the server-first-message went out; the client-final is next.
    ScramFinal {
        mechanism: SaslMechanism,
        legacy: bool,
        username: String,
        exchange: Box<ServerExchange>,
    },
}

/// What the broker knows that a mechanism needs.
pub struct Verifiers<'a> {
    pub credentials: &'a Credentials,
    pub oauth: Option<&'a OauthVerifier>,
    /// `connections.max.reauth.ms` (0 = sessions do not end).
    pub max_reauth_ms: i64,
}

/// The outcome of one token.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes back; the exchange goes on.
    Challenge(Vec<u8>),
    /// Authenticated: send these bytes back (with the session lifetime, 0 = none).
    Done {
        bytes: Vec<u8>,
        session_lifetime_ms: i64,
    },
    /// SASL_AUTHENTICATION_FAILED with this message (never a secret), then close.
    Failed(String),
}

/// One connection's SASL state.
#[derive(Debug)]
pub struct SaslSession {
    mechanisms: Vec<SaslMechanism>,
    state: State,
    authenticated: Option<Authenticated>,
    /// Whether the client of the exchange under way can re-authenticate (SaslAuthenticate v1+).
    reauthenticates: bool,
}

impl SaslSession {
    /// A session on a listener serving `mechanisms`.
    pub fn new(mechanisms: Vec<SaslMechanism>) -> SaslSession {
        SaslSession {
            mechanisms,
            state: State::Idle,
            authenticated: None,
            reauthenticates: false,
        }
    }

    pub fn authenticated(&self) -> Option<&Authenticated> {
        self.authenticated.as_ref()
    }

    /// Whether the next frame is a bare SASL token (after a v0 SaslHandshake), not a request.
    pub fn expects_bare_token(&self) -> bool {
        matches!(
            self.state,
            State::Handshaken { legacy: true, .. } | State::ScramFinal { legacy: true, .. }
        )
    }

    /// What to do with a request of `api_key` at `now_ms`.
    pub fn gate(&self, api_key: ApiKey, now_ms: i64) -> Gate {
        let sasl = matches!(api_key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate);
        match &self.authenticated {
            None if sasl => Gate::Sasl,
            None if api_key == ApiKey::ApiVersions && matches!(self.state, State::Idle) => {
                Gate::Serve
            }
            None => Gate::Close("a request before SASL authentication"),
            // Re-authentication (KIP-368) runs on an authenticated connection.
            Some(_) if sasl => Gate::Sasl,
            Some(_) if !matches!(self.state, State::Idle) => {
                Gate::Close("a request in the middle of re-authentication")
            }
            Some(a) if a.expires_at_ms.is_some_and(|end| now_ms >= end) => {
                Gate::Close("the SASL session expired (connections.max.reauth.ms)")
            }
            Some(_) => Gate::Serve,
        }
    }

    /// SaslHandshake: `Ok` with the error code to answer (0, or UNSUPPORTED_SASL_MECHANISM after
    /// which the connection closes) and the listener's mechanisms; `Err` closes at once.
    pub fn handshake(&mut self, version: i16, mechanism: &str) -> Result<i16, &'static str> {
        if !matches!(self.state, State::Idle) {
            return Err("SaslHandshake in the middle of an exchange");
        }
        let Some(chosen) = SaslMechanism::parse(mechanism).filter(|m| self.mechanisms.contains(m))
        else {
            return Ok(error_codes::UNSUPPORTED_SASL_MECHANISM);
        };
        if let Some(current) = &self.authenticated {
            // KIP-368: re-authentication uses v1 and the mechanism of the first authentication.
            if version < 1 || current.mechanism != chosen {
                return Err("re-authentication must use SaslHandshake v1+ and the same mechanism");
            }
        }
        self.state = State::Handshaken {
            mechanism: chosen,
            legacy: version == 0,
        };
        Ok(error_codes::NONE)
    }

    /// The listener's mechanisms, for the SaslHandshake response.
    pub fn mechanisms(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.mechanisms.iter().map(|m| m.name())
    }

    /// A token: from SaslAuthenticate of `version`, or (`None`) a bare frame after a v0
    /// handshake. `server_nonce` is fresh random printable text (SCRAM uses it).
    pub fn authenticate(
        &mut self,
        token: &[u8],
        version: Option<i16>,
        verifiers: &Verifiers<'_>,
        server_nonce: &str,
        now_ms: i64,
    ) -> Step {
        self.reauthenticates = version.is_some_and(|v| v >= 1);
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Idle => Step::Failed("SaslAuthenticate before SaslHandshake".into()),
            State::Handshaken { mechanism, legacy } => match mechanism {
                SaslMechanism::Plain => self.plain(token, verifiers, now_ms),
                SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                    self.scram_first(mechanism, legacy, token, verifiers, server_nonce)
                }
                SaslMechanism::OauthBearer => self.oauth(token, verifiers, now_ms),
            },
            State::ScramFinal {
                mechanism,
                username,
                exchange,
                ..
            } => match exchange.client_final(token) {
                Ok(server_final) => self.finish(
                    KafkaPrincipal::user(&username),
                    mechanism,
                    server_final,
                    None,
                    verifiers,
                    now_ms,
                ),
                Err(e) => {
                    tracing::debug!(error = %e, "SCRAM client-final-message refused");
                    invalid_credentials(mechanism)
                }
            },
        }
    }

    fn plain(&mut self, token: &[u8], verifiers: &Verifiers<'_>, now_ms: i64) -> Step {
        let message = match skiff_auth::plain::parse(token) {
            Ok(message) => message,
            Err(e) => return Step::Failed(format!("Authentication failed: {e}")),
        };
        if !verifiers
            .credentials
            .check_password(&message.username, message.password())
        {
            return invalid_credentials(SaslMechanism::Plain);
        }
        self.finish(
            KafkaPrincipal::user(&message.username),
            SaslMechanism::Plain,
            Vec::new(),
            None,
            verifiers,
            now_ms,
        )
    }

    fn scram_first(
        &mut self,
        mechanism: SaslMechanism,
        legacy: bool,
        token: &[u8],
        verifiers: &Verifiers<'_>,
        server_nonce: &str,
    ) -> Step {
        let scram = match mechanism {
            SaslMechanism::ScramSha256 => ScramMechanism::Sha256,
            _ => ScramMechanism::Sha512,
        };
        let first = match skiff_auth::scram::parse_client_first(token) {
            Ok(first) => first,
            Err(e) => return Step::Failed(format!("Authentication failed: {e}")),
        };
        if first.authzid.as_ref().is_some_and(|a| *a != first.username) {
            return Step::Failed(
                "Authentication failed: the authorization ID differs from the user name".into(),
            );
        }
        if !first.extensions.is_empty() {
            // Kafka's `tokenauth` extension is for delegation tokens, which Skiff does not have.
            return Step::Failed(
                "Authentication failed: SCRAM extensions are not supported".into(),
            );
        }
        let Some(credential) = verifiers.credentials.get(&first.username, scram) else {
            return invalid_credentials(mechanism);
        };
        match ServerExchange::server_first(scram, &first, credential, server_nonce) {
            Ok((exchange, server_first)) => {
                self.state = State::ScramFinal {
                    mechanism,
                    legacy,
                    username: first.username,
                    exchange: Box::new(exchange),
                };
                Step::Challenge(server_first)
            }
            Err(e) => Step::Failed(format!("Authentication failed: {e}")),
        }
    }

    fn oauth(&mut self, token: &[u8], verifiers: &Verifiers<'_>, now_ms: i64) -> Step {
        let Some(verifier) = verifiers.oauth else {
            return Step::Failed("Authentication failed: OAUTHBEARER is not configured".into());
        };
        let initial = match skiff_auth::oauth::parse_client_initial(token) {
            Ok(initial) => initial,
            Err(e) => return Step::Failed(format!("Authentication failed: {e}")),
        };
        match verifier.validate(initial.token(), now_ms) {
            Ok(token) => self.finish(
                KafkaPrincipal::user(&token.principal),
                SaslMechanism::OauthBearer,
                Vec::new(),
                Some(token.expires_at_ms),
                verifiers,
                now_ms,
            ),
            Err(e) => Step::Failed(format!("Authentication failed: invalid token: {e}")),
        }
    }

    /// Ends an exchange that proved `principal`: a re-authentication must prove the same one.
    fn finish(
        &mut self,
        principal: KafkaPrincipal,
        mechanism: SaslMechanism,
        bytes: Vec<u8>,
        credential_expires_at_ms: Option<i64>,
        verifiers: &Verifiers<'_>,
        now_ms: i64,
    ) -> Step {
        let reauthenticates = self.reauthenticates;
        if let Some(current) = &self.authenticated
            && current.principal != principal
        {
            return Step::Failed(format!(
                "Authentication failed: re-authentication as {principal} on a connection of {}",
                current.principal
            ));
        }
        // KIP-368: sessions end only when `connections.max.reauth.ms` is set and the client can
        // re-authenticate (SaslAuthenticate v1+); then no later than its credential expires.
        let expires_at_ms = (verifiers.max_reauth_ms > 0 && reauthenticates).then(|| {
            let end = now_ms.saturating_add(verifiers.max_reauth_ms);
            credential_expires_at_ms.map_or(end, |expiry| end.min(expiry))
        });
        self.authenticated = Some(Authenticated {
            principal,
            mechanism,
            expires_at_ms,
        });
        Step::Done {
            bytes,
            session_lifetime_ms: expires_at_ms.map_or(0, |end| (end - now_ms).max(0)),
        }
    }
}

/// Kafka's answer to a wrong user or password: the same for both, so neither is revealed.
fn invalid_credentials(mechanism: SaslMechanism) -> Step {
    Step::Failed(format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
        mechanism.name()
    ))
}
