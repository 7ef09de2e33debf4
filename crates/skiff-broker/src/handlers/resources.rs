//! Kafka's config resource types (`ConfigResource.Type`), shared by DescribeConfigs,
//! IncrementalAlterConfigs and ListConfigResources.

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_BROKER_LOGGER: i8 = 8;
/// Client metrics subscriptions (KIP-714).
pub const RESOURCE_CLIENT_METRICS: i8 = 16;
/// Groups (KIP-848 group configs).
pub const RESOURCE_GROUP: i8 = 32;
