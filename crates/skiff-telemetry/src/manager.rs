//! Client instances and the GetTelemetrySubscriptions / PushTelemetry state machine.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;
use skiff_protocol::generated::{
    GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse, PushTelemetryRequest,
    PushTelemetryResponse,
};
use skiff_protocol::{ByteString, Uuid, error_codes};

use crate::compression::{self, DecompressError};
use crate::otlp::{self, MetricValue, MetricsData};
pub use crate::point::MetricPoint;
use crate::prometheus::{self, InstanceSeries};
use crate::subscriptions::{ClientSelectors, EffectiveSubscription, Subscriptions};

/// Broker-side telemetry settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// TelemetryMaxBytes: the largest (compressed) payload a push may carry.
    pub telemetry_max_bytes: i32,
    /// A payload may decompress to at most `telemetry_max_bytes * decompression_factor` bytes;
    /// beyond that the push is TELEMETRY_TOO_LARGE.
    pub decompression_factor: usize,
    /// An instance silent for `max(min_instance_expiry_ms, 3 * push interval)` is forgotten
    /// (Kafka: `max(60 s, 3 * push interval)`).
    pub min_instance_expiry_ms: i64,
    /// At most this many instances are kept; a new one past it evicts the least recently seen.
    pub max_instances: usize,
    /// At most this many series (metric name + attributes) are kept per instance.
    pub max_series_per_instance: usize,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            telemetry_max_bytes: 1024 * 1024,
            decompression_factor: 4,
            min_instance_expiry_ms: 60_000,
            max_instances: 16_384,
            max_series_per_instance: 4_096,
        }
    }
}

impl TelemetryConfig {
    fn max_payload_bytes(&self) -> usize {
        usize::try_from(self.telemetry_max_bytes).unwrap_or(0)
    }

    fn max_decompressed_bytes(&self) -> usize {
        self.max_payload_bytes()
            .saturating_mul(self.decompression_factor.max(1))
    }
}

type SeriesKey = (String, BTreeMap<String, String>);

/// One telemetry client instance.
#[derive(Debug, Clone)]
struct Instance {
    selectors: ClientSelectors,
    /// The subscriptions generation `subscription` was computed at.
    generation: u64,
    subscription: EffectiveSubscription,
    last_get_ms: Option<i64>,
    last_push_ms: Option<i64>,
    last_seen_ms: i64,
    last_error: i16,
    terminating: bool,
    last_successful_push_ms: Option<i64>,
    series: BTreeMap<SeriesKey, MetricPoint>,
    dropped_series: u64,
}

impl Instance {
    fn expiry_ms(&self, config: &TelemetryConfig) -> i64 {
        config
            .min_instance_expiry_ms
            .max(3 * i64::from(self.subscription.push_interval_ms))
    }

    fn expired(&self, now_ms: i64, config: &TelemetryConfig) -> bool {
        now_ms.saturating_sub(self.last_seen_ms) > self.expiry_ms(config)
    }

    /// Kafka's `maybeUpdateGetRequestTimestamp`: a Get is allowed one push interval after the
    /// last Get or Push.
    fn get_allowed(&self, now_ms: i64) -> bool {
        let last = match (self.last_get_ms, self.last_push_ms) {
            (None, None) => return true,
            (a, b) => a.max(b).unwrap_or(i64::MIN),
        };
        now_ms.saturating_sub(last) >= i64::from(self.subscription.push_interval_ms)
    }

    /// Kafka's `maybeUpdatePushRequestTimestamp`: the first push after a Get is always allowed
    /// (clients jitter the interval), otherwise one push interval after the last push.
    fn push_allowed(&self, now_ms: i64) -> bool {
        match (self.last_get_ms, self.last_push_ms) {
            (_, None) => true,
            (Some(get), Some(push)) if get > push => true,
            (_, Some(push)) => {
                now_ms.saturating_sub(push) >= i64::from(self.subscription.push_interval_ms)
            }
        }
    }

