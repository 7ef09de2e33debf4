use super::*;

const T0: i64 = 1_000_000;

fn ids() -> impl FnMut() -> Result<i64, ErrorCode> {
    let mut next = 100;
    move || {
        next += 1;
        Ok(next)
    }
}

fn ready(outcome: Result<InitOutcome, ErrorCode>) -> (i64, i16) {
    match outcome {
        Ok(InitOutcome::Ready {
            producer_id,
            producer_epoch,
        }) => (producer_id, producer_epoch),
        other => panic!("expected Ready, got {other:?}"),
    }
}

fn tp(topic: &str, partition: i32) -> TopicPartition {
    (topic.to_string(), partition)
}

fn started(
    c: &mut TxnCoordinator,
    alloc: &mut dyn FnMut() -> Result<i64, ErrorCode>,
) -> (i64, i16) {
    let (pid, epoch) = ready(c.init_producer_id("t", 60_000, None, T0, alloc));
    assert_eq!(
        c.add_partitions("t", pid, epoch, &[tp("a", 0), tp("a", 1)], T0 + 1),
        Ok(Change::Changed)
    );
    (pid, epoch)
}

#[test]
fn a_commit_goes_through_prepare_and_complete() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let (pid, epoch) = started(&mut c, &mut alloc);
    assert_eq!((pid, epoch), (101, 0));
    assert_eq!(c.get("t").map(|t| t.state), Some(TxnState::Ongoing));
    assert_eq!(c.get("t").map(|t| t.start_ms), Some(T0 + 1));
    // Adding the same partitions again changes nothing.
    assert_eq!(
        c.add_partitions("t", pid, epoch, &[tp("a", 1)], T0 + 2),
        Ok(Change::Unchanged)
    );
    assert_eq!(
        c.add_offsets("t", pid, epoch, "g", T0 + 2),
        Ok(Change::Changed)
    );
    let offset = |o| PendingOffset {
        topic: "in".into(),
        partition: 0,
        offset: o,
        leader_epoch: -1,
        metadata: None,
    };
    c.commit_offsets("t", pid, epoch, "g", vec![offset(5)], T0 + 3)
        .expect("offsets");
    c.commit_offsets("t", pid, epoch, "g", vec![offset(7)], T0 + 3)
        .expect("offsets");
    assert_eq!(
        c.pending_offsets("g"),
        BTreeSet::from([("in".to_string(), 0)])
    );
    assert!(c.pending_offsets("other").is_empty());
    assert_eq!(c.verify_produce(pid, epoch, ("a", 1)), Ok(()));
    assert_eq!(
        c.verify_produce(pid, epoch, ("a", 2)),
        Err(INVALID_TXN_STATE)
    );
    let Ok(EndOutcome::End(plan)) = c.end("t", pid, epoch, true, T0 + 4) else {
        panic!("end");
    };
    assert!(plan.commit);
    assert_eq!(plan.partitions, vec![tp("a", 0), tp("a", 1)]);
    assert_eq!(plan.offsets.get("g"), Some(&vec![offset(7)]));
    assert_eq!(c.get("t").map(|t| t.state), Some(TxnState::PrepareCommit));
    // While markers are written: no produce, no new partitions, no second end.
    assert_eq!(
        c.verify_produce(pid, epoch, ("a", 0)),
        Err(INVALID_TXN_STATE)
    );
    assert_eq!(
        c.add_partitions("t", pid, epoch, &[tp("a", 0)], T0 + 5),
        Err(CONCURRENT_TRANSACTIONS)
    );
    assert_eq!(
        c.end("t", pid, epoch, true, T0 + 5),
        Err(CONCURRENT_TRANSACTIONS)
    );
    assert_eq!(
        c.end("t", pid, epoch, false, T0 + 5),
        Err(INVALID_TXN_STATE)
    );
    assert_eq!(c.unfinished(), vec![plan.clone()]);
    assert_eq!(c.pending_offsets("g").len(), 1, "pending until complete");
    assert_eq!(c.complete(&plan, T0 + 6), Change::Changed);
    assert!(c.pending_offsets("g").is_empty());
    assert_eq!(c.complete(&plan, T0 + 6), Change::Unchanged);
    let t = c.get("t").expect("txn");
    assert_eq!(t.state, TxnState::CompleteCommit);
    assert!(t.partitions.is_empty() && t.groups.is_empty() && t.offsets.is_empty());
    // A retried commit succeeds; an abort now is invalid.
    assert_eq!(
        c.end("t", pid, epoch, true, T0 + 7),
        Ok(EndOutcome::AlreadyDone)
    );
    assert_eq!(
        c.end("t", pid, epoch, false, T0 + 7),
        Err(INVALID_TXN_STATE)
    );
    // The next transaction starts with the next AddPartitionsToTxn.
    assert_eq!(
        c.add_partitions("t", pid, epoch, &[tp("b", 0)], T0 + 8),
        Ok(Change::Changed)
    );
    assert_eq!(c.get("t").map(|t| t.start_ms), Some(T0 + 8));
}

