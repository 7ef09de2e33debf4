//! Scenario tests for the classic group state machine, with an injected clock.

use bytes::Bytes;
use skiff_protocol::ByteString;
use skiff_protocol::error_codes::{
    COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, GROUP_ID_NOT_FOUND, GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED,
    NONE, NOT_COORDINATOR, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID,
};
use skiff_protocol::generated::heartbeat_request::HeartbeatRequest;
use skiff_protocol::generated::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use skiff_protocol::generated::join_group_response::JoinGroupResponse;
use skiff_protocol::generated::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use skiff_protocol::generated::sync_group_request::{SyncGroupRequest, SyncGroupRequestAssignment};
use skiff_protocol::generated::sync_group_response::SyncGroupResponse;

use super::*;
use crate::types::GroupConfig;

const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 60_000;
const DELAY_MS: i64 = 3_000;

fn protocols(list: &[(&str, &str)]) -> Vec<JoinGroupRequestProtocol> {
    list.iter()
        .map(|(name, meta)| JoinGroupRequestProtocol {
            name: ByteString::from(*name),
            metadata: Bytes::from(meta.as_bytes().to_vec()),
            ..JoinGroupRequestProtocol::default()
        })
        .collect()
}

fn join_request(
    member_id: &str,
    instance: Option<&str>,
    list: &[(&str, &str)],
) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: ByteString::from("g"),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        member_id: ByteString::from(member_id),
        group_instance_id: instance.map(ByteString::from),
        protocol_type: ByteString::from("consumer"),
        protocols: protocols(list),
        ..JoinGroupRequest::default()
    }
}

const RANGE: &[(&str, &str)] = &[("range", "sub")];

struct Harness {
    g: ClassicGroup,
    cfg: GroupConfig,
    now: i64,
    token: u64,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            g: ClassicGroup::new("g", 0),
            cfg: GroupConfig {
                classic_initial_rebalance_delay_ms: DELAY_MS,
                ..GroupConfig::default()
            },
            now: 0,
            token: 0,
        }
    }

    fn next_token(&mut self) -> u64 {
        self.token += 1;
        self.token
    }

    fn join(
        &mut self,
        request: &JoinGroupRequest,
        version: i16,
        client: &str,
    ) -> (u64, Vec<Completion>) {
        let token = self.next_token();
        let out = self.g.join(
            request,
            version,
            client,
            "/127.0.0.1",
            token,
            &self.cfg,
            self.now,
        );
        (token, out)
    }

    /// KIP-394 round trip (v9): returns the member ID and the token of the parked rejoin.
    fn join_new(&mut self, client: &str, list: &[(&str, &str)]) -> (String, u64, Vec<Completion>) {
        let (token, out) = self.join(&join_request("", None, list), 9, client);
        let first = join_of(&out, token);
        assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
        let id = first.member_id.to_string();
        assert!(id.starts_with(&format!("{client}-")), "{id}");
        let (token, out) = self.join(&join_request(&id, None, list), 9, client);
        (id, token, out)
    }

    fn rejoin(&mut self, id: &str, list: &[(&str, &str)]) -> (u64, Vec<Completion>) {
        self.join(&join_request(id, None, list), 9, "c")
    }

    fn advance_to(&mut self, at: i64) -> Vec<Completion> {
        self.now = at;
        self.g.on_timer(&self.cfg, at)
    }

    /// Fires the timers up to the next deadline.
    fn fire_next(&mut self) -> Vec<Completion> {
        let at = self.g.next_deadline().expect("a deadline");
        self.advance_to(at)
    }

    fn sync(
        &mut self,
        id: &str,
        generation: i32,
        assignments: &[(&str, &str)],
    ) -> (u64, Vec<Completion>) {
        let token = self.next_token();
        let request = SyncGroupRequest {
            group_id: ByteString::from("g"),
            generation_id: generation,
            member_id: ByteString::from(id),
            protocol_type: Some(ByteString::from("consumer")),
            protocol_name: Some(ByteString::from("range")),
            assignments: assignments
                .iter()
                .map(|(m, a)| SyncGroupRequestAssignment {
                    member_id: ByteString::from(*m),
                    assignment: Bytes::from(a.as_bytes().to_vec()),
                    ..SyncGroupRequestAssignment::default()
                })
                .collect(),
            ..SyncGroupRequest::default()
        };
        let out = self.g.sync(&request, 5, token, self.now);
        (token, out)
    }

    fn heartbeat(&mut self, id: &str, generation: i32) -> i16 {
        self.heartbeat_static(id, None, generation)
    }

    fn heartbeat_static(&mut self, id: &str, instance: Option<&str>, generation: i32) -> i16 {
        let request = HeartbeatRequest {
            group_id: ByteString::from("g"),
            generation_id: generation,
            member_id: ByteString::from(id),
            group_instance_id: instance.map(ByteString::from),
            ..HeartbeatRequest::default()
        };
        self.g.heartbeat(&request, 4, self.now).error_code
    }

    /// A Stable group with `clients.len()` dynamic members, all synced. Returns their IDs (the
    /// first is the leader).
    fn stable(&mut self, clients: &[&str]) -> Vec<String> {
        let mut ids = Vec::new();
        let mut tokens = Vec::new();
        for client in clients {
            let (id, token, out) = self.join_new(client, RANGE);
            assert!(out.is_empty());
            ids.push(id);
            tokens.push(token);
        }
        let mut done = Vec::new();
        while done.len() < clients.len() {
            done.extend(self.fire_next());
        }
        let generation = self.g.generation_id();
        let assignments: Vec<(String, String)> = ids
            .iter()
            .map(|id| (id.clone(), format!("a-{id}")))
            .collect();
        let refs: Vec<(&str, &str)> = assignments
            .iter()
            .map(|(m, a)| (m.as_str(), a.as_str()))
            .collect();
        let leader = self.g.leader_id().expect("leader").to_string();
        self.sync(&leader, generation, &refs);
        for id in &ids {
            if *id != leader {
                let (token, out) = self.sync(id, generation, &[]);
                assert_eq!(sync_of(&out, token).error_code, NONE);
            }
        }
        assert_eq!(self.g.state(), ClassicGroupState::Stable);
        ids
    }
}

