//! Classic members inside a KIP-848 consumer group, the heart of the online migration between
//! group protocols (Kafka's `classicGroupJoinToConsumerGroup`, `classicGroupSyncToConsumerGroup`,
//! `classicGroupHeartbeatToConsumerGroup` and `classicGroupLeaveToConsumerGroup`).
//!
//! A member that joins with JoinGroup keeps speaking the classic protocol while the coordinator
//! assigns for it, as for every member of a consumer group:
//! - JoinGroup is answered at once. The member's subscription (the embedded consumer protocol)
//!   becomes its KIP-848 subscription; the partitions it reports owning tell what it released;
//!   the generation is its member epoch after reconciliation. It is never the leader.
//! - SyncGroup returns its assigned partitions in the consumer protocol.
//! - Heartbeat answers REBALANCE_IN_PROGRESS when it must rejoin: the group epoch moved, it must
//!   revoke, or partitions it waited for were released.
//! - Timers: its own session timeout, a join timeout once told to rejoin and a sync timeout once
//!   joined (each its rebalance timeout). A member that misses one is fenced.

use std::collections::BTreeMap;

use bytes::Bytes;
use skiff_protocol::generated::consumer_group_heartbeat_request::TopicPartitions as OwnedTopicPartitions;
use skiff_protocol::generated::heartbeat_request::HeartbeatRequest;
use skiff_protocol::generated::heartbeat_response::HeartbeatResponse;
use skiff_protocol::generated::join_group_request::JoinGroupRequest;
use skiff_protocol::generated::join_group_response::JoinGroupResponse;
use skiff_protocol::generated::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use skiff_protocol::generated::leave_group_response::{LeaveGroupResponse, MemberResponse};
use skiff_protocol::generated::sync_group_request::SyncGroupRequest;
use skiff_protocol::generated::sync_group_response::SyncGroupResponse;
use skiff_protocol::{ByteString, Uuid, error_codes};

use super::member::{Assignment, ClassicMemberMetadata, ClassicProtocol, ConsumerMember};
use super::{ClientInfo, ConsumerGroup, MemberPlan, TimerKind};
use crate::classic::{fit_join, fit_sync};
use crate::embedded::{self, CONSUMER_PROTOCOL_TYPE};
use crate::types::{GroupConfig, GroupError, TopicsImage};

/// JoinGroup v4+ (KIP-394): a new dynamic member must rejoin with a coordinator-chosen ID.
const MEMBER_ID_REQUIRED_SINCE: i16 = 4;

/// A classic member carried into a consumer group by an upgrade
/// ([`crate::migration::upgrade`]).
#[derive(Debug, Clone)]
pub struct ImportedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub classic: ClassicMemberMetadata,
    pub subscribed_topic_names: Vec<String>,
    pub rack_id: Option<String>,
    /// Its assignment in the classic group's last generation.
    pub assigned: Assignment,
}

fn error(code: i16, message: impl Into<String>) -> GroupError {
    GroupError::new(code, message)
}

/// `now + timeout`, at least 1 ms ahead so a timer never fires again at the same instant.
fn deadline(now_ms: i64, timeout_ms: i32) -> i64 {
    now_ms.saturating_add(i64::from(timeout_ms.max(1)))
}

