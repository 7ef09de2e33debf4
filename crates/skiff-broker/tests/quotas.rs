//! Client quotas over TCP against a real broker: AlterClientQuotas and DescribeClientQuotas
//! (Kafka's entities and checks, Skiff's client-instance-id entity, persisted across a restart),
//! and their enforcement: a producer and a consumer over their byte rates get throttle times
//! (and a throttled fetch no records), a sibling instance with the same client ID is not
//! throttled, and a throttled connection is not read from before its throttle time has passed
//! (KIP-219).

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, TestBroker, create_topic, fetch_request, produce_request};
use skiff_protocol::generated::alter_client_quotas_request::{EntityData, EntryData, OpData};
use skiff_protocol::generated::describe_client_quotas_request::ComponentData;
use skiff_protocol::generated::{AlterClientQuotasRequest, DescribeClientQuotasRequest};
use skiff_protocol::{Response, Uuid, error_codes};

fn entity(parts: &[(&str, Option<&str>)]) -> Vec<EntityData> {
    parts
        .iter()
        .map(|(t, n)| EntityData {
            entity_type: (*t).into(),
            entity_name: n.map(Into::into),
            ..Default::default()
        })
        .collect()
}

async fn alter(
    c: &mut Client,
    parts: &[(&str, Option<&str>)],
    ops: &[(&str, f64, bool)],
    validate_only: bool,
) -> (i16, Option<String>) {
    let request = AlterClientQuotasRequest {
        entries: vec![EntryData {
            entity: entity(parts),
            ops: ops
                .iter()
                .map(|(k, v, remove)| OpData {
                    key: (*k).into(),
                    value: *v,
                    remove: *remove,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        validate_only,
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::AlterClientQuotas(r) => (
            r.entries[0].error_code,
            r.entries[0].error_message.as_ref().map(|m| m.to_string()),
        ),
        other => panic!("unexpected {other:?}"),
    }
}

/// Every configured entity (non-strict, no filter), as (type=name pairs, key=value pairs).
async fn described(c: &mut Client) -> Vec<(String, String)> {
    let request = DescribeClientQuotasRequest {
        components: Vec::<ComponentData>::new(),
        strict: false,
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::DescribeClientQuotas(r) => {
            assert_eq!(r.error_code, 0, "{:?}", r.error_message);
            let mut out: Vec<(String, String)> = r
                .entries
                .unwrap_or_default()
                .iter()
                .map(|e| {
                    let entity: Vec<String> = e
                        .entity
                        .iter()
                        .map(|p| {
                            format!(
                                "{}={}",
                                p.entity_type,
                                p.entity_name.as_deref().unwrap_or("<default>")
                            )
                        })
                        .collect();
                    let values: Vec<String> = e
                        .values
                        .iter()
                        .map(|v| format!("{}={}", v.key, v.value))
                        .collect();
                    (entity.join(","), values.join(","))
                })
                .collect();
            out.sort();
            out
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// 20 KB of records in one batch.
fn big_batch() -> Bytes {
    common::batch(&[&[7u8; 20_000][..]])
}

async fn produce_throttle(c: &mut Client, topic: &str) -> i32 {
    match c.call(produce_request(topic, 0, 1, big_batch()), 9).await {
        Response::Produce(r) => {
            assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
            r.throttle_time_ms
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_are_configured_and_persisted() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let instance = Uuid::from_u128(0x1313).to_string();
    assert_eq!(
        alter(
            &mut c,
            &[("client-instance-id", Some(&instance))],
            &[("producer_byte_rate", 10_000.0, false)],
            false
        )
        .await
        .0,
        0
    );
    assert_eq!(
        alter(
            &mut c,
            &[("user", None), ("client-id", Some("app"))],
            &[
                ("consumer_byte_rate", 1e6, false),
                ("request_percentage", 50.0, false)
            ],
            false
        )
        .await
        .0,
        0
    );
    // Validate-only checks and stores nothing.
    assert_eq!(
        alter(
            &mut c,
            &[("client-id", Some("other"))],
            &[("producer_byte_rate", 5.0, false)],
            true
        )
        .await
        .0,
        0
    );
    type Parts<'a> = &'a [(&'a str, Option<&'a str>)];
    type Ops<'a> = &'a [(&'a str, f64, bool)];
    let bad: [(Parts<'_>, Ops<'_>); 6] = [
        (
            &[("client-id", Some("x"))],
            &[("no_such_quota", 1.0, false)],
        ),
        (
            &[("client-id", Some("x"))],
            &[("producer_byte_rate", -1.0, false)],
        ),
        (
            &[("client-id", Some("x"))],
            &[("producer_byte_rate", 1.5, false)],
        ),
        (
            &[("client-id", Some("x"))],
            &[("controller_mutation_rate", 0.0, false)],
        ),
        (
            &[("ip", Some("127.0.0.1"))],
            &[("connection_creation_rate", 2.0, false)],
        ),
        (
            &[("client-instance-id", None)],
            &[("producer_byte_rate", 2.0, false)],
        ),
    ];
    for (parts, ops) in bad {
        let (code, message) = alter(&mut c, parts, ops, false).await;
        assert_eq!(
            code,
            error_codes::INVALID_REQUEST,
            "{parts:?} {ops:?}: {message:?}"
        );
    }
    let want = vec![
        (
            format!("client-instance-id={instance}"),
            "producer_byte_rate=10000".to_string(),
        ),
        (
            "user=<default>,client-id=app".to_string(),
            "consumer_byte_rate=1000000,request_percentage=50".to_string(),
        ),
    ];
    assert_eq!(described(&mut c).await, want);
    drop(c);
    let tb = tb.restart().await;
    let mut c = tb.client().await;
    assert_eq!(described(&mut c).await, want, "kept across a restart");
    // Removing the last key forgets the entity.
    assert_eq!(
        alter(
            &mut c,
            &[("client-instance-id", Some(&instance))],
            &[("producer_byte_rate", 0.0, true)],
            false
        )
        .await
        .0,
        0
    );
    assert_eq!(described(&mut c).await.len(), 1);
    tb.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_rates_throttle_one_instance_and_not_its_sibling() {
    let tb = TestBroker::start_with(|config| {
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await;
    let mut admin = tb.client().await;
    let id = create_topic(&mut admin, "q").await;
    let throttled = Uuid::from_u128(0xbad);
    let sibling = Uuid::from_u128(0x900d);
    for key in ["producer_byte_rate", "consumer_byte_rate"] {
        assert_eq!(
            alter(
                &mut admin,
                &[("client-instance-id", Some(&throttled.to_string()))],
                &[(key, 19_000.0, false)],
                false
            )
            .await
            .0,
            0
        );
    }
    let mut slow = tb.client().await;
    slow.client_id = Some("app".into());
    slow.instance_id = Some(throttled);
    let mut fast = tb.client().await;
    fast.client_id = Some("app".into());
    fast.instance_id = Some(sibling);
    // 20 KB against 19,000 B/s (a second's worth of burst): throttled for the ~1 KB over, about
    // 60 ms; the sibling with the same client ID is not.
    let throttle = produce_throttle(&mut slow, "q").await;
    assert!(throttle > 0, "throttle {throttle}");
    for _ in 0..3 {
        assert_eq!(produce_throttle(&mut fast, "q").await, 0);
    }
    // KIP-219: nothing more is read from the throttled connection before its time is up; then
    // its fetch (20 KB again, over its consumer quota) answers without records.
    let sent = Instant::now();
    match slow.call(fetch_request("q", id, 0, 0, 0), 13).await {
        Response::Fetch(r) => {
            assert!(
                sent.elapsed()
                    >= Duration::from_millis(u64::try_from(throttle).unwrap_or(0))
                        .saturating_sub(Duration::from_millis(50)),
                "answered after {:?}, throttled for {throttle} ms",
                sent.elapsed()
            );
            assert!(r.throttle_time_ms > 0, "{}", r.throttle_time_ms);
            let records = r.responses[0].partitions[0]
                .records
                .clone()
                .unwrap_or_default();
            assert!(records.is_empty());
        }
        other => panic!("unexpected {other:?}"),
    }
    match fast.call(fetch_request("q", id, 0, 0, 0), 13).await {
        Response::Fetch(r) => {
            assert_eq!(r.throttle_time_ms, 0);
            assert!(
                !r.responses[0].partitions[0]
                    .records
                    .clone()
                    .unwrap_or_default()
                    .is_empty()
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let (_, metrics) = common::http_get(
        tb.running
            .as_ref()
            .and_then(|r| r.admin_addr)
            .expect("admin"),
        "/metrics",
    )
    .await;
    assert!(
        !metrics.contains("skiff_quota_throttled_responses_total{quota=\"producer_byte_rate\"} 0"),
        "{metrics}"
    );
    tb.stop().await;
}

/// KIP-599: `controller_mutation_rate` counts the partitions created and deleted. In strict mode
/// (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+) a topic that comes while the
/// quota is exceeded is THROTTLING_QUOTA_EXCEEDED and the response carries the throttle time;
/// an older version's request is served and only throttled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_mutations_are_throttled() {
    use skiff_protocol::generated::CreateTopicsRequest;
    use skiff_protocol::generated::create_topics_request::CreatableTopic;
    let tb = TestBroker::start().await;
    let mut admin = tb.client().await;
    let instance = Uuid::from_u128(0x599);
    assert_eq!(
        alter(
            &mut admin,
            &[("client-instance-id", Some(&instance.to_string()))],
            &[("controller_mutation_rate", 2.0, false)],
            false
        )
        .await
        .0,
        0
    );
    let mut c = tb.client().await;
    c.instance_id = Some(instance);
    let create = |names: &[&str]| CreateTopicsRequest {
        topics: names
            .iter()
            .map(|n| CreatableTopic {
                name: (*n).into(),
                num_partitions: 10,
                replication_factor: -1,
                ..Default::default()
            })
            .collect(),
        timeout_ms: 10_000,
        ..Default::default()
    };
    // A burst of 2 x 11 = 22 partitions: the first three topics go (the third into debt), the
    // fourth is refused.
    match c.call(create(&["m1", "m2", "m3", "m4"]), 7).await {
        Response::CreateTopics(r) => {
            let codes: Vec<i16> = r.topics.iter().map(|t| t.error_code).collect();
            assert_eq!(
                codes,
                vec![0, 0, 0, error_codes::THROTTLING_QUOTA_EXCEEDED],
                "{r:?}"
            );
            assert!(r.throttle_time_ms > 0, "{}", r.throttle_time_ms);
        }
        other => panic!("unexpected {other:?}"),
    }
    // Version 5 is not strict: served, throttled. (The connection was muted for the throttle.)
    match c.call(create(&["m5"]), 5).await {
        Response::CreateTopics(r) => {
            assert_eq!(r.topics[0].error_code, 0, "{r:?}");
            assert!(r.throttle_time_ms > 0);
        }
        other => panic!("unexpected {other:?}"),
    }
    // Another instance is not throttled.
    match admin.call(create(&["other"]), 7).await {
        Response::CreateTopics(r) => {
            assert_eq!(
                (r.topics[0].error_code, r.throttle_time_ms),
                (0, 0),
                "{r:?}"
            )
        }
        other => panic!("unexpected {other:?}"),
    }
    tb.stop().await;
}
