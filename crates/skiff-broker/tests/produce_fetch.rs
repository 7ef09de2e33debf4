//! Produce, Fetch and ListOffsets over TCP against a real broker.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, TIMEOUT, TestBroker, batch, create_topic, fetch_request, produce_request};
use skiff_protocol::generated::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use skiff_protocol::generated::produce_response::PartitionProduceResponse;
use skiff_protocol::generated::{
    ApiVersionsRequest, FetchRequest, ListOffsetsRequest, MetadataRequest,
};
use skiff_protocol::{ApiKey, Request, Response, Uuid, error_codes};
use skiff_records::RecordBatches;

async fn produce(
    c: &mut Client,
    topic: &str,
    acks: i16,
    records: Bytes,
    version: i16,
) -> PartitionProduceResponse {
    match c
        .call(produce_request(topic, 0, acks, records), version)
        .await
    {
        Response::Produce(r) => r.responses[0].partition_responses[0].clone(),
        other => panic!("unexpected {other:?}"),
    }
}

fn values_of(records: &Bytes) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    for batch in RecordBatches::new(records.clone()) {
        let batch = batch.expect("valid batch");
        for record in batch.records().expect("uncompressed") {
            let record = record.expect("record");
            out.push((
                record.offset,
                record.value.map(|v| v.to_vec()).unwrap_or_default(),
            ));
        }
    }
    out
}

