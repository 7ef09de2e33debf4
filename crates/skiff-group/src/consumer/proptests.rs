//! Random sequences of joins, leaves, heartbeats, topic growth and timeouts, with members that
//! echo their last received assignment as owned partitions.
//!
//! Invariants: no partition is owned by two members at any time (server side, checked after
//! every step by the harness), the clients that are still members never believe they own the
//! same partition, each client owns a subset of what the server attributes to it; and once every
//! member has heartbeated twice in a row with no change, every partition of the subscribed
//! topics is owned by exactly one member.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::testkit::*;
use super::{Assignment, MemberState};

#[derive(Debug, Clone)]
enum Op {
    Heartbeat { client: usize, full: bool },
    Leave { client: usize, temporary: bool },
    Advance { ms: i64 },
    GrowTopic { partitions: i32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..5usize, any::<bool>()).prop_map(|(client, full)| Op::Heartbeat { client, full }),
        1 => (0..5usize, any::<bool>()).prop_map(|(client, temporary)| Op::Leave { client, temporary }),
        1 => prop_oneof![Just(1_000i64), Just(5_000), Just(11_000), Just(46_000)].prop_map(|ms| Op::Advance { ms }),
        1 => (4..9i32).prop_map(|partitions| Op::GrowTopic { partitions }),
    ]
}

struct World {
    h: Harness,
    clients: Vec<Client>,
    /// Static clients that left temporarily (their process is "away").
    away: Vec<bool>,
    restarts: usize,
}

impl World {
    fn new(subscriptions: &[bool]) -> Self {
        let h = Harness::new(&[("a", 4), ("b", 3)]);
        let clients = subscriptions
            .iter()
            .enumerate()
            .map(|(i, both)| {
                let names: &[&str] = if *both { &["a", "b"] } else { &["a"] };
                let mut c = Client::new(&format!("m{i}"), names);
                if i >= 3 {
                    c.instance_id = Some(format!("inst-{i}"));
                }
                c
            })
            .collect();
        World {
            h,
            clients,
            away: vec![false; subscriptions.len()],
            restarts: 0,
        }
    }

    fn restart(&mut self, i: usize) {
        // A restarted static member comes back with a fresh member ID.
        self.restarts += 1;
        if let Some(c) = self.clients.get_mut(i) {
            c.member_id = format!("m{i}-r{}", self.restarts);
            c.epoch = 0;
            c.owned.clear();
            c.joined = false;
        }
        if let Some(a) = self.away.get_mut(i) {
            *a = false;
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Heartbeat { client, full } => {
                if self.away.get(client).copied().unwrap_or(false) {
                    self.restart(client);
                }
                if let Some(c) = self.clients.get_mut(client) {
                    let _ = c.heartbeat(&mut self.h, full);
                }
            }
            Op::Leave { client, temporary } => {
                let Some(c) = self.clients.get_mut(client) else {
                    return;
                };
                if !c.joined {
                    return;
                }
                let temporary = temporary && c.instance_id.is_some();
                let mut request =
                    heartbeat_request(&c.member_id, if temporary { -2 } else { -1 }, None);
                request.instance_id = c.instance_id.clone().map(Into::into);
                let _ = self.h.send(&request);
                c.epoch = 0;
                c.owned.clear();
                c.joined = false;
                if temporary && let Some(a) = self.away.get_mut(client) {
                    *a = true;
                }
            }
            Op::Advance { ms } => {
                self.h.advance(ms);
            }
            Op::GrowTopic { partitions } => {
                let current = self.h.topics.by_name.get("a").map_or(0, |(_, n)| *n);
                if partitions > current {
                    self.h.set_partitions("a", partitions);
                    self.h.group.on_topics_changed(&self.h.topics, self.h.now);
                }
            }
        }
        self.check_clients();
    }

    /// Clients that are still members never share a partition and own a subset of what the
    /// coordinator attributes to them.
    fn check_clients(&self) {
        let mut seen = BTreeSet::new();
        for c in &self.clients {
            let Some(member) = self.h.group.member(&c.member_id) else {
                continue;
            };
            if !c.joined {
                continue;
            }
            for (topic, partitions) in &c.owned {
                for p in partitions {
                    assert!(
                        seen.insert((*topic, *p)),
                        "{topic:?}-{p} owned by two clients"
                    );
                    let attributed = member
                        .assigned_partitions()
                        .get(topic)
                        .is_some_and(|s| s.contains(p))
                        || member
                            .partitions_pending_revocation()
                            .get(topic)
                            .is_some_and(|s| s.contains(p));
                    assert!(
                        attributed,
                        "client {} owns {topic:?}-{p} the coordinator does not attribute to it",
                        c.member_id
                    );
                }
            }
        }
    }

    fn state(&self) -> (Vec<(i32, Assignment)>, u64) {
        (
            self.clients
                .iter()
                .map(|c| (c.epoch, c.owned.clone()))
                .collect(),
            self.h.group.change_counter(),
        )
    }

    /// Everyone (back) in the group heartbeats until two consecutive rounds change nothing.
    fn converge(&mut self) -> usize {
        for i in 0..self.clients.len() {
            if self.away.get(i).copied().unwrap_or(false) {
                self.restart(i);
            }
        }
        let mut quiet_rounds = 0;
        for round in 1..=40 {
            let before = self.state();
            for i in 0..self.clients.len() {
                if let Some(c) = self.clients.get_mut(i) {
                    let _ = c.heartbeat(&mut self.h, false);
                }
                self.check_clients();
            }
            if self.state() == before {
                quiet_rounds += 1;
                if quiet_rounds == 2 {
                    return round;
                }
            } else {
                quiet_rounds = 0;
            }
        }
        panic!("the group did not converge");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_membership_changes_keep_ownership_exclusive_and_converge(
        subscriptions in proptest::collection::vec(any::<bool>(), 5),
        ops in proptest::collection::vec(op(), 0..60),
    ) {
        let mut world = World::new(&subscriptions);
        for op in &ops {
            world.apply(op);
        }
        world.converge();

        let group = &world.h.group;
        // Every partition of every subscribed topic is owned by exactly one member.
        let mut subscribed = BTreeSet::new();
        for c in &world.clients {
            subscribed.extend(c.names.iter().cloned());
        }
        let mut expected = BTreeSet::new();
        for name in &subscribed {
            let (id, count) = world.h.topics.by_name[name];
            expected.extend((0..count).map(|p| (id, p)));
        }
        let mut owned = BTreeSet::new();
        for member in group.members() {
            prop_assert_eq!(member.state(), MemberState::Stable);
            prop_assert_eq!(member.member_epoch(), group.assignment_epoch());
            prop_assert!(member.partitions_pending_revocation().is_empty());
            for (t, ps) in member.assigned_partitions() {
                for p in ps {
                    prop_assert!(owned.insert((*t, *p)));
                }
            }
        }
        prop_assert_eq!(owned, expected);
        prop_assert_eq!(group.state(), super::GroupState::Stable);
        // The clients agree with the coordinator.
        for c in &world.clients {
            let member = group.member(&c.member_id).expect("every client is a member after converging");
            prop_assert_eq!(&c.owned, member.assigned_partitions());
        }
        prop_assert_eq!(group.member_count(), world.clients.len());
    }
}
