//! The config keys Skiff supports, with Kafka's names, types, defaults and validation
//! (from Kafka's `LogConfig`, `ServerLogConfigs`, `ServerTopicConfigSynonyms` and
//! `DynamicLogConfig`).
//!
//! # Topic keys
//!
//! Every topic-level key Kafka 4.x accepts is accepted. Skiff acts on these (their
//! [`ConfigDef::honoured`] is `true`; they are the fields of
//! [`EffectiveTopicConfig`](super::EffectiveTopicConfig)):
//! `retention.ms`, `retention.bytes`, `segment.bytes`, `segment.ms`, `segment.jitter.ms`,
//! `segment.index.bytes`, `index.interval.bytes`, `max.message.bytes`, `message.timestamp.type`,
//! `message.timestamp.before.max.ms`, `message.timestamp.after.max.ms`, `cleanup.policy`,
//! `compression.type`, `flush.ms`, `flush.messages`, `file.delete.delay.ms`,
//! `min.insync.replicas`.
//!
//! These are **stored only** — validated, persisted and described, but with no effect, because
//! Skiff has no replicas, no tiered storage and (so far) no log compaction:
//! `unclean.leader.election.enable`, `leader.replication.throttled.replicas`,
//! `follower.replication.throttled.replicas`, `remote.log.copy.disable`,
//! `remote.log.delete.on.disable`, `local.retention.ms`, `local.retention.bytes`,
//! `delete.retention.ms`, `min.compaction.lag.ms`, `max.compaction.lag.ms`,
//! `min.cleanable.dirty.ratio`, `compression.gzip.level`, `compression.lz4.level`,
//! `compression.zstd.level`, `preallocate`.
//! (`cleanup.policy=compact` is stored and reported through
//! [`CleanupPolicy::compact`](super::CleanupPolicy), but nothing compacts yet.)
//! `remote.storage.enable` is accepted only as `false`, as Kafka does on a broker without
//! tiered storage.
//!
//! Keys Kafka 4.x removed (`message.format.version`, `message.downconversion.enable`) and any
//! other unknown key are rejected with INVALID_CONFIG.
//!
//! # Broker keys
//!
//! The broker-level synonyms of every topic key, plus `num.partitions`,
//! `default.replication.factor`, `auto.create.topics.enable` and `delete.topic.enable`.
//! As in Kafka, only the primary synonym of a topic key (e.g. `log.retention.ms`, not
//! `log.retention.hours`) can be altered dynamically; the rest are read-only.

use super::ConfigType;

/// How a broker synonym's value converts into the topic key's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynonymUnit {
    Same,
    MinutesToMillis,
    HoursToMillis,
}

/// A broker key supplying a topic key's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrokerSynonym {
    pub name: &'static str,
    pub unit: SynonymUnit,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Validator {
    None,
    AtLeast(i64),
    Between(i64, i64),
    /// `-1` (the library default) or 1..=9.
    GzipLevel,
    /// A double in `[0, 1]`.
    Ratio,
    OneOf(&'static [&'static str]),
    /// A non-empty list of distinct values, each one of these.
    ListOf(&'static [&'static str]),
    /// `*`, or a list of `partition:broker` pairs.
    ThrottledReplicas,
    /// Only `false`; the text says why.
    MustBeFalse(&'static str),
}

/// One supported config key.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConfigDef {
    /// The Kafka name.
    pub name: &'static str,
    pub config_type: ConfigType,
    /// The built-in default in canonical text form (`None`: no value unless set).
    pub default: Option<&'static str>,
    /// Broker keys: whether IncrementalAlterConfigs may change it (read-only otherwise).
    /// Topic keys: always `true`.
    pub dynamic: bool,
    /// Topic keys: whether Skiff acts on it (otherwise stored only). Broker keys: whether Skiff
    /// acts on it directly or through the topic key it supplies.
    pub honoured: bool,
    /// Topic keys: the broker keys supplying the default, highest priority first.
    pub synonyms: &'static [BrokerSynonym],
    validator: Validator,
}

