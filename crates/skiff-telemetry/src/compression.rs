//! Bounded decompression of PushTelemetry payloads, with Kafka's compression type IDs.
//!
//! Kafka decompresses telemetry with the record-batch codecs (`Compression.wrapForInput`):
//! gzip (concatenated members allowed), snappy through xerial's `SnappyInputStream` (the xerial
//! framing when the stream starts with its magic, otherwise one raw snappy block — librdkafka sends
//! raw), LZ4 in the standard *frame* format, and zstd frames. Output never exceeds the caller's
//! limit: a payload that would decompress past it is refused as soon as the limit is crossed (or,
//! for snappy, from the declared length before anything is allocated).

use skiff_records::Compression;
use skiff_records::compression as records;

pub const NONE: i8 = 0;
pub const GZIP: i8 = 1;
pub const SNAPPY: i8 = 2;
pub const LZ4: i8 = 3;
pub const ZSTD: i8 = 4;

/// What GetTelemetrySubscriptions offers, in preference order.
pub const ACCEPTED_COMPRESSION_TYPES: [i8; 4] = [ZSTD, LZ4, GZIP, SNAPPY];

#[cfg(test)]
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];

/// Whether Kafka knows the compression type (`CompressionType.forId`); NONE counts.
pub fn is_known(compression_type: i8) -> bool {
    (NONE..=ZSTD).contains(&compression_type)
}

/// Why a payload could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    #[error("unknown compression type {0}")]
    Unsupported(i8),
    #[error("decompressed telemetry exceeds the maximum of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("corrupt {codec} payload: {reason}")]
    Corrupt { codec: &'static str, reason: String },
}

/// Decompresses `input` compressed with `compression_type`, producing at most `limit` bytes.
/// The codecs are the record batches' (`skiff_records::compression`), as in Kafka.
pub fn decompress(
    compression_type: i8,
    input: &[u8],
    limit: usize,
) -> Result<Vec<u8>, DecompressError> {
    if !is_known(compression_type) {
        return Err(DecompressError::Unsupported(compression_type));
    }
    let codec = Compression::from_attributes(i16::from(compression_type))
        .map_err(|_| DecompressError::Unsupported(compression_type))?;
    skiff_records::compression::decompress(codec, input, limit).map_err(|e| match e {
        records::DecompressError::TooLarge { limit } => DecompressError::TooLarge { limit },
        records::DecompressError::Corrupt { codec, reason } => {
            DecompressError::Corrupt { codec, reason }
        }
    })
}

#[cfg(test)]
pub(crate) mod test_codecs {
    //! Compressors for tests.
    use std::io::Write;

    pub fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    pub fn snappy_raw(data: &[u8]) -> Vec<u8> {
        snap::raw::Encoder::new().compress_vec(data).unwrap()
    }

    pub fn snappy_xerial(data: &[u8], chunk: usize) -> Vec<u8> {
        let mut out = super::XERIAL_MAGIC.to_vec();
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        for piece in data.chunks(chunk.max(1)) {
            let block = snappy_raw(piece);
            out.extend_from_slice(&(block.len() as i32).to_be_bytes());
            out.extend_from_slice(&block);
        }
        out
    }

    pub fn lz4(data: &[u8]) -> Vec<u8> {
        let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    pub fn zstd(data: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(data, 3).unwrap()
    }

    pub fn compress(compression_type: i8, data: &[u8]) -> Vec<u8> {
        match compression_type {
            super::GZIP => gzip(data),
            super::SNAPPY => snappy_raw(data),
            super::LZ4 => lz4(data),
            super::ZSTD => zstd(data),
            _ => data.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_codecs::{compress, snappy_xerial};
    use super::*;

    fn sample() -> Vec<u8> {
        (0..10_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect()
    }

    #[test]
    fn every_codec_round_trips() {
        let data = sample();
        for ct in [NONE, GZIP, SNAPPY, LZ4, ZSTD] {
            let compressed = compress(ct, &data);
            assert_eq!(
                decompress(ct, &compressed, data.len()).unwrap(),
                data,
                "type {ct}"
            );
        }
        let xerial = snappy_xerial(&data, 4096);
        assert_eq!(decompress(SNAPPY, &xerial, data.len()).unwrap(), data);
    }

    #[test]
    fn unknown_types_are_refused() {
        assert!(!is_known(5));
        assert!(!is_known(-1));
        assert_eq!(
            decompress(5, b"x", 10),
            Err(DecompressError::Unsupported(5))
        );
    }

    #[test]
    fn bombs_stop_at_the_limit() {
        // 8 MiB of zeros compresses to a few hundred KiB at most with every codec.
        let bomb = vec![0u8; 8 << 20];
        let limit = 256 << 10;
        for ct in [GZIP, SNAPPY, LZ4, ZSTD] {
            let compressed = compress(ct, &bomb);
            assert!(
                compressed.len() < 1 << 20,
                "type {ct}: {}",
                compressed.len()
            );
            assert_eq!(
                decompress(ct, &compressed, limit),
                Err(DecompressError::TooLarge { limit }),
                "type {ct}"
            );
        }
        let xerial = snappy_xerial(&bomb, 64 << 10);
        assert_eq!(
            decompress(SNAPPY, &xerial, limit),
            Err(DecompressError::TooLarge { limit })
        );
        assert_eq!(
            decompress(NONE, &[0u8; 11], 10),
            Err(DecompressError::TooLarge { limit: 10 })
        );
    }

    #[test]
    fn snappy_declared_length_is_checked_before_allocating() {
        // A raw snappy block whose varint header claims 2^32-1 bytes.
        let block = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert_eq!(
            decompress(SNAPPY, &block, 1 << 20),
            Err(DecompressError::TooLarge { limit: 1 << 20 })
        );
    }

    #[test]
    fn garbage_is_corrupt_not_a_panic() {
        for ct in [GZIP, SNAPPY, LZ4, ZSTD] {
            let result = decompress(ct, b"definitely not compressed", 1 << 20);
            assert!(
                matches!(result, Err(DecompressError::Corrupt { .. })),
                "type {ct}: {result:?}"
            );
        }
        // Truncated xerial framing.
        let mut xerial = snappy_xerial(b"hello hello hello", 8);
        xerial.truncate(xerial.len() - 2);
        assert!(matches!(
            decompress(SNAPPY, &xerial, 100),
            Err(DecompressError::Corrupt { .. })
        ));
    }
}
