//! The security keys: Kafka's `ssl.*` and `sasl.*` broker configs. A listener's TLS and SASL
//! keys may be given for one listener as `listener.name.<name>.<key>` (which wins) or for all
//! listeners as `<key>`, as in Kafka.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use super::{ListenerConfig, parse_num};

/// Kafka's `security.protocol` values, as `listener.security.protocol.map` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// Asked for; a client without one still connects (as `User:ANONYMOUS` on SSL listeners).
    Requested,
    /// A client without a certificate signed by the truststore is refused.
    Required,
}

/// A TLS version of `ssl.enabled.protocols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsProtocol {
    V12,
    V13,
}

/// A listener's TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ssl.keystore.location`: the private key and certificate chain, PEM.
    pub keystore: PathBuf,
    /// `ssl.truststore.location`: the CA bundle client certificates are checked against, PEM.
    pub truststore: Option<PathBuf>,
    /// `ssl.client.auth`.
    pub client_auth: ClientAuth,
    /// `ssl.enabled.protocols` (default TLSv1.2 and TLSv1.3).
    pub protocols: Vec<TlsProtocol>,
    /// `ssl.cipher.suites`: IANA names; empty means rustls' defaults.
    pub cipher_suites: Vec<String>,
    /// `ssl.principal.mapping.rules`: how a client certificate's subject becomes a user name.
    pub principal_mapping_rules: String,
}

/// A SASL mechanism of `sasl.enabled.mechanisms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    OauthBearer,
}

impl SaslMechanism {
    pub const ALL: [SaslMechanism; 4] = [
        SaslMechanism::Plain,
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
        SaslMechanism::OauthBearer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OauthBearer => "OAUTHBEARER",
        }
    }

    /// Mechanism names are case-sensitive in Kafka's SaslHandshake.
    pub fn parse(name: &str) -> Option<SaslMechanism> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// What `sasl.enabled.mechanisms` means when it is not set: the SCRAM mechanisms (PLAIN and
/// OAUTHBEARER need saying; Kafka's own default, GSSAPI, is not served).
const DEFAULT_MECHANISMS: [SaslMechanism; 2] =
    [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512];

/// The broker-wide security settings (listeners carry their own TLS and SASL settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityConfig {
    /// `connection.failed.authentication.delay.ms`: how long a failed authentication waits
    /// before its answer and the close (Kafka's default 100).
    pub failed_authentication_delay_ms: u64,
    /// `connections.max.reauth.ms`: the longest a SASL session lasts before the client must
    /// re-authenticate (KIP-368); 0 = no limit.
    pub max_reauth_ms: i64,
    /// `ssl.reload.interval.ms` (Skiff's): how often TLS listeners look for changed key,
    /// certificate and truststore files, which are then loaded without a restart.
    pub tls_reload_interval_ms: u64,
    /// OAUTHBEARER token validation, when `sasl.oauthbearer.jwks.endpoint.url` is set.
    pub oauth: Option<OauthSettings>,
    /// `authorizer = "standard"` (or Kafka's `authorizer.class.name` naming StandardAuthorizer):
    /// ACLs decide what each principal may do. `None`: everything is allowed.
    pub authorizer: Option<AuthorizerSettings>,
    /// The admin HTTP listener's TLS (`admin.ssl.*`, the listener keys with an `admin.` prefix).
    pub admin_tls: Option<TlsSettings>,
    /// `client.instance.id.binding` (Skiff's): what happens when a principal presents a client
    /// instance ID another principal owns. Default: `warn` when a listener authenticates
    /// clients (SASL, or TLS asking for certificates), else `off`.
    pub instance_binding: InstanceBinding,
    /// `client.instance.id.binding.ms`: how long an instance ID stays its owner's after its last
    /// connection closed (default 5 minutes).
    pub instance_binding_ms: i64,
    /// `admin.token.file`: the admin HTTP listener answers only requests that carry this file's
    /// token (`Authorization: Bearer <token>`); `/health` stays open.
    pub admin_token_file: Option<PathBuf>,
}

/// `client.instance.id.binding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceBinding {
    /// Instance and member IDs are not tied to principals (Kafka's behaviour).
    Off,
    /// Another principal's ID is flagged (client view, `/metrics`, log) but served.
    Warn,
    /// Another principal's ID is refused: INVALID_REQUEST, and its telemetry is not accepted;
    /// another principal's member ID is UNKNOWN_MEMBER_ID.
    Enforce,
}

/// Kafka's StandardAuthorizer settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizerSettings {
    /// `super.users`: principals every check allows (`User:admin;User:CN=ops`).
    pub super_users: Vec<skiff_auth::principal::KafkaPrincipal>,
    /// `allow.everyone.if.no.acl.found` (default false).
    pub allow_everyone_if_no_acl_found: bool,
}

