//! One partition of a topic, owning its invariants: its log, its producers' sequence and
//! transaction state, the last stable offset read_committed readers stop at, the durability
//! wait of acks=all, and the refusal of appends once its topic was deleted.
//!
//! Handlers call [`Partition::append`], [`Partition::append_marker`], [`Partition::read`] and
//! the offset queries; none of them sees a lock. The lock order is kept here alone: **the
//! producers lock before the log lock** (an append checks sequences, then writes, then records
//! the batches, with the producers lock held across, so a retry can never slip between check and
//! record); a transactional batch is verified against its transaction while the producers lock
//! is held (the verifier takes the coordinator's lock inside it), so no marker can come between
//! the check and the append.

pub mod epochs;
#[cfg(test)]
mod memory;
mod producer;
mod producer_snapshot;
pub mod store;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::{Context, Result};
use bytes::Bytes;
use skiff_log::{GroupCommitter, LogConfig, LogError, TimestampOffset};
use skiff_meta::TopicInfo;
use skiff_protocol::{ErrorCode, KafkaError, Uuid};
use skiff_records::{BatchHeader, ControlRecordType, RecordBatches, RecordsError};
use tokio::sync::watch;

use producer::SequenceCheck;
pub use producer::{ProducerStates, ProducerSummary};
use store::{PartitionStore, StoreCell, TimeQuery};

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    /// The first offset of the batches (for a retried batch, where it was first written).
    pub base_offset: i64,
    /// Offsets below this must be durable before acks=all is answered.
    pub durable_end: i64,
    /// The broker's append time with `message.timestamp.type = LogAppendTime`, else -1.
    pub log_append_time: i64,
    pub log_start_offset: i64,
}

/// Which records a fetch may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    ReadUncommitted,
    /// Up to the last stable offset, with the aborted transactions in the range listed.
    ReadCommitted,
}

/// An aborted transaction in a read_committed read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aborted {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// What a read found.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionRead {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// The records (possibly empty), or the error the fetch answers for this partition.
    pub records: Result<Bytes, ErrorCode>,
    /// With read_committed: the aborted transactions the records overlap.
    pub aborted: Option<Vec<Aborted>>,
}

/// Checks a transactional batch against its producer's transaction (KIP-890): implemented by
/// the transaction coordinator; called with this partition's producers lock held.
pub trait TxnVerifier {
    /// `Ok` when `producer_id`/`epoch` has a transaction in progress that includes
    /// `partition` of `topic`; else the error code to answer.
    fn verify(
        &self,
        producer_id: i64,
        epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), ErrorCode>;
}

/// One partition: its log, its group committer, and a signal of its end offset for long polls.
pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    /// Where the records live (the local segment log, or another backend).
    store: Arc<StoreCell>,
    /// Present when acks=all must wait for fdatasync (`flush = always`).
    committer: Option<GroupCommitter>,
    /// The log end offset after each append; fetches waiting for data watch it.
    end_offset: watch::Sender<i64>,
    /// Idempotent producers' sequence state for this partition.
    producers: Mutex<ProducerStates>,
    /// The first offset of the oldest open transaction (`i64::MAX`: none), published from the
    /// producer state so that fetches read the last stable offset without its lock.
    first_unstable: AtomicI64,
    /// Whether any aborted transaction is known (read_committed fetches then list them).
    has_aborted: AtomicBool,
    /// Set (under the log lock) when the partition's topic is deleted: an append that looked
    /// the partition up before the deletion must not be acknowledged into files being removed.
    removed: AtomicBool,
    /// The leader epochs and where each started (KIP-320).
    epochs: Mutex<epochs::EpochHistory>,
}

/// The leader epoch of every partition in cluster mode, where leadership moves between stateless
/// brokers over one shared log that no move truncates (on one node it is the broker's start
/// count, see [`epochs`]).
pub const CLUSTER_LEADER_EPOCH: i32 = 0;

