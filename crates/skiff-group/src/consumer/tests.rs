//! Scenario tests mirroring Kafka's GroupMetadataManagerTest / ConsumerGroupHeartbeatRequestTest.

use std::collections::BTreeSet;

use skiff_protocol::Uuid;
use skiff_protocol::error_codes as codes;

use super::testkit::*;
use super::*;

fn tp(name: &str, partitions: &[i32]) -> (Uuid, BTreeSet<i32>) {
    (topic_id(name), partitions.iter().copied().collect())
}

fn code(result: Result<ConsumerGroupHeartbeatResponse, GroupError>) -> i16 {
    match result {
        Ok(_) => 0,
        Err(e) => e.code.code(),
    }
}

#[test]
fn v0_generates_a_kafka_member_id() {
    let mut h = Harness::new(&[("foo", 3)]);
    let response = h.send_version(&join_request("", &["foo"]), 0).unwrap();
    let id = response.member_id.clone().unwrap();
    assert_eq!(id.len(), 22);
    let parsed: Uuid = id.parse().unwrap();
    assert_eq!(parsed.to_string(), &*id);
    assert_eq!(response.member_epoch, 1);
    assert_eq!(response.heartbeat_interval_ms, 5000);
    assert_eq!(
        assignment_of(&response).unwrap(),
        [tp("foo", &[0, 1, 2])].into()
    );
    assert_eq!(h.group.member_count(), 1);
    assert!(h.group.has_member(&id));
}

#[test]
fn v1_requires_a_member_id() {
    let mut h = Harness::new(&[("foo", 3)]);
    let err = h.send_version(&join_request("", &["foo"]), 1).unwrap_err();
    assert_eq!(err.code, codes::INVALID_REQUEST);
    assert_eq!(err.message, "MemberId can't be empty.");
    // Blank (whitespace) counts as empty.
    let err = h
        .send_version(&join_request("  ", &["foo"]), 1)
        .unwrap_err();
    assert_eq!(err.code, codes::INVALID_REQUEST);
    assert!(h.group.is_empty());
}

#[test]
fn validation_rules_in_kafka_order() {
    let config = GroupConfig::default();
    let check =
        |request: ConsumerGroupHeartbeatRequest, version: i16, expected: Option<(i16, &str)>| {
            let result = validate_heartbeat(&request, version, &config);
            match expected {
                None => assert_eq!(result, Ok(()), "{request:?}"),
                Some((code, message)) => {
                    let err = result.unwrap_err();
                    assert_eq!(
                        (err.code.code(), err.message.as_str()),
                        (code, message),
                        "{request:?}"
                    );
                }
            }
        };
    let ok_join = join_request("m", &["foo"]);
    check(ok_join.clone(), 1, None);
    // v0 epoch 0 may omit the member ID, but not epoch > 0 or -1.
    check(join_request("", &["foo"]), 0, None);
    check(
        heartbeat_request("", 3, None),
        0,
        Some((42, "MemberId can't be empty.")),
    );
    check(
        heartbeat_request("", -1, None),
        0,
        Some((42, "MemberId can't be empty.")),
    );
    // Rule 1 before rule 2.
    let mut r = join_request("", &["foo"]);
    r.group_id = "".into();
    check(r, 1, Some((42, "MemberId can't be empty.")));
    let mut r = ok_join.clone();
    r.group_id = " ".into();
    r.instance_id = Some("".into());
    check(r, 1, Some((42, "GroupId can't be empty.")));
    let mut r = ok_join.clone();
    r.instance_id = Some(" ".into());
    r.rack_id = Some("".into());
    check(r, 1, Some((42, "InstanceId can't be empty.")));
    let mut r = ok_join.clone();
    r.rack_id = Some("".into());
    r.rebalance_timeout_ms = -1;
    check(r, 1, Some((42, "RackId can't be empty.")));
    // Rule 3, in order.
    let mut r = ok_join.clone();
    r.rebalance_timeout_ms = -1;
    r.topic_partitions = None;
    check(
        r,
        1,
        Some((42, "RebalanceTimeoutMs must be provided in first request.")),
    );
    let mut r = ok_join.clone();
    r.topic_partitions = None;
    check(
        r,
        1,
        Some((42, "TopicPartitions must be empty when (re-)joining.")),
    );
    let mut r = ok_join.clone();
    r.topic_partitions = Some(owned_of(&[tp("foo", &[0])].into()));
    check(
        r,
        1,
        Some((42, "TopicPartitions must be empty when (re-)joining.")),
    );
    let mut r = ok_join.clone();
    r.subscribed_topic_names = None;
    r.server_assignor = Some("nope".into());
    check(
        r,
        1,
        Some((
            42,
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
        )),
    );
    // Empty names or an empty regex are allowed (subscribed to nothing).
    let mut r = ok_join.clone();
    r.subscribed_topic_names = Some(Vec::new());
    check(r, 1, None);
    let mut r = ok_join.clone();
    r.subscribed_topic_names = None;
    r.subscribed_topic_regex = Some("".into());
    check(r, 1, None);
    // Rule 4.
    check(
        heartbeat_request("m", -2, None),
        1,
        Some((42, "InstanceId can't be null.")),
    );
    check(
        heartbeat_request("m", -3, None),
        1,
        Some((42, "MemberEpoch is invalid.")),
    );
    // Rule 5 comes last.
    let mut r = heartbeat_request("m", -3, None);
    r.server_assignor = Some("nope".into());
    check(r, 1, Some((42, "MemberEpoch is invalid.")));
    let mut r = ok_join.clone();
    r.server_assignor = Some("sticky".into());
    check(
        r,
        1,
        Some((
            112,
            "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
        )),
    );
    let mut r = ok_join;
    r.server_assignor = Some("range".into());
    check(r, 1, None);
}

