//! [`SharePartition`]: the in-flight window of one share group on one topic partition.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::persist::merged;
use crate::window::{RangeSet, Run, Runs, State};
use crate::{
    AckBatch, AckType, AcquireMode, AcquiredRange, DeliveryState, Delta, Fetch, FetchedBatch,
    OffsetRange, RecordState, ShareConfig, ShareError, Snapshot, StateBatch, WindowCounts,
    WindowEntry, span,
};

/// The records of one share group on one topic partition from the start offset (Kafka's SPSO) to
/// the end offset, each available, acquired by a member, acknowledged or archived, with its
/// delivery count (Kafka's `SharePartition`).
///
/// Every offset from the start offset up to the end offset has a state; the records at the start
/// offset are never acknowledged or archived (those are dropped as the start offset moves past
/// them).
#[derive(Debug, Clone)]
pub struct SharePartition {
    config: ShareConfig,
    state_epoch: i32,
    start: i64,
    /// One past the last offset in the window.
    end: i64,
    runs: Runs,
    /// Offsets whose persisted state changed since the last snapshot or delta was taken.
    dirty: RangeSet,
    /// The start offset the last snapshot or delta carried.
    persisted_start: i64,
}

/// One change an acquisition makes, planned before any is made.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Available records in the window are archived.
    Archive(i64, i64),
    /// Available records in the window are acquired; their delivery count becomes `count`.
    Acquire(i64, i64, i16),
    /// New records past the window's end, archived (never delivered).
    NewArchived(i64, i64),
    /// New records past the window's end, acquired for their first delivery.
    NewAcquired(i64, i64),
}

impl SharePartition {
    /// An empty share partition starting at `start_offset` (where `share.auto.offset.reset`
    /// put it; negative offsets are taken as 0).
    pub fn new(config: ShareConfig, start_offset: i64) -> Self {
        let start = start_offset.max(0);
        SharePartition {
            config,
            state_epoch: 0,
            start,
            end: start,
            runs: Runs::default(),
            dirty: RangeSet::default(),
            persisted_start: start,
        }
    }

    /// The share partition persisted as `snapshot` (Kafka's load from the share coordinator's
    /// `ReadShareGroupState`). No record is acquired after a restore: what was acquired was
    /// persisted as available with its delivery count, so it is delivered again with that
    /// delivery counted, as if its lock had expired, and an available record already at the
    /// delivery count limit is archived. Offsets of the window the snapshot does not mention are
    /// available for a first delivery (Kafka's gap window: they are read from the log again).
    ///
    /// Refused when a batch's first offset is past its last, is below the start offset or the
    /// end of the batch before it, or has a negative delivery count, as Kafka fails such a load.
    pub fn restore(config: ShareConfig, snapshot: &Snapshot) -> Result<Self, ShareError> {
        let invalid = |why: String| Err(ShareError::InvalidSnapshot(why));
        if snapshot.start_offset < 0 {
            return invalid(format!("start offset {}", snapshot.start_offset));
        }
        let mut partition = SharePartition::new(config, snapshot.start_offset);
        partition.state_epoch = snapshot.state_epoch;
        let limit = partition.limit();
        let mut cursor = snapshot.start_offset;
        for batch in &snapshot.batches {
            let (first, last) = (batch.first_offset, batch.last_offset);
            if first > last || last == i64::MAX {
                return invalid(format!("state batch {first}-{last}"));
            }
            if first < cursor {
                return invalid(format!(
                    "state batch {first}-{last} overlaps the offsets before {cursor}"
                ));
            }
            if batch.delivery_count < 0 {
                return invalid(format!(
                    "state batch {first}-{last} has delivery count {}",
                    batch.delivery_count
                ));
            }
            if first > cursor {
                let gap = Run {
                    last: first - 1,
                    state: State::Available,
                    count: 0,
                };
                partition.runs.push(cursor, gap);
                partition.dirty.insert(cursor, first - 1);
            }
            let state = match batch.delivery_state {
                DeliveryState::Available if batch.delivery_count >= limit => {
                    partition.dirty.insert(first, last);
                    State::Archived
                }
                DeliveryState::Available => State::Available,
                DeliveryState::Acknowledged => State::Acknowledged,
                DeliveryState::Archived => State::Archived,
            };
            let run = Run {
                last,
                state,
                count: batch.delivery_count,
            };
            partition.runs.push(first, run);
            cursor = last + 1;
        }
        partition.end = cursor;
        partition.advance_start();
        Ok(partition)
    }

