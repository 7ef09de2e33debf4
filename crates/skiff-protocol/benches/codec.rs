//! Decode + encode throughput, Skiff against the `kafka-protocol` crate, on the SAME input bytes:
//! each iteration decodes the message from one shared buffer and encodes the decoded value into
//! a reused output buffer.
//!
//! `cargo bench -p skiff-protocol --bench codec -- --quick` runs the criterion groups, then prints
//! a ratio table (`bench/codec-ratio`) from its own timing: the median of 15 batches per codec,
//! each batch about 20 ms, for decode + encode, decode alone and encode alone; then a second
//! table (`bench/codec-zero-copy`) for the record-carrying cases with Skiff's zero-copy encode
//! (`ChunkedBuf`: record sets shared, not copied) against kafka-protocol's copying encode.
//!
//! `SKIFF_BENCH_LOOP=<case>:<mode>:<iterations>` (mode: `skiff`, `kp`, `skiff-dec`, `kp-dec`,
//! `skiff-enc`, `kp-enc`, `skiff-chunked`, `skiff-enc-chunked`) runs only that loop and exits:
//! for instruction counts under `valgrind --tool=callgrind`, which are stable on a loaded machine.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput};
use kafka_protocol::messages::{ApiKey as KpApiKey, RequestKind, ResponseKind};
use skiff_protocol::codec::ChunkedBuf;
use skiff_protocol::generated::consumer_group_heartbeat_request::TopicPartitions as CghRequestTopic;
use skiff_protocol::generated::consumer_group_heartbeat_response::{
    Assignment, TopicPartitions as CghResponseTopic,
};
use skiff_protocol::generated::fetch_response::{FetchableTopicResponse, PartitionData};
use skiff_protocol::generated::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use skiff_protocol::generated::produce_request::{PartitionProduceData, TopicProduceData};
use skiff_protocol::generated::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, FetchResponse, MetadataResponse,
    ProduceRequest,
};
use skiff_protocol::header::encode_response_frame_chunks;
use skiff_protocol::{ApiKey, Request, Response, Uuid};

const RECORD_SET: usize = 16 * 1024;

/// One benchmark input: a message encoded by Skiff at `version`.
struct Case {
    name: String,
    api: ApiKey,
    version: i16,
    request: bool,
    bytes: Bytes,
}

