//! KIP-848 consumer groups (ConsumerGroupHeartbeat, key 68) with KIP-1082 client-chosen member
//! IDs: one deterministic, I/O-free state machine per group.
//!
//! The rules are those of protocol-notes §4 and §5, modelled on Apache Kafka's group coordinator
//! (`GroupMetadataManager.consumerGroupHeartbeat`, `CurrentAssignmentBuilder`, `ConsumerGroup`):
//!
//! - three epochs: the **group epoch** (bumped when membership, subscriptions or the metadata of
//!   subscribed topics change) >= the **target assignment epoch** (the group epoch the target
//!   assignment was computed for) >= each **member epoch**;
//! - the target assignment is recomputed lazily, by the first heartbeat that sees
//!   `group epoch > assignment epoch`;
//! - each member converges toward its target through [`reconcile`]: revocations first, then
//!   the partitions nobody else owns; no partition is ever owned by two members;
//! - time only enters as `now_ms`: session and rebalance timeouts are deadlines the broker polls
//!   with [`ConsumerGroup::next_deadline`] / [`ConsumerGroup::on_timer`].

pub mod assignor;
mod classic_members;
mod member;
mod reconcile;
mod snapshot;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use regex::Regex;
use skiff_protocol::error_codes;
use skiff_protocol::generated::consumer_group_describe_response as describe_response;
use skiff_protocol::generated::consumer_group_heartbeat_request::{
    ConsumerGroupHeartbeatRequest, TopicPartitions as OwnedTopicPartitions,
};
use skiff_protocol::generated::consumer_group_heartbeat_response::{
    self as heartbeat_response, ConsumerGroupHeartbeatResponse,
};
use skiff_protocol::{ByteString, Uuid};

use crate::types::{GroupConfig, GroupError, TopicsImage};

pub use classic_members::ImportedMember;
pub(crate) use classic_members::assignment_by_name;
pub use member::{Assignment, ClassicMemberMetadata, ClassicProtocol, ConsumerMember, MemberState};
pub use snapshot::{
    ClassicMemberMetadataSnapshot, ConsumerGroupSnapshot, MemberSnapshot, SubscribedTopicSnapshot,
    TopicAssignmentSnapshot,
};

// Shared with the share-group module.
pub(crate) use snapshot::{
    assignment_from_snapshot, assignment_to_snapshot, from_halves, to_halves,
};

use reconcile::{ReconcileInput, reconcile};

/// Epoch 0 in a request: the member joins or rejoins.
pub const JOIN_GROUP_MEMBER_EPOCH: i32 = 0;
/// Epoch -1 in a request: the member leaves.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// Epoch -2 in a request: a static member leaves temporarily (keeps its assignment until its
/// session times out).
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;
/// From this ConsumerGroupHeartbeat version on, the client always chooses its member ID
/// (KIP-1082).
pub const CLIENT_GENERATED_MEMBER_ID_VERSION: i16 = 1;
/// OffsetCommit/OffsetFetch versions below this cannot carry a member epoch.
pub const MIN_OFFSET_COMMIT_VERSION_FOR_CONSUMER_MEMBERS: i16 = 9;

/// What the connection knows about the client, stored per member for describe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientInfo<'a> {
    pub client_id: &'a str,
    pub client_host: &'a str,
}

/// The group state shown by describe and list (Kafka's `ConsumerGroupState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl GroupState {
    /// Kafka's wire name (`ConsumerGroupState.toString()`), used by ConsumerGroupDescribe and
    /// ListGroups: "Empty", "Assigning", "Reconciling", "Stable".
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::Assigning => "Assigning",
            GroupState::Reconciling => "Reconciling",
            GroupState::Stable => "Stable",
        }
    }

    /// Lower-case form (Kafka's `toLowerCaseString`, used by ListGroups state filters).
    pub fn lower_case_name(self) -> &'static str {
        match self {
            GroupState::Empty => "empty",
            GroupState::Assigning => "assigning",
            GroupState::Reconciling => "reconciling",
            GroupState::Stable => "stable",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    Session,
    Rebalance,
    /// A classic member told to rejoin did not (Kafka's consumer group join timeout).
    ClassicJoin,
    /// A classic member that joined did not sync (Kafka's consumer group sync timeout).
    ClassicSync,
}

impl TimerKind {
    fn is_classic(self) -> bool {
        matches!(self, TimerKind::ClassicJoin | TimerKind::ClassicSync)
    }
}

/// Java's `String.trim().isEmpty()`: only characters <= U+0020.
pub(crate) fn is_blank(s: &str) -> bool {
    s.chars().all(|c| c <= ' ')
}

fn invalid_request(message: impl Into<String>) -> GroupError {
    GroupError::new(error_codes::INVALID_REQUEST, message)
}

fn fenced_epoch(message: String) -> GroupError {
    GroupError::new(error_codes::FENCED_MEMBER_EPOCH, message)
}

/// The assignors a broker with this config offers: configured and implemented here.
fn assignor_supported(name: &str, config: &GroupConfig) -> bool {
    assignor::SUPPORTED.contains(&name) && config.consumer_assignors.iter().any(|a| a == name)
}

