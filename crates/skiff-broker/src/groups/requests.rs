//! The group coordinator's choreography, one method per group API: each gets or creates the
//! group, runs its state machine, delivers parked answers, persists what changed, and returns
//! the typed answer. Handlers map requests to these calls and never see the coordinator's lock.

use std::collections::{BTreeMap, BTreeSet};

use skiff_group::classic::{ClassicGroup, ClassicResponse};
use skiff_group::consumer::{self, ClientInfo, ConsumerGroup};
use skiff_group::{CommittedOffset, GroupError, OffsetKey, migration};
use skiff_protocol::generated::consumer_group_describe_response::DescribedGroup as ConsumerDescribed;
use skiff_protocol::generated::delete_groups_response::DeletableGroupResult;
use skiff_protocol::generated::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup as ClassicDescribed,
};
use skiff_protocol::generated::list_groups_response::{ListGroupsResponse, ListedGroup};
use skiff_protocol::generated::offset_commit_response::{
    OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use skiff_protocol::generated::offset_delete_response::{
    OffsetDeleteResponse, OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use skiff_protocol::generated::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions, OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use skiff_protocol::generated::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeGroupsRequest, HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest,
};
use skiff_protocol::{ByteString, ErrorCode, Uuid, error_codes};
use tokio::sync::oneshot;

use skiff_group::GroupConfig;

use super::{Group, GroupCoordinator, GroupOverrides, Inner, TopicsSource};

const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
/// Kafka's `offset.metadata.max.bytes` default.
pub(crate) const MAX_OFFSET_METADATA: usize = 4096;

fn bs(s: impl Into<String>) -> ByteString {
    ByteString::from(s.into())
}

/// Who sends a classic JoinGroup: its `client.id` and host, as DescribeGroups reports them.
pub struct Joiner<'a> {
    pub client_id: &'a str,
    pub client_host: &'a str,
}

impl GroupCoordinator {
    /// The config overrides of `group_id` (empty when it has none).
    pub fn group_overrides(
        &self,
        topics_source: &impl TopicsSource,
        group_id: &str,
        now: i64,
    ) -> GroupOverrides {
        let inner = self.lock(topics_source, now);
        inner
            .group_configs
            .get(group_id)
            .cloned()
            .unwrap_or_default()
    }

    /// The groups with config overrides.
    pub fn groups_with_overrides(
        &self,
        topics_source: &impl TopicsSource,
        now: i64,
    ) -> Vec<String> {
        let inner = self.lock(topics_source, now);
        inner.group_configs.keys().cloned().collect()
    }

    /// Edits the overrides of `group_id` under the lock: `edit` gets them and the broker's
    /// group settings and returns the overrides to store (`None`: validate only, store
    /// nothing) or its error; a storage failure becomes `storage_error`'s.
    pub fn alter_group_overrides<E>(
        &self,
        topics_source: &impl TopicsSource,
        group_id: &str,
        now: i64,
        edit: impl FnOnce(GroupOverrides, &GroupConfig) -> Result<Option<GroupOverrides>, E>,
        storage_error: impl FnOnce(anyhow::Error) -> E,
    ) -> Result<(), E> {
        let mut inner = self.lock(topics_source, now);
        let current = inner
            .group_configs
            .get(group_id)
            .cloned()
            .unwrap_or_default();
        match edit(current, &self.config)? {
            Some(overrides) => self
                .set_group_overrides(&mut inner, group_id, overrides)
                .map_err(storage_error),
            None => Ok(()),
        }
    }

    /// The group part of a TxnOffsetCommit ([`validate_txn_commit`]).
    pub fn validate_txn_commit(
        &self,
        topics_source: &impl TopicsSource,
        group_id: &str,
        member_id: &str,
        generation: i32,
        instance_id: Option<&str>,
        now: i64,
    ) -> Result<(), ErrorCode> {
        let mut inner = self.lock(topics_source, now);
        validate_txn_commit(
            &mut inner,
            group_id,
            member_id,
            generation,
            instance_id,
            now,
        )
    }

