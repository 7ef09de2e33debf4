//! skiff-client against an in-process Skiff broker: round trips, admin, and the KIP-1082/KIP-1313
//! client scenarios (one ID everywhere, fencing and rejoin, retried first heartbeat, v0 fallback,
//! a clearly reported INVALID_REQUEST rejection).

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Proxy, TIMEOUT, TestBroker, client, client_config};
use skiff_client::{
    Acks, Admin, Client, Consumer, ConsumerConfig, ConsumerRecord, Error, NewTopic, OffsetReset,
    Producer, ProducerConfig, ProducerRecord, RebalanceListener, TopicPartition,
};
use skiff_protocol::{ApiKey, Request};
use tokio::time::timeout;

async fn create_topic(client: &Client, name: &str, partitions: i32) {
    Admin::new(client.clone())
        .create_topics(&[NewTopic::new(name, partitions)])
        .await
        .expect("create topic");
}

async fn produce(client: &Client, topic: &str, n: usize) -> Vec<(i32, i64)> {
    let producer = Producer::new(client.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    let mut futures = Vec::new();
    for i in 0..n {
        let record = ProducerRecord::new(topic, format!("value-{i}")).key(format!("key-{i}"));
        futures.push(producer.send(record).await.expect("send"));
    }
    let mut out = Vec::new();
    for f in futures {
        let md = timeout(TIMEOUT, f)
            .await
            .expect("delivery in time")
            .expect("delivered");
        out.push((md.partition, md.offset));
    }
    producer.close().await.expect("close");
    out
}

fn group_config(group: &str) -> ConsumerConfig {
    ConsumerConfig {
        group_id: Some(group.into()),
        auto_offset_reset: OffsetReset::Earliest,
        fetch_max_wait: Duration::from_millis(100),
        auto_commit_interval: Duration::from_millis(200),
        ..Default::default()
    }
}

/// Polls until `n` records arrived (bounded by TIMEOUT).
async fn consume_n(consumer: &Consumer, n: usize) -> Vec<ConsumerRecord> {
    let mut out = Vec::new();
    timeout(TIMEOUT, async {
        while out.len() < n {
            out.extend(
                consumer
                    .poll(Duration::from_millis(500))
                    .await
                    .expect("poll"),
            );
        }
    })
    .await
    .unwrap_or_else(|_| panic!("only {} of {n} records arrived", out.len()));
    out
}

/// Polls until the consumer owns partitions (assignment arrives through heartbeats).
async fn wait_assigned(consumer: &Consumer, min: usize) {
    timeout(TIMEOUT, async {
        while consumer.assignment().len() < min {
            let _ = consumer.poll(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("assignment in time");
}

#[tokio::test]
async fn produce_consume_round_trip_with_group() {
    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    create_topic(&client, "rt", 3).await;
    let delivered = produce(&client, "rt", 300).await;
    let partitions: BTreeSet<i32> = delivered.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        partitions.len(),
        3,
        "keyed records spread over all partitions"
    );
    // Offsets per partition are dense and start at 0.
    for p in 0..3 {
        let mut offsets: Vec<i64> = delivered
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, o)| *o)
            .collect();
        offsets.sort();
        assert_eq!(offsets, (0..offsets.len() as i64).collect::<Vec<_>>());
    }

    let consumer = Consumer::new(client.clone(), group_config("g-rt")).expect("consumer");
    consumer.subscribe(&["rt"]).expect("subscribe");
    let records = consume_n(&consumer, 300).await;
    let values: BTreeSet<String> = records
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(values.len(), 300);
    // The key decides the partition exactly as Kafka's murmur2 partitioner does.
    for r in &records {
        let key = r.key.clone().unwrap();
        assert_eq!(skiff_client::partition_for_key(&key, 3), r.partition);
    }
    assert_eq!(consumer.member_id(), client.instance_id().to_string());
    consumer.commit().await.expect("commit");
    consumer.close().await.expect("close");

    let admin = Admin::new(client.clone());
    let offsets = admin.group_offsets("g-rt").await.expect("offsets");
    let total: i64 = offsets.iter().map(|(_, o)| *o).sum();
    assert_eq!(
        total, 300,
        "committed positions cover every record: {offsets:?}"
    );

    // A second consumer in the same group starts from the committed offsets: nothing left.
    produce(&client, "rt", 3).await;
    let again = Consumer::new(client.clone(), group_config("g-rt")).expect("consumer");
    again.subscribe(&["rt"]).expect("subscribe");
    let rest = consume_n(&again, 3).await;
    assert_eq!(rest.len(), 3);
    again.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test]
async fn acks_variants_idempotence_and_assign_consumer() {
    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    create_topic(&client, "acks", 2).await;
    for acks in [Acks::None, Acks::Leader, Acks::All] {
        let producer = Producer::new(
            client.clone(),
            ProducerConfig {
                acks,
                idempotent: acks == Acks::All,
                linger: Duration::from_millis(1),
                ..Default::default()
            },
        )
        .await
        .expect("producer");
        if acks == Acks::All {
            assert!(producer.producer_id() >= 0);
        }
        let mut futures = Vec::new();
        for i in 0..50 {
            futures.push(
                producer
                    .send(ProducerRecord::new("acks", format!("{acks:?}-{i}")).partition(i % 2))
                    .await
                    .expect("send"),
            );
        }
        for f in futures {
            let md = timeout(TIMEOUT, f).await.expect("in time").expect("ok");
            if acks == Acks::None {
                assert_eq!(md.offset, -1);
            } else {
                assert!(md.offset >= 0);
            }
        }
        producer.close().await.expect("close");
    }
    let consumer = Consumer::new(
        client.clone(),
        ConsumerConfig {
            auto_offset_reset: OffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(50),
            ..Default::default()
        },
    )
    .expect("consumer");
    let tp0 = TopicPartition::new("acks", 0);
    let tp1 = TopicPartition::new("acks", 1);
    consumer
        .assign(&[tp0.clone(), tp1.clone()])
        .expect("assign");
    let records = consume_n(&consumer, 150).await;
    assert_eq!(records.len(), 150);
    // Order within a partition follows send order.
    for p in 0..2 {
        let seq: Vec<i64> = records
            .iter()
            .filter(|r| r.partition == p)
            .map(|r| r.offset)
            .collect();
        assert!(seq.windows(2).all(|w| w[0] < w[1]));
    }
    // seek, pause and resume.
    consumer.seek(&tp0, 0).expect("seek");
    consumer.pause(std::slice::from_ref(&tp1));
    let again = consume_n(&consumer, 75).await;
    assert!(again.iter().all(|r| r.partition == 0));
    assert_eq!(again.first().map(|r| r.offset), Some(0));
    consumer.resume(std::slice::from_ref(&tp1));
    assert_eq!(consumer.lag(), 0);
    broker.stop().await;
}

#[tokio::test]
async fn admin_topics_and_groups() {
    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    let admin = Admin::new(client.clone());
    let created = admin
        .create_topics(&[NewTopic::new("a1", 2), NewTopic::new("a2", 1)])
        .await
        .expect("create");
    assert_eq!(created.len(), 2);
    assert!(created.iter().all(|(_, id)| !id.is_zero()));
    let err = admin
        .create_topics(&[NewTopic::new("a1", 2)])
        .await
        .expect_err("exists");
    assert_eq!(err.code(), Some(36), "{err}");
    assert!(err.to_string().contains("CreateTopics"), "{err}");
    let names: Vec<String> = admin
        .list_topics()
        .await
        .expect("list")
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(names.contains(&"a1".to_string()) && names.contains(&"a2".to_string()));
    produce(&client, "a1", 10).await;
    let d = admin.describe_topic("a1").await.expect("describe");
    assert_eq!(d.metadata.partitions.len(), 2);
    assert_eq!(d.offsets.iter().map(|(_, lo, hi)| hi - lo).sum::<i64>(), 10);
    assert_eq!(
        d.metadata.id,
        created.iter().find(|(n, _)| n == "a1").unwrap().1
    );

    let consumer = Consumer::new(client.clone(), group_config("g-admin")).expect("consumer");
    consumer.subscribe(&["a1"]).expect("subscribe");
    consume_n(&consumer, 10).await;
    consumer.commit().await.expect("commit");
    let groups = admin.list_groups().await.expect("groups");
    assert!(groups.iter().any(|g| g.group_id == "g-admin"), "{groups:?}");
    let desc = admin
        .describe_group("g-admin")
        .await
        .expect("describe group");
    assert_eq!(desc.members.len(), 1);
    assert_eq!(desc.members[0].member_id, client.instance_id().to_string());
    assert_eq!(desc.members[0].assignment.len(), 2);
    consumer.close().await.expect("close");
    let desc = admin
        .describe_group("g-admin")
        .await
        .expect("describe group");
    assert!(desc.members.is_empty(), "left with epoch -1: {desc:?}");
    admin
        .delete_groups(&["g-admin"])
        .await
        .expect("delete group");
    admin.delete_topics(&["a2"]).await.expect("delete topic");
    let names: Vec<String> = admin
        .list_topics()
        .await
        .expect("list")
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(!names.contains(&"a2".to_string()));
    let err = admin.describe_topic("nope").await.expect_err("unknown");
    assert!(
        matches!(err, Error::UnknownTopic(_) | Error::Broker { code: 3, .. }),
        "{err}"
    );
    broker.stop().await;
}

#[tokio::test]
async fn instance_id_is_the_same_in_every_header_across_reconnects_and_restart() {
    let (proxy, mut broker) = Proxy::with_broker().await;
    let client = client(&proxy.addr.to_string());
    let id = client.instance_id();
    create_topic(&client, "ids", 2).await;
    let consumer = Consumer::new(client.clone(), group_config("g-ids")).expect("consumer");
    consumer.subscribe(&["ids"]).expect("subscribe");
    wait_assigned(&consumer, 2).await;
    produce(&client, "ids", 5).await;
    consume_n(&consumer, 5).await;

    // Break every connection: pending requests fail, the client reconnects.
    proxy.kill_connections();
    produce(&client, "ids", 5).await;
    consume_n(&consumer, 5).await;

    // Restart the broker on the same port: new connections, same ID, same member.
    broker.restart().await;
    produce(&client, "ids", 5).await;
    consume_n(&consumer, 5).await;
    assert_eq!(consumer.member_id(), id.to_string());
    consumer.close().await.expect("close");

    let seen = proxy.seen();
    let connections: BTreeSet<usize> = seen.iter().map(|s| s.connection).collect();
    assert!(connections.len() >= 3, "reconnected: {connections:?}");
    let v2: Vec<_> = seen.iter().filter(|s| s.header_version >= 2).collect();
    assert!(v2.len() > 10);
    for s in &v2 {
        assert_eq!(
            s.instance_id,
            Some(id),
            "{:?} v{} on connection {}",
            s.api,
            s.version,
            s.connection
        );
    }
    // v1 headers cannot carry it (and must not).
    assert!(
        seen.iter()
            .filter(|s| s.header_version < 2)
            .all(|s| s.instance_id.is_none())
    );
    // Every heartbeat used the instance ID text as member ID (KIP-1082).
    let heartbeats = proxy.heartbeats();
    assert!(!heartbeats.is_empty());
    assert!(
        heartbeats
            .iter()
            .all(|h| h.member_id.as_ref() as &str == id.to_string())
    );
    assert_eq!(
        heartbeats.last().map(|h| h.member_epoch),
        Some(-1),
        "left on close"
    );
    broker.stop().await;
}

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(String, Vec<TopicPartition>)>>,
}

impl RebalanceListener for Recorder {
    fn on_partitions_revoked(&self, p: &[TopicPartition]) {
        self.events
            .lock()
            .unwrap()
            .push(("revoked".into(), p.to_vec()));
    }
    fn on_partitions_assigned(&self, p: &[TopicPartition]) {
        self.events
            .lock()
            .unwrap()
            .push(("assigned".into(), p.to_vec()));
    }
    fn on_partitions_lost(&self, p: &[TopicPartition]) {
        self.events
            .lock()
            .unwrap()
            .push(("lost".into(), p.to_vec()));
    }
}

#[tokio::test]
async fn fenced_member_rejoins_with_epoch_zero_and_the_same_id() {
    let (proxy, broker) = Proxy::with_broker().await;
    let client = client(&proxy.addr.to_string());
    let id = client.instance_id().to_string();
    create_topic(&client, "fence", 2).await;
    let consumer = Consumer::new(client.clone(), group_config("g-fence")).expect("consumer");
    let recorder = Arc::new(Recorder::default());
    consumer.set_rebalance_listener(recorder.clone());
    consumer.subscribe(&["fence"]).expect("subscribe");
    wait_assigned(&consumer, 2).await;
    let epoch_before = consumer.member_epoch();
    assert!(epoch_before > 0);

    // A stale (too new) epoch on the wire: the broker really fences the member.
    proxy.rules(|r| r.bump_next_heartbeat_epoch = Some(100));
    timeout(TIMEOUT, async {
        while consumer.fencing_count() == 0 {
            let _ = consumer.poll(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("fenced in time");
    wait_assigned(&consumer, 2).await;
    assert_eq!(consumer.member_id(), id);

    let heartbeats = proxy.heartbeats();
    // (The proxy records heartbeats before rewriting the epoch.) After the fence: a full join
    // with epoch 0 and the same ID.
    let joined = heartbeats
        .iter()
        .position(|h| h.member_epoch > 0)
        .expect("a heartbeat after the first join");
    let rejoin = heartbeats
        .iter()
        .skip(joined)
        .find(|h| h.member_epoch == 0)
        .expect("rejoin with epoch 0");
    assert_eq!(rejoin.member_id.as_ref() as &str, id);
    assert!(
        rejoin.subscribed_topic_names.is_some(),
        "full heartbeat after fencing"
    );
    assert!(
        heartbeats
            .iter()
            .all(|h| h.member_id.as_ref() as &str == id)
    );
    let events = recorder.events.lock().unwrap().clone();
    assert!(
        events.iter().any(|(k, p)| k == "lost" && p.len() == 2),
        "{events:?}"
    );
    // Still exactly one member in the group.
    let desc = Admin::new(client.clone())
        .describe_group("g-fence")
        .await
        .expect("describe");
    assert_eq!(desc.members.len(), 1);
    assert_eq!(desc.members[0].member_id, id);
    consumer.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test]
async fn timed_out_first_heartbeat_is_retried_with_the_same_id() {
    let (proxy, broker) = Proxy::with_broker().await;
    let mut config = client_config(&proxy.addr.to_string());
    config.request_timeout = Duration::from_millis(700);
    let client = Client::new(config).expect("client");
    let id = client.instance_id().to_string();
    create_topic(&client, "retry", 1).await;
    proxy.rules(|r| r.drop_heartbeat_responses = 2);
    let consumer = Consumer::new(client.clone(), group_config("g-retry")).expect("consumer");
    consumer.subscribe(&["retry"]).expect("subscribe");
    wait_assigned(&consumer, 1).await;
    let heartbeats = proxy.heartbeats();
    let joins: Vec<_> = heartbeats.iter().filter(|h| h.member_epoch == 0).collect();
    assert!(
        joins.len() >= 3,
        "two lost answers, then a third join: {}",
        joins.len()
    );
    assert!(joins.iter().all(|h| h.member_id.as_ref() as &str == id));
    let desc = Admin::new(client.clone())
        .describe_group("g-retry")
        .await
        .expect("describe");
    assert_eq!(desc.members.len(), 1, "no ghost members: {desc:?}");
    consumer.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test]
async fn heartbeat_v0_only_broker_gets_server_generated_ids() {
    let (proxy, broker) = Proxy::with_broker().await;
    proxy.rules(|r| r.heartbeat_max_version = Some(0));
    let client = client(&proxy.addr.to_string());
    create_topic(&client, "v0", 1).await;
    let consumer = Consumer::new(client.clone(), group_config("g-v0")).expect("consumer");
    consumer.subscribe(&["v0"]).expect("subscribe");
    wait_assigned(&consumer, 1).await;
    assert_eq!(consumer.heartbeat_version(), Some(0));
    let member = consumer.member_id();
    assert!(!member.is_empty());
    assert_ne!(
        member,
        client.instance_id().to_string(),
        "v0: the broker chose the ID"
    );
    let heartbeats = proxy.heartbeats();
    assert_eq!(
        heartbeats[0].member_id.as_ref() as &str,
        "",
        "v0 join sends no ID"
    );
    assert!(
        heartbeats
            .iter()
            .skip(1)
            .all(|h| h.member_id.as_ref() as &str == member)
    );
    // The header still carries the instance ID (KIP-1313 is independent of the member ID).
    assert!(
        proxy
            .seen()
            .iter()
            .filter(|s| s.api == ApiKey::ConsumerGroupHeartbeat)
            .all(|s| s.version == 0 && s.instance_id == Some(client.instance_id()))
    );
    produce(&client, "v0", 3).await;
    consume_n(&consumer, 3).await;
    consumer.close().await.expect("close");
    broker.stop().await;
}

#[tokio::test]
async fn invalid_request_for_a_mismatched_header_id_is_reported_as_kip_1313() {
    let (proxy, broker) = Proxy::with_broker().await;
    let client = client(&proxy.addr.to_string());
    let admin = Admin::new(client.clone());
    admin
        .list_topics()
        .await
        .expect("fixes the connection's ID");
    proxy.rules(|r| r.swap_instance_id_of = Some(ApiKey::CreateTopics));
    let err = admin
        .create_topics(&[NewTopic::new("bad", 1)])
        .await
        .expect_err("rejected");
    assert!(
        matches!(
            err,
            Error::InstanceIdRejected {
                api: "CreateTopics",
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("KIP-1313") && text.contains("CreateTopics"),
        "{text}"
    );
    // The connection stays usable and the next request (with the right ID) succeeds.
    admin
        .create_topics(&[NewTopic::new("good", 1)])
        .await
        .expect("create");
    let seen = proxy.seen();
    assert!(
        seen.iter()
            .any(|s| matches!(&s.request, Some(Request::CreateTopics(_))))
    );
    broker.stop().await;
}

#[tokio::test]
async fn two_consumers_split_partitions_and_share_the_work() {
    let broker = TestBroker::start().await;
    let bootstrap = broker.bootstrap();
    let admin_client = client(&bootstrap);
    create_topic(&admin_client, "mixed", 4).await;
    let a = Consumer::new(client(&bootstrap), group_config("g-mixed")).expect("a");
    a.subscribe(&["mixed"]).expect("subscribe");
    wait_assigned(&a, 4).await;
    let b = Consumer::new(client(&bootstrap), group_config("g-mixed")).expect("b");
    let recorder = Arc::new(Recorder::default());
    a.set_rebalance_listener(recorder.clone());
    b.subscribe(&["mixed"]).expect("subscribe");
    timeout(TIMEOUT, async {
        while !(a.assignment().len() == 2 && b.assignment().len() == 2) {
            let _ = tokio::join!(
                a.poll(Duration::from_millis(50)),
                b.poll(Duration::from_millis(50))
            );
        }
    })
    .await
    .expect("split 2/2");
    let all: BTreeSet<TopicPartition> = a.assignment().into_iter().chain(b.assignment()).collect();
    assert_eq!(all.len(), 4, "disjoint");
    assert!(
        recorder
            .events
            .lock()
            .unwrap()
            .iter()
            .any(|(k, p)| k == "revoked" && p.len() == 2),
        "a revoked two partitions before giving them up"
    );
    assert_ne!(a.member_id(), b.member_id());
    produce(&admin_client, "mixed", 200).await;
    let mut got = Vec::new();
    timeout(TIMEOUT, async {
        while got.len() < 200 {
            let (ra, rb) = tokio::join!(
                a.poll(Duration::from_millis(100)),
                b.poll(Duration::from_millis(100))
            );
            got.extend(ra.expect("a"));
            got.extend(rb.expect("b"));
        }
    })
    .await
    .expect("all records");
    let unique: BTreeSet<(i32, i64)> = got.iter().map(|r| (r.partition, r.offset)).collect();
    assert_eq!(unique.len(), 200, "each record exactly once");
    a.close().await.expect("close a");
    // b takes over everything once a has left.
    wait_assigned(&b, 4).await;
    b.close().await.expect("close b");
    broker.stop().await;
}

/// Transactions written by librdkafka (rdkafka): committed, aborted, committed, and one left
/// open. A read_committed skiff-client consumer (the default) gets exactly the committed records
/// and stops before the open transaction; a read_uncommitted one gets every data record. Neither
/// returns a transaction marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_skips_aborted_and_open_transactions() {
    use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};

    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    create_topic(&client, "txn-read", 1).await;
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("broker.address.family", "v4")
        .set("transactional.id", "client-read-test")
        .create()
        .expect("rdkafka producer");
    let call = |f: &dyn Fn() -> rdkafka::error::KafkaResult<()>| {
        tokio::task::block_in_place(f).expect("transaction call")
    };
    call(&|| producer.init_transactions(TIMEOUT));
    for (tag, end) in [
        ("a", Some(true)),
        ("b", Some(false)),
        ("c", Some(true)),
        ("d", None),
    ] {
        call(&|| producer.begin_transaction());
        for i in 0..3 {
            let value = format!("{tag}{i}");
            producer
                .send(
                    FutureRecord::<(), _>::to("txn-read")
                        .partition(0)
                        .payload(&value),
                    TIMEOUT,
                )
                .await
                .map_err(|(e, _)| e)
                .expect("delivered");
        }
        match end {
            Some(true) => call(&|| producer.commit_transaction(TIMEOUT)),
            Some(false) => call(&|| producer.abort_transaction(TIMEOUT)),
            None => {}
        }
    }

    let read = |isolation_level| {
        let client = client.clone();
        async move {
            let consumer = Consumer::new(
                client,
                ConsumerConfig {
                    auto_offset_reset: OffsetReset::Earliest,
                    fetch_max_wait: Duration::from_millis(50),
                    isolation_level,
                    ..Default::default()
                },
            )
            .expect("consumer");
            consumer
                .assign(&[TopicPartition::new("txn-read", 0)])
                .expect("assign");
            consume_n(
                &consumer,
                if isolation_level == skiff_client::IsolationLevel::ReadCommitted {
                    6
                } else {
                    12
                },
            )
            .await
            .into_iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string())
            .collect::<Vec<_>>()
        }
    };
    let committed = read(skiff_client::IsolationLevel::ReadCommitted).await;
    assert_eq!(committed, ["a0", "a1", "a2", "c0", "c1", "c2"]);
    let everything = read(skiff_client::IsolationLevel::ReadUncommitted).await;
    assert_eq!(everything.len(), 12, "{everything:?}");
    assert!(
        everything.iter().all(|v| v.len() == 2),
        "no marker among {everything:?}"
    );
    drop(producer);
    broker.stop().await;
}

/// An idempotent producer that goes idle between sends keeps its sequence per partition: the
/// broker would refuse a batch restarting at sequence 0 as out of order.
#[tokio::test]
async fn idempotent_sequences_continue_after_the_producer_went_idle() {
    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    create_topic(&client, "idle-seq", 1).await;
    let producer = Producer::new(client.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    for round in 0..3 {
        let delivery = producer
            .send(ProducerRecord::new("idle-seq", format!("r{round}")).partition(0))
            .await
            .expect("send");
        let md = timeout(TIMEOUT, delivery)
            .await
            .expect("in time")
            .expect("acknowledged");
        assert_eq!(md.offset, round, "round {round}");
        producer.flush().await.expect("flush");
    }
    producer.close().await.expect("close");
    broker.stop().await;
}

fn transactional(client: &Client, id: &str) -> ProducerConfig {
    let _ = client;
    ProducerConfig {
        transactional_id: Some(id.to_string()),
        linger: Duration::from_millis(1),
        ..Default::default()
    }
}

/// Sends `values` to partition 0 of `topic` and waits for every acknowledgement.
async fn send_all(producer: &Producer, topic: &str, values: &[&str]) {
    let mut deliveries = Vec::new();
    for v in values {
        deliveries.push(
            producer
                .send(ProducerRecord::new(topic, v.to_string()).partition(0))
                .await
                .expect("send"),
        );
    }
    for d in deliveries {
        timeout(TIMEOUT, d)
            .await
            .expect("in time")
            .expect("acknowledged");
    }
}

async fn read_values(client: &Client, topic: &str, n: usize) -> Vec<String> {
    let consumer = Consumer::new(
        client.clone(),
        ConsumerConfig {
            auto_offset_reset: OffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(50),
            ..Default::default()
        },
    )
    .expect("consumer");
    consumer
        .assign(&[TopicPartition::new(topic, 0)])
        .expect("assign");
    consume_n(&consumer, n)
        .await
        .into_iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string())
        .collect()
}

/// The Skiff client's transactional producer: commit, abort, commit; records outside a
/// transaction are refused. Read back by a read_committed skiff-client consumer and by
/// librdkafka's read_committed consumer (its markers and batches must look like Kafka's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_producer_commits_and_aborts() {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};

    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    create_topic(&client, "tx-out", 1).await;
    let producer = Producer::new(client.clone(), transactional(&client, "skiff-tx"))
        .await
        .expect("transactional producer");
    let outside = producer
        .send(ProducerRecord::new("tx-out", "no"))
        .await
        .err()
        .expect("refused outside a transaction");
    assert!(matches!(outside, Error::Transaction(_)), "{outside}");
    for (values, commit) in [
        (["a0", "a1", "a2"], true),
        (["b0", "b1", "b2"], false),
        (["c0", "c1", "c2"], true),
    ] {
        producer.begin_transaction().expect("begin");
        send_all(&producer, "tx-out", &values).await;
        if commit {
            producer.commit_transaction().await.expect("commit");
        } else {
            producer.abort_transaction().await.expect("abort");
        }
    }
    assert_eq!(
        read_values(&client, "tx-out", 6).await,
        ["a0", "a1", "a2", "c0", "c1", "c2"]
    );

    let rd: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("broker.address.family", "v4")
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .expect("rdkafka consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("tx-out", 0, rdkafka::Offset::Beginning)
        .expect("assign");
    rd.assign(&tpl).expect("assign");
    let seen = tokio::task::block_in_place(|| {
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + TIMEOUT;
        while std::time::Instant::now() < deadline {
            match rd.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => seen.push(
                    String::from_utf8_lossy(rdkafka::Message::payload(&m).unwrap_or_default())
                        .to_string(),
                ),
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => panic!("{e}"),
                None => {}
            }
        }
        seen
    });
    assert_eq!(seen, ["a0", "a1", "a2", "c0", "c1", "c2"]);
    producer.close().await.expect("close");
    broker.stop().await;
}

/// A second producer with the same transactional ID fences the first: the first's open
/// transaction is aborted and its commit fails; the second's commits.
#[tokio::test]
async fn a_new_transactional_producer_fences_the_old_one() {
    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    create_topic(&client, "tx-fence", 1).await;
    let old = Producer::new(client.clone(), transactional(&client, "skiff-fence"))
        .await
        .expect("old producer");
    old.begin_transaction().expect("begin");
    send_all(&old, "tx-fence", &["zombie"]).await;
    let new = Producer::new(client.clone(), transactional(&client, "skiff-fence"))
        .await
        .expect("new producer");
    assert!(old.commit_transaction().await.is_err(), "fenced");
    new.begin_transaction().expect("begin");
    send_all(&new, "tx-fence", &["fresh"]).await;
    new.commit_transaction().await.expect("commit");
    assert_eq!(read_values(&client, "tx-fence", 1).await, ["fresh"]);
    broker.stop().await;
}

/// Consume-transform-produce with the Skiff client: a KIP-848 group member reads the input, the
/// transactional producer writes the output and commits the member's positions with the
/// transaction; the group's committed offset moves only with a commit.
#[tokio::test]
async fn consume_transform_produce_commits_offsets_with_the_transaction() {
    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    create_topic(&client, "ctp-in", 1).await;
    create_topic(&client, "ctp-out", 1).await;
    produce(&client, "ctp-in", 4).await;
    let consumer = Consumer::new(
        client.clone(),
        ConsumerConfig {
            group_id: Some("ctp".into()),
            auto_offset_reset: OffsetReset::Earliest,
            enable_auto_commit: false,
            fetch_max_wait: Duration::from_millis(50),
            ..Default::default()
        },
    )
    .expect("consumer");
    consumer.subscribe(&["ctp-in"]).expect("subscribe");
    let input = consume_n(&consumer, 4).await;
    let producer = Producer::new(client.clone(), transactional(&client, "skiff-ctp"))
        .await
        .expect("producer");
    let tp = TopicPartition::new("ctp-in", 0);
    for commit in [false, true] {
        producer.begin_transaction().expect("begin");
        let out: Vec<String> = input.iter().map(|r| format!("seen-{}", r.offset)).collect();
        let out: Vec<&str> = out.iter().map(String::as_str).collect();
        send_all(&producer, "ctp-out", &out).await;
        let position = consumer.position(&tp).expect("position");
        producer
            .send_offsets_to_transaction(
                &[(tp.clone(), position)],
                &consumer.group_metadata().expect("a group member"),
            )
            .await
            .expect("offsets in the transaction");
        if commit {
            producer.commit_transaction().await.expect("commit");
            assert_eq!(
                consumer
                    .committed(std::slice::from_ref(&tp))
                    .await
                    .expect("committed"),
                vec![(tp.clone(), 4)]
            );
        } else {
            producer.abort_transaction().await.expect("abort");
            let committed = consumer
                .committed(std::slice::from_ref(&tp))
                .await
                .expect("committed");
            assert!(committed.iter().all(|(_, o)| *o < 0), "{committed:?}");
        }
    }
    assert_eq!(read_values(&client, "ctp-out", 4).await.len(), 4);
    consumer.close().await.expect("close");
    broker.stop().await;
}
