//! Online migration between group protocols (Kafka 4.x, `group.consumer.migration.policy`).
//!
//! - **Upgrade.** A ConsumerGroupHeartbeat that joins (epoch 0) a non-empty classic group of
//!   Kafka consumers turns it into a KIP-848 consumer group ([`upgrade`]): the classic members
//!   stay, each at the classic generation with its last assignment, and keep speaking
//!   JoinGroup/SyncGroup/Heartbeat to the consumer group (see
//!   `consumer::classic_members`) while the coordinator assigns for everyone.
//! - **Downgrade.** When the last KIP-848 member of a consumer group leaves and only classic
//!   members remain, the group becomes a classic group again ([`downgrade`]): Stable at the
//!   group epoch with the target assignment as each member's assignment, then a rebalance that
//!   hands assigning back to a leader.
//!
//! Both follow Kafka's `GroupMetadataManager` (`convertToConsumerGroup`,
//! `convertToClassicGroup`) and are refused as Kafka refuses them: a disabled direction, a group
//! that does not use the consumer protocol, a group larger than the target kind allows, metadata
//! that does not parse, or assignments carrying a custom assignor's user data.

use std::collections::BTreeSet;

use skiff_protocol::error_codes;

use crate::classic::{ClassicGroup, ClassicGroupSnapshot, ClassicMemberSnapshot, Completion};
use crate::consumer::{
    Assignment, ClassicMemberMetadata, ClassicMemberMetadataSnapshot, ClassicProtocol,
    ConsumerGroup, ImportedMember,
};
use crate::embedded::{self, CONSUMER_PROTOCOL_TYPE};
use crate::types::{GroupConfig, GroupError, TopicsImage};

fn cannot_upgrade(group_id: &str, why: &str) -> GroupError {
    GroupError::new(
        error_codes::GROUP_ID_NOT_FOUND,
        format!("Cannot upgrade classic group {group_id} to consumer group because {why}."),
    )
}

/// Converts a non-empty classic group into a consumer group for a joining KIP-848 member.
/// On success the classic group is retired: the returned completions answer its parked
/// JoinGroup/SyncGroup requests REBALANCE_IN_PROGRESS. On error the classic group is untouched.
pub fn upgrade(
    classic: &mut ClassicGroup,
    topics: &TopicsImage,
    config: &GroupConfig,
    now_ms: i64,
) -> Result<(ConsumerGroup, Vec<Completion>), GroupError> {
    let group_id = classic.group_id().to_string();
    if !config.consumer_migration_policy.upgrade_enabled() {
        return Err(cannot_upgrade(&group_id, "online upgrade is disabled"));
    }
    if classic.protocol_type() != Some(CONSUMER_PROTOCOL_TYPE) {
        return Err(cannot_upgrade(
            &group_id,
            "the group does not use the consumer embedded protocol",
        ));
    }
    if classic.num_members() > config.consumer_max_size {
        return Err(cannot_upgrade(
            &group_id,
            "the group size exceeds the consumer group maximum size",
        ));
    }
    let protocol_name = classic.protocol_name().map(str::to_string);
    let mut members = Vec::with_capacity(classic.num_members());
    for m in classic.migration_members() {
        // A group in its first rebalance has chosen no protocol yet: the member's first.
        let metadata = m.metadata(
            protocol_name
                .as_deref()
                .or(m.protocols.first().map(|p| p.name.as_str())),
        );
        let subscription = embedded::decode_subscription(&metadata).map_err(|_| {
            cannot_upgrade(&group_id, "the embedded consumer protocol is malformed")
        })?;
        let assignment = embedded::decode_assignment(&m.assignment).map_err(|_| {
            cannot_upgrade(&group_id, "the embedded consumer protocol is malformed")
        })?;
        if assignment.has_user_data {
            return Err(cannot_upgrade(
                &group_id,
                "an unsupported custom assignor is in use (its user data would be lost); switch to a default assignor before upgrading",
            ));
        }
        let mut assigned = Assignment::new();
        for (name, partitions) in &assignment.partitions {
            if let Some((id, _)) = topics.by_name.get(name) {
                let set: &mut BTreeSet<i32> = assigned.entry(*id).or_default();
                set.extend(partitions.iter().copied());
            }
        }
        assigned.retain(|_, partitions| !partitions.is_empty());
        members.push(ImportedMember {
            member_id: m.id.clone(),
            instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            classic: ClassicMemberMetadata {
                session_timeout_ms: m.session_timeout_ms,
                protocols: m
                    .protocols
                    .iter()
                    .map(|p| ClassicProtocol {
                        name: p.name.clone(),
                        metadata: p.metadata.clone(),
                    })
                    .collect(),
            },
            subscribed_topic_names: subscription.topics,
            rack_id: subscription.rack_id,
            assigned,
        });
    }
    let consumer =
        ConsumerGroup::from_classic(&group_id, classic.generation_id(), members, topics, now_ms);
    let completions = classic.retire_for_upgrade(now_ms);
    tracing::info!(group = %group_id, "converted the classic group to a consumer group");
    Ok((consumer, completions))
}

/// Converts a consumer group marked for a downgrade ([`ConsumerGroup::take_downgrade`]) into a
/// classic group of its remaining (classic) members, at the group epoch, each with its target
/// assignment, and starts a rebalance. Unlike Kafka, a member still behind the group epoch is
/// asked to rejoin (and may commit) with the epoch it had rather than told its generation is
/// illegal, which clients take as a lost assignment. The completions are empty today (nothing is parked in a
/// freshly built group) but returned for the caller to deliver.
pub fn downgrade(
    consumer: &ConsumerGroup,
    topics: &TopicsImage,
    now_ms: i64,
) -> (ClassicGroup, Vec<Completion>) {
    let members: Vec<ClassicMemberSnapshot> = consumer
        .members()
        .filter_map(|m| {
            m.classic().map(|classic| ClassicMemberSnapshot {
                member_id: m.member_id().to_string(),
                group_instance_id: m.instance_id().map(str::to_string),
                client_id: m.client_id().to_string(),
                client_host: m.client_host().to_string(),
                rebalance_timeout_ms: m.rebalance_timeout_ms(),
                session_timeout_ms: classic.session_timeout_ms,
                protocols: ClassicMemberMetadataSnapshot::of(classic).protocols,
                assignment: bytes::Bytes::new(),
            })
        })
        .collect();
    let snapshot = ClassicGroupSnapshot {
        group_id: consumer.group_id().to_string(),
        protocol_type: Some(CONSUMER_PROTOCOL_TYPE.to_string()),
        generation_id: consumer.group_epoch(),
        protocol_name: None,
        leader_id: None,
        state_timestamp_ms: now_ms,
        members,
    };
    let assign = |member_id: &str, metadata: &bytes::Bytes| {
        let empty = Assignment::new();
        let target = consumer.target_assignment(member_id).unwrap_or(&empty);
        embedded::encode_assignment(
            embedded::metadata_version(metadata),
            &crate::consumer::assignment_by_name(target, topics),
        )
    };
    let epochs = consumer
        .members()
        .map(|m| (m.member_id().to_string(), m.member_epoch()))
        .collect();
    let mut classic = ClassicGroup::from_downgrade(snapshot, epochs, assign, now_ms);
    let completions = classic.start_rebalance(now_ms);
    tracing::info!(group = %consumer.group_id(), "converted the consumer group to a classic group");
    (classic, completions)
}

#[cfg(test)]
mod tests;