    /// ConsumerGroupHeartbeat (KIP-848): creates the group on a join (member epoch 0) when the
    /// ID is free or names an empty classic group (never a share group, even empty: Kafka
    /// answers "not a consumer group"); a group created for a join that then fails validation
    /// leaves nothing behind.
    pub fn consumer_heartbeat(
        &self,
        topics_source: &impl TopicsSource,
        request: &ConsumerGroupHeartbeatRequest,
        version: i16,
        client: ClientInfo<'_>,
        now: i64,
    ) -> Result<ConsumerGroupHeartbeatResponse, GroupError> {
        consumer::validate_heartbeat(request, version, &self.config)?;
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        let group_id = request.group_id.to_string();
        match inner.groups.get(&group_id) {
            Some(Group::Consumer(_)) => {}
            Some(Group::Classic(group)) if !group.is_empty() && request.member_epoch == 0 => {
                // Online upgrade (Kafka's `convertToConsumerGroup`), tried on a copy: when the
                // policy refuses it or the heartbeat then fails, the classic group stays as it
                // was, its parked requests still parked.
                let mut trial = group.clone();
                let config = self.group_config(inner, &group_id);
                let (mut upgraded, completions) =
                    migration::upgrade(&mut trial, &inner.topics, &config, now)?;
                let response =
                    upgraded.heartbeat(request, version, client, &inner.topics, &config, now)?;
                drop(config);
                inner
                    .groups
                    .insert(group_id.clone(), Group::Consumer(upgraded));
                inner.persisted.remove(&group_id);
                self.deliver(inner, completions);
                self.after_change(inner, &group_id);
                return Ok(response);
            }
            Some(Group::Classic(group)) if group.is_empty() && request.member_epoch == 0 => {
                inner.groups.insert(
                    group_id.clone(),
                    Group::Consumer(ConsumerGroup::new(&group_id)),
                );
            }
            Some(_) => {
                return Err(GroupError::new(
                    error_codes::GROUP_ID_NOT_FOUND,
                    format!("Group {group_id} is not a consumer group."),
                ));
            }
            None if request.member_epoch == 0 => {
                inner.groups.insert(
                    group_id.clone(),
                    Group::Consumer(ConsumerGroup::new(&group_id)),
                );
            }
            None => {
                return Err(GroupError::new(
                    error_codes::GROUP_ID_NOT_FOUND,
                    format!("Group {group_id} not found."),
                ));
            }
        }
        let config = self.group_config(inner, &group_id);
        let Inner { groups, topics, .. } = inner;
        let result = match groups.get_mut(&group_id) {
            Some(Group::Consumer(group)) => {
                group.heartbeat(request, version, client, topics, &config, now)
            }
            _ => Err(GroupError::new(
                error_codes::GROUP_ID_NOT_FOUND,
                "group vanished",
            )),
        };
        // A group created for a join that failed validation leaves nothing behind.
        if result.is_err()
            && matches!(inner.groups.get(&group_id), Some(Group::Consumer(g)) if g.is_unused())
            && !inner.offsets.has_offsets(&group_id)
        {
            inner.groups.remove(&group_id);
        }
        self.maybe_downgrade(inner, &group_id, now);
        self.after_change(inner, &group_id);
        result
    }

    /// ConsumerGroupDescribe: each group, or GROUP_ID_NOT_FOUND.
    pub fn consumer_describe(
        &self,
        topics_source: &impl TopicsSource,
        request: &skiff_protocol::generated::ConsumerGroupDescribeRequest,
        now: i64,
    ) -> Vec<ConsumerDescribed> {
        let inner = self.lock(topics_source, now);
        request
            .group_ids
            .iter()
            .map(|id| match inner.groups.get(&**id) {
                Some(Group::Consumer(g)) => {
                    let config = self.group_config(&inner, id);
                    g.describe(&inner.topics, &config)
                }
                Some(_) => ConsumerDescribed {
                    group_id: id.clone(),
                    error_code: error_codes::GROUP_ID_NOT_FOUND,
                    error_message: Some(bs(format!("Group {id} is not a consumer group."))),
                    ..Default::default()
                },
                None => ConsumerDescribed {
                    group_id: id.clone(),
                    error_code: error_codes::GROUP_ID_NOT_FOUND,
                    error_message: Some(bs(format!("Group {id} not found."))),
                    ..Default::default()
                },
            })
            .collect()
    }

