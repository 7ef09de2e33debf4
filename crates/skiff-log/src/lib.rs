//! The durable log of one Kafka partition: a directory of segment files holding record batches
//! exactly as producers sent them (offsets assigned in place), sparse offset and time indexes,
//! a crash-safe log-start checkpoint, recovery that truncates a torn tail, retention, and
//! group-committed fdatasync for `flush=always`, and a bounded cache of the segment files'
//! descriptors shared by all logs ([`FileCache`]).
//!
//! The core ([`PartitionLog`]) is synchronous `std::fs` code without internal locking;
//! [`GroupCommitter`] is the one async piece, batching fdatasync calls on a blocking thread so
//! that a sync never runs under the lock appends need.

mod checkpoint;
mod config;
mod error;
pub mod faults;
mod files;
mod group_commit;
mod index;
mod log;
mod segment;

pub use config::{FlushPolicy, LogConfig, RecoveryMode, TimestampPolicy};
pub use error::{LogError, Result};
pub use files::{FileCache, FileCacheHandle};
pub use group_commit::{GroupCommitter, SyncSource};
pub use log::{AppendInfo, DeletionOutcome, PartitionLog, ReadResult, SyncTarget, TimestampOffset};

#[cfg(test)]
mod tests;