impl ConsumerGroup {
    /// Kafka's `ConsumerGroup.fromClassicGroup`: a consumer group at the classic group's
    /// generation whose members are the classic members, each Stable at that epoch with its
    /// last classic assignment as both current and target assignment. Members of a classic group
    /// that was rebalancing are asked to rejoin by their next heartbeat (the upgrading member's
    /// join moves the group epoch). A partition two members claim stays with the first.
    pub fn from_classic(
        group_id: &str,
        generation: i32,
        members: Vec<ImportedMember>,
        topics: &TopicsImage,
        now_ms: i64,
    ) -> ConsumerGroup {
        let mut group = ConsumerGroup::new(group_id);
        group.group_epoch = generation;
        group.assignment_epoch = generation;
        for m in members {
            if group.members.contains_key(&m.member_id) {
                continue;
            }
            let seq = group.allocate_seq(&m.member_id);
            let mut member = ConsumerMember::new(m.member_id.clone(), seq);
            member.instance_id = m.instance_id;
            member.rack_id = m.rack_id;
            member.client_id = m.client_id;
            member.client_host = m.client_host;
            member.member_epoch = generation;
            member.previous_member_epoch = generation;
            member.rebalance_timeout_ms = m.rebalance_timeout_ms;
            member.subscribed_topic_names = m.subscribed_topic_names;
            let mut assigned = m.assigned;
            for (topic, partitions) in assigned.iter_mut() {
                partitions.retain(|p| {
                    let free = !group.owners.contains_key(&(*topic, *p));
                    if free {
                        group.owners.insert((*topic, *p), seq);
                    }
                    free
                });
            }
            assigned.retain(|_, partitions| !partitions.is_empty());
            member.assigned = assigned.clone();
            member.session_deadline_ms = deadline(now_ms, m.classic.session_timeout_ms);
            member.classic = Some(m.classic);
            group
                .timers
                .insert((member.session_deadline_ms, seq, TimerKind::Session));
            if let Some(instance) = &member.instance_id {
                group
                    .static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            group.target.insert(m.member_id.clone(), assigned);
            group.members.insert(m.member_id, member);
        }
        group.recompute_subscribed_metadata(topics);
        group.changed();
        group
    }

    /// Kafka's `supportsClassicProtocols`: a consumer-protocol JoinGroup whose protocols meet
    /// every other classic member's in at least one name.
    fn supports_classic_protocols(
        &self,
        member_id: &str,
        protocol_type: &str,
        names: &[&str],
    ) -> bool {
        protocol_type == CONSUMER_PROTOCOL_TYPE
            && !names.is_empty()
            && names.iter().any(|name| {
                self.members
                    .values()
                    .filter(|m| m.member_id != member_id)
                    .filter_map(|m| m.classic.as_ref())
                    .all(|c| c.protocols.iter().any(|p| p.name == *name))
            })
    }

    /// JoinGroup from a classic member (online migration), answered at once in the request's
    /// version. See the module documentation.
    #[allow(clippy::too_many_arguments)]
    pub fn classic_join(
        &mut self,
        request: &JoinGroupRequest,
        version: i16,
        client: ClientInfo<'_>,
        topics: &TopicsImage,
        config: &GroupConfig,
        now_ms: i64,
    ) -> JoinGroupResponse {
        let response = match self.try_classic_join(request, version, client, topics, config, now_ms)
        {
            Ok(response) => response,
            Err((member_id, e)) => JoinGroupResponse {
                error_code: e.code.code(),
                member_id: ByteString::from(member_id.as_str()),
                ..JoinGroupResponse::default()
            },
        };
        fit_join(response, version)
    }

    #[allow(clippy::too_many_arguments)]
    fn try_classic_join(
        &mut self,
        request: &JoinGroupRequest,
        version: i16,
        client: ClientInfo<'_>,
        topics: &TopicsImage,
        config: &GroupConfig,
        now_ms: i64,
    ) -> Result<JoinGroupResponse, (String, GroupError)> {
        let requested: &str = &request.member_id;
        let fail = |e: GroupError| (requested.to_string(), e);
        let session = i64::from(request.session_timeout_ms);
        if session < config.classic_min_session_timeout_ms
            || session > config.classic_max_session_timeout_ms
        {
            return Err(fail(error(
                error_codes::INVALID_SESSION_TIMEOUT,
                "The session timeout is not within the broker's allowed range.",
            )));
        }
        let unknown = requested.is_empty();
        let member_id = if unknown {
            Uuid::random()
                .map_err(|e| fail(error(error_codes::UNKNOWN_SERVER_ERROR, e.to_string())))?
                .to_string()
        } else {
            requested.to_string()
        };
        if self.members.len() >= config.consumer_max_size && !self.members.contains_key(&member_id)
        {
            return Err(fail(error(
                error_codes::GROUP_MAX_SIZE_REACHED,
                format!(
                    "The consumer group has reached its maximum capacity of {} members.",
                    config.consumer_max_size
                ),
            )));
        }
        let names: Vec<&str> = request.protocols.iter().map(|p| &*p.name).collect();
        if !self.supports_classic_protocols(&member_id, &request.protocol_type, &names) {
            return Err(fail(error(
                error_codes::INCONSISTENT_GROUP_PROTOCOL,
                format!("Member {member_id}'s protocols are not supported."),
            )));
        }
        let instance_id = if version >= 5 {
            request.group_instance_id.as_deref()
        } else {
            None
        };
        if unknown && instance_id.is_none() && version >= MEMBER_ID_REQUIRED_SINCE {
            return Ok(JoinGroupResponse {
                error_code: error_codes::MEMBER_ID_REQUIRED,
                member_id: ByteString::from(member_id.as_str()),
                ..JoinGroupResponse::default()
            });
        }
        let protocols: Vec<ClassicProtocol> = request
            .protocols
            .iter()
            .map(|p| ClassicProtocol {
                name: p.name.to_string(),
                metadata: Bytes::copy_from_slice(&p.metadata),
            })
            .collect();
        let Some(first) = protocols.first() else {
            return Err(fail(error(
                error_codes::INCONSISTENT_GROUP_PROTOCOL,
                "JoinGroup without protocols.",
            )));
        };
        let subscription = embedded::decode_subscription(&first.metadata).map_err(&fail)?;
        let plan = self
            .plan_classic_member(&member_id, instance_id, unknown)
            .map_err(&fail)?;

        // From here on the request is accepted and the group changes.
        let mut persist = self.apply_member_plan(plan, &member_id);
        let Some(member) = self.members.get_mut(&member_id) else {
            return Err(fail(error(
                error_codes::UNKNOWN_SERVER_ERROR,
                "member vanished while handling its join",
            )));
        };
        if let Some(instance) = instance_id
            && member.instance_id.as_deref() != Some(instance)
        {
            member.instance_id = Some(instance.to_string());
            self.static_members
                .insert(instance.to_string(), member_id.clone());
            persist = true;
        }
        let Some(member) = self.members.get_mut(&member_id) else {
            return Err(fail(error(
                error_codes::UNKNOWN_SERVER_ERROR,
                "member vanished while handling its join",
            )));
        };
        let rebalance_timeout_ms = if version == 0 {
            request.session_timeout_ms
        } else {
            request.rebalance_timeout_ms
        };
        let classic = ClassicMemberMetadata {
            session_timeout_ms: request.session_timeout_ms,
            protocols,
        };
        let protocol_name = classic.protocol_name().to_string();
        let changes = [
            member.rack_id != subscription.rack_id,
            member.rebalance_timeout_ms != rebalance_timeout_ms,
            member.server_assignor.is_some(),
            member.client_id != client.client_id,
            member.client_host != client.client_host,
            member.classic.as_ref() != Some(&classic),
        ];
        if changes.contains(&true) {
            persist = true;
        }
        member.rack_id = subscription.rack_id.clone();
        member.rebalance_timeout_ms = rebalance_timeout_ms;
        member.server_assignor = None;
        member.client_id = client.client_id.to_string();
        member.client_host = client.client_host.to_string();
        member.classic = Some(classic);
        let mut subscription_changed = false;
        if member.subscribed_topic_names != subscription.topics
            || member.subscribed_topic_regex.is_some()
        {
            member.subscribed_topic_names = subscription.topics.clone();
            member.subscribed_topic_regex = None;
            subscription_changed = true;
        }

        if subscription_changed {
            persist = true;
        }
        self.advance_epochs(subscription_changed, false, topics, config);
        // The partitions the member reports owning, by ID (topics that no longer exist own
        // nothing).
        let owned: Vec<OwnedTopicPartitions> = subscription
            .owned
            .iter()
            .filter_map(|(name, partitions)| {
                topics
                    .by_name
                    .get(name)
                    .map(|(id, _)| OwnedTopicPartitions {
                        topic_id: *id,
                        partitions: partitions.clone(),
                        ..Default::default()
                    })
            })
            .collect();
        if self
            .reconcile_member(
                &member_id,
                topics,
                subscription_changed,
                Some(&owned),
                now_ms,
            )
            .is_some()
        {
            persist = true;
        }
        if persist {
            self.changed();
        }
        self.set_session_timer(&member_id, deadline(now_ms, request.session_timeout_ms));
        self.set_classic_timer(&member_id, TimerKind::ClassicJoin, None);
        self.set_classic_timer(
            &member_id,
            TimerKind::ClassicSync,
            Some(deadline(now_ms, rebalance_timeout_ms)),
        );
        let generation_id = self.members.get(&member_id).map_or(0, |m| m.member_epoch);
        Ok(JoinGroupResponse {
            error_code: error_codes::NONE,
            generation_id,
            protocol_type: Some(ByteString::from_static(CONSUMER_PROTOCOL_TYPE)),
            protocol_name: Some(ByteString::from(protocol_name)),
            leader: ByteString::from_static(""),
            member_id: ByteString::from(member_id.as_str()),
            ..JoinGroupResponse::default()
        })
    }

    /// How a classic JoinGroup finds its member (Kafka's `getOrMaybeSubscribe...Member` with
    /// the classic protocol): a dynamic member is created when unknown; a static member with an
    /// unknown member ID replaces the instance's current member, and a known one must match it.
    fn plan_classic_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        unknown: bool,
    ) -> Result<MemberPlan, GroupError> {
        let exists = self.members.contains_key(member_id);
        let Some(instance) = instance_id else {
            return Ok(if exists {
                MemberPlan::Existing
            } else {
                MemberPlan::New
            });
        };
        match self.static_members.get(instance) {
            None if exists => Ok(MemberPlan::Existing),
            None => Ok(MemberPlan::New),
            Some(current) if current == member_id => Ok(MemberPlan::Existing),
            Some(current) if unknown => Ok(MemberPlan::ReplaceStatic {
                old_member_id: current.clone(),
            }),
            Some(current) => Err(error(
                error_codes::FENCED_INSTANCE_ID,
                format!(
                    "Static member {member_id} with instance id {instance} was fenced by member {current}."
                ),
            )),
        }
    }

