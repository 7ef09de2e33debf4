//! ACLs on the group and transaction APIs, against a real broker with Kafka's StandardAuthorizer
//! (`allow.everyone.if.no.acl.found = false`): for each API a principal without ACLs gets Kafka's
//! error code, and the same call succeeds once CreateAcls grants what `KafkaApis` checks. Users
//! log in with SCRAM-SHA-512 on a SASL_PLAINTEXT listener; `User:admin` (and the PLAINTEXT
//! listener's `User:ANONYMOUS`, which creates the users) are super users.

mod common;

use bytes::Bytes;
use common::{Client, TestBroker};
use skiff_auth::acl::{AclOperation, AclPermissionType, PatternType, ResourceType};
use skiff_auth::principal::KafkaPrincipal;
use skiff_auth::scram::{ClientExchange, ScramMechanism};
use skiff_broker::{AuthorizerSettings, ListenerConfig, SaslMechanism, SecurityProtocol};
use skiff_protocol::generated::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use skiff_protocol::generated::alter_user_scram_credentials_request::AlterUserScramCredentialsRequest;
use skiff_protocol::generated::create_acls_request::AclCreation;
use skiff_protocol::generated::create_topics_request::CreatableTopic;
use skiff_protocol::generated::describe_producers_request::TopicRequest;
use skiff_protocol::generated::join_group_request::JoinGroupRequestProtocol;
use skiff_protocol::generated::leave_group_request::MemberIdentity;
use skiff_protocol::generated::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use skiff_protocol::generated::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use skiff_protocol::generated::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use skiff_protocol::generated::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use skiff_protocol::generated::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest, CreateAclsRequest, CreateTopicsRequest, DeleteGroupsRequest,
    DescribeGroupsRequest, DescribeProducersRequest, DescribeTransactionsRequest, EndTxnRequest,
    FindCoordinatorRequest, HeartbeatRequest, InitProducerIdRequest, JoinGroupRequest,
    LeaveGroupRequest, ListGroupsRequest, ListTransactionsRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
    SyncGroupRequest, TxnOffsetCommitRequest,
};
use skiff_protocol::{Response, Uuid, error_codes};

/// Sends `$request` at `$version` and unwraps the response of that API.
macro_rules! call {
    ($client:expr, $variant:ident, $request:expr, $version:expr) => {
        match $client.call($request, $version).await {
            Response::$variant(r) => r,
            other => panic!("unexpected {other:?}"),
        }
    };
}

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

// ----- the broker, its users and their ACLs --------------------------------------------------

/// A broker with the authorizer on, its admin (a super user, over SASL) and the users alice and
/// bob, who start without any ACL.
struct Secured {
    tb: TestBroker,
    admin: Client,
}

impl Secured {
    async fn start() -> Secured {
        let tb = TestBroker::start_with(|config| {
            config.listeners = vec![
                ListenerConfig::plaintext("PLAIN", "127.0.0.1:0".parse().expect("addr"), None),
                ListenerConfig {
                    protocol: SecurityProtocol::SaslPlaintext,
                    sasl_mechanisms: vec![SaslMechanism::ScramSha512],
                    ..ListenerConfig::plaintext("SASL", "127.0.0.1:0".parse().expect("addr"), None)
                },
            ];
            config.security.authorizer = Some(AuthorizerSettings {
                super_users: vec![KafkaPrincipal::user("admin"), KafkaPrincipal::anonymous()],
                allow_everyone_if_no_acl_found: false,
            });
            config.groups.classic_initial_rebalance_delay_ms = 0;
            config.groups.consumer_heartbeat_interval_ms = 500;
            config.share_groups_enabled = true;
        })
        .await;
        add_users(&tb, &["admin", "alice", "bob"]).await;
        let admin = Secured::login_on(&tb, "admin").await;
        Secured { tb, admin }
    }

    async fn login_on(tb: &TestBroker, user: &str) -> Client {
        let addr = tb.running.as_ref().expect("running").listener_addrs[1].1;
        let mut client = Client::connect(addr).await;
        scram_login(&mut client, user).await;
        client
    }

    /// A connection authenticated as `user`.
    async fn login(&self, user: &str) -> Client {
        Secured::login_on(&self.tb, user).await
    }

    /// Creates ACLs as the admin; each must be accepted.
    async fn grant(&mut self, acls: Vec<AclCreation>) {
        let request = CreateAclsRequest {
            creations: acls,
            ..Default::default()
        };
        let response = call!(self.admin, CreateAcls, request, 3);
        for result in response.results {
            assert_eq!(result.error_code, error_codes::NONE, "{result:?}");
        }
    }

    /// Creates one-partition topics as the admin.
    async fn create_topics(&mut self, names: &[&str]) {
        let request = CreateTopicsRequest {
            topics: names
                .iter()
                .map(|name| CreatableTopic {
                    name: (*name).into(),
                    num_partitions: 1,
                    replication_factor: 1,
                    ..Default::default()
                })
                .collect(),
            timeout_ms: 5000,
            ..Default::default()
        };
        let response = call!(self.admin, CreateTopics, request, 7);
        for topic in response.topics {
            assert_eq!(topic.error_code, error_codes::NONE, "{topic:?}");
        }
    }
}

/// An ACL for `User:<user>` from any host.
fn acl(
    permission: AclPermissionType,
    user: &str,
    operation: AclOperation,
    resource_type: ResourceType,
    pattern: PatternType,
    name: &str,
) -> AclCreation {
    AclCreation {
        resource_type: resource_type.code(),
        resource_name: name.into(),
        resource_pattern_type: pattern.code(),
        principal: format!("User:{user}").into(),
        host: "*".into(),
        operation: operation.code(),
        permission_type: permission.code(),
        ..Default::default()
    }
}

/// Allows `user` `operation` on the literal resource.
fn allow(
    user: &str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: &str,
) -> AclCreation {
    acl(
        AclPermissionType::Allow,
        user,
        operation,
        resource_type,
        PatternType::Literal,
        name,
    )
}

