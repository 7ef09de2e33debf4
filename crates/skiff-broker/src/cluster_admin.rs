//! Topic administration in cluster mode. PostgreSQL holds the topics: CreateTopics,
//! DeleteTopics, CreatePartitions and topic config changes are checked by the local metadata
//! store as always (Kafka's rules and error codes), then written to PostgreSQL, then the mirror
//! is refreshed, so the handler's answer describes what every broker now sees.
//!
//! The topic handlers are synchronous; these calls wait for PostgreSQL on the handler's own
//! worker thread (`block_in_place`), which admin requests can afford. Cluster mode therefore
//! needs tokio's multi-thread runtime (the broker binary's).

use std::collections::BTreeMap;
use std::sync::Arc;

use skiff_cluster::DbError;
use skiff_cluster::topics::{self, TopicRefusal};
use skiff_meta::{MetaError, NewTopic, TopicInfo, TopicRef};
use skiff_protocol::Uuid;

use crate::cluster::Cluster;
use crate::partition::Topic;
use crate::state::Broker;

/// Producer IDs a broker takes from PostgreSQL at a time.
const PRODUCER_ID_BLOCK: i64 = 1000;

fn unavailable(context: &str, e: impl std::fmt::Display) -> MetaError {
    MetaError::io(
        context.to_string(),
        std::io::Error::other(format!("cluster metadata: {e}")),
    )
}

/// Runs `work` to completion from synchronous handler code.
fn wait<T>(work: impl std::future::Future<Output = T>) -> Result<T, MetaError> {
    crate::cluster::block_on(work).map_err(|e| unavailable("cluster mode", e))
}

fn db_error(context: &str, cluster: &Cluster, e: DbError) -> MetaError {
    if let DbError::Fenced { node_id, epoch } = e
        && let Some(reg) = cluster.registration()
        && reg.node_id == node_id
        && reg.epoch == epoch
    {
        cluster.fenced(reg);
    }
    unavailable(context, e)
}

impl Broker {
    fn cluster_and_registration(
        &self,
        context: &str,
    ) -> Result<(Arc<Cluster>, skiff_cluster::membership::Registration), MetaError> {
        let cluster = self
            .cluster()
            .cloned()
            .ok_or_else(|| unavailable(context, "not in cluster mode"))?;
        let reg = cluster
            .registration()
            .ok_or_else(|| unavailable(context, "this broker is not registered right now"))?;
        Ok((cluster, reg))
    }

    /// Writes a group's config overrides to PostgreSQL (every broker mirrors them), then into
    /// this broker's view.
    pub(crate) fn cluster_set_group_configs(
        &self,
        group_id: &str,
        overrides: BTreeMap<String, String>,
    ) -> Result<(), MetaError> {
        let (cluster, reg) = self.cluster_and_registration("altering group configs")?;
        wait(skiff_cluster::coordinators::set_group_configs(
            &cluster.db,
            reg,
            group_id,
            &overrides,
        ))?
        .map_err(|e| db_error("altering group configs", &cluster, e))?;
        self.groups.mirror_group_overrides(group_id, overrides);
        Ok(())
    }

    /// Re-reads the topics from PostgreSQL into the mirror.
    fn refresh_topics(&self, cluster: &Cluster) -> Result<(), MetaError> {
        let rows = wait(topics::list(&cluster.db))?
            .map_err(|e| db_error("reading the cluster's topics", cluster, e))?;
        crate::cluster::Host::mirror(
            self,
            rows.into_iter().map(crate::cluster::topic_info).collect(),
        );
        Ok(())
    }

    /// A producer ID from this broker's block; a new block of [`PRODUCER_ID_BLOCK`] from
    /// PostgreSQL when it runs out.
    pub(crate) fn cluster_allocate_producer_id(&self) -> Result<i64, MetaError> {
        let (cluster, reg) = self.cluster_and_registration("allocating a producer ID")?;
        if let Some(id) = cluster.next_producer_id() {
            return Ok(id);
        }
        let first = wait(topics::allocate_producer_ids(
            &cluster.db,
            reg,
            PRODUCER_ID_BLOCK,
        ))?
        .map_err(|e| db_error("allocating producer IDs", &cluster, e))?;
        Ok(cluster.take_producer_id_block(first, PRODUCER_ID_BLOCK))
    }

