//! Random operations by several members against a per-offset model of what the share partition
//! promises: no offset held by two members, delivery counts within the limit, every offset below
//! the start offset done with, the persisted deltas rebuilding the snapshot, and every record
//! done with once the members are gone and the rest is consumed.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

const LOCK: i64 = 100;
/// Three members, and the one that drains the partition at the end.
const MEMBERS: [&str; 4] = ["a", "b", "c", "drain"];
const DRAIN: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        member: usize,
        max_records: u32,
        record_limit: bool,
        reads: usize,
    },
    Ack {
        member: usize,
        /// (which held offset, acknowledge type code).
        picks: Vec<(u16, i8)>,
        per_offset: bool,
        /// An offset the member may not hold.
        stray: Option<i64>,
    },
    /// The clock moves and locks expire.
    Tick(i64),
    Leave(usize),
    /// The broker restarts from the persisted snapshot and deltas.
    Restore,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, 1..20u32, any::<bool>(), 1..4usize).prop_map(
            |(member, max_records, record_limit, reads)| Op::Acquire {
                member,
                max_records,
                record_limit,
                reads,
            }
        ),
        4 => (
            0..3usize,
            proptest::collection::vec((any::<u16>(), 0..5i8), 1..8),
            any::<bool>(),
            proptest::option::weighted(0.2, -3..130i64),
        )
            .prop_map(|(member, picks, per_offset, stray)| Op::Ack {
                member,
                picks,
                per_offset,
                stray,
            }),
        2 => (0..150i64).prop_map(Op::Tick),
        1 => (0..3usize).prop_map(Op::Leave),
        1 => Just(Op::Restore),
    ]
}

/// The partition's log: batches covering `0..len`, and which offsets hold control records.
#[derive(Debug, Clone)]
struct Log {
    batches: Vec<FetchedBatch>,
    control: BTreeSet<i64>,
    len: i64,
}

fn log() -> impl Strategy<Value = Log> {
    proptest::collection::vec(1..8i64, 1..25).prop_flat_map(|sizes| {
        let len: i64 = sizes.iter().sum();
        let control = proptest::collection::vec(proptest::bool::weighted(0.1), len as usize);
        (Just(sizes), control).prop_map(|(sizes, control)| {
            let mut batches = Vec::new();
            let mut base = 0;
            for size in sizes {
                batches.push(FetchedBatch {
                    base_offset: base,
                    last_offset: base + size - 1,
                });
                base += size;
            }
            let control = (0..base)
                .zip(control)
                .filter(|(_, c)| *c)
                .map(|(o, _)| o)
                .collect();
            Log {
                batches,
                control,
                len: base,
            }
        })
    })
}

fn config() -> impl Strategy<Value = ShareConfig> {
    (2..=5i16, 3..=40u32).prop_map(|(limit, locks)| ShareConfig {
        record_lock_duration_ms: LOCK,
        delivery_count_limit: limit,
        max_record_locks: locks,
    })
}

/// What each offset should be, from the calls' results alone.
#[derive(Debug, Default)]
struct Model {
    count: BTreeMap<i64, i16>,
    owner: BTreeMap<i64, (usize, i64)>,
    /// Acknowledged or archived (control records aside).
    done: BTreeSet<i64>,
}

struct Harness {
    config: ShareConfig,
    log: Log,
    sp: SharePartition,
    /// What a reader of the persisted records rebuilds.
    reader: Snapshot,
    model: Model,
    now: i64,
}

impl Harness {
    fn new(config: ShareConfig, log: Log) -> Self {
        let mut sp = SharePartition::new(config, 0);
        let reader = sp.take_snapshot();
        Harness {
            config,
            log,
            sp,
            reader,
            model: Model::default(),
            now: 1_000,
        }
    }

    fn limit(&self) -> i16 {
        self.config.delivery_count_limit
    }

