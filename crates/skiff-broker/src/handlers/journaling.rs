//! What the handlers tell the client-instance journal ([`crate::journal`]): which instance a
//! request speaks for, and the group, producer, transaction and telemetry events its answer
//! means. The rules that turn an answer into events are the journal's (pure); this module
//! only gathers their inputs from requests and responses.

use std::collections::BTreeMap;

use skiff_protocol::generated::{ConsumerGroupHeartbeatResponse, ShareGroupHeartbeatResponse};
use skiff_protocol::{ErrorCode, Uuid};

use super::RequestContext;
use crate::journal::{EventKind, Heartbeat, clip};

/// The instance a group member's events go under: the connection's KIP-1313 ID, else the
/// UUID the member ID is (in any encoding), else the connection's telemetry ID.
pub fn member_instance(ctx: &RequestContext, member_id: &str) -> Option<Uuid> {
    ctx.instance_id
        .or_else(|| crate::uuid_text::decode(member_id).map(|(id, _)| id))
        .or(ctx.telemetry_instance)
}

/// Topic ID -> partitions as topic name -> partitions (an unknown ID as itself).
pub fn by_name<'a>(
    ctx: &RequestContext,
    topics: impl IntoIterator<Item = (Uuid, &'a [i32])>,
) -> BTreeMap<String, Vec<i32>> {
    topics
        .into_iter()
        .map(|(id, partitions)| {
            let name = ctx
                .broker
                .topic_by_id(id)
                .map_or_else(|| id.to_string(), |t| t.info.name.clone());
            let mut partitions = partitions.to_vec();
            partitions.sort_unstable();
            (name, partitions)
        })
        .collect()
}

/// What the journal reads of a KIP-848 or KIP-932 heartbeat's answer.
pub trait HeartbeatAnswer {
    fn error_code(&self) -> i16;
    fn member_id(&self) -> Option<&str>;
    fn member_epoch(&self) -> i32;
    /// The assignment, when the answer carries one: topic ID and partitions.
    fn assignment(&self) -> Option<Vec<(Uuid, &[i32])>>;
}

/// Both heartbeat responses name these fields alike.
macro_rules! heartbeat_answer {
    ($($response:ty),*) => {$(
        impl HeartbeatAnswer for $response {
            fn error_code(&self) -> i16 {
                self.error_code
            }
            fn member_id(&self) -> Option<&str> {
                self.member_id.as_deref()
            }
            fn member_epoch(&self) -> i32 {
                self.member_epoch
            }
            fn assignment(&self) -> Option<Vec<(Uuid, &[i32])>> {
                self.assignment.as_ref().map(|a| {
                    a.topic_partitions
                        .iter()
                        .map(|t| (t.topic_id, t.partitions.as_slice()))
                        .collect()
                })
            }
        }
    )*};
}

heartbeat_answer!(ConsumerGroupHeartbeatResponse, ShareGroupHeartbeatResponse);

/// A KIP-848 or KIP-932 heartbeat and its answer (`Err`: the error code of a refusal that
/// produced no response body).
pub fn heartbeat(
    ctx: &RequestContext,
    group: &str,
    protocol: &str,
    request_member_id: &str,
    request_epoch: i32,
    answer: Result<&impl HeartbeatAnswer, i16>,
) {
    let (error_code, member_id, member_epoch, assignment) = match answer {
        Ok(r) => (
            r.error_code(),
            r.member_id(),
            r.member_epoch(),
            r.assignment().map(|topics| by_name(ctx, topics)),
        ),
        Err(code) => (code, None, -1, None),
    };
    let member_id = member_id
        .filter(|m| !m.is_empty())
        .unwrap_or(request_member_id);
    let Some(instance) = member_instance(ctx, member_id) else {
        return;
    };
    let error = (error_code != 0).then(|| ErrorCode::from_code(error_code).name());
    ctx.broker.journal.with(|journal, now| {
        journal.heartbeat(
            instance,
            now,
            Heartbeat {
                group,
                protocol,
                member_id,
                request_epoch,
                error,
                member_epoch,
                assignment,
            },
        );
    });
}

