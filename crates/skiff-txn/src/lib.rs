//! The transaction coordinator's state machine (Kafka's `TransactionCoordinator` and
//! `TransactionMetadata`), as plain data and pure functions: every call takes the current time,
//! nothing does I/O.
//!
//! One [`Transaction`] per transactional ID holds the producer ID and epoch it is bound to, its
//! state and the partitions and groups of the transaction in progress. The broker persists a
//! transaction after every call that changed it ([`Change`]), writes the markers an [`EndPlan`]
//! names, applies its offsets, then calls [`TxnCoordinator::complete`].
//!
//! States, as Kafka's: `Empty` (no transaction yet) → `Ongoing` (partitions added) →
//! `PrepareCommit`/`PrepareAbort` (markers being written) → `CompleteCommit`/`CompleteAbort`
//! → `Ongoing` again with the next AddPartitionsToTxn. A new InitProducerId bumps the epoch,
//! which fences the previous producer of the same transactional ID (aborting its open
//! transaction first); a transaction open longer than its timeout is aborted with a bumped epoch
//! for the same reason.
//!
//! Errors are Kafka error codes; the handlers map PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for
//! request versions that predate it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use skiff_protocol::ErrorCode;

const CONCURRENT_TRANSACTIONS: ErrorCode = ErrorCode::CONCURRENT_TRANSACTIONS;
const INVALID_PRODUCER_EPOCH: ErrorCode = ErrorCode::INVALID_PRODUCER_EPOCH;
const INVALID_PRODUCER_ID_MAPPING: ErrorCode = ErrorCode::INVALID_PRODUCER_ID_MAPPING;
const INVALID_TRANSACTION_TIMEOUT: ErrorCode = ErrorCode::INVALID_TRANSACTION_TIMEOUT;
const INVALID_TXN_STATE: ErrorCode = ErrorCode::INVALID_TXN_STATE;
const PRODUCER_FENCED: ErrorCode = ErrorCode::PRODUCER_FENCED;

/// Kafka's `transaction.max.timeout.ms` default: a producer may not ask for a longer timeout.
pub const DEFAULT_MAX_TIMEOUT_MS: i32 = 900_000;
/// Kafka's `transactional.id.expiration.ms` default: an idle transactional ID is forgotten.
pub const DEFAULT_ID_EXPIRATION_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// No producer epoch (a transactional ID whose producer ID was just allocated).
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// Coordinator settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnConfig {
    pub max_timeout_ms: i32,
    pub id_expiration_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            max_timeout_ms: DEFAULT_MAX_TIMEOUT_MS,
            id_expiration_ms: DEFAULT_ID_EXPIRATION_MS,
        }
    }
}

/// A transaction's state (Kafka's `TransactionState`, less the coordinator-internal `Dead`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    /// Every state, for listings and filters.
    pub const ALL: [TxnState; 6] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
    ];

    /// The name DescribeTransactions and ListTransactions use.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    /// PrepareCommit or PrepareAbort: an end decided and not carried out yet.
    pub fn is_preparing(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// A topic partition in a transaction.
pub type TopicPartition = (String, i32);

/// An offset a transaction commits for a group when it commits (TxnOffsetCommit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// One transactional ID's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump: a producer retrying an InitProducerId whose answer it
    /// lost presents it and gets the current epoch back.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// Groups added with AddOffsetsToTxn.
    pub groups: BTreeSet<String>,
    /// Offsets per group from TxnOffsetCommit, applied when the transaction commits.
    pub offsets: BTreeMap<String, Vec<PendingOffset>>,
    /// When the transaction in progress started (its first AddPartitionsToTxn/AddOffsetsToTxn).
    pub start_ms: i64,
    pub last_update_ms: i64,
}

/// What ending a transaction takes: a marker for each partition, the offsets to apply (commit
/// only). The broker does it, then calls [`TxnCoordinator::complete`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndPlan {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The epoch the markers carry.
    pub producer_epoch: i16,
    pub commit: bool,
    pub partitions: Vec<TopicPartition>,
    pub offsets: BTreeMap<String, Vec<PendingOffset>>,
    /// The groups added with AddOffsetsToTxn (cluster mode keeps their offsets beside the
    /// groups, and ends them there).
    pub groups: Vec<String>,
}

/// Whether a call changed what must be persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Changed,
}

