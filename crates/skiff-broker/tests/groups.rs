//! The group coordinator over TCP against a real broker: KIP-848 consumer groups with KIP-1082
//! client-chosen member IDs, committed offsets (and what survives a restart), classic groups with
//! parked JoinGroup/SyncGroup responses, listing/describing/deleting groups, FindCoordinator.

mod common;

use common::create_topic_with_partitions as create_topic;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, TIMEOUT, TestBroker};
use skiff_protocol::generated::consumer_group_describe_response::DescribedGroup as CgDescribed;
use skiff_protocol::generated::consumer_group_heartbeat_request::TopicPartitions as OwnedTopic;
use skiff_protocol::generated::consumer_group_heartbeat_response::Assignment as HbAssignment;
use skiff_protocol::generated::describe_groups_response::DescribedGroup as ClassicDescribed;
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
    DeleteGroupsRequest, DeleteTopicsRequest, DescribeGroupsRequest, FindCoordinatorRequest,
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

/// Polls DescribeGroups until the classic group is in `state` (bounded).
async fn wait_for_state(c: &mut Client, group: &str, state: &str) {
    let start = Instant::now();
    loop {
        let d = describe_classic(c, group, 5).await;
        if &*d.group_state == state {
            return;
        }
        assert!(
            start.elapsed() < TIMEOUT,
            "{group} never reached {state}: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
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
    // A topic consumed through a regex subscription counts as subscribed too.
    let mut request = join_request("g-od", "regex", &[]);
    request.subscribed_topic_names = None;
    request.subscribed_topic_regex = Some("od-.*".into());
    assert_eq!(cg_heartbeat(&mut c, request, 1).await.error_code, 0);
    let r = commit(
        &mut c,
        commit_request("g-od", &m.id, m.epoch, "od-other", other, &[(0, 4)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);
    let Response::OffsetDelete(r) = c.call(delete("od-other", &[0]), 0).await else {
        panic!("not an OffsetDelete response");
    };
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        GROUP_SUBSCRIBED_TO_TOPIC
    );
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

// ----- classic groups ------------------------------------------------------------------------

#[tokio::test]
async fn classic_two_members_rebalance_and_leave() {
    let b = start().await;
    let mut a = b.client().await;
    let mut bb = b.client().await;
    let mut cc = b.client().await;
    let group = "g-classic";
    // A alone: MEMBER_ID_REQUIRED, then generation 1.
    let (a_id, generation) = classic_single(&mut a, group).await;
    assert_eq!(generation, 1);
    assert_eq!(classic_heartbeat(&mut a, group, &a_id, 1).await, 0);

    // B joins: its JoinGroup is parked until A rejoins.
    let (b_id, b_join) = start_dynamic_join(&mut bb, group).await;
    wait_for_state(&mut cc, group, "PreparingRebalance").await;
    assert_eq!(
        classic_heartbeat(&mut a, group, &a_id, 1).await,
        error_codes::REBALANCE_IN_PROGRESS
    );
    let a_rejoin = join(&mut a, classic_join(group, &a_id, None)).await;
    let b_joined = finish_join(&mut bb, b_join).await;
    assert_eq!(a_rejoin.error_code, 0, "{a_rejoin:?}");
    assert_eq!(b_joined.error_code, 0, "{b_joined:?}");
    assert_eq!(a_rejoin.generation_id, 2);
    assert_eq!(b_joined.generation_id, 2);
    assert_eq!(a_rejoin.protocol_name.as_deref(), Some("range"));
    // The leader (A, the existing member) sees both members' metadata; B sees none.
    assert_eq!(a_rejoin.leader, a_id.as_str());
    assert_eq!(b_joined.leader, a_id.as_str());
    let members: BTreeSet<String> = a_rejoin
        .members
        .iter()
        .map(|m| m.member_id.to_string())
        .collect();
    assert_eq!(members, BTreeSet::from([a_id.clone(), b_id.clone()]));
    assert!(
        a_rejoin
            .members
            .iter()
            .all(|m| &m.metadata[..] == b"subscription")
    );
    assert!(b_joined.members.is_empty());

    // The follower's SyncGroup waits for the leader's assignment.
    let b_sync = bb
        .send(&Request::from(sync_request(group, &b_id, 2, &[])), 5)
        .await;
    let s = sync(
        &mut a,
        sync_request(group, &a_id, 2, &[(&a_id, b"p0"), (&b_id, b"p1")]),
    )
    .await;
    assert_eq!(s.error_code, 0);
    assert_eq!(&s.assignment[..], b"p0");
    let s = sync_response(bb.receive(ApiKey::SyncGroup, 5, b_sync).await);
    assert_eq!(s.error_code, 0);
    assert_eq!(&s.assignment[..], b"p1");
    assert_eq!(s.protocol_name.as_deref(), Some("range"));
    assert_eq!(classic_heartbeat(&mut bb, group, &b_id, 2).await, 0);
    assert_eq!(
        classic_heartbeat(&mut bb, group, &b_id, 1).await,
        error_codes::ILLEGAL_GENERATION
    );
    assert_eq!(
        classic_heartbeat(&mut bb, group, "ghost", 2).await,
        error_codes::UNKNOWN_MEMBER_ID
    );

    let d = describe_classic(&mut cc, group, 5).await;
    assert_eq!(&*d.group_state, "Stable");
    assert_eq!(&*d.protocol_type, "consumer");
    assert_eq!(&*d.protocol_data, "range");
    assert_eq!(d.members.len(), 2);
    for m in &d.members {
        let expected: &[u8] = if *m.member_id == *a_id { b"p0" } else { b"p1" };
        assert_eq!(&m.member_assignment[..], expected);
        assert_eq!(&*m.client_id, "skiff-test");
    }

    // A third member: the others' heartbeats answer REBALANCE_IN_PROGRESS.
    let (_c_id, c_join) = start_dynamic_join(&mut cc, group).await;
    let mut c2 = b.client().await;
    wait_for_state(&mut c2, group, "PreparingRebalance").await;
    assert_eq!(
        classic_heartbeat(&mut a, group, &a_id, 2).await,
        error_codes::REBALANCE_IN_PROGRESS
    );
    assert_eq!(
        classic_heartbeat(&mut bb, group, &b_id, 2).await,
        error_codes::REBALANCE_IN_PROGRESS
    );

    // B leaves instead of rejoining (v3+ batch form); A rejoins; C's join completes without B.
    let leave = LeaveGroupRequest {
        group_id: group.into(),
        members: vec![MemberIdentity {
            member_id: b_id.as_str().into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::LeaveGroup(l) = bb.call(leave, 5).await else {
        panic!("not a LeaveGroup response");
    };
    assert_eq!(l.error_code, 0, "{l:?}");
    assert_eq!(l.members[0].error_code, 0);
    let a3 = join(&mut a, classic_join(group, &a_id, None)).await;
    let c3 = finish_join(&mut cc, c_join).await;
    assert_eq!(a3.error_code, 0, "{a3:?}");
    assert_eq!(c3.error_code, 0, "{c3:?}");
    assert_eq!(a3.generation_id, 3);
    assert_eq!(a3.members.len(), 2);
    assert!(a3.members.iter().all(|m| *m.member_id != *b_id));
    // v0-2 leave by member ID.
    let leave = LeaveGroupRequest {
        group_id: group.into(),
        member_id: "ghost".into(),
        ..Default::default()
    };
    let Response::LeaveGroup(l) = bb.call(leave, 1).await else {
        panic!("not a LeaveGroup response");
    };
    assert_eq!(l.error_code, error_codes::UNKNOWN_MEMBER_ID);
    b.stop().await;
}

#[tokio::test]
async fn classic_static_member_is_replaced() {
    let b = start().await;
    let mut c = b.client().await;
    let group = "g-static";
    // A static member needs no MEMBER_ID_REQUIRED round trip.
    let r = join(&mut c, classic_join(group, "", Some("instance-1"))).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let old_id = r.member_id.to_string();
    assert!(old_id.starts_with("instance-1-"), "{old_id}");
    let s = sync(
        &mut c,
        sync_request(group, &old_id, r.generation_id, &[(&old_id, b"x")]),
    )
    .await;
    assert_eq!(s.error_code, 0);
    // The same instance restarts without its member ID: it replaces the old member.
    let mut restarted = b.client().await;
    let r2 = join(&mut restarted, classic_join(group, "", Some("instance-1"))).await;
    assert_eq!(r2.error_code, 0, "{r2:?}");
    let new_id = r2.member_id.to_string();
    assert_ne!(new_id, old_id);
    let s = sync(
        &mut restarted,
        sync_request(group, &new_id, r2.generation_id, &[(&new_id, b"x")]),
    )
    .await;
    assert_eq!(s.error_code, 0, "{s:?}");
    assert_eq!(&s.assignment[..], b"x");
    // The old member ID is fenced.
    let fenced = HeartbeatRequest {
        group_id: group.into(),
        generation_id: r.generation_id,
        member_id: old_id.as_str().into(),
        group_instance_id: Some("instance-1".into()),
        ..Default::default()
    };
    let Response::Heartbeat(h) = c.call(fenced, 4).await else {
        panic!("not a Heartbeat response");
    };
    assert_eq!(h.error_code, error_codes::FENCED_INSTANCE_ID);
    let d = describe_classic(&mut c, group, 5).await;
    assert_eq!(d.members.len(), 1);
    assert_eq!(&*d.members[0].member_id, new_id.as_str());
    assert_eq!(
        d.members[0].group_instance_id.as_deref(),
        Some("instance-1")
    );
    b.stop().await;
}

#[tokio::test]
async fn classic_and_consumer_groups_share_one_namespace() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "ns", 2).await;
    // A non-empty consumer group refuses classic members whose metadata is not a consumer
    // subscription (online migration takes those that are: tests/interop
    // test_group_migration.py and `classic_members_join_a_consumer_group_and_back` below).
    let m = Member::join(&mut c, "g-consumer", "m", &["ns"], 1).await;
    let r = join(&mut c, classic_join("g-consumer", "", None)).await;
    assert_eq!(r.error_code, error_codes::MEMBER_ID_REQUIRED, "{r:?}");
    let r = join(&mut c, classic_join("g-consumer", &r.member_id, None)).await;
    assert_eq!(
        r.error_code,
        error_codes::INCONSISTENT_GROUP_PROTOCOL,
        "{r:?}"
    );
    // A non-empty classic group whose members are not Kafka consumers refuses consumer members.
    let (classic_id, _) = classic_single(&mut c, "g-classic-ns").await;
    let r = cg_heartbeat(&mut c, join_request("g-classic-ns", "m", &["ns"]), 1).await;
    assert_eq!(r.error_code, error_codes::GROUP_ID_NOT_FOUND, "{r:?}");
    assert!(
        r.error_message
            .as_deref()
            .is_some_and(|m| m.contains("malformed")),
        "{r:?}"
    );
    let d = cg_describe(&mut c, "g-classic-ns").await;
    assert_eq!(d.error_code, error_codes::GROUP_ID_NOT_FOUND);
    // DescribeGroups does not describe consumer groups: GROUP_ID_NOT_FOUND at v6 (KIP-1043),
    // a "Dead" group before.
    let d = describe_classic(&mut c, "g-consumer", 6).await;
    assert_eq!(d.error_code, error_codes::GROUP_ID_NOT_FOUND);
    let d = describe_classic(&mut c, "g-consumer", 5).await;
    assert_eq!((d.error_code, &*d.group_state), (0, "Dead"));

    // Once empty, each is taken over by the other kind (offsets stay).
    let leave = ConsumerGroupHeartbeatRequest {
        group_id: "g-consumer".into(),
        member_id: m.id.as_str().into(),
        member_epoch: -1,
        ..Default::default()
    };
    assert_eq!(cg_heartbeat(&mut c, leave, 1).await.error_code, 0);
    let topic = create_topic(&mut c, "ns2", 1).await;
    let r = commit(
        &mut c,
        commit_request("g-consumer", "", -1, "ns2", topic, &[(0, 9)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);
    let (_, generation) = classic_single(&mut c, "g-consumer").await;
    assert_eq!(generation, 1);
    let f = fetch(
        &mut c,
        vec![fetch_group("g-consumer", None, -1, "ns2", topic, &[0])],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, 9, 0)]);
    let listed = list_groups(&mut c, &[], &["classic"], 5).await;
    assert!(
        group_ids(&listed).contains(&"g-consumer".to_string()),
        "{listed:?}"
    );

    let leave = LeaveGroupRequest {
        group_id: "g-classic-ns".into(),
        members: vec![MemberIdentity {
            member_id: classic_id.as_str().into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::LeaveGroup(l) = c.call(leave, 5).await else {
        panic!("not a LeaveGroup response");
    };
    assert_eq!(l.error_code, 0);
    let joined = Member::join(&mut c, "g-classic-ns", "m2", &["ns"], 1).await;
    assert_eq!(joined.partitions().len(), 2);
    let listed = list_groups(&mut c, &[], &["consumer"], 5).await;
    assert!(
        group_ids(&listed).contains(&"g-classic-ns".to_string()),
        "{listed:?}"
    );
    b.stop().await;
}

#[tokio::test]
async fn shutdown_answers_a_parked_join() {
    let b = start().await;
    let mut a = b.client().await;
    let mut other = b.client().await;
    let (_a_id, _) = classic_single(&mut a, "g-parked").await;
    // B's join waits for A to rejoin, which it never does.
    let (_b_id, b_join) = start_dynamic_join(&mut other, "g-parked").await;
    let mut watcher = b.client().await;
    wait_for_state(&mut watcher, "g-parked", "PreparingRebalance").await;
    let started = Instant::now();
    let stopping = tokio::spawn(b.stop());
    let r = finish_join(&mut other, b_join).await;
    assert_eq!(r.error_code, error_codes::NOT_COORDINATOR, "{r:?}");
    tokio::time::timeout(TIMEOUT, stopping)
        .await
        .expect("shutdown in time")
        .expect("shutdown task");
    assert!(started.elapsed() < Duration::from_secs(5));
}

// ----- listing, describing, deleting, finding --------------------------------------------------

#[tokio::test]
async fn list_describe_and_delete_groups() {
    let b = start().await;
    let mut c = b.client().await;
    let topic = create_topic(&mut c, "ld", 2).await;
    // A Stable consumer group, an Empty consumer group with offsets, a Stable classic group, and
    // an Empty classic group made by a simple commit.
    let mut m = Member::join(&mut c, "g-live", "m", &["ld"], 1).await;
    converge(&mut c, "g-live", &mut [(&mut m, 1)]).await;
    let e = Member::join(&mut c, "g-empty", "e", &["ld"], 1).await;
    let r = commit(
        &mut c,
        commit_request("g-empty", &e.id, e.epoch, "ld", topic, &[(0, 1)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);
    let leave = ConsumerGroupHeartbeatRequest {
        group_id: "g-empty".into(),
        member_id: "e".into(),
        member_epoch: -1,
        ..Default::default()
    };
    assert_eq!(cg_heartbeat(&mut c, leave, 1).await.error_code, 0);
    let (classic_id, _) = classic_single(&mut c, "g-classic-live").await;
    let r = commit(
        &mut c,
        commit_request("g-simple", "", -1, "ld", topic, &[(1, 2)]),
        8,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);

    let all = list_groups(&mut c, &[], &[], 5).await;
    assert_eq!(
        group_ids(&all),
        vec!["g-classic-live", "g-empty", "g-live", "g-simple"]
    );
    let by_id = |id: &str| {
        all.iter()
            .find(|g| &*g.group_id == id)
            .expect("listed")
            .clone()
    };
    assert_eq!(&*by_id("g-live").group_state, "Stable");
    assert_eq!(&*by_id("g-live").group_type, "consumer");
    assert_eq!(&*by_id("g-live").protocol_type, "consumer");
    assert_eq!(&*by_id("g-empty").group_state, "Empty");
    assert_eq!(&*by_id("g-classic-live").group_type, "classic");
    assert_eq!(&*by_id("g-classic-live").protocol_type, "consumer");
    assert_eq!(&*by_id("g-simple").group_state, "Empty");
    assert_eq!(&*by_id("g-simple").group_type, "classic");
    // Filters (states at v4+, types at v5), case-insensitive.
    assert_eq!(
        group_ids(&list_groups(&mut c, &["Empty"], &[], 4).await),
        vec!["g-empty", "g-simple"]
    );
    assert_eq!(
        group_ids(&list_groups(&mut c, &["stable"], &["CONSUMER"], 5).await),
        vec!["g-live"]
    );
    assert_eq!(
        group_ids(&list_groups(&mut c, &[], &["classic"], 5).await),
        vec!["g-classic-live", "g-simple"]
    );
    assert!(list_groups(&mut c, &["Dead"], &[], 5).await.is_empty());
    for version in 0..=3 {
        assert_eq!(
            list_groups(&mut c, &[], &[], version).await.len(),
            4,
            "v{version}"
        );
    }

    // DescribeGroups, every version.
    for version in 0..=6 {
        let d = describe_classic(&mut c, "g-classic-live", version).await;
        assert_eq!(d.error_code, 0, "v{version}");
        assert_eq!(&*d.group_state, "Stable");
        assert_eq!(&*d.members[0].member_id, classic_id.as_str());
    }
    let d = describe_classic(&mut c, "g-unknown", 5).await;
    assert_eq!(d.error_code, 0);
    assert_eq!(&*d.group_state, "Dead");
    let d = describe_classic(&mut c, "g-unknown", 6).await;
    assert_eq!(d.error_code, error_codes::GROUP_ID_NOT_FOUND, "v6: {d:?}");
    let d = describe_classic(&mut c, "g-live", 6).await;
    assert_eq!(d.error_code, error_codes::GROUP_ID_NOT_FOUND);

    // DeleteGroups: members refuse, unknown groups are not found, empty ones go with offsets.
    let results = delete_groups(
        &mut c,
        &[
            "g-live",
            "g-classic-live",
            "g-nothing",
            "g-empty",
            "g-simple",
        ],
        2,
    )
    .await;
    assert_eq!(
        results,
        vec![
            ("g-live".to_string(), error_codes::NON_EMPTY_GROUP),
            ("g-classic-live".to_string(), error_codes::NON_EMPTY_GROUP),
            ("g-nothing".to_string(), error_codes::GROUP_ID_NOT_FOUND),
            ("g-empty".to_string(), 0),
            ("g-simple".to_string(), 0),
        ]
    );
    let f = fetch(
        &mut c,
        vec![
            fetch_group("g-empty", None, -1, "ld", topic, &[0]),
            fetch_group("g-simple", None, -1, "ld", topic, &[1]),
        ],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, -1, 0)]);
    assert_eq!(fetched(&f.groups[1]), vec![(1, -1, 0)]);
    assert_eq!(
        group_ids(&list_groups(&mut c, &[], &[], 5).await),
        vec!["g-classic-live", "g-live"]
    );
    assert_eq!(
        delete_groups(&mut c, &["g-empty"], 0).await,
        vec![("g-empty".to_string(), error_codes::GROUP_ID_NOT_FOUND)]
    );
    // The deletion is durable.
    let b = b
        .restart_with(|config| short_timeouts(&mut config.groups))
        .await;
    let mut c = b.client().await;
    assert_eq!(
        group_ids(&list_groups(&mut c, &[], &[], 5).await),
        vec!["g-classic-live", "g-live"]
    );
    let f = fetch(
        &mut c,
        vec![fetch_group("g-empty", None, -1, "ld", topic, &[0])],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, -1, 0)]);
    b.stop().await;
}

#[tokio::test]
async fn find_coordinator_every_version() {
    let b = start().await;
    let mut c = b.client().await;
    let port = i32::from(b.addr.port());
    for version in 0..=3 {
        let request = FindCoordinatorRequest {
            key: "some-group".into(),
            key_type: 0,
            ..Default::default()
        };
        let Response::FindCoordinator(r) = c.call(request, version).await else {
            panic!("not a FindCoordinator response");
        };
        assert_eq!(r.error_code, 0, "v{version}: {r:?}");
        assert_eq!(r.port, port, "v{version}");
        assert!(r.node_id >= 0);
        if version >= 1 {
            let request = FindCoordinatorRequest {
                key: "txn".into(),
                key_type: 1,
                ..Default::default()
            };
            let Response::FindCoordinator(r) = c.call(request, version).await else {
                panic!("not a FindCoordinator response");
            };
            // The broker coordinates transactions too.
            assert_eq!(r.error_code, 0, "v{version}");
            assert_eq!(r.port, port, "v{version}");
            // Share groups (key type 2) are not coordinated here.
            let request = FindCoordinatorRequest {
                key: "share".into(),
                key_type: 2,
                ..Default::default()
            };
            let Response::FindCoordinator(r) = c.call(request, version).await else {
                panic!("not a FindCoordinator response");
            };
            assert_eq!(
                r.error_code,
                error_codes::COORDINATOR_NOT_AVAILABLE,
                "v{version}"
            );
        }
    }
    for version in 4..=6 {
        let request = FindCoordinatorRequest {
            key_type: 0,
            coordinator_keys: vec!["g1".into(), "g2".into(), "".into()],
            ..Default::default()
        };
        let Response::FindCoordinator(r) = c.call(request, version).await else {
            panic!("not a FindCoordinator response");
        };
        let keys: Vec<(&str, i16)> = r
            .coordinators
            .iter()
            .map(|c| (&*c.key, c.error_code))
            .collect();
        assert_eq!(
            keys,
            vec![("g1", 0), ("g2", 0), ("", error_codes::INVALID_REQUEST)],
            "v{version}"
        );
        assert_eq!(r.coordinators[0].port, port);
        let request = FindCoordinatorRequest {
            key_type: 1,
            coordinator_keys: vec!["txn-a".into(), "txn-b".into()],
            ..Default::default()
        };
        let Response::FindCoordinator(r) = c.call(request, version).await else {
            panic!("not a FindCoordinator response");
        };
        assert!(
            r.coordinators
                .iter()
                .all(|c| c.error_code == 0 && c.port == port),
            "v{version}: {r:?}"
        );
        assert_eq!(r.coordinators.len(), 2);
    }
    b.stop().await;
}

// ----- timers, metadata changes, static consumer members ----------------------------------------

#[tokio::test]
async fn subscriptions_follow_topic_creation_and_regexes() {
    let b = start().await;
    let mut c = b.client().await;
    // Subscribed to a topic that does not exist yet: nothing to own.
    let mut m = Member::join(&mut c, "g-later", "m", &["later"], 1).await;
    assert!(m.partitions().is_empty());
    let later = create_topic(&mut c, "later", 3).await;
    for _ in 0..5 {
        m.heartbeat(&mut c, "g-later", 1).await;
        if m.partitions().len() == 3 {
            break;
        }
    }
    assert_eq!(m.owned.get(&later), Some(&BTreeSet::from([0, 1, 2])));
    // A regex subscription (v1) picks up matching topics, including new ones.
    let a = create_topic(&mut c, "rx.a", 1).await;
    create_topic(&mut c, "rx-not", 1).await;
    let mut request = join_request("g-regex", "r", &[]);
    request.subscribed_topic_names = None;
    request.subscribed_topic_regex = Some("rx\\..*".into());
    let r = cg_heartbeat(&mut c, request, 1).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let mut rm = Member {
        id: "r".into(),
        epoch: r.member_epoch,
        owned: r.assignment.as_ref().map(owned_of).unwrap_or_default(),
    };
    let bb = create_topic(&mut c, "rx.b", 2).await;
    for _ in 0..5 {
        rm.heartbeat(&mut c, "g-regex", 1).await;
        if rm.owned.len() == 2 {
            break;
        }
    }
    assert_eq!(rm.owned.get(&a), Some(&BTreeSet::from([0])));
    assert_eq!(rm.owned.get(&bb), Some(&BTreeSet::from([0, 1])));
    let d = cg_describe(&mut c, "g-regex").await;
    assert_eq!(
        d.members[0].subscribed_topic_regex.as_deref(),
        Some("rx\\..*")
    );
    let mut bad = join_request("g-regex", "r2", &[]);
    bad.subscribed_topic_names = None;
    bad.subscribed_topic_regex = Some("(".into());
    let r = cg_heartbeat(&mut c, bad, 1).await;
    assert_eq!(r.error_code, 128, "{r:?}");
    b.stop().await;
}

#[tokio::test]
async fn static_consumer_member_leaves_temporarily_and_returns() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "st", 2).await;
    let mut request = join_request("g-st", "first-incarnation", &["st"]);
    request.instance_id = Some("pod-0".into());
    let r = cg_heartbeat(&mut c, request, 1).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let epoch = r.member_epoch;
    let leave = ConsumerGroupHeartbeatRequest {
        group_id: "g-st".into(),
        member_id: "first-incarnation".into(),
        member_epoch: -2,
        instance_id: Some("pod-0".into()),
        ..Default::default()
    };
    let r = cg_heartbeat(&mut c, leave, 1).await;
    assert_eq!((r.error_code, r.member_epoch), (0, -2), "{r:?}");
    // The restarted process has a new member ID and takes the old one's place and partitions.
    let mut request = join_request("g-st", "second-incarnation", &["st"]);
    request.instance_id = Some("pod-0".into());
    let r = cg_heartbeat(&mut c, request, 1).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(
        r.member_epoch, epoch,
        "no rebalance for a returning static member"
    );
    assert_eq!(
        owned_of(r.assignment.as_ref().expect("assignment"))
            .values()
            .flatten()
            .count(),
        2
    );
    let d = cg_describe(&mut c, "g-st").await;
    assert_eq!(d.members.len(), 1);
    assert_eq!(&*d.members[0].member_id, "second-incarnation");
    assert_eq!(d.members[0].instance_id.as_deref(), Some("pod-0"));
    // A third process with the same instance while it is in use.
    let mut request = join_request("g-st", "intruder", &["st"]);
    request.instance_id = Some("pod-0".into());
    let r = cg_heartbeat(&mut c, request, 1).await;
    assert_eq!(r.error_code, 111, "{r:?}");
    b.stop().await;
}

#[tokio::test]
async fn members_expire_after_a_restart() {
    let short = |config: &mut skiff_broker::BrokerConfig| {
        short_timeouts(&mut config.groups);
        config.groups.consumer_session_timeout_ms = 300;
        config.groups.consumer_heartbeat_interval_ms = 100;
    };
    let b = TestBroker::start_with(short).await;
    let mut c = b.client().await;
    create_topic(&mut c, "exp", 1).await;
    Member::join(&mut c, "g-exp", "m", &["exp"], 1).await;
    let mut request = classic_join("g-exp-classic", "", Some("exp-instance"));
    request.session_timeout_ms = 1000;
    let r = join(&mut c, request).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let s = sync(
        &mut c,
        sync_request("g-exp-classic", &r.member_id, r.generation_id, &[]),
    )
    .await;
    assert_eq!(s.error_code, 0);
    drop(c);
    let b = b.restart_with(short).await;
    let mut c = b.client().await;
    let start = Instant::now();
    loop {
        let d = cg_describe(&mut c, "g-exp").await;
        let classic = describe_classic(&mut c, "g-exp-classic", 5).await;
        if d.members.is_empty() && classic.members.is_empty() {
            assert_eq!(&*d.group_state, "Empty");
            assert_eq!(&*classic.group_state, "Empty");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "members never expired: {d:?} {classic:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.stop().await;
}

#[tokio::test]
async fn classic_timeouts_complete_parked_requests() {
    let b = start().await;
    let mut a = b.client().await;
    let mut other = b.client().await;
    let group = "g-classic-timeout";
    // A's session and rebalance timeouts are short; it goes silent after forming the group.
    let mut request = classic_join(group, "", None);
    request.session_timeout_ms = 300;
    request.rebalance_timeout_ms = 300;
    let r = join(&mut a, request.clone()).await;
    assert_eq!(r.error_code, error_codes::MEMBER_ID_REQUIRED);
    request.member_id = r.member_id.clone();
    let r = join(&mut a, request).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let a_id = r.member_id.to_string();
    let s = sync(
        &mut a,
        sync_request(group, &a_id, r.generation_id, &[(&a_id, b"a")]),
    )
    .await;
    assert_eq!(s.error_code, 0);
    // B's join is parked until A's rebalance timeout removes A; then B leads generation 2 alone.
    let started = Instant::now();
    let (b_id, b_join) = start_dynamic_join(&mut other, group).await;
    let r = finish_join(&mut other, b_join).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.leader, b_id.as_str());
    assert_eq!(r.members.len(), 1);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        classic_heartbeat(&mut a, group, &a_id, 1).await,
        error_codes::UNKNOWN_MEMBER_ID
    );
    // A member that joins and never syncs or heartbeats: its session expires, the group empties.
    let mut request = classic_join("g-silent-classic", "", None);
    request.session_timeout_ms = 200;
    let r = join(&mut other, request.clone()).await;
    request.member_id = r.member_id.clone();
    let r = join(&mut other, request).await;
    assert_eq!(r.error_code, 0);
    let mut watcher = b.client().await;
    wait_for_state(&mut watcher, "g-silent-classic", "Empty").await;
    b.stop().await;
}

#[tokio::test]
async fn offsets_of_a_deleted_topic_are_forgotten() {
    let b = start().await;
    let mut c = b.client().await;
    let old = create_topic(&mut c, "recreated", 2).await;
    let keep = create_topic(&mut c, "kept", 1).await;
    let r = commit(
        &mut c,
        commit_request("g-del", "", -1, "recreated", old, &[(0, 500), (1, 501)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0, 0]);
    let r = commit(
        &mut c,
        commit_request("g-del", "", -1, "kept", keep, &[(0, 7)]),
        9,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);
    let request = DeleteTopicsRequest {
        topic_names: vec!["recreated".into()],
        timeout_ms: 5000,
        ..Default::default()
    };
    let Response::DeleteTopics(r) = c.call(request, 5).await else {
        panic!("not a DeleteTopics response");
    };
    assert_eq!(r.responses[0].error_code, 0);
    // A new topic under the old name must not inherit the old topic's committed offsets.
    let new = create_topic(&mut c, "recreated", 2).await;
    assert_ne!(new, old);
    let f = fetch(
        &mut c,
        vec![fetch_group("g-del", None, -1, "recreated", new, &[0, 1])],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, -1, 0), (1, -1, 0)]);
    let f = fetch(
        &mut c,
        vec![fetch_group("g-del", None, -1, "kept", keep, &[0])],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, 7, 0)]);
    drop(c);
    let b = b
        .restart_with(|config| short_timeouts(&mut config.groups))
        .await;
    let mut c = b.client().await;
    let f = fetch(
        &mut c,
        vec![fetch_group("g-del", None, -1, "recreated", new, &[0, 1])],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, -1, 0), (1, -1, 0)]);
    let f = fetch(
        &mut c,
        vec![fetch_group("g-del", None, -1, "kept", keep, &[0])],
        9,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, 7, 0)]);
    b.stop().await;
}

