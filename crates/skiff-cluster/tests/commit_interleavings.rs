//! Property tests of the commit rules: several brokers buffer appends from several idempotent
//! producers (retries included, through any broker) and commit in any interleaving, one commit
//! at a time as PostgreSQL's row locks serialize them. Whatever the order: each partition's
//! offsets are contiguous from 0, no producer batch is stored twice, each producer's stored
//! sequences are consecutive, and every acknowledged batch is stored at the offsets its answer
//! gave. A second property does the same with transactions: markers, aborts, epoch bumps,
//! and the last stable offset.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use skiff_cluster::commit::{
    Append, BatchInfo, LogState, OpenTxns, PartitionKey, ProducerState, TxnKind, Verdict, plan,
};
use uuid::Uuid;

const BROKERS: usize = 3;
const PRODUCERS: usize = 4;
const PARTITIONS: i32 = 2;

#[derive(Debug, Clone)]
enum Op {
    /// Producer `p` sends its next batch of `count` records to `partition` through `broker`.
    Send {
        p: usize,
        broker: usize,
        partition: i32,
        count: i32,
    },
    /// Producer `p` resends one of its earlier batches (`back` sends ago) through `broker`.
    Retry {
        p: usize,
        broker: usize,
        back: usize,
    },
    /// `broker` commits everything it buffered.
    Commit { broker: usize },
    /// Producer `p` bumps its epoch (a new session after a fatal error): sequences restart.
    Bump { p: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..PRODUCERS, 0..BROKERS, 0..PARTITIONS, 1..4i32)
            .prop_map(|(p, broker, partition, count)| Op::Send { p, broker, partition, count }),
        2 => (0..PRODUCERS, 0..BROKERS, 0..6usize).prop_map(|(p, broker, back)| Op::Retry { p, broker, back }),
        3 => (0..BROKERS).prop_map(|broker| Op::Commit { broker }),
        1 => (0..PRODUCERS).prop_map(|p| Op::Bump { p }),
    ]
}

fn key(partition: i32) -> PartitionKey {
    PartitionKey {
        topic_id: Uuid::from_u128(1),
        partition,
    }
}

/// (producer ID, epoch, partition).
type ProducerOnPartition = (i64, i16, i32);
/// (base offset, base sequence, last sequence) of a stored batch.
type StoredSequence = (i64, i32, i32);

#[derive(Debug, Clone, Copy)]
struct Sent {
    partition: i32,
    batch: BatchInfo,
}