/// The answer to InitProducerId.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// The producer ID and epoch to hand out (the transaction changed: persist it).
    Ready {
        producer_id: i64,
        producer_epoch: i16,
    },
    /// A transaction of the previous producer is open: it is now being aborted (persist, write
    /// the markers, complete), after which InitProducerId is answered by calling again.
    AbortFirst(EndPlan),
}

/// What [`TxnCoordinator::hanging`] says of a transaction open on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hanging {
    /// Its transaction is in progress with the partition, or being ended: leave it.
    InProgress,
    /// The producer is bound to no transactional ID here.
    Unknown,
    /// Close it with this marker.
    Close { commit: bool, epoch: i16 },
}

/// The answer to EndTxn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndOutcome {
    /// Persist, carry out the plan, complete.
    End(EndPlan),
    /// A retry of an end already completed: answer success.
    AlreadyDone,
}

/// Every transactional ID this coordinator knows.
#[derive(Debug, Clone, Default)]
pub struct TxnCoordinator {
    config: TxnConfig,
    txns: HashMap<String, Transaction>,
    /// Producer ID → transactional ID, for checking produced transactional batches.
    by_producer: HashMap<i64, String>,
}

fn bumped(epoch: i16) -> Option<i16> {
    // Kafka: an epoch reaching i16::MAX - 1 is exhausted; a new producer ID is allocated.
    let next = epoch.checked_add(1)?;
    (next < i16::MAX).then_some(next)
}

impl TxnCoordinator {
    pub fn new(config: TxnConfig) -> Self {
        TxnCoordinator {
            config,
            ..Default::default()
        }
    }

    /// A coordinator holding the persisted `txns` (at start).
    pub fn restore(config: TxnConfig, txns: impl IntoIterator<Item = Transaction>) -> Self {
        let mut c = TxnCoordinator::new(config);
        for txn in txns {
            c.by_producer
                .insert(txn.producer_id, txn.transactional_id.clone());
            c.txns.insert(txn.transactional_id.clone(), txn);
        }
        c
    }

    /// Cluster mode: takes in the transactions of a coordinator shard just loaded, replacing
    /// those `owned` says belong to it.
    pub fn load_shard(
        &mut self,
        owned: impl Fn(&str) -> bool,
        txns: impl IntoIterator<Item = Transaction>,
    ) {
        self.unload_shard(&owned);
        for txn in txns {
            self.by_producer
                .insert(txn.producer_id, txn.transactional_id.clone());
            self.txns.insert(txn.transactional_id.clone(), txn);
        }
    }

    /// Cluster mode: forgets the transactions `owned` says belong to a shard no longer held.
    pub fn unload_shard(&mut self, owned: impl Fn(&str) -> bool) {
        self.txns.retain(|id, _| !owned(id));
        self.by_producer.retain(|_, id| !owned(id));
    }

    /// The highest producer ID bound to a transactional ID (the allocator stays above it).
    pub fn max_producer_id(&self) -> Option<i64> {
        self.by_producer.keys().copied().max()
    }

    pub fn get(&self, transactional_id: &str) -> Option<&Transaction> {
        self.txns.get(transactional_id)
    }

    pub fn len(&self) -> usize {
        self.txns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }

    /// Every transaction, by transactional ID.
    pub fn all(&self) -> Vec<&Transaction> {
        let mut all: Vec<&Transaction> = self.txns.values().collect();
        all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        all
    }

    fn rebind(&mut self, transactional_id: &str, old_producer_id: i64, new_producer_id: i64) {
        if old_producer_id != new_producer_id {
            if self.by_producer.get(&old_producer_id).map(String::as_str) == Some(transactional_id)
            {
                self.by_producer.remove(&old_producer_id);
            }
            self.by_producer
                .insert(new_producer_id, transactional_id.to_string());
        }
    }

