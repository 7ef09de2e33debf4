//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka's `ScramSaslServer`,
//! `ScramSaslClient` and `ScramFormatter` do them:
//!
//! - [`ScramMechanism`]: the two mechanisms, their SASL names and AlterUserScramCredentials codes;
//! - [`ScramCredential`]: what the broker stores per user (salt, StoredKey, ServerKey, iterations);
//! - the server side of the exchange: [`parse_client_first`], then [`ServerExchange`];
//! - the client side, for Skiff's own client: [`ClientExchange`].
//!
//! Nonces and salts are the caller's (random) choice, passed in. No error says which bytes were
//! wrong: a message may carry a proof, and an error ends up in a log.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::{digest, hmac, pbkdf2};
use serde::{Deserialize, Serialize};

/// The key HMAC'ed with the salted password to get the ClientKey (RFC 5802 §3).
const CLIENT_KEY: &[u8] = b"Client Key";
/// The key HMAC'ed with the salted password to get the ServerKey (RFC 5802 §3).
const SERVER_KEY: &[u8] = b"Server Key";
/// The GS2 header [`ClientExchange`] sends: no channel binding, no authorization identity.
const CLIENT_GS2_HEADER: &str = "n,,";

/// Why a SCRAM message or credential was refused. No variant carries a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// The message does not follow RFC 5802's grammar; says what was wrong, never with which bytes.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The client's proof does not match the stored credential (wrong password).
    #[error("invalid SCRAM client proof")]
    InvalidProof,
    /// The nonce is not the one of this exchange.
    #[error("SCRAM nonce mismatch")]
    NonceMismatch,
    /// The client-final `c=` is not the base64 of the client-first GS2 header.
    #[error("SCRAM channel binding does not match the GS2 header")]
    ChannelBinding,
    /// The client asked for channel binding (`p=`), which Skiff (like Kafka) does not support.
    #[error("SCRAM channel binding is not supported")]
    ChannelBindingUnsupported,
    /// The message carries a mandatory extension (`m=`), which no one supports.
    #[error("unsupported SCRAM mandatory extension")]
    UnsupportedExtension,
    /// The iteration count is outside [`ScramMechanism::MIN_ITERATIONS`],
    /// [`ScramMechanism::MAX_ITERATIONS`].
    #[error(
        "SCRAM iteration count {0} is outside [{min}, {max}]",
        min = ScramMechanism::MIN_ITERATIONS,
        max = ScramMechanism::MAX_ITERATIONS
    )]
    IterationsOutOfRange(u32),
    /// The server-final `v=` does not prove the server knows the credential.
    #[error("invalid SCRAM server signature")]
    InvalidServerSignature,
    /// The server ended the exchange with `e=`; this is its error text.
    #[error("SCRAM authentication failed with server error: {0}")]
    ServerError(String),
    /// A message came at the wrong step of the exchange.
    #[error("SCRAM message out of order")]
    OutOfOrder,
}

/// A SCRAM mechanism: the hash function behind the credential and the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    /// The fewest iterations Kafka accepts (`ScramMechanism.minIterations`).
    pub const MIN_ITERATIONS: u32 = 4096;
    /// The most iterations Kafka accepts in AlterUserScramCredentials.
    pub const MAX_ITERATIONS: u32 = 16384;

    /// The SASL mechanism name: `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM-SHA-256",
            Self::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism with that SASL name (exact, as Kafka matches it).
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Sha256, Self::Sha512]
            .into_iter()
            .find(|mechanism| mechanism.name() == name)
    }

    /// The mechanism type in AlterUserScramCredentials and DescribeUserScramCredentials.
    pub fn code(self) -> i8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha512 => 2,
        }
    }

    /// The mechanism with that AlterUserScramCredentials code (0 is Kafka's UNKNOWN: `None`).
    pub fn from_code(code: i8) -> Option<Self> {
        [Self::Sha256, Self::Sha512]
            .into_iter()
            .find(|mechanism| mechanism.code() == code)
    }

    fn digest_algorithm(self) -> &'static digest::Algorithm {
        match self {
            Self::Sha256 => &digest::SHA256,
            Self::Sha512 => &digest::SHA512,
        }
    }

    fn hmac_algorithm(self) -> hmac::Algorithm {
        match self {
            Self::Sha256 => hmac::HMAC_SHA256,
            Self::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2_algorithm(self) -> pbkdf2::Algorithm {
        match self {
            Self::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Self::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    /// `H(data)`.
    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest_algorithm(), data)
            .as_ref()
            .to_vec()
    }

    /// `HMAC(key, data)`.
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        let key = hmac::Key::new(self.hmac_algorithm(), key);
        hmac::sign(&key, data).as_ref().to_vec()
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with this mechanism's HMAC.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: NonZeroU32) -> Vec<u8> {
        let mut salted = vec![0; self.digest_algorithm().output_len()];
        pbkdf2::derive(
            self.pbkdf2_algorithm(),
            iterations,
            salt,
            password,
            &mut salted,
        );
        salted
    }

    /// `ClientKey = HMAC(SaltedPassword, "Client Key")`.
    fn client_key(self, salted_password: &[u8]) -> Vec<u8> {
        self.hmac(salted_password, CLIENT_KEY)
    }

    /// `ServerKey = HMAC(SaltedPassword, "Server Key")`.
    fn server_key(self, salted_password: &[u8]) -> Vec<u8> {
        self.hmac(salted_password, SERVER_KEY)
    }
}

