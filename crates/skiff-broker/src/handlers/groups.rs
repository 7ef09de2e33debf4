//! Group APIs: FindCoordinator, ConsumerGroupHeartbeat/Describe (KIP-848 with KIP-1082 member
//! IDs), the classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup, OffsetCommit/Fetch/Delete, and
//! List/Describe/DeleteGroups.
//!
//! A group ID names either a consumer group or a classic group. An empty group of one kind is
//! replaced when the other kind joins; a non-empty one refuses the other kind.

use std::collections::{BTreeMap, BTreeSet};

use skiff_group::classic::{ClassicGroup, ClassicResponse};
use skiff_group::consumer::{self, ClientInfo, ConsumerGroup};
use skiff_group::{CommittedOffset, GroupError, OffsetKey};
use skiff_protocol::generated::consumer_group_describe_response::{
    ConsumerGroupDescribeResponse, DescribedGroup as ConsumerDescribed,
};
use skiff_protocol::generated::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup as ClassicDescribed,
};
use skiff_protocol::generated::find_coordinator_response::{Coordinator, FindCoordinatorResponse};
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
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, FindCoordinatorRequest,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest,
    OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest,
};
use skiff_protocol::{ByteString, Request, Response, Uuid, error_codes};

use super::{Reply, RequestContext, bs};
use crate::clock::now_ms;
use crate::groups::{Group, GroupCoordinator, Inner};

const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
/// Kafka's `offset.metadata.max.bytes` default.
pub(crate) const MAX_OFFSET_METADATA: usize = 4096;
/// FindCoordinator key types.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

fn client_host(ctx: &RequestContext) -> String {
    format!("/{}", ctx.peer.ip())
}

// ---------------------------------------------------------------------------------------------
// FindCoordinator

pub fn find_coordinator(ctx: &RequestContext, request: FindCoordinatorRequest) -> Response {
    let (host, port) = &ctx.broker.advertised;
    let node = ctx.broker.node_id();
    let answer = |key: &ByteString| -> Coordinator {
        if request.key_type == KEY_TYPE_GROUP || request.key_type == KEY_TYPE_TRANSACTION {
            if key.is_empty() {
                let what = if request.key_type == KEY_TYPE_GROUP {
                    "the group ID is empty"
                } else {
                    "the transactional ID is empty"
                };
                return Coordinator {
                    key: key.clone(),
                    node_id: -1,
                    host: bs(""),
                    port: -1,
                    error_code: error_codes::INVALID_REQUEST,
                    error_message: Some(bs(what)),
                    ..Default::default()
                };
            }
            Coordinator {
                key: key.clone(),
                node_id: node,
                host: bs(host),
                port: i32::from(*port),
                error_code: error_codes::NONE,
                error_message: None,
                ..Default::default()
            }
        } else {
            // Share groups have no coordinator here.
            Coordinator {
                key: key.clone(),
                node_id: -1,
                host: bs(""),
                port: -1,
                error_code: error_codes::COORDINATOR_NOT_AVAILABLE,
                error_message: Some(bs(
                    "Skiff coordinates consumer groups and transactions only",
                )),
                ..Default::default()
            }
        }
    };
    let response = if ctx.version >= 4 {
        FindCoordinatorResponse {
            coordinators: request.coordinator_keys.iter().map(answer).collect(),
            ..Default::default()
        }
    } else {
        let c = answer(&request.key);
        FindCoordinatorResponse {
            error_code: c.error_code,
            error_message: if ctx.version >= 1 {
                c.error_message
            } else {
                None
            },
            node_id: c.node_id,
            host: c.host,
            port: c.port,
            ..Default::default()
        }
    };
    Response::FindCoordinator(response)
}

// ---------------------------------------------------------------------------------------------
// KIP-848 consumer groups

fn heartbeat_error(e: GroupError) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse {
        error_code: e.code,
        error_message: Some(bs(&e.message)),
        member_epoch: -1,
        ..Default::default()
    }
}

