//! The replica and feature admin APIs, answered honestly for a broker whose partitions each have
//! one replica, itself (on one node), or whose leaders are placed over shared storage (cluster
//! mode, where there are no replicas to move or elect):
//!
//! - **ElectLeaders** (43, v0-2): every partition's only replica is its leader already, so an
//!   election is never needed: each named partition is ELECTION_NOT_NEEDED (Kafka's answer when
//!   the preferred leader leads), an unknown one UNKNOWN_TOPIC_OR_PARTITION; without a partition
//!   list (all partitions) nothing is elected, as Kafka answers with the partitions it elected.
//!   ALTER on the cluster, or CLUSTER_AUTHORIZATION_FAILED.
//! - **ListPartitionReassignments** (46, v0): none is ever in progress: an empty list. DESCRIBE on
//!   the cluster.
//! - **AlterPartitionReassignments** (45, v0-1, one node only): a partition's replicas can only be
//!   this node, so reassigning to exactly `[node]` is done at once (NONE), to anything else is
//!   INVALID_REPLICA_ASSIGNMENT, and cancelling (null replicas) is NO_REASSIGNMENT_IN_PROGRESS.
//!   ALTER on the cluster.
//! - **UpdateFeatures** (57, v0-2): Skiff's feature levels are fixed by what it serves (ApiVersions
//!   lists them): asking for the finalized level is a no-op, any other level of a known feature is
//!   INVALID_UPDATE_VERSION, an unknown feature INVALID_UPDATE_VERSION too (Kafka's answer for a
//!   feature the controller does not support). ALTER on the cluster.

use std::collections::BTreeSet;

use skiff_auth::acl::AclOperation;
use skiff_protocol::generated::alter_partition_reassignments_response::{
    AlterPartitionReassignmentsResponse, ReassignablePartitionResponse, ReassignableTopicResponse,
};
use skiff_protocol::generated::elect_leaders_response::{
    ElectLeadersResponse, PartitionResult, ReplicaElectionResult,
};
use skiff_protocol::generated::list_partition_reassignments_response::ListPartitionReassignmentsResponse;
use skiff_protocol::generated::update_features_response::{
    UpdatableFeatureResult, UpdateFeaturesResponse,
};
use skiff_protocol::generated::{
    AlterPartitionReassignmentsRequest, ElectLeadersRequest, ListPartitionReassignmentsRequest,
    UpdateFeaturesRequest,
};
use skiff_protocol::{ErrorCode, Response, error_codes};

use super::api_versions::finalized_features;
use super::{RequestContext, bs};

const CLUSTER_DENIED: &str = "Cluster authorization failed.";

/// Whether partition `index` of `topic` exists.
fn exists(ctx: &RequestContext, topic: &str, index: i32) -> bool {
    ctx.broker
        .topic_by_name(topic)
        .is_some_and(|t| (0..t.info.partitions).contains(&index))
}

