//! The ACL authorizer (`authorizer = "standard"`): a principal without ACLs is refused by every
//! topic, config, cluster and security API with Kafka's error; ACLs created with CreateAcls
//! (prefixed, wildcard, DENY over ALLOW, implied DESCRIBE) open exactly what they say; ACLs
//! survive a restart; without an authorizer the ACL APIs answer SECURITY_DISABLED.

mod common;

use common::sasl::{scram_login, write_users};
use common::{Client, TestBroker, batch, http_get, produce_request};
use skiff_auth::acl::{AclOperation, AclPermissionType, PatternType, ResourceType};
use skiff_auth::principal::KafkaPrincipal;
use skiff_auth::scram::ScramMechanism;
use skiff_broker::{AuthorizerSettings, ListenerConfig, SaslMechanism, SecurityProtocol};
use skiff_protocol::Response;
use skiff_protocol::error_codes;
use skiff_protocol::generated::create_acls_request::AclCreation;
use skiff_protocol::generated::create_partitions_request::CreatePartitionsTopic;
use skiff_protocol::generated::create_topics_request::CreatableTopic;
use skiff_protocol::generated::delete_acls_request::DeleteAclsFilter;
use skiff_protocol::generated::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use skiff_protocol::generated::delete_topics_request::DeleteTopicState;
use skiff_protocol::generated::describe_configs_request::DescribeConfigsResource;
use skiff_protocol::generated::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use skiff_protocol::generated::metadata_request::MetadataRequestTopic;
use skiff_protocol::generated::{
    CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteAclsRequest,
    DeleteRecordsRequest, DeleteTopicsRequest, DescribeAclsRequest, DescribeClusterRequest,
    DescribeConfigsRequest, DescribeLogDirsRequest, DescribeUserScramCredentialsRequest,
    ListOffsetsRequest, MetadataRequest,
};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;

async fn start() -> TestBroker {
    TestBroker::start_with(configure).await
}

fn configure(config: &mut skiff_broker::BrokerConfig) {
    write_users(
        &config.data_dir,
        &[("admin", "admin-pw"), ("alice", "alice-pw")],
    );
    config.listeners = vec![ListenerConfig {
        protocol: SecurityProtocol::SaslPlaintext,
        sasl_mechanisms: vec![SaslMechanism::ScramSha512],
        ..ListenerConfig::plaintext("SASL", "127.0.0.1:0".parse().expect("addr"), None)
    }];
    config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    config.security.authorizer = Some(AuthorizerSettings {
        super_users: vec![KafkaPrincipal::user("admin")],
        allow_everyone_if_no_acl_found: false,
    });
}

async fn login(tb: &TestBroker, user: &str) -> Client {
    let mut c = Client::connect(tb.addr).await;
    let (code, _) = scram_login(&mut c, ScramMechanism::Sha512, user, &format!("{user}-pw")).await;
    assert_eq!(code, 0, "{user} logs in");
    c
}

fn acl(
    resource_type: ResourceType,
    name: &str,
    pattern: PatternType,
    principal: &str,
    operation: AclOperation,
    permission: AclPermissionType,
) -> AclCreation {
    AclCreation {
        resource_type: resource_type.code(),
        resource_name: name.into(),
        resource_pattern_type: pattern.code(),
        principal: principal.into(),
        host: "*".into(),
        operation: operation.code(),
        permission_type: permission.code(),
        ..Default::default()
    }
}

async fn create_acls(c: &mut Client, creations: Vec<AclCreation>) -> Vec<i16> {
    let request = CreateAclsRequest {
        creations,
        ..Default::default()
    };
    match c.call(request, 3).await {
        Response::CreateAcls(r) => r.results.iter().map(|r| r.error_code).collect(),
        other => panic!("unexpected {other:?}"),
    }
}

