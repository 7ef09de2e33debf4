//! One connection to one broker: the byte stream (TCP, or TLS over it), the ApiVersions
//! handshake, SASL authentication and KIP-368 re-authentication, pipelined requests matched to
//! callers by correlation ID in a single reader task, throttling, and poisoning (a broken
//! connection fails every pending request at once).
//!
//! Every request carries the client's KIP-1313 instance ID; `encode_request_frame` writes it as
//! tag 0 whenever the request uses header v2 (and never in a v1 header).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use skiff_protocol::generated::{
    ApiVersionsRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use skiff_protocol::header::{encode_request_frame, parse_response_frame};
use skiff_protocol::{
    ApiKey, ErrorCode, FrameReader, Request, RequestBody, Response, Uuid, error_codes,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::security::SaslConfig;
use crate::tls::TlsClient;
use crate::util::{lock, throttle_time_ms};

/// The reading half of a connection's byte stream (TCP or TLS).
pub(crate) type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
/// The writing half of a connection's byte stream.
pub(crate) type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

/// The request versions this client can speak, per API.
pub fn client_versions(api: ApiKey) -> Option<(i16, i16)> {
    Some(match api {
        ApiKey::Produce => (3, 12),
        ApiKey::Fetch => (4, 17),
        ApiKey::ListOffsets => (1, 10),
        ApiKey::Metadata => (1, 12),
        ApiKey::OffsetCommit => (2, 10),
        ApiKey::OffsetFetch => (1, 10),
        ApiKey::FindCoordinator => (0, 6),
        ApiKey::DescribeGroups => (0, 6),
        ApiKey::ListGroups => (0, 5),
        ApiKey::ApiVersions => (0, 4),
        ApiKey::CreateTopics => (2, 7),
        ApiKey::DeleteTopics => (1, 6),
        ApiKey::InitProducerId => (0, 5),
        ApiKey::DeleteGroups => (0, 2),
        ApiKey::ConsumerGroupHeartbeat => (0, 1),
        ApiKey::ConsumerGroupDescribe => (0, 1),
        ApiKey::ShareGroupHeartbeat => (1, 1),
        ApiKey::ShareGroupDescribe => (1, 1),
        ApiKey::ShareFetch => (1, 2),
        ApiKey::ShareAcknowledge => (1, 2),
        ApiKey::DescribeShareGroupOffsets => (0, 1),
        ApiKey::AlterShareGroupOffsets => (0, 0),
        ApiKey::DeleteShareGroupOffsets => (0, 0),
        ApiKey::GetTelemetrySubscriptions => (0, 0),
        ApiKey::PushTelemetry => (0, 0),
        ApiKey::DescribeConfigs => (1, 4),
        ApiKey::IncrementalAlterConfigs => (0, 1),
        ApiKey::ListConfigResources => (0, 1),
        ApiKey::SaslHandshake => (1, 1),
        ApiKey::SaslAuthenticate => (0, 2),
        ApiKey::DescribeUserScramCredentials => (0, 0),
        ApiKey::AlterUserScramCredentials => (0, 0),
        ApiKey::CreateAcls => (1, 3),
        ApiKey::DescribeAcls => (1, 3),
        ApiKey::DescribeClientQuotas => (0, 1),
        ApiKey::AlterClientQuotas => (0, 1),
        ApiKey::DeleteAcls => (1, 3),
        _ => return None,
    })
}

/// The highest ApiVersions version this client sends first.
const API_VERSIONS_FIRST: i16 = 4;

/// Identity, limits and security shared by every connection of one client.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionSettings {
    pub client_id: Arc<str>,
    pub instance_id: Uuid,
    /// Bounds the TCP connect with the TLS handshake, and each request of the ApiVersions and
    /// SASL exchanges.
    pub connect_timeout: Duration,
    pub max_frame_size: usize,
    /// TLS, with `SSL` and `SASL_SSL`.
    pub tls: Option<TlsClient>,
    /// SASL, with `SASL_PLAINTEXT` and `SASL_SSL`.
    pub sasl: Option<SaslConfig>,
}

/// The writing side of a connection, behind one lock: its byte stream, and when its SASL session
/// is to be renewed (KIP-368).
struct Writer {
    stream: WriteHalf,
    reauthenticate_at: Option<Instant>,
}

