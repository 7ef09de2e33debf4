//! The journal itself, as plain data: each client instance's events in order, bounded per
//! instance and in total (the oldest go first), and the pure rules that turn what the broker
//! saw (a heartbeat's answer, a throttled response, a subscription handed out) into events.
//! Time is an argument (`now_ms`); nothing here does I/O.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use skiff_protocol::Uuid;

/// Text from a peer (client IDs, group and member IDs, software names) is cut to this many
/// bytes in the journal, so an event's size is bounded whatever the peer sends.
pub const TEXT_MAX: usize = 256;

/// At most one `throttled` event per instance and API in this long.
pub const THROTTLE_EVERY_MS: i64 = 1000;

/// `text` cut to [`TEXT_MAX`] bytes at a character boundary (`…` marks a cut).
pub fn clip(text: &str) -> String {
    if text.len() <= TEXT_MAX {
        return text.to_string();
    }
    let mut end = TEXT_MAX - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = text.get(..end).unwrap_or_default().to_string();
    cut.push('…');
    cut
}

/// Why a connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisconnectReason {
    /// The client closed the connection.
    ClientClosed,
    /// Idle for `connections.max.idle.ms` with no request in progress.
    Idle,
    /// Reading or writing the socket failed.
    Error,
    /// The client broke the protocol (a bad frame, an unknown API key, an undecodable body).
    ProtocolError,
    /// SASL authentication failed, or the session expired without re-authentication.
    AuthenticationFailed,
    /// The broker is shutting down.
    BrokerShutdown,
}

/// How a connection came to be filed under an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentifiedBy {
    /// Its KIP-1313 request header ID.
    Kip1313,
    /// The KIP-714 telemetry ID it named (a client that sends no KIP-1313 header).
    Telemetry,
}

/// What happened. Serialized with a `type` tag (snake case), the fields beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    Connected {
        connection: u64,
        peer: String,
        listener: String,
        principal: Option<String>,
        identified_by: IdentifiedBy,
    },
    Disconnected {
        connection: u64,
        reason: DisconnectReason,
        /// The broker's words for it ("peer closed", "SASL authentication failed", ...).
        detail: String,
    },
    /// ApiVersions v3+ named the client software.
    Software {
        connection: u64,
        name: String,
        version: String,
    },
    /// A request broke the connection's KIP-1313 identity (answered INVALID_REQUEST).
    Kip1313Rejected {
        connection: u64,
        api: String,
        reason: String,
        expected: Option<String>,
        received: Option<String>,
    },
    /// A member joined a group (`member_epoch`: the KIP-848/KIP-932 epoch, or a classic
    /// group's generation).
    GroupJoin {
        group: String,
        protocol: String,
        member_id: String,
        member_epoch: i32,
    },
    /// A member the group still had joined again (epoch 0 after fencing, a classic rejoin).
    GroupRejoin {
        group: String,
        protocol: String,
        member_id: String,
        member_epoch: i32,
    },
    /// A member left (`member_epoch` -1; -2: a static member leaving for now).
    GroupLeave {
        group: String,
        protocol: String,
        member_id: String,
        member_epoch: i32,
    },
    /// The coordinator fenced the member at `member_epoch` (`reason`: the error it was
    /// answered, or `expired` when its session or rebalance timeout removed it).
    GroupFenced {
        group: String,
        protocol: String,
        member_id: String,
        member_epoch: i32,
        reason: String,
    },
    /// The member's assignment changed: topic name -> partitions.
    Assignment {
        group: String,
        protocol: String,
        member_id: String,
        member_epoch: i32,
        partitions: BTreeMap<String, Vec<i32>>,
    },
    /// InitProducerId handed the instance a producer ID.
    ProducerId {
        producer_id: i64,
        producer_epoch: i16,
        transactional_id: Option<String>,
    },
    /// The instance's producer ID was fenced (`reason`: another instance took its
    /// transactional ID, or the error a request was answered).
    ProducerFenced {
        producer_id: i64,
        producer_epoch: i16,
        transactional_id: Option<String>,
        reason: String,
    },
    /// EndTxn: `outcome` `commit` or `abort`, `error` the error it was answered, if any.
    Transaction {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        outcome: String,
        error: Option<String>,
    },
    /// GetTelemetrySubscriptions gave the instance another subscription.
    TelemetrySubscription {
        subscription_id: i32,
        push_interval_ms: i32,
        metrics: Vec<String>,
    },
    /// A terminating PushTelemetry: the client is closing.
    TelemetryTerminated { subscription_id: i32 },
    /// A client quota throttled a response (at most one per API per second is journaled).
    Throttled {
        connection: u64,
        api: String,
        throttle_ms: i64,
    },
}