#[test]
fn an_abort_drops_the_offsets() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let (pid, epoch) = started(&mut c, &mut alloc);
    c.add_offsets("t", pid, epoch, "g", T0).expect("add");
    c.commit_offsets(
        "t",
        pid,
        epoch,
        "g",
        vec![PendingOffset {
            topic: "in".into(),
            partition: 0,
            offset: 1,
            leader_epoch: -1,
            metadata: Some("m".into()),
        }],
        T0,
    )
    .expect("offsets");
    let Ok(EndOutcome::End(plan)) = c.end("t", pid, epoch, false, T0) else {
        panic!("end");
    };
    assert!(!plan.commit && plan.offsets.is_empty());
    assert_eq!(plan.partitions.len(), 2);
    c.complete(&plan, T0);
    assert_eq!(c.get("t").map(|t| t.state), Some(TxnState::CompleteAbort));
}

#[test]
fn requests_from_other_producers_or_epochs_are_refused() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let (pid, epoch) = started(&mut c, &mut alloc);
    assert_eq!(
        c.add_partitions("nope", pid, epoch, &[tp("a", 0)], T0),
        Err(INVALID_PRODUCER_ID_MAPPING)
    );
    assert_eq!(
        c.add_partitions("t", pid + 1, epoch, &[tp("a", 0)], T0),
        Err(INVALID_PRODUCER_ID_MAPPING)
    );
    assert_eq!(
        c.add_partitions("t", pid, epoch + 1, &[tp("a", 0)], T0),
        Err(PRODUCER_FENCED)
    );
    assert_eq!(c.end("t", pid, epoch + 1, true, T0), Err(PRODUCER_FENCED));
    assert_eq!(
        c.commit_offsets("t", pid, epoch + 1, "g", vec![], T0),
        Err(INVALID_PRODUCER_EPOCH)
    );
    // Offsets for a group never added: the transaction would never apply them.
    assert_eq!(
        c.commit_offsets("t", pid, epoch, "g", vec![], T0),
        Err(INVALID_TXN_STATE)
    );
    assert_eq!(
        c.verify_produce(pid + 7, 0, ("a", 0)),
        Err(INVALID_PRODUCER_ID_MAPPING)
    );
    assert_eq!(
        c.verify_produce(pid, epoch - 1, ("a", 0)),
        Err(INVALID_PRODUCER_EPOCH)
    );
    // EndTxn with nothing in progress is invalid.
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let (pid, epoch) = ready(c.init_producer_id("t", 1_000, None, T0, &mut alloc));
    assert_eq!(c.end("t", pid, epoch, true, T0), Err(INVALID_TXN_STATE));
    assert_eq!(c.end("t", pid, epoch, false, T0), Err(INVALID_TXN_STATE));
}

#[test]
fn timeouts_are_validated() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    for bad in [0, -1, DEFAULT_MAX_TIMEOUT_MS + 1] {
        assert_eq!(
            c.init_producer_id("t", bad, None, T0, &mut alloc),
            Err(INVALID_TRANSACTION_TIMEOUT)
        );
    }
    assert!(c.is_empty());
    ready(c.init_producer_id("t", DEFAULT_MAX_TIMEOUT_MS, None, T0, &mut alloc));
}

