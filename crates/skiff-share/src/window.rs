//! The window's storage: runs of offsets in the same state with the same delivery count, keyed by
//! their first offset, and sets of offset ranges. Both stay as small as the number of runs,
//! whatever the number of offsets.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::{DeliveryState, RecordState};

/// The state of a run of records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    Available,
    Acquired { member: Arc<str>, deadline_ms: i64 },
    Acknowledged,
    Archived,
}

impl State {
    /// Acknowledged or archived: the record is done with.
    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self, State::Acknowledged | State::Archived)
    }

    pub(crate) fn is_acquired_by(&self, member: &str) -> bool {
        matches!(self, State::Acquired { member: m, .. } if &**m == member)
    }

    /// How the state is persisted: an acquired record as available (its lock does not survive
    /// the broker).
    pub(crate) fn persisted(&self) -> DeliveryState {
        match self {
            State::Available | State::Acquired { .. } => DeliveryState::Available,
            State::Acknowledged => DeliveryState::Acknowledged,
            State::Archived => DeliveryState::Archived,
        }
    }

    pub(crate) fn public(&self) -> RecordState {
        match self {
            State::Available => RecordState::Available,
            State::Acquired {
                member,
                deadline_ms,
            } => RecordState::Acquired {
                member: member.to_string(),
                deadline_ms: *deadline_ms,
            },
            State::Acknowledged => RecordState::Acknowledged,
            State::Archived => RecordState::Archived,
        }
    }
}

/// A run of records from its key (the first offset) to `last`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) last: i64,
    pub(crate) state: State,
    pub(crate) count: i16,
}

impl Run {
    fn same_as(&self, other: &Run) -> bool {
        self.state == other.state && self.count == other.count
    }
}

/// Runs keyed by first offset, not overlapping; neighbours in the same state are merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Runs {
    map: BTreeMap<i64, Run>,
}

impl Runs {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (i64, &Run)> {
        self.map.iter().map(|(&first, run)| (first, run))
    }

    pub(crate) fn first(&self) -> Option<(i64, &Run)> {
        self.map.first_key_value().map(|(&first, run)| (first, run))
    }

    pub(crate) fn pop_first(&mut self) -> Option<(i64, Run)> {
        self.map.pop_first()
    }

    /// The run holding `offset`.
    pub(crate) fn get(&self, offset: i64) -> Option<(i64, &Run)> {
        self.map
            .range(..=offset)
            .next_back()
            .filter(|(_, run)| run.last >= offset)
            .map(|(&first, run)| (first, run))
    }

    /// The runs overlapping `first..=last`, clipped to it: `(first, last, run)`.
    pub(crate) fn overlapping(
        &self,
        first: i64,
        last: i64,
    ) -> impl Iterator<Item = (i64, i64, &Run)> {
        let from = self.get(first).map_or(first, |(key, _)| key);
        let keys = if first <= last {
            Some(self.map.range(from..=last))
        } else {
            None
        };
        keys.into_iter()
            .flatten()
            .map(move |(&key, run)| (key.max(first), run.last.min(last), run))
    }

    /// Appends a run past every other one, merging it with the last run when they are the same.
    pub(crate) fn push(&mut self, first: i64, run: Run) {
        self.map.insert(first, run);
        self.merge_around(first, first);
    }

    /// Makes `at` the first offset of a run when a run holds it.
    fn split_at(&mut self, at: i64) {
        let Some((&first, run)) = self.map.range_mut(..at).next_back() else {
            return;
        };
        if first < at && run.last >= at {
            let tail = Run {
                last: run.last,
                state: run.state.clone(),
                count: run.count,
            };
            run.last = at - 1;
            self.map.insert(at, tail);
        }
    }

    /// Calls `change(first, run)` for every run inside `first..=last` (split at both ends), then
    /// merges runs left the same.
    pub(crate) fn update(&mut self, first: i64, last: i64, mut change: impl FnMut(i64, &mut Run)) {
        if first > last {
            return;
        }
        self.split_at(first);
        if let Some(next) = last.checked_add(1) {
            self.split_at(next);
        }
        for (&key, run) in self.map.range_mut(first..=last) {
            change(key, run);
        }
        self.merge_around(first, last);
    }

