//! The client's one error type. Every variant names the request (API) that failed.

use std::time::Duration;

use skiff_protocol::error_codes;

/// A client error. `api` is the Kafka API name of the request that failed ("Produce", ...).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// No TCP connection (or no ApiVersions handshake) could be made.
    #[error("{api}: cannot connect to {broker}: {reason}")]
    Connect {
        api: &'static str,
        broker: String,
        reason: String,
    },
    /// The broker refused this client: SASL authentication failed (the reason is the broker's
    /// message, never a password), or the TLS handshake did (an untrusted or misnamed broker
    /// certificate, a refused client certificate). Retrying with the same settings cannot help.
    #[error("authentication with {broker} failed: {reason}")]
    Authentication { broker: String, reason: String },
    /// The connection broke while the request was pending (or before it was sent).
    #[error("{api} to {broker} failed: connection broken ({reason})")]
    ConnectionBroken {
        api: &'static str,
        broker: String,
        reason: String,
    },
    /// No response within the request timeout.
    #[error("{api} to {broker} timed out after {timeout:?}")]
    Timeout {
        api: &'static str,
        broker: String,
        timeout: Duration,
    },
    /// The broker rejected the request because the KIP-1313 client instance ID in a v2 request
    /// header was missing or did not match the ID fixed on the connection (INVALID_REQUEST).
    #[error(
        "{api} rejected with INVALID_REQUEST by {broker}: KIP-1313 client instance ID missing or \
         mismatched in the request header (client ID {instance_id}){}",
        message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
    )]
    InstanceIdRejected {
        api: &'static str,
        broker: String,
        instance_id: String,
        message: Option<String>,
    },
    /// The broker answered with a Kafka error code.
    #[error("{api} failed: {} ({code}){}{}", error_name(*code),
        resource.as_deref().map(|r| format!(" for {r}")).unwrap_or_default(),
        message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Broker {
        api: &'static str,
        code: i16,
        resource: Option<String>,
        message: Option<String>,
    },
    /// Client and broker share no version of an API.
    #[error(
        "{api}: no version in common with {broker} (client {client_min}..={client_max}, broker {broker_range})"
    )]
    UnsupportedVersion {
        api: &'static str,
        broker: String,
        client_min: i16,
        client_max: i16,
        broker_range: String,
    },
    /// A response could not be decoded or did not fit the request.
    #[error("{api}: protocol error: {reason}")]
    Protocol { api: &'static str, reason: String },
    /// A topic is not known to the cluster.
    #[error("unknown topic {0}")]
    UnknownTopic(String),
    /// A partition is not known to the cluster.
    #[error("unknown partition {topic}-{partition}")]
    UnknownPartition { topic: String, partition: i32 },
    /// Invalid configuration or argument.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The producer, consumer or client was closed.
    #[error("{0} is closed")]
    Closed(&'static str),
    /// A record could not be encoded or decoded.
    #[error("records: {0}")]
    Records(String),
    /// A transactional producer call out of order (no transaction begun, one already open) or
    /// after the transaction failed (it must be aborted) or the producer was fenced.
    #[error("transaction: {0}")]
    Transaction(String),
    /// A share consumer's acknowledgement out of turn: a record acknowledged that the last poll
    /// did not deliver (or acknowledged twice), `acknowledge` in implicit mode, a poll in explicit
    /// mode with records of the last poll unacknowledged, or an acknowledgement that could not
    /// be sent (its share session was lost).
    #[error("acknowledgement: {0}")]
    Acknowledgement(String),
    /// The consumer group membership hit a fatal error.
    #[error("consumer group {group}: {reason}")]
    Group { group: String, reason: String },
}

impl Error {
    /// The Kafka error code, if the broker returned one.
    pub fn code(&self) -> Option<i16> {
        match self {
            Error::Broker { code, .. } => Some(*code),
            Error::InstanceIdRejected { .. } => Some(error_codes::INVALID_REQUEST),
            _ => None,
        }
    }

    /// Whether retrying (after a metadata refresh / reconnect) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::ConnectionBroken { .. } | Error::Timeout { .. } => true,
            Error::Broker { code, .. } => is_retriable_code(*code),
            _ => false,
        }
    }

    pub(crate) fn broker(api: &'static str, code: i16, message: Option<String>) -> Error {
        Error::Broker {
            api,
            code,
            resource: None,
            message,
        }
    }

    pub(crate) fn broker_for(
        api: &'static str,
        code: i16,
        resource: impl Into<String>,
        message: Option<String>,
    ) -> Error {
        Error::Broker {
            api,
            code,
            resource: Some(resource.into()),
            message,
        }
    }

    pub(crate) fn protocol(api: &'static str, reason: impl Into<String>) -> Error {
        Error::Protocol {
            api,
            reason: reason.into(),
        }
    }
}

