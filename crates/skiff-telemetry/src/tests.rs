//! Scenario tests mirroring Apache Kafka's `ClientMetricsManagerTest`, the KIP-1313 alignment
//! table, subscription config handling, and the Prometheus golden text.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use bytes::Bytes;
use skiff_protocol::error_codes::*;
use skiff_protocol::generated::{
    GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse, PushTelemetryRequest,
};
use skiff_protocol::{ByteString, Uuid};

use crate::compression::{self, test_codecs};
use crate::otlp::test_data::*;
use crate::*;

const T0: i64 = 1_000_000;
const INTERVAL: i32 = 1_000;

fn client() -> ClientSelectors {
    ClientSelectors {
        client_id: Some("producer-1".into()),
        software_name: Some("apache-kafka-java".into()),
        software_version: Some("4.1.0".into()),
        source_address: Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))),
        source_port: Some(50_123),
    }
}

fn manager() -> TelemetryManager {
    TelemetryManager::new(TelemetryConfig {
        telemetry_max_bytes: 4096,
        ..Default::default()
    })
}

fn default_subscription(m: &mut TelemetryManager) {
    m.subscriptions_mut()
        .alter(
            "sub-1",
            &[
                AlterOp::set("metrics", "org.apache.kafka.producer., org.apache.kafka.consumer.coordinator.rebalance.latency.max"),
                AlterOp::set("interval.ms", &INTERVAL.to_string()),
                AlterOp::set("match", "client_software_name=apache-kafka-.*"),
            ],
        )
        .unwrap();
}

fn get_req(id: Uuid) -> GetTelemetrySubscriptionsRequest {
    GetTelemetrySubscriptionsRequest {
        client_instance_id: id,
        ..Default::default()
    }
}

fn get(m: &mut TelemetryManager, id: Uuid, now: i64) -> GetTelemetrySubscriptionsResponse {
    m.get_subscriptions(None, &get_req(id), &client(), now)
}

fn push_req(id: Uuid, sub: i32, ct: i8, payload: &[u8]) -> PushTelemetryRequest {
    PushTelemetryRequest {
        client_instance_id: id,
        subscription_id: sub,
        terminating: false,
        compression_type: ct,
        metrics: Bytes::copy_from_slice(payload),
        ..Default::default()
    }
}

fn push(m: &mut TelemetryManager, req: &PushTelemetryRequest, now: i64) -> i16 {
    m.push(None, req, &client(), now).0.error_code
}

fn payload() -> Vec<u8> {
    encode(&metrics_data(vec![gauge(
        "org.apache.kafka.producer.record.queue.time.avg",
        vec![number_point(vec![kv("topic", "t")], 1.5, 5)],
    )]))
}

/// A fresh instance with the default subscription: (manager, id, subscription id).
fn subscribed() -> (TelemetryManager, Uuid, i32) {
    let mut m = manager();
    default_subscription(&mut m);
    let r = get(&mut m, Uuid::ZERO, T0);
    assert_eq!(r.error_code, NONE);
    (m, r.client_instance_id, r.subscription_id)
}

// ---- GetTelemetrySubscriptions ----

#[test]
fn get_new_client_generates_an_id_and_answers_the_subscription() {
    let (m, id, sub) = subscribed();
    assert!(!id.is_zero());
    assert_ne!(sub, 0);
    let view = m.instance_view(id).unwrap();
    assert_eq!(view.subscription_id, sub);
    assert_eq!(
        view.requested_metrics,
        vec![
            "org.apache.kafka.consumer.coordinator.rebalance.latency.max".to_string(),
            "org.apache.kafka.producer.".to_string()
        ]
    );
    assert_eq!(view.last_error_code, NONE);
}

#[test]
fn get_response_fields() {
    let mut m = manager();
    default_subscription(&mut m);
    let r = get(&mut m, Uuid::ZERO, T0);
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.throttle_time_ms, 0);
    assert_eq!(r.accepted_compression_types, vec![4, 3, 1, 2]);
    assert_eq!(r.push_interval_ms, INTERVAL);
    assert_eq!(r.telemetry_max_bytes, 4096);
    assert!(r.delta_temporality);
    assert_eq!(r.requested_metrics.len(), 2);
    assert!(
        r.requested_metrics
            .contains(&ByteString::from("org.apache.kafka.producer."))
    );
}

#[test]
fn get_without_subscription_requests_nothing_at_the_default_interval() {
    let mut m = manager();
    let r = get(&mut m, Uuid::ZERO, T0);
    assert_eq!(r.error_code, NONE);
    assert!(r.requested_metrics.is_empty());
    assert_eq!(r.push_interval_ms, 300_000);
    assert_eq!(r.accepted_compression_types.len(), 4);
    assert_eq!(TelemetryConfig::default().telemetry_max_bytes, 1 << 20);
}

#[test]
fn get_with_an_id_uses_it() {
    let mut m = manager();
    let id = Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
    let r = get(&mut m, id, T0);
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.client_instance_id, id);
    assert!(m.instance_view(id).is_some());
}

#[test]
fn all_metrics_subscription_wins() {
    let mut m = manager();
    default_subscription(&mut m);
    m.subscriptions_mut()
        .alter("sub-2", &[AlterOp::set("metrics", "*")])
        .unwrap();
    let r = get(&mut m, Uuid::ZERO, T0);
    assert_eq!(r.requested_metrics, vec![ByteString::from("*")]);
    assert_eq!(r.push_interval_ms, INTERVAL);
}