    /// Kafka's `validateConsumerGroupMember` plus `throwIfMemberDoesNotUseClassicProtocol`.
    fn classic_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<&ConsumerMember, GroupError> {
        let member = match instance_id {
            None => self.members.get(member_id),
            Some(instance) => {
                let current = self.static_members.get(instance).ok_or_else(|| {
                    error(
                        error_codes::UNKNOWN_MEMBER_ID,
                        format!(
                            "Member with instance id {instance} is not a member of group {}.",
                            self.group_id
                        ),
                    )
                })?;
                if current != member_id {
                    return Err(error(
                        error_codes::FENCED_INSTANCE_ID,
                        format!(
                            "Static member {member_id} with instance id {instance} was fenced by member {current}."
                        ),
                    ));
                }
                self.members.get(current)
            }
        };
        match member {
            Some(m) if m.classic.is_some() => Ok(m),
            Some(_) => Err(error(
                error_codes::UNKNOWN_MEMBER_ID,
                format!("Member {member_id} does not use the classic protocol."),
            )),
            None => Err(error(
                error_codes::UNKNOWN_MEMBER_ID,
                format!(
                    "Member {member_id} is not a member of group {}.",
                    self.group_id
                ),
            )),
        }
    }

    /// Whether the member waits for a partition of its target another member still owns
    /// (Kafka's `waitingOnUnreleasedPartition`).
    fn waiting_on_unreleased(&self, member: &ConsumerMember) -> bool {
        if member.state != super::MemberState::UnreleasedPartitions {
            return false;
        }
        let Some(target) = self.target.get(&member.member_id) else {
            return false;
        };
        target.iter().any(|(topic, partitions)| {
            let assigned = member.assigned.get(topic);
            partitions.iter().any(|p| {
                !assigned.is_some_and(|a| a.contains(p))
                    && self
                        .owners
                        .get(&(*topic, *p))
                        .is_some_and(|owner| *owner != member.seq)
            })
        })
    }

