//! InitProducerId v0-5.
//!
//! Authorization comes first, as in Kafka's `KafkaApis`: a transactional ID needs WRITE on it
//! (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IDEMPOTENT_WRITE on
//! the cluster or WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED). Then:
//!
//! - No transactional ID and no producer ID/epoch: a fresh producer ID with epoch 0.
//! - No transactional ID with an existing producer ID and epoch (v3+, KIP-360): the same ID with
//!   the epoch bumped; when the bump would reach `i16::MAX` a fresh ID with epoch 0 instead, as
//!   Kafka's transaction coordinator does on epoch exhaustion. (Kafka itself ignores the given ID
//!   of a non-transactional producer and always hands out a fresh one; both answers are valid for
//!   clients, and bumping keeps the producer's ID stable.)
//! - Only one of producer ID and epoch set: INVALID_REQUEST, as in Kafka's `KafkaApis`.
//! - An empty transactional ID: INVALID_REQUEST, as in Kafka's `TransactionCoordinator`.
//! - Any other transactional ID: the transaction coordinator's answer ([`super::txn`]): the ID's
//!   producer ID with its epoch bumped, fencing the previous producer of the ID.

use skiff_auth::acl::{AclOperation, ResourceType};
use skiff_protocol::generated::InitProducerIdRequest;
use skiff_protocol::generated::init_producer_id_response::InitProducerIdResponse;
use skiff_protocol::{Response, error_codes};

use super::{Reply, RequestContext};

const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;

/// Kafka's authorization of an InitProducerId: the refusal's code. The cluster check logs no
/// denial, as in Kafka: WRITE on a topic may still allow the producer.
fn refusal(ctx: &RequestContext, transactional_id: Option<&str>) -> Option<i16> {
    match transactional_id {
        Some(id) => (!ctx.authorized(AclOperation::Write, ResourceType::TransactionalId, id))
            .then_some(error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        None => (!ctx.allows_on_cluster(AclOperation::IdempotentWrite)
            && !ctx.authorized_on_any(AclOperation::Write, ResourceType::Topic))
        .then_some(error_codes::CLUSTER_AUTHORIZATION_FAILED),
    }
}

pub fn handle(ctx: &RequestContext, request: InitProducerIdRequest) -> Reply {
    let failed = |code: i16| InitProducerIdResponse {
        error_code: code,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        ..Default::default()
    };
    if let Some(code) = refusal(ctx, request.transactional_id.as_deref()) {
        return Response::InitProducerId(failed(code)).into();
    }
    // Fields a version lacks decode as their defaults (-1/-1).
    let existing = match (request.producer_id, request.producer_epoch) {
        (NO_PRODUCER_ID, NO_PRODUCER_EPOCH) => None,
        (NO_PRODUCER_ID, _) | (_, NO_PRODUCER_EPOCH) => {
            return Response::InitProducerId(failed(error_codes::INVALID_REQUEST)).into();
        }
        (id, epoch) if id < 0 || epoch < 0 => {
            return Response::InitProducerId(failed(error_codes::INVALID_REQUEST)).into();
        }
        (id, epoch) => Some((id, epoch)),
    };
    match request.transactional_id.as_deref() {
        None => {}
        Some("") => return Response::InitProducerId(failed(error_codes::INVALID_REQUEST)).into(),
        Some(id) => {
            return super::txn::init_producer_id(
                ctx,
                id.to_string(),
                request.transaction_timeout_ms,
                existing,
            );
        }
    }
    let bumped = existing.and_then(|(id, epoch)| {
        let next = epoch.checked_add(1)?;
        (next < i16::MAX).then_some((id, next))
    });
    let (producer_id, producer_epoch) = match bumped {
        Some(pair) => pair,
        None => {
            let allocated = ctx.broker.allocate_producer_id();
            match allocated {
                Ok(id) => (id, 0),
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "producer ID allocation failed");
                    return Response::InitProducerId(failed(error_codes::UNKNOWN_SERVER_ERROR))
                        .into();
                }
            }
        }
    };
    let previous = ctx.broker.clients.note_producer(
        ctx.instance_id,
        producer_id,
        producer_epoch,
        None,
        crate::clock::now_ms(),
    );
    super::journaling::producer_granted(
        &ctx.broker,
        ctx.journal_instance(),
        producer_id,
        producer_epoch,
        None,
        previous,
    );
    Response::InitProducerId(InitProducerIdResponse {
        error_code: error_codes::NONE,
        producer_id,
        producer_epoch,
        ..Default::default()
    })
    .into()
}
