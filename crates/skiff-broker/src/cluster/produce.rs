//! The produce pipeline of cluster mode: batches of every partition gather for up to
//! `produce.commit.interval.ms` (or until `produce.buffer.max.bytes`), go up as one object, then
//! are committed in one PostgreSQL transaction ([`skiff_cluster::log::commit`]). Only then are
//! the producers answered. Commits run one at a time, in the order the batches arrived, so a
//! producer's pipelined batches keep their order; the next object gathers meanwhile.
//!
//! A failed upload or commit answers KAFKA_STORAGE_ERROR and commits nothing (an object whose
//! commit failed is left to the orphan sweep, which deletes it only once PostgreSQL does not
//! know it: a commit whose answer was lost may still have landed). A broker fenced (its lease
//! lapsed) answers NOT_LEADER_OR_FOLLOWER.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use skiff_cluster::DbError;
use skiff_cluster::commit::{Append, BatchInfo, PartitionKey, Verdict};
use skiff_protocol::ErrorCode;
use tokio::sync::{Notify, oneshot};

use super::Cluster;
use crate::clock::now_ms;

/// What became of a partition's batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `commit_ms`: the commit's time (the log append time of `LogAppendTime` topics).
    Committed {
        verdict: Verdict,
        log_start: i64,
        commit_ms: i64,
    },
    Failed {
        code: ErrorCode,
        message: String,
    },
}

#[derive(Default)]
struct Pending {
    bytes: BytesMut,
    appends: Vec<Append>,
    waiters: Vec<oneshot::Sender<Outcome>>,
    /// When the first of these batches arrived.
    since: Option<tokio::time::Instant>,
}

/// The batches waiting for the next object.
pub struct Pipeline {
    pending: Mutex<Pending>,
    wake: Notify,
    buffer_max: usize,
}

impl Pipeline {
    pub fn new(buffer_max: usize) -> Pipeline {
        Pipeline {
            pending: Mutex::new(Pending::default()),
            wake: Notify::new(),
            buffer_max,
        }
    }

    /// Queues one partition's batches (`batches`' byte offsets are within `records`) for the
    /// next object.
    pub fn submit(
        &self,
        key: PartitionKey,
        records: &Bytes,
        mut batches: Vec<BatchInfo>,
    ) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            let base = p.bytes.len() as u64;
            for b in &mut batches {
                b.byte_offset += base;
            }
            p.bytes.extend_from_slice(records);
            p.appends.push(Append { key, batches });
            p.waiters.push(tx);
            if p.since.is_none() {
                p.since = Some(tokio::time::Instant::now());
            }
        }
        // Wakes the flusher: it starts the interval on a first batch, and cuts the object at
        // once when the buffer is full.
        self.wake.notify_one();
        rx
    }

    /// Takes the next object's worth: the appends in order up to `buffer_max` bytes (at least
    /// one); the rest stays for the next object.
    fn take(&self) -> Pending {
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if p.bytes.len() <= self.buffer_max {
            return std::mem::take(&mut *p);
        }
        let mut count = 0;
        let mut size = 0u64;
        for append in &p.appends {
            let bytes: u64 = append.batches.iter().map(|b| u64::from(b.byte_size)).sum();
            if count > 0 && size + bytes > self.buffer_max as u64 {
                break;
            }
            size += bytes;
            count += 1;
        }
        let rest_appends = p.appends.split_off(count);
        let rest_waiters = p.waiters.split_off(count);
        let rest_bytes = p.bytes.split_off(size as usize);
        let mut rest = Pending {
            bytes: rest_bytes,
            appends: rest_appends,
            waiters: rest_waiters,
            since: p.since,
        };
        // The rest's byte offsets start again from 0 in its own object.
        for append in &mut rest.appends {
            for b in &mut append.batches {
                b.byte_offset -= size;
            }
        }
        std::mem::replace(&mut *p, rest)
    }

    fn state(&self) -> (Option<tokio::time::Instant>, usize) {
        let p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        (p.since, p.bytes.len())
    }
}

