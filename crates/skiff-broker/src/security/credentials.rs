//! The credential store: each user's SCRAM credentials (salt, iterations, stored key, server
//! key), one per mechanism, kept in `data.dir/scram-credentials.json` and replaced crash-safely
//! on every change. SASL PLAIN checks a password against the same credentials, so one store
//! serves both mechanisms. Passwords are never stored, logged or returned.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use skiff_auth::scram::{ScramCredential, ScramMechanism};

/// The store's file, inside the data directory.
pub const CREDENTIALS_FILE: &str = "scram-credentials.json";

/// Users and their SCRAM credentials.
#[derive(Debug, Default, Clone)]
pub struct Credentials {
    users: BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
}

/// One credential in the file (binary fields in base64).
#[derive(Serialize, Deserialize)]
struct StoredCredential {
    mechanism: String,
    iterations: u32,
    salt: String,
    stored_key: String,
    server_key: String,
}

#[derive(Serialize, Deserialize)]
struct StoredFile {
    version: u32,
    users: BTreeMap<String, Vec<StoredCredential>>,
}

impl Credentials {
    /// Reads the store of a data directory (empty when the file does not exist yet).
    pub fn load(data_dir: &Path) -> Result<Credentials> {
        let path = data_dir.join(CREDENTIALS_FILE);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Credentials::default()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Self::decode(&text).with_context(|| format!("{} is damaged", path.display()))
    }

    pub(crate) fn decode(text: &[u8]) -> Result<Credentials> {
        let file: StoredFile = serde_json::from_slice(text)?;
        if file.version != 1 {
            bail!("unknown version {}", file.version);
        }
        let mut users = BTreeMap::new();
        for (user, stored) in file.users {
            let mut credentials = BTreeMap::new();
            for c in stored {
                let mechanism = ScramMechanism::from_name(&c.mechanism)
                    .with_context(|| format!("user {user}: unknown mechanism {}", c.mechanism))?;
                let field = |name: &str, value: &str| {
                    BASE64
                        .decode(value)
                        .with_context(|| format!("user {user}: {name} is not base64"))
                };
                credentials.insert(
                    mechanism,
                    ScramCredential {
                        salt: field("salt", &c.salt)?,
                        stored_key: field("stored_key", &c.stored_key)?,
                        server_key: field("server_key", &c.server_key)?,
                        iterations: c.iterations,
                    },
                );
            }
            users.insert(user, credentials);
        }
        Ok(Credentials { users })
    }

    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        let users = self
            .users
            .iter()
            .map(|(user, credentials)| {
                let stored = credentials
                    .iter()
                    .map(|(mechanism, c)| StoredCredential {
                        mechanism: mechanism.name().to_string(),
                        iterations: c.iterations,
                        salt: BASE64.encode(&c.salt),
                        stored_key: BASE64.encode(&c.stored_key),
                        server_key: BASE64.encode(&c.server_key),
                    })
                    .collect();
                (user.clone(), stored)
            })
            .collect();
        Ok(serde_json::to_vec_pretty(&StoredFile {
            version: 1,
            users,
        })?)
    }

    /// Writes the store to its file in `data_dir` (crash-safe: the old or the new file).
    pub fn save(&self, data_dir: &Path) -> Result<()> {
        crate::node_file::write_atomically(&Self::path(data_dir), &self.encode()?)
    }

    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(CREDENTIALS_FILE)
    }

    pub fn get(&self, user: &str, mechanism: ScramMechanism) -> Option<&ScramCredential> {
        self.users.get(user)?.get(&mechanism)
    }

    /// Whether `password` is `user`'s (SASL PLAIN): checked against the user's SCRAM-SHA-512
    /// credential, else its SCRAM-SHA-256 one.
    pub fn check_password(&self, user: &str, password: &[u8]) -> bool {
        let Some(credentials) = self.users.get(user) else {
            return false;
        };
        [ScramMechanism::Sha512, ScramMechanism::Sha256]
            .into_iter()
            .find_map(|m| credentials.get(&m).map(|c| c.check_password(m, password)))
            .unwrap_or(false)
    }

    /// Sets (or replaces) a user's credential for one mechanism.
    pub fn set(&mut self, user: &str, mechanism: ScramMechanism, credential: ScramCredential) {
        self.users
            .entry(user.to_string())
            .or_default()
            .insert(mechanism, credential);
    }

    /// Removes a user's credential for one mechanism; `false` if there was none.
    pub fn remove(&mut self, user: &str, mechanism: ScramMechanism) -> bool {
        let Some(credentials) = self.users.get_mut(user) else {
            return false;
        };
        let removed = credentials.remove(&mechanism).is_some();
        if credentials.is_empty() {
            self.users.remove(user);
        }
        removed
    }

    /// Each user with a credential, and its (mechanism, iterations).
    pub fn users(&self) -> impl Iterator<Item = (&str, Vec<(ScramMechanism, u32)>)> {
        self.users.iter().map(|(user, credentials)| {
            (
                user.as_str(),
                credentials
                    .iter()
                    .map(|(m, c)| (*m, c.iterations))
                    .collect(),
            )
        })
    }

    /// A user's (mechanism, iterations), or `None` for a user without credentials.
    pub fn user(&self, user: &str) -> Option<Vec<(ScramMechanism, u32)>> {
        self.users
            .get(user)
            .map(|c| c.iter().map(|(m, c)| (*m, c.iterations)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_survive_a_save_and_check_passwords() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = Credentials::default();
        let alice =
            ScramCredential::from_password(ScramMechanism::Sha512, b"secret", b"salt", 4096)
                .expect("credential");
        store.set("alice", ScramMechanism::Sha512, alice.clone());
        let bob =
            ScramCredential::from_password(ScramMechanism::Sha256, b"hunter2", b"pepper", 8192)
                .expect("credential");
        store.set("bob", ScramMechanism::Sha256, bob);
        store.save(dir.path()).expect("save");
        let text = std::fs::read_to_string(Credentials::path(dir.path())).expect("read");
        assert!(!text.contains("secret") && !text.contains("hunter2"));

        let loaded = Credentials::load(dir.path()).expect("load");
        assert_eq!(loaded.get("alice", ScramMechanism::Sha512), Some(&alice));
        assert!(loaded.check_password("alice", b"secret"));
        assert!(!loaded.check_password("alice", b"Secret"));
        assert!(loaded.check_password("bob", b"hunter2"));
        assert!(!loaded.check_password("carol", b"secret"));
        assert_eq!(
            loaded.user("bob"),
            Some(vec![(ScramMechanism::Sha256, 8192)])
        );

        let mut loaded = loaded;
        assert!(loaded.remove("bob", ScramMechanism::Sha256));
        assert!(!loaded.remove("bob", ScramMechanism::Sha256));
        assert_eq!(loaded.user("bob"), None);
    }

    #[test]
    fn a_missing_file_is_an_empty_store_and_a_damaged_one_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            Credentials::load(dir.path())
                .expect("empty")
                .users()
                .count(),
            0
        );
        std::fs::write(
            Credentials::path(dir.path()),
            b"{\"version\":1,\"users\":{\"a\":[{",
        )
        .expect("write");
        let error = format!("{:#}", Credentials::load(dir.path()).expect_err("damaged"));
        assert!(error.contains("damaged"), "{error}");
    }
}
