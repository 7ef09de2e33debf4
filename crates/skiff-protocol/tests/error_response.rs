//! `error_response` builds, for every API and version, a response that encodes and decodes back
//! to itself and carries the error code everywhere Kafka's `getErrorResponse` puts it; targeted
//! tests compare the structure with Kafka's for the APIs clients lean on.

use bytes::{Bytes, BytesMut};
use skiff_protocol::generated::*;
use skiff_protocol::testing::Rng;
use skiff_protocol::{
    ApiKey, ByteString, Request, Response, Uuid, error_codes, error_response, response_error_codes,
};

const CODE: i16 = 42;
const MESSAGE: &str = "msg";
const SAMPLES_PER_VERSION: u64 = 24;

/// APIs (and version ranges) whose error lives only on the request's mirrored entities: with no
/// entities in the request (random requests often have none), the response has no error code.
const ENTITY_ONLY: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, i16::MAX),
    (ApiKey::Fetch, 0, 6),
    (ApiKey::ListOffsets, 0, i16::MAX),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 0, i16::MAX),
    (ApiKey::OffsetFetch, 0, 1),
    (ApiKey::OffsetFetch, 8, i16::MAX),
    (ApiKey::FindCoordinator, 4, i16::MAX),
    (ApiKey::DescribeGroups, 0, i16::MAX),
    (ApiKey::CreateTopics, 0, i16::MAX),
    (ApiKey::DeleteTopics, 0, i16::MAX),
    (ApiKey::DeleteRecords, 0, i16::MAX),
    (ApiKey::OffsetForLeaderEpoch, 0, i16::MAX),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::WriteTxnMarkers, 0, i16::MAX),
    (ApiKey::TxnOffsetCommit, 0, i16::MAX),
    (ApiKey::CreateAcls, 0, i16::MAX),
    (ApiKey::DeleteAcls, 0, i16::MAX),
    (ApiKey::DescribeConfigs, 0, i16::MAX),
    (ApiKey::AlterConfigs, 0, i16::MAX),
    (ApiKey::AlterReplicaLogDirs, 0, i16::MAX),
    (ApiKey::CreatePartitions, 0, i16::MAX),
    (ApiKey::DeleteGroups, 0, i16::MAX),
    (ApiKey::ElectLeaders, 0, 0),
    (ApiKey::IncrementalAlterConfigs, 0, i16::MAX),
    (ApiKey::AlterClientQuotas, 0, i16::MAX),
    (ApiKey::AlterUserScramCredentials, 0, i16::MAX),
    (ApiKey::DescribeProducers, 0, i16::MAX),
    (ApiKey::DescribeTransactions, 0, i16::MAX),
    (ApiKey::ConsumerGroupDescribe, 0, i16::MAX),
    (ApiKey::DescribeTopicPartitions, 0, i16::MAX),
    (ApiKey::ShareGroupDescribe, 0, i16::MAX),
    (ApiKey::InitializeShareGroupState, 0, i16::MAX),
    (ApiKey::ReadShareGroupState, 0, i16::MAX),
    (ApiKey::WriteShareGroupState, 0, i16::MAX),
    (ApiKey::DeleteShareGroupState, 0, i16::MAX),
    (ApiKey::ReadShareGroupStateSummary, 0, i16::MAX),
    (ApiKey::StreamsGroupDescribe, 0, i16::MAX),
    (ApiKey::DescribeShareGroupOffsets, 0, i16::MAX),
];

/// API versions whose response has no error field Kafka fills: DescribeLogDirs before v3 has
/// only per-log-dir errors, and the request names no log dirs to mirror.
const NO_ERROR_FIELD: &[(ApiKey, i16, i16)] = &[(ApiKey::DescribeLogDirs, 0, 2)];

fn listed(list: &[(ApiKey, i16, i16)], api: ApiKey, version: i16) -> bool {
    list.iter()
        .any(|&(a, lo, hi)| a == api && (lo..=hi).contains(&version))
}

