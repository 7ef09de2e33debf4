//! Coordinator shards in cluster mode. Group (and transactional) IDs hash onto
//! [`SHARDS`] shards; each shard is placed over the live brokers like a partition, and the broker
//! it is placed on claims it in PostgreSQL (a growing shard epoch), loads its records into the
//! coordinator, and from then on writes every change of the shard's state through
//! [`ShardedStore`] under that epoch. FindCoordinator names the placed broker; a broker that has
//! not loaded a shard answers COORDINATOR_LOAD_IN_PROGRESS, one that does not own it
//! NOT_COORDINATOR, and clients look again.
//!
//! Writes go through one [`Writer`]: appends (made under the coordinator's lock) are queued with
//! a sequence number, and a task writes everything queued for a shard in one PostgreSQL
//! transaction fenced by the shard epoch, shards in parallel. Handlers wait for their sequence
//! before answering. A refused or failed write fails its waiters (NOT_COORDINATOR) and every
//! later write of that shard epoch, and the shard is unloaded: what is in memory never runs ahead
//! of PostgreSQL for long, and the next claim reloads it from there.
//!
//! [`keep_shards`] moves shards: it releases those placed elsewhere (after their queued writes),
//! claims those placed here (a lapsed owner's are taken over), and unloads everything when this
//! broker is fenced.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{Result, anyhow};
use bytes::Bytes;
use futures::future::BoxFuture;
use skiff_cluster::coordinators::{self, Change, SHARDS, shard_of};
use skiff_protocol::{ErrorCode, Uuid};
use tokio::sync::{Notify, watch};

use super::{Cluster, Host, placement};
use crate::coordinator_store::{CoordinatorStore, Durable, StoreError};
use crate::shutdown::stopped;

/// The namespace of the group coordinator's records in a shard.
pub const GROUPS: u8 = b'G';
/// The namespace of the transaction coordinator's records in a shard.
pub const TRANSACTIONS: u8 = b'T';

/// How often shard placement is checked without a change of the live set.
const CHECK: Duration = Duration::from_millis(500);

/// How long a release waits for the shard's queued writes.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Failures remembered for waiters that have not looked yet.
const FAILED_KEPT: usize = 100_000;

/// The pseudo topic whose partitions the shards are placed as.
const SHARD_TOPIC: Uuid = Uuid::from_u128(0x636f_6f72_6469_6e61_746f_7273_0000_0001);

/// The live broker a shard is placed on.
pub fn shard_owner(shard: i32, live: &[i32]) -> Option<i32> {
    placement::leader(SHARD_TOPIC, shard, live)
}

/// Where this broker stands with a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardState {
    Unowned,
    /// Claimed, its records being loaded.
    Loading,
    Owned {
        epoch: i64,
    },
}

/// This broker's shards, and the writes it has queued for them.
pub struct Coordination {
    states: Mutex<Vec<ShardState>>,
    pub writer: Arc<Writer>,
    /// Shards whose writes failed (shard, epoch), for [`keep_shards`] to unload.
    failed_shards: Mutex<Vec<(i32, i64)>>,
    /// Wakes [`keep_shards`]: a failure, or a change of the live brokers.
    pub wake: Notify,
}

