//! The crate's one error type and its mapping onto Kafka error codes.

use std::path::PathBuf;

use skiff_protocol::Uuid;

/// Kafka error codes this crate can produce (`org.apache.kafka.common.protocol.Errors`).
pub mod codes {
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const KAFKA_STORAGE_ERROR: i16 = skiff_protocol::error_codes::KAFKA_STORAGE_ERROR;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub const INVALID_PARTITIONS: i16 = 37;
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    pub const INVALID_CONFIG: i16 = 40;
    pub const INVALID_REQUEST: i16 = 42;
    pub const POLICY_VIOLATION: i16 = 44;
    pub const TOPIC_DELETION_DISABLED: i16 = 73;
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
}

/// Everything that can go wrong in `skiff-meta`.
///
/// Request-level variants (the first group) carry a message fit for a Kafka response's
/// `error_message`; storage-level variants (the second group) are server faults.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("Topic '{0}' already exists.")]
    TopicAlreadyExists(String),
    #[error("Topic name {name:?} is invalid: {reason}")]
    InvalidTopic { name: String, reason: String },
    #[error("This server does not host this topic: {0}")]
    UnknownTopic(String),
    #[error("This server does not host a topic with ID {0}")]
    UnknownTopicId(Uuid),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    PolicyViolation(String),
    #[error("Topic deletion is disabled (delete.topic.enable=false).")]
    TopicDeletionDisabled,

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("metadata file {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "metadata file {path} has format version {found}; this build reads version {supported}"
    )]
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("metadata directory {0} is locked by another process")]
    Locked(PathBuf),
    #[error("could not generate a topic ID: {0}")]
    Random(String),
    #[error("invalid static broker config: {0}")]
    InvalidStaticConfig(String),
}

/// `Result` with [`MetaError`].
pub type Result<T, E = MetaError> = std::result::Result<T, E>;

impl MetaError {
    /// The Kafka error code a response should carry for this error.
    pub fn kafka_error_code(&self) -> i16 {
        use codes::*;
        match self {
            MetaError::TopicAlreadyExists(_) => TOPIC_ALREADY_EXISTS,
            MetaError::InvalidTopic { .. } => INVALID_TOPIC_EXCEPTION,
            MetaError::UnknownTopic(_) => UNKNOWN_TOPIC_OR_PARTITION,
            MetaError::UnknownTopicId(_) => UNKNOWN_TOPIC_ID,
            MetaError::InvalidPartitions(_) => INVALID_PARTITIONS,
            MetaError::InvalidReplicationFactor(_) => INVALID_REPLICATION_FACTOR,
            MetaError::InvalidConfig(_) => INVALID_CONFIG,
            MetaError::InvalidRequest(_) => INVALID_REQUEST,
            MetaError::PolicyViolation(_) => POLICY_VIOLATION,
            MetaError::TopicDeletionDisabled => TOPIC_DELETION_DISABLED,
            // The metadata could not be written (a full disk, a read-only file system): Kafka's
            // answer, with a message saying what failed.
            MetaError::Io { .. } => KAFKA_STORAGE_ERROR,
            MetaError::Corrupt { .. }
            | MetaError::UnsupportedVersion { .. }
            | MetaError::Locked(_)
            | MetaError::Random(_)
            | MetaError::InvalidStaticConfig(_) => UNKNOWN_SERVER_ERROR,
        }
    }

    /// The message a Kafka response's `error_message` should carry (`None` for server faults,
    /// whose details belong in the broker's log rather than on the wire).
    pub fn client_message(&self) -> Option<String> {
        if self.kafka_error_code() == codes::UNKNOWN_SERVER_ERROR {
            None
        } else if let MetaError::Io { context, source } = self {
            Some(format!("storage error while {context}: {source}"))
        } else {
            Some(self.to_string())
        }
    }

    /// A storage error: what was being done, and what the system said.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        MetaError::Io {
            context: context.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_kafka() {
        let cases = [
            (MetaError::TopicAlreadyExists("t".into()), 36),
            (
                MetaError::InvalidTopic {
                    name: "..".into(),
                    reason: "r".into(),
                },
                17,
            ),
            (MetaError::UnknownTopic("t".into()), 3),
            (MetaError::UnknownTopicId(Uuid::from_u128(7)), 100),
            (MetaError::InvalidPartitions("p".into()), 37),
            (MetaError::InvalidReplicationFactor("r".into()), 38),
            (MetaError::InvalidConfig("c".into()), 40),
            (MetaError::InvalidRequest("r".into()), 42),
            (MetaError::PolicyViolation("p".into()), 44),
            (MetaError::TopicDeletionDisabled, 73),
            (MetaError::Locked(PathBuf::from("/x")), -1),
        ];
        for (error, code) in cases {
            assert_eq!(error.kafka_error_code(), code, "{error}");
        }
        assert!(
            MetaError::Locked(PathBuf::from("/x"))
                .client_message()
                .is_none()
        );
        assert!(
            MetaError::UnknownTopic("t".into())
                .client_message()
                .is_some()
        );
    }
}
