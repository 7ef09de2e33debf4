//! `skiff-protocol` owns the Kafka wire protocol as Skiff speaks it: length-prefixed frames, request
//! and response headers (with the KIP-1313 client instance ID), the generated message codecs (with
//! the [`RequestBody`] trait tying each request type to its response type and versions), the
//! "error response for any request" builder, Kafka's error vocabulary ([`ErrorCode`],
//! [`KafkaError`]), and Kafka's UUID type.
//!
//! Decoding is bounded (every length is checked against the bytes left before anything is
//! allocated) and zero-copy (strings, bytes and record sets are `Bytes` slices of the frame).

pub mod codec;
pub mod error;
pub mod error_response;
pub mod frame;
pub mod generated;
pub mod header;
#[cfg(feature = "testing")]
pub mod testing;
pub mod uuid;

pub use codec::{ByteString, Decodable, DecodeError, Encodable, EncodeError, Message};
pub use error::{ErrorCode, KafkaError, error_codes};
pub use error_response::{error_response, response_error_codes};
pub use frame::{DEFAULT_MAX_FRAME_SIZE, Frame, FrameError, FrameReader};
pub use generated::api::{ApiKey, Request, RequestBody, Response};
pub use header::{RequestFrame, RequestHeaderError};
pub use uuid::Uuid;
