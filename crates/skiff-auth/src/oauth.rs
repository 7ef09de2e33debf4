//! OAUTHBEARER (RFC 7628) as Kafka's `OAuthBearerSaslServer` speaks it, and the JWT checks
//! behind it, as Kafka's broker-side JWT validator does them against a JWKS
//! (`sasl.oauthbearer.jwks.endpoint.url`, `sasl.oauthbearer.expected.issuer`,
//! `sasl.oauthbearer.expected.audience`, `sasl.oauthbearer.sub.claim.name`,
//! `sasl.oauthbearer.clock.skew.seconds`):
//!
//! - [`parse_client_initial`] / [`client_initial`]: the client's first message, a GS2 header then
//!   `\x01`-separated `key=value` pairs: `auth=Bearer <token>` and the SASL extensions;
//! - [`error_challenge`] / [`is_error_ack`]: a failed token is answered with a JSON status, which
//!   the client acknowledges with a lone `\x01` before the server fails the exchange;
//! - [`Jwks`] and [`JwtValidator`]: the token's signature and claims.
//!
//! Fetching the JWKS and reading the clock are the broker's: [`Jwks::parse`] takes the
//! document's bytes, [`JwtValidator::validate`] the current time. No error carries the token.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::scram::{decode_saslname, encode_saslname};

/// Separates the key/value pairs of the client's message (RFC 7628 §3.1: `kvsep`).
const SEPARATOR: char = '\x01';
/// The key of the pair that carries the token; no extension may use it.
const AUTH_KEY: &str = "auth";

/// Why an OAUTHBEARER message, a JWKS or a token was refused. No variant carries the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OauthError {
    /// The client's message does not follow RFC 7628's grammar; says what was wrong.
    #[error("malformed OAUTHBEARER message: {0}")]
    Malformed(&'static str),
    /// A SASL extension whose name is not alphabetic, or whose value is not printable.
    #[error("invalid SASL extension {0:?}")]
    InvalidExtension(String),
    /// The JWKS document is not a JWK set, or has no key this validator can use.
    #[error("invalid JWKS: {0}")]
    InvalidJwks(&'static str),
    /// The token is not a well-formed JWS compact serialization with JSON header and claims.
    #[error("malformed JWT: {0}")]
    MalformedToken(&'static str),
    /// The token says `alg: none`: it is not signed.
    #[error("unsecured JWT (alg none) refused")]
    UnsecuredToken,
    /// The token is signed with a shared secret (HS256/384/512), which a JWKS cannot vouch for.
    #[error("symmetric JWT algorithm {0} refused: only public-key signatures are accepted")]
    SymmetricAlgorithm(String),
    #[error("unsupported JWT algorithm {0:?}")]
    UnsupportedAlgorithm(String),
    /// The token's `kid` names no key of the JWKS.
    #[error("no key with id {0:?} in the JWKS")]
    UnknownKey(String),
    /// The token has no `kid`, and the JWKS has more than one key to choose from.
    #[error("JWT has no key id and the JWKS has several keys")]
    MissingKeyId,
    /// The token's algorithm is not one its key can verify.
    #[error("JWT algorithm {0:?} does not match its key")]
    KeyAlgorithmMismatch(Algorithm),
    #[error("invalid JWT signature")]
    InvalidSignature,
    #[error("JWT expired at {expires_at_ms} ms (now {now_ms} ms)")]
    Expired { expires_at_ms: i64, now_ms: i64 },
    /// The `nbf` claim is later than now plus the allowed clock skew.
    #[error("JWT not valid before {not_before_ms} ms (now {now_ms} ms)")]
    NotYetValid { not_before_ms: i64, now_ms: i64 },
    /// The `iat` claim is later than now plus the allowed clock skew.
    #[error("JWT issued in the future, at {issued_at_ms} ms (now {now_ms} ms)")]
    IssuedInFuture { issued_at_ms: i64, now_ms: i64 },
    #[error("JWT has no {0} claim")]
    MissingClaim(String),
    /// A claim has the wrong JSON type, or an empty value where one is required.
    #[error("JWT claim {0} is invalid")]
    InvalidClaim(String),
    #[error("JWT issuer is not the expected one")]
    InvalidIssuer,
    #[error("JWT audience includes none of the expected ones")]
    InvalidAudience,
}

/// A parsed client initial response.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientInitial {
    token: String,
    /// The GS2 header's `a=` authorization identity, unescaped.
    pub authzid: Option<String>,
    /// The SASL extensions: every pair but `auth`.
    pub extensions: BTreeMap<String, String>,
}

impl ClientInitial {
    /// The bearer token (a JWT, for the validator).
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl fmt::Debug for ClientInitial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientInitial")
            .field("token", &"<redacted>")
            .field("authzid", &self.authzid)
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// Parses the client initial response `n,[a=authzid],\x01auth=Bearer <token>\x01[key=value\x01...]\x01`.
/// The scheme is case-insensitive and the token is made of `[-_.A-Za-z0-9]`, as Kafka's; other
/// keys are SASL extensions, with alphabetic names and printable values; no key may repeat.
pub fn parse_client_initial(msg: &[u8]) -> Result<ClientInitial, OauthError> {
    let msg = std::str::from_utf8(msg).map_err(|_| OauthError::Malformed("not UTF-8"))?;
    let (gs2_header, pairs) = msg.split_once(SEPARATOR).ok_or(OauthError::Malformed(
        "no key/value pairs after the GS2 header",
    ))?;
    let authzid = parse_gs2_header(gs2_header)?;
    // Each pair ends with a separator, and one more ends the list.
    let pairs = pairs
        .strip_suffix(SEPARATOR)
        .filter(|pairs| pairs.is_empty() || pairs.ends_with(SEPARATOR))
        .ok_or(OauthError::Malformed("key/value pairs not terminated"))?;
    let mut extensions = parse_pairs(pairs)?;
    let auth = extensions
        .remove(AUTH_KEY)
        .ok_or(OauthError::Malformed("no auth=Bearer <token>"))?;
    Ok(ClientInitial {
        token: parse_bearer(&auth)?.to_owned(),
        authzid,
        extensions,
    })
}

/// The client initial response for `token`: `n,[a=authzid],\x01auth=Bearer <token>\x01` then
/// each extension as `key=value\x01`, then `\x01`. Extension names must be alphabetic and not
/// `auth`, values printable: the server refuses anything else.
pub fn client_initial(
    token: &str,
    authzid: Option<&str>,
    extensions: &BTreeMap<String, String>,
) -> Vec<u8> {
    let authzid = authzid.map_or_else(String::new, |id| format!("a={}", encode_saslname(id)));
    let extensions: String = extensions
        .iter()
        .map(|(key, value)| format!("{key}={value}{SEPARATOR}"))
        .collect();
    format!("n,{authzid},{SEPARATOR}{AUTH_KEY}=Bearer {token}{SEPARATOR}{extensions}{SEPARATOR}")
        .into_bytes()
}

/// The server's challenge when the token is refused (RFC 7628 §3.2.2), such as
/// `{"status":"invalid_token"}`; the client answers it with a lone `\x01` ([`is_error_ack`]).
pub fn error_challenge(status: &str, scope: Option<&str>) -> Vec<u8> {
    let mut challenge = Map::new();
    challenge.insert("status".to_owned(), status.into());
    if let Some(scope) = scope {
        challenge.insert("scope".to_owned(), scope.into());
    }
    Value::Object(challenge).to_string().into_bytes()
}

/// Whether `msg` is the client's acknowledgement of an error challenge: a lone `\x01`.
pub fn is_error_ack(msg: &[u8]) -> bool {
    msg == [0x01]
}

/// The GS2 header: `n,,` or `n,a=<saslname>,` (OAUTHBEARER has no channel binding).
fn parse_gs2_header(header: &str) -> Result<Option<String>, OauthError> {
    let authzid = header
        .strip_prefix("n,")
        .and_then(|rest| rest.strip_suffix(','))
        .ok_or(OauthError::Malformed("GS2 header is not n,[a=authzid],"))?;
    if authzid.is_empty() {
        return Ok(None);
    }
    authzid
        .strip_prefix("a=")
        .and_then(decode_saslname)
        .map(Some)
        .ok_or(OauthError::Malformed("invalid GS2 authorization identity"))
}

/// `key=value` pairs, each ended by `\x01`: alphabetic keys, printable values, no key twice.
fn parse_pairs(pairs: &str) -> Result<BTreeMap<String, String>, OauthError> {
    let mut map = BTreeMap::new();
    for pair in pairs.split_terminator(SEPARATOR) {
        let (key, value) = pair
            .split_once('=')
            .ok_or(OauthError::Malformed("key/value pair without '='"))?;
        let key_ok = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphabetic());
        let value_ok = !value.is_empty() && value.bytes().all(is_value_byte);
        if !key_ok || !value_ok {
            return Err(OauthError::InvalidExtension(key.to_owned()));
        }
        if map.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(OauthError::Malformed("duplicate key"));
        }
    }
    Ok(map)
}

