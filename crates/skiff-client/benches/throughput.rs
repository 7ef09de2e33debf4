//! Producer and consumer throughput of skiff-client vs rdkafka (librdkafka) on the same
//! in-process Skiff broker and workload: 1 KiB records, 4 partitions, acks=all, linger 5 ms,
//! 16 KiB... 1 MiB batches (each client's defaults otherwise), no compression.
//!
//! `cargo bench -p skiff-client --bench throughput` (SKIFF_BENCH_RECORDS overrides the count).
//! Prints figures only.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use skiff_broker::{BrokerConfig, FlushMode};
use skiff_client::{
    Admin, Client, ClientConfig, Consumer, ConsumerConfig, NewTopic, OffsetReset, Producer,
    ProducerConfig, ProducerRecord, TopicPartition,
};

const PARTITIONS: i32 = 4;
const RECORD_SIZE: usize = 1024;

struct Figures {
    client: &'static str,
    produce: Duration,
    consume: Duration,
}

fn main() {
    let records: usize = std::env::var("SKIFF_BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let figures = runtime.block_on(async {
        let mut config = BrokerConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            data_dir: dir.path().to_path_buf(),
            ..Default::default()
        };
        config.flush = FlushMode::Interval { flush_ms: 1000 };
        let broker = skiff_broker::start(config).await.expect("broker");
        let bootstrap = broker.local_addr.to_string();
        let admin = Admin::new(Client::new(ClientConfig::new(&bootstrap)).expect("client"));
        admin
            .create_topics(&[
                NewTopic::new("bench-skiff", PARTITIONS),
                NewTopic::new("bench-rdkafka", PARTITIONS),
            ])
            .await
            .expect("topics");
        let skiff = bench_skiff(&bootstrap, records).await;
        let rdkafka = bench_rdkafka(&bootstrap, records).await;
        let _ = broker.shutdown().await;
        vec![skiff, rdkafka]
    });
    let mib = (records * RECORD_SIZE) as f64 / (1024.0 * 1024.0);
    println!(
        "{records} records x {RECORD_SIZE} B, {PARTITIONS} partitions, in-process Skiff broker"
    );
    println!(
        "{:<14} {:>14} {:>10} {:>14} {:>10}",
        "client", "produce rec/s", "MiB/s", "consume rec/s", "MiB/s"
    );
    for f in &figures {
        let p = f.produce.as_secs_f64();
        let c = f.consume.as_secs_f64();
        println!(
            "{:<14} {:>14.0} {:>10.1} {:>14.0} {:>10.1}",
            f.client,
            records as f64 / p,
            mib / p,
            records as f64 / c,
            mib / c
        );
    }
}

async fn bench_skiff(bootstrap: &str, records: usize) -> Figures {
    let client = Client::new(ClientConfig::new(bootstrap)).expect("client");
    let producer = Producer::new(
        client.clone(),
        ProducerConfig {
            batch_size: 1024 * 1024,
            ..Default::default()
        },
    )
    .await
    .expect("producer");
    let payload = bytes::Bytes::from(vec![b'x'; RECORD_SIZE]);
    let start = Instant::now();
    let mut futures = Vec::with_capacity(records);
    for i in 0..records {
        let record =
            ProducerRecord::new("bench-skiff", payload.clone()).partition(i as i32 % PARTITIONS);
        futures.push(producer.send(record).await.expect("send"));
    }
    for f in futures {
        f.await.expect("delivered");
    }
    let produce = start.elapsed();
    producer.close().await.expect("close");

    let consumer = Consumer::new(
        client,
        ConsumerConfig {
            auto_offset_reset: OffsetReset::Earliest,
            max_partition_fetch_bytes: 4 * 1024 * 1024,
            ..Default::default()
        },
    )
    .expect("consumer");
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new("bench-skiff", p))
        .collect();
    consumer.assign(&tps).expect("assign");
    let start = Instant::now();
    let mut n = 0;
    while n < records {
        n += consumer
            .poll(Duration::from_secs(5))
            .await
            .expect("poll")
            .len();
    }
    let consume = start.elapsed();
    Figures {
        client: "skiff-client",
        produce,
        consume,
    }
}

async fn bench_rdkafka(bootstrap: &str, records: usize) -> Figures {
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("batch.size", "1048576")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer");
    let payload = vec![b'x'; RECORD_SIZE];
    let start = Instant::now();
    let mut futures = Vec::with_capacity(records);
    for i in 0..records {
        let record: FutureRecord<'_, (), [u8]> = FutureRecord::to("bench-rdkafka")
            .partition(i as i32 % PARTITIONS)
            .payload(&payload[..]);
        match producer.send_result(record) {
            Ok(f) => futures.push(f),
            Err((e, _)) => panic!("enqueue: {e}"),
        }
    }
    for f in futures {
        f.await.expect("not cancelled").expect("delivered");
    }
    let produce = start.elapsed();
    drop(producer);

    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench-unused")
        .set("enable.auto.commit", "false")
        .set("max.partition.fetch.bytes", "4194304")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment
            .add_partition_offset("bench-rdkafka", p, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&assignment).expect("assign");
    let consume = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let mut n = 0;
        while n < records {
            if let Some(m) = consumer.poll(Duration::from_secs(5)) {
                m.expect("message");
                n += 1;
            }
        }
        start.elapsed()
    })
    .await
    .expect("consumer thread");
    Figures {
        client: "rdkafka",
        produce,
        consume,
    }
}