#[test]
fn get_immediate_retry_is_throttled_and_allowed_after_the_interval() {
    let (mut m, id, _) = subscribed();
    let r = get(&mut m, id, T0 + i64::from(INTERVAL) - 1);
    assert_eq!(r.error_code, THROTTLING_QUOTA_EXCEEDED);
    assert_eq!(
        r.client_instance_id, id,
        "error responses carry the ID in effect"
    );
    let r = get(&mut m, id, T0 + i64::from(INTERVAL));
    assert_eq!(r.error_code, NONE);
}

#[test]
fn get_after_push_on_a_new_server_is_throttled() {
    let (_, id, sub) = subscribed();
    // A new broker knows nothing of the instance; the deterministic subscription ID matches.
    let mut fresh = manager();
    default_subscription(&mut fresh);
    assert_eq!(
        push(&mut fresh, &push_req(id, sub, 0, &payload()), T0),
        NONE
    );
    assert_eq!(
        get(&mut fresh, id, T0 + 1).error_code,
        THROTTLING_QUOTA_EXCEEDED
    );
}

#[test]
fn subscription_change_changes_the_id_and_lifts_throttling() {
    let (mut m, id, sub) = subscribed();
    m.subscriptions_mut()
        .alter("sub-2", &[AlterOp::set("metrics", "*")])
        .unwrap();
    let r = get(&mut m, id, T0 + 1);
    assert_eq!(r.error_code, NONE);
    assert_ne!(r.subscription_id, sub);
    // The old subscription ID is now unknown.
    assert_eq!(
        push(&mut m, &push_req(id, sub, 0, &[]), T0 + 2),
        UNKNOWN_SUBSCRIPTION_ID
    );
}

#[test]
fn interval_change_changes_the_id_and_unrelated_change_does_not() {
    let (mut m, id, sub) = subscribed();
    // A subscription matching nobody: same effective subscription, same ID, still throttled.
    m.subscriptions_mut()
        .alter(
            "other",
            &[
                AlterOp::set("metrics", "x"),
                AlterOp::set("match", "client_id=nobody"),
            ],
        )
        .unwrap();
    let r = get(&mut m, id, T0 + 1);
    assert_eq!(r.error_code, THROTTLING_QUOTA_EXCEEDED);
    assert_eq!(m.instance_view(id).unwrap().subscription_id, sub);
    m.subscriptions_mut()
        .alter("sub-1", &[AlterOp::set("interval.ms", "2000")])
        .unwrap();
    let r = get(&mut m, id, T0 + 2);
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.push_interval_ms, 2000);
    assert_ne!(r.subscription_id, sub);
    // Back to the old interval: back to the old ID (a function of set + interval + ID).
    m.subscriptions_mut()
        .alter(
            "sub-1",
            &[AlterOp::set("interval.ms", &INTERVAL.to_string())],
        )
        .unwrap();
    assert_eq!(get(&mut m, id, T0 + 3).subscription_id, sub);
}

#[test]
fn subscription_id_is_deterministic_and_per_instance() {
    let a = Uuid::from_u128(1 << 70);
    let b = Uuid::from_u128(1 << 71);
    let metrics = vec!["x.".to_string()];
    assert_eq!(
        EffectiveSubscription::compute_id(a, &metrics, 100),
        EffectiveSubscription::compute_id(a, &metrics, 100)
    );
    assert_ne!(
        EffectiveSubscription::compute_id(a, &metrics, 100),
        EffectiveSubscription::compute_id(b, &metrics, 100)
    );
    assert_ne!(
        EffectiveSubscription::compute_id(a, &metrics, 100),
        EffectiveSubscription::compute_id(a, &metrics, 101)
    );
    assert_ne!(
        EffectiveSubscription::compute_id(a, &metrics, 100),
        EffectiveSubscription::compute_id(a, &[], 100)
    );
}

// ---- KIP-1313 alignment table ----

#[test]
fn alignment_header_absent_body_zero_generates() {
    let mut m = manager();
    let r = m.get_subscriptions(None, &get_req(Uuid::ZERO), &client(), T0);
    assert_eq!(r.error_code, NONE);
    assert!(!r.client_instance_id.is_zero());
    assert_ne!(r.client_instance_id, Uuid::ONE);
    // A zero header is the same as an absent one.
    let r2 = m.get_subscriptions(Some(Uuid::ZERO), &get_req(Uuid::ZERO), &client(), T0);
    assert_eq!(r2.error_code, NONE);
    assert!(!r2.client_instance_id.is_zero());
    assert_ne!(r.client_instance_id, r2.client_instance_id);
}

#[test]
fn alignment_header_absent_body_r_uses_r() {
    let mut m = manager();
    let r_id = Uuid::from_u128(42 << 64);
    let r = m.get_subscriptions(None, &get_req(r_id), &client(), T0);
    assert_eq!((r.error_code, r.client_instance_id), (NONE, r_id));
}

#[test]
fn alignment_header_h_body_h_uses_h() {
    let mut m = manager();
    let h = Uuid::from_u128(7 << 64);
    let r = m.get_subscriptions(Some(h), &get_req(h), &client(), T0);
    assert_eq!((r.error_code, r.client_instance_id), (NONE, h));
}

#[test]
fn alignment_header_h_body_zero_is_invalid() {
    let mut m = manager();
    let h = Uuid::from_u128(7 << 64);
    let r = m.get_subscriptions(Some(h), &get_req(Uuid::ZERO), &client(), T0);
    assert_eq!(r.error_code, INVALID_REQUEST);
    assert_eq!(r.client_instance_id, h);
    assert_eq!(m.instance_count(), 0, "no instance is created");
}