#[tokio::test]
async fn classic_members_commit_with_their_generation() {
    let b = start().await;
    let mut c = b.client().await;
    let mut other = b.client().await;
    let topic = create_topic(&mut c, "cc", 2).await;
    let group = "g-classic-commit";
    let (id, generation) = classic_single(&mut c, group).await;
    for version in [2, 7, 8, 9, 10] {
        let r = commit(
            &mut c,
            commit_request(
                group,
                &id,
                generation,
                "cc",
                topic,
                &[(0, i64::from(version))],
            ),
            version,
        )
        .await;
        assert_eq!(commit_codes(&r), vec![0], "v{version}: {r:?}");
        let r = commit(
            &mut c,
            commit_request(group, &id, generation + 1, "cc", topic, &[(0, 1)]),
            version,
        )
        .await;
        assert_eq!(
            commit_codes(&r),
            vec![error_codes::ILLEGAL_GENERATION],
            "v{version}"
        );
        let r = commit(
            &mut c,
            commit_request(group, "ghost", generation, "cc", topic, &[(0, 1)]),
            version,
        )
        .await;
        assert_eq!(
            commit_codes(&r),
            vec![error_codes::UNKNOWN_MEMBER_ID],
            "v{version}"
        );
    }
    // While the group prepares a rebalance members still commit (as in Kafka)...
    let (_b_id, b_join) = start_dynamic_join(&mut other, group).await;
    wait_for_state(&mut c, group, "PreparingRebalance").await;
    let r = commit(
        &mut c,
        commit_request(group, &id, generation, "cc", topic, &[(1, 11)]),
        8,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![0]);
    let r = join(&mut c, classic_join(group, &id, None)).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(finish_join(&mut other, b_join).await.error_code, 0);
    // ...but not between the join and the leader's assignment.
    assert_eq!(
        &*describe_classic(&mut c, group, 5).await.group_state,
        "CompletingRebalance"
    );
    let r = commit(
        &mut c,
        commit_request(group, &id, r.generation_id, "cc", topic, &[(1, 1)]),
        8,
    )
    .await;
    assert_eq!(commit_codes(&r), vec![error_codes::REBALANCE_IN_PROGRESS]);
    let f = fetch(
        &mut c,
        vec![fetch_group(group, None, -1, "cc", topic, &[0, 1])],
        8,
    )
    .await;
    assert_eq!(fetched(&f.groups[0]), vec![(0, 10, 0), (1, 11, 0)]);
    b.stop().await;
}