    fn acquire(&mut self, member: usize, max_records: u32, mode: AcquireMode, reads: usize) {
        let fetch_offset = self.sp.next_fetch_offset();
        let first = self
            .log
            .batches
            .partition_point(|b| b.last_offset < fetch_offset);
        let read: Vec<FetchedBatch> = self
            .log
            .batches
            .iter()
            .skip(first)
            .take(reads)
            .copied()
            .collect();
        let skip: Vec<OffsetRange> = match (read.first(), read.last()) {
            (Some(a), Some(b)) => self
                .log
                .control
                .range(a.base_offset..=b.last_offset)
                .map(|&o| OffsetRange::new(o, o))
                .collect(),
            _ => Vec::new(),
        };
        let (start_before, end_before) = (self.sp.start_offset(), self.sp.end_offset());
        let fetch = Fetch {
            fetch_offset,
            batches: &read,
            skip: &skip,
        };
        let got = self
            .sp
            .acquire(MEMBERS[member], &fetch, max_records, mode, self.now);
        // The window reaches at most `max_record_locks` past the start offset with new records;
        // batch-optimized may finish the batch it reached that in.
        let end_after = self.sp.end_offset();
        let reach = start_before + i64::from(self.config.max_record_locks);
        if end_after > end_before {
            assert!(end_before < reach, "new records in a full window");
            let allowed = match mode {
                AcquireMode::RecordLimit => reach,
                AcquireMode::BatchOptimized => self
                    .log
                    .batches
                    .iter()
                    .find(|b| b.last_offset >= reach - 1)
                    .map_or(reach, |b| b.last_offset + 1),
            };
            assert!(
                end_after <= allowed,
                "window end {end_after} past {allowed}"
            );
        }
        let total: u64 = got
            .iter()
            .map(|r| OffsetRange::new(r.first_offset, r.last_offset).len())
            .sum();
        if mode == AcquireMode::RecordLimit {
            assert!(total <= u64::from(max_records), "{got:?} > {max_records}");
        }
        let mut previous_last = start_before - 1;
        for range in &got {
            assert!(range.first_offset > previous_last, "{got:?}");
            assert!(range.first_offset <= range.last_offset, "{got:?}");
            previous_last = range.last_offset;
            let span = read.first().map(|b| b.base_offset).unwrap_or_default()
                ..=read.last().map(|b| b.last_offset).unwrap_or_default();
            for o in range.first_offset..=range.last_offset {
                assert!(span.contains(&o), "{o} not read");
                assert!(
                    !self.log.control.contains(&o),
                    "control record {o} acquired"
                );
                assert!(
                    !self.model.owner.contains_key(&o),
                    "{o} acquired by {} while {:?} holds it",
                    MEMBERS[member],
                    self.model.owner.get(&o)
                );
                assert!(
                    !self.model.done.contains(&o),
                    "{o} delivered after it was done"
                );
                let count = self.model.count.get(&o).copied().unwrap_or(0) + 1;
                assert_eq!(range.delivery_count, count, "delivery count of {o}");
                assert!(count <= self.limit(), "{o} delivered {count} times");
                self.model.count.insert(o, count);
                self.model
                    .owner
                    .insert(o, (member, self.now + self.config.record_lock_duration_ms));
            }
        }
    }

