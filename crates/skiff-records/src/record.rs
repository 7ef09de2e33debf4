//! Records inside a v2 batch: zero-copy decoding and the encoder used by the builder.
//!
//! Layout of one record (all integers zig-zag varints unless noted):
//! `length, attributes (i8), timestampDelta (varlong), offsetDelta, keyLength, key,
//! valueLength, value, headerCount, [headerKeyLength, headerKey, headerValueLength, headerValue]*`.
//! A length of -1 means null (keys, values, header values).

use bytes::Bytes;

use crate::error::{RecordsError, Result};
use crate::wire::{Cursor, put_varint, put_varlong, varint_len};

/// Smallest encoded record: one byte each for length, attributes, timestamp delta, offset delta,
/// key length, value length and header count. Bounds record counts before any work.
pub(crate) const MIN_RECORD_SIZE: usize = 7;

/// One decoded record; key, value and headers are slices of the batch (or decompressed) buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    /// Create time, or the batch's log-append time when the batch is stamped so.
    pub timestamp: i64,
    /// Unused by Kafka today; kept for round-tripping.
    pub attributes: i8,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: RecordHeaders,
}

/// A record's headers, validated when the record was decoded and read lazily.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordHeaders {
    raw: Bytes,
    count: usize,
}

/// One record header. Kafka header keys are UTF-8 strings; they are returned as bytes and checked
/// for UTF-8 on decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

impl RecordHeaders {
    pub fn len(&self) -> usize {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    pub fn iter(&self) -> impl Iterator<Item = Header> + '_ {
        let mut cursor = Cursor::new(&self.raw);
        // The headers were validated when the record was decoded, so the decode cannot fail here;
        // should it, the iteration just ends.
        (0..self.count).map_while(move |_| read_header(&mut cursor, &self.raw).ok())
    }
}

fn read_nullable<'a>(cursor: &mut Cursor<'a>, what: &'static str) -> Result<Option<&'a [u8]>> {
    let len = cursor.varint(what)?;
    match len {
        -1 => Ok(None),
        len if len < -1 => Err(RecordsError::InvalidRecord(what)),
        len => Ok(Some(cursor.take(len as usize, what)?)),
    }
}

fn read_header(cursor: &mut Cursor<'_>, raw: &Bytes) -> Result<Header> {
    let key = read_nullable(cursor, "header key")?
        .ok_or(RecordsError::InvalidRecord("null header key"))?;
    if std::str::from_utf8(key).is_err() {
        return Err(RecordsError::InvalidRecord("header key is not UTF-8"));
    }
    let value = read_nullable(cursor, "header value")?;
    Ok(Header {
        key: raw.slice_ref(key),
        value: value.map(|value| raw.slice_ref(value)),
    })
}

/// Bounded iterator over the records of one batch.
///
/// It yields at most the header's record count, checks each record against its declared length,
/// and reports leftover bytes after the last record as an error (Kafka does the same). The first
/// error ends the iteration.
#[derive(Debug, Clone)]
pub struct Records {
    payload: Bytes,
    position: usize,
    remaining: usize,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    failed: bool,
}

impl Records {
    /// A decoder of `record_count` records in `payload`; `log_append_time` is the batch's max
    /// timestamp when the broker set it (every record then carries it).
    pub(crate) fn new(
        payload: Bytes,
        record_count: i32,
        base_offset: i64,
        base_timestamp: i64,
        log_append_time: Option<i64>,
    ) -> Self {
        Self {
            payload,
            position: 0,
            remaining: record_count.max(0) as usize,
            base_offset,
            base_timestamp,
            log_append_time,
            failed: false,
        }
    }

    fn decode_next(&mut self) -> Result<Record> {
        let rest = self.payload.get(self.position..).unwrap_or_default();
        let mut cursor = Cursor::new(rest);
        let length = cursor.varint("record length")?;
        if length < 0 {
            return Err(RecordsError::InvalidRecord("negative record length"));
        }
        let body = cursor.take(length as usize, "record length beyond batch")?;
        self.position += rest.len() - cursor.remaining();

        let mut cursor = Cursor::new(body);
        let attributes = cursor.i8("record attributes")?;
        let timestamp_delta = cursor.varlong("timestamp delta")?;
        let offset_delta = cursor.varint("offset delta")?;
        let key = read_nullable(&mut cursor, "key")?;
        let value = read_nullable(&mut cursor, "value")?;
        let header_count = cursor.varint("header count")?;
        if header_count < 0 {
            return Err(RecordsError::InvalidRecord("negative header count"));
        }
        let headers_start = cursor.remaining();
        for _ in 0..header_count {
            read_header(&mut cursor, &self.payload)?;
        }
        if cursor.remaining() != 0 {
            return Err(RecordsError::InvalidRecord(
                "record length does not match its fields",
            ));
        }
        let headers_raw = body.get(body.len() - headers_start..).unwrap_or_default();

        let offset = self
            .base_offset
            .checked_add(i64::from(offset_delta))
            .ok_or(RecordsError::InvalidRecord("offset overflows"))?;
        let timestamp = match self.log_append_time {
            Some(timestamp) => timestamp,
            None => self
                .base_timestamp
                .checked_add(timestamp_delta)
                .ok_or(RecordsError::InvalidRecord("timestamp overflows"))?,
        };
        Ok(Record {
            offset,
            timestamp,
            attributes,
            key: key.map(|key| self.payload.slice_ref(key)),
            value: value.map(|value| self.payload.slice_ref(value)),
            headers: RecordHeaders {
                raw: self.payload.slice_ref(headers_raw),
                count: header_count as usize,
            },
        })
    }
}

impl Iterator for Records {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.remaining == 0 {
            if self.position < self.payload.len() {
                self.failed = true;
                return Some(Err(RecordsError::InvalidRecord(
                    "bytes left after the last record",
                )));
            }
            return None;
        }
        self.remaining -= 1;
        let record = self.decode_next();
        if record.is_err() {
            self.failed = true;
        }
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining + 1))
    }
}

/// Appends one encoded record to `out`. Returns an error if a length does not fit Kafka's i32.
pub(crate) fn encode_record(
    out: &mut Vec<u8>,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&[u8], Option<&[u8]>)],
) -> Result<()> {
    let mut body =
        Vec::with_capacity(16 + key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len));
    body.push(0); // record attributes: unused
    put_varlong(&mut body, timestamp_delta);
    put_varint(&mut body, offset_delta);
    put_nullable(&mut body, key)?;
    put_nullable(&mut body, value)?;
    put_varint(&mut body, len_i32(headers.len())?);
    for (key, value) in headers {
        if std::str::from_utf8(key).is_err() {
            return Err(RecordsError::Encode("header key is not UTF-8"));
        }
        put_nullable(&mut body, Some(key))?;
        put_nullable(&mut body, *value)?;
    }
    let length = len_i32(body.len())?;
    out.reserve(varint_len(length) + body.len());
    put_varint(out, length);
    out.extend_from_slice(&body);
    Ok(())
}

fn len_i32(len: usize) -> Result<i32> {
    i32::try_from(len).map_err(|_| RecordsError::Encode("length does not fit in i32"))
}

fn put_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) -> Result<()> {
    match bytes {
        None => put_varint(out, -1),
        Some(bytes) => {
            put_varint(out, len_i32(bytes.len())?);
            out.extend_from_slice(bytes);
        }
    }
    Ok(())
}
