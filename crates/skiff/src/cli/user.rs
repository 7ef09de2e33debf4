//! `skiff user set|list|delete`: SCRAM credentials, through a broker (AlterUserScramCredentials
//! and DescribeUserScramCredentials) or, with `--data-dir`, straight in a stopped broker's data
//! directory (as `kafka-storage format --add-scram` does, so the first user exists before the
//! broker first starts). Passwords come from a file and are never printed.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;
use skiff_auth::scram::{ScramCredential, ScramMechanism};
use skiff_broker::Credentials;
use skiff_client::{Admin, ScramUser};

use super::{CmdResult, Conn, Failure, exit, print_json, print_table};

/// The salt length of credentials written to a data directory (as the client's).
const SALT_LEN: usize = 32;

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Set (or replace) a user's SCRAM credential.
    #[command(
        after_help = "Examples:\n  skiff user set alice --mechanism SCRAM-SHA-512 --password-file alice.pw\n  \
                      skiff user set admin --mechanism SCRAM-SHA-256 --password-file admin.pw --data-dir ./skiff-data\n  \
                      skiff user set bob --mechanism SCRAM-SHA-512 --password-file bob.pw --iterations 8192 \\\n    \
                      --bootstrap broker:9093 --command-config admin.properties"
    )]
    Set {
        /// The user name (the principal User:NAME).
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, value_parser = parse_mechanism)]
        mechanism: ScramMechanism,
        /// A file holding the password (a trailing newline is not part of it).
        #[arg(long, value_name = "FILE")]
        password_file: PathBuf,
        /// PBKDF2 iterations, 4096 to 16384.
        #[arg(long, default_value_t = 4096)]
        iterations: u32,
        /// Write into this stopped broker's data directory (created if missing) instead of
        /// asking a broker.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// List the users with SCRAM credentials.
    #[command(
        after_help = "Examples:\n  skiff user list\n  skiff user list --json --command-config admin.properties\n  \
                      skiff user list --data-dir ./skiff-data"
    )]
    List {
        /// Read this stopped broker's data directory instead of asking a broker.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Delete a user's SCRAM credential.
    #[command(
        after_help = "Examples:\n  skiff user delete alice --mechanism SCRAM-SHA-512\n  \
                      skiff user delete alice --mechanism SCRAM-SHA-256 --data-dir ./skiff-data"
    )]
    Delete {
        /// The user name.
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, value_parser = parse_mechanism)]
        mechanism: ScramMechanism,
        /// Change this stopped broker's data directory instead of asking a broker.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
}

impl UserCommand {
    fn data_dir(&self) -> Option<&Path> {
        match self {
            UserCommand::Set { data_dir, .. }
            | UserCommand::List { data_dir }
            | UserCommand::Delete { data_dir, .. } => data_dir.as_deref(),
        }
    }
}

fn parse_mechanism(name: &str) -> Result<ScramMechanism, String> {
    ScramMechanism::from_name(&name.to_ascii_uppercase())
        .ok_or_else(|| format!("{name:?} is not SCRAM-SHA-256 or SCRAM-SHA-512"))
}

/// Where the credentials are: a broker, or a stopped broker's data directory.
enum Store {
    Broker(Admin),
    DataDir(PathBuf),
}

pub async fn run(conn: Conn, command: UserCommand) -> CmdResult {
    let store = match command.data_dir() {
        Some(dir) => Store::DataDir(dir.to_path_buf()),
        None => Store::Broker(Admin::new(conn.client()?)),
    };
    let result = execute(&store, &conn, command).await;
    if let Store::Broker(admin) = &store {
        // Closing sends the terminating telemetry push (KIP-714) when the broker asked for it.
        admin.client().close().await;
    }
    result
}

async fn execute(store: &Store, conn: &Conn, command: UserCommand) -> CmdResult {
    match command {
        UserCommand::Set {
            name,
            mechanism,
            password_file,
            iterations,
            ..
        } => {
            let password = read_password(&password_file)?;
            store.set(&name, mechanism, &password, iterations).await?;
            if conn.json {
                print_json(&json!({
                    "user": name,
                    "mechanism": mechanism.name(),
                    "iterations": iterations,
                }));
            } else {
                println!("set the {} credential of {name}", mechanism.name());
            }
        }
        UserCommand::List { .. } => {
            let users = store.list().await?;
            if conn.json {
                print_json(&users_json(&users));
            } else {
                let rows: Vec<Vec<String>> = users
                    .iter()
                    .flat_map(|user| {
                        user.credentials.iter().map(|(mechanism, iterations)| {
                            vec![
                                user.name.clone(),
                                mechanism.name().to_string(),
                                iterations.to_string(),
                            ]
                        })
                    })
                    .collect();
                print_table(&["USER", "MECHANISM", "ITERATIONS"], &rows);
            }
        }
        UserCommand::Delete {
            name, mechanism, ..
        } => {
            store.delete(&name, mechanism).await?;
            if conn.json {
                print_json(&json!({"user": name, "mechanism": mechanism.name(), "deleted": true}));
            } else {
                println!("deleted the {} credential of {name}", mechanism.name());
            }
        }
    }
    Ok(())
}

