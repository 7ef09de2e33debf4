//! Test harness: an in-process Skiff broker and a protocol-aware proxy that records every request
//! header and can rewrite or drop chosen requests/responses.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use skiff_broker::{BrokerConfig, RunningBroker};
use skiff_client::{Client, ClientConfig};
use skiff_protocol::header::{
    RequestFrame, encode_request_frame, encode_response_frame, parse_response_frame,
};
use skiff_protocol::{ApiKey, FrameReader, Request, Response, Uuid};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The bound on any single wait in these tests.
pub const TIMEOUT: Duration = Duration::from_secs(20);

pub struct TestBroker {
    pub running: Option<RunningBroker>,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    advertise: Option<(String, u16)>,
}

fn test_config(dir: &std::path::Path, listen: SocketAddr) -> BrokerConfig {
    let mut config = BrokerConfig {
        listen,
        data_dir: dir.to_path_buf(),
        ..Default::default()
    };
    config.groups.consumer_heartbeat_interval_ms = 200;
    config.kafka.insert("num.partitions".into(), "1".into());
    config
}

impl TestBroker {
    pub async fn start() -> TestBroker {
        Self::start_advertising(None).await
    }

    /// A broker that tells clients to connect to `advertise` (a proxy) instead of itself.
    pub async fn start_advertising(advertise: Option<(String, u16)>) -> TestBroker {
        let to_proxy = advertise.clone();
        let mut broker = Self::start_with(|config| config.advertise = to_proxy).await;
        broker.advertise = advertise;
        broker
    }

    /// A broker with the test config as `adjust` changes it (not kept for restarts).
    pub async fn start_with(adjust: impl FnOnce(&mut BrokerConfig)) -> TestBroker {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = test_config(dir.path(), "127.0.0.1:0".parse().expect("addr"));
        adjust(&mut config);
        let running = skiff_broker::start(config).await.expect("broker starts");
        let addr = running.local_addr;
        TestBroker {
            running: Some(running),
            addr,
            dir,
            advertise: None,
        }
    }

    /// Stops the broker and starts it again on the same port and data directory.
    pub async fn restart(&mut self) {
        if let Some(running) = self.running.take() {
            tokio::time::timeout(TIMEOUT, running.shutdown())
                .await
                .expect("shutdown in time")
                .expect("clean shutdown");
        }
        let mut config = test_config(self.dir.path(), self.addr);
        config.advertise = self.advertise.clone();
        let mut last = None;
        for _ in 0..50 {
            match skiff_broker::start(config.clone()).await {
                Ok(running) => {
                    self.running = Some(running);
                    return;
                }
                Err(e) => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        panic!("broker did not restart on {}: {last:?}", self.addr);
    }

    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            let _ = tokio::time::timeout(TIMEOUT, running.shutdown()).await;
        }
    }
}

pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new(bootstrap);
    config.request_timeout = Duration::from_secs(5);
    config.retry_backoff = Duration::from_millis(20);
    config.reconnect_backoff = Duration::from_millis(20);
    config.reconnect_backoff_max = Duration::from_millis(200);
    config
}

pub fn client(bootstrap: &str) -> Client {
    Client::new(client_config(bootstrap)).expect("client")
}

/// One request as the proxy saw it (before any rewrite).
#[derive(Debug, Clone)]
pub struct Seen {
    pub connection: usize,
    pub api: ApiKey,
    pub version: i16,
    pub header_version: i16,
    pub instance_id: Option<Uuid>,
    pub request: Option<Request>,
}

/// What the proxy should tamper with. Counters count down as they fire.
#[derive(Debug, Default)]
pub struct Rules {
    /// Rewrite ApiVersions responses so ConsumerGroupHeartbeat's max version is this.
    pub heartbeat_max_version: Option<i16>,
    /// Swallow this many ConsumerGroupHeartbeat responses (the client times out).
    pub drop_heartbeat_responses: usize,
    /// Add this to the epoch of the next heartbeat with epoch > 0 (the broker then fences).
    pub bump_next_heartbeat_epoch: Option<i32>,
    /// Swallow this many GetTelemetrySubscriptions requests (the broker never sees them, the
    /// client waits for an answer that does not come).
    pub drop_telemetry_subscription_requests: usize,
    /// Re-encode the next request of this API with a different header instance ID.
    pub swap_instance_id_of: Option<ApiKey>,
}

#[derive(Default)]
struct ProxyState {
    seen: Vec<Seen>,
    rules: Rules,
    connections: Vec<JoinHandle<()>>,
}

/// A Kafka-aware TCP proxy in front of one broker.
#[derive(Clone)]
pub struct Proxy {
    pub addr: SocketAddr,
    state: Arc<Mutex<ProxyState>>,
}

