//! Metadata v0-13: brokers, cluster ID, topics with their IDs and partitions; lookup by name or
//! (v10+) by topic ID; auto-creation of unknown topics when allowed. Only topics the principal
//! may DESCRIBE are shown; auto-creation needs CREATE.

use std::collections::{HashMap, HashSet};

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_meta::NewTopic;
use skiff_protocol::generated::MetadataRequest;
use skiff_protocol::generated::metadata_request::MetadataRequestTopic;
use skiff_protocol::generated::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use skiff_protocol::{ByteString, ErrorCode, Response, Uuid, error_codes};

use super::RequestContext;
use crate::partition::Topic;
use crate::state::Broker;

pub fn handle(ctx: &RequestContext, request: MetadataRequest) -> Response {
    let broker = &ctx.broker;
    let version = ctx.version;
    let include_topic_ops = version >= 8 && request.include_topic_authorized_operations;

    let topics = match request.topics {
        // v0: an empty list means all topics; v1+: null means all, empty means none.
        None => all_topics(ctx, include_topic_ops),
        Some(list) if version == 0 && list.is_empty() => all_topics(ctx, include_topic_ops),
        Some(list) => {
            let auto_create = version < 4 || request.allow_auto_topic_creation;
            // Auto-creation needs CREATE on the cluster, or on the topic; naming a topic at all
            // needs DESCRIBE on it (Kafka does not tell others whether it exists).
            let may_create_any = ctx.allows_on_cluster(AclOperation::Create);
            let may_create = |name: &str| {
                may_create_any || ctx.authorized(AclOperation::Create, ResourceType::Topic, name)
            };
            let described = |t: &MetadataRequestTopic| {
                t.name.as_deref().is_none_or(|name| {
                    ctx.authorized(AclOperation::Describe, ResourceType::Topic, name)
                })
            };
            let (visible, hidden): (Vec<_>, Vec<_>) = list.into_iter().partition(described);
            let created = if auto_create {
                create_missing(broker, &visible, may_create)
            } else {
                HashMap::new()
            };
            let mut topics: Vec<MetadataResponseTopic> = visible
                .into_iter()
                .map(|t| {
                    requested_topic(
                        ctx,
                        t.name,
                        t.topic_id,
                        auto_create,
                        &created,
                        include_topic_ops,
                    )
                })
                .collect();
            topics.extend(hidden.into_iter().map(|t| MetadataResponseTopic {
                error_code: error_codes::TOPIC_AUTHORIZATION_FAILED,
                name: t.name,
                ..Default::default()
            }));
            topics
        }
    };

    Response::Metadata(MetadataResponse {
        brokers: broker
            .nodes_for(ctx.listener)
            .into_iter()
            .map(|n| MetadataResponseBroker {
                node_id: n.node_id,
                host: ByteString::from(n.host),
                port: n.port,
                rack: n.rack.map(ByteString::from),
                ..Default::default()
            })
            .collect(),
        cluster_id: Some(ByteString::from(broker.cluster_id.clone())),
        controller_id: broker.controller_id(),
        topics,
        cluster_authorized_operations: if (8..=10).contains(&version)
            && request.include_cluster_authorized_operations
        {
            ctx.cluster_authorized_operations()
        } else {
            i32::MIN
        },
        ..Default::default()
    })
}

/// Every topic the request may DESCRIBE.
fn all_topics(ctx: &RequestContext, include_ops: bool) -> Vec<MetadataResponseTopic> {
    ctx.broker
        .all_topics()
        .iter()
        .filter(|t| ctx.allows(AclOperation::Describe, ResourceType::Topic, &t.info.name))
        .map(|t| describe(ctx, t, include_ops))
        .collect()
}

/// Auto-creates, with one metadata write, every valid topic name of `list` that does not
/// exist yet (a request naming 10,000 new topics must not cost 10,000 writes). Returns what
/// became of each: the topic created (described even if deleted again at once), or the error
/// code (a name another request created meanwhile is no failure, and not listed).
/// Names the request may not create (`may_create`) are left out, and answered
/// TOPIC_AUTHORIZATION_FAILED by [`requested_topic`].
fn create_missing(
    broker: &Broker,
    list: &[MetadataRequestTopic],
    may_create: impl Fn(&str) -> bool,
) -> Created {
    if !broker.meta().auto_create_topics_enable() {
        return HashMap::new();
    }
    let mut seen = HashSet::new();
    let missing: Vec<NewTopic> = list
        .iter()
        .filter_map(|t| t.name.as_deref())
        .filter(|name| {
            skiff_meta::validate_topic_name(name).is_ok()
                && broker.topic_by_name(name).is_none()
                && may_create(name)
                && seen.insert(name.to_string())
        })
        .map(|name| NewTopic::new(name, -1))
        .collect();
    if missing.is_empty() {
        return HashMap::new();
    }
    // Serialised with CreateTopics and DeleteTopics: a topic deleted and auto-created under the
    // same name at once must not share (and lose) a directory.
    let _admin = super::topics::admin_lock();
    let mut outcomes = HashMap::new();
    for (new, created) in missing.iter().zip(broker.create_topics(&missing)) {
        match created {
            Ok(topic) => {
                tracing::info!(topic = %new.name, partitions = topic.info.partitions, "auto-created topic");
                outcomes.insert(new.name.clone(), Ok(topic));
            }
            Err(e) if e.kafka_error_code() == ErrorCode::TOPIC_ALREADY_EXISTS => {}
            Err(e) => {
                outcomes.insert(new.name.clone(), Err(e.kafka_error_code()));
            }
        }
    }
    outcomes
}