#[test]
fn unknown_member_with_nonzero_epoch() {
    let mut h = Harness::new(&[("foo", 3)]);
    h.send(&join_request("a", &["foo"])).unwrap();
    let err = h.send(&heartbeat_request("ghost", 1, None)).unwrap_err();
    assert_eq!(err.code, codes::UNKNOWN_MEMBER_ID);
    let err = h.send(&heartbeat_request("ghost", -1, None)).unwrap_err();
    assert_eq!(err.code, codes::UNKNOWN_MEMBER_ID);
}

#[test]
fn first_heartbeat_retry_is_idempotent() {
    let mut h = Harness::new(&[("foo", 3)]);
    let first = h.send(&join_request("a", &["foo"])).unwrap();
    let counter = h.group.change_counter();
    let epoch = h.group.group_epoch();
    // The response was lost: the client retries with epoch 0 and the same ID.
    let second = h.send(&join_request("a", &["foo"])).unwrap();
    assert_eq!(first, second);
    assert_eq!(h.group.member_count(), 1);
    assert_eq!(h.group.group_epoch(), epoch);
    assert_eq!(h.group.change_counter(), counter, "nothing to persist");
    assert_eq!(second.member_epoch, 1);
    assert_eq!(
        assignment_of(&second).unwrap(),
        [tp("foo", &[0, 1, 2])].into()
    );
}

#[test]
fn leave_before_join_response() {
    let mut h = Harness::new(&[("foo", 3)]);
    h.send(&join_request("a", &["foo"])).unwrap();
    h.send(&join_request("b", &["foo"])).unwrap();
    let epoch = h.group.group_epoch();
    // "b" never saw its join response and leaves with its own ID.
    let response = h.send(&heartbeat_request("b", -1, None)).unwrap();
    assert_eq!(response.member_epoch, -1);
    assert_eq!(response.member_id.as_deref(), Some("b"));
    assert!(!h.group.has_member("b"));
    assert_eq!(h.group.group_epoch(), epoch + 1);
    // "a" gets everything back.
    let mut a = Client::new("a", &["foo"]);
    a.epoch = 1;
    a.owned = [tp("foo", &[0, 1, 2])].into();
    a.heartbeat(&mut h, false).unwrap();
    a.heartbeat(&mut h, false).unwrap();
    assert_eq!(
        h.group.member("a").unwrap().assigned_partitions(),
        &[tp("foo", &[0, 1, 2])].into()
    );
    assert_eq!(h.group.state(), GroupState::Stable);
}

#[test]
fn fenced_member_rejoins_with_epoch_zero_and_same_id() {
    let mut h = Harness::new(&[("foo", 3)]);
    let joined = h.send(&join_request("a", &["foo"])).unwrap();
    assert_eq!(joined.member_epoch, 1);
    // Ahead of the coordinator.
    let err = h.send(&heartbeat_request("a", 5, None)).unwrap_err();
    assert_eq!(err.code, codes::FENCED_MEMBER_EPOCH);
    // The client rejoins with epoch 0 and the same ID: same member, current epoch, full
    // assignment.
    let rejoined = h.send(&join_request("a", &["foo"])).unwrap();
    assert_eq!(rejoined.member_epoch, 1);
    assert_eq!(
        assignment_of(&rejoined).unwrap(),
        [tp("foo", &[0, 1, 2])].into()
    );
    assert_eq!(h.group.member_count(), 1);

    // A member the coordinator removed (rebalance timeout) also rejoins with the same ID.
    h.send(&heartbeat_request("a", -1, None)).unwrap();
    let back = h.send(&join_request("a", &["foo"])).unwrap();
    assert_eq!(back.member_epoch, h.group.group_epoch());
    assert_eq!(
        assignment_of(&back).unwrap(),
        [tp("foo", &[0, 1, 2])].into()
    );
}

#[test]
fn rejoin_with_epoch_zero_while_revoking_moves_on() {
    // KAFKA-19233 "UNREVOKED_PARTITIONS" case: the rejoining member owns nothing any more.
    let mut h = Harness::new(&[("foo", 4)]);
    let mut a = Client::new("a", &["foo"]);
    a.heartbeat(&mut h, false).unwrap();
    let mut b = Client::new("b", &["foo"]);
    b.heartbeat(&mut h, false).unwrap();
    a.heartbeat(&mut h, false).unwrap();
    assert_eq!(
        h.group.member("a").unwrap().state(),
        MemberState::UnrevokedPartitions
    );
    let rejoined = h.send(&join_request("a", &["foo"])).unwrap();
    assert_eq!(rejoined.member_epoch, h.group.assignment_epoch());
    assert_eq!(h.group.member("a").unwrap().state(), MemberState::Stable);
    assert_eq!(
        assignment_of(&rejoined)
            .unwrap()
            .values()
            .map(BTreeSet::len)
            .sum::<usize>(),
        2
    );
}

