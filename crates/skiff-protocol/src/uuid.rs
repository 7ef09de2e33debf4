//! Kafka's UUID: 16 bytes on the wire, most significant half first, written as 22 characters of
//! URL-safe base64 without padding (Kafka's `Uuid.toString`).

use std::fmt;
use std::str::FromStr;

/// A Kafka UUID (topic IDs, client instance IDs, member IDs in text form).
///
/// The zero UUID means "absent" wherever Kafka uses a UUID as an optional value.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Uuid(u128);

/// Why a piece of text is not a Kafka UUID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UuidParseError {
    #[error("a Kafka UUID is 22 characters of URL-safe base64, got {0} characters")]
    Length(usize),
    #[error("character {0:?} is not URL-safe base64")]
    Character(char),
    #[error("the last character carries bits beyond 128")]
    TrailingBits,
}

/// Could not read random bytes from the operating system.
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random source failed: {0}")]
pub struct RandomError(String);

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl Uuid {
    /// The zero UUID ("not specified").
    pub const ZERO: Uuid = Uuid(0);
    /// Kafka reserves the value 1 (`Uuid.ONE_UUID`, used for metadata sentinels).
    pub const ONE: Uuid = Uuid(1);

    pub const fn from_u128(value: u128) -> Self {
        Uuid(value)
    }

    pub const fn as_u128(self) -> u128 {
        self.0
    }

    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Uuid(u128::from_be_bytes(bytes))
    }

    pub const fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// Builds a UUID from Kafka's two 64-bit halves.
    pub const fn from_halves(most_significant: u64, least_significant: u64) -> Self {
        Uuid(((most_significant as u128) << 64) | least_significant as u128)
    }

    pub const fn most_significant_bits(self) -> u64 {
        (self.0 >> 64) as u64
    }

    pub const fn least_significant_bits(self) -> u64 {
        self.0 as u64
    }

    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// `None` for the zero UUID, which Kafka treats as "absent".
    pub const fn non_zero(self) -> Option<Uuid> {
        if self.0 == 0 { None } else { Some(self) }
    }

    /// A fresh random version-4 UUID from the OS CSPRNG, re-drawn while it is zero, one, or its text
    /// form starts with `-` (Kafka's `Uuid.randomUuid` rules: such IDs confuse command-line tools).
    pub fn random() -> Result<Uuid, RandomError> {
        loop {
            let mut bytes = [0u8; 16];
            getrandom::fill(&mut bytes).map_err(|e| RandomError(e.to_string()))?;
            // RFC 4122 version 4, variant 1.
            bytes[6] = (bytes[6] & 0x0f) | 0x40;
            bytes[8] = (bytes[8] & 0x3f) | 0x80;
            let candidate = Uuid::from_bytes(bytes);
            if candidate != Uuid::ZERO
                && candidate != Uuid::ONE
                && !candidate.text_starts_with_dash()
            {
                return Ok(candidate);
            }
        }
    }

    fn text_starts_with_dash(self) -> bool {
        // The first character encodes the top six bits; `-` is index 62.
        (self.0 >> 122) == 62
    }

    /// The standard 8-4-4-4-12 hexadecimal form (what some clients use as member IDs).
    pub fn to_hyphenated(self) -> String {
        let hex = format!("{:032x}", self.0);
        format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // 128 bits = 21 groups of 6 bits + 2 bits left over, written as a 22nd character.
        let mut text = [0u8; 22];
        for (i, slot) in text.iter_mut().enumerate().take(21) {
            let shift = 122 - 6 * i as u32;
            *slot = ALPHABET[((self.0 >> shift) & 0x3f) as usize];
        }
        text[21] = ALPHABET[((self.0 & 0x3) << 4) as usize];
        // The alphabet is ASCII, so this cannot fail; fall back to hex rather than panic.
        match std::str::from_utf8(&text) {
            Ok(s) => f.write_str(s),
            Err(_) => write!(f, "{:032x}", self.0),
        }
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

impl FromStr for Uuid {
    type Err = UuidParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let count = s.chars().count();
        if count != 22 {
            return Err(UuidParseError::Length(count));
        }
        let mut value: u128 = 0;
        for (i, c) in s.chars().enumerate() {
            let digit = match c {
                'A'..='Z' => c as u128 - 'A' as u128,
                'a'..='z' => c as u128 - 'a' as u128 + 26,
                '0'..='9' => c as u128 - '0' as u128 + 52,
                '-' => 62,
                '_' => 63,
                other => return Err(UuidParseError::Character(other)),
            };
            if i < 21 {
                value = (value << 6) | digit;
            } else {
                if digit & 0x0f != 0 {
                    return Err(UuidParseError::TrailingBits);
                }
                value = (value << 2) | (digit >> 4);
            }
        }
        Ok(Uuid(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_text_form_matches_kafka() {
        assert_eq!(Uuid::ZERO.to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(Uuid::ONE.to_string(), "AAAAAAAAAAAAAAAAAAAAAQ");
    }

    #[test]
    fn known_value_matches_java_url_safe_base64() {
        // Java: Base64.getUrlEncoder().withoutPadding() of bytes 00 01 02 .. 0f.
        let uuid = Uuid::from_bytes([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!(uuid.to_string(), "AAECAwQFBgcICQoLDA0ODw");
        assert_eq!("AAECAwQFBgcICQoLDA0ODw".parse::<Uuid>(), Ok(uuid));
        let all_ones = Uuid::from_u128(u128::MAX);
        assert_eq!(all_ones.to_string(), "_____________________w");
    }

    #[test]
    fn parse_rejects_bad_text() {
        assert_eq!("abc".parse::<Uuid>(), Err(UuidParseError::Length(3)));
        assert_eq!(
            "AAAAAAAAAAAAAAAAAAAAA+".parse::<Uuid>(),
            Err(UuidParseError::Character('+'))
        );
        assert_eq!(
            "AAAAAAAAAAAAAAAAAAAAAB".parse::<Uuid>(),
            Err(UuidParseError::TrailingBits)
        );
        assert!("ÄAAAAAAAAAAAAAAAAAAAAA".parse::<Uuid>().is_err());
    }

    #[test]
    fn random_ids_are_v4_and_never_reserved() {
        for _ in 0..2000 {
            let id = Uuid::random().expect("OS randomness");
            assert!(!id.is_zero());
            assert_ne!(id, Uuid::ONE);
            assert!(!id.to_string().starts_with('-'));
            assert_eq!((id.as_u128() >> 76) & 0xf, 4, "version nibble");
            assert_eq!(id.to_string().parse::<Uuid>(), Ok(id));
        }
    }

    #[test]
    fn halves_and_hyphenated_form() {
        let id = Uuid::from_halves(0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);
        assert_eq!(id.most_significant_bits(), 0x0123_4567_89ab_cdef);
        assert_eq!(id.least_significant_bits(), 0xfedc_ba98_7654_3210);
        assert_eq!(id.to_hyphenated(), "01234567-89ab-cdef-fedc-ba9876543210");
    }
}