#[test]
fn alignment_header_h_body_other_is_invalid() {
    let mut m = manager();
    let h = Uuid::from_u128(7 << 64);
    let r_id = Uuid::from_u128(8 << 64);
    let r = m.get_subscriptions(Some(h), &get_req(r_id), &client(), T0);
    assert_eq!(r.error_code, INVALID_REQUEST);
    assert_eq!(r.client_instance_id, h);
    assert_eq!(m.instance_count(), 0);
}

#[test]
fn push_alignment_header_must_match_body() {
    let (mut m, id, sub) = subscribed();
    let other = Uuid::from_u128(9 << 64);
    let req = push_req(id, sub, 0, &payload());
    assert_eq!(
        m.push(Some(other), &req, &client(), T0).0.error_code,
        INVALID_REQUEST
    );
    // Rejected before touching the instance: the real push still goes through.
    assert_eq!(m.push(Some(id), &req, &client(), T0).0.error_code, NONE);
    assert_eq!(
        m.push(Some(Uuid::ZERO), &req, &client(), T0 + 1000)
            .0
            .error_code,
        NONE
    );
}

// ---- PushTelemetry ----

#[test]
fn push_accepted_then_again_after_the_interval() {
    let (mut m, id, sub) = subscribed();
    let (resp, decoded) = m.push(None, &push_req(id, sub, 0, &payload()), &client(), T0);
    assert_eq!(resp.error_code, NONE);
    let decoded = decoded.unwrap();
    assert_eq!(decoded.client_instance_id, id);
    assert_eq!(decoded.client_id.as_deref(), Some("producer-1"));
    assert_eq!(decoded.metrics.resource_metrics.len(), 1);
    let view = m.instance_view(id).unwrap();
    assert!(!view.terminating);
    assert_eq!(view.metrics.len(), 1);
    assert_eq!(view.metrics[0].value, MetricValue::Number(1.5));
    assert_eq!(view.last_successful_push_ms, Some(T0));
    assert_eq!(
        push(
            &mut m,
            &push_req(id, sub, 0, &payload()),
            T0 + i64::from(INTERVAL)
        ),
        NONE
    );
}

#[test]
fn push_on_a_new_server_is_accepted() {
    let (_, id, sub) = subscribed();
    let mut fresh = manager();
    default_subscription(&mut fresh);
    assert_eq!(push(&mut fresh, &push_req(id, sub, 0, &[]), T0), NONE);
}

#[test]
fn push_zero_or_reserved_id_is_invalid() {
    let mut m = manager();
    assert_eq!(
        push(&mut m, &push_req(Uuid::ZERO, 0, 0, &[]), T0),
        INVALID_REQUEST
    );
    assert_eq!(
        push(&mut m, &push_req(Uuid::ONE, 0, 0, &[]), T0),
        INVALID_REQUEST
    );
    assert_eq!(m.instance_count(), 0);
}

#[test]
fn push_throttled_when_too_early() {
    let (mut m, id, sub) = subscribed();
    let req = push_req(id, sub, 0, &[]);
    assert_eq!(
        push(&mut m, &req, T0),
        NONE,
        "first push after a Get is allowed at once"
    );
    assert_eq!(push(&mut m, &req, T0 + 1), THROTTLING_QUOTA_EXCEEDED);
    let view = m.instance_view(id).unwrap();
    assert!(!view.terminating);
    assert_eq!(view.last_error_code, THROTTLING_QUOTA_EXCEEDED);
}

#[test]
fn terminating_push_is_never_throttled_and_is_the_last() {
    let (mut m, id, sub) = subscribed();
    assert_eq!(push(&mut m, &push_req(id, sub, 0, &[]), T0), NONE);
    let mut terminating = push_req(id, sub, 0, &payload());
    terminating.terminating = true;
    let (resp, decoded) = m.push(None, &terminating, &client(), T0 + 1);
    assert_eq!(resp.error_code, NONE);
    assert!(decoded.unwrap().terminating);
    let view = m.instance_view(id).unwrap();
    assert!(view.terminating);
    assert_eq!(view.last_error_code, NONE);
    // Any push after the terminating one, terminating or not, early or late.
    assert_eq!(push(&mut m, &terminating, T0 + 2), INVALID_REQUEST);
    assert_eq!(
        push(
            &mut m,
            &push_req(id, sub, 0, &[]),
            T0 + 10 * i64::from(INTERVAL)
        ),
        INVALID_REQUEST
    );
    let view = m.instance_view(id).unwrap();
    assert!(view.terminating);
    assert_eq!(view.last_error_code, INVALID_REQUEST);
}

#[test]
fn push_unknown_subscription_id() {
    let (mut m, id, _) = subscribed();
    assert_eq!(
        push(&mut m, &push_req(id, 1234, 0, &[]), T0),
        UNKNOWN_SUBSCRIPTION_ID
    );
    let view = m.instance_view(id).unwrap();
    assert!(!view.terminating);
    assert_eq!(view.last_error_code, UNKNOWN_SUBSCRIPTION_ID);
}

#[test]
fn push_unsupported_compression() {
    let (mut m, id, sub) = subscribed();
    assert_eq!(
        push(&mut m, &push_req(id, sub, 100, &[]), T0),
        UNSUPPORTED_COMPRESSION_TYPE
    );
    assert_eq!(
        m.instance_view(id).unwrap().last_error_code,
        UNSUPPORTED_COMPRESSION_TYPE
    );
}

