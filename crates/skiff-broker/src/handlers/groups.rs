//! Group APIs: FindCoordinator, ConsumerGroupHeartbeat/Describe (KIP-848 with KIP-1082 member
//! IDs), the classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup, OffsetCommit/Fetch/Delete, and
//! List/Describe/DeleteGroups.
//!
//! Each handler maps its request to a [`crate::groups::GroupCoordinator`] method (which owns
//! the choreography: get or create the group, run its state machine, deliver parked answers,
//! persist) and its result to the response; what belongs to the connection stays here: the
//! client's host, the KIP-1313 instance noted for a member, parked answers on shutdown, and
//! waiting for the group log before answering a commit.
//!
//! Authorization is checked here, before the coordinator sees a request, as Kafka's `KafkaApis`
//! checks it: READ on the group to join, sync, heartbeat, leave or commit; DESCRIBE on it to find
//! its coordinator, fetch its offsets or describe it; DELETE on it to delete it or its offsets;
//! and per topic READ to commit or delete offsets, DESCRIBE to fetch them or subscribe by name.

use std::collections::{BTreeMap, BTreeSet};

use skiff_auth::acl::{AclOperation, ResourceType};

use crate::config::InstanceBinding;
use crate::owners::Claim;
use skiff_group::GroupError;
use skiff_group::classic::ClassicResponse;
use skiff_group::consumer::ClientInfo;
use skiff_protocol::generated::consumer_group_describe_response::{
    ConsumerGroupDescribeResponse, DescribedGroup as ConsumerDescribed,
};
use skiff_protocol::generated::delete_groups_response::{
    DeletableGroupResult, DeleteGroupsResponse,
};
use skiff_protocol::generated::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup as ClassicDescribed,
};
use skiff_protocol::generated::find_coordinator_response::{Coordinator, FindCoordinatorResponse};
use skiff_protocol::generated::offset_commit_request::OffsetCommitRequestTopic;
use skiff_protocol::generated::offset_commit_response::{
    OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use skiff_protocol::generated::offset_delete_request::OffsetDeleteRequestTopic;
use skiff_protocol::generated::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use skiff_protocol::generated::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
};
use skiff_protocol::generated::{
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest,
};
use skiff_protocol::{ByteString, ErrorCode, Request, Response, error_codes};

use super::{Reply, RequestContext, bs};
use crate::clock::now_ms;
use crate::groups::requests::Joiner;

/// FindCoordinator key types.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// The messages of Kafka's authorization exceptions.
pub(super) const GROUP_DENIED: &str = "Group authorization failed.";
const TRANSACTIONAL_ID_DENIED: &str = "Transactional Id authorization failed.";
const TOPIC_DENIED: &str = "Topic authorization failed.";

pub(super) fn client_host(ctx: &RequestContext) -> String {
    format!("/{}", ctx.peer.ip())
}

/// Kafka's answer to a request refused as a whole: its `getErrorResponse` with `code`.
fn refused(ctx: &RequestContext, request: &Request, code: ErrorCode) -> Response {
    skiff_protocol::error_response::error_response(request, ctx.version, code.code(), None)
}

/// Whether the request may do `operation` on the group.
pub(super) fn on_group(ctx: &RequestContext, operation: AclOperation, group_id: &str) -> bool {
    ctx.authorized(operation, ResourceType::Group, group_id)
}

/// Whether the request may do `operation` on the topic.
pub(super) fn on_topic(ctx: &RequestContext, operation: AclOperation, topic: &str) -> bool {
    ctx.authorized(operation, ResourceType::Topic, topic)
}

/// Skiff's rule beyond Kafka (on unless `client.instance.id.binding = off`): a member ID, and a
/// static member's `group.instance.id`, belongs to the principal that first named it in the
/// group. Whether this request's principal names one that is someone else's: it is then answered
/// UNKNOWN_MEMBER_ID (Kafka's answer to an ID that is not yours) and the owner keeps its
/// assignment.
pub(super) fn names_anothers_member(
    ctx: &RequestContext,
    group: &str,
    member_id: &str,
    instance_id: Option<&str>,
) -> bool {
    if ctx.broker.config.security.instance_binding == InstanceBinding::Off {
        return false;
    }
    let owners = &ctx.broker.security.owners;
    let static_key = instance_id.map(|id| format!("{STATIC_MEMBER}{id}"));
    [Some(member_id), static_key.as_deref()]
        .into_iter()
        .flatten()
        .filter(|id| !id.is_empty())
        .any(|id| {
            let new = !owners.member_owned(group, id);
            match owners.claim_member(group, id, &ctx.principal) {
                Claim::Owner => {
                    if new {
                        store_owner(&ctx.broker, group, id, Some(&ctx.principal));
                    }
                    false
                }
            Claim::Conflict { owner } => {
                tracing::warn!(
                    group,
                    member = id,
                    principal = %ctx.principal,
                    %owner,
                    "a group member owned by another principal was named; answered UNKNOWN_MEMBER_ID"
                );
                    true
                }
            }
        })
}