const fn key(
    name: &'static str,
    config_type: ConfigType,
    default: Option<&'static str>,
) -> ConfigDef {
    ConfigDef {
        name,
        config_type,
        default,
        dynamic: true,
        honoured: true,
        synonyms: &[],
        validator: Validator::None,
    }
}

impl ConfigDef {
    const fn check(mut self, validator: Validator) -> Self {
        self.validator = validator;
        self
    }

    const fn syn(mut self, synonyms: &'static [BrokerSynonym]) -> Self {
        self.synonyms = synonyms;
        self
    }

    const fn stored_only(mut self) -> Self {
        self.honoured = false;
        self
    }

    const fn read_only(mut self) -> Self {
        self.dynamic = false;
        self
    }

    /// Parses, validates and canonicalises a value (Kafka's `ConfigDef.parseType` followed by the
    /// key's validator, written back as `ConfigDef.convertToString` would).
    /// The error is a message for an INVALID_CONFIG response.
    pub fn normalize(&self, raw: &str) -> Result<String, String> {
        let invalid = |reason: &str| {
            Err(format!(
                "Invalid value {raw} for configuration {}: {reason}",
                self.name
            ))
        };
        let trimmed = raw.trim();
        match self.config_type {
            ConfigType::Boolean => {
                let value = if trimmed.eq_ignore_ascii_case("true") {
                    true
                } else if trimmed.eq_ignore_ascii_case("false") {
                    false
                } else {
                    return invalid("Expected value to be either true or false");
                };
                if let Validator::MustBeFalse(why) = self.validator
                    && value
                {
                    return invalid(why);
                }
                Ok(value.to_string())
            }
            ConfigType::Int | ConfigType::Short | ConfigType::Long => {
                let parsed = match self.config_type {
                    ConfigType::Int => trimmed.parse::<i32>().map(i64::from).ok(),
                    ConfigType::Short => trimmed.parse::<i16>().map(i64::from).ok(),
                    _ => trimmed.parse::<i64>().ok(),
                };
                let Some(value) = parsed else {
                    return invalid(match self.config_type {
                        ConfigType::Int => "Not a number of type INT",
                        ConfigType::Short => "Not a number of type SHORT",
                        _ => "Not a number of type LONG",
                    });
                };
                match self.validator {
                    Validator::AtLeast(min) if value < min => {
                        return invalid(&format!("Value must be at least {min}"));
                    }
                    Validator::Between(min, max) if value < min || value > max => {
                        return invalid(&format!(
                            "Value must be no less than {min} and no more than {max}"
                        ));
                    }
                    Validator::GzipLevel if value != -1 && !(1..=9).contains(&value) => {
                        return invalid("Value must be -1 or between 1 and 9");
                    }
                    _ => {}
                }
                Ok(value.to_string())
            }
            ConfigType::Double => {
                let Some(value) = trimmed.parse::<f64>().ok().filter(|v| v.is_finite()) else {
                    return invalid("Not a number of type DOUBLE");
                };
                if self.validator == Validator::Ratio && !(0.0..=1.0).contains(&value) {
                    return invalid("Value must be no less than 0 and no more than 1");
                }
                Ok(format_double(value))
            }
            ConfigType::String | ConfigType::Class | ConfigType::Password => {
                if let Validator::OneOf(allowed) = self.validator
                    && !allowed.contains(&trimmed)
                {
                    return invalid(&format!("String must be one of: {}", allowed.join(", ")));
                }
                Ok(trimmed.to_owned())
            }
            ConfigType::List => {
                let items = split_list(raw);
                match self.validator {
                    Validator::ListOf(allowed) => {
                        if items.is_empty() {
                            return invalid("the list must not be empty");
                        }
                        for (i, item) in items.iter().enumerate() {
                            if !allowed.contains(item) {
                                return invalid(&format!(
                                    "String must be one of: {}",
                                    allowed.join(", ")
                                ));
                            }
                            if items.get(..i).is_some_and(|earlier| earlier.contains(item)) {
                                return invalid(&format!("duplicate value {item}"));
                            }
                        }
                    }
                    Validator::ThrottledReplicas => {
                        let wildcard = items.len() == 1 && items.first() == Some(&"*");
                        if !wildcard && !items.iter().all(|item| is_partition_broker_pair(item)) {
                            return invalid(
                                "must be the wildcard (*) or a list of partitionId:brokerId pairs",
                            );
                        }
                    }
                    _ => {}
                }
                Ok(items.join(","))
            }
        }
    }
}

