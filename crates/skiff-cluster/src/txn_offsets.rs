//! Offsets committed inside a transaction (TxnOffsetCommit) while the group's coordinator and
//! the transaction's coordinator may be different brokers.
//!
//! The group's coordinator [`stage`]s the offsets (one row per group, partition and producer; a
//! later stage replaces an earlier one). When the transaction ends, its coordinator calls
//! [`end`]: a commit marks the producer's staged rows committed and announces each group on
//! [`TXN_OFFSETS_CHANNEL`]; an abort drops them. The group's coordinator then reads the
//! [`committed`] rows, applies them to the group, and [`forget`]s them. Until then
//! [`pending`] names the group's partitions with offsets in flight (OffsetFetch with
//! `require_stable`).
//!
//! A row is one per (group, topic, partition, producer): a stage never replaces a row committed
//! and not applied yet (it writes fewer rows, and the caller has the client retry).

use std::collections::{BTreeMap, BTreeSet};

use crate::db::{Db, DbError};

/// The channel a transaction's commit announces each group with committed offsets on (the
/// payload is the group ID; empty for an ID too long for a NOTIFY payload, meaning any group).
pub const TXN_OFFSETS_CHANNEL: &str = "skiff_txn_offsets";

/// One partition's offset, committed inside a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_ms: i64,
}

/// Stages a transaction's offsets for a group (not committed): replaces what the producer
/// staged for the same partitions, but never a row committed and not applied yet, nor one a
/// newer epoch of the producer staged (a zombie's offsets do not replace its successor's). When
/// `offsets` names a partition twice, the last one counts. Returns the number of rows written:
/// fewer than the partitions named means some wait to be applied (the caller answers
/// CONCURRENT_TRANSACTIONS, and the client retries).
pub async fn stage(
    db: &Db,
    group_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    offsets: &[TxnOffset],
) -> Result<u64, DbError> {
    // One row per partition: PostgreSQL refuses to upsert a row twice in one statement.
    let last: BTreeMap<(&str, i32), &TxnOffset> = offsets
        .iter()
        .map(|o| ((o.topic.as_str(), o.partition), o))
        .collect();
    if last.is_empty() {
        return Ok(0);
    }
    let mut topics = Vec::new();
    let mut partitions = Vec::new();
    let mut committed_offsets = Vec::new();
    let mut leader_epochs = Vec::new();
    let mut metadata = Vec::new();
    let mut commit_ms = Vec::new();
    for o in last.values() {
        topics.push(o.topic.as_str());
        partitions.push(o.partition);
        committed_offsets.push(o.offset);
        leader_epochs.push(o.leader_epoch);
        metadata.push(o.metadata.as_deref());
        commit_ms.push(o.commit_ms);
    }
    let client = db.client().await?;
    Ok(client
        .execute(
            "INSERT INTO txn_offsets (group_id, topic, partition, producer_id, producer_epoch,
                committed_offset, leader_epoch, metadata, commit_ms, committed)
             SELECT $1, t, p, $2, $3, o, le, m, ms, false FROM unnest($4::text[], $5::int[],
                $6::bigint[], $7::int[], $8::text[], $9::bigint[]) AS u(t, p, o, le, m, ms)
             ON CONFLICT (group_id, topic, partition, producer_id) DO UPDATE SET
                producer_epoch = EXCLUDED.producer_epoch,
                committed_offset = EXCLUDED.committed_offset,
                leader_epoch = EXCLUDED.leader_epoch, metadata = EXCLUDED.metadata,
                commit_ms = EXCLUDED.commit_ms, committed = false
             WHERE NOT txn_offsets.committed
                AND txn_offsets.producer_epoch <= EXCLUDED.producer_epoch",
            &[
                &group_id,
                &producer_id,
                &producer_epoch,
                &topics,
                &partitions,
                &committed_offsets,
                &leader_epochs,
                &metadata,
                &commit_ms,
            ],
        )
        .await?)
}