pub fn consumer_group_heartbeat(
    ctx: &RequestContext,
    request: ConsumerGroupHeartbeatRequest,
) -> Response {
    let coordinator = &ctx.broker.groups;
    let response = (|| {
        consumer::validate_heartbeat(&request, ctx.version, &coordinator.config)?;
        let now = now_ms();
        let mut guard = coordinator.lock(&ctx.broker, now);
        let inner = &mut *guard;
        let group_id = request.group_id.to_string();
        match inner.groups.get(&group_id) {
            Some(Group::Consumer(_)) => {}
            Some(group) if group.is_empty() && request.member_epoch == 0 => {
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
        let host = client_host(ctx);
        let client = ClientInfo {
            client_id: ctx.client_id.as_deref().unwrap_or(""),
            client_host: &host,
        };
        let config = coordinator.group_config(inner, &group_id);
        let Inner { groups, topics, .. } = inner;
        let result = match groups.get_mut(&group_id) {
            Some(Group::Consumer(group)) => {
                group.heartbeat(&request, ctx.version, client, topics, &config, now)
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
        coordinator.after_change(inner, &group_id);
        if let (Ok(response), Some(instance)) = (&result, ctx.instance_id)
            && let Some(member) = &response.member_id
        {
            ctx.broker.clients.note_member(&group_id, member, instance);
        }
        result
    })();
    Response::ConsumerGroupHeartbeat(response.unwrap_or_else(heartbeat_error))
}

pub fn consumer_group_describe(
    ctx: &RequestContext,
    request: ConsumerGroupDescribeRequest,
) -> Response {
    let coordinator = &ctx.broker.groups;
    let inner = coordinator.lock(&ctx.broker, now_ms());
    let groups = request
        .group_ids
        .iter()
        .map(|id| match inner.groups.get(&**id) {
            Some(Group::Consumer(g)) => {
                let config = coordinator.group_config(&inner, id);
                let mut described = g.describe(&inner.topics, &config);
                described.authorized_operations = if request.include_authorized_operations {
                    super::metadata::group_authorized_operations()
                } else {
                    i32::MIN
                };
                described
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
        .collect();
    Response::ConsumerGroupDescribe(ConsumerGroupDescribeResponse {
        groups,
        ..Default::default()
    })
}

// ---------------------------------------------------------------------------------------------
// Classic groups

/// Waits for a parked classic request's answer; on shutdown answers NOT_COORDINATOR so the
/// client looks for the coordinator again.
fn parked(
    ctx: &RequestContext,
    request: Request,
    receiver: tokio::sync::oneshot::Receiver<ClassicResponse>,
) -> Reply {
    let version = ctx.version;
    let mut shutdown = ctx.shutdown.clone();
    Reply::Later(Box::pin(async move {
        let fallback =
            |code| skiff_protocol::error_response::error_response(&request, version, code, None);
        tokio::select! {
            answer = receiver => match answer {
                Ok(ClassicResponse::Join(r)) => Response::JoinGroup(r),
                Ok(ClassicResponse::Sync(r)) => Response::SyncGroup(r),
                Err(_) => fallback(error_codes::NOT_COORDINATOR),
            },
            _ = crate::shutdown::stopped(&mut shutdown) => fallback(error_codes::NOT_COORDINATOR),
        }
    }))
}

fn classic_error(ctx: &RequestContext, request: &Request, code: i16) -> Reply {
    Reply::Now(skiff_protocol::error_response::error_response(
        request,
        ctx.version,
        code,
        None,
    ))
}

pub fn join_group(ctx: &RequestContext, request: JoinGroupRequest) -> Reply {
    let coordinator = &ctx.broker.groups;
    let group_id = request.group_id.to_string();
    let as_request = Request::JoinGroup(request.clone());
    if group_id.is_empty() {
        return classic_error(ctx, &as_request, error_codes::INVALID_GROUP_ID);
    }
    let now = now_ms();
    let mut guard = coordinator.lock(&ctx.broker, now);
    let inner = &mut *guard;
    match inner.groups.get(&group_id) {
        Some(Group::Classic(_)) => {}
        Some(Group::Consumer(g)) if !g.is_empty() => {
            return classic_error(ctx, &as_request, error_codes::INCONSISTENT_GROUP_PROTOCOL);
        }
        _ if !request.member_id.is_empty() => {
            return classic_error(ctx, &as_request, error_codes::UNKNOWN_MEMBER_ID);
        }
        _ => {
            inner.groups.insert(
                group_id.clone(),
                Group::Classic(ClassicGroup::new(&group_id, now)),
            );
        }
    }
    let token = coordinator.next_token();
    let receiver = coordinator.park(inner, token);
    let host = client_host(ctx);
    let completions = match inner.groups.get_mut(&group_id) {
        Some(Group::Classic(group)) => group.join(
            &request,
            ctx.version,
            ctx.client_id.as_deref().unwrap_or(""),
            &host,
            token,
            &coordinator.config,
            now,
        ),
        _ => Vec::new(),
    };
    coordinator.deliver(inner, completions);
    coordinator.after_change(inner, &group_id);
    drop(guard);
    parked(ctx, as_request, receiver)
}

pub fn sync_group(ctx: &RequestContext, request: SyncGroupRequest) -> Reply {
    let coordinator = &ctx.broker.groups;
    let group_id = request.group_id.to_string();
    let as_request = Request::SyncGroup(request.clone());
    let now = now_ms();
    let mut guard = coordinator.lock(&ctx.broker, now);
    let inner = &mut *guard;
    if !matches!(inner.groups.get(&group_id), Some(Group::Classic(_))) {
        return classic_error(ctx, &as_request, error_codes::UNKNOWN_MEMBER_ID);
    }
    let token = coordinator.next_token();
    let receiver = coordinator.park(inner, token);
    let completions = match inner.groups.get_mut(&group_id) {
        Some(Group::Classic(group)) => group.sync(&request, ctx.version, token, now),
        _ => Vec::new(),
    };
    coordinator.deliver(inner, completions);
    coordinator.after_change(inner, &group_id);
    drop(guard);
    parked(ctx, as_request, receiver)
}

pub fn heartbeat(ctx: &RequestContext, request: HeartbeatRequest) -> Response {
    let coordinator = &ctx.broker.groups;
    let group_id = request.group_id.to_string();
    let now = now_ms();
    let mut guard = coordinator.lock(&ctx.broker, now);
    let inner = &mut *guard;
    if let Some(instance) = ctx.instance_id {
        ctx.broker
            .clients
            .note_member(&group_id, &request.member_id, instance);
    }
    let response = match inner.groups.get_mut(&group_id) {
        Some(Group::Classic(group)) => group.heartbeat(&request, ctx.version, now),
        _ => HeartbeatResponse {
            error_code: error_codes::UNKNOWN_MEMBER_ID,
            ..Default::default()
        },
    };
    coordinator.after_change(inner, &group_id);
    Response::Heartbeat(response)
}

pub fn leave_group(ctx: &RequestContext, request: LeaveGroupRequest) -> Response {
    let coordinator = &ctx.broker.groups;
    let group_id = request.group_id.to_string();
    let now = now_ms();
    let mut guard = coordinator.lock(&ctx.broker, now);
    let inner = &mut *guard;
    let response = match inner.groups.get_mut(&group_id) {
        Some(Group::Classic(group)) => {
            let (response, completions) = group.leave(&request, ctx.version, now);
            coordinator.deliver(inner, completions);
            Response::LeaveGroup(response)
        }
        _ => skiff_protocol::error_response::error_response(
            &Request::LeaveGroup(request),
            ctx.version,
            error_codes::UNKNOWN_MEMBER_ID,
            None,
        ),
    };
    coordinator.after_change(inner, &group_id);
    response
}

// ---------------------------------------------------------------------------------------------
// Offsets

/// Checks a commit against the group; creates an empty classic group for "simple" commits
/// (negative generation, no member) as Kafka does.
fn validate_commit(
    inner: &mut Inner,
    group_id: &str,
    request: &OffsetCommitRequest,
    version: i16,
    now: i64,
) -> Result<(), i16> {
    let generation = request.generation_id_or_member_epoch;
    let member = request.member_id.as_ref();
    match inner.groups.get_mut(group_id) {
        Some(Group::Consumer(g)) => g
            .validate_offset_commit(member, generation, version)
            .map_err(|e| e.code),
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
        None if version >= 9 => Err(error_codes::GROUP_ID_NOT_FOUND),
        None => Err(error_codes::ILLEGAL_GENERATION),
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
) -> Result<(), i16> {
    let anonymous = member_id.is_empty() && generation < 0;
    match inner.groups.get_mut(group_id) {
        Some(Group::Classic(_)) if anonymous => Ok(()),
        Some(Group::Classic(g)) => {
            g.validate_offset_commit(member_id, generation, instance_id)
                .map_err(|e| e.code)?;
            g.on_offset_commit(member_id, now);
            Ok(())
        }
        Some(Group::Consumer(g)) => {
            g.validate_offset_commit(member_id, generation, 9)
                .map_err(|e| match e.code {
                    // A transactional commit wants the exact epoch (Kafka: ILLEGAL_GENERATION).
                    error_codes::STALE_MEMBER_EPOCH => error_codes::ILLEGAL_GENERATION,
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

pub fn offset_commit(ctx: &RequestContext, request: OffsetCommitRequest) -> Reply {
    let coordinator = &ctx.broker.groups;
    let group_id = request.group_id.to_string();
    let now = now_ms();
    let by_id = ctx.version >= 10;
    let mut guard = coordinator.lock(&ctx.broker, now);
    let inner = &mut *guard;
    let group_error = if group_id.is_empty() {
        Err(error_codes::INVALID_GROUP_ID)
    } else {
        validate_commit(inner, &group_id, &request, ctx.version, now)
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
                        (Err(code), _) => *code,
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
                                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
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
        coordinator
            .store_offsets(inner, &group_id, commits)
            .map(Some)
    };
    coordinator.after_change(inner, &group_id);
    drop(guard);
    let mut response = OffsetCommitResponse {
        topics,
        ..Default::default()
    };
    let end = match stored {
        Ok(None) => return Reply::Now(Response::OffsetCommit(response)),
        Ok(Some(end)) => end,
        Err(e) => {
            tracing::error!(group = %group_id, error = %e, "cannot store offsets");
            set_commit_errors(&mut response, error_codes::KAFKA_STORAGE_ERROR);
            return Reply::Now(Response::OffsetCommit(response));
        }
    };
    let broker = std::sync::Arc::clone(&ctx.broker);
    Reply::Later(Box::pin(async move {
        if let Err(e) = broker.groups.wait_durable(end).await {
            tracing::error!(error = %e, "group log sync failed");
            set_commit_errors(&mut response, error_codes::KAFKA_STORAGE_ERROR);
        }
        Response::OffsetCommit(response)
    }))
}

fn set_commit_errors(response: &mut OffsetCommitResponse, code: i16) {
    for topic in &mut response.topics {
        for p in &mut topic.partitions {
            if p.error_code == error_codes::NONE {
                p.error_code = code;
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
) -> Result<(), i16> {
    match inner.groups.get(group_id) {
        Some(Group::Consumer(g)) => g.validate_offset_fetch(member, epoch).map_err(|e| e.code),
        Some(Group::Classic(g)) => g.validate_offset_fetch().map_err(|e| e.code),
        None => Ok(()),
    }
}

pub fn offset_fetch(ctx: &RequestContext, request: OffsetFetchRequest) -> Response {
    let coordinator = &ctx.broker.groups;
    // v7+: with `require_stable`, offsets a transaction in progress will commit are unstable.
    // Read from the transaction coordinator before the group lock (never both at once).
    let unstable = |group_id: &str| -> BTreeSet<(String, i32)> {
        if ctx.version >= 7 && request.require_stable {
            ctx.broker.txns.lock().state.pending_offsets(group_id)
        } else {
            BTreeSet::new()
        }
    };
    let unstable_by_group: BTreeMap<String, BTreeSet<(String, i32)>> = if ctx.version < 8 {
        BTreeMap::from([(request.group_id.to_string(), unstable(&request.group_id))])
    } else {
        request
            .groups
            .iter()
            .map(|g| (g.group_id.to_string(), unstable(&g.group_id)))
            .collect()
    };
    let no_unstable = BTreeSet::new();
    let unstable_of = |group_id: &str| unstable_by_group.get(group_id).unwrap_or(&no_unstable);
    let inner = coordinator.lock(&ctx.broker, now_ms());
    if ctx.version < 8 {
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
                        .map(
                            |(p, offset, epoch, metadata, code)| OffsetFetchResponsePartition {
                                partition_index: p,
                                committed_offset: offset,
                                committed_leader_epoch: epoch,
                                metadata: Some(bs(&metadata)),
                                error_code: code,
                                ..Default::default()
                            },
                        )
                        .collect(),
                    ..Default::default()
                })
                .collect(),
        };
        return Response::OffsetFetch(OffsetFetchResponse {
            topics,
            error_code: error.unwrap_or(error_codes::NONE),
            ..Default::default()
        });
    }
    let by_id = ctx.version >= 10;
    let groups = request
        .groups
        .iter()
        .map(|g| {
            let group_id = g.group_id.to_string();
            let error =
                validate_fetch(&inner, &group_id, g.member_id.as_deref(), g.member_epoch).err();
            let unstable = unstable_of(&group_id);
            let found = |(name, rows): (String, Vec<FetchedOffset>)| OffsetFetchResponseTopics {
                topic_id: inner
                    .topics
                    .by_name
                    .get(&name)
                    .map_or(Uuid::ZERO, |(id, _)| *id),
                name: bs(&name),
                partitions: rows
                    .into_iter()
                    .map(
                        |(p, offset, epoch, metadata, code)| OffsetFetchResponsePartitions {
                            partition_index: p,
                            committed_offset: offset,
                            committed_leader_epoch: epoch,
                            metadata: Some(bs(&metadata)),
                            error_code: code,
                            ..Default::default()
                        },
                    )
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
                error_code: error.unwrap_or(error_codes::NONE),
                ..Default::default()
            }
        })
        .collect();
    Response::OffsetFetch(OffsetFetchResponse {
        groups,
        ..Default::default()
    })
}

pub fn offset_delete(ctx: &RequestContext, request: OffsetDeleteRequest) -> Response {
    let coordinator = &ctx.broker.groups;
    let group_id = request.group_id.to_string();
    let mut guard = coordinator.lock(&ctx.broker, now_ms());
    let inner = &mut *guard;
    let group_known = inner.groups.contains_key(&group_id) || inner.offsets.has_offsets(&group_id);
    if !group_known {
        return Response::OffsetDelete(OffsetDeleteResponse {
            error_code: error_codes::GROUP_ID_NOT_FOUND,
            ..Default::default()
        });
    }
    let subscribed = |topic: &str| match inner.groups.get(&group_id) {
        // By name or through a regex.
        Some(Group::Consumer(g)) => g.is_subscribed_to(topic),
        // A classic group's subscriptions are opaque here: any active member counts.
        Some(Group::Classic(g)) => !g.is_empty(),
        None => false,
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
    if let Err(e) = coordinator.delete_offsets(inner, &group_id, &to_delete) {
        tracing::error!(group = %group_id, error = %e, "cannot delete offsets");
        return Response::OffsetDelete(OffsetDeleteResponse {
            error_code: error_codes::UNKNOWN_SERVER_ERROR,
            ..Default::default()
        });
    }
    Response::OffsetDelete(OffsetDeleteResponse {
        topics,
        ..Default::default()
    })
}

// ---------------------------------------------------------------------------------------------
// Listing, describing, deleting

pub fn list_groups(ctx: &RequestContext, request: ListGroupsRequest) -> Response {
    let inner = ctx.broker.groups.lock(&ctx.broker, now_ms());
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
            }),
            group_state: bs(g.state_name()),
            group_type: bs(g.type_name()),
            ..Default::default()
        })
        .collect();
    groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    Response::ListGroups(ListGroupsResponse {
        groups,
        ..Default::default()
    })
}

pub fn describe_groups(ctx: &RequestContext, request: DescribeGroupsRequest) -> Response {
    let inner = ctx.broker.groups.lock(&ctx.broker, now_ms());
    let groups = request
        .groups
        .iter()
        .map(|id| {
            let mut described = match inner.groups.get(&**id) {
                Some(Group::Classic(g)) => g.describe(),
                // Not a classic group (a consumer group, or none): Kafka's GroupIdNotFound
                // answer. KIP-1043: v6+ carries GROUP_ID_NOT_FOUND; older versions only "Dead".
                other if ctx.version >= 6 => ClassicDescribed {
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
            };
            described.authorized_operations = if request.include_authorized_operations {
                super::metadata::group_authorized_operations()
            } else {
                i32::MIN
            };
            described
        })
        .collect();
    Response::DescribeGroups(DescribeGroupsResponse {
        groups,
        ..Default::default()
    })
}

pub fn delete_groups(ctx: &RequestContext, request: DeleteGroupsRequest) -> Response {
    use skiff_protocol::generated::delete_groups_response::DeletableGroupResult;
    let coordinator = &ctx.broker.groups;
    let mut guard = coordinator.lock(&ctx.broker, now_ms());
    let inner = &mut *guard;
    let results = request
        .groups_names
        .iter()
        .map(|id| {
            let group_id = id.to_string();
            let code = match inner.groups.get(&group_id) {
                Some(g) if !g.is_empty() => error_codes::NON_EMPTY_GROUP,
                None if !inner.offsets.has_offsets(&group_id) => error_codes::GROUP_ID_NOT_FOUND,
                _ => {
                    inner.groups.remove(&group_id);
                    let keys: Vec<OffsetKey> = GroupCoordinator::offsets_of(inner, &group_id)
                        .into_keys()
                        .collect();
                    match coordinator.delete_offsets(inner, &group_id, &keys) {
                        Ok(()) => {
                            coordinator.after_change(inner, &group_id);
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
    Response::DeleteGroups(DeleteGroupsResponse {
        results,
        ..Default::default()
    })
}
