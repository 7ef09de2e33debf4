//! Group-level config overrides: GROUP config resources (type 32, Kafka's
//! `ConfigResource.Type.GROUP`) behind DescribeConfigs, IncrementalAlterConfigs and
//! ListConfigResources, as Kafka 4.x serves them (KIP-848 group configs).
//!
//! The keys and their validation are Kafka's `GroupConfig`: every key must be known, each value
//! must parse and satisfy the key's own range, and the group's resulting config (the broker's
//! values with the overrides applied) must satisfy `GroupConfig.validateValues` -- the
//! timeouts within the broker's `group.*.min/max.*` bounds and each session timeout above its
//! heartbeat interval. Failures are INVALID_CONFIG with Kafka's messages.
//!
//! The coordinator acts on `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`
//! (KIP-848 consumer groups) and on `share.session.timeout.ms`, `share.heartbeat.interval.ms`
//! and `share.auto.offset.reset` (KIP-932 share groups, with `group.share.enable`);
//! `share.record.lock.duration.ms`, `share.delivery.count.limit` (KIP-1240) and
//! `share.isolation.level` are validated and stored for the share-partition leader, and the
//! `streams.*` keys are validated and stored only. A group need not exist to carry overrides.

use std::collections::BTreeMap;

use skiff_group::GroupConfig;
use skiff_meta::{AlterConfigOp, AlterConfigOpType};
use skiff_protocol::{ErrorCode, KafkaError};

use crate::clock::now_ms;
use crate::groups::GroupOverrides;
use crate::state::Broker;

/// Kafka's `DescribeConfigsResponse.ConfigSource.GROUP_CONFIG`.
pub const SOURCE_GROUP_CONFIG: i8 = 8;
/// Kafka's `DescribeConfigsResponse.ConfigSource.DEFAULT_CONFIG`.
pub const SOURCE_DEFAULT_CONFIG: i8 = 5;

/// Kafka's `ConfigType` codes used by the group keys.
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;

const CONSUMER_SESSION: &str = "consumer.session.timeout.ms";
const CONSUMER_HEARTBEAT: &str = "consumer.heartbeat.interval.ms";
const SHARE_SESSION: &str = "share.session.timeout.ms";
const SHARE_HEARTBEAT: &str = "share.heartbeat.interval.ms";
const SHARE_LOCK: &str = "share.record.lock.duration.ms";
const SHARE_RESET: &str = "share.auto.offset.reset";
const SHARE_ISOLATION: &str = "share.isolation.level";
const SHARE_DELIVERY: &str = "share.delivery.count.limit";
const STREAMS_SESSION: &str = "streams.session.timeout.ms";
const STREAMS_HEARTBEAT: &str = "streams.heartbeat.interval.ms";
const STREAMS_STANDBY: &str = "streams.num.standby.replicas";
const STREAMS_DELAY: &str = "streams.initial.rebalance.delay.ms";

/// How a key's value is checked when parsed (Kafka's `ConfigDef` validators).
#[derive(Clone, Copy)]
enum Kind {
    /// An INT at least this.
    Int(i64),
    /// `earliest`, `latest` or `by_duration:<ISO-8601 duration>`.
    OffsetReset,
    /// `read_committed` or `read_uncommitted`.
    Isolation,
}

/// Kafka's group config keys, in `GroupConfig`'s definition order (KIP-1240's
/// `share.delivery.count.limit` after the KIP-932 ones).
const KEYS: [(&str, Kind); 12] = [
    (CONSUMER_SESSION, Kind::Int(1)),
    (CONSUMER_HEARTBEAT, Kind::Int(1)),
    (SHARE_SESSION, Kind::Int(1)),
    (SHARE_HEARTBEAT, Kind::Int(1)),
    (SHARE_LOCK, Kind::Int(1000)),
    (SHARE_RESET, Kind::OffsetReset),
    (SHARE_ISOLATION, Kind::Isolation),
    (SHARE_DELIVERY, Kind::Int(2)),
    (STREAMS_SESSION, Kind::Int(1)),
    (STREAMS_HEARTBEAT, Kind::Int(1)),
    (STREAMS_STANDBY, Kind::Int(0)),
    (STREAMS_DELAY, Kind::Int(0)),
];

/// The value a group gets for a key without an override: the broker's for the consumer and
/// share keys, Kafka's broker defaults for the streams keys.
fn default_value(broker: &Broker, key: &str) -> String {
    let config = &broker.groups.config;
    match key {
        CONSUMER_SESSION => config.consumer_session_timeout_ms.to_string(),
        CONSUMER_HEARTBEAT => config.consumer_heartbeat_interval_ms.to_string(),
        SHARE_SESSION => config.share_session_timeout_ms.to_string(),
        SHARE_HEARTBEAT => config.share_heartbeat_interval_ms.to_string(),
        SHARE_LOCK => config.share_record_lock_duration_ms.to_string(),
        SHARE_DELIVERY => config.share_delivery_count_limit.to_string(),
        STREAMS_SESSION => "45000".into(),
        STREAMS_HEARTBEAT => "5000".into(),
        SHARE_RESET => "latest".into(),
        SHARE_ISOLATION => "read_uncommitted".into(),
        STREAMS_STANDBY => "0".into(),
        STREAMS_DELAY => "3000".into(),
        _ => String::new(),
    }
}

