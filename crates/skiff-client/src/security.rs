//! Security settings, as Kafka's client properties name them: `security.protocol`, the `ssl.*`
//! files and the SASL mechanism with its credentials.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

pub use skiff_auth::scram::ScramMechanism;

use crate::error::{Error, Result};

/// Kafka's `security.protocol`: whether connections use TLS, SASL, both or neither.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    /// Neither TLS nor SASL (the default).
    #[default]
    Plaintext,
    /// TLS; a client certificate, when configured, says who the client is.
    Ssl,
    /// SASL over plain TCP.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    /// Kafka's name: `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections are TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether connections authenticate with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses Kafka's names in any letter case.
impl FromStr for SecurityProtocol {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(text.trim()))
            .ok_or_else(|| {
                Error::Config(format!(
                    "security.protocol {text:?}: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
                ))
            })
    }
}

/// Kafka's `ssl.endpoint.identification.algorithm`: whether the broker certificate must name the
/// host the client connected to. The certificate chain is verified either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum EndpointIdentification {
    /// `https`: the certificate must be valid for the broker's host name or IP address.
    #[default]
    Https,
    /// `none` (or empty): any host name; the chain must still lead to a trusted CA.
    None,
}

impl FromStr for EndpointIdentification {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "https" => Ok(EndpointIdentification::Https),
            "" | "none" => Ok(EndpointIdentification::None),
            _ => Err(Error::Config(format!(
                "ssl.endpoint.identification.algorithm {text:?}: expected https or none"
            ))),
        }
    }
}

/// TLS settings, used when the security protocol is `SSL` or `SASL_SSL`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// `ssl.ca.location`: the CA certificates (PEM) the broker's certificate must chain to;
    /// `None`: the operating system's CA certificates.
    pub ca_location: Option<PathBuf>,
    /// `ssl.certificate.location`: this client's certificate chain (PEM), for brokers that ask
    /// for one (`ssl.client.auth`). Needs `key_location`.
    pub certificate_location: Option<PathBuf>,
    /// `ssl.key.location`: the certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1, not
    /// encrypted).
    pub key_location: Option<PathBuf>,
    /// `ssl.endpoint.identification.algorithm`.
    pub endpoint_identification: EndpointIdentification,
}

/// Gives an OAUTHBEARER token and when it expires (milliseconds since the Unix epoch), or why
/// there is none; librdkafka's `oauth_cb`. It is called for every authentication, that is on
/// every new connection and every re-authentication, from a blocking-friendly thread: a callback
/// that fetches tokens over the network should cache them.
pub type OauthTokenCallback =
    Arc<dyn Fn() -> std::result::Result<(String, i64), String> + Send + Sync>;

