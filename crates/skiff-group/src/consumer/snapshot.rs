//! The persistent part of a consumer group, as a serde value the broker writes to its internal
//! log whenever [`ConsumerGroup::change_counter`] moves, and restores on start.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use skiff_protocol::Uuid;

use super::member::{
    Assignment, ClassicMemberMetadata, ClassicProtocol, ConsumerMember, MemberState,
};
use super::{ConsumerGroup, TimerKind};
use crate::classic::ProtocolSnapshot;

/// A topic ID as Kafka's two 64-bit halves (serde has no u128 in every format).
pub(crate) type UuidHalves = [u64; 2];

pub(crate) fn to_halves(id: Uuid) -> UuidHalves {
    [id.most_significant_bits(), id.least_significant_bits()]
}

pub(crate) fn from_halves(halves: UuidHalves) -> Uuid {
    Uuid::from_halves(halves[0], halves[1])
}

/// Partitions of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicAssignmentSnapshot {
    pub topic_id: UuidHalves,
    pub partitions: Vec<i32>,
}

pub(crate) fn assignment_to_snapshot(assignment: &Assignment) -> Vec<TopicAssignmentSnapshot> {
    assignment
        .iter()
        .map(|(topic, partitions)| TopicAssignmentSnapshot {
            topic_id: to_halves(*topic),
            partitions: partitions.iter().copied().collect(),
        })
        .collect()
}

