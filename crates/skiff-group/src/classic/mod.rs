//! Classic groups: the JoinGroup (v0-9) / SyncGroup (v0-5) / Heartbeat (v0-4) / LeaveGroup (v0-5)
//! protocol, one deterministic state machine per group.
//!
//! The model is Apache Kafka's classic group coordinator (`GroupMetadataManager`, `ClassicGroup`):
//! states Empty -> PreparingRebalance -> CompletingRebalance -> Stable (and Dead once unloaded),
//! generations, leader election, protocol selection by vote, KIP-394 member IDs, KIP-345 static
//! members, `group.initial.rebalance.delay.ms`, rebalance, session and pending-sync timeouts.
//!
//! # Delayed responses without I/O
//!
//! JoinGroup and SyncGroup responses often wait for other members. Every `join`/`sync` call carries a
//! caller-chosen `token` (and the request version); the call returns the [`Completion`]s that are
//! ready now, possibly including its own token, and keeps the rest parked on the member. Later calls
//! (another member's join or sync, a leave, [`ClassicGroup::on_timer`]) release them. Responses are
//! shaped for the version each pending request was sent with. Every parked token is eventually
//! completed: by the rebalance, by an error (a superseding request, the member's removal, a
//! fence), or by [`ClassicGroup::unload`].
//!
//! # Timers
//!
//! The group exposes [`ClassicGroup::next_deadline`]; the broker calls [`ClassicGroup::on_timer`]
//! at (or after) that time. Nothing sleeps.
//!
//! # Persistence
//!
//! Kafka writes a group metadata record at exactly three points: when a group is created or becomes
//! Empty, when the leader's assignment is stored (SyncGroup), and when a static member is replaced
//! without a rebalance. [`ClassicGroup::change_counter`] is bumped at those points and
//! [`ClassicGroup::snapshot`] returns the group as of the last of them (a consistent generation with
//! its assignments, never a half-finished rebalance). [`ClassicGroup::restore`] rebuilds a Stable (or
//! Empty) group from it and re-arms the members' session timers, as Kafka does on load.

mod group;
pub(crate) mod member;
mod snapshot;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use skiff_protocol::generated::join_group_response::JoinGroupResponse;
use skiff_protocol::generated::sync_group_response::SyncGroupResponse;

pub use group::{ClassicGroup, MemberView, NEW_MEMBER_JOIN_TIMEOUT_MS};
pub(crate) use group::{fit_join, fit_sync};
pub use snapshot::{ClassicGroupSnapshot, ClassicMemberSnapshot, ProtocolSnapshot};

/// A response that is ready for a parked (or just received) JoinGroup or SyncGroup request.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The token the caller passed with the request.
    pub token: u64,
    pub response: ClassicResponse,
}

/// The response of a completed request, already shaped for the request's version.
#[derive(Debug, Clone, PartialEq)]
pub enum ClassicResponse {
    Join(JoinGroupResponse),
    Sync(SyncGroupResponse),
}

/// The states of a classic group, named as Kafka names them in DescribeGroups and ListGroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClassicGroupState {
    /// No members (pending KIP-394 members may exist). Offsets may be committed with generation -1.
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Waiting for the leader's assignment (SyncGroup).
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// Unloaded or deleted: every request is refused.
    Dead,
}

impl ClassicGroupState {
    /// Kafka's name for the state.
    pub fn name(self) -> &'static str {
        match self {
            ClassicGroupState::Empty => "Empty",
            ClassicGroupState::PreparingRebalance => "PreparingRebalance",
            ClassicGroupState::CompletingRebalance => "CompletingRebalance",
            ClassicGroupState::Stable => "Stable",
            ClassicGroupState::Dead => "Dead",
        }
    }
}

impl std::fmt::Display for ClassicGroupState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
