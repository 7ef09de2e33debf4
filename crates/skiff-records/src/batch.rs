//! The v2 batch header, the validated [`RecordBatch`] view, record-set splitting and the in-place
//! rewrite used when a broker appends a producer's batch.

use bytes::Bytes;

use crate::attributes::{
    CONTROL_MASK, Compression, DELETE_HORIZON_MASK, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK,
    TimestampType,
};
use crate::compression::decompress_records;
use crate::error::{RecordsError, Result};
use crate::record::{MIN_RECORD_SIZE, Records};
use crate::wire::Cursor;

/// Bytes before a batch's payload that every magic shares: base offset (8) + batch length (4).
/// The batch length field counts the bytes after it.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the v2 batch header, up to and including the record count.
pub const BATCH_HEADER_LEN: usize = 61;
/// The only message format this crate reads and writes.
pub const MAGIC_V2: i8 = 2;
/// Producer id of a batch written without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
/// Producer epoch of a batch written without idempotence.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Base sequence of a batch written without idempotence.
pub const NO_SEQUENCE: i32 = -1;
/// Partition leader epoch when unknown.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// Timestamp when none is known (for example a log-append time under create-time).
pub const NO_TIMESTAMP: i64 = -1;

const MAGIC_OFFSET: usize = 16;
/// Base offset, batch length and partition leader epoch: the bytes before the magic, which the
/// CRC does not cover, so a broker can rewrite them without touching the rest of the batch.
pub const UNCHECKED_PREFIX_LEN: usize = MAGIC_OFFSET;
const CRC_OFFSET: usize = 17;
/// The CRC covers attributes through the end of the batch, so the base offset and the partition
/// leader epoch can be rewritten without touching it.
const CRC_START: usize = 21;
const ATTRIBUTES_OFFSET: usize = 21;
const MAX_TIMESTAMP_OFFSET: usize = 35;
/// Smallest legal value of the batch length field.
const MIN_BATCH_LENGTH: i32 = (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32;

/// The fixed 61-byte v2 header, decoded.
///
/// Parsing a header checks the length field and the magic but not the CRC, so the log can locate
/// batches in a segment by reading headers only; [`RecordBatch`] is the fully validated form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Bytes after the length field (the whole batch is `batch_length + 12` bytes).
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    /// Decodes the header at the start of `bytes` (which may hold more than one batch).
    ///
    /// Checks, in Kafka's order: the length field is non-negative, the magic is 2, the length
    /// covers at least the header. Whether the whole batch is present is the caller's business
    /// (see [`BatchHeader::total_len`]).
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let available = bytes.len();
        let partial = |needed: usize| RecordsError::PartialBatch {
            needed: needed as u64,
            available,
        };
        let mut cursor = Cursor::new(bytes);
        let base_offset = cursor
            .i64("base offset")
            .map_err(|_| partial(LOG_OVERHEAD))?;
        let batch_length = cursor
            .i32("batch length")
            .map_err(|_| partial(LOG_OVERHEAD))?;
        if batch_length < 0 {
            return Err(RecordsError::InvalidBatchLength {
                length: batch_length,
            });
        }
        let partition_leader_epoch = cursor
            .i32("leader epoch")
            .map_err(|_| partial(MAGIC_OFFSET + 1))?;
        let magic = cursor.i8("magic").map_err(|_| partial(MAGIC_OFFSET + 1))?;
        if magic != MAGIC_V2 {
            return Err(RecordsError::UnsupportedMagic { magic });
        }
        if batch_length < MIN_BATCH_LENGTH {
            return Err(RecordsError::InvalidBatchLength {
                length: batch_length,
            });
        }
        let field = || partial(BATCH_HEADER_LEN);
        Ok(Self {
            base_offset,
            batch_length,
            partition_leader_epoch,
            magic,
            crc: cursor.u32("crc").map_err(|_| field())?,
            attributes: cursor.i16("attributes").map_err(|_| field())?,
            last_offset_delta: cursor.i32("last offset delta").map_err(|_| field())?,
            base_timestamp: cursor.i64("base timestamp").map_err(|_| field())?,
            max_timestamp: cursor.i64("max timestamp").map_err(|_| field())?,
            producer_id: cursor.i64("producer id").map_err(|_| field())?,
            producer_epoch: cursor.i16("producer epoch").map_err(|_| field())?,
            base_sequence: cursor.i32("base sequence").map_err(|_| field())?,
            record_count: cursor.i32("record count").map_err(|_| field())?,
        })
    }

    /// Parses and fully validates (length, magic, CRC, consistency) a slice that holds exactly
    /// one batch, without copying it. Used to check batches read from disk.
    pub fn parse_validated(bytes: &[u8]) -> Result<Self> {
        let header = Self::parse(bytes)?;
        let total = header.total_len();
        if total > bytes.len() {
            return Err(RecordsError::PartialBatch {
                needed: total as u64,
                available: bytes.len(),
            });
        }
        if total < bytes.len() {
            return Err(RecordsError::InvalidBatch("trailing bytes after batch"));
        }
        validate_payload(&header, bytes)?;
        Ok(header)
    }

    /// This header's base offset, batch length and partition leader epoch as they are written
    /// at the start of a batch ([`UNCHECKED_PREFIX_LEN`] bytes, outside the CRC). Writing these
    /// in front of the rest of an unchanged batch gives the bytes [`RecordBatchMut`]'s
    /// `set_base_offset` and `set_partition_leader_epoch` would produce, without a copy.
    pub fn unchecked_prefix(&self) -> [u8; UNCHECKED_PREFIX_LEN] {
        let mut prefix = [0u8; UNCHECKED_PREFIX_LEN];
        let fields = self
            .base_offset
            .to_be_bytes()
            .into_iter()
            .chain(self.batch_length.to_be_bytes())
            .chain(self.partition_leader_epoch.to_be_bytes());
        for (slot, byte) in prefix.iter_mut().zip(fields) {
            *slot = byte;
        }
        prefix
    }

    /// Size of the whole batch in bytes, including the 12-byte log overhead.
    pub fn total_len(&self) -> usize {
        // batch_length was checked non-negative by `parse`.
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }

    /// Checks the fields that do not need the payload: codec, record count, offset range.
    fn check_consistency(&self) -> Result<()> {
        Compression::from_attributes(self.attributes)?;
        if self.record_count < 0 {
            return Err(RecordsError::InvalidBatch("negative record count"));
        }
        if self.last_offset_delta < 0 {
            return Err(RecordsError::InvalidBatch("negative last offset delta"));
        }
        // Compaction may remove records (count shrinks, delta stays), never the reverse.
        if self.record_count > 0 && self.last_offset_delta < self.record_count - 1 {
            return Err(RecordsError::InvalidBatch(
                "last offset delta smaller than record count",
            ));
        }
        if self
            .base_offset
            .checked_add(i64::from(self.last_offset_delta))
            .is_none()
        {
            return Err(RecordsError::InvalidBatch("last offset overflows"));
        }
        if self.compression() == Compression::None {
            let payload = self.total_len() - BATCH_HEADER_LEN;
            if self.record_count as usize > payload / MIN_RECORD_SIZE {
                return Err(RecordsError::InvalidBatch(
                    "record count larger than the payload can hold",
                ));
            }
        }
        Ok(())
    }

    /// Checks what Kafka's `LogValidator` demands of a batch sent by a producer: at least one
    /// record and exactly one offset per record (no compaction gaps from a client).
    pub fn validate_for_produce(&self) -> Result<()> {
        if self.record_count <= 0 {
            return Err(RecordsError::InvalidBatch("produced batch has no records"));
        }
        if i64::from(self.last_offset_delta) + 1 != i64::from(self.record_count) {
            return Err(RecordsError::InvalidBatch(
                "inconsistent batch offset range and record count",
            ));
        }
        Ok(())
    }

    pub fn compression(&self) -> Compression {
        Compression::from_attributes(self.attributes).unwrap_or(Compression::None)
    }
    pub fn timestamp_type(&self) -> TimestampType {
        TimestampType::from_attributes(self.attributes)
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_MASK != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_MASK != 0
    }
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & DELETE_HORIZON_MASK != 0
    }
    /// The records decoder over `payload` (this batch's records, decompressed if need be).
    fn records(&self, payload: Bytes) -> Records {
        let log_append_time =
            (self.timestamp_type() == TimestampType::LogAppendTime).then_some(self.max_timestamp);
        Records::new(
            payload,
            self.record_count,
            self.base_offset,
            self.base_timestamp,
            log_append_time,
        )
    }
    /// Offset of the last record (saturating; validated batches never overflow).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }
    /// The offset following this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
}