    fn ingest(&mut self, data: &MetricsData, now_ms: i64, max_series: usize) {
        for sample in otlp::samples(data) {
            let key = (sample.name, sample.attributes);
            if let Some(point) = self.series.get_mut(&key) {
                point.value = match (
                    sample.delta,
                    point.kind == sample.kind,
                    point.value,
                    sample.value,
                ) {
                    (true, true, MetricValue::Number(old), MetricValue::Number(new)) => {
                        MetricValue::Number(old + new)
                    }
                    (
                        true,
                        true,
                        MetricValue::Distribution { count, sum },
                        MetricValue::Distribution {
                            count: new_count,
                            sum: new_sum,
                        },
                    ) => MetricValue::Distribution {
                        count: count.saturating_add(new_count),
                        sum: sum + new_sum,
                    },
                    (_, _, _, new) => new,
                };
                point.kind = sample.kind;
                point.time_unix_nano = sample.time_unix_nano;
                point.updated_ms = now_ms;
                point.remember(now_ms);
            } else if self.series.len() < max_series {
                let mut point = MetricPoint {
                    name: key.0.clone(),
                    kind: sample.kind,
                    attributes: key.1.clone(),
                    value: sample.value,
                    time_unix_nano: sample.time_unix_nano,
                    updated_ms: now_ms,
                    recent: VecDeque::new(),
                    // The first series of an instance keep their recent values (bounded).
                    keeps_recent: self.series.len() < crate::point::HISTORY_SERIES,
                };
                point.remember(now_ms);
                self.series.insert(key, point);
            } else {
                self.dropped_series += 1;
            }
        }
    }
}

/// What an accepted push carried, for forwarding (e.g. OTLP/HTTP export) by the broker.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedMetrics {
    pub client_instance_id: Uuid,
    pub client_id: Option<String>,
    pub subscription_id: i32,
    pub push_interval_ms: i32,
    pub terminating: bool,
    pub received_ms: i64,
    pub metrics: MetricsData,
}

/// A client instance as the admin API shows it (`/clients/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceView {
    pub client_instance_id: String,
    pub client_id: Option<String>,
    pub client_software_name: Option<String>,
    pub client_software_version: Option<String>,
    pub client_source_address: Option<String>,
    pub client_source_port: Option<u16>,
    pub subscription_id: i32,
    pub requested_metrics: Vec<String>,
    pub push_interval_ms: i32,
    pub last_get_ms: Option<i64>,
    pub last_push_ms: Option<i64>,
    pub last_successful_push_ms: Option<i64>,
    pub last_error_code: i16,
    pub terminating: bool,
    pub dropped_series: u64,
    pub metrics: Vec<MetricPoint>,
}

/// Broker-wide KIP-714 state: subscriptions plus client instances. Deterministic and I/O-free;
/// every call that depends on time takes `now_ms`.
#[derive(Debug, Clone, Default)]
pub struct TelemetryManager {
    config: TelemetryConfig,
    subscriptions: Subscriptions,
    instances: HashMap<Uuid, Instance>,
}

/// The header/body ID alignment of KIP-1313 for GetTelemetrySubscriptions. `Ok(None)`: the
/// broker assigns a new ID.
fn align_get(header_id: Option<Uuid>, body_id: Uuid) -> Result<Option<Uuid>, String> {
    match (header_id.and_then(Uuid::non_zero), body_id.non_zero()) {
        (None, None) => Ok(None),
        (None, Some(body)) => Ok(Some(body)),
        (Some(header), Some(body)) if header == body => Ok(Some(header)),
        (Some(header), None) => Err(format!(
            "the request header carries client instance ID {header}: the request body must carry \
             the same ID, not zero"
        )),
        (Some(header), Some(body)) => Err(format!(
            "the request header carries client instance ID {header} but the body carries {body}"
        )),
    }
}

