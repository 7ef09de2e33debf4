//! Scenario tests mirroring Kafka's GroupMetadataManagerTest (share group cases) and
//! ShareGroupHeartbeatRequestTest.

use std::collections::BTreeSet;

use skiff_protocol::error_codes as codes;

use super::testkit::*;
use super::*;

fn names_of(described: &describe_response::Member) -> Vec<&str> {
    described
        .subscribed_topic_names
        .iter()
        .map(|s| &**s)
        .collect()
}

#[test]
fn validation_rules_in_kafka_order() {
    let check = |request: ShareGroupHeartbeatRequest, expected: Option<&str>| {
        let result = validate_heartbeat(&request);
        match expected {
            None => assert_eq!(result, Ok(()), "{request:?}"),
            Some(message) => {
                let err = result.unwrap_err();
                assert_eq!(
                    (err.code.code(), err.message.as_str()),
                    (codes::INVALID_REQUEST, message),
                    "{request:?}"
                );
            }
        }
    };
    check(join_request("m", &["foo"]), None);
    // KafkaApis.isMemberIdValid comes first: empty, or longer than 36 UTF-16 code units.
    let mut r = join_request("", &["foo"]);
    r.group_id = "".into();
    check(r, Some("Invalid member id in the request."));
    check(join_request(&"x".repeat(36), &["foo"]), None);
    check(
        join_request(&"x".repeat(37), &["foo"]),
        Some("Invalid member id in the request."),
    );
    // Java counts UTF-16 units: U+1D11E is two of them, U+00E9 one.
    check(join_request(&"\u{1D11E}".repeat(18), &["foo"]), None);
    check(
        join_request(&"\u{1D11E}".repeat(19), &["foo"]),
        Some("Invalid member id in the request."),
    );
    check(join_request(&"\u{E9}".repeat(36), &["foo"]), None);
    // Then the coordinator's checks, in order.
    let mut r = join_request("  ", &["foo"]);
    r.group_id = "".into();
    check(r, Some("MemberId can't be empty."));
    let mut r = join_request("m", &["foo"]);
    r.group_id = " ".into();
    r.rack_id = Some("".into());
    check(r, Some("GroupId can't be empty."));
    let mut r = join_request("m", &[]);
    r.rack_id = Some(" ".into());
    check(r, Some("RackId can't be empty."));
    let mut r = join_request("m", &["foo"]);
    r.rack_id = Some("rack-1".into());
    check(r, None);
    check(
        join_request("m", &[]),
        Some("SubscribedTopicNames must be set in first request."),
    );
    let mut r = join_request("m", &["foo"]);
    r.subscribed_topic_names = None;
    check(
        r,
        Some("SubscribedTopicNames must be set in first request."),
    );
    check(heartbeat_request("m", -2), Some("MemberEpoch is invalid."));
    check(
        heartbeat_request("m", i32::MIN),
        Some("MemberEpoch is invalid."),
    );
    // Later heartbeats and leaves need no subscription.
    check(heartbeat_request("m", 3), None);
    check(heartbeat_request("m", -1), None);
    let mut r = heartbeat_request("m", 3);
    r.subscribed_topic_names = Some(Vec::new());
    check(r, None);
}

#[test]
fn join_assigns_once_share_state_is_initialized() {
    let mut h = Harness::new(&[("foo", 3), ("bar", 2)]);
    let joined = h.send_full(&join_request("a", &["foo"])).unwrap();
    let response = &joined.response;
    assert_eq!(response.member_id.as_deref(), Some("a"));
    assert_eq!(response.member_epoch, 1);
    assert_eq!(response.heartbeat_interval_ms, 5000);
    // A join always carries the assignment, empty while nothing is initialized.
    assert_eq!(assignment_of(response), Some(Assignment::new()));
    assert_eq!(
        joined.initialize,
        Some(InitializeShareState {
            group_epoch: 1,
            partitions: [tp("foo", &[0, 1, 2])].into(),
        })
    );
    assert_eq!(
        h.group.initializing_partitions(),
        [tp("foo", &[0, 1, 2])].into()
    );
    assert_eq!(h.group.state(), ShareGroupState::Stable);
    assert_eq!((h.group.group_epoch(), h.group.assignment_epoch()), (1, 1));

    // Heartbeats before the share coordinator answers: nothing new, nothing asked twice.
    h.now += 5_000;
    let waiting = h.send_full(&heartbeat_request("a", 1)).unwrap();
    assert_eq!(waiting.response.member_epoch, 1);
    assert_eq!(waiting.response.assignment, None);
    assert_eq!(waiting.initialize, None);

    // Initialized: the next heartbeat bumps the group epoch and assigns.
    h.initialize_pending();
    assert_eq!(
        h.group.initialized_partitions(),
        &[tp("foo", &[0, 1, 2])].into()
    );
    assert!(h.group.initializing_partitions().is_empty());
    h.now += 5_000;
    let ready = h.send(&heartbeat_request("a", 1)).unwrap();
    assert_eq!(ready.member_epoch, 2);
    assert_eq!(
        assignment_of(&ready).unwrap(),
        [tp("foo", &[0, 1, 2])].into()
    );
    let member = h.group.member("a").unwrap();
    assert_eq!(
        (member.member_epoch(), member.previous_member_epoch()),
        (2, 1)
    );
    assert_eq!(member.subscribed_topic_names(), ["foo".to_string()]);
    assert_eq!(member.client_id(), "client");
    assert_eq!(member.client_host(), "/127.0.0.1");
    // Steady state: no epoch change, no assignment in the response.
    let steady = h.send(&heartbeat_request("a", 2)).unwrap();
    assert_eq!((steady.member_epoch, steady.assignment.clone()), (2, None));
    assert_eq!(h.group.group_epoch(), 2);
}