    pub fn config(&self) -> &ShareConfig {
        &self.config
    }

    /// Takes new settings (a group config changed): the record lock duration applies to locks
    /// set from now on, the delivery count limit to records given back from now on, the
    /// record-lock limit to the next acquisition. Nothing already in the window changes.
    pub fn set_config(&mut self, config: ShareConfig) {
        self.config = config;
    }

    /// The share partition start offset (SPSO): every record below it is acknowledged or
    /// archived.
    pub fn start_offset(&self) -> i64 {
        self.start
    }

    /// One past the last record in the window (Kafka's end offset + 1 when the window holds
    /// records; the start offset when it holds none).
    pub fn end_offset(&self) -> i64 {
        self.end
    }

    /// The state epoch persisted with the snapshot (0 for a new share partition).
    pub fn state_epoch(&self) -> i32 {
        self.state_epoch
    }

    /// Where the next log read for this share partition starts: the first available record in
    /// the window, or the window's end.
    pub fn next_fetch_offset(&self) -> i64 {
        self.runs
            .iter()
            .find(|(_, run)| run.state == State::Available)
            .map_or(self.end, |(first, _)| first)
    }

    /// Whether an acquisition could hand out anything: a record in the window is available, or
    /// the window has room for new ones (Kafka's `canAcquireRecords`).
    pub fn can_acquire(&self) -> bool {
        self.next_fetch_offset() < self.end
            || span(self.start, self.end - 1) < u64::from(self.config.max_record_locks)
    }

