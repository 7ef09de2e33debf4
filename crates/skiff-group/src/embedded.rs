//! The consumer protocol embedded in classic groups (Kafka's `ConsumerProtocol`): a member's
//! subscription travels as JoinGroup protocol metadata and its assignment as SyncGroup bytes,
//! each a version (int16) followed by a `ConsumerProtocolSubscription` or
//! `ConsumerProtocolAssignment` of that version.
//!
//! The coordinator reads them only where it must understand a classic consumer: when a classic
//! group is upgraded to a KIP-848 consumer group, when a classic member joins a consumer group,
//! and when a consumer group is downgraded back. Like Kafka, a newer version than the schemas
//! know is read as the highest known one (the fields are append-only); anything unreadable is an
//! error, never a panic.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use skiff_protocol::error_codes;
use skiff_protocol::generated::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use skiff_protocol::generated::consumer_protocol_subscription::ConsumerProtocolSubscription;
use skiff_protocol::{ByteString, Decodable, Encodable};

use crate::types::GroupError;

/// The highest version of both embedded schemas.
const HIGHEST_VERSION: i16 = 3;

/// The protocol type of classic groups whose members are Kafka consumers.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// A classic consumer's subscription, as the coordinator needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    /// Sorted and deduplicated.
    pub topics: Vec<String>,
    /// Partitions the member owns now (v1+; cooperative members report them), by topic name.
    pub owned: BTreeMap<String, Vec<i32>>,
    pub rack_id: Option<String>,
}

/// A classic consumer's assignment: partitions by topic name, and whether a custom assignor put
/// user data in it (which a KIP-848 group could not carry over).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssignmentBytes {
    pub partitions: BTreeMap<String, Vec<i32>>,
    pub has_user_data: bool,
}

fn malformed(what: &str, detail: impl std::fmt::Display) -> GroupError {
    GroupError::new(
        error_codes::INCONSISTENT_GROUP_PROTOCOL,
        format!("Malformed embedded consumer protocol {what}: {detail}."),
    )
}

/// The version prefix, clamped to the highest known version.
fn split_version(bytes: &[u8], what: &str) -> Result<(i16, Bytes), GroupError> {
    let (Some(&high), Some(&low)) = (bytes.first(), bytes.get(1)) else {
        return Err(malformed(what, "shorter than its version"));
    };
    let version = i16::from_be_bytes([high, low]);
    if version < 0 {
        return Err(malformed(what, format!("negative version {version}")));
    }
    let rest = Bytes::copy_from_slice(bytes.get(2..).unwrap_or_default());
    Ok((version.min(HIGHEST_VERSION), rest))
}

/// The version a member's metadata was written with (0 when unreadable), which Kafka answers
/// the member's assignment in.
pub fn metadata_version(metadata: &[u8]) -> i16 {
    match (metadata.first(), metadata.get(1)) {
        (Some(&high), Some(&low)) => i16::from_be_bytes([high, low]).clamp(0, HIGHEST_VERSION),
        _ => 0,
    }
}

/// Reads a JoinGroup protocol's metadata as a consumer subscription.
pub fn decode_subscription(metadata: &[u8]) -> Result<Subscription, GroupError> {
    let (version, mut body) = split_version(metadata, "subscription")?;
    let decoded = ConsumerProtocolSubscription::decode(&mut body, version)
        .map_err(|e| malformed("subscription", e))?;
    let mut topics: Vec<String> = decoded.topics.iter().map(|t| t.to_string()).collect();
    topics.sort();
    topics.dedup();
    let mut owned: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for topic in &decoded.owned_partitions {
        owned
            .entry(topic.topic.to_string())
            .or_default()
            .extend(topic.partitions.iter().copied());
    }
    Ok(Subscription {
        topics,
        owned,
        rack_id: decoded
            .rack_id
            .map(|r| r.to_string())
            .filter(|r| !r.is_empty()),
    })
}

/// Reads SyncGroup assignment bytes; empty bytes are an empty assignment (a member that joined
/// but never synced).
pub fn decode_assignment(bytes: &[u8]) -> Result<AssignmentBytes, GroupError> {
    if bytes.is_empty() {
        return Ok(AssignmentBytes::default());
    }
    let (version, mut body) = split_version(bytes, "assignment")?;
    let decoded = ConsumerProtocolAssignment::decode(&mut body, version)
        .map_err(|e| malformed("assignment", e))?;
    let mut partitions: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for topic in &decoded.assigned_partitions {
        partitions
            .entry(topic.topic.to_string())
            .or_default()
            .extend(topic.partitions.iter().copied());
    }
    Ok(AssignmentBytes {
        partitions,
        has_user_data: decoded.user_data.is_some_and(|d| !d.is_empty()),
    })
}

