//! Compressed record batches end to end through an in-process Skiff broker: the skiff-client
//! producer writes each codec and the consumer reads it back; batches compressed by librdkafka
//! (rdkafka crate) with every codec are read too, and librdkafka reads what skiff-client
//! compressed; a consumer refuses a batch that inflates past its bound.

mod common;

use std::time::Duration;

use common::{TIMEOUT, TestBroker, client};
use rdkafka::producer::{FutureProducer, FutureRecord};
use skiff_client::{
    Admin, Client, Compression, Consumer, ConsumerConfig, ConsumerRecord, NewTopic, OffsetReset,
    Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use skiff_records::RecordBatches;
use tokio::time::timeout;

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

async fn create_topic(client: &Client, name: &str) {
    Admin::new(client.clone())
        .create_topics(&[NewTopic::new(name, 1)])
        .await
        .expect("create topic");
}

fn consumer(client: &Client, topic: &str, config: ConsumerConfig) -> Consumer {
    let consumer = Consumer::new(
        client.clone(),
        ConsumerConfig {
            auto_offset_reset: OffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(50),
            ..config
        },
    )
    .expect("consumer");
    consumer
        .assign(&[TopicPartition::new(topic, 0)])
        .expect("assign");
    consumer
}

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

fn value(i: usize) -> String {
    format!("value-{i}-{}", "abcdefgh".repeat(i % 20))
}

/// What the broker stored: the codec of every batch of the partition.
async fn stored_codecs(client: &Client, topic: &str) -> Vec<Compression> {
    // The consumer hides batches; read the raw log through a Fetch instead.
    RecordBatches::new(raw_fetch(client, topic).await)
        .map(|b| b.expect("valid batch").compression())
        .collect()
}

async fn raw_fetch(client: &Client, topic: &str) -> bytes::Bytes {
    use skiff_protocol::generated::FetchRequest;
    use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic};
    use skiff_protocol::{ApiKey, Request, Response};
    let metadata = client.topic(topic).await.expect("topic");
    let leader = metadata.partitions.first().expect("partition").leader;
    let request = FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 16 << 20,
        topics: vec![FetchTopic {
            topic: topic.into(),
            topic_id: metadata.id,
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset: 0,
                partition_max_bytes: 16 << 20,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let response = client
        .call(leader, ApiKey::Fetch, |_| Request::Fetch(request))
        .await
        .expect("fetch");
    let Response::Fetch(response) = response else {
        panic!("not a fetch response")
    };
    response
        .responses
        .into_iter()
        .next()
        .and_then(|t| t.partitions.into_iter().next())
        .and_then(|p| p.records)
        .expect("records")
}

#[tokio::test]
async fn every_codec_round_trips_through_skiff() {
    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    for codec in CODECS {
        let topic = format!("compressed-{codec:?}").to_lowercase();
        create_topic(&client, &topic).await;
        let producer = Producer::new(
            client.clone(),
            ProducerConfig {
                compression: codec,
                linger: Duration::from_millis(20),
                ..Default::default()
            },
        )
        .await
        .expect("producer");
        let mut futures = Vec::new();
        for i in 0..300 {
            let record = ProducerRecord::new(topic.clone(), value(i))
                .key(format!("key-{i}"))
                .header("codec", format!("{codec:?}"));
            futures.push(producer.send(record).await.expect("send"));
        }
        for f in futures {
            timeout(TIMEOUT, f)
                .await
                .expect("in time")
                .expect("delivered");
        }
        producer.close().await.expect("close");

        let codecs = stored_codecs(&client, &topic).await;
        assert!(!codecs.is_empty());
        assert!(codecs.iter().all(|c| *c == codec), "{codec:?}: {codecs:?}");

        let consumer = consumer(&client, &topic, ConsumerConfig::default());
        let records = consume_n(&consumer, 300).await;
        assert_eq!(records.len(), 300, "{codec:?}");
        for (i, record) in records.iter().enumerate() {
            assert_eq!(record.offset, i as i64);
            assert_eq!(record.key.as_deref(), Some(format!("key-{i}").as_bytes()));
            assert_eq!(record.value.as_deref(), Some(value(i).as_bytes()));
            assert_eq!(record.headers.len(), 1);
        }
        rdkafka_reads(&broker.bootstrap(), &topic, 300).await;
    }
    broker.stop().await;
}

/// librdkafka consumes `n` records of partition 0 of `topic` from the start, in order.
async fn rdkafka_reads(bootstrap: &str, topic: &str, n: usize) {
    use rdkafka::consumer::{Consumer as _, StreamConsumer};
    use rdkafka::{Message, Offset, TopicPartitionList};
    let consumer: StreamConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("rdkafka-{topic}"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("rdkafka consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    for i in 0..n {
        let message = timeout(TIMEOUT, consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("{topic}: record {i} in time"))
            .unwrap_or_else(|e| panic!("{topic}: record {i}: {e}"));
        assert_eq!(message.offset(), i as i64, "{topic}");
        assert_eq!(message.payload(), Some(value(i).as_bytes()), "{topic}");
    }
}

#[tokio::test]
async fn batches_compressed_by_librdkafka_are_read() {
    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("rdkafka-{codec}");
        create_topic(&client, &topic).await;
        let producer: FutureProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", broker.bootstrap())
            .set("compression.type", codec)
            .set("linger.ms", "20")
            .create()
            .expect("rdkafka producer");
        let mut futures = Vec::new();
        for i in 0..200 {
            let key = format!("key-{i}");
            let payload = value(i);
            futures.push(
                producer
                    .send_result(
                        FutureRecord::to(&topic)
                            .key(&key)
                            .payload(&payload)
                            .partition(0),
                    )
                    .expect("enqueue"),
            );
        }
        for f in futures {
            timeout(TIMEOUT, f)
                .await
                .expect("in time")
                .expect("not cancelled")
                .expect("delivered");
        }
        let codecs = stored_codecs(&client, &topic).await;
        assert!(
            codecs.iter().any(|c| *c != Compression::None),
            "{codec}: {codecs:?}"
        );
        let consumer = consumer(&client, &topic, ConsumerConfig::default());
        let records = consume_n(&consumer, 200).await;
        for (i, record) in records.iter().enumerate() {
            assert_eq!(record.offset, i as i64, "{codec}");
            assert_eq!(
                record.value.as_deref(),
                Some(value(i).as_bytes()),
                "{codec}"
            );
        }
    }
    broker.stop().await;
}

#[tokio::test]
async fn a_batch_inflating_past_the_bound_fails_the_poll() {
    let broker = TestBroker::start().await;
    let client = client(&broker.bootstrap());
    create_topic(&client, "bomb").await;
    let producer = Producer::new(
        client.clone(),
        ProducerConfig {
            compression: Compression::Zstd,
            ..Default::default()
        },
    )
    .await
    .expect("producer");
    // 8 MiB of zeros: a few hundred bytes compressed.
    let f = producer
        .send(ProducerRecord::new("bomb", vec![0u8; 8 << 20]))
        .await
        .expect("send");
    timeout(TIMEOUT, f)
        .await
        .expect("in time")
        .expect("delivered");
    producer.close().await.expect("close");
    // The bound is 4 x the fetch limits, at least 1 MiB: 1 MiB here.
    let consumer = consumer(
        &client,
        "bomb",
        ConsumerConfig {
            fetch_max_bytes: 64 * 1024,
            max_partition_fetch_bytes: 64 * 1024,
            ..Default::default()
        },
    );
    let error = timeout(TIMEOUT, async {
        loop {
            match consumer.poll(Duration::from_millis(200)).await {
                Ok(records) => assert!(records.is_empty()),
                Err(e) => break e,
            }
        }
    })
    .await
    .expect("poll fails in time");
    assert!(error.to_string().contains("exceed"), "{error}");
}
