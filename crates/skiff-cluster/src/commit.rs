//! The commit rules of cluster mode, as plain data and one pure function.
//!
//! A broker uploads one object holding the batches its producers sent during a commit interval,
//! then commits it: inside one PostgreSQL transaction it locks the partitions the object touches
//! (in [`PartitionKey`] order, so that two brokers never wait on each other), reads their log
//! state, the state of the idempotent producers involved and the partitions' open transactions,
//! and hands them to [`plan`]. The plan says what happens to each append (offsets assigned, a
//! duplicate answered with its first offsets, or a refusal with Kafka's error) and which rows
//! change; the transaction writes them.
//!
//! The sequence rules are Kafka's `ProducerAppendInfo`, as the embedded log applies them: a
//! batch from a known producer epoch must continue the last sequence (wrapping at `i32::MAX`);
//! a retry identical to one of the producer's last five batches is answered with its original
//! offsets and appended again nowhere; an older epoch is fenced; a newer epoch starts at
//! sequence 0; a producer the partition has no state for is accepted at any sequence.
//!
//! Transactions: a transactional data batch ([`TxnKind::Data`]) opens its producer's
//! transaction on the partition at its base offset unless one is open already; a transaction
//! marker ([`TxnKind::Marker`], a control batch the transaction coordinator writes, alone in its
//! append) closes it, and an abort marker records the aborted range for consumers reading
//! committed. A partition's last stable offset is the first offset of its earliest open
//! transaction (never below the log start), or its high watermark when none is open.
//!
//! Objects carry no offsets: a batch's offsets exist only in its row, and the broker that serves
//! it writes them into the batch header.

use std::collections::{BTreeMap, BTreeSet, HashMap};

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
    /// The last stable offset: the first offset of the earliest open transaction (at least the
    /// log start), or the high watermark when none is open.
    pub last_stable: i64,
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

/// What a batch is to transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxnKind {
    /// Not transactional.
    #[default]
    None,
    /// A transactional data batch.
    Data,
    /// A control batch ending the producer's transaction on the partition (commit or abort).
    /// It carries the producer ID and epoch, sequences -1, one record, and is the only batch of
    /// its [`Append`].
    Marker { commit: bool },
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
    pub txn: TxnKind,
}

/// The batches one produce request sent to one partition: committed all together or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    pub key: PartitionKey,
    pub batches: Vec<BatchInfo>,
}

/// A producer's open transaction on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTxn {
    /// The epoch of the batch that opened it.
    pub producer_epoch: i16,
    /// The offset of its first batch on the partition.
    pub first_offset: i64,
    /// When it was opened (the commit's time).
    pub opened_ms: i64,
}

/// An aborted transaction's range on a partition: from its first batch to its abort marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub key: PartitionKey,
    pub producer_id: i64,
    pub first_offset: i64,
    /// The abort marker's offset.
    pub last_offset: i64,
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
    /// An append without batches, or a batch claiming no records, or a transaction marker that
    /// is not alone in its append, has no producer ID or not exactly one record, or a
    /// transactional batch without a producer ID.
    Invalid,
    /// A transaction marker for a producer with no open transaction on the partition (a retry,
    /// or a partition the transaction never wrote to): nothing is written, and the marker is
    /// as good as written.
    NothingOpen,
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

/// What a commit does: one verdict per append (in order), the batch rows to insert, the new
/// state of every log and producer it changed, and the transactions it opened, closed and
/// aborted.
///
/// The open transaction rows change by deleting `closed`, then inserting `opened`: a
/// transaction closed and opened again within one commit is in both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub verdicts: Vec<Verdict>,
    pub rows: Vec<BatchRow>,
    pub logs: BTreeMap<PartitionKey, LogState>,
    pub producers: BTreeMap<(PartitionKey, i64), ProducerState>,
    /// Transactions opened (by partition and producer ID), open at the end of the commit.
    pub opened: BTreeMap<(PartitionKey, i64), OpenTxn>,
    /// Transactions open before the commit (given to [`plan`]) that it closed.
    pub closed: BTreeSet<(PartitionKey, i64)>,
    /// The aborted ranges to record, in the order of their markers.
    pub aborted: Vec<AbortedTxn>,
}

impl Plan {
    /// Bytes of object the committed batches use (the rest of the object is garbage from birth).
    pub fn used_bytes(&self) -> u64 {
        self.rows.iter().map(|r| u64::from(r.byte_size)).sum()
    }
}

