//! Topic and broker configuration: the registry of supported keys ([`registry`]), the wire-level
//! vocabulary of DescribeConfigs / IncrementalAlterConfigs (types, sources, entries, operations),
//! a topic's typed effective config ([`effective`]), and the private describe/alter logic
//! (`resolve`).

pub mod effective;
pub mod registry;
pub(crate) mod resolve;

pub use effective::{CleanupPolicy, CompressionType, EffectiveTopicConfig, TimestampType};
pub use registry::{
    BrokerSynonym, ConfigDef, SynonymUnit, broker_config_def, broker_config_defs, topic_config_def,
    topic_config_defs,
};

/// A config's value type, with Kafka's DescribeConfigs `config_type` codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfigType {
    Boolean,
    String,
    Int,
    Short,
    Long,
    Double,
    List,
    Class,
    Password,
}

impl ConfigType {
    /// The DescribeConfigs `config_type` code (`UNKNOWN` is 0 and never produced here).
    pub const fn code(self) -> i8 {
        match self {
            ConfigType::Boolean => 1,
            ConfigType::String => 2,
            ConfigType::Int => 3,
            ConfigType::Short => 4,
            ConfigType::Long => 5,
            ConfigType::Double => 6,
            ConfigType::List => 7,
            ConfigType::Class => 8,
            ConfigType::Password => 9,
        }
    }
}

/// Where a config value comes from, with Kafka's DescribeConfigs `config_source` codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfigSource {
    /// A topic override (Kafka's `DYNAMIC_TOPIC_CONFIG`).
    DynamicTopic,
    /// Set dynamically for this broker (`DYNAMIC_BROKER_CONFIG`).
    DynamicBroker,
    /// Set dynamically as the cluster-wide broker default (`DYNAMIC_DEFAULT_BROKER_CONFIG`).
    DynamicDefaultBroker,
    /// Set in the broker's static config file (`STATIC_BROKER_CONFIG`).
    StaticBroker,
    /// Not set anywhere: the built-in default (`DEFAULT_CONFIG`).
    Default,
}

impl ConfigSource {
    /// The DescribeConfigs `config_source` code.
    pub const fn code(self) -> i8 {
        match self {
            ConfigSource::DynamicTopic => 1,
            ConfigSource::DynamicBroker => 2,
            ConfigSource::DynamicDefaultBroker => 3,
            ConfigSource::StaticBroker => 4,
            ConfigSource::Default => 5,
        }
    }
}

/// One synonym of a described config: where else a value for it is (or could be) set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigSynonym {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
}

/// One described config (a DescribeConfigs `DescribeConfigsResourceResult`).
///
/// `synonyms` always holds the full list, ordered as Kafka orders them (the entry that supplies
/// the value first); the broker drops them when the request does not ask for synonyms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// `None` when the key has no value at all (e.g. `log.retention.ms` left unset).
    pub value: Option<String>,
    pub source: ConfigSource,
    /// `source == Default` (DescribeConfigs v0's `is_default`).
    pub is_default: bool,
    pub read_only: bool,
    pub is_sensitive: bool,
    pub synonyms: Vec<ConfigSynonym>,
    pub config_type: ConfigType,
}

/// An IncrementalAlterConfigs operation, with Kafka's codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlterConfigOpType {
    Set,
    Delete,
    /// Add values to a LIST config (values already present are not repeated).
    Append,
    /// Remove values from a LIST config.
    Subtract,
}

impl AlterConfigOpType {
    pub const fn code(self) -> i8 {
        match self {
            AlterConfigOpType::Set => 0,
            AlterConfigOpType::Delete => 1,
            AlterConfigOpType::Append => 2,
            AlterConfigOpType::Subtract => 3,
        }
    }

    /// `None` for a code Kafka does not define (the broker answers INVALID_REQUEST).
    pub const fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(AlterConfigOpType::Set),
            1 => Some(AlterConfigOpType::Delete),
            2 => Some(AlterConfigOpType::Append),
            3 => Some(AlterConfigOpType::Subtract),
            _ => None,
        }
    }
}

/// One config change of an IncrementalAlterConfigs resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterConfigOp {
    pub name: String,
    pub op: AlterConfigOpType,
    /// Ignored by `Delete`; required by the others.
    pub value: Option<String>,
}

impl AlterConfigOp {
    pub fn set(name: impl Into<String>, value: impl Into<String>) -> Self {
        AlterConfigOp {
            name: name.into(),
            op: AlterConfigOpType::Set,
            value: Some(value.into()),
        }
    }

    pub fn delete(name: impl Into<String>) -> Self {
        AlterConfigOp {
            name: name.into(),
            op: AlterConfigOpType::Delete,
            value: None,
        }
    }

    pub fn append(name: impl Into<String>, value: impl Into<String>) -> Self {
        AlterConfigOp {
            name: name.into(),
            op: AlterConfigOpType::Append,
            value: Some(value.into()),
        }
    }

    pub fn subtract(name: impl Into<String>, value: impl Into<String>) -> Self {
        AlterConfigOp {
            name: name.into(),
            op: AlterConfigOpType::Subtract,
            value: Some(value.into()),
        }
    }
}

/// Which broker config resource a describe/alter addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BrokerConfigScope {
    /// This broker (a BROKER resource named with the broker's ID).
    ThisBroker,
    /// The cluster-wide default (a BROKER resource with an empty name).
    ClusterDefault,
}
