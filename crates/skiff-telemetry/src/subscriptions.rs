//! CLIENT_METRICS config resources (type 16): named subscriptions with the keys `metrics`,
//! `interval.ms` and `match`, altered like IncrementalAlterConfigs and persisted as a snapshot.
//!
//! Validation follows Apache Kafka's `ClientMetricsConfigs`: an empty name, an unknown key, a null
//! value or an interval outside 100..=3600000 is INVALID_REQUEST; an interval that is not an
//! integer, an illegal match pattern, or APPEND/SUBTRACT on a non-list key is INVALID_CONFIG.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use skiff_protocol::Uuid;
use skiff_protocol::error_codes;

/// The config resource type of client metrics subscriptions.
pub const CLIENT_METRICS_RESOURCE_TYPE: i8 = 16;
/// Comma list of metric name prefixes; `*` means all metrics, empty means none.
pub const METRICS_CONFIG: &str = "metrics";
/// Push interval in milliseconds.
pub const INTERVAL_MS_CONFIG: &str = "interval.ms";
/// Comma list of `attribute=regex` client selectors; empty matches every client.
pub const MATCH_CONFIG: &str = "match";
/// The metrics entry that subscribes to every metric.
pub const ALL_METRICS: &str = "*";
/// `interval.ms` when not set (5 minutes).
pub const DEFAULT_INTERVAL_MS: i32 = 300_000;
pub const MIN_INTERVAL_MS: i32 = 100;
pub const MAX_INTERVAL_MS: i32 = 3_600_000;
/// The keys a subscription accepts, in describe order.
pub const CONFIG_KEYS: [&str; 3] = [METRICS_CONFIG, INTERVAL_MS_CONFIG, MATCH_CONFIG];

/// Regexes in `match` are compiled with this size limit, so a hostile pattern cannot blow up memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A client attribute a `match` entry can select on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchAttribute {
    ClientInstanceId,
    ClientId,
    ClientSoftwareName,
    ClientSoftwareVersion,
    ClientSourceAddress,
    ClientSourcePort,
}

impl MatchAttribute {
    pub const ALL: [MatchAttribute; 6] = [
        MatchAttribute::ClientInstanceId,
        MatchAttribute::ClientId,
        MatchAttribute::ClientSoftwareName,
        MatchAttribute::ClientSoftwareVersion,
        MatchAttribute::ClientSourceAddress,
        MatchAttribute::ClientSourcePort,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MatchAttribute::ClientInstanceId => "client_instance_id",
            MatchAttribute::ClientId => "client_id",
            MatchAttribute::ClientSoftwareName => "client_software_name",
            MatchAttribute::ClientSoftwareVersion => "client_software_version",
            MatchAttribute::ClientSourceAddress => "client_source_address",
            MatchAttribute::ClientSourcePort => "client_source_port",
        }
    }

    pub fn parse(name: &str) -> Option<MatchAttribute> {
        MatchAttribute::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// What the broker knows about a client from its connection and request header: the values the
/// `match` selectors test. `None` never matches a selector on that attribute (as in Kafka).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientSelectors {
    /// The request header's client ID.
    pub client_id: Option<String>,
    /// From the connection's ApiVersions request (ClientSoftwareName).
    pub software_name: Option<String>,
    /// From the connection's ApiVersions request (ClientSoftwareVersion).
    pub software_version: Option<String>,
    /// The peer address; matched in Rust's `Display` form (`127.0.0.1`, `::1`).
    pub source_address: Option<IpAddr>,
    /// The peer port, matched in decimal.
    pub source_port: Option<u16>,
}

impl ClientSelectors {
    /// The text a selector on `attribute` is matched against, for the instance `id`.
    pub fn attribute(&self, id: Uuid, attribute: MatchAttribute) -> Option<String> {
        match attribute {
            MatchAttribute::ClientInstanceId => Some(id.to_string()),
            MatchAttribute::ClientId => self.client_id.clone(),
            MatchAttribute::ClientSoftwareName => self.software_name.clone(),
            MatchAttribute::ClientSoftwareVersion => self.software_version.clone(),
            MatchAttribute::ClientSourceAddress => self.source_address.map(|a| a.to_string()),
            MatchAttribute::ClientSourcePort => self.source_port.map(|p| p.to_string()),
        }
    }
}

/// Why a subscription change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubscriptionError {
    #[error("subscription name can't be empty")]
    EmptyName,
    #[error("unknown client metrics configuration: {0}")]
    UnknownConfig(String),
    #[error("duplicate config key {0} in one request")]
    DuplicateKey(String),
    #[error("null value not supported for {0}")]
    NullValue(String),
    #[error("invalid value {0:?} for interval.ms: not an integer")]
    IntervalNotInteger(String),
    #[error("invalid value {0} for interval.ms, interval must be between 100 and 3600000 (1 hour)")]
    IntervalOutOfRange(i64),
    #[error("illegal client matching pattern: {0}")]
    IllegalMatchPattern(String),
    #[error("{op} is not allowed for config key {key}: it is not a list")]
    NotAList { op: &'static str, key: String },
}

