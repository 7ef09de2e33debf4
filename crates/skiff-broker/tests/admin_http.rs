//! The admin HTTP listener over a real socket: health, Prometheus metrics with the KIP-1313
//! counters, and the client-instance view that shows one client under one ID.

mod common;

use common::{TestBroker, http_get};
use skiff_protocol::generated::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest;
use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic};
use skiff_protocol::generated::metadata_request::MetadataRequestTopic;
use skiff_protocol::generated::{ApiVersionsRequest, FetchRequest, MetadataRequest};
use skiff_protocol::{Response, Uuid};

#[tokio::test]
async fn health_metrics_and_the_client_instance_view() {
    let broker = TestBroker::start_with(|config| {
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await;
    let admin = broker
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin listener");

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

    let (status, page) = http_get(admin, "/ui/clients").await;
    assert_eq!(status, 200);
    assert!(page.contains(&id.to_string()) && page.contains("view-group"));
    assert!(page.contains("viewed-txn"), "{page}");
    broker.stop().await;
}

/// A KIP-932 share member in the client-instance view and in `GET /groups/{id}`: its share
/// membership (group, member ID = instance ID, epoch, assigned partitions) with the number of
/// records it holds acquired, which follows its acquisitions and acknowledgements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_members_show_the_records_they_hold() {
    use skiff_protocol::generated::create_topics_request::CreatableTopic;
    use skiff_protocol::generated::share_fetch_request::{
        AcknowledgementBatch, FetchPartition as SharePartition, FetchTopic as ShareTopic,
    };
    use skiff_protocol::generated::{
        CreateTopicsRequest, ShareFetchRequest, ShareGroupHeartbeatRequest,
    };

    let broker = TestBroker::start_with(|config| {
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
        config.share_groups_enabled = true;
    })
    .await;
    let admin = broker
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin listener");
    let mut c = broker.client().await;
    let create = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: "jobs".into(),
            num_partitions: 1,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    let Response::CreateTopics(r) = c.call(create, 7).await else {
        panic!("not a CreateTopics response");
    };
    let topic = r.topics[0].topic_id;

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
    let (_, page) = http_get(admin, "/ui/clients").await;
    assert!(page.contains("<th>acquired</th>"), "{page}");

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

    let broker = TestBroker::start_with(|config| {
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await;
    let admin = broker
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin listener");
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
