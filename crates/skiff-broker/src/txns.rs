//! The transaction coordinator's home in the broker: the state machine of `skiff-txn` under one
//! lock and its persistence in an internal key-value log (`data.dir/__transactions`, what Kafka
//! keeps in `__transaction_state`). Carrying out a transaction's end (markers, offsets,
//! completion) is [`crate::txn_end`]'s, above the broker state.
//!
//! Lock order: a partition's producers lock, then this coordinator's lock (produce checks a
//! transactional batch against its transaction while holding the producers lock, so that no
//! marker can slip in between the check and the append); nothing here takes a partition lock
//! while holding the coordinator's.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::Result;
use bytes::Bytes;
use skiff_protocol::error_codes;
use skiff_txn::{Change, Transaction, TxnConfig, TxnCoordinator};

use crate::coordinator_store::{CoordinatorStore, Durable, Opened};
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
}

impl TransactionCoordinator {
    /// Restores every transactional ID from an opened store.
    pub fn open(opened: Opened, config: TxnConfig) -> Result<Self> {
        let Opened {
            store: kv,
            pairs,
            durable,
        } = opened;
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
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the transaction log is durable up to `end` (with `flush = always`).
    pub async fn wait_durable(&self, end: i64) -> Result<(), i16> {
        Opened::wait(self.durable.as_ref(), end).await.map_err(|e| {
            tracing::error!(error = %e, "syncing the transaction log failed");
            error_codes::KAFKA_STORAGE_ERROR
        })
    }
}

impl Inner {
    /// Persists the current state of `transactional_id` (or its deletion); returns the log end
    /// offset to wait for.
    pub fn persist(&mut self, transactional_id: &str) -> Result<i64, i16> {
        let value = match self.state.get(transactional_id) {
            Some(txn) => Some(Bytes::from(serde_json::to_vec(txn).map_err(|e| {
                tracing::error!(error = %e, "serialising a transaction");
                error_codes::UNKNOWN_SERVER_ERROR
            })?)),
            None => None,
        };
        let key = Bytes::copy_from_slice(transactional_id.as_bytes());
        let end = self.kv.append(&[(key, value)]).map_err(|e| {
            tracing::error!(error = %format!("{e:#}"), "cannot persist a transaction");
            error_codes::KAFKA_STORAGE_ERROR
        })?;
        self.maybe_compact();
        Ok(end)
    }

    /// Persists `transactional_id` if `change` says it changed.
    pub fn persist_if(&mut self, change: Change, transactional_id: &str) -> Result<i64, i16> {
        match change {
            Change::Changed => self.persist(transactional_id),
            Change::Unchanged => Ok(-1),
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

impl TxnVerifier for TransactionCoordinator {
    fn verify(&self, producer_id: i64, epoch: i16, topic: &str, partition: i32) -> Result<(), i16> {
        self.lock()
            .state
            .verify_produce(producer_id, epoch, (topic, partition))
    }
}
