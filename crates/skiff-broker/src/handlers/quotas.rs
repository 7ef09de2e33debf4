//! DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), v0-1, as Kafka's
//! `KafkaApis.handleDescribeClientQuotasRequest` / `handleAlterClientQuotasRequest` and the
//! controller's checks answer them, over [`crate::quotas`] (rules: [`skiff_quota::entity`]).
//!
//! - Describe needs DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED); a filter with
//!   an unknown match type, a repeated entity type or an unknown entity type is INVALID_REQUEST.
//! - Alter needs ALTER_CONFIGS on the cluster (every entry CLUSTER_AUTHORIZATION_FAILED); each
//!   entry is checked whole (entity, keys, values) and applied alone, INVALID_REQUEST with the
//!   reason otherwise. `ValidateOnly` checks and changes nothing. Entity types are Kafka's `user`
//!   and `client-id` (with `null` names for the defaults) and Skiff's `client-instance-id` (one
//!   instance, no default); `ip` quotas are refused.

use skiff_auth::acl::AclOperation;
use skiff_protocol::generated::alter_client_quotas_response::{
    AlterClientQuotasResponse, EntityData as AlteredEntity, EntryData as AlteredEntry,
};
use skiff_protocol::generated::describe_client_quotas_response::{
    DescribeClientQuotasResponse, EntityData, EntryData, ValueData,
};
use skiff_protocol::generated::{AlterClientQuotasRequest, DescribeClientQuotasRequest};
use skiff_protocol::{ErrorCode, Response, error_codes};
use skiff_quota::entity::{Component, Entity, Invalid, Match, Op};

use super::{RequestContext, bs};

const CLUSTER_DENIED: &str = "Cluster authorization failed.";

pub fn describe(ctx: &RequestContext, request: DescribeClientQuotasRequest) -> Response {
    let refused = |code: ErrorCode, message: String| {
        Response::DescribeClientQuotas(DescribeClientQuotasResponse {
            error_code: code.code(),
            error_message: Some(bs(message)),
            entries: None,
            ..Default::default()
        })
    };
    if !ctx.authorized_on_cluster(AclOperation::DescribeConfigs) {
        return refused(
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
            CLUSTER_DENIED.into(),
        );
    }
    let mut components = Vec::with_capacity(request.components.len());
    for c in &request.components {
        let matching = match (c.match_type, c.r#match.as_deref()) {
            (0, Some(name)) => Match::Exact(name.to_string()),
            (0, None) => {
                return refused(
                    ErrorCode::INVALID_REQUEST,
                    format!("Exact match of {} needs a name", c.entity_type),
                );
            }
            (1, _) => Match::Default,
            (2, _) => Match::Specified,
            (other, _) => {
                return refused(
                    ErrorCode::INVALID_REQUEST,
                    format!("Unknown match type {other}"),
                );
            }
        };
        components.push(Component {
            entity_type: c.entity_type.to_string(),
            matching,
        });
    }
    let described = match ctx
        .broker
        .quotas
        .quotas()
        .describe(&components, request.strict)
    {
        Ok(described) => described,
        Err(Invalid(message)) => return refused(ErrorCode::INVALID_REQUEST, message),
    };
    let entries = described
        .into_iter()
        .map(|(entity, values)| EntryData {
            entity: entity
                .parts()
                .into_iter()
                .map(|(kind, name)| EntityData {
                    entity_type: bs(kind),
                    entity_name: name.map(bs),
                    ..Default::default()
                })
                .collect(),
            values: values
                .into_iter()
                .map(|(key, value)| ValueData {
                    key: bs(key.name()),
                    value,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    Response::DescribeClientQuotas(DescribeClientQuotasResponse {
        entries: Some(entries),
        ..Default::default()
    })
}

pub fn alter(ctx: &RequestContext, request: AlterClientQuotasRequest) -> Response {
    let allowed = ctx.authorized_on_cluster(AclOperation::AlterConfigs);
    let entries = request
        .entries
        .into_iter()
        .map(|entry| {
            let outcome = if allowed {
                alter_entry(ctx, &entry, request.validate_only)
            } else {
                Err((
                    ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
                    CLUSTER_DENIED.into(),
                ))
            };
            let (error_code, error_message) = match outcome {
                Ok(()) => (error_codes::NONE, None),
                Err((code, message)) => (code.code(), Some(bs(message))),
            };
            AlteredEntry {
                error_code,
                error_message,
                entity: entry
                    .entity
                    .iter()
                    .map(|e| AlteredEntity {
                        entity_type: e.entity_type.clone(),
                        entity_name: e.entity_name.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }
        })
        .collect();
    Response::AlterClientQuotas(AlterClientQuotasResponse {
        entries,
        ..Default::default()
    })
}

fn alter_entry(
    ctx: &RequestContext,
    entry: &skiff_protocol::generated::alter_client_quotas_request::EntryData,
    validate_only: bool,
) -> Result<(), (ErrorCode, String)> {
    let invalid = |Invalid(message): Invalid| (ErrorCode::INVALID_REQUEST, message);
    let parts: Vec<(&str, Option<&str>)> = entry
        .entity
        .iter()
        .map(|e| (&*e.entity_type, e.entity_name.as_deref()))
        .collect();
    let entity = Entity::from_parts(&parts).map_err(invalid)?;
    let ops: Vec<Op> = entry
        .ops
        .iter()
        .map(|op| Op {
            key: op.key.to_string(),
            value: op.value,
            remove: op.remove,
        })
        .collect();
    // Checked against a copy first, so that validate-only and a refused entry change nothing.
    let mut check = ctx.broker.quotas.quotas();
    check.alter(&entity, &ops).map_err(invalid)?;
    if validate_only {
        return Ok(());
    }
    match ctx
        .broker
        .alter_quotas(|quotas| quotas.alter(&entity, &ops))
    {
        Ok(Ok(())) => Ok(()),
        Ok(Err(refusal)) => Err(invalid(refusal)),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "cannot store client quotas");
            Err((
                ErrorCode::UNKNOWN_SERVER_ERROR,
                "the client quotas could not be stored".into(),
            ))
        }
    }
}
