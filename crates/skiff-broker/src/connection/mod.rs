//! One client connection: read frames, apply the KIP-1313 identity rule, dispatch, and write
//! responses in request order.
//!
//! Requests are pipelined: each is dispatched as soon as it is read (so state changes happen in
//! request order), and a reply that must wait (acks=all durability, a fetch long-poll) waits
//! while later requests are read; responses still leave in request order.

mod auth;
mod quota;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use skiff_auth::principal::KafkaPrincipal;
use skiff_protocol::codec::{ChunkChain, ChunkedBuf, WriteBuf};
use skiff_protocol::header::encode_response_frame_chunked;
use skiff_protocol::{
    ApiKey, Frame, FrameError, FrameReader, Request, RequestFrame, RequestHeaderError, Response,
    error_codes,
};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Semaphore, watch};

use crate::handlers::{self, Reply, RequestContext};
use crate::identity::{ConnectionIdentity, Verdict};
use crate::journal::{DisconnectReason, EventKind, IdentifiedBy, clip};
use crate::owners::Claim;
use crate::security::sasl::{Gate, SaslSession};
use crate::security::{Listener, ReadHalf, Transport, WriteHalf};
use crate::state::Broker;

/// Requests read ahead of their responses, per connection (Kafka clients use at most 5 when
/// idempotent; librdkafka otherwise sends as many as its linger cuts).
const MAX_IN_FLIGHT: usize = 32;

/// The same in cluster mode, where a produce is answered only after its commit interval: a
/// client sending a request every `linger.ms` keeps interval / linger requests in flight (250 /
/// 5 = 50 with librdkafka's defaults), and a cap below that would queue them in the socket.
/// Their bytes stay bounded by `queued.max.request.bytes`.
const MAX_IN_FLIGHT_CLUSTER: usize = 512;

/// The largest frame a client may send before it authenticates (Kafka's
/// `sasl.server.max.receive.size` default).
const PRE_AUTH_MAX_FRAME: usize = 512 * 1024;

/// A response waiting its turn, or nothing for acks=0.
type Pending = BoxFuture<'static, Option<Outgoing>>;

/// What goes back to the client. Responses are the common case: boxing them to match the small
/// variant would cost an allocation per response.
#[allow(clippy::large_enum_variant)]
enum Outgoing {
    /// A Kafka response: (version, correlation ID, response).
    Response(i16, i32, Response),
    /// A bare SASL token, after a v0 SaslHandshake.
    Bare(Vec<u8>),
}

/// A connection just accepted, its transport in place: its ID, its listener, its byte stream and
/// the peer.
pub struct Accepted {
    pub id: u64,
    pub listener: Arc<Listener>,
    pub transport: Transport,
    pub peer: SocketAddr,
}

pub struct Connection {
    reader: FrameReader<ReadHalf>,
    writer: WriteHalf,
    /// The listener the connection came in on.
    listener: Arc<Listener>,
    /// Who the client is; `None` until SASL says, on SASL listeners.
    principal: Option<Arc<KafkaPrincipal>>,
    /// The SASL session, on SASL listeners.
    sasl: Option<SaslSession>,
    /// The peer's IP address as text (ACL hosts).
    host: Arc<str>,
    /// What claiming the connection's instance ID for its principal found, once both are known.
    instance_claim: Option<Claim>,
    /// With `client.instance.id.binding = enforce`: the principal that owns the instance ID this
    /// connection presented; every request but ApiVersions is then refused.
    refused_instance: Option<String>,
    peer: SocketAddr,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
    span: tracing::Span,
    identity: ConnectionIdentity,
    id: u64,
    record: crate::clients::SharedRecord,
    /// This connection sent a share-session request: its share sessions are closed with it
    /// (the others skip that work when they close).
    share_sessions: bool,
    /// A client quota throttled a response: nothing more is read from the client before this
    /// (KIP-219).
    muted_until: Option<tokio::time::Instant>,
    /// The KIP-714 client instance ID this connection's telemetry named (librdkafka sends no
    /// KIP-1313 header; its broker-assigned telemetry ID is its instance): what a
    /// `client-instance-id` quota applies to when the header has none.
    telemetry_instance: Option<skiff_protocol::Uuid>,
    /// The instance the journal files this connection's events under, once it has one: its
    /// KIP-1313 ID, else the telemetry ID it named.
    journaled_as: Option<skiff_protocol::Uuid>,
}

