//! The commit rules of cluster mode, as plain data and one pure function.
//!
//! A broker uploads one object holding the batches its producers sent during a commit interval,
//! then commits it: inside one PostgreSQL transaction it locks the partitions the object touches
//! (in [`PartitionKey`] order, so that two brokers never wait on each other), reads their log
//! state and the state of the idempotent producers involved, and hands them to [`plan`]. The
//! plan says what happens to each append (offsets assigned, a duplicate answered with its first
//! offsets, or a refusal with Kafka's error) and which rows change; the transaction writes them.
//!
//! The sequence rules are Kafka's `ProducerAppendInfo`, as the embedded log applies them: a
//! batch from a known producer epoch must continue the last sequence (wrapping at `i32::MAX`);
//! a retry identical to one of the producer's last five batches is answered with its original
//! offsets and appended again nowhere; an older epoch is fenced; a newer epoch starts at
//! sequence 0; a producer the partition has no state for is accepted at any sequence.
//!
//! Objects carry no offsets: a batch's offsets exist only in its row, and the broker that serves
//! it writes them into the batch header.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// How many recent batches per producer and partition are remembered (Kafka: 5).
pub const RECENT_BATCHES: usize = 5;

/// One partition of one topic. Ordered by topic ID, then partition: the order in which a commit
/// locks partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    pub topic_id: Uuid,
    pub partition: i32,
}

/// What a commit needs of a partition's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogState {
    pub log_start: i64,
    pub high_watermark: i64,
    /// Bytes of the batches from the log start to the high watermark (size retention).
    pub size_bytes: i64,
}

/// One of a producer's recent batches on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentBatch {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

/// An idempotent producer's state on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerState {
    pub epoch: i16,
    /// Oldest first, at most [`RECENT_BATCHES`].
    pub recent: Vec<RecentBatch>,
    pub last_append_ms: i64,
}

/// One record batch of an append, where it sits in the object, and what its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    pub byte_offset: u64,
    pub byte_size: u32,
    /// `last_offset_delta + 1`.
    pub record_count: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub last_sequence: i32,
    pub max_timestamp: i64,
    /// The topic stamps the broker's time on its batches (`LogAppendTime`).
    pub log_append_time: bool,
}

/// The batches one produce request sent to one partition: committed all together or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    pub key: PartitionKey,
    pub batches: Vec<BatchInfo>,
}

/// What became of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Committed at these offsets.
    Appended { base_offset: i64, last_offset: i64 },
    /// A retry of batches committed before: answered with their offsets, stored again nowhere.
    Duplicate { base_offset: i64, last_offset: i64 },
    /// The partition does not exist (any more).
    UnknownPartition,
    /// An older producer epoch than the partition has seen: the producer is fenced.
    InvalidProducerEpoch,
    /// The sequence does not continue the producer's last one.
    OutOfOrderSequence,
    /// An append without batches, or a batch claiming no records.
    Invalid,
}

/// A row of the batch index: where a committed batch lives and its offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRow {
    pub key: PartitionKey,
    pub base_offset: i64,
    pub last_offset: i64,
    pub byte_offset: u64,
    pub byte_size: u32,
    pub max_timestamp: i64,
    /// The commit's time when the topic uses `LogAppendTime`, else -1.
    pub log_append_time: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub last_sequence: i32,
}

/// What a commit does: one verdict per append (in order), the batch rows to insert, and the new
/// state of every log and producer it changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub verdicts: Vec<Verdict>,
    pub rows: Vec<BatchRow>,
    pub logs: BTreeMap<PartitionKey, LogState>,
    pub producers: BTreeMap<(PartitionKey, i64), ProducerState>,
}

impl Plan {
    /// Bytes of object the committed batches use (the rest of the object is garbage from birth).
    pub fn used_bytes(&self) -> u64 {
        self.rows.iter().map(|r| u64::from(r.byte_size)).sum()
    }
}

fn in_sequence(last: i32, next: i32) -> bool {
    next == last.wrapping_add(1) || (next == 0 && last == i32::MAX)
}

