//! KIP-932 share groups, the group-coordinator side: membership through ShareGroupHeartbeat
//! (key 76, v1) and ShareGroupDescribe (key 77, v1), target assignments from Kafka's `simple`
//! share assignor, and the bookkeeping of which share partitions have their state initialized.
//! One deterministic, I/O-free state machine per group.
//!
//! The rules are Kafka 4.2's (`GroupMetadataManager.shareGroupHeartbeat`, `shareGroupLeave`,
//! `shareGroupFenceMember`, `ShareGroup`, `ShareGroupMember`, `ShareGroupAssignmentBuilder`,
//! `GroupCoordinatorService.throwIfShareGroupHeartbeatRequestIsInvalid` and
//! `KafkaApis.isMemberIdValid`):
//!
//! - members choose their own IDs (at most 36 characters); epoch 0 joins, -1 leaves;
//! - the **group epoch** moves when membership, subscriptions or the metadata of subscribed
//!   topics change, or when newly initialized share partitions are waiting to be assigned; the
//!   first heartbeat that sees `group epoch > assignment epoch` recomputes the **target
//!   assignment** with the `simple` assignor (partitions may be shared by several members);
//! - a member moves straight to its target: no revocation step, since a share partition may have
//!   several consumers at once; its **member epoch** becomes the assignment epoch;
//! - only partitions whose share state is **initialized** are assigned. A heartbeat that finds
//!   subscribed partitions without state asks the broker, through
//!   [`ShareHeartbeat::initialize`], to initialize them on the share coordinator
//!   (InitializeShareGroupState); the broker then reports [`ShareGroup::on_partitions_initialized`]
//!   (or [`ShareGroup::on_initialize_failed`]) and the next heartbeat assigns them;
//! - time only enters as `now_ms`: session timeouts are deadlines the broker polls with
//!   [`ShareGroup::next_deadline`] / [`ShareGroup::on_timer`].
//!
//! Where Skiff differs from Kafka 4.2, on purpose:
//! - a member that heartbeats with epoch 0 under an ID the group still knows is taken back
//!   (KAFKA-19233, merged into Kafka after 4.2's share-group code; the consumer module does the
//!   same), where 4.2 fences it until its session expires;
//! - the group epoch follows subscribed topics' existence, ID and partition count (as the
//!   consumer module does), not Kafka's metadata hash, which also covers replica racks the
//!   `simple` assignor ignores;
//! - share partitions stop being tracked as initialized when their topic disappears from the
//!   image ([`ShareGroup::on_topics_changed`]), as Kafka's `maybeCleanupShareGroupState` does;
//!   Kafka's "deleting topics" bookkeeping (DeleteShareGroupOffsets) is not modelled here.

pub mod assignor;
mod member;
mod snapshot;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use skiff_protocol::generated::share_group_describe_response as describe_response;
use skiff_protocol::generated::share_group_heartbeat_request::ShareGroupHeartbeatRequest;
use skiff_protocol::generated::share_group_heartbeat_response::{
    self as heartbeat_response, ShareGroupHeartbeatResponse,
};
use skiff_protocol::{ByteString, Uuid, error_codes};

use crate::consumer::is_blank;
use crate::types::{GroupConfig, GroupError, TopicsImage};

pub use crate::consumer::{
    Assignment, ClientInfo, JOIN_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH,
};
pub use member::ShareMember;
pub use snapshot::{ShareGroupSnapshot, ShareMemberSnapshot};

use assignor::{ShareAssignorMember, SubscriptionType};

/// The longest member ID a share group accepts, in UTF-16 code units as Java counts string
/// length (Kafka's `KafkaApis.isMemberIdValid`: "the length of a human-readable UUID").
pub const MAX_MEMBER_ID_LENGTH: usize = 36;

/// The group state shown by describe and list (Kafka's `ShareGroupState`; its `Dead` and
/// `Unknown` are never the state of a live group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareGroupState {
    Empty,
    Stable,
}

