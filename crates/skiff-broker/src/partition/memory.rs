//! A [`PartitionStore`] in memory, for tests of [`super::Partition`] without files: batches in
//! a vector, everything durable at once, no producer snapshots (a restart would rebuild the
//! producer state from the batches). Lookups by time have batch granularity.

use std::path::Path;

use bytes::{Bytes, BytesMut};
use skiff_log::{LogConfig, LogError, SyncTarget, TimestampOffset};
use skiff_records::{BatchHeader, RecordsError, UNCHECKED_PREFIX_LEN};

use super::store::{PartitionStore, Stored, TimeQuery};

#[derive(Default)]
pub struct MemoryStore {
    config: LogConfig,
    start: i64,
    end: i64,
    batches: Vec<(BatchHeader, Bytes)>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }
}

impl PartitionStore for MemoryStore {
    fn append(&mut self, batches: Bytes, _now_ms: i64) -> Result<Stored, LogError> {
        let mut next = self.end;
        let mut appended = Vec::new();
        let mut rest = &batches[..];
        while !rest.is_empty() {
            let total = BatchHeader::parse(rest)?.total_len();
            let Some((batch, tail)) = rest.split_at_checked(total) else {
                return Err(RecordsError::PartialBatch {
                    needed: total as u64,
                    available: rest.len(),
                }
                .into());
            };
            rest = tail;
            let mut header = BatchHeader::parse_validated(batch)?;
            header.validate_for_produce()?;
            header.base_offset = next;
            next = header.last_offset() + 1;
            let mut bytes = BytesMut::from(&header.unchecked_prefix()[..]);
            bytes.extend_from_slice(batch.get(UNCHECKED_PREFIX_LEN..).unwrap_or_default());
            appended.push((header, bytes.freeze()));
        }
        let (Some(first), Some(last)) = (appended.first(), appended.last()) else {
            return Err(RecordsError::Empty.into());
        };
        let stored = Stored {
            base_offset: first.0.base_offset,
            last_offset: last.0.last_offset(),
            log_append_time: -1,
            log_start_offset: self.start,
            rolled: false,
        };
        self.batches.extend(appended);
        self.end = next;
        Ok(stored)
    }

    fn read(&self, offset: i64, max_bytes: usize) -> Result<Bytes, LogError> {
        if offset < self.start || offset > self.end {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start: self.start,
                log_end: self.end,
            });
        }
        let mut out = BytesMut::new();
        for (header, bytes) in &self.batches {
            if header.last_offset() < offset {
                continue;
            }
            if !out.is_empty() && out.len() + bytes.len() > max_bytes {
                break;
            }
            out.extend_from_slice(bytes);
        }
        Ok(out.freeze())
    }

    fn headers_from(
        &self,
        offset: i64,
        visit: &mut dyn FnMut(&BatchHeader),
    ) -> Result<(), LogError> {
        self.batches
            .iter()
            .filter(|(h, _)| h.last_offset() >= offset.max(self.start))
            .for_each(|(h, _)| visit(h));
        Ok(())
    }

    fn header_at(&self, offset: i64) -> Result<Option<BatchHeader>, LogError> {
        if offset < self.start || offset >= self.end {
            return Ok(None);
        }
        Ok(self
            .batches
            .iter()
            .map(|(h, _)| *h)
            .find(|h| h.last_offset() >= offset))
    }

    fn offsets(&self) -> (i64, i64) {
        (self.start, self.end)
    }

    fn find(&self, query: TimeQuery) -> Result<Option<TimestampOffset>, LogError> {
        let live = self
            .batches
            .iter()
            .filter(|(h, _)| h.last_offset() >= self.start);
        Ok(match query {
            TimeQuery::AtOrAfter(timestamp) => live
                .into_iter()
                .find(|(h, _)| h.max_timestamp >= timestamp)
                .map(|(h, _)| TimestampOffset {
                    offset: h.base_offset.max(self.start),
                    timestamp: h.max_timestamp,
                }),
            TimeQuery::Newest => live
                .into_iter()
                .max_by_key(|(h, _)| (h.max_timestamp, std::cmp::Reverse(h.base_offset)))
                .map(|(h, _)| TimestampOffset {
                    offset: h.base_offset,
                    timestamp: h.max_timestamp,
                }),
        })
    }

    fn delete_before(&mut self, offset: i64) -> Result<i64, LogError> {
        self.start = self.start.max(offset.min(self.end));
        self.batches.retain(|(h, _)| h.last_offset() >= self.start);
        Ok(self.start)
    }

    fn apply_retention(&mut self, _now_ms: i64) -> Result<(), LogError> {
        Ok(())
    }

    fn flush(&mut self, _now_ms: i64, _force: bool) -> Result<(), LogError> {
        Ok(())
    }

    fn size_in_bytes(&self) -> u64 {
        self.batches.iter().map(|(_, b)| b.len() as u64).sum()
    }

    fn config(&self) -> &LogConfig {
        &self.config
    }

    fn set_config(&mut self, config: LogConfig) -> Result<(), LogError> {
        self.config = config;
        Ok(())
    }

    fn sync_target(&self) -> Result<Option<SyncTarget>, LogError> {
        Ok(None)
    }

    fn mark_durable(&mut self, _end: i64) {}

    fn durable_offset(&self) -> i64 {
        self.end
    }

    fn offline(&self) -> Option<String> {
        None
    }

    fn snapshot_dir(&self) -> Option<&Path> {
        None
    }
}