async fn create_topic(c: &mut Client, name: &str) -> i16 {
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: name.into(),
            num_partitions: 1,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    match c.call(request, 7).await {
        Response::CreateTopics(r) => r.topics[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

async fn produce(c: &mut Client, topic: &str) -> i16 {
    let request = produce_request(topic, 0, -1, batch(&[b"v"]));
    match c.call(request, 9).await {
        Response::Produce(r) => r.responses[0].partition_responses[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

async fn metadata(c: &mut Client, topics: Option<&[&str]>) -> Vec<(String, i16, i32)> {
    let request = MetadataRequest {
        topics: topics.map(|names| {
            names
                .iter()
                .map(|n| MetadataRequestTopic {
                    name: Some((*n).into()),
                    ..Default::default()
                })
                .collect()
        }),
        allow_auto_topic_creation: false,
        include_topic_authorized_operations: true,
        ..Default::default()
    };
    match c.call(request, 12).await {
        Response::Metadata(m) => m
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.as_deref().unwrap_or_default().to_string(),
                    t.error_code,
                    t.topic_authorized_operations,
                )
            })
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_principal_without_acls_is_refused_everywhere() {
    let tb = start().await;
    let mut admin = login(&tb, "admin").await;
    assert_eq!(create_topic(&mut admin, "orders").await, 0);
    let mut alice = login(&tb, "alice").await;

    assert_eq!(
        produce(&mut alice, "orders").await,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );
    let fetch = common::fetch_request("orders", skiff_protocol::Uuid::ZERO, 0, 0, 0);
    match alice.call(fetch, 12).await {
        Response::Fetch(r) => assert_eq!(
            r.responses[0].partitions[0].error_code,
            error_codes::TOPIC_AUTHORIZATION_FAILED
        ),
        other => panic!("unexpected {other:?}"),
    }
    let list_offsets = ListOffsetsRequest {
        replica_id: -1,
        topics: vec![ListOffsetsTopic {
            name: "orders".into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: 0,
                timestamp: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match alice.call(list_offsets, 7).await {
        Response::ListOffsets(r) => assert_eq!(
            r.topics[0].partitions[0].error_code,
            error_codes::TOPIC_AUTHORIZATION_FAILED
        ),
        other => panic!("unexpected {other:?}"),
    }
    // All topics: none shown. By name: TOPIC_AUTHORIZATION_FAILED, existing or not.
    assert_eq!(metadata(&mut alice, None).await, vec![]);
    let named = metadata(&mut alice, Some(&["orders", "nothing-here"])).await;
    assert_eq!(
        named
            .iter()
            .map(|(n, e, _)| (n.as_str(), *e))
            .collect::<Vec<_>>(),
        vec![
            ("orders", error_codes::TOPIC_AUTHORIZATION_FAILED),
            ("nothing-here", error_codes::TOPIC_AUTHORIZATION_FAILED)
        ]
    );
    assert_eq!(
        create_topic(&mut alice, "mine").await,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );
    let delete = DeleteTopicsRequest {
        topics: vec![DeleteTopicState {
            name: Some("orders".into()),
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    match alice.call(delete, 6).await {
        Response::DeleteTopics(r) => assert_eq!(
            r.responses[0].error_code,
            error_codes::TOPIC_AUTHORIZATION_FAILED
        ),
        other => panic!("unexpected {other:?}"),
    }
    let grow = CreatePartitionsRequest {
        topics: vec![CreatePartitionsTopic {
            name: "orders".into(),
            count: 3,
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    match alice.call(grow, 3).await {
        Response::CreatePartitions(r) => assert_eq!(
            r.results[0].error_code,
            error_codes::TOPIC_AUTHORIZATION_FAILED
        ),
        other => panic!("unexpected {other:?}"),
    }
    let delete_records = DeleteRecordsRequest {
        topics: vec![DeleteRecordsTopic {
            name: "orders".into(),
            partitions: vec![DeleteRecordsPartition {
                partition_index: 0,
                offset: 0,
                ..Default::default()
            }],
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    match alice.call(delete_records, 2).await {
        Response::DeleteRecords(r) => assert_eq!(
            r.topics[0].partitions[0].error_code,
            error_codes::TOPIC_AUTHORIZATION_FAILED
        ),
        other => panic!("unexpected {other:?}"),
    }
    let describe_configs = DescribeConfigsRequest {
        resources: vec![
            DescribeConfigsResource {
                resource_type: TOPIC,
                resource_name: "orders".into(),
                ..Default::default()
            },
            DescribeConfigsResource {
                resource_type: BROKER,
                resource_name: "1".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    match alice.call(describe_configs, 4).await {
        Response::DescribeConfigs(r) => assert_eq!(
            r.results.iter().map(|r| r.error_code).collect::<Vec<_>>(),
            vec![
                error_codes::TOPIC_AUTHORIZATION_FAILED,
                error_codes::CLUSTER_AUTHORIZATION_FAILED
            ]
        ),
        other => panic!("unexpected {other:?}"),
    }
    match alice.call(DescribeLogDirsRequest::default(), 4).await {
        Response::DescribeLogDirs(r) => {
            assert_eq!(r.error_code, error_codes::CLUSTER_AUTHORIZATION_FAILED);
            assert!(r.results.is_empty());
        }
        other => panic!("unexpected {other:?}"),
    }
    let grant = acl(
        ResourceType::Topic,
        "*",
        PatternType::Literal,
        "User:alice",
        AclOperation::All,
        AclPermissionType::Allow,
    );
    assert_eq!(
        create_acls(&mut alice, vec![grant]).await,
        vec![error_codes::CLUSTER_AUTHORIZATION_FAILED]
    );
    match alice.call(DescribeAclsRequest::default(), 3).await {
        Response::DescribeAcls(r) => {
            assert_eq!(r.error_code, error_codes::CLUSTER_AUTHORIZATION_FAILED)
        }
        other => panic!("unexpected {other:?}"),
    }
    match alice
        .call(DescribeUserScramCredentialsRequest::default(), 0)
        .await
    {
        Response::DescribeUserScramCredentials(r) => {
            assert_eq!(r.error_code, error_codes::CLUSTER_AUTHORIZATION_FAILED)
        }
        other => panic!("unexpected {other:?}"),
    }
    // DescribeCluster needs no ACL, as in Kafka; the cluster's operations are then 0.
    let cluster = DescribeClusterRequest {
        include_cluster_authorized_operations: true,
        endpoint_type: 1,
        ..Default::default()
    };
    match alice.call(cluster, 1).await {
        Response::DescribeCluster(r) => {
            assert_eq!(r.error_code, 0);
            assert_eq!(r.cluster_authorized_operations, 0);
        }
        other => panic!("unexpected {other:?}"),
    }
    let admin_http = tb
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin");
    let (_, metrics) = http_get(admin_http, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("skiff_authorization_denials_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );
}

#[tokio::test]
async fn acls_open_what_they_say_and_deny_wins() {
    let tb = start().await;
    let mut admin = login(&tb, "admin").await;
    for topic in ["orders-eu", "orders-secret", "payments"] {
        assert_eq!(create_topic(&mut admin, topic).await, 0);
    }
    let results = create_acls(
        &mut admin,
        vec![
            acl(
                ResourceType::Topic,
                "orders-",
                PatternType::Prefixed,
                "User:alice",
                AclOperation::Write,
                AclPermissionType::Allow,
            ),
            acl(
                ResourceType::Topic,
                "orders-secret",
                PatternType::Literal,
                "User:*",
                AclOperation::All,
                AclPermissionType::Deny,
            ),
            acl(
                ResourceType::Topic,
                "payments",
                PatternType::Literal,
                "User:alice",
                AclOperation::Read,
                AclPermissionType::Allow,
            ),
            // Refused: MATCH is a filter, not a pattern.
            acl(
                ResourceType::Topic,
                "x",
                PatternType::Match,
                "User:alice",
                AclOperation::Read,
                AclPermissionType::Allow,
            ),
        ],
    )
    .await;
    assert_eq!(results, vec![0, 0, 0, error_codes::INVALID_REQUEST]);

    let mut alice = login(&tb, "alice").await;
    assert_eq!(produce(&mut alice, "orders-eu").await, 0);
    assert_eq!(
        produce(&mut alice, "orders-secret").await,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );
    assert_eq!(
        produce(&mut alice, "payments").await,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );
    // WRITE and READ imply DESCRIBE: those topics are listed, with exactly their operations.
    const READ: i32 = 1 << 3;
    const WRITE: i32 = 1 << 4;
    const DESCRIBE: i32 = 1 << 8;
    let mut listed = metadata(&mut alice, None).await;
    listed.sort();
    assert_eq!(
        listed,
        vec![
            ("orders-eu".to_string(), 0, WRITE | DESCRIBE),
            ("payments".to_string(), 0, READ | DESCRIBE),
        ]
    );

    // The ACLs survive a restart; DeleteAcls removes what its filter matches.
    let tb = tb.restart_with(configure).await;
    let mut admin = login(&tb, "admin").await;
    let describe = DescribeAclsRequest {
        resource_type_filter: ResourceType::Topic.code(),
        pattern_type_filter: PatternType::Match.code(),
        resource_name_filter: Some("orders-secret".into()),
        principal_filter: None,
        host_filter: None,
        operation: AclOperation::Any.code(),
        permission_type: AclPermissionType::Any.code(),
        ..Default::default()
    };
    match admin.call(describe, 3).await {
        Response::DescribeAcls(r) => {
            let mut found: Vec<(String, i8)> = r
                .resources
                .iter()
                .map(|res| (res.resource_name.to_string(), res.pattern_type))
                .collect();
            found.sort();
            assert_eq!(
                found,
                vec![
                    ("orders-".to_string(), PatternType::Prefixed.code()),
                    ("orders-secret".to_string(), PatternType::Literal.code()),
                ]
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let delete = DeleteAclsRequest {
        filters: vec![DeleteAclsFilter {
            resource_type_filter: ResourceType::Topic.code(),
            resource_name_filter: Some("orders-secret".into()),
            pattern_type_filter: PatternType::Literal.code(),
            principal_filter: None,
            host_filter: None,
            operation: AclOperation::Any.code(),
            permission_type: AclPermissionType::Any.code(),
            ..Default::default()
        }],
        ..Default::default()
    };
    match admin.call(delete, 3).await {
        Response::DeleteAcls(r) => {
            assert_eq!(r.filter_results[0].error_code, 0);
            assert_eq!(r.filter_results[0].matching_acls.len(), 1);
        }
        other => panic!("unexpected {other:?}"),
    }
    let mut alice = login(&tb, "alice").await;
    assert_eq!(produce(&mut alice, "orders-secret").await, 0);
}

#[tokio::test]
async fn without_an_authorizer_everything_is_allowed_and_acl_apis_say_security_disabled() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let grant = acl(
        ResourceType::Topic,
        "t",
        PatternType::Literal,
        "User:alice",
        AclOperation::Read,
        AclPermissionType::Allow,
    );
    assert_eq!(
        create_acls(&mut c, vec![grant]).await,
        vec![error_codes::SECURITY_DISABLED]
    );
    match c.call(DescribeAclsRequest::default(), 3).await {
        Response::DescribeAcls(r) => assert_eq!(r.error_code, error_codes::SECURITY_DISABLED),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(create_topic(&mut c, "open").await, 0);
    assert_eq!(produce(&mut c, "open").await, 0);
    let all_topic_ops = metadata(&mut c, Some(&["open"])).await[0].2;
    assert_eq!(all_topic_ops.count_ones(), 8);
}
