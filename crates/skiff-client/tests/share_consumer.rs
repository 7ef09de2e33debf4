//! The KIP-932 share consumer against an in-process Skiff broker with `group.share.enable`:
//! membership under the instance ID (KIP-1313), two members sharing one partition with every
//! record delivered once, explicit release (delivered again, delivery count 2) and reject (never
//! again), the explicit-mode rules, and leaving on close.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{Proxy, TIMEOUT, TestBroker, client};
use skiff_client::{
    AcknowledgeType, AcknowledgementMode, Admin, Client, Error, NewTopic, Producer, ProducerConfig,
    ProducerRecord, ShareConsumer, ShareConsumerConfig, ShareRecord,
};
use skiff_protocol::generated::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use skiff_protocol::generated::share_group_describe_response::DescribedGroup;
use skiff_protocol::generated::{
    IncrementalAlterConfigsRequest, ShareAcknowledgeRequest, ShareFetchRequest,
    ShareGroupDescribeRequest, ShareGroupHeartbeatRequest,
};
use skiff_protocol::{Request, Uuid};
use tokio::time::{Instant, timeout};

fn share_config(config: &mut skiff_broker::BrokerConfig) {
    config.share_groups_enabled = true;
    config.groups.share_heartbeat_interval_ms = 200;
    config.groups.share_session_timeout_ms = 10_000;
}

async fn share_broker() -> TestBroker {
    TestBroker::start_with(share_config).await
}

async fn create_topic(client: &Client, name: &str, partitions: i32) {
    Admin::new(client.clone())
        .create_topics(&[NewTopic::new(name, partitions)])
        .await
        .expect("create topic");
}