fn fail(waiters: Vec<oneshot::Sender<Outcome>>, code: ErrorCode, message: &str) {
    for w in waiters {
        let _ = w.send(Outcome::Failed {
            code,
            message: message.to_string(),
        });
    }
}

/// Cuts objects and commits them until `shutdown`; what is pending then is committed before
/// it returns.
pub async fn run(cluster: Arc<Cluster>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = Duration::from_millis(cluster.config.commit_interval_ms);
    // The commit of the previous object runs while the next one uploads; commits stay one at a
    // time and in order.
    let mut committing: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        let (since, bytes) = cluster.pipeline.state();
        let Some(since) = since else {
            tokio::select! {
                _ = cluster.pipeline.wake.notified() => continue,
                _ = crate::shutdown::stopped(&mut stop) => break,
            }
        };
        if bytes < cluster.pipeline.buffer_max && tokio::time::Instant::now() < since + interval {
            tokio::select! {
                _ = tokio::time::sleep_until(since + interval) => {}
                _ = cluster.pipeline.wake.notified() => continue,
                _ = crate::shutdown::stopped(&mut stop) => break,
            }
        }
        let pending = cluster.pipeline.take();
        let previous = committing.take();
        let (uploaded, ()) = tokio::join!(upload(&cluster, pending), async {
            if let Some(previous) = previous {
                let _ = previous.await;
            }
        });
        if let Some(uploaded) = uploaded {
            committing = Some(tokio::spawn(commit(Arc::clone(&cluster), uploaded)));
        }
    }
    if let Some(previous) = committing.take() {
        let _ = previous.await;
    }
    let rest = cluster.pipeline.take();
    if let Some(uploaded) = upload(&cluster, rest).await {
        commit(cluster, uploaded).await;
    }
}

/// An object uploaded and not committed yet.
struct Uploaded {
    pending: Pending,
    object: Bytes,
    key: String,
    reg: skiff_cluster::membership::Registration,
}

/// Uploads the batches as one object; `None` when there was nothing, or the waiters were
/// answered already (not registered, or the upload failed).
async fn upload(cluster: &Cluster, mut pending: Pending) -> Option<Uploaded> {
    if pending.appends.is_empty() {
        return None;
    }
    let Some(reg) = cluster.registration() else {
        fail(
            pending.waiters,
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            "this broker is not registered in the cluster right now",
        );
        return None;
    };
    let object = std::mem::take(&mut pending.bytes).freeze();
    let size = object.len() as u64;
    let key = cluster.objects.new_key(cluster.node_id, reg.epoch);
    if let Err(e) = cluster.objects.put(&key, object.clone()).await {
        tracing::error!(object = %key, error = %e, "object upload failed");
        cluster
            .stats
            .upload_failures
            .fetch_add(1, Ordering::Relaxed);
        fail(
            pending.waiters,
            ErrorCode::KAFKA_STORAGE_ERROR,
            &format!("object upload failed: {e}"),
        );
        return None;
    }
    cluster.stats.objects_put.fetch_add(1, Ordering::Relaxed);
    cluster.stats.bytes_put.fetch_add(size, Ordering::Relaxed);
    Some(Uploaded {
        pending,
        object,
        key,
        reg,
    })
}