    /// Hands `member` records of a log read: the available ones in the window and new ones past
    /// its end, each locked to `member` until `now_ms` plus the record lock duration, with its
    /// delivery count raised. Returns them as ranges in offset order, with their delivery count.
    ///
    /// Records fetched with the read's skip ranges, and new offsets between the window's end and
    /// the first batch, are archived instead (never delivered). Limits, as Kafka's:
    ///
    /// - `max_records`: at most that many records in [`AcquireMode::RecordLimit`]; in
    ///   [`AcquireMode::BatchOptimized`], acquisition goes on to the end of the fetched batch
    ///   holding the last record within the limit.
    /// - the record-lock limit: new records are taken while the window reaches less than
    ///   `max_record_locks` past the start offset, with the same rounding per mode; available
    ///   records already in the window are not held back by it.
    /// - delivery throttling: a record delivered at least half the delivery count limit times
    ///   (at least twice) is only delivered first in an acquisition, in a smaller group (half the
    ///   size of its fetched batch, halved again per further delivery), and a record on its last
    ///   delivery is delivered alone, so that one bad record does not exhaust a whole batch.
    pub fn acquire(
        &mut self,
        member: &str,
        fetch: &Fetch<'_>,
        max_records: u32,
        mode: AcquireMode,
        now_ms: i64,
    ) -> Vec<AcquiredRange> {
        let batches = well_formed(fetch.batches);
        let (Some(first_batch), Some(last_batch)) = (batches.first(), batches.last()) else {
            return Vec::new();
        };
        if max_records == 0 {
            return Vec::new();
        }
        let mut plan = Vec::new();

        // Available records between the read's offset and its first batch are gone from the log.
        let base = first_batch.base_offset;
        if fetch.fetch_offset < base && self.start < self.end {
            let from = fetch.fetch_offset.max(self.start);
            let to = (base - 1).min(self.end - 1);
            for (a, b, run) in self.runs.overlapping(from, to) {
                if run.state == State::Available {
                    plan.push(Step::Archive(a, b));
                }
            }
        }

        let mut skip = normalized(fetch.skip);
        let lo = base.max(self.start);
        let scan_from = if lo <= self.end {
            lo
        } else if fetch.fetch_offset <= self.end {
            // The read started within the window and found nothing before `lo`.
            insert_range(&mut skip, self.end, lo - 1);
            self.end
        } else {
            // Nothing is known of the offsets between the window's end and the read.
            lo
        };
        let new_allowed = scan_from <= self.end;

        let hi = last_batch.last_offset;
        let limit = self.limit();
        let threshold = throttle_threshold(limit);
        let max_span = i64::from(self.config.max_record_locks);
        let max_records = i64::from(max_records);
        let mut acquired: i64 = 0;
        let mut hard_stop: Option<i64> = None;
        let mut cursor = scan_from;
        while cursor <= hi {
            let mut piece_last = hi;
            if let Some(h) = hard_stop {
                if cursor > h {
                    break;
                }
                piece_last = piece_last.min(h);
            }
            let (skipped, piece_last) = skip_piece(&skip, cursor, piece_last);
            if cursor < self.end {
                let Some((_, run)) = self.runs.get(cursor) else {
                    break;
                };
                let piece_last = piece_last.min(run.last);
                if run.state == State::Available {
                    if skipped || run.count >= limit {
                        plan.push(Step::Archive(cursor, piece_last));
                    } else if run.count >= threshold {
                        if acquired > 0 {
                            break;
                        }
                        let take = if limit > 2 && run.count == limit - 1 {
                            1
                        } else {
                            let shift = u32::try_from(run.count - threshold + 1).unwrap_or(63);
                            (batch_len(batches, cursor).checked_shr(shift).unwrap_or(0)).max(1)
                        };
                        let take = match mode {
                            AcquireMode::RecordLimit => take.min(max_records),
                            AcquireMode::BatchOptimized => take,
                        };
                        let last = piece_last.min(cursor.saturating_add(take - 1));
                        plan.push(Step::Acquire(cursor, last, run.count + 1));
                        break;
                    } else {
                        let room = if hard_stop.is_some() {
                            i64::MAX
                        } else {
                            max_records - acquired
                        };
                        if room <= 0 {
                            break;
                        }
                        let (last, stop) =
                            take_until(cursor, piece_last, room, mode, batches, &mut hard_stop);
                        plan.push(Step::Acquire(cursor, last, run.count + 1));
                        acquired += last - cursor + 1;
                        if stop {
                            break;
                        }
                    }
                }
                cursor = piece_last + 1;
            } else {
                if !new_allowed {
                    break;
                }
                // New records: the window may reach `max_span` past the start offset. A full
                // window takes none, even to finish a batch begun inside it (Kafka stops at its
                // end offset then).
                let span_room = max_span - (cursor - self.start);
                if cursor == self.end && span_room <= 0 {
                    break;
                }
                if skipped {
                    let last = if hard_stop.is_some() {
                        piece_last
                    } else if span_room <= 0 {
                        break;
                    } else {
                        piece_last.min(cursor.saturating_add(span_room - 1))
                    };
                    plan.push(Step::NewArchived(cursor, last));
                    if last < piece_last {
                        break;
                    }
                    cursor = last + 1;
                } else {
                    let room = if hard_stop.is_some() {
                        i64::MAX
                    } else {
                        span_room.min(max_records - acquired)
                    };
                    if room <= 0 {
                        break;
                    }
                    let (last, stop) =
                        take_until(cursor, piece_last, room, mode, batches, &mut hard_stop);
                    plan.push(Step::NewAcquired(cursor, last));
                    acquired += last - cursor + 1;
                    if stop {
                        break;
                    }
                    cursor = last + 1;
                }
            }
        }
        self.carry_out(&plan, member, now_ms)
    }

    /// Makes the planned changes; returns what was acquired.
    fn carry_out(&mut self, plan: &[Step], member: &str, now_ms: i64) -> Vec<AcquiredRange> {
        let member: Arc<str> = Arc::from(member);
        let deadline_ms = self.deadline(now_ms);
        let mut acquired: Vec<AcquiredRange> = Vec::new();
        let mut handed = |first: i64, last: i64, delivery_count: i16| {
            if let Some(prev) = acquired.last_mut()
                && prev.last_offset.checked_add(1) == Some(first)
                && prev.delivery_count == delivery_count
            {
                prev.last_offset = last;
            } else {
                acquired.push(AcquiredRange {
                    first_offset: first,
                    last_offset: last,
                    delivery_count,
                });
            }
        };
        for step in plan {
            match *step {
                Step::Archive(first, last) => self.change(first, last, |run| {
                    if run.state == State::Available {
                        run.state = State::Archived;
                    }
                }),
                Step::Acquire(first, last, count) => {
                    self.change(first, last, |run| {
                        run.state = State::Acquired {
                            member: member.clone(),
                            deadline_ms,
                        };
                        run.count = count;
                    });
                    handed(first, last, count);
                }
                Step::NewArchived(first, last) => self.append(first, last, State::Archived, 0),
                Step::NewAcquired(first, last) => {
                    let state = State::Acquired {
                        member: member.clone(),
                        deadline_ms,
                    };
                    self.append(first, last, state, 1);
                    handed(first, last, 1);
                }
            }
        }
        self.advance_start();
        acquired
    }