type Error = KafkaError;

fn invalid_config(message: impl Into<String>) -> Error {
    KafkaError::new(ErrorCode::INVALID_CONFIG, message)
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(KafkaError::new(
            ErrorCode::INVALID_REQUEST,
            "Group name must not be empty",
        ));
    }
    Ok(())
}

/// One described key: (name, value, config source, config type).
pub type GroupEntry = (String, String, i8, i8);

/// DescribeConfigs of one GROUP resource: every Kafka group key, the override at
/// GROUP_CONFIG, otherwise the value the group runs with at DEFAULT_CONFIG (Kafka's
/// `ConfigHelper.createGroupConfigEntry`).
pub fn describe(broker: &Broker, name: &str) -> Result<Vec<GroupEntry>, Error> {
    check_name(name)?;
    let overrides = broker.groups.group_overrides(broker, name, now_ms());
    Ok(KEYS
        .iter()
        .map(|(key, kind)| {
            let config_type = match kind {
                Kind::Int(_) => TYPE_INT,
                _ => TYPE_STRING,
            };
            match overrides.get(*key) {
                Some(v) => (key.to_string(), v.clone(), SOURCE_GROUP_CONFIG, config_type),
                None => (
                    key.to_string(),
                    default_value(broker, key),
                    SOURCE_DEFAULT_CONFIG,
                    config_type,
                ),
            }
        })
        .collect())
}

/// The groups with overrides, for ListConfigResources.
pub fn list(broker: &Broker) -> Vec<String> {
    broker.groups.groups_with_overrides(broker, now_ms())
}

/// IncrementalAlterConfigs of one GROUP resource: applies the operations to the group's
/// overrides, validates the result as Kafka does, and stores it (unless `validate_only`).
pub fn alter(
    broker: &Broker,
    name: &str,
    ops: &[AlterConfigOp],
    validate_only: bool,
) -> Result<(), Error> {
    check_name(name)?;
    let edit = |mut overrides: GroupOverrides, config: &GroupConfig| {
        for op in ops {
            match op.op {
                AlterConfigOpType::Set => {
                    let value = op.value.clone().unwrap_or_default();
                    overrides.insert(op.name.clone(), value);
                }
                AlterConfigOpType::Delete => {
                    overrides.remove(&op.name);
                }
                AlterConfigOpType::Append | AlterConfigOpType::Subtract => {
                    let verb = if op.op == AlterConfigOpType::Append {
                        "APPEND"
                    } else {
                        "SUBTRACT"
                    };
                    return Err(invalid_config(format!(
                        "Can't {verb} to key {} because its type is not LIST.",
                        op.name
                    )));
                }
            }
        }
        validate(config, &overrides)?;
        Ok(if validate_only { None } else { Some(overrides) })
    };
    if broker.cluster().is_some() {
        // Cluster mode: the overrides are cluster metadata in PostgreSQL, written by whichever
        // broker the client asked.
        let current = broker.groups.group_overrides(broker, name, now_ms());
        let Some(overrides) = edit(current, &broker.groups.config)? else {
            return Ok(());
        };
        return broker
            .cluster_set_group_configs(name, overrides)
            .map_err(|e| {
                tracing::error!(group = %name, error = %e, "cannot store group configs in the cluster");
                KafkaError::new(
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                    "the group configs could not be saved",
                )
            });
    }
    broker
        .groups
        .alter_group_overrides(broker, name, now_ms(), edit, |e| {
            tracing::error!(group = %name, error = %format!("{e:#}"), "cannot persist group configs");
            KafkaError::new(
                ErrorCode::UNKNOWN_SERVER_ERROR,
                "the group configs could not be saved",
            )
        })
}

/// Java's `Integer.parseInt` of a trimmed value (ConfigDef trims).
fn parse_int(key: &str, value: &str) -> Result<i64, Error> {
    value.trim().parse::<i32>().map(i64::from).map_err(|_| {
        invalid_config(format!(
            "Invalid value {value} for configuration {key}: Not a number of type INT"
        ))
    })
}

/// A `java.time.Duration.parse` text without a sign: `PnDTnHnMn.nS` (the parser the share
/// coordinator resolves `by_duration` with, so what is accepted here is what it uses).
fn is_iso_duration(text: &str) -> bool {
    crate::groups::share::parse_iso_duration_ms(text).is_some()
}

