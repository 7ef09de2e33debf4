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
//! A target `NAME=sasl_ssl://IP:PORT` is reached over TLS (trusting the PEM CA of `--ca`, server
//! name 127.0.0.1) and authenticated with SCRAM-SHA-512 (`--user`, `--password`) on every
//! connection, before any timed work; `NAME=IP:PORT` is PLAINTEXT.
//!
//! Figures are printed, never asserted. Loopback targets only; every phase is time-bounded.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use skiff_auth::scram::{ClientExchange, ScramMechanism};
use skiff_protocol::generated::create_topics_request::CreatableTopic;
use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic};
use skiff_protocol::generated::produce_request::{PartitionProduceData, TopicProduceData};
use skiff_protocol::generated::{
    CreateTopicsRequest, FetchRequest, ProduceRequest, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use skiff_protocol::header::{encode_request_frame, parse_response_frame};
use skiff_protocol::{ApiKey, FrameReader, Request, Response};
use skiff_records::RecordBatchBuilder;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

struct Args {
    /// (name, address, SASL_SSL rather than PLAINTEXT)
    targets: Vec<(String, SocketAddr, bool)>,
    ca: Option<String>,
    user: Option<String>,
    password: Option<String>,
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
        ca: None,
        user: None,
        password: None,
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
                let (name, addr) = v
                    .split_once('=')
                    .ok_or("--target NAME=IP:PORT or NAME=sasl_ssl://IP:PORT")?;
                let (addr, secure) = match addr.strip_prefix("sasl_ssl://") {
                    Some(rest) => (rest, true),
                    None => (addr, false),
                };
                let addr: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
                if !addr.ip().is_loopback() {
                    return Err(format!("{addr}: loopback targets only"));
                }
                args.targets.push((name.to_string(), addr, secure));
            }
            "--ca" => args.ca = Some(value()?),
            "--user" => args.user = Some(value()?),
            "--password" => args.password = Some(value()?),
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
    if args.targets.iter().any(|t| t.2)
        && (args.ca.is_none() || args.user.is_none() || args.password.is_none())
    {
        return Err("sasl_ssl:// targets need --ca FILE, --user U and --password P".into());
    }
    Ok(args)
}

/// How a SASL_SSL target is reached: TLS, then SCRAM-SHA-512.
struct SaslSsl {
    tls: Arc<rustls::ClientConfig>,
    user: String,
    password: String,
}

impl SaslSsl {
    /// A TLS client trusting the CA certificates of the PEM file `ca`.
    fn new(ca: &str, user: &str, password: &str) -> Result<SaslSsl, String> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let pem = std::fs::read(ca).map_err(|e| format!("{ca}: {e}"))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("{ca}: {e}"))?;
            roots.add(cert).map_err(|e| format!("{ca}: {e}"))?;
        }
        if roots.is_empty() {
            return Err(format!("{ca}: no certificate"));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(SaslSsl {
            tls: Arc::new(config),
            user: user.to_string(),
            password: password.to_string(),
        })
    }
}

/// Where a target is and how it is reached.
#[derive(Clone)]
struct Endpoint {
    addr: SocketAddr,
    /// None: PLAINTEXT.
    sasl_ssl: Option<Arc<SaslSsl>>,
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

struct Conn {
    reader: FrameReader<Reader>,
    writer: Writer,
    next_id: i32,
}

/// A SCRAM client nonce: printable, without `,`, different on every connection.
fn client_nonce() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "raw-load-{}-{now:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

impl Conn {
    async fn open(endpoint: &Endpoint) -> Result<Conn, String> {
        let connect = async {
            let stream = TcpStream::connect(endpoint.addr)
                .await
                .map_err(|e| e.to_string())?;
            let _ = stream.set_nodelay(true);
            let Some(sasl_ssl) = &endpoint.sasl_ssl else {
                let (r, w) = stream.into_split();
                return Ok::<_, String>((Box::new(r) as Reader, Box::new(w) as Writer));
            };
            let name = rustls::pki_types::ServerName::IpAddress(
                std::net::IpAddr::from([127, 0, 0, 1]).into(),
            );
            let tls = tokio_rustls::TlsConnector::from(Arc::clone(&sasl_ssl.tls))
                .connect(name, stream)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            let (r, w) = tokio::io::split(tls);
            Ok((Box::new(r) as Reader, Box::new(w) as Writer))
        };
        let (r, w) = tokio::time::timeout(Duration::from_secs(5), connect)
            .await
            .map_err(|_| "connect timed out".to_string())??;
        let mut conn = Conn {
            reader: FrameReader::new(r, 512 * 1024 * 1024),
            writer: w,
            next_id: 1,
        };
        if let Some(sasl_ssl) = &endpoint.sasl_ssl {
            conn.scram_login(sasl_ssl).await?;
        }
        Ok(conn)
    }