/// Allows `user` `operation` on every resource of the type whose name starts with `prefix`.
fn allow_prefixed(
    user: &str,
    operation: AclOperation,
    resource_type: ResourceType,
    prefix: &str,
) -> AclCreation {
    acl(
        AclPermissionType::Allow,
        user,
        operation,
        resource_type,
        PatternType::Prefixed,
        prefix,
    )
}

/// Denies `user` `operation` on the literal resource.
fn deny(
    user: &str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: &str,
) -> AclCreation {
    acl(
        AclPermissionType::Deny,
        user,
        operation,
        resource_type,
        PatternType::Literal,
        name,
    )
}

/// Creates SCRAM-SHA-512 users (password `<user>-secret`) over the PLAINTEXT listener.
async fn add_users(tb: &TestBroker, users: &[&str]) {
    let upsertions = common::sasl::scram_upsertions(users, |user| format!("{user}-secret"));
    let mut plain = Client::connect(tb.addr).await;
    let request = AlterUserScramCredentialsRequest {
        upsertions,
        ..Default::default()
    };
    let response = call!(plain, AlterUserScramCredentials, request, 0);
    for result in response.results {
        assert_eq!(result.error_code, error_codes::NONE, "{result:?}");
    }
}

/// A SCRAM-SHA-512 login (SaslHandshake v1, SaslAuthenticate v2) that must succeed.
async fn scram_login(client: &mut Client, user: &str) {
    let mechanism = ScramMechanism::Sha512;
    let handshake = SaslHandshakeRequest {
        mechanism: mechanism.name().into(),
        ..Default::default()
    };
    let response = call!(client, SaslHandshake, handshake, 1);
    assert_eq!(response.error_code, error_codes::NONE);
    let password = format!("{user}-secret");
    let (mut exchange, first) =
        ClientExchange::new(mechanism, user, password.as_bytes(), "rOprNGfwEbeRWgbNEkqO");
    let authenticate = |bytes: Vec<u8>| SaslAuthenticateRequest {
        auth_bytes: bytes.into(),
        ..Default::default()
    };
    let server_first = call!(client, SaslAuthenticate, authenticate(first), 2);
    assert_eq!(
        server_first.error_code,
        error_codes::NONE,
        "{server_first:?}"
    );
    let last = exchange
        .server_first(&server_first.auth_bytes)
        .expect("server-first");
    let server_final = call!(client, SaslAuthenticate, authenticate(last), 2);
    assert_eq!(
        server_final.error_code,
        error_codes::NONE,
        "{server_final:?}"
    );
}

/// The `authorized_operations` bits of these operations.
fn bits(operations: &[AclOperation]) -> i32 {
    operations.iter().fold(0, |b, op| b | (1 << op.code()))
}

// ----- request helpers -------------------------------------------------------------------------

/// FindCoordinator v4: each key's error code.
async fn find_coordinators(c: &mut Client, key_type: i8, keys: &[&str]) -> Vec<i16> {
    let request = FindCoordinatorRequest {
        key_type,
        coordinator_keys: keys.iter().map(|k| (*k).into()).collect(),
        ..Default::default()
    };
    let response = call!(c, FindCoordinator, request, 4);
    response.coordinators.iter().map(|c| c.error_code).collect()
}

/// FindCoordinator v3 for one key: (error code, node ID).
async fn find_coordinator(c: &mut Client, key_type: i8, key: &str) -> (i16, i32) {
    let request = FindCoordinatorRequest {
        key_type,
        key: key.into(),
        ..Default::default()
    };
    let response = call!(c, FindCoordinator, request, 3);
    (response.error_code, response.node_id)
}