/// Splits a LIST value as Kafka does: trim, empty text is the empty list, else split on commas
/// with the whitespace around each item dropped.
pub(crate) fn split_list(raw: &str) -> Vec<&str> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split(',').map(str::trim).collect()
    }
}

fn is_partition_broker_pair(item: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match item.split_once(':') {
        Some((partition, broker)) => digits(partition) && digits(broker),
        None => false,
    }
}

/// Java's `Double.toString` for ordinary magnitudes: always shows a fraction (`1.0`, `0.5`).
fn format_double(value: f64) -> String {
    let text = value.to_string();
    if text.contains(['.', 'e', 'E']) {
        text
    } else {
        format!("{text}.0")
    }
}

use ConfigType::{Boolean, Double, Int, List, Long, String as Str};
use SynonymUnit::{HoursToMillis, MinutesToMillis, Same};

const fn same(name: &'static str) -> BrokerSynonym {
    BrokerSynonym { name, unit: Same }
}

const LONG_MAX: &str = "9223372036854775807";
const CLEANUP_POLICIES: &[&str] = &["compact", "delete"];
const COMPRESSION_TYPES: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];
const TIMESTAMP_TYPES: &[&str] = &["CreateTime", "LogAppendTime"];
const MIN_SEGMENT_BYTES: i64 = 1024 * 1024;
const ZSTD_MIN_LEVEL: i64 = -131_072;
const ZSTD_MAX_LEVEL: i64 = 22;

const SEGMENT_MS_SYNONYMS: &[BrokerSynonym] = &[
    same("log.roll.ms"),
    BrokerSynonym {
        name: "log.roll.hours",
        unit: HoursToMillis,
    },
];
const SEGMENT_JITTER_MS_SYNONYMS: &[BrokerSynonym] = &[
    same("log.roll.jitter.ms"),
    BrokerSynonym {
        name: "log.roll.jitter.hours",
        unit: HoursToMillis,
    },
];
const RETENTION_MS_SYNONYMS: &[BrokerSynonym] = &[
    same("log.retention.ms"),
    BrokerSynonym {
        name: "log.retention.minutes",
        unit: MinutesToMillis,
    },
    BrokerSynonym {
        name: "log.retention.hours",
        unit: HoursToMillis,
    },
];
const FLUSH_MS_SYNONYMS: &[BrokerSynonym] = &[
    same("log.flush.interval.ms"),
    same("log.flush.scheduler.interval.ms"),
];