#[test]
fn get_right_after_unknown_subscription_or_unsupported_compression_is_not_throttled() {
    for (sub_override, ct, code) in [
        (Some(1234), 0, UNKNOWN_SUBSCRIPTION_ID),
        (None, 9, UNSUPPORTED_COMPRESSION_TYPE),
    ] {
        let (mut m, id, sub) = subscribed();
        let req = push_req(id, sub_override.unwrap_or(sub), ct, &[]);
        assert_eq!(push(&mut m, &req, T0 + 1), code);
        let r = get(&mut m, id, T0 + 2);
        assert_eq!(r.error_code, NONE, "after {code}");
        assert_eq!(r.subscription_id, sub);
        // The push that follows the re-fetch goes through at once.
        assert_eq!(push(&mut m, &push_req(id, sub, 0, &[]), T0 + 3), NONE);
        // A second Get is throttled again.
        assert_eq!(
            get(&mut m, id, T0 + 4).error_code,
            THROTTLING_QUOTA_EXCEEDED
        );
    }
}

#[test]
fn get_after_other_push_errors_is_throttled() {
    let (mut m, id, sub) = subscribed();
    assert_eq!(
        push(&mut m, &push_req(id, sub, 0, b"test-data"), T0),
        INVALID_RECORD
    );
    assert_eq!(
        get(&mut m, id, T0 + 1).error_code,
        THROTTLING_QUOTA_EXCEEDED
    );
}

#[test]
fn push_too_large() {
    let (mut m, id, sub) = subscribed();
    let big = vec![0u8; 4097];
    assert_eq!(
        push(&mut m, &push_req(id, sub, 0, &big), T0),
        TELEMETRY_TOO_LARGE
    );
    assert_eq!(
        m.instance_view(id).unwrap().last_error_code,
        TELEMETRY_TOO_LARGE
    );
}

#[test]
fn push_decompression_bomb_is_too_large() {
    // 4096 max bytes * factor 4 = 16 KiB of output at most.
    let bomb = vec![0u8; 64 << 10];
    for ct in [
        compression::GZIP,
        compression::SNAPPY,
        compression::LZ4,
        compression::ZSTD,
    ] {
        let (mut m, id, sub) = subscribed();
        let compressed = test_codecs::compress(ct, &bomb);
        assert!(compressed.len() <= 4096, "type {ct}: {}", compressed.len());
        assert_eq!(
            push(&mut m, &push_req(id, sub, ct, &compressed), T0),
            TELEMETRY_TOO_LARGE,
            "type {ct}"
        );
    }
}

#[test]
fn push_every_compression_type_decodes() {
    for ct in [
        compression::NONE,
        compression::GZIP,
        compression::SNAPPY,
        compression::LZ4,
        compression::ZSTD,
    ] {
        let (mut m, id, sub) = subscribed();
        let body = test_codecs::compress(ct, &payload());
        let (resp, decoded) = m.push(None, &push_req(id, sub, ct, &body), &client(), T0);
        assert_eq!(resp.error_code, NONE, "type {ct}");
        assert_eq!(
            decoded.unwrap().metrics,
            crate::otlp::decode_metrics_data(&payload()).unwrap()
        );
    }
    let (mut m, id, sub) = subscribed();
    let xerial = test_codecs::snappy_xerial(&payload(), 16);
    assert_eq!(
        push(&mut m, &push_req(id, sub, compression::SNAPPY, &xerial), T0),
        NONE
    );
}

#[test]
fn push_corrupt_compression_or_bad_protobuf_is_invalid_record() {
    for ct in [
        compression::GZIP,
        compression::SNAPPY,
        compression::LZ4,
        compression::ZSTD,
    ] {
        let (mut m, id, sub) = subscribed();
        assert_eq!(
            push(&mut m, &push_req(id, sub, ct, b"not compressed at all"), T0),
            INVALID_RECORD,
            "type {ct}"
        );
    }
    let (mut m, id, sub) = subscribed();
    let body = test_codecs::gzip(b"\x0a\xff\xff\xff\xff\x0f");
    assert_eq!(
        push(&mut m, &push_req(id, sub, compression::GZIP, &body), T0),
        INVALID_RECORD
    );
    assert_eq!(m.instance_view(id).unwrap().last_error_code, INVALID_RECORD);
}

#[test]
fn push_validation_order() {
    // Every check failing at once: the first in Kafka's order wins.
    let (mut m, id, sub) = subscribed();
    let big = vec![0u8; 5000];
    assert_eq!(push(&mut m, &push_req(id, sub, 0, &[]), T0), NONE);
    // Throttling before subscription, compression and size.
    assert_eq!(
        push(&mut m, &push_req(id, 1, 99, &big), T0 + 1),
        THROTTLING_QUOTA_EXCEEDED
    );
    let later = T0 + i64::from(INTERVAL);
    // Subscription before compression and size.
    assert_eq!(
        push(&mut m, &push_req(id, 1, 99, &big), later),
        UNKNOWN_SUBSCRIPTION_ID
    );
    // Compression before size (the exempt Get lets the next push through at once).
    assert_eq!(get(&mut m, id, later + 1).error_code, NONE);
    assert_eq!(
        push(&mut m, &push_req(id, sub, 99, &big), later + 2),
        UNSUPPORTED_COMPRESSION_TYPE
    );
    assert_eq!(get(&mut m, id, later + 3).error_code, NONE);
    // Size before decoding.
    assert_eq!(
        push(&mut m, &push_req(id, sub, 0, &big), later + 4),
        TELEMETRY_TOO_LARGE
    );
    // Terminated before everything else (a terminating push with a wrong subscription still
    // marks the instance as terminating, as Kafka does).
    let mut t = push_req(id, 1, 99, &big);
    t.terminating = true;
    assert_eq!(push(&mut m, &t, later + 5), UNKNOWN_SUBSCRIPTION_ID);
    assert_eq!(
        push(&mut m, &push_req(id, sub, 0, &[]), later + 6),
        INVALID_REQUEST
    );
}