#[test]
fn smaller_epoch_rules() {
    let mut h = Harness::new(&[("foo", 4)]);
    let mut a = Client::new("a", &["foo"]);
    a.heartbeat(&mut h, false).unwrap(); // epoch 1, owns 0..4
    let mut b = Client::new("b", &["foo"]);
    b.heartbeat(&mut h, false).unwrap(); // epoch 2, waits
    a.heartbeat(&mut h, false).unwrap(); // revoke 2 partitions, stays at epoch 1
    a.heartbeat(&mut h, false).unwrap(); // revoked -> epoch 2
    assert_eq!(a.epoch, 2);
    let member = h.group.member("a").unwrap();
    assert_eq!(
        (member.member_epoch(), member.previous_member_epoch()),
        (2, 1)
    );
    let kept = member.assigned_partitions().clone();

    // The response with epoch 2 was lost: epoch 1 with a subset of the assignment is accepted.
    let ok = h.send(&heartbeat_request("a", 1, Some(&kept))).unwrap();
    assert_eq!(ok.member_epoch, 2);
    let one: Assignment = [(
        topic_id("foo"),
        kept.values()
            .next()
            .unwrap()
            .iter()
            .take(1)
            .copied()
            .collect(),
    )]
    .into();
    assert!(h.send(&heartbeat_request("a", 1, Some(&one))).is_ok());
    // Not a subset -> fenced; owned partitions unknown -> fenced.
    let all: Assignment = [tp("foo", &[0, 1, 2, 3])].into();
    assert_eq!(
        code(h.send(&heartbeat_request("a", 1, Some(&all)))),
        codes::FENCED_MEMBER_EPOCH
    );
    assert_eq!(
        code(h.send(&heartbeat_request("a", 1, None))),
        codes::FENCED_MEMBER_EPOCH
    );
    // Older than the previous epoch -> fenced.
    let mut h2 = Harness::new(&[("foo", 1)]);
    h2.send(&join_request("x", &["foo"])).unwrap();
    h2.send(&join_request("y", &["foo"])).unwrap();
    h2.send(&join_request("z", &["foo"])).unwrap();
    let z = h2.group.member("z").unwrap();
    assert_eq!((z.member_epoch(), z.previous_member_epoch()), (3, 0));
    assert_eq!(
        code(h2.send(&heartbeat_request("z", 1, Some(&Assignment::new())))),
        codes::FENCED_MEMBER_EPOCH
    );
    assert_eq!(
        code(h2.send(&heartbeat_request("z", 2, Some(&Assignment::new())))),
        codes::FENCED_MEMBER_EPOCH
    );
}

/// Drives clients until a round where nothing changes, checking after every heartbeat that the
/// clients' views never overlap.
fn settle(h: &mut Harness, clients: &mut [Client], max_rounds: usize) -> usize {
    for round in 1..=max_rounds {
        let before: Vec<(i32, Assignment)> =
            clients.iter().map(|c| (c.epoch, c.owned.clone())).collect();
        let counter = h.group.change_counter();
        for i in 0..clients.len() {
            clients[i].heartbeat(h, false).unwrap();
            check_client_views(clients);
        }
        let after: Vec<(i32, Assignment)> =
            clients.iter().map(|c| (c.epoch, c.owned.clone())).collect();
        if before == after && counter == h.group.change_counter() {
            return round;
        }
    }
    panic!("did not converge in {max_rounds} rounds");
}

fn check_client_views(clients: &[Client]) {
    let mut seen = BTreeSet::new();
    for c in clients {
        for (t, ps) in &c.owned {
            for p in ps {
                assert!(seen.insert((*t, *p)), "{t:?}-{p} owned by two clients");
            }
        }
    }
}

