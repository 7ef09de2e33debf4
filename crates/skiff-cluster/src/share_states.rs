//! KIP-932 share-partition state in cluster mode: one row per share group and partition (its
//! latest snapshot), and the deltas written since, as Kafka's share coordinator keeps a
//! `ShareSnapshot` and `ShareUpdate`s per share partition.
//!
//! The broker that leads the partition owns the state: [`claim`] bumps the row's epoch and reads
//! the snapshot and deltas in one transaction; every [`write`] names that epoch and share-locks
//! the row while it checks it, so a broker that lost the partition (another claimed it) is
//! refused with [`DbError::Fenced`], and a claim waits for a write in flight rather than reading
//! around it. A share partition that has no row yet is seeded from the record its group's
//! coordinator wrote when the group first subscribed to it (the caller names that record).
//!
//! The bytes are opaque here (the broker's JSON).

use uuid::Uuid;

use crate::db::{Db, DbError};

/// A share partition: a share group on one partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareKey<'a> {
    pub group_id: &'a str,
    pub topic_id: Uuid,
    pub partition: i32,
}

/// A claimed share partition: the epoch to write with, its snapshot and the deltas since, oldest
/// first.
#[derive(Debug)]
pub struct Claimed {
    pub epoch: i64,
    pub snapshot: Vec<u8>,
    pub deltas: Vec<Vec<u8>>,
}

/// Where a share partition's first state comes from: a coordinator record.
#[derive(Debug, Clone, Copy)]
pub struct Seed<'a> {
    pub shard: i32,
    pub key: &'a [u8],
}

/// What a write stores.
#[derive(Debug, Clone, Copy)]
pub enum Write<'a> {
    /// The whole state: replaces the snapshot and drops the deltas.
    Snapshot(&'a [u8]),
    /// A change, kept after the snapshot and the earlier deltas.
    Delta(&'a [u8]),
}

/// A share partition's deltas since its snapshot, oldest first.
async fn deltas(
    tx: &tokio_postgres::Transaction<'_>,
    key: &ShareKey<'_>,
) -> Result<Vec<Vec<u8>>, DbError> {
    let rows = tx
        .query(
            "SELECT delta FROM share_partition_deltas
              WHERE group_id = $1 AND topic_id = $2 AND partition = $3
              ORDER BY seq",
            &[&key.group_id, &key.topic_id, &key.partition],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<Vec<Vec<u8>>, _>>()?)
}

/// Claims a share partition for broker `node`: bumps its epoch and reads its state. A share
/// partition without a row is created from `seed` (the coordinator's initial state) when that
/// record exists; `None` when neither does (the share partition has no state).
pub async fn claim(
    db: &Db,
    key: &ShareKey<'_>,
    node: i32,
    seed: Seed<'_>,
) -> Result<Option<Claimed>, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    // Twice at most: a row another broker created between the two statements is then claimed.
    for _ in 0..2 {
        let row = tx
            .query_opt(
                "UPDATE share_partitions SET owner = $4, epoch = epoch + 1
                  WHERE group_id = $1 AND topic_id = $2 AND partition = $3
                  RETURNING epoch, snapshot",
                &[&key.group_id, &key.topic_id, &key.partition, &node],
            )
            .await?;
        if let Some(row) = row {
            let epoch: i64 = row.try_get(0)?;
            let snapshot: Vec<u8> = row.try_get(1)?;
            let deltas = deltas(&tx, key).await?;
            tx.commit().await?;
            return Ok(Some(Claimed {
                epoch,
                snapshot,
                deltas,
            }));
        }
        let seeded = tx
            .query_opt(
                "SELECT value FROM coordinator_records WHERE shard = $1 AND key = $2",
                &[&seed.shard, &seed.key],
            )
            .await?;
        let Some(seeded) = seeded else {
            tx.commit().await?;
            return Ok(None);
        };
        let snapshot: Vec<u8> = seeded.try_get(0)?;
        let inserted = tx
            .execute(
                "INSERT INTO share_partitions (group_id, topic_id, partition, owner, epoch, snapshot)
                 VALUES ($1, $2, $3, $4, 1, $5)
                 ON CONFLICT (group_id, topic_id, partition) DO NOTHING",
                &[
                    &key.group_id,
                    &key.topic_id,
                    &key.partition,
                    &node,
                    &snapshot,
                ],
            )
            .await?;
        if inserted == 1 {
            tx.commit().await?;
            return Ok(Some(Claimed {
                epoch: 1,
                snapshot,
                deltas: Vec::new(),
            }));
        }
    }
    Err(DbError::Corrupt(format!(
        "share partition {}/{}/{} could not be claimed",
        key.group_id, key.topic_id, key.partition
    )))
}