    /// JoinGroup (classic): parks the request until the rebalance completes; the receiver gets
    /// the answer. Errors that need no parking are returned as their code.
    pub fn join(
        &self,
        topics_source: &impl TopicsSource,
        request: &JoinGroupRequest,
        version: i16,
        joiner: Joiner<'_>,
        now: i64,
    ) -> Result<oneshot::Receiver<ClassicResponse>, ErrorCode> {
        let group_id = request.group_id.to_string();
        if group_id.is_empty() {
            return Err(ErrorCode::INVALID_GROUP_ID);
        }
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        match inner.groups.get(&group_id) {
            Some(Group::Classic(_)) => {}
            Some(Group::Consumer(g)) if !g.is_empty() => {
                // A classic member in a consumer group (online migration): answered at once.
                let config = self.group_config(inner, &group_id);
                let client = ClientInfo {
                    client_id: joiner.client_id,
                    client_host: joiner.client_host,
                };
                let Inner { groups, topics, .. } = &mut *inner;
                let response = match groups.get_mut(&group_id) {
                    Some(Group::Consumer(g)) => {
                        g.classic_join(request, version, client, topics, &config, now)
                    }
                    _ => return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
                };
                drop(config);
                return Ok(self.answer_now(inner, &group_id, ClassicResponse::Join(response), now));
            }
            // Kafka's `classicGroupJoin`: a share group (empty or not) is not joined.
            Some(Group::Share(_)) => return Err(ErrorCode::INCONSISTENT_GROUP_PROTOCOL),
            _ if !request.member_id.is_empty() => return Err(ErrorCode::UNKNOWN_MEMBER_ID),
            _ => {
                inner.groups.insert(
                    group_id.clone(),
                    Group::Classic(ClassicGroup::new(&group_id, now)),
                );
            }
        }
        let token = self.next_token();
        let receiver = self.park(inner, token, &group_id);
        let completions = match inner.groups.get_mut(&group_id) {
            Some(Group::Classic(group)) => group.join(
                request,
                version,
                joiner.client_id,
                joiner.client_host,
                token,
                &self.config,
                now,
            ),
            _ => Vec::new(),
        };
        self.deliver(inner, completions);
        self.after_change(inner, &group_id);
        Ok(receiver)
    }

    /// A JoinGroup or SyncGroup a consumer group answered at once, as a receiver like a parked
    /// one's (the group may have changed: it is stored first).
    fn answer_now(
        &self,
        inner: &mut Inner,
        group_id: &str,
        response: ClassicResponse,
        now: i64,
    ) -> oneshot::Receiver<ClassicResponse> {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(response);
        self.maybe_downgrade(inner, group_id, now);
        self.after_change(inner, group_id);
        rx
    }

    /// SyncGroup (classic): parks the request until the leader's assignment arrives.
    pub fn sync(
        &self,
        topics_source: &impl TopicsSource,
        request: &SyncGroupRequest,
        version: i16,
        now: i64,
    ) -> Result<oneshot::Receiver<ClassicResponse>, ErrorCode> {
        let group_id = request.group_id.to_string();
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        let Inner { groups, topics, .. } = &mut *inner;
        match groups.get_mut(&group_id) {
            Some(Group::Classic(_)) => {}
            Some(Group::Consumer(g)) => {
                let response = g.classic_sync(request, version, topics, now);
                return Ok(self.answer_now(inner, &group_id, ClassicResponse::Sync(response), now));
            }
            _ => return Err(ErrorCode::UNKNOWN_MEMBER_ID),
        }
        let token = self.next_token();
        let receiver = self.park(inner, token, &group_id);
        let completions = match inner.groups.get_mut(&group_id) {
            Some(Group::Classic(group)) => group.sync(request, version, token, now),
            _ => Vec::new(),
        };
        self.deliver(inner, completions);
        self.after_change(inner, &group_id);
        Ok(receiver)
    }

    /// Heartbeat (classic).
    pub fn heartbeat(
        &self,
        topics_source: &impl TopicsSource,
        request: &HeartbeatRequest,
        version: i16,
        now: i64,
    ) -> HeartbeatResponse {
        let group_id = request.group_id.to_string();
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        let response = match inner.groups.get_mut(&group_id) {
            Some(Group::Classic(group)) => group.heartbeat(request, version, now),
            Some(Group::Consumer(group)) => group.classic_heartbeat(request, version, now),
            _ => HeartbeatResponse {
                error_code: error_codes::UNKNOWN_MEMBER_ID,
                ..Default::default()
            },
        };
        self.after_change(inner, &group_id);
        response
    }

