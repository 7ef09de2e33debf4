//! One client connection: read frames, apply the KIP-1313 identity rule, dispatch, and write
//! responses in request order.
//!
//! Requests are pipelined: each is dispatched as soon as it is read (so state changes happen in
//! request order), and a reply that must wait (acks=all durability, a fetch long-poll) waits
//! while later requests are read; responses still leave in request order.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use skiff_protocol::codec::{ChunkChain, ChunkedBuf};
use skiff_protocol::header::encode_response_frame_chunked;
use skiff_protocol::{
    ApiKey, Frame, FrameError, FrameReader, Request, RequestFrame, RequestHeaderError, Response,
    error_codes,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Semaphore, watch};

use crate::handlers::{self, Reply, RequestContext};
use crate::identity::{ConnectionIdentity, Verdict};
use crate::state::Broker;

/// Requests read ahead of their responses, per connection (Kafka clients use at most 5).
const MAX_IN_FLIGHT: usize = 32;

/// A response waiting its turn: (version, correlation ID, response) or nothing for acks=0.
type Pending = BoxFuture<'static, Option<(i16, i32, Response)>>;

/// A connection just accepted: its ID, the index of its listener, the socket and the peer.
pub struct Accepted {
    pub id: u64,
    pub listener: usize,
    pub stream: TcpStream,
    pub peer: SocketAddr,
}

pub struct Connection {
    reader: FrameReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// The index of the listener the connection came in on.
    listener: usize,
    peer: SocketAddr,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
    span: tracing::Span,
    identity: ConnectionIdentity,
    id: u64,
    record: crate::clients::SharedRecord,
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
    Close,
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
            stream,
            peer,
        } = accepted;
        let (read, write) = stream.into_split();
        let max = broker.config.socket_request_max_bytes;
        let reader = FrameReader::new(read, max);
        let reader = match budget {
            Some((budget, total)) => reader.with_budget(budget, total),
            None => reader,
        };
        let record = broker
            .clients
            .register(crate::clients::ConnectionRecord::new(
                id,
                peer,
                crate::clock::now_ms(),
            ));
        Connection {
            reader,
            writer: write,
            listener,
            peer,
            broker,
            shutdown,
            span,
            identity: ConnectionIdentity::default(),
            id,
            record,
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
        self.broker
            .metrics
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
        tracing::debug!(reason, "connection closed");
    }

    async fn serve(&mut self) -> &'static str {
        let mut pending: FuturesOrdered<Pending> = FuturesOrdered::new();
        let mut closing: Option<&'static str> = None;
        loop {
            if closing.is_some() && pending.is_empty() {
                break;
            }
            let can_read = closing.is_none() && pending.len() < MAX_IN_FLIGHT;
            tokio::select! {
                frame = self.reader.next_frame(), if can_read => {
                    match frame {
                        Ok(Some(frame)) => {
                            if let Next::Close = self.on_frame(frame, &mut pending) {
                                closing = Some("protocol error");
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
                        if let Some((version, correlation_id, response)) = done
                            && let Err(e) = encode_response_frame_chunked(&mut out, &response, version, correlation_id)
                        {
                            tracing::error!(error = %e, api = ?response.api_key(), version, "could not encode a response; closing");
                            return "encode error";
                        }
                        next = pending.next().now_or_never().flatten();
                    }
                    let mut chain = ChunkChain::from(out.take_chunks());
                    if let Err(e) = self.writer.write_all_buf(&mut chain).await {
                        tracing::debug!(error = %e, "write failed");
                        return "write error";
                    }
                }
                _ = crate::shutdown::stopped(&mut self.shutdown), if closing.is_none() => {
                    closing = Some("broker shutting down");
                }
            }
        }
        let _ = self.writer.shutdown().await;
        closing.unwrap_or("closed")
    }

    /// Parses and dispatches one request. Its share of the request budget is held until its
    /// response is ready (or, for acks=0, until it is handled).
    fn on_frame(&mut self, frame: Frame, pending: &mut FuturesOrdered<Pending>) -> Next {
        let Frame { body, budget } = frame;
        let mut pending = Holding { pending, budget };
        let pending = &mut pending;
        let frame = match RequestFrame::parse(body) {
            Ok(frame) => frame,
            Err(RequestHeaderError::UnknownApiKey {
                api_key,
                correlation_id,
            }) => {
                tracing::info!(api_key, ?correlation_id, "unknown API key; closing");
                return Next::Close;
            }
            Err(RequestHeaderError::Malformed(e)) => {
                tracing::info!(error = %e, "malformed request header; closing");
                return Next::Close;
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

        let supported = self.broker.serves(api_key);
        let version_ok = supported.is_some_and(|(lo, hi)| (lo..=hi).contains(&version));
        if !version_ok && api_key == ApiKey::ApiVersions {
            // Answer with a v0 body listing what is supported, so the client can retry.
            let response = handlers::api_versions::unsupported_version_response(&self.broker);
            pending.push_back(Box::pin(async move { Some((0, correlation_id, response)) }));
            return Next::Continue;
        }

        let request = match frame.decode_body() {
            Ok(request) => request,
            Err(e) => {
                tracing::info!(api = ?api_key, version, error = %e, "undecodable request body; closing");
                return Next::Close;
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
            pending.push_back(Box::pin(async move {
                Some((version, correlation_id, response))
            }));
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
                let message = verdict.message().unwrap_or_default();
                tracing::info!(api = ?api_key, reason = reason.label(), "{message}");
                let response = skiff_protocol::error_response::error_response(
                    &request,
                    version,
                    error_codes::INVALID_REQUEST,
                    Some(&message),
                );
                pending.push_back(Box::pin(async move {
                    Some((version, correlation_id, response))
                }));
                return Next::Continue;
            }
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
        }

        let ctx = RequestContext {
            broker: Arc::clone(&self.broker),
            listener: self.listener,
            version,
            client_id: frame.header.client_id.as_ref().map(|s| s.to_string()),
            instance_id: self.identity.instance_id(),
            peer: self.peer,
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
        match handlers::dispatch(&ctx, request) {
            Reply::Now(response) => {
                pending.push_back(Box::pin(async move {
                    Some((version, correlation_id, response))
                }));
            }
            Reply::Later(future) => {
                pending.push_back(Box::pin(async move {
                    Some((version, correlation_id, future.await))
                }));
            }
            Reply::Nothing => pending.push_back(Box::pin(async { None })),
        }
        Next::Continue
    }
}
