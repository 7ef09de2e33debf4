//! CreateTopics v2-7, DeleteTopics v1-6 and CreatePartitions v0-3, following Kafka's
//! `ControllerApis` and `ReplicationControlManager` on a single node: every replica is this node,
//! so a replication factor other than 1 (or -1 for the default) is INVALID_REPLICATION_FACTOR and
//! a manual assignment naming any other broker is INVALID_REPLICA_ASSIGNMENT.
//!
//! Topic mutations are serialised by [`ADMIN_LOCK`] so that the metadata change and the opening
//! or removal of partition logs that follows it happen as one step.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_meta::{ConfigEntry, MetaError, NewTopic, TopicRef};
use skiff_protocol::generated::create_partitions_response::{
    CreatePartitionsResponse, CreatePartitionsTopicResult,
};
use skiff_protocol::generated::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic,
};
use skiff_protocol::generated::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse,
};
use skiff_protocol::generated::delete_topics_response::{
    DeletableTopicResult, DeleteTopicsResponse,
};
use skiff_protocol::generated::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest,
};
use skiff_protocol::{ByteString, KafkaError, Response, Uuid, error_codes};

use super::{RequestContext, bs};
use crate::state::Broker;

const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
/// KRaft's metadata log topic, which Kafka refuses to create.
const CLUSTER_METADATA_TOPIC: &str = "__cluster_metadata";

/// Serialises admin mutations (topic create/delete/grow, config changes) across connections.
static ADMIN_LOCK: Mutex<()> = Mutex::new(());

pub(crate) fn admin_lock() -> MutexGuard<'static, ()> {
    ADMIN_LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

// ----- CreateTopics --------------------------------------------------------------------------

/// KIP-599's controller mutation quota of one request (`controller_mutation_rate`): in strict
/// mode (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+) a topic that comes while the
/// quota is exceeded is refused with THROTTLING_QUOTA_EXCEEDED; every topic admitted counts its
/// partitions; the response carries the throttle time.
struct MutationQuota<'a> {
    ctx: &'a RequestContext,
    strict: bool,
    counted: bool,
}

impl<'a> MutationQuota<'a> {
    fn new(ctx: &'a RequestContext, strict: bool, validate_only: bool) -> MutationQuota<'a> {
        MutationQuota {
            ctx,
            strict,
            counted: !validate_only && ctx.broker.quotas.any(),
        }
    }

    fn who(&self) -> crate::quotas::Requester<'a> {
        crate::quotas::Requester {
            user: &self.ctx.principal.name,
            client_id: self.ctx.client_id.as_deref().unwrap_or(""),
            instance: self.ctx.instance_id.map(|id| id.to_string()),
        }
    }

    /// Admits a topic mutating `partitions` partitions, counting them.
    fn admit(&self, partitions: i32) -> Result<(), KafkaError> {
        if !self.counted {
            return Ok(());
        }
        let key = skiff_quota::entity::Key::ControllerMutationRate;
        let now = crate::clock::now_ms();
        if self.strict && self.ctx.broker.quotas.exceeded(key, &self.who(), now) {
            return Err(KafkaError::new(
                error_codes::THROTTLING_QUOTA_EXCEEDED,
                "The throttling quota has been exceeded.",
            ));
        }
        self.ctx
            .broker
            .quotas
            .record(key, &self.who(), f64::from(partitions.max(0)), now);
        Ok(())
    }

    /// The response's throttle time.
    fn throttle_ms(&self) -> i32 {
        if !self.counted {
            return 0;
        }
        let key = skiff_quota::entity::Key::ControllerMutationRate;
        let t = self
            .ctx
            .broker
            .quotas
            .throttle(key, &self.who(), crate::clock::now_ms());
        i32::try_from(t).unwrap_or(i32::MAX)
    }
}

