//! Resolution (topic override > dynamic broker > dynamic default > static > default), describe,
//! and IncrementalAlterConfigs semantics, following Kafka's `ConfigHelper` and
//! `ConfigurationControlManager`.

use std::collections::{BTreeMap, BTreeSet};

use super::registry::{
    BrokerSynonym, ConfigDef, SynonymUnit, broker_config_def, broker_config_defs,
    broker_synonym_group, split_list, topic_config_defs,
};
use super::{
    AlterConfigOp, AlterConfigOpType, BrokerConfigScope, ConfigEntry, ConfigSource, ConfigSynonym,
    ConfigType,
};
use crate::error::{MetaError, Result};

/// The three places a broker-level value can be set, highest priority first.
#[derive(Clone, Copy)]
pub(crate) struct BrokerTiers<'a> {
    pub dynamic_broker: &'a BTreeMap<String, String>,
    pub dynamic_default: &'a BTreeMap<String, String>,
    pub static_broker: &'a BTreeMap<String, String>,
}

impl<'a> BrokerTiers<'a> {
    fn tiers(&self) -> [(&'a BTreeMap<String, String>, ConfigSource); 3] {
        [
            (self.dynamic_broker, ConfigSource::DynamicBroker),
            (self.dynamic_default, ConfigSource::DynamicDefaultBroker),
            (self.static_broker, ConfigSource::StaticBroker),
        ]
    }

    /// The value set for `name` in the highest-priority tier that sets it.
    fn lookup(&self, name: &str) -> Option<(&'a str, ConfigSource)> {
        self.tiers()
            .into_iter()
            .find_map(|(map, source)| map.get(name).map(|v| (v.as_str(), source)))
    }

    /// A broker key's value: set somewhere, else its default.
    pub fn value(&self, def: &ConfigDef) -> Option<String> {
        self.lookup(def.name)
            .map(|(v, _)| v.to_owned())
            .or_else(|| def.default.map(str::to_owned))
    }

    /// Every place any of `names` is set, ordered as Kafka's `ConfigHelper.configSynonyms`: tier by
    /// tier (dynamic broker, dynamic default, static, built-in default), and within a tier in the
    /// names' priority order.
    fn chain(&self, names: &[&'static str]) -> Vec<ConfigSynonym> {
        let mut out = Vec::new();
        for (map, source) in self.tiers() {
            for name in names {
                if let Some(value) = map.get(*name) {
                    out.push(synonym(name, Some(value.clone()), source));
                }
            }
        }
        for name in names {
            if let Some(default) = broker_config_def(name).and_then(|d| d.default) {
                out.push(synonym(
                    name,
                    Some(default.to_owned()),
                    ConfigSource::Default,
                ));
            }
        }
        out
    }
}

fn synonym(name: &str, value: Option<String>, source: ConfigSource) -> ConfigSynonym {
    ConfigSynonym {
        name: name.to_owned(),
        value,
        source,
    }
}

fn entry(
    def: &ConfigDef,
    value: Option<String>,
    synonyms: Vec<ConfigSynonym>,
    read_only: bool,
) -> ConfigEntry {
    let source = synonyms.first().map_or(ConfigSource::Default, |s| s.source);
    ConfigEntry {
        name: def.name.to_owned(),
        value,
        source,
        is_default: source == ConfigSource::Default,
        read_only,
        is_sensitive: def.config_type == ConfigType::Password,
        synonyms,
        config_type: def.config_type,
    }
}

/// Converts a broker synonym's value into the topic key's unit. As Kafka's
/// `KafkaConfig.logRetentionTimeMillis` does, a negative time means "no limit" (-1).
fn convert(synonym: &BrokerSynonym, value: &str) -> Result<String> {
    let factor: i64 = match synonym.unit {
        SynonymUnit::Same => return Ok(value.to_owned()),
        SynonymUnit::MinutesToMillis => 60_000,
        SynonymUnit::HoursToMillis => 3_600_000,
    };
    let n: i64 = value.trim().parse().map_err(|_| {
        MetaError::InvalidConfig(format!("{}={value} is not a number", synonym.name))
    })?;
    let millis = n.saturating_mul(factor);
    Ok(if millis < 0 { -1 } else { millis }.to_string())
}

/// One topic key's effective value and its synonyms (the first synonym supplies the value).
///
/// Which broker synonym supplies the value: the highest-priority name set in any tier (Kafka's
/// `KafkaConfig` getters), else the first name with a built-in default. The synonym list is
/// Kafka's tier-ordered chain with everything before that name dropped, so its head is always the
/// entry that supplies the value. (Kafka drops up to the *primary* name, which leaves an empty list
/// and a DEFAULT_CONFIG source when, say, only `log.retention.hours` is set; Skiff reports
/// `STATIC_BROKER_CONFIG log.retention.hours` instead.)
fn resolve_topic_key(
    def: &ConfigDef,
    overrides: &BTreeMap<String, String>,
    tiers: BrokerTiers<'_>,
) -> Result<(String, Vec<ConfigSynonym>)> {
    let chosen = def
        .synonyms
        .iter()
        .find_map(|s| tiers.lookup(s.name).map(|(v, _)| (s, v)))
        .or_else(|| {
            def.synonyms.iter().find_map(|s| {
                broker_config_def(s.name)
                    .and_then(|b| b.default)
                    .map(|d| (s, d))
            })
        });
    let names: Vec<&'static str> = def.synonyms.iter().map(|s| s.name).collect();
    let (mut synonyms, inherited) = match chosen {
        Some((syn, value)) => (
            tiers
                .chain(&names)
                .into_iter()
                .skip_while(|s| s.name != syn.name)
                .collect(),
            convert(syn, value)?,
        ),
        None => (Vec::new(), def.default.unwrap_or_default().to_owned()),
    };
    match overrides.get(def.name) {
        Some(value) => {
            synonyms.insert(
                0,
                synonym(def.name, Some(value.clone()), ConfigSource::DynamicTopic),
            );
            Ok((value.clone(), synonyms))
        }
        None => Ok((inherited, synonyms)),
    }
}

/// The effective value of every topic key.
pub(crate) fn topic_values(
    overrides: &BTreeMap<String, String>,
    tiers: BrokerTiers<'_>,
) -> Result<BTreeMap<&'static str, String>> {
    topic_config_defs()
        .iter()
        .map(|def| resolve_topic_key(def, overrides, tiers).map(|(v, _)| (def.name, v)))
        .collect()
}

/// DescribeConfigs for a topic: every topic key, sorted by name.
pub(crate) fn describe_topic(
    overrides: &BTreeMap<String, String>,
    tiers: BrokerTiers<'_>,
) -> Result<Vec<ConfigEntry>> {
    topic_config_defs()
        .iter()
        .map(|def| {
            let (value, synonyms) = resolve_topic_key(def, overrides, tiers)?;
            Ok(entry(def, Some(value), synonyms, false))
        })
        .collect()
}

/// DescribeConfigs for a broker resource (Kafka's `createBrokerConfigEntry`).
///
/// `ThisBroker` lists every supported broker key; `ClusterDefault` lists only the keys set at the
/// cluster-default level, with only that level's synonyms.
pub(crate) fn describe_broker(
    tiers: BrokerTiers<'_>,
    scope: BrokerConfigScope,
) -> Vec<ConfigEntry> {
    let describe = |def: &'static ConfigDef| {
        let group = broker_synonym_group(def.name);
        let synonyms: Vec<ConfigSynonym> = tiers
            .chain(&group)
            .into_iter()
            .skip_while(|s| s.name != def.name)
            .filter(|s| {
                scope == BrokerConfigScope::ThisBroker
                    || s.source == ConfigSource::DynamicDefaultBroker
            })
            .collect();
        let value = match scope {
            BrokerConfigScope::ThisBroker => tiers.value(def),
            BrokerConfigScope::ClusterDefault => tiers.dynamic_default.get(def.name).cloned(),
        };
        entry(def, value, synonyms, !def.dynamic)
    };
    match scope {
        BrokerConfigScope::ThisBroker => broker_config_defs().iter().map(describe).collect(),
        BrokerConfigScope::ClusterDefault => tiers
            .dynamic_default
            .keys()
            .filter_map(|name| broker_config_def(name))
            .map(describe)
            .collect(),
    }
}

