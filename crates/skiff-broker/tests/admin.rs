//! Admin APIs over TCP against a real broker: CreateTopics, DeleteTopics, CreatePartitions,
//! DescribeConfigs, IncrementalAlterConfigs, DeleteRecords, InitProducerId, DescribeCluster,
//! every advertised version, and what survives a restart.

mod common;

use common::{Client, TestBroker, batch};
use skiff_protocol::generated::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use skiff_protocol::generated::create_partitions_response::CreatePartitionsTopicResult;
use skiff_protocol::generated::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use skiff_protocol::generated::create_topics_response::CreatableTopicResult;
use skiff_protocol::generated::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use skiff_protocol::generated::delete_records_response::DeleteRecordsPartitionResult;
use skiff_protocol::generated::delete_topics_request::DeleteTopicState;
use skiff_protocol::generated::delete_topics_response::DeletableTopicResult;
use skiff_protocol::generated::describe_configs_request::DescribeConfigsResource;
use skiff_protocol::generated::describe_configs_response::DescribeConfigsResult;
use skiff_protocol::generated::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use skiff_protocol::generated::incremental_alter_configs_response::AlterConfigsResourceResponse;
use skiff_protocol::generated::init_producer_id_response::InitProducerIdResponse;
use skiff_protocol::generated::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use skiff_protocol::generated::metadata_request::MetadataRequestTopic;
use skiff_protocol::generated::metadata_response::MetadataResponseTopic;
use skiff_protocol::generated::produce_request::{PartitionProduceData, TopicProduceData};
use skiff_protocol::generated::{
    ApiVersionsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest,
    DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest, InitProducerIdRequest, ListOffsetsRequest, MetadataRequest,
    ProduceRequest,
};
use skiff_protocol::{ApiKey, Response, Uuid, error_codes};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_DEFAULT: i8 = 5;
const SET: i8 = 0;
const DELETE: i8 = 1;

// ----- helpers -------------------------------------------------------------------------------

fn new_topic(name: &str, partitions: i32, replication_factor: i16) -> CreatableTopic {
    CreatableTopic {
        name: name.into(),
        num_partitions: partitions,
        replication_factor,
        ..Default::default()
    }
}

fn with_config(mut topic: CreatableTopic, name: &str, value: Option<&str>) -> CreatableTopic {
    topic.configs.push(CreatableTopicConfig {
        name: name.into(),
        value: value.map(Into::into),
        ..Default::default()
    });
    topic
}

fn with_assignments(mut topic: CreatableTopic, replicas: &[(i32, &[i32])]) -> CreatableTopic {
    topic.assignments = replicas
        .iter()
        .map(|(index, ids)| CreatableReplicaAssignment {
            partition_index: *index,
            broker_ids: ids.to_vec(),
            ..Default::default()
        })
        .collect();
    topic
}

async fn create_many(
    c: &mut Client,
    version: i16,
    topics: Vec<CreatableTopic>,
    validate_only: bool,
) -> Vec<CreatableTopicResult> {
    let request = CreateTopicsRequest {
        topics,
        timeout_ms: 5000,
        validate_only,
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::CreateTopics(r) => r.topics,
        other => panic!("unexpected {other:?}"),
    }
}

async fn create(c: &mut Client, version: i16, topic: CreatableTopic) -> CreatableTopicResult {
    let mut results = create_many(c, version, vec![topic], false).await;
    assert_eq!(results.len(), 1);
    results.remove(0)
}

/// Metadata v12 for one topic, without auto-creation.
async fn metadata(c: &mut Client, name: &str) -> MetadataResponseTopic {
    let request = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            name: Some(name.into()),
            ..Default::default()
        }]),
        allow_auto_topic_creation: false,
        ..Default::default()
    };
    match c.call(request, 12).await {
        Response::Metadata(mut m) => m.topics.remove(0),
        other => panic!("unexpected {other:?}"),
    }
}

