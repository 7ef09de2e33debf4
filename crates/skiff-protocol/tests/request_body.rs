//! The generated `RequestBody` trait: each request type names its API, version range and
//! response type, and takes its typed response out of a `Response` (or hands a mismatch back).

use skiff_protocol::generated::{
    ApiVersionsResponse, FetchRequest, MetadataRequest, MetadataResponse, ProduceRequest,
    ProduceResponse,
};
use skiff_protocol::{ApiKey, Request, RequestBody, Response};

#[test]
fn request_types_name_their_api_and_the_schemas_versions() {
    assert_eq!(<ProduceRequest as RequestBody>::API_KEY, ApiKey::Produce);
    assert_eq!(
        (ProduceRequest::MIN_VERSION, ProduceRequest::MAX_VERSION),
        ApiKey::Produce.versions()
    );
    assert_eq!(<FetchRequest as RequestBody>::API_KEY, ApiKey::Fetch);
    assert_eq!(
        (MetadataRequest::MIN_VERSION, MetadataRequest::MAX_VERSION),
        ApiKey::Metadata.versions()
    );
    let request: Request = MetadataRequest::default().into();
    assert_eq!(request.api_key(), <MetadataRequest as RequestBody>::API_KEY);
    // The message's own `API_KEY` (the wire number) agrees.
    assert_eq!(ProduceRequest::API_KEY, ApiKey::Produce.key());
}

#[test]
fn from_response_takes_the_matching_body_and_hands_back_any_other() {
    let typed: Result<ProduceResponse, Response> =
        ProduceRequest::from_response(Response::Produce(ProduceResponse::default()));
    assert_eq!(typed, Ok(ProduceResponse::default()));

    let other = Response::ApiVersions(ApiVersionsResponse::default());
    let mismatch: Result<MetadataResponse, Response> =
        MetadataRequest::from_response(other.clone());
    assert_eq!(mismatch, Err(other));
}
