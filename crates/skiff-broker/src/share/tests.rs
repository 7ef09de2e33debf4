//! The share-partition leader over an in-memory state store and log, with the clock injected.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use skiff_protocol::{ErrorCode, Uuid};
use skiff_records::RecordBatchBuilder;
use skiff_share::{AckBatch, AckType, AcquireMode, DeliveryState, ShareConfig, apply_delta};

use super::*;
use crate::groups::share::{ShareEvent, ShareStateError, ShareStateRecord};
use crate::share::log_read::LogChunk;
use crate::share::session::SessionKey;

/// Share-partition states in memory, outliving the leaders that use them (a "restart" is a new
/// [`ShareManager`] over the same store); writes can be made to fail.
#[derive(Default)]
struct MemoryStore {
    states: Mutex<HashMap<SharePartitionKey, Snapshot>>,
    fail: AtomicBool,
}

impl MemoryStore {
    fn with(key: &SharePartitionKey, start: i64) -> Self {
        let store = MemoryStore::default();
        store.lock().insert(
            key.clone(),
            Snapshot {
                start_offset: start,
                state_epoch: 0,
                batches: Vec::new(),
            },
        );
        store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SharePartitionKey, Snapshot>> {
        self.states.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn state(&self, key: &SharePartitionKey) -> Snapshot {
        self.lock().get(key).cloned().expect("a state")
    }
}

impl StateStore for MemoryStore {
    fn load(&self, key: &SharePartitionKey) -> Result<Option<Snapshot>, ShareStateError> {
        Ok(self.lock().get(key).cloned())
    }

    fn append(
        &self,
        key: &SharePartitionKey,
        record: ShareStateRecord,
    ) -> Result<i64, ShareStateError> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(ShareStateError::Storage(anyhow::anyhow!("disk full")));
        }
        let mut states = self.lock();
        let Some(current) = states.get(key) else {
            return Err(ShareStateError::NotInitialized(key.clone()));
        };
        let next = match record {
            ShareStateRecord::Snapshot(s) => s,
            ShareStateRecord::Delta(d) => apply_delta(current, &d),
        };
        states.insert(key.clone(), next);
        Ok(1)
    }
}

/// A log of batches of `sizes` records each, from offset 0.
struct Log {
    batches: Vec<(i64, Bytes)>,
}

impl Log {
    fn new(sizes: &[usize]) -> Self {
        let mut base = 0i64;
        let mut batches = Vec::new();
        for &n in sizes {
            let mut builder = RecordBatchBuilder::new().base_offset(base);
            for _ in 0..n {
                builder
                    .append(1_700_000_000_000, None, Some(b"r"), &[])
                    .expect("append");
            }
            batches.push((base, builder.build().expect("batch").into_bytes()));
            base += i64::try_from(n).expect("size");
        }
        Log { batches }
    }

    /// Whole batches from the one holding `offset`.
    fn read(&self, offset: i64) -> ReadOutcome {
        let mut bytes = Vec::new();
        for (i, (base, batch)) in self.batches.iter().enumerate() {
            let next = self.batches.get(i + 1).map_or(i64::MAX, |(b, _)| *b);
            if next > offset || *base >= offset {
                bytes.extend_from_slice(batch);
            }
        }
        ReadOutcome::Chunk(LogChunk::parse(Bytes::from(bytes), None))
    }
}

fn key() -> SharePartitionKey {
    SharePartitionKey::new("g", Uuid::from_u128(7), 0)
}

const CONFIG: ShareConfig = ShareConfig {
    record_lock_duration_ms: 1000,
    delivery_count_limit: 5,
    max_record_locks: 2000,
};

fn acquire(
    manager: &ShareManager,
    store: &MemoryStore,
    log: &Log,
    member: &str,
    max_records: u32,
    now_ms: i64,
) -> Vec<(i64, i64, i16)> {
    let request = AcquireRequest {
        member,
        config: CONFIG,
        max_records,
        mode: AcquireMode::RecordLimit,
        batch_size: 0,
        log_start: 0,
        now_ms,
    };
    let acquired = manager
        .acquire(store, &key(), &request, &mut |offset| log.read(offset))
        .expect("acquired");
    if acquired.ranges.is_empty() {
        assert!(acquired.records.is_empty());
    } else {
        assert!(!acquired.records.is_empty());
    }
    acquired
        .ranges
        .iter()
        .map(|r| (r.first_offset, r.last_offset, r.delivery_count))
        .collect()
}