impl Partition {
    /// Opens partition `index` of `info` over `log`: restores its producers from their
    /// snapshot and the log tail, and starts its group committer when `always_sync`.
    pub fn open(
        info: &TopicInfo,
        index: i32,
        store: Box<dyn PartitionStore>,
        epochs: epochs::EpochHistory,
        always_sync: bool,
        now_ms: i64,
    ) -> Partition {
        let (_, end) = store.offsets();
        let producers = restore_producers(store.as_ref(), now_ms);
        let store = Arc::new(StoreCell(Mutex::new(store)));
        let committer = always_sync.then(|| GroupCommitter::spawn(Arc::clone(&store)));
        let partition = Partition {
            topic: info.name.clone(),
            topic_id: info.id,
            index,
            store,
            committer,
            end_offset: watch::channel(end).0,
            first_unstable: AtomicI64::new(i64::MAX),
            has_aborted: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            producers: Mutex::new(producers),
            epochs: Mutex::new(epochs),
        };
        partition.publish_txn_state(&partition.lock_producers());
        partition
    }

    fn lock_log(&self) -> MutexGuard<'_, Box<dyn PartitionStore>> {
        self.store.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Taken after the log's lock when both are held.
    fn lock_epochs(&self) -> MutexGuard<'_, epochs::EpochHistory> {
        self.epochs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The partition's leader epoch now.
    pub fn leader_epoch(&self) -> i32 {
        self.lock_epochs().current()
    }

    /// Where leader epoch `requested` ended (Kafka's `endOffsetFor`): the epoch at or below it
    /// and the first offset after it.
    pub fn epoch_end_offset(&self, requested: i32) -> (i32, i64) {
        let (start, end) = self.lock_log().offsets();
        self.lock_epochs().end_offset_for(requested, start, end)
    }

    fn lock_producers(&self) -> MutexGuard<'_, ProducerStates> {
        self.producers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    // ----- appends ----------------------------------------------------------------------

    /// Appends a producer's batches as sent (offsets assigned in place): header checks, the
    /// transaction check for transactional batches, idempotent sequence checks (a retried single
    /// batch is acknowledged with its first offset, not written again), the write, the producer
    /// state, the snapshot at a segment roll, and the end-offset signal for long polls. With
    /// `flush = always` it also asks for the group-committed fdatasync; acks=all then waits with
    /// [`Partition::wait_durable`].
    pub fn append(
        &self,
        records: Bytes,
        now: i64,
        txns: &impl TxnVerifier,
    ) -> Result<AppendResult, KafkaError> {
        // Headers only: the log checks every batch's CRC when it appends (one pass over the bytes).
        let batches = RecordBatches::produce_headers(&records)
            .map_err(|e| KafkaError::new(records_error(&e), e.to_string()))?;
        for batch in &batches {
            if batch.is_control() {
                return Err(KafkaError::new(
                    ErrorCode::INVALID_RECORD,
                    "clients may not produce control batches",
                ));
            }
            if batch.is_transactional() && batch.producer_id < 0 {
                return Err(KafkaError::new(
                    ErrorCode::INVALID_RECORD,
                    "a transactional batch needs a producer ID",
                ));
            }
        }

        // Producer state first, then the log: the same order everywhere.
        let mut producers = self.lock_producers();
        // Transactional batches must belong to their producer's transaction in progress, with
        // this partition added (KIP-890's check): a late batch after the transaction ended would
        // open a transaction here that no marker ever closes. Checked under the producers lock,
        // so no marker can come between the check and the append.
        let transactional = batches.iter().any(|b| b.is_transactional());
        for batch in batches.iter().filter(|b| b.is_transactional()) {
            if let Err(code) = txns.verify(
                batch.producer_id,
                batch.producer_epoch,
                &self.topic,
                self.index,
            ) {
                return Err(KafkaError::new(
                    code,
                    format!(
                        "producer {} epoch {} has no transaction in progress with this partition",
                        batch.producer_id, batch.producer_epoch
                    ),
                ));
            }
        }
        let mut single_duplicate = None;
        for batch in &batches {
            let last_seq = batch.base_sequence.wrapping_add(batch.last_offset_delta);
            match producers.check(
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                last_seq,
            ) {
                Ok(SequenceCheck::Append) => {}
                Ok(SequenceCheck::Duplicate { base_offset }) if batches.len() == 1 => {
                    single_duplicate = Some(base_offset);
                }
                Ok(SequenceCheck::Duplicate { .. }) => {
                    return Err(KafkaError::new(
                        ErrorCode::DUPLICATE_SEQUENCE_NUMBER,
                        "a retried batch arrived together with other batches",
                    ));
                }
                Err(code) => {
                    return Err(KafkaError::new(
                        code,
                        format!(
                            "producer {} epoch {} sequence {} does not follow the last one",
                            batch.producer_id, batch.producer_epoch, batch.base_sequence
                        ),
                    ));
                }
            }
        }

        if let Some(committer) = &self.committer
            && committer.is_offline()
        {
            // What was written may not be durable: nothing more is acknowledged (acks=1
            // included) until a restart recovers the log.
            return Err(KafkaError::new(
                ErrorCode::KAFKA_STORAGE_ERROR,
                "the partition is offline: an fdatasync of its log failed; restart the broker to recover it",
            ));
        }
        let mut log = self.lock_log();
        if self.removed.load(Ordering::Acquire) {
            // Looked up before its topic was deleted (perhaps re-created since under the same
            // name): nothing may be acknowledged into files that are being removed.
            return Err(KafkaError::new(
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                "the topic was deleted",
            ));
        }
        let (log_start, log_end) = log.offsets();
        if let Some(base_offset) = single_duplicate {
            return Ok(AppendResult {
                base_offset,
                durable_end: log_end,
                log_append_time: -1,
                log_start_offset: log_start,
            });
        }
        if transactional {
            // Read_committed fetches must not see these records before the producer state
            // records them as an open transaction (after the append): hold them back from here.
            self.first_unstable.fetch_min(log_end, Ordering::AcqRel);
        }
        self.lock_epochs().before_append();
        let info = match log.append(records, now) {
            Ok(info) => info,
            Err(e) => {
                let code = match &e {
                    LogError::MessageTooLarge { .. } => ErrorCode::MESSAGE_TOO_LARGE,
                    LogError::RecordSetTooLarge { .. } => ErrorCode::RECORD_LIST_TOO_LARGE,
                    LogError::InvalidRecords(inner) => records_error(inner),
                    _ => ErrorCode::KAFKA_STORAGE_ERROR,
                };
                if code == ErrorCode::KAFKA_STORAGE_ERROR {
                    tracing::error!(topic = %self.topic, partition = self.index, error = %e, "append failed");
                }
                // Nothing was appended: release the hold on read_committed readers.
                self.publish_txn_state(&producers);
                return Err(KafkaError::new(code, e.to_string()));
            }
        };
        drop(log);

        let mut next_base = info.base_offset;
        for batch in &batches {
            let last_seq = batch.base_sequence.wrapping_add(batch.last_offset_delta);
            producers.record(
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                last_seq,
                next_base,
                now,
            );
            if batch.is_transactional() {
                producers.record_txn_data(batch.producer_id, next_base);
            }
            next_base += i64::from(batch.last_offset_delta) + 1;
        }
        let end = info.last_offset + 1;
        self.after_append(&producers, end, info.rolled);
        drop(producers);
        self.end_offset.send_replace(end);
        Ok(AppendResult {
            base_offset: info.base_offset,
            durable_end: end,
            log_append_time: info.log_append_time,
            log_start_offset: info.log_start_offset,
        })
    }