#[test]
fn three_members_join_one_after_another() {
    let mut h = Harness::new(&[("foo", 6)]);
    let mut clients = vec![Client::new("a", &["foo"])];
    clients[0].heartbeat(&mut h, false).unwrap();
    assert_eq!(clients[0].owned, [tp("foo", &[0, 1, 2, 3, 4, 5])].into());
    settle(&mut h, &mut clients, 5);

    // b joins: it is at the new epoch but gets nothing until a releases (unreleased).
    let mut b = Client::new("b", &["foo"]);
    let joined = b.heartbeat(&mut h, false).unwrap();
    assert_eq!(joined.member_epoch, 2);
    assert!(b.owned.is_empty());
    assert_eq!(
        h.group.member("b").unwrap().state(),
        MemberState::UnreleasedPartitions
    );
    assert_eq!(h.group.state(), GroupState::Reconciling);
    clients.push(b);
    // a is asked to revoke first, keeping its epoch.
    let r = clients[0].heartbeat(&mut h, false).unwrap();
    assert_eq!(r.member_epoch, 1);
    assert_eq!(
        clients[0].owned.values().map(BTreeSet::len).sum::<usize>(),
        3
    );
    assert_eq!(
        h.group.member("a").unwrap().state(),
        MemberState::UnrevokedPartitions
    );
    check_client_views(&clients);
    // b still waits: a has not confirmed.
    clients[1].heartbeat(&mut h, false).unwrap();
    assert!(clients[1].owned.is_empty());
    // a confirms (owned no longer includes the revoked ones) and moves to epoch 2.
    let r = clients[0].heartbeat(&mut h, false).unwrap();
    assert_eq!(r.member_epoch, 2);
    // Now b gets the released partitions.
    clients[1].heartbeat(&mut h, false).unwrap();
    assert_eq!(
        clients[1].owned.values().map(BTreeSet::len).sum::<usize>(),
        3
    );
    check_client_views(&clients);
    settle(&mut h, &mut clients, 5);

    // c joins.
    let mut c = Client::new("c", &["foo"]);
    c.heartbeat(&mut h, false).unwrap();
    clients.push(c);
    let rounds = settle(&mut h, &mut clients, 10);
    assert!(rounds <= 4, "{rounds}");
    for client in &clients {
        assert_eq!(
            client.owned.values().map(BTreeSet::len).sum::<usize>(),
            2,
            "{client:?}"
        );
        assert_eq!(client.epoch, 3);
    }
    assert_eq!(h.group.state(), GroupState::Stable);
    assert_eq!(h.group.group_epoch(), 3);
    assert_eq!(h.group.assignment_epoch(), 3);
}

#[test]
fn full_and_partial_heartbeats() {
    let mut h = Harness::new(&[("foo", 2)]);
    let mut a = Client::new("a", &["foo"]);
    a.heartbeat(&mut h, false).unwrap();
    let counter = h.group.change_counter();
    // Partial heartbeat without change: no assignment, nothing to persist.
    let partial = h.send(&heartbeat_request("a", 1, None)).unwrap();
    assert_eq!(partial.assignment, None);
    let partial = h.send(&heartbeat_request("a", 1, Some(&a.owned))).unwrap();
    assert_eq!(partial.assignment, None);
    assert_eq!(h.group.change_counter(), counter);
    // Full heartbeat (rebalance timeout + subscription + owned partitions): assignment sent.
    let full = a.heartbeat(&mut h, true).unwrap();
    assert_eq!(assignment_of(&full).unwrap(), [tp("foo", &[0, 1])].into());
    // Missing owned partitions -> not full.
    let mut almost = a.request(true);
    almost.topic_partitions = None;
    assert_eq!(h.send(&almost).unwrap().assignment, None);
    assert_eq!(h.group.change_counter(), counter);
}

#[test]
fn static_member_temporary_leave_and_rejoin() {
    let mut h = Harness::new(&[("foo", 4)]);
    let mut a = Client::new("a1", &["foo"]);
    a.instance_id = Some("inst-a".into());
    let mut b = Client::new("b", &["foo"]);
    a.heartbeat(&mut h, false).unwrap();
    b.heartbeat(&mut h, false).unwrap();
    let mut clients = vec![a, b];
    settle(&mut h, &mut clients, 6);
    let a_assignment = clients[0].owned.clone();
    assert_eq!(a_assignment.values().map(BTreeSet::len).sum::<usize>(), 2);
    let epoch = h.group.group_epoch();

    // Another process using the same instance cannot join while a1 is active.
    let mut intruder = join_request("a2", &["foo"]);
    intruder.instance_id = Some("inst-a".into());
    assert_eq!(code(h.send(&intruder)), codes::UNRELEASED_INSTANCE_ID);
    // A heartbeat for the instance with the wrong member ID is fenced.
    let mut wrong = heartbeat_request("zz", 2, None);
    wrong.instance_id = Some("inst-a".into());
    assert_eq!(code(h.send(&wrong)), codes::FENCED_INSTANCE_ID);
    let mut unknown = heartbeat_request("zz", 2, None);
    unknown.instance_id = Some("inst-zz".into());
    assert_eq!(code(h.send(&unknown)), codes::UNKNOWN_MEMBER_ID);

    // a1 leaves temporarily (-2): kept in the group with its assignment, no rebalance.
    let mut leave = heartbeat_request("a1", -2, None);
    leave.instance_id = Some("inst-a".into());
    let left = h.send(&leave).unwrap();
    assert_eq!(left.member_epoch, -2);
    assert_eq!(h.group.group_epoch(), epoch);
    assert_eq!(
        h.group.member("a1").unwrap().assigned_partitions(),
        &a_assignment
    );
    // b is not given a1's partitions.
    clients[1].heartbeat(&mut h, false).unwrap();
    assert_eq!(
        clients[1].owned.values().map(BTreeSet::len).sum::<usize>(),
        2
    );

    // The restarted process rejoins with a new member ID and the same instance: it takes over
    // the old member's assignment at the current epoch.
    h.now += 10_000;
    let mut rejoin = join_request("a2", &["foo"]);
    rejoin.instance_id = Some("inst-a".into());
    let back = h.send(&rejoin).unwrap();
    assert_eq!(back.member_epoch, epoch);
    assert_eq!(assignment_of(&back).unwrap(), a_assignment);
    assert!(!h.group.has_member("a1"));
    assert_eq!(h.group.static_member("inst-a").unwrap().member_id(), "a2");
    assert_eq!(h.group.group_epoch(), epoch);
    assert_eq!(h.group.member_count(), 2);

    // Retrying that join (same ID, same instance) is not an UNRELEASED_INSTANCE_ID (KIP-1082).
    assert_eq!(h.send(&rejoin).unwrap().member_epoch, epoch);
    // A static member leaving for good (-1) is removed and the epoch bumps.
    let mut gone = heartbeat_request("a2", -1, None);
    gone.instance_id = Some("inst-a".into());
    h.send(&gone).unwrap();
    assert!(h.group.static_member("inst-a").is_none());
    assert_eq!(h.group.group_epoch(), epoch + 1);
}