/// Checks one batch against the producer's state; `Ok(Some(_))` is a duplicate of an earlier
/// batch (its base and last offsets).
fn check(state: Option<&ProducerState>, batch: &BatchInfo) -> Result<Option<(i64, i64)>, Verdict> {
    if batch.producer_id < 0 {
        return Ok(None);
    }
    let Some(state) = state else {
        return Ok(None);
    };
    if batch.producer_epoch < state.epoch {
        return Err(Verdict::InvalidProducerEpoch);
    }
    if batch.producer_epoch > state.epoch {
        return if batch.base_sequence == 0 {
            Ok(None)
        } else {
            Err(Verdict::OutOfOrderSequence)
        };
    }
    if let Some(dup) = state
        .recent
        .iter()
        .find(|b| b.first_seq == batch.base_sequence && b.last_seq == batch.last_sequence)
    {
        return Ok(Some((dup.base_offset, dup.last_offset)));
    }
    match state.recent.last() {
        Some(last) if !in_sequence(last.last_seq, batch.base_sequence) => {
            Err(Verdict::OutOfOrderSequence)
        }
        _ => Ok(None),
    }
}

fn remember(state: &mut ProducerState, batch: &BatchInfo, base_offset: i64, now_ms: i64) {
    if batch.producer_epoch != state.epoch {
        state.epoch = batch.producer_epoch;
        state.recent.clear();
    }
    if state.recent.len() >= RECENT_BATCHES {
        state.recent.remove(0);
    }
    state.recent.push(RecentBatch {
        first_seq: batch.base_sequence,
        last_seq: batch.last_sequence,
        base_offset,
        last_offset: base_offset + i64::from(batch.record_count) - 1,
    });
    state.last_append_ms = state.last_append_ms.max(now_ms);
}

/// Decides a commit. `logs` holds the locked partitions (a partition missing from it does not
/// exist); `producers` the state of the producers the appends name, on their partitions.
/// Appends are taken in order, each one seeing what the ones before it committed.
pub fn plan(
    logs: &BTreeMap<PartitionKey, LogState>,
    producers: &HashMap<(PartitionKey, i64), ProducerState>,
    appends: &[Append],
    now_ms: i64,
) -> Plan {
    let mut out = Plan::default();
    for append in appends {
        let verdict = plan_one(logs, producers, append, now_ms, &mut out);
        out.verdicts.push(verdict);
    }
    out
}