#[test]
fn join_validation_failures_leave_the_group_unused() {
    let mut h = Harness::new(&[("foo", 3)]);
    let err = h.send(&join_request("", &["foo"])).unwrap_err();
    assert_eq!(err.code, codes::INVALID_REQUEST);
    let mut missing = join_request("a", &["foo"]);
    missing.subscribed_topic_names = None;
    assert_eq!(code(h.send(&missing)), codes::INVALID_REQUEST);
    assert_eq!(
        code(h.send(&join_request("a", &[]))),
        codes::INVALID_REQUEST
    );
    assert!(h.group.is_unused());
    assert_eq!(h.group.change_counter(), 0);
    assert_eq!(h.group.next_deadline(), None);
}

#[test]
fn heartbeats_at_the_member_epoch() {
    let mut h = Harness::new(&[("foo", 2)]);
    let ready = h.join_ready("a", &["foo"]);
    let epoch = ready.member_epoch;
    for _ in 0..3 {
        h.now += 5_000;
        let r = h.send(&heartbeat_request("a", epoch)).unwrap();
        assert_eq!(r.member_epoch, epoch);
        assert_eq!(r.assignment, None);
    }
    // A full request (subscribed topic names present) always gets the assignment back.
    let mut full = heartbeat_request("a", epoch);
    full.subscribed_topic_names = Some(vec!["foo".into()]);
    let r = h.send(&full).unwrap();
    assert_eq!(assignment_of(&r).unwrap(), [tp("foo", &[0, 1])].into());
    assert_eq!(h.group.group_epoch(), epoch, "same subscription, no bump");
    // A rack update is kept without a rebalance.
    let mut rack = heartbeat_request("a", epoch);
    rack.rack_id = Some("rack-2".into());
    h.send(&rack).unwrap();
    assert_eq!(h.group.member("a").unwrap().rack_id(), Some("rack-2"));
    assert_eq!(h.group.group_epoch(), epoch);
}

#[test]
fn stale_or_future_epochs_are_fenced() {
    let mut h = Harness::new(&[("foo", 2)]);
    h.join_ready("a", &["foo"]);
    let a = h.group.member("a").unwrap().clone();
    assert_eq!((a.member_epoch(), a.previous_member_epoch()), (2, 1));
    // b's join moves the group to epoch 3; a follows on its next heartbeat.
    let b = h.join_ready("b", &["foo"]);
    let epoch = b.member_epoch;
    assert_eq!(epoch, 3);
    h.send(&heartbeat_request("a", 2)).unwrap();
    let a = h.group.member("a").unwrap().clone();
    assert_eq!((a.member_epoch(), a.previous_member_epoch()), (epoch, 2));

    // Ahead of the coordinator.
    let err = h.send(&heartbeat_request("a", epoch + 1)).unwrap_err();
    assert_eq!(err.code, codes::FENCED_MEMBER_EPOCH);
    assert_eq!(
        err.message,
        format!(
            "The share group member has a greater member epoch ({}) than the one known by the group coordinator ({epoch}). The member must abandon all its partitions and rejoin.",
            epoch + 1
        )
    );
    // The previous epoch is accepted: the response that moved it on may have been lost.
    let lost = h.send(&heartbeat_request("a", 2)).unwrap();
    assert_eq!(lost.member_epoch, epoch);
    // Older than the previous epoch: fenced.
    let err = h.send(&heartbeat_request("a", 1)).unwrap_err();
    assert_eq!(err.code, codes::FENCED_MEMBER_EPOCH);
    assert_eq!(
        err.message,
        format!(
            "The share group member has a smaller member epoch (1) than the one known by the group coordinator ({epoch}), and it does not match the previous member epoch (2). The member must abandon all its partitions and rejoin."
        )
    );
    // A failed heartbeat changes nothing and does not extend the session.
    let deadline = h.group.next_deadline();
    let counter = h.group.change_counter();
    h.now += 1_000;
    let _ = h.send(&heartbeat_request("a", 99));
    assert_eq!(h.group.next_deadline(), deadline);
    assert_eq!(h.group.change_counter(), counter);

    // KAFKA-19233: the fenced client rejoins with epoch 0 and its own ID and is taken back,
    // at its current epoch, with its assignment.
    let rejoined = h.send(&join_request("a", &["foo"])).unwrap();
    assert_eq!(rejoined.member_epoch, epoch);
    assert_eq!(
        assignment_of(&rejoined).as_ref(),
        Some(h.group.member("a").unwrap().assigned_partitions())
    );
    assert_eq!(h.group.member_count(), 2);
    assert_eq!(h.group.group_epoch(), epoch);
}