impl EventKind {
    /// The lane a timeline shows the event in.
    pub fn category(&self) -> &'static str {
        match self {
            EventKind::Connected { .. }
            | EventKind::Disconnected { .. }
            | EventKind::Software { .. } => "connection",
            EventKind::Kip1313Rejected { .. } => "identity",
            EventKind::GroupJoin { .. }
            | EventKind::GroupRejoin { .. }
            | EventKind::GroupLeave { .. }
            | EventKind::GroupFenced { .. }
            | EventKind::Assignment { .. } => "group",
            EventKind::ProducerId { .. } | EventKind::ProducerFenced { .. } => "producer",
            EventKind::Transaction { .. } => "transaction",
            EventKind::TelemetrySubscription { .. } | EventKind::TelemetryTerminated { .. } => {
                "telemetry"
            }
            EventKind::Throttled { .. } => "quota",
        }
    }

    /// One line for people (the CLI's table, a timeline's label).
    pub fn summary(&self) -> String {
        match self {
            EventKind::Connected {
                connection,
                peer,
                listener,
                principal,
                identified_by,
            } => {
                let by = match identified_by {
                    IdentifiedBy::Kip1313 => "",
                    IdentifiedBy::Telemetry => " (identified by its telemetry ID)",
                };
                match principal {
                    Some(p) => {
                        format!("connection {connection} from {peer} on {listener} as {p}{by}")
                    }
                    None => format!("connection {connection} from {peer} on {listener}{by}"),
                }
            }
            EventKind::Disconnected {
                connection, detail, ..
            } => format!("connection {connection} closed: {detail}"),
            EventKind::Software { name, version, .. } => format!("software {name} {version}"),
            EventKind::Kip1313Rejected { api, reason, .. } => {
                format!("{api} rejected (KIP-1313 {reason})")
            }
            EventKind::GroupJoin {
                group,
                protocol,
                member_epoch,
                ..
            } => format!("joined {protocol} group {group} at epoch {member_epoch}"),
            EventKind::GroupRejoin {
                group,
                protocol,
                member_epoch,
                ..
            } => format!("rejoined {protocol} group {group} at epoch {member_epoch}"),
            EventKind::GroupLeave {
                group, protocol, ..
            } => {
                format!("left {protocol} group {group}")
            }
            EventKind::GroupFenced {
                group,
                member_epoch,
                reason,
                ..
            } => format!("fenced from group {group} at epoch {member_epoch}: {reason}"),
            EventKind::Assignment {
                group,
                member_epoch,
                partitions,
                ..
            } => {
                let parts: Vec<String> = partitions
                    .iter()
                    .map(|(topic, p)| format!("{topic}{p:?}"))
                    .collect();
                format!(
                    "assignment in {group} at epoch {member_epoch}: {}",
                    if parts.is_empty() {
                        "nothing".to_string()
                    } else {
                        parts.join(" ")
                    }
                )
            }
            EventKind::ProducerId {
                producer_id,
                producer_epoch,
                transactional_id,
            } => match transactional_id {
                Some(t) => format!("producer ID {producer_id} epoch {producer_epoch} for {t}"),
                None => format!("producer ID {producer_id} epoch {producer_epoch}"),
            },
            EventKind::ProducerFenced {
                producer_id,
                producer_epoch,
                reason,
                ..
            } => format!("producer ID {producer_id} epoch {producer_epoch} fenced: {reason}"),
            EventKind::Transaction {
                transactional_id,
                outcome,
                error,
                ..
            } => match error {
                Some(e) => format!("{outcome} of {transactional_id} failed: {e}"),
                None => format!("{outcome} of {transactional_id}"),
            },
            EventKind::TelemetrySubscription {
                subscription_id,
                push_interval_ms,
                metrics,
            } => format!(
                "telemetry subscription {subscription_id}: {} metric prefixes every {push_interval_ms} ms",
                metrics.len()
            ),
            EventKind::TelemetryTerminated { .. } => "terminating telemetry push".to_string(),
            EventKind::Throttled {
                api, throttle_ms, ..
            } => format!("{api} throttled {throttle_ms} ms"),
        }
    }

    /// The (group, member ID) a group event is about.
    fn membership(&self) -> Option<(&str, &str)> {
        match self {
            EventKind::GroupJoin {
                group, member_id, ..
            }
            | EventKind::GroupRejoin {
                group, member_id, ..
            }
            | EventKind::GroupLeave {
                group, member_id, ..
            }
            | EventKind::GroupFenced {
                group, member_id, ..
            }
            | EventKind::Assignment {
                group, member_id, ..
            } => Some((group, member_id)),
            _ => None,
        }
    }
}

