//! Kafka's record batch format, magic v2, as Skiff reads, validates and rewrites it.
//!
//! This crate owns the bytes of the `records` field of Produce and Fetch and of log segments:
//! - [`RecordBatches`] / [`RecordBatch`]: validated zero-copy views (length, magic, CRC-32C,
//!   header consistency) over [`bytes::Bytes`]; a trailing partial batch is a distinct error;
//! - [`RecordBatchMut`]: the in-place rewrites of a broker append (base offset, leader epoch,
//!   log-append time) without re-encoding records;
//! - [`end_txn_marker`] / [`control_record_type`]: transaction markers (control batches);
//! - [`RecordBatchBuilder`] and [`Records`]: encoding (optionally compressed) and bounded decoding
//!   (with bounded decompression) of individual records.
//!
//! The attribute bits ([`Compression`], [`TimestampType`], the flags) live in a leaf module that
//! the batch view, the records decoder, the codecs and the error type import; no module imports
//! one that imports it back.
//!
//! Nothing here panics or sizes an allocation from a length read off the wire or the disk.

mod attributes;
mod batch;
mod builder;
pub mod compression;
mod control;
mod error;
mod record;
mod wire;

pub use attributes::{Compression, TimestampType};
pub use batch::{
    BATCH_HEADER_LEN, BatchHeader, LOG_OVERHEAD, MAGIC_V2, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, RecordBatch, RecordBatchMut,
    RecordBatches, RecordBatchesMut, UNCHECKED_PREFIX_LEN,
};
pub use builder::RecordBatchBuilder;
pub use control::{ControlRecordType, control_record_type, end_txn_marker};
pub use error::{RecordsError, Result};
pub use record::{Header, Record, RecordHeaders, Records};

#[cfg(test)]
mod tests;
