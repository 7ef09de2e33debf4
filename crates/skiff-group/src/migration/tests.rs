//! Online migration scenarios, driven as the broker drives them: one slot holds the group, a
//! ConsumerGroupHeartbeat to a classic group upgrades it, and a consumer group marked for a
//! downgrade is replaced by a classic group after the call that marked it.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use skiff_protocol::ByteString;
use skiff_protocol::error_codes::{
    GROUP_ID_NOT_FOUND, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED, NONE, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION,
};
use skiff_protocol::generated::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest;
use skiff_protocol::generated::consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse;
use skiff_protocol::generated::heartbeat_request::HeartbeatRequest;
use skiff_protocol::generated::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use skiff_protocol::generated::join_group_response::JoinGroupResponse;
use skiff_protocol::generated::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use skiff_protocol::generated::sync_group_request::{SyncGroupRequest, SyncGroupRequestAssignment};
use skiff_protocol::generated::sync_group_response::SyncGroupResponse;

use super::{downgrade, upgrade};
use crate::classic::{ClassicGroup, ClassicGroupState, ClassicResponse, Completion};
use crate::consumer::{ClientInfo, ConsumerGroup, MemberState};
use crate::embedded;
use crate::types::{GroupConfig, GroupError, MigrationPolicy, TopicsImage};

const GROUP: &str = "g";
const TOPIC: &str = "t";
const PARTITIONS: i32 = 6;
const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;
const CLIENT: ClientInfo<'static> = ClientInfo {
    client_id: "app",
    client_host: "/127.0.0.1",
};

fn topic_id() -> skiff_protocol::Uuid {
    skiff_protocol::Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0)
}

fn topics() -> TopicsImage {
    let mut image = TopicsImage::default();
    image.insert(TOPIC, topic_id(), PARTITIONS);
    image
}

enum Slot {
    Classic(ClassicGroup),
    Consumer(ConsumerGroup),
}

/// The broker's part: the group slot, the clock and the answers of parked requests.
struct Sim {
    slot: Slot,
    topics: TopicsImage,
    cfg: GroupConfig,
    now: i64,
    token: u64,
    done: BTreeMap<u64, ClassicResponse>,
}

impl Sim {
    fn new(policy: MigrationPolicy) -> Sim {
        Sim {
            slot: Slot::Classic(ClassicGroup::new(GROUP, 0)),
            topics: topics(),
            cfg: GroupConfig {
                classic_initial_rebalance_delay_ms: 0,
                consumer_migration_policy: policy,
                ..GroupConfig::default()
            },
            now: 0,
            token: 0,
            done: BTreeMap::new(),
        }
    }

    fn deliver(&mut self, completions: Vec<Completion>) {
        for c in completions {
            self.done.insert(c.token, c.response);
        }
    }

    /// A consumer group marked for a downgrade becomes a classic group.
    fn after(&mut self) {
        if let Slot::Consumer(g) = &mut self.slot
            && g.take_downgrade()
        {
            let (classic, completions) = downgrade(g, &self.topics, self.now);
            self.slot = Slot::Classic(classic);
            self.deliver(completions);
        }
    }

    fn consumer(&self) -> &ConsumerGroup {
        match &self.slot {
            Slot::Consumer(g) => g,
            Slot::Classic(_) => panic!("the group is classic"),
        }
    }

    fn classic(&self) -> &ClassicGroup {
        match &self.slot {
            Slot::Classic(g) => g,
            Slot::Consumer(_) => panic!("the group is a consumer group"),
        }
    }

    fn consumer_heartbeat(
        &mut self,
        request: &ConsumerGroupHeartbeatRequest,
    ) -> Result<ConsumerGroupHeartbeatResponse, GroupError> {
        let result = match &mut self.slot {
            Slot::Consumer(g) => g.heartbeat(request, 1, CLIENT, &self.topics, &self.cfg, self.now),
            Slot::Classic(classic) => {
                let mut trial = classic.clone();
                let (mut group, completions) =
                    upgrade(&mut trial, &self.topics, &self.cfg, self.now)?;
                let response =
                    group.heartbeat(request, 1, CLIENT, &self.topics, &self.cfg, self.now)?;
                self.slot = Slot::Consumer(group);
                self.deliver(completions);
                Ok(response)
            }
        };
        self.after();
        result
    }

