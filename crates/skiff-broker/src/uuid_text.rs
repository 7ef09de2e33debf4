//! The text encodings clients write one client instance's UUID in, and recognising them.
//!
//! KIP-1082 asks a KIP-848 member to use its client instance ID as its member ID, but clients
//! disagree on how a UUID is written (KIP-1313 notes it): Kafka's `Uuid.toString` is URL-safe
//! base64 without padding (22 characters), librdkafka writes standard base64 (`+/`), some with
//! `==` padding, @platformatic/kafka writes the hyphenated hexadecimal form, others 32 bare hex
//! digits. This module owns reading any of them back to the UUID, and naming which one it was.
//! It is pure: no I/O, no allocation on the decoding path, and no text makes it panic — text
//! that is none of these is just a string ([`decode`] answers `None`).

use skiff_protocol::Uuid;

/// One way of writing a UUID as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Encoding {
    /// Kafka's `Uuid.toString`: URL-safe base64 (`-_`), no padding, 22 characters.
    KafkaBase64Url,
    /// Standard base64 (`+/`) without padding, 22 characters (librdkafka).
    Base64,
    /// Standard base64 with `==` padding, 24 characters.
    Base64Padded,
    /// URL-safe base64 with `==` padding, 24 characters.
    Base64UrlPadded,
    /// RFC 4122's `8-4-4-4-12` hexadecimal form, 36 characters (either case).
    UuidHyphenated,
    /// 32 hexadecimal digits (either case).
    Hex,
}

impl Encoding {
    pub const ALL: [Encoding; 6] = [
        Encoding::KafkaBase64Url,
        Encoding::Base64,
        Encoding::Base64Padded,
        Encoding::Base64UrlPadded,
        Encoding::UuidHyphenated,
        Encoding::Hex,
    ];

    /// The name the admin view and `/metrics` use.
    pub const fn name(self) -> &'static str {
        match self {
            Encoding::KafkaBase64Url => "kafka-base64url",
            Encoding::Base64 => "base64",
            Encoding::Base64Padded => "base64-padded",
            Encoding::Base64UrlPadded => "base64url-padded",
            Encoding::UuidHyphenated => "uuid-hyphenated",
            Encoding::Hex => "hex",
        }
    }

    /// `id` written this way (lower-case hex for the hex forms).
    #[cfg(test)]
    pub fn encode(self, id: Uuid) -> String {
        let kafka = id.to_string();
        match self {
            Encoding::KafkaBase64Url => kafka,
            Encoding::Base64 => kafka.replace('-', "+").replace('_', "/"),
            Encoding::Base64Padded => kafka.replace('-', "+").replace('_', "/") + "==",
            Encoding::Base64UrlPadded => kafka + "==",
            Encoding::UuidHyphenated => id.to_hyphenated(),
            Encoding::Hex => format!("{:032x}", id.as_u128()),
        }
    }
}

/// `text` as a UUID and the encoding it is written in, or `None` when it is none of
/// [`Encoding::ALL`]. A 22-character text of letters and digits only is valid in both base64
/// alphabets: it is named [`Encoding::KafkaBase64Url`], Kafka's own.
pub fn decode(text: &str) -> Option<(Uuid, Encoding)> {
    let bytes = text.as_bytes();
    match bytes.len() {
        22 => decode_base64(bytes),
        24 => {
            let (body, padding) = bytes.split_at(22);
            if padding != b"==" {
                return None;
            }
            let (id, unpadded) = decode_base64(body)?;
            // Letters and digits alone are valid in both alphabets: standard base64 is the
            // usual padded form.
            let padded =
                if unpadded == Encoding::Base64 || body.iter().all(u8::is_ascii_alphanumeric) {
                    Encoding::Base64Padded
                } else {
                    Encoding::Base64UrlPadded
                };
            Some((id, padded))
        }
        32 => Some((Uuid::from_u128(hex(bytes)?), Encoding::Hex)),
        36 => {
            let mut digits = [0u8; 32];
            let mut n = 0;
            for (i, b) in bytes.iter().enumerate() {
                if matches!(i, 8 | 13 | 18 | 23) {
                    if *b != b'-' {
                        return None;
                    }
                } else {
                    *digits.get_mut(n)? = *b;
                    n += 1;
                }
            }
            Some((Uuid::from_u128(hex(&digits)?), Encoding::UuidHyphenated))
        }
        _ => None,
    }
}

/// Which base64 alphabet a character belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Alphabet {
    Both,
    Standard,
    UrlSafe,
}

