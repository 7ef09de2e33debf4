//! What a share partition persists, after the share coordinator's records: a [`Snapshot`] of the
//! whole window (`ShareSnapshotValue`) and [`Delta`]s of what changed since the last write
//! (`ShareUpdateValue`), folded into a snapshot by [`apply_delta`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A record's persisted state (the `DeliveryState` byte of a state batch). Acquired records are
/// persisted as available: a lock does not outlive the broker that granted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeliveryState {
    /// 0: can be delivered (again).
    Available,
    /// 2: acknowledged; never delivered again.
    Acknowledged,
    /// 4: archived; never delivered again.
    Archived,
}

impl DeliveryState {
    /// The state of a `DeliveryState` byte (1, acquired, is never persisted).
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(DeliveryState::Available),
            2 => Some(DeliveryState::Acknowledged),
            4 => Some(DeliveryState::Archived),
            _ => None,
        }
    }

    pub fn code(self) -> i8 {
        match self {
            DeliveryState::Available => 0,
            DeliveryState::Acknowledged => 2,
            DeliveryState::Archived => 4,
        }
    }
}

/// A run of offsets in the same persisted state with the same delivery count (Kafka's
/// `PersisterStateBatch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_state: DeliveryState,
    pub delivery_count: i16,
}

/// The whole persisted state of a share partition (`ShareSnapshotValue`): the start offset and
/// every record from it to the window's end, as state batches in offset order, neighbours in the
/// same state merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub start_offset: i64,
    pub state_epoch: i32,
    pub batches: Vec<StateBatch>,
}

/// What changed since the last snapshot or delta (`ShareUpdateValue`): the state batches of the
/// offsets that changed, and the start offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    pub start_offset: i64,
    pub batches: Vec<StateBatch>,
}

/// The snapshot `snapshot` becomes once `delta` is applied: the delta's batches replace what the
/// snapshot held at their offsets, the delta's start offset replaces the snapshot's, and batches
/// below it are dropped. Pure, so that whoever reads the persisted records can rebuild the state
/// the writer had.
///
/// Later batches win. Kafka's share coordinator instead keeps the batch with the higher delivery
/// count (then the higher state), which is the same thing for Kafka's writes because Kafka never
/// persists an acquisition; Skiff does, and a member leaving lowers a count again.
pub fn apply_delta(snapshot: &Snapshot, delta: &Delta) -> Snapshot {
    let mut map: BTreeMap<i64, (i64, DeliveryState, i16)> = BTreeMap::new();
    for batch in snapshot.batches.iter().chain(&delta.batches) {
        if batch.first_offset > batch.last_offset {
            continue;
        }
        carve(&mut map, batch.first_offset, batch.last_offset);
        map.insert(
            batch.first_offset,
            (
                batch.last_offset,
                batch.delivery_state,
                batch.delivery_count,
            ),
        );
    }
    let start = delta.start_offset;
    let batches = map
        .into_iter()
        .filter(|(_, (last, _, _))| *last >= start)
        .map(
            |(first, (last, delivery_state, delivery_count))| StateBatch {
                first_offset: first.max(start),
                last_offset: last,
                delivery_state,
                delivery_count,
            },
        );
    Snapshot {
        start_offset: start,
        state_epoch: snapshot.state_epoch,
        batches: merged(batches),
    }
}

/// Removes `first..=last` from the batches in `map`, keeping the parts of them outside it.
fn carve(map: &mut BTreeMap<i64, (i64, DeliveryState, i16)>, first: i64, last: i64) {
    let from = map
        .range(..first)
        .next_back()
        .filter(|(_, (end, _, _))| *end >= first)
        .map_or(first, |(&key, _)| key);
    let hit: Vec<(i64, (i64, DeliveryState, i16))> =
        map.range(from..=last).map(|(&k, &v)| (k, v)).collect();
    for (key, (end, state, count)) in hit {
        map.remove(&key);
        if key < first {
            map.insert(key, (first - 1, state, count));
        }
        if end > last {
            map.insert(last + 1, (end, state, count));
        }
    }
}

/// Batches in offset order with touching neighbours of the same state and count merged.
pub(crate) fn merged(batches: impl IntoIterator<Item = StateBatch>) -> Vec<StateBatch> {
    let mut out: Vec<StateBatch> = Vec::new();
    for batch in batches {
        if let Some(prev) = out.last_mut()
            && prev.last_offset.checked_add(1) == Some(batch.first_offset)
            && prev.delivery_state == batch.delivery_state
            && prev.delivery_count == batch.delivery_count
        {
            prev.last_offset = batch.last_offset;
            continue;
        }
        out.push(batch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(first: i64, last: i64, state: DeliveryState, count: i16) -> StateBatch {
        StateBatch {
            first_offset: first,
            last_offset: last,
            delivery_state: state,
            delivery_count: count,
        }
    }

    use DeliveryState::{Acknowledged as Acked, Archived, Available};

    #[test]
    fn delivery_states_use_kafkas_bytes() {
        for state in [Available, Acked, Archived] {
            assert_eq!(DeliveryState::from_code(state.code()), Some(state));
        }
        assert_eq!(Available.code(), 0);
        assert_eq!(Acked.code(), 2);
        assert_eq!(Archived.code(), 4);
        assert_eq!(DeliveryState::from_code(1), None);
        assert_eq!(DeliveryState::from_code(3), None);
    }

    #[test]
    fn a_delta_replaces_what_it_covers_and_drops_what_is_below_the_start() {
        let snapshot = Snapshot {
            start_offset: 0,
            state_epoch: 3,
            batches: vec![batch(0, 9, Available, 1), batch(10, 19, Available, 2)],
        };
        let delta = Delta {
            start_offset: 3,
            batches: vec![batch(5, 12, Acked, 1), batch(15, 15, Available, 3)],
        };
        let out = apply_delta(&snapshot, &delta);
        assert_eq!(out.start_offset, 3);
        assert_eq!(out.state_epoch, 3);
        assert_eq!(
            out.batches,
            vec![
                batch(3, 4, Available, 1),
                batch(5, 12, Acked, 1),
                batch(13, 14, Available, 2),
                batch(15, 15, Available, 3),
                batch(16, 19, Available, 2),
            ]
        );
        // A later delta wins even with a lower count (a member left), and same neighbours merge.
        let delta = Delta {
            start_offset: 13,
            batches: vec![batch(15, 15, Available, 2)],
        };
        assert_eq!(
            apply_delta(&out, &delta).batches,
            vec![batch(13, 19, Available, 2)]
        );
    }

    #[test]
    fn malformed_batches_are_ignored() {
        let snapshot = Snapshot {
            start_offset: 0,
            state_epoch: 0,
            batches: vec![batch(9, 0, Available, 1)],
        };
        let delta = Delta {
            start_offset: 0,
            batches: vec![batch(4, 2, Acked, 1), batch(0, 1, Archived, 0)],
        };
        assert_eq!(
            apply_delta(&snapshot, &delta).batches,
            vec![batch(0, 1, Archived, 0)]
        );
    }
}