    /// JoinGroup v9; the answer when it is ready now.
    fn join(&mut self, request: &JoinGroupRequest, version: i16) -> Option<JoinGroupResponse> {
        self.token += 1;
        let token = self.token;
        match &mut self.slot {
            Slot::Consumer(g) => {
                let response =
                    g.classic_join(request, version, CLIENT, &self.topics, &self.cfg, self.now);
                self.after();
                return Some(response);
            }
            Slot::Classic(g) => {
                let out = g.join(
                    request,
                    version,
                    "app",
                    "/127.0.0.1",
                    token,
                    &self.cfg,
                    self.now,
                );
                self.deliver(out);
            }
        }
        self.join_answer(token)
    }

    fn join_answer(&mut self, token: u64) -> Option<JoinGroupResponse> {
        match self.done.remove(&token) {
            Some(ClassicResponse::Join(r)) => Some(r),
            Some(other) => panic!("not a join answer: {other:?}"),
            None => None,
        }
    }

    fn sync(&mut self, request: &SyncGroupRequest) -> Option<SyncGroupResponse> {
        self.token += 1;
        let token = self.token;
        match &mut self.slot {
            Slot::Consumer(g) => return Some(g.classic_sync(request, 5, &self.topics, self.now)),
            Slot::Classic(g) => {
                let out = g.sync(request, 5, token, self.now);
                self.deliver(out);
            }
        }
        match self.done.remove(&token) {
            Some(ClassicResponse::Sync(r)) => Some(r),
            Some(other) => panic!("not a sync answer: {other:?}"),
            None => None,
        }
    }

    fn heartbeat(&mut self, member_id: &str, generation: i32) -> i16 {
        let request = HeartbeatRequest {
            group_id: GROUP.into(),
            member_id: member_id.into(),
            generation_id: generation,
            ..HeartbeatRequest::default()
        };
        match &mut self.slot {
            Slot::Consumer(g) => g.classic_heartbeat(&request, 4, self.now).error_code,
            Slot::Classic(g) => g.heartbeat(&request, 4, self.now).error_code,
        }
    }

    fn leave(&mut self, member_id: &str) {
        let request = LeaveGroupRequest {
            group_id: GROUP.into(),
            members: vec![MemberIdentity {
                member_id: member_id.into(),
                ..MemberIdentity::default()
            }],
            ..LeaveGroupRequest::default()
        };
        match &mut self.slot {
            Slot::Consumer(g) => {
                g.classic_leave(&request, 5, &self.topics, &self.cfg);
            }
            Slot::Classic(g) => {
                let (_, out) = g.leave(&request, 5, self.now);
                self.deliver(out);
            }
        }
        self.after();
    }

    fn advance(&mut self, ms: i64) {
        self.now += ms;
        match &mut self.slot {
            Slot::Consumer(g) => {
                g.on_timer(&self.topics, &self.cfg, self.now);
            }
            Slot::Classic(g) => {
                let out = g.on_timer(&self.cfg, self.now);
                self.deliver(out);
            }
        }
        self.after();
    }
}

fn subscription(owned: &BTreeMap<String, Vec<i32>>) -> Bytes {
    embedded::encode_subscription(1, &[TOPIC], owned)
}

fn join_request(member_id: &str, owned: &BTreeMap<String, Vec<i32>>) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: GROUP.into(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        member_id: member_id.into(),
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: subscription(owned),
            ..JoinGroupRequestProtocol::default()
        }],
        ..JoinGroupRequest::default()
    }
}

