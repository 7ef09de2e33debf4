use thiserror::Error;

/// Why a record set, batch or record was rejected.
///
/// Callers branch on the kind: a Fetch consumer tolerates [`RecordsError::PartialBatch`] at the
/// end of a response, a Produce handler maps [`RecordsError::UnsupportedMagic`] to
/// `UNSUPPORTED_FOR_MESSAGE_FORMAT` and everything else to `CORRUPT_MESSAGE`/`INVALID_RECORD`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecordsError {
    /// The buffer ends inside a batch: `available` bytes are left but the batch needs `needed`
    /// (when the length field itself is cut, `needed` is the 12-byte log overhead).
    #[error("partial record batch: {available} bytes left, batch needs {needed}")]
    PartialBatch { needed: u64, available: usize },
    /// The batch length field is below the v2 header size or above any sane bound.
    #[error("invalid batch length {length}")]
    InvalidBatchLength { length: i32 },
    /// Magic 0/1 (legacy message sets) or an unknown magic byte.
    #[error("unsupported message format (magic {magic})")]
    UnsupportedMagic { magic: i8 },
    /// The stored CRC-32C does not match the bytes from the attributes to the end of the batch.
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    /// The batch header is internally inconsistent (record count, offset delta, attributes).
    #[error("invalid record batch: {0}")]
    InvalidBatch(&'static str),
    /// A record inside an (uncompressed or decompressed) batch is malformed.
    #[error("invalid record: {0}")]
    InvalidRecord(&'static str),
    /// The attributes name a compression codec this crate cannot decode (3 bits, 5..=7 unused).
    #[error("unknown compression codec {0}")]
    UnknownCompression(u8),
    /// Record iteration over a compressed batch whose codec is not compiled in.
    #[error("record iteration over a {0:?}-compressed batch is not supported")]
    CompressedBatch(crate::attributes::Compression),
    /// Decompression failed or produced more than the allowed number of bytes.
    #[error("decompression failed: {0}")]
    Decompression(String),
    /// Compressing a built batch's records failed.
    #[error("compression failed: {0}")]
    Compression(String),
    /// A builder input cannot be encoded (too many records, too large, bad offsets).
    #[error("cannot encode batch: {0}")]
    Encode(&'static str),
    /// A record set had no batch where at least one is required.
    #[error("record set is empty")]
    Empty,
}

/// Shorthand for results of this crate.
pub type Result<T, E = RecordsError> = std::result::Result<T, E>;