/// Topic-level keys, sorted by name.
static TOPIC_CONFIGS: &[ConfigDef] = &[
    key("cleanup.policy", List, Some("delete"))
        .check(Validator::ListOf(CLEANUP_POLICIES))
        .syn(&[same("log.cleanup.policy")]),
    key("compression.gzip.level", Int, Some("-1"))
        .check(Validator::GzipLevel)
        .syn(&[same("compression.gzip.level")])
        .stored_only(),
    key("compression.lz4.level", Int, Some("9"))
        .check(Validator::Between(1, 17))
        .syn(&[same("compression.lz4.level")])
        .stored_only(),
    key("compression.type", Str, Some("producer"))
        .check(Validator::OneOf(COMPRESSION_TYPES))
        .syn(&[same("compression.type")]),
    key("compression.zstd.level", Int, Some("3"))
        .check(Validator::Between(ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL))
        .syn(&[same("compression.zstd.level")])
        .stored_only(),
    key("delete.retention.ms", Long, Some("86400000"))
        .check(Validator::AtLeast(0))
        .syn(&[same("log.cleaner.delete.retention.ms")])
        .stored_only(),
    key("file.delete.delay.ms", Long, Some("60000"))
        .check(Validator::AtLeast(0))
        .syn(&[same("log.segment.delete.delay.ms")]),
    key("flush.messages", Long, Some(LONG_MAX))
        .check(Validator::AtLeast(1))
        .syn(&[same("log.flush.interval.messages")]),
    key("flush.ms", Long, Some(LONG_MAX))
        .check(Validator::AtLeast(0))
        .syn(FLUSH_MS_SYNONYMS),
    key("follower.replication.throttled.replicas", List, Some(""))
        .check(Validator::ThrottledReplicas)
        .stored_only(),
    key("index.interval.bytes", Int, Some("4096"))
        .check(Validator::AtLeast(0))
        .syn(&[same("log.index.interval.bytes")]),
    key("leader.replication.throttled.replicas", List, Some(""))
        .check(Validator::ThrottledReplicas)
        .stored_only(),
    key("local.retention.bytes", Long, Some("-2"))
        .check(Validator::AtLeast(-2))
        .syn(&[same("log.local.retention.bytes")])
        .stored_only(),
    key("local.retention.ms", Long, Some("-2"))
        .check(Validator::AtLeast(-2))
        .syn(&[same("log.local.retention.ms")])
        .stored_only(),
    key("max.compaction.lag.ms", Long, Some(LONG_MAX))
        .check(Validator::AtLeast(1))
        .syn(&[same("log.cleaner.max.compaction.lag.ms")])
        .stored_only(),
    key("max.message.bytes", Int, Some("1048588"))
        .check(Validator::AtLeast(0))
        .syn(&[same("message.max.bytes")]),
    key("message.timestamp.after.max.ms", Long, Some(LONG_MAX))
        .check(Validator::AtLeast(0))
        .syn(&[same("log.message.timestamp.after.max.ms")]),
    key("message.timestamp.before.max.ms", Long, Some(LONG_MAX))
        .check(Validator::AtLeast(0))
        .syn(&[same("log.message.timestamp.before.max.ms")]),
    key("message.timestamp.type", Str, Some("CreateTime"))
        .check(Validator::OneOf(TIMESTAMP_TYPES))
        .syn(&[same("log.message.timestamp.type")]),
    key("min.cleanable.dirty.ratio", Double, Some("0.5"))
        .check(Validator::Ratio)
        .syn(&[same("log.cleaner.min.cleanable.ratio")])
        .stored_only(),
    key("min.compaction.lag.ms", Long, Some("0"))
        .check(Validator::AtLeast(0))
        .syn(&[same("log.cleaner.min.compaction.lag.ms")])
        .stored_only(),
    key("min.insync.replicas", Int, Some("1"))
        .check(Validator::AtLeast(1))
        .syn(&[same("min.insync.replicas")]),
    key("preallocate", Boolean, Some("false"))
        .syn(&[same("log.preallocate")])
        .stored_only(),
    key("remote.log.copy.disable", Boolean, Some("false")).stored_only(),
    key("remote.log.delete.on.disable", Boolean, Some("false")).stored_only(),
    key("remote.storage.enable", Boolean, Some("false"))
        .check(Validator::MustBeFalse(
            "Tiered Storage functionality is disabled in the broker",
        ))
        .stored_only(),
    key("retention.bytes", Long, Some("-1")).syn(&[same("log.retention.bytes")]),
    key("retention.ms", Long, Some("604800000"))
        .check(Validator::AtLeast(-1))
        .syn(RETENTION_MS_SYNONYMS),
    key("segment.bytes", Int, Some("1073741824"))
        .check(Validator::AtLeast(MIN_SEGMENT_BYTES))
        .syn(&[same("log.segment.bytes")]),
    key("segment.index.bytes", Int, Some("10485760"))
        .check(Validator::AtLeast(4))
        .syn(&[same("log.index.size.max.bytes")]),
    key("segment.jitter.ms", Long, Some("0"))
        .check(Validator::AtLeast(0))
        .syn(SEGMENT_JITTER_MS_SYNONYMS),
    key("segment.ms", Long, Some("604800000"))
        .check(Validator::AtLeast(1))
        .syn(SEGMENT_MS_SYNONYMS),
    key("unclean.leader.election.enable", Boolean, Some("false"))
        .syn(&[same("unclean.leader.election.enable")])
        .stored_only(),
];