#[test]
fn static_member_expires_after_session_timeout() {
    let mut h = Harness::new(&[("foo", 2)]);
    let mut join = join_request("s1", &["foo"]);
    join.instance_id = Some("inst".into());
    h.send(&join).unwrap();
    let mut leave = heartbeat_request("s1", -2, None);
    leave.instance_id = Some("inst".into());
    h.send(&leave).unwrap();
    assert_eq!(h.group.next_deadline(), Some(h.now + 45_000));
    assert!(h.advance(44_999).is_empty());
    assert!(h.group.static_member("inst").is_some());
    assert_eq!(h.advance(1), vec!["s1".to_string()]);
    assert!(h.group.static_member("inst").is_none());
    assert!(h.group.is_empty());
    // The instance is free again.
    let mut join = join_request("s2", &["foo"]);
    join.instance_id = Some("inst".into());
    assert!(h.send(&join).is_ok());
}

#[test]
fn session_timeout_removes_silent_members() {
    let mut h = Harness::new(&[("foo", 4)]);
    let mut a = Client::new("a", &["foo"]);
    let mut b = Client::new("b", &["foo"]);
    a.heartbeat(&mut h, false).unwrap();
    b.heartbeat(&mut h, false).unwrap();
    assert_eq!(h.group.next_deadline(), Some(h.now + 45_000));
    // a keeps heartbeating every 5 s, b goes silent.
    for _ in 0..8 {
        assert!(h.advance(5_000).is_empty());
        a.heartbeat(&mut h, false).unwrap();
    }
    let epoch = h.group.group_epoch();
    assert_eq!(h.advance(5_000), vec!["b".to_string()]);
    assert_eq!(h.group.group_epoch(), epoch + 1);
    assert_eq!(h.group.state(), GroupState::Assigning);
    let mut clients = vec![a];
    settle(&mut h, &mut clients, 5);
    assert_eq!(clients[0].owned, [tp("foo", &[0, 1, 2, 3])].into());
    // b comes back: unknown, so it rejoins with epoch 0.
    assert_eq!(code(b.heartbeat(&mut h, false)), codes::UNKNOWN_MEMBER_ID);
    assert!(b.heartbeat(&mut h, false).is_ok());
}

#[test]
fn rebalance_timeout_fences_members_that_do_not_revoke() {
    let mut h = Harness::new(&[("foo", 4)]);
    let mut a = Client::new("a", &["foo"]);
    a.heartbeat(&mut h, false).unwrap();
    let mut b = Client::new("b", &["foo"]);
    b.heartbeat(&mut h, false).unwrap();
    // a is told to revoke but keeps reporting all four partitions.
    let all = a.owned.clone();
    h.send(&heartbeat_request("a", 1, Some(&all))).unwrap();
    assert_eq!(
        h.group.member("a").unwrap().state(),
        MemberState::UnrevokedPartitions
    );
    let deadline = h.now + 10_000;
    assert_eq!(h.group.next_deadline(), Some(deadline));
    h.send(&heartbeat_request("a", 1, Some(&all))).unwrap();
    h.advance(9_999);
    h.send(&heartbeat_request("a", 1, Some(&all))).unwrap();
    h.send(&heartbeat_request("b", 2, Some(&Assignment::new())))
        .unwrap();
    assert_eq!(h.advance(1), vec!["a".to_string()]);
    // b now receives everything.
    let mut clients = vec![b];
    settle(&mut h, &mut clients, 5);
    assert_eq!(clients[0].owned, [tp("foo", &[0, 1, 2, 3])].into());
    assert_eq!(
        code(h.send(&heartbeat_request("a", 1, Some(&all)))),
        codes::UNKNOWN_MEMBER_ID
    );
}

#[test]
fn max_size() {
    let mut h = Harness::new(&[("foo", 4)]);
    h.config.consumer_max_size = 2;
    h.send(&join_request("a", &["foo"])).unwrap();
    h.send(&join_request("b", &["foo"])).unwrap();
    let err = h.send(&join_request("c", &["foo"])).unwrap_err();
    assert_eq!(err.code, codes::GROUP_MAX_SIZE_REACHED);
    assert_eq!(
        err.message,
        "The consumer group has reached its maximum capacity of 2 members."
    );
    assert_eq!(
        code(h.send_version(&join_request("", &["foo"]), 0)),
        codes::GROUP_MAX_SIZE_REACHED
    );
    // Existing members may still (re)join and heartbeat.
    assert!(h.send(&join_request("a", &["foo"])).is_ok());
    assert_eq!(h.group.member_count(), 2);
}