/// A byte of a pair's value (RFC 7628 `value`: printable ASCII, space, tab, CR, LF).
fn is_value_byte(b: u8) -> bool {
    matches!(b, 0x21..=0x7e | b' ' | b'\t' | b'\r' | b'\n')
}

/// The token of `Bearer <token>`: the scheme in any case, then spaces, then `[-_.A-Za-z0-9]+`.
fn parse_bearer(auth: &str) -> Result<&str, OauthError> {
    let (scheme, token) = auth
        .split_once(' ')
        .ok_or(OauthError::Malformed("auth is not \"Bearer <token>\""))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(OauthError::Malformed("auth scheme is not Bearer"));
    }
    let token = token.trim_start_matches(' ');
    let token_byte = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    if token.is_empty() || !token.bytes().all(token_byte) {
        return Err(OauthError::Malformed("invalid bearer token characters"));
    }
    Ok(token)
}

/// The public keys of a JWKS that can verify a token.
pub struct Jwks {
    keys: Vec<VerificationKey>,
}

/// One usable key of a JWKS.
struct VerificationKey {
    kid: Option<String>,
    kind: KeyKind,
    /// The key's `alg`, when the JWKS pins one.
    algorithm: Option<Algorithm>,
    decoding_key: DecodingKey,
}

/// The kinds of public key that verify the accepted algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl KeyKind {
    /// The kind of a JWK's key; `None` for symmetric keys, other curves and malformed points.
    fn of(params: &AlgorithmParameters) -> Option<Self> {
        let coordinate_len = |b64: &str| URL_SAFE_NO_PAD.decode(b64).ok().map(|b| b.len());
        match params {
            AlgorithmParameters::RSA(_) => Some(Self::Rsa),
            AlgorithmParameters::EllipticCurve(ec) => {
                let (kind, len) = match ec.curve {
                    EllipticCurve::P256 => (Self::P256, 32),
                    EllipticCurve::P384 => (Self::P384, 48),
                    _ => return None,
                };
                let point_ok =
                    coordinate_len(&ec.x) == Some(len) && coordinate_len(&ec.y) == Some(len);
                point_ok.then_some(kind)
            }
            AlgorithmParameters::OctetKeyPair(okp) => {
                let key_ok =
                    okp.curve == EllipticCurve::Ed25519 && coordinate_len(&okp.x) == Some(32);
                key_ok.then_some(Self::Ed25519)
            }
            AlgorithmParameters::OctetKey(_) => None,
        }
    }

    /// Whether a key of this kind verifies `algorithm`.
    fn verifies(self, algorithm: Algorithm) -> bool {
        use Algorithm::*;
        match self {
            Self::Rsa => matches!(algorithm, RS256 | RS384 | RS512 | PS256 | PS384 | PS512),
            Self::P256 => algorithm == ES256,
            Self::P384 => algorithm == ES384,
            Self::Ed25519 => algorithm == EdDSA,
        }
    }
}

impl VerificationKey {
    /// The key from one JWK of the set; `None` when it cannot verify signatures: not JSON for a
    /// known key type, an encryption key (`use` other than `sig`), a symmetric or unsupported key,
    /// or an `alg` that is not a public-key signature algorithm of that key.
    fn from_json(value: Value) -> Option<Self> {
        let jwk: Jwk = serde_json::from_value(value).ok()?;
        let for_signatures = jwk
            .common
            .public_key_use
            .as_ref()
            .is_none_or(|key_use| *key_use == PublicKeyUse::Signature);
        if !for_signatures {
            return None;
        }
        let kind = KeyKind::of(&jwk.algorithm)?;
        let algorithm = match jwk.common.key_algorithm {
            Some(key_algorithm) => Some(key_algorithm.to_string().parse::<Algorithm>().ok()?),
            None => None,
        };
        if algorithm.is_some_and(|algorithm| !kind.verifies(algorithm)) {
            return None;
        }
        Some(Self {
            decoding_key: DecodingKey::from_jwk(&jwk).ok()?,
            kid: jwk.common.key_id,
            kind,
            algorithm,
        })
    }

