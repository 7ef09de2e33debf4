//! Disk faults injected through skiff-log's failpoints (EIO from fdatasync, from a segment
//! write, from a checkpoint rename; an fdatasync held until the test lets it go, to order a
//! race), against a real broker over TCP.
//!
//! What Skiff does, per partition (Kafka takes a whole log directory offline instead): a failed
//! fdatasync or segment write takes that partition offline — every later append answers
//! KAFKA_STORAGE_ERROR, acks=1 included, and DescribeLogDirs lists it as an offline log
//! directory — while the broker keeps serving every other partition; a restart recovers it with
//! everything acknowledged. A failed rename (checkpoint) only fails its request.
//!
//! Each test uses its own topic names: the failpoints are process-wide, matched by path.

mod common;

use bytes::Bytes;
use common::{Client, TestBroker, batch, create_topic, fetch_request, produce_request};
use skiff_log::faults::{self, Fault};
use skiff_protocol::generated::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use skiff_protocol::generated::{
    DeleteRecordsRequest, DeleteTopicsRequest, DescribeLogDirsRequest,
};
use skiff_protocol::{Response, Uuid, error_codes};

/// Produces one record; the partition's (error code, base offset).
async fn produce(c: &mut Client, topic: &str, acks: i16, value: &[u8]) -> (i16, i64) {
    match c
        .call(produce_request(topic, 0, acks, batch(&[value])), 9)
        .await
    {
        Response::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Every record value of partition 0 from `from`, and the high watermark.
async fn values_from(c: &mut Client, topic: &str, id: Uuid, from: i64) -> (Vec<Bytes>, i64) {
    match c.call(fetch_request(topic, id, from, 0, 0), 13).await {
        Response::Fetch(f) => {
            let p = &f.responses[0].partitions[0];
            assert_eq!(p.error_code, 0, "{p:?}");
            let records = p.records.clone().unwrap_or_default();
            let (batches, _) = skiff_records::RecordBatches::parse_fetch(records).expect("batches");
            let mut out = Vec::new();
            for b in batches.iter() {
                for r in b.records().expect("records") {
                    out.push(r.expect("record").value.expect("value"));
                }
            }
            (out, p.high_watermark)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Every record value of partition 0, and the high watermark.
async fn values(c: &mut Client, topic: &str, id: Uuid) -> (Vec<Bytes>, i64) {
    values_from(c, topic, id, 0).await
}

/// DescribeLogDirs v4: (log dir, error code, topics listed) for every directory.
async fn log_dirs(c: &mut Client) -> Vec<(String, i16, Vec<String>)> {
    let all = DescribeLogDirsRequest {
        topics: None,
        ..Default::default()
    };
    match c.call(all, 4).await {
        Response::DescribeLogDirs(r) => r
            .results
            .iter()
            .map(|d| {
                (
                    d.log_dir.to_string(),
                    d.error_code,
                    d.topics.iter().map(|t| t.name.to_string()).collect(),
                )
            })
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_failed_fdatasync_takes_only_its_partition_offline_until_a_restart() {
    let tb = TestBroker::start_with(|config| {
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await;
    let mut c = tb.client().await;
    let faulty = create_topic(&mut c, "syncfault").await;
    create_topic(&mut c, "syncfine").await;
    assert_eq!(produce(&mut c, "syncfault", -1, b"kept").await, (0, 0));

    faults::inject(Fault::Sync, "syncfault-0");
    // acks=all is never answered with a success when its fdatasync failed.
    let (code, _) = produce(&mut c, "syncfault", -1, b"unsynced").await;
    assert_eq!(code, error_codes::KAFKA_STORAGE_ERROR);
    // Offline now: acks=1 is refused too, while other partitions serve.
    assert_eq!(
        produce(&mut c, "syncfault", 1, b"refused").await.0,
        error_codes::KAFKA_STORAGE_ERROR
    );
    assert_eq!(produce(&mut c, "syncfine", -1, b"fine").await, (0, 0));
    let partition = tb
        .broker()
        .topic_by_name("syncfault")
        .expect("topic")
        .partitions[0]
        .clone();
    assert!(partition.is_offline());
    let admin = tb
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin");
    let (status, metrics) = common::http_get(admin, "/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("skiff_partitions_offline 1"), "{metrics}");
    // Reads of what it holds still work.
    let (read, _) = values(&mut c, "syncfault", faulty).await;
    assert_eq!(read.first().map(|v| &v[..]), Some(&b"kept"[..]));
    // DescribeLogDirs: the partition is an offline log directory of its own.
    let dirs = log_dirs(&mut c).await;
    let offline: Vec<_> = dirs.iter().filter(|d| d.1 != 0).collect();
    assert_eq!(offline.len(), 1, "{dirs:?}");
    assert!(offline[0].0.ends_with("syncfault-0"), "{dirs:?}");
    assert_eq!(offline[0].1, error_codes::KAFKA_STORAGE_ERROR);
    assert_eq!(offline[0].2, vec!["syncfault".to_string()]);
    assert!(dirs[0].2.contains(&"syncfine".to_string()));
    assert!(!dirs[0].2.contains(&"syncfault".to_string()));
    // Clearing the fault does not bring it back: what was written is not known to be durable.
    faults::clear("syncfault-0");
    assert_eq!(
        produce(&mut c, "syncfault", -1, b"still").await.0,
        error_codes::KAFKA_STORAGE_ERROR
    );
    drop(partition);

    // A restart recovers it, with the acknowledged record.
    let tb = tb.restart().await;
    let mut c = tb.client().await;
    assert!(
        !tb.broker()
            .topic_by_name("syncfault")
            .expect("topic")
            .partitions[0]
            .is_offline()
    );
    let (read, end) = values(&mut c, "syncfault", faulty).await;
    assert_eq!(read.first().map(|v| &v[..]), Some(&b"kept"[..]));
    assert_eq!(produce(&mut c, "syncfault", -1, b"after").await, (0, end));
    assert!(log_dirs(&mut c).await.iter().all(|d| d.1 == 0));
    tb.stop().await;
}

#[tokio::test]
async fn a_failed_segment_write_takes_only_its_partition_offline_and_loses_nothing_acknowledged() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let faulty = create_topic(&mut c, "writefault").await;
    create_topic(&mut c, "writefine").await;
    for (i, value) in [&b"a"[..], b"b"].into_iter().enumerate() {
        assert_eq!(produce(&mut c, "writefault", 1, value).await, (0, i as i64));
    }

    faults::inject(Fault::Write, "writefault-0");
    assert_eq!(
        produce(&mut c, "writefault", 1, b"lost").await.0,
        error_codes::KAFKA_STORAGE_ERROR
    );
    faults::clear("writefault-0");
    // Offline until a restart, though the fault is gone.
    assert_eq!(
        produce(&mut c, "writefault", -1, b"x").await.0,
        error_codes::KAFKA_STORAGE_ERROR
    );
    assert!(
        tb.broker()
            .topic_by_name("writefault")
            .expect("topic")
            .partitions[0]
            .is_offline()
    );
    assert_eq!(produce(&mut c, "writefine", -1, b"fine").await, (0, 0));

    let tb = tb.restart().await;
    let mut c = tb.client().await;
    let (read, end) = values(&mut c, "writefault", faulty).await;
    assert_eq!(
        read,
        vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]
    );
    assert_eq!(end, 2);
    assert_eq!(produce(&mut c, "writefault", -1, b"c").await, (0, 2));
    tb.stop().await;
}

#[tokio::test]
async fn a_failed_checkpoint_rename_fails_the_delete_records_request_only() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let id = create_topic(&mut c, "renamefault").await;
    for value in [&b"a"[..], b"b", b"c"] {
        assert_eq!(produce(&mut c, "renamefault", -1, value).await.0, 0);
    }
    let delete = |offset| DeleteRecordsRequest {
        topics: vec![DeleteRecordsTopic {
            name: "renamefault".into(),
            partitions: vec![DeleteRecordsPartition {
                partition_index: 0,
                offset,
                ..Default::default()
            }],
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    let low_watermark = |r: Response| match r {
        Response::DeleteRecords(r) => {
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.low_watermark)
        }
        other => panic!("unexpected {other:?}"),
    };

    faults::inject(Fault::Rename, "renamefault-0");
    let (code, _) = low_watermark(c.call(delete(2), 2).await);
    assert_eq!(code, error_codes::KAFKA_STORAGE_ERROR);
    // Nothing changed, and the partition still takes appends.
    let (read, _) = values(&mut c, "renamefault", id).await;
    assert_eq!(read.len(), 3);
    assert_eq!(produce(&mut c, "renamefault", -1, b"d").await, (0, 3));
    faults::clear("renamefault-0");
    assert_eq!(low_watermark(c.call(delete(2), 2).await), (0, 2));

    let tb = tb.restart().await;
    let mut c = tb.client().await;
    let (read, end) = values_from(&mut c, "renamefault", id, 2).await;
    assert_eq!(end, 4);
    assert_eq!(
        read,
        vec![Bytes::from_static(b"c"), Bytes::from_static(b"d")]
    );
    tb.stop().await;
}

/// The race of #13's topic churn, ordered by a held fdatasync: an acks=all produce whose records
/// were appended, and whose fdatasync is still running when its topic is deleted, must not be
/// acknowledged once the deletion was answered (its records are gone with the topic).
#[tokio::test]
async fn an_acks_all_produce_waiting_for_its_fdatasync_is_not_acknowledged_after_its_topic_is_deleted()
 {
    let tb = TestBroker::start().await;
    let mut admin = tb.client().await;
    create_topic(&mut admin, "heldsync").await;
    assert_eq!(produce(&mut admin, "heldsync", -1, b"first").await, (0, 0));

    faults::hold(Fault::Sync, "heldsync-0");
    // Released however the test ends: a held fdatasync would otherwise block shutdown.
    let hold = Released("heldsync-0");
    let mut producer = tb.client().await;
    let produced =
        tokio::spawn(async move { produce(&mut producer, "heldsync", -1, b"appended").await });
    // The produce's records are in the log and its fdatasync is blocked.
    let held = tokio::task::spawn_blocking(|| {
        faults::wait_held("heldsync-0", std::time::Duration::from_secs(30))
    })
    .await
    .expect("wait");
    assert!(held, "the produce's fdatasync never started");

    let deleted = match admin
        .call(
            DeleteTopicsRequest {
                topic_names: vec!["heldsync".into()],
                timeout_ms: 5000,
                ..Default::default()
            },
            5,
        )
        .await
    {
        Response::DeleteTopics(r) => r.responses,
        other => panic!("unexpected {other:?}"),
    };
    drop(hold);
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0].error_code, 0, "{deleted:?}");

    let (code, base_offset) = produced.await.expect("produce");
    assert_eq!(
        (code, base_offset),
        (error_codes::UNKNOWN_TOPIC_OR_PARTITION, -1),
        "acknowledged records of a topic deleted before they were durable"
    );
    tb.stop().await;
}

/// Releases a held failpoint when dropped.
struct Released(&'static str);

impl Drop for Released {
    fn drop(&mut self) {
        faults::release(self.0);
    }
}
