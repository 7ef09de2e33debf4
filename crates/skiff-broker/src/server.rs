//! The listener: binds, accepts connections under a cap, runs background maintenance, and shuts
//! down gracefully (stop accepting, let connections finish what they have read for at most
//! `shutdown.timeout.ms`, then close the rest, flush, snapshot producer state, return).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::config::{BrokerConfig, FlushMode};
use crate::connection::{Accepted, Connection};
use crate::security::Listener;
use crate::shutdown::stopped;
use crate::state::Broker;

/// A broker running on a tokio runtime.
pub struct RunningBroker {
    /// The first listener's bound address.
    pub local_addr: SocketAddr,
    /// Every listener's name and bound address, in configuration order.
    pub listener_addrs: Vec<(String, SocketAddr)>,
    /// Where the admin HTTP listener is, when enabled.
    pub admin_addr: Option<SocketAddr>,
    pub broker: Arc<Broker>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<Result<()>>,
    /// The admin HTTP listener's task, when enabled (it stops with the broker).
    admin: Option<JoinHandle<()>>,
}

/// How long a stopped broker's last tasks (the admin listener finishing its answers, blocking
/// work in flight) may keep its state before [`RunningBroker::shutdown`] gives up on them.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

impl RunningBroker {
    /// Asks the broker to stop and waits until it has: its connections closed, its logs
    /// flushed, and its state dropped, so the data directory is free for the next broker.
    pub async fn shutdown(self) -> Result<()> {
        let RunningBroker {
            broker,
            shutdown,
            task,
            admin,
            ..
        } = self;
        let released = broker.released();
        drop(broker);
        let _ = shutdown.send(true);
        let stopped = task.await.context("broker task panicked")?;
        if let Some(mut admin) = admin
            && tokio::time::timeout(RELEASE_TIMEOUT, &mut admin)
                .await
                .is_err()
        {
            tracing::warn!("the admin listener did not stop in time; aborting it");
            admin.abort();
            let _ = admin.await;
        }
        stopped?;
        tokio::time::timeout(RELEASE_TIMEOUT, released)
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "the broker stopped but its state is still in use {RELEASE_TIMEOUT:?} later \
                     (the data directory stays locked until it is released)"
                )
            })
    }

    /// Waits until the broker stops by itself (it only does on a fatal error).
    pub async fn wait(self) -> Result<()> {
        self.task.await.context("broker task panicked")?
    }

    /// A sender that stops the broker when `true` is sent (for signal handlers).
    pub fn shutdown_handle(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
    }
}