    /// Applies a member's acknowledgements, all of them or none (Kafka rolls back every batch of
    /// the request when one fails):
    ///
    /// - `INVALID_REQUEST` when a batch's first offset is past its last, a batch starts at or
    ///   before the end of the one in front of it, a batch has no type or more than one but not
    ///   one per offset, or reaches past the window's end;
    /// - `INVALID_RECORD_STATE` when an offset at or past the start offset is not acquired by
    ///   `member`, or the window holds no records.
    ///
    /// Offsets below the start offset are already done with and are passed over. Accept
    /// acknowledges a record; Release makes it available again (archived once its delivery count
    /// reached the limit); Reject and Gap archive it; Renew starts its lock over from `now_ms`.
    pub fn acknowledge(
        &mut self,
        member: &str,
        batches: &[AckBatch],
        now_ms: i64,
    ) -> Result<(), ShareError> {
        check_ack_batches(batches)?;
        for batch in batches {
            if batch.last_offset < self.start {
                continue;
            }
            if self.start == self.end {
                return Err(ShareError::InvalidRecordState(format!(
                    "offsets {}-{}: no records are in flight",
                    batch.first_offset, batch.last_offset
                )));
            }
            if batch.last_offset >= self.end {
                return Err(ShareError::InvalidRequest(format!(
                    "offsets {}-{} reach past the last record in flight, {}",
                    batch.first_offset,
                    batch.last_offset,
                    self.end - 1
                )));
            }
            let from = batch.first_offset.max(self.start);
            for (a, b, run) in self.runs.overlapping(from, batch.last_offset) {
                match &run.state {
                    State::Acquired { member: owner, .. } if &**owner == member => {}
                    State::Acquired { .. } => {
                        return Err(ShareError::InvalidRecordState(format!(
                            "offsets {a}-{b} are acquired by another member"
                        )));
                    }
                    _ => {
                        return Err(ShareError::InvalidRecordState(format!(
                            "offsets {a}-{b} are not acquired"
                        )));
                    }
                }
            }
        }
        for batch in batches {
            if batch.last_offset < self.start {
                continue;
            }
            let from = batch.first_offset.max(self.start);
            if let [ack] = batch.types.as_slice() {
                self.apply_ack(from, batch.last_offset, *ack, now_ms);
                continue;
            }
            // One type per offset (checked): walk the runs of equal types from `from`.
            let skipped = usize::try_from(from - batch.first_offset).unwrap_or(usize::MAX);
            let mut run: Option<(i64, i64, AckType)> = None;
            for (offset, ack) in (from..=batch.last_offset).zip(batch.types.iter().skip(skipped)) {
                match run {
                    Some((a, _, t)) if t == *ack => run = Some((a, offset, t)),
                    _ => {
                        if let Some((a, b, t)) = run {
                            self.apply_ack(a, b, t, now_ms);
                        }
                        run = Some((offset, offset, *ack));
                    }
                }
            }
            if let Some((a, b, t)) = run {
                self.apply_ack(a, b, t, now_ms);
            }
        }
        self.advance_start();
        Ok(())
    }

    fn apply_ack(&mut self, first: i64, last: i64, ack: AckType, now_ms: i64) {
        let limit = self.limit();
        let deadline = self.deadline(now_ms);
        self.change(first, last, |run| match ack {
            AckType::Accept => run.state = State::Acknowledged,
            AckType::Release => run.state = released(run.count, limit),
            AckType::Reject | AckType::Gap => run.state = State::Archived,
            AckType::Renew => {
                if let State::Acquired { deadline_ms, .. } = &mut run.state {
                    *deadline_ms = deadline;
                }
            }
        });
    }

