//! Metadata v0-13: brokers, cluster ID, topics with their IDs and partitions; lookup by name or
//! (v10+) by topic ID; auto-creation of unknown topics when allowed.

use std::collections::{HashMap, HashSet};

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

/// Kafka's ACL operation codes, as bits in the authorized-operations fields.
const OP_READ: i32 = 3;
const OP_WRITE: i32 = 4;
const OP_CREATE: i32 = 5;
const OP_DELETE: i32 = 6;
const OP_ALTER: i32 = 7;
const OP_DESCRIBE: i32 = 8;
const OP_CLUSTER_ACTION: i32 = 9;
const OP_DESCRIBE_CONFIGS: i32 = 10;
const OP_ALTER_CONFIGS: i32 = 11;
const OP_IDEMPOTENT_WRITE: i32 = 12;

fn bits(ops: &[i32]) -> i32 {
    ops.iter().fold(0, |acc, op| acc | (1 << op))
}

/// Skiff has no authorization: every client may do everything.
pub fn topic_authorized_operations() -> i32 {
    bits(&[
        OP_READ,
        OP_WRITE,
        OP_CREATE,
        OP_DELETE,
        OP_ALTER,
        OP_DESCRIBE,
        OP_DESCRIBE_CONFIGS,
        OP_ALTER_CONFIGS,
    ])
}

/// Group operations: READ, DELETE, DESCRIBE.
pub fn group_authorized_operations() -> i32 {
    bits(&[OP_READ, OP_DELETE, OP_DESCRIBE])
}

pub fn cluster_authorized_operations() -> i32 {
    bits(&[
        OP_CREATE,
        OP_ALTER,
        OP_DESCRIBE,
        OP_CLUSTER_ACTION,
        OP_DESCRIBE_CONFIGS,
        OP_ALTER_CONFIGS,
        OP_IDEMPOTENT_WRITE,
    ])
}

pub fn handle(ctx: &RequestContext, request: MetadataRequest) -> Response {
    let broker = &ctx.broker;
    let version = ctx.version;
    let include_topic_ops = version >= 8 && request.include_topic_authorized_operations;

    let topics = match request.topics {
        // v0: an empty list means all topics; v1+: null means all, empty means none.
        None => all_topics(broker, include_topic_ops),
        Some(list) if version == 0 && list.is_empty() => all_topics(broker, include_topic_ops),
        Some(list) => {
            let auto_create = version < 4 || request.allow_auto_topic_creation;
            let created = if auto_create {
                create_missing(broker, &list)
            } else {
                HashMap::new()
            };
            list.into_iter()
                .map(|t| {
                    requested_topic(
                        broker,
                        t.name,
                        t.topic_id,
                        auto_create,
                        &created,
                        include_topic_ops,
                    )
                })
                .collect()
        }
    };

    let (host, port) = broker.advertised_for(ctx.listener);
    Response::Metadata(MetadataResponse {
        brokers: vec![MetadataResponseBroker {
            node_id: broker.node_id(),
            host: ByteString::from(host.to_owned()),
            port: i32::from(port),
            rack: None,
            ..Default::default()
        }],
        cluster_id: Some(ByteString::from(broker.cluster_id.clone())),
        controller_id: broker.node_id(),
        topics,
        cluster_authorized_operations: if (8..=10).contains(&version)
            && request.include_cluster_authorized_operations
        {
            cluster_authorized_operations()
        } else {
            i32::MIN
        },
        ..Default::default()
    })
}

fn all_topics(broker: &Broker, include_ops: bool) -> Vec<MetadataResponseTopic> {
    broker
        .all_topics()
        .iter()
        .map(|t| describe(broker, t, include_ops))
        .collect()
}

/// Auto-creates, with one metadata write, every valid topic name of `list` that does not
/// exist yet (a request naming 10,000 new topics must not cost 10,000 writes). Returns what
/// became of each: the topic created (described even if deleted again at once), or the error
/// code (a name another request created meanwhile is no failure, and not listed).
fn create_missing(broker: &Broker, list: &[MetadataRequestTopic]) -> Created {
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
    broker: &Broker,
    name: Option<ByteString>,
    topic_id: Uuid,
    auto_create: bool,
    created: &Created,
    include_ops: bool,
) -> MetadataResponseTopic {
    let error = |code: i16, name: Option<ByteString>, topic_id: Uuid| MetadataResponseTopic {
        error_code: code,
        name,
        topic_id,
        ..Default::default()
    };
    match name {
        Some(name) => {
            if let Some(topic) = broker.topic_by_name(&name) {
                return describe(broker, &topic, include_ops);
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
                    create_missing(broker, &again).remove(&*name)
                }
            };
            match outcome {
                Some(Ok(topic)) => describe(broker, &topic, include_ops),
                Some(Err(code)) => error(code.code(), Some(name), Uuid::ZERO),
                // Another request created it in the meantime.
                None => match broker.topic_by_name(&name) {
                    Some(topic) => describe(broker, &topic, include_ops),
                    None => error(error_codes::LEADER_NOT_AVAILABLE, Some(name), Uuid::ZERO),
                },
            }
        }
        None if !topic_id.is_zero() => match broker.topic_by_id(topic_id) {
            Some(topic) => describe(broker, &topic, include_ops),
            None => error(error_codes::UNKNOWN_TOPIC_ID, None, topic_id),
        },
        None => error(error_codes::INVALID_REQUEST, None, Uuid::ZERO),
    }
}

fn describe(broker: &Broker, topic: &Topic, include_ops: bool) -> MetadataResponseTopic {
    let node = broker.node_id();
    MetadataResponseTopic {
        error_code: error_codes::NONE,
        name: Some(ByteString::from(topic.info.name.clone())),
        topic_id: topic.info.id,
        is_internal: false,
        partitions: topic
            .partitions
            .iter()
            .map(|p| MetadataResponsePartition {
                error_code: error_codes::NONE,
                partition_index: p.index,
                leader_id: node,
                leader_epoch: 0,
                replica_nodes: vec![node],
                isr_nodes: vec![node],
                offline_replicas: Vec::new(),
                ..Default::default()
            })
            .collect(),
        topic_authorized_operations: if include_ops {
            topic_authorized_operations()
        } else {
            i32::MIN
        },
        ..Default::default()
    }
}
