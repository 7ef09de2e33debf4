//! A broker-only load generator: pipelined Produce requests carrying one prebuilt record batch,
//! from several connections, then Fetch of everything written — so that the broker, not a
//! client library, is what is measured. Speaks plain Kafka (Metadata, CreateTopics, Produce v9,
//! Fetch v12), so the same load runs against Skiff, tansu and librdkafka's mock cluster.
//!
//! ```sh
//! cargo run --release -p skiff-interop --example raw_load -- \
//!     --target skiff=127.0.0.1:9092 --target tansu=127.0.0.1:9093 --seconds 5 --acks 1
//! ```
//!
//! Figures are printed, never asserted. Loopback targets only; every phase is time-bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use skiff_protocol::generated::create_topics_request::CreatableTopic;
use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic};
use skiff_protocol::generated::produce_request::{PartitionProduceData, TopicProduceData};
use skiff_protocol::generated::{CreateTopicsRequest, FetchRequest, ProduceRequest};
use skiff_protocol::header::{encode_request_frame, parse_response_frame};
use skiff_protocol::{ApiKey, FrameReader, Request, Response};
use skiff_records::RecordBatchBuilder;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

struct Args {
    targets: Vec<(String, SocketAddr)>,
    mock: bool,
    connections: usize,
    in_flight: usize,
    batch_records: usize,
    value_size: usize,
    seconds: u64,
    acks: i16,
    partitions: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        targets: Vec::new(),
        mock: false,
        connections: 4,
        in_flight: 8,
        batch_records: 1000,
        value_size: 1024,
        seconds: 5,
        acks: 1,
        partitions: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| e.to_string());
        match arg.as_str() {
            "--target" => {
                let v = value()?;
                let (name, addr) = v.split_once('=').ok_or("--target NAME=IP:PORT")?;
                let addr: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
                if !addr.ip().is_loopback() {
                    return Err(format!("{addr}: loopback targets only"));
                }
                args.targets.push((name.to_string(), addr));
            }
            "--mock" => args.mock = true,
            "--connections" => args.connections = num(value()?)?.max(1),
            "--in-flight" => args.in_flight = num(value()?)?.max(1),
            "--batch-records" => args.batch_records = num(value()?)?.max(1),
            "--value-size" => args.value_size = num(value()?)?,
            "--seconds" => args.seconds = num(value()?)? as u64,
            "--acks" => args.acks = value()?.parse().map_err(|e| format!("{e}"))?,
            "--partitions" => args.partitions = num(value()?)?.clamp(1, 1024),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

struct Conn {
    reader: FrameReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
    next_id: i32,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Conn, String> {
        let stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let (r, w) = stream.into_split();
        Ok(Conn {
            reader: FrameReader::new(r, 512 * 1024 * 1024),
            writer: w,
            next_id: 1,
        })
    }

    async fn send(&mut self, request: &Request, version: i16) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let frame = encode_request_frame(request, version, id, Some("raw-load"), None)
            .map_err(|e| e.to_string())?;
        self.writer
            .write_all(&frame)
            .await
            .map_err(|e| e.to_string())
    }

    async fn receive(&mut self, api: ApiKey, version: i16) -> Result<Response, String> {
        let frame = tokio::time::timeout(Duration::from_secs(30), self.reader.read_frame())
            .await
            .map_err(|_| "response timed out".to_string())?
            .map_err(|e| e.to_string())?
            .ok_or("connection closed")?;
        parse_response_frame(frame, api, version)
            .map(|(_, r)| r)
            .map_err(|e| e.to_string())
    }

    async fn call(&mut self, request: Request, version: i16) -> Result<Response, String> {
        let api = request.api_key();
        self.send(&request, version).await?;
        self.receive(api, version).await
    }
}

async fn create_topic(addr: SocketAddr, topic: &str, partitions: usize) -> Result<(), String> {
    let mut conn = Conn::open(addr).await?;
    let request = Request::CreateTopics(CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: topic.into(),
            num_partitions: partitions as i32,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    });
    match conn.call(request, 5).await? {
        Response::CreateTopics(r) => match r.topics.first().map(|t| t.error_code) {
            Some(0) | Some(36) => Ok(()),
            other => Err(format!("CreateTopics answered {other:?}")),
        },
        _ => Err("unexpected response".into()),
    }
}