    /// Gives back every record whose lock ended at or before `now_ms` (Kafka's acquisition lock
    /// timeout): available again with its delivery count, or archived once the count reached the
    /// limit. Returns how many records came back.
    pub fn expire_locks(&mut self, now_ms: i64) -> u64 {
        let expired: Vec<(i64, i64)> = self
            .runs
            .iter()
            .filter(|(_, run)| {
                matches!(run.state, State::Acquired { deadline_ms, .. } if deadline_ms <= now_ms)
            })
            .map(|(first, run)| (first, run.last))
            .collect();
        let limit = self.limit();
        let mut count = 0;
        for (first, last) in expired {
            self.change(first, last, |run| run.state = released(run.count, limit));
            count += span(first, last);
        }
        self.advance_start();
        count
    }

    /// When the earliest record lock ends, if any record is acquired: the broker calls
    /// [`SharePartition::expire_locks`] then.
    pub fn next_deadline(&self) -> Option<i64> {
        self.runs
            .iter()
            .filter_map(|(_, run)| match run.state {
                State::Acquired { deadline_ms, .. } => Some(deadline_ms),
                _ => None,
            })
            .min()
    }

    /// Gives back the records `member` holds because it left (its share session closed), as
    /// Kafka's `releaseAcquiredRecords`: available again with the delivery that never completed
    /// taken off the count, never archived for the delivery count limit. Returns how many records
    /// came back.
    pub fn release_member(&mut self, member: &str) -> u64 {
        let held: Vec<(i64, i64)> = self
            .runs
            .iter()
            .filter(|(_, run)| run.state.is_acquired_by(member))
            .map(|(first, run)| (first, run.last))
            .collect();
        let mut count = 0;
        for (first, last) in held {
            self.change(first, last, |run| {
                run.state = State::Available;
                run.count = run.count.saturating_sub(1).max(0);
            });
            count += span(first, last);
        }
        self.advance_start();
        count
    }

    /// The log's start offset moved to `log_start_offset` (retention, DeleteRecords): the
    /// available records below it are archived, and a window ending below it is extended to it
    /// with archived offsets, or moved to it when empty (Kafka's `updateCacheAndOffsets`).
    /// Acquired records below it stay with their member; once given back, the next read (which
    /// starts past them) archives them. Returns whether anything changed.
    pub fn log_start_moved(&mut self, log_start_offset: i64) -> bool {
        if log_start_offset <= self.start {
            return false;
        }
        if self.start < self.end {
            let to = (log_start_offset - 1).min(self.end - 1);
            let available: Vec<(i64, i64)> = self
                .runs
                .overlapping(self.start, to)
                .filter(|(_, _, run)| run.state == State::Available)
                .map(|(a, b, _)| (a, b))
                .collect();
            for (a, b) in available {
                self.change(a, b, |run| run.state = State::Archived);
            }
        }
        if log_start_offset > self.end {
            if self.runs.is_empty() {
                self.start = log_start_offset;
                self.end = log_start_offset;
            } else {
                self.append(self.end, log_start_offset - 1, State::Archived, 0);
            }
        }
        self.advance_start();
        true
    }

