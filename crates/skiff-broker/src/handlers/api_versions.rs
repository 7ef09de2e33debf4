//! ApiVersions: the versions Skiff serves, exactly as `supported_versions` lists them.

use skiff_protocol::generated::ApiVersionsRequest;
use skiff_protocol::generated::api_versions_response::{
    ApiVersion, ApiVersionsResponse, FinalizedFeatureKey, SupportedFeatureKey,
};
use skiff_protocol::{ApiKey, Response, error_codes};

use super::RequestContext;
use crate::state::Broker;

/// Every advertised API and its version range, in key order.
pub fn advertised(broker: &Broker) -> Vec<ApiVersion> {
    ApiKey::ALL
        .iter()
        .filter_map(|&api| {
            broker
                .serves(api)
                .map(|(min_version, max_version)| ApiVersion {
                    api_key: api.key(),
                    min_version,
                    max_version,
                    ..Default::default()
                })
        })
        .collect()
}

/// The features (KIP-584) Skiff supports, with their version ranges: `group.version` 1 is the
/// KIP-848 consumer group protocol, `share.version` 1 KIP-932 share groups.
pub const SUPPORTED_FEATURES: [(&str, i16, i16); 2] =
    [("group.version", 0, 1), ("share.version", 0, 1)];

/// The finalized level of each feature on this broker (a level-0 feature is not listed, as
/// Kafka does not list it).
pub fn finalized_features(broker: &Broker) -> Vec<(&'static str, i16)> {
    let mut finalized = vec![("group.version", 1)];
    if broker.serves(ApiKey::ShareGroupHeartbeat).is_some() {
        finalized.push(("share.version", 1));
    }
    finalized
}

pub fn handle(ctx: &RequestContext, _request: ApiVersionsRequest) -> Response {
    // The features are v3+ tagged fields (written only to such requests by the codec).
    let finalized = finalized_features(&ctx.broker);
    Response::ApiVersions(ApiVersionsResponse {
        error_code: error_codes::NONE,
        api_keys: advertised(&ctx.broker),
        supported_features: SUPPORTED_FEATURES
            .iter()
            .map(|&(name, min_version, max_version)| SupportedFeatureKey {
                name: name.into(),
                min_version,
                max_version,
                ..Default::default()
            })
            .collect(),
        // Kafka gives the metadata offset the levels were read at; a broker's levels come from
        // its configuration, fixed at start, so its start time orders them across restarts.
        finalized_features_epoch: ctx.broker.started_ms,
        finalized_features: finalized
            .into_iter()
            .map(|(name, level)| FinalizedFeatureKey {
                name: name.into(),
                max_version_level: level,
                min_version_level: level,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

/// The v0 answer to an ApiVersions request of a version Skiff does not serve.
pub fn unsupported_version_response(broker: &Broker) -> Response {
    Response::ApiVersions(ApiVersionsResponse {
        error_code: error_codes::UNSUPPORTED_VERSION,
        api_keys: advertised(broker),
        ..Default::default()
    })
}
