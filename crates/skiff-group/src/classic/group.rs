//! The classic group state machine.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use skiff_protocol::ByteString;
use skiff_protocol::Uuid;
use skiff_protocol::error_codes::{
    COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, GROUP_ID_NOT_FOUND, GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED,
    NONE, NOT_COORDINATOR, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID,
};
use skiff_protocol::generated::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use skiff_protocol::generated::heartbeat_request::HeartbeatRequest;
use skiff_protocol::generated::heartbeat_response::HeartbeatResponse;
use skiff_protocol::generated::join_group_request::JoinGroupRequest;
use skiff_protocol::generated::join_group_response::{JoinGroupResponse, JoinGroupResponseMember};
use skiff_protocol::generated::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use skiff_protocol::generated::leave_group_response::{LeaveGroupResponse, MemberResponse};
use skiff_protocol::generated::sync_group_request::SyncGroupRequest;
use skiff_protocol::generated::sync_group_response::SyncGroupResponse;
use tracing::{debug, info};

use super::member::{Member, Parked, Protocol};
use super::snapshot::{ClassicGroupSnapshot, ClassicMemberSnapshot, ProtocolSnapshot};
use super::{ClassicGroupState, ClassicResponse, Completion};
use crate::types::{GroupConfig, GroupError};

use ClassicGroupState::{CompletingRebalance, Dead, Empty, PreparingRebalance, Stable};

/// How long a new member's JoinGroup may stay parked before the member is dropped (Kafka's
/// `CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS`, 5 minutes). Its session timeout does not apply
/// while it cannot heartbeat.
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 5 * 60 * 1000;

/// JoinGroup v4+ (KIP-394): a new dynamic member must rejoin with a coordinator-chosen ID.
const MEMBER_ID_REQUIRED_SINCE: i16 = 4;
/// JoinGroup v9 (KIP-814): a replaced static leader may skip the assignment.
const SKIP_ASSIGNMENT_SINCE: i16 = 9;

