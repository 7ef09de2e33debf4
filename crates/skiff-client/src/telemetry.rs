//! KIP-714: the client pushes its own metrics when the cluster subscribes to them.
//!
//! One background task per [`Client`](crate::Client) (started with its first connection, unless
//! [`ClientConfig::enable_metrics_push`](crate::ClientConfig) is off):
//! GetTelemetrySubscriptions v0 with body ID = header ID = the client's instance ID (the KIP-1313
//! alignment), then — while the requested metrics are non-empty — PushTelemetry v0 every
//! PushIntervalMs with an OTLP `MetricsData` of the client metrics whose names match a requested
//! prefix, zstd-compressed when the broker accepts it. THROTTLING_QUOTA_EXCEEDED and
//! UNKNOWN_SUBSCRIPTION_ID (and UNSUPPORTED_COMPRESSION_TYPE, TELEMETRY_TOO_LARGE) re-fetch the
//! subscription; INVALID_REQUEST / INVALID_RECORD or a broker without the APIs stop the task.
//! `Client::close` sends a terminating push (fetching the subscription first if it never came).
//!
//! The module sees its client only through [`TelemetryTransport`] (state, instance ID, open
//! connection count, a request to any broker), which the client implements; it imports nothing
//! of the client's.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, MetricsData, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum, metric, number_data_point,
};
use prost::Message;
use skiff_protocol::generated::{GetTelemetrySubscriptionsRequest, PushTelemetryRequest};
use skiff_protocol::{RequestBody, Uuid, error_codes};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::util::lock;

/// Kafka's compression type IDs.
const COMPRESSION_NONE: i8 = 0;
const COMPRESSION_ZSTD: i8 = 4;

/// Wait before retrying after a failed request or when the broker gives no interval.
const RETRY: Duration = Duration::from_secs(1);
/// The interval used when the broker answers a non-positive one (Kafka's default).
const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);

/// Counters the client keeps for telemetry (cheap atomics updated on the hot paths).
#[derive(Debug, Default)]
pub(crate) struct ClientMetrics {
    pub records_sent: AtomicU64,
    pub record_errors: AtomicU64,
    pub records_consumed: AtomicU64,
    pub connections_created: AtomicU64,
}

impl ClientMetrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// The subscription in effect, as the last GetTelemetrySubscriptions answered it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Subscription {
    pub subscription_id: i32,
    pub requested: Vec<String>,
    pub push_interval: Duration,
    pub compression: i8,
    pub delta: bool,
    pub max_bytes: usize,
}

/// Per-client telemetry state.
pub(crate) struct Telemetry {
    pub metrics: ClientMetrics,
    pub subscription: Mutex<Option<Subscription>>,
    /// Sum values already reported (for delta temporality).
    reported: Mutex<HashMap<&'static str, u64>>,
    pub started: std::sync::atomic::AtomicBool,
    pub stop: watch::Sender<bool>,
    /// Held across each telemetry request, so that `terminate` waits for the task's request in
    /// flight instead of racing it: a second GetTelemetrySubscriptions within the push interval
    /// is throttled by the broker (as Kafka's), which would leave a short-lived client
    /// without its terminating push.
    exchange: tokio::sync::Mutex<()>,
    /// Set once a terminating push was sent (or telemetry stopped for good).
    pub terminated: std::sync::atomic::AtomicBool,
}

