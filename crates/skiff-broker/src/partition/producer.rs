//! Idempotent producers: a partition's sequence checks and transaction state.
//!
//! The sequence rules follow Kafka's `ProducerAppendInfo`: a batch from a known producer epoch
//! must continue the last sequence (wrapping at i32::MAX); a retried batch identical to one of
//! the last five is acknowledged with its original offsets and not appended again; an older epoch
//! is fenced; a new epoch starts at sequence 0; a producer the partition has no state for is
//! accepted at any sequence (its state may have gone with retention or expiry).
//!
//! Transactions add two things per partition, as Kafka's `ProducerStateManager` keeps them: the
//! first offset of each producer's open transaction (the smallest is the last stable offset,
//! which read_committed consumers never pass) and the aborted transactions (producer, first
//! offset, marker offset) that read_committed fetches list so consumers drop their records.
//!
//! A producer idle for [`PRODUCER_EXPIRATION_MS`] is forgotten (Kafka's
//! `producer.id.expiration.ms`), so short-lived producers do not pile up. The state survives
//! restarts through snapshot files (`producer_snapshot`) plus the log tail after them.

use std::collections::{BTreeMap, HashMap, VecDeque};

use anyhow::Result;
use skiff_protocol::ErrorCode;

use super::store::{PartitionStore, TimeQuery};

/// How many recent batches per producer are remembered for duplicate detection (Kafka: 5).
pub(crate) const RECENT_BATCHES: usize = 5;
/// A producer with no append for this long is forgotten (Kafka's `producer.id.expiration.ms`
/// default, one day).
pub const PRODUCER_EXPIRATION_MS: i64 = 24 * 60 * 60 * 1000;

/// What an incoming batch from an idempotent producer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// A retry of a batch already in the log: answer with these offsets, append nothing.
    Duplicate { base_offset: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchMeta {
    pub(crate) first_seq: i32,
    pub(crate) last_seq: i32,
    pub(crate) base_offset: i64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ProducerEntry {
    pub(crate) epoch: i16,
    /// When the producer last appended (broker clock; the batch timestamp when rebuilt from the
    /// log, as Kafka does): what expiry is measured from.
    pub(crate) last_append_ms: i64,
    pub(crate) recent: VecDeque<BatchMeta>,
    /// The offset of the producer's first batch in its open transaction on this partition.
    pub(crate) txn_first_offset: Option<i64>,
}

/// What DescribeProducers shows of one producer on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerSummary {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The last sequence of its last batch (-1 when only markers are known).
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// The first offset of its open transaction here, or -1.
    pub current_txn_start_offset: i64,
}

/// A transaction that ended with an abort marker: read_committed consumers skip the producer's
/// records from `first_offset` up to the marker at `last_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// Sequence state of the idempotent producers writing to one partition.
#[derive(Debug, Default)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    /// Open transactions by first offset (→ producer ID); the first key is the first unstable
    /// offset.
    ongoing: BTreeMap<i64, i64>,
    /// Aborted transactions in marker order (ascending `last_offset`).
    aborted: Vec<AbortedTxn>,
}

fn in_sequence(last: i32, next: i32) -> bool {
    next == last.wrapping_add(1) || (next == 0 && last == i32::MAX)
}

