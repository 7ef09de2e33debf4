//! The share-partition leader (Kafka's `SharePartitionManager`): ShareFetch and
//! ShareAcknowledge work on the share partitions here. On a single node the state is kept by
//! the group coordinator; in cluster mode by the partition's leader in PostgreSQL
//! ([`crate::cluster::share`]): both are a [`StateStore`], chosen by `Broker::share_store`.
//!
//! - **Share partitions.** Each (group, topic ID, partition) that a request touches is loaded
//!   once: a [`SharePartition`] restored from the state the group coordinator keeps for it
//!   ([`StateStore`], the seam of [`crate::groups::share`]), under its own lock. A partition
//!   without state (never initialized by a heartbeat, or deleted) is UNKNOWN_TOPIC_OR_PARTITION,
//!   as Kafka's share coordinator answers. Settings come from the broker and the group's
//!   overrides at every request (a changed `share.record.lock.duration.ms` applies to the next
//!   locks).
//! - **Reads.** An acquisition reads the partition's log through the caller (the handler uses
//!   the same partition read as Fetch, read_committed up to the last stable offset) from the
//!   share partition's next fetch offset; [`log_read`] turns the read into batches and the
//!   offsets never to deliver (control batches, aborted transactions), which are archived.
//! - **Persistence.** Every change is written through the seam right after it is made: the
//!   share partition's delta (`take_delta`), or every [`SNAPSHOT_EVERY`] writes, and after a
//!   failed write, its whole snapshot. Acquisitions are written too (as available records with
//!   their delivery count, so a restart counts the delivery); only acknowledgements and session
//!   closes wait for durability before their answer, as Kafka waits for its share coordinator
//!   there. A write that fails takes back the acknowledgement or acquisition it was for.
//! - **Locks.** Acquired records carry a deadline; [`ShareManager::next_deadline`] tells the
//!   broker's timer task (see `server.rs`) when to call [`ShareManager::expire_locks`]. The time
//!   is always a parameter.
//! - **Members.** A member whose share session closes (final epoch, or its connection closes:
//!   Kafka's connection-disconnect listener), or that leaves or is fenced from its share group
//!   (the coordinator's [`ShareEvent`]s), gets its acquired records released, their unfinished
//!   delivery not counted (Kafka's `releaseAcquiredRecords`).
//! - **Sessions** are [`session::ShareSessions`], under their own lock (never held while a
//!   share partition is locked).
//!
//! Waiting share fetches subscribe to [`ShareManager::subscribe`], bumped whenever records may
//! have become available again (released, expired, a member gone), besides the partitions' end
//! offsets.

pub mod log_read;
pub mod session;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use skiff_protocol::ErrorCode;
use skiff_share::{
    AckBatch, AckType, AcquireMode, AcquiredRange, Fetch, ShareConfig, SharePartition, Snapshot,
};
use tokio::sync::{Notify, watch};

use crate::groups::GroupCoordinator;
use crate::groups::share::{ShareEvent, SharePartitionKey, ShareStateError, ShareStateRecord};
use log_read::{LogChunk, split_by_batch_size};
use session::{SessionKey, ShareSessions};

/// Writes of one share partition between two whole snapshots.
pub const SNAPSHOT_EVERY: u32 = 256;

/// How often idle share partitions are unloaded ([`ShareManager::unload_idle`]).
pub const UNLOAD_EVERY_MS: i64 = 60_000;

/// Reads one acquisition makes at most, when what it reads is all archived (aborted
/// transactions, control batches) and it moves on.
const MAX_READS: usize = 4;

/// Where share-partition state is read and written: the group coordinator's seam.
pub trait StateStore {
    /// The persisted state of a share partition, if it has any. In cluster mode loading claims
    /// it: this broker's writes then fence the previous owner's.
    fn load(&self, key: &SharePartitionKey) -> Result<Option<Snapshot>, ShareStateError>;
    /// Writes a change; returns the store offset to wait for durability at.
    fn append(
        &self,
        key: &SharePartitionKey,
        record: ShareStateRecord,
    ) -> Result<i64, ShareStateError>;
}