impl Default for Coordination {
    fn default() -> Self {
        Coordination {
            states: Mutex::new(vec![ShardState::Unowned; SHARDS as usize]),
            writer: Arc::new(Writer::default()),
            failed_shards: Mutex::new(Vec::new()),
            wake: Notify::new(),
        }
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Coordination {
    pub fn state(&self, shard: i32) -> ShardState {
        usize::try_from(shard)
            .ok()
            .and_then(|i| locked(&self.states).get(i).copied())
            .unwrap_or(ShardState::Unowned)
    }

    fn set(&self, shard: i32, state: ShardState) {
        if let Ok(i) = usize::try_from(shard)
            && let Some(slot) = locked(&self.states).get_mut(i)
        {
            *slot = state;
        }
    }

    /// Why this broker cannot coordinate `id` now (`None`: it can).
    pub fn refusal(&self, id: &str) -> Option<ErrorCode> {
        match self.state(shard_of(id)) {
            ShardState::Owned { .. } => None,
            ShardState::Loading => Some(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
            ShardState::Unowned => Some(ErrorCode::NOT_COORDINATOR),
        }
    }

    /// The shards this broker owns, with their epochs.
    pub fn owned(&self) -> Vec<(i32, i64)> {
        locked(&self.states)
            .iter()
            .zip(0..)
            .filter_map(|(state, shard)| match state {
                ShardState::Owned { epoch } => Some((shard, *epoch)),
                _ => None,
            })
            .collect()
    }

    /// A coordinator's store over these shards, its records under `namespace`.
    pub fn store(
        self: &Arc<Self>,
        namespace: u8,
        owner_of: fn(&[u8]) -> Option<&str>,
    ) -> ShardedStore {
        ShardedStore {
            coordination: Arc::clone(self),
            namespace,
            owner_of,
        }
    }

    fn shard_failed(&self, shard: i32, epoch: i64) {
        locked(&self.failed_shards).push((shard, epoch));
        self.wake.notify_one();
    }
}

/// One queued append to one shard.
struct Entry {
    seq: i64,
    shard: i32,
    epoch: i64,
    changes: Vec<Change>,
}

#[derive(Default)]
struct Queue {
    entries: Vec<Entry>,
    next_seq: i64,
    /// The last sequence queued per shard (since it was loaded).
    last: HashMap<i32, i64>,
}

/// The queue of shard writes and their outcomes.
pub struct Writer {
    queue: Mutex<Queue>,
    wake: Notify,
    /// Every sequence up to this one has been written or has failed.
    done: watch::Sender<i64>,
    failed: Mutex<BTreeSet<i64>>,
}

impl Default for Writer {
    fn default() -> Self {
        Writer {
            queue: Mutex::default(),
            wake: Notify::new(),
            done: watch::Sender::new(0),
            failed: Mutex::default(),
        }
    }
}

impl Writer {
    fn enqueue(&self, shard: i32, epoch: i64, changes: Vec<Change>) -> i64 {
        let mut queue = locked(&self.queue);
        queue.next_seq += 1;
        let seq = queue.next_seq;
        queue.entries.push(Entry {
            seq,
            shard,
            epoch,
            changes,
        });
        queue.last.insert(shard, seq);
        drop(queue);
        self.wake.notify_one();
        seq
    }

    /// The last sequence queued for `shard` since it was loaded.
    fn last(&self, shard: i32) -> Option<i64> {
        locked(&self.queue).last.get(&shard).copied()
    }

    fn forget(&self, shard: i32) {
        locked(&self.queue).last.remove(&shard);
    }

    async fn wait(&self, seq: i64) -> Result<(), StoreError> {
        let mut done = self.done.subscribe();
        done.wait_for(|d| *d >= seq)
            .await
            .map_err(|_| StoreError::NotCoordinator("the shard writer stopped".into()))?;
        if locked(&self.failed).contains(&seq) {
            return Err(StoreError::NotCoordinator(
                "the shard's write was refused or failed".into(),
            ));
        }
        Ok(())
    }

    fn take(&self) -> Vec<Entry> {
        std::mem::take(&mut locked(&self.queue).entries)
    }

    fn mark_failed(&self, seqs: impl IntoIterator<Item = i64>) {
        let mut failed = locked(&self.failed);
        failed.extend(seqs);
        while failed.len() > FAILED_KEPT {
            failed.pop_first();
        }
    }
}

impl Durable for Writer {
    fn wait_durable(&self, end: i64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.wait(end))
    }
}

/// A coordinator's store in cluster mode: each record goes to the shard of the group or
/// transactional ID it is about, under the namespace byte of its coordinator.
pub struct ShardedStore {
    coordination: Arc<Coordination>,
    namespace: u8,
    owner_of: fn(&[u8]) -> Option<&str>,
}

impl CoordinatorStore for ShardedStore {
    fn append(&mut self, changes: &[(Bytes, Option<Bytes>)]) -> Result<i64> {
        let mut by_shard: BTreeMap<i32, Vec<Change>> = BTreeMap::new();
        for (key, value) in changes {
            let id = (self.owner_of)(key)
                .ok_or_else(|| anyhow!("a coordinator record whose key names no ID"))?;
            let mut stored = Vec::with_capacity(key.len() + 1);
            stored.push(self.namespace);
            stored.extend_from_slice(key);
            by_shard
                .entry(shard_of(id))
                .or_default()
                .push((stored, value.as_ref().map(|v| v.to_vec())));
        }
        let mut last = 0;
        for (shard, changes) in by_shard {
            let ShardState::Owned { epoch } = self.coordination.state(shard) else {
                return Err(StoreError::NotCoordinator(format!(
                    "coordinator shard {shard} is not owned by this broker"
                ))
                .into());
            };
            last = self.coordination.writer.enqueue(shard, epoch, changes);
        }
        Ok(last)
    }

    fn needs_compaction(&self) -> bool {
        false
    }

    fn compact(&mut self, _live: &[(Bytes, Bytes)]) -> Result<()> {
        Ok(())
    }

    fn serves(&self, id: &str) -> bool {
        matches!(
            self.coordination.state(shard_of(id)),
            ShardState::Owned { .. }
        )
    }

    fn barrier(&self, id: &str) -> Option<i64> {
        self.coordination.writer.last(shard_of(id))
    }
}

/// Writes what is queued, shard by shard in parallel, until shutdown (then once more).
pub async fn run_writer(cluster: Arc<Cluster>, mut shutdown: watch::Receiver<bool>) {
    let coordination = Arc::clone(&cluster.coordination);
    let writer = Arc::clone(&coordination.writer);
    let mut poisoned: HashSet<(i32, i64)> = HashSet::new();
    let mut stopping = false;
    loop {
        let notified = writer.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let entries = writer.take();
        let Some(high) = entries.last().map(|e| e.seq) else {
            if stopping {
                return;
            }
            tokio::select! {
                _ = notified => {}
                _ = stopped(&mut shutdown) => stopping = true,
            }
            continue;
        };
        let mut groups: BTreeMap<(i32, i64), (Vec<i64>, Vec<Change>)> = BTreeMap::new();
        for entry in entries {
            let group = groups.entry((entry.shard, entry.epoch)).or_default();
            group.0.push(entry.seq);
            group.1.extend(entry.changes);
        }
        let reg = cluster.registration();
        let writes = groups.into_iter().map(|((shard, epoch), (seqs, changes))| {
            let refused = poisoned.contains(&(shard, epoch));
            let db = cluster.db.clone();
            async move {
                let result = match reg {
                    _ if refused => Err(anyhow!("an earlier write of this shard epoch failed")),
                    None => Err(anyhow!("this broker is not registered")),
                    Some(reg) => coordinators::write(&db, shard, epoch, reg, &changes)
                        .await
                        .map_err(anyhow::Error::from),
                };
                (shard, epoch, seqs, result)
            }
        });
        for (shard, epoch, seqs, result) in futures::future::join_all(writes).await {
            if let Err(e) = result {
                if poisoned.insert((shard, epoch)) {
                    tracing::warn!(shard, epoch, error = %format!("{e:#}"), "a coordinator shard's write failed; unloading it");
                    coordination.shard_failed(shard, epoch);
                }
                writer.mark_failed(seqs);
            }
        }
        writer.done.send_replace(high);
    }
}

/// Keeps this broker's shards in line with placement: releases, claims and loads, and unloads
/// shards whose writes failed or when this broker is fenced.
pub async fn keep_shards(
    host: Arc<dyn Host>,
    cluster: Arc<Cluster>,
    mut shutdown: watch::Receiver<bool>,
) {
    let coordination = Arc::clone(&cluster.coordination);
    let mut timer = tokio::time::interval(CHECK);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => {}
            _ = coordination.wake.notified() => {}
            _ = stopped(&mut shutdown) => {
                release_all(host.as_ref(), &cluster).await;
                return;
            }
        }
        let failed = std::mem::take(&mut *locked(&coordination.failed_shards));
        for (shard, epoch) in failed {
            if coordination.state(shard) == (ShardState::Owned { epoch }) {
                unload(host.as_ref(), &coordination, shard);
            }
        }
        rebalance(host.as_ref(), &cluster).await;
    }
}

