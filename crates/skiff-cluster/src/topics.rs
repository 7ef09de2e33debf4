//! Topics in PostgreSQL (names, topic IDs, partition counts, config overrides) and producer ID
//! blocks. Every change is announced on [`METADATA_CHANNEL`] so that every broker reloads within
//! moments; the broker validates names and configs (Kafka's rules live in `skiff-meta`) before
//! it calls these.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::commit::PartitionKey;
use crate::db::{Db, DbError};
use crate::membership::{self, Registration};

/// The channel topic changes are announced on (the payload is the topic's name).
pub const METADATA_CHANNEL: &str = "skiff_metadata";

/// A topic as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRow {
    pub topic_id: Uuid,
    pub name: String,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
}

/// Why a topic change was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicRefusal {
    Exists,
    Unknown,
    /// CreatePartitions may only grow a topic.
    NotMore {
        current: i32,
    },
}

fn configs_of(v: serde_json::Value) -> Result<BTreeMap<String, String>, DbError> {
    serde_json::from_value(v).map_err(|e| DbError::Corrupt(format!("topics.configs: {e}")))
}

fn row(r: &tokio_postgres::Row) -> Result<TopicRow, DbError> {
    Ok(TopicRow {
        topic_id: r.try_get(0)?,
        name: r.try_get(1)?,
        partitions: r.try_get(2)?,
        configs: configs_of(r.try_get(3)?)?,
    })
}

/// Every topic, by name.
pub async fn list(db: &Db) -> Result<Vec<TopicRow>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT topic_id, name, partitions, configs FROM topics ORDER BY name",
            &[],
        )
        .await?;
    rows.iter().map(row).collect()
}

async fn notify(tx: &tokio_postgres::Transaction<'_>, name: &str) -> Result<(), DbError> {
    tx.execute("SELECT pg_notify($1, $2)", &[&METADATA_CHANNEL, &name])
        .await?;
    Ok(())
}

/// Creates a topic with `partitions` empty logs.
pub async fn create(
    db: &Db,
    reg: Registration,
    name: &str,
    topic_id: Uuid,
    partitions: i32,
    configs: &BTreeMap<String, String>,
) -> Result<Result<TopicRow, TopicRefusal>, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    membership::check_current(&tx, reg).await?;
    let configs_json = serde_json::to_value(configs)
        .map_err(|e| DbError::Corrupt(format!("topics.configs: {e}")))?;
    let inserted = tx
        .execute(
            "INSERT INTO topics (topic_id, name, partitions, configs) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING",
            &[&topic_id, &name, &partitions, &configs_json],
        )
        .await?;
    if inserted == 0 {
        return Ok(Err(TopicRefusal::Exists));
    }
    tx.execute(
        "INSERT INTO logs (topic_id, partition) SELECT $1, generate_series(0, $2 - 1)",
        &[&topic_id, &partitions],
    )
    .await?;
    notify(&tx, name).await?;
    tx.commit().await?;
    Ok(Ok(TopicRow {
        topic_id,
        name: name.to_string(),
        partitions,
        configs: configs.clone(),
    }))
}