fn check_offset_reset(key: &str, value: &str) -> Result<(), Error> {
    let lower = value.to_ascii_lowercase();
    let ok = match lower.strip_prefix("by_duration:") {
        Some(_) => value
            .get("by_duration:".len()..)
            .is_some_and(is_iso_duration),
        None => lower == "earliest" || lower == "latest",
    };
    if ok {
        Ok(())
    } else {
        Err(invalid_config(format!(
            "Invalid value {value} for configuration {key}: Invalid value `{value}` for configuration {key}. The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
        )))
    }
}

/// Kafka's `GroupConfig.validate`: names, then each value's type and range, then the values
/// together against the broker's bounds.
fn validate(
    broker: &skiff_group::GroupConfig,
    overrides: &BTreeMap<String, String>,
) -> Result<(), Error> {
    for key in overrides.keys() {
        if !KEYS.iter().any(|(k, _)| k == key) {
            return Err(invalid_config(format!("Unknown group config name: {key}")));
        }
    }
    let mut ints: BTreeMap<&str, i64> = BTreeMap::new();
    for (key, kind) in KEYS {
        let Some(value) = overrides.get(key) else {
            continue;
        };
        match kind {
            Kind::Int(min) => {
                let v = parse_int(key, value)?;
                if v < min {
                    return Err(invalid_config(format!(
                        "Invalid value {v} for configuration {key}: Value must be at least {min}"
                    )));
                }
                ints.insert(key, v);
            }
            Kind::OffsetReset => check_offset_reset(key, value)?,
            Kind::Isolation => {
                if value != "read_committed" && value != "read_uncommitted" {
                    return Err(invalid_config(format!(
                        "Invalid value {value} for configuration {key}: String must be one of: read_committed, read_uncommitted"
                    )));
                }
            }
        }
    }
    let get = |key: &str, default: i64| ints.get(key).copied().unwrap_or(default);
    let consumer_heartbeat = get(CONSUMER_HEARTBEAT, broker.consumer_heartbeat_interval_ms);
    let consumer_session = get(CONSUMER_SESSION, broker.consumer_session_timeout_ms);
    let (min_hb, max_hb) = broker.consumer_heartbeat_interval_bounds();
    let (min_session, max_session) = broker.consumer_session_timeout_bounds();
    let share_heartbeat = get(SHARE_HEARTBEAT, broker.share_heartbeat_interval_ms);
    let share_session = get(SHARE_SESSION, broker.share_session_timeout_ms);
    let (share_min_hb, share_max_hb) = broker.share_heartbeat_interval_bounds();
    let (share_min_session, share_max_session) = broker.share_session_timeout_bounds();
    let (min_lock, max_lock) = broker.share_record_lock_duration_bounds();
    let (min_delivery, max_delivery) = broker.share_delivery_count_limit_bounds();
    // (value, min, max, key, min key, max key), in Kafka's order.
    let bounded = [
        (
            consumer_heartbeat,
            min_hb,
            max_hb,
            CONSUMER_HEARTBEAT,
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
        ),
        (
            consumer_session,
            min_session,
            max_session,
            CONSUMER_SESSION,
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
        ),
        (
            share_heartbeat,
            share_min_hb,
            share_max_hb,
            SHARE_HEARTBEAT,
            "group.share.min.heartbeat.interval.ms",
            "group.share.max.heartbeat.interval.ms",
        ),
        (
            share_session,
            share_min_session,
            share_max_session,
            SHARE_SESSION,
            "group.share.min.session.timeout.ms",
            "group.share.max.session.timeout.ms",
        ),
        (
            get(SHARE_LOCK, broker.share_record_lock_duration_ms),
            min_lock,
            max_lock,
            SHARE_LOCK,
            "group.share.min.record.lock.duration.ms",
            "group.share.max.record.lock.duration.ms",
        ),
        (
            get(SHARE_DELIVERY, broker.share_delivery_count_limit),
            min_delivery,
            max_delivery,
            SHARE_DELIVERY,
            "group.share.min.delivery.count.limit",
            "group.share.max.delivery.count.limit",
        ),
        (
            get(STREAMS_HEARTBEAT, 5000),
            5000,
            15000,
            STREAMS_HEARTBEAT,
            "group.streams.min.heartbeat.interval.ms",
            "group.streams.max.heartbeat.interval.ms",
        ),
        (
            get(STREAMS_SESSION, 45000),
            45000,
            60000,
            STREAMS_SESSION,
            "group.streams.min.session.timeout.ms",
            "group.streams.max.session.timeout.ms",
        ),
        (
            get(STREAMS_STANDBY, 0),
            i64::MIN,
            2,
            STREAMS_STANDBY,
            "",
            "group.streams.max.standby.replicas",
        ),
    ];
    for (value, min, max, key, min_key, max_key) in bounded {
        if value < min {
            return Err(invalid_config(format!(
                "{key} must be greater than or equal to {min_key}"
            )));
        }
        if value > max {
            return Err(invalid_config(format!(
                "{key} must be less than or equal to {max_key}"
            )));
        }
    }
    let pairs = [
        (
            consumer_session,
            consumer_heartbeat,
            CONSUMER_SESSION,
            CONSUMER_HEARTBEAT,
        ),
        (
            share_session,
            share_heartbeat,
            SHARE_SESSION,
            SHARE_HEARTBEAT,
        ),
        (
            get(STREAMS_SESSION, 45000),
            get(STREAMS_HEARTBEAT, 5000),
            STREAMS_SESSION,
            STREAMS_HEARTBEAT,
        ),
    ];
    for (session, heartbeat, session_key, heartbeat_key) in pairs {
        if session <= heartbeat {
            return Err(invalid_config(format!(
                "{session_key} must be greater than {heartbeat_key}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_durations() {
        for ok in ["PT1H", "P1D", "P1DT2H3M4.5S", "PT0S", "pt10m", "PT1,5S"] {
            assert!(is_iso_duration(ok), "{ok}");
        }
        for bad in ["", "P", "PT", "1H", "PT-1H", "P1H", "PTS", "PT1.S2"] {
            assert!(!is_iso_duration(bad), "{bad}");
        }
    }

    #[test]
    fn validation_follows_kafka() {
        let broker = skiff_group::GroupConfig::default();
        let set = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(validate(&broker, &set(&[])).is_ok());
        assert!(validate(&broker, &set(&[(CONSUMER_HEARTBEAT, "6000")])).is_ok());
        let err =
            |pairs: &[(&str, &str)]| validate(&broker, &set(pairs)).err().and_then(|e| e.message);
        assert_eq!(
            err(&[("nope", "1")]),
            Some("Unknown group config name: nope".into())
        );
        assert_eq!(
            err(&[(CONSUMER_HEARTBEAT, "x")]),
            Some("Invalid value x for configuration consumer.heartbeat.interval.ms: Not a number of type INT".into())
        );
        assert_eq!(
            err(&[(CONSUMER_HEARTBEAT, "0")]),
            Some("Invalid value 0 for configuration consumer.heartbeat.interval.ms: Value must be at least 1".into())
        );
        assert_eq!(
            err(&[(CONSUMER_HEARTBEAT, "4999")]),
            Some("consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms".into())
        );
        assert_eq!(
            err(&[(CONSUMER_SESSION, "60001")]),
            Some("consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms".into())
        );
        let narrow = skiff_group::GroupConfig {
            consumer_min_session_timeout_ms: 1000,
            consumer_min_heartbeat_interval_ms: 1000,
            ..Default::default()
        };
        assert_eq!(
            validate(
                &narrow,
                &set(&[(CONSUMER_SESSION, "2000"), (CONSUMER_HEARTBEAT, "2000")])
            )
            .err()
            .and_then(|e| e.message),
            Some(
                "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
                    .into()
            )
        );
        assert!(err(&[(SHARE_RESET, "by_duration:PT1H")]).is_none());
        assert!(err(&[(SHARE_RESET, "EARLIEST")]).is_none());
        assert!(err(&[(SHARE_RESET, "none")]).is_some());
        assert!(err(&[(SHARE_ISOLATION, "read_committed")]).is_none());
        assert!(err(&[(SHARE_ISOLATION, "READ_COMMITTED")]).is_some());
        assert!(err(&[(STREAMS_STANDBY, "3")]).is_some());
        assert!(err(&[(SHARE_LOCK, "999")]).is_some());
        assert!(err(&[(SHARE_DELIVERY, "10")]).is_none());
        assert_eq!(
            err(&[(SHARE_DELIVERY, "11")]),
            Some("share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit".into())
        );
        assert!(err(&[(SHARE_DELIVERY, "1")]).is_some());
        assert_eq!(
            err(&[(SHARE_SESSION, "44999")]),
            Some("share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms".into())
        );
        // The broker's own share session timeout widens the bounds (as for consumer groups), so
        // a broker run with a short one accepts group overrides down to it.
        let short = skiff_group::GroupConfig {
            share_session_timeout_ms: 1500,
            share_heartbeat_interval_ms: 500,
            ..Default::default()
        };
        assert!(
            validate(
                &short,
                &set(&[(SHARE_SESSION, "1500"), (SHARE_HEARTBEAT, "500")])
            )
            .is_ok()
        );
        assert_eq!(
            validate(&short, &set(&[(SHARE_SESSION, "1000"), (SHARE_HEARTBEAT, "1000")]))
                .err()
                .and_then(|e| e.message),
            Some("share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms".into())
        );
    }
}