pub fn handle_create_topics(ctx: &RequestContext, request: CreateTopicsRequest) -> Response {
    let broker = &ctx.broker;
    let mut counts: HashMap<ByteString, usize> = HashMap::new();
    for topic in &request.topics {
        *counts.entry(topic.name.clone()).or_default() += 1;
    }
    let mut reported_duplicates = HashSet::new();
    // CREATE on the cluster, or on each topic.
    let may_create_any = ctx.allows_on_cluster(AclOperation::Create);
    // Each topic is checked first; the valid ones are then created with one metadata write (a
    // request for thousands of topics must not rewrite the metadata thousands of times).
    let mut checked: Vec<(ByteString, Result<NewTopic, KafkaError>)> = Vec::new();
    for topic in request.topics {
        if counts.get(&topic.name).copied().unwrap_or(0) > 1 {
            // Kafka answers once per duplicated name.
            if reported_duplicates.insert(topic.name.clone()) {
                checked.push((
                    topic.name,
                    Err(KafkaError::new(
                        error_codes::INVALID_REQUEST,
                        "Duplicate topic name.",
                    )),
                ));
            }
            continue;
        }
        let name = topic.name.clone();
        if !may_create_any && !ctx.authorized(AclOperation::Create, ResourceType::Topic, &name) {
            checked.push((
                name,
                Err(KafkaError::new(
                    error_codes::TOPIC_AUTHORIZATION_FAILED,
                    "Authorization failed.",
                )),
            ));
            continue;
        }
        checked.push((name, check_one(broker, topic)));
    }
    let quota = MutationQuota::new(ctx, ctx.version >= 6, request.validate_only);
    let default_partitions = broker.meta().default_num_partitions().unwrap_or(1);
    for (_, check) in &mut checked {
        if let Ok(new) = check {
            let partitions = if new.num_partitions > 0 {
                new.num_partitions
            } else {
                default_partitions
            };
            if let Err(e) = quota.admit(partitions) {
                *check = Err(e);
            }
        }
    }
    let _admin = admin_lock();
    let valid: Vec<NewTopic> = checked
        .iter()
        .filter_map(|(_, c)| c.as_ref().ok().cloned())
        .collect();
    let mut created = if request.validate_only {
        valid
            .iter()
            .map(|new| broker.create_topic(new, true))
            .collect::<Vec<_>>()
    } else {
        broker.create_topics(&valid)
    }
    .into_iter();
    let mut topics = Vec::with_capacity(checked.len());
    for (name, check) in checked {
        let result = check.and_then(|new| {
            let topic = created.next().unwrap_or_else(|| {
                Err(MetaError::io(
                    "creating a topic",
                    std::io::Error::other("not created"),
                ))
            })?;
            let configs_visible =
                ctx.allows(AclOperation::DescribeConfigs, ResourceType::Topic, &name);
            describe_created(broker, name.clone(), &new, &topic, request.validate_only)
                .map(|created| hide_configs_unless(configs_visible, created))
        });
        topics.push(result.unwrap_or_else(|error| failed_creation(name, error)));
    }
    Response::CreateTopics(CreateTopicsResponse {
        throttle_time_ms: quota.throttle_ms(),
        topics,
        ..Default::default()
    })
}

fn failed_creation(name: ByteString, error: KafkaError) -> CreatableTopicResult {
    CreatableTopicResult {
        name,
        topic_id: Uuid::ZERO,
        error_code: error.error_code(),
        error_message: error.message.map(bs),
        num_partitions: -1,
        replication_factor: -1,
        configs: Some(Vec::new()),
        ..Default::default()
    }
}

/// Checks one topic of a CreateTopics request (name, existence, configs, partitions, replicas)
/// and returns what to create.
fn check_one(broker: &Broker, topic: CreatableTopic) -> Result<NewTopic, KafkaError> {
    // Kafka's order: the name, then existence, then configs, then partitions and replicas.
    if &*topic.name == CLUSTER_METADATA_TOPIC {
        return Err(KafkaError::new(
            error_codes::INVALID_REQUEST,
            format!("Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited."),
        ));
    }
    skiff_meta::validate_topic_name(&topic.name)?;
    if broker.meta().topic(&topic.name).is_some() {
        return Err(MetaError::TopicAlreadyExists(topic.name.to_string()).into());
    }
    let null_configs: Vec<&str> = topic
        .configs
        .iter()
        .filter(|c| c.value.is_none())
        .map(|c| &*c.name)
        .collect();
    if !null_configs.is_empty() {
        return Err(KafkaError::new(
            error_codes::INVALID_CONFIG,
            format!(
                "Null value not supported for topic configs: {}",
                null_configs.join(",")
            ),
        ));
    }
    let mut configs = BTreeMap::new();
    for config in &topic.configs {
        if let Some(value) = &config.value {
            configs.insert(config.name.to_string(), value.to_string());
        }
    }
    let num_partitions = if topic.assignments.is_empty() {
        topic.num_partitions
    } else {
        if topic.replication_factor != -1 {
            return Err(KafkaError::new(
                error_codes::INVALID_REQUEST,
                "A manual partition assignment was specified, but replication factor was not set to -1.",
            ));
        }
        if topic.num_partitions != -1 {
            return Err(KafkaError::new(
                error_codes::INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            ));
        }
        check_creation_assignments(broker.node_id(), &topic.assignments)?
    };
    if topic.assignments.is_empty() {
        if topic.replication_factor < -1 || topic.replication_factor == 0 {
            return Err(KafkaError::new(
                error_codes::INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            ));
        }
        if topic.num_partitions < -1 || topic.num_partitions == 0 {
            return Err(KafkaError::new(
                error_codes::INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            ));
        }
    }
    Ok(NewTopic {
        name: topic.name.to_string(),
        num_partitions,
        replication_factor: topic.replication_factor,
        configs,
    })
}

