//! The persistent part of a share group, as a serde value the broker writes whenever
//! [`ShareGroup::change_counter`] moves, and restores on start. It holds what Kafka keeps in
//! its share group records: the group epoch (`ShareGroupMetadata`), each member's subscription
//! (`ShareGroupMemberMetadata`) and current assignment with its epochs
//! (`ShareGroupCurrentMemberAssignment`), the target assignment and its epoch
//! (`ShareGroupTargetAssignmentMember`/`Metadata`), and the initialized and initializing share
//! partitions (`ShareGroupStatePartitionMetadata`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::member::ShareMember;
use super::{Assignment, Initializing, ShareGroup, sorted_names};
use crate::consumer::{
    SubscribedTopicSnapshot, TopicAssignmentSnapshot, assignment_from_snapshot,
    assignment_to_snapshot, from_halves, to_halves,
};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareMemberSnapshot {
    pub member_id: String,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub subscribed_topic_names: Vec<String>,
    pub assigned: Vec<TopicAssignmentSnapshot>,
    pub target: Vec<TopicAssignmentSnapshot>,
}

/// Everything about a share group that must survive a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareGroupSnapshot {
    pub group_id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: Vec<ShareMemberSnapshot>,
    pub subscribed_topics: Vec<SubscribedTopicSnapshot>,
    /// Share partitions whose state is initialized.
    pub initialized: Vec<TopicAssignmentSnapshot>,
    /// Share partitions asked to be initialized and not yet answered.
    pub initializing: Vec<TopicAssignmentSnapshot>,
    pub session_timeout_ms: i64,
    pub change_counter: u64,
}

impl ShareGroup {
    pub fn snapshot(&self) -> ShareGroupSnapshot {
        ShareGroupSnapshot {
            group_id: self.group_id.clone(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            members: self
                .members
                .values()
                .map(|m| ShareMemberSnapshot {
                    member_id: m.member_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    member_epoch: m.member_epoch,
                    previous_member_epoch: m.previous_member_epoch,
                    subscribed_topic_names: m.subscribed_topic_names.clone(),
                    assigned: assignment_to_snapshot(&m.assigned),
                    target: self
                        .target
                        .get(&m.member_id)
                        .map(assignment_to_snapshot)
                        .unwrap_or_default(),
                })
                .collect(),
            subscribed_topics: self
                .subscribed_metadata
                .iter()
                .map(|(name, metadata)| SubscribedTopicSnapshot {
                    name: name.clone(),
                    metadata: metadata.map(|(id, n)| (to_halves(id), n)),
                })
                .collect(),
            initialized: assignment_to_snapshot(&self.initialized),
            initializing: assignment_to_snapshot(&self.initializing_partitions()),
            session_timeout_ms: self.session_timeout_ms,
            change_counter: self.change_counter,
        }
    }

    /// Rebuilds a group from a snapshot. Every member gets a fresh session (`now_ms` + the
    /// session timeout in effect when the snapshot was taken), and initialization requests
    /// still unanswered count as asked at `now_ms` (Kafka stamps them with the replay time).
    /// A member ID listed twice in a damaged snapshot keeps its first entry.
    pub fn restore(snapshot: ShareGroupSnapshot, now_ms: i64) -> ShareGroup {
        let mut group = ShareGroup::new(snapshot.group_id);
        group.group_epoch = snapshot.group_epoch;
        group.assignment_epoch = snapshot.assignment_epoch;
        group.subscribed_metadata = snapshot
            .subscribed_topics
            .into_iter()
            .map(|t| (t.name, t.metadata.map(|(id, n)| (from_halves(id), n))))
            .collect();
        group.initialized = assignment_from_snapshot(&snapshot.initialized);
        group.initializing = assignment_from_snapshot(&snapshot.initializing)
            .into_iter()
            .map(|(topic, partitions)| {
                (
                    topic,
                    Initializing {
                        partitions,
                        requested_at_ms: now_ms,
                    },
                )
            })
            .collect::<BTreeMap<_, _>>();
        group.session_timeout_ms = snapshot.session_timeout_ms;
        group.change_counter = snapshot.change_counter;
        for m in snapshot.members {
            if group.members.contains_key(&m.member_id) {
                continue;
            }
            let mut member = ShareMember::new(m.member_id.clone());
            member.rack_id = m.rack_id;
            member.client_id = m.client_id;
            member.client_host = m.client_host;
            member.member_epoch = m.member_epoch;
            member.previous_member_epoch = m.previous_member_epoch;
            member.subscribed_topic_names = sorted_names(&m.subscribed_topic_names);
            member.assigned = assignment_from_snapshot(&m.assigned);
            let target: Assignment = assignment_from_snapshot(&m.target);
            group.target.insert(m.member_id.clone(), target);
            let deadline = now_ms.saturating_add(group.session_timeout_ms);
            group.sessions.insert(m.member_id.clone(), deadline);
            group.timers.insert((deadline, m.member_id.clone()));
            group.members.insert(m.member_id, member);
        }
        group
    }
}