impl Telemetry {
    pub fn new() -> Telemetry {
        Telemetry {
            metrics: ClientMetrics::default(),
            subscription: Mutex::new(None),
            reported: Mutex::new(HashMap::new()),
            started: std::sync::atomic::AtomicBool::new(false),
            stop: watch::channel(false).0,
            exchange: tokio::sync::Mutex::new(()),
            terminated: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// What telemetry needs of its client, and all it sees of it: its telemetry state, its instance
/// ID, how many connections are open, and a way to send a request to any broker. The client
/// implements it; this module never reaches into the client's internals.
pub(crate) trait TelemetryTransport: Send + Sync + 'static {
    /// The per-client telemetry state (kept in the client, owned by this module).
    fn telemetry(&self) -> &Telemetry;
    /// The KIP-1313 instance ID: the body ID of every telemetry request.
    fn instance_id(&self) -> Uuid;
    /// Open (not broken) broker connections right now.
    fn open_connections(&self) -> usize;
    /// Sends `request` to any broker and returns its typed response.
    fn send<R>(&self, request: R) -> impl Future<Output = Result<R::Response>> + Send
    where
        R: RequestBody + Send + 'static,
        R::Response: Send;
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// One metric the client can report.
struct Sample {
    name: &'static str,
    description: &'static str,
    unit: &'static str,
    value: u64,
    /// A monotonic sum (else a gauge).
    sum: bool,
}

fn samples(client: &impl TelemetryTransport) -> Vec<Sample> {
    let m = &client.telemetry().metrics;
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    vec![
        Sample {
            name: "org.apache.kafka.client.producer.record.send.total",
            description: "Records the producer had acknowledged",
            unit: "{record}",
            value: get(&m.records_sent),
            sum: true,
        },
        Sample {
            name: "org.apache.kafka.client.producer.record.error.total",
            description: "Records the producer failed to deliver",
            unit: "{record}",
            value: get(&m.record_errors),
            sum: true,
        },
        Sample {
            name: "org.apache.kafka.client.consumer.fetch.manager.records.consumed.total",
            description: "Records the consumer returned",
            unit: "{record}",
            value: get(&m.records_consumed),
            sum: true,
        },
        Sample {
            name: "org.apache.kafka.client.connection.creation.total",
            description: "Broker connections opened",
            unit: "{connection}",
            value: get(&m.connections_created),
            sum: true,
        },
        Sample {
            name: "org.apache.kafka.client.connection.count",
            description: "Open broker connections",
            unit: "{connection}",
            value: client.open_connections() as u64,
            sum: false,
        },
    ]
}

/// Whether `name` is asked for: a requested prefix matches (an empty string asks for all).
fn requested(name: &str, prefixes: &[String]) -> bool {
    prefixes
        .iter()
        .any(|p| p == "*" || name.starts_with(p.as_str()))
}

/// The OTLP payload for `sub` (uncompressed), and the sum values it reports.
fn build_payload(
    client: &impl TelemetryTransport,
    sub: &Subscription,
    start_nanos: u64,
) -> (MetricsData, Vec<(&'static str, u64)>) {
    let now = now_nanos();
    let previous = lock(&client.telemetry().reported).clone();
    let mut reported = Vec::new();
    let metrics: Vec<Metric> = samples(client)
        .into_iter()
        .filter(|s| requested(s.name, &sub.requested))
        .map(|s| {
            let data = if s.sum {
                reported.push((s.name, s.value));
                let value = if sub.delta {
                    s.value
                        .saturating_sub(previous.get(s.name).copied().unwrap_or(0))
                } else {
                    s.value
                };
                metric::Data::Sum(Sum {
                    data_points: vec![NumberDataPoint {
                        start_time_unix_nano: start_nanos,
                        time_unix_nano: now,
                        value: Some(number_data_point::Value::AsInt(
                            i64::try_from(value).unwrap_or(i64::MAX),
                        )),
                        ..Default::default()
                    }],
                    aggregation_temporality: if sub.delta {
                        AggregationTemporality::Delta as i32
                    } else {
                        AggregationTemporality::Cumulative as i32
                    },
                    is_monotonic: true,
                })
            } else {
                metric::Data::Gauge(Gauge {
                    data_points: vec![NumberDataPoint {
                        time_unix_nano: now,
                        value: Some(number_data_point::Value::AsInt(
                            i64::try_from(s.value).unwrap_or(i64::MAX),
                        )),
                        ..Default::default()
                    }],
                })
            };
            Metric {
                name: s.name.to_string(),
                description: s.description.to_string(),
                unit: s.unit.to_string(),
                data: Some(data),
                ..Default::default()
            }
        })
        .collect();
    let data = MetricsData {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Default::default()),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "skiff-client".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    (data, reported)
}

fn encode(data: &MetricsData, compression: i8) -> (i8, Bytes) {
    let raw = data.encode_to_vec();
    if compression == COMPRESSION_ZSTD
        && let Ok(compressed) = zstd::stream::encode_all(raw.as_slice(), 3)
    {
        return (COMPRESSION_ZSTD, Bytes::from(compressed));
    }
    (COMPRESSION_NONE, Bytes::from(raw))
}

/// What to do after a push or a get.
enum Next {
    /// Fetch the subscription again after this wait.
    Refetch(Duration),
    /// Push again after this wait.
    Push(Duration),
    /// Telemetry is over for this client.
    Stop,
}

/// Sends GetTelemetrySubscriptions (body ID = header ID) and stores the answer.
async fn get_subscription(client: &impl TelemetryTransport) -> Result<Next> {
    let id = client.instance_id();
    let r = client
        .send(GetTelemetrySubscriptionsRequest {
            client_instance_id: id,
            ..Default::default()
        })
        .await?;
    let interval = u64::try_from(r.push_interval_ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map_or(DEFAULT_INTERVAL, Duration::from_millis);
    match r.error_code {
        error_codes::NONE => {}
        error_codes::THROTTLING_QUOTA_EXCEEDED => return Ok(Next::Refetch(interval)),
        code => {
            tracing::warn!(
                code,
                error = crate::error_name(code),
                "GetTelemetrySubscriptions failed; client telemetry stops"
            );
            return Ok(Next::Stop);
        }
    }
    if r.client_instance_id != id {
        tracing::warn!(
            ours = %id,
            theirs = %r.client_instance_id,
            "the broker answered another client instance ID; client telemetry stops"
        );
        return Ok(Next::Stop);
    }
    let sub = Subscription {
        subscription_id: r.subscription_id,
        requested: r.requested_metrics.iter().map(|m| m.to_string()).collect(),
        push_interval: interval,
        compression: if r.accepted_compression_types.contains(&COMPRESSION_ZSTD) {
            COMPRESSION_ZSTD
        } else {
            COMPRESSION_NONE
        },
        delta: r.delta_temporality,
        max_bytes: usize::try_from(r.telemetry_max_bytes).unwrap_or(0),
    };
    let subscribed = !sub.requested.is_empty();
    *lock(&client.telemetry().subscription) = Some(sub);
    // Kafka's client pushes one interval after the subscription; with nothing requested it asks
    // again after the interval.
    Ok(if subscribed {
        Next::Push(interval)
    } else {
        Next::Refetch(interval)
    })
}

/// Sends one PushTelemetry for the current subscription.
async fn push(
    client: &impl TelemetryTransport,
    terminating: bool,
    start_nanos: u64,
) -> Result<Next> {
    let Some(sub) = lock(&client.telemetry().subscription).clone() else {
        return Ok(Next::Refetch(Duration::ZERO));
    };
    let (data, reported) = build_payload(client, &sub, start_nanos);
    let (compression, payload) = encode(&data, sub.compression);
    let (compression, payload) = if sub.max_bytes > 0 && payload.len() > sub.max_bytes {
        // Too large: push an empty payload rather than be refused.
        (COMPRESSION_NONE, Bytes::new())
    } else {
        (compression, payload)
    };
    let id = client.instance_id();
    let subscription_id = sub.subscription_id;
    let r = client
        .send(PushTelemetryRequest {
            client_instance_id: id,
            subscription_id,
            terminating,
            compression_type: compression,
            metrics: payload,
            ..Default::default()
        })
        .await?;
    match r.error_code {
        error_codes::NONE => {
            let mut kept = lock(&client.telemetry().reported);
            for (name, value) in reported {
                kept.insert(name, value);
            }
            Ok(Next::Push(sub.push_interval))
        }
        error_codes::UNKNOWN_SUBSCRIPTION_ID | error_codes::UNSUPPORTED_COMPRESSION_TYPE => {
            Ok(Next::Refetch(Duration::ZERO))
        }
        error_codes::THROTTLING_QUOTA_EXCEEDED | error_codes::TELEMETRY_TOO_LARGE => {
            Ok(Next::Refetch(sub.push_interval))
        }
        code => {
            tracing::warn!(
                code,
                error = crate::error_name(code),
                "PushTelemetry failed; client telemetry stops"
            );
            Ok(Next::Stop)
        }
    }
}

/// Starts the telemetry task of `client` (once). The task holds no client: `upgrade` gives it
/// one for each request while the client is alive (the client hands in a weak reference).
pub(crate) fn start<T: TelemetryTransport>(
    client: &T,
    upgrade: impl Fn() -> Option<T> + Send + 'static,
) {
    let telemetry = client.telemetry();
    if telemetry.started.swap(true, Ordering::AcqRel)
        || tokio::runtime::Handle::try_current().is_err()
    {
        return;
    }
    let mut stop = telemetry.stop.subscribe();
    tokio::spawn(async move {
        let start_nanos = now_nanos();
        let mut next = Next::Refetch(Duration::ZERO);
        loop {
            let (wait, pushing) = match next {
                Next::Refetch(d) => (d, false),
                Next::Push(d) => (d, true),
                Next::Stop => return,
            };
            if !wait.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
            let Some(client) = upgrade() else { return };
            let _exchange = client.telemetry().exchange.lock().await;
            if *stop.borrow() {
                return;
            }
            let outcome = if pushing {
                push(&client, false, start_nanos).await
            } else {
                get_subscription(&client).await
            };
            next = match outcome {
                Ok(n) => n,
                Err(Error::UnsupportedVersion { .. }) => {
                    tracing::debug!("the broker does not offer client telemetry");
                    Next::Stop
                }
                Err(e) => {
                    tracing::debug!(error = %e, "client telemetry request failed; retrying");
                    Next::Refetch(RETRY)
                }
            };
        }
    });
}

/// Stops the task and sends a terminating push if the client is subscribed.
///
/// A client closed before its first subscription arrived (a short CLI command, say) asks for
/// it now, so that even short-lived instances report their metrics once.
pub(crate) async fn terminate(client: &impl TelemetryTransport) {
    let telemetry = client.telemetry();
    let _ = telemetry.stop.send(true);
    if telemetry.terminated.swap(true, Ordering::AcqRel) {
        return;
    }
    // The task sees `stop` once its request in flight (if any) has finished and stored its
    // answer; from then on only this function talks telemetry.
    let _exchange = telemetry.exchange.lock().await;
    let unknown = lock(&telemetry.subscription).is_none();
    if unknown
        && telemetry.started.load(Ordering::Acquire)
        && let Err(e) = get_subscription(client).await
    {
        tracing::debug!(error = %e, "no telemetry subscription at close");
    }
    let subscribed = lock(&telemetry.subscription)
        .as_ref()
        .is_some_and(|s| !s.requested.is_empty());
    if subscribed && let Err(e) = push(client, true, now_nanos()).await {
        tracing::debug!(error = %e, "terminating telemetry push failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_select_metrics() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(requested(
            "org.apache.kafka.client.x",
            &p(&["org.apache.kafka."])
        ));
        assert!(requested("org.apache.kafka.client.x", &p(&[""])));
        assert!(requested("org.apache.kafka.client.x", &p(&["*"])));
        assert!(!requested("org.apache.kafka.client.x", &p(&[])));
        assert!(!requested(
            "org.apache.kafka.client.x",
            &p(&["org.apache.kafka.producer"])
        ));
    }
}