/// `Hi(password, salt, iterations)`: what a client sends in AlterUserScramCredentials (the broker
/// derives the stored and server keys from it). Errors when the iteration count is out of range.
pub fn salted_password(
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Result<Vec<u8>, ScramError> {
    Ok(mechanism.salted_password(password, salt, check_iterations(iterations)?))
}

/// A user's SCRAM credential for one mechanism, as the broker stores it: enough to check a
/// client's proof and prove itself back, not enough to log in as the user.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    /// `H(ClientKey)`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl ScramCredential {
    /// The credential for `password` with that salt and iteration count (Kafka's
    /// `ScramFormatter.generateCredential`). Errors when the iteration count is out of range.
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, ScramError> {
        let salted = mechanism.salted_password(password, salt, check_iterations(iterations)?);
        Self::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// The credential from an already salted password, which is what AlterUserScramCredentials
    /// carries. Errors when the iteration count is out of range.
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, ScramError> {
        check_iterations(iterations)?;
        Ok(Self {
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&mechanism.client_key(salted_password)),
            server_key: mechanism.server_key(salted_password),
            iterations,
        })
    }

    /// Whether `password` is this credential's password (for SASL PLAIN): derives the StoredKey
    /// with the stored salt and iterations and compares in constant time. A credential whose
    /// iteration count is out of range matches no password.
    pub fn check_password(&self, mechanism: ScramMechanism, password: &[u8]) -> bool {
        let Ok(iterations) = check_iterations(self.iterations) else {
            return false;
        };
        let salted = mechanism.salted_password(password, &self.salt, iterations);
        let stored_key = mechanism.hash(&mechanism.client_key(&salted));
        constant_time_eq(&stored_key, &self.stored_key)
    }
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// A parsed client-first-message (RFC 5802 §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// The `n=` user name, unescaped.
    pub username: String,
    /// The GS2 header's `a=` authorization identity, unescaped. Kafka refuses one that differs
    /// from the user name; that check is the broker's.
    pub authzid: Option<String>,
    pub client_nonce: String,
    /// The extensions after the nonce, such as Kafka's `tokenauth=true`.
    pub extensions: BTreeMap<String, String>,
    bare: String,
    gs2_header: String,
}

impl ClientFirst {
    /// The client-first-message-bare: the message without its GS2 header.
    pub fn bare(&self) -> &str {
        &self.bare
    }

    /// The GS2 header, such as `n,,` or `n,a=alice,`.
    pub fn gs2_header(&self) -> &str {
        &self.gs2_header
    }
}

/// Parses a client-first-message: `n,[a=authzid],[m=...,]n=user,r=nonce[,ext=value...]`.
/// A `y` channel-binding flag (the client could bind but thinks the server cannot) is accepted;
/// `p=` (channel binding required) and mandatory extensions are refused.
pub fn parse_client_first(msg: &[u8]) -> Result<ClientFirst, ScramError> {
    let msg = utf8(msg)?;
    let (cbind_flag, rest) = msg
        .split_once(',')
        .ok_or(ScramError::Malformed("no GS2 header"))?;
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or(ScramError::Malformed("GS2 header not terminated"))?;
    check_cbind_flag(cbind_flag)?;
    if bare.starts_with("m=") {
        return Err(ScramError::UnsupportedExtension);
    }
    let mut attributes = bare.split(',');
    let username = next_attribute(&mut attributes, "n=", "no n= user name")?;
    let client_nonce = next_attribute(&mut attributes, "r=", "no r= nonce")?;
    Ok(ClientFirst {
        username: decode_saslname(username).ok_or(ScramError::Malformed("invalid user name"))?,
        authzid: parse_authzid(authzid)?,
        client_nonce: check_nonce(client_nonce)?.to_owned(),
        extensions: parse_extensions(attributes)?,
        gs2_header: format!("{cbind_flag},{authzid},"),
        bare: bare.to_owned(),
    })
}

/// The server side of one exchange after the server-first-message: checks the client-final.
pub struct ServerExchange {
    mechanism: ScramMechanism,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
    /// The client nonce followed by the server nonce.
    nonce: String,
    /// The client nonce alone.
    client_nonce: String,
    /// The `c=` the client must send: the base64 of its GS2 header.
    channel_binding: String,
    /// `client-first-message-bare "," server-first-message`: the AuthMessage's first two parts.
    auth_message_prefix: String,
}