/// The open transactions of every locked partition, by producer ID.
pub type OpenTxns = BTreeMap<PartitionKey, BTreeMap<i64, OpenTxn>>;

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

/// What the commit so far knows of the inputs and its own changes.
struct View<'a> {
    logs: &'a BTreeMap<PartitionKey, LogState>,
    producers: &'a HashMap<(PartitionKey, i64), ProducerState>,
    open: &'a OpenTxns,
    now_ms: i64,
}

impl View<'_> {
    fn producer<'p>(
        &'p self,
        out: &'p Plan,
        key: PartitionKey,
        pid: i64,
    ) -> Option<&'p ProducerState> {
        out.producers
            .get(&(key, pid))
            .or_else(|| self.producers.get(&(key, pid)))
    }

    /// Whether the transaction was open before the commit (it has a row).
    fn open_before(&self, key: PartitionKey, pid: i64) -> Option<&OpenTxn> {
        self.open.get(&key).and_then(|m| m.get(&pid))
    }

    /// The producer's open transaction on the partition, after the earlier appends.
    fn open_txn(&self, out: &Plan, key: PartitionKey, pid: i64) -> Option<OpenTxn> {
        if let Some(t) = out.opened.get(&(key, pid)) {
            return Some(*t);
        }
        if out.closed.contains(&(key, pid)) {
            return None;
        }
        self.open_before(key, pid).copied()
    }

    /// The partition's last stable offset, after the earlier appends.
    fn last_stable(&self, out: &Plan, key: PartitionKey, log_start: i64, hw: i64) -> i64 {
        let before = self
            .open
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|(pid, _)| !out.closed.contains(&(key, **pid)))
            .map(|(_, t)| t.first_offset);
        let now = out
            .opened
            .range((key, i64::MIN)..=(key, i64::MAX))
            .map(|(_, t)| t.first_offset);
        before
            .chain(now)
            .min()
            .map_or(hw, |first| first.max(log_start).min(hw))
    }
}

/// Decides a commit. `logs` holds the locked partitions (a partition missing from it does not
/// exist); `producers` the state of the producers the appends name, on their partitions;
/// `open` every open transaction of the locked partitions.
/// Appends are taken in order, each one seeing what the ones before it committed.
pub fn plan(
    logs: &BTreeMap<PartitionKey, LogState>,
    producers: &HashMap<(PartitionKey, i64), ProducerState>,
    open: &OpenTxns,
    appends: &[Append],
    now_ms: i64,
) -> Plan {
    let view = View {
        logs,
        producers,
        open,
        now_ms,
    };
    let mut out = Plan::default();
    for append in appends {
        let verdict = plan_one(&view, append, &mut out);
        out.verdicts.push(verdict);
    }
    out
}

fn plan_one(view: &View<'_>, append: &Append, out: &mut Plan) -> Verdict {
    let key = append.key;
    let Some(log) = out.logs.get(&key).or_else(|| view.logs.get(&key)).copied() else {
        return Verdict::UnknownPartition;
    };
    if append.batches.is_empty() || append.batches.iter().any(|b| b.record_count <= 0) {
        return Verdict::Invalid;
    }
    let is_marker = |b: &BatchInfo| matches!(b.txn, TxnKind::Marker { .. });
    match append.batches.as_slice() {
        [marker] if is_marker(marker) => plan_marker(view, key, log, marker, out),
        batches if batches.iter().any(is_marker) => Verdict::Invalid,
        batches => plan_data(view, key, log, batches, out),
    }
}

fn row(key: PartitionKey, batch: &BatchInfo, base_offset: i64, now_ms: i64) -> BatchRow {
    BatchRow {
        key,
        base_offset,
        last_offset: base_offset + i64::from(batch.record_count) - 1,
        byte_offset: batch.byte_offset,
        byte_size: batch.byte_size,
        max_timestamp: batch.max_timestamp,
        log_append_time: if batch.log_append_time { now_ms } else { -1 },
        producer_id: batch.producer_id,
        producer_epoch: batch.producer_epoch,
        base_sequence: batch.base_sequence,
        last_sequence: batch.last_sequence,
    }
}