impl ShareGroupState {
    /// Kafka's wire name, used by ShareGroupDescribe and ListGroups: "Empty", "Stable".
    pub fn name(self) -> &'static str {
        match self {
            ShareGroupState::Empty => "Empty",
            ShareGroupState::Stable => "Stable",
        }
    }

    /// Lower-case form (ListGroups state filters).
    pub fn lower_case_name(self) -> &'static str {
        match self {
            ShareGroupState::Empty => "empty",
            ShareGroupState::Stable => "stable",
        }
    }
}

/// The outcome of an accepted ShareGroupHeartbeat.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareHeartbeat {
    /// The response to send (error fields unset).
    pub response: ShareGroupHeartbeatResponse,
    /// Share partitions whose state the broker must initialize on the share coordinator
    /// before they can be assigned; see [`InitializeShareState`].
    pub initialize: Option<InitializeShareState>,
}

/// A request to initialize share-partition state (Kafka's `InitializeShareGroupStateParameters`
/// built by `maybeCreateInitializeShareGroupStateRequest`): for each partition, an
/// InitializeShareGroupState entry with state epoch `group_epoch` and start offset -1 (the
/// share coordinator then starts from `share.auto.offset.reset`).
///
/// The partitions are recorded as "initializing" when this is returned. The broker answers
/// with [`ShareGroup::on_partitions_initialized`] for the partitions the share coordinator
/// initialized and [`ShareGroup::on_initialize_failed`] for the others; a request left
/// unanswered is asked again by a heartbeat after `group.share.initialize.retry.interval.ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitializeShareState {
    pub group_epoch: i32,
    /// Topic ID -> partitions.
    pub partitions: Assignment,
}

/// Share partitions asked to be initialized and not yet answered.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Initializing {
    partitions: BTreeSet<i32>,
    /// When they were last asked for (volatile: a restore counts from the load, as Kafka
    /// stamps replayed records with the replay time).
    requested_at_ms: i64,
}

fn invalid_request(message: impl Into<String>) -> GroupError {
    GroupError::new(error_codes::INVALID_REQUEST, message)
}

fn fenced_epoch(message: String) -> GroupError {
    GroupError::new(error_codes::FENCED_MEMBER_EPOCH, message)
}

/// Request checks that need no group state, in Kafka's order: `KafkaApis.isMemberIdValid`
/// ("Invalid member id in the request." for an empty ID or one longer than
/// [`MAX_MEMBER_ID_LENGTH`]), then `throwIfShareGroupHeartbeatRequestIsInvalid`. All failures
/// are INVALID_REQUEST. The broker calls this before looking the group up (answering
/// [`share_group_not_found`] itself when the group does not exist and the epoch is not 0);
/// [`ShareGroup::heartbeat`] runs it again.
pub fn validate_heartbeat(request: &ShareGroupHeartbeatRequest) -> Result<(), GroupError> {
    let member_id: &str = &request.member_id;
    if member_id.is_empty() || member_id.encode_utf16().count() > MAX_MEMBER_ID_LENGTH {
        return Err(invalid_request("Invalid member id in the request."));
    }
    if is_blank(member_id) {
        return Err(invalid_request("MemberId can't be empty."));
    }
    if is_blank(&request.group_id) {
        return Err(invalid_request("GroupId can't be empty."));
    }
    if request.rack_id.as_deref().is_some_and(is_blank) {
        return Err(invalid_request("RackId can't be empty."));
    }
    if request.member_epoch == JOIN_GROUP_MEMBER_EPOCH {
        if request
            .subscribed_topic_names
            .as_ref()
            .is_none_or(Vec::is_empty)
        {
            return Err(invalid_request(
                "SubscribedTopicNames must be set in first request.",
            ));
        }
    } else if request.member_epoch < LEAVE_GROUP_MEMBER_EPOCH {
        return Err(invalid_request("MemberEpoch is invalid."));
    }
    Ok(())
}

/// GROUP_ID_NOT_FOUND for a ShareGroupHeartbeat with epoch != 0 (a leave included) to a group
/// that does not exist.
pub fn share_group_not_found(group_id: &str) -> GroupError {
    GroupError::new(
        error_codes::GROUP_ID_NOT_FOUND,
        format!("Share group {group_id} not found."),
    )
}