/// Whether ops address a topic or a broker resource.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Topic,
    Broker,
}

impl Level {
    fn def(self, name: &str) -> Result<&'static ConfigDef> {
        match self {
            Level::Topic => super::topic_config_def(name).ok_or_else(|| {
                MetaError::InvalidConfig(format!("Unknown topic config name: {name}"))
            }),
            Level::Broker => {
                let def = broker_config_def(name).ok_or_else(|| {
                    MetaError::InvalidConfig(format!("Unknown broker config name: {name}"))
                })?;
                if def.dynamic {
                    Ok(def)
                } else {
                    Err(MetaError::InvalidConfig(format!(
                        "Cannot update these configs dynamically: {name}"
                    )))
                }
            }
        }
    }
}

/// Validates and canonicalises a full map of values (topic configs at creation; static broker
/// configs at open, where read-only keys are allowed).
pub(crate) fn normalize_all(
    input: &BTreeMap<String, String>,
    level: Level,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (name, raw) in input {
        let def = match level {
            Level::Topic => level.def(name)?,
            Level::Broker => broker_config_def(name).ok_or_else(|| {
                MetaError::InvalidConfig(format!("Unknown broker config name: {name}"))
            })?,
        };
        out.insert(
            name.clone(),
            def.normalize(raw).map_err(MetaError::InvalidConfig)?,
        );
    }
    Ok(out)
}