    /// LeaveGroup (classic): the answer, or the code of a group that is not classic.
    pub fn leave(
        &self,
        topics_source: &impl TopicsSource,
        request: &LeaveGroupRequest,
        version: i16,
        now: i64,
    ) -> Result<LeaveGroupResponse, ErrorCode> {
        let group_id = request.group_id.to_string();
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        let response = match inner.groups.get_mut(&group_id) {
            Some(Group::Classic(group)) => {
                let (response, completions) = group.leave(request, version, now);
                self.deliver(inner, completions);
                Ok(response)
            }
            Some(Group::Consumer(_)) => {
                let config = self.group_config(inner, &group_id);
                let Inner { groups, topics, .. } = &mut *inner;
                let response = match groups.get_mut(&group_id) {
                    Some(Group::Consumer(group)) => {
                        Ok(group.classic_leave(request, version, topics, &config))
                    }
                    _ => Err(ErrorCode::UNKNOWN_MEMBER_ID),
                };
                drop(config);
                self.maybe_downgrade(inner, &group_id, now);
                response
            }
            _ => Err(ErrorCode::UNKNOWN_MEMBER_ID),
        };
        self.after_change(inner, &group_id);
        response
    }

    /// OffsetCommit: the answer, and the group-log offset to wait for before sending it (none
    /// when nothing was stored). A failure to store is answered KAFKA_STORAGE_ERROR here.
    pub fn commit(
        &self,
        topics_source: &impl TopicsSource,
        request: &OffsetCommitRequest,
        version: i16,
        now: i64,
    ) -> (OffsetCommitResponse, Option<i64>) {
        let group_id = request.group_id.to_string();
        let by_id = version >= 10;
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        let group_error = if group_id.is_empty() {
            Err(ErrorCode::INVALID_GROUP_ID)
        } else {
            validate_commit(inner, &group_id, request, version, now)
        };
        let mut commits = Vec::new();
        let topics: Vec<OffsetCommitResponseTopic> = request
            .topics
            .iter()
            .map(|topic| {
                let name = if by_id {
                    inner
                        .topics
                        .by_id(topic.topic_id)
                        .map(|(n, _)| n.to_string())
                } else {
                    inner
                        .topics
                        .by_name
                        .contains_key(&*topic.name)
                        .then(|| topic.name.to_string())
                };
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let code = match (&group_error, &name) {
                            (Err(code), _) => code.code(),
                            (Ok(()), None) if by_id => error_codes::UNKNOWN_TOPIC_ID,
                            (Ok(()), None) => error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                            (Ok(()), Some(_))
                                if p.committed_metadata
                                    .as_ref()
                                    .is_some_and(|m| m.len() > MAX_OFFSET_METADATA) =>
                            {
                                error_codes::OFFSET_METADATA_TOO_LARGE
                            }
                            (Ok(()), Some(name)) => {
                                commits.push((
                                    OffsetKey {
                                        topic: name.clone(),
                                        partition: p.partition_index,
                                    },
                                    CommittedOffset {
                                        offset: p.committed_offset,
                                        leader_epoch: p.committed_leader_epoch,
                                        metadata: p
                                            .committed_metadata
                                            .as_ref()
                                            .map(|m| m.to_string()),
                                        commit_timestamp_ms: now,
                                    },
                                ));
                                error_codes::NONE
                            }
                        };
                        OffsetCommitResponsePartition {
                            partition_index: p.partition_index,
                            error_code: code,
                            ..Default::default()
                        }
                    })
                    .collect();
                OffsetCommitResponseTopic {
                    name: topic.name.clone(),
                    topic_id: topic.topic_id,
                    partitions,
                    ..Default::default()
                }
            })
            .collect();
        let stored = if commits.is_empty() {
            Ok(None)
        } else {
            self.store_offsets(inner, &group_id, commits).map(Some)
        };
        self.after_change(inner, &group_id);
        drop(guard);
        let mut response = OffsetCommitResponse {
            topics,
            ..Default::default()
        };
        match stored {
            Ok(end) => (response, end),
            Err(e) => {
                tracing::error!(group = %group_id, error = %e, "cannot store offsets");
                let code = e
                    .downcast_ref::<crate::coordinator_store::StoreError>()
                    .map_or(ErrorCode::KAFKA_STORAGE_ERROR, |e| e.code());
                set_commit_errors(&mut response, code);
                (response, None)
            }
        }
    }

    /// OffsetFetch, every version. `unstable_by_group`: per group, the partitions a transaction
    /// in progress holds offsets for (read from the transaction coordinator first; with
    /// `require_stable` they answer UNSTABLE_OFFSET_COMMIT).
    pub fn fetch_offsets(
        &self,
        topics_source: &impl TopicsSource,
        request: &OffsetFetchRequest,
        version: i16,
        unstable_by_group: &BTreeMap<String, BTreeSet<(String, i32)>>,
        now: i64,
    ) -> OffsetFetchResponse {
        let no_unstable = BTreeSet::new();
        let unstable_of = |group_id: &str| unstable_by_group.get(group_id).unwrap_or(&no_unstable);
        let inner = self.lock(topics_source, now);
        if version < 8 {
            let group_id = request.group_id.to_string();
            let wanted = request.topics.as_ref().map(|topics| {
                topics
                    .iter()
                    .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                    .collect()
            });
            let error = validate_fetch(&inner, &group_id, None, -1).err();
            let topics = match error {
                Some(_) => Vec::new(),
                None => fetch_offsets(&inner, &group_id, wanted, unstable_of(&group_id))
                    .into_iter()
                    .map(|(name, rows)| OffsetFetchResponseTopic {
                        name: bs(&name),
                        partitions: rows
                            .into_iter()
                            .map(|(p, offset, epoch, metadata, code)| {
                                OffsetFetchResponsePartition {
                                    partition_index: p,
                                    committed_offset: offset,
                                    committed_leader_epoch: epoch,
                                    metadata: Some(bs(&metadata)),
                                    error_code: code,
                                    ..Default::default()
                                }
                            })
                            .collect(),
                        ..Default::default()
                    })
                    .collect(),
            };
            return OffsetFetchResponse {
                topics,
                error_code: error.map_or(error_codes::NONE, ErrorCode::code),
                ..Default::default()
            };
        }
        let by_id = version >= 10;
        let groups = request
            .groups
            .iter()
            .map(|g| {
                let group_id = g.group_id.to_string();
                let error =
                    validate_fetch(&inner, &group_id, g.member_id.as_deref(), g.member_epoch).err();
                let unstable = unstable_of(&group_id);
                let found =
                    |(name, rows): (String, Vec<FetchedOffset>)| OffsetFetchResponseTopics {
                        topic_id: inner
                            .topics
                            .by_name
                            .get(&name)
                            .map_or(Uuid::ZERO, |(id, _)| *id),
                        name: bs(&name),
                        partitions: rows
                            .into_iter()
                            .map(|(p, offset, epoch, metadata, code)| {
                                OffsetFetchResponsePartitions {
                                    partition_index: p,
                                    committed_offset: offset,
                                    committed_leader_epoch: epoch,
                                    metadata: Some(bs(&metadata)),
                                    error_code: code,
                                    ..Default::default()
                                }
                            })
                            .collect(),
                        ..Default::default()
                    };
                let topics = match (error, &g.topics) {
                    (Some(_), _) => Vec::new(),
                    (None, None) => fetch_offsets(&inner, &group_id, None, unstable)
                        .into_iter()
                        .map(found)
                        .collect(),
                    (None, Some(topics)) => topics
                        .iter()
                        .flat_map(|t| {
                            let name = if by_id {
                                inner.topics.by_id(t.topic_id).map(|(n, _)| n.to_string())
                            } else {
                                Some(t.name.to_string())
                            };
                            match name {
                                Some(name) => fetch_offsets(
                                    &inner,
                                    &group_id,
                                    Some(vec![(name, t.partition_indexes.clone())]),
                                    unstable,
                                )
                                .into_iter()
                                .map(found)
                                .collect::<Vec<_>>(),
                                // v10: a topic ID the broker does not know (Kafka answers each
                                // partition with UNKNOWN_TOPIC_ID, echoing the ID).
                                None => vec![OffsetFetchResponseTopics {
                                    topic_id: t.topic_id,
                                    name: bs(""),
                                    partitions: t
                                        .partition_indexes
                                        .iter()
                                        .map(|p| OffsetFetchResponsePartitions {
                                            partition_index: *p,
                                            committed_offset: -1,
                                            committed_leader_epoch: -1,
                                            metadata: Some(bs("")),
                                            error_code: error_codes::UNKNOWN_TOPIC_ID,
                                            ..Default::default()
                                        })
                                        .collect(),
                                    ..Default::default()
                                }],
                            }
                        })
                        .collect(),
                };
                OffsetFetchResponseGroup {
                    group_id: g.group_id.clone(),
                    topics,
                    error_code: error.map_or(error_codes::NONE, ErrorCode::code),
                    ..Default::default()
                }
            })
            .collect();
        OffsetFetchResponse {
            groups,
            ..Default::default()
        }
    }

    /// OffsetDelete: refuses topics the group is subscribed to.
    pub fn offset_delete(
        &self,
        topics_source: &impl TopicsSource,
        request: &OffsetDeleteRequest,
        now: i64,
    ) -> OffsetDeleteResponse {
        let group_id = request.group_id.to_string();
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        let group_known =
            inner.groups.contains_key(&group_id) || inner.offsets.has_offsets(&group_id);
        // A share group has no committed offsets (Kafka's `ShareGroup.validateOffsetDelete`).
        if !group_known || matches!(inner.groups.get(&group_id), Some(Group::Share(_))) {
            return OffsetDeleteResponse {
                error_code: error_codes::GROUP_ID_NOT_FOUND,
                ..Default::default()
            };
        }
        let subscribed = |topic: &str| match inner.groups.get(&group_id) {
            // By name or through a regex.
            Some(Group::Consumer(g)) => g.is_subscribed_to(topic),
            // A classic group's subscriptions are opaque here: any active member counts.
            Some(Group::Classic(g)) => !g.is_empty(),
            Some(Group::Share(_)) | None => false,
        };
        let mut to_delete = Vec::new();
        let topics = request
            .topics
            .iter()
            .map(|t| {
                let busy = subscribed(&t.name);
                OffsetDeleteResponseTopic {
                    name: t.name.clone(),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| {
                            let code = if busy {
                                GROUP_SUBSCRIBED_TO_TOPIC
                            } else {
                                to_delete.push(OffsetKey {
                                    topic: t.name.to_string(),
                                    partition: p.partition_index,
                                });
                                error_codes::NONE
                            };
                            OffsetDeleteResponsePartition {
                                partition_index: p.partition_index,
                                error_code: code,
                                ..Default::default()
                            }
                        })
                        .collect(),
                    ..Default::default()
                }
            })
            .collect();
        if let Err(e) = self.delete_offsets(inner, &group_id, &to_delete) {
            tracing::error!(group = %group_id, error = %e, "cannot delete offsets");
            return OffsetDeleteResponse {
                error_code: error_codes::UNKNOWN_SERVER_ERROR,
                ..Default::default()
            };
        }
        OffsetDeleteResponse {
            topics,
            ..Default::default()
        }
    }

    /// ListGroups with its state and type filters.
    pub fn list(
        &self,
        topics_source: &impl TopicsSource,
        request: &ListGroupsRequest,
        now: i64,
    ) -> ListGroupsResponse {
        let inner = self.lock(topics_source, now);
        let wants_state = |state: &str| {
            request.states_filter.is_empty()
                || request
                    .states_filter
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(state))
        };
        let wants_type = |kind: &str| {
            request.types_filter.is_empty()
                || request
                    .types_filter
                    .iter()
                    .any(|t| t.eq_ignore_ascii_case(kind))
        };
        let mut groups: Vec<ListedGroup> = inner
            .groups
            .iter()
            .filter(|(_, g)| wants_state(g.state_name()) && wants_type(g.type_name()))
            .map(|(id, g)| ListedGroup {
                group_id: bs(id),
                protocol_type: bs(match g {
                    Group::Consumer(_) => "consumer",
                    Group::Classic(c) => c.protocol_type().unwrap_or(""),
                    Group::Share(_) => "share",
                }),
                group_state: bs(g.state_name()),
                group_type: bs(g.type_name()),
                ..Default::default()
            })
            .collect();
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        ListGroupsResponse {
            groups,
            ..Default::default()
        }
    }

    /// DescribeGroups (classic groups; KIP-1043 answers for the others).
    pub fn describe(
        &self,
        topics_source: &impl TopicsSource,
        request: &DescribeGroupsRequest,
        version: i16,
        now: i64,
    ) -> DescribeGroupsResponse {
        let inner = self.lock(topics_source, now);
        let groups = request
            .groups
            .iter()
            .map(|id| match inner.groups.get(&**id) {
                Some(Group::Classic(g)) => g.describe(),
                // Not a classic group (a consumer group, or none): Kafka's GroupIdNotFound
                // answer. KIP-1043: v6+ carries GROUP_ID_NOT_FOUND; older versions only "Dead".
                other if version >= 6 => ClassicDescribed {
                    group_id: id.clone(),
                    group_state: bs("Dead"),
                    error_code: error_codes::GROUP_ID_NOT_FOUND,
                    error_message: Some(bs(&match other {
                        Some(_) => format!("Group {id} is not a classic group."),
                        None => format!("Group {id} not found."),
                    })),
                    ..Default::default()
                },
                _ => ClassicDescribed {
                    group_id: id.clone(),
                    group_state: bs("Dead"),
                    ..Default::default()
                },
            })
            .collect();
        DescribeGroupsResponse {
            groups,
            ..Default::default()
        }
    }

    /// DeleteGroups: empty groups (or groups of offsets only) go with their offsets and, for a
    /// share group, its share-partition states (Kafka deletes those first: a failure keeps the
    /// group).
    pub fn delete_groups(
        &self,
        topics_source: &impl TopicsSource,
        request: &DeleteGroupsRequest,
        now: i64,
    ) -> DeleteGroupsResponse {
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        let results = request
            .groups_names
            .iter()
            .map(|id| {
                let group_id = id.to_string();
                let share_states = super::share::share_keys_of(inner, &group_id);
                let found = inner.groups.get(&group_id).map(Group::is_empty);
                let code = match found {
                    Some(false) => error_codes::NON_EMPTY_GROUP,
                    None if !inner.offsets.has_offsets(&group_id) && share_states.is_empty() => {
                        error_codes::GROUP_ID_NOT_FOUND
                    }
                    _ if !super::share::delete_share_states(inner, &share_states) => {
                        error_codes::UNKNOWN_SERVER_ERROR
                    }
                    _ => {
                        inner.groups.remove(&group_id);
                        let keys: Vec<OffsetKey> = GroupCoordinator::offsets_of(inner, &group_id)
                            .into_keys()
                            .collect();
                        match self.delete_offsets(inner, &group_id, &keys) {
                            Ok(()) => {
                                self.after_change(inner, &group_id);
                                error_codes::NONE
                            }
                            Err(e) => {
                                tracing::error!(group = %group_id, error = %e, "cannot delete a group");
                                error_codes::UNKNOWN_SERVER_ERROR
                            }
                        }
                    }
                };
                DeletableGroupResult {
                    group_id: id.clone(),
                    error_code: code,
                    ..Default::default()
                }
            })
            .collect();
        DeleteGroupsResponse {
            results,
            ..Default::default()
        }
    }
}

