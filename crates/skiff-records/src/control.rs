//! Transaction markers: the control batches a transaction coordinator appends to every partition
//! of a transaction when it ends (Kafka's `EndTransactionMarker`).
//!
//! A marker is a batch with the control and transactional attributes, the producer's ID and epoch,
//! no sequence, and one record whose key is `(version: i16 = 0, type: i16)` (0 = abort,
//! 1 = commit) and whose value is `(version: i16 = 0, coordinator_epoch: i32)`.

use crate::batch::{NO_SEQUENCE, RecordBatch};
use crate::builder::RecordBatchBuilder;
use crate::error::Result;

/// What a transaction marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlRecordType {
    Abort,
    Commit,
}

impl ControlRecordType {
    pub fn code(self) -> i16 {
        match self {
            ControlRecordType::Abort => 0,
            ControlRecordType::Commit => 1,
        }
    }

    fn from_code(code: i16) -> Option<Self> {
        match code {
            0 => Some(ControlRecordType::Abort),
            1 => Some(ControlRecordType::Commit),
            _ => None,
        }
    }
}

/// Builds the marker ending `producer_id`'s transaction (`commit` or abort), stamped `timestamp`.
pub fn end_txn_marker(
    producer_id: i64,
    producer_epoch: i16,
    kind: ControlRecordType,
    coordinator_epoch: i32,
    timestamp: i64,
) -> Result<RecordBatch> {
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&kind.code().to_be_bytes());
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    let mut builder = RecordBatchBuilder::new()
        .producer(producer_id, producer_epoch, NO_SEQUENCE)
        .transactional(true)
        .control(true);
    builder.append(timestamp, Some(&key), Some(&value), &[])?;
    builder.build()
}

/// The type of the transaction marker `batch` holds; `None` when it is not a control batch or
/// its first record is not a marker Skiff knows (Kafka skips unknown control types too).
pub fn control_record_type(batch: &RecordBatch) -> Option<ControlRecordType> {
    if !batch.is_control() {
        return None;
    }
    let record = batch.records().ok()?.next()?.ok()?;
    let key = record.key?;
    let version = i16::from_be_bytes([*key.first()?, *key.get(1)?]);
    if version < 0 {
        return None;
    }
    ControlRecordType::from_code(i16::from_be_bytes([*key.get(2)?, *key.get(3)?]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_look_like_kafkas() {
        for kind in [ControlRecordType::Abort, ControlRecordType::Commit] {
            let batch = end_txn_marker(42, 3, kind, 7, 1_000).expect("marker");
            assert!(batch.is_control() && batch.is_transactional());
            assert_eq!((batch.producer_id(), batch.producer_epoch()), (42, 3));
            assert_eq!(batch.base_sequence(), NO_SEQUENCE);
            assert_eq!(batch.record_count(), 1);
            assert_eq!(control_record_type(&batch), Some(kind));
            let record = batch
                .records()
                .expect("records")
                .next()
                .expect("one")
                .expect("valid");
            assert_eq!(
                record.key.as_deref(),
                Some(&[0u8, 0, 0, kind.code() as u8][..])
            );
            assert_eq!(record.value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 7][..]));
        }
    }

    #[test]
    fn data_batches_and_odd_control_records_are_not_markers() {
        let mut b = RecordBatchBuilder::new().transactional(true);
        b.append(1, Some(&[0, 0, 0, 1]), None, &[]).expect("append");
        assert_eq!(control_record_type(&b.build().expect("batch")), None);
        for key in [&[0u8, 0, 0][..], &[0, 0, 0, 9], &[0xff, 0xff, 0, 1]] {
            let mut b = RecordBatchBuilder::new().control(true);
            b.append(1, Some(key), None, &[]).expect("append");
            assert_eq!(control_record_type(&b.build().expect("batch")), None);
        }
    }
}