#[test]
fn delta_sums_and_histograms_accumulate_gauges_replace() {
    let (mut m, id, sub) = subscribed();
    let data = |g: f64, c: f64, n: u64, s: f64| {
        encode(&metrics_data(vec![
            gauge("g", vec![number_point(vec![], g, 1)]),
            delta_counter("c", vec![number_point(vec![], c, 1)]),
            delta_histogram("h", vec![], n, s),
        ]))
    };
    assert_eq!(
        push(&mut m, &push_req(id, sub, 0, &data(1.0, 2.0, 3, 4.0)), T0),
        NONE
    );
    let next = T0 + i64::from(INTERVAL);
    assert_eq!(
        push(&mut m, &push_req(id, sub, 0, &data(5.0, 6.0, 7, 8.0)), next),
        NONE
    );
    let view = m.instance_view(id).unwrap();
    let value = |name: &str| view.metrics.iter().find(|p| p.name == name).unwrap().value;
    assert_eq!(value("g"), MetricValue::Number(5.0));
    assert_eq!(value("c"), MetricValue::Number(8.0));
    assert_eq!(
        value("h"),
        MetricValue::Distribution {
            count: 10,
            sum: 12.0
        }
    );
    assert!(view.metrics.iter().all(|p| p.updated_ms == next));
}

#[test]
fn series_per_instance_are_capped() {
    let mut m = TelemetryManager::new(TelemetryConfig {
        max_series_per_instance: 2,
        ..Default::default()
    });
    let id = get(&mut m, Uuid::ZERO, T0).client_instance_id;
    let sub = m.instance_view(id).unwrap().subscription_id;
    let body = encode(&metrics_data(vec![gauge(
        "g",
        (0..5)
            .map(|i| number_point(vec![kv("i", &i.to_string())], 1.0, 1))
            .collect(),
    )]));
    assert_eq!(push(&mut m, &push_req(id, sub, 0, &body), T0), NONE);
    let view = m.instance_view(id).unwrap();
    assert_eq!(view.metrics.len(), 2);
    assert_eq!(view.dropped_series, 3);
}

// ---- Instances: expiry and capacity ----

#[test]
fn instances_expire_after_three_intervals_or_a_minute() {
    let (mut m, id, _) = subscribed();
    // Interval 1 s: expiry is max(60 s, 3 s) = 60 s after the last request.
    assert_eq!(m.expire(T0 + 60_000), 0);
    assert_eq!(m.expire(T0 + 60_001), 1);
    assert!(m.instance_view(id).is_none());

    let mut m = manager();
    let id = get(&mut m, Uuid::ZERO, T0).client_instance_id; // default interval 300 s
    assert_eq!(m.expire(T0 + 900_000), 0);
    assert_eq!(m.expire(T0 + 900_001), 1);
    assert!(m.instance_view(id).is_none());
}

#[test]
fn expired_instance_is_forgotten_on_lookup() {
    let (mut m, id, sub) = subscribed();
    assert_eq!(push(&mut m, &push_req(id, sub, 0, &payload()), T0), NONE);
    let later = T0 + 60_001;
    // The instance is rebuilt: not throttled, no metrics kept.
    assert_eq!(get(&mut m, id, later).error_code, NONE);
    assert!(m.instance_view(id).unwrap().metrics.is_empty());
}

#[test]
fn capacity_evicts_the_least_recently_seen() {
    let mut m = TelemetryManager::new(TelemetryConfig {
        max_instances: 2,
        ..Default::default()
    });
    let a = get(&mut m, Uuid::ZERO, T0).client_instance_id;
    let b = get(&mut m, Uuid::ZERO, T0 + 1).client_instance_id;
    let c = get(&mut m, Uuid::ZERO, T0 + 2).client_instance_id;
    assert_eq!(m.instance_count(), 2);
    assert!(m.instance_view(a).is_none());
    assert!(m.instance_view(b).is_some() && m.instance_view(c).is_some());
    assert!(m.remove_instance(b));
    assert_eq!(m.instances().len(), 1);
}

// ---- Subscription configs ----

#[test]
fn subscription_validation_errors() {
    let mut s = Subscriptions::new();
    let err = |s: &mut Subscriptions, name: &str, ops: &[AlterOp]| s.alter(name, ops).unwrap_err();
    assert_eq!(
        err(&mut s, "", &[AlterOp::set("metrics", "a")]),
        SubscriptionError::EmptyName
    );
    let e = err(&mut s, "x", &[AlterOp::set("random", "random")]);
    assert_eq!(e, SubscriptionError::UnknownConfig("random".into()));
    assert_eq!(e.error_code(), INVALID_REQUEST);
    for bad in ["99", "3600001", "-1"] {
        let e = err(&mut s, "x", &[AlterOp::set("interval.ms", bad)]);
        assert_eq!(e.error_code(), INVALID_REQUEST, "{bad}");
    }
    let e = err(&mut s, "x", &[AlterOp::set("interval.ms", "abc")]);
    assert_eq!(e.error_code(), INVALID_CONFIG);
    for bad in [
        "client_id",
        "client_id=",
        "=abc",
        "client_id=a=b",
        "unknown_attr=a",
        "client_id=(",
        "client_id=a,client_software_name",
    ] {
        let e = err(&mut s, "x", &[AlterOp::set("match", bad)]);
        assert!(
            matches!(e, SubscriptionError::IllegalMatchPattern(_)),
            "{bad}: {e:?}"
        );
        assert_eq!(e.error_code(), INVALID_CONFIG, "{bad}");
    }
    let e = err(&mut s, "x", &[AlterOp::append("interval.ms", "5")]);
    assert_eq!(e.error_code(), INVALID_CONFIG);
    let e = err(
        &mut s,
        "x",
        &[AlterOp::set("metrics", "a"), AlterOp::delete("metrics")],
    );
    assert_eq!(e, SubscriptionError::DuplicateKey("metrics".into()));
    let null_set = AlterOp {
        key: "metrics".into(),
        op: AlterOpType::Set,
        value: None,
    };
    assert_eq!(err(&mut s, "x", &[null_set]).error_code(), INVALID_REQUEST);
    assert!(s.list().is_empty());
    assert_eq!(s.generation(), 0, "failed alters change nothing");
    // Boundaries are accepted.
    s.alter("x", &[AlterOp::set("interval.ms", "100")]).unwrap();
    s.alter("x", &[AlterOp::set("interval.ms", "3600000")])
        .unwrap();
}