/// Applies IncrementalAlterConfigs ops to a map of set values and returns the new map.
///
/// As in Kafka: a key may appear once per resource (INVALID_REQUEST otherwise); SET, APPEND and
/// SUBTRACT need a value; APPEND and SUBTRACT apply only to LIST keys (INVALID_CONFIG otherwise)
/// and start from the key's set value, else its built-in default; DELETE of an unset key is a
/// no-op. Every resulting value is validated.
pub(crate) fn apply_ops(
    current: &BTreeMap<String, String>,
    ops: &[AlterConfigOp],
    level: Level,
) -> Result<BTreeMap<String, String>> {
    let mut seen = BTreeSet::new();
    for op in ops {
        if !seen.insert(op.name.as_str()) {
            return Err(MetaError::InvalidRequest(format!(
                "Error due to duplicate config keys: {}",
                op.name
            )));
        }
    }
    let mut next = current.clone();
    for op in ops {
        let def = level.def(&op.name)?;
        let value = || {
            op.value.as_deref().ok_or_else(|| {
                MetaError::InvalidRequest(format!("Null value not supported for: {}", op.name))
            })
        };
        let new_value = match op.op {
            AlterConfigOpType::Delete => {
                next.remove(def.name);
                continue;
            }
            AlterConfigOpType::Set => value()?.to_owned(),
            AlterConfigOpType::Append | AlterConfigOpType::Subtract => {
                if def.config_type != ConfigType::List {
                    return Err(MetaError::InvalidConfig(format!(
                        "Can't {} to key {} because its type is not LIST.",
                        if op.op == AlterConfigOpType::Append {
                            "APPEND"
                        } else {
                            "SUBTRACT"
                        },
                        def.name
                    )));
                }
                let base = next
                    .get(def.name)
                    .map(String::as_str)
                    .or(def.default)
                    .unwrap_or_default();
                let mut items: Vec<&str> = split_list(base);
                let operand = split_list(value()?);
                if op.op == AlterConfigOpType::Append {
                    for item in operand {
                        if !items.contains(&item) {
                            items.push(item);
                        }
                    }
                } else {
                    items.retain(|item| !operand.contains(item));
                }
                items.join(",")
            }
        };
        let normalized = def
            .normalize(&new_value)
            .map_err(MetaError::InvalidConfig)?;
        next.insert(def.name.to_owned(), normalized);
    }
    Ok(next)
}

