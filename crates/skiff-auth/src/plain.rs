//! SASL PLAIN (RFC 4616), as Kafka's `PlainSaslServer` reads it: the client's one message
//! `[authzid] NUL username NUL password` ([`parse`]) and how Skiff's client writes it
//! ([`client_message`]). Checking the password is the broker's business, against the user's
//! SCRAM credential ([`crate::scram::ScramCredential::check_password`]).

use std::fmt;

/// Why a PLAIN message was refused; the texts are Kafka's. No variant carries the password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlainError {
    #[error("Invalid SASL/PLAIN response: not UTF-8")]
    InvalidUtf8,
    /// The message does not have exactly three NUL-separated tokens (counted up to four).
    #[error("Invalid SASL/PLAIN response: expected 3 tokens, got {0}")]
    TokenCount(usize),
    #[error("Authentication failed: username not specified")]
    MissingUsername,
    #[error("Authentication failed: password not specified")]
    MissingPassword,
    /// The client asked to act as someone else, which Kafka does not allow.
    #[error(
        "Authentication failed: Client requested an authorization id that is different from username"
    )]
    AuthzidMismatch,
}

/// A parsed PLAIN message: who the client says it is, and its password.
#[derive(Clone, PartialEq, Eq)]
pub struct PlainMessage {
    pub username: String,
    password: Vec<u8>,
}

impl PlainMessage {
    /// The password, to check against the user's credential.
    pub fn password(&self) -> &[u8] {
        &self.password
    }
}

impl fmt::Debug for PlainMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainMessage")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Parses `[authzid] NUL username NUL password`: UTF-8, exactly two NULs, a non-empty username
/// and password, and an authzid that is empty or the username.
pub fn parse(msg: &[u8]) -> Result<PlainMessage, PlainError> {
    let msg = std::str::from_utf8(msg).map_err(|_| PlainError::InvalidUtf8)?;
    let tokens: Vec<&str> = msg.splitn(4, '\0').collect();
    let &[authzid, username, password] = tokens.as_slice() else {
        return Err(PlainError::TokenCount(tokens.len()));
    };
    if username.is_empty() {
        return Err(PlainError::MissingUsername);
    }
    if password.is_empty() {
        return Err(PlainError::MissingPassword);
    }
    if !authzid.is_empty() && authzid != username {
        return Err(PlainError::AuthzidMismatch);
    }
    Ok(PlainMessage {
        username: username.to_owned(),
        password: password.as_bytes().to_vec(),
    })
}

/// The PLAIN message for `username`/`password`, without an authzid: `NUL username NUL password`.
pub fn client_message(username: &str, password: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(2 + username.len() + password.len());
    msg.push(0);
    msg.extend_from_slice(username.as_bytes());
    msg.push(0);
    msg.extend_from_slice(password);
    msg
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn parses_with_and_without_authzid() {
        for msg in [&b"\0alice\0secret"[..], b"alice\0alice\0secret"] {
            let parsed = parse(msg).unwrap();
            assert_eq!(parsed.username, "alice");
            assert_eq!(parsed.password(), b"secret");
        }
    }

    #[test]
    fn client_message_round_trips() {
        let msg = client_message("alice", "pässword".as_bytes());
        assert_eq!(msg, "\0alice\0pässword".as_bytes());
        let parsed = parse(&msg).unwrap();
        assert_eq!(parsed.username, "alice");
        assert_eq!(parsed.password(), "pässword".as_bytes());
    }

    #[test]
    fn refuses_malformed_messages() {
        let refused = [
            (&b""[..], PlainError::TokenCount(1)),
            (b"alice", PlainError::TokenCount(1)),
            (b"\0alice", PlainError::TokenCount(2)),
            (b"\0alice\0secret\0", PlainError::TokenCount(4)),
            (b"\0\0\0\0\0\0", PlainError::TokenCount(4)),
            (b"\0\0secret", PlainError::MissingUsername),
            (b"\0alice\0", PlainError::MissingPassword),
            (b"bob\0alice\0secret", PlainError::AuthzidMismatch),
            (b"\0alice\0\xff", PlainError::InvalidUtf8),
        ];
        for (msg, error) in refused {
            assert_eq!(parse(msg), Err(error), "{msg:?}");
        }
    }

    #[test]
    fn kafka_error_texts() {
        assert_eq!(
            PlainError::AuthzidMismatch.to_string(),
            "Authentication failed: Client requested an authorization id that is different from username"
        );
        assert_eq!(
            PlainError::TokenCount(2).to_string(),
            "Invalid SASL/PLAIN response: expected 3 tokens, got 2"
        );
    }

    #[test]
    fn debug_redacts_the_password() {
        let parsed = parse(b"\0alice\0secret").unwrap();
        assert_eq!(
            format!("{parsed:?}"),
            r#"PlainMessage { username: "alice", password: "<redacted>" }"#
        );
    }

    proptest! {
        #[test]
        fn parse_never_panics(msg in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse(&msg);
        }

        #[test]
        fn parse_never_panics_on_nul_separated_text(msg in "[a-b\\x00é]{0,12}") {
            let _ = parse(msg.as_bytes());
        }

        #[test]
        fn client_message_round_trips_any_credentials(
            username in "[^\\x00]{1,16}",
            password in "[^\\x00]{1,16}",
        ) {
            let parsed = parse(&client_message(&username, password.as_bytes())).unwrap();
            prop_assert_eq!(&parsed.username, &username);
            prop_assert_eq!(parsed.password(), password.as_bytes());
        }
    }
}