#[test]
fn subscription_set_append_subtract_delete_describe_list() {
    let mut s = Subscriptions::new();
    s.alter("sub-b", &[AlterOp::set("metrics", "a., b.")])
        .unwrap();
    s.alter("sub-a", &[AlterOp::set("interval.ms", "1000")])
        .unwrap();
    assert_eq!(s.list(), vec!["sub-a".to_string(), "sub-b".to_string()]);
    s.alter("sub-b", &[AlterOp::append("metrics", "b.,c.")])
        .unwrap();
    s.alter("sub-b", &[AlterOp::subtract("metrics", "a.")])
        .unwrap();
    s.alter("sub-b", &[AlterOp::append("match", "client_id=p.*")])
        .unwrap();
    assert_eq!(
        s.describe("sub-b").unwrap(),
        vec![
            ("metrics".to_string(), "b.,c.".to_string(), false),
            ("interval.ms".to_string(), "300000".to_string(), true),
            ("match".to_string(), "client_id=p.*".to_string(), false),
        ]
    );
    assert_eq!(s.describe("nope"), None);
    // validate_alter changes nothing.
    let generation = s.generation();
    s.validate_alter("sub-b", &[AlterOp::set("metrics", "z")])
        .unwrap();
    assert!(
        s.validate_alter("sub-b", &[AlterOp::set("interval.ms", "1")])
            .is_err()
    );
    assert_eq!(s.generation(), generation);
    // Deleting every key removes the subscription.
    s.alter(
        "sub-b",
        &[AlterOp::delete("metrics"), AlterOp::delete("match")],
    )
    .unwrap();
    assert_eq!(s.list(), vec!["sub-a".to_string()]);
    assert_eq!(s.generation(), generation + 1);
    // Deleting from a missing subscription is a no-op.
    s.alter("ghost", &[AlterOp::delete("metrics")]).unwrap();
    assert_eq!(s.generation(), generation + 1);
    // replace() is AlterConfigs.
    s.replace("sub-a", BTreeMap::new()).unwrap();
    assert!(s.list().is_empty());
}

#[test]
fn snapshot_round_trips_through_json() {
    let mut s = Subscriptions::new();
    s.alter(
        "sub-1",
        &[
            AlterOp::set("metrics", "org.apache.kafka."),
            AlterOp::set("interval.ms", "5000"),
            AlterOp::set("match", "client_id=x.*,client_software_name=y"),
        ],
    )
    .unwrap();
    s.alter("sub-2", &[AlterOp::set("metrics", "*")]).unwrap();
    let json = serde_json::to_string(&s.snapshot()).unwrap();
    let back: SubscriptionsSnapshot = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s.snapshot());
    let restored = Subscriptions::from_snapshot(&back).unwrap();
    assert_eq!(restored.list(), s.list());
    assert_eq!(restored.describe("sub-1"), s.describe("sub-1"));
    let id = Uuid::from_u128(5 << 80);
    let c = ClientSelectors {
        client_id: Some("xyz".into()),
        software_name: Some("y".into()),
        ..Default::default()
    };
    assert_eq!(restored.effective(id, &c), s.effective(id, &c));
    // A corrupt snapshot names the subscription.
    let mut bad = back.clone();
    bad.subscriptions
        .get_mut("sub-2")
        .unwrap()
        .insert("interval.ms".into(), "5".into());
    let (name, e) = Subscriptions::from_snapshot(&bad).unwrap_err();
    assert_eq!(name, "sub-2");
    assert_eq!(e, SubscriptionError::IntervalOutOfRange(5));
}

#[test]
fn match_is_a_full_match_on_every_attribute() {
    let id = Uuid::from_u128(0xabcdef << 64);
    let mut s = Subscriptions::new();
    let matches =
        |s: &Subscriptions, c: &ClientSelectors| !s.effective(id, c).requested_metrics.is_empty();
    let set = |s: &mut Subscriptions, m: &str| {
        s.replace(
            "s",
            BTreeMap::from([
                ("metrics".to_string(), "m.".to_string()),
                ("match".to_string(), m.to_string()),
            ]),
        )
        .unwrap();
    };
    let c = client();
    for (pattern, expected) in [
        ("client_id=producer-1", true),
        ("client_id=producer", false), // full match, not a prefix
        ("client_id=roducer-1", false),
        ("client_id=prod.*", true),
        ("client_software_name=apache-kafka-java", true),
        ("client_software_version=4\\.1\\..*", true),
        ("client_software_version=4\\.0\\..*", false),
        ("client_source_address=127\\.0\\.0\\.1", true),
        ("client_source_port=50123", true),
        ("client_source_port=5012", false),
        (" client_id = producer-1 ", true),
        ("client_id=producer-1,client_source_port=1", false), // all must match
        ("client_id=producer-1,client_source_port=50.*", true),
    ] {
        set(&mut s, pattern);
        assert_eq!(matches(&s, &c), expected, "{pattern}");
    }
    set(&mut s, &format!("client_instance_id={id}"));
    assert!(matches(&s, &c));
    set(&mut s, "client_instance_id=AAAAAAAAAAAAAAAAAAAAAA");
    assert!(!matches(&s, &c));
    // A missing attribute never matches.
    set(&mut s, "client_software_name=.*");
    assert!(!matches(&s, &ClientSelectors::default()));
    // No match entry matches everyone.
    s.replace(
        "s",
        BTreeMap::from([("metrics".to_string(), "m.".to_string())]),
    )
    .unwrap();
    assert!(matches(&s, &ClientSelectors::default()));
}