/// The responses queue of a connection while one request is handled: the response pushed takes
/// the request's budget with it.
struct Holding<'a> {
    pending: &'a mut FuturesOrdered<Pending>,
    budget: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Holding<'_> {
    fn push_back(&mut self, response: Pending) {
        match self.budget.take() {
            Some(budget) => self.pending.push_back(Box::pin(async move {
                let response = response.await;
                drop(budget);
                response
            })),
            None => self.pending.push_back(response),
        }
    }
}

/// What to do with the connection after a request.
enum Next {
    Continue,
    /// Close once the responses queued so far are sent (the reason is for the log).
    Close(&'static str),
}

impl Connection {
    /// `budget`: the bytes of requests in flight shared by every connection, with its size.
    pub fn new(
        accepted: Accepted,
        broker: Arc<Broker>,
        shutdown: watch::Receiver<bool>,
        span: tracing::Span,
        budget: Option<(Arc<Semaphore>, usize)>,
    ) -> Self {
        let Accepted {
            id,
            listener,
            transport,
            peer,
        } = accepted;
        let Transport {
            read,
            write,
            principal,
            parker,
        } = transport;
        let sasl = listener
            .protocol
            .uses_sasl()
            .then(|| SaslSession::new(listener.sasl_mechanisms.clone()));
        // Before authentication, frames are capped as Kafka's `sasl.server.max.receive.size`.
        let max = match sasl {
            Some(_) => PRE_AUTH_MAX_FRAME.min(broker.config.socket_request_max_bytes),
            None => broker.config.socket_request_max_bytes,
        };
        let reader = FrameReader::new(read, max);
        // A TLS client's large requests arrive in 16 KiB records: gather them (see
        // `FrameReader::coalescing`) rather than reading each alone, the socket out of the
        // runtime's poller while the reader pauses (see `security::parking`). Only a TLS
        // transport has a parker.
        let reader = match parker {
            Some(parker) => reader.coalescing().with_pausing(Box::new(parker)),
            None => reader,
        };
        let reader = match budget {
            Some((budget, total)) => reader.with_budget(budget, total),
            None => reader,
        };
        let mut record =
            crate::clients::ConnectionRecord::new(id, peer, &listener.name, crate::clock::now_ms());
        record.principal = principal.as_ref().map(ToString::to_string);
        let record = broker.clients.register(record);
        Connection {
            reader,
            writer: write,
            listener,
            principal: principal.map(Arc::new),
            sasl,
            host: Arc::from(peer.ip().to_string()),
            instance_claim: None,
            refused_instance: None,
            peer,
            broker,
            shutdown,
            span,
            identity: ConnectionIdentity::default(),
            id,
            record,
            share_sessions: false,
            muted_until: None,
            telemetry_instance: None,
            journaled_as: None,
        }
    }

    /// Serves until the peer or the broker closes the connection; `kill` (the shutdown
    /// deadline) drops it at once, wherever it is, even in a write the peer does not read.
    pub async fn run(mut self, mut kill: watch::Receiver<bool>) {
        self.broker
            .metrics
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        self.broker
            .metrics
            .connections_open
            .fetch_add(1, Ordering::Relaxed);
        tracing::debug!("connection opened");
        let reason = tokio::select! {
            reason = self.serve() => reason,
            _ = crate::shutdown::stopped(&mut kill) => "shutdown deadline passed",
        };
        self.broker.clients.unregister(self.id);
        if let Some(instance) = self.journaled_as {
            self.broker.journal.record(
                instance,
                EventKind::Disconnected {
                    connection: self.id,
                    reason: disconnect_reason(reason),
                    detail: reason.to_string(),
                },
            );
        }
        if self.share_sessions {
            self.broker.share_connection_closed(self.id);
        }
        if let (Some(Claim::Owner), Some(id)) = (&self.instance_claim, self.identity.instance_id())
        {
            self.broker
                .security
                .owners
                .release_instance(id, crate::clock::now_ms());
        }
        self.broker
            .metrics
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
        tracing::debug!(reason, "connection closed");
    }