/// CRC-32C of a whole batch, over the attributes through the end.
fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(batch.get(CRC_START..).unwrap_or_default())
}

/// A validated view over exactly one v2 batch held in a [`Bytes`] slice (no copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    header: BatchHeader,
    bytes: Bytes,
}

impl RecordBatch {
    /// Validates the batch at the start of `bytes` and splits it off. Returns the batch and the
    /// bytes after it. Fails with [`RecordsError::PartialBatch`] if `bytes` ends inside it.
    pub fn parse_prefix(bytes: &Bytes) -> Result<(Self, Bytes)> {
        let header = BatchHeader::parse(bytes)?;
        let total = header.total_len();
        if total > bytes.len() {
            return Err(RecordsError::PartialBatch {
                needed: total as u64,
                available: bytes.len(),
            });
        }
        let batch = bytes.slice(..total);
        validate_payload(&header, &batch)?;
        Ok((
            Self {
                header,
                bytes: batch,
            },
            bytes.slice(total..),
        ))
    }

    /// Validates `bytes` as exactly one batch (trailing bytes are an error).
    pub fn parse(bytes: Bytes) -> Result<Self> {
        let (batch, rest) = Self::parse_prefix(&bytes)?;
        if !rest.is_empty() {
            return Err(RecordsError::InvalidBatch("trailing bytes after batch"));
        }
        Ok(batch)
    }