    /// Whether this key may verify a token signed with `algorithm`.
    fn verifies(&self, algorithm: Algorithm) -> bool {
        self.kind.verifies(algorithm) && self.algorithm.is_none_or(|pinned| pinned == algorithm)
    }
}

impl Jwks {
    /// Parses a JWKS document (`{"keys": [...]}`). Keys that cannot verify signatures (unknown
    /// `kty`, symmetric, encryption-only, unsupported curve or `alg`) are skipped; it is an error
    /// when none is left.
    pub fn parse(json: &[u8]) -> Result<Jwks, OauthError> {
        #[derive(Deserialize)]
        struct JwkSet {
            keys: Vec<Value>,
        }
        let set: JwkSet = serde_json::from_slice(json)
            .map_err(|_| OauthError::InvalidJwks("not a JSON object with a keys array"))?;
        let keys: Vec<_> = set
            .keys
            .into_iter()
            .filter_map(VerificationKey::from_json)
            .collect();
        if keys.is_empty() {
            return Err(OauthError::InvalidJwks(
                "no usable signature verification key",
            ));
        }
        Ok(Jwks { keys })
    }

    /// The key to verify a token with `kid` signed with `algorithm`: the one with that id, or
    /// the only key when the token has no id.
    fn select(
        &self,
        kid: Option<&str>,
        algorithm: Algorithm,
    ) -> Result<&VerificationKey, OauthError> {
        let key = match (kid, self.keys.as_slice()) {
            (None, [only]) => only,
            (None, _) => return Err(OauthError::MissingKeyId),
            (Some(kid), keys) => {
                let with_kid = || keys.iter().filter(|key| key.kid.as_deref() == Some(kid));
                with_kid()
                    .find(|key| key.verifies(algorithm))
                    .or_else(|| with_kid().next())
                    .ok_or_else(|| OauthError::UnknownKey(kid.to_owned()))?
            }
        };
        if key.verifies(algorithm) {
            Ok(key)
        } else {
            Err(OauthError::KeyAlgorithmMismatch(algorithm))
        }
    }
}

impl fmt::Debug for Jwks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.keys.iter().map(|key| (key.kid.as_deref(), key.kind));
        f.debug_struct("Jwks")
            .field("keys", &keys.collect::<Vec<_>>())
            .finish()
    }
}

/// What a valid token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedToken {
    /// The value of the principal claim (`sasl.oauthbearer.sub.claim.name`), trimmed.
    pub principal: String,
    /// The `exp` claim, in ms since the epoch: the session must end by then.
    pub expires_at_ms: i64,
    /// The `scope` claim: a space-separated string or an array of strings.
    pub scopes: Vec<String>,
}

