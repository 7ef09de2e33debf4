//! Test helpers: a share group with a topic image, a clock and a simulated share coordinator
//! (initialization requests are held until the test completes or fails them), and simulated
//! share consumers that keep the last assignment they received.

use std::collections::{BTreeMap, BTreeSet};

use skiff_protocol::Uuid;
use skiff_protocol::generated::share_group_heartbeat_request::ShareGroupHeartbeatRequest;
use skiff_protocol::generated::share_group_heartbeat_response::ShareGroupHeartbeatResponse;

use super::{Assignment, ClientInfo, InitializeShareState, ShareGroup, ShareHeartbeat};
use crate::types::{GroupConfig, GroupError, TopicsImage};

pub const GROUP: &str = "grp";

pub fn topic_id(name: &str) -> Uuid {
    // Stable, non-zero IDs derived from the name.
    let mut value: u128 = 0x9e37_79b9_7f4a_7c15;
    for b in name.bytes() {
        value = value
            .wrapping_mul(0x100_0000_01b3)
            .wrapping_add(u128::from(b));
    }
    Uuid::from_u128(value | 1 << 100)
}

pub fn tp(name: &str, partitions: &[i32]) -> (Uuid, BTreeSet<i32>) {
    (topic_id(name), partitions.iter().copied().collect())
}

pub fn assignment_of(response: &ShareGroupHeartbeatResponse) -> Option<Assignment> {
    response.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .filter(|tp| !tp.partitions.is_empty())
            .map(|tp| (tp.topic_id, tp.partitions.iter().copied().collect()))
            .collect()
    })
}

pub fn size(assignment: &Assignment) -> usize {
    assignment.values().map(BTreeSet::len).sum()
}

pub fn join_request(member_id: &str, names: &[&str]) -> ShareGroupHeartbeatRequest {
    ShareGroupHeartbeatRequest {
        group_id: GROUP.into(),
        member_id: member_id.to_string().into(),
        member_epoch: 0,
        subscribed_topic_names: Some(names.iter().map(|n| n.to_string().into()).collect()),
        ..Default::default()
    }
}

/// A partial heartbeat: only the member ID and epoch.
pub fn heartbeat_request(member_id: &str, epoch: i32) -> ShareGroupHeartbeatRequest {
    ShareGroupHeartbeatRequest {
        group_id: GROUP.into(),
        member_id: member_id.to_string().into(),
        member_epoch: epoch,
        ..Default::default()
    }
}

pub fn code<T>(result: Result<T, GroupError>) -> i16 {
    match result {
        Ok(_) => 0,
        Err(e) => e.code.code(),
    }
}

pub struct Harness {
    pub group: ShareGroup,
    pub topics: TopicsImage,
    pub config: GroupConfig,
    pub now: i64,
    /// Initialization requests the simulated share coordinator has not answered yet.
    pub pending: Vec<InitializeShareState>,
}

impl Harness {
    pub fn new(topics: &[(&str, i32)]) -> Self {
        let mut image = TopicsImage::default();
        for (name, partitions) in topics {
            image.insert(name, topic_id(name), *partitions);
        }
        Harness {
            group: ShareGroup::new(GROUP),
            topics: image,
            config: GroupConfig::default(),
            now: 1_000_000,
            pending: Vec::new(),
        }
    }

    pub fn send_full(
        &mut self,
        request: &ShareGroupHeartbeatRequest,
    ) -> Result<ShareHeartbeat, GroupError> {
        let client = ClientInfo {
            client_id: "client",
            client_host: "/127.0.0.1",
        };
        let result = self
            .group
            .heartbeat(request, client, &self.topics, &self.config, self.now);
        if let Ok(outcome) = &result
            && let Some(init) = &outcome.initialize
        {
            self.pending.push(init.clone());
        }
        self.check_invariants();
        result
    }

    pub fn send(
        &mut self,
        request: &ShareGroupHeartbeatRequest,
    ) -> Result<ShareGroupHeartbeatResponse, GroupError> {
        self.send_full(request).map(|outcome| outcome.response)
    }

    /// The share coordinator answers every pending initialization with success.
    pub fn initialize_pending(&mut self) {
        for request in std::mem::take(&mut self.pending) {
            self.group
                .on_partitions_initialized(&request.partitions, &self.topics);
        }
        self.check_invariants();
    }

