//! [`PartitionLog`]: the ordered segments of one partition and the operations Kafka's request
//! handlers need (append, read, list offsets, delete records, retention, durability).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use skiff_records::{
    BatchHeader, NO_TIMESTAMP, RecordBatchMut, RecordsError, UNCHECKED_PREFIX_LEN,
};

use crate::checkpoint;
use crate::config::{FlushPolicy, LogConfig, RecoveryMode, TimestampPolicy};
use crate::error::{IoContext, LogError, Result};
use crate::segment::{
    INDEX_SUFFIX, LOG_SUFFIX, ScanEnd, Segment, TIME_INDEX_SUFFIX, parse_file_name,
};

/// What an append did, for the Produce response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset assigned to the first record.
    pub base_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
    /// The broker timestamp stamped on the batches, or -1 under create time.
    pub log_append_time: i64,
    /// Largest batch max timestamp of the appended batches.
    pub max_timestamp: i64,
    /// Base offset of the batch holding `max_timestamp`.
    pub offset_of_max_timestamp: i64,
    /// Log start offset after the append.
    pub log_start_offset: i64,
    /// Number of batches and bytes appended.
    pub batch_count: usize,
    pub size_in_bytes: usize,
}

/// What a read returned, for the Fetch response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// Whole batches; the first may start before the requested offset. Empty at the log end.
    pub records: Bytes,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// A record found by timestamp or as the newest one (ListOffsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub offset: i64,
    pub timestamp: i64,
}

/// What retention or DeleteRecords removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeletionOutcome {
    pub deleted_segments: usize,
    pub deleted_bytes: u64,
    pub log_start_offset: i64,
}

/// A handle to fdatasync the active segment outside the log's lock.
///
/// Taken with [`PartitionLog::sync_target`]; after [`SyncTarget::sync`] succeeds, pass
/// [`SyncTarget::end_offset`] to [`PartitionLog::mark_durable`]. Every byte appended before the
/// target was taken is covered: earlier segments were synced when they were rolled.
#[derive(Debug)]
pub struct SyncTarget {
    file: Arc<File>,
    path: PathBuf,
    end_offset: i64,
}

impl SyncTarget {
    /// A target over any file (tests of what a failing fdatasync does).
    #[cfg(test)]
    pub(crate) fn over(file: File, path: &Path, end_offset: i64) -> SyncTarget {
        SyncTarget {
            file: Arc::new(file),
            path: path.to_path_buf(),
            end_offset,
        }
    }

    /// The log end offset when the target was taken: offsets below it become durable.
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    /// fdatasync of the segment file. Blocking: run it on a blocking thread in async code.
    pub fn sync(&self) -> Result<()> {
        crate::faults::check(crate::faults::Fault::Sync, &self.path)
            .and_then(|()| self.file.sync_data())
            .io("fdatasync segment", &self.path)
    }
}

/// The durable log of one partition, one directory of segments.
///
/// Synchronous and not internally locked: wrap it in a `Mutex` (appends need `&mut`) and keep
/// fdatasync outside that lock with [`PartitionLog::sync_target`] or
/// [`crate::GroupCommitter`].
#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
    /// Rolled segments by base offset, all below `active`.
    sealed: BTreeMap<i64, Segment>,
    /// The segment appends go to.
    active: Segment,
    log_start_offset: i64,
    log_end_offset: i64,
    durable_end_offset: i64,
    first_unflushed_ms: Option<i64>,
    leader_epoch: Option<i32>,
    /// Set when a segment write or an fdatasync during a roll failed: bytes may sit half
    /// written past the log end, so no append is taken until recovery at the next open.
    offline: Option<Arc<str>>,
}

