//! Random bytes as PushTelemetry payloads, under every compression type, never panic and never
//! produce more than the decompression limit.

use bytes::Bytes;
use proptest::prelude::*;
use skiff_protocol::generated::{GetTelemetrySubscriptionsRequest, PushTelemetryRequest};
use skiff_protocol::{Uuid, error_codes};
use skiff_telemetry::compression;
use skiff_telemetry::{AlterOp, ClientSelectors, TelemetryConfig, TelemetryManager};

fn manager() -> TelemetryManager {
    let mut m = TelemetryManager::new(TelemetryConfig {
        telemetry_max_bytes: 4096,
        ..Default::default()
    });
    m.subscriptions_mut()
        .alter(
            "all",
            &[
                AlterOp::set("metrics", "*"),
                AlterOp::set("interval.ms", "100"),
            ],
        )
        .unwrap();
    m
}

/// Byte strings that start like a real compressed stream now and then, so the decoders get past
/// their magic checks.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    let prefixes = prop::sample::select(vec![
        Vec::new(),
        vec![0x1f, 0x8b, 0x08, 0x00],                      // gzip
        vec![0x28, 0xb5, 0x2f, 0xfd],                      // zstd
        vec![0x04, 0x22, 0x4d, 0x18],                      // lz4 frame
        vec![0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0], // xerial snappy
        vec![0x0a],                                        // MetricsData field 1
    ]);
    (prefixes, prop::collection::vec(any::<u8>(), 0..2048)).prop_map(|(mut p, rest)| {
        p.extend(rest);
        p
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_payloads_never_panic(
        bytes in payload(),
        compression_type in -1i8..=5,
        terminating in any::<bool>(),
        wrong_subscription in any::<bool>(),
    ) {
        let mut m = manager();
        let client = ClientSelectors::default();
        let get = m.get_subscriptions(
            None,
            &GetTelemetrySubscriptionsRequest::default(),
            &client,
            1_000,
        );
        prop_assert_eq!(get.error_code, error_codes::NONE);
        let request = PushTelemetryRequest {
            client_instance_id: get.client_instance_id,
            subscription_id: get.subscription_id.wrapping_add(i32::from(wrong_subscription)),
            terminating,
            compression_type,
            metrics: Bytes::from(bytes),
            ..Default::default()
        };
        let (response, decoded) = m.push(Some(get.client_instance_id), &request, &client, 1_001);
        prop_assert!([
            error_codes::NONE,
            error_codes::UNKNOWN_SUBSCRIPTION_ID,
            error_codes::UNSUPPORTED_COMPRESSION_TYPE,
            error_codes::INVALID_RECORD,
            error_codes::TELEMETRY_TOO_LARGE,
        ]
        .contains(&response.error_code), "code {}", response.error_code);
        prop_assert_eq!(decoded.is_some(), response.error_code == error_codes::NONE && !request.metrics.is_empty());
        // Rendering whatever was stored never panics either.
        let _ = m.render_prometheus();
        let _ = serde_json::to_string(&m.instances()).unwrap();
    }

    #[test]
    fn decompress_is_bounded(bytes in payload(), compression_type in 0i8..=4, limit in 0usize..8192) {
        if let Ok(out) = compression::decompress(compression_type, &bytes, limit) {
            prop_assert!(out.len() <= limit);
        }
    }

    #[test]
    fn random_ids_follow_the_alignment_rules(header in any::<u128>(), body in any::<u128>()) {
        let mut m = manager();
        let (h, b) = (Uuid::from_u128(header % 3), Uuid::from_u128(body % 3));
        let r = m.get_subscriptions(
            Some(h),
            &GetTelemetrySubscriptionsRequest { client_instance_id: b, ..Default::default() },
            &ClientSelectors::default(),
            0,
        );
        let expected_ok = h.is_zero() || h == b;
        prop_assert_eq!(r.error_code == error_codes::NONE, expected_ok);
        prop_assert!(!r.client_instance_id.is_zero() || !expected_ok && h.is_zero());
    }
}
