//! KIP-932 share-partition state in cluster mode ([`skiff_cluster::share_states`]): the broker
//! that leads a partition is its share partitions' leader, as in Kafka, and keeps their state in
//! PostgreSQL itself: loading a share partition claims it (a new fencing epoch), and every write
//! names that epoch. A broker that lost the partition finds its writes refused
//! ([`ShareStateError::NotLeader`]) and drops what it held; the new leader has read every write
//! that was answered. Writes are synchronous (PostgreSQL is waited for on the caller's worker,
//! [`super::block_on`]), so what they return is durable already.
//!
//! A share partition's first state is the one its group's coordinator wrote into the group's
//! shard when the group first subscribed to it ([`crate::groups::share`]): the claim copies it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use skiff_cluster::DbError;
use skiff_cluster::coordinators::shard_of;
use skiff_cluster::share_states::{self, Seed, ShareKey, Write};
use skiff_share::{Snapshot, apply_delta};

use super::{Cluster, block_on, coordination::GROUPS};
use crate::groups::share::{SharePartitionKey, ShareStateError, ShareStateRecord, state_key};
use crate::share::StateStore;

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
        let seed = Seed {
            shard: shard_of(&key.group_id),
            key: &seed_key,
        };
        let claimed = block_on(share_states::claim(
            &self.db,
            &share_key(key),
            self.node_id,
            seed,
        ))
        .map_err(|e| storage(anyhow::anyhow!(e)))?
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
        let what = match record {
            ShareStateRecord::Snapshot(_) => Write::Snapshot(&json),
            ShareStateRecord::Delta(_) => Write::Delta(&json),
        };
        let written = block_on(share_states::write(
            &self.db,
            &share_key(key),
            self.node_id,
            epoch,
            what,
        ))
        .map_err(|e| storage(anyhow::anyhow!(e)))?;
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
