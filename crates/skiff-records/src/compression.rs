//! Compression of record payloads: bounded decompression for reading and compression for the
//! builder. The broker never recompresses: batches are stored as the producer sent them.
//!
//! The codecs are Kafka's (`Compression.wrapForInput`/`wrapForOutput`): gzip (concatenated
//! members allowed), snappy with xerial's framing as the Java client writes it (a stream without
//! the xerial magic is one raw snappy block, as librdkafka writes it), LZ4 in the standard *frame*
//! format, and zstd frames. Output never exceeds the caller's limit: a payload that would
//! decompress past it is refused as soon as the limit is crossed (for snappy, from the declared
//! length before anything is allocated), and the output buffer never grows past the limit.

use std::io::{Read, Write};

use bytes::Bytes;

use crate::attributes::{COMPRESSION_MASK, Compression};
use crate::error::{RecordsError, Result};

/// zstd frames may ask for a window up to 2^31 bytes; refuse anything past 16 MiB.
const ZSTD_WINDOW_LOG_MAX: u32 = 24;
/// zstd level of Kafka's default (`compression.zstd.level` = 3).
const ZSTD_LEVEL: i32 = 3;

const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_LEN: usize = 16;
/// Block size of xerial's `SnappyOutputStream` as Kafka's Java client uses it.
const XERIAL_BLOCK: usize = 32 * 1024;
/// Scratch buffer for streaming decoders.
const CHUNK: usize = 32 * 1024;

/// Why a payload could not be decompressed within its limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    #[error("decompressed data exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("corrupt {codec} payload: {reason}")]
    Corrupt { codec: &'static str, reason: String },
}

impl From<DecompressError> for RecordsError {
    fn from(e: DecompressError) -> Self {
        RecordsError::Decompression(e.to_string())
    }
}

type Bounded<T> = std::result::Result<T, DecompressError>;

fn corrupt(codec: &'static str, reason: impl std::fmt::Display) -> DecompressError {
    DecompressError::Corrupt {
        codec,
        reason: reason.to_string(),
    }
}

fn too_large(limit: usize) -> DecompressError {
    DecompressError::TooLarge { limit }
}

/// Returns the decompressed record payload, at most `max_bytes` long.
pub(crate) fn decompress_records(
    codec: Compression,
    payload: &Bytes,
    max_bytes: usize,
) -> Result<Bytes> {
    if codec == Compression::None {
        if payload.len() > max_bytes {
            return Err(too_large(max_bytes).into());
        }
        return Ok(payload.clone());
    }
    Ok(Bytes::from(decompress(codec, payload, max_bytes)?))
}

// Decoding the codec lives here, beside the codecs, rather than with the enum in `attributes`,
// which stays a leaf (it imports no error type).
impl Compression {
    /// Decodes the codec from batch attributes; codes 5..=7 are unassigned in Kafka.
    pub fn from_attributes(attributes: i16) -> Result<Self> {
        match attributes & COMPRESSION_MASK {
            0 => Ok(Self::None),
            1 => Ok(Self::Gzip),
            2 => Ok(Self::Snappy),
            3 => Ok(Self::Lz4),
            4 => Ok(Self::Zstd),
            other => Err(RecordsError::UnknownCompression(other as u8)),
        }
    }
}

/// Decompresses `input` written with `codec` (Kafka's formats: gzip members, xerial-framed or
/// raw snappy, LZ4 frames, zstd frames), producing at most `limit` bytes: output past the limit
/// is refused as soon as it would be produced (for snappy, from the declared length, before
/// anything is allocated). Shared by record batches and KIP-714 telemetry payloads.
pub fn decompress(codec: Compression, input: &[u8], limit: usize) -> Bounded<Vec<u8>> {
    let out = match codec {
        Compression::None => {
            if input.len() > limit {
                return Err(too_large(limit));
            }
            input.to_vec()
        }
        Compression::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(input), limit, "gzip")?,
        Compression::Snappy => snappy(input, limit)?,
        Compression::Lz4 => read_bounded(lz4_flex::frame::FrameDecoder::new(input), limit, "lz4")?,
        Compression::Zstd => {
            let mut decoder =
                zstd::stream::read::Decoder::new(input).map_err(|e| corrupt("zstd", e))?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| corrupt("zstd", e))?;
            read_bounded(decoder, limit, "zstd")?
        }
    };
    Ok(out)
}