    pub fn header(&self) -> &BatchHeader {
        &self.header
    }
    /// The whole batch, as received (header included).
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }
    /// Size of the batch in bytes, including the 12-byte log overhead.
    pub fn size_in_bytes(&self) -> usize {
        self.bytes.len()
    }
    pub fn base_offset(&self) -> i64 {
        self.header.base_offset
    }
    pub fn batch_length(&self) -> i32 {
        self.header.batch_length
    }
    pub fn partition_leader_epoch(&self) -> i32 {
        self.header.partition_leader_epoch
    }
    pub fn magic(&self) -> i8 {
        self.header.magic
    }
    pub fn crc(&self) -> u32 {
        self.header.crc
    }
    pub fn attributes(&self) -> i16 {
        self.header.attributes
    }
    pub fn compression(&self) -> Compression {
        self.header.compression()
    }
    pub fn timestamp_type(&self) -> TimestampType {
        self.header.timestamp_type()
    }
    pub fn is_transactional(&self) -> bool {
        self.header.is_transactional()
    }
    pub fn is_control(&self) -> bool {
        self.header.is_control()
    }
    pub fn last_offset_delta(&self) -> i32 {
        self.header.last_offset_delta
    }
    pub fn base_timestamp(&self) -> i64 {
        self.header.base_timestamp
    }
    pub fn max_timestamp(&self) -> i64 {
        self.header.max_timestamp
    }
    pub fn producer_id(&self) -> i64 {
        self.header.producer_id
    }
    pub fn producer_epoch(&self) -> i16 {
        self.header.producer_epoch
    }
    pub fn base_sequence(&self) -> i32 {
        self.header.base_sequence
    }
    pub fn record_count(&self) -> i32 {
        self.header.record_count
    }
    pub fn last_offset(&self) -> i64 {
        self.header.last_offset()
    }
    pub fn next_offset(&self) -> i64 {
        self.header.next_offset()
    }

    /// See [`BatchHeader::validate_for_produce`].
    pub fn validate_for_produce(&self) -> Result<()> {
        self.header.validate_for_produce()
    }

    /// The encoded records after the header (compressed if the batch is).
    pub fn records_payload(&self) -> Bytes {
        self.bytes.slice(BATCH_HEADER_LEN.min(self.bytes.len())..)
    }

    /// Iterates the records of an uncompressed batch without copying or allocating.
    ///
    /// A compressed batch yields [`RecordsError::CompressedBatch`]; use
    /// [`RecordBatch::decompressed_records`] for those.
    pub fn records(&self) -> Result<Records> {
        match self.compression() {
            Compression::None => Ok(self.header.records(self.records_payload())),
            other => Err(RecordsError::CompressedBatch(other)),
        }
    }

    /// Iterates the records of any batch, decompressing first if needed (gzip, snappy in xerial
    /// framing or as one raw block, LZ4 frames, zstd with a 16 MiB window limit). Decompression
    /// stops with [`RecordsError::Decompression`] once it would produce more than
    /// `max_decompressed_bytes` (a bomb guard); the output buffer never grows past that bound.
    pub fn decompressed_records(&self, max_decompressed_bytes: usize) -> Result<Records> {
        let payload = decompress_records(
            self.compression(),
            &self.records_payload(),
            max_decompressed_bytes,
        )?;
        Ok(self.header.records(payload))
    }
}