fn join_of(out: &[Completion], token: u64) -> JoinGroupResponse {
    out.iter()
        .find_map(|c| match (&c.response, c.token == token) {
            (ClassicResponse::Join(r), true) => Some(r.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no join completion for token {token} in {out:?}"))
}

fn sync_of(out: &[Completion], token: u64) -> SyncGroupResponse {
    out.iter()
        .find_map(|c| match (&c.response, c.token == token) {
            (ClassicResponse::Sync(r), true) => Some(r.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no sync completion for token {token} in {out:?}"))
}

fn has_token(out: &[Completion], token: u64) -> bool {
    out.iter().any(|c| c.token == token)
}

#[test]
fn member_id_required_round_trip_v4_plus() {
    let mut h = Harness::new();
    let (token, out) = h.join(&join_request("", None, RANGE), 4, "client");
    let r = join_of(&out, token);
    assert_eq!(r.error_code, MEMBER_ID_REQUIRED);
    assert!(r.member_id.starts_with("client-"));
    // "client-" + a hyphenated UUID.
    assert_eq!(r.member_id.len(), "client-".len() + 36);
    assert_eq!(h.g.state(), ClassicGroupState::Empty);
    assert_eq!(h.g.num_members(), 0);

    let id = r.member_id.to_string();
    let (token, out) = h.join(&join_request(&id, None, RANGE), 4, "client");
    assert!(out.is_empty(), "parked during the initial delay");
    assert_eq!(h.g.state(), ClassicGroupState::PreparingRebalance);
    assert_eq!(h.g.next_deadline(), Some(DELAY_MS));

    let out = h.advance_to(DELAY_MS);
    let r = join_of(&out, token);
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.generation_id, 1);
    assert_eq!(r.member_id, id.as_str());
    assert_eq!(r.leader, id.as_str());
    assert_eq!(r.protocol_name.as_deref(), Some("range"));
    assert_eq!(r.members.len(), 1);
    assert_eq!(r.members[0].metadata, Bytes::from_static(b"sub"));
    assert_eq!(h.g.state(), ClassicGroupState::CompletingRebalance);
}

#[test]
fn join_v3_adds_the_member_at_once() {
    let mut h = Harness::new();
    let (token, out) = h.join(&join_request("", None, RANGE), 3, "client");
    assert!(out.is_empty());
    assert_eq!(h.g.num_members(), 1);
    let out = h.fire_next();
    let r = join_of(&out, token);
    assert_eq!(r.error_code, NONE);
    assert!(r.member_id.starts_with("client-"));
    assert_eq!(r.generation_id, 1);
    // Before v7 the protocol name is never null.
    assert_eq!(r.protocol_name.as_deref(), Some("range"));
    assert_eq!(r.protocol_type, None);
}

#[test]
fn two_members_within_the_initial_delay_share_one_generation() {
    let mut h = Harness::new();
    let (a, ta, _) = h.join_new("a", RANGE);
    h.now = 1_000;
    let (b, tb, out) = h.join_new("b", RANGE);
    assert!(out.is_empty());
    // B joined during the delay: the delay is extended once.
    assert!(h.advance_to(DELAY_MS).is_empty());
    assert_eq!(h.g.state(), ClassicGroupState::PreparingRebalance);
    let out = h.fire_next();
    assert_eq!(h.now, 2 * DELAY_MS);
    let ra = join_of(&out, ta);
    let rb = join_of(&out, tb);
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    assert_eq!(ra.leader, a.as_str());
    assert_eq!(rb.leader, a.as_str());
    let listed: Vec<&str> = ra.members.iter().map(|m| &*m.member_id).collect();
    assert_eq!(listed, vec![a.as_str(), b.as_str()]);
    assert!(rb.members.is_empty(), "followers get no member list");
}

#[test]
fn leader_sync_distributes_the_assignment() {
    let mut h = Harness::new();
    let (a, ta, _) = h.join_new("a", RANGE);
    let (b, tb, _) = h.join_new("b", RANGE);
    let out = h.fire_next();
    let out = [out, h.fire_next()].concat();
    assert!(has_token(&out, ta) && has_token(&out, tb));
    let before = h.g.change_counter();

    let (token, out) = h.sync(&a, 1, &[(&a, "pa"), (&b, "pb")]);
    assert_eq!(sync_of(&out, token).assignment, Bytes::from_static(b"pa"));
    assert_eq!(sync_of(&out, token).protocol_name.as_deref(), Some("range"));
    assert_eq!(h.g.state(), ClassicGroupState::Stable);
    assert!(h.g.change_counter() > before);

    let (token, out) = h.sync(&b, 1, &[]);
    assert_eq!(sync_of(&out, token).assignment, Bytes::from_static(b"pb"));
    let views: Vec<(String, Bytes)> =
        h.g.members()
            .map(|m| (m.member_id.to_string(), m.assignment.clone()))
            .collect();
    assert_eq!(
        views,
        vec![
            (a, Bytes::from_static(b"pa")),
            (b, Bytes::from_static(b"pb"))
        ]
    );
}

#[test]
fn follower_sync_waits_for_the_leader() {
    let mut h = Harness::new();
    let (a, _, _) = h.join_new("a", RANGE);
    let (b, _, _) = h.join_new("b", RANGE);
    h.fire_next();
    h.fire_next();
    let (tb, out) = h.sync(&b, 1, &[]);
    assert!(out.is_empty(), "parked until the leader syncs");

    let (ta, out) = h.sync(&a, 1, &[(&b, "pb")]);
    assert_eq!(sync_of(&out, tb).assignment, Bytes::from_static(b"pb"));
    assert_eq!(
        sync_of(&out, ta).assignment,
        Bytes::new(),
        "missing assignment is empty"
    );
    assert_eq!(h.g.state(), ClassicGroupState::Stable);
}

#[test]
fn third_member_joining_a_stable_group_triggers_a_rebalance() {
    let mut h = Harness::new();
    let ids = h.stable(&["a", "b"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let (c, tc, out) = h.join_new("c", RANGE);
    assert!(out.is_empty());
    assert_eq!(h.g.state(), ClassicGroupState::PreparingRebalance);
    assert_eq!(h.heartbeat(&a, 1), REBALANCE_IN_PROGRESS);
    assert_eq!(h.heartbeat(&b, 1), REBALANCE_IN_PROGRESS);

    let (ta, out) = h.rejoin(&a, RANGE);
    assert!(out.is_empty());
    let (tb, out) = h.rejoin(&b, RANGE);
    // The last rejoin completes the join phase at once (no initial delay now).
    let ra = join_of(&out, ta);
    assert_eq!(ra.generation_id, 2);
    assert_eq!(ra.leader, a.as_str());
    assert_eq!(ra.members.len(), 3);
    assert_eq!(join_of(&out, tb).generation_id, 2);
    assert_eq!(join_of(&out, tc).member_id, c.as_str());
    assert_eq!(h.g.state(), ClassicGroupState::CompletingRebalance);
    assert_eq!(h.heartbeat(&a, 2), NONE);
    assert_eq!(h.heartbeat(&a, 1), ILLEGAL_GENERATION);
}

#[test]
fn rebalance_timeout_removes_members_that_do_not_rejoin() {
    let mut h = Harness::new();
    let ids = h.stable(&["a", "b"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let (_c, tc, _) = h.join_new("c", RANGE);
    let start = h.now;
    let (ta, _) = h.rejoin(&a, RANGE);
    // B keeps heartbeating but never rejoins.
    let mut out = Vec::new();
    while !has_token(&out, ta) {
        h.now += 5_000;
        assert!(h.now <= start + i64::from(REBALANCE_MS));
        if h.g.has_member(&b) {
            assert_eq!(h.heartbeat(&b, 1), REBALANCE_IN_PROGRESS);
        }
        out = h.g.on_timer(&h.cfg, h.now);
    }
    assert_eq!(h.now, start + i64::from(REBALANCE_MS));
    assert_eq!(join_of(&out, ta).generation_id, 2);
    assert_eq!(join_of(&out, tc).generation_id, 2);
    assert!(!h.g.has_member(&b));
    assert_eq!(h.heartbeat(&b, 2), UNKNOWN_MEMBER_ID);
    assert_eq!(h.g.num_members(), 2);
}

#[test]
fn member_session_expiry_during_a_rebalance_completes_the_join() {
    let mut h = Harness::new();
    let ids = h.stable(&["a", "b"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let synced_at = h.now;
    let (ta, out) = h.rejoin(&a, RANGE);
    assert!(out.is_empty(), "the leader's rejoin starts a rebalance");
    assert_eq!(h.g.state(), ClassicGroupState::PreparingRebalance);
    // B is silent: its session (armed at its sync) expires long before the rebalance timeout.
    let out = h.fire_next();
    assert_eq!(h.now, synced_at + i64::from(SESSION_MS));
    let r = join_of(&out, ta);
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.members.len(), 1);
    assert!(!h.g.has_member(&b));
}

#[test]
fn session_expiry_in_a_stable_group() {
    let mut h = Harness::new();
    let ids = h.stable(&["a", "b"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    // A heartbeats every 3 s; B is silent.
    let mut left = false;
    for _ in 0..5 {
        h.now += 3_000;
        h.g.on_timer(&h.cfg, h.now);
        if !h.g.has_member(&b) {
            left = true;
            break;
        }
        assert_eq!(h.heartbeat(&a, 1), NONE);
    }
    assert!(left, "B expired");
    assert_eq!(h.g.state(), ClassicGroupState::PreparingRebalance);
    assert_eq!(h.heartbeat(&a, 1), REBALANCE_IN_PROGRESS);
    let (ta, out) = h.rejoin(&a, RANGE);
    let r = join_of(&out, ta);
    assert_eq!((r.generation_id, r.members.len()), (2, 1));
}

#[test]
fn leaving_leader_hands_leadership_over() {
    let mut h = Harness::new();
    let ids = h.stable(&["a", "b"]);
    let request = LeaveGroupRequest {
        member_id: ByteString::from(ids[0].as_str()),
        ..LeaveGroupRequest::default()
    };
    let (response, out) = h.g.leave(&request, 0, h.now);
    assert_eq!(response.error_code, NONE);
    assert!(out.is_empty());
    assert_eq!(h.g.leader_id(), Some(ids[1].as_str()));
    assert_eq!(h.g.state(), ClassicGroupState::PreparingRebalance);
}

fn stable_with_static(h: &mut Harness) -> (String, String) {
    // Static member A (instance "ia") and dynamic member B.
    let (ta, out) = h.join(&join_request("", Some("ia"), RANGE), 9, "a");
    assert!(
        out.is_empty(),
        "static members need no MEMBER_ID_REQUIRED round trip"
    );
    let (b, tb, _) = h.join_new("b", RANGE);
    let mut out = Vec::new();
    while !has_token(&out, tb) {
        out.extend(h.fire_next());
    }
    let a = join_of(&out, ta).member_id.to_string();
    assert!(
        a.starts_with("ia-"),
        "static member IDs start with the instance ID: {a}"
    );
    assert_eq!(h.g.leader_id(), Some(a.as_str()));
    h.sync(&a, 1, &[(&a, "pa"), (&b, "pb")]);
    (a, b)
}

#[test]
fn static_member_replacement_keeps_the_group_stable() {
    let mut h = Harness::new();
    let (a, b) = stable_with_static(&mut h);
    let before = h.g.change_counter();

    // A restarts: same instance ID, unknown member ID, same metadata (v9).
    let (token, out) = h.join(&join_request("", Some("ia"), RANGE), 9, "a");
    let r = join_of(&out, token);
    assert_eq!(r.error_code, NONE);
    let a2 = r.member_id.to_string();
    assert_ne!(a2, a);
    assert_eq!(r.generation_id, 1, "no rebalance");
    assert_eq!(r.leader, a2.as_str());
    assert!(
        r.skip_assignment,
        "KIP-814: the replaced leader skips the assignment"
    );
    assert_eq!(r.members.len(), 2);
    assert_eq!(h.g.state(), ClassicGroupState::Stable);
    assert!(
        h.g.change_counter() > before,
        "the new member ID is persisted"
    );

    // The old member ID is fenced; the new one keeps the old assignment.
    assert_eq!(h.heartbeat_static(&a, Some("ia"), 1), FENCED_INSTANCE_ID);
    assert_eq!(h.heartbeat_static(&a2, Some("ia"), 1), NONE);
    let (token, out) = h.sync(&a2, 1, &[]);
    assert_eq!(sync_of(&out, token).assignment, Bytes::from_static(b"pa"));
    assert_eq!(h.heartbeat(&b, 1), NONE);
    assert_eq!(
        h.g.validate_offset_commit(&a, 1, Some("ia"))
            .unwrap_err()
            .code,
        FENCED_INSTANCE_ID
    );
}

#[test]
fn static_leader_replacement_before_v9_reports_the_old_leader() {
    let mut h = Harness::new();
    let (a, _b) = stable_with_static(&mut h);
    let (token, out) = h.join(&join_request("", Some("ia"), RANGE), 5, "a");
    let r = join_of(&out, token);
    assert_eq!(r.error_code, NONE);
    assert_eq!(
        r.leader,
        a.as_str(),
        "the old ID: the new member acts as a follower"
    );
    assert!(r.members.is_empty());
    assert!(!r.skip_assignment);
    assert_eq!(h.g.state(), ClassicGroupState::Stable);
}

#[test]
fn static_member_with_new_protocol_triggers_a_rebalance_and_fences_parked_requests() {
    let mut h = Harness::new();
    let (a, b) = stable_with_static(&mut h);
    // B rejoins with new metadata: rebalance.
    let (tb, _) = h.rejoin(&b, &[("range", "sub2")]);
    assert_eq!(h.g.state(), ClassicGroupState::PreparingRebalance);
    // A rejoins (parked), then restarts and rejoins under the same instance ID.
    let (ta, out) = h.join(&join_request(&a, Some("ia"), RANGE), 9, "a");
    let r = join_of(&out, tb);
    assert_eq!(r.generation_id, 2);
    assert_eq!(join_of(&out, ta).generation_id, 2);
    assert_eq!(h.g.state(), ClassicGroupState::CompletingRebalance);
    // B (a follower) parks its SyncGroup while the leader is busy.
    let (tsb, out) = h.sync(&b, 2, &[]);
    assert!(out.is_empty());
    let (ta2, out) = h.join(&join_request("", Some("ia"), RANGE), 9, "a");
    // Replacing a member while completing a rebalance forces a new one: B's parked sync is
    // told to rejoin.
    assert_eq!(sync_of(&out, tsb).error_code, REBALANCE_IN_PROGRESS);
    assert!(!has_token(&out, ta2));
    assert_eq!(h.g.state(), ClassicGroupState::PreparingRebalance);
    assert_eq!(h.heartbeat_static(&a, Some("ia"), 2), FENCED_INSTANCE_ID);
}

#[test]
fn leave_during_a_rebalance_completes_the_join() {
    let mut h = Harness::new();
    let ids = h.stable(&["a", "b"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let (_c, tc, _) = h.join_new("c", RANGE);
    let (ta, _) = h.rejoin(&a, RANGE);
    let request = LeaveGroupRequest {
        member_id: ByteString::from(b.as_str()),
        ..LeaveGroupRequest::default()
    };
    let (response, out) = h.g.leave(&request, 1, h.now);
    assert_eq!(response.error_code, NONE);
    assert!(response.members.is_empty());
    assert_eq!(join_of(&out, ta).generation_id, 2);
    assert_eq!(join_of(&out, tc).generation_id, 2);
    assert_eq!(h.g.num_members(), 2);
}

#[test]
fn leave_of_a_parked_member_answers_its_join() {
    let mut h = Harness::new();
    let ids = h.stable(&["a", "b"]);
    let (ta, _) = h.rejoin(&ids[0], RANGE);
    let request = LeaveGroupRequest {
        member_id: ByteString::from(ids[0].as_str()),
        ..LeaveGroupRequest::default()
    };
    let (_, out) = h.g.leave(&request, 2, h.now);
    let r = join_of(&out, ta);
    assert_eq!((r.error_code, &*r.member_id), (UNKNOWN_MEMBER_ID, ""));
}

#[test]
fn batched_leave_reports_each_member() {
    let mut h = Harness::new();
    let (a, b) = stable_with_static(&mut h);
    let identity = |member: &str, instance: Option<&str>| MemberIdentity {
        member_id: ByteString::from(member),
        group_instance_id: instance.map(ByteString::from),
        reason: None,
        ..MemberIdentity::default()
    };
    let request = LeaveGroupRequest {
        group_id: ByteString::from("g"),
        members: vec![
            identity(&b, None),
            identity("ghost", None),
            identity("", Some("nobody")),
            identity("", Some("ia")),
        ],
        ..LeaveGroupRequest::default()
    };
    let (response, _) = h.g.leave(&request, 3, h.now);
    assert_eq!(response.error_code, NONE);
    let codes: Vec<(&str, i16)> = response
        .members
        .iter()
        .map(|m| (&*m.member_id, m.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![
            (b.as_str(), NONE),
            ("ghost", UNKNOWN_MEMBER_ID),
            ("", UNKNOWN_MEMBER_ID),
            ("", NONE)
        ]
    );
    assert!(!h.g.has_member(&a) && !h.g.has_member(&b));
    assert_eq!(h.g.state(), ClassicGroupState::Empty);
    assert_eq!(h.g.generation_id(), 2);

    // Before v3 the member error is the top-level error.
    let request = LeaveGroupRequest {
        member_id: ByteString::from("ghost"),
        ..LeaveGroupRequest::default()
    };
    let (response, _) = h.g.leave(&request, 2, h.now);
    assert_eq!(response.error_code, UNKNOWN_MEMBER_ID);
    assert!(response.members.is_empty());
}

#[test]
fn protocol_selection_by_vote() {
    let mut h = Harness::new();
    let a_protocols: &[(&str, &str)] = &[
        ("roundrobin", "a-rr"),
        ("range", "a-range"),
        ("sticky", "a-st"),
    ];
    let b_protocols: &[(&str, &str)] = &[("range", "b-range"), ("roundrobin", "b-rr")];
    let c_protocols: &[(&str, &str)] = &[("range", "c-range"), ("roundrobin", "c-rr")];
    let (_, ta, _) = h.join_new("a", a_protocols);
    h.join_new("b", b_protocols);
    h.join_new("c", c_protocols);
    let mut out = Vec::new();
    while !has_token(&out, ta) {
        out.extend(h.fire_next());
    }
    let r = join_of(&out, ta);
    // "sticky" is not supported by all; "range" has two votes against one.
    assert_eq!(r.protocol_name.as_deref(), Some("range"));
    let metadata: Vec<&[u8]> = r.members.iter().map(|m| &m.metadata[..]).collect();
    assert_eq!(metadata, vec![&b"a-range"[..], b"b-range", b"c-range"]);
}

#[test]
fn inconsistent_group_protocol() {
    let mut h = Harness::new();
    // An empty group needs a protocol type and at least one protocol.
    let (token, out) = h.join(&join_request("", None, &[]), 9, "x");
    assert_eq!(join_of(&out, token).error_code, INCONSISTENT_GROUP_PROTOCOL);
    let mut request = join_request("", None, RANGE);
    request.protocol_type = ByteString::from("");
    let (token, out) = h.join(&request, 9, "x");
    assert_eq!(join_of(&out, token).error_code, INCONSISTENT_GROUP_PROTOCOL);

    h.stable(&["a"]);
    let (token, out) = h.join(&join_request("", None, &[("roundrobin", "")]), 9, "x");
    let r = join_of(&out, token);
    assert_eq!(r.error_code, INCONSISTENT_GROUP_PROTOCOL);
    assert_eq!(r.member_id, "");
    assert_eq!(r.protocol_name, None, "null from v7");
    let mut request = join_request("", None, RANGE);
    request.protocol_type = ByteString::from("connect");
    let (token, out) = h.join(&request, 6, "x");
    let r = join_of(&out, token);
    assert_eq!(r.error_code, INCONSISTENT_GROUP_PROTOCOL);
    assert_eq!(r.protocol_name.as_deref(), Some(""), "empty before v7");
}

#[test]
fn stale_generation_is_illegal_for_heartbeat_and_sync() {
    let mut h = Harness::new();
    let ids = h.stable(&["a", "b"]);
    let a = ids[0].clone();
    let (ta, _) = h.rejoin(&a, RANGE);
    let (_, out) = h.rejoin(&ids[1], RANGE);
    assert_eq!(join_of(&out, ta).generation_id, 2);
    assert_eq!(h.heartbeat(&a, 1), ILLEGAL_GENERATION);
    let (token, out) = h.sync(&a, 1, &[]);
    assert_eq!(sync_of(&out, token).error_code, ILLEGAL_GENERATION);
    assert_eq!(h.heartbeat("ghost", 2), UNKNOWN_MEMBER_ID);
    let (token, out) = h.sync("ghost", 2, &[]);
    assert_eq!(sync_of(&out, token).error_code, UNKNOWN_MEMBER_ID);
}

#[test]
fn sync_during_preparing_rebalance_is_refused() {
    let mut h = Harness::new();
    let ids = h.stable(&["a", "b"]);
    h.join_new("c", RANGE);
    let (token, out) = h.sync(&ids[1], 1, &[]);
    assert_eq!(sync_of(&out, token).error_code, REBALANCE_IN_PROGRESS);
}

#[test]
fn leader_that_never_syncs_is_removed_and_followers_rejoin() {
    let mut h = Harness::new();
    let (a, _, _) = h.join_new("a", RANGE);
    let (b, _, _) = h.join_new("b", RANGE);
    h.fire_next();
    h.fire_next();
    let completed_at = h.now;
    let (tb, out) = h.sync(&b, 1, &[]);
    assert!(out.is_empty());
    // A heartbeats (so its session holds) but never sends SyncGroup; B is parked.
    let mut out = Vec::new();
    while !has_token(&out, tb) {
        h.now += 5_000;
        assert_eq!(h.heartbeat(&a, 1), NONE);
        out = h.g.on_timer(&h.cfg, h.now);
    }
    assert_eq!(h.now, completed_at + i64::from(REBALANCE_MS));
    assert_eq!(sync_of(&out, tb).error_code, REBALANCE_IN_PROGRESS);
    assert!(!h.g.has_member(&a));
    assert_eq!(h.g.leader_id(), Some(b.as_str()));
    let (token, out) = h.rejoin(&b, RANGE);
    assert_eq!(join_of(&out, token).generation_id, 2);
}

#[test]
fn session_timeout_bounds_and_group_max_size() {
    let mut h = Harness::new();
    let mut request = join_request("", None, RANGE);
    request.session_timeout_ms = 1_000;
    let (token, out) = h.join(&request, 9, "x");
    assert_eq!(join_of(&out, token).error_code, INVALID_SESSION_TIMEOUT);

    h.cfg.classic_max_size = 1;
    h.stable(&["a"]);
    let (token, out) = h.join(&join_request("", None, RANGE), 9, "x");
    let r = join_of(&out, token);
    assert_eq!((r.error_code, &*r.member_id), (GROUP_MAX_SIZE_REACHED, ""));
}

#[test]
fn repeated_join_answers_the_superseded_request() {
    let mut h = Harness::new();
    let (id, t1, _) = h.join_new("a", RANGE);
    let (t2, out) = h.rejoin(&id, RANGE);
    assert_eq!(join_of(&out, t1).error_code, REBALANCE_IN_PROGRESS);
    let out = h.fire_next();
    assert_eq!(join_of(&out, t2).error_code, NONE);
}

#[test]
fn pending_member_that_never_rejoins_expires() {
    let mut h = Harness::new();
    let (token, out) = h.join(&join_request("", None, RANGE), 9, "a");
    assert_eq!(join_of(&out, token).error_code, MEMBER_ID_REQUIRED);
    assert_eq!(h.g.next_deadline(), Some(i64::from(SESSION_MS)));
    assert!(h.fire_next().is_empty());
    assert_eq!(h.g.next_deadline(), None);
}

#[test]
fn static_members_that_do_not_rejoin_are_kept() {
    let mut h = Harness::new();
    let (a, b) = stable_with_static(&mut h);
    let (c, tc, _) = h.join_new("c", RANGE);
    let mut out = Vec::new();
    while !has_token(&out, tc) {
        h.now += 5_000;
        // A (static) and B (dynamic) heartbeat but never rejoin.
        for (id, instance) in [(&a, Some("ia")), (&b, None)] {
            if h.g.has_member(id) {
                assert_eq!(h.heartbeat_static(id, instance, 1), REBALANCE_IN_PROGRESS);
            }
        }
        out = h.g.on_timer(&h.cfg, h.now);
    }
    let r = join_of(&out, tc);
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.leader, c.as_str(), "the old leader did not rejoin");
    assert_eq!(
        r.members.len(),
        2,
        "the static member stays in the generation"
    );
    assert!(h.g.has_member(&a) && !h.g.has_member(&b));
    assert_eq!(h.heartbeat_static(&a, Some("ia"), 1), ILLEGAL_GENERATION);
}

#[test]
fn offset_commit_validation() {
    let mut h = Harness::new();
    // Empty group: admin / simple-consumer commits with generation -1 are accepted.
    assert!(h.g.validate_offset_commit("", -1, None).is_ok());
    assert_eq!(
        h.g.validate_offset_commit("ghost", 0, None)
            .unwrap_err()
            .code,
        UNKNOWN_MEMBER_ID
    );

    let (a, _, _) = h.join_new("a", RANGE);
    h.fire_next();
    // CompletingRebalance.
    assert_eq!(
        h.g.validate_offset_commit(&a, 1, None).unwrap_err().code,
        REBALANCE_IN_PROGRESS
    );
    assert!(h.g.validate_txn_offset_commit(&a, 1, None).is_ok());
    h.sync(&a, 1, &[(&a, "x")]);
    assert!(h.g.validate_offset_commit(&a, 1, None).is_ok());
    assert_eq!(
        h.g.validate_offset_commit(&a, 0, None).unwrap_err().code,
        ILLEGAL_GENERATION
    );
    assert_eq!(
        h.g.validate_offset_commit("", -1, None).unwrap_err().code,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        h.g.validate_offset_commit(&a, 1, Some("ia"))
            .unwrap_err()
            .code,
        UNKNOWN_MEMBER_ID
    );
    assert!(h.g.validate_offset_fetch().is_ok());

    // A commit keeps the session alive in a Stable group.
    let deadline = h.g.next_deadline().expect("session timer");
    h.now = deadline - 1;
    h.g.on_offset_commit(&a, h.now);
    assert!(h.g.next_deadline().expect("session timer") > deadline);

    let out = h.g.unload(h.now);
    assert!(out.is_empty());
    assert_eq!(h.g.state_name(), "Dead");
    assert_eq!(
        h.g.validate_offset_commit(&a, 1, None).unwrap_err().code,
        COORDINATOR_NOT_AVAILABLE
    );
    assert_eq!(
        h.g.validate_offset_fetch().unwrap_err().code,
        GROUP_ID_NOT_FOUND
    );
}

#[test]
fn unload_answers_parked_requests() {
    let mut h = Harness::new();
    let (_, token, _) = h.join_new("a", RANGE);
    let out = h.g.unload(h.now);
    assert_eq!(join_of(&out, token).error_code, NOT_COORDINATOR);
    assert_eq!(h.g.next_deadline(), None);
    let (token, out) = h.join(&join_request("", None, RANGE), 9, "b");
    assert_eq!(join_of(&out, token).error_code, COORDINATOR_NOT_AVAILABLE);
}

#[test]
fn describe_shows_metadata_only_when_stable() {
    let mut h = Harness::new();
    let (a, _, _) = h.join_new("a", RANGE);
    let d = h.g.describe();
    assert_eq!(&*d.group_state, "PreparingRebalance");
    assert_eq!(&*d.protocol_type, "consumer");
    assert_eq!(&*d.protocol_data, "");
    assert_eq!(d.members.len(), 1);
    assert!(d.members[0].member_metadata.is_empty());
    assert_eq!(&*d.members[0].client_host, "/127.0.0.1");

    h.fire_next();
    assert_eq!(&*h.g.describe().group_state, "CompletingRebalance");
    h.sync(&a, 1, &[(&a, "x")]);
    let d = h.g.describe();
    assert_eq!(&*d.group_state, "Stable");
    assert_eq!(&*d.protocol_data, "range");
    assert_eq!(d.members[0].member_metadata, Bytes::from_static(b"sub"));
    assert_eq!(d.members[0].member_assignment, Bytes::from_static(b"x"));
    assert_eq!(&*d.members[0].client_id, "a");
}

#[test]
fn snapshot_restore_round_trip() {
    let mut h = Harness::new();
    let (a, b) = stable_with_static(&mut h);
    let snapshot = h.g.snapshot();

    // A rebalance in progress is not what a snapshot holds: it keeps the last persisted view.
    h.join_new("c", RANGE);
    assert_eq!(h.g.snapshot(), snapshot);

    let json = serde_json::to_string(&snapshot).expect("serialize");
    assert!(json.contains("\"7061\""), "blobs are hex: {json}");
    let back: ClassicGroupSnapshot = serde_json::from_str(&json).expect("deserialize");
    assert_eq!(back, snapshot);

    let restored_at = 1_000_000;
    let mut r = ClassicGroup::restore(back, restored_at);
    assert_eq!(r.state(), ClassicGroupState::Stable);
    assert_eq!(r.generation_id(), 1);
    assert_eq!(r.leader_id(), Some(a.as_str()));
    assert_eq!(r.protocol_name(), Some("range"));
    assert_eq!(r.change_counter(), 0);
    let views: Vec<(String, Option<String>, Bytes)> = r
        .members()
        .map(|m| {
            (
                m.member_id.to_string(),
                m.group_instance_id.map(str::to_string),
                m.assignment.clone(),
            )
        })
        .collect();
    assert_eq!(
        views,
        vec![
            (a.clone(), Some("ia".to_string()), Bytes::from_static(b"pa")),
            (b.clone(), None, Bytes::from_static(b"pb")),
        ]
    );
    assert_eq!(r.next_deadline(), Some(restored_at + i64::from(SESSION_MS)));
    let heartbeat = HeartbeatRequest {
        generation_id: 1,
        member_id: ByteString::from(b.as_str()),
        ..HeartbeatRequest::default()
    };
    assert_eq!(r.heartbeat(&heartbeat, 4, restored_at + 1).error_code, NONE);
    // The static member restarts after the broker did: replaced without a rebalance.
    let cfg = GroupConfig::default();
    let out = r.join(
        &join_request("", Some("ia"), RANGE),
        9,
        "a",
        "/h",
        7,
        &cfg,
        restored_at + 2,
    );
    let resp = join_of(&out, 7);
    assert_eq!((resp.error_code, resp.generation_id), (NONE, 1));
    assert_eq!(r.state(), ClassicGroupState::Stable);
    // A follower's unchanged rejoin gets the current generation back.
    let out = r.join(
        &join_request(&b, None, RANGE),
        9,
        "b",
        "/h",
        8,
        &cfg,
        restored_at + 3,
    );
    assert_eq!(join_of(&out, 8).generation_id, 1);
    // Nobody else heartbeats: the session timers armed at restore expire.
    let out = r.on_timer(&cfg, restored_at + i64::from(SESSION_MS) + 1);
    assert!(out.is_empty());
    assert_eq!(r.state(), ClassicGroupState::PreparingRebalance);
    assert!(r.has_member(&resp.member_id));
    assert!(!r.has_member(&b));
}

#[test]
fn empty_snapshot_restores_an_empty_group() {
    let g = ClassicGroup::new("g", 5);
    assert_eq!(g.change_counter(), 1, "a new group is persisted");
    let r = ClassicGroup::restore(g.snapshot(), 10);
    assert!(r.is_empty());
    assert_eq!(r.next_deadline(), None);
    assert!(r.validate_offset_commit("", -1, None).is_ok());
}

#[test]
fn sync_responses_are_shaped_by_version() {
    let mut h = Harness::new();
    let (a, _, _) = h.join_new("a", RANGE);
    h.fire_next();
    let request = SyncGroupRequest {
        generation_id: 1,
        member_id: ByteString::from(a.as_str()),
        assignments: vec![SyncGroupRequestAssignment {
            member_id: ByteString::from(a.as_str()),
            assignment: Bytes::from_static(b"x"),
            ..SyncGroupRequestAssignment::default()
        }],
        ..SyncGroupRequest::default()
    };
    let out = h.g.sync(&request, 3, 99, h.now);
    let r = sync_of(&out, 99);
    assert_eq!((r.error_code, r.protocol_name.clone()), (NONE, None));
    assert_eq!(r.assignment, Bytes::from_static(b"x"));
    // A v5 request naming the wrong protocol is inconsistent.
    let mut wrong = request.clone();
    wrong.protocol_name = Some(ByteString::from("roundrobin"));
    let out = h.g.sync(&wrong, 5, 100, h.now);
    assert_eq!(sync_of(&out, 100).error_code, INCONSISTENT_GROUP_PROTOCOL);
}

#[test]
fn initial_delay_never_exceeds_the_rebalance_timeout() {
    let mut h = Harness::new();
    let mut request = join_request("", None, RANGE);
    request.rebalance_timeout_ms = 2 * DELAY_MS as i32;
    let (t1, _) = h.join(&request, 3, "a");
    let (t2, _) = h.join(&request, 3, "b");
    assert!(h.advance_to(DELAY_MS + 1).is_empty(), "extended once");
    let (t3, _) = h.join(&request, 3, "c");
    // The extension was scheduled when the timer fired (DELAY_MS + 1), as Kafka's timer does.
    assert!(h.advance_to(2 * DELAY_MS).is_empty());
    // No time is left: the newcomer does not extend the delay again.
    let out = h.advance_to(2 * DELAY_MS + 1);
    for token in [t1, t2, t3] {
        assert_eq!(join_of(&out, token).generation_id, 1);
    }
}

#[test]
fn duplicate_static_member_fences_the_parked_join() {
    let mut h = Harness::new();
    let (a, _b) = stable_with_static(&mut h);
    h.join_new("c", RANGE);
    assert_eq!(h.g.state(), ClassicGroupState::PreparingRebalance);
    let (old, out) = h.join(&join_request(&a, Some("ia"), RANGE), 9, "a");
    assert!(out.is_empty());
    let (new, out) = h.join(&join_request("", Some("ia"), RANGE), 9, "a");
    let r = join_of(&out, old);
    assert_eq!(r.error_code, FENCED_INSTANCE_ID);
    assert_eq!(&*r.member_id, a.as_str());
    assert_eq!(
        (r.generation_id, &*r.leader, r.protocol_name.clone()),
        (-1, "", None)
    );
    assert!(
        !has_token(&out, new),
        "the new member ID waits for the rebalance"
    );
    assert_eq!(h.g.state(), ClassicGroupState::PreparingRebalance);
}

#[test]
fn snapshot_blobs_reject_bad_hex() {
    let snapshot = ClassicGroup::new("g", 0).snapshot();
    let mut json = serde_json::to_value(&snapshot).expect("serialize");
    json["members"] = serde_json::json!([{
        "member_id": "m", "group_instance_id": null, "client_id": "c", "client_host": "h",
        "rebalance_timeout_ms": 1, "session_timeout_ms": 1, "protocols": [],
        "assignment": "abc"
    }]);
    assert!(serde_json::from_value::<ClassicGroupSnapshot>(json.clone()).is_err());
    json["members"][0]["assignment"] = serde_json::json!("zz");
    assert!(serde_json::from_value::<ClassicGroupSnapshot>(json.clone()).is_err());
    json["members"][0]["assignment"] = serde_json::json!("00ff");
    let back: ClassicGroupSnapshot = serde_json::from_value(json).expect("valid hex");
    assert_eq!(back.members[0].assignment, Bytes::from_static(&[0, 0xff]));
}