struct Pending {
    api: ApiKey,
    version: i16,
    tx: oneshot::Sender<Result<Response>>,
}

#[derive(Default)]
struct State {
    broken: Option<String>,
    pending: HashMap<i32, Pending>,
}

struct Shared {
    broker: String,
    state: Mutex<State>,
    throttle_until: Mutex<Option<Instant>>,
}

impl Shared {
    /// Marks the connection broken and fails every pending request with the reason.
    fn poison(&self, reason: &str) {
        let drained: Vec<Pending> = {
            let mut state = lock(&self.state);
            if state.broken.is_none() {
                state.broken = Some(reason.to_string());
            }
            state.pending.drain().map(|(_, p)| p).collect()
        };
        for p in drained {
            let _ = p.tx.send(Err(Error::ConnectionBroken {
                api: p.api.name(),
                broker: self.broker.clone(),
                reason: reason.to_string(),
            }));
        }
    }
}

/// A live connection. Cheap to share (`Arc<Connection>`); dropping the last handle closes it.
pub struct Connection {
    pub(crate) node_id: i32,
    broker: String,
    /// Held for each request write, and for a whole SASL exchange.
    writer: tokio::sync::Mutex<Writer>,
    shared: Arc<Shared>,
    /// The broker's version range per API key.
    broker_versions: HashMap<i16, (i16, i16)>,
    next_correlation_id: AtomicI32,
    settings: ConnectionSettings,
    reader: JoinHandle<()>,
    /// The task that renews the SASL session of an idle connection, when the broker limits it.
    reauthentication: OnceLock<AbortHandle>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        if let Some(task) = self.reauthentication.get() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("node_id", &self.node_id)
            .field("broker", &self.broker)
            .finish()
    }
}

impl Connection {
    /// Connects (with the TLS handshake when configured), negotiates versions with ApiVersions
    /// (v4, falling back when the broker answers UNSUPPORTED_VERSION), starts the reader task,
    /// and authenticates when SASL is configured.
    pub(crate) async fn connect(
        node_id: i32,
        addr: &str,
        settings: &ConnectionSettings,
    ) -> Result<Arc<Connection>> {
        let (read, mut write) = open(addr, settings).await?;
        let mut reader = FrameReader::new(read, settings.max_frame_size);
        let (broker_versions, correlation_id) =
            negotiate_versions(&mut reader, &mut write, addr, settings).await?;
        let shared = Arc::new(Shared {
            broker: addr.to_string(),
            state: Mutex::new(State::default()),
            throttle_until: Mutex::new(None),
        });
        let reader = tokio::spawn(read_loop(reader, Arc::clone(&shared)));
        let conn = Arc::new(Connection {
            node_id,
            broker: addr.to_string(),
            writer: tokio::sync::Mutex::new(Writer {
                stream: write,
                reauthenticate_at: None,
            }),
            shared,
            broker_versions,
            next_correlation_id: AtomicI32::new(correlation_id + 1),
            settings: settings.clone(),
            reader,
            reauthentication: OnceLock::new(),
        });
        let session_ends = {
            let mut writer = conn.writer.lock().await;
            conn.authenticate(&mut writer).await?;
            writer.reauthenticate_at.is_some()
        };
        if session_ends {
            conn.keep_authenticated();
        }
        tracing::debug!(broker = addr, node_id, "connected");
        Ok(conn)
    }

    /// Runs the SASL exchange, if SASL is configured, on the held `writer`: no other request goes
    /// out until it ends (a broker closes a connection that sends one mid-exchange), while the
    /// answers to requests sent before still arrive. When the broker limits the session
    /// (KIP-368), sets when to renew it.
    async fn authenticate(&self, writer: &mut Writer) -> Result<()> {
        let Some(sasl) = &self.settings.sasl else {
            return Ok(());
        };
        let timeout = self.settings.connect_timeout;
        let lifetime = self
            .sasl_exchange(&mut writer.stream, sasl, timeout)
            .await?;
        writer.reauthenticate_at =
            lifetime.map(|lifetime| Instant::now() + crate::sasl::reauthentication_delay(lifetime));
        Ok(())
    }