impl ProducerStates {
    /// Checks a batch; the error is a Kafka error code.
    pub fn check(
        &self,
        producer_id: i64,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
    ) -> Result<SequenceCheck, ErrorCode> {
        if producer_id < 0 {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(SequenceCheck::Append);
        };
        if epoch < entry.epoch {
            return Err(ErrorCode::INVALID_PRODUCER_EPOCH);
        }
        if epoch > entry.epoch {
            return if first_seq == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
            };
        }
        if let Some(dup) = entry
            .recent
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
        {
            return Ok(SequenceCheck::Duplicate {
                base_offset: dup.base_offset,
            });
        }
        match entry.recent.back() {
            Some(last) if !in_sequence(last.last_seq, first_seq) => {
                Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
            }
            _ => Ok(SequenceCheck::Append),
        }
    }

    /// Remembers a batch appended at `now_ms`.
    pub fn record(
        &mut self,
        producer_id: i64,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
        base_offset: i64,
        now_ms: i64,
    ) {
        if producer_id < 0 {
            return;
        }
        let entry = self.producers.entry(producer_id).or_default();
        entry.last_append_ms = entry.last_append_ms.max(now_ms);
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.recent.clear();
        }
        if entry.recent.len() == RECENT_BATCHES {
            entry.recent.pop_front();
        }
        entry.recent.push_back(BatchMeta {
            first_seq,
            last_seq,
            base_offset,
        });
    }

    /// Notes that the transactional batch at `base_offset` belongs to `producer_id`'s open
    /// transaction (opening it on this partition if it is the first).
    pub fn record_txn_data(&mut self, producer_id: i64, base_offset: i64) {
        let Some(entry) = self.producers.get_mut(&producer_id) else {
            return;
        };
        if entry.txn_first_offset.is_none() {
            entry.txn_first_offset = Some(base_offset);
            self.ongoing.insert(base_offset, producer_id);
        }
    }

    /// Checks a transaction marker: one from an older epoch than the producer's is fenced.
    pub fn check_marker(&self, producer_id: i64, epoch: i16) -> Result<(), ErrorCode> {
        match self.producers.get(&producer_id) {
            Some(entry) if epoch < entry.epoch => Err(ErrorCode::INVALID_PRODUCER_EPOCH),
            _ => Ok(()),
        }
    }

    /// Applies the marker at `marker_offset` ending `producer_id`'s transaction: its epoch
    /// becomes the marker's (a coordinator's abort may have bumped it), the transaction is no
    /// longer open, and an aborted one with records here is remembered.
    pub fn record_marker(
        &mut self,
        producer_id: i64,
        epoch: i16,
        kind: skiff_records::ControlRecordType,
        marker_offset: i64,
        now_ms: i64,
    ) {
        let entry = self.producers.entry(producer_id).or_default();
        entry.last_append_ms = entry.last_append_ms.max(now_ms);
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.recent.clear();
        }
        if let Some(first_offset) = entry.txn_first_offset.take() {
            self.ongoing.remove(&first_offset);
            if kind == skiff_records::ControlRecordType::Abort {
                self.aborted.push(AbortedTxn {
                    producer_id,
                    first_offset,
                    last_offset: marker_offset,
                });
            }
        }
    }

    /// Every producer's state, for DescribeProducers, in producer ID order.
    pub fn describe(&self) -> Vec<ProducerSummary> {
        self.entries()
            .map(|(producer_id, entry)| ProducerSummary {
                producer_id,
                producer_epoch: entry.epoch,
                last_sequence: entry.recent.back().map_or(-1, |b| b.last_seq),
                last_timestamp: entry.last_append_ms,
                current_txn_start_offset: entry.txn_first_offset.unwrap_or(-1),
            })
            .collect()
    }

    /// The producers with an open transaction here, with their epochs.
    pub fn open_transactions(&self) -> Vec<(i64, i16)> {
        self.ongoing
            .values()
            .filter_map(|pid| self.producers.get(pid).map(|entry| (*pid, entry.epoch)))
            .collect()
    }

    /// The first offset of the oldest open transaction: read_committed reads stop before it.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// The aborted transactions overlapping `[from, until)`, oldest marker first.
    pub fn aborted_between(&self, from: i64, until: i64) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        self.aborted
            .get(start..)
            .unwrap_or_default()
            .iter()
            .filter(|a| a.first_offset < until)
            .copied()
            .collect()
    }

    pub fn has_aborted(&self) -> bool {
        !self.aborted.is_empty()
    }

    pub(crate) fn aborted(&self) -> &[AbortedTxn] {
        &self.aborted
    }

    pub(crate) fn push_aborted(&mut self, aborted: AbortedTxn) {
        self.aborted.push(aborted);
    }

    /// Forgets the producers idle for [`PRODUCER_EXPIRATION_MS`]; returns how many. A producer
    /// with an open transaction is kept (its transaction still holds the last stable offset).
    pub fn expire(&mut self, now_ms: i64) -> usize {
        let before = self.producers.len();
        let horizon = now_ms.saturating_sub(PRODUCER_EXPIRATION_MS);
        self.producers
            .retain(|_, entry| entry.last_append_ms > horizon || entry.txn_first_offset.is_some());
        before - self.producers.len()
    }

    /// Drops what lies below `log_start` after retention or DeleteRecords: aborted transactions
    /// whose marker is gone and open transactions whose records are gone (nothing is left to
    /// hold back; Kafka drops them too).
    pub fn truncate_below(&mut self, log_start: i64) {
        self.aborted.retain(|a| a.last_offset >= log_start);
        let gone: Vec<(i64, i64)> = self
            .ongoing
            .range(..log_start)
            .map(|(first, pid)| (*first, *pid))
            .collect();
        for (first, pid) in gone {
            self.ongoing.remove(&first);
            if let Some(entry) = self.producers.get_mut(&pid) {
                entry.txn_first_offset = None;
            }
        }
    }

    /// Forgets the producers whose last batch starts below `log_start`: their batches were
    /// deleted, so what is known of them may be older than what they have written since
    /// (after a DeleteRecords, say); unknown, their next batch is accepted instead of refused.
    pub fn forget_below(&mut self, log_start: i64) {
        self.truncate_below(log_start);
        self.producers.retain(|_, entry| {
            entry.txn_first_offset.is_some()
                || entry
                    .recent
                    .back()
                    .is_some_and(|last| last.base_offset >= log_start)
        });
    }

    /// How many producers are known.
    /// The highest producer ID this partition knows.
    pub fn max_producer_id(&self) -> Option<i64> {
        self.producers.keys().copied().max()
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Every producer, in producer ID order (so a snapshot of the same state is the same bytes).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        let mut ids: Vec<i64> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(|id| self.producers.get(&id).map(|entry| (id, entry)))
    }

    pub(crate) fn insert(&mut self, producer_id: i64, entry: ProducerEntry) {
        let first = entry.txn_first_offset;
        if let Some(old) = self.producers.insert(producer_id, entry)
            && let Some(old_first) = old.txn_first_offset
        {
            self.ongoing.remove(&old_first);
        }
        if let Some(first) = first {
            self.ongoing.insert(first, producer_id);
        }
    }

    /// Replays the batch headers of `log` from `from_offset` to its end on top of this state.
    pub(super) fn replay(&mut self, log: &dyn PartitionStore, from_offset: i64) {
        let walked = log.headers_from(from_offset, &mut |header| {
            if header.producer_id < 0 {
                return;
            }
            if header.is_control() {
                match marker_kind(log, header.base_offset) {
                    Some(kind) => self.record_marker(
                        header.producer_id,
                        header.producer_epoch,
                        kind,
                        header.base_offset,
                        header.max_timestamp,
                    ),
                    None => tracing::warn!(dir = ?log.snapshot_dir(), offset = header.base_offset, "unreadable transaction marker skipped"),
                }
                return;
            }
            self.record(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.base_sequence.wrapping_add(header.last_offset_delta),
                header.base_offset,
                header.max_timestamp,
            );
            if header.is_transactional() {
                self.record_txn_data(header.producer_id, header.base_offset);
            }
        });
        if let Err(e) = walked {
            tracing::warn!(dir = ?log.snapshot_dir(), error = %e, "producer state rebuilt from part of the log tail");
        }
    }
}

