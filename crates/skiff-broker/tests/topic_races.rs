//! A topic deleted and re-created under the same name while producers write to it (issue #13,
//! finding 9: an acknowledged record was gone after a restart though its topic existed).
//!
//! The path: DeleteTopics removed the topic from the metadata, then removed its directory by
//! name; a Metadata request auto-creating the same name in between (it did not take the admin
//! lock) opened that very directory for the new topic, and the deletion then removed it from
//! under the new topic, whose acknowledged appends went to unlinked files. A produce that had
//! looked up the old partition before the deletion could also be acknowledged into the removed
//! files. Now auto-creation is serialised with deletion, directories are claimed by topic ID
//! (markers), and appends to a deleted partition are refused.

mod common;

use common::{TIMEOUT, TestBroker, batch, create_topic, fetch_request, produce_request};
use skiff_protocol::Response;
use skiff_protocol::generated::DeleteTopicsRequest;
use skiff_protocol::generated::delete_topics_request::DeleteTopicState;

const ROUNDS: usize = 25;
const NAME: &str = "race";

async fn delete(c: &mut common::Client) {
    let request = DeleteTopicsRequest {
        topics: vec![DeleteTopicState {
            name: Some(NAME.into()),
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    match c.call(request, 6).await {
        Response::DeleteTopics(_) => {}
        other => panic!("unexpected {other:?}"),
    }
}

/// Produces one record with acks=all; the acknowledged offset, if any.
async fn produce(c: &mut common::Client, value: &[u8]) -> Option<i64> {
    match c
        .call(produce_request(NAME, 0, -1, batch(&[value])), 9)
        .await
    {
        Response::Produce(r) => {
            let p = r.responses.first()?.partition_responses.first()?;
            (p.error_code == 0).then_some(p.base_offset)
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_and_auto_creating_one_name_at_once_loses_no_acknowledged_record() {
    let broker = TestBroker::start().await;
    let (mut a, mut b, mut c) = (
        broker.client().await,
        broker.client().await,
        broker.client().await,
    );
    for round in 0..ROUNDS {
        create_topic(&mut a, NAME).await;
        // At once: a deletion, an auto-creation of the same name, and a produce.
        let value = format!("round-{round}");
        let (_, _, acked) = tokio::time::timeout(TIMEOUT, async {
            tokio::join!(
                delete(&mut a),
                create_topic(&mut b, NAME),
                produce(&mut c, value.as_bytes())
            )
        })
        .await
        .expect("the race finished");
        // Whatever won, the live topic owns its directory, and what was acknowledged to it after
        // the race settles is readable.
        let id = create_topic(&mut b, NAME).await;
        let live = broker.broker().topic_by_name(NAME).expect("live topic");
        assert_eq!(live.info.id, id);
        let dir = broker.data_dir().join(format!("{NAME}-0"));
        let marker = std::fs::read_to_string(dir.join("skiff-partition.json"))
            .unwrap_or_else(|e| panic!("round {round}: the live topic's directory is gone: {e}"));
        assert!(marker.contains(&id.to_string()), "round {round}: {marker}");
        let offset = produce(&mut c, b"after").await.expect("acknowledged");
        let _ = acked;
        match c.call(fetch_request(NAME, id, offset, 0, 0), 13).await {
            Response::Fetch(f) => {
                let records = f.responses[0].partitions[0]
                    .records
                    .clone()
                    .unwrap_or_default();
                assert!(
                    !records.is_empty(),
                    "round {round}: acknowledged record not readable"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // And after a restart, the last incarnation still holds its acknowledged records.
    let id = broker.broker().topic_by_name(NAME).expect("live").info.id;
    let end = broker
        .broker()
        .topic_by_name(NAME)
        .expect("live")
        .partitions[0]
        .log_end_offset();
    let broker = broker.restart().await;
    let live = broker
        .broker()
        .topic_by_name(NAME)
        .expect("live after restart");
    assert_eq!(live.info.id, id);
    assert_eq!(live.partitions[0].log_end_offset(), end);
    broker.stop().await;
}