    async fn serve(&mut self) -> &'static str {
        let mut pending: FuturesOrdered<Pending> = FuturesOrdered::new();
        let mut closing: Option<&'static str> = None;
        let max_in_flight = if self.broker.cluster().is_some() {
            MAX_IN_FLIGHT_CLUSTER
        } else {
            MAX_IN_FLIGHT
        };
        let idle = self
            .broker
            .config
            .connections_max_idle_ms
            .map(std::time::Duration::from_millis);
        let mut last_active = tokio::time::Instant::now();
        loop {
            if closing.is_some() && pending.is_empty() {
                break;
            }
            // Idle: nothing read and nothing owed the client for `connections.max.idle.ms`.
            let idle_at = idle
                .filter(|_| pending.is_empty() && closing.is_none())
                .map(|idle| last_active + idle);
            let muted = self
                .muted_until
                .is_some_and(|t| t > tokio::time::Instant::now());
            let can_read = closing.is_none() && pending.len() < max_in_flight && !muted;
            let unmute = self.muted_until;
            tokio::select! {
                () = async {
                    if let Some(t) = unmute {
                        tokio::time::sleep_until(t).await;
                    }
                }, if muted => {
                    self.muted_until = None;
                }
                () = async {
                    if let Some(at) = idle_at {
                        tokio::time::sleep_until(at).await;
                    }
                }, if idle_at.is_some() => {
                    tracing::debug!("idle for connections.max.idle.ms; closing");
                    closing = Some("idle");
                }
                frame = self.reader.next_frame(), if can_read => {
                    last_active = tokio::time::Instant::now();
                    match frame {
                        Ok(Some(frame)) => {
                            if let Next::Close(reason) = self.on_frame(frame, &mut pending) {
                                closing = Some(reason);
                            }
                        }
                        Ok(None) => closing = Some("peer closed"),
                        Err(FrameError::Io(e)) => {
                            tracing::debug!(error = %e, "read failed");
                            return "read error";
                        }
                        Err(e) => {
                            tracing::info!(error = %e, "bad frame; closing");
                            closing = Some("bad frame");
                        }
                    }
                }
                Some(done) = pending.next(), if !pending.is_empty() => {
                    // This response and every later one that is already complete go out in one
                    // vectored write; record sets are sent from their own buffers, not copied.
                    // The buffer lives for this write only: an idle connection holds none.
                    let mut out = ChunkedBuf::new();
                    let mut next = Some(done);
                    while let Some(done) = next.take() {
                        match done {
                            Some(Outgoing::Response(version, correlation_id, response)) => {
                                let throttle = response.throttle_time_ms();
                                if throttle > 0 {
                                    self.journal_throttle(response.api_key(), throttle);
                                }
                                if throttle > 0 && quota::client_throttles(response.api_key(), version) {
                                    self.mute_for(i64::from(throttle));
                                }
                                if let Err(e) = encode_response_frame_chunked(&mut out, &response, version, correlation_id) {
                                    tracing::error!(error = %e, api = ?response.api_key(), version, "could not encode a response; closing");
                                    return "encode error";
                                }
                            }
                            Some(Outgoing::Bare(token)) => {
                                let Ok(size) = i32::try_from(token.len()) else {
                                    return "encode error";
                                };
                                out.put_slice(&size.to_be_bytes());
                                out.put_slice(&token);
                            }
                            None => {}
                        }
                        next = pending.next().now_or_never().flatten();
                    }
                    let mut chain = ChunkChain::from(out.take_chunks());
                    // TLS may keep the last records it sealed until flushed (when the socket
                    // would block mid-write): without the flush an answer could wait forever.
                    let written = async {
                        self.writer.write_all_buf(&mut chain).await?;
                        self.writer.flush().await
                    };
                    if let Err(e) = written.await {
                        tracing::debug!(error = %e, "write failed");
                        return "write error";
                    }
                    last_active = tokio::time::Instant::now();
                }
                _ = crate::shutdown::stopped(&mut self.shutdown), if closing.is_none() => {
                    closing = Some("broker shutting down");
                }
            }
        }
        let _ = self.writer.shutdown().await;
        closing.unwrap_or("closed")
    }

