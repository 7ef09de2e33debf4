//! Random sequences of joins, syncs, heartbeats, leaves, static restarts, broker restarts and
//! clock advances, driven by clients that follow the responses they get.
//!
//! Invariants, checked after every step: a token is answered at most once and only while it is
//! parked; an Empty group has no members; a non-empty group has a leader among its members;
//! instance IDs are unique; a Stable or CompletingRebalance group has a protocol; after
//! `on_timer(now)` nothing is due at `now`; snapshots survive JSON. At the end `unload` answers
//! every token still parked.

use std::collections::BTreeSet;

use bytes::Bytes;
use proptest::prelude::*;
use skiff_protocol::ByteString;
use skiff_protocol::error_codes::{MEMBER_ID_REQUIRED, NONE};
use skiff_protocol::generated::heartbeat_request::HeartbeatRequest;
use skiff_protocol::generated::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use skiff_protocol::generated::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use skiff_protocol::generated::sync_group_request::{SyncGroupRequest, SyncGroupRequestAssignment};

use super::{ClassicGroup, ClassicGroupSnapshot, ClassicGroupState, ClassicResponse, Completion};
use crate::types::GroupConfig;

const CLIENTS: usize = 5;

#[derive(Debug, Clone)]
enum Op {
    Join {
        client: usize,
        version: i16,
        alt: bool,
    },
    Sync {
        client: usize,
    },
    Heartbeat {
        client: usize,
    },
    Leave {
        client: usize,
        version: i16,
    },
    Restart {
        client: usize,
    },
    Advance {
        ms: i64,
    },
    BrokerRestart,
}

fn op() -> impl Strategy<Value = Op> {
    let client = 0..CLIENTS;
    prop_oneof![
        5 => (client.clone(), prop_oneof![Just(0i16), Just(3), Just(4), Just(5), Just(7), Just(9)], any::<bool>())
            .prop_map(|(client, version, alt)| Op::Join { client, version, alt }),
        4 => client.clone().prop_map(|client| Op::Sync { client }),
        4 => client.clone().prop_map(|client| Op::Heartbeat { client }),
        1 => (client.clone(), prop_oneof![Just(0i16), Just(3), Just(5)])
            .prop_map(|(client, version)| Op::Leave { client, version }),
        1 => client.prop_map(|client| Op::Restart { client }),
        3 => prop_oneof![Just(500i64), Just(3_000), Just(7_000), Just(20_000), Just(70_000)]
            .prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::BrokerRestart),
    ]
}

#[derive(Debug, Clone, Default)]
struct Client {
    member_id: String,
    generation: i32,
    leader: bool,
    /// The members the leader was told about.
    peers: Vec<String>,
}

struct World {
    g: ClassicGroup,
    cfg: GroupConfig,
    now: i64,
    next_token: u64,
    clients: Vec<Client>,
    /// Tokens issued and not answered yet, with the client that sent them.
    parked: Vec<(u64, usize)>,
    answered: BTreeSet<u64>,
}

fn instance(client: usize) -> Option<&'static str> {
    // Clients 0 and 1 are static members.
    match client {
        0 => Some("i0"),
        1 => Some("i1"),
        _ => None,
    }
}

impl World {
    fn new() -> World {
        World {
            g: ClassicGroup::new("g", 0),
            cfg: GroupConfig {
                classic_initial_rebalance_delay_ms: 3_000,
                ..GroupConfig::default()
            },
            now: 0,
            next_token: 0,
            clients: vec![Client::default(); CLIENTS],
            parked: Vec::new(),
            answered: BTreeSet::new(),
        }
    }