fn validate_payload(header: &BatchHeader, batch: &[u8]) -> Result<()> {
    let computed = compute_crc(batch);
    if computed != header.crc {
        return Err(RecordsError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    header.check_consistency()
}

/// Splits a record set (the `records` field of Produce/Fetch) into validated batches.
///
/// Yields each batch or the first error, then stops. A trailing partial batch shows up as
/// [`RecordsError::PartialBatch`]: a Fetch reader may ignore it, a Produce handler must reject it.
#[derive(Debug, Clone)]
pub struct RecordBatches {
    rest: Bytes,
    failed: bool,
}

impl RecordBatches {
    pub fn new(records: Bytes) -> Self {
        Self {
            rest: records,
            failed: false,
        }
    }

    /// Validates every batch of a produced record set: no partial batch, at least one batch, and
    /// each batch passes [`RecordBatch::validate_for_produce`].
    pub fn parse_produce(records: Bytes) -> Result<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        for batch in Self::new(records) {
            let batch = batch?;
            batch.validate_for_produce()?;
            batches.push(batch);
        }
        if batches.is_empty() {
            return Err(RecordsError::Empty);
        }
        Ok(batches)
    }

    /// The headers of a produced record set, without checking CRCs: no partial batch, at least one
    /// batch, and each header passes [`BatchHeader::validate_for_produce`]. For callers that need
    /// the headers before the bytes are checked and appended (the log verifies the CRCs then, so
    /// the produce path reads each batch's checksum once).
    pub fn produce_headers(records: &[u8]) -> Result<Vec<BatchHeader>> {
        let mut headers = Vec::new();
        let mut rest = records;
        while !rest.is_empty() {
            let header = BatchHeader::parse(rest)?;
            let len = header.total_len();
            if len > rest.len() {
                return Err(RecordsError::PartialBatch {
                    needed: len as u64,
                    available: rest.len(),
                });
            }
            header.validate_for_produce()?;
            headers.push(header);
            rest = rest.get(len..).unwrap_or_default();
        }
        if headers.is_empty() {
            return Err(RecordsError::Empty);
        }
        Ok(headers)
    }

    /// Validates the complete batches of a fetched record set and returns them with the trailing
    /// partial batch, if any (Kafka cuts Fetch responses at `max_bytes` regardless of batches).
    pub fn parse_fetch(records: Bytes) -> Result<(Vec<RecordBatch>, Option<Bytes>)> {
        let mut batches = Vec::new();
        let mut iter = Self::new(records);
        loop {
            let before = iter.rest.clone();
            match iter.next() {
                None => return Ok((batches, None)),
                Some(Ok(batch)) => batches.push(batch),
                Some(Err(RecordsError::PartialBatch { .. })) => return Ok((batches, Some(before))),
                Some(Err(other)) => return Err(other),
            }
        }
    }

    /// The bytes not yet consumed.
    pub fn remaining(&self) -> &Bytes {
        &self.rest
    }
}

impl Iterator for RecordBatches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        match RecordBatch::parse_prefix(&self.rest) {
            Ok((batch, rest)) => {
                self.rest = rest;
                Some(Ok(batch))
            }
            Err(err) => {
                self.failed = true;
                Some(Err(err))
            }
        }
    }
}