pub fn elect_leaders(ctx: &RequestContext, request: ElectLeadersRequest) -> Response {
    // Refused: the request's error (v1+) and each partition's (v0 has only those), as Kafka.
    let allowed = ctx.authorized_on_cluster(AclOperation::Alter);
    let results = request
        .topic_partitions
        .unwrap_or_default()
        .into_iter()
        .map(|topic| {
            let partitions: BTreeSet<i32> = topic.partitions.iter().copied().collect();
            ReplicaElectionResult {
                partition_result: partitions
                    .into_iter()
                    .map(|index| {
                        let (code, message) = if !allowed {
                            (ErrorCode::CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
                        } else if exists(ctx, &topic.topic, index) {
                            (
                                ErrorCode::ELECTION_NOT_NEEDED,
                                "Leader election not needed for topic partition.",
                            )
                        } else {
                            (
                                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                                "The partition does not exist.",
                            )
                        };
                        PartitionResult {
                            partition_id: index,
                            error_code: code.code(),
                            error_message: Some(bs(message)),
                            ..Default::default()
                        }
                    })
                    .collect(),
                topic: topic.topic,
                ..Default::default()
            }
        })
        .collect();
    Response::ElectLeaders(ElectLeadersResponse {
        error_code: if allowed {
            error_codes::NONE
        } else {
            error_codes::CLUSTER_AUTHORIZATION_FAILED
        },
        replica_election_results: results,
        ..Default::default()
    })
}

pub fn list_reassignments(
    ctx: &RequestContext,
    _request: ListPartitionReassignmentsRequest,
) -> Response {
    if !ctx.authorized_on_cluster(AclOperation::Describe) {
        return Response::ListPartitionReassignments(ListPartitionReassignmentsResponse {
            error_code: error_codes::CLUSTER_AUTHORIZATION_FAILED,
            error_message: Some(bs(CLUSTER_DENIED)),
            ..Default::default()
        });
    }
    // No reassignment is ever in progress.
    Response::ListPartitionReassignments(ListPartitionReassignmentsResponse::default())
}

pub fn alter_reassignments(
    ctx: &RequestContext,
    request: AlterPartitionReassignmentsRequest,
) -> Response {
    if !ctx.authorized_on_cluster(AclOperation::Alter) {
        return Response::AlterPartitionReassignments(AlterPartitionReassignmentsResponse {
            error_code: error_codes::CLUSTER_AUTHORIZATION_FAILED,
            error_message: Some(bs(CLUSTER_DENIED)),
            ..Default::default()
        });
    }
    let node = ctx.broker.node_id();
    let responses = request
        .topics
        .into_iter()
        .map(|topic| ReassignableTopicResponse {
            partitions: topic
                .partitions
                .iter()
                .map(|p| {
                    let (code, message) = match &p.replicas {
                        _ if !exists(ctx, &topic.name, p.partition_index) => (
                            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                            Some("The partition does not exist.".to_string()),
                        ),
                        None => (
                            ErrorCode::NO_REASSIGNMENT_IN_PROGRESS,
                            Some("No ongoing reassignment for the partition.".to_string()),
                        ),
                        Some(replicas) if replicas.as_slice() == [node] => {
                            (ErrorCode::NONE, None)
                        }
                        Some(replicas) => (
                            ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                            Some(format!(
                                "The manual partition assignment {replicas:?} is not [{node}]: this broker is the only one"
                            )),
                        ),
                    };
                    ReassignablePartitionResponse {
                        partition_index: p.partition_index,
                        error_code: code.code(),
                        error_message: message.map(bs),
                        ..Default::default()
                    }
                })
                .collect(),
            name: topic.name,
            ..Default::default()
        })
        .collect();
    Response::AlterPartitionReassignments(AlterPartitionReassignmentsResponse {
        responses,
        ..Default::default()
    })
}

pub fn update_features(ctx: &RequestContext, request: UpdateFeaturesRequest) -> Response {
    if !ctx.authorized_on_cluster(AclOperation::Alter) {
        return Response::UpdateFeatures(UpdateFeaturesResponse {
            error_code: error_codes::CLUSTER_AUTHORIZATION_FAILED,
            error_message: Some(bs(CLUSTER_DENIED)),
            ..Default::default()
        });
    }
    let finalized = finalized_features(&ctx.broker);
    let level_of = |name: &str| {
        super::api_versions::SUPPORTED_FEATURES
            .iter()
            .any(|(f, _, _)| *f == name)
            .then(|| {
                finalized
                    .iter()
                    .find(|(f, _)| *f == name)
                    .map_or(0, |(_, level)| *level)
            })
    };
    let mut failure = None;
    let results: Vec<UpdatableFeatureResult> = request
        .feature_updates
        .iter()
        .map(|update| {
            let outcome = match level_of(&update.feature) {
                Some(level) if level == update.max_version_level => Ok(()),
                Some(level) => Err(format!(
                    "Skiff's {} is {level}, fixed by what the broker serves; it cannot be set to {}",
                    update.feature, update.max_version_level
                )),
                None => Err(format!(
                    "Invalid update version: feature {} is not supported",
                    update.feature
                )),
            };
            let (code, message) = match outcome {
                Ok(()) => (error_codes::NONE, None),
                Err(message) => {
                    failure.get_or_insert_with(|| message.clone());
                    (ErrorCode::INVALID_UPDATE_VERSION.code(), Some(bs(message)))
                }
            };
            UpdatableFeatureResult {
                feature: update.feature.clone(),
                error_code: code,
                error_message: message,
                ..Default::default()
            }
        })
        .collect();
    // v2 has no per-feature results: the first failure is the request's.
    match failure {
        Some(message) if ctx.version >= 2 => Response::UpdateFeatures(UpdateFeaturesResponse {
            error_code: ErrorCode::INVALID_UPDATE_VERSION.code(),
            error_message: Some(bs(message)),
            ..Default::default()
        }),
        _ => Response::UpdateFeatures(UpdateFeaturesResponse {
            results,
            ..Default::default()
        }),
    }
}