/// Broker-level keys, sorted by name.
static BROKER_CONFIGS: &[ConfigDef] = &[
    key("auto.create.topics.enable", Boolean, Some("true")).read_only(),
    key("compression.gzip.level", Int, Some("-1"))
        .check(Validator::GzipLevel)
        .stored_only(),
    key("compression.lz4.level", Int, Some("9"))
        .check(Validator::Between(1, 17))
        .stored_only(),
    key("compression.type", Str, Some("producer")).check(Validator::OneOf(COMPRESSION_TYPES)),
    key("compression.zstd.level", Int, Some("3"))
        .check(Validator::Between(ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL))
        .stored_only(),
    key("default.replication.factor", Int, Some("1"))
        .check(Validator::AtLeast(1))
        .read_only(),
    key("delete.topic.enable", Boolean, Some("true")).read_only(),
    key("log.cleaner.delete.retention.ms", Long, Some("86400000"))
        .check(Validator::AtLeast(0))
        .stored_only(),
    key("log.cleaner.max.compaction.lag.ms", Long, Some(LONG_MAX))
        .check(Validator::AtLeast(1))
        .stored_only(),
    key("log.cleaner.min.cleanable.ratio", Double, Some("0.5"))
        .check(Validator::Ratio)
        .stored_only(),
    key("log.cleaner.min.compaction.lag.ms", Long, Some("0"))
        .check(Validator::AtLeast(0))
        .stored_only(),
    key("log.cleanup.policy", List, Some("delete")).check(Validator::ListOf(CLEANUP_POLICIES)),
    key("log.flush.interval.messages", Long, Some(LONG_MAX)).check(Validator::AtLeast(1)),
    key("log.flush.interval.ms", Long, None).check(Validator::AtLeast(0)),
    key("log.flush.scheduler.interval.ms", Long, Some(LONG_MAX))
        .check(Validator::AtLeast(0))
        .read_only(),
    key("log.index.interval.bytes", Int, Some("4096")).check(Validator::AtLeast(0)),
    key("log.index.size.max.bytes", Int, Some("10485760")).check(Validator::AtLeast(4)),
    key("log.local.retention.bytes", Long, Some("-2"))
        .check(Validator::AtLeast(-2))
        .stored_only(),
    key("log.local.retention.ms", Long, Some("-2"))
        .check(Validator::AtLeast(-2))
        .stored_only(),
    key("log.message.timestamp.after.max.ms", Long, Some(LONG_MAX)).check(Validator::AtLeast(0)),
    key("log.message.timestamp.before.max.ms", Long, Some(LONG_MAX)).check(Validator::AtLeast(0)),
    key("log.message.timestamp.type", Str, Some("CreateTime"))
        .check(Validator::OneOf(TIMESTAMP_TYPES)),
    key("log.preallocate", Boolean, Some("false")).stored_only(),
    key("log.retention.bytes", Long, Some("-1")),
    key("log.retention.check.interval.ms", Long, Some("300000"))
        .check(Validator::AtLeast(1))
        .read_only(),
    key("log.retention.hours", Int, Some("168")).read_only(),
    key("log.retention.minutes", Int, None).read_only(),
    key("log.retention.ms", Long, None).check(Validator::AtLeast(-1)),
    key("log.roll.hours", Int, Some("168"))
        .check(Validator::AtLeast(1))
        .read_only(),
    key("log.roll.jitter.hours", Int, Some("0"))
        .check(Validator::AtLeast(0))
        .read_only(),
    key("log.roll.jitter.ms", Long, None).check(Validator::AtLeast(0)),
    key("log.roll.ms", Long, None).check(Validator::AtLeast(1)),
    key("log.segment.bytes", Int, Some("1073741824")).check(Validator::AtLeast(MIN_SEGMENT_BYTES)),
    key("log.segment.delete.delay.ms", Long, Some("60000")).check(Validator::AtLeast(0)),
    key("message.max.bytes", Int, Some("1048588")).check(Validator::AtLeast(0)),
    key("min.insync.replicas", Int, Some("1")).check(Validator::AtLeast(1)),
    key("num.partitions", Int, Some("1"))
        .check(Validator::AtLeast(1))
        .read_only(),
    key("unclean.leader.election.enable", Boolean, Some("false")).stored_only(),
];