fn plan_one(
    logs: &BTreeMap<PartitionKey, LogState>,
    producers: &HashMap<(PartitionKey, i64), ProducerState>,
    append: &Append,
    now_ms: i64,
    out: &mut Plan,
) -> Verdict {
    let key = append.key;
    let Some(log) = out.logs.get(&key).or_else(|| logs.get(&key)).copied() else {
        return Verdict::UnknownPartition;
    };
    if append.batches.is_empty() || append.batches.iter().any(|b| b.record_count <= 0) {
        return Verdict::Invalid;
    }
    // Check every batch against the producer states as the earlier batches of this append
    // leave them; only a clean append changes anything.
    let mut staged: BTreeMap<i64, ProducerState> = BTreeMap::new();
    let mut next = log.high_watermark;
    let mut rows = Vec::with_capacity(append.batches.len());
    for batch in &append.batches {
        let current = staged
            .get(&batch.producer_id)
            .or_else(|| out.producers.get(&(key, batch.producer_id)))
            .or_else(|| producers.get(&(key, batch.producer_id)));
        match check(current, batch) {
            Err(refusal) => return refusal,
            // Kafka answers a whole append as the duplicate of its first duplicate batch.
            Ok(Some((base_offset, last_offset))) => {
                return Verdict::Duplicate {
                    base_offset,
                    last_offset,
                };
            }
            Ok(None) => {}
        }
        if batch.producer_id >= 0 {
            let mut state = current.cloned().unwrap_or_default();
            if current.is_none() {
                state.epoch = batch.producer_epoch;
            }
            remember(&mut state, batch, next, now_ms);
            staged.insert(batch.producer_id, state);
        }
        let last = next + i64::from(batch.record_count) - 1;
        rows.push(BatchRow {
            key,
            base_offset: next,
            last_offset: last,
            byte_offset: batch.byte_offset,
            byte_size: batch.byte_size,
            max_timestamp: batch.max_timestamp,
            log_append_time: if batch.log_append_time { now_ms } else { -1 },
            producer_id: batch.producer_id,
            producer_epoch: batch.producer_epoch,
            base_sequence: batch.base_sequence,
            last_sequence: batch.last_sequence,
        });
        next = last + 1;
    }
    let added: i64 = rows.iter().map(|r| i64::from(r.byte_size)).sum();
    out.logs.insert(
        key,
        LogState {
            log_start: log.log_start,
            high_watermark: next,
            size_bytes: log.size_bytes + added,
        },
    );
    for (producer_id, state) in staged {
        out.producers.insert((key, producer_id), state);
    }
    out.rows.extend(rows);
    Verdict::Appended {
        base_offset: log.high_watermark,
        last_offset: next - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i32) -> PartitionKey {
        PartitionKey {
            topic_id: Uuid::from_u128(7),
            partition: p,
        }
    }

    fn batch(pid: i64, epoch: i16, seq: i32, count: i32) -> BatchInfo {
        BatchInfo {
            byte_offset: 0,
            byte_size: 100,
            record_count: count,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            last_sequence: seq.wrapping_add(count - 1),
            max_timestamp: 1,
            log_append_time: false,
        }
    }

    fn logs(parts: &[(i32, i64)]) -> BTreeMap<PartitionKey, LogState> {
        parts
            .iter()
            .map(|&(p, hw)| {
                (
                    key(p),
                    LogState {
                        log_start: 0,
                        high_watermark: hw,
                        size_bytes: 0,
                    },
                )
            })
            .collect()
    }

    fn one(p: i32, b: BatchInfo) -> Append {
        Append {
            key: key(p),
            batches: vec![b],
        }
    }

    #[test]
    fn offsets_continue_the_high_watermark_per_partition() {
        let plan = plan(
            &logs(&[(0, 10), (1, 0)]),
            &HashMap::new(),
            &[
                one(0, batch(-1, -1, -1, 3)),
                one(1, batch(-1, -1, -1, 2)),
                one(0, batch(-1, -1, -1, 1)),
            ],
            5,
        );
        assert_eq!(
            plan.verdicts,
            vec![
                Verdict::Appended {
                    base_offset: 10,
                    last_offset: 12
                },
                Verdict::Appended {
                    base_offset: 0,
                    last_offset: 1
                },
                Verdict::Appended {
                    base_offset: 13,
                    last_offset: 13
                },
            ]
        );
        assert_eq!(plan.logs[&key(0)].high_watermark, 14);
        assert_eq!(plan.logs[&key(0)].size_bytes, 200);
        assert_eq!(plan.logs[&key(1)].high_watermark, 2);
        assert_eq!(plan.rows.len(), 3);
        assert_eq!(plan.used_bytes(), 300);
    }

    #[test]
    fn unknown_partitions_and_empty_appends_are_refused() {
        let plan = plan(
            &logs(&[(0, 0)]),
            &HashMap::new(),
            &[
                one(9, batch(-1, -1, -1, 1)),
                Append {
                    key: key(0),
                    batches: vec![],
                },
                one(0, batch(-1, -1, -1, 0)),
            ],
            0,
        );
        assert_eq!(
            plan.verdicts,
            vec![
                Verdict::UnknownPartition,
                Verdict::Invalid,
                Verdict::Invalid
            ]
        );
        assert!(plan.rows.is_empty() && plan.logs.is_empty());
    }

    #[test]
    fn a_retry_in_a_later_commit_is_answered_with_its_first_offsets() {
        let first = plan(
            &logs(&[(0, 0)]),
            &HashMap::new(),
            &[one(0, batch(5, 0, 0, 4))],
            1,
        );
        let producers: HashMap<_, _> = first.producers.clone().into_iter().collect();
        let again = plan(&first.logs, &producers, &[one(0, batch(5, 0, 0, 4))], 2);
        assert_eq!(
            again.verdicts,
            vec![Verdict::Duplicate {
                base_offset: 0,
                last_offset: 3
            }]
        );
        assert!(again.rows.is_empty());
        let next = plan(&first.logs, &producers, &[one(0, batch(5, 0, 4, 1))], 3);
        assert_eq!(
            next.verdicts,
            vec![Verdict::Appended {
                base_offset: 4,
                last_offset: 4
            }]
        );
    }

    #[test]
    fn a_retry_within_one_commit_is_a_duplicate() {
        let plan = plan(
            &logs(&[(0, 0)]),
            &HashMap::new(),
            &[one(0, batch(5, 0, 0, 2)), one(0, batch(5, 0, 0, 2))],
            1,
        );
        assert_eq!(
            plan.verdicts[1],
            Verdict::Duplicate {
                base_offset: 0,
                last_offset: 1
            }
        );
        assert_eq!(plan.logs[&key(0)].high_watermark, 2);
    }

    #[test]
    fn gaps_old_epochs_and_new_epochs() {
        let mut producers = HashMap::new();
        producers.insert(
            (key(0), 5),
            ProducerState {
                epoch: 3,
                recent: vec![RecentBatch {
                    first_seq: 0,
                    last_seq: 9,
                    base_offset: 0,
                    last_offset: 9,
                }],
                last_append_ms: 0,
            },
        );
        let l = logs(&[(0, 10)]);
        let v = |b| plan(&l, &producers, &[one(0, b)], 1).verdicts[0];
        assert_eq!(v(batch(5, 3, 11, 1)), Verdict::OutOfOrderSequence);
        assert_eq!(v(batch(5, 2, 10, 1)), Verdict::InvalidProducerEpoch);
        assert_eq!(v(batch(5, 4, 1, 1)), Verdict::OutOfOrderSequence);
        assert!(matches!(v(batch(5, 4, 0, 1)), Verdict::Appended { .. }));
        assert!(matches!(v(batch(5, 3, 10, 1)), Verdict::Appended { .. }));
        // A producer the partition has not seen starts anywhere.
        assert!(matches!(v(batch(6, 0, 77, 1)), Verdict::Appended { .. }));
    }

    #[test]
    fn a_new_epoch_forgets_the_old_batches() {
        let l = logs(&[(0, 0)]);
        let p1 = plan(&l, &HashMap::new(), &[one(0, batch(5, 0, 0, 1))], 1);
        let producers: HashMap<_, _> = p1.producers.clone().into_iter().collect();
        let p2 = plan(&p1.logs, &producers, &[one(0, batch(5, 1, 0, 1))], 2);
        let state = &p2.producers[&(key(0), 5)];
        assert_eq!(state.epoch, 1);
        assert_eq!(state.recent.len(), 1);
        assert_eq!(state.recent[0].base_offset, 1);
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        let l = logs(&[(0, 0)]);
        let p1 = plan(&l, &HashMap::new(), &[one(0, batch(5, 0, i32::MAX, 1))], 1);
        let producers: HashMap<_, _> = p1.producers.clone().into_iter().collect();
        let p2 = plan(&p1.logs, &producers, &[one(0, batch(5, 0, 0, 1))], 2);
        assert!(matches!(p2.verdicts[0], Verdict::Appended { .. }));
    }

    #[test]
    fn only_the_last_five_batches_count_as_duplicates() {
        let mut l = logs(&[(0, 0)]);
        let mut producers = HashMap::new();
        for i in 0..6 {
            let p = plan(&l, &producers, &[one(0, batch(5, 0, i, 1))], 1);
            l.extend(p.logs.clone());
            producers.extend(p.producers.clone());
        }
        assert_eq!(producers[&(key(0), 5)].recent.len(), RECENT_BATCHES);
        // Sequence 0 fell out of the window: it is now out of order, not a duplicate.
        let p = plan(&l, &producers, &[one(0, batch(5, 0, 0, 1))], 1);
        assert_eq!(p.verdicts[0], Verdict::OutOfOrderSequence);
        let p = plan(&l, &producers, &[one(0, batch(5, 0, 1, 1))], 1);
        assert!(matches!(p.verdicts[0], Verdict::Duplicate { .. }));
    }

    #[test]
    fn an_append_with_a_bad_batch_changes_nothing() {
        let plan = plan(
            &logs(&[(0, 0)]),
            &HashMap::new(),
            &[Append {
                key: key(0),
                batches: vec![batch(5, 0, 0, 2), batch(5, 0, 7, 1)],
            }],
            1,
        );
        assert_eq!(plan.verdicts, vec![Verdict::OutOfOrderSequence]);
        assert!(plan.rows.is_empty() && plan.logs.is_empty() && plan.producers.is_empty());
    }

    #[test]
    fn log_append_time_stamps_the_commit_time() {
        let mut b = batch(-1, -1, -1, 1);
        b.log_append_time = true;
        let plan = plan(&logs(&[(0, 0)]), &HashMap::new(), &[one(0, b)], 42);
        assert_eq!(plan.rows[0].log_append_time, 42);
    }
}