#[tokio::test]
async fn classic_join_versions_and_restart_mid_rebalance() {
    let b = start().await;
    let mut a = b.client().await;
    // v0-3 have no MEMBER_ID_REQUIRED round trip.
    for version in [0, 3] {
        let group = format!("g-v{version}");
        let r = join_response(a.call(classic_join(&group, "", None), version).await);
        assert_eq!(r.error_code, 0, "v{version}: {r:?}");
        assert_eq!(r.generation_id, 1);
        assert_eq!(r.leader, r.member_id);
    }
    // Session timeouts outside the broker's bounds.
    let mut request = classic_join("g-bounds", "", None);
    request.session_timeout_ms = 50;
    assert_eq!(join(&mut a, request).await.error_code, 26);

    // A restart while B's JoinGroup is parked: B is told to find the coordinator again, and
    // the group recovers on the new broker.
    let group = "g-midway";
    let (a_id, generation) = classic_single(&mut a, group).await;
    let mut other = b.client().await;
    let (b_id, b_join) = start_dynamic_join(&mut other, group).await;
    wait_for_state(&mut a, group, "PreparingRebalance").await;
    let stopping = tokio::spawn(b.restart_with(|config| short_timeouts(&mut config.groups)));
    let r = finish_join(&mut other, b_join).await;
    assert_eq!(r.error_code, error_codes::NOT_COORDINATOR);
    let b = tokio::time::timeout(TIMEOUT, stopping)
        .await
        .expect("restart in time")
        .expect("restart task");
    let mut a = b.client().await;
    let mut other = b.client().await;
    let code = classic_heartbeat(&mut a, group, &a_id, generation).await;
    assert!(
        code == 0 || code == error_codes::REBALANCE_IN_PROGRESS,
        "heartbeat after restart: {code}"
    );
    let b_again = Request::from(classic_join(group, &b_id, None));
    let b_join = other.send(&b_again, JOIN_VERSION).await;
    let a_join = Request::from(classic_join(group, &a_id, None));
    let a_join = a.send(&a_join, JOIN_VERSION).await;
    let ra = finish_join(&mut a, a_join).await;
    let rb = finish_join(&mut other, b_join).await;
    assert_eq!(ra.error_code, 0, "{ra:?}");
    assert!(
        rb.error_code == 0 || rb.error_code == error_codes::UNKNOWN_MEMBER_ID,
        "{rb:?}"
    );
    assert!(ra.generation_id > generation);
    // Only completed generations are durable (as in Kafka): B was still joining, so it is
    // unknown to the new broker and rejoins from scratch; A leads a new generation alone.
    let expected_members = if rb.error_code == 0 { 2 } else { 1 };
    assert_eq!(ra.members.len(), expected_members, "{ra:?}");
    b.stop().await;
}