    /// Reads nothing more from the client for `ms` (a quota's throttle, KIP-219).
    fn mute_for(&mut self, ms: i64) {
        let until = tokio::time::Instant::now()
            + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        self.muted_until = Some(self.muted_until.map_or(until, |t| t.max(until)));
    }

    /// Journals a throttled response (at most once a second per API: see the journal).
    fn journal_throttle(&self, api: ApiKey, throttle_ms: i32) {
        if let Some(instance) = self.journaled_as {
            let connection = self.id;
            self.broker.journal.with(|journal, now| {
                journal.throttled(
                    instance,
                    now,
                    connection,
                    api.name(),
                    i64::from(throttle_ms),
                );
            });
        }
    }

    /// The KIP-714 client instance ID the client goes by on this connection (from a
    /// GetTelemetrySubscriptions answer or a push), kept for the connection's record too.
    fn learn_telemetry_instance(&mut self, id: skiff_protocol::Uuid) {
        if self.telemetry_instance == Some(id) {
            return;
        }
        self.telemetry_instance = Some(id);
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .telemetry_instance_id = Some(id.to_string());
    }

    /// Files the connection under `instance` in the journal (once): its opening, and the
    /// software it named if ApiVersions came first.
    fn journal_connected(&mut self, instance: skiff_protocol::Uuid, by: IdentifiedBy) {
        if self.journaled_as.is_some() {
            return;
        }
        self.journaled_as = Some(instance);
        let record = self
            .record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let connection = self.id;
        self.broker.journal.with(|journal, now| {
            journal.record(
                instance,
                now,
                EventKind::Connected {
                    connection,
                    peer: record.peer,
                    listener: clip(&record.listener),
                    principal: record.principal.as_deref().map(clip),
                    identified_by: by,
                },
            );
            if let (Some(name), Some(version)) = (record.software_name, record.software_version) {
                journal.record(
                    instance,
                    now,
                    EventKind::Software {
                        connection,
                        name: clip(&name),
                        version: clip(&version),
                    },
                );
            }
        });
    }