    /// Arms (or, with `None`, cancels) a classic member's join or sync timer.
    fn set_classic_timer(&mut self, member_id: &str, kind: TimerKind, at: Option<i64>) {
        let Some(member) = self.members.get_mut(member_id) else {
            return;
        };
        let slot = match kind {
            TimerKind::ClassicJoin => &mut member.join_deadline,
            TimerKind::ClassicSync => &mut member.sync_deadline,
            TimerKind::Session | TimerKind::Rebalance => return,
        };
        let old = std::mem::replace(slot, at);
        let seq = member.seq;
        if let Some(old) = old {
            self.timers.remove(&(old, seq, kind));
        }
        if let Some(at) = at {
            self.timers.insert((at, seq, kind));
        }
    }

    /// Tells a classic member to rejoin, arming its join timeout unless one runs already.
    fn ask_to_rejoin(&mut self, member_id: &str, now_ms: i64) -> GroupError {
        if let Some(member) = self.members.get(member_id)
            && member.join_deadline.is_none()
        {
            let at = deadline(now_ms, member.rebalance_timeout_ms);
            self.set_classic_timer(member_id, TimerKind::ClassicJoin, Some(at));
        }
        error(
            error_codes::REBALANCE_IN_PROGRESS,
            format!(
                "A new rebalance is triggered in group {} and member {member_id} should rejoin to catch up.",
                self.group_id
            ),
        )
    }

