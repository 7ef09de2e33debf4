//! KIP-932 share group membership over TCP against a real broker (`group.share.enable = true`):
//! ShareGroupHeartbeat and ShareGroupDescribe, the initialization of share-partition state
//! before partitions are assigned, the group ID's one type at a time, leaving, session expiry,
//! ListGroups and DeleteGroups, a restart on the same data directory, and the switch that keeps
//! the APIs unadvertised.

mod common;

use common::create_topic_with_partitions as create_topic;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{Client, TIMEOUT, TestBroker, batch, produce_request};
use skiff_protocol::generated::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use skiff_protocol::generated::join_group_request::JoinGroupRequestProtocol;
use skiff_protocol::generated::share_group_describe_response::DescribedGroup;
use skiff_protocol::generated::share_group_heartbeat_response::ShareGroupHeartbeatResponse;
use skiff_protocol::generated::{
    ApiVersionsRequest, ConsumerGroupHeartbeatRequest, DeleteGroupsRequest, DescribeGroupsRequest,
    IncrementalAlterConfigsRequest, JoinGroupRequest, ListGroupsRequest, ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
};
use skiff_protocol::{ApiKey, Response, Uuid, error_codes};

const TOPIC: &str = "work";
const GROUP: &str = "workers";
const SESSION_MS: i64 = 1500;
const HEARTBEAT_MS: i64 = 500;

fn share_config(config: &mut skiff_broker::BrokerConfig) {
    config.share_groups_enabled = true;
    config.groups.share_session_timeout_ms = SESSION_MS;
    config.groups.share_heartbeat_interval_ms = HEARTBEAT_MS;
}

