//! The background work of cluster mode (see the module above for what each task keeps true).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use skiff_cluster::membership;
use skiff_cluster::{DbError, log, topics};
use skiff_meta::TopicInfo;
use skiff_protocol::Uuid;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Cluster, Host};
use crate::shutdown::stopped;

/// How often topics and brokers are re-read even without a notification.
const POLL: Duration = Duration::from_secs(1);
/// How often unused objects are looked for.
const OBJECT_GC: Duration = Duration::from_secs(5);
/// How often the object store is swept for uploads never committed.
const ORPHAN_SWEEP: Duration = Duration::from_secs(60);

/// Starts the cluster's background tasks on `broker` (which must be in cluster mode).
pub fn spawn_tasks(
    broker: Arc<dyn Host>,
    cluster: Arc<Cluster>,
    shutdown: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    vec![
        tokio::spawn(keep_registered(
            Arc::clone(&broker),
            Arc::clone(&cluster),
            shutdown.clone(),
        )),
        tokio::spawn(listen(
            Arc::clone(&broker),
            Arc::clone(&cluster),
            shutdown.clone(),
        )),
        tokio::spawn(poll(
            Arc::clone(&broker),
            Arc::clone(&cluster),
            shutdown.clone(),
        )),
        tokio::spawn(collect_objects(Arc::clone(&cluster), shutdown.clone())),
        tokio::spawn(hold_instances(
            Arc::clone(&broker),
            Arc::clone(&cluster),
            shutdown.clone(),
        )),
        tokio::spawn(super::coordination::run_writer(
            Arc::clone(&cluster),
            shutdown.clone(),
        )),
        tokio::spawn(super::coordination::keep_shards(
            Arc::clone(&broker),
            Arc::clone(&cluster),
            shutdown.clone(),
        )),
        tokio::spawn(retention(broker, cluster, shutdown)),
    ]
}

/// Re-reads the live brokers.
async fn refresh_live(cluster: &Cluster) {
    match membership::live_brokers(&cluster.db).await {
        Ok(live) => cluster.set_live(live),
        Err(e) => tracing::debug!(error = %e, "reading the live brokers failed"),
    }
}

/// Mirrors PostgreSQL's topics into the broker's metadata, its group configs into the group
/// coordinator, and the shared documents (ACLs, credentials, subscriptions) that changed.
pub async fn sync_metadata(broker: &dyn Host, cluster: &Cluster) -> Result<(), DbError> {
    let rows = topics::list(&cluster.db).await?;
    broker.mirror(rows.into_iter().map(topic_info).collect());
    broker.mirror_group_configs(skiff_cluster::coordinators::group_configs(&cluster.db).await?);
    super::documents::sync(broker, cluster).await
}

/// A stored topic as the metadata store holds it.
pub fn topic_info(row: topics::TopicRow) -> TopicInfo {
    TopicInfo {
        name: row.name,
        id: Uuid::from_u128(row.topic_id.as_u128()),
        partitions: row.partitions,
        configs: row.configs,
    }
}

/// Renews the lease every third of it; registers again once fenced.
async fn keep_registered(
    broker: Arc<dyn Host>,
    cluster: Arc<Cluster>,
    mut shutdown: watch::Receiver<bool>,
) {
    let lease = cluster.config.lease_ms as i64;
    let mut timer = tokio::time::interval(Duration::from_millis(cluster.config.lease_ms / 3));
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => {}
            _ = stopped(&mut shutdown) => return,
        }
        match cluster.registration() {
            Some(reg) => match membership::renew(&cluster.db, reg, lease).await {
                Ok(()) => {}
                Err(DbError::Fenced { .. }) => cluster.fenced(reg),
                Err(e) => tracing::warn!(error = %e, "renewing the cluster lease failed"),
            },
            None => {
                match membership::register(
                    &cluster.db,
                    cluster.node_id,
                    &cluster.endpoints,
                    cluster.config.rack.as_deref(),
                    lease,
                )
                .await
                {
                    Ok(reg) => {
                        tracing::info!(
                            node_id = reg.node_id,
                            epoch = reg.epoch,
                            "registered in the cluster again"
                        );
                        cluster.set_registration(Some(reg));
                        // What happened while this broker was away is read afresh.
                        cluster.forget_heard();
                        let _ = sync_metadata(broker.as_ref(), &cluster).await;
                    }
                    Err(e) => tracing::warn!(error = %e, "registering in the cluster failed"),
                }
            }
        }
        refresh_live(&cluster).await;
    }
}

