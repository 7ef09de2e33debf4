//! KIP-932 ShareFetch and ShareAcknowledge over TCP against a real broker
//! (`group.share.enable = true`): members of one share group acquiring disjoint records,
//! acknowledgements (accept, release, reject), the delivery count limit, lock expiry, members
//! leaving, fenced or disconnected, read_committed share groups, a restart, share sessions and
//! bad input.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, TIMEOUT, TestBroker, batch, http_get, produce_request, txn};
use skiff_protocol::generated::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use skiff_protocol::generated::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckRequestBatch,
};
use skiff_protocol::generated::share_acknowledge_response::ShareAcknowledgeResponse;
use skiff_protocol::generated::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic,
};
use skiff_protocol::generated::share_fetch_response::ShareFetchResponse;
use skiff_protocol::generated::{
    ApiVersionsRequest, IncrementalAlterConfigsRequest, ShareAcknowledgeRequest, ShareFetchRequest,
    ShareGroupHeartbeatRequest,
};
use skiff_protocol::{ApiKey, Response, Uuid, error_codes};
use skiff_records::RecordBatches;

const TOPIC: &str = "work";
const GROUP: &str = "workers";

const ACCEPT: i8 = 1;
const RELEASE: i8 = 2;
const REJECT: i8 = 3;

fn share_config(config: &mut skiff_broker::BrokerConfig) {
    config.share_groups_enabled = true;
    // Group-level record lock durations down to 1 s.
    config.groups.share_min_record_lock_duration_ms = 1000;
}

/// A one-partition topic made with CreateTopics.
async fn create_topic(c: &mut Client, name: &str) -> Uuid {
    common::create_topic_with_partitions(c, name, 1).await
}

/// Produces one single-record batch per value (so that record limits cut between records).
async fn produce(c: &mut Client, topic: &str, values: &[&str]) {
    for v in values {
        let Response::Produce(p) = c
            .call(produce_request(topic, 0, -1, batch(&[v.as_bytes()])), 9)
            .await
        else {
            panic!("not a produce response");
        };
        assert_eq!(p.responses[0].partition_responses[0].error_code, 0);
    }
}

