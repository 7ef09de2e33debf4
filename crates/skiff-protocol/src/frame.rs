//! Length-prefixed frames over tokio streams.
//!
//! A frame is a big-endian i32 size followed by that many bytes. The size is checked (negative,
//! or above the configured maximum) before any of the body is read or buffer space reserved,
//! so a hostile size costs nothing.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Kafka's default `socket.request.max.bytes`: 100 MiB.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 100 * 1024 * 1024;

/// Why no frame could be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} is negative")]
    NegativeSize { size: i32 },
    #[error("frame size {size} exceeds the maximum of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads frames from a stream into a reusable buffer.
#[derive(Debug)]
pub struct FrameReader<R> {
    reader: R,
    buffer: BytesMut,
    max_frame_size: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(reader: R, max_frame_size: usize) -> Self {
        FrameReader {
            reader,
            buffer: BytesMut::with_capacity(64 * 1024),
            max_frame_size,
        }
    }

    /// Checks whether the buffer holds a whole frame; returns its body if so. Errors on a size
    /// that can never be valid.
    fn parse_buffered(&mut self) -> Result<Option<Bytes>, FrameError> {
        let Some(size_bytes) = self.buffer.get(..4) else {
            return Ok(None);
        };
        let mut size_bytes = size_bytes;
        let size = size_bytes.get_i32();
        let size = check_size(size, self.max_frame_size)?;
        if self.buffer.len() < 4 + size {
            // Reserve only what this (validated) frame still needs.
            self.buffer.reserve(4 + size - self.buffer.len());
            return Ok(None);
        }
        self.buffer.advance(4);
        Ok(Some(self.buffer.split_to(size).freeze()))
    }

    /// The next frame's body (without the size prefix), or `None` on a clean end of stream.
    pub async fn read_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        loop {
            if let Some(frame) = self.parse_buffered()? {
                return Ok(Some(frame));
            }
            if self.buffer.capacity() == self.buffer.len() {
                self.buffer.reserve(64 * 1024);
            }
            if self.reader.read_buf(&mut self.buffer).await? == 0 {
                return if self.buffer.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
    }

    /// Whether a whole frame is already buffered (lets a connection batch pipelined requests).
    pub fn has_buffered_frame(&self) -> bool {
        match self.buffer.get(..4) {
            Some(mut size) => {
                let size = size.get_i32();
                size >= 0 && self.buffer.len() >= 4 + size as usize
            }
            None => false,
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.reader
    }
}

fn check_size(size: i32, max: usize) -> Result<usize, FrameError> {
    let size = usize::try_from(size).map_err(|_| FrameError::NegativeSize { size })?;
    if size > max {
        return Err(FrameError::TooLarge { size, max });
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_pipelined_frames_and_clean_eof() {
        let data: &[u8] = &[0, 0, 0, 2, b'h', b'i', 0, 0, 0, 0, 0, 0, 0, 1, b'x'];
        let mut reader = FrameReader::new(data, 1024);
        assert_eq!(
            reader.read_frame().await.ok().flatten().as_deref(),
            Some(&b"hi"[..])
        );
        assert!(reader.has_buffered_frame());
        assert_eq!(
            reader.read_frame().await.ok().flatten().as_deref(),
            Some(&b""[..])
        );
        assert_eq!(
            reader.read_frame().await.ok().flatten().as_deref(),
            Some(&b"x"[..])
        );
        assert!(matches!(reader.read_frame().await, Ok(None)));
    }

    #[tokio::test]
    async fn rejects_hostile_sizes_before_reading() {
        let data: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        let mut reader = FrameReader::new(data, 1024);
        assert!(matches!(
            reader.read_frame().await,
            Err(FrameError::NegativeSize { size: -1 })
        ));
        let data: &[u8] = &[0x7f, 0xff, 0xff, 0xff];
        let mut reader = FrameReader::new(data, 1024);
        assert!(matches!(
            reader.read_frame().await,
            Err(FrameError::TooLarge { .. })
        ));
        assert!(reader.buffer.capacity() < 1024 * 1024);
    }

    #[tokio::test]
    async fn truncated_frame_is_an_error() {
        let data: &[u8] = &[0, 0, 0, 9, 1, 2];
        let mut reader = FrameReader::new(data, 1024);
        assert!(matches!(
            reader.read_frame().await,
            Err(FrameError::Truncated)
        ));
    }
}