/// A JoinGroup from a Kafka consumer: its metadata is a real consumer subscription.
fn consumer_join(group: &str, member: &str, topics: &[&str]) -> JoinGroupRequest {
    let mut request = classic_join(group, member, None);
    request.protocols[0].metadata =
        skiff_group::embedded::encode_subscription(1, topics, &Default::default());
    request
}

fn assigned_of(assignment: &[u8]) -> Vec<i32> {
    skiff_group::embedded::decode_assignment(assignment)
        .expect("a consumer assignment")
        .partitions
        .values()
        .flatten()
        .copied()
        .collect()
}

/// Online migration over the wire (the state machine's cases are in skiff-group's
/// `migration::tests`, the real clients' in tests/interop/test_group_migration.py): a classic
/// group upgrades when a KIP-848 member joins, its classic member rejoins and syncs with the
/// consumer group, the mixed group survives a restart, and the group is classic again once the
/// KIP-848 member leaves.
#[tokio::test]
async fn classic_members_join_a_consumer_group_and_back() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "mig", 4).await;
    let group = "g-migrate";
    let r = join(&mut c, consumer_join(group, "", &["mig"])).await;
    assert_eq!(r.error_code, error_codes::MEMBER_ID_REQUIRED, "{r:?}");
    let classic_id = r.member_id.to_string();
    let r = join(&mut c, consumer_join(group, &classic_id, &["mig"])).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let all = skiff_group::embedded::encode_assignment(
        1,
        &[("mig".to_string(), vec![0, 1, 2, 3])]
            .into_iter()
            .collect(),
    );
    let s = sync(
        &mut c,
        sync_request(group, &classic_id, r.generation_id, &[(&classic_id, &all)]),
    )
    .await;
    assert_eq!(s.error_code, 0, "{s:?}");

    // A KIP-848 member joins: the group becomes a consumer group with both members.
    let mut m = Member::join(&mut c, group, "kip848-member-aaaaaaa", &["mig"], 1).await;
    let d = cg_describe(&mut c, group).await;
    assert_eq!(d.error_code, 0, "{d:?}");
    let types: BTreeSet<(String, i8)> = d
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), m.member_type))
        .collect();
    assert_eq!(
        types,
        BTreeSet::from([(classic_id.clone(), 0), (m.id.clone(), 1)])
    );
    assert!(
        m.partitions().is_empty(),
        "the classic member still owns all"
    );

    // The classic member is told to rejoin; it gives everything up (eager) and syncs.
    let generation = r.generation_id;
    assert_eq!(
        classic_heartbeat(&mut c, group, &classic_id, generation).await,
        error_codes::REBALANCE_IN_PROGRESS
    );
    let r = join(&mut c, consumer_join(group, &classic_id, &["mig"])).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(
        &*r.leader, "",
        "a classic member of a consumer group never leads"
    );
    assert!(r.generation_id > generation);
    let generation = r.generation_id;
    let s = sync(&mut c, sync_request(group, &classic_id, generation, &[])).await;
    assert_eq!(s.error_code, 0, "{s:?}");
    let classic_parts = assigned_of(&s.assignment);
    assert_eq!(classic_parts.len(), 2, "{classic_parts:?}");
    for _ in 0..3 {
        m.heartbeat(&mut c, group, 1).await;
    }
    let mut everything: Vec<i32> = classic_parts
        .iter()
        .copied()
        .chain(m.partitions())
        .collect();
    everything.sort_unstable();
    assert_eq!(everything, vec![0, 1, 2, 3]);
    assert_eq!(
        classic_heartbeat(&mut c, group, &classic_id, generation).await,
        0
    );
    drop(c);

    // The mixed group survives a restart, classic member included.
    let b = b
        .restart_with(|config| short_timeouts(&mut config.groups))
        .await;
    let mut c = b.client().await;
    assert_eq!(
        classic_heartbeat(&mut c, group, &classic_id, generation).await,
        0
    );
    let d = cg_describe(&mut c, group).await;
    assert_eq!(d.members.len(), 2, "{d:?}");

    // The KIP-848 member leaves: the group is a classic group again, rebalancing.
    let leave = ConsumerGroupHeartbeatRequest {
        group_id: group.into(),
        member_id: m.id.as_str().into(),
        member_epoch: -1,
        ..Default::default()
    };
    assert_eq!(cg_heartbeat(&mut c, leave, 1).await.error_code, 0);
    let d = describe_classic(&mut c, group, 5).await;
    assert_eq!(
        (&*d.group_state, &*d.protocol_type),
        ("PreparingRebalance", "consumer"),
        "{d:?}"
    );
    assert_eq!(
        classic_heartbeat(&mut c, group, &classic_id, generation).await,
        error_codes::REBALANCE_IN_PROGRESS
    );
    let r = join(&mut c, consumer_join(group, &classic_id, &["mig"])).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(
        &*r.leader,
        classic_id.as_str(),
        "back to client-side assignment"
    );
    b.stop().await;
}