    fn ack(&mut self, member: usize, picks: &[(u16, i8)], per_offset: bool, stray: Option<i64>) {
        let held: Vec<i64> = self
            .model
            .owner
            .iter()
            .filter(|(_, (m, _))| *m == member)
            .map(|(&o, _)| o)
            .collect();
        let mut chosen: BTreeMap<i64, AckType> = BTreeMap::new();
        for &(which, code) in picks {
            if let Some(&o) = held.get(usize::from(which) % held.len().max(1)) {
                chosen.insert(o, AckType::from_code(code).unwrap());
            }
        }
        if let Some(o) = stray {
            chosen.entry(o).or_insert(AckType::Accept);
        }
        // Consecutive offsets make one batch: one type per offset, or split where types change.
        let mut batches: Vec<AckBatch> = Vec::new();
        for (&o, &ack) in &chosen {
            match batches.last_mut() {
                Some(b) if b.last_offset + 1 == o && per_offset => {
                    b.last_offset = o;
                    b.types.push(ack);
                }
                Some(b) if b.last_offset + 1 == o && b.types == [ack] => b.last_offset = o,
                _ => batches.push(AckBatch::uniform(o, o, ack)),
            }
        }
        if batches.is_empty() {
            return;
        }
        let (start, end) = (self.sp.start_offset(), self.sp.end_offset());
        let expect_ok = batches.iter().all(|b| {
            b.last_offset < start
                || (start < end
                    && b.last_offset < end
                    && (b.first_offset.max(start)..=b.last_offset)
                        .all(|o| self.model.owner.get(&o).map(|(m, _)| *m) == Some(member)))
        });
        let before = (self.sp.window(), self.sp.snapshot());
        let result = self.sp.acknowledge(MEMBERS[member], &batches, self.now);
        assert_eq!(result.is_ok(), expect_ok, "{batches:?}: {result:?}");
        if result.is_err() {
            assert_eq!((self.sp.window(), self.sp.snapshot()), before);
            return;
        }
        let limit = self.limit();
        for (o, ack) in chosen {
            if o < start {
                continue;
            }
            match ack {
                AckType::Accept | AckType::Reject | AckType::Gap => {
                    self.model.owner.remove(&o);
                    self.model.done.insert(o);
                }
                AckType::Release => {
                    self.model.owner.remove(&o);
                    if self.model.count.get(&o).copied().unwrap_or(0) >= limit {
                        self.model.done.insert(o);
                    }
                }
                AckType::Renew => {
                    if let Some(held) = self.model.owner.get_mut(&o) {
                        held.1 = self.now + self.config.record_lock_duration_ms;
                    }
                }
            }
        }
    }

    fn tick(&mut self, ms: i64) {
        self.now += ms;
        let released = self.sp.expire_locks(self.now);
        let expired: Vec<i64> = self
            .model
            .owner
            .iter()
            .filter(|(_, (_, deadline))| *deadline <= self.now)
            .map(|(&o, _)| o)
            .collect();
        assert_eq!(released, expired.len() as u64);
        for o in expired {
            self.model.owner.remove(&o);
            if self.model.count.get(&o).copied().unwrap_or(0) >= self.limit() {
                self.model.done.insert(o);
            }
        }
    }

    fn leave(&mut self, member: usize) {
        let released = self.sp.release_member(MEMBERS[member]);
        let held: Vec<i64> = self
            .model
            .owner
            .iter()
            .filter(|(_, (m, _))| *m == member)
            .map(|(&o, _)| o)
            .collect();
        assert_eq!(released, held.len() as u64);
        for o in held {
            self.model.owner.remove(&o);
            if let Some(count) = self.model.count.get_mut(&o) {
                *count -= 1;
            }
        }
    }

    fn restore(&mut self) {
        assert_eq!(self.reader, self.sp.snapshot());
        self.sp = SharePartition::restore(self.config, &self.reader).unwrap();
        // Every lock is gone; a record on its last delivery is archived.
        for (o, _) in std::mem::take(&mut self.model.owner) {
            if self.model.count.get(&o).copied().unwrap_or(0) >= self.limit() {
                self.model.done.insert(o);
            }
        }
    }

