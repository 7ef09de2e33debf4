//! Decompression of record payloads for reading. The broker never recompresses: batches are
//! stored as the producer sent them.

use bytes::Bytes;

use crate::batch::Compression;
use crate::error::{RecordsError, Result};

/// Returns the decompressed record payload, at most `max_bytes` long.
pub(crate) fn decompress(codec: Compression, payload: &Bytes, max_bytes: usize) -> Result<Bytes> {
    match codec {
        Compression::None => {
            if payload.len() > max_bytes {
                return Err(RecordsError::Decompression(format!(
                    "payload of {} bytes exceeds the limit of {max_bytes}",
                    payload.len()
                )));
            }
            Ok(payload.clone())
        }
        other => Err(RecordsError::CompressedBatch(other)),
    }
}
