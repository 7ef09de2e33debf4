//! Encoder for v2 batches (what a producer or a coordinator writes), optionally compressed.

use crate::attributes::{CONTROL_MASK, Compression, TRANSACTIONAL_MASK};
use crate::batch::{
    BATCH_HEADER_LEN, LOG_OVERHEAD, MAGIC_V2, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID, NO_SEQUENCE, RecordBatch,
};
use crate::error::{RecordsError, Result};
use crate::record::encode_record;

/// Builds one batch with create-time timestamps and a correct CRC; uncompressed unless
/// [`RecordBatchBuilder::compression`] says otherwise.
///
/// ```
/// use skiff_records::RecordBatchBuilder;
/// let mut builder = RecordBatchBuilder::new();
/// builder.append(1_700_000_000_000, Some(b"key"), Some(b"value"), &[(b"h", Some(b"v"))])?;
/// let batch = builder.build()?;
/// assert_eq!(batch.record_count(), 1);
/// # Ok::<(), skiff_records::RecordsError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RecordBatchBuilder {
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    attributes: i16,
    compression: Compression,
    base_timestamp: Option<i64>,
    max_timestamp: Option<i64>,
    record_count: i32,
    records: Vec<u8>,
}

impl Default for RecordBatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordBatchBuilder {
    /// A non-idempotent, non-transactional batch at base offset 0.
    pub fn new() -> Self {
        Self {
            base_offset: 0,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            attributes: 0,
            compression: Compression::None,
            base_timestamp: None,
            max_timestamp: None,
            record_count: 0,
            records: Vec::new(),
        }
    }

    pub fn base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Idempotent producer identity and the sequence number of the first record.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    pub fn transactional(mut self, transactional: bool) -> Self {
        self.set_flag(TRANSACTIONAL_MASK, transactional);
        self
    }

    pub fn control(mut self, control: bool) -> Self {
        self.set_flag(CONTROL_MASK, control);
        self
    }

    /// Compresses the records section with `compression` when building: the attribute bits name
    /// the codec and the CRC covers the compressed bytes, as Kafka writes them.
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    fn set_flag(&mut self, mask: i16, on: bool) {
        if on {
            self.attributes |= mask;
        } else {
            self.attributes &= !mask;
        }
    }

    /// Number of records appended so far.
    pub fn len(&self) -> usize {
        self.record_count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.record_count == 0
    }

    /// Encoded size the batch would have if built now without compression (an upper bound in
    /// practice for a compressed batch).
    pub fn size_in_bytes(&self) -> usize {
        BATCH_HEADER_LEN + self.records.len()
    }

    /// Appends a record with the next offset delta. The first record's timestamp becomes the
    /// batch base timestamp; later ones are stored as deltas (which may be negative).
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> Result<&mut Self> {
        let base_timestamp = *self.base_timestamp.get_or_insert(timestamp);
        let delta = timestamp
            .checked_sub(base_timestamp)
            .ok_or(RecordsError::Encode("timestamp delta overflows"))?;
        let offset_delta = self.record_count;
        let next_count = offset_delta
            .checked_add(1)
            .ok_or(RecordsError::Encode("too many records"))?;
        let rollback = self.records.len();
        if let Err(err) = encode_record(&mut self.records, delta, offset_delta, key, value, headers)
        {
            self.records.truncate(rollback);
            return Err(err);
        }
        self.record_count = next_count;
        self.max_timestamp = Some(
            self.max_timestamp
                .map_or(timestamp, |max| max.max(timestamp)),
        );
        Ok(self)
    }

    /// Encodes the batch. Fails if it holds no record or exceeds Kafka's i32 size limit.
    pub fn build(self) -> Result<RecordBatch> {
        if self.record_count == 0 {
            return Err(RecordsError::Encode("batch has no records"));
        }
        let compressed;
        let records: &[u8] = match self.compression {
            Compression::None => &self.records,
            codec => {
                compressed = crate::compression::compress(codec, &self.records)?;
                &compressed
            }
        };
        let attributes = (self.attributes & !0x07) | self.compression.code();
        let total = BATCH_HEADER_LEN + records.len();
        let batch_length = i32::try_from(total - LOG_OVERHEAD)
            .map_err(|_| RecordsError::Encode("batch larger than i32::MAX"))?;
        if self
            .base_offset
            .checked_add(i64::from(self.record_count - 1))
            .is_none()
        {
            return Err(RecordsError::Encode("last offset overflows"));
        }
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&batch_length.to_be_bytes());
        out.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out.push(MAGIC_V2 as u8);
        let crc_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let crc_start = out.len();
        out.extend_from_slice(&attributes.to_be_bytes());
        out.extend_from_slice(&(self.record_count - 1).to_be_bytes());
        out.extend_from_slice(&self.base_timestamp.unwrap_or(0).to_be_bytes());
        out.extend_from_slice(
            &self
                .max_timestamp
                .unwrap_or(crate::NO_TIMESTAMP)
                .to_be_bytes(),
        );
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&self.record_count.to_be_bytes());
        out.extend_from_slice(records);
        let crc = crc32c::crc32c(out.get(crc_start..).unwrap_or_default());
        if let Some(slot) = out.get_mut(crc_at..crc_start) {
            slot.copy_from_slice(&crc.to_be_bytes());
        }
        RecordBatch::parse(out.into())
    }
}