    /// Persists what changed and checks the live state against the model.
    fn check(&mut self) {
        if let Some(delta) = self.sp.take_delta() {
            self.reader = apply_delta(&self.reader, &delta);
        }
        assert_eq!(self.reader, self.sp.snapshot(), "snapshot ∘ deltas");
        assert_eq!(self.sp.take_delta(), None);

        let (start, end) = (self.sp.start_offset(), self.sp.end_offset());
        assert!(
            0 <= start && start <= end && end <= self.log.len,
            "{start}..{end}"
        );
        let limit = self.limit();
        let mut acquired = 0u64;
        for entry in self.sp.window() {
            assert!(entry.delivery_count <= limit, "{entry:?}");
            for o in entry.first_offset..=entry.last_offset {
                if self.log.control.contains(&o) {
                    assert!(
                        matches!(entry.state, RecordState::Available | RecordState::Archived),
                        "control record {o}: {entry:?}"
                    );
                    continue;
                }
                assert_eq!(
                    entry.delivery_count,
                    self.model.count.get(&o).copied().unwrap_or(0),
                    "delivery count of {o}"
                );
                let owner = self.model.owner.get(&o);
                let done = self.model.done.contains(&o);
                match &entry.state {
                    RecordState::Acquired {
                        member,
                        deadline_ms,
                    } => {
                        acquired += 1;
                        let (m, deadline) = owner.copied().unwrap_or((usize::MAX, 0));
                        assert_eq!(
                            (member.as_str(), *deadline_ms),
                            (MEMBERS.get(m).copied().unwrap_or("none"), deadline),
                            "owner of {o}"
                        );
                    }
                    RecordState::Available => assert!(owner.is_none() && !done, "{o} available"),
                    RecordState::Acknowledged | RecordState::Archived => {
                        assert!(owner.is_none() && done, "{o} done: {entry:?}");
                    }
                }
            }
        }
        assert_eq!(acquired as usize, self.model.owner.len());
        assert_eq!(self.sp.counts().acquired, acquired);
        for o in 0..start {
            assert!(
                self.log.control.contains(&o) || self.model.done.contains(&o),
                "{o} below the start offset {start} but not done"
            );
        }
        let earliest = self.model.owner.values().map(|(_, d)| *d).min();
        assert_eq!(self.sp.next_deadline(), earliest);
        assert!(SharePartition::restore(self.config, &self.reader).is_ok());
    }

    /// Every member leaves; another one acquires and accepts until the log is consumed.
    fn drain(&mut self) {
        for member in 0..3 {
            self.leave(member);
            self.check();
        }
        let mut rounds = 0;
        while self.sp.start_offset() < self.log.len {
            rounds += 1;
            assert!(rounds <= 4 * self.log.len + 20, "no progress draining");
            let start_before = self.sp.start_offset();
            self.acquire(DRAIN, 50, AcquireMode::BatchOptimized, 3);
            let acks: Vec<AckBatch> = self
                .model
                .owner
                .keys()
                .map(|&o| AckBatch::uniform(o, o, AckType::Accept))
                .collect();
            assert!(!acks.is_empty() || self.sp.start_offset() > start_before);
            if !acks.is_empty() {
                self.sp
                    .acknowledge(MEMBERS[DRAIN], &acks, self.now)
                    .unwrap();
                for ack in acks {
                    self.model.owner.remove(&ack.first_offset);
                    self.model.done.insert(ack.first_offset);
                }
            }
            self.check();
        }
        assert_eq!(self.sp.end_offset(), self.log.len);
        for o in 0..self.log.len {
            assert!(self.log.control.contains(&o) || self.model.done.contains(&o));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_operations_keep_the_share_partition_consistent(
        config in config(),
        log in log(),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut h = Harness::new(config, log);
        for op in ops {
            match op {
                Op::Acquire { member, max_records, record_limit, reads } => {
                    let mode = if record_limit {
                        AcquireMode::RecordLimit
                    } else {
                        AcquireMode::BatchOptimized
                    };
                    h.acquire(member, max_records, mode, reads);
                }
                Op::Ack { member, picks, per_offset, stray } => {
                    h.ack(member, &picks, per_offset, stray);
                }
                Op::Tick(ms) => h.tick(ms),
                Op::Leave(member) => h.leave(member),
                Op::Restore => h.restore(),
            }
            h.check();
        }
        h.drain();
    }
}
