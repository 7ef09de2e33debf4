//! Group APIs: FindCoordinator, ConsumerGroupHeartbeat/Describe (KIP-848 with KIP-1082 member
//! IDs), the classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup, OffsetCommit/Fetch/Delete, and
//! List/Describe/DeleteGroups.
//!
//! Each handler maps its request to a [`crate::groups::GroupCoordinator`] method (which owns
//! the choreography: get or create the group, run its state machine, deliver parked answers,
//! persist) and its result to the response; what belongs to the connection stays here: the
//! client's host, the KIP-1313 instance noted for a member, parked answers on shutdown, and
//! waiting for the group log before answering a commit.

use std::collections::{BTreeMap, BTreeSet};

use skiff_group::GroupError;
use skiff_group::classic::ClassicResponse;
use skiff_group::consumer::ClientInfo;
use skiff_protocol::generated::consumer_group_describe_response::ConsumerGroupDescribeResponse;
use skiff_protocol::generated::find_coordinator_response::{Coordinator, FindCoordinatorResponse};
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

fn client_host(ctx: &RequestContext) -> String {
    format!("/{}", ctx.peer.ip())
}

// ---------------------------------------------------------------------------------------------
// FindCoordinator

pub fn find_coordinator(ctx: &RequestContext, request: FindCoordinatorRequest) -> Response {
    let (host, port) = ctx.broker.advertised_for(ctx.listener);
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
                port: i32::from(port),
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
        error_code: e.code.code(),
        error_message: Some(bs(&e.message)),
        member_epoch: -1,
        ..Default::default()
    }
}

pub fn consumer_group_heartbeat(
    ctx: &RequestContext,
    request: ConsumerGroupHeartbeatRequest,
) -> Response {
    let host = client_host(ctx);
    let client = ClientInfo {
        client_id: ctx.client_id.as_deref().unwrap_or(""),
        client_host: &host,
    };
    let result =
        ctx.broker
            .groups
            .consumer_heartbeat(&ctx.broker, &request, ctx.version, client, now_ms());
    if let (Ok(response), Some(instance)) = (&result, ctx.instance_id)
        && let Some(member) = &response.member_id
    {
        ctx.broker
            .clients
            .note_member(&request.group_id, member, instance);
    }
    Response::ConsumerGroupHeartbeat(result.unwrap_or_else(heartbeat_error))
}

/// The authorized-operations field when the request asks for it (`i32::MIN`: not asked).
fn authorized_operations(asked: bool) -> i32 {
    if asked {
        super::metadata::group_authorized_operations()
    } else {
        i32::MIN
    }
}

pub fn consumer_group_describe(
    ctx: &RequestContext,
    request: ConsumerGroupDescribeRequest,
) -> Response {
    let groups = ctx.broker.groups.consumer_describe(
        &ctx.broker,
        &request,
        authorized_operations(request.include_authorized_operations),
        now_ms(),
    );
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

fn classic_error(ctx: &RequestContext, request: &Request, code: ErrorCode) -> Reply {
    Reply::Now(skiff_protocol::error_response::error_response(
        request,
        ctx.version,
        code.code(),
        None,
    ))
}

pub fn join_group(ctx: &RequestContext, request: JoinGroupRequest) -> Reply {
    let host = client_host(ctx);
    let joiner = Joiner {
        client_id: ctx.client_id.as_deref().unwrap_or(""),
        client_host: &host,
    };
    let joined = ctx
        .broker
        .groups
        .join(&ctx.broker, &request, ctx.version, joiner, now_ms());
    let as_request = Request::JoinGroup(request);
    match joined {
        Ok(receiver) => parked(ctx, as_request, receiver),
        Err(code) => classic_error(ctx, &as_request, code),
    }
}

pub fn sync_group(ctx: &RequestContext, request: SyncGroupRequest) -> Reply {
    let synced = ctx
        .broker
        .groups
        .sync(&ctx.broker, &request, ctx.version, now_ms());
    let as_request = Request::SyncGroup(request);
    match synced {
        Ok(receiver) => parked(ctx, as_request, receiver),
        Err(code) => classic_error(ctx, &as_request, code),
    }
}

pub fn heartbeat(ctx: &RequestContext, request: HeartbeatRequest) -> Response {
    if let Some(instance) = ctx.instance_id {
        ctx.broker
            .clients
            .note_member(&request.group_id, &request.member_id, instance);
    }
    Response::Heartbeat(
        ctx.broker
            .groups
            .heartbeat(&ctx.broker, &request, ctx.version, now_ms()),
    )
}

pub fn leave_group(ctx: &RequestContext, request: LeaveGroupRequest) -> Response {
    match ctx
        .broker
        .groups
        .leave(&ctx.broker, &request, ctx.version, now_ms())
    {
        Ok(response) => Response::LeaveGroup(response),
        Err(code) => skiff_protocol::error_response::error_response(
            &Request::LeaveGroup(request),
            ctx.version,
            code.code(),
            None,
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Offsets

pub fn offset_commit(ctx: &RequestContext, request: OffsetCommitRequest) -> Reply {
    let (mut response, end) =
        ctx.broker
            .groups
            .commit(&ctx.broker, &request, ctx.version, now_ms());
    let Some(end) = end else {
        return Reply::Now(Response::OffsetCommit(response));
    };
    let broker = std::sync::Arc::clone(&ctx.broker);
    Reply::Later(Box::pin(async move {
        if let Err(e) = broker.groups.wait_durable(end).await {
            tracing::error!(error = %e, "group log sync failed");
            crate::groups::requests::set_commit_errors(
                &mut response,
                ErrorCode::KAFKA_STORAGE_ERROR,
            );
        }
        Response::OffsetCommit(response)
    }))
}

pub fn offset_fetch(ctx: &RequestContext, request: OffsetFetchRequest) -> Response {
    // v7+: with `require_stable`, offsets a transaction in progress will commit are unstable.
    // Read from the transaction coordinator before the group lock (never both at once).
    let unstable = |group_id: &str| -> BTreeSet<(String, i32)> {
        if ctx.version >= 7 && request.require_stable {
            ctx.broker.txns.pending_offsets(group_id)
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
    Response::OffsetFetch(ctx.broker.groups.fetch_offsets(
        &ctx.broker,
        &request,
        ctx.version,
        &unstable_by_group,
        now_ms(),
    ))
}

pub fn offset_delete(ctx: &RequestContext, request: OffsetDeleteRequest) -> Response {
    Response::OffsetDelete(
        ctx.broker
            .groups
            .offset_delete(&ctx.broker, &request, now_ms()),
    )
}

// ---------------------------------------------------------------------------------------------
// Listing, describing, deleting

pub fn list_groups(ctx: &RequestContext, request: ListGroupsRequest) -> Response {
    Response::ListGroups(ctx.broker.groups.list(&ctx.broker, &request, now_ms()))
}

pub fn describe_groups(ctx: &RequestContext, request: DescribeGroupsRequest) -> Response {
    Response::DescribeGroups(ctx.broker.groups.describe(
        &ctx.broker,
        &request,
        ctx.version,
        authorized_operations(request.include_authorized_operations),
        now_ms(),
    ))
}

pub fn delete_groups(ctx: &RequestContext, request: DeleteGroupsRequest) -> Response {
    Response::DeleteGroups(
        ctx.broker
            .groups
            .delete_groups(&ctx.broker, &request, now_ms()),
    )
}
