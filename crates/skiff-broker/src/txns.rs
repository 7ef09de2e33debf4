//! The transaction coordinator's home in the broker: the state machine of `skiff-txn` under one
//! lock and its persistence in an internal key-value log (`data.dir/__transactions`, what Kafka
//! keeps in `__transaction_state`). Carrying out a transaction's end (markers, offsets,
//! completion) is [`crate::txn_end`]'s, above the broker state.
//!
//! Lock order: a partition's producers lock, then this coordinator's lock (produce checks a
//! transactional batch against its transaction while holding the producers lock, so that no
//! marker can slip in between the check and the append); nothing here takes a partition lock
//! while holding the coordinator's.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::Result;
use bytes::Bytes;
use skiff_protocol::generated::ListTransactionsRequest;
use skiff_protocol::generated::describe_transactions_response::{
    TopicData, TransactionState as DescribedTransaction,
};
use skiff_protocol::generated::list_transactions_response::{
    ListTransactionsResponse, TransactionState as ListedTransaction,
};
use skiff_protocol::{ByteString, ErrorCode, error_codes};
use skiff_txn::{
    Change, EndOutcome, EndPlan, InitOutcome, PendingOffset, TopicPartition, Transaction,
    TxnConfig, TxnCoordinator, TxnState,
};

use crate::coordinator_store::{CoordinatorStore, Durable, Opened, StoreError};
use crate::partition::TxnVerifier;

