//! `skiff-meta` owns a single node's metadata: topics, their partition counts and topic IDs,
//! topic config overrides and dynamic broker configs, all persisted crash-safely in one file
//! under the data directory.
//!
//! It also owns the config registry: every topic- and broker-level key Skiff accepts, with Kafka's
//! names, types, defaults, validation, dynamic/read-only status and topic-to-broker synonyms; and
//! the Kafka semantics built on it: DescribeConfigs entries (sources, synonyms), the
//! IncrementalAlterConfigs operations, and each topic's typed effective config.
//!
//! Everything here is synchronous and free of I/O except [`MetadataStore`]'s own file.
//! [`MetadataStore`] is a plain struct (`&mut self` mutations); the broker shares it behind a lock.
//! Errors are one enum, [`MetaError`], whose [`MetaError::kafka_error_code`] gives the code a
//! response carries.
//!
//! ```
//! use std::collections::BTreeMap;
//! use skiff_meta::{AlterConfigOp, MetadataStore, NewTopic, TopicRef};
//!
//! # fn main() -> skiff_meta::Result<()> {
//! # let dir = tempfile::TempDir::new().map_err(|e| skiff_meta::MetaError::InvalidRequest(e.to_string()))?;
//! let static_configs = BTreeMap::from([("log.retention.hours".to_owned(), "24".to_owned())]);
//! let mut store = MetadataStore::open(dir.path(), &static_configs)?;
//! let topic = store.create_topic(&NewTopic::new("orders", 3).config("cleanup.policy", "delete"), false)?;
//! store.incremental_alter_topic_configs("orders", &[AlterConfigOp::set("retention.ms", "60000")], false)?;
//! assert_eq!(store.effective_topic_config("orders")?.retention_ms, 60_000);
//! assert_eq!(store.topic_by_id(topic.id).map(|t| t.partitions), Some(3));
//! store.delete_topic(TopicRef::Id(topic.id))?;
//! # Ok(())
//! # }
//! ```

pub mod config;
mod error;
mod persist;
mod store;
mod topic_name;

pub use config::{
    AlterConfigOp, AlterConfigOpType, BrokerConfigScope, CleanupPolicy, CompressionType,
    ConfigEntry, ConfigSource, ConfigSynonym, ConfigType, EffectiveTopicConfig, TimestampType,
};
pub use error::{MetaError, Result};
pub use store::{
    LOCK_FILE, MAX_PARTITIONS_PER_TOPIC, METADATA_FILE, MetadataStore, NewTopic, TopicInfo,
    TopicRef,
};
pub use topic_name::{MAX_TOPIC_NAME_LEN, topic_names_collide, validate_topic_name};
