//! skiff-cluster against a real PostgreSQL (started by skiff-testkit): migrations under
//! concurrency, membership and fencing, commits and lookups, concurrent commits from several
//! brokers, the log start, object release, transactions and transactional offsets.

use std::collections::BTreeMap;

use skiff_cluster::commit::{Append, BatchInfo, PartitionKey, TxnKind, Verdict};
use skiff_cluster::membership::{self, Registration};
use skiff_cluster::{Db, DbError, log, schema, topics};
use skiff_testkit::postgres::Postgres;
use uuid::Uuid;

const LEASE_MS: i64 = 10_000;

/// A fresh database on a fresh server, migrated; `None` when PostgreSQL is not installed
/// (skipped, outside CI).
async fn setup(name: &str) -> Option<(Postgres, Db)> {
    let pg = Postgres::start().expect("start PostgreSQL")?;
    let url = pg.database(name).await.expect("create database");
    let db = Db::new(&url, 8).expect("pool");
    schema::migrate(&db).await.expect("migrate");
    Some((pg, db))
}

fn endpoints(host: &str, port: i32) -> membership::Endpoints {
    let mut listeners = BTreeMap::new();
    listeners.insert("PLAINTEXT".to_string(), (host.to_string(), port));
    listeners.insert("SASL_SSL".to_string(), (host.to_string(), port + 1));
    membership::Endpoints {
        host: host.into(),
        port,
        listeners,
    }
}

async fn register(db: &Db, node: i32) -> Registration {
    membership::register(
        db,
        node,
        &endpoints("127.0.0.1", 9000 + node * 10),
        None,
        LEASE_MS,
    )
    .await
    .expect("register")
}

fn batch(count: i32, pid: i64, seq: i32, at: u64) -> BatchInfo {
    BatchInfo {
        byte_offset: at,
        byte_size: 100,
        record_count: count,
        producer_id: pid,
        producer_epoch: if pid >= 0 { 0 } else { -1 },
        base_sequence: seq,
        last_sequence: if seq >= 0 { seq + count - 1 } else { -1 },
        max_timestamp: 1_000 + at as i64,
        log_append_time: false,
        txn: TxnKind::None,
    }
}

async fn topic(db: &Db, reg: Registration, name: &str, partitions: i32) -> Uuid {
    topics::create(db, reg, name, Uuid::new_v4(), partitions, &BTreeMap::new())
        .await
        .expect("create topic")
        .expect("new topic")
        .topic_id
}

#[tokio::test]
async fn migrations_run_once_when_brokers_start_together() {
    let Some((pg, _db)) = setup("migrations").await else {
        return;
    };
    let url = pg.database("together").await.unwrap();
    let dbs: Vec<Db> = (0..4).map(|_| Db::new(&url, 2).unwrap()).collect();
    let results = futures::future::join_all(dbs.iter().map(schema::migrate)).await;
    let mut fresh = 0;
    for r in results {
        let (before, after) = r.expect("migrate");
        assert_eq!(after, schema::current_version());
        if before == 0 {
            fresh += 1;
        }
    }
    assert_eq!(fresh, 1, "exactly one broker applied the schema");
    assert_eq!(
        schema::version(&dbs[0]).await.unwrap(),
        schema::current_version()
    );
}

#[tokio::test]
async fn leases_epochs_and_fencing() {
    let Some((_pg, db)) = setup("membership").await else {
        return;
    };
    let a = register(&db, 1).await;
    let b = register(&db, 2).await;
    assert!(b.epoch > a.epoch, "epochs only grow");
    let live = membership::live_brokers(&db).await.unwrap();
    assert_eq!(
        live.iter().map(|b| b.node_id).collect::<Vec<_>>(),
        vec![1, 2]
    );
    membership::renew(&db, a, LEASE_MS).await.expect("renew");

    // Another address cannot take a live node ID.
    assert_eq!(live[0].address("SASL_SSL"), ("127.0.0.1", 9011));
    assert_eq!(live[0].address("OTHER"), ("127.0.0.1", 9010));
    let clash = membership::register(&db, 1, &endpoints("127.0.0.9", 1), None, LEASE_MS).await;
    assert!(matches!(clash, Err(DbError::Config(_))), "{clash:?}");

    // Broker 1's lease lapses (as if it was paused): it leaves the live set, its renewal and
    // its writes are refused until it registers again.
    let client = db.client().await.unwrap();
    client
        .execute(
            "UPDATE brokers SET lease_until = now() - interval '1 second' WHERE node_id = 1",
            &[],
        )
        .await
        .unwrap();
    let live = membership::live_brokers(&db).await.unwrap();
    assert_eq!(live.iter().map(|b| b.node_id).collect::<Vec<_>>(), vec![2]);
    assert!(matches!(
        membership::renew(&db, a, LEASE_MS).await,
        Err(DbError::Fenced { node_id: 1, .. })
    ));
    let t = topic(&db, b, "fenced", 1).await;
    let appends = [Append {
        key: PartitionKey {
            topic_id: t,
            partition: 0,
        },
        batches: vec![batch(1, -1, -1, 0)],
    }];
    let refused = log::commit(&db, a, "k-stale", 100, &appends, 0).await;
    assert!(
        matches!(refused, Err(DbError::Fenced { .. })),
        "{refused:?}"
    );
    let again = register(&db, 1).await;
    assert!(again.epoch > b.epoch);
    // The old epoch stays fenced after the new registration.
    assert!(matches!(
        log::commit(&db, a, "k-stale2", 100, &appends, 0).await,
        Err(DbError::Fenced { .. })
    ));
    let ok = log::commit(&db, again, "k-fresh", 100, &appends, 0)
        .await
        .unwrap();
    assert_eq!(
        ok.verdicts,
        vec![Verdict::Appended {
            base_offset: 0,
            last_offset: 0
        }]
    );
    membership::deregister(&db, again).await.unwrap();
    let live = membership::live_brokers(&db).await.unwrap();
    assert_eq!(live.iter().map(|b| b.node_id).collect::<Vec<_>>(), vec![2]);
}