impl PartitionLog {
    /// Opens (or creates) the log in `dir`, recovering the last segment.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Self> {
        Self::open_synced(dir.as_ref(), config, true)
    }

    /// [`PartitionLog::open`] without its fsyncs (of a new segment's directory entry and of the
    /// active segment): for creating many partitions at once, when the caller makes the whole
    /// file system durable afterwards (one `syncfs`) before anything relies on them.
    pub fn open_unsynced(dir: impl AsRef<Path>, config: LogConfig) -> Result<Self> {
        Self::open_synced(dir.as_ref(), config, false)
    }

    fn open_synced(dir: &Path, config: LogConfig, sync: bool) -> Result<Self> {
        config.validate()?;
        let dir = dir.to_path_buf();
        fs::create_dir_all(&dir).io("create log directory", &dir)?;
        let bases = list_segments(&dir)?;
        let checkpointed_start = checkpoint::read(&dir)?;

        let mut sealed = BTreeMap::new();
        let mut active = None;
        for (i, &base) in bases.iter().enumerate() {
            match bases.get(i + 1) {
                Some(&next_base) => {
                    let segment = Segment::open_sealed(
                        &config.files.0,
                        &dir,
                        base,
                        next_base,
                        config.index_interval_bytes,
                    )?;
                    sealed.insert(base, segment);
                }
                None => {
                    let (mut segment, end) = Segment::open_active(
                        &config.files.0,
                        &dir,
                        base,
                        config.index_interval_bytes,
                    )?;
                    if let ScanEnd::Invalid { position, reason } = end {
                        let corrupt = |reason: String| LogError::Corrupt {
                            path: segment.path().to_path_buf(),
                            position,
                            reason,
                        };
                        match config.recovery {
                            RecoveryMode::Strict => return Err(corrupt(reason)),
                            RecoveryMode::TornTail => {
                                if let Some(valid) = segment.valid_batch_after(position)? {
                                    return Err(corrupt(format!(
                                        "{reason}; a valid batch follows at byte {valid}, so this is \
                                         damage, not a torn tail: refusing to drop what follows \
                                         (log.recovery.mode = \"truncate\" would)"
                                    )));
                                }
                                tracing::warn!(
                                    segment = %segment.path().display(),
                                    position,
                                    %reason,
                                    "truncating a torn log tail"
                                );
                                segment.truncate_to_valid()?;
                            }
                            RecoveryMode::Truncate => {
                                let dropped = segment.valid_batch_after(position)?;
                                tracing::warn!(
                                    segment = %segment.path().display(),
                                    position,
                                    %reason,
                                    valid_batches_dropped_from = ?dropped,
                                    "log.recovery.mode = truncate: truncating at the first invalid batch"
                                );
                                segment.truncate_to_valid()?;
                            }
                        }
                    }
                    active = Some(segment);
                }
            }
        }

        let log_start_offset = checkpointed_start.max(bases.first().copied()).unwrap_or(0);
        let active = match active {
            Some(active) => active,
            None => {
                let segment = Segment::create(&config.files.0, &dir, log_start_offset)?;
                if sync {
                    checkpoint::sync_dir(&dir)?;
                }
                segment
            }
        };
        let mut log = Self {
            log_start_offset,
            dir,
            config,
            sealed,
            log_end_offset: active.next_offset(),
            active,
            durable_end_offset: 0,
            first_unflushed_ms: None,
            leader_epoch: None,
            offline: None,
        };
        if log.log_start_offset > log.log_end_offset {
            // The tail that a DeleteRecords advanced past was lost: start empty at the start.
            tracing::warn!(
                log_start = log.log_start_offset,
                log_end = log.log_end_offset,
                "log start beyond recovered end, resetting the log"
            );
            log.reset_to(log.log_start_offset)?;
        }
        // Segments wholly below the start were meant to be deleted before a crash.
        log.delete_segments_below(log.log_start_offset)?;
        if sync {
            log.active
                .file()?
                .sync_data()
                .io("fdatasync segment", log.active.path())?;
        }
        log.durable_end_offset = log.log_end_offset;
        Ok(log)
    }

    /// All segments, oldest first.
    fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.sealed.values().chain(std::iter::once(&self.active))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    /// Replaces the settings (a topic config change): validated first, and on error the current
    /// settings stay. Takes effect from the next append, roll or retention pass; segments already
    /// open keep their index spacing, and `recovery` only matters at open.
    pub fn set_config(&mut self, config: LogConfig) -> Result<()> {
        config.validate()?;
        self.config = config;
        Ok(())
    }
    /// First offset that can be read (moved by retention and DeleteRecords).
    /// Why the log takes no appends (a failed segment write or roll), if it does not.
    pub fn offline(&self) -> Option<&str> {
        self.offline.as_deref()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    /// Offset the next appended record will get.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }
    /// Offsets below this are on disk (fdatasync'ed).
    pub fn durable_offset(&self) -> i64 {
        self.durable_end_offset
    }
    /// Total bytes of all segments.
    pub fn size_in_bytes(&self) -> u64 {
        self.segments().map(Segment::size).sum()
    }
    /// Base offset of the segment appends go to; it changes when the log rolls.
    pub fn active_segment_base_offset(&self) -> i64 {
        self.active.base_offset()
    }

    pub fn segment_count(&self) -> usize {
        self.sealed.len() + 1
    }

    /// Partition leader epoch written into appended batches from now on (Kafka stamps it on
    /// append; `None` keeps what the producer sent).
    pub fn set_leader_epoch(&mut self, epoch: Option<i32>) {
        self.leader_epoch = epoch;
    }

    /// Validates and appends a produced record set, assigning offsets from the log end.
    ///
    /// Nothing is written unless every batch is valid, and records are never re-encoded. Under
    /// `CreateTime` the batches are not copied at all: the fields Kafka rewrites on append (base
    /// offset, partition leader epoch) sit in the first 16 bytes, outside the CRC, so each batch
    /// is written as a rewritten 16-byte prefix followed by the producer's own bytes. Under
    /// `LogAppendTime` the timestamp and CRC change too, so the set is copied and rewritten.
    pub fn append(&mut self, batches: Bytes, now_ms: i64) -> Result<AppendInfo> {
        if let Some(reason) = &self.offline {
            return Err(LogError::Offline(Arc::clone(reason)));
        }
        if batches.is_empty() {
            return Err(RecordsError::Empty.into());
        }
        match self.config.timestamp_policy {
            TimestampPolicy::CreateTime => self.append_unchanged_bodies(&batches, now_ms),
            TimestampPolicy::LogAppendTime => self.append_rewritten(&batches, now_ms),
        }
    }

    /// The `CreateTime` append: validates each batch in place and writes rewritten prefixes
    /// interleaved with slices of `batches`.
    fn append_unchanged_bodies(&mut self, batches: &[u8], now_ms: i64) -> Result<AppendInfo> {
        let mut headers = Vec::new();
        let mut prefixes: Vec<[u8; UNCHECKED_PREFIX_LEN]> = Vec::new();
        let mut bodies: Vec<&[u8]> = Vec::new();
        let mut next_offset = self.log_end_offset;
        let mut rest = batches;
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
            self.check_produced(&header)?;
            header.base_offset = next_offset;
            if let Some(epoch) = self.leader_epoch {
                header.partition_leader_epoch = epoch;
            }
            next_offset = next_offset
                .checked_add(i64::from(header.last_offset_delta) + 1)
                .ok_or(LogError::OffsetOverflow)?;
            prefixes.push(header.unchecked_prefix());
            // `parse_validated` checked the batch holds at least a full header.
            bodies.push(batch.get(UNCHECKED_PREFIX_LEN..).unwrap_or_default());
            headers.push(header);
        }
        let mut parts: Vec<IoSlice<'_>> = prefixes
            .iter()
            .zip(&bodies)
            .flat_map(|(prefix, body)| [IoSlice::new(prefix), IoSlice::new(body)])
            .collect();
        self.write_validated(
            &mut parts,
            batches.len(),
            &headers,
            next_offset,
            None,
            now_ms,
        )
    }

    /// The `LogAppendTime` append: copies the set once and rewrites it in place (base offsets,
    /// leader epoch, timestamp type, max timestamp, CRC).
    fn append_rewritten(&mut self, batches: &[u8], now_ms: i64) -> Result<AppendInfo> {
        let mut buf = BytesMut::from(batches);
        let mut headers = Vec::new();
        let mut next_offset = self.log_end_offset;
        for batch in RecordBatchMut::split_all(&mut buf) {
            let mut batch = batch?;
            self.check_produced(batch.header())?;
            batch.set_base_offset(next_offset);
            if let Some(epoch) = self.leader_epoch {
                batch.set_partition_leader_epoch(epoch);
            }
            batch.set_log_append_time(now_ms);
            next_offset = next_offset
                .checked_add(i64::from(batch.header().last_offset_delta) + 1)
                .ok_or(LogError::OffsetOverflow)?;
            headers.push(*batch.header());
        }
        let mut parts = [IoSlice::new(&buf)];
        self.write_validated(
            &mut parts,
            buf.len(),
            &headers,
            next_offset,
            Some(now_ms),
            now_ms,
        )
    }

    /// What Kafka's `LogValidator` demands of every produced batch, plus the size limit.
    fn check_produced(&self, header: &BatchHeader) -> Result<()> {
        header.validate_for_produce()?;
        let size = header.total_len();
        if size > self.config.max_message_bytes {
            return Err(LogError::MessageTooLarge {
                size,
                max: self.config.max_message_bytes,
            });
        }
        Ok(())
    }

    /// Writes validated batches (`parts` hold `len` bytes that `headers` describe, with their
    /// final offsets) to the active segment, rolling first if needed.
    fn write_validated(
        &mut self,
        parts: &mut [IoSlice<'_>],
        len: usize,
        headers: &[BatchHeader],
        next_offset: i64,
        append_time: Option<i64>,
        now_ms: i64,
    ) -> Result<AppendInfo> {
        let (Some(first), Some(last)) = (headers.first(), headers.last()) else {
            return Err(RecordsError::Empty.into());
        };
        let (base_offset, last_offset) = (first.base_offset, last.last_offset());
        if len as u64 > self.config.segment_bytes {
            return Err(LogError::RecordSetTooLarge {
                size: len,
                max: self.config.segment_bytes,
            });
        }
        let (mut max_timestamp, mut offset_of_max_timestamp) = (NO_TIMESTAMP, base_offset);
        for header in headers {
            if header.max_timestamp > max_timestamp {
                max_timestamp = header.max_timestamp;
                offset_of_max_timestamp = header.base_offset;
            }
        }

        let interval = self.config.index_interval_bytes;
        let written = self
            .maybe_roll(len as u64, last_offset, now_ms)
            .and_then(|()| self.active.append(parts, headers, interval, now_ms));
        if let Err(e) = written {
            if matches!(e, LogError::WriteFailed(_) | LogError::SyncFailed(_)) {
                tracing::error!(dir = %self.dir.display(), error = %e, "the log is offline until the next start");
                self.offline = Some(Arc::from(e.to_string()));
            }
            return Err(e);
        }
        self.log_end_offset = next_offset;
        self.first_unflushed_ms.get_or_insert(now_ms);
        Ok(AppendInfo {
            base_offset,
            last_offset,
            log_append_time: append_time.unwrap_or(NO_TIMESTAMP),
            max_timestamp,
            offset_of_max_timestamp,
            log_start_offset: self.log_start_offset,
            batch_count: headers.len(),
            size_in_bytes: len,
        })
    }

    fn maybe_roll(&mut self, incoming: u64, last_offset: i64, now_ms: i64) -> Result<()> {
        let active = &self.active;
        if active.size() == 0 {
            return Ok(());
        }
        let full = active.size() + incoming > self.config.segment_bytes;
        let offsets_exhausted =
            last_offset.saturating_sub(active.base_offset()) > i64::from(i32::MAX);
        let aged = self.config.segment_ms.is_some_and(|segment_ms| {
            active
                .created_at_ms()
                .is_some_and(|created| now_ms.saturating_sub(created) >= segment_ms as i64)
        });
        if full || offsets_exhausted || aged {
            self.roll()?;
        }
        Ok(())
    }

    /// Seals the active segment (synced) and starts a new one at the log end.
    pub fn roll(&mut self) -> Result<()> {
        self.active.seal()?;
        self.durable_end_offset = self.durable_end_offset.max(self.log_end_offset);
        self.first_unflushed_ms = None;
        let base = self.log_end_offset;
        let previous = std::mem::replace(
            &mut self.active,
            Segment::create(&self.config.files.0, &self.dir, base)?,
        );
        self.sealed.insert(previous.base_offset(), previous);
        checkpoint::sync_dir(&self.dir)?;
        tracing::debug!(dir = %self.dir.display(), base, "rolled segment");
        Ok(())
    }

    /// Whole batches from the one containing `from_offset`, up to `max_bytes` but always at
    /// least one batch when one exists (KIP-74). Reads stay within one segment.
    pub fn read(&self, from_offset: i64, max_bytes: usize) -> Result<ReadResult> {
        if from_offset < self.log_start_offset || from_offset > self.log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset: from_offset,
                log_start: self.log_start_offset,
                log_end: self.log_end_offset,
            });
        }
        let mut records = Bytes::new();
        // The first segment extending past `from_offset` holds it (or the batch after a gap).
        for segment in self.segments().filter(|s| s.next_offset() > from_offset) {
            if let Some((position, header)) = segment.find(from_offset)? {
                records = segment.read_from(position, &header, max_bytes)?;
                break;
            }
        }
        Ok(ReadResult {
            records,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        })
    }

    /// The header of the batch holding `offset` (or the first batch after it, past a gap), if
    /// `offset` is within the log and below its end: one header read (plus the few the sparse
    /// index leaves between its entry and the batch), no record bytes.
    pub fn batch_header_at(&self, offset: i64) -> Result<Option<BatchHeader>> {
        if offset < self.log_start_offset || offset >= self.log_end_offset {
            return Ok(None);
        }
        for segment in self.segments().filter(|s| s.next_offset() > offset) {
            if let Some((_, header)) = segment.find(offset)? {
                return Ok(Some(header));
            }
        }
        Ok(None)
    }

    /// Visits the headers of the batches from the one holding `from_offset` (clamped to the log
    /// start) to the log end, in order. Reads one 61-byte header per batch and no record bytes,
    /// so a long stretch of large batches is cheap (used to rebuild producer state at start).
    pub fn for_each_batch_header(
        &self,
        from_offset: i64,
        mut visit: impl FnMut(&BatchHeader),
    ) -> Result<()> {
        let from = from_offset.max(self.log_start_offset);
        for segment in self.segments().filter(|s| s.next_offset() > from) {
            let Some((position, first)) = segment.find(from)? else {
                continue;
            };
            for found in segment.headers_from(position, first.base_offset) {
                visit(&found?.1);
            }
        }
        Ok(())
    }

    /// First record at or after the log start with a timestamp of at least `timestamp`
    /// (ListOffsets by time). Exact within uncompressed batches; for compressed batches the
    /// batch's first offset (the consumer skips earlier records itself).
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<TimestampOffset>> {
        for segment in self.segments() {
            let relevant = segment.next_offset() > self.log_start_offset
                && segment
                    .max_timestamp()
                    .is_some_and(|(max, _)| max >= timestamp);
            if relevant
                && let Some((offset, timestamp)) =
                    segment.find_by_timestamp(timestamp, self.log_start_offset)?
            {
                return Ok(Some(TimestampOffset { offset, timestamp }));
            }
        }
        Ok(None)
    }

    /// The record with the largest timestamp (ListOffsets `MAX_TIMESTAMP`, KIP-734); the
    /// earliest one on ties. `None` for an empty log.
    pub fn max_timestamp_offset(&self) -> Result<Option<TimestampOffset>> {
        let mut best: Option<(&Segment, i64, i64)> = None;
        for segment in self.segments() {
            if let Some((max, offset)) = segment.max_timestamp()
                && offset >= self.log_start_offset
                && best.is_none_or(|(_, best_max, _)| max > best_max)
            {
                best = Some((segment, max, offset));
            }
        }
        let Some((segment, max, offset)) = best else {
            return Ok(None);
        };
        let exact = match segment.batch_at_offset(offset)? {
            Some((position, header)) => {
                segment.exact_record(position, &header, self.log_start_offset, |ts| ts == max)?
            }
            None => None,
        };
        let (offset, timestamp) = exact.unwrap_or((offset, max));
        Ok(Some(TimestampOffset { offset, timestamp }))
    }

    /// DeleteRecords: makes `offset` the new log start (persisted) and deletes the sealed
    /// segments that lie wholly below it. Returns the new log start offset.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64> {
        if offset < 0 || offset > self.log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset,
                log_end: self.log_end_offset,
            });
        }
        if offset > self.log_start_offset {
            // On disk first: a failed checkpoint leaves the log as it was, not ahead of its file.
            checkpoint::write(&self.dir, offset)?;
            self.log_start_offset = offset;
            self.delete_segments_below(offset)?;
        }
        Ok(self.log_start_offset)
    }

    /// Deletes sealed segments whose records are all below `offset`.
    fn delete_segments_below(&mut self, offset: i64) -> Result<DeletionOutcome> {
        let bases: Vec<i64> = self.segments().map(Segment::base_offset).collect();
        let count = bases
            .windows(2)
            .take_while(|pair| matches!(pair, [_, next] if *next <= offset))
            .count();
        self.delete_oldest(count)
    }

    /// `retention.ms` / `retention.bytes`: deletes the oldest sealed segments that are too old
    /// or beyond the size budget (the active segment is never deleted).
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<DeletionOutcome> {
        let sealed: Vec<&Segment> = self.sealed.values().collect();
        let mut count = 0;
        if let Some(retention_ms) = self.config.retention_ms {
            let cutoff = now_ms.saturating_sub(retention_ms.min(i64::MAX as u64) as i64);
            count = sealed
                .iter()
                .take_while(|segment| segment.max_timestamp().is_none_or(|(max, _)| max < cutoff))
                .count();
        }
        if let Some(retention_bytes) = self.config.retention_bytes {
            let mut excess = self.size_in_bytes().saturating_sub(retention_bytes);
            for (i, segment) in sealed.iter().enumerate() {
                if i < count {
                    excess = excess.saturating_sub(segment.size());
                } else if excess >= segment.size() && excess > 0 {
                    excess -= segment.size();
                    count = i + 1;
                } else {
                    break;
                }
            }
        }
        self.delete_oldest(count)
    }

    /// Deletes the `count` oldest segments (never the active one): log start moves and is
    /// checkpointed first, so a crash midway leaves only unreferenced files behind.
    fn delete_oldest(&mut self, count: usize) -> Result<DeletionOutcome> {
        let count = count.min(self.sealed.len());
        let mut outcome = DeletionOutcome {
            log_start_offset: self.log_start_offset,
            ..DeletionOutcome::default()
        };
        if count == 0 {
            return Ok(outcome);
        }
        let doomed: Vec<i64> = self.sealed.keys().take(count).copied().collect();
        let new_first = self
            .segments()
            .nth(count)
            .map_or(self.log_end_offset, Segment::base_offset);
        if new_first > self.log_start_offset {
            self.log_start_offset = new_first;
            checkpoint::write(&self.dir, new_first)?;
        }
        for base in doomed {
            if let Some(segment) = self.sealed.remove(&base) {
                outcome.deleted_bytes += segment.size();
                outcome.deleted_segments += 1;
                segment.delete_files()?;
            }
        }
        checkpoint::sync_dir(&self.dir)?;
        outcome.log_start_offset = self.log_start_offset;
        tracing::debug!(dir = %self.dir.display(), ?outcome, "deleted segments");
        Ok(outcome)
    }

    /// Empties the log and restarts it at `offset` (also used when recovery finds the
    /// checkpointed start beyond the data).
    pub fn reset_to(&mut self, offset: i64) -> Result<()> {
        let offset = offset.max(0);
        for segment in std::mem::take(&mut self.sealed).into_values() {
            segment.delete_files()?;
        }
        // Delete before creating: the new segment may reuse the active one's file names.
        self.active.delete_files()?;
        self.active = Segment::create(&self.config.files.0, &self.dir, offset)?;
        checkpoint::sync_dir(&self.dir)?;
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.durable_end_offset = offset;
        self.first_unflushed_ms = None;
        checkpoint::write(&self.dir, offset)
    }

    /// Removes the whole partition directory (DeleteTopics).
    pub fn delete(self) -> Result<()> {
        fs::remove_dir_all(&self.dir).io("delete log directory", &self.dir)
    }

    /// A handle to fdatasync outside the lock, or `None` when everything is already durable.
    pub fn sync_target(&self) -> Result<Option<SyncTarget>> {
        if self.durable_end_offset >= self.log_end_offset {
            return Ok(None);
        }
        let active = &self.active;
        Ok(Some(SyncTarget {
            file: active.file()?,
            path: active.path().to_path_buf(),
            end_offset: self.log_end_offset,
        }))
    }

    /// Records that offsets below `end_offset` are on disk.
    pub fn mark_durable(&mut self, end_offset: i64) {
        let end_offset = end_offset.min(self.log_end_offset);
        if end_offset > self.durable_end_offset {
            self.durable_end_offset = end_offset;
        }
        if self.durable_end_offset >= self.log_end_offset {
            self.first_unflushed_ms = None;
        }
    }

    /// fdatasync now, under the caller's lock (simple path; prefer [`crate::GroupCommitter`]).
    pub fn flush(&mut self) -> Result<()> {
        if let Some(target) = self.sync_target()? {
            target.sync()?;
            self.mark_durable(target.end_offset());
        }
        Ok(())
    }

    /// Under [`FlushPolicy::Interval`], whether unflushed data is older than `flush_ms`.
    pub fn flush_due(&self, now_ms: i64) -> bool {
        match self.config.flush {
            FlushPolicy::Interval { flush_ms } => self
                .first_unflushed_ms
                .is_some_and(|since| now_ms.saturating_sub(since) >= flush_ms as i64),
            FlushPolicy::Always | FlushPolicy::Never => false,
        }
    }

    /// When the oldest unflushed append happened, if any (to arm a `flush.ms` timer).
    pub fn unflushed_since_ms(&self) -> Option<i64> {
        self.first_unflushed_ms
    }
}