fn sync_request(
    member_id: &str,
    generation: i32,
    assignments: Vec<SyncGroupRequestAssignment>,
) -> SyncGroupRequest {
    SyncGroupRequest {
        group_id: GROUP.into(),
        generation_id: generation,
        member_id: member_id.into(),
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments,
        ..SyncGroupRequest::default()
    }
}

fn partitions_of(assignment: &[u8]) -> Vec<i32> {
    embedded::decode_assignment(assignment)
        .expect("a consumer assignment")
        .partitions
        .get(TOPIC)
        .cloned()
        .unwrap_or_default()
}

/// An eager classic consumer (range/roundrobin): it gives up everything before it rejoins.
struct Classic {
    id: String,
    generation: i32,
    owned: Vec<i32>,
}

impl Classic {
    /// JoinGroup with KIP-394's round trip on a consumer group; on a classic group the answer
    /// may be parked (then `None`).
    fn join(sim: &mut Sim) -> (String, Option<JoinGroupResponse>) {
        let first = sim
            .join(&join_request("", &BTreeMap::new()), 9)
            .expect("MEMBER_ID_REQUIRED is immediate");
        assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
        let id = first.member_id.to_string();
        let answer = sim.join(&join_request(&id, &BTreeMap::new()), 9);
        (id, answer)
    }

    /// Rejoins a consumer group and syncs (eager: owns nothing when it rejoins).
    fn rejoin_and_sync(&mut self, sim: &mut Sim) {
        self.owned.clear();
        let joined = sim
            .join(&join_request(&self.id, &BTreeMap::new()), 9)
            .expect("a consumer group answers at once");
        assert_eq!(joined.error_code, NONE, "{joined:?}");
        assert_eq!(&*joined.leader, "", "a classic member is never the leader");
        assert!(joined.members.is_empty());
        self.generation = joined.generation_id;
        let synced = sim
            .sync(&sync_request(&self.id, self.generation, Vec::new()))
            .expect("a consumer group answers at once");
        assert_eq!(synced.error_code, NONE, "{synced:?}");
        self.owned = partitions_of(&synced.assignment);
    }
}

/// Two classic consumers, Stable at generation 1 with a range assignment (0-2, 3-5).
fn stable_classic_group(sim: &mut Sim) -> (Classic, Classic) {
    let (a, first) = Classic::join(sim);
    assert!(first.is_none(), "parked until the rebalance completes");
    let leader_token = sim.token;
    let (b, _) = Classic::join(sim);
    // The initial delay (0 here, extended once per member joining in it) completes the join.
    let mut a_join = None;
    for _ in 0..4 {
        sim.advance(1);
        a_join = sim.join_answer(leader_token);
        if a_join.is_some() {
            break;
        }
    }
    let a_join = a_join.expect("joined");
    assert_eq!(&*a_join.leader, a.as_str());
    assert_eq!(a_join.members.len(), 2);
    let generation = a_join.generation_id;
    let range = |ps: &[i32]| {
        embedded::encode_assignment(1, &BTreeMap::from([(TOPIC.to_string(), ps.to_vec())]))
    };
    let assignments = vec![
        SyncGroupRequestAssignment {
            member_id: ByteString::from(a.as_str()),
            assignment: range(&[0, 1, 2]),
            ..Default::default()
        },
        SyncGroupRequestAssignment {
            member_id: ByteString::from(b.as_str()),
            assignment: range(&[3, 4, 5]),
            ..Default::default()
        },
    ];
    let a_sync = sim
        .sync(&sync_request(&a, generation, assignments))
        .expect("the leader's sync completes");
    let b_sync = sim
        .sync(&sync_request(&b, generation, Vec::new()))
        .expect("stable");
    assert_eq!(sim.classic().state(), ClassicGroupState::Stable);
    (
        Classic {
            id: a,
            generation,
            owned: partitions_of(&a_sync.assignment),
        },
        Classic {
            id: b,
            generation,
            owned: partitions_of(&b_sync.assignment),
        },
    )
}

/// A KIP-848 consumer that echoes its assignment as its owned partitions.
struct Modern {
    id: String,
    epoch: i32,
    owned: BTreeSet<i32>,
}

