//! One member of a KIP-848 consumer group and the assignment type shared by the group, the
//! reconciliation and the assignors.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use skiff_protocol::Uuid;

/// Partitions by topic ID. Empty partition sets are never stored.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// Where a member stands in its reconciliation toward the target assignment (Kafka's
/// `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemberState {
    /// The member owns its whole assignment at its epoch.
    Stable,
    /// The member must give up some partitions before it may move to the next epoch.
    UnrevokedPartitions,
    /// The member is at the target epoch but waits for partitions other members still own.
    UnreleasedPartitions,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "stable",
            MemberState::UnrevokedPartitions => "unrevoked_partitions",
            MemberState::UnreleasedPartitions => "unreleased_partitions",
        }
    }
}

/// One protocol a classic member offered in its JoinGroup (name and opaque metadata, in the
/// member's order of preference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicProtocol {
    pub name: String,
    pub metadata: Bytes,
}

/// What a member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a
/// consumer group needs beyond a KIP-848 member (Kafka's `ClassicMemberMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMemberMetadata {
    pub session_timeout_ms: i32,
    /// Never empty: JoinGroup without protocols is refused.
    pub protocols: Vec<ClassicProtocol>,
}

impl ClassicMemberMetadata {
    /// The member's preferred protocol: the one its JoinGroup and SyncGroup answers name.
    pub fn protocol_name(&self) -> &str {
        self.protocols.first().map_or("", |p| p.name.as_str())
    }

    /// The metadata of the preferred protocol (the member's consumer subscription).
    pub fn metadata(&self) -> &[u8] {
        self.protocols.first().map_or(&[][..], |p| &p.metadata[..])
    }
}

/// A consumer group member: its subscription, its epochs and its current assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMember {
    pub(crate) member_id: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) rack_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) member_epoch: i32,
    pub(crate) previous_member_epoch: i32,
    pub(crate) state: MemberState,
    pub(crate) rebalance_timeout_ms: i32,
    /// Sorted and deduplicated.
    pub(crate) subscribed_topic_names: Vec<String>,
    /// Never `Some("")`: an empty regex means "no regex".
    pub(crate) subscribed_topic_regex: Option<String>,
    pub(crate) server_assignor: Option<String>,
    /// Partitions the member may use now.
    pub(crate) assigned: Assignment,
    /// Partitions the member must give up (it still owns them).
    pub(crate) pending_revocation: Assignment,
    /// Set for a classic member (online migration), `None` for a KIP-848 member.
    pub(crate) classic: Option<ClassicMemberMetadata>,
    // Volatile state, not persisted.
    /// Internal handle for timers and partition ownership.
    pub(crate) seq: u64,
    pub(crate) session_deadline_ms: i64,
    /// (deadline, member epoch the member must leave before it).
    pub(crate) rebalance_deadline: Option<(i64, i32)>,
    /// A classic member told to rejoin must do so by then.
    pub(crate) join_deadline: Option<i64>,
    /// A classic member that joined must send SyncGroup by then.
    pub(crate) sync_deadline: Option<i64>,
}

impl ConsumerMember {
    pub(crate) fn new(member_id: String, seq: u64) -> Self {
        ConsumerMember {
            member_id,
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            member_epoch: 0,
            previous_member_epoch: 0,
            state: MemberState::Stable,
            rebalance_timeout_ms: -1,
            subscribed_topic_names: Vec::new(),
            subscribed_topic_regex: None,
            server_assignor: None,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
            classic: None,
            seq,
            session_deadline_ms: i64::MAX,
            rebalance_deadline: None,
            join_deadline: None,
            sync_deadline: None,
        }
    }

    pub fn member_id(&self) -> &str {
        &self.member_id
    }
    pub fn instance_id(&self) -> Option<&str> {
        self.instance_id.as_deref()
    }
    pub fn rack_id(&self) -> Option<&str> {
        self.rack_id.as_deref()
    }
    pub fn client_id(&self) -> &str {
        &self.client_id
    }
    pub fn client_host(&self) -> &str {
        &self.client_host
    }
    pub fn member_epoch(&self) -> i32 {
        self.member_epoch
    }
    pub fn previous_member_epoch(&self) -> i32 {
        self.previous_member_epoch
    }
    pub fn state(&self) -> MemberState {
        self.state
    }
    pub fn rebalance_timeout_ms(&self) -> i32 {
        self.rebalance_timeout_ms
    }
    pub fn subscribed_topic_names(&self) -> &[String] {
        &self.subscribed_topic_names
    }
    pub fn subscribed_topic_regex(&self) -> Option<&str> {
        self.subscribed_topic_regex.as_deref()
    }
    pub fn server_assignor(&self) -> Option<&str> {
        self.server_assignor.as_deref()
    }
    /// The partitions the member may consume now.
    pub fn assigned_partitions(&self) -> &Assignment {
        &self.assigned
    }
    /// The partitions the member was asked to revoke and has not yet released.
    pub fn partitions_pending_revocation(&self) -> &Assignment {
        &self.pending_revocation
    }

    /// The classic protocol metadata of a member that joined with JoinGroup.
    pub fn classic(&self) -> Option<&ClassicMemberMetadata> {
        self.classic.as_ref()
    }
    /// Whether the member speaks the classic protocol (Kafka's `useClassicProtocol`).
    pub fn uses_classic_protocol(&self) -> bool {
        self.classic.is_some()
    }

    /// Kafka's `isReconciledTo`.
    pub fn is_reconciled_to(&self, target_assignment_epoch: i32) -> bool {
        self.state == MemberState::Stable && self.member_epoch == target_assignment_epoch
    }

    /// Every partition the member owns: assigned plus pending revocation.
    pub(crate) fn owned_partitions(&self) -> impl Iterator<Item = (Uuid, i32)> + '_ {
        iter_assignment(&self.assigned).chain(iter_assignment(&self.pending_revocation))
    }
}

pub(crate) fn iter_assignment(assignment: &Assignment) -> impl Iterator<Item = (Uuid, i32)> + '_ {
    assignment
        .iter()
        .flat_map(|(topic, partitions)| partitions.iter().map(move |p| (*topic, *p)))
}

pub(crate) fn assignment_size(assignment: &Assignment) -> usize {
    assignment.values().map(BTreeSet::len).sum()
}
