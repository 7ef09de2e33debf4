//! RequestFrame::parse (request header, KIP-1313 tag 0) over arbitrary bytes, then the body.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use skiff_protocol::RequestFrame;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = RequestFrame::parse(Bytes::copy_from_slice(data)) {
        let _ = frame.header.instance_id();
        let _ = frame.decode_body();
    }
});
