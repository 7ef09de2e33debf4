//! Coordinator shards in PostgreSQL: group and transactional IDs hash onto [`SHARDS`] shards
//! (Kafka's 50 `__consumer_offsets` partitions are the model), each owned by at most one live
//! broker at a time, and each shard's records (the coordinators' key-value state) live in
//! `coordinator_records`.
//!
//! Ownership is a claim: [`claim`] takes a shard that is released or whose owner's lease has
//! lapsed, bumps the shard's epoch, and reads the shard's records in the same transaction, after
//! every write of the previous owner has committed or been refused. Every [`write`] names the
//! shard epoch it was claimed with and share-locks the shard's row while it checks that the epoch
//! and the owner's lease still hold: a stale owner (paused past its lease, or fenced) is refused
//! with [`DbError::Fenced`], and a claim waits for a write in flight rather than reading around
//! it.
//!
//! Group configs (Kafka keeps them in the cluster metadata, not in the coordinator) are a table
//! of their own that any broker writes, announced on the metadata channel.

use std::collections::BTreeMap;

use crate::db::{Db, DbError};
use crate::membership::{self, Registration};
use crate::topics::METADATA_CHANNEL;

/// How many coordinator shards there are (the rows the schema creates).
pub const SHARDS: i32 = 50;

/// The shard of a group or transactional ID: Kafka's partition of `__consumer_offsets` and
/// `__transaction_state`, `abs(javaHashCode(id)) % 50`.
pub fn shard_of(id: &str) -> i32 {
    let hash = id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    // Kafka's Utils.abs: the absolute value, with i32::MIN mapped to 0.
    let positive = if hash == i32::MIN { 0 } else { hash.abs() };
    positive % SHARDS
}

/// A claimed shard: its new epoch and every record it holds.
#[derive(Debug)]
pub struct Claimed {
    pub epoch: i64,
    pub records: Vec<(Vec<u8>, Vec<u8>)>,
    /// The names of the topics that exist, read after the records: an offset among the
    /// records for a topic not here belongs to a topic deleted since it was committed.
    pub topics: std::collections::BTreeSet<String>,
}

/// Claims `shard` for `reg` when it is released, owned by a registration that is no longer live,
/// or already `reg`'s (a reload). Returns `None` while another live broker owns it.
pub async fn claim(db: &Db, shard: i32, reg: Registration) -> Result<Option<Claimed>, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    membership::check_current(&tx, reg).await?;
    let row = tx
        .query_opt(
            "UPDATE coordinator_shards s
                SET owner = $2, owner_epoch = $3, epoch = s.epoch + 1, claimed_at = now()
              WHERE s.shard = $1
                AND (s.owner IS NULL
                     OR (s.owner = $2 AND s.owner_epoch = $3)
                     OR NOT EXISTS (SELECT 1 FROM brokers b
                                     WHERE b.node_id = s.owner AND b.epoch = s.owner_epoch
                                       AND b.lease_until > clock_timestamp()))
              RETURNING s.epoch",
            &[&shard, &reg.node_id, &reg.epoch],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let epoch: i64 = row.try_get(0)?;
    let rows = tx
        .query(
            "SELECT key, value FROM coordinator_records WHERE shard = $1 ORDER BY key",
            &[&shard],
        )
        .await?;
    let records = rows
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<Vec<_>, DbError>>()?;
    let topics = tx
        .query("SELECT name FROM topics", &[])
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    tx.commit().await?;
    Ok(Some(Claimed {
        epoch,
        records,
        topics,
    }))
}

/// Gives `shard` up (this broker no longer should own it), if it still holds it at `epoch`.
pub async fn release(db: &Db, shard: i32, epoch: i64, reg: Registration) -> Result<(), DbError> {
    let client = db.client().await?;
    client
        .execute(
            "UPDATE coordinator_shards SET owner = NULL, owner_epoch = NULL
              WHERE shard = $1 AND epoch = $2 AND owner = $3 AND owner_epoch = $4",
            &[&shard, &epoch, &reg.node_id, &reg.epoch],
        )
        .await?;
    Ok(())
}

/// One change to a shard's records: a value, or `None` to delete the key.
pub type Change = (Vec<u8>, Option<Vec<u8>>);

