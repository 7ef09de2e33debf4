//! ApiVersions: the versions Skiff serves, exactly as `supported_versions` lists them.

use skiff_protocol::generated::ApiVersionsRequest;
use skiff_protocol::generated::api_versions_response::{ApiVersion, ApiVersionsResponse};
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

pub fn handle(ctx: &RequestContext, _request: ApiVersionsRequest) -> Response {
    // Top-level tagged fields (supported/finalized features) stay at their defaults and so are
    // not written: librdkafka 2.0 (kcat) cannot skip non-empty ones.
    Response::ApiVersions(ApiVersionsResponse {
        error_code: error_codes::NONE,
        api_keys: advertised(&ctx.broker),
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
