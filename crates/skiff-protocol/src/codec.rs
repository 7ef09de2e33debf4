//! Bounded, zero-copy primitives of the Kafka wire format, used by the generated message codecs.
//!
//! Every read checks the bytes left before it touches or allocates anything: a length or a count
//! that cannot fit in what remains of the frame is an error, not an allocation. Strings and byte
//! fields are returned as slices of the input `Bytes` (no copy).

use bytes::{Buf, BufMut, Bytes, BytesMut};
pub use bytestring::ByteString;

use crate::uuid::Uuid;

/// Why a frame, header or message body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("truncated input: needed {needed} bytes, {remaining} left")]
    Truncated { needed: usize, remaining: usize },
    #[error("invalid length {0}")]
    InvalidLength(i64),
    #[error("null where the field is not nullable")]
    UnexpectedNull,
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    #[error("variable-length integer is longer than {0} bytes")]
    VarintTooLong(u8),
    #[error("array of {count} elements cannot fit in the {remaining} bytes left")]
    ArrayTooLong { count: usize, remaining: usize },
    #[error("tagged field {tag} follows tag {previous}: tags must be strictly ascending")]
    TagOrder { tag: u32, previous: u32 },
    #[error("tagged field {tag} declares {declared} bytes but its value is {used} bytes")]
    TaggedFieldSize {
        tag: u32,
        declared: usize,
        used: usize,
    },
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("{api} version {version} is not supported")]
    UnsupportedVersion { api: &'static str, version: i16 },
}

