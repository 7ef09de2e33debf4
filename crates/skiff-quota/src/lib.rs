//! `skiff-quota` owns the rules of client quotas, as Kafka's `ClientQuotaManager` and
//! `ControllerMutationQuotaManager` apply them, with one addition: a quota on one KIP-1313 client
//! instance ID, so one misbehaving instance of an application can be throttled without touching
//! its siblings that share a client ID. Nothing here does I/O or reads a clock: callers pass the
//! time.
//!
//! - [`entity`]: quota entities (user, client ID, client instance ID, and their defaults), the
//!   quota keys (`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`,
//!   `controller_mutation_rate`), the configured quotas with AlterClientQuotas' checks and
//!   DescribeClientQuotas' filters, and which quota applies to a request (Kafka's precedence)
//!   and which bucket it is counted in.
//! - [`rate`]: the token bucket quotas are measured with (KIP-599's), and the throttle time of a
//!   bucket in debt.

pub mod entity;
pub mod rate;
