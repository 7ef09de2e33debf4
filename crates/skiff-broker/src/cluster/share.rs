//! KIP-932 share-partition state in cluster mode ([`skiff_cluster::share_states`]): the broker
//! that leads a partition is its share partitions' leader, as in Kafka, and keeps their state in
//! PostgreSQL itself: loading a share partition claims it (a new fencing epoch), and every write
//! names that epoch. A broker that lost the partition finds its writes refused
//! ([`ShareStateError::NotLeader`]) and drops what it held; the new leader has read every write
//! that was answered. Writes are synchronous, so what they return is durable already.
//!
//! The share-partition leader calls the store under its locks, from synchronous code. Its
//! PostgreSQL connections are therefore driven by a thread of their own ([`ShareDb`], a
//! [`super::side::SideDb`]): were they driven by the broker's runtime, the broker's worker
//! threads, blocked on those locks while one of them waits for PostgreSQL, could leave nobody to
//! drive the connection (a deadlock seen with three share consumers).
//!
//! A share partition's first state is the one its group's coordinator wrote into the group's
//! shard when the group first subscribed to it ([`crate::groups::share`]): the claim copies it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use skiff_cluster::DbError;
use skiff_cluster::coordinators::shard_of;
use skiff_cluster::share_states::{self, Seed, ShareKey, Write};
use skiff_share::{Snapshot, apply_delta};

use super::{Cluster, coordination::GROUPS};
use crate::groups::share::{SharePartitionKey, ShareStateError, ShareStateRecord, state_key};
use crate::share::StateStore;

/// PostgreSQL for share-partition state, on a thread of its own (see the module).
pub struct ShareDb {
    side: super::side::SideDb,
}

impl ShareDb {
    /// Starts the thread, with a pool of `pool_size` connections to `url` (lock and idle
    /// transaction limits `limit_ms`, as the broker's).
    pub fn start(url: &str, pool_size: usize, limit_ms: u64) -> anyhow::Result<ShareDb> {
        Ok(ShareDb {
            side: super::side::SideDb::start("skiff-share-db", url, pool_size, limit_ms)?,
        })
    }

    /// Runs `work` with the side thread's connections and waits for its result.
    fn run<T>(
        &self,
        work: impl for<'d> FnOnce(&'d skiff_cluster::Db) -> futures::future::BoxFuture<'d, T>,
    ) -> Result<T, ShareStateError> {
        Ok(self.side.block_on(work(self.side.db())))
    }
}

/// The epochs this broker claimed its loaded share partitions at.
#[derive(Default)]
pub struct ShareEpochs(Mutex<HashMap<SharePartitionKey, i64>>);

impl ShareEpochs {
    fn get(&self, key: &SharePartitionKey) -> Option<i64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .copied()
    }

    fn set(&self, key: &SharePartitionKey, epoch: Option<i64>) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match epoch {
            Some(epoch) => map.insert(key.clone(), epoch),
            None => map.remove(key),
        };
    }
}

fn share_key(key: &SharePartitionKey) -> ShareKey<'_> {
    ShareKey {
        group_id: &key.group_id,
        topic_id: uuid::Uuid::from_u128(key.topic_id.as_u128()),
        partition: key.partition,
    }
}

fn storage(e: impl Into<anyhow::Error>) -> ShareStateError {
    ShareStateError::Storage(e.into())
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ShareStateError> {
    serde_json::from_slice(bytes).map_err(storage)
}

/// The stored state of a share partition: its snapshot with the deltas since folded in.
fn fold(snapshot: &[u8], deltas: &[Vec<u8>]) -> Result<Snapshot, ShareStateError> {
    let mut state: Snapshot = parse(snapshot)?;
    for delta in deltas {
        state = apply_delta(&state, &parse(delta)?);
    }
    Ok(state)
}

impl Cluster {
    /// A share partition's current state in PostgreSQL, read without claiming it (the group's
    /// coordinator describing offsets); `None` when its leader has not stored one yet.
    pub async fn share_state(
        &self,
        key: &SharePartitionKey,
    ) -> Result<Option<Snapshot>, ShareStateError> {
        match share_states::read(&self.db, &share_key(key))
            .await
            .map_err(storage)?
        {
            Some((snapshot, deltas)) => fold(&snapshot, &deltas).map(Some),
            None => Ok(None),
        }
    }

    /// Replaces a share partition's stored state (AlterShareGroupOffsets), fencing whichever
    /// broker held it.
    pub async fn replace_share_state(
        &self,
        key: &SharePartitionKey,
        snapshot: &Snapshot,
    ) -> Result<(), ShareStateError> {
        let json = serde_json::to_vec(snapshot).map_err(storage)?;
        share_states::replace(&self.db, &share_key(key), &json)
            .await
            .map_err(storage)?;
        Ok(())
    }
}

impl StateStore for Cluster {
    fn load(&self, key: &SharePartitionKey) -> Result<Option<Snapshot>, ShareStateError> {
        let seed_key = [&[GROUPS][..], &state_key(key)].concat();
        let owned = key.clone();
        let node = self.node_id;
        let claimed = self
            .share_db
            .run(move |db| {
                Box::pin(async move {
                    let seed = Seed {
                        shard: shard_of(&owned.group_id),
                        key: &seed_key,
                    };
                    share_states::claim(db, &share_key(&owned), node, seed).await
                })
            })?
            .map_err(storage)?;
        let Some(claimed) = claimed else {
            self.share_epochs.set(key, None);
            return Ok(None);
        };
        let snapshot = fold(&claimed.snapshot, &claimed.deltas)?;
        self.share_epochs.set(key, Some(claimed.epoch));
        Ok(Some(snapshot))
    }

    fn append(
        &self,
        key: &SharePartitionKey,
        record: ShareStateRecord,
    ) -> Result<i64, ShareStateError> {
        let Some(epoch) = self.share_epochs.get(key) else {
            return Err(ShareStateError::NotLeader(
                "the share partition is not loaded here".into(),
            ));
        };
        let json = match &record {
            ShareStateRecord::Snapshot(snapshot) => serde_json::to_vec(snapshot),
            ShareStateRecord::Delta(delta) => serde_json::to_vec(delta),
        }
        .map_err(storage)?;
        let snapshot = matches!(record, ShareStateRecord::Snapshot(_));
        let owned = key.clone();
        let node = self.node_id;
        let written = self.share_db.run(move |db| {
            Box::pin(async move {
                let what = if snapshot {
                    Write::Snapshot(&json)
                } else {
                    Write::Delta(&json)
                };
                share_states::write(db, &share_key(&owned), node, epoch, what).await
            })
        })?;
        match written {
            Ok(()) => Ok(0),
            Err(DbError::Fenced { .. }) => {
                self.share_epochs.set(key, None);
                Err(ShareStateError::NotLeader(format!(
                    "share partition {}-{} of group {} was claimed by another broker",
                    key.topic_id, key.partition, key.group_id
                )))
            }
            Err(e) => Err(storage(e)),
        }
    }
}