async fn heartbeat(
    c: &mut Client,
    group: &str,
    member: &str,
    epoch: i32,
    topics: Option<&[&str]>,
) -> ShareGroupHeartbeatResponse {
    let request = ShareGroupHeartbeatRequest {
        group_id: group.into(),
        member_id: member.into(),
        member_epoch: epoch,
        subscribed_topic_names: topics.map(|t| t.iter().map(|n| (*n).into()).collect()),
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::ShareGroupHeartbeat(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// The partitions of an assignment, as (topic ID, partition).
fn partitions(r: &ShareGroupHeartbeatResponse) -> Option<BTreeSet<(Uuid, i32)>> {
    r.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .flat_map(|tp| tp.partitions.iter().map(|p| (tp.topic_id, *p)))
            .collect()
    })
}

/// Member ID -> (member epoch, assigned partitions).
type Members = BTreeMap<String, (i32, BTreeSet<(Uuid, i32)>)>;

/// Heartbeats every member in turn (each at the epoch it was last given) until each holds a
/// non-empty assignment; at most 20 rounds. Returns each member's partitions and epoch.
async fn until_assigned(c: &mut Client, group: &str, members: &mut Members) {
    for _ in 0..20 {
        let ids: Vec<String> = members.keys().cloned().collect();
        for id in ids {
            let epoch = members.get(&id).map_or(0, |m| m.0);
            let r = heartbeat(c, group, &id, epoch, None).await;
            assert_eq!(r.error_code, 0, "{id}: {:?}", r.error_message);
            let entry = members.entry(id).or_default();
            entry.0 = r.member_epoch;
            if let Some(assigned) = partitions(&r) {
                entry.1 = assigned;
            }
        }
        if members.values().all(|(_, assigned)| !assigned.is_empty()) {
            return;
        }
    }
    panic!("not every member was assigned partitions: {members:?}");
}

async fn describe(c: &mut Client, group: &str) -> DescribedGroup {
    let request = ShareGroupDescribeRequest {
        group_ids: vec![group.into()],
        include_authorized_operations: true,
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::ShareGroupDescribe(mut r) => r.groups.remove(0),
        other => panic!("unexpected {other:?}"),
    }
}

fn member_ids(group: &DescribedGroup) -> Vec<String> {
    group
        .members
        .iter()
        .map(|m| m.member_id.to_string())
        .collect()
}

/// ListGroups v5 with a type filter: (group ID, state, type, protocol type).
async fn list(
    c: &mut Client,
    types: &[&str],
    states: &[&str],
) -> Vec<(String, String, String, String)> {
    let request = ListGroupsRequest {
        types_filter: types.iter().map(|t| (*t).into()).collect(),
        states_filter: states.iter().map(|s| (*s).into()).collect(),
        ..Default::default()
    };
    match c.call(request, 5).await {
        Response::ListGroups(r) => {
            assert_eq!(r.error_code, 0);
            r.groups
                .iter()
                .map(|g| {
                    (
                        g.group_id.to_string(),
                        g.group_state.to_string(),
                        g.group_type.to_string(),
                        g.protocol_type.to_string(),
                    )
                })
                .collect()
        }
        other => panic!("unexpected {other:?}"),
    }
}

async fn delete_group(c: &mut Client, group: &str) -> i16 {
    let request = DeleteGroupsRequest {
        groups_names: vec![group.into()],
        ..Default::default()
    };
    match c.call(request, 2).await {
        Response::DeleteGroups(r) => r.results[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

/// Waits (polling ShareGroupDescribe) until the group's members are exactly `expected`.
async fn until_members(c: &mut Client, group: &str, expected: &[&str]) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let described = describe(c, group).await;
        if member_ids(&described) == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "members {:?}, expected {expected:?}",
            member_ids(&described)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_group_membership_state_and_lifecycle() {
    let broker = TestBroker::start_with(share_config).await;
    let mut c = broker.client().await;
    let topic_id = create_topic(&mut c, TOPIC, 4).await;
    // Three records in partition 0: `latest` starts that share partition at 3, the others at 0.
    let Response::Produce(p) = c
        .call(produce_request(TOPIC, 0, -1, batch(&[b"a", b"b", b"c"])), 9)
        .await
    else {
        panic!("not a produce response");
    };
    assert_eq!(p.responses[0].partition_responses[0].error_code, 0);

    // Members choose their IDs: an empty one is refused.
    let r = heartbeat(&mut c, GROUP, "", 0, Some(&[TOPIC])).await;
    assert_eq!(r.error_code, error_codes::INVALID_REQUEST);
    assert_eq!(
        r.error_message.as_deref(),
        Some("Invalid member id in the request.")
    );
    // A heartbeat that is not a join, to a group that does not exist.
    let r = heartbeat(&mut c, GROUP, "m1", 1, None).await;
    assert_eq!(r.error_code, error_codes::GROUP_ID_NOT_FOUND);

    // The first join comes back with an empty assignment: the partitions' share state is
    // initialized during it and assigned from the next heartbeat on.
    let r = heartbeat(&mut c, GROUP, "m1", 0, Some(&[TOPIC])).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(r.member_id.as_deref(), Some("m1"));
    assert_eq!(i64::from(r.heartbeat_interval_ms), HEARTBEAT_MS);
    assert_eq!(partitions(&r), Some(BTreeSet::new()));
    let states = broker.broker().share_partition_states(GROUP);
    assert_eq!(
        states,
        vec![
            (topic_id, 0, 3, 0),
            (topic_id, 1, 0, 0),
            (topic_id, 2, 0, 0),
            (topic_id, 3, 0, 0),
        ]
    );

    let r2 = heartbeat(&mut c, GROUP, "m2", 0, Some(&[TOPIC])).await;
    assert_eq!(r2.error_code, 0, "{:?}", r2.error_message);
    let mut members: Members = BTreeMap::from([
        ("m1".to_string(), (r.member_epoch, BTreeSet::new())),
        (
            "m2".to_string(),
            (r2.member_epoch, partitions(&r2).unwrap_or_default()),
        ),
    ]);
    until_assigned(&mut c, GROUP, &mut members).await;
    // Four partitions, two members: two each, every partition held once.
    let all: BTreeSet<(Uuid, i32)> = (0..4).map(|p| (topic_id, p)).collect();
    let m1 = members["m1"].1.clone();
    let m2 = members["m2"].1.clone();
    assert_eq!((m1.len(), m2.len()), (2, 2), "{members:?}");
    assert_eq!(m1.union(&m2).copied().collect::<BTreeSet<_>>(), all);

    // ShareGroupDescribe shows both members with their assignments.
    let described = describe(&mut c, GROUP).await;
    assert_eq!(described.error_code, 0);
    assert_eq!(&*described.group_state, "Stable");
    assert_eq!(&*described.assignor_name, "simple");
    assert_eq!(member_ids(&described), ["m1", "m2"]);
    assert!(described.authorized_operations > 0);
    for member in &described.members {
        assert_eq!(&*member.client_id, "skiff-test");
        assert_eq!(member.subscribed_topic_names, vec![TOPIC]);
        assert_eq!(member.assignment.topic_partitions.len(), 1);
        assert_eq!(&*member.assignment.topic_partitions[0].topic_name, TOPIC);
        assert_eq!(member.assignment.topic_partitions[0].partitions.len(), 2);
    }
    let missing = describe(&mut c, "nobody").await;
    assert_eq!(missing.error_code, error_codes::GROUP_ID_NOT_FOUND);

    // ListGroups knows the share type, with its type and state filters.
    let share = (
        GROUP.to_string(),
        "Stable".to_string(),
        "share".to_string(),
        "share".to_string(),
    );
    assert_eq!(list(&mut c, &["share"], &[]).await, vec![share.clone()]);
    assert_eq!(list(&mut c, &["Share"], &["stable"]).await, vec![share]);
    assert!(list(&mut c, &["share"], &["empty"]).await.is_empty());
    assert!(list(&mut c, &["consumer", "classic"], &[]).await.is_empty());

    // The group ID is a share group's: the other protocols are refused as Kafka refuses them.
    let request = ConsumerGroupHeartbeatRequest {
        group_id: GROUP.into(),
        member_id: "c1".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 5000,
        subscribed_topic_names: Some(vec![TOPIC.into()]),
        topic_partitions: Some(vec![]),
        ..Default::default()
    };
    let Response::ConsumerGroupHeartbeat(r) = c.call(request, 1).await else {
        panic!("not a ConsumerGroupHeartbeat response");
    };
    assert_eq!(r.error_code, error_codes::GROUP_ID_NOT_FOUND);
    assert_eq!(
        r.error_message.as_deref(),
        Some("Group workers is not a consumer group.")
    );
    let request = JoinGroupRequest {
        group_id: GROUP.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: bytes::Bytes::new(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::JoinGroup(r) = c.call(request, 9).await else {
        panic!("not a JoinGroup response");
    };
    assert_eq!(r.error_code, error_codes::INCONSISTENT_GROUP_PROTOCOL);
    let request = DescribeGroupsRequest {
        groups: vec![GROUP.into()],
        ..Default::default()
    };
    let Response::DescribeGroups(r) = c.call(request, 6).await else {
        panic!("not a DescribeGroups response");
    };
    assert_eq!(r.groups[0].error_code, error_codes::GROUP_ID_NOT_FOUND);
    assert_eq!(
        r.groups[0].error_message.as_deref(),
        Some("Group workers is not a classic group.")
    );
    // A non-empty share group is not deleted.
    assert_eq!(
        delete_group(&mut c, GROUP).await,
        error_codes::NON_EMPTY_GROUP
    );

    // A member that leaves (epoch -1) is gone at once.
    let r = heartbeat(&mut c, GROUP, "m2", -1, None).await;
    assert_eq!((r.error_code, r.member_epoch), (0, -1));
    assert_eq!(member_ids(&describe(&mut c, GROUP).await), ["m1"]);

    // A restart on the same data directory keeps the group, its member and the share-partition
    // states.
    let before = broker.broker().share_partition_states(GROUP);
    drop(c);
    let broker = broker.restart_with(share_config).await;
    let mut c = broker.client().await;
    assert_eq!(broker.broker().share_partition_states(GROUP), before);
    let described = describe(&mut c, GROUP).await;
    assert_eq!(member_ids(&described), ["m1"]);
    assert_eq!(described.members[0].assignment.topic_partitions.len(), 1);

    // m1 goes silent: its session expires and the group is empty.
    until_members(&mut c, GROUP, &[]).await;
    assert_eq!(&*describe(&mut c, GROUP).await.group_state, "Empty");
    // The member is gone: its heartbeats are refused until it joins again.
    let epoch = members["m1"].0;
    let r = heartbeat(&mut c, GROUP, "m1", epoch, None).await;
    assert_eq!(r.error_code, error_codes::UNKNOWN_MEMBER_ID);

    // DeleteGroups removes the empty group and its share-partition states.
    assert_eq!(delete_group(&mut c, GROUP).await, error_codes::NONE);
    assert!(broker.broker().share_partition_states(GROUP).is_empty());
    assert!(list(&mut c, &["share"], &[]).await.is_empty());
    assert_eq!(
        describe(&mut c, GROUP).await.error_code,
        error_codes::GROUP_ID_NOT_FOUND
    );
    assert_eq!(
        delete_group(&mut c, GROUP).await,
        error_codes::GROUP_ID_NOT_FOUND
    );
    // Deleted, it stays deleted across a restart.
    drop(c);
    let broker = broker.restart_with(share_config).await;
    let mut c = broker.client().await;
    assert!(list(&mut c, &[], &[]).await.is_empty());
    assert!(broker.broker().share_partition_states(GROUP).is_empty());
    broker.stop().await;
}

/// `share.auto.offset.reset = earliest` (a group config) starts new share partitions at the
/// log start offset; a consumer group's ID refuses share heartbeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_configs_choose_the_start_offset_and_types_do_not_mix() {
    let broker = TestBroker::start_with(share_config).await;
    let mut c = broker.client().await;
    let topic_id = create_topic(&mut c, TOPIC, 1).await;
    let Response::Produce(p) = c
        .call(produce_request(TOPIC, 0, -1, batch(&[b"a", b"b"])), 9)
        .await
    else {
        panic!("not a produce response");
    };
    assert_eq!(p.responses[0].partition_responses[0].error_code, 0);
    let request = IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: 32,
            resource_name: "from-start".into(),
            configs: vec![AlterableConfig {
                name: "share.auto.offset.reset".into(),
                config_operation: 0,
                value: Some("earliest".into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::IncrementalAlterConfigs(r) = c.call(request, 1).await else {
        panic!("not an IncrementalAlterConfigs response");
    };
    assert_eq!(r.responses[0].error_code, 0, "{:?}", r.responses[0]);
    for (group, start) in [("from-start", 0), ("from-end", 2)] {
        let r = heartbeat(&mut c, group, "m", 0, Some(&[TOPIC])).await;
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        assert_eq!(
            broker.broker().share_partition_states(group),
            vec![(topic_id, 0, start, 0)],
            "{group}"
        );
    }

    // A consumer group's ID: a share heartbeat is GROUP_ID_NOT_FOUND.
    let request = ConsumerGroupHeartbeatRequest {
        group_id: "consumers".into(),
        member_id: "c1".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 5000,
        subscribed_topic_names: Some(vec![TOPIC.into()]),
        topic_partitions: Some(vec![]),
        ..Default::default()
    };
    let Response::ConsumerGroupHeartbeat(r) = c.call(request, 1).await else {
        panic!("not a ConsumerGroupHeartbeat response");
    };
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let r = heartbeat(&mut c, "consumers", "m", 0, Some(&[TOPIC])).await;
    assert_eq!(r.error_code, error_codes::GROUP_ID_NOT_FOUND);
    assert_eq!(
        r.error_message.as_deref(),
        Some("Group consumers is not a share group.")
    );
    let described = describe(&mut c, "consumers").await;
    assert_eq!(described.error_code, error_codes::GROUP_ID_NOT_FOUND);
    broker.stop().await;
}

/// Off: ApiVersions does not list the share group APIs (membership, fetch and the offset admin
/// APIs) and they are refused; on, it lists them all.
#[tokio::test]
async fn share_group_apis_are_not_advertised_unless_enabled() {
    let broker = TestBroker::start_with(|config| config.share_groups_enabled = false).await;
    let mut c = broker.client().await;
    let Response::ApiVersions(r) = c.call(ApiVersionsRequest::default(), 3).await else {
        panic!("not an ApiVersions response");
    };
    let keys: BTreeSet<i16> = r.api_keys.iter().map(|k| k.api_key).collect();
    assert!(keys.contains(&ApiKey::ConsumerGroupHeartbeat.key()));
    assert!(!keys.contains(&ApiKey::ShareGroupHeartbeat.key()));
    assert!(!keys.contains(&ApiKey::ShareGroupDescribe.key()));
    assert!(!keys.contains(&ApiKey::ShareFetch.key()));
    assert!(!keys.contains(&ApiKey::ShareAcknowledge.key()));
    assert!(!keys.contains(&ApiKey::DescribeShareGroupOffsets.key()));
    assert!(!keys.contains(&ApiKey::AlterShareGroupOffsets.key()));
    assert!(!keys.contains(&ApiKey::DeleteShareGroupOffsets.key()));
    // KIP-584 features (v3): share.version is supported but not finalized.
    assert!(
        r.supported_features
            .iter()
            .any(|f| &*f.name == "share.version" && f.max_version == 1)
    );
    assert_eq!(finalized(&r), vec![("group.version".to_string(), 1)]);
    let r = heartbeat(&mut c, GROUP, "m1", 0, Some(&[TOPIC])).await;
    assert_eq!(r.error_code, error_codes::UNSUPPORTED_VERSION);
    broker.stop().await;

    let broker = TestBroker::start_with(share_config).await;
    let mut c = broker.client().await;
    let Response::ApiVersions(r) = c.call(ApiVersionsRequest::default(), 3).await else {
        panic!("not an ApiVersions response");
    };
    let versions: BTreeMap<i16, (i16, i16)> = r
        .api_keys
        .iter()
        .map(|k| (k.api_key, (k.min_version, k.max_version)))
        .collect();
    assert_eq!(
        versions.get(&ApiKey::ShareGroupHeartbeat.key()),
        Some(&(1, 1))
    );
    assert_eq!(
        versions.get(&ApiKey::ShareGroupDescribe.key()),
        Some(&(1, 1))
    );
    assert_eq!(versions.get(&ApiKey::ShareFetch.key()), Some(&(1, 2)));
    assert_eq!(versions.get(&ApiKey::ShareAcknowledge.key()), Some(&(1, 2)));
    assert_eq!(
        versions.get(&ApiKey::DescribeShareGroupOffsets.key()),
        Some(&(0, 1))
    );
    assert_eq!(
        versions.get(&ApiKey::AlterShareGroupOffsets.key()),
        Some(&(0, 0))
    );
    assert_eq!(
        versions.get(&ApiKey::DeleteShareGroupOffsets.key()),
        Some(&(0, 0))
    );
    assert_eq!(
        finalized(&r),
        vec![
            ("group.version".to_string(), 1),
            ("share.version".to_string(), 1)
        ]
    );
    assert!(r.finalized_features_epoch > 0);
    broker.stop().await;
}

/// The finalized features of an ApiVersions answer (name, level), in order.
fn finalized(
    r: &skiff_protocol::generated::api_versions_response::ApiVersionsResponse,
) -> Vec<(String, i16)> {
    r.finalized_features
        .iter()
        .map(|f| {
            assert_eq!(f.min_version_level, f.max_version_level);
            (f.name.to_string(), f.max_version_level)
        })
        .collect()
}