fn base64_digit(b: u8) -> Option<(u128, Alphabet)> {
    let (value, alphabet) = match b {
        b'A'..=b'Z' => (b - b'A', Alphabet::Both),
        b'a'..=b'z' => (b - b'a' + 26, Alphabet::Both),
        b'0'..=b'9' => (b - b'0' + 52, Alphabet::Both),
        b'+' => (62, Alphabet::Standard),
        b'/' => (63, Alphabet::Standard),
        b'-' => (62, Alphabet::UrlSafe),
        b'_' => (63, Alphabet::UrlSafe),
        _ => return None,
    };
    Some((u128::from(value), alphabet))
}

/// 22 characters of base64 in one alphabet (not a mix); the last one's 4 padding bits zero.
fn decode_base64(bytes: &[u8]) -> Option<(Uuid, Encoding)> {
    let mut value: u128 = 0;
    let mut seen = Alphabet::Both;
    for (i, b) in bytes.iter().enumerate() {
        let (digit, alphabet) = base64_digit(*b)?;
        match (seen, alphabet) {
            (_, Alphabet::Both) => {}
            (Alphabet::Both, other) => seen = other,
            (a, b) if a == b => {}
            _ => return None,
        }
        if i < 21 {
            value = (value << 6) | digit;
        } else {
            // 128 = 21 * 6 + 2: the 22nd character carries 2 bits, the other 4 must be zero.
            if digit & 0x0f != 0 {
                return None;
            }
            value = (value << 2) | (digit >> 4);
        }
    }
    let encoding = match seen {
        Alphabet::Standard => Encoding::Base64,
        Alphabet::Both | Alphabet::UrlSafe => Encoding::KafkaBase64Url,
    };
    Some((Uuid::from_u128(value), encoding))
}