#[test]
fn unknown_members() {
    let mut h = Harness::new(&[("foo", 2)]);
    h.join_ready("a", &["foo"]);
    let err = h.send(&heartbeat_request("ghost", 1)).unwrap_err();
    assert_eq!(err.code, codes::UNKNOWN_MEMBER_ID);
    assert_eq!(err.message, "Member ghost is not a member of group grp.");
    let err = h.send(&heartbeat_request("ghost", -1)).unwrap_err();
    assert_eq!(err.code, codes::UNKNOWN_MEMBER_ID);
    // An unknown member may join with epoch 0.
    assert!(h.send(&join_request("ghost", &["foo"])).is_ok());
}

#[test]
fn leave_removes_the_member_and_rebalances() {
    let mut h = Harness::new(&[("foo", 4)]);
    h.join_ready("a", &["foo"]);
    let b = h.join_ready("b", &["foo"]);
    let a = h.send(&heartbeat_request("a", 2)).unwrap();
    assert_eq!(size(&assignment_of(&a).unwrap()), 2);
    assert_eq!(size(&assignment_of(&b).unwrap()), 2);
    let epoch = h.group.group_epoch();

    let left = h.send_full(&heartbeat_request("b", -1)).unwrap();
    assert_eq!(left.initialize, None);
    assert_eq!(
        left.response,
        ShareGroupHeartbeatResponse {
            member_id: Some("b".into()),
            member_epoch: -1,
            ..Default::default()
        }
    );
    assert!(!h.group.has_member("b"));
    assert!(h.group.target_assignment("b").is_none());
    assert_eq!(h.group.group_epoch(), epoch + 1);
    // a moves straight to the whole topic: no revocation step in share groups. As in Kafka,
    // this heartbeat bumps the group epoch once more: b's initialized partitions are no longer
    // in the target (`initializedAssignmentPending`).
    let a = h.send(&heartbeat_request("a", a.member_epoch)).unwrap();
    assert_eq!(a.member_epoch, epoch + 2);
    assert_eq!(h.group.group_epoch(), epoch + 2);
    assert_eq!(
        assignment_of(&a).unwrap(),
        [tp("foo", &[0, 1, 2, 3])].into()
    );
    // The last member leaves: Empty, and its leave is final.
    h.send(&heartbeat_request("a", -1)).unwrap();
    assert_eq!(h.group.state(), ShareGroupState::Empty);
    assert!(h.group.is_empty() && !h.group.is_unused());
    assert_eq!(h.group.next_deadline(), None);
    assert_eq!(
        code(h.send(&heartbeat_request("a", a.member_epoch))),
        codes::UNKNOWN_MEMBER_ID
    );
}

#[test]
fn session_expiry_removes_silent_members() {
    let mut h = Harness::new(&[("foo", 4)]);
    h.join_ready("a", &["foo"]);
    h.join_ready("b", &["foo"]);
    let mut epoch_a = h.send(&heartbeat_request("a", 2)).unwrap().member_epoch;
    assert_eq!(h.group.next_deadline(), Some(h.now + 45_000));
    // a heartbeats every 5 s, b goes silent.
    for _ in 0..8 {
        assert!(h.advance(5_000).is_empty());
        epoch_a = h
            .send(&heartbeat_request("a", epoch_a))
            .unwrap()
            .member_epoch;
    }
    let epoch = h.group.group_epoch();
    assert_eq!(h.advance(5_000), vec!["b".to_string()]);
    assert_eq!(h.group.group_epoch(), epoch + 1);
    assert_eq!(h.group.next_deadline(), Some(h.now + 40_000));
    let a = h.send(&heartbeat_request("a", epoch_a)).unwrap();
    assert_eq!(
        assignment_of(&a).unwrap(),
        [tp("foo", &[0, 1, 2, 3])].into()
    );
    // b comes back: unknown, so it rejoins with epoch 0.
    let mut b = Client::new("b", &["foo"]);
    b.epoch = 3;
    assert_eq!(code(b.heartbeat(&mut h)), codes::UNKNOWN_MEMBER_ID);
    assert!(b.heartbeat(&mut h).is_ok());
    // A group-level session timeout override applies from the next heartbeat.
    h.config.share_session_timeout_ms = 60_000;
    h.send(&heartbeat_request("b", b.epoch)).unwrap();
    assert_eq!(h.group.sessions.get("b"), Some(&(h.now + 60_000)));
    assert_eq!(h.group.sessions.get("a"), Some(&(h.now + 45_000)));
    assert_eq!(h.group.next_deadline(), Some(h.now + 45_000));
}