/// Mutable access to one validated batch, for the rewrites a broker does on append.
///
/// Base offset and partition leader epoch sit before the CRC range and cost a few byte writes.
/// [`RecordBatchMut::set_log_append_time`] changes covered fields and so recomputes the CRC over
/// the whole batch: one pass of CRC-32C (hardware-accelerated, several GB/s) per batch.
#[derive(Debug)]
pub struct RecordBatchMut<'a> {
    bytes: &'a mut [u8],
    header: BatchHeader,
}

impl<'a> RecordBatchMut<'a> {
    /// Validates `bytes` as exactly one batch (length, magic, CRC, consistency).
    pub fn new(bytes: &'a mut [u8]) -> Result<Self> {
        let header = BatchHeader::parse_validated(bytes)?;
        Ok(Self { bytes, header })
    }

    /// Splits a whole record set into mutable batches, validating each; a partial trailing batch
    /// is an error. The first error ends the iteration.
    pub fn split_all(bytes: &'a mut [u8]) -> RecordBatchesMut<'a> {
        RecordBatchesMut {
            rest: bytes,
            failed: false,
        }
    }

    /// The header as currently written.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch bytes as currently written.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes
    }

    fn write(&mut self, at: usize, value: &[u8]) {
        // `new` checked the slice holds at least a full header and every `at` is inside it.
        if let Some(target) = self.bytes.get_mut(at..at + value.len()) {
            target.copy_from_slice(value);
        }
    }

    /// Rewrites the base offset; not covered by the CRC.
    pub fn set_base_offset(&mut self, base_offset: i64) {
        self.write(0, &base_offset.to_be_bytes());
        self.header.base_offset = base_offset;
    }

    /// Rewrites the partition leader epoch; not covered by the CRC.
    pub fn set_partition_leader_epoch(&mut self, epoch: i32) {
        self.write(LOG_OVERHEAD, &epoch.to_be_bytes());
        self.header.partition_leader_epoch = epoch;
    }

    /// Marks the batch as log-append-time stamped at `timestamp` (Kafka sets the attribute bit
    /// and the max timestamp, leaving the records untouched), then recomputes the CRC.
    pub fn set_log_append_time(&mut self, timestamp: i64) {
        let attributes = self.header.attributes | TIMESTAMP_TYPE_MASK;
        self.write(ATTRIBUTES_OFFSET, &attributes.to_be_bytes());
        self.write(MAX_TIMESTAMP_OFFSET, &timestamp.to_be_bytes());
        self.header.attributes = attributes;
        self.header.max_timestamp = timestamp;
        let crc = compute_crc(self.bytes);
        self.write(CRC_OFFSET, &crc.to_be_bytes());
        self.header.crc = crc;
    }
}

/// Iterator of [`RecordBatchMut::split_all`].
#[derive(Debug)]
pub struct RecordBatchesMut<'a> {
    rest: &'a mut [u8],
    failed: bool,
}

impl<'a> Iterator for RecordBatchesMut<'a> {
    type Item = Result<RecordBatchMut<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let result = BatchHeader::parse(self.rest).and_then(|header| {
            let total = header.total_len();
            if total > self.rest.len() {
                return Err(RecordsError::PartialBatch {
                    needed: total as u64,
                    available: self.rest.len(),
                });
            }
            let rest = std::mem::take(&mut self.rest);
            let (batch, tail) = rest.split_at_mut(total);
            self.rest = tail;
            RecordBatchMut::new(batch)
        });
        if result.is_err() {
            self.failed = true;
        }
        Some(result)
    }
}