/// GROUP_ID_NOT_FOUND for ShareGroupDescribe of a group that does not exist.
pub fn group_not_found(group_id: &str) -> GroupError {
    GroupError::new(
        error_codes::GROUP_ID_NOT_FOUND,
        format!("Group {group_id} not found."),
    )
}

/// The group ID belongs to a group of another type (a group ID is one type at a time).
/// Kafka answers ShareGroupHeartbeat and ShareGroupDescribe with this GROUP_ID_NOT_FOUND.
/// The other direction, for the broker's other handlers: ConsumerGroupHeartbeat and
/// ConsumerGroupDescribe of a share group are GROUP_ID_NOT_FOUND "Group {id} is not a consumer
/// group."; a classic JoinGroup to a share group is INCONSISTENT_GROUP_PROTOCOL (with member ID
/// "").
pub fn not_a_share_group(group_id: &str) -> GroupError {
    GroupError::new(
        error_codes::GROUP_ID_NOT_FOUND,
        format!("Group {group_id} is not a share group."),
    )
}

/// A ShareGroupDescribe entry carrying an error (group not found, or not a share group).
pub fn describe_error(group_id: &str, error: &GroupError) -> describe_response::DescribedGroup {
    describe_response::DescribedGroup {
        error_code: error.code.code(),
        error_message: Some(ByteString::from(error.message.as_str())),
        group_id: ByteString::from(group_id),
        ..Default::default()
    }
}