/// Appends `data` to `out` unless that takes `out` past `limit`; capacity never exceeds `limit`.
fn push_bounded(out: &mut Vec<u8>, data: &[u8], limit: usize) -> Bounded<()> {
    let needed = out
        .len()
        .checked_add(data.len())
        .filter(|&n| n <= limit)
        .ok_or_else(|| too_large(limit))?;
    if out.capacity() < needed {
        let target = out.capacity().saturating_mul(2).max(needed).min(limit);
        out.reserve_exact(target - out.len());
    }
    out.extend_from_slice(data);
    Ok(())
}

fn read_bounded<R: Read>(mut reader: R, limit: usize, codec: &'static str) -> Bounded<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(corrupt(codec, e)),
        };
        push_bounded(&mut out, chunk.get(..n).unwrap_or_default(), limit)?;
    }
}

fn snappy(input: &[u8], limit: usize) -> Bounded<Vec<u8>> {
    let mut out = Vec::new();
    if input.starts_with(&XERIAL_MAGIC) {
        snappy_xerial(input, limit, &mut out)?;
    } else {
        snappy_block(input, limit, &mut out)?;
    }
    Ok(out)
}

/// One raw snappy block appended to `out`, refused from its declared length when `out` would grow
/// past `limit`.
fn snappy_block(block: &[u8], limit: usize, out: &mut Vec<u8>) -> Bounded<()> {
    let len = snap::raw::decompress_len(block).map_err(|e| corrupt("snappy", e))?;
    let end = out
        .len()
        .checked_add(len)
        .filter(|&n| n <= limit)
        .ok_or_else(|| too_large(limit))?;
    let start = out.len();
    out.resize(end, 0);
    let target = out
        .get_mut(start..)
        .ok_or_else(|| corrupt("snappy", "bad block bounds"))?;
    let written = snap::raw::Decoder::new()
        .decompress(block, target)
        .map_err(|e| corrupt("snappy", e))?;
    out.truncate(start + written);
    Ok(())
}

/// xerial framing: 8-byte magic, two big-endian i32 versions, then (i32 length, raw block)*.
fn snappy_xerial(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Bounded<()> {
    let mut rest = input
        .get(XERIAL_HEADER_LEN..)
        .ok_or_else(|| corrupt("snappy", "truncated xerial header"))?;
    while !rest.is_empty() {
        let (len_bytes, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt("snappy", "truncated xerial block length"))?;
        let len = usize::try_from(i32::from_be_bytes(*len_bytes))
            .map_err(|_| corrupt("snappy", "negative xerial block length"))?;
        let block = tail
            .get(..len)
            .ok_or_else(|| corrupt("snappy", "truncated xerial block"))?;
        snappy_block(block, limit, out)?;
        rest = tail.get(len..).unwrap_or_default();
    }
    Ok(())
}

fn encode_error(codec: &str, e: impl std::fmt::Display) -> RecordsError {
    RecordsError::Compression(format!("{codec}: {e}"))
}

/// Compresses data the way Kafka's Java producer does (xerial-framed snappy, LZ4 frames).
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>> {
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(data).map_err(|e| encode_error("gzip", e))?;
            enc.finish().map_err(|e| encode_error("gzip", e))
        }
        Compression::Snappy => {
            let mut out = XERIAL_MAGIC.to_vec();
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut encoder = snap::raw::Encoder::new();
            for piece in data.chunks(XERIAL_BLOCK) {
                let block = encoder
                    .compress_vec(piece)
                    .map_err(|e| encode_error("snappy", e))?;
                let len = i32::try_from(block.len()).map_err(|e| encode_error("snappy", e))?;
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_mode(lz4_flex::frame::BlockMode::Independent)
                .block_size(lz4_flex::frame::BlockSize::Max64KB);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            enc.write_all(data).map_err(|e| encode_error("lz4", e))?;
            enc.finish().map_err(|e| encode_error("lz4", e))
        }
        Compression::Zstd => {
            zstd::stream::encode_all(data, ZSTD_LEVEL).map_err(|e| encode_error("zstd", e))
        }
    }
}