    /// Authenticates with `config`; `writer` is the connection's, held for the whole
    /// exchange. Each request waits at most `timeout`. Returns the session lifetime the broker set
    /// (KIP-368), `None` when the session does not end. A refusal is [`Error::Authentication`] with
    /// the broker's message.
    async fn sasl_exchange(
        &self,
        writer: &mut WriteHalf,
        config: &SaslConfig,
        timeout: Duration,
    ) -> Result<Option<Duration>> {
        let refused = |reason: String| Error::Authentication {
            broker: self.broker().to_string(),
            reason,
        };
        let mechanism = config.mechanism();
        // The first token before anything is sent: a failing token callback sends nothing.
        let (mut client, mut token) = crate::sasl::SaslClient::start(config)
            .await
            .map_err(&refused)?;
        let handshake = SaslHandshakeRequest {
            mechanism: mechanism.into(),
            ..Default::default()
        };
        let version = self.version(ApiKey::SaslHandshake)?;
        let answer = self.exchange(writer, handshake, version, timeout).await?;
        if answer.error_code != error_codes::NONE {
            let offered: Vec<&str> = answer.mechanisms.iter().map(|m| &**m).collect();
            let offered = match offered.as_slice() {
                [] => "none: is this a SASL listener?".to_string(),
                names => names.join(", "),
            };
            return Err(refused(format!(
                "SaslHandshake for {mechanism} answered {} (the broker offers: {offered})",
                ErrorCode::from_code(answer.error_code).name(),
            )));
        }

        let version = self.version(ApiKey::SaslAuthenticate)?;
        loop {
            let request = SaslAuthenticateRequest {
                auth_bytes: token.into(),
                ..Default::default()
            };
            let answer = self.exchange(writer, request, version, timeout).await?;
            if answer.error_code != error_codes::NONE {
                let message = answer.error_message.map_or_else(
                    || ErrorCode::from_code(answer.error_code).name().to_string(),
                    |m| m.to_string(),
                );
                return Err(refused(format!("{mechanism}: {message}")));
            }
            match client.step(&answer.auth_bytes).map_err(&refused)? {
                Some(next) => token = next,
                None => {
                    let lifetime = u64::try_from(answer.session_lifetime_ms).unwrap_or(0);
                    return Ok((lifetime > 0).then(|| Duration::from_millis(lifetime)));
                }
            }
        }
    }

