//! Test harness: a real broker on an ephemeral loopback port and a raw protocol client.

#![allow(dead_code)]

pub mod sasl;
pub mod txn;

use std::path::PathBuf;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use skiff_broker::{BrokerConfig, RunningBroker};
use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic};
use skiff_protocol::generated::metadata_request::MetadataRequestTopic;
use skiff_protocol::generated::produce_request::{PartitionProduceData, TopicProduceData};
use skiff_protocol::generated::{FetchRequest, MetadataRequest, ProduceRequest};
use skiff_protocol::header::{encode_request_frame, parse_response_frame};
use skiff_protocol::{ApiKey, FrameReader, Request, Response, Uuid};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any single wait in a test may take before the test fails.
pub const TIMEOUT: Duration = Duration::from_secs(20);

pub struct TestBroker {
    pub running: Option<RunningBroker>,
    pub addr: std::net::SocketAddr,
    pub dir: tempfile::TempDir,
}

impl TestBroker {
    pub async fn start() -> TestBroker {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(adjust: impl FnOnce(&mut BrokerConfig)) -> TestBroker {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = BrokerConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            data_dir: dir.path().to_path_buf(),
            ..Default::default()
        };
        adjust(&mut config);
        let running = skiff_broker::start(config).await.expect("broker starts");
        let addr = running.local_addr;
        TestBroker {
            running: Some(running),
            addr,
            dir,
        }
    }

    /// Stops the broker and starts a new one on the same data directory (a new port); `adjust`
    /// sees the default test config for that directory.
    pub async fn restart_with(mut self, adjust: impl FnOnce(&mut BrokerConfig)) -> TestBroker {
        if let Some(running) = self.running.take() {
            tokio::time::timeout(TIMEOUT, running.shutdown())
                .await
                .expect("shutdown in time")
                .expect("clean shutdown");
        }
        let mut config = BrokerConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            data_dir: self.dir.path().to_path_buf(),
            ..Default::default()
        };
        adjust(&mut config);
        let running = skiff_broker::start(config).await.expect("broker restarts");
        self.addr = running.local_addr;
        self.running = Some(running);
        self
    }

    /// [`TestBroker::restart_with`] the default test config.
    pub async fn restart(self) -> TestBroker {
        self.restart_with(|_| {}).await
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    pub fn broker(&self) -> &std::sync::Arc<skiff_broker::Broker> {
        &self.running.as_ref().expect("running").broker
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.addr).await
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            tokio::time::timeout(TIMEOUT, running.shutdown())
                .await
                .expect("shutdown in time")
                .expect("clean shutdown");
        }
    }
}

/// A raw Kafka protocol client: one request at a time or pipelined.
pub struct Client {
    reader: FrameReader<Box<dyn tokio::io::AsyncRead + Send + Unpin>>,
    writer: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    next_correlation_id: i32,
    pub client_id: Option<String>,
    /// The KIP-1313 ID put in every v2 header (None = absent).
    pub instance_id: Option<Uuid>,
}

