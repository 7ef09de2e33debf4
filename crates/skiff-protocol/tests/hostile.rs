//! Hostile input: lengths and counts that cannot be true, garbage bodies, mutated encodings.
//! Decoding must return an error (or a value that re-encodes), quickly, never panic, and never
//! allocate in proportion to a count it has not checked against the bytes left.
//!
//! Allocation is measured, not guessed: this test binary runs on `cap::Cap`, a counting wrapper
//! around the system allocator (no unsafe code of ours), capped at `ALLOCATION_LIMIT`. A decoder
//! that reserved memory for a hostile count (2^31 elements of 8+ bytes) would fail that
//! allocation and abort the binary. Tests that measure take `SERIAL` so that their counts are
//! not mixed with another test's allocations.

use std::alloc::System;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use cap::Cap;
use skiff_protocol::codec::{read_array, read_i32, read_tagged_fields};
use skiff_protocol::testing::Rng;
use skiff_protocol::{ApiKey, DecodeError, Request, RequestFrame, RequestHeaderError, Response};

/// Far more than any test here legitimately needs; far less than one hostile reservation.
const ALLOCATION_LIMIT: usize = 1 << 30;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, ALLOCATION_LIMIT);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` and returns its result with the bytes it allocated (cumulative, frees not deducted).
/// The count is process-wide and the test harness allocates on its own thread now and then (to
/// start a test, to report one), so `f` runs five times and the smallest count is taken: `f` is
/// deterministic, the harness's allocations are not.
fn allocated_by<T>(f: impl Fn() -> T) -> (T, usize) {
    let mut least = usize::MAX;
    for _ in 0..4 {
        let before = ALLOCATOR.total_allocated();
        drop(f());
        least = least.min(ALLOCATOR.total_allocated() - before);
    }
    let before = ALLOCATOR.total_allocated();
    let value = f();
    least = least.min(ALLOCATOR.total_allocated() - before);
    (value, least)
}

fn decode(api: ApiKey, version: i16, request: bool, body: &Bytes) -> Result<(), DecodeError> {
    let mut buf = body.clone();
    if request {
        Request::decode(api, version, &mut buf).map(drop)
    } else {
        Response::decode(api, version, &mut buf).map(drop)
    }
}

fn every_version() -> impl Iterator<Item = (ApiKey, i16)> {
    ApiKey::ALL.iter().flat_map(|&api| {
        let (lo, hi) = api.versions();
        (lo..=hi).map(move |v| (api, v))
    })
}

fn kind(request: bool) -> &'static str {
    if request { "request" } else { "response" }
}

/// Whether the body of `api` at `version` starts with an array, and whether it is flexible: what
/// the message schemas say, as the generated code records it (so this runs without the schemas).
fn first_field(api: ApiKey, version: i16, request: bool) -> (bool, bool) {
    let (starts_with_array, flexible_since) = if request {
        (
            api.request_starts_with_array(version),
            api.request_flexible_since(),
        )
    } else {
        (
            api.response_starts_with_array(version),
            api.response_flexible_since(),
        )
    };
    (
        starts_with_array,
        flexible_since.is_some_and(|first| version >= first),
    )
}

/// A count of 2^31 - 1 elements: int32 for classic arrays.
const HUGE_COUNT: &[u8] = &[0x7f, 0xff, 0xff, 0xff];
/// A compact count (varint, plus one) of u32::MAX: the largest a 5-byte varint can say.
const HUGE_COMPACT_COUNT: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0x0f];

#[test]
fn metadata_v1_with_a_count_of_2_pow_31_minus_1_is_rejected_without_allocating() {
    let _serial = serial();
    let body = Bytes::from_static(HUGE_COUNT);
    let started = Instant::now();
    let (result, allocated) =
        allocated_by(|| Request::decode(ApiKey::Metadata, 1, &mut body.clone()));
    assert_eq!(
        result,
        Err(DecodeError::ArrayTooLong {
            count: 0x7fff_ffff,
            remaining: 0
        })
    );
    assert!(started.elapsed() < Duration::from_millis(50));
    assert_eq!(
        allocated, 0,
        "rejecting the count allocated {allocated} bytes"
    );
}

#[test]
fn every_body_that_starts_with_an_array_rejects_a_huge_count_up_front() {
    let _serial = serial();
    let (mut arrays, mut max_allocated) = (0, 0);
    let started = Instant::now();
    for (api, version) in every_version() {
        for request in [true, false] {
            let (starts_with_array, flexible) = first_field(api, version, request);
            let (count, expected) = if flexible {
                (HUGE_COMPACT_COUNT, u32::MAX as usize - 1)
            } else {
                (HUGE_COUNT, 0x7fff_ffff)
            };
            for hostile in [count, HUGE_COUNT, HUGE_COMPACT_COUNT] {
                let body = Bytes::from_static(hostile);
                let call = Instant::now();
                let (result, allocated) = allocated_by(|| decode(api, version, request, &body));
                let elapsed = call.elapsed();
                // Bodies that start with something else may legitimately read these bytes as
                // scalars (and leave the rest): only speed and allocation are checked for them.
                assert!(
                    elapsed < Duration::from_millis(50),
                    "{api:?} v{version} {} took {elapsed:?}",
                    kind(request)
                );
                max_allocated = max_allocated.max(allocated);
                if starts_with_array && hostile == count {
                    arrays += 1;
                    assert_eq!(
                        result,
                        Err(DecodeError::ArrayTooLong {
                            count: expected,
                            remaining: 0
                        }),
                        "{api:?} v{version} {}",
                        kind(request)
                    );
                    assert_eq!(
                        allocated,
                        0,
                        "{api:?} v{version} {}: {allocated} bytes allocated",
                        kind(request)
                    );
                }
            }
        }
    }
    println!(
        "{arrays} bodies start with an array; largest allocation for a 4-5 byte hostile body: \
         {max_allocated} bytes; all in {:?}",
        started.elapsed()
    );
    assert!(arrays > 100, "only {arrays} bodies start with an array");
    // A 4-5 byte body can hold a few scalar fields, nothing more.
    assert!(
        max_allocated < 4096,
        "{max_allocated} bytes for a 5-byte body"
    );
}

#[test]
fn a_huge_array_count_after_real_fields_is_bounded_by_the_bytes_left() {
    let _serial = serial();
    // Metadata v1: topics = [1 topic, name length 0x7fff] then nothing: the name is truncated.
    let body = Bytes::from_static(&[0, 0, 0, 1, 0x7f, 0xff]);
    assert!(matches!(
        Request::decode(ApiKey::Metadata, 1, &mut body.clone()),
        Err(DecodeError::Truncated {
            needed: 0x7fff,
            remaining: 0
        })
    ));
    // A count just below the bytes left is read element by element, and the vector grows only as
    // elements decode: 1000 topics announced, 3 present.
    let mut raw = vec![0, 0, 0x03, 0xe8];
    for _ in 0..3 {
        raw.extend([0, 1, b'a']);
    }
    raw.resize(raw.len() + 500, 0xff);
    let body = Bytes::from(raw);
    let (result, allocated) =
        allocated_by(|| Request::decode(ApiKey::Metadata, 1, &mut body.clone()));
    assert!(result.is_err());
    assert!(allocated < 64 * 1024, "{allocated} bytes allocated");
}

#[test]
fn a_tagged_field_count_of_2_pow_31_is_rejected() {
    let _serial = serial();
    let huge: &[u8] = &[0x80, 0x80, 0x80, 0x80, 0x08];
    // At the codec level.
    let mut buf = Bytes::from_static(huge);
    assert_eq!(
        read_tagged_fields(&mut buf, |_, _| Ok(())),
        Err(DecodeError::ArrayTooLong {
            count: 1 << 31,
            remaining: 0
        })
    );
    // In a body: ApiVersions v3 request = software name "", version "", then the tag count.
    let mut raw = vec![1, 1];
    raw.extend(huge);
    let body = Bytes::from(raw);
    let (result, allocated) =
        allocated_by(|| Request::decode(ApiKey::ApiVersions, 3, &mut body.clone()));
    assert_eq!(
        result,
        Err(DecodeError::ArrayTooLong {
            count: 1 << 31,
            remaining: 0
        })
    );
    assert_eq!(allocated, 0);
    // In a v2 request header.
    let mut raw = vec![0, 3, 0, 12, 0, 0, 0, 7, 0xff, 0xff];
    raw.extend(huge);
    assert_eq!(
        RequestFrame::parse(Bytes::from(raw)).err(),
        Some(RequestHeaderError::Malformed(DecodeError::ArrayTooLong {
            count: 1 << 31,
            remaining: 0
        }))
    );
    // At the end of every flexible body: replace the final (empty) top-level tag section.
    let (mut checked, mut exact) = (0, 0);
    for (api, version) in every_version() {
        for request in [true, false] {
            let flexible_since = if request {
                api.request_flexible_since()
            } else {
                api.response_flexible_since()
            };
            if flexible_since.is_none_or(|first| version < first) {
                continue;
            }
            let mut rng = Rng::new(u64::from(api.key() as u16) << 16 | version as u64);
            let encoded = encode_random(api, version, request, &mut rng);
            if encoded.last() != Some(&0) {
                continue;
            }
            let mut raw = encoded[..encoded.len() - 1].to_vec();
            raw.extend(huge);
            let result = decode(api, version, request, &Bytes::from(raw));
            checked += 1;
            assert!(result.is_err(), "{api:?} v{version} {}", kind(request));
            // When the last byte was the top-level tag count (not the end of a tagged value),
            // the error is exactly the count check.
            if result
                == Err(DecodeError::ArrayTooLong {
                    count: 1 << 31,
                    remaining: 0,
                })
            {
                exact += 1;
            }
        }
    }
    assert!(
        checked > 200 && exact * 10 > checked * 9,
        "{exact} of {checked}"
    );
}

#[test]
fn negative_and_oversized_lengths_are_errors() {
    let _serial = serial();
    // SaslAuthenticate v0 request: AuthBytes (bytes, int32 length).
    for (raw, expected) in [
        (
            &[0xff, 0xff, 0xff, 0xfe][..],
            DecodeError::InvalidLength(-2),
        ),
        (
            &[0x80, 0, 0, 0][..],
            DecodeError::InvalidLength(i64::from(i32::MIN)),
        ),
        (&[0xff, 0xff, 0xff, 0xff][..], DecodeError::UnexpectedNull),
        (
            &[0x7f, 0xff, 0xff, 0xff][..],
            DecodeError::Truncated {
                needed: 0x7fff_ffff,
                remaining: 0,
            },
        ),
    ] {
        assert_eq!(
            Request::decode(ApiKey::SaslAuthenticate, 0, &mut Bytes::from_static(raw)),
            Err(expected),
            "{raw:02x?}"
        );
    }
    // FindCoordinator v0 request: Key (string, int16 length).
    for (raw, expected) in [
        (&[0xff, 0xfe][..], DecodeError::InvalidLength(-2)),
        (&[0x80, 0x00][..], DecodeError::InvalidLength(-32768)),
        (&[0xff, 0xff][..], DecodeError::UnexpectedNull),
    ] {
        assert_eq!(
            Request::decode(ApiKey::FindCoordinator, 0, &mut Bytes::from_static(raw)),
            Err(expected),
            "{raw:02x?}"
        );
    }
    // Metadata v1: one topic whose name has length -2.
    assert_eq!(
        Request::decode(
            ApiKey::Metadata,
            1,
            &mut Bytes::from_static(&[0, 0, 0, 1, 0xff, 0xfe])
        ),
        Err(DecodeError::InvalidLength(-2))
    );
    // Negative array count other than -1 (null).
    assert_eq!(
        Request::decode(
            ApiKey::Metadata,
            1,
            &mut Bytes::from_static(&[0xff, 0xff, 0xff, 0xfe])
        ),
        Err(DecodeError::InvalidLength(-2))
    );
}

#[test]
fn compact_lengths_of_u32_max_are_errors_without_allocation() {
    let _serial = serial();
    // SaslAuthenticate v2 request: AuthBytes as compact bytes, then tags.
    let (result, allocated) = allocated_by(|| {
        Request::decode(
            ApiKey::SaslAuthenticate,
            2,
            &mut Bytes::from_static(HUGE_COMPACT_COUNT),
        )
    });
    assert_eq!(
        result,
        Err(DecodeError::Truncated {
            needed: u32::MAX as usize - 1,
            remaining: 0
        })
    );
    assert_eq!(allocated, 0);
    // FindCoordinator v3 request: Key as compact string.
    assert_eq!(
        Request::decode(
            ApiKey::FindCoordinator,
            3,
            &mut Bytes::from_static(HUGE_COMPACT_COUNT)
        ),
        Err(DecodeError::Truncated {
            needed: u32::MAX as usize - 1,
            remaining: 0
        })
    );
    // A compact array of u32::MAX - 1 elements.
    let mut buf = Bytes::from_static(HUGE_COMPACT_COUNT);
    assert_eq!(
        read_array(&mut buf, true, read_i32),
        Err(DecodeError::ArrayTooLong {
            count: u32::MAX as usize - 1,
            remaining: 0
        })
    );
    // A varint longer than 5 bytes.
    assert_eq!(
        Request::decode(
            ApiKey::FindCoordinator,
            3,
            &mut Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01])
        ),
        Err(DecodeError::VarintTooLong(5))
    );
}

fn encode_random(api: ApiKey, version: i16, request: bool, rng: &mut Rng) -> Bytes {
    let mut buf = BytesMut::new();
    if request {
        Request::random(api, rng, version).encode(&mut buf, version)
    } else {
        Response::random(api, rng, version).encode(&mut buf, version)
    }
    .expect("encode");
    buf.freeze()
}

/// If `body` decodes, the value re-encodes, and that encoding decodes to the same value.
fn decode_is_consistent(api: ApiKey, version: i16, request: bool, body: &Bytes) {
    let what = || format!("{api:?} v{version} {} {:02x?}", kind(request), &body[..]);
    let mut buf = body.clone();
    if request {
        if let Ok(value) = Request::decode(api, version, &mut buf) {
            let mut out = BytesMut::new();
            value
                .encode(&mut out, version)
                .unwrap_or_else(|e| panic!("{}: decoded but does not re-encode: {e}", what()));
            let again = Request::decode(api, version, &mut out.freeze());
            assert_eq!(again.as_ref(), Ok(&value), "{}", what());
        }
    } else if let Ok(value) = Response::decode(api, version, &mut buf) {
        let mut out = BytesMut::new();
        value
            .encode(&mut out, version)
            .unwrap_or_else(|e| panic!("{}: decoded but does not re-encode: {e}", what()));
        let again = Response::decode(api, version, &mut out.freeze());
        assert_eq!(again.as_ref(), Ok(&value), "{}", what());
    }
}

#[test]
fn random_garbage_bodies_never_panic() {
    let _serial = serial();
    let started = Instant::now();
    let mut worst_ratio = 0.0f64;
    for (api, version) in every_version() {
        let mut rng = Rng::new(0xbad ^ u64::from(api.key() as u16) << 20 ^ version as u64);
        for _ in 0..24 {
            let len = rng.below(160) as usize;
            let body: Bytes = (0..len)
                .map(|_| rng.next_u64() as u8)
                .collect::<Vec<_>>()
                .into();
            for request in [true, false] {
                let ((), allocated) =
                    allocated_by(|| decode_is_consistent(api, version, request, &body));
                worst_ratio = worst_ratio.max(allocated as f64 / (len.max(1)) as f64);
            }
        }
    }
    println!(
        "garbage: worst allocation {worst_ratio:.0} bytes per input byte (decode + re-encode), {:?}",
        started.elapsed()
    );
    // Decoding allocates as it reads (a struct per element that is really there), never ahead.
    assert!(worst_ratio < 2048.0, "{worst_ratio} bytes per input byte");
}

fn mutate(input: &Bytes, rng: &mut Rng) -> Bytes {
    let mut bytes = input.to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(bytes.len() as u64 + 1) as usize;
        match rng.below(4) {
            0 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
            1 if at < bytes.len() => bytes[at] = rng.next_u64() as u8,
            2 => bytes.insert(at, rng.next_u64() as u8),
            3 if at < bytes.len() => {
                bytes.remove(at);
            }
            _ => {}
        }
    }
    Bytes::from(bytes)
}

#[test]
fn mutated_valid_encodings_never_panic() {
    let _serial = serial();
    let mut inputs = 0;
    let mut worst_ratio = 0.0f64;
    for (api, version) in every_version() {
        for request in [true, false] {
            let mut rng = Rng::new(0x5eed ^ u64::from(api.key() as u16) << 20 ^ version as u64);
            for _ in 0..3 {
                let original = encode_random(api, version, request, &mut rng);
                for _ in 0..24 {
                    let input = mutate(&original, &mut rng);
                    let ((), allocated) =
                        allocated_by(|| decode_is_consistent(api, version, request, &input));
                    worst_ratio = worst_ratio.max(allocated as f64 / input.len().max(1) as f64);
                    inputs += 1;
                }
            }
        }
    }
    println!("mutated: {inputs} inputs, worst allocation {worst_ratio:.0} bytes per input byte");
    assert!(worst_ratio < 2048.0, "{worst_ratio} bytes per input byte");
}

#[test]
fn frame_and_header_parsing_of_garbage_never_panics() {
    let _serial = serial();
    let mut rng = Rng::new(42);
    for _ in 0..20_000 {
        let len = rng.below(64) as usize;
        let mut raw: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        // Half the time, a real API key and version so the header and body get read.
        if len >= 4 && rng.bool() {
            let api = ApiKey::ALL[rng.below(ApiKey::ALL.len() as u64) as usize];
            let (lo, hi) = api.versions();
            let version = lo + rng.below((hi - lo + 1).max(1) as u64) as i16;
            raw[..2].copy_from_slice(&api.key().to_be_bytes());
            raw[2..4].copy_from_slice(&version.to_be_bytes());
        }
        if let Ok(frame) = RequestFrame::parse(Bytes::from(raw)) {
            let _ = frame.decode_body();
        }
    }
}