/// Checks between keys, on a topic's full effective values (Kafka's `LogConfig.validateValues`).
pub(crate) fn validate_topic_values(values: &BTreeMap<&'static str, String>) -> Result<()> {
    let long = |name: &str| values.get(name).and_then(|v| v.parse::<i64>().ok());
    if let (Some(min), Some(max)) = (long("min.compaction.lag.ms"), long("max.compaction.lag.ms"))
        && min > max
    {
        return Err(MetaError::InvalidConfig(format!(
            "conflict topic config setting min.compaction.lag.ms ({min}) > max.compaction.lag.ms ({max})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::topic_config_def;

    fn no_tiers(empty: &BTreeMap<String, String>) -> BrokerTiers<'_> {
        BrokerTiers {
            dynamic_broker: empty,
            dynamic_default: empty,
            static_broker: empty,
        }
    }

    #[test]
    fn topic_defaults_equal_converted_broker_defaults() {
        let empty = BTreeMap::new();
        for def in topic_config_defs() {
            let (value, _) = resolve_topic_key(def, &empty, no_tiers(&empty)).expect(def.name);
            assert_eq!(Some(value.as_str()), def.default, "{}", def.name);
        }
    }

    #[test]
    fn unit_conversion() {
        let empty = BTreeMap::new();
        let minutes = BTreeMap::from([("log.retention.minutes".to_owned(), "2".to_owned())]);
        let tiers = BrokerTiers {
            static_broker: &minutes,
            ..no_tiers(&empty)
        };
        let def = topic_config_def("retention.ms").expect("retention.ms");
        let (value, synonyms) = resolve_topic_key(def, &empty, tiers).expect("resolve");
        assert_eq!(value, "120000");
        let names: Vec<_> = synonyms
            .iter()
            .map(|s| (s.name.as_str(), s.source))
            .collect();
        assert_eq!(
            names,
            [
                ("log.retention.minutes", ConfigSource::StaticBroker),
                ("log.retention.hours", ConfigSource::Default),
            ]
        );
        let hours = BTreeMap::from([("log.retention.hours".to_owned(), "-1".to_owned())]);
        let tiers = BrokerTiers {
            static_broker: &hours,
            ..no_tiers(&empty)
        };
        let (value, _) = resolve_topic_key(def, &empty, tiers).expect("resolve");
        assert_eq!(value, "-1");
    }

    #[test]
    fn codes() {
        use crate::config::{AlterConfigOpType as Op, ConfigSource as S, ConfigType as T};
        assert_eq!(
            [
                T::Boolean,
                T::String,
                T::Int,
                T::Short,
                T::Long,
                T::Double,
                T::List,
                T::Class,
                T::Password
            ]
            .map(T::code),
            [1, 2, 3, 4, 5, 6, 7, 8, 9]
        );
        assert_eq!(
            [
                S::DynamicTopic,
                S::DynamicBroker,
                S::DynamicDefaultBroker,
                S::StaticBroker,
                S::Default
            ]
            .map(S::code),
            [1, 2, 3, 4, 5]
        );
        for op in [Op::Set, Op::Delete, Op::Append, Op::Subtract] {
            assert_eq!(Op::from_code(op.code()), Some(op));
        }
        assert_eq!(Op::from_code(4), None);
        assert_eq!(Op::from_code(-1), None);
    }
}
