//! The edge of the client-instance view's lag figures (the arithmetic is [`crate::lag`]'s):
//! what a member's position is on each assigned partition, copied while the group
//! coordinator's lock is held ([`consumer_positions`], [`share_positions`]), and what the
//! partitions hold, read after it is released ([`figures`]).
//!
//! Reading is bounded: per assigned partition, its watermarks and, when records are behind,
//! the header of the one batch holding the first unconsumed record (61 bytes, no records). In
//! cluster mode the watermarks are the ones this broker has heard of (announced commits and
//! its reads; [`learn_cluster_offsets`] asks PostgreSQL for a bounded number of the others
//! first), and the seconds stay unknown: the batch's first timestamp is in the object store.

use std::collections::BTreeMap;

use skiff_protocol::Uuid;

use crate::groups::Inner;
use crate::groups::share::SharePartitionKey;
use crate::lag::{self, PartitionLag, Position};
use crate::partition::Isolation;
use crate::state::Broker;

/// Partitions whose offsets one view asks PostgreSQL for at most (cluster mode).
const CLUSTER_LOOKUPS_PER_VIEW: usize = 64;

/// One assigned partition and the member's position on it, as copied under the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Assigned {
    topic: String,
    /// `None` when the coordinator's image does not know the topic.
    topic_id: Option<Uuid>,
    partition: i32,
    position: Option<i64>,
    done: i64,
}

/// Each assigned partition with the group's committed offset (consumer and classic members).
pub(super) fn consumer_positions(
    inner: &Inner,
    group: &str,
    assigned: &BTreeMap<String, Vec<i32>>,
) -> Vec<Assigned> {
    each(inner, assigned, |topic, _, partition| {
        let committed = inner.offsets.fetch(group, topic, partition);
        (committed.map(|c| c.offset), 0)
    })
}

/// Each assigned partition with its share partition's start offset and the records after it
/// already delivered for good (share members).
pub(super) fn share_positions(
    inner: &Inner,
    group: &str,
    assigned: &BTreeMap<String, Vec<i32>>,
) -> Vec<Assigned> {
    each(inner, assigned, |_, topic_id, partition| {
        let summary = topic_id
            .and_then(|id| inner.share_summary(&SharePartitionKey::new(group, id, partition)));
        match summary {
            Some(s) => (Some(s.start_offset), s.delivery_complete),
            None => (None, 0),
        }
    })
}

fn each(
    inner: &Inner,
    assigned: &BTreeMap<String, Vec<i32>>,
    position: impl Fn(&str, Option<Uuid>, i32) -> (Option<i64>, i64),
) -> Vec<Assigned> {
    let mut out = Vec::new();
    for (topic, partitions) in assigned {
        let topic_id = inner.topics.by_name.get(topic).map(|(id, _)| *id);
        for &partition in partitions {
            let (position, done) = position(topic, topic_id, partition);
            out.push(Assigned {
                topic: topic.clone(),
                topic_id,
                partition,
                position,
                done,
            });
        }
    }
    out
}

/// The figures of each assigned partition, read now (no coordinator lock may be held).
pub(super) fn figures(broker: &Broker, assigned: &[Assigned], now_ms: i64) -> Vec<PartitionLag> {
    assigned
        .iter()
        .map(|a| {
            let position = position(broker, a);
            lag::partition(&a.topic, a.partition, &position, now_ms)
        })
        .collect()
}

/// What the partition holds, and the first unconsumed batch's timestamp when it is needed.
fn position(broker: &Broker, a: &Assigned) -> Position {
    let mut position = Position {
        position: a.position,
        done: a.done,
        ..Position::default()
    };
    let Some(topic_id) = a.topic_id else {
        return position;
    };
    if let Some(cluster) = broker.cluster() {
        if let Some(known) = cluster
            .known
            .get(&crate::cluster::key(topic_id, a.partition))
        {
            position.log_start = Some(known.log_start);
            position.high_watermark = Some(known.high_watermark);
            position.last_stable = Some(known.last_stable);
        }
        return position;
    }
    let Some(partition) = broker
        .topic_by_id(topic_id)
        .and_then(|t| t.partition(a.partition).cloned())
    else {
        return position;
    };
    let ends = partition.read(0, 0, Isolation::ReadUncommitted);
    position.log_start = Some(ends.log_start_offset);
    position.high_watermark = Some(ends.high_watermark);
    position.last_stable = Some(ends.last_stable_offset);
    if let Some(offset) = lag::first_unconsumed(&position) {
        match partition.batch_header_at(offset) {
            Ok(header) => {
                position.timestamp_ms = header.map(|h| match h.timestamp_type() {
                    skiff_records::TimestampType::LogAppendTime => h.max_timestamp,
                    _ => h.base_timestamp,
                });
            }
            Err(e) => tracing::debug!(
                topic = %a.topic, partition = a.partition, error = %e,
                "reading a batch header for the lag view failed"
            ),
        }
    }
    position
}

/// Cluster mode: asks PostgreSQL for the offsets of assigned partitions this broker has not
/// heard of (at most [`CLUSTER_LOOKUPS_PER_VIEW`] per call) and keeps them with the ones it
/// heard, so that this view and the summaries it publishes have them.
pub(super) async fn learn_cluster_offsets(broker: &Broker, assigned: &[Assigned]) {
    let Some(cluster) = broker.cluster() else {
        return;
    };
    let mut keys: Vec<_> = assigned
        .iter()
        .filter_map(|a| Some(crate::cluster::key(a.topic_id?, a.partition)))
        .filter(|key| cluster.known.get(key).is_none())
        .collect();
    keys.sort_by_key(|k| (k.topic_id, k.partition));
    keys.dedup();
    for key in keys.into_iter().take(CLUSTER_LOOKUPS_PER_VIEW) {
        match skiff_cluster::log::offsets(&cluster.db, key).await {
            Ok(Some(offsets)) => cluster.known.learn(&[skiff_cluster::log::LogChange {
                key,
                log_start: offsets.log_start,
                high_watermark: offsets.high_watermark,
                last_stable: offsets.last_stable,
            }]),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "reading a partition's offsets for the lag view failed");
                return;
            }
        }
    }
}