/// Checks a commit against the group; creates an empty classic group for "simple" commits
/// (negative generation, no member) as Kafka does.
fn validate_commit(
    inner: &mut Inner,
    group_id: &str,
    request: &OffsetCommitRequest,
    version: i16,
    now: i64,
) -> Result<(), ErrorCode> {
    let generation = request.generation_id_or_member_epoch;
    let member = request.member_id.as_ref();
    match inner.groups.get_mut(group_id) {
        Some(Group::Consumer(g)) => g
            .validate_offset_commit(member, generation, version)
            .map_err(|e| e.code),
        // Kafka's `ShareGroup.validateOffsetCommit`: "Group {id} is not a consumer group."
        Some(Group::Share(_)) => Err(ErrorCode::GROUP_ID_NOT_FOUND),
        Some(Group::Classic(g)) => {
            let instance = request.group_instance_id.as_deref();
            g.validate_offset_commit(member, generation, instance)
                .map_err(|e| e.code)?;
            g.on_offset_commit(member, now);
            Ok(())
        }
        None if generation < 0 => {
            inner.groups.insert(
                group_id.to_string(),
                Group::Classic(ClassicGroup::new(group_id, now)),
            );
            Ok(())
        }
        None if version >= 9 => Err(ErrorCode::GROUP_ID_NOT_FOUND),
        None => Err(ErrorCode::ILLEGAL_GENERATION),
    }
}

