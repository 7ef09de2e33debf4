//! Admin operations: topics (create, delete, list, describe, configs, partitions, offsets), groups
//! (list, describe, delete, admin offset commits) and
//! KIP-714 client-metrics subscriptions (alter, describe, list: config resources of type 16).

use skiff_protocol::generated::create_partitions_request::CreatePartitionsTopic;
use skiff_protocol::generated::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use skiff_protocol::generated::delete_topics_request::DeleteTopicState;
use skiff_protocol::generated::describe_configs_request::DescribeConfigsResource;
use skiff_protocol::generated::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use skiff_protocol::generated::{
    ConsumerGroupDescribeRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteTopicsRequest, DescribeConfigsRequest, DescribeGroupsRequest,
    IncrementalAlterConfigsRequest, ListConfigResourcesRequest, ListGroupsRequest,
};
use skiff_protocol::{Uuid, error_codes};

use crate::client::{Client, TopicMetadata};
use crate::consumer::{TopicPartition, list_offsets};
use crate::error::{Error, Result};

/// A topic to create.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    /// -1: the broker's default.
    pub partitions: i32,
    /// -1: the broker's default.
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    pub fn new(name: impl Into<String>, partitions: i32) -> Self {
        NewTopic {
            name: name.into(),
            partitions,
            replication_factor: -1,
            configs: Vec::new(),
        }
    }
}

/// A topic with its partitions' offsets.
#[derive(Debug, Clone)]
pub struct TopicDescription {
    pub metadata: TopicMetadata,
    /// (partition, earliest offset, latest offset)
    pub offsets: Vec<(i32, i64, i64)>,
}

/// A group from ListGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    pub state: String,
    pub group_type: String,
}

/// A group member (consumer protocol groups list their assignment by topic name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    pub member_epoch: i32,
    pub assignment: Vec<TopicPartition>,
}

/// A described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: String,
    /// "consumer" (KIP-848) or the classic protocol type.
    pub group_type: String,
    pub group_epoch: i32,
    pub assignor: String,
    pub members: Vec<GroupMember>,
    /// (partition, committed offset) for every partition with a commit.
    pub offsets: Vec<(TopicPartition, i64)>,
}

/// Config resource type of KIP-714 client-metrics subscriptions.
pub const CLIENT_METRICS_RESOURCE: i8 = 16;

/// Config resource type of a topic.
const TOPIC_RESOURCE: i8 = 2;

/// The operation of one IncrementalAlterConfigs change (Kafka's `AlterConfigOp.OpType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlterConfigOp {
    /// Set the value (0).
    Set,
    /// Revert to the default; the value is ignored (1).
    Delete,
    /// Add to a list value (2).
    Append,
    /// Remove from a list value (3).
    Subtract,
}

impl AlterConfigOp {
    /// The protocol code.
    pub fn code(self) -> i8 {
        match self {
            AlterConfigOp::Set => 0,
            AlterConfigOp::Delete => 1,
            AlterConfigOp::Append => 2,
            AlterConfigOp::Subtract => 3,
        }
    }
}

/// One config of a described resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    /// Kafka's `ConfigSource` code (for client metrics: 7 = set on the subscription, 5 = default).
    pub source: i8,
    pub read_only: bool,
    pub is_sensitive: bool,
}

/// Admin calls over a [`Client`] (single-node clusters and Skiff: any broker serves them).
#[derive(Debug, Clone)]
pub struct Admin {
    client: Client,
}

