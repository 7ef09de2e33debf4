//! The group coordinator over TCP against a real broker: KIP-848 consumer groups with KIP-1082
//! client-chosen member IDs, committed offsets (and what survives a restart), classic groups with
//! parked JoinGroup/SyncGroup responses, listing/describing/deleting groups, FindCoordinator.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, TIMEOUT, TestBroker};
use skiff_protocol::generated::consumer_group_describe_response::DescribedGroup as CgDescribed;
use skiff_protocol::generated::consumer_group_heartbeat_request::TopicPartitions as OwnedTopic;
use skiff_protocol::generated::consumer_group_heartbeat_response::Assignment as HbAssignment;
use skiff_protocol::generated::create_topics_request::CreatableTopic;
use skiff_protocol::generated::describe_groups_response::DescribedGroup as ClassicDescribed;
use skiff_protocol::generated::find_coordinator_response::FindCoordinatorResponse;
use skiff_protocol::generated::join_group_request::JoinGroupRequestProtocol;
use skiff_protocol::generated::leave_group_request::MemberIdentity;
use skiff_protocol::generated::list_groups_response::ListedGroup;
use skiff_protocol::generated::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use skiff_protocol::generated::offset_commit_response::OffsetCommitResponse;
use skiff_protocol::generated::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use skiff_protocol::generated::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use skiff_protocol::generated::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponseGroup,
};
use skiff_protocol::generated::sync_group_request::SyncGroupRequestAssignment;
use skiff_protocol::generated::{
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
    CreateTopicsRequest, DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest,
    HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, ListGroupsRequest,
    OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest,
    SyncGroupResponse,
};
use skiff_protocol::{ApiKey, Request, Response, Uuid, error_codes};

const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;

// ----- helpers -------------------------------------------------------------------------------

/// A broker with group timeouts short enough that nothing in a test waits long.
async fn start() -> TestBroker {
    TestBroker::start_with(|config| short_timeouts(&mut config.groups)).await
}

fn short_timeouts(groups: &mut skiff_group::GroupConfig) {
    groups.consumer_session_timeout_ms = 10_000;
    groups.consumer_heartbeat_interval_ms = 500;
    groups.classic_initial_rebalance_delay_ms = 0;
    groups.classic_min_session_timeout_ms = 100;
}

async fn create_topic(c: &mut Client, name: &str, partitions: i32) -> Uuid {
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    match c.call(request, 7).await {
        Response::CreateTopics(r) => {
            assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0]);
            assert!(!r.topics[0].topic_id.is_zero());
            r.topics[0].topic_id
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn join_request(group: &str, member: &str, topics: &[&str]) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest {
        group_id: group.into(),
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 5000,
        subscribed_topic_names: Some(topics.iter().map(|t| (*t).into()).collect()),
        topic_partitions: Some(Vec::new()),
        ..Default::default()
    }
}