fn users_json(users: &[ScramUser]) -> serde_json::Value {
    json!(
        users
            .iter()
            .map(|user| json!({
                "user": user.name,
                "credentials": user.credentials.iter().map(|(mechanism, iterations)| json!({
                    "mechanism": mechanism.name(),
                    "iterations": iterations,
                })).collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>()
    )
}

/// The password in `path`: its bytes less one trailing newline (`\n` or `\r\n`); an empty one is
/// refused.
fn read_password(path: &Path) -> Result<Vec<u8>, Failure> {
    let mut password = std::fs::read(path).map_err(|e| Failure {
        code: exit::FAILURE,
        message: format!("reading the password file {}: {e}", path.display()),
    })?;
    if password.last() == Some(&b'\n') {
        password.pop();
        if password.last() == Some(&b'\r') {
            password.pop();
        }
    }
    if password.is_empty() {
        return Err(Failure::usage(format!(
            "the password file {} is empty",
            path.display()
        )));
    }
    Ok(password)
}

impl Store {
    async fn set(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        password: &[u8],
        iterations: u32,
    ) -> CmdResult {
        match self {
            Store::Broker(admin) => Ok(admin
                .set_scram_credential(user, mechanism, password, iterations)
                .await?),
            Store::DataDir(dir) => {
                let mut salt = [0u8; SALT_LEN];
                getrandom::fill(&mut salt)
                    .map_err(|e| store_failure(format!("no randomness for a salt: {e}")))?;
                let credential =
                    ScramCredential::from_password(mechanism, password, &salt, iterations)
                        .map_err(|e| Failure::usage(e.to_string()))?;
                std::fs::create_dir_all(dir)
                    .map_err(|e| store_failure(format!("creating {}: {e}", dir.display())))?;
                let mut credentials = load(dir)?;
                credentials.set(user, mechanism, credential);
                save(&credentials, dir)
            }
        }
    }

    async fn delete(&self, user: &str, mechanism: ScramMechanism) -> CmdResult {
        match self {
            Store::Broker(admin) => Ok(admin.delete_scram_credential(user, mechanism).await?),
            Store::DataDir(dir) => {
                let mut credentials = load(dir)?;
                if !credentials.remove(user, mechanism) {
                    return Err(Failure {
                        code: exit::NOT_FOUND,
                        message: format!("{user} has no {} credential", mechanism.name()),
                    });
                }
                save(&credentials, dir)
            }
        }
    }

    async fn list(&self) -> Result<Vec<ScramUser>, Failure> {
        match self {
            Store::Broker(admin) => Ok(admin.describe_scram_users(None).await?),
            Store::DataDir(dir) => Ok(load(dir)?
                .users()
                .map(|(name, credentials)| ScramUser {
                    name: name.to_string(),
                    credentials: credentials
                        .into_iter()
                        .map(|(mechanism, iterations)| {
                            (mechanism, i32::try_from(iterations).unwrap_or(i32::MAX))
                        })
                        .collect(),
                })
                .collect()),
        }
    }
}

fn store_failure(message: String) -> Failure {
    Failure {
        code: exit::FAILURE,
        message,
    }
}

fn load(dir: &Path) -> Result<Credentials, Failure> {
    Credentials::load(dir).map_err(|e| store_failure(format!("{e:#}")))
}

fn save(credentials: &Credentials, dir: &Path) -> CmdResult {
    credentials
        .save(dir)
        .map_err(|e| store_failure(format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_file_loses_one_trailing_newline_and_may_not_be_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pw");
        for (content, expected) in [
            (&b"secret\n"[..], &b"secret"[..]),
            (b"secret\r\n", b"secret"),
            (b"secret", b"secret"),
            (b"two\n\n", b"two\n"),
        ] {
            std::fs::write(&file, content).expect("write");
            assert_eq!(read_password(&file).expect("password"), expected);
        }
        std::fs::write(&file, b"\n").expect("write");
        let refused = read_password(&file).expect_err("empty");
        assert_eq!(refused.code, exit::USAGE);
    }

    #[tokio::test]
    async fn a_data_dir_store_sets_lists_and_deletes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("new-data-dir");
        let store = Store::DataDir(data.clone());
        store
            .set("alice", ScramMechanism::Sha512, b"secret", 8192)
            .await
            .expect("set");
        let users = store.list().await.expect("list");
        assert_eq!(
            users,
            vec![ScramUser {
                name: "alice".into(),
                credentials: vec![(ScramMechanism::Sha512, 8192)],
            }]
        );
        assert!(
            Credentials::load(&data)
                .expect("load")
                .check_password("alice", b"secret")
        );
        let missing = store.delete("alice", ScramMechanism::Sha256).await;
        assert_eq!(missing.err().map(|f| f.code), Some(exit::NOT_FOUND));
        store
            .delete("alice", ScramMechanism::Sha512)
            .await
            .expect("delete");
        assert!(store.list().await.expect("list").is_empty());
        let few = store.set("bob", ScramMechanism::Sha256, b"pw", 10).await;
        assert_eq!(few.err().map(|f| f.code), Some(exit::USAGE));
    }
}