#[tokio::test]
async fn commits_find_batches_and_answer_retries() {
    let Some((_pg, db)) = setup("commits").await else {
        return;
    };
    let reg = register(&db, 1).await;
    let t = topic(&db, reg, "orders", 2).await;
    let p0 = PartitionKey {
        topic_id: t,
        partition: 0,
    };
    let p1 = PartitionKey {
        topic_id: t,
        partition: 1,
    };
    let unknown = PartitionKey {
        topic_id: Uuid::new_v4(),
        partition: 0,
    };
    let appends = vec![
        Append {
            key: p0,
            batches: vec![batch(3, 7, 0, 0)],
        },
        Append {
            key: p1,
            batches: vec![batch(2, -1, -1, 100)],
        },
        Append {
            key: p0,
            batches: vec![batch(1, 7, 3, 200)],
        },
        Append {
            key: unknown,
            batches: vec![batch(1, -1, -1, 300)],
        },
    ];
    let done = log::commit(&db, reg, "obj-1", 400, &appends, 5)
        .await
        .unwrap();
    assert_eq!(
        done.verdicts,
        vec![
            Verdict::Appended {
                base_offset: 0,
                last_offset: 2
            },
            Verdict::Appended {
                base_offset: 0,
                last_offset: 1
            },
            Verdict::Appended {
                base_offset: 3,
                last_offset: 3
            },
            Verdict::UnknownPartition,
        ]
    );
    assert!(done.object_id.is_some());

    let (offsets, found) = log::find_batches(&db, p0, 0, 1 << 20, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((offsets.log_start, offsets.high_watermark), (0, 4));
    assert_eq!(offsets.size_bytes, 200);
    assert_eq!(
        found
            .iter()
            .map(|b| (b.base_offset, b.last_offset, b.byte_offset))
            .collect::<Vec<_>>(),
        vec![(0, 2, 0), (3, 3, 200)]
    );
    assert!(found.iter().all(|b| b.object_key == "obj-1"));
    // From inside the first batch: still the whole batch; max_bytes keeps the first whole.
    let (_, from_two) = log::find_batches(&db, p0, 2, 1, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(from_two.len(), 1);
    assert_eq!(from_two[0].base_offset, 0);
    let (_, at_end) = log::find_batches(&db, p0, 4, 1 << 20, 100)
        .await
        .unwrap()
        .unwrap();
    assert!(at_end.is_empty());
    assert!(
        log::find_batches(&db, unknown, 0, 1, 1)
            .await
            .unwrap()
            .is_none()
    );

    // A retry through another broker: answered with the first offsets, nothing stored.
    let other = register(&db, 2).await;
    let retry = log::commit(
        &db,
        other,
        "obj-2",
        100,
        &[Append {
            key: p0,
            batches: vec![batch(1, 7, 3, 0)],
        }],
        6,
    )
    .await
    .unwrap();
    assert_eq!(
        retry.verdicts,
        vec![Verdict::Duplicate {
            base_offset: 3,
            last_offset: 3
        }]
    );
    assert_eq!(
        retry.object_id, None,
        "nothing refers to the retry's object"
    );
    // A gap in the sequence is refused.
    let gap = log::commit(
        &db,
        other,
        "obj-3",
        100,
        &[Append {
            key: p0,
            batches: vec![batch(1, 7, 9, 0)],
        }],
        6,
    )
    .await
    .unwrap();
    assert_eq!(gap.verdicts, vec![Verdict::OutOfOrderSequence]);

    // ListOffsets by time.
    let at = log::batch_at_time(&db, p0, 1_100).await.unwrap().unwrap();
    assert_eq!(at.base_offset, 3);
    let newest = log::batch_with_max_time(&db, p0).await.unwrap().unwrap();
    assert_eq!(newest.base_offset, 3);
    assert!(log::batch_at_time(&db, p0, 99_999).await.unwrap().is_none());
}

#[tokio::test]
async fn concurrent_commits_from_three_brokers_keep_offsets_contiguous() {
    let Some((_pg, db)) = setup("concurrent").await else {
        return;
    };
    let regs = [
        register(&db, 1).await,
        register(&db, 2).await,
        register(&db, 3).await,
    ];
    let t = topic(&db, regs[0], "busy", 4).await;
    let mut tasks = Vec::new();
    for (i, reg) in regs.into_iter().enumerate() {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for round in 0..20i32 {
                // Each broker's producer writes to every partition, in a different order per
                // broker, so the commits contend for the same rows.
                let appends: Vec<Append> = (0..4)
                    .map(|j| {
                        let partition = (j + i as i32 + round) % 4;
                        Append {
                            key: PartitionKey {
                                topic_id: t,
                                partition,
                            },
                            batches: vec![batch(2, 100 + i as i64, round * 2, 0)],
                        }
                    })
                    .collect();
                let done = log::commit(&db, reg, &format!("o-{i}-{round}"), 400, &appends, 0)
                    .await
                    .expect("commit");
                for (a, v) in appends.iter().zip(done.verdicts) {
                    match v {
                        Verdict::Appended {
                            base_offset,
                            last_offset,
                        } => acked.push((a.key.partition, base_offset, last_offset)),
                        other => panic!("unexpected {other:?}"),
                    }
                }
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for task in tasks {
        acked.extend(task.await.unwrap());
    }
    assert_eq!(acked.len(), 3 * 20 * 4);
    for p in 0..4 {
        let key = PartitionKey {
            topic_id: t,
            partition: p,
        };
        let (offsets, found) = log::find_batches(&db, key, 0, u64::MAX, 10_000)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(offsets.high_watermark, 3 * 20 * 2);
        let mut next = 0;
        for b in &found {
            assert_eq!(b.base_offset, next, "offsets contiguous in partition {p}");
            next = b.last_offset + 1;
        }
        assert_eq!(next, offsets.high_watermark);
        let mut mine: Vec<_> = acked.iter().filter(|a| a.0 == p).map(|a| a.1).collect();
        mine.sort();
        assert_eq!(
            mine,
            found.iter().map(|b| b.base_offset).collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn log_start_retention_and_released_objects() {
    let Some((_pg, db)) = setup("retention").await else {
        return;
    };
    let reg = register(&db, 1).await;
    let t = topic(&db, reg, "old", 1).await;
    let key = PartitionKey {
        topic_id: t,
        partition: 0,
    };
    for i in 0..5u64 {
        let mut b = batch(10, -1, -1, 0);
        b.max_timestamp = 1_000 * i as i64;
        log::commit(
            &db,
            reg,
            &format!("obj-{i}"),
            100,
            &[Append {
                key,
                batches: vec![b],
            }],
            0,
        )
        .await
        .unwrap();
    }
    // DeleteRecords inside a batch: the log start moves, the batch stays.
    assert_eq!(log::delete_before(&db, reg, key, 5).await.unwrap(), Some(5));
    let o = log::offsets(&db, key).await.unwrap().unwrap();
    assert_eq!((o.log_start, o.high_watermark, o.size_bytes), (5, 50, 500));
    // Never down, never past the high watermark.
    assert_eq!(log::delete_before(&db, reg, key, 2).await.unwrap(), Some(5));
    // Past the first batch: it is dropped and its object released.
    assert_eq!(
        log::delete_before(&db, reg, key, 12).await.unwrap(),
        Some(12)
    );
    let o = log::offsets(&db, key).await.unwrap().unwrap();
    assert_eq!(o.size_bytes, 400);
    let unused = log::unused_objects(&db, 0, 10).await.unwrap();
    assert_eq!(
        unused.iter().map(|(_, k)| k.as_str()).collect::<Vec<_>>(),
        vec!["obj-0"]
    );
    // The grace period keeps it from readers in flight.
    assert!(
        log::unused_objects(&db, 60_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let ids: Vec<i64> = unused.iter().map(|(id, _)| *id).collect();
    assert_eq!(log::forget_objects(&db, &ids).await.unwrap(), 1);

    // Time retention: batches whose newest record is older than now - retention go.
    let start = log::apply_retention(&db, reg, key, 3_500, Some(1_000), None)
        .await
        .unwrap();
    assert_eq!(
        start,
        Some(30),
        "batches with max timestamps 1000 and 2000 went"
    );
    // Size retention: keep at most 150 bytes = the newest batch.
    let start = log::apply_retention(&db, reg, key, 3_500, None, Some(150))
        .await
        .unwrap();
    assert_eq!(start, Some(40));
    let o = log::offsets(&db, key).await.unwrap().unwrap();
    assert_eq!((o.log_start, o.size_bytes), (40, 100));

    // Deleting the topic releases the rest.
    topics::delete(&db, reg, "old").await.unwrap().unwrap();
    assert!(log::offsets(&db, key).await.unwrap().is_none());
    let unused = log::unused_objects(&db, 0, 10).await.unwrap();
    assert_eq!(unused.len(), 4, "{unused:?}");
}

#[tokio::test]
async fn topics_and_producer_id_blocks() {
    let Some((_pg, db)) = setup("topics").await else {
        return;
    };
    let reg = register(&db, 1).await;
    let mut configs = BTreeMap::new();
    configs.insert("retention.ms".to_string(), "1000".to_string());
    let id = Uuid::new_v4();
    let row = topics::create(&db, reg, "t", id, 2, &configs)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.topic_id, id);
    assert_eq!(
        topics::create(&db, reg, "t", Uuid::new_v4(), 1, &configs)
            .await
            .unwrap(),
        Err(topics::TopicRefusal::Exists)
    );
    assert_eq!(
        topics::add_partitions(&db, reg, "t", 2).await.unwrap(),
        Err(topics::TopicRefusal::NotMore { current: 2 })
    );
    topics::add_partitions(&db, reg, "t", 3)
        .await
        .unwrap()
        .unwrap();
    assert!(
        log::offsets(&db, topics::key(id, 2))
            .await
            .unwrap()
            .is_some()
    );
    configs.insert("cleanup.policy".into(), "delete".into());
    topics::set_configs(&db, reg, "t", &configs)
        .await
        .unwrap()
        .unwrap();
    let listed = topics::list(&db).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].partitions, 3);
    assert_eq!(listed[0].configs, configs);

    let a = topics::allocate_producer_ids(&db, reg, 1000).await.unwrap();
    let b = topics::allocate_producer_ids(&db, reg, 1000).await.unwrap();
    assert_eq!(b, a + 1000, "blocks do not overlap");
}

#[tokio::test]
async fn unused_and_uncommitted_objects_are_collected() {
    let Some((_pg, db)) = setup("gc").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let objects = skiff_cluster::objects::Objects::open(
        &format!("file://{}", dir.path().display()),
        &Default::default(),
    )
    .unwrap();
    let reg = register(&db, 1).await;
    let t = topic(&db, reg, "gc", 1).await;
    let key = PartitionKey {
        topic_id: t,
        partition: 0,
    };
    // A committed object, and one uploaded but never committed (its broker died).
    let committed = objects.new_key(1, reg.epoch);
    objects
        .put(&committed, bytes::Bytes::from(vec![0u8; 100]))
        .await
        .unwrap();
    log::commit(
        &db,
        reg,
        &committed,
        100,
        &[Append {
            key,
            batches: vec![batch(1, -1, -1, 0)],
        }],
        0,
    )
    .await
    .unwrap();
    let orphan = objects.new_key(1, reg.epoch);
    objects
        .put(&orphan, bytes::Bytes::from_static(b"lost"))
        .await
        .unwrap();
    let future = skiff_cluster::gc::sweep_uncommitted(&db, &objects, 0)
        .await
        .unwrap();
    assert_eq!(future, 0, "objects younger than the cutoff stay");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + 60_000;
    assert_eq!(
        skiff_cluster::gc::sweep_uncommitted(&db, &objects, now_ms)
            .await
            .unwrap(),
        1
    );
    let left: Vec<String> = objects
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(left, vec![committed.clone()], "the committed object stays");
    // Still referred to: not collected.
    assert_eq!(
        skiff_cluster::gc::delete_unused(&db, &objects, 0)
            .await
            .unwrap(),
        0
    );
    // Once its batch is gone, it is (after the grace period).
    topics::delete(&db, reg, "gc").await.unwrap().unwrap();
    assert_eq!(
        skiff_cluster::gc::delete_unused(&db, &objects, 60_000)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        skiff_cluster::gc::delete_unused(&db, &objects, 0)
            .await
            .unwrap(),
        1
    );
    assert!(objects.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn tls_to_postgresql_follows_sslmode() {
    let ca = skiff_testkit::certs::TestCa::new("pg-ca");
    let Some(pg) = Postgres::start_tls(&ca.server()).expect("start PostgreSQL with TLS") else {
        return;
    };
    let url = pg.database("tls").await.expect("database");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    ca.write(&ca_file);
    // Verified against the given root: works, and migrates.
    let db = Db::new(
        &format!("{url}?sslmode=require&sslrootcert={}", ca_file.display()),
        2,
    )
    .unwrap();
    schema::migrate(&db).await.expect("migrate over TLS");
    let client = db.client().await.unwrap();
    let ssl: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl, "the connection is encrypted");
    // A server certificate no trusted root signed is refused.
    let untrusted = Db::new(&format!("{url}?sslmode=require"), 2).unwrap();
    assert!(schema::version(&untrusted).await.is_err());
    // sslmode=disable talks in plain text (the server allows both).
    let plain = Db::new(&format!("{url}?sslmode=disable"), 2).unwrap();
    assert_eq!(
        schema::version(&plain).await.unwrap(),
        schema::current_version()
    );
}

#[tokio::test]
async fn a_paused_commit_does_not_hold_its_locks() {
    let Some((pg, db)) = setup("paused").await else {
        return;
    };
    let url = pg.url("paused");
    let reg = register(&db, 1).await;
    let t = topic(&db, reg, "held", 1).await;
    let key = PartitionKey {
        topic_id: t,
        partition: 0,
    };
    // Broker A locks the partition's row inside a commit and then stops sending anything (as a
    // SIGSTOPped broker does), its transaction left open.
    let a = Db::with_limits(&url, 1, Some(400)).unwrap();
    let mut a_client = a.client().await.unwrap();
    let a_tx = a_client.transaction().await.unwrap();
    a_tx.query(
        "SELECT 1 FROM logs WHERE topic_id = $1 AND partition = $2 FOR UPDATE",
        &[&t, &0i32],
    )
    .await
    .unwrap();
    // Broker B's commits to that partition get through once PostgreSQL ended A's idle
    // transaction (a commit that waited too long gives up and is retried, as a producer would).
    let b = Db::with_limits(&url, 2, Some(400)).unwrap();
    let started = std::time::Instant::now();
    let committed = loop {
        let attempt = log::commit(
            &b,
            reg,
            "obj-b",
            100,
            &[Append {
                key,
                batches: vec![batch(1, -1, -1, 0)],
            }],
            0,
        )
        .await;
        match attempt {
            Ok(done) => break done,
            Err(e) => {
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(10),
                    "{e}"
                );
            }
        }
    };
    assert_eq!(
        committed.verdicts,
        vec![Verdict::Appended {
            base_offset: 0,
            last_offset: 0
        }]
    );
    // A's transaction is gone: it can commit nothing when it wakes.
    assert!(a_tx.commit().await.is_err());
}

/// Coordinator shards: a claim bumps the epoch and reads the records; a live owner keeps its
/// shard; writes are fenced by the shard epoch and the owner's lease; a lapsed owner's shard is
/// taken over with everything it wrote, and its later writes are refused; a write in flight
/// holds a claim back until it has committed.
#[tokio::test]
async fn coordinator_shards_are_owned_once_and_fenced_by_epoch() {
    use skiff_cluster::coordinators::{self, SHARDS};
    let Some((_pg, db)) = setup("shards").await else {
        return;
    };
    let rows = coordinators::shards(&db).await.unwrap();
    assert_eq!(
        rows.len(),
        SHARDS as usize,
        "the schema creates every shard"
    );
    assert!(rows.iter().all(|r| r.owner.is_none() && r.epoch == 0));

    let a = register(&db, 1).await;
    let b = register(&db, 2).await;
    let claimed = coordinators::claim(&db, 7, a).await.unwrap().expect("free");
    assert_eq!(claimed.epoch, 1);
    assert!(claimed.records.is_empty());
    assert!(
        coordinators::claim(&db, 7, b).await.unwrap().is_none(),
        "a live owner keeps its shard"
    );
    let put = |k: &str, v: &str| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec()));
    coordinators::write(
        &db,
        7,
        1,
        a,
        &[put("g\0one", "1"), put("g\0two", "2"), put("g\0one", "1b")],
    )
    .await
    .unwrap();
    coordinators::write(&db, 7, 1, a, &[(b"g\0two".to_vec(), None)])
        .await
        .unwrap();
    // Only the owner at the current epoch writes.
    assert!(matches!(
        coordinators::write(&db, 7, 1, b, &[put("x", "y")]).await,
        Err(DbError::Fenced { .. })
    ));
    assert!(matches!(
        coordinators::write(&db, 7, 0, a, &[put("x", "y")]).await,
        Err(DbError::Fenced { .. })
    ));

    // A reload by the same registration bumps the epoch: the old epoch's writes are refused.
    let reloaded = coordinators::claim(&db, 7, a).await.unwrap().expect("own");
    assert_eq!(reloaded.epoch, 2);
    assert_eq!(reloaded.records, vec![(b"g\0one".to_vec(), b"1b".to_vec())]);
    assert!(matches!(
        coordinators::write(&db, 7, 1, a, &[put("x", "y")]).await,
        Err(DbError::Fenced { .. })
    ));

    // A write in flight holds a takeover back; the takeover then reads what it wrote.
    let mut holder = db.client().await.unwrap();
    let tx = holder.transaction().await.unwrap();
    tx.query_one(
        "SELECT 1 FROM coordinator_shards WHERE shard = 7 FOR SHARE",
        &[],
    )
    .await
    .unwrap();
    tx.execute(
        "INSERT INTO coordinator_records (shard, key, value) VALUES (7, 'g\\000late', 'late')",
        &[],
    )
    .await
    .unwrap();
    db.client()
        .await
        .unwrap()
        .execute(
            "UPDATE brokers SET lease_until = now() - interval '1 second' WHERE node_id = 1",
            &[],
        )
        .await
        .unwrap();
    let db2 = db.clone();
    let takeover = tokio::spawn(async move { coordinators::claim(&db2, 7, b).await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !takeover.is_finished(),
        "the claim waits for the write in flight"
    );
    tx.commit().await.unwrap();
    let taken = takeover
        .await
        .unwrap()
        .unwrap()
        .expect("a lapsed owner's shard");
    assert_eq!(taken.epoch, 3);
    assert_eq!(taken.records.len(), 2, "{:?}", taken.records);
    // The stale owner can write nothing more, at any epoch.
    for epoch in [2, 3] {
        assert!(matches!(
            coordinators::write(&db, 7, epoch, a, &[put("g\0one", "stale")]).await,
            Err(DbError::Fenced { .. })
        ));
    }
    coordinators::write(&db, 7, 3, b, &[put("g\0one", "new")])
        .await
        .unwrap();

    // Released shards are free to claim; a release with an old epoch changes nothing.
    coordinators::release(&db, 7, 2, b).await.unwrap();
    let rows = coordinators::shards(&db).await.unwrap();
    assert_eq!(rows[7].owner, Some(2));
    coordinators::release(&db, 7, 3, b).await.unwrap();
    let rows = coordinators::shards(&db).await.unwrap();
    assert_eq!((rows[7].owner, rows[7].records), (None, 2));
    let again = register(&db, 1).await;
    let back = coordinators::claim(&db, 7, again)
        .await
        .unwrap()
        .expect("released");
    assert_eq!(back.epoch, 4);

    // Group configs: any broker writes them; empty removes.
    let mut configs = BTreeMap::new();
    configs.insert(
        "consumer.session.timeout.ms".to_string(),
        "50000".to_string(),
    );
    coordinators::set_group_configs(&db, b, "g1", &configs)
        .await
        .unwrap();
    let all = coordinators::group_configs(&db).await.unwrap();
    assert_eq!(all.get("g1"), Some(&configs));
    coordinators::set_group_configs(&db, b, "g1", &BTreeMap::new())
        .await
        .unwrap();
    assert!(coordinators::group_configs(&db).await.unwrap().is_empty());
}

/// A connection of its own LISTENing on `channels`: what it hears, as (channel, payload).
async fn listen(
    db: &Db,
    channels: &[&str],
) -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
) {
    use futures::StreamExt;
    let (client, mut stream) = db.dedicated().await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = tx.send((n.channel().to_string(), n.payload().to_string()));
            }
        }
    });
    for channel in channels {
        client
            .batch_execute(&format!("LISTEN {channel}"))
            .await
            .unwrap();
    }
    (client, rx)
}