fn record_set(partition: i32) -> Bytes {
    (0..RECORD_SET)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(partition as u32) as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

fn topic_id(i: u64) -> Uuid {
    Uuid::from_halves(0x1234_5678_9abc_def0 ^ i, 0x0fed_cba9_8765_4321 ^ (i << 7))
}

fn produce(version: i16) -> Request {
    Request::Produce(ProduceRequest {
        transactional_id: None,
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: "bench-topic".into(),
            topic_id: if version >= 13 {
                topic_id(1)
            } else {
                Uuid::ZERO
            },
            partition_data: (0..3)
                .map(|p| PartitionProduceData {
                    index: p,
                    records: Some(record_set(p)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    })
}

fn fetch(version: i16) -> Response {
    Response::Fetch(FetchResponse {
        throttle_time_ms: 0,
        error_code: 0,
        session_id: 17,
        responses: vec![FetchableTopicResponse {
            topic: if version < 13 {
                "bench-topic".into()
            } else {
                "".into()
            },
            topic_id: if version >= 13 {
                topic_id(1)
            } else {
                Uuid::ZERO
            },
            partitions: (0..3)
                .map(|p| PartitionData {
                    partition_index: p,
                    high_watermark: 1_000_000 + i64::from(p),
                    last_stable_offset: 1_000_000,
                    log_start_offset: 0,
                    records: Some(record_set(p)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    })
}

fn metadata() -> Response {
    Response::Metadata(MetadataResponse {
        throttle_time_ms: 0,
        brokers: (0..3)
            .map(|b| MetadataResponseBroker {
                node_id: b,
                host: format!("broker-{b}.example.internal").into(),
                port: 9092,
                rack: Some(format!("rack-{b}").into()),
                ..Default::default()
            })
            .collect(),
        cluster_id: Some("skiff-bench-cluster".into()),
        controller_id: 0,
        topics: (0..50)
            .map(|t| MetadataResponseTopic {
                error_code: 0,
                name: Some(format!("orders.events.topic-{t:03}").into()),
                topic_id: topic_id(t),
                is_internal: false,
                partitions: (0..6)
                    .map(|p| MetadataResponsePartition {
                        error_code: 0,
                        partition_index: p,
                        leader_id: p % 3,
                        leader_epoch: 7,
                        replica_nodes: vec![p % 3, (p + 1) % 3, (p + 2) % 3],
                        isr_nodes: vec![p % 3, (p + 1) % 3, (p + 2) % 3],
                        offline_replicas: Vec::new(),
                        ..Default::default()
                    })
                    .collect(),
                topic_authorized_operations: -2_147_483_648,
                ..Default::default()
            })
            .collect(),
        cluster_authorized_operations: -2_147_483_648,
        ..Default::default()
    })
}

fn heartbeat_request() -> Request {
    Request::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest {
        group_id: "bench-group".into(),
        member_id: "Xk3dQm9sTz2b7VfJ1nHc0g".into(),
        member_epoch: 5,
        instance_id: None,
        rack_id: Some("rack-1".into()),
        rebalance_timeout_ms: 45_000,
        subscribed_topic_names: Some(vec!["orders".into(), "payments".into()]),
        subscribed_topic_regex: None,
        server_assignor: Some("uniform".into()),
        topic_partitions: Some(vec![
            CghRequestTopic {
                topic_id: topic_id(1),
                partitions: vec![0, 1, 2],
                ..Default::default()
            },
            CghRequestTopic {
                topic_id: topic_id(2),
                partitions: vec![3, 4],
                ..Default::default()
            },
        ]),
        ..Default::default()
    })
}

fn heartbeat_response() -> Response {
    Response::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse {
        throttle_time_ms: 0,
        error_code: 0,
        error_message: None,
        member_id: Some("Xk3dQm9sTz2b7VfJ1nHc0g".into()),
        member_epoch: 6,
        heartbeat_interval_ms: 5_000,
        assignment: Some(Assignment {
            topic_partitions: vec![
                CghResponseTopic {
                    topic_id: topic_id(1),
                    partitions: vec![0, 1, 2],
                    ..Default::default()
                },
                CghResponseTopic {
                    topic_id: topic_id(2),
                    partitions: vec![3, 4],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut request = |name: &str, version: i16, message: Request| {
        let mut buf = BytesMut::new();
        message.encode(&mut buf, version).expect("encode");
        cases.push(Case {
            name: name.to_string(),
            api: message.api_key(),
            version,
            request: true,
            bytes: buf.freeze(),
        });
    };
    request("produce_v9_request", 9, produce(9));
    request("produce_v12_request", 12, produce(12));
    request(
        "consumer_group_heartbeat_v1_request",
        1,
        heartbeat_request(),
    );
    let mut response = |name: &str, version: i16, message: Response| {
        let mut buf = BytesMut::new();
        message.encode(&mut buf, version).expect("encode");
        cases.push(Case {
            name: name.to_string(),
            api: message.api_key(),
            version,
            request: false,
            bytes: buf.freeze(),
        });
    };
    response("fetch_v12_response", 12, fetch(12));
    response("fetch_v16_response", 16, fetch(16));
    response("metadata_v12_response", 12, metadata());
    response(
        "consumer_group_heartbeat_v1_response",
        1,
        heartbeat_response(),
    );
    cases
}

/// One decode + encode with Skiff.
fn skiff_round(case: &Case, out: &mut BytesMut) {
    out.clear();
    let mut input = case.bytes.clone();
    if case.request {
        let value = Request::decode(case.api, case.version, &mut input).expect("skiff decode");
        value.encode(out, case.version).expect("skiff encode");
    } else {
        let value = Response::decode(case.api, case.version, &mut input).expect("skiff decode");
        value.encode(out, case.version).expect("skiff encode");
    }
}

/// One decode + zero-copy encode with Skiff: a request into a `ChunkedBuf`, a response as a whole
/// frame (`encode_response_frame_chunks`, size prefix and header included). Returns the chunks.
fn skiff_round_chunked(case: &Case) -> Vec<Bytes> {
    let mut input = case.bytes.clone();
    if case.request {
        let value = Request::decode(case.api, case.version, &mut input).expect("skiff decode");
        let mut buf = ChunkedBuf::new();
        value.encode(&mut buf, case.version).expect("skiff encode");
        buf.into_chunks()
    } else {
        let value = Response::decode(case.api, case.version, &mut input).expect("skiff decode");
        encode_response_frame_chunks(&value, case.version, 1).expect("skiff encode")
    }
}

/// Cases whose encode is dominated by copying record sets.
fn carries_records(case: &Case) -> bool {
    matches!(case.api, ApiKey::Produce | ApiKey::Fetch)
}

/// One decode + encode with kafka-protocol.
fn kp_round(case: &Case, api: KpApiKey, out: &mut BytesMut) {
    out.clear();
    let mut input = case.bytes.clone();
    if case.request {
        let value = RequestKind::decode(api, &mut input, case.version).expect("kp decode");
        value.encode(out, case.version).expect("kp encode");
    } else {
        let value = ResponseKind::decode(api, &mut input, case.version).expect("kp decode");
        value.encode(out, case.version).expect("kp encode");
    }
}

fn kp_api(case: &Case) -> KpApiKey {
    KpApiKey::try_from(case.api.key()).expect("kafka-protocol knows the API")
}

/// Both codecs must produce Skiff's input bytes again, or the comparison is meaningless.
fn check(case: &Case) {
    let mut out = BytesMut::new();
    skiff_round(case, &mut out);
    assert_eq!(&out[..], &case.bytes[..], "{}: Skiff", case.name);
    kp_round(case, kp_api(case), &mut out);
    assert_eq!(&out[..], &case.bytes[..], "{}: kafka-protocol", case.name);
    let chunks = skiff_round_chunked(case).concat();
    let body = if case.request {
        &chunks[..]
    } else {
        // Size prefix and response header (v0: correlation ID; v1: plus an empty tag section).
        let header = 4 + 4 + usize::from(case.api.response_header_version(case.version) >= 1);
        &chunks[header..]
    };
    assert_eq!(body, &case.bytes[..], "{}: Skiff chunked", case.name);
}

fn criterion_groups(c: &mut Criterion, cases: &[Case]) {
    for case in cases {
        let mut group = c.benchmark_group(format!("codec/{}", case.name));
        group.throughput(Throughput::Bytes(case.bytes.len() as u64));
        let mut out = BytesMut::with_capacity(case.bytes.len());
        group.bench_function("skiff", |b| {
            b.iter(|| skiff_round(black_box(case), &mut out))
        });
        let api = kp_api(case);
        group.bench_function("kafka-protocol", |b| {
            b.iter(|| kp_round(black_box(case), api, &mut out))
        });
        if carries_records(case) {
            group.bench_function("skiff-chunked", |b| {
                b.iter(|| skiff_round_chunked(black_box(case)))
            });
        }
        group.finish();
    }
}

/// Median time of one round, from 15 batches of ~20 ms.
fn median_round(mut round: impl FnMut()) -> Duration {
    let start = Instant::now();
    let mut calibrate = 0u32;
    while start.elapsed() < Duration::from_millis(20) {
        round();
        calibrate += 1;
    }
    let per_batch = calibrate.max(1);
    let mut samples: Vec<Duration> = (0..15)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_batch {
                round();
            }
            start.elapsed() / per_batch
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}

fn skiff_decode(case: &Case) {
    let mut input = case.bytes.clone();
    if case.request {
        black_box(Request::decode(case.api, case.version, &mut input).expect("decode"));
    } else {
        black_box(Response::decode(case.api, case.version, &mut input).expect("decode"));
    }
}

fn kp_decode(case: &Case, api: KpApiKey) {
    let mut input = case.bytes.clone();
    if case.request {
        black_box(RequestKind::decode(api, &mut input, case.version).expect("decode"));
    } else {
        black_box(ResponseKind::decode(api, &mut input, case.version).expect("decode"));
    }
}

/// Encode-only timing: the value decoded once, encoded per round.
fn encode_only(case: &Case, api: KpApiKey) -> (Duration, Duration) {
    let mut out = BytesMut::with_capacity(case.bytes.len());
    let mut input = case.bytes.clone();
    let mut kp_input = case.bytes.clone();
    if case.request {
        let ours = Request::decode(case.api, case.version, &mut input).expect("decode");
        let theirs = RequestKind::decode(api, &mut kp_input, case.version).expect("decode");
        (
            median_round(|| {
                out.clear();
                black_box(&ours)
                    .encode(&mut out, case.version)
                    .expect("encode")
            }),
            median_round(|| {
                out.clear();
                black_box(&theirs)
                    .encode(&mut out, case.version)
                    .expect("encode")
            }),
        )
    } else {
        let ours = Response::decode(case.api, case.version, &mut input).expect("decode");
        let theirs = ResponseKind::decode(api, &mut kp_input, case.version).expect("decode");
        (
            median_round(|| {
                out.clear();
                black_box(&ours)
                    .encode(&mut out, case.version)
                    .expect("encode")
            }),
            median_round(|| {
                out.clear();
                black_box(&theirs)
                    .encode(&mut out, case.version)
                    .expect("encode")
            }),
        )
    }
}

fn ratio_table(cases: &[Case]) {
    println!();
    println!(
        "bench/codec-ratio: same input bytes, median of 15 batches; ratio = kafka-protocol time / Skiff time (> 1: Skiff faster)"
    );
    println!(
        "{:<37} {:>6} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6}",
        "case",
        "bytes",
        "skiff",
        "kp",
        "ratio",
        "dec skf",
        "dec kp",
        "ratio",
        "enc skf",
        "enc kp",
        "ratio"
    );
    for case in cases {
        let mut out = BytesMut::with_capacity(case.bytes.len());
        let api = kp_api(case);
        let skiff = median_round(|| skiff_round(black_box(case), &mut out));
        let kp = median_round(|| kp_round(black_box(case), api, &mut out));
        let skiff_dec = median_round(|| skiff_decode(black_box(case)));
        let kp_dec = median_round(|| kp_decode(black_box(case), api));
        let (skiff_enc, kp_enc) = encode_only(case, api);
        let ratio = |ours: Duration, theirs: Duration| theirs.as_secs_f64() / ours.as_secs_f64();
        println!(
            "{:<37} {:>6} | {:>9} {:>9} {:>5.2}x | {:>9} {:>9} {:>5.2}x | {:>9} {:>9} {:>5.2}x",
            case.name,
            case.bytes.len(),
            format!("{skiff:.2?}"),
            format!("{kp:.2?}"),
            ratio(skiff, kp),
            format!("{skiff_dec:.2?}"),
            format!("{kp_dec:.2?}"),
            ratio(skiff_dec, kp_dec),
            format!("{skiff_enc:.2?}"),
            format!("{kp_enc:.2?}"),
            ratio(skiff_enc, kp_enc),
        );
    }
}

/// Encode-only timing of Skiff's zero-copy path, the value decoded once.
fn encode_chunked_only(case: &Case) -> Duration {
    let mut input = case.bytes.clone();
    if case.request {
        let ours = Request::decode(case.api, case.version, &mut input).expect("decode");
        median_round(|| {
            let mut buf = ChunkedBuf::new();
            black_box(&ours)
                .encode(&mut buf, case.version)
                .expect("encode");
            black_box(buf.into_chunks());
        })
    } else {
        let ours = Response::decode(case.api, case.version, &mut input).expect("decode");
        median_round(|| {
            black_box(
                encode_response_frame_chunks(black_box(&ours), case.version, 1).expect("encode"),
            );
        })
    }
}

fn zero_copy_table(cases: &[Case]) {
    println!();
    println!(
        "bench/codec-zero-copy: Skiff decode + zero-copy encode (ChunkedBuf; responses as whole frames with encode_response_frame_chunks) against kafka-protocol decode + encode; ratio = kafka-protocol time / Skiff time"
    );
    println!(
        "{:<37} {:>6} | {:>9} {:>9} {:>9} {:>6} | {:>9} {:>9} {:>9} {:>6}",
        "case",
        "chunks",
        "skf copy",
        "skf zc",
        "kp",
        "ratio",
        "enc copy",
        "enc zc",
        "enc kp",
        "ratio"
    );
    for case in cases.iter().filter(|c| carries_records(c)) {
        let mut out = BytesMut::with_capacity(case.bytes.len());
        let api = kp_api(case);
        let chunks = skiff_round_chunked(case).len();
        let skiff = median_round(|| skiff_round(black_box(case), &mut out));
        let skiff_zc = median_round(|| {
            black_box(skiff_round_chunked(black_box(case)));
        });
        let kp = median_round(|| kp_round(black_box(case), api, &mut out));
        let (skiff_enc, kp_enc) = encode_only(case, api);
        let skiff_enc_zc = encode_chunked_only(case);
        let ratio = |ours: Duration, theirs: Duration| theirs.as_secs_f64() / ours.as_secs_f64();
        println!(
            "{:<37} {:>6} | {:>9} {:>9} {:>9} {:>5.2}x | {:>9} {:>9} {:>9} {:>5.2}x",
            case.name,
            chunks,
            format!("{skiff:.2?}"),
            format!("{skiff_zc:.2?}"),
            format!("{kp:.2?}"),
            ratio(skiff_zc, kp),
            format!("{skiff_enc:.2?}"),
            format!("{skiff_enc_zc:.2?}"),
            format!("{kp_enc:.2?}"),
            ratio(skiff_enc_zc, kp_enc),
        );
    }
}

/// `SKIFF_BENCH_LOOP=<case>:<mode>:<iterations>`: one loop, nothing else (for callgrind).
fn run_loop(spec: &str, cases: &[Case]) {
    let mut parts = spec.split(':');
    let (Some(name), Some(mode), Some(iterations)) = (parts.next(), parts.next(), parts.next())
    else {
        panic!("SKIFF_BENCH_LOOP=<case>:<mode>:<iterations>, got {spec:?}");
    };
    let iterations: u64 = iterations.parse().expect("iterations");
    let case = cases
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name:?}"));
    let api = kp_api(case);
    let mut out = BytesMut::with_capacity(case.bytes.len());
    let mut input = case.bytes.clone();
    let mut kp_input = case.bytes.clone();
    let (ours_req, ours_resp, theirs_req, theirs_resp) = if case.request {
        (
            Request::decode(case.api, case.version, &mut input).ok(),
            None,
            RequestKind::decode(api, &mut kp_input, case.version).ok(),
            None,
        )
    } else {
        (
            None,
            Response::decode(case.api, case.version, &mut input).ok(),
            None,
            ResponseKind::decode(api, &mut kp_input, case.version).ok(),
        )
    };
    for _ in 0..iterations {
        match mode {
            "skiff" => skiff_round(black_box(case), &mut out),
            "kp" => kp_round(black_box(case), api, &mut out),
            "skiff-dec" => skiff_decode(black_box(case)),
            "kp-dec" => kp_decode(black_box(case), api),
            "skiff-chunked" => {
                black_box(skiff_round_chunked(black_box(case)));
            }
            "skiff-enc" => {
                out.clear();
                match (&ours_req, &ours_resp) {
                    (Some(r), _) => black_box(r).encode(&mut out, case.version),
                    (_, Some(r)) => black_box(r).encode(&mut out, case.version),
                    _ => unreachable!(),
                }
                .expect("encode");
            }
            "kp-enc" => {
                out.clear();
                match (&theirs_req, &theirs_resp) {
                    (Some(r), _) => black_box(r).encode(&mut out, case.version),
                    (_, Some(r)) => black_box(r).encode(&mut out, case.version),
                    _ => unreachable!(),
                }
                .expect("encode");
            }
            "skiff-enc-chunked" => {
                let chunks = match (&ours_req, &ours_resp) {
                    (Some(r), _) => {
                        let mut buf = ChunkedBuf::new();
                        black_box(r).encode(&mut buf, case.version).expect("encode");
                        buf.into_chunks()
                    }
                    (_, Some(r)) => {
                        encode_response_frame_chunks(black_box(r), case.version, 1).expect("encode")
                    }
                    _ => unreachable!(),
                };
                black_box(chunks);
            }
            other => panic!("unknown mode {other:?}"),
        }
    }
}

fn main() {
    let cases = cases();
    for case in &cases {
        check(case);
    }
    if let Ok(spec) = std::env::var("SKIFF_BENCH_LOOP") {
        run_loop(&spec, &cases);
        return;
    }
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    criterion_groups(&mut criterion, &cases);
    criterion.final_summary();
    // `--profile-time` (profiling one benchmark under perf): no table, only that benchmark.
    if !std::env::args().any(|a| a == "--profile-time") {
        ratio_table(&cases);
        zero_copy_table(&cases);
    }
}