/// Writes an assignment (partitions by topic name) in `version` for SyncGroup.
pub fn encode_assignment(version: i16, partitions: &BTreeMap<String, Vec<i32>>) -> Bytes {
    let version = version.clamp(0, HIGHEST_VERSION);
    let assignment = ConsumerProtocolAssignment {
        assigned_partitions: partitions
            .iter()
            .map(|(topic, partitions)| AssignedTopic {
                topic: ByteString::from(topic.as_str()),
                partitions: partitions.clone(),
                ..Default::default()
            })
            .collect(),
        user_data: None,
        ..Default::default()
    };
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&version.to_be_bytes());
    // Encoding a message we built ourselves cannot fail; an empty assignment is the fallback.
    match assignment.encode(&mut buf, version) {
        Ok(()) => buf.freeze(),
        Err(_) => Bytes::new(),
    }
}

/// Writes a subscription (tests and tools build classic members with it).
pub fn encode_subscription(
    version: i16,
    topics: &[&str],
    owned: &BTreeMap<String, Vec<i32>>,
) -> Bytes {
    use skiff_protocol::generated::consumer_protocol_subscription::TopicPartition;
    let version = version.clamp(0, HIGHEST_VERSION);
    let subscription = ConsumerProtocolSubscription {
        topics: topics.iter().map(|t| ByteString::from(*t)).collect(),
        owned_partitions: owned
            .iter()
            .map(|(topic, partitions)| TopicPartition {
                topic: ByteString::from(topic.as_str()),
                partitions: partitions.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&version.to_be_bytes());
    match subscription.encode(&mut buf, version) {
        Ok(()) => buf.freeze(),
        Err(_) => Bytes::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(pairs: &[(&str, &[i32])]) -> BTreeMap<String, Vec<i32>> {
        pairs
            .iter()
            .map(|(t, p)| (t.to_string(), p.to_vec()))
            .collect()
    }

    #[test]
    fn subscriptions_round_trip_in_every_version() {
        for version in 0..=HIGHEST_VERSION {
            let mine = owned(&[("a", &[0, 2])]);
            let bytes = encode_subscription(version, &["b", "a", "b"], &mine);
            assert_eq!(metadata_version(&bytes), version);
            let sub = decode_subscription(&bytes).expect("decodes");
            assert_eq!(sub.topics, vec!["a".to_string(), "b".to_string()]);
            // Owned partitions exist from v1 on.
            let expected = if version >= 1 { mine } else { BTreeMap::new() };
            assert_eq!(sub.owned, expected);
        }
    }

    #[test]
    fn assignments_round_trip_and_empty_bytes_are_empty() {
        let parts = owned(&[("t", &[1, 3]), ("u", &[0])]);
        for version in 0..=HIGHEST_VERSION {
            let bytes = encode_assignment(version, &parts);
            let decoded = decode_assignment(&bytes).expect("decodes");
            assert_eq!(decoded.partitions, parts);
            assert!(!decoded.has_user_data);
        }
        assert_eq!(
            decode_assignment(&[]).expect("empty"),
            AssignmentBytes::default()
        );
    }

    #[test]
    fn newer_versions_are_read_as_the_highest_known() {
        let mut bytes = encode_subscription(3, &["t"], &BTreeMap::new()).to_vec();
        bytes[..2].copy_from_slice(&7i16.to_be_bytes());
        // Trailing fields of a future version are ignored.
        bytes.extend_from_slice(&[0, 0, 0, 9]);
        let sub = decode_subscription(&bytes).expect("decodes");
        assert_eq!(sub.topics, vec!["t".to_string()]);
        assert_eq!(metadata_version(&bytes), HIGHEST_VERSION);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &[][..],
            &[0][..],
            &[0xff, 0xff, 0, 0, 0, 1][..],
            // v0 with a topic count of 2^31-1 and nothing behind it.
            &[0, 0, 0x7f, 0xff, 0xff, 0xff][..],
            &[0, 1, 0, 0, 0, 1, 0x7f, 0xff][..],
        ] {
            let err = decode_subscription(bad).expect_err("malformed");
            assert_eq!(err.code, error_codes::INCONSISTENT_GROUP_PROTOCOL);
            if !bad.is_empty() {
                assert!(decode_assignment(bad).is_err());
            }
        }
    }

    #[test]
    fn user_data_is_noticed() {
        let assignment = ConsumerProtocolAssignment {
            user_data: Some(Bytes::from_static(b"sticky")),
            ..Default::default()
        };
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&1i16.to_be_bytes());
        assignment.encode(&mut buf, 1).expect("encodes");
        assert!(decode_assignment(&buf).expect("decodes").has_user_data);
    }
}