    /// InitProducerId with a transactional ID. `expected` is the producer ID and epoch the
    /// producer already has (v3+, KIP-360); `allocate` hands out a fresh producer ID.
    pub fn init_producer_id(
        &mut self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        now_ms: i64,
        allocate: &mut dyn FnMut() -> Result<i64, ErrorCode>,
    ) -> Result<InitOutcome, ErrorCode> {
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(INVALID_TRANSACTION_TIMEOUT);
        }
        let Some(txn) = self.txns.get_mut(transactional_id) else {
            // An unknown transactional ID gets a fresh producer ID, whatever ID the producer
            // presents (Kafka: the metadata was just created, so the new ID is safe to hand out).
            let producer_id = allocate()?;
            let txn = Transaction {
                transactional_id: transactional_id.to_string(),
                producer_id,
                producer_epoch: 0,
                last_producer_epoch: NO_PRODUCER_EPOCH,
                timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                groups: BTreeSet::new(),
                offsets: BTreeMap::new(),
                start_ms: -1,
                last_update_ms: now_ms,
            };
            self.by_producer
                .insert(producer_id, transactional_id.to_string());
            self.txns.insert(transactional_id.to_string(), txn);
            return Ok(InitOutcome::Ready {
                producer_id,
                producer_epoch: 0,
            });
        };
        if txn.state.is_preparing() {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        if let Some((id, _)) = expected
            && id != txn.producer_id
        {
            return Err(PRODUCER_FENCED);
        }
        if txn.state == TxnState::Ongoing {
            // Fence the previous producer and abort what it left open; the producer retries
            // nothing: the broker completes the abort and calls again.
            let old_id = txn.producer_id;
            match bumped(txn.producer_epoch) {
                Some(epoch) => {
                    txn.last_producer_epoch = txn.producer_epoch;
                    txn.producer_epoch = epoch;
                }
                None => {
                    // Exhausted: the abort markers use the current epoch; the re-init after
                    // it moves to a new producer ID.
                }
            }
            let plan = prepare_end(txn, false, now_ms);
            let id = txn.producer_id;
            self.rebind(transactional_id, old_id, id);
            return Ok(InitOutcome::AbortFirst(plan));
        }
        let (producer_id, producer_epoch) = match expected {
            Some((_, epoch))
                if epoch != txn.producer_epoch
                    && epoch == txn.last_producer_epoch
                    && txn.last_producer_epoch != NO_PRODUCER_EPOCH =>
            {
                // A retry after a bump the producer never heard of (or after a timeout abort
                // bumped it): the current epoch is its answer.
                (txn.producer_id, txn.producer_epoch)
            }
            Some((_, epoch)) if epoch != txn.producer_epoch => return Err(PRODUCER_FENCED),
            _ => match bumped(txn.producer_epoch) {
                Some(epoch) => (txn.producer_id, epoch),
                None => (allocate()?, 0),
            },
        };
        let old_id = txn.producer_id;
        if (producer_id, producer_epoch) != (txn.producer_id, txn.producer_epoch) {
            txn.last_producer_epoch = if producer_id == txn.producer_id {
                txn.producer_epoch
            } else {
                NO_PRODUCER_EPOCH
            };
        }
        txn.producer_id = producer_id;
        txn.producer_epoch = producer_epoch;
        txn.timeout_ms = timeout_ms;
        txn.state = TxnState::Empty;
        txn.partitions.clear();
        txn.groups.clear();
        txn.offsets.clear();
        txn.start_ms = -1;
        txn.last_update_ms = now_ms;
        self.rebind(transactional_id, old_id, producer_id);
        Ok(InitOutcome::Ready {
            producer_id,
            producer_epoch,
        })
    }