#[tokio::test]
async fn produce_then_fetch_at_every_version() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let id = create_topic(&mut c, "pf").await;
    let mut expected = Vec::new();
    for (i, version) in (3..=12).enumerate() {
        let value = format!("v{version}");
        let r = produce(&mut c, "pf", 1, batch(&[value.as_bytes()]), version).await;
        assert_eq!(r.error_code, 0, "produce v{version}");
        assert_eq!(r.base_offset, i as i64);
        expected.push((i as i64, value.into_bytes()));
    }
    for version in 4..=17 {
        match c.call(fetch_request("pf", id, 0, 0, 0), version).await {
            Response::Fetch(f) => {
                let p = &f.responses[0].partitions[0];
                assert_eq!(p.error_code, 0, "fetch v{version}");
                assert_eq!(p.high_watermark, expected.len() as i64);
                let got = values_of(p.records.as_ref().expect("records"));
                assert_eq!(got, expected, "fetch v{version}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    broker.stop().await;
}

#[tokio::test]
async fn long_poll_is_woken_by_an_append_not_by_its_timeout() {
    let broker = TestBroker::start().await;
    let mut setup = broker.client().await;
    let id = create_topic(&mut setup, "lp").await;
    let mut consumer = broker.client().await;
    let started = Instant::now();
    let fetch = Request::Fetch(fetch_request("lp", id, 0, 10_000, 1));
    let correlation = consumer.send(&fetch, 12).await;
    // Give the fetch time to park, then append from another connection.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = produce(&mut setup, "lp", 1, batch(&[b"wake"]), 9).await;
    assert_eq!(r.error_code, 0);
    match consumer.receive(ApiKey::Fetch, 12, correlation).await {
        Response::Fetch(f) => {
            let got = values_of(
                f.responses[0].partitions[0]
                    .records
                    .as_ref()
                    .expect("records"),
            );
            assert_eq!(got, vec![(0, b"wake".to_vec())]);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "woken by the append"
    );
    broker.stop().await;
}

#[tokio::test]
async fn long_poll_times_out_empty() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let id = create_topic(&mut c, "empty").await;
    let started = Instant::now();
    match c.call(fetch_request("empty", id, 0, 200, 1), 12).await {
        Response::Fetch(f) => {
            let p = &f.responses[0].partitions[0];
            assert_eq!(p.error_code, 0);
            assert!(p.records.as_ref().is_none_or(Bytes::is_empty));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(150));
    broker.stop().await;
}

#[tokio::test]
async fn acks_all_acks_zero_and_pipelined_responses_in_order() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    create_topic(&mut c, "acks").await;
    let r = produce(&mut c, "acks", -1, batch(&[b"durable"]), 9).await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    // acks=0 gets no response: the next response on the wire answers the next request.
    let id0 = c
        .send(
            &Request::Produce(produce_request("acks", 0, 0, batch(&[b"fire"]))),
            9,
        )
        .await;
    let ids: Vec<i32> = {
        let mut ids = Vec::new();
        for i in 0..5 {
            let value = format!("p{i}");
            ids.push(
                c.send(
                    &Request::Produce(produce_request("acks", 0, -1, batch(&[value.as_bytes()]))),
                    9,
                )
                .await,
            );
        }
        ids
    };
    for (i, id) in ids.into_iter().enumerate() {
        assert_ne!(id, id0);
        match c.receive(ApiKey::Produce, 9, id).await {
            Response::Produce(r) => {
                let p = &r.responses[0].partition_responses[0];
                assert_eq!(p.error_code, 0);
                assert_eq!(p.base_offset, 2 + i as i64);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    broker.stop().await;
}

/// Large produce requests are appended off the runtime worker (`block_in_place`), which only
/// exists on the multi-threaded runtime the real broker uses; interleaved with small ones, every
/// record comes back once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_and_small_appends_on_the_multi_threaded_runtime() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let id = create_topic(&mut c, "large").await;
    let big = vec![b'x'; 100 * 1024];
    let mut expected = Vec::new();
    for round in 0..4u8 {
        let large: Vec<Vec<u8>> = (0..3).map(|i| [&[round, i][..], &big].concat()).collect();
        let refs: Vec<&[u8]> = large.iter().map(Vec::as_slice).collect();
        let r = produce(&mut c, "large", -1, batch(&refs), 9).await;
        assert_eq!(r.error_code, 0);
        let small = vec![round];
        let r = produce(&mut c, "large", 1, batch(&[&small]), 9).await;
        assert_eq!(r.error_code, 0);
        expected.extend(large);
        expected.push(small);
    }
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let offset = got.len() as i64;
        match c.call(fetch_request("large", id, offset, 0, 1), 13).await {
            Response::Fetch(f) => {
                let p = &f.responses[0].partitions[0];
                assert_eq!(p.error_code, 0);
                let values = values_of(p.records.as_ref().expect("records"));
                assert!(!values.is_empty());
                got.extend(
                    values
                        .into_iter()
                        .filter(|(o, _)| *o >= offset)
                        .map(|(_, v)| v),
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(got == expected, "records differ");
    broker.stop().await;
}

#[tokio::test]
async fn flush_always_also_syncs_acks_1_and_acks_0_appends_without_waiting_for_them() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    create_topic(&mut c, "bg-sync").await;
    let r = produce(&mut c, "bg-sync", 1, batch(&[b"a", b"b"]), 9).await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    let topic = broker.broker().topic_by_name("bg-sync").unwrap();
    let partition = topic.partition(0).unwrap();
    // `durable_reached` never requests a sync itself: only the produce path can have asked.
    tokio::time::timeout(Duration::from_secs(10), partition.durable_reached(2))
        .await
        .expect("acks=1 append synced in the background")
        .unwrap();
    c.send(
        &Request::Produce(produce_request("bg-sync", 0, 0, batch(&[b"c"]))),
        9,
    )
    .await;
    tokio::time::timeout(Duration::from_secs(10), partition.durable_reached(3))
        .await
        .expect("acks=0 append synced in the background")
        .unwrap();
    broker.stop().await;
}

#[tokio::test]
async fn produce_errors_unknown_topic_bad_acks_corrupt_batch() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    create_topic(&mut c, "err").await;
    let r = produce(&mut c, "nope", 1, batch(&[b"x"]), 9).await;
    assert_eq!(r.error_code, error_codes::UNKNOWN_TOPIC_OR_PARTITION);
    let r = produce(&mut c, "err", 2, batch(&[b"x"]), 9).await;
    assert_eq!(r.error_code, error_codes::INVALID_REQUIRED_ACKS);
    let mut corrupt = batch(&[b"x"]).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let r = produce(&mut c, "err", 1, Bytes::from(corrupt), 9).await;
    assert_eq!(r.error_code, error_codes::CORRUPT_MESSAGE);
    let r = produce(&mut c, "err", 1, Bytes::from_static(b"\x00\x01"), 9).await;
    assert_ne!(r.error_code, 0);
    // Nothing bad was stored; a good batch lands at offset 0.
    let r = produce(&mut c, "err", 1, batch(&[b"ok"]), 9).await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    broker.stop().await;
}

#[tokio::test]
async fn idempotent_retry_is_acknowledged_without_a_second_append() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    create_topic(&mut c, "idem").await;
    let mut builder = skiff_records::RecordBatchBuilder::new().producer(42, 0, 0);
    builder.append(1, None, Some(b"once"), &[]).expect("append");
    let first = builder.build().expect("batch").into_bytes();
    let r = produce(&mut c, "idem", -1, first.clone(), 9).await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    let r = produce(&mut c, "idem", -1, first, 9).await;
    assert_eq!(
        (r.error_code, r.base_offset),
        (0, 0),
        "duplicate acknowledged"
    );
    let mut gap = skiff_records::RecordBatchBuilder::new().producer(42, 0, 5);
    gap.append(1, None, Some(b"gap"), &[]).expect("append");
    let r = produce(
        &mut c,
        "idem",
        -1,
        gap.build().expect("batch").into_bytes(),
        9,
    )
    .await;
    assert_eq!(r.error_code, error_codes::OUT_OF_ORDER_SEQUENCE_NUMBER);
    let topic = broker.broker().topic_by_name("idem").expect("topic");
    assert_eq!(topic.partitions[0].log_end_offset(), 1);
    broker.stop().await;
}

#[tokio::test]
async fn fetch_errors_and_list_offsets() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let id = create_topic(&mut c, "lo").await;
    for i in 0..3 {
        let mut b = skiff_records::RecordBatchBuilder::new();
        b.append(1_000 * (i + 1), None, Some(b"v"), &[])
            .expect("append");
        produce(&mut c, "lo", 1, b.build().expect("batch").into_bytes(), 9).await;
    }
    match c.call(fetch_request("lo", id, 99, 0, 0), 12).await {
        Response::Fetch(f) => assert_eq!(
            f.responses[0].partitions[0].error_code,
            error_codes::OFFSET_OUT_OF_RANGE
        ),
        other => panic!("unexpected {other:?}"),
    }
    match c
        .call(fetch_request("", Uuid::from_u128(5), 0, 0, 0), 13)
        .await
    {
        Response::Fetch(f) => assert_eq!(
            f.responses[0].partitions[0].error_code,
            error_codes::UNKNOWN_TOPIC_ID
        ),
        other => panic!("unexpected {other:?}"),
    }
    let list = |timestamp: i64| ListOffsetsRequest {
        replica_id: -1,
        topics: vec![ListOffsetsTopic {
            name: "lo".into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: 0,
                current_leader_epoch: -1,
                timestamp,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    for version in 1..=10 {
        for (timestamp, offset) in [(-2, 0), (-1, 3), (2_000, 1), (2_500, 2), (9_000, -1)] {
            match c.call(list(timestamp), version).await {
                Response::ListOffsets(r) => {
                    let p = &r.topics[0].partitions[0];
                    assert_eq!(p.error_code, 0);
                    assert_eq!(p.offset, offset, "v{version} ts {timestamp}");
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    match c.call(list(-3), 7).await {
        Response::ListOffsets(r) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!((p.offset, p.timestamp), (2, 3_000));
        }
        other => panic!("unexpected {other:?}"),
    }
    broker.stop().await;
}

#[tokio::test]
async fn data_and_topic_ids_survive_a_restart() {
    let broker = TestBroker::start().await;
    let dir = broker.data_dir();
    let mut c = broker.client().await;
    let id = create_topic(&mut c, "keep").await;
    produce(&mut c, "keep", -1, batch(&[b"a", b"b"]), 9).await;
    drop(c);
    let TestBroker {
        running, dir: tmp, ..
    } = broker;
    if let Some(running) = running {
        tokio::time::timeout(TIMEOUT, running.shutdown())
            .await
            .expect("in time")
            .expect("clean");
    }
    let broker = TestBroker::start_with(|config| config.data_dir = dir.clone()).await;
    let mut c = broker.client().await;
    assert_eq!(create_topic(&mut c, "keep").await, id, "topic ID is stable");
    match c.call(fetch_request("keep", id, 0, 0, 0), 13).await {
        Response::Fetch(f) => {
            let got = values_of(
                f.responses[0].partitions[0]
                    .records
                    .as_ref()
                    .expect("records"),
            );
            assert_eq!(got, vec![(0, b"a".to_vec()), (1, b"b".to_vec())]);
        }
        other => panic!("unexpected {other:?}"),
    }
    broker.stop().await;
    drop(tmp);
}

#[tokio::test]
async fn bad_input_closes_only_the_offending_connection() {
    let broker = TestBroker::start().await;
    let mut good = broker.client().await;
    let id = create_topic(&mut good, "safe").await;
    match good.call(ApiVersionsRequest::default(), 0).await {
        Response::ApiVersions(r) => assert_eq!(r.error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    produce(&mut good, "safe", 1, batch(&[b"kept"]), 9).await;

    let attacks: Vec<Vec<u8>> = vec![
        // Metadata v1 whose topic array claims 2^31-1 entries.
        [
            &[0, 0, 0, 14][..],
            &[0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff],
            &[0x7f, 0xff, 0xff, 0xff],
        ]
        .concat(),
        // Negative and oversized frame sizes.
        vec![0xff, 0xff, 0xff, 0xff],
        vec![0x7f, 0xff, 0xff, 0xff, 1, 2, 3],
        // Unknown API key.
        vec![0, 0, 0, 8, 0x7f, 0x00, 0, 0, 0, 0, 0, 1],
        // Produce v99.
        vec![0, 0, 0, 10, 0, 0, 0, 99, 0, 0, 0, 1, 0xff, 0xff],
        // Garbage.
        vec![0, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef, 0x01],
    ];
    for attack in attacks {
        let mut evil = broker.client().await;
        evil.send_raw(&attack).await;
        assert!(evil.is_closed().await, "closed after {attack:02x?}");
    }
    // ApiVersions with an unknown version: a v0 body with UNSUPPORTED_VERSION and the ranges.
    // The header of a flexible version is v2: null client ID, empty tags, then an unknown body.
    let mut c = broker.client().await;
    let frame = [
        0, 0, 0, 13, 0, 18, 0, 99, 0, 0, 0, 7, 0xff, 0xff, 0, 0xab, 0xcd,
    ];
    c.send_raw(&frame).await;
    let raw = c.read_frame().await.expect("an answer");
    let (header, response) =
        skiff_protocol::header::parse_response_frame(raw, ApiKey::ApiVersions, 0).expect("v0 body");
    assert_eq!(header.correlation_id, 7);
    match response {
        Response::ApiVersions(r) => {
            assert_eq!(r.error_code, error_codes::UNSUPPORTED_VERSION);
            assert!(
                r.api_keys
                    .iter()
                    .any(|k| k.api_key == 18 && k.max_version == 4)
            );
        }
        other => panic!("unexpected {other:?}"),
    }

    match good.call(fetch_request("safe", id, 0, 0, 0), 13).await {
        Response::Fetch(f) => {
            let got = values_of(
                f.responses[0].partitions[0]
                    .records
                    .as_ref()
                    .expect("records"),
            );
            assert_eq!(got, vec![(0, b"kept".to_vec())]);
        }
        other => panic!("unexpected {other:?}"),
    }
    broker.stop().await;
}

#[tokio::test]
async fn shutdown_answers_waiting_long_polls_at_once() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let id = create_topic(&mut c, "quiet").await;
    let correlation = c
        .send(
            &Request::Fetch(fetch_request("quiet", id, 0, 20_000, 1)),
            12,
        )
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let stopping = tokio::spawn(broker.stop());
    match c.receive(ApiKey::Fetch, 12, correlation).await {
        Response::Fetch(f) => assert_eq!(f.responses[0].partitions[0].error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    stopping.await.expect("stopped");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown did not wait for the poll"
    );
}

#[tokio::test]
async fn idempotent_retry_after_restart_is_still_a_duplicate() {
    let broker = TestBroker::start().await;
    let dir = broker.data_dir();
    let mut c = broker.client().await;
    create_topic(&mut c, "again").await;
    let mut builder = skiff_records::RecordBatchBuilder::new().producer(77, 0, 0);
    builder.append(1, None, Some(b"once"), &[]).expect("append");
    let batch = builder.build().expect("batch").into_bytes();
    let r = produce(&mut c, "again", -1, batch.clone(), 9).await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    drop(c);
    let TestBroker {
        running, dir: tmp, ..
    } = broker;
    if let Some(running) = running {
        running.shutdown().await.expect("clean");
    }
    let broker = TestBroker::start_with(|config| config.data_dir = dir.clone()).await;
    let mut c = broker.client().await;
    let r = produce(&mut c, "again", -1, batch, 9).await;
    assert_eq!(
        (r.error_code, r.base_offset),
        (0, 0),
        "recognised as a duplicate"
    );
    let topic = broker.broker().topic_by_name("again").expect("topic");
    assert_eq!(topic.partitions[0].log_end_offset(), 1);
    broker.stop().await;
    drop(tmp);
}

/// An idempotent producer's batch, then 12,000 other records (more than the 10,000 offsets a
/// start rereads without a snapshot), all stamped in 2023 (older than the five minutes it also
/// rereads); `value_size` bytes each. Returns the producer's batch.
async fn old_producer_then_busy_log(c: &mut Client, topic: &str, value_size: usize) -> Bytes {
    const STAMP: i64 = 1_700_000_000_000;
    let mut builder = skiff_records::RecordBatchBuilder::new().producer(77, 0, 0);
    builder
        .append(STAMP, None, Some(b"once"), &[])
        .expect("append");
    let mine = builder.build().expect("batch").into_bytes();
    let r = produce(c, topic, -1, mine.clone(), 9).await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    let value = vec![b'x'; value_size];
    for _ in 0..12 {
        let mut other = skiff_records::RecordBatchBuilder::new();
        for _ in 0..1_000 {
            other
                .append(STAMP, None, Some(&value), &[])
                .expect("append");
        }
        let r = produce(c, topic, -1, other.build().expect("batch").into_bytes(), 9).await;
        assert_eq!(r.error_code, 0);
    }
    mine
}

/// Retries `mine` and checks it is acknowledged at offset 0 without being appended again.
async fn assert_retry_is_a_duplicate(broker: &TestBroker, topic: &str, mine: Bytes) {
    let mut c = broker.client().await;
    let r = produce(&mut c, topic, -1, mine, 9).await;
    assert_eq!(
        (r.error_code, r.base_offset),
        (0, 0),
        "the retry is recognised as a duplicate"
    );
    let partition = &broker
        .broker()
        .topic_by_name(topic)
        .expect("topic")
        .partitions[0];
    assert_eq!(partition.log_end_offset(), 12_001, "nothing appended");
}

#[tokio::test]
async fn an_idle_producer_is_still_known_after_a_clean_restart() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    create_topic(&mut c, "quiet").await;
    let mine = old_producer_then_busy_log(&mut c, "quiet", 1).await;
    drop(c);
    // The clean shutdown writes the producer snapshot; the start loads it.
    let broker = broker.restart().await;
    assert_retry_is_a_duplicate(&broker, "quiet", mine).await;
    broker.stop().await;
}

/// Copies a data directory while its broker runs: what a crash at this moment leaves on disk
/// (every append here was acks=all, so fsynced), without the clean-shutdown snapshot.
fn crash_image(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            crash_image(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

#[tokio::test]
async fn after_a_crash_the_roll_snapshot_still_knows_an_idle_producer() {
    let broker = TestBroker::start_with(|config| {
        config
            .kafka
            .insert("log.segment.bytes".into(), "1048576".into());
    })
    .await;
    let mut c = broker.client().await;
    create_topic(&mut c, "rolled").await;
    // 12 MB of records: the log rolls several times, and each roll writes a snapshot.
    let mine = old_producer_then_busy_log(&mut c, "rolled", 1_000).await;
    drop(c);
    let partition_dir = broker.data_dir().join("rolled-0");
    let snapshots = std::fs::read_dir(&partition_dir)
        .expect("read_dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".snapshot"))
        .count();
    assert_eq!(snapshots, 2, "the newest two roll snapshots are kept");

    let crashed = tempfile::tempdir().expect("tempdir");
    crash_image(&broker.data_dir(), crashed.path());
    broker.stop().await;
    let broker = TestBroker::start_with(|config| config.data_dir = crashed.path().into()).await;
    assert_retry_is_a_duplicate(&broker, "rolled", mine).await;
    broker.stop().await;
}

/// (topic, partition) pairs a fetch response carries; the topic by name, or by ID from v13.
fn fetched(r: &skiff_protocol::generated::FetchResponse) -> Vec<(String, i32)> {
    r.responses
        .iter()
        .flat_map(|t| {
            let topic = if t.topic.is_empty() {
                format!("{:?}", t.topic_id)
            } else {
                t.topic.to_string()
            };
            t.partitions
                .iter()
                .map(move |p| (topic.clone(), p.partition_index))
        })
        .collect()
}

async fn fetch(
    c: &mut Client,
    request: FetchRequest,
    version: i16,
) -> skiff_protocol::generated::FetchResponse {
    match c.call(request, version).await {
        Response::Fetch(f) => f,
        other => panic!("unexpected {other:?}"),
    }
}

/// KIP-227 over TCP: a full fetch opens a session, incremental fetches (by name at v12, by
/// topic ID at v13+) answer only the partitions with something new, a long poll in a session is
/// woken by an append, and a wrong epoch or unknown session is refused.
#[tokio::test]
async fn incremental_fetch_sessions() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    for version in [12, 17] {
        let (one, two) = (format!("sess-a-{version}"), format!("sess-b-{version}"));
        let id_one = create_topic(&mut c, &one).await;
        let id_two = create_topic(&mut c, &two).await;
        let (a, b) = if version >= 13 {
            (format!("{id_one:?}"), format!("{id_two:?}"))
        } else {
            (one.clone(), two.clone())
        };
        produce(&mut c, &one, -1, batch(&[b"1"]), 9).await;
        produce(&mut c, &two, -1, batch(&[b"2"]), 9).await;

        // Full fetch, epoch 0: both partitions, and a session.
        let mut full = fetch_request(&one, id_one, 0, 0, 0);
        full.session_epoch = 0;
        let other_topic = fetch_request(&two, id_two, 0, 0, 0).topics;
        full.topics.extend(other_topic);
        let r = fetch(&mut c, full, version).await;
        assert_eq!(r.error_code, 0);
        assert_ne!(r.session_id, 0, "a session is opened");
        assert_eq!(fetched(&r), vec![(a.clone(), 0), (b.clone(), 0)]);
        let session = r.session_id;

        // Epoch 1: both positions advance to 1; nothing new anywhere, so nothing answered.
        let mut next = fetch_request(&one, id_one, 1, 0, 0);
        next.topics
            .extend(fetch_request(&two, id_two, 1, 0, 0).topics);
        next.session_id = session;
        next.session_epoch = 1;
        let r = fetch(&mut c, next, version).await;
        assert_eq!((r.error_code, r.session_id), (0, session));
        assert!(fetched(&r).is_empty(), "nothing changed: {:?}", fetched(&r));

        // Epoch 2, long poll listing no partitions: an append to the second topic wakes it and
        // only that partition is answered, with the new record.
        let mut wait = fetch_request(&one, id_one, 1, 5_000, 1);
        wait.topics.clear();
        wait.session_id = session;
        wait.session_epoch = 2;
        let correlation = c.send(&Request::Fetch(wait), version).await;
        let mut producer = broker.client().await;
        produce(&mut producer, &two, -1, batch(&[b"new"]), 9).await;
        let r = match c.receive(ApiKey::Fetch, version, correlation).await {
            Response::Fetch(f) => f,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(fetched(&r), vec![(b.clone(), 0)]);
        let records = r.responses[0].partitions[0]
            .records
            .as_ref()
            .expect("records");
        assert_eq!(values_of(records), vec![(1, b"new".to_vec())]);

        // A stale epoch, then an unknown session: refused, and the client can start over.
        let mut stale = fetch_request(&one, id_one, 1, 0, 0);
        stale.session_id = session;
        stale.session_epoch = 2;
        let r = fetch(&mut c, stale, version).await;
        assert_eq!(
            r.error_code,
            skiff_broker::fetch_session::INVALID_FETCH_SESSION_EPOCH
        );
        let mut unknown = fetch_request(&one, id_one, 1, 0, 0);
        unknown.session_id = session.wrapping_add(1).max(1);
        unknown.session_epoch = 1;
        let r = fetch(&mut c, unknown, version).await;
        assert_eq!(
            r.error_code,
            skiff_broker::fetch_session::FETCH_SESSION_ID_NOT_FOUND
        );
        // Epoch -1 closes it: a plain full fetch with session ID 0.
        let mut close = fetch_request(&one, id_one, 0, 0, 0);
        close.session_id = session;
        close.session_epoch = -1;
        let r = fetch(&mut c, close, version).await;
        assert_eq!((r.error_code, r.session_id), (0, 0));
        assert_eq!(fetched(&r), vec![(a.clone(), 0)]);
        let mut gone = fetch_request(&one, id_one, 1, 0, 0);
        gone.session_id = session;
        gone.session_epoch = 3;
        let r = fetch(&mut c, gone, version).await;
        assert_eq!(
            r.error_code,
            skiff_broker::fetch_session::FETCH_SESSION_ID_NOT_FOUND
        );
    }
    broker.stop().await;
}

/// A response that is complete goes out at once, even when a later request on the same
/// connection is a long poll and more requests are already buffered behind it.
#[tokio::test]
async fn complete_responses_are_not_held_behind_a_long_poll() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let id = create_topic(&mut c, "held").await;
    // Three requests in one write: Metadata, a 5 s long poll, Metadata.
    let mut bytes = Vec::new();
    let requests = [
        (Request::Metadata(MetadataRequest::default()), 12, 101),
        (
            Request::Fetch(fetch_request("held", id, 0, 5_000, 1)),
            12,
            102,
        ),
        (Request::Metadata(MetadataRequest::default()), 12, 103),
    ];
    for (request, version, correlation_id) in &requests {
        let frame = skiff_protocol::header::encode_request_frame(
            request,
            *version,
            *correlation_id,
            Some("t"),
            None,
        )
        .expect("encode");
        bytes.extend_from_slice(&frame);
    }
    let started = Instant::now();
    c.send_raw(&bytes).await;
    match c.receive(ApiKey::Metadata, 12, 101).await {
        Response::Metadata(m) => assert!(!m.brokers.is_empty()),
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the first response waited for the long poll"
    );
    broker.stop().await;
}

/// One partition's OffsetForLeaderEpoch answer: (error, leader epoch, end offset).
async fn epoch_end(
    c: &mut Client,
    topic: &str,
    partition: i32,
    current: i32,
    epoch: i32,
    version: i16,
) -> (i16, i32, i64) {
    use skiff_protocol::generated::OffsetForLeaderEpochRequest;
    use skiff_protocol::generated::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    let request = OffsetForLeaderEpochRequest {
        replica_id: -1,
        topics: vec![OffsetForLeaderTopic {
            topic: topic.into(),
            partitions: vec![OffsetForLeaderPartition {
                partition,
                current_leader_epoch: current,
                leader_epoch: epoch,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::OffsetForLeaderEpoch(r) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.partition, partition);
            (p.error_code, p.leader_epoch, p.end_offset)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// KIP-320: a partition's leader epoch is the broker's start count; every batch is stamped with
/// it, and OffsetForLeaderEpoch answers where an epoch ended from the partition's history, with
/// Kafka's errors for a fenced or unknown current epoch and an unknown topic or partition. After
/// a restart (epoch 1) epoch 0 ended where the log ended, so a consumer's position validates;
/// after a stop that cut the log's tail, epoch 1 ends before a position read in it.
#[tokio::test]
async fn offset_for_leader_epoch_answers_from_each_partitions_epochs() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let id = create_topic(&mut c, "epochs").await;
    produce(&mut c, "epochs", -1, batch(&[b"a", b"b"]), 9).await;
    produce(&mut c, "epochs", -1, batch(&[b"c"]), 9).await;
    assert_eq!(fetched_epochs(&mut c, id, 0).await, vec![0, 0]);
    for version in [2, 3, 4] {
        assert_eq!(
            epoch_end(&mut c, "epochs", 0, -1, 0, version).await,
            (0, 0, 3)
        );
        assert_eq!(
            epoch_end(&mut c, "epochs", 0, 0, 0, version).await,
            (0, 0, 3)
        );
    }
    assert_eq!(epoch_end(&mut c, "epochs", 0, 0, 1, 4).await, (0, -1, -1));
    assert_eq!(
        epoch_end(&mut c, "epochs", 0, 1, 0, 4).await,
        (error_codes::UNKNOWN_LEADER_EPOCH, -1, -1)
    );
    assert_eq!(
        epoch_end(&mut c, "epochs", 0, -2, 0, 4).await,
        (error_codes::FENCED_LEADER_EPOCH, -1, -1)
    );
    assert_eq!(
        epoch_end(&mut c, "epochs", 7, -1, 0, 4).await.0,
        error_codes::UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(
        epoch_end(&mut c, "epochs", 0, -1, 0, 4).await.0,
        error_codes::NONE
    );
    assert_eq!(
        epoch_end(&mut c, "nope", 0, -1, 0, 4).await.0,
        error_codes::UNKNOWN_TOPIC_OR_PARTITION
    );
    drop(c);

    // A restart is epoch 1: Metadata says so, an epoch-0 fetch is fenced, epoch 0 ended at 3.
    let broker = broker.restart().await;
    let mut c = broker.client().await;
    let all = MetadataRequest {
        topics: None,
        ..Default::default()
    };
    match c.call(all, 12).await {
        Response::Metadata(m) => {
            let t = m.topics.iter().find(|t| t.topic_id == id).expect("topic");
            assert_eq!(t.partitions[0].leader_epoch, 1);
        }
        other => panic!("unexpected {other:?}"),
    }
    let mut stale = fetch_request("epochs", id, 0, 0, 0);
    stale.topics[0].partitions[0].current_leader_epoch = 0;
    match c.call(stale, 13).await {
        Response::Fetch(f) => assert_eq!(
            f.responses[0].partitions[0].error_code,
            error_codes::FENCED_LEADER_EPOCH
        ),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(epoch_end(&mut c, "epochs", 0, 1, 0, 4).await, (0, 0, 3));
    assert_eq!(epoch_end(&mut c, "epochs", 0, 1, 1, 4).await, (0, 1, 3));
    produce(&mut c, "epochs", -1, batch(&[b"d"]), 9).await;
    produce(&mut c, "epochs", -1, batch(&[b"e", b"f"]), 9).await;
    assert_eq!(fetched_epochs(&mut c, id, 3).await, vec![1, 1]);
    assert_eq!(epoch_end(&mut c, "epochs", 0, 1, 1, 4).await, (0, 1, 6));
    drop(c);

    // A stop that loses the last batch (offsets 4-5, read by a consumer in epoch 1): epoch 1
    // now ends at 4, before that consumer's position of 6.
    let dir = broker.data_dir();
    let broker = broker
        .restart_with(|_| {
            let segment = std::fs::read_dir(dir.join("epochs-0"))
                .expect("partition dir")
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .max()
                .expect("last segment");
            let len = std::fs::metadata(&segment).expect("segment").len();
            let last = last_batch_len(&std::fs::read(&segment).expect("read"));
            std::fs::OpenOptions::new()
                .write(true)
                .open(&segment)
                .expect("open")
                .set_len(len - last)
                .expect("cut");
        })
        .await;
    let mut c = broker.client().await;
    assert_eq!(epoch_end(&mut c, "epochs", 0, 2, 1, 4).await, (0, 1, 4));
    assert_eq!(epoch_end(&mut c, "epochs", 0, 2, 0, 4).await, (0, 0, 3));
    assert_eq!(epoch_end(&mut c, "epochs", 0, 2, 2, 4).await, (0, 2, 4));
    broker.stop().await;
}

/// The leader epochs of the batches of partition 0 of topic `id`, from offset `from` (one
/// segment's worth).
async fn fetched_epochs(c: &mut Client, id: Uuid, from: i64) -> Vec<i32> {
    match c.call(fetch_request("epochs", id, from, 0, 0), 13).await {
        Response::Fetch(f) => {
            let p = &f.responses[0].partitions[0];
            assert_eq!(p.error_code, 0, "{p:?}");
            let records = p.records.clone().expect("records");
            RecordBatches::new(records)
                .map(|b| b.expect("batch").partition_leader_epoch())
                .collect()
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// The size of the last whole batch in a segment file's bytes.
fn last_batch_len(bytes: &[u8]) -> u64 {
    let mut at = 0usize;
    let mut last = 0usize;
    while let Some(header) = bytes.get(at..at + 12) {
        let len = i32::from_be_bytes(header[8..12].try_into().expect("4 bytes")) as usize + 12;
        if at + len > bytes.len() {
            break;
        }
        last = len;
        at += len;
    }
    last as u64
}

/// `shutdown` returns once the broker's state is dropped, so the data directory is free for the
/// next broker: while anything still holds the state it waits (here, with the clock paused, past
/// its bound, and says why), and the directory stays locked until the last holder lets go.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_broker_state_and_its_data_directory_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = || skiff_broker::BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    let running = skiff_broker::start(config()).await.expect("broker starts");
    let held = std::sync::Arc::clone(&running.broker);
    let refused = running
        .shutdown()
        .await
        .expect_err("shutdown cannot finish while the state is held");
    assert!(
        refused.to_string().contains("still in use"),
        "unexpected: {refused:#}"
    );
    let locked = skiff_broker::start(config())
        .await
        .err()
        .expect("the directory is still locked");
    assert!(
        format!("{locked:#}").contains("locked by another process"),
        "unexpected: {locked:#}"
    );
    drop(held);
    let again = skiff_broker::start(config())
        .await
        .expect("the directory is free once the state is dropped");
    again.shutdown().await.expect("a clean shutdown");
    let last = skiff_broker::start(config())
        .await
        .expect("free again the moment shutdown returned");
    last.shutdown().await.expect("a clean shutdown");
}

/// Retention runs every `log.retention.check.interval.ms` (here 100 ms; Kafka's default is 5
/// minutes): segments past `retention.ms` (records of 1970, past the default 7 days) are deleted
/// soon after the next one is rolled.
#[tokio::test]
async fn retention_runs_every_log_retention_check_interval_ms() {
    let broker = TestBroker::start_with(|config| {
        config
            .kafka
            .insert("log.retention.check.interval.ms".into(), "100".into());
        config
            .kafka
            .insert("log.segment.bytes".into(), "1048576".into());
    })
    .await;
    let mut c = broker.client().await;
    create_topic(&mut c, "expiring").await;
    let value = vec![7u8; 700 * 1024];
    for i in 0..3 {
        let mut b = skiff_records::RecordBatchBuilder::new();
        b.append(1_000 * (i + 1), None, Some(&value), &[])
            .expect("append");
        let answer = produce(
            &mut c,
            "expiring",
            1,
            b.build().expect("batch").into_bytes(),
            9,
        )
        .await;
        assert_eq!(answer.error_code, 0);
    }
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let start = common::list_offset(&mut c, "expiring", -2, false).await;
        // Each 700 KiB batch fills a 1 MiB segment: the first two segments expire.
        if start >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retention did not run within {TIMEOUT:?} (log start {start})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    broker.stop().await;
}