#[test]
fn union_of_metrics_and_smallest_interval() {
    let mut s = Subscriptions::new();
    s.alter(
        "a",
        &[
            AlterOp::set("metrics", "x., y."),
            AlterOp::set("interval.ms", "5000"),
        ],
    )
    .unwrap();
    s.alter(
        "b",
        &[
            AlterOp::set("metrics", "y., z."),
            AlterOp::set("interval.ms", "400000"),
        ],
    )
    .unwrap();
    s.alter(
        "c",
        &[
            AlterOp::set("metrics", "w."),
            AlterOp::set("interval.ms", "100"),
            AlterOp::set("match", "client_id=nobody"),
        ],
    )
    .unwrap();
    let e = s.effective(Uuid::from_u128(3 << 64), &client());
    assert_eq!(e.requested_metrics, vec!["x.", "y.", "z."]);
    assert_eq!(e.push_interval_ms, 5000);
    // Only a subscription above the default: its own interval.
    let mut s = Subscriptions::new();
    s.alter(
        "b",
        &[
            AlterOp::set("metrics", "z."),
            AlterOp::set("interval.ms", "400000"),
        ],
    )
    .unwrap();
    assert_eq!(
        s.effective(Uuid::from_u128(3 << 64), &client())
            .push_interval_ms,
        400_000
    );
    // Empty metrics: subscribed to nothing.
    let mut s = Subscriptions::new();
    s.alter("e", &[AlterOp::set("metrics", "")]).unwrap();
    assert_eq!(s.list(), vec!["e".to_string()]);
    assert!(
        s.effective(Uuid::from_u128(3 << 64), &client())
            .requested_metrics
            .is_empty()
    );
}

// ---- Prometheus ----

#[test]
fn prometheus_golden_text() {
    let mut m = manager();
    m.subscriptions_mut()
        .alter(
            "all",
            &[
                AlterOp::set("metrics", "*"),
                AlterOp::set("interval.ms", "1000"),
            ],
        )
        .unwrap();
    let a = Uuid::from_u128(1 << 120);
    let b = Uuid::from_u128(2 << 120);
    let mut other = client();
    other.client_id = Some("con\"sumer\\1\n".into());
    for (id, c) in [(a, client()), (b, other)] {
        let r = m.get_subscriptions(None, &get_req(id), &c, T0);
        assert_eq!(r.error_code, NONE);
        let body = encode(&metrics_data(vec![
            gauge(
                "org.apache.kafka.producer.node.request.latency.avg",
                vec![number_point(
                    vec![kv("node.id", "1"), kv("client_id", "shadowed")],
                    2.5,
                    1,
                )],
            ),
            delta_counter(
                "org.apache.kafka.consumer.fetch.total",
                vec![number_point(vec![kv("topic", "t\"q")], 3.0, 1)],
            ),
            delta_histogram("org.apache.kafka.request.size", vec![], 4, 100.0),
        ]));
        let (resp, _) = m.push(None, &push_req(id, r.subscription_id, 0, &body), &c, T0);
        assert_eq!(resp.error_code, NONE);
    }
    let expected = r#"# TYPE skiff_telemetry_instances gauge
skiff_telemetry_instances 2
# TYPE org_apache_kafka_consumer_fetch_total counter
org_apache_kafka_consumer_fetch_total{client_instance_id="AQAAAAAAAAAAAAAAAAAAAA",client_id="producer-1",topic="t\"q"} 3
org_apache_kafka_consumer_fetch_total{client_instance_id="AgAAAAAAAAAAAAAAAAAAAA",client_id="con\"sumer\\1\n",topic="t\"q"} 3
# TYPE org_apache_kafka_producer_node_request_latency_avg gauge
org_apache_kafka_producer_node_request_latency_avg{client_instance_id="AQAAAAAAAAAAAAAAAAAAAA",client_id="producer-1",node_id="1"} 2.5
org_apache_kafka_producer_node_request_latency_avg{client_instance_id="AgAAAAAAAAAAAAAAAAAAAA",client_id="con\"sumer\\1\n",node_id="1"} 2.5
# TYPE org_apache_kafka_request_size summary
org_apache_kafka_request_size_sum{client_instance_id="AQAAAAAAAAAAAAAAAAAAAA",client_id="producer-1"} 100
org_apache_kafka_request_size_count{client_instance_id="AQAAAAAAAAAAAAAAAAAAAA",client_id="producer-1"} 4
org_apache_kafka_request_size_sum{client_instance_id="AgAAAAAAAAAAAAAAAAAAAA",client_id="con\"sumer\\1\n"} 100
org_apache_kafka_request_size_count{client_instance_id="AgAAAAAAAAAAAAAAAAAAAA",client_id="con\"sumer\\1\n"} 4
"#;
    assert_eq!(m.render_prometheus(), expected);
}