pub(crate) fn assignment_from_snapshot(topics: &[TopicAssignmentSnapshot]) -> Assignment {
    let mut assignment = Assignment::new();
    for topic in topics {
        if !topic.partitions.is_empty() {
            assignment
                .entry(from_halves(topic.topic_id))
                .or_default()
                .extend(topic.partitions.iter().copied());
        }
    }
    assignment
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberSnapshot {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub assigned: Vec<TopicAssignmentSnapshot>,
    pub pending_revocation: Vec<TopicAssignmentSnapshot>,
    pub target: Vec<TopicAssignmentSnapshot>,
    /// A classic member's protocol metadata (online migration); absent for KIP-848 members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classic: Option<ClassicMemberMetadataSnapshot>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassicMemberMetadataSnapshot {
    pub session_timeout_ms: i32,
    pub protocols: Vec<ProtocolSnapshot>,
}

impl ClassicMemberMetadataSnapshot {
    pub(crate) fn of(meta: &ClassicMemberMetadata) -> Self {
        ClassicMemberMetadataSnapshot {
            session_timeout_ms: meta.session_timeout_ms,
            protocols: meta
                .protocols
                .iter()
                .map(|p| ProtocolSnapshot {
                    name: p.name.clone(),
                    metadata: p.metadata.clone(),
                })
                .collect(),
        }
    }

    /// `None` for a damaged snapshot without protocols (the member then counts as KIP-848).
    fn restore(self) -> Option<ClassicMemberMetadata> {
        (!self.protocols.is_empty()).then(|| ClassicMemberMetadata {
            session_timeout_ms: self.session_timeout_ms,
            protocols: self
                .protocols
                .into_iter()
                .map(|p| ClassicProtocol {
                    name: p.name,
                    metadata: p.metadata,
                })
                .collect(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscribedTopicSnapshot {
    pub name: String,
    /// (topic ID, partition count), `None` when the topic did not exist.
    pub metadata: Option<(UuidHalves, i32)>,
}

/// Everything about a consumer group that must survive a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroupSnapshot {
    pub group_id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: Vec<MemberSnapshot>,
    pub resolved_regex: BTreeMap<String, BTreeSet<String>>,
    pub subscribed_topics: Vec<SubscribedTopicSnapshot>,
    pub session_timeout_ms: i64,
    pub change_counter: u64,
}

impl ConsumerGroup {
    pub fn snapshot(&self) -> ConsumerGroupSnapshot {
        ConsumerGroupSnapshot {
            group_id: self.group_id.clone(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            members: self
                .members
                .values()
                .map(|m| MemberSnapshot {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    member_epoch: m.member_epoch,
                    previous_member_epoch: m.previous_member_epoch,
                    state: m.state,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    subscribed_topic_names: m.subscribed_topic_names.clone(),
                    subscribed_topic_regex: m.subscribed_topic_regex.clone(),
                    server_assignor: m.server_assignor.clone(),
                    assigned: assignment_to_snapshot(&m.assigned),
                    pending_revocation: assignment_to_snapshot(&m.pending_revocation),
                    target: self
                        .target
                        .get(&m.member_id)
                        .map(assignment_to_snapshot)
                        .unwrap_or_default(),
                    classic: m.classic.as_ref().map(ClassicMemberMetadataSnapshot::of),
                })
                .collect(),
            resolved_regex: self.resolved_regex.clone(),
            subscribed_topics: self
                .subscribed_metadata
                .iter()
                .map(|(name, metadata)| SubscribedTopicSnapshot {
                    name: name.clone(),
                    metadata: metadata.map(|(id, n)| (to_halves(id), n)),
                })
                .collect(),
            session_timeout_ms: self.session_timeout_ms,
            change_counter: self.change_counter,
        }
    }

    /// Rebuilds a group from a snapshot. Every member gets a fresh session (`now_ms` + the
    /// session timeout in effect when the snapshot was taken); members that were revoking get a
    /// fresh rebalance timeout. A partition claimed by two members in a damaged snapshot stays
    /// with the first one (and is dropped from the second).
    pub fn restore(snapshot: ConsumerGroupSnapshot, now_ms: i64) -> ConsumerGroup {
        let mut group = ConsumerGroup::new(snapshot.group_id);
        group.group_epoch = snapshot.group_epoch;
        group.assignment_epoch = snapshot.assignment_epoch;
        group.resolved_regex = snapshot.resolved_regex;
        group.subscribed_metadata = snapshot
            .subscribed_topics
            .into_iter()
            .map(|t| (t.name, t.metadata.map(|(id, n)| (from_halves(id), n))))
            .collect();
        group.session_timeout_ms = snapshot.session_timeout_ms;
        group.change_counter = snapshot.change_counter;
        for pattern in group.resolved_regex.keys() {
            if let Ok(regex) = super::compile_regex(pattern) {
                group.compiled.insert(pattern.clone(), regex);
            }
        }
        for m in snapshot.members {
            if group.members.contains_key(&m.member_id) {
                continue;
            }
            let seq = group.allocate_seq(&m.member_id);
            let mut member = ConsumerMember::new(m.member_id.clone(), seq);
            member.instance_id = m.instance_id;
            member.rack_id = m.rack_id;
            member.client_id = m.client_id;
            member.client_host = m.client_host;
            member.member_epoch = m.member_epoch;
            member.previous_member_epoch = m.previous_member_epoch;
            member.state = m.state;
            member.rebalance_timeout_ms = m.rebalance_timeout_ms;
            member.subscribed_topic_names = m.subscribed_topic_names;
            member.subscribed_topic_regex = m.subscribed_topic_regex.filter(|r| !r.is_empty());
            member.server_assignor = m.server_assignor;
            member.assigned = assignment_from_snapshot(&m.assigned);
            member.pending_revocation = assignment_from_snapshot(&m.pending_revocation);
            member.classic = m.classic.and_then(ClassicMemberMetadataSnapshot::restore);
            for set in [&mut member.assigned, &mut member.pending_revocation] {
                for (topic, partitions) in set.iter_mut() {
                    partitions.retain(|p| match group.owners.get(&(*topic, *p)) {
                        Some(_) => false,
                        None => {
                            group.owners.insert((*topic, *p), seq);
                            true
                        }
                    });
                }
                set.retain(|_, partitions| !partitions.is_empty());
            }
            if let Some(instance) = &member.instance_id {
                group
                    .static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            member.session_deadline_ms = now_ms.saturating_add(match &member.classic {
                Some(classic) => i64::from(classic.session_timeout_ms),
                None => group.session_timeout_ms,
            });
            group
                .timers
                .insert((member.session_deadline_ms, seq, TimerKind::Session));
            if member.state == MemberState::UnrevokedPartitions && member.classic.is_none() {
                let deadline = now_ms.saturating_add(i64::from(member.rebalance_timeout_ms.max(0)));
                member.rebalance_deadline = Some((deadline, member.member_epoch));
                group.timers.insert((deadline, seq, TimerKind::Rebalance));
            }
            group
                .target
                .insert(m.member_id.clone(), assignment_from_snapshot(&m.target));
            group.members.insert(m.member_id, member);
        }
        group
    }
}