/// Kafka's broker-side JWT checks, with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtValidator {
    /// `sasl.oauthbearer.expected.issuer`: the `iss` claim must be this, when set.
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.expected.audience`: the `aud` claim (a string or an array) must contain
    /// one of these; empty means the audience is not checked.
    pub expected_audience: Vec<String>,
    /// `sasl.oauthbearer.sub.claim.name`: the claim naming the principal.
    pub sub_claim_name: String,
    /// `sasl.oauthbearer.clock.skew.seconds`: the leeway of the time checks.
    pub clock_skew_s: u64,
}

impl Default for JwtValidator {
    /// Kafka's defaults: principal in `sub`, 30 s of clock skew, no issuer or audience check.
    fn default() -> Self {
        Self {
            expected_issuer: None,
            expected_audience: Vec::new(),
            sub_claim_name: "sub".to_owned(),
            clock_skew_s: 30,
        }
    }
}

/// The JWT header fields read before verification.
#[derive(Deserialize)]
struct JwtHeader {
    alg: String,
    kid: Option<String>,
    /// Critical extensions (RFC 7515 §4.1.11): none is understood here, so any is refused.
    crit: Option<Value>,
}

impl JwtValidator {
    /// Validates `token` against `jwks` at `now_ms` (ms since the epoch): a public-key signature
    /// by the key its `kid` names, then the claims: `exp` required and not past, `nbf` and `iat`
    /// not in the future (all with the clock skew), `iss` and `aud` as configured, and a
    /// non-empty principal claim.
    pub fn validate(
        &self,
        jwks: &Jwks,
        token: &str,
        now_ms: i64,
    ) -> Result<ValidatedToken, OauthError> {
        let (algorithm, kid) = parse_header(token)?;
        let key = jwks.select(kid.as_deref(), algorithm)?;
        let claims = verify_signature(token, key, algorithm)?;
        let expires_at_ms = self.check_times(&claims, now_ms)?;
        self.check_issuer(&claims)?;
        self.check_audience(&claims)?;
        Ok(ValidatedToken {
            principal: self.principal(&claims)?,
            expires_at_ms,
            scopes: scopes(&claims)?,
        })
    }

    /// `exp` must be later than now minus the skew; `nbf` and `iat`, if any, no later than now
    /// plus the skew. Returns `exp` in ms.
    fn check_times(&self, claims: &Map<String, Value>, now_ms: i64) -> Result<i64, OauthError> {
        let skew_ms = i64::try_from(self.clock_skew_s.saturating_mul(1000)).unwrap_or(i64::MAX);
        let expires_at_ms = numeric_date_ms(claims, "exp")?.ok_or_else(|| missing("exp"))?;
        if now_ms.saturating_sub(skew_ms) >= expires_at_ms {
            return Err(OauthError::Expired {
                expires_at_ms,
                now_ms,
            });
        }
        let latest_start_ms = now_ms.saturating_add(skew_ms);
        if let Some(not_before_ms) = numeric_date_ms(claims, "nbf")?
            && not_before_ms > latest_start_ms
        {
            return Err(OauthError::NotYetValid {
                not_before_ms,
                now_ms,
            });
        }
        if let Some(issued_at_ms) = numeric_date_ms(claims, "iat")?
            && issued_at_ms > latest_start_ms
        {
            return Err(OauthError::IssuedInFuture {
                issued_at_ms,
                now_ms,
            });
        }
        Ok(expires_at_ms)
    }

    fn check_issuer(&self, claims: &Map<String, Value>) -> Result<(), OauthError> {
        match &self.expected_issuer {
            Some(expected) if claims.get("iss").and_then(Value::as_str) != Some(expected) => {
                Err(OauthError::InvalidIssuer)
            }
            _ => Ok(()),
        }
    }

    fn check_audience(&self, claims: &Map<String, Value>) -> Result<(), OauthError> {
        if self.expected_audience.is_empty() {
            return Ok(());
        }
        let expected = |aud: &&str| self.expected_audience.iter().any(|e| e == aud);
        if strings(claims, "aud")?.iter().any(expected) {
            Ok(())
        } else {
            Err(OauthError::InvalidAudience)
        }
    }

    /// The principal claim: a string, trimmed, non-empty.
    fn principal(&self, claims: &Map<String, Value>) -> Result<String, OauthError> {
        let name = &self.sub_claim_name;
        let value = claims.get(name).ok_or_else(|| missing(name))?;
        match value.as_str().map(str::trim) {
            Some(principal) if !principal.is_empty() => Ok(principal.to_owned()),
            _ => Err(OauthError::InvalidClaim(name.clone())),
        }
    }
}

/// The token's algorithm and key id, read from its header before any verification, so that
/// unsigned and symmetric tokens get their own errors. Also checks the three-part shape.
fn parse_header(token: &str) -> Result<(Algorithm, Option<String>), OauthError> {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(OauthError::MalformedToken("not three dot-separated parts"));
    };
    let header = URL_SAFE_NO_PAD
        .decode(header)
        .map_err(|_| OauthError::MalformedToken("header is not base64url"))?;
    let JwtHeader { alg, kid, crit } = serde_json::from_slice(&header)
        .map_err(|_| OauthError::MalformedToken("header is not JSON with string alg and kid"))?;
    if crit.is_some() {
        return Err(OauthError::MalformedToken(
            "critical header extensions are not supported",
        ));
    }
    let algorithm = match alg.as_str() {
        "none" => return Err(OauthError::UnsecuredToken),
        "HS256" | "HS384" | "HS512" => return Err(OauthError::SymmetricAlgorithm(alg)),
        _ => alg
            .parse()
            .map_err(|_| OauthError::UnsupportedAlgorithm(alg))?,
    };
    Ok((algorithm, kid))
}

/// Verifies the signature and returns the claims. jsonwebtoken checks no claim here (in
/// particular it never reads the system clock): the checks are ours, with the caller's time.
fn verify_signature(
    token: &str,
    key: &VerificationKey,
    algorithm: Algorithm,
) -> Result<Map<String, Value>, OauthError> {
    let mut validation = Validation::new(algorithm);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding_key, &validation)
        .map(|data| data.claims)
        .map_err(|error| match error.kind() {
            ErrorKind::InvalidSignature => OauthError::InvalidSignature,
            _ => OauthError::MalformedToken("signature or claims cannot be decoded"),
        })
}

/// A NumericDate claim (seconds since the epoch, maybe fractional) in ms; `None` when absent.
fn numeric_date_ms(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, OauthError> {
    let Some(value) = claims.get(name) else {
        return Ok(None);
    };
    // Float to int `as` saturates: absurd dates become i64::MIN/MAX, never a panic.
    let seconds = value
        .as_f64()
        .ok_or_else(|| OauthError::InvalidClaim(name.to_owned()))?;
    Ok(Some((seconds * 1000.0) as i64))
}

/// A claim that is a string or an array of strings; empty when absent.
fn strings<'a>(claims: &'a Map<String, Value>, name: &str) -> Result<Vec<&'a str>, OauthError> {
    let invalid = || OauthError::InvalidClaim(name.to_owned());
    match claims.get(name) {
        None => Ok(Vec::new()),
        Some(Value::String(value)) => Ok(vec![value.as_str()]),
        Some(Value::Array(values)) => values
            .iter()
            .map(|value| value.as_str().ok_or_else(invalid))
            .collect(),
        Some(_) => Err(invalid()),
    }
}

/// The `scope` claim: a space-separated string, or an array of strings; none when absent.
fn scopes(claims: &Map<String, Value>) -> Result<Vec<String>, OauthError> {
    let scopes = match claims.get("scope") {
        Some(Value::String(scope)) => scope.split_whitespace().collect(),
        _ => strings(claims, "scope")?,
    };
    Ok(scopes.into_iter().map(str::to_owned).collect())
}

fn missing(name: &str) -> OauthError {
    OauthError::MissingClaim(name.to_owned())
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, Header};
    use proptest::prelude::*;
    use ring::rand::SystemRandom;
    use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
    use serde_json::json;

    use super::*;

    /// 2023-11-14T22:13:20Z.
    const NOW_MS: i64 = 1_700_000_000_000;
    const NOW_S: i64 = NOW_MS / 1000;

    /// A test-only RSA-2048 key (PKCS#1 DER, base64): ring cannot generate RSA keys, nor can
    /// rcgen on its ring backend. Made with `openssl genrsa -traditional 2048`.
    const RSA_PKCS1_DER_B64: &[&str] = &[
        "MIIEowIBAAKCAQEA1tbgFw0nfHpzZp7cc98n2C9fB2gwsnZcA5vCHXewiC5yTKsiQNUZbH9XVaQQcK5EM3StSNwV",
        "uC56yZi7bVaUda8D/DC2IC8CucKYxoQm2z6QGj3sKFKBtCLFDXpB5F7h9PSTPgBuHNkuR+HPqK5cMbfICFVhXjIy",
        "qqq9MJTVQ49P9HWoQO4+Ay7dOOxAtEV4XnbGrc0EjdvbtfCZSAr3U9lgt7U918chvz/p+6SuLjCJTfGnk+BilCtO",
        "+c33m5XjoTH5CxtYC1TRUBPtjGbx6zHRwv6/yfveKlMnSomh/Y+7dwkLB4AmmdLxiI9bXwwc8jrbioFKnfqtfnys",
        "pxm4AQIDAQABAoIBABdUMPQ/2OxS7aoUkRLCBjUa+8I1pagTYy1/IeaKQzCefonlwWvx1/doooapsKFTwxMlVdXG",
        "FFOyNGIkxCF819UpopClh3laMX0TbPyNiByhoAtBcx3zy6LQbb5narVOOlIbpsuCR3K5gKWMlzyVZmx9rOp+vvp4",
        "D/lpXe7jEn9p4xGWoEW/L2DAV+eRQONztUQfdu9wZDRV+Xbm8qbtvME9BFUS8hulv44dJeGkfAe+dQh4zwWzPF+H",
        "Hx5gOjDx/NFJlS3a5lq8WR+Mbnkp+i19BZBY+uS3FccQDapwoiW3L/BY06xR79lPckMOkqI/M3MaIPBp3BnrXgHl",
        "S80DX7MCgYEA6rijSUykHF/w5c7myK/UIwSCP7p03AicIjossnXeHqaEEo6QlMV7A9y2QTaUWTczAfBjRY3L+ua2",
        "iPser0/YXvmEEBWzffW0uLhPPs/A3fTclEQrYRJBel6FtT68+i2YXnJ7c4bv6Ew2mBQb3Uus8+Jhv1sHa430KKW6",
        "Fdud0c8CgYEA6lDSpU2zi4aU8WRU/PcX5bdQatv8fpzy0m9bmMO8cWZ1B93g08km5UlplviHElpiK6fPQowa12ra",
        "UbaMAjuVBXtBr+0TPIl34jSt7dRkfMUiES6D01ouhzAeW6Kj7mV0+X96+aYGbPykun3Bi+VL7QfOLEOFJfRvfXHi",
        "mQOYXS8CgYAoX9QugpFkFBiy3vERqjT6RQdGgQMi6hQ5SvpvRBkN+qSTMJSsEoADfQ6YjxPbeMQ8XCYnS6m/obna",
        "PB/eFgTo6VCPF7yFOSN59rIi4seRJlJe6o7vpp0+uE2VjJIjEn64GEcl6xsPQTTO2f6lBSRd2x3nNXhERumtqDwn",
        "EFzIPwKBgQDeT057vYvijg6UNFAaLcmDjngC2rLl4bzUgQjTmKoaoU3Z595esZNwqUVAEo38kLphlvYiulDhHyUB",
        "sAOIPsV1jOrWokTFA9w1RyvZ4NByPIrE6G/0P7SzWKkE4ftMvP/Nk/C2GZoxH0afFZ9jPmrZ+bTX9DvItfBtgXav",
        "HGUbywKBgCwFA63Da5vpUFyjPbqw7gQuyHeMuPRwSvaWLzgvDNgkrsMiVB2cq5gue5MfgrVGGSwc/P9xdXrLmAsR",
        "qARrJ+9DTVqFmcqldam4x+Qbq7k8ZPlSsRweR0yvIi5v+r+NqaUjczL1hugmavJUOXuGWSNNYyRYJtedagQ0LCx4",
        "/3H+",
    ];

    /// A signing key and its JWK.
    struct TestKey {
        algorithm: Algorithm,
        encoding_key: EncodingKey,
        jwk: Value,
    }

    impl TestKey {
        fn es256(kid: &str) -> Self {
            let rng = SystemRandom::new();
            let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
            let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
            // An uncompressed point: 0x04, x, y.
            let (x, y) = pair.public_key().as_ref()[1..].split_at(32);
            Self {
                algorithm: Algorithm::ES256,
                encoding_key: EncodingKey::from_ec_der(pkcs8.as_ref()),
                jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                    "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y)}),
            }
        }

        fn ed25519(kid: &str) -> Self {
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
            let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
            Self {
                algorithm: Algorithm::EdDSA,
                encoding_key: EncodingKey::from_ed_der(pkcs8.as_ref()),
                jwk: json!({"kty": "OKP", "crv": "Ed25519", "kid": kid,
                    "x": URL_SAFE_NO_PAD.encode(pair.public_key())}),
            }
        }

        fn rsa(kid: &str, algorithm: Algorithm) -> Self {
            let der = base64::engine::general_purpose::STANDARD
                .decode(RSA_PKCS1_DER_B64.concat())
                .unwrap();
            let pair = RsaKeyPair::from_der(&der).unwrap();
            let public = signature::RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
            Self {
                algorithm,
                encoding_key: EncodingKey::from_rsa_der(&der),
                jwk: json!({"kty": "RSA", "kid": kid, "alg": format!("{algorithm:?}"),
                    "n": URL_SAFE_NO_PAD.encode(&public.n), "e": URL_SAFE_NO_PAD.encode(&public.e)}),
            }
        }

        /// A token with these claims, signed by this key, with `kid` in its header.
        fn sign(&self, kid: Option<&str>, claims: &Value) -> String {
            let header = Header {
                kid: kid.map(str::to_owned),
                ..Header::new(self.algorithm)
            };
            jsonwebtoken::encode(&header, claims, &self.encoding_key).unwrap()
        }
    }

    fn jwks(keys: &[&TestKey]) -> Jwks {
        let keys: Vec<_> = keys.iter().map(|key| key.jwk.clone()).collect();
        Jwks::parse(json!({ "keys": keys }).to_string().as_bytes()).unwrap()
    }

    fn claims() -> Value {
        json!({"sub": "alice", "iss": "https://idp.example", "aud": "skiff",
            "iat": NOW_S - 60, "exp": NOW_S + 3600, "scope": "produce consume"})
    }

    /// `claims()` with some claims replaced (or removed, with `null`).
    fn claims_with(changes: Value) -> Value {
        let mut claims = claims();
        for (name, value) in changes.as_object().unwrap() {
            match value {
                Value::Null => claims.as_object_mut().unwrap().remove(name),
                _ => claims
                    .as_object_mut()
                    .unwrap()
                    .insert(name.clone(), value.clone()),
            };
        }
        claims
    }

    fn validator() -> JwtValidator {
        JwtValidator {
            expected_issuer: Some("https://idp.example".to_owned()),
            expected_audience: vec!["kafka".to_owned(), "skiff".to_owned()],
            ..JwtValidator::default()
        }
    }

    /// Validates a token signed by an ES256 key with kid "k1", from a JWKS of that key alone.
    fn validate_es256(claims: &Value) -> Result<ValidatedToken, OauthError> {
        let key = TestKey::es256("k1");
        validator().validate(&jwks(&[&key]), &key.sign(Some("k1"), claims), NOW_MS)
    }

    #[test]
    fn valid_es256_token() {
        assert_eq!(
            validate_es256(&claims()),
            Ok(ValidatedToken {
                principal: "alice".to_owned(),
                expires_at_ms: NOW_MS + 3_600_000,
                scopes: vec!["produce".to_owned(), "consume".to_owned()],
            })
        );
    }

    #[test]
    fn valid_ed25519_and_rsa_tokens() {
        let ed = TestKey::ed25519("ed");
        let rs256 = TestKey::rsa("rs", Algorithm::RS256);
        let keys = jwks(&[&ed, &rs256]);
        for (key, kid) in [(&ed, "ed"), (&rs256, "rs")] {
            let token = key.sign(Some(kid), &claims());
            assert_eq!(
                validator()
                    .validate(&keys, &token, NOW_MS)
                    .unwrap()
                    .principal,
                "alice"
            );
        }
        let ps512 = TestKey::rsa("ps", Algorithm::PS512);
        let token = ps512.sign(Some("ps"), &claims());
        assert!(
            validator()
                .validate(&jwks(&[&ps512]), &token, NOW_MS)
                .is_ok()
        );
    }

    #[test]
    fn time_checks_use_the_given_time_and_skew() {
        let skew_ms = 30_000;
        let expiring = claims_with(json!({"exp": NOW_S}));
        let key = TestKey::es256("k1");
        let keys = jwks(&[&key]);
        let token = key.sign(Some("k1"), &expiring);
        assert!(
            validator()
                .validate(&keys, &token, NOW_MS + skew_ms - 1)
                .is_ok()
        );
        assert_eq!(
            validator().validate(&keys, &token, NOW_MS + skew_ms),
            Err(OauthError::Expired {
                expires_at_ms: NOW_MS,
                now_ms: NOW_MS + skew_ms
            })
        );
        let strict = JwtValidator {
            clock_skew_s: 0,
            ..validator()
        };
        assert!(matches!(
            strict.validate(&keys, &token, NOW_MS),
            Err(OauthError::Expired { .. })
        ));
    }

    #[test]
    fn expired_token() {
        assert!(matches!(
            validate_es256(&claims_with(json!({"exp": NOW_S - 3600}))),
            Err(OauthError::Expired { .. })
        ));
        assert_eq!(
            validate_es256(&claims_with(json!({"exp": null}))),
            Err(missing("exp"))
        );
        assert_eq!(
            validate_es256(&claims_with(json!({"exp": "tomorrow"}))),
            Err(OauthError::InvalidClaim("exp".to_owned()))
        );
    }

    #[test]
    fn token_from_the_future() {
        assert!(validate_es256(&claims_with(json!({"nbf": NOW_S + 20}))).is_ok());
        assert_eq!(
            validate_es256(&claims_with(json!({"nbf": NOW_S + 60}))),
            Err(OauthError::NotYetValid {
                not_before_ms: NOW_MS + 60_000,
                now_ms: NOW_MS
            })
        );
        assert_eq!(
            validate_es256(&claims_with(json!({"iat": NOW_S + 60}))),
            Err(OauthError::IssuedInFuture {
                issued_at_ms: NOW_MS + 60_000,
                now_ms: NOW_MS
            })
        );
    }

    #[test]
    fn issuer_and_audience() {
        assert_eq!(
            validate_es256(&claims_with(json!({"iss": "https://evil.example"}))),
            Err(OauthError::InvalidIssuer)
        );
        assert_eq!(
            validate_es256(&claims_with(json!({"iss": null}))),
            Err(OauthError::InvalidIssuer)
        );
        assert_eq!(
            validate_es256(&claims_with(json!({"aud": "other"}))),
            Err(OauthError::InvalidAudience)
        );
        assert_eq!(
            validate_es256(&claims_with(json!({"aud": null}))),
            Err(OauthError::InvalidAudience)
        );
        assert!(validate_es256(&claims_with(json!({"aud": ["other", "kafka"]}))).is_ok());
        assert_eq!(
            validate_es256(&claims_with(json!({"aud": ["other", 7]}))),
            Err(OauthError::InvalidClaim("aud".to_owned()))
        );
        let unchecked = JwtValidator::default();
        let key = TestKey::es256("k1");
        let token = key.sign(
            Some("k1"),
            &claims_with(json!({"aud": "other", "iss": "x"})),
        );
        assert!(unchecked.validate(&jwks(&[&key]), &token, NOW_MS).is_ok());
    }

    #[test]
    fn principal_claim() {
        assert_eq!(
            validate_es256(&claims_with(json!({"sub": null}))),
            Err(missing("sub"))
        );
        for bad in [json!(""), json!("  "), json!(42)] {
            assert_eq!(
                validate_es256(&claims_with(json!({ "sub": bad }))),
                Err(OauthError::InvalidClaim("sub".to_owned()))
            );
        }
        let custom = JwtValidator {
            sub_claim_name: "client_id".to_owned(),
            ..validator()
        };
        let key = TestKey::es256("k1");
        let token = key.sign(Some("k1"), &claims_with(json!({"client_id": " svc-1 "})));
        assert_eq!(
            custom
                .validate(&jwks(&[&key]), &token, NOW_MS)
                .unwrap()
                .principal,
            "svc-1"
        );
    }

    #[test]
    fn scopes() {
        let scopes = |scope: Value| {
            validate_es256(&claims_with(json!({ "scope": scope }))).map(|t| t.scopes)
        };
        assert_eq!(
            scopes(json!(["a", "b"])),
            Ok(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(
            scopes(json!(" a  b ")),
            Ok(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(scopes(Value::Null), Ok(vec![]));
        assert_eq!(
            scopes(json!({"a": 1})),
            Err(OauthError::InvalidClaim("scope".to_owned()))
        );
    }

    #[test]
    fn signed_by_another_key_with_the_same_kid() {
        let trusted = TestKey::es256("k1");
        let impostor = TestKey::es256("k1");
        let token = impostor.sign(Some("k1"), &claims());
        assert_eq!(
            validator().validate(&jwks(&[&trusted]), &token, NOW_MS),
            Err(OauthError::InvalidSignature)
        );
    }

    #[test]
    fn tampered_claims_fail_the_signature() {
        let key = TestKey::es256("k1");
        let token = key.sign(Some("k1"), &claims());
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = URL_SAFE_NO_PAD.encode(claims_with(json!({"sub": "admin"})).to_string());
        parts[1] = &forged;
        assert_eq!(
            validator().validate(&jwks(&[&key]), &parts.join("."), NOW_MS),
            Err(OauthError::InvalidSignature)
        );
    }

    #[test]
    fn key_selection() {
        let k1 = TestKey::es256("k1");
        let k2 = TestKey::ed25519("k2");
        let both = jwks(&[&k1, &k2]);
        assert_eq!(
            validator().validate(&both, &k1.sign(Some("k3"), &claims()), NOW_MS),
            Err(OauthError::UnknownKey("k3".to_owned()))
        );
        assert_eq!(
            validator().validate(&both, &k1.sign(None, &claims()), NOW_MS),
            Err(OauthError::MissingKeyId)
        );
        assert!(
            validator()
                .validate(&jwks(&[&k1]), &k1.sign(None, &claims()), NOW_MS)
                .is_ok()
        );
        assert_eq!(
            validator().validate(&both, &k1.sign(Some("k2"), &claims()), NOW_MS),
            Err(OauthError::KeyAlgorithmMismatch(Algorithm::ES256))
        );
    }

    #[test]
    fn key_pinned_to_another_algorithm() {
        let rs256 = TestKey::rsa("rs", Algorithm::RS256);
        let ps256 = TestKey {
            algorithm: Algorithm::PS256,
            ..TestKey::rsa("rs", Algorithm::RS256)
        };
        assert_eq!(
            validator().validate(&jwks(&[&rs256]), &ps256.sign(Some("rs"), &claims()), NOW_MS),
            Err(OauthError::KeyAlgorithmMismatch(Algorithm::PS256))
        );
    }

    #[test]
    fn unsigned_token_is_refused() {
        let key = TestKey::es256("k1");
        let payload = URL_SAFE_NO_PAD.encode(claims().to_string());
        let token = format!("eyJhbGciOiJub25lIn0.{payload}.");
        assert_eq!(
            validator().validate(&jwks(&[&key]), &token, NOW_MS),
            Err(OauthError::UnsecuredToken)
        );
    }

    #[test]
    fn hmac_token_is_refused() {
        let key = TestKey::es256("k1");
        let hs256 = Header {
            kid: Some("k1".to_owned()),
            ..Header::new(Algorithm::HS256)
        };
        let token =
            jsonwebtoken::encode(&hs256, &claims(), &EncodingKey::from_secret(b"shared")).unwrap();
        assert_eq!(
            validator().validate(&jwks(&[&key]), &token, NOW_MS),
            Err(OauthError::SymmetricAlgorithm("HS256".to_owned()))
        );
    }

    #[test]
    fn malformed_tokens() {
        let keys = jwks(&[&TestKey::es256("k1")]);
        let cases = [
            (
                "",
                OauthError::MalformedToken("not three dot-separated parts"),
            ),
            (
                "a.b",
                OauthError::MalformedToken("not three dot-separated parts"),
            ),
            (
                "a.b.c.d",
                OauthError::MalformedToken("not three dot-separated parts"),
            ),
            (
                "!!.b.c",
                OauthError::MalformedToken("header is not base64url"),
            ),
            (
                "e30.b.c",
                OauthError::MalformedToken("header is not JSON with string alg and kid"),
            ),
            (
                // {"alg":"ES256","crit":["exp"]}
                "eyJhbGciOiJFUzI1NiIsImNyaXQiOlsiZXhwIl19.b.c",
                OauthError::MalformedToken("critical header extensions are not supported"),
            ),
            (
                "eyJhbGciOiJFUzUxMiJ9.b.c",
                OauthError::UnsupportedAlgorithm("ES512".to_owned()),
            ),
            (
                "eyJhbGciOiJFUzI1NiJ9.!!.c",
                OauthError::MalformedToken("signature or claims cannot be decoded"),
            ),
        ];
        for (token, error) in cases {
            assert_eq!(
                validator().validate(&keys, token, NOW_MS),
                Err(error),
                "{token}"
            );
        }
    }

    #[test]
    fn jwks_skips_unusable_keys() {
        let es = TestKey::es256("es");
        let json = json!({"keys": [
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "EC", "crv": "P-521", "kid": "p521", "x": "AA", "y": "AA"},
            {"kty": "EC", "crv": "P-256", "kid": "short", "x": "AA", "y": "AA"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "kid": "oaep", "alg": "RSA-OAEP", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "kid": "hs", "alg": "HS256", "n": "AQAB", "e": "AQAB"},
            {"kty": "OKP", "crv": "X25519", "kid": "x25519", "x": "AA"},
            {"kty": "unknown", "kid": "what"},
            "not an object",
            es.jwk,
        ]});
        let keys = Jwks::parse(json.to_string().as_bytes()).unwrap();
        assert_eq!(
            format!("{keys:?}"),
            r#"Jwks { keys: [(Some("es"), P256)] }"#
        );
        assert!(
            validator()
                .validate(&keys, &es.sign(Some("es"), &claims()), NOW_MS)
                .is_ok()
        );
    }

    #[test]
    fn jwks_without_usable_keys_is_an_error() {
        for json in [
            &br#"{"keys": []}"#[..],
            br#"{"keys": [{"kty": "oct", "k": "AA"}]}"#,
        ] {
            assert_eq!(
                Jwks::parse(json).err(),
                Some(OauthError::InvalidJwks(
                    "no usable signature verification key"
                ))
            );
        }
        for json in [&b"[]"[..], b"{}", b"{\"keys\": 1}", b"\xff"] {
            assert_eq!(
                Jwks::parse(json).err(),
                Some(OauthError::InvalidJwks(
                    "not a JSON object with a keys array"
                ))
            );
        }
    }

    #[test]
    fn client_initial_round_trip() {
        let extensions = BTreeMap::from([("traceId".to_owned(), "abc 123".to_owned())]);
        let msg = client_initial("eyJ.eyJ.sig", Some("a,b=c"), &extensions);
        assert_eq!(
            msg,
            b"n,a=a=2Cb=3Dc,\x01auth=Bearer eyJ.eyJ.sig\x01traceId=abc 123\x01\x01"
        );
        let parsed = parse_client_initial(&msg).unwrap();
        assert_eq!(parsed.token(), "eyJ.eyJ.sig");
        assert_eq!(parsed.authzid.as_deref(), Some("a,b=c"));
        assert_eq!(parsed.extensions, extensions);
    }

    #[test]
    fn client_initial_without_authzid() {
        let msg = client_initial("t0k-en_.", None, &BTreeMap::new());
        assert_eq!(msg, b"n,,\x01auth=Bearer t0k-en_.\x01\x01");
        let parsed = parse_client_initial(b"n,,\x01auth=bEaReR   tok\x01\x01").unwrap();
        assert_eq!(parsed.token(), "tok");
        assert_eq!(parsed.authzid, None);
        assert!(parsed.extensions.is_empty());
    }

    #[test]
    fn client_initial_grammar() {
        let malformed = OauthError::Malformed;
        let refused = [
            (
                &b"n,,"[..],
                malformed("no key/value pairs after the GS2 header"),
            ),
            (
                b"y,,\x01auth=Bearer t\x01\x01",
                malformed("GS2 header is not n,[a=authzid],"),
            ),
            (
                b"n,,x\x01auth=Bearer t\x01\x01",
                malformed("GS2 header is not n,[a=authzid],"),
            ),
            (
                b"n,b=x,\x01auth=Bearer t\x01\x01",
                malformed("invalid GS2 authorization identity"),
            ),
            (
                b"n,,\x01auth=Bearer t\x01",
                malformed("key/value pairs not terminated"),
            ),
            (b"n,,\x01\x01", malformed("no auth=Bearer <token>")),
            (
                b"n,,\x01host=x\x01\x01",
                malformed("no auth=Bearer <token>"),
            ),
            (
                b"n,,\x01auth=Bearer t\x01\x01\x01",
                malformed("key/value pair without '='"),
            ),
            (
                b"n,,\x01auth=Basic dXNlcg\x01\x01",
                malformed("auth scheme is not Bearer"),
            ),
            (
                b"n,,\x01auth=Bearer\x01\x01",
                malformed("auth is not \"Bearer <token>\""),
            ),
            (
                b"n,,\x01auth=Bearer a/b\x01\x01",
                malformed("invalid bearer token characters"),
            ),
            (
                b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01",
                malformed("duplicate key"),
            ),
            (
                b"n,,\x01auth=Bearer t\x01x1=y\x01\x01",
                OauthError::InvalidExtension("x1".to_owned()),
            ),
            (
                b"n,,\x01auth=Bearer t\x01x=\x00\x01\x01",
                OauthError::InvalidExtension("x".to_owned()),
            ),
            (
                b"n,,\x01auth=Bearer t\x01x=\x01\x01",
                OauthError::InvalidExtension("x".to_owned()),
            ),
            (b"n,,\x01auth=Bearer \xff\x01\x01", malformed("not UTF-8")),
        ];
        for (msg, error) in refused {
            assert_eq!(parse_client_initial(msg), Err(error), "{msg:?}");
        }
    }

    #[test]
    fn error_challenge_and_ack() {
        assert_eq!(
            error_challenge("invalid_token", None),
            br#"{"status":"invalid_token"}"#
        );
        let with_scope: Value =
            serde_json::from_slice(&error_challenge("insufficient_scope", Some("a \"b\"")))
                .unwrap();
        assert_eq!(
            with_scope,
            json!({"status": "insufficient_scope", "scope": "a \"b\""})
        );
        assert!(is_error_ack(b"\x01"));
        assert!(!is_error_ack(b""));
        assert!(!is_error_ack(b"\x01\x01"));
    }

    #[test]
    fn debug_redacts_the_token() {
        let parsed = parse_client_initial(b"n,,\x01auth=Bearer secret.token.sig\x01\x01").unwrap();
        assert_eq!(
            format!("{parsed:?}"),
            r#"ClientInitial { token: "<redacted>", authzid: None, extensions: {} }"#
        );
    }

    proptest! {
        #[test]
        fn parse_client_initial_never_panics(msg in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_client_initial(&msg);
        }

        #[test]
        fn client_initial_grammar_never_panics(
            msg in "n,(a=[a-z=2C3D]{0,3})?,\\x01((auth|[a-z1]{1,3})=[ -~\\x00]{0,6}\\x01){0,3}\\x01?"
        ) {
            let _ = parse_client_initial(msg.as_bytes());
        }

        #[test]
        fn jwks_parse_never_panics(json in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Jwks::parse(&json);
        }

        #[test]
        fn validate_never_panics_on_garbage(token in "[A-Za-z0-9_.=-]{0,80}") {
            let keys = jwks(&[&TestKey::ed25519("k")]);
            let _ = validator().validate(&keys, &token, NOW_MS);
        }

        #[test]
        fn validate_never_panics_on_garbage_parts(
            header in proptest::sample::select(vec![
                r#"{"alg":"EdDSA","kid":"ed"}"#,
                r#"{"alg":"RS256","kid":"rs"}"#,
                r#"{"alg":"PS256"}"#,
                r#"{"alg":"ES256","kid":"ed"}"#,
                r#"{"alg":"EdDSA","kid":7}"#,
                r#"{"alg":"EdDSA","kid":"ed","jwk":1}"#,
                "{",
            ]),
            payload in "\\PC{0,24}",
            signature in proptest::collection::vec(any::<u8>(), 0..70),
        ) {
            let keys = jwks(&[&TestKey::ed25519("ed"), &TestKey::rsa("rs", Algorithm::RS256)]);
            let token = format!(
                "{}.{}.{}",
                URL_SAFE_NO_PAD.encode(header),
                URL_SAFE_NO_PAD.encode(payload),
                URL_SAFE_NO_PAD.encode(signature)
            );
            let _ = validator().validate(&keys, &token, NOW_MS);
        }

        #[test]
        fn validate_never_panics_on_any_claims(
            exp in proptest::num::f64::ANY,
            nbf in any::<i64>(),
            sub in proptest::option::of("\\PC{0,8}"),
        ) {
            let key = TestKey::ed25519("k");
            let claims = json!({"exp": exp, "nbf": nbf, "sub": sub});
            let _ = JwtValidator::default().validate(&jwks(&[&key]), &key.sign(Some("k"), &claims), NOW_MS);
        }
    }
}