/// What the transaction marker at `offset` says (markers are one tiny record; reading it back is
/// the only way to tell a commit from an abort).
fn marker_kind(log: &dyn PartitionStore, offset: i64) -> Option<skiff_records::ControlRecordType> {
    let read = log.read(offset, 4096).ok()?;
    let (batches, _) = skiff_records::RecordBatches::parse_fetch(read).ok()?;
    let batch = batches.into_iter().find(|b| b.base_offset() == offset)?;
    skiff_records::control_record_type(&batch)
}

/// A restart always looks at least this many offsets back for idempotent producers' batches.
const REBUILD_WINDOW: i64 = 10_000;
/// ...and at least this far back in time: a producer retries a batch whose acknowledgement was
/// lost for up to its `delivery.timeout.ms` (2 minutes by default), so every batch appended in the
/// last five minutes must be recognisable as a duplicate after a restart, however busy the
/// partition was (at a million records a second, 10,000 offsets are only 10 ms).
const REBUILD_HORIZON_MS: i64 = 5 * 60 * 1000;

/// Rebuilds the sequence state of a partition from the batch headers at the tail of its log
/// (when there is no snapshot): a producer's batch retried after a crash is then recognised as a
/// duplicate instead of being appended twice. The tail is the last [`REBUILD_WINDOW`] offsets or
/// the batches of the last [`REBUILD_HORIZON_MS`] (by batch timestamp), whichever reaches further
/// back; only batch headers are read.
pub fn rebuild_from_log(log: &dyn PartitionStore, now_ms: i64) -> ProducerStates {
    let (_, end) = log.offsets();
    let recent = log
        .find(TimeQuery::AtOrAfter(
            now_ms.saturating_sub(REBUILD_HORIZON_MS),
        ))
        .ok()
        .flatten()
        .map_or(end, |found| found.offset);
    let from = recent.min(end.saturating_sub(REBUILD_WINDOW));
    let mut states = ProducerStates::default();
    states.replay(log, from);
    states
}