/// A member as the broker's client views and ListGroups/DescribeGroups see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberView<'a> {
    pub member_id: &'a str,
    pub group_instance_id: Option<&'a str>,
    pub client_id: &'a str,
    pub client_host: &'a str,
    pub assignment: &'a Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JoinTimerKind {
    /// The first rebalance of an empty group waits for more members (Kafka's
    /// `tryCompleteInitialRebalanceElseSchedule`).
    InitialDelay { delay_ms: i64, remaining_ms: i64 },
    /// The rebalance timeout: complete the join phase without the members that did not rejoin.
    Complete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct JoinTimer {
    deadline_ms: i64,
    kind: JoinTimerKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SyncTimer {
    deadline_ms: i64,
    generation_id: i32,
}

/// Time and the one config value the internal steps need.
#[derive(Debug, Clone, Copy)]
struct Tick {
    now_ms: i64,
    initial_delay_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    Join,
    Sync,
    Member,
    Pending,
}

/// A JoinGroup request with the version rules applied and its strings owned.
#[derive(Debug, Clone)]
struct JoinParams {
    member_id: String,
    instance_id: Option<String>,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    protocol_type: String,
    protocols: Vec<Protocol>,
    client_id: String,
    client_host: String,
    version: i16,
}

/// One classic group. See the module documentation.
#[derive(Debug, Clone)]
pub struct ClassicGroup {
    group_id: String,
    state: ClassicGroupState,
    previous_state: ClassicGroupState,
    state_timestamp_ms: i64,
    generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader_id: Option<String>,
    members: BTreeMap<String, Member>,
    /// group.instance.id -> member ID.
    static_members: BTreeMap<String, String>,
    /// KIP-394 members told to rejoin with their new ID -> when that offer expires.
    pending_members: BTreeMap<String, i64>,
    /// Members that have not sent SyncGroup for the current generation.
    pending_sync: BTreeSet<String>,
    /// A member joined during the initial delay, which extends it.
    new_member_added: bool,
    join_timer: Option<JoinTimer>,
    sync_timer: Option<SyncTimer>,
    next_seq: u64,
    change_counter: u64,
    /// The group as of the last persisted change.
    record: ClassicGroupSnapshot,
    /// After a downgrade from a consumer group: the member epoch each member had there, when
    /// it lags the generation. Until the next generation those members' heartbeats, syncs and
    /// commits are judged as if they carried the current generation, so a member that was
    /// still catching up is told to rejoin (and may commit what it owns) rather than being told
    /// its generation is illegal (which clients treat as a lost assignment).
    migrated_generations: BTreeMap<String, i32>,
}

/// `now + timeout`, at least 1 ms ahead so a timer never fires again at the same instant.
fn deadline(now_ms: i64, timeout_ms: i64) -> i64 {
    now_ms.saturating_add(timeout_ms.max(1))
}

fn bs(s: &str) -> ByteString {
    ByteString::from(s)
}

fn opt_bs(s: Option<&str>) -> Option<ByteString> {
    s.map(ByteString::from)
}

fn group_error(code: i16, message: &str) -> GroupError {
    GroupError::new(code, message)
}

fn join_error(member_id: &str, code: i16) -> JoinGroupResponse {
    JoinGroupResponse {
        error_code: code,
        member_id: bs(member_id),
        protocol_name: None,
        ..JoinGroupResponse::default()
    }
}

fn sync_error(code: i16) -> SyncGroupResponse {
    SyncGroupResponse {
        error_code: code,
        ..SyncGroupResponse::default()
    }
}

/// Kafka's `JoinGroupResponse(data, version)`: protocol name "" before v7, null from v7.
pub(crate) fn fit_join(mut response: JoinGroupResponse, version: i16) -> JoinGroupResponse {
    if version < 7 {
        if response.protocol_name.is_none() {
            response.protocol_name = Some(ByteString::from_static(""));
        }
        response.protocol_type = None;
    } else if response.protocol_name.as_deref() == Some("") {
        response.protocol_name = None;
    }
    if version < SKIP_ASSIGNMENT_SINCE {
        response.skip_assignment = false;
    }
    if version < 5 {
        for member in &mut response.members {
            member.group_instance_id = None;
        }
    }
    response
}

pub(crate) fn fit_sync(mut response: SyncGroupResponse, version: i16) -> SyncGroupResponse {
    if version < 5 {
        response.protocol_type = None;
        response.protocol_name = None;
    }
    response
}

fn complete_join(out: &mut Vec<Completion>, parked: Parked, response: JoinGroupResponse) {
    out.push(Completion {
        token: parked.token,
        response: ClassicResponse::Join(fit_join(response, parked.version)),
    });
}

fn complete_sync(out: &mut Vec<Completion>, parked: Parked, response: SyncGroupResponse) {
    out.push(Completion {
        token: parked.token,
        response: ClassicResponse::Sync(fit_sync(response, parked.version)),
    });
}

/// Kafka's `isProtocolInconsistent`: both sides known and different.
fn protocol_inconsistent(from_request: Option<&str>, actual: Option<&str>) -> bool {
    matches!((from_request, actual), (Some(r), Some(a)) if r != a)
}

impl ClassicGroup {
    /// A new, empty group. Its change counter starts at 1: Kafka persists a new group at once.
    pub fn new(group_id: &str, now_ms: i64) -> ClassicGroup {
        let mut group = ClassicGroup {
            group_id: group_id.to_string(),
            state: Empty,
            previous_state: Dead,
            state_timestamp_ms: now_ms,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            new_member_added: false,
            join_timer: None,
            sync_timer: None,
            next_seq: 0,
            change_counter: 0,
            migrated_generations: BTreeMap::new(),
            record: ClassicGroupSnapshot {
                group_id: group_id.to_string(),
                protocol_type: None,
                generation_id: 0,
                protocol_name: None,
                leader_id: None,
                state_timestamp_ms: now_ms,
                members: Vec::new(),
            },
        };
        group.persist();
        group
    }

    // ---------------------------------------------------------------------------------------
    // Accessors

    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    pub fn state(&self) -> ClassicGroupState {
        self.state
    }

    /// Kafka's state name: "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead".
    pub fn state_name(&self) -> &'static str {
        self.state.name()
    }

    /// When the group entered its current state.
    pub fn state_timestamp_ms(&self) -> i64 {
        self.state_timestamp_ms
    }

    /// Kafka's `isEmpty`: the group is in the Empty state (KIP-394 pending members may exist).
    pub fn is_empty(&self) -> bool {
        self.state == Empty
    }

    pub fn generation_id(&self) -> i32 {
        self.generation_id
    }

    /// Set by the first member ever to join; kept while the group is empty.
    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    /// The protocol selected for the current generation.
    pub fn protocol_name(&self) -> Option<&str> {
        self.protocol_name.as_deref()
    }

    pub fn leader_id(&self) -> Option<&str> {
        self.leader_id.as_deref()
    }

    pub fn num_members(&self) -> usize {
        self.members.len()
    }

    pub fn has_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    /// Members in join order.
    pub fn members(&self) -> impl Iterator<Item = MemberView<'_>> {
        self.members_in_order().into_iter().map(|m| MemberView {
            member_id: &m.id,
            group_instance_id: m.instance_id.as_deref(),
            client_id: &m.client_id,
            client_host: &m.client_host,
            assignment: &m.assignment,
        })
    }

    /// Bumped at every change Kafka persists (see the module documentation).
    pub fn change_counter(&self) -> u64 {
        self.change_counter
    }

    /// The group as of its last persisted change.
    pub fn snapshot(&self) -> ClassicGroupSnapshot {
        self.record.clone()
    }

    /// DescribeGroups for this group. Member metadata and the protocol name are filled only when
    /// the group is Stable (Kafka's `describeGroups`).
    pub fn describe(&self) -> DescribedGroup {
        let stable = self.state == Stable;
        let protocol = self.protocol_name.as_deref();
        DescribedGroup {
            group_id: bs(&self.group_id),
            group_state: ByteString::from_static(self.state.name()),
            protocol_type: bs(self.protocol_type.as_deref().unwrap_or("")),
            protocol_data: bs(if stable { protocol.unwrap_or("") } else { "" }),
            members: self
                .members_in_order()
                .into_iter()
                .map(|m| DescribedGroupMember {
                    member_id: bs(&m.id),
                    group_instance_id: opt_bs(m.instance_id.as_deref()),
                    client_id: bs(&m.client_id),
                    client_host: bs(&m.client_host),
                    member_metadata: if stable {
                        m.metadata(protocol)
                    } else {
                        Bytes::new()
                    },
                    member_assignment: m.assignment.clone(),
                    ..DescribedGroupMember::default()
                })
                .collect(),
            ..DescribedGroup::default()
        }
    }

    // ---------------------------------------------------------------------------------------
    // JoinGroup

    /// Handles JoinGroup v0-9 (`version`). `client_id` and `client_host` come from the request
    /// context (Kafka shows the host as `/address`). Returns the responses ready now, possibly
    /// including this request's (`token`); otherwise it stays parked until the join phase ends.
    ///
    /// The broker creates a group only for a JoinGroup with an empty member ID (Kafka answers a
    /// known member ID for a missing group with UNKNOWN_MEMBER_ID); this method gives the same
    /// answer for a member ID the group does not know.
    #[allow(clippy::too_many_arguments)]
    pub fn join(
        &mut self,
        request: &JoinGroupRequest,
        version: i16,
        client_id: &str,
        client_host: &str,
        token: u64,
        config: &GroupConfig,
        now_ms: i64,
    ) -> Vec<Completion> {
        let mut out = Vec::new();
        let parked = Parked { token, version };
        let tick = Tick {
            now_ms,
            initial_delay_ms: config.classic_initial_rebalance_delay_ms,
        };
        let session = i64::from(request.session_timeout_ms);
        if session < config.classic_min_session_timeout_ms
            || session > config.classic_max_session_timeout_ms
        {
            complete_join(
                &mut out,
                parked,
                join_error(&request.member_id, INVALID_SESSION_TIMEOUT),
            );
            return out;
        }
        let params = JoinParams {
            member_id: request.member_id.to_string(),
            instance_id: if version >= 5 {
                request.group_instance_id.as_deref().map(str::to_string)
            } else {
                None
            },
            session_timeout_ms: request.session_timeout_ms,
            // v0 has no rebalance timeout: Kafka uses the session timeout.
            rebalance_timeout_ms: if version == 0 {
                request.session_timeout_ms
            } else {
                request.rebalance_timeout_ms
            },
            protocol_type: request.protocol_type.to_string(),
            protocols: request
                .protocols
                .iter()
                .map(|p| Protocol {
                    name: p.name.to_string(),
                    metadata: Bytes::copy_from_slice(&p.metadata),
                })
                .collect(),
            client_id: client_id.to_string(),
            client_host: client_host.to_string(),
            version,
        };

        if !self.accept_joining_member(&params.member_id, config.classic_max_size) {
            self.remove_member(&params.member_id, &mut out);
            complete_join(&mut out, parked, join_error("", GROUP_MAX_SIZE_REACHED));
        } else if params.member_id.is_empty() {
            self.join_new_member(params, parked, tick, &mut out);
        } else {
            self.join_existing_member(params, parked, tick, &mut out);
        }
        out
    }

    /// Kafka's `acceptJoiningMember`: the group.max.size check.
    fn accept_joining_member(&self, member_id: &str, max_size: usize) -> bool {
        match self.state {
            Empty | Dead => true,
            PreparingRebalance => {
                self.members
                    .get(member_id)
                    .is_some_and(|m| m.awaiting_join.is_some())
                    || self.num_awaiting_join() < max_size
            }
            CompletingRebalance | Stable => {
                self.members.contains_key(member_id) || self.members.len() < max_size
            }
        }
    }

    fn join_new_member(
        &mut self,
        params: JoinParams,
        parked: Parked,
        tick: Tick,
        out: &mut Vec<Completion>,
    ) {
        if self.state == Dead {
            complete_join(out, parked, join_error("", COORDINATOR_NOT_AVAILABLE));
            return;
        }
        if !self.supports_protocols(&params.protocol_type, &params.protocols) {
            complete_join(out, parked, join_error("", INCONSISTENT_GROUP_PROTOCOL));
            return;
        }
        let prefix = params
            .instance_id
            .clone()
            .unwrap_or_else(|| params.client_id.clone());
        let new_id = self.generate_member_id(&prefix, tick.now_ms);
        match params.instance_id.clone() {
            Some(instance_id) => match self.static_members.get(&instance_id).cloned() {
                Some(old_id) => {
                    info!(
                        group = %self.group_id, %instance_id, old = %old_id, new = %new_id,
                        state = %self.state, "static member rejoins with an unknown member ID; replacing it"
                    );
                    self.replace_static_member_then_rebalance_or_complete_join(
                        &instance_id,
                        &old_id,
                        new_id,
                        params,
                        parked,
                        tick,
                        out,
                    );
                }
                None => self
                    .add_member_then_rebalance_or_complete_join(new_id, params, parked, tick, out),
            },
            None if params.version >= MEMBER_ID_REQUIRED_SINCE => {
                debug!(group = %self.group_id, member = %new_id, "new member must rejoin with its ID");
                self.pending_members.insert(
                    new_id.clone(),
                    deadline(tick.now_ms, i64::from(params.session_timeout_ms)),
                );
                complete_join(out, parked, join_error(&new_id, MEMBER_ID_REQUIRED));
            }
            None => {
                self.add_member_then_rebalance_or_complete_join(new_id, params, parked, tick, out)
            }
        }
    }

    fn generate_member_id(&mut self, prefix: &str, now_ms: i64) -> String {
        match Uuid::random() {
            Ok(uuid) => format!("{prefix}-{}", uuid.to_hyphenated()),
            // No OS randomness: still unique within this group.
            Err(_) => {
                self.next_seq += 1;
                format!("{prefix}-{now_ms:x}-{:x}", self.next_seq)
            }
        }
    }

    fn join_existing_member(
        &mut self,
        params: JoinParams,
        parked: Parked,
        tick: Tick,
        out: &mut Vec<Completion>,
    ) {
        let member_id = params.member_id.clone();
        if self.state == Dead {
            complete_join(
                out,
                parked,
                join_error(&member_id, COORDINATOR_NOT_AVAILABLE),
            );
            return;
        }
        if !self.supports_protocols(&params.protocol_type, &params.protocols) {
            complete_join(
                out,
                parked,
                join_error(&member_id, INCONSISTENT_GROUP_PROTOCOL),
            );
            return;
        }
        if self.pending_members.contains_key(&member_id) {
            // Pending members are dynamic; Kafka treats an instance ID here as a broken client.
            if params.instance_id.is_some() {
                complete_join(out, parked, join_error(&member_id, UNKNOWN_MEMBER_ID));
                return;
            }
            self.add_member_then_rebalance_or_complete_join(member_id, params, parked, tick, out);
            return;
        }
        if let Err(code) = self.validate_member(&member_id, params.instance_id.as_deref()) {
            complete_join(out, parked, join_error(&member_id, code));
            return;
        }
        let (is_leader, matches) = match self.members.get(&member_id) {
            Some(m) => (
                self.leader_id.as_deref() == Some(member_id.as_str()),
                m.matches(&params.protocols),
            ),
            None => (false, false),
        };
        match self.state {
            PreparingRebalance => {
                self.update_member_then_rebalance_or_complete_join(params, parked, tick, out)
            }
            CompletingRebalance | Stable
                if matches && (self.state == CompletingRebalance || !is_leader) =>
            {
                // The member lost its JoinGroup response (or is a follower with unchanged
                // metadata): answer with the current generation.
                let response =
                    self.join_success(&member_id, is_leader && self.state == CompletingRebalance);
                complete_join(out, parked, response);
            }
            // The leader rejoining a Stable group, or changed metadata: rebalance.
            CompletingRebalance | Stable => {
                self.update_member_then_rebalance_or_complete_join(params, parked, tick, out)
            }
            Empty | Dead => complete_join(out, parked, join_error(&member_id, UNKNOWN_MEMBER_ID)),
        }
    }

    /// The join response of the current generation.
    fn join_success(&self, member_id: &str, with_members: bool) -> JoinGroupResponse {
        JoinGroupResponse {
            error_code: NONE,
            generation_id: self.generation_id,
            protocol_type: opt_bs(self.protocol_type.as_deref()),
            protocol_name: opt_bs(self.protocol_name.as_deref()),
            leader: bs(self.leader_id.as_deref().unwrap_or("")),
            skip_assignment: false,
            member_id: bs(member_id),
            members: if with_members {
                self.current_member_metadata()
            } else {
                Vec::new()
            },
            ..JoinGroupResponse::default()
        }
    }

    /// What the leader receives: every member with its metadata for the selected protocol.
    fn current_member_metadata(&self) -> Vec<JoinGroupResponseMember> {
        let protocol = self.protocol_name.as_deref();
        self.members_in_order()
            .into_iter()
            .map(|m| JoinGroupResponseMember {
                member_id: bs(&m.id),
                group_instance_id: opt_bs(m.instance_id.as_deref()),
                metadata: m.metadata(protocol),
                ..JoinGroupResponseMember::default()
            })
            .collect()
    }

    fn add_member_then_rebalance_or_complete_join(
        &mut self,
        member_id: String,
        params: JoinParams,
        parked: Parked,
        tick: Tick,
        out: &mut Vec<Completion>,
    ) {
        self.next_seq += 1;
        let member = Member {
            id: member_id.clone(),
            instance_id: params.instance_id,
            client_id: params.client_id,
            client_host: params.client_host,
            rebalance_timeout_ms: params.rebalance_timeout_ms,
            session_timeout_ms: params.session_timeout_ms,
            protocols: params.protocols,
            assignment: Bytes::new(),
            awaiting_join: Some(parked),
            awaiting_sync: None,
            is_new: true,
            // A parked new member cannot heartbeat: its join times out instead.
            heartbeat_deadline: Some(deadline(tick.now_ms, NEW_MEMBER_JOIN_TIMEOUT_MS)),
            seq: self.next_seq,
        };
        if self.state == PreparingRebalance && self.previous_state == Empty {
            self.new_member_added = true;
        }
        if self.members.is_empty() {
            self.protocol_type = Some(params.protocol_type);
        }
        if let Some(instance_id) = &member.instance_id {
            self.static_members
                .insert(instance_id.clone(), member_id.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member_id.clone());
        }
        self.pending_members.remove(&member_id);
        info!(group = %self.group_id, member = %member_id, state = %self.state, "member joins");
        self.members.insert(member_id, member);
        self.maybe_prepare_rebalance_or_complete_join(tick, out);
    }

    fn update_member_then_rebalance_or_complete_join(
        &mut self,
        params: JoinParams,
        parked: Parked,
        tick: Tick,
        out: &mut Vec<Completion>,
    ) {
        self.update_member(&params.member_id, &params, parked, out);
        self.maybe_prepare_rebalance_or_complete_join(tick, out);
    }

    /// Stores a member's new protocols and timeouts and parks its JoinGroup. A JoinGroup already
    /// parked for it is answered REBALANCE_IN_PROGRESS (the client rejoins); Kafka drops it
    /// silently, which would stall a pipelined connection here.
    fn update_member(
        &mut self,
        member_id: &str,
        params: &JoinParams,
        parked: Parked,
        out: &mut Vec<Completion>,
    ) {
        if let Some(member) = self.members.get_mut(member_id) {
            member.protocols = params.protocols.clone();
            member.rebalance_timeout_ms = params.rebalance_timeout_ms;
            member.session_timeout_ms = params.session_timeout_ms;
            if let Some(old) = member.awaiting_join.replace(parked) {
                complete_join(out, old, join_error(member_id, REBALANCE_IN_PROGRESS));
            }
        } else {
            complete_join(out, parked, join_error(member_id, UNKNOWN_MEMBER_ID));
        }
    }

    /// KIP-345: a static member rejoined with an unknown member ID; it takes over the old
    /// member's place (and assignment) under a new ID and the old ID is fenced.
    #[allow(clippy::too_many_arguments)]
    fn replace_static_member_then_rebalance_or_complete_join(
        &mut self,
        instance_id: &str,
        old_id: &str,
        new_id: String,
        params: JoinParams,
        parked: Parked,
        tick: Tick,
        out: &mut Vec<Completion>,
    ) {
        let current_leader = self.leader_id.clone();
        let Some(mut member) = self.members.remove(old_id) else {
            complete_join(out, parked, join_error("", UNKNOWN_MEMBER_ID));
            return;
        };
        // Fence whatever the old member ID still has parked.
        if let Some(old_join) = member.awaiting_join.take() {
            let response = JoinGroupResponse {
                protocol_name: None,
                ..join_error(old_id, FENCED_INSTANCE_ID)
            };
            complete_join(out, old_join, response);
        }
        if let Some(old_sync) = member.awaiting_sync.take() {
            complete_sync(out, old_sync, sync_error(FENCED_INSTANCE_ID));
        }
        self.pending_sync.remove(old_id);
        member.id = new_id.clone();
        member.is_new = false;
        member.heartbeat_deadline =
            Some(deadline(tick.now_ms, i64::from(member.session_timeout_ms)));
        self.members.insert(new_id.clone(), member);
        if self.leader_id.as_deref() == Some(old_id) {
            self.leader_id = Some(new_id.clone());
        }
        self.static_members
            .insert(instance_id.to_string(), new_id.clone());

        self.update_member(&new_id, &params, parked, out);

        match self.state {
            Stable => {
                let selected = self.select_protocol();
                if selected.is_some() && selected == self.protocol_name {
                    info!(group = %self.group_id, member = %new_id,
                        "static member replaced without a rebalance (selected protocol unchanged)");
                    self.persist();
                    let Some(parked) = self
                        .members
                        .get_mut(&new_id)
                        .and_then(|m| m.awaiting_join.take())
                    else {
                        return;
                    };
                    let response = if params.version >= SKIP_ASSIGNMENT_SINCE {
                        let is_leader = self.leader_id.as_deref() == Some(new_id.as_str());
                        JoinGroupResponse {
                            skip_assignment: is_leader,
                            ..self.join_success(&new_id, is_leader)
                        }
                    } else {
                        // Before v9 the replaced leader is told the old leader ID, so it does not
                        // compute an assignment for a group that is not rebalancing.
                        JoinGroupResponse {
                            leader: bs(current_leader.as_deref().unwrap_or("")),
                            ..self.join_success(&new_id, false)
                        }
                    };
                    complete_join(out, parked, response);
                } else {
                    self.maybe_prepare_rebalance_or_complete_join(tick, out);
                }
            }
            // The leader may already hold the old member ID in its assignment: rebalance.
            CompletingRebalance => self.prepare_rebalance(tick, out),
            _ => self.maybe_complete_join_phase(tick, out),
        }
    }

    /// Kafka's `supportsProtocols`.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.state == Empty {
            !protocol_type.is_empty() && !protocols.is_empty()
        } else {
            self.protocol_type.as_deref() == Some(protocol_type)
                && protocols
                    .iter()
                    .any(|p| self.members.values().all(|m| m.supports(&p.name)))
        }
    }

    /// Kafka's `selectProtocol`: among the protocols every member supports, each member votes
    /// for its most preferred; the most votes wins (ties: the smallest name, where Kafka's choice
    /// depends on hash order).
    fn select_protocol(&self) -> Option<String> {
        let mut candidates: BTreeSet<&str> = BTreeSet::new();
        let mut members = self.members.values();
        let first = members.next()?;
        for protocol in &first.protocols {
            if self.members.values().all(|m| m.supports(&protocol.name)) {
                candidates.insert(&protocol.name);
            }
        }
        let candidates: Vec<&str> = candidates.into_iter().collect();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some(vote) = member.vote(&candidates) {
                *votes.entry(vote).or_default() += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, count) in votes {
            if best.is_none_or(|(_, c)| count > c) {
                best = Some((name, count));
            }
        }
        best.map(|(name, _)| name.to_string())
    }

    // ---------------------------------------------------------------------------------------
    // Rebalance machinery

    fn maybe_prepare_rebalance_or_complete_join(&mut self, tick: Tick, out: &mut Vec<Completion>) {
        if matches!(self.state, Empty | Stable | CompletingRebalance) {
            self.prepare_rebalance(tick, out);
        } else {
            self.maybe_complete_join_phase(tick, out);
        }
    }

    fn prepare_rebalance(&mut self, tick: Tick, out: &mut Vec<Completion>) {
        if self.state == CompletingRebalance {
            self.reset_and_propagate_assignment_with_error(REBALANCE_IN_PROGRESS, tick.now_ms, out);
        }
        self.pending_sync.clear();
        self.sync_timer = None;

        let initial = self.state == Empty;
        if initial {
            // The group is new: give more members time to join.
            let delay_ms = tick.initial_delay_ms.max(0);
            let remaining_ms = (i64::from(self.rebalance_timeout_ms()) - delay_ms).max(0);
            self.join_timer = Some(JoinTimer {
                deadline_ms: deadline(tick.now_ms, delay_ms),
                kind: JoinTimerKind::InitialDelay {
                    delay_ms,
                    remaining_ms,
                },
            });
        }
        info!(group = %self.group_id, from = %self.state, generation = self.generation_id,
            "preparing to rebalance");
        self.transition(PreparingRebalance, tick.now_ms);
        if !initial {
            self.maybe_complete_join_else_schedule(tick, out);
        }
    }

    fn maybe_complete_join_else_schedule(&mut self, tick: Tick, out: &mut Vec<Completion>) {
        if self.has_all_members_joined() {
            self.complete_join_phase(tick, out);
        } else {
            self.join_timer = Some(JoinTimer {
                deadline_ms: deadline(tick.now_ms, i64::from(self.rebalance_timeout_ms())),
                kind: JoinTimerKind::Complete,
            });
        }
    }

    /// Completes the join phase early once everyone has rejoined, except during the initial delay.
    fn maybe_complete_join_phase(&mut self, tick: Tick, out: &mut Vec<Completion>) {
        if self.state == PreparingRebalance
            && self.previous_state != Empty
            && self.has_all_members_joined()
        {
            self.complete_join_phase(tick, out);
        }
    }

    /// Kafka's `completeClassicGroupJoin`: drop dynamic members that did not rejoin, start the
    /// next generation and answer every parked JoinGroup.
    fn complete_join_phase(&mut self, tick: Tick, out: &mut Vec<Completion>) {
        self.join_timer = None;
        let laggards: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in &laggards {
            info!(group = %self.group_id, member = %id, "removing member that did not rejoin");
            self.remove_member(id, out);
        }
        if self.state == Dead {
            return;
        }
        if !self.maybe_elect_new_joined_leader() && !self.members.is_empty() {
            // Nobody rejoined (only static members remain): wait for them or their sessions.
            self.join_timer = Some(JoinTimer {
                deadline_ms: deadline(tick.now_ms, i64::from(self.rebalance_timeout_ms())),
                kind: JoinTimerKind::Complete,
            });
            return;
        }
        self.init_next_generation(tick.now_ms);
        if self.state == Empty {
            info!(group = %self.group_id, generation = self.generation_id, "group is now empty");
            self.persist();
            return;
        }
        info!(group = %self.group_id, generation = self.generation_id,
            members = self.members.len(), protocol = ?self.protocol_name, "group stabilising");
        let ids: Vec<String> = self
            .members_in_order()
            .iter()
            .map(|m| m.id.clone())
            .collect();
        let leader_members = self.current_member_metadata();
        for id in ids {
            let is_leader = self.leader_id.as_deref() == Some(id.as_str());
            let mut response = self.join_success(&id, false);
            if is_leader {
                response.members = leader_members.clone();
            }
            if let Some(member) = self.members.get_mut(&id) {
                if let Some(parked) = member.awaiting_join.take() {
                    complete_join(out, parked, response);
                }
                member.heartbeat_deadline =
                    Some(deadline(tick.now_ms, i64::from(member.session_timeout_ms)));
                member.is_new = false;
            }
            self.pending_sync.insert(id);
        }
        self.sync_timer = Some(SyncTimer {
            deadline_ms: deadline(tick.now_ms, i64::from(self.rebalance_timeout_ms())),
            generation_id: self.generation_id,
        });
    }

    fn init_next_generation(&mut self, now_ms: i64) {
        self.generation_id = self.generation_id.wrapping_add(1);
        self.migrated_generations.clear();
        if self.members.is_empty() {
            self.protocol_name = None;
            self.transition(Empty, now_ms);
        } else {
            self.protocol_name = self.select_protocol();
            self.transition(CompletingRebalance, now_ms);
        }
        self.pending_sync.clear();
    }

    /// Keeps the leader if it rejoined, else picks the first member that did. False when nobody
    /// rejoined (or there is no leader).
    fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader_id.as_deref() else {
            return false;
        };
        if self
            .members
            .get(leader)
            .is_some_and(|m| m.awaiting_join.is_some())
        {
            return true;
        }
        let new_leader = self
            .members_in_order()
            .into_iter()
            .find(|m| m.awaiting_join.is_some())
            .map(|m| m.id.clone());
        match new_leader {
            Some(id) => {
                info!(group = %self.group_id, old = %leader, new = %id,
                    "leader did not rejoin; electing a new one");
                self.leader_id = Some(id);
                true
            }
            None => false,
        }
    }

    fn reset_and_propagate_assignment_with_error(
        &mut self,
        code: i16,
        now_ms: i64,
        out: &mut Vec<Completion>,
    ) {
        for member in self.members.values_mut() {
            member.assignment = Bytes::new();
        }
        self.propagate_assignment(code, now_ms, out);
    }

    /// Answers every parked SyncGroup with the member's assignment (or the error) and restarts
    /// those members' session timers.
    fn propagate_assignment(&mut self, code: i16, now_ms: i64, out: &mut Vec<Completion>) {
        let (protocol_type, protocol_name) = if code == NONE {
            (
                opt_bs(self.protocol_type.as_deref()),
                opt_bs(self.protocol_name.as_deref()),
            )
        } else {
            (None, None)
        };
        let mut ids: Vec<(u64, String)> = self
            .members
            .values()
            .filter(|m| m.awaiting_sync.is_some())
            .map(|m| (m.seq, m.id.clone()))
            .collect();
        ids.sort();
        for (_, id) in ids {
            let Some(member) = self.members.get_mut(&id) else {
                continue;
            };
            let Some(parked) = member.awaiting_sync.take() else {
                continue;
            };
            let response = SyncGroupResponse {
                error_code: code,
                protocol_type: protocol_type.clone(),
                protocol_name: protocol_name.clone(),
                assignment: member.assignment.clone(),
                ..SyncGroupResponse::default()
            };
            member.heartbeat_deadline =
                Some(deadline(now_ms, i64::from(member.session_timeout_ms)));
            complete_sync(out, parked, response);
        }
    }

    fn has_all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    fn num_awaiting_join(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_some())
            .count()
    }

    /// The largest rebalance timeout of the members (0 without members).
    fn rebalance_timeout_ms(&self) -> i32 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
            .max(0)
    }

    fn transition(&mut self, to: ClassicGroupState, now_ms: i64) {
        self.previous_state = self.state;
        self.state = to;
        self.state_timestamp_ms = now_ms;
    }

    /// Removes a member (or pending member). Its parked requests are answered UNKNOWN_MEMBER_ID
    /// (Kafka answers the parked JoinGroup so; a parked SyncGroup would otherwise never be).
    fn remove_member(&mut self, member_id: &str, out: &mut Vec<Completion>) {
        self.pending_members.remove(member_id);
        self.migrated_generations.remove(member_id);
        self.pending_sync.remove(member_id);
        let Some(mut member) = self.members.remove(member_id) else {
            return;
        };
        if let Some(parked) = member.awaiting_join.take() {
            complete_join(out, parked, join_error("", UNKNOWN_MEMBER_ID));
        }
        if let Some(parked) = member.awaiting_sync.take() {
            complete_sync(out, parked, sync_error(UNKNOWN_MEMBER_ID));
        }
        if let Some(instance_id) = &member.instance_id
            && self.static_members.get(instance_id).map(String::as_str) == Some(member_id)
        {
            self.static_members.remove(instance_id);
        }
        if self.leader_id.as_deref() == Some(member_id) {
            self.leader_id = self.members_in_order().first().map(|m| m.id.clone());
        }
    }

    /// Kafka's `removeMemberAndUpdateClassicGroup`: after an expiry, rebalance or finish the join.
    fn remove_member_and_update_group(
        &mut self,
        member_id: &str,
        tick: Tick,
        out: &mut Vec<Completion>,
    ) {
        self.remove_member(member_id, out);
        match self.state {
            Stable | CompletingRebalance => {
                self.maybe_prepare_rebalance_or_complete_join(tick, out)
            }
            PreparingRebalance if self.has_all_members_joined() => {
                self.complete_join_phase(tick, out)
            }
            _ => {}
        }
    }

    /// Kafka's `validateMember`: the static mapping first (FENCED_INSTANCE_ID for a stale member
    /// ID), then membership.
    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), i16> {
        if let Some(instance_id) = instance_id {
            match self.static_members.get(instance_id) {
                None => return Err(UNKNOWN_MEMBER_ID),
                Some(existing) if existing != member_id => {
                    info!(group = %self.group_id, %instance_id, member = %member_id,
                        existing = %existing, "fenced static member");
                    return Err(FENCED_INSTANCE_ID);
                }
                Some(_) => {}
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(UNKNOWN_MEMBER_ID)
        }
    }

    /// Whether `generation` is the member's current one (see `migrated_generations`).
    fn generation_matches(&self, member_id: &str, generation: i32) -> bool {
        generation == self.generation_id
            || self.migrated_generations.get(member_id) == Some(&generation)
    }

    fn members_in_order(&self) -> Vec<&Member> {
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.seq);
        members
    }

    fn reschedule_heartbeat(&mut self, member_id: &str, now_ms: i64) {
        if let Some(member) = self.members.get_mut(member_id) {
            member.heartbeat_deadline =
                Some(deadline(now_ms, i64::from(member.session_timeout_ms)));
        }
    }

    /// Records the group as Kafka would write it now.
    fn persist(&mut self) {
        self.change_counter += 1;
        self.record = ClassicGroupSnapshot {
            group_id: self.group_id.clone(),
            protocol_type: self.protocol_type.clone(),
            generation_id: self.generation_id,
            protocol_name: self.protocol_name.clone(),
            leader_id: self.leader_id.clone(),
            state_timestamp_ms: self.state_timestamp_ms,
            members: self
                .members_in_order()
                .into_iter()
                .map(|m| ClassicMemberSnapshot {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    protocols: m
                        .protocols
                        .iter()
                        .map(|p| ProtocolSnapshot {
                            name: p.name.clone(),
                            metadata: p.metadata.clone(),
                        })
                        .collect(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        };
    }

    // ---------------------------------------------------------------------------------------
    // SyncGroup

    /// Handles SyncGroup v0-5. The leader's request stores the assignment and answers every
    /// parked SyncGroup; a follower's waits for the leader's (or a rebalance) unless the group is
    /// already Stable.
    pub fn sync(
        &mut self,
        request: &SyncGroupRequest,
        version: i16,
        token: u64,
        now_ms: i64,
    ) -> Vec<Completion> {
        let mut out = Vec::new();
        let parked = Parked { token, version };
        let member_id: &str = &request.member_id;
        let instance_id = if version >= 3 {
            request.group_instance_id.as_deref()
        } else {
            None
        };
        let (req_type, req_name) = if version >= 5 {
            (
                request.protocol_type.as_deref(),
                request.protocol_name.as_deref(),
            )
        } else {
            (None, None)
        };

        let error = if self.state == Empty {
            Some(UNKNOWN_MEMBER_ID)
        } else if self.state == Dead {
            Some(COORDINATOR_NOT_AVAILABLE)
        } else if let Err(code) = self.validate_member(member_id, instance_id) {
            Some(code)
        } else if !self.generation_matches(member_id, request.generation_id) {
            Some(ILLEGAL_GENERATION)
        } else if protocol_inconsistent(req_type, self.protocol_type.as_deref())
            || protocol_inconsistent(req_name, self.protocol_name.as_deref())
        {
            Some(INCONSISTENT_GROUP_PROTOCOL)
        } else if self.state == PreparingRebalance {
            Some(REBALANCE_IN_PROGRESS)
        } else {
            None
        };
        if let Some(code) = error {
            complete_sync(&mut out, parked, sync_error(code));
            return out;
        }

        match self.state {
            CompletingRebalance => {
                if let Some(member) = self.members.get_mut(member_id)
                    && let Some(old) = member.awaiting_sync.replace(parked)
                {
                    complete_sync(&mut out, old, sync_error(REBALANCE_IN_PROGRESS));
                }
                self.remove_pending_sync_member(member_id);
                if self.leader_id.as_deref() == Some(member_id) {
                    info!(group = %self.group_id, leader = %member_id,
                        generation = self.generation_id, "assignment received from the leader");
                    let mut assignments: BTreeMap<&str, &Bytes> = BTreeMap::new();
                    for a in &request.assignments {
                        assignments.insert(&*a.member_id, &a.assignment);
                    }
                    for member in self.members.values_mut() {
                        member.assignment = assignments
                            .get(member.id.as_str())
                            .map(|b| Bytes::copy_from_slice(b))
                            .unwrap_or_default();
                    }
                    self.propagate_assignment(NONE, now_ms, &mut out);
                    self.transition(Stable, now_ms);
                    self.persist();
                }
            }
            Stable => {
                self.remove_pending_sync_member(member_id);
                let assignment = self
                    .members
                    .get(member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                let response = SyncGroupResponse {
                    error_code: NONE,
                    protocol_type: opt_bs(self.protocol_type.as_deref()),
                    protocol_name: opt_bs(self.protocol_name.as_deref()),
                    assignment,
                    ..SyncGroupResponse::default()
                };
                complete_sync(&mut out, parked, response);
            }
            // Ruled out above.
            Empty | PreparingRebalance | Dead => {
                complete_sync(&mut out, parked, sync_error(REBALANCE_IN_PROGRESS));
            }
        }
        out
    }

    fn remove_pending_sync_member(&mut self, member_id: &str) {
        self.pending_sync.remove(member_id);
        let cancel = match self.state {
            Dead | Empty | PreparingRebalance => true,
            CompletingRebalance | Stable => self.pending_sync.is_empty(),
        };
        if cancel {
            self.sync_timer = None;
        }
    }

    // ---------------------------------------------------------------------------------------
    // Heartbeat

    /// Handles Heartbeat v0-4: restarts the member's session timer; REBALANCE_IN_PROGRESS tells it
    /// to rejoin.
    pub fn heartbeat(
        &mut self,
        request: &HeartbeatRequest,
        version: i16,
        now_ms: i64,
    ) -> HeartbeatResponse {
        let instance_id = if version >= 3 {
            request.group_instance_id.as_deref()
        } else {
            None
        };
        let code = if self.state == Dead {
            COORDINATOR_NOT_AVAILABLE
        } else if let Err(code) = self.validate_member(&request.member_id, instance_id) {
            code
        } else if !self.generation_matches(&request.member_id, request.generation_id) {
            ILLEGAL_GENERATION
        } else {
            match self.state {
                Empty | Dead => UNKNOWN_MEMBER_ID,
                PreparingRebalance => {
                    self.reschedule_heartbeat(&request.member_id, now_ms);
                    REBALANCE_IN_PROGRESS
                }
                CompletingRebalance | Stable => {
                    self.reschedule_heartbeat(&request.member_id, now_ms);
                    NONE
                }
            }
        };
        HeartbeatResponse {
            error_code: code,
            ..HeartbeatResponse::default()
        }
    }

    // ---------------------------------------------------------------------------------------
    // LeaveGroup

    /// Handles LeaveGroup v0-5: before v3 the one member in `member_id` (errors folded into the
    /// top-level code), from v3 the `members` batch with an error per member. A member may be
    /// named by group.instance.id alone (admin removal of a static member).
    pub fn leave(
        &mut self,
        request: &LeaveGroupRequest,
        version: i16,
        now_ms: i64,
    ) -> (LeaveGroupResponse, Vec<Completion>) {
        let mut out = Vec::new();
        if self.state == Dead {
            let response = LeaveGroupResponse {
                error_code: COORDINATOR_NOT_AVAILABLE,
                ..LeaveGroupResponse::default()
            };
            return (response, out);
        }
        let identities: Vec<MemberIdentity> = if version < 3 {
            vec![MemberIdentity {
                member_id: request.member_id.clone(),
                group_instance_id: None,
                reason: None,
                ..MemberIdentity::default()
            }]
        } else {
            request.members.clone()
        };

        let mut responses = Vec::with_capacity(identities.len());
        let mut any_left = false;
        for identity in &identities {
            let member_id: &str = &identity.member_id;
            let instance_id = identity.group_instance_id.as_deref();
            let code = if member_id.is_empty() {
                match instance_id
                    .and_then(|i| self.static_members.get(i))
                    .cloned()
                {
                    Some(static_id) => {
                        info!(group = %self.group_id, member = %static_id,
                            "static member removed by LeaveGroup");
                        self.remove_member(&static_id, &mut out);
                        NONE
                    }
                    None => UNKNOWN_MEMBER_ID,
                }
            } else if self.pending_members.contains_key(member_id) {
                self.remove_member(member_id, &mut out);
                NONE
            } else {
                match self.validate_member(member_id, instance_id) {
                    Ok(()) => {
                        info!(group = %self.group_id, member = %member_id, "member leaves");
                        self.remove_member(member_id, &mut out);
                        NONE
                    }
                    Err(code) => code,
                }
            };
            any_left |= code == NONE;
            responses.push(MemberResponse {
                member_id: identity.member_id.clone(),
                group_instance_id: identity.group_instance_id.clone(),
                error_code: code,
                ..MemberResponse::default()
            });
        }

        if any_left {
            // Only the join path can prepare a rebalance of an Empty group (which needs the
            // initial delay), so no delay is needed here.
            let tick = Tick {
                now_ms,
                initial_delay_ms: 0,
            };
            match self.state {
                Stable | CompletingRebalance => {
                    self.maybe_prepare_rebalance_or_complete_join(tick, &mut out)
                }
                PreparingRebalance => self.maybe_complete_join_phase(tick, &mut out),
                Empty | Dead => {}
            }
        }

        let response = if version < 3 {
            LeaveGroupResponse {
                error_code: responses
                    .iter()
                    .map(|r| r.error_code)
                    .find(|&c| c != NONE)
                    .unwrap_or(NONE),
                ..LeaveGroupResponse::default()
            }
        } else {
            LeaveGroupResponse {
                error_code: NONE,
                members: responses,
                ..LeaveGroupResponse::default()
            }
        };
        (response, out)
    }

    // ---------------------------------------------------------------------------------------
    // Timers

    /// The earliest time `on_timer` has something to do.
    pub fn next_deadline(&self) -> Option<i64> {
        let join = self.join_timer.map(|t| t.deadline_ms);
        let sync = self.sync_timer.map(|t| t.deadline_ms);
        let members = self
            .members
            .values()
            .filter_map(|m| m.heartbeat_deadline)
            .min();
        let pending = self.pending_members.values().copied().min();
        [join, sync, members, pending].into_iter().flatten().min()
    }

    /// Fires every timer due at `now_ms`, in deadline order: the initial delay and the rebalance
    /// timeout complete the join phase (without the members that did not rejoin), expired
    /// sessions remove members (which may start or finish a rebalance), expired KIP-394 offers
    /// are dropped, and members that never sent SyncGroup are removed.
    pub fn on_timer(&mut self, config: &GroupConfig, now_ms: i64) -> Vec<Completion> {
        let mut out = Vec::new();
        let tick = Tick {
            now_ms,
            initial_delay_ms: config.classic_initial_rebalance_delay_ms,
        };
        // Every step removes its timer or moves it past `now_ms`, so this ends.
        while let Some((due, id)) = self.next_due(now_ms) {
            match due {
                Due::Join => self.fire_join_timer(tick, &mut out),
                Due::Sync => self.fire_sync_timer(tick, &mut out),
                Due::Member => self.expire_member(&id, tick, &mut out),
                Due::Pending => {
                    info!(group = %self.group_id, member = %id,
                        "pending member did not rejoin in time");
                    self.remove_member(&id, &mut out);
                    if self.state == PreparingRebalance && self.has_all_members_joined() {
                        self.complete_join_phase(tick, &mut out);
                    }
                }
            }
        }
        out
    }

    /// The earliest due timer; ties go to the join timer, then the sync timer, then members.
    fn next_due(&self, now_ms: i64) -> Option<(Due, String)> {
        let mut best: Option<(i64, Due, String)> = None;
        let mut consider = |at: i64, due: Due, id: &str| {
            if at <= now_ms && best.as_ref().is_none_or(|(b, _, _)| at < *b) {
                best = Some((at, due, id.to_string()));
            }
        };
        if let Some(t) = self.join_timer {
            consider(t.deadline_ms, Due::Join, "");
        }
        if let Some(t) = self.sync_timer {
            consider(t.deadline_ms, Due::Sync, "");
        }
        for member in self.members.values() {
            if let Some(at) = member.heartbeat_deadline {
                consider(at, Due::Member, &member.id);
            }
        }
        for (id, &at) in &self.pending_members {
            consider(at, Due::Pending, id);
        }
        best.map(|(_, due, id)| (due, id))
    }

    fn fire_join_timer(&mut self, tick: Tick, out: &mut Vec<Completion>) {
        let Some(timer) = self.join_timer.take() else {
            return;
        };
        match timer.kind {
            JoinTimerKind::InitialDelay {
                delay_ms,
                remaining_ms,
            } if self.new_member_added && remaining_ms != 0 => {
                // Somebody joined during the delay: wait once more, within the rebalance timeout.
                self.new_member_added = false;
                let new_delay_ms = tick.initial_delay_ms.max(0).min(remaining_ms);
                let new_remaining_ms = (remaining_ms - delay_ms).max(0);
                self.join_timer = Some(JoinTimer {
                    deadline_ms: deadline(tick.now_ms, new_delay_ms),
                    kind: JoinTimerKind::InitialDelay {
                        delay_ms: new_delay_ms,
                        remaining_ms: new_remaining_ms,
                    },
                });
            }
            _ => {
                if self.state == PreparingRebalance {
                    self.complete_join_phase(tick, out);
                }
            }
        }
    }

    fn fire_sync_timer(&mut self, tick: Tick, out: &mut Vec<Completion>) {
        let Some(timer) = self.sync_timer.take() else {
            return;
        };
        if timer.generation_id != self.generation_id
            || !matches!(self.state, CompletingRebalance | Stable)
            || self.pending_sync.is_empty()
        {
            return;
        }
        let laggards: Vec<String> = self.pending_sync.iter().cloned().collect();
        info!(group = %self.group_id, members = ?laggards, "removing members that did not sync");
        for id in &laggards {
            self.remove_member(id, out);
        }
        self.prepare_rebalance(tick, out);
    }

    /// Kafka's `expireClassicGroupMemberHeartbeat`.
    fn expire_member(&mut self, member_id: &str, tick: Tick, out: &mut Vec<Completion>) {
        let Some(member) = self.members.get_mut(member_id) else {
            return;
        };
        member.heartbeat_deadline = None;
        if self.state == Dead || member.has_satisfied_heartbeat() {
            // Parked in a rebalance: the rebalance re-arms the timer.
            return;
        }
        info!(group = %self.group_id, member = %member_id, "session expired; removing member");
        self.remove_member_and_update_group(member_id, tick, out);
    }

    // ---------------------------------------------------------------------------------------
    // Offsets, lifecycle, persistence

    /// Kafka's `ClassicGroup.validateOffsetCommit` for OffsetCommit (not transactional): a
    /// commit with generation -1, no member ID and no instance ID is accepted when the group is
    /// Empty (admin tools and simple consumers); otherwise the member and generation must match,
    /// and a group completing a rebalance answers REBALANCE_IN_PROGRESS.
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        generation_id: i32,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        self.validate_commit(member_id, generation_id, group_instance_id, false)
    }

    /// The TxnOffsetCommit variant: no Empty-group rule for anonymous commits and no
    /// REBALANCE_IN_PROGRESS (Kafka does not enforce the group state for transactions).
    pub fn validate_txn_offset_commit(
        &self,
        member_id: &str,
        generation_id: i32,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        self.validate_commit(member_id, generation_id, group_instance_id, true)
    }

    fn validate_commit(
        &self,
        member_id: &str,
        generation_id: i32,
        group_instance_id: Option<&str>,
        transactional: bool,
    ) -> Result<(), GroupError> {
        if self.state == Dead {
            return Err(group_error(
                COORDINATOR_NOT_AVAILABLE,
                "the group is being unloaded",
            ));
        }
        if generation_id < 0 && self.state == Empty {
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || group_instance_id.is_some() {
            self.validate_member(member_id, group_instance_id)
                .map_err(|code| match code {
                    FENCED_INSTANCE_ID => {
                        group_error(code, "the static member was replaced by a newer member ID")
                    }
                    _ => group_error(code, "the member is not in the group"),
                })?;
            if !self.generation_matches(member_id, generation_id) {
                return Err(group_error(
                    ILLEGAL_GENERATION,
                    "the generation is not the group's current one",
                ));
            }
        } else if !transactional && self.state != Empty {
            return Err(group_error(
                UNKNOWN_MEMBER_ID,
                "only an empty group accepts commits without a member",
            ));
        }
        if !transactional && self.state == CompletingRebalance {
            return Err(group_error(
                REBALANCE_IN_PROGRESS,
                "the group is completing a rebalance",
            ));
        }
        Ok(())
    }

    /// Kafka's `validateOffsetFetch`: any state but Dead.
    pub fn validate_offset_fetch(&self) -> Result<(), GroupError> {
        if self.state == Dead {
            Err(group_error(GROUP_ID_NOT_FOUND, "the group is dead"))
        } else {
            Ok(())
        }
    }

    /// A successful OffsetCommit keeps a member's session alive while the group is Stable or
    /// PreparingRebalance (Kafka's OffsetMetadataManager does this). Call after the commit.
    pub fn on_offset_commit(&mut self, member_id: &str, now_ms: i64) {
        if matches!(self.state, Stable | PreparingRebalance) {
            self.reschedule_heartbeat(member_id, now_ms);
        }
    }

    /// Unloads the group (shutdown, deletion): the state becomes Dead, every parked request is
    /// answered NOT_COORDINATOR (Kafka's `onUnloaded`) and timers are cleared.
    pub fn unload(&mut self, now_ms: i64) -> Vec<Completion> {
        self.retire(NOT_COORDINATOR, now_ms)
    }

    // ---------------------------------------------------------------------------------------
    // Online migration (see `crate::migration`)

    /// The members, for an upgrade to a consumer group.
    pub(crate) fn migration_members(&self) -> impl Iterator<Item = &Member> {
        self.members_in_order().into_iter()
    }

    /// Retires the group for an upgrade: every parked JoinGroup and SyncGroup is answered
    /// REBALANCE_IN_PROGRESS (Kafka's `completeAllJoinFutures`/`completeAllSyncFutures`), so
    /// the members rejoin the consumer group that replaces this one.
    pub(crate) fn retire_for_upgrade(&mut self, now_ms: i64) -> Vec<Completion> {
        self.retire(REBALANCE_IN_PROGRESS, now_ms)
    }

    /// A classic group rebuilt from a downgraded consumer group's members (as a snapshot):
    /// Stable at the snapshot's generation, the protocol chosen by the members' votes, each
    /// member's assignment given by `assign(member ID, its metadata for that protocol)`.
    pub(crate) fn from_downgrade(
        snapshot: ClassicGroupSnapshot,
        member_epochs: BTreeMap<String, i32>,
        assign: impl Fn(&str, &Bytes) -> Bytes,
        now_ms: i64,
    ) -> ClassicGroup {
        let mut group = ClassicGroup::restore(snapshot, now_ms);
        let generation = group.generation_id;
        group.migrated_generations = member_epochs
            .into_iter()
            .filter(|(id, epoch)| *epoch != generation && group.members.contains_key(id))
            .collect();
        group.protocol_name = group.select_protocol();
        let protocol = group.protocol_name.clone();
        for member in group.members.values_mut() {
            member.assignment = assign(&member.id, &member.metadata(protocol.as_deref()));
        }
        group.persist();
        group
    }

    /// Starts a rebalance of a Stable group (a downgrade triggered by a member leaving).
    pub(crate) fn start_rebalance(&mut self, now_ms: i64) -> Vec<Completion> {
        let mut out = Vec::new();
        let tick = Tick {
            now_ms,
            initial_delay_ms: 0,
        };
        self.maybe_prepare_rebalance_or_complete_join(tick, &mut out);
        out
    }

    /// Answers every parked request with `code` and makes the group Dead.
    fn retire(&mut self, code: i16, now_ms: i64) -> Vec<Completion> {
        let mut out = Vec::new();
        let mut members: Vec<&mut Member> = self.members.values_mut().collect();
        members.sort_by_key(|m| m.seq);
        for member in members {
            if let Some(parked) = member.awaiting_join.take() {
                complete_join(&mut out, parked, join_error(&member.id, code));
            }
            if let Some(parked) = member.awaiting_sync.take() {
                complete_sync(&mut out, parked, sync_error(code));
            }
            member.heartbeat_deadline = None;
        }
        self.join_timer = None;
        self.sync_timer = None;
        self.pending_members.clear();
        self.pending_sync.clear();
        self.transition(Dead, now_ms);
        out
    }

    /// Rebuilds a group from its snapshot, as Kafka loads one: Stable with its members (Empty
    /// without), every member's session timer armed from `now_ms`, nothing parked. The change
    /// counter starts at 0.
    pub fn restore(snapshot: ClassicGroupSnapshot, now_ms: i64) -> ClassicGroup {
        let mut group = ClassicGroup {
            group_id: snapshot.group_id.clone(),
            state: if snapshot.members.is_empty() {
                Empty
            } else {
                Stable
            },
            previous_state: Dead,
            state_timestamp_ms: snapshot.state_timestamp_ms,
            generation_id: snapshot.generation_id,
            protocol_type: snapshot.protocol_type.clone().filter(|t| !t.is_empty()),
            protocol_name: snapshot.protocol_name.clone(),
            leader_id: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            new_member_added: false,
            join_timer: None,
            sync_timer: None,
            next_seq: 0,
            change_counter: 0,
            migrated_generations: BTreeMap::new(),
            record: snapshot.clone(),
        };
        for m in snapshot.members {
            group.next_seq += 1;
            if let Some(instance_id) = &m.group_instance_id {
                group
                    .static_members
                    .insert(instance_id.clone(), m.member_id.clone());
            }
            let member = Member {
                id: m.member_id.clone(),
                instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                protocols: m
                    .protocols
                    .into_iter()
                    .map(|p| Protocol {
                        name: p.name,
                        metadata: p.metadata,
                    })
                    .collect(),
                assignment: m.assignment,
                awaiting_join: None,
                awaiting_sync: None,
                is_new: false,
                heartbeat_deadline: Some(deadline(now_ms, i64::from(m.session_timeout_ms))),
                seq: group.next_seq,
            };
            group.members.insert(m.member_id, member);
        }
        group.leader_id = snapshot
            .leader_id
            .filter(|id| group.members.contains_key(id))
            .or_else(|| group.members_in_order().first().map(|m| m.id.clone()));
        group
    }
}
