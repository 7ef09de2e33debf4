//! The persisted form of a classic group (Kafka's GroupMetadataValue, plus every protocol a member
//! supports rather than only the selected one, so a member rejoining with unchanged metadata after
//! a restart is recognised as unchanged).

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A classic group as of its last persisted change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassicGroupSnapshot {
    pub group_id: String,
    pub protocol_type: Option<String>,
    pub generation_id: i32,
    pub protocol_name: Option<String>,
    pub leader_id: Option<String>,
    /// When the group entered its current state (Kafka's `currentStateTimestamp`).
    pub state_timestamp_ms: i64,
    /// In join order.
    pub members: Vec<ClassicMemberSnapshot>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassicMemberSnapshot {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocols: Vec<ProtocolSnapshot>,
    #[serde(with = "hex_bytes")]
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtocolSnapshot {
    pub name: String,
    #[serde(with = "hex_bytes")]
    pub metadata: Bytes,
}

/// Opaque blobs as lowercase hex strings (compact in JSON, unlike arrays of numbers).
mod hex_bytes {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    const DIGITS: &[u8; 16] = b"0123456789abcdef";

    pub fn serialize<S: Serializer>(bytes: &Bytes, serializer: S) -> Result<S::Ok, S::Error> {
        let mut text = String::with_capacity(bytes.len() * 2);
        for byte in bytes.iter() {
            text.push(char::from(DIGITS[usize::from(byte >> 4)]));
            text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
        }
        serializer.serialize_str(&text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        let text = String::deserialize(deserializer)?;
        let digits = text.as_bytes();
        if digits.len() % 2 != 0 {
            return Err(D::Error::custom("hex string of odd length"));
        }
        let mut out = Vec::with_capacity(digits.len() / 2);
        for pair in digits.chunks_exact(2) {
            let (Some(&high), Some(&low)) = (pair.first(), pair.get(1)) else {
                return Err(D::Error::custom("hex string of odd length"));
            };
            match (nibble(high), nibble(low)) {
                (Some(h), Some(l)) => out.push((h << 4) | l),
                _ => return Err(D::Error::custom("invalid hex digit")),
            }
        }
        Ok(Bytes::from(out))
    }

    fn nibble(digit: u8) -> Option<u8> {
        match digit {
            b'0'..=b'9' => Some(digit - b'0'),
            b'a'..=b'f' => Some(digit - b'a' + 10),
            b'A'..=b'F' => Some(digit - b'A' + 10),
            _ => None,
        }
    }
}
