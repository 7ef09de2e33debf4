//! DescribeConfigs v1-4, IncrementalAlterConfigs v0-1 and the legacy AlterConfigs v0-2 for TOPIC
//! and BROKER resources, following Kafka's `ConfigHelper.describeConfigs` and
//! `ConfigAdminManager.preprocess` plus the controller's config validation (which `skiff-meta`
//! implements). Legacy AlterConfigs (kafkajs `admin.alterConfigs`, Sarama, confluent-kafka's
//! `alter_configs`) replaces a resource's whole set of dynamic configs, as Kafka's
//! `legacyAlterConfigs` does: the keys given are set, every other dynamic key of the resource is
//! deleted (turned into the same checks and writes as IncrementalAlterConfigs SET and DELETE).
//!
//! A BROKER resource is named with this node's ID (its full config) or is empty (the cluster-wide
//! dynamic defaults). Skiff has no Log4j loggers, so a BROKER_LOGGER resource of this node
//! describes as an empty list and altering any logger is INVALID_CONFIG ("does not exist"), as
//! Kafka answers for an unknown logger. After a successful change the partition logs pick up the
//! new retention and segment settings.
//!
//! CLIENT_METRICS resources (16) are served by `telemetry.rs` and GROUP resources (32) by
//! `group_configs.rs`.

use std::collections::{HashMap, HashSet};

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_meta::{AlterConfigOp, AlterConfigOpType, BrokerConfigScope, ConfigEntry};
use skiff_protocol::generated::alter_configs_response::{
    AlterConfigsResourceResponse as LegacyResourceResponse, AlterConfigsResponse,
};
use skiff_protocol::generated::describe_configs_request::DescribeConfigsResource;
use skiff_protocol::generated::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
    DescribeConfigsSynonym,
};
use skiff_protocol::generated::incremental_alter_configs_request::AlterConfigsResource;
use skiff_protocol::generated::incremental_alter_configs_response::{
    AlterConfigsResourceResponse, IncrementalAlterConfigsResponse,
};
use skiff_protocol::generated::{
    AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest,
};
use skiff_protocol::{ByteString, ErrorCode, KafkaError, Response, error_codes};

use super::topics::admin_lock;
use super::{RequestContext, bs};
use crate::state::Broker;

use super::resources::{RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_TOPIC};
use super::resources::{RESOURCE_CLIENT_METRICS, RESOURCE_GROUP};

fn invalid_request(message: impl Into<String>) -> KafkaError {
    KafkaError::new(error_codes::INVALID_REQUEST, message)
}

/// Kafka's check that a BROKER / BROKER_LOGGER resource names this node.
fn check_node_id(broker: &Broker, name: &str, or_empty: bool) -> Result<(), KafkaError> {
    let id: i32 = name
        .parse()
        .map_err(|_| invalid_request(format!("Broker id must be an integer, but it is: {name}")))?;
    if id != broker.node_id() {
        let also = if or_empty { " or empty string" } else { "" };
        return Err(invalid_request(format!(
            "Unexpected broker id, expected {}{also}, but received {name}",
            broker.node_id()
        )));
    }
    Ok(())
}

// ----- DescribeConfigs -----------------------------------------------------------------------

/// The ACL check of a config resource, as Kafka's: a topic's configs on the topic, a group's on
/// the group, the broker's, broker loggers' and client metrics' on the cluster.
fn authorize_resource(
    ctx: &RequestContext,
    resource_type: i8,
    name: &str,
    operation: AclOperation,
) -> Result<(), KafkaError> {
    let (allowed, code) = match resource_type {
        RESOURCE_TOPIC => (
            ctx.authorized(operation, ResourceType::Topic, name),
            error_codes::TOPIC_AUTHORIZATION_FAILED,
        ),
        RESOURCE_GROUP => (
            ctx.authorized(operation, ResourceType::Group, name),
            error_codes::GROUP_AUTHORIZATION_FAILED,
        ),
        RESOURCE_BROKER | RESOURCE_BROKER_LOGGER | RESOURCE_CLIENT_METRICS => (
            ctx.authorized_on_cluster(operation),
            error_codes::CLUSTER_AUTHORIZATION_FAILED,
        ),
        // Unknown types get their own error from the handler.
        _ => (true, error_codes::NONE),
    };
    if allowed {
        Ok(())
    } else {
        Err(KafkaError::new(code, "Authorization failed."))
    }
}