/// How OAUTHBEARER tokens are checked: signed JWTs, against the keys of a JWKS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OauthSettings {
    /// `sasl.oauthbearer.jwks.endpoint.url`: `https://...` or `file:///path`.
    pub jwks_url: String,
    /// `sasl.oauthbearer.jwks.endpoint.refresh.ms`: how often the keys are fetched again
    /// (Kafka's default: one hour). A token signed by an unknown key ID also triggers a fetch.
    pub refresh_ms: u64,
    /// `sasl.oauthbearer.jwks.endpoint.truststore.location` (Skiff's): a PEM file of the CA
    /// certificates an `https://` endpoint's certificate must chain to; the system's CAs when
    /// unset.
    pub jwks_truststore: Option<PathBuf>,
    /// `sasl.oauthbearer.expected.issuer`, `.expected.audience`, `.sub.claim.name`,
    /// `.clock.skew.seconds`.
    pub validator: skiff_auth::oauth::JwtValidator,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            failed_authentication_delay_ms: 100,
            max_reauth_ms: 0,
            tls_reload_interval_ms: 10_000,
            oauth: None,
            authorizer: None,
            instance_binding: InstanceBinding::Off,
            instance_binding_ms: 300_000,
            admin_tls: None,
            admin_token_file: None,
        }
    }
}

/// Takes the broker-wide security keys; `authenticates`: whether a listener authenticates its
/// clients (which turns instance ID binding on by default).
pub(super) fn take_security(
    entries: &mut BTreeMap<String, String>,
    authenticates: bool,
) -> Result<SecurityConfig> {
    let mut security = SecurityConfig::default();
    if let Some(v) = entries.remove("connection.failed.authentication.delay.ms") {
        security.failed_authentication_delay_ms =
            parse_num(&v, "connection.failed.authentication.delay.ms", 0, 600_000)? as u64;
    }
    if let Some(v) = entries.remove("connections.max.reauth.ms") {
        security.max_reauth_ms =
            parse_num(&v, "connections.max.reauth.ms", 0, i64::from(i32::MAX))?;
    }
    if let Some(v) = entries.remove("ssl.reload.interval.ms") {
        security.tls_reload_interval_ms =
            parse_num(&v, "ssl.reload.interval.ms", 10, 86_400_000)? as u64;
    }
    security.oauth = take_oauth(entries)?;
    security.authorizer = take_authorizer(entries)?;
    if let Some(v) = entries.remove("client.instance.id.binding") {
        security.instance_binding = match v.trim() {
            "off" => InstanceBinding::Off,
            "warn" => InstanceBinding::Warn,
            "enforce" => InstanceBinding::Enforce,
            other => bail!(
                "client.instance.id.binding = {other:?}: expected \"off\", \"warn\" or \"enforce\""
            ),
        };
    } else if authenticates {
        security.instance_binding = InstanceBinding::Warn;
    }
    if let Some(v) = entries.remove("client.instance.id.binding.ms") {
        security.instance_binding_ms =
            parse_num(&v, "client.instance.id.binding.ms", 0, i64::from(i32::MAX))?;
    }
    if entries.keys().any(|k| k.starts_with("admin.ssl.")) {
        let settings =
            tls_settings(|key| entries.remove(&format!("admin.{key}"))).context("admin.ssl.*")?;
        if let Some(key) = entries.keys().find(|k| k.starts_with("admin.ssl.")) {
            bail!("{key}: not a TLS key (admin.ssl.* takes the listener TLS keys)");
        }
        security.admin_tls = Some(settings);
    }
    security.admin_token_file = entries
        .remove("admin.token.file")
        .filter(|v| !v.trim().is_empty())
        .map(|v| PathBuf::from(v.trim()));
    Ok(security)
}