fn ack(
    manager: &ShareManager,
    store: &MemoryStore,
    member: &str,
    first: i64,
    last: i64,
    ack: AckType,
) -> Result<Option<i64>, PartitionError> {
    let batches = [AckBatch::uniform(first, last, ack)];
    manager.acknowledge(store, &key(), member, &batches, CONFIG, 0)
}

/// A restart restores each share partition from its persisted state: acknowledged (and
/// archived) records are never delivered again, and records that were acquired come back as
/// available with their delivery counted.
#[test]
fn a_restart_redelivers_what_was_acquired_and_nothing_acknowledged() {
    let store = MemoryStore::with(&key(), 0);
    let log = Log::new(&[10]);
    let manager = ShareManager::new(10);
    assert_eq!(acquire(&manager, &store, &log, "m1", 5, 0), vec![(0, 4, 1)]);
    assert_eq!(acquire(&manager, &store, &log, "m2", 5, 0), vec![(5, 9, 1)]);
    // Nothing is left to acquire; acknowledging another member's records is refused.
    assert!(acquire(&manager, &store, &log, "m3", 5, 0).is_empty());
    let refused = ack(&manager, &store, "m1", 5, 5, AckType::Accept).expect_err("not m1's");
    assert_eq!(refused.code, ErrorCode::INVALID_RECORD_STATE);
    assert!(
        ack(&manager, &store, "m1", 0, 4, AckType::Accept)
            .expect("acked")
            .is_some()
    );
    ack(&manager, &store, "m2", 5, 6, AckType::Reject).expect("rejected");
    // Persisted: 0-6 done, so the start is 7; 7-9 available with one delivery.
    let state = store.state(&key());
    assert_eq!(state.start_offset, 7);
    assert_eq!(
        state
            .batches
            .iter()
            .map(|b| (
                b.first_offset,
                b.last_offset,
                b.delivery_state,
                b.delivery_count
            ))
            .collect::<Vec<_>>(),
        vec![(7, 9, DeliveryState::Available, 1)]
    );
    assert_eq!(manager.counters.acquired.load(Ordering::Relaxed), 10);
    assert_eq!(manager.counters.acknowledged.load(Ordering::Relaxed), 5);
    assert_eq!(manager.counters.archived.load(Ordering::Relaxed), 2);
    assert_eq!(manager.gauges(), (3, 3));
    drop(manager);

    // A new leader over the same state: 7-9 on their second delivery, nothing below.
    let restarted = ShareManager::new(10);
    assert_eq!(
        acquire(&restarted, &store, &log, "m3", 100, 5),
        vec![(7, 9, 2)]
    );
    assert_eq!(restarted.counters.redelivered.load(Ordering::Relaxed), 3);
    assert!(acquire(&restarted, &store, &log, "m4", 100, 5).is_empty());
}

/// Record locks expire at their deadline, as the injected clock says, and the records go to
/// the next member with their delivery counted; waiting fetches are told.
#[test]
fn locks_expire_at_their_deadline() {
    let store = MemoryStore::with(&key(), 0);
    let log = Log::new(&[3]);
    let manager = ShareManager::new(10);
    let returned = manager.subscribe();
    assert_eq!(manager.next_deadline(), None);
    assert_eq!(
        acquire(&manager, &store, &log, "m1", 10, 10_000),
        vec![(0, 2, 1)]
    );
    assert_eq!(manager.next_deadline(), Some(11_000));
    manager.expire_locks(&store, 10_999);
    assert!(acquire(&manager, &store, &log, "m2", 10, 10_999).is_empty());
    assert!(!returned.has_changed().expect("sender"));
    manager.expire_locks(&store, 11_000);
    assert!(returned.has_changed().expect("sender"));
    assert_eq!(manager.next_deadline(), None);
    // Expired records are persisted as available, their delivery counted.
    assert_eq!(store.state(&key()).batches.len(), 1);
    assert_eq!(
        acquire(&manager, &store, &log, "m2", 10, 11_001),
        vec![(0, 2, 2)]
    );
    assert_eq!(manager.next_deadline(), Some(12_001));
    // A renew starts the lock over.
    let renew = [AckBatch::uniform(0, 2, AckType::Renew)];
    manager
        .acknowledge(&store, &key(), "m2", &renew, CONFIG, 11_500)
        .expect("renewed");
    assert_eq!(manager.next_deadline(), Some(12_500));
}

