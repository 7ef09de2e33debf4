//! One member of a KIP-932 share group (Kafka's `ShareGroupMember`).

use crate::consumer::Assignment;

/// A share group member: who it is, what it subscribes to, its epochs and its assignment.
///
/// Unlike a consumer group member, a share group member has no reconciliation states: its
/// partitions may be shared with other members, so nothing has to be revoked before another
/// member gets them, and the member moves straight to its target assignment (Kafka's
/// `ShareGroupAssignmentBuilder` always leaves it `STABLE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMember {
    pub(crate) member_id: String,
    pub(crate) rack_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) member_epoch: i32,
    pub(crate) previous_member_epoch: i32,
    /// Sorted and deduplicated.
    pub(crate) subscribed_topic_names: Vec<String>,
    /// Partitions the member may fetch from now.
    pub(crate) assigned: Assignment,
}

impl ShareMember {
    /// A member that has just asked to join: epoch 0, previous epoch -1 (Kafka's defaults).
    pub(crate) fn new(member_id: String) -> Self {
        ShareMember {
            member_id,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            member_epoch: 0,
            previous_member_epoch: -1,
            subscribed_topic_names: Vec::new(),
            assigned: Assignment::new(),
        }
    }

    pub fn member_id(&self) -> &str {
        &self.member_id
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
    pub fn subscribed_topic_names(&self) -> &[String] {
        &self.subscribed_topic_names
    }
    /// The partitions the member may fetch from now.
    pub fn assigned_partitions(&self) -> &Assignment {
        &self.assigned
    }
    /// Kafka's `isReconciledTo`: a share member is reconciled once it is at the target epoch.
    pub fn is_reconciled_to(&self, target_assignment_epoch: i32) -> bool {
        self.member_epoch == target_assignment_epoch
    }
}