    /// Parses and dispatches one request. Its share of the request budget is held until its
    /// response is ready (or, for acks=0, until it is handled).
    fn on_frame(&mut self, frame: Frame, pending: &mut FuturesOrdered<Pending>) -> Next {
        let Frame { body, budget } = frame;
        let request_bytes = body.len();
        let mut pending = Holding { pending, budget };
        let pending = &mut pending;
        if self
            .sasl
            .as_ref()
            .is_some_and(SaslSession::expects_bare_token)
        {
            return self.on_bare_token(&body, pending);
        }
        let frame = match RequestFrame::parse(body) {
            Ok(frame) => frame,
            Err(RequestHeaderError::UnknownApiKey {
                api_key,
                correlation_id,
            }) => {
                tracing::info!(api_key, ?correlation_id, "unknown API key; closing");
                return Next::Close("unknown API key");
            }
            Err(RequestHeaderError::Malformed(e)) => {
                tracing::info!(error = %e, "malformed request header; closing");
                return Next::Close("malformed request header");
            }
        };
        let api_key = frame.api_key;
        let version = frame.version();
        let correlation_id = frame.correlation_id();
        self.broker.metrics.count_request(api_key);
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .count(api_key, frame.header.client_id.as_deref());

        let gate = match &self.sasl {
            Some(sasl) => sasl.gate(api_key, crate::clock::now_ms()),
            None if matches!(api_key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) => {
                Gate::Sasl
            }
            None => Gate::Serve,
        };
        if let Gate::Close(reason) = gate {
            tracing::info!(api = ?api_key, reason, "closing");
            return Next::Close(reason);
        }

        let supported = self.broker.serves(api_key);
        if matches!(api_key, ApiKey::ShareFetch | ApiKey::ShareAcknowledge) {
            self.share_sessions = true;
        }
        let version_ok = supported.is_some_and(|(lo, hi)| (lo..=hi).contains(&version));
        if !version_ok && api_key == ApiKey::ApiVersions {
            // Answer with a v0 body listing what is supported, so the client can retry.
            let response = handlers::api_versions::unsupported_version_response(&self.broker);
            respond(pending, 0, correlation_id, response);
            return Next::Continue;
        }

        let request = match frame.decode_body() {
            Ok(request) => request,
            Err(e) => {
                tracing::info!(api = ?api_key, version, error = %e, "undecodable request body; closing");
                return Next::Close("undecodable request body");
            }
        };

        if !version_ok {
            tracing::info!(api = ?api_key, version, "unsupported API version");
            let response = skiff_protocol::error_response::error_response(
                &request,
                version,
                error_codes::UNSUPPORTED_VERSION,
                Some("this API version is not supported by Skiff"),
            );
            respond(pending, version, correlation_id, response);
            return Next::Continue;
        }

        // KIP-1313: the identity rule runs before any handler.
        let verdict = self
            .identity
            .check(frame.header_version, frame.header.instance_id());
        match verdict {
            Verdict::Accept { fixed_now: true } => {
                let metrics = &self.broker.metrics;
                match self.identity.instance_id() {
                    Some(id) => {
                        self.record
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .client_instance_id = Some(id.to_string());
                        self.span
                            .record("client_instance_id", tracing::field::display(id));
                        metrics
                            .connections_with_instance_id
                            .fetch_add(1, Ordering::Relaxed);
                        self.journal_connected(id, IdentifiedBy::Kip1313);
                        self.bind_instance();
                    }
                    None => {
                        metrics
                            .connections_without_instance_id
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Verdict::Accept { fixed_now: false } => {}
            Verdict::Reject {
                reason,
                expected,
                received,
            } => {
                self.broker.metrics.count_rejection(reason);
                self.broker.clients.record_rejection(
                    self.id,
                    api_key,
                    reason,
                    expected,
                    received,
                    crate::clock::now_ms(),
                );
                if let Some(instance) = expected.or(received) {
                    self.broker.journal.record(
                        instance,
                        EventKind::Kip1313Rejected {
                            connection: self.id,
                            api: api_key.name().to_string(),
                            reason: reason.label().to_string(),
                            expected: expected.map(|u| u.to_string()),
                            received: received.map(|u| u.to_string()),
                        },
                    );
                }
                let message = verdict.message().unwrap_or_default();
                tracing::info!(api = ?api_key, reason = reason.label(), "{message}");
                let response = skiff_protocol::error_response::error_response(
                    &request,
                    version,
                    error_codes::INVALID_REQUEST,
                    Some(&message),
                );
                respond(pending, version, correlation_id, response);
                return Next::Continue;
            }
        }

        if gate == Gate::Sasl {
            return self.on_sasl(request, version, correlation_id, pending);
        }

        if let Some(owner) = &self.refused_instance
            && !matches!(request, Request::ApiVersions(_))
        {
            let message = format!(
                "client instance ID {} belongs to {owner} (client.instance.id.binding = enforce)",
                self.identity
                    .instance_id()
                    .map(|id| id.to_string())
                    .unwrap_or_default()
            );
            let response = skiff_protocol::error_response::error_response(
                &request,
                version,
                error_codes::INVALID_REQUEST,
                Some(&message),
            );
            respond(pending, version, correlation_id, response);
            return Next::Continue;
        }

        if let Request::ApiVersions(r) = &request
            && version >= 3
        {
            let mut record = self
                .record
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            record.software_name = Some(r.client_software_name.to_string());
            record.software_version = Some(r.client_software_version.to_string());
            drop(record);
            if let Some(instance) = self.journaled_as {
                self.broker.journal.record(
                    instance,
                    EventKind::Software {
                        connection: self.id,
                        name: clip(&r.client_software_name),
                        version: clip(&r.client_software_version),
                    },
                );
            }
        }

        let ctx = RequestContext {
            broker: Arc::clone(&self.broker),
            connection_id: self.id,
            listener: self.listener.index,
            version,
            client_id: frame.header.client_id.as_ref().map(|s| s.to_string()),
            instance_id: self.identity.instance_id(),
            telemetry_instance: self.telemetry_instance,
            peer: self.peer,
            principal: match &self.principal {
                Some(principal) => Arc::clone(principal),
                None => Arc::clone(&self.broker.security.anonymous),
            },
            host: Arc::clone(&self.host),
            shutdown: self.shutdown.clone(),
            software: {
                let record = self
                    .record
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                record
                    .software_name
                    .clone()
                    .zip(record.software_version.clone())
            },
        };
        let pushed_as = match &request {
            Request::PushTelemetry(r) => Some(r.client_instance_id),
            _ => None,
        };
        let started = std::time::Instant::now();
        let reply = handlers::dispatch(&ctx, request);
        // The telemetry ID the client goes by: one the broker gave it, or one it pushed with and
        // the broker took (a refused push names no one).
        let telemetry_id = match &reply {
            Reply::Now(Response::GetTelemetrySubscriptions(r)) => Some(r.client_instance_id),
            Reply::Now(Response::PushTelemetry(r)) if r.error_code == 0 => pushed_as,
            _ => None,
        };
        if let Some(id) = telemetry_id.filter(|id| *id != skiff_protocol::Uuid::ZERO) {
            self.learn_telemetry_instance(id);
        }
        if self.identity.instance_id().is_none()
            && let Some(telemetry) = self.telemetry_instance
        {
            self.journal_connected(telemetry, IdentifiedBy::Telemetry);
        }
        let reply = if self.broker.quotas.any() {
            let who = crate::quotas::Requester {
                user: &ctx.principal.name,
                client_id: ctx.client_id.as_deref().unwrap_or(""),
                instance: ctx
                    .instance_id
                    .or(self.telemetry_instance)
                    .map(|id| id.to_string()),
            };
            let (reply, mute_ms) = quota::enforce(
                &ctx.broker,
                &who,
                api_key,
                version,
                request_bytes,
                started.elapsed(),
                reply,
            );
            if mute_ms > 0 {
                self.mute_for(mute_ms);
            }
            reply
        } else {
            reply
        };
        match reply {
            Reply::Now(response) => respond(pending, version, correlation_id, response),
            Reply::Later(future) => {
                pending.push_back(Box::pin(async move {
                    Some(Outgoing::Response(version, correlation_id, future.await))
                }));
            }
            Reply::Nothing => pending.push_back(Box::pin(async { None })),
        }
        Next::Continue
    }
}

/// Queues a response that is ready now.
fn respond(pending: &mut Holding<'_>, version: i16, correlation_id: i32, response: Response) {
    pending.push_back(Box::pin(async move {
        Some(Outgoing::Response(version, correlation_id, response))
    }));
}

/// The journal's reason for a connection's end, from the broker's words for it.
fn disconnect_reason(detail: &str) -> DisconnectReason {
    match detail {
        "peer closed" => DisconnectReason::ClientClosed,
        "idle" => DisconnectReason::Idle,
        "read error" | "write error" | "encode error" => DisconnectReason::Error,
        "broker shutting down" | "shutdown deadline passed" => DisconnectReason::BrokerShutdown,
        "SASL authentication failed" | "SASL mechanism not enabled" => {
            DisconnectReason::AuthenticationFailed
        }
        expired if expired.starts_with("the SASL session expired") => {
            DisconnectReason::AuthenticationFailed
        }
        _ => DisconnectReason::ProtocolError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_close_reads_as_a_journal_reason() {
        for (detail, reason) in [
            ("peer closed", DisconnectReason::ClientClosed),
            ("idle", DisconnectReason::Idle),
            ("read error", DisconnectReason::Error),
            ("write error", DisconnectReason::Error),
            ("broker shutting down", DisconnectReason::BrokerShutdown),
            ("shutdown deadline passed", DisconnectReason::BrokerShutdown),
            (
                "SASL authentication failed",
                DisconnectReason::AuthenticationFailed,
            ),
            (
                "the SASL session expired (connections.max.reauth.ms)",
                DisconnectReason::AuthenticationFailed,
            ),
            ("bad frame", DisconnectReason::ProtocolError),
            ("unknown API key", DisconnectReason::ProtocolError),
            (
                "a request before SASL authentication",
                DisconnectReason::ProtocolError,
            ),
        ] {
            assert_eq!(disconnect_reason(detail), reason, "{detail}");
        }
    }
}
