//! The `skiff` command against secured brokers: `--command-config` files (librdkafka's keys and
//! Kafka Java's `sasl.jaas.config`) over SASL_SSL, `skiff user` through a broker and in a data
//! directory before the broker starts, `skiff acl`, and `skiff clients` on an admin listener with
//! TLS and a bearer token.

mod common;

use std::path::{Path, PathBuf};

use common::{Broker, skiff, skiff_at, spawn_broker, stderr, stdout};
use skiff_testkit::certs::TestCa;

/// A broker from a TOML config in `files`: a PLAINTEXT listener on port 0 (its `addr`), then
/// `secured` (`NAME://127.0.0.1:PORT`) with the `extra` keys; on the data directory `data`.
fn start_secured(files: &Path, data: tempfile::TempDir, secured: &str, extra: &str) -> Broker {
    let config = files.join("skiff.toml");
    std::fs::write(
        &config,
        format!(
            "listeners = \"PLAINTEXT://127.0.0.1:0,{secured}\"\n\
             \"admin.listen\" = \"none\"\n\
             \"num.partitions\" = 1\n\
             \"connection.failed.authentication.delay.ms\" = 10\n\
             {extra}"
        ),
    )
    .expect("write the broker config");
    spawn_broker(data, &["--config", path(&config)])
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, content).expect("write a test file");
    file
}