#[test]
fn group_max_size() {
    let mut h = Harness::new(&[("foo", 4)]);
    assert_eq!(h.config.share_max_size, 200);
    h.config.share_max_size = 2;
    h.join_ready("a", &["foo"]);
    h.join_ready("b", &["foo"]);
    let err = h.send(&join_request("c", &["foo"])).unwrap_err();
    assert_eq!(err.code, codes::GROUP_MAX_SIZE_REACHED);
    assert_eq!(
        err.message,
        "The share group has reached its maximum capacity of 2 members."
    );
    // Kafka checks the size before the member: a full group answers GROUP_MAX_SIZE_REACHED
    // even to an unknown member's non-zero epoch.
    assert_eq!(
        code(h.send(&heartbeat_request("c", 3))),
        codes::GROUP_MAX_SIZE_REACHED
    );
    // Members may still heartbeat and rejoin; once one leaves, c gets in.
    assert!(h.send(&join_request("a", &["foo"])).is_ok());
    h.send(&heartbeat_request("b", -1)).unwrap();
    assert!(h.send(&join_request("c", &["foo"])).is_ok());
}

#[test]
fn members_joining_and_leaving_move_partitions_directly() {
    let mut h = Harness::new(&[("foo", 6)]);
    let mut clients: Vec<Client> = ["a", "b", "c"]
        .iter()
        .map(|id| Client::new(id, &["foo"]))
        .collect();
    clients[0].heartbeat(&mut h).unwrap();
    h.initialize_pending();
    clients[0].heartbeat(&mut h).unwrap();
    assert_eq!(size(&clients[0].assignment), 6);
    // b and c join; each member reaches its target in one heartbeat.
    clients[1].heartbeat(&mut h).unwrap();
    clients[2].heartbeat(&mut h).unwrap();
    for c in clients.iter_mut() {
        c.heartbeat(&mut h).unwrap();
    }
    let epoch = h.group.group_epoch();
    assert_eq!(h.group.assignment_epoch(), epoch);
    for c in &clients {
        assert_eq!(c.epoch, epoch);
        assert_eq!(size(&c.assignment), 2);
    }
    assert!(h.sharing().values().all(|n| *n == 1));
    assert_eq!(h.sharing().len(), 6);
    // a kept two of the partitions it had (stickiness).
    let a_before: BTreeSet<i32> = (0..6).collect();
    assert!(clients[0].assignment[&topic_id("foo")].is_subset(&a_before));

    // c leaves: its partitions go to a and b, who keep theirs.
    let before: Vec<Assignment> = clients.iter().map(|c| c.assignment.clone()).collect();
    h.send(&heartbeat_request("c", -1)).unwrap();
    clients.pop();
    for c in clients.iter_mut() {
        c.heartbeat(&mut h).unwrap();
    }
    for (c, old) in clients.iter().zip(&before) {
        assert_eq!(size(&c.assignment), 3);
        assert!(old[&topic_id("foo")].is_subset(&c.assignment[&topic_id("foo")]));
    }
    assert_eq!(h.sharing().len(), 6);
}

#[test]
fn more_members_than_partitions_share_them() {
    let mut h = Harness::new(&[("foo", 2)]);
    let mut clients: Vec<Client> = (0..5)
        .map(|i| Client::new(&format!("m{i}"), &["foo"]))
        .collect();
    for c in clients.iter_mut() {
        c.heartbeat(&mut h).unwrap();
    }
    h.initialize_pending();
    for _ in 0..2 {
        for c in clients.iter_mut() {
            c.heartbeat(&mut h).unwrap();
        }
    }
    // ceil(5 / 2) = 3 members per partition; everyone has at least one.
    let counts = h.sharing();
    assert_eq!(
        counts.values().copied().collect::<Vec<_>>(),
        vec![3, 3],
        "{counts:?}"
    );
    assert!(clients.iter().all(|c| !c.assignment.is_empty()));
    let sizes: Vec<usize> = clients.iter().map(|c| size(&c.assignment)).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 6);
}