/// Why a message could not be encoded at the requested version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("field {0} is null but not nullable at this version")]
    NullNotAllowed(&'static str),
    #[error("{what} of {len} is too long for the wire format")]
    TooLong { what: &'static str, len: usize },
    #[error("{api} version {version} is not supported")]
    UnsupportedVersion { api: &'static str, version: i16 },
}

pub type DecodeResult<T> = Result<T, DecodeError>;
pub type EncodeResult = Result<(), EncodeError>;

/// A tagged field this codec does not know, kept so it can be re-encoded unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawTaggedField {
    pub tag: u32,
    pub data: Bytes,
}

/// A message or nested structure that can be written at a given version.
pub trait Encodable {
    fn encode(&self, buf: &mut BytesMut, version: i16) -> EncodeResult;
}

/// A message or nested structure that can be read at a given version.
pub trait Decodable: Sized {
    fn decode(buf: &mut Bytes, version: i16) -> DecodeResult<Self>;
}

/// A top-level message (request, response, header or data record) and its version facts.
pub trait Message: Encodable + Decodable + Default {
    const NAME: &'static str;
    const LOWEST_VERSION: i16;
    const HIGHEST_VERSION: i16;
    /// The first flexible version, or `None` when the message is never flexible.
    const FLEXIBLE_SINCE: Option<i16>;

    fn is_flexible(version: i16) -> bool {
        matches!(Self::FLEXIBLE_SINCE, Some(first) if version >= first)
    }
    fn supports_version(version: i16) -> bool {
        (Self::LOWEST_VERSION..=Self::HIGHEST_VERSION).contains(&version)
    }
}

#[inline]
fn ensure(buf: &Bytes, needed: usize) -> DecodeResult<()> {
    if buf.remaining() < needed {
        Err(DecodeError::Truncated {
            needed,
            remaining: buf.remaining(),
        })
    } else {
        Ok(())
    }
}

/// Takes exactly `len` bytes off the front, as a zero-copy slice.
#[inline]
pub fn take(buf: &mut Bytes, len: usize) -> DecodeResult<Bytes> {
    ensure(buf, len)?;
    Ok(buf.split_to(len))
}

macro_rules! fixed_readers {
    ($($name:ident: $ty:ty = $get:ident, $size:expr;)*) => {$(
        #[inline]
        pub fn $name(buf: &mut Bytes) -> DecodeResult<$ty> {
            ensure(buf, $size)?;
            Ok(buf.$get())
        }
    )*};
}

fixed_readers! {
    read_i8: i8 = get_i8, 1;
    read_i16: i16 = get_i16, 2;
    read_u16: u16 = get_u16, 2;
    read_i32: i32 = get_i32, 4;
    read_u32: u32 = get_u32, 4;
    read_i64: i64 = get_i64, 8;
    read_f64: f64 = get_f64, 8;
}

/// Kafka reads any non-zero byte as `true`.
#[inline]
pub fn read_bool(buf: &mut Bytes) -> DecodeResult<bool> {
    Ok(read_i8(buf)? != 0)
}

#[inline]
pub fn read_uuid(buf: &mut Bytes) -> DecodeResult<Uuid> {
    ensure(buf, 16)?;
    Ok(Uuid::from_u128(buf.get_u128()))
}

/// An unsigned LEB128 varint of at most 5 bytes (32 bits).
#[inline]
pub fn read_unsigned_varint(buf: &mut Bytes) -> DecodeResult<u32> {
    let mut value: u32 = 0;
    for i in 0..5u32 {
        let byte = read_i8(buf)? as u8;
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(DecodeError::VarintTooLong(5))
}

/// An unsigned LEB128 varint of at most 10 bytes (64 bits).
#[inline]
pub fn read_unsigned_varlong(buf: &mut Bytes) -> DecodeResult<u64> {
    let mut value: u64 = 0;
    for i in 0..10u32 {
        let byte = read_i8(buf)? as u8;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(DecodeError::VarintTooLong(10))
}

/// A zig-zag encoded signed varint (32 bits).
#[inline]
pub fn read_varint(buf: &mut Bytes) -> DecodeResult<i32> {
    let raw = read_unsigned_varint(buf)?;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// A zig-zag encoded signed varlong (64 bits).
#[inline]
pub fn read_varlong(buf: &mut Bytes) -> DecodeResult<i64> {
    let raw = read_unsigned_varlong(buf)?;
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// Reads a length prefix: `None` means null. Compact lengths are stored plus one.
#[inline]
fn read_length(buf: &mut Bytes, compact: bool, wide: bool) -> DecodeResult<Option<usize>> {
    let raw: i64 = if compact {
        i64::from(read_unsigned_varint(buf)?) - 1
    } else if wide {
        i64::from(read_i32(buf)?)
    } else {
        i64::from(read_i16(buf)?)
    };
    match raw {
        -1 => Ok(None),
        n if n < -1 => Err(DecodeError::InvalidLength(n)),
        n => usize::try_from(n)
            .map(Some)
            .map_err(|_| DecodeError::InvalidLength(n)),
    }
}

fn to_string(bytes: Bytes) -> DecodeResult<ByteString> {
    ByteString::try_from(bytes).map_err(|_| DecodeError::InvalidUtf8)
}

/// A nullable string: int16 length (or compact varint length + 1), then UTF-8 bytes.
#[inline]
pub fn read_nullable_string(buf: &mut Bytes, compact: bool) -> DecodeResult<Option<ByteString>> {
    match read_length(buf, compact, false)? {
        None => Ok(None),
        Some(len) => Ok(Some(to_string(take(buf, len)?)?)),
    }
}

#[inline]
pub fn read_string(buf: &mut Bytes, compact: bool) -> DecodeResult<ByteString> {
    read_nullable_string(buf, compact)?.ok_or(DecodeError::UnexpectedNull)
}

/// Nullable bytes (also used for record sets): int32 length (or compact varint length + 1).
#[inline]
pub fn read_nullable_bytes(buf: &mut Bytes, compact: bool) -> DecodeResult<Option<Bytes>> {
    match read_length(buf, compact, true)? {
        None => Ok(None),
        Some(len) => Ok(Some(take(buf, len)?)),
    }
}

#[inline]
pub fn read_bytes(buf: &mut Bytes, compact: bool) -> DecodeResult<Bytes> {
    read_nullable_bytes(buf, compact)?.ok_or(DecodeError::UnexpectedNull)
}

/// A nullable array. The count is checked against the bytes left (every element takes at least
/// one byte) before anything is allocated, and the vector grows only as elements are decoded.
pub fn read_nullable_array<T>(
    buf: &mut Bytes,
    compact: bool,
    mut element: impl FnMut(&mut Bytes) -> DecodeResult<T>,
) -> DecodeResult<Option<Vec<T>>> {
    let Some(count) = read_length(buf, compact, true)? else {
        return Ok(None);
    };
    if count > buf.remaining() {
        return Err(DecodeError::ArrayTooLong {
            count,
            remaining: buf.remaining(),
        });
    }
    let mut items = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        items.push(element(buf)?);
    }
    Ok(Some(items))
}

pub fn read_array<T>(
    buf: &mut Bytes,
    compact: bool,
    element: impl FnMut(&mut Bytes) -> DecodeResult<T>,
) -> DecodeResult<Vec<T>> {
    read_nullable_array(buf, compact, element)?.ok_or(DecodeError::UnexpectedNull)
}

/// A nullable nested structure: a marker byte (-1 = null, anything else = present), then the
/// structure.
pub fn read_nullable_struct<T>(
    buf: &mut Bytes,
    decode: impl FnOnce(&mut Bytes) -> DecodeResult<T>,
) -> DecodeResult<Option<T>> {
    if read_i8(buf)? < 0 {
        Ok(None)
    } else {
        decode(buf).map(Some)
    }
}

/// Reads a tagged-field section, handing each field's bytes to `field` in ascending tag order.
pub fn read_tagged_fields(
    buf: &mut Bytes,
    mut field: impl FnMut(u32, Bytes) -> DecodeResult<()>,
) -> DecodeResult<()> {
    let count = read_unsigned_varint(buf)? as usize;
    // Each field needs at least a tag byte and a size byte.
    if count > buf.remaining() / 2 {
        return Err(DecodeError::ArrayTooLong {
            count,
            remaining: buf.remaining(),
        });
    }
    let mut previous: Option<u32> = None;
    for _ in 0..count {
        let tag = read_unsigned_varint(buf)?;
        if let Some(previous) = previous
            && tag <= previous
        {
            return Err(DecodeError::TagOrder { tag, previous });
        }
        previous = Some(tag);
        let size = read_unsigned_varint(buf)? as usize;
        let data = take(buf, size)?;
        field(tag, data)?;
    }
    Ok(())
}

/// Decodes a known tagged field from its own bytes and checks that it used all of them.
pub fn decode_tagged<T>(
    tag: u32,
    mut data: Bytes,
    decode: impl FnOnce(&mut Bytes) -> DecodeResult<T>,
) -> DecodeResult<T> {
    let declared = data.len();
    let value = decode(&mut data)?;
    if data.has_remaining() {
        return Err(DecodeError::TaggedFieldSize {
            tag,
            declared,
            used: declared - data.remaining(),
        });
    }
    Ok(value)
}

// ----------------------------------------------------------------------------------------------
// Writers

#[inline]
pub fn write_i8(buf: &mut BytesMut, v: i8) {
    buf.put_i8(v);
}
#[inline]
pub fn write_bool(buf: &mut BytesMut, v: bool) {
    buf.put_i8(i8::from(v));
}
#[inline]
pub fn write_i16(buf: &mut BytesMut, v: i16) {
    buf.put_i16(v);
}
#[inline]
pub fn write_u16(buf: &mut BytesMut, v: u16) {
    buf.put_u16(v);
}
#[inline]
pub fn write_i32(buf: &mut BytesMut, v: i32) {
    buf.put_i32(v);
}
#[inline]
pub fn write_u32(buf: &mut BytesMut, v: u32) {
    buf.put_u32(v);
}
#[inline]
pub fn write_i64(buf: &mut BytesMut, v: i64) {
    buf.put_i64(v);
}
#[inline]
pub fn write_f64(buf: &mut BytesMut, v: f64) {
    buf.put_f64(v);
}
#[inline]
pub fn write_uuid(buf: &mut BytesMut, v: Uuid) {
    buf.put_u128(v.as_u128());
}

#[inline]
pub fn write_unsigned_varint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

#[inline]
pub fn write_unsigned_varlong(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

#[inline]
pub fn write_varint(buf: &mut BytesMut, v: i32) {
    write_unsigned_varint(buf, ((v << 1) ^ (v >> 31)) as u32);
}

#[inline]
pub fn write_varlong(buf: &mut BytesMut, v: i64) {
    write_unsigned_varlong(buf, ((v << 1) ^ (v >> 63)) as u64);
}

/// The number of bytes `write_unsigned_varint` uses for `v`.
#[inline]
pub fn unsigned_varint_len(v: u32) -> usize {
    match v {
        0..0x80 => 1,
        0x80..0x4000 => 2,
        0x4000..0x20_0000 => 3,
        0x20_0000..0x1000_0000 => 4,
        _ => 5,
    }
}

fn write_length(
    buf: &mut BytesMut,
    len: Option<usize>,
    compact: bool,
    wide: bool,
    what: &'static str,
) -> EncodeResult {
    let too_long = |len| EncodeError::TooLong { what, len };
    match (len, compact, wide) {
        (None, true, _) => write_unsigned_varint(buf, 0),
        (None, false, true) => write_i32(buf, -1),
        (None, false, false) => write_i16(buf, -1),
        (Some(n), true, _) => {
            let n1 = u32::try_from(n)
                .ok()
                .and_then(|n| n.checked_add(1))
                .filter(|n| *n <= i32::MAX as u32)
                .ok_or(too_long(n))?;
            write_unsigned_varint(buf, n1);
        }
        (Some(n), false, true) => write_i32(buf, i32::try_from(n).map_err(|_| too_long(n))?),
        (Some(n), false, false) => write_i16(buf, i16::try_from(n).map_err(|_| too_long(n))?),
    }
    Ok(())
}

pub fn write_nullable_string(buf: &mut BytesMut, v: Option<&str>, compact: bool) -> EncodeResult {
    write_length(buf, v.map(str::len), compact, false, "string")?;
    if let Some(s) = v {
        buf.put_slice(s.as_bytes());
    }
    Ok(())
}

#[inline]
pub fn write_string(buf: &mut BytesMut, v: &str, compact: bool) -> EncodeResult {
    write_nullable_string(buf, Some(v), compact)
}

pub fn write_nullable_bytes(buf: &mut BytesMut, v: Option<&[u8]>, compact: bool) -> EncodeResult {
    write_length(buf, v.map(<[u8]>::len), compact, true, "bytes")?;
    if let Some(b) = v {
        buf.put_slice(b);
    }
    Ok(())
}

#[inline]
pub fn write_bytes(buf: &mut BytesMut, v: &[u8], compact: bool) -> EncodeResult {
    write_nullable_bytes(buf, Some(v), compact)
}

/// Writes an array length prefix (`None` = null array).
#[inline]
pub fn write_array_len(buf: &mut BytesMut, len: Option<usize>, compact: bool) -> EncodeResult {
    write_length(buf, len, compact, true, "array")
}

pub fn write_array<T>(
    buf: &mut BytesMut,
    items: &[T],
    compact: bool,
    mut element: impl FnMut(&mut BytesMut, &T) -> EncodeResult,
) -> EncodeResult {
    write_array_len(buf, Some(items.len()), compact)?;
    for item in items {
        element(buf, item)?;
    }
    Ok(())
}

pub fn write_nullable_array<T>(
    buf: &mut BytesMut,
    items: Option<&[T]>,
    compact: bool,
    element: impl FnMut(&mut BytesMut, &T) -> EncodeResult,
) -> EncodeResult {
    match items {
        None => write_array_len(buf, None, compact),
        Some(items) => write_array(buf, items, compact, element),
    }
}

pub fn write_nullable_struct<T>(
    buf: &mut BytesMut,
    value: Option<&T>,
    encode: impl FnOnce(&mut BytesMut, &T) -> EncodeResult,
) -> EncodeResult {
    match value {
        None => {
            write_i8(buf, -1);
            Ok(())
        }
        Some(v) => {
            write_i8(buf, 1);
            encode(buf, v)
        }
    }
}

/// Collects the tagged fields of one structure and writes them in ascending tag order, merged
/// with the unknown fields carried over from decoding.
#[derive(Default)]
pub struct TaggedFieldsWriter {
    fields: Vec<(u32, Bytes)>,
}

impl TaggedFieldsWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a known field whose value `write` encodes.
    pub fn field(
        &mut self,
        tag: u32,
        write: impl FnOnce(&mut BytesMut) -> EncodeResult,
    ) -> EncodeResult {
        let mut data = BytesMut::new();
        write(&mut data)?;
        self.fields.push((tag, data.freeze()));
        Ok(())
    }

    pub fn finish(mut self, buf: &mut BytesMut, unknown: &[RawTaggedField]) -> EncodeResult {
        self.fields
            .extend(unknown.iter().map(|f| (f.tag, f.data.clone())));
        self.fields.sort_by_key(|(tag, _)| *tag);
        self.fields.dedup_by_key(|(tag, _)| *tag);
        let count = u32::try_from(self.fields.len()).map_err(|_| EncodeError::TooLong {
            what: "tagged fields",
            len: self.fields.len(),
        })?;
        write_unsigned_varint(buf, count);
        for (tag, data) in &self.fields {
            write_unsigned_varint(buf, *tag);
            let size = u32::try_from(data.len()).map_err(|_| EncodeError::TooLong {
                what: "tagged field",
                len: data.len(),
            })?;
            write_unsigned_varint(buf, size);
            buf.put_slice(data);
        }
        Ok(())
    }
}

/// Writes a tagged-field section holding only fields carried over from decoding.
pub fn write_unknown_tagged_fields(buf: &mut BytesMut, unknown: &[RawTaggedField]) -> EncodeResult {
    if unknown.is_empty() {
        write_unsigned_varint(buf, 0);
        Ok(())
    } else {
        TaggedFieldsWriter::new().finish(buf, unknown)
    }
}

/// Keeps an unknown tagged field for re-encoding.
#[inline]
pub fn keep_unknown(unknown: &mut Vec<RawTaggedField>, tag: u32, data: Bytes) {
    unknown.push(RawTaggedField { tag, data });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_match_kafka_sizes() {
        for v in [0u32, 1, 127, 128, 16383, 16384, u32::MAX] {
            let mut buf = BytesMut::new();
            write_unsigned_varint(&mut buf, v);
            assert_eq!(buf.len(), unsigned_varint_len(v));
            assert_eq!(read_unsigned_varint(&mut buf.freeze()), Ok(v));
        }
        for v in [0i32, -1, 1, i32::MIN, i32::MAX, 300, -300] {
            let mut buf = BytesMut::new();
            write_varint(&mut buf, v);
            assert_eq!(read_varint(&mut buf.freeze()), Ok(v));
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            let mut buf = BytesMut::new();
            write_varlong(&mut buf, v);
            assert_eq!(read_varlong(&mut buf.freeze()), Ok(v));
        }
        // -1 zig-zags to 1.
        let mut buf = BytesMut::new();
        write_varint(&mut buf, -1);
        assert_eq!(&buf[..], &[1]);
    }

    #[test]
    fn overlong_varint_is_an_error() {
        let mut buf = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert_eq!(
            read_unsigned_varint(&mut buf),
            Err(DecodeError::VarintTooLong(5))
        );
    }

    #[test]
    fn hostile_array_count_is_rejected_before_allocating() {
        let mut buf = Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff]);
        let result = read_array(&mut buf, false, read_i32);
        assert_eq!(
            result,
            Err(DecodeError::ArrayTooLong {
                count: 0x7fff_ffff,
                remaining: 0
            })
        );
        let mut buf = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x07]);
        assert!(read_array(&mut buf, true, read_i32).is_err());
    }

    #[test]
    fn strings_are_zero_copy_and_checked() {
        let frame = Bytes::from_static(b"\x00\x03abc\x04xyz");
        let mut buf = frame.clone();
        let s = read_string(&mut buf, false).expect("string");
        assert_eq!(&*s, "abc");
        assert_eq!(s.as_bytes().as_ptr(), frame[2..].as_ptr());
        let s = read_string(&mut buf, true).expect("compact string");
        assert_eq!(&*s, "xyz");
        let mut null = Bytes::from_static(b"\xff\xff");
        assert_eq!(read_nullable_string(&mut null, false), Ok(None));
        let mut null = Bytes::from_static(b"\xff\xff");
        assert_eq!(
            read_string(&mut null, false),
            Err(DecodeError::UnexpectedNull)
        );
        let mut bad = Bytes::from_static(b"\x00\x02\xc3\x28");
        assert_eq!(read_string(&mut bad, false), Err(DecodeError::InvalidUtf8));
        let mut short = Bytes::from_static(b"\x00\x09ab");
        assert!(matches!(
            read_string(&mut short, false),
            Err(DecodeError::Truncated { .. })
        ));
        let mut negative = Bytes::from_static(b"\xff\xfe");
        assert_eq!(
            read_nullable_string(&mut negative, false),
            Err(DecodeError::InvalidLength(-2))
        );
    }

    #[test]
    fn tagged_fields_must_ascend_and_unknown_ones_survive() {
        let mut buf = Bytes::from_static(&[2, 5, 1, 0xaa, 3, 1, 0xbb]);
        let result = read_tagged_fields(&mut buf, |_, _| Ok(()));
        assert_eq!(
            result,
            Err(DecodeError::TagOrder {
                tag: 3,
                previous: 5
            })
        );

        let mut buf = Bytes::from_static(&[2, 3, 1, 0xaa, 5, 0]);
        let mut kept = Vec::new();
        read_tagged_fields(&mut buf, |tag, data| {
            keep_unknown(&mut kept, tag, data);
            Ok(())
        })
        .expect("tagged");
        let mut out = BytesMut::new();
        write_unknown_tagged_fields(&mut out, &kept).expect("encode");
        assert_eq!(&out[..], &[2, 3, 1, 0xaa, 5, 0]);
    }

    #[test]
    fn hostile_tag_count_is_rejected() {
        let mut buf = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x07, 0]);
        assert!(matches!(
            read_tagged_fields(&mut buf, |_, _| Ok(())),
            Err(DecodeError::ArrayTooLong { .. })
        ));
    }
}
