//! Incremental reconciliation of one member toward its target assignment, following the rules of
//! Kafka's `CurrentAssignmentBuilder`:
//!
//! - partitions to give up are revoked first, and the member keeps its epoch until it reports
//!   (through its owned partitions) that it released them (`UnrevokedPartitions`);
//! - then the member moves to the target epoch and receives the new partitions that no other
//!   member owns; partitions another member still owns are withheld (`UnreleasedPartitions`) and
//!   handed out on a later heartbeat once released.

use std::collections::BTreeSet;

use skiff_protocol::Uuid;
use skiff_protocol::generated::consumer_group_heartbeat_request::TopicPartitions as OwnedTopicPartitions;

use super::member::{Assignment, ConsumerMember, MemberState};

/// The member's new reconciliation state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reconciled {
    pub state: MemberState,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

pub(crate) struct ReconcileInput<'a> {
    pub target_epoch: i32,
    pub target: &'a Assignment,
    /// The topic IDs the member subscribes to now (names and resolved regex).
    pub subscribed_topic_ids: &'a BTreeSet<Uuid>,
    pub has_subscription_changed: bool,
    /// The owned partitions from the request; `None` when the request did not carry them.
    pub owned: Option<&'a [OwnedTopicPartitions]>,
}

/// Returns the member's next state, or `None` when nothing changes.
/// `owned_by_other(topic, partition)` tells whether another member still owns a partition.
pub(crate) fn reconcile(
    member: &ConsumerMember,
    input: &ReconcileInput<'_>,
    owned_by_other: impl Fn(Uuid, i32) -> bool,
) -> Option<Reconciled> {
    match member.state {
        MemberState::Stable => {
            if member.member_epoch != input.target_epoch {
                Some(next_assignment(
                    member,
                    input,
                    member.member_epoch,
                    owned_by_other,
                ))
            } else if input.has_subscription_changed {
                drop_unsubscribed(member, input)
            } else {
                None
            }
        }
        MemberState::UnrevokedPartitions => {
            if owns_any(input.owned, &member.pending_revocation) {
                if input.has_subscription_changed {
                    drop_unsubscribed(member, input)
                } else {
                    None
                }
            } else {
                // Everything pending was released: move one epoch forward (never past the
                // target: a subscription change may have put the member here before the new
                // target exists).
                let epoch = member
                    .member_epoch
                    .saturating_add(1)
                    .min(input.target_epoch);
                Some(next_assignment(member, input, epoch, owned_by_other))
            }
        }
        MemberState::UnreleasedPartitions => Some(next_assignment(
            member,
            input,
            member.member_epoch,
            owned_by_other,
        )),
    }
    .filter(|next| !is_same(member, next))
}

fn is_same(member: &ConsumerMember, next: &Reconciled) -> bool {
    member.state == next.state
        && member.member_epoch == next.member_epoch
        && member.previous_member_epoch == next.previous_member_epoch
        && member.assigned == next.assigned
        && member.pending_revocation == next.pending_revocation
}

/// Whether the member still reports owning any of `partitions`. Unknown (no owned partitions in
/// the request) counts as "still owns".
fn owns_any(owned: Option<&[OwnedTopicPartitions]>, partitions: &Assignment) -> bool {
    let Some(owned) = owned else {
        return true;
    };
    owned.iter().any(|topic| {
        partitions
            .get(&topic.topic_id)
            .is_some_and(|pending| topic.partitions.iter().any(|p| pending.contains(p)))
    })
}

/// The subscription changed while the member is at the target epoch: partitions of topics it no
/// longer subscribes to are revoked right away, without waiting for a new target assignment.
fn drop_unsubscribed(member: &ConsumerMember, input: &ReconcileInput<'_>) -> Option<Reconciled> {
    let mut assigned = member.assigned.clone();
    let mut pending = member.pending_revocation.clone();
    let mut removed = false;
    assigned.retain(|topic, partitions| {
        if input.subscribed_topic_ids.contains(topic) {
            true
        } else {
            pending
                .entry(*topic)
                .or_default()
                .extend(partitions.iter().copied());
            removed = true;
            false
        }
    });
    if !removed {
        return None;
    }
    let state = if !pending.is_empty() && owns_any(input.owned, &pending) {
        MemberState::UnrevokedPartitions
    } else {
        // Already released by the client: keep the state, just shrink the assignment.
        pending = member.pending_revocation.clone();
        member.state
    };
    Some(Reconciled {
        state,
        member_epoch: member.member_epoch,
        previous_member_epoch: member.previous_member_epoch,
        assigned,
        pending_revocation: pending,
    })
}

fn next_assignment(
    member: &ConsumerMember,
    input: &ReconcileInput<'_>,
    member_epoch: i32,
    owned_by_other: impl Fn(Uuid, i32) -> bool,
) -> Reconciled {
    let empty = BTreeSet::new();
    let mut topics: BTreeSet<Uuid> = input.target.keys().copied().collect();
    topics.extend(member.assigned.keys().copied());

    let mut assigned = Assignment::new();
    let mut pending_revocation = Assignment::new();
    let mut pending_assignment = Assignment::new();
    let mut has_unreleased = false;

    for topic in topics {
        let target = if input.subscribed_topic_ids.contains(&topic) {
            input.target.get(&topic).unwrap_or(&empty)
        } else {
            &empty
        };
        let current = member.assigned.get(&topic).unwrap_or(&empty);
        let kept: BTreeSet<i32> = current.intersection(target).copied().collect();
        let revoke: BTreeSet<i32> = current.difference(&kept).copied().collect();
        let own_pending = member.pending_revocation.get(&topic);
        let mut add = BTreeSet::new();
        for p in target.difference(&kept) {
            // A partition this member is itself revoking is not "unreleased".
            let revoking_it_myself = own_pending.is_some_and(|set| set.contains(p));
            if owned_by_other(topic, *p) && !revoking_it_myself {
                has_unreleased = true;
            } else {
                add.insert(*p);
            }
        }
        if !kept.is_empty() {
            assigned.insert(topic, kept);
        }
        if !revoke.is_empty() {
            pending_revocation.insert(topic, revoke);
        }
        if !add.is_empty() {
            pending_assignment.insert(topic, add);
        }
    }

    if !pending_revocation.is_empty() && owns_any(input.owned, &pending_revocation) {
        // Revocation first: the member keeps its epoch until it releases the partitions.
        Reconciled {
            state: MemberState::UnrevokedPartitions,
            member_epoch,
            previous_member_epoch: member.member_epoch,
            assigned,
            pending_revocation,
        }
    } else {
        for (topic, partitions) in pending_assignment {
            assigned.entry(topic).or_default().extend(partitions);
        }
        Reconciled {
            state: if has_unreleased {
                MemberState::UnreleasedPartitions
            } else {
                MemberState::Stable
            },
            member_epoch: input.target_epoch,
            previous_member_epoch: member.member_epoch,
            assigned,
            pending_revocation: Assignment::new(),
        }
    }
}