/// A SASL mechanism and what it authenticates with (`sasl.mechanism`, `sasl.username`,
/// `sasl.password`). `Debug` never shows a password.
#[derive(Clone)]
pub enum SaslConfig {
    /// `PLAIN`: the password goes to the broker as is (use it over TLS only).
    Plain { username: String, password: String },
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`: the password never leaves the client.
    Scram {
        mechanism: ScramMechanism,
        username: String,
        password: String,
    },
    /// `OAUTHBEARER`: a bearer token from the callback.
    OauthBearer { token: OauthTokenCallback },
}

impl SaslConfig {
    /// The mechanism named as Kafka does (`PLAIN`, `SCRAM-SHA-256`, ...), with a user name and
    /// password. `OAUTHBEARER` needs a token callback instead: [`SaslConfig::OauthBearer`].
    pub fn with_password(
        mechanism: &str,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Result<SaslConfig> {
        let (username, password) = (username.into(), password.into());
        let name = mechanism.trim().to_ascii_uppercase();
        if name == "PLAIN" {
            return Ok(SaslConfig::Plain { username, password });
        }
        if let Some(mechanism) = ScramMechanism::from_name(&name) {
            return Ok(SaslConfig::Scram {
                mechanism,
                username,
                password,
            });
        }
        Err(Error::Config(format!(
            "sasl.mechanism {mechanism:?}: expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with a \
             user name and password (OAUTHBEARER takes a token callback)"
        )))
    }

    /// The mechanism's SASL name, as SaslHandshake sends it.
    pub fn mechanism(&self) -> &'static str {
        match self {
            SaslConfig::Plain { .. } => "PLAIN",
            SaslConfig::Scram { mechanism, .. } => mechanism.name(),
            SaslConfig::OauthBearer { .. } => "OAUTHBEARER",
        }
    }

    /// The user name, for the mechanisms that have one.
    pub fn username(&self) -> Option<&str> {
        match self {
            SaslConfig::Plain { username, .. } | SaslConfig::Scram { username, .. } => {
                Some(username)
            }
            SaslConfig::OauthBearer { .. } => None,
        }
    }
}

impl fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslConfig")
            .field("mechanism", &self.mechanism())
            .field("username", &self.username())
            .finish_non_exhaustive()
    }
}

/// How connections are secured: the protocol, its TLS files and its SASL mechanism.
#[derive(Debug, Clone, Default)]
pub struct SecurityConfig {
    /// `security.protocol`.
    pub protocol: SecurityProtocol,
    /// Used with `SSL` and `SASL_SSL`.
    pub tls: TlsConfig,
    /// Needed with `SASL_PLAINTEXT` and `SASL_SSL`, refused with the others.
    pub sasl: Option<SaslConfig>,
}

impl SecurityConfig {
    /// Checks that the parts fit the protocol: SASL settings exactly when it uses SASL, a key
    /// with a client certificate and the reverse.
    pub(crate) fn validate(&self) -> Result<()> {
        let protocol = self.protocol;
        match (&self.sasl, protocol.uses_sasl()) {
            (None, true) => {
                return Err(Error::Config(format!(
                    "security.protocol {protocol} needs a SASL mechanism (sasl.mechanism)"
                )));
            }
            (Some(sasl), false) => {
                return Err(Error::Config(format!(
                    "sasl.mechanism {} is set but security.protocol {protocol} does not use SASL \
                     (SASL_PLAINTEXT or SASL_SSL does)",
                    sasl.mechanism()
                )));
            }
            _ => {}
        }
        match (&self.tls.certificate_location, &self.tls.key_location) {
            (Some(_), None) => Err(Error::Config(
                "ssl.certificate.location needs ssl.key.location".into(),
            )),
            (None, Some(_)) => Err(Error::Config(
                "ssl.key.location needs ssl.certificate.location".into(),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_and_mechanisms_parse_from_kafka_names() {
        assert_eq!(
            "sasl_ssl".parse::<SecurityProtocol>().ok(),
            Some(SecurityProtocol::SaslSsl)
        );
        assert!("TLS".parse::<SecurityProtocol>().is_err());
        assert_eq!(
            "".parse::<EndpointIdentification>().ok(),
            Some(EndpointIdentification::None)
        );
        assert_eq!(
            "HTTPS".parse::<EndpointIdentification>().ok(),
            Some(EndpointIdentification::Https)
        );
        let scram = SaslConfig::with_password("scram-sha-512", "alice", "pw").expect("scram");
        assert_eq!(scram.mechanism(), "SCRAM-SHA-512");
        assert_eq!(
            SaslConfig::with_password("PLAIN", "bob", "pw")
                .expect("plain")
                .mechanism(),
            "PLAIN"
        );
        assert!(SaslConfig::with_password("GSSAPI", "bob", "pw").is_err());
    }

    #[test]
    fn debug_output_never_shows_the_password() {
        let sasl = SaslConfig::with_password("PLAIN", "alice", "hunter2").expect("plain");
        let shown = format!("{sasl:?}");
        assert!(
            shown.contains("alice") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn sasl_settings_must_fit_the_protocol() {
        let sasl = SaslConfig::with_password("PLAIN", "alice", "pw").expect("plain");
        let mut config = SecurityConfig {
            protocol: SecurityProtocol::SaslSsl,
            ..Default::default()
        };
        assert!(config.validate().is_err(), "SASL_SSL without a mechanism");
        config.sasl = Some(sasl);
        assert!(config.validate().is_ok());
        config.protocol = SecurityProtocol::Ssl;
        assert!(config.validate().is_err(), "a mechanism on SSL");
        config.sasl = None;
        config.tls.certificate_location = Some("client.pem".into());
        assert!(config.validate().is_err(), "a certificate without its key");
    }
}
