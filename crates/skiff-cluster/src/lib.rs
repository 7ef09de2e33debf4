//! `skiff-cluster` owns Skiff's cluster mode: stateless brokers whose state lives in existing
//! distributed engines, as in KIP-1150's "diskless" topics. PostgreSQL holds the metadata (brokers
//! and their leases, topics, producer ID blocks, coordinator shards and their state) and the order
//! of the batches (the batch index, high watermarks and last stable offsets, idempotent producers,
//! open and aborted transactions, transactional offsets); S3-compatible object storage (or a
//! shared directory) holds the bytes.
//!
//! - [`commit`]: the commit rules (offsets, sequences, duplicates, transactions and the last
//!   stable offset) as a pure function;
//! - [`schema`]: the versioned schema, migrated at start under an advisory lock;
//! - [`db`]: the PostgreSQL connection pool (`sslmode` honoured);
//! - [`membership`]: broker registration, leases and epochs (fencing);
//! - [`log`]: commits and lookups of the batch index, the logs' offsets and their aborted and
//!   open transactions;
//! - [`gc`]: deleting objects nothing refers to, and uploads never committed;
//! - [`topics`]: topics, partitions, configs and producer ID blocks;
//! - [`txn_offsets`]: offsets committed inside transactions, staged until the transaction ends;
//! - [`coordinators`]: coordinator shards (ownership fenced by epoch), their records, and group
//!   configs;
//! - [`documents`]: documents every broker mirrors (ACLs, SCRAM credentials, telemetry
//!   subscriptions) and each broker's summary of its client instances;
//! - [`share_states`]: KIP-932 share-partition state (snapshot and deltas), owned by the
//!   partition's leader under a fencing epoch;
//! - [`status`]: what `skiff cluster status` shows;
//! - [`objects`]: the object store (`s3://` or `file://`) and object keys.
//!
//! Nothing here knows the Kafka protocol; the broker drives it.

pub mod commit;
pub mod coordinators;
pub mod db;
pub mod documents;
pub mod gc;
pub mod log;
pub mod membership;
pub mod objects;
pub mod schema;
pub mod share_states;
pub mod status;
pub mod topics;
pub mod txn_offsets;

pub use db::{Db, DbError};
