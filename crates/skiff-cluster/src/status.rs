//! What `skiff cluster status` shows: the schema, the cluster ID, the live brokers, who owns the
//! coordinator shards, and the size of what PostgreSQL and the object store hold.

use crate::db::{Db, DbError};
use crate::membership::{self, BrokerInfo};

/// A cluster's state as PostgreSQL has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub schema_version: i32,
    pub cluster_id: Option<String>,
    pub brokers: Vec<BrokerInfo>,
    pub topics: i64,
    pub partitions: i64,
    pub batches: i64,
    /// Bytes of the batches the logs hold (from their log starts).
    pub log_bytes: i64,
    pub objects: i64,
    pub object_bytes: i64,
    /// Objects no batch refers to, waiting for their grace period.
    pub unused_objects: i64,
    /// Coordinator shards owned, by node ID (shards no broker owns under `None`).
    pub shards: Vec<(Option<i32>, i64)>,
}

/// Reads the status; a database without Skiff's schema has version 0 and nothing else.
pub async fn status(db: &Db) -> Result<Status, DbError> {
    let schema_version = crate::schema::version(db).await?;
    if schema_version == 0 {
        return Ok(Status {
            schema_version,
            cluster_id: None,
            brokers: Vec::new(),
            topics: 0,
            partitions: 0,
            batches: 0,
            log_bytes: 0,
            objects: 0,
            object_bytes: 0,
            unused_objects: 0,
            shards: Vec::new(),
        });
    }
    let brokers = membership::live_brokers(db).await?;
    let client = db.client().await?;
    let cluster_id = client
        .query_opt("SELECT cluster_id FROM cluster", &[])
        .await?
        .map(|r| r.try_get(0))
        .transpose()?;
    let row = client
        .query_one(
            "SELECT (SELECT COUNT(*) FROM topics), (SELECT COUNT(*) FROM logs),
                (SELECT COUNT(*) FROM batches), (SELECT COALESCE(SUM(size_bytes), 0)::bigint FROM logs),
                (SELECT COUNT(*) FROM objects), (SELECT COALESCE(SUM(size_bytes), 0)::bigint FROM objects),
                (SELECT COUNT(*) FROM objects WHERE used_bytes = 0)",
            &[],
        )
        .await?;
    let shards = if schema_version >= 2 {
        client
            .query(
                "SELECT owner, COUNT(*) FROM coordinator_shards GROUP BY owner ORDER BY owner",
                &[],
            )
            .await?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<Vec<_>, DbError>>()?
    } else {
        Vec::new()
    };
    Ok(Status {
        schema_version,
        shards,
        cluster_id,
        brokers,
        topics: row.try_get(0)?,
        partitions: row.try_get(1)?,
        batches: row.try_get(2)?,
        log_bytes: row.try_get(3)?,
        objects: row.try_get(4)?,
        object_bytes: row.try_get(5)?,
        unused_objects: row.try_get(6)?,
    })
}
