//! Request handlers, one module per API family, and the table of what Skiff advertises.
//!
//! A handler turns a typed request into calls on the broker state and returns a typed response,
//! either at once or as a future (acks=all durability, fetch long-polls). Handlers run in request
//! order on their connection; only the waiting part of a `Later` reply runs after that.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use skiff_protocol::{Request, Response, Uuid, error_codes};

use crate::state::Broker;

pub mod access;
pub mod acls;
pub mod api_versions;
pub mod cluster;
pub mod configs;
pub mod describe_topics;
pub mod fetch;
pub mod group_configs;
pub mod groups;
pub mod journaling;
pub mod leader_epoch;
pub mod list_offsets;
pub mod log_dirs;
pub mod metadata;
pub mod produce;
pub mod producer_id;
pub mod quotas;
pub mod records_admin;
pub mod replicas;
pub mod resources;
pub mod scram;
pub mod share_fetch;
pub mod share_groups;
pub mod share_offsets;
pub mod telemetry;
pub mod topics;
pub mod txn;

/// A response string from anything string-like.
pub(crate) fn bs(s: impl Into<String>) -> skiff_protocol::ByteString {
    skiff_protocol::ByteString::from(s.into())
}

/// What a handler knows about the request beyond its body.
pub struct RequestContext {
    pub broker: Arc<Broker>,
    /// The connection's ID (unique while the broker runs).
    pub connection_id: u64,
    /// The listener the request came in on: Metadata, FindCoordinator and DescribeCluster
    /// answer with that listener's advertised address.
    pub listener: usize,
    pub version: i16,
    pub client_id: Option<String>,
    /// The connection's KIP-1313 client instance ID, once fixed.
    pub instance_id: Option<Uuid>,
    /// The KIP-714 telemetry ID the connection's telemetry named, for a client that sends no
    /// KIP-1313 ID (librdkafka): what the journal files its events under.
    pub telemetry_instance: Option<Uuid>,
    pub peer: SocketAddr,
    /// Who the request acts as (`User:ANONYMOUS` on PLAINTEXT listeners).
    pub principal: Arc<skiff_auth::principal::KafkaPrincipal>,
    /// The peer's IP address as text, as ACL host entries name it.
    pub host: Arc<str>,
    /// Client software name and version from the connection's ApiVersions (v3+).
    pub software: Option<(String, String)>,
    /// Becomes `true` when the broker shuts down: waiting replies (long polls) answer at once.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

/// A handler's answer. Responses are moved once per request, so their size is not worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Reply {
    Now(Response),
    Later(BoxFuture<'static, Response>),
    /// acks=0 produce: no response at all.
    Nothing,
}

impl From<Response> for Reply {
    fn from(response: Response) -> Self {
        Reply::Now(response)
    }
}

/// Routes a decoded request to its handler.
/// Produce requests carrying at least this many record bytes are appended off the worker.
const LARGE_WRITE: usize = 64 * 1024;

/// Runs a handler that writes a lot to partition files. On the multi-threaded runtime the worker
/// first hands its other tasks to another thread, so a write the kernel throttles (dirty page
/// limits) stalls this request only, not every connection scheduled on the same worker (acks=1
/// p99 under a saturating load went from ~250–375 ms to ~120 ms). The hand-off costs a few tens
/// of microseconds, a third of the throughput of tiny requests, hence only for large ones.
fn off_worker<T>(handler: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(handler),
        _ => handler(),
    }
}

