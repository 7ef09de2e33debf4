//! What the KIP-1313 identity rule costs on the request path: parsing a Produce request frame
//! (1 MiB of records) with and without the identity check, and the check alone.
//!
//! `cargo bench -p skiff-broker --bench identity`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use skiff_broker::identity::ConnectionIdentity;
use skiff_protocol::generated::ProduceRequest;
use skiff_protocol::generated::produce_request::{PartitionProduceData, TopicProduceData};
use skiff_protocol::header::encode_request_frame;
use skiff_protocol::{Request, RequestFrame, Uuid};

fn produce_frame(records: usize, id: Option<Uuid>) -> Bytes {
    let request = Request::Produce(ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: "bench".into(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(Bytes::from(vec![7u8; records])),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let frame = encode_request_frame(&request, 9, 1, Some("bench"), id).expect("encode");
    frame.freeze().slice(4..)
}

fn bench(c: &mut Criterion) {
    let id = Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
    let with_id = produce_frame(1 << 20, Some(id));
    let mut group = c.benchmark_group("produce_request_path");
    group.throughput(Throughput::Bytes(with_id.len() as u64));
    group.bench_function("parse_and_decode", |b| {
        b.iter(|| {
            let frame = RequestFrame::parse(black_box(with_id.clone())).expect("parse");
            black_box(frame.decode_body().expect("decode"));
        })
    });
    group.bench_function("parse_check_identity_and_decode", |b| {
        let mut identity = ConnectionIdentity::default();
        b.iter(|| {
            let frame = RequestFrame::parse(black_box(with_id.clone())).expect("parse");
            black_box(identity.check(frame.header_version, frame.header.instance_id()));
            black_box(frame.decode_body().expect("decode"));
        })
    });
    group.finish();

    c.bench_function("identity_check_alone", |b| {
        let mut identity = ConnectionIdentity::default();
        identity.check(2, Some(id));
        b.iter(|| black_box(identity.check(black_box(2), black_box(Some(id)))))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