/// Request checks that need no group state (Kafka's
/// `throwIfConsumerGroupHeartbeatRequestIsInvalid`), in Kafka's order. The broker calls this
/// before looking the group up; it then answers GROUP_ID_NOT_FOUND itself when the group does not
/// exist and the epoch is not 0. [`ConsumerGroup::heartbeat`] runs it again.
pub fn validate_heartbeat(
    request: &ConsumerGroupHeartbeatRequest,
    version: i16,
    config: &GroupConfig,
) -> Result<(), GroupError> {
    let epoch = request.member_epoch;
    if (version >= CLIENT_GENERATED_MEMBER_ID_VERSION
        || epoch > 0
        || epoch == LEAVE_GROUP_MEMBER_EPOCH)
        && is_blank(&request.member_id)
    {
        return Err(invalid_request("MemberId can't be empty."));
    }
    if is_blank(&request.group_id) {
        return Err(invalid_request("GroupId can't be empty."));
    }
    if request.instance_id.as_deref().is_some_and(is_blank) {
        return Err(invalid_request("InstanceId can't be empty."));
    }
    if request.rack_id.as_deref().is_some_and(is_blank) {
        return Err(invalid_request("RackId can't be empty."));
    }
    if epoch == JOIN_GROUP_MEMBER_EPOCH {
        if request.rebalance_timeout_ms == -1 {
            return Err(invalid_request(
                "RebalanceTimeoutMs must be provided in first request.",
            ));
        }
        if request
            .topic_partitions
            .as_ref()
            .is_none_or(|tps| !tps.is_empty())
        {
            return Err(invalid_request(
                "TopicPartitions must be empty when (re-)joining.",
            ));
        }
        if request.subscribed_topic_names.is_none() && request.subscribed_topic_regex.is_none() {
            return Err(invalid_request(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
            ));
        }
    } else if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
        if request.instance_id.is_none() {
            return Err(invalid_request("InstanceId can't be null."));
        }
    } else if epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH {
        return Err(invalid_request("MemberEpoch is invalid."));
    }
    if let Some(name) = request.server_assignor.as_deref()
        && !assignor_supported(name, config)
    {
        let supported: Vec<&str> = config
            .consumer_assignors
            .iter()
            .map(String::as_str)
            .filter(|a| assignor::SUPPORTED.contains(a))
            .collect();
        return Err(GroupError::new(
            error_codes::UNSUPPORTED_ASSIGNOR,
            format!(
                "ServerAssignor {name} is not supported. Supported assignors: {}.",
                supported.join(", ")
            ),
        ));
    }
    Ok(())
}

/// GROUP_ID_NOT_FOUND for a heartbeat with epoch != 0 (or a leave) to a group that does not
/// exist: decided by the caller holding the group map, after [`validate_heartbeat`].
pub fn group_id_not_found(group_id: &str) -> GroupError {
    GroupError::new(
        error_codes::GROUP_ID_NOT_FOUND,
        format!("Consumer group {group_id} not found."),
    )
}

/// Kafka's topic regexes must match the whole topic name (`Matcher.matches`).
fn compile_regex(pattern: &str) -> Result<Regex, GroupError> {
    Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
        GroupError::new(
            error_codes::INVALID_REGULAR_EXPRESSION,
            format!("SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}."),
        )
    })
}

/// Owned partitions in the request are a subset of the member's assignment (`null` is not).
fn is_subset(owned: Option<&[OwnedTopicPartitions]>, assigned: &Assignment) -> bool {
    let Some(owned) = owned else {
        return false;
    };
    owned.iter().all(|topic| {
        topic.partitions.is_empty()
            || assigned
                .get(&topic.topic_id)
                .is_some_and(|set| topic.partitions.iter().all(|p| set.contains(p)))
    })
}

/// Kafka's `throwIfConsumerGroupMemberEpochIsInvalid`, with KAFKA-19233 (epoch 0 always rejoins).
fn check_member_epoch(
    member: &ConsumerMember,
    received: i32,
    owned: Option<&[OwnedTopicPartitions]>,
) -> Result<(), GroupError> {
    if received == JOIN_GROUP_MEMBER_EPOCH {
        return Ok(());
    }
    if received > member.member_epoch {
        return Err(fenced_epoch(format!(
            "The consumer group member has a greater member epoch ({received}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
            member.member_epoch
        )));
    }
    if received < member.member_epoch
        && (received != member.previous_member_epoch || !is_subset(owned, &member.assigned))
    {
        return Err(fenced_epoch(format!(
            "The consumer group member has a smaller member epoch ({received}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
            member.member_epoch
        )));
    }
    Ok(())
}