    /// The whole persisted state (Kafka's `ShareSnapshotValue`), acquired records as available.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            start_offset: self.start,
            state_epoch: self.state_epoch,
            batches: self.persisted(self.start, self.end - 1),
        }
    }

    /// The snapshot, with the changes since the last write counted as written.
    pub fn take_snapshot(&mut self) -> Snapshot {
        self.dirty.clear();
        self.persisted_start = self.start;
        self.snapshot()
    }

    /// What changed since the last snapshot or delta was taken (Kafka's `ShareUpdateValue`), or
    /// `None` when nothing did. [`crate::apply_delta`] of it onto the last write gives
    /// [`SharePartition::snapshot`].
    pub fn take_delta(&mut self) -> Option<Delta> {
        self.dirty.remove_below(self.start);
        if self.dirty.is_empty() && self.start == self.persisted_start {
            return None;
        }
        let mut batches = Vec::new();
        for (first, last) in self.dirty.iter() {
            let (first, last) = (first.max(self.start), last.min(self.end - 1));
            batches.extend(self.persisted(first, last));
        }
        self.dirty.clear();
        self.persisted_start = self.start;
        Some(Delta {
            start_offset: self.start,
            batches: merged(batches),
        })
    }

    /// How many records of the window are in each state.
    pub fn counts(&self) -> WindowCounts {
        let mut counts = WindowCounts {
            in_flight: span(self.start, self.end - 1),
            ..WindowCounts::default()
        };
        for (first, run) in self.runs.iter() {
            let n = span(first, run.last);
            match run.state {
                State::Available => counts.available += n,
                State::Acquired { .. } => counts.acquired += n,
                State::Acknowledged => counts.acknowledged += n,
                State::Archived => counts.archived += n,
            }
        }
        counts
    }

    /// The ranges each member holds, by member.
    pub fn acquired_ranges(&self) -> BTreeMap<String, Vec<OffsetRange>> {
        let mut by_member: BTreeMap<String, Vec<OffsetRange>> = BTreeMap::new();
        for (first, run) in self.runs.iter() {
            if let State::Acquired { member, .. } = &run.state {
                let ranges = by_member.entry(member.to_string()).or_default();
                match ranges.last_mut() {
                    Some(prev) if prev.last_offset.checked_add(1) == Some(first) => {
                        prev.last_offset = run.last;
                    }
                    _ => ranges.push(OffsetRange::new(first, run.last)),
                }
            }
        }
        by_member
    }

    /// The window, as runs of records in the same state with the same delivery count.
    pub fn window(&self) -> Vec<WindowEntry> {
        self.runs
            .iter()
            .map(|(first, run)| WindowEntry {
                first_offset: first,
                last_offset: run.last,
                state: run.state.public(),
                delivery_count: run.count,
            })
            .collect()
    }

    /// The state and delivery count of the record at `offset`, if it is in the window.
    pub fn record(&self, offset: i64) -> Option<(RecordState, i16)> {
        self.runs
            .get(offset)
            .map(|(_, run)| (run.state.public(), run.count))
    }

    /// How many runs the window is kept as (Kafka's in-flight batch count): its memory.
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    fn limit(&self) -> i16 {
        self.config.delivery_count_limit.max(1)
    }

    fn deadline(&self, now_ms: i64) -> i64 {
        now_ms.saturating_add(self.config.record_lock_duration_ms)
    }

    /// Changes the runs of `first..=last` with `change`, noting the offsets whose persisted state
    /// changed.
    fn change(&mut self, first: i64, last: i64, mut change: impl FnMut(&mut Run)) {
        let dirty = &mut self.dirty;
        self.runs.update(first, last, |key, run| {
            let before = (run.state.persisted(), run.count);
            change(run);
            if (run.state.persisted(), run.count) != before {
                dirty.insert(key, run.last);
            }
        });
    }

    /// Adds `first..=last` at the window's end.
    fn append(&mut self, first: i64, last: i64, state: State, count: i16) {
        self.runs.push(first, Run { last, state, count });
        self.dirty.insert(first, last);
        self.end = last + 1;
    }

    /// Moves the start offset past the leading acknowledged and archived records and forgets
    /// them.
    fn advance_start(&mut self) {
        while let Some((_, run)) = self.runs.first() {
            if !run.state.is_terminal() {
                break;
            }
            if let Some((_, run)) = self.runs.pop_first() {
                self.start = run.last + 1;
            }
        }
        if self.runs.is_empty() {
            self.start = self.end;
        }
    }

    /// The persisted state of `first..=last`, as state batches.
    fn persisted(&self, first: i64, last: i64) -> Vec<StateBatch> {
        merged(
            self.runs
                .overlapping(first, last)
                .map(|(a, b, run)| StateBatch {
                    first_offset: a,
                    last_offset: b,
                    delivery_state: run.state.persisted(),
                    delivery_count: run.count,
                }),
        )
    }
}

/// What a record given back becomes: available, or archived once its delivery count reached the
/// limit (Kafka's `InFlightState.tryUpdateState` to AVAILABLE without decreasing the count).
fn released(count: i16, limit: i16) -> State {
    if count >= limit {
        State::Archived
    } else {
        State::Available
    }
}

/// The delivery count from which deliveries are throttled: half the limit rounded up, at least 2
/// (Kafka's `throttleRecordsDeliveryLimit`).
fn throttle_threshold(limit: i16) -> i16 {
    ((limit + 1) / 2).max(2)
}

/// The leading batches that are well formed: non-negative offsets, base at or before last, last
/// below `i64::MAX`, each after the one before.
fn well_formed(batches: &[FetchedBatch]) -> &[FetchedBatch] {
    let mut previous_last: Option<i64> = None;
    let good = batches
        .iter()
        .take_while(|batch| {
            let ok = batch.base_offset >= 0
                && batch.base_offset <= batch.last_offset
                && batch.last_offset < i64::MAX
                && previous_last.is_none_or(|last| batch.base_offset > last);
            previous_last = Some(batch.last_offset);
            ok
        })
        .count();
    batches.get(..good).unwrap_or_default()
}

