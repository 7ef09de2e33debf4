//! The client-instance view: what the broker knows about each client instance, under its
//! KIP-1313 ID — its connections, the requests they made, its KIP-1313 rejections, its group
//! memberships and the producer IDs it was given (the telemetry part is added by the admin
//! endpoint from `skiff-telemetry`).
//!
//! Each connection owns its record behind its own lock, so recording a request never contends
//! with other connections; the registry only holds references for the admin endpoint.
//!
//! The records serialize both ways: in cluster mode they travel to the other brokers in this
//! broker's published client summary (see `admin::views`).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use skiff_protocol::{ApiKey, Uuid};

use crate::identity::RejectReason;

/// How many KIP-1313 rejections are remembered per client instance.
const REJECTIONS_KEPT: usize = 50;
/// How many producer IDs handed to client instances are remembered (the oldest go first).
const PRODUCERS_KEPT: usize = 10_000;

/// A producer ID InitProducerId handed to a client instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerNote {
    pub producer_id: i64,
    /// The epoch handed out (a transactional producer's current one is the coordinator's).
    pub producer_epoch: i16,
    pub transactional_id: Option<String>,
    pub at_ms: i64,
}

/// One KIP-1313 rejection (names borrowed here, owned when read back from another broker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub at_ms: i64,
    pub connection: u64,
    pub api: Cow<'static, str>,
    pub reason: Cow<'static, str>,
    pub expected: Option<String>,
    pub received: Option<String>,
}

/// What one open connection has shown of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionRecord {
    pub id: u64,
    pub peer: String,
    /// The listener the connection came in on.
    pub listener: String,
    /// Who the connection acts as (`User:alice`); `None` until SASL authentication succeeds.
    pub principal: Option<String>,
    /// Set when the connection presented a client instance ID another principal owns
    /// (`client.instance.id.binding`): that owner.
    pub instance_id_owner: Option<String>,
    pub client_id: Option<String>,
    pub software_name: Option<String>,
    pub software_version: Option<String>,
    pub connected_since_ms: i64,
    /// The KIP-1313 ID this connection fixed, if any (text form).
    pub client_instance_id: Option<String>,
    /// The KIP-714 client instance ID its client got (GetTelemetrySubscriptions) or pushed
    /// with on this connection, if any (text form): without a KIP-1313 ID, the connection is
    /// filed under this instance.
    #[serde(default)]
    pub telemetry_instance_id: Option<String>,
    /// Requests by API name (names borrowed here, owned when read back from another broker).
    pub requests: BTreeMap<Cow<'static, str>, u64>,
}

impl ConnectionRecord {
    pub fn new(id: u64, peer: SocketAddr, listener: &str, now_ms: i64) -> Self {
        ConnectionRecord {
            id,
            peer: peer.to_string(),
            listener: listener.to_string(),
            principal: None,
            instance_id_owner: None,
            client_id: None,
            software_name: None,
            software_version: None,
            connected_since_ms: now_ms,
            client_instance_id: None,
            telemetry_instance_id: None,
            requests: BTreeMap::new(),
        }
    }

    /// The client instance the connection is filed under: its KIP-1313 ID, else the KIP-714
    /// telemetry ID its client goes by on it.
    pub fn instance(&self) -> Option<&str> {
        self.client_instance_id
            .as_deref()
            .or(self.telemetry_instance_id.as_deref())
    }

    pub fn count(&mut self, api: ApiKey, client_id: Option<&str>) {
        *self.requests.entry(Cow::Borrowed(api.name())).or_insert(0) += 1;
        if self.client_id.is_none()
            && let Some(id) = client_id
        {
            self.client_id = Some(id.to_string());
        }
    }
}

pub type SharedRecord = Arc<Mutex<ConnectionRecord>>;

/// Open connections and per-instance history.
#[derive(Default)]
pub struct ClientRegistry {
    connections: Mutex<HashMap<u64, SharedRecord>>,
    rejections: Mutex<HashMap<Option<Uuid>, VecDeque<Rejection>>>,
    /// (group, member ID) -> the client instance whose connection sent its heartbeats.
    members: Mutex<HashMap<(String, String), Uuid>>,
    /// Producer IDs handed to client instances, oldest first.
    producers: Mutex<VecDeque<(Uuid, ProducerNote)>>,
}

