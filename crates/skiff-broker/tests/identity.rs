//! KIP-1313 over TCP: the first v2-header request fixes a connection's client instance ID; later
//! v2-header requests that break it get INVALID_REQUEST in their API's own error response, and
//! the connection stays usable. v1-header requests are exempt.

mod common;

use std::sync::atomic::Ordering;

use common::{Client, TestBroker};
use skiff_broker::identity::RejectReason;
use skiff_broker::versions::supported_versions;
use skiff_protocol::error_response::response_error_codes;
use skiff_protocol::generated::{ApiVersionsRequest, MetadataRequest};
use skiff_protocol::testing::Rng;
use skiff_protocol::{ApiKey, Request, Response, Uuid, error_codes};

const A: Uuid = Uuid::from_u128(0x1111_2222_3333_4444_5555_6666_7777_8888);
const B: Uuid = Uuid::from_u128(0x9999_aaaa_bbbb_cccc_dddd_eeee_ffff_0001);

/// Metadata v13 (header v2, top-level error code) with no topics: cheap and always succeeds.
fn metadata() -> Request {
    Request::Metadata(MetadataRequest {
        topics: Some(Vec::new()),
        ..Default::default()
    })
}

async fn metadata_error(client: &mut Client, id: Option<Uuid>) -> i16 {
    match client.call_with_id(metadata(), 13, id).await {
        Response::Metadata(m) => m.error_code,
        other => panic!("unexpected {other:?}"),
    }
}

async fn metadata_ok(client: &mut Client, id: Option<Uuid>) -> bool {
    match client.call_with_id(metadata(), 13, id).await {
        Response::Metadata(m) => m.error_code == 0 && !m.brokers.is_empty(),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn same_id_repeated_is_accepted() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    for _ in 0..3 {
        assert!(metadata_ok(&mut c, Some(A)).await);
    }
    broker.stop().await;
}

#[tokio::test]
async fn id_then_none_then_other_id_are_rejected_and_connection_survives() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    assert!(metadata_ok(&mut c, Some(A)).await);
    assert_eq!(
        metadata_error(&mut c, None).await,
        error_codes::INVALID_REQUEST
    );
    assert_eq!(
        metadata_error(&mut c, Some(B)).await,
        error_codes::INVALID_REQUEST
    );
    // An explicit zero UUID is "absent": rejected the same way.
    assert_eq!(
        metadata_error(&mut c, Some(Uuid::ZERO)).await,
        error_codes::INVALID_REQUEST
    );
    // A correct request after the rejections still works on the same connection.
    assert!(metadata_ok(&mut c, Some(A)).await);
    let metrics = &broker.broker().metrics;
    assert_eq!(metrics.rejections(RejectReason::MissingId), 2);
    assert_eq!(metrics.rejections(RejectReason::DifferentId), 1);
    assert_eq!(
        metrics.connections_with_instance_id.load(Ordering::Relaxed),
        1
    );
    broker.stop().await;
}

#[tokio::test]
async fn none_then_id_is_rejected() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    assert!(metadata_ok(&mut c, None).await);
    assert_eq!(
        metadata_error(&mut c, Some(A)).await,
        error_codes::INVALID_REQUEST
    );
    assert!(metadata_ok(&mut c, None).await);
    // Explicit zero means "no ID" too, so it matches.
    assert!(metadata_ok(&mut c, Some(Uuid::ZERO)).await);
    assert_eq!(
        broker
            .broker()
            .metrics
            .rejections(RejectReason::UnexpectedId),
        1
    );
    broker.stop().await;
}