/// Binds the listener, opens the data directory, and starts serving.
pub async fn start(config: BrokerConfig) -> Result<RunningBroker> {
    let mut listeners = Vec::new();
    let mut listener_addrs = Vec::new();
    let mut security = Vec::new();
    for (index, listener) in config.effective_listeners().into_iter().enumerate() {
        let oauth = config.security.oauth.is_some();
        security.push(Arc::new(Listener::open(index, &listener, oauth)?));
        let bound = TcpListener::bind(listener.addr)
            .await
            .with_context(|| format!("binding listener {} at {}", listener.name, listener.addr))?;
        listener_addrs.push((listener.name, bound.local_addr()?));
        listeners.push(bound);
    }
    let bound: Vec<SocketAddr> = listener_addrs.iter().map(|(_, addr)| *addr).collect();
    let local_addr = *bound.first().context("no listener")?;
    let cluster = match &config.cluster {
        Some(cluster_config) => {
            // Registered with every listener's advertised address.
            let mut listeners = std::collections::BTreeMap::new();
            for (listener, addr) in config.effective_listeners().into_iter().zip(&bound) {
                let (host, port) = listener
                    .advertised
                    .unwrap_or_else(|| (addr.ip().to_string(), addr.port()));
                listeners.insert(listener.name, (host, i32::from(port)));
            }
            // The first listener's address is the broker's main one.
            let first = config
                .effective_listeners()
                .first()
                .and_then(|l| listeners.get(&l.name).cloned())
                .unwrap_or_else(|| (local_addr.ip().to_string(), i32::from(local_addr.port())));
            let endpoints = skiff_cluster::membership::Endpoints {
                host: first.0,
                port: first.1,
                listeners,
            };
            let cluster =
                crate::cluster::Cluster::join(cluster_config.clone(), config.node_id, endpoints)
                    .await?;
            let topics = skiff_cluster::topics::list(&cluster.db)
                .await
                .context("reading the cluster's topics")?
                .into_iter()
                .map(crate::cluster::topic_info)
                .collect();
            Some((cluster, topics))
        }
        None => None,
    };
    let broker = Broker::open_in(config, &bound, cluster)?;
    if let Some(cluster) = broker.cluster() {
        // The group configs, ACLs, credentials and telemetry subscriptions are the cluster's
        // before anyone is served.
        crate::cluster::sync_metadata(&*broker, cluster)
            .await
            .context("reading the cluster's metadata")?;
    }
    let (shutdown, shutdown_rx) = watch::channel(false);
    let admin = match broker.config.admin_listen {
        Some(addr) => {
            Some(crate::admin::start(addr, Arc::clone(&broker), shutdown_rx.clone()).await?)
        }
        None => None,
    };
    let (admin_addr, admin) = admin.unzip();
    let task = tokio::spawn(serve(
        listeners.into_iter().zip(security).collect(),
        Arc::clone(&broker),
        shutdown_rx,
    ));
    tracing::info!(
        listen = %local_addr,
        listeners = ?listener_addrs,
        data_dir = %broker.config.data_dir.display(),
        cluster_id = %broker.cluster_id,
        admin = ?admin_addr,
        "skiff broker started"
    );
    Ok(RunningBroker {
        local_addr,
        listener_addrs,
        admin_addr,
        broker,
        shutdown,
        task,
        admin,
    })
}

/// Accepts on one listener and hands each connection, tagged with the listener's index, to the
/// serving loop; stops with the broker (or when the loop is gone).
async fn accept_loop(
    index: usize,
    listener: TcpListener,
    accepted: mpsc::Sender<(usize, std::io::Result<(tokio::net::TcpStream, SocketAddr)>)>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let next = tokio::select! {
            next = listener.accept() => next,
            _ = stopped(&mut shutdown) => return,
        };
        let failed = next.is_err();
        if accepted.send((index, next)).await.is_err() {
            return;
        }
        if failed {
            // Out of file descriptors and the like: back off instead of spinning.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = stopped(&mut shutdown) => return,
            }
        }
    }
}