    /// The writer, with the SASL session renewed first when that is due, so that no request
    /// goes out on an ended session. A failed renewal breaks the connection: its pending requests
    /// fail and the client connects again.
    async fn writer(&self) -> Result<tokio::sync::MutexGuard<'_, Writer>> {
        let mut writer = self.writer.lock().await;
        let due = writer
            .reauthenticate_at
            .is_some_and(|at| at <= Instant::now());
        if due {
            if let Err(e) = self.authenticate(&mut writer).await {
                tracing::warn!(broker = %self.broker, error = %e, "SASL re-authentication failed");
                self.shared
                    .poison(&format!("SASL re-authentication failed: {e}"));
                return Err(e);
            }
            tracing::debug!(broker = %self.broker, "SASL session renewed");
        }
        Ok(writer)
    }

    /// KIP-368: renews the SASL session when due even when no request comes, from a task that
    /// stops with the connection (or when the session no longer ends).
    fn keep_authenticated(self: &Arc<Self>) {
        let conn = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            loop {
                let due = match conn.upgrade() {
                    Some(conn) => conn.writer.lock().await.reauthenticate_at,
                    None => return,
                };
                let Some(due) = due else { return };
                tokio::time::sleep_until(due).await;
                let Some(conn) = conn.upgrade() else { return };
                if conn.writer().await.is_err() {
                    return;
                }
            }
        });
        // Set once, right after the connection is made.
        let _ = self.reauthentication.set(task.abort_handle());
    }

    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// Whether the connection broke (it is then replaced on the next request).
    pub fn is_broken(&self) -> bool {
        lock(&self.shared.state).broken.is_some()
    }

    /// The broker's advertised range for `api`.
    pub fn broker_range(&self, api: ApiKey) -> Option<(i16, i16)> {
        self.broker_versions.get(&api.key()).copied()
    }

    /// The highest version of `api` both sides support.
    pub fn version(&self, api: ApiKey) -> Result<i16> {
        let (cmin, cmax) = client_versions(api).unwrap_or(api.versions());
        let Some((bmin, bmax)) = self.broker_range(api) else {
            return Err(Error::UnsupportedVersion {
                api: api.name(),
                broker: self.broker.clone(),
                client_min: cmin,
                client_max: cmax,
                broker_range: "none".into(),
            });
        };
        let v = cmax.min(bmax);
        if v < cmin.max(bmin) {
            return Err(Error::UnsupportedVersion {
                api: api.name(),
                broker: self.broker.clone(),
                client_min: cmin,
                client_max: cmax,
                broker_range: format!("{bmin}..={bmax}"),
            });
        }
        Ok(v)
    }

    async fn wait_throttle(&self) {
        let until = *lock(&self.shared.throttle_until);
        if let Some(until) = until {
            tokio::time::sleep_until(until).await;
        }
    }

    fn encode(&self, request: &Request, version: i16) -> Result<(i32, bytes::BytesMut)> {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode_request_frame(
            request,
            version,
            correlation_id,
            Some(&self.settings.client_id),
            Some(self.settings.instance_id),
        )
        .map_err(|e| Error::protocol(request.api_key().name(), format!("encode: {e}")))?;
        Ok((correlation_id, frame))
    }

    /// The error for a request on a broken connection.
    fn broken(&self, api: ApiKey, reason: String) -> Error {
        Error::ConnectionBroken {
            api: api.name(),
            broker: self.broker.clone(),
            reason,
        }
    }

    /// Writes `frame` with `writer` (this connection's, locked); a failed write breaks the
    /// connection.
    async fn write(&self, writer: &mut WriteHalf, api: ApiKey, frame: &[u8]) -> Result<()> {
        // A TLS stream may keep sealed records until flushed (when the socket would block).
        let written = async {
            writer.write_all(frame).await?;
            writer.flush().await
        };
        if let Err(e) = written.await {
            let reason = format!("write failed: {e}");
            self.shared.poison(&reason);
            return Err(self.broken(api, reason));
        }
        Ok(())
    }

    /// Registers `request` as pending and writes it with `writer`; the receiver gets its
    /// response from the reader task.
    async fn send(
        &self,
        writer: &mut WriteHalf,
        request: &Request,
        version: i16,
    ) -> Result<(i32, oneshot::Receiver<Result<Response>>)> {
        let api = request.api_key();
        let (correlation_id, frame) = self.encode(request, version)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut state = lock(&self.shared.state);
            if let Some(reason) = &state.broken {
                return Err(self.broken(api, reason.clone()));
            }
            state
                .pending
                .insert(correlation_id, Pending { api, version, tx });
        }
        self.write(writer, api, &frame).await?;
        Ok((correlation_id, rx))
    }

    /// Waits at most `timeout` for the response of a sent request.
    async fn receive(
        &self,
        api: ApiKey,
        correlation_id: i32,
        response: oneshot::Receiver<Result<Response>>,
        timeout: Duration,
    ) -> Result<Response> {
        match tokio::time::timeout(timeout, response).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.broken(api, "reader stopped".into())),
            Err(_) => {
                lock(&self.shared.state).pending.remove(&correlation_id);
                Err(Error::Timeout {
                    api: api.name(),
                    broker: self.broker.clone(),
                    timeout,
                })
            }
        }
    }

    /// Sends `request` at `version` and waits for its response (at most `timeout`).
    pub async fn call(
        &self,
        request: Request,
        version: i16,
        timeout: Duration,
    ) -> Result<Response> {
        let api = request.api_key();
        self.wait_throttle().await;
        let (correlation_id, rx) = {
            let mut writer = self.writer().await?;
            self.send(&mut writer.stream, &request, version).await?
        };
        let response = self.receive(api, correlation_id, rx, timeout).await?;
        check_instance_id_rejection(api, &self.broker, self.settings.instance_id, &response)?;
        Ok(response)
    }

    /// One request and its typed response with `writer` already held (the SASL exchange, which
    /// nothing else may interleave with).
    pub(crate) async fn exchange<R: RequestBody>(
        &self,
        writer: &mut WriteHalf,
        request: R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response> {
        let request: Request = request.into();
        let (correlation_id, rx) = self.send(writer, &request, version).await?;
        let response = self
            .receive(R::API_KEY, correlation_id, rx, timeout)
            .await?;
        typed_response::<R>(response)
    }

    /// [`Connection::call`] with a typed request: the answer is the request's typed response.
    pub async fn request<R: RequestBody>(
        &self,
        request: R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response> {
        let response = self.call(request.into(), version, timeout).await?;
        typed_response::<R>(response)
    }

    /// Sends a request that gets no response (Produce with acks=0).
    pub async fn send_only(&self, request: Request, version: i16) -> Result<()> {
        let api = request.api_key();
        self.wait_throttle().await;
        let broken = lock(&self.shared.state).broken.clone();
        if let Some(reason) = broken {
            return Err(self.broken(api, reason));
        }
        let (_, frame) = self.encode(&request, version)?;
        let mut writer = self.writer().await?;
        self.write(&mut writer.stream, api, &frame).await
    }
}

/// A failure to set a connection up, before any request of the caller's was sent.
fn connect_error(addr: &str, reason: String) -> Error {
    Error::Connect {
        api: "ApiVersions",
        broker: addr.to_string(),
        reason,
    }
}

/// The byte stream to `addr`: a TCP connection, TLS over it when configured, within the connect
/// timeout.
async fn open(addr: &str, settings: &ConnectionSettings) -> Result<(ReadHalf, WriteHalf)> {
    let open = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| connect_error(addr, e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let halves: (ReadHalf, WriteHalf) = match &settings.tls {
            None => {
                let (read, write) = tcp.into_split();
                (Box::new(read), Box::new(write))
            }
            Some(tls) => {
                let (read, write) = tokio::io::split(tls.connect(addr, tcp).await?);
                (Box::new(read), Box::new(write))
            }
        };
        Ok(halves)
    };
    tokio::time::timeout(settings.connect_timeout, open)
        .await
        .map_err(|_| {
            connect_error(
                addr,
                format!("timed out after {:?}", settings.connect_timeout),
            )
        })?
}

/// ApiVersions (v4, falling back when the broker answers UNSUPPORTED_VERSION), before the
/// reader task starts: the broker's version range per API key, and the last correlation ID used.
async fn negotiate_versions(
    reader: &mut FrameReader<ReadHalf>,
    write: &mut WriteHalf,
    addr: &str,
    settings: &ConnectionSettings,
) -> Result<(HashMap<i16, (i16, i16)>, i32)> {
    let connect_err = |reason: String| connect_error(addr, reason);
    let mut correlation_id = 0;
    let mut version = API_VERSIONS_FIRST;
    let response = loop {
        correlation_id += 1;
        let request = Request::ApiVersions(ApiVersionsRequest {
            client_software_name: "skiff-client".into(),
            client_software_version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        });
        let frame = encode_request_frame(
            &request,
            version,
            correlation_id,
            Some(&settings.client_id),
            Some(settings.instance_id),
        )
        .map_err(|e| connect_err(format!("encoding ApiVersions: {e}")))?;
        let round_trip = async {
            write.write_all(&frame).await.map_err(|e| e.to_string())?;
            write.flush().await.map_err(|e| e.to_string())?;
            reader
                .read_frame()
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "connection closed during ApiVersions".to_string())
        };
        let frame = tokio::time::timeout(settings.connect_timeout, round_trip)
            .await
            .map_err(|_| connect_err("ApiVersions timed out".into()))?
            .map_err(connect_err)?;
        let response = decode_api_versions(frame, version).map_err(connect_err)?;
        if response.error_code == error_codes::UNSUPPORTED_VERSION && version > 0 {
            // The broker answered with a v0 body listing its ranges: retry with the highest
            // ApiVersions version it supports (v0 when it does not say).
            let broker_max = response
                .api_keys
                .iter()
                .find(|k| k.api_key == ApiKey::ApiVersions.key())
                .map(|k| k.max_version)
                .unwrap_or(0);
            version = broker_max.clamp(0, version - 1);
            continue;
        }
        if response.error_code != error_codes::NONE {
            return Err(connect_err(format!(
                "ApiVersions v{version} answered with error {}",
                response.error_code
            )));
        }
        break response;
    };
    let broker_versions = response
        .api_keys
        .iter()
        .map(|k| (k.api_key, (k.min_version, k.max_version)))
        .collect();
    Ok((broker_versions, correlation_id))
}