/// The directory of the transaction log, inside the data directory.
pub const TXN_LOG_DIR: &str = "__transactions";
/// How often open transactions are checked against their timeouts (Kafka:
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms`, 10 s; shorter here because the
/// check is a scan of a map).
pub const TIMEOUT_CHECK_INTERVAL_MS: u64 = 1_000;

/// The coordinator state and the log it is persisted in.
pub struct Inner {
    pub state: TxnCoordinator,
    kv: Box<dyn CoordinatorStore>,
}

pub struct TransactionCoordinator {
    inner: Mutex<Inner>,
    durable: Option<Arc<dyn Durable>>,
    /// The transactional IDs whose end a task is carrying out now.
    ending: Mutex<HashSet<String>>,
}

/// How often cluster mode looks for hanging transactions (at most; or at half
/// `cluster.transaction.hanging.ms`), and for transactional offsets handed to its groups that
/// no announcement reported.
pub const SWEEP_INTERVAL_MS: u64 = 10_000;

impl TransactionCoordinator {
    /// Restores every transactional ID from an opened store.
    pub fn open(opened: Opened, config: TxnConfig) -> Result<Self> {
        let Opened {
            store: kv,
            pairs,
            durable,
        } = opened;
        let txns = read_transactions(pairs);
        tracing::info!(
            transactional_ids = txns.len(),
            "transaction coordinator loaded"
        );
        Ok(TransactionCoordinator {
            inner: Mutex::new(Inner {
                state: TxnCoordinator::restore(config, txns),
                kv,
            }),
            durable,
            ending: Mutex::default(),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the transaction log is durable up to `end` (with `flush = always`; in
    /// cluster mode, until the shard's write is in PostgreSQL).
    pub async fn wait_durable(&self, end: i64) -> Result<(), ErrorCode> {
        crate::coordinator_store::wait_durable(self.durable.as_ref(), end)
            .await
            .map_err(|e| {
                if matches!(e, StoreError::Log(_)) {
                    tracing::error!(error = %e, "syncing the transaction log failed");
                }
                e.code()
            })
    }

    /// Cluster mode: takes in the transactions of a shard just claimed (its `T` records),
    /// replacing what this broker held of the shard; returns how many.
    pub fn load_shard(&self, pairs: BTreeMap<Bytes, Bytes>, owned: impl Fn(&str) -> bool) -> usize {
        let txns = read_transactions(pairs);
        let count = txns.len();
        self.lock().state.load_shard(owned, txns);
        count
    }

    /// Cluster mode: forgets the transactions of a shard this broker no longer owns, and that
    /// their ends were being carried out here (an end still running fails its completion; when
    /// the shard comes back its ends are taken up again).
    pub fn unload_shard(&self, owned: impl Fn(&str) -> bool) {
        self.lock().state.unload_shard(&owned);
        self.ending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|id| !owned(id));
    }

    /// Marks the end of `transactional_id` as being carried out.
    pub fn start_ending(&self, transactional_id: &str) {
        self.ending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(transactional_id.to_string());
    }

    /// Whether a task is carrying out the end of `transactional_id` now.
    pub fn is_ending(&self, transactional_id: &str) -> bool {
        self.ending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(transactional_id)
    }

    /// The end of `transactional_id` is no longer being carried out.
    pub fn stop_ending(&self, transactional_id: &str) {
        self.ending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(transactional_id);
    }
}

/// The transactions in a coordinator's records (unreadable ones are skipped, with an error).
fn read_transactions(pairs: BTreeMap<Bytes, Bytes>) -> Vec<Transaction> {
    let mut txns = Vec::with_capacity(pairs.len());
    for (key, value) in pairs {
        match serde_json::from_slice::<Transaction>(&value) {
            Ok(txn) => txns.push(txn),
            Err(e) => tracing::error!(
                transactional_id = %String::from_utf8_lossy(&key),
                error = %e,
                "skipping an unreadable transaction record"
            ),
        }
    }
    txns
}

/// What a transaction record's key is about: the transactional ID it is (cluster mode places
/// the record in that ID's shard).
pub fn record_transaction(key: &[u8]) -> Option<&str> {
    std::str::from_utf8(key).ok()
}

impl Inner {
    /// Persists the current state of `transactional_id` (or its deletion); returns the log end
    /// offset to wait for.
    pub fn persist(&mut self, transactional_id: &str) -> Result<i64, ErrorCode> {
        let value = match self.state.get(transactional_id) {
            Some(txn) => Some(Bytes::from(serde_json::to_vec(txn).map_err(|e| {
                tracing::error!(error = %e, "serialising a transaction");
                ErrorCode::UNKNOWN_SERVER_ERROR
            })?)),
            None => None,
        };
        let key = Bytes::copy_from_slice(transactional_id.as_bytes());
        let end = self.kv.append(&[(key, value)]).map_err(|e| {
            if let Some(refused) = e.downcast_ref::<StoreError>() {
                // Cluster mode: the shard is not (or no longer) this broker's.
                return refused.code();
            }
            tracing::error!(error = %format!("{e:#}"), "cannot persist a transaction");
            ErrorCode::KAFKA_STORAGE_ERROR
        })?;
        self.maybe_compact();
        Ok(end)
    }

    /// Persists `transactional_id` if `change` says it changed.
    pub fn persist_if(
        &mut self,
        change: Change,
        transactional_id: &str,
    ) -> Result<Persisted, ErrorCode> {
        match change {
            Change::Changed => self.persist(transactional_id).map(Some),
            Change::Unchanged => Ok(None),
        }
    }

    fn maybe_compact(&mut self) {
        if !self.kv.needs_compaction() {
            return;
        }
        let pairs: Vec<(Bytes, Bytes)> = self
            .state
            .all()
            .into_iter()
            .filter_map(|txn| {
                let json = serde_json::to_vec(txn).ok()?;
                Some((
                    Bytes::copy_from_slice(txn.transactional_id.as_bytes()),
                    Bytes::from(json),
                ))
            })
            .collect();
        if let Err(e) = self.kv.compact(&pairs) {
            tracing::error!(error = %e, "transaction log compaction failed");
        }
    }
}

/// The transaction log offset a change must be durable up to before it is answered (`None`:
/// nothing changed, answer at once).
pub type Persisted = Option<i64>;

/// The coordinator's choreography, one method per transaction API: each runs the `skiff-txn`
/// state machine under the lock and persists what changed; the caller waits for
/// [`TransactionCoordinator::wait_durable`] before answering, and carries out ends
/// ([`crate::txn_end`]).
impl TransactionCoordinator {
    /// InitProducerId with a transactional ID: a producer ID and epoch, or the previous
    /// producer's transaction to abort first (then call again).
    pub fn init_producer_id(
        &self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        now: i64,
        allocate: &mut dyn FnMut() -> Result<i64, ErrorCode>,
    ) -> Result<(InitOutcome, Persisted), ErrorCode> {
        let mut inner = self.lock();
        let outcome =
            inner
                .state
                .init_producer_id(transactional_id, timeout_ms, expected, now, allocate)?;
        let end = inner.persist(transactional_id)?;
        Ok((outcome, Some(end)))
    }

    /// Runs one change of the state machine for `transactional_id` under the lock and
    /// persists it if it changed anything.
    fn change(
        &self,
        transactional_id: &str,
        change: impl FnOnce(&mut TxnCoordinator) -> Result<Change, ErrorCode>,
    ) -> Result<Persisted, ErrorCode> {
        let mut inner = self.lock();
        let change = change(&mut inner.state)?;
        inner.persist_if(change, transactional_id)
    }

    /// AddPartitionsToTxn (the partitions exist: the caller checked).
    pub fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TopicPartition],
        now: i64,
    ) -> Result<Persisted, ErrorCode> {
        self.change(transactional_id, |state| {
            state.add_partitions(transactional_id, producer_id, epoch, partitions, now)
        })
    }

    /// AddOffsetsToTxn.
    pub fn add_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group_id: &str,
        now: i64,
    ) -> Result<Persisted, ErrorCode> {
        self.change(transactional_id, |state| {
            state.add_offsets(transactional_id, producer_id, epoch, group_id, now)
        })
    }

    /// TxnOffsetCommit: the offsets wait in the transaction until it commits.
    pub fn commit_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group_id: &str,
        offsets: Vec<PendingOffset>,
        now: i64,
    ) -> Result<Persisted, ErrorCode> {
        self.change(transactional_id, |state| {
            state.commit_offsets(transactional_id, producer_id, epoch, group_id, offsets, now)
        })
    }

    /// EndTxn: the end to carry out once the prepare is durable, or `None` when this end was
    /// already done (a retry).
    pub fn end(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now: i64,
    ) -> Result<Option<(EndPlan, Persisted)>, ErrorCode> {
        let mut inner = self.lock();
        match inner
            .state
            .end(transactional_id, producer_id, epoch, commit, now)?
        {
            EndOutcome::End(plan) => {
                let end = inner.persist(transactional_id)?;
                Ok(Some((plan, Some(end))))
            }
            EndOutcome::AlreadyDone => Ok(None),
        }
    }

    /// The partitions of `group_id` a transaction in progress holds offsets for (OffsetFetch
    /// with `require_stable`).
    pub fn pending_offsets(&self, group_id: &str) -> BTreeSet<(String, i32)> {
        self.lock().state.pending_offsets(group_id)
    }

    /// DescribeTransactions: each ID's state, or TRANSACTIONAL_ID_NOT_FOUND.
    pub fn describe(&self, ids: &[ByteString]) -> Vec<DescribedTransaction> {
        let inner = self.lock();
        ids.iter()
            .map(|id| match inner.state.get(id) {
                None => DescribedTransaction {
                    error_code: error_codes::TRANSACTIONAL_ID_NOT_FOUND,
                    transactional_id: id.clone(),
                    transaction_state: ByteString::from_static(""),
                    producer_id: -1,
                    producer_epoch: -1,
                    transaction_start_time_ms: -1,
                    ..Default::default()
                },
                Some(txn) => DescribedTransaction {
                    error_code: error_codes::NONE,
                    transactional_id: id.clone(),
                    transaction_state: ByteString::from(txn.state.name().to_string()),
                    transaction_timeout_ms: txn.timeout_ms,
                    transaction_start_time_ms: txn.start_ms,
                    producer_id: txn.producer_id,
                    producer_epoch: txn.producer_epoch,
                    topics: topic_data(&txn.partitions),
                    ..Default::default()
                },
            })
            .collect()
    }

    /// ListTransactions with its state, producer and duration (v1) filters.
    pub fn list(&self, request: &ListTransactionsRequest, now: i64) -> ListTransactionsResponse {
        let unknown_state_filters: Vec<_> = request
            .state_filters
            .iter()
            .filter(|f| !TxnState::ALL.iter().any(|s| s.name() == &***f))
            .cloned()
            .collect();
        let inner = self.lock();
        let transaction_states = inner
            .state
            .all()
            .into_iter()
            .filter(|t| {
                request.state_filters.is_empty()
                    || request.state_filters.iter().any(|f| **f == *t.state.name())
            })
            .filter(|t| {
                request.producer_id_filters.is_empty()
                    || request.producer_id_filters.contains(&t.producer_id)
            })
            .filter(|t| {
                // v1: only transactions running longer than the filter (ms); -1 = any.
                request.duration_filter < 0
                    || (t.state == TxnState::Ongoing
                        && now.saturating_sub(t.start_ms) > request.duration_filter)
            })
            .map(|t| ListedTransaction {
                transactional_id: ByteString::from(t.transactional_id.clone()),
                producer_id: t.producer_id,
                transaction_state: ByteString::from(t.state.name().to_string()),
                ..Default::default()
            })
            .collect();
        ListTransactionsResponse {
            error_code: error_codes::NONE,
            unknown_state_filters,
            transaction_states,
            ..Default::default()
        }
    }
}

/// The topics of a transaction, grouped by topic.
fn topic_data(partitions: &BTreeSet<TopicPartition>) -> Vec<TopicData> {
    let mut out: Vec<TopicData> = Vec::new();
    for (topic, index) in partitions {
        match out.last_mut() {
            Some(last) if *last.topic == **topic => last.partitions.push(*index),
            _ => out.push(TopicData {
                topic: ByteString::from(topic.clone()),
                partitions: vec![*index],
                ..Default::default()
            }),
        }
    }
    out
}

impl TxnVerifier for TransactionCoordinator {
    fn verify(
        &self,
        producer_id: i64,
        epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), ErrorCode> {
        self.lock()
            .state
            .verify_produce(producer_id, epoch, (topic, partition))
    }
}