/// Produces `n` records (`job-<offset>`) in batches of at most `batch` records.
async fn produce(client: &Client, topic: &str, n: usize, batch: usize) {
    let producer = Producer::new(client.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    let mut i = 0;
    while i < n {
        let mut futures = Vec::new();
        for _ in 0..batch.min(n - i) {
            let record = ProducerRecord::new(topic, format!("job-{i}")).key(format!("k{i}"));
            futures.push(producer.send(record).await.expect("send"));
            i += 1;
        }
        // Each chunk is delivered before the next is sent: one batch each.
        for f in futures {
            timeout(TIMEOUT, f)
                .await
                .expect("delivery in time")
                .expect("delivered");
        }
    }
    producer.close().await.expect("close");
}

/// `share.auto.offset.reset = earliest` for `group`: its share partitions start at the log
/// start, so records produced before the members join are delivered.
async fn from_earliest(client: &Client, group: &str) {
    let request = IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: 32,
            resource_name: group.into(),
            configs: vec![AlterableConfig {
                name: "share.auto.offset.reset".into(),
                config_operation: 0,
                value: Some("earliest".into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let r = client
        .request_any(|_| request)
        .await
        .expect("alter configs");
    assert_eq!(r.responses.first().map(|r| r.error_code), Some(0), "{r:?}");
}

fn share_consumer(broker: &TestBroker, group: &str, mode: AcknowledgementMode) -> ShareConsumer {
    let mut config = ShareConsumerConfig::new(group);
    config.acknowledgement_mode = mode;
    config.fetch_max_wait = Duration::from_millis(100);
    ShareConsumer::new(client(&broker.bootstrap()), config).expect("share consumer")
}

async fn describe(client: &Client, group: &str) -> DescribedGroup {
    let request = ShareGroupDescribeRequest {
        group_ids: vec![group.into()],
        ..Default::default()
    };
    let mut r = client
        .request_coordinator(group, |_| request)
        .await
        .expect("describe");
    assert_eq!(r.groups.len(), 1);
    r.groups.remove(0)
}

fn member_ids(group: &DescribedGroup) -> BTreeSet<String> {
    group
        .members
        .iter()
        .map(|m| m.member_id.to_string())
        .collect()
}

/// Waits until ShareGroupDescribe lists exactly `expected`.
async fn until_members(client: &Client, group: &str, expected: &[String]) {
    let expected: BTreeSet<String> = expected.iter().cloned().collect();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let described = describe(client, group).await;
        if member_ids(&described) == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "members {:?}, expected {expected:?}",
            member_ids(&described)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every consumer holds an assignment.
async fn until_assigned(consumers: &[&ShareConsumer]) {
    timeout(TIMEOUT, async {
        while consumers.iter().any(|c| c.assignment().is_empty()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("every member assigned in time");
}

fn offsets(records: &[ShareRecord]) -> Vec<i64> {
    records.iter().map(|r| r.offset).collect()
}

/// Polls `c` until a poll returns records (bounded by TIMEOUT).
async fn poll_some(c: &ShareConsumer) -> Vec<ShareRecord> {
    timeout(TIMEOUT, async {
        loop {
            let records = c.poll(Duration::from_millis(200)).await.expect("poll");
            if !records.is_empty() {
                return records;
            }
        }
    })
    .await
    .expect("records in time")
}

/// Polls for `how_long` and returns everything that arrived.
async fn poll_for(c: &ShareConsumer, how_long: Duration) -> Vec<ShareRecord> {
    let deadline = Instant::now() + how_long;
    let mut out = Vec::new();
    while Instant::now() < deadline {
        out.extend(c.poll(Duration::from_millis(100)).await.expect("poll"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_under_their_instance_ids_and_leave_on_close() {
    let broker = share_broker().await;
    let admin = client(&broker.bootstrap());
    create_topic(&admin, "work", 2).await;
    let c1 = share_consumer(&broker, "crew", AcknowledgementMode::Implicit);
    let c2 = share_consumer(&broker, "crew", AcknowledgementMode::Implicit);
    // KIP-1313: the member ID is the client's instance ID.
    assert_eq!(c1.member_id(), c1.client().instance_id().to_string());
    assert_ne!(c1.member_id(), c2.member_id());
    c1.subscribe(&["work"]).expect("subscribe");
    c2.subscribe(&["work"]).expect("subscribe");
    until_assigned(&[&c1, &c2]).await;
    until_members(&admin, "crew", &[c1.member_id(), c2.member_id()]).await;
    let described = describe(&admin, "crew").await;
    assert_eq!(&*described.group_state, "Stable");
    for m in &described.members {
        assert_eq!(m.subscribed_topic_names, vec!["work"]);
    }
    assert!(c1.member_epoch() > 0);
    // Two partitions, two members: one each.
    let mut all: Vec<_> = c1.assignment();
    all.extend(c2.assignment());
    all.sort();
    assert_eq!(all.len(), 2, "{all:?}");

    // close leaves at once (epoch -1), without waiting for the session to expire.
    c1.close().await.expect("close");
    until_members(&admin, "crew", &[c2.member_id()]).await;
    assert!(matches!(
        c1.poll(Duration::from_millis(10)).await,
        Err(Error::Closed(_))
    ));
    // The remaining member takes both partitions.
    timeout(TIMEOUT, async {
        while c2.assignment().len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("c2 takes over");
    c2.close().await.expect("close");
    until_members(&admin, "crew", &[]).await;
    assert_eq!(&*describe(&admin, "crew").await.group_state, "Empty");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_share_groups_fails_the_poll() {
    let broker = TestBroker::start_with(|config| config.share_groups_enabled = false).await;
    let c = share_consumer(&broker, "nobody", AcknowledgementMode::Implicit);
    c.subscribe(&["anything"]).expect("subscribe");
    let result = timeout(TIMEOUT, c.poll(Duration::from_secs(30)))
        .await
        .expect("the poll ends");
    assert!(
        matches!(result, Err(Error::UnsupportedVersion { api, .. }) if api == "ShareGroupHeartbeat"),
        "{result:?}"
    );
    c.close().await.ok();
    broker.stop().await;
}

#[tokio::test]
async fn acknowledge_is_refused_outside_explicit_mode_and_for_unknown_records() {
    let broker = share_broker().await;
    let record = ShareRecord {
        topic: "t".into(),
        partition: 0,
        offset: 7,
        timestamp: 0,
        key: None,
        value: None,
        headers: Vec::new(),
        delivery_count: 1,
    };
    let implicit = share_consumer(&broker, "g", AcknowledgementMode::Implicit);
    assert!(matches!(
        implicit.acknowledge(&record, AcknowledgeType::Accept),
        Err(Error::Acknowledgement(_))
    ));
    let explicit = share_consumer(&broker, "g", AcknowledgementMode::Explicit);
    assert!(matches!(
        explicit.acknowledge(&record, AcknowledgeType::Accept),
        Err(Error::Acknowledgement(_))
    ));
    assert!(
        ShareConsumer::new(client(&broker.bootstrap()), ShareConsumerConfig::new(" ")).is_err()
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_on_one_partition_receive_every_record_exactly_once() {
    const N: i64 = 300;
    let broker = share_broker().await;
    let admin = client(&broker.bootstrap());
    create_topic(&admin, "jobs", 1).await;
    produce(&admin, "jobs", N as usize, 10).await;
    from_earliest(&admin, "workers").await;
    let mut config = ShareConsumerConfig::new("workers");
    config.fetch_max_wait = Duration::from_millis(100);
    config.max_poll_records = 10;
    let c1 = ShareConsumer::new(client(&broker.bootstrap()), config.clone()).expect("c1");
    let c2 = ShareConsumer::new(client(&broker.bootstrap()), config).expect("c2");
    c1.subscribe(&["jobs"]).expect("subscribe");
    c2.subscribe(&["jobs"]).expect("subscribe");
    // One partition, two members: share groups give it to both.
    until_assigned(&[&c1, &c2]).await;
    assert_eq!(c1.assignment(), c2.assignment());

    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    let mut per_member = [0usize; 2];
    timeout(TIMEOUT, async {
        while (seen.len() as i64) < N {
            let (r1, r2) = tokio::join!(
                c1.poll(Duration::from_millis(200)),
                c2.poll(Duration::from_millis(200))
            );
            for (i, records) in [r1.expect("poll c1"), r2.expect("poll c2")]
                .into_iter()
                .enumerate()
            {
                if let Some(n) = per_member.get_mut(i) {
                    *n += records.len();
                }
                for r in records {
                    assert_eq!(r.delivery_count, 1, "{r:?}");
                    assert_eq!(
                        r.value.as_deref(),
                        Some(format!("job-{}", r.offset).as_bytes())
                    );
                    *seen.entry(r.offset).or_default() += 1;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("only {} of {N} records in time", seen.len()));
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        (0..N).collect::<Vec<_>>()
    );
    assert!(seen.values().all(|&n| n == 1), "a record delivered twice");
    assert!(c1.acquisition_lock_timeout().is_some());
    // The last poll's records are accepted by commit_sync; nothing comes back.
    for c in [&c1, &c2] {
        let results = c.commit_sync().await.expect("commit");
        assert!(results.values().all(|r| r.is_ok()), "{results:?}");
    }
    let (again1, again2) = tokio::join!(
        poll_for(&c1, Duration::from_secs(1)),
        poll_for(&c2, Duration::from_secs(1))
    );
    assert!(
        again1.is_empty() && again2.is_empty(),
        "{again1:?} {again2:?}"
    );
    // Thirty batches, ten records a fetch: both members got a share.
    assert!(per_member.iter().all(|&n| n > 0), "{per_member:?}");
    c1.close().await.expect("close c1");
    c2.close().await.expect("close c2");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_records_return_with_delivery_count_two_and_rejected_never() {
    let broker = share_broker().await;
    let admin = client(&broker.bootstrap());
    create_topic(&admin, "tasks", 1).await;
    produce(&admin, "tasks", 5, 5).await;
    from_earliest(&admin, "handlers").await;
    let c = share_consumer(&broker, "handlers", AcknowledgementMode::Explicit);
    c.subscribe(&["tasks"]).expect("subscribe");

    let mut first: Vec<ShareRecord> = Vec::new();
    timeout(TIMEOUT, async {
        while first.len() < 5 {
            let records = poll_some(&c).await;
            // Explicit mode: every record acknowledged before the next poll.
            for r in &records {
                let kind = match r.offset {
                    0 => AcknowledgeType::Release,
                    1 => AcknowledgeType::Reject,
                    _ => AcknowledgeType::Accept,
                };
                c.acknowledge(r, kind).expect("acknowledge");
            }
            first.extend(records);
        }
    })
    .await
    .expect("five records");
    assert_eq!(offsets(&first), vec![0, 1, 2, 3, 4]);
    assert!(first.iter().all(|r| r.delivery_count == 1));
    // An acknowledged record cannot be acknowledged again.
    let again = first
        .first()
        .map(|r| c.acknowledge(r, AcknowledgeType::Accept));
    assert!(
        matches!(again, Some(Err(Error::Acknowledgement(_)))),
        "{again:?}"
    );

    // The next poll carries the acknowledgements: the released record comes back, delivered
    // for the second time; the rejected one never does.
    let back = poll_some(&c).await;
    assert_eq!(offsets(&back), vec![0]);
    assert_eq!(back.first().map(|r| r.delivery_count), Some(2));
    // Explicit mode refuses to poll past an unacknowledged record.
    assert!(matches!(
        c.poll(Duration::from_millis(10)).await,
        Err(Error::Acknowledgement(_))
    ));
    assert_eq!(c.unacknowledged(), 1);
    for r in &back {
        c.acknowledge(r, AcknowledgeType::Accept).expect("accept");
    }
    // commit_sync sends it now and reports the partition's result.
    let results = c.commit_sync().await.expect("commit");
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results.values().all(|r| r.is_ok()), "{results:?}");
    let rest = poll_for(&c, Duration::from_secs(1)).await;
    assert!(rest.is_empty(), "{rest:?}");
    c.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_acknowledges_then_leaves_and_the_other_member_gets_the_rest() {
    let broker = share_broker().await;
    let admin = client(&broker.bootstrap());
    create_topic(&admin, "queue", 1).await;
    produce(&admin, "queue", 5, 5).await;
    from_earliest(&admin, "pair").await;
    let c1 = share_consumer(&broker, "pair", AcknowledgementMode::Explicit);
    let c2 = share_consumer(&broker, "pair", AcknowledgementMode::Implicit);
    c1.subscribe(&["queue"]).expect("subscribe");
    c2.subscribe(&["queue"]).expect("subscribe");
    until_assigned(&[&c1, &c2]).await;
    until_members(&admin, "pair", &[c1.member_id(), c2.member_id()]).await;

    // c1 takes all five, accepts two and closes with three unacknowledged: close releases them
    // (with its final ShareAcknowledge, epoch -1) and leaves the group.
    let mut got: Vec<ShareRecord> = Vec::new();
    timeout(TIMEOUT, async {
        while got.len() < 5 {
            got.extend(c1.poll(Duration::from_millis(200)).await.expect("poll"));
            if got.len() < 5 {
                for r in &got {
                    c1.acknowledge(r, AcknowledgeType::Release).ok();
                }
                got.clear();
            }
        }
    })
    .await
    .expect("c1 holds five records");
    for r in got.iter().filter(|r| r.offset < 2) {
        c1.acknowledge(r, AcknowledgeType::Accept).expect("accept");
    }
    c1.close().await.expect("close");
    until_members(&admin, "pair", &[c2.member_id()]).await;

    let mut rest: Vec<ShareRecord> = Vec::new();
    timeout(TIMEOUT, async {
        while rest.len() < 3 {
            rest.extend(c2.poll(Duration::from_millis(200)).await.expect("poll"));
        }
    })
    .await
    .expect("the released records reach c2");
    assert_eq!(offsets(&rest), vec![2, 3, 4]);
    assert!(rest.iter().all(|r| r.delivery_count >= 2), "{rest:?}");
    let more = poll_for(&c2, Duration::from_millis(500)).await;
    assert!(more.is_empty(), "{more:?}");
    c2.close().await.expect("close");
    until_members(&admin, "pair", &[]).await;
    broker.stop().await;
}

/// A share-enabled broker behind the recording proxy (Metadata and FindCoordinator name the
/// proxy, so every request goes through it).
async fn proxied_share_broker() -> (Proxy, TestBroker) {
    let (proxy, listener) = Proxy::bind().await;
    let port = proxy.addr.port();
    let broker = TestBroker::start_with(|config| {
        share_config(config);
        config.advertise = Some(("127.0.0.1".into(), port));
    })
    .await;
    proxy.serve(listener, broker.addr);
    (proxy, broker)
}

/// The share requests one client sent, in order.
enum Sent {
    Heartbeat(ShareGroupHeartbeatRequest),
    Fetch(ShareFetchRequest),
    Acknowledge(ShareAcknowledgeRequest),
}

fn sent_by(proxy: &Proxy, instance_id: Uuid) -> Vec<Sent> {
    proxy
        .seen()
        .into_iter()
        .filter(|s| s.instance_id == Some(instance_id))
        .filter_map(|s| match s.request {
            Some(Request::ShareGroupHeartbeat(r)) => Some(Sent::Heartbeat(r)),
            Some(Request::ShareFetch(r)) => Some(Sent::Fetch(r)),
            Some(Request::ShareAcknowledge(r)) => Some(Sent::Acknowledge(r)),
            _ => None,
        })
        .collect()
}

fn has_acks(r: &ShareFetchRequest) -> bool {
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .any(|p| !p.acknowledgement_batches.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wire_shows_one_identity_session_epochs_and_piggy_backed_acknowledgements() {
    let (proxy, broker) = proxied_share_broker().await;
    let admin = client(&broker.bootstrap());
    create_topic(&admin, "wire", 1).await;
    produce(&admin, "wire", 3, 3).await;
    from_earliest(&admin, "watched").await;
    let c = share_consumer(&broker, "watched", AcknowledgementMode::Explicit);
    let id = c.client().instance_id();
    c.subscribe(&["wire"]).expect("subscribe");
    let records = poll_some(&c).await;
    assert_eq!(offsets(&records), vec![0, 1, 2]);
    for r in &records {
        c.acknowledge(r, AcknowledgeType::Accept).expect("accept");
    }
    // The acknowledgements ride on the next ShareFetch.
    let none = c.poll(Duration::from_millis(200)).await.expect("poll");
    assert!(none.is_empty(), "{none:?}");
    // A broken connection loses the session: the next ShareFetch opens a new one (epoch 0).
    let before_kill = sent_by(&proxy, id).len();
    proxy.kill_connections();
    for _ in 0..3 {
        let _ = c.poll(Duration::from_millis(200)).await;
    }
    c.close().await.expect("close");

    let sent = sent_by(&proxy, id);
    let member = c.member_id();
    // One identity: every heartbeat and share request names the instance ID as member ID.
    let heartbeats: Vec<&ShareGroupHeartbeatRequest> = sent
        .iter()
        .filter_map(|s| match s {
            Sent::Heartbeat(r) => Some(r),
            _ => None,
        })
        .collect();
    assert!(heartbeats.iter().all(|h| *h.member_id == *member));
    let first = heartbeats.first().expect("a join");
    assert_eq!(first.member_epoch, 0);
    assert_eq!(first.subscribed_topic_names, Some(vec!["wire".into()]));
    assert_eq!(heartbeats.last().map(|h| h.member_epoch), Some(-1), "left");
    // The share session's epochs: 0 opens it (no acknowledgements allowed), then +1 per
    // request; after the kill a new session starts at 0; close sends epoch -1.
    let mut epochs = Vec::new();
    let mut acked: Vec<(i64, i64, Vec<i8>)> = Vec::new();
    for (i, s) in sent.iter().enumerate() {
        match s {
            Sent::Fetch(r) => {
                assert_eq!(r.group_id.as_deref(), Some("watched"));
                assert_eq!(r.member_id.as_deref(), Some(member.as_str()));
                if r.share_session_epoch == 0 {
                    assert!(
                        !has_acks(r),
                        "acknowledgements in a session's first request"
                    );
                }
                for p in r.topics.iter().flat_map(|t| t.partitions.iter()) {
                    for b in &p.acknowledgement_batches {
                        acked.push((b.first_offset, b.last_offset, b.acknowledge_types.clone()));
                    }
                }
                epochs.push((i, r.share_session_epoch));
            }
            Sent::Acknowledge(r) => {
                assert_eq!(r.member_id.as_deref(), Some(member.as_str()));
                epochs.push((i, r.share_session_epoch));
            }
            Sent::Heartbeat(_) => {}
        }
    }
    assert_eq!(acked, vec![(0, 2, vec![1])], "one batch accepting 0-2");
    assert_eq!(epochs.first().map(|e| e.1), Some(0));
    assert_eq!(
        epochs.last().map(|e| e.1),
        Some(-1),
        "close ends the session"
    );
    let reopened = epochs
        .iter()
        .position(|&(i, e)| i >= before_kill && e == 0)
        .expect("a new session after the broken connection");
    assert!(reopened > 0);
    // Every request either opens a session (0) or continues the one before (+1).
    let numbers: Vec<i32> = epochs.iter().map(|e| e.1).collect();
    for pair in numbers
        .get(..numbers.len() - 1)
        .unwrap_or_default()
        .windows(2)
    {
        assert!(
            matches!(pair, [a, b] if *b == 0 || *b == a + 1),
            "{numbers:?}"
        );
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrinking_assignment_forgets_partitions_in_the_session() {
    let (proxy, broker) = proxied_share_broker().await;
    let admin = client(&broker.bootstrap());
    create_topic(&admin, "pair", 2).await;
    let c1 = share_consumer(&broker, "shrink", AcknowledgementMode::Implicit);
    let id = c1.client().instance_id();
    c1.subscribe(&["pair"]).expect("subscribe");
    timeout(TIMEOUT, async {
        while c1.assignment().len() < 2 {
            c1.poll(Duration::from_millis(100)).await.expect("poll");
        }
    })
    .await
    .expect("c1 holds both partitions");
    // One fetch with both partitions in the session.
    c1.poll(Duration::from_millis(100)).await.expect("poll");
    let c2 = share_consumer(&broker, "shrink", AcknowledgementMode::Implicit);
    c2.subscribe(&["pair"]).expect("subscribe");
    timeout(TIMEOUT, async {
        while c1.assignment().len() != 1 {
            c1.poll(Duration::from_millis(100)).await.expect("poll");
        }
    })
    .await
    .expect("c1 gives a partition up");
    c1.poll(Duration::from_millis(100)).await.expect("poll");
    let kept = c1.assignment();
    let fetches: Vec<ShareFetchRequest> = sent_by(&proxy, id)
        .into_iter()
        .filter_map(|s| match s {
            Sent::Fetch(r) => Some(r),
            _ => None,
        })
        .collect();
    let opening = fetches.first().expect("a fetch");
    assert_eq!(opening.share_session_epoch, 0);
    let forgetting: Vec<&ShareFetchRequest> = fetches
        .iter()
        .filter(|r| !r.forgotten_topics_data.is_empty())
        .collect();
    assert_eq!(forgetting.len(), 1, "forgotten once");
    let forgot = forgetting.first().expect("forgetting fetch");
    assert!(forgot.share_session_epoch > 0);
    let forgotten: Vec<i32> = forgot
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().copied())
        .collect();
    assert_eq!(forgotten.len(), 1);
    assert!(kept.iter().all(|tp| !forgotten.contains(&tp.partition)));
    c1.close().await.expect("close");
    c2.close().await.expect("close");
    broker.stop().await;
}

/// The share group offset admin calls: describe after a member's acknowledgements (start offset
/// and lag), alter refused while the group has a member, then a new share consumer starts at
/// the altered offset; delete leaves no offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_alters_where_the_next_share_consumer_starts() {
    use skiff_client::{SharePartitionOffset, TopicPartition};

    let broker = share_broker().await;
    let admin_client = client(&broker.bootstrap());
    let admin = Admin::new(admin_client.clone());
    create_topic(&admin_client, "work", 1).await;
    from_earliest(&admin_client, "crew").await;
    produce(&admin_client, "work", 10, 5).await;
    let work0 = TopicPartition::new("work", 0);

    // A member accepts the records of its first poll (implicitly, at close).
    let c1 = share_consumer(&broker, "crew", AcknowledgementMode::Implicit);
    c1.subscribe(&["work"]).expect("subscribe");
    let first = poll_some(&c1).await;
    assert_eq!(first.first().map(|r| r.offset), Some(0));
    let refused = admin
        .alter_share_group_offsets("crew", &[(work0.clone(), 7)])
        .await
        .expect_err("a member");
    assert!(refused.to_string().contains("NON_EMPTY_GROUP"), "{refused}");
    c1.close().await.expect("close");
    until_members(&admin_client, "crew", &[]).await;
    let done = i64::try_from(first.len()).expect("count");
    assert_eq!(
        admin
            .describe_share_group_offsets("crew", None)
            .await
            .expect("described"),
        vec![SharePartitionOffset {
            partition: work0.clone(),
            start_offset: Some(done),
            leader_epoch: 0,
            lag: Some(10 - done),
        }]
    );

    // Altered to 7: a new member gets 7-9 only.
    admin
        .alter_share_group_offsets("crew", &[(work0.clone(), 7)])
        .await
        .expect("altered");
    let c2 = share_consumer(&broker, "crew", AcknowledgementMode::Implicit);
    c2.subscribe(&["work"]).expect("subscribe");
    let records = poll_some(&c2).await;
    assert_eq!(offsets(&records), vec![7, 8, 9]);
    c2.close().await.expect("close");
    until_members(&admin_client, "crew", &[]).await;
    let described = admin
        .describe_share_group_offsets("crew", Some(std::slice::from_ref(&work0)))
        .await
        .expect("described");
    assert_eq!(described[0].start_offset, Some(10));
    assert_eq!(described[0].lag, Some(0));

    // Deleted: no offsets; a second delete finds nothing.
    admin
        .delete_share_group_offsets("crew", &["work"])
        .await
        .expect("deleted");
    let described = admin
        .describe_share_group_offsets("crew", Some(&[work0]))
        .await
        .expect("described");
    assert_eq!((described[0].start_offset, described[0].lag), (None, None));
    assert!(
        admin
            .delete_share_group_offsets("crew", &["work"])
            .await
            .is_err()
    );
    // Describing the group through the admin client shows a share group.
    let group = admin.describe_group("crew").await.expect("described");
    assert_eq!(
        (group.group_type.as_str(), group.state.as_str()),
        ("share", "Empty")
    );
    broker.stop().await;
}

/// One GET to the broker's admin HTTP listener: (status, body).
async fn admin_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    timeout(TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .expect("in time")
        .expect("read");
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// A share consumer holding records it has not acknowledged yet (explicit mode) shows up in the
/// client-instance view under its instance ID with its share membership and exactly that many
/// acquired records; once it acknowledges them, none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_instance_view_shows_what_a_share_consumer_holds() {
    let broker = TestBroker::start_with(|config| {
        share_config(config);
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await;
    let admin_addr = broker
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin listener");
    let admin = client(&broker.bootstrap());
    create_topic(&admin, "work", 1).await;
    from_earliest(&admin, "crew").await;
    produce(&admin, "work", 6, 6).await;

    let c = share_consumer(&broker, "crew", AcknowledgementMode::Explicit);
    c.subscribe(&["work"]).expect("subscribe");
    let held = poll_some(&c).await;
    let id = c.member_id();
    let (status, body) = admin_get(admin_addr, &format!("/clients/{id}")).await;
    assert_eq!(status, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    let share = view["memberships"]
        .as_array()
        .expect("memberships")
        .iter()
        .find(|m| m["protocol"] == "share" && m["group"] == "crew")
        .cloned()
        .unwrap_or_else(|| panic!("no share membership: {view}"));
    assert_eq!(share["member_id"], id);
    assert_eq!(share["acquired_records"], held.len());
    let (_, body) = admin_get(admin_addr, "/groups/crew").await;
    let group: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        group["members"][0]["acquired_records"],
        held.len(),
        "{group}"
    );

    // Acknowledged (committed): nothing held.
    for record in &held {
        c.acknowledge(record, AcknowledgeType::Accept)
            .expect("acknowledge");
    }
    c.commit_sync().await.expect("commit");
    let (_, body) = admin_get(admin_addr, "/groups/crew").await;
    let group: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(group["members"][0]["acquired_records"], 0, "{group}");
    c.close().await.expect("close");
    broker.stop().await;
}