#[test]
fn prometheus_empty() {
    let m = manager();
    assert_eq!(
        m.render_prometheus(),
        "# TYPE skiff_telemetry_instances gauge\nskiff_telemetry_instances 0\n"
    );
}

#[test]
fn instance_view_serialises() {
    let (mut m, id, sub) = subscribed();
    assert_eq!(push(&mut m, &push_req(id, sub, 0, &payload()), T0), NONE);
    let json = serde_json::to_value(m.instance_view(id).unwrap()).unwrap();
    assert_eq!(json["client_instance_id"], id.to_string());
    assert_eq!(json["subscription_id"], sub);
    assert_eq!(json["push_interval_ms"], INTERVAL);
    assert_eq!(json["terminating"], false);
    assert_eq!(json["last_push_ms"], T0);
    assert_eq!(json["client_source_address"], "127.0.0.1");
    assert_eq!(
        json["metrics"][0]["name"],
        "org.apache.kafka.producer.record.queue.time.avg"
    );
    assert_eq!(json["metrics"][0]["kind"], "gauge");
    assert_eq!(json["metrics"][0]["value"]["number"], 1.5);
    assert_eq!(json["metrics"][0]["attributes"]["topic"], "t");
    assert_eq!(
        serde_json::to_value(m.instances())
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn prometheus_mixed_kinds_and_colliding_labels() {
    let mut m = manager();
    m.subscriptions_mut()
        .alter("all", &[AlterOp::set("metrics", "*")])
        .unwrap();
    let a = Uuid::from_u128(1 << 120);
    let b = Uuid::from_u128(2 << 120);
    let bodies = [
        // `a.b` and `a_b` sanitise to the same label: the first (sorted) wins.
        encode(&metrics_data(vec![gauge(
            "x.y",
            vec![number_point(vec![kv("a.b", "1"), kv("a_b", "2")], 1.0, 1)],
        )])),
        // Same family name as a counter from another client: skipped.
        encode(&metrics_data(vec![delta_counter(
            "x_y",
            vec![number_point(vec![], 9.0, 1)],
        )])),
    ];
    for (id, body) in [(a, &bodies[0]), (b, &bodies[1])] {
        let r = m.get_subscriptions(None, &get_req(id), &client(), T0);
        let (resp, _) = m.push(
            None,
            &push_req(id, r.subscription_id, 0, body),
            &client(),
            T0,
        );
        assert_eq!(resp.error_code, NONE);
    }
    let text = m.render_prometheus();
    assert_eq!(
        text,
        "# TYPE skiff_telemetry_instances gauge\nskiff_telemetry_instances 2\n\
         # TYPE x_y gauge\n\
         x_y{client_instance_id=\"AQAAAAAAAAAAAAAAAAAAAA\",client_id=\"producer-1\",a_b=\"1\"} 1\n"
    );
}

// ---- recent values, for charts ----

#[test]
fn each_series_keeps_a_short_ring_of_recent_values() {
    let (mut m, id, sub) = subscribed();
    let gauge_at = |v: f64| {
        encode(&metrics_data(vec![gauge(
            "org.apache.kafka.producer.record.queue.time.avg",
            vec![number_point(vec![kv("topic", "t")], v, 5)],
        )]))
    };
    let pushes = crate::point::HISTORY_POINTS as i64 + 5;
    for i in 0..pushes {
        let at = T0 + i * i64::from(INTERVAL);
        let code = push(&mut m, &push_req(id, sub, 0, &gauge_at(i as f64)), at);
        assert_eq!(code, NONE, "push {i}");
    }
    let view = m.instance_view(id).expect("the instance");
    let recent: Vec<(i64, f64)> = view.metrics[0].recent.iter().copied().collect();
    assert_eq!(recent.len(), crate::point::HISTORY_POINTS, "bounded");
    let first = pushes - crate::point::HISTORY_POINTS as i64;
    let expected: Vec<(i64, f64)> = (first..pushes)
        .map(|i| (T0 + i * i64::from(INTERVAL), i as f64))
        .collect();
    assert_eq!(recent, expected, "the newest, oldest first");
    let json = serde_json::to_value(&view.metrics[0]).expect("serializes");
    assert_eq!(
        json["recent"][0],
        serde_json::json!([expected[0].0, expected[0].1])
    );
}

#[test]
fn only_the_first_series_keep_recent_values() {
    let mut point = MetricPoint {
        name: "m".into(),
        kind: crate::otlp::MetricKind::Gauge,
        attributes: BTreeMap::new(),
        value: crate::otlp::MetricValue::Distribution { count: 0, sum: 0.0 },
        time_unix_nano: 0,
        updated_ms: 0,
        recent: Default::default(),
        keeps_recent: true,
    };
    point.remember(1);
    assert!(
        point.recent.is_empty(),
        "a histogram without counts has no mean yet"
    );
    point.value = crate::otlp::MetricValue::Distribution {
        count: 4,
        sum: 10.0,
    };
    point.remember(2);
    point.value = crate::otlp::MetricValue::Distribution {
        count: 5,
        sum: 15.0,
    };
    point.remember(2);
    assert_eq!(point.recent, [(2, 3.0)], "one value per push: its mean");
    point.keeps_recent = false;
    point.remember(3);
    assert_eq!(point.recent.len(), 1);
    assert!(
        serde_json::to_value(&MetricPoint {
            recent: Default::default(),
            ..point
        })
        .expect("serializes")
        .get("recent")
        .is_none()
    );
}