#[test]
fn assignors() {
    let mut h = Harness::new(&[("foo", 4)]);
    let mut join = join_request("a", &["foo"]);
    join.server_assignor = Some("sticky".into());
    assert_eq!(code(h.send(&join)), codes::UNSUPPORTED_ASSIGNOR);
    assert!(h.group.is_empty());
    // Range: contiguous ranges by member ID.
    let mut clients = vec![Client::new("b", &["foo"]), Client::new("a", &["foo"])];
    let mut first = join_request("b", &["foo"]);
    first.server_assignor = Some("range".into());
    let r = h.send(&first).unwrap();
    clients[0].epoch = r.member_epoch;
    clients[0].owned = assignment_of(&r).unwrap();
    clients[1].heartbeat(&mut h, false).unwrap();
    settle(&mut h, &mut clients, 6);
    assert_eq!(clients[1].owned, [tp("foo", &[0, 1])].into());
    assert_eq!(clients[0].owned, [tp("foo", &[2, 3])].into());
    let described = h.group.describe(&h.topics, &h.config);
    assert_eq!(&*described.assignor_name, "range");
    // Configured assignors restrict what is accepted.
    h.config.consumer_assignors = vec!["uniform".into()];
    let mut join = join_request("c", &["foo"]);
    join.server_assignor = Some("range".into());
    let err = h.send(&join).unwrap_err();
    assert_eq!(
        err.message,
        "ServerAssignor range is not supported. Supported assignors: uniform."
    );
}

#[test]
fn regex_subscription() {
    let mut h = Harness::new(&[("foo-1", 2), ("foo-2", 1), ("bar", 3)]);
    let mut join = join_request("a", &[]);
    join.subscribed_topic_names = None;
    join.subscribed_topic_regex = Some("foo-.*".into());
    let r = h.send(&join).unwrap();
    assert_eq!(
        assignment_of(&r).unwrap(),
        [tp("foo-1", &[0, 1]), tp("foo-2", &[0])].into()
    );
    // Invalid regex: nothing changes.
    let counter = h.group.change_counter();
    let mut bad = join_request("b", &[]);
    bad.subscribed_topic_names = None;
    bad.subscribed_topic_regex = Some("foo-(".into());
    let err = h.send(&bad).unwrap_err();
    assert_eq!(err.code, codes::INVALID_REGULAR_EXPRESSION);
    assert!(!h.group.has_member("b"));
    assert_eq!(h.group.change_counter(), counter);
    // The regex must match the whole name.
    let mut partial = join_request("c", &[]);
    partial.subscribed_topic_names = None;
    partial.subscribed_topic_regex = Some("ba".into());
    let r = h.send(&partial).unwrap();
    assert_eq!(assignment_of(&r).unwrap(), Assignment::new());
    h.send(&heartbeat_request("c", -1, None)).unwrap();

    // A new matching topic: re-resolved, epoch bumped, assigned on the next heartbeat.
    let epoch = h.group.group_epoch();
    h.set_partitions("foo-3", 2);
    assert!(h.group.on_topics_changed(&h.topics, h.now));
    assert_eq!(h.group.group_epoch(), epoch + 1);
    assert_eq!(h.group.state(), GroupState::Assigning);
    let member = h.group.member("a").unwrap();
    let (owned, member_epoch) = (member.assigned_partitions().clone(), member.member_epoch());
    let r = h
        .send(&heartbeat_request("a", member_epoch, Some(&owned)))
        .unwrap();
    assert_eq!(r.member_epoch, epoch + 1);
    assert_eq!(
        assignment_of(&r).unwrap(),
        [
            tp("foo-1", &[0, 1]),
            tp("foo-2", &[0]),
            tp("foo-3", &[0, 1])
        ]
        .into()
    );
    // An unrelated topic does not bump.
    h.set_partitions("other", 1);
    assert!(!h.group.on_topics_changed(&h.topics, h.now));
    let described = h.group.describe(&h.topics, &h.config);
    assert_eq!(
        described.members[0].subscribed_topic_regex.as_deref(),
        Some("foo-.*")
    );
}

#[test]
fn partition_growth_triggers_reassignment() {
    let mut h = Harness::new(&[("foo", 2)]);
    let mut clients = vec![Client::new("a", &["foo"]), Client::new("b", &["foo"])];
    for c in clients.iter_mut() {
        c.heartbeat(&mut h, false).unwrap();
    }
    settle(&mut h, &mut clients, 5);
    let epoch = h.group.group_epoch();
    h.set_partitions("foo", 6);
    assert!(h.group.on_topics_changed(&h.topics, h.now));
    assert_eq!(h.group.group_epoch(), epoch + 1);
    settle(&mut h, &mut clients, 5);
    for c in &clients {
        assert_eq!(c.owned.values().map(BTreeSet::len).sum::<usize>(), 3);
    }
    // Growth noticed by a heartbeat even without on_topics_changed.
    h.set_partitions("foo", 8);
    settle(&mut h, &mut clients, 5);
    assert_eq!(h.group.group_epoch(), epoch + 2);
    for c in &clients {
        assert_eq!(c.owned.values().map(BTreeSet::len).sum::<usize>(), 4);
    }
    // A subscribed topic created later is picked up too.
    let mut late = Client::new("c", &["foo", "later"]);
    late.heartbeat(&mut h, false).unwrap();
    clients.push(late);
    settle(&mut h, &mut clients, 6);
    h.set_partitions("later", 3);
    assert!(h.group.on_topics_changed(&h.topics, h.now));
    settle(&mut h, &mut clients, 6);
    assert_eq!(
        clients[2].owned.get(&topic_id("later")).map(BTreeSet::len),
        Some(3)
    );
}

