//! Test support (feature `testing`): a small deterministic random generator and random message
//! instances for property, differential and fuzz tests.

use bytes::Bytes;

use crate::codec::ByteString;
use crate::uuid::Uuid;

/// SplitMix64: deterministic, seedable, dependency-free.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn bool(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// A finite float (NaN would break equality checks).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / 1024.0 - 1e12
    }

    pub fn uuid(&mut self) -> Uuid {
        Uuid::from_halves(self.next_u64(), self.next_u64())
    }

    /// A short string, sometimes with multi-byte characters.
    pub fn string(&mut self) -> ByteString {
        const CHARS: &[char] = &['a', 'b', 'Z', '0', '.', '-', '_', 'é', '水'];
        let len = self.below(8);
        let s: String = (0..len)
            .map(|_| CHARS[self.below(CHARS.len() as u64) as usize])
            .collect();
        ByteString::from(s)
    }

    pub fn bytes(&mut self) -> Bytes {
        let len = self.below(12);
        Bytes::from((0..len).map(|_| self.next_u64() as u8).collect::<Vec<u8>>())
    }
}

/// A random instance of a generated message, valid at `version`.
pub trait Random {
    fn random(rng: &mut Rng, version: i16) -> Self;
}
