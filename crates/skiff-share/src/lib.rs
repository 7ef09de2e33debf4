//! `skiff-share` owns the share-partition state machine of KIP-932 (Kafka's `SharePartition`):
//! the in-flight window of one share group on one topic partition, as plain data and pure
//! functions. Nothing here does I/O or reads a clock: every call that sets or checks a record lock
//! takes `now_ms`, and the next lock to expire is exposed as a deadline for the broker's timer.
//!
//! A [`SharePartition`] tracks every record from its start offset (Kafka's SPSO) to its end
//! offset (one past the last record fetched). Each record is [`RecordState::Available`],
//! [`RecordState::Acquired`] by one member until a deadline, [`RecordState::Acknowledged`] or
//! [`RecordState::Archived`], and counts its deliveries:
//!
//! - [`SharePartition::acquire`] hands a member the available records of a log read, new ones
//!   past the window's end included, within the window's record-lock limit and the request's
//!   record limit ([`AcquireMode`], KIP-1206). Records that must never be delivered (control
//!   records, aborted transactions) are archived instead.
//! - [`SharePartition::acknowledge`] applies a member's acknowledgements ([`AckType`]: accept,
//!   release, reject, the client's gaps, and KIP-1222's renew), all of them or none.
//! - [`SharePartition::expire_locks`] gives back records whose lock ran out;
//!   [`SharePartition::release_member`] gives back the records of a member that left.
//! - A released record whose delivery count reached the limit is archived instead of made
//!   available again.
//!
//! The start offset moves past the leading records that are acknowledged or archived, and those
//! are forgotten. Memory is bounded by runs of identical state, never by offsets: a million-record
//! batch acquired at once is one entry.
//!
//! What is persisted follows the share coordinator's records: a [`Snapshot`]
//! (`ShareSnapshotValue`: start offset, state epoch, state batches) and [`Delta`]s
//! (`ShareUpdateValue`: the state batches that changed and the start offset), which
//! [`apply_delta`] folds into a snapshot. Acquired records are persisted as available with their
//! delivery count, so a broker that restarts from its persisted state delivers them again (the
//! delivery counted) and never redelivers an acknowledged record.
//!
//! The broker owns the log reads, the sessions and members, the timer and the writes; it resolves
//! `share.auto.offset.reset` into the start offset of a new share partition.

mod partition;
mod persist;
mod window;

pub use partition::SharePartition;
pub use persist::{DeliveryState, Delta, Snapshot, StateBatch, apply_delta};

use serde::{Deserialize, Serialize};

/// Kafka's `group.share.record.lock.duration.ms` default: how long a member holds a record.
pub const DEFAULT_RECORD_LOCK_DURATION_MS: i64 = 30_000;
/// Kafka's `group.share.delivery.count.limit` default: deliveries before a record is archived.
pub const DEFAULT_DELIVERY_COUNT_LIMIT: i16 = 5;
/// Kafka's `group.share.partition.max.record.locks` default: the most records a share partition
/// keeps in flight.
pub const DEFAULT_MAX_RECORD_LOCKS: u32 = 2000;

/// Kafka's `INVALID_REQUEST` error code.
pub const INVALID_REQUEST: i16 = 42;
/// Kafka's `INVALID_RECORD_STATE` error code.
pub const INVALID_RECORD_STATE: i16 = 121;
/// Kafka's `UNKNOWN_SERVER_ERROR` error code.
pub const UNKNOWN_SERVER_ERROR: i16 = -1;

/// Share partition settings, with Kafka's broker config names and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareConfig {
    /// `group.share.record.lock.duration.ms` (30 s): how long an acquired record stays locked to
    /// its member before it is given back.
    pub record_lock_duration_ms: i64,
    /// `group.share.delivery.count.limit` (5): after this many deliveries a record that comes
    /// back is archived instead of made available again.
    pub delivery_count_limit: i16,
    /// `group.share.partition.max.record.locks` (2000): how far the window may reach past its
    /// start offset before no new records are acquired (a whole fetched batch may go past it in
    /// [`AcquireMode::BatchOptimized`], as in Kafka).
    pub max_record_locks: u32,
}

impl Default for ShareConfig {
    fn default() -> Self {
        ShareConfig {
            record_lock_duration_ms: DEFAULT_RECORD_LOCK_DURATION_MS,
            delivery_count_limit: DEFAULT_DELIVERY_COUNT_LIMIT,
            max_record_locks: DEFAULT_MAX_RECORD_LOCKS,
        }
    }
}

/// Why a share partition refused a call. [`ShareError::code`] is the Kafka error code to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// The request itself is malformed: ranges out of order or overlapping, a first offset past
    /// the last, acknowledge types missing or not one per offset, an unknown type, offsets past
    /// the records in flight (`INVALID_REQUEST`).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A record is not in a state that allows the call: not acquired, or acquired by another
    /// member (`INVALID_RECORD_STATE`).
    #[error("invalid record state: {0}")]
    InvalidRecordState(String),
    /// Persisted state that cannot be restored (Kafka fails the share partition's load,
    /// `UNKNOWN_SERVER_ERROR`).
    #[error("invalid persisted share partition state: {0}")]
    InvalidSnapshot(String),
}

impl ShareError {
    /// The Kafka error code for this error.
    pub fn code(&self) -> i16 {
        match self {
            ShareError::InvalidRequest(_) => INVALID_REQUEST,
            ShareError::InvalidRecordState(_) => INVALID_RECORD_STATE,
            ShareError::InvalidSnapshot(_) => UNKNOWN_SERVER_ERROR,
        }
    }
}