/// LISTENs for commits, topic changes, broker changes and transactional offsets handed to
/// groups; reconnects (and re-reads everything,
/// since notifications may have been missed) when the connection drops.
async fn listen(broker: Arc<dyn Host>, cluster: Arc<Cluster>, mut shutdown: watch::Receiver<bool>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let connected = cluster.db.dedicated().await;
        match connected {
            Ok((client, mut messages)) => {
                // The connection makes progress only while `messages` is polled: LISTEN's own
                // answer needs it too.
                let statement = format!(
                    "LISTEN {}; LISTEN {}; LISTEN {}; LISTEN skiff_brokers;",
                    log::COMMITS_CHANNEL,
                    topics::METADATA_CHANNEL,
                    skiff_cluster::txn_offsets::TXN_OFFSETS_CHANNEL
                );
                let listened: Result<(), String> = {
                    let listening = client.batch_execute(&statement);
                    tokio::pin!(listening);
                    loop {
                        tokio::select! {
                            done = &mut listening => break done.map_err(|e| e.to_string()),
                            message = messages.next() => match message {
                                Some(Ok(_)) => {}
                                Some(Err(e)) => break Err(e.to_string()),
                                None => break Err("the connection closed".into()),
                            },
                            _ = stopped(&mut shutdown) => return,
                        }
                    }
                };
                if let Err(e) = listened {
                    tracing::warn!(error = %e, "LISTEN failed");
                } else {
                    backoff = Duration::from_millis(100);
                    cluster.forget_heard();
                    let _ = sync_metadata(broker.as_ref(), &cluster).await;
                    refresh_live(&cluster).await;
                    cluster.notify_commit();
                    cluster.txn_offsets_committed.notify_one();
                    loop {
                        let message = tokio::select! {
                            m = messages.next() => m,
                            _ = stopped(&mut shutdown) => return,
                        };
                        match message {
                            Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                                if n.channel() == log::COMMITS_CHANNEL {
                                    cluster.announced(&log::parse_changes(n.payload()));
                                    cluster.notify_commit();
                                } else if n.channel() == topics::METADATA_CHANNEL {
                                    let _ = sync_metadata(broker.as_ref(), &cluster).await;
                                } else if n.channel()
                                    == skiff_cluster::txn_offsets::TXN_OFFSETS_CHANNEL
                                {
                                    cluster.txn_offsets_committed.notify_one();
                                } else {
                                    refresh_live(&cluster).await;
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => {
                                tracing::warn!(error = %e, "the LISTEN connection failed");
                                break;
                            }
                            None => break,
                        }
                    }
                }
                drop(client);
            }
            Err(e) => tracing::debug!(error = %e, "connecting for LISTEN failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stopped(&mut shutdown) => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Re-reads topics and brokers every second: what NOTIFY would have said, if it was missed.
async fn poll(broker: Arc<dyn Host>, cluster: Arc<Cluster>, mut shutdown: watch::Receiver<bool>) {
    let mut timer = tokio::time::interval(POLL);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => {}
            _ = stopped(&mut shutdown) => return,
        }
        if let Err(e) = sync_metadata(broker.as_ref(), &cluster).await {
            tracing::debug!(error = %e, "reading the cluster's topics failed");
        }
        refresh_live(&cluster).await;
    }
}

/// Renews this broker's claims of client instance IDs with open connections, every third of
/// the hold (at most every 10 s), while the binding is on.
async fn hold_instances(
    broker: Arc<dyn Host>,
    cluster: Arc<Cluster>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some((hold_ms, _)) = broker.held_instances() else {
        return;
    };
    let hold_ms = hold_ms.max(super::INSTANCE_HOLD_MIN_MS);
    let every = Duration::from_millis((hold_ms / 3).clamp(500, 10_000) as u64);
    let mut timer = tokio::time::interval(every);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => {}
            _ = stopped(&mut shutdown) => return,
        }
        let Some((_, open)) = broker.held_instances() else {
            return;
        };
        let held: Vec<(uuid::Uuid, String)> = open
            .into_iter()
            .map(|(id, principal)| (uuid::Uuid::from_u128(id.as_u128()), principal))
            .collect();
        if let Err(e) = skiff_cluster::documents::hold_instances(&cluster.db, &held, hold_ms).await
        {
            tracing::debug!(error = %e, "renewing instance ID claims failed");
        }
    }
}

/// Deletes objects no batch has referred to for the grace period; the lowest live broker also
/// sweeps the store for uploads that were never committed.
async fn collect_objects(cluster: Arc<Cluster>, mut shutdown: watch::Receiver<bool>) {
    let grace = cluster.config.object_grace_ms as i64;
    let mut gc = tokio::time::interval(OBJECT_GC);
    gc.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sweep = tokio::time::interval(ORPHAN_SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = gc.tick() => {
                if let Err(e) = skiff_cluster::gc::delete_unused(&cluster.db, &cluster.objects, grace).await {
                    tracing::warn!(error = %e, "deleting unused objects failed");
                }
            }
            _ = sweep.tick() => {
                let lowest = cluster.live().first().map(|b| b.node_id);
                let cutoff = crate::clock::now_ms() - grace.max(60_000);
                if lowest == Some(cluster.node_id)
                    && let Err(e) = skiff_cluster::gc::sweep_uncommitted(&cluster.db, &cluster.objects, cutoff).await
                {
                    tracing::warn!(error = %e, "sweeping uncommitted objects failed");
                }
            }
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// Applies time and size retention to the partitions this broker leads, every
/// `log.retention.check.interval.ms`.
async fn retention(
    broker: Arc<dyn Host>,
    cluster: Arc<Cluster>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut timer = tokio::time::interval(broker.retention_check_interval());
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    timer.tick().await;
    loop {
        tokio::select! {
            _ = timer.tick() => {}
            _ = stopped(&mut shutdown) => return,
        }
        let Some(reg) = cluster.registration() else {
            continue;
        };
        'topics: for topic in broker.retention_targets() {
            for p in 0..topic.partitions {
                if !cluster.leads(topic.id, p) {
                    continue;
                }
                let key = super::key(topic.id, p);
                let now = crate::clock::now_ms();
                match log::apply_retention(&cluster.db, reg, key, now, topic.ms, topic.bytes).await
                {
                    Ok(_) => {}
                    Err(DbError::Fenced { .. }) => {
                        cluster.fenced(reg);
                        break 'topics;
                    }
                    Err(e) => {
                        tracing::warn!(topic = %topic.name, partition = p, error = %e, "retention failed")
                    }
                }
            }
        }
    }
}