impl ServerExchange {
    /// Answers a client-first-message for a user with credential `credential`: returns the
    /// exchange and the server-first-message `r=<client nonce><server nonce>,s=<salt>,i=<n>`.
    /// `server_nonce` must be printable ASCII without `,` (Kafka's is random base64-like text).
    pub fn server_first(
        mechanism: ScramMechanism,
        first: &ClientFirst,
        credential: &ScramCredential,
        server_nonce: &str,
    ) -> Result<(ServerExchange, Vec<u8>), ScramError> {
        check_iterations(credential.iterations)?;
        check_nonce(server_nonce)?;
        let nonce = format!("{}{server_nonce}", first.client_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let exchange = ServerExchange {
            mechanism,
            stored_key: credential.stored_key.clone(),
            server_key: credential.server_key.clone(),
            nonce,
            client_nonce: first.client_nonce.clone(),
            channel_binding: BASE64.encode(&first.gs2_header),
            auth_message_prefix: format!("{},{server_first}", first.bare),
        };
        Ok((exchange, server_first.into_bytes()))
    }

    /// Whether the client-final's nonce is the combined one. librdkafka before 2.2 (Debian 12's
    /// kcat among them) sends the client nonce twice, `<client><client><server>`, which Kafka's
    /// brokers accept (they checked only that the nonce ends with the combined one): that one
    /// form is accepted too. The proof covers the message as sent, so it still proves the key.
    fn is_our_nonce(&self, nonce: &str) -> bool {
        nonce == self.nonce
            || nonce
                .strip_prefix(self.client_nonce.as_str())
                .is_some_and(|rest| rest == self.nonce)
    }

    /// Checks a client-final-message `c=<gs2 header>,r=<nonce>[,ext=value...],p=<proof>` and, when
    /// the proof is right, returns the server-final-message `v=<server signature>`.
    pub fn client_final(&self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        let msg = utf8(msg)?;
        let (without_proof, proof) = msg
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no p= proof at the end"))?;
        let mut attributes = without_proof.split(',');
        let channel_binding = next_attribute(&mut attributes, "c=", "no c= channel binding")?;
        let nonce = next_attribute(&mut attributes, "r=", "no r= nonce")?;
        parse_extensions(attributes)?;
        if channel_binding != self.channel_binding {
            return Err(ScramError::ChannelBinding);
        }
        if !self.is_our_nonce(nonce) {
            return Err(ScramError::NonceMismatch);
        }
        let proof = decode_base64(proof, "proof is not base64")?;
        let auth_message = format!("{},{without_proof}", self.auth_message_prefix);
        self.check_proof(&proof, auth_message.as_bytes())?;
        let server_signature = self
            .mechanism
            .hmac(&self.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)).into_bytes())
    }

    /// `ClientKey = proof XOR HMAC(StoredKey, AuthMessage)` must hash to the StoredKey.
    fn check_proof(&self, proof: &[u8], auth_message: &[u8]) -> Result<(), ScramError> {
        let client_signature = self.mechanism.hmac(&self.stored_key, auth_message);
        if proof.len() != client_signature.len() {
            return Err(ScramError::InvalidProof);
        }
        let client_key = xor(proof, &client_signature);
        if constant_time_eq(&self.mechanism.hash(&client_key), &self.stored_key) {
            Ok(())
        } else {
            Err(ScramError::InvalidProof)
        }
    }
}

impl fmt::Debug for ServerExchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerExchange")
            .field("mechanism", &self.mechanism)
            .field("nonce", &self.nonce)
            .finish_non_exhaustive()
    }
}

/// The client side of one exchange: client-first, then client-final, then the check of the
/// server's signature.
pub struct ClientExchange {
    mechanism: ScramMechanism,
    client_nonce: String,
    client_first_bare: String,
    state: ClientState,
}

/// What the client waits for, and what it keeps for it.
enum ClientState {
    ServerFirst { password: Vec<u8> },
    ServerFinal { server_signature: Vec<u8> },
}

impl ClientExchange {
    /// Starts an exchange: returns it and the client-first-message `n,,n=<user>,r=<nonce>`
    /// (`,` and `=` in the user name escaped). `client_nonce` must be printable ASCII without `,`.
    pub fn new(
        mechanism: ScramMechanism,
        username: &str,
        password: &[u8],
        client_nonce: &str,
    ) -> (Self, Vec<u8>) {
        let client_first_bare = format!("n={},r={client_nonce}", encode_saslname(username));
        let client_first = format!("{CLIENT_GS2_HEADER}{client_first_bare}");
        let exchange = ClientExchange {
            mechanism,
            client_nonce: client_nonce.to_owned(),
            client_first_bare,
            state: ClientState::ServerFirst {
                password: password.to_vec(),
            },
        };
        (exchange, client_first.into_bytes())
    }

    /// Answers the server-first-message `r=<nonce>,s=<salt>,i=<n>[,ext=value...]` with the
    /// client-final-message. The nonce must extend the client's; the iteration count must be
    /// within Kafka's range (which also bounds the work a hostile server can ask for).
    pub fn server_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        let ClientState::ServerFirst { password } = &self.state else {
            return Err(ScramError::OutOfOrder);
        };
        let server_first = utf8(msg)?;
        let ServerFirst {
            nonce,
            salt,
            iterations,
        } = parse_server_first(server_first)?;
        if !nonce.starts_with(&self.client_nonce) {
            return Err(ScramError::NonceMismatch);
        }
        let iterations = check_iterations(iterations)?;
        let mechanism = self.mechanism;
        let salted = mechanism.salted_password(password, &salt, iterations);
        let without_proof = format!("c={},r={nonce}", BASE64.encode(CLIENT_GS2_HEADER));
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_key = mechanism.client_key(&salted);
        let stored_key = mechanism.hash(&client_key);
        let client_signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
        let proof = xor(&client_key, &client_signature);
        let server_key = mechanism.server_key(&salted);
        self.state = ClientState::ServerFinal {
            server_signature: mechanism.hmac(&server_key, auth_message.as_bytes()),
        };
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks the server-final-message: `v=<signature>` must prove the server knows the
    /// credential; `e=<error>` is the server refusing, returned as [`ScramError::ServerError`].
    pub fn server_final(&self, msg: &[u8]) -> Result<(), ScramError> {
        let ClientState::ServerFinal { server_signature } = &self.state else {
            return Err(ScramError::OutOfOrder);
        };
        let msg = utf8(msg)?;
        if let Some(error) = msg.strip_prefix("e=") {
            return Err(ScramError::ServerError(error.to_owned()));
        }
        let mut attributes = msg.split(',');
        let verifier = next_attribute(&mut attributes, "v=", "no v= verifier")?;
        parse_extensions(attributes)?;
        let verifier = decode_base64(verifier, "verifier is not base64")?;
        if constant_time_eq(&verifier, server_signature) {
            Ok(())
        } else {
            Err(ScramError::InvalidServerSignature)
        }
    }
}

