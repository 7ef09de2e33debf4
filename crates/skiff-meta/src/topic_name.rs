//! Kafka's topic name rules (`org.apache.kafka.common.internals.Topic`).

use crate::error::{MetaError, Result};

/// The longest topic name Kafka accepts.
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Checks a topic name against Kafka's rules: non-empty, not `.` or `..`, at most 249 characters,
/// and only ASCII letters, digits, `.`, `_` and `-`.
pub fn validate_topic_name(name: &str) -> Result<()> {
    let invalid = |reason: String| {
        Err(MetaError::InvalidTopic {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return invalid("the empty string is not allowed".into());
    }
    if name == "." || name == ".." {
        return invalid(format!("'{name}' is not allowed"));
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return invalid(format!(
            "the length is {} characters, longer than the maximum {MAX_TOPIC_NAME_LEN}",
            name.chars().count()
        ));
    }
    if !name.bytes().all(is_legal_byte) {
        return invalid(
            "it contains characters other than ASCII alphanumerics, '.', '_' and '-'".into(),
        );
    }
    Ok(())
}

fn is_legal_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-'
}

/// Whether two distinct names would collide in metric names, where Kafka treats `.` and `_` as the
/// same character (`Topic.hasCollision`). Kafka refuses to create a topic that collides with an
/// existing one.
pub fn topic_names_collide(a: &str, b: &str) -> bool {
    a != b && a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| unify(x) == unify(y))
}

fn unify(b: u8) -> u8 {
    if b == b'.' { b'_' } else { b }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_table() {
        let long_ok = "a".repeat(249);
        let too_long = "a".repeat(250);
        let cases: &[(&str, bool)] = &[
            ("", false),
            (".", false),
            ("..", false),
            ("...", true),
            ("a", true),
            ("orders", true),
            ("Orders-2024_v1.0", true),
            ("__consumer_offsets", true),
            ("-leading-dash", true),
            (&long_ok, true),
            (&too_long, false),
            ("has space", false),
            ("slash/no", false),
            ("comma,no", false),
            ("colon:no", false),
            ("tab\tno", false),
            ("ünïcode", false),
            ("emoji🦀", false),
            ("nul\0", false),
            ("star*", false),
        ];
        for (name, ok) in cases {
            let result = validate_topic_name(name);
            assert_eq!(result.is_ok(), *ok, "{name:?}: {result:?}");
            if let Err(error) = result {
                assert_eq!(error.kafka_error_code().code(), 17);
            }
        }
    }

    #[test]
    fn collisions() {
        assert!(topic_names_collide("a.b", "a_b"));
        assert!(topic_names_collide("a_b", "a.b"));
        assert!(!topic_names_collide("a.b", "a.b"));
        assert!(!topic_names_collide("a.b", "a-b"));
        assert!(!topic_names_collide("a.b", "a.bc"));
    }
}