impl SubscriptionError {
    /// The Kafka error code for the resource's entry in an IncrementalAlterConfigs response.
    pub fn error_code(&self) -> i16 {
        match self {
            SubscriptionError::EmptyName
            | SubscriptionError::UnknownConfig(_)
            | SubscriptionError::DuplicateKey(_)
            | SubscriptionError::NullValue(_)
            | SubscriptionError::IntervalOutOfRange(_) => error_codes::INVALID_REQUEST,
            SubscriptionError::IntervalNotInteger(_)
            | SubscriptionError::IllegalMatchPattern(_)
            | SubscriptionError::NotAList { .. } => error_codes::INVALID_CONFIG,
        }
    }
}

/// An IncrementalAlterConfigs operation (`OpType`: SET 0, DELETE 1, APPEND 2, SUBTRACT 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterOpType {
    Set,
    Delete,
    Append,
    Subtract,
}

impl AlterOpType {
    /// From the wire's `ConfigOperation` byte; `None` for an unknown operation.
    pub fn from_i8(op: i8) -> Option<AlterOpType> {
        match op {
            0 => Some(AlterOpType::Set),
            1 => Some(AlterOpType::Delete),
            2 => Some(AlterOpType::Append),
            3 => Some(AlterOpType::Subtract),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            AlterOpType::Set => "SET",
            AlterOpType::Delete => "DELETE",
            AlterOpType::Append => "APPEND",
            AlterOpType::Subtract => "SUBTRACT",
        }
    }
}

/// One config change of an IncrementalAlterConfigs request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterOp {
    pub key: String,
    pub op: AlterOpType,
    pub value: Option<String>,
}

impl AlterOp {
    pub fn set(key: &str, value: &str) -> AlterOp {
        AlterOp {
            key: key.to_string(),
            op: AlterOpType::Set,
            value: Some(value.to_string()),
        }
    }

    pub fn delete(key: &str) -> AlterOp {
        AlterOp {
            key: key.to_string(),
            op: AlterOpType::Delete,
            value: None,
        }
    }

    pub fn append(key: &str, value: &str) -> AlterOp {
        AlterOp {
            key: key.to_string(),
            op: AlterOpType::Append,
            value: Some(value.to_string()),
        }
    }

    pub fn subtract(key: &str, value: &str) -> AlterOp {
        AlterOp {
            key: key.to_string(),
            op: AlterOpType::Subtract,
            value: Some(value.to_string()),
        }
    }
}

/// One parsed `match` entry.
#[derive(Debug, Clone)]
struct Matcher {
    attribute: MatchAttribute,
    regex: Regex,
}

/// A validated subscription: its raw config (what describe shows and the snapshot keeps) and the
/// parsed form.
#[derive(Debug, Clone)]
struct Subscription {
    raw: BTreeMap<String, String>,
    metrics: Vec<String>,
    interval_ms: i32,
    matchers: Vec<Matcher>,
}

impl Subscription {
    fn parse(raw: BTreeMap<String, String>) -> Result<Subscription, SubscriptionError> {
        for key in raw.keys() {
            if !CONFIG_KEYS.contains(&key.as_str()) {
                return Err(SubscriptionError::UnknownConfig(key.clone()));
            }
        }
        let metrics = raw
            .get(METRICS_CONFIG)
            .map(|v| split_list(v))
            .unwrap_or_default();
        let interval_ms = match raw.get(INTERVAL_MS_CONFIG) {
            None => DEFAULT_INTERVAL_MS,
            Some(text) => parse_interval(text)?,
        };
        let matchers = match raw.get(MATCH_CONFIG) {
            None => Vec::new(),
            Some(text) => parse_match(text)?,
        };
        Ok(Subscription {
            raw,
            metrics,
            interval_ms,
            matchers,
        })
    }

    fn matches(&self, id: Uuid, client: &ClientSelectors) -> bool {
        self.matchers.iter().all(|m| {
            client
                .attribute(id, m.attribute)
                .is_some_and(|value| m.regex.is_match(&value))
        })
    }
}

/// Kafka's LIST type: comma separated, each item trimmed; empty items are dropped.
fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn parse_interval(text: &str) -> Result<i32, SubscriptionError> {
    let value: i64 = text
        .trim()
        .parse()
        .map_err(|_| SubscriptionError::IntervalNotInteger(text.to_string()))?;
    if value < i64::from(MIN_INTERVAL_MS) || value > i64::from(MAX_INTERVAL_MS) {
        return Err(SubscriptionError::IntervalOutOfRange(value));
    }
    i32::try_from(value).map_err(|_| SubscriptionError::IntervalOutOfRange(value))
}