/// Records the appended rows and the log's new state (its last stable offset after the
/// transactions the append opened or closed).
fn advance(view: &View<'_>, key: PartitionKey, log: LogState, rows: Vec<BatchRow>, out: &mut Plan) {
    let added: i64 = rows.iter().map(|r| i64::from(r.byte_size)).sum();
    let hw = rows
        .last()
        .map_or(log.high_watermark, |r| r.last_offset + 1);
    out.logs.insert(
        key,
        LogState {
            log_start: log.log_start,
            high_watermark: hw,
            last_stable: view.last_stable(out, key, log.log_start, hw),
            size_bytes: log.size_bytes + added,
        },
    );
    out.rows.extend(rows);
}

fn plan_data(
    view: &View<'_>,
    key: PartitionKey,
    log: LogState,
    batches: &[BatchInfo],
    out: &mut Plan,
) -> Verdict {
    if batches
        .iter()
        .any(|b| b.txn == TxnKind::Data && b.producer_id < 0)
    {
        return Verdict::Invalid;
    }
    // Check every batch against the producer states as the earlier batches of this append
    // leave them; only a clean append changes anything.
    let mut staged: BTreeMap<i64, ProducerState> = BTreeMap::new();
    let mut opened: BTreeMap<i64, OpenTxn> = BTreeMap::new();
    let mut next = log.high_watermark;
    let mut rows = Vec::with_capacity(batches.len());
    for batch in batches {
        let pid = batch.producer_id;
        let current = staged.get(&pid).or_else(|| view.producer(out, key, pid));
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
        if pid >= 0 {
            let mut state = current.cloned().unwrap_or_default();
            if current.is_none() {
                state.epoch = batch.producer_epoch;
            }
            remember(&mut state, batch, next, view.now_ms);
            staged.insert(pid, state);
        }
        if batch.txn == TxnKind::Data
            && !opened.contains_key(&pid)
            && view.open_txn(out, key, pid).is_none()
        {
            opened.insert(
                pid,
                OpenTxn {
                    producer_epoch: batch.producer_epoch,
                    first_offset: next,
                    opened_ms: view.now_ms,
                },
            );
        }
        let r = row(key, batch, next, view.now_ms);
        next = r.last_offset + 1;
        rows.push(r);
    }
    for (pid, state) in staged {
        out.producers.insert((key, pid), state);
    }
    for (pid, txn) in opened {
        out.opened.insert((key, pid), txn);
    }
    advance(view, key, log, rows, out);
    Verdict::Appended {
        base_offset: log.high_watermark,
        last_offset: next - 1,
    }
}

