//! `skiff-protocol` owns the Kafka wire protocol as Skiff speaks it: length-prefixed frames, request
//! and response headers (with the KIP-1313 client instance ID), the generated message codecs, the
//! "error response for any request" builder, and Kafka's UUID type.
//!
//! Decoding is bounded (every length is checked against the bytes left before anything is
//! allocated) and zero-copy (strings, bytes and record sets are `Bytes` slices of the frame).

pub mod uuid;

pub use uuid::Uuid;
pub mod codec;
pub mod generated;

pub use codec::{ByteString, Decodable, DecodeError, Encodable, EncodeError, Message};
pub use generated::api::{ApiKey, Request, Response};