/// Commits an uploaded object and answers its waiters.
async fn commit(cluster: Arc<Cluster>, uploaded: Uploaded) {
    let Uploaded {
        pending,
        object,
        key,
        reg,
    } = uploaded;
    let size = object.len() as u64;
    let commit_ms = now_ms();
    match skiff_cluster::log::commit(&cluster.db, reg, &key, size, &pending.appends, commit_ms)
        .await
    {
        Ok(done) => {
            cluster.stats.commits.fetch_add(1, Ordering::Relaxed);
            let key_name = key.clone();
            if done.object_id.is_none() {
                // Nothing refers to it (all duplicates or refusals): it goes now.
                if let Err(e) = cluster.objects.delete(&key).await {
                    tracing::warn!(object = %key, error = %e, "deleting an unused object failed");
                }
            } else {
                // The batches this broker will most likely serve (it leads their partitions):
                // into the fetch cache.
                let key: Arc<str> = Arc::from(key.as_str());
                for (append, verdict) in pending.appends.iter().zip(&done.verdicts) {
                    if matches!(verdict, Verdict::Appended { .. }) {
                        for b in &append.batches {
                            let start = b.byte_offset as usize;
                            if let Some(bytes) = object.get(start..start + b.byte_size as usize) {
                                cluster.cache.insert(
                                    Arc::clone(&key),
                                    b.byte_offset,
                                    Bytes::copy_from_slice(bytes),
                                );
                            }
                        }
                    }
                }
            }
            let mut by_partition: std::collections::BTreeMap<PartitionKey, Vec<_>> =
                std::collections::BTreeMap::new();
            for row in &done.rows {
                by_partition
                    .entry(row.key)
                    .or_default()
                    .push(skiff_cluster::log::FoundBatch {
                        base_offset: row.base_offset,
                        last_offset: row.last_offset,
                        object_key: key_name.clone(),
                        byte_offset: row.byte_offset,
                        byte_size: row.byte_size,
                        max_timestamp: row.max_timestamp,
                        log_append_time: row.log_append_time,
                    });
            }
            for (partition, batches) in by_partition {
                cluster.recent.record(partition, batches);
            }
            cluster.learn(&done.changes);
            cluster.notify_commit();
            for ((append, verdict), waiter) in pending
                .appends
                .iter()
                .zip(done.verdicts)
                .zip(pending.waiters)
            {
                let log_start = done.log_starts.get(&append.key).copied().unwrap_or(-1);
                let _ = waiter.send(Outcome::Committed {
                    verdict,
                    log_start,
                    commit_ms,
                });
            }
        }
        Err(DbError::Fenced { .. }) => {
            cluster.fenced(reg);
            // Refused before anything was written: the object is nobody's.
            if let Err(e) = cluster.objects.delete(&key).await {
                tracing::warn!(object = %key, error = %e, "deleting an uncommitted object failed");
            }
            fail(
                pending.waiters,
                ErrorCode::NOT_LEADER_OR_FOLLOWER,
                "this broker was fenced (its cluster lease lapsed)",
            );
        }
        Err(e) => {
            tracing::error!(object = %key, error = %e, "commit failed");
            cluster
                .stats
                .commit_failures
                .fetch_add(1, Ordering::Relaxed);
            fail(
                pending.waiters,
                ErrorCode::KAFKA_STORAGE_ERROR,
                &format!("commit failed: {e}"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append_of(size: u32) -> (Bytes, Vec<BatchInfo>) {
        let batch = BatchInfo {
            byte_offset: 0,
            byte_size: size,
            record_count: 1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            last_sequence: -1,
            max_timestamp: 0,
            log_append_time: false,
            txn: skiff_cluster::commit::TxnKind::None,
        };
        (Bytes::from(vec![size as u8; size as usize]), vec![batch])
    }

    #[test]
    fn an_object_holds_at_most_the_buffer_size_and_the_rest_waits() {
        let pipeline = Pipeline::new(1000);
        let key = PartitionKey {
            topic_id: uuid::Uuid::from_u128(1),
            partition: 0,
        };
        let mut receivers = Vec::new();
        for size in [600, 300, 500, 2000] {
            let (records, batches) = append_of(size);
            receivers.push(pipeline.submit(key, &records, batches));
        }
        let first = pipeline.take();
        assert_eq!(first.bytes.len(), 900, "600 + 300 fit, 500 more would not");
        assert_eq!(first.appends.len(), 2);
        assert_eq!(first.waiters.len(), 2);
        assert_eq!(first.appends[1].batches[0].byte_offset, 600);
        let second = pipeline.take();
        assert_eq!(second.bytes.len(), 500, "2000 more would not fit");
        assert_eq!(
            second.appends[0].batches[0].byte_offset, 0,
            "offsets start again"
        );
        assert!(second.bytes.iter().all(|b| *b == (500u32 as u8)));
        let third = pipeline.take();
        assert_eq!(
            third.bytes.len(),
            2000,
            "one append larger than the buffer goes alone"
        );
        assert_eq!(third.appends[0].batches[0].byte_offset, 0);
        assert!(pipeline.take().appends.is_empty());
    }
}