impl TelemetryManager {
    pub fn new(config: TelemetryConfig) -> TelemetryManager {
        TelemetryManager {
            config,
            subscriptions: Subscriptions::new(),
            instances: HashMap::new(),
        }
    }

    pub fn with_subscriptions(config: TelemetryConfig, subscriptions: Subscriptions) -> Self {
        TelemetryManager {
            config,
            subscriptions,
            instances: HashMap::new(),
        }
    }

    pub fn config(&self) -> &TelemetryConfig {
        &self.config
    }

    pub fn subscriptions(&self) -> &Subscriptions {
        &self.subscriptions
    }

    /// Changes take effect for each instance at its next request (its subscription ID changes if
    /// its effective subscription did).
    pub fn subscriptions_mut(&mut self) -> &mut Subscriptions {
        &mut self.subscriptions
    }

    /// Number of client instances currently known.
    pub fn instance_count(&self) -> usize {
        self.instances.len()
    }

    /// Handles GetTelemetrySubscriptions. `header_id` is the request header's ClientInstanceId
    /// (KIP-1313; `None` or zero when absent). Every response, errors included, carries the ID in
    /// effect (the header's when there is one), never a zero the client would adopt.
    pub fn get_subscriptions(
        &mut self,
        header_id: Option<Uuid>,
        request: &GetTelemetrySubscriptionsRequest,
        client: &ClientSelectors,
        now_ms: i64,
    ) -> GetTelemetrySubscriptionsResponse {
        let error = |code: i16, id: Uuid| GetTelemetrySubscriptionsResponse {
            error_code: code,
            client_instance_id: id,
            ..Default::default()
        };
        let id = match align_get(header_id, request.client_instance_id) {
            Err(_) => {
                let id = header_id.unwrap_or(Uuid::ZERO);
                return error(error_codes::INVALID_REQUEST, id);
            }
            Ok(Some(id)) => id,
            Ok(None) => match self.new_instance_id() {
                Some(id) => id,
                None => return error(error_codes::UNKNOWN_SERVER_ERROR, Uuid::ZERO),
            },
        };
        let max_bytes = self.config.telemetry_max_bytes;
        let instance = self.instance(id, client, now_ms);
        if !instance.get_allowed(now_ms)
            && instance.last_error != error_codes::UNKNOWN_SUBSCRIPTION_ID
            && instance.last_error != error_codes::UNSUPPORTED_COMPRESSION_TYPE
        {
            return error(error_codes::THROTTLING_QUOTA_EXCEEDED, id);
        }
        instance.last_get_ms = Some(now_ms);
        instance.last_error = error_codes::NONE;
        GetTelemetrySubscriptionsResponse {
            throttle_time_ms: 0,
            error_code: error_codes::NONE,
            client_instance_id: id,
            subscription_id: instance.subscription.subscription_id,
            accepted_compression_types: compression::ACCEPTED_COMPRESSION_TYPES.to_vec(),
            push_interval_ms: instance.subscription.push_interval_ms,
            telemetry_max_bytes: max_bytes,
            delta_temporality: true,
            requested_metrics: instance
                .subscription
                .requested_metrics
                .iter()
                .map(|m| ByteString::from(m.as_str()))
                .collect(),
            unknown_tagged_fields: Vec::new(),
        }
    }