/// Encodes at `version` and decodes; the round trip must be exact.
fn try_round_trip(response: &Response, version: i16) -> Result<Response, String> {
    let api = response.api_key();
    let mut buf = BytesMut::new();
    response
        .encode(&mut buf, version)
        .map_err(|e| format!("{api:?} v{version}: encode: {e}"))?;
    let mut bytes = buf.freeze();
    let decoded = Response::decode(api, version, &mut bytes)
        .map_err(|e| format!("{api:?} v{version}: decode: {e}"))?;
    if !bytes.is_empty() {
        return Err(format!("{api:?} v{version}: bytes left over"));
    }
    if &decoded != response {
        return Err(format!(
            "{api:?} v{version}: round trip changed\n  sent {response:?}\n  got  {decoded:?}"
        ));
    }
    Ok(decoded)
}

fn round_trip(response: &Response, version: i16) -> Response {
    try_round_trip(response, version).unwrap_or_else(|e| panic!("{e}"))
}

fn s(text: &'static str) -> ByteString {
    ByteString::from_static(text)
}

fn message() -> Option<ByteString> {
    Some(s(MESSAGE))
}

fn build(request: impl Into<Request>, version: i16) -> Response {
    let response = error_response(&request.into(), version, CODE, Some(MESSAGE));
    round_trip(&response, version);
    response
}