/// Kafka shows a created topic's configs only to a principal that may DESCRIBE_CONFIGS it.
fn hide_configs_unless(visible: bool, mut created: CreatableTopicResult) -> CreatableTopicResult {
    if !visible {
        created.topic_config_error_code = error_codes::TOPIC_AUTHORIZATION_FAILED;
        created.configs = Some(Vec::new());
    }
    created
}

/// The answer for a topic just created (or, with `validate_only`, that would be).
fn describe_created(
    broker: &Broker,
    name: ByteString,
    new: &NewTopic,
    created: &crate::partition::Topic,
    validate_only: bool,
) -> Result<CreatableTopicResult, KafkaError> {
    let described = if validate_only {
        broker.meta().preview_topic_configs(&new.configs)?
    } else {
        broker.meta().describe_topic_configs(&new.name)?
    };
    Ok(CreatableTopicResult {
        name,
        topic_id: created.info.id,
        error_code: error_codes::NONE,
        error_message: None,
        topic_config_error_code: error_codes::NONE,
        num_partitions: created.info.partitions,
        replication_factor: 1,
        configs: Some(described.iter().map(creatable_config).collect()),
        ..Default::default()
    })
}

fn creatable_config(entry: &ConfigEntry) -> CreatableTopicConfigs {
    CreatableTopicConfigs {
        name: bs(entry.name.clone()),
        value: if entry.is_sensitive {
            None
        } else {
            entry.value.clone().map(bs)
        },
        read_only: entry.read_only,
        config_source: entry.source.code(),
        is_sensitive: entry.is_sensitive,
        ..Default::default()
    }
}

/// Checks one replica list of a manual assignment the way Kafka's
/// `validateManualPartitionAssignment` does; on one node the only valid list is `[node]`.
fn check_replicas(node: i32, replicas: &[i32]) -> Result<(), KafkaError> {
    if replicas.is_empty() {
        return Err(KafkaError::new(
            INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        ));
    }
    if let Some(other) = replicas.iter().find(|&&id| id != node) {
        return Err(KafkaError::new(
            INVALID_REPLICA_ASSIGNMENT,
            format!(
                "The manual partition assignment includes broker {other}, but no such broker is registered."
            ),
        ));
    }
    if replicas.len() > 1 {
        return Err(KafkaError::new(
            INVALID_REPLICA_ASSIGNMENT,
            format!("The manual partition assignment includes the broker {node} more than once."),
        ));
    }
    Ok(())
}

/// Validates a CreateTopics manual assignment and returns the partition count it implies.
fn check_creation_assignments(
    node: i32,
    assignments: &[CreatableReplicaAssignment],
) -> Result<i32, KafkaError> {
    let mut seen = HashSet::new();
    for assignment in assignments {
        if !seen.insert(assignment.partition_index) {
            return Err(KafkaError::new(
                INVALID_REPLICA_ASSIGNMENT,
                format!(
                    "Found multiple manual partition assignments for partition {}",
                    assignment.partition_index
                ),
            ));
        }
        check_replicas(node, &assignment.broker_ids)?;
    }
    let count = i32::try_from(seen.len()).unwrap_or(i32::MAX);
    if (0..count).any(|i| !seen.contains(&i)) {
        return Err(KafkaError::new(
            INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        ));
    }
    Ok(count)
}

// ----- DeleteTopics --------------------------------------------------------------------------

/// A topic of a DeleteTopics request, after duplicate and shape checks.
enum Target {
    Name(ByteString),
    Id(Uuid),
    Rejected(DeletableTopicResult),
}

