//! Skiff's security rules, as Kafka names them, in plain data and pure functions (no I/O, no
//! clock of its own: callers pass the time):
//!
//! - [`principal`]: `KafkaPrincipal` (`User:alice`) and `ssl.principal.mapping.rules`;
//! - [`scram`]: SCRAM-SHA-256/512 (RFC 5802/7677) credentials and both sides of the exchange;
//! - [`plain`]: SASL PLAIN (RFC 4616), checked against SCRAM credentials;
//! - [`oauth`]: OAUTHBEARER (RFC 7628) and the JWT checks behind it;
//! - [`acl`]: ACL bindings and Kafka's StandardAuthorizer semantics.
//!
//! The broker owns the sockets, the files and the clock; it drives these.

pub mod acl;
pub mod oauth;
pub mod plain;
pub mod principal;
pub mod scram;
