//! The cluster's schema in PostgreSQL, as numbered migrations applied in order at start.
//!
//! [`migrate`] runs in one transaction holding a transaction-level advisory lock: two brokers
//! starting at once apply each migration once (the second waits, then finds nothing to do), and a
//! migration that fails leaves the schema as it was. A database whose schema is newer than this
//! broker knows is refused rather than written to.

use crate::db::{Db, DbError};

/// The advisory lock key of schema migrations ("skiffsch" in ASCII).
const MIGRATION_LOCK: i64 = 0x736b_6966_6673_6368;

/// One schema change.
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, oldest first. Append only: a released migration never changes.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "brokers, topics, logs, objects, batches, producers",
        sql: r#"
CREATE TABLE brokers (
    node_id INT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    host TEXT NOT NULL,
    port INT NOT NULL,
    rack TEXT,
    -- Every listener's advertised address: {"NAME": "host:port"}.
    listeners JSONB NOT NULL DEFAULT '{}',
    lease_until TIMESTAMPTZ NOT NULL,
    registered_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE SEQUENCE broker_epochs;

CREATE TABLE topics (
    topic_id UUID PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    partitions INT NOT NULL CHECK (partitions > 0),
    configs JSONB NOT NULL DEFAULT '{}',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE logs (
    topic_id UUID NOT NULL,
    partition INT NOT NULL CHECK (partition >= 0),
    log_start BIGINT NOT NULL DEFAULT 0 CHECK (log_start >= 0),
    high_watermark BIGINT NOT NULL DEFAULT 0 CHECK (high_watermark >= log_start),
    size_bytes BIGINT NOT NULL DEFAULT 0 CHECK (size_bytes >= 0),
    PRIMARY KEY (topic_id, partition)
);

CREATE TABLE objects (
    object_id BIGSERIAL PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    node_id INT NOT NULL,
    broker_epoch BIGINT NOT NULL,
    size_bytes BIGINT NOT NULL CHECK (size_bytes >= 0),
    used_bytes BIGINT NOT NULL CHECK (used_bytes >= 0),
    committed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- When the last batch referring to it went: the object is deleted a grace period later.
    unused_since TIMESTAMPTZ
);
CREATE INDEX objects_unused ON objects (unused_since) WHERE unused_since IS NOT NULL;

CREATE TABLE batches (
    topic_id UUID NOT NULL,
    partition INT NOT NULL,
    base_offset BIGINT NOT NULL,
    last_offset BIGINT NOT NULL CHECK (last_offset >= base_offset),
    object_id BIGINT NOT NULL REFERENCES objects (object_id),
    byte_offset BIGINT NOT NULL CHECK (byte_offset >= 0),
    byte_size INT NOT NULL CHECK (byte_size > 0),
    max_timestamp BIGINT NOT NULL,
    log_append_time BIGINT NOT NULL,
    producer_id BIGINT NOT NULL,
    producer_epoch SMALLINT NOT NULL,
    base_sequence INT NOT NULL,
    last_sequence INT NOT NULL,
    PRIMARY KEY (topic_id, partition, base_offset)
);
CREATE INDEX batches_by_last_offset ON batches (topic_id, partition, last_offset);
CREATE INDEX batches_by_object ON batches (object_id);

CREATE TABLE producers (
    topic_id UUID NOT NULL,
    partition INT NOT NULL,
    producer_id BIGINT NOT NULL,
    epoch SMALLINT NOT NULL,
    recent JSONB NOT NULL,
    last_append_ms BIGINT NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id)
);

CREATE TABLE cluster (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    cluster_id TEXT NOT NULL
);

CREATE TABLE producer_id_blocks (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    next_id BIGINT NOT NULL CHECK (next_id >= 0)
);
INSERT INTO producer_id_blocks (next_id) VALUES (0);
"#,
    },
    Migration {
        version: 2,
        name: "coordinator shards, their records, group configs, shared documents, instance owners, client summaries",
        sql: r#"
CREATE TABLE coordinator_shards (
    shard INT PRIMARY KEY CHECK (shard >= 0),
    -- The owning broker's registration (node ID and broker epoch); NULL when released.
    owner INT,
    owner_epoch BIGINT,
    -- The shard's epoch: grows at every claim, the fencing token of every write.
    epoch BIGINT NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    claimed_at TIMESTAMPTZ
);
INSERT INTO coordinator_shards (shard) SELECT generate_series(0, 49);

CREATE TABLE coordinator_records (
    shard INT NOT NULL REFERENCES coordinator_shards (shard),
    key BYTEA NOT NULL,
    value BYTEA NOT NULL,
    PRIMARY KEY (shard, key)
);

CREATE TABLE group_configs (
    group_id TEXT PRIMARY KEY,
    configs JSONB NOT NULL
);

-- Whole documents every broker mirrors: the ACLs, SCRAM credentials, CLIENT_METRICS
-- subscriptions; each change bumps the version.
CREATE TABLE cluster_documents (
    name TEXT PRIMARY KEY,
    body BYTEA NOT NULL,
    version BIGINT NOT NULL CHECK (version > 0),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Which principal owns a client instance ID (client.instance.id.binding), held while any
-- broker has a connection of it open (renewed) and for the binding's hold after.
CREATE TABLE instance_owners (
    instance_id UUID PRIMARY KEY,
    principal TEXT NOT NULL,
    held_until TIMESTAMPTZ NOT NULL
);

-- Each live broker's summary of its client instances (the cluster-wide client view).
CREATE TABLE client_summaries (
    node_id INT PRIMARY KEY,
    broker_epoch BIGINT NOT NULL,
    body JSONB NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
"#,
    },
    Migration {
        version: 3,
        name: "transactions: open and aborted transactions, last stable offsets, transactional offsets",
        sql: r#"
-- The last stable offset: the first offset of the partition's earliest open transaction (at
-- least the log start), or the high watermark when none is open.
ALTER TABLE logs ADD COLUMN last_stable BIGINT;
UPDATE logs SET last_stable = high_watermark;
ALTER TABLE logs
    ALTER COLUMN last_stable SET NOT NULL,
    ALTER COLUMN last_stable SET DEFAULT 0,
    ADD CONSTRAINT logs_last_stable_in_log
        CHECK (last_stable >= log_start AND last_stable <= high_watermark);

-- Each producer's open transaction on a partition, from its first batch there.
CREATE TABLE open_transactions (
    topic_id UUID NOT NULL,
    partition INT NOT NULL,
    producer_id BIGINT NOT NULL,
    producer_epoch SMALLINT NOT NULL,
    first_offset BIGINT NOT NULL,
    opened_ms BIGINT NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id)
);
CREATE INDEX open_transactions_by_age ON open_transactions (opened_ms);

-- Aborted transactions' ranges, from the first batch to the abort marker (last_offset).
CREATE TABLE aborted_transactions (
    topic_id UUID NOT NULL,
    partition INT NOT NULL,
    producer_id BIGINT NOT NULL,
    first_offset BIGINT NOT NULL,
    last_offset BIGINT NOT NULL CHECK (last_offset >= first_offset),
    PRIMARY KEY (topic_id, partition, last_offset)
);

-- Offsets committed inside a transaction (TxnOffsetCommit): staged until the transaction ends;
-- committed = true once it committed, until the group's coordinator has applied them.
CREATE TABLE txn_offsets (
    group_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INT NOT NULL,
    producer_id BIGINT NOT NULL,
    producer_epoch SMALLINT NOT NULL,
    committed_offset BIGINT NOT NULL,
    leader_epoch INT NOT NULL,
    metadata TEXT NULL,
    commit_ms BIGINT NOT NULL,
    committed BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (group_id, topic, partition, producer_id)
);
"#,
    },
    Migration {
        version: 4,
        name: "share partitions: the state of each share group on each partition, snapshot and deltas",
        sql: r#"
-- KIP-932 share-partition state, owned by the broker that leads the partition: a claim bumps
-- the epoch (the fencing token of every write) and reads the snapshot and the deltas since.
CREATE TABLE share_partitions (
    group_id TEXT NOT NULL,
    topic_id UUID NOT NULL,
    partition INT NOT NULL CHECK (partition >= 0),
    owner INT,
    epoch BIGINT NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    snapshot BYTEA NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition)
);