#[test]
fn command_config_files_connect_over_sasl_ssl() {
    let files = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("skiff CLI test CA");
    let ca_file = files.path().join("ca.pem");
    ca.write(&ca_file);
    let keystore = files.path().join("broker.pem");
    ca.server_for(&["127.0.0.1"]).write_keystore(&keystore);
    let port = common::free_port();
    let broker = start_secured(
        files.path(),
        tempfile::tempdir().expect("tempdir"),
        &format!("SASL_SSL://127.0.0.1:{port}"),
        &format!(
            "\"ssl.keystore.location\" = \"{}\"\n\
             \"sasl.enabled.mechanisms\" = \"SCRAM-SHA-512,PLAIN\"\n",
            path(&keystore)
        ),
    );
    let secured = format!("127.0.0.1:{port}");

    // The user, set over the PLAINTEXT listener.
    let password_file = write(files.path(), "alice.pw", "alice-secret\n");
    let out = skiff(
        &broker,
        &[
            "user",
            "set",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password-file",
            path(&password_file),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("alice-secret") && !stderr(&out).contains("alice-secret"));

    // librdkafka's keys; a key skiff does not read is a warning.
    let scram = write(
        files.path(),
        "scram.properties",
        &format!(
            "# SCRAM over TLS\n\
             security.protocol=SASL_SSL\n\
             sasl.mechanisms=SCRAM-SHA-512\n\
             sasl.username=alice\n\
             sasl.password=alice-secret\n\
             ssl.ca.location={}\n\
             \n\
             client.id=reporting\n",
            path(&ca_file)
        ),
    );
    let out = skiff_at(
        &secured,
        &[
            "topic",
            "create",
            "secure",
            "--command-config",
            path(&scram),
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning") && stderr(&out).contains("client.id"));
    let out = skiff_at(
        &secured,
        &["produce", "secure", "--command-config", path(&scram)],
        Some("one\ntwo\n"),
    );
    assert!(
        stderr(&out).contains("2/2 records acknowledged"),
        "{}",
        stderr(&out)
    );

    // Kafka Java's sasl.jaas.config, with PLAIN (checked against the SCRAM credential).
    let jaas = write(
        files.path(),
        "jaas.properties",
        &format!(
            "security.protocol=SASL_SSL\n\
             sasl.mechanism=PLAIN\n\
             sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n\
             \x20   username=\"alice\" password=\"alice-secret\";\n\
             ssl.ca.location={}\n",
            path(&ca_file)
        ),
    );
    let out = skiff_at(
        &secured,
        &[
            "consume",
            "secure",
            "--from-beginning",
            "--max",
            "2",
            "--quiet",
            "--command-config",
            path(&jaas),
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "one\ntwo\n");

    let out = skiff_at(
        &secured,
        &["user", "list", "--json", "--command-config", path(&scram)],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let users: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    assert_eq!(users[0]["user"], "alice");
    assert_eq!(users[0]["credentials"][0]["mechanism"], "SCRAM-SHA-512");
    assert_eq!(users[0]["credentials"][0]["iterations"], 4096);

    // A wrong password: exit code 7, and the message never shows it.
    let wrong = write(
        files.path(),
        "wrong.properties",
        &format!(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=alice\n\
             sasl.password=not-her-secret\nssl.ca.location={}\n",
            path(&ca_file)
        ),
    );
    let out = skiff_at(
        &secured,
        &["topic", "list", "--command-config", path(&wrong)],
        None,
    );
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains("authentication"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("not-her-secret"), "{}", stderr(&out));

    let out = skiff(
        &broker,
        &["user", "delete", "alice", "--mechanism", "SCRAM-SHA-512"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = skiff(
        &broker,
        &["user", "delete", "alice", "--mechanism", "SCRAM-SHA-512"],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
}

#[test]
fn a_user_set_in_the_data_directory_logs_in_once_the_broker_starts() {
    let files = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    let data_dir = path(data.path()).to_string();
    let empty = write(files.path(), "empty.pw", "\n");
    let set = |password_file: &Path| {
        common::wait_bounded(
            std::process::Command::new(common::BIN)
                .args(["user", "set", "admin", "--mechanism", "SCRAM-SHA-256"])
                .args([
                    "--password-file",
                    path(password_file),
                    "--data-dir",
                    &data_dir,
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn skiff"),
        )
    };
    let out = set(&empty);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = set(&write(files.path(), "admin.pw", "admin-secret\n"));
    assert!(out.status.success(), "{}", stderr(&out));

    let port = common::free_port();
    let broker = start_secured(
        files.path(),
        data,
        &format!("SASL_PLAINTEXT://127.0.0.1:{port}"),
        "\"sasl.enabled.mechanisms\" = \"SCRAM-SHA-256\"\n",
    );
    let out = skiff(&broker, &["user", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("admin"), "{}", stdout(&out));
    let login = write(
        files.path(),
        "admin.properties",
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n\
         sasl.username=admin\nsasl.password=admin-secret\n",
    );
    let out = skiff_at(
        &format!("127.0.0.1:{port}"),
        &["topic", "create", "first", "--command-config", path(&login)],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn acls_are_added_listed_and_removed() {
    // The PLAINTEXT client is User:ANONYMOUS: a super user may change ACLs.
    let broker = common::start_broker_with(&[
        "--set",
        "admin.listen=none",
        "--set",
        "authorizer=standard",
        "--set",
        "super.users=User:ANONYMOUS",
    ]);
    let out = skiff(
        &broker,
        &[
            "acl",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "READ",
            "--operation",
            "DESCRIBE",
            "--topic",
            "orders-",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("added 2 ACLs"), "{}", stdout(&out));
    let out = skiff(
        &broker,
        &[
            "acl",
            "add",
            "--deny-principal",
            "User:mallory",
            "--operation",
            "ALL",
            "--cluster",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let out = skiff(&broker, &["acl", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{listed:#}");
    let out = skiff(
        &broker,
        &[
            "acl",
            "list",
            "--topic",
            "orders-123",
            "--resource-pattern-type",
            "match",
        ],
    );
    let text = stdout(&out);
    assert!(text.starts_with("RESOURCE"), "{text}");
    assert!(
        text.contains("User:alice") && !text.contains("mallory"),
        "{text}"
    );

    let out = skiff(
        &broker,
        &[
            "acl",
            "remove",
            "--topic",
            "orders-",
            "--resource-pattern-type",
            "prefixed",
            "--operation",
            "READ",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let removed: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    assert_eq!(removed["removed"][0]["operation"], "READ", "{removed:#}");
    let out = skiff(&broker, &["acl", "list", "--allow-principal", "User:alice"]);
    let text = stdout(&out);
    assert!(
        text.contains("DESCRIBE") && !text.contains("READ"),
        "{text}"
    );
}

/// `skiff clients ARGS` with the environment `env`, and no token file from the caller's.
fn skiff_clients(admin: &str, args: &[&str], env: &[(&str, &Path)]) -> std::process::Output {
    let mut command = std::process::Command::new(common::BIN);
    command
        .args(["clients", "--admin", admin, "--timeout-ms", "10000"])
        .args(args)
        .env_remove("SKIFF_ADMIN_TOKEN_FILE")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    common::wait_bounded(command.spawn().expect("spawn skiff"))
}

#[test]
fn clients_reads_an_admin_listener_with_tls_and_a_token() {
    const TOKEN: &str = "s3cret-admin-token";
    let files = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("skiff admin test CA");
    let ca_file = files.path().join("ca.pem");
    ca.write(&ca_file);
    let keystore = files.path().join("admin.pem");
    ca.server_for(&["127.0.0.1"]).write_keystore(&keystore);
    let token = write(files.path(), "admin.token", &format!("{TOKEN}\n"));
    let port = common::free_port();
    let broker = common::start_broker_with(&[
        "--set",
        &format!("admin.listen=127.0.0.1:{port}"),
        "--set",
        &format!("admin.ssl.keystore.location={}", path(&keystore)),
        "--set",
        &format!("admin.token.file={}", path(&token)),
    ]);
    let admin = format!("https://127.0.0.1:{port}");
    // `skiff clients` on the admin listener; whatever happens, it never prints the token.
    let clients = |args: &[&str], env: &[(&str, &Path)]| {
        let out = skiff_clients(&admin, args, env);
        assert!(!stdout(&out).contains(TOKEN) && !stderr(&out).contains(TOKEN));
        out
    };

    // A producer command that has ended stays listed under its instance ID.
    let out = skiff(&broker, &["topic", "create", "seen"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = common::skiff_stdin(&broker, &["produce", "seen"], Some("one\n"));
    assert!(out.status.success(), "{}", stderr(&out));

    let trusted = ["--admin-ca-file", path(&ca_file)];
    let with_token = [trusted[0], trusted[1], "--admin-token-file", path(&token)];
    let out = clients(&[&with_token[..], &["--json"]].concat(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    let producer = list
        .as_array()
        .expect("an array")
        .iter()
        .find(|v| v["producers"].as_array().is_some_and(|p| !p.is_empty()))
        .expect("the producer's instance is listed");
    let id = producer["client_instance_id"].as_str().expect("an ID");
    assert_eq!(id.len(), 22, "{producer}");
    let out = clients(&[&["show", id][..], &with_token].concat(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("client instance {id}")),
        "{}",
        stdout(&out)
    );

    // The token file from the environment, the CA from the system's (SSL_CERT_FILE).
    let out = clients(
        &[],
        &[
            ("SKIFF_ADMIN_TOKEN_FILE", &token),
            ("SSL_CERT_FILE", &ca_file),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(id), "{}", stdout(&out));

    // No token, a wrong token, an untrusted certificate: refused, with exit code 7.
    let out = clients(&trusted, &[]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the admin listener needs a token: --admin-token-file"),
        "{}",
        stderr(&out)
    );
    let wrong = write(files.path(), "wrong.token", "not-the-token\n");
    let out = clients(
        &[trusted[0], trusted[1], "--admin-token-file", path(&wrong)],
        &[],
    );
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refused the token"),
        "{}",
        stderr(&out)
    );
    let other_ca = files.path().join("other-ca.pem");
    TestCa::new("another CA").write(&other_ca);
    let out = clients(
        &[
            "--admin-ca-file",
            path(&other_ca),
            "--admin-token-file",
            path(&token),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("TLS handshake failed"),
        "{}",
        stderr(&out)
    );
}