/// Checks the group part of a TxnOffsetCommit, as Kafka's `validateTransactionalOffsetCommit`:
/// a request without member (empty member ID, generation -1: a client older than v3 or one
/// without group management) is accepted; otherwise the member must exist and its generation
/// (classic) or epoch (consumer group) match. A group that does not exist yet is created empty.
pub(crate) fn validate_txn_commit(
    inner: &mut Inner,
    group_id: &str,
    member_id: &str,
    generation: i32,
    instance_id: Option<&str>,
    now: i64,
) -> Result<(), ErrorCode> {
    let anonymous = member_id.is_empty() && generation < 0;
    match inner.groups.get_mut(group_id) {
        Some(Group::Classic(_)) if anonymous => Ok(()),
        Some(Group::Classic(g)) => {
            g.validate_offset_commit(member_id, generation, instance_id)
                .map_err(|e| e.code)?;
            g.on_offset_commit(member_id, now);
            Ok(())
        }
        Some(Group::Share(_)) => Err(ErrorCode::GROUP_ID_NOT_FOUND),
        Some(Group::Consumer(g)) => {
            g.validate_offset_commit(member_id, generation, 9)
                .map_err(|e| match e.code {
                    // A transactional commit wants the exact epoch (Kafka: ILLEGAL_GENERATION).
                    ErrorCode::STALE_MEMBER_EPOCH => ErrorCode::ILLEGAL_GENERATION,
                    code => code,
                })
        }
        None => {
            inner.groups.insert(
                group_id.to_string(),
                Group::Classic(ClassicGroup::new(group_id, now)),
            );
            Ok(())
        }
    }
}

