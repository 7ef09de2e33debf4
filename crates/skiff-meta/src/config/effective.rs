//! A topic's effective configuration as typed values: what `skiff-log` and the produce/fetch paths
//! read.

use std::collections::BTreeMap;

use crate::error::{MetaError, Result};

/// Which timestamp a topic's records carry (`message.timestamp.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// The producer's timestamp is kept (bounded by `message.timestamp.{before,after}.max.ms`).
    CreateTime,
    /// The broker overwrites the batch's max timestamp with the append time.
    LogAppendTime,
}

/// What happens to old segments (`cleanup.policy`; at least one is set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

/// The broker-side compression of a topic (`compression.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompressionType {
    /// Keep the producer's compression as-is.
    Producer,
    Uncompressed,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

/// The resolved value of every topic key Skiff acts on: topic override, else dynamic broker
/// config, else dynamic cluster-default broker config, else static broker config, else default.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveTopicConfig {
    /// `retention.ms`; -1 means no time limit.
    pub retention_ms: i64,
    /// `retention.bytes` per partition; negative means no size limit.
    pub retention_bytes: i64,
    /// `segment.bytes` (at least 1 MiB).
    pub segment_bytes: u32,
    /// `segment.ms` (at least 1).
    pub segment_ms: i64,
    /// `segment.jitter.ms`.
    pub segment_jitter_ms: i64,
    /// `segment.index.bytes`.
    pub segment_index_bytes: u32,
    /// `index.interval.bytes`.
    pub index_interval_bytes: u32,
    /// `max.message.bytes`: the largest record batch accepted.
    pub max_message_bytes: u32,
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`.
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`.
    pub message_timestamp_after_max_ms: i64,
    pub cleanup_policy: CleanupPolicy,
    pub compression_type: CompressionType,
    /// `flush.ms`: fsync at least this often (`i64::MAX`: leave it to the flush policy).
    pub flush_ms: i64,
    /// `flush.messages`: fsync at least every this many records.
    pub flush_messages: i64,
    /// `file.delete.delay.ms`.
    pub file_delete_delay_ms: i64,
    /// `min.insync.replicas`: acks=all produce fails with NOT_ENOUGH_REPLICAS above 1.
    pub min_insync_replicas: i32,
}

impl EffectiveTopicConfig {
    /// Builds the typed view from a complete map of canonical topic values.
    pub(crate) fn from_values(values: &BTreeMap<&'static str, String>) -> Result<Self> {
        let get = |name: &str| {
            values
                .get(name)
                .map(String::as_str)
                .ok_or_else(|| MetaError::InvalidConfig(format!("{name} has no value")))
        };
        let long = |name: &str| -> Result<i64> {
            let text = get(name)?;
            text.parse()
                .map_err(|_| MetaError::InvalidConfig(format!("{name}={text} is not a LONG")))
        };
        let int = |name: &str| -> Result<i32> {
            let text = get(name)?;
            text.parse()
                .map_err(|_| MetaError::InvalidConfig(format!("{name}={text} is not an INT")))
        };
        let unsigned = |name: &str| -> Result<u32> {
            let value = int(name)?;
            u32::try_from(value)
                .map_err(|_| MetaError::InvalidConfig(format!("{name}={value} is negative")))
        };
        let message_timestamp_type = match get("message.timestamp.type")? {
            "CreateTime" => TimestampType::CreateTime,
            "LogAppendTime" => TimestampType::LogAppendTime,
            other => {
                return Err(MetaError::InvalidConfig(format!(
                    "message.timestamp.type={other} is not a timestamp type"
                )));
            }
        };
        let policy = get("cleanup.policy")?;
        let items = super::registry::split_list(policy);
        let cleanup_policy = CleanupPolicy {
            delete: items.contains(&"delete"),
            compact: items.contains(&"compact"),
        };
        let compression_type = match get("compression.type")? {
            "producer" => CompressionType::Producer,
            "uncompressed" => CompressionType::Uncompressed,
            "gzip" => CompressionType::Gzip,
            "snappy" => CompressionType::Snappy,
            "lz4" => CompressionType::Lz4,
            "zstd" => CompressionType::Zstd,
            other => {
                return Err(MetaError::InvalidConfig(format!(
                    "compression.type={other} is not a compression type"
                )));
            }
        };
        Ok(EffectiveTopicConfig {
            retention_ms: long("retention.ms")?,
            retention_bytes: long("retention.bytes")?,
            segment_bytes: unsigned("segment.bytes")?,
            segment_ms: long("segment.ms")?,
            segment_jitter_ms: long("segment.jitter.ms")?,
            segment_index_bytes: unsigned("segment.index.bytes")?,
            index_interval_bytes: unsigned("index.interval.bytes")?,
            max_message_bytes: unsigned("max.message.bytes")?,
            message_timestamp_type,
            message_timestamp_before_max_ms: long("message.timestamp.before.max.ms")?,
            message_timestamp_after_max_ms: long("message.timestamp.after.max.ms")?,
            cleanup_policy,
            compression_type,
            flush_ms: long("flush.ms")?,
            flush_messages: long("flush.messages")?,
            file_delete_delay_ms: long("file.delete.delay.ms")?,
            min_insync_replicas: int("min.insync.replicas")?,
        })
    }
}