#[test]
fn partition_growth_rebalances_after_initialization() {
    let mut h = Harness::new(&[("foo", 2)]);
    h.join_ready("a", &["foo"]);
    let b = h.join_ready("b", &["foo"]);
    let a = h.send(&heartbeat_request("a", 2)).unwrap();
    let (mut ea, mut eb) = (a.member_epoch, b.member_epoch);
    assert_eq!(h.sharing().len(), 2);
    let epoch = h.group.group_epoch();

    h.set_partitions("foo", 4);
    assert!(h.group.on_topics_changed(&h.topics, h.now));
    assert_eq!(h.group.group_epoch(), epoch + 1);
    // The next heartbeat recomputes the target; partitions 2 and 3 have no share state yet,
    // so they are asked for, not assigned.
    let r = h.send_full(&heartbeat_request("a", ea)).unwrap();
    ea = r.response.member_epoch;
    assert_eq!(ea, epoch + 1);
    assert_eq!(
        r.initialize,
        Some(InitializeShareState {
            group_epoch: epoch + 1,
            partitions: [tp("foo", &[2, 3])].into(),
        })
    );
    assert_eq!(h.sharing().len(), 2);
    h.initialize_pending();
    let r = h.send(&heartbeat_request("b", eb)).unwrap();
    eb = r.member_epoch;
    assert_eq!(
        eb,
        epoch + 2,
        "the initialized partitions bumped the group epoch"
    );
    let r = h.send(&heartbeat_request("a", ea)).unwrap();
    assert_eq!(r.member_epoch, epoch + 2);
    assert_eq!(h.sharing().len(), 4);
    assert!(h.sharing().values().all(|n| *n == 1));
    // Nothing more to do: further heartbeats keep the epoch.
    h.send(&heartbeat_request("b", eb)).unwrap();
    assert_eq!(h.group.group_epoch(), epoch + 2);
    // A heartbeat that sees the change before the broker reported it bumps by itself.
    h.set_partitions("foo", 5);
    let r = h.send_full(&heartbeat_request("b", eb)).unwrap();
    assert_eq!(r.response.member_epoch, epoch + 3);
    assert_eq!(
        r.initialize.map(|i| i.partitions),
        Some([tp("foo", &[4])].into())
    );
}

#[test]
fn subscription_changes() {
    let mut h = Harness::new(&[("foo", 2), ("bar", 2)]);
    h.join_ready("a", &["foo"]);
    let epoch = h.group.group_epoch();
    // a switches to bar: foo is dropped at once, bar is asked to be initialized.
    let mut change = heartbeat_request("a", epoch);
    change.subscribed_topic_names = Some(vec!["bar".into(), "bar".into()]);
    let r = h.send_full(&change).unwrap();
    assert_eq!(r.response.member_epoch, epoch + 1);
    assert_eq!(assignment_of(&r.response), Some(Assignment::new()));
    assert_eq!(
        r.initialize.map(|i| i.partitions),
        Some([tp("bar", &[0, 1])].into())
    );
    assert_eq!(
        h.group.member("a").unwrap().subscribed_topic_names(),
        ["bar".to_string()]
    );
    assert!(h.group.is_subscribed_to("bar") && !h.group.is_subscribed_to("foo"));
    h.initialize_pending();
    let r = h.send(&heartbeat_request("a", epoch + 1)).unwrap();
    assert_eq!(assignment_of(&r).unwrap(), [tp("bar", &[0, 1])].into());
    // foo's share state stays initialized: subscribing back needs no new initialization.
    let mut back = heartbeat_request("a", r.member_epoch);
    back.subscribed_topic_names = Some(vec!["foo".into(), "bar".into()]);
    let r = h.send_full(&back).unwrap();
    assert_eq!(r.initialize, None);
    assert_eq!(
        assignment_of(&r.response).unwrap(),
        [tp("foo", &[0, 1]), tp("bar", &[0, 1])].into()
    );
    // Subscribing to a topic that does not exist yet: nothing to assign or initialize.
    let mut missing = heartbeat_request("a", r.response.member_epoch);
    missing.subscribed_topic_names = Some(vec!["later".into()]);
    let r = h.send_full(&missing).unwrap();
    assert_eq!(r.initialize, None);
    assert_eq!(assignment_of(&r.response), Some(Assignment::new()));
    assert!(h.group.is_subscribed_to("later"));
    // It is created: the group epoch moves and its partitions are asked for.
    h.set_partitions("later", 1);
    assert!(h.group.on_topics_changed(&h.topics, h.now));
    let r = h
        .send_full(&heartbeat_request("a", r.response.member_epoch))
        .unwrap();
    assert_eq!(
        r.initialize.map(|i| i.partitions),
        Some([tp("later", &[0])].into())
    );
}