fn join_request(group: &str, member: &str) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: group.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        member_id: member.into(),
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: Bytes::from_static(b"subscription"),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A dynamic member joins alone (MEMBER_ID_REQUIRED, then the join with its ID): (error code of
/// the first join, member ID, generation).
async fn join_alone(c: &mut Client, group: &str) -> (i16, String, i32) {
    let first = call!(c, JoinGroup, join_request(group, ""), 9);
    if first.error_code != error_codes::MEMBER_ID_REQUIRED {
        return (first.error_code, String::new(), -1);
    }
    let member = first.member_id.to_string();
    let joined = call!(c, JoinGroup, join_request(group, &member), 9);
    assert_eq!(joined.error_code, error_codes::NONE, "{joined:?}");
    (joined.error_code, member, joined.generation_id)
}

async fn sync_group(c: &mut Client, group: &str, member: &str, generation: i32) -> i16 {
    let request = SyncGroupRequest {
        group_id: group.into(),
        generation_id: generation,
        member_id: member.into(),
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        ..Default::default()
    };
    call!(c, SyncGroup, request, 5).error_code
}

async fn heartbeat(c: &mut Client, group: &str, member: &str, generation: i32) -> i16 {
    let request = HeartbeatRequest {
        group_id: group.into(),
        generation_id: generation,
        member_id: member.into(),
        ..Default::default()
    };
    call!(c, Heartbeat, request, 4).error_code
}

async fn leave_group(c: &mut Client, group: &str, member: &str) -> i16 {
    let request = LeaveGroupRequest {
        group_id: group.into(),
        members: vec![MemberIdentity {
            member_id: member.into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    call!(c, LeaveGroup, request, 5).error_code
}

/// A simple (memberless) OffsetCommit v8 of offset 1 on partition 0 of each topic: each topic's
/// error code, by name.
async fn commit(c: &mut Client, group: &str, topics: &[&str]) -> Vec<(String, i16)> {
    let request = OffsetCommitRequest {
        group_id: group.into(),
        generation_id_or_member_epoch: -1,
        topics: topics
            .iter()
            .map(|topic| OffsetCommitRequestTopic {
                name: (*topic).into(),
                partitions: vec![OffsetCommitRequestPartition {
                    partition_index: 0,
                    committed_offset: 1,
                    committed_leader_epoch: -1,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let response = call!(c, OffsetCommit, request, 8);
    let mut codes: Vec<(String, i16)> = response
        .topics
        .iter()
        .map(|t| (t.name.to_string(), t.partitions[0].error_code))
        .collect();
    codes.sort();
    codes
}

/// OffsetFetch v8 of partition 0 of `topics` (`None`: every committed offset) for each group:
/// per group its error code and its topics' (name, error code, offset).
async fn fetch_offsets(
    c: &mut Client,
    groups: &[&str],
    topics: Option<&[&str]>,
) -> Vec<(i16, Vec<(String, i16, i64)>)> {
    let request = OffsetFetchRequest {
        groups: groups
            .iter()
            .map(|group| OffsetFetchRequestGroup {
                group_id: (*group).into(),
                topics: topics.map(|names| {
                    names
                        .iter()
                        .map(|name| OffsetFetchRequestTopics {
                            name: (*name).into(),
                            partition_indexes: vec![0],
                            ..Default::default()
                        })
                        .collect()
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let response = call!(c, OffsetFetch, request, 8);
    response
        .groups
        .iter()
        .map(|g| {
            let mut topics: Vec<(String, i16, i64)> = g
                .topics
                .iter()
                .map(|t| {
                    let p = &t.partitions[0];
                    (t.name.to_string(), p.error_code, p.committed_offset)
                })
                .collect();
            topics.sort();
            (g.error_code, topics)
        })
        .collect()
}

/// OffsetDelete of partition 0 of `topics`: (group error code, each topic's error code).
async fn delete_offsets(c: &mut Client, group: &str, topics: &[&str]) -> (i16, Vec<(String, i16)>) {
    let request = OffsetDeleteRequest {
        group_id: group.into(),
        topics: topics
            .iter()
            .map(|topic| OffsetDeleteRequestTopic {
                name: (*topic).into(),
                partitions: vec![OffsetDeleteRequestPartition {
                    partition_index: 0,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let response = call!(c, OffsetDelete, request, 0);
    let mut codes: Vec<(String, i16)> = response
        .topics
        .iter()
        .map(|t| (t.name.to_string(), t.partitions[0].error_code))
        .collect();
    codes.sort();
    (response.error_code, codes)
}

async fn list_groups(c: &mut Client) -> Vec<String> {
    let response = call!(c, ListGroups, ListGroupsRequest::default(), 4);
    assert_eq!(response.error_code, error_codes::NONE);
    response
        .groups
        .iter()
        .map(|g| g.group_id.to_string())
        .collect()
}

/// DescribeGroups v5 with authorized operations: each group's (error code, operations).
async fn describe_groups(c: &mut Client, groups: &[&str]) -> Vec<(i16, i32)> {
    let request = DescribeGroupsRequest {
        groups: groups.iter().map(|g| (*g).into()).collect(),
        include_authorized_operations: true,
        ..Default::default()
    };
    let response = call!(c, DescribeGroups, request, 5);
    response
        .groups
        .iter()
        .map(|g| (g.error_code, g.authorized_operations))
        .collect()
}

async fn delete_groups(c: &mut Client, groups: &[&str]) -> Vec<i16> {
    let request = DeleteGroupsRequest {
        groups_names: groups.iter().map(|g| (*g).into()).collect(),
        ..Default::default()
    };
    let response = call!(c, DeleteGroups, request, 2);
    response.results.iter().map(|r| r.error_code).collect()
}

/// A KIP-848 member (v1, its own member ID) joins `group` subscribed to `topics`: (error code,
/// member epoch).
async fn consumer_join(c: &mut Client, group: &str, topics: &[&str]) -> (i16, i32) {
    let request = ConsumerGroupHeartbeatRequest {
        group_id: group.into(),
        member_id: Uuid::random().expect("uuid").to_string().into(),
        member_epoch: 0,
        rebalance_timeout_ms: 5000,
        subscribed_topic_names: Some(topics.iter().map(|t| (*t).into()).collect()),
        topic_partitions: Some(Vec::new()),
        ..Default::default()
    };
    let response = call!(c, ConsumerGroupHeartbeat, request, 1);
    (response.error_code, response.member_epoch)
}

/// ConsumerGroupDescribe with authorized operations: each group's (error code, operations,
/// member count).
async fn consumer_describe(c: &mut Client, groups: &[&str]) -> Vec<(i16, i32, usize)> {
    let request = ConsumerGroupDescribeRequest {
        group_ids: groups.iter().map(|g| (*g).into()).collect(),
        include_authorized_operations: true,
        ..Default::default()
    };
    let response = call!(c, ConsumerGroupDescribe, request, 0);
    response
        .groups
        .iter()
        .map(|g| (g.error_code, g.authorized_operations, g.members.len()))
        .collect()
}

/// InitProducerId v4 (idempotent without a transactional ID): (error code, producer ID).
async fn init_producer_id(c: &mut Client, transactional_id: Option<&str>) -> (i16, i64) {
    let request = InitProducerIdRequest {
        transactional_id: transactional_id.map(Into::into),
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
        ..Default::default()
    };
    let response = call!(c, InitProducerId, request, 4);
    (response.error_code, response.producer_id)
}

/// AddPartitionsToTxn v3 of partition 0 of `topics`: each topic's error code, by name.
async fn add_partitions(
    c: &mut Client,
    tid: &str,
    producer_id: i64,
    topics: &[&str],
) -> Vec<(String, i16)> {
    let request = AddPartitionsToTxnRequest {
        v3_and_below_transactional_id: tid.into(),
        v3_and_below_producer_id: producer_id,
        v3_and_below_producer_epoch: 0,
        v3_and_below_topics: topics
            .iter()
            .map(|topic| AddPartitionsToTxnTopic {
                name: (*topic).into(),
                partitions: vec![0],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let response = call!(c, AddPartitionsToTxn, request, 3);
    let mut codes: Vec<(String, i16)> = response
        .results_by_topic_v3_and_below
        .iter()
        .map(|t| {
            (
                t.name.to_string(),
                t.results_by_partition[0].partition_error_code,
            )
        })
        .collect();
    codes.sort();
    codes
}

async fn add_offsets(c: &mut Client, tid: &str, producer_id: i64, group: &str) -> i16 {
    let request = AddOffsetsToTxnRequest {
        transactional_id: tid.into(),
        producer_id,
        producer_epoch: 0,
        group_id: group.into(),
        ..Default::default()
    };
    call!(c, AddOffsetsToTxn, request, 3).error_code
}

/// TxnOffsetCommit v3 (no member) of offset 1 on partition 0 of `topics`: each topic's error
/// code, by name.
async fn txn_commit(
    c: &mut Client,
    tid: &str,
    producer_id: i64,
    group: &str,
    topics: &[&str],
) -> Vec<(String, i16)> {
    let request = TxnOffsetCommitRequest {
        transactional_id: tid.into(),
        group_id: group.into(),
        producer_id,
        producer_epoch: 0,
        generation_id: -1,
        topics: topics
            .iter()
            .map(|topic| TxnOffsetCommitRequestTopic {
                name: (*topic).into(),
                partitions: vec![TxnOffsetCommitRequestPartition {
                    partition_index: 0,
                    committed_offset: 1,
                    committed_leader_epoch: -1,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let response = call!(c, TxnOffsetCommit, request, 3);
    let mut codes: Vec<(String, i16)> = response
        .topics
        .iter()
        .map(|t| (t.name.to_string(), t.partitions[0].error_code))
        .collect();
    codes.sort();
    codes
}

async fn end_txn(c: &mut Client, tid: &str, producer_id: i64) -> i16 {
    let request = EndTxnRequest {
        transactional_id: tid.into(),
        producer_id,
        producer_epoch: 0,
        committed: true,
        ..Default::default()
    };
    call!(c, EndTxn, request, 3).error_code
}

fn codes(pairs: &[(&str, i16)]) -> Vec<(String, i16)> {
    pairs.iter().map(|(n, c)| ((*n).to_string(), *c)).collect()
}

// ----- tests -----------------------------------------------------------------------------------

#[tokio::test]
async fn find_coordinator_needs_describe_on_the_group_or_transactional_id() {
    let mut s = Secured::start().await;
    let mut alice = s.login("alice").await;

    assert_eq!(
        find_coordinator(&mut alice, KEY_TYPE_GROUP, "g").await,
        (error_codes::GROUP_AUTHORIZATION_FAILED, -1)
    );
    assert_eq!(
        find_coordinator(&mut alice, KEY_TYPE_TRANSACTION, "tx").await,
        (error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
    );

    s.grant(vec![
        allow("alice", AclOperation::Describe, ResourceType::Group, "g"),
        allow_prefixed(
            "alice",
            AclOperation::Describe,
            ResourceType::TransactionalId,
            "tx-",
        ),
    ])
    .await;
    let node = s.tb.broker().node_id();
    assert_eq!(
        find_coordinator(&mut alice, KEY_TYPE_GROUP, "g").await,
        (error_codes::NONE, node)
    );
    // v4: each key on its own.
    assert_eq!(
        find_coordinators(&mut alice, KEY_TYPE_GROUP, &["g", "other"]).await,
        [error_codes::NONE, error_codes::GROUP_AUTHORIZATION_FAILED]
    );
    assert_eq!(
        find_coordinators(&mut alice, KEY_TYPE_TRANSACTION, &["tx-1", "tx"]).await,
        [
            error_codes::NONE,
            error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        ]
    );
    s.tb.stop().await;
}

#[tokio::test]
async fn classic_membership_needs_read_on_the_group() {
    let mut s = Secured::start().await;
    let mut alice = s.login("alice").await;

    assert_eq!(
        join_alone(&mut alice, "app-1").await.0,
        error_codes::GROUP_AUTHORIZATION_FAILED
    );
    // DESCRIBE is not enough.
    s.grant(vec![allow(
        "alice",
        AclOperation::Describe,
        ResourceType::Group,
        "app-1",
    )])
    .await;
    assert_eq!(
        join_alone(&mut alice, "app-1").await.0,
        error_codes::GROUP_AUTHORIZATION_FAILED
    );

    // The admin forms the group, so alice's other calls reach a real member.
    let (_, member, generation) = join_alone(&mut s.admin, "app-1").await;
    assert_eq!(
        sync_group(&mut s.admin, "app-1", &member, generation).await,
        error_codes::NONE
    );
    for code in [
        sync_group(&mut alice, "app-1", &member, generation).await,
        heartbeat(&mut alice, "app-1", &member, generation).await,
        leave_group(&mut alice, "app-1", &member).await,
    ] {
        assert_eq!(code, error_codes::GROUP_AUTHORIZATION_FAILED);
    }

    // READ on every group starting with "app-", except a DENY on one of them.
    s.grant(vec![
        allow_prefixed("alice", AclOperation::Read, ResourceType::Group, "app-"),
        deny(
            "alice",
            AclOperation::Read,
            ResourceType::Group,
            "app-blocked",
        ),
    ])
    .await;
    assert_eq!(
        heartbeat(&mut alice, "app-1", &member, generation).await,
        error_codes::NONE
    );
    assert_eq!(
        sync_group(&mut alice, "app-1", &member, generation).await,
        error_codes::NONE
    );
    assert_eq!(
        leave_group(&mut alice, "app-1", &member).await,
        error_codes::NONE
    );
    let (code, own, own_generation) = join_alone(&mut alice, "app-2").await;
    assert_eq!(code, error_codes::NONE);
    assert_eq!(
        sync_group(&mut alice, "app-2", &own, own_generation).await,
        error_codes::NONE
    );
    assert_eq!(
        join_alone(&mut alice, "app-blocked").await.0,
        error_codes::GROUP_AUTHORIZATION_FAILED
    );
    s.tb.stop().await;
}

#[tokio::test]
async fn offsets_need_the_group_then_each_topic() {
    let mut s = Secured::start().await;
    s.create_topics(&["t-open", "t-closed"]).await;
    // The admin commits to both topics, for alice's fetches to have something to hide.
    assert_eq!(
        commit(&mut s.admin, "offsets", &["t-closed", "t-open"]).await,
        codes(&[("t-closed", 0), ("t-open", 0)])
    );
    let mut alice = s.login("alice").await;
    let both = ["t-closed", "t-open"];

    // No ACL on the group: the whole request is refused.
    assert_eq!(
        commit(&mut alice, "offsets", &both).await,
        codes(&[
            ("t-closed", error_codes::GROUP_AUTHORIZATION_FAILED),
            ("t-open", error_codes::GROUP_AUTHORIZATION_FAILED),
        ])
    );
    assert_eq!(
        fetch_offsets(&mut alice, &["offsets"], Some(&both)).await,
        [(error_codes::GROUP_AUTHORIZATION_FAILED, vec![])]
    );
    let v7 = OffsetFetchRequest {
        group_id: "offsets".into(),
        topics: Some(vec![OffsetFetchRequestTopic {
            name: "t-open".into(),
            partition_indexes: vec![0],
            ..Default::default()
        }]),
        ..Default::default()
    };
    let response = call!(alice, OffsetFetch, v7, 7);
    assert_eq!(response.error_code, error_codes::GROUP_AUTHORIZATION_FAILED);
    assert_eq!(
        delete_offsets(&mut alice, "offsets", &both).await,
        (error_codes::GROUP_AUTHORIZATION_FAILED, vec![])
    );

    // READ on the group and on one topic.
    s.grant(vec![
        allow("alice", AclOperation::Read, ResourceType::Group, "offsets"),
        allow("alice", AclOperation::Read, ResourceType::Topic, "t-open"),
    ])
    .await;
    assert_eq!(
        commit(&mut alice, "offsets", &both).await,
        codes(&[
            ("t-closed", error_codes::TOPIC_AUTHORIZATION_FAILED),
            ("t-open", error_codes::NONE),
        ])
    );
    // Only unreadable topics: refused without touching the group.
    assert_eq!(
        commit(&mut alice, "offsets", &["t-closed"]).await,
        codes(&[("t-closed", error_codes::TOPIC_AUTHORIZATION_FAILED)])
    );
    // Fetching: READ implies DESCRIBE on the group and on t-open. Asked-for topics it may not
    // DESCRIBE are answered TOPIC_AUTHORIZATION_FAILED; a fetch of everything leaves them out.
    assert_eq!(
        fetch_offsets(&mut alice, &["offsets", "elsewhere"], Some(&both)).await,
        [
            (
                error_codes::NONE,
                vec![
                    (
                        "t-closed".to_string(),
                        error_codes::TOPIC_AUTHORIZATION_FAILED,
                        -1
                    ),
                    ("t-open".to_string(), error_codes::NONE, 1),
                ]
            ),
            (error_codes::GROUP_AUTHORIZATION_FAILED, vec![]),
        ]
    );
    assert_eq!(
        fetch_offsets(&mut alice, &["offsets"], None).await,
        [(
            error_codes::NONE,
            vec![("t-open".to_string(), error_codes::NONE, 1)]
        )]
    );
    let response = call!(
        alice,
        OffsetFetch,
        OffsetFetchRequest {
            group_id: "offsets".into(),
            topics: None,
            ..Default::default()
        },
        7
    );
    let names: Vec<String> = response.topics.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["t-open"]);

    // OffsetDelete needs DELETE on the group, then READ on each topic.
    assert_eq!(
        delete_offsets(&mut alice, "offsets", &both).await,
        (error_codes::GROUP_AUTHORIZATION_FAILED, vec![])
    );
    s.grant(vec![allow(
        "alice",
        AclOperation::Delete,
        ResourceType::Group,
        "offsets",
    )])
    .await;
    assert_eq!(
        delete_offsets(&mut alice, "offsets", &both).await,
        (
            error_codes::NONE,
            codes(&[
                ("t-closed", error_codes::TOPIC_AUTHORIZATION_FAILED),
                ("t-open", error_codes::NONE),
            ])
        )
    );
    s.tb.stop().await;
}

#[tokio::test]
async fn listing_describing_and_deleting_groups() {
    let mut s = Secured::start().await;
    s.create_topics(&["t"]).await;
    for group in ["seen", "unseen", "read-only"] {
        assert_eq!(
            commit(&mut s.admin, group, &["t"]).await,
            codes(&[("t", 0)])
        );
    }
    let mut alice = s.login("alice").await;
    let mut bob = s.login("bob").await;

    assert!(list_groups(&mut alice).await.is_empty());
    assert_eq!(
        describe_groups(&mut alice, &["seen"]).await,
        [(error_codes::GROUP_AUTHORIZATION_FAILED, i32::MIN)]
    );
    assert_eq!(
        delete_groups(&mut alice, &["seen"]).await,
        [error_codes::GROUP_AUTHORIZATION_FAILED]
    );

    s.grant(vec![
        allow("alice", AclOperation::Describe, ResourceType::Group, "seen"),
        allow(
            "alice",
            AclOperation::Read,
            ResourceType::Group,
            "read-only",
        ),
        allow(
            "bob",
            AclOperation::Describe,
            ResourceType::Cluster,
            "kafka-cluster",
        ),
    ])
    .await;
    // Without DESCRIBE on the cluster, only the groups it may DESCRIBE (READ implies it).
    assert_eq!(list_groups(&mut alice).await, ["read-only", "seen"]);
    // With it, every group.
    assert_eq!(list_groups(&mut bob).await, ["read-only", "seen", "unseen"]);

    // authorized_operations: what alice may do on each group.
    let describe = bits(&[AclOperation::Describe]);
    let read = bits(&[AclOperation::Read, AclOperation::Describe]);
    assert_eq!(
        describe_groups(&mut alice, &["seen", "unseen", "read-only"]).await,
        [
            (error_codes::NONE, describe),
            (error_codes::GROUP_AUTHORIZATION_FAILED, i32::MIN),
            (error_codes::NONE, read),
        ]
    );
    // The admin, a super user, may do everything.
    let all = bits(&[
        AclOperation::Read,
        AclOperation::Describe,
        AclOperation::Delete,
        AclOperation::DescribeConfigs,
        AclOperation::AlterConfigs,
    ]);
    assert_eq!(
        describe_groups(&mut s.admin, &["seen"]).await,
        [(error_codes::NONE, all)]
    );

    // DeleteGroups needs DELETE on each group.
    s.grant(vec![allow(
        "alice",
        AclOperation::Delete,
        ResourceType::Group,
        "seen",
    )])
    .await;
    assert_eq!(
        delete_groups(&mut alice, &["unseen", "seen"]).await,
        [error_codes::GROUP_AUTHORIZATION_FAILED, error_codes::NONE]
    );
    assert_eq!(list_groups(&mut bob).await, ["read-only", "unseen"]);
    s.tb.stop().await;
}

#[tokio::test]
async fn consumer_groups_need_read_on_the_group_and_describe_on_subscribed_topics() {
    let mut s = Secured::start().await;
    s.create_topics(&["cg-topic"]).await;
    let mut alice = s.login("alice").await;
    let mut bob = s.login("bob").await;

    assert_eq!(
        consumer_join(&mut alice, "cg", &["cg-topic"]).await,
        (error_codes::GROUP_AUTHORIZATION_FAILED, -1)
    );
    s.grant(vec![allow(
        "alice",
        AclOperation::Read,
        ResourceType::Group,
        "cg",
    )])
    .await;
    assert_eq!(
        consumer_join(&mut alice, "cg", &["cg-topic"]).await.0,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );
    s.grant(vec![allow(
        "alice",
        AclOperation::Describe,
        ResourceType::Topic,
        "cg-topic",
    )])
    .await;
    let (code, epoch) = consumer_join(&mut alice, "cg", &["cg-topic"]).await;
    assert_eq!(code, error_codes::NONE);
    assert!(epoch >= 1, "{epoch}");

    // ConsumerGroupDescribe: DESCRIBE on the group (READ implies it), with its operations.
    assert_eq!(
        consumer_describe(&mut alice, &["cg"]).await,
        [(
            error_codes::NONE,
            bits(&[AclOperation::Read, AclOperation::Describe]),
            1
        )]
    );
    assert_eq!(
        consumer_describe(&mut bob, &["cg"]).await,
        [(error_codes::GROUP_AUTHORIZATION_FAILED, i32::MIN, 0)]
    );
    // A group assigning a topic bob may not DESCRIBE stays hidden from him.
    s.grant(vec![allow(
        "bob",
        AclOperation::Describe,
        ResourceType::Group,
        "cg",
    )])
    .await;
    assert_eq!(
        consumer_describe(&mut bob, &["cg"]).await,
        [(error_codes::TOPIC_AUTHORIZATION_FAILED, i32::MIN, 0)]
    );
    s.grant(vec![allow(
        "bob",
        AclOperation::Describe,
        ResourceType::Topic,
        "cg-topic",
    )])
    .await;
    assert_eq!(
        consumer_describe(&mut bob, &["cg"]).await,
        [(error_codes::NONE, bits(&[AclOperation::Describe]), 1)]
    );
    s.tb.stop().await;
}

#[tokio::test]
async fn init_producer_id_needs_write() {
    let mut s = Secured::start().await;
    let mut alice = s.login("alice").await;
    let mut bob = s.login("bob").await;

    // Idempotent: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
    assert_eq!(
        init_producer_id(&mut alice, None).await.0,
        error_codes::CLUSTER_AUTHORIZATION_FAILED
    );
    assert_eq!(
        init_producer_id(&mut bob, None).await.0,
        error_codes::CLUSTER_AUTHORIZATION_FAILED
    );
    s.grant(vec![
        allow_prefixed("alice", AclOperation::Write, ResourceType::Topic, "out-"),
        allow(
            "bob",
            AclOperation::IdempotentWrite,
            ResourceType::Cluster,
            "kafka-cluster",
        ),
    ])
    .await;
    for client in [&mut alice, &mut bob] {
        let (code, producer_id) = init_producer_id(client, None).await;
        assert_eq!(code, error_codes::NONE);
        assert!(producer_id >= 0);
    }

    // Transactional: WRITE on the transactional ID.
    assert_eq!(
        init_producer_id(&mut alice, Some("tx")).await.0,
        error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    );
    s.grant(vec![allow(
        "alice",
        AclOperation::Write,
        ResourceType::TransactionalId,
        "tx",
    )])
    .await;
    assert_eq!(
        init_producer_id(&mut alice, Some("tx")).await.0,
        error_codes::NONE
    );
    s.tb.stop().await;
}

#[tokio::test]
async fn transactions_need_the_transactional_id_the_group_and_each_topic() {
    let mut s = Secured::start().await;
    s.create_topics(&["in", "out", "secret"]).await;
    let mut alice = s.login("alice").await;
    let mut bob = s.login("bob").await;
    s.grant(vec![
        allow(
            "alice",
            AclOperation::Write,
            ResourceType::TransactionalId,
            "tx",
        ),
        allow("alice", AclOperation::Write, ResourceType::Topic, "out"),
        allow("alice", AclOperation::Read, ResourceType::Topic, "in"),
    ])
    .await;
    let (code, producer_id) = init_producer_id(&mut alice, Some("tx")).await;
    assert_eq!(code, error_codes::NONE);

    // Someone without WRITE on the transactional ID gets nowhere.
    assert_eq!(
        add_partitions(&mut bob, "tx", producer_id, &["out"]).await,
        codes(&[("out", error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)])
    );
    assert_eq!(
        add_offsets(&mut bob, "tx", producer_id, "txg").await,
        error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    );
    assert_eq!(
        txn_commit(&mut bob, "tx", producer_id, "txg", &["in"]).await,
        codes(&[("in", error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)])
    );
    assert_eq!(
        end_txn(&mut bob, "tx", producer_id).await,
        error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    );

    // AddPartitionsToTxn: WRITE on each topic; one refused partition stops them all.
    assert_eq!(
        add_partitions(&mut alice, "tx", producer_id, &["out", "secret"]).await,
        codes(&[
            ("out", error_codes::OPERATION_NOT_ATTEMPTED),
            ("secret", error_codes::TOPIC_AUTHORIZATION_FAILED),
        ])
    );
    assert_eq!(
        add_partitions(&mut alice, "tx", producer_id, &["out"]).await,
        codes(&[("out", error_codes::NONE)])
    );

    // AddOffsetsToTxn and TxnOffsetCommit: READ on the group.
    assert_eq!(
        add_offsets(&mut alice, "tx", producer_id, "txg").await,
        error_codes::GROUP_AUTHORIZATION_FAILED
    );
    assert_eq!(
        txn_commit(&mut alice, "tx", producer_id, "txg", &["in"]).await,
        codes(&[("in", error_codes::GROUP_AUTHORIZATION_FAILED)])
    );
    s.grant(vec![allow(
        "alice",
        AclOperation::Read,
        ResourceType::Group,
        "txg",
    )])
    .await;
    assert_eq!(
        add_offsets(&mut alice, "tx", producer_id, "txg").await,
        error_codes::NONE
    );
    // TxnOffsetCommit: then READ on each topic.
    assert_eq!(
        txn_commit(&mut alice, "tx", producer_id, "txg", &["in", "secret"]).await,
        codes(&[
            ("in", error_codes::NONE),
            ("secret", error_codes::TOPIC_AUTHORIZATION_FAILED),
        ])
    );
    assert_eq!(
        end_txn(&mut alice, "tx", producer_id).await,
        error_codes::NONE
    );
    s.tb.stop().await;
}

#[tokio::test]
async fn transaction_views_need_describe_and_producer_views_read() {
    let mut s = Secured::start().await;
    s.create_topics(&["shown", "hidden"]).await;
    // The admin opens a transaction on both topics, and has another transactional ID.
    let (code, producer_id) = init_producer_id(&mut s.admin, Some("tx-shown")).await;
    assert_eq!(code, error_codes::NONE);
    assert_eq!(
        add_partitions(&mut s.admin, "tx-shown", producer_id, &["hidden", "shown"]).await,
        codes(&[("hidden", 0), ("shown", 0)])
    );
    assert_eq!(
        init_producer_id(&mut s.admin, Some("tx-hidden")).await.0,
        error_codes::NONE
    );
    let mut alice = s.login("alice").await;

    let describe = |ids: &[&str]| DescribeTransactionsRequest {
        transactional_ids: ids.iter().map(|id| (*id).into()).collect(),
        ..Default::default()
    };
    let response = call!(alice, DescribeTransactions, describe(&["tx-shown"]), 0);
    assert_eq!(
        response.transaction_states[0].error_code,
        error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    );
    let response = call!(
        alice,
        ListTransactions,
        ListTransactionsRequest::default(),
        1
    );
    assert!(response.transaction_states.is_empty(), "{response:?}");
    let producers = DescribeProducersRequest {
        topics: vec![TopicRequest {
            name: "shown".into(),
            partition_indexes: vec![0],
            ..Default::default()
        }],
        ..Default::default()
    };
    let response = call!(alice, DescribeProducers, producers.clone(), 0);
    assert_eq!(
        response.topics[0].partitions[0].error_code,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );

    s.grant(vec![
        allow(
            "alice",
            AclOperation::Describe,
            ResourceType::TransactionalId,
            "tx-shown",
        ),
        allow(
            "alice",
            AclOperation::Describe,
            ResourceType::Topic,
            "shown",
        ),
    ])
    .await;
    // Each transaction shows only the topics alice may DESCRIBE.
    let response = call!(
        alice,
        DescribeTransactions,
        describe(&["tx-hidden", "tx-shown"]),
        0
    );
    let states: Vec<(String, i16, Vec<String>)> = response
        .transaction_states
        .iter()
        .map(|t| {
            (
                t.transactional_id.to_string(),
                t.error_code,
                t.topics.iter().map(|d| d.topic.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            (
                "tx-hidden".to_string(),
                error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                vec![]
            ),
            (
                "tx-shown".to_string(),
                error_codes::NONE,
                vec!["shown".to_string()]
            ),
        ]
    );
    let response = call!(
        alice,
        ListTransactions,
        ListTransactionsRequest::default(),
        1
    );
    let listed: Vec<String> = response
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.to_string())
        .collect();
    assert_eq!(listed, ["tx-shown"]);
    // DescribeProducers needs READ, not DESCRIBE.
    let response = call!(alice, DescribeProducers, producers.clone(), 0);
    assert_eq!(
        response.topics[0].partitions[0].error_code,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );
    s.grant(vec![allow(
        "alice",
        AclOperation::Read,
        ResourceType::Topic,
        "shown",
    )])
    .await;
    let response = call!(alice, DescribeProducers, producers, 0);
    assert_eq!(
        response.topics[0].partitions[0].error_code,
        error_codes::NONE
    );
    s.tb.stop().await;
}

/// ShareFetch and ShareAcknowledge need READ on the group (GROUP_AUTHORIZATION_FAILED for the
/// request), then READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions), as Kafka.
#[tokio::test]
async fn share_fetch_and_acknowledge_need_read_on_the_group_then_each_topic() {
    use skiff_protocol::generated::share_acknowledge_request::{
        AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch,
    };
    use skiff_protocol::generated::share_fetch_request::{FetchPartition, FetchTopic};
    use skiff_protocol::generated::{
        ShareAcknowledgeRequest, ShareFetchRequest, ShareGroupHeartbeatRequest,
    };

    let mut s = Secured::start().await;
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: "jobs".into(),
            num_partitions: 1,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    let topic_id = call!(s.admin, CreateTopics, request, 7).topics[0].topic_id;
    let mut alice = s.login("alice").await;
    let fetch = |epoch: i32| ShareFetchRequest {
        group_id: Some("sg".into()),
        member_id: Some("m1".into()),
        share_session_epoch: epoch,
        max_bytes: 1 << 20,
        max_records: 10,
        topics: vec![FetchTopic {
            topic_id,
            partitions: vec![FetchPartition {
                partition_index: 0,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let acknowledge = ShareAcknowledgeRequest {
        group_id: Some("sg".into()),
        member_id: Some("m1".into()),
        share_session_epoch: 1,
        topics: vec![AcknowledgeTopic {
            topic_id,
            partitions: vec![AcknowledgePartition {
                partition_index: 0,
                acknowledgement_batches: vec![AcknowledgementBatch {
                    first_offset: 0,
                    last_offset: 0,
                    acknowledge_types: vec![1],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let r = call!(alice, ShareFetch, fetch(0), 1);
    assert_eq!(r.error_code, error_codes::GROUP_AUTHORIZATION_FAILED);
    let r = call!(alice, ShareAcknowledge, acknowledge.clone(), 1);
    assert_eq!(r.error_code, error_codes::GROUP_AUTHORIZATION_FAILED);

    s.grant(vec![
        allow("alice", AclOperation::Read, ResourceType::Group, "sg"),
        allow("alice", AclOperation::Describe, ResourceType::Topic, "jobs"),
    ])
    .await;
    let join = ShareGroupHeartbeatRequest {
        group_id: "sg".into(),
        member_id: "m1".into(),
        member_epoch: 0,
        subscribed_topic_names: Some(vec!["jobs".into()]),
        ..Default::default()
    };
    assert_eq!(call!(alice, ShareGroupHeartbeat, join, 1).error_code, 0);
    let r = call!(alice, ShareFetch, fetch(0), 1);
    assert_eq!(r.error_code, error_codes::NONE);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );
    let r = call!(alice, ShareAcknowledge, acknowledge.clone(), 1);
    assert_eq!(r.error_code, error_codes::NONE);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );

    s.grant(vec![allow(
        "alice",
        AclOperation::Read,
        ResourceType::Topic,
        "jobs",
    )])
    .await;
    let r = call!(alice, ShareFetch, fetch(0), 1);
    assert_eq!(r.error_code, error_codes::NONE);
    assert_eq!(r.responses[0].partitions[0].error_code, error_codes::NONE);
    // Nothing acquired: acknowledging offset 0 is refused by the share partition, not the ACLs.
    let r = call!(alice, ShareAcknowledge, acknowledge, 1);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        error_codes::INVALID_RECORD_STATE
    );
}

/// The share group offset APIs, as Kafka's `KafkaApis`: describing needs DESCRIBE on the group
/// and on each topic (an undescribable named topic is TOPIC_AUTHORIZATION_FAILED per partition,
/// and left out of an all-topics answer); altering needs READ on the group and each topic;
/// deleting DELETE on the group and READ on each topic.
#[tokio::test]
async fn share_group_offsets_need_kafkas_acls() {
    use skiff_protocol::generated::alter_share_group_offsets_request::{
        AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
    };
    use skiff_protocol::generated::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
    use skiff_protocol::generated::describe_share_group_offsets_request::{
        DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
    };
    use skiff_protocol::generated::{
        AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsRequest,
    };

    let mut s = Secured::start().await;
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: "jobs".into(),
            num_partitions: 1,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    call!(s.admin, CreateTopics, request, 7);
    let mut alice = s.login("alice").await;
    let alter = AlterShareGroupOffsetsRequest {
        group_id: "sg".into(),
        topics: vec![AlterShareGroupOffsetsRequestTopic {
            topic_name: "jobs".into(),
            partitions: vec![AlterShareGroupOffsetsRequestPartition {
                partition_index: 0,
                start_offset: 0,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let describe = |topics: Option<Vec<DescribeShareGroupOffsetsRequestTopic>>| {
        DescribeShareGroupOffsetsRequest {
            groups: vec![DescribeShareGroupOffsetsRequestGroup {
                group_id: "sg".into(),
                topics,
                ..Default::default()
            }],
            ..Default::default()
        }
    };
    let jobs = || {
        Some(vec![DescribeShareGroupOffsetsRequestTopic {
            topic_name: "jobs".into(),
            partitions: vec![0],
            ..Default::default()
        }])
    };
    let delete = DeleteShareGroupOffsetsRequest {
        group_id: "sg".into(),
        topics: vec![DeleteShareGroupOffsetsRequestTopic {
            topic_name: "jobs".into(),
            ..Default::default()
        }],
        ..Default::default()
    };

    // Nothing granted: each refused for the group.
    let r = call!(alice, AlterShareGroupOffsets, alter.clone(), 0);
    assert_eq!(r.error_code, error_codes::GROUP_AUTHORIZATION_FAILED);
    let r = call!(alice, DescribeShareGroupOffsets, describe(None), 1);
    assert_eq!(
        r.groups[0].error_code,
        error_codes::GROUP_AUTHORIZATION_FAILED
    );
    let r = call!(alice, DeleteShareGroupOffsets, delete.clone(), 0);
    assert_eq!(r.error_code, error_codes::GROUP_AUTHORIZATION_FAILED);

    // The group, not the topic: refused per topic.
    s.grant(vec![
        allow("alice", AclOperation::Read, ResourceType::Group, "sg"),
        allow("alice", AclOperation::Describe, ResourceType::Group, "sg"),
        allow("alice", AclOperation::Delete, ResourceType::Group, "sg"),
    ])
    .await;
    let r = call!(alice, AlterShareGroupOffsets, alter.clone(), 0);
    assert_eq!(r.error_code, error_codes::NONE);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );
    // The admin (a super user) sets the offset, so that there is something to describe.
    let r = call!(s.admin, AlterShareGroupOffsets, alter.clone(), 0);
    assert_eq!(r.responses[0].partitions[0].error_code, error_codes::NONE);
    let r = call!(alice, DescribeShareGroupOffsets, describe(jobs()), 1);
    let p = &r.groups[0].topics[0].partitions[0];
    assert_eq!(
        (p.error_code, p.start_offset),
        (error_codes::TOPIC_AUTHORIZATION_FAILED, -1)
    );
    let r = call!(alice, DescribeShareGroupOffsets, describe(None), 1);
    assert_eq!(r.groups[0].error_code, error_codes::NONE);
    assert!(r.groups[0].topics.is_empty());
    let r = call!(alice, DeleteShareGroupOffsets, delete.clone(), 0);
    assert_eq!(r.error_code, error_codes::NONE);
    assert_eq!(
        r.responses[0].error_code,
        error_codes::TOPIC_AUTHORIZATION_FAILED
    );

    // And the topic: allowed.
    s.grant(vec![
        allow("alice", AclOperation::Read, ResourceType::Topic, "jobs"),
        allow("alice", AclOperation::Describe, ResourceType::Topic, "jobs"),
    ])
    .await;
    let r = call!(alice, DescribeShareGroupOffsets, describe(None), 1);
    assert_eq!(r.groups[0].topics[0].partitions[0].start_offset, 0);
    let r = call!(alice, AlterShareGroupOffsets, alter, 0);
    assert_eq!(r.responses[0].partitions[0].error_code, error_codes::NONE);
    let r = call!(alice, DeleteShareGroupOffsets, delete, 0);
    assert_eq!(r.responses[0].error_code, error_codes::NONE);
    s.tb.stop().await;
}
