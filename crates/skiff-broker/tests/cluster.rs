//! Cluster mode: three brokers on loopback sharing one real PostgreSQL (started by
//! skiff-testkit) and one object store (a shared directory, or moto's S3 server). Topics made
//! through one broker are seen by all; each partition has one leader; records produced through
//! their leader are read back through it, from any broker's Metadata; a broker that leaves hands
//! its partitions over; a broker whose lease lapsed has its commits refused.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use common::txn::{
    add_offsets, add_partition, contents, end, fetch, init, latest, produce as produce_txn,
    stable_offset, txn_batch, txn_commit_offset,
};
use common::{Client, TIMEOUT, batch, fetch_request, produce_request};
use skiff_broker::{BrokerConfig, ClusterConfig, RunningBroker};
use skiff_protocol::generated::create_topics_request::CreatableTopic;
use skiff_protocol::generated::fetch_request::FetchPartition;
use skiff_protocol::generated::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use skiff_protocol::generated::{
    CreateTopicsRequest, DeleteRecordsRequest, ListOffsetsRequest, MetadataRequest,
};
use skiff_protocol::{Response, Uuid, error_codes};
use skiff_records::RecordBatches;
use skiff_testkit::postgres::Postgres;

/// One broker of a test cluster, with its own (scratch) data directory.
struct Node {
    running: Option<RunningBroker>,
    addr: std::net::SocketAddr,
    node_id: i32,
    _dir: tempfile::TempDir,
}

struct TestCluster {
    /// Applied to every broker's config.
    adjust: fn(&mut BrokerConfig),
    _pg: Postgres,
    metadata_url: String,
    objects_url: String,
    s3: Option<skiff_testkit::s3::S3Server>,
    _objects_dir: tempfile::TempDir,
    nodes: Vec<Node>,
}

fn cluster_config(
    metadata_url: &str,
    objects_url: &str,
    s3: Option<&skiff_testkit::s3::S3Server>,
) -> ClusterConfig {
    let mut c = ClusterConfig::new(metadata_url, objects_url);
    c.commit_interval_ms = 10;
    c.lease_ms = 3_000;
    c.object_grace_ms = 0;
    if let Some(server) = s3 {
        c.s3.endpoint = Some(server.endpoint());
        c.s3.region = Some(skiff_testkit::s3::REGION.into());
        c.s3.credentials = Some(skiff_cluster::objects::Credentials {
            access_key_id: skiff_testkit::s3::ACCESS_KEY_ID.into(),
            secret_access_key: skiff_testkit::s3::SECRET_ACCESS_KEY.into(),
            session_token: None,
        });
    }
    c
}

impl TestCluster {
    /// A cluster of `n` brokers on a shared directory (`s3`: on moto's S3 server instead);
    /// `None` when PostgreSQL (or moto) is not installed, outside CI.
    async fn start(name: &str, n: i32, s3: bool) -> Option<TestCluster> {
        Self::start_with(name, n, s3, |_| {}).await
    }

    /// [`TestCluster::start`] with `adjust` applied to each broker's config.
    async fn start_with(
        name: &str,
        n: i32,
        s3: bool,
        adjust: fn(&mut BrokerConfig),
    ) -> Option<TestCluster> {
        let pg = Postgres::start().expect("start PostgreSQL")?;
        let metadata_url = pg.database(name).await.expect("database");
        let objects_dir = tempfile::tempdir().expect("tempdir");
        let (objects_url, server) = if s3 {
            let server = skiff_testkit::s3::S3Server::start().expect("start moto")?;
            server.create_bucket("skiff").await.expect("bucket");
            (format!("s3://skiff/{name}"), Some(server))
        } else {
            (format!("file://{}", objects_dir.path().display()), None)
        };
        let mut cluster = TestCluster {
            adjust,
            _pg: pg,
            metadata_url,
            objects_url,
            s3: server,
            _objects_dir: objects_dir,
            nodes: Vec::new(),
        };
        for id in 1..=n {
            cluster.add(id).await;
        }
        Some(cluster)
    }

    async fn add(&mut self, node_id: i32) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = BrokerConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            data_dir: dir.path().to_path_buf(),
            node_id,
            cluster: Some(cluster_config(
                &self.metadata_url,
                &self.objects_url,
                self.s3.as_ref(),
            )),
            ..Default::default()
        };
        (self.adjust)(&mut config);
        let running = skiff_broker::start(config).await.expect("broker starts");
        self.nodes.push(Node {
            addr: running.local_addr,
            running: Some(running),
            node_id,
            _dir: dir,
        });
    }

    fn node(&self, id: i32) -> &Node {
        self.nodes.iter().find(|n| n.node_id == id).expect("node")
    }

    async fn client(&self, id: i32) -> Client {
        Client::connect(self.node(id).addr).await
    }

    /// Stops broker `id` cleanly (it leaves the cluster).
    async fn stop(&mut self, id: i32) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.node_id == id)
            .expect("node");
        if let Some(running) = node.running.take() {
            tokio::time::timeout(TIMEOUT, running.shutdown())
                .await
                .expect("stops in time")
                .expect("clean stop");
        }
    }

    async fn stop_all(mut self) {
        let ids: Vec<i32> = self.nodes.iter().map(|n| n.node_id).collect();
        for id in ids {
            self.stop(id).await;
        }
    }
}

async fn metadata(c: &mut Client, topic: &str) -> skiff_protocol::generated::MetadataResponse {
    let request = MetadataRequest {
        topics: Some(vec![
            skiff_protocol::generated::metadata_request::MetadataRequestTopic {
                name: Some(topic.into()),
                ..Default::default()
            },
        ]),
        allow_auto_topic_creation: false,
        ..Default::default()
    };
    match c.call(request, 12).await {
        Response::Metadata(m) => m,
        other => panic!("unexpected {other:?}"),
    }
}

/// Each partition's leader, as broker `via` sees it.
async fn leaders(cluster: &TestCluster, via: i32, topic: &str) -> Vec<i32> {
    let mut c = cluster.client(via).await;
    let m = metadata(&mut c, topic).await;
    let mut partitions = m.topics[0].partitions.clone();
    partitions.sort_by_key(|p| p.partition_index);
    partitions.iter().map(|p| p.leader_id).collect()
}

