//! Differential tests: Skiff's generated codec against an independent implementation, the
//! `kafka-protocol` crate (0.18), for every API key and version both of them know.
//!
//! * Skiff -> oracle: a random Skiff message is encoded by Skiff, decoded by kafka-protocol (which
//!   must consume every byte), re-encoded by kafka-protocol, and the two encodings must be
//!   byte-identical. Skiff then decodes kafka-protocol's bytes back to the original value.
//! * Oracle -> Skiff: mutated encodings (bytes flipped, inserted, deleted) are decoded by both;
//!   whenever both accept the input, both must consume the same number of bytes and their
//!   re-encodings must be byte-identical, i.e. they read the same field values from the same
//!   bytes, including non-canonical ones (overlong varints, booleans other than 0/1).
//! * Request headers: kafka-protocol (which predates KIP-1313) reads a Skiff v2 header carrying
//!   the client instance ID in tag 0 as an unknown tagged field and writes it back unchanged, and
//!   Skiff reads kafka-protocol's headers, with or without tag 0.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey as KpApiKey, RequestHeader as KpRequestHeader, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::{Decodable as _, Encodable as _, StrBytes};
use skiff_protocol::header::encode_request_frame;
use skiff_protocol::testing::Rng;
use skiff_protocol::{ApiKey, Request, RequestFrame, Response, Uuid};

/// Random messages per (API, version, request/response) in the Skiff -> oracle direction.
const SAMPLES_PER_VERSION: u64 = 128;
/// Messages per (API, version, request/response) that are mutated for the oracle -> Skiff check,
/// and mutations of each.
const MUTATED_SAMPLES: u64 = 4;
const MUTATIONS_PER_SAMPLE: u64 = 16;

/// (API key, version, is_request) cases where the two codecs legitimately disagree, with the
/// reason, checked against Kafka's message schemas (the generator's input).
const KNOWN_DIFFERENCES: &[(i16, i16, bool, &str)] = &[];

fn known_difference(api: ApiKey, version: i16, request: bool) -> bool {
    KNOWN_DIFFERENCES
        .iter()
        .any(|&(k, v, r, _)| k == api.key() && v == version && r == request)
}

/// The versions of `api` both codecs know, or `None` when kafka-protocol does not know the API.
fn common_versions(api: ApiKey) -> Option<(KpApiKey, i16, i16)> {
    let kp = KpApiKey::try_from(api.key()).ok()?;
    let theirs = kp.valid_versions();
    let (lo, hi) = api.versions();
    let (lo, hi) = (lo.max(theirs.min), hi.min(theirs.max));
    (lo <= hi).then_some((kp, lo, hi))
}

/// Whether kafka-protocol's message type knows `version`. Its `ApiKey::valid_versions` is not
/// always what its message types accept (0.18: OffsetCommit v10, OffsetFetch v10 and
/// InitProducerId v6 requests are listed but rejected), so ask the type: decoding nothing fails
/// with "not supported" before it reads a byte when the version is unknown.
fn oracle_knows(kp: KpApiKey, version: i16, request: bool) -> bool {
    let error = if request {
        RequestKind::decode(kp, &mut Bytes::new(), version).err()
    } else {
        ResponseKind::decode(kp, &mut Bytes::new(), version).err()
    };
    !error.is_some_and(|e| format!("{e:#}").contains("version not supported"))
}

fn seed(api: ApiKey, version: i16, sample: u64, request: bool) -> u64 {
    sample ^ ((api.key() as u64) << 32) ^ ((version as u64) << 48) ^ (u64::from(request) << 62)
}

/// Encodes a random Skiff message of `api`/`version`.
fn skiff_random(api: ApiKey, version: i16, request: bool, rng: &mut Rng) -> Bytes {
    let mut buf = BytesMut::new();
    if request {
        Request::random(api, rng, version).encode(&mut buf, version)
    } else {
        Response::random(api, rng, version).encode(&mut buf, version)
    }
    .unwrap_or_else(|e| panic!("{api:?} v{version} Skiff encode: {e}"));
    buf.freeze()
}

/// Skiff decode + re-encode: (bytes consumed, re-encoding).
fn skiff_reencode(
    api: ApiKey,
    version: i16,
    request: bool,
    input: &Bytes,
) -> Result<(usize, Bytes), String> {
    let mut buf = input.clone();
    let mut out = BytesMut::new();
    if request {
        let decoded = Request::decode(api, version, &mut buf).map_err(|e| e.to_string())?;
        decoded.encode(&mut out, version)
    } else {
        let decoded = Response::decode(api, version, &mut buf).map_err(|e| e.to_string())?;
        decoded.encode(&mut out, version)
    }
    .map_err(|e| format!("Skiff re-encode: {e}"))?;
    Ok((input.len() - buf.len(), out.freeze()))
}

