//! The transactional producer's conversation with its transaction coordinator (KIP-98):
//! InitProducerId with the transactional ID, AddPartitionsToTxn before the first batch to a
//! partition, AddOffsetsToTxn + TxnOffsetCommit for `send_offsets_to_transaction`, EndTxn.
//!
//! Coordinator calls retry what Kafka's clients retry (CONCURRENT_TRANSACTIONS while an end is
//! being written, coordinator moves and loads) until the request timeout; fencing
//! (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) is fatal for the producer; any other failure of the
//! transaction in progress leaves it to be aborted.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use skiff_protocol::generated::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use skiff_protocol::generated::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use skiff_protocol::generated::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest,
    TxnOffsetCommitRequest,
};
use skiff_protocol::{RequestBody, error_codes};

use crate::client::Client;
use crate::consumer::{GroupMetadata, TopicPartition};
use crate::error::{Error, Result};
use crate::util::{backoff, lock};

/// Where the transaction of a producer stands.
#[derive(Debug, Default)]
pub(crate) struct TxnState {
    /// `begin_transaction` was called and no commit or abort since.
    pub open: bool,
    /// Partitions added to the transaction in progress.
    pub added: BTreeSet<(String, i32)>,
    /// Whether anything (partitions or offsets) was added: an end is then sent.
    pub started: bool,
    /// The first failure of the transaction in progress: it can only be aborted.
    pub failed: Option<Error>,
    /// Fenced by a newer producer with the same transactional ID: nothing more works.
    pub fatal: Option<Error>,
}

impl TxnState {
    /// A fresh transaction (`open`) or none; what was added and what failed is forgotten.
    pub fn reset(&mut self, open: bool) {
        self.open = open;
        self.started = false;
        self.failed = None;
        self.added.clear();
    }
}

/// A transactional producer's identity and state.
pub(crate) struct Transactional {
    pub transactional_id: String,
    pub timeout: Duration,
    pub state: Mutex<TxnState>,
}

fn is_fencing(code: i16) -> bool {
    matches!(
        code,
        error_codes::PRODUCER_FENCED
            | error_codes::INVALID_PRODUCER_EPOCH
            | error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )
}

fn is_retriable_for_txn(error: &Error) -> bool {
    error.is_retriable() || error.code() == Some(error_codes::CONCURRENT_TRANSACTIONS)
}

impl Transactional {
    pub fn new(transactional_id: String, timeout: Duration) -> Transactional {
        Transactional {
            transactional_id,
            timeout,
            state: Mutex::new(TxnState::default()),
        }
    }

    /// Fails unless the producer may still work (not fenced).
    pub fn check_alive(&self) -> Result<()> {
        match &lock(&self.state).fatal {
            Some(e) => Err(Error::Transaction(format!("the producer is fenced: {e}"))),
            None => Ok(()),
        }
    }

    /// Records the failure of something in the transaction in progress.
    pub fn fail(&self, error: &Error) {
        let mut state = lock(&self.state);
        if error.code().is_some_and(is_fencing) {
            state.fatal.get_or_insert_with(|| error.clone());
        }
        state.failed.get_or_insert_with(|| error.clone());
    }

    /// Sends one request to the transaction coordinator, retrying what may succeed later, until
    /// the request timeout. `code_of` picks the error code out of the response.
    async fn request<R: RequestBody>(
        &self,
        client: &Client,
        build: impl Fn(i16) -> R,
        code_of: impl Fn(&R::Response) -> i16,
    ) -> Result<R::Response> {
        let deadline = Instant::now() + client.config().request_timeout;
        let mut attempt = 0;
        loop {
            let node = client
                .transaction_coordinator(&self.transactional_id)
                .await?;
            let result = match client.request(node, &build).await {
                Ok(response) => match code_of(&response) {
                    error_codes::NONE => Ok(response),
                    code => Err(Error::broker(R::API_KEY.name(), code, None)),
                },
                Err(e) => Err(e),
            };
            match result {
                Ok(response) => return Ok(response),
                Err(e) if is_retriable_for_txn(&e) && Instant::now() < deadline => {
                    if matches!(
                        e.code(),
                        Some(error_codes::NOT_COORDINATOR | error_codes::COORDINATOR_NOT_AVAILABLE)
                    ) || e.code().is_none()
                    {
                        client.invalidate_transaction_coordinator(&self.transactional_id);
                    }
                    // CONCURRENT_TRANSACTIONS clears within milliseconds: retry soon.
                    let base = if e.code() == Some(error_codes::CONCURRENT_TRANSACTIONS) {
                        Duration::from_millis(20)
                    } else {
                        client.config().retry_backoff
                    };
                    tokio::time::sleep(backoff(base, Duration::from_secs(1), attempt)).await;
                    attempt += 1;
                }
                Err(e) => {
                    if e.code().is_some_and(is_fencing) {
                        lock(&self.state).fatal.get_or_insert_with(|| e.clone());
                    }
                    return Err(e);
                }
            }
        }
    }

