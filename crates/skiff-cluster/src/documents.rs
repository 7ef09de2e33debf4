//! Documents every broker mirrors, kept whole in PostgreSQL: the ACLs, the SCRAM credentials and
//! the CLIENT_METRICS subscriptions (each the same bytes a single node keeps in its data
//! directory). A change is a read-modify-write under the document's row lock, so two brokers
//! changing the same document at once both land; each change bumps the version and is announced
//! on the metadata channel, and brokers reload what changed.
//!
//! Beside them, each live broker publishes a summary of its client instances, which any broker
//! merges into the cluster-wide client view, and the owners of client instance IDs are shared
//! (a claim holds while a broker renews it and for the hold after).

use std::collections::BTreeMap;

use crate::db::{Db, DbError};
use crate::membership::{self, Registration};
use crate::topics::METADATA_CHANNEL;

/// The NOTIFY payload prefix of a document change (`doc:NAME`).
pub const NOTIFY_PREFIX: &str = "doc:";

/// Every document's version.
pub async fn versions(db: &Db) -> Result<BTreeMap<String, i64>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query("SELECT name, version FROM cluster_documents", &[])
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// A document and its version (`None` when it was never written).
pub async fn read(db: &Db, name: &str) -> Result<Option<(Vec<u8>, i64)>, DbError> {
    let client = db.client().await?;
    let row = client
        .query_opt(
            "SELECT body, version FROM cluster_documents WHERE name = $1",
            &[&name],
        )
        .await?;
    row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
}

/// Changes a document: `change` gets its current bytes (`None` when never written) under the
/// row lock and returns the new bytes, or refuses (nothing is written). Returns the new version.
pub async fn update<E>(
    db: &Db,
    reg: Registration,
    name: &str,
    change: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, E>,
) -> Result<Result<i64, E>, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    membership::check_current(&tx, reg).await?;
    // The row exists (empty) before it is locked, so that concurrent first writes queue too.
    tx.execute(
        "INSERT INTO cluster_documents (name, body, version) VALUES ($1, '', 1)
         ON CONFLICT (name) DO NOTHING",
        &[&name],
    )
    .await?;
    let row = tx
        .query_one(
            "SELECT body, version FROM cluster_documents WHERE name = $1 FOR UPDATE",
            &[&name],
        )
        .await?;
    let body: Vec<u8> = row.try_get(0)?;
    let version: i64 = row.try_get(1)?;
    let current = (!body.is_empty()).then_some(body.as_slice());
    let new = match change(current) {
        Ok(new) => new,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let version = version + 1;
    tx.execute(
        "UPDATE cluster_documents SET body = $2, version = $3, updated_at = now() WHERE name = $1",
        &[&name, &new, &version],
    )
    .await?;
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&METADATA_CHANNEL, &format!("{NOTIFY_PREFIX}{name}")],
    )
    .await?;
    tx.commit().await?;
    Ok(Ok(version))
}

/// Publishes this broker's summary of its client instances (replacing its last one).
pub async fn publish_clients(
    db: &Db,
    reg: Registration,
    body: &serde_json::Value,
) -> Result<(), DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    membership::check_current(&tx, reg).await?;
    tx.execute(
        "INSERT INTO client_summaries (node_id, broker_epoch, body) VALUES ($1, $2, $3)
         ON CONFLICT (node_id) DO UPDATE
           SET broker_epoch = EXCLUDED.broker_epoch, body = EXCLUDED.body, updated_at = now()",
        &[&reg.node_id, &reg.epoch, body],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The live brokers' summaries of their client instances, by node ID.
pub async fn client_summaries(db: &Db) -> Result<BTreeMap<i32, serde_json::Value>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT c.node_id, c.body FROM client_summaries c
               JOIN brokers b ON b.node_id = c.node_id AND b.epoch = c.broker_epoch
              WHERE b.lease_until > now()
              ORDER BY c.node_id",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// Claims client instance ID `id` for `principal` until `hold_ms` from now, unless another
/// principal holds it: `None` when the claim holds, else the holder.
pub async fn claim_instance(
    db: &Db,
    id: uuid::Uuid,
    principal: &str,
    hold_ms: i64,
) -> Result<Option<String>, DbError> {
    let client = db.client().await?;
    let claimed = client
        .query_opt(
            "INSERT INTO instance_owners (instance_id, principal, held_until)
             VALUES ($1, $2, now() + $3 * interval '1 millisecond')
             ON CONFLICT (instance_id) DO UPDATE
               SET principal = EXCLUDED.principal,
                   held_until = GREATEST(instance_owners.held_until, EXCLUDED.held_until)
             WHERE instance_owners.principal = EXCLUDED.principal
                OR instance_owners.held_until < now()
             RETURNING principal",
            &[&id, &principal, &(hold_ms as f64)],
        )
        .await?;
    if claimed.is_some() {
        return Ok(None);
    }
    let holder = client
        .query_opt(
            "SELECT principal FROM instance_owners WHERE instance_id = $1",
            &[&id],
        )
        .await?;
    Ok(Some(match holder {
        Some(row) => row.try_get(0)?,
        None => String::new(),
    }))
}

/// Renews the claims of the instance IDs this broker has connections of (with their owners).
pub async fn hold_instances(
    db: &Db,
    held: &[(uuid::Uuid, String)],
    hold_ms: i64,
) -> Result<(), DbError> {
    if held.is_empty() {
        return Ok(());
    }
    let ids: Vec<uuid::Uuid> = held.iter().map(|(id, _)| *id).collect();
    let principals: Vec<&str> = held.iter().map(|(_, p)| p.as_str()).collect();
    let client = db.client().await?;
    client
        .execute(
            "UPDATE instance_owners o
                SET held_until = GREATEST(o.held_until, now() + $3 * interval '1 millisecond')
               FROM unnest($1::uuid[], $2::text[]) AS h(id, principal)
              WHERE o.instance_id = h.id AND o.principal = h.principal",
            &[&ids, &principals, &(hold_ms as f64)],
        )
        .await?;
    Ok(())
}