#[test]
fn subscription_change_revokes_unsubscribed_topics() {
    let mut h = Harness::new(&[("foo", 2), ("bar", 2)]);
    let mut a = Client::new("a", &["foo", "bar"]);
    a.heartbeat(&mut h, false).unwrap();
    assert_eq!(a.owned.len(), 2);
    a.names = vec!["foo".into()];
    let r = a.heartbeat(&mut h, true).unwrap();
    assert_eq!(assignment_of(&r).unwrap(), [tp("foo", &[0, 1])].into());
    let mut clients = vec![a];
    settle(&mut h, &mut clients, 5);
    assert_eq!(clients[0].owned, [tp("foo", &[0, 1])].into());
    assert!(h.group.owners.keys().all(|(t, _)| *t == topic_id("foo")));
}

#[test]
fn offset_commit_and_fetch_validation() {
    let mut h = Harness::new(&[("foo", 2)]);
    // Admin commit on an empty group.
    assert_eq!(h.group.validate_offset_commit("", -1, 9), Ok(()));
    assert_eq!(h.group.validate_offset_fetch(None, -1), Ok(()));
    h.send(&join_request("a", &["foo"])).unwrap();
    assert_eq!(h.group.validate_offset_commit("a", 1, 9), Ok(()));
    assert_eq!(
        h.group.validate_offset_commit("a", 0, 9).unwrap_err().code,
        codes::STALE_MEMBER_EPOCH
    );
    assert_eq!(
        h.group.validate_offset_commit("a", 2, 9).unwrap_err().code,
        codes::STALE_MEMBER_EPOCH
    );
    assert_eq!(
        h.group.validate_offset_commit("zz", 1, 9).unwrap_err().code,
        codes::UNKNOWN_MEMBER_ID
    );
    // Not an admin commit any more once the group has members.
    assert_eq!(
        h.group.validate_offset_commit("", -1, 9).unwrap_err().code,
        codes::UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        h.group.validate_offset_commit("a", 1, 8).unwrap_err().code,
        codes::UNSUPPORTED_VERSION
    );
    assert_eq!(h.group.validate_offset_fetch(None, -1), Ok(()));
    assert_eq!(h.group.validate_offset_fetch(Some("a"), 1), Ok(()));
    assert_eq!(
        h.group
            .validate_offset_fetch(Some("a"), 3)
            .unwrap_err()
            .code,
        codes::STALE_MEMBER_EPOCH
    );
    assert_eq!(
        h.group
            .validate_offset_fetch(Some("b"), 1)
            .unwrap_err()
            .code,
        codes::UNKNOWN_MEMBER_ID
    );
}

#[test]
fn describe_and_states() {
    let mut h = Harness::new(&[("foo", 2)]);
    assert_eq!(h.group.state_name(), "Empty");
    let mut a = Client::new("a", &["foo"]);
    let mut join = a.request(false);
    join.rack_id = Some("rack-1".into());
    let r = h.send(&join).unwrap();
    a.epoch = r.member_epoch;
    a.owned = assignment_of(&r).unwrap();
    assert_eq!(h.group.state_name(), "Stable");
    let mut b = Client::new("b", &["foo"]);
    b.heartbeat(&mut h, false).unwrap();
    assert_eq!(h.group.state(), GroupState::Reconciling);
    h.send(&heartbeat_request("b", -1, None)).unwrap();
    assert_eq!(h.group.state(), GroupState::Assigning);
    assert_eq!(h.group.state().lower_case_name(), "assigning");

    let d = h.group.describe(&h.topics, &h.config);
    assert_eq!(&*d.group_id, GROUP);
    assert_eq!(&*d.group_state, "Assigning");
    assert_eq!(d.group_epoch, 3);
    assert_eq!(d.assignment_epoch, 2);
    assert_eq!(&*d.assignor_name, "uniform");
    assert_eq!(d.members.len(), 1);
    let m = &d.members[0];
    assert_eq!(&*m.member_id, "a");
    assert_eq!(m.rack_id.as_deref(), Some("rack-1"));
    assert_eq!(&*m.client_id, "client");
    assert_eq!(&*m.client_host, "/127.0.0.1");
    assert_eq!(m.member_epoch, 1);
    assert_eq!(
        m.subscribed_topic_names
            .iter()
            .map(|s| &**s)
            .collect::<Vec<_>>(),
        vec!["foo"]
    );
    assert_eq!(m.member_type, 1);
    let assigned = &m.assignment.topic_partitions[0];
    assert_eq!(&*assigned.topic_name, "foo");
    assert_eq!(assigned.topic_id, topic_id("foo"));
    assert!(!m.target_assignment.topic_partitions.is_empty());
    assert_eq!(h.group.members().count(), 1);
}