impl fmt::Debug for ClientExchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientExchange")
            .field("mechanism", &self.mechanism)
            .field("client_nonce", &self.client_nonce)
            .finish_non_exhaustive()
    }
}

/// A parsed server-first-message.
struct ServerFirst<'a> {
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: u32,
}

/// Parses `[m=...,]r=<nonce>,s=<salt>,i=<iterations>[,ext=value...]`.
fn parse_server_first(msg: &str) -> Result<ServerFirst<'_>, ScramError> {
    if msg.starts_with("m=") {
        return Err(ScramError::UnsupportedExtension);
    }
    let mut attributes = msg.split(',');
    let nonce = next_attribute(&mut attributes, "r=", "no r= nonce")?;
    let salt = next_attribute(&mut attributes, "s=", "no s= salt")?;
    let iterations = next_attribute(&mut attributes, "i=", "no i= iteration count")?;
    parse_extensions(attributes)?;
    Ok(ServerFirst {
        nonce: check_nonce(nonce)?,
        salt: decode_base64(salt, "salt is not base64")?,
        iterations: parse_iterations(iterations)?,
    })
}

/// A decimal iteration count (digits only, no sign).
fn parse_iterations(text: &str) -> Result<u32, ScramError> {
    let malformed = ScramError::Malformed("iteration count is not a number");
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed);
    }
    text.parse().map_err(|_| malformed)
}

/// The iteration count, if within Kafka's range.
fn check_iterations(iterations: u32) -> Result<NonZeroU32, ScramError> {
    let range = ScramMechanism::MIN_ITERATIONS..=ScramMechanism::MAX_ITERATIONS;
    match NonZeroU32::new(iterations) {
        Some(checked) if range.contains(&iterations) => Ok(checked),
        _ => Err(ScramError::IterationsOutOfRange(iterations)),
    }
}

/// The GS2 channel-binding flag: `n` (client cannot bind) or `y` (client could, thinks the
/// server cannot); `p=<name>` asks for binding, which is not supported.
fn check_cbind_flag(flag: &str) -> Result<(), ScramError> {
    match flag {
        "n" | "y" => Ok(()),
        _ if flag.starts_with("p=") => Err(ScramError::ChannelBindingUnsupported),
        _ => Err(ScramError::Malformed("invalid GS2 channel binding flag")),
    }
}

/// The GS2 header's authorization identity: empty, or `a=<saslname>`.
fn parse_authzid(authzid: &str) -> Result<Option<String>, ScramError> {
    if authzid.is_empty() {
        return Ok(None);
    }
    authzid
        .strip_prefix("a=")
        .and_then(decode_saslname)
        .map(Some)
        .ok_or(ScramError::Malformed("invalid GS2 authorization identity"))
}

/// The value of the next attribute, which must start with `prefix` (such as `"r="`).
fn next_attribute<'a>(
    attributes: &mut impl Iterator<Item = &'a str>,
    prefix: &str,
    missing: &'static str,
) -> Result<&'a str, ScramError> {
    attributes
        .next()
        .and_then(|attribute| attribute.strip_prefix(prefix))
        .ok_or(ScramError::Malformed(missing))
}

/// A nonce: printable ASCII except `,`, at least one character.
fn check_nonce(nonce: &str) -> Result<&str, ScramError> {
    let printable = |b: u8| (0x21..=0x7e).contains(&b) && b != b',';
    if !nonce.is_empty() && nonce.bytes().all(printable) {
        Ok(nonce)
    } else {
        Err(ScramError::Malformed("invalid nonce"))
    }
}

/// Optional `key=value` attributes after the defined ones: alphabetic keys (Kafka's are words,
/// such as `tokenauth`), non-empty values, no key twice.
fn parse_extensions<'a>(
    attributes: impl Iterator<Item = &'a str>,
) -> Result<BTreeMap<String, String>, ScramError> {
    let mut extensions = BTreeMap::new();
    for attribute in attributes {
        let (key, value) = attribute
            .split_once('=')
            .ok_or(ScramError::Malformed("attribute without '='"))?;
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(ScramError::Malformed("invalid extension name"));
        }
        if value.is_empty() || value.contains('\0') {
            return Err(ScramError::Malformed("invalid extension value"));
        }
        if extensions
            .insert(key.to_owned(), value.to_owned())
            .is_some()
        {
            return Err(ScramError::Malformed("duplicate extension"));
        }
    }
    Ok(extensions)
}