pub fn handle_delete_topics(ctx: &RequestContext, request: DeleteTopicsRequest) -> Response {
    let broker = &ctx.broker;
    let version = ctx.version;
    let mut targets = Vec::new();
    if version >= 6 {
        for topic in request.topics {
            targets.push(match (topic.name, topic.topic_id.is_zero()) {
                (None, true) => Target::Rejected(deletion_error(
                    None,
                    Uuid::ZERO,
                    KafkaError::new(
                        error_codes::INVALID_REQUEST,
                        "Neither topic name nor id were specified.",
                    ),
                )),
                (None, false) => Target::Id(topic.topic_id),
                (Some(name), true) => Target::Name(name),
                (Some(name), false) => Target::Rejected(deletion_error(
                    Some(name),
                    topic.topic_id,
                    KafkaError::new(
                        error_codes::INVALID_REQUEST,
                        "You may not specify both topic name and topic id.",
                    ),
                )),
            });
        }
    } else {
        targets.extend(request.topic_names.into_iter().map(Target::Name));
    }

    // Kafka answers a duplicated name or ID once, with INVALID_REQUEST, and deletes nothing for it.
    let mut name_counts: HashMap<ByteString, usize> = HashMap::new();
    let mut id_counts: HashMap<Uuid, usize> = HashMap::new();
    for target in &targets {
        match target {
            Target::Name(n) => *name_counts.entry(n.clone()).or_default() += 1,
            Target::Id(id) => *id_counts.entry(*id).or_default() += 1,
            Target::Rejected(_) => {}
        }
    }
    let mut reported_names = HashSet::new();
    let mut reported_ids = HashSet::new();
    let mut responses = Vec::with_capacity(targets.len());
    let quota = MutationQuota::new(ctx, version >= 5, false);
    // A deletion mutates every partition of its topic.
    let admit = |topic: TopicRef<'_>| {
        let partitions = match topic {
            TopicRef::Name(n) => broker.topic_by_name(n),
            TopicRef::Id(id) => broker.topic_by_id(id),
        }
        .map_or(0, |t| t.info.partitions);
        quota.admit(partitions)
    };
    for target in targets {
        let result = match target {
            Target::Rejected(result) => result,
            Target::Name(name) if name_counts.get(&name).copied().unwrap_or(0) > 1 => {
                if !reported_names.insert(name.clone()) {
                    continue;
                }
                deletion_error(
                    Some(name),
                    Uuid::ZERO,
                    KafkaError::new(error_codes::INVALID_REQUEST, "Duplicate topic name."),
                )
            }
            Target::Id(id) if id_counts.get(&id).copied().unwrap_or(0) > 1 => {
                if !reported_ids.insert(id) {
                    continue;
                }
                deletion_error(
                    None,
                    id,
                    KafkaError::new(error_codes::INVALID_REQUEST, "Duplicate topic id."),
                )
            }
            Target::Name(name)
                if !ctx.authorized(AclOperation::Delete, ResourceType::Topic, &name) =>
            {
                deletion_error(Some(name), Uuid::ZERO, not_authorized())
            }
            Target::Name(name) => match admit(TopicRef::Name(&name))
                .and_then(|()| delete_one(broker, TopicRef::Name(&name), version))
            {
                Ok((_, id)) => deleted(Some(name), id),
                Err(error) => deletion_error(Some(name), Uuid::ZERO, error),
            },
            Target::Id(id) => match broker.topic_by_id(id).map(|t| t.info.name.clone()) {
                // The name is not told to a principal that may not DESCRIBE the topic.
                Some(name) if !ctx.allows(AclOperation::Describe, ResourceType::Topic, &name) => {
                    deletion_error(None, id, not_authorized())
                }
                Some(name) if !ctx.authorized(AclOperation::Delete, ResourceType::Topic, &name) => {
                    deletion_error(Some(bs(name)), id, not_authorized())
                }
                _ => match admit(TopicRef::Id(id))
                    .and_then(|()| delete_one(broker, TopicRef::Id(id), version))
                {
                    Ok((name, id)) => deleted(Some(bs(name)), id),
                    Err(error) => deletion_error(None, id, error),
                },
            },
        };
        responses.push(result);
    }
    Response::DeleteTopics(DeleteTopicsResponse {
        throttle_time_ms: quota.throttle_ms(),
        responses,
        ..Default::default()
    })
}

fn not_authorized() -> KafkaError {
    KafkaError::new(
        error_codes::TOPIC_AUTHORIZATION_FAILED,
        "Authorization failed.",
    )
}

fn deleted(name: Option<ByteString>, topic_id: Uuid) -> DeletableTopicResult {
    DeletableTopicResult {
        name,
        topic_id,
        error_code: error_codes::NONE,
        error_message: None,
        ..Default::default()
    }
}

fn deletion_error(
    name: Option<ByteString>,
    topic_id: Uuid,
    error: KafkaError,
) -> DeletableTopicResult {
    DeletableTopicResult {
        name,
        topic_id,
        error_code: error.error_code(),
        error_message: error.message.map(bs),
        ..Default::default()
    }
}