    /// SaslHandshake v1 (SCRAM-SHA-512), then SaslAuthenticate v2 twice; checks the broker's
    /// proof.
    async fn scram_login(&mut self, sasl_ssl: &SaslSsl) -> Result<(), String> {
        let mechanism = ScramMechanism::Sha512;
        let handshake = Request::SaslHandshake(SaslHandshakeRequest {
            mechanism: mechanism.name().into(),
            ..Default::default()
        });
        match self.call(handshake, 1).await? {
            Response::SaslHandshake(r) if r.error_code == 0 => {}
            Response::SaslHandshake(r) => {
                return Err(format!("SaslHandshake answered {}", r.error_code));
            }
            _ => return Err("unexpected response to SaslHandshake".into()),
        }
        let (mut exchange, first) = ClientExchange::new(
            mechanism,
            &sasl_ssl.user,
            sasl_ssl.password.as_bytes(),
            &client_nonce(),
        );
        let server_first = self.authenticate(first).await?;
        let last = exchange
            .server_first(&server_first)
            .map_err(|e| format!("SCRAM server-first: {e}"))?;
        let server_final = self.authenticate(last).await?;
        exchange
            .server_final(&server_final)
            .map_err(|e| format!("SCRAM server-final: {e}"))
    }

    /// One SaslAuthenticate v2 round: the broker's bytes.
    async fn authenticate(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>, String> {
        let request = Request::SaslAuthenticate(SaslAuthenticateRequest {
            auth_bytes: bytes.into(),
            ..Default::default()
        });
        match self.call(request, 2).await? {
            Response::SaslAuthenticate(r) if r.error_code == 0 => Ok(r.auth_bytes.to_vec()),
            Response::SaslAuthenticate(r) => Err(format!(
                "SaslAuthenticate answered {} ({:?})",
                r.error_code, r.error_message
            )),
            _ => Err("unexpected response to SaslAuthenticate".into()),
        }
    }

    async fn send(&mut self, request: &Request, version: i16) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let frame = encode_request_frame(request, version, id, Some("raw-load"), None)
            .map_err(|e| e.to_string())?;
        self.writer
            .write_all(&frame)
            .await
            .map_err(|e| e.to_string())?;
        // TLS may keep sealed records until flushed.
        self.writer.flush().await.map_err(|e| e.to_string())
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

async fn create_topic(endpoint: &Endpoint, topic: &str, partitions: usize) -> Result<(), String> {
    let mut conn = Conn::open(endpoint).await?;
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
    endpoint: Endpoint,
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
    let mut conn = Conn::open(&endpoint).await?;
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
    endpoint: &Endpoint,
    topic: &str,
    partitions: usize,
    records: usize,
    timeout: Duration,
) -> Result<(usize, usize, f64), String> {
    let mut conn = Conn::open(endpoint).await?;
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
    endpoint: &Endpoint,
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
        None => create_topic(endpoint, &topic, args.partitions)
            .await
            .map_err(|e| format!("create topic: {e}"))?,
    }
    let duration = Duration::from_secs(args.seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..args.connections)
        .map(|connection| {
            tokio::spawn(produce_loop(
                endpoint.clone(),
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
        let (n, mut l) = task
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("produce: {e}"))?;
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
        endpoint,
        &topic,
        args.partitions,
        acked,
        Duration::from_secs(120),
    )
    .await
    .map_err(|e| format!("consume: {e}"))?;
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
    let sasl_ssl = match (&args.ca, &args.user, &args.password) {
        (Some(ca), Some(user), Some(password)) => match SaslSsl::new(ca, user, password) {
            Ok(s) => Some(Arc::new(s)),
            Err(e) => {
                eprintln!("raw_load: {e}");
                std::process::exit(2);
            }
        },
        _ => None,
    };
    for (name, addr, secure) in &args.targets {
        let endpoint = Endpoint {
            addr: *addr,
            sasl_ssl: if *secure { sasl_ssl.clone() } else { None },
        };
        if let Err(e) = run_target(name, &endpoint, &args, &batch, None).await {
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
                        let endpoint = Endpoint {
                            addr,
                            sasl_ssl: None,
                        };
                        if let Err(e) =
                            run_target("mock", &endpoint, &args, &batch, Some(&cluster)).await
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
