//! Property tests: (API, version, seed) drawn by proptest, messages built by the generated
//! `random` constructors; and arbitrary bytes through the request-frame path.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use skiff_protocol::testing::Rng;
use skiff_protocol::{ApiKey, Request, RequestFrame, Response};

/// An (API, version) the codec supports, and a seed.
fn api_version_seed() -> impl Strategy<Value = (ApiKey, i16, u64)> {
    let supported: Vec<(ApiKey, i16)> = ApiKey::ALL
        .iter()
        .flat_map(|&api| {
            let (lo, hi) = api.versions();
            (lo..=hi).map(move |v| (api, v))
        })
        .collect();
    (proptest::sample::select(supported), any::<u64>()).prop_map(|((api, v), seed)| (api, v, seed))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn requests_round_trip((api, version, seed) in api_version_seed()) {
        let request = Request::random(api, &mut Rng::new(seed), version);
        let mut buf = BytesMut::new();
        request.encode(&mut buf, version).expect("encode");
        let mut bytes = buf.freeze();
        let decoded = Request::decode(api, version, &mut bytes).expect("decode");
        prop_assert!(bytes.is_empty(), "{:?} v{}: bytes left over", api, version);
        prop_assert_eq!(decoded, request);
    }

    #[test]
    fn responses_round_trip((api, version, seed) in api_version_seed()) {
        let response = Response::random(api, &mut Rng::new(seed), version);
        let mut buf = BytesMut::new();
        response.encode(&mut buf, version).expect("encode");
        let mut bytes = buf.freeze();
        let decoded = Response::decode(api, version, &mut bytes).expect("decode");
        prop_assert!(bytes.is_empty(), "{:?} v{}: bytes left over", api, version);
        prop_assert_eq!(decoded, response);
    }

    /// Arbitrary bytes: header parse and body decode return, never panic.
    #[test]
    fn arbitrary_frames_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(frame) = RequestFrame::parse(Bytes::from(raw)) {
            let _ = frame.decode_body();
        }
    }

    /// Arbitrary bodies behind a real API key and version, so the body decoder is reached.
    #[test]
    fn arbitrary_bodies_never_panic(
        (api, version, _seed) in api_version_seed(),
        body in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut raw = Vec::with_capacity(body.len() + 10);
        raw.extend(api.key().to_be_bytes());
        raw.extend(version.to_be_bytes());
        raw.extend(7i32.to_be_bytes());
        raw.extend([0xff, 0xff]); // null client ID
        if api.request_header_version(version) >= 2 {
            raw.push(0); // no tagged fields
        }
        raw.extend(&body);
        let frame = RequestFrame::parse(Bytes::from(raw)).expect("a well-formed header");
        prop_assert_eq!(frame.body.len(), body.len());
        let _ = frame.decode_body();
        let _ = Response::decode(api, version, &mut Bytes::from(body));
    }
}