    fn restart_session(&mut self, member_id: &str, now_ms: i64) {
        let timeout = self
            .members
            .get(member_id)
            .and_then(|m| m.classic.as_ref())
            .map(|c| c.session_timeout_ms);
        if let Some(timeout) = timeout {
            self.set_session_timer(member_id, deadline(now_ms, timeout));
        }
    }

    /// SyncGroup from a classic member: its assigned partitions, answered at once.
    pub fn classic_sync(
        &mut self,
        request: &SyncGroupRequest,
        version: i16,
        topics: &TopicsImage,
        now_ms: i64,
    ) -> SyncGroupResponse {
        let response = match self.try_classic_sync(request, version, topics, now_ms) {
            Ok(response) => response,
            Err(e) => SyncGroupResponse {
                error_code: e.code.code(),
                ..SyncGroupResponse::default()
            },
        };
        fit_sync(response, version)
    }

    fn try_classic_sync(
        &mut self,
        request: &SyncGroupRequest,
        version: i16,
        topics: &TopicsImage,
        now_ms: i64,
    ) -> Result<SyncGroupResponse, GroupError> {
        let member_id: &str = &request.member_id;
        let instance_id = if version >= 3 {
            request.group_instance_id.as_deref()
        } else {
            None
        };
        let member = self.classic_member(member_id, instance_id)?;
        let member_id = member.member_id.clone();
        if member.member_epoch != request.generation_id {
            return Err(error(
                error_codes::ILLEGAL_GENERATION,
                format!(
                    "The request generation id {} is not equal to the member epoch {} of member {member_id}.",
                    request.generation_id, member.member_epoch
                ),
            ));
        }
        let classic = member.classic.as_ref();
        let protocol_name = classic
            .map_or("", ClassicMemberMetadata::protocol_name)
            .to_string();
        if version >= 5 {
            let type_differs = request
                .protocol_type
                .as_deref()
                .is_some_and(|t| t != CONSUMER_PROTOCOL_TYPE);
            let name_differs = request
                .protocol_name
                .as_deref()
                .is_some_and(|n| n != protocol_name);
            if type_differs || name_differs {
                return Err(error(
                    error_codes::INCONSISTENT_GROUP_PROTOCOL,
                    "The protocol type or name differs from the join response's.",
                ));
            }
        }
        let rejoin = self.group_epoch > member.member_epoch
            && member.state != super::MemberState::UnrevokedPartitions;
        let assignment = embedded::encode_assignment(
            embedded::metadata_version(classic.map_or(&[][..], ClassicMemberMetadata::metadata)),
            &assignment_by_name(&member.assigned, topics),
        );
        if rejoin {
            return Err(self.ask_to_rejoin(&member_id, now_ms));
        }
        self.set_classic_timer(&member_id, TimerKind::ClassicSync, None);
        self.restart_session(&member_id, now_ms);
        Ok(SyncGroupResponse {
            error_code: error_codes::NONE,
            protocol_type: Some(ByteString::from_static(CONSUMER_PROTOCOL_TYPE)),
            protocol_name: Some(ByteString::from(protocol_name)),
            assignment,
            ..SyncGroupResponse::default()
        })
    }