pub fn dispatch(ctx: &RequestContext, request: Request) -> Reply {
    match request {
        Request::ApiVersions(r) => api_versions::handle(ctx, r).into(),
        Request::Metadata(r) => metadata::handle(ctx, r).into(),
        Request::DescribeTopicPartitions(r) => describe_topics::handle(ctx, r).into(),
        Request::Produce(r) if produce::records_bytes(&r) >= LARGE_WRITE => {
            off_worker(|| produce::handle(ctx, r))
        }
        Request::Produce(r) => produce::handle(ctx, r),
        Request::Fetch(r) => fetch::handle(ctx, r),
        Request::FindCoordinator(r) => groups::find_coordinator(ctx, r).into(),
        Request::ConsumerGroupHeartbeat(r) => groups::consumer_group_heartbeat(ctx, r),
        Request::ConsumerGroupDescribe(r) => groups::consumer_group_describe(ctx, r).into(),
        Request::JoinGroup(r) => groups::join_group(ctx, r),
        Request::SyncGroup(r) => groups::sync_group(ctx, r),
        Request::Heartbeat(r) => groups::heartbeat(ctx, r),
        Request::LeaveGroup(r) => groups::leave_group(ctx, r),
        Request::OffsetCommit(r) => groups::offset_commit(ctx, r),
        Request::OffsetFetch(r) => groups::offset_fetch(ctx, r).into(),
        Request::OffsetDelete(r) => groups::offset_delete(ctx, r),
        Request::ShareGroupHeartbeat(r) => share_groups::heartbeat(ctx, r),
        Request::ShareGroupDescribe(r) => share_groups::describe(ctx, r).into(),
        Request::ShareFetch(r) => share_fetch::share_fetch(ctx, r),
        Request::ShareAcknowledge(r) => share_fetch::share_acknowledge(ctx, r),
        Request::DescribeShareGroupOffsets(r) => share_offsets::describe(ctx, r),
        Request::AlterShareGroupOffsets(r) => share_offsets::alter(ctx, r),
        Request::DeleteShareGroupOffsets(r) => share_offsets::delete(ctx, r),
        Request::ListGroups(r) => groups::list_groups(ctx, r).into(),
        Request::DescribeGroups(r) => groups::describe_groups(ctx, r).into(),
        Request::DeleteGroups(r) => groups::delete_groups(ctx, r),
        Request::GetTelemetrySubscriptions(r) => telemetry::get_subscriptions(ctx, r).into(),
        Request::PushTelemetry(r) => telemetry::push(ctx, r).into(),
        Request::ListConfigResources(r) => telemetry::list_config_resources(ctx, r).into(),
        Request::ListOffsets(r) => list_offsets::handle(ctx, r),
        Request::CreateTopics(r) => topics::handle_create_topics(ctx, r).into(),
        Request::DeleteTopics(r) => topics::handle_delete_topics(ctx, r).into(),
        Request::CreatePartitions(r) => topics::handle_create_partitions(ctx, r).into(),
        Request::DescribeConfigs(r) => configs::handle_describe(ctx, r).into(),
        Request::IncrementalAlterConfigs(r) => configs::handle_incremental_alter(ctx, r).into(),
        Request::AlterConfigs(r) => configs::handle_legacy_alter(ctx, r).into(),
        Request::DeleteRecords(r) => records_admin::handle(ctx, r),
        Request::InitProducerId(r) => producer_id::handle(ctx, r),
        Request::DescribeCluster(r) => cluster::handle(ctx, r).into(),
        Request::DescribeLogDirs(r) => log_dirs::handle(ctx, r).into(),
        Request::DescribeClientQuotas(r) => quotas::describe(ctx, r).into(),
        Request::AlterClientQuotas(r) => quotas::alter(ctx, r).into(),
        Request::ElectLeaders(r) => replicas::elect_leaders(ctx, r).into(),
        Request::ListPartitionReassignments(r) => replicas::list_reassignments(ctx, r).into(),
        Request::AlterPartitionReassignments(r) => replicas::alter_reassignments(ctx, r).into(),
        Request::UpdateFeatures(r) => replicas::update_features(ctx, r).into(),
        Request::OffsetForLeaderEpoch(r) => leader_epoch::handle(ctx, r),
        Request::AddPartitionsToTxn(r) => txn::add_partitions_to_txn(ctx, r),
        Request::AddOffsetsToTxn(r) => txn::add_offsets_to_txn(ctx, r),
        Request::TxnOffsetCommit(r) => txn::txn_offset_commit(ctx, r),
        Request::EndTxn(r) => txn::end_txn(ctx, r),
        Request::DescribeProducers(r) => txn::describe_producers(ctx, r).into(),
        Request::DescribeTransactions(r) => txn::describe_transactions(ctx, r).into(),
        Request::ListTransactions(r) => txn::list_transactions(ctx, r).into(),
        Request::DescribeUserScramCredentials(r) => scram::describe(ctx, r).into(),
        Request::AlterUserScramCredentials(r) => scram::alter(ctx, r).into(),
        Request::CreateAcls(r) => acls::create(ctx, r).into(),
        Request::DescribeAcls(r) => acls::describe(ctx, r).into(),
        Request::DeleteAcls(r) => acls::delete(ctx, r).into(),
        other => {
            // Unreachable in practice: the connection checks `supported_versions` first.
            skiff_protocol::error_response::error_response(
                &other,
                ctx.version,
                error_codes::UNSUPPORTED_VERSION,
                Some("this API is not supported by Skiff"),
            )
            .into()
        }
    }
}
