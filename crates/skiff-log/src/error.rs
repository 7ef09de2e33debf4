use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use skiff_records::RecordsError;
use thiserror::Error;

/// Errors of the partition log. Callers branch on the kind to pick a Kafka error code.
#[derive(Debug, Error)]
pub enum LogError {
    /// A file-system call failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The appended record set is malformed (`CORRUPT_MESSAGE` / `INVALID_RECORD` /
    /// `UNSUPPORTED_FOR_MESSAGE_FORMAT`).
    #[error(transparent)]
    InvalidRecords(#[from] RecordsError),
    /// One batch exceeds `max.message.bytes` (`MESSAGE_TOO_LARGE`).
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: usize },
    /// The whole appended record set exceeds `segment.bytes` (`RECORD_LIST_TOO_LARGE`).
    #[error("record set of {size} bytes exceeds segment.bytes {max}")]
    RecordSetTooLarge { size: usize, max: u64 },
    /// The requested offset is outside `[log_start, log_end]` (`OFFSET_OUT_OF_RANGE`).
    #[error("offset {offset} out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    /// A segment holds bytes that are not a valid batch where one must be (strict recovery, or a
    /// damaged older segment).
    #[error("corrupt log segment {} at byte {position}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        position: u64,
        reason: String,
    },
    /// The log start checkpoint exists but does not validate.
    #[error("corrupt checkpoint {}: {reason}", path.display())]
    CorruptCheckpoint { path: PathBuf, reason: &'static str },
    /// The configuration is unusable.
    #[error("invalid log config: {0}")]
    InvalidConfig(&'static str),
    /// Offsets would pass `i64::MAX`.
    #[error("log offsets exhausted")]
    OffsetOverflow,
    /// An fdatasync failed; the page cache state is unknown, so the log must not be trusted for
    /// durability any more (Kafka halts the broker on this).
    #[error("fdatasync failed: {0}")]
    SyncFailed(Arc<io::Error>),
    /// Writing a segment failed after its file was open: bytes may sit half written past the
    /// log end, so the log takes no more appends until it is recovered at the next start
    /// (Kafka takes the log directory offline).
    #[error("writing the segment failed: {0}")]
    WriteFailed(Arc<io::Error>),
    /// An earlier write or fdatasync failed; the log refuses appends until the broker restarts.
    #[error("the log is offline after an earlier failure: {0}")]
    Offline(Arc<str>),
    /// A durability wait failed without any data being at risk (the sync could not be
    /// started); a retry may succeed.
    #[error("sync not started: {0}")]
    TransientSync(Arc<io::Error>),
}

/// Shorthand for results of this crate.
pub type Result<T, E = LogError> = std::result::Result<T, E>;

/// Attaches the operation and path to an `io::Error`.
pub(crate) trait IoContext<T> {
    fn io(self, op: &'static str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn io(self, op: &'static str, path: &Path) -> Result<T> {
        self.map_err(|source| LogError::Io {
            op,
            path: path.to_path_buf(),
            source,
        })
    }
}
