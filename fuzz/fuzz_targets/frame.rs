//! FrameReader over arbitrary bytes: the first byte picks the maximum frame size and how the
//! stream is chunked; every frame read is then parsed as a request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skiff_protocol::{FrameReader, RequestFrame};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let max = 1usize << (first % 24);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut reader = FrameReader::new(rest, max);
        while let Ok(Some(frame)) = reader.read_frame().await {
            assert!(frame.len() <= max);
            if let Ok(request) = RequestFrame::parse(frame) {
                let _ = request.decode_body();
            }
        }
    });
});
