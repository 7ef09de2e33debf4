//! The real `skiff` binary: a `skiff broker` child on an ephemeral port, and the client
//! subcommands against it (tables, `--json`, exit codes).

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    BIN, Broker, free_port, skiff, skiff_stdin, start_broker, start_broker_with, stderr, stdout,
};

#[test]
fn help_lists_commands_examples_and_exit_codes() {
    let out = Command::new(BIN).arg("--help").output().expect("run");
    assert!(out.status.success());
    let text = stdout(&out);
    for word in [
        "broker",
        "topic",
        "produce",
        "consume",
        "group",
        "clients",
        "user",
        "acl",
        "--command-config",
        "Examples",
        "Exit codes",
    ] {
        assert!(text.contains(word), "{word} missing from --help:\n{text}");
    }
    let out = Command::new(BIN)
        .args(["consume", "--help"])
        .output()
        .expect("run");
    assert!(stdout(&out).contains("--from-beginning") && stdout(&out).contains("Examples"));
    let out = Command::new(BIN)
        .args(["topic", "frobnicate"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "usage error");
}

#[test]
fn unreachable_broker_exits_3() {
    let out = Command::new(BIN)
        .args([
            "topic",
            "list",
            "--bootstrap",
            "127.0.0.1:1",
            "--timeout-ms",
            "2000",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("error:"), "{}", stderr(&out));
}

#[test]
fn topics_produce_consume_and_groups() {
    let broker = start_broker();

    // topic create / duplicate / list / describe
    let out = skiff(&broker, &["topic", "create", "orders", "--partitions", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("created topic orders"));
    let out = skiff(&broker, &["topic", "create", "orders", "--partitions", "3"]);
    assert_eq!(out.status.code(), Some(5), "exists: {}", stderr(&out));
    let out = skiff(&broker, &["topic", "create", "tmp", "--json"]);
    let created: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    assert_eq!(created["name"], "tmp");
    assert_eq!(created["id"].as_str().map(str::len), Some(22));

    let out = skiff(&broker, &["topic", "list"]);
    let text = stdout(&out);
    assert!(text.starts_with("TOPIC"), "{text}");
    assert!(text.contains("orders") && text.contains("tmp"));
    let out = skiff(&broker, &["topic", "list", "--json"]);
    let list: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    let orders = list
        .as_array()
        .expect("array")
        .iter()
        .find(|t| t["name"] == "orders")
        .expect("orders listed");
    assert_eq!(orders["partitions"], 3);

    // produce from stdin with keys, and from a file
    let mut lines = String::new();
    for i in 0..30 {
        lines.push_str(&format!("k{i}:v{i}\n"));
    }
    let out = skiff_stdin(
        &broker,
        &["produce", "orders", "--key-separator", ":"],
        Some(&lines),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("30/30 records acknowledged"),
        "{}",
        stderr(&out)
    );
    let file = broker.dir.path().join("more.txt");
    std::fs::write(&file, "a\nb\nc\n").expect("write file");
    let out = skiff(
        &broker,
        &[
            "produce",
            "orders",
            "--file",
            file.to_str().expect("path"),
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    assert_eq!(summary["records"], 3);

    let out = skiff(&broker, &["topic", "describe", "orders", "--json"]);
    let d: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    let total: i64 = d["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| p["latest"].as_i64().unwrap_or(0) - p["earliest"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(total, 33);
    let out = skiff(&broker, &["topic", "describe", "orders"]);
    assert!(stdout(&out).contains("PARTITION"), "{}", stdout(&out));
    let out = skiff(&broker, &["topic", "describe", "missing"]);
    assert_eq!(out.status.code(), Some(4), "not found: {}", stderr(&out));

    // consume without a group, JSON lines
    let out = skiff(
        &broker,
        &[
            "consume",
            "orders",
            "--from-beginning",
            "--max",
            "33",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let records: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(records.len(), 33);
    assert!(
        records
            .iter()
            .any(|r| r["key"] == "k7" && r["value"] == "v7")
    );
    assert!(
        stderr(&out).contains("done: 33 records"),
        "{}",
        stderr(&out)
    );

    // consume in a group, then the group shows committed offsets with zero lag
    let out = skiff(
        &broker,
        &[
            "consume",
            "orders",
            "--group",
            "billing",
            "--from-beginning",
            "--max",
            "33",
            "--print-key",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).lines().any(|l| l == "k3\tv3"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("lag 0"), "{}", stderr(&out));

    let out = skiff(&broker, &["group", "list"]);
    assert!(stdout(&out).contains("billing"), "{}", stdout(&out));
    let out = skiff(&broker, &["group", "describe", "billing", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let g: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    let offsets = g["offsets"].as_array().expect("offsets");
    let committed: i64 = offsets
        .iter()
        .map(|o| o["committed"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(committed, 33, "{g}");
    assert!(offsets.iter().all(|o| o["lag"] == 0), "{g}");
    let out = skiff(&broker, &["group", "describe", "billing"]);
    assert!(stdout(&out).contains("COMMITTED"), "{}", stdout(&out));

    // delete
    let out = skiff(&broker, &["topic", "delete", "tmp"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = skiff(&broker, &["topic", "list", "--json"]);
    assert!(!stdout(&out).contains("\"tmp\""));
}

/// A broker with its admin HTTP listener on a free port; returns it and the admin base URL.
fn start_broker_with_admin() -> (Broker, String) {
    let port = free_port();
    let broker = start_broker_with(&["--set", &format!("admin.listen=127.0.0.1:{port}")]);
    (broker, format!("http://127.0.0.1:{port}"))
}

#[test]
fn clients_lists_and_shows_instances_from_the_admin_http() {
    let (broker, admin) = start_broker_with_admin();
    let out = skiff(&broker, &["topic", "create", "seen", "--partitions", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // A consumer in a group stays connected (and a member) while we look.
    let mut consumer = Command::new(BIN)
        .args(["consume", "seen", "--group", "watchers", "--quiet"])
        .args(["--bootstrap", &broker.addr])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn consumer");

    let mut found: Option<serde_json::Value> = None;
    for _ in 0..100 {
        let out = skiff(&broker, &["clients", "--admin", &admin, "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let list: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
        found = list
            .as_array()
            .expect("array")
            .iter()
            .find(|v| {
                v["memberships"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|m| m["group"] == "watchers"))
            })
            .cloned();
        if found.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let view = found.expect("the consumer's instance is listed with its group");
    let id = view["client_instance_id"]
        .as_str()
        .expect("an ID")
        .to_string();
    assert_eq!(id.len(), 22, "{view}");
    let member = &view["memberships"][0];
    assert_eq!(
        member["member_id"],
        id.as_str(),
        "member ID = instance ID: {view}"
    );

    let out = skiff(&broker, &["clients", "--admin", &admin]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("INSTANCE ID"), "{text}");
    for word in [
        "CLIENT ID",
        "SOFTWARE",
        "GROUPS",
        "LAG",
        "REJECTIONS",
        id.as_str(),
        "watchers",
        "skiff-cli",
    ] {
        assert!(text.contains(word), "{word} missing:\n{text}");
    }

    let out = skiff(&broker, &["clients", "show", &id, "--admin", &admin]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for word in [
        &format!("client instance {id}")[..],
        "CONNECTION",
        "PEER",
        "GROUP",
        "watchers",
        "seen:",
        "METRIC",
        "ConsumerGroupHeartbeat=",
        // Lag: the instance's total, per membership, per assigned partition.
        "  lag:",
        "LAG",
        "HIGH WATERMARK",
    ] {
        assert!(text.contains(word), "{word} missing:\n{text}");
    }
    let out = skiff(
        &broker,
        &["clients", "show", &id, "--admin", &admin, "--json"],
    );
    let one: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    assert_eq!(one["client_instance_id"], id.as_str());

    // A producer command that has ended is still shown under its instance ID, with the
    // producer ID its idempotent producer was given.
    let mut produce = Command::new(BIN)
        .args(["produce", "seen", "--bootstrap", &broker.addr])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn producer");
    if let Some(mut stdin) = produce.stdin.take() {
        use std::io::Write;
        stdin.write_all(b"one\n").expect("write");
    }
    let done = produce.wait_with_output().expect("producer ends");
    assert!(done.status.success(), "{}", stderr(&done));
    let out = skiff(&broker, &["clients", "--admin", &admin, "--json"]);
    let list: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    let producer = list
        .as_array()
        .expect("array")
        .iter()
        .find(|v| v["producers"].as_array().is_some_and(|p| !p.is_empty()))
        .cloned()
        .expect("the producer's instance is listed");
    let producer_id = producer["client_instance_id"].as_str().expect("an ID");
    assert_ne!(producer_id, id, "another process, another instance");
    let out = skiff(
        &broker,
        &["clients", "show", producer_id, "--admin", &admin],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("PRODUCER ID"), "{text}");
    let pid = producer["producers"][0]["producer_id"].to_string();
    assert!(text.contains(&pid), "{pid} missing:\n{text}");

    // Unknown ID -> 4; bad ID -> 2; no admin listener -> 3.
    let out = skiff(
        &broker,
        &[
            "clients",
            "show",
            "AAAAAAAAAAAAAAAAAAAAAw",
            "--admin",
            &admin,
        ],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let out = skiff(
        &broker,
        &["clients", "show", "not/an/id", "--admin", &admin],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = skiff(
        &broker,
        &[
            "clients",
            "--admin",
            "http://127.0.0.1:1",
            "--timeout-ms",
            "2000",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));

    let _ = consumer.kill();
    let _ = consumer.wait();
}

#[test]
fn a_short_client_command_still_reports_its_metrics_with_a_terminating_push() {
    let (broker, admin) = start_broker_with_admin();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let mut config = skiff_client::ClientConfig::new(&broker.addr);
        config.client_id = "test-setup".into();
        config.enable_metrics_push = false;
        let client = skiff_client::Client::new(config).expect("client");
        skiff_client::Admin::new(client.clone())
            .alter_client_metrics(
                "everything",
                &[("metrics", skiff_client::AlterConfigOp::Set, "*")],
            )
            .await
            .expect("subscribe every client to every metric");
        client.close().await;
    });

    // `topic list` is one Metadata round trip: it ends before any periodic push is due.
    let out = skiff(&broker, &["topic", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let out = skiff(&broker, &["clients", "--admin", &admin, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    let cli: Vec<&serde_json::Value> = list
        .as_array()
        .expect("array")
        .iter()
        .filter(|v| v["telemetry"]["client_id"] == "skiff-cli")
        .collect();
    // The `clients` command itself talks HTTP only; the one Kafka client was `topic list`'s.
    assert_eq!(cli.len(), 1, "{list:#}");
    let telemetry = &cli[0]["telemetry"];
    assert_eq!(telemetry["terminating"], true, "{telemetry:#}");
    assert!(
        telemetry["last_successful_push_ms"].is_number(),
        "{telemetry:#}"
    );
    assert!(
        telemetry["metrics"]
            .as_array()
            .is_some_and(|m| !m.is_empty()),
        "{telemetry:#}"
    );
}

#[test]
fn a_transactional_produce_is_read_committed_by_consume() {
    let broker = start_broker();
    let out = skiff(&broker, &["topic", "create", "ledger"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = skiff_stdin(
        &broker,
        &["produce", "ledger", "--transactional-id", "ledger-loader"],
        Some("one\ntwo\nthree\n"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("3/3 records acknowledged"),
        "{}",
        stderr(&out)
    );
    // The consumer is read_committed by default: three records, and no transaction marker.
    let out = skiff(
        &broker,
        &[
            "consume",
            "ledger",
            "--from-beginning",
            "--idle-exit-ms",
            "1500",
            "--quiet",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "one\ntwo\nthree\n");
}

#[test]
fn a_share_group_hands_records_out_acknowledges_and_redelivers_released_ones() {
    let broker = start_broker_with(&[
        "--set",
        "admin.listen=none",
        "--set",
        "group.share.enable=true",
        "--set",
        "group.share.heartbeat.interval.ms=200",
    ]);
    let out = skiff(&broker, &["topic", "create", "jobs", "--partitions", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // A first member joins while the topic is empty: the group's share partition starts at 0
    // (a new share group starts at the end of the log, as in Kafka).
    let out = skiff(
        &broker,
        &[
            "consume",
            "jobs",
            "--share-group",
            "crew",
            "--idle-exit-ms",
            "1000",
            "--quiet",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let out = skiff_stdin(&broker, &["produce", "jobs"], Some("a\nb\nc\n"));
    assert!(out.status.success(), "{}", stderr(&out));

    let json_lines = |out: &std::process::Output| -> Vec<serde_json::Value> {
        stdout(out)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect()
    };
    // Look at two and give them back: printed with their first delivery, then released.
    let out = skiff(
        &broker,
        &[
            "consume",
            "jobs",
            "--share-group",
            "crew",
            "--max",
            "2",
            "--ack",
            "release",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let first = json_lines(&out);
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(first.iter().all(|r| r["delivery_count"] == 1), "{first:?}");
    assert!(
        stderr(&out).contains("acknowledged as release"),
        "{}",
        stderr(&out)
    );
    // The next member gets all three; the released ones for the second time.
    let out = skiff(
        &broker,
        &[
            "consume",
            "jobs",
            "--share-group",
            "crew",
            "--max",
            "3",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let all = json_lines(&out);
    let values: BTreeSet<&str> = all.iter().filter_map(|r| r["value"].as_str()).collect();
    assert_eq!(values, BTreeSet::from(["a", "b", "c"]), "{all:?}");
    for r in &all {
        if first.iter().any(|f| f["offset"] == r["offset"]) {
            assert_eq!(r["delivery_count"], 2, "{r}");
        }
    }
    // Accepted: nothing is left for anyone.
    let out = skiff(
        &broker,
        &[
            "consume",
            "jobs",
            "--share-group",
            "crew",
            "--idle-exit-ms",
            "1500",
            "--quiet",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    // --ack only with --share-group; a share group does not mix with --group.
    let out = skiff(&broker, &["consume", "jobs", "--ack", "reject"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = skiff(
        &broker,
        &["consume", "jobs", "--share-group", "crew", "--group", "g"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn share_group_offsets_are_described_set_and_deleted() {
    let broker = start_broker_with(&[
        "--set",
        "admin.listen=none",
        "--set",
        "group.share.enable=true",
        "--set",
        "group.share.heartbeat.interval.ms=200",
    ]);
    let out = skiff(&broker, &["topic", "create", "jobs", "--partitions", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = skiff_stdin(&broker, &["produce", "jobs"], Some("a\nb\nc\nd\ne\n"));
    assert!(out.status.success(), "{}", stderr(&out));
    let share_offsets = |broker: &Broker| -> Vec<serde_json::Value> {
        let out = skiff(broker, &["group", "describe", "crew", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
        assert_eq!(v["type"], "share", "{v}");
        v["share_offsets"]
            .as_array()
            .expect("share offsets")
            .clone()
    };

    // A new share group would start at the end: set it to the earliest offset first (which
    // creates it), then a member takes two records.
    let out = skiff(
        &broker,
        &[
            "group",
            "share-offsets",
            "set",
            "crew",
            "--topic",
            "jobs",
            "--to-earliest",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("START-OFFSET"), "{}", stdout(&out));
    let out = skiff(
        &broker,
        &[
            "consume",
            "jobs",
            "--share-group",
            "crew",
            "--max",
            "2",
            "--quiet",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let offsets = share_offsets(&broker);
    assert_eq!(offsets.len(), 1, "{offsets:?}");
    assert_eq!(
        (&offsets[0]["start_offset"], &offsets[0]["lag"]),
        (&serde_json::json!(2), &serde_json::json!(3)),
        "{offsets:?}"
    );
    let out = skiff(&broker, &["group", "describe", "crew"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("START-OFFSET") && text.contains("LAG"),
        "{text}"
    );

    // Moved to 4; then forgotten.
    let out = skiff(
        &broker,
        &[
            "group",
            "share-offsets",
            "set",
            "crew",
            "--topic",
            "jobs",
            "--partition",
            "0",
            "--to-offset",
            "4",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let offsets = share_offsets(&broker);
    assert_eq!(
        (&offsets[0]["start_offset"], &offsets[0]["lag"]),
        (&serde_json::json!(4), &serde_json::json!(1)),
        "{offsets:?}"
    );
    let out = skiff(
        &broker,
        &[
            "group",
            "share-offsets",
            "delete",
            "crew",
            "--topic",
            "jobs",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(share_offsets(&broker).is_empty());
    // Deleting again: nothing to delete (a failure with the broker's reason).
    let out = skiff(
        &broker,
        &[
            "group",
            "share-offsets",
            "delete",
            "crew",
            "--topic",
            "jobs",
        ],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        stderr(&out)
    );
    // A target is required, and only one.
    let out = skiff(
        &broker,
        &["group", "share-offsets", "set", "crew", "--topic", "jobs"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = skiff(
        &broker,
        &[
            "group",
            "share-offsets",
            "set",
            "crew",
            "--topic",
            "jobs",
            "--to-latest",
            "--to-offset",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// `skiff group describe` of a share group: each member with the records it holds acquired (a
/// Skiff client `ShareConsumer` in explicit mode holds what it polled), read from the admin
/// listener; without a reachable admin listener a note says why they are not shown.
#[test]
fn share_group_describe_shows_what_each_member_holds() {
    use skiff_client::{AcknowledgementMode, ClientConfig, ShareConsumer, ShareConsumerConfig};

    let port = free_port();
    let admin = format!("http://127.0.0.1:{port}");
    let broker = start_broker_with(&[
        "--set",
        &format!("admin.listen=127.0.0.1:{port}"),
        "--set",
        "group.share.enable=true",
        "--set",
        "group.share.heartbeat.interval.ms=200",
    ]);
    let out = skiff(&broker, &["topic", "create", "jobs", "--partitions", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The group starts at the log start, then four records wait.
    let out = skiff(
        &broker,
        &[
            "group",
            "share-offsets",
            "set",
            "crew",
            "--topic",
            "jobs",
            "--to-earliest",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = skiff_stdin(&broker, &["produce", "jobs"], Some("a\nb\nc\nd\n"));
    assert!(out.status.success(), "{}", stderr(&out));

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (consumer, held) = runtime.block_on(async {
        let client = skiff_client::Client::new(ClientConfig::new(&broker.addr)).expect("client");
        let mut config = ShareConsumerConfig::new("crew");
        config.acknowledgement_mode = AcknowledgementMode::Explicit;
        config.fetch_max_wait = Duration::from_millis(100);
        let consumer = ShareConsumer::new(client, config).expect("share consumer");
        consumer.subscribe(&["jobs"]).expect("subscribe");
        let mut held = Vec::new();
        for _ in 0..100 {
            held = consumer
                .poll(Duration::from_millis(200))
                .await
                .expect("poll");
            if !held.is_empty() {
                break;
            }
        }
        assert!(!held.is_empty(), "no records polled");
        (consumer, held.len())
    });
    let member = consumer.member_id();

    let out = skiff(
        &broker,
        &["group", "describe", "crew", "--admin", &admin, "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    let members = v["members"].as_array().expect("members");
    assert_eq!(members.len(), 1, "{v}");
    assert_eq!(members[0]["member_id"], member);
    assert_eq!(members[0]["acquired_records"], held, "{v}");
    assert_eq!(
        members[0]["assignment"],
        serde_json::json!(["jobs-0"]),
        "{v}"
    );
    let out = skiff(&broker, &["group", "describe", "crew", "--admin", &admin]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("ACQUIRED"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with(&member))
        .unwrap_or_else(|| panic!("no row for {member}: {text}"));
    assert!(row.trim_end().ends_with(&held.to_string()), "{row}");

    // No admin listener there: the members without counts, and a note.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let out = skiff(&broker, &["group", "describe", "crew", "--admin", &nowhere]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("note: acquired records not shown"),
        "{}",
        stderr(&out)
    );
    runtime.block_on(async { consumer.close().await.expect("close") });
}

/// JSON on stdout of a successful command.
fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_str(stdout(out).trim()).expect("json")
}

/// The committed offsets of `group` as (topic, partition) -> offset, from `group describe --json`.
fn committed(broker: &Broker, group: &str) -> std::collections::BTreeMap<(String, i64), i64> {
    let g = json_of(&skiff(broker, &["group", "describe", group, "--json"]));
    g["offsets"]
        .as_array()
        .expect("offsets")
        .iter()
        .map(|o| {
            (
                (
                    o["topic"].as_str().unwrap_or_default().to_string(),
                    o["partition"].as_i64().unwrap_or(-1),
                ),
                o["committed"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

#[test]
fn kafka_flags_are_accepted() {
    let broker = start_broker();

    // --bootstrap-server and kafka-topics' action flags.
    let out = Command::new(BIN)
        .args([
            "topic",
            "--create",
            "--topic",
            "kt",
            "--partitions",
            "2",
            "--replication-factor",
            "1",
            "--bootstrap-server",
            &broker.addr,
        ])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("created topic kt"),
        "{}",
        stdout(&out)
    );
    let out = skiff(&broker, &["topic", "--list"]);
    assert!(stdout(&out).contains("kt"), "{}", stdout(&out));
    let d = json_of(&skiff(
        &broker,
        &["topic", "--describe", "--topic", "kt", "--json"],
    ));
    assert_eq!(d["partitions"].as_array().map(Vec::len), Some(2), "{d}");
    // A replication factor a single node cannot honour is the broker's refusal.
    let out = skiff(
        &broker,
        &[
            "topic",
            "create",
            "--topic",
            "kt3",
            "--replication-factor",
            "3",
        ],
    );
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));

    // The topic positionally or with --topic, exactly one.
    let out = skiff(&broker, &["consume", "kt", "--topic", "kt"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = skiff(&broker, &["consume"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // kafka-console-producer's and kafka-console-consumer's properties, --max-messages.
    let out = skiff_stdin(
        &broker,
        &[
            "produce",
            "--topic",
            "kt",
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
        ],
        Some("k1:v1\nk2:v2\nk3:v3\n"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = skiff(
        &broker,
        &[
            "consume",
            "--topic",
            "kt",
            "--from-beginning",
            "--max-messages",
            "3",
            "--property",
            "print.key=true",
            "--group",
            "kg",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: BTreeSet<String> = stdout(&out).lines().map(str::to_string).collect();
    let tabbed: BTreeSet<String> = ["k1\tv1", "k2\tv2", "k3\tv3"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(lines, tabbed);
    let out = skiff(
        &broker,
        &[
            "consume",
            "kt",
            "--from-beginning",
            "--max-messages",
            "3",
            "--property",
            "print.key=true",
            "--property",
            "key.separator= | ",
        ],
    );
    assert!(
        stdout(&out).lines().any(|l| l == "k2 | v2"),
        "{}",
        stdout(&out)
    );
    let out = skiff(
        &broker,
        &["consume", "kt", "--property", "print.timestamp=yes"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // kafka-consumer-groups' action flags and --group.
    let out = skiff(&broker, &["group", "--list"]);
    assert!(stdout(&out).contains("kg"), "{}", stdout(&out));
    let g = json_of(&skiff(
        &broker,
        &["group", "--describe", "--group", "kg", "--json"],
    ));
    assert_eq!(g["group"], "kg");
    let out = skiff(&broker, &["group", "--delete", "--group", "kg"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = skiff(&broker, &["topic", "--delete", "--topic", "kt"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn topic_alter_changes_configs_and_partitions() {
    let broker = start_broker();
    let out = skiff(&broker, &["topic", "create", "logs", "--partitions", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = skiff(
        &broker,
        &[
            "topic",
            "alter",
            "logs",
            "--config",
            "retention.ms=123456",
            "--config",
            "cleanup.policy=compact",
            "--partitions",
            "4",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let d = json_of(&skiff(&broker, &["topic", "describe", "logs", "--json"]));
    assert_eq!(d["configs"]["retention.ms"], "123456", "{d}");
    assert_eq!(d["configs"]["cleanup.policy"], "compact", "{d}");
    assert_eq!(d["partitions"].as_array().map(Vec::len), Some(4), "{d}");
    let out = skiff(&broker, &["topic", "describe", "logs"]);
    assert!(
        stdout(&out).contains("retention.ms=123456"),
        "{}",
        stdout(&out)
    );

    let out = skiff(
        &broker,
        &[
            "topic",
            "--alter",
            "--topic",
            "logs",
            "--delete-config",
            "retention.ms",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let d = json_of(&skiff(&broker, &["topic", "describe", "logs", "--json"]));
    assert!(d["configs"].get("retention.ms").is_none(), "{d}");
    assert_eq!(d["configs"]["cleanup.policy"], "compact", "{d}");

    // Nothing to do, fewer partitions, an unknown topic.
    let out = skiff(&broker, &["topic", "alter", "logs"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = skiff(&broker, &["topic", "alter", "logs", "--partitions", "2"]);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    let out = skiff(
        &broker,
        &["topic", "alter", "missing", "--config", "retention.ms=1"],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
}

/// A `skiff consume` child, killed when dropped.
struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn group_reset_offsets_plans_executes_and_refuses_a_group_with_members() {
    let broker = start_broker();
    let out = skiff(&broker, &["topic", "create", "r", "--partitions", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for (partition, lines) in [("0", "a\nb\nc\nd\ne\nf\n"), ("1", "g\nh\ni\nj\n")] {
        let out = skiff_stdin(
            &broker,
            &["produce", "r", "--partition", partition],
            Some(lines),
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let out = skiff(
        &broker,
        &[
            "consume",
            "r",
            "--group",
            "billing",
            "--from-beginning",
            "--max",
            "10",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let key = |p: i64| ("r".to_string(), p);
    let at = |a: i64, b: i64| [(key(0), a), (key(1), b)].into_iter().collect();
    assert_eq!(committed(&broker, "billing"), at(6, 4));

    // The dry run (the default) prints Kafka's plan table and commits nothing.
    let out = skiff(
        &broker,
        &[
            "group",
            "reset-offsets",
            "--group",
            "billing",
            "--topic",
            "r",
            "--to-earliest",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![
            vec!["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            vec!["billing", "r", "0", "0"],
            vec!["billing", "r", "1", "0"],
        ],
        "{text}"
    );
    assert_eq!(committed(&broker, "billing"), at(6, 4));

    // --execute moves them; shifts and offsets stay within [log start, log end].
    let reset = |extra: &[&str]| {
        let mut args = vec!["group", "--reset-offsets", "--group", "billing"];
        args.extend_from_slice(extra);
        let out = skiff(&broker, &args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        out
    };
    reset(&["--topic", "r", "--to-earliest", "--execute"]);
    assert_eq!(committed(&broker, "billing"), at(0, 0));
    reset(&["--topic", "r:0", "--shift-by", "2", "--execute"]);
    assert_eq!(committed(&broker, "billing"), at(2, 0));
    reset(&["--topic", "r", "--to-latest", "--execute"]);
    assert_eq!(committed(&broker, "billing"), at(6, 4));
    let out = reset(&["--all-topics", "--shift-by", "-100", "--execute"]);
    assert!(stderr(&out).contains("outside"), "{}", stderr(&out));
    assert_eq!(committed(&broker, "billing"), at(0, 0));
    reset(&["--topic", "r:1", "--to-offset", "3", "--execute"]);
    assert_eq!(committed(&broker, "billing"), at(0, 3));
    let plan = json_of(&reset(&[
        "--topic",
        "r",
        "--to-datetime",
        "2000-01-01T00:00:00Z",
        "--json",
    ]));
    assert_eq!(plan["executed"], false, "{plan}");
    let new: Vec<i64> = plan["offsets"]
        .as_array()
        .expect("offsets")
        .iter()
        .map(|o| o["new_offset"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(new, vec![0, 0], "{plan}");
    reset(&[
        "--topic",
        "r",
        "--to-datetime",
        "2999-01-01T00:00:00Z",
        "--execute",
    ]);
    assert_eq!(committed(&broker, "billing"), at(6, 4));
    let out = skiff(
        &broker,
        &[
            "group",
            "reset-offsets",
            "--group",
            "billing",
            "--topic",
            "r:7",
            "--to-latest",
        ],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));

    // A group with a member: the plan is shown, --execute is refused and nothing moves.
    let member = Background(
        Command::new(BIN)
            .args(["consume", "r", "--group", "billing", "-q"])
            .args(["--bootstrap", &broker.addr])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn consumer"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let g = json_of(&skiff(&broker, &["group", "describe", "billing", "--json"]));
        if g["members"].as_array().is_some_and(|m| !m.is_empty()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no member joined: {g}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let args = [
        "group",
        "reset-offsets",
        "--group",
        "billing",
        "--topic",
        "r",
        "--to-earliest",
    ];
    let out = skiff(&broker, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = skiff(&broker, &[&args[..], &["--execute"]].concat());
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert!(stderr(&out).contains("member"), "{}", stderr(&out));
    assert_eq!(committed(&broker, "billing"), at(6, 4));
    drop(member);
}

#[test]
fn completions_print_a_script() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .expect("run");
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(
            script.contains("skiff") && script.contains("bootstrap-server"),
            "{shell}: {script}"
        );
    }
    let out = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn quotas_are_set_listed_and_removed() {
    let broker = start_broker();
    for args in [
        &[
            "quota",
            "set",
            "--client-id",
            "app",
            "--set",
            "producer_byte_rate=1048576",
        ][..],
        &[
            "quota",
            "set",
            "--user-default",
            "--client-id-default",
            "--add-config",
            "consumer_byte_rate=2097152",
        ][..],
        &[
            "quota",
            "set",
            "--client-instance-id",
            "fKyDTSoUQIypXvmIVOg3tg",
            "--set",
            "request_percentage=25",
        ][..],
    ] {
        let out = skiff(&broker, args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    let listed = json_of(&skiff(&broker, &["quota", "list", "--json"]));
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{listed}");
    let app = json_of(&skiff(
        &broker,
        &["quota", "list", "--client-id", "app", "--json"],
    ));
    assert_eq!(app[0]["quotas"]["producer_byte_rate"], 1048576.0, "{app}");
    let table = stdout(&skiff(&broker, &["quota", "list"]));
    assert!(
        table.contains("client-instance-id=fKyDTSoUQIypXvmIVOg3tg")
            && table.contains("request_percentage=25"),
        "{table}"
    );
    let out = skiff(
        &broker,
        &[
            "quota",
            "set",
            "--client-id",
            "app",
            "--delete",
            "producer_byte_rate",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = json_of(&skiff(&broker, &["quota", "list", "--json"]));
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    // No entity, nothing to change, a bad value: usage; a key the broker refuses: rejected.
    assert_eq!(
        skiff(&broker, &["quota", "set", "--set", "producer_byte_rate=1"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        skiff(&broker, &["quota", "set", "--client-id", "x"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        skiff(
            &broker,
            &[
                "quota",
                "set",
                "--client-id",
                "x",
                "--set",
                "producer_byte_rate=fast"
            ]
        )
        .status
        .code(),
        Some(2)
    );
    assert_eq!(
        skiff(
            &broker,
            &[
                "quota",
                "set",
                "--client-id",
                "x",
                "--set",
                "no_such_quota=1"
            ]
        )
        .status
        .code(),
        Some(6)
    );
}

/// `skiff clients events ID`: one instance's journal as a table or JSON, in any encoding of
/// its ID; `--follow` prints new events as they happen.
#[test]
fn clients_events_shows_and_follows_an_instance_s_journal() {
    use std::io::BufRead;

    let (broker, admin) = start_broker_with_admin();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let client = runtime.block_on(async {
        let mut config = skiff_client::ClientConfig::new(&broker.addr);
        config.client_id = "journaled".into();
        config.enable_metrics_push = false;
        let client = skiff_client::Client::new(config).expect("client");
        skiff_client::Admin::new(client.clone())
            .list_topics()
            .await
            .expect("topics listed");
        client
    });
    let id = client.instance_id();

    // Follow first: the connection is already there, its close arrives while following.
    let id_text = id.to_string();
    let mut follow = Command::new(BIN)
        .args(["clients", "events", &id_text, "--follow", "--json"])
        .args(["--admin", &admin])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn follow");
    let followed = follow.stdout.take().expect("stdout");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(followed)
            .lines()
            .map_while(Result::ok)
        {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen: Vec<serde_json::Value> = Vec::new();
    let until = |kind: &str, seen: &mut Vec<serde_json::Value>| {
        while !seen.iter().any(|e| e["type"] == kind) {
            let line = lines_rx
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no {kind} event followed; saw {seen:?}"));
            seen.push(serde_json::from_str(&line).expect("one JSON event per line"));
        }
    };
    until("connected", &mut seen);
    runtime.block_on(client.close());
    until("disconnected", &mut seen);
    let _ = follow.kill();
    let _ = follow.wait();
    let seqs: Vec<u64> = seen.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");

    // The table, with the ID in hyphenated hex.
    let out = skiff(
        &broker,
        &["clients", "events", &id.to_hyphenated(), "--admin", &admin],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for word in [
        "SEQ",
        "AT",
        "TYPE",
        "SUMMARY",
        "connected",
        "disconnected",
        "connection",
    ] {
        assert!(text.contains(word), "{word} missing:\n{text}");
    }
    let out = skiff(
        &broker,
        &[
            "clients", "events", &id_text, "--admin", &admin, "--json", "--since", "0",
        ],
    );
    let view: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    assert_eq!(view["client_instance_id"], id_text.as_str());
    assert!(
        view["events"].as_array().is_some_and(|e| e.len() >= 2),
        "{view:#}"
    );
    let out = skiff(
        &broker,
        &["clients", "events", "not/an/id", "--admin", &admin],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