/// The next notification, within 10 seconds.
async fn heard(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
) -> (String, String) {
    tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
        .await
        .expect("a notification")
        .expect("the listener runs")
}

fn txn_batch(count: i32, pid: i64, seq: i32, at: u64) -> BatchInfo {
    BatchInfo {
        txn: TxnKind::Data,
        ..batch(count, pid, seq, at)
    }
}

fn txn_marker(pid: i64, epoch: i16, commit: bool) -> BatchInfo {
    BatchInfo {
        txn: TxnKind::Marker { commit },
        producer_epoch: epoch,
        ..batch(1, pid, -1, 0)
    }
}

/// Transactions through `log::commit`: the last stable offset is held at the first offset of
/// the earliest open transaction and released by its marker, aborts are recorded for
/// consumers reading committed, the announcements carry the last stable offset, a marker with
/// nothing open writes nothing, and DeleteRecords and topic deletion keep it all consistent.
#[tokio::test]
async fn transactions_hold_the_stable_offset_and_record_aborts() {
    let Some((_pg, db)) = setup("transactions").await else {
        return;
    };
    let reg = register(&db, 1).await;
    let t = topic(&db, reg, "payments", 1).await;
    let key = PartitionKey {
        topic_id: t,
        partition: 0,
    };
    let (_listener, mut rx) = listen(&db, &[log::COMMITS_CHANNEL]).await;
    let one = |b: BatchInfo| Append {
        key,
        batches: vec![b],
    };
    let mut objects = 0;
    let mut commit = |appends: Vec<Append>, now_ms: i64| {
        objects += 1;
        let db = db.clone();
        let name = format!("txn-{objects}");
        async move {
            log::commit(&db, reg, &name, 1_000, &appends, now_ms)
                .await
                .unwrap()
        }
    };
    let stable = |db: Db| async move {
        let o = log::offsets(&db, key).await.unwrap().unwrap();
        (o.last_stable, o.high_watermark)
    };

    // A plain batch, then producer 7's transaction opens at offset 2.
    let done = commit(
        vec![one(batch(2, -1, -1, 0)), one(txn_batch(3, 7, 0, 100))],
        1_000,
    )
    .await;
    assert_eq!(
        done.verdicts,
        vec![
            Verdict::Appended {
                base_offset: 0,
                last_offset: 1
            },
            Verdict::Appended {
                base_offset: 2,
                last_offset: 4
            }
        ]
    );
    assert_eq!(done.changes.len(), 1);
    assert_eq!(
        (done.changes[0].last_stable, done.changes[0].high_watermark),
        (2, 5)
    );
    assert_eq!(stable(db.clone()).await, (2, 5));
    let (offsets, found) = log::find_batches(&db, key, 0, 1 << 20, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((offsets.last_stable, offsets.high_watermark), (2, 5));
    assert_eq!(found.len(), 2);
    let (channel, payload) = heard(&mut rx).await;
    assert_eq!(channel, log::COMMITS_CHANNEL);
    assert_eq!(payload, format!("{t}:0:0:5:2"));
    assert_eq!(log::parse_changes(&payload), done.changes);

    // The sweep of hanging transactions sees it once it is old enough.
    assert!(
        log::open_transactions_before(&db, 1_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        log::open_transactions_before(&db, 1_001, 10).await.unwrap(),
        vec![log::OpenRow {
            key,
            producer_id: 7,
            producer_epoch: 0,
            first_offset: 2,
            opened_ms: 1_000
        }]
    );

    // Producer 8's transaction opens later: the stable offset stays with the earliest.
    commit(
        vec![one(txn_batch(1, 8, 0, 0)), one(batch(1, -1, -1, 100))],
        2_000,
    )
    .await;
    assert_eq!(stable(db.clone()).await, (2, 7));
    assert_eq!(
        log::open_transactions_before(&db, i64::MAX, 1)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.key, r.producer_id, r.producer_epoch, r.first_offset))
            .collect::<Vec<_>>(),
        vec![(key, 7, 0, 2)],
        "oldest first, at most the limit"
    );
    heard(&mut rx).await;

    // Producer 7 aborts: its range is recorded, the stable offset moves to producer 8's.
    let done = commit(vec![one(txn_marker(7, 0, false))], 3_000).await;
    assert_eq!(
        done.verdicts,
        vec![Verdict::Appended {
            base_offset: 7,
            last_offset: 7
        }]
    );
    assert!(done.object_id.is_some(), "the marker is a batch like any");
    assert_eq!(stable(db.clone()).await, (5, 8));
    let (_, payload) = heard(&mut rx).await;
    assert_eq!(payload, format!("{t}:0:0:8:5"));
    // Producer 8 commits: everything is stable.
    commit(vec![one(txn_marker(8, 0, true))], 4_000).await;
    assert_eq!(stable(db.clone()).await, (9, 9));
    assert_eq!(
        log::parse_changes(&heard(&mut rx).await.1)[0].last_stable,
        9
    );
    assert!(
        log::open_transactions_before(&db, i64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // The retried marker finds nothing open: nothing written, no object kept, no announcement.
    let again = commit(vec![one(txn_marker(7, 0, false))], 5_000).await;
    assert_eq!(again.verdicts, vec![Verdict::NothingOpen]);
    assert_eq!(again.object_id, None);
    assert!(again.changes.is_empty());
    assert_eq!(stable(db.clone()).await, (9, 9));
    // A marker from an older epoch than the producer's is fenced.
    let old = commit(vec![one(txn_marker(8, -1, true))], 5_000).await;
    assert_eq!(old.verdicts, vec![Verdict::InvalidProducerEpoch]);

    // The aborted range [2, 7], for fetches overlapping it.
    let aborted = |from: i64, upto: i64| {
        let db = db.clone();
        async move {
            log::aborted_transactions(&db, key, from, upto)
                .await
                .unwrap()
        }
    };
    assert_eq!(aborted(0, 9).await, vec![(7, 2)]);
    assert_eq!(aborted(7, 8).await, vec![(7, 2)]);
    assert_eq!(aborted(3, 4).await, vec![(7, 2)]);
    assert!(aborted(0, 2).await.is_empty(), "before its first batch");
    assert!(aborted(8, 9).await.is_empty(), "after its marker");

    // DeleteRecords past an open transaction's first offset: the stable offset follows the log
    // start, and aborted ranges wholly below it go.
    commit(
        vec![one(txn_batch(1, 7, 3, 0)), one(batch(2, -1, -1, 100))],
        6_000,
    )
    .await;
    assert_eq!(stable(db.clone()).await, (9, 12));
    heard(&mut rx).await;
    assert_eq!(
        log::delete_before(&db, reg, key, 10).await.unwrap(),
        Some(10)
    );
    let o = log::offsets(&db, key).await.unwrap().unwrap();
    assert_eq!((o.log_start, o.last_stable, o.high_watermark), (10, 10, 12));
    assert_eq!(heard(&mut rx).await.1, format!("{t}:0:10:12:10"));
    assert!(aborted(0, 100).await.is_empty());
    // The next commit keeps it there (the open transaction began below the log start).
    commit(vec![one(batch(1, -1, -1, 0))], 7_000).await;
    assert_eq!(stable(db.clone()).await, (10, 13));
    // Its abort records its range; retention keeps the stable offset with the log start.
    commit(vec![one(txn_marker(7, 0, false))], 8_000).await;
    assert_eq!(stable(db.clone()).await, (14, 14));
    assert_eq!(aborted(10, 14).await, vec![(7, 9)]);
    let o = log::offsets(&db, key).await.unwrap().unwrap();
    assert!(o.log_start <= o.last_stable && o.last_stable <= o.high_watermark);

    // Deleting the topic takes its open and aborted transactions along.
    commit(vec![one(txn_batch(1, 8, 1, 0))], 9_000).await;
    assert_eq!(
        log::open_transactions_before(&db, i64::MAX, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    topics::delete(&db, reg, "payments").await.unwrap().unwrap();
    assert!(
        log::open_transactions_before(&db, i64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(aborted(0, i64::MAX).await.is_empty());
}

/// Migration 3 on a database at version 2 with logs in it: each log's last stable offset
/// starts at its high watermark; new logs start at 0.
#[tokio::test]
async fn migration_3_makes_existing_logs_stable() {
    let Some((pg, _db)) = setup("migration3").await else {
        return;
    };
    let url = pg.database("at_version_2").await.unwrap();
    let db = Db::new(&url, 2).unwrap();
    let client = db.client().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE skiff_schema (
                version INT PRIMARY KEY,
                name TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )",
        )
        .await
        .unwrap();
    for m in schema::MIGRATIONS.iter().filter(|m| m.version <= 2) {
        client.batch_execute(m.sql).await.unwrap();
        client
            .execute(
                "INSERT INTO skiff_schema (version, name) VALUES ($1, $2)",
                &[&m.version, &m.name],
            )
            .await
            .unwrap();
    }
    let t = Uuid::new_v4();
    client
        .execute(
            "INSERT INTO logs (topic_id, partition, log_start, high_watermark) VALUES ($1, 0, 3, 8)",
            &[&t],
        )
        .await
        .unwrap();
    assert_eq!(
        schema::migrate(&db).await.unwrap(),
        (2, schema::current_version())
    );
    let key = PartitionKey {
        topic_id: t,
        partition: 0,
    };
    let o = log::offsets(&db, key).await.unwrap().unwrap();
    assert_eq!((o.log_start, o.last_stable, o.high_watermark), (3, 8, 8));
    let reg = register(&db, 1).await;
    let fresh = topic(&db, reg, "fresh", 1).await;
    let o = log::offsets(&db, topics::key(fresh, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((o.log_start, o.last_stable, o.high_watermark), (0, 0, 0));
}

/// Transactional offsets: staged (a later stage replaces), committed by the transaction's end
/// (announced per group) or dropped by its abort, read and forgotten once applied; pending
/// until then; a group's deletion drops them all.
#[tokio::test]
async fn transactional_offsets_are_staged_committed_and_forgotten() {
    use skiff_cluster::txn_offsets::{self, TXN_OFFSETS_CHANNEL, TxnOffset};
    let Some((_pg, db)) = setup("txn_offsets").await else {
        return;
    };
    let (_listener, mut rx) = listen(&db, &[TXN_OFFSETS_CHANNEL]).await;
    let at = |topic: &str, partition: i32, offset: i64| TxnOffset {
        topic: topic.to_string(),
        partition,
        offset,
        leader_epoch: 3,
        metadata: None,
        commit_ms: offset,
    };
    let groups = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let set = |entries: &[(&str, i32)]| {
        entries
            .iter()
            .map(|(t, p)| (t.to_string(), *p))
            .collect::<std::collections::BTreeSet<_>>()
    };

    let with_meta = TxnOffset {
        metadata: Some("m".into()),
        ..at("t", 1, 20)
    };
    assert_eq!(
        txn_offsets::stage(&db, "g1", 7, 0, &[at("t", 0, 10), with_meta.clone()])
            .await
            .unwrap(),
        2
    );
    // A later stage replaces; a partition named twice counts once, the last.
    txn_offsets::stage(
        &db,
        "g1",
        7,
        1,
        &[at("t", 0, 11), at("t", 2, 1), at("t", 2, 2)],
    )
    .await
    .unwrap();
    txn_offsets::stage(&db, "g2", 8, 0, &[at("t", 0, 5)])
        .await
        .unwrap();
    assert_eq!(
        txn_offsets::pending(&db, "g1").await.unwrap(),
        set(&[("t", 0), ("t", 1), ("t", 2)])
    );
    assert!(
        txn_offsets::committed(&db).await.unwrap().is_empty(),
        "staged offsets are not committed"
    );

    // Producer 7 commits: its rows in g1 (none in g2), announced for g1 only.
    assert_eq!(
        txn_offsets::end(&db, 7, &groups(&["g1", "g2"]), true)
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        heard(&mut rx).await,
        (TXN_OFFSETS_CHANNEL.to_string(), "g1".to_string())
    );
    let committed = txn_offsets::committed(&db).await.unwrap();
    assert_eq!(
        committed,
        vec![
            ("g1".to_string(), 7, at("t", 2, 2)),
            ("g1".to_string(), 7, at("t", 0, 11)),
            ("g1".to_string(), 7, with_meta),
        ],
        "oldest commit_ms first"
    );
    // Still pending until applied; a new stage does not replace a row committed and not
    // applied; a later abort of the producer leaves committed rows alone.
    assert_eq!(txn_offsets::pending(&db, "g1").await.unwrap().len(), 3);
    assert_eq!(
        txn_offsets::stage(&db, "g1", 7, 2, &[at("t", 1, 99)])
            .await
            .unwrap(),
        0
    );
    // An older epoch of a producer does not replace what a newer one staged.
    assert_eq!(
        txn_offsets::stage(&db, "g2", 8, 1, &[at("t", 0, 6)])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        txn_offsets::stage(&db, "g2", 8, 0, &[at("t", 0, 7)])
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        txn_offsets::committed(&db).await.unwrap(),
        committed,
        "a refused stage changes no committed row"
    );
    assert_eq!(
        txn_offsets::end(&db, 7, &groups(&["g1"]), false)
            .await
            .unwrap(),
        0
    );
    let applied = |p: i32| ("g1".to_string(), 7i64, "t".to_string(), p);
    assert_eq!(
        txn_offsets::forget(&db, &[applied(0), applied(2)])
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        txn_offsets::forget(&db, &[applied(0), applied(2)])
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        txn_offsets::pending(&db, "g1").await.unwrap(),
        set(&[("t", 1)])
    );

    // Producer 8 aborts: its rows go, nothing is announced.
    assert_eq!(
        txn_offsets::end(&db, 8, &groups(&["g2"]), false)
            .await
            .unwrap(),
        1
    );
    assert!(txn_offsets::pending(&db, "g2").await.unwrap().is_empty());
    assert!(
        txn_offsets::committed(&db)
            .await
            .unwrap()
            .iter()
            .all(|(group, ..)| group != "g2")
    );

    // Forgetting drops only committed rows; deleting the group drops everything.
    txn_offsets::stage(&db, "g1", 9, 0, &[at("u", 5, 1)])
        .await
        .unwrap();
    assert_eq!(
        txn_offsets::forget(&db, &[("g1".to_string(), 9, "u".to_string(), 5)])
            .await
            .unwrap(),
        0
    );
    assert_eq!(txn_offsets::forget_group(&db, "g1").await.unwrap(), 2);
    assert!(txn_offsets::pending(&db, "g1").await.unwrap().is_empty());
    // A commit with nothing staged changes and announces nothing.
    assert_eq!(
        txn_offsets::end(&db, 9, &groups(&["g1"]), true)
            .await
            .unwrap(),
        0
    );
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), rx.recv())
            .await
            .is_err(),
        "no announcement"
    );
}

/// Share-partition state: nothing without a seed; a claim copies the coordinator's seed record;
/// deltas follow the snapshot in order until a snapshot replaces them; a second claim fences the
/// first owner's writes; deleting the group's states (or its topic) leaves nothing to claim.
#[tokio::test]
async fn share_partition_states_are_claimed_and_fenced() {
    use skiff_cluster::coordinators;
    use skiff_cluster::share_states::{self, Seed, ShareKey, Write};
    let Some((_pg, db)) = setup("share_states").await else {
        return;
    };
    let topic_id = Uuid::from_u128(7);
    let key = ShareKey {
        group_id: "crew",
        topic_id,
        partition: 0,
    };
    let seed = Seed {
        shard: 3,
        key: b"Gs\0crew\0seed",
    };
    assert!(
        share_states::claim(&db, &key, 1, seed)
            .await
            .unwrap()
            .is_none(),
        "no state and no seed"
    );
    let a = register(&db, 1).await;
    let shard = coordinators::claim(&db, 3, a).await.unwrap().expect("free");
    coordinators::write(
        &db,
        3,
        shard.epoch,
        a,
        &[(seed.key.to_vec(), Some(b"snap-0".to_vec()))],
    )
    .await
    .unwrap();

    let first = share_states::claim(&db, &key, 1, seed)
        .await
        .unwrap()
        .expect("seeded");
    assert_eq!((first.epoch, &first.snapshot[..]), (1, &b"snap-0"[..]));
    assert!(first.deltas.is_empty());
    for d in [&b"d1"[..], b"d2"] {
        share_states::write(&db, &key, 1, first.epoch, Write::Delta(d))
            .await
            .unwrap();
    }
    // Broker 2 takes it over: it reads everything written, and broker 1 is fenced.
    let second = share_states::claim(&db, &key, 2, seed)
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(second.epoch, 2);
    assert_eq!(second.snapshot, b"snap-0");
    assert_eq!(second.deltas, vec![b"d1".to_vec(), b"d2".to_vec()]);
    assert!(matches!(
        share_states::write(&db, &key, 1, first.epoch, Write::Delta(b"late")).await,
        Err(DbError::Fenced { .. })
    ));
    assert!(matches!(
        share_states::write(&db, &key, 2, first.epoch, Write::Delta(b"old")).await,
        Err(DbError::Fenced { .. })
    ));
    share_states::write(&db, &key, 2, second.epoch, Write::Delta(b"d3"))
        .await
        .unwrap();
    share_states::write(&db, &key, 2, second.epoch, Write::Snapshot(b"snap-1"))
        .await
        .unwrap();
    share_states::write(&db, &key, 2, second.epoch, Write::Delta(b"d4"))
        .await
        .unwrap();
    let third = share_states::claim(&db, &key, 1, seed)
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(third.epoch, 3);
    assert_eq!(third.snapshot, b"snap-1", "the snapshot replaced the seed");
    assert_eq!(
        third.deltas,
        vec![b"d4".to_vec()],
        "and the deltas before it"
    );

    // Deleting the group's states: the owner's writes are refused, and with the seed gone too
    // nothing is claimed.
    assert_eq!(share_states::delete(&db, "crew", None).await.unwrap(), 1);
    assert!(matches!(
        share_states::write(&db, &key, 1, third.epoch, Write::Delta(b"gone")).await,
        Err(DbError::Fenced { .. })
    ));
    coordinators::write(&db, 3, shard.epoch, a, &[(seed.key.to_vec(), None)])
        .await
        .unwrap();
    assert!(
        share_states::claim(&db, &key, 1, seed)
            .await
            .unwrap()
            .is_none()
    );
}
