//! Request and response headers, the header-version rule, and whole request/response frames.
//!
//! KIP-1313: request header v2 carries the client instance ID as tagged field 0 (uuid). A zero
//! UUID means the same as an absent field and is never written.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{
    ChunkedBuf, Decodable, DecodeError, Encodable, EncodeError, WriteBuf, read_i16,
};
use crate::generated::api::{ApiKey, Request, Response};
use crate::generated::{RequestHeader, ResponseHeader};
use crate::uuid::Uuid;

impl RequestHeader {
    /// The KIP-1313 client instance ID; `None` when absent or zero.
    pub fn instance_id(&self) -> Option<Uuid> {
        self.client_instance_id.non_zero()
    }
}

/// The header version a request of `api_key`/`version` uses. Versions above the highest known
/// one count as flexible when the API has flexible versions (so a newer ApiVersions request still
/// parses and gets its UNSUPPORTED_VERSION answer).
pub fn request_header_version(api_key: ApiKey, version: i16) -> i16 {
    api_key.request_header_version(version)
}

/// The header version of the response to `api_key`/`version` (ApiVersions: always 0).
pub fn response_header_version(api_key: ApiKey, version: i16) -> i16 {
    api_key.response_header_version(version)
}

/// A request whose header was read; the body is still raw bytes.
#[derive(Debug, Clone)]
pub struct RequestFrame {
    pub api_key: ApiKey,
    pub header_version: i16,
    pub header: RequestHeader,
    pub body: Bytes,
}

/// Why a request frame could not be turned into a header (+ body).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestHeaderError {
    /// The API key is not one this codec knows; the correlation ID is given when it was readable
    /// so a caller may log it. Kafka closes the connection in this case.
    #[error("unknown API key {api_key} (correlation ID {correlation_id:?})")]
    UnknownApiKey {
        api_key: i16,
        correlation_id: Option<i32>,
    },
    #[error("malformed request header: {0}")]
    Malformed(DecodeError),
}

impl RequestFrame {
    /// Reads the header of a request frame (without the 4-byte size prefix).
    pub fn parse(mut frame: Bytes) -> Result<RequestFrame, RequestHeaderError> {
        let mut peek = frame.clone();
        let raw_key = read_i16(&mut peek).map_err(RequestHeaderError::Malformed)?;
        let version = read_i16(&mut peek).map_err(RequestHeaderError::Malformed)?;
        let Some(api_key) = ApiKey::from_i16(raw_key) else {
            let correlation_id = (peek.remaining() >= 4).then(|| peek.get_i32());
            return Err(RequestHeaderError::UnknownApiKey {
                api_key: raw_key,
                correlation_id,
            });
        };
        let header_version = request_header_version(api_key, version);
        let header = RequestHeader::decode(&mut frame, header_version)
            .map_err(RequestHeaderError::Malformed)?;
        Ok(RequestFrame {
            api_key,
            header_version,
            header,
            body: frame,
        })
    }

    pub fn version(&self) -> i16 {
        self.header.request_api_version
    }

    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }

    /// Decodes the body for this frame's API and version.
    pub fn decode_body(&self) -> Result<Request, DecodeError> {
        let mut body = self.body.clone();
        Request::decode(self.api_key, self.version(), &mut body)
    }
}

/// Encodes a whole request frame, size prefix included, with the header version the API and
/// version call for. `client_instance_id` goes in tag 0 when the header is v2 and it is non-zero.
pub fn encode_request_frame(
    request: &Request,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
    client_instance_id: Option<Uuid>,
) -> Result<BytesMut, EncodeError> {
    let api_key = request.api_key();
    let header = RequestHeader {
        request_api_key: api_key.key(),
        request_api_version: version,
        correlation_id,
        client_id: client_id.map(Into::into),
        client_instance_id: client_instance_id.unwrap_or(Uuid::ZERO),
        unknown_tagged_fields: Vec::new(),
    };
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    header.encode(&mut buf, request_header_version(api_key, version))?;
    request.encode(&mut buf, version)?;
    patch_size(&mut buf)?;
    Ok(buf)
}

/// Encodes a whole response frame, size prefix included.
pub fn encode_response_frame(
    response: &Response,
    version: i16,
    correlation_id: i32,
) -> Result<BytesMut, EncodeError> {
    let mut buf = BytesMut::with_capacity(256);
    encode_response_frame_into(&mut buf, response, version, correlation_id)?;
    Ok(buf)
}