#[test]
fn every_api_and_version_round_trips_with_the_error_everywhere() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for &api in ApiKey::ALL {
        let (lo, hi) = api.versions();
        for version in lo..=hi {
            let mut with_codes = 0;
            for seed in 0..SAMPLES_PER_VERSION {
                let mut rng =
                    Rng::new(seed ^ ((api.key() as u64) << 32) ^ ((version as u64) << 48));
                let request = Request::random(api, &mut rng, version);
                let response = error_response(&request, version, CODE, Some(MESSAGE));
                assert_eq!(response.api_key(), api);
                let decoded = match try_round_trip(&response, version) {
                    Ok(decoded) => decoded,
                    Err(e) => {
                        failures.push(e);
                        break;
                    }
                };
                let codes = response_error_codes(&decoded);
                if codes.iter().any(|&c| c != CODE) {
                    failures.push(format!(
                        "{api:?} v{version} seed {seed}: codes {codes:?} in {decoded:?}"
                    ));
                    break;
                }
                if codes.is_empty() {
                    if !listed(ENTITY_ONLY, api, version) && !listed(NO_ERROR_FIELD, api, version) {
                        failures.push(format!(
                            "{api:?} v{version} seed {seed}: no error code in {decoded:?}"
                        ));
                        break;
                    }
                } else {
                    with_codes += 1;
                }
                checked += 1;
            }
            if with_codes == 0 && !listed(NO_ERROR_FIELD, api, version) {
                failures.push(format!("{api:?} v{version}: never carried the error"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked > 5000, "only {checked} samples");
}

#[test]
fn without_a_message_every_response_round_trips_with_null_messages() {
    for &api in ApiKey::ALL {
        let (lo, hi) = api.versions();
        for version in lo..=hi {
            let request = Request::random(api, &mut Rng::new(api.key() as u64), version);
            let response = error_response(&request, version, CODE, None);
            round_trip(&response, version);
        }
    }
    let request = Request::SaslAuthenticate(SaslAuthenticateRequest::default());
    let Response::SaslAuthenticate(r) = error_response(&request, 2, CODE, None) else {
        panic!("wrong API")
    };
    assert_eq!((r.error_code, r.error_message), (CODE, None));
}

fn produce_request(by_id: bool) -> ProduceRequest {
    use produce_request::{PartitionProduceData, TopicProduceData};
    let topic = |name: &'static str, id: u128, partitions: &[i32]| TopicProduceData {
        name: if by_id { s("") } else { s(name) },
        topic_id: if by_id {
            Uuid::from_u128(id)
        } else {
            Uuid::default()
        },
        partition_data: partitions
            .iter()
            .map(|&index| PartitionProduceData {
                index,
                records: Some(Bytes::from_static(b"batch")),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    ProduceRequest {
        acks: -1,
        timeout_ms: 1000,
        topic_data: vec![topic("a", 1, &[0, 2]), topic("b", 2, &[1])],
        ..Default::default()
    }
}

#[test]
fn produce_reports_every_partition_like_kafka() {
    use produce_response::{PartitionProduceResponse, TopicProduceResponse};
    for (version, by_id) in [(3, false), (8, false), (12, false), (13, true)] {
        let response = build(produce_request(by_id), version);
        let partition = |index| PartitionProduceResponse {
            index,
            error_code: CODE,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
            // The per-partition message exists from v8.
            error_message: if version >= 8 { message() } else { None },
            ..Default::default()
        };
        let topic = |name, id, partitions: Vec<PartitionProduceResponse>| TopicProduceResponse {
            name: if by_id { s("") } else { s(name) },
            topic_id: if by_id {
                Uuid::from_u128(id)
            } else {
                Uuid::default()
            },
            partition_responses: partitions,
            ..Default::default()
        };
        let expected = ProduceResponse {
            responses: vec![
                topic("a", 1, vec![partition(0), partition(2)]),
                topic("b", 2, vec![partition(1)]),
            ],
            ..Default::default()
        };
        assert_eq!(response, Response::Produce(expected), "v{version}");
    }
}

fn fetch_request(by_id: bool) -> FetchRequest {
    use fetch_request::{FetchPartition, FetchTopic};
    let topic = |name: &'static str, id: u128, partitions: &[i32]| FetchTopic {
        topic: if by_id { s("") } else { s(name) },
        topic_id: if by_id {
            Uuid::from_u128(id)
        } else {
            Uuid::default()
        },
        partitions: partitions
            .iter()
            .map(|&partition| FetchPartition {
                partition,
                fetch_offset: 10,
                partition_max_bytes: 1 << 20,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    FetchRequest {
        max_wait_ms: 500,
        min_bytes: 1,
        session_id: 77,
        session_epoch: 3,
        topics: vec![topic("a", 1, &[0, 1]), topic("b", 2, &[4])],
        ..Default::default()
    }
}

#[test]
fn fetch_v12_reports_every_partition_by_name() {
    use fetch_response::{FetchableTopicResponse, PartitionData};
    let partition = |partition_index| PartitionData {
        partition_index,
        error_code: CODE,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        aborted_transactions: None,
        preferred_read_replica: -1,
        records: Some(Bytes::new()),
        ..Default::default()
    };
    let expected = FetchResponse {
        throttle_time_ms: 0,
        error_code: CODE,
        session_id: 77,
        responses: vec![
            FetchableTopicResponse {
                topic: s("a"),
                partitions: vec![partition(0), partition(1)],
                ..Default::default()
            },
            FetchableTopicResponse {
                topic: s("b"),
                partitions: vec![partition(4)],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    assert_eq!(build(fetch_request(false), 12), Response::Fetch(expected));

    // v4-v6 have no top-level error or session: only the partitions carry it.
    let Response::Fetch(old) = build(fetch_request(false), 6) else {
        panic!("wrong API")
    };
    assert_eq!((old.error_code, old.session_id), (0, 0));
    assert_eq!(response_error_codes(&Response::Fetch(old)), vec![CODE; 3]);
}

#[test]
fn fetch_v13_and_later_report_the_top_level_error_only() {
    // Kafka: from v13 clients read the top-level error, so no partitions are echoed.
    for version in 13..=ApiKey::Fetch.versions().1 {
        let expected = FetchResponse {
            error_code: CODE,
            session_id: 77,
            responses: Vec::new(),
            ..Default::default()
        };
        assert_eq!(
            build(fetch_request(true), version),
            Response::Fetch(expected),
            "v{version}"
        );
    }
}

#[test]
fn metadata_reports_each_requested_topic() {
    use metadata_request::MetadataRequestTopic;
    use metadata_response::MetadataResponseTopic;
    let expected_topic = |name: &'static str, id: u128| MetadataResponseTopic {
        error_code: CODE,
        name: Some(s(name)),
        topic_id: Uuid::from_u128(id),
        is_internal: false,
        partitions: Vec::new(),
        ..Default::default()
    };
    // v12: by name or by ID (null name); Kafka turns a null name into "".
    let request = MetadataRequest {
        topics: Some(vec![
            MetadataRequestTopic {
                name: Some(s("a")),
                ..Default::default()
            },
            MetadataRequestTopic {
                name: None,
                topic_id: Uuid::from_u128(9),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    let expected = MetadataResponse {
        topics: vec![expected_topic("a", 0), expected_topic("", 9)],
        ..Default::default()
    };
    assert_eq!(
        build(request.clone(), 12),
        Response::Metadata(expected.clone())
    );
    // v13 adds the top-level error.
    let expected = MetadataResponse {
        error_code: CODE,
        ..expected
    };
    assert_eq!(build(request, 13), Response::Metadata(expected));

    // v1: a null topic list asks for all topics; Kafka then returns none.
    let all = MetadataRequest {
        topics: None,
        ..Default::default()
    };
    let response = build(all, 1);
    assert_eq!(response, Response::Metadata(MetadataResponse::default()));
    assert!(response_error_codes(&response).is_empty());
    // v0 names the topics in a non-nullable list.
    let v0 = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            name: Some(s("t")),
            ..Default::default()
        }]),
        ..Default::default()
    };
    assert_eq!(response_error_codes(&build(v0, 0)), vec![CODE]);
}

#[test]
fn offset_commit_reports_every_partition_by_name_then_by_id() {
    use offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
    for (version, by_id) in [(2, false), (8, false), (9, false), (10, true)] {
        let request = OffsetCommitRequest {
            group_id: s("g"),
            member_id: s("m"),
            topics: vec![OffsetCommitRequestTopic {
                name: if by_id { s("") } else { s("t") },
                topic_id: if by_id {
                    Uuid::from_u128(5)
                } else {
                    Uuid::default()
                },
                partitions: [3, 4]
                    .iter()
                    .map(|&partition_index| OffsetCommitRequestPartition {
                        partition_index,
                        committed_offset: 100,
                        committed_metadata: Some(s("")),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let expected = OffsetCommitResponse {
            topics: vec![OffsetCommitResponseTopic {
                name: if by_id { s("") } else { s("t") },
                topic_id: if by_id {
                    Uuid::from_u128(5)
                } else {
                    Uuid::default()
                },
                partitions: [3, 4]
                    .iter()
                    .map(|&partition_index| OffsetCommitResponsePartition {
                        partition_index,
                        error_code: CODE,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            build(request, version),
            Response::OffsetCommit(expected),
            "v{version}"
        );
    }
}

#[test]
fn offset_fetch_by_version() {
    use offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopic};
    use offset_fetch_response::{
        OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
    };
    let request = OffsetFetchRequest {
        group_id: s("g"),
        topics: Some(vec![OffsetFetchRequestTopic {
            name: s("t"),
            partition_indexes: vec![0, 1],
            ..Default::default()
        }]),
        ..Default::default()
    };
    // v1: per partition, offset -1 and empty metadata.
    let partition = |partition_index| OffsetFetchResponsePartition {
        partition_index,
        committed_offset: -1,
        committed_leader_epoch: -1,
        metadata: Some(s("")),
        error_code: CODE,
        ..Default::default()
    };
    let expected = OffsetFetchResponse {
        topics: vec![OffsetFetchResponseTopic {
            name: s("t"),
            partitions: vec![partition(0), partition(1)],
            ..Default::default()
        }],
        ..Default::default()
    };
    assert_eq!(build(request.clone(), 1), Response::OffsetFetch(expected));
    // v2-v7: top level only.
    for version in 2..=7 {
        let expected = OffsetFetchResponse {
            error_code: CODE,
            ..Default::default()
        };
        assert_eq!(
            build(request.clone(), version),
            Response::OffsetFetch(expected),
            "v{version}"
        );
    }
    // v8+: per group.
    let request = OffsetFetchRequest {
        groups: vec![
            OffsetFetchRequestGroup {
                group_id: s("g1"),
                topics: None,
                ..Default::default()
            },
            OffsetFetchRequestGroup {
                group_id: s("g2"),
                topics: Some(Vec::new()),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let group = |id| OffsetFetchResponseGroup {
        group_id: s(id),
        error_code: CODE,
        ..Default::default()
    };
    for version in 8..=ApiKey::OffsetFetch.versions().1 {
        let expected = OffsetFetchResponse {
            groups: vec![group("g1"), group("g2")],
            ..Default::default()
        };
        assert_eq!(
            build(request.clone(), version),
            Response::OffsetFetch(expected),
            "v{version}"
        );
    }
}

#[test]
fn consumer_group_heartbeat_reports_the_top_level_error() {
    let request = ConsumerGroupHeartbeatRequest {
        group_id: s("g"),
        member_id: s("m"),
        member_epoch: 5,
        ..Default::default()
    };
    for version in
        ApiKey::ConsumerGroupHeartbeat.versions().0..=ApiKey::ConsumerGroupHeartbeat.versions().1
    {
        let expected = ConsumerGroupHeartbeatResponse {
            throttle_time_ms: 0,
            error_code: CODE,
            error_message: message(),
            member_id: None,
            member_epoch: 0,
            heartbeat_interval_ms: 0,
            assignment: None,
            ..Default::default()
        };
        assert_eq!(
            build(request.clone(), version),
            Response::ConsumerGroupHeartbeat(expected),
            "v{version}"
        );
    }
}

#[test]
fn find_coordinator_v3_is_one_node_v4_is_per_key() {
    use find_coordinator_response::Coordinator;
    let v3 = FindCoordinatorRequest {
        key: s("g"),
        ..Default::default()
    };
    let expected = FindCoordinatorResponse {
        error_code: CODE,
        error_message: message(),
        node_id: -1,
        host: s(""),
        port: -1,
        ..Default::default()
    };
    assert_eq!(
        build(v3.clone(), 3),
        Response::FindCoordinator(expected.clone())
    );
    // v0 has no message field: it keeps its default.
    let expected_v0 = FindCoordinatorResponse {
        error_message: FindCoordinatorResponse::default().error_message,
        ..expected
    };
    assert_eq!(build(v3, 0), Response::FindCoordinator(expected_v0));

    let v4 = FindCoordinatorRequest {
        key_type: 1,
        coordinator_keys: vec![s("tx1"), s("tx2")],
        ..Default::default()
    };
    let coordinator = |key| Coordinator {
        key: s(key),
        node_id: -1,
        host: s(""),
        port: -1,
        error_code: CODE,
        error_message: message(),
        ..Default::default()
    };
    for version in 4..=ApiKey::FindCoordinator.versions().1 {
        let expected = FindCoordinatorResponse {
            coordinators: vec![coordinator("tx1"), coordinator("tx2")],
            ..Default::default()
        };
        let response = build(v4.clone(), version);
        assert_eq!(response, Response::FindCoordinator(expected), "v{version}");
        assert_eq!(response_error_codes(&response), vec![CODE, CODE]);
    }
}

#[test]
fn leave_group_v3_reports_each_member() {
    use leave_group_request::MemberIdentity;
    use leave_group_response::MemberResponse;
    let request = LeaveGroupRequest {
        group_id: s("g"),
        members: vec![
            MemberIdentity {
                member_id: s("m1"),
                ..Default::default()
            },
            MemberIdentity {
                member_id: s("m2"),
                group_instance_id: Some(s("i2")),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let expected = LeaveGroupResponse {
        error_code: CODE,
        members: vec![
            MemberResponse {
                member_id: s("m1"),
                group_instance_id: None,
                error_code: CODE,
                ..Default::default()
            },
            MemberResponse {
                member_id: s("m2"),
                group_instance_id: Some(s("i2")),
                error_code: CODE,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    assert_eq!(build(request, 3), Response::LeaveGroup(expected));
    let v0 = LeaveGroupRequest {
        group_id: s("g"),
        member_id: s("m"),
        ..Default::default()
    };
    assert_eq!(
        build(v0, 0),
        Response::LeaveGroup(LeaveGroupResponse {
            error_code: CODE,
            ..Default::default()
        })
    );
}

#[test]
fn join_group_protocol_name_is_empty_before_v7_and_null_after() {
    let request = JoinGroupRequest {
        group_id: s("g"),
        ..Default::default()
    };
    for version in ApiKey::JoinGroup.versions().0..=ApiKey::JoinGroup.versions().1 {
        let Response::JoinGroup(r) = build(request.clone(), version) else {
            panic!("wrong API")
        };
        assert_eq!(r.error_code, CODE);
        assert_eq!(r.generation_id, -1);
        assert_eq!(r.member_id, s(""));
        assert_eq!(r.leader, s(""));
        assert!(r.members.is_empty());
        let expected = if version >= 7 { None } else { Some(s("")) };
        assert_eq!(r.protocol_name, expected, "v{version}");
    }
}

#[test]
fn api_versions_unsupported_version_leaves_the_key_list_to_the_broker() {
    for version in ApiKey::ApiVersions.versions().0..=ApiKey::ApiVersions.versions().1 {
        let response = error_response(
            &Request::ApiVersions(ApiVersionsRequest::default()),
            version,
            error_codes::UNSUPPORTED_VERSION,
            None,
        );
        round_trip(&response, version);
        let Response::ApiVersions(r) = response else {
            panic!("wrong API")
        };
        assert_eq!(r.error_code, error_codes::UNSUPPORTED_VERSION);
        assert!(r.api_keys.is_empty());
    }
}

#[test]
fn list_offsets_and_delete_records_use_kafka_sentinels() {
    use delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    use list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let request = ListOffsetsRequest {
        topics: vec![ListOffsetsTopic {
            name: s("t"),
            partitions: vec![ListOffsetsPartition {
                partition_index: 7,
                timestamp: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::ListOffsets(r) = build(request, 11) else {
        panic!("wrong API")
    };
    let p = &r.topics[0].partitions[0];
    assert_eq!(
        (
            p.partition_index,
            p.error_code,
            p.offset,
            p.timestamp,
            p.leader_epoch
        ),
        (7, CODE, -1, -1, -1)
    );

    let request = DeleteRecordsRequest {
        topics: vec![DeleteRecordsTopic {
            name: s("t"),
            partitions: vec![DeleteRecordsPartition {
                partition_index: 2,
                offset: 10,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::DeleteRecords(r) = build(request, 2) else {
        panic!("wrong API")
    };
    let p = &r.topics[0].partitions[0];
    assert_eq!(
        (p.partition_index, p.error_code, p.low_watermark),
        (2, CODE, -1)
    );
}

#[test]
fn delete_topics_mirrors_names_then_ids() {
    use delete_topics_request::DeleteTopicState;
    let by_name = DeleteTopicsRequest {
        topic_names: vec![s("a"), s("b")],
        ..Default::default()
    };
    let Response::DeleteTopics(r) = build(by_name, 5) else {
        panic!("wrong API")
    };
    let names: Vec<_> = r.responses.iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, vec![Some(s("a")), Some(s("b"))]);
    assert!(r.responses.iter().all(|t| t.error_message == message()));

    let by_id = DeleteTopicsRequest {
        topics: vec![DeleteTopicState {
            name: None,
            topic_id: Uuid::from_u128(3),
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::DeleteTopics(r) = build(by_id, 6) else {
        panic!("wrong API")
    };
    assert_eq!(r.responses[0].name, None);
    assert_eq!(r.responses[0].topic_id, Uuid::from_u128(3));
    assert_eq!(r.responses[0].error_code, CODE);
}

#[test]
fn group_and_resource_apis_report_each_requested_entity() {
    use describe_configs_request::DescribeConfigsResource;
    // DescribeGroups: unknown state, empty protocol, operations omitted; message from v6.
    let request = DescribeGroupsRequest {
        groups: vec![s("g1"), s("g2")],
        ..Default::default()
    };
    for version in [5, 6] {
        let Response::DescribeGroups(r) = build(request.clone(), version) else {
            panic!("wrong API")
        };
        let ids: Vec<_> = r.groups.iter().map(|g| g.group_id.clone()).collect();
        assert_eq!(ids, vec![s("g1"), s("g2")]);
        for g in &r.groups {
            assert_eq!(g.error_code, CODE);
            assert_eq!(g.group_state, s(""));
            assert_eq!(g.protocol_type, s(""));
            assert!(g.members.is_empty());
            assert_eq!(g.authorized_operations, i32::MIN);
            if version >= 6 {
                assert_eq!(g.error_message, message());
            }
        }
    }

    let request = ConsumerGroupDescribeRequest {
        group_ids: vec![s("cg")],
        ..Default::default()
    };
    let Response::ConsumerGroupDescribe(r) = build(request, 1) else {
        panic!("wrong API")
    };
    assert_eq!(r.groups.len(), 1);
    assert_eq!(
        (
            &r.groups[0].group_id,
            r.groups[0].error_code,
            &r.groups[0].error_message
        ),
        (&s("cg"), CODE, &message())
    );

    let request = DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type: 2,
            resource_name: s("topic"),
            configuration_keys: None,
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::DescribeConfigs(r) = build(request, 4) else {
        panic!("wrong API")
    };
    let result = &r.results[0];
    assert_eq!(
        (
            result.resource_type,
            &result.resource_name,
            result.error_code,
            &result.error_message
        ),
        (2, &s("topic"), CODE, &message())
    );
    assert!(result.configs.is_empty());
}