/// `attr=regex` entries: exactly one `=` with a non-empty regex (Kafka splits on `=` and wants two
/// parts), a known attribute, a regex that compiles. The regex must match the whole value. A
/// repeated attribute keeps the last entry, as Kafka's map does.
fn parse_match(text: &str) -> Result<Vec<Matcher>, SubscriptionError> {
    let mut by_attribute: BTreeMap<MatchAttribute, Matcher> = BTreeMap::new();
    for entry in split_list(text) {
        let illegal = || SubscriptionError::IllegalMatchPattern(entry.clone());
        let mut parts = entry.split('=');
        let (Some(name), Some(pattern), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(illegal());
        };
        let pattern = pattern.trim();
        if pattern.is_empty() {
            return Err(illegal());
        }
        let attribute = MatchAttribute::parse(name.trim()).ok_or_else(illegal)?;
        let regex = RegexBuilder::new(&format!("^(?:{pattern})$"))
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|_| illegal())?;
        by_attribute.insert(attribute, Matcher { attribute, regex });
    }
    Ok(by_attribute.into_values().collect())
}

/// The effective subscription of one client instance: what GetTelemetrySubscriptions answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EffectiveSubscription {
    pub subscription_id: i32,
    /// `[]` = none, `["*"]` = all, otherwise sorted name prefixes.
    pub requested_metrics: Vec<String>,
    pub push_interval_ms: i32,
}

impl EffectiveSubscription {
    /// A CRC32C of the sorted metric set and the interval, XORed with a hash of the instance ID (as
    /// Kafka computes it). It is a function of (set, interval, ID) only, so it changes exactly when
    /// the set or the interval changes, and survives a broker restart.
    pub fn compute_id(id: Uuid, requested_metrics: &[String], push_interval_ms: i32) -> i32 {
        let mut text = String::new();
        for metric in requested_metrics {
            text.push_str(metric);
            text.push(',');
        }
        text.push_str(&push_interval_ms.to_string());
        let crc = crc32c::crc32c(text.as_bytes());
        let folded = id.most_significant_bits() ^ id.least_significant_bits();
        let id_hash = ((folded >> 32) as u32) ^ (folded as u32);
        (crc ^ id_hash) as i32
    }
}

/// The persisted form: every subscription's explicitly set keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionsSnapshot {
    #[serde(default = "snapshot_format")]
    pub format: u32,
    pub subscriptions: BTreeMap<String, BTreeMap<String, String>>,
}

fn snapshot_format() -> u32 {
    1
}

/// All CLIENT_METRICS subscriptions.
#[derive(Debug, Clone, Default)]
pub struct Subscriptions {
    subs: BTreeMap<String, Subscription>,
    generation: u64,
}

impl Subscriptions {
    pub fn new() -> Subscriptions {
        Subscriptions::default()
    }

    /// Bumped by every change; the broker persists a snapshot when it moved.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Subscription names, sorted (ListConfigResources).
    pub fn list(&self) -> Vec<String> {
        self.subs.keys().cloned().collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.subs.contains_key(name)
    }

    /// DescribeConfigs: `(key, value, is_default)` for every key, or `None` for an unknown name.
    pub fn describe(&self, name: &str) -> Option<Vec<(String, String, bool)>> {
        let sub = self.subs.get(name)?;
        Some(
            CONFIG_KEYS
                .iter()
                .map(|key| match sub.raw.get(*key) {
                    Some(value) => (key.to_string(), value.clone(), false),
                    None => (key.to_string(), default_value(key).to_string(), true),
                })
                .collect(),
        )
    }

    /// Checks `ops` as [`Subscriptions::alter`] would, without applying them (validateOnly).
    pub fn validate_alter(&self, name: &str, ops: &[AlterOp]) -> Result<(), SubscriptionError> {
        self.prepare(name, ops).map(|_| ())
    }

    /// Applies IncrementalAlterConfigs operations to one subscription, all or nothing. A
    /// subscription left with no key set is removed (Kafka's behaviour when all configs are
    /// deleted); a name that did not exist is created by its first SET/APPEND.
    pub fn alter(&mut self, name: &str, ops: &[AlterOp]) -> Result<(), SubscriptionError> {
        match self.prepare(name, ops)? {
            None => {
                if self.subs.remove(name).is_some() {
                    self.generation += 1;
                }
            }
            Some(sub) => {
                self.subs.insert(name.to_string(), sub);
                self.generation += 1;
            }
        }
        Ok(())
    }

