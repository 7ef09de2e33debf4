//! InitProducerId v0-5 for idempotent producers.
//!
//! - No transactional ID and no producer ID/epoch: a fresh producer ID with epoch 0.
//! - No transactional ID with an existing producer ID and epoch (v3+, KIP-360): the same ID with
//!   the epoch bumped; when the bump would reach `i16::MAX` a fresh ID with epoch 0 instead, as
//!   Kafka's transaction coordinator does on epoch exhaustion. (Kafka itself ignores the given ID
//!   of a non-transactional producer and always hands out a fresh one; both answers are valid for
//!   clients, and bumping keeps the producer's ID stable.)
//! - Only one of producer ID and epoch set: INVALID_REQUEST, as in Kafka's `KafkaApis`.
//! - An empty transactional ID: INVALID_REQUEST, as in Kafka's `TransactionCoordinator`.
//! - Any other transactional ID: TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Skiff has no transaction
//!   coordinator. Clients treat this code as fatal for the transactional producer (Java:
//!   `TransactionalIdAuthorizationException` from `initTransactions`; librdkafka: a fatal
//!   error), so the application fails at once with a clear reason instead of retrying
//!   NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE until its timeout.

use skiff_protocol::generated::InitProducerIdRequest;
use skiff_protocol::generated::init_producer_id_response::InitProducerIdResponse;
use skiff_protocol::{Response, error_codes};

use super::RequestContext;

pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;

pub fn handle(ctx: &RequestContext, request: InitProducerIdRequest) -> Response {
    let failed = |code: i16| InitProducerIdResponse {
        error_code: code,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        ..Default::default()
    };
    // Fields a version lacks decode as their defaults (-1/-1).
    let existing = match (request.producer_id, request.producer_epoch) {
        (NO_PRODUCER_ID, NO_PRODUCER_EPOCH) => None,
        (NO_PRODUCER_ID, _) | (_, NO_PRODUCER_EPOCH) => {
            return Response::InitProducerId(failed(error_codes::INVALID_REQUEST));
        }
        (id, epoch) if id < 0 || epoch < 0 => {
            return Response::InitProducerId(failed(error_codes::INVALID_REQUEST));
        }
        (id, epoch) => Some((id, epoch)),
    };
    match request.transactional_id.as_deref() {
        None => {}
        Some("") => return Response::InitProducerId(failed(error_codes::INVALID_REQUEST)),
        Some(_) => {
            return Response::InitProducerId(failed(TRANSACTIONAL_ID_AUTHORIZATION_FAILED));
        }
    }
    let bumped = existing.and_then(|(id, epoch)| {
        let next = epoch.checked_add(1)?;
        (next < i16::MAX).then_some((id, next))
    });
    let (producer_id, producer_epoch) = match bumped {
        Some(pair) => pair,
        None => {
            let allocated = ctx
                .broker
                .producer_ids
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .allocate();
            match allocated {
                Ok(id) => (id, 0),
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "producer ID allocation failed");
                    return Response::InitProducerId(failed(error_codes::UNKNOWN_SERVER_ERROR));
                }
            }
        }
    };
    Response::InitProducerId(InitProducerIdResponse {
        error_code: error_codes::NONE,
        producer_id,
        producer_epoch,
        ..Default::default()
    })
}