/// Writes a snapshot or a delta of a share partition claimed by broker `node` at `epoch`;
/// [`DbError::Fenced`] when another claim came since (or the state was deleted).
pub async fn write(
    db: &Db,
    key: &ShareKey<'_>,
    node: i32,
    epoch: i64,
    what: Write<'_>,
) -> Result<(), DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    let current = tx
        .query_opt(
            "SELECT 1 FROM share_partitions
              WHERE group_id = $1 AND topic_id = $2 AND partition = $3
                AND owner = $4 AND epoch = $5
              FOR SHARE",
            &[&key.group_id, &key.topic_id, &key.partition, &node, &epoch],
        )
        .await?;
    if current.is_none() {
        return Err(DbError::Fenced {
            node_id: node,
            epoch,
        });
    }
    match what {
        Write::Delta(delta) => {
            tx.execute(
                "INSERT INTO share_partition_deltas (group_id, topic_id, partition, delta)
                 VALUES ($1, $2, $3, $4)",
                &[&key.group_id, &key.topic_id, &key.partition, &delta],
            )
            .await?;
        }
        Write::Snapshot(snapshot) => {
            // The row is share-locked by this transaction only: its own update may proceed.
            tx.execute(
                "UPDATE share_partitions SET snapshot = $4
                  WHERE group_id = $1 AND topic_id = $2 AND partition = $3",
                &[&key.group_id, &key.topic_id, &key.partition, &snapshot],
            )
            .await?;
            tx.execute(
                "DELETE FROM share_partition_deltas
                  WHERE group_id = $1 AND topic_id = $2 AND partition = $3",
                &[&key.group_id, &key.topic_id, &key.partition],
            )
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Deletes the share-partition states of `group_id` (of one topic, or all); returns how many.
pub async fn delete(db: &Db, group_id: &str, topic_id: Option<Uuid>) -> Result<u64, DbError> {
    let client = db.client().await?;
    let n = match topic_id {
        Some(topic) => {
            client
                .execute(
                    "DELETE FROM share_partitions WHERE group_id = $1 AND topic_id = $2",
                    &[&group_id, &topic],
                )
                .await?
        }
        None => {
            client
                .execute(
                    "DELETE FROM share_partitions WHERE group_id = $1",
                    &[&group_id],
                )
                .await?
        }
    };
    Ok(n)
}

/// A share partition's state as stored (its snapshot and the deltas since, oldest first),
/// without claiming it: for the group's coordinator describing the group's offsets.
pub async fn read(db: &Db, key: &ShareKey<'_>) -> Result<Option<(Vec<u8>, Vec<Vec<u8>>)>, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    let row = tx
        .query_opt(
            "SELECT snapshot FROM share_partitions
              WHERE group_id = $1 AND topic_id = $2 AND partition = $3
              FOR SHARE",
            &[&key.group_id, &key.topic_id, &key.partition],
        )
        .await?;
    let Some(row) = row else {
        tx.commit().await?;
        return Ok(None);
    };
    let snapshot: Vec<u8> = row.try_get(0)?;
    let deltas = deltas(&tx, key).await?;
    tx.commit().await?;
    Ok(Some((snapshot, deltas)))
}

/// Replaces a share partition's state (AlterShareGroupOffsets by the group's coordinator): the
/// snapshot becomes `snapshot`, the deltas go, and the epoch grows with no owner, so whichever
/// broker held it is fenced and the next leader loads the new state. Returns whether a state
/// was there (without one, the coordinator's record seeds it at the next claim).
pub async fn replace(db: &Db, key: &ShareKey<'_>, snapshot: &[u8]) -> Result<bool, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    let replaced = tx
        .execute(
            "UPDATE share_partitions SET snapshot = $4, owner = NULL, epoch = epoch + 1
              WHERE group_id = $1 AND topic_id = $2 AND partition = $3",
            &[&key.group_id, &key.topic_id, &key.partition, &snapshot],
        )
        .await?;
    tx.execute(
        "DELETE FROM share_partition_deltas
          WHERE group_id = $1 AND topic_id = $2 AND partition = $3",
        &[&key.group_id, &key.topic_id, &key.partition],
    )
    .await?;
    tx.commit().await?;
    Ok(replaced == 1)
}