#[test]
fn a_new_producer_fences_the_old_one_and_aborts_its_transaction() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let (pid, epoch) = started(&mut c, &mut alloc);
    let Ok(InitOutcome::AbortFirst(plan)) = c.init_producer_id("t", 60_000, None, T0, &mut alloc)
    else {
        panic!("abort first");
    };
    assert!(!plan.commit);
    assert_eq!(plan.producer_id, pid);
    assert_eq!(
        plan.producer_epoch,
        epoch + 1,
        "markers carry the bumped epoch"
    );
    assert_eq!(plan.partitions.len(), 2);
    // Until the abort completes, another init waits.
    assert_eq!(
        c.init_producer_id("t", 60_000, None, T0, &mut alloc),
        Err(CONCURRENT_TRANSACTIONS)
    );
    c.complete(&plan, T0);
    assert_eq!(
        ready(c.init_producer_id("t", 60_000, None, T0, &mut alloc)),
        (pid, epoch + 2)
    );
    // The old producer is fenced everywhere.
    assert_eq!(
        c.add_partitions("t", pid, epoch, &[tp("a", 0)], T0),
        Err(PRODUCER_FENCED)
    );
    assert_eq!(
        c.verify_produce(pid, epoch, ("a", 0)),
        Err(INVALID_PRODUCER_EPOCH)
    );
    // Between transactions a re-init just bumps the epoch.
    assert_eq!(
        ready(c.init_producer_id("t", 60_000, None, T0, &mut alloc)),
        (pid, epoch + 3)
    );
}

#[test]
fn kip_360_reinit_with_the_known_epoch_or_a_retry_of_the_last_bump() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let (pid, e0) = ready(c.init_producer_id("t", 60_000, None, T0, &mut alloc));
    let (_, e1) = ready(c.init_producer_id("t", 60_000, Some((pid, e0)), T0, &mut alloc));
    assert_eq!(e1, e0 + 1);
    // The same request again (its answer was lost): the current epoch, no second bump.
    assert_eq!(
        ready(c.init_producer_id("t", 60_000, Some((pid, e0)), T0, &mut alloc)),
        (pid, e1)
    );
    // An epoch never handed out, or another producer ID: fenced.
    assert_eq!(
        c.init_producer_id("t", 60_000, Some((pid, e1 + 5)), T0, &mut alloc),
        Err(PRODUCER_FENCED)
    );
    assert_eq!(
        c.init_producer_id("t", 60_000, Some((pid + 1, e1)), T0, &mut alloc),
        Err(PRODUCER_FENCED)
    );
    // An unknown transactional ID hands out a fresh ID whatever the producer presents.
    assert_eq!(
        ready(c.init_producer_id("u", 60_000, Some((5, 5)), T0, &mut alloc)).1,
        0
    );
}

#[test]
fn timed_out_transactions_are_aborted_with_a_bumped_epoch() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let (pid, epoch) = ready(c.init_producer_id("t", 10_000, None, T0, &mut alloc));
    c.add_partitions("t", pid, epoch, &[tp("a", 0)], T0)
        .expect("add");
    assert!(c.abort_timed_out(T0 + 10_000).is_empty());
    let plans = c.abort_timed_out(T0 + 10_001);
    assert_eq!(plans.len(), 1);
    let plan = plans.first().expect("plan").clone();
    assert!(!plan.commit);
    assert_eq!(plan.producer_epoch, epoch + 1);
    assert!(c.abort_timed_out(T0 + 20_000).is_empty(), "once");
    c.complete(&plan, T0 + 10_002);
    // The timed-out producer's commit is fenced...
    assert_eq!(c.end("t", pid, epoch, true, T0), Err(PRODUCER_FENCED));
    // ...and its KIP-360 re-init with its old epoch gets the bumped one without a new bump.
    assert_eq!(
        ready(c.init_producer_id("t", 10_000, Some((pid, epoch)), T0, &mut alloc)),
        (pid, epoch + 1)
    );
}