/// A closed connection closes its share sessions and releases their members' records; so does
/// a member leaving its group. Released records are not counted as delivered.
#[test]
fn members_gone_release_their_records_uncounted() {
    let store = MemoryStore::with(&key(), 0);
    let log = Log::new(&[4]);
    let manager = ShareManager::new(10);
    let session = SessionKey::new("g", "m1");
    manager
        .lock_sessions()
        .fetch(&session, 0, &[(key().topic_id, 0)], &[], false, 7)
        .expect("session");
    assert_eq!(
        acquire(&manager, &store, &log, "m1", 10, 0),
        vec![(0, 3, 1)]
    );
    manager.connection_closed(&store, 8);
    assert_eq!(manager.lock_sessions().len(), 1);
    manager.connection_closed(&store, 7);
    assert_eq!(manager.lock_sessions().len(), 0);
    assert_eq!(
        acquire(&manager, &store, &log, "m2", 10, 0),
        vec![(0, 3, 1)]
    );
    let gone = ShareEvent::MemberGone {
        group_id: "g".into(),
        member_id: "m2".into(),
    };
    manager.handle_events(&store, vec![gone]);
    assert_eq!(
        acquire(&manager, &store, &log, "m3", 10, 0),
        vec![(0, 3, 1)]
    );
    // A member of another group is not this group's.
    manager.release_member(&store, "other", "m3");
    assert!(acquire(&manager, &store, &log, "m4", 10, 0).is_empty());
}

/// A write that fails takes its acknowledgement back (the records stay acquired); the next
/// write is a whole snapshot.
#[test]
fn a_failed_write_takes_the_change_back() {
    let store = MemoryStore::with(&key(), 0);
    let log = Log::new(&[2, 2]);
    let manager = ShareManager::new(10);
    assert_eq!(
        acquire(&manager, &store, &log, "m1", 10, 0),
        vec![(0, 3, 1)]
    );
    store.fail.store(true, Ordering::Relaxed);
    let failed = ack(&manager, &store, "m1", 0, 3, AckType::Accept).expect_err("not stored");
    assert_eq!(failed.code, ErrorCode::UNKNOWN_SERVER_ERROR);
    store.fail.store(false, Ordering::Relaxed);
    ack(&manager, &store, "m1", 0, 3, AckType::Accept).expect("acked");
    let state = store.state(&key());
    assert_eq!((state.start_offset, state.batches.len()), (4, 0));
    // An acquisition whose write fails is taken back too.
    let log = Log::new(&[2, 2, 3]);
    store.fail.store(true, Ordering::Relaxed);
    let request = AcquireRequest {
        member: "m1",
        config: CONFIG,
        max_records: 10,
        mode: AcquireMode::BatchOptimized,
        batch_size: 0,
        log_start: 0,
        now_ms: 0,
    };
    let failed = manager
        .acquire(&store, &key(), &request, &mut |o| log.read(o))
        .expect_err("not stored");
    assert_eq!(failed.code, ErrorCode::UNKNOWN_SERVER_ERROR);
    assert_eq!(manager.next_deadline(), None);
    store.fail.store(false, Ordering::Relaxed);
    assert_eq!(
        acquire(&manager, &store, &log, "m2", 10, 0),
        vec![(4, 6, 1)]
    );
}