    /// Appends a transaction marker (commit or abort) for `producer_id`/`epoch`; returns the
    /// offset after it, or `None` when the partition's producer state already has a newer
    /// epoch (the marker would be fenced there, as Kafka's leader refuses it; nothing of this
    /// transaction can be open here). With `flush = always` the marker's sync is requested.
    pub fn append_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now: i64,
    ) -> Result<Option<i64>> {
        let kind = if commit {
            ControlRecordType::Commit
        } else {
            ControlRecordType::Abort
        };
        let mut producers = self.lock_producers();
        if producers.check_marker(producer_id, epoch).is_err() {
            tracing::warn!(topic = %self.topic, partition = self.index, producer_id, epoch, "transaction marker from an old epoch not written");
            return Ok(None);
        }
        let marker = skiff_records::end_txn_marker(producer_id, epoch, kind, 0, now)
            .context("building a transaction marker")?;
        let mut log = self.lock_log();
        self.lock_epochs().before_append();
        let info = log
            .append(marker.into_bytes(), now)
            .with_context(|| format!("appending a marker to {}-{}", self.topic, self.index))?;
        drop(log);
        producers.record_marker(producer_id, epoch, kind, info.base_offset, now);
        let end = info.last_offset + 1;
        self.after_append(&producers, end, info.rolled);
        drop(producers);
        self.end_offset.send_replace(end);
        self.request_sync();
        Ok(Some(end))
    }

    /// Finishes an append that ended at `end`, with the producers lock held across it:
    /// publishes the transaction state and, when the append rolled the active segment, writes
    /// the producer snapshot (Kafka's snapshot-at-roll: the next start replays at most one
    /// segment after it; under the producers lock, so it matches the log up to `end`; rare and
    /// small, so in line).
    fn after_append(&self, producers: &ProducerStates, end: i64, rolled: bool) {
        self.publish_txn_state(producers);
        if rolled {
            self.write_producer_snapshot(producers, end);
        }
    }

    // ----- durability -------------------------------------------------------------------

    /// Asks for an fdatasync of what was appended (`flush = always`; a no-op otherwise). acks
    /// 0 and 1 do not wait for it, as Kafka's `flush.messages = 1` does not; besides
    /// durability, it keeps dirty pages from piling up until the kernel throttles writes.
    pub fn request_sync(&self) {
        if let Some(committer) = &self.committer {
            committer.request_sync();
        }
    }

    /// Whether acks=all must wait for an fdatasync (`flush = always`).
    pub fn syncs_appends(&self) -> bool {
        self.committer.is_some()
    }

    /// Waits until offsets below `end` are durable (at once without `flush = always`).
    pub async fn wait_durable(&self, end: i64) -> Result<(), LogError> {
        match &self.committer {
            Some(committer) => committer.wait_durable(end).await,
            None => Ok(()),
        }
    }

    /// Waits until offsets below `end` are durable without asking for a sync (one already
    /// asked for, or the next group commit, makes them so); at once without `flush = always`.
    pub async fn durable_reached(&self, end: i64) -> Result<(), LogError> {
        match &self.committer {
            Some(committer) => committer.durable_reached(end).await,
            None => Ok(()),
        }
    }

    /// Whether the partition is offline: an fdatasync failed (what was written may not be
    /// durable) or a segment write failed (a partial record may sit past the log end). It
    /// answers KAFKA_STORAGE_ERROR to appends until the broker restarts and recovers its log;
    /// reads of what it holds still work.
    pub fn is_offline(&self) -> bool {
        self.committer
            .as_ref()
            .is_some_and(GroupCommitter::is_offline)
            || self.lock_log().offline().is_some()
    }

    // ----- reads ------------------------------------------------------------------------

    /// A receiver of the log end offset after each append (long polls wait on it).
    pub fn watch_end_offset(&self) -> watch::Receiver<i64> {
        self.end_offset.subscribe()
    }

    /// Reads up to `max_bytes` from `offset` (the first batch whole even if larger, KIP-74;
    /// 0: only the watermarks). With read_committed, only below the last stable offset, with
    /// the aborted transactions in the range listed.
    pub fn read(&self, offset: i64, max_bytes: usize, isolation: Isolation) -> PartitionRead {
        let read_committed = isolation == Isolation::ReadCommitted;
        let log = self.lock_log();
        let (start, end) = log.offsets();
        let stable = self.last_stable_offset(end);
        let mut out = PartitionRead {
            high_watermark: end,
            last_stable_offset: stable,
            log_start_offset: start,
            records: Ok(Bytes::new()),
            aborted: read_committed.then(Vec::new),
        };
        if max_bytes == 0 {
            return out;
        }
        let has_aborted = self.has_aborted.load(Ordering::Acquire);
        let mut aborted_range = None;
        out.records = if read_committed && offset >= stable && offset <= end && offset >= start {
            // Nothing stable to read yet (an open transaction starts here).
            Ok(Bytes::new())
        } else {
            match log.read(offset, max_bytes) {
                // Without open or aborted transactions (the usual case) the records need no
                // walk: all lie below the last stable offset.
                Ok(records) if read_committed && (stable < end || has_aborted) => {
                    let (records, next) = stable_prefix(records, stable);
                    if !records.is_empty() && has_aborted {
                        aborted_range = Some((offset, next));
                    }
                    Ok(records)
                }
                Ok(records) => Ok(records),
                Err(LogError::OffsetOutOfRange { .. }) => Err(ErrorCode::OFFSET_OUT_OF_RANGE),
                Err(e) => {
                    tracing::error!(topic = %self.topic, partition = self.index, error = %e, "read failed");
                    Err(ErrorCode::KAFKA_STORAGE_ERROR)
                }
            }
        };
        drop(log);
        // The producers lock comes before the log lock everywhere, so only now.
        if let Some((from, until)) = aborted_range {
            out.aborted = Some(
                self.lock_producers()
                    .aborted_between(from, until)
                    .into_iter()
                    .map(|a| Aborted {
                        producer_id: a.producer_id,
                        first_offset: a.first_offset,
                    })
                    .collect(),
            );
        }
        out
    }

    /// The last stable offset for a log ending at `log_end`: read_committed reads stop here.
    fn last_stable_offset(&self, log_end: i64) -> i64 {
        self.first_unstable.load(Ordering::Acquire).min(log_end)
    }

    pub fn log_start_offset(&self) -> i64 {
        self.lock_log().offsets().0
    }

    pub fn log_end_offset(&self) -> i64 {
        self.lock_log().offsets().1
    }

    /// The end a reader with `isolation` may fetch up to (the high watermark, or the last
    /// stable offset for read_committed).
    pub fn fetchable_end(&self, isolation: Isolation) -> i64 {
        let end = self.log_end_offset();
        match isolation {
            Isolation::ReadUncommitted => end,
            Isolation::ReadCommitted => self.last_stable_offset(end),
        }
    }

    /// What a reader at `offset` would meet first: the header of the batch holding it (no
    /// record bytes are read); `None` at or past the log end, or before the log start.
    pub fn batch_header_at(&self, offset: i64) -> Result<Option<BatchHeader>, LogError> {
        self.lock_log().header_at(offset)
    }

    /// The first record with a timestamp at or after `timestamp`.
    pub fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<TimestampOffset>, LogError> {
        self.lock_log().find(TimeQuery::AtOrAfter(timestamp))
    }

    /// The record with the largest timestamp (the first of equals).
    pub fn max_timestamp_offset(&self) -> Result<Option<TimestampOffset>, LogError> {
        self.lock_log().find(TimeQuery::Newest)
    }

    /// The bytes of the partition's segments.
    pub fn size_in_bytes(&self) -> u64 {
        self.lock_log().size_in_bytes()
    }

    /// The log settings in force.
    pub fn log_config(&self) -> LogConfig {
        self.lock_log().config().clone()
    }

    // ----- producers --------------------------------------------------------------------

    /// The idempotent producers this partition knows (DescribeProducers).
    pub fn producers(&self) -> Vec<ProducerSummary> {
        self.lock_producers().describe()
    }

    /// The producers with a transaction open here: (producer ID, epoch).
    pub fn open_transactions(&self) -> Vec<(i64, i16)> {
        self.lock_producers().open_transactions()
    }

    /// The highest producer ID this partition knows.
    pub fn max_producer_id(&self) -> Option<i64> {
        self.lock_producers().max_producer_id()
    }

    // ----- maintenance ------------------------------------------------------------------

    /// Advances the log start to `target` (DeleteRecords; -1: the high watermark); returns the
    /// new low watermark, or the error code to answer.
    pub fn delete_records_before(&self, target: i64) -> Result<i64, ErrorCode> {
        let mut log = self.lock_log();
        let (_, high_watermark) = log.offsets();
        let target = if target == -1 { high_watermark } else { target };
        if target < 0 || target > high_watermark {
            return Err(ErrorCode::OFFSET_OUT_OF_RANGE);
        }
        let low_watermark = log.delete_before(target).map_err(|e| {
            tracing::error!(topic = %self.topic, partition = self.index, error = %e, "delete records failed");
            ErrorCode::KAFKA_STORAGE_ERROR
        })?;
        drop(log);
        self.forget_transactions_below(low_watermark);
        Ok(low_watermark)
    }

    /// Applies retention, then forgets the transactions whose records went and the producers
    /// idle past expiry.
    pub fn apply_retention(&self, now: i64) {
        let log_start = {
            let mut log = self.lock_log();
            if let Err(e) = log.apply_retention(now) {
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "retention failed");
            }
            log.offsets().0
        };
        self.forget_transactions_below(log_start);
        let expired = self.lock_producers().expire(now);
        if expired > 0 {
            tracing::debug!(topic = %self.topic, partition = self.index, expired, "idle producers forgotten");
        }
    }

    /// Flushes the log if its `flush.ms` is due (flush = interval), or at once with `force`.
    pub fn flush_if_due(&self, now: i64, force: bool) {
        if let Err(e) = self.lock_log().flush(now, force) {
            tracing::error!(topic = %self.topic, partition = self.index, error = %e, "flush failed");
        }
    }

    /// Applies new log settings (a topic or broker config change).
    pub fn reconfigure(&self, config: &LogConfig) -> Result<()> {
        let mut log = self.lock_log();
        if log.config() != config {
            log.set_config(config.clone()).with_context(|| {
                format!("reconfiguring partition {}-{}", self.topic, self.index)
            })?;
        }
        Ok(())
    }

    /// Marks the partition deleted, under its log lock (no append is in progress or follows).
    pub(crate) fn mark_removed(&self) {
        let _log = self.lock_log();
        self.removed.store(true, Ordering::Release);
    }

    /// Whether the partition's topic was deleted (see [`Partition::mark_removed`]).
    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Publishes the transaction state of `states` (call with the producers lock held, after
    /// every change to it).
    fn publish_txn_state(&self, states: &ProducerStates) {
        self.first_unstable.store(
            states.first_unstable_offset().unwrap_or(i64::MAX),
            Ordering::Release,
        );
        self.has_aborted
            .store(states.has_aborted(), Ordering::Release);
    }

    /// Drops the transactions whose records are gone below `log_start` (retention,
    /// DeleteRecords).
    fn forget_transactions_below(&self, log_start: i64) {
        let mut producers = self.lock_producers();
        producers.truncate_below(log_start);
        self.publish_txn_state(&producers);
    }

    /// Writes the producer snapshot of `states`, which must describe the log up to `end_offset`
    /// (the caller holds the producers lock across its append, so they do). A failure is
    /// logged, not returned: the snapshot only shortens the next start's replay.
    fn write_producer_snapshot(&self, states: &ProducerStates, end_offset: i64) {
        let Some(dir) = self
            .lock_log()
            .snapshot_dir()
            .map(std::path::Path::to_path_buf)
        else {
            return;
        };
        if let Err(e) = producer_snapshot::write(&dir, states, end_offset) {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "producer snapshot not written");
        }
    }

    /// Snapshots the producer state as of the current log end (clean shutdown).
    pub fn snapshot_producers(&self) {
        let states = self.lock_producers();
        let (_, end) = self.lock_log().offsets();
        self.write_producer_snapshot(&states, end);
    }
}