CREATE TABLE share_partition_deltas (
    group_id TEXT NOT NULL,
    topic_id UUID NOT NULL,
    partition INT NOT NULL,
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    delta BYTEA NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition, seq),
    FOREIGN KEY (group_id, topic_id, partition)
        REFERENCES share_partitions (group_id, topic_id, partition) ON DELETE CASCADE
);
"#,
    },
];

/// The newest schema version this broker knows.
pub fn current_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Applies the migrations the database lacks; returns the schema version before and after.
pub async fn migrate(db: &Db) -> Result<(i32, i32), DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS skiff_schema (
            version INT PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .await?;
    let before: i32 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM skiff_schema", &[])
        .await?
        .try_get(0)?;
    if before > current_version() {
        return Err(DbError::Config(format!(
            "the cluster's schema is version {before}, newer than this broker's {}: upgrade the broker",
            current_version()
        )));
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > before) {
        tx.batch_execute(m.sql).await?;
        tx.execute(
            "INSERT INTO skiff_schema (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .await?;
        tracing::info!(
            version = m.version,
            name = m.name,
            "cluster schema migrated"
        );
    }
    tx.commit().await?;
    Ok((before, current_version()))
}

/// The cluster's ID: `candidate` if this is the first broker to ask, else the one stored.
pub async fn cluster_id(db: &Db, candidate: &str) -> Result<String, DbError> {
    let client = db.client().await?;
    client
        .execute(
            "INSERT INTO cluster (cluster_id) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&candidate],
        )
        .await?;
    Ok(client
        .query_one("SELECT cluster_id FROM cluster", &[])
        .await?
        .try_get(0)?)
}

/// The schema version of the database (0 when none was applied).
pub async fn version(db: &Db) -> Result<i32, DbError> {
    let client = db.client().await?;
    let exists: bool = client
        .query_one("SELECT to_regclass('skiff_schema') IS NOT NULL", &[])
        .await?
        .try_get(0)?;
    if !exists {
        return Ok(0);
    }
    Ok(client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM skiff_schema", &[])
        .await?
        .try_get(0)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_dense_and_increasing() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i32 + 1, "{}", m.name);
        }
    }
}