/// One journal entry: its place in the broker's journal (`seq`, increasing), when, and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub at_ms: i64,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// How many events are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// `client.journal.max.events.per.instance`
    pub per_instance: usize,
    /// `client.journal.max.events`
    pub total: usize,
}

/// What a KIP-848 or KIP-932 heartbeat asked and was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat<'a> {
    pub group: &'a str,
    /// `consumer` or `share`.
    pub protocol: &'a str,
    /// The member ID answered (or asked, when the answer has none).
    pub member_id: &'a str,
    pub request_epoch: i32,
    /// The error answered (its name), `None` for success.
    pub error: Option<&'a str>,
    pub member_epoch: i32,
    /// The assignment answered (present when it changed), by topic name.
    pub assignment: Option<BTreeMap<String, Vec<i32>>>,
}

/// Every instance's events, bounded.
#[derive(Debug)]
pub struct Journal {
    bounds: Bounds,
    instances: HashMap<Uuid, VecDeque<Event>>,
    /// Every kept event's seq -> its instance: the oldest overall is the first.
    order: BTreeMap<u64, Uuid>,
    next_seq: u64,
    /// Events dropped to stay within the bounds, since the broker started.
    dropped: u64,
    /// Events recorded since [`Journal::take_recorded`] last took them (not restored ones).
    recorded: Vec<(Uuid, u64)>,
}