/// Deletes a topic from the metadata (persisted first), then its partitions.
fn delete_one(
    broker: &Broker,
    topic: TopicRef<'_>,
    version: i16,
) -> Result<(String, Uuid), KafkaError> {
    let _admin = admin_lock();
    let removed = if broker.cluster().is_some() {
        broker.cluster_delete_topic(topic)
    } else {
        broker.meta_mut().delete_topic(topic)
    };
    let removed = removed.map_err(|e| {
        // Before v3 a disabled deletion is INVALID_REQUEST (TOPIC_DELETION_DISABLED is v3+).
        if matches!(e, MetaError::TopicDeletionDisabled) && version < 3 {
            KafkaError::new(error_codes::INVALID_REQUEST, "Topic deletion is disabled.")
        } else {
            KafkaError::from(e)
        }
    })?;
    if broker.cluster().is_some() {
        return Ok((removed.name, removed.id));
    }
    if let Err(e) = broker.remove_topic(removed.id) {
        // The metadata no longer lists the topic; leftover directories go at the next start.
        tracing::error!(topic = %removed.name, error = %format!("{e:#}"), "deleting partition data failed");
    }
    Ok((removed.name, removed.id))
}

// ----- CreatePartitions ----------------------------------------------------------------------

pub fn handle_create_partitions(
    ctx: &RequestContext,
    request: CreatePartitionsRequest,
) -> Response {
    let broker = &ctx.broker;
    let mut counts: HashMap<ByteString, usize> = HashMap::new();
    for topic in &request.topics {
        *counts.entry(topic.name.clone()).or_default() += 1;
    }
    let mut reported = HashSet::new();
    let mut results = Vec::with_capacity(request.topics.len());
    let quota = MutationQuota::new(ctx, ctx.version >= 3, request.validate_only);
    for topic in request.topics {
        let outcome = if counts.get(&topic.name).copied().unwrap_or(0) > 1 {
            if !reported.insert(topic.name.clone()) {
                continue;
            }
            Err(KafkaError::new(
                error_codes::INVALID_REQUEST,
                "Duplicate topic name.",
            ))
        } else if !ctx.authorized(AclOperation::Alter, ResourceType::Topic, &topic.name) {
            Err(not_authorized())
        } else {
            // The partitions added are the mutation.
            let added = broker
                .topic_by_name(&topic.name)
                .map_or(0, |t| topic.count.saturating_sub(t.info.partitions));
            quota.admit(added).and_then(|()| {
                grow_one(
                    broker,
                    &topic.name,
                    topic.count,
                    topic.assignments.as_deref(),
                    request.validate_only,
                )
            })
        };
        let (error_code, error_message) = match outcome {
            Ok(()) => (error_codes::NONE, None),
            Err(e) => (e.error_code(), e.message.map(bs)),
        };
        results.push(CreatePartitionsTopicResult {
            name: topic.name,
            error_code,
            error_message,
            ..Default::default()
        });
    }
    Response::CreatePartitions(CreatePartitionsResponse {
        throttle_time_ms: quota.throttle_ms(),
        results,
        ..Default::default()
    })
}

fn grow_one(
    broker: &Broker,
    name: &str,
    count: i32,
    assignments: Option<
        &[skiff_protocol::generated::create_partitions_request::CreatePartitionsAssignment],
    >,
    validate_only: bool,
) -> Result<(), KafkaError> {
    let _admin = admin_lock();
    let info = {
        let mut meta = broker.meta_mut();
        // Checks the topic and the count (Kafka checks these before the assignments).
        let planned = meta.create_partitions(name, count, true)?;
        if let Some(assignments) = assignments {
            let current = meta.resolve(TopicRef::Name(name))?.partitions;
            let additional = planned.partitions.saturating_sub(current);
            if usize::try_from(additional).ok() != Some(assignments.len()) {
                return Err(KafkaError::new(
                    INVALID_REPLICA_ASSIGNMENT,
                    format!(
                        "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
                        assignments.len()
                    ),
                ));
            }
            for assignment in assignments {
                check_replicas(broker.node_id(), &assignment.broker_ids)?;
            }
        }
        if validate_only {
            return Ok(());
        }
        if broker.cluster().is_some() {
            drop(meta);
            return broker
                .cluster_grow_topic(name, count)
                .map_err(KafkaError::from);
        }
        meta.create_partitions(name, count, false)?
    };
    broker.grow_topic(info).map_err(|e| {
        tracing::error!(topic = %name, error = %format!("{e:#}"), "opening new partitions failed");
        KafkaError::new(
            error_codes::KAFKA_STORAGE_ERROR,
            format!("storage error while opening the new partitions: {e:#}"),
        )
    })
}
