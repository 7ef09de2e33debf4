//! One member of a classic group.

use bytes::Bytes;

/// A request parked until the group can answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parked {
    pub token: u64,
    pub version: i16,
}

/// One protocol a member supports, with its opaque metadata (e.g. a consumer subscription).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's protocols in its order of preference.
    pub protocols: Vec<Protocol>,
    pub assignment: Bytes,
    /// A JoinGroup waiting for the join phase to complete.
    pub awaiting_join: Option<Parked>,
    /// A SyncGroup waiting for the leader's assignment.
    pub awaiting_sync: Option<Parked>,
    /// Joined during the current rebalance and not yet given a generation: its join may time out.
    pub is_new: bool,
    /// When the member's session (or a new member's join) expires, if armed.
    pub heartbeat_deadline: Option<i64>,
    /// Join order: leader succession and member lists follow it.
    pub seq: u64,
}

impl Member {
    /// Kafka's `hasSatisfiedHeartbeat`: a member parked in a rebalance needs no heartbeat, unless
    /// it is new (its join itself may time out).
    pub fn has_satisfied_heartbeat(&self) -> bool {
        !self.is_new && (self.awaiting_join.is_some() || self.awaiting_sync.is_some())
    }

    pub fn matches(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }

    pub fn supports(&self, name: &str) -> bool {
        self.protocols.iter().any(|p| p.name == name)
    }

    /// The metadata the member sent for `protocol` (empty if it does not support it).
    pub fn metadata(&self, protocol: Option<&str>) -> Bytes {
        protocol
            .and_then(|name| self.protocols.iter().find(|p| p.name == name))
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    /// The member's first preferred protocol among `candidates`.
    pub fn vote<'a>(&'a self, candidates: &[&str]) -> Option<&'a str> {
        self.protocols
            .iter()
            .map(|p| p.name.as_str())
            .find(|name| candidates.contains(name))
    }
}