/// What auto-creation did with each name it tried: the topic, or the error code.
type Created = HashMap<String, Result<std::sync::Arc<Topic>, ErrorCode>>;

fn requested_topic(
    ctx: &RequestContext,
    name: Option<ByteString>,
    topic_id: Uuid,
    auto_create: bool,
    created: &Created,
    include_ops: bool,
) -> MetadataResponseTopic {
    let broker = &ctx.broker;
    let error = |code: i16, name: Option<ByteString>, topic_id: Uuid| MetadataResponseTopic {
        error_code: code,
        name,
        topic_id,
        ..Default::default()
    };
    match name {
        Some(name) => {
            if let Some(topic) = broker.topic_by_name(&name) {
                return describe(ctx, &topic, include_ops);
            }
            if let Err(e) = skiff_meta::validate_topic_name(&name) {
                return error(e.kafka_error_code().code(), Some(name), Uuid::ZERO);
            }
            if !(auto_create && broker.meta().auto_create_topics_enable()) {
                return error(
                    error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                    Some(name),
                    Uuid::ZERO,
                );
            }
            if !ctx.allows_on_cluster(AclOperation::Create)
                && !ctx.allows(AclOperation::Create, ResourceType::Topic, &name)
            {
                return error(
                    error_codes::TOPIC_AUTHORIZATION_FAILED,
                    Some(name),
                    Uuid::ZERO,
                );
            }
            // create_missing created it (answered even if deleted again at once), or says why
            // not. A name that existed then and is gone now (deleted meanwhile) is created now,
            // the same way.
            let outcome = match created.get(&*name) {
                Some(outcome) => Some(outcome.clone()),
                None => {
                    let again = [MetadataRequestTopic {
                        name: Some(name.clone()),
                        ..Default::default()
                    }];
                    create_missing(broker, &again, |_| true).remove(&*name)
                }
            };
            match outcome {
                Some(Ok(topic)) => describe(ctx, &topic, include_ops),
                Some(Err(code)) => error(code.code(), Some(name), Uuid::ZERO),
                // Another request created it in the meantime.
                None => match broker.topic_by_name(&name) {
                    Some(topic) => describe(ctx, &topic, include_ops),
                    None => error(error_codes::LEADER_NOT_AVAILABLE, Some(name), Uuid::ZERO),
                },
            }
        }
        None if !topic_id.is_zero() => match broker.topic_by_id(topic_id) {
            Some(topic)
                if !ctx.authorized(
                    AclOperation::Describe,
                    ResourceType::Topic,
                    &topic.info.name,
                ) =>
            {
                error(error_codes::TOPIC_AUTHORIZATION_FAILED, None, topic_id)
            }
            Some(topic) => describe(ctx, &topic, include_ops),
            None => error(error_codes::UNKNOWN_TOPIC_ID, None, topic_id),
        },
        None => error(error_codes::INVALID_REQUEST, None, Uuid::ZERO),
    }
}

fn describe(ctx: &RequestContext, topic: &Topic, include_ops: bool) -> MetadataResponseTopic {
    MetadataResponseTopic {
        error_code: error_codes::NONE,
        name: Some(ByteString::from(topic.info.name.clone())),
        topic_id: topic.info.id,
        is_internal: false,
        partitions: (0..topic.info.partitions)
            .map(|index| match ctx.broker.partition_leader(topic, index) {
                Some(node) => MetadataResponsePartition {
                    error_code: error_codes::NONE,
                    partition_index: index,
                    leader_id: node,
                    leader_epoch: ctx.broker.leader_epoch(),
                    replica_nodes: vec![node],
                    isr_nodes: vec![node],
                    offline_replicas: Vec::new(),
                    ..Default::default()
                },
                None => MetadataResponsePartition {
                    error_code: error_codes::LEADER_NOT_AVAILABLE,
                    partition_index: index,
                    leader_id: -1,
                    leader_epoch: ctx.broker.leader_epoch(),
                    ..Default::default()
                },
            })
            .collect(),
        topic_authorized_operations: if include_ops {
            ctx.authorized_operations(ResourceType::Topic, &topic.info.name)
        } else {
            i32::MIN
        },
        ..Default::default()
    }
}