    /// Handles PushTelemetry in Kafka's validation order. `client` describes the connection, used
    /// only when the instance is unknown (a push after a broker restart: Kafka builds the instance
    /// from the push, and the deterministic subscription ID lets it through). On success the
    /// decoded payload is returned for forwarding (`None` for an empty payload).
    pub fn push(
        &mut self,
        header_id: Option<Uuid>,
        request: &PushTelemetryRequest,
        client: &ClientSelectors,
        now_ms: i64,
    ) -> (PushTelemetryResponse, Option<DecodedMetrics>) {
        let respond = |code: i16| PushTelemetryResponse {
            error_code: code,
            ..Default::default()
        };
        let Some(id) = request.client_instance_id.non_zero() else {
            return (respond(error_codes::INVALID_REQUEST), None);
        };
        if id == Uuid::ONE {
            return (respond(error_codes::INVALID_REQUEST), None);
        }
        if header_id.and_then(Uuid::non_zero).is_some_and(|h| h != id) {
            return (respond(error_codes::INVALID_REQUEST), None);
        }
        let config = self.config.clone();
        let instance = self.instance(id, client, now_ms);
        let code = Self::validate_push(instance, request, &config, now_ms);
        // Kafka records the terminating flag whatever the outcome; Skiff never clears it.
        instance.terminating |= request.terminating;
        if code != error_codes::NONE {
            instance.last_error = code;
            return (respond(code), None);
        }
        let decoded = if request.metrics.is_empty() {
            None
        } else {
            let decoded = compression::decompress(
                request.compression_type,
                &request.metrics,
                config.max_decompressed_bytes(),
            )
            .map_err(|e| match e {
                DecompressError::TooLarge { .. } => error_codes::TELEMETRY_TOO_LARGE,
                DecompressError::Unsupported(_) => error_codes::UNSUPPORTED_COMPRESSION_TYPE,
                DecompressError::Corrupt { .. } => error_codes::INVALID_RECORD,
            })
            .and_then(|bytes| {
                otlp::decode_metrics_data(&bytes).map_err(|_| error_codes::INVALID_RECORD)
            });
            match decoded {
                Err(code) => {
                    instance.last_error = code;
                    return (respond(code), None);
                }
                Ok(data) => {
                    instance.ingest(&data, now_ms, config.max_series_per_instance);
                    Some(DecodedMetrics {
                        client_instance_id: id,
                        client_id: instance.selectors.client_id.clone(),
                        subscription_id: instance.subscription.subscription_id,
                        push_interval_ms: instance.subscription.push_interval_ms,
                        terminating: request.terminating,
                        received_ms: now_ms,
                        metrics: data,
                    })
                }
            }
        };
        instance.last_error = error_codes::NONE;
        instance.last_successful_push_ms = Some(now_ms);
        (respond(error_codes::NONE), decoded)
    }

    fn validate_push(
        instance: &mut Instance,
        request: &PushTelemetryRequest,
        config: &TelemetryConfig,
        now_ms: i64,
    ) -> i16 {
        if instance.terminating {
            return error_codes::INVALID_REQUEST;
        }
        let allowed = instance.push_allowed(now_ms);
        if allowed {
            instance.last_push_ms = Some(now_ms);
        } else if !request.terminating {
            return error_codes::THROTTLING_QUOTA_EXCEEDED;
        }
        if request.subscription_id != instance.subscription.subscription_id {
            return error_codes::UNKNOWN_SUBSCRIPTION_ID;
        }
        if !compression::is_known(request.compression_type) {
            return error_codes::UNSUPPORTED_COMPRESSION_TYPE;
        }
        if request.metrics.len() > config.max_payload_bytes() {
            return error_codes::TELEMETRY_TOO_LARGE;
        }
        error_codes::NONE
    }