/// Deletes a topic: its logs, batch rows, producer states and open and aborted transactions
/// go; the objects they used are released (deleted after the grace period when nothing else
/// refers to them).
pub async fn delete(
    db: &Db,
    reg: Registration,
    name: &str,
) -> Result<Result<Uuid, TopicRefusal>, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    membership::check_current(&tx, reg).await?;
    let Some(r) = tx
        .query_opt(
            "DELETE FROM topics WHERE name = $1 RETURNING topic_id",
            &[&name],
        )
        .await?
    else {
        return Ok(Err(TopicRefusal::Unknown));
    };
    let topic_id: Uuid = r.try_get(0)?;
    // Lock the logs first (in key order, as commits do), so no commit lands in between.
    tx.query(
        "SELECT 1 FROM logs WHERE topic_id = $1 ORDER BY partition FOR UPDATE",
        &[&topic_id],
    )
    .await?;
    tx.execute(
        "WITH gone AS (
            DELETE FROM batches WHERE topic_id = $1 RETURNING object_id, byte_size
         ), freed AS (
            SELECT object_id, SUM(byte_size)::bigint AS bytes FROM gone GROUP BY object_id
         )
         UPDATE objects o SET used_bytes = o.used_bytes - f.bytes,
            unused_since = CASE WHEN o.used_bytes - f.bytes = 0 THEN now() ELSE o.unused_since END
         FROM freed f WHERE o.object_id = f.object_id",
        &[&topic_id],
    )
    .await?;
    tx.execute("DELETE FROM producers WHERE topic_id = $1", &[&topic_id])
        .await?;
    tx.execute(
        "DELETE FROM open_transactions WHERE topic_id = $1",
        &[&topic_id],
    )
    .await?;
    tx.execute(
        "DELETE FROM aborted_transactions WHERE topic_id = $1",
        &[&topic_id],
    )
    .await?;
    tx.execute("DELETE FROM logs WHERE topic_id = $1", &[&topic_id])
        .await?;
    // The share groups' states on the topic (their deltas go with them).
    tx.execute(
        "DELETE FROM share_partitions WHERE topic_id = $1",
        &[&topic_id],
    )
    .await?;
    notify(&tx, name).await?;
    tx.commit().await?;
    Ok(Ok(topic_id))
}

/// Grows a topic to `total` partitions.
pub async fn add_partitions(
    db: &Db,
    reg: Registration,
    name: &str,
    total: i32,
) -> Result<Result<(), TopicRefusal>, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    membership::check_current(&tx, reg).await?;
    let Some(r) = tx
        .query_opt(
            "SELECT topic_id, partitions FROM topics WHERE name = $1 FOR UPDATE",
            &[&name],
        )
        .await?
    else {
        return Ok(Err(TopicRefusal::Unknown));
    };
    let (topic_id, current): (Uuid, i32) = (r.try_get(0)?, r.try_get(1)?);
    if total <= current {
        return Ok(Err(TopicRefusal::NotMore { current }));
    }
    tx.execute(
        "UPDATE topics SET partitions = $2 WHERE topic_id = $1",
        &[&topic_id, &total],
    )
    .await?;
    tx.execute(
        "INSERT INTO logs (topic_id, partition) SELECT $1, generate_series($2, $3 - 1)",
        &[&topic_id, &current, &total],
    )
    .await?;
    notify(&tx, name).await?;
    tx.commit().await?;
    Ok(Ok(()))
}

/// Replaces a topic's config overrides.
pub async fn set_configs(
    db: &Db,
    reg: Registration,
    name: &str,
    configs: &BTreeMap<String, String>,
) -> Result<Result<(), TopicRefusal>, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    membership::check_current(&tx, reg).await?;
    let configs_json = serde_json::to_value(configs)
        .map_err(|e| DbError::Corrupt(format!("topics.configs: {e}")))?;
    let n = tx
        .execute(
            "UPDATE topics SET configs = $2 WHERE name = $1",
            &[&name, &configs_json],
        )
        .await?;
    if n == 0 {
        return Ok(Err(TopicRefusal::Unknown));
    }
    notify(&tx, name).await?;
    tx.commit().await?;
    Ok(Ok(()))
}

/// Reserves `count` producer IDs for this broker; returns the first.
pub async fn allocate_producer_ids(db: &Db, reg: Registration, count: i64) -> Result<i64, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    membership::check_current(&tx, reg).await?;
    let first: i64 = tx
        .query_one(
            "UPDATE producer_id_blocks SET next_id = next_id + $1 RETURNING next_id - $1",
            &[&count.max(1)],
        )
        .await?
        .try_get(0)?;
    tx.commit().await?;
    Ok(first)
}

/// The key of partition `p` of a topic.
pub fn key(topic_id: Uuid, partition: i32) -> PartitionKey {
    PartitionKey {
        topic_id,
        partition,
    }
}