    /// The transaction of `transactional_id` if `producer_id`/`epoch` are its producer's.
    fn checked(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<&mut Transaction, ErrorCode> {
        let txn = self
            .txns
            .get_mut(transactional_id)
            .ok_or(INVALID_PRODUCER_ID_MAPPING)?;
        if txn.producer_id != producer_id {
            return Err(INVALID_PRODUCER_ID_MAPPING);
        }
        if txn.producer_epoch != producer_epoch {
            return Err(PRODUCER_FENCED);
        }
        Ok(txn)
    }

    /// AddPartitionsToTxn (v0-3): the partitions join the transaction, which starts if none is
    /// in progress.
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        now_ms: i64,
    ) -> Result<Change, ErrorCode> {
        let txn = self.checked(transactional_id, producer_id, producer_epoch)?;
        if txn.state.is_preparing() {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        if txn.state == TxnState::Ongoing && partitions.iter().all(|p| txn.partitions.contains(p)) {
            return Ok(Change::Unchanged);
        }
        begin_if_needed(txn, now_ms);
        txn.partitions.extend(partitions.iter().cloned());
        txn.last_update_ms = now_ms;
        Ok(Change::Changed)
    }

    /// AddOffsetsToTxn: the group's offsets (TxnOffsetCommit) join the transaction.
    pub fn add_offsets(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group_id: &str,
        now_ms: i64,
    ) -> Result<Change, ErrorCode> {
        let txn = self.checked(transactional_id, producer_id, producer_epoch)?;
        if txn.state.is_preparing() {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        if txn.state == TxnState::Ongoing && txn.groups.contains(group_id) {
            return Ok(Change::Unchanged);
        }
        begin_if_needed(txn, now_ms);
        txn.groups.insert(group_id.to_string());
        txn.last_update_ms = now_ms;
        Ok(Change::Changed)
    }

    /// TxnOffsetCommit: remembers offsets to commit for `group_id` if the transaction commits.
    /// The group must have been added (AddOffsetsToTxn) to the transaction in progress.
    pub fn commit_offsets(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group_id: &str,
        offsets: Vec<PendingOffset>,
        now_ms: i64,
    ) -> Result<Change, ErrorCode> {
        let txn = self
            .checked(transactional_id, producer_id, producer_epoch)
            .map_err(|code| {
                // TxnOffsetCommit has no PRODUCER_FENCED: Kafka answers a stale epoch with
                // INVALID_PRODUCER_EPOCH.
                if code == PRODUCER_FENCED {
                    INVALID_PRODUCER_EPOCH
                } else {
                    code
                }
            })?;
        if txn.state != TxnState::Ongoing || !txn.groups.contains(group_id) {
            return Err(INVALID_TXN_STATE);
        }
        let pending = txn.offsets.entry(group_id.to_string()).or_default();
        for offset in offsets {
            pending.retain(|p| {
                (p.topic.as_str(), p.partition) != (offset.topic.as_str(), offset.partition)
            });
            pending.push(offset);
        }
        txn.last_update_ms = now_ms;
        Ok(Change::Changed)
    }

    /// EndTxn: commit or abort the transaction in progress.
    pub fn end(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Result<EndOutcome, ErrorCode> {
        let txn = self.checked(transactional_id, producer_id, producer_epoch)?;
        match (txn.state, commit) {
            (TxnState::Ongoing, _) => Ok(EndOutcome::End(prepare_end(txn, commit, now_ms))),
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                Ok(EndOutcome::AlreadyDone)
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Err(CONCURRENT_TRANSACTIONS)
            }
            _ => Err(INVALID_TXN_STATE),
        }
    }

    /// Marks the transaction whose plan was carried out complete. Returns `Changed` when it was
    /// still preparing that end (and the change must be persisted).
    pub fn complete(&mut self, plan: &EndPlan, now_ms: i64) -> Change {
        let Some(txn) = self.txns.get_mut(&plan.transactional_id) else {
            return Change::Unchanged;
        };
        let preparing = if plan.commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        if txn.state != preparing || txn.producer_id != plan.producer_id {
            return Change::Unchanged;
        }
        txn.state = if plan.commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        txn.partitions.clear();
        txn.groups.clear();
        txn.offsets.clear();
        txn.start_ms = -1;
        txn.last_update_ms = now_ms;
        Change::Changed
    }

    /// The ends to carry out again after a restart (transactions persisted while preparing).
    pub fn unfinished(&self) -> Vec<EndPlan> {
        let mut plans: Vec<EndPlan> = self
            .txns
            .values()
            .filter(|t| t.state.is_preparing())
            .map(|t| plan_of(t, t.state == TxnState::PrepareCommit))
            .collect();
        plans.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        plans
    }

    /// Aborts every transaction open longer than its timeout, bumping its epoch so that its
    /// producer is fenced (Kafka's `abortTimedOutTransactions`). Each plan must be persisted,
    /// carried out and completed.
    pub fn abort_timed_out(&mut self, now_ms: i64) -> Vec<EndPlan> {
        let mut plans = Vec::new();
        for txn in self.txns.values_mut() {
            let deadline = txn.start_ms.saturating_add(i64::from(txn.timeout_ms));
            if txn.state == TxnState::Ongoing && now_ms > deadline {
                if let Some(epoch) = bumped(txn.producer_epoch) {
                    txn.last_producer_epoch = txn.producer_epoch;
                    txn.producer_epoch = epoch;
                }
                plans.push(prepare_end(txn, false, now_ms));
            }
        }
        plans.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        plans
    }

    /// Forgets transactional IDs idle (no transaction in progress) for the expiration time;
    /// returns them (their persisted records must be deleted).
    pub fn expire_ids(&mut self, now_ms: i64) -> Vec<String> {
        let horizon = now_ms.saturating_sub(self.config.id_expiration_ms);
        let expired: Vec<String> = self
            .txns
            .values()
            .filter(|t| {
                matches!(
                    t.state,
                    TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                ) && t.last_update_ms <= horizon
            })
            .map(|t| t.transactional_id.clone())
            .collect();
        for id in &expired {
            if let Some(txn) = self.txns.remove(id)
                && self.by_producer.get(&txn.producer_id) == Some(id)
            {
                self.by_producer.remove(&txn.producer_id);
            }
        }
        expired
    }

    /// The partitions of `group_id` with offsets a transaction in progress will commit (Kafka's
    /// pending transactional offsets: OffsetFetch with `require_stable` answers them with
    /// UNSTABLE_OFFSET_COMMIT until the transaction ends).
    pub fn pending_offsets(&self, group_id: &str) -> BTreeSet<TopicPartition> {
        self.txns
            .values()
            .filter(|t| matches!(t.state, TxnState::Ongoing | TxnState::PrepareCommit))
            .filter_map(|t| t.offsets.get(group_id))
            .flatten()
            .map(|o| (o.topic.clone(), o.partition))
            .collect()
    }

    /// The transaction `producer_id` is bound to, if any.
    pub fn by_producer(&self, producer_id: i64) -> Option<&Transaction> {
        self.by_producer
            .get(&producer_id)
            .and_then(|id| self.txns.get(id))
            .filter(|t| t.producer_id == producer_id)
    }

    /// A transaction the log holds open on `partition` for `producer_id` at `epoch` (long
    /// enough to look hanging): whether this coordinator still has it in progress (or is
    /// ending it), does not know the producer, or what marker closes it: its decision (commit
    /// after CompleteCommit at that epoch, abort otherwise), at an epoch no older than the
    /// log's.
    pub fn hanging(&self, producer_id: i64, epoch: i16, partition: (&str, i32)) -> Hanging {
        let Some(txn) = self.by_producer(producer_id) else {
            return Hanging::Unknown;
        };
        if txn.state.is_preparing() || self.verify_produce(producer_id, epoch, partition).is_ok() {
            return Hanging::InProgress;
        }
        Hanging::Close {
            commit: txn.state == TxnState::CompleteCommit && txn.producer_epoch == epoch,
            epoch: txn.producer_epoch.max(epoch),
        }
    }

    /// Checks a transactional batch a producer appends to `partition` (KIP-890's verification):
    /// its producer's transaction must be in progress with that partition added, or the batch
    /// would open a transaction no marker ever ends.
    pub fn verify_produce(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        partition: (&str, i32),
    ) -> Result<(), ErrorCode> {
        let txn = self
            .by_producer
            .get(&producer_id)
            .and_then(|id| self.txns.get(id))
            .filter(|t| t.producer_id == producer_id)
            .ok_or(INVALID_PRODUCER_ID_MAPPING)?;
        if producer_epoch < txn.producer_epoch {
            return Err(INVALID_PRODUCER_EPOCH);
        }
        let added = txn
            .partitions
            .iter()
            .any(|(t, p)| t == partition.0 && *p == partition.1);
        if producer_epoch != txn.producer_epoch || txn.state != TxnState::Ongoing || !added {
            return Err(INVALID_TXN_STATE);
        }
        Ok(())
    }
}

fn begin_if_needed(txn: &mut Transaction, now_ms: i64) {
    if txn.state != TxnState::Ongoing {
        txn.state = TxnState::Ongoing;
        txn.start_ms = now_ms;
        txn.partitions.clear();
        txn.groups.clear();
        txn.offsets.clear();
    }
}

fn plan_of(txn: &Transaction, commit: bool) -> EndPlan {
    EndPlan {
        transactional_id: txn.transactional_id.clone(),
        producer_id: txn.producer_id,
        producer_epoch: txn.producer_epoch,
        commit,
        partitions: txn.partitions.iter().cloned().collect(),
        offsets: if commit {
            txn.offsets.clone()
        } else {
            BTreeMap::new()
        },
        groups: txn.groups.iter().cloned().collect(),
    }
}

fn prepare_end(txn: &mut Transaction, commit: bool, now_ms: i64) -> EndPlan {
    txn.state = if commit {
        TxnState::PrepareCommit
    } else {
        TxnState::PrepareAbort
    };
    txn.last_update_ms = now_ms;
    plan_of(txn, commit)
}

#[cfg(test)]
mod tests;