    /// A fresh random ID no instance uses.
    fn new_instance_id(&self) -> Option<Uuid> {
        for _ in 0..16 {
            let id = Uuid::random().ok()?;
            if !self.instances.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// The instance for `id`, created (or replaced when expired) from `client`, its subscription
    /// re-evaluated when the subscriptions changed since. A changed effective subscription resets
    /// the throttling clock, so the client can fetch and push the new one at once (as Kafka,
    /// which builds a new instance then).
    fn instance(&mut self, id: Uuid, client: &ClientSelectors, now_ms: i64) -> &mut Instance {
        let generation = self.subscriptions.generation();
        let expired = self
            .instances
            .get(&id)
            .is_some_and(|i| i.expired(now_ms, &self.config));
        if expired {
            self.instances.remove(&id);
        }
        if !self.instances.contains_key(&id) {
            self.make_room(now_ms);
        }
        let subscriptions = &self.subscriptions;
        let instance = self.instances.entry(id).or_insert_with(|| Instance {
            selectors: client.clone(),
            generation,
            subscription: subscriptions.effective(id, client),
            last_get_ms: None,
            last_push_ms: None,
            last_seen_ms: now_ms,
            last_error: error_codes::NONE,
            terminating: false,
            last_successful_push_ms: None,
            series: BTreeMap::new(),
            dropped_series: 0,
        });
        if instance.generation != generation {
            let fresh = subscriptions.effective(id, &instance.selectors);
            if fresh != instance.subscription {
                instance.subscription = fresh;
                instance.last_get_ms = None;
                instance.last_push_ms = None;
                instance.last_error = error_codes::NONE;
            }
            instance.generation = generation;
        }
        instance.last_seen_ms = now_ms;
        instance
    }

    /// Before adding an instance at capacity: drop expired ones, then the least recently seen.
    fn make_room(&mut self, now_ms: i64) {
        if self.instances.len() < self.config.max_instances {
            return;
        }
        self.expire(now_ms);
        while self.instances.len() >= self.config.max_instances.max(1) {
            let oldest = self
                .instances
                .iter()
                .min_by_key(|(id, i)| (i.last_seen_ms, **id))
                .map(|(id, _)| *id);
            match oldest {
                Some(id) => {
                    self.instances.remove(&id);
                }
                None => break,
            }
        }
    }

    /// Forgets instances silent for `max(min_instance_expiry_ms, 3 * push interval)`; returns how
    /// many. The broker calls it from a periodic timer (lookups also ignore expired instances).
    pub fn expire(&mut self, now_ms: i64) -> usize {
        let before = self.instances.len();
        let config = &self.config;
        self.instances.retain(|_, i| !i.expired(now_ms, config));
        before - self.instances.len()
    }

    /// Forgets one instance (e.g. when the broker learns the client is gone).
    pub fn remove_instance(&mut self, id: Uuid) -> bool {
        self.instances.remove(&id).is_some()
    }

    pub fn instance_view(&self, id: Uuid) -> Option<InstanceView> {
        self.instances.get(&id).map(|i| view(id, i))
    }

    /// Every instance, sorted by ID.
    pub fn instances(&self) -> Vec<InstanceView> {
        let mut ids: Vec<&Uuid> = self.instances.keys().collect();
        ids.sort();
        ids.into_iter()
            .filter_map(|id| self.instances.get(id).map(|i| view(*id, i)))
            .collect()
    }

    /// The Prometheus text exposition of every instance's latest metrics.
    pub fn render_prometheus(&self) -> String {
        let mut ids: Vec<&Uuid> = self.instances.keys().collect();
        ids.sort();
        let series = ids.into_iter().filter_map(|id| {
            let i = self.instances.get(id)?;
            Some(InstanceSeries {
                client_instance_id: id.to_string(),
                client_id: i.selectors.client_id.clone().unwrap_or_default(),
                points: i.series.values().collect(),
            })
        });
        prometheus::render(self.instances.len(), series)
    }
}

fn view(id: Uuid, i: &Instance) -> InstanceView {
    InstanceView {
        client_instance_id: id.to_string(),
        client_id: i.selectors.client_id.clone(),
        client_software_name: i.selectors.software_name.clone(),
        client_software_version: i.selectors.software_version.clone(),
        client_source_address: i.selectors.source_address.map(|a| a.to_string()),
        client_source_port: i.selectors.source_port,
        subscription_id: i.subscription.subscription_id,
        requested_metrics: i.subscription.requested_metrics.clone(),
        push_interval_ms: i.subscription.push_interval_ms,
        last_get_ms: i.last_get_ms,
        last_push_ms: i.last_push_ms,
        last_successful_push_ms: i.last_successful_push_ms,
        last_error_code: i.last_error,
        terminating: i.terminating,
        dropped_series: i.dropped_series,
        metrics: i.series.values().cloned().collect(),
    }
}