/// Waits (bounded) until broker `via`'s Metadata lists exactly `ids`.
async fn wait_for_brokers(cluster: &TestCluster, via: i32, ids: &[i32]) {
    let mut c = cluster.client(via).await;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let m = metadata(&mut c, "").await;
        let mut live: Vec<i32> = m.brokers.iter().map(|b| b.node_id).collect();
        live.sort();
        if live == ids {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "brokers {live:?}, expected {ids:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded) until every coordinator shard is owned, by `n` brokers between them, the
/// same way twice 300 ms apart: brokers join one by one, and each join moves shards away from
/// their first owner (who serves them until it has released them).
async fn wait_for_shards(cluster: &TestCluster, n: usize) {
    let db = skiff_cluster::Db::new(&cluster.metadata_url, 1).expect("pool");
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let mut last = None;
    loop {
        let owners: Vec<Option<i32>> = skiff_cluster::coordinators::shards(&db)
            .await
            .expect("shards")
            .iter()
            .map(|s| s.owner)
            .collect();
        let distinct: std::collections::BTreeSet<_> = owners.iter().collect();
        let settled = owners.iter().all(Option::is_some) && distinct.len() == n;
        if settled && last.as_ref() == Some(&owners) {
            return;
        }
        last = settled.then_some(owners);
        assert!(
            tokio::time::Instant::now() < deadline,
            "coordinator shards never settled over {n} brokers"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn create_topic(c: &mut Client, name: &str, partitions: i32) -> Uuid {
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: -1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    match c.call(request, 7).await {
        Response::CreateTopics(r) => {
            assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
            r.topics[0].topic_id
        }
        other => panic!("unexpected {other:?}"),
    }
}

async fn produce(c: &mut Client, topic: &str, partition: i32, records: Bytes) -> (i16, i64) {
    match c
        .call(produce_request(topic, partition, -1, records), 9)
        .await
    {
        Response::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Every (offset, value) of a partition from `offset`, read until the high watermark.
async fn read_all(c: &mut Client, topic: &str, id: Uuid, partition: i32) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    loop {
        let mut request = fetch_request(topic, id, offset, 0, 0);
        request.topics[0].partitions = vec![FetchPartition {
            partition,
            fetch_offset: offset,
            partition_max_bytes: 1 << 20,
            current_leader_epoch: -1,
            log_start_offset: -1,
            ..Default::default()
        }];
        let response = c.call(request, 13).await;
        let Response::Fetch(f) = response else {
            panic!("unexpected {response:?}");
        };
        let p = &f.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "fetch error");
        let records = p.records.clone().unwrap_or_default();
        let before = out.len();
        for b in RecordBatches::new(records) {
            let b = b.expect("valid batch");
            for r in b.records().expect("uncompressed") {
                let r = r.expect("record");
                if r.offset >= offset {
                    out.push((r.offset, r.value.map(|v| v.to_vec()).unwrap_or_default()));
                }
            }
        }
        if let Some((last, _)) = out.last() {
            offset = last + 1;
        }
        if offset >= p.high_watermark || out.len() == before {
            return out;
        }
    }
}

/// Waits (bounded) until every running broker lists the topic; returns each one's leaders.
async fn wait_for_topic(cluster: &TestCluster, topic: &str, partitions: i32) -> Vec<Vec<i32>> {
    let mut views = Vec::new();
    for node in cluster.nodes.iter().filter(|n| n.running.is_some()) {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let l = leaders(cluster, node.node_id, topic).await;
            if l.len() == partitions as usize {
                views.push(l);
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "topic not seen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    views
}

async fn check_produce_and_read(cluster: &TestCluster, topic: &str, partitions: i32) {
    let mut admin = cluster.client(1).await;
    let id = create_topic(&mut admin, topic, partitions).await;
    // Every broker sees the topic and agrees on the leaders.
    let mut views = wait_for_topic(cluster, topic, partitions).await;
    assert!(views.windows(2).all(|w| w[0] == w[1]), "{views:?}");
    let leaders = views.remove(0);

    for p in 0..partitions {
        let leader = leaders[p as usize];
        let mut c = cluster.client(leader).await;
        for round in 0..3 {
            let values: Vec<Vec<u8>> = (0..4)
                .map(|i| format!("p{p}-r{round}-{i}").into_bytes())
                .collect();
            let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
            let (code, base) = produce(&mut c, topic, p, batch(&refs)).await;
            assert_eq!(code, 0, "produce to the leader of {p}");
            assert_eq!(base, round * 4);
        }
        // A broker that does not lead the partition sends the client to fresh metadata.
        if let Some(other) = cluster.nodes.iter().find(|n| n.node_id != leader) {
            let mut o = Client::connect(other.addr).await;
            let (code, _) = produce(&mut o, topic, p, batch(&[b"x"])).await;
            assert_eq!(code, error_codes::NOT_LEADER_OR_FOLLOWER);
        }
        let got = read_all(&mut c, topic, id, p).await;
        assert_eq!(got.len(), 12);
        for (i, (offset, value)) in got.iter().enumerate() {
            assert_eq!(*offset, i as i64);
            assert_eq!(value, &format!("p{p}-r{}-{}", i / 4, i % 4).into_bytes());
        }
        // ListOffsets: earliest and latest.
        let request = ListOffsetsRequest {
            replica_id: -1,
            topics: vec![ListOffsetsTopic {
                name: topic.into(),
                partitions: vec![
                    ListOffsetsPartition {
                        partition_index: p,
                        timestamp: -1,
                        current_leader_epoch: -1,
                        ..Default::default()
                    },
                    ListOffsetsPartition {
                        partition_index: p,
                        timestamp: -2,
                        current_leader_epoch: -1,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        match c.call(request, 7).await {
            Response::ListOffsets(r) => {
                let offsets: Vec<i64> = r.topics[0].partitions.iter().map(|p| p.offset).collect();
                assert_eq!(offsets, vec![12, 0]);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_brokers_share_topics_and_records() {
    let Some(cluster) = TestCluster::start("three", 3, false).await else {
        return;
    };
    wait_for_brokers(&cluster, 2, &[1, 2, 3]).await;
    check_produce_and_read(&cluster, "shared", 6).await;
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_live_in_an_s3_compatible_store() {
    let Some(cluster) = TestCluster::start("s3", 2, true).await else {
        return;
    };
    wait_for_brokers(&cluster, 1, &[1, 2]).await;
    check_produce_and_read(&cluster, "in-s3", 3).await;
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_that_leaves_hands_its_partitions_over() {
    let Some(mut cluster) = TestCluster::start("leave", 3, false).await else {
        return;
    };
    wait_for_brokers(&cluster, 1, &[1, 2, 3]).await;
    let mut admin = cluster.client(1).await;
    let id = create_topic(&mut admin, "moving", 8).await;
    wait_for_topic(&cluster, "moving", 8).await;
    let before = leaders(&cluster, 1, "moving").await;
    let mut written = Vec::new();
    for (p, leader) in before.iter().enumerate() {
        let mut c = cluster.client(*leader).await;
        let (code, _) = produce(
            &mut c,
            "moving",
            p as i32,
            batch(&[format!("v{p}").as_bytes()]),
        )
        .await;
        assert_eq!(code, 0);
        written.push(p);
    }
    let gone = before[0];
    cluster.stop(gone).await;
    let rest: Vec<i32> = [1, 2, 3].into_iter().filter(|n| *n != gone).collect();
    for node in &rest {
        wait_for_brokers(&cluster, *node, &rest).await;
    }
    let after = leaders(&cluster, rest[0], "moving").await;
    for (p, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_ne!(*a, gone, "partition {p} still led by the stopped broker");
        if *b != gone {
            assert_eq!(a, b, "partition {p} moved without cause");
        }
    }
    // What was written before is read through the new leaders, and they take new records.
    for p in written {
        let mut c = cluster.client(after[p]).await;
        let got = read_all(&mut c, "moving", id, p as i32).await;
        assert_eq!(got, vec![(0, format!("v{p}").into_bytes())]);
        let (code, base) = produce(&mut c, "moving", p as i32, batch(&[b"next"])).await;
        assert_eq!((code, base), (0, 1));
    }
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_whose_lease_lapsed_commits_nothing() {
    let Some(cluster) = TestCluster::start("lapsed", 1, false).await else {
        return;
    };
    let mut c = cluster.client(1).await;
    let id = create_topic(&mut c, "fenced", 1).await;
    wait_for_topic(&cluster, "fenced", 1).await;
    let (code, _) = produce(&mut c, "fenced", 0, batch(&[b"before"])).await;
    assert_eq!(code, 0);
    // The lease lapses behind the broker's back (as if it had been paused past it).
    let db = skiff_cluster::Db::new(&cluster.metadata_url, 2).expect("pool");
    db.client()
        .await
        .expect("connect")
        .execute(
            "UPDATE brokers SET lease_until = now() - interval '1 second'",
            &[],
        )
        .await
        .expect("expire");
    let (code, _) = produce(&mut c, "fenced", 0, batch(&[b"refused"])).await;
    assert_eq!(
        code,
        error_codes::NOT_LEADER_OR_FOLLOWER,
        "a lapsed broker's commit is refused"
    );
    // It registers again (a new epoch) and serves again.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let (code, _) = produce(&mut c, "fenced", 0, batch(&[b"after"])).await;
        if code == 0 {
            break;
        }
        assert_eq!(code, error_codes::NOT_LEADER_OR_FOLLOWER);
        assert!(
            tokio::time::Instant::now() < deadline,
            "never registered again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let values: Vec<Vec<u8>> = read_all(&mut c, "fenced", id, 0)
        .await
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, vec![b"before".to_vec(), b"after".to_vec()]);
    // DeleteRecords moves the log start in PostgreSQL.
    let request = DeleteRecordsRequest {
        topics: vec![
            skiff_protocol::generated::delete_records_request::DeleteRecordsTopic {
                name: "fenced".into(),
                partitions: vec![
                    skiff_protocol::generated::delete_records_request::DeleteRecordsPartition {
                        partition_index: 0,
                        offset: 1,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
        ],
        timeout_ms: 5_000,
        ..Default::default()
    };
    match c.call(request, 2).await {
        Response::DeleteRecords(r) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!((p.error_code, p.low_watermark), (0, 1));
        }
        other => panic!("unexpected {other:?}"),
    }
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn topic_changes_reach_every_broker() {
    let Some(cluster) = TestCluster::start("topics", 2, false).await else {
        return;
    };
    wait_for_brokers(&cluster, 1, &[1, 2]).await;
    let mut one = cluster.client(1).await;
    // Compacted topics are refused in cluster mode, with a clear error.
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: "compacted".into(),
            num_partitions: 1,
            replication_factor: -1,
            configs: vec![
                skiff_protocol::generated::create_topics_request::CreatableTopicConfig {
                    name: "cleanup.policy".into(),
                    value: Some("compact".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    match one.call(request, 7).await {
        Response::CreateTopics(r) => {
            assert_eq!(r.topics[0].error_code, error_codes::INVALID_CONFIG);
            let message = r.topics[0].error_message.clone().unwrap_or_default();
            assert!(message.contains("cluster mode"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    // Created through broker 1, grown and configured through broker 2, deleted through 1: the
    // other broker sees each change.
    create_topic(&mut one, "changing", 1).await;
    wait_for_topic(&cluster, "changing", 1).await;
    let mut two = cluster.client(2).await;
    let grow = skiff_protocol::generated::CreatePartitionsRequest {
        topics: vec![
            skiff_protocol::generated::create_partitions_request::CreatePartitionsTopic {
                name: "changing".into(),
                count: 4,
                assignments: None,
                ..Default::default()
            },
        ],
        timeout_ms: 10_000,
        ..Default::default()
    };
    match two.call(grow, 3).await {
        Response::CreatePartitions(r) => assert_eq!(r.results[0].error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    wait_for_topic(&cluster, "changing", 4).await;
    let delete = skiff_protocol::generated::DeleteTopicsRequest {
        topic_names: vec!["changing".into()],
        timeout_ms: 10_000,
        ..Default::default()
    };
    match one.call(delete, 5).await {
        Response::DeleteTopics(r) => assert_eq!(r.responses[0].error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let m = metadata(&mut two, "changing").await;
        if m.topics[0].error_code == error_codes::UNKNOWN_TOPIC_OR_PARTITION {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "broker 2 still lists the topic"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.stop_all().await;
}

/// FindCoordinator for a group through broker `via` (the node it names).
async fn find_coordinator(cluster: &TestCluster, via: i32, group: &str) -> i32 {
    let found = try_find_coordinator(cluster, via, group).await;
    found.unwrap_or_else(|code| panic!("FindCoordinator answered {code}"))
}

/// FindCoordinator for a group through broker `via`: the node, or the error code (a broker
/// whose view of the live set is changing may answer COORDINATOR_NOT_AVAILABLE for a moment).
async fn try_find_coordinator(cluster: &TestCluster, via: i32, group: &str) -> Result<i32, i16> {
    try_find(cluster, via, 0, group).await
}

/// FindCoordinator of `key_type` (0 group, 1 transactional ID) for `key` through broker `via`.
async fn try_find(cluster: &TestCluster, via: i32, key_type: i8, key: &str) -> Result<i32, i16> {
    let mut c = cluster.client(via).await;
    let request = skiff_protocol::generated::FindCoordinatorRequest {
        key_type,
        coordinator_keys: vec![key.into()],
        ..Default::default()
    };
    match c.call(request, 4).await {
        Response::FindCoordinator(r) if r.coordinators[0].error_code == 0 => {
            Ok(r.coordinators[0].node_id)
        }
        Response::FindCoordinator(r) => Err(r.coordinators[0].error_code),
        other => panic!("unexpected {other:?}"),
    }
}

/// One KIP-848 heartbeat; answers (error code, member ID, member epoch, assigned partitions).
async fn consumer_heartbeat(
    c: &mut Client,
    group: &str,
    member: &str,
    epoch: i32,
) -> (i16, String, i32, Vec<i32>) {
    let request = skiff_protocol::generated::ConsumerGroupHeartbeatRequest {
        group_id: group.into(),
        member_id: member.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: (epoch == 0).then(|| vec!["work".into()]),
        server_assignor: None,
        topic_partitions: (epoch == 0).then(Vec::new),
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::ConsumerGroupHeartbeat(r) => {
            let mut partitions: Vec<i32> = r
                .assignment
                .iter()
                .flat_map(|a| &a.topic_partitions)
                .flat_map(|t| t.partitions.iter().copied())
                .collect();
            partitions.sort();
            (
                r.error_code,
                r.member_id.map(|m| m.to_string()).unwrap_or_default(),
                r.member_epoch,
                partitions,
            )
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Heartbeats through whichever broker FindCoordinator names until one is answered without a
/// coordinator error (a shard moving or loading); answers like [`consumer_heartbeat`] and the
/// node that answered.
async fn heartbeat_coordinator(
    cluster: &TestCluster,
    group: &str,
    member: &str,
    epoch: i32,
) -> ((i16, String, i32, Vec<i32>), i32) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let via = cluster
        .nodes
        .iter()
        .find(|n| n.running.is_some())
        .expect("a running broker")
        .node_id;
    loop {
        let Ok(node) = try_find_coordinator(cluster, via, group).await else {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no coordinator named"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if cluster.node(node).running.is_none() {
            // Named from a live set that has not yet heard of the stop.
            assert!(
                tokio::time::Instant::now() < deadline,
                "a stopped coordinator named"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let mut c = cluster.client(node).await;
        let answer = consumer_heartbeat(&mut c, group, member, epoch).await;
        if ![
            error_codes::NOT_COORDINATOR,
            error_codes::COORDINATOR_LOAD_IN_PROGRESS,
            error_codes::COORDINATOR_NOT_AVAILABLE,
        ]
        .contains(&answer.0)
        {
            return (answer, node);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no coordinator answered: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn commit_offset(c: &mut Client, group: &str, member: &str, epoch: i32, offset: i64) -> i16 {
    use skiff_protocol::generated::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    let request = skiff_protocol::generated::OffsetCommitRequest {
        group_id: group.into(),
        generation_id_or_member_epoch: epoch,
        member_id: member.into(),
        topics: vec![OffsetCommitRequestTopic {
            name: "work".into(),
            partitions: vec![OffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: offset,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, 9).await {
        Response::OffsetCommit(r) => r.topics[0].partitions[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

async fn fetch_offset(c: &mut Client, group: &str) -> (i16, i64) {
    use skiff_protocol::generated::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopics,
    };
    let request = skiff_protocol::generated::OffsetFetchRequest {
        groups: vec![OffsetFetchRequestGroup {
            group_id: group.into(),
            topics: Some(vec![OffsetFetchRequestTopics {
                name: "work".into(),
                partition_indexes: vec![0],
                ..Default::default()
            }]),
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, 8).await {
        Response::OffsetFetch(r) => {
            let g = &r.groups[0];
            let offset = g
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .map_or(-1, |p| p.committed_offset);
            (g.error_code, offset)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Makes broker `owner`'s lease lapse behind its back (as if it was paused past it) and waits
/// until another broker owns `group`'s coordinator shard in PostgreSQL: a pool on the cluster's
/// database, and the new owner.
async fn lapse_and_take_over(
    cluster: &TestCluster,
    owner: i32,
    group: &str,
) -> (skiff_cluster::Db, i32) {
    let db = skiff_cluster::Db::new(&cluster.metadata_url, 2).expect("pool");
    let expire = format!(
        "UPDATE brokers SET lease_until = now() - interval '1 second' WHERE node_id = {owner}"
    );
    db.client()
        .await
        .expect("connect")
        .execute(expire.as_str(), &[])
        .await
        .expect("expire");
    let shard = skiff_cluster::coordinators::shard_of(group) as usize;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let shards = skiff_cluster::coordinators::shards(&db)
            .await
            .expect("shards");
        if let Some(o) = shards[shard].owner
            && o != owner
        {
            return (db, o);
        }
        assert!(tokio::time::Instant::now() < deadline, "never taken over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Group coordination across brokers: every broker names the same coordinator for a group,
/// the others answer NOT_COORDINATOR; the group's state and offsets are in PostgreSQL, so when
/// the coordinator's lease lapses (as if it was paused) another broker takes the shard over and
/// the member goes on with the same ID and epoch and the committed offset, while the stale
/// coordinator can change nothing; a clean stop hands shards over at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_coordinators_move_with_their_state() {
    let Some(mut cluster) = TestCluster::start("coordinators", 3, false).await else {
        return;
    };
    wait_for_brokers(&cluster, 1, &[1, 2, 3]).await;
    wait_for_shards(&cluster, 3).await;
    let mut c = cluster.client(1).await;
    create_topic(&mut c, "work", 2).await;
    wait_for_topic(&cluster, "work", 2).await;

    let group = "movers";
    let owner = find_coordinator(&cluster, 1, group).await;
    for via in [2, 3] {
        assert_eq!(find_coordinator(&cluster, via, group).await, owner);
    }
    // A broker that does not coordinate the group refuses it.
    let other = [1, 2, 3]
        .into_iter()
        .find(|n| *n != owner)
        .expect("another");
    let mut wrong = cluster.client(other).await;
    let (code, ..) = consumer_heartbeat(&mut wrong, group, "m-1", 0).await;
    assert_eq!(code, error_codes::NOT_COORDINATOR);

    // Join through the coordinator; the member gets both partitions and commits an offset.
    let ((code, member, mut epoch, mut assigned), node) =
        heartbeat_coordinator(&cluster, group, "member-one-0123456789", 0).await;
    assert_eq!(code, 0);
    assert_eq!(node, owner);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while assigned != [0, 1] {
        assert!(tokio::time::Instant::now() < deadline, "never assigned");
        let ((code, _, e, a), _) = heartbeat_coordinator(&cluster, group, &member, epoch).await;
        assert_eq!(code, 0);
        (epoch, assigned) = (e, a);
    }
    let mut at_owner = cluster.client(owner).await;
    assert_eq!(
        commit_offset(&mut at_owner, group, &member, epoch, 42).await,
        0
    );

    // The coordinator's lease lapses behind its back: another broker takes the shard.
    let (db, successor) = lapse_and_take_over(&cluster, owner, group).await;
    // The stale coordinator changes nothing: its commit is refused.
    let stale = commit_offset(&mut at_owner, group, &member, epoch, 99).await;
    assert!(
        [
            error_codes::NOT_COORDINATOR,
            error_codes::COORDINATOR_LOAD_IN_PROGRESS
        ]
        .contains(&stale),
        "a stale coordinator stored a commit: {stale}"
    );
    // The successor knows the member (same ID and epoch) and the committed offset.
    let mut at_successor = cluster.client(successor).await;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let (code, m, e, a) = consumer_heartbeat(&mut at_successor, group, &member, epoch).await;
        if code == 0 {
            // The same epoch, and no new assignment: the member keeps what it had.
            assert_eq!((m.as_str(), e), (member.as_str(), epoch));
            assert!(a.is_empty(), "{a:?}");
            break;
        }
        assert_eq!(code, error_codes::COORDINATOR_LOAD_IN_PROGRESS, "{code}");
        assert!(tokio::time::Instant::now() < deadline, "never loaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fetch_offset(&mut at_successor, group).await, (0, 42));

    // A clean stop of the successor hands the shard over without waiting for its lease; once
    // the first coordinator is back in the live set, every broker names one owner again.
    cluster.stop(successor).await;
    let ((code, m, e, _), node) = heartbeat_coordinator(&cluster, group, &member, epoch).await;
    assert_eq!((code, m.as_str(), e), (0, member.as_str(), epoch));
    assert_ne!(node, successor);
    let mut at_node = cluster.client(node).await;
    assert_eq!(fetch_offset(&mut at_node, group).await, (0, 42));

    // Simple commits for groups spread over many shards; then a broker joins: the shards placed
    // on it are released by their owners and claimed by it, with their offsets.
    let groups: Vec<String> = (0..24).map(|i| format!("joiner-{i}")).collect();
    for (i, g) in groups.iter().enumerate() {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let via = node;
            if let Ok(n) = try_find_coordinator(&cluster, via, g).await
                && cluster.node(n).running.is_some()
                && commit_offset(&mut cluster.client(n).await, g, "", -1, i as i64).await == 0
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{g} never committed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    cluster.add(4).await;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let moved: Vec<(usize, &String)> = loop {
        let shards = skiff_cluster::coordinators::shards(&db)
            .await
            .expect("shards");
        let on_four: Vec<(usize, &String)> = groups
            .iter()
            .enumerate()
            .filter(|(_, g)| {
                shards[skiff_cluster::coordinators::shard_of(g) as usize].owner == Some(4)
            })
            .collect();
        if !on_four.is_empty() {
            break on_four;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node 4 never claimed a shard"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut at_four = cluster.client(4).await;
    for (i, g) in moved {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let (code, offset) = fetch_offset(&mut at_four, g).await;
            if code == 0 {
                assert_eq!(offset, i as i64, "{g} lost its offset in the handover");
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{g}: {code}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    cluster.stop_all().await;
}

/// Polls `check` through broker `via` until it holds (a mirrored change reaching it).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// IncrementalAlterConfigs v1 setting `configs` on one resource: its error code.
async fn alter_configs(
    c: &mut Client,
    resource_type: i8,
    name: &str,
    configs: &[(&str, &str)],
) -> i16 {
    use skiff_protocol::generated::IncrementalAlterConfigsRequest;
    use skiff_protocol::generated::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    let request = IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type,
            resource_name: name.into(),
            configs: configs
                .iter()
                .map(|(key, value)| AlterableConfig {
                    name: (*key).into(),
                    config_operation: 0,
                    value: Some((*value).into()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::IncrementalAlterConfigs(r) => r.responses[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

/// DescribeConfigs v4 of one key of one resource: its value.
async fn described_config(
    c: &mut Client,
    resource_type: i8,
    name: &str,
    key: &str,
) -> Option<String> {
    use skiff_protocol::generated::DescribeConfigsRequest;
    use skiff_protocol::generated::describe_configs_request::DescribeConfigsResource;
    let request = DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type,
            resource_name: name.into(),
            configuration_keys: Some(vec![key.into()]),
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, 4).await {
        Response::DescribeConfigs(r) => r.results[0]
            .configs
            .iter()
            .find(|c| &*c.name == key)
            .and_then(|c| c.value.as_ref().map(|v| v.to_string())),
        other => panic!("unexpected {other:?}"),
    }
}

/// ACLs, SCRAM credentials and CLIENT_METRICS subscriptions are the cluster's: what one broker
/// is told, the others enforce and describe; a broker started later has them before it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn security_and_telemetry_documents_are_shared() {
    use skiff_protocol::generated::create_acls_request::AclCreation;
    use skiff_protocol::generated::{
        CreateAclsRequest, DescribeAclsRequest, DescribeUserScramCredentialsRequest,
    };
    fn secured(config: &mut BrokerConfig) {
        config.security.authorizer = Some(skiff_broker::config::AuthorizerSettings {
            super_users: vec![skiff_auth::principal::KafkaPrincipal::user("ANONYMOUS")],
            allow_everyone_if_no_acl_found: false,
        });
    }
    let Some(mut cluster) = TestCluster::start_with("documents", 2, false, secured).await else {
        return;
    };
    let mut one = cluster.client(1).await;
    let creation = AclCreation {
        resource_type: 2,
        resource_name: "shared-".into(),
        resource_pattern_type: 4,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: 3,
        permission_type: 3,
        ..Default::default()
    };
    let request = CreateAclsRequest {
        creations: vec![creation],
        ..Default::default()
    };
    match one.call(request, 3).await {
        Response::CreateAcls(r) => assert_eq!(r.results[0].error_code, 0, "{r:?}"),
        other => panic!("unexpected {other:?}"),
    }
    add_scram_users(&cluster, &["alice"]).await;
    // A telemetry subscription made through broker 2.
    let mut two = cluster.client(2).await;
    let code = alter_configs(
        &mut two,
        16,
        "shared-subscription",
        &[("metrics", "org.apache.kafka."), ("interval.ms", "1000")],
    )
    .await;
    assert_eq!(code, 0);

    async fn acl_principals(c: &mut Client) -> Vec<String> {
        let request = DescribeAclsRequest {
            resource_type_filter: 1,
            pattern_type_filter: 1,
            operation: 1,
            permission_type: 1,
            resource_name_filter: None,
            principal_filter: None,
            host_filter: None,
            ..Default::default()
        };
        match c.call(request, 3).await {
            Response::DescribeAcls(r) => r
                .resources
                .iter()
                .flat_map(|res| res.acls.iter().map(|a| a.principal.to_string()))
                .collect(),
            other => panic!("unexpected {other:?}"),
        }
    }
    async fn scram_users(c: &mut Client) -> Vec<String> {
        match c
            .call(DescribeUserScramCredentialsRequest::default(), 0)
            .await
        {
            Response::DescribeUserScramCredentials(r) => {
                r.results.iter().map(|u| u.user.to_string()).collect()
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    async fn subscription(c: &mut Client) -> Option<String> {
        described_config(c, 16, "shared-subscription", "metrics").await
    }
    let want_subscription = Some("org.apache.kafka.".to_string());
    for via in [1, 2] {
        let addr = cluster.node(via).addr;
        eventually("the ACL on every broker", || async move {
            acl_principals(&mut Client::connect(addr).await).await == ["User:alice"]
        })
        .await;
        eventually("the SCRAM user on every broker", || async move {
            scram_users(&mut Client::connect(addr).await).await == ["alice"]
        })
        .await;
        eventually("the subscription on every broker", || async move {
            subscription(&mut Client::connect(addr).await)
                .await
                .as_deref()
                == Some("org.apache.kafka.")
        })
        .await;
    }
    // Group configs (resource 32) altered through broker 1 are described by broker 2.
    let code = alter_configs(
        &mut one,
        32,
        "configured-group",
        &[("consumer.session.timeout.ms", "50000")],
    )
    .await;
    assert_eq!(code, 0);
    async fn group_session_timeout(c: &mut Client) -> Option<String> {
        described_config(c, 32, "configured-group", "consumer.session.timeout.ms").await
    }
    let addr = cluster.node(2).addr;
    eventually("the group config on broker 2", || async move {
        group_session_timeout(&mut Client::connect(addr).await)
            .await
            .as_deref()
            == Some("50000")
    })
    .await;

    // A broker that joins later has them all from its first answer.
    cluster.add(3).await;
    let mut three = cluster.client(3).await;
    assert_eq!(acl_principals(&mut three).await, ["User:alice"]);
    assert_eq!(scram_users(&mut three).await, ["alice"]);
    assert_eq!(subscription(&mut three).await, want_subscription);
    assert_eq!(
        group_session_timeout(&mut three).await.as_deref(),
        Some("50000")
    );
    cluster.stop_all().await;
}

/// A PLAINTEXT listener (first) and a SASL_PLAINTEXT one with SCRAM-SHA-512, identities bound
/// to principals with `enforce` (an instance ID's claim held 500 ms after its last connection).
fn sasl_enforced(config: &mut BrokerConfig) {
    use skiff_broker::config::{InstanceBinding, ListenerConfig, SaslMechanism, SecurityProtocol};
    config.listeners = vec![
        ListenerConfig::plaintext("PLAIN", "127.0.0.1:0".parse().expect("addr"), None),
        ListenerConfig {
            protocol: SecurityProtocol::SaslPlaintext,
            sasl_mechanisms: vec![SaslMechanism::ScramSha512],
            ..ListenerConfig::plaintext("SASL", "127.0.0.1:0".parse().expect("addr"), None)
        },
    ];
    config.security.instance_binding = InstanceBinding::Enforce;
    config.security.instance_binding_ms = 500;
}

/// Adds SCRAM-SHA-512 users (password `USER-pw`) through broker 1's PLAINTEXT listener.
async fn add_scram_users(cluster: &TestCluster, users: &[&str]) {
    use skiff_protocol::generated::AlterUserScramCredentialsRequest;
    let upsertions = common::sasl::scram_upsertions(users, |user| format!("{user}-pw"));
    let request = AlterUserScramCredentialsRequest {
        upsertions,
        ..Default::default()
    };
    match cluster.client(1).await.call(request, 0).await {
        Response::AlterUserScramCredentials(r) => {
            assert!(r.results.iter().all(|r| r.error_code == 0), "{r:?}")
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// A client logged in as `user` on broker `node`'s SASL listener, with KIP-1313 ID `instance`
/// in its headers; retried until the credentials have reached that broker.
async fn sasl_client(
    cluster: &TestCluster,
    node: i32,
    user: &str,
    instance: Option<Uuid>,
) -> Client {
    let addr = cluster
        .node(node)
        .running
        .as_ref()
        .expect("running")
        .listener_addrs[1]
        .1;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let mut c = Client::connect(addr).await;
        c.instance_id = instance;
        let (code, _) = common::sasl::scram_login(
            &mut c,
            skiff_auth::scram::ScramMechanism::Sha512,
            user,
            &format!("{user}-pw"),
        )
        .await;
        if code == 0 {
            return c;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{user} never logged in"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// With identities bound to principals, who owns a member ID is stored with the group: after
/// the group's coordinator lost its shard, another principal naming the member at the new
/// coordinator is refused (UNKNOWN_MEMBER_ID) while the owner goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn member_owners_move_with_their_group() {
    let Some(cluster) = TestCluster::start_with("owners", 3, false, sasl_enforced).await else {
        return;
    };
    wait_for_brokers(&cluster, 1, &[1, 2, 3]).await;
    wait_for_shards(&cluster, 3).await;
    add_scram_users(&cluster, &["alice", "bob"]).await;
    let mut c = cluster.client(1).await;
    create_topic(&mut c, "work", 2).await;
    wait_for_topic(&cluster, "work", 2).await;
    let group = "owned-members";
    let member = "alice-member-0123456789";
    let owner = find_coordinator(&cluster, 1, group).await;
    let mut alice = sasl_client(&cluster, owner, "alice", None).await;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let epoch = loop {
        let (code, _, epoch, _) = consumer_heartbeat(&mut alice, group, member, 0).await;
        if code == 0 {
            break epoch;
        }
        assert_eq!(code, error_codes::COORDINATOR_LOAD_IN_PROGRESS, "{code}");
        assert!(tokio::time::Instant::now() < deadline, "alice never joined");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // The coordinator's lease lapses; another broker takes the group.
    let (_db, successor) = lapse_and_take_over(&cluster, owner, group).await;
    // Bob names alice's member at the new coordinator: refused, as on the old one.
    let mut bob = sasl_client(&cluster, successor, "bob", None).await;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let (code, m, e, a) = consumer_heartbeat(&mut bob, group, member, epoch).await;
        eprintln!("BOB {code} {m} {e} {a:?} successor {successor} owner {owner}");
        if code != error_codes::COORDINATOR_LOAD_IN_PROGRESS && code != error_codes::NOT_COORDINATOR
        {
            assert_eq!(
                code,
                error_codes::UNKNOWN_MEMBER_ID,
                "bob took alice's member"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never loaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut alice = sasl_client(&cluster, successor, "alice", None).await;
    let (code, m, e, _) = consumer_heartbeat(&mut alice, group, member, epoch).await;
    assert_eq!((code, m.as_str(), e), (0, member, epoch));
    cluster.stop_all().await;
}

/// With `client.instance.id.binding = enforce`, a client instance ID belongs to one principal
/// across the cluster: another principal presenting it to another broker is refused while the
/// owner's connection is open, and may have it once the owner is gone and the hold has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instance_ids_belong_to_one_principal_across_brokers() {
    let Some(cluster) = TestCluster::start_with("instances", 2, false, sasl_enforced).await else {
        return;
    };
    add_scram_users(&cluster, &["alice", "mallory"]).await;
    let id = Some(Uuid::from_u128(0x1313_0017));
    async fn served(c: &mut Client) -> bool {
        match c.call(MetadataRequest::default(), 12).await {
            Response::Metadata(m) => !m.brokers.is_empty(),
            other => panic!("unexpected {other:?}"),
        }
    }
    let mut alice = sasl_client(&cluster, 1, "alice", id).await;
    assert!(served(&mut alice).await);
    let mut mallory = sasl_client(&cluster, 2, "mallory", id).await;
    assert!(
        !served(&mut mallory).await,
        "another principal took alice's instance ID through another broker"
    );
    drop((alice, mallory));
    // Once alice's connections are gone and the hold has passed, the ID is free.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let mut mallory = sasl_client(&cluster, 2, "mallory", id).await;
        if served(&mut mallory).await {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ID was never released"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster.stop_all().await;
}

/// A read_committed fetch from offset 0 of partition 0 once its last stable offset has reached
/// `stable` (the leader hears of a marker another broker committed a moment later).
async fn fetch_stable(
    c: &mut Client,
    topic: &str,
    stable: i64,
) -> skiff_protocol::generated::fetch_response::PartitionData {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let p = fetch(c, topic, 0, true).await;
        if p.last_stable_offset >= stable {
            return p;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the last stable offset stays at {} (high watermark {})",
            p.last_stable_offset,
            p.high_watermark
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// DescribeTransactions of one transactional ID: (error code, state).
async fn described_transaction(c: &mut Client, tid: &str) -> (i16, String) {
    let request = skiff_protocol::generated::DescribeTransactionsRequest {
        transactional_ids: vec![tid.into()],
        ..Default::default()
    };
    match c.call(request, 0).await {
        Response::DescribeTransactions(r) => {
            let state = &r.transaction_states[0];
            (state.error_code, state.transaction_state.to_string())
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// ListTransactions without filters: the transactional IDs a broker coordinates.
async fn listed_transactions(c: &mut Client) -> Vec<String> {
    let request = skiff_protocol::generated::ListTransactionsRequest {
        duration_filter: -1,
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::ListTransactions(r) => r
            .transaction_states
            .iter()
            .map(|t| t.transactional_id.to_string())
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

/// Commits `tid`'s transaction through whichever broker coordinates it now, retrying until a
/// coordinator answers success (a successor loads the shard, or finishes an end first).
async fn commit_through_coordinator(cluster: &TestCluster, tid: &str, ids: (i64, i16)) {
    eventually("the transaction's coordinator commits it", || async move {
        let Ok(node) = try_find(cluster, 1, 1, tid).await else {
            return false;
        };
        let mut c = cluster.client(node).await;
        end(&mut c, tid, ids, true).await == 0
    })
    .await;
}

/// A read_committed fetch of partition 0 from offset 0 through its current leader, once one
/// succeeds and satisfies `done`.
async fn read_committed_through_leader(
    cluster: &TestCluster,
    topic: &str,
    done: impl Fn(&skiff_protocol::generated::fetch_response::PartitionData) -> bool,
) -> skiff_protocol::generated::fetch_response::PartitionData {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(&leader) = leaders(cluster, 1, topic).await.first() {
            let mut c = cluster.client(leader).await;
            let p = fetch(&mut c, topic, 0, true).await;
            if p.error_code == 0 && done(&p) {
                return p;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "read_committed never saw what was expected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Transactions across brokers: a transactional ID's coordinator is its shard's owner (the
/// others refuse it); records produced to the partition's leader stay invisible to
/// read_committed (the last stable offset holds) until the coordinator's commit marker, and an
/// aborted transaction is named to read_committed fetches; transactional offsets committed to
/// the group's coordinator are unstable until the commit hands them over; when the
/// coordinator's lease lapses, the stale coordinator can end nothing and its successor ends the
/// open transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transactions_span_brokers_and_move_with_their_coordinator() {
    let Some(cluster) = TestCluster::start("transactions", 3, false).await else {
        return;
    };
    wait_for_brokers(&cluster, 1, &[1, 2, 3]).await;
    wait_for_shards(&cluster, 3).await;
    let topic = "txn-out";
    let mut c = cluster.client(1).await;
    create_topic(&mut c, topic, 1).await;
    let leader = wait_for_topic(&cluster, topic, 1).await[0][0];
    let tid = "moving-transactions";
    let coordinator = try_find(&cluster, 1, 1, tid).await.expect("coordinator");
    for via in [2, 3] {
        assert_eq!(try_find(&cluster, via, 1, tid).await, Ok(coordinator));
    }
    let other = [1, 2, 3]
        .into_iter()
        .find(|n| *n != coordinator)
        .expect("another");
    let mut wrong = cluster.client(other).await;
    assert_eq!(
        end(&mut wrong, tid, (0, 0), true).await,
        error_codes::NOT_COORDINATOR
    );

    // A committed transaction: invisible to read_committed until its marker.
    let mut at_coordinator = cluster.client(coordinator).await;
    let ids = init(&mut at_coordinator, tid, 60_000).await;
    assert_eq!(add_partition(&mut at_coordinator, tid, ids, topic).await, 0);
    let mut at_leader = cluster.client(leader).await;
    let batch = txn_batch(ids, 0, &[b"a", b"b"]);
    assert_eq!(
        produce_txn(&mut at_leader, Some(tid), topic, batch).await,
        (0, 0)
    );
    let open = fetch(&mut at_leader, topic, 0, true).await;
    assert!(contents(&open).0.is_empty(), "{open:?}");
    assert_eq!((open.high_watermark, open.last_stable_offset), (2, 0));
    assert_eq!(latest(&mut at_leader, topic, true).await, 0);
    assert_eq!(latest(&mut at_leader, topic, false).await, 2);
    // The admin views: the coordinator describes and lists it; another broker names no state.
    assert_eq!(
        described_transaction(&mut at_coordinator, tid).await,
        (0, "Ongoing".to_string())
    );
    assert_eq!(listed_transactions(&mut at_coordinator).await, vec![tid]);
    assert_eq!(
        described_transaction(&mut wrong, tid).await.0,
        error_codes::NOT_COORDINATOR
    );
    assert!(listed_transactions(&mut wrong).await.is_empty());
    assert_eq!(end(&mut at_coordinator, tid, ids, true).await, 0);
    let committed = fetch_stable(&mut at_leader, topic, 3).await;
    let (data, markers) = contents(&committed);
    assert_eq!(data, vec![(0, b"a".to_vec()), (1, b"b".to_vec())]);
    assert_eq!(markers, vec![2]);
    assert_eq!(committed.last_stable_offset, 3);

    // An aborted transaction is named to read_committed fetches.
    assert_eq!(add_partition(&mut at_coordinator, tid, ids, topic).await, 0);
    let batch = txn_batch(ids, 2, &[b"x"]);
    assert_eq!(
        produce_txn(&mut at_leader, Some(tid), topic, batch).await,
        (0, 3)
    );
    assert_eq!(end(&mut at_coordinator, tid, ids, false).await, 0);
    let aborted = fetch_stable(&mut at_leader, topic, 5).await;
    assert_eq!(aborted.last_stable_offset, 5);
    let named: Vec<(i64, i64)> = aborted
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id, a.first_offset))
        .collect();
    assert_eq!(named, vec![(ids.0, 3)]);

    // Transactional offsets wait beside their group until the commit.
    let group = "transactional-readers";
    let group_coordinator = find_coordinator(&cluster, 1, group).await;
    let mut at_group = cluster.client(group_coordinator).await;
    assert_eq!(add_offsets(&mut at_coordinator, tid, ids, group).await, 0);
    assert_eq!(
        txn_commit_offset(&mut at_group, tid, ids, group, topic, 5).await,
        0
    );
    assert_eq!(
        stable_offset(&mut at_group, group, topic).await.1,
        error_codes::UNSTABLE_OFFSET_COMMIT
    );
    assert_eq!(end(&mut at_coordinator, tid, ids, true).await, 0);
    eventually("the transactional offset is applied", || {
        let cluster = &cluster;
        async move {
            let mut c = cluster.client(group_coordinator).await;
            stable_offset(&mut c, group, topic).await == (5, 0)
        }
    })
    .await;

    // An open transaction whose coordinator's lease lapses: the stale coordinator cannot end
    // it; its successor does.
    assert_eq!(add_partition(&mut at_coordinator, tid, ids, topic).await, 0);
    let batch = txn_batch(ids, 3, &[b"late"]);
    assert_eq!(
        produce_txn(&mut at_leader, Some(tid), topic, batch).await.0,
        0
    );
    let _ = lapse_and_take_over(&cluster, coordinator, tid).await;
    let stale = end(&mut at_coordinator, tid, ids, true).await;
    assert!(
        [
            error_codes::NOT_COORDINATOR,
            error_codes::COORDINATOR_LOAD_IN_PROGRESS
        ]
        .contains(&stale),
        "a stale coordinator ended a transaction: {stale}"
    );
    commit_through_coordinator(&cluster, tid, ids).await;
    let read = read_committed_through_leader(&cluster, topic, |p| {
        p.last_stable_offset == p.high_watermark && contents(p).0.iter().any(|(_, v)| v == b"late")
    })
    .await;
    assert_eq!(read.error_code, 0);
    cluster.stop_all().await;
}

/// A transactional batch that arrives after its transaction's end (cluster mode does not check
/// produced batches against the coordinator) opens a transaction no marker would close and holds
/// the last stable offset; once it has been open for `cluster.transaction.hanging.ms`, the sweep
/// closes it as its coordinator decided (a commit, after CompleteCommit at that epoch). A
/// transaction past its timeout is aborted by its coordinator.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hanging_and_timed_out_transactions_are_closed() {
    let Some(cluster) = TestCluster::start_with("hanging", 1, false, |config| {
        if let Some(c) = config.cluster.as_mut() {
            c.hanging_txn_ms = 1_000;
        }
    })
    .await
    else {
        return;
    };
    wait_for_brokers(&cluster, 1, &[1]).await;
    wait_for_shards(&cluster, 1).await;
    let topic = "late-batches";
    let mut c = cluster.client(1).await;
    create_topic(&mut c, topic, 1).await;
    wait_for_topic(&cluster, topic, 1).await;
    let tid = "late-producer";
    let ids = init(&mut c, tid, 60_000).await;
    assert_eq!(add_partition(&mut c, tid, ids, topic).await, 0);
    let batch = txn_batch(ids, 0, &[b"on-time"]);
    assert_eq!(produce_txn(&mut c, Some(tid), topic, batch).await, (0, 0));
    assert_eq!(end(&mut c, tid, ids, true).await, 0);
    assert_eq!(fetch_stable(&mut c, topic, 2).await.high_watermark, 2);

    // The late batch: accepted, and it holds the last stable offset.
    let batch = txn_batch(ids, 1, &[b"late"]);
    assert_eq!(produce_txn(&mut c, Some(tid), topic, batch).await, (0, 2));
    let held = fetch(&mut c, topic, 0, true).await;
    assert_eq!((held.high_watermark, held.last_stable_offset), (3, 2));

    // Closed by the sweep with the coordinator's decision.
    let closed = fetch_stable(&mut c, topic, 4).await;
    assert_eq!(closed.high_watermark, 4);
    let (data, markers) = contents(&closed);
    assert_eq!(data, vec![(0, b"on-time".to_vec()), (2, b"late".to_vec())]);
    assert_eq!(markers, vec![1, 3]);

    // A transaction past its timeout is aborted by its coordinator (epoch bumped: its producer
    // is fenced), which releases the last stable offset.
    let quick = "quick-producer";
    let ids = init(&mut c, quick, 1_000).await;
    assert_eq!(add_partition(&mut c, quick, ids, topic).await, 0);
    let batch = txn_batch(ids, 0, &[b"too-slow"]);
    assert_eq!(produce_txn(&mut c, Some(quick), topic, batch).await, (0, 4));
    let aborted = fetch_stable(&mut c, topic, 6).await;
    let named: Vec<(i64, i64)> = aborted
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id, a.first_offset))
        .collect();
    assert_eq!(named, vec![(ids.0, 4)]);
    assert!(
        [
            error_codes::PRODUCER_FENCED,
            error_codes::INVALID_PRODUCER_EPOCH
        ]
        .contains(&end(&mut c, quick, ids, true).await)
    );
    cluster.stop_all().await;
}

/// A topic deleted while no broker held its groups' shard: the next owner drops the groups'
/// offsets for it when it loads the shard (as a deletion seen by the coordinator would), and
/// the removal is written through (a topic of the same name made later does not inherit it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn offsets_of_a_topic_deleted_while_unowned_are_dropped_at_load() {
    let Some(mut cluster) = TestCluster::start("unowned-deletion", 1, false).await else {
        return;
    };
    wait_for_shards(&cluster, 1).await;
    let mut c = cluster.client(1).await;
    create_topic(&mut c, "work", 1).await;
    wait_for_topic(&cluster, "work", 1).await;
    let group = "orphaned-offsets";
    assert_eq!(commit_offset(&mut c, group, "", -1, 7).await, 0);
    assert_eq!(fetch_offset(&mut c, group).await, (0, 7));
    // A clean stop releases every shard; the topic goes while nobody holds them.
    cluster.stop(1).await;
    let db = skiff_cluster::Db::new(&cluster.metadata_url, 1).expect("pool");
    db.client()
        .await
        .expect("connect")
        .execute("DELETE FROM topics WHERE name = 'work'", &[])
        .await
        .expect("delete the topic");
    cluster.add(2).await;
    wait_for_shards(&cluster, 1).await;
    let mut c = cluster.client(2).await;
    assert_eq!(fetch_offset(&mut c, group).await, (0, -1));
    // Written through: a new "work" does not bring the old offset back at the next load.
    create_topic(&mut c, "work", 1).await;
    wait_for_topic(&cluster, "work", 1).await;
    cluster.stop(2).await;
    cluster.add(3).await;
    wait_for_shards(&cluster, 1).await;
    let mut c = cluster.client(3).await;
    assert_eq!(fetch_offset(&mut c, group).await, (0, -1));
    cluster.stop_all().await;
}

/// An end whose prepare its coordinator persisted before dying (no marker written): the
/// successor that loads the shard carries it out, and a retried EndTxn succeeds once it is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_end_prepared_by_a_dead_coordinator_is_finished_by_its_successor() {
    let Some(cluster) = TestCluster::start("interrupted-end", 3, false).await else {
        return;
    };
    wait_for_brokers(&cluster, 1, &[1, 2, 3]).await;
    wait_for_shards(&cluster, 3).await;
    let topic = "interrupted";
    let mut c = cluster.client(1).await;
    create_topic(&mut c, topic, 1).await;
    let leader = wait_for_topic(&cluster, topic, 1).await[0][0];
    let tid = "interrupted-end";
    let coordinator = try_find(&cluster, 1, 1, tid).await.expect("coordinator");
    let mut at_coordinator = cluster.client(coordinator).await;
    let ids = init(&mut at_coordinator, tid, 60_000).await;
    assert_eq!(add_partition(&mut at_coordinator, tid, ids, topic).await, 0);
    let mut at_leader = cluster.client(leader).await;
    let batch = txn_batch(ids, 0, &[b"kept"]);
    assert_eq!(
        produce_txn(&mut at_leader, Some(tid), topic, batch).await,
        (0, 0)
    );
    let running = cluster.node(coordinator).running.as_ref().expect("running");
    assert_eq!(
        running
            .broker
            .prepare_transaction_end(tid, ids.0, ids.1, true),
        Ok(true)
    );
    let (_db, _successor) = lapse_and_take_over(&cluster, coordinator, tid).await;
    commit_through_coordinator(&cluster, tid, ids).await;
    read_committed_through_leader(&cluster, topic, |p| {
        p.last_stable_offset == 2 && contents(p) == (vec![(0, b"kept".to_vec())], vec![1])
    })
    .await;
    cluster.stop_all().await;
}

/// A Skiff share consumer of `group` bootstrapped at broker `via` (implicit acknowledgement).
fn share_consumer(cluster: &TestCluster, via: i32, group: &str) -> skiff_client::ShareConsumer {
    let mut client = skiff_client::ClientConfig::new(&cluster.node(via).addr.to_string());
    client.request_timeout = Duration::from_secs(5);
    client.retry_backoff = Duration::from_millis(20);
    client.reconnect_backoff = Duration::from_millis(20);
    client.reconnect_backoff_max = Duration::from_millis(200);
    let mut config = skiff_client::ShareConsumerConfig::new(group);
    config.fetch_max_wait = Duration::from_millis(100);
    skiff_client::ShareConsumer::new(skiff_client::Client::new(client).expect("client"), config)
        .expect("share consumer")
}

/// Polls both consumers until `want` records arrived between them (bounded), then commits their
/// acknowledgements; returns (partition, offset, delivery count) of each, in arrival order.
async fn share_poll(
    consumers: &[&skiff_client::ShareConsumer],
    want: usize,
) -> Vec<(i32, i64, i16)> {
    let (got, _) = share_poll_held(consumers, want).await;
    for c in consumers {
        c.commit_sync().await.expect("acknowledgements committed");
    }
    got
}

/// [`share_poll`] without the commit: also returns how many records each consumer still holds
/// acquired (its last poll's: a poll acknowledges the one before, implicitly).
async fn share_poll_held(
    consumers: &[&skiff_client::ShareConsumer],
    want: usize,
) -> (Vec<(i32, i64, i16)>, Vec<u64>) {
    let mut held = vec![0u64; consumers.len()];
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while got.len() < want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {want} records arrived: {got:?}",
            got.len()
        );
        for (c, held) in consumers.iter().zip(&mut held) {
            let records = c.poll(Duration::from_millis(100)).await.expect("poll");
            *held = records.len() as u64;
            got.extend(
                records
                    .iter()
                    .map(|r| (r.partition, r.offset, r.delivery_count)),
            );
        }
    }
    (got, held)
}

/// The records each share member of `group` holds acquired, as broker `via`'s admin listener
/// shows them: from `/clients` (every broker's view merged) and from `/groups/{group}` when
/// `via` coordinates the group. By member ID.
async fn viewed_acquired(
    cluster: &TestCluster,
    via: i32,
    group: &str,
) -> (BTreeMap<String, u64>, Option<BTreeMap<String, u64>>) {
    let admin = cluster
        .node(via)
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin listener");
    let (_, body) = common::http_get(admin, "/clients").await;
    let views: serde_json::Value = serde_json::from_str(&body).expect("json");
    let mut clients = BTreeMap::new();
    for view in views.as_array().expect("array") {
        for m in view["memberships"].as_array().cloned().unwrap_or_default() {
            if m["group"] == group && m["protocol"] == "share" {
                let id = m["member_id"].as_str().expect("member").to_string();
                clients.insert(id, m["acquired_records"].as_u64().unwrap_or(0));
            }
        }
    }
    let (status, body) = common::http_get(admin, &format!("/groups/{group}")).await;
    let groups = (status == 200).then(|| {
        let view: serde_json::Value = serde_json::from_str(&body).expect("json");
        view["members"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                (
                    m["member_id"].as_str().expect("member").to_string(),
                    m["acquired_records"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    });
    (clients, groups)
}

/// The owner broker of each share partition of `group` in PostgreSQL, by partition.
async fn share_owners(cluster: &TestCluster, group: &str) -> Vec<(i32, Option<i32>)> {
    let db = skiff_cluster::Db::new(&cluster.metadata_url, 1).expect("pool");
    let client = db.client().await.expect("connection");
    let rows = client
        .query(
            "SELECT partition, owner FROM share_partitions WHERE group_id = $1 ORDER BY partition",
            &[&group],
        )
        .await
        .expect("share partitions");
    rows.iter()
        .map(|r| (r.get::<_, i32>(0), r.get::<_, Option<i32>>(1)))
        .collect()
}

/// KIP-932 in cluster mode: each partition's leader is its share partitions' leader and keeps
/// their state in PostgreSQL; two share consumers bootstrapped at different brokers get every
/// record once between them; when a broker leaves, its partitions' new leader takes the state
/// over, so nothing acknowledged is delivered again and new records flow; deleting the group
/// deletes the states.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn share_groups_span_brokers_and_move_with_their_partitions() {
    let Some(mut cluster) = TestCluster::start_with("share", 2, false, |config| {
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await
    else {
        return;
    };
    wait_for_brokers(&cluster, 1, &[1, 2]).await;
    wait_for_shards(&cluster, 2).await;
    let mut admin = cluster.client(1).await;
    // Leaders are hashed from the (random) topic ID: a topic led by both brokers is wanted.
    let mut spread = None;
    for attempt in 0..10 {
        let name = format!("jobs-{attempt}");
        create_topic(&mut admin, &name, 4).await;
        let views = wait_for_topic(&cluster, &name, 4).await;
        let leaders: Vec<i32> = views.last().cloned().expect("leaders");
        if leaders.contains(&1) && leaders.contains(&2) {
            spread = Some((name, leaders));
            break;
        }
    }
    let (topic, leaders) = spread.expect("a topic led by both brokers");
    let topic = topic.as_str();
    for (p, leader) in leaders.iter().enumerate() {
        let mut c = cluster.client(*leader).await;
        for i in 0..5 {
            let value = format!("job-{p}-{i}");
            let (code, _) = produce(&mut c, topic, p as i32, batch(&[value.as_bytes()])).await;
            assert_eq!(code, 0);
        }
    }
    assert_eq!(
        alter_configs(
            &mut admin,
            32,
            "crew",
            &[("share.auto.offset.reset", "earliest")]
        )
        .await,
        0
    );
    // Every broker has heard of the group config before the group's coordinator starts it.
    for node in [1, 2] {
        let mut c = cluster.client(node).await;
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        while described_config(&mut c, 32, "crew", "share.auto.offset.reset")
            .await
            .as_deref()
            != Some("earliest")
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "config not mirrored"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let c1 = share_consumer(&cluster, 1, "crew");
    let c2 = share_consumer(&cluster, 2, "crew");
    c1.subscribe(&[topic]).expect("subscribe");
    c2.subscribe(&[topic]).expect("subscribe");
    let (first, held) = share_poll_held(&[&c1, &c2], 20).await;
    // The records each member holds now, whichever broker leads them, in the client-instance
    // view of either broker and in the coordinator's `/groups/crew` (summaries are published
    // every second: looked at until they agree, bounded).
    let want: BTreeMap<String, u64> = [(c1.member_id(), held[0]), (c2.member_id(), held[1])]
        .into_iter()
        .collect();
    let coordinator = find_coordinator(&cluster, 1, "crew").await;
    for via in [1, 2] {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let (clients, groups) = viewed_acquired(&cluster, via, "crew").await;
            let groups_agree = if via == coordinator {
                groups.as_ref() == Some(&want)
            } else {
                groups.is_none()
            };
            if clients == want && groups_agree {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "broker {via} shows {clients:?} / {groups:?}, held {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for c in [&c1, &c2] {
        c.commit_sync().await.expect("acknowledgements committed");
    }
    let mut seen: Vec<(i32, i64)> = first.iter().map(|(p, o, _)| (*p, *o)).collect();
    seen.sort();
    let expected: Vec<(i32, i64)> = (0..4).flat_map(|p| (0..5).map(move |o| (p, o))).collect();
    assert_eq!(seen, expected, "every record once: {first:?}");
    // Each share partition's state is owned by its partition's leader.
    let owners = share_owners(&cluster, "crew").await;
    let want: Vec<(i32, Option<i32>)> = leaders
        .iter()
        .enumerate()
        .map(|(p, l)| (p as i32, Some(*l)))
        .collect();
    assert_eq!(owners, want);

    // Broker 2 leaves: broker 1 leads everything and takes the states over.
    c2.close().await.expect("close");
    cluster.stop(2).await;
    wait_for_brokers(&cluster, 1, &[1]).await;
    let mut c = cluster.client(1).await;
    for p in 0..4 {
        let (code, base) = produce(&mut c, topic, p, batch(&[b"late"])).await;
        assert_eq!((code, base), (0, 5));
    }
    let second = share_poll(&[&c1], 4).await;
    let mut late: Vec<(i32, i64)> = second.iter().map(|(p, o, _)| (*p, *o)).collect();
    late.sort();
    assert_eq!(
        late,
        (0..4).map(|p| (p, 5)).collect::<Vec<_>>(),
        "only the new records, nothing acknowledged again: {second:?}"
    );
    let owners = share_owners(&cluster, "crew").await;
    assert!(owners.iter().all(|(_, o)| *o == Some(1)), "{owners:?}");
    c1.close().await.expect("close");

    // The share group offset APIs read and write the leaders' states in PostgreSQL.
    wait_for_shards(&cluster, 1).await;
    let admin = skiff_client::Admin::new(share_consumer(&cluster, 1, "admin").client().clone());
    let described = admin
        .describe_share_group_offsets("crew", None)
        .await
        .expect("describe");
    let starts: Vec<(i32, Option<i64>, Option<i64>)> = described
        .iter()
        .map(|o| (o.partition.partition, o.start_offset, o.lag))
        .collect();
    assert_eq!(
        starts,
        (0..4).map(|p| (p, Some(6), Some(0))).collect::<Vec<_>>(),
        "everything acknowledged: {described:?}"
    );
    let back: Vec<(skiff_client::TopicPartition, i64)> = (0..4)
        .map(|p| (skiff_client::TopicPartition::new(topic, p), 0))
        .collect();
    admin
        .alter_share_group_offsets("crew", &back)
        .await
        .expect("alter");
    let c3 = share_consumer(&cluster, 1, "crew");
    c3.subscribe(&[topic]).expect("subscribe");
    let again = share_poll(&[&c3], 24).await;
    let mut again_offsets: Vec<(i32, i64)> = again.iter().map(|(p, o, _)| (*p, *o)).collect();
    again_offsets.sort();
    assert_eq!(
        again_offsets,
        (0..4)
            .flat_map(|p| (0..6).map(move |o| (p, o)))
            .collect::<Vec<_>>(),
        "from the altered start: {again:?}"
    );
    assert!(again.iter().all(|(_, _, count)| *count == 1), "{again:?}");
    c3.close().await.expect("close");
    admin
        .delete_share_group_offsets("crew", &[topic])
        .await
        .expect("delete");
    assert!(share_owners(&cluster, "crew").await.is_empty());
    let described = admin
        .describe_share_group_offsets("crew", None)
        .await
        .expect("describe");
    assert!(described.is_empty(), "{described:?}");
    admin.client().close().await;
    cluster.stop_all().await;
}

/// Client quotas are a document of the cluster: set through one broker, every broker has them
/// (DescribeClientQuotas), and they survive the broker that set them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_quotas_are_shared_by_every_broker() {
    use skiff_protocol::generated::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use skiff_protocol::generated::{AlterClientQuotasRequest, DescribeClientQuotasRequest};
    let Some(mut cluster) = TestCluster::start("quotas", 2, false).await else {
        return;
    };
    wait_for_brokers(&cluster, 1, &[1, 2]).await;
    let mut c1 = cluster.client(1).await;
    let request = AlterClientQuotasRequest {
        entries: vec![EntryData {
            entity: vec![EntityData {
                entity_type: "client-id".into(),
                entity_name: Some("app".into()),
                ..Default::default()
            }],
            ops: vec![OpData {
                key: "producer_byte_rate".into(),
                value: 4096.0,
                remove: false,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c1.call(request, 1).await {
        Response::AlterClientQuotas(r) => assert_eq!(r.entries[0].error_code, 0, "{r:?}"),
        other => panic!("unexpected {other:?}"),
    }
    let mut c2 = cluster.client(2).await;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let shared = match c2.call(DescribeClientQuotasRequest::default(), 1).await {
            Response::DescribeClientQuotas(r) => r.entries.as_ref().is_some_and(|e| {
                e.len() == 1 && e[0].values.first().is_some_and(|v| v.value == 4096.0)
            }),
            other => panic!("unexpected {other:?}"),
        };
        if shared {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "broker 2 never had the quota"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.stop(1).await;
    match c2.call(DescribeClientQuotasRequest::default(), 1).await {
        Response::DescribeClientQuotas(r) => {
            assert_eq!(r.entries.map(|e| e.len()), Some(1))
        }
        other => panic!("unexpected {other:?}"),
    }
    cluster.stop_all().await;
}
