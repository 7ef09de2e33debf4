//! Transaction requests over a raw client, shared by the single-node and cluster tests:
//! InitProducerId, AddPartitionsToTxn, transactional produce, EndTxn, read_committed fetches and
//! ListOffsets, on partition 0 of a topic.

use bytes::Bytes;
use skiff_protocol::Response;
use skiff_protocol::Uuid;
use skiff_protocol::generated::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use skiff_protocol::generated::fetch_response::PartitionData;
use skiff_protocol::generated::offset_fetch_request::OffsetFetchRequestTopic;
use skiff_protocol::generated::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use skiff_protocol::generated::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest,
    OffsetFetchRequest, TxnOffsetCommitRequest,
};
use skiff_records::{RecordBatchBuilder, RecordBatches};

use super::{Client, fetch_request, produce_request};

pub async fn init(c: &mut Client, tid: &str, timeout_ms: i32) -> (i64, i16) {
    match c
        .call(
            InitProducerIdRequest {
                transactional_id: Some(tid.into()),
                transaction_timeout_ms: timeout_ms,
                producer_id: -1,
                producer_epoch: -1,
                ..Default::default()
            },
            4,
        )
        .await
    {
        Response::InitProducerId(r) => {
            assert_eq!(r.error_code, 0, "{r:?}");
            (r.producer_id, r.producer_epoch)
        }
        other => panic!("unexpected {other:?}"),
    }
}

pub async fn add_partition(
    c: &mut Client,
    tid: &str,
    (pid, epoch): (i64, i16),
    topic: &str,
) -> i16 {
    let request = AddPartitionsToTxnRequest {
        v3_and_below_transactional_id: tid.into(),
        v3_and_below_producer_id: pid,
        v3_and_below_producer_epoch: epoch,
        v3_and_below_topics: vec![AddPartitionsToTxnTopic {
            name: topic.into(),
            partitions: vec![0],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, 3).await {
        Response::AddPartitionsToTxn(r) => {
            r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Record timestamps: now (old ones would fall to retention after a restart).
pub fn now() -> i64 {
    skiff_broker::clock::now_ms()
}

pub fn txn_batch((pid, epoch): (i64, i16), seq: i32, values: &[&[u8]]) -> Bytes {
    let mut b = RecordBatchBuilder::new()
        .producer(pid, epoch, seq)
        .transactional(true);
    for v in values {
        b.append(now(), None, Some(v), &[]).expect("append");
    }
    b.build().expect("batch").into_bytes()
}

pub fn plain_batch(values: &[&[u8]]) -> Bytes {
    let mut b = RecordBatchBuilder::new();
    for v in values {
        b.append(now(), None, Some(v), &[]).expect("append");
    }
    b.build().expect("batch").into_bytes()
}

/// Produces to partition 0 with acks=all; returns (error code, base offset).
pub async fn produce(c: &mut Client, tid: Option<&str>, topic: &str, records: Bytes) -> (i16, i64) {
    let mut request = produce_request(topic, 0, -1, records);
    request.transactional_id = tid.map(Into::into);
    match c.call(request, 9).await {
        Response::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("unexpected {other:?}"),
    }
}

pub async fn end(c: &mut Client, tid: &str, (pid, epoch): (i64, i16), commit: bool) -> i16 {
    let request = EndTxnRequest {
        transactional_id: tid.into(),
        producer_id: pid,
        producer_epoch: epoch,
        committed: commit,
        ..Default::default()
    };
    match c.call(request, 3).await {
        Response::EndTxn(r) => r.error_code,
        other => panic!("unexpected {other:?}"),
    }
}

pub async fn fetch(
    c: &mut Client,
    topic: &str,
    offset: i64,
    read_committed: bool,
) -> PartitionData {
    let mut request = fetch_request(topic, Uuid::default(), offset, 0, 0);
    request.isolation_level = i8::from(read_committed);
    match c.call(request, 12).await {
        Response::Fetch(r) => r.responses[0].partitions[0].clone(),
        other => panic!("unexpected {other:?}"),
    }
}

/// (offset, value) of the data records, and the offsets of the control batches.
pub fn contents(p: &PartitionData) -> (Vec<(i64, Vec<u8>)>, Vec<i64>) {
    let mut data = Vec::new();
    let mut markers = Vec::new();
    for batch in RecordBatches::new(p.records.clone().unwrap_or_default()) {
        let batch = batch.expect("valid batch");
        if batch.is_control() {
            markers.push(batch.base_offset());
            continue;
        }
        for record in batch.records().expect("uncompressed") {
            let record = record.expect("record");
            data.push((
                record.offset,
                record.value.map(|v| v.to_vec()).unwrap_or_default(),
            ));
        }
    }
    (data, markers)
}

pub async fn latest(c: &mut Client, topic: &str, read_committed: bool) -> i64 {
    super::list_offset(c, topic, -1, read_committed).await
}

/// OffsetFetch v7 asking for stable offsets: (offset, partition error code).
pub async fn stable_offset(c: &mut Client, group: &str, topic: &str) -> (i64, i16) {
    let request = OffsetFetchRequest {
        group_id: group.into(),
        topics: Some(vec![OffsetFetchRequestTopic {
            name: topic.into(),
            partition_indexes: vec![0],
            ..Default::default()
        }]),
        require_stable: true,
        ..Default::default()
    };
    match c.call(request, 7).await {
        Response::OffsetFetch(r) => {
            let p = &r.topics[0].partitions[0];
            (p.committed_offset, p.error_code)
        }
        other => panic!("unexpected {other:?}"),
    }
}

pub async fn txn_commit_offset(
    c: &mut Client,
    tid: &str,
    (pid, epoch): (i64, i16),
    group: &str,
    topic: &str,
    offset: i64,
) -> i16 {
    let request = TxnOffsetCommitRequest {
        transactional_id: tid.into(),
        group_id: group.into(),
        producer_id: pid,
        producer_epoch: epoch,
        generation_id: -1,
        topics: vec![TxnOffsetCommitRequestTopic {
            name: topic.into(),
            partitions: vec![TxnOffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: offset,
                committed_leader_epoch: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, 3).await {
        Response::TxnOffsetCommit(r) => r.topics[0].partitions[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

pub async fn add_offsets(c: &mut Client, tid: &str, (pid, epoch): (i64, i16), group: &str) -> i16 {
    let request = AddOffsetsToTxnRequest {
        transactional_id: tid.into(),
        producer_id: pid,
        producer_epoch: epoch,
        group_id: group.into(),
        ..Default::default()
    };
    match c.call(request, 3).await {
        Response::AddOffsetsToTxn(r) => r.error_code,
        other => panic!("unexpected {other:?}"),
    }
}