/// Cluster mode with identities bound: the group's coordinator stores who owns a member ID (or
/// that nobody does any more) with the group, for the group's next coordinator.
pub(super) fn store_owner(
    broker: &crate::state::Broker,
    group: &str,
    member: &str,
    principal: Option<&skiff_auth::principal::KafkaPrincipal>,
) {
    if broker.cluster().is_some() && broker.config.security.instance_binding != InstanceBinding::Off
    {
        let principal = principal.map(ToString::to_string);
        broker
            .groups
            .store_member_owner(group, member, principal.as_deref());
    }
}

/// Static members' instance IDs live beside member IDs in the ownership map, marked so.
const STATIC_MEMBER: &str = "group.instance.id:";

/// Answers each of `items` in order: those `allowed` passes all at once with `answer` (which
/// answers each of them, in order), the others one by one with `denied`.
pub(super) fn answer_allowed<I: Clone, T>(
    items: &[I],
    allowed: impl Fn(&I) -> bool,
    answer: impl FnOnce(Vec<I>) -> Vec<T>,
    denied: impl Fn(&I) -> T,
) -> Vec<T> {
    answer_checked(
        items,
        |item| (!allowed(item)).then_some(()),
        answer,
        |item, ()| denied(item),
    )
}

/// [`answer_allowed`] with a reason per refusal: `check` says why an item is refused (`None`:
/// it passes), and `denied` answers it with that reason.
pub(super) fn answer_checked<I: Clone, T, R>(
    items: &[I],
    check: impl Fn(&I) -> Option<R>,
    answer: impl FnOnce(Vec<I>) -> Vec<T>,
    denied: impl Fn(&I, R) -> T,
) -> Vec<T> {
    let verdicts: Vec<Option<R>> = items.iter().map(check).collect();
    let passed = items
        .iter()
        .zip(&verdicts)
        .filter(|(_, refusal)| refusal.is_none())
        .map(|(item, _)| item.clone())
        .collect();
    let mut answers = answer(passed).into_iter();
    items
        .iter()
        .zip(verdicts)
        .filter_map(|(item, refusal)| match refusal {
            None => answers.next(),
            Some(reason) => Some(denied(item, reason)),
        })
        .collect()
}

/// Cluster mode: why this broker cannot coordinate `group_id` now (NOT_COORDINATOR, or
/// COORDINATOR_LOAD_IN_PROGRESS while its shard loads); `None` on a single node.
pub(super) fn not_coordinating(ctx: &RequestContext, id: &str) -> Option<ErrorCode> {
    ctx.broker.cluster()?.coordination.refusal(id)
}

/// The refusal of a group in a batch: `operation` denied, or not coordinated here.
pub(super) fn group_refusal(
    ctx: &RequestContext,
    operation: AclOperation,
    group_id: &str,
) -> Option<i16> {
    if !on_group(ctx, operation, group_id) {
        return Some(error_codes::GROUP_AUTHORIZATION_FAILED);
    }
    not_coordinating(ctx, group_id).map(ErrorCode::code)
}

/// Answers `response` once what the coordinator wrote about `group_id` is durable (cluster
/// mode: in PostgreSQL under the shard's epoch; a single node answers at once), else
/// `failed`'s answer with the code (NOT_COORDINATOR: the client finds the coordinator again).
pub(super) fn settled(
    ctx: &RequestContext,
    group_id: &str,
    response: Response,
    failed: impl FnOnce(ErrorCode) -> Response + Send + 'static,
) -> Reply {
    if ctx.broker.cluster().is_none() {
        return Reply::Now(response);
    }
    let broker = std::sync::Arc::clone(&ctx.broker);
    let group_id = group_id.to_string();
    Reply::Later(Box::pin(async move {
        match broker.groups.settle(&group_id).await {
            Ok(()) => response,
            Err(code) => failed(code),
        }
    }))
}

/// [`settled`] whose failure is the request's generic error answer.
fn settled_or_error(ctx: &RequestContext, request: Request, response: Response) -> Reply {
    let group_id = request_group(&request).unwrap_or_default();
    let version = ctx.version;
    settled(ctx, &group_id, response, move |code| {
        skiff_protocol::error_response::error_response(&request, version, code.code(), None)
    })
}

/// The group a single-group request names.
fn request_group(request: &Request) -> Option<String> {
    Some(
        match request {
            Request::Heartbeat(r) => &r.group_id,
            Request::LeaveGroup(r) => &r.group_id,
            Request::OffsetDelete(r) => &r.group_id,
            Request::JoinGroup(r) => &r.group_id,
            Request::SyncGroup(r) => &r.group_id,
            _ => return None,
        }
        .to_string(),
    )
}

// ---------------------------------------------------------------------------------------------
// FindCoordinator

