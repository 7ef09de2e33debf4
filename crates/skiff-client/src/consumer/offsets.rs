//! Offsets: where a partition starts reading (committed offset, else the reset policy through
//! ListOffsets), committed offsets (OffsetFetch), commits (OffsetCommit, auto-commit), and
//! ListOffsets itself (also used by the admin client).

use std::collections::BTreeMap;
use std::sync::Arc;

use skiff_protocol::error_codes;
use skiff_protocol::generated::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use skiff_protocol::generated::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use skiff_protocol::generated::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use skiff_protocol::generated::{ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest};
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::util::lock;

use super::{Consumer, Inner, OffsetReset, TopicPartition};

impl Consumer {
    /// Sets positions for owned partitions that have none: committed offset, else the reset
    /// policy (ListOffsets).
    pub(super) async fn initialize_positions(&self) -> Result<()> {
        let missing: Vec<TopicPartition> = lock(&self.inner.state)
            .assigned
            .iter()
            .filter(|(_, p)| p.position.is_none())
            .map(|(tp, _)| tp.clone())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut need_reset = missing.clone();
        if self.inner.config.group_id.is_some() {
            match self.committed(&missing).await {
                Ok(committed) => {
                    let mut state = lock(&self.inner.state);
                    for (tp, offset) in committed {
                        if offset >= 0 {
                            if let Some(p) = state.assigned.get_mut(&tp)
                                && p.position.is_none()
                            {
                                p.position = Some(offset);
                            }
                            need_reset.retain(|t| *t != tp);
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "OffsetFetch failed; retrying on next poll");
                    return Ok(());
                }
            }
        }
        self.reset_positions(&need_reset).await
    }

    pub(super) async fn reset_positions(&self, partitions: &[TopicPartition]) -> Result<()> {
        if partitions.is_empty() {
            return Ok(());
        }
        let timestamp = match self.inner.config.auto_offset_reset {
            OffsetReset::Earliest => -2,
            OffsetReset::Latest => -1,
            OffsetReset::None => {
                return Err(Error::Config(format!(
                    "no committed offset for {} and auto_offset_reset is None",
                    partitions
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        };
        let offsets = list_offsets(
            &self.inner.client,
            partitions,
            timestamp,
            self.inner.config.isolation_level.code(),
        )
        .await?;
        let mut state = lock(&self.inner.state);
        for (tp, offset) in offsets {
            if let Some(p) = state.assigned.get_mut(&tp)
                && p.position.is_none()
            {
                p.position = Some(offset);
            }
        }
        Ok(())
    }

    /// The committed offsets of `partitions` in the group (-1: none).
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, i64)>> {
        let group = self
            .inner
            .config
            .group_id
            .clone()
            .ok_or_else(|| Error::Config("committed offsets need a group_id".into()))?;
        let (member_id, epoch) = {
            let state = lock(&self.inner.state);
            (state.member.id.clone(), state.member.epoch)
        };
        let member = lock(&self.membership).is_some() && !member_id.is_empty();
        let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for tp in partitions {
            by_topic
                .entry(tp.topic.clone())
                .or_default()
                .push(tp.partition);
        }
        let mut ids = BTreeMap::new();
        for name in by_topic.keys() {
            ids.insert(name.clone(), self.inner.client.topic(name).await?.id);
        }
        let r = self
            .inner
            .client
            .request_coordinator(&group, |v| {
                if v >= 8 {
                    OffsetFetchRequest {
                        groups: vec![OffsetFetchRequestGroup {
                            group_id: group.as_str().into(),
                            member_id: member.then(|| member_id.as_str().into()),
                            member_epoch: if member { epoch } else { -1 },
                            topics: Some(
                                by_topic
                                    .iter()
                                    .map(|(name, parts)| OffsetFetchRequestTopics {
                                        name: name.as_str().into(),
                                        topic_id: ids.get(name).copied().unwrap_or_default(),
                                        partition_indexes: parts.clone(),
                                        ..Default::default()
                                    })
                                    .collect(),
                            ),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }
                } else {
                    OffsetFetchRequest {
                        group_id: group.as_str().into(),
                        topics: Some(
                            by_topic
                                .iter()
                                .map(|(name, parts)| OffsetFetchRequestTopic {
                                    name: name.as_str().into(),
                                    partition_indexes: parts.clone(),
                                    ..Default::default()
                                })
                                .collect(),
                        ),
                        ..Default::default()
                    }
                }
            })
            .await?;
        let mut out = Vec::new();
        if let Some(g) = r.groups.first() {
            if g.error_code != error_codes::NONE {
                return Err(Error::broker_for(
                    "OffsetFetch",
                    g.error_code,
                    format!("group {group}"),
                    None,
                ));
            }
            for t in &g.topics {
                let name = if t.name.is_empty() {
                    ids.iter()
                        .find(|(_, id)| **id == t.topic_id)
                        .map(|(n, _)| n.clone())
                        .unwrap_or_default()
                } else {
                    t.name.to_string()
                };
                for p in &t.partitions {
                    if p.error_code != error_codes::NONE {
                        return Err(Error::broker_for(
                            "OffsetFetch",
                            p.error_code,
                            format!("{name}-{}", p.partition_index),
                            None,
                        ));
                    }
                    out.push((
                        TopicPartition::new(name.clone(), p.partition_index),
                        p.committed_offset,
                    ));
                }
            }
        } else {
            if r.error_code != error_codes::NONE {
                return Err(Error::broker_for(
                    "OffsetFetch",
                    r.error_code,
                    format!("group {group}"),
                    None,
                ));
            }
            for t in &r.topics {
                for p in &t.partitions {
                    if p.error_code != error_codes::NONE {
                        return Err(Error::broker_for(
                            "OffsetFetch",
                            p.error_code,
                            format!("{}-{}", t.name, p.partition_index),
                            None,
                        ));
                    }
                    out.push((
                        TopicPartition::new(t.name.to_string(), p.partition_index),
                        p.committed_offset,
                    ));
                }
            }
        }
        Ok(out)
    }

    pub(super) async fn maybe_auto_commit(&self) {
        if !self.inner.config.enable_auto_commit || self.inner.config.group_id.is_none() {
            return;
        }
        let due =
            lock(&self.inner.state).last_commit.elapsed() >= self.inner.config.auto_commit_interval;
        if due && let Err(e) = self.commit().await {
            tracing::debug!(error = %e, "auto-commit failed");
        }
    }

    /// Commits the current positions of every owned partition.
    pub async fn commit(&self) -> Result<()> {
        commit_positions(&self.inner, None).await
    }

    /// Commits the given offsets (the next offset to read, as Kafka does).
    pub async fn commit_offsets(&self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        commit_offsets(&self.inner, offsets).await
    }
}

/// ListOffsets for `partitions` at `timestamp` (-2 earliest, -1 latest), sent to each leader.
/// `isolation_level` 1 (read_committed) makes "latest" the last stable offset.
pub(crate) async fn list_offsets(
    client: &Client,
    partitions: &[TopicPartition],
    timestamp: i64,
    isolation_level: i8,
) -> Result<Vec<(TopicPartition, i64)>> {
    let mut by_node: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for tp in partitions {
        let topic = client.topic(&tp.topic).await?;
        let leader = topic
            .partition(tp.partition)
            .map(|p| p.leader)
            .ok_or_else(|| Error::UnknownPartition {
                topic: tp.topic.clone(),
                partition: tp.partition,
            })?;
        by_node
            .entry(leader)
            .or_default()
            .entry(tp.topic.clone())
            .or_default()
            .push(tp.partition);
    }
    let mut out = Vec::new();
    for (node, topics) in by_node {
        let r = client
            .request(node, |_| ListOffsetsRequest {
                replica_id: -1,
                isolation_level,
                topics: topics
                    .iter()
                    .map(|(name, parts)| ListOffsetsTopic {
                        name: name.as_str().into(),
                        partitions: parts
                            .iter()
                            .map(|p| ListOffsetsPartition {
                                partition_index: *p,
                                timestamp,
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .await?;
        for t in r.topics {
            for p in t.partitions {
                let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
                if p.error_code != error_codes::NONE {
                    return Err(Error::broker_for(
                        "ListOffsets",
                        p.error_code,
                        tp.to_string(),
                        None,
                    ));
                }
                out.push((tp, p.offset));
            }
        }
    }
    Ok(out)
}

pub(super) async fn commit_positions(
    inner: &Arc<Inner>,
    only: Option<&[TopicPartition]>,
) -> Result<()> {
    let offsets: Vec<(TopicPartition, i64)> = {
        let state = lock(&inner.state);
        state
            .assigned
            .iter()
            .filter(|(tp, _)| only.is_none_or(|o| o.contains(tp)))
            .filter_map(|(tp, p)| p.position.map(|pos| (tp.clone(), pos)))
            .collect()
    };
    lock(&inner.state).last_commit = Instant::now();
    if offsets.is_empty() {
        return Ok(());
    }
    commit_offsets(inner, &offsets).await
}

pub(super) async fn commit_offsets(
    inner: &Arc<Inner>,
    offsets: &[(TopicPartition, i64)],
) -> Result<()> {
    let group = inner
        .config
        .group_id
        .clone()
        .ok_or_else(|| Error::Config("commit needs a group_id".into()))?;
    let (member_id, epoch, joined) = {
        let state = lock(&inner.state);
        (
            state.member.id.clone(),
            state.member.epoch,
            state.member.joined,
        )
    };
    // A plain (assigned) consumer commits as an admin: no member, epoch -1.
    let (member_id, epoch) = if joined {
        (member_id, epoch)
    } else {
        (String::new(), -1)
    };
    commit_as(&inner.client, &group, &member_id, epoch, offsets).await
}

/// OffsetCommit of `offsets` for `group` as `member_id` at `epoch` (empty and -1: an admin
/// commit, which the broker takes only while the group has no members): the consumer's commits
/// and the admin's. The first failed partition is the error; a coordinator that moved is
/// forgotten so that the next request finds the new one.
pub(crate) async fn commit_as(
    client: &Client,
    group: &str,
    member_id: &str,
    epoch: i32,
    offsets: &[(TopicPartition, i64)],
) -> Result<()> {
    let mut by_topic: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
    for (tp, offset) in offsets {
        by_topic
            .entry(tp.topic.as_str())
            .or_default()
            .push((tp.partition, *offset));
    }
    let mut ids = BTreeMap::new();
    for name in by_topic.keys() {
        ids.insert(*name, client.topic(name).await?.id);
    }
    let r = client
        .request_coordinator(group, |_| OffsetCommitRequest {
            group_id: group.into(),
            generation_id_or_member_epoch: epoch,
            member_id: member_id.into(),
            group_instance_id: None,
            retention_time_ms: -1,
            topics: by_topic
                .iter()
                .map(|(name, parts)| OffsetCommitRequestTopic {
                    name: (*name).into(),
                    topic_id: ids.get(name).copied().unwrap_or_default(),
                    partitions: parts
                        .iter()
                        .map(|(p, o)| OffsetCommitRequestPartition {
                            partition_index: *p,
                            committed_offset: *o,
                            committed_leader_epoch: -1,
                            committed_metadata: Some("".into()),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .await?;
    for t in &r.topics {
        let name = if t.name.is_empty() {
            ids.iter()
                .find(|(_, id)| **id == t.topic_id)
                .map(|(n, _)| (*n).to_string())
                .unwrap_or_else(|| t.topic_id.to_string())
        } else {
            t.name.to_string()
        };
        for p in &t.partitions {
            if p.error_code != error_codes::NONE {
                if matches!(
                    p.error_code,
                    error_codes::NOT_COORDINATOR | error_codes::COORDINATOR_NOT_AVAILABLE
                ) {
                    client.invalidate_coordinator(group);
                }
                return Err(Error::broker_for(
                    "OffsetCommit",
                    p.error_code,
                    format!("group {group}, {name}-{}", p.partition_index),
                    None,
                ));
            }
        }
    }
    Ok(())
}
