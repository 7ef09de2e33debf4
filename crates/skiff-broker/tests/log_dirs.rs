//! DescribeLogDirs over TCP: the data directory, partition sizes as on disk, the filter, and
//! the file system's space (v4).

mod common;

use common::{TestBroker, batch, create_topic, produce_request};
use skiff_protocol::Response;
use skiff_protocol::generated::DescribeLogDirsRequest;
use skiff_protocol::generated::describe_log_dirs_request::DescribableLogDirTopic;
use skiff_protocol::generated::describe_log_dirs_response::DescribeLogDirsResponse;

async fn describe(
    c: &mut common::Client,
    version: i16,
    topics: Option<Vec<(&str, Vec<i32>)>>,
) -> DescribeLogDirsResponse {
    let request = DescribeLogDirsRequest {
        topics: topics.map(|topics| {
            topics
                .into_iter()
                .map(|(topic, partitions)| DescribableLogDirTopic {
                    topic: topic.into(),
                    partitions,
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::DescribeLogDirs(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// The bytes of a partition's segment files, as the file system counts them.
fn segment_bytes(dir: &std::path::Path) -> i64 {
    std::fs::read_dir(dir)
        .expect("partition dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| std::fs::metadata(p).expect("metadata").len() as i64)
        .sum()
}

#[tokio::test]
async fn describe_log_dirs_every_version() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    create_topic(&mut c, "sized").await;
    create_topic(&mut c, "empty").await;
    for i in 0..10 {
        let value = format!("record-{i:04}").repeat(20);
        match c
            .call(
                produce_request("sized", 0, -1, batch(&[value.as_bytes()])),
                9,
            )
            .await
        {
            Response::Produce(r) => {
                assert_eq!(r.responses[0].partition_responses[0].error_code, 0)
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let data_dir = tb.data_dir().canonicalize().expect("data dir");
    let on_disk = segment_bytes(&data_dir.join("sized-0"));
    assert!(on_disk > 2000, "{on_disk}");

    for v in 1..=4i16 {
        // Null: every partition.
        let r = describe(&mut c, v, None).await;
        assert_eq!(r.error_code, 0);
        assert_eq!(r.results.len(), 1, "v{v} {r:?}");
        let dir = &r.results[0];
        assert_eq!(dir.error_code, 0);
        assert_eq!(&*dir.log_dir, data_dir.to_str().expect("utf-8"));
        let mut names: Vec<&str> = dir.topics.iter().map(|t| &*t.name).collect();
        names.sort_unstable();
        assert_eq!(names, ["empty", "sized"]);
        let sized = dir
            .topics
            .iter()
            .find(|t| &*t.name == "sized")
            .expect("sized");
        assert_eq!(sized.partitions.len(), 1);
        let p = &sized.partitions[0];
        assert_eq!(p.partition_index, 0);
        assert_eq!(p.partition_size, on_disk, "v{v}");
        assert_eq!(p.offset_lag, 0);
        assert!(!p.is_future_key);
        let empty = dir
            .topics
            .iter()
            .find(|t| &*t.name == "empty")
            .expect("empty");
        assert_eq!(empty.partitions[0].partition_size, 0);
        if v >= 4 {
            assert!(dir.total_bytes > 0, "{dir:?}");
            assert!(dir.usable_bytes >= 0 && dir.usable_bytes <= dir.total_bytes);
        } else {
            assert_eq!((dir.total_bytes, dir.usable_bytes), (-1, -1));
        }

        // A filter: what the broker does not host is left out, without an error; a partition
        // asked for twice is answered once.
        let r = describe(
            &mut c,
            v,
            Some(vec![("sized", vec![0, 0, 7, -1]), ("missing", vec![0])]),
        )
        .await;
        let dir = &r.results[0];
        assert_eq!(dir.error_code, 0);
        assert_eq!(dir.topics.len(), 1, "v{v} {dir:?}");
        assert_eq!(&*dir.topics[0].name, "sized");
        assert_eq!(dir.topics[0].partitions.len(), 1);
        assert_eq!(dir.topics[0].partitions[0].partition_size, on_disk);

        // An empty filter: the directory, no topics.
        let r = describe(&mut c, v, Some(Vec::new())).await;
        assert_eq!(r.results.len(), 1);
        assert!(r.results[0].topics.is_empty());
    }
    tb.stop().await;
}