/// An inclusive range of offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OffsetRange {
    pub first_offset: i64,
    pub last_offset: i64,
}

impl OffsetRange {
    pub fn new(first_offset: i64, last_offset: i64) -> Self {
        OffsetRange {
            first_offset,
            last_offset,
        }
    }

    /// How many offsets the range holds (0 when its first offset is past its last).
    pub fn len(&self) -> u64 {
        span(self.first_offset, self.last_offset)
    }

    pub fn is_empty(&self) -> bool {
        self.first_offset > self.last_offset
    }
}

/// One record batch of a log read: its base offset and last offset. Offsets between two batches
/// of the same read (removed by compaction) are handed out with them, as Kafka does; the client
/// acknowledges them as gaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchedBatch {
    pub base_offset: i64,
    pub last_offset: i64,
}

/// What the broker read from the log for a share fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetch<'a> {
    /// The offset the log was read from ([`SharePartition::next_fetch_offset`]). Available
    /// records between it and the first batch's base offset are gone from the log (compaction,
    /// retention) and are archived; new records are only taken when it is at or before the
    /// window's end.
    pub fetch_offset: i64,
    /// The batches read, in offset order.
    pub batches: &'a [FetchedBatch],
    /// Offsets whose records must never be delivered: control records and, under
    /// read_committed, aborted transactions. Those records are archived, not acquired.
    pub skip: &'a [OffsetRange],
}

/// How strictly a share fetch's record limit is kept (KIP-1206 `ShareAcquireMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum AcquireMode {
    /// The limit is soft: acquisition goes on to the end of the fetched batch holding the last
    /// record within it (Kafka's default, `batch_optimized`, 0).
    #[default]
    BatchOptimized,
    /// At most the limit's number of records are acquired (`record_limit`, 1).
    RecordLimit,
}

impl AcquireMode {
    /// The mode of a ShareFetch request's `ShareAcquireMode` byte.
    pub fn from_code(code: i8) -> Result<Self, ShareError> {
        match code {
            0 => Ok(AcquireMode::BatchOptimized),
            1 => Ok(AcquireMode::RecordLimit),
            other => Err(ShareError::InvalidRequest(format!(
                "unknown share acquire mode {other}"
            ))),
        }
    }

    pub fn code(self) -> i8 {
        match self {
            AcquireMode::BatchOptimized => 0,
            AcquireMode::RecordLimit => 1,
        }
    }
}

/// Records handed to a member by [`SharePartition::acquire`] (a ShareFetch response's
/// `AcquiredRecords`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquiredRange {
    pub first_offset: i64,
    pub last_offset: i64,
    /// This delivery's number, counting it (1 for a record's first delivery).
    pub delivery_count: i16,
}

/// An acknowledgement type (Kafka's `AcknowledgeType`, plus the gap the client reports for
/// offsets that hold no record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AckType {
    /// 0: no record at this offset (compacted away, a control record); archived.
    Gap,
    /// 1: processed; the record is acknowledged.
    Accept,
    /// 2: give the record back for another delivery (archived at the delivery count limit).
    Release,
    /// 3: unprocessable; the record is archived.
    Reject,
    /// 4 (KIP-1222): still being processed; the lock starts over and the record stays acquired.
    Renew,
}

impl AckType {
    /// The type of an acknowledge-type byte; unknown bytes are `INVALID_REQUEST`.
    pub fn from_code(code: i8) -> Result<Self, ShareError> {
        match code {
            0 => Ok(AckType::Gap),
            1 => Ok(AckType::Accept),
            2 => Ok(AckType::Release),
            3 => Ok(AckType::Reject),
            4 => Ok(AckType::Renew),
            other => Err(ShareError::InvalidRequest(format!(
                "unknown acknowledge type {other}"
            ))),
        }
    }

    pub fn code(self) -> i8 {
        match self {
            AckType::Gap => 0,
            AckType::Accept => 1,
            AckType::Release => 2,
            AckType::Reject => 3,
            AckType::Renew => 4,
        }
    }
}

/// One acknowledgement batch of a ShareAcknowledge or ShareFetch request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    /// Either one type for the whole range or one per offset.
    pub types: Vec<AckType>,
}

impl AckBatch {
    /// A batch acknowledging every offset of `first_offset..=last_offset` the same way.
    pub fn uniform(first_offset: i64, last_offset: i64, ack: AckType) -> Self {
        AckBatch {
            first_offset,
            last_offset,
            types: vec![ack],
        }
    }
}

/// The state of a record in the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordState {
    /// Can be acquired (again).
    Available,
    /// Locked to `member` until `deadline_ms`.
    Acquired { member: String, deadline_ms: i64 },
    /// Processed; never delivered again.
    Acknowledged,
    /// Never delivered (again): rejected, a gap, past the delivery count limit, or skipped.
    Archived,
}

/// A run of records in the same state with the same delivery count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowEntry {
    pub first_offset: i64,
    pub last_offset: i64,
    pub state: RecordState,
    pub delivery_count: i16,
}

/// How many records of the window are in each state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WindowCounts {
    /// Every record from the start offset to the end offset (Kafka's in-flight message count).
    pub in_flight: u64,
    pub available: u64,
    pub acquired: u64,
    pub acknowledged: u64,
    pub archived: u64,
}

/// How many offsets `first..=last` holds (0 when `first > last`).
fn span(first: i64, last: i64) -> u64 {
    if first > last {
        0
    } else {
        // Two's complement: the difference of two i64 always fits a u64.
        (last.wrapping_sub(first) as u64).wrapping_add(1)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