impl Modern {
    fn request(&self, epoch: i32) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest {
            group_id: GROUP.into(),
            member_id: self.id.as_str().into(),
            member_epoch: epoch,
            rebalance_timeout_ms: REBALANCE_MS,
            subscribed_topic_names: Some(vec![TOPIC.into()]),
            topic_partitions: Some(if epoch == 0 {
                Vec::new()
            } else {
                vec![
                    skiff_protocol::generated::consumer_group_heartbeat_request::TopicPartitions {
                        topic_id: topic_id(),
                        partitions: self.owned.iter().copied().collect(),
                        ..Default::default()
                    },
                ]
            }),
            ..ConsumerGroupHeartbeatRequest::default()
        }
    }

    fn heartbeat(&mut self, sim: &mut Sim) -> Result<(), GroupError> {
        let response = sim.consumer_heartbeat(&self.request(self.epoch))?;
        self.epoch = response.member_epoch;
        if let Some(assignment) = response.assignment {
            self.owned = assignment
                .topic_partitions
                .iter()
                .flat_map(|tp| tp.partitions.iter().copied())
                .collect();
        }
        Ok(())
    }

    fn leave(&mut self, sim: &mut Sim) {
        sim.consumer_heartbeat(&self.request(-1)).expect("leaves");
    }
}

fn all_owned<'a>(owned: impl IntoIterator<Item = &'a [i32]>) -> Vec<i32> {
    let mut all: Vec<i32> = owned.into_iter().flatten().copied().collect();
    all.sort_unstable();
    all
}

#[test]
fn a_classic_group_upgrades_when_a_consumer_member_joins_and_downgrades_when_it_leaves() {
    let mut sim = Sim::new(MigrationPolicy::Bidirectional);
    let (mut a, mut b) = stable_classic_group(&mut sim);
    assert_eq!(
        all_owned([&a.owned[..], &b.owned[..]]),
        vec![0, 1, 2, 3, 4, 5]
    );

    // A KIP-848 member joins: the group becomes a consumer group keeping both classic members
    // at their generation with their assignment.
    let mut c = Modern {
        id: "modern-member-id-aaaaaa".into(),
        epoch: 0,
        owned: BTreeSet::new(),
    };
    c.heartbeat(&mut sim).expect("joins and upgrades");
    let group = sim.consumer();
    assert_eq!(group.member_count(), 3);
    let member_a = group.member(&a.id).expect("a stays");
    assert!(member_a.uses_classic_protocol());
    assert_eq!(member_a.member_epoch(), a.generation);
    assert_eq!(group.group_epoch(), a.generation + 1);
    assert!(
        c.owned.is_empty(),
        "everything still belongs to the classic members"
    );

    // The classic members learn of the rebalance from their heartbeat and rejoin.
    assert_eq!(sim.heartbeat(&a.id, a.generation), REBALANCE_IN_PROGRESS);
    a.rejoin_and_sync(&mut sim);
    assert_eq!(sim.heartbeat(&b.id, b.generation), REBALANCE_IN_PROGRESS);
    b.rejoin_and_sync(&mut sim);
    // Rounds until everyone is reconciled (bounded).
    for _ in 0..10 {
        c.heartbeat(&mut sim).expect("heartbeat");
        for m in [&mut a, &mut b] {
            if sim.heartbeat(&m.id, m.generation) == REBALANCE_IN_PROGRESS {
                m.rejoin_and_sync(&mut sim);
            }
        }
    }
    let c_owned: Vec<i32> = c.owned.iter().copied().collect();
    assert_eq!(
        all_owned([&a.owned[..], &b.owned[..], &c_owned[..]]),
        vec![0, 1, 2, 3, 4, 5],
        "disjoint and complete: {:?} {:?} {c_owned:?}",
        a.owned,
        b.owned
    );
    assert!(!a.owned.is_empty() && !b.owned.is_empty() && !c.owned.is_empty());
    assert_eq!(sim.consumer().state_name(), "Stable");
    assert_eq!(sim.heartbeat(&a.id, a.generation), NONE);

    // Offsets: a classic member commits with its generation and any version.
    let group = sim.consumer();
    group
        .validate_offset_commit(&a.id, a.generation, 8)
        .expect("classic member commits with v8");
    let stale = group
        .validate_offset_commit(&a.id, a.generation - 1, 8)
        .expect_err("stale generation");
    assert_eq!(stale.code, ILLEGAL_GENERATION);
    let modern = group
        .validate_offset_commit(&c.id, c.epoch, 8)
        .expect_err("KIP-848 members need v9");
    assert_eq!(modern.code, UNSUPPORTED_VERSION);

    // The last KIP-848 member leaves: back to a classic group that rebalances at the same
    // generation, so the classic members' heartbeats ask them to rejoin.
    let epoch = sim.consumer().group_epoch();
    c.leave(&mut sim);
    let classic = sim.classic();
    assert_eq!(classic.state(), ClassicGroupState::PreparingRebalance);
    assert_eq!(classic.generation_id(), epoch);
    assert_eq!(classic.protocol_name(), Some("range"));
    assert_eq!(classic.num_members(), 2);
    assert_eq!(sim.heartbeat(&a.id, a.generation), REBALANCE_IN_PROGRESS);

    // Both rejoin; a leader assigns again, client side.
    assert!(
        sim.join(&join_request(&a.id, &BTreeMap::new()), 9)
            .is_none()
    );
    let b_join = sim
        .join(&join_request(&b.id, &BTreeMap::new()), 9)
        .expect("the last rejoin completes the join phase");
    assert_eq!(b_join.error_code, NONE);
    assert_eq!(b_join.generation_id, epoch + 1);
    assert_eq!(
        sim.classic().state(),
        ClassicGroupState::CompletingRebalance
    );
}