    /// InitProducerId with the transactional ID: the producer ID and epoch, fencing any older
    /// producer with the same transactional ID.
    pub async fn init(&self, client: &Client) -> Result<(i64, i16)> {
        let timeout_ms = i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX);
        let response = self
            .request(
                client,
                |_| InitProducerIdRequest {
                    transactional_id: Some(self.transactional_id.as_str().into()),
                    transaction_timeout_ms: timeout_ms,
                    producer_id: -1,
                    producer_epoch: -1,
                    ..Default::default()
                },
                |r| r.error_code,
            )
            .await?;
        Ok((response.producer_id, response.producer_epoch))
    }

    /// Adds `partitions` (those not added yet) to the transaction in progress.
    pub async fn add_partitions(
        &self,
        client: &Client,
        (producer_id, producer_epoch): (i64, i16),
        partitions: &[(String, i32)],
    ) -> Result<()> {
        let new: Vec<(String, i32)> = {
            let state = lock(&self.state);
            partitions
                .iter()
                .filter(|p| !state.added.contains(*p))
                .cloned()
                .collect()
        };
        if new.is_empty() {
            return Ok(());
        }
        let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
        for (topic, partition) in &new {
            match topics.iter_mut().find(|t| *t.name == **topic) {
                Some(t) => t.partitions.push(*partition),
                None => topics.push(AddPartitionsToTxnTopic {
                    name: topic.as_str().into(),
                    partitions: vec![*partition],
                    ..Default::default()
                }),
            }
        }
        self.request(
            client,
            |_| AddPartitionsToTxnRequest {
                v3_and_below_transactional_id: self.transactional_id.as_str().into(),
                v3_and_below_producer_id: producer_id,
                v3_and_below_producer_epoch: producer_epoch,
                v3_and_below_topics: topics.clone(),
                ..Default::default()
            },
            |r| {
                r.results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| &t.results_by_partition)
                    .map(|p| p.partition_error_code)
                    .find(|c| *c != error_codes::NONE)
                    .unwrap_or(r.error_code)
            },
        )
        .await?;
        let mut state = lock(&self.state);
        state.added.extend(new);
        state.started = true;
        Ok(())
    }

    /// AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator: the offsets commit
    /// with the transaction.
    pub async fn send_offsets(
        &self,
        client: &Client,
        (producer_id, producer_epoch): (i64, i16),
        offsets: &[(TopicPartition, i64)],
        group: &GroupMetadata,
    ) -> Result<()> {
        self.request(
            client,
            |_| AddOffsetsToTxnRequest {
                transactional_id: self.transactional_id.as_str().into(),
                producer_id,
                producer_epoch,
                group_id: group.group_id.as_str().into(),
                ..Default::default()
            },
            |r| r.error_code,
        )
        .await?;
        lock(&self.state).started = true;
        let mut topics: Vec<TxnOffsetCommitRequestTopic> = Vec::new();
        for (tp, offset) in offsets {
            let partition = TxnOffsetCommitRequestPartition {
                partition_index: tp.partition,
                committed_offset: *offset,
                committed_leader_epoch: -1,
                ..Default::default()
            };
            match topics.iter_mut().find(|t| *t.name == *tp.topic) {
                Some(t) => t.partitions.push(partition),
                None => topics.push(TxnOffsetCommitRequestTopic {
                    name: tp.topic.as_str().into(),
                    partitions: vec![partition],
                    ..Default::default()
                }),
            }
        }
        let r = client
            .request_coordinator(&group.group_id, |_| TxnOffsetCommitRequest {
                transactional_id: self.transactional_id.as_str().into(),
                group_id: group.group_id.as_str().into(),
                producer_id,
                producer_epoch,
                generation_id: group.generation_id,
                member_id: group.member_id.as_str().into(),
                topics,
                ..Default::default()
            })
            .await?;
        match r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.error_code)
            .find(|c| *c != error_codes::NONE)
        {
            Some(code) => Err(Error::broker("TxnOffsetCommit", code, None)),
            None => Ok(()),
        }
    }

    /// EndTxn: commits or aborts the transaction in progress.
    pub async fn end(
        &self,
        client: &Client,
        (producer_id, producer_epoch): (i64, i16),
        commit: bool,
    ) -> Result<()> {
        self.request(
            client,
            |_| EndTxnRequest {
                transactional_id: self.transactional_id.as_str().into(),
                producer_id,
                producer_epoch,
                committed: commit,
                ..Default::default()
            },
            |r| r.error_code,
        )
        .await
        .map(|_| ())
    }
}