/// Base offsets of the segments in `dir`, sorted; removes leftovers of interrupted writes and
/// index files whose segment is gone.
fn list_segments(dir: &Path) -> Result<Vec<i64>> {
    let mut bases = Vec::new();
    let mut indexes = Vec::new();
    for entry in fs::read_dir(dir).io("list log directory", dir)? {
        let entry = entry.io("list log directory", dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".tmp") {
            let path = entry.path();
            fs::remove_file(&path).io("remove temporary file", &path)?;
        } else if let Some(base) = parse_file_name(name, LOG_SUFFIX) {
            bases.push(base);
        } else if let Some(base) =
            parse_file_name(name, INDEX_SUFFIX).or_else(|| parse_file_name(name, TIME_INDEX_SUFFIX))
        {
            indexes.push((base, entry.path()));
        }
    }
    bases.sort_unstable();
    for (base, path) in indexes {
        if bases.binary_search(&base).is_err() {
            fs::remove_file(&path).io("remove orphan index", &path)?;
        }
    }
    Ok(bases)
}

#[cfg(test)]
mod set_config_tests {
    use super::*;

    #[test]
    fn set_config_validates_and_applies() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            flush: crate::FlushPolicy::Never,
            ..LogConfig::default()
        };
        let mut log = PartitionLog::open(dir.path(), config.clone()).unwrap();
        let bad = LogConfig {
            segment_bytes: 1,
            ..config.clone()
        };
        assert!(log.set_config(bad).is_err());
        assert_eq!(log.config(), &config);
        let good = LogConfig {
            retention_ms: Some(1000),
            segment_bytes: 4096,
            ..config
        };
        log.set_config(good.clone()).unwrap();
        assert_eq!(log.config(), &good);
    }
}