fn plan_marker(
    view: &View<'_>,
    key: PartitionKey,
    log: LogState,
    marker: &BatchInfo,
    out: &mut Plan,
) -> Verdict {
    let TxnKind::Marker { commit } = marker.txn else {
        return Verdict::Invalid;
    };
    let pid = marker.producer_id;
    if pid < 0 || marker.record_count != 1 {
        return Verdict::Invalid;
    }
    let state = view.producer(out, key, pid).cloned();
    let txn = view.open_txn(out, key, pid);
    let newest = state
        .as_ref()
        .map(|s| s.epoch)
        .into_iter()
        .chain(txn.map(|t| t.producer_epoch))
        .max();
    if newest.is_some_and(|epoch| epoch > marker.producer_epoch) {
        return Verdict::InvalidProducerEpoch;
    }
    let Some(txn) = txn else {
        return Verdict::NothingOpen;
    };
    let offset = log.high_watermark;

    let mut state = state.unwrap_or(ProducerState {
        epoch: marker.producer_epoch,
        recent: Vec::new(),
        last_append_ms: view.now_ms,
    });
    if marker.producer_epoch > state.epoch {
        state.epoch = marker.producer_epoch;
        state.recent.clear();
    }
    state.last_append_ms = state.last_append_ms.max(view.now_ms);
    out.producers.insert((key, pid), state);

    out.opened.remove(&(key, pid));
    if view.open_before(key, pid).is_some() {
        out.closed.insert((key, pid));
    }
    if !commit {
        out.aborted.push(AbortedTxn {
            key,
            producer_id: pid,
            first_offset: txn.first_offset,
            last_offset: offset,
        });
    }
    advance(
        view,
        key,
        log,
        vec![row(key, marker, offset, view.now_ms)],
        out,
    );
    Verdict::Appended {
        base_offset: offset,
        last_offset: offset,
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
            txn: TxnKind::None,
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
                        last_stable: hw,
                        size_bytes: 0,
                    },
                )
            })
            .collect()
    }

    fn none() -> BTreeMap<PartitionKey, BTreeMap<i64, OpenTxn>> {
        BTreeMap::new()
    }

    fn one(p: i32, b: BatchInfo) -> Append {
        Append {
            key: key(p),
            batches: vec![b],
        }
    }

    fn data(pid: i64, epoch: i16, seq: i32, count: i32) -> BatchInfo {
        BatchInfo {
            txn: TxnKind::Data,
            ..batch(pid, epoch, seq, count)
        }
    }

    fn marker(pid: i64, epoch: i16, commit: bool) -> BatchInfo {
        BatchInfo {
            txn: TxnKind::Marker { commit },
            ..batch(pid, epoch, -1, 1)
        }
    }

    fn open_at(entries: &[(i32, i64, i16, i64)]) -> OpenTxns {
        let mut open = OpenTxns::new();
        for &(p, pid, epoch, first) in entries {
            open.entry(key(p)).or_default().insert(
                pid,
                OpenTxn {
                    producer_epoch: epoch,
                    first_offset: first,
                    opened_ms: 0,
                },
            );
        }
        open
    }

    fn state(epoch: i16, seqs: &[(i32, i64)]) -> ProducerState {
        ProducerState {
            epoch,
            recent: seqs
                .iter()
                .map(|&(seq, offset)| RecentBatch {
                    first_seq: seq,
                    last_seq: seq,
                    base_offset: offset,
                    last_offset: offset,
                })
                .collect(),
            last_append_ms: 0,
        }
    }

    /// Applies a plan to the inputs, as the commit's transaction does.
    fn apply(
        plan: &Plan,
        logs: &mut BTreeMap<PartitionKey, LogState>,
        producers: &mut HashMap<(PartitionKey, i64), ProducerState>,
        open: &mut OpenTxns,
    ) {
        logs.extend(plan.logs.clone());
        producers.extend(plan.producers.clone());
        for (k, pid) in &plan.closed {
            let removed = open.get_mut(k).and_then(|m| m.remove(pid));
            assert!(removed.is_some(), "closed a transaction that had no row");
        }
        for ((k, pid), t) in &plan.opened {
            let before = open.entry(*k).or_default().insert(*pid, *t);
            assert!(before.is_none(), "opened a transaction that had a row");
        }
    }

    fn appended(base_offset: i64, last_offset: i64) -> Verdict {
        Verdict::Appended {
            base_offset,
            last_offset,
        }
    }

    #[test]
    fn the_first_transactional_batch_opens_the_transaction() {
        let l = logs(&[(0, 10)]);
        let p = plan(
            &l,
            &HashMap::new(),
            &none(),
            &[one(0, data(5, 0, 0, 3)), one(0, data(5, 0, 3, 2))],
            7,
        );
        assert_eq!(p.verdicts, vec![appended(10, 12), appended(13, 14)]);
        assert_eq!(
            p.opened,
            BTreeMap::from([(
                (key(0), 5),
                OpenTxn {
                    producer_epoch: 0,
                    first_offset: 10,
                    opened_ms: 7
                }
            )])
        );
        assert!(p.closed.is_empty() && p.aborted.is_empty());
        assert_eq!(p.logs[&key(0)].high_watermark, 15);
        assert_eq!(p.logs[&key(0)].last_stable, 10, "held at the first offset");
        // The transaction's next batch, in a later commit, opens nothing more.
        let producers: HashMap<_, _> = p.producers.clone().into_iter().collect();
        let open = open_at(&[(0, 5, 0, 10)]);
        let later = plan(&p.logs, &producers, &open, &[one(0, data(5, 0, 5, 1))], 8);
        assert_eq!(later.verdicts, vec![appended(15, 15)]);
        assert!(later.opened.is_empty());
        assert_eq!(later.logs[&key(0)].last_stable, 10);
        assert_eq!(later.logs[&key(0)].high_watermark, 16);
    }

    #[test]
    fn several_transactional_batches_in_one_append_open_once() {
        let p = plan(
            &logs(&[(0, 4)]),
            &HashMap::new(),
            &none(),
            &[Append {
                key: key(0),
                batches: vec![data(5, 0, 0, 2), data(5, 0, 2, 2), data(6, 1, 0, 1)],
            }],
            1,
        );
        assert_eq!(p.verdicts, vec![appended(4, 8)]);
        let firsts: Vec<_> = p
            .opened
            .iter()
            .map(|((_, pid), t)| (*pid, t.first_offset, t.producer_epoch))
            .collect();
        assert_eq!(firsts, vec![(5, 4, 0), (6, 8, 1)]);
        assert_eq!(p.logs[&key(0)].last_stable, 4);
    }

    #[test]
    fn a_commit_marker_closes_the_transaction_and_releases_the_stable_offset() {
        let mut l = logs(&[(0, 20)]);
        l.get_mut(&key(0)).unwrap().last_stable = 12;
        let mut producers = HashMap::new();
        producers.insert((key(0), 5), state(2, &[(0, 12), (1, 19)]));
        let open = open_at(&[(0, 5, 2, 12)]);
        let p = plan(&l, &producers, &open, &[one(0, marker(5, 2, true))], 9);
        assert_eq!(p.verdicts, vec![appended(20, 20)]);
        assert_eq!(p.closed, BTreeSet::from([(key(0), 5)]));
        assert!(p.opened.is_empty() && p.aborted.is_empty());
        let log = p.logs[&key(0)];
        assert_eq!((log.high_watermark, log.last_stable), (21, 21));
        assert_eq!(log.size_bytes, 100);
        assert_eq!(p.rows.len(), 1);
        let r = p.rows[0];
        assert_eq!((r.base_offset, r.last_offset), (20, 20));
        assert_eq!((r.producer_id, r.producer_epoch), (5, 2));
        assert_eq!((r.base_sequence, r.last_sequence), (-1, -1));
        // Markers are not remembered as batches: the data batches still answer retries.
        let s = &p.producers[&(key(0), 5)];
        assert_eq!((s.epoch, s.recent.len(), s.last_append_ms), (2, 2, 9));
    }

    #[test]
    fn an_abort_marker_closes_the_transaction_and_records_its_range() {
        let mut producers = HashMap::new();
        producers.insert((key(0), 5), state(0, &[(0, 3)]));
        let open = open_at(&[(0, 5, 0, 3)]);
        let p = plan(
            &logs(&[(0, 8)]),
            &producers,
            &open,
            &[one(0, marker(5, 0, false))],
            1,
        );
        assert_eq!(p.verdicts, vec![appended(8, 8)]);
        assert_eq!(p.closed, BTreeSet::from([(key(0), 5)]));
        assert_eq!(
            p.aborted,
            vec![AbortedTxn {
                key: key(0),
                producer_id: 5,
                first_offset: 3,
                last_offset: 8
            }]
        );
        assert_eq!(p.logs[&key(0)].last_stable, 9);
    }

    #[test]
    fn a_marker_with_nothing_open_writes_nothing() {
        let mut producers = HashMap::new();
        producers.insert((key(0), 5), state(0, &[(0, 3)]));
        let l = logs(&[(0, 8)]);
        for commit in [true, false] {
            let p = plan(&l, &producers, &none(), &[one(0, marker(5, 0, commit))], 1);
            assert_eq!(p.verdicts, vec![Verdict::NothingOpen]);
            assert!(p.rows.is_empty() && p.logs.is_empty() && p.producers.is_empty());
            assert!(p.closed.is_empty() && p.aborted.is_empty() && p.opened.is_empty());
        }
        // Another producer's open transaction is not this producer's.
        let open = open_at(&[(0, 6, 0, 2)]);
        let p = plan(&l, &producers, &open, &[one(0, marker(5, 0, true))], 1);
        assert_eq!(p.verdicts, vec![Verdict::NothingOpen]);
        // Nor is one on another partition; and a producer the partition never saw.
        let p = plan(
            &logs(&[(0, 8), (1, 0)]),
            &producers,
            &open_at(&[(1, 5, 0, 0)]),
            &[one(0, marker(5, 0, true)), one(0, marker(9, 0, false))],
            1,
        );
        assert_eq!(p.verdicts, vec![Verdict::NothingOpen, Verdict::NothingOpen]);
        // A retried marker after the one that closed the transaction.
        let open = open_at(&[(0, 5, 0, 3)]);
        let p = plan(
            &l,
            &producers,
            &open,
            &[one(0, marker(5, 0, false)), one(0, marker(5, 0, false))],
            1,
        );
        assert_eq!(p.verdicts, vec![appended(8, 8), Verdict::NothingOpen]);
        assert_eq!(p.aborted.len(), 1);
        assert_eq!(p.logs[&key(0)].high_watermark, 9);
    }

    #[test]
    fn a_marker_from_an_older_epoch_is_fenced() {
        let mut producers = HashMap::new();
        producers.insert((key(0), 5), state(3, &[(0, 3)]));
        let open = open_at(&[(0, 5, 3, 3)]);
        let l = logs(&[(0, 8)]);
        let p = plan(&l, &producers, &open, &[one(0, marker(5, 2, true))], 1);
        assert_eq!(p.verdicts, vec![Verdict::InvalidProducerEpoch]);
        assert!(p.rows.is_empty() && p.logs.is_empty() && p.closed.is_empty());
        // Fenced before anything is found open, too.
        let p = plan(&l, &producers, &none(), &[one(0, marker(5, 2, false))], 1);
        assert_eq!(p.verdicts, vec![Verdict::InvalidProducerEpoch]);
        // The open transaction's epoch fences as well, without a producer state.
        let p = plan(&l, &HashMap::new(), &open, &[one(0, marker(5, 2, true))], 1);
        assert_eq!(p.verdicts, vec![Verdict::InvalidProducerEpoch]);
        let p = plan(&l, &HashMap::new(), &open, &[one(0, marker(5, 3, true))], 1);
        assert_eq!(p.verdicts, vec![appended(8, 8)]);
        assert_eq!(
            p.producers[&(key(0), 5)],
            ProducerState {
                epoch: 3,
                recent: Vec::new(),
                last_append_ms: 1
            }
        );
    }

    #[test]
    fn a_marker_from_a_newer_epoch_bumps_the_epoch_and_fences_the_old_one() {
        let mut l = logs(&[(0, 8)]);
        let mut producers = HashMap::new();
        producers.insert((key(0), 5), state(3, &[(0, 3), (1, 4)]));
        let mut open = open_at(&[(0, 5, 3, 3)]);
        // The coordinator aborts with a bumped epoch (a producer timed out, or restarted).
        let p = plan(
            &l,
            &producers,
            &open,
            &[
                one(0, marker(5, 4, false)),
                // The old epoch's batch arriving late, in the same commit: fenced.
                one(0, data(5, 3, 2, 1)),
            ],
            1,
        );
        assert_eq!(
            p.verdicts,
            vec![appended(8, 8), Verdict::InvalidProducerEpoch]
        );
        let s = &p.producers[&(key(0), 5)];
        assert_eq!(s.epoch, 4);
        assert!(s.recent.is_empty(), "a newer epoch forgets the old batches");
        assert_eq!(p.aborted.len(), 1);
        apply(&p, &mut l, &mut producers, &mut open);
        // In a later commit: the old epoch's data and markers are fenced; the new epoch writes.
        for b in [data(5, 3, 2, 1), marker(5, 3, true)] {
            let p = plan(&l, &producers, &open, &[one(0, b)], 2);
            assert_eq!(p.verdicts, vec![Verdict::InvalidProducerEpoch], "{b:?}");
        }
        let p = plan(&l, &producers, &open, &[one(0, data(5, 4, 0, 1))], 2);
        assert_eq!(p.verdicts, vec![appended(9, 9)]);
        assert_eq!(p.opened[&(key(0), 5)].producer_epoch, 4);
        assert_eq!(p.logs[&key(0)].last_stable, 9);
    }

    #[test]
    fn the_stable_offset_follows_the_earliest_of_interleaved_transactions() {
        let mut l = logs(&[(0, 10)]);
        let mut producers = HashMap::new();
        let mut open = OpenTxns::new();
        let mut step = |append: Append| {
            let p = plan(&l, &producers, &open, &[append], 1);
            apply(&p, &mut l, &mut producers, &mut open);
            let log = l[&key(0)];
            (p.verdicts[0], log.last_stable, log.high_watermark)
        };
        assert_eq!(step(one(0, data(5, 0, 0, 2))), (appended(10, 11), 10, 12));
        assert_eq!(step(one(0, data(6, 0, 0, 1))), (appended(12, 12), 10, 13));
        assert_eq!(
            step(one(0, batch(-1, -1, -1, 1))),
            (appended(13, 13), 10, 14)
        );
        assert_eq!(step(one(0, data(5, 0, 2, 1))), (appended(14, 14), 10, 15));
        // The earliest commits: the stable offset moves to the other one's first offset.
        assert_eq!(step(one(0, marker(5, 0, true))), (appended(15, 15), 12, 16));
        // Producer 5 starts again, after producer 6.
        assert_eq!(step(one(0, data(5, 0, 3, 1))), (appended(16, 16), 12, 17));
        assert_eq!(
            step(one(0, marker(6, 0, false))),
            (appended(17, 17), 16, 18)
        );
        assert_eq!(step(one(0, marker(5, 0, true))), (appended(18, 18), 19, 19));
        assert!(open.values().all(BTreeMap::is_empty));
    }

    #[test]
    fn the_stable_offset_stays_at_or_above_the_log_start() {
        let mut l = logs(&[(0, 10)]);
        let log = l.get_mut(&key(0)).unwrap();
        log.log_start = 6;
        log.last_stable = 6;
        let open = open_at(&[(0, 5, 0, 2)]);
        let p = plan(
            &l,
            &HashMap::new(),
            &open,
            &[one(0, batch(-1, -1, -1, 1))],
            1,
        );
        assert_eq!(p.logs[&key(0)].last_stable, 6);
    }

    #[test]
    fn a_marker_must_be_alone_in_its_append() {
        let mut producers = HashMap::new();
        producers.insert((key(0), 5), state(0, &[(0, 3)]));
        let open = open_at(&[(0, 5, 0, 3)]);
        let l = logs(&[(0, 8)]);
        let refused = [
            vec![data(5, 0, 1, 1), marker(5, 0, true)],
            vec![marker(5, 0, true), data(5, 0, 1, 1)],
            vec![marker(5, 0, true), marker(5, 0, true)],
            vec![batch(-1, -1, -1, 1), marker(5, 0, false)],
            // One record, a producer ID: a transactional batch has one too.
            vec![BatchInfo {
                record_count: 2,
                ..marker(5, 0, true)
            }],
            vec![marker(-1, -1, true)],
            vec![data(-1, -1, -1, 1)],
        ];
        for batches in refused {
            let p = plan(
                &l,
                &producers,
                &open,
                &[Append {
                    key: key(0),
                    batches: batches.clone(),
                }],
                1,
            );
            assert_eq!(p.verdicts, vec![Verdict::Invalid], "{batches:?}");
            assert_eq!(
                p,
                Plan {
                    verdicts: vec![Verdict::Invalid],
                    ..Plan::default()
                }
            );
        }
    }

    #[test]
    fn appends_see_the_transactions_earlier_appends_opened_and_closed() {
        let l = logs(&[(0, 0), (1, 0)]);
        let open = open_at(&[(1, 5, 0, 0)]);
        let mut producers = HashMap::new();
        producers.insert((key(1), 5), state(0, &[(0, 0)]));
        let p = plan(
            &l,
            &producers,
            &open,
            &[
                // Opened and aborted within the commit: no row to write or delete.
                one(0, data(5, 0, 0, 2)),
                one(0, marker(5, 0, false)),
                // Opened again after the marker.
                one(0, data(5, 0, 2, 1)),
                // Open before the commit, closed, and opened again.
                one(1, marker(5, 0, true)),
                one(1, data(5, 0, 1, 1)),
                one(1, data(5, 0, 2, 1)),
            ],
            3,
        );
        assert_eq!(
            p.verdicts,
            vec![
                appended(0, 1),
                appended(2, 2),
                appended(3, 3),
                appended(0, 0),
                appended(1, 1),
                appended(2, 2)
            ]
        );
        assert_eq!(
            p.aborted,
            vec![AbortedTxn {
                key: key(0),
                producer_id: 5,
                first_offset: 0,
                last_offset: 2
            }]
        );
        assert_eq!(p.closed, BTreeSet::from([(key(1), 5)]));
        let opened: Vec<_> = p
            .opened
            .iter()
            .map(|((k, pid), t)| (k.partition, *pid, t.first_offset))
            .collect();
        assert_eq!(opened, vec![(0, 5, 3), (1, 5, 1)]);
        assert_eq!(p.logs[&key(0)].last_stable, 3);
        assert_eq!(p.logs[&key(1)].last_stable, 1);
        // Applied in order (closed rows deleted, then opened rows inserted), the rows agree.
        let (mut l2, mut producers2, mut open2) = (l.clone(), producers.clone(), open.clone());
        apply(&p, &mut l2, &mut producers2, &mut open2);
        assert_eq!(open2[&key(1)][&5].first_offset, 1);
    }

    #[test]
    fn a_retried_transactional_batch_is_a_duplicate_and_opens_nothing() {
        let mut producers = HashMap::new();
        producers.insert((key(0), 5), state(0, &[(0, 3)]));
        let p = plan(
            &logs(&[(0, 8)]),
            &producers,
            &none(),
            &[one(0, data(5, 0, 0, 1))],
            1,
        );
        assert_eq!(
            p.verdicts,
            vec![Verdict::Duplicate {
                base_offset: 3,
                last_offset: 3
            }]
        );
        assert!(p.opened.is_empty() && p.logs.is_empty());
    }

    #[test]
    fn non_transactional_batches_keep_the_stable_offset_at_the_high_watermark() {
        let p = plan(
            &logs(&[(0, 3)]),
            &HashMap::new(),
            &none(),
            &[one(0, batch(5, 0, 0, 2)), one(0, batch(-1, -1, -1, 1))],
            1,
        );
        assert_eq!(p.logs[&key(0)].last_stable, 6);
        assert!(p.opened.is_empty() && p.closed.is_empty() && p.aborted.is_empty());
    }

    #[test]
    fn offsets_continue_the_high_watermark_per_partition() {
        let plan = plan(
            &logs(&[(0, 10), (1, 0)]),
            &HashMap::new(),
            &none(),
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
            &none(),
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
            &none(),
            &[one(0, batch(5, 0, 0, 4))],
            1,
        );
        let producers: HashMap<_, _> = first.producers.clone().into_iter().collect();
        let again = plan(
            &first.logs,
            &producers,
            &none(),
            &[one(0, batch(5, 0, 0, 4))],
            2,
        );
        assert_eq!(
            again.verdicts,
            vec![Verdict::Duplicate {
                base_offset: 0,
                last_offset: 3
            }]
        );
        assert!(again.rows.is_empty());
        let next = plan(
            &first.logs,
            &producers,
            &none(),
            &[one(0, batch(5, 0, 4, 1))],
            3,
        );
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
            &none(),
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
        let v = |b| plan(&l, &producers, &none(), &[one(0, b)], 1).verdicts[0];
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
        let p1 = plan(
            &l,
            &HashMap::new(),
            &none(),
            &[one(0, batch(5, 0, 0, 1))],
            1,
        );
        let producers: HashMap<_, _> = p1.producers.clone().into_iter().collect();
        let p2 = plan(
            &p1.logs,
            &producers,
            &none(),
            &[one(0, batch(5, 1, 0, 1))],
            2,
        );
        let state = &p2.producers[&(key(0), 5)];
        assert_eq!(state.epoch, 1);
        assert_eq!(state.recent.len(), 1);
        assert_eq!(state.recent[0].base_offset, 1);
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        let l = logs(&[(0, 0)]);
        let p1 = plan(
            &l,
            &HashMap::new(),
            &none(),
            &[one(0, batch(5, 0, i32::MAX, 1))],
            1,
        );
        let producers: HashMap<_, _> = p1.producers.clone().into_iter().collect();
        let p2 = plan(
            &p1.logs,
            &producers,
            &none(),
            &[one(0, batch(5, 0, 0, 1))],
            2,
        );
        assert!(matches!(p2.verdicts[0], Verdict::Appended { .. }));
    }

    #[test]
    fn only_the_last_five_batches_count_as_duplicates() {
        let mut l = logs(&[(0, 0)]);
        let mut producers = HashMap::new();
        for i in 0..6 {
            let p = plan(&l, &producers, &none(), &[one(0, batch(5, 0, i, 1))], 1);
            l.extend(p.logs.clone());
            producers.extend(p.producers.clone());
        }
        assert_eq!(producers[&(key(0), 5)].recent.len(), RECENT_BATCHES);
        // Sequence 0 fell out of the window: it is now out of order, not a duplicate.
        let p = plan(&l, &producers, &none(), &[one(0, batch(5, 0, 0, 1))], 1);
        assert_eq!(p.verdicts[0], Verdict::OutOfOrderSequence);
        let p = plan(&l, &producers, &none(), &[one(0, batch(5, 0, 1, 1))], 1);
        assert!(matches!(p.verdicts[0], Verdict::Duplicate { .. }));
    }

    #[test]
    fn an_append_with_a_bad_batch_changes_nothing() {
        let plan = plan(
            &logs(&[(0, 0)]),
            &HashMap::new(),
            &none(),
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
        let plan = plan(&logs(&[(0, 0)]), &HashMap::new(), &none(), &[one(0, b)], 42);
        assert_eq!(plan.rows[0].log_append_time, 42);
    }
}