pub fn handle_describe(ctx: &RequestContext, request: DescribeConfigsRequest) -> Response {
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let resource_type = resource.resource_type;
            let resource_name = resource.resource_name.clone();
            let allowed = authorize_resource(
                ctx,
                resource_type,
                &resource_name,
                AclOperation::DescribeConfigs,
            );
            let (error_code, error_message, configs) = match allowed
                .and_then(|()| describe_resource(&ctx.broker, &resource, request.include_synonyms))
            {
                Ok(configs) => (error_codes::NONE, None, configs),
                Err(e) => (e.error_code(), e.message.map(bs), Vec::new()),
            };
            DescribeConfigsResult {
                error_code,
                error_message,
                resource_type,
                resource_name,
                configs,
                ..Default::default()
            }
        })
        .collect();
    Response::DescribeConfigs(DescribeConfigsResponse {
        results,
        ..Default::default()
    })
}

fn describe_resource(
    broker: &Broker,
    resource: &DescribeConfigsResource,
    include_synonyms: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, KafkaError> {
    let name: &str = &resource.resource_name;
    let entries = match resource.resource_type {
        RESOURCE_TOPIC => {
            skiff_meta::validate_topic_name(name)?;
            broker.meta().describe_topic_configs(name)?
        }
        RESOURCE_BROKER if name.is_empty() => broker
            .meta()
            .describe_broker_configs(BrokerConfigScope::ClusterDefault),
        RESOURCE_BROKER => {
            check_node_id(broker, name, true)?;
            broker
                .meta()
                .describe_broker_configs(BrokerConfigScope::ThisBroker)
        }
        RESOURCE_BROKER_LOGGER => {
            if name.is_empty() {
                return Err(invalid_request("Broker id must not be empty"));
            }
            check_node_id(broker, name, false)?;
            // No Log4j loggers here: the list is empty.
            Vec::new()
        }
        RESOURCE_CLIENT_METRICS => {
            let entries = super::telemetry::describe_subscription(broker, name)?;
            let wanted: Option<HashSet<&str>> = resource
                .configuration_keys
                .as_ref()
                .filter(|keys| !keys.is_empty())
                .map(|keys| keys.iter().map(|k| &**k).collect());
            return Ok(entries
                .into_iter()
                .filter(|(key, _, _)| wanted.as_ref().is_none_or(|w| w.contains(key.as_str())))
                .map(|(key, value, is_default)| DescribeConfigsResourceResult {
                    config_type: if key == "interval.ms" { 3 } else { 7 },
                    name: bs(key),
                    value: Some(bs(value)),
                    read_only: false,
                    // Kafka's ConfigSource: CLIENT_METRICS_CONFIG 7, DEFAULT_CONFIG 5.
                    config_source: if is_default { 5 } else { 7 },
                    is_sensitive: false,
                    ..Default::default()
                })
                .collect());
        }
        RESOURCE_GROUP => {
            let entries = super::group_configs::describe(broker, name)?;
            let wanted: Option<HashSet<&str>> = resource
                .configuration_keys
                .as_ref()
                .filter(|keys| !keys.is_empty())
                .map(|keys| keys.iter().map(|k| &**k).collect());
            return Ok(entries
                .into_iter()
                .filter(|(key, ..)| wanted.as_ref().is_none_or(|w| w.contains(key.as_str())))
                .map(
                    |(key, value, source, config_type)| DescribeConfigsResourceResult {
                        // Kafka's createGroupConfigEntry: the only synonym is the key itself.
                        synonyms: if include_synonyms {
                            vec![DescribeConfigsSynonym {
                                name: bs(key.clone()),
                                value: Some(bs(value.clone())),
                                source,
                                ..Default::default()
                            }]
                        } else {
                            Vec::new()
                        },
                        name: bs(key),
                        value: Some(bs(value)),
                        read_only: false,
                        config_source: source,
                        is_sensitive: false,
                        config_type,
                        ..Default::default()
                    },
                )
                .collect());
        }
        other => {
            return Err(invalid_request(format!(
                "Unsupported resource type: {other}"
            )));
        }
    };
    // Kafka: a null or empty key list means every key; unknown keys are simply absent.
    let wanted: Option<HashSet<&str>> = resource
        .configuration_keys
        .as_ref()
        .filter(|keys| !keys.is_empty())
        .map(|keys| keys.iter().map(|k| &**k).collect());
    Ok(entries
        .iter()
        .filter(|e| wanted.as_ref().is_none_or(|w| w.contains(e.name.as_str())))
        .map(|e| described(e, include_synonyms))
        .collect())
}

fn described(entry: &ConfigEntry, include_synonyms: bool) -> DescribeConfigsResourceResult {
    let mask = |value: &Option<String>| {
        if entry.is_sensitive {
            None
        } else {
            value.clone().map(bs)
        }
    };
    DescribeConfigsResourceResult {
        name: bs(entry.name.clone()),
        value: mask(&entry.value),
        read_only: entry.read_only,
        config_source: entry.source.code(),
        is_sensitive: entry.is_sensitive,
        synonyms: if include_synonyms {
            entry
                .synonyms
                .iter()
                .map(|s| DescribeConfigsSynonym {
                    name: bs(s.name.clone()),
                    value: mask(&s.value),
                    source: s.source.code(),
                    ..Default::default()
                })
                .collect()
        } else {
            Vec::new()
        },
        config_type: entry.config_type.code(),
        // Skiff carries no config documentation.
        documentation: None,
        ..Default::default()
    }
}

// ----- IncrementalAlterConfigs ---------------------------------------------------------------

/// Each resource's outcome (error code, message), in order, as Kafka's alter handlers give
/// them: a resource named twice is INVALID_REQUEST, one the principal may not ALTER_CONFIGS is
/// refused, and the others are `alter`ed.
fn alter_each<R>(
    ctx: &RequestContext,
    resources: &[R],
    key: impl Fn(&R) -> (i8, &ByteString),
    alter: impl Fn(&R) -> Result<(), KafkaError>,
) -> Vec<(i16, Option<ByteString>)> {
    let mut counts: HashMap<(i8, &ByteString), usize> = HashMap::new();
    for resource in resources {
        *counts.entry(key(resource)).or_default() += 1;
    }
    resources
        .iter()
        .map(|resource| {
            let (resource_type, name) = key(resource);
            let outcome = if counts.get(&(resource_type, name)).copied().unwrap_or(0) > 1 {
                Err(invalid_request("Each resource must appear at most once."))
            } else {
                authorize_resource(ctx, resource_type, name, AclOperation::AlterConfigs)
                    .and_then(|()| alter(resource))
            };
            match outcome {
                Ok(()) => (error_codes::NONE, None),
                Err(e) => (e.error_code(), e.message.map(bs)),
            }
        })
        .collect()
}

pub fn handle_incremental_alter(
    ctx: &RequestContext,
    request: IncrementalAlterConfigsRequest,
) -> Response {
    let outcomes = alter_each(
        ctx,
        &request.resources,
        |r| (r.resource_type, &r.resource_name),
        |r| alter_resource(&ctx.broker, r, request.validate_only),
    );
    let responses = request
        .resources
        .into_iter()
        .zip(outcomes)
        .map(
            |(resource, (error_code, error_message))| AlterConfigsResourceResponse {
                error_code,
                error_message,
                resource_type: resource.resource_type,
                resource_name: resource.resource_name,
                ..Default::default()
            },
        )
        .collect();
    Response::IncrementalAlterConfigs(IncrementalAlterConfigsResponse {
        responses,
        ..Default::default()
    })
}

/// The request's operations, checked as Kafka's `ConfigAdminManager.preprocess` does.
fn operations(resource: &AlterConfigsResource) -> Result<Vec<AlterConfigOp>, KafkaError> {
    let mut names = HashSet::new();
    if !resource.configs.iter().all(|c| names.insert(&c.name)) {
        return Err(invalid_request("Error due to duplicate config keys"));
    }
    let mut ops = Vec::with_capacity(resource.configs.len());
    let mut null_updates = Vec::new();
    for config in &resource.configs {
        let Some(op) = AlterConfigOpType::from_code(config.config_operation) else {
            return Err(invalid_request(format!(
                "Unknown config operation {} for {}",
                config.config_operation, config.name
            )));
        };
        if op != AlterConfigOpType::Delete && config.value.is_none() {
            null_updates.push(config.name.to_string());
        }
        ops.push(AlterConfigOp {
            name: config.name.to_string(),
            op,
            value: config.value.as_ref().map(|v| v.to_string()),
        });
    }
    if !null_updates.is_empty() {
        return Err(invalid_request(format!(
            "Null value not supported for : {}",
            null_updates.join(", ")
        )));
    }
    Ok(ops)
}

fn alter_resource(
    broker: &Broker,
    resource: &AlterConfigsResource,
    validate_only: bool,
) -> Result<(), KafkaError> {
    if resource.resource_type == RESOURCE_CLIENT_METRICS {
        let ops: Vec<(String, i8, Option<String>)> = resource
            .configs
            .iter()
            .map(|c| {
                (
                    c.name.to_string(),
                    c.config_operation,
                    c.value.as_ref().map(|v| v.to_string()),
                )
            })
            .collect();
        return super::telemetry::alter_subscription(
            broker,
            &resource.resource_name,
            &ops,
            validate_only,
        );
    }
    let ops = operations(resource)?;
    apply_ops(
        broker,
        resource.resource_type,
        &resource.resource_name,
        &ops,
        validate_only,
    )
}

/// Applies checked operations to a resource's dynamic configs.
fn apply_ops(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    ops: &[AlterConfigOp],
    validate_only: bool,
) -> Result<(), KafkaError> {
    match resource_type {
        RESOURCE_TOPIC => {
            let _admin = admin_lock();
            if broker.cluster().is_some() {
                let configs = broker.meta().plan_topic_configs(name, ops)?;
                let current = broker.meta().topic(name).map(|t| t.configs.clone());
                if !validate_only && current.as_ref() != Some(&configs) {
                    broker.cluster_set_topic_configs(name, &configs)?;
                }
                return Ok(());
            }
            broker
                .meta_mut()
                .incremental_alter_topic_configs(name, ops, validate_only)?;
            if !validate_only && let Err(e) = broker.reconfigure_topic(name) {
                tracing::error!(topic = %name, error = %format!("{e:#}"), "applying topic config failed");
                return Err(KafkaError {
                    code: ErrorCode::UNKNOWN_SERVER_ERROR,
                    message: None,
                });
            }
            Ok(())
        }
        RESOURCE_BROKER => {
            let scope = if name.is_empty() {
                BrokerConfigScope::ClusterDefault
            } else {
                check_node_id(broker, name, false)?;
                BrokerConfigScope::ThisBroker
            };
            let _admin = admin_lock();
            broker
                .meta_mut()
                .incremental_alter_broker_configs(scope, ops, validate_only)?;
            if !validate_only && let Err(e) = broker.reconfigure_all_topics() {
                tracing::error!(error = %format!("{e:#}"), "applying broker config failed");
                return Err(KafkaError {
                    code: ErrorCode::UNKNOWN_SERVER_ERROR,
                    message: None,
                });
            }
            Ok(())
        }
        RESOURCE_BROKER_LOGGER => {
            if name.is_empty() {
                return Err(invalid_request("Broker id must not be empty"));
            }
            check_node_id(broker, name, false)?;
            match ops.first() {
                // Kafka's RuntimeLoggerManager: an unknown logger is INVALID_CONFIG.
                Some(op) => Err(KafkaError {
                    code: ErrorCode::INVALID_CONFIG,
                    message: Some(format!(
                        "Logger {} does not exist! (Skiff's log levels are set with RUST_LOG)",
                        op.name
                    )),
                }),
                None => Ok(()),
            }
        }
        RESOURCE_GROUP => super::group_configs::alter(broker, name, ops, validate_only),
        other => Err(invalid_request(format!("Unknown resource type {other}"))),
    }
}

// ----- AlterConfigs (legacy) -----------------------------------------------------------------

pub fn handle_legacy_alter(ctx: &RequestContext, request: AlterConfigsRequest) -> Response {
    let outcomes = alter_each(
        ctx,
        &request.resources,
        |r| (r.resource_type, &r.resource_name),
        |r| {
            let given: Vec<(String, Option<String>)> = r
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect();
            legacy_alter(
                &ctx.broker,
                r.resource_type,
                &r.resource_name,
                &given,
                request.validate_only,
            )
        },
    );
    let responses = request
        .resources
        .into_iter()
        .zip(outcomes)
        .map(
            |(resource, (error_code, error_message))| LegacyResourceResponse {
                error_code,
                error_message,
                resource_type: resource.resource_type,
                resource_name: resource.resource_name,
                ..Default::default()
            },
        )
        .collect();
    Response::AlterConfigs(AlterConfigsResponse {
        responses,
        ..Default::default()
    })
}

/// The operations that make `current` (a resource's dynamic configs) exactly `given`: SET each
/// key given, DELETE every other key. Duplicate keys and null values are INVALID_REQUEST.
pub fn replacing_ops(
    current: impl IntoIterator<Item = String>,
    given: &[(String, Option<String>)],
) -> Result<Vec<AlterConfigOp>, KafkaError> {
    let mut names = HashSet::new();
    if !given.iter().all(|(name, _)| names.insert(name.as_str())) {
        return Err(invalid_request("Error due to duplicate config keys"));
    }
    let nulls: Vec<&str> = given
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(n, _)| n.as_str())
        .collect();
    if !nulls.is_empty() {
        return Err(invalid_request(format!(
            "Null value not supported for : {}",
            nulls.join(", ")
        )));
    }
    let mut ops: Vec<AlterConfigOp> = given
        .iter()
        .map(|(name, value)| AlterConfigOp {
            name: name.clone(),
            op: AlterConfigOpType::Set,
            value: value.clone(),
        })
        .collect();
    ops.extend(
        current
            .into_iter()
            .filter(|name| !names.contains(name.as_str()))
            .map(|name| AlterConfigOp {
                name,
                op: AlterConfigOpType::Delete,
                value: None,
            }),
    );
    Ok(ops)
}

fn legacy_alter(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    given: &[(String, Option<String>)],
    validate_only: bool,
) -> Result<(), KafkaError> {
    let current: Vec<String> = match resource_type {
        RESOURCE_TOPIC => match broker.meta().topic(name) {
            Some(topic) => topic.configs.keys().cloned().collect(),
            None => {
                return Err(KafkaError {
                    code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    message: Some(format!("Topic {name} does not exist.")),
                });
            }
        },
        RESOURCE_BROKER => {
            let scope = if name.is_empty() {
                BrokerConfigScope::ClusterDefault
            } else {
                check_node_id(broker, name, false)?;
                BrokerConfigScope::ThisBroker
            };
            broker
                .meta()
                .dynamic_broker_configs(scope)
                .into_keys()
                .collect()
        }
        RESOURCE_BROKER_LOGGER => {
            return Err(invalid_request(
                "AlterConfigs is deprecated and does not support the resource type BROKER_LOGGER",
            ));
        }
        other => {
            return Err(invalid_request(format!(
                "AlterConfigs does not support resource type {other}; use IncrementalAlterConfigs"
            )));
        }
    };
    let ops = replacing_ops(current, given)?;
    apply_ops(broker, resource_type, name, &ops, validate_only)
}