#[test]
fn heterogeneous_subscriptions() {
    let mut h = Harness::new(&[("foo", 4), ("bar", 2)]);
    let mut clients = [
        Client::new("a", &["foo"]),
        Client::new("b", &["foo", "bar"]),
        Client::new("c", &["bar"]),
    ];
    for c in clients.iter_mut() {
        c.heartbeat(&mut h).unwrap();
    }
    h.initialize_pending();
    for _ in 0..2 {
        for c in clients.iter_mut() {
            c.heartbeat(&mut h).unwrap();
        }
    }
    // Each topic is balanced among its own subscribers.
    assert_eq!(clients[0].assignment[&topic_id("foo")].len(), 2);
    assert_eq!(clients[1].assignment[&topic_id("foo")].len(), 2);
    assert_eq!(clients[1].assignment[&topic_id("bar")].len(), 1);
    assert_eq!(clients[2].assignment[&topic_id("bar")].len(), 1);
    assert!(!clients[0].assignment.contains_key(&topic_id("bar")));
    assert!(!clients[2].assignment.contains_key(&topic_id("foo")));
    assert_eq!(h.sharing().len(), 6);
}

#[test]
fn initialization_retries_and_failures() {
    let mut h = Harness::new(&[("foo", 2)]);
    let r = h.send_full(&join_request("a", &["foo"])).unwrap();
    assert!(r.initialize.is_some());
    h.pending.clear(); // lost
    // Asked again only once the retry interval has passed.
    h.now += 29_999;
    assert_eq!(
        h.send_full(&heartbeat_request("a", 1)).unwrap().initialize,
        None
    );
    h.now += 1;
    let retry = h.send_full(&heartbeat_request("a", 1)).unwrap();
    assert_eq!(
        retry.initialize.map(|i| i.partitions),
        Some([tp("foo", &[0, 1])].into())
    );
    // The share coordinator fails partition 1 and initializes partition 0.
    h.pending.clear();
    assert!(h.group.on_initialize_failed(&[tp("foo", &[1])].into()));
    assert!(!h.group.on_initialize_failed(&[tp("foo", &[1])].into()));
    assert!(
        h.group
            .on_partitions_initialized(&[tp("foo", &[0])].into(), &h.topics)
    );
    // A failed partition is asked for again at once; the initialized one is assigned.
    let r = h.send_full(&heartbeat_request("a", 1)).unwrap();
    assert_eq!(r.response.member_epoch, 2);
    assert_eq!(
        assignment_of(&r.response).unwrap(),
        [tp("foo", &[0])].into()
    );
    assert_eq!(
        r.initialize.map(|i| i.partitions),
        Some([tp("foo", &[1])].into())
    );
    // Reports for unknown topics or partitions are ignored.
    assert!(
        !h.group
            .on_partitions_initialized(&[tp("gone", &[0]), tp("foo", &[7])].into(), &h.topics)
    );
}

#[test]
fn deleted_topics_forget_their_share_state() {
    let mut h = Harness::new(&[("foo", 2)]);
    h.join_ready("a", &["foo"]);
    let epoch = h.group.group_epoch();
    let old_id = topic_id("foo");
    h.topics.by_name.clear();
    assert!(h.group.on_topics_changed(&h.topics, h.now));
    assert!(h.group.initialized_partitions().is_empty());
    let r = h.send(&heartbeat_request("a", epoch)).unwrap();
    assert_eq!(r.member_epoch, epoch + 1);
    assert_eq!(assignment_of(&r), Some(Assignment::new()));
    // Recreated under the same name with a new ID: initialized afresh.
    let new_id = Uuid::from_u128(42);
    h.topics.insert("foo", new_id, 1);
    assert!(h.group.on_topics_changed(&h.topics, h.now));
    let r = h.send_full(&heartbeat_request("a", epoch + 1)).unwrap();
    let asked = r.initialize.unwrap().partitions;
    assert_eq!(asked, [(new_id, BTreeSet::from([0]))].into());
    assert!(!asked.contains_key(&old_id));
}

/// DeleteShareGroupOffsets: the topic's partitions are no longer initialized, and a member that
/// subscribes to it again has them initialized afresh.
#[test]
fn deleted_states_are_initialized_again() {
    let mut h = Harness::new(&[("foo", 2), ("bar", 1)]);
    h.join_ready("a", &["foo", "bar"]);
    let foo = topic_id("foo");
    assert!(h.group.initialized_partitions().contains_key(&foo));
    let mut leave = heartbeat_request("a", h.group.group_epoch());
    leave.member_epoch = -1;
    h.send(&leave).unwrap();
    assert!(h.group.is_empty());
    assert!(h.group.on_states_deleted(&BTreeSet::from([foo])));
    assert!(!h.group.on_states_deleted(&BTreeSet::from([foo])));
    assert!(!h.group.initialized_partitions().contains_key(&foo));
    assert!(
        h.group
            .initialized_partitions()
            .contains_key(&topic_id("bar"))
    );
    let r = h.send_full(&join_request("b", &["foo", "bar"])).unwrap();
    assert_eq!(
        r.initialize.map(|i| i.partitions),
        Some([tp("foo", &[0, 1])].into())
    );
}