/// Kafka's `throwIfShareGroupMemberEpochIsInvalid`, with KAFKA-19233 (epoch 0 always rejoins):
/// an epoch ahead of the member's, or behind it and not its previous epoch (the response that
/// moved it on may have been lost), is fenced.
fn check_member_epoch(member: &ShareMember, received: i32) -> Result<(), GroupError> {
    if received == JOIN_GROUP_MEMBER_EPOCH {
        return Ok(());
    }
    if received > member.member_epoch {
        return Err(fenced_epoch(format!(
            "The share group member has a greater member epoch ({received}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
            member.member_epoch
        )));
    }
    if received < member.member_epoch && received != member.previous_member_epoch {
        return Err(fenced_epoch(format!(
            "The share group member has a smaller member epoch ({received}) than the one known by the group coordinator ({}), and it does not match the previous member epoch ({}). The member must abandon all its partitions and rejoin.",
            member.member_epoch, member.previous_member_epoch
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

/// Subscribed topic names as stored: sorted, without duplicates.
fn sorted_names<S: AsRef<str>>(names: &[S]) -> Vec<String> {
    let set: BTreeSet<String> = names.iter().map(|n| n.as_ref().to_string()).collect();
    set.into_iter().collect()
}

/// One KIP-932 share group.
#[derive(Debug, Clone)]
pub struct ShareGroup {
    group_id: String,
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ShareMember>,
    /// Member ID -> target assignment (at `assignment_epoch`).
    target: BTreeMap<String, Assignment>,
    /// Every subscribed topic name -> (ID, partition count) when last seen, `None` when the
    /// topic did not exist.
    subscribed_metadata: BTreeMap<String, Option<(Uuid, i32)>>,
    /// Share partitions whose state the share coordinator has initialized.
    initialized: Assignment,
    /// Share partitions asked to be initialized, by topic ID.
    initializing: BTreeMap<Uuid, Initializing>,
    session_timeout_ms: i64,
    change_counter: u64,
    // Volatile state, rebuilt on restore.
    /// Member ID -> session deadline.
    sessions: BTreeMap<String, i64>,
    /// (deadline, member ID), earliest first.
    timers: BTreeSet<(i64, String)>,
}

impl ShareGroup {
    pub fn new(group_id: impl Into<String>) -> Self {
        ShareGroup {
            group_id: group_id.into(),
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            subscribed_metadata: BTreeMap::new(),
            initialized: Assignment::new(),
            initializing: BTreeMap::new(),
            session_timeout_ms: GroupConfig::default().share_session_timeout_ms,
            change_counter: 0,
            sessions: BTreeMap::new(),
            timers: BTreeSet::new(),
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
    /// created it for that heartbeat should drop it again, as Kafka never materializes it.
    pub fn is_unused(&self) -> bool {
        self.members.is_empty() && self.group_epoch == 0
    }
    pub fn member_count(&self) -> usize {
        self.members.len()
    }
    pub fn members(&self) -> impl Iterator<Item = &ShareMember> {
        self.members.values()
    }
    pub fn member(&self, member_id: &str) -> Option<&ShareMember> {
        self.members.get(member_id)
    }
    pub fn has_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }
    /// Whether any member subscribes to `topic`.
    pub fn is_subscribed_to(&self, topic: &str) -> bool {
        self.subscribed_metadata.contains_key(topic)
    }
    /// A member's target assignment at the assignment epoch.
    pub fn target_assignment(&self, member_id: &str) -> Option<&Assignment> {
        self.target.get(member_id)
    }
    /// The share partitions whose state is initialized (Kafka's
    /// `initializedShareGroupPartitions`), by topic ID.
    pub fn initialized_partitions(&self) -> &Assignment {
        &self.initialized
    }
    /// The share partitions asked to be initialized and not yet answered, by topic ID.
    pub fn initializing_partitions(&self) -> Assignment {
        self.initializing
            .iter()
            .map(|(topic, init)| (*topic, init.partitions.clone()))
            .collect()
    }
    /// Bumped on every change that must survive a restart.
    pub fn change_counter(&self) -> u64 {
        self.change_counter
    }

    /// Kafka's share group state: Empty without members, Stable otherwise.
    pub fn state(&self) -> ShareGroupState {
        if self.members.is_empty() {
            ShareGroupState::Empty
        } else {
            ShareGroupState::Stable
        }
    }

    /// Kafka's wire name of the state ("Empty", "Stable").
    pub fn state_name(&self) -> &'static str {
        self.state().name()
    }

    /// Kafka's DeleteGroups check: only an empty share group may be deleted.
    pub fn validate_delete(&self) -> Result<(), GroupError> {
        if self.members.is_empty() {
            Ok(())
        } else {
            Err(GroupError::new(
                error_codes::NON_EMPTY_GROUP,
                "The group is not empty.",
            ))
        }
    }

    fn changed(&mut self) {
        self.change_counter = self.change_counter.wrapping_add(1);
    }

    fn bump_group_epoch(&mut self) {
        self.group_epoch = self.group_epoch.saturating_add(1);
        self.changed();
    }

    fn unknown_member(&self, member_id: &str) -> GroupError {
        GroupError::new(
            error_codes::UNKNOWN_MEMBER_ID,
            format!(
                "Member {member_id} is not a member of group {}.",
                self.group_id
            ),
        )
    }

    // ---------------------------------------------------------------------------------------
    // Heartbeat
    // ---------------------------------------------------------------------------------------

    /// Handles one ShareGroupHeartbeat for this group (which the caller created for an epoch-0
    /// request, or found). `client` is the connection's client ID and address, kept for
    /// describe. Errors carry the code and message for the response.
    pub fn heartbeat(
        &mut self,
        request: &ShareGroupHeartbeatRequest,
        client: ClientInfo<'_>,
        topics: &TopicsImage,
        config: &GroupConfig,
        now_ms: i64,
    ) -> Result<ShareHeartbeat, GroupError> {
        validate_heartbeat(request)?;
        self.session_timeout_ms = config.share_session_timeout_ms;
        let member_id: &str = &request.member_id;
        let epoch = request.member_epoch;
        if epoch == LEAVE_GROUP_MEMBER_EPOCH {
            return self
                .leave(member_id, topics)
                .map(|response| ShareHeartbeat {
                    response,
                    initialize: None,
                });
        }

        // Checks, in Kafka's order, before anything changes.
        if self.members.len() >= config.share_max_size && !self.members.contains_key(member_id) {
            return Err(GroupError::new(
                error_codes::GROUP_MAX_SIZE_REACHED,
                format!(
                    "The share group has reached its maximum capacity of {} members.",
                    config.share_max_size
                ),
            ));
        }
        let old = match self.members.get(member_id) {
            Some(member) => {
                check_member_epoch(member, epoch)?;
                Some(member.clone())
            }
            None if epoch == JOIN_GROUP_MEMBER_EPOCH => None,
            None => return Err(self.unknown_member(member_id)),
        };

        // From here on the request is accepted and the group changes.
        let is_new = old.is_none();
        let old = old.unwrap_or_else(|| ShareMember::new(member_id.to_string()));
        let mut updated = old.clone();
        if let Some(rack) = request.rack_id.as_deref() {
            updated.rack_id = Some(rack.to_string());
        }
        if let Some(names) = &request.subscribed_topic_names {
            updated.subscribed_topic_names = sorted_names(names);
        }
        updated.client_id = client.client_id.to_string();
        updated.client_host = client.client_host.to_string();
        let subscription_changed = updated.subscribed_topic_names != old.subscribed_topic_names;
        let member_changed = is_new || updated != old;
        self.members.insert(member_id.to_string(), updated);
        if member_changed {
            self.changed();
        }

        let metadata_changed = (subscription_changed || self.subscribed_metadata_changed(topics))
            && self.recompute_subscribed_metadata(topics);
        let bump =
            subscription_changed || metadata_changed || self.initialized_assignment_pending();
        if bump {
            self.bump_group_epoch();
        }
        if self.group_epoch > self.assignment_epoch {
            self.compute_target_assignment();
        }
        self.reconcile_member(member_id, bump);

        let deadline = now_ms.saturating_add(config.share_session_timeout_ms);
        self.set_session_timer(member_id, deadline);
        let initialize = self.maybe_initialize(config, now_ms);

        let Some(member) = self.members.get(member_id) else {
            return Err(GroupError::new(
                error_codes::UNKNOWN_SERVER_ERROR,
                "member vanished while handling its heartbeat",
            ));
        };
        // The assignment goes out on a join, a full request (subscribed topic names present)
        // or when it changed.
        let send_assignment = epoch == JOIN_GROUP_MEMBER_EPOCH
            || request.subscribed_topic_names.is_some()
            || member.assigned != old.assigned;
        let response = ShareGroupHeartbeatResponse {
            member_id: Some(ByteString::from(member_id)),
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: i32::try_from(config.share_heartbeat_interval_ms)
                .unwrap_or(i32::MAX),
            assignment: send_assignment.then(|| to_response_assignment(&member.assigned)),
            ..Default::default()
        };
        Ok(ShareHeartbeat {
            response,
            initialize,
        })
    }

    /// ShareGroupHeartbeat with epoch -1: the member leaves (whatever its epoch was) and the
    /// group epoch moves.
    fn leave(
        &mut self,
        member_id: &str,
        topics: &TopicsImage,
    ) -> Result<ShareGroupHeartbeatResponse, GroupError> {
        if !self.members.contains_key(member_id) {
            return Err(self.unknown_member(member_id));
        }
        self.fence_member(member_id, topics);
        Ok(ShareGroupHeartbeatResponse {
            member_id: Some(ByteString::from(member_id)),
            member_epoch: LEAVE_GROUP_MEMBER_EPOCH,
            ..Default::default()
        })
    }

    /// Removes a member (leave or session timeout) and bumps the group epoch; the new target
    /// assignment is computed by the next heartbeat.
    fn fence_member(&mut self, member_id: &str, topics: &TopicsImage) {
        if self.members.remove(member_id).is_none() {
            return;
        }
        self.target.remove(member_id);
        if let Some(deadline) = self.sessions.remove(member_id) {
            self.timers.remove(&(deadline, member_id.to_string()));
        }
        self.recompute_subscribed_metadata(topics);
        self.bump_group_epoch();
    }

    /// Moves a member to its target assignment when it is behind the assignment epoch, or its
    /// subscription (or the group's metadata) changed: the target filtered to the topics it
    /// subscribes to (Kafka's `ShareGroupAssignmentBuilder`).
    fn reconcile_member(&mut self, member_id: &str, force: bool) {
        let target_epoch = self.assignment_epoch;
        let Some(member) = self.members.get(member_id) else {
            return;
        };
        if !force && member.is_reconciled_to(target_epoch) {
            return;
        }
        let subscribed = self.subscribed_topic_ids(member);
        let assigned: Assignment = self
            .target
            .get(member_id)
            .into_iter()
            .flatten()
            .filter(|(topic, partitions)| subscribed.contains(*topic) && !partitions.is_empty())
            .map(|(topic, partitions)| (*topic, partitions.clone()))
            .collect();
        let mut next = member.clone();
        if member.member_epoch != target_epoch {
            next.previous_member_epoch = member.member_epoch;
            next.member_epoch = target_epoch;
        }
        next.assigned = assigned;
        if next != *member {
            self.members.insert(member_id.to_string(), next);
            self.changed();
        }
    }

    /// The IDs of the existing topics a member subscribes to, as the group last saw them.
    fn subscribed_topic_ids(&self, member: &ShareMember) -> BTreeSet<Uuid> {
        member
            .subscribed_topic_names
            .iter()
            .filter_map(|name| self.subscribed_metadata.get(name).copied().flatten())
            .map(|(id, _)| id)
            .collect()
    }

    /// Kafka's subscription type: homogeneous when every subscribed topic name has every
    /// member as a subscriber (or nobody subscribes to anything).
    fn subscription_type(&self) -> SubscriptionType {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for member in self.members.values() {
            for name in &member.subscribed_topic_names {
                *counts.entry(name.as_str()).or_default() += 1;
            }
        }
        if counts.values().all(|c| *c == self.members.len()) {
            SubscriptionType::Homogeneous
        } else {
            SubscriptionType::Heterogeneous
        }
    }

    fn compute_target_assignment(&mut self) {
        let topic_counts: BTreeMap<Uuid, i32> = self
            .subscribed_metadata
            .values()
            .flatten()
            .copied()
            .collect();
        let subscription = self.subscription_type();
        let inputs: Vec<ShareAssignorMember<'_>> = self
            .members
            .values()
            .map(|m| ShareAssignorMember {
                member_id: &m.member_id,
                subscribed: self.subscribed_topic_ids(m),
                current: self.target.get(&m.member_id),
            })
            .collect();
        let result = assignor::assign(
            &inputs,
            &topic_counts,
            Some(&self.initialized),
            subscription,
        );
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
    // Subscribed topics and share-partition state
    // ---------------------------------------------------------------------------------------

    /// Rebuilds the subscribed-topics metadata from the members' subscriptions and the image.
    /// Returns whether it differs from before.
    fn recompute_subscribed_metadata(&mut self, topics: &TopicsImage) -> bool {
        let names: BTreeSet<&String> = self
            .members
            .values()
            .flat_map(|m| m.subscribed_topic_names.iter())
            .collect();
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

    /// Kafka's `initializedAssignmentPending`: some initialized partitions of a subscribed topic
    /// are not in the target assignment yet (they were initialized since it was computed).
    fn initialized_assignment_pending(&self) -> bool {
        if self.members.is_empty() || self.initialized.is_empty() {
            return false;
        }
        let subscribed: BTreeMap<Uuid, i32> = self
            .subscribed_metadata
            .values()
            .flatten()
            .copied()
            .collect();
        let mut assigned: BTreeMap<Uuid, BTreeSet<i32>> = BTreeMap::new();
        for assignment in self.target.values() {
            for (topic, partitions) in assignment {
                assigned
                    .entry(*topic)
                    .or_default()
                    .extend(partitions.iter().copied());
            }
        }
        let empty = BTreeSet::new();
        self.initialized.iter().any(|(topic, partitions)| {
            let Some(&count) = subscribed.get(topic) else {
                return false;
            };
            let target = assigned.get(topic).unwrap_or(&empty);
            partitions
                .range(0..count.max(0))
                .any(|p| !target.contains(p))
        })
    }

    /// Kafka's `maybeCreateInitializeShareGroupStateRequest`: the partitions of subscribed
    /// topics that are neither initialized nor asked for within the retry interval, recorded as
    /// initializing.
    fn maybe_initialize(
        &mut self,
        config: &GroupConfig,
        now_ms: i64,
    ) -> Option<InitializeShareState> {
        let retry_ms = config.share_initialize_retry_interval_ms;
        let mut wanted = Assignment::new();
        for (topic, count) in self.subscribed_metadata.values().flatten() {
            let initialized = self.initialized.get(topic);
            // Fast path: every partition initialized (only existing partitions are recorded).
            if initialized.is_some_and(|set| set.len() >= usize::try_from(*count).unwrap_or(0)) {
                continue;
            }
            let asked = self
                .initializing
                .get(topic)
                .filter(|init| now_ms.saturating_sub(init.requested_at_ms) < retry_ms);
            let missing: BTreeSet<i32> = (0..*count)
                .filter(|p| !initialized.is_some_and(|set| set.contains(p)))
                .filter(|p| !asked.is_some_and(|init| init.partitions.contains(p)))
                .collect();
            if !missing.is_empty() {
                wanted.insert(*topic, missing);
            }
        }
        if wanted.is_empty() {
            return None;
        }
        for (topic, partitions) in &wanted {
            let entry = self.initializing.entry(*topic).or_insert(Initializing {
                partitions: BTreeSet::new(),
                requested_at_ms: now_ms,
            });
            entry.partitions.extend(partitions.iter().copied());
            entry.requested_at_ms = now_ms;
        }
        self.changed();
        Some(InitializeShareState {
            group_epoch: self.group_epoch,
            partitions: wanted,
        })
    }

    /// The share coordinator initialized these partitions (Kafka's
    /// `initializeShareGroupState`): they become assignable, and the next heartbeat of any
    /// member bumps the group epoch and assigns them. Partitions of topics the image does not
    /// know (deleted meanwhile) or beyond a topic's partition count are ignored. Returns whether
    /// anything changed.
    pub fn on_partitions_initialized(
        &mut self,
        partitions: &Assignment,
        topics: &TopicsImage,
    ) -> bool {
        let mut changed = false;
        for (topic, set) in partitions {
            let Some((_, count)) = topics.by_id(*topic) else {
                continue;
            };
            let valid: BTreeSet<i32> = set.range(0..count.max(0)).copied().collect();
            if valid.is_empty() {
                continue;
            }
            let entry = self.initialized.entry(*topic).or_default();
            let before = entry.len();
            entry.extend(valid.iter().copied());
            changed |= entry.len() != before;
            changed |= self.forget_initializing(*topic, &valid);
        }
        if changed {
            self.changed();
        }
        changed
    }

    /// The share coordinator could not initialize these partitions (Kafka's
    /// `uninitializeShareGroupState`): they are no longer awaited, so the next heartbeat asks
    /// again. Returns whether anything changed.
    pub fn on_initialize_failed(&mut self, partitions: &Assignment) -> bool {
        let mut changed = false;
        for (topic, set) in partitions {
            changed |= self.forget_initializing(*topic, set);
        }
        if changed {
            self.changed();
        }
        changed
    }

    /// The share coordinator deleted the state of these topics' share partitions
    /// (DeleteShareGroupOffsets): they are neither initialized nor awaited any more, so a
    /// member subscribed to them later has them initialized afresh. Returns whether anything
    /// changed.
    pub fn on_states_deleted(&mut self, topics: &BTreeSet<Uuid>) -> bool {
        let before = (self.initialized.len(), self.initializing.len());
        self.initialized.retain(|topic, _| !topics.contains(topic));
        self.initializing.retain(|topic, _| !topics.contains(topic));
        let changed = before != (self.initialized.len(), self.initializing.len());
        if changed {
            self.changed();
        }
        changed
    }

    fn forget_initializing(&mut self, topic: Uuid, partitions: &BTreeSet<i32>) -> bool {
        let Some(init) = self.initializing.get_mut(&topic) else {
            return false;
        };
        let before = init.partitions.len();
        init.partitions.retain(|p| !partitions.contains(p));
        let changed = init.partitions.len() != before;
        if init.partitions.is_empty() {
            self.initializing.remove(&topic);
        }
        changed
    }

    /// The broker's topic metadata changed. Share-partition state of topics that no longer
    /// exist is forgotten (Kafka's `maybeCleanupShareGroupState`), and the group epoch is bumped
    /// when the subscribed topics changed (existence, ID or partition count); the new target
    /// assignment is computed by the next heartbeat. Returns whether the group epoch moved.
    pub fn on_topics_changed(&mut self, topics: &TopicsImage, _now_ms: i64) -> bool {
        let live: BTreeSet<Uuid> = topics.by_name.values().map(|(id, _)| *id).collect();
        let before = (self.initialized.len(), self.initializing.len());
        self.initialized.retain(|topic, _| live.contains(topic));
        self.initializing.retain(|topic, _| live.contains(topic));
        if before != (self.initialized.len(), self.initializing.len()) {
            self.changed();
        }
        if self.members.is_empty() {
            return false;
        }
        if self.recompute_subscribed_metadata(topics) {
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
        if let Some(old) = self.sessions.insert(member_id.to_string(), deadline) {
            self.timers.remove(&(old, member_id.to_string()));
        }
        self.timers.insert((deadline, member_id.to_string()));
    }

    /// The earliest session deadline, if any.
    pub fn next_deadline(&self) -> Option<i64> {
        self.timers.first().map(|(deadline, _)| *deadline)
    }

    /// Fires every session deadline at or before `now_ms`: those members are removed and the
    /// group epoch moves for each. Returns the removed member IDs.
    pub fn on_timer(
        &mut self,
        topics: &TopicsImage,
        config: &GroupConfig,
        now_ms: i64,
    ) -> Vec<String> {
        self.session_timeout_ms = config.share_session_timeout_ms;
        let mut removed = Vec::new();
        while let Some((deadline, member_id)) = self.timers.first().cloned() {
            if deadline > now_ms {
                break;
            }
            self.timers.remove(&(deadline, member_id.clone()));
            self.sessions.remove(&member_id);
            if self.members.contains_key(&member_id) {
                self.fence_member(&member_id, topics);
                removed.push(member_id);
            }
        }
        removed
    }

    // ---------------------------------------------------------------------------------------
    // Describe
    // ---------------------------------------------------------------------------------------

    /// ShareGroupDescribe for this group (Kafka's `ShareGroup.asDescribedGroup`): members in
    /// member ID order with their current assignment; partitions of topics the image no longer
    /// has are left out, as Kafka does. Authorized operations are left at Kafka's "not
    /// requested" default for the broker to fill in.
    pub fn describe(&self, topics: &TopicsImage) -> describe_response::DescribedGroup {
        let names: BTreeMap<Uuid, &str> = topics
            .by_name
            .iter()
            .map(|(name, (id, _))| (*id, name.as_str()))
            .collect();
        let members = self
            .members
            .values()
            .map(|m| describe_response::Member {
                member_id: ByteString::from(m.member_id.as_str()),
                rack_id: m.rack_id.as_deref().map(ByteString::from),
                member_epoch: m.member_epoch,
                client_id: ByteString::from(m.client_id.as_str()),
                client_host: ByteString::from(m.client_host.as_str()),
                subscribed_topic_names: m
                    .subscribed_topic_names
                    .iter()
                    .map(|n| ByteString::from(n.as_str()))
                    .collect(),
                assignment: describe_response::Assignment {
                    topic_partitions: m
                        .assigned
                        .iter()
                        .filter_map(|(topic, partitions)| {
                            names
                                .get(topic)
                                .map(|name| describe_response::TopicPartitions {
                                    topic_id: *topic,
                                    topic_name: ByteString::from(*name),
                                    partitions: partitions.iter().copied().collect(),
                                    ..Default::default()
                                })
                        })
                        .collect(),
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect();
        describe_response::DescribedGroup {
            group_id: ByteString::from(self.group_id.as_str()),
            group_state: ByteString::from_static(self.state_name()),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor_name: ByteString::from_static(assignor::SIMPLE),
            members,
            ..Default::default()
        }
    }
}