    /// Merges same runs touching `first..=last` (the run before it and the one after included).
    fn merge_around(&mut self, first: i64, last: i64) {
        let from = self
            .map
            .range(..first)
            .next_back()
            .map_or(first, |(&key, _)| key);
        let to = last.saturating_add(1);
        if from > to {
            return;
        }
        let keys: Vec<i64> = self.map.range(from..=to).map(|(&key, _)| key).collect();
        let mut previous: Option<i64> = None;
        for key in keys {
            if let Some(prev) = previous {
                let mergeable = match (self.map.get(&prev), self.map.get(&key)) {
                    (Some(a), Some(b)) => a.last.checked_add(1) == Some(key) && a.same_as(b),
                    _ => false,
                };
                if mergeable {
                    if let Some(b) = self.map.remove(&key)
                        && let Some(a) = self.map.get_mut(&prev)
                    {
                        a.last = b.last;
                    }
                    continue;
                }
            }
            previous = Some(key);
        }
    }
}

/// A set of offsets kept as disjoint, non-adjacent ranges keyed by first offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RangeSet {
    map: BTreeMap<i64, i64>,
}

impl RangeSet {
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.map.iter().map(|(&first, &last)| (first, last))
    }

    pub(crate) fn insert(&mut self, first: i64, last: i64) {
        if first > last {
            return;
        }
        let (mut first, mut last) = (first, last);
        if let Some((&key, &end)) = self.map.range(..=first).next_back()
            && end.saturating_add(1) >= first
        {
            first = key;
            last = last.max(end);
            self.map.remove(&key);
        }
        let touching: Vec<(i64, i64)> = self
            .map
            .range(first..=last.saturating_add(1))
            .map(|(&key, &end)| (key, end))
            .collect();
        for (key, end) in touching {
            self.map.remove(&key);
            last = last.max(end);
        }
        self.map.insert(first, last);
    }

    /// Forgets every offset below `offset`.
    pub(crate) fn remove_below(&mut self, offset: i64) {
        let below: Vec<(i64, i64)> = self
            .map
            .range(..offset)
            .map(|(&key, &end)| (key, end))
            .collect();
        for (key, end) in below {
            self.map.remove(&key);
            if end >= offset {
                self.map.insert(offset, end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(last: i64, state: State, count: i16) -> Run {
        Run { last, state, count }
    }

    #[test]
    fn updates_split_runs_and_merge_them_back() {
        let mut runs = Runs::default();
        runs.push(0, run(99, State::Available, 0));
        runs.update(10, 19, |_, r| r.state = State::Archived);
        assert_eq!(runs.len(), 3);
        assert_eq!(runs.get(15).map(|(k, r)| (k, r.last)), Some((10, 19)));
        assert_eq!(runs.get(20).map(|(k, r)| (k, r.last)), Some((20, 99)));
        runs.update(10, 19, |_, r| r.state = State::Available);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs.get(50).map(|(k, r)| (k, r.last)), Some((0, 99)));
        // Pushing the same state extends the last run.
        runs.push(100, run(109, State::Available, 0));
        assert_eq!(runs.len(), 1);
        let clipped: Vec<(i64, i64)> = runs.overlapping(5, 7).map(|(a, b, _)| (a, b)).collect();
        assert_eq!(clipped, vec![(5, 7)]);
        assert_eq!(runs.overlapping(200, 300).count(), 0);
        assert_eq!(runs.overlapping(7, 5).count(), 0);
    }

    #[test]
    fn range_sets_merge_touching_ranges() {
        let mut set = RangeSet::default();
        set.insert(10, 19);
        set.insert(30, 39);
        set.insert(20, 29);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![(10, 39)]);
        set.insert(50, 50);
        set.insert(0, 5);
        set.insert(4, 12);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![(0, 39), (50, 50)]);
        set.remove_below(20);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![(20, 39), (50, 50)]);
        set.remove_below(45);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![(50, 50)]);
        set.insert(i64::MAX - 1, i64::MAX);
        set.insert(i64::MAX, i64::MAX);
        assert_eq!(set.iter().count(), 2);
    }
}