/// Writes `changes` (in order: the last change of a key wins) to `shard`, fenced by `epoch`:
/// refused with [`DbError::Fenced`] unless `reg` still owns the shard at that epoch under a
/// lease that has not lapsed.
pub async fn write(
    db: &Db,
    shard: i32,
    epoch: i64,
    reg: Registration,
    changes: &[Change],
) -> Result<(), DbError> {
    let mut last: BTreeMap<&[u8], Option<&[u8]>> = BTreeMap::new();
    for (key, value) in changes {
        last.insert(key, value.as_deref());
    }
    let mut put_keys = Vec::new();
    let mut put_values = Vec::new();
    let mut deletes = Vec::new();
    for (key, value) in last {
        match value {
            Some(v) => {
                put_keys.push(key);
                put_values.push(v);
            }
            None => deletes.push(key),
        }
    }
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    let current = tx
        .query_opt(
            "SELECT 1 FROM coordinator_shards s
               JOIN brokers b ON b.node_id = s.owner AND b.epoch = s.owner_epoch
              WHERE s.shard = $1 AND s.epoch = $2 AND s.owner = $3 AND s.owner_epoch = $4
                AND b.lease_until > clock_timestamp()
              FOR SHARE OF s",
            &[&shard, &epoch, &reg.node_id, &reg.epoch],
        )
        .await?;
    if current.is_none() {
        return Err(DbError::Fenced {
            node_id: reg.node_id,
            epoch: reg.epoch,
        });
    }
    if !put_keys.is_empty() {
        tx.execute(
            "INSERT INTO coordinator_records (shard, key, value)
             SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS u(k, v)
             ON CONFLICT (shard, key) DO UPDATE SET value = EXCLUDED.value",
            &[&shard, &put_keys, &put_values],
        )
        .await?;
    }
    if !deletes.is_empty() {
        tx.execute(
            "DELETE FROM coordinator_records WHERE shard = $1 AND key = ANY($2::bytea[])",
            &[&shard, &deletes],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// A shard as `skiff cluster status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRow {
    pub shard: i32,
    pub owner: Option<i32>,
    pub epoch: i64,
    pub records: i64,
}

/// Every shard, its owner (when claimed) and how many records it holds.
pub async fn shards(db: &Db) -> Result<Vec<ShardRow>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT s.shard, s.owner, s.epoch,
                    (SELECT count(*) FROM coordinator_records r WHERE r.shard = s.shard)
               FROM coordinator_shards s ORDER BY s.shard",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(ShardRow {
                shard: r.try_get(0)?,
                owner: r.try_get(1)?,
                epoch: r.try_get(2)?,
                records: r.try_get(3)?,
            })
        })
        .collect()
}

/// Every group's config overrides.
pub async fn group_configs(db: &Db) -> Result<BTreeMap<String, BTreeMap<String, String>>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query("SELECT group_id, configs FROM group_configs", &[])
        .await?;
    rows.iter()
        .map(|r| {
            let configs = serde_json::from_value(r.try_get(1)?)
                .map_err(|e| DbError::Corrupt(format!("group_configs.configs: {e}")))?;
            Ok((r.try_get(0)?, configs))
        })
        .collect()
}

/// Replaces a group's config overrides (empty: removes them), and announces the change.
pub async fn set_group_configs(
    db: &Db,
    reg: Registration,
    group_id: &str,
    configs: &BTreeMap<String, String>,
) -> Result<(), DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    membership::check_current(&tx, reg).await?;
    if configs.is_empty() {
        tx.execute(
            "DELETE FROM group_configs WHERE group_id = $1",
            &[&group_id],
        )
        .await?;
    } else {
        let json = serde_json::to_value(configs)
            .map_err(|e| DbError::Corrupt(format!("group configs: {e}")))?;
        tx.execute(
            "INSERT INTO group_configs (group_id, configs) VALUES ($1, $2)
             ON CONFLICT (group_id) DO UPDATE SET configs = EXCLUDED.configs",
            &[&group_id, &json],
        )
        .await?;
    }
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&METADATA_CHANNEL, &format!("group:{group_id}")],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shards Kafka computes for these IDs (`Utils.abs("...".hashCode()) % 50`).
    #[test]
    fn shards_follow_kafka() {
        // "group".hashCode() = 98629247 -> 47; "".hashCode() = 0.
        assert_eq!(shard_of("group"), 98_629_247 % 50);
        assert_eq!(shard_of(""), 0);
        // A negative hash takes its absolute value: "polygenelubricants".hashCode() = i32::MIN.
        assert_eq!(shard_of("polygenelubricants"), 0);
        // Outside the BMP, Java hashes UTF-16 code units.
        let surrogates = "\u{1F600}"
            .encode_utf16()
            .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)));
        assert_eq!(shard_of("\u{1F600}"), surrogates.abs() % 50);
        for i in 0..1000 {
            assert!((0..SHARDS).contains(&shard_of(&format!("g-{i}"))));
        }
    }
}