    /// CreateTopics in cluster mode (see [`Broker::create_topics`]).
    pub(crate) fn cluster_create_topics(
        &self,
        news: &[NewTopic],
    ) -> Vec<Result<Arc<Topic>, MetaError>> {
        let (cluster, reg) = match self.cluster_and_registration("creating a topic") {
            Ok(pair) => pair,
            Err(e) => {
                let message = e.to_string();
                return news
                    .iter()
                    .map(|_| Err(unavailable("creating a topic", &message)))
                    .collect();
            }
        };
        let mut results = Vec::with_capacity(news.len());
        for new in news {
            results.push(self.cluster_create_one(&cluster, reg, new));
        }
        if let Err(e) = self.refresh_topics(&cluster) {
            tracing::warn!(error = %e, "refreshing topics after creation failed");
        }
        results
            .into_iter()
            .map(|r| {
                r.and_then(|name| {
                    self.topic_by_name(&name)
                        .ok_or_else(|| unavailable("creating a topic", "created but not seen"))
                })
            })
            .collect()
    }

    fn cluster_create_one(
        &self,
        cluster: &Cluster,
        reg: skiff_cluster::membership::Registration,
        new: &NewTopic,
    ) -> Result<String, MetaError> {
        let planned: TopicInfo = self.meta_mut().create_topic(new, true)?;
        if planned
            .configs
            .get("cleanup.policy")
            .is_some_and(|p| p.contains("compact"))
        {
            return Err(MetaError::InvalidConfig(
                "compacted topics (cleanup.policy=compact) are not available in cluster mode yet"
                    .into(),
            ));
        }
        let id = Uuid::random().map_err(|e| unavailable("creating a topic ID", e))?;
        let created = wait(topics::create(
            &cluster.db,
            reg,
            &planned.name,
            uuid::Uuid::from_u128(id.as_u128()),
            planned.partitions,
            &planned.configs,
        ))?
        .map_err(|e| db_error("creating a topic", cluster, e))?;
        match created {
            Ok(_) => {
                tracing::info!(topic = %planned.name, id = %id, partitions = planned.partitions, "topic created in the cluster");
                Ok(planned.name)
            }
            Err(TopicRefusal::Exists) => Err(MetaError::TopicAlreadyExists(planned.name)),
            Err(other) => Err(unavailable("creating a topic", format!("{other:?}"))),
        }
    }

    /// DeleteTopics in cluster mode: returns the deleted topic.
    pub(crate) fn cluster_delete_topic(&self, topic: TopicRef<'_>) -> Result<TopicInfo, MetaError> {
        let (cluster, reg) = self.cluster_and_registration("deleting a topic")?;
        let info = self.meta().resolve(topic)?.clone();
        if self.meta().broker_value("delete.topic.enable").as_deref() == Some("false") {
            return Err(MetaError::TopicDeletionDisabled);
        }
        let deleted = wait(topics::delete(&cluster.db, reg, &info.name))?
            .map_err(|e| db_error("deleting a topic", &cluster, e))?;
        self.refresh_topics(&cluster)?;
        match deleted {
            Ok(_) => {
                tracing::info!(topic = %info.name, id = %info.id, "topic deleted from the cluster");
                Ok(info)
            }
            Err(_) => Err(MetaError::UnknownTopic(info.name)),
        }
    }

    /// CreatePartitions in cluster mode, after the local checks.
    pub(crate) fn cluster_grow_topic(&self, name: &str, total: i32) -> Result<(), MetaError> {
        let (cluster, reg) = self.cluster_and_registration("adding partitions")?;
        let grown = wait(topics::add_partitions(&cluster.db, reg, name, total))?
            .map_err(|e| db_error("adding partitions", &cluster, e))?;
        self.refresh_topics(&cluster)?;
        match grown {
            Ok(()) => Ok(()),
            Err(TopicRefusal::NotMore { current }) => Err(MetaError::InvalidPartitions(format!(
                "Topic already has {current} partitions."
            ))),
            Err(_) => Err(MetaError::UnknownTopic(name.to_string())),
        }
    }

    /// A topic's new config overrides in cluster mode, after the local checks.
    pub(crate) fn cluster_set_topic_configs(
        &self,
        name: &str,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), MetaError> {
        if configs
            .get("cleanup.policy")
            .is_some_and(|p| p.contains("compact"))
        {
            return Err(MetaError::InvalidConfig(
                "compacted topics (cleanup.policy=compact) are not available in cluster mode yet"
                    .into(),
            ));
        }
        let (cluster, reg) = self.cluster_and_registration("altering topic configs")?;
        let set = wait(topics::set_configs(&cluster.db, reg, name, configs))?
            .map_err(|e| db_error("altering topic configs", &cluster, e))?;
        self.refresh_topics(&cluster)?;
        set.map_err(|_| MetaError::UnknownTopic(name.to_string()))
    }
}
