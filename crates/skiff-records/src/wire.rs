//! Bounds-checked big-endian and varint primitives shared by the batch and record codecs.
//!
//! Everything here reads from untrusted input: a read past the end is an error, never a panic.

use crate::error::{RecordsError, Result};

/// A forward-only reader over a byte slice.
pub(crate) struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    pub(crate) fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let (head, tail) = self
            .rest
            .split_first_chunk::<N>()
            .ok_or(RecordsError::InvalidRecord(what))?;
        self.rest = tail;
        Ok(*head)
    }

    pub(crate) fn i8(&mut self, what: &'static str) -> Result<i8> {
        Ok(i8::from_be_bytes(self.array(what)?))
    }
    pub(crate) fn i16(&mut self, what: &'static str) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }
    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }
    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// Takes `len` bytes; `len` comes from the input, so it is checked against what is left.
    pub(crate) fn take(&mut self, len: usize, what: &'static str) -> Result<&'a [u8]> {
        if len > self.rest.len() {
            return Err(RecordsError::InvalidRecord(what));
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    /// Unsigned LEB128 of at most `max_bytes` bytes.
    fn unsigned_varint(&mut self, max_bytes: u32, what: &'static str) -> Result<u64> {
        let mut value: u64 = 0;
        for i in 0..max_bytes {
            let [byte] = self.array::<1>(what)?;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(RecordsError::InvalidRecord(what))
    }

    /// Zig-zag varint as Kafka's `ByteUtils.readVarint` (at most 5 bytes).
    pub(crate) fn varint(&mut self, what: &'static str) -> Result<i32> {
        let raw = self.unsigned_varint(5, what)?;
        let raw = u32::try_from(raw).map_err(|_| RecordsError::InvalidRecord(what))?;
        Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
    }

    /// Zig-zag varlong as Kafka's `ByteUtils.readVarlong` (at most 10 bytes).
    pub(crate) fn varlong(&mut self, what: &'static str) -> Result<i64> {
        let raw = self.unsigned_varint(10, what)?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }
}

pub(crate) fn put_varint(out: &mut Vec<u8>, value: i32) {
    put_unsigned(out, u64::from(((value << 1) ^ (value >> 31)) as u32));
}

pub(crate) fn put_varlong(out: &mut Vec<u8>, value: i64) {
    put_unsigned(out, ((value << 1) ^ (value >> 63)) as u64);
}

fn put_unsigned(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Size in bytes of `value` as a zig-zag varint.
pub(crate) fn varint_len(value: i32) -> usize {
    let zigzag = ((value << 1) ^ (value >> 31)) as u32;
    let bits = 32 - zigzag.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_lengths() {
        for value in [0, 1, -1, 63, -64, 64, -65, 8191, -8192, i32::MAX, i32::MIN] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert_eq!(out.len(), varint_len(value), "{value}");
            let mut cursor = Cursor::new(&out);
            assert_eq!(cursor.varint("v").unwrap(), value);
            assert_eq!(cursor.remaining(), 0);
        }
        for value in [0, -1, i64::MAX, i64::MIN, 1 << 40] {
            let mut out = Vec::new();
            put_varlong(&mut out, value);
            assert_eq!(Cursor::new(&out).varlong("v").unwrap(), value);
        }
    }

    #[test]
    fn known_zigzag_encodings() {
        // Values from the protobuf/Kafka zig-zag tables.
        let mut out = Vec::new();
        put_varint(&mut out, -1);
        put_varint(&mut out, 1);
        put_varint(&mut out, 300);
        assert_eq!(out, [0x01, 0x02, 0xd8, 0x04]);
    }

    #[test]
    fn overlong_varints_are_rejected() {
        assert!(Cursor::new(&[0xff; 6]).varint("v").is_err());
        assert!(Cursor::new(&[0xff; 11]).varlong("v").is_err());
        assert!(Cursor::new(&[0x80]).varint("v").is_err());
        // Five bytes whose value overflows u32.
        assert!(
            Cursor::new(&[0xff, 0xff, 0xff, 0xff, 0x7f])
                .varint("v")
                .is_err()
        );
    }
}
