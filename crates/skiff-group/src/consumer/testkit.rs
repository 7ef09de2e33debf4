//! Test helpers: a group with a topic image and a clock, and simulated clients that behave like
//! a KIP-848 consumer (they echo the last assignment they received as their owned partitions).

use std::collections::BTreeSet;

use skiff_protocol::Uuid;
use skiff_protocol::generated::consumer_group_heartbeat_request::{
    ConsumerGroupHeartbeatRequest, TopicPartitions,
};
use skiff_protocol::generated::consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse;

use super::{Assignment, ClientInfo, ConsumerGroup};
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

pub fn owned_of(assignment: &Assignment) -> Vec<TopicPartitions> {
    assignment
        .iter()
        .map(|(t, ps)| TopicPartitions {
            topic_id: *t,
            partitions: ps.iter().copied().collect(),
            ..Default::default()
        })
        .collect()
}

pub fn assignment_of(response: &ConsumerGroupHeartbeatResponse) -> Option<Assignment> {
    response.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .filter(|tp| !tp.partitions.is_empty())
            .map(|tp| (tp.topic_id, tp.partitions.iter().copied().collect()))
            .collect()
    })
}

pub fn join_request(member_id: &str, names: &[&str]) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest {
        group_id: GROUP.into(),
        member_id: member_id.to_string().into(),
        member_epoch: 0,
        rebalance_timeout_ms: 10_000,
        subscribed_topic_names: Some(names.iter().map(|n| n.to_string().into()).collect()),
        topic_partitions: Some(Vec::new()),
        ..Default::default()
    }
}

/// A partial heartbeat: only the member ID, epoch and (optionally) owned partitions.
pub fn heartbeat_request(
    member_id: &str,
    epoch: i32,
    owned: Option<&Assignment>,
) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest {
        group_id: GROUP.into(),
        member_id: member_id.to_string().into(),
        member_epoch: epoch,
        topic_partitions: owned.map(owned_of),
        ..Default::default()
    }
}

pub struct Harness {
    pub group: ConsumerGroup,
    pub topics: TopicsImage,
    pub config: GroupConfig,
    pub now: i64,
}

impl Harness {
    pub fn new(topics: &[(&str, i32)]) -> Self {
        let mut image = TopicsImage::default();
        for (name, partitions) in topics {
            image.insert(name, topic_id(name), *partitions);
        }
        Harness {
            group: ConsumerGroup::new(GROUP),
            topics: image,
            config: GroupConfig::default(),
            now: 1_000_000,
        }
    }

    pub fn send_version(
        &mut self,
        request: &ConsumerGroupHeartbeatRequest,
        version: i16,
    ) -> Result<ConsumerGroupHeartbeatResponse, GroupError> {
        let client = ClientInfo {
            client_id: "client",
            client_host: "/127.0.0.1",
        };
        let result = self.group.heartbeat(
            request,
            version,
            client,
            &self.topics,
            &self.config,
            self.now,
        );
        self.check_invariants();
        result
    }

    pub fn send(
        &mut self,
        request: &ConsumerGroupHeartbeatRequest,
    ) -> Result<ConsumerGroupHeartbeatResponse, GroupError> {
        self.send_version(request, 1)
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

    /// Server-side invariants: no partition owned twice, the ownership index matches the
    /// members, epochs are ordered.
    pub fn check_invariants(&self) {
        let g = &self.group;
        let mut seen = BTreeSet::new();
        for m in g.members.values() {
            for key in m.owned_partitions() {
                assert!(seen.insert(key), "partition {key:?} owned by two members");
                assert_eq!(
                    g.owners.get(&key),
                    Some(&m.seq),
                    "ownership index out of date for {key:?}"
                );
            }
            assert!(
                m.member_epoch <= g.assignment_epoch,
                "member epoch above the assignment epoch"
            );
        }
        assert_eq!(
            seen.len(),
            g.owners.len(),
            "ownership index has stale entries"
        );
        assert!(g.assignment_epoch <= g.group_epoch);
        for (instance, id) in &g.static_members {
            let member = g.members.get(id).expect("static member exists");
            assert_eq!(member.instance_id.as_deref(), Some(instance.as_str()));
        }
    }
}

/// A simulated consumer.
#[derive(Debug, Clone)]
pub struct Client {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub names: Vec<String>,
    pub epoch: i32,
    pub owned: Assignment,
    pub joined: bool,
}

impl Client {
    pub fn new(member_id: &str, names: &[&str]) -> Self {
        Client {
            member_id: member_id.to_string(),
            instance_id: None,
            names: names.iter().map(|s| s.to_string()).collect(),
            epoch: 0,
            owned: Assignment::new(),
            joined: false,
        }
    }

    pub fn request(&self, full: bool) -> ConsumerGroupHeartbeatRequest {
        let mut request = heartbeat_request(&self.member_id, self.epoch, Some(&self.owned));
        request.instance_id = self.instance_id.clone().map(Into::into);
        if self.epoch == 0 || full {
            request.rebalance_timeout_ms = 10_000;
            request.subscribed_topic_names =
                Some(self.names.iter().map(|n| n.clone().into()).collect());
        }
        if self.epoch == 0 {
            request.topic_partitions = Some(Vec::new());
        }
        request
    }

    /// Sends a heartbeat and applies the response like a real consumer: a fenced or unknown
    /// member drops everything and rejoins with epoch 0 next time.
    pub fn heartbeat(
        &mut self,
        h: &mut Harness,
        full: bool,
    ) -> Result<ConsumerGroupHeartbeatResponse, GroupError> {
        if self.epoch == 0 {
            self.owned.clear();
        }
        let result = h.send(&self.request(full));
        match &result {
            Ok(response) => {
                self.joined = true;
                self.epoch = response.member_epoch;
                if let Some(a) = assignment_of(response) {
                    self.owned = a;
                }
            }
            Err(e) if e.code == 110 || e.code == 25 => {
                self.epoch = 0;
                self.owned.clear();
                self.joined = false;
            }
            Err(_) => {}
        }
        result
    }
}