#[cfg(test)]
mod tests {
    use super::super::restore_producers as restore;
    use super::*;

    #[test]
    fn sequences_duplicates_and_epochs() {
        let mut s = ProducerStates::default();
        // Unknown producer: any sequence is accepted.
        assert_eq!(s.check(7, 0, 5, 9), Ok(SequenceCheck::Append));
        s.record(7, 0, 0, 4, 100, 1);
        assert_eq!(s.check(7, 0, 5, 9), Ok(SequenceCheck::Append));
        assert_eq!(
            s.check(7, 0, 6, 9),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        // A retry of the last batch is a duplicate with its original offset.
        assert_eq!(
            s.check(7, 0, 0, 4),
            Ok(SequenceCheck::Duplicate { base_offset: 100 })
        );
        // Older epoch fenced; newer epoch must start at 0.
        s.record(7, 1, 0, 0, 200, 1);
        assert_eq!(s.check(7, 0, 1, 1), Err(ErrorCode::INVALID_PRODUCER_EPOCH));
        assert_eq!(
            s.check(7, 2, 3, 3),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(s.check(7, 2, 0, 0), Ok(SequenceCheck::Append));
        // Non-idempotent batches are never checked.
        assert_eq!(s.check(-1, -1, -1, -1), Ok(SequenceCheck::Append));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
        let mut s = ProducerStates::default();
        for i in 0..6 {
            s.record(1, 0, i, i, i64::from(i) * 10, 1);
        }
        assert_eq!(
            s.check(1, 0, 0, 0),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(
            s.check(1, 0, 1, 1),
            Ok(SequenceCheck::Duplicate { base_offset: 10 })
        );
        let mut s = ProducerStates::default();
        s.record(1, 0, i32::MAX - 1, i32::MAX, 0, 1);
        assert_eq!(s.check(1, 0, 0, 3), Ok(SequenceCheck::Append));
    }

    #[test]
    fn state_is_rebuilt_from_the_log_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = skiff_log::PartitionLog::open(dir.path(), skiff_log::LogConfig::default())
            .expect("open");
        for seq in [0, 3] {
            let mut b = skiff_records::RecordBatchBuilder::new().producer(9, 2, seq);
            for _ in 0..3 {
                b.append(1, None, Some(b"v"), &[]).expect("append");
            }
            log.append(b.build().expect("batch").into_bytes(), 1)
                .expect("append");
        }
        let states = rebuild_from_log(&log, 1);
        assert_eq!(
            states.check(9, 2, 3, 5),
            Ok(SequenceCheck::Duplicate { base_offset: 3 })
        );
        assert_eq!(states.check(9, 2, 6, 6), Ok(SequenceCheck::Append));
        assert_eq!(
            states.check(9, 2, 7, 7),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
    }

    /// An idempotent producer's batch followed by 12,000 other records (more than the offset
    /// window), all stamped `timestamp`; returns the log.
    fn busy_log(dir: &std::path::Path, timestamp: i64) -> skiff_log::PartitionLog {
        let mut log =
            skiff_log::PartitionLog::open(dir, skiff_log::LogConfig::default()).expect("open");
        let mut b = skiff_records::RecordBatchBuilder::new().producer(9, 0, 0);
        b.append(timestamp, None, Some(b"mine"), &[])
            .expect("append");
        log.append(b.build().expect("batch").into_bytes(), timestamp)
            .expect("append");
        for _ in 0..12 {
            let mut b = skiff_records::RecordBatchBuilder::new();
            for _ in 0..1_000 {
                b.append(timestamp, None, Some(b"other"), &[])
                    .expect("append");
            }
            log.append(b.build().expect("batch").into_bytes(), timestamp)
                .expect("append");
        }
        log
    }

    #[test]
    fn a_busy_partition_still_knows_the_producers_of_the_last_minutes() {
        let now = 1_800_000_000_000;
        let dir = tempfile::tempdir().expect("tempdir");
        let log = busy_log(dir.path(), now - 60_000);
        // Its one batch is 12,001 offsets back but a minute old: a retry is still a duplicate.
        assert_eq!(
            rebuild_from_log(&log, now).check(9, 0, 0, 0),
            Ok(SequenceCheck::Duplicate { base_offset: 0 })
        );
        // An hour later it is outside both windows, and the producer is unknown again.
        let states = rebuild_from_log(&log, now + 3_600_000);
        assert_eq!(states.check(9, 0, 0, 0), Ok(SequenceCheck::Append));
        assert!(states.producers.is_empty());
    }

    #[test]
    fn a_snapshot_keeps_producers_older_than_the_tail_window() {
        let now = 1_800_000_000_000;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = busy_log(dir.path(), now - 3_600_000);
        let mut states = rebuild_from_log(&log, now - 3_600_000);
        super::super::producer_snapshot::write(dir.path(), &states, log.log_end_offset())
            .expect("snapshot");
        // After the snapshot the same producer appends once more (sequence 1).
        let mut b = skiff_records::RecordBatchBuilder::new().producer(9, 0, 1);
        b.append(now - 3_600_000, None, Some(b"later"), &[])
            .expect("append");
        let info = log
            .append(b.build().expect("batch").into_bytes(), now - 3_600_000)
            .expect("append");
        states.record(9, 0, 1, 1, info.base_offset, now - 3_600_000);

        // An hour later the tail windows alone no longer reach its first batch (a retry of it
        // would be refused as out of order)...
        assert_eq!(
            rebuild_from_log(&log, now).check(9, 0, 0, 0),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        // ...but the snapshot plus the replay of the batch after it know both its batches.
        let restored = restore(&log, now);
        assert_eq!(
            restored.check(9, 0, 0, 0),
            Ok(SequenceCheck::Duplicate { base_offset: 0 })
        );
        assert_eq!(
            restored.check(9, 0, 1, 1),
            Ok(SequenceCheck::Duplicate {
                base_offset: info.base_offset
            })
        );
        assert_eq!(restored.check(9, 0, 2, 2), Ok(SequenceCheck::Append));
        // A day after its last append the producer has expired, snapshot or not.
        let later = restore(&log, now - 3_600_000 + PRODUCER_EXPIRATION_MS + 1);
        assert!(later.is_empty());
    }

    #[test]
    fn producers_whose_batches_are_below_the_log_start_are_not_restored() {
        let now = 1_800_000_000_000;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = busy_log(dir.path(), now - 60_000);
        let states = rebuild_from_log(&log, now);
        super::super::producer_snapshot::write(dir.path(), &states, log.log_end_offset())
            .expect("snapshot");
        assert_eq!(
            restore(&log, now).check(9, 0, 0, 0),
            Ok(SequenceCheck::Duplicate { base_offset: 0 })
        );
        // DeleteRecords past the producer's only batch: it is forgotten, not kept stale.
        log.delete_records_before(1).expect("delete records");
        let restored = restore(&log, now);
        assert!(restored.is_empty());
        assert_eq!(restored.check(9, 0, 7, 7), Ok(SequenceCheck::Append));
    }

    #[test]
    fn idle_producers_expire_after_a_day() {
        let mut s = ProducerStates::default();
        s.record(1, 0, 0, 0, 0, 1_000);
        s.record(2, 0, 0, 0, 1, 5_000);
        assert_eq!(s.expire(1_000 + PRODUCER_EXPIRATION_MS - 1), 0);
        assert_eq!(s.expire(1_000 + PRODUCER_EXPIRATION_MS), 1);
        assert_eq!(
            s.check(2, 0, 0, 0),
            Ok(SequenceCheck::Duplicate { base_offset: 1 })
        );
        assert_eq!(
            s.check(1, 0, 7, 7),
            Ok(SequenceCheck::Append),
            "unknown again"
        );
        // A late batch timestamp from a rebuild never moves the last append back.
        s.record(2, 0, 1, 1, 2, 10);
        assert_eq!(s.expire(5_000 + PRODUCER_EXPIRATION_MS - 1), 0);
    }

    #[test]
    fn open_transactions_hold_the_last_stable_offset_and_aborts_are_listed() {
        use skiff_records::ControlRecordType::{Abort, Commit};
        let mut s = ProducerStates::default();
        assert_eq!(s.first_unstable_offset(), None);
        s.record(1, 0, 0, 1, 10, 1);
        s.record_txn_data(1, 10);
        s.record(2, 0, 0, 0, 12, 1);
        s.record_txn_data(2, 12);
        s.record(1, 0, 2, 2, 13, 1);
        s.record_txn_data(1, 13);
        assert_eq!(s.first_unstable_offset(), Some(10));
        assert_eq!(
            s.describe().first(),
            Some(&ProducerSummary {
                producer_id: 1,
                producer_epoch: 0,
                last_sequence: 2,
                last_timestamp: 1,
                current_txn_start_offset: 10,
            })
        );
        // A marker from an older epoch is fenced.
        assert_eq!(
            s.check_marker(1, -1),
            Err(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
        assert_eq!(s.check_marker(1, 1), Ok(()));
        // Producer 1 aborts (with a bumped epoch, as a coordinator's timeout abort does).
        s.record_marker(1, 1, Abort, 14, 2);
        assert_eq!(s.first_unstable_offset(), Some(12));
        assert_eq!(s.check(1, 0, 3, 3), Err(ErrorCode::INVALID_PRODUCER_EPOCH));
        assert_eq!(s.check(1, 1, 0, 0), Ok(SequenceCheck::Append));
        s.record_marker(2, 0, Commit, 15, 2);
        assert_eq!(s.first_unstable_offset(), None);
        let aborted = AbortedTxn {
            producer_id: 1,
            first_offset: 10,
            last_offset: 14,
        };
        assert_eq!(s.aborted_between(0, 100), vec![aborted]);
        assert_eq!(s.aborted_between(14, 100), vec![aborted]);
        assert_eq!(s.aborted_between(15, 100), vec![]);
        assert_eq!(s.aborted_between(0, 10), vec![]);
        // A marker for a producer with nothing open changes nothing else.
        s.record_marker(3, 0, Abort, 16, 2);
        assert_eq!(s.aborted_between(0, 100).len(), 1);
        // Retention past the marker forgets the abort.
        s.truncate_below(15);
        assert!(!s.has_aborted());
    }

    #[test]
    fn a_producer_with_an_open_transaction_does_not_expire() {
        let mut s = ProducerStates::default();
        s.record(1, 0, 0, 0, 5, 1_000);
        s.record_txn_data(1, 5);
        assert_eq!(s.expire(1_000 + PRODUCER_EXPIRATION_MS * 2), 0);
        assert_eq!(s.first_unstable_offset(), Some(5));
        // Records deleted below it: the transaction no longer holds anything back.
        s.truncate_below(6);
        assert_eq!(s.first_unstable_offset(), None);
        assert_eq!(s.expire(1_000 + PRODUCER_EXPIRATION_MS * 2), 1);
    }

    #[test]
    fn transactions_are_rebuilt_from_the_log_with_their_markers() {
        use skiff_records::ControlRecordType::{Abort, Commit};
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = skiff_log::PartitionLog::open(dir.path(), skiff_log::LogConfig::default())
            .expect("open");
        let data = |pid: i64, seq: i32| {
            let mut b = skiff_records::RecordBatchBuilder::new()
                .producer(pid, 0, seq)
                .transactional(true);
            b.append(1, None, Some(b"v"), &[]).expect("append");
            b.build().expect("batch").into_bytes()
        };
        let marker = |pid: i64, kind| {
            skiff_records::end_txn_marker(pid, 0, kind, 0, 1)
                .expect("marker")
                .into_bytes()
        };
        log.append(data(1, 0), 1).expect("append"); // 0
        log.append(data(2, 0), 1).expect("append"); // 1
        log.append(marker(1, Abort), 1).expect("append"); // 2
        log.append(data(1, 1), 1).expect("append"); // 3
        log.append(marker(2, Commit), 1).expect("append"); // 4
        let states = rebuild_from_log(&log, 1);
        assert_eq!(states.first_unstable_offset(), Some(3));
        assert_eq!(
            states.aborted_between(0, 10),
            vec![AbortedTxn {
                producer_id: 1,
                first_offset: 0,
                last_offset: 2
            }]
        );
        // The sequence of producer 1 continues after the marker.
        assert_eq!(
            states.check(1, 0, 1, 1),
            Ok(SequenceCheck::Duplicate { base_offset: 3 })
        );
    }
}
