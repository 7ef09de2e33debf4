//! KIP-848 consumer group benchmarks.
//!
//! - convergence: 1,000 members join a group on one 1,000-partition topic (one join heartbeat
//!   each), then every member heartbeats once per round, echoing the last assignment it received
//!   as its owned partitions, until a round changes nothing. Target: converged within 3 rounds.
//! - steady state: heartbeats per second for a converged 1,000-member group (partial heartbeats,
//!   as clients send between rebalances). Target: >= 100k heartbeats/s.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput};
use skiff_group::consumer::{ClientInfo, ConsumerGroup, GroupState};
use skiff_group::{GroupConfig, TopicsImage};
use skiff_protocol::Uuid;
use skiff_protocol::generated::consumer_group_heartbeat_request::{
    ConsumerGroupHeartbeatRequest, TopicPartitions,
};
use skiff_protocol::generated::consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse;

const MEMBERS: usize = 1_000;
const PARTITIONS: i32 = 1_000;
const CLIENT: ClientInfo<'static> = ClientInfo {
    client_id: "bench",
    client_host: "/10.0.0.1",
};

struct Member {
    id: String,
    epoch: i32,
    owned: BTreeMap<Uuid, BTreeSet<i32>>,
}

impl Member {
    fn request(&self) -> ConsumerGroupHeartbeatRequest {
        let mut request = ConsumerGroupHeartbeatRequest {
            group_id: "bench".into(),
            member_id: self.id.clone().into(),
            member_epoch: self.epoch,
            topic_partitions: Some(
                self.owned
                    .iter()
                    .map(|(t, ps)| TopicPartitions {
                        topic_id: *t,
                        partitions: ps.iter().copied().collect(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        };
        if self.epoch == 0 {
            request.rebalance_timeout_ms = 30_000;
            request.subscribed_topic_names = Some(vec!["events".into()]);
        }
        request
    }

    fn apply(&mut self, response: &ConsumerGroupHeartbeatResponse) {
        self.epoch = response.member_epoch;
        if let Some(a) = &response.assignment {
            self.owned = a
                .topic_partitions
                .iter()
                .filter(|tp| !tp.partitions.is_empty())
                .map(|tp| (tp.topic_id, tp.partitions.iter().copied().collect()))
                .collect();
        }
    }
}

struct Setup {
    group: ConsumerGroup,
    members: Vec<Member>,
    topics: TopicsImage,
    config: GroupConfig,
    now: i64,
}

fn heartbeat(setup: &mut Setup, index: usize) {
    let Some(member) = setup.members.get_mut(index) else {
        return;
    };
    let request = member.request();
    let response = setup
        .group
        .heartbeat(&request, 1, CLIENT, &setup.topics, &setup.config, setup.now)
        .expect("heartbeat accepted");
    member.apply(&response);
}

/// Joins every member, then runs rounds until one changes nothing. Returns the setup and the
/// number of rounds after the join round (the last one being the quiet one).
fn join_and_converge() -> (Setup, usize, f64) {
    let mut topics = TopicsImage::default();
    topics.insert(
        "events",
        Uuid::from_u128(0x5eed_0000_0000_0000_0000_0000_0000_0001),
        PARTITIONS,
    );
    let mut setup = Setup {
        group: ConsumerGroup::new("bench"),
        members: (0..MEMBERS)
            .map(|i| Member {
                id: format!("member-{i:05}"),
                epoch: 0,
                owned: BTreeMap::new(),
            })
            .collect(),
        topics,
        config: GroupConfig::default(),
        now: 0,
    };
    let started = Instant::now();
    for i in 0..MEMBERS {
        heartbeat(&mut setup, i);
    }
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds <= 50, "did not converge");
        let before = (
            setup.group.change_counter(),
            setup
                .members
                .iter()
                .map(|m| (m.epoch, m.owned.clone()))
                .collect::<Vec<_>>(),
        );
        setup.now += 1_000;
        for i in 0..MEMBERS {
            heartbeat(&mut setup, i);
        }
        let after = (
            setup.group.change_counter(),
            setup
                .members
                .iter()
                .map(|m| (m.epoch, m.owned.clone()))
                .collect::<Vec<_>>(),
        );
        if before == after {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(setup.group.state(), GroupState::Stable);
    let owned: usize = setup
        .members
        .iter()
        .map(|m| m.owned.values().map(BTreeSet::len).sum::<usize>())
        .sum();
    assert_eq!(owned, PARTITIONS as usize);
    (setup, rounds, elapsed)
}

fn main() {
    let (mut setup, rounds, elapsed) = join_and_converge();
    println!(
        "convergence: {MEMBERS} members joining one {PARTITIONS}-partition topic converged after {} heartbeat round(s) + 1 quiet round ({rounds} rounds after the join round; joins + rounds took {elapsed:.3} s)",
        rounds - 1
    );

    // Steady state: partial heartbeats (no owned partitions) from every member in turn.
    for member in &mut setup.members {
        member.owned.clear();
    }
    let requests: Vec<ConsumerGroupHeartbeatRequest> = setup
        .members
        .iter()
        .map(|m| ConsumerGroupHeartbeatRequest {
            group_id: "bench".into(),
            member_id: m.id.clone().into(),
            member_epoch: m.epoch,
            ..Default::default()
        })
        .collect();
    let total = 2_000_000;
    let started = Instant::now();
    for n in 0..total {
        setup.now += 1;
        let request = &requests[n % MEMBERS];
        let response = setup
            .group
            .heartbeat(request, 1, CLIENT, &setup.topics, &setup.config, setup.now)
            .expect("heartbeat accepted");
        black_box(response);
    }
    let per_second = total as f64 / started.elapsed().as_secs_f64();
    println!(
        "steady state: {per_second:.0} heartbeats/s for a {MEMBERS}-member group (target >= 100000)"
    );

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("consumer_group");
    group.throughput(Throughput::Elements(1));
    let mut n = 0usize;
    group.bench_function("steady_state_heartbeat_1000_members", |b| {
        b.iter(|| {
            n += 1;
            setup.now += 1;
            let request = &requests[n % MEMBERS];
            black_box(
                setup
                    .group
                    .heartbeat(request, 1, CLIENT, &setup.topics, &setup.config, setup.now)
                    .expect("heartbeat accepted"),
            )
        })
    });
    group.finish();
    let mut group = criterion.benchmark_group("consumer_group_rebalance");
    group.sample_size(10);
    group.bench_function("join_and_converge_1000_members_1000_partitions", |b| {
        b.iter(|| black_box(join_and_converge().1))
    });
    group.finish();
    criterion.final_summary();
}
