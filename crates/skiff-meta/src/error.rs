//! The crate's one error type and its mapping onto Kafka error codes.

use std::path::PathBuf;

use skiff_protocol::{ErrorCode, KafkaError, Uuid};

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
    pub fn kafka_error_code(&self) -> ErrorCode {
        match self {
            MetaError::TopicAlreadyExists(_) => ErrorCode::TOPIC_ALREADY_EXISTS,
            MetaError::InvalidTopic { .. } => ErrorCode::INVALID_TOPIC_EXCEPTION,
            MetaError::UnknownTopic(_) => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            MetaError::UnknownTopicId(_) => ErrorCode::UNKNOWN_TOPIC_ID,
            MetaError::InvalidPartitions(_) => ErrorCode::INVALID_PARTITIONS,
            MetaError::InvalidReplicationFactor(_) => ErrorCode::INVALID_REPLICATION_FACTOR,
            MetaError::InvalidConfig(_) => ErrorCode::INVALID_CONFIG,
            MetaError::InvalidRequest(_) => ErrorCode::INVALID_REQUEST,
            MetaError::PolicyViolation(_) => ErrorCode::POLICY_VIOLATION,
            MetaError::TopicDeletionDisabled => ErrorCode::TOPIC_DELETION_DISABLED,
            // The metadata could not be written (a full disk, a read-only file system): Kafka's
            // answer, with a message saying what failed.
            MetaError::Io { .. } => ErrorCode::KAFKA_STORAGE_ERROR,
            MetaError::Corrupt { .. }
            | MetaError::UnsupportedVersion { .. }
            | MetaError::Locked(_)
            | MetaError::Random(_)
            | MetaError::InvalidStaticConfig(_) => ErrorCode::UNKNOWN_SERVER_ERROR,
        }
    }

    /// The message a Kafka response's `error_message` should carry (`None` for server faults,
    /// whose details belong in the broker's log rather than on the wire).
    pub fn client_message(&self) -> Option<String> {
        if self.kafka_error_code() == ErrorCode::UNKNOWN_SERVER_ERROR {
            None
        } else if let MetaError::Io { context, source } = self {
            Some(format!("storage error while {context}: {source}"))
        } else {
            Some(self.to_string())
        }
    }

    /// The code and message a Kafka response carries for this error.
    pub fn to_kafka_error(&self) -> KafkaError {
        KafkaError {
            code: self.kafka_error_code(),
            message: self.client_message(),
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

impl From<MetaError> for KafkaError {
    /// The answer a response carries; a server fault (no client message) is logged here, since
    /// its details stay off the wire.
    fn from(e: MetaError) -> KafkaError {
        if e.kafka_error_code() == ErrorCode::UNKNOWN_SERVER_ERROR {
            tracing::error!(error = %e, "metadata request failed");
        }
        e.to_kafka_error()
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
            assert_eq!(error.kafka_error_code().code(), code, "{error}");
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