impl StateStore for GroupCoordinator {
    fn load(&self, key: &SharePartitionKey) -> Result<Option<Snapshot>, ShareStateError> {
        Ok(self.share_partition_state(key))
    }

    fn append(
        &self,
        key: &SharePartitionKey,
        record: ShareStateRecord,
    ) -> Result<i64, ShareStateError> {
        self.append_share_partition_state(key, record)
    }
}

/// Why an operation on a share partition failed: the per-partition error of the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionError {
    pub code: ErrorCode,
    pub message: String,
}

impl PartitionError {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        PartitionError {
            code,
            message: message.into(),
        }
    }

    fn unknown(key: &SharePartitionKey) -> Self {
        PartitionError::new(
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!(
                "share partition {}-{} of group {} has no state",
                key.topic_id, key.partition, key.group_id
            ),
        )
    }
}

/// What a client gets for a share partition whose state could not be read or written.
fn state_error(e: &ShareStateError) -> PartitionError {
    let code = match e {
        ShareStateError::NotInitialized(_) => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ShareStateError::Storage(_) => ErrorCode::KAFKA_STORAGE_ERROR,
        ShareStateError::NotLeader(_) => ErrorCode::NOT_LEADER_OR_FOLLOWER,
    };
    PartitionError::new(code, e.to_string())
}

/// What a log read for an acquisition gave.
pub enum ReadOutcome {
    Chunk(LogChunk),
    /// The offset is below the log's start (retention, DeleteRecords).
    OutOfRange {
        log_start: i64,
    },
    Failed(ErrorCode),
}

/// An acquisition's request.
#[derive(Debug, Clone, Copy)]
pub struct AcquireRequest<'a> {
    pub member: &'a str,
    pub config: ShareConfig,
    /// Records this acquisition may take at most (KIP-1206 decides how strictly).
    pub max_records: u32,
    pub mode: AcquireMode,
    /// The client's `BatchSize`: acquired ranges are cut to about this many records.
    pub batch_size: i32,
    /// The log's start offset now: available records below it are archived first.
    pub log_start: i64,
    pub now_ms: i64,
}

/// Records acquired from one share partition.
#[derive(Debug, Clone, Default)]
pub struct Acquired {
    pub ranges: Vec<AcquiredRange>,
    /// The batches holding them.
    pub records: Bytes,
    /// How many records.
    pub count: u64,
}

/// Share counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ShareCounters {
    /// Records handed to members (each delivery counted).
    pub acquired: AtomicU64,
    /// Deliveries beyond a record's first (delivery count above 1).
    pub redelivered: AtomicU64,
    /// Records acknowledged (accepted).
    pub acknowledged: AtomicU64,
    /// Records archived: rejected, gaps, past the delivery count limit, never deliverable.
    pub archived: AtomicU64,
}

struct Slot {
    sp: SharePartition,
    /// Deltas written since the last whole snapshot.
    deltas: u32,
    /// A write failed: the next one is a whole snapshot.
    needs_snapshot: bool,
    /// The state was deleted: the share partition is no more.
    gone: bool,
}

struct Entry {
    slot: Mutex<Slot>,
    /// The earliest record lock's end (i64::MAX: none).
    deadline: AtomicI64,
    /// Used since the last [`ShareManager::unload_idle`].
    used: AtomicBool,
}

