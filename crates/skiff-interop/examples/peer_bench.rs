//! Broker throughput and latency with a fast client (rdkafka / librdkafka 2.12 in C), so that the
//! brokers rather than a Python client are measured.
//!
//! ```sh
//! cargo run --release -p skiff-interop --example peer_bench -- \
//!     --records 500000 --target skiff=127.0.0.1:9092 --target tansu=127.0.0.1:9093 --mock
//! ```
//!
//! For every target: produce N records of 1 KiB with acks=1 and with acks=all (records/s, MB/s,
//! p50/p99 delivery latency under that load), then consume the acks=all topic from the beginning
//! with `assign()` (records/s, MB/s). `--mock` adds librdkafka's mock cluster (in this process).
//! Everything is bounded by `--timeout-secs` per phase. Figures are printed, never asserted.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

struct LatencyContext {
    sent: std::sync::Mutex<Vec<Duration>>,
    start: Instant,
}

impl ClientContext for LatencyContext {}

impl ProducerContext for LatencyContext {
    type DeliveryOpaque = Box<Instant>;
    fn delivery(&self, result: &DeliveryResult<'_>, sent_at: Self::DeliveryOpaque) {
        if result.is_ok()
            && let Ok(mut sent) = self.sent.lock()
        {
            sent.push(sent_at.elapsed());
        }
        let _ = self.start;
    }
}

struct Args {
    records: usize,
    value_size: usize,
    targets: Vec<(String, String)>,
    mock: bool,
    timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        records: 200_000,
        value_size: 1024,
        targets: Vec::new(),
        mock: false,
        timeout: Duration::from_secs(120),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--records" => args.records = value()?.parse().map_err(|e| format!("{e}"))?,
            "--value-size" => args.value_size = value()?.parse().map_err(|e| format!("{e}"))?,
            "--timeout-secs" => {
                args.timeout = Duration::from_secs(value()?.parse().map_err(|e| format!("{e}"))?)
            }
            "--mock" => args.mock = true,
            "--target" => {
                let v = value()?;
                let (name, addr) = v.split_once('=').ok_or("--target NAME=HOST:PORT")?;
                if !(addr.starts_with("127.") || addr.starts_with("localhost:")) {
                    return Err(format!("{addr}: loopback targets only"));
                }
                args.targets.push((name.to_string(), addr.to_string()));
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

fn produce(bootstrap: &str, topic: &str, acks: &str, args: &Args) -> Result<String, String> {
    let context = LatencyContext {
        sent: std::sync::Mutex::new(Vec::with_capacity(args.records)),
        start: Instant::now(),
    };
    let producer: ThreadedProducer<LatencyContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", acks)
        .set("linger.ms", "5")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.kbytes", "65536")
        .set("enable.idempotence", "false")
        .create_with_context(context)
        .map_err(|e| e.to_string())?;
    let value = vec![b'x'; args.value_size];
    let deadline = Instant::now() + args.timeout;
    let start = Instant::now();
    for i in 0..args.records {
        let key = i.to_string();
        let mut record = BaseRecord::with_opaque_to(topic, Box::new(Instant::now()))
            .key(&key)
            .payload(&value)
            .partition(0);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    if Instant::now() > deadline {
                        return Err("timed out".into());
                    }
                    record = r;
                    // The queue is full: wait for deliveries (the polling thread serves them)
                    // instead of spinning, which would take CPU from the broker under test.
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    producer
        .flush(deadline.saturating_duration_since(Instant::now()))
        .map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();
    let mut latencies = producer
        .context()
        .sent
        .lock()
        .map(|v| v.clone())
        .unwrap_or_default();
    latencies.sort();
    if latencies.len() != args.records {
        return Err(format!("{} of {} delivered", latencies.len(), args.records));
    }
    Ok(format!(
        "{:>10.0} {:>9.1} {:>8.2} {:>8.2}",
        args.records as f64 / secs,
        (args.records * args.value_size) as f64 / secs / 1e6,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    ))
}

fn consume(bootstrap: &str, topic: &str, args: &Args) -> Result<String, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "peer-bench-unused")
        .set("enable.auto.commit", "false")
        .set("fetch.max.bytes", "52428800")
        .set("max.partition.fetch.bytes", "10485760")
        .create()
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + args.timeout;
    let start = Instant::now();
    let mut count = 0usize;
    let mut bytes = 0usize;
    while count < args.records {
        if Instant::now() > deadline {
            return Err(format!("timed out after {count} records"));
        }
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            count += 1;
            bytes += m.payload().map_or(0, <[u8]>::len);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(format!(
        "{:>10.0} {:>9.1} {:>8} {:>8}",
        count as f64 / secs,
        bytes as f64 / secs / 1e6,
        "-",
        "-"
    ))
}

fn main() {
    let mut args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("peer_bench: {e}");
            std::process::exit(2);
        }
    };
    let mock = if args.mock {
        match MockCluster::new(1) {
            Ok(cluster) => {
                let addr = cluster.bootstrap_servers();
                args.targets.push(("mock".into(), addr));
                Some(cluster)
            }
            Err(e) => {
                eprintln!("peer_bench: mock cluster: {e}");
                None
            }
        }
    } else {
        None
    };
    println!(
        "# {} records x {} B, rdkafka {}",
        args.records,
        args.value_size,
        rdkafka::util::get_rdkafka_version().1
    );
    println!(
        "{:<8} {:<16} {:>10} {:>9} {:>8} {:>8}",
        "target", "phase", "rec/s", "MB/s", "p50 ms", "p99 ms"
    );
    let run = std::process::id();
    let mock_bootstrap = mock.as_ref().map(|cluster| cluster.bootstrap_servers());
    for (name, bootstrap) in &args.targets {
        let t1 = format!("bench-{run}-acks1");
        let tall = format!("bench-{run}-acksall");
        let produced = [
            ("produce acks=1", produce(bootstrap, &t1, "1", &args)),
            ("produce acks=all", produce(bootstrap, &tall, "all", &args)),
        ];
        let consumed = if mock_bootstrap.as_ref() == Some(bootstrap) {
            // It keeps only the last few megabytes of a partition: nothing to read back.
            Ok("skipped (the mock cluster keeps only recent data)".to_string())
        } else {
            consume(bootstrap, &tall, &args)
        };
        for (phase, result) in produced.into_iter().chain([("consume assign", consumed)]) {
            match result {
                Ok(line) => println!("{name:<8} {phase:<16} {line}"),
                Err(e) => println!("{name:<8} {phase:<16} FAILED: {e}"),
            }
        }
    }
    drop(mock);
}