/// Kafka's retriable error codes (the subset a client meets in practice).
pub fn is_retriable_code(code: i16) -> bool {
    matches!(
        code,
        error_codes::UNKNOWN_TOPIC_OR_PARTITION
            | error_codes::LEADER_NOT_AVAILABLE
            | error_codes::NOT_LEADER_OR_FOLLOWER
            | error_codes::REQUEST_TIMED_OUT
            | 13 // NETWORK_EXCEPTION
            | 14 // COORDINATOR_LOAD_IN_PROGRESS
            | error_codes::COORDINATOR_NOT_AVAILABLE
            | error_codes::NOT_COORDINATOR
            | 19 // NOT_ENOUGH_REPLICAS
            | 20 // NOT_ENOUGH_REPLICAS_AFTER_APPEND
            | error_codes::FENCED_LEADER_EPOCH
            | error_codes::UNKNOWN_LEADER_EPOCH
            | error_codes::UNKNOWN_TOPIC_ID
            | error_codes::THROTTLING_QUOTA_EXCEEDED
    )
}

/// Kafka's name for an error code.
pub fn error_name(code: i16) -> &'static str {
    match code {
        0 => "NONE",
        -1 => "UNKNOWN_SERVER_ERROR",
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        10 => "MESSAGE_TOO_LARGE",
        13 => "NETWORK_EXCEPTION",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        17 => "INVALID_TOPIC_EXCEPTION",
        22 => "ILLEGAL_GENERATION",
        24 => "INVALID_GROUP_ID",
        25 => "UNKNOWN_MEMBER_ID",
        27 => "REBALANCE_IN_PROGRESS",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        35 => "UNSUPPORTED_VERSION",
        36 => "TOPIC_ALREADY_EXISTS",
        37 => "INVALID_PARTITIONS",
        38 => "INVALID_REPLICATION_FACTOR",
        40 => "INVALID_CONFIG",
        42 => "INVALID_REQUEST",
        45 => "OUT_OF_ORDER_SEQUENCE_NUMBER",
        46 => "DUPLICATE_SEQUENCE_NUMBER",
        47 => "INVALID_PRODUCER_EPOCH",
        48 => "INVALID_TXN_STATE",
        49 => "INVALID_PRODUCER_ID_MAPPING",
        50 => "INVALID_TRANSACTION_TIMEOUT",
        51 => "CONCURRENT_TRANSACTIONS",
        53 => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        59 => "UNKNOWN_PRODUCER_ID",
        68 => "NON_EMPTY_GROUP",
        69 => "GROUP_ID_NOT_FOUND",
        74 => "FENCED_LEADER_EPOCH",
        75 => "UNKNOWN_LEADER_EPOCH",
        81 => "GROUP_MAX_SIZE_REACHED",
        82 => "FENCED_INSTANCE_ID",
        88 => "UNSTABLE_OFFSET_COMMIT",
        89 => "THROTTLING_QUOTA_EXCEEDED",
        90 => "PRODUCER_FENCED",
        100 => "UNKNOWN_TOPIC_ID",
        110 => "FENCED_MEMBER_EPOCH",
        111 => "UNRELEASED_INSTANCE_ID",
        112 => "UNSUPPORTED_ASSIGNOR",
        113 => "STALE_MEMBER_EPOCH",
        // Every other code Kafka defines, by its name.
        other => match skiff_protocol::ErrorCode::from_code(other).name() {
            "UNKNOWN" => "KAFKA_ERROR",
            name => name,
        },
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