impl Entry {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The share-partition leader of the broker.
pub struct ShareManager {
    /// Held while the coordinator's events are taken and acted on, so that a request that
    /// acts on them first sees them all done (a member gone, then back with a new session,
    /// must not lose the new session to the old event).
    events: Mutex<()>,
    sessions: Mutex<ShareSessions>,
    partitions: Mutex<HashMap<SharePartitionKey, Arc<Entry>>>,
    changed: watch::Sender<u64>,
    /// Woken when a lock earlier than the armed deadline was set.
    pub timers_changed: Notify,
    armed: AtomicI64,
    pub counters: ShareCounters,
}

/// The start offset plus the acknowledged and archived records of the window: grows by the
/// records that became acknowledged or archived (everything below the start is one or the other).
fn terminal_mark(sp: &SharePartition) -> u64 {
    let counts = sp.counts();
    u64::try_from(sp.start_offset())
        .unwrap_or(0)
        .saturating_add(counts.acknowledged)
        .saturating_add(counts.archived)
}

/// The records `batches` accept at or above `start` (acknowledgements apply all or none).
fn accepted(batches: &[AckBatch], start: i64) -> u64 {
    let mut total = 0u64;
    for batch in batches {
        if batch.last_offset < start {
            continue;
        }
        let from = batch.first_offset.max(start);
        match batch.types.as_slice() {
            [AckType::Accept] => {
                let n = u64::try_from(batch.last_offset.saturating_sub(from)).unwrap_or(0);
                total = total.saturating_add(n.saturating_add(1));
            }
            [_] => {}
            types => {
                let skip = usize::try_from(from.saturating_sub(batch.first_offset)).unwrap_or(0);
                let n = types
                    .iter()
                    .skip(skip)
                    .filter(|t| **t == AckType::Accept)
                    .count();
                total = total.saturating_add(n as u64);
            }
        }
    }
    total
}

impl ShareManager {
    /// A leader with no share partitions loaded, keeping at most `max_sessions` sessions.
    pub fn new(max_sessions: usize) -> Self {
        ShareManager {
            events: Mutex::new(()),
            sessions: Mutex::new(ShareSessions::new(max_sessions)),
            partitions: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            timers_changed: Notify::new(),
            armed: AtomicI64::new(i64::MAX),
            counters: ShareCounters::default(),
        }
    }