/// The batches of `records` that start below `stable` (the last stable offset), and the offset
/// after the last of them. A batch never straddles the last stable offset: it is the base
/// offset of the first batch of the oldest open transaction, or the log end.
fn stable_prefix(records: Bytes, stable: i64) -> (Bytes, i64) {
    let mut position = 0usize;
    let mut next = i64::MIN;
    // Headers only (no CRC pass); the walk stops at the first batch it cannot read.
    while let Some(Ok(header)) = records.get(position..).map(BatchHeader::parse) {
        if header.base_offset >= stable {
            break;
        }
        next = header.last_offset().saturating_add(1);
        // A trailing partial batch (cut by max_bytes) is returned as it is.
        position = position
            .saturating_add(header.total_len())
            .min(records.len());
    }
    (records.slice(..position), next)
}

/// The sequence state of a partition at start, as Kafka's recovery builds it: the newest producer
/// snapshot at or below the log end, without the producers whose last batch lies below the log
/// start (their batches are gone; Kafka drops them too), with the batches after it replayed;
/// without a usable snapshot, `producer::rebuild_from_log`. Producers idle past expiry are dropped.
fn restore_producers(log: &dyn PartitionStore, now_ms: i64) -> ProducerStates {
    let (log_start, log_end) = log.offsets();
    let loaded = log.snapshot_dir().and_then(|dir| {
        producer_snapshot::load(dir, log_end).unwrap_or_else(|e| {
            tracing::warn!(dir = %dir.display(), error = %e, "producer snapshots unreadable; rereading the log tail");
            None
        })
    });
    let mut states = match loaded {
        Some((offset, mut states)) => {
            states.forget_below(log_start);
            states.replay(log, offset);
            states
        }
        None => producer::rebuild_from_log(log, now_ms),
    };
    states.expire(now_ms);
    states
}

