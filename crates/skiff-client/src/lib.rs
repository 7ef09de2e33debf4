//! `skiff-client`: an async Kafka client on tokio.
//!
//! - [`Client`]: bootstrap, one connection per broker with pipelined requests matched by
//!   correlation ID in one reader task, ApiVersions negotiation, jittered reconnect backoff,
//!   throttle times honoured, a metadata cache with topic IDs. Calls are typed
//!   ([`Client::request`] and friends take a request body and return its response body, by
//!   `skiff_protocol::RequestBody`); an answer of another API is one protocol error in one place. One KIP-1313 client instance ID per
//!   client, sent in every v2 request header on every connection, for the client's whole life.
//! - [`Producer`]: per-partition batching (linger, batch size), Kafka's murmur2 partitioner,
//!   acks 0/1/all, idempotence with ordered retries, delivery futures, [`Compression`] (gzip,
//!   snappy, lz4, zstd); the consumer decompresses every codec, bounded. With a
//!   `transactional_id`, transactions (KIP-98): begin/commit/abort, partitions added to the
//!   transaction before their first batch, `send_offsets_to_transaction` for
//!   consume-transform-produce, fencing by a newer producer with the same ID.
//! - [`Consumer`]: a KIP-848 group member whose member ID is the instance ID (KIP-1082), or a
//!   plain assigned consumer; offsets, long-poll fetch, seek, pause/resume; read_committed by
//!   default ([`IsolationLevel`]: aborted and open transactions skipped, markers never returned).
//! - [`ShareConsumer`]: a KIP-932 share group member (ShareGroupHeartbeat v1, member ID = the
//!   instance ID), share sessions per broker, records within their acquired ranges with delivery
//!   counts, implicit or explicit acknowledgement ([`AcknowledgeType`]: accept, release, reject)
//!   piggy-backed on ShareFetch or sent with ShareAcknowledge.
//! - [`Admin`]: topics, groups, client-metrics subscriptions, SCRAM users and ACLs.
//! - Security ([`SecurityConfig`], Kafka's `security.protocol`): TLS with rustls (a CA file or the
//!   system's CAs, an optional client certificate, host name checks on or off), and SASL PLAIN,
//!   SCRAM-SHA-256/512 and OAUTHBEARER (a token callback) after ApiVersions on every connection;
//!   when the broker limits a session (`connections.max.reauth.ms`), the connection
//!   re-authenticates before it ends, between requests (KIP-368).
//! - KIP-714 telemetry: when the cluster subscribes to client metrics, each [`Client`] fetches its
//!   subscription and pushes its own metrics (OTLP, body ID = header ID = its instance ID), with a
//!   terminating push on [`Client::close`]; [`ClientConfig::enable_metrics_push`] turns it off.

mod admin;
mod admin_quotas;
mod admin_security;
mod admin_share;
mod client;
pub mod connection;
mod consumer;
mod error;
mod producer;
mod sasl;
mod security;
mod share_consumer;
mod telemetry;
mod tls;
mod topic_partition;
mod transaction;
mod util;

pub use admin::{
    Admin, AlterConfigOp, CLIENT_METRICS_RESOURCE, ConfigEntry, GroupDescription, GroupListing,
    GroupMember, NewTopic, TopicDescription,
};
pub use admin_quotas::{ClientQuota, QuotaEntity};
pub use admin_security::ScramUser;
pub use admin_share::SharePartitionOffset;
pub use client::{BrokerInfo, Client, ClientConfig, Metadata, PartitionMetadata, TopicMetadata};
pub use connection::{Connection, client_versions};
pub use consumer::GroupMetadata;
pub use consumer::{
    Consumer, ConsumerConfig, ConsumerRecord, IsolationLevel, OffsetReset, RebalanceListener,
    TopicPartition,
};
pub use error::{Error, Result, error_name, is_retriable_code};
pub use producer::{
    Acks, DeliveryFuture, Producer, ProducerConfig, ProducerRecord, RecordMetadata, murmur2,
    partition_for_key,
};
pub use security::{
    EndpointIdentification, OauthTokenCallback, SaslConfig, ScramMechanism, SecurityConfig,
    SecurityProtocol, TlsConfig,
};
pub use share_consumer::{
    AcknowledgeType, AcknowledgementMode, AcknowledgementResults, ShareConsumer,
    ShareConsumerConfig, ShareRecord,
};
/// The ACL types [`Admin::create_acls`], [`Admin::describe_acls`] and [`Admin::delete_acls`]
/// take and return.
pub use skiff_auth::acl;
pub use skiff_protocol::Uuid;
pub use skiff_records::Compression;