    pub fn lock_sessions(&self) -> MutexGuard<'_, ShareSessions> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_partitions(&self) -> MutexGuard<'_, HashMap<SharePartitionKey, Arc<Entry>>> {
        self.partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes whenever records may have become available again.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn records_returned(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The loaded share partition of `key`, loaded now if need be.
    fn entry(
        &self,
        store: &dyn StateStore,
        key: &SharePartitionKey,
        config: ShareConfig,
    ) -> Result<Arc<Entry>, PartitionError> {
        let mut partitions = self.lock_partitions();
        if let Some(entry) = partitions.get(key) {
            entry.used.store(true, Ordering::Relaxed);
            return Ok(Arc::clone(entry));
        }
        let snapshot = match store.load(key) {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => return Err(PartitionError::unknown(key)),
            Err(e) => {
                tracing::warn!(group = %key.group_id, topic = %key.topic_id, partition = key.partition, error = %e, "cannot load a share partition");
                return Err(state_error(&e));
            }
        };
        let sp = SharePartition::restore(config, &snapshot).map_err(|e| {
            tracing::error!(group = %key.group_id, topic = %key.topic_id, partition = key.partition, error = %e, "cannot load a share partition");
            PartitionError::new(ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string())
        })?;
        let entry = Arc::new(Entry {
            slot: Mutex::new(Slot {
                sp,
                deltas: 0,
                needs_snapshot: false,
                gone: false,
            }),
            deadline: AtomicI64::new(i64::MAX),
            used: AtomicBool::new(true),
        });
        partitions.insert(key.clone(), Arc::clone(&entry));
        Ok(entry)
    }

    /// Forgets a share partition whose state is gone, or that another broker leads now.
    pub(crate) fn evict(&self, key: &SharePartitionKey) {
        let removed = self.lock_partitions().remove(key);
        if let Some(entry) = removed {
            entry.lock().gone = true;
            entry.deadline.store(i64::MAX, Ordering::Relaxed);
        }
    }

    /// Replaces the persisted state of share partitions (AlterShareGroupOffsets,
    /// DeleteShareGroupOffsets): `rewrite` runs while no request can load `keys` or write their
    /// loaded copies (the map and each loaded one's lock held), and on `Ok` those copies are
    /// dropped, so the next request loads what `rewrite` wrote. On `Err` nothing changes here.
    pub fn rewrite_states<T, E>(
        &self,
        keys: &[SharePartitionKey],
        rewrite: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let keys: std::collections::BTreeSet<&SharePartitionKey> = keys.iter().collect();
        let mut partitions = self.lock_partitions();
        let entries: Vec<Arc<Entry>> = keys
            .iter()
            .filter_map(|key| partitions.get(*key).cloned())
            .collect();
        let mut slots: Vec<MutexGuard<'_, Slot>> = entries.iter().map(|e| e.lock()).collect();
        let result = rewrite();
        if result.is_ok() {
            for slot in &mut slots {
                slot.gone = true;
            }
            for key in keys {
                if let Some(entry) = partitions.remove(key) {
                    entry.deadline.store(i64::MAX, Ordering::Relaxed);
                }
            }
        }
        result
    }

    /// Writes what changed in `slot` since its last write; `Ok(None)` when nothing did.
    fn persist(
        &self,
        store: &dyn StateStore,
        key: &SharePartitionKey,
        slot: &mut Slot,
    ) -> Result<Option<i64>, PartitionError> {
        let delta = slot.sp.take_delta();
        if delta.is_none() && !slot.needs_snapshot {
            return Ok(None);
        }
        let record = match delta {
            Some(delta) if !slot.needs_snapshot && slot.deltas < SNAPSHOT_EVERY => {
                slot.deltas += 1;
                ShareStateRecord::Delta(delta)
            }
            _ => {
                slot.deltas = 0;
                ShareStateRecord::Snapshot(slot.sp.take_snapshot())
            }
        };
        match store.append(key, record) {
            Ok(end) => {
                slot.needs_snapshot = false;
                Ok(Some(end))
            }
            Err(ShareStateError::NotInitialized(_)) => {
                slot.gone = true;
                Err(PartitionError::unknown(key))
            }
            Err(e @ ShareStateError::NotLeader(_)) => {
                // Another broker claimed it (cluster mode): what is here is stale.
                slot.gone = true;
                Err(state_error(&e))
            }
            Err(e) => {
                slot.needs_snapshot = true;
                tracing::error!(group = %key.group_id, topic = %key.topic_id, partition = key.partition, error = %e, "cannot store a share partition's state");
                Err(PartitionError::new(
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                    "the share partition's state could not be stored",
                ))
            }
        }
    }

    /// Notes the share partition's earliest lock, waking the timer when it is earlier than
    /// what the timer waits for.
    fn note_deadline(&self, entry: &Entry, slot: &Slot) {
        let deadline = slot.sp.next_deadline().unwrap_or(i64::MAX);
        entry.deadline.store(deadline, Ordering::Relaxed);
        if deadline < self.armed.load(Ordering::Relaxed) {
            self.timers_changed.notify_one();
        }
    }

    /// Runs `change` on a loaded share partition and writes the result; a failed write takes
    /// the change back. `Ok` carries `change`'s value, the store offset written, and how many
    /// records became acknowledged or archived.
    fn change<T>(
        &self,
        store: &dyn StateStore,
        key: &SharePartitionKey,
        config: ShareConfig,
        change: impl FnOnce(&mut SharePartition) -> Result<T, PartitionError>,
    ) -> Result<(T, Option<i64>, u64), PartitionError> {
        let entry = self.entry(store, key, config)?;
        let mut slot = entry.lock();
        if slot.gone {
            return Err(PartitionError::unknown(key));
        }
        slot.sp.set_config(config);
        let backup = slot.sp.clone();
        let mark = terminal_mark(&slot.sp);
        let value = change(&mut slot.sp)?;
        let written = match self.persist(store, key, &mut slot) {
            Ok(written) => written,
            Err(e) => {
                slot.sp = backup;
                if slot.gone {
                    drop(slot);
                    self.evict(key);
                }
                return Err(e);
            }
        };
        let done = terminal_mark(&slot.sp).saturating_sub(mark);
        self.note_deadline(&entry, &slot);
        Ok((value, written, done))
    }

    /// Applies a member's acknowledgements to a share partition (all or none). Returns the store
    /// offset to wait for before answering.
    pub fn acknowledge(
        &self,
        store: &dyn StateStore,
        key: &SharePartitionKey,
        member: &str,
        batches: &[AckBatch],
        config: ShareConfig,
        now_ms: i64,
    ) -> Result<Option<i64>, PartitionError> {
        let (accepted, written, done) = self.change(store, key, config, |sp| {
            let start = sp.start_offset();
            sp.acknowledge(member, batches, now_ms)
                .map_err(|e| PartitionError::new(ErrorCode::from_code(e.code()), e.to_string()))?;
            Ok(accepted(batches, start))
        })?;
        self.counters
            .acknowledged
            .fetch_add(accepted, Ordering::Relaxed);
        self.counters
            .archived
            .fetch_add(done.saturating_sub(accepted), Ordering::Relaxed);
        // Released records are available again, and acknowledged ones may have made room in a
        // full window: waiting fetches look again (Kafka completes its delayed share fetches
        // after every acknowledgement).
        self.records_returned();
        Ok(written)
    }

    /// Acquires records of a share partition for a member: reads the log from the share
    /// partition's next fetch offset with `read` and takes what it may of it.
    pub fn acquire(
        &self,
        store: &dyn StateStore,
        key: &SharePartitionKey,
        request: &AcquireRequest<'_>,
        read: &mut dyn FnMut(i64) -> ReadOutcome,
    ) -> Result<Acquired, PartitionError> {
        let (acquired, _, archived) = self.change(store, key, request.config, |sp| {
            sp.log_start_moved(request.log_start);
            let mut failure = None;
            let mut acquired = Acquired::default();
            for _ in 0..MAX_READS {
                if request.max_records == 0 || !sp.can_acquire() {
                    break;
                }
                let offset = sp.next_fetch_offset();
                let chunk = match read(offset) {
                    ReadOutcome::Chunk(chunk) => chunk,
                    ReadOutcome::OutOfRange { log_start } => {
                        if sp.log_start_moved(log_start) {
                            continue;
                        }
                        break;
                    }
                    ReadOutcome::Failed(code) => {
                        failure = Some(code);
                        break;
                    }
                };
                if chunk.is_empty() {
                    break;
                }
                let batches = chunk.fetched();
                let fetch = Fetch {
                    fetch_offset: offset,
                    batches: &batches,
                    skip: chunk.skip(),
                };
                let got = sp.acquire(
                    request.member,
                    &fetch,
                    request.max_records,
                    request.mode,
                    request.now_ms,
                );
                if !got.is_empty() {
                    acquired.records = chunk.slice(&got);
                    acquired.count = got
                        .iter()
                        .map(|r| r.last_offset - r.first_offset + 1)
                        .fold(0u64, |total, n| {
                            total.saturating_add(u64::try_from(n).unwrap_or(0))
                        });
                    acquired.ranges =
                        split_by_batch_size(got, &batches, request.batch_size, request.mode);
                    break;
                }
                if sp.next_fetch_offset() == offset {
                    break;
                }
            }
            match failure {
                Some(code) if acquired.ranges.is_empty() => {
                    Err(PartitionError::new(code, "the partition could not be read"))
                }
                _ => Ok(acquired),
            }
        })?;
        let redelivered: u64 = acquired
            .ranges
            .iter()
            .filter(|r| r.delivery_count > 1)
            .map(|r| u64::try_from(r.last_offset - r.first_offset + 1).unwrap_or(0))
            .sum();
        self.counters
            .acquired
            .fetch_add(acquired.count, Ordering::Relaxed);
        self.counters
            .archived
            .fetch_add(archived, Ordering::Relaxed);
        self.counters
            .redelivered
            .fetch_add(redelivered, Ordering::Relaxed);
        Ok(acquired)
    }

    /// Where the next read of a share partition would start, when it could acquire anything
    /// (`None` when its window is full); for a share fetch that waits for `MinBytes`.
    pub fn next_fetch_offset(
        &self,
        store: &dyn StateStore,
        key: &SharePartitionKey,
        config: ShareConfig,
    ) -> Result<Option<i64>, PartitionError> {
        let entry = self.entry(store, key, config)?;
        let slot = entry.lock();
        if slot.gone {
            return Err(PartitionError::unknown(key));
        }
        Ok(slot.sp.can_acquire().then(|| slot.sp.next_fetch_offset()))
    }

    /// The loaded share partitions of a group.
    fn entries_of(&self, group_id: &str) -> Vec<(SharePartitionKey, Arc<Entry>)> {
        self.lock_partitions()
            .iter()
            .filter(|(key, _)| key.group_id == group_id)
            .map(|(key, entry)| (key.clone(), Arc::clone(entry)))
            .collect()
    }

    /// Releases every record `member` holds in the group's share partitions, the unfinished
    /// delivery not counted. Returns the last store offset written.
    pub fn release_member(
        &self,
        store: &dyn StateStore,
        group_id: &str,
        member: &str,
    ) -> Option<i64> {
        let mut last = None;
        let mut released = 0u64;
        for (key, entry) in self.entries_of(group_id) {
            let mut slot = entry.lock();
            if slot.gone {
                continue;
            }
            let n = slot.sp.release_member(member);
            if n == 0 {
                continue;
            }
            released += n;
            match self.persist(store, &key, &mut slot) {
                Ok(written) => last = last.max(written),
                Err(e) => {
                    tracing::warn!(group = group_id, member, error = %e.message, "released records not stored")
                }
            }
            self.note_deadline(&entry, &slot);
        }
        if released > 0 {
            tracing::debug!(
                group = group_id,
                member,
                released,
                "released a member's records"
            );
            self.records_returned();
        }
        last
    }

    /// Closes a share session and releases its member's records. Returns the last store offset
    /// written.
    pub fn close_session(&self, store: &dyn StateStore, key: &SessionKey) -> Option<i64> {
        self.lock_sessions().close(key);
        self.release_member(store, &key.group_id, &key.member_id)
    }

    /// A connection closed: its share sessions close and their members' records are released
    /// (Kafka's connection-disconnect listener).
    pub fn connection_closed(&self, store: &dyn StateStore, connection: u64) {
        let keys = self.lock_sessions().connection_closed(connection);
        for key in keys {
            self.release_member(store, &key.group_id, &key.member_id);
        }
    }

    /// Takes the events `take` gives and acts on them, one caller at a time. Returns the last
    /// store offset written.
    pub fn take_and_handle_events(
        &self,
        store: &dyn StateStore,
        take: impl FnOnce() -> Vec<ShareEvent>,
    ) -> Option<i64> {
        let _one_at_a_time = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let events = take();
        if events.is_empty() {
            return None;
        }
        self.handle_events(store, events)
    }

    /// Acts on the group coordinator's events. Returns the last store offset written.
    pub fn handle_events(&self, store: &dyn StateStore, events: Vec<ShareEvent>) -> Option<i64> {
        let mut last = None;
        for event in events {
            match event {
                ShareEvent::MemberGone {
                    group_id,
                    member_id,
                } => {
                    let key = SessionKey::new(group_id, member_id);
                    last = last.max(self.close_session(store, &key));
                }
                ShareEvent::StatesDeleted(keys) => {
                    for key in &keys {
                        self.evict(key);
                    }
                }
            }
        }
        last
    }

    /// Gives back the records whose lock ended at or before `now_ms`.
    pub fn expire_locks(&self, store: &dyn StateStore, now_ms: i64) {
        let due: Vec<(SharePartitionKey, Arc<Entry>)> = self
            .lock_partitions()
            .iter()
            .filter(|(_, e)| e.deadline.load(Ordering::Relaxed) <= now_ms)
            .map(|(key, entry)| (key.clone(), Arc::clone(entry)))
            .collect();
        let mut expired = 0u64;
        for (key, entry) in due {
            let mut slot = entry.lock();
            if slot.gone {
                continue;
            }
            let mark = terminal_mark(&slot.sp);
            let n = slot.sp.expire_locks(now_ms);
            expired += n;
            if n > 0 {
                if let Err(e) = self.persist(store, &key, &mut slot) {
                    tracing::warn!(group = %key.group_id, error = %e.message, "expired locks not stored");
                }
                let archived = terminal_mark(&slot.sp).saturating_sub(mark);
                self.counters
                    .archived
                    .fetch_add(archived, Ordering::Relaxed);
            }
            self.note_deadline(&entry, &slot);
        }
        if expired > 0 {
            tracing::debug!(expired, "share record locks expired");
            self.records_returned();
        }
    }

    /// The earliest record lock's end over every share partition, remembered as what the timer
    /// waits for.
    pub fn next_deadline(&self) -> Option<i64> {
        let next = self
            .lock_partitions()
            .values()
            .map(|e| e.deadline.load(Ordering::Relaxed))
            .min()
            .filter(|d| *d < i64::MAX);
        self.armed
            .store(next.unwrap_or(i64::MAX), Ordering::Relaxed);
        next
    }

    /// Unloads share partitions nobody used since the last call and of which no record is
    /// acquired (their state is all in the store: every change is written through), and, whatever
    /// they hold, those `keep` refuses (cluster mode: partitions another broker leads now, whose
    /// state that broker has claimed). Returns how many were unloaded. Called every
    /// [`UNLOAD_EVERY_MS`] by the broker's timer task, so memory holds the share partitions in
    /// use, not every one ever touched.
    pub fn unload_idle(&self, keep: &dyn Fn(&SharePartitionKey) -> bool) -> usize {
        let mut partitions = self.lock_partitions();
        let before = partitions.len();
        partitions.retain(|key, entry| {
            let used = entry.used.swap(false, Ordering::Relaxed);
            let mut slot = entry.lock();
            let unload = slot.gone || !keep(key) || (!used && slot.sp.counts().acquired == 0);
            if unload {
                slot.gone = true;
                entry.deadline.store(i64::MAX, Ordering::Relaxed);
            }
            !unload
        });
        before - partitions.len()
    }

    /// How many share partitions are loaded.
    pub fn loaded(&self) -> usize {
        self.lock_partitions().len()
    }

    /// How many records each member holds acquired now, by (group, member), over the loaded
    /// share partitions (the client-instance view and `GET /groups/{id}`).
    pub fn acquired_by_member(&self) -> BTreeMap<(String, String), u64> {
        let entries: Vec<(SharePartitionKey, Arc<Entry>)> = self
            .lock_partitions()
            .iter()
            .map(|(key, entry)| (key.clone(), Arc::clone(entry)))
            .collect();
        let mut out: BTreeMap<(String, String), u64> = BTreeMap::new();
        for (key, entry) in entries {
            let slot = entry.lock();
            if slot.gone {
                continue;
            }
            for (member, ranges) in slot.sp.acquired_ranges() {
                let n = ranges
                    .iter()
                    .map(|r| r.len())
                    .fold(0u64, u64::saturating_add);
                let total = out.entry((key.group_id.clone(), member)).or_default();
                *total = total.saturating_add(n);
            }
        }
        out
    }

    /// Records in flight and acquired, over every loaded share partition.
    pub fn gauges(&self) -> (u64, u64) {
        let entries: Vec<Arc<Entry>> = self.lock_partitions().values().cloned().collect();
        entries.iter().fold((0, 0), |(in_flight, acquired), entry| {
            let counts = entry.lock().sp.counts();
            (
                in_flight.saturating_add(counts.in_flight),
                acquired.saturating_add(counts.acquired),
            )
        })
    }
}

#[cfg(test)]
mod tests;