impl ClientRegistry {
    pub fn register(&self, record: ConnectionRecord) -> SharedRecord {
        let id = record.id;
        let shared = Arc::new(Mutex::new(record));
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::clone(&shared));
        shared
    }

    pub fn unregister(&self, id: u64) {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    pub fn record_rejection(
        &self,
        connection: u64,
        api: ApiKey,
        reason: RejectReason,
        expected: Option<Uuid>,
        received: Option<Uuid>,
        now_ms: i64,
    ) {
        let mut all = self
            .rejections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // File the rejection under the connection's ID (the expected one) when it has one.
        let list = all.entry(expected.or(received)).or_default();
        if list.len() == REJECTIONS_KEPT {
            list.pop_front();
        }
        list.push_back(Rejection {
            at_ms: now_ms,
            connection,
            api: Cow::Borrowed(api.name()),
            reason: Cow::Borrowed(reason.label()),
            expected: expected.map(|u| u.to_string()),
            received: received.map(|u| u.to_string()),
        });
    }

    /// Notes which client instance speaks for a group member.
    pub fn note_member(&self, group: &str, member_id: &str, instance: Uuid) {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((group.to_string(), member_id.to_string()), instance);
    }

    pub fn member_instance(&self, group: &str, member_id: &str) -> Option<Uuid> {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(group.to_string(), member_id.to_string()))
            .copied()
    }

    /// Notes, for a connection with a client instance ID, the producer ID InitProducerId just
    /// handed it; a later note of the same producer ID replaces the earlier one (an epoch bump,
    /// or another instance taking over a transactional ID), which is returned with its instance.
    pub fn note_producer(
        &self,
        instance: Option<Uuid>,
        producer_id: i64,
        producer_epoch: i16,
        transactional_id: Option<&str>,
        now_ms: i64,
    ) -> Option<(Uuid, ProducerNote)> {
        let instance = instance?;
        self.remember_producer(
            instance,
            ProducerNote {
                producer_id,
                producer_epoch,
                transactional_id: transactional_id.map(str::to_string),
                at_ms: now_ms,
            },
        )
    }

    fn remember_producer(
        &self,
        instance: Uuid,
        note: ProducerNote,
    ) -> Option<(Uuid, ProducerNote)> {
        let mut producers = self
            .producers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let previous = producers
            .iter()
            .position(|(_, n)| n.producer_id == note.producer_id)
            .and_then(|at| producers.remove(at));
        if producers.len() == PRODUCERS_KEPT {
            producers.pop_front();
        }
        producers.push_back((instance, note));
        previous
    }

    /// The producer IDs handed to `instance`, oldest first.
    pub fn producers_of(&self, instance: Uuid) -> Vec<ProducerNote> {
        self.producers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(i, _)| *i == instance)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// The instances that were handed producer IDs.
    pub fn producer_instances(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self
            .producers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(i, _)| *i)
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// A copy of every open connection's record.
    pub fn connections(&self) -> Vec<ConnectionRecord> {
        let shared: Vec<SharedRecord> = self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut records: Vec<ConnectionRecord> = shared
            .iter()
            .map(|r| r.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect();
        records.sort_by_key(|r| r.id);
        records
    }

    pub fn rejections_of(&self, instance: Option<Uuid>) -> Vec<Rejection> {
        self.rejections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&instance)
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every instance ID with open connections or remembered rejections.
    pub fn known_instances(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self
            .connections()
            .iter()
            .filter_map(|c| c.client_instance_id.as_deref()?.parse().ok())
            .collect();
        ids.extend(
            self.rejections
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .keys()
                .flatten()
                .copied(),
        );
        ids.sort();
        ids.dedup();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_rejections_and_members() {
        let registry = ClientRegistry::default();
        let a = Uuid::from_u128(1);
        let record = registry.register(ConnectionRecord::new(
            7,
            "127.0.0.1:1".parse().expect("addr"),
            "PLAINTEXT",
            5,
        ));
        record
            .lock()
            .expect("lock")
            .count(ApiKey::Metadata, Some("app"));
        record.lock().expect("lock").client_instance_id = Some(a.to_string());
        for _ in 0..60 {
            registry.record_rejection(
                7,
                ApiKey::Produce,
                RejectReason::MissingId,
                Some(a),
                None,
                9,
            );
        }
        registry.note_member("g", "m", a);
        let note = |producer_id, producer_epoch| ProducerNote {
            producer_id,
            producer_epoch,
            transactional_id: Some("t".into()),
            at_ms: 1,
        };
        registry.note_producer(Some(a), 5, 0, Some("t"), 1);
        registry.note_producer(Some(a), 6, 0, Some("t"), 1);
        registry.note_producer(Some(Uuid::from_u128(2)), 5, 1, Some("t"), 1);
        registry.note_producer(None, 9, 0, None, 1);
        assert_eq!(registry.producers_of(a), vec![note(6, 0)]);
        assert_eq!(registry.producers_of(Uuid::from_u128(2)), vec![note(5, 1)]);
        assert_eq!(registry.producer_instances(), vec![a, Uuid::from_u128(2)]);
        // Only the newest PRODUCERS_KEPT are remembered.
        for id in 0..PRODUCERS_KEPT as i64 {
            registry.note_producer(Some(Uuid::from_u128(3)), 100 + id, 0, None, 2);
        }
        assert!(registry.producers_of(a).is_empty(), "the oldest went first");
        assert_eq!(
            registry.producers_of(Uuid::from_u128(3)).len(),
            PRODUCERS_KEPT
        );
        assert_eq!(registry.connections()[0].requests.get("Metadata"), Some(&1));
        assert_eq!(registry.rejections_of(Some(a)).len(), REJECTIONS_KEPT);
        assert_eq!(registry.member_instance("g", "m"), Some(a));
        assert_eq!(registry.known_instances(), vec![a]);
        registry.unregister(7);
        assert!(registry.connections().is_empty());
    }
}