/// All supported topic-level keys, sorted by name.
pub fn topic_config_defs() -> &'static [ConfigDef] {
    TOPIC_CONFIGS
}

/// All supported broker-level keys, sorted by name.
pub fn broker_config_defs() -> &'static [ConfigDef] {
    BROKER_CONFIGS
}

/// The topic-level key called `name`, if Skiff supports it.
pub fn topic_config_def(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS
        .binary_search_by(|def| def.name.cmp(name))
        .ok()
        .and_then(|i| TOPIC_CONFIGS.get(i))
}

/// The broker-level key called `name`, if Skiff supports it.
pub fn broker_config_def(name: &str) -> Option<&'static ConfigDef> {
    BROKER_CONFIGS
        .binary_search_by(|def| def.name.cmp(name))
        .ok()
        .and_then(|i| BROKER_CONFIGS.get(i))
}

/// The broker keys that are synonyms of `name`, in priority order, `name` included (Kafka's
/// `DynamicBrokerConfig.brokerConfigSynonyms`): `log.retention.hours` gives
/// `[log.retention.ms, log.retention.minutes, log.retention.hours]`.
pub(crate) fn broker_synonym_group(name: &'static str) -> Vec<&'static str> {
    for def in TOPIC_CONFIGS {
        if def.synonyms.len() > 1 && def.synonyms.iter().any(|s| s.name == name) {
            return def.synonyms.iter().map(|s| s.name).collect();
        }
    }
    vec![name]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_and_unique() {
        for table in [TOPIC_CONFIGS, BROKER_CONFIGS] {
            for pair in table.windows(2) {
                if let [a, b] = pair {
                    assert!(a.name < b.name, "{} !< {}", a.name, b.name);
                }
            }
        }
    }

    #[test]
    fn defaults_are_valid_and_canonical() {
        for def in TOPIC_CONFIGS.iter().chain(BROKER_CONFIGS) {
            if let Some(default) = def.default {
                assert_eq!(
                    def.normalize(default).as_deref(),
                    Ok(default),
                    "{}",
                    def.name
                );
            }
        }
    }

    #[test]
    fn every_topic_synonym_is_a_broker_key_of_compatible_type() {
        for def in TOPIC_CONFIGS {
            for synonym in def.synonyms {
                let broker = broker_config_def(synonym.name)
                    .unwrap_or_else(|| panic!("{} -> {} missing", def.name, synonym.name));
                assert!(
                    broker.config_type == def.config_type
                        || (broker.config_type == Int && def.config_type == Long),
                    "{}",
                    def.name
                );
            }
            // Only the primary synonym is dynamic, as in Kafka's DynamicLogConfig.
            if let Some(first) = def.synonyms.first() {
                assert!(
                    broker_config_def(first.name).is_some_and(|b| b.dynamic),
                    "{}",
                    def.name
                );
            }
            for other in def.synonyms.iter().skip(1) {
                assert!(
                    broker_config_def(other.name).is_some_and(|b| !b.dynamic),
                    "{}",
                    other.name
                );
            }
        }
    }

    #[test]
    fn lookups() {
        assert_eq!(
            topic_config_def("retention.ms").map(|d| d.config_type),
            Some(Long)
        );
        assert!(topic_config_def("log.retention.ms").is_none());
        assert!(topic_config_def("message.format.version").is_none());
        assert!(broker_config_def("log.retention.hours").is_some_and(|d| !d.dynamic));
        assert_eq!(
            broker_synonym_group("log.retention.hours"),
            [
                "log.retention.ms",
                "log.retention.minutes",
                "log.retention.hours"
            ]
        );
        assert_eq!(
            broker_synonym_group("log.segment.bytes"),
            ["log.segment.bytes"]
        );
    }

    #[test]
    fn normalize_table() {
        let def = |name| topic_config_def(name).unwrap_or_else(|| panic!("{name}"));
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("retention.ms", " 1000 ", Some("1000")),
            ("retention.ms", "+5", Some("5")),
            ("retention.ms", "-1", Some("-1")),
            ("retention.ms", "-2", None),
            ("retention.ms", "1h", None),
            ("retention.ms", "", None),
            ("retention.bytes", "-100", Some("-100")),
            ("segment.bytes", "1048576", Some("1048576")),
            ("segment.bytes", "1048575", None),
            ("segment.bytes", "4294967296", None),
            ("max.message.bytes", "-1", None),
            ("cleanup.policy", "compact, delete", Some("compact,delete")),
            ("cleanup.policy", "delete", Some("delete")),
            ("cleanup.policy", "Delete", None),
            ("cleanup.policy", "", None),
            ("cleanup.policy", "delete,delete", None),
            ("cleanup.policy", "delete,,compact", None),
            (
                "message.timestamp.type",
                "LogAppendTime",
                Some("LogAppendTime"),
            ),
            ("message.timestamp.type", "logappendtime", None),
            ("compression.type", "zstd", Some("zstd")),
            ("compression.type", "brotli", None),
            ("compression.gzip.level", "-1", Some("-1")),
            ("compression.gzip.level", "0", None),
            ("compression.gzip.level", "9", Some("9")),
            ("compression.zstd.level", "-131072", Some("-131072")),
            ("compression.zstd.level", "23", None),
            ("min.cleanable.dirty.ratio", "1", Some("1.0")),
            ("min.cleanable.dirty.ratio", "0.25", Some("0.25")),
            ("min.cleanable.dirty.ratio", "1.5", None),
            ("min.cleanable.dirty.ratio", "NaN", None),
            ("preallocate", "TRUE", Some("true")),
            ("preallocate", "yes", None),
            ("remote.storage.enable", "false", Some("false")),
            ("remote.storage.enable", "true", None),
            ("leader.replication.throttled.replicas", "*", Some("*")),
            (
                "leader.replication.throttled.replicas",
                "0:1, 1:1",
                Some("0:1,1:1"),
            ),
            ("leader.replication.throttled.replicas", "", Some("")),
            ("leader.replication.throttled.replicas", "0:x", None),
            ("leader.replication.throttled.replicas", "*,0:1", None),
            ("min.insync.replicas", "0", None),
        ];
        for (name, raw, expected) in cases {
            let got = def(name).normalize(raw);
            assert_eq!(got.as_deref().ok(), *expected, "{name}={raw:?}: {got:?}");
        }
    }
}