#[test]
fn describe_output() {
    let mut h = Harness::new(&[("foo", 2), ("bar", 1)]);
    let empty = h.group.describe(&h.topics);
    assert_eq!(&*empty.group_state, "Empty");
    assert!(empty.members.is_empty());
    let mut join = join_request("a", &["foo", "bar"]);
    join.rack_id = Some("rack-1".into());
    h.send(&join).unwrap();
    h.initialize_pending();
    h.send(&heartbeat_request("a", 1)).unwrap();
    h.send(&join_request("b", &["foo"])).unwrap();

    let d = h.group.describe(&h.topics);
    assert_eq!(d.error_code, 0);
    assert_eq!(&*d.group_id, GROUP);
    assert_eq!(&*d.group_state, "Stable");
    assert_eq!(h.group.state().lower_case_name(), "stable");
    assert_eq!(d.group_epoch, 3);
    assert_eq!(d.assignment_epoch, 3);
    assert_eq!(&*d.assignor_name, "simple");
    assert_eq!(d.authorized_operations, i32::MIN);
    assert_eq!(d.members.len(), 2);
    let a = &d.members[0];
    assert_eq!(&*a.member_id, "a");
    assert_eq!(a.rack_id.as_deref(), Some("rack-1"));
    assert_eq!(a.member_epoch, 2, "a has not heartbeated since b joined");
    assert_eq!(&*a.client_id, "client");
    assert_eq!(&*a.client_host, "/127.0.0.1");
    assert_eq!(names_of(a), vec!["bar", "foo"]);
    let topics: Vec<(&str, Vec<i32>)> = a
        .assignment
        .topic_partitions
        .iter()
        .map(|t| (&*t.topic_name, t.partitions.clone()))
        .collect();
    let mut expected = vec![("foo", vec![0, 1]), ("bar", vec![0])];
    expected.sort_by_key(|(name, _)| topic_id(name));
    assert_eq!(topics, expected);
    let b = &d.members[1];
    assert_eq!(
        (&*b.member_id, b.member_epoch, b.rack_id.clone()),
        ("b", 3, None)
    );
    assert_eq!(names_of(b), vec!["foo"]);
    // Partitions of topics the image no longer has are left out.
    let mut image = h.topics.clone();
    image.by_name.remove("bar");
    let d = h.group.describe(&image);
    assert_eq!(d.members[0].assignment.topic_partitions.len(), 1);

    // Errors for groups that are missing or of another type.
    let missing = describe_error("x", &group_not_found("x"));
    assert_eq!(
        (missing.error_code, missing.error_message.as_deref()),
        (codes::GROUP_ID_NOT_FOUND, Some("Group x not found."))
    );
    assert_eq!(&*missing.group_id, "x");
    let other = describe_error("c", &not_a_share_group("c"));
    assert_eq!(
        (other.error_code, other.error_message.as_deref()),
        (
            codes::GROUP_ID_NOT_FOUND,
            Some("Group c is not a share group.")
        )
    );
    let err = share_group_not_found("grp");
    assert_eq!(
        (err.code.code(), err.message.as_str()),
        (codes::GROUP_ID_NOT_FOUND, "Share group grp not found.")
    );
}

#[test]
fn delete_only_when_empty() {
    let mut h = Harness::new(&[("foo", 1)]);
    assert!(h.group.validate_delete().is_ok());
    h.send(&join_request("a", &["foo"])).unwrap();
    assert_eq!(
        h.group.validate_delete().unwrap_err().code,
        codes::NON_EMPTY_GROUP
    );
}

#[test]
fn change_counter_tracks_persistent_changes_only() {
    let mut h = Harness::new(&[("foo", 2)]);
    let c0 = h.group.change_counter();
    h.join_ready("a", &["foo"]);
    let c1 = h.group.change_counter();
    assert!(c1 > c0);
    for _ in 0..5 {
        h.now += 1000;
        h.send(&heartbeat_request("a", 2)).unwrap();
    }
    assert_eq!(h.group.change_counter(), c1);
    let mut rack = heartbeat_request("a", 2);
    rack.rack_id = Some("r2".into());
    h.send(&rack).unwrap();
    let c2 = h.group.change_counter();
    assert!(c2 > c1);
    let _ = h.send(&heartbeat_request("a", 99));
    assert_eq!(h.group.change_counter(), c2);
    // Timer-only work changes nothing persistent; a removal does.
    assert!(h.advance(1000).is_empty());
    assert_eq!(h.group.change_counter(), c2);
    assert_eq!(h.advance(45_000), vec!["a".to_string()]);
    assert!(h.group.change_counter() > c2);
}