fn to_response_assignment(assignment: &Assignment) -> heartbeat_response::Assignment {
    heartbeat_response::Assignment {
        topic_partitions: assignment
            .iter()
            .map(|(topic, partitions)| heartbeat_response::TopicPartitions {
                topic_id: *topic,
                partitions: partitions.iter().copied().collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// How the heartbeat finds its member (decided before anything changes).
enum MemberPlan {
    Existing,
    New,
    /// A static member rejoins with a new member ID and takes over the old member's state.
    ReplaceStatic {
        old_member_id: String,
    },
}

/// One KIP-848 consumer group.
#[derive(Debug, Clone)]
pub struct ConsumerGroup {
    group_id: String,
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ConsumerMember>,
    /// Instance ID -> member ID.
    static_members: BTreeMap<String, String>,
    /// Member ID -> target assignment (at `assignment_epoch`).
    target: BTreeMap<String, Assignment>,
    /// Subscribed regex -> topic names it matched at the last resolution.
    resolved_regex: BTreeMap<String, BTreeSet<String>>,
    /// Every subscribed topic name (by name or regex) -> (ID, partition count) when last seen,
    /// `None` when the topic did not exist.
    subscribed_metadata: BTreeMap<String, Option<(Uuid, i32)>>,
    session_timeout_ms: i64,
    change_counter: u64,
    // Volatile state, rebuilt on restore.
    /// Partition -> seq of the member owning it (assigned or pending revocation).
    owners: HashMap<(Uuid, i32), u64>,
    timers: BTreeSet<(i64, u64, TimerKind)>,
    seq_to_member: HashMap<u64, String>,
    next_seq: u64,
    compiled: HashMap<String, Regex>,
    /// Set when the last KIP-848 member left while classic members remain and the migration
    /// policy allows a downgrade: the caller converts the group (see [`crate::migration`]).
    downgrade_pending: bool,
}

impl ConsumerGroup {
    pub fn new(group_id: impl Into<String>) -> Self {
        ConsumerGroup {
            group_id: group_id.into(),
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            target: BTreeMap::new(),
            resolved_regex: BTreeMap::new(),
            subscribed_metadata: BTreeMap::new(),
            session_timeout_ms: GroupConfig::default().consumer_session_timeout_ms,
            change_counter: 0,
            owners: HashMap::new(),
            timers: BTreeSet::new(),
            seq_to_member: HashMap::new(),
            next_seq: 1,
            compiled: HashMap::new(),
            downgrade_pending: false,
        }
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }
    pub fn group_epoch(&self) -> i32 {
        self.group_epoch
    }
    pub fn assignment_epoch(&self) -> i32 {
        self.assignment_epoch
    }
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
    /// A group that never accepted a member (its first heartbeat failed): the caller that
    /// created it for that heartbeat should drop it again, as Kafka reverts the creation.
    pub fn is_unused(&self) -> bool {
        self.members.is_empty() && self.group_epoch == 0
    }
    pub fn member_count(&self) -> usize {
        self.members.len()
    }
    pub fn members(&self) -> impl Iterator<Item = &ConsumerMember> {
        self.members.values()
    }
    pub fn member(&self, member_id: &str) -> Option<&ConsumerMember> {
        self.members.get(member_id)
    }
    pub fn has_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }
    /// The member currently holding a static instance ID.
    pub fn static_member(&self, instance_id: &str) -> Option<&ConsumerMember> {
        self.static_members
            .get(instance_id)
            .and_then(|id| self.members.get(id))
    }
    /// Whether any member subscribes to `topic`, by name or through a regex (Kafka's
    /// `isSubscribedToTopic`, which OffsetDelete consults).
    pub fn is_subscribed_to(&self, topic: &str) -> bool {
        self.subscribed_metadata.contains_key(topic)
    }
    /// A member's target assignment at the assignment epoch.
    pub fn target_assignment(&self, member_id: &str) -> Option<&Assignment> {
        self.target.get(member_id)
    }
    /// Bumped on every change that must survive a restart.
    pub fn change_counter(&self) -> u64 {
        self.change_counter
    }

    pub fn state(&self) -> GroupState {
        if self.members.is_empty() {
            GroupState::Empty
        } else if self.group_epoch > self.assignment_epoch {
            GroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| !m.is_reconciled_to(self.assignment_epoch))
        {
            GroupState::Reconciling
        } else {
            GroupState::Stable
        }
    }

    /// Kafka's wire name of the state ("Empty", "Assigning", "Reconciling", "Stable").
    pub fn state_name(&self) -> &'static str {
        self.state().name()
    }

    fn changed(&mut self) {
        self.change_counter = self.change_counter.wrapping_add(1);
    }

    fn bump_group_epoch(&mut self) {
        self.group_epoch = self.group_epoch.saturating_add(1);
        self.changed();
    }

    // ---------------------------------------------------------------------------------------
    // Heartbeat
    // ---------------------------------------------------------------------------------------

    /// Handles one ConsumerGroupHeartbeat for this group (which the caller created for an epoch-0
    /// request, or found). Errors carry the code and message for the response.
    pub fn heartbeat(
        &mut self,
        request: &ConsumerGroupHeartbeatRequest,
        version: i16,
        client: ClientInfo<'_>,
        topics: &TopicsImage,
        config: &GroupConfig,
        now_ms: i64,
    ) -> Result<ConsumerGroupHeartbeatResponse, GroupError> {
        validate_heartbeat(request, version, config)?;
        self.session_timeout_ms = config.consumer_session_timeout_ms;
        let epoch = request.member_epoch;
        if epoch == LEAVE_GROUP_MEMBER_EPOCH || epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            return self.leave(request, topics, config, now_ms);
        }

        let requested_id: &str = &request.member_id;
        if self.members.len() >= config.consumer_max_size
            && (requested_id.is_empty() || !self.members.contains_key(requested_id))
        {
            return Err(GroupError::new(
                error_codes::GROUP_MAX_SIZE_REACHED,
                format!(
                    "The consumer group has reached its maximum capacity of {} members.",
                    config.consumer_max_size
                ),
            ));
        }
        let member_id = if requested_id.is_empty() {
            Uuid::random()
                .map_err(|e| GroupError::new(error_codes::UNKNOWN_SERVER_ERROR, e.to_string()))?
                .to_string()
        } else {
            requested_id.to_string()
        };
        let owned = request.topic_partitions.as_deref();
        let plan = self.plan_member(&member_id, epoch, request.instance_id.as_deref(), owned)?;

        // A regex no member uses yet must compile (checked before anything changes).
        let new_regex = request
            .subscribed_topic_regex
            .as_deref()
            .map(|r| (!r.is_empty()).then(|| r.to_string()));
        let mut compiled_regex = None;
        if let Some(Some(pattern)) = &new_regex
            && !self.compiled.contains_key(pattern)
        {
            compiled_regex = Some((pattern.clone(), compile_regex(pattern)?));
        }

        // From here on the request is accepted and the group changes.
        let bump = self.group_epoch == 0;
        let mut persist = self.apply_member_plan(plan, &member_id);
        if let Some((pattern, regex)) = compiled_regex {
            self.compiled.insert(pattern, regex);
        }

        let Some(member) = self.members.get_mut(&member_id) else {
            return Err(GroupError::new(
                error_codes::UNKNOWN_SERVER_ERROR,
                "member vanished while handling its heartbeat",
            ));
        };
        // A classic member heartbeating with the consumer protocol has switched protocols.
        if member.classic.take().is_some() {
            member.join_deadline = None;
            member.sync_deadline = None;
            let seq = member.seq;
            self.timers
                .retain(|(_, s, kind)| *s != seq || !kind.is_classic());
            persist = true;
        }
        let Some(member) = self.members.get_mut(&member_id) else {
            return Err(GroupError::new(
                error_codes::UNKNOWN_SERVER_ERROR,
                "member vanished while handling its heartbeat",
            ));
        };
        // A static member coming back from a temporary leave restarts from epoch 0.
        if epoch == JOIN_GROUP_MEMBER_EPOCH
            && member.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH
        {
            member.member_epoch = 0;
            member.previous_member_epoch = 0;
            persist = true;
        }
        let mut subscription_changed = false;
        if let Some(instance) = request.instance_id.as_deref()
            && member.instance_id.as_deref() != Some(instance)
        {
            if let Some(old) = member.instance_id.replace(instance.to_string())
                && self.static_members.get(&old) == Some(&member_id)
            {
                self.static_members.remove(&old);
            }
            self.static_members
                .insert(instance.to_string(), member_id.clone());
            persist = true;
        }
        if let Some(rack) = request.rack_id.as_deref()
            && member.rack_id.as_deref() != Some(rack)
        {
            member.rack_id = Some(rack.to_string());
            persist = true;
        }
        if request.rebalance_timeout_ms != -1
            && member.rebalance_timeout_ms != request.rebalance_timeout_ms
        {
            member.rebalance_timeout_ms = request.rebalance_timeout_ms;
            persist = true;
        }
        if let Some(name) = request.server_assignor.as_deref()
            && member.server_assignor.as_deref() != Some(name)
        {
            member.server_assignor = Some(name.to_string());
            persist = true;
        }
        if let Some(names) = &request.subscribed_topic_names {
            let mut sorted: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            sorted.sort();
            sorted.dedup();
            if sorted != member.subscribed_topic_names {
                member.subscribed_topic_names = sorted;
                subscription_changed = true;
            }
        }
        if let Some(regex) = new_regex
            && regex != member.subscribed_topic_regex
        {
            member.subscribed_topic_regex = regex;
            subscription_changed = true;
        }
        if member.client_id != client.client_id {
            member.client_id = client.client_id.to_string();
            persist = true;
        }
        if member.client_host != client.client_host {
            member.client_host = client.client_host.to_string();
            persist = true;
        }

        if subscription_changed {
            persist = true;
        }
        self.advance_epochs(subscription_changed, bump, topics, config);

        let assignment_changed =
            self.reconcile_member(&member_id, topics, subscription_changed, owned, now_ms);
        if assignment_changed.is_some() {
            persist = true;
        }
        if persist {
            self.changed();
        }
        let deadline = now_ms.saturating_add(config.consumer_session_timeout_ms);
        self.set_session_timer(&member_id, deadline);

        let Some(member) = self.members.get(&member_id) else {
            return Err(GroupError::new(
                error_codes::UNKNOWN_SERVER_ERROR,
                "member vanished while handling its heartbeat",
            ));
        };
        let full_request = request.rebalance_timeout_ms != -1
            && (request.subscribed_topic_names.is_some()
                || request.subscribed_topic_regex.is_some())
            && request.topic_partitions.is_some();
        let send_assignment =
            epoch == JOIN_GROUP_MEMBER_EPOCH || full_request || assignment_changed == Some(true);
        Ok(ConsumerGroupHeartbeatResponse {
            member_id: Some(ByteString::from(member_id.as_str())),
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: i32::try_from(config.consumer_heartbeat_interval_ms)
                .unwrap_or(i32::MAX),
            assignment: send_assignment.then(|| to_response_assignment(&member.assigned)),
            ..Default::default()
        })
    }

    /// After a member's update: bumps the group epoch when `bump`, when its subscription changed
    /// (re-resolving the regexes) or when a subscribed topic changed, then computes the target
    /// assignment if the epoch moved past it.
    fn advance_epochs(
        &mut self,
        subscription_changed: bool,
        mut bump: bool,
        topics: &TopicsImage,
        config: &GroupConfig,
    ) {
        if subscription_changed {
            bump = true;
            self.resolve_regexes(topics, false);
            self.recompute_subscribed_metadata(topics);
        } else if self.subscribed_metadata_changed(topics) {
            self.recompute_subscribed_metadata(topics);
            bump = true;
        }
        if bump {
            self.bump_group_epoch();
        }
        if self.group_epoch > self.assignment_epoch {
            self.compute_target_assignment(topics, config);
        }
    }

    /// Finds the heartbeat's member and checks it may heartbeat, without changing anything.
    fn plan_member(
        &self,
        member_id: &str,
        epoch: i32,
        instance_id: Option<&str>,
        owned: Option<&[OwnedTopicPartitions]>,
    ) -> Result<MemberPlan, GroupError> {
        let unknown_member = || {
            GroupError::new(
                error_codes::UNKNOWN_MEMBER_ID,
                format!(
                    "Member {member_id} is not a member of group {}.",
                    self.group_id
                ),
            )
        };
        let Some(instance) = instance_id else {
            return match self.members.get(member_id) {
                // KIP-1082: epoch 0 with a known ID is the same member (re)joining.
                Some(member) => {
                    check_member_epoch(member, epoch, owned).map(|()| MemberPlan::Existing)
                }
                None if epoch == JOIN_GROUP_MEMBER_EPOCH => Ok(MemberPlan::New),
                None => Err(unknown_member()),
            };
        };
        let existing = self
            .static_members
            .get(instance)
            .and_then(|id| self.members.get(id));
        if epoch == JOIN_GROUP_MEMBER_EPOCH {
            match existing {
                None if self.members.contains_key(member_id) => Ok(MemberPlan::Existing),
                None => Ok(MemberPlan::New),
                // Skiff (KIP-1082): the same member ID retrying its join is not a second instance.
                Some(old) if old.member_id == member_id => Ok(MemberPlan::Existing),
                Some(old) if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH => {
                    Err(GroupError::new(
                        error_codes::UNRELEASED_INSTANCE_ID,
                        format!(
                            "Static member {member_id} with instance id {instance} cannot join the group because the instance id is owned by {} member.",
                            old.member_id
                        ),
                    ))
                }
                Some(old) => Ok(MemberPlan::ReplaceStatic {
                    old_member_id: old.member_id.clone(),
                }),
            }
        } else {
            match existing {
                None => Err(GroupError::new(
                    error_codes::UNKNOWN_MEMBER_ID,
                    format!("Instance id {instance} is unknown."),
                )),
                Some(old) if old.member_id != member_id => Err(GroupError::new(
                    error_codes::FENCED_INSTANCE_ID,
                    format!(
                        "Static member {member_id} with instance id {instance} was fenced by member {}.",
                        old.member_id
                    ),
                )),
                Some(old) => check_member_epoch(old, epoch, owned).map(|()| MemberPlan::Existing),
            }
        }
    }

    /// ConsumerGroupHeartbeat with epoch -1 (leave) or -2 (static member leaving temporarily).
    fn leave(
        &mut self,
        request: &ConsumerGroupHeartbeatRequest,
        topics: &TopicsImage,
        config: &GroupConfig,
        now_ms: i64,
    ) -> Result<ConsumerGroupHeartbeatResponse, GroupError> {
        let member_id: &str = &request.member_id;
        let epoch = request.member_epoch;
        let response = |epoch: i32| ConsumerGroupHeartbeatResponse {
            member_id: Some(ByteString::from(member_id)),
            member_epoch: epoch,
            ..Default::default()
        };
        let Some(instance) = request.instance_id.as_deref() else {
            if !self.members.contains_key(member_id) {
                return Err(GroupError::new(
                    error_codes::UNKNOWN_MEMBER_ID,
                    format!(
                        "Member {member_id} is not a member of group {}.",
                        self.group_id
                    ),
                ));
            }
            self.fence_members(&[member_id.to_string()], topics, config);
            return Ok(response(epoch));
        };
        let Some(static_id) = self.static_members.get(instance).cloned() else {
            return Err(GroupError::new(
                error_codes::UNKNOWN_MEMBER_ID,
                format!("Instance id {instance} is unknown."),
            ));
        };
        if static_id != member_id {
            return Err(GroupError::new(
                error_codes::FENCED_INSTANCE_ID,
                format!(
                    "Static member {member_id} with instance id {instance} was fenced by member {static_id}."
                ),
            ));
        }
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            // Keep the member and its assignment; give up what it was revoking.
            if let Some(member) = self.members.get_mut(member_id) {
                let seq = member.seq;
                for (topic, partitions) in std::mem::take(&mut member.pending_revocation) {
                    for p in partitions {
                        if self.owners.get(&(topic, p)) == Some(&seq) {
                            self.owners.remove(&(topic, p));
                        }
                    }
                }
                member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
            }
            self.set_rebalance_timer(member_id, None);
            let deadline = now_ms.saturating_add(self.session_timeout_ms);
            self.set_session_timer(member_id, deadline);
            self.changed();
            Ok(response(LEAVE_GROUP_STATIC_MEMBER_EPOCH))
        } else {
            self.fence_members(&[member_id.to_string()], topics, config);
            Ok(response(epoch))
        }
    }

    /// Removes members that left or timed out (Kafka's `consumerGroupFenceMembers`). When only
    /// classic members would remain and the policy allows it, the group is marked for a
    /// downgrade instead: the members go without an epoch bump, and the caller turns the group
    /// into a classic group ([`ConsumerGroup::take_downgrade`]).
    pub(crate) fn fence_members(
        &mut self,
        member_ids: &[String],
        topics: &TopicsImage,
        config: &GroupConfig,
    ) {
        let leaving: Vec<&String> = member_ids
            .iter()
            .filter(|id| self.members.contains_key(id.as_str()))
            .collect();
        if leaving.is_empty() {
            return;
        }
        let remaining: Vec<&ConsumerMember> = self
            .members
            .values()
            .filter(|m| !leaving.contains(&&m.member_id))
            .collect();
        let downgrade = !remaining.is_empty()
            && remaining.iter().all(|m| m.classic.is_some())
            && config.consumer_migration_policy.downgrade_enabled()
            && remaining.len() <= config.classic_max_size;
        for id in member_ids {
            if downgrade {
                self.drop_member(id);
            } else {
                self.fence_member(id, topics);
            }
        }
        if downgrade {
            self.downgrade_pending = true;
            self.changed();
        }
    }

    /// Whether the group must now become a classic group (see [`ConsumerGroup::fence_members`]);
    /// clears the mark.
    pub fn take_downgrade(&mut self) -> bool {
        std::mem::take(&mut self.downgrade_pending)
    }

    /// Removes a member (leave, session or rebalance timeout) and bumps the group epoch.
    fn fence_member(&mut self, member_id: &str, topics: &TopicsImage) {
        let Some(member) = self.drop_member(member_id) else {
            return;
        };
        if member.subscribed_topic_regex.is_some() {
            self.resolve_regexes(topics, false);
        }
        self.recompute_subscribed_metadata(topics);
        self.bump_group_epoch();
    }

    /// Removes a member with everything it holds, leaving the epochs as they are.
    fn drop_member(&mut self, member_id: &str) -> Option<ConsumerMember> {
        let member = self.members.remove(member_id)?;
        self.release_all(&member);
        if let Some(instance) = &member.instance_id
            && self.static_members.get(instance).map(String::as_str) == Some(member_id)
        {
            self.static_members.remove(instance);
        }
        self.target.remove(member_id);
        self.remove_timers(&member);
        self.seq_to_member.remove(&member.seq);
        Some(member)
    }

    fn release_all(&mut self, member: &ConsumerMember) {
        for key in member.owned_partitions() {
            if self.owners.get(&key) == Some(&member.seq) {
                self.owners.remove(&key);
            }
        }
    }

    /// Carries out a member plan decided before anything changed: a new member is added, a
    /// static member's replacement takes over the old one. Whether the group changed.
    fn apply_member_plan(&mut self, plan: MemberPlan, member_id: &str) -> bool {
        match plan {
            MemberPlan::Existing => false,
            MemberPlan::New => {
                let seq = self.allocate_seq(member_id);
                self.members.insert(
                    member_id.to_string(),
                    ConsumerMember::new(member_id.to_string(), seq),
                );
                true
            }
            MemberPlan::ReplaceStatic { old_member_id } => {
                self.replace_static_member(&old_member_id, member_id);
                true
            }
        }
    }

    fn replace_static_member(&mut self, old_member_id: &str, new_member_id: &str) {
        // A different member already using the new ID cannot coexist with the replacement.
        if let Some(other) = self.members.remove(new_member_id) {
            self.release_all(&other);
            self.remove_timers(&other);
            self.seq_to_member.remove(&other.seq);
            self.target.remove(new_member_id);
        }
        let Some(old) = self.members.remove(old_member_id) else {
            return;
        };
        self.release_all(&old);
        self.remove_timers(&old);
        self.seq_to_member.remove(&old.seq);
        let seq = self.allocate_seq(new_member_id);
        let mut member = old;
        member.member_id = new_member_id.to_string();
        member.seq = seq;
        member.member_epoch = 0;
        member.previous_member_epoch = 0;
        member.session_deadline_ms = i64::MAX;
        member.rebalance_deadline = None;
        for key in member.owned_partitions() {
            self.owners.insert(key, seq);
        }
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), new_member_id.to_string());
        }
        if let Some(target) = self.target.remove(old_member_id) {
            self.target.insert(new_member_id.to_string(), target);
        }
        self.members.insert(new_member_id.to_string(), member);
    }

    fn allocate_seq(&mut self, member_id: &str) -> u64 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.seq_to_member.insert(seq, member_id.to_string());
        seq
    }

    /// Reconciles a member toward its target; `Some(assigned partitions changed)` when its state
    /// changed, `None` when nothing changed.
    fn reconcile_member(
        &mut self,
        member_id: &str,
        topics: &TopicsImage,
        subscription_changed: bool,
        owned: Option<&[OwnedTopicPartitions]>,
        now_ms: i64,
    ) -> Option<bool> {
        let member = self.members.get(member_id)?;
        if !subscription_changed && member.is_reconciled_to(self.assignment_epoch) {
            return None;
        }
        let subscribed = self.subscribed_topic_ids(member, topics);
        let empty = Assignment::new();
        let input = ReconcileInput {
            target_epoch: self.assignment_epoch,
            target: self.target.get(member_id).unwrap_or(&empty),
            subscribed_topic_ids: &subscribed,
            has_subscription_changed: subscription_changed,
            owned,
        };
        let seq = member.seq;
        let owners = &self.owners;
        let next = reconcile(member, &input, |topic, p| {
            owners.get(&(topic, p)).is_some_and(|owner| *owner != seq)
        })?;

        let member = self.members.get_mut(member_id)?;
        for key in member.owned_partitions() {
            if self.owners.get(&key) == Some(&seq) {
                self.owners.remove(&key);
            }
        }
        let assignment_changed = member.assigned != next.assigned;
        member.state = next.state;
        member.member_epoch = next.member_epoch;
        member.previous_member_epoch = next.previous_member_epoch;
        member.assigned = next.assigned;
        member.pending_revocation = next.pending_revocation;
        for key in member.owned_partitions() {
            self.owners.insert(key, seq);
        }
        // Revoking members must release in time (re-armed on every change while revoking);
        // classic members have their join and sync timeouts instead.
        let revoking = member.state == MemberState::UnrevokedPartitions && member.classic.is_none();
        let rebalance = revoking.then(|| {
            (
                now_ms.saturating_add(i64::from(member.rebalance_timeout_ms.max(0))),
                member.member_epoch,
            )
        });
        self.set_rebalance_timer(member_id, rebalance);
        Some(assignment_changed)
    }

    /// The IDs of the existing topics a member subscribes to (by name or regex).
    fn subscribed_topic_ids(
        &self,
        member: &ConsumerMember,
        topics: &TopicsImage,
    ) -> BTreeSet<Uuid> {
        let by_regex = member
            .subscribed_topic_regex
            .as_ref()
            .and_then(|r| self.resolved_regex.get(r))
            .into_iter()
            .flatten();
        member
            .subscribed_topic_names
            .iter()
            .chain(by_regex)
            .filter_map(|name| topics.by_name.get(name).map(|(id, _)| *id))
            .collect()
    }

    /// The assignor the members prefer (most requested), else the configured default.
    fn preferred_assignor(&self, config: &GroupConfig) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some(name) = member.server_assignor.as_deref() {
                *counts.entry(name).or_default() += 1;
            }
        }
        // Highest count; on a tie, the smallest name.
        let mut best: Option<(&str, usize)> = None;
        for (name, count) in counts {
            if best.is_none_or(|(_, c)| count > c) {
                best = Some((name, count));
            }
        }
        match best {
            Some((name, _)) => name.to_string(),
            None => config
                .consumer_assignors
                .iter()
                .find(|a| assignor::SUPPORTED.contains(&a.as_str()))
                .cloned()
                .unwrap_or_else(|| assignor::UNIFORM.to_string()),
        }
    }

    fn compute_target_assignment(&mut self, topics: &TopicsImage, config: &GroupConfig) {
        let name = self.preferred_assignor(config);
        let topic_counts: BTreeMap<Uuid, i32> = self
            .subscribed_metadata
            .values()
            .flatten()
            .copied()
            .collect();
        let inputs: Vec<assignor::AssignorMember<'_>> = self
            .members
            .values()
            .map(|m| assignor::AssignorMember {
                member_id: &m.member_id,
                instance_id: m.instance_id.as_deref(),
                subscribed: self
                    .subscribed_topic_ids(m, topics)
                    .into_iter()
                    .filter(|id| topic_counts.contains_key(id))
                    .collect(),
                current: self.target.get(&m.member_id),
            })
            .collect();
        let result = assignor::assign(&name, &inputs, &topic_counts);
        let target: BTreeMap<String, Assignment> = inputs
            .iter()
            .map(|m| m.member_id.to_string())
            .zip(result)
            .collect();
        self.target = target;
        self.assignment_epoch = self.group_epoch;
        self.changed();
    }

    // ---------------------------------------------------------------------------------------
    // Subscriptions and topic metadata
    // ---------------------------------------------------------------------------------------

    /// Resolves the regexes members use (all of them when `all`, else only unresolved ones) and
    /// forgets regexes nobody uses. Returns whether any resolution changed.
    fn resolve_regexes(&mut self, topics: &TopicsImage, all: bool) -> bool {
        let in_use: BTreeSet<String> = self
            .members
            .values()
            .filter_map(|m| m.subscribed_topic_regex.clone())
            .collect();
        let before = self.resolved_regex.len();
        self.resolved_regex.retain(|r, _| in_use.contains(r));
        self.compiled.retain(|r, _| in_use.contains(r));
        let mut changed = before != self.resolved_regex.len();
        for pattern in in_use {
            if !all && self.resolved_regex.contains_key(&pattern) {
                continue;
            }
            if !self.compiled.contains_key(&pattern) {
                // Validated when first subscribed; an unparsable one (e.g. from an old snapshot)
                // matches nothing.
                if let Ok(regex) = compile_regex(&pattern) {
                    self.compiled.insert(pattern.clone(), regex);
                }
            }
            let matched: BTreeSet<String> = match self.compiled.get(&pattern) {
                Some(regex) => topics
                    .by_name
                    .keys()
                    .filter(|name| regex.is_match(name))
                    .cloned()
                    .collect(),
                None => BTreeSet::new(),
            };
            if self.resolved_regex.get(&pattern) != Some(&matched) {
                self.resolved_regex.insert(pattern, matched);
                changed = true;
            }
        }
        changed
    }

    /// Rebuilds the subscribed-topics metadata from the members' subscriptions and the image.
    /// Returns whether it differs from before.
    fn recompute_subscribed_metadata(&mut self, topics: &TopicsImage) -> bool {
        let mut names: BTreeSet<&String> = BTreeSet::new();
        for member in self.members.values() {
            names.extend(member.subscribed_topic_names.iter());
            if let Some(resolved) = member
                .subscribed_topic_regex
                .as_ref()
                .and_then(|r| self.resolved_regex.get(r))
            {
                names.extend(resolved.iter());
            }
        }
        let metadata: BTreeMap<String, Option<(Uuid, i32)>> = names
            .into_iter()
            .map(|name| (name.clone(), topics.by_name.get(name).copied()))
            .collect();
        let changed = metadata != self.subscribed_metadata;
        if changed {
            self.subscribed_metadata = metadata;
            self.changed();
        }
        changed
    }

    /// Whether a subscribed topic appeared, disappeared, was recreated or grew.
    fn subscribed_metadata_changed(&self, topics: &TopicsImage) -> bool {
        self.subscribed_metadata
            .iter()
            .any(|(name, seen)| topics.by_name.get(name).copied() != *seen)
    }

    /// The broker's topic metadata changed: re-resolves regexes and bumps the group epoch when
    /// the subscribed topics changed (existence, ID or partition count). The new target
    /// assignment is computed by the next heartbeat. Returns whether the group epoch moved.
    pub fn on_topics_changed(&mut self, topics: &TopicsImage, _now_ms: i64) -> bool {
        if self.members.is_empty() {
            return false;
        }
        let regex_changed = self.resolve_regexes(topics, true);
        let metadata_changed = self.recompute_subscribed_metadata(topics);
        if regex_changed || metadata_changed {
            self.bump_group_epoch();
            true
        } else {
            false
        }
    }

    // ---------------------------------------------------------------------------------------
    // Timers
    // ---------------------------------------------------------------------------------------

    fn set_session_timer(&mut self, member_id: &str, deadline: i64) {
        let Some(member) = self.members.get_mut(member_id) else {
            return;
        };
        let old = std::mem::replace(&mut member.session_deadline_ms, deadline);
        let seq = member.seq;
        if old != i64::MAX {
            self.timers.remove(&(old, seq, TimerKind::Session));
        }
        self.timers.insert((deadline, seq, TimerKind::Session));
    }

    /// Arms (deadline, epoch the member must leave) or cancels the rebalance timer.
    fn set_rebalance_timer(&mut self, member_id: &str, timer: Option<(i64, i32)>) {
        let Some(member) = self.members.get_mut(member_id) else {
            return;
        };
        let old = std::mem::replace(&mut member.rebalance_deadline, timer);
        let seq = member.seq;
        if let Some((old, _)) = old {
            self.timers.remove(&(old, seq, TimerKind::Rebalance));
        }
        if let Some((deadline, _)) = timer {
            self.timers.insert((deadline, seq, TimerKind::Rebalance));
        }
    }

    fn remove_timers(&mut self, member: &ConsumerMember) {
        if member.session_deadline_ms != i64::MAX {
            self.timers
                .remove(&(member.session_deadline_ms, member.seq, TimerKind::Session));
        }
        if let Some((deadline, _)) = member.rebalance_deadline {
            self.timers
                .remove(&(deadline, member.seq, TimerKind::Rebalance));
        }
        if let Some(deadline) = member.join_deadline {
            self.timers
                .remove(&(deadline, member.seq, TimerKind::ClassicJoin));
        }
        if let Some(deadline) = member.sync_deadline {
            self.timers
                .remove(&(deadline, member.seq, TimerKind::ClassicSync));
        }
    }

    /// The earliest session or rebalance deadline, if any.
    pub fn next_deadline(&self) -> Option<i64> {
        self.timers.first().map(|(deadline, _, _)| *deadline)
    }

    /// Fires every deadline at or before `now_ms`: members whose session expired are removed
    /// (a static member loses its instance too); members that did not revoke within their
    /// rebalance timeout, and classic members that did not rejoin or sync in time, are fenced.
    /// Returns the removed member IDs. Stops early when a removal calls for a downgrade
    /// ([`ConsumerGroup::take_downgrade`]): the classic group takes over the other timers.
    pub fn on_timer(
        &mut self,
        topics: &TopicsImage,
        config: &GroupConfig,
        now_ms: i64,
    ) -> Vec<String> {
        self.session_timeout_ms = config.consumer_session_timeout_ms;
        let mut removed = Vec::new();
        while let Some(&(deadline, seq, kind)) = self.timers.first() {
            if deadline > now_ms {
                break;
            }
            self.timers.remove(&(deadline, seq, kind));
            let Some(member_id) = self.seq_to_member.get(&seq).cloned() else {
                continue;
            };
            let Some(member) = self.members.get_mut(&member_id) else {
                continue;
            };
            let fence = match kind {
                TimerKind::Session => {
                    member.session_deadline_ms = i64::MAX;
                    true
                }
                TimerKind::Rebalance => {
                    let expected = member.rebalance_deadline.take().map(|(_, e)| e);
                    expected == Some(member.member_epoch)
                }
                TimerKind::ClassicJoin => member.join_deadline.take() == Some(deadline),
                TimerKind::ClassicSync => member.sync_deadline.take() == Some(deadline),
            };
            if fence {
                self.fence_members(std::slice::from_ref(&member_id), topics, config);
                removed.push(member_id);
                if self.downgrade_pending {
                    break;
                }
            }
        }
        removed
    }

    // ---------------------------------------------------------------------------------------
    // Offsets (protocol-notes §5)
    // ---------------------------------------------------------------------------------------

    /// OffsetCommit from `member_id` at `member_epoch` with OffsetCommit `api_version`.
    /// An epoch < 0 on a group without members is an admin commit and is accepted.
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        member_epoch: i32,
        api_version: i16,
    ) -> Result<(), GroupError> {
        if member_epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let member = self.members.get(member_id).ok_or_else(|| {
            GroupError::new(
                error_codes::UNKNOWN_MEMBER_ID,
                format!(
                    "Member {member_id} is not a member of group {}.",
                    self.group_id
                ),
            )
        })?;
        // Classic members (online migration) commit with any version and their generation.
        if api_version < MIN_OFFSET_COMMIT_VERSION_FOR_CONSUMER_MEMBERS && member.classic.is_none()
        {
            return Err(GroupError::new(
                error_codes::UNSUPPORTED_VERSION,
                "OffsetCommit version 9 or above must be used by members using the modern group protocol",
            ));
        }
        Self::check_stale(member, member_epoch)
    }

    /// OffsetFetch with a member ID (nullable) and member epoch (-1 default). A null member ID
    /// with a negative epoch skips validation.
    pub fn validate_offset_fetch(
        &self,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        if member_id.is_none() && member_epoch < 0 {
            return Ok(());
        }
        let id = member_id.unwrap_or("null");
        let member = member_id
            .and_then(|id| self.members.get(id))
            .ok_or_else(|| {
                GroupError::new(
                    error_codes::UNKNOWN_MEMBER_ID,
                    format!("Member {id} is not a member of group {}.", self.group_id),
                )
            })?;
        Self::check_stale(member, member_epoch)
    }

    /// Kafka's `validateMemberEpoch`: STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION for a classic
    /// member (whose generation is its member epoch).
    fn check_stale(member: &ConsumerMember, received: i32) -> Result<(), GroupError> {
        let expected = member.member_epoch;
        if received == expected {
            return Ok(());
        }
        Err(if member.classic.is_some() {
            GroupError::new(
                error_codes::ILLEGAL_GENERATION,
                format!(
                    "The received generation id {received} does not match the expected member epoch {expected}."
                ),
            )
        } else {
            GroupError::new(
                error_codes::STALE_MEMBER_EPOCH,
                format!(
                    "The received member epoch {received} does not match the expected member epoch {expected}."
                ),
            )
        })
    }

    // ---------------------------------------------------------------------------------------
    // Describe
    // ---------------------------------------------------------------------------------------

    /// ConsumerGroupDescribe for this group (authorized operations left at Kafka's "not
    /// requested" default).
    pub fn describe(
        &self,
        topics: &TopicsImage,
        config: &GroupConfig,
    ) -> describe_response::DescribedGroup {
        let names: HashMap<Uuid, &str> = topics
            .by_name
            .iter()
            .map(|(name, (id, _))| (*id, name.as_str()))
            .collect();
        let to_assignment = |assignment: Option<&Assignment>| describe_response::Assignment {
            topic_partitions: assignment
                .into_iter()
                .flatten()
                .map(|(topic, partitions)| describe_response::TopicPartitions {
                    topic_id: *topic,
                    topic_name: ByteString::from(names.get(topic).copied().unwrap_or("")),
                    partitions: partitions.iter().copied().collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let members = self
            .members
            .values()
            .map(|m| describe_response::Member {
                member_id: ByteString::from(m.member_id.as_str()),
                instance_id: m.instance_id.as_deref().map(ByteString::from),
                rack_id: m.rack_id.as_deref().map(ByteString::from),
                member_epoch: m.member_epoch,
                client_id: ByteString::from(m.client_id.as_str()),
                client_host: ByteString::from(m.client_host.as_str()),
                subscribed_topic_names: m
                    .subscribed_topic_names
                    .iter()
                    .map(|n| ByteString::from(n.as_str()))
                    .collect(),
                subscribed_topic_regex: m.subscribed_topic_regex.as_deref().map(ByteString::from),
                assignment: to_assignment(Some(&m.assigned)),
                target_assignment: to_assignment(self.target.get(&m.member_id)),
                // KIP-1099: 0 = classic protocol, 1 = consumer protocol.
                member_type: if m.classic.is_some() { 0 } else { 1 },
                ..Default::default()
            })
            .collect();
        describe_response::DescribedGroup {
            group_id: ByteString::from(self.group_id.as_str()),
            group_state: ByteString::from_static(self.state_name()),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor_name: ByteString::from(self.preferred_assignor(config)),
            members,
            ..Default::default()
        }
    }
}
