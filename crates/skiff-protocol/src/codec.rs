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
///
/// `buf` is any [`WriteBuf`]: a `BytesMut` (everything copied, as before) or a [`ChunkedBuf`]
/// (record sets and large byte fields shared, not copied).
pub trait Encodable {
    fn encode<W: WriteBuf + ?Sized>(&self, buf: &mut W, version: i16) -> EncodeResult;
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

#[cold]
#[inline(never)]
fn truncated(needed: usize, remaining: usize) -> DecodeError {
    DecodeError::Truncated { needed, remaining }
}

#[inline(always)]
fn ensure(buf: &Bytes, needed: usize) -> DecodeResult<()> {
    if buf.len() < needed {
        Err(truncated(needed, buf.len()))
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
    // Almost every varint (lengths, counts, tag counts) is one byte.
    if let Some(&byte) = buf.first()
        && byte < 0x80
    {
        buf.advance(1);
        return Ok(u32::from(byte));
    }
    read_unsigned_varint_slow(buf)
}

#[inline(never)]
fn read_unsigned_varint_slow(buf: &mut Bytes) -> DecodeResult<u32> {
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

#[cold]
#[inline(never)]
fn invalid_length(n: i64) -> DecodeError {
    DecodeError::InvalidLength(n)
}

#[cold]
#[inline(never)]
fn invalid_utf8() -> DecodeError {
    DecodeError::InvalidUtf8
}

#[cold]
#[inline(never)]
fn unexpected_null() -> DecodeError {
    DecodeError::UnexpectedNull
}

/// Reads a length prefix: `None` means null. Compact lengths are stored plus one.
#[inline(always)]
fn read_length(buf: &mut Bytes, compact: bool, wide: bool) -> DecodeResult<Option<usize>> {
    let raw: i64 = if compact {
        i64::from(read_unsigned_varint(buf)?) - 1
    } else if wide {
        i64::from(read_i32(buf)?)
    } else {
        i64::from(read_i16(buf)?)
    };
    if raw >= 0 {
        // At most u32::MAX - 1 or i32::MAX: fits a usize on every platform Skiff runs on.
        Ok(Some(raw as usize))
    } else if raw == -1 {
        Ok(None)
    } else {
        Err(invalid_length(raw))
    }
}

#[inline]
fn to_string(bytes: Bytes) -> DecodeResult<ByteString> {
    ByteString::try_from(bytes).map_err(|_| invalid_utf8())
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
    match read_length(buf, compact, false)? {
        None => Err(unexpected_null()),
        Some(len) => to_string(take(buf, len)?),
    }
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
    match read_length(buf, compact, true)? {
        None => Err(unexpected_null()),
        Some(len) => take(buf, len),
    }
}

#[cold]
#[inline(never)]
fn array_too_long(count: usize, remaining: usize) -> DecodeError {
    DecodeError::ArrayTooLong { count, remaining }
}

/// A nullable array. The count is checked against the bytes left (every element takes at least
/// one byte) before anything is allocated, and the vector grows only as elements are decoded.
#[inline]
pub fn read_nullable_array<T>(
    buf: &mut Bytes,
    compact: bool,
    mut element: impl FnMut(&mut Bytes) -> DecodeResult<T>,
) -> DecodeResult<Option<Vec<T>>> {
    let Some(count) = read_length(buf, compact, true)? else {
        return Ok(None);
    };
    if count > buf.remaining() {
        return Err(array_too_long(count, buf.remaining()));
    }
    let mut items = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        items.push(element(buf)?);
    }
    Ok(Some(items))
}

#[inline]
pub fn read_array<T>(
    buf: &mut Bytes,
    compact: bool,
    element: impl FnMut(&mut Bytes) -> DecodeResult<T>,
) -> DecodeResult<Vec<T>> {
    match read_nullable_array(buf, compact, element)? {
        None => Err(unexpected_null()),
        Some(items) => Ok(items),
    }
}

/// A nullable nested structure: a marker byte (-1 = null, anything else = present), then the
/// structure.
#[inline]
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
#[inline]
pub fn read_tagged_fields(
    buf: &mut Bytes,
    field: impl FnMut(u32, Bytes) -> DecodeResult<()>,
) -> DecodeResult<()> {
    // Almost always: no tagged fields.
    if let Some(&0) = buf.first() {
        buf.advance(1);
        return Ok(());
    }
    read_tagged_fields_slow(buf, field)
}

fn read_tagged_fields_slow(
    buf: &mut Bytes,
    mut field: impl FnMut(u32, Bytes) -> DecodeResult<()>,
) -> DecodeResult<()> {
    let count = read_unsigned_varint(buf)? as usize;
    // Each field needs at least a tag byte and a size byte.
    if count > buf.remaining() / 2 {
        return Err(array_too_long(count, buf.remaining()));
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
// Output buffers

/// Where encoded bytes go. `BytesMut` copies everything into one buffer; [`ChunkedBuf`] copies
/// the small fields but keeps large record sets and byte fields as shared handles, so a frame can
/// be sent with a vectored write without copying its records.
pub trait WriteBuf {
    /// Appends a copy of `src`.
    fn put_slice(&mut self, src: &[u8]);

    /// Appends one byte.
    #[inline]
    fn put_u8(&mut self, v: u8) {
        self.put_slice(&[v]);
    }

    /// Appends `bytes`, which the writer may keep as a shared (reference-counted) handle
    /// instead of copying. The default copies.
    #[inline]
    fn put_shared(&mut self, bytes: &Bytes) {
        self.put_slice(bytes);
    }
}

impl WriteBuf for BytesMut {
    #[inline]
    fn put_slice(&mut self, src: &[u8]) {
        self.extend_from_slice(src);
    }

    #[inline]
    fn put_u8(&mut self, v: u8) {
        BufMut::put_u8(self, v);
    }
}

impl WriteBuf for Vec<u8> {
    #[inline]
    fn put_slice(&mut self, src: &[u8]) {
        self.extend_from_slice(src);
    }

    #[inline]
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
}

impl<W: WriteBuf + ?Sized> WriteBuf for &mut W {
    #[inline]
    fn put_slice(&mut self, src: &[u8]) {
        (**self).put_slice(src);
    }

    #[inline]
    fn put_u8(&mut self, v: u8) {
        (**self).put_u8(v);
    }

    #[inline]
    fn put_shared(&mut self, bytes: &Bytes) {
        (**self).put_shared(bytes);
    }
}

/// One piece of a [`ChunkedBuf`]: a range of its copied bytes, or a shared handle.
#[derive(Debug, Clone)]
enum Segment {
    Copied { start: usize, end: usize },
    Shared(Bytes),
}

/// An output buffer that copies small writes into one growing buffer and keeps every
/// [`WriteBuf::put_shared`] of at least [`ChunkedBuf::threshold`] bytes as a shared handle (no
/// copy). [`ChunkedBuf::take_chunks`] returns the output as a list of `Bytes` to be written in
/// order (e.g. with `write_vectored`, or as a [`ChunkChain`] through `write_all_buf`).
///
/// The copied bytes stay mutable until the chunks are taken, so a size prefix written as a
/// placeholder can be patched with [`ChunkedBuf::patch_copied`].
#[derive(Debug, Clone)]
pub struct ChunkedBuf {
    copied: BytesMut,
    segments: Vec<Segment>,
    /// Where in `copied` the current (not yet closed) copied segment starts.
    open: usize,
    shared_len: usize,
    threshold: usize,
}

impl Default for ChunkedBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedBuf {
    /// Shared writes of at least this many bytes are not copied (smaller ones are: an I/O vector
    /// entry costs more than copying a few hundred bytes).
    pub const DEFAULT_THRESHOLD: usize = 4096;

    pub fn new() -> Self {
        Self::with_capacity(256)
    }

    /// `capacity`: the expected size of the copied part.
    pub fn with_capacity(capacity: usize) -> Self {
        ChunkedBuf {
            copied: BytesMut::with_capacity(capacity),
            segments: Vec::new(),
            open: 0,
            shared_len: 0,
            threshold: Self::DEFAULT_THRESHOLD,
        }
    }

    /// Sets the smallest shared write kept as its own chunk.
    pub fn with_threshold(mut self, threshold: usize) -> Self {
        self.threshold = threshold;
        self
    }

    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// Total bytes written (copied and shared).
    pub fn len(&self) -> usize {
        self.copied.len() + self.shared_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes written by copying so far: the offset the next copied byte will have, for
    /// [`ChunkedBuf::patch_copied`].
    pub fn copied_len(&self) -> usize {
        self.copied.len()
    }

    /// Overwrites copied bytes at `offset` (from [`ChunkedBuf::copied_len`]), e.g. a size prefix.
    ///
    /// # Panics
    /// When the range was not written.
    pub fn patch_copied(&mut self, offset: usize, bytes: &[u8]) {
        self.copied[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    /// Closes the open copied segment (if it holds bytes).
    fn close_copied(&mut self) {
        let end = self.copied.len();
        if end > self.open {
            self.segments.push(Segment::Copied {
                start: self.open,
                end,
            });
            self.open = end;
        }
    }

    /// Turns the segments into chunks of `frozen` (the copied bytes); reuses the segment list's
    /// allocation (`Segment` and `Bytes` have the same size).
    fn chunks_of(segments: Vec<Segment>, frozen: &Bytes) -> Vec<Bytes> {
        segments
            .into_iter()
            .map(|segment| match segment {
                Segment::Copied { start, end } => frozen.slice(start..end),
                Segment::Shared(bytes) => bytes,
            })
            .collect()
    }

    /// Removes everything written so far and returns it as chunks in write order. The buffer
    /// keeps the unused capacity of its copy buffer for further writes.
    pub fn take_chunks(&mut self) -> Vec<Bytes> {
        if self.segments.is_empty() {
            self.open = 0;
            return if self.copied.is_empty() {
                Vec::new()
            } else {
                vec![self.copied.split().freeze()]
            };
        }
        self.close_copied();
        let frozen = self.copied.split().freeze();
        self.open = 0;
        self.shared_len = 0;
        Self::chunks_of(std::mem::take(&mut self.segments), &frozen)
    }

    /// Everything written, as chunks in write order.
    pub fn into_chunks(mut self) -> Vec<Bytes> {
        if self.segments.is_empty() {
            return if self.copied.is_empty() {
                Vec::new()
            } else {
                vec![self.copied.freeze()]
            };
        }
        self.close_copied();
        let frozen = self.copied.freeze();
        Self::chunks_of(self.segments, &frozen)
    }
}

impl WriteBuf for ChunkedBuf {
    #[inline]
    fn put_slice(&mut self, src: &[u8]) {
        self.copied.extend_from_slice(src);
    }

    #[inline]
    fn put_u8(&mut self, v: u8) {
        BufMut::put_u8(&mut self.copied, v);
    }

    #[inline]
    fn put_shared(&mut self, bytes: &Bytes) {
        if bytes.len() < self.threshold {
            self.copied.extend_from_slice(bytes);
            return;
        }
        if self.segments.capacity() == 0 {
            // Typically: fields, records, fields, records, ... and the trailing fields.
            self.segments.reserve(8);
        }
        self.close_copied();
        self.shared_len += bytes.len();
        self.segments.push(Segment::Shared(bytes.clone()));
    }
}

/// A list of `Bytes` read in order as one [`Buf`], with `chunks_vectored` support: hand it to
/// `tokio::io::AsyncWriteExt::write_all_buf` to send it with vectored writes.
#[derive(Debug, Clone, Default)]
pub struct ChunkChain {
    chunks: std::collections::VecDeque<Bytes>,
    remaining: usize,
}

impl ChunkChain {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a chunk (empty chunks are dropped).
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.remaining += chunk.len();
            self.chunks.push_back(chunk);
        }
    }

    pub fn extend(&mut self, chunks: impl IntoIterator<Item = Bytes>) {
        for chunk in chunks {
            self.push(chunk);
        }
    }

    /// How many chunks are left.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}

impl From<Vec<Bytes>> for ChunkChain {
    fn from(chunks: Vec<Bytes>) -> Self {
        let mut chain = ChunkChain::new();
        chain.extend(chunks);
        chain
    }
}

impl Buf for ChunkChain {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.chunks.front().map_or(&[], |c| &c[..])
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [std::io::IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, chunk) in dst.iter_mut().zip(&self.chunks) {
            *slot = std::io::IoSlice::new(chunk);
            n += 1;
        }
        n
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(
            cnt <= self.remaining,
            "advance past the end of a ChunkChain"
        );
        self.remaining -= cnt;
        while cnt > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            if cnt < front.len() {
                front.advance(cnt);
                break;
            }
            cnt -= front.len();
            self.chunks.pop_front();
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Writers

#[inline]
pub fn write_i8<W: WriteBuf + ?Sized>(buf: &mut W, v: i8) {
    buf.put_u8(v as u8);
}
#[inline]
pub fn write_bool<W: WriteBuf + ?Sized>(buf: &mut W, v: bool) {
    buf.put_u8(u8::from(v));
}
#[inline]
pub fn write_i16<W: WriteBuf + ?Sized>(buf: &mut W, v: i16) {
    buf.put_slice(&v.to_be_bytes());
}
#[inline]
pub fn write_u16<W: WriteBuf + ?Sized>(buf: &mut W, v: u16) {
    buf.put_slice(&v.to_be_bytes());
}
#[inline]
pub fn write_i32<W: WriteBuf + ?Sized>(buf: &mut W, v: i32) {
    buf.put_slice(&v.to_be_bytes());
}
#[inline]
pub fn write_u32<W: WriteBuf + ?Sized>(buf: &mut W, v: u32) {
    buf.put_slice(&v.to_be_bytes());
}
#[inline]
pub fn write_i64<W: WriteBuf + ?Sized>(buf: &mut W, v: i64) {
    buf.put_slice(&v.to_be_bytes());
}
#[inline]
pub fn write_f64<W: WriteBuf + ?Sized>(buf: &mut W, v: f64) {
    buf.put_slice(&v.to_be_bytes());
}
#[inline]
pub fn write_uuid<W: WriteBuf + ?Sized>(buf: &mut W, v: Uuid) {
    buf.put_slice(&v.as_u128().to_be_bytes());
}

#[inline]
pub fn write_unsigned_varint<W: WriteBuf + ?Sized>(buf: &mut W, v: u32) {
    if v < 0x80 {
        buf.put_u8(v as u8);
    } else {
        write_unsigned_varlong(buf, u64::from(v));
    }
}

#[inline]
pub fn write_unsigned_varlong<W: WriteBuf + ?Sized>(buf: &mut W, mut v: u64) {
    if v < 0x80 {
        buf.put_u8(v as u8);
        return;
    }
    let mut out = [0u8; 10];
    let mut n = 0;
    while v >= 0x80 {
        out[n] = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
        n += 1;
    }
    out[n] = v as u8;
    buf.put_slice(&out[..=n]);
}

#[inline]
pub fn write_varint<W: WriteBuf + ?Sized>(buf: &mut W, v: i32) {
    write_unsigned_varint(buf, ((v << 1) ^ (v >> 31)) as u32);
}

#[inline]
pub fn write_varlong<W: WriteBuf + ?Sized>(buf: &mut W, v: i64) {
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

#[cold]
#[inline(never)]
fn too_long(what: &'static str, len: usize) -> EncodeError {
    EncodeError::TooLong { what, len }
}

#[inline(always)]
fn write_length<W: WriteBuf + ?Sized>(
    buf: &mut W,
    len: Option<usize>,
    compact: bool,
    wide: bool,
    what: &'static str,
) -> EncodeResult {
    match (len, compact, wide) {
        (None, true, _) => write_unsigned_varint(buf, 0),
        (None, false, true) => write_i32(buf, -1),
        (None, false, false) => write_i16(buf, -1),
        (Some(n), true, _) => {
            // Compact lengths are stored plus one and must fit an int32.
            if n >= i32::MAX as usize {
                return Err(too_long(what, n));
            }
            write_unsigned_varint(buf, n as u32 + 1);
        }
        (Some(n), false, true) => {
            if n > i32::MAX as usize {
                return Err(too_long(what, n));
            }
            write_i32(buf, n as i32);
        }
        (Some(n), false, false) => {
            if n > i16::MAX as usize {
                return Err(too_long(what, n));
            }
            write_i16(buf, n as i16);
        }
    }
    Ok(())
}

#[inline(always)]
pub fn write_nullable_string<W: WriteBuf + ?Sized>(
    buf: &mut W,
    v: Option<&str>,
    compact: bool,
) -> EncodeResult {
    write_length(buf, v.map(str::len), compact, false, "string")?;
    if let Some(s) = v {
        buf.put_slice(s.as_bytes());
    }
    Ok(())
}

#[inline(always)]
pub fn write_string<W: WriteBuf + ?Sized>(buf: &mut W, v: &str, compact: bool) -> EncodeResult {
    write_length(buf, Some(v.len()), compact, false, "string")?;
    buf.put_slice(v.as_bytes());
    Ok(())
}

/// Nullable bytes from a slice (always copied).
#[inline]
pub fn write_nullable_bytes<W: WriteBuf + ?Sized>(
    buf: &mut W,
    v: Option<&[u8]>,
    compact: bool,
) -> EncodeResult {
    write_length(buf, v.map(<[u8]>::len), compact, true, "bytes")?;
    if let Some(b) = v {
        buf.put_slice(b);
    }
    Ok(())
}

#[inline]
pub fn write_bytes<W: WriteBuf + ?Sized>(buf: &mut W, v: &[u8], compact: bool) -> EncodeResult {
    write_nullable_bytes(buf, Some(v), compact)
}

/// Nullable bytes (or a record set) from a `Bytes` handle, which the writer may share instead
/// of copying ([`WriteBuf::put_shared`]).
#[inline]
pub fn write_nullable_shared<W: WriteBuf + ?Sized>(
    buf: &mut W,
    v: Option<&Bytes>,
    compact: bool,
) -> EncodeResult {
    write_length(buf, v.map(Bytes::len), compact, true, "bytes")?;
    if let Some(b) = v {
        buf.put_shared(b);
    }
    Ok(())
}

#[inline]
pub fn write_shared<W: WriteBuf + ?Sized>(buf: &mut W, v: &Bytes, compact: bool) -> EncodeResult {
    write_length(buf, Some(v.len()), compact, true, "bytes")?;
    buf.put_shared(v);
    Ok(())
}

/// Writes an array length prefix (`None` = null array).
#[inline(always)]
pub fn write_array_len<W: WriteBuf + ?Sized>(
    buf: &mut W,
    len: Option<usize>,
    compact: bool,
) -> EncodeResult {
    write_length(buf, len, compact, true, "array")
}

#[inline]
pub fn write_array<W: WriteBuf + ?Sized, T>(
    buf: &mut W,
    items: &[T],
    compact: bool,
    mut element: impl FnMut(&mut W, &T) -> EncodeResult,
) -> EncodeResult {
    write_array_len(buf, Some(items.len()), compact)?;
    for item in items {
        element(buf, item)?;
    }
    Ok(())
}

#[inline]
pub fn write_nullable_array<W: WriteBuf + ?Sized, T>(
    buf: &mut W,
    items: Option<&[T]>,
    compact: bool,
    element: impl FnMut(&mut W, &T) -> EncodeResult,
) -> EncodeResult {
    match items {
        None => write_array_len(buf, None, compact),
        Some(items) => write_array(buf, items, compact, element),
    }
}

#[inline]
pub fn write_nullable_struct<W: WriteBuf + ?Sized, T>(
    buf: &mut W,
    value: Option<&T>,
    encode: impl FnOnce(&mut W, &T) -> EncodeResult,
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

    pub fn finish<W: WriteBuf + ?Sized>(
        mut self,
        buf: &mut W,
        unknown: &[RawTaggedField],
    ) -> EncodeResult {
        if self.fields.is_empty() && unknown.is_empty() {
            write_unsigned_varint(buf, 0);
            return Ok(());
        }
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
            buf.put_shared(data);
        }
        Ok(())
    }
}

/// Writes a tagged-field section holding only fields carried over from decoding.
#[inline]
pub fn write_unknown_tagged_fields<W: WriteBuf + ?Sized>(
    buf: &mut W,
    unknown: &[RawTaggedField],
) -> EncodeResult {
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
    fn chunked_segments_convert_to_chunks_in_place() {
        // `ChunkedBuf::chunks_of` relies on this to reuse the segment list's allocation.
        assert_eq!(std::mem::size_of::<Segment>(), std::mem::size_of::<Bytes>());
        let shared = Bytes::from(vec![7u8; 10]);
        let mut buf = ChunkedBuf::new().with_threshold(10);
        write_i32(&mut buf, 1);
        write_shared(&mut buf, &shared, false).expect("write");
        write_shared(&mut buf, &Bytes::from_static(b"short"), false).expect("write");
        assert_eq!(buf.len(), 4 + 4 + 10 + 4 + 5);
        let chunks = buf.take_chunks();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[1].as_ptr(), shared.as_ptr());
        assert!(buf.is_empty());
        assert!(buf.take_chunks().is_empty());
        write_i8(&mut buf, 3);
        assert_eq!(buf.take_chunks(), vec![Bytes::from_static(&[3])]);
        assert!(ChunkedBuf::new().into_chunks().is_empty());
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