/// The Kafka error for records that cannot be appended.
pub(crate) fn records_error(e: &RecordsError) -> ErrorCode {
    match e {
        RecordsError::UnsupportedMagic { .. } => ErrorCode::UNSUPPORTED_FOR_MESSAGE_FORMAT,
        RecordsError::CrcMismatch { .. } => ErrorCode::CORRUPT_MESSAGE,
        _ => ErrorCode::INVALID_RECORD,
    }
}

/// A topic and its partitions, by index.
pub struct Topic {
    pub info: TopicInfo,
    pub partitions: Vec<Arc<Partition>>,
}

impl Topic {
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batches(spans: &[(i64, usize)]) -> Bytes {
        let mut out = Vec::new();
        for &(base, count) in spans {
            let mut b = skiff_records::RecordBatchBuilder::new().base_offset(base);
            for _ in 0..count {
                b.append(1, None, Some(b"v"), &[]).expect("append");
            }
            out.extend_from_slice(b.build().expect("batch").as_bytes());
        }
        Bytes::from(out)
    }

    #[test]
    fn the_stable_prefix_stops_at_the_first_batch_at_or_past_the_last_stable_offset() {
        let all = batches(&[(0, 2), (2, 3), (5, 1)]);
        let (prefix, next) = stable_prefix(all.clone(), 5);
        assert_eq!(prefix, batches(&[(0, 2), (2, 3)]));
        assert_eq!(next, 5);
        let (prefix, next) = stable_prefix(all.clone(), i64::MAX);
        assert_eq!((prefix, next), (all.clone(), 6));
        let (prefix, next) = stable_prefix(all.clone(), 0);
        assert!(prefix.is_empty());
        assert_eq!(next, i64::MIN);
        // A trailing partial batch (max_bytes cut it) below the limit is kept as it is.
        let cut = all.slice(..all.len() - 3);
        let (prefix, next) = stable_prefix(cut.clone(), i64::MAX);
        assert_eq!((prefix, next), (cut, 6));
    }