/// Skip ranges sorted, merged and well formed.
fn normalized(skip: &[OffsetRange]) -> Vec<(i64, i64)> {
    let mut ranges: Vec<(i64, i64)> = skip
        .iter()
        .filter(|r| r.first_offset <= r.last_offset)
        .map(|r| (r.first_offset, r.last_offset))
        .collect();
    ranges.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(ranges.len());
    for (first, last) in ranges {
        match out.last_mut() {
            Some(prev) if prev.1.saturating_add(1) >= first => prev.1 = prev.1.max(last),
            _ => out.push((first, last)),
        }
    }
    out
}

/// Adds `first..=last` to sorted, merged `ranges`.
fn insert_range(ranges: &mut Vec<(i64, i64)>, first: i64, last: i64) {
    ranges.push((first, last));
    let all: Vec<OffsetRange> = ranges
        .iter()
        .map(|&(a, b)| OffsetRange::new(a, b))
        .collect();
    *ranges = normalized(&all);
}

/// Whether `cursor` is skipped, and the last offset up to `last` that is the same.
fn skip_piece(skip: &[(i64, i64)], cursor: i64, last: i64) -> (bool, i64) {
    let after = skip.partition_point(|&(first, _)| first <= cursor);
    if let Some(&(_, end)) = after.checked_sub(1).and_then(|i| skip.get(i))
        && end >= cursor
    {
        return (true, end.min(last));
    }
    match skip.get(after) {
        Some(&(next, _)) => (false, (next - 1).min(last)),
        None => (false, last),
    }
}

/// The fetched batch holding `offset`.
fn batch_of(batches: &[FetchedBatch], offset: i64) -> Option<&FetchedBatch> {
    let after = batches.partition_point(|b| b.base_offset <= offset);
    after
        .checked_sub(1)
        .and_then(|i| batches.get(i))
        .filter(|b| b.last_offset >= offset)
}

fn batch_len(batches: &[FetchedBatch], offset: i64) -> i64 {
    batch_of(batches, offset).map_or(1, |b| b.last_offset - b.base_offset + 1)
}

/// How far an acquisition from `cursor` goes within `cursor..=last` when `room` more records
/// reach its limit. Once the limit is reached, [`AcquireMode::RecordLimit`] stops (the `bool`)
/// and [`AcquireMode::BatchOptimized`] goes on to the end of the fetched batch it was reached in
/// (`hard_stop`).
fn take_until(
    cursor: i64,
    last: i64,
    room: i64,
    mode: AcquireMode,
    batches: &[FetchedBatch],
    hard_stop: &mut Option<i64>,
) -> (i64, bool) {
    if hard_stop.is_some() || last - cursor < room - 1 {
        return (last, false);
    }
    let reached = cursor + room - 1;
    match mode {
        AcquireMode::RecordLimit => (reached, true),
        AcquireMode::BatchOptimized => {
            let stop = batch_of(batches, reached).map_or(reached, |b| b.last_offset);
            *hard_stop = Some(stop);
            (last.min(stop), false)
        }
    }
}

/// Request checks of Kafka's `KafkaApis.validateAcknowledgementBatches` (the overlap check is
/// strict: Kafka lets a batch start at the last offset of the one before).
fn check_ack_batches(batches: &[AckBatch]) -> Result<(), ShareError> {
    let mut previous_last: Option<i64> = None;
    for batch in batches {
        let (first, last) = (batch.first_offset, batch.last_offset);
        if first > last {
            return Err(ShareError::InvalidRequest(format!(
                "acknowledgement batch {first}-{last} ends before it starts"
            )));
        }
        if let Some(prev) = previous_last
            && first <= prev
        {
            return Err(ShareError::InvalidRequest(format!(
                "acknowledgement batch {first}-{last} overlaps or precedes the one before, \
                 which ends at {prev}"
            )));
        }
        let types = batch.types.len() as u128;
        if types == 0 || (types > 1 && types != u128::from(span(first, last))) {
            return Err(ShareError::InvalidRequest(format!(
                "acknowledgement batch {first}-{last} has {types} acknowledge types"
            )));
        }
        previous_last = Some(last);
    }
    Ok(())
}
