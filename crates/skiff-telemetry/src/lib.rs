//! `skiff-telemetry`: KIP-714 client metrics for Skiff, with the KIP-1313 ID alignment rules.
//!
//! A deterministic, I/O-free core (every time-dependent call takes `now_ms`):
//! - [`subscriptions`]: CLIENT_METRICS config resources (type 16) — `metrics`, `interval.ms`,
//!   `match` — validated and altered like IncrementalAlterConfigs, described, listed, and
//!   snapshotted with serde for persistence.
//! - [`TelemetryManager`]: client instances, GetTelemetrySubscriptions and PushTelemetry
//!   handling in Kafka's validation order, bounded decompression ([`compression`]), OTLP
//!   `MetricsData` decoding ([`otlp`]), the latest value of every series per instance, instance
//!   expiry, and export: [`TelemetryManager::render_prometheus`] and serde views
//!   ([`InstanceView`]).
//!
//! # Behaviour
//!
//! GetTelemetrySubscriptions, header ID (KIP-1313) against body ID:
//!
//! | header | body | result |
//! |---|---|---|
//! | absent/zero | zero | new random ID, answered |
//! | absent/zero | R | R |
//! | H | H | H |
//! | H | zero | INVALID_REQUEST |
//! | H | R != H | INVALID_REQUEST |
//!
//! Every response carries the ID in effect (error responses carry the header ID when there is one,
//! else the instance's), never a zero a client could adopt. A Get sooner than the push interval
//! after the last Get/Push is THROTTLING_QUOTA_EXCEEDED, except right after a push failed with
//! UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE; such an exempt Get restarts the push
//! clock (Kafka does not, which can throttle the push that follows; Skiff lets it through).
//!
//! PushTelemetry checks, in order: zero (or the reserved `ONE`) ID -> INVALID_REQUEST; header ID
//! H with body ID != H -> INVALID_REQUEST; instance already terminated -> INVALID_REQUEST; too
//! early and not terminating -> THROTTLING_QUOTA_EXCEEDED; wrong subscription ID ->
//! UNKNOWN_SUBSCRIPTION_ID; unknown compression -> UNSUPPORTED_COMPRESSION_TYPE; payload larger
//! than TelemetryMaxBytes -> TELEMETRY_TOO_LARGE; then decompression past
//! `TelemetryMaxBytes * decompression_factor` -> TELEMETRY_TOO_LARGE, corrupt compression or a
//! payload that is not a `MetricsData` -> INVALID_RECORD. An empty payload is accepted and not
//! decoded. The terminating flag is recorded whatever the outcome and never cleared.
//!
//! The effective subscription of an instance is the union of the metrics of every matching
//! subscription (`["*"]` if one asks for all) with the smallest of their intervals (the default
//! 300000 only when none matches; Kafka also caps at the default). The SubscriptionId is Kafka's
//! formula — CRC32C of the sorted set and the interval, XOR a hash of the instance ID — so it
//! changes exactly when the set or interval changes and survives broker restarts. When the
//! effective subscription of an instance changes, its throttling clock restarts. An instance's
//! [`ClientSelectors`] are those of the request that created it (as in Kafka); an instance is
//! forgotten after `max(60 s, 3 * push interval)` of silence.
//!
//! Delta sums and histograms (clients are asked for delta temporality) are accumulated into
//! running totals, so the Prometheus counters only go up; gauges and cumulative points replace.
//!
//! # How to integrate (broker)
//!
//! - Own one `TelemetryManager` (behind the broker's lock), built with
//!   [`TelemetryManager::with_subscriptions`] from the persisted [`SubscriptionsSnapshot`]
//!   ([`Subscriptions::from_snapshot`]); TelemetryMaxBytes comes from [`TelemetryConfig`].
//! - GetTelemetrySubscriptions (71) / PushTelemetry (72) handlers: build a [`ClientSelectors`]
//!   from the header's client ID, the connection's ApiVersions software name/version and the peer
//!   address; pass the header's ClientInstanceId as `header_id` and the broker clock as `now_ms`;
//!   send the returned response as is. Hand the `DecodedMetrics` of a push to an OTLP forwarder if
//!   one is configured.
//! - IncrementalAlterConfigs on resource type 16: map each entry to an [`AlterOp`]
//!   ([`AlterOpType::from_i8`]), call [`Subscriptions::validate_alter`] for validateOnly, else
//!   [`Subscriptions::alter`] through [`TelemetryManager::subscriptions_mut`]; an error becomes
//!   [`SubscriptionError::error_code`] with its message. Persist [`Subscriptions::snapshot`]
//!   (serde_json) whenever [`Subscriptions::generation`] moved. DescribeConfigs:
//!   [`Subscriptions::describe`] (`None` -> RESOURCE_NOT_FOUND); ListConfigResources:
//!   [`Subscriptions::list`].
//! - Call [`TelemetryManager::expire`] from a periodic timer (every few seconds).
//! - Admin HTTP: `/metrics` can append [`TelemetryManager::render_prometheus`];
//!   `/clients/{id}` serialises [`TelemetryManager::instance_view`] (parse the ID with
//!   `Uuid::from_str`), `/clients` [`TelemetryManager::instances`].

pub mod compression;
pub mod manager;
pub mod otlp;
pub mod point;
pub mod prometheus;
pub mod subscriptions;

pub use manager::{DecodedMetrics, InstanceView, TelemetryConfig, TelemetryManager};
pub use otlp::{MetricKind, MetricValue, MetricsData};
pub use point::MetricPoint;
pub use subscriptions::{
    AlterOp, AlterOpType, ClientSelectors, EffectiveSubscription, MatchAttribute,
    SubscriptionError, Subscriptions, SubscriptionsSnapshot,
};

#[cfg(test)]
mod tests;
