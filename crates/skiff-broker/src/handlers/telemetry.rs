//! KIP-714 client telemetry: GetTelemetrySubscriptions and PushTelemetry (with the KIP-1313
//! alignment of header and body IDs, done by `skiff-telemetry`), and the CLIENT_METRICS config
//! resources (type 16) behind DescribeConfigs, IncrementalAlterConfigs and ListConfigResources.

use skiff_protocol::generated::list_config_resources_response::{
    ConfigResource, ListConfigResourcesResponse,
};
use skiff_protocol::generated::{
    GetTelemetrySubscriptionsRequest, ListConfigResourcesRequest, PushTelemetryRequest,
};
use skiff_protocol::{ByteString, ErrorCode, KafkaError, Response};
use skiff_telemetry::subscriptions::{AlterOp, AlterOpType, ClientSelectors, SubscriptionError};

use super::RequestContext;
use crate::clock::now_ms;

use super::resources::RESOURCE_CLIENT_METRICS;
use super::resources::{RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};

fn selectors(ctx: &RequestContext) -> ClientSelectors {
    ClientSelectors {
        client_id: ctx.client_id.clone(),
        software_name: ctx.software.as_ref().map(|(name, _)| name.clone()),
        software_version: ctx.software.as_ref().map(|(_, version)| version.clone()),
        source_address: Some(ctx.peer.ip()),
        source_port: Some(ctx.peer.port()),
    }
}

pub fn get_subscriptions(
    ctx: &RequestContext,
    request: GetTelemetrySubscriptionsRequest,
) -> Response {
    let client = selectors(ctx);
    let response =
        ctx.broker
            .lock_telemetry()
            .get_subscriptions(ctx.instance_id, &request, &client, now_ms());
    if response.error_code == 0
        && let Some(instance) = response.client_instance_id.non_zero()
    {
        let metrics: Vec<String> = response
            .requested_metrics
            .iter()
            .map(|m| m.to_string())
            .collect();
        ctx.broker.journal.with(|journal, now| {
            journal.subscription(
                instance,
                now,
                response.subscription_id,
                response.push_interval_ms,
                metrics,
            );
        });
    }
    Response::GetTelemetrySubscriptions(response)
}

pub fn push(ctx: &RequestContext, request: PushTelemetryRequest) -> Response {
    // With `client.instance.id.binding = enforce`, a push for an instance another principal
    // owns is not accepted (the connection-level rule already refuses the header's ID; the
    // body's ID may differ from it on a connection without one).
    if ctx.broker.config.security.instance_binding == crate::config::InstanceBinding::Enforce
        && let crate::owners::Claim::Conflict { owner } = ctx
            .broker
            .security
            .owners
            .instance_owner_is(request.client_instance_id, &ctx.principal)
    {
        tracing::info!(client_instance_id = %request.client_instance_id, principal = %ctx.principal, %owner, "telemetry refused: the instance ID belongs to another principal");
        return Response::PushTelemetry(
            skiff_protocol::generated::push_telemetry_response::PushTelemetryResponse {
                error_code: skiff_protocol::error_codes::INVALID_REQUEST,
                ..Default::default()
            },
        );
    }
    let client = selectors(ctx);
    let (response, decoded) =
        ctx.broker
            .lock_telemetry()
            .push(ctx.instance_id, &request, &client, now_ms());
    if request.terminating
        && response.error_code == 0
        && let Some(instance) = request.client_instance_id.non_zero()
    {
        ctx.broker.journal.record(
            instance,
            crate::journal::EventKind::TelemetryTerminated {
                subscription_id: request.subscription_id,
            },
        );
    }
    if let Some(decoded) = decoded {
        tracing::debug!(
            client_instance_id = %decoded.client_instance_id,
            terminating = decoded.terminating,
            resource_metrics = decoded.metrics.resource_metrics.len(),
            "telemetry pushed"
        );
        if let Some(forwarder) = &ctx.broker.otlp {
            forwarder.forward(decoded);
        }
    }
    Response::PushTelemetry(response)
}

