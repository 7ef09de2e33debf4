//! The KIP-932 share group offset admin APIs over TCP against a real broker
//! (`group.share.enable = true`): DescribeShareGroupOffsets (start offsets and Kafka's lag after
//! records were acknowledged), AlterShareGroupOffsets (refused while the group has members, then
//! where the next member starts), DeleteShareGroupOffsets, a restart, and bad input.

mod common;

use common::create_topic_with_partitions as create_topic;

use common::{Client, TestBroker, batch, produce_request};
use skiff_protocol::generated::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use skiff_protocol::generated::alter_share_group_offsets_response::AlterShareGroupOffsetsResponse;
use skiff_protocol::generated::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use skiff_protocol::generated::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponse;
use skiff_protocol::generated::describe_share_group_offsets_request::{
    DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
};
use skiff_protocol::generated::describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup;
use skiff_protocol::generated::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic,
};
use skiff_protocol::generated::{
    AlterShareGroupOffsetsRequest, ConsumerGroupHeartbeatRequest, DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest, ShareFetchRequest, ShareGroupHeartbeatRequest,
};
use skiff_protocol::{Response, Uuid, error_codes};

const TOPIC: &str = "work";
const GROUP: &str = "workers";
const ACCEPT: i8 = 1;
const REJECT: i8 = 3;

fn share_config(config: &mut skiff_broker::BrokerConfig) {
    config.share_groups_enabled = true;
}

/// Produces `n` single-record batches to partition 0.
async fn produce(c: &mut Client, n: usize) {
    for i in 0..n {
        let value = format!("r{i}");
        let Response::Produce(p) = c
            .call(produce_request(TOPIC, 0, -1, batch(&[value.as_bytes()])), 9)
            .await
        else {
            panic!("not a produce response");
        };
        assert_eq!(p.responses[0].partition_responses[0].error_code, 0);
    }
}

async fn heartbeat(c: &mut Client, member: &str, epoch: i32) {
    let request = ShareGroupHeartbeatRequest {
        group_id: GROUP.into(),
        member_id: member.into(),
        member_epoch: epoch,
        subscribed_topic_names: (epoch == 0).then(|| vec![TOPIC.into()]),
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::ShareGroupHeartbeat(r) => assert_eq!(r.error_code, 0, "{:?}", r.error_message),
        other => panic!("unexpected {other:?}"),
    }
}