/// The Java class Kafka names its ACL authorizer by.
const STANDARD_AUTHORIZER_CLASS: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// `authorizer` / `authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`.
fn take_authorizer(entries: &mut BTreeMap<String, String>) -> Result<Option<AuthorizerSettings>> {
    let on = match (
        entries.remove("authorizer"),
        entries.remove("authorizer.class.name"),
    ) {
        (Some(_), Some(_)) => bail!("authorizer and authorizer.class.name both given: use one"),
        (Some(v), None) => match v.trim() {
            "standard" => true,
            "" | "none" | "off" => false,
            other => bail!("authorizer = {other:?}: expected \"standard\" or \"none\""),
        },
        (None, Some(v)) => match v.trim() {
            STANDARD_AUTHORIZER_CLASS => true,
            "" => false,
            other => bail!(
                "authorizer.class.name = {other:?}: Skiff's authorizer is Kafka's StandardAuthorizer ({STANDARD_AUTHORIZER_CLASS})"
            ),
        },
        (None, None) => false,
    };
    let super_users = entries.remove("super.users");
    let allow_everyone = entries.remove("allow.everyone.if.no.acl.found");
    if !on {
        if super_users.is_some() || allow_everyone.is_some() {
            bail!("super.users and allow.everyone.if.no.acl.found need authorizer = \"standard\"");
        }
        return Ok(None);
    }
    let super_users = match super_users {
        Some(v) => skiff_auth::acl::parse_super_users(&v)
            .map_err(|e| anyhow::anyhow!("super.users = {v:?}: {e}"))?,
        None => Vec::new(),
    };
    let allow_everyone_if_no_acl_found = match allow_everyone {
        Some(v) => super::parse_bool(&v, "allow.everyone.if.no.acl.found")?,
        None => false,
    };
    Ok(Some(AuthorizerSettings {
        super_users,
        allow_everyone_if_no_acl_found,
    }))
}

/// The `sasl.oauthbearer.*` keys; they need `sasl.oauthbearer.jwks.endpoint.url`.
fn take_oauth(entries: &mut BTreeMap<String, String>) -> Result<Option<OauthSettings>> {
    let mut validator = skiff_auth::oauth::JwtValidator::default();
    let issuer = entries.remove("sasl.oauthbearer.expected.issuer");
    validator.expected_issuer = issuer.filter(|v| !v.trim().is_empty());
    if let Some(v) = entries.remove("sasl.oauthbearer.expected.audience") {
        validator.expected_audience = parse_list(&v).map(str::to_string).collect();
    }
    if let Some(v) = entries.remove("sasl.oauthbearer.sub.claim.name") {
        if v.trim().is_empty() {
            bail!("sasl.oauthbearer.sub.claim.name must not be empty");
        }
        validator.sub_claim_name = v.trim().to_string();
    }
    if let Some(v) = entries.remove("sasl.oauthbearer.clock.skew.seconds") {
        validator.clock_skew_s =
            parse_num(&v, "sasl.oauthbearer.clock.skew.seconds", 0, 3600)? as u64;
    }
    let refresh_ms = match entries.remove("sasl.oauthbearer.jwks.endpoint.refresh.ms") {
        Some(v) => parse_num(
            &v,
            "sasl.oauthbearer.jwks.endpoint.refresh.ms",
            10,
            86_400_000,
        )? as u64,
        None => 3_600_000,
    };
    let jwks_truststore = entries
        .remove("sasl.oauthbearer.jwks.endpoint.truststore.location")
        .filter(|v| !v.trim().is_empty())
        .map(|v| PathBuf::from(v.trim()));
    let Some(jwks_url) = entries.remove("sasl.oauthbearer.jwks.endpoint.url") else {
        if validator != skiff_auth::oauth::JwtValidator::default() || jwks_truststore.is_some() {
            bail!("the sasl.oauthbearer.* keys need sasl.oauthbearer.jwks.endpoint.url");
        }
        return Ok(None);
    };
    let jwks_url = jwks_url.trim().to_string();
    if !jwks_url.starts_with("https://") && !jwks_url.starts_with("file://") {
        bail!(
            "sasl.oauthbearer.jwks.endpoint.url = {jwks_url:?}: expected https://... or file:///..."
        );
    }
    if jwks_truststore.is_some() && !jwks_url.starts_with("https://") {
        bail!("sasl.oauthbearer.jwks.endpoint.truststore.location is for an https:// JWKS URL");
    }
    Ok(Some(OauthSettings {
        jwks_url,
        refresh_ms,
        jwks_truststore,
        validator,
    }))
}

/// Reads a listener's key: `listener.name.<name>.<key>` first, then `<key>`. The per-listener
/// key is removed; shared keys stay until [`take_listener_security`] has served every listener.
fn listener_key(
    entries: &mut BTreeMap<String, String>,
    listener: &str,
    key: &str,
) -> Option<String> {
    let own = format!("listener.name.{}.{key}", listener.to_ascii_lowercase());
    entries.remove(&own).or_else(|| entries.get(key).cloned())
}

/// The keys a listener may have: TLS ones, then SASL ones.
const TLS_KEYS: [&str; 8] = [
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
    "ssl.principal.mapping.rules",
];
const SASL_KEYS: [&str; 1] = ["sasl.enabled.mechanisms"];