/// The typed body of `response` for the request type `R`. The one place where an answer of
/// another API than the request's becomes an error.
pub(crate) fn typed_response<R: RequestBody>(response: Response) -> Result<R::Response> {
    R::from_response(response).map_err(|other| {
        Error::protocol(
            R::API_KEY.name(),
            format!("unexpected response type ({})", other.api_key().name()),
        )
    })
}

/// ApiVersions responses always use header v0; an UNSUPPORTED_VERSION answer has a v0 body.
fn decode_api_versions(
    frame: Bytes,
    version: i16,
) -> std::result::Result<skiff_protocol::generated::ApiVersionsResponse, String> {
    let attempt = |v: i16| match parse_response_frame(frame.clone(), ApiKey::ApiVersions, v) {
        Ok((_, response)) => {
            typed_response::<ApiVersionsRequest>(response).map_err(|e| e.to_string())
        }
        Err(e) => Err(format!("decoding ApiVersions v{v} response: {e}")),
    };
    match attempt(version) {
        Ok(r) if r.error_code != error_codes::UNSUPPORTED_VERSION => Ok(r),
        first => attempt(0).or(first),
    }
}

/// KIP-1313: a broker rejecting a header's instance ID answers INVALID_REQUEST at every level of
/// the API's error response. Turn that into a typed error naming the KIP.
fn check_instance_id_rejection(
    api: ApiKey,
    broker: &str,
    instance_id: Uuid,
    response: &Response,
) -> Result<()> {
    let codes = skiff_protocol::response_error_codes(response);
    let message = crate::util::first_error_message(response);
    let all_invalid = !codes.is_empty() && codes.iter().all(|&c| c == error_codes::INVALID_REQUEST);
    if !all_invalid {
        return Ok(());
    }
    let names_identity = message.as_deref().is_some_and(|m| {
        let m = m.to_ascii_lowercase();
        m.contains("kip-1313") || m.contains("instance id")
    });
    // Without a message field, an all-INVALID_REQUEST answer to a well-formed request from this
    // client is the KIP-1313 rejection (the heartbeat's own validation errors carry messages).
    if names_identity || message.is_none() {
        return Err(Error::InstanceIdRejected {
            api: api.name(),
            broker: broker.to_string(),
            instance_id: instance_id.to_string(),
            message,
        });
    }
    Ok(())
}