/// One ShareFetch of partition 0 in a share session at `epoch`, with acknowledgements; the
/// acquired ranges as (first, last, delivery count).
async fn fetch(
    c: &mut Client,
    member: &str,
    epoch: i32,
    topic: Uuid,
    acks: &[(i64, i64, i8)],
    max_records: i32,
) -> Vec<(i64, i64, i16)> {
    let request = ShareFetchRequest {
        group_id: Some(GROUP.into()),
        member_id: Some(member.into()),
        share_session_epoch: epoch,
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 1 << 20,
        max_records,
        batch_size: 500,
        topics: vec![FetchTopic {
            topic_id: topic,
            partitions: vec![FetchPartition {
                partition_index: 0,
                acknowledgement_batches: acks
                    .iter()
                    .map(|(first, last, ack)| AcknowledgementBatch {
                        first_offset: *first,
                        last_offset: *last,
                        acknowledge_types: vec![*ack],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::ShareFetch(r) = c.call(request, 2).await else {
        panic!("not a ShareFetch response");
    };
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .inspect(|p| {
            assert_eq!(p.error_code, 0, "{:?}", p.error_message);
            assert_eq!(
                p.acknowledge_error_code, 0,
                "{:?}",
                p.acknowledge_error_message
            );
        })
        .flat_map(|p| &p.acquired_records)
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect()
}

async fn describe(
    c: &mut Client,
    group: &str,
    topics: Option<&[(&str, &[i32])]>,
    version: i16,
) -> DescribeShareGroupOffsetsResponseGroup {
    let request = DescribeShareGroupOffsetsRequest {
        groups: vec![DescribeShareGroupOffsetsRequestGroup {
            group_id: group.into(),
            topics: topics.map(|topics| {
                topics
                    .iter()
                    .map(|(name, partitions)| DescribeShareGroupOffsetsRequestTopic {
                        topic_name: (*name).into(),
                        partitions: partitions.to_vec(),
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, version).await {
        Response::DescribeShareGroupOffsets(mut r) => {
            assert_eq!(r.groups.len(), 1);
            r.groups.remove(0)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Each described partition as (topic, topic ID, partition, start offset, leader epoch, lag,
/// error code).
type Described = Vec<(String, Uuid, i32, i64, i32, i64, i16)>;

fn described(group: &DescribeShareGroupOffsetsResponseGroup) -> Described {
    assert_eq!(group.error_code, 0, "{:?}", group.error_message);
    group
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.topic_name.to_string(),
                    t.topic_id,
                    p.partition_index,
                    p.start_offset,
                    p.leader_epoch,
                    p.lag,
                    p.error_code,
                )
            })
        })
        .collect()
}

async fn alter(
    c: &mut Client,
    group: &str,
    topics: &[(&str, &[(i32, i64)])],
) -> AlterShareGroupOffsetsResponse {
    let request = AlterShareGroupOffsetsRequest {
        group_id: group.into(),
        topics: topics
            .iter()
            .map(|(name, partitions)| AlterShareGroupOffsetsRequestTopic {
                topic_name: (*name).into(),
                partitions: partitions
                    .iter()
                    .map(|(p, o)| AlterShareGroupOffsetsRequestPartition {
                        partition_index: *p,
                        start_offset: *o,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    match c.call(request, 0).await {
        Response::AlterShareGroupOffsets(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// Each altered partition as (topic, partition, error code).
fn altered(r: &AlterShareGroupOffsetsResponse) -> Vec<(String, i32, i16)> {
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    r.responses
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.topic_name.to_string(), p.partition_index, p.error_code))
        })
        .collect()
}

async fn delete(c: &mut Client, group: &str, topics: &[&str]) -> DeleteShareGroupOffsetsResponse {
    let request = DeleteShareGroupOffsetsRequest {
        group_id: group.into(),
        topics: topics
            .iter()
            .map(|t| DeleteShareGroupOffsetsRequestTopic {
                topic_name: (*t).into(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    match c.call(request, 0).await {
        Response::DeleteShareGroupOffsets(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// Describe follows the acknowledgements (start offset and Kafka's lag: high watermark - start
/// - records already acknowledged or archived); alter is refused while the group has a member,
/// then sets where the next member starts; delete forgets the state; and all of it survives a
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_alter_and_delete_share_group_offsets() {
    let broker = TestBroker::start_with(share_config).await;
    let mut admin = broker.client().await;
    let topic = create_topic(&mut admin, TOPIC, 1).await;
    let mut member = broker.client().await;
    heartbeat(&mut member, "m1", 0).await;
    produce(&mut admin, 10).await;

    // m1 takes 0-3, accepts 0-1 and 3 and rejects nothing yet: the start offset moves to 2 (2
    // is still held), 3 is done, so the lag is 10 - 2 - 1 = 7.
    assert_eq!(
        fetch(&mut member, "m1", 0, topic, &[], 4).await,
        vec![(0, 3, 1)]
    );
    assert!(
        fetch(
            &mut member,
            "m1",
            1,
            topic,
            &[(0, 1, ACCEPT), (3, 3, ACCEPT)],
            0
        )
        .await
        .is_empty()
    );
    let all = describe(&mut admin, GROUP, None, 1).await;
    assert_eq!(described(&all), vec![(TOPIC.into(), topic, 0, 2, 0, 7, 0)]);
    // v0 carries no lag (the default, -1).
    let v0 = describe(&mut admin, GROUP, Some(&[(TOPIC, &[0])]), 0).await;
    assert_eq!(described(&v0), vec![(TOPIC.into(), topic, 0, 2, 0, -1, 0)]);

    // Named partitions: one that does not exist and an unknown topic have no offsets (-1), as
    // have the partitions of a group that does not exist; no error, as Kafka.
    let named = describe(
        &mut admin,
        GROUP,
        Some(&[(TOPIC, &[0, 9]), ("nope", &[0])]),
        1,
    )
    .await;
    assert_eq!(
        described(&named),
        vec![
            (TOPIC.into(), topic, 0, 2, 0, 7, 0),
            (TOPIC.into(), topic, 9, -1, 0, -1, 0),
            ("nope".into(), Uuid::ZERO, 0, -1, 0, -1, 0),
        ]
    );
    let nobody = describe(&mut admin, "nobody", Some(&[(TOPIC, &[0])]), 1).await;
    assert_eq!(
        described(&nobody),
        vec![(TOPIC.into(), topic, 0, -1, 0, -1, 0)]
    );
    assert!(described(&describe(&mut admin, "nobody", None, 1).await).is_empty());
    assert!(described(&describe(&mut admin, GROUP, Some(&[]), 1).await).is_empty());

    // m1 rejects 2 (archived): the start moves to 4.
    assert!(
        fetch(&mut member, "m1", 2, topic, &[(2, 2, REJECT)], 0)
            .await
            .is_empty()
    );
    let all = describe(&mut admin, GROUP, None, 1).await;
    assert_eq!(described(&all), vec![(TOPIC.into(), topic, 0, 4, 0, 6, 0)]);

    // A member: alter and delete are refused as a whole.
    let r = alter(&mut admin, GROUP, &[(TOPIC, &[(0, 8)])]).await;
    assert_eq!(
        (r.error_code, r.error_message.as_deref()),
        (
            error_codes::NON_EMPTY_GROUP,
            Some("The group is not empty.")
        )
    );
    assert!(r.responses.is_empty());
    let r = delete(&mut admin, GROUP, &[TOPIC]).await;
    assert_eq!(r.error_code, error_codes::NON_EMPTY_GROUP);

    // Empty: alter to 8; the next member starts there.
    heartbeat(&mut member, "m1", -1).await;
    let r = alter(&mut admin, GROUP, &[(TOPIC, &[(0, 8)])]).await;
    assert_eq!(altered(&r), vec![(TOPIC.into(), 0, 0)]);
    assert_eq!(r.responses[0].topic_id, topic);
    let all = describe(&mut admin, GROUP, None, 1).await;
    assert_eq!(described(&all), vec![(TOPIC.into(), topic, 0, 8, 0, 2, 0)]);
    let mut next = broker.client().await;
    heartbeat(&mut next, "m2", 0).await;
    assert_eq!(
        fetch(&mut next, "m2", 0, topic, &[], 10).await,
        vec![(8, 9, 1)]
    );
    heartbeat(&mut next, "m2", -1).await;

    // A restart keeps the altered state.
    drop((member, next, admin));
    let broker = broker.restart_with(share_config).await;
    let mut admin = broker.client().await;
    let all = describe(&mut admin, GROUP, None, 1).await;
    assert_eq!(
        described(&all),
        vec![(TOPIC.into(), topic, 0, 8, 1, 2, 0)],
        "epoch 1 after the restart"
    );
    let r = alter(&mut admin, GROUP, &[(TOPIC, &[(0, 3)])]).await;
    assert_eq!(altered(&r), vec![(TOPIC.into(), 0, 0)]);
    let mut member = broker.client().await;
    heartbeat(&mut member, "m3", 0).await;
    assert_eq!(
        fetch(&mut member, "m3", 0, topic, &[], 2).await,
        vec![(3, 4, 1)]
    );
    heartbeat(&mut member, "m3", -1).await;

    // Delete: the state is gone (-1), and deleting again finds nothing to delete.
    let r = delete(&mut admin, GROUP, &[TOPIC]).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(
        r.responses
            .iter()
            .map(|t| (t.topic_name.to_string(), t.topic_id, t.error_code))
            .collect::<Vec<_>>(),
        vec![(TOPIC.into(), topic, 0)]
    );
    assert!(described(&describe(&mut admin, GROUP, None, 1).await).is_empty());
    let named = describe(&mut admin, GROUP, Some(&[(TOPIC, &[0])]), 1).await;
    assert_eq!(
        described(&named),
        vec![(TOPIC.into(), topic, 0, -1, 0, -1, 0)]
    );
    let r = delete(&mut admin, GROUP, &[TOPIC]).await;
    assert_eq!(
        (
            r.responses[0].error_code,
            r.responses[0].error_message.as_deref()
        ),
        (
            error_codes::UNKNOWN_TOPIC_OR_PARTITION,
            Some("There is no offset information to delete.")
        )
    );
    // The next member has the partition initialized afresh (`latest`: the high watermark).
    heartbeat(&mut member, "m4", 0).await;
    let named = describe(&mut admin, GROUP, Some(&[(TOPIC, &[0])]), 1).await;
    assert_eq!(
        described(&named),
        vec![(TOPIC.into(), topic, 0, 10, 1, 0, 0)]
    );
    // After a restart it is still the fresh state.
    drop((member, admin));
    let broker = broker.restart_with(share_config).await;
    let mut admin = broker.client().await;
    let all = describe(&mut admin, GROUP, None, 1).await;
    assert_eq!(described(&all), vec![(TOPIC.into(), topic, 0, 10, 2, 0, 0)]);
    broker.stop().await;
}

/// Bad input gets Kafka's errors: unknown topics and partitions, a negative start offset (Skiff:
/// INVALID_REQUEST), a consumer group's ID, an unknown group, an empty group ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_kafkas_errors() {
    let broker = TestBroker::start_with(share_config).await;
    let mut c = broker.client().await;
    let topic = create_topic(&mut c, TOPIC, 2).await;

    // A new group is created by the alter; what cannot be altered is refused per partition.
    let r = alter(
        &mut c,
        "fresh",
        &[(TOPIC, &[(0, 5), (1, -1), (2, 0)]), ("nope", &[(0, 1)])],
    )
    .await;
    assert_eq!(
        altered(&r),
        vec![
            ("nope".into(), 0, error_codes::UNKNOWN_TOPIC_OR_PARTITION),
            (TOPIC.into(), 0, 0),
            (TOPIC.into(), 1, error_codes::INVALID_REQUEST),
            (TOPIC.into(), 2, error_codes::UNKNOWN_TOPIC_OR_PARTITION),
        ]
    );
    let nope = &r.responses[0];
    assert_eq!(nope.topic_id, Uuid::ZERO);
    assert_eq!(
        nope.partitions[0].error_message.as_deref(),
        Some("This server does not host this topic-partition.")
    );
    let all = describe(&mut c, "fresh", None, 1).await;
    assert_eq!(described(&all), vec![(TOPIC.into(), topic, 0, 5, 0, 0, 0)]);

    // A consumer group's ID.
    let request = ConsumerGroupHeartbeatRequest {
        group_id: "consumers".into(),
        member_id: "c1".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 5000,
        subscribed_topic_names: Some(vec![TOPIC.into()]),
        topic_partitions: Some(vec![]),
        ..Default::default()
    };
    let Response::ConsumerGroupHeartbeat(r) = c.call(request, 1).await else {
        panic!("not a ConsumerGroupHeartbeat response");
    };
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let r = alter(&mut c, "consumers", &[(TOPIC, &[(0, 1)])]).await;
    assert_eq!(
        (r.error_code, r.error_message.as_deref()),
        (
            error_codes::GROUP_ID_NOT_FOUND,
            Some("Group consumers is not a share group.")
        )
    );
    let r = delete(&mut c, "consumers", &[TOPIC]).await;
    assert_eq!(
        (r.error_code, r.error_message.as_deref()),
        (
            error_codes::GROUP_ID_NOT_FOUND,
            Some("Group consumers is not a share group.")
        )
    );
    assert!(described(&describe(&mut c, "consumers", None, 1).await).is_empty());

    // An unknown group, an empty group ID, an unknown topic.
    let r = delete(&mut c, "nobody", &[TOPIC]).await;
    assert_eq!(
        (r.error_code, r.error_message.as_deref()),
        (
            error_codes::GROUP_ID_NOT_FOUND,
            Some("Group nobody not found.")
        )
    );
    let r = delete(&mut c, "", &[TOPIC]).await;
    assert_eq!(r.error_code, error_codes::INVALID_GROUP_ID);
    let r = alter(&mut c, "", &[(TOPIC, &[(0, 1)])]).await;
    assert_eq!(r.error_code, error_codes::INVALID_GROUP_ID);
    let r = delete(&mut c, "fresh", &["nope"]).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(
        r.responses[0].error_code,
        error_codes::UNKNOWN_TOPIC_OR_PARTITION
    );
    // The connection is still good.
    let all = describe(&mut c, "fresh", None, 1).await;
    assert_eq!(described(&all).len(), 1);
    broker.stop().await;
}