impl Journal {
    pub fn new(bounds: Bounds) -> Journal {
        Journal {
            bounds: Bounds {
                per_instance: bounds.per_instance.max(1),
                total: bounds.total.max(1),
            },
            instances: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 1,
            dropped: 0,
            recorded: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The seq of the newest event ever recorded (0: none).
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Records an event for `instance` now; returns it as kept.
    pub fn record(&mut self, instance: Uuid, now_ms: i64, kind: EventKind) -> Option<&Event> {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.recorded.push((instance, seq));
        self.insert(
            instance,
            Event {
                seq,
                at_ms: now_ms,
                kind,
            },
        )
    }

    /// Puts back an event read from the file (its seq kept; an event older than one the
    /// instance has, or a seq already used, is ignored). The bounds apply.
    pub fn restore(&mut self, instance: Uuid, event: Event) {
        if self.order.contains_key(&event.seq)
            || self
                .instances
                .get(&instance)
                .and_then(VecDeque::back)
                .is_some_and(|last| last.seq >= event.seq)
        {
            return;
        }
        self.next_seq = self.next_seq.max(event.seq.saturating_add(1));
        self.insert(instance, event);
    }

    fn insert(&mut self, instance: Uuid, event: Event) -> Option<&Event> {
        let seq = event.seq;
        let events = self.instances.entry(instance).or_default();
        if events.len() >= self.bounds.per_instance
            && let Some(old) = events.pop_front()
        {
            self.order.remove(&old.seq);
            self.dropped += 1;
        }
        events.push_back(event);
        self.order.insert(seq, instance);
        while self.order.len() > self.bounds.total {
            let Some((old_seq, owner)) = self.order.pop_first() else {
                break;
            };
            self.dropped += 1;
            if let Some(events) = self.instances.get_mut(&owner) {
                if events.front().is_some_and(|e| e.seq == old_seq) {
                    events.pop_front();
                }
                if events.is_empty() {
                    self.instances.remove(&owner);
                }
            }
        }
        self.instances.get(&instance).and_then(VecDeque::back)
    }

    /// `instance`'s events in order: those at or after `since_ms`, and after seq `after`.
    pub fn events(&self, instance: Uuid, since_ms: Option<i64>, after: Option<u64>) -> Vec<Event> {
        self.instances
            .get(&instance)
            .into_iter()
            .flatten()
            .filter(|e| since_ms.is_none_or(|since| e.at_ms >= since))
            .filter(|e| after.is_none_or(|after| e.seq > after))
            .cloned()
            .collect()
    }

    /// The events recorded since the last call that are still kept, oldest first.
    pub fn take_recorded(&mut self) -> Vec<(Uuid, Event)> {
        let recorded = std::mem::take(&mut self.recorded);
        recorded
            .into_iter()
            .filter_map(|(instance, seq)| {
                let events = self.instances.get(&instance)?;
                let at = events.binary_search_by_key(&seq, |e| e.seq).ok()?;
                Some((instance, events.get(at)?.clone()))
            })
            .collect()
    }

    /// Every event with its instance, oldest first (what the file is rewritten from).
    pub fn all(&self) -> Vec<(Uuid, &Event)> {
        self.order
            .iter()
            .filter_map(|(seq, instance)| {
                let events = self.instances.get(instance)?;
                let at = events.binary_search_by_key(seq, |e| e.seq).ok()?;
                Some((*instance, events.get(at)?))
            })
            .collect()
    }

    /// The newest event of `instance` about (group, member ID).
    fn last_of_member(&self, instance: Uuid, group: &str, member_id: &str) -> Option<&EventKind> {
        self.instances
            .get(&instance)?
            .iter()
            .rev()
            .map(|e| &e.kind)
            .find(|k| k.membership() == Some((group, member_id)))
    }

    /// The newest assignment of `instance` in (group, member ID).
    fn last_assignment(
        &self,
        instance: Uuid,
        group: &str,
        member_id: &str,
    ) -> Option<&BTreeMap<String, Vec<i32>>> {
        self.instances
            .get(&instance)?
            .iter()
            .rev()
            .find_map(|e| match &e.kind {
                EventKind::Assignment {
                    group: g,
                    member_id: m,
                    partitions,
                    ..
                } if g == group && m == member_id => Some(partitions),
                _ => None,
            })
    }

    /// A member joined (a KIP-848/KIP-932 epoch 0 heartbeat, a classic JoinGroup answered):
    /// a rejoin when the journal has the member and it did not leave since.
    pub fn joined(
        &mut self,
        instance: Uuid,
        now_ms: i64,
        group: &str,
        protocol: &str,
        member_id: &str,
        member_epoch: i32,
    ) {
        let rejoin = self
            .last_of_member(instance, group, member_id)
            .is_some_and(|k| !matches!(k, EventKind::GroupLeave { .. }));
        let (group, protocol, member_id) = (clip(group), clip(protocol), clip(member_id));
        let kind = if rejoin {
            EventKind::GroupRejoin {
                group,
                protocol,
                member_id,
                member_epoch,
            }
        } else {
            EventKind::GroupJoin {
                group,
                protocol,
                member_id,
                member_epoch,
            }
        };
        self.record(instance, now_ms, kind);
    }

    /// A member was fenced at `member_epoch`; a repeat of the fence just recorded (a client
    /// retrying with the same stale epoch) is not recorded again.
    #[allow(clippy::too_many_arguments)]
    pub fn fenced(
        &mut self,
        instance: Uuid,
        now_ms: i64,
        group: &str,
        protocol: &str,
        member_id: &str,
        member_epoch: i32,
        reason: &str,
    ) {
        let repeat = matches!(
            self.last_of_member(instance, group, member_id),
            Some(EventKind::GroupFenced { member_epoch: e, .. }) if *e == member_epoch
        );
        if repeat {
            return;
        }
        self.record(
            instance,
            now_ms,
            EventKind::GroupFenced {
                group: clip(group),
                protocol: clip(protocol),
                member_id: clip(member_id),
                member_epoch,
                reason: clip(reason),
            },
        );
    }

    /// The coordinator removed a member whose session or rebalance timeout passed: a fence at
    /// the last epoch the journal saw it at (-1 when it saw none).
    pub fn expired(
        &mut self,
        instance: Uuid,
        now_ms: i64,
        group: &str,
        protocol: &str,
        member_id: &str,
    ) {
        let epoch = self
            .instances
            .get(&instance)
            .into_iter()
            .flatten()
            .rev()
            .find_map(|e| match &e.kind {
                EventKind::GroupJoin {
                    group: g,
                    member_id: m,
                    member_epoch,
                    ..
                }
                | EventKind::GroupRejoin {
                    group: g,
                    member_id: m,
                    member_epoch,
                    ..
                }
                | EventKind::Assignment {
                    group: g,
                    member_id: m,
                    member_epoch,
                    ..
                } if g == group && m == member_id => Some(*member_epoch),
                _ => None,
            })
            .unwrap_or(-1);
        self.fenced(
            instance, now_ms, group, protocol, member_id, epoch, "expired",
        );
    }

    /// A member left (or a static member left for now).
    pub fn left(
        &mut self,
        instance: Uuid,
        now_ms: i64,
        group: &str,
        protocol: &str,
        member_id: &str,
        member_epoch: i32,
    ) {
        self.record(
            instance,
            now_ms,
            EventKind::GroupLeave {
                group: clip(group),
                protocol: clip(protocol),
                member_id: clip(member_id),
                member_epoch,
            },
        );
    }

    /// A member's assignment, recorded when it differs from the last one recorded.
    #[allow(clippy::too_many_arguments)]
    pub fn assigned(
        &mut self,
        instance: Uuid,
        now_ms: i64,
        group: &str,
        protocol: &str,
        member_id: &str,
        member_epoch: i32,
        partitions: BTreeMap<String, Vec<i32>>,
    ) {
        let partitions: BTreeMap<String, Vec<i32>> = partitions
            .into_iter()
            .map(|(topic, parts)| (clip(&topic), parts))
            .collect();
        let (group_c, member_c) = (clip(group), clip(member_id));
        if self.last_assignment(instance, &group_c, &member_c) == Some(&partitions) {
            return;
        }
        self.record(
            instance,
            now_ms,
            EventKind::Assignment {
                group: group_c,
                protocol: clip(protocol),
                member_id: member_c,
                member_epoch,
                partitions,
            },
        );
    }

    /// The events a KIP-848 or KIP-932 heartbeat's answer means: a join or rejoin (epoch 0), a
    /// leave (epoch -1 or -2), a fence (FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID to a member
    /// with an epoch), an assignment that changed.
    pub fn heartbeat(&mut self, instance: Uuid, now_ms: i64, seen: Heartbeat<'_>) {
        let Heartbeat {
            group,
            protocol,
            member_id,
            request_epoch,
            error,
            member_epoch,
            assignment,
        } = seen;
        if let Some(error) = error {
            if request_epoch > 0 && matches!(error, "FENCED_MEMBER_EPOCH" | "UNKNOWN_MEMBER_ID") {
                self.fenced(
                    instance,
                    now_ms,
                    group,
                    protocol,
                    member_id,
                    request_epoch,
                    error,
                );
            }
            return;
        }
        if request_epoch < 0 {
            self.left(instance, now_ms, group, protocol, member_id, request_epoch);
            return;
        }
        if request_epoch == 0 {
            self.joined(instance, now_ms, group, protocol, member_id, member_epoch);
        }
        if let Some(assignment) = assignment {
            self.assigned(
                instance,
                now_ms,
                group,
                protocol,
                member_id,
                member_epoch,
                assignment,
            );
        }
    }

    /// A throttled response: recorded unless the same API was journaled as throttled for
    /// the instance less than [`THROTTLE_EVERY_MS`] ago.
    pub fn throttled(
        &mut self,
        instance: Uuid,
        now_ms: i64,
        connection: u64,
        api: &str,
        throttle_ms: i64,
    ) {
        let recent = self.instances.get(&instance).is_some_and(|events| {
            events
                .iter()
                .rev()
                .take_while(|e| now_ms - e.at_ms < THROTTLE_EVERY_MS)
                .any(|e| matches!(&e.kind, EventKind::Throttled { api: a, .. } if a == api))
        });
        if recent {
            return;
        }
        self.record(
            instance,
            now_ms,
            EventKind::Throttled {
                connection,
                api: clip(api),
                throttle_ms,
            },
        );
    }

    /// The subscription GetTelemetrySubscriptions answered: recorded when it is not the one
    /// last recorded for the instance.
    pub fn subscription(
        &mut self,
        instance: Uuid,
        now_ms: i64,
        subscription_id: i32,
        push_interval_ms: i32,
        metrics: Vec<String>,
    ) {
        let last = self.instances.get(&instance).and_then(|events| {
            events.iter().rev().find_map(|e| match e.kind {
                EventKind::TelemetrySubscription {
                    subscription_id, ..
                } => Some(subscription_id),
                _ => None,
            })
        });
        if last == Some(subscription_id) {
            return;
        }
        let metrics = metrics.iter().take(64).map(|m| clip(m)).collect();
        self.record(
            instance,
            now_ms,
            EventKind::TelemetrySubscription {
                subscription_id,
                push_interval_ms,
                metrics,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Uuid = Uuid::from_u128(0xa);
    const B: Uuid = Uuid::from_u128(0xb);

    fn journal(per_instance: usize, total: usize) -> Journal {
        Journal::new(Bounds {
            per_instance,
            total,
        })
    }

    fn software(n: u64) -> EventKind {
        EventKind::Software {
            connection: n,
            name: "app".into(),
            version: n.to_string(),
        }
    }

    fn types(j: &Journal, id: Uuid) -> Vec<String> {
        j.events(id, None, None)
            .iter()
            .map(|e| {
                serde_json::to_value(&e.kind).expect("serializes")["type"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    fn beat<'a>(
        request_epoch: i32,
        error: Option<&'a str>,
        member_epoch: i32,
        assignment: Option<BTreeMap<String, Vec<i32>>>,
    ) -> Heartbeat<'a> {
        Heartbeat {
            group: "g",
            protocol: "consumer",
            member_id: "m",
            request_epoch,
            error,
            member_epoch,
            assignment,
        }
    }

    fn parts(list: &[i32]) -> Option<BTreeMap<String, Vec<i32>>> {
        Some(BTreeMap::from([("t".to_string(), list.to_vec())]))
    }

    #[test]
    fn events_come_back_in_order_with_their_times() {
        let mut j = journal(10, 100);
        j.record(A, 5, software(1));
        j.record(B, 6, software(2));
        j.record(A, 7, software(3));
        let a = j.events(A, None, None);
        assert_eq!(
            a.iter().map(|e| (e.seq, e.at_ms)).collect::<Vec<_>>(),
            vec![(1, 5), (3, 7)]
        );
        assert_eq!(j.events(A, Some(6), None).len(), 1, "since is inclusive");
        assert_eq!(j.events(A, Some(7), None)[0].seq, 3);
        assert_eq!(j.events(A, None, Some(1))[0].seq, 3, "after is exclusive");
        assert!(j.events(Uuid::from_u128(9), None, None).is_empty());
        assert_eq!(j.last_seq(), 3);
        let all: Vec<(Uuid, u64)> = j.all().iter().map(|(i, e)| (*i, e.seq)).collect();
        assert_eq!(all, vec![(A, 1), (B, 2), (A, 3)]);
    }

    #[test]
    fn the_bound_per_instance_drops_its_oldest() {
        let mut j = journal(3, 100);
        for n in 0..10 {
            j.record(A, n, software(n as u64));
        }
        j.record(B, 10, software(99));
        let seqs: Vec<u64> = j.events(A, None, None).iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![8, 9, 10]);
        assert_eq!(j.len(), 4);
        assert_eq!(j.dropped(), 7);
        assert_eq!(j.all().len(), 4, "the order index holds only kept events");
    }

    #[test]
    fn the_total_bound_drops_the_oldest_of_anyone() {
        let mut j = journal(100, 5);
        for n in 0..1000u64 {
            let id = Uuid::from_u128(u128::from(n) + 1);
            j.record(id, n as i64, software(n));
            assert!(j.len() <= 5);
        }
        assert_eq!(j.len(), 5);
        assert_eq!(
            j.instances.len(),
            5,
            "instances with no events left are gone"
        );
        let kept: Vec<u64> = j.all().iter().map(|(_, e)| e.seq).collect();
        assert_eq!(kept, vec![996, 997, 998, 999, 1000]);
        assert_eq!(j.dropped(), 995);
    }

    #[test]
    fn both_bounds_together_keep_the_index_exact() {
        let mut j = journal(2, 7);
        for n in 0..500u64 {
            let id = Uuid::from_u128(u128::from(n % 5) + 1);
            j.record(id, n as i64, software(n));
            assert!(j.len() <= 7);
            let sum: usize = j.instances.values().map(VecDeque::len).sum();
            assert_eq!(sum, j.len());
            assert!(j.instances.values().all(|e| e.len() <= 2 && !e.is_empty()));
        }
    }

    #[test]
    fn restore_keeps_seqs_and_applies_the_bounds() {
        let mut j = journal(2, 100);
        for seq in [3u64, 5, 9, 4] {
            j.restore(
                A,
                Event {
                    seq,
                    at_ms: seq as i64,
                    kind: software(seq),
                },
            );
        }
        // 4 is older than what A has: ignored; 3 was dropped by the bound of 2.
        let seqs: Vec<u64> = j.events(A, None, None).iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![5, 9]);
        j.record(A, 10, software(0));
        assert_eq!(j.last_seq(), 10, "new events follow the restored ones");
    }

    #[test]
    fn a_scripted_life_of_one_member() {
        let mut j = journal(100, 100);
        j.heartbeat(A, 1, beat(0, None, 1, parts(&[0, 1])));
        j.heartbeat(A, 2, beat(1, None, 1, None));
        j.heartbeat(A, 3, beat(1, None, 2, parts(&[0, 1])));
        j.heartbeat(A, 4, beat(1, Some("FENCED_MEMBER_EPOCH"), -1, None));
        j.heartbeat(A, 5, beat(1, Some("FENCED_MEMBER_EPOCH"), -1, None));
        j.heartbeat(A, 6, beat(0, None, 3, parts(&[0])));
        j.heartbeat(A, 7, beat(3, Some("COORDINATOR_NOT_AVAILABLE"), -1, None));
        j.heartbeat(A, 8, beat(-1, None, -1, None));
        j.heartbeat(A, 9, beat(0, None, 4, None));
        assert_eq!(
            types(&j, A),
            vec![
                "group_join",
                "assignment",
                "group_fenced",
                "group_rejoin",
                "assignment",
                "group_leave",
                "group_join",
            ],
            "an unchanged assignment, a repeated fence and other errors add nothing"
        );
        let events = j.events(A, None, None);
        assert!(matches!(
            &events[2].kind,
            EventKind::GroupFenced { member_epoch: 1, reason, .. } if reason == "FENCED_MEMBER_EPOCH"
        ));
        assert!(matches!(
            &events[3].kind,
            EventKind::GroupRejoin {
                member_epoch: 3,
                ..
            }
        ));
    }

    #[test]
    fn an_expired_member_is_fenced_at_its_last_epoch() {
        let mut j = journal(100, 100);
        j.heartbeat(A, 1, beat(0, None, 4, parts(&[0])));
        j.heartbeat(A, 2, beat(4, None, 6, parts(&[1])));
        j.expired(A, 3, "g", "consumer", "m");
        j.expired(B, 3, "g", "consumer", "other");
        assert!(matches!(
            &j.events(A, None, None)[3].kind,
            EventKind::GroupFenced { member_epoch: 6, reason, .. } if reason == "expired"
        ));
        assert!(matches!(
            &j.events(B, None, None)[0].kind,
            EventKind::GroupFenced {
                member_epoch: -1,
                ..
            }
        ));
    }

    #[test]
    fn throttles_are_journaled_once_a_second_per_api() {
        let mut j = journal(100, 100);
        for t in 0..2500 {
            j.throttled(A, t, 1, "Produce", 100);
            j.throttled(A, t, 1, "Fetch", 100);
        }
        let times: Vec<i64> = j.events(A, None, None).iter().map(|e| e.at_ms).collect();
        assert_eq!(times, vec![0, 0, 1000, 1000, 2000, 2000]);
    }

    #[test]
    fn a_subscription_is_journaled_when_it_changes() {
        let mut j = journal(100, 100);
        j.subscription(A, 1, 7, 500, vec!["org.".into()]);
        j.subscription(A, 2, 7, 500, vec!["org.".into()]);
        j.subscription(A, 3, 8, 1000, Vec::new());
        j.subscription(A, 4, 8, 1000, Vec::new());
        j.subscription(A, 5, 7, 500, vec!["org.".into()]);
        assert_eq!(j.events(A, None, None).len(), 3);
    }

    #[test]
    fn long_text_is_cut() {
        let long = "é".repeat(1000);
        let cut = clip(&long);
        assert!(cut.len() <= TEXT_MAX && cut.ends_with('…'), "{}", cut.len());
        assert_eq!(clip("short"), "short");
        let mut j = journal(10, 10);
        j.joined(A, 1, &long, "consumer", &long, 1);
        let json = serde_json::to_string(&j.events(A, None, None)).expect("json");
        assert!(json.len() < 3 * TEXT_MAX, "{}", json.len());
    }

    #[test]
    fn events_serialize_flat_with_a_type_and_round_trip() {
        let event = Event {
            seq: 4,
            at_ms: 99,
            kind: EventKind::Disconnected {
                connection: 2,
                reason: DisconnectReason::ClientClosed,
                detail: "peer closed".into(),
            },
        };
        let json = serde_json::to_value(&event).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"seq": 4, "at_ms": 99, "type": "disconnected", "connection": 2,
                               "reason": "client_closed", "detail": "peer closed"})
        );
        assert_eq!(serde_json::from_value::<Event>(json).expect("back"), event);
        assert_eq!(event.kind.category(), "connection");
        assert_eq!(event.kind.summary(), "connection 2 closed: peer closed");
    }
}
