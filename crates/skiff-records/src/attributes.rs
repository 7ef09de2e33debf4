//! The batch attribute bits and the two enums they encode: the compression codec
//! ([`Compression`], bits 0-2) and the timestamp type ([`TimestampType`], bit 3), plus the
//! transactional, control and delete-horizon flags. A leaf module: the batch view, the records
//! decoder, the codecs and the error type all read these, and it imports none of them.

pub(crate) const COMPRESSION_MASK: i16 = 0x07;
pub(crate) const TIMESTAMP_TYPE_MASK: i16 = 0x08;
pub(crate) const TRANSACTIONAL_MASK: i16 = 0x10;
pub(crate) const CONTROL_MASK: i16 = 0x20;
pub(crate) const DELETE_HORIZON_MASK: i16 = 0x40;

/// Compression codec named by the low three attribute bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    /// The attribute bits for this codec.
    pub fn code(self) -> i16 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }
}

/// Meaning of the batch timestamps (attribute bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker when appending; every record's timestamp is the batch max timestamp.
    LogAppendTime,
}

impl TimestampType {
    /// The timestamp type named by batch attributes (bit 3).
    pub(crate) fn from_attributes(attributes: i16) -> Self {
        if attributes & TIMESTAMP_TYPE_MASK != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
}
