use crate::error::{LogError, Result};

/// Which timestamp the broker keeps (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampPolicy {
    /// Keep the producer's timestamps.
    #[default]
    CreateTime,
    /// Stamp each appended batch with the broker's clock.
    LogAppendTime,
}

/// When appended bytes are forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushPolicy {
    /// Every acknowledged append is fdatasync'ed first (group-committed). The single-node
    /// default: there is no replica to cover a lost page cache.
    #[default]
    Always,
    /// The caller flushes when [`crate::PartitionLog::flush_due`] says so (`flush.ms`).
    Interval { flush_ms: u64 },
    /// Never flush explicitly (tests, benchmarks, or a replicated deployment).
    Never,
}

/// What recovery does with an invalid batch in the last segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Truncate a torn tail (damage with no valid batch after it: what a crash during a write
    /// leaves); damage followed by valid batches fails `open` with [`LogError::Corrupt`] naming
    /// the file and position, and leaves the files untouched.
    #[default]
    TornTail,
    /// Truncate at the first invalid batch, whatever follows (the operator's choice, Kafka
    /// `log.recovery.mode = "truncate"` in Skiff): valid batches after the damage are dropped.
    Truncate,
    /// Fail `open` on any invalid batch, torn tail included.
    Strict,
}

/// Per-partition log settings, named after the Kafka topic configs they mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: roll a new segment when an append would pass this size.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment is older than this (`None` = never).
    pub segment_ms: Option<u64>,
    /// `index.interval.bytes`: bytes of batches between two sparse index entries.
    pub index_interval_bytes: u64,
    /// `max.message.bytes`: largest accepted batch, log overhead included.
    pub max_message_bytes: usize,
    /// `message.timestamp.type`.
    pub timestamp_policy: TimestampPolicy,
    /// `retention.ms`: delete segments whose newest record is older (`None` = unlimited).
    pub retention_ms: Option<u64>,
    /// `retention.bytes`: delete oldest segments while the log is larger (`None` = unlimited).
    pub retention_bytes: Option<u64>,
    /// `flush.ms` and friends.
    pub flush: FlushPolicy,
    /// Recovery behaviour on open.
    pub recovery: RecoveryMode,
    /// The cache of open segment files this log's segments use (shared by a broker's logs).
    pub files: crate::FileCacheHandle,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: Some(7 * 24 * 60 * 60 * 1000),
            index_interval_bytes: 4096,
            max_message_bytes: 1024 * 1024 + 12,
            timestamp_policy: TimestampPolicy::CreateTime,
            retention_ms: Some(7 * 24 * 60 * 60 * 1000),
            retention_bytes: None,
            flush: FlushPolicy::Always,
            recovery: RecoveryMode::TornTail,
            files: crate::FileCacheHandle::default(),
        }
    }
}

impl LogConfig {
    /// Checks the settings before a log uses them.
    pub fn validate(&self) -> Result<()> {
        // Index positions are u32, so a segment cannot pass 4 GiB; Kafka caps at i32::MAX too.
        if self.segment_bytes < skiff_records::BATCH_HEADER_LEN as u64
            || self.segment_bytes > i32::MAX as u64
        {
            return Err(LogError::InvalidConfig(
                "segment_bytes must be between 61 and 2^31-1",
            ));
        }
        if self.index_interval_bytes == 0 {
            return Err(LogError::InvalidConfig(
                "index_interval_bytes must be positive",
            ));
        }
        if self.max_message_bytes < skiff_records::BATCH_HEADER_LEN {
            return Err(LogError::InvalidConfig(
                "max_message_bytes is below a batch header",
            ));
        }
        if self.segment_ms == Some(0) {
            return Err(LogError::InvalidConfig("segment_ms must be positive"));
        }
        Ok(())
    }
}