pub fn list_config_resources(
    ctx: &RequestContext,
    request: ListConfigResourcesRequest,
) -> Response {
    if !ctx.authorized_on_cluster(skiff_auth::acl::AclOperation::DescribeConfigs) {
        return Response::ListConfigResources(ListConfigResourcesResponse {
            error_code: skiff_protocol::error_codes::CLUSTER_AUTHORIZATION_FAILED,
            ..Default::default()
        });
    }
    // v0 (ListClientMetricsResources) lists client metrics only; v1 filters by type, empty = all.
    let wants = |t: i8| {
        ctx.version == 0 || request.resource_types.is_empty() || request.resource_types.contains(&t)
    };
    let mut config_resources = Vec::new();
    if wants(RESOURCE_CLIENT_METRICS) {
        for name in ctx.broker.lock_telemetry().subscriptions().list() {
            config_resources.push(ConfigResource {
                resource_name: ByteString::from(name),
                resource_type: RESOURCE_CLIENT_METRICS,
                ..Default::default()
            });
        }
    }
    if ctx.version >= 1 {
        if wants(RESOURCE_TOPIC) {
            for topic in ctx.broker.all_topics() {
                config_resources.push(ConfigResource {
                    resource_name: ByteString::from(topic.info.name.clone()),
                    resource_type: RESOURCE_TOPIC,
                    ..Default::default()
                });
            }
        }
        if wants(RESOURCE_GROUP) {
            for group in super::group_configs::list(&ctx.broker) {
                config_resources.push(ConfigResource {
                    resource_name: ByteString::from(group),
                    resource_type: RESOURCE_GROUP,
                    ..Default::default()
                });
            }
        }
        if wants(RESOURCE_BROKER) {
            config_resources.push(ConfigResource {
                resource_name: ByteString::from(ctx.broker.node_id().to_string()),
                resource_type: RESOURCE_BROKER,
                ..Default::default()
            });
        }
    }
    Response::ListConfigResources(ListConfigResourcesResponse {
        config_resources,
        ..Default::default()
    })
}

/// A subscription's entries: (key, value, is_default).
pub type SubscriptionEntries = Vec<(String, String, bool)>;

/// DescribeConfigs of one CLIENT_METRICS resource.
pub fn describe_subscription(
    ctx_broker: &crate::state::Broker,
    name: &str,
) -> Result<SubscriptionEntries, KafkaError> {
    ctx_broker
        .lock_telemetry()
        .subscriptions()
        .describe(name)
        .ok_or_else(|| {
            KafkaError::new(
                ErrorCode::RESOURCE_NOT_FOUND,
                format!("Client metrics subscription {name} not found"),
            )
        })
}

/// IncrementalAlterConfigs of one CLIENT_METRICS resource; persisted when applied.
pub fn alter_subscription(
    broker: &crate::state::Broker,
    name: &str,
    ops: &[(String, i8, Option<String>)],
    validate_only: bool,
) -> Result<(), KafkaError> {
    let mut parsed = Vec::with_capacity(ops.len());
    for (key, op, value) in ops {
        let Some(op_type) = AlterOpType::from_i8(*op) else {
            return Err(KafkaError::new(
                ErrorCode::INVALID_REQUEST,
                format!("Unknown config operation {op} for {key}"),
            ));
        };
        parsed.push(AlterOp {
            key: key.clone(),
            op: op_type,
            value: value.clone(),
        });
    }
    let error = |e: SubscriptionError| KafkaError::new(e.error_code(), e.to_string());
    if validate_only {
        return broker
            .lock_telemetry()
            .subscriptions()
            .validate_alter(name, &parsed)
            .map_err(error);
    }
    match broker.alter_subscriptions(|subs| subs.alter(name, &parsed)) {
        Ok(result) => result.map_err(error),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "cannot persist client metrics subscriptions");
            Err(KafkaError::new(
                ErrorCode::UNKNOWN_SERVER_ERROR,
                "the subscription could not be saved",
            ))
        }
    }
}