impl Client {
    pub async fn connect(addr: std::net::SocketAddr) -> Client {
        let stream = tokio::time::timeout(TIMEOUT, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        let (read, write) = stream.into_split();
        Client::over(read, write)
    }

    /// A client over any byte stream (a TLS one, say).
    pub fn over(
        read: impl tokio::io::AsyncRead + Send + Unpin + 'static,
        write: impl tokio::io::AsyncWrite + Send + Unpin + 'static,
    ) -> Client {
        Client {
            reader: FrameReader::new(Box::new(read), 256 * 1024 * 1024),
            writer: Box::new(write),
            next_correlation_id: 1,
            client_id: Some("skiff-test".into()),
            instance_id: None,
        }
    }

    /// Sends one request and returns its correlation ID.
    pub async fn send(&mut self, request: &Request, version: i16) -> i32 {
        self.send_with_id(request, version, self.instance_id).await
    }

    pub async fn send_with_id(
        &mut self,
        request: &Request,
        version: i16,
        instance_id: Option<Uuid>,
    ) -> i32 {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let frame = encode_request_frame(
            request,
            version,
            correlation_id,
            self.client_id.as_deref(),
            instance_id,
        )
        .expect("encode request");
        self.send_raw(&frame).await;
        correlation_id
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.expect("write");
        // A TLS stream may keep sealed records until flushed.
        self.writer.flush().await.expect("flush");
    }

    /// Reads the next response frame, raw.
    pub async fn read_frame(&mut self) -> Option<Bytes> {
        tokio::time::timeout(TIMEOUT, self.reader.read_frame())
            .await
            .expect("response in time")
            .ok()
            .flatten()
    }

    /// Reads the response to a request of `api_key`/`version`, checking the correlation ID.
    pub async fn receive(
        &mut self,
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
    ) -> Response {
        let frame = self.read_frame().await.expect("a response frame");
        let (header, response) =
            parse_response_frame(frame, api_key, version).expect("decodable response");
        assert_eq!(
            header.correlation_id, correlation_id,
            "responses in request order"
        );
        response
    }

    pub async fn call(&mut self, request: impl Into<Request>, version: i16) -> Response {
        let request = request.into();
        let id = self.send(&request, version).await;
        self.receive(request.api_key(), version, id).await
    }

    pub async fn call_with_id(
        &mut self,
        request: impl Into<Request>,
        version: i16,
        instance_id: Option<Uuid>,
    ) -> Response {
        let request = request.into();
        let id = self.send_with_id(&request, version, instance_id).await;
        self.receive(request.api_key(), version, id).await
    }

    /// Whether the broker closed the connection (read returns end of stream or an error).
    pub async fn is_closed(&mut self) -> bool {
        matches!(
            tokio::time::timeout(TIMEOUT, self.reader.read_frame()).await,
            Ok(Ok(None)) | Ok(Err(_))
        )
    }
}

/// Record batches for produce requests.
pub fn batch(values: &[&[u8]]) -> Bytes {
    let mut builder = skiff_records::RecordBatchBuilder::new();
    for v in values {
        builder
            .append(1_700_000_000_000, None, Some(v), &[])
            .expect("append record");
    }
    builder.build().expect("build batch").into_bytes()
}

pub fn bytes_mut(b: &[u8]) -> BytesMut {
    BytesMut::from(b)
}

/// Creates (by auto-creating Metadata v12) a one-partition topic; returns its topic ID.
pub async fn create_topic(c: &mut Client, name: &str) -> Uuid {
    let request = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            name: Some(name.into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    match c.call(request, 12).await {
        Response::Metadata(m) => {
            assert_eq!(m.topics[0].error_code, 0);
            assert!(!m.topics[0].topic_id.is_zero());
            m.topics[0].topic_id
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Creates a topic of `partitions` partitions with CreateTopics v7; returns its topic ID.
pub async fn create_topic_with_partitions(c: &mut Client, name: &str, partitions: i32) -> Uuid {
    use skiff_protocol::generated::CreateTopicsRequest;
    use skiff_protocol::generated::create_topics_request::CreatableTopic;
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 5000,
        ..Default::default()
    };
    match c.call(request, 7).await {
        Response::CreateTopics(r) => {
            assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0]);
            assert!(!r.topics[0].topic_id.is_zero());
            r.topics[0].topic_id
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// ListOffsets v5 for partition 0 of `topic` at `timestamp` (-2 earliest, -1 latest): the offset.
pub async fn list_offset(c: &mut Client, topic: &str, timestamp: i64, read_committed: bool) -> i64 {
    use skiff_protocol::generated::ListOffsetsRequest;
    use skiff_protocol::generated::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let request = ListOffsetsRequest {
        replica_id: -1,
        isolation_level: i8::from(read_committed),
        topics: vec![ListOffsetsTopic {
            name: topic.into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: 0,
                current_leader_epoch: -1,
                timestamp,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, 5).await {
        Response::ListOffsets(r) => r.topics[0].partitions[0].offset,
        other => panic!("unexpected {other:?}"),
    }
}

/// A Produce request for one partition.
pub fn produce_request(topic: &str, partition: i32, acks: i16, records: Bytes) -> ProduceRequest {
    ProduceRequest {
        acks,
        timeout_ms: 5000,
        topic_data: vec![TopicProduceData {
            name: topic.into(),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(records),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A sessionless Fetch request for partition 0 of one topic.
pub fn fetch_request(
    topic: &str,
    topic_id: Uuid,
    offset: i64,
    max_wait_ms: i32,
    min_bytes: i32,
) -> FetchRequest {
    FetchRequest {
        replica_id: -1,
        max_wait_ms,
        min_bytes,
        max_bytes: 1 << 20,
        session_epoch: -1,
        topics: vec![FetchTopic {
            topic: topic.into(),
            topic_id,
            partitions: vec![FetchPartition {
                partition: 0,
                current_leader_epoch: -1,
                fetch_offset: offset,
                partition_max_bytes: 1 << 20,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut raw))
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