/// Kafka's check before naming a coordinator: DESCRIBE on the group or transactional ID. The
/// refusal's code and message.
fn coordinator_refusal(
    ctx: &RequestContext,
    key_type: i8,
    key: &str,
) -> Option<(i16, &'static str)> {
    match key_type {
        KEY_TYPE_GROUP if !on_group(ctx, AclOperation::Describe, key) => {
            Some((error_codes::GROUP_AUTHORIZATION_FAILED, GROUP_DENIED))
        }
        KEY_TYPE_TRANSACTION
            if !ctx.authorized(AclOperation::Describe, ResourceType::TransactionalId, key) =>
        {
            Some((
                error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                TRANSACTIONAL_ID_DENIED,
            ))
        }
        _ => None,
    }
}

/// A FindCoordinator answer naming no coordinator.
fn no_coordinator(key: &ByteString, error_code: i16, message: &str) -> Coordinator {
    Coordinator {
        key: key.clone(),
        node_id: -1,
        host: bs(""),
        port: -1,
        error_code,
        error_message: Some(bs(message)),
        ..Default::default()
    }
}

pub fn find_coordinator(ctx: &RequestContext, request: FindCoordinatorRequest) -> Response {
    let (host, port) = ctx.broker.advertised_for(ctx.listener);
    let node = ctx.broker.node_id();
    let answer = |key: &ByteString| -> Coordinator {
        if let Some((code, message)) = coordinator_refusal(ctx, request.key_type, key) {
            return no_coordinator(key, code, message);
        }
        match request.key_type {
            KEY_TYPE_GROUP if key.is_empty() => {
                no_coordinator(key, error_codes::INVALID_REQUEST, "the group ID is empty")
            }
            KEY_TYPE_TRANSACTION if key.is_empty() => no_coordinator(
                key,
                error_codes::INVALID_REQUEST,
                "the transactional ID is empty",
            ),
            // Cluster mode: groups and transactional IDs hash onto the same shards.
            KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION if ctx.broker.cluster().is_some() => {
                match ctx.broker.group_coordinator(key, ctx.listener) {
                    Some(n) => Coordinator {
                        key: key.clone(),
                        node_id: n.node_id,
                        host: bs(&n.host),
                        port: n.port,
                        error_code: error_codes::NONE,
                        error_message: None,
                        ..Default::default()
                    },
                    None => no_coordinator(
                        key,
                        error_codes::COORDINATOR_NOT_AVAILABLE,
                        "no broker is live",
                    ),
                }
            }
            KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION => Coordinator {
                key: key.clone(),
                node_id: node,
                host: bs(host),
                port: i32::from(port),
                error_code: error_codes::NONE,
                error_message: None,
                ..Default::default()
            },
            // Share groups have no coordinator here.
            _ => no_coordinator(
                key,
                error_codes::COORDINATOR_NOT_AVAILABLE,
                "Skiff coordinates consumer groups and transactions only",
            ),
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
        error_code: e.code.code(),
        error_message: Some(bs(&e.message)),
        member_epoch: -1,
        ..Default::default()
    }
}

/// Kafka's checks before a ConsumerGroupHeartbeat: READ on the group, and DESCRIBE on every
/// topic subscribed to by name.
fn heartbeat_refusal(
    ctx: &RequestContext,
    request: &ConsumerGroupHeartbeatRequest,
) -> Option<GroupError> {
    if !on_group(ctx, AclOperation::Read, &request.group_id) {
        return Some(GroupError::new(
            error_codes::GROUP_AUTHORIZATION_FAILED,
            GROUP_DENIED,
        ));
    }
    let subscribed: BTreeSet<&str> = request
        .subscribed_topic_names
        .iter()
        .flatten()
        .map(|name| &**name)
        .collect();
    let describable = subscribed
        .into_iter()
        .all(|name| on_topic(ctx, AclOperation::Describe, name));
    (!describable).then(|| GroupError::new(error_codes::TOPIC_AUTHORIZATION_FAILED, TOPIC_DENIED))
}

pub fn consumer_group_heartbeat(
    ctx: &RequestContext,
    request: ConsumerGroupHeartbeatRequest,
) -> Reply {
    if let Some(refusal) = heartbeat_refusal(ctx, &request) {
        return Response::ConsumerGroupHeartbeat(heartbeat_error(refusal)).into();
    }
    if let Some(code) = not_coordinating(ctx, &request.group_id) {
        return Response::ConsumerGroupHeartbeat(heartbeat_error(GroupError::new(
            code.code(),
            "this broker does not coordinate the group now",
        )))
        .into();
    }
    if names_anothers_member(
        ctx,
        &request.group_id,
        &request.member_id,
        request.instance_id.as_deref(),
    ) {
        return Response::ConsumerGroupHeartbeat(heartbeat_error(GroupError::new(
            error_codes::UNKNOWN_MEMBER_ID,
            "this member ID belongs to another principal",
        )))
        .into();
    }
    let host = client_host(ctx);
    let client = ClientInfo {
        client_id: ctx.client_id.as_deref().unwrap_or(""),
        client_host: &host,
    };
    let result =
        ctx.broker
            .groups
            .consumer_heartbeat(&ctx.broker, &request, ctx.version, client, now_ms());
    super::journaling::heartbeat(
        ctx,
        &request.group_id,
        "consumer",
        &request.member_id,
        request.member_epoch,
        result.as_ref().map_err(|e| e.code.code()),
    );
    if let (Ok(response), Some(instance)) = (&result, ctx.instance_id)
        && let Some(member) = &response.member_id
    {
        ctx.broker
            .clients
            .note_member(&request.group_id, member, instance);
    }
    if let Ok(response) = &result
        && let Some(member) = &response.member_id
    {
        if request.member_epoch < 0 {
            // Left (-1) or, for a static member, left for now (-2): the ID is free again.
            ctx.broker
                .security
                .owners
                .forget_member(&request.group_id, member);
            store_owner(&ctx.broker, &request.group_id, member, None);
        } else if request.member_id.is_empty() {
            // A v0 member's ID is the broker's: it is its principal's from the first answer (an
            // ID the request named was claimed before the coordinator saw it).
            names_anothers_member(ctx, &request.group_id, member, None);
        }
    }
    settled(
        ctx,
        &request.group_id,
        Response::ConsumerGroupHeartbeat(result.unwrap_or_else(heartbeat_error)),
        |code| {
            Response::ConsumerGroupHeartbeat(heartbeat_error(GroupError::new(
                code.code(),
                "the group's state could not be stored",
            )))
        },
    )
}

pub fn consumer_group_describe(
    ctx: &RequestContext,
    mut request: ConsumerGroupDescribeRequest,
) -> Response {
    let ids = std::mem::take(&mut request.group_ids);
    let mut groups = answer_checked(
        &ids,
        |id| group_refusal(ctx, AclOperation::Describe, id),
        |allowed| {
            request.group_ids = allowed;
            ctx.broker
                .groups
                .consumer_describe(&ctx.broker, &request, now_ms())
        },
        |id, code| ConsumerDescribed {
            group_id: id.clone(),
            error_code: code,
            ..Default::default()
        },
    );
    if request.include_authorized_operations {
        for group in &mut groups {
            if group.error_code == error_codes::NONE {
                group.authorized_operations =
                    ctx.authorized_operations(ResourceType::Group, &group.group_id);
            }
        }
    }
    hide_undescribable_assignments(ctx, &mut groups);
    Response::ConsumerGroupDescribe(ConsumerGroupDescribeResponse {
        groups,
        ..Default::default()
    })
}

/// As Kafka, a described group whose members' assignments or target assignments name a topic
/// the principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED instead.
fn hide_undescribable_assignments(ctx: &RequestContext, groups: &mut [ConsumerDescribed]) {
    let assigned = |group: &ConsumerDescribed| -> BTreeSet<String> {
        group
            .members
            .iter()
            .flat_map(|m| [&m.assignment, &m.target_assignment])
            .flat_map(|a| &a.topic_partitions)
            .map(|tp| tp.topic_name.to_string())
            .collect()
    };
    let topics: BTreeSet<String> = groups.iter().flat_map(assigned).collect();
    let denied: BTreeSet<String> = topics
        .into_iter()
        .filter(|topic| !on_topic(ctx, AclOperation::Describe, topic))
        .collect();
    if denied.is_empty() {
        return;
    }
    for group in groups {
        if !assigned(group).is_disjoint(&denied) {
            *group = ConsumerDescribed {
                group_id: group.group_id.clone(),
                error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
                error_message: Some(bs(
                    "The group has described topic(s) that the client is not authorized to describe.",
                )),
                ..Default::default()
            };
        }
    }
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
    parked_then(ctx, request, receiver, |_| {})
}

/// [`parked`], running `then` on the answer before it goes out.
fn parked_then(
    ctx: &RequestContext,
    request: Request,
    receiver: tokio::sync::oneshot::Receiver<ClassicResponse>,
    then: impl FnOnce(&Response) + Send + 'static,
) -> Reply {
    let version = ctx.version;
    let mut shutdown = ctx.shutdown.clone();
    let broker = std::sync::Arc::clone(&ctx.broker);
    Reply::Later(Box::pin(async move {
        let fallback =
            |code| skiff_protocol::error_response::error_response(&request, version, code, None);
        let mut response = tokio::select! {
            answer = receiver => match answer {
                Ok(ClassicResponse::Join(r)) => Response::JoinGroup(r),
                Ok(ClassicResponse::Sync(r)) => Response::SyncGroup(r),
                Err(_) => fallback(error_codes::NOT_COORDINATOR),
            },
            _ = crate::shutdown::stopped(&mut shutdown) => fallback(error_codes::NOT_COORDINATOR),
        };
        // Cluster mode: the rebalance this answer reports is in PostgreSQL before it goes out.
        if broker.cluster().is_some()
            && let Some(group_id) = request_group(&request)
            && let Err(code) = broker.groups.settle(&group_id).await
        {
            response = fallback(code.code());
        }
        then(&response);
        response
    }))
}

/// The checks before JoinGroup, SyncGroup, Heartbeat and OffsetCommit, in Kafka's order: READ on
/// the group, a member ID that is not another principal's, a group this broker coordinates.
fn member_refusal(
    ctx: &RequestContext,
    group_id: &str,
    member_id: &str,
    instance_id: Option<&str>,
) -> Option<ErrorCode> {
    if !on_group(ctx, AclOperation::Read, group_id) {
        return Some(ErrorCode::GROUP_AUTHORIZATION_FAILED);
    }
    if names_anothers_member(ctx, group_id, member_id, instance_id) {
        return Some(ErrorCode::UNKNOWN_MEMBER_ID);
    }
    not_coordinating(ctx, group_id)
}

pub fn join_group(ctx: &RequestContext, request: JoinGroupRequest) -> Reply {
    if let Some(code) = member_refusal(
        ctx,
        &request.group_id,
        &request.member_id,
        request.group_instance_id.as_deref(),
    ) {
        return refused(ctx, &request.into(), code).into();
    }
    let host = client_host(ctx);
    let joiner = Joiner {
        client_id: ctx.client_id.as_deref().unwrap_or(""),
        client_host: &host,
    };
    let joined = ctx
        .broker
        .groups
        .join(&ctx.broker, &request, ctx.version, joiner, now_ms());
    let group = request.group_id.to_string();
    let as_request = Request::JoinGroup(request);
    match joined {
        Ok(receiver) => {
            // The member ID the coordinator gives out is this principal's from the answer on.
            let (broker, principal) = (
                std::sync::Arc::clone(&ctx.broker),
                std::sync::Arc::clone(&ctx.principal),
            );
            let instance = ctx.journal_instance();
            let speaker = ctx.instance_id;
            let claim = move |response: &Response| {
                if let Response::JoinGroup(r) = response
                    && r.error_code == 0
                    && !r.member_id.is_empty()
                {
                    // The member is this instance's from its join on (its heartbeats say so
                    // again), so the client-instance view files it there at once.
                    if let Some(speaker) = speaker {
                        broker.clients.note_member(&group, &r.member_id, speaker);
                    }
                    super::journaling::classic_joined(
                        &broker,
                        instance,
                        &group,
                        &r.member_id,
                        r.generation_id,
                    );
                }
                if let Response::JoinGroup(r) = response
                    && !r.member_id.is_empty()
                    && broker.config.security.instance_binding != InstanceBinding::Off
                {
                    let new = !broker.security.owners.member_owned(&group, &r.member_id);
                    let claim =
                        broker
                            .security
                            .owners
                            .claim_member(&group, &r.member_id, &principal);
                    if new && claim == Claim::Owner {
                        store_owner(&broker, &group, &r.member_id, Some(&principal));
                    }
                }
            };
            parked_then(ctx, as_request, receiver, claim)
        }
        Err(code) => refused(ctx, &as_request, code).into(),
    }
}

pub fn sync_group(ctx: &RequestContext, request: SyncGroupRequest) -> Reply {
    if let Some(code) = member_refusal(
        ctx,
        &request.group_id,
        &request.member_id,
        request.group_instance_id.as_deref(),
    ) {
        return refused(ctx, &request.into(), code).into();
    }
    let synced = ctx
        .broker
        .groups
        .sync(&ctx.broker, &request, ctx.version, now_ms());
    let as_request = Request::SyncGroup(request);
    match synced {
        Ok(receiver) => parked(ctx, as_request, receiver),
        Err(code) => refused(ctx, &as_request, code).into(),
    }
}

pub fn heartbeat(ctx: &RequestContext, request: HeartbeatRequest) -> Reply {
    if let Some(code) = member_refusal(
        ctx,
        &request.group_id,
        &request.member_id,
        request.group_instance_id.as_deref(),
    ) {
        return refused(ctx, &request.into(), code).into();
    }
    if let Some(instance) = ctx.instance_id {
        ctx.broker
            .clients
            .note_member(&request.group_id, &request.member_id, instance);
    }
    let answered = ctx
        .broker
        .groups
        .heartbeat(&ctx.broker, &request, ctx.version, now_ms());
    super::journaling::classic_answered(
        ctx,
        &request.group_id,
        &request.member_id,
        request.generation_id,
        answered.error_code,
    );
    let response = Response::Heartbeat(answered);
    settled_or_error(ctx, request.into(), response)
}

pub fn leave_group(ctx: &RequestContext, request: LeaveGroupRequest) -> Reply {
    if !on_group(ctx, AclOperation::Read, &request.group_id) {
        return refused(ctx, &request.into(), ErrorCode::GROUP_AUTHORIZATION_FAILED).into();
    }
    if let Some(code) = not_coordinating(ctx, &request.group_id) {
        return refused(ctx, &request.into(), code).into();
    }
    let leaving: Vec<(&str, Option<&str>)> = std::iter::once((&*request.member_id, None))
        .chain(
            request
                .members
                .iter()
                .map(|m| (&*m.member_id, m.group_instance_id.as_deref())),
        )
        .collect();
    if leaving
        .iter()
        .any(|(member, instance)| names_anothers_member(ctx, &request.group_id, member, *instance))
    {
        return refused(ctx, &request.into(), ErrorCode::UNKNOWN_MEMBER_ID).into();
    }
    match ctx
        .broker
        .groups
        .leave(&ctx.broker, &request, ctx.version, now_ms())
    {
        Ok(response) => {
            if response.error_code == 0 {
                let left: Vec<&str> = response
                    .members
                    .iter()
                    .filter(|m| m.error_code == 0)
                    .map(|m| &*m.member_id)
                    .chain(leaving.first().map(|(m, _)| *m))
                    .filter(|m| !m.is_empty())
                    .collect();
                super::journaling::classic_left(ctx, &request.group_id, &left);
            }
            let owners = &ctx.broker.security.owners;
            for (member, _) in leaving.iter().filter(|(m, _)| !m.is_empty()) {
                owners.forget_member(&request.group_id, member);
                store_owner(&ctx.broker, &request.group_id, member, None);
            }
            settled_or_error(ctx, request.into(), Response::LeaveGroup(response))
        }
        Err(code) => refused(ctx, &request.into(), code).into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Offsets

/// The name of a topic an OffsetCommit names: v10+ name topics by ID (`None`: an ID the broker
/// does not know, which the coordinator answers UNKNOWN_TOPIC_ID).
fn committed_topic_name(ctx: &RequestContext, topic: &OffsetCommitRequestTopic) -> Option<String> {
    if ctx.version >= 10 {
        ctx.broker
            .topic_by_id(topic.topic_id)
            .map(|t| t.info.name.clone())
    } else {
        Some(topic.name.to_string())
    }
}

/// Takes the topics the request may not READ out of an OffsetCommit, answered
/// TOPIC_AUTHORIZATION_FAILED.
fn take_unreadable_commits(
    ctx: &RequestContext,
    request: &mut OffsetCommitRequest,
) -> Vec<OffsetCommitResponseTopic> {
    let (readable, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut request.topics)
        .into_iter()
        .partition(|topic| {
            committed_topic_name(ctx, topic)
                .is_none_or(|name| on_topic(ctx, AclOperation::Read, &name))
        });
    request.topics = readable;
    denied
        .into_iter()
        .map(|topic| OffsetCommitResponseTopic {
            name: topic.name,
            topic_id: topic.topic_id,
            partitions: topic
                .partitions
                .iter()
                .map(|p| OffsetCommitResponsePartition {
                    partition_index: p.partition_index,
                    error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect()
}

pub fn offset_commit(ctx: &RequestContext, mut request: OffsetCommitRequest) -> Reply {
    if let Some(code) = member_refusal(
        ctx,
        &request.group_id,
        &request.member_id,
        request.group_instance_id.as_deref(),
    ) {
        return refused(ctx, &request.into(), code).into();
    }
    let denied = take_unreadable_commits(ctx, &mut request);
    if request.topics.is_empty() && !denied.is_empty() {
        // Nothing left to commit: Kafka does not ask the coordinator.
        return Response::OffsetCommit(OffsetCommitResponse {
            topics: denied,
            ..Default::default()
        })
        .into();
    }
    let (mut response, end) =
        ctx.broker
            .groups
            .commit(&ctx.broker, &request, ctx.version, now_ms());
    response.topics.extend(denied);
    let Some(end) = end else {
        return Reply::Now(Response::OffsetCommit(response));
    };
    let broker = std::sync::Arc::clone(&ctx.broker);
    Reply::Later(Box::pin(async move {
        if let Err(e) = broker.groups.wait_durable(end).await {
            tracing::error!(error = %e, "storing committed offsets failed");
            crate::groups::requests::set_commit_errors(&mut response, e.code());
        }
        Response::OffsetCommit(response)
    }))
}

/// The coordinator's answer to an OffsetFetch (of groups already authorized).
fn fetch_offsets(ctx: &RequestContext, request: &OffsetFetchRequest) -> OffsetFetchResponse {
    // v7+: with `require_stable`, offsets a transaction in progress will commit are unstable.
    // Read from the transaction coordinator before the group lock (never both at once).
    let unstable = |group_id: &str| -> BTreeSet<(String, i32)> {
        if ctx.version < 7 || !request.require_stable {
            return BTreeSet::new();
        }
        let Some(cluster) = ctx.broker.cluster() else {
            return ctx.broker.txns.pending_offsets(group_id);
        };
        // Cluster mode: transactional offsets wait beside the group in PostgreSQL until their
        // transaction ends and they are applied.
        let pending =
            crate::cluster::block_on(skiff_cluster::txn_offsets::pending(&cluster.db, group_id));
        match pending {
            Ok(Ok(pending)) => pending,
            Ok(Err(e)) => {
                tracing::warn!(group = group_id, error = %e, "reading pending transactional offsets failed");
                BTreeSet::new()
            }
            Err(e) => {
                tracing::warn!(
                    group = group_id,
                    error = e,
                    "reading pending transactional offsets failed"
                );
                BTreeSet::new()
            }
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
    ctx.broker.groups.fetch_offsets(
        &ctx.broker,
        request,
        ctx.version,
        &unstable_by_group,
        now_ms(),
    )
}

/// Kafka's topic rule for the offsets of a group: a fetch of all its offsets leaves out the
/// topics the request may not DESCRIBE; a fetch of named topics answers those `deny`
/// (TOPIC_AUTHORIZATION_FAILED). `name` is `None` for a topic ID the broker does not know.
fn screen_fetched_topics<T>(
    ctx: &RequestContext,
    topics: &mut Vec<T>,
    fetch_all: bool,
    name: impl Fn(&T) -> Option<&str>,
    deny: impl Fn(&mut T),
) {
    let allowed = |topic: &T| name(topic).is_none_or(|n| on_topic(ctx, AclOperation::Describe, n));
    if fetch_all {
        topics.retain(allowed);
    } else {
        for topic in topics.iter_mut().filter(|t| !allowed(t)) {
            deny(topic);
        }
    }
}

/// OffsetFetch v1-v7: one group.
fn offset_fetch_group(ctx: &RequestContext, request: OffsetFetchRequest) -> Response {
    if !on_group(ctx, AclOperation::Describe, &request.group_id) {
        return refused(ctx, &request.into(), ErrorCode::GROUP_AUTHORIZATION_FAILED);
    }
    if let Some(code) = not_coordinating(ctx, &request.group_id) {
        return refused(ctx, &request.into(), code);
    }
    let mut response = fetch_offsets(ctx, &request);
    if response.error_code == error_codes::NONE {
        screen_fetched_topics(
            ctx,
            &mut response.topics,
            request.topics.is_none(),
            |t| Some(&t.name),
            |t| {
                for p in &mut t.partitions {
                    *p = OffsetFetchResponsePartition {
                        partition_index: p.partition_index,
                        committed_offset: -1,
                        metadata: Some(bs("")),
                        error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
                        ..Default::default()
                    };
                }
            },
        );
    }
    Response::OffsetFetch(response)
}

/// OffsetFetch v8+: a batch of groups.
fn offset_fetch_groups(ctx: &RequestContext, mut request: OffsetFetchRequest) -> Response {
    let by_id = ctx.version >= 10;
    let requested = std::mem::take(&mut request.groups);
    let mut groups = answer_checked(
        &requested,
        |g| group_refusal(ctx, AclOperation::Describe, &g.group_id),
        |allowed| {
            request.groups = allowed;
            fetch_offsets(ctx, &request).groups
        },
        |g, code| OffsetFetchResponseGroup {
            group_id: g.group_id.clone(),
            error_code: code,
            ..Default::default()
        },
    );
    for (group, asked) in groups.iter_mut().zip(&requested) {
        if group.error_code != error_codes::NONE {
            continue;
        }
        screen_fetched_topics(
            ctx,
            &mut group.topics,
            asked.topics.is_none(),
            // v10: the coordinator answers an unknown topic ID without a name.
            |t| (!(by_id && t.name.is_empty())).then_some(&*t.name),
            |t| {
                for p in &mut t.partitions {
                    *p = OffsetFetchResponsePartitions {
                        partition_index: p.partition_index,
                        committed_offset: -1,
                        metadata: Some(bs("")),
                        error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
                        ..Default::default()
                    };
                }
            },
        );
    }
    Response::OffsetFetch(OffsetFetchResponse {
        groups,
        ..Default::default()
    })
}

pub fn offset_fetch(ctx: &RequestContext, request: OffsetFetchRequest) -> Response {
    if ctx.version < 8 {
        offset_fetch_group(ctx, request)
    } else {
        offset_fetch_groups(ctx, request)
    }
}

/// Takes the topics the request may not READ out of an OffsetDelete, answered
/// TOPIC_AUTHORIZATION_FAILED.
fn take_unreadable_deletions(
    ctx: &RequestContext,
    request: &mut OffsetDeleteRequest,
) -> Vec<OffsetDeleteResponseTopic> {
    let (readable, denied): (Vec<OffsetDeleteRequestTopic>, Vec<_>) =
        std::mem::take(&mut request.topics)
            .into_iter()
            .partition(|topic| on_topic(ctx, AclOperation::Read, &topic.name));
    request.topics = readable;
    denied
        .into_iter()
        .map(|topic| OffsetDeleteResponseTopic {
            name: topic.name,
            partitions: topic
                .partitions
                .iter()
                .map(|p| OffsetDeleteResponsePartition {
                    partition_index: p.partition_index,
                    error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect()
}

pub fn offset_delete(ctx: &RequestContext, mut request: OffsetDeleteRequest) -> Reply {
    if !on_group(ctx, AclOperation::Delete, &request.group_id) {
        return refused(ctx, &request.into(), ErrorCode::GROUP_AUTHORIZATION_FAILED).into();
    }
    if let Some(code) = not_coordinating(ctx, &request.group_id) {
        return refused(ctx, &request.into(), code).into();
    }
    let denied = take_unreadable_deletions(ctx, &mut request);
    let mut response = ctx
        .broker
        .groups
        .offset_delete(&ctx.broker, &request, now_ms());
    // A group-level error answers alone (Kafka's `OffsetDeleteResponse.Builder.merge`).
    if response.error_code == error_codes::NONE {
        response.topics.extend(denied);
    }
    settled_or_error(ctx, request.into(), Response::OffsetDelete(response))
}

// ---------------------------------------------------------------------------------------------
// Listing, describing, deleting

/// Every group to a principal that may DESCRIBE the cluster, else the groups it may DESCRIBE
/// (neither check logs a denial: they only choose what to show).
pub fn list_groups(ctx: &RequestContext, request: ListGroupsRequest) -> Response {
    let sees_all = ctx.allows_on_cluster(AclOperation::Describe);
    let mut response = ctx.broker.groups.list(&ctx.broker, &request, now_ms());
    if !sees_all {
        response
            .groups
            .retain(|g| ctx.allows(AclOperation::Describe, ResourceType::Group, &g.group_id));
    }
    Response::ListGroups(response)
}

pub fn describe_groups(ctx: &RequestContext, mut request: DescribeGroupsRequest) -> Response {
    let ids = std::mem::take(&mut request.groups);
    let mut groups = answer_checked(
        &ids,
        |id| group_refusal(ctx, AclOperation::Describe, id),
        |allowed| {
            request.groups = allowed;
            ctx.broker
                .groups
                .describe(&ctx.broker, &request, ctx.version, now_ms())
                .groups
        },
        |id, code| ClassicDescribed {
            group_id: id.clone(),
            error_code: code,
            ..Default::default()
        },
    );
    if ctx.version >= 3 && request.include_authorized_operations {
        for group in &mut groups {
            if group.error_code == error_codes::NONE {
                group.authorized_operations =
                    ctx.authorized_operations(ResourceType::Group, &group.group_id);
            }
        }
    }
    Response::DescribeGroups(DescribeGroupsResponse {
        groups,
        ..Default::default()
    })
}

pub fn delete_groups(ctx: &RequestContext, mut request: DeleteGroupsRequest) -> Reply {
    let names = std::mem::take(&mut request.groups_names);
    let results = answer_checked(
        &names,
        |id| group_refusal(ctx, AclOperation::Delete, id),
        |allowed| {
            request.groups_names = allowed;
            ctx.broker
                .groups
                .delete_groups(&ctx.broker, &request, now_ms())
                .results
        },
        |id, code| DeletableGroupResult {
            group_id: id.clone(),
            error_code: code,
            ..Default::default()
        },
    );
    if ctx.broker.cluster().is_none() {
        return Response::DeleteGroups(DeleteGroupsResponse {
            results,
            ..Default::default()
        })
        .into();
    }
    // Cluster mode: each deletion is answered once it is in PostgreSQL, with the transactional
    // offsets waiting beside the group gone too.
    let broker = std::sync::Arc::clone(&ctx.broker);
    Reply::Later(Box::pin(async move {
        let mut results = results;
        for result in &mut results {
            if result.error_code != error_codes::NONE {
                continue;
            }
            if let Err(code) = broker.groups.settle(&result.group_id).await {
                result.error_code = code.code();
            } else if let Some(cluster) = broker.cluster() {
                if let Err(e) =
                    skiff_cluster::txn_offsets::forget_group(&cluster.db, &result.group_id).await
                {
                    tracing::warn!(group = %result.group_id, error = %e, "forgetting a deleted group's transactional offsets failed");
                }
                // A share group's partition states, which their leaders keep beside the group.
                if let Err(e) =
                    skiff_cluster::share_states::delete(&cluster.db, &result.group_id, None).await
                {
                    tracing::warn!(group = %result.group_id, error = %e, "deleting a deleted share group's partition states failed");
                }
            }
        }
        Response::DeleteGroups(DeleteGroupsResponse {
            results,
            ..Default::default()
        })
    }))
}