#[test]
fn an_exhausted_epoch_moves_to_a_new_producer_id() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let (pid, _) = ready(c.init_producer_id("t", 60_000, None, T0, &mut alloc));
    let mut txn = c.get("t").expect("txn").clone();
    txn.producer_epoch = i16::MAX - 1;
    let mut c = TxnCoordinator::restore(TxnConfig::default(), [txn]);
    let (new_pid, epoch) = ready(c.init_producer_id("t", 60_000, None, T0, &mut alloc));
    assert_ne!(new_pid, pid);
    assert_eq!(epoch, 0);
    c.add_partitions("t", new_pid, 0, &[tp("a", 0)], T0)
        .expect("add");
    assert_eq!(c.verify_produce(new_pid, 0, ("a", 0)), Ok(()));
    assert_eq!(
        c.verify_produce(pid, i16::MAX - 1, ("a", 0)),
        Err(INVALID_PRODUCER_ID_MAPPING)
    );
}

#[test]
fn idle_transactional_ids_expire_but_open_transactions_do_not() {
    let config = TxnConfig {
        id_expiration_ms: 1_000,
        ..TxnConfig::default()
    };
    let mut c = TxnCoordinator::new(config);
    let mut alloc = ids();
    let (pid, epoch) = ready(c.init_producer_id("idle", 60_000, None, T0, &mut alloc));
    let (busy, busy_epoch) = ready(c.init_producer_id("busy", 60_000, None, T0, &mut alloc));
    c.add_partitions("busy", busy, busy_epoch, &[tp("a", 0)], T0)
        .expect("add");
    assert!(c.expire_ids(T0 + 999).is_empty());
    assert_eq!(c.expire_ids(T0 + 1_000), vec!["idle".to_string()]);
    assert!(c.get("idle").is_none());
    assert_eq!(
        c.add_partitions("idle", pid, epoch, &[tp("a", 0)], T0),
        Err(INVALID_PRODUCER_ID_MAPPING)
    );
    assert!(c.get("busy").is_some());
}

#[test]
fn a_restored_coordinator_finishes_what_was_preparing() {
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let mut alloc = ids();
    let (pid, epoch) = started(&mut c, &mut alloc);
    let Ok(EndOutcome::End(plan)) = c.end("t", pid, epoch, true, T0) else {
        panic!("end");
    };
    let persisted: Vec<Transaction> = c.all().into_iter().cloned().collect();
    let json = serde_json::to_string(&persisted).expect("json");
    let back: Vec<Transaction> = serde_json::from_str(&json).expect("json");
    let mut restored = TxnCoordinator::restore(TxnConfig::default(), back);
    assert_eq!(restored.unfinished(), vec![plan.clone()]);
    restored.complete(&plan, T0);
    assert!(restored.unfinished().is_empty());
    assert_eq!(
        restored.end("t", pid, epoch, true, T0),
        Ok(EndOutcome::AlreadyDone)
    );
}

proptest::proptest! {
    /// Any sequence of calls keeps the invariants: the producer index points at the right
    /// transactions, only Ongoing transactions hold partitions outside an end in progress,
    /// epochs never go back for a producer ID, and nothing panics.
    #[test]
    fn any_call_sequence_keeps_the_invariants(
        calls in proptest::collection::vec((0u8..8, 0u8..3, 0i16..4, proptest::bool::ANY, 0i64..100_000), 0..80)
    ) {
        let mut c = TxnCoordinator::new(TxnConfig { max_timeout_ms: 50_000, id_expiration_ms: 500_000 });
        let mut alloc = ids();
        let mut now = T0;
        let mut last_epochs: HashMap<i64, i16> = HashMap::new();
        let mut plans: Vec<EndPlan> = Vec::new();
        for (op, who, epoch_delta, flag, dt) in calls {
            now += dt;
            let tid = format!("t{who}");
            let (pid, epoch) = c.get(&tid).map_or((1, 0), |t| (t.producer_id, t.producer_epoch));
            let epoch = epoch.saturating_sub(epoch_delta % 2);
            match op {
                0 => if let Ok(InitOutcome::AbortFirst(plan)) = c.init_producer_id(&tid, 30_000, flag.then_some((pid, epoch)), now, &mut alloc) {
                    plans.push(plan);
                },
                1 => { let _ = c.add_partitions(&tid, pid, epoch, &[tp("a", i32::from(epoch_delta))], now); }
                2 => { let _ = c.add_offsets(&tid, pid, epoch, "g", now); }
                3 => { let _ = c.commit_offsets(&tid, pid, epoch, "g", vec![], now); }
                4 => if let Ok(EndOutcome::End(plan)) = c.end(&tid, pid, epoch, flag, now) { plans.push(plan) },
                5 => if let Some(plan) = plans.pop() { c.complete(&plan, now); },
                6 => plans.extend(c.abort_timed_out(now)),
                _ => { c.expire_ids(now); }
            }
            for t in c.all() {
                proptest::prop_assert_eq!(c.by_producer.get(&t.producer_id), Some(&t.transactional_id));
                if matches!(t.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort) {
                    proptest::prop_assert!(t.partitions.is_empty() && t.groups.is_empty() && t.offsets.is_empty());
                }
                let last = last_epochs.entry(t.producer_id).or_insert(t.producer_epoch);
                proptest::prop_assert!(t.producer_epoch >= *last);
                *last = t.producer_epoch;
            }
        }
    }
}