fn unload(host: &dyn Host, coordination: &Coordination, shard: i32) {
    coordination.set(shard, ShardState::Unowned);
    host.unload_shard(shard);
}

/// Releases and claims shards so that this broker owns exactly those placed on it.
async fn rebalance(host: &dyn Host, cluster: &Cluster) {
    let coordination = &cluster.coordination;
    let reg = cluster.registration();
    let live: Vec<i32> = cluster.live().iter().map(|b| b.node_id).collect();
    for shard in 0..SHARDS {
        let placed_here = reg.is_some() && shard_owner(shard, &live) == Some(cluster.node_id);
        match (coordination.state(shard), reg) {
            (ShardState::Owned { epoch }, Some(reg)) if !placed_here => {
                unload(host, coordination, shard);
                release(cluster, shard, epoch, reg).await;
            }
            (ShardState::Owned { .. }, None) => unload(host, coordination, shard),
            (ShardState::Unowned, Some(reg)) if placed_here => {
                coordination.set(shard, ShardState::Loading);
                match coordinators::claim(&cluster.db, shard, reg).await {
                    Ok(Some(claimed)) => {
                        let records = claimed.records.len();
                        coordination.writer.forget(shard);
                        let owned = ShardState::Owned {
                            epoch: claimed.epoch,
                        };
                        host.load_shard(shard, claimed.records, &claimed.topics, &|| {
                            coordination.set(shard, owned)
                        });
                        tracing::info!(
                            shard,
                            epoch = claimed.epoch,
                            records,
                            "coordinator shard loaded"
                        );
                    }
                    Ok(None) => coordination.set(shard, ShardState::Unowned),
                    Err(e) => {
                        coordination.set(shard, ShardState::Unowned);
                        tracing::debug!(shard, error = %e, "claiming a coordinator shard failed");
                    }
                }
            }
            _ => {}
        }
    }
}