/// Producer `p`'s batch of `count` records from sequence `seq` at `epoch`.
fn sent_batch(p: usize, epoch: i16, seq: i32, count: i32, txn: TxnKind) -> BatchInfo {
    BatchInfo {
        byte_offset: 0,
        byte_size: 10,
        record_count: count,
        producer_id: p as i64,
        producer_epoch: epoch,
        base_sequence: seq,
        last_sequence: seq + count - 1,
        max_timestamp: 0,
        log_append_time: false,
        txn,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn any_interleaving_keeps_the_log_whole(ops in proptest::collection::vec(op(), 1..80)) {
        let mut logs: BTreeMap<PartitionKey, LogState> = (0..PARTITIONS)
            .map(|p| (key(p), LogState { log_start: 0, high_watermark: 0, last_stable: 0, size_bytes: 0 }))
            .collect();
        let mut producers: HashMap<(PartitionKey, i64), ProducerState> = HashMap::new();
        // Per producer: epoch, next sequence per partition, what it sent.
        let mut epoch = [0i16; PRODUCERS];
        let mut next_seq: HashMap<(usize, i32), i32> = HashMap::new();
        let mut sent: Vec<Vec<Sent>> = vec![Vec::new(); PRODUCERS];
        let mut buffers: Vec<Vec<Sent>> = vec![Vec::new(); BROKERS];
        let mut rows = Vec::new();
        let mut acked: Vec<(Sent, i64, i64)> = Vec::new();

        let mut ops = ops;
        ops.extend((0..BROKERS).map(|broker| Op::Commit { broker }));
        for op in ops {
            match op {
                Op::Send { p, broker, partition, count } => {
                    let seq = next_seq.entry((p, partition)).or_insert(0);
                    let batch = sent_batch(p, epoch[p], *seq, count, TxnKind::None);
                    *seq += count;
                    let s = Sent { partition, batch };
                    sent[p].push(s);
                    buffers[broker].push(s);
                }
                Op::Retry { p, broker, back } => {
                    if let Some(s) = sent[p].iter().rev().nth(back).copied() {
                        buffers[broker].push(s);
                    }
                }
                Op::Bump { p } => {
                    epoch[p] += 1;
                    next_seq.retain(|(q, _), _| *q != p);
                }
                Op::Commit { broker } => {
                    let pending = std::mem::take(&mut buffers[broker]);
                    let appends: Vec<Append> = pending
                        .iter()
                        .map(|s| Append { key: key(s.partition), batches: vec![s.batch] })
                        .collect();
                    let out = plan(&logs, &producers, &OpenTxns::new(), &appends, 0);
                    prop_assert_eq!(out.verdicts.len(), appends.len());
                    for (s, v) in pending.iter().zip(&out.verdicts) {
                        match *v {
                            Verdict::Appended { base_offset, last_offset }
                            | Verdict::Duplicate { base_offset, last_offset } => {
                                prop_assert_eq!(last_offset - base_offset + 1, i64::from(s.batch.record_count));
                                acked.push((*s, base_offset, last_offset));
                            }
                            Verdict::OutOfOrderSequence | Verdict::InvalidProducerEpoch => {}
                            other => prop_assert!(false, "unexpected verdict {:?}", other),
                        }
                    }
                    logs.extend(out.logs);
                    producers.extend(out.producers);
                    rows.extend(out.rows);
                }
            }
        }

        // Offsets contiguous from 0 up to the high watermark, per partition.
        for p in 0..PARTITIONS {
            let mut mine: Vec<_> = rows.iter().filter(|r| r.key == key(p)).collect();
            mine.sort_by_key(|r| r.base_offset);
            let mut next = 0;
            for r in &mine {
                prop_assert_eq!(r.base_offset, next);
                next = r.last_offset + 1;
            }
            prop_assert_eq!(next, logs[&key(p)].high_watermark);
            // Without transactions, everything is stable.
            prop_assert_eq!(logs[&key(p)].last_stable, next);
        }
        // No producer batch twice; each producer's sequences consecutive in offset order.
        let mut seen = std::collections::HashSet::new();
        let mut by_producer: BTreeMap<ProducerOnPartition, Vec<StoredSequence>> = BTreeMap::new();
        for r in &rows {
            prop_assert!(seen.insert((r.producer_id, r.producer_epoch, r.key, r.base_sequence)),
                "batch stored twice: {:?}", r);
            by_producer
                .entry((r.producer_id, r.producer_epoch, r.key.partition))
                .or_default()
                .push((r.base_offset, r.base_sequence, r.last_sequence));
        }
        for list in by_producer.values_mut() {
            list.sort();
            for pair in list.windows(2) {
                prop_assert_eq!(pair[1].1, pair[0].2 + 1, "sequence gap or reorder: {:?}", list);
            }
        }
        // Every acknowledged batch is stored where its answer said.
        for (s, base, last) in acked {
            prop_assert!(rows.iter().any(|r| r.key == key(s.partition)
                && r.producer_id == s.batch.producer_id
                && r.producer_epoch == s.batch.producer_epoch
                && r.base_sequence == s.batch.base_sequence
                && r.base_offset == base && r.last_offset == last),
                "acknowledged batch {:?} at {}..{} is not stored there", s, base, last);
        }
    }
}

#[derive(Debug, Clone)]
enum TxnOp {
    /// Producer `p` sends its next batch of `count` records to `partition` through `broker`
    /// (transactional for even `p`).
    Send {
        p: usize,
        broker: usize,
        partition: i32,
        count: i32,
    },
    /// Producer `p` resends one of its earlier batches (`back` sends ago) through `broker`.
    Retry {
        p: usize,
        broker: usize,
        back: usize,
    },
    /// `broker` commits everything it buffered.
    Commit { broker: usize },
    /// Producer `p`'s transaction ends: markers to every partition through `broker`, the epoch
    /// bumped first when `bump` (the coordinator aborting a timed-out transaction).
    End {
        p: usize,
        broker: usize,
        commit: bool,
        bump: bool,
    },
}

fn txn_op() -> impl Strategy<Value = TxnOp> {
    prop_oneof![
        4 => (0..PRODUCERS, 0..BROKERS, 0..PARTITIONS, 1..4i32)
            .prop_map(|(p, broker, partition, count)| TxnOp::Send { p, broker, partition, count }),
        1 => (0..PRODUCERS, 0..BROKERS, 0..6usize)
            .prop_map(|(p, broker, back)| TxnOp::Retry { p, broker, back }),
        3 => (0..BROKERS).prop_map(|broker| TxnOp::Commit { broker }),
        2 => (0..PRODUCERS, 0..BROKERS, any::<bool>(), proptest::bool::weighted(0.2))
            .prop_map(|(p, broker, commit, bump)| TxnOp::End { p, broker, commit, bump }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    /// Transactional and idempotent producers, markers and retries through any broker, in any
    /// interleaving: the plans' opened and closed transactions always agree with the rows
    /// (nothing closed that had no row, nothing opened that had one), each partition's last
    /// stable offset is the first offset of its earliest open transaction (or its high
    /// watermark), and every aborted range runs from a data batch of its producer to its
    /// marker.
    #[test]
    fn transactions_in_any_interleaving_keep_the_stable_offset(
        ops in proptest::collection::vec(txn_op(), 1..80)
    ) {
        let mut logs: BTreeMap<PartitionKey, LogState> = (0..PARTITIONS)
            .map(|p| (key(p), LogState { log_start: 0, high_watermark: 0, last_stable: 0, size_bytes: 0 }))
            .collect();
        let mut producers: HashMap<(PartitionKey, i64), ProducerState> = HashMap::new();
        let mut open = OpenTxns::new();
        let mut epoch = [0i16; PRODUCERS];
        let mut next_seq: HashMap<(usize, i32), i32> = HashMap::new();
        let mut sent: Vec<Vec<Append>> = vec![Vec::new(); PRODUCERS];
        let mut buffers: Vec<Vec<Append>> = vec![Vec::new(); BROKERS];
        let mut rows = Vec::new();
        let mut aborted = Vec::new();
        // The model: each producer's open transaction per partition (its first offset), from
        // the verdicts alone.
        let mut model: BTreeMap<(PartitionKey, i64), i64> = BTreeMap::new();

        let mut ops = ops;
        ops.extend((0..BROKERS).map(|broker| TxnOp::Commit { broker }));
        for op in ops {
            match op {
                TxnOp::Send { p, broker, partition, count } => {
                    let seq = next_seq.entry((p, partition)).or_insert(0);
                    let kind = if p % 2 == 0 { TxnKind::Data } else { TxnKind::None };
                    let batch = sent_batch(p, epoch[p], *seq, count, kind);
                    *seq += count;
                    let a = Append { key: key(partition), batches: vec![batch] };
                    sent[p].push(a.clone());
                    buffers[broker].push(a);
                }
                TxnOp::Retry { p, broker, back } => {
                    if let Some(a) = sent[p].iter().rev().nth(back).cloned() {
                        buffers[broker].push(a);
                    }
                }
                TxnOp::End { p, broker, commit, bump } => {
                    if bump {
                        epoch[p] += 1;
                        next_seq.retain(|(q, _), _| *q != p);
                    }
                    for partition in 0..PARTITIONS {
                        let marker = BatchInfo {
                            base_sequence: -1,
                            last_sequence: -1,
                            ..sent_batch(p, epoch[p], 0, 1, TxnKind::Marker { commit })
                        };
                        buffers[broker].push(Append { key: key(partition), batches: vec![marker] });
                    }
                }
                TxnOp::Commit { broker } => {
                    let appends = std::mem::take(&mut buffers[broker]);
                    let out = plan(&logs, &producers, &open, &appends, 0);
                    prop_assert_eq!(out.verdicts.len(), appends.len());
                    for v in &out.verdicts {
                        prop_assert!(
                            matches!(
                                v,
                                Verdict::Appended { .. }
                                    | Verdict::Duplicate { .. }
                                    | Verdict::OutOfOrderSequence
                                    | Verdict::InvalidProducerEpoch
                                    | Verdict::NothingOpen
                            ),
                            "unexpected verdict {:?}", v
                        );
                    }
                    for (a, v) in appends.iter().zip(&out.verdicts) {
                        let (Some(b), Verdict::Appended { base_offset, .. }) = (a.batches.first(), v) else {
                            continue;
                        };
                        match b.txn {
                            TxnKind::Data => {
                                model.entry((a.key, b.producer_id)).or_insert(*base_offset);
                            }
                            TxnKind::Marker { .. } => {
                                prop_assert!(model.remove(&(a.key, b.producer_id)).is_some());
                            }
                            TxnKind::None => {}
                        }
                    }
                    // As the commit writes them: closed rows deleted, then opened inserted.
                    for (k, pid) in &out.closed {
                        let had = open.get_mut(k).and_then(|m| m.remove(pid));
                        prop_assert!(had.is_some(), "closed {:?} {} without a row", k, pid);
                    }
                    for ((k, pid), t) in &out.opened {
                        let had = open.entry(*k).or_default().insert(*pid, *t);
                        prop_assert!(had.is_none(), "opened {:?} {} over a row", k, pid);
                    }
                    logs.extend(out.logs);
                    producers.extend(out.producers);
                    rows.extend(out.rows);
                    aborted.extend(out.aborted);
                    let rows_open: BTreeMap<(PartitionKey, i64), i64> = open
                        .iter()
                        .flat_map(|(k, m)| m.iter().map(|(pid, t)| ((*k, *pid), t.first_offset)))
                        .collect();
                    prop_assert_eq!(&rows_open, &model);
                    for (k, l) in &logs {
                        let first = open.get(k).into_iter().flatten().map(|(_, t)| t.first_offset).min();
                        prop_assert_eq!(l.last_stable, first.map_or(l.high_watermark, |f| f.max(l.log_start)));
                    }
                }
            }
        }

        // Offsets contiguous per partition.
        for p in 0..PARTITIONS {
            let mut mine: Vec<_> = rows.iter().filter(|r| r.key == key(p)).collect();
            mine.sort_by_key(|r| r.base_offset);
            let mut next = 0;
            for r in &mine {
                prop_assert_eq!(r.base_offset, next);
                next = r.last_offset + 1;
            }
            prop_assert_eq!(next, logs[&key(p)].high_watermark);
        }
        // Open transactions start at a data batch of their producer.
        for (k, txns) in &open {
            for (pid, t) in txns {
                prop_assert!(rows.iter().any(|r| r.key == *k && r.producer_id == *pid
                    && r.base_offset == t.first_offset && r.base_sequence >= 0));
            }
        }
        // Aborted ranges run from a data batch of their producer to its marker.
        for a in &aborted {
            prop_assert!(a.first_offset < a.last_offset);
            prop_assert!(rows.iter().any(|r| r.key == a.key && r.producer_id == a.producer_id
                && r.base_offset == a.first_offset && r.base_sequence >= 0));
            prop_assert!(rows.iter().any(|r| r.key == a.key && r.producer_id == a.producer_id
                && r.base_offset == a.last_offset && r.base_sequence == -1));
        }
    }
}
