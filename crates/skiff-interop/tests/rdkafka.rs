//! rdkafka (librdkafka 2.12.1) against a Skiff broker in this process: admin, idempotent
//! producer with acks=all and compression, consumer with manual assignment, metadata, and a
//! transactional producer read back with read_committed and read_uncommitted consumers.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use skiff_broker::{BrokerConfig, RunningBroker};

const TIMEOUT: Duration = Duration::from_secs(20);

async fn start() -> (RunningBroker, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    (skiff_broker::start(config).await.expect("broker"), dir)
}

fn client_config(broker: &RunningBroker) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", broker.local_addr.to_string())
        .set("broker.address.family", "v4")
        .set("socket.timeout.ms", "10000");
    config
}

async fn create_topic(admin: &AdminClient<DefaultClientContext>, name: &str, partitions: i32) {
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    let results = admin
        .create_topics(
            &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
            &options,
        )
        .await
        .expect("create_topics");
    for result in results {
        result.expect("topic created");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_compressed_produce_then_consume_by_assignment() {
    let (broker, _dir) = start().await;
    let admin: AdminClient<DefaultClientContext> =
        client_config(&broker).create().expect("admin client");
    create_topic(&admin, "rd", 3).await;

    let producer: FutureProducer = client_config(&broker)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.type", "zstd")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let mut sent = Vec::new();
    for i in 0..300 {
        let key = format!("k{}", i % 7);
        let value = format!("value-{i}");
        let partition = i % 3;
        let record = FutureRecord::to("rd")
            .partition(partition)
            .key(&key)
            .payload(&value)
            .headers(OwnedHeaders::new().insert(Header {
                key: "h",
                value: Some("x"),
            }));
        let delivery = producer
            .send(record, TIMEOUT)
            .await
            .map_err(|(e, _)| e)
            .expect("delivered");
        let (p, offset) = (delivery.partition, delivery.offset);
        assert_eq!(p, partition);
        sent.push((p, offset, key, value));
    }

    let consumer: BaseConsumer = client_config(&broker)
        .set("group.id", "unused-no-commits")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..3 {
        assignment
            .add_partition_offset("rd", p, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&assignment).expect("assign");
    let mut received = Vec::new();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while received.len() < sent.len() && std::time::Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("message");
            let headers = message.headers().expect("headers");
            assert_eq!(headers.get(0).key, "h");
            received.push((
                message.partition(),
                message.offset(),
                String::from_utf8_lossy(message.key().unwrap_or_default()).to_string(),
                String::from_utf8_lossy(message.payload().unwrap_or_default()).to_string(),
            ));
        }
    }
    received.sort();
    sent.sort();
    assert_eq!(received, sent);

    let (low, high) = consumer
        .fetch_watermarks("rd", 0, TIMEOUT)
        .expect("watermarks");
    assert_eq!((low, high), (0, 100));

    let metadata = consumer
        .fetch_metadata(Some("rd"), TIMEOUT)
        .expect("metadata");
    assert_eq!(metadata.topics()[0].partitions().len(), 3);

    drop(consumer);
    drop(producer);
    broker.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_creates_grows_and_deletes_topics() {
    let (broker, _dir) = start().await;
    let admin: AdminClient<DefaultClientContext> =
        client_config(&broker).create().expect("admin client");
    create_topic(&admin, "grow", 1).await;
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    for result in admin
        .create_partitions(&[NewPartitions::new("grow", 4)], &options)
        .await
        .expect("create_partitions")
    {
        result.expect("grown");
    }
    let metadata = admin
        .inner()
        .fetch_metadata(Some("grow"), TIMEOUT)
        .expect("metadata");
    assert_eq!(metadata.topics()[0].partitions().len(), 4);
    for result in admin
        .delete_topics(&["grow"], &options)
        .await
        .expect("delete_topics")
    {
        result.expect("deleted");
    }
    let metadata = admin
        .inner()
        .fetch_metadata(None, TIMEOUT)
        .expect("metadata");
    assert!(metadata.topics().iter().all(|t| t.name() != "grow"));
    broker.shutdown().await.expect("clean shutdown");
}

/// Reads partition 0 of `topic` from the beginning up to its end (for `isolation`, the end is the
/// last stable offset with read_committed); returns the payloads.
fn read_all(broker: &RunningBroker, topic: &str, isolation: &str) -> Vec<String> {
    let consumer: BaseConsumer = client_config(broker)
        .set("group.id", "unused-no-commits")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .set("enable.partition.eof", "true")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .expect("assign");
    consumer.assign(&assignment).expect("assign");
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no end of partition: {got:?}"
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                got.push(String::from_utf8_lossy(message.payload().unwrap_or_default()).to_string())
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return got,
            Some(Err(e)) => panic!("consume failed: {e}"),
            None => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_producer_and_read_committed_consumer() {
    let (broker, _dir) = start().await;
    let admin: AdminClient<DefaultClientContext> =
        client_config(&broker).create().expect("admin client");
    create_topic(&admin, "rdtx", 1).await;
    let producer: FutureProducer = client_config(&broker)
        .set("transactional.id", "rdkafka-txn")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let blocking = |f: &dyn Fn() -> rdkafka::error::KafkaResult<()>| {
        tokio::task::block_in_place(f).expect("transaction call")
    };
    blocking(&|| producer.init_transactions(TIMEOUT));
    for (tag, commit) in [("kept", true), ("dropped", false), ("also-kept", true)] {
        blocking(&|| producer.begin_transaction());
        for i in 0..3 {
            let value = format!("{tag}-{i}");
            producer
                .send(
                    FutureRecord::<(), _>::to("rdtx")
                        .partition(0)
                        .payload(&value),
                    TIMEOUT,
                )
                .await
                .map_err(|(e, _)| e)
                .expect("delivered");
        }
        if commit {
            blocking(&|| producer.commit_transaction(TIMEOUT));
        } else {
            blocking(&|| producer.abort_transaction(TIMEOUT));
        }
    }
    let committed = tokio::task::block_in_place(|| read_all(&broker, "rdtx", "read_committed"));
    let want: Vec<String> = ["kept", "also-kept"]
        .iter()
        .flat_map(|tag| (0..3).map(move |i| format!("{tag}-{i}")))
        .collect();
    assert_eq!(committed, want);
    let everything = tokio::task::block_in_place(|| read_all(&broker, "rdtx", "read_uncommitted"));
    assert_eq!(everything.len(), 9, "{everything:?}");
    drop(producer);
    broker.shutdown().await.expect("clean shutdown");
}

/// Two listeners: librdkafka bootstrapped on EXTERNAL must be told EXTERNAL's address in
/// Metadata (INTERNAL's advertised address is a closed port here), and produces and consumes
/// through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listener_advertises_its_own_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = |name: &str, advertised: Option<(String, u16)>| {
        skiff_broker::ListenerConfig::plaintext(
            name,
            "127.0.0.1:0".parse().expect("addr"),
            advertised,
        )
    };
    let config = BrokerConfig {
        listeners: vec![
            listener("INTERNAL", Some(("127.0.0.1".into(), 1))),
            listener("EXTERNAL", None),
        ],
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    let broker = skiff_broker::start(config).await.expect("broker");
    let external = broker
        .listener_addrs
        .iter()
        .find(|(name, _)| name == "EXTERNAL")
        .map(|(_, addr)| *addr)
        .expect("external listener");
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", external.to_string())
        .set("broker.address.family", "v4")
        .set("socket.timeout.ms", "10000");
    let producer: FutureProducer = client
        .clone()
        .set("acks", "all")
        .create()
        .expect("producer");
    let delivered = producer
        .send(
            FutureRecord::to("ext").key("k").payload("through EXTERNAL"),
            TIMEOUT,
        )
        .await
        .expect("delivered through the external listener");
    assert_eq!(delivered.partition, 0);
    let consumer: BaseConsumer = client
        .set("group.id", "ext-readers")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some("ext"), TIMEOUT)
        .expect("metadata");
    let brokers: Vec<(String, i32)> = metadata
        .brokers()
        .iter()
        .map(|b| (b.host().to_string(), b.port()))
        .collect();
    assert_eq!(
        brokers,
        vec![("127.0.0.1".to_string(), i32::from(external.port()))]
    );
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset("ext", 0, Offset::Beginning)
        .expect("assign");
    consumer.assign(&assignment).expect("assign");
    let deadline = std::time::Instant::now() + TIMEOUT;
    let value = loop {
        assert!(std::time::Instant::now() < deadline, "nothing consumed");
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("message");
            break message.payload().map(|p| p.to_vec()).unwrap_or_default();
        }
    };
    assert_eq!(value, b"through EXTERNAL");
    drop(consumer);
    drop(producer);
    broker.shutdown().await.expect("shutdown");
}