#[test]
fn shards_load_and_unload_their_transactions_only() {
    let mut alloc = ids();
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let (pid, _) = started(&mut c, &mut alloc);
    ready(c.init_producer_id("other", 60_000, None, T0, &mut alloc));
    let in_shard = |id: &str| id == "t";
    let saved = c.get("t").cloned().expect("t");
    c.unload_shard(in_shard);
    assert!(c.get("t").is_none() && c.by_producer(pid).is_none());
    assert!(c.get("other").is_some(), "another shard's ID stays");
    c.load_shard(in_shard, [saved.clone()]);
    assert_eq!(c.get("t"), Some(&saved));
    assert_eq!(
        c.by_producer(pid).map(|t| t.transactional_id.as_str()),
        Some("t")
    );
    // Loading again replaces, not adds.
    c.load_shard(in_shard, []);
    assert!(c.get("t").is_none());
    assert_eq!(c.len(), 1);
}

#[test]
fn end_plans_name_the_groups_of_the_transaction() {
    let mut alloc = ids();
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let (pid, epoch) = started(&mut c, &mut alloc);
    assert_eq!(
        c.add_offsets("t", pid, epoch, "g", T0 + 2),
        Ok(Change::Changed)
    );
    match c.end("t", pid, epoch, false, T0 + 3) {
        Ok(EndOutcome::End(plan)) => {
            assert_eq!(plan.groups, vec!["g".to_string()]);
            assert!(plan.offsets.is_empty());
        }
        other => panic!("expected an end, got {other:?}"),
    }
}

#[test]
fn hanging_transactions_are_left_while_in_progress_and_closed_as_decided() {
    let mut alloc = ids();
    let mut c = TxnCoordinator::new(TxnConfig::default());
    let (pid, epoch) = started(&mut c, &mut alloc);
    assert_eq!(c.hanging(999, 0, ("a", 0)), Hanging::Unknown);
    assert_eq!(c.hanging(pid, epoch, ("a", 0)), Hanging::InProgress);
    // A partition the transaction does not have, or an older epoch: aborted at the current.
    assert_eq!(
        c.hanging(pid, epoch, ("b", 0)),
        Hanging::Close {
            commit: false,
            epoch
        }
    );
    let plan = match c.end("t", pid, epoch, true, T0 + 2) {
        Ok(EndOutcome::End(plan)) => plan,
        other => panic!("expected an end, got {other:?}"),
    };
    assert_eq!(
        c.hanging(pid, epoch, ("b", 0)),
        Hanging::InProgress,
        "an end being prepared decides first"
    );
    assert_eq!(c.complete(&plan, T0 + 3), Change::Changed);
    assert_eq!(
        c.hanging(pid, epoch, ("a", 0)),
        Hanging::Close {
            commit: true,
            epoch
        },
        "after CompleteCommit, its marker is a commit"
    );
    assert_eq!(
        c.hanging(pid, epoch - 1, ("a", 0)),
        Hanging::Close {
            commit: false,
            epoch
        },
        "an older epoch's transaction is aborted"
    );
}
