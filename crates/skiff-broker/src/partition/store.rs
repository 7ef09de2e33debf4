//! The storage seam of a partition: what [`super::Partition`] needs of the place its records
//! live. The local segment log of `skiff-log` is the first implementation; a second backend
//! (object storage in cluster mode) implements the same trait and no handler changes.
//!
//! The trait is synchronous and called under the partition's store lock: appends, reads and
//! maintenance are short critical sections. Durability is the one asynchronous part, and it
//! stays outside the lock: [`PartitionStore::sync_target`] hands out what to sync, the
//! partition's group committer syncs it off the lock and reports back with
//! [`PartitionStore::mark_durable`].

use std::path::Path;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use skiff_log::{LogConfig, LogError, PartitionLog, SyncSource, SyncTarget, TimestampOffset};
use skiff_records::BatchHeader;

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker's time stamped on the batches (`LogAppendTime`), else -1.
    pub log_append_time: i64,
    pub log_start_offset: i64,
    /// Whether the append started a new segment (the partition then snapshots its producers).
    pub rolled: bool,
}

/// A record looked up by time (ListOffsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeQuery {
    /// The first record with a timestamp at or after this one.
    AtOrAfter(i64),
    /// The record with the largest timestamp.
    Newest,
}

/// The records of one partition and their durability.
pub trait PartitionStore: Send {
    /// Validates produced batches (or a marker) and appends them, assigning offsets from the
    /// log end; nothing is written unless every batch is valid.
    fn append(&mut self, batches: Bytes, now_ms: i64) -> Result<Stored, LogError>;
    /// Whole batches from the one holding `offset`, up to `max_bytes` (the first one whole even
    /// if larger). Empty at the log end; OffsetOutOfRange outside the log.
    fn read(&self, offset: i64, max_bytes: usize) -> Result<Bytes, LogError>;
    /// Visits the headers of the batches from the one holding `offset` to the end (recovery
    /// of the producer state at start).
    fn headers_from(
        &self,
        offset: i64,
        visit: &mut dyn FnMut(&BatchHeader),
    ) -> Result<(), LogError>;
    /// The header of the batch holding `offset` (the first after it, past a gap); `None` at or
    /// past the log end, or before its start. Reads no record bytes.
    fn header_at(&self, offset: i64) -> Result<Option<BatchHeader>, LogError>;
    /// The log start and end offsets.
    fn offsets(&self) -> (i64, i64);
    fn find(&self, query: TimeQuery) -> Result<Option<TimestampOffset>, LogError>;
    /// Moves the log start up to `offset` (DeleteRecords); returns the new log start.
    fn delete_before(&mut self, offset: i64) -> Result<i64, LogError>;
    /// Applies the retention settings of [`PartitionStore::config`].
    fn apply_retention(&mut self, now_ms: i64) -> Result<(), LogError>;
    /// Writes what is buffered when `flush.ms` is due, or at once with `force`.
    fn flush(&mut self, now_ms: i64, force: bool) -> Result<(), LogError>;
    fn size_in_bytes(&self) -> u64;
    fn config(&self) -> &LogConfig;
    fn set_config(&mut self, config: LogConfig) -> Result<(), LogError>;
    /// What to sync for everything appended so far, or `None` when it is durable already.
    fn sync_target(&self) -> Result<Option<SyncTarget>, LogError>;
    /// Offsets below `end` are durable (the target's sync succeeded).
    fn mark_durable(&mut self, end: i64);
    fn durable_offset(&self) -> i64;
    /// Why the store takes no appends any more (a write that may have left a partial record
    /// behind), if it does not: the partition is offline until the broker restarts.
    fn offline(&self) -> Option<String>;
    /// Where producer snapshots are kept, if this store keeps them as files.
    fn snapshot_dir(&self) -> Option<&Path>;
}

impl PartitionStore for PartitionLog {
    fn append(&mut self, batches: Bytes, now_ms: i64) -> Result<Stored, LogError> {
        let segment_before = self.active_segment_base_offset();
        let info = PartitionLog::append(self, batches, now_ms)?;
        Ok(Stored {
            base_offset: info.base_offset,
            last_offset: info.last_offset,
            log_append_time: info.log_append_time,
            log_start_offset: info.log_start_offset,
            rolled: self.active_segment_base_offset() != segment_before,
        })
    }

    fn read(&self, offset: i64, max_bytes: usize) -> Result<Bytes, LogError> {
        PartitionLog::read(self, offset, max_bytes).map(|r| r.records)
    }

    fn headers_from(
        &self,
        offset: i64,
        visit: &mut dyn FnMut(&BatchHeader),
    ) -> Result<(), LogError> {
        self.for_each_batch_header(offset, visit)
    }

    fn header_at(&self, offset: i64) -> Result<Option<BatchHeader>, LogError> {
        self.batch_header_at(offset)
    }

    fn offsets(&self) -> (i64, i64) {
        (self.log_start_offset(), self.log_end_offset())
    }

    fn find(&self, query: TimeQuery) -> Result<Option<TimestampOffset>, LogError> {
        match query {
            TimeQuery::AtOrAfter(timestamp) => self.offset_for_timestamp(timestamp),
            TimeQuery::Newest => self.max_timestamp_offset(),
        }
    }

    fn delete_before(&mut self, offset: i64) -> Result<i64, LogError> {
        self.delete_records_before(offset)
    }

    fn apply_retention(&mut self, now_ms: i64) -> Result<(), LogError> {
        PartitionLog::apply_retention(self, now_ms).map(|_| ())
    }

    fn flush(&mut self, now_ms: i64, force: bool) -> Result<(), LogError> {
        if force || self.flush_due(now_ms) {
            PartitionLog::flush(self)?;
        }
        Ok(())
    }

    fn size_in_bytes(&self) -> u64 {
        PartitionLog::size_in_bytes(self)
    }

    fn config(&self) -> &LogConfig {
        PartitionLog::config(self)
    }

    fn set_config(&mut self, config: LogConfig) -> Result<(), LogError> {
        PartitionLog::set_config(self, config)
    }

    fn sync_target(&self) -> Result<Option<SyncTarget>, LogError> {
        PartitionLog::sync_target(self)
    }

    fn mark_durable(&mut self, end: i64) {
        PartitionLog::mark_durable(self, end);
    }

    fn durable_offset(&self) -> i64 {
        PartitionLog::durable_offset(self)
    }

    fn offline(&self) -> Option<String> {
        PartitionLog::offline(self).map(str::to_owned)
    }

    fn snapshot_dir(&self) -> Option<&Path> {
        Some(self.dir())
    }
}

/// A partition's store under its lock; the group committer syncs through it.
pub(super) struct StoreCell(pub(super) Mutex<Box<dyn PartitionStore>>);

impl SyncSource for StoreCell {
    fn sync_target(&self) -> Result<Option<SyncTarget>, LogError> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sync_target()
    }

    fn mark_durable(&self, end_offset: i64) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .mark_durable(end_offset);
    }

    fn durable_offset(&self) -> i64 {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .durable_offset()
    }
}
