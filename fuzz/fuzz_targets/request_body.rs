//! Request::decode: the first 4 bytes pick the API key (modulo the number of APIs) and the
//! version (within the API's range, or one past either end now and then); the rest is the body.
//! A body that decodes must re-encode, and that encoding must decode to the same value.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use skiff_protocol::{ApiKey, Request};

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_first_chunk::<4>() else {
        return;
    };
    let api = ApiKey::ALL[usize::from(u16::from_be_bytes([head[0], head[1]])) % ApiKey::ALL.len()];
    let (lo, hi) = api.versions();
    let span = i32::from(hi) - i32::from(lo) + 3;
    let version =
        (i32::from(lo) - 1 + i32::from(u16::from_be_bytes([head[2], head[3]])) % span) as i16;
    let mut buf = Bytes::copy_from_slice(body);
    if let Ok(value) = Request::decode(api, version, &mut buf) {
        let mut out = BytesMut::new();
        value
            .encode(&mut out, version)
            .expect("a decoded value re-encodes");
        let again = Request::decode(api, version, &mut out.freeze()).expect("re-encoding decodes");
        assert_eq!(again, value);
    }
});