/// Gives a shard up once the writes queued for it are done.
async fn release(
    cluster: &Cluster,
    shard: i32,
    epoch: i64,
    reg: skiff_cluster::membership::Registration,
) {
    if let Some(last) = cluster.coordination.writer.last(shard) {
        // Bounded: at shutdown the writer may be gone before a late append.
        let _ = tokio::time::timeout(RELEASE_WAIT, cluster.coordination.writer.wait(last)).await;
    }
    cluster.coordination.writer.forget(shard);
    match coordinators::release(&cluster.db, shard, epoch, reg).await {
        Ok(()) => tracing::info!(shard, epoch, "coordinator shard released"),
        Err(e) => tracing::debug!(shard, error = %e, "releasing a coordinator shard failed"),
    }
}

/// A clean stop: every shard is released at once (the others need not wait for the lease).
async fn release_all(host: &dyn Host, cluster: &Cluster) {
    let Some(reg) = cluster.registration() else {
        return;
    };
    for (shard, epoch) in cluster.coordination.owned() {
        unload(host, &cluster.coordination, shard);
        release(cluster, shard, epoch, reg).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_spread_over_the_live_brokers_and_move_only_from_a_leaver() {
        let three: Vec<Option<i32>> = (0..SHARDS).map(|s| shard_owner(s, &[1, 2, 3])).collect();
        for node in [1, 2, 3] {
            let n = three.iter().filter(|o| **o == Some(node)).count();
            assert!((8..=26).contains(&n), "node {node} owns {n} of 50");
        }
        for (shard, before) in (0..SHARDS).zip(&three) {
            let after = shard_owner(shard, &[1, 3]);
            if *before != Some(2) {
                assert_eq!(
                    after, *before,
                    "shard {shard} moved without its owner leaving"
                );
            }
        }
        assert_eq!(shard_owner(0, &[]), None);
    }

    #[test]
    fn refusals_follow_the_shard_state() {
        let c = Coordination::default();
        let shard = shard_of("orders");
        assert_eq!(c.refusal("orders"), Some(ErrorCode::NOT_COORDINATOR));
        c.set(shard, ShardState::Loading);
        assert_eq!(
            c.refusal("orders"),
            Some(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
        );
        c.set(shard, ShardState::Owned { epoch: 4 });
        assert_eq!(c.refusal("orders"), None);
        assert_eq!(c.owned(), vec![(shard, 4)]);
    }

    /// Appends go to their ID's shard under its epoch, refused for shards not owned; waiters
    /// learn of failures.
    #[tokio::test]
    async fn the_sharded_store_queues_by_shard_and_reports_failures() {
        let c = Arc::new(Coordination::default());
        let mut store = c.store(GROUPS, crate::groups::record_group);
        let key = Bytes::from_static(b"g\0orders");
        let refused = store.append(&[(key.clone(), Some(Bytes::from_static(b"{}")))]);
        assert!(refused.is_err());
        assert!(!store.serves("orders"));
        let shard = shard_of("orders");
        c.set(shard, ShardState::Owned { epoch: 2 });
        let seq = store
            .append(&[(key.clone(), Some(Bytes::from_static(b"{}")))])
            .expect("owned");
        assert_eq!(store.barrier("orders"), Some(seq));
        let entries = c.writer.take();
        assert_eq!(entries.len(), 1);
        assert_eq!((entries[0].shard, entries[0].epoch), (shard, 2));
        assert_eq!(entries[0].changes[0].0, b"Gg\0orders".to_vec());
        c.writer.mark_failed([seq]);
        c.writer.done.send_replace(seq);
        assert!(matches!(
            c.writer.wait(seq).await,
            Err(StoreError::NotCoordinator(_))
        ));
        let next = store.append(&[(key, None)]).expect("owned");
        c.writer.done.send_replace(next);
        assert!(c.writer.wait(next).await.is_ok());
    }
}