/// kafka-protocol decode + re-encode: (bytes consumed, re-encoding).
fn oracle_reencode(
    api: KpApiKey,
    version: i16,
    request: bool,
    input: &Bytes,
) -> Result<(usize, Bytes), String> {
    let mut buf = input.clone();
    let mut out = BytesMut::new();
    if request {
        let decoded = RequestKind::decode(api, &mut buf, version).map_err(|e| format!("{e:#}"))?;
        decoded.encode(&mut out, version)
    } else {
        let decoded = ResponseKind::decode(api, &mut buf, version).map_err(|e| format!("{e:#}"))?;
        decoded.encode(&mut out, version)
    }
    .map_err(|e| format!("kafka-protocol re-encode: {e:#}"))?;
    Ok((input.len() - buf.len(), out.freeze()))
}

/// Skiff decode of `input` must give the same value as Skiff decode of `original`.
fn skiff_values_equal(
    api: ApiKey,
    version: i16,
    request: bool,
    original: &Bytes,
    input: &Bytes,
) -> bool {
    if request {
        let a = Request::decode(api, version, &mut original.clone());
        let b = Request::decode(api, version, &mut input.clone());
        a.is_ok() && a == b
    } else {
        let a = Response::decode(api, version, &mut original.clone());
        let b = Response::decode(api, version, &mut input.clone());
        a.is_ok() && a == b
    }
}

fn kind(request: bool) -> &'static str {
    if request { "request" } else { "response" }
}