/// A classic group's JoinGroup answered: a join or, for a member the journal has, a rejoin
/// (with the generation as its epoch). MEMBER_ID_REQUIRED (the first step of a join) and
/// other errors add nothing.
pub fn classic_joined(
    broker: &crate::state::Broker,
    instance: Option<Uuid>,
    group: &str,
    member_id: &str,
    generation: i32,
) {
    if let Some(instance) = instance {
        broker.journal.with(|journal, now| {
            journal.joined(instance, now, group, "classic", member_id, generation);
        });
    }
}

/// A classic request naming a member answered an error that fences it (UNKNOWN_MEMBER_ID,
/// ILLEGAL_GENERATION, FENCED_INSTANCE_ID).
pub fn classic_answered(
    ctx: &RequestContext,
    group: &str,
    member_id: &str,
    generation: i32,
    error_code: i16,
) {
    let error = ErrorCode::from_code(error_code);
    let fences = [
        ErrorCode::UNKNOWN_MEMBER_ID,
        ErrorCode::ILLEGAL_GENERATION,
        ErrorCode::FENCED_INSTANCE_ID,
    ];
    if member_id.is_empty() || !fences.contains(&error) {
        return;
    }
    if let Some(instance) = ctx.journal_instance() {
        ctx.broker.journal.with(|journal, now| {
            journal.fenced(
                instance,
                now,
                group,
                "classic",
                member_id,
                generation,
                error.name(),
            );
        });
    }
}

/// Members that left a classic group.
pub fn classic_left(ctx: &RequestContext, group: &str, members: &[&str]) {
    let Some(instance) = ctx.journal_instance() else {
        return;
    };
    ctx.broker.journal.with(|journal, now| {
        for member in members.iter().filter(|m| !m.is_empty()) {
            journal.left(instance, now, group, "classic", member, -1);
        }
    });
}

/// A producer ID handed out; the instance that held it before (another one) was fenced.
pub fn producer_granted(
    broker: &crate::state::Broker,
    instance: Option<Uuid>,
    producer_id: i64,
    producer_epoch: i16,
    transactional_id: Option<&str>,
    previous: Option<(Uuid, crate::clients::ProducerNote)>,
) {
    broker.journal.with(|journal, now| {
        if let Some((before, note)) = previous
            && Some(before) != instance
        {
            journal.record(
                before,
                now,
                EventKind::ProducerFenced {
                    producer_id: note.producer_id,
                    producer_epoch: note.producer_epoch,
                    transactional_id: note.transactional_id.as_deref().map(clip),
                    reason: match &instance {
                        Some(by) => format!("another client instance ({by}) took its producer ID"),
                        None => "a client without an instance ID took its producer ID".into(),
                    },
                },
            );
        }
        if let Some(instance) = instance {
            journal.record(
                instance,
                now,
                EventKind::ProducerId {
                    producer_id,
                    producer_epoch,
                    transactional_id: transactional_id.map(clip),
                },
            );
        }
    });
}

/// An EndTxn answered.
pub fn transaction_ended(
    broker: &crate::state::Broker,
    instance: Option<Uuid>,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    committed: bool,
    error: ErrorCode,
) {
    let Some(instance) = instance else {
        return;
    };
    let fenced = [
        ErrorCode::PRODUCER_FENCED,
        ErrorCode::INVALID_PRODUCER_EPOCH,
    ]
    .contains(&error);
    broker.journal.with(|journal, now| {
        journal.record(
            instance,
            now,
            EventKind::Transaction {
                transactional_id: clip(transactional_id),
                producer_id,
                producer_epoch,
                outcome: if committed { "commit" } else { "abort" }.to_string(),
                error: (!error.is_none()).then(|| error.name().to_string()),
            },
        );
        if fenced {
            journal.record(
                instance,
                now,
                EventKind::ProducerFenced {
                    producer_id,
                    producer_epoch,
                    transactional_id: Some(clip(transactional_id)),
                    reason: error.name().to_string(),
                },
            );
        }
    });
}