/// Ends a producer's transaction for the offsets it staged in `groups`: a commit marks them
/// committed and announces each group that had any on [`TXN_OFFSETS_CHANNEL`] (in the same
/// transaction); an abort drops them. Rows committed before (not applied yet) are left alone.
/// Returns the number of rows committed or dropped.
pub async fn end(
    db: &Db,
    producer_id: i64,
    groups: &[String],
    commit: bool,
) -> Result<u64, DbError> {
    if groups.is_empty() {
        return Ok(0);
    }
    let mut client = db.client().await?;
    if !commit {
        return Ok(client
            .execute(
                "DELETE FROM txn_offsets
                 WHERE producer_id = $1 AND group_id = ANY($2) AND NOT committed",
                &[&producer_id, &groups],
            )
            .await?);
    }
    let tx = client.transaction().await?;
    let rows = tx
        .query(
            "WITH done AS (
                UPDATE txn_offsets SET committed = true
                WHERE producer_id = $1 AND group_id = ANY($2) AND NOT committed
                RETURNING group_id
             )
             SELECT group_id, COUNT(*) FROM done GROUP BY group_id ORDER BY group_id",
            &[&producer_id, &groups],
        )
        .await?;
    let mut total = 0u64;
    for r in &rows {
        let group: String = r.try_get(0)?;
        let n: i64 = r.try_get(1)?;
        total += u64::try_from(n).map_err(|_| DbError::Corrupt(format!("row count {n}")))?;
        tx.execute(
            "SELECT pg_notify($1, CASE WHEN octet_length($2) < 8000 THEN $2 ELSE '' END)",
            &[&TXN_OFFSETS_CHANNEL, &group],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(total)
}

/// The committed offsets not applied yet, of every group, as (group, producer ID, offset): by
/// group, then oldest `commit_ms` first (applied in this order, a later commit of the same
/// partition wins). The broker applies those of the groups it coordinates.
pub async fn committed(db: &Db) -> Result<Vec<(String, i64, TxnOffset)>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT group_id, producer_id, topic, partition, committed_offset, leader_epoch,
                metadata, commit_ms
             FROM txn_offsets WHERE committed
             ORDER BY group_id, commit_ms, producer_id, topic, partition",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get(0)?,
                r.try_get(1)?,
                TxnOffset {
                    topic: r.try_get(2)?,
                    partition: r.try_get(3)?,
                    offset: r.try_get(4)?,
                    leader_epoch: r.try_get(5)?,
                    metadata: r.try_get(6)?,
                    commit_ms: r.try_get(7)?,
                },
            ))
        })
        .collect()
}

/// Drops committed rows once applied, by (group, producer ID, topic, partition); rows staged
/// again since (not committed) stay. Returns the number of rows dropped.
pub async fn forget(db: &Db, applied: &[(String, i64, String, i32)]) -> Result<u64, DbError> {
    if applied.is_empty() {
        return Ok(0);
    }
    let mut groups = Vec::new();
    let mut producers = Vec::new();
    let mut topics = Vec::new();
    let mut partitions = Vec::new();
    for (g, pid, t, p) in applied {
        groups.push(g.as_str());
        producers.push(*pid);
        topics.push(t.as_str());
        partitions.push(*p);
    }
    let client = db.client().await?;
    Ok(client
        .execute(
            "DELETE FROM txn_offsets WHERE committed
                AND (group_id, producer_id, topic, partition) IN
                    (SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::int[]))",
            &[&groups, &producers, &topics, &partitions],
        )
        .await?)
}

/// The partitions of a group with transactional offsets in flight (staged, or committed and
/// not applied yet): OffsetFetch with `require_stable` waits for them.
pub async fn pending(db: &Db, group_id: &str) -> Result<BTreeSet<(String, i32)>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT DISTINCT topic, partition FROM txn_offsets WHERE group_id = $1",
            &[&group_id],
        )
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// Drops every row of a group (DeleteGroups). Returns the number of rows dropped.
pub async fn forget_group(db: &Db, group_id: &str) -> Result<u64, DbError> {
    let client = db.client().await?;
    Ok(client
        .execute("DELETE FROM txn_offsets WHERE group_id = $1", &[&group_id])
        .await?)
}
