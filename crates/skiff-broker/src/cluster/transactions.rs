//! Transactions in cluster mode, on the data side: the markers a transaction coordinator writes
//! through this broker's produce pipeline (control batches committed like any batch; the commit
//! closes the producer's open transaction on the partition and, for an abort, records the
//! aborted range that read_committed fetches skip), and the transactional offsets that wait in
//! PostgreSQL beside their group until the transaction ends.
//!
//! The coordinator's state machine stays `skiff-txn`'s, its records in the coordinator shards
//! ([`super::coordination`]); carrying out an end is [`crate::txn_end`]'s.

use skiff_cluster::commit::{BatchInfo, PartitionKey, TxnKind, Verdict};
use skiff_protocol::ErrorCode;

use super::Cluster;
use super::produce::Outcome;

/// Writes a commit or abort marker of producer `producer_id` at `epoch` into each partition
/// of `keys` (one object for all), and waits until they are committed. A partition where the
/// producer has no open transaction, or that no longer exists, needs none; one that has seen a
/// newer epoch of the producer refuses it (its transaction was ended by a newer coordinator).
pub async fn write_markers(
    cluster: &Cluster,
    keys: &[PartitionKey],
    producer_id: i64,
    epoch: i16,
    commit: bool,
    now_ms: i64,
) -> Result<(), ErrorCode> {
    let kind = if commit {
        skiff_records::ControlRecordType::Commit
    } else {
        skiff_records::ControlRecordType::Abort
    };
    let mut waits = Vec::with_capacity(keys.len());
    for key in keys {
        let marker = skiff_records::end_txn_marker(producer_id, epoch, kind, 0, now_ms)
            .map_err(|e| {
                tracing::error!(error = %e, "building a transaction marker failed");
                ErrorCode::UNKNOWN_SERVER_ERROR
            })?
            .into_bytes();
        let info = BatchInfo {
            byte_offset: 0,
            byte_size: u32::try_from(marker.len()).unwrap_or(u32::MAX),
            record_count: 1,
            producer_id,
            producer_epoch: epoch,
            base_sequence: -1,
            last_sequence: -1,
            max_timestamp: now_ms,
            log_append_time: false,
            txn: TxnKind::Marker { commit },
        };
        waits.push((*key, cluster.pipeline.submit(*key, &marker, vec![info])));
    }
    for (key, wait) in waits {
        match wait.await {
            Ok(Outcome::Committed { verdict, .. }) => match verdict {
                Verdict::Appended { .. }
                | Verdict::Duplicate { .. }
                | Verdict::NothingOpen
                | Verdict::UnknownPartition => {}
                Verdict::InvalidProducerEpoch => {
                    tracing::warn!(topic_id = %key.topic_id, partition = key.partition, producer_id, epoch, "a transaction marker of an old epoch was refused");
                }
                other => {
                    tracing::error!(topic_id = %key.topic_id, partition = key.partition, verdict = ?other, "a transaction marker was refused");
                    return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
                }
            },
            Ok(Outcome::Failed { code, message }) => {
                tracing::warn!(topic_id = %key.topic_id, partition = key.partition, error = %message, "writing a transaction marker failed");
                return Err(code);
            }
            Err(_) => return Err(ErrorCode::UNKNOWN_SERVER_ERROR),
        }
    }
    Ok(())
}

/// Ends the transactional offsets producer `producer_id` staged for `groups`: a commit hands
/// them to their groups' coordinators (announced), an abort drops them.
pub async fn end_offsets(
    cluster: &Cluster,
    producer_id: i64,
    groups: &[String],
    commit: bool,
) -> Result<(), ErrorCode> {
    if groups.is_empty() {
        return Ok(());
    }
    skiff_cluster::txn_offsets::end(&cluster.db, producer_id, groups, commit)
        .await
        .map(|_| ())
        .map_err(|e| {
            tracing::warn!(error = %e, producer_id, "ending transactional offsets failed");
            ErrorCode::KAFKA_STORAGE_ERROR
        })
}