pub(crate) fn set_commit_errors(response: &mut OffsetCommitResponse, code: ErrorCode) {
    for topic in &mut response.topics {
        for p in &mut topic.partitions {
            if p.error_code == error_codes::NONE {
                p.error_code = code.code();
            }
        }
    }
}

/// One committed offset as OffsetFetch answers it: partition, offset, leader epoch, metadata,
/// error code.
type FetchedOffset = (i32, i64, i32, String, i16);
/// A stored committed offset: partition, offset, leader epoch, metadata.
type CommittedRow = (i32, i64, i32, String);
/// One group's committed offsets for the requested partitions (None = every committed one), by
/// topic.
type FetchedOffsets = Vec<(String, Vec<FetchedOffset>)>;

/// [`committed_offsets`], with the partitions in `unstable` (pending transactional offsets, when
/// the request asked for stable offsets) answered UNSTABLE_OFFSET_COMMIT (KIP-447: the consumer retries until the transaction ends).
fn fetch_offsets(
    inner: &Inner,
    group_id: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    unstable: &BTreeSet<(String, i32)>,
) -> FetchedOffsets {
    committed_offsets(inner, group_id, wanted)
        .into_iter()
        .map(|(topic, rows)| {
            let rows = rows
                .into_iter()
                .map(|(p, offset, epoch, metadata)| {
                    if unstable.contains(&(topic.clone(), p)) {
                        (
                            p,
                            -1,
                            -1,
                            String::new(),
                            error_codes::UNSTABLE_OFFSET_COMMIT,
                        )
                    } else {
                        (p, offset, epoch, metadata, error_codes::NONE)
                    }
                })
                .collect();
            (topic, rows)
        })
        .collect()
}