fn heartbeat_request(
    group: &str,
    member: &str,
    epoch: i32,
    owned: &Owned,
) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest {
        group_id: group.into(),
        member_id: member.into(),
        member_epoch: epoch,
        topic_partitions: Some(
            owned
                .iter()
                .map(|(topic, partitions)| OwnedTopic {
                    topic_id: *topic,
                    partitions: partitions.iter().copied().collect(),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }
}

type Owned = std::collections::BTreeMap<Uuid, BTreeSet<i32>>;

fn owned_of(assignment: &HbAssignment) -> Owned {
    assignment
        .topic_partitions
        .iter()
        .map(|t| (t.topic_id, t.partitions.iter().copied().collect()))
        .collect()
}

async fn cg_heartbeat(
    c: &mut Client,
    request: ConsumerGroupHeartbeatRequest,
    version: i16,
) -> ConsumerGroupHeartbeatResponse {
    match c.call(request, version).await {
        Response::ConsumerGroupHeartbeat(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

async fn cg_describe(c: &mut Client, group: &str) -> CgDescribed {
    let request = ConsumerGroupDescribeRequest {
        group_ids: vec![group.into()],
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::ConsumerGroupDescribe(mut r) => r.groups.remove(0),
        other => panic!("unexpected {other:?}"),
    }
}

/// A KIP-848 member as a client sees it.
struct Member {
    id: String,
    epoch: i32,
    owned: Owned,
}

impl Member {
    /// Joins with `version` (v0 with an empty ID lets the broker choose it).
    async fn join(c: &mut Client, group: &str, id: &str, topics: &[&str], version: i16) -> Member {
        let r = cg_heartbeat(c, join_request(group, id, topics), version).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        let id = r.member_id.as_deref().expect("member ID").to_string();
        Member {
            id,
            epoch: r.member_epoch,
            owned: r.assignment.as_ref().map(owned_of).unwrap_or_default(),
        }
    }

    /// One heartbeat reporting what the member owns; applies the new assignment.
    async fn heartbeat(&mut self, c: &mut Client, group: &str, version: i16) {
        let request = heartbeat_request(group, &self.id, self.epoch, &self.owned);
        let r = cg_heartbeat(c, request, version).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        self.epoch = r.member_epoch;
        if let Some(a) = &r.assignment {
            self.owned = owned_of(a);
        }
    }

    fn partitions(&self) -> BTreeSet<i32> {
        self.owned.values().flatten().copied().collect()
    }
}

/// Heartbeats every member until the group is Stable (bounded).
async fn converge(c: &mut Client, group: &str, members: &mut [(&mut Member, i16)]) -> CgDescribed {
    for _ in 0..30 {
        for (m, version) in members.iter_mut() {
            m.heartbeat(c, group, *version).await;
        }
        let d = cg_describe(c, group).await;
        if &*d.group_state == "Stable" {
            return d;
        }
    }
    panic!(
        "group {group} did not converge: {:?}",
        cg_describe(c, group).await
    );
}

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn commit_request(
    group: &str,
    member: &str,
    epoch: i32,
    topic: &str,
    topic_id: Uuid,
    offsets: &[(i32, i64)],
) -> OffsetCommitRequest {
    OffsetCommitRequest {
        group_id: group.into(),
        generation_id_or_member_epoch: epoch,
        member_id: member.into(),
        retention_time_ms: -1,
        topics: vec![OffsetCommitRequestTopic {
            name: topic.into(),
            topic_id,
            partitions: offsets
                .iter()
                .map(|(p, o)| OffsetCommitRequestPartition {
                    partition_index: *p,
                    committed_offset: *o,
                    committed_leader_epoch: -1,
                    committed_metadata: Some("meta".into()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

async fn commit(
    c: &mut Client,
    request: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    match c.call(request, version).await {
        Response::OffsetCommit(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// The partition error codes of a commit response, in order.
fn commit_codes(r: &OffsetCommitResponse) -> Vec<i16> {
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect()
}

/// OffsetFetch v8+ for one group and topic (by name; v10 by ID).
fn fetch_group(
    group: &str,
    member: Option<&str>,
    epoch: i32,
    topic: &str,
    topic_id: Uuid,
    partitions: &[i32],
) -> OffsetFetchRequestGroup {
    OffsetFetchRequestGroup {
        group_id: group.into(),
        member_id: member.map(Into::into),
        member_epoch: epoch,
        topics: Some(vec![OffsetFetchRequestTopics {
            name: topic.into(),
            topic_id,
            partition_indexes: partitions.to_vec(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

async fn fetch(
    c: &mut Client,
    groups: Vec<OffsetFetchRequestGroup>,
    version: i16,
) -> OffsetFetchResponse {
    let request = OffsetFetchRequest {
        groups,
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::OffsetFetch(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// (partition, offset, error) of a fetched group.
fn fetched(g: &OffsetFetchResponseGroup) -> Vec<(i32, i64, i16)> {
    g.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.committed_offset, p.error_code))
        })
        .collect()
}

async fn list_groups(
    c: &mut Client,
    states: &[&str],
    types: &[&str],
    version: i16,
) -> Vec<ListedGroup> {
    let request = ListGroupsRequest {
        states_filter: states.iter().map(|s| (*s).into()).collect(),
        types_filter: types.iter().map(|s| (*s).into()).collect(),
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::ListGroups(r) => {
            assert_eq!(r.error_code, 0);
            r.groups
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn group_ids(groups: &[ListedGroup]) -> Vec<String> {
    groups.iter().map(|g| g.group_id.to_string()).collect()
}

async fn describe_classic(c: &mut Client, group: &str, version: i16) -> ClassicDescribed {
    let request = DescribeGroupsRequest {
        groups: vec![group.into()],
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::DescribeGroups(mut r) => r.groups.remove(0),
        other => panic!("unexpected {other:?}"),
    }
}

async fn delete_groups(c: &mut Client, groups: &[&str], version: i16) -> Vec<(String, i16)> {
    let request = DeleteGroupsRequest {
        groups_names: groups.iter().map(|g| (*g).into()).collect(),
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::DeleteGroups(r) => r
            .results
            .iter()
            .map(|r| (r.group_id.to_string(), r.error_code))
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

// ----- classic helpers -----------------------------------------------------------------------

fn classic_join(group: &str, member: &str, instance: Option<&str>) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: group.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        member_id: member.into(),
        group_instance_id: instance.map(Into::into),
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: Bytes::from_static(b"subscription"),
            ..Default::default()
        }],
        ..Default::default()
    }
}

const JOIN_VERSION: i16 = 9;

fn join_response(r: Response) -> JoinGroupResponse {
    match r {
        Response::JoinGroup(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

fn sync_response(r: Response) -> SyncGroupResponse {
    match r {
        Response::SyncGroup(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

async fn join(c: &mut Client, request: JoinGroupRequest) -> JoinGroupResponse {
    join_response(c.call(request, JOIN_VERSION).await)
}

/// A dynamic member joins: MEMBER_ID_REQUIRED, then the join with that ID (whose response may be
/// parked, so this only sends it). Returns (member ID, correlation ID of the parked join).
async fn start_dynamic_join(c: &mut Client, group: &str) -> (String, i32) {
    let r = join(c, classic_join(group, "", None)).await;
    assert_eq!(r.error_code, error_codes::MEMBER_ID_REQUIRED, "{r:?}");
    let id = r.member_id.to_string();
    assert!(id.starts_with("skiff-test-"), "{id}");
    let request = Request::from(classic_join(group, &id, None));
    let correlation = c.send(&request, JOIN_VERSION).await;
    (id, correlation)
}

async fn finish_join(c: &mut Client, correlation: i32) -> JoinGroupResponse {
    join_response(
        c.receive(ApiKey::JoinGroup, JOIN_VERSION, correlation)
            .await,
    )
}

fn sync_request(
    group: &str,
    member: &str,
    generation: i32,
    assignments: &[(&str, &[u8])],
) -> SyncGroupRequest {
    SyncGroupRequest {
        group_id: group.into(),
        generation_id: generation,
        member_id: member.into(),
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: assignments
            .iter()
            .map(|(m, a)| SyncGroupRequestAssignment {
                member_id: (*m).into(),
                assignment: Bytes::copy_from_slice(a),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

async fn sync(c: &mut Client, request: SyncGroupRequest) -> SyncGroupResponse {
    sync_response(c.call(request, 5).await)
}

async fn classic_heartbeat(c: &mut Client, group: &str, member: &str, generation: i32) -> i16 {
    let request = HeartbeatRequest {
        group_id: group.into(),
        generation_id: generation,
        member_id: member.into(),
        ..Default::default()
    };
    match c.call(request, 4).await {
        Response::Heartbeat(r) => r.error_code,
        other => panic!("unexpected {other:?}"),
    }
}

/// One dynamic member forms a Stable group alone: (member ID, generation).
async fn classic_single(c: &mut Client, group: &str) -> (String, i32) {
    let (id, correlation) = start_dynamic_join(c, group).await;
    let r = finish_join(c, correlation).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.leader, id);
    let s = sync(
        c,
        sync_request(group, &id, r.generation_id, &[(&id, b"all")]),
    )
    .await;
    assert_eq!(s.error_code, 0, "{s:?}");
    assert_eq!(&s.assignment[..], b"all");
    (id, r.generation_id)
}

// ----- KIP-848 consumer groups ---------------------------------------------------------------

#[tokio::test]
async fn v1_client_chosen_member_ids_are_opaque() {
    let b = start().await;
    let mut c = b.client().await;
    let topic = create_topic(&mut c, "ids", 4).await;
    // librdkafka's standard-alphabet base64 and a hyphenated UUID: never parsed.
    let base64 = "q+7/AbCdEfGhIjKlMnOp/w";
    let hyphenated = "123e4567-e89b-12d3-a456-426614174000";
    let mut a = Member::join(&mut c, "g-ids", base64, &["ids"], 1).await;
    assert_eq!(a.id, base64);
    assert!(a.epoch > 0);
    let mut b2 = Member::join(&mut c, "g-ids", hyphenated, &["ids"], 1).await;
    assert_eq!(b2.id, hyphenated);
    let d = converge(&mut c, "g-ids", &mut [(&mut a, 1), (&mut b2, 1)]).await;
    let ids: BTreeSet<String> = d.members.iter().map(|m| m.member_id.to_string()).collect();
    assert_eq!(
        ids,
        BTreeSet::from([base64.to_string(), hyphenated.to_string()])
    );
    assert_eq!(a.partitions().len() + b2.partitions().len(), 4);
    assert!(a.partitions().is_disjoint(&b2.partitions()));
    assert_eq!(a.owned.keys().collect::<Vec<_>>(), vec![&topic]);

    // v1 requires the client to choose: an empty ID is refused.
    let r = cg_heartbeat(&mut c, join_request("g-ids", "", &["ids"]), 1).await;
    assert_eq!(r.error_code, error_codes::INVALID_REQUEST, "{r:?}");
    let r = cg_heartbeat(&mut c, join_request("g-ids", "  ", &["ids"]), 1).await;
    assert_eq!(r.error_code, error_codes::INVALID_REQUEST, "{r:?}");
    b.stop().await;
}

#[tokio::test]
async fn retried_first_heartbeat_is_the_same_member() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "retry", 3).await;
    let id = Uuid::random().expect("uuid").to_string();
    // The client sends its join, loses the response, and sends it again.
    let request = Request::from(join_request("g-retry", &id, &["retry"]));
    let first = c.send(&request, 1).await;
    let second = c.send(&request, 1).await;
    let lost = c.receive(ApiKey::ConsumerGroupHeartbeat, 1, first).await;
    let Response::ConsumerGroupHeartbeat(lost) = lost else {
        panic!("unexpected {lost:?}");
    };
    let Response::ConsumerGroupHeartbeat(r) =
        c.receive(ApiKey::ConsumerGroupHeartbeat, 1, second).await
    else {
        panic!("not a heartbeat response");
    };
    assert_eq!(lost.error_code, 0, "{lost:?}");
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.member_id.as_deref(), Some(id.as_str()));
    assert_eq!(r.member_epoch, lost.member_epoch);
    assert_eq!(r.assignment, lost.assignment);
    assert_eq!(
        owned_of(r.assignment.as_ref().expect("assignment"))
            .values()
            .flatten()
            .count(),
        3
    );
    let d = cg_describe(&mut c, "g-retry").await;
    assert_eq!(d.members.len(), 1, "{d:?}");
    assert_eq!(&*d.members[0].member_id, id.as_str());
    assert_eq!(d.members[0].member_epoch, r.member_epoch);
    assert_eq!(d.group_epoch, r.member_epoch);
    b.stop().await;
}

#[tokio::test]
async fn leave_before_the_join_response_was_read_removes_the_member() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "early-leave", 2).await;
    let id = "early+leaver/A==";
    let join = Request::from(join_request("g-early", id, &["early-leave"]));
    let leave = Request::from(ConsumerGroupHeartbeatRequest {
        group_id: "g-early".into(),
        member_id: id.into(),
        member_epoch: -1,
        ..Default::default()
    });
    let j = c.send(&join, 1).await;
    let l = c.send(&leave, 1).await;
    // Read both only now: the client never used the join response.
    let _ = c.receive(ApiKey::ConsumerGroupHeartbeat, 1, j).await;
    let Response::ConsumerGroupHeartbeat(r) = c.receive(ApiKey::ConsumerGroupHeartbeat, 1, l).await
    else {
        panic!("not a heartbeat response");
    };
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.member_epoch, -1);
    let d = cg_describe(&mut c, "g-early").await;
    assert!(d.members.is_empty(), "{d:?}");
    assert_eq!(&*d.group_state, "Empty");
    b.stop().await;
}

#[tokio::test]
async fn fenced_member_rejoins_with_epoch_zero_and_the_same_id() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "fence", 2).await;
    let id = "fenced-member-0001";
    let m = Member::join(&mut c, "g-fence", id, &["fence"], 1).await;
    let stale = heartbeat_request("g-fence", id, m.epoch + 3, &m.owned);
    let r = cg_heartbeat(&mut c, stale, 1).await;
    assert_eq!(r.error_code, error_codes::FENCED_MEMBER_EPOCH, "{r:?}");
    // The client abandons its partitions and rejoins with epoch 0, keeping its ID.
    let again = Member::join(&mut c, "g-fence", id, &["fence"], 1).await;
    assert_eq!(again.id, id);
    assert_eq!(again.epoch, m.epoch);
    assert_eq!(again.partitions(), BTreeSet::from([0, 1]));
    let d = cg_describe(&mut c, "g-fence").await;
    assert_eq!(d.members.len(), 1);
    b.stop().await;
}

#[tokio::test]
async fn v0_and_v1_members_share_a_topic() {
    let b = start().await;
    let mut c = b.client().await;
    let topic = create_topic(&mut c, "mixed", 6).await;
    let mut old = Member::join(&mut c, "g-mixed", "", &["mixed"], 0).await;
    // The broker's ID is a Kafka text UUID (22 characters of URL-safe base64).
    assert_eq!(old.id.len(), 22, "{}", old.id);
    let parsed: Uuid = old.id.parse().expect("a Kafka UUID");
    assert_eq!(parsed.to_string(), old.id);
    assert_eq!(old.partitions().len(), 6);
    let mut new = Member::join(&mut c, "g-mixed", "librdkafka+id/0", &["mixed"], 1).await;
    let d = converge(&mut c, "g-mixed", &mut [(&mut old, 0), (&mut new, 1)]).await;
    assert_eq!(old.partitions().len(), 3, "{d:?}");
    assert_eq!(new.partitions().len(), 3, "{d:?}");
    let all: BTreeSet<i32> = old.partitions().union(&new.partitions()).copied().collect();
    assert_eq!(all, (0..6).collect());
    assert_eq!(old.epoch, d.group_epoch);
    assert_eq!(new.epoch, d.group_epoch);
    assert_eq!(d.assignment_epoch, d.group_epoch);
    // Describe shows what each member owns, by topic ID and name.
    for m in &d.members {
        let mine = if &*m.member_id == old.id.as_str() {
            &old
        } else {
            &new
        };
        assert_eq!(m.member_epoch, mine.epoch);
        assert_eq!(m.member_type, 1);
        assert_eq!(
            m.subscribed_topic_names,
            vec![skiff_protocol::ByteString::from("mixed")]
        );
        assert_eq!(m.assignment.topic_partitions.len(), 1);
        let tp = &m.assignment.topic_partitions[0];
        assert_eq!(tp.topic_id, topic);
        assert_eq!(&*tp.topic_name, "mixed");
        let described: BTreeSet<i32> = tp.partitions.iter().copied().collect();
        assert_eq!(described, mine.partitions());
        assert_eq!(&*m.client_id, "skiff-test");
        assert!(m.client_host.starts_with('/'), "{:?}", m.client_host);
    }
    assert_eq!(&*d.assignor_name, "uniform");
    b.stop().await;
}

#[tokio::test]
async fn unknown_group_and_member_errors() {
    let b = start().await;
    let mut c = b.client().await;
    let r = cg_heartbeat(&mut c, heartbeat_request("nope", "m1", 1, &Owned::new()), 1).await;
    assert_eq!(r.error_code, error_codes::GROUP_ID_NOT_FOUND, "{r:?}");
    let leave = ConsumerGroupHeartbeatRequest {
        group_id: "nope".into(),
        member_id: "m1".into(),
        member_epoch: -1,
        ..Default::default()
    };
    let r = cg_heartbeat(&mut c, leave, 1).await;
    assert_eq!(r.error_code, error_codes::GROUP_ID_NOT_FOUND, "{r:?}");
    // A refused join leaves no group behind.
    let mut bad = join_request("never", "m1", &["t"]);
    bad.rebalance_timeout_ms = -1;
    let r = cg_heartbeat(&mut c, bad, 1).await;
    assert_eq!(r.error_code, error_codes::INVALID_REQUEST, "{r:?}");
    assert_eq!(
        cg_describe(&mut c, "never").await.error_code,
        error_codes::GROUP_ID_NOT_FOUND
    );
    // Known group, unknown member with epoch != 0.
    Member::join(&mut c, "g-known", "m1", &["t"], 1).await;
    let r = cg_heartbeat(
        &mut c,
        heartbeat_request("g-known", "m2", 1, &Owned::new()),
        1,
    )
    .await;
    assert_eq!(r.error_code, error_codes::UNKNOWN_MEMBER_ID, "{r:?}");
    b.stop().await;
}

#[tokio::test]
async fn session_timeout_removes_a_silent_member() {
    let b = TestBroker::start_with(|config| {
        short_timeouts(&mut config.groups);
        config.groups.consumer_session_timeout_ms = 300;
        config.groups.consumer_heartbeat_interval_ms = 100;
    })
    .await;
    let mut c = b.client().await;
    create_topic(&mut c, "silent", 2).await;
    let started = Instant::now();
    let mut alive = Member::join(&mut c, "g-silent", "alive", &["silent"], 1).await;
    Member::join(&mut c, "g-silent", "silent", &["silent"], 1).await;
    let r = cg_heartbeat(
        &mut c,
        heartbeat_request("g-silent", "alive", alive.epoch, &alive.owned),
        1,
    )
    .await;
    assert_eq!(r.heartbeat_interval_ms, 100);
    let mut gone = false;
    while started.elapsed() < Duration::from_secs(5) {
        alive.heartbeat(&mut c, "g-silent", 1).await;
        let d = cg_describe(&mut c, "g-silent").await;
        if d.members.len() == 1 {
            assert_eq!(&*d.members[0].member_id, "alive");
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the silent member was not removed");
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The survivor gets everything.
    for _ in 0..10 {
        alive.heartbeat(&mut c, "g-silent", 1).await;
        if alive.partitions().len() == 2 {
            break;
        }
    }
    assert_eq!(alive.partitions(), BTreeSet::from([0, 1]));
    // The silent member's next heartbeat is refused.
    let r = cg_heartbeat(
        &mut c,
        heartbeat_request("g-silent", "silent", 1, &Owned::new()),
        1,
    )
    .await;
    assert_eq!(r.error_code, error_codes::UNKNOWN_MEMBER_ID, "{r:?}");
    b.stop().await;
}

// ----- offsets -------------------------------------------------------------------------------

#[tokio::test]
async fn offset_commit_validates_member_and_epoch() {
    let b = start().await;
    let mut c = b.client().await;
    let topic = create_topic(&mut c, "oc", 2).await;
    let m = Member::join(&mut c, "g-oc", "committer", &["oc"], 1).await;
    for version in [9, 10] {
        let ok = commit(
            &mut c,
            commit_request("g-oc", &m.id, m.epoch, "oc", topic, &[(0, 10), (1, 11)]),
            version,
        )
        .await;
        assert_eq!(commit_codes(&ok), vec![0, 0], "v{version}: {ok:?}");
        let stale = commit(
            &mut c,
            commit_request("g-oc", &m.id, m.epoch + 1, "oc", topic, &[(0, 99)]),
            version,
        )
        .await;
        assert_eq!(
            commit_codes(&stale),
            vec![error_codes::STALE_MEMBER_EPOCH],
            "v{version}"
        );
        let unknown = commit(
            &mut c,
            commit_request("g-oc", "stranger", m.epoch, "oc", topic, &[(0, 99)]),
            version,
        )
        .await;
        assert_eq!(
            commit_codes(&unknown),
            vec![error_codes::UNKNOWN_MEMBER_ID],
            "v{version}"
        );
        // An admin commit (epoch -1) while the group has members is refused too.
        let admin = commit(
            &mut c,
            commit_request("g-oc", "", -1, "oc", topic, &[(0, 99)]),
            version,
        )
        .await;
        assert_eq!(
            commit_codes(&admin),
            vec![error_codes::UNKNOWN_MEMBER_ID],
            "v{version}"
        );
    }
    // A consumer-protocol member must use v9+.
    for version in [2, 5, 8] {
        let old = commit(
            &mut c,
            commit_request("g-oc", &m.id, m.epoch, "oc", topic, &[(0, 99)]),
            version,
        )
        .await;
        assert_eq!(
            commit_codes(&old),
            vec![error_codes::UNSUPPORTED_VERSION],
            "v{version}: {old:?}"
        );
    }
    // Unknown topic: by name before v10, by ID at v10.
    let r = commit(
        &mut c,
        commit_request("g-oc", &m.id, m.epoch, "missing", Uuid::ZERO, &[(0, 1)]),
        9,
    )
    .await;
    assert_eq!(
        commit_codes(&r),
        vec![error_codes::UNKNOWN_TOPIC_OR_PARTITION]
    );
    let r = commit(
        &mut c,
        commit_request("g-oc", &m.id, m.epoch, "", Uuid::from_u128(7), &[(0, 1)]),
        10,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![error_codes::UNKNOWN_TOPIC_ID]);
    // Nothing but the first good commit stuck.
    let f = fetch(
        &mut c,
        vec![fetch_group("g-oc", None, -1, "oc", topic, &[0, 1])],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, 10, 0), (1, 11, 0)]);
    b.stop().await;
}

#[tokio::test]
async fn admin_commit_on_an_empty_group() {
    let b = start().await;
    let mut c = b.client().await;
    let topic = create_topic(&mut c, "admin", 1).await;
    // An unknown group: the commit creates it (as Kafka's "simple" commits do).
    let r = commit(
        &mut c,
        commit_request("g-admin", "", -1, "admin", topic, &[(0, 5)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);
    // A consumer group whose members all left.
    let m = Member::join(&mut c, "g-admin2", "m", &["admin"], 1).await;
    let leave = ConsumerGroupHeartbeatRequest {
        group_id: "g-admin2".into(),
        member_id: m.id.as_str().into(),
        member_epoch: -1,
        ..Default::default()
    };
    assert_eq!(cg_heartbeat(&mut c, leave, 1).await.error_code, 0);
    for version in [2, 8, 9, 10] {
        let r = commit(
            &mut c,
            commit_request(
                "g-admin2",
                "",
                -1,
                "admin",
                topic,
                &[(0, i64::from(version))],
            ),
            version,
        )
        .await;
        assert_eq!(commit_codes(&r), vec![0], "v{version}: {r:?}");
    }
    let f = fetch(
        &mut c,
        vec![fetch_group("g-admin2", None, -1, "admin", topic, &[0])],
        10,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, 10, 0)]);
    b.stop().await;
}

#[tokio::test]
async fn offset_fetch_member_validation_and_batches() {
    let b = start().await;
    let mut c = b.client().await;
    let topic = create_topic(&mut c, "of", 3).await;
    let m = Member::join(&mut c, "g-of", "fetcher", &["of"], 1).await;
    let r = commit(
        &mut c,
        commit_request("g-of", &m.id, m.epoch, "of", topic, &[(0, 100), (2, 102)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0, 0]);
    let r = commit(
        &mut c,
        commit_request("g-other", "", -1, "of", topic, &[(1, 201)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);

    for version in [9, 10] {
        let good = fetch(
            &mut c,
            vec![fetch_group(
                "g-of",
                Some(&m.id),
                m.epoch,
                "of",
                topic,
                &[0, 1, 2],
            )],
            version,
        )
        .await;
        assert_eq!(good.groups[0].error_code, 0);
        assert_eq!(
            fetched(&good.groups[0]),
            vec![(0, 100, 0), (1, -1, 0), (2, 102, 0)],
            "v{version}"
        );
        let stale = fetch(
            &mut c,
            vec![fetch_group(
                "g-of",
                Some(&m.id),
                m.epoch + 1,
                "of",
                topic,
                &[0],
            )],
            version,
        )
        .await;
        assert_eq!(
            stale.groups[0].error_code,
            error_codes::STALE_MEMBER_EPOCH,
            "v{version}"
        );
        assert!(stale.groups[0].topics.is_empty());
        let unknown = fetch(
            &mut c,
            vec![fetch_group(
                "g-of",
                Some("ghost"),
                m.epoch,
                "of",
                topic,
                &[0],
            )],
            version,
        )
        .await;
        assert_eq!(
            unknown.groups[0].error_code,
            error_codes::UNKNOWN_MEMBER_ID,
            "v{version}"
        );
        let null_member = fetch(
            &mut c,
            vec![fetch_group("g-of", None, 3, "of", topic, &[0])],
            version,
        )
        .await;
        assert_eq!(
            null_member.groups[0].error_code,
            error_codes::UNKNOWN_MEMBER_ID,
            "v{version}"
        );
    }
    // v8: several groups in one request, one of them with all topics (null).
    let mut all = fetch_group("g-other", None, -1, "", Uuid::ZERO, &[]);
    all.topics = None;
    let r = fetch(
        &mut c,
        vec![
            fetch_group("g-of", None, -1, "of", Uuid::ZERO, &[0, 2]),
            all,
            fetch_group("g-none", None, -1, "of", Uuid::ZERO, &[0]),
        ],
        8,
    )
    .await;
    assert_eq!(r.groups.len(), 3);
    assert_eq!(&*r.groups[0].group_id, "g-of");
    assert_eq!(fetched(&r.groups[0]), vec![(0, 100, 0), (2, 102, 0)]);
    assert_eq!(&*r.groups[1].group_id, "g-other");
    assert_eq!(fetched(&r.groups[1]), vec![(1, 201, 0)]);
    assert_eq!(&*r.groups[1].topics[0].name, "of");
    assert_eq!(fetched(&r.groups[2]), vec![(0, -1, 0)]);
    // v10 answers by topic ID; an unknown ID is UNKNOWN_TOPIC_ID.
    let r = fetch(
        &mut c,
        vec![fetch_group("g-of", None, -1, "", topic, &[0])],
        10,
    )
    .await;
    assert_eq!(r.groups[0].topics[0].topic_id, topic);
    assert_eq!(fetched(&r.groups[0]), vec![(0, 100, 0)]);
    let r = fetch(
        &mut c,
        vec![fetch_group("g-of", None, -1, "", Uuid::from_u128(42), &[0])],
        10,
    )
    .await;
    assert_eq!(r.groups[0].topics.len(), 1, "{r:?}");
    assert_eq!(r.groups[0].topics[0].topic_id, Uuid::from_u128(42));
    assert_eq!(
        fetched(&r.groups[0]),
        vec![(0, -1, error_codes::UNKNOWN_TOPIC_ID)]
    );
    // v1-v7: one group per request.
    for version in [1, 5, 7] {
        let request = OffsetFetchRequest {
            group_id: "g-of".into(),
            topics: Some(vec![OffsetFetchRequestTopic {
                name: "of".into(),
                partition_indexes: vec![2],
                ..Default::default()
            }]),
            ..Default::default()
        };
        let Response::OffsetFetch(r) = c.call(request, version).await else {
            panic!("not an OffsetFetch response");
        };
        assert_eq!(r.error_code, 0);
        assert_eq!(
            r.topics[0].partitions[0].committed_offset, 102,
            "v{version}"
        );
    }
    b.stop().await;
}

#[tokio::test]
async fn offset_delete() {
    let b = start().await;
    let mut c = b.client().await;
    let topic = create_topic(&mut c, "od", 2).await;
    let other = create_topic(&mut c, "od-other", 1).await;
    let m = Member::join(&mut c, "g-od", "m", &["od"], 1).await;
    let r = commit(
        &mut c,
        commit_request("g-od", &m.id, m.epoch, "od", topic, &[(0, 1), (1, 2)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0, 0]);
    let r = commit(
        &mut c,
        commit_request("g-od", &m.id, m.epoch, "od-other", other, &[(0, 3)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);
    let delete = |topic: &str, partitions: &[i32]| OffsetDeleteRequest {
        group_id: "g-od".into(),
        topics: vec![OffsetDeleteRequestTopic {
            name: topic.into(),
            partitions: partitions
                .iter()
                .map(|p| OffsetDeleteRequestPartition {
                    partition_index: *p,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::OffsetDelete(r) = c.call(delete("od", &[0]), 0).await else {
        panic!("not an OffsetDelete response");
    };
    assert_eq!(r.error_code, 0);
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        GROUP_SUBSCRIBED_TO_TOPIC
    );
    let Response::OffsetDelete(r) = c.call(delete("od-other", &[0]), 0).await else {
        panic!("not an OffsetDelete response");
    };
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let f = fetch(
        &mut c,
        vec![fetch_group("g-od", None, -1, "od-other", other, &[0])],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, -1, 0)]);
    let f = fetch(
        &mut c,
        vec![fetch_group("g-od", None, -1, "od", topic, &[0, 1])],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, 1, 0), (1, 2, 0)]);
    let mut unknown = delete("od", &[0]);
    unknown.group_id = "g-od-unknown".into();
    let Response::OffsetDelete(r) = c.call(unknown, 0).await else {
        panic!("not an OffsetDelete response");
    };
    assert_eq!(r.error_code, error_codes::GROUP_ID_NOT_FOUND);
    b.stop().await;
}

#[tokio::test]
async fn offsets_and_groups_survive_a_restart() {
    let b = start().await;
    let mut c = b.client().await;
    let topic = create_topic(&mut c, "durable", 4).await;
    let mut m1 = Member::join(&mut c, "g-durable", "m1+/", &["durable"], 1).await;
    let mut m2 = Member::join(&mut c, "g-durable", "m2", &["durable"], 1).await;
    let before = converge(&mut c, "g-durable", &mut [(&mut m1, 1), (&mut m2, 1)]).await;
    let r = commit(
        &mut c,
        commit_request(
            "g-durable",
            &m1.id,
            m1.epoch,
            "durable",
            topic,
            &[(0, 40), (3, 43)],
        ),
        10,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0, 0]);
    let r = commit(
        &mut c,
        commit_request("simple", "", -1, "durable", topic, &[(1, 7)]),
        8,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);
    // A classic group, Stable at generation 1.
    let (classic_id, generation) = classic_single(&mut c, "g-classic-durable").await;
    drop(c);

    let b = b
        .restart_with(|config| short_timeouts(&mut config.groups))
        .await;
    let mut c = b.client().await;
    let f = fetch(
        &mut c,
        vec![fetch_group(
            "g-durable",
            Some(&m1.id),
            m1.epoch,
            "durable",
            topic,
            &[0, 1, 3],
        )],
        10,
    )
    .await;
    assert_eq!(f.groups[0].error_code, 0, "{f:?}");
    assert_eq!(
        fetched(&f.groups[0]),
        vec![(0, 40, 0), (1, -1, 0), (3, 43, 0)]
    );
    let f = fetch(
        &mut c,
        vec![fetch_group("simple", None, -1, "durable", topic, &[1])],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(1, 7, 0)]);
    let after = cg_describe(&mut c, "g-durable").await;
    assert_eq!(after.group_epoch, before.group_epoch);
    assert_eq!(after.assignment_epoch, before.assignment_epoch);
    assert_eq!(after.members.len(), 2);
    for (x, y) in before.members.iter().zip(&after.members) {
        assert_eq!(x.member_id, y.member_id);
        assert_eq!(x.member_epoch, y.member_epoch);
        assert_eq!(x.assignment, y.assignment);
    }
    // The members carry on where they were.
    m1.heartbeat(&mut c, "g-durable", 1).await;
    assert_eq!(m1.epoch, before.group_epoch);
    let r = commit(
        &mut c,
        commit_request("g-durable", &m1.id, m1.epoch, "durable", topic, &[(0, 41)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);
    // The classic group kept its generation and member.
    let d = describe_classic(&mut c, "g-classic-durable", 5).await;
    assert_eq!(d.error_code, 0, "{d:?}");
    assert_eq!(&*d.group_state, "Stable");
    assert_eq!(d.members.len(), 1);
    assert_eq!(&*d.members[0].member_id, classic_id.as_str());
    assert_eq!(
        classic_heartbeat(&mut c, "g-classic-durable", &classic_id, generation).await,
        0
    );
    // ListGroups sees all three.
    let ids = group_ids(&list_groups(&mut c, &[], &[], 5).await);
    for g in ["g-durable", "simple", "g-classic-durable"] {
        assert!(ids.contains(&g.to_string()), "{ids:?}");
    }
    b.stop().await;
}