    proptest::proptest! {
        /// Whatever bytes a segment read returns, the prefix is a prefix and nothing panics.
        #[test]
        fn any_bytes_give_a_prefix(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256), stable in proptest::num::i64::ANY) {
            let bytes = Bytes::from(bytes);
            let (prefix, _) = stable_prefix(bytes.clone(), stable);
            proptest::prop_assert!(bytes.starts_with(&prefix));
        }
    }

    struct NoTransactions;

    impl TxnVerifier for NoTransactions {
        fn verify(&self, _: i64, _: i16, _: &str, _: i32) -> Result<(), ErrorCode> {
            Err(ErrorCode::INVALID_TXN_STATE)
        }
    }

    fn open(dir: &std::path::Path) -> Partition {
        let info = TopicInfo {
            name: "t".into(),
            id: Uuid::from_u128(7),
            partitions: 1,
            configs: Default::default(),
        };
        let log = skiff_log::PartitionLog::open(dir, LogConfig::default()).expect("log");
        Partition::open(
            &info,
            0,
            Box::new(log),
            epochs::EpochHistory::in_memory(0, 0),
            false,
            1_700_000_000_000,
        )
    }

    /// Issue #13, finding 9: a produce that looked the partition up before its topic was
    /// deleted must not be acknowledged into the files being removed.
    #[test]
    fn an_append_to_a_partition_whose_topic_was_deleted_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let partition = open(dir.path());
        let appended = partition
            .append(batches(&[(0, 2)]), 1, &NoTransactions)
            .expect("append");
        assert_eq!(appended.base_offset, 0);
        partition.mark_removed();
        let refused = partition
            .append(batches(&[(0, 1)]), 2, &NoTransactions)
            .expect_err("refused");
        assert_eq!(refused.code, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
        assert_eq!(partition.log_end_offset(), 2);
    }

    /// Transactions whose coordinator says every batch belongs to a transaction in progress.
    struct InProgress;

    impl TxnVerifier for InProgress {
        fn verify(&self, _: i64, _: i16, _: &str, _: i32) -> Result<(), ErrorCode> {
            Ok(())
        }
    }

    fn over_memory() -> Partition {
        let info = TopicInfo {
            name: "m".into(),
            id: Uuid::from_u128(9),
            partitions: 1,
            configs: Default::default(),
        };
        Partition::open(
            &info,
            0,
            Box::new(memory::MemoryStore::new()),
            epochs::EpochHistory::in_memory(0, 0),
            false,
            0,
        )
    }

    fn producer_batch(pid: i64, seq: i32, count: usize, transactional: bool) -> Bytes {
        let mut b = skiff_records::RecordBatchBuilder::new()
            .producer(pid, 0, seq)
            .transactional(transactional);
        for i in 0..count {
            b.append(1_000 + i as i64, None, Some(b"v"), &[])
                .expect("append");
        }
        b.build().expect("batch").into_bytes()
    }

    /// Offsets of the batches in `records`.
    fn offsets_in(records: &Bytes) -> Vec<i64> {
        let (batches, _) = RecordBatches::parse_fetch(records.clone()).expect("batches");
        batches.iter().map(|b| b.base_offset()).collect()
    }

    #[test]
    fn over_a_memory_store_sequences_are_checked_and_retries_are_not_written_twice() {
        let p = over_memory();
        let first = p
            .append(producer_batch(5, 0, 3, false), 1, &NoTransactions)
            .expect("append");
        assert_eq!((first.base_offset, first.durable_end), (0, 3));
        // The same batch again (a retry): acknowledged with its first offset, not written.
        let retry = p
            .append(producer_batch(5, 0, 3, false), 2, &NoTransactions)
            .expect("retry");
        assert_eq!(retry.base_offset, 0);
        assert_eq!(p.log_end_offset(), 3);
        // A gap in the sequence.
        let gap = p
            .append(producer_batch(5, 7, 1, false), 3, &NoTransactions)
            .expect_err("gap");
        assert_eq!(gap.code, ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER);
        let next = p
            .append(producer_batch(5, 3, 2, false), 4, &NoTransactions)
            .expect("next");
        assert_eq!(next.base_offset, 3);
        let read = p.read(0, 1 << 20, Isolation::ReadUncommitted);
        assert_eq!(read.high_watermark, 5);
        assert_eq!(offsets_in(&read.records.expect("records")), vec![0, 3]);
        // Offsets outside the log are refused.
        assert_eq!(
            p.read(9, 100, Isolation::ReadUncommitted).records,
            Err(ErrorCode::OFFSET_OUT_OF_RANGE)
        );
        assert_eq!(p.delete_records_before(4), Ok(4));
        assert_eq!(p.log_start_offset(), 4);
        assert_eq!(
            p.delete_records_before(6),
            Err(ErrorCode::OFFSET_OUT_OF_RANGE)
        );
    }

    #[test]
    fn over_a_memory_store_read_committed_stops_at_open_transactions_and_lists_aborted_ones() {
        let p = over_memory();
        // Not in a transaction (the coordinator says so): refused.
        let refused = p
            .append(producer_batch(1, 0, 2, true), 1, &NoTransactions)
            .expect_err("no txn");
        assert_eq!(refused.code, ErrorCode::INVALID_TXN_STATE);
        p.append(producer_batch(2, 0, 1, false), 1, &NoTransactions)
            .expect("plain");
        p.append(producer_batch(1, 0, 2, true), 2, &InProgress)
            .expect("txn");
        // The open transaction (offsets 1-2) holds read_committed readers at 1.
        let read = p.read(0, 1 << 20, Isolation::ReadCommitted);
        assert_eq!((read.high_watermark, read.last_stable_offset), (3, 1));
        assert_eq!(offsets_in(&read.records.expect("records")), vec![0]);
        assert_eq!(p.fetchable_end(Isolation::ReadCommitted), 1);
        assert_eq!(p.open_transactions(), vec![(1, 0)]);
        // Aborted: the marker closes it, the records stay, and read_committed lists the abort.
        assert_eq!(p.append_marker(1, 0, false, 3).expect("marker"), Some(4));
        let read = p.read(0, 1 << 20, Isolation::ReadCommitted);
        assert_eq!((read.high_watermark, read.last_stable_offset), (4, 4));
        assert_eq!(offsets_in(&read.records.expect("records")), vec![0, 1, 3]);
        assert_eq!(
            read.aborted,
            Some(vec![Aborted {
                producer_id: 1,
                first_offset: 1
            }])
        );
        assert!(p.open_transactions().is_empty());
        // A marker from an older epoch than the producer's is not written.
        p.append(
            {
                let mut b = skiff_records::RecordBatchBuilder::new()
                    .producer(1, 3, 0)
                    .transactional(true);
                b.append(5, None, Some(b"w"), &[]).expect("append");
                b.build().expect("batch").into_bytes()
            },
            4,
            &InProgress,
        )
        .expect("new epoch");
        assert_eq!(p.append_marker(1, 2, true, 5).expect("fenced"), None);
        assert_eq!(p.append_marker(1, 3, true, 6).expect("commit"), Some(6));
        let read = p.read(4, 1 << 20, Isolation::ReadCommitted);
        assert_eq!(read.last_stable_offset, 6);
        assert_eq!(offsets_in(&read.records.expect("records")), vec![4, 5]);
    }
}