#[test]
fn skiff_encodings_are_read_and_rewritten_identically_by_kafka_protocol() {
    let mut failures = Vec::new();
    let mut checked = 0u64;
    let mut apis = 0;
    for &api in ApiKey::ALL {
        let Some((kp, lo, hi)) = common_versions(api) else {
            continue;
        };
        apis += 1;
        for version in lo..=hi {
            for request in [true, false] {
                if known_difference(api, version, request) || !oracle_knows(kp, version, request) {
                    continue;
                }
                for sample in 0..SAMPLES_PER_VERSION {
                    let mut rng = Rng::new(seed(api, version, sample, request));
                    let ours = skiff_random(api, version, request, &mut rng);
                    let problem = match oracle_reencode(kp, version, request, &ours) {
                        Err(e) => Some(format!("kafka-protocol rejects it: {e}")),
                        Ok((used, _)) if used != ours.len() => Some(format!(
                            "kafka-protocol read {used} of {} bytes",
                            ours.len()
                        )),
                        Ok((_, theirs)) if theirs != ours => Some(format!(
                            "re-encoding differs:\n  skiff {:02x?}\n  kp    {:02x?}",
                            &ours[..],
                            &theirs[..]
                        )),
                        Ok((_, theirs)) => {
                            (!skiff_values_equal(api, version, request, &ours, &theirs))
                                .then(|| "Skiff reads kafka-protocol's bytes differently".into())
                        }
                    };
                    checked += 1;
                    if let Some(problem) = problem {
                        failures.push(format!(
                            "{api:?} v{version} {} (sample {sample}): {problem}",
                            kind(request)
                        ));
                        break;
                    }
                }
            }
        }
    }
    assert!(apis >= 80, "only {apis} APIs in common");
    assert!(checked > 50_000, "only {checked} messages checked");
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A mutation of `input`: a flipped bit, a replaced, inserted or deleted byte, or a truncation.
fn mutate(input: &Bytes, rng: &mut Rng) -> Bytes {
    let mut bytes = input.to_vec();
    let edits = 1 + rng.below(3);
    for _ in 0..edits {
        let at = rng.below(bytes.len() as u64 + 1) as usize;
        match rng.below(5) {
            0 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
            1 if at < bytes.len() => bytes[at] = rng.next_u64() as u8,
            2 => bytes.insert(at, rng.next_u64() as u8),
            3 if at < bytes.len() => {
                bytes.remove(at);
            }
            4 => bytes.truncate(at),
            _ => {}
        }
    }
    Bytes::from(bytes)
}

/// One mutated input for the oracle -> Skiff check.
struct Case {
    api: ApiKey,
    version: i16,
    request: bool,
    input: Bytes,
}

/// What kafka-protocol made of one input, as reported by the worker process.
#[derive(Debug, Clone, PartialEq)]
enum OracleOutcome {
    Accepted(usize, Bytes),
    Rejected,
    /// The worker process died on this input (kafka-protocol aborts on a failed allocation).
    Aborted,
}

const WORKER_ENV: &str = "SKIFF_KP_ORACLE_INPUT";
const WORKER_START_ENV: &str = "SKIFF_KP_ORACLE_START";
const WORKER_OUTPUT_ENV: &str = "SKIFF_KP_ORACLE_OUTPUT";

fn write_cases(cases: &[Case]) -> Vec<u8> {
    let mut out = Vec::new();
    for case in cases {
        out.extend(case.api.key().to_be_bytes());
        out.extend(case.version.to_be_bytes());
        out.push(u8::from(case.request));
        out.extend((case.input.len() as u32).to_be_bytes());
        out.extend(&case.input[..]);
    }
    out
}

fn read_cases(mut data: &[u8]) -> Vec<(i16, i16, bool, Bytes)> {
    let mut cases = Vec::new();
    while !data.is_empty() {
        let api = i16::from_be_bytes([data[0], data[1]]);
        let version = i16::from_be_bytes([data[2], data[3]]);
        let request = data[4] == 1;
        let len = u32::from_be_bytes([data[5], data[6], data[7], data[8]]) as usize;
        cases.push((
            api,
            version,
            request,
            Bytes::copy_from_slice(&data[9..9 + len]),
        ));
        data = &data[9 + len..];
    }
    cases
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Bytes {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex"))
        .collect::<Vec<u8>>()
        .into()
}

/// Not a test of its own: the child process that decodes inputs with kafka-protocol, so that
/// kafka-protocol's allocation aborts on hostile counts cannot take the test binary down.
/// Appends `<index> OK <used> <hex>` or `<index> ERR` per input to the output file.
#[test]
#[ignore = "worker process of whenever_both_accept_an_input_they_read_the_same_values"]
fn kafka_protocol_oracle_worker() {
    let Ok(path) = std::env::var(WORKER_ENV) else {
        return;
    };
    let start: usize = std::env::var(WORKER_START_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let data = std::fs::read(path).expect("read worker input");
    let output = std::env::var(WORKER_OUTPUT_ENV).expect("worker output path");
    let mut out = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(output)
        .expect("open worker output");
    for (index, (api, version, request, input)) in
        read_cases(&data).into_iter().enumerate().skip(start)
    {
        let kp = KpApiKey::try_from(api).expect("known key");
        let result = std::panic::catch_unwind(|| oracle_reencode(kp, version, request, &input));
        let line = match result {
            Ok(Ok((used, bytes))) => format!("{index} OK {used} {}\n", hex(&bytes)),
            _ => format!("{index} ERR\n"),
        };
        std::io::Write::write_all(&mut out, line.as_bytes()).expect("write");
        std::io::Write::flush(&mut out).expect("flush");
    }
}

/// Runs kafka-protocol over `cases` in child processes, restarting after each abort.
fn oracle_outcomes(cases: &[Case]) -> Vec<OracleOutcome> {
    let dir = std::env::temp_dir().join(format!("skiff-differential-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("cases.bin");
    let results = dir.join("results.txt");
    std::fs::write(&path, write_cases(cases)).expect("write cases");
    let exe = std::env::current_exe().expect("current exe");
    let mut outcomes: Vec<Option<OracleOutcome>> = vec![None; cases.len()];
    let mut start = 0;
    while start < cases.len() {
        let _ = std::fs::remove_file(&results);
        let status = std::process::Command::new(&exe)
            .args([
                "--exact",
                "kafka_protocol_oracle_worker",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WORKER_ENV, &path)
            .env(WORKER_START_ENV, start.to_string())
            .env(WORKER_OUTPUT_ENV, &results)
            .env("RUST_BACKTRACE", "0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run worker");
        let text = std::fs::read_to_string(&results).unwrap_or_default();
        let mut next = start;
        for line in text.lines() {
            let mut parts = line.split(' ');
            let index: usize = parts.next().and_then(|i| i.parse().ok()).expect("index");
            outcomes[index] = Some(match parts.next() {
                Some("OK") => {
                    let used = parts.next().and_then(|u| u.parse().ok()).expect("used");
                    OracleOutcome::Accepted(used, unhex(parts.next().unwrap_or("")))
                }
                _ => OracleOutcome::Rejected,
            });
            next = index + 1;
        }
        if next < cases.len() {
            // The worker died on input `next`.
            assert!(!status.success(), "worker stopped early at {next}");
            outcomes[next] = Some(OracleOutcome::Aborted);
            next += 1;
        }
        start = next;
    }
    let _ = std::fs::remove_dir_all(&dir);
    outcomes
        .into_iter()
        .map(|o| o.expect("every case has an outcome"))
        .collect()
}

#[test]
fn whenever_both_accept_an_input_they_read_the_same_values() {
    let mut cases = Vec::new();
    let mut hostile_counts = 0u64;
    for &api in ApiKey::ALL {
        let Some((kp, lo, hi)) = common_versions(api) else {
            continue;
        };
        for version in lo..=hi {
            for request in [true, false] {
                if known_difference(api, version, request) || !oracle_knows(kp, version, request) {
                    continue;
                }
                for sample in 0..MUTATED_SAMPLES {
                    let mut rng = Rng::new(seed(api, version, sample, request) ^ 0x5a5a);
                    let original = skiff_random(api, version, request, &mut rng);
                    for _ in 0..MUTATIONS_PER_SAMPLE {
                        let input = mutate(&original, &mut rng);
                        // A count Skiff rejects up front makes kafka-protocol reserve memory for
                        // it (and abort): both reject it; leave it out to keep restarts rare.
                        if matches!(skiff_reencode(api, version, request, &input),
                            Err(e) if e.starts_with("array of"))
                        {
                            hostile_counts += 1;
                            continue;
                        }
                        cases.push(Case {
                            api,
                            version,
                            request,
                            input,
                        });
                    }
                }
            }
        }
    }
    let started = std::time::Instant::now();
    let theirs = oracle_outcomes(&cases);
    println!("kafka-protocol worker: {:?}", started.elapsed());

    let mut failures = Vec::new();
    let mut asymmetric = Vec::new();
    let (mut both, mut only_skiff, mut only_oracle, mut neither, mut aborted) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for (case, theirs) in cases.iter().zip(theirs) {
        let Case {
            api,
            version,
            request,
            input,
        } = case;
        let (api, version, request) = (*api, *version, *request);
        let ours = skiff_reencode(api, version, request, input);
        let what = format!("{api:?} v{version} {} {:02x?}", kind(request), &input[..]);
        match (ours, theirs) {
            (Ok(ours), OracleOutcome::Accepted(used, bytes)) => {
                both += 1;
                if ours != (used, bytes.clone()) {
                    failures.push(format!(
                        "{what}\n  skiff read {} bytes, wrote {:02x?}\n  kp    read {used} bytes, wrote {:02x?}",
                        ours.0,
                        &ours.1[..],
                        &bytes[..]
                    ));
                }
            }
            (Ok(_), OracleOutcome::Rejected) => {
                only_skiff += 1;
                asymmetric.push(format!("only Skiff accepts {what}"));
            }
            (Ok(_), OracleOutcome::Aborted) => {
                aborted += 1;
                failures.push(format!("Skiff accepts what aborts kafka-protocol: {what}"));
            }
            (Err(e), OracleOutcome::Accepted(..)) => {
                only_oracle += 1;
                asymmetric.push(format!("only kafka-protocol accepts {what}: Skiff: {e}"));
            }
            (Err(_), OracleOutcome::Rejected) => neither += 1,
            (Err(_), OracleOutcome::Aborted) => aborted += 1,
        }
    }
    println!(
        "{} mutated inputs: both accept {both}, only Skiff {only_skiff}, only kafka-protocol \
         {only_oracle}, neither {neither}, kafka-protocol aborted (Skiff: error) {aborted}, \
         array count Skiff rejects up front (not given to kafka-protocol) {hostile_counts}",
        cases.len()
    );
    for line in asymmetric.iter().take(60) {
        println!("{line}");
    }
    assert!(both > 1000, "only {both} inputs accepted by both");
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

const INSTANCE_ID: [u8; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];

/// The request header part of a Skiff frame (size prefix and body stripped).
fn skiff_header_bytes(instance_id: Option<Uuid>, version: i16) -> (Bytes, usize) {
    let request = Request::Metadata(Default::default());
    let frame = encode_request_frame(&request, version, 7, Some("client-1"), instance_id)
        .expect("encode")
        .freeze();
    let mut body = BytesMut::new();
    request.encode(&mut body, version).expect("encode body");
    let header = frame.slice(4..frame.len() - body.len());
    (header, body.len())
}

#[test]
fn kafka_protocol_reads_a_skiff_v2_header_with_tag_0_as_an_unknown_tagged_field() {
    let id = Uuid::from_bytes(INSTANCE_ID);
    let (header, _) = skiff_header_bytes(Some(id), 12);
    let mut buf = header.clone();
    let theirs = KpRequestHeader::decode(&mut buf, 2).expect("kafka-protocol decode");
    assert!(buf.is_empty(), "kafka-protocol left bytes of the header");
    assert_eq!(theirs.request_api_key, 3);
    assert_eq!(theirs.request_api_version, 12);
    assert_eq!(theirs.correlation_id, 7);
    assert_eq!(theirs.client_id.as_deref(), Some("client-1"));
    assert_eq!(theirs.unknown_tagged_fields.len(), 1);
    assert_eq!(&theirs.unknown_tagged_fields[&0][..], &INSTANCE_ID[..]);
    // Re-encoded by kafka-protocol, the unknown field survives byte for byte.
    let mut out = BytesMut::new();
    theirs.encode(&mut out, 2).expect("kafka-protocol encode");
    assert_eq!(&out[..], &header[..]);

    // Without an instance ID (or with the zero one) the tag section is empty for both.
    for absent in [None, Some(Uuid::ZERO)] {
        let (header, _) = skiff_header_bytes(absent, 12);
        let theirs = KpRequestHeader::decode(&mut header.clone(), 2).expect("decode");
        assert!(theirs.unknown_tagged_fields.is_empty());
        let mut out = BytesMut::new();
        theirs.encode(&mut out, 2).expect("encode");
        assert_eq!(&out[..], &header[..]);
    }

    // Header v1 (Metadata v8 is not flexible): identical for both.
    let (header, _) = skiff_header_bytes(Some(id), 8);
    let theirs = KpRequestHeader::decode(&mut header.clone(), 1).expect("decode v1");
    let mut out = BytesMut::new();
    theirs.encode(&mut out, 1).expect("encode v1");
    assert_eq!(&out[..], &header[..]);
}

fn kp_header(version: i16, tags: &[(i32, &[u8])]) -> Bytes {
    let mut header = KpRequestHeader::default()
        .with_request_api_key(3)
        .with_request_api_version(if version == 2 { 12 } else { 8 })
        .with_correlation_id(99)
        .with_client_id(Some(StrBytes::from_static_str("kp")));
    for &(tag, data) in tags {
        header
            .unknown_tagged_fields
            .insert(tag, Bytes::copy_from_slice(data));
    }
    let mut out = BytesMut::new();
    header.encode(&mut out, version).expect("encode");
    out.freeze()
}

#[test]
fn skiff_reads_kafka_protocol_headers_with_and_without_tag_0() {
    // v2 carrying tag 0 (as a KIP-1313 client would write it) and an unknown tag 5.
    let header = kp_header(2, &[(0, &INSTANCE_ID), (5, &[0xab])]);
    let parsed = RequestFrame::parse(header.clone()).expect("parse");
    assert_eq!(parsed.header_version, 2);
    assert_eq!(parsed.correlation_id(), 99);
    assert_eq!(parsed.header.client_id.as_deref(), Some("kp"));
    assert_eq!(
        parsed.header.instance_id(),
        Some(Uuid::from_bytes(INSTANCE_ID))
    );
    assert_eq!(parsed.header.unknown_tagged_fields.len(), 1);
    assert_eq!(parsed.header.unknown_tagged_fields[0].tag, 5);
    assert!(parsed.body.is_empty());
    // Skiff writes it back byte for byte.
    let mut out = BytesMut::new();
    skiff_protocol::Encodable::encode(&parsed.header, &mut out, 2).expect("encode");
    assert_eq!(&out[..], &header[..]);

    // v2 without tags.
    let parsed = RequestFrame::parse(kp_header(2, &[])).expect("parse");
    assert_eq!(parsed.header.instance_id(), None);
    assert!(parsed.header.unknown_tagged_fields.is_empty());

    // v2 with an explicit zero UUID in tag 0: absent for Skiff.
    let parsed = RequestFrame::parse(kp_header(2, &[(0, &[0; 16])])).expect("parse");
    assert_eq!(parsed.header.instance_id(), None);

    // v2 with a tag 0 of the wrong size is malformed for Skiff (kafka-protocol keeps any bytes).
    assert!(RequestFrame::parse(kp_header(2, &[(0, &[1, 2, 3])])).is_err());

    // v1.
    let header = kp_header(1, &[]);
    let parsed = RequestFrame::parse(header.clone()).expect("parse v1");
    assert_eq!(parsed.header_version, 1);
    assert_eq!(parsed.version(), 8);
    let mut out = BytesMut::new();
    skiff_protocol::Encodable::encode(&parsed.header, &mut out, 1).expect("encode");
    assert_eq!(&out[..], &header[..]);
}