/// Decodes an RFC 5802 `saslname`: `=2C` is `,` and `=3D` is `=`; any other `=`, a raw `,` or
/// NUL, or an empty name is refused.
pub(crate) fn decode_saslname(escaped: &str) -> Option<String> {
    if escaped.is_empty() || escaped.contains([',', '\0']) {
        return None;
    }
    let mut name = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some((plain, after_equals)) = rest.split_once('=') {
        name.push_str(plain);
        if let Some(tail) = after_equals.strip_prefix("2C") {
            name.push(',');
            rest = tail;
        } else if let Some(tail) = after_equals.strip_prefix("3D") {
            name.push('=');
            rest = tail;
        } else {
            return None;
        }
    }
    name.push_str(rest);
    Some(name)
}

/// Encodes a name as an RFC 5802 `saslname`: `=` as `=3D`, `,` as `=2C`.
pub(crate) fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn utf8(msg: &[u8]) -> Result<&str, ScramError> {
    std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))
}

fn decode_base64(text: &str, invalid: &'static str) -> Result<Vec<u8>, ScramError> {
    BASE64
        .decode(text)
        .map_err(|_| ScramError::Malformed(invalid))
}

/// `a XOR b`, over the shorter length (callers compare lengths first).
fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// Equal lengths and bytes, in a time that depends on the length only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// RFC 7677 §3: SCRAM-SHA-256, user "user", password "pencil".
    mod rfc7677 {
        pub const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
        pub const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        pub const SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
        pub const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
        pub const SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        pub const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
            p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        pub const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
    }

    fn rfc7677_credential() -> ScramCredential {
        let salt = BASE64.decode(rfc7677::SALT_B64).unwrap();
        ScramCredential::from_password(ScramMechanism::Sha256, b"pencil", &salt, 4096).unwrap()
    }

    /// The server side of the RFC 7677 exchange, up to (not including) the client-final.
    fn rfc7677_server() -> ServerExchange {
        let first = parse_client_first(rfc7677::CLIENT_FIRST.as_bytes()).unwrap();
        let (exchange, server_first) = ServerExchange::server_first(
            ScramMechanism::Sha256,
            &first,
            &rfc7677_credential(),
            rfc7677::SERVER_NONCE,
        )
        .unwrap();
        assert_eq!(server_first, rfc7677::SERVER_FIRST.as_bytes());
        exchange
    }

    /// A client that has answered the RFC 7677 server-first.
    fn rfc7677_client() -> ClientExchange {
        let (mut client, _) = ClientExchange::new(
            ScramMechanism::Sha256,
            "user",
            b"pencil",
            rfc7677::CLIENT_NONCE,
        );
        client
            .server_first(rfc7677::SERVER_FIRST.as_bytes())
            .unwrap();
        client
    }

    #[test]
    fn server_side_reproduces_rfc7677() {
        let first = parse_client_first(rfc7677::CLIENT_FIRST.as_bytes()).unwrap();
        assert_eq!(first.username, "user");
        assert_eq!(first.authzid, None);
        assert_eq!(first.client_nonce, rfc7677::CLIENT_NONCE);
        assert_eq!(first.bare(), "n=user,r=rOprNGfwEbeRWgbNEkqO");
        assert_eq!(first.gs2_header(), "n,,");
        let server_final = rfc7677_server()
            .client_final(rfc7677::CLIENT_FINAL.as_bytes())
            .unwrap();
        assert_eq!(server_final, rfc7677::SERVER_FINAL.as_bytes());
    }

    #[test]
    fn client_side_reproduces_rfc7677() {
        let (mut client, client_first) = ClientExchange::new(
            ScramMechanism::Sha256,
            "user",
            b"pencil",
            rfc7677::CLIENT_NONCE,
        );
        assert_eq!(client_first, rfc7677::CLIENT_FIRST.as_bytes());
        let client_final = client
            .server_first(rfc7677::SERVER_FIRST.as_bytes())
            .unwrap();
        assert_eq!(client_final, rfc7677::CLIENT_FINAL.as_bytes());
        client
            .server_final(rfc7677::SERVER_FINAL.as_bytes())
            .unwrap();
    }

    /// Runs a whole exchange between a client with `password` and a server holding `credential`.
    fn exchange(
        mechanism: ScramMechanism,
        username: &str,
        password: &[u8],
        credential: &ScramCredential,
    ) -> Result<(), ScramError> {
        let (mut client, client_first) =
            ClientExchange::new(mechanism, username, password, "clientnonce");
        let first = parse_client_first(&client_first)?;
        assert_eq!(first.username, username);
        let (server, server_first) =
            ServerExchange::server_first(mechanism, &first, credential, "servernonce")?;
        let client_final = client.server_first(&server_first)?;
        let server_final = server.client_final(&client_final)?;
        client.server_final(&server_final)
    }

    #[test]
    fn sha512_round_trip() {
        let mechanism = ScramMechanism::Sha512;
        let credential =
            ScramCredential::from_password(mechanism, b"secret", b"salt-512", 8192).unwrap();
        assert_eq!(credential.stored_key.len(), 64);
        assert_eq!(exchange(mechanism, "alice", b"secret", &credential), Ok(()));
    }

    #[test]
    fn wrong_password_is_an_invalid_proof() {
        let mechanism = ScramMechanism::Sha512;
        let credential =
            ScramCredential::from_password(mechanism, b"secret", b"salt", 4096).unwrap();
        assert_eq!(
            exchange(mechanism, "alice", b"guess", &credential),
            Err(ScramError::InvalidProof)
        );
    }

    #[test]
    fn mechanism_mismatch_is_an_invalid_proof() {
        let credential = rfc7677_credential();
        assert_eq!(
            exchange(ScramMechanism::Sha512, "user", b"pencil", &credential),
            Err(ScramError::InvalidProof)
        );
    }

    #[test]
    fn tampered_nonce_is_refused() {
        let tampered = rfc7677::CLIENT_FINAL.replace("hNlF$k0", "hNlF$k1");
        assert_eq!(
            rfc7677_server().client_final(tampered.as_bytes()),
            Err(ScramError::NonceMismatch)
        );
    }

    #[test]
    fn old_librdkafkas_repeated_client_nonce_is_accepted_and_nothing_else() {
        let (mut client, first) =
            ClientExchange::new(ScramMechanism::Sha256, "user", b"pencil", "cnonce");
        let first = parse_client_first(&first).unwrap();
        let credential = rfc7677_credential();
        let (server, server_first) =
            ServerExchange::server_first(ScramMechanism::Sha256, &first, &credential, "snonce")
                .unwrap();
        let final_message = String::from_utf8(client.server_first(&server_first).unwrap()).unwrap();
        // Re-sign the message with the nonce as librdkafka < 2.2 sends it.
        let repeated = |nonce: &str| {
            let (mut client, _) =
                ClientExchange::new(ScramMechanism::Sha256, "user", b"pencil", "cnonce");
            let server_first = String::from_utf8(server_first.clone()).unwrap();
            let forged = server_first.replacen("r=cnoncesnonce", &format!("r={nonce}"), 1);
            String::from_utf8(client.server_first(forged.as_bytes()).unwrap()).unwrap()
        };
        assert!(server.client_final(final_message.as_bytes()).is_ok());
        let (without_proof, _) = final_message.rsplit_once(",p=").unwrap();
        assert_eq!(without_proof, "c=biws,r=cnoncesnonce");
        // A proof over `r=cnoncecnoncesnonce` is checked against that message and accepted;
        // any other prefix is not the combined nonce.
        let old = repeated("cnoncecnoncesnonce");
        assert!(old.contains("r=cnoncecnoncesnonce,"));
        let auth_ok = server.client_final(old.as_bytes());
        assert_ne!(auth_ok, Err(ScramError::NonceMismatch));
        let other = repeated("cnonceXsnonce");
        assert_eq!(
            server.client_final(other.as_bytes()),
            Err(ScramError::NonceMismatch)
        );
    }

    #[test]
    fn server_nonce_must_extend_the_client_nonce() {
        let (mut client, _) = ClientExchange::new(ScramMechanism::Sha256, "user", b"pencil", "abc");
        let server_first = format!("r=xyz123,s={},i=4096", rfc7677::SALT_B64);
        assert_eq!(
            client.server_first(server_first.as_bytes()),
            Err(ScramError::NonceMismatch)
        );
    }

    #[test]
    fn wrong_channel_binding_is_refused() {
        // "eSws" is base64("y,,"), but the client sent "n,,".
        let tampered = rfc7677::CLIENT_FINAL.replace("c=biws", "c=eSws");
        assert_eq!(
            rfc7677_server().client_final(tampered.as_bytes()),
            Err(ScramError::ChannelBinding)
        );
    }

    #[test]
    fn channel_binding_covers_the_authzid() {
        let credential = rfc7677_credential();
        let first = parse_client_first(b"n,a=user,n=user,r=abc").unwrap();
        assert_eq!(first.authzid.as_deref(), Some("user"));
        assert_eq!(first.gs2_header(), "n,a=user,");
        let (server, _) =
            ServerExchange::server_first(ScramMechanism::Sha256, &first, &credential, "xyz")
                .unwrap();
        assert_eq!(
            server.client_final(b"c=biws,r=abcxyz,p=AAAA"),
            Err(ScramError::ChannelBinding)
        );
        let binding = BASE64.encode("n,a=user,");
        let client_final = format!("c={binding},r=abcxyz,p=AAAA");
        assert_eq!(
            server.client_final(client_final.as_bytes()),
            Err(ScramError::InvalidProof)
        );
    }

    #[test]
    fn client_first_grammar() {
        let first = parse_client_first(b"y,,n=bob,r=n0nce,tokenauth=true").unwrap();
        assert_eq!(first.username, "bob");
        assert_eq!(first.gs2_header(), "y,,");
        assert_eq!(
            first.extensions,
            BTreeMap::from([("tokenauth".to_owned(), "true".to_owned())])
        );
        let refused = [
            (
                &b"p=tls-unique,,n=bob,r=x"[..],
                ScramError::ChannelBindingUnsupported,
            ),
            (b"n,,m=ext,n=bob,r=x", ScramError::UnsupportedExtension),
            (
                b"x,,n=bob,r=x",
                ScramError::Malformed("invalid GS2 channel binding flag"),
            ),
            (
                b"n,b=bob,n=bob,r=x",
                ScramError::Malformed("invalid GS2 authorization identity"),
            ),
            (b"n,,r=x,n=bob", ScramError::Malformed("no n= user name")),
            (b"n,,n=bob", ScramError::Malformed("no r= nonce")),
            (b"n,,n=,r=x", ScramError::Malformed("invalid user name")),
            (b"n,,n=bob,r=", ScramError::Malformed("invalid nonce")),
            (b"n,,n=bob,r=a b", ScramError::Malformed("invalid nonce")),
            (
                b"n,,n=bob,r=x,ext",
                ScramError::Malformed("attribute without '='"),
            ),
            (
                b"n,,n=bob,r=x,e1=v",
                ScramError::Malformed("invalid extension name"),
            ),
            (
                b"n,,n=bob,r=x,e=1,e=2",
                ScramError::Malformed("duplicate extension"),
            ),
            (b"n,,n=\xff,r=x", ScramError::Malformed("not UTF-8")),
        ];
        for (msg, error) in refused {
            assert_eq!(parse_client_first(msg), Err(error), "{msg:?}");
        }
    }

    #[test]
    fn saslname_escaping() {
        let first = parse_client_first(b"n,a=a=3Db=2Cc,n=a=3Db=2Cc,r=x").unwrap();
        assert_eq!(first.username, "a=b,c");
        assert_eq!(first.authzid.as_deref(), Some("a=b,c"));
        assert_eq!(encode_saslname("a=b,c=2C"), "a=3Db=2Cc=3D2C");
        assert_eq!(
            decode_saslname(&encode_saslname("a=b,c=2C")).as_deref(),
            Some("a=b,c=2C")
        );
        for bad in ["", "a=", "a=2", "a=2c", "a=41", "a,b", "a\0b"] {
            assert_eq!(decode_saslname(bad), None, "{bad:?}");
        }
        let (_, client_first) = ClientExchange::new(ScramMechanism::Sha256, "a,b=c", b"pw", "n");
        assert_eq!(client_first, b"n,,n=a=2Cb=3Dc,r=n");
    }

    #[test]
    fn escaped_username_round_trip() {
        let mechanism = ScramMechanism::Sha256;
        let credential = ScramCredential::from_password(mechanism, b"pw", b"salt", 4096).unwrap();
        assert_eq!(exchange(mechanism, "a,b=c", b"pw", &credential), Ok(()));
    }

    #[test]
    fn client_final_grammar() {
        let server = rfc7677_server();
        let nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let refused = [
            (format!("c=biws,r={nonce}"), "no p= proof at the end"),
            (format!("r={nonce},c=biws,p=AAAA"), "no c= channel binding"),
            ("c=biws,p=AAAA".to_owned(), "no r= nonce"),
            (format!("c=biws,r={nonce},p=!!!!"), "proof is not base64"),
        ];
        for (msg, reason) in refused {
            assert_eq!(
                server.client_final(msg.as_bytes()),
                Err(ScramError::Malformed(reason)),
                "{msg}"
            );
        }
        let short_proof = format!("c=biws,r={nonce},p=AAAA");
        assert_eq!(
            server.client_final(short_proof.as_bytes()),
            Err(ScramError::InvalidProof)
        );
    }

    #[test]
    fn server_final_checks() {
        let client = rfc7677_client();
        assert_eq!(
            client.server_final(b"e=invalid-proof"),
            Err(ScramError::ServerError("invalid-proof".to_owned()))
        );
        assert_eq!(
            client.server_final(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Err(ScramError::InvalidServerSignature)
        );
        assert_eq!(
            client.server_final(b"x=1"),
            Err(ScramError::Malformed("no v= verifier"))
        );
    }

    #[test]
    fn client_messages_out_of_order() {
        let (client, _) = ClientExchange::new(ScramMechanism::Sha256, "user", b"pencil", "n");
        assert_eq!(
            client.server_final(rfc7677::SERVER_FINAL.as_bytes()),
            Err(ScramError::OutOfOrder)
        );
        let mut client = rfc7677_client();
        assert_eq!(
            client.server_first(rfc7677::SERVER_FIRST.as_bytes()),
            Err(ScramError::OutOfOrder)
        );
    }

    #[test]
    fn iteration_limits() {
        let mechanism = ScramMechanism::Sha256;
        for iterations in [0, 4095, 16385, u32::MAX] {
            assert_eq!(
                ScramCredential::from_salted_password(mechanism, b"salted", b"salt", iterations),
                Err(ScramError::IterationsOutOfRange(iterations))
            );
        }
        let (mut client, _) = ClientExchange::new(mechanism, "user", b"pencil", "n");
        assert_eq!(
            client.server_first(b"r=nonce,s=AAAA,i=1000000000"),
            Err(ScramError::IterationsOutOfRange(1_000_000_000))
        );
        assert_eq!(
            client.server_first(b"r=nonce,s=AAAA,i=+4096"),
            Err(ScramError::Malformed("iteration count is not a number"))
        );
        let mut weak = rfc7677_credential();
        weak.iterations = 1024;
        let first = parse_client_first(rfc7677::CLIENT_FIRST.as_bytes()).unwrap();
        assert!(matches!(
            ServerExchange::server_first(mechanism, &first, &weak, "s"),
            Err(ScramError::IterationsOutOfRange(1024))
        ));
    }

    #[test]
    fn server_nonce_is_checked() {
        let first = parse_client_first(rfc7677::CLIENT_FIRST.as_bytes()).unwrap();
        let credential = rfc7677_credential();
        for nonce in ["", "a,b", "a b"] {
            assert!(
                ServerExchange::server_first(ScramMechanism::Sha256, &first, &credential, nonce)
                    .is_err(),
                "{nonce:?}"
            );
        }
    }

    #[test]
    fn check_password() {
        let credential = rfc7677_credential();
        assert!(credential.check_password(ScramMechanism::Sha256, b"pencil"));
        assert!(!credential.check_password(ScramMechanism::Sha256, b"pencil "));
        assert!(!credential.check_password(ScramMechanism::Sha512, b"pencil"));
        let broken = ScramCredential {
            iterations: 0,
            ..credential
        };
        assert!(!broken.check_password(ScramMechanism::Sha256, b"pencil"));
    }

    #[test]
    fn salted_password_credential_matches_password_credential() {
        let mechanism = ScramMechanism::Sha512;
        let iterations = NonZeroU32::new(4096).unwrap();
        let salted = mechanism.salted_password(b"pw", b"salt", iterations);
        assert_eq!(
            ScramCredential::from_salted_password(mechanism, &salted, b"salt", 4096),
            ScramCredential::from_password(mechanism, b"pw", b"salt", 4096)
        );
    }

    #[test]
    fn debug_redacts_secrets() {
        let credential = rfc7677_credential();
        assert_eq!(
            format!("{credential:?}"),
            "ScramCredential { iterations: 4096, .. }"
        );
        assert_eq!(
            format!("{:?}", rfc7677_client()),
            r#"ClientExchange { mechanism: Sha256, client_nonce: "rOprNGfwEbeRWgbNEkqO", .. }"#
        );
        assert_eq!(
            format!("{:?}", rfc7677_server()),
            r#"ServerExchange { mechanism: Sha256, nonce: "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", .. }"#
        );
    }

    #[test]
    fn mechanism_names_and_codes() {
        for mechanism in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            assert_eq!(ScramMechanism::from_name(mechanism.name()), Some(mechanism));
            assert_eq!(ScramMechanism::from_code(mechanism.code()), Some(mechanism));
        }
        assert_eq!(ScramMechanism::Sha256.name(), "SCRAM-SHA-256");
        assert_eq!(ScramMechanism::Sha512.code(), 2);
        assert_eq!(ScramMechanism::from_name("scram-sha-256"), None);
        assert_eq!(ScramMechanism::from_code(0), None);
    }

    #[test]
    fn truncated_messages_error() {
        let server = rfc7677_server();
        for end in 0..rfc7677::CLIENT_FINAL.len() {
            let truncated = &rfc7677::CLIENT_FINAL.as_bytes()[..end];
            assert!(server.client_final(truncated).is_err(), "{end}");
        }
        for end in 0..rfc7677::SERVER_FIRST.len() {
            let (mut client, _) =
                ClientExchange::new(ScramMechanism::Sha256, "user", b"pencil", "rOpr");
            let truncated = &rfc7677::SERVER_FIRST.as_bytes()[..end];
            assert!(client.server_first(truncated).is_err(), "{end}");
        }
        let client = rfc7677_client();
        for end in 0..rfc7677::SERVER_FINAL.len() {
            let truncated = &rfc7677::SERVER_FINAL.as_bytes()[..end];
            assert!(client.server_final(truncated).is_err(), "{end}");
        }
        // A truncated client-first is an error, or a valid message with a shorter nonce.
        for end in 0..rfc7677::CLIENT_FIRST.len() {
            let truncated = &rfc7677::CLIENT_FIRST.as_bytes()[..end];
            match parse_client_first(truncated) {
                Ok(first) => assert!(rfc7677::CLIENT_NONCE.starts_with(&first.client_nonce)),
                Err(_) => assert!(end <= "n,,n=user,r=".len(), "{end}"),
            }
        }
    }

    proptest! {
        #[test]
        fn parse_client_first_never_panics(msg in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_client_first(&msg);
        }

        #[test]
        fn client_first_grammar_never_panics(
            msg in "(n|y|p=x|)?,(a=[a-z=2C3D,]{0,4})?,(m=x,)?(n=[a-z=2C3D,]{0,4})?,?(r=[ -~]{0,4})?(,[a-z1]{0,3}=?[a-z=]{0,3}){0,2}"
        ) {
            let _ = parse_client_first(msg.as_bytes());
        }

        #[test]
        fn client_final_never_panics(msg in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = rfc7677_server().client_final(&msg);
        }

        #[test]
        fn server_messages_never_panic(msg in "[rsiev=,A-Za-z0-9+/]{0,40}") {
            let (mut client, _) =
                ClientExchange::new(ScramMechanism::Sha256, "user", b"pencil", "r");
            // Only a message with a big enough iteration count costs a PBKDF2 run here.
            let _ = client.server_first(msg.as_bytes());
            let _ = rfc7677_client().server_final(msg.as_bytes());
        }

        #[test]
        fn saslname_round_trips(name in "\\PC{1,16}") {
            prop_assert_eq!(decode_saslname(&encode_saslname(&name)), Some(name));
        }
    }
}
