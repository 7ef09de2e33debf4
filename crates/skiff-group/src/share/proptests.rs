//! Random sequences of joins, leaves, heartbeats, subscription changes, topic growth, timeouts
//! and share coordinator answers (initialized, failed or lost).
//!
//! Invariants, checked after every step by the harness: epochs are ordered, members at the
//! current target hold exactly their (subscription-filtered) target, only initialized partitions
//! are assigned. Once the share coordinator has answered everything and every member has
//! heartbeated twice in a row with no change: the group epoch stays put (no endless
//! rebalances), every member is at the assignment epoch and agrees with its client, every
//! partition of a subscribed topic is initialized and held by at least one member and at most
//! `ceil(members / partitions)` of them, and by exactly one when there are at least as many
//! partitions as members. (With more members than partitions a partition may end up short of
//! holders when every member below quota already holds it; Kafka tolerates the same.)

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::testkit::*;
use super::{Assignment, JOIN_GROUP_MEMBER_EPOCH};

const TOPICS: [&str; 2] = ["a", "b"];

#[derive(Debug, Clone)]
enum Op {
    Heartbeat {
        client: usize,
    },
    Leave {
        client: usize,
    },
    Resubscribe {
        client: usize,
        both: bool,
    },
    Advance {
        ms: i64,
    },
    GrowTopic {
        topic: usize,
        partitions: i32,
    },
    /// The share coordinator answers the oldest pending initialization.
    Answer {
        success: bool,
        lost: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..6usize).prop_map(|client| Op::Heartbeat { client }),
        1 => (0..6usize).prop_map(|client| Op::Leave { client }),
        1 => (0..6usize, any::<bool>()).prop_map(|(client, both)| Op::Resubscribe { client, both }),
        1 => prop_oneof![Just(1_000i64), Just(5_000), Just(31_000), Just(46_000)].prop_map(|ms| Op::Advance { ms }),
        1 => (0..2usize, 1..9i32).prop_map(|(topic, partitions)| Op::GrowTopic { topic, partitions }),
        3 => (any::<bool>(), any::<bool>()).prop_map(|(success, lost)| Op::Answer { success, lost }),
    ]
}

struct World {
    h: Harness,
    clients: Vec<Client>,
}

