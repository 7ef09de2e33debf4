//! Every request and response of every API, at every version, survives encode -> decode, and
//! decoding consumes exactly the bytes that encoding wrote.

use bytes::BytesMut;
use skiff_protocol::testing::Rng;
use skiff_protocol::{ApiKey, Request, Response};

const SAMPLES_PER_VERSION: u64 = 40;

#[test]
fn every_request_and_response_round_trips_at_every_version() {
    let mut checked = 0;
    for &api in ApiKey::ALL {
        let (lo, hi) = api.versions();
        for version in lo..=hi {
            for seed in 0..SAMPLES_PER_VERSION {
                let mut rng =
                    Rng::new(seed ^ ((api.key() as u64) << 32) ^ ((version as u64) << 48));
                let request = Request::random(api, &mut rng, version);
                let mut buf = BytesMut::new();
                request
                    .encode(&mut buf, version)
                    .unwrap_or_else(|e| panic!("{api:?} v{version} request encode: {e}"));
                let mut bytes = buf.freeze();
                let decoded = Request::decode(api, version, &mut bytes)
                    .unwrap_or_else(|e| panic!("{api:?} v{version} request decode: {e}"));
                assert!(
                    bytes.is_empty(),
                    "{api:?} v{version}: request bytes left over"
                );
                assert_eq!(decoded, request, "{api:?} v{version} request");

                let response = Response::random(api, &mut rng, version);
                let mut buf = BytesMut::new();
                response
                    .encode(&mut buf, version)
                    .unwrap_or_else(|e| panic!("{api:?} v{version} response encode: {e}"));
                let mut bytes = buf.freeze();
                let decoded = Response::decode(api, version, &mut bytes)
                    .unwrap_or_else(|e| panic!("{api:?} v{version} response decode: {e}"));
                assert!(
                    bytes.is_empty(),
                    "{api:?} v{version}: response bytes left over"
                );
                assert_eq!(decoded, response, "{api:?} v{version} response");
                checked += 1;
            }
        }
    }
    assert!(checked > 5000, "only {checked} samples");
}

#[test]
fn truncated_encodings_fail_cleanly() {
    for &api in ApiKey::ALL {
        let (lo, hi) = api.versions();
        for version in lo..=hi {
            let mut rng = Rng::new(7 + version as u64);
            let request = Request::random(api, &mut rng, version);
            let mut buf = BytesMut::new();
            if request.encode(&mut buf, version).is_err() {
                continue;
            }
            let full = buf.freeze();
            for cut in 0..full.len() {
                let mut partial = full.slice(..cut);
                // Either an error, or (for messages whose tail is optional) a value; never a panic.
                let _ = Request::decode(api, version, &mut partial);
            }
        }
    }
}
