//! The admin HTTP listener over a real socket: health, Prometheus metrics with the KIP-1313
//! counters, and the client-instance view that shows one client under one ID.

mod common;

use common::create_topic_with_partitions as create_topic;

use common::{TestBroker, http_get};
use skiff_protocol::generated::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest;
use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic};
use skiff_protocol::generated::metadata_request::MetadataRequestTopic;
use skiff_protocol::generated::{ApiVersionsRequest, FetchRequest, MetadataRequest};
use skiff_protocol::{Response, Uuid};

#[tokio::test]
async fn health_metrics_and_the_client_instance_view() {
    let (broker, admin) = with_admin(|_| {}).await;

    let id = Uuid::random().expect("random");
    let mut c = broker.client().await;
    c.instance_id = Some(id);
    c.client_id = Some("view-test".into());
    match c
        .call(
            ApiVersionsRequest {
                client_software_name: "skiff-test".into(),
                client_software_version: "9.9".into(),
                ..Default::default()
            },
            3,
        )
        .await
    {
        Response::ApiVersions(r) => assert_eq!(r.error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    let topic = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            name: Some("viewed".into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    c.call(topic, 12).await;
    // A rejected request (other ID) shows up under this instance.
    let other = Uuid::random().expect("random");
    c.call_with_id(MetadataRequest::default(), 12, Some(other))
        .await;
    // A KIP-848 member whose member ID is the instance ID.
    let join = ConsumerGroupHeartbeatRequest {
        group_id: "view-group".into(),
        member_id: id.to_string().into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["viewed".into()]),
        topic_partitions: Some(Vec::new()),
        ..Default::default()
    };
    match c.call(join, 1).await {
        Response::ConsumerGroupHeartbeat(r) => assert_eq!(r.error_code, 0, "{r:?}"),
        other => panic!("unexpected {other:?}"),
    }
    // A client without an ID is listed by connection.
    let mut anonymous = broker.client().await;
    anonymous.call(MetadataRequest::default(), 12).await;

    let (status, body) = http_get(admin, "/health").await;
    assert_eq!(status, 200);
    assert!(body.contains("\"status\":\"ok\""), "{body}");

    // A fetch that opens an incremental fetch session (epoch 0) on the one partition.
    let open_session = FetchRequest {
        session_epoch: 0,
        max_bytes: 1 << 20,
        topics: vec![FetchTopic {
            topic: "viewed".into(),
            partitions: vec![FetchPartition {
                partition: 0,
                partition_max_bytes: 1 << 20,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(open_session, 12).await {
        Response::Fetch(f) => assert_ne!(f.session_id, 0),
        other => panic!("unexpected {other:?}"),
    }

    // A transactional ID with no transaction in progress.
    let init = skiff_protocol::generated::InitProducerIdRequest {
        transactional_id: Some("viewed-txn".into()),
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
        ..Default::default()
    };
    match c.call(init, 4).await {
        Response::InitProducerId(r) => assert_eq!(r.error_code, 0, "{r:?}"),
        other => panic!("unexpected {other:?}"),
    }

    let (status, body) = http_get(admin, "/metrics").await;
    assert_eq!(status, 200);
    assert!(body.contains("\nskiff_transactional_ids 1\n"), "{body}");
    assert!(body.contains("\nskiff_transactions_ongoing 0\n"), "{body}");
    assert!(body.contains("\nskiff_fetch_sessions 1\n"), "{body}");
    assert!(
        body.contains("\nskiff_fetch_session_partitions 1\n"),
        "{body}"
    );
    assert!(
        body.contains("skiff_kip1313_rejections_total{reason=\"different_id\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("skiff_connections_identified_total{client_instance_id=\"present\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("skiff_requests_total{api=\"Metadata\"}"),
        "{body}"
    );

    let (status, body) = http_get(admin, &format!("/clients/{id}")).await;
    assert_eq!(status, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(view["client_instance_id"], id.to_string());
    assert_eq!(view["connections"][0]["client_id"], "view-test");
    assert_eq!(view["connections"][0]["software_name"], "skiff-test");
    assert_eq!(view["kip1313_rejections"][0]["reason"], "different_id");
    assert_eq!(view["kip1313_rejections"][0]["received"], other.to_string());
    assert_eq!(view["memberships"][0]["group"], "view-group");
    assert_eq!(view["memberships"][0]["member_id_differs"], false);
    // The transactional producer ID it was given, with its coordinator state.
    assert_eq!(view["producers"][0]["transactional_id"], "viewed-txn");
    assert_eq!(view["producers"][0]["producer_epoch"], 0);
    assert_eq!(view["producers"][0]["transaction_state"], "Empty");

    let (status, body) = http_get(admin, "/clients").await;
    assert_eq!(status, 200);
    let all: serde_json::Value = serde_json::from_str(&body).expect("json");
    let list = all.as_array().expect("a list");
    assert!(list.iter().any(|v| v["client_instance_id"].is_null()));

    let (status, _) = http_get(admin, "/clients/not-a-uuid").await;
    assert_eq!(status, 400);
    let (status, _) = http_get(admin, "/clients/AAAAAAAAAAAAAAAAAAAAAQ").await;
    assert_eq!(status, 404);

    // The page: one self-contained document (it reads the JSON above itself), for the list
    // and for one instance, served with a policy that runs only its own script.
    let (status, page) = http_get(admin, "/ui/clients").await;
    assert_eq!(status, 200);
    assert!(page.contains("<main id=\"app\">"), "{page}");
    let (status, instance_page) = http_get(admin, &format!("/ui/clients/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(instance_page, page);
    let head = http_head(admin, "/ui/clients").await;
    assert!(
        head.contains("content-security-policy: default-src 'none'; script-src 'sha256-"),
        "{head}"
    );
    assert!(head.contains("content-type: text/html"), "{head}");
    broker.stop().await;
}

/// A KIP-932 share member in the client-instance view and in `GET /groups/{id}`: its share
/// membership (group, member ID = instance ID, epoch, assigned partitions) with the number of
/// records it holds acquired, which follows its acquisitions and acknowledgements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_members_show_the_records_they_hold() {
    use skiff_protocol::generated::share_fetch_request::{
        AcknowledgementBatch, FetchPartition as SharePartition, FetchTopic as ShareTopic,
    };
    use skiff_protocol::generated::{ShareFetchRequest, ShareGroupHeartbeatRequest};

    let (broker, admin) = with_admin(|config| {
        config.share_groups_enabled = true;
    })
    .await;
    let mut c = broker.client().await;
    let created = create_topic(&mut c, "jobs", 1).await;
    let topic = created;

    let id = Uuid::random().expect("random");
    let mut member = broker.client().await;
    member.instance_id = Some(id);
    let join = ShareGroupHeartbeatRequest {
        group_id: "crew".into(),
        member_id: id.to_string().into(),
        member_epoch: 0,
        subscribed_topic_names: Some(vec!["jobs".into()]),
        ..Default::default()
    };
    let Response::ShareGroupHeartbeat(r) = member.call(join, 1).await else {
        panic!("not a ShareGroupHeartbeat response");
    };
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    for i in 0..5 {
        let value = format!("r{i}");
        c.call(
            common::produce_request("jobs", 0, -1, common::batch(&[value.as_bytes()])),
            9,
        )
        .await;
    }
    let fetch = |epoch: i32, acks: Vec<AcknowledgementBatch>, max_records: i32| ShareFetchRequest {
        group_id: Some("crew".into()),
        member_id: Some(id.to_string().into()),
        share_session_epoch: epoch,
        max_bytes: 1 << 20,
        min_bytes: 1,
        max_records,
        batch_size: 500,
        topics: vec![ShareTopic {
            topic_id: topic,
            partitions: vec![SharePartition {
                partition_index: 0,
                acknowledgement_batches: acks,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::ShareFetch(r) = member.call(fetch(0, vec![], 3), 2).await else {
        panic!("not a ShareFetch response");
    };
    let acquired: Vec<(i64, i64)> = r.responses[0].partitions[0]
        .acquired_records
        .iter()
        .map(|a| (a.first_offset, a.last_offset))
        .collect();
    assert_eq!(acquired, vec![(0, 2)]);

    let share_membership = |view: &serde_json::Value| -> serde_json::Value {
        view["memberships"]
            .as_array()
            .expect("memberships")
            .iter()
            .find(|m| m["protocol"] == "share")
            .cloned()
            .unwrap_or_else(|| panic!("no share membership in {view}"))
    };
    let (status, body) = http_get(admin, &format!("/clients/{id}")).await;
    assert_eq!(status, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    let m = share_membership(&view);
    assert_eq!(m["group"], "crew");
    assert_eq!(m["member_id"], id.to_string());
    assert_eq!(m["member_id_differs"], false);
    assert!(m["member_epoch"].as_i64().is_some_and(|e| e > 0), "{m}");
    assert_eq!(m["acquired_records"], 3);

    // `GET /groups/crew` says the same, by member.
    let (status, body) = http_get(admin, "/groups/crew").await;
    assert_eq!(status, 200, "{body}");
    let group: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        (&group["type"], &group["state"]),
        (&"share".into(), &"Stable".into())
    );
    let members = group["members"].as_array().expect("members");
    assert_eq!(members.len(), 1, "{group}");
    assert_eq!(members[0]["client_instance_id"], id.to_string());
    assert_eq!(members[0]["acquired_records"], 3);

    // Two accepted: one left held. The heartbeat's assignment shows up too.
    let ack = AcknowledgementBatch {
        first_offset: 0,
        last_offset: 1,
        acknowledge_types: vec![1],
        ..Default::default()
    };
    let Response::ShareFetch(r) = member.call(fetch(1, vec![ack], 0), 2).await else {
        panic!("not a ShareFetch response");
    };
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let heartbeat = ShareGroupHeartbeatRequest {
        group_id: "crew".into(),
        member_id: id.to_string().into(),
        member_epoch: m["member_epoch"]
            .as_i64()
            .and_then(|e| i32::try_from(e).ok())
            .expect("epoch"),
        ..Default::default()
    };
    let Response::ShareGroupHeartbeat(r) = member.call(heartbeat, 1).await else {
        panic!("not a ShareGroupHeartbeat response");
    };
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let (_, body) = http_get(admin, &format!("/clients/{id}")).await;
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    let m = share_membership(&view);
    assert_eq!(m["acquired_records"], 1);
    assert_eq!(m["assigned"], serde_json::json!({"jobs": [0]}));
    // Its lag: the 5 records less the 2 acknowledged (Kafka's share-partition lag).
    assert_eq!(m["lag_records"], 3, "{m}");
    assert_eq!(m["partitions"][0]["high_watermark"], 5, "{m}");
    assert_eq!(view["lag_records"], 3, "{view}");

    // Unknown groups are 404; a group ID is percent-decoded.
    let (status, _) = http_get(admin, "/groups/nobody").await;
    assert_eq!(status, 404);
    let (status, _) = http_get(admin, "/groups/cr%65w").await;
    assert_eq!(status, 200);
    broker.stop().await;
}

/// KIP-1313 notes clients write one UUID differently: a KIP-848 member whose member ID is its
/// instance's UUID in standard base64 (`+/`, as librdkafka sends it) or hyphenated hex is the
/// same identity (aligned, with the encoding named), a member ID that is no UUID of the
/// instance is not; `/metrics` counts both, and telemetry under the instance's ID is aligned.
#[tokio::test]
async fn member_ids_in_any_encoding_are_aligned() {
    use skiff_protocol::generated::GetTelemetrySubscriptionsRequest;

    let (broker, admin) = with_admin(|_| {}).await;
    let mut setup = broker.client().await;
    common::create_topic(&mut setup, "aligned").await;

    // An ID whose Kafka text has both `-` and `_`: its standard base64 differs in two places.
    let librdkafka = Uuid::from_u128(0xfbef_ffff_1234_5678_9abc_def0_0fed_cba9);
    let kafka_text = librdkafka.to_string();
    assert!(
        kafka_text.contains('-') && kafka_text.contains('_'),
        "{kafka_text}"
    );
    let standard = kafka_text.replace('-', "+").replace('_', "/");
    let hyphenated_id = Uuid::random().expect("random");
    let unaligned_id = Uuid::random().expect("random");
    let members = [
        (librdkafka, standard.clone()),
        (hyphenated_id, hyphenated_id.to_hyphenated()),
        (unaligned_id, "my-own-member-id".to_string()),
    ];
    let mut clients = Vec::new();
    for (instance, member_id) in &members {
        let mut c = broker.client().await;
        c.instance_id = Some(*instance);
        let join = ConsumerGroupHeartbeatRequest {
            group_id: "encodings".into(),
            member_id: member_id.clone().into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["aligned".into()]),
            topic_partitions: Some(Vec::new()),
            ..Default::default()
        };
        match c.call(join, 1).await {
            Response::ConsumerGroupHeartbeat(r) => {
                assert_eq!(r.error_code, 0, "{r:?}");
                assert_eq!(r.member_id.as_deref(), Some(member_id.as_str()));
            }
            other => panic!("unexpected {other:?}"),
        }
        clients.push(c);
    }
    // Telemetry under the librdkafka instance's own ID.
    let get = GetTelemetrySubscriptionsRequest {
        client_instance_id: librdkafka,
        ..Default::default()
    };
    match clients[0].call(get, 0).await {
        Response::GetTelemetrySubscriptions(r) => assert_eq!(r.error_code, 0, "{r:?}"),
        other => panic!("unexpected {other:?}"),
    }

    let view = |body: String| -> serde_json::Value { serde_json::from_str(&body).expect("json") };
    let (status, body) = http_get(admin, &format!("/clients/{librdkafka}")).await;
    assert_eq!(status, 200, "{body}");
    let v = view(body);
    let m = &v["memberships"][0];
    assert_eq!(m["member_id"], standard.as_str());
    assert_eq!(m["aligned"], true, "{m}");
    assert_eq!(m["member_id_differs"], false, "{m}");
    assert_eq!(m["member_id_encoding"], "base64", "{m}");
    assert_eq!(v["telemetry_aligned"], true, "{v}");

    let (_, body) = http_get(admin, &format!("/clients/{hyphenated_id}")).await;
    let m = &view(body)["memberships"][0];
    assert_eq!(
        (&m["aligned"], &m["member_id_encoding"]),
        (&true.into(), &"uuid-hyphenated".into()),
        "{m}"
    );

    // The connection's instance is known from its heartbeats: the membership is listed under
    // it, not aligned, and its member ID is no UUID.
    let (_, body) = http_get(admin, &format!("/clients/{unaligned_id}")).await;
    let m = &view(body)["memberships"][0];
    assert_eq!(m["member_id"], "my-own-member-id");
    assert_eq!(m["aligned"], false, "{m}");
    assert_eq!(m["member_id_differs"], true, "{m}");
    assert!(m["member_id_encoding"].is_null(), "{m}");

    // The `/clients/{id}` path takes the ID in any encoding too.
    for text in [
        standard.replace('/', "%2F").replace('+', "%2B"),
        librdkafka.to_hyphenated(),
        format!("{:032x}", librdkafka.as_u128()),
    ] {
        let (status, body) = http_get(admin, &format!("/clients/{text}")).await;
        assert_eq!(status, 200, "{text}: {body}");
        assert_eq!(view(body)["client_instance_id"], kafka_text.as_str());
    }

    let (_, metrics) = http_get(admin, "/metrics").await;
    for line in [
        "skiff_client_memberships{alignment=\"aligned\"} 2",
        "skiff_client_memberships{alignment=\"unaligned\"} 1",
        "skiff_client_member_id_encodings{encoding=\"base64\"} 1",
        "skiff_client_member_id_encodings{encoding=\"uuid-hyphenated\"} 1",
        "skiff_client_member_id_encodings{encoding=\"other\"} 1",
        "skiff_client_telemetry_instances{alignment=\"aligned\"} 1",
        "skiff_client_telemetry_instances{alignment=\"unaligned\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    drop(clients);
    broker.stop().await;
}

/// A client that sends no KIP-1313 ID but gets a KIP-714 client instance ID (librdkafka 2.16,
/// for one) is one instance in `/clients`: its connection is filed under the telemetry ID, not
/// listed again as a connection without an ID.
#[tokio::test]
async fn a_connection_without_a_kip1313_id_is_filed_under_its_telemetry_id() {
    use skiff_protocol::generated::GetTelemetrySubscriptionsRequest;

    let (broker, admin) = with_admin(|_| {}).await;
    let mut c = broker.client().await;
    assert!(c.instance_id.is_none());
    let telemetry_id = match c.call(GetTelemetrySubscriptionsRequest::default(), 0).await {
        Response::GetTelemetrySubscriptions(r) => {
            assert_eq!(r.error_code, 0, "{r:?}");
            r.client_instance_id
        }
        other => panic!("unexpected {other:?}"),
    };
    assert!(!telemetry_id.is_zero());
    // A second connection that never says who it is stays on its own, even after a push with an
    // ID the broker never gave out (refused: it names no one).
    let mut anonymous = broker.client().await;
    let bogus = Uuid::random().expect("random");
    let push = skiff_protocol::generated::PushTelemetryRequest {
        client_instance_id: bogus,
        subscription_id: 1,
        ..Default::default()
    };
    match anonymous.call(push, 0).await {
        Response::PushTelemetry(r) => assert_ne!(r.error_code, 0, "{r:?}"),
        other => panic!("unexpected {other:?}"),
    }

    let (status, body) = http_get(admin, "/clients").await;
    assert_eq!(status, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).expect("json");
    let list = list.as_array().expect("a list");
    let mine: Vec<&serde_json::Value> = list
        .iter()
        .filter(|v| v["client_instance_id"] == telemetry_id.to_string().as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{body}");
    let connections = mine[0]["connections"].as_array().expect("connections");
    assert_eq!(connections.len(), 1, "{body}");
    assert!(connections[0]["client_instance_id"].is_null(), "{body}");
    assert_eq!(
        connections[0]["telemetry_instance_id"],
        telemetry_id.to_string().as_str()
    );
    let filed = connections[0]["id"].clone();
    let without_id: Vec<&serde_json::Value> = list
        .iter()
        .filter(|v| v["client_instance_id"].is_null())
        .collect();
    assert!(
        without_id.iter().all(|v| v["connections"]
            .as_array()
            .is_some_and(|cs| cs.iter().all(|c| c["id"] != filed))),
        "the connection is listed twice: {body}"
    );
    assert!(
        !without_id.is_empty(),
        "the anonymous connection is gone: {body}"
    );
    // (The telemetry manager keeps the refused ID's record, as Kafka's does: no connection.)
    assert!(
        list.iter()
            .filter(|v| v["client_instance_id"] == bogus.to_string().as_str())
            .all(|v| v["connections"].as_array().is_some_and(Vec::is_empty)),
        "a refused push filed a connection: {body}"
    );

    let (status, body) = http_get(admin, &format!("/clients/{telemetry_id}")).await;
    assert_eq!(status, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        view["connections"].as_array().map(Vec::len),
        Some(1),
        "{body}"
    );
}

/// A broker with its admin listener on a free port (and `adjust` applied), and that address.
async fn with_admin(
    adjust: impl FnOnce(&mut skiff_broker::BrokerConfig),
) -> (TestBroker, std::net::SocketAddr) {
    let broker = TestBroker::start_with(|config| {
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
        adjust(config);
    })
    .await;
    let admin = broker
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin listener");
    (broker, admin)
}

/// The status line and headers of a GET, lower-cased.
async fn http_head(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(common::TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .expect("in time")
        .expect("read");
    let text = String::from_utf8_lossy(&raw).to_lowercase();
    text.split_once("\r\n\r\n")
        .map_or(text.clone(), |(head, _)| head.to_string())
}

/// One batch of `count` records, all written at `timestamp_ms`.
fn records_at(count: usize, timestamp_ms: i64) -> bytes::Bytes {
    let mut builder = skiff_records::RecordBatchBuilder::new();
    for i in 0..count {
        builder
            .append(timestamp_ms, None, Some(format!("v{i}").as_bytes()), &[])
            .expect("append record");
    }
    builder.build().expect("build batch").into_bytes()
}

fn offset_commit(
    group: &str,
    member: &str,
    epoch: i32,
    topic: &str,
    offsets: &[(i32, i64)],
) -> skiff_protocol::generated::OffsetCommitRequest {
    use skiff_protocol::generated::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    skiff_protocol::generated::OffsetCommitRequest {
        group_id: group.into(),
        generation_id_or_member_epoch: epoch,
        member_id: member.into(),
        retention_time_ms: -1,
        topics: vec![OffsetCommitRequestTopic {
            name: topic.into(),
            partitions: offsets
                .iter()
                .map(|(p, o)| OffsetCommitRequestPartition {
                    partition_index: *p,
                    committed_offset: *o,
                    committed_leader_epoch: -1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

async fn commit(c: &mut common::Client, request: skiff_protocol::generated::OffsetCommitRequest) {
    match c.call(request, 9).await {
        Response::OffsetCommit(r) => {
            for t in &r.topics {
                for p in &t.partitions {
                    assert_eq!(p.error_code, 0, "{r:?}");
                }
            }
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Lag per client instance: a KIP-848 member and a classic consumer (its assignment decoded
/// from the consumer protocol) over two partitions of 100 records each, written an hour ago in
/// batches of ten a second apart. The view's offsets, records and seconds behind are what the
/// test computes from what it produced and committed, per partition, per membership and per
/// instance; `/metrics` shows the instances' gauges (at most `client.lag.metrics.max.instances`
/// of them); committing to the end brings everything to 0.
#[tokio::test]
async fn lag_per_instance_from_committed_offsets_and_record_times() {
    use skiff_protocol::generated::consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse;
    use skiff_protocol::generated::join_group_request::JoinGroupRequestProtocol;
    use skiff_protocol::generated::sync_group_request::SyncGroupRequestAssignment;
    use skiff_protocol::generated::{JoinGroupRequest, SyncGroupRequest};

    let (broker, admin) = with_admin(|config| {
        config.groups.classic_initial_rebalance_delay_ms = 0;
        config.client_lag_metrics_max_instances = 1;
    })
    .await;
    let mut c = broker.client().await;
    let created = create_topic(&mut c, "lagged", 2).await;
    assert!(!created.is_zero());
    // Batch k (offsets 10k..10k+9) of each partition was written at `written + k` seconds.
    let written = now_ms() - 3_600_000;
    for partition in 0..2 {
        for k in 0..10 {
            let batch = records_at(10, written + k * 1000);
            match c
                .call(common::produce_request("lagged", partition, -1, batch), 9)
                .await
            {
                Response::Produce(r) => {
                    assert_eq!(r.responses[0].partition_responses[0].error_code, 0)
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    // A KIP-848 member, heartbeating until it owns both partitions.
    let id = Uuid::random().expect("random");
    let mut member = broker.client().await;
    member.instance_id = Some(id);
    let mut epoch = 0;
    let mut owned = 0;
    for _ in 0..50 {
        let heartbeat = ConsumerGroupHeartbeatRequest {
            group_id: "lag-group".into(),
            member_id: id.to_string().into(),
            member_epoch: epoch,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: (epoch == 0).then(|| vec!["lagged".into()]),
            topic_partitions: (epoch == 0).then(Vec::new),
            ..Default::default()
        };
        let r: ConsumerGroupHeartbeatResponse = match member.call(heartbeat, 1).await {
            Response::ConsumerGroupHeartbeat(r) => r,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(r.error_code, 0, "{r:?}");
        epoch = r.member_epoch;
        if let Some(a) = &r.assignment {
            owned = a.topic_partitions.iter().map(|t| t.partitions.len()).sum();
        }
        if owned == 2 {
            break;
        }
    }
    assert_eq!(owned, 2, "the member never got both partitions");
    commit(
        &mut member,
        offset_commit(
            "lag-group",
            &id.to_string(),
            epoch,
            "lagged",
            &[(0, 30), (1, 50)],
        ),
    )
    .await;

    // A classic consumer (another instance) in its own group, assigned both partitions by its
    // leader (itself), committed at 10 and at the end.
    let classic = Uuid::random().expect("random");
    let mut old = broker.client().await;
    old.instance_id = Some(classic);
    let join = |member_id: &str| JoinGroupRequest {
        group_id: "lag-classic".into(),
        session_timeout_ms: 30_000,
        rebalance_timeout_ms: 30_000,
        member_id: member_id.into(),
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: skiff_group::embedded::encode_subscription(
                1,
                &["lagged"],
                &Default::default(),
            ),
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::JoinGroup(r) = old.call(join(""), 9).await else {
        panic!("not a JoinGroup response");
    };
    let classic_member = r.member_id.to_string();
    let Response::JoinGroup(r) = old.call(join(&classic_member), 9).await else {
        panic!("not a JoinGroup response");
    };
    assert_eq!(r.error_code, 0, "{r:?}");
    let generation = r.generation_id;
    let assignment = skiff_group::embedded::encode_assignment(
        1,
        &[("lagged".to_string(), vec![0, 1])].into_iter().collect(),
    );
    let sync = SyncGroupRequest {
        group_id: "lag-classic".into(),
        generation_id: generation,
        member_id: classic_member.as_str().into(),
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: vec![SyncGroupRequestAssignment {
            member_id: classic_member.as_str().into(),
            assignment,
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::SyncGroup(r) = old.call(sync, 5).await else {
        panic!("not a SyncGroup response");
    };
    assert_eq!(r.error_code, 0, "{r:?}");
    commit(
        &mut old,
        offset_commit(
            "lag-classic",
            &classic_member,
            generation,
            "lagged",
            &[(0, 10), (1, 100)],
        ),
    )
    .await;

    let before = now_ms();
    let (status, body) = http_get(admin, &format!("/clients/{id}")).await;
    let after = now_ms();
    assert_eq!(status, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    let m = &view["memberships"][0];
    assert_eq!(
        (&m["group"], &m["protocol"]),
        (&"lag-group".into(), &"consumer".into())
    );
    let partitions = m["partitions"].as_array().expect("partitions");
    assert_eq!(partitions.len(), 2, "{m}");
    // Seconds behind: from the batch holding the committed offset (batch 3, and batch 5).
    let behind = |(before, after): (i64, i64), batch: i64, seconds: &serde_json::Value| {
        let s = seconds
            .as_f64()
            .unwrap_or_else(|| panic!("no seconds: {seconds}"));
        let at = written + batch * 1000;
        assert!(
            s >= (before - at) as f64 / 1000.0 && s <= (after - at) as f64 / 1000.0,
            "{s} s behind batch {batch}"
        );
        s
    };
    for (p, (partition, committed, lag, batch)) in
        partitions.iter().zip([(0, 30, 70, 3), (1, 50, 50, 5)])
    {
        assert_eq!(p["topic"], "lagged");
        assert_eq!(p["partition"], partition);
        assert_eq!(p["committed_offset"], committed);
        assert_eq!(p["high_watermark"], 100);
        assert_eq!(p["last_stable_offset"], 100);
        assert_eq!(p["lag_records"], lag);
        behind((before, after), batch, &p["lag_seconds"]);
    }
    assert_eq!(m["lag_records"], 70 + 50);
    let oldest = behind((before, after), 3, &m["lag_seconds"]);
    assert!(oldest > 3000.0, "{oldest}");
    assert_eq!(view["lag_records"], 120);
    assert_eq!(view["lag_seconds"], m["lag_seconds"]);

    // The classic consumer's assignment, decoded, with its lag.
    let before = now_ms();
    let (status, body) = http_get(admin, &format!("/clients/{classic}")).await;
    let after = now_ms();
    assert_eq!(status, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    let m = &view["memberships"][0];
    assert_eq!(
        (&m["group"], &m["protocol"]),
        (&"lag-classic".into(), &"classic".into())
    );
    assert_eq!(m["assigned"], serde_json::json!({"lagged": [0, 1]}));
    let lags: Vec<(i64, i64)> = m["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            (
                p["committed_offset"].as_i64().unwrap_or(-1),
                p["lag_records"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(lags, vec![(10, 90), (100, 0)]);
    assert_eq!(m["partitions"][1]["lag_seconds"], 0.0, "caught up: 0 s");
    assert_eq!(view["lag_records"], 90);
    behind((before, after), 1, &view["lag_seconds"]);

    // `/metrics`: the one instance furthest behind (client.lag.metrics.max.instances = 1).
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert!(
        metrics.contains(&format!(
            "\nskiff_client_lag_records{{client_instance_id=\"{id}\"}} 120\n"
        )),
        "{metrics}"
    );
    assert!(
        !metrics.contains(&format!(
            "skiff_client_lag_records{{client_instance_id=\"{classic}\"}}"
        )),
        "{metrics}"
    );
    // By seconds the classic consumer is further behind (batch 1 against batch 3).
    assert!(
        metrics.contains(&format!(
            "\nskiff_client_lag_seconds{{client_instance_id=\"{classic}\"}} "
        )),
        "{metrics}"
    );

    // Committed to the end: nothing behind.
    commit(
        &mut member,
        offset_commit(
            "lag-group",
            &id.to_string(),
            epoch,
            "lagged",
            &[(0, 100), (1, 100)],
        ),
    )
    .await;
    let (_, body) = http_get(admin, &format!("/clients/{id}")).await;
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(view["lag_records"], 0, "{view}");
    assert_eq!(view["lag_seconds"], 0.0, "{view}");
    for p in view["memberships"][0]["partitions"]
        .as_array()
        .expect("partitions")
    {
        assert_eq!(
            (&p["lag_records"], &p["lag_seconds"]),
            (&0.into(), &0.0.into()),
            "{p}"
        );
    }
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert!(
        metrics.contains(&format!(
            "\nskiff_client_lag_records{{client_instance_id=\"{classic}\"}} 90\n"
        )),
        "{metrics}"
    );
    broker.stop().await;
}