#[test]
fn classic_members_in_a_consumer_group_start_from_the_downgraded_assignment() {
    let mut sim = Sim::new(MigrationPolicy::Bidirectional);
    let (a, b) = stable_classic_group(&mut sim);
    let mut c = Modern {
        id: "modern-member-id-bbbbbb".into(),
        epoch: 0,
        owned: BTreeSet::new(),
    };
    c.heartbeat(&mut sim).expect("upgrades");
    let group = sim.consumer();
    let target = |id: &str| -> Vec<i32> {
        group
            .target_assignment(id)
            .and_then(|t| t.get(&topic_id()))
            .map(|ps| ps.iter().copied().collect())
            .unwrap_or_default()
    };
    let (target_a, target_b) = (target(&a.id), target(&b.id));
    assert_eq!(
        target_a.len() + target_b.len(),
        4,
        "c's share is the other two"
    );
    // The KIP-848 member leaves before anyone moved: the classic group that comes back carries
    // each member's target assignment as its assignment (Kafka's `fromConsumerGroup`).
    c.leave(&mut sim);
    let classic = sim.classic();
    let assignments: BTreeMap<String, Vec<i32>> = classic
        .members()
        .map(|m| (m.member_id.to_string(), partitions_of(m.assignment)))
        .collect();
    assert_eq!(assignments.get(&a.id), Some(&target_a));
    assert_eq!(assignments.get(&b.id), Some(&target_b));
}