impl Admin {
    pub fn new(client: Client) -> Admin {
        Admin { client }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn controller(&self) -> Result<i32> {
        let md = self.client.refresh_metadata(Some(&[])).await?;
        Ok(
            if md.controller_id >= 0 && md.brokers.contains_key(&md.controller_id) {
                md.controller_id
            } else {
                md.brokers.keys().next().copied().unwrap_or(-1)
            },
        )
    }

    /// Creates topics; returns their IDs. The first failure is returned as an error.
    pub async fn create_topics(&self, topics: &[NewTopic]) -> Result<Vec<(String, Uuid)>> {
        let node = self.controller().await?;
        let timeout_ms = self
            .client
            .config()
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32;
        let r = self
            .client
            .request(node, |_| CreateTopicsRequest {
                topics: topics
                    .iter()
                    .map(|t| CreatableTopic {
                        name: t.name.as_str().into(),
                        num_partitions: t.partitions,
                        replication_factor: t.replication_factor,
                        configs: t
                            .configs
                            .iter()
                            .map(|(k, v)| CreatableTopicConfig {
                                name: k.as_str().into(),
                                value: Some(v.as_str().into()),
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    })
                    .collect(),
                timeout_ms,
                validate_only: false,
                ..Default::default()
            })
            .await?;
        let mut out = Vec::new();
        for t in r.topics {
            if t.error_code != error_codes::NONE {
                return Err(Error::broker_for(
                    "CreateTopics",
                    t.error_code,
                    format!("topic {}", t.name),
                    t.error_message.map(|m| m.to_string()),
                ));
            }
            out.push((t.name.to_string(), t.topic_id));
        }
        let generation = self.client.cached_metadata().generation;
        self.client.invalidate_metadata(generation);
        Ok(out)
    }

    /// Deletes topics by name.
    pub async fn delete_topics(&self, names: &[&str]) -> Result<()> {
        let node = self.controller().await?;
        let timeout_ms = self
            .client
            .config()
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32;
        let r = self
            .client
            .request(node, |v| {
                if v >= 6 {
                    DeleteTopicsRequest {
                        topics: names
                            .iter()
                            .map(|n| DeleteTopicState {
                                name: Some((*n).into()),
                                topic_id: Uuid::ZERO,
                                ..Default::default()
                            })
                            .collect(),
                        timeout_ms,
                        ..Default::default()
                    }
                } else {
                    DeleteTopicsRequest {
                        topic_names: names.iter().map(|n| (*n).into()).collect(),
                        timeout_ms,
                        ..Default::default()
                    }
                }
            })
            .await?;
        for t in r.responses {
            if t.error_code != error_codes::NONE {
                return Err(Error::broker_for(
                    "DeleteTopics",
                    t.error_code,
                    format!("topic {}", t.name.as_deref().unwrap_or("?")),
                    t.error_message.map(|m| m.to_string()),
                ));
            }
        }
        let generation = self.client.cached_metadata().generation;
        self.client.invalidate_metadata(generation);
        Ok(())
    }

    /// Every topic (internal ones included), sorted by name.
    pub async fn list_topics(&self) -> Result<Vec<TopicMetadata>> {
        let md = self.client.refresh_metadata(None).await?;
        Ok(md.topics.values().cloned().collect())
    }

    /// A topic's metadata plus earliest/latest offsets per partition.
    pub async fn describe_topic(&self, name: &str) -> Result<TopicDescription> {
        let md = self
            .client
            .refresh_metadata(Some(&[name.to_string()]))
            .await?;
        let metadata = md
            .topics
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopic(name.to_string()))?;
        if metadata.error_code != error_codes::NONE {
            return Err(Error::broker_for(
                "Metadata",
                metadata.error_code,
                format!("topic {name}"),
                None,
            ));
        }
        let tps: Vec<TopicPartition> = metadata
            .partitions
            .iter()
            .map(|p| TopicPartition::new(name, p.partition))
            .collect();
        let earliest = list_offsets(&self.client, &tps, -2, 0).await?;
        let latest = list_offsets(&self.client, &tps, -1, 0).await?;
        let offsets = tps
            .iter()
            .map(|tp| {
                let find = |v: &[(TopicPartition, i64)]| {
                    v.iter()
                        .find(|(t, _)| t == tp)
                        .map(|(_, o)| *o)
                        .unwrap_or(-1)
                };
                (tp.partition, find(&earliest), find(&latest))
            })
            .collect();
        Ok(TopicDescription { metadata, offsets })
    }

    /// Every group the broker knows.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let r = self
            .client
            .request_any(|_| ListGroupsRequest::default())
            .await?;
        if r.error_code != error_codes::NONE {
            return Err(Error::broker("ListGroups", r.error_code, None));
        }
        let mut groups: Vec<GroupListing> = r
            .groups
            .into_iter()
            .map(|g| GroupListing {
                group_id: g.group_id.to_string(),
                protocol_type: g.protocol_type.to_string(),
                state: g.group_state.to_string(),
                group_type: g.group_type.to_string(),
            })
            .collect();
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(groups)
    }

    /// Describes a group: KIP-848 groups through ConsumerGroupDescribe, share groups through
    /// ShareGroupDescribe (`group_type` "share", no committed offsets), classic ones through
    /// DescribeGroups; plus its committed offsets.
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription> {
        let response = self
            .client
            .request_coordinator(group, |_| ConsumerGroupDescribeRequest {
                group_ids: vec![group.into()],
                ..Default::default()
            })
            .await;
        let mut description = match response {
            Ok(r) => match r.groups.into_iter().next() {
                Some(g) if g.error_code == error_codes::NONE => GroupDescription {
                    group_id: g.group_id.to_string(),
                    state: g.group_state.to_string(),
                    group_type: "consumer".into(),
                    group_epoch: g.group_epoch,
                    assignor: g.assignor_name.to_string(),
                    members: g
                        .members
                        .into_iter()
                        .map(|m| GroupMember {
                            member_id: m.member_id.to_string(),
                            client_id: m.client_id.to_string(),
                            client_host: m.client_host.to_string(),
                            member_epoch: m.member_epoch,
                            assignment: m
                                .assignment
                                .topic_partitions
                                .iter()
                                .flat_map(|t| {
                                    t.partitions
                                        .iter()
                                        .map(|p| TopicPartition::new(t.topic_name.to_string(), *p))
                                })
                                .collect(),
                        })
                        .collect(),
                    offsets: Vec::new(),
                },
                Some(g) if g.error_code == error_codes::GROUP_ID_NOT_FOUND => {
                    match self.describe_share_group(group).await {
                        // A share group has no committed offsets (see
                        // `describe_share_group_offsets`).
                        Ok(Some(share)) => return Ok(share),
                        Ok(None) | Err(Error::UnsupportedVersion { .. }) => {
                            self.describe_classic(group).await?
                        }
                        Err(e) => return Err(e),
                    }
                }
                Some(g) => {
                    return Err(Error::broker_for(
                        "ConsumerGroupDescribe",
                        g.error_code,
                        format!("group {group}"),
                        g.error_message.map(|m| m.to_string()),
                    ));
                }
                None => {
                    return Err(Error::protocol(
                        "ConsumerGroupDescribe",
                        "no group in response",
                    ));
                }
            },
            Err(Error::UnsupportedVersion { .. }) => self.describe_classic(group).await?,
            Err(e) => return Err(e),
        };
        description.offsets = self.group_offsets(group).await?;
        Ok(description)
    }

    async fn describe_classic(&self, group: &str) -> Result<GroupDescription> {
        let r = self
            .client
            .request_coordinator(group, |_| DescribeGroupsRequest {
                groups: vec![group.into()],
                ..Default::default()
            })
            .await?;
        let g = r
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| Error::protocol("DescribeGroups", "no group in response"))?;
        if g.error_code != error_codes::NONE {
            return Err(Error::broker_for(
                "DescribeGroups",
                g.error_code,
                format!("group {group}"),
                g.error_message.map(|m| m.to_string()),
            ));
        }
        Ok(GroupDescription {
            group_id: g.group_id.to_string(),
            state: g.group_state.to_string(),
            group_type: if g.protocol_type.is_empty() {
                "classic".into()
            } else {
                format!("classic/{}", g.protocol_type)
            },
            group_epoch: -1,
            assignor: g.protocol_data.to_string(),
            members: g
                .members
                .into_iter()
                .map(|m| GroupMember {
                    member_id: m.member_id.to_string(),
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    member_epoch: -1,
                    assignment: Vec::new(),
                })
                .collect(),
            offsets: Vec::new(),
        })
    }