async fn set_group_config(c: &mut Client, group: &str, key: &str, value: &str) {
    let request = IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: 32,
            resource_name: group.into(),
            configs: vec![AlterableConfig {
                name: key.into(),
                config_operation: 0,
                value: Some(value.into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let Response::IncrementalAlterConfigs(r) = c.call(request, 1).await else {
        panic!("not an IncrementalAlterConfigs response");
    };
    assert_eq!(r.responses[0].error_code, 0, "{:?}", r.responses[0]);
}

async fn heartbeat(c: &mut Client, group: &str, member: &str, epoch: i32) -> i16 {
    let request = ShareGroupHeartbeatRequest {
        group_id: group.into(),
        member_id: member.into(),
        member_epoch: epoch,
        subscribed_topic_names: (epoch == 0).then(|| vec![TOPIC.into()]),
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::ShareGroupHeartbeat(r) => r.error_code,
        other => panic!("unexpected {other:?}"),
    }
}

/// A share consumer on its own connection: a member of a share group with its share session.
struct Member {
    c: Client,
    group: String,
    id: String,
    /// The share session epoch of the next request.
    epoch: i32,
}

type Acks<'a> = &'a [(i64, i64, &'a [i8])];

impl Member {
    /// Connects and joins the group (which initializes the share partition's state).
    async fn join(broker: &TestBroker, group: &str, id: &str) -> Member {
        let mut c = broker.client().await;
        assert_eq!(heartbeat(&mut c, group, id, 0).await, 0);
        Member {
            c,
            group: group.into(),
            id: id.into(),
            epoch: 0,
        }
    }

    fn fetch_request(
        &self,
        topic: Uuid,
        acks: Acks<'_>,
        max_records: i32,
        max_wait_ms: i32,
    ) -> ShareFetchRequest {
        ShareFetchRequest {
            group_id: Some(self.group.as_str().into()),
            member_id: Some(self.id.as_str().into()),
            share_session_epoch: self.epoch,
            max_wait_ms,
            min_bytes: 1,
            max_bytes: 1 << 20,
            max_records,
            batch_size: 500,
            topics: vec![FetchTopic {
                topic_id: topic,
                partitions: vec![FetchPartition {
                    partition_index: 0,
                    acknowledgement_batches: acks
                        .iter()
                        .map(|(first, last, types)| AcknowledgementBatch {
                            first_offset: *first,
                            last_offset: *last,
                            acknowledge_types: types.to_vec(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// A ShareFetch v2 in the member's session; the epoch moves on unless refused.
    async fn fetch_with(&mut self, request: ShareFetchRequest) -> ShareFetchResponse {
        match self.c.call(request, 2).await {
            Response::ShareFetch(r) => {
                if r.error_code == 0 {
                    self.epoch = if self.epoch == -1 { 0 } else { self.epoch + 1 };
                }
                r
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    async fn fetch(
        &mut self,
        topic: Uuid,
        acks: Acks<'_>,
        max_records: i32,
        max_wait_ms: i32,
    ) -> ShareFetchResponse {
        let request = self.fetch_request(topic, acks, max_records, max_wait_ms);
        self.fetch_with(request).await
    }

    fn ack_request(&self, topic: Uuid, acks: Acks<'_>) -> ShareAcknowledgeRequest {
        ShareAcknowledgeRequest {
            group_id: Some(self.group.as_str().into()),
            member_id: Some(self.id.as_str().into()),
            share_session_epoch: self.epoch,
            topics: vec![AcknowledgeTopic {
                topic_id: topic,
                partitions: vec![AcknowledgePartition {
                    partition_index: 0,
                    acknowledgement_batches: acks
                        .iter()
                        .map(|(first, last, types)| AckRequestBatch {
                            first_offset: *first,
                            last_offset: *last,
                            acknowledge_types: types.to_vec(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    async fn ack_with(
        &mut self,
        request: ShareAcknowledgeRequest,
        version: i16,
    ) -> ShareAcknowledgeResponse {
        let epoch = request.share_session_epoch;
        match self.c.call(request, version).await {
            Response::ShareAcknowledge(r) => {
                if r.error_code == 0 && epoch > 0 {
                    self.epoch += 1;
                }
                r
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// A ShareAcknowledge v2 in the member's session; returns the partition's error code.
    async fn ack(&mut self, topic: Uuid, acks: Acks<'_>) -> i16 {
        let request = self.ack_request(topic, acks);
        let r = self.ack_with(request, 2).await;
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        r.responses[0].partitions[0].error_code
    }
}

/// The acquired ranges of partition 0, as (first, last, delivery count); checks that the
/// records carried hold every acquired offset.
fn acquired(r: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let Some(p) = r.responses.iter().flat_map(|t| &t.partitions).next() else {
        return Vec::new();
    };
    assert_eq!(p.error_code, 0, "{:?}", p.error_message);
    let ranges: Vec<(i64, i64, i16)> = p
        .acquired_records
        .iter()
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect();
    let offsets = record_offsets(p.records.clone().unwrap_or_default());
    for (first, last, _) in &ranges {
        for o in *first..=*last {
            assert!(offsets.contains(&o), "offset {o} acquired but not carried");
        }
    }
    ranges
}

fn record_offsets(records: Bytes) -> Vec<i64> {
    let mut offsets = Vec::new();
    for batch in RecordBatches::new(records) {
        let batch = batch.expect("valid batch");
        if batch.is_control() {
            continue;
        }
        for record in batch.records().expect("uncompressed") {
            offsets.push(record.expect("record").offset);
        }
    }
    offsets
}

/// The acknowledgement error code of partition 0 in a ShareFetch response.
fn ack_code(r: &ShareFetchResponse) -> i16 {
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .next()
        .map_or(-100, |p| p.acknowledge_error_code)
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_share_records_and_acknowledge_them() {
    let broker = TestBroker::start_with(|config| {
        share_config(config);
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await;
    let mut admin = broker.client().await;
    let topic = create_topic(&mut admin, TOPIC).await;
    let mut m1 = Member::join(&broker, GROUP, "m1").await;
    let mut m2 = Member::join(&broker, GROUP, "m2").await;
    let values: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    produce(&mut admin, TOPIC, &values).await;

    // Each fetch acquires records no one else holds.
    let r = m1.fetch(topic, &[], 3, 0).await;
    assert_eq!(r.acquisition_lock_timeout_ms, 30_000);
    assert_eq!(acquired(&r), vec![(0, 2, 1)]);
    assert_eq!(acquired(&m2.fetch(topic, &[], 3, 0).await), vec![(3, 5, 1)]);

    // m1 accepts 0-1 and releases 2: the next fetch, m2's (with its own acknowledgements
    // piggy-backed), gets 2 on its second delivery.
    assert_eq!(
        m1.ack(topic, &[(0, 1, &[ACCEPT]), (2, 2, &[RELEASE])])
            .await,
        0
    );
    let r = m2.fetch(topic, &[(3, 5, &[ACCEPT])], 1, 0).await;
    assert_eq!(ack_code(&r), 0);
    assert_eq!(acquired(&r), vec![(2, 2, 2)]);
    // Rejected: archived, never delivered again.
    assert_eq!(m2.ack(topic, &[(2, 2, &[REJECT])]).await, 0);
    assert_eq!(
        acquired(&m1.fetch(topic, &[], 10, 0).await),
        vec![(6, 9, 1)]
    );

    // A record released at each of its five deliveries (the delivery count limit) is archived.
    assert_eq!(
        m1.ack(topic, &[(6, 9, &[ACCEPT, ACCEPT, ACCEPT, RELEASE])])
            .await,
        0
    );
    for delivery in 2..=5 {
        let member = if delivery % 2 == 0 { &mut m2 } else { &mut m1 };
        let r = member.fetch(topic, &[], 10, 0).await;
        assert_eq!(acquired(&r), vec![(9, 9, delivery)]);
        assert_eq!(member.ack(topic, &[(9, 9, &[RELEASE])]).await, 0);
    }
    assert!(acquired(&m2.fetch(topic, &[], 10, 0).await).is_empty());
    produce(&mut admin, TOPIC, &["r10"]).await;
    assert_eq!(
        acquired(&m2.fetch(topic, &[], 10, 0).await),
        vec![(10, 10, 1)]
    );

    // Bad acknowledgements: another member's records (INVALID_RECORD_STATE), offsets past the
    // records in flight, a million offsets (with one type, or one each), overlapping batches,
    // an unknown type (INVALID_REQUEST). Each is refused whole; the session goes on.
    assert_eq!(
        m1.ack(topic, &[(10, 10, &[ACCEPT])]).await,
        error_codes::INVALID_RECORD_STATE
    );
    assert_eq!(
        m1.ack(topic, &[(1000, 1000, &[ACCEPT])]).await,
        error_codes::INVALID_REQUEST
    );
    assert_eq!(
        m2.ack(topic, &[(10, 1_000_009, &[ACCEPT])]).await,
        error_codes::INVALID_REQUEST
    );
    let million = vec![ACCEPT; 1_000_000];
    assert_eq!(
        m2.ack(topic, &[(10, 1_000_009, &million)]).await,
        error_codes::INVALID_REQUEST
    );
    assert_eq!(
        m2.ack(topic, &[(i64::MIN, i64::MAX, &[ACCEPT])]).await,
        error_codes::INVALID_REQUEST
    );
    assert_eq!(
        m2.ack(topic, &[(10, 12, &[ACCEPT]), (11, 13, &[ACCEPT])])
            .await,
        error_codes::INVALID_REQUEST
    );
    assert_eq!(
        m2.ack(topic, &[(10, 10, &[9])]).await,
        error_codes::INVALID_REQUEST
    );
    // Renew (4) only in a renew request; in v1 not at all.
    assert_eq!(
        m2.ack(topic, &[(10, 10, &[4])]).await,
        error_codes::INVALID_REQUEST
    );
    let request = m2.ack_request(topic, &[(10, 10, &[4])]);
    let r = m2.ack_with(request, 1).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        error_codes::INVALID_REQUEST
    );
    let mut request = m2.ack_request(topic, &[(10, 10, &[4])]);
    request.is_renew_ack = true;
    let r = m2.ack_with(request, 2).await;
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    assert_eq!(r.acquisition_lock_timeout_ms, 30_000);
    // An unknown topic ID.
    let r = m2
        .ack_with(m2.ack_request(Uuid::from_u128(99), &[(0, 0, &[ACCEPT])]), 2)
        .await;
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        error_codes::UNKNOWN_TOPIC_ID
    );

    // Session errors: a stale epoch, an unknown session, a session opened with
    // acknowledgements, by a non-member or in no group, a renew fetch asking for records.
    let mut stale = m1.ack_request(topic, &[]);
    stale.share_session_epoch -= 1;
    let r = m1.ack_with(stale, 2).await;
    assert_eq!(r.error_code, error_codes::INVALID_SHARE_SESSION_EPOCH);
    let mut stale = m1.fetch_request(topic, &[], 10, 0);
    stale.share_session_epoch += 1;
    let r = m1.fetch_with(stale).await;
    assert_eq!(r.error_code, error_codes::INVALID_SHARE_SESSION_EPOCH);
    let r = m1.ack_with(m1.ack_request(topic, &[]), 2).await;
    assert_eq!(r.error_code, 0);
    let mut ghost = Member {
        c: broker.client().await,
        group: GROUP.into(),
        id: "ghost".into(),
        epoch: 1,
    };
    let r = ghost.ack_with(ghost.ack_request(topic, &[]), 2).await;
    assert_eq!(r.error_code, error_codes::SHARE_SESSION_NOT_FOUND);
    assert_eq!(
        ghost.fetch(topic, &[], 10, 0).await.error_code,
        error_codes::SHARE_SESSION_NOT_FOUND
    );
    ghost.epoch = -1;
    assert_eq!(
        ghost.fetch(topic, &[], 10, 0).await.error_code,
        error_codes::SHARE_SESSION_NOT_FOUND
    );
    ghost.epoch = 0;
    assert_eq!(
        ghost.fetch(topic, &[], 10, 0).await.error_code,
        error_codes::UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        ghost
            .fetch(topic, &[(10, 10, &[ACCEPT])], 10, 0)
            .await
            .error_code,
        error_codes::INVALID_REQUEST
    );
    ghost.group = "nobody".into();
    assert_eq!(
        ghost.fetch(topic, &[], 10, 0).await.error_code,
        error_codes::GROUP_ID_NOT_FOUND
    );
    let mut renew = m2.fetch_request(topic, &[], 10, 0);
    renew.is_renew_ack = true;
    let r = m2.fetch_with(renew).await;
    assert_eq!(r.error_code, error_codes::INVALID_REQUEST);
    assert!(
        r.error_message
            .as_deref()
            .is_some_and(|m| m.contains("maxRecords must be set to 0")),
        "{:?}",
        r.error_message
    );

    // The final acknowledgement closes m2's session.
    let mut last = m2.ack_request(topic, &[(10, 10, &[ACCEPT])]);
    last.share_session_epoch = -1;
    let r = m2.ack_with(last, 2).await;
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    let r = m2.ack_with(m2.ack_request(topic, &[]), 2).await;
    assert_eq!(r.error_code, error_codes::SHARE_SESSION_NOT_FOUND);

    // What /metrics counts: deliveries (3 + 3 + 1 + 4 + 4 + 1), redeliveries (offset 2 once,
    // offset 9 four times), accepted (0-1, 3-8, 10) and archived (2 rejected, 9 at the limit).
    let addr = broker
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin listener");
    let (status, text) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(metric(&text, "skiff_share_records_acquired_total"), 16);
    assert_eq!(metric(&text, "skiff_share_records_redelivered_total"), 5);
    assert_eq!(metric(&text, "skiff_share_records_acknowledged_total"), 9);
    assert_eq!(metric(&text, "skiff_share_records_archived_total"), 2);
    assert_eq!(metric(&text, "skiff_share_records_acquired"), 0);
    assert_eq!(metric(&text, "skiff_share_sessions"), 1);
    broker.stop().await;
}

/// A record whose lock runs out (a group's short `share.record.lock.duration.ms`) goes to the
/// next member, waking its long poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_locks_redeliver() {
    let broker = TestBroker::start_with(share_config).await;
    let mut admin = broker.client().await;
    let topic = create_topic(&mut admin, TOPIC).await;
    set_group_config(&mut admin, GROUP, "share.record.lock.duration.ms", "1000").await;
    let mut m1 = Member::join(&broker, GROUP, "m1").await;
    let mut m2 = Member::join(&broker, GROUP, "m2").await;
    produce(&mut admin, TOPIC, &["a"]).await;
    let r = m1.fetch(topic, &[], 10, 0).await;
    assert_eq!(r.acquisition_lock_timeout_ms, 1000);
    assert_eq!(acquired(&r), vec![(0, 0, 1)]);
    let started = Instant::now();
    let r = m2.fetch(topic, &[], 10, 10_000).await;
    assert_eq!(acquired(&r), vec![(0, 0, 2)]);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(8), "{waited:?}");
    // m1's lock is gone: its acknowledgement is refused.
    assert_eq!(
        m1.ack(topic, &[(0, 0, &[ACCEPT])]).await,
        error_codes::INVALID_RECORD_STATE
    );
    assert_eq!(m2.ack(topic, &[(0, 0, &[ACCEPT])]).await, 0);
    broker.stop().await;
}

/// A member that leaves the group, or whose connection closes, gives its records back at once,
/// their unfinished delivery not counted; a long poll gets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_leave_or_disconnect_release_their_records() {
    let broker = TestBroker::start_with(share_config).await;
    let mut admin = broker.client().await;
    let topic = create_topic(&mut admin, TOPIC).await;
    let mut m1 = Member::join(&broker, GROUP, "m1").await;
    let mut m2 = Member::join(&broker, GROUP, "m2").await;
    let mut m3 = Member::join(&broker, GROUP, "m3").await;
    produce(&mut admin, TOPIC, &["a", "b", "c"]).await;
    assert_eq!(
        acquired(&m1.fetch(topic, &[], 10, 0).await),
        vec![(0, 2, 1)]
    );

    // m2 waits; m1 leaves.
    let waiting = tokio::spawn(async move {
        let r = m2.fetch(topic, &[], 10, 10_000).await;
        (m2, r)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(heartbeat(&mut m1.c, GROUP, "m1", -1).await, 0);
    let (m2, r) = tokio::time::timeout(TIMEOUT, waiting)
        .await
        .expect("in time")
        .expect("joined");
    assert_eq!(acquired(&r), vec![(0, 2, 1)]);
    // m1's session went with it; it is no member any more.
    let r = m1.ack_with(m1.ack_request(topic, &[]), 2).await;
    assert_eq!(r.error_code, error_codes::SHARE_SESSION_NOT_FOUND);
    m1.epoch = 0;
    assert_eq!(
        m1.fetch(topic, &[], 10, 0).await.error_code,
        error_codes::UNKNOWN_MEMBER_ID
    );

    // m2's connection closes: m3 gets the records.
    drop(m2);
    let r = m3.fetch(topic, &[], 10, 10_000).await;
    assert_eq!(acquired(&r), vec![(0, 2, 1)]);
    broker.stop().await;
}

/// A member fenced for missing its heartbeats gives its records back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_members_release_their_records() {
    let broker = TestBroker::start_with(|config| {
        share_config(config);
        config.groups.share_session_timeout_ms = 1500;
        config.groups.share_heartbeat_interval_ms = 500;
    })
    .await;
    let mut admin = broker.client().await;
    let topic = create_topic(&mut admin, TOPIC).await;
    let mut m1 = Member::join(&broker, GROUP, "m1").await;
    let mut m2 = Member::join(&broker, GROUP, "m2").await;
    produce(&mut admin, TOPIC, &["a", "b"]).await;
    assert_eq!(
        acquired(&m1.fetch(topic, &[], 10, 0).await),
        vec![(0, 1, 1)]
    );
    // Nobody heartbeats: m1's session times out (and m2's, but its share session holds).
    let started = Instant::now();
    let r = m2.fetch(topic, &[], 10, 15_000).await;
    assert_eq!(acquired(&r), vec![(0, 1, 1)]);
    assert!(started.elapsed() < Duration::from_secs(12));
    broker.stop().await;
}

/// A restart on the same data directory loses no acknowledgement: what was accepted or rejected
/// is never delivered again. What the member still held was released when its connection
/// closed (its delivery not counted), so it comes back on its first delivery. Share sessions do
/// not survive a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_no_acknowledgement() {
    let broker = TestBroker::start_with(share_config).await;
    let mut admin = broker.client().await;
    let topic = create_topic(&mut admin, TOPIC).await;
    let mut m1 = Member::join(&broker, GROUP, "m1").await;
    let values: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    produce(&mut admin, TOPIC, &values).await;
    assert_eq!(acquired(&m1.fetch(topic, &[], 5, 0).await), vec![(0, 4, 1)]);
    assert_eq!(
        m1.ack(topic, &[(0, 2, &[ACCEPT]), (3, 3, &[REJECT])]).await,
        0
    );
    drop(m1);
    drop(admin);
    let broker = broker.restart_with(share_config).await;
    assert_eq!(
        broker.broker().share_partition_states(GROUP),
        vec![(topic, 0, 4, 0)]
    );
    let mut m1 = Member {
        c: broker.client().await,
        group: GROUP.into(),
        id: "m1".into(),
        epoch: 2,
    };
    assert_eq!(
        m1.fetch(topic, &[], 100, 0).await.error_code,
        error_codes::SHARE_SESSION_NOT_FOUND
    );
    m1.epoch = 0;
    assert_eq!(
        acquired(&m1.fetch(topic, &[], 100, 0).await),
        vec![(4, 9, 1)]
    );
    broker.stop().await;
}

/// `share.isolation.level = read_committed`: records of aborted transactions and transaction
/// markers are never delivered, and nothing past the last stable offset; read_uncommitted
/// delivers aborted records but no markers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_share_groups_skip_aborted_transactions() {
    let broker = TestBroker::start_with(share_config).await;
    let mut admin = broker.client().await;
    let topic = create_topic(&mut admin, TOPIC).await;
    set_group_config(
        &mut admin,
        "committed",
        "share.isolation.level",
        "read_committed",
    )
    .await;
    let mut rc = Member::join(&broker, "committed", "rc").await;
    let mut ru = Member::join(&broker, "uncommitted", "ru").await;

    // 0-1 aborted (marker 2), 3 plain, 4 committed (marker 5).
    let tid = "share-txn";
    let producer = txn::init(&mut admin, tid, 60_000).await;
    assert_eq!(
        txn::add_partition(&mut admin, tid, producer, TOPIC).await,
        0
    );
    let (code, _) = txn::produce(
        &mut admin,
        Some(tid),
        TOPIC,
        txn::txn_batch(producer, 0, &[b"x", b"y"]),
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(txn::end(&mut admin, tid, producer, false).await, 0);
    assert_eq!(
        txn::produce(&mut admin, None, TOPIC, txn::plain_batch(&[b"p"]))
            .await
            .0,
        0
    );
    assert_eq!(
        txn::add_partition(&mut admin, tid, producer, TOPIC).await,
        0
    );
    let (code, _) = txn::produce(
        &mut admin,
        Some(tid),
        TOPIC,
        txn::txn_batch(producer, 2, &[b"c"]),
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(txn::end(&mut admin, tid, producer, true).await, 0);

    assert_eq!(
        acquired(&rc.fetch(topic, &[], 100, 0).await),
        vec![(3, 4, 1)]
    );
    assert_eq!(
        acquired(&ru.fetch(topic, &[], 100, 0).await),
        vec![(0, 1, 1), (3, 4, 1)]
    );

    // An open transaction holds read_committed back at its first offset (6).
    assert_eq!(
        txn::add_partition(&mut admin, tid, producer, TOPIC).await,
        0
    );
    let (code, _) = txn::produce(
        &mut admin,
        Some(tid),
        TOPIC,
        txn::txn_batch(producer, 3, &[b"o"]),
    )
    .await;
    assert_eq!(code, 0);
    assert!(acquired(&rc.fetch(topic, &[], 100, 0).await).is_empty());
    assert_eq!(
        acquired(&ru.fetch(topic, &[], 100, 0).await),
        vec![(6, 6, 1)]
    );
    assert_eq!(txn::end(&mut admin, tid, producer, true).await, 0);
    assert_eq!(
        acquired(&rc.fetch(topic, &[], 100, 5_000).await),
        vec![(6, 6, 1)]
    );
    broker.stop().await;
}

/// ShareFetch and ShareAcknowledge are advertised (v1-2) with `group.share.enable` only.
#[tokio::test]
async fn share_fetch_apis_are_advertised_only_when_enabled() {
    for enabled in [false, true] {
        let broker = TestBroker::start_with(|config| config.share_groups_enabled = enabled).await;
        let mut c = broker.client().await;
        let Response::ApiVersions(r) = c.call(ApiVersionsRequest::default(), 3).await else {
            panic!("not an ApiVersions response");
        };
        for api in [ApiKey::ShareFetch, ApiKey::ShareAcknowledge] {
            let range = r
                .api_keys
                .iter()
                .find(|k| k.api_key == api.key())
                .map(|k| (k.min_version, k.max_version));
            assert_eq!(range, enabled.then_some((1, 2)), "{api:?}");
        }
        if !enabled {
            let mut m = Member {
                c,
                group: GROUP.into(),
                id: "m1".into(),
                epoch: 0,
            };
            let r = m.fetch(Uuid::from_u128(1), &[], 10, 0).await;
            assert_eq!(r.error_code, error_codes::UNSUPPORTED_VERSION);
        }
        broker.stop().await;
    }
}

/// `group.share.max.share.sessions`: a session beyond it is SHARE_SESSION_LIMIT_REACHED, after
/// the request's MaxWaitMs; a member reopening its own session needs no new slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_sessions_are_bounded() {
    let broker = TestBroker::start_with(|config| {
        share_config(config);
        config.share_max_sessions = 1;
    })
    .await;
    let mut admin = broker.client().await;
    let topic = create_topic(&mut admin, TOPIC).await;
    let mut m1 = Member::join(&broker, GROUP, "m1").await;
    let mut m2 = Member::join(&broker, GROUP, "m2").await;
    assert_eq!(m1.fetch(topic, &[], 10, 0).await.error_code, 0);
    let started = Instant::now();
    let r = m2.fetch(topic, &[], 10, 300).await;
    assert_eq!(r.error_code, error_codes::SHARE_SESSION_LIMIT_REACHED);
    assert!(started.elapsed() >= Duration::from_millis(250));
    m1.epoch = 0;
    assert_eq!(m1.fetch(topic, &[], 10, 0).await.error_code, 0);
    // m1's session closes with its connection: there is room for m2.
    drop(m1);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        m2.epoch = 0;
        let r = m2.fetch(topic, &[], 10, 0).await;
        if r.error_code == 0 {
            break;
        }
        assert_eq!(r.error_code, error_codes::SHARE_SESSION_LIMIT_REACHED);
        assert!(Instant::now() < deadline, "m1's session never closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    broker.stop().await;
}

/// ShareAcquireMode (v2, KIP-1206): the default `batch_optimized` acquires whole batches, so
/// one fetch takes a 10-record batch whole past a record limit of 3; `record_limit` stops at 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_modes_cut_at_batches_or_at_the_record_limit() {
    let broker = TestBroker::start_with(share_config).await;
    let mut admin = broker.client().await;
    let topic = create_topic(&mut admin, TOPIC).await;
    let mut m1 = Member::join(&broker, GROUP, "m1").await;
    let mut m2 = Member::join(&broker, GROUP, "m2").await;
    for _ in 0..2 {
        let values: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
        let values: Vec<&[u8]> = values.iter().map(String::as_bytes).collect();
        let Response::Produce(p) = admin
            .call(produce_request(TOPIC, 0, -1, batch(&values)), 9)
            .await
        else {
            panic!("not a produce response");
        };
        assert_eq!(p.responses[0].partition_responses[0].error_code, 0);
    }
    let whole = m1.fetch(topic, &[], 3, 0).await;
    assert_eq!(acquired(&whole), vec![(0, 9, 1)]);
    let mut request = m2.fetch_request(topic, &[], 3, 0);
    request.share_acquire_mode = 1;
    assert_eq!(acquired(&m2.fetch_with(request).await), vec![(10, 12, 1)]);
    broker.stop().await;
}
