//! Admin calls for KIP-932 share groups: describing a share group (ShareGroupDescribe) and its
//! share-partition offsets (DescribeShareGroupOffsets), setting them (AlterShareGroupOffsets,
//! only while the group has no members) and deleting them (DeleteShareGroupOffsets).

use std::collections::BTreeMap;

use skiff_protocol::error_codes;
use skiff_protocol::generated::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use skiff_protocol::generated::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use skiff_protocol::generated::describe_share_group_offsets_request::{
    DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
};
use skiff_protocol::generated::{
    AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest, ShareGroupDescribeRequest,
};

use crate::admin::{Admin, GroupDescription, GroupMember};
use crate::consumer::TopicPartition;
use crate::error::{Error, Result};

/// A share partition's position in a share group (DescribeShareGroupOffsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharePartitionOffset {
    pub partition: TopicPartition,
    /// The share-partition start offset: every record before it was delivered for good; `None`
    /// when the partition has no share state in the group.
    pub start_offset: Option<i64>,
    pub leader_epoch: i32,
    /// Records not yet delivered for good: from the start offset to the high watermark, less
    /// those already acknowledged or archived (`None`: unknown, or a broker without v1).
    pub lag: Option<i64>,
}

impl Admin {
    /// Describes a share group (ShareGroupDescribe): members with their assignments. `Ok(None)`
    /// when the group is not a share group (or does not exist).
    pub async fn describe_share_group(&self, group: &str) -> Result<Option<GroupDescription>> {
        let r = self
            .client()
            .request_coordinator(group, |_| ShareGroupDescribeRequest {
                group_ids: vec![group.into()],
                ..Default::default()
            })
            .await?;
        let g = r
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| Error::protocol("ShareGroupDescribe", "no group in response"))?;
        if g.error_code == error_codes::GROUP_ID_NOT_FOUND {
            return Ok(None);
        }
        if g.error_code != error_codes::NONE {
            return Err(Error::broker_for(
                "ShareGroupDescribe",
                g.error_code,
                format!("group {group}"),
                g.error_message.map(|m| m.to_string()),
            ));
        }
        let mut members: Vec<GroupMember> = g
            .members
            .into_iter()
            .map(|m| {
                let mut assignment: Vec<TopicPartition> = m
                    .assignment
                    .topic_partitions
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(|p| TopicPartition::new(t.topic_name.to_string(), *p))
                    })
                    .collect();
                assignment.sort();
                GroupMember {
                    member_id: m.member_id.to_string(),
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    member_epoch: m.member_epoch,
                    assignment,
                }
            })
            .collect();
        members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        Ok(Some(GroupDescription {
            group_id: g.group_id.to_string(),
            state: g.group_state.to_string(),
            group_type: "share".into(),
            group_epoch: g.group_epoch,
            assignor: g.assignor_name.to_string(),
            members,
            offsets: Vec::new(),
        }))
    }

    /// The share-partition offsets of `group` (DescribeShareGroupOffsets): of `partitions`, or
    /// with `None` of every share partition of the group that has state. In partition order.
    pub async fn describe_share_group_offsets(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Vec<SharePartitionOffset>> {
        let topics = partitions.map(|partitions| {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for tp in partitions {
                by_topic.entry(&tp.topic).or_default().push(tp.partition);
            }
            by_topic
                .into_iter()
                .map(
                    |(topic, partitions)| DescribeShareGroupOffsetsRequestTopic {
                        topic_name: topic.into(),
                        partitions,
                        ..Default::default()
                    },
                )
                .collect()
        });
        let r = self
            .client()
            .request_coordinator(group, |_| DescribeShareGroupOffsetsRequest {
                groups: vec![DescribeShareGroupOffsetsRequestGroup {
                    group_id: group.into(),
                    topics,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await?;
        let g =
            r.groups.into_iter().next().ok_or_else(|| {
                Error::protocol("DescribeShareGroupOffsets", "no group in response")
            })?;
        if g.error_code != error_codes::NONE {
            return Err(Error::broker_for(
                "DescribeShareGroupOffsets",
                g.error_code,
                format!("group {group}"),
                g.error_message.map(|m| m.to_string()),
            ));
        }
        let mut out = Vec::new();
        for t in g.topics {
            for p in t.partitions {
                let partition = TopicPartition::new(t.topic_name.to_string(), p.partition_index);
                if p.error_code != error_codes::NONE {
                    return Err(Error::broker_for(
                        "DescribeShareGroupOffsets",
                        p.error_code,
                        format!("group {group}, partition {partition}"),
                        p.error_message.map(|m| m.to_string()),
                    ));
                }
                out.push(SharePartitionOffset {
                    partition,
                    start_offset: (p.start_offset >= 0).then_some(p.start_offset),
                    leader_epoch: p.leader_epoch,
                    lag: (p.start_offset >= 0 && p.lag >= 0).then_some(p.lag),
                });
            }
        }
        out.sort_by(|a, b| a.partition.cmp(&b.partition));
        Ok(out)
    }

    /// Sets the share-partition start offsets of `group` (AlterShareGroupOffsets): the group
    /// must have no members (it is created when it does not exist). The first refusal is the
    /// error.
    pub async fn alter_share_group_offsets(
        &self,
        group: &str,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<()> {
        let mut by_topic: BTreeMap<&str, Vec<AlterShareGroupOffsetsRequestPartition>> =
            BTreeMap::new();
        for (tp, offset) in offsets {
            by_topic
                .entry(&tp.topic)
                .or_default()
                .push(AlterShareGroupOffsetsRequestPartition {
                    partition_index: tp.partition,
                    start_offset: *offset,
                    ..Default::default()
                });
        }
        let topics = by_topic
            .into_iter()
            .map(|(topic, partitions)| AlterShareGroupOffsetsRequestTopic {
                topic_name: topic.into(),
                partitions,
                ..Default::default()
            })
            .collect();
        let r = self
            .client()
            .request_coordinator(group, |_| AlterShareGroupOffsetsRequest {
                group_id: group.into(),
                topics,
                ..Default::default()
            })
            .await?;
        if r.error_code != error_codes::NONE {
            return Err(Error::broker_for(
                "AlterShareGroupOffsets",
                r.error_code,
                format!("group {group}"),
                r.error_message.map(|m| m.to_string()),
            ));
        }
        for t in r.responses {
            for p in t.partitions {
                if p.error_code != error_codes::NONE {
                    return Err(Error::broker_for(
                        "AlterShareGroupOffsets",
                        p.error_code,
                        format!(
                            "group {group}, partition {}-{}",
                            t.topic_name, p.partition_index
                        ),
                        p.error_message.map(|m| m.to_string()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Deletes the share-partition states of `topics` in `group` (DeleteShareGroupOffsets): the
    /// group must exist and have no members; the next member starts those partitions by the
    /// group's `share.auto.offset.reset`. The first refusal is the error.
    pub async fn delete_share_group_offsets(&self, group: &str, topics: &[&str]) -> Result<()> {
        let r = self
            .client()
            .request_coordinator(group, |_| DeleteShareGroupOffsetsRequest {
                group_id: group.into(),
                topics: topics
                    .iter()
                    .map(|t| DeleteShareGroupOffsetsRequestTopic {
                        topic_name: (*t).into(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .await?;
        if r.error_code != error_codes::NONE {
            return Err(Error::broker_for(
                "DeleteShareGroupOffsets",
                r.error_code,
                format!("group {group}"),
                r.error_message.map(|m| m.to_string()),
            ));
        }
        for t in r.responses {
            if t.error_code != error_codes::NONE {
                return Err(Error::broker_for(
                    "DeleteShareGroupOffsets",
                    t.error_code,
                    format!("group {group}, topic {}", t.topic_name),
                    t.error_message.map(|m| m.to_string()),
                ));
            }
        }
        Ok(())
    }
}