    /// Heartbeat from a classic member: REBALANCE_IN_PROGRESS when it must rejoin (the group
    /// epoch moved past it, it must revoke, or the partitions it waited for are free).
    pub fn classic_heartbeat(
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
        let code = match self.classic_member(&request.member_id, instance_id) {
            Err(e) => e.code.code(),
            Ok(member) if member.member_epoch != request.generation_id => {
                error_codes::ILLEGAL_GENERATION
            }
            Ok(member) => {
                let member_id = member.member_id.clone();
                let rejoin = member.member_epoch < self.group_epoch
                    || member.state == super::MemberState::UnrevokedPartitions
                    || (member.state == super::MemberState::UnreleasedPartitions
                        && !self.waiting_on_unreleased(member));
                self.restart_session(&member_id, now_ms);
                if rejoin {
                    self.ask_to_rejoin(&member_id, now_ms).code.code()
                } else {
                    error_codes::NONE
                }
            }
        };
        HeartbeatResponse {
            error_code: code,
            ..HeartbeatResponse::default()
        }
    }

    /// LeaveGroup on a consumer group (Kafka's `classicGroupLeaveToConsumerGroup`): each named
    /// member (by member ID, or by instance ID for an admin removal) is fenced; the last
    /// KIP-848 member leaving may turn the group classic ([`ConsumerGroup::take_downgrade`]).
    pub fn classic_leave(
        &mut self,
        request: &LeaveGroupRequest,
        version: i16,
        topics: &TopicsImage,
        config: &GroupConfig,
    ) -> LeaveGroupResponse {
        let identities: Vec<MemberIdentity> = if version < 3 {
            vec![MemberIdentity {
                member_id: request.member_id.clone(),
                ..MemberIdentity::default()
            }]
        } else {
            request.members.clone()
        };
        let mut responses = Vec::with_capacity(identities.len());
        let mut leaving: Vec<String> = Vec::new();
        for identity in &identities {
            let member_id: &str = &identity.member_id;
            let found = match identity.group_instance_id.as_deref() {
                None => self.members.get(member_id).map(|m| m.member_id.clone()),
                Some(instance) => self.static_members.get(instance).cloned(),
            };
            let code = match (found, identity.group_instance_id.as_deref()) {
                (None, _) => error_codes::UNKNOWN_MEMBER_ID,
                (Some(current), Some(_)) if !member_id.is_empty() && current != member_id => {
                    error_codes::FENCED_INSTANCE_ID
                }
                (Some(current), _) => {
                    if !leaving.contains(&current) {
                        leaving.push(current);
                    }
                    error_codes::NONE
                }
            };
            responses.push(MemberResponse {
                member_id: identity.member_id.clone(),
                group_instance_id: identity.group_instance_id.clone(),
                error_code: code,
                ..MemberResponse::default()
            });
        }
        self.fence_members(&leaving, topics, config);
        if version < 3 {
            LeaveGroupResponse {
                error_code: responses
                    .iter()
                    .map(|r| r.error_code)
                    .find(|&c| c != error_codes::NONE)
                    .unwrap_or(error_codes::NONE),
                ..LeaveGroupResponse::default()
            }
        } else {
            LeaveGroupResponse {
                members: responses,
                ..LeaveGroupResponse::default()
            }
        }
    }
}

/// An assignment by topic name (topics the image no longer has are left out).
pub(crate) fn assignment_by_name(
    assignment: &Assignment,
    topics: &TopicsImage,
) -> BTreeMap<String, Vec<i32>> {
    assignment
        .iter()
        .filter_map(|(topic, partitions)| {
            topics
                .by_id(*topic)
                .map(|(name, _)| (name.to_string(), partitions.iter().copied().collect()))
        })
        .collect()
}
