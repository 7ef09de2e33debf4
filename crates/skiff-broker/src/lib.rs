//! `skiff-broker` owns the broker process: the listener and its connection cap, each connection's
//! frame loop with the KIP-1313 identity rule, request dispatch to per-API handlers, and the
//! shared state those handlers use (metadata from `skiff-meta`, partition logs from `skiff-log`).
//!
//! Start one with [`start`]; stop it with [`RunningBroker::shutdown`].

mod admin;
mod clients;
pub mod clock;
mod cluster;
mod cluster_admin;
pub mod config;
mod connection;
mod coordinator_store;
pub mod fetch_session;
mod groups;
mod handlers;
pub mod identity;
mod journal;
mod kv_log;
mod lag;
mod node_file;
pub mod otlp;
mod owners;
pub mod partition;
mod partition_dirs;
mod producer_ids;
mod quotas;
mod security;
mod server;
mod share;
mod shutdown;
mod state;
mod txn_end;
mod txns;
pub mod uuid_text;
pub mod versions;

pub use config::{
    AuthorizerSettings, BrokerConfig, ClientAuth, ClusterConfig, FlushMode, InstanceBinding,
    ListenerConfig, Overrides, SaslMechanism, SecurityConfig, SecurityProtocol, TlsProtocol,
    TlsSettings,
};
pub use partition::{Partition, Topic};
pub use security::credentials::Credentials;
pub use server::{RunningBroker, start};
pub use state::Broker;
pub use txns::TXN_LOG_DIR;