/// Fills each listener's TLS and SASL settings from its keys, then removes the shared keys.
/// A key under `listener.name.` for a listener that does not exist, or one that is not a
/// listener key, is refused.
pub(super) fn take_listener_security(
    entries: &mut BTreeMap<String, String>,
    listeners: &mut [ListenerConfig],
) -> Result<()> {
    for listener in listeners.iter_mut() {
        let name = listener.name.clone();
        let context = || format!("listener {name}");
        if listener.protocol.uses_tls() {
            listener.tls = Some(take_tls(entries, &name).with_context(context)?);
        } else {
            for key in TLS_KEYS {
                entries.remove(&format!(
                    "listener.name.{}.{key}",
                    name.to_ascii_lowercase()
                ));
            }
        }
        if listener.protocol.uses_sasl() {
            listener.sasl_mechanisms = take_mechanisms(entries, &name).with_context(context)?;
        }
    }
    if let Some(key) = entries.keys().find(|k| k.starts_with("listener.name.")) {
        bail!(
            "{key}: not a key Skiff reads per listener (listener.name.<listener>.<key> with one of: {})",
            TLS_KEYS
                .iter()
                .chain(&SASL_KEYS)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for key in TLS_KEYS.iter().chain(&SASL_KEYS) {
        entries.remove(*key);
    }
    Ok(())
}

fn take_tls(entries: &mut BTreeMap<String, String>, listener: &str) -> Result<TlsSettings> {
    tls_settings(|key| listener_key(entries, listener, key))
}

/// TLS settings from `lookup` (which reads one of [`TLS_KEYS`]).
fn tls_settings(mut lookup: impl FnMut(&str) -> Option<String>) -> Result<TlsSettings> {
    for key in ["ssl.keystore.type", "ssl.truststore.type"] {
        if let Some(kind) = lookup(key)
            && !kind.trim().eq_ignore_ascii_case("PEM")
        {
            bail!("{key} = {kind:?}: Skiff reads PEM files only (set it to \"PEM\")");
        }
    }
    let keystore = lookup("ssl.keystore.location")
        .filter(|v| !v.trim().is_empty())
        .context(
            "ssl.keystore.location is needed (a PEM file with the key and its certificate chain)",
        )?;
    let truststore = lookup("ssl.truststore.location")
        .filter(|v| !v.trim().is_empty())
        .map(PathBuf::from);
    let client_auth = match lookup("ssl.client.auth").as_deref().map(str::trim) {
        None | Some("none") => ClientAuth::None,
        Some("requested") => ClientAuth::Requested,
        Some("required") => ClientAuth::Required,
        Some(other) => {
            bail!("ssl.client.auth = {other:?}: expected \"none\", \"requested\" or \"required\"")
        }
    };
    if client_auth != ClientAuth::None && truststore.is_none() {
        bail!("ssl.client.auth = \"requested\" or \"required\" needs ssl.truststore.location");
    }
    let protocols = match lookup("ssl.enabled.protocols") {
        None => vec![TlsProtocol::V12, TlsProtocol::V13],
        Some(list) => parse_list(&list)
            .map(|p| match p {
                "TLSv1.2" => Ok(TlsProtocol::V12),
                "TLSv1.3" => Ok(TlsProtocol::V13),
                other => bail!("ssl.enabled.protocols: {other:?} is not TLSv1.2 or TLSv1.3"),
            })
            .collect::<Result<Vec<_>>>()?,
    };
    if protocols.is_empty() {
        bail!("ssl.enabled.protocols is empty");
    }
    let cipher_suites = lookup("ssl.cipher.suites")
        .map(|list| parse_list(&list).map(str::to_string).collect())
        .unwrap_or_default();
    let principal_mapping_rules =
        lookup("ssl.principal.mapping.rules").unwrap_or_else(|| "DEFAULT".to_string());
    Ok(TlsSettings {
        keystore: PathBuf::from(keystore.trim()),
        truststore,
        client_auth,
        protocols,
        cipher_suites,
        principal_mapping_rules,
    })
}

fn take_mechanisms(
    entries: &mut BTreeMap<String, String>,
    listener: &str,
) -> Result<Vec<SaslMechanism>> {
    let Some(list) = listener_key(entries, listener, "sasl.enabled.mechanisms") else {
        return Ok(DEFAULT_MECHANISMS.to_vec());
    };
    let mechanisms = parse_list(&list)
        .map(|name| {
            SaslMechanism::parse(name).with_context(|| {
                format!(
                    "sasl.enabled.mechanisms: {name:?} is not served (one of: {})",
                    SaslMechanism::ALL.map(SaslMechanism::name).join(", ")
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if mechanisms.is_empty() {
        bail!("sasl.enabled.mechanisms is empty");
    }
    Ok(mechanisms)
}

fn parse_list(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}