/// A share partition without state is UNKNOWN_TOPIC_OR_PARTITION; one whose state is deleted
/// is forgotten.
#[test]
fn share_partitions_without_state_are_unknown() {
    let store = MemoryStore::default();
    let log = Log::new(&[1]);
    let manager = ShareManager::new(10);
    let request = AcquireRequest {
        member: "m1",
        config: CONFIG,
        max_records: 10,
        mode: AcquireMode::BatchOptimized,
        batch_size: 0,
        log_start: 0,
        now_ms: 0,
    };
    let err = manager
        .acquire(&store, &key(), &request, &mut |o| log.read(o))
        .expect_err("no state");
    assert_eq!(err.code, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    store.lock().insert(
        key(),
        Snapshot {
            start_offset: 0,
            state_epoch: 0,
            batches: Vec::new(),
        },
    );
    assert_eq!(
        acquire(&manager, &store, &log, "m1", 10, 0),
        vec![(0, 0, 1)]
    );
    store.lock().clear();
    manager.handle_events(&store, vec![ShareEvent::StatesDeleted(vec![key()])]);
    assert_eq!(manager.next_deadline(), None);
    let err = ack(&manager, &store, "m1", 0, 0, AckType::Accept).expect_err("gone");
    assert_eq!(err.code, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(manager.gauges(), (0, 0));
}

/// Idle share partitions are unloaded: one unused since the last pass with nothing acquired
/// goes (and loads again as it was), one holding acquired records or used meanwhile stays, and
/// one `keep` refuses (cluster mode: led elsewhere now) goes whatever it holds.
#[test]
fn idle_share_partitions_are_unloaded() {
    let store = MemoryStore::with(&key(), 0);
    let log = Log::new(&[10]);
    let manager = ShareManager::new(10);
    let keep_all = |_: &SharePartitionKey| true;
    assert_eq!(acquire(&manager, &store, &log, "m1", 4, 0), vec![(0, 3, 1)]);
    // Used since the last pass, then holding acquired records: kept.
    assert_eq!(manager.unload_idle(&keep_all), 0);
    assert_eq!(manager.unload_idle(&keep_all), 0);
    ack(&manager, &store, "m1", 0, 3, AckType::Accept).expect("acked");
    // Used (the acknowledgement) since the last pass: kept once more, then unloaded.
    assert_eq!(manager.unload_idle(&keep_all), 0);
    assert_eq!(manager.loaded(), 1);
    assert_eq!(manager.unload_idle(&keep_all), 1);
    assert_eq!(manager.loaded(), 0);
    // Loaded again from the store: it goes on where it was.
    assert_eq!(acquire(&manager, &store, &log, "m1", 2, 0), vec![(4, 5, 1)]);
    // Led elsewhere now: unloaded at once, acquired records and all.
    assert_eq!(manager.unload_idle(&|_: &SharePartitionKey| false), 1);
    assert_eq!(manager.loaded(), 0);
    assert_eq!(manager.gauges(), (0, 0));
}

/// AlterShareGroupOffsets and DeleteShareGroupOffsets rewrite persisted states around
/// `rewrite_states`: a refused rewrite keeps the loaded copy, an accepted one drops it, so the
/// next acquisition loads the new state; a stale copy writes nothing after it.
#[test]
fn rewritten_states_are_loaded_again() {
    let store = MemoryStore::with(&key(), 0);
    let log = Log::new(&[10]);
    let manager = ShareManager::new(10);
    assert_eq!(acquire(&manager, &store, &log, "m1", 2, 0), vec![(0, 1, 1)]);
    let refused: Result<(), &str> = manager.rewrite_states(&[key(), key()], || Err("non-empty"));
    assert_eq!(refused, Err("non-empty"));
    // Still loaded: m1 holds 0-1, the next records are 2-3.
    assert_eq!(acquire(&manager, &store, &log, "m2", 2, 0), vec![(2, 3, 1)]);
    let done: Result<i32, ()> = manager.rewrite_states(&[key(), key()], || {
        store.lock().insert(
            key(),
            Snapshot {
                start_offset: 6,
                state_epoch: 1,
                batches: Vec::new(),
            },
        );
        Ok(7)
    });
    assert_eq!(done, Ok(7));
    assert_eq!(manager.gauges(), (0, 0));
    // Loaded again from the new state: acquisition starts at 6, and the old copy's locks are
    // gone (nothing to expire, nothing written over the new state).
    assert_eq!(manager.next_deadline(), None);
    manager.expire_locks(&store, 10_000);
    assert_eq!(store.state(&key()).start_offset, 6);
    assert_eq!(acquire(&manager, &store, &log, "m3", 2, 0), vec![(6, 7, 1)]);
}