async fn serve(
    listeners: Vec<(TcpListener, Arc<Listener>)>,
    broker: Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let limit = Arc::new(Semaphore::new(broker.config.max_connections));
    let budget = broker
        .config
        .queued_max_request_bytes
        .map(|total| (Arc::new(Semaphore::new(total)), total));
    // Sent when the shutdown deadline passes: connections still open are dropped.
    let (kill, kill_rx) = watch::channel(false);
    // Every connection holds a clone; when all are gone, recv() returns None.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    let connection_ids = AtomicU64::new(1);
    // Before the first connection is accepted: transaction ends a stop interrupted are finished
    // and transactions left hanging on partitions closed, with no client racing them.
    crate::txn_end::resume_unfinished(&broker).await;
    let maintenance = tokio::spawn(maintenance(Arc::clone(&broker), shutdown.clone()));
    let group_timers = tokio::spawn(group_timers(Arc::clone(&broker), shutdown.clone()));
    let share_timers = broker
        .config
        .share_groups_enabled
        .then(|| tokio::spawn(share_timers(Arc::clone(&broker), shutdown.clone())));
    let txn_timers = tokio::spawn(txn_timers(Arc::clone(&broker), shutdown.clone()));
    // The journal's writer outlives the connections: it is stopped after the last one closed,
    // so their ends are in the file.
    let (journal_stop, journal_stop_rx) = watch::channel(false);
    let journal_writer = tokio::spawn(crate::journal::write_loop(
        Arc::clone(&broker.journal),
        journal_stop_rx,
    ));
    let oauth_keys = tokio::spawn({
        let broker = Arc::clone(&broker);
        let shutdown = shutdown.clone();
        async move {
            if let Some(oauth) = &broker.security.oauth {
                oauth.keep_fresh(shutdown).await;
            }
        }
    });
    let cluster_tasks = match broker.cluster() {
        Some(cluster) => crate::cluster::spawn_tasks(
            Arc::clone(&broker) as Arc<dyn crate::cluster::Host>,
            Arc::clone(cluster),
            shutdown.clone(),
        ),
        None => Vec::new(),
    };
    let publish_clients = tokio::spawn(crate::admin::publish_clients(
        Arc::clone(&broker),
        shutdown.clone(),
    ));
    // The produce pipeline stops after the connections: what they submit until then is
    // committed.
    let (pipeline_stop, pipeline_stop_rx) = watch::channel(false);
    let pipeline = broker.cluster().map(|cluster| {
        tokio::spawn(crate::cluster::produce::run(
            Arc::clone(cluster),
            pipeline_stop_rx,
        ))
    });
    let security: Vec<Arc<Listener>> = listeners.iter().map(|(_, l)| Arc::clone(l)).collect();
    let certificates = tokio::spawn(crate::security::reload_certificates(
        security.clone(),
        Duration::from_millis(broker.config.security.tls_reload_interval_ms),
        shutdown.clone(),
    ));
    // One accept task per listener; the loop below takes connections from all of them, one
    // permit of the connection cap each, before accepting the next.
    let (accepted_tx, mut accepted_rx) = mpsc::channel(1);
    let acceptors: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(index, (listener, _))| {
            tokio::spawn(accept_loop(
                index,
                listener,
                accepted_tx.clone(),
                shutdown.clone(),
            ))
        })
        .collect();
    drop(accepted_tx);

    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&limit).acquire_owned() => permit.context("connection limit closed")?,
            _ = stopped(&mut shutdown) => break,
        };
        let accepted = tokio::select! {
            accepted = accepted_rx.recv() => accepted,
            _ = stopped(&mut shutdown) => break,
        };
        let Some((index, accepted)) = accepted else {
            break;
        };
        let Some(listener) = security.get(index).cloned() else {
            continue;
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let id = connection_ids.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            "conn",
            id,
            peer = %peer,
            listener = %listener.name,
            client_instance_id = tracing::field::Empty
        );
        let broker = Arc::clone(&broker);
        let shutdown = shutdown.clone();
        let budget = budget.clone();
        let done = done_tx.clone();
        let mut kill = kill_rx.clone();
        let connection_span = span.clone();
        tokio::spawn(
            async move {
                let transport = tokio::select! {
                    transport = crate::security::accept(&listener, stream) => transport,
                    _ = stopped(&mut kill) => return,
                };
                match transport {
                    Ok(transport) => {
                        let accepted = Accepted {
                            id,
                            listener,
                            transport,
                            peer,
                        };
                        Connection::new(accepted, broker, shutdown, connection_span, budget)
                            .run(kill)
                            .await;
                    }
                    Err(e) => {
                        broker
                            .metrics
                            .tls_handshake_failures
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::info!(error = %format!("{e:#}"), "connection refused");
                    }
                }
                drop(permit);
                drop(done);
            }
            .instrument(span),
        );
    }

    // Stop accepting: the listeners close with their tasks.
    for acceptor in &acceptors {
        acceptor.abort();
    }
    drop(accepted_rx);
    drop(done_tx);
    let deadline = Duration::from_millis(broker.config.shutdown_timeout_ms);
    tracing::info!(
        ?deadline,
        "stopped accepting; waiting for connections to finish"
    );
    if tokio::time::timeout(deadline, done_rx.recv())
        .await
        .is_err()
    {
        let open = broker.metrics.connections_open.load(Ordering::Relaxed);
        tracing::warn!(
            open,
            "shutdown.timeout.ms passed with connections still open; closing them"
        );
        let _ = kill.send(true);
        let _ = done_rx.recv().await;
    }
    let _ = journal_stop.send(true);
    let _ = journal_writer.await;
    let _ = pipeline_stop.send(true);
    if let Some(pipeline) = pipeline {
        let _ = pipeline.await;
    }
    for task in cluster_tasks {
        task.abort();
        let _ = task.await;
    }
    if let Some(cluster) = broker.cluster() {
        cluster.leave().await;
    }
    // Each holds the broker: it is dropped (not just asked to stop) before the final flush, so
    // the state is released when the caller lets go of it.
    let background = [
        Some(maintenance),
        Some(certificates),
        Some(oauth_keys),
        Some(group_timers),
        share_timers,
        Some(txn_timers),
        Some(publish_clients),
    ];
    for task in background.into_iter().flatten() {
        task.abort();
        let _ = task.await;
    }
    // Transaction ends still running (they may wait on the produce pipeline or the
    // coordinators' writer, stopped above); each is persisted and carried out again later.
    broker.stop_detached().await;
    let flushing = Arc::clone(&broker);
    tokio::task::spawn_blocking(move || {
        flushing.flush_due(true);
        flushing.snapshot_producers();
    })
    .await
    .context("final flush panicked")?;
    tracing::info!("skiff broker stopped");
    Ok(())
}