impl World {
    fn new(subscriptions: &[bool]) -> Self {
        let h = Harness::new(&[("a", 3), ("b", 1)]);
        let clients = subscriptions
            .iter()
            .enumerate()
            .map(|(i, both)| {
                let names: &[&str] = if *both { &TOPICS } else { &TOPICS[..1] };
                Client::new(&format!("m{i}"), names)
            })
            .collect();
        World { h, clients }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Heartbeat { client } => {
                if let Some(c) = self.clients.get_mut(client) {
                    let _ = c.heartbeat(&mut self.h);
                }
            }
            Op::Leave { client } => {
                if let Some(c) = self.clients.get_mut(client)
                    && c.epoch != JOIN_GROUP_MEMBER_EPOCH
                {
                    let _ = self.h.send(&heartbeat_request(&c.member_id, -1));
                    c.epoch = JOIN_GROUP_MEMBER_EPOCH;
                    c.assignment.clear();
                }
            }
            Op::Resubscribe { client, both } => {
                if let Some(c) = self.clients.get_mut(client) {
                    let names: &[&str] = if both { &TOPICS } else { &TOPICS[1..] };
                    c.names = names.iter().map(|s| s.to_string()).collect();
                    let mut request = c.request();
                    request.subscribed_topic_names =
                        Some(c.names.iter().map(|n| n.clone().into()).collect());
                    if let Ok(response) = self.h.send(&request) {
                        c.epoch = response.member_epoch;
                        if let Some(a) = assignment_of(&response) {
                            c.assignment = a;
                        }
                    } else {
                        c.epoch = JOIN_GROUP_MEMBER_EPOCH;
                        c.assignment.clear();
                    }
                }
            }
            Op::Advance { ms } => {
                let removed = self.h.advance(ms);
                for c in self.clients.iter_mut() {
                    if removed.contains(&c.member_id) {
                        // The client does not know yet; its next heartbeat is refused.
                        assert!(!self.h.group.has_member(&c.member_id));
                    }
                }
            }
            Op::GrowTopic { topic, partitions } => {
                let Some(name) = TOPICS.get(topic) else {
                    return;
                };
                let current = self.h.topics.by_name.get(*name).map_or(0, |(_, n)| *n);
                if partitions > current {
                    self.h.set_partitions(name, partitions);
                    self.h.group.on_topics_changed(&self.h.topics, self.h.now);
                }
            }
            Op::Answer { success, lost } => {
                if self.h.pending.is_empty() {
                    return;
                }
                let request = self.h.pending.remove(0);
                if lost {
                    return;
                }
                if success {
                    self.h
                        .group
                        .on_partitions_initialized(&request.partitions, &self.h.topics);
                } else {
                    self.h.group.on_initialize_failed(&request.partitions);
                }
            }
        }
        self.h.check_invariants();
    }

    fn state(&self) -> (Vec<(i32, Assignment)>, i32, u64) {
        (
            self.clients
                .iter()
                .map(|c| (c.epoch, c.assignment.clone()))
                .collect(),
            self.h.group.group_epoch(),
            self.h.group.change_counter(),
        )
    }

    /// Lost requests are retried after the interval, answers arrive, and everyone heartbeats
    /// until two consecutive rounds change nothing.
    fn converge(&mut self) {
        self.h.now += 31_000;
        let mut quiet = 0;
        for _ in 0..40 {
            let before = self.state();
            for c in self.clients.iter_mut() {
                let _ = c.heartbeat(&mut self.h);
            }
            self.h.initialize_pending();
            if self.state() == before {
                quiet += 1;
                if quiet == 2 {
                    return;
                }
            } else {
                quiet = 0;
            }
        }
        panic!("the group did not converge");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_membership_changes_converge_to_a_covering_balanced_assignment(
        subscriptions in proptest::collection::vec(any::<bool>(), 6),
        ops in proptest::collection::vec(op(), 0..80),
    ) {
        let mut world = World::new(&subscriptions);
        for op in &ops {
            world.apply(op);
        }
        world.converge();

        let group = &world.h.group;
        prop_assert_eq!(group.member_count(), world.clients.len());
        prop_assert_eq!(group.group_epoch(), group.assignment_epoch());
        for c in &world.clients {
            let member = group.member(&c.member_id).expect("every client is a member after converging");
            prop_assert_eq!(member.member_epoch(), group.assignment_epoch());
            prop_assert_eq!(&c.assignment, member.assigned_partitions());
        }
        // Every subscribed partition is initialized and held by someone.
        let mut subscribers: BTreeMap<String, usize> = BTreeMap::new();
        for c in &world.clients {
            for name in &c.names {
                *subscribers.entry(name.clone()).or_default() += 1;
            }
        }
        let sharing = world.h.sharing();
        let homogeneous = subscribers.values().all(|n| *n == world.clients.len());
        let all_partitions: usize = subscribers
            .keys()
            .map(|name| world.h.topics.by_name[name].1 as usize)
            .sum();
        for (name, count) in &subscribers {
            let (id, partitions) = world.h.topics.by_name[name];
            let all: BTreeSet<i32> = (0..partitions).collect();
            prop_assert_eq!(group.initialized_partitions().get(&id), Some(&all));
            // Homogeneous groups balance over all their partitions, others topic by topic.
            let (members, scope) = if homogeneous {
                (world.clients.len(), all_partitions)
            } else {
                (*count, partitions as usize)
            };
            let target = members.div_ceil(scope);
            for p in 0..partitions {
                let holders = sharing.get(&(id, p)).copied().unwrap_or(0);
                prop_assert!(holders >= 1, "{}-{} unassigned", name, p);
                prop_assert!(holders <= target, "{}-{} held {} times", name, p, holders);
                if members <= scope {
                    prop_assert_eq!(holders, 1);
                }
            }
        }
        // Nothing left to do: another round changes nothing.
        let before = world.state();
        for c in world.clients.iter_mut() {
            let _ = c.heartbeat(&mut world.h);
        }
        prop_assert_eq!(world.state(), before);
    }
}
