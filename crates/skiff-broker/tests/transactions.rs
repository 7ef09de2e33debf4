//! Transactions over TCP against a real broker: the coordinator's requests, markers, the last
//! stable offset, read_committed fetches with their aborted transactions, transactional offset
//! commits, timeouts and restarts.

mod common;

use std::time::Duration;

use common::txn::{
    add_offsets, add_partition, contents, end, fetch, init, latest, plain_batch, produce,
    stable_offset, txn_batch, txn_commit_offset,
};
use common::{Client, TestBroker, create_topic};
use skiff_protocol::generated::describe_producers_request::TopicRequest;
use skiff_protocol::generated::offset_fetch_request::OffsetFetchRequestTopic;
use skiff_protocol::generated::{
    DescribeProducersRequest, DescribeTransactionsRequest, FindCoordinatorRequest,
    ListTransactionsRequest, OffsetFetchRequest,
};
use skiff_protocol::{Response, error_codes};

#[tokio::test]
async fn commit_abort_last_stable_offset_and_read_committed() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    create_topic(&mut c, "tx").await;

    // The broker coordinates transactions.
    match c
        .call(
            FindCoordinatorRequest {
                key_type: 1,
                coordinator_keys: vec!["t1".into()],
                ..Default::default()
            },
            4,
        )
        .await
    {
        Response::FindCoordinator(r) => {
            assert_eq!(r.coordinators[0].error_code, 0);
            assert_eq!(r.coordinators[0].port, i32::from(broker.addr.port()));
        }
        other => panic!("unexpected {other:?}"),
    }
    let producer = init(&mut c, "t1", 60_000).await;

    // A transactional batch for a partition not added to the transaction is refused.
    let (code, _) = produce(&mut c, Some("t1"), "tx", txn_batch(producer, 0, &[b"x"])).await;
    assert_eq!(code, error_codes::INVALID_TXN_STATE);

    produce(&mut c, None, "tx", plain_batch(&[b"before"])).await; // offset 0
    assert_eq!(add_partition(&mut c, "t1", producer, "tx").await, 0);
    let (code, first) = produce(
        &mut c,
        Some("t1"),
        "tx",
        txn_batch(producer, 0, &[b"a", b"b"]),
    )
    .await;
    assert_eq!((code, first), (0, 1));
    produce(&mut c, None, "tx", plain_batch(&[b"after"])).await; // offset 3

    // Open transaction: read_committed stops at its first offset, read_uncommitted does not.
    let committed = fetch(&mut c, "tx", 0, true).await;
    assert_eq!(committed.last_stable_offset, 1);
    assert_eq!(committed.high_watermark, 4);
    assert_eq!(contents(&committed).0, vec![(0, b"before".to_vec())]);
    let uncommitted = fetch(&mut c, "tx", 0, false).await;
    assert_eq!(contents(&uncommitted).0.len(), 4);
    assert_eq!(
        fetch(&mut c, "tx", 1, true).await.records.map(|r| r.len()),
        Some(0)
    );
    assert_eq!(latest(&mut c, "tx", true).await, 1);
    assert_eq!(latest(&mut c, "tx", false).await, 4);

    // Commit: a marker at 4, everything readable.
    assert_eq!(end(&mut c, "t1", producer, true).await, 0);
    assert_eq!(
        end(&mut c, "t1", producer, true).await,
        0,
        "a retried commit succeeds"
    );
    let committed = fetch(&mut c, "tx", 0, true).await;
    assert_eq!(committed.last_stable_offset, 5);
    let (data, markers) = contents(&committed);
    assert_eq!(data.len(), 4);
    assert_eq!(markers, vec![4]);
    assert_eq!(
        committed.aborted_transactions.as_deref().map(<[_]>::len),
        Some(0)
    );

    // An aborted transaction is listed for read_committed readers of its range.
    assert_eq!(add_partition(&mut c, "t1", producer, "tx").await, 0);
    let (_, aborted_first) =
        produce(&mut c, Some("t1"), "tx", txn_batch(producer, 2, &[b"no"])).await;
    assert_eq!(aborted_first, 5);
    assert_eq!(end(&mut c, "t1", producer, false).await, 0);
    let r = fetch(&mut c, "tx", 5, true).await;
    let aborted = r.aborted_transactions.clone().expect("listed");
    assert_eq!(aborted.len(), 1);
    assert_eq!(
        (aborted[0].producer_id, aborted[0].first_offset),
        (producer.0, 5)
    );
    assert_eq!(contents(&r).1, vec![6], "the abort marker");
    // Past the abort marker it is no longer listed; read_uncommitted never lists any.
    assert!(
        fetch(&mut c, "tx", 7, true)
            .await
            .aborted_transactions
            .expect("list")
            .is_empty()
    );
    assert!(
        fetch(&mut c, "tx", 5, false)
            .await
            .aborted_transactions
            .is_none()
    );

    // A late batch after the end is refused: it would open a transaction nothing closes.
    let (code, _) = produce(&mut c, Some("t1"), "tx", txn_batch(producer, 3, &[b"late"])).await;
    assert_eq!(code, error_codes::INVALID_TXN_STATE);
    assert_eq!(latest(&mut c, "tx", true).await, 7);

    // The admin views.
    match c
        .call(
            DescribeTransactionsRequest {
                transactional_ids: vec!["t1".into(), "nope".into()],
                ..Default::default()
            },
            0,
        )
        .await
    {
        Response::DescribeTransactions(r) => {
            assert_eq!(r.transaction_states[0].error_code, 0);
            assert_eq!(&*r.transaction_states[0].transaction_state, "CompleteAbort");
            assert_eq!(r.transaction_states[0].producer_id, producer.0);
            assert_eq!(
                r.transaction_states[1].error_code,
                error_codes::TRANSACTIONAL_ID_NOT_FOUND
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    match c
        .call(
            ListTransactionsRequest {
                state_filters: vec!["CompleteAbort".into(), "Bogus".into()],
                duration_filter: -1,
                ..Default::default()
            },
            1,
        )
        .await
    {
        Response::ListTransactions(r) => {
            assert_eq!(r.transaction_states.len(), 1);
            assert_eq!(&*r.transaction_states[0].transactional_id, "t1");
            assert_eq!(r.unknown_state_filters.len(), 1);
        }
        other => panic!("unexpected {other:?}"),
    }
    // Producer ID filter; the duration filter (v1) lists only transactions open longer.
    let other = init(&mut c, "t2", 60_000).await;
    assert_eq!(add_partition(&mut c, "t2", other, "tx").await, 0);
    for (filters, want) in [
        (
            ListTransactionsRequest {
                producer_id_filters: vec![other.0],
                duration_filter: -1,
                ..Default::default()
            },
            vec!["t2"],
        ),
        (
            ListTransactionsRequest {
                state_filters: vec!["Ongoing".into()],
                duration_filter: -1,
                ..Default::default()
            },
            vec!["t2"],
        ),
        (
            ListTransactionsRequest {
                duration_filter: 3_600_000,
                ..Default::default()
            },
            vec![],
        ),
    ] {
        let got = match c.call(filters, 1).await {
            Response::ListTransactions(r) => r
                .transaction_states
                .iter()
                .map(|t| t.transactional_id.to_string())
                .collect::<Vec<_>>(),
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(got, want);
    }
    broker.stop().await;
}

#[tokio::test]
async fn a_new_producer_fences_the_old_one_and_aborts_its_transaction() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let old = open_transaction(&mut c, "fence", "tf", 60_000, b"zombie").await;
    assert_eq!(latest(&mut c, "fence", true).await, 0);
    // DescribeProducers shows the open transaction (what find-hanging tools read).
    let describe = DescribeProducersRequest {
        topics: vec![TopicRequest {
            name: "fence".into(),
            partition_indexes: vec![0, 7],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(describe, 0).await {
        Response::DescribeProducers(r) => {
            let parts = &r.topics[0].partitions;
            assert_eq!(parts[0].error_code, 0);
            let p = &parts[0].active_producers[0];
            assert_eq!(
                (
                    p.producer_id,
                    p.producer_epoch,
                    p.last_sequence,
                    p.current_txn_start_offset
                ),
                (old.0, i32::from(old.1), 0, 0)
            );
            assert_eq!(parts[1].error_code, error_codes::UNKNOWN_TOPIC_OR_PARTITION);
        }
        other => panic!("unexpected {other:?}"),
    }

    let new = init(&mut c, "tf", 60_000).await;
    assert_eq!(new.0, old.0);
    assert!(new.1 > old.1);
    // The old transaction was aborted: read_committed moves past it and lists it.
    assert_eq!(latest(&mut c, "fence", true).await, 2);
    let r = fetch(&mut c, "fence", 0, true).await;
    assert_eq!(r.aborted_transactions.expect("list").len(), 1);
    // The old producer is fenced everywhere.
    assert_eq!(
        add_partition(&mut c, "tf", old, "fence").await,
        error_codes::PRODUCER_FENCED
    );
    assert_eq!(
        end(&mut c, "tf", old, true).await,
        error_codes::PRODUCER_FENCED
    );
    let (code, _) = produce(&mut c, Some("tf"), "fence", txn_batch(old, 1, &[b"late"])).await;
    assert_eq!(code, error_codes::INVALID_PRODUCER_EPOCH);
    broker.stop().await;
}

async fn committed_offset(c: &mut Client, group: &str, topic: &str) -> i64 {
    let request = OffsetFetchRequest {
        group_id: group.into(),
        topics: Some(vec![OffsetFetchRequestTopic {
            name: topic.into(),
            partition_indexes: vec![0],
            ..Default::default()
        }]),
        ..Default::default()
    };
    match c.call(request, 5).await {
        Response::OffsetFetch(r) => r.topics[0].partitions[0].committed_offset,
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn transactional_offsets_apply_only_on_commit() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    create_topic(&mut c, "input").await;
    let p = init(&mut c, "to", 60_000).await;
    // Offsets for a group not added to the transaction are refused.
    assert_eq!(
        txn_commit_offset(&mut c, "to", p, "g", "input", 5).await,
        error_codes::INVALID_TXN_STATE
    );
    assert_eq!(add_offsets(&mut c, "to", p, "g").await, 0);
    assert_eq!(txn_commit_offset(&mut c, "to", p, "g", "input", 5).await, 0);
    assert_eq!(
        committed_offset(&mut c, "g", "input").await,
        -1,
        "not before the commit"
    );
    // KIP-447: a consumer asking for stable offsets is told to retry while one is pending.
    assert_eq!(
        stable_offset(&mut c, "g", "input").await,
        (-1, 88),
        "UNSTABLE_OFFSET_COMMIT"
    );
    assert_eq!(end(&mut c, "to", p, true).await, 0);
    assert_eq!(committed_offset(&mut c, "g", "input").await, 5);
    assert_eq!(stable_offset(&mut c, "g", "input").await, (5, 0));

    assert_eq!(add_offsets(&mut c, "to", p, "g").await, 0);
    assert_eq!(txn_commit_offset(&mut c, "to", p, "g", "input", 9).await, 0);
    assert_eq!(stable_offset(&mut c, "g", "input").await, (-1, 88));
    assert_eq!(end(&mut c, "to", p, false).await, 0);
    assert_eq!(
        committed_offset(&mut c, "g", "input").await,
        5,
        "an abort drops them"
    );
    assert_eq!(stable_offset(&mut c, "g", "input").await, (5, 0));
    broker.stop().await;
}

/// Creates `topic`, opens a transaction of `tid` on its partition 0 with one record (offset 0)
/// and appends a plain record behind it (offset 1); returns the producer ID and epoch.
async fn open_transaction_with_a_record_behind(
    c: &mut Client,
    topic: &str,
    tid: &str,
    timeout_ms: i32,
    open: &[u8],
    behind: &[u8],
) -> (i64, i16) {
    let p = open_transaction(c, topic, tid, timeout_ms, open).await;
    assert_eq!(
        produce(c, None, topic, plain_batch(&[behind])).await,
        (0, 1)
    );
    p
}

/// Creates `topic` and opens a transaction of `tid` on its partition 0 with one record (offset
/// 0); returns the producer ID and epoch.
async fn open_transaction(
    c: &mut Client,
    topic: &str,
    tid: &str,
    timeout_ms: i32,
    value: &[u8],
) -> (i64, i16) {
    create_topic(c, topic).await;
    let p = init(c, tid, timeout_ms).await;
    assert_eq!(add_partition(c, tid, p, topic).await, 0);
    assert_eq!(
        produce(c, Some(tid), topic, txn_batch(p, 0, &[value])).await,
        (0, 0)
    );
    p
}

#[tokio::test]
async fn open_transactions_survive_a_restart_and_time_out() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let p =
        open_transaction_with_a_record_behind(&mut c, "tr", "slow", 1_000, b"open", b"plain").await;
    drop(c);
    // Restarted within the timeout the transaction is still open (coordinator and partition
    // state both restored)...
    let broker = broker.restart().await;
    let mut c = broker.client().await;
    let r = fetch(&mut c, "tr", 0, true).await;
    if r.last_stable_offset == 0 {
        assert!(
            contents(&r).0.is_empty(),
            "nothing of the open transaction is readable"
        );
        assert_eq!(latest(&mut c, "tr", true).await, 0);
    }
    // ...until the coordinator aborts it (timeout 1 s, checked every second): then the plain
    // record after it becomes readable and the open one is listed as aborted.
    let mut readable = Vec::new();
    for _ in 0..100 {
        let r = fetch(&mut c, "tr", 0, true).await;
        if r.last_stable_offset > 0 {
            assert_eq!(r.aborted_transactions.as_ref().map(Vec::len), Some(1));
            readable = contents(&r).0;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        readable,
        vec![(0, b"open".to_vec()), (1, b"plain".to_vec())]
    );
    // The timed-out producer is fenced (its epoch was bumped by the abort).
    assert_eq!(
        end(&mut c, "slow", p, true).await,
        error_codes::PRODUCER_FENCED
    );
    broker.stop().await;
}

#[tokio::test]
async fn an_end_interrupted_by_a_stop_is_finished_at_start() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let p = open_transaction(&mut c, "ti", "ti", 60_000, b"kept").await;
    // The commit is decided and persisted, but no marker is written (as if the broker stopped
    // right after persisting PrepareCommit).
    let pending = broker
        .broker()
        .prepare_transaction_end("ti", p.0, p.1, true)
        .expect("end");
    assert!(pending, "an end is pending");
    assert_eq!(latest(&mut c, "ti", true).await, 0);
    drop(c);
    let broker = broker.restart().await;
    let mut c = broker.client().await;
    let mut stable = 0;
    for _ in 0..100 {
        stable = latest(&mut c, "ti", true).await;
        if stable > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stable, 2, "the commit marker was written at start");
    let r = fetch(&mut c, "ti", 0, true).await;
    assert_eq!(contents(&r).0, vec![(0, b"kept".to_vec())], "{r:?}");
    // The end completes (until then a retried commit hears CONCURRENT_TRANSACTIONS, which
    // clients retry); then it succeeds.
    let mut code = error_codes::CONCURRENT_TRANSACTIONS;
    for _ in 0..100 {
        code = end(&mut c, "ti", p, true).await;
        if code != error_codes::CONCURRENT_TRANSACTIONS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(code, 0, "complete: a retried commit succeeds");
    broker.stop().await;
}

#[tokio::test]
async fn a_transaction_its_coordinator_forgot_is_closed_at_start() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    open_transaction_with_a_record_behind(&mut c, "th", "lost", 60_000, b"hanging", b"behind")
        .await;
    assert_eq!(latest(&mut c, "th", true).await, 0);
    drop(c);
    // The coordinator's log is lost (a damaged disk, an operator's mistake): without the
    // start-up check the open transaction would hold the last stable offset forever.
    let dir = broker.data_dir();
    let mut broker = broker;
    if let Some(running) = broker.running.take() {
        running.shutdown().await.expect("clean shutdown");
    }
    std::fs::remove_dir_all(dir.join(skiff_broker::TXN_LOG_DIR)).expect("remove");
    let broker = broker.restart().await;
    let mut c = broker.client().await;
    assert_eq!(
        latest(&mut c, "th", true).await,
        3,
        "aborted at start, marker at 2"
    );
    let r = fetch(&mut c, "th", 0, true).await;
    assert_eq!(r.aborted_transactions.as_ref().map(Vec::len), Some(1));
    assert_eq!(contents(&r).1, vec![2]);
    broker.stop().await;
}