#[test]
fn policies_gate_each_direction() {
    // Disabled: the KIP-848 member is refused and the classic group is untouched.
    let mut sim = Sim::new(MigrationPolicy::Disabled);
    let (a, _) = stable_classic_group(&mut sim);
    let mut c = Modern {
        id: "modern-member-id-cccccc".into(),
        epoch: 0,
        owned: BTreeSet::new(),
    };
    let err = c.heartbeat(&mut sim).expect_err("upgrade disabled");
    assert_eq!(err.code, GROUP_ID_NOT_FOUND);
    assert!(
        err.message.contains("online upgrade is disabled"),
        "{}",
        err.message
    );
    assert_eq!(sim.classic().state(), ClassicGroupState::Stable);
    assert_eq!(sim.heartbeat(&a.id, a.generation), NONE);

    // Upgrade only: the consumer group stays one when its last KIP-848 member leaves.
    let mut sim = Sim::new(MigrationPolicy::Upgrade);
    let (a, _) = stable_classic_group(&mut sim);
    c.epoch = 0;
    c.heartbeat(&mut sim).expect("upgrades");
    let epoch = sim.consumer().group_epoch();
    c.leave(&mut sim);
    let group = sim.consumer();
    assert_eq!(group.member_count(), 2);
    assert_eq!(
        group.group_epoch(),
        epoch + 1,
        "a plain fence bumps the epoch"
    );
    assert_eq!(sim.heartbeat(&a.id, a.generation), REBALANCE_IN_PROGRESS);
    // A classic member's LeaveGroup fences it like any member.
    sim.leave(&a.id);
    let group = sim.consumer();
    assert!(group.member(&a.id).is_none());
    assert_eq!(group.group_epoch(), epoch + 2);
}

#[test]
fn groups_that_cannot_be_upgraded_are_refused_with_kafkas_reasons() {
    // Not the consumer protocol (e.g. Kafka Connect workers).
    let mut classic = ClassicGroup::new(GROUP, 0);
    let cfg = GroupConfig {
        classic_initial_rebalance_delay_ms: 0,
        ..GroupConfig::default()
    };
    let mut request = join_request("", &BTreeMap::new());
    request.protocol_type = "connect".into();
    classic.join(&request, 3, "app", "/h", 1, &cfg, 0);
    let err = upgrade(&mut classic, &topics(), &cfg, 0).expect_err("not consumer");
    assert_eq!(err.code, GROUP_ID_NOT_FOUND);
    assert!(
        err.message.contains("consumer embedded protocol"),
        "{}",
        err.message
    );

    // Malformed subscription metadata.
    let mut classic = ClassicGroup::new(GROUP, 0);
    let mut request = join_request("", &BTreeMap::new());
    request.protocols[0].metadata = Bytes::from_static(&[0, 1, 0xff]);
    classic.join(&request, 3, "app", "/h", 1, &cfg, 0);
    let err = upgrade(&mut classic, &topics(), &cfg, 0).expect_err("malformed");
    assert!(err.message.contains("malformed"), "{}", err.message);
    assert_eq!(classic.num_members(), 1, "untouched");

    // A custom assignor's user data in the assignment.
    let mut sim = Sim::new(MigrationPolicy::Bidirectional);
    let (a, _) = stable_classic_group(&mut sim);
    let Slot::Classic(classic) = &mut sim.slot else {
        panic!("classic");
    };
    let mut snapshot = classic.snapshot();
    let with_user_data = {
        use skiff_protocol::Encodable;
        use skiff_protocol::generated::consumer_protocol_assignment::ConsumerProtocolAssignment;
        let mut buf = bytes::BytesMut::new();
        buf.extend_from_slice(&1i16.to_be_bytes());
        ConsumerProtocolAssignment {
            user_data: Some(Bytes::from_static(b"custom")),
            ..Default::default()
        }
        .encode(&mut buf, 1)
        .expect("encodes");
        buf.freeze()
    };
    for m in &mut snapshot.members {
        if m.member_id == a.id {
            m.assignment = with_user_data.clone();
        }
    }
    let mut restored = ClassicGroup::restore(snapshot, 0);
    let err = upgrade(&mut restored, &topics(), &cfg, 0).expect_err("user data");
    assert!(err.message.contains("custom assignor"), "{}", err.message);
}

