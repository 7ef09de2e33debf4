//! The client-instance journal over real sockets: one instance's scripted life (connect, join,
//! fenced, rejoin, leave, close) comes back in order from `GET /clients/{id}/events`, survives
//! a restart, stays within its bounds under a flood of connections, and a damaged journal file
//! does not stop the broker.

mod common;

use common::{TestBroker, http_get};
use skiff_protocol::generated::ApiVersionsRequest;
use skiff_protocol::generated::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest;
use skiff_protocol::{Response, Uuid, error_codes};

fn admin_of(broker: &TestBroker) -> std::net::SocketAddr {
    broker
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin listener")
}

fn with_admin(config: &mut skiff_broker::BrokerConfig) {
    config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
}

async fn events(admin: std::net::SocketAddr, query: &str) -> serde_json::Value {
    let (status, body) = http_get(admin, query).await;
    assert_eq!(status, 200, "{query}: {body}");
    serde_json::from_str(&body).expect("json")
}

fn types(view: &serde_json::Value) -> Vec<String> {
    view["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits (the endpoint's long poll, bounded) until the instance's journal has an event of
/// `kind`; returns the whole journal then.
async fn await_event(admin: std::net::SocketAddr, id: Uuid, kind: &str) -> serde_json::Value {
    let mut after = 0u64;
    for _ in 0..50 {
        let view = events(
            admin,
            &format!("/clients/{id}/events?after={after}&wait_ms=2000"),
        )
        .await;
        if types(&view).iter().any(|t| t == kind) {
            return events(admin, &format!("/clients/{id}/events")).await;
        }
        after = view["next_after"].as_u64().unwrap_or(after);
    }
    panic!("no {kind} event for {id}");
}

async fn api_versions(c: &mut common::Client) {
    let request = ApiVersionsRequest {
        client_software_name: "journal-test".into(),
        client_software_version: "1.2".into(),
        ..Default::default()
    };
    match c.call(request, 3).await {
        Response::ApiVersions(r) => assert_eq!(r.error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
}

async fn heartbeat(c: &mut common::Client, member_id: &str, epoch: i32) -> (i16, i32) {
    let request = ConsumerGroupHeartbeatRequest {
        group_id: "journaled".into(),
        member_id: member_id.to_string().into(),
        member_epoch: epoch,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: (epoch == 0).then(|| vec!["life".into()]),
        topic_partitions: (epoch == 0).then(Vec::new),
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::ConsumerGroupHeartbeat(r) => (r.error_code, r.member_epoch),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_s_life_in_order_across_a_restart_and_within_bounds() {
    let broker = TestBroker::start_with(with_admin).await;
    let admin = admin_of(&broker);
    let mut setup = broker.client().await;
    common::create_topic(&mut setup, "life").await;

    // The scripted life: connect, name the software, join, be fenced, rejoin, leave, close.
    let id = Uuid::random().expect("random");
    let member = id.to_string();
    let mut c = broker.client().await;
    c.instance_id = Some(id);
    api_versions(&mut c).await;
    let (error, epoch) = heartbeat(&mut c, &member, 0).await;
    assert_eq!(error, 0);
    let (error, epoch) = heartbeat(&mut c, &member, epoch).await;
    assert_eq!(error, 0);
    let (error, _) = heartbeat(&mut c, &member, epoch + 10).await;
    assert_eq!(error, error_codes::FENCED_MEMBER_EPOCH);
    let (error, epoch) = heartbeat(&mut c, &member, 0).await;
    assert_eq!(error, 0);
    let (error, _) = heartbeat(&mut c, &member, -1).await;
    assert_eq!(error, 0);
    drop(c);

    let view = await_event(admin, id, "disconnected").await;
    assert_eq!(view["client_instance_id"], member.as_str());
    assert_eq!(view["node_id"], 1);
    let without_assignments: Vec<String> = types(&view)
        .into_iter()
        .filter(|t| t != "assignment")
        .collect();
    assert_eq!(
        without_assignments,
        [
            "connected",
            "software",
            "group_join",
            "group_fenced",
            "group_rejoin",
            "group_leave",
            "disconnected"
        ],
        "{view:#}"
    );
    let list = view["events"].as_array().expect("events");
    for pair in list.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(a["seq"].as_u64() < b["seq"].as_u64(), "{view:#}");
        assert!(a["at_ms"].as_i64() <= b["at_ms"].as_i64(), "{view:#}");
    }
    let find = |kind: &str| {
        list.iter()
            .find(|e| e["type"] == kind)
            .cloned()
            .expect("the event")
    };
    assert_eq!(find("connected")["identified_by"], "kip1313");
    assert_eq!(find("connected")["category"], "connection");
    assert_eq!(find("software")["name"], "journal-test");
    assert_eq!(find("group_join")["group"], "journaled");
    assert_eq!(find("group_join")["protocol"], "consumer");
    assert_eq!(find("group_fenced")["reason"], "FENCED_MEMBER_EPOCH");
    assert_eq!(find("group_rejoin")["member_epoch"], epoch);
    assert_eq!(find("group_leave")["member_epoch"], -1);
    assert_eq!(find("disconnected")["reason"], "client_closed");
    assert!(find("disconnected")["summary"].is_string());
    assert!(
        list.iter()
            .any(|e| e["type"] == "assignment"
                && e["partitions"] == serde_json::json!({"life": [0]})),
        "{view:#}"
    );

    // `since` and `after` cut the journal; the ID is taken in any encoding.
    let third = &list[2];
    let since = events(
        admin,
        &format!("/clients/{id}/events?since={}", third["at_ms"]),
    )
    .await;
    assert!(types(&since).len() >= list.len() - 2, "{since:#}");
    let after = events(
        admin,
        &format!("/clients/{id}/events?after={}", third["seq"]),
    )
    .await;
    assert_eq!(types(&after).len(), list.len() - 3);
    let hex = events(admin, &format!("/clients/{}/events", id.to_hyphenated())).await;
    assert_eq!(hex["events"], view["events"]);
    let (status, _) = http_get(admin, &format!("/clients/{id}/events?since=soon")).await;
    assert_eq!(status, 400);
    let (status, _) = http_get(admin, "/clients/nope/events").await;
    assert_eq!(status, 400);

    // Kept across a restart, as they were.
    let broker = broker.restart_with(with_admin).await;
    let admin = admin_of(&broker);
    let again = events(admin, &format!("/clients/{id}/events")).await;
    assert_eq!(again["events"], view["events"]);

    // A flood of short connections with distinct IDs, then many of one ID: the journal stays
    // within its bounds.
    let broker = broker
        .restart_with(|config| {
            with_admin(config);
            config.client_journal_max_events = 500;
            config.client_journal_max_events_per_instance = 20;
        })
        .await;
    let admin = admin_of(&broker);
    let mut last = Uuid::ZERO;
    for _ in 0..2000 {
        last = Uuid::random().expect("random");
        let mut c = broker.client().await;
        c.instance_id = Some(last);
        api_versions(&mut c).await;
    }
    await_event(admin, last, "disconnected").await;
    let busy = Uuid::random().expect("random");
    for _ in 0..30 {
        let mut c = broker.client().await;
        c.instance_id = Some(busy);
        api_versions(&mut c).await;
    }
    let mut seen = 0;
    for _ in 0..50 {
        let view = events(admin, &format!("/clients/{busy}/events?wait_ms=1000")).await;
        seen = types(&view).iter().filter(|t| *t == "disconnected").count();
        assert!(types(&view).len() <= 20, "{view:#}");
        if types(&view).len() == 20
            && types(&view).last().map(String::as_str) == Some("disconnected")
        {
            break;
        }
        let after = view["next_after"].as_u64().unwrap_or(0);
        events(
            admin,
            &format!("/clients/{busy}/events?after={after}&wait_ms=1000"),
        )
        .await;
    }
    assert!(seen >= 6, "the newest of its 90 events are kept: {seen}");
    let (_, metrics) = http_get(admin, "/metrics").await;
    let gauge = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from\n{metrics}"))
    };
    assert!(gauge("skiff_client_journal_events") <= 500);
    assert!(gauge("skiff_client_journal_dropped_total") >= 3500);
    // Stopped (the journal flushed), the data directory kept.
    let mut broker = broker;
    if let Some(running) = broker.running.take() {
        running.shutdown().await.expect("stops");
    }
    let file = broker.data_dir().join("client-journal.log");
    let text = std::fs::read_to_string(&file).expect("the journal file");
    assert!(
        text.lines().count() <= 2 * 500 + 1,
        "{} lines",
        text.lines().count()
    );

    // A damaged file: garbage in the middle, a torn last line. The broker starts and keeps
    // what it can read.
    let mut damaged = text.clone();
    damaged.insert_str(text.find('\n').map_or(0, |at| at + 1), "\u{0}garbage\n");
    damaged.push_str("0badc0de {\"instance\":");
    std::fs::write(&file, damaged).expect("write");
    let broker = broker
        .restart_with(|config| {
            with_admin(config);
            config.client_journal_max_events = 500;
            config.client_journal_max_events_per_instance = 20;
        })
        .await;
    let admin = admin_of(&broker);
    let view = events(admin, &format!("/clients/{busy}/events")).await;
    assert!(!types(&view).is_empty(), "{view:#}");
    broker.stop().await;
}