#[test]
fn change_counter_tracks_persistent_changes_only() {
    let mut h = Harness::new(&[("foo", 2)]);
    let c0 = h.group.change_counter();
    let mut a = Client::new("a", &["foo"]);
    a.heartbeat(&mut h, false).unwrap();
    let c1 = h.group.change_counter();
    assert!(c1 > c0);
    for _ in 0..5 {
        h.now += 1000;
        a.heartbeat(&mut h, false).unwrap();
    }
    assert_eq!(h.group.change_counter(), c1);
    // Rack change must persist.
    let mut r = heartbeat_request("a", a.epoch, None);
    r.rack_id = Some("r2".into());
    h.send(&r).unwrap();
    assert!(h.group.change_counter() > c1);
    let c2 = h.group.change_counter();
    // Failed requests change nothing.
    let _ = h.send(&heartbeat_request("a", 99, None));
    assert_eq!(h.group.change_counter(), c2);
}

#[test]
fn snapshot_round_trip_and_restore_timers() {
    let mut h = Harness::new(&[("foo", 4), ("bar-1", 1)]);
    let mut a = Client::new("a", &["foo"]);
    a.instance_id = Some("inst".into());
    a.heartbeat(&mut h, false).unwrap();
    let mut b = Client::new("b", &["foo"]);
    b.heartbeat(&mut h, false).unwrap();
    a.heartbeat(&mut h, false).unwrap(); // a is revoking
    let mut regex = join_request("r", &[]);
    regex.subscribed_topic_regex = Some("bar-.*".into());
    h.send(&regex).unwrap();

    let snapshot = h.group.snapshot();
    let json = serde_json::to_string(&snapshot).unwrap();
    let back: ConsumerGroupSnapshot = serde_json::from_str(&json).unwrap();
    assert_eq!(back, snapshot);
    let restored_at = h.now + 60_000;
    let restored = ConsumerGroup::restore(back, restored_at);
    assert_eq!(restored.snapshot(), snapshot);
    assert_eq!(restored.group_epoch(), h.group.group_epoch());
    assert_eq!(restored.owners.len(), h.group.owners.len());
    assert_eq!(restored.static_member("inst").unwrap().member_id(), "a");
    // Timers re-armed from the restore time: rebalance timeout of the revoking member first.
    assert_eq!(restored.next_deadline(), Some(restored_at + 10_000));
    // The restored group keeps working.
    let mut h2 = Harness {
        group: restored,
        topics: h.topics.clone(),
        config: h.config.clone(),
        now: restored_at,
    };
    h2.check_invariants();
    let mut clients = vec![a, b];
    settle(&mut h2, &mut clients, 6);
    assert_eq!(h2.group.state(), GroupState::Stable);
}

#[test]
fn failed_first_heartbeat_leaves_an_unused_group() {
    let mut h = Harness::new(&[("foo", 1)]);
    let mut bad = join_request("a", &[]);
    bad.subscribed_topic_regex = Some("(".into());
    assert_eq!(code(h.send(&bad)), codes::INVALID_REGULAR_EXPRESSION);
    assert!(h.group.is_unused());
    assert_eq!(h.group.change_counter(), 0);
    h.send(&join_request("a", &["foo"])).unwrap();
    assert!(!h.group.is_unused());
    h.send(&heartbeat_request("a", -1, None)).unwrap();
    assert!(h.group.is_empty() && !h.group.is_unused());
    let err = group_id_not_found("grp");
    assert_eq!(
        (err.code.code(), err.message.as_str()),
        (codes::GROUP_ID_NOT_FOUND, "Consumer group grp not found.")
    );
}

#[test]
fn static_member_back_from_temporary_leave_with_the_same_id() {
    let mut h = Harness::new(&[("foo", 2)]);
    let mut join = join_request("s", &["foo"]);
    join.instance_id = Some("inst".into());
    let first = h.send(&join).unwrap();
    let mut leave = heartbeat_request("s", -2, None);
    leave.instance_id = Some("inst".into());
    h.send(&leave).unwrap();
    assert_eq!(h.group.member("s").unwrap().member_epoch(), -2);
    assert_eq!(h.group.state(), GroupState::Reconciling);
    let back = h.send(&join).unwrap();
    assert_eq!(back.member_epoch, first.member_epoch);
    assert_eq!(assignment_of(&back), assignment_of(&first));
    assert_eq!(h.group.state(), GroupState::Stable);
}

#[test]
fn subscribed_topics_include_regex_matches() {
    let mut h = Harness::new(&[("foo-1", 2), ("bar", 1), ("baz", 1)]);
    let mut join = join_request("a", &["bar", "missing"]);
    join.subscribed_topic_regex = Some("foo-.*".into());
    h.send(&join).unwrap();
    assert!(h.group.is_subscribed_to("bar"));
    assert!(h.group.is_subscribed_to("missing"));
    assert!(h.group.is_subscribed_to("foo-1"));
    assert!(!h.group.is_subscribed_to("baz"));
    // Nobody subscribes to anything once the member has left.
    h.send(&heartbeat_request("a", -1, None)).unwrap();
    assert!(!h.group.is_subscribed_to("bar"));
    assert!(!h.group.is_subscribed_to("foo-1"));
}