/// What every producing connection does.
#[derive(Clone, Copy)]
struct Load {
    records_per_batch: usize,
    acks: i16,
    in_flight: usize,
    duration: Duration,
}

/// One connection producing to `partition` for `load.duration`: returns acknowledged records.
async fn produce_loop(
    addr: SocketAddr,
    topic: String,
    partition: i32,
    batch: Bytes,
    load: Load,
) -> Result<(usize, Vec<Duration>), String> {
    let Load {
        records_per_batch,
        acks: args_acks,
        in_flight,
        duration,
    } = load;
    let mut conn = Conn::open(addr).await?;
    let request = Request::Produce(ProduceRequest {
        acks: args_acks,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: topic.into(),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(batch),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let deadline = Instant::now() + duration;
    let mut sent_at = std::collections::VecDeque::new();
    let mut latencies = Vec::new();
    let mut acked = 0usize;
    while Instant::now() < deadline || !sent_at.is_empty() {
        while Instant::now() < deadline && sent_at.len() < in_flight {
            conn.send(&request, 9).await?;
            sent_at.push_back(Instant::now());
        }
        if sent_at.is_empty() {
            break;
        }
        match conn.receive(ApiKey::Produce, 9).await? {
            Response::Produce(r) => {
                let code = r
                    .responses
                    .first()
                    .and_then(|t| t.partition_responses.first())
                    .map_or(-1, |p| p.error_code);
                if code != 0 {
                    return Err(format!("produce error {code}"));
                }
            }
            _ => return Err("unexpected response".into()),
        }
        if let Some(t) = sent_at.pop_front() {
            latencies.push(t.elapsed());
        }
        acked += records_per_batch;
    }
    Ok((acked, latencies))
}

/// Fetches every partition of the topic from offset 0 until `records` records were returned.
async fn consume_all(
    addr: SocketAddr,
    topic: &str,
    partitions: usize,
    records: usize,
    timeout: Duration,
) -> Result<(usize, usize, f64), String> {
    let mut conn = Conn::open(addr).await?;
    let start = Instant::now();
    let mut offsets = vec![0i64; partitions];
    let (mut count, mut bytes) = (0usize, 0usize);
    while count < records {
        if start.elapsed() > timeout {
            return Err(format!("timed out after {count} records"));
        }
        let request = Request::Fetch(FetchRequest {
            replica_id: -1,
            max_wait_ms: 100,
            min_bytes: 1,
            max_bytes: 64 << 20,
            session_epoch: -1,
            topics: vec![FetchTopic {
                topic: topic.into(),
                partitions: offsets
                    .iter()
                    .enumerate()
                    .map(|(partition, &offset)| FetchPartition {
                        partition: partition as i32,
                        current_leader_epoch: -1,
                        fetch_offset: offset,
                        partition_max_bytes: (64 << 20) / partitions as i32,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        });
        match conn.call(request, 12).await? {
            Response::Fetch(f) => {
                let Some(t) = f.responses.first() else {
                    return Err("empty fetch response".into());
                };
                for p in &t.partitions {
                    if p.error_code != 0 {
                        return Err(format!("fetch error {}", p.error_code));
                    }
                    let Some(offset) = usize::try_from(p.partition_index)
                        .ok()
                        .and_then(|i| offsets.get_mut(i))
                    else {
                        return Err(format!("unexpected partition {}", p.partition_index));
                    };
                    let data = p.records.clone().unwrap_or_default();
                    bytes += data.len();
                    for batch in skiff_records::RecordBatches::new(data) {
                        let Ok(batch) = batch else { break };
                        if batch.next_offset() > *offset {
                            count +=
                                (batch.next_offset() - (*offset).max(batch.base_offset())) as usize;
                            *offset = batch.next_offset();
                        }
                    }
                }
            }
            _ => return Err("unexpected response".into()),
        }
    }
    Ok((count, bytes, start.elapsed().as_secs_f64()))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len().max(1) - 1) as f64 * p).round() as usize;
    sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

async fn run_target(
    name: &str,
    addr: SocketAddr,
    args: &Args,
    batch: &Bytes,
    mock: Option<
        &rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    >,
) -> Result<(), String> {
    let topic = format!("raw-load-{}-{}", std::process::id(), name);
    match mock {
        // The mock cluster has no controller for CreateTopics.
        Some(cluster) => cluster
            .create_topic(&topic, args.partitions as i32, 1)
            .map_err(|e| e.to_string())?,
        None => create_topic(addr, &topic, args.partitions).await?,
    }
    let duration = Duration::from_secs(args.seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..args.connections)
        .map(|connection| {
            tokio::spawn(produce_loop(
                addr,
                topic.clone(),
                (connection % args.partitions) as i32,
                batch.clone(),
                Load {
                    records_per_batch: args.batch_records,
                    acks: args.acks,
                    in_flight: args.in_flight,
                    duration,
                },
            ))
        })
        .collect();
    let mut acked = 0;
    let mut latencies = Vec::new();
    for task in tasks {
        let (n, mut l) = task.await.map_err(|e| e.to_string())??;
        acked += n;
        latencies.append(&mut l);
    }
    let secs = start.elapsed().as_secs_f64();
    latencies.sort();
    let mb = (acked * args.value_size) as f64 / 1e6;
    println!(
        "{name:<8} produce acks={:<3} {:>10.0} rec/s {:>8.1} MB/s  p50 {:>7.2} ms  p99 {:>7.2} ms",
        args.acks,
        acked as f64 / secs,
        mb / secs,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
    if mock.is_some() {
        // It keeps only the last few megabytes of a partition: there is nothing to read back.
        println!("{name:<8} consume          skipped (the mock cluster keeps only recent data)");
        return Ok(());
    }
    let (count, bytes, secs) = consume_all(
        addr,
        &topic,
        args.partitions,
        acked,
        Duration::from_secs(120),
    )
    .await?;
    println!(
        "{name:<8} consume          {:>10.0} rec/s {:>8.1} MB/s  ({} records)",
        count as f64 / secs,
        bytes as f64 / secs / 1e6,
        count
    );
    Ok(())
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("raw_load: {e}");
            std::process::exit(2);
        }
    };
    let mut builder = RecordBatchBuilder::new();
    let value = vec![b'x'; args.value_size];
    for i in 0..args.batch_records {
        let key = i.to_string();
        if let Err(e) = builder.append(0, Some(key.as_bytes()), Some(&value), &[]) {
            eprintln!("raw_load: {e}");
            std::process::exit(1);
        }
    }
    let batch = match builder.build() {
        Ok(b) => b.into_bytes(),
        Err(e) => {
            eprintln!("raw_load: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "# {} connections x {} in flight to {} partition(s), batches of {} x {} B ({} KiB), {} s per target",
        args.connections,
        args.in_flight,
        args.partitions,
        args.batch_records,
        args.value_size,
        batch.len() / 1024,
        args.seconds
    );
    for (name, addr) in &args.targets {
        if let Err(e) = run_target(name, *addr, &args, &batch, None).await {
            println!("{name:<8} FAILED: {e}");
        }
    }
    if args.mock {
        // librdkafka's mock cluster, in this process (it keeps only recent data: consume may
        // report fewer records than produced).
        match rdkafka::mocking::MockCluster::new(1) {
            Ok(cluster) => {
                let addr = cluster
                    .bootstrap_servers()
                    .split(',')
                    .next()
                    .and_then(|a| a.parse::<SocketAddr>().ok());
                match addr {
                    Some(addr) => {
                        if let Err(e) =
                            run_target("mock", addr, &args, &batch, Some(&cluster)).await
                        {
                            println!("mock     FAILED: {e}");
                        }
                    }
                    None => println!("mock     FAILED: no address"),
                }
            }
            Err(e) => println!("mock     FAILED: {e}"),
        }
    }
}