/// 32 hexadecimal digits (either case) as 128 bits.
fn hex(digits: &[u8]) -> Option<u128> {
    if digits.len() != 32 {
        return None;
    }
    digits.iter().try_fold(0u128, |value, b| {
        let digit = char::from(*b).to_digit(16)?;
        Some((value << 4) | u128::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Whether `text` is `id` written in any encoding: the encoding if it is.
    fn same_uuid(text: &str, id: Uuid) -> Option<Encoding> {
        decode(text).and_then(|(decoded, encoding)| (decoded == id).then_some(encoding))
    }

    /// UUIDs whose text forms exercise every alphabet difference (`+/` vs `-_`), the all-zero
    /// and all-one bit patterns, and ordinary random ones.
    fn samples() -> Vec<Uuid> {
        let mut ids = vec![
            Uuid::from_u128(0),
            Uuid::from_u128(1),
            Uuid::from_u128(u128::MAX),
            Uuid::from_u128(0xfbef_ffff_0000_0000_0000_0000_0000_0000),
            Uuid::from_bytes([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]),
        ];
        for _ in 0..64 {
            ids.push(Uuid::random().expect("OS randomness"));
        }
        ids
    }

    #[test]
    fn names_are_distinct() {
        let mut names: Vec<&str> = Encoding::ALL.iter().map(|e| e.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Encoding::ALL.len());
    }

    #[test]
    fn every_encoding_decodes_to_its_uuid() {
        for id in samples() {
            for encoding in Encoding::ALL {
                let text = encoding.encode(id);
                let (decoded, found) = decode(&text).unwrap_or_else(|| panic!("{text:?}"));
                assert_eq!(decoded, id, "{encoding:?}: {text}");
                assert_eq!(same_uuid(&text, id), Some(found));
                // Only letters and digits: both base64 alphabets agree, and the name is the
                // canonical one of that length.
                if text
                    .trim_end_matches('=')
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric())
                {
                    let canonical = match encoding {
                        Encoding::KafkaBase64Url | Encoding::Base64 => Encoding::KafkaBase64Url,
                        Encoding::Base64Padded | Encoding::Base64UrlPadded => {
                            Encoding::Base64Padded
                        }
                        other => other,
                    };
                    assert_eq!(found, canonical, "{text}");
                } else {
                    assert_eq!(found, encoding, "{text}");
                }
            }
        }
    }

    #[test]
    fn every_pair_of_encodings_of_one_uuid_matches() {
        for id in samples() {
            for a in Encoding::ALL {
                for b in Encoding::ALL {
                    let (x, _) = decode(&a.encode(id)).expect("decodes");
                    let (y, _) = decode(&b.encode(id)).expect("decodes");
                    assert_eq!(x, y, "{a:?} and {b:?} of {id:?}");
                }
            }
        }
    }

    #[test]
    fn different_uuids_never_match() {
        let ids = samples();
        for (i, a) in ids.iter().enumerate() {
            for b in ids.iter().skip(i + 1) {
                for encoding in Encoding::ALL {
                    assert_eq!(same_uuid(&encoding.encode(*a), *b), None);
                    assert_eq!(same_uuid(&encoding.encode(*b), *a), None);
                }
            }
        }
    }

    #[test]
    fn upper_case_hex_is_read() {
        let id = Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(
            decode("0123456789ABCDEFFEDCBA9876543210"),
            Some((id, Encoding::Hex))
        );
        assert_eq!(
            decode("01234567-89AB-CDEF-FEDC-BA9876543210"),
            Some((id, Encoding::UuidHyphenated))
        );
    }

    #[test]
    fn librdkafka_and_kafka_forms_of_one_id() {
        let id = Uuid::from_u128(0xfbef_ffff_0000_0000_0000_0000_0000_0000);
        let kafka = id.to_string();
        assert!(kafka.contains('-') && kafka.contains('_'), "{kafka}");
        let standard = kafka.replace('-', "+").replace('_', "/");
        assert_eq!(decode(&kafka), Some((id, Encoding::KafkaBase64Url)));
        assert_eq!(decode(&standard), Some((id, Encoding::Base64)));
        assert_eq!(
            decode(&format!("{standard}==")),
            Some((id, Encoding::Base64Padded))
        );
        assert_eq!(
            decode(&format!("{kafka}==")),
            Some((id, Encoding::Base64UrlPadded))
        );
    }

    #[test]
    fn malformed_text_is_just_a_string() {
        let id = Uuid::from_u128(0xfbef_ffff_0000_0000_0000_0000_0000_0000);
        let kafka = id.to_string();
        let hyphenated = id.to_hyphenated();
        let mixed = kafka.replacen('-', "+", 1);
        assert!(mixed.contains('_') && mixed.contains('+'), "{mixed}");
        let bad = [
            String::new(),
            "x".into(),
            "not a uuid".into(),
            kafka[..21].to_string(),
            format!("{kafka}A"),
            format!("{kafka}="),
            format!("{kafka}=A"),
            format!("{kafka}A="),
            format!("{kafka}==="),
            // Both alphabets in one text.
            mixed,
            // Non-zero padding bits in the last character.
            "AAAAAAAAAAAAAAAAAAAAAB".into(),
            "AAAAAAAAAAAAAAAAAAAAAP==".into(),
            // Characters of no alphabet.
            "AAAAAAAAAAAAAAAAAAAA.A".into(),
            "AAAAAAAAAAAAAAAAAAAA=A".into(),
            "AAAAAAAAAAAAAAAAAAAAA\u{e9}".into(),
            "ÄAAAAAAAAAAAAAAAAAAAA".into(),
            "0123456789abcdef0123456789abcdeg".into(),
            "0123456789abcdef0123456789abcde".into(),
            "+0123456789abcdef0123456789abcde".into(),
            hyphenated.replace('-', "_"),
            hyphenated.replacen('-', "", 1) + "0",
            hyphenated.replace('-', ""),
            format!("{{{hyphenated}}}"),
            format!(" {kafka}"),
            "\0".repeat(22),
            "é".repeat(11),
        ];
        for text in &bad {
            let decoded = decode(text);
            // The one that is valid after all: hyphens removed is the 32-digit form.
            if *text == hyphenated.replace('-', "") {
                assert_eq!(decoded, Some((id, Encoding::Hex)));
                continue;
            }
            assert_eq!(decoded, None, "{text:?}");
            assert_eq!(same_uuid(text, id), None, "{text:?}");
        }
    }

    proptest! {
        /// Any text at all: no panic, and whatever decodes re-encodes to a text that decodes to
        /// the same UUID.
        #[test]
        fn arbitrary_text_never_panics(text in ".{0,40}") {
            if let Some((id, encoding)) = decode(&text) {
                prop_assert_eq!(decode(&encoding.encode(id)).map(|(u, _)| u), Some(id));
            }
        }

        /// Texts of the right lengths from the characters that matter.
        #[test]
        fn near_misses_never_panic(text in "[A-Za-z0-9+/_=-]{20,38}") {
            if let Some((id, encoding)) = decode(&text) {
                prop_assert_eq!(decode(&encoding.encode(id)).map(|(u, _)| u), Some(id));
            }
        }

        #[test]
        fn random_uuids_round_trip(value in any::<u128>()) {
            let id = Uuid::from_u128(value);
            for encoding in Encoding::ALL {
                prop_assert_eq!(decode(&encoding.encode(id)).map(|(u, _)| u), Some(id));
            }
        }
    }
}