/// Drives the group coordinator's session and rebalance deadlines: sleeps until the earliest
/// one, or until an operation arms an earlier one.
async fn group_timers(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let next = broker.groups.next_deadline();
        let sleep = match next {
            Some(deadline) => {
                let wait = (deadline - crate::clock::now_ms()).max(0) as u64;
                tokio::time::sleep(Duration::from_millis(wait))
            }
            None => tokio::time::sleep(Duration::from_secs(3600)),
        };
        tokio::select! {
            _ = sleep => {}
            _ = broker.groups.timers_changed.notified() => {}
            _ = stopped(&mut shutdown) => return,
        }
        let expired = broker.groups.fire_timers(&broker, crate::clock::now_ms());
        for (group, protocol, member_id) in expired {
            let instance = broker
                .clients
                .member_instance(&group, &member_id)
                .or_else(|| crate::uuid_text::decode(&member_id).map(|(id, _)| id));
            if let Some(instance) = instance {
                broker.journal.with(|journal, now| {
                    journal.expired(instance, now, &group, protocol, &member_id);
                });
            }
        }
    }
}

/// Drives the share-partition leader: expires record locks at the earliest deadline (or when an
/// acquisition sets an earlier one), and acts on the group coordinator's share events (members
/// gone, states deleted) as they are queued.
async fn share_timers(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let events = broker.groups.share_events_notify();
    let mut next_unload = crate::clock::now_ms() + crate::share::UNLOAD_EVERY_MS;
    loop {
        let deadline = broker
            .share
            .next_deadline()
            .unwrap_or(i64::MAX)
            .min(next_unload);
        let wait = (deadline - crate::clock::now_ms()).max(0) as u64;
        let sleep = tokio::time::sleep(Duration::from_millis(wait));
        tokio::select! {
            _ = sleep => {}
            _ = broker.share.timers_changed.notified() => {}
            _ = events.notified() => {}
            _ = stopped(&mut shutdown) => return,
        }
        broker.share_events();
        let now = crate::clock::now_ms();
        broker.share.expire_locks(broker.share_store(), now);
        if now >= next_unload {
            next_unload = now + crate::share::UNLOAD_EVERY_MS;
            // In cluster mode a share partition is kept only where its partition is led.
            let leads = |key: &crate::groups::share::SharePartitionKey| {
                broker
                    .cluster()
                    .is_none_or(|c| c.leads(key.topic_id, key.partition))
            };
            let unloaded = broker.share.unload_idle(&leads);
            if unloaded > 0 {
                tracing::debug!(unloaded, "idle share partitions unloaded");
            }
        }
    }
}