    fn token(&mut self, client: usize) -> u64 {
        self.next_token += 1;
        self.parked.push((self.next_token, client));
        self.next_token
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Join {
                client,
                version,
                alt,
            } => {
                let token = self.token(client);
                let metadata = if alt { "alt" } else { "sub" };
                let mut protocols = vec![JoinGroupRequestProtocol {
                    name: ByteString::from("range"),
                    metadata: Bytes::from(metadata),
                    ..JoinGroupRequestProtocol::default()
                }];
                if client % 2 == 0 {
                    protocols.insert(
                        0,
                        JoinGroupRequestProtocol {
                            name: ByteString::from("roundrobin"),
                            metadata: Bytes::from_static(b"rr"),
                            ..JoinGroupRequestProtocol::default()
                        },
                    );
                }
                let request = JoinGroupRequest {
                    group_id: ByteString::from("g"),
                    session_timeout_ms: 10_000,
                    rebalance_timeout_ms: 30_000,
                    member_id: ByteString::from(self.clients[client].member_id.as_str()),
                    group_instance_id: instance(client).map(ByteString::from),
                    protocol_type: ByteString::from("consumer"),
                    protocols,
                    ..JoinGroupRequest::default()
                };
                let out = self.g.join(
                    &request,
                    version,
                    &format!("c{client}"),
                    "/h",
                    token,
                    &self.cfg,
                    self.now,
                );
                self.deliver(out);
            }
            Op::Sync { client } => {
                let c = self.clients[client].clone();
                if c.member_id.is_empty() {
                    return;
                }
                let token = self.token(client);
                let assignments = if c.leader {
                    c.peers
                        .iter()
                        .map(|m| SyncGroupRequestAssignment {
                            member_id: ByteString::from(m.as_str()),
                            assignment: Bytes::from(m.clone()),
                            ..SyncGroupRequestAssignment::default()
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let request = SyncGroupRequest {
                    group_id: ByteString::from("g"),
                    generation_id: c.generation,
                    member_id: ByteString::from(c.member_id.as_str()),
                    group_instance_id: instance(client).map(ByteString::from),
                    assignments,
                    ..SyncGroupRequest::default()
                };
                let out = self.g.sync(&request, 5, token, self.now);
                self.deliver(out);
            }
            Op::Heartbeat { client } => {
                let c = &self.clients[client];
                if c.member_id.is_empty() {
                    return;
                }
                let request = HeartbeatRequest {
                    group_id: ByteString::from("g"),
                    generation_id: c.generation,
                    member_id: ByteString::from(c.member_id.as_str()),
                    group_instance_id: instance(client).map(ByteString::from),
                    ..HeartbeatRequest::default()
                };
                let code = self.g.heartbeat(&request, 4, self.now).error_code;
                if code != NONE && code != 27 {
                    // Anything but REBALANCE_IN_PROGRESS: start over.
                    self.clients[client] = Client::default();
                }
            }
            Op::Leave { client, version } => {
                let c = self.clients[client].clone();
                let request = LeaveGroupRequest {
                    group_id: ByteString::from("g"),
                    member_id: ByteString::from(c.member_id.as_str()),
                    members: vec![
                        MemberIdentity {
                            member_id: ByteString::from(c.member_id.as_str()),
                            group_instance_id: instance(client).map(ByteString::from),
                            reason: None,
                            ..MemberIdentity::default()
                        },
                        MemberIdentity {
                            member_id: ByteString::from("ghost"),
                            group_instance_id: None,
                            reason: None,
                            ..MemberIdentity::default()
                        },
                    ],
                    ..LeaveGroupRequest::default()
                };
                let (_, out) = self.g.leave(&request, version, self.now);
                self.clients[client] = Client::default();
                self.deliver(out);
            }
            Op::Restart { client } => {
                // The process restarts and forgets its member ID.
                self.clients[client] = Client::default();
            }
            Op::Advance { ms } => {
                self.now += ms;
                let out = self.g.on_timer(&self.cfg, self.now);
                self.deliver(out);
                assert!(
                    self.g.next_deadline().is_none_or(|d| d > self.now),
                    "a timer is still due after on_timer"
                );
            }
            Op::BrokerRestart => {
                let snapshot = self.g.snapshot();
                self.g = ClassicGroup::restore(snapshot, self.now);
                // Connections are gone: nothing parked will be answered.
                self.parked.clear();
            }
        }
    }

    fn deliver(&mut self, out: Vec<Completion>) {
        for completion in out {
            let Some(pos) = self.parked.iter().position(|(t, _)| *t == completion.token) else {
                panic!("token {} answered twice or never issued", completion.token);
            };
            let (token, client) = self.parked.swap_remove(pos);
            assert!(self.answered.insert(token));
            let c = &mut self.clients[client];
            match completion.response {
                ClassicResponse::Join(r) => {
                    if r.error_code == NONE {
                        c.member_id = r.member_id.to_string();
                        c.generation = r.generation_id;
                        c.leader = r.leader == r.member_id && !r.members.is_empty();
                        c.peers = r.members.iter().map(|m| m.member_id.to_string()).collect();
                    } else if r.error_code == MEMBER_ID_REQUIRED {
                        c.member_id = r.member_id.to_string();
                    } else if r.error_code != 27 {
                        *c = Client::default();
                    }
                }
                ClassicResponse::Sync(r) => {
                    if r.error_code != NONE && r.error_code != 27 {
                        *c = Client::default();
                    }
                }
            }
        }
    }

    fn check(&self) {
        let members: Vec<_> = self.g.members().collect();
        if self.g.state() == ClassicGroupState::Empty {
            assert!(members.is_empty());
        }
        match self.g.leader_id() {
            Some(leader) => assert!(members.iter().any(|m| m.member_id == leader)),
            None => assert!(members.is_empty()),
        }
        let instances: Vec<&str> = members.iter().filter_map(|m| m.group_instance_id).collect();
        let unique: BTreeSet<&str> = instances.iter().copied().collect();
        assert_eq!(instances.len(), unique.len(), "duplicate instance IDs");
        if matches!(
            self.g.state(),
            ClassicGroupState::Stable | ClassicGroupState::CompletingRebalance
        ) {
            assert!(self.g.protocol_name().is_some());
            assert!(self.g.generation_id() > 0);
        }
        let d = self.g.describe();
        assert_eq!(&*d.group_state, self.g.state_name());
        let json = serde_json::to_string(&self.g.snapshot()).expect("serialize");
        let back: ClassicGroupSnapshot = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, self.g.snapshot());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_sessions_keep_the_invariants(ops in proptest::collection::vec(op(), 0..80)) {
        let mut world = World::new();
        for op in &ops {
            world.apply(op);
            world.check();
        }
        let out = world.g.unload(world.now);
        world.deliver(out);
        prop_assert!(world.parked.is_empty(), "unanswered tokens: {:?}", world.parked);
    }
}