/// Appends a whole response frame to `buf` (lets a connection batch several responses).
pub fn encode_response_frame_into(
    buf: &mut BytesMut,
    response: &Response,
    version: i16,
    correlation_id: i32,
) -> Result<(), EncodeError> {
    let start = buf.len();
    buf.put_i32(0);
    encode_response_parts(buf, response, version, correlation_id)?;
    let size = buf.len() - start - 4;
    let size = i32::try_from(size).map_err(|_| EncodeError::TooLong {
        what: "frame",
        len: size,
    })?;
    buf[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// Encodes a whole response frame as chunks to be written in order (e.g. with vectored writes):
/// the size prefix, header and small fields are copied into shared buffers, but record sets and
/// byte fields of at least [`ChunkedBuf::DEFAULT_THRESHOLD`] bytes are the response's own `Bytes`
/// handles, not copies. The size prefix is in the first chunk; the concatenation equals
/// [`encode_response_frame`]'s bytes.
pub fn encode_response_frame_chunks(
    response: &Response,
    version: i16,
    correlation_id: i32,
) -> Result<Vec<Bytes>, EncodeError> {
    let mut buf = ChunkedBuf::new();
    encode_response_frame_chunked(&mut buf, response, version, correlation_id)?;
    Ok(buf.into_chunks())
}

/// Appends a whole response frame to a [`ChunkedBuf`] (lets a connection batch several
/// responses into one vectored write; take them with [`ChunkedBuf::take_chunks`]). On error the
/// buffer may hold part of the frame.
pub fn encode_response_frame_chunked(
    buf: &mut ChunkedBuf,
    response: &Response,
    version: i16,
    correlation_id: i32,
) -> Result<(), EncodeError> {
    let start = buf.len();
    let prefix_at = buf.copied_len();
    buf.put_slice(&[0; 4]);
    encode_response_parts(buf, response, version, correlation_id)?;
    let size = buf.len() - start - 4;
    let size = i32::try_from(size).map_err(|_| EncodeError::TooLong {
        what: "frame",
        len: size,
    })?;
    buf.patch_copied(prefix_at, &size.to_be_bytes());
    Ok(())
}

/// The response header and body, without size prefix.
fn encode_response_parts<W: WriteBuf + ?Sized>(
    buf: &mut W,
    response: &Response,
    version: i16,
    correlation_id: i32,
) -> Result<(), EncodeError> {
    let header = ResponseHeader {
        correlation_id,
        unknown_tagged_fields: Vec::new(),
    };
    let api_key = response.api_key();
    header.encode(buf, response_header_version(api_key, version))?;
    response.encode(buf, version)
}

fn patch_size(buf: &mut BytesMut) -> Result<(), EncodeError> {
    let size = buf.len() - 4;
    let size = i32::try_from(size).map_err(|_| EncodeError::TooLong {
        what: "frame",
        len: size,
    })?;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// Splits a response frame (without size prefix) into correlation ID and body, given the API and
/// version of the request it answers.
pub fn parse_response_frame(
    mut frame: Bytes,
    api_key: ApiKey,
    version: i16,
) -> Result<(ResponseHeader, Response), DecodeError> {
    let header = ResponseHeader::decode(&mut frame, response_header_version(api_key, version))?;
    let response = Response::decode(api_key, version, &mut frame)?;
    Ok((header, response))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generated::ApiVersionsRequest;
    use crate::generated::MetadataRequest;

    fn metadata_v12() -> Request {
        Request::Metadata(MetadataRequest {
            topics: None,
            ..Default::default()
        })
    }

    #[test]
    fn header_v2_with_instance_id_golden_bytes() {
        let id = Uuid::from_bytes([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
        let frame =
            encode_request_frame(&metadata_v12(), 12, 7, Some("c"), Some(id)).expect("encode");
        let expected_header: &[u8] = &[
            0, 3, // api key
            0, 12, // version
            0, 0, 0, 7, // correlation id
            0, 1, b'c', // client id, int16 length even in v2
            1,    // one tagged field
            0,    // tag 0
            16,   // size
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
        ];
        assert_eq!(&frame[4..4 + expected_header.len()], expected_header);
        let parsed = RequestFrame::parse(frame.freeze().slice(4..)).expect("parse");
        assert_eq!(parsed.header_version, 2);
        assert_eq!(parsed.header.instance_id(), Some(id));
        assert_eq!(parsed.decode_body(), Ok(metadata_v12()));
    }

    #[test]
    fn header_v2_without_instance_id_golden_bytes() {
        for absent in [None, Some(Uuid::ZERO)] {
            let frame =
                encode_request_frame(&metadata_v12(), 12, 7, Some("c"), absent).expect("encode");
            let expected_header: &[u8] = &[0, 3, 0, 12, 0, 0, 0, 7, 0, 1, b'c', 0];
            assert_eq!(&frame[4..4 + expected_header.len()], expected_header);
            let parsed = RequestFrame::parse(frame.freeze().slice(4..)).expect("parse");
            assert_eq!(parsed.header.instance_id(), None);
        }
    }

    #[test]
    fn explicit_zero_instance_id_on_the_wire_reads_as_absent() {
        let mut raw = vec![0, 3, 0, 12, 0, 0, 0, 7, 0xff, 0xff, 1, 0, 16];
        raw.extend([0u8; 16]);
        raw.extend([0, 0]); // body: compact null topics? (1 = empty) + tags; not read here
        let parsed = RequestFrame::parse(Bytes::from(raw)).expect("parse");
        assert_eq!(parsed.header.client_id, None);
        assert_eq!(parsed.header.instance_id(), None);
    }

    #[test]
    fn malformed_tag_0_is_an_error_not_a_panic() {
        let raw = vec![0, 3, 0, 12, 0, 0, 0, 7, 0, 0, 1, 0, 3, 1, 2, 3];
        assert!(matches!(
            RequestFrame::parse(Bytes::from(raw)),
            Err(RequestHeaderError::Malformed(DecodeError::Truncated { .. }))
        ));
        let mut raw = vec![0, 3, 0, 12, 0, 0, 0, 7, 0, 0, 1, 0, 17];
        raw.extend([9u8; 17]);
        assert!(matches!(
            RequestFrame::parse(Bytes::from(raw)),
            Err(RequestHeaderError::Malformed(
                DecodeError::TaggedFieldSize {
                    tag: 0,
                    declared: 17,
                    used: 16
                }
            ))
        ));
    }

    #[test]
    fn unknown_tags_in_the_header_are_ignored_and_kept() {
        let raw = vec![0, 3, 0, 12, 0, 0, 0, 7, 0, 0, 1, 9, 2, 0xab, 0xcd];
        let parsed = RequestFrame::parse(Bytes::from(raw)).expect("parse");
        assert_eq!(parsed.header.instance_id(), None);
        assert_eq!(parsed.header.unknown_tagged_fields.len(), 1);
    }

    #[test]
    fn header_version_rule() {
        assert_eq!(request_header_version(ApiKey::Metadata, 8), 1);
        assert_eq!(request_header_version(ApiKey::Metadata, 9), 2);
        assert_eq!(request_header_version(ApiKey::ApiVersions, 2), 1);
        assert_eq!(request_header_version(ApiKey::ApiVersions, 3), 2);
        // A future ApiVersions version is still read with the flexible header.
        assert_eq!(request_header_version(ApiKey::ApiVersions, 9), 2);
        assert_eq!(request_header_version(ApiKey::ConsumerGroupHeartbeat, 0), 2);
        assert_eq!(request_header_version(ApiKey::SaslHandshake, 1), 1);
        assert_eq!(request_header_version(ApiKey::OffsetDelete, 0), 1);
        assert_eq!(response_header_version(ApiKey::ApiVersions, 4), 0);
        assert_eq!(response_header_version(ApiKey::Metadata, 12), 1);
        assert_eq!(response_header_version(ApiKey::Produce, 8), 0);
    }

    #[test]
    fn unknown_api_key_reports_the_correlation_id() {
        let raw = vec![0x7f, 0x00, 0, 0, 0, 0, 0, 42];
        assert_eq!(
            RequestFrame::parse(Bytes::from(raw)).err(),
            Some(RequestHeaderError::UnknownApiKey {
                api_key: 0x7f00,
                correlation_id: Some(42)
            })
        );
    }

    #[test]
    fn chunked_frames_equal_copied_frames_for_every_api_and_version() {
        use crate::testing::Rng;
        let mut checked = 0;
        for &api in ApiKey::ALL {
            let (lo, hi) = api.versions();
            for version in lo..=hi {
                for seed in 0..4u64 {
                    let mut rng = Rng::new(seed << 32 | (api.key() as u64) << 16 | version as u64);
                    let response = Response::random(api, &mut rng, version);
                    let copied = encode_response_frame(&response, version, 7).expect("encode");
                    // A threshold of 1 shares every non-empty bytes/records field, so the random
                    // (short) values exercise the shared path too.
                    for threshold in [1, ChunkedBuf::DEFAULT_THRESHOLD] {
                        let mut buf = ChunkedBuf::new().with_threshold(threshold);
                        encode_response_frame_chunked(&mut buf, &response, version, 7)
                            .expect("encode chunked");
                        assert_eq!(buf.len(), copied.len());
                        let chunks = buf.into_chunks();
                        assert!(chunks.iter().all(|c| !c.is_empty()));
                        assert!(chunks[0].len() >= 4, "size prefix in the first chunk");
                        assert_eq!(chunks.concat(), &copied[..], "{api:?} v{version}");
                    }
                    let chunks =
                        encode_response_frame_chunks(&response, version, 7).expect("encode chunks");
                    assert_eq!(chunks.concat(), &copied[..], "{api:?} v{version}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 500, "{checked}");
    }

    #[test]
    fn large_record_sets_are_shared_not_copied() {
        use crate::generated::FetchResponse;
        use crate::generated::fetch_response::{FetchableTopicResponse, PartitionData};
        let records: Vec<Bytes> = (0..3u8)
            .map(|p| Bytes::from(vec![p; 5000 + usize::from(p)]))
            .collect();
        let response = Response::Fetch(FetchResponse {
            responses: vec![FetchableTopicResponse {
                topic: "t".into(),
                partitions: records
                    .iter()
                    .enumerate()
                    .map(|(i, r)| PartitionData {
                        partition_index: i as i32,
                        records: Some(r.clone()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        });
        for version in [4, 12, 16] {
            let copied = encode_response_frame(&response, version, 9).expect("encode");
            let chunks = encode_response_frame_chunks(&response, version, 9).expect("chunks");
            assert_eq!(chunks.concat(), &copied[..]);
            // prefix+header+fields, records, fields, records, fields, records, then (flexible
            // versions only) the tag counts after the last record set.
            let trailing = usize::from(version >= 12);
            assert_eq!(chunks.len(), 6 + trailing, "v{version}");
            for (i, r) in records.iter().enumerate() {
                assert_eq!(chunks[1 + 2 * i].as_ptr(), r.as_ptr(), "records {i} shared");
            }
            assert_eq!(
                i32::from_be_bytes(chunks[0][..4].try_into().expect("4 bytes")) as usize,
                copied.len() - 4
            );
        }
    }

    #[test]
    fn chunked_buffer_batches_frames_and_chains_them() {
        use crate::codec::ChunkChain;
        let mut buf = ChunkedBuf::new().with_threshold(8);
        let response = Response::ApiVersions(Default::default());
        encode_response_frame_chunked(&mut buf, &response, 3, 1).expect("encode");
        encode_response_frame_chunked(&mut buf, &response, 3, 2).expect("encode");
        let mut expected = encode_response_frame(&response, 3, 1).expect("encode");
        encode_response_frame_into(&mut expected, &response, 3, 2).expect("encode");
        let chunks = buf.take_chunks();
        assert!(buf.is_empty());
        let mut chain = ChunkChain::from(chunks);
        assert_eq!(chain.remaining(), expected.len());
        let mut slices = [std::io::IoSlice::new(&[]); 4];
        assert!(chain.chunks_vectored(&mut slices) >= 1);
        chain.advance(3);
        let rest = chain.copy_to_bytes(chain.remaining());
        assert_eq!(&rest[..], &expected[3..]);
        // The buffer is reusable after taking its chunks.
        encode_response_frame_chunked(&mut buf, &response, 3, 1).expect("encode");
        assert_eq!(buf.into_chunks().concat(), &expected[..expected.len() / 2]);
    }

    #[test]
    fn api_versions_v0_round_trip() {
        let request = Request::ApiVersions(ApiVersionsRequest::default());
        let frame = encode_request_frame(&request, 0, 1, None, None).expect("encode");
        let parsed = RequestFrame::parse(frame.freeze().slice(4..)).expect("parse");
        assert_eq!(parsed.header_version, 1);
        assert_eq!(parsed.decode_body(), Ok(request));
    }
}
