//! skiff-client against librdkafka's mock cluster (rdkafka's `MockCluster`, librdkafka built from
//! source): proof that it speaks standard Kafka, not just Skiff. Three mock brokers, partitions
//! led by different brokers: produce (idempotent, keyed and by partition) and consume by
//! assignment; a transactional producer against the mock's transaction coordinator.

use std::collections::BTreeSet;
use std::time::Duration;

use rdkafka::mocking::MockCluster;
use skiff_client::{
    Client, ClientConfig, Consumer, ConsumerConfig, OffsetReset, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};
use tokio::time::timeout;

const TIMEOUT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn produce_and_consume_by_assignment_against_librdkafka_mock_cluster() {
    let cluster = MockCluster::new(3).expect("mock cluster");
    cluster.create_topic("mock", 4, 1).expect("create topic");
    let mut config = ClientConfig::new(&cluster.bootstrap_servers());
    config.request_timeout = Duration::from_secs(5);
    let client = Client::new(config).expect("client");

    let md = client.refresh_metadata(None).await.expect("metadata");
    assert_eq!(md.brokers.len(), 3);
    let topic = client.topic("mock").await.expect("topic");
    assert_eq!(topic.partitions.len(), 4);
    let leaders: BTreeSet<i32> = topic.partitions.iter().map(|p| p.leader).collect();

    let producer = Producer::new(client.clone(), ProducerConfig::default())
        .await
        .expect("idempotent producer (InitProducerId on the mock)");
    assert!(producer.producer_id() >= 0);
    let mut futures = Vec::new();
    for i in 0..200 {
        let record = if i % 2 == 0 {
            ProducerRecord::new("mock", format!("v{i}")).key(format!("k{i}"))
        } else {
            ProducerRecord::new("mock", format!("v{i}")).partition(i % 4)
        };
        futures.push(producer.send(record).await.expect("send"));
    }
    let mut per_partition = [0i64; 4];
    for f in futures {
        let md = timeout(TIMEOUT, f)
            .await
            .expect("in time")
            .expect("delivered");
        assert!(md.offset >= 0);
        per_partition[md.partition as usize] += 1;
    }
    producer.close().await.expect("close");
    assert_eq!(per_partition.iter().sum::<i64>(), 200);

    let consumer = Consumer::new(
        client.clone(),
        ConsumerConfig {
            auto_offset_reset: OffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(100),
            ..Default::default()
        },
    )
    .expect("consumer");
    let tps: Vec<TopicPartition> = (0..4).map(|p| TopicPartition::new("mock", p)).collect();
    consumer.assign(&tps).expect("assign");
    let mut got = Vec::new();
    timeout(TIMEOUT, async {
        while got.len() < 200 {
            got.extend(
                consumer
                    .poll(Duration::from_millis(500))
                    .await
                    .expect("poll"),
            );
        }
    })
    .await
    .unwrap_or_else(|_| panic!("only {} records", got.len()));
    let values: BTreeSet<String> = got
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(values.len(), 200);
    for p in 0..4 {
        let n = got.iter().filter(|r| r.partition == p).count() as i64;
        assert_eq!(n, per_partition[p as usize], "partition {p}");
    }
    eprintln!("mock cluster: leaders {leaders:?}, per partition {per_partition:?}");
    consumer.close().await.expect("close");
}

/// The transactional producer against librdkafka's mock transaction coordinator: a committed
/// and an aborted transaction across partitions led by different mock brokers. The mock writes
/// markers but does not compute a last stable offset, so what is checked is that every
/// coordinator request is answered as librdkafka's own producer expects it (FindCoordinator for
/// transactions, InitProducerId, AddPartitionsToTxn, EndTxn) and every record is acknowledged.
#[tokio::test]
async fn transactional_producer_against_librdkafka_mock_coordinator() {
    let cluster = MockCluster::new(3).expect("mock cluster");
    cluster.create_topic("mock-tx", 3, 1).expect("create topic");
    let mut config = ClientConfig::new(&cluster.bootstrap_servers());
    config.request_timeout = Duration::from_secs(5);
    let client = Client::new(config).expect("client");
    let producer = Producer::new(
        client.clone(),
        ProducerConfig {
            transactional_id: Some("mock-tx-id".into()),
            linger: Duration::from_millis(1),
            ..Default::default()
        },
    )
    .await
    .expect("transactional producer (InitProducerId on the mock coordinator)");
    assert!(producer.producer_id() >= 0);
    for commit in [true, false] {
        producer.begin_transaction().expect("begin");
        let mut futures = Vec::new();
        for i in 0..30 {
            futures.push(
                producer
                    .send(ProducerRecord::new("mock-tx", format!("v{i}")).partition(i % 3))
                    .await
                    .expect("send"),
            );
        }
        for f in futures {
            timeout(TIMEOUT, f)
                .await
                .expect("in time")
                .expect("delivered");
        }
        if commit {
            producer.commit_transaction().await.expect("commit");
        } else {
            producer.abort_transaction().await.expect("abort");
        }
    }
    producer.close().await.expect("close");
}