impl Proxy {
    /// Binds the proxy's port (so a broker can advertise it) without forwarding yet.
    pub async fn bind() -> (Proxy, TcpListener) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        (
            Proxy {
                addr,
                state: Arc::new(Mutex::new(ProxyState::default())),
            },
            listener,
        )
    }

    /// A broker advertising the proxy, and the proxy forwarding to it.
    pub async fn with_broker() -> (Proxy, TestBroker) {
        let (proxy, listener) = Proxy::bind().await;
        let broker =
            TestBroker::start_advertising(Some(("127.0.0.1".into(), proxy.addr.port()))).await;
        proxy.serve(listener, broker.addr);
        (proxy, broker)
    }

    pub fn serve(&self, listener: TcpListener, upstream: SocketAddr) {
        let state = Arc::clone(&self.state);
        tokio::spawn(async move {
            let mut next = 0;
            loop {
                let Ok((downstream, _)) = listener.accept().await else {
                    return;
                };
                let id = next;
                next += 1;
                let state2 = Arc::clone(&state);
                let handle = tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    proxy_connection(id, downstream, up, state2).await;
                });
                state.lock().unwrap().connections.push(handle);
            }
        });
    }

    pub fn rules(&self, f: impl FnOnce(&mut Rules)) {
        f(&mut self.state.lock().unwrap().rules);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    pub fn heartbeats(&self) -> Vec<skiff_protocol::generated::ConsumerGroupHeartbeatRequest> {
        self.seen()
            .into_iter()
            .filter_map(|s| match s.request {
                Some(Request::ConsumerGroupHeartbeat(r)) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// Closes every proxied connection (clients see broken connections).
    pub fn kill_connections(&self) {
        for handle in self.state.lock().unwrap().connections.drain(..) {
            handle.abort();
        }
    }
}

type Inflight = Arc<Mutex<HashMap<i32, (ApiKey, i16)>>>;

async fn proxy_connection(
    id: usize,
    down: TcpStream,
    up: TcpStream,
    state: Arc<Mutex<ProxyState>>,
) {
    let (down_r, mut down_w) = down.into_split();
    let (up_r, mut up_w) = up.into_split();
    let inflight: Inflight = Arc::new(Mutex::new(HashMap::new()));
    let requests = {
        let state = Arc::clone(&state);
        let inflight = Arc::clone(&inflight);
        async move {
            let mut reader = FrameReader::new(down_r, 256 << 20);
            while let Ok(Some(frame)) = reader.read_frame().await {
                let out = on_request(id, frame, &state, &inflight);
                if up_w.write_all(&out).await.is_err() {
                    return;
                }
            }
        }
    };
    let responses = async move {
        let mut reader = FrameReader::new(up_r, 256 << 20);
        while let Ok(Some(frame)) = reader.read_frame().await {
            let Some(out) = on_response(frame, &state, &inflight) else {
                continue;
            };
            if down_w.write_all(&out).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = requests => {}
        _ = responses => {}
    }
}

fn with_size(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn on_request(
    id: usize,
    frame: bytes::Bytes,
    state: &Arc<Mutex<ProxyState>>,
    inflight: &Inflight,
) -> Vec<u8> {
    let Ok(parsed) = RequestFrame::parse(frame.clone()) else {
        return with_size(&frame);
    };
    let version = parsed.version();
    let request = parsed.decode_body().ok();
    inflight
        .lock()
        .unwrap()
        .insert(parsed.correlation_id(), (parsed.api_key, version));
    let mut state = state.lock().unwrap();
    state.seen.push(Seen {
        connection: id,
        api: parsed.api_key,
        version,
        header_version: parsed.header_version,
        instance_id: parsed.header.instance_id(),
        request: request.clone(),
    });
    if parsed.api_key == ApiKey::GetTelemetrySubscriptions
        && state.rules.drop_telemetry_subscription_requests > 0
    {
        state.rules.drop_telemetry_subscription_requests -= 1;
        inflight.lock().unwrap().remove(&parsed.correlation_id());
        return Vec::new();
    }
    let mut rewritten: Option<(Request, Option<Uuid>)> = None;
    if state.rules.swap_instance_id_of == Some(parsed.api_key) {
        state.rules.swap_instance_id_of = None;
        if let Some(r) = request.clone() {
            rewritten = Some((r, Some(Uuid::random().expect("random"))));
        }
    }
    if let Some(Request::ConsumerGroupHeartbeat(mut hb)) = request.clone()
        && hb.member_epoch > 0
        && let Some(bump) = state.rules.bump_next_heartbeat_epoch.take()
    {
        hb.member_epoch += bump;
        rewritten = Some((
            Request::ConsumerGroupHeartbeat(hb),
            parsed.header.instance_id(),
        ));
    }
    match rewritten {
        Some((request, instance_id)) => encode_request_frame(
            &request,
            version,
            parsed.correlation_id(),
            parsed.header.client_id.as_deref(),
            instance_id,
        )
        .expect("re-encode")
        .to_vec(),
        None => with_size(&frame),
    }
}

fn on_response(
    frame: bytes::Bytes,
    state: &Arc<Mutex<ProxyState>>,
    inflight: &Inflight,
) -> Option<Vec<u8>> {
    let Some(corr) = frame
        .get(..4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    else {
        return Some(with_size(&frame));
    };
    let Some((api, version)) = inflight.lock().unwrap().remove(&corr) else {
        return Some(with_size(&frame));
    };
    let mut state = state.lock().unwrap();
    match api {
        ApiKey::ConsumerGroupHeartbeat if state.rules.drop_heartbeat_responses > 0 => {
            state.rules.drop_heartbeat_responses -= 1;
            None
        }
        ApiKey::ApiVersions => {
            let Some(max) = state.rules.heartbeat_max_version else {
                return Some(with_size(&frame));
            };
            let Ok((_, Response::ApiVersions(mut r))) =
                parse_response_frame(frame.clone(), api, version)
            else {
                return Some(with_size(&frame));
            };
            for key in &mut r.api_keys {
                if key.api_key == ApiKey::ConsumerGroupHeartbeat.key() {
                    key.max_version = max;
                }
            }
            Some(
                encode_response_frame(&Response::ApiVersions(r), version, corr)
                    .expect("encode")
                    .to_vec(),
            )
        }
        _ => Some(with_size(&frame)),
    }
}

/// Polls `cond` until it holds or `TIMEOUT` passes (for state reached by background tasks
/// that expose no event).
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