    /// Replaces a subscription's whole config (the legacy AlterConfigs semantics); an empty map
    /// removes it.
    pub fn replace(
        &mut self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), SubscriptionError> {
        if name.is_empty() {
            return Err(SubscriptionError::EmptyName);
        }
        if configs.is_empty() {
            if self.subs.remove(name).is_some() {
                self.generation += 1;
            }
            return Ok(());
        }
        let sub = Subscription::parse(configs)?;
        self.subs.insert(name.to_string(), sub);
        self.generation += 1;
        Ok(())
    }

    fn prepare(
        &self,
        name: &str,
        ops: &[AlterOp],
    ) -> Result<Option<Subscription>, SubscriptionError> {
        if name.is_empty() {
            return Err(SubscriptionError::EmptyName);
        }
        let mut seen = BTreeSet::new();
        for op in ops {
            if !CONFIG_KEYS.contains(&op.key.as_str()) {
                return Err(SubscriptionError::UnknownConfig(op.key.clone()));
            }
            if !seen.insert(op.key.as_str()) {
                return Err(SubscriptionError::DuplicateKey(op.key.clone()));
            }
        }
        let mut raw = self
            .subs
            .get(name)
            .map(|s| s.raw.clone())
            .unwrap_or_default();
        for op in ops {
            match op.op {
                AlterOpType::Delete => {
                    raw.remove(&op.key);
                }
                AlterOpType::Set => {
                    let value = op
                        .value
                        .as_ref()
                        .ok_or_else(|| SubscriptionError::NullValue(op.key.clone()))?;
                    raw.insert(op.key.clone(), value.clone());
                }
                AlterOpType::Append | AlterOpType::Subtract => {
                    if op.key == INTERVAL_MS_CONFIG {
                        return Err(SubscriptionError::NotAList {
                            op: op.op.name(),
                            key: op.key.clone(),
                        });
                    }
                    let value = op
                        .value
                        .as_ref()
                        .ok_or_else(|| SubscriptionError::NullValue(op.key.clone()))?;
                    let mut items = raw.get(&op.key).map(|v| split_list(v)).unwrap_or_default();
                    let changes = split_list(value);
                    if op.op == AlterOpType::Append {
                        for item in changes {
                            if !items.contains(&item) {
                                items.push(item);
                            }
                        }
                    } else {
                        items.retain(|item| !changes.contains(item));
                    }
                    raw.insert(op.key.clone(), items.join(","));
                }
            }
        }
        if raw.is_empty() {
            return Ok(None);
        }
        Subscription::parse(raw).map(Some)
    }

    /// Union of the metrics of every subscription matching the client (`["*"]` if any asks for
    /// all), and the smallest of their intervals; no match gives `[]` and the default interval.
    pub fn effective(&self, id: Uuid, client: &ClientSelectors) -> EffectiveSubscription {
        let mut metrics = BTreeSet::new();
        let mut all = false;
        let mut interval: Option<i32> = None;
        for sub in self.subs.values().filter(|s| s.matches(id, client)) {
            all |= sub.metrics.iter().any(|m| m == ALL_METRICS);
            metrics.extend(sub.metrics.iter().cloned());
            interval = Some(interval.map_or(sub.interval_ms, |i| i.min(sub.interval_ms)));
        }
        let requested_metrics: Vec<String> = if all {
            vec![ALL_METRICS.to_string()]
        } else {
            metrics.into_iter().collect()
        };
        let push_interval_ms = interval.unwrap_or(DEFAULT_INTERVAL_MS);
        EffectiveSubscription {
            subscription_id: EffectiveSubscription::compute_id(
                id,
                &requested_metrics,
                push_interval_ms,
            ),
            requested_metrics,
            push_interval_ms,
        }
    }

    pub fn snapshot(&self) -> SubscriptionsSnapshot {
        SubscriptionsSnapshot {
            format: snapshot_format(),
            subscriptions: self
                .subs
                .iter()
                .map(|(name, sub)| (name.clone(), sub.raw.clone()))
                .collect(),
        }
    }

    /// Rebuilds from a snapshot, validating every subscription again; the error names the
    /// subscription that failed.
    pub fn from_snapshot(
        snapshot: &SubscriptionsSnapshot,
    ) -> Result<Subscriptions, (String, SubscriptionError)> {
        let mut subs = BTreeMap::new();
        for (name, raw) in &snapshot.subscriptions {
            if name.is_empty() {
                return Err((name.clone(), SubscriptionError::EmptyName));
            }
            if raw.is_empty() {
                continue;
            }
            let sub = Subscription::parse(raw.clone()).map_err(|e| (name.clone(), e))?;
            subs.insert(name.clone(), sub);
        }
        Ok(Subscriptions {
            subs,
            generation: 1,
        })
    }
}

fn default_value(key: &str) -> &'static str {
    match key {
        INTERVAL_MS_CONFIG => "300000",
        _ => "",
    }
}