async fn read_loop(mut reader: FrameReader<ReadHalf>, shared: Arc<Shared>) {
    let reason = loop {
        let frame = match reader.read_frame().await {
            Ok(Some(frame)) => frame,
            Ok(None) => break "closed by the broker".to_string(),
            Err(e) => break format!("read failed: {e}"),
        };
        let Some(id_bytes) = frame.get(..4) else {
            break "response frame shorter than a correlation ID".to_string();
        };
        let mut id = [0u8; 4];
        id.copy_from_slice(id_bytes);
        let correlation_id = i32::from_be_bytes(id);
        let Some(pending) = lock(&shared.state).pending.remove(&correlation_id) else {
            // A request that timed out: its late answer is dropped.
            continue;
        };
        let result = match parse_response_frame(frame, pending.api, pending.version) {
            Ok((_, response)) => {
                let throttle = throttle_time_ms(&response);
                if throttle > 0 {
                    let until = Instant::now() + Duration::from_millis(throttle as u64);
                    *lock(&shared.throttle_until) = Some(until);
                }
                Ok(response)
            }
            Err(e) => Err(Error::protocol(
                pending.api.name(),
                format!("decoding v{} response: {e}", pending.version),
            )),
        };
        let _ = pending.tx.send(result);
    };
    tracing::debug!(broker = %shared.broker, %reason, "connection closed");
    shared.poison(&reason);
}

#[cfg(test)]
mod tests {
    use skiff_protocol::generated::{
        ApiVersionsResponse, MetadataRequest, MetadataResponse, ProduceRequest,
    };

    use super::*;

    #[test]
    fn a_response_of_another_api_is_one_protocol_error_naming_both() {
        let typed = typed_response::<MetadataRequest>(Response::Metadata(MetadataResponse {
            controller_id: 7,
            ..Default::default()
        }));
        assert!(matches!(typed, Ok(r) if r.controller_id == 7));

        let mismatch =
            typed_response::<ProduceRequest>(Response::ApiVersions(ApiVersionsResponse::default()));
        match mismatch {
            Err(Error::Protocol { api, reason }) => {
                assert_eq!(api, "Produce");
                assert!(reason.contains("ApiVersions"), "{reason}");
            }
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }
}