    /// Joins a member, lets the share coordinator initialize what it asked for and heartbeats
    /// again with a full request: the member then holds its share of the partitions, and the
    /// response carries it.
    pub fn join_ready(&mut self, member_id: &str, names: &[&str]) -> ShareGroupHeartbeatResponse {
        let joined = self.send(&join_request(member_id, names)).unwrap();
        self.initialize_pending();
        let mut full = heartbeat_request(member_id, joined.member_epoch);
        full.subscribed_topic_names = Some(names.iter().map(|n| n.to_string().into()).collect());
        self.send(&full).unwrap()
    }

    pub fn advance(&mut self, ms: i64) -> Vec<String> {
        self.now += ms;
        let removed = self.group.on_timer(&self.topics, &self.config, self.now);
        self.check_invariants();
        removed
    }

    pub fn set_partitions(&mut self, name: &str, partitions: i32) {
        self.topics.insert(name, topic_id(name), partitions);
    }

    /// Server-side invariants: epochs are ordered, every member holds exactly its target
    /// filtered to its subscription once reconciled, only initialized partitions are assigned,
    /// and the session timers match the members.
    pub fn check_invariants(&self) {
        let g = &self.group;
        assert!(g.assignment_epoch <= g.group_epoch);
        for (id, m) in &g.members {
            assert!(
                m.member_epoch <= g.assignment_epoch,
                "member epoch above the assignment epoch"
            );
            for (topic, partitions) in &m.assigned {
                if self.topics.by_id(*topic).is_none() {
                    // Deleted since: the member drops it on its next heartbeat.
                    continue;
                }
                let initialized = g.initialized.get(topic).cloned().unwrap_or_default();
                assert!(
                    partitions.is_subset(&initialized),
                    "{id} holds uninitialized partitions"
                );
            }
            if m.member_epoch == g.assignment_epoch && g.assignment_epoch == g.group_epoch {
                let subscribed = g.subscribed_topic_ids(m);
                let expected: Assignment = g
                    .target
                    .get(id)
                    .into_iter()
                    .flatten()
                    .filter(|(t, ps)| subscribed.contains(*t) && !ps.is_empty())
                    .map(|(t, ps)| (*t, ps.clone()))
                    .collect();
                assert_eq!(m.assigned, expected, "{id} is not at its target");
            }
            assert!(g.sessions.contains_key(id), "{id} has no session timer");
        }
        assert!(g.target.keys().all(|id| g.members.contains_key(id)));
        assert_eq!(g.sessions.len(), g.timers.len());
        for (deadline, id) in &g.timers {
            assert_eq!(g.sessions.get(id), Some(deadline));
        }
    }

    /// Partition -> how many members hold it.
    pub fn sharing(&self) -> BTreeMap<(Uuid, i32), usize> {
        let mut counts = BTreeMap::new();
        for m in self.group.members() {
            for (t, ps) in m.assigned_partitions() {
                for p in ps {
                    *counts.entry((*t, *p)).or_default() += 1;
                }
            }
        }
        counts
    }
}

/// A simulated share consumer.
#[derive(Debug, Clone)]
pub struct Client {
    pub member_id: String,
    pub names: Vec<String>,
    pub epoch: i32,
    pub assignment: Assignment,
}

impl Client {
    pub fn new(member_id: &str, names: &[&str]) -> Self {
        Client {
            member_id: member_id.to_string(),
            names: names.iter().map(|s| s.to_string()).collect(),
            epoch: 0,
            assignment: Assignment::new(),
        }
    }

    pub fn request(&self) -> ShareGroupHeartbeatRequest {
        let mut request = heartbeat_request(&self.member_id, self.epoch);
        if self.epoch == 0 {
            request.subscribed_topic_names =
                Some(self.names.iter().map(|n| n.clone().into()).collect());
        }
        request
    }

    /// Sends a heartbeat and applies the response like the Java share consumer: a fenced or
    /// unknown member drops its assignment and rejoins with epoch 0 (same member ID) next time.
    pub fn heartbeat(
        &mut self,
        h: &mut Harness,
    ) -> Result<ShareGroupHeartbeatResponse, GroupError> {
        let result = h.send(&self.request());
        match &result {
            Ok(response) => {
                self.epoch = response.member_epoch;
                if let Some(a) = assignment_of(response) {
                    self.assignment = a;
                }
            }
            Err(e) if e.code == 110 || e.code == 25 => {
                self.epoch = 0;
                self.assignment.clear();
            }
            Err(_) => {}
        }
        result
    }
}