#[test]
fn snapshot_round_trip_and_restore_timers() {
    let mut h = Harness::new(&[("foo", 4), ("bar", 2)]);
    let mut join = join_request("a", &["foo"]);
    join.rack_id = Some("rack-1".into());
    h.send(&join).unwrap();
    h.initialize_pending();
    h.send(&heartbeat_request("a", 1)).unwrap();
    h.join_ready("b", &["foo"]);
    // c subscribes to bar, whose initialization is still under way at the snapshot.
    let c = h.send_full(&join_request("c", &["bar"])).unwrap();
    assert!(c.initialize.is_some());
    h.pending.clear();

    let snapshot = h.group.snapshot();
    let json = serde_json::to_string(&snapshot).unwrap();
    let back: ShareGroupSnapshot = serde_json::from_str(&json).unwrap();
    assert_eq!(back, snapshot);
    let restored_at = h.now + 60_000;
    let restored = ShareGroup::restore(back, restored_at);
    assert_eq!(restored.snapshot(), snapshot);
    assert_eq!(restored.group_epoch(), h.group.group_epoch());
    assert_eq!(restored.assignment_epoch(), h.group.assignment_epoch());
    for m in h.group.members() {
        assert_eq!(restored.member(m.member_id()), Some(m));
        assert_eq!(
            restored.target_assignment(m.member_id()),
            h.group.target_assignment(m.member_id())
        );
    }
    assert_eq!(restored.member("a").unwrap().rack_id(), Some("rack-1"));
    assert_eq!(
        restored.initializing_partitions(),
        [tp("bar", &[0, 1])].into()
    );
    // Every session restarts from the restore.
    assert_eq!(restored.next_deadline(), Some(restored_at + 45_000));
    assert_eq!(restored.sessions.len(), 3);

    let mut h2 = Harness {
        group: restored,
        topics: h.topics.clone(),
        config: h.config.clone(),
        now: restored_at,
        pending: Vec::new(),
    };
    h2.check_invariants();
    // The members carry on at their epochs.
    let a_epoch = h2.group.member("a").unwrap().member_epoch();
    let r = h2.send(&heartbeat_request("a", a_epoch)).unwrap();
    assert_eq!(r.member_epoch, h2.group.assignment_epoch());
    // The unanswered initialization counts from the restore: asked again 30 s later.
    let c_epoch = h2.group.member("c").unwrap().member_epoch();
    assert_eq!(
        h2.send_full(&heartbeat_request("c", c_epoch))
            .unwrap()
            .initialize,
        None
    );
    h2.now += 30_000;
    assert!(
        h2.send_full(&heartbeat_request("c", c_epoch))
            .unwrap()
            .initialize
            .is_some()
    );
    h2.send(&heartbeat_request("a", a_epoch)).unwrap();
    // b, silent since the restore, expires from its restored timer.
    assert!(h2.advance(14_999).is_empty());
    let removed = h2.advance(1);
    assert_eq!(removed, vec!["b".to_string()]);
}

#[test]
fn restore_tolerates_duplicate_members() {
    let mut h = Harness::new(&[("foo", 1)]);
    h.join_ready("a", &["foo"]);
    let mut snapshot = h.group.snapshot();
    let mut dup = snapshot.members[0].clone();
    dup.member_epoch = 77;
    dup.subscribed_topic_names = vec!["z".into(), "a".into(), "z".into()];
    snapshot.members.push(dup);
    let restored = ShareGroup::restore(snapshot, 0);
    assert_eq!(restored.member_count(), 1);
    assert_eq!(restored.member("a").unwrap().member_epoch(), 2);
}

#[test]
fn config_defaults_and_group_overrides() {
    let config = GroupConfig::default();
    assert_eq!(config.share_session_timeout_ms, 45_000);
    assert_eq!(config.share_heartbeat_interval_ms, 5_000);
    assert_eq!(config.share_max_size, 200);
    assert_eq!(config.share_initialize_retry_interval_ms, 30_000);
    assert_eq!(config.share_session_timeout_bounds(), (45_000, 60_000));
    assert_eq!(config.share_heartbeat_interval_bounds(), (5_000, 15_000));
    let tuned = config.with_overrides([
        ("share.session.timeout.ms", "50000"),
        ("share.heartbeat.interval.ms", "7000"),
        ("share.record.lock.duration.ms", "1"),
    ]);
    assert_eq!(tuned.share_session_timeout_ms, 50_000);
    assert_eq!(tuned.share_heartbeat_interval_ms, 7_000);
    assert_eq!(tuned.consumer_session_timeout_ms, 45_000);

    // The heartbeat interval given to members follows the group's config.
    let mut h = Harness::new(&[("foo", 1)]);
    h.config = tuned;
    let r = h.send(&join_request("a", &["foo"])).unwrap();
    assert_eq!(r.heartbeat_interval_ms, 7_000);
    assert_eq!(h.group.next_deadline(), Some(h.now + 50_000));
}