#[test]
fn parked_classic_requests_are_told_to_rejoin_when_the_group_upgrades() {
    let mut sim = Sim::new(MigrationPolicy::Bidirectional);
    let (a, b) = stable_classic_group(&mut sim);
    // The leader rejoins a Stable group: a rebalance starts and its JoinGroup waits for B.
    assert!(
        sim.join(&join_request(&a.id, &BTreeMap::new()), 9)
            .is_none()
    );
    let parked = sim.token;
    assert_eq!(sim.classic().state(), ClassicGroupState::PreparingRebalance);
    let mut c = Modern {
        id: "modern-member-id-dddddd".into(),
        epoch: 0,
        owned: BTreeSet::new(),
    };
    c.heartbeat(&mut sim).expect("upgrades");
    let answer = sim
        .join_answer(parked)
        .expect("the parked join is answered");
    assert_eq!(answer.error_code, REBALANCE_IN_PROGRESS);
    let group = sim.consumer();
    assert!(group.member(&a.id).is_some() && group.member(&b.id).is_some());
}

#[test]
fn classic_joins_to_a_consumer_group_are_checked_like_kafka() {
    let mut sim = Sim::new(MigrationPolicy::Bidirectional);
    stable_classic_group(&mut sim);
    let mut c = Modern {
        id: "modern-member-id-eeeeee".into(),
        epoch: 0,
        owned: BTreeSet::new(),
    };
    c.heartbeat(&mut sim).expect("upgrades");

    // JoinGroup v3 gets its member ID at once (no KIP-394 round trip).
    let joined = sim
        .join(&join_request("", &BTreeMap::new()), 3)
        .expect("immediate");
    assert_eq!(joined.error_code, NONE, "{joined:?}");
    assert!(!joined.member_id.is_empty());
    assert_eq!(sim.consumer().member_count(), 4);

    // Another protocol type, malformed metadata and a session timeout out of range.
    let mut other = join_request("x", &BTreeMap::new());
    other.protocol_type = "connect".into();
    assert_eq!(
        sim.join(&other, 9).expect("immediate").error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let mut garbage = join_request("y", &BTreeMap::new());
    garbage.protocols[0].metadata = Bytes::from_static(&[0, 0, 0x7f, 0xff, 0xff, 0xff]);
    assert_eq!(
        sim.join(&garbage, 9).expect("immediate").error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let mut short = join_request("z", &BTreeMap::new());
    short.session_timeout_ms = 1;
    assert_eq!(
        sim.join(&short, 9).expect("immediate").error_code,
        INVALID_SESSION_TIMEOUT
    );
    assert_eq!(sim.consumer().member_count(), 4, "nothing joined");

    // SyncGroup and Heartbeat of the KIP-848 member are refused (it is no classic member).
    let sync = sim
        .sync(&sync_request(&c.id, c.epoch, Vec::new()))
        .expect("immediate");
    assert_eq!(sync.error_code, UNKNOWN_MEMBER_ID);
    assert_eq!(sim.heartbeat(&c.id, c.epoch), UNKNOWN_MEMBER_ID);
    assert_eq!(sim.heartbeat("nobody", 1), UNKNOWN_MEMBER_ID);
}

#[test]
fn classic_members_that_do_not_sync_or_heartbeat_are_fenced_on_their_own_timeouts() {
    let mut sim = Sim::new(MigrationPolicy::Upgrade);
    let (mut a, b) = stable_classic_group(&mut sim);
    let mut c = Modern {
        id: "modern-member-id-ffffff".into(),
        epoch: 0,
        owned: BTreeSet::new(),
    };
    c.heartbeat(&mut sim).expect("upgrades");
    // A joins but never syncs: fenced after its rebalance timeout.
    a.owned.clear();
    let joined = sim
        .join(&join_request(&a.id, &BTreeMap::new()), 9)
        .expect("immediate");
    assert_eq!(joined.error_code, NONE);
    // B and C keep their sessions alive; B must rejoin, and does not (join timeout).
    let mut fenced_a = false;
    for _ in 0..((i64::from(REBALANCE_MS) / 5_000) + 2) {
        sim.advance(5_000);
        c.heartbeat(&mut sim).expect("c stays");
        if sim.consumer().member(&b.id).is_some() {
            sim.heartbeat(&b.id, b.generation);
        }
        if sim.consumer().member(&a.id).is_none() {
            fenced_a = true;
        }
    }
    assert!(fenced_a, "a never synced");
    assert!(sim.consumer().member(&b.id).is_none(), "b never rejoined");
    assert_eq!(sim.consumer().member_count(), 1);
}

#[test]
fn classic_member_sessions_use_the_join_groups_session_timeout() {
    let mut sim = Sim::new(MigrationPolicy::Upgrade);
    let (a, b) = stable_classic_group(&mut sim);
    let mut c = Modern {
        id: "modern-member-id-gggggg".into(),
        epoch: 0,
        owned: BTreeSet::new(),
    };
    c.heartbeat(&mut sim).expect("upgrades");
    // Well under the consumer session timeout (45 s), over the classic one (10 s).
    for _ in 0..3 {
        sim.advance(4_000);
        c.heartbeat(&mut sim).expect("c stays");
        sim.heartbeat(&b.id, b.generation);
    }
    let group = sim.consumer();
    assert!(group.member(&a.id).is_none(), "a's 10 s session expired");
    assert!(group.member(&b.id).is_some());
}

#[test]
fn classic_metadata_survives_a_snapshot() {
    let mut sim = Sim::new(MigrationPolicy::Bidirectional);
    let (a, _) = stable_classic_group(&mut sim);
    let mut c = Modern {
        id: "modern-member-id-hhhhhh".into(),
        epoch: 0,
        owned: BTreeSet::new(),
    };
    c.heartbeat(&mut sim).expect("upgrades");
    let snapshot = sim.consumer().snapshot();
    let json = serde_json::to_vec(&snapshot).expect("serialises");
    let back: crate::consumer::ConsumerGroupSnapshot =
        serde_json::from_slice(&json).expect("deserialises");
    let restored = ConsumerGroup::restore(back, 1_000);
    let member = restored.member(&a.id).expect("a");
    assert_eq!(
        member.classic(),
        sim.consumer().member(&a.id).and_then(|m| m.classic())
    );
    assert_eq!(member.state(), MemberState::Stable);
    // The classic session timeout (10 s) is re-armed, not the consumer one (45 s).
    assert_eq!(
        restored.next_deadline(),
        Some(1_000 + i64::from(SESSION_MS))
    );
    // A snapshot of a group without classic members reads as before (no `classic` key).
    let plain = ConsumerGroup::new("plain").snapshot();
    let text = serde_json::to_string(&plain).expect("serialises");
    assert!(!text.contains("classic"));
}

#[test]
fn a_member_behind_the_epoch_at_a_downgrade_is_asked_to_rejoin_not_fenced() {
    let mut sim = Sim::new(MigrationPolicy::Bidirectional);
    let (mut a, b) = stable_classic_group(&mut sim);
    let mut c = Modern {
        id: "modern-member-id-iiiiii".into(),
        epoch: 0,
        owned: BTreeSet::new(),
    };
    c.heartbeat(&mut sim).expect("upgrades");
    // A catches up with the new epoch, B does not before C leaves.
    a.rejoin_and_sync(&mut sim);
    assert!(a.generation > b.generation);
    c.leave(&mut sim);
    let generation = sim.classic().generation_id();
    assert_eq!(generation, a.generation);
    assert_eq!(sim.heartbeat(&b.id, b.generation), REBALANCE_IN_PROGRESS);
    assert_eq!(sim.heartbeat(&b.id, b.generation - 1), ILLEGAL_GENERATION);
    sim.classic()
        .validate_offset_commit(&b.id, b.generation, None)
        .expect("b may commit what it owns until it rejoins");
    // Once a new generation starts, the old one is just stale.
    assert!(
        sim.join(&join_request(&a.id, &BTreeMap::new()), 9)
            .is_none()
    );
    let joined = sim
        .join(&join_request(&b.id, &BTreeMap::new()), 9)
        .expect("the last rejoin completes the join phase");
    assert_eq!(joined.generation_id, generation + 1);
    assert_eq!(sim.heartbeat(&b.id, b.generation), ILLEGAL_GENERATION);
}
