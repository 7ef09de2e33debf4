//! Fetching: `poll`, the long-poll Fetch to each leader, applying a Fetch response to the
//! positions (offset out of range resets), and the read_committed filter of aborted transactions.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::Duration;

use skiff_protocol::generated::FetchRequest;
use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic};
use skiff_protocol::{Uuid, error_codes};
use skiff_records::RecordBatches;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::util::{backoff, lock};

use super::{Consumer, ConsumerRecord, IsolationLevel, TopicPartition, max_decompressed_bytes};

impl Consumer {
    /// Waits up to `timeout` for records. Returns an empty batch when none arrived in time.
    pub async fn poll(&self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.inner.closed.load(Ordering::Acquire) {
                return Err(Error::Closed("consumer"));
            }
            if let Some(e) = lock(&self.inner.state).fatal.clone() {
                return Err(e);
            }
            self.maybe_auto_commit().await;
            let changed = self.inner.assignment_changed.notified();
            self.initialize_positions().await?;
            let fetchable = self.fetchable();
            if fetchable.is_empty() {
                tokio::select! {
                    _ = changed => continue,
                    _ = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
                }
            }
            let wait = self
                .inner
                .config
                .fetch_max_wait
                .min(deadline.saturating_duration_since(Instant::now()));
            let records = self.fetch(fetchable, wait).await?;
            crate::telemetry::ClientMetrics::add(
                &self.inner.client.telemetry().metrics.records_consumed,
                records.len() as u64,
            );
            if !records.is_empty() || Instant::now() >= deadline {
                return Ok(records);
            }
        }
    }

    pub(super) fn fetchable(&self) -> Vec<(TopicPartition, Uuid, i64)> {
        lock(&self.inner.state)
            .assigned
            .iter()
            .filter(|(_, p)| !p.paused)
            .filter_map(|(tp, p)| p.position.map(|pos| (tp.clone(), p.topic_id, pos)))
            .collect()
    }

    pub(super) async fn fetch(
        &self,
        partitions: Vec<(TopicPartition, Uuid, i64)>,
        wait: Duration,
    ) -> Result<Vec<ConsumerRecord>> {
        let client = &self.inner.client;
        let mut by_node: BTreeMap<i32, Vec<(TopicPartition, Uuid, i64)>> = BTreeMap::new();
        for (tp, id, pos) in partitions {
            let topic = client.topic(&tp.topic).await?;
            let id = if id.is_zero() { topic.id } else { id };
            let leader = topic
                .partition(tp.partition)
                .map(|p| p.leader)
                .ok_or_else(|| Error::UnknownPartition {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                })?;
            by_node.entry(leader).or_default().push((tp, id, pos));
        }
        let futures = by_node
            .into_iter()
            .map(|(node, parts)| self.fetch_from(node, parts, wait));
        let results = futures::future::join_all(futures).await;
        let mut out = Vec::new();
        let mut first_err = None;
        for r in results {
            match r {
                Ok(records) => out.extend(records),
                Err(e) if e.is_retriable() => {
                    let generation = client.cached_metadata().generation;
                    client.invalidate_metadata(generation);
                    tracing::debug!(error = %e, "fetch failed; will retry");
                    if out.is_empty() {
                        tokio::time::sleep(backoff(
                            client.config().retry_backoff,
                            Duration::from_secs(1),
                            0,
                        ))
                        .await;
                    }
                }
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        match first_err {
            Some(e) if out.is_empty() => Err(e),
            _ => Ok(out),
        }
    }

    pub(super) async fn fetch_from(
        &self,
        node: i32,
        parts: Vec<(TopicPartition, Uuid, i64)>,
        wait: Duration,
    ) -> Result<Vec<ConsumerRecord>> {
        let config = &self.inner.config;
        let mut topics: BTreeMap<(String, Uuid), Vec<FetchPartition>> = BTreeMap::new();
        for (tp, id, pos) in &parts {
            topics
                .entry((tp.topic.clone(), *id))
                .or_default()
                .push(FetchPartition {
                    partition: tp.partition,
                    fetch_offset: *pos,
                    partition_max_bytes: config.max_partition_fetch_bytes,
                    ..Default::default()
                });
        }
        let names_by_id: HashMap<Uuid, String> =
            topics.keys().map(|(n, id)| (*id, n.clone())).collect();
        let request = FetchRequest {
            isolation_level: config.isolation_level.code(),
            max_wait_ms: wait.as_millis().min(i32::MAX as u128) as i32,
            min_bytes: config.fetch_min_bytes,
            max_bytes: config.fetch_max_bytes,
            topics: topics
                .into_iter()
                .map(|((name, id), partitions)| FetchTopic {
                    topic: name.into(),
                    topic_id: id,
                    partitions,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let timeout = self.inner.client.config().request_timeout + wait;
        let response = self
            .inner
            .client
            .request_with_timeout(node, timeout, |_| request)
            .await?;
        if response.error_code != error_codes::NONE {
            return Err(Error::broker("Fetch", response.error_code, None));
        }
        let (out, reset) = self.apply_fetch(response, &names_by_id, &parts)?;
        if !reset.is_empty() {
            self.reset_positions(&reset).await?;
        }
        Ok(out)
    }

    /// Applies a Fetch response to the positions; returns the records and the partitions whose
    /// offset was out of range.
    #[allow(clippy::type_complexity)]
    pub(super) fn apply_fetch(
        &self,
        response: skiff_protocol::generated::FetchResponse,
        names_by_id: &HashMap<Uuid, String>,
        parts: &[(TopicPartition, Uuid, i64)],
    ) -> Result<(Vec<ConsumerRecord>, Vec<TopicPartition>)> {
        let mut out = Vec::new();
        let mut reset = Vec::new();
        let mut state = lock(&self.inner.state);
        let state = &mut *state;
        for topic in response.responses {
            let name = if topic.topic.is_empty() {
                match names_by_id.get(&topic.topic_id) {
                    Some(n) => n.clone(),
                    None => continue,
                }
            } else {
                topic.topic.to_string()
            };
            for p in topic.partitions {
                let tp = TopicPartition::new(name.clone(), p.partition_index);
                let Some(part) = state.assigned.get_mut(&tp) else {
                    continue; // revoked meanwhile
                };
                if p.error_code == error_codes::OFFSET_OUT_OF_RANGE {
                    part.position = None;
                    reset.push(tp);
                    continue;
                }
                if p.error_code != error_codes::NONE {
                    tracing::debug!(%tp, code = p.error_code, "fetch partition error");
                    if crate::error::is_retriable_code(p.error_code) {
                        let generation = self.inner.client.cached_metadata().generation;
                        self.inner.client.invalidate_metadata(generation);
                        continue;
                    }
                    return Err(Error::broker_for(
                        "Fetch",
                        p.error_code,
                        tp.to_string(),
                        None,
                    ));
                }
                // Lag is measured to what this consumer can read: for read_committed, the last
                // stable offset (as Kafka's consumers do).
                part.high_watermark = match self.inner.config.isolation_level {
                    IsolationLevel::ReadCommitted if p.last_stable_offset >= 0 => {
                        p.last_stable_offset
                    }
                    _ => p.high_watermark,
                };
                let Some(mut position) = part.position else {
                    continue;
                };
                let requested = parts
                    .iter()
                    .find(|(t, _, _)| *t == tp)
                    .map(|(_, _, pos)| *pos);
                if requested != Some(position) {
                    continue; // seeked meanwhile
                }
                let records = p.records.unwrap_or_default();
                let max_decompressed = max_decompressed_bytes(&self.inner.config);
                let mut aborted = AbortedFilter::new(p.aborted_transactions.unwrap_or_default());
                for batch in RecordBatches::new(records) {
                    let Ok(batch) = batch else { break }; // partial trailing batch
                    if batch.next_offset() <= position {
                        continue;
                    }
                    if aborted.skips(&batch) {
                        position = batch.next_offset();
                        continue;
                    }
                    let iter = batch
                        .decompressed_records(max_decompressed)
                        .map_err(|e| Error::Records(format!("{tp}: {e}")))?;
                    for record in iter {
                        let record = record.map_err(|e| Error::Records(format!("{tp}: {e}")))?;
                        if record.offset < position {
                            continue;
                        }
                        position = record.offset + 1;
                        out.push(ConsumerRecord {
                            topic: name.clone(),
                            partition: p.partition_index,
                            offset: record.offset,
                            timestamp: record.timestamp,
                            key: record.key,
                            value: record.value,
                            headers: record
                                .headers
                                .iter()
                                .map(|h| (String::from_utf8_lossy(&h.key).into_owned(), h.value))
                                .collect(),
                        });
                    }
                    position = position.max(batch.next_offset());
                }
                part.position = Some(position);
            }
        }
        Ok((out, reset))
    }
}

/// Drops the records of aborted transactions from a read_committed Fetch, as Kafka's consumers do:
/// a transactional batch of a producer whose aborted transaction (listed by the broker with its
/// first offset) has started is skipped until that producer's abort marker; control batches
/// (markers) are never returned.
pub(super) struct AbortedFilter {
    /// Aborted transactions not reached yet, by first offset (smallest last).
    pending: Vec<(i64, i64)>,
    /// Producers inside an aborted transaction at the current batch.
    active: std::collections::HashSet<i64>,
}

impl AbortedFilter {
    pub(super) fn new(
        list: Vec<skiff_protocol::generated::fetch_response::AbortedTransaction>,
    ) -> AbortedFilter {
        let mut pending: Vec<(i64, i64)> = list
            .into_iter()
            .map(|a| (a.first_offset, a.producer_id))
            .collect();
        pending.sort_unstable_by(|a, b| b.cmp(a));
        AbortedFilter {
            pending,
            active: Default::default(),
        }
    }

    /// Whether `batch` is not for the application: a marker, or data of an aborted transaction.
    pub(super) fn skips(&mut self, batch: &skiff_records::RecordBatch) -> bool {
        if batch.is_control() {
            if skiff_records::control_record_type(batch)
                == Some(skiff_records::ControlRecordType::Abort)
            {
                self.active.remove(&batch.producer_id());
            }
            return true;
        }
        if !batch.is_transactional() {
            return false;
        }
        while let Some(&(first, producer_id)) = self.pending.last() {
            if first > batch.last_offset() {
                break;
            }
            self.active.insert(producer_id);
            self.pending.pop();
        }
        self.active.contains(&batch.producer_id())
    }
}