#[tokio::test]
async fn rejection_message_names_both_ids_and_the_request_has_no_effect() {
    use skiff_protocol::generated::ProduceRequest;
    use skiff_protocol::generated::produce_request::{PartitionProduceData, TopicProduceData};
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    assert!(metadata_ok(&mut c, Some(A)).await);
    // Auto-create the topic with a correct request first.
    let create = MetadataRequest {
        topics: Some(vec![
            skiff_protocol::generated::metadata_request::MetadataRequestTopic {
                name: Some("t".into()),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    match c.call_with_id(create, 13, Some(A)).await {
        Response::Metadata(m) => assert_eq!(m.topics[0].error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    let produce = ProduceRequest {
        acks: 1,
        timeout_ms: 1000,
        topic_data: vec![TopicProduceData {
            name: "t".into(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(common::batch(&[b"x"])),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call_with_id(produce, 9, Some(B)).await {
        Response::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            assert_eq!(p.error_code, error_codes::INVALID_REQUEST);
            let message = p.error_message.as_deref().unwrap_or_default();
            assert!(message.contains(&A.to_string()), "{message}");
            assert!(message.contains(&B.to_string()), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    // A rejected ApiVersions v3 (header v2) carries the code too.
    let request = Request::ApiVersions(ApiVersionsRequest {
        client_software_name: "t".into(),
        client_software_version: "1".into(),
        ..Default::default()
    });
    match c.call_with_id(request, 3, Some(B)).await {
        Response::ApiVersions(r) => assert_eq!(r.error_code, error_codes::INVALID_REQUEST),
        other => panic!("unexpected {other:?}"),
    }
    // The rejected produce had no effect: nothing was appended.
    let topic = broker.broker().topic_by_name("t").expect("topic");
    assert_eq!(topic.partitions[0].log_end_offset(), 0);
    broker.stop().await;
}

#[tokio::test]
async fn v1_header_requests_neither_fix_nor_are_checked() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    // Metadata v8 uses header v1: the ID in it is not even encoded; nothing is fixed.
    for _ in 0..2 {
        match c.call_with_id(metadata(), 8, Some(B)).await {
            Response::Metadata(m) => assert!(!m.brokers.is_empty()),
            other => panic!("unexpected {other:?}"),
        }
    }
    // ApiVersions v0 (header v1) before the ID is fixed.
    match c.call_with_id(ApiVersionsRequest::default(), 0, None).await {
        Response::ApiVersions(r) => assert_eq!(r.error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    // The first v2 request fixes A.
    assert!(metadata_ok(&mut c, Some(A)).await);
    // v1-header requests after that are still exempt.
    match c.call_with_id(metadata(), 8, None).await {
        Response::Metadata(m) => assert!(!m.brokers.is_empty()),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        metadata_error(&mut c, Some(B)).await,
        error_codes::INVALID_REQUEST
    );
    broker.stop().await;
}

#[tokio::test]
async fn two_connections_with_different_ids_are_independent() {
    let broker = TestBroker::start().await;
    let mut a = broker.client().await;
    let mut b = broker.client().await;
    assert!(metadata_ok(&mut a, Some(A)).await);
    assert!(metadata_ok(&mut b, Some(B)).await);
    assert!(metadata_ok(&mut a, Some(A)).await);
    assert!(metadata_ok(&mut b, Some(B)).await);
    // A reconnect starts fresh.
    drop(a);
    let mut a2 = broker.client().await;
    assert!(metadata_ok(&mut a2, Some(B)).await);
    broker.stop().await;
}

/// Hand-built header v2 frames: unknown tags are ignored; a malformed tag 0 closes the
/// connection without harming others.
#[tokio::test]
async fn raw_headers_unknown_tags_and_malformed_tag_0() {
    let broker = TestBroker::start().await;
    let mut bystander = broker.client().await;
    assert!(metadata_ok(&mut bystander, Some(B)).await);

    // Metadata v12: key 3, version 12, correlation 77, client id null, tags {0: A, 9: [0xab]},
    // body: topics = compact empty array (1), allow auto create (1), include topic ops (0), tags (0).
    let mut frame = vec![0, 3, 0, 12, 0, 0, 0, 77, 0xff, 0xff, 2, 0, 16];
    frame.extend(A.to_bytes());
    frame.extend([9, 1, 0xab]);
    frame.extend([1, 1, 0, 0]);
    let mut sized = (frame.len() as i32).to_be_bytes().to_vec();
    sized.extend(&frame);
    let mut c = broker.client().await;
    c.send_raw(&sized).await;
    match c.receive(ApiKey::Metadata, 12, 77).await {
        Response::Metadata(m) => assert_eq!(m.error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    // The ID fixed by the raw frame is A: a request with B is rejected.
    assert_eq!(
        metadata_error(&mut c, Some(B)).await,
        error_codes::INVALID_REQUEST
    );

    // Tag 0 with 3 bytes instead of 16: malformed header, connection closed.
    let mut bad = vec![
        0, 3, 0, 12, 0, 0, 0, 78, 0xff, 0xff, 1, 0, 3, 1, 2, 3, 1, 1, 0, 0,
    ];
    let mut sized = (bad.len() as i32).to_be_bytes().to_vec();
    sized.append(&mut bad);
    let mut d = broker.client().await;
    d.send_raw(&sized).await;
    assert!(d.is_closed().await);

    assert!(metadata_ok(&mut bystander, Some(B)).await);
    broker.stop().await;
}

/// Every advertised API, at every advertised flexible version, rejected for a wrong ID, answers
/// with a decodable response of that version carrying 42 wherever the API reports errors.
#[tokio::test]
async fn every_advertised_api_rejects_with_its_own_error_response() {
    // Share groups on, so that every API of the version table is served.
    let broker = TestBroker::start_with(|config| config.share_groups_enabled = true).await;
    let mut checked = 0;
    for &api in ApiKey::ALL {
        let Some((lo, hi)) = supported_versions(api) else {
            continue;
        };
        for version in lo..=hi {
            if api.request_header_version(version) < 2 {
                continue;
            }
            // DescribeLogDirs before v3 has no error field (Kafka answers an unauthorised one
            // with no log directories): the answer is empty.
            if api == ApiKey::DescribeLogDirs && version < 3 {
                let mut c = broker.client().await;
                assert!(metadata_ok(&mut c, Some(A)).await);
                let request = Request::random(api, &mut Rng::new(7), version);
                match c.call_with_id(request, version, Some(B)).await {
                    Response::DescribeLogDirs(r) => assert!(r.results.is_empty(), "{r:?}"),
                    other => panic!("unexpected {other:?}"),
                }
                continue;
            }
            let mut c = broker.client().await;
            assert!(metadata_ok(&mut c, Some(A)).await);
            // A random request; re-drawn until Kafka's error response for it has somewhere to
            // put an error (e.g. Produce v9 with no topics has none).
            let mut rng = Rng::new(u64::from(api.key() as u16) << 16 | version as u64);
            let request = (0..50)
                .map(|_| Request::random(api, &mut rng, version))
                .find(|r| {
                    let probe =
                        skiff_protocol::error_response::error_response(r, version, 42, None);
                    !response_error_codes(&probe).is_empty()
                })
                .unwrap_or_else(|| panic!("{api:?} v{version}: no request with an error field"));
            let response = c.call_with_id(request, version, Some(B)).await;
            assert_eq!(response.api_key(), api);
            let codes = response_error_codes(&response);
            assert!(
                codes.contains(&error_codes::INVALID_REQUEST),
                "{api:?} v{version}: no INVALID_REQUEST in {codes:?}"
            );
            assert!(
                codes.iter().all(|c| *c == error_codes::INVALID_REQUEST),
                "{api:?} v{version}: {codes:?}"
            );
            // The connection is still usable.
            assert!(metadata_ok(&mut c, Some(A)).await);
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} API versions checked");
    broker.stop().await;
}