    /// Every committed offset of `group` (OffsetFetch with all topics).
    pub async fn group_offsets(&self, group: &str) -> Result<Vec<(TopicPartition, i64)>> {
        use skiff_protocol::generated::OffsetFetchRequest;
        use skiff_protocol::generated::offset_fetch_request::OffsetFetchRequestGroup;
        let r = self
            .client
            .request_coordinator(group, |v| {
                if v >= 8 {
                    OffsetFetchRequest {
                        groups: vec![OffsetFetchRequestGroup {
                            group_id: group.into(),
                            topics: None,
                            ..Default::default()
                        }],
                        ..Default::default()
                    }
                } else {
                    OffsetFetchRequest {
                        group_id: group.into(),
                        topics: None,
                        ..Default::default()
                    }
                }
            })
            .await?;
        let mut out = Vec::new();
        if let Some(g) = r.groups.into_iter().next() {
            if g.error_code != error_codes::NONE {
                return Err(Error::broker_for(
                    "OffsetFetch",
                    g.error_code,
                    format!("group {group}"),
                    None,
                ));
            }
            for t in g.topics {
                let name = if t.name.is_empty() {
                    self.client
                        .topic_name(t.topic_id)
                        .await
                        .unwrap_or_else(|_| t.topic_id.to_string())
                } else {
                    t.name.to_string()
                };
                for p in t.partitions {
                    if p.committed_offset >= 0 {
                        out.push((
                            TopicPartition::new(name.clone(), p.partition_index),
                            p.committed_offset,
                        ));
                    }
                }
            }
        } else {
            for t in r.topics {
                for p in t.partitions {
                    if p.committed_offset >= 0 {
                        out.push((
                            TopicPartition::new(t.name.to_string(), p.partition_index),
                            p.committed_offset,
                        ));
                    }
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Deletes (empty) groups.
    pub async fn delete_groups(&self, groups: &[&str]) -> Result<()> {
        for group in groups {
            let r = self
                .client
                .request_coordinator(group, |_| DeleteGroupsRequest {
                    groups_names: vec![(*group).into()],
                    ..Default::default()
                })
                .await?;
            for g in r.results {
                if g.error_code != error_codes::NONE {
                    return Err(Error::broker_for(
                        "DeleteGroups",
                        g.error_code,
                        format!("group {}", g.group_id),
                        None,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Creates or changes the client-metrics subscription `name` (IncrementalAlterConfigs on
    /// resource type 16): each change is (key, operation, value), e.g.
    /// `("metrics", AlterConfigOp::Set, "org.apache.kafka.producer.")`,
    /// `("interval.ms", AlterConfigOp::Set, "1000")`, `("match", AlterConfigOp::Set,
    /// "client_id=app.*")`. The value of a [`AlterConfigOp::Delete`] is not sent.
    pub async fn alter_client_metrics(
        &self,
        name: &str,
        changes: &[(&str, AlterConfigOp, &str)],
    ) -> Result<()> {
        self.alter_configs(CLIENT_METRICS_RESOURCE, name, "client metrics", changes)
            .await
    }

    /// The configs of the client-metrics subscription `name` (DescribeConfigs on resource type
    /// 16). An unknown subscription is the broker's RESOURCE_NOT_FOUND error.
    pub async fn describe_client_metrics(&self, name: &str) -> Result<Vec<ConfigEntry>> {
        self.describe_configs(CLIENT_METRICS_RESOURCE, name, "client metrics")
            .await
    }

    /// Names of the client-metrics subscriptions, sorted (ListConfigResources filtered to type
    /// 16; v0, ListClientMetricsResources, lists only those anyway).
    pub async fn list_client_metrics(&self) -> Result<Vec<String>> {
        let r = self
            .client
            .request_any(|_| ListConfigResourcesRequest {
                resource_types: vec![CLIENT_METRICS_RESOURCE],
                ..Default::default()
            })
            .await?;
        if r.error_code != error_codes::NONE {
            return Err(Error::broker("ListConfigResources", r.error_code, None));
        }
        let mut names: Vec<String> = r
            .config_resources
            .into_iter()
            .filter(|c| c.resource_type == CLIENT_METRICS_RESOURCE)
            .map(|c| c.resource_name.to_string())
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }
    /// Changes the topic `name`'s configs (IncrementalAlterConfigs on resource type 2): each
    /// change is (key, operation, value); the value of a [`AlterConfigOp::Delete`] is not sent.
    pub async fn alter_topic_configs(
        &self,
        name: &str,
        changes: &[(&str, AlterConfigOp, &str)],
    ) -> Result<()> {
        self.alter_configs(TOPIC_RESOURCE, name, "topic", changes)
            .await
    }

    /// The configs of the topic `name` (DescribeConfigs on resource type 2); the ones set on the
    /// topic itself have source 1 (`DYNAMIC_TOPIC_CONFIG`).
    pub async fn describe_topic_configs(&self, name: &str) -> Result<Vec<ConfigEntry>> {
        self.describe_configs(TOPIC_RESOURCE, name, "topic").await
    }

    /// Grows the topic `name` to `total` partitions (CreatePartitions, the broker places them).
    pub async fn create_partitions(&self, name: &str, total: i32) -> Result<()> {
        let node = self.controller().await?;
        let timeout_ms = self
            .client
            .config()
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32;
        let r = self
            .client
            .request(node, |_| CreatePartitionsRequest {
                topics: vec![CreatePartitionsTopic {
                    name: name.into(),
                    count: total,
                    assignments: None,
                    ..Default::default()
                }],
                timeout_ms,
                validate_only: false,
                ..Default::default()
            })
            .await?;
        first_failure(
            "CreatePartitions",
            r.results.into_iter().map(|t| {
                (
                    t.error_code,
                    format!("topic {}", t.name),
                    t.error_message.map(|m| m.to_string()),
                )
            }),
            "no result for the topic",
        )?;
        let generation = self.client.cached_metadata().generation;
        self.client.invalidate_metadata(generation);
        Ok(())
    }

    /// ListOffsets (read_uncommitted) for `partitions` at `timestamp`: -2 the log start, -1 the
    /// log end, otherwise the first offset whose timestamp is at or after it (-1: none).
    pub async fn list_offsets(
        &self,
        partitions: &[TopicPartition],
        timestamp: i64,
    ) -> Result<Vec<(TopicPartition, i64)>> {
        list_offsets(&self.client, partitions, timestamp, 0).await
    }

    /// Commits `offsets` for `group` as an admin (OffsetCommit with generation -1 and no member,
    /// as Kafka's tools do): the broker accepts it only while the group has no members.
    pub async fn commit_group_offsets(
        &self,
        group: &str,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<()> {
        crate::consumer::commit_as(&self.client, group, "", -1, offsets).await
    }

    /// IncrementalAlterConfigs of one resource; `what` names it in errors.
    async fn alter_configs(
        &self,
        resource_type: i8,
        name: &str,
        what: &str,
        changes: &[(&str, AlterConfigOp, &str)],
    ) -> Result<()> {
        let request = IncrementalAlterConfigsRequest {
            resources: vec![AlterConfigsResource {
                resource_type,
                resource_name: name.into(),
                configs: changes
                    .iter()
                    .map(|(key, op, value)| AlterableConfig {
                        name: (*key).into(),
                        config_operation: op.code(),
                        value: (*op != AlterConfigOp::Delete).then(|| (*value).into()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            validate_only: false,
            ..Default::default()
        };
        let r = self.client.request_any(|_| request).await?;
        first_failure(
            "IncrementalAlterConfigs",
            r.responses.into_iter().map(|resource| {
                (
                    resource.error_code,
                    format!("{what} {}", resource.resource_name),
                    resource.error_message.map(|m| m.to_string()),
                )
            }),
            "no result for the resource",
        )
    }

    /// DescribeConfigs of one resource (every key); `what` names it in errors.
    async fn describe_configs(
        &self,
        resource_type: i8,
        name: &str,
        what: &str,
    ) -> Result<Vec<ConfigEntry>> {
        let request = DescribeConfigsRequest {
            resources: vec![DescribeConfigsResource {
                resource_type,
                resource_name: name.into(),
                configuration_keys: None,
                ..Default::default()
            }],
            include_synonyms: false,
            include_documentation: false,
            ..Default::default()
        };
        let r = self.client.request_any(|_| request).await?;
        let result = r
            .results
            .into_iter()
            .find(|res| res.resource_type == resource_type && &*res.resource_name == name)
            .ok_or_else(|| Error::protocol("DescribeConfigs", "no result for the resource"))?;
        if result.error_code != error_codes::NONE {
            return Err(Error::broker_for(
                "DescribeConfigs",
                result.error_code,
                format!("{what} {name}"),
                result.error_message.map(|m| m.to_string()),
            ));
        }
        Ok(result
            .configs
            .into_iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.map(|v| v.to_string()),
                source: c.config_source,
                read_only: c.read_only,
                is_sensitive: c.is_sensitive,
            })
            .collect())
    }
}

/// Ok when every result (error code, what it names, message) succeeded; the first failure as
/// the broker's error; a protocol error (`missing`) when the answer has no result at all.
fn first_failure(
    api: &'static str,
    results: impl IntoIterator<Item = (i16, String, Option<String>)>,
    missing: &'static str,
) -> Result<()> {
    let mut answered = false;
    for (code, what, message) in results {
        answered = true;
        if code != error_codes::NONE {
            return Err(Error::broker_for(api, code, what, message));
        }
    }
    if answered {
        Ok(())
    } else {
        Err(Error::protocol(api, missing))
    }
}