/// Aborts transactions past their timeout; in cluster mode also applies the transactional
/// offsets handed to the groups this broker coordinates (when announced, and every
/// [`crate::txns::SWEEP_INTERVAL_MS`] for what no announcement reported) and closes hanging
/// transactions.
async fn txn_timers(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(
        crate::txns::TIMEOUT_CHECK_INTERVAL_MS,
    ));
    let cluster = broker.cluster().cloned();
    let sweep_ms = cluster
        .as_ref()
        .map_or(crate::txns::SWEEP_INTERVAL_MS, |c| {
            crate::txns::SWEEP_INTERVAL_MS.min(c.config.hanging_txn_ms / 2)
        });
    let mut sweep = tokio::time::interval(Duration::from_millis(sweep_ms.max(1)));
    loop {
        // A wake-up while busy is kept (`notify_one` leaves a permit).
        let handed = async {
            match &cluster {
                Some(c) => c.txn_offsets_committed.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tick.tick() => crate::txn_end::tick(&broker).await,
            _ = sweep.tick(), if cluster.is_some() => {
                crate::txn_end::sweep_hanging(&broker).await;
                crate::txn_end::apply_committed_offsets(&broker).await;
            }
            _ = handed => crate::txn_end::apply_committed_offsets(&broker).await,
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// Periodic work: retention (every `log.retention.check.interval.ms`), telemetry expiry, and
/// `flush = interval` syncs.
async fn maintenance(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let flush_every = match broker.config.flush {
        FlushMode::Interval { flush_ms } => Some(Duration::from_millis(flush_ms.max(1))),
        FlushMode::Always => None,
    };
    let mut retention = tokio::time::interval(broker.retention_check_interval());
    retention.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut telemetry_expiry = tokio::time::interval(Duration::from_secs(10));
    let mut flush = tokio::time::interval(flush_every.unwrap_or(Duration::from_secs(3600)));
    loop {
        tokio::select! {
            _ = retention.tick() => {
                let b = Arc::clone(&broker);
                let _ = tokio::task::spawn_blocking(move || b.apply_retention()).await;
            }
            _ = telemetry_expiry.tick() => {
                let forgotten = broker.lock_telemetry().expire(crate::clock::now_ms());
                if forgotten > 0 {
                    tracing::debug!(forgotten, "telemetry instances expired");
                }
            }
            _ = flush.tick(), if flush_every.is_some() => {
                let b = Arc::clone(&broker);
                let _ = tokio::task::spawn_blocking(move || b.flush_due(true)).await;
            }
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// A broker on an ephemeral loopback port over `dir`, with the defaults (for unit tests).
#[cfg(test)]
pub(crate) async fn start_for_test(dir: &std::path::Path) -> RunningBroker {
    start(BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.to_path_buf(),
        ..Default::default()
    })
    .await
    .expect("broker starts")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work a request left running (`Broker::spawn_detached`, as transaction ends are) holds
    /// the broker's state and may wait forever on services that stopped first: shutdown stops
    /// it, so that the state (and the data directory) is released. With the clock paused, a
    /// shutdown that kept waiting would fail at once with "still in use".
    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_detached_work_that_never_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let running = start_for_test(dir.path()).await;
        let holder = Arc::clone(&running.broker);
        running.broker.spawn_detached(async move {
            let _state = holder;
            std::future::pending::<()>().await;
        });
        running
            .shutdown()
            .await
            .expect("the detached work is stopped");
    }
}