fn committed_offsets(
    inner: &Inner,
    group_id: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
) -> Vec<(String, Vec<CommittedRow>)> {
    match wanted {
        Some(topics) => topics
            .into_iter()
            .map(|(topic, partitions)| {
                let rows = partitions
                    .into_iter()
                    .map(|p| match inner.offsets.fetch(group_id, &topic, p) {
                        Some(c) => (
                            p,
                            c.offset,
                            c.leader_epoch,
                            c.metadata.clone().unwrap_or_default(),
                        ),
                        None => (p, -1, -1, String::new()),
                    })
                    .collect();
                (topic, rows)
            })
            .collect(),
        None => {
            let mut by_topic: BTreeMap<String, Vec<CommittedRow>> = BTreeMap::new();
            for (key, c) in GroupCoordinator::offsets_of(inner, group_id) {
                by_topic.entry(key.topic).or_default().push((
                    key.partition,
                    c.offset,
                    c.leader_epoch,
                    c.metadata.unwrap_or_default(),
                ));
            }
            by_topic.into_iter().collect()
        }
    }
}

fn validate_fetch(
    inner: &Inner,
    group_id: &str,
    member: Option<&str>,
    epoch: i32,
) -> Result<(), ErrorCode> {
    match inner.groups.get(group_id) {
        Some(Group::Consumer(g)) => g.validate_offset_fetch(member, epoch).map_err(|e| e.code),
        Some(Group::Classic(g)) => g.validate_offset_fetch().map_err(|e| e.code),
        // Kafka fails a share group's fetch silently: every partition without an offset, and a
        // share group has none.
        Some(Group::Share(_)) | None => Ok(()),
    }
}