async fn describe(
    c: &mut Client,
    version: i16,
    resource_type: i8,
    name: &str,
    keys: Option<&[&str]>,
    include_synonyms: bool,
) -> DescribeConfigsResult {
    let request = DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type,
            resource_name: name.into(),
            configuration_keys: keys.map(|k| k.iter().map(|s| (*s).into()).collect()),
            ..Default::default()
        }],
        include_synonyms,
        include_documentation: true,
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::DescribeConfigs(mut r) => {
            assert_eq!(r.results.len(), 1);
            r.results.remove(0)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// (value, source) of one key of a resource, via DescribeConfigs v4.
async fn config_value(
    c: &mut Client,
    resource_type: i8,
    name: &str,
    key: &str,
) -> (Option<String>, i8) {
    let result = describe(c, 4, resource_type, name, Some(&[key]), false).await;
    assert_eq!(result.error_code, 0, "{result:?}");
    assert_eq!(result.configs.len(), 1, "{result:?}");
    let entry = &result.configs[0];
    (
        entry.value.as_ref().map(|v| v.to_string()),
        entry.config_source,
    )
}

fn resource(
    resource_type: i8,
    name: &str,
    ops: &[(&str, i8, Option<&str>)],
) -> AlterConfigsResource {
    AlterConfigsResource {
        resource_type,
        resource_name: name.into(),
        configs: ops
            .iter()
            .map(|(key, op, value)| AlterableConfig {
                name: (*key).into(),
                config_operation: *op,
                value: value.map(Into::into),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

async fn alter(
    c: &mut Client,
    version: i16,
    resources: Vec<AlterConfigsResource>,
    validate_only: bool,
) -> Vec<AlterConfigsResourceResponse> {
    let request = IncrementalAlterConfigsRequest {
        resources,
        validate_only,
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::IncrementalAlterConfigs(r) => r.responses,
        other => panic!("unexpected {other:?}"),
    }
}

async fn alter_one(
    c: &mut Client,
    version: i16,
    resource: AlterConfigsResource,
    validate_only: bool,
) -> i16 {
    let responses = alter(c, version, vec![resource], validate_only).await;
    assert_eq!(responses.len(), 1);
    responses[0].error_code
}

async fn delete_names(c: &mut Client, version: i16, names: &[&str]) -> Vec<DeletableTopicResult> {
    let request = if version >= 6 {
        DeleteTopicsRequest {
            topics: names
                .iter()
                .map(|n| DeleteTopicState {
                    name: Some((*n).into()),
                    ..Default::default()
                })
                .collect(),
            timeout_ms: 5000,
            ..Default::default()
        }
    } else {
        DeleteTopicsRequest {
            topic_names: names.iter().map(|n| (*n).into()).collect(),
            timeout_ms: 5000,
            ..Default::default()
        }
    };
    delete(c, version, request).await
}

async fn delete(
    c: &mut Client,
    version: i16,
    request: DeleteTopicsRequest,
) -> Vec<DeletableTopicResult> {
    match c.call(request, version).await {
        Response::DeleteTopics(r) => r.responses,
        other => panic!("unexpected {other:?}"),
    }
}

async fn grow(
    c: &mut Client,
    version: i16,
    name: &str,
    count: i32,
    assignments: Option<Vec<Vec<i32>>>,
    validate_only: bool,
) -> CreatePartitionsTopicResult {
    let request = CreatePartitionsRequest {
        topics: vec![CreatePartitionsTopic {
            name: name.into(),
            count,
            assignments: assignments.map(|a| {
                a.into_iter()
                    .map(|broker_ids| CreatePartitionsAssignment {
                        broker_ids,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        }],
        timeout_ms: 5000,
        validate_only,
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::CreatePartitions(mut r) => r.results.remove(0),
        other => panic!("unexpected {other:?}"),
    }
}

async fn produce_one(c: &mut Client, topic: &str, value: &[u8]) {
    let request = ProduceRequest {
        acks: -1,
        timeout_ms: 5000,
        topic_data: vec![TopicProduceData {
            name: topic.into(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(batch(&[value])),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, 9).await {
        Response::Produce(r) => {
            assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        }
        other => panic!("unexpected {other:?}"),
    }
}

async fn earliest_offset(c: &mut Client, topic: &str) -> i64 {
    let request = ListOffsetsRequest {
        replica_id: -1,
        topics: vec![ListOffsetsTopic {
            name: topic.into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: 0,
                timestamp: -2,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, 7).await {
        Response::ListOffsets(r) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0);
            p.offset
        }
        other => panic!("unexpected {other:?}"),
    }
}

async fn delete_records(
    c: &mut Client,
    version: i16,
    topic: &str,
    partition: i32,
    offset: i64,
) -> DeleteRecordsPartitionResult {
    let request = DeleteRecordsRequest {
        topics: vec![DeleteRecordsTopic {
            name: topic.into(),
            partitions: vec![DeleteRecordsPartition {
                partition_index: partition,
                offset,
                ..Default::default()
            }],
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::DeleteRecords(mut r) => r.topics.remove(0).partitions.remove(0),
        other => panic!("unexpected {other:?}"),
    }
}

async fn init_pid(
    c: &mut Client,
    version: i16,
    transactional_id: Option<&str>,
    producer_id: i64,
    producer_epoch: i16,
) -> InitProducerIdResponse {
    let request = InitProducerIdRequest {
        transactional_id: transactional_id.map(Into::into),
        transaction_timeout_ms: 60_000,
        producer_id,
        producer_epoch,
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::InitProducerId(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

// ----- tests ---------------------------------------------------------------------------------

#[tokio::test]
async fn api_versions_advertises_the_admin_apis() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let Response::ApiVersions(r) = c.call(ApiVersionsRequest::default(), 3).await else {
        panic!("not ApiVersions");
    };
    let expected = [
        (ApiKey::CreateTopics, 2, 7),
        (ApiKey::DeleteTopics, 1, 6),
        (ApiKey::DeleteRecords, 0, 2),
        (ApiKey::InitProducerId, 0, 5),
        (ApiKey::DescribeConfigs, 1, 4),
        (ApiKey::CreatePartitions, 0, 3),
        (ApiKey::IncrementalAlterConfigs, 0, 1),
        (ApiKey::AlterConfigs, 0, 2),
        (ApiKey::OffsetForLeaderEpoch, 2, 4),
        (ApiKey::DescribeTopicPartitions, 0, 0),
        (ApiKey::ElectLeaders, 0, 2),
        (ApiKey::AlterPartitionReassignments, 0, 1),
        (ApiKey::ListPartitionReassignments, 0, 0),
        (ApiKey::UpdateFeatures, 0, 2),
        (ApiKey::DescribeCluster, 0, 2),
        (ApiKey::DescribeLogDirs, 1, 4),
    ];
    for (key, min, max) in expected {
        let entry = r
            .api_keys
            .iter()
            .find(|k| k.api_key == key.key())
            .unwrap_or_else(|| panic!("{key:?} advertised"));
        assert_eq!(
            (entry.min_version, entry.max_version),
            (min, max),
            "{key:?}"
        );
    }
    tb.stop().await;
}

#[tokio::test]
async fn create_topics_every_version() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    for v in 2..=7i16 {
        let name = format!("orders-v{v}");

        // validate_only: answered like a creation, nothing created.
        let topic = with_config(new_topic(&name, 3, -1), "retention.ms", Some("60000"));
        let r = create_many(&mut c, v, vec![topic.clone()], true).await;
        assert_eq!(r[0].error_code, 0, "v{v} {r:?}");
        assert!(r[0].topic_id.is_zero());
        if v >= 5 {
            assert_eq!(r[0].num_partitions, 3);
            assert_eq!(r[0].replication_factor, 1);
        }
        assert_eq!(
            metadata(&mut c, &name).await.error_code,
            error_codes::UNKNOWN_TOPIC_OR_PARTITION
        );

        // The real thing.
        let r = create(&mut c, v, topic.clone()).await;
        assert_eq!(r.error_code, 0, "v{v} {r:?}");
        assert_eq!(r.error_message, None);
        let m = metadata(&mut c, &name).await;
        assert_eq!(m.error_code, 0);
        assert_eq!(m.partitions.len(), 3);
        assert!(!m.topic_id.is_zero());
        if v >= 5 {
            assert_eq!(r.num_partitions, 3);
            assert_eq!(r.replication_factor, 1);
            let configs = r.configs.as_ref().expect("configs");
            let retention = configs
                .iter()
                .find(|e| &*e.name == "retention.ms")
                .expect("retention.ms");
            assert_eq!(retention.value.as_deref(), Some("60000"));
            assert_eq!(retention.config_source, SOURCE_DYNAMIC_TOPIC);
            assert!(!retention.read_only && !retention.is_sensitive);
            let segment = configs
                .iter()
                .find(|e| &*e.name == "segment.bytes")
                .expect("segment.bytes");
            assert_eq!(segment.config_source, SOURCE_DEFAULT);
        }
        if v >= 7 {
            assert_eq!(r.topic_id, m.topic_id);
        }

        // Again: already exists.
        let r = create(&mut c, v, new_topic(&name, 1, -1)).await;
        assert_eq!(r.error_code, error_codes::TOPIC_ALREADY_EXISTS);
        assert!(r.error_message.is_some());

        // A name twice in one request: one INVALID_REQUEST answer, nothing created; the rest go on.
        let dup = format!("dup-v{v}");
        let fine = format!("fine-v{v}");
        let r = create_many(
            &mut c,
            v,
            vec![
                new_topic(&dup, 1, -1),
                new_topic(&fine, 1, -1),
                new_topic(&dup, 2, -1),
            ],
            false,
        )
        .await;
        assert_eq!(r.len(), 2, "{r:?}");
        let dup_result = r.iter().find(|t| *t.name == *dup).expect("dup answered");
        assert_eq!(dup_result.error_code, error_codes::INVALID_REQUEST);
        assert_eq!(
            dup_result.error_message.as_deref(),
            Some("Duplicate topic name.")
        );
        let fine_result = r.iter().find(|t| *t.name == *fine).expect("fine answered");
        assert_eq!(fine_result.error_code, 0);
        assert_eq!(
            metadata(&mut c, &dup).await.error_code,
            error_codes::UNKNOWN_TOPIC_OR_PARTITION
        );

        // Defaults: -1/-1 is num.partitions (1) and replication factor 1.
        let r = create(&mut c, v, new_topic(&format!("defaults-v{v}"), -1, -1)).await;
        assert_eq!(r.error_code, 0);
        if v >= 5 {
            assert_eq!((r.num_partitions, r.replication_factor), (1, 1));
        }
        // Replication factor 1 explicitly is fine too.
        let r = create(&mut c, v, new_topic(&format!("rf1-v{v}"), 2, 1)).await;
        assert_eq!(r.error_code, 0);

        // Invalid requests, each answered per topic.
        let cases: Vec<(CreatableTopic, i16)> = vec![
            (
                new_topic("bad name!", 1, -1),
                error_codes::INVALID_TOPIC_EXCEPTION,
            ),
            (new_topic("..", 1, -1), error_codes::INVALID_TOPIC_EXCEPTION),
            (
                new_topic(&"x".repeat(250), 1, -1),
                error_codes::INVALID_TOPIC_EXCEPTION,
            ),
            (
                new_topic("__cluster_metadata", 1, -1),
                error_codes::INVALID_REQUEST,
            ),
            (
                new_topic(&format!("rf3-v{v}"), 1, 3),
                error_codes::INVALID_REPLICATION_FACTOR,
            ),
            (
                new_topic(&format!("rf0-v{v}"), 1, 0),
                error_codes::INVALID_REPLICATION_FACTOR,
            ),
            (
                new_topic(&format!("p0-v{v}"), 0, -1),
                error_codes::INVALID_PARTITIONS,
            ),
            (
                with_config(
                    new_topic(&format!("unknown-cfg-v{v}"), 1, -1),
                    "no.such.config",
                    Some("1"),
                ),
                error_codes::INVALID_CONFIG,
            ),
            (
                with_config(
                    new_topic(&format!("bad-cfg-v{v}"), 1, -1),
                    "retention.ms",
                    Some("soon"),
                ),
                error_codes::INVALID_CONFIG,
            ),
            (
                with_config(
                    new_topic(&format!("null-cfg-v{v}"), 1, -1),
                    "retention.ms",
                    None,
                ),
                error_codes::INVALID_CONFIG,
            ),
            (
                with_assignments(
                    new_topic(&format!("other-broker-v{v}"), -1, -1),
                    &[(0, &[2])],
                ),
                INVALID_REPLICA_ASSIGNMENT,
            ),
            (
                with_assignments(new_topic(&format!("twice-v{v}"), -1, -1), &[(0, &[1, 1])]),
                INVALID_REPLICA_ASSIGNMENT,
            ),
            (
                with_assignments(new_topic(&format!("empty-v{v}"), -1, -1), &[(0, &[])]),
                INVALID_REPLICA_ASSIGNMENT,
            ),
            (
                with_assignments(
                    new_topic(&format!("gap-v{v}"), -1, -1),
                    &[(0, &[1]), (2, &[1])],
                ),
                INVALID_REPLICA_ASSIGNMENT,
            ),
            (
                with_assignments(
                    new_topic(&format!("assign-count-v{v}"), 2, -1),
                    &[(0, &[1])],
                ),
                error_codes::INVALID_REQUEST,
            ),
        ];
        for (topic, code) in cases {
            let name = topic.name.clone();
            let r = create(&mut c, v, topic).await;
            assert_eq!(r.error_code, code, "v{v} {name}: {r:?}");
            assert!(r.error_message.is_some(), "v{v} {name}: a message");
            assert!(r.topic_id.is_zero());
            if code != error_codes::INVALID_TOPIC_EXCEPTION {
                assert_eq!(
                    metadata(&mut c, &name).await.error_code,
                    error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                    "v{v} {name} not created"
                );
            }
        }

        // A manual assignment on this node: partitions inferred from it.
        let manual = format!("manual-v{v}");
        let r = create(
            &mut c,
            v,
            with_assignments(new_topic(&manual, -1, -1), &[(1, &[1]), (0, &[1])]),
        )
        .await;
        assert_eq!(r.error_code, 0, "{r:?}");
        assert_eq!(metadata(&mut c, &manual).await.partitions.len(), 2);
    }
    tb.stop().await;
}

#[tokio::test]
async fn describe_configs_every_version() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let r = create(
        &mut c,
        7,
        with_config(new_topic("described", 1, -1), "retention.ms", Some("60000")),
    )
    .await;
    assert_eq!(r.error_code, 0);

    for v in 1..=4i16 {
        // A topic, all keys, with synonyms.
        let result = describe(&mut c, v, TOPIC, "described", None, true).await;
        assert_eq!(result.error_code, 0, "v{v} {result:?}");
        assert_eq!(result.error_message, None);
        assert_eq!(
            (result.resource_type, &*result.resource_name),
            (TOPIC, "described")
        );
        assert!(result.configs.len() > 10, "every topic key");
        let retention = result
            .configs
            .iter()
            .find(|e| &*e.name == "retention.ms")
            .expect("retention.ms");
        assert_eq!(retention.value.as_deref(), Some("60000"));
        assert_eq!(retention.config_source, SOURCE_DYNAMIC_TOPIC);
        assert!(!retention.read_only);
        assert_eq!(&*retention.synonyms[0].name, "retention.ms");
        assert_eq!(retention.synonyms[0].source, SOURCE_DYNAMIC_TOPIC);
        assert!(
            retention
                .synonyms
                .iter()
                .any(|s| &*s.name == "log.retention.hours" && s.source == SOURCE_DEFAULT),
            "{retention:?}"
        );
        if v >= 3 {
            assert_eq!(retention.documentation, None);
            assert_eq!(retention.config_type, 5, "LONG");
        }
        let segment = result
            .configs
            .iter()
            .find(|e| &*e.name == "segment.bytes")
            .expect("segment.bytes");
        assert_eq!(segment.config_source, SOURCE_DEFAULT);
        assert_eq!(segment.value.as_deref(), Some("1073741824"));

        // Without synonyms; a key filter (unknown keys are simply absent).
        let result = describe(
            &mut c,
            v,
            TOPIC,
            "described",
            Some(&["retention.ms", "cleanup.policy", "no.such.key"]),
            false,
        )
        .await;
        assert_eq!(result.error_code, 0);
        let mut names: Vec<&str> = result.configs.iter().map(|e| &*e.name).collect();
        names.sort();
        assert_eq!(names, ["cleanup.policy", "retention.ms"]);
        assert!(result.configs.iter().all(|e| e.synonyms.is_empty()));
        // An empty key list means every key, as in Kafka.
        let result = describe(&mut c, v, TOPIC, "described", Some(&[]), false).await;
        assert!(result.configs.len() > 10);

        // Unknown and invalid topics.
        let result = describe(&mut c, v, TOPIC, "nope", None, false).await;
        assert_eq!(result.error_code, error_codes::UNKNOWN_TOPIC_OR_PARTITION);
        assert!(result.configs.is_empty());
        let result = describe(&mut c, v, TOPIC, "bad name!", None, false).await;
        assert_eq!(result.error_code, error_codes::INVALID_TOPIC_EXCEPTION);

        // This broker: every broker key; read-only ones flagged.
        let result = describe(&mut c, v, BROKER, "1", None, true).await;
        assert_eq!(result.error_code, 0, "{result:?}");
        let partitions = result
            .configs
            .iter()
            .find(|e| &*e.name == "num.partitions")
            .expect("num.partitions");
        assert_eq!(partitions.value.as_deref(), Some("1"));
        assert!(partitions.read_only);
        let log_retention = result
            .configs
            .iter()
            .find(|e| &*e.name == "log.retention.ms")
            .expect("log.retention.ms");
        assert!(!log_retention.read_only);
        // The cluster default scope lists only what is set there (nothing yet).
        let result = describe(&mut c, v, BROKER, "", None, true).await;
        assert_eq!(result.error_code, 0);
        assert!(result.configs.is_empty(), "{result:?}");
        // Another broker, or not a number.
        for name in ["2", "one"] {
            let result = describe(&mut c, v, BROKER, name, None, false).await;
            assert_eq!(result.error_code, error_codes::INVALID_REQUEST, "{name}");
            assert!(result.error_message.is_some());
        }
        // Loggers: none to describe on this node; the node ID is required.
        let result = describe(&mut c, v, BROKER_LOGGER, "1", None, false).await;
        assert_eq!(result.error_code, 0);
        assert!(result.configs.is_empty());
        let result = describe(&mut c, v, BROKER_LOGGER, "", None, false).await;
        assert_eq!(result.error_code, error_codes::INVALID_REQUEST);
        // Client metrics subscriptions (type 16) are supported: an unknown one is not found.
        let result = describe(&mut c, v, 16, "sub", None, false).await;
        assert_eq!(result.error_code, error_codes::RESOURCE_NOT_FOUND);
        // Unsupported resource types (GROUP = 3).
        let result = describe(&mut c, v, 3, "sub", None, false).await;
        assert_eq!(result.error_code, error_codes::INVALID_REQUEST);
    }
    tb.stop().await;
}

#[tokio::test]
async fn incremental_alter_configs_every_version() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    for name in ["altered", "plain"] {
        assert_eq!(
            create(&mut c, 7, new_topic(name, 2, -1)).await.error_code,
            0
        );
    }
    let log_config = |tb: &TestBroker, topic: &str| {
        let t = tb.broker().topic_by_name(topic).expect("topic");
        t.partitions
            .iter()
            .map(|p| p.log_config())
            .collect::<Vec<_>>()
    };

    for v in 0..=1i16 {
        let retention = format!("{}", 120_000 + i64::from(v));
        // validate_only changes nothing.
        let set = resource(TOPIC, "altered", &[("retention.ms", SET, Some(&retention))]);
        assert_eq!(alter_one(&mut c, v, set.clone(), true).await, 0);
        assert_eq!(
            config_value(&mut c, TOPIC, "altered", "retention.ms").await,
            (Some("604800000".into()), SOURCE_DEFAULT)
        );
        // Applied: described, persisted, and the partition logs use it.
        assert_eq!(alter_one(&mut c, v, set, false).await, 0);
        assert_eq!(
            config_value(&mut c, TOPIC, "altered", "retention.ms").await,
            (Some(retention.clone()), SOURCE_DYNAMIC_TOPIC)
        );
        let expected_ms = 120_000 + u64::try_from(v).unwrap();
        for config in log_config(&tb, "altered") {
            assert_eq!(config.retention_ms, Some(expected_ms));
        }
        let seg = resource(TOPIC, "altered", &[("segment.bytes", SET, Some("1048576"))]);
        assert_eq!(alter_one(&mut c, v, seg, false).await, 0);
        for config in log_config(&tb, "altered") {
            assert_eq!(config.segment_bytes, 1_048_576);
        }
        // DELETE returns to the default.
        let del = resource(
            TOPIC,
            "altered",
            &[
                ("retention.ms", DELETE, None),
                ("segment.bytes", DELETE, None),
            ],
        );
        assert_eq!(alter_one(&mut c, v, del, false).await, 0);
        assert_eq!(
            config_value(&mut c, TOPIC, "altered", "retention.ms").await,
            (Some("604800000".into()), SOURCE_DEFAULT)
        );
        for config in log_config(&tb, "altered") {
            assert_eq!(config.retention_ms, Some(604_800_000));
            assert_eq!(config.segment_bytes, 1_073_741_824);
        }

        // Per-resource errors.
        let cases = [
            (
                resource(TOPIC, "nope", &[("retention.ms", SET, Some("1"))]),
                error_codes::UNKNOWN_TOPIC_OR_PARTITION,
            ),
            (
                resource(TOPIC, "altered", &[("retention.ms", SET, Some("soon"))]),
                error_codes::INVALID_CONFIG,
            ),
            (
                resource(TOPIC, "altered", &[("no.such.key", SET, Some("1"))]),
                error_codes::INVALID_CONFIG,
            ),
            (
                resource(TOPIC, "altered", &[("retention.ms", 9, Some("1"))]),
                error_codes::INVALID_REQUEST,
            ),
            (
                resource(TOPIC, "altered", &[("retention.ms", SET, None)]),
                error_codes::INVALID_REQUEST,
            ),
            (
                resource(
                    TOPIC,
                    "altered",
                    &[
                        ("retention.ms", SET, Some("1")),
                        ("retention.ms", SET, Some("2")),
                    ],
                ),
                error_codes::INVALID_REQUEST,
            ),
            (
                resource(BROKER, "7", &[("log.retention.ms", SET, Some("1000"))]),
                error_codes::INVALID_REQUEST,
            ),
            (
                resource(BROKER, "1", &[("num.partitions", SET, Some("3"))]),
                error_codes::INVALID_CONFIG,
            ),
            (
                resource(BROKER_LOGGER, "1", &[("kafka", SET, Some("DEBUG"))]),
                error_codes::INVALID_CONFIG,
            ),
            (
                resource(16, "x", &[("bogus", SET, Some("1"))]),
                error_codes::INVALID_REQUEST,
            ),
            (resource(3, "x", &[]), error_codes::INVALID_REQUEST),
        ];
        for (r, code) in cases {
            let responses = alter(&mut c, v, vec![r.clone()], false).await;
            assert_eq!(responses[0].error_code, code, "v{v} {r:?}");
            assert!(responses[0].error_message.is_some());
            assert_eq!(responses[0].resource_type, r.resource_type);
            assert_eq!(responses[0].resource_name, r.resource_name);
        }
        assert_eq!(
            config_value(&mut c, TOPIC, "altered", "retention.ms")
                .await
                .1,
            SOURCE_DEFAULT,
            "failed alters changed nothing"
        );
        // One resource twice: both answered INVALID_REQUEST; the others in the request apply.
        let twice = resource(TOPIC, "altered", &[("retention.ms", SET, Some("5000"))]);
        let other = resource(
            TOPIC,
            "plain",
            &[("cleanup.policy", SET, Some("compact,delete"))],
        );
        let responses = alter(&mut c, v, vec![twice.clone(), other, twice], false).await;
        let codes: Vec<i16> = responses.iter().map(|r| r.error_code).collect();
        assert_eq!(
            codes,
            [
                error_codes::INVALID_REQUEST,
                0,
                error_codes::INVALID_REQUEST
            ]
        );
        assert_eq!(
            config_value(&mut c, TOPIC, "plain", "cleanup.policy").await,
            (Some("compact,delete".into()), SOURCE_DYNAMIC_TOPIC)
        );
        let reset = resource(TOPIC, "plain", &[("cleanup.policy", DELETE, None)]);
        assert_eq!(alter_one(&mut c, v, reset, false).await, 0);
    }

    // Broker level: this broker's dynamic log.retention.ms reaches topics without an override.
    let set = resource(BROKER, "1", &[("log.retention.ms", SET, Some("3600000"))]);
    assert_eq!(alter_one(&mut c, 1, set.clone(), true).await, 0);
    assert_eq!(
        config_value(&mut c, TOPIC, "plain", "retention.ms").await.1,
        SOURCE_DEFAULT
    );
    assert_eq!(alter_one(&mut c, 1, set, false).await, 0);
    assert_eq!(
        config_value(&mut c, TOPIC, "plain", "retention.ms").await,
        (Some("3600000".into()), SOURCE_DYNAMIC_BROKER)
    );
    assert_eq!(
        config_value(&mut c, BROKER, "1", "log.retention.ms").await,
        (Some("3600000".into()), SOURCE_DYNAMIC_BROKER)
    );
    for config in log_config(&tb, "plain") {
        assert_eq!(config.retention_ms, Some(3_600_000));
    }
    // The cluster-wide default scope ("" name) is listed on its own.
    let set = resource(BROKER, "", &[("log.segment.bytes", SET, Some("2097152"))]);
    assert_eq!(alter_one(&mut c, 0, set, false).await, 0);
    let result = describe(&mut c, 4, BROKER, "", None, true).await;
    assert_eq!(result.configs.len(), 1, "{result:?}");
    assert_eq!(&*result.configs[0].name, "log.segment.bytes");
    assert_eq!(
        result.configs[0].config_source,
        SOURCE_DYNAMIC_DEFAULT_BROKER
    );
    assert_eq!(
        config_value(&mut c, TOPIC, "plain", "segment.bytes").await,
        (Some("2097152".into()), SOURCE_DYNAMIC_DEFAULT_BROKER)
    );
    for config in log_config(&tb, "plain") {
        assert_eq!(config.segment_bytes, 2_097_152);
    }
    tb.stop().await;
}

#[tokio::test]
async fn create_partitions_every_version() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    for v in 0..=3i16 {
        let name = format!("grow-v{v}");
        assert_eq!(
            create(&mut c, 7, new_topic(&name, 1, -1)).await.error_code,
            0
        );

        let r = grow(&mut c, v, &name, 3, None, true).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        assert_eq!(metadata(&mut c, &name).await.partitions.len(), 1);

        let r = grow(&mut c, v, &name, 3, None, false).await;
        assert_eq!((r.error_code, r.error_message.clone()), (0, None), "{r:?}");
        let m = metadata(&mut c, &name).await;
        assert_eq!(m.partitions.len(), 3);
        assert_eq!(m.partitions[2].partition_index, 2);
        assert_eq!(
            tb.broker()
                .topic_by_name(&name)
                .expect("topic")
                .partitions
                .len(),
            3
        );

        for count in [3, 2] {
            let r = grow(&mut c, v, &name, count, None, false).await;
            assert_eq!(r.error_code, error_codes::INVALID_PARTITIONS, "{count}");
            assert!(r.error_message.is_some());
        }
        let r = grow(&mut c, v, "nope", 3, None, false).await;
        assert_eq!(r.error_code, error_codes::UNKNOWN_TOPIC_OR_PARTITION);

        // Manual assignments: this node only, one per new partition.
        let r = grow(&mut c, v, &name, 5, Some(vec![vec![1], vec![2]]), false).await;
        assert_eq!(r.error_code, INVALID_REPLICA_ASSIGNMENT);
        let r = grow(&mut c, v, &name, 5, Some(vec![vec![1]]), false).await;
        assert_eq!(r.error_code, INVALID_REPLICA_ASSIGNMENT);
        let r = grow(&mut c, v, &name, 5, Some(vec![vec![1], vec![1]]), false).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        assert_eq!(metadata(&mut c, &name).await.partitions.len(), 5);

        // The same topic twice in one request.
        let request = CreatePartitionsRequest {
            topics: vec![
                CreatePartitionsTopic {
                    name: name.as_str().into(),
                    count: 7,
                    ..Default::default()
                },
                CreatePartitionsTopic {
                    name: name.as_str().into(),
                    count: 8,
                    ..Default::default()
                },
            ],
            timeout_ms: 5000,
            ..Default::default()
        };
        let Response::CreatePartitions(r) = c.call(request, v).await else {
            panic!("not CreatePartitions");
        };
        assert_eq!(r.results.len(), 1);
        assert_eq!(r.results[0].error_code, error_codes::INVALID_REQUEST);
        assert_eq!(metadata(&mut c, &name).await.partitions.len(), 5);
    }
    tb.stop().await;
}

#[tokio::test]
async fn delete_topics_every_version() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    for v in 1..=6i16 {
        let name = format!("doomed-v{v}");
        let created = create(&mut c, 7, new_topic(&name, 2, -1)).await;
        assert_eq!(created.error_code, 0);
        produce_one(&mut c, &name, b"bye").await;
        assert!(tb.data_dir().join(format!("{name}-0")).exists());

        let r = delete_names(&mut c, v, &[&name]).await;
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].error_code, 0, "v{v} {r:?}");
        assert_eq!(r[0].name.as_deref(), Some(name.as_str()));
        if v >= 6 {
            assert_eq!(r[0].topic_id, created.topic_id);
        }
        assert_eq!(
            metadata(&mut c, &name).await.error_code,
            error_codes::UNKNOWN_TOPIC_OR_PARTITION
        );
        assert!(!tb.data_dir().join(format!("{name}-0")).exists());
        assert!(!tb.data_dir().join(format!("{name}-1")).exists());

        // Gone, and a duplicated name is rejected.
        let r = delete_names(&mut c, v, &[&name]).await;
        assert_eq!(r[0].error_code, error_codes::UNKNOWN_TOPIC_OR_PARTITION);
        let twice = format!("twice-v{v}");
        assert_eq!(
            create(&mut c, 7, new_topic(&twice, 1, -1)).await.error_code,
            0
        );
        let r = delete_names(&mut c, v, &[&twice, &twice]).await;
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].error_code, error_codes::INVALID_REQUEST);
        assert_eq!(metadata(&mut c, &twice).await.error_code, 0, "not deleted");

        // A re-created topic gets a new ID.
        let again = create(&mut c, 7, new_topic(&name, 1, -1)).await;
        assert_eq!(again.error_code, 0);
        assert_ne!(again.topic_id, created.topic_id);
    }

    // v6: by topic ID.
    let created = create(&mut c, 7, new_topic("by-id", 1, -1)).await;
    let by_id = |id: Uuid| DeleteTopicsRequest {
        topics: vec![DeleteTopicState {
            name: None,
            topic_id: id,
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    let r = delete(&mut c, 6, by_id(created.topic_id)).await;
    assert_eq!(r[0].error_code, 0, "{r:?}");
    assert_eq!(r[0].name.as_deref(), Some("by-id"));
    assert_eq!(r[0].topic_id, created.topic_id);
    assert_eq!(
        metadata(&mut c, "by-id").await.error_code,
        error_codes::UNKNOWN_TOPIC_OR_PARTITION
    );
    let r = delete(&mut c, 6, by_id(created.topic_id)).await;
    assert_eq!(r[0].error_code, error_codes::UNKNOWN_TOPIC_ID);
    assert_eq!(r[0].name, None);
    // Both name and ID, or neither: INVALID_REQUEST.
    let created = create(&mut c, 7, new_topic("named-and-id", 1, -1)).await;
    let both = DeleteTopicsRequest {
        topics: vec![
            DeleteTopicState {
                name: Some("named-and-id".into()),
                topic_id: created.topic_id,
                ..Default::default()
            },
            DeleteTopicState::default(),
        ],
        timeout_ms: 5000,
        ..Default::default()
    };
    let r = delete(&mut c, 6, both).await;
    let codes: Vec<i16> = r.iter().map(|t| t.error_code).collect();
    assert_eq!(
        codes,
        [error_codes::INVALID_REQUEST, error_codes::INVALID_REQUEST]
    );
    assert_eq!(metadata(&mut c, "named-and-id").await.error_code, 0);
    tb.stop().await;
}

#[tokio::test]
async fn delete_records_every_version() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    for v in 0..=2i16 {
        let name = format!("trimmed-v{v}");
        assert_eq!(
            create(&mut c, 7, new_topic(&name, 1, -1)).await.error_code,
            0
        );
        for i in 0..5u8 {
            produce_one(&mut c, &name, &[i]).await;
        }
        assert_eq!(earliest_offset(&mut c, &name).await, 0);

        let r = delete_records(&mut c, v, &name, 0, 2).await;
        assert_eq!((r.error_code, r.low_watermark), (0, 2), "{r:?}");
        assert_eq!(earliest_offset(&mut c, &name).await, 2);
        // Below the current start: no change.
        let r = delete_records(&mut c, v, &name, 0, 1).await;
        assert_eq!((r.error_code, r.low_watermark), (0, 2));
        // Past the high watermark, or negative: out of range.
        for offset in [6, -2] {
            let r = delete_records(&mut c, v, &name, 0, offset).await;
            assert_eq!(r.error_code, error_codes::OFFSET_OUT_OF_RANGE, "{offset}");
            assert_eq!(r.low_watermark, -1);
        }
        assert_eq!(earliest_offset(&mut c, &name).await, 2);
        // -1: up to the high watermark.
        let r = delete_records(&mut c, v, &name, 0, -1).await;
        assert_eq!((r.error_code, r.low_watermark), (0, 5));
        assert_eq!(earliest_offset(&mut c, &name).await, 5);

        let r = delete_records(&mut c, v, &name, 1, 0).await;
        assert_eq!(r.error_code, error_codes::UNKNOWN_TOPIC_OR_PARTITION);
        let r = delete_records(&mut c, v, "nope", 0, 0).await;
        assert_eq!(r.error_code, error_codes::UNKNOWN_TOPIC_OR_PARTITION);
    }
    // A compact-only topic refuses.
    let compacted = with_config(
        new_topic("compacted", 1, -1),
        "cleanup.policy",
        Some("compact"),
    );
    assert_eq!(create(&mut c, 7, compacted).await.error_code, 0);
    let r = delete_records(&mut c, 2, "compacted", 0, 0).await;
    assert_eq!(r.error_code, error_codes::POLICY_VIOLATION);
    tb.stop().await;
}

#[tokio::test]
async fn init_producer_id_every_version() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let mut seen = std::collections::HashSet::new();
    for v in 0..=5i16 {
        for _ in 0..2 {
            let r = init_pid(&mut c, v, None, -1, -1).await;
            assert_eq!(r.error_code, 0, "v{v} {r:?}");
            assert_eq!(r.producer_epoch, 0);
            assert!(r.producer_id >= 0);
            assert!(seen.insert(r.producer_id), "distinct IDs");
        }
        // A transactional ID gets its own producer ID; initialising it again bumps the epoch.
        let tid = format!("tx-{v}");
        let r = init_pid(&mut c, v, Some(&tid), -1, -1).await;
        assert_eq!(r.error_code, 0, "v{v} {r:?}");
        assert_eq!(r.producer_epoch, 0);
        assert!(seen.insert(r.producer_id), "distinct IDs");
        let again = init_pid(&mut c, v, Some(&tid), -1, -1).await;
        assert_eq!(
            (again.error_code, again.producer_id, again.producer_epoch),
            (0, r.producer_id, 1)
        );
        let r = init_pid(&mut c, v, Some(""), -1, -1).await;
        assert_eq!(r.error_code, error_codes::INVALID_REQUEST);

        if v >= 3 {
            // KIP-360: an idempotent producer bumps its epoch, keeping its ID.
            let first = init_pid(&mut c, v, None, -1, -1).await;
            seen.insert(first.producer_id);
            let bumped = init_pid(&mut c, v, None, first.producer_id, 0).await;
            assert_eq!(bumped.error_code, 0);
            assert_eq!(
                (bumped.producer_id, bumped.producer_epoch),
                (first.producer_id, 1)
            );
            let bumped = init_pid(&mut c, v, None, first.producer_id, 7).await;
            assert_eq!(
                (bumped.producer_id, bumped.producer_epoch),
                (first.producer_id, 8)
            );
            let last = init_pid(&mut c, v, None, first.producer_id, i16::MAX - 2).await;
            assert_eq!(
                (last.producer_id, last.producer_epoch),
                (first.producer_id, i16::MAX - 1)
            );
            // The epoch would pass i16::MAX - 1: a fresh ID instead.
            let fresh = init_pid(&mut c, v, None, first.producer_id, i16::MAX - 1).await;
            assert_eq!(fresh.error_code, 0);
            assert_eq!(fresh.producer_epoch, 0);
            assert!(seen.insert(fresh.producer_id), "a new ID");
            // Half a pair is INVALID_REQUEST.
            for (id, epoch) in [(first.producer_id, -1), (-1, 3)] {
                let r = init_pid(&mut c, v, None, id, epoch).await;
                assert_eq!(r.error_code, error_codes::INVALID_REQUEST, "{id}/{epoch}");
            }
        }
    }
    tb.stop().await;
}

#[tokio::test]
async fn describe_cluster_every_version() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let Response::Metadata(m) = c.call(MetadataRequest::default(), 12).await else {
        panic!("not Metadata");
    };
    let cluster_id = m.cluster_id.expect("cluster id");
    for v in 0..=2i16 {
        for include_ops in [false, true] {
            let request = DescribeClusterRequest {
                include_cluster_authorized_operations: include_ops,
                endpoint_type: 1,
                ..Default::default()
            };
            let Response::DescribeCluster(r) = c.call(request, v).await else {
                panic!("not DescribeCluster");
            };
            assert_eq!(r.error_code, 0, "v{v} {r:?}");
            assert_eq!(r.error_message, None);
            assert_eq!(r.cluster_id, cluster_id);
            assert_eq!(r.controller_id, 1);
            assert_eq!(r.brokers.len(), 1);
            let b = &r.brokers[0];
            assert_eq!(b.broker_id, 1);
            assert_eq!(&*b.host, "127.0.0.1");
            assert_eq!(b.port, i32::from(tb.addr.port()));
            assert!(!b.is_fenced);
            if include_ops {
                assert!(r.cluster_authorized_operations > 0);
                assert_ne!(r.cluster_authorized_operations, i32::MIN);
            } else {
                assert_eq!(r.cluster_authorized_operations, i32::MIN);
            }
            if v >= 1 {
                assert_eq!(r.endpoint_type, 1);
            }
        }
        if v >= 1 {
            for (endpoint_type, code) in [(2, 114), (9, 115)] {
                let request = DescribeClusterRequest {
                    endpoint_type,
                    ..Default::default()
                };
                let Response::DescribeCluster(r) = c.call(request, v).await else {
                    panic!("not DescribeCluster");
                };
                assert_eq!(r.error_code, code, "v{v} endpoint {endpoint_type}");
                assert!(r.error_message.is_some());
                assert!(r.brokers.is_empty());
            }
        }
    }
    tb.stop().await;
}

#[tokio::test]
async fn topics_ids_and_configs_survive_a_restart() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let kept = create(
        &mut c,
        7,
        with_config(new_topic("kept", 2, -1), "retention.ms", Some("90000")),
    )
    .await;
    assert_eq!(kept.error_code, 0);
    assert_eq!(
        create(&mut c, 7, new_topic("dropped", 1, -1))
            .await
            .error_code,
        0
    );
    produce_one(&mut c, "kept", b"a").await;
    produce_one(&mut c, "kept", b"b").await;
    assert_eq!(grow(&mut c, 3, "kept", 3, None, false).await.error_code, 0);
    let set = resource(TOPIC, "kept", &[("segment.bytes", SET, Some("1048576"))]);
    assert_eq!(alter_one(&mut c, 1, set, false).await, 0);
    let set = resource(BROKER, "1", &[("log.retention.ms", SET, Some("7200000"))]);
    assert_eq!(alter_one(&mut c, 1, set, false).await, 0);
    assert_eq!(delete_names(&mut c, 6, &["dropped"]).await[0].error_code, 0);
    assert_eq!(
        delete_records(&mut c, 2, "kept", 0, 1).await.low_watermark,
        1
    );
    drop(c);

    let tb = tb.restart().await;
    let mut c = tb.client().await;
    let m = metadata(&mut c, "kept").await;
    assert_eq!(m.error_code, 0);
    assert_eq!(m.topic_id, kept.topic_id);
    assert_eq!(m.partitions.len(), 3);
    assert_eq!(
        metadata(&mut c, "dropped").await.error_code,
        error_codes::UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(
        config_value(&mut c, TOPIC, "kept", "retention.ms").await,
        (Some("90000".into()), SOURCE_DYNAMIC_TOPIC)
    );
    assert_eq!(
        config_value(&mut c, TOPIC, "kept", "segment.bytes").await,
        (Some("1048576".into()), SOURCE_DYNAMIC_TOPIC)
    );
    assert_eq!(
        config_value(&mut c, BROKER, "1", "log.retention.ms").await,
        (Some("7200000".into()), SOURCE_DYNAMIC_BROKER)
    );
    let topic = tb.broker().topic_by_name("kept").expect("kept");
    for p in &topic.partitions {
        let config = p.log_config();
        assert_eq!(config.retention_ms, Some(90_000));
        assert_eq!(config.segment_bytes, 1_048_576);
    }
    assert_eq!(earliest_offset(&mut c, "kept").await, 1);
    // Producer IDs are not reused across the restart either.
    let r = init_pid(&mut c, 4, None, -1, -1).await;
    assert_eq!(r.error_code, 0);
    tb.stop().await;
}

/// Legacy AlterConfigs (v0-2): one resource's result per resource.
async fn legacy_alter(
    c: &mut Client,
    version: i16,
    resource_type: i8,
    name: &str,
    configs: &[(&str, Option<&str>)],
    validate_only: bool,
) -> (i16, Option<String>) {
    use skiff_protocol::generated::AlterConfigsRequest;
    use skiff_protocol::generated::alter_configs_request::{
        AlterConfigsResource as LegacyResource, AlterableConfig as LegacyConfig,
    };
    let request = AlterConfigsRequest {
        resources: vec![LegacyResource {
            resource_type,
            resource_name: name.into(),
            configs: configs
                .iter()
                .map(|(key, value)| LegacyConfig {
                    name: (*key).into(),
                    value: value.map(Into::into),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        validate_only,
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::AlterConfigs(r) => {
            assert_eq!(r.responses.len(), 1);
            let p = &r.responses[0];
            (
                p.error_code,
                p.error_message.as_ref().map(|m| m.to_string()),
            )
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Legacy AlterConfigs replaces a topic's (or a broker's) whole set of dynamic configs: the keys
/// given are set and every other override goes; validate-only changes nothing; bad values,
/// duplicates, nulls, unknown topics and other resource types get Kafka's errors.
#[tokio::test]
async fn legacy_alter_configs_replaces_the_whole_set() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let created = create(
        &mut c,
        7,
        with_config(new_topic("legacy", 1, -1), "retention.ms", Some("1000")),
    )
    .await;
    assert_eq!(created.error_code, 0);
    for version in [0, 1, 2] {
        let value = format!("{}", 10_000 + i64::from(version));
        let (code, _) = legacy_alter(
            &mut c,
            version,
            2,
            "legacy",
            &[
                ("cleanup.policy", Some("compact")),
                ("max.message.bytes", Some(&value)),
            ],
            false,
        )
        .await;
        assert_eq!(code, 0, "v{version}");
        // retention.ms was not given: it is back to the default.
        assert_eq!(
            config_value(&mut c, 2, "legacy", "retention.ms").await.1,
            5,
            "DEFAULT_CONFIG"
        );
        assert_eq!(
            config_value(&mut c, 2, "legacy", "max.message.bytes").await,
            (Some(value.clone()), 1)
        );
    }
    // Validate-only checks and changes nothing.
    let (code, _) = legacy_alter(&mut c, 2, 2, "legacy", &[], true).await;
    assert_eq!(code, 0);
    assert_eq!(
        config_value(&mut c, 2, "legacy", "cleanup.policy").await,
        (Some("compact".into()), 1)
    );
    // An empty set clears every override.
    assert_eq!(legacy_alter(&mut c, 2, 2, "legacy", &[], false).await.0, 0);
    assert_eq!(
        config_value(&mut c, 2, "legacy", "cleanup.policy").await.1,
        5
    );
    let bad = [
        (
            2,
            "legacy",
            vec![("retention.ms", Some("soon"))],
            error_codes::INVALID_CONFIG,
        ),
        (
            2,
            "legacy",
            vec![("retention.ms", Some("1")), ("retention.ms", Some("2"))],
            error_codes::INVALID_REQUEST,
        ),
        (
            2,
            "legacy",
            vec![("retention.ms", None)],
            error_codes::INVALID_REQUEST,
        ),
        (
            2,
            "nope",
            vec![("retention.ms", Some("1"))],
            error_codes::UNKNOWN_TOPIC_OR_PARTITION,
        ),
        (
            8,
            "1",
            vec![("kafka", Some("DEBUG"))],
            error_codes::INVALID_REQUEST,
        ),
        (
            16,
            "sub",
            vec![("metrics", Some("x"))],
            error_codes::INVALID_REQUEST,
        ),
    ];
    for (resource_type, name, configs, want) in bad {
        let (code, message) = legacy_alter(&mut c, 2, resource_type, name, &configs, false).await;
        assert_eq!(
            code, want,
            "{resource_type} {name} {configs:?}: {message:?}"
        );
    }
    // The broker resource: a dynamic key set, then replaced by nothing.
    assert_eq!(
        legacy_alter(
            &mut c,
            2,
            4,
            "",
            &[("log.retention.ms", Some("123456"))],
            false
        )
        .await
        .0,
        0
    );
    assert_eq!(
        config_value(&mut c, 4, "1", "log.retention.ms").await,
        (Some("123456".into()), 3),
        "DYNAMIC_DEFAULT_BROKER_CONFIG"
    );
    assert_eq!(legacy_alter(&mut c, 2, 4, "", &[], false).await.0, 0);
    assert_ne!(config_value(&mut c, 4, "1", "log.retention.ms").await.1, 3);
    tb.stop().await;
}

/// DescribeTopicPartitions v0: one page, as (topic, error, partitions) and the next cursor.
async fn describe_page(
    c: &mut Client,
    topics: &[&str],
    limit: i32,
    cursor: Option<(&str, i32)>,
) -> (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>) {
    use skiff_protocol::generated::DescribeTopicPartitionsRequest;
    use skiff_protocol::generated::describe_topic_partitions_request::{Cursor, TopicRequest};
    let request = DescribeTopicPartitionsRequest {
        topics: topics
            .iter()
            .map(|t| TopicRequest {
                name: (*t).into(),
                ..Default::default()
            })
            .collect(),
        response_partition_limit: limit,
        cursor: cursor.map(|(t, p)| Cursor {
            topic_name: t.into(),
            partition_index: p,
            ..Default::default()
        }),
        ..Default::default()
    };
    match c.call(request, 0).await {
        Response::DescribeTopicPartitions(r) => (
            r.topics
                .iter()
                .map(|t| {
                    for p in &t.partitions {
                        assert_eq!((p.leader_id, &p.replica_nodes), (1, &vec![1]), "{p:?}");
                    }
                    (
                        t.name.as_deref().unwrap_or_default().to_string(),
                        t.error_code,
                        t.partitions.iter().map(|p| p.partition_index).collect(),
                    )
                })
                .collect(),
            r.next_cursor
                .map(|c| (c.topic_name.to_string(), c.partition_index)),
        ),
        other => panic!("unexpected {other:?}"),
    }
}

/// DescribeTopicPartitions pages through every topic's partitions by cursor, in name order; named
/// topics that are unknown are UNKNOWN_TOPIC_OR_PARTITION; a cursor outside the named topics or
/// with a negative partition is INVALID_REQUEST.
#[tokio::test]
async fn describe_topic_partitions_pages_by_cursor() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    for (name, n) in [("dtp-c", 1), ("dtp-a", 3), ("dtp-b", 2)] {
        assert_eq!(
            create(&mut c, 7, new_topic(name, n, -1)).await.error_code,
            0
        );
    }
    let s = |t: &str| t.to_string();
    assert_eq!(
        describe_page(&mut c, &[], 2, None).await,
        (vec![(s("dtp-a"), 0, vec![0, 1])], Some((s("dtp-a"), 2)))
    );
    assert_eq!(
        describe_page(&mut c, &[], 2, Some(("dtp-a", 2))).await,
        (
            vec![(s("dtp-a"), 0, vec![2]), (s("dtp-b"), 0, vec![0])],
            Some((s("dtp-b"), 1))
        )
    );
    assert_eq!(
        describe_page(&mut c, &[], 2, Some(("dtp-b", 1))).await,
        (
            vec![(s("dtp-b"), 0, vec![1]), (s("dtp-c"), 0, vec![0])],
            None
        )
    );
    // A page that ends with a topic, more to come: the cursor is the next topic's start.
    assert_eq!(
        describe_page(&mut c, &[], 3, None).await,
        (vec![(s("dtp-a"), 0, vec![0, 1, 2])], Some((s("dtp-b"), 0)))
    );
    // Named topics, in name order, an unknown one answered as such.
    assert_eq!(
        describe_page(&mut c, &["dtp-c", "nope", "dtp-b"], 2000, None).await,
        (
            vec![
                (s("dtp-b"), 0, vec![0, 1]),
                (s("dtp-c"), 0, vec![0]),
                (s("nope"), error_codes::UNKNOWN_TOPIC_OR_PARTITION, vec![]),
            ],
            None
        )
    );
    for (topics, cursor) in [
        (&["dtp-a"][..], ("dtp-b", 0)),
        (&["dtp-a"][..], ("dtp-a", -1)),
    ] {
        let (answered, _) = describe_page(&mut c, topics, 10, Some(cursor)).await;
        assert!(
            answered
                .iter()
                .all(|(_, code, _)| *code == error_codes::INVALID_REQUEST),
            "{answered:?}"
        );
        assert!(!answered.is_empty());
    }
    tb.stop().await;
}

/// ElectLeaders, the partition reassignment APIs and UpdateFeatures answer honestly for a node
/// that is every partition's only replica: no election is needed, no reassignment is ever in
/// progress, a reassignment to this node alone is done at once and any other is invalid, and the
/// feature levels are fixed.
#[tokio::test]
async fn replica_and_feature_apis_answer_for_a_single_node() {
    use skiff_protocol::generated::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    use skiff_protocol::generated::elect_leaders_request::TopicPartitions;
    use skiff_protocol::generated::update_features_request::FeatureUpdateKey;
    use skiff_protocol::generated::{
        AlterPartitionReassignmentsRequest, ElectLeadersRequest, ListPartitionReassignmentsRequest,
        UpdateFeaturesRequest,
    };
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    assert_eq!(
        create(&mut c, 7, new_topic("rep", 2, -1)).await.error_code,
        0
    );
    for version in [0, 1, 2] {
        let request = ElectLeadersRequest {
            election_type: 0,
            topic_partitions: Some(vec![
                TopicPartitions {
                    topic: "rep".into(),
                    partitions: vec![0, 1, 5],
                    ..Default::default()
                },
                TopicPartitions {
                    topic: "nope".into(),
                    partitions: vec![0],
                    ..Default::default()
                },
            ]),
            timeout_ms: 1000,
            ..Default::default()
        };
        match c.call(request, version).await {
            Response::ElectLeaders(r) => {
                assert_eq!(r.error_code, 0);
                let codes: Vec<(String, i32, i16)> = r
                    .replica_election_results
                    .iter()
                    .flat_map(|t| {
                        t.partition_result
                            .iter()
                            .map(move |p| (t.topic.to_string(), p.partition_id, p.error_code))
                    })
                    .collect();
                assert_eq!(
                    codes,
                    vec![
                        ("rep".into(), 0, error_codes::ELECTION_NOT_NEEDED),
                        ("rep".into(), 1, error_codes::ELECTION_NOT_NEEDED),
                        ("rep".into(), 5, error_codes::UNKNOWN_TOPIC_OR_PARTITION),
                        ("nope".into(), 0, error_codes::UNKNOWN_TOPIC_OR_PARTITION),
                    ]
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    match c
        .call(ListPartitionReassignmentsRequest::default(), 0)
        .await
    {
        Response::ListPartitionReassignments(r) => {
            assert_eq!((r.error_code, r.topics.len()), (0, 0))
        }
        other => panic!("unexpected {other:?}"),
    }
    let reassign = |replicas: Option<Vec<i32>>| AlterPartitionReassignmentsRequest {
        timeout_ms: 1000,
        topics: vec![ReassignableTopic {
            name: "rep".into(),
            partitions: vec![ReassignablePartition {
                partition_index: 0,
                replicas,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    for (replicas, want) in [
        (Some(vec![1]), error_codes::NONE),
        (Some(vec![1, 2]), error_codes::INVALID_REPLICA_ASSIGNMENT),
        (Some(vec![2]), error_codes::INVALID_REPLICA_ASSIGNMENT),
        (None, error_codes::NO_REASSIGNMENT_IN_PROGRESS),
    ] {
        match c.call(reassign(replicas.clone()), 1).await {
            Response::AlterPartitionReassignments(r) => {
                assert_eq!(r.error_code, 0);
                assert_eq!(
                    r.responses[0].partitions[0].error_code, want,
                    "{replicas:?}"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let update = |feature: &str, level: i16| UpdateFeaturesRequest {
        timeout_ms: 1000,
        feature_updates: vec![FeatureUpdateKey {
            feature: feature.into(),
            max_version_level: level,
            upgrade_type: 1,
            ..Default::default()
        }],
        ..Default::default()
    };
    for (feature, level, want) in [
        ("group.version", 1, error_codes::NONE),
        ("group.version", 0, error_codes::INVALID_UPDATE_VERSION),
        ("share.version", 1, error_codes::NONE),
        ("metadata.version", 21, error_codes::INVALID_UPDATE_VERSION),
    ] {
        match c.call(update(feature, level), 1).await {
            Response::UpdateFeatures(r) => {
                assert_eq!(r.error_code, 0);
                assert_eq!(r.results[0].error_code, want, "{feature} {level}");
            }
            other => panic!("unexpected {other:?}"),
        }
        match c.call(update(feature, level), 2).await {
            Response::UpdateFeatures(r) => assert_eq!(r.error_code, want, "{feature} {level}"),
            other => panic!("unexpected {other:?}"),
        }
    }
    tb.stop().await;
}
