//! Brokers in PostgreSQL: registration with a lease and an epoch, renewal, the live set.
//!
//! Each registration takes a new epoch from a sequence, so epochs only grow. A broker renews its
//! lease every few seconds; once the lease lapsed (the broker was paused, or cut off from
//! PostgreSQL) its renewal is refused and so is every write that carries its epoch (see
//! [`check_current`]): it must register again, with a new epoch, before it writes anything.
//! Times are PostgreSQL's (`now()`), so brokers' clocks do not matter.

use std::collections::BTreeMap;

use crate::db::{Db, DbError};

/// A broker's current registration: what every write it makes carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    pub node_id: i32,
    pub epoch: i64,
}

/// A live broker, as Metadata and DescribeCluster list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub epoch: i64,
    /// The address of its first listener.
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Every listener's advertised address, by listener name.
    pub listeners: BTreeMap<String, (String, i32)>,
}

impl BrokerInfo {
    /// The address clients of listener `name` use (the first listener's when it has none).
    pub fn address(&self, name: &str) -> (&str, i32) {
        match self.listeners.get(name) {
            Some((host, port)) => (host, *port),
            None => (&self.host, self.port),
        }
    }
}

/// Where a broker is reached: its first listener's address, and every listener's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub host: String,
    pub port: i32,
    pub listeners: BTreeMap<String, (String, i32)>,
}

fn listeners_json(listeners: &BTreeMap<String, (String, i32)>) -> serde_json::Value {
    serde_json::Value::Object(
        listeners
            .iter()
            .map(|(name, (host, port))| {
                (
                    name.clone(),
                    serde_json::Value::String(format!("{host}:{port}")),
                )
            })
            .collect(),
    )
}

fn listeners_of(value: &serde_json::Value) -> BTreeMap<String, (String, i32)> {
    let mut out = BTreeMap::new();
    if let Some(map) = value.as_object() {
        for (name, v) in map {
            let Some((host, port)) = v.as_str().and_then(|a| a.rsplit_once(':')) else {
                continue;
            };
            if let Ok(port) = port.parse() {
                out.insert(name.clone(), (host.to_string(), port));
            }
        }
    }
    out
}

/// Registers this broker (or registers it again after a restart or a lapsed lease) with a new
/// epoch and a lease of `lease_ms`. Refused when another live broker, at another address, holds
/// `node_id`: two brokers must not share one.
pub async fn register(
    db: &Db,
    node_id: i32,
    endpoints: &Endpoints,
    rack: Option<&str>,
    lease_ms: i64,
) -> Result<Registration, DbError> {
    let (host, port) = (endpoints.host.as_str(), endpoints.port);
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    let holder = tx
        .query_opt(
            "SELECT host, port FROM brokers WHERE node_id = $1 AND lease_until > now() FOR UPDATE",
            &[&node_id],
        )
        .await?;
    if let Some(row) = holder {
        let (h, p): (String, i32) = (row.try_get(0)?, row.try_get(1)?);
        if h != host || p != port {
            return Err(DbError::Config(format!(
                "node.id {node_id} is held by the live broker at {h}:{p}: give each broker its own node.id"
            )));
        }
    }
    let epoch: i64 = tx
        .query_one(
            "INSERT INTO brokers (node_id, epoch, host, port, rack, listeners, lease_until)
             VALUES ($1, nextval('broker_epochs'), $2, $3, $4, $6,
                now() + $5 * interval '1 millisecond')
             ON CONFLICT (node_id) DO UPDATE SET
                epoch = EXCLUDED.epoch, host = EXCLUDED.host, port = EXCLUDED.port,
                rack = EXCLUDED.rack, listeners = EXCLUDED.listeners,
                lease_until = EXCLUDED.lease_until, registered_at = now()
             RETURNING epoch",
            &[
                &node_id,
                &host,
                &port,
                &rack,
                &(lease_ms as f64),
                &listeners_json(&endpoints.listeners),
            ],
        )
        .await?
        .try_get(0)?;
    tx.execute(
        "SELECT pg_notify('skiff_brokers', $1)",
        &[&node_id.to_string()],
    )
    .await?;
    tx.commit().await?;
    Ok(Registration { node_id, epoch })
}

/// Extends the lease by `lease_ms` from now; [`DbError::Fenced`] once it had lapsed or a newer
/// epoch took the node ID.
pub async fn renew(db: &Db, reg: Registration, lease_ms: i64) -> Result<(), DbError> {
    let client = db.client().await?;
    let n = client
        .execute(
            "UPDATE brokers SET lease_until = now() + $3 * interval '1 millisecond'
             WHERE node_id = $1 AND epoch = $2 AND lease_until > now()",
            &[&reg.node_id, &reg.epoch, &(lease_ms as f64)],
        )
        .await?;
    if n == 1 {
        Ok(())
    } else {
        Err(DbError::Fenced {
            node_id: reg.node_id,
            epoch: reg.epoch,
        })
    }
}

/// Ends this registration (a clean shutdown): the broker's partitions move at once.
pub async fn deregister(db: &Db, reg: Registration) -> Result<(), DbError> {
    let client = db.client().await?;
    client
        .execute(
            "DELETE FROM brokers WHERE node_id = $1 AND epoch = $2",
            &[&reg.node_id, &reg.epoch],
        )
        .await?;
    client
        .execute(
            "SELECT pg_notify('skiff_brokers', $1)",
            &[&reg.node_id.to_string()],
        )
        .await?;
    Ok(())
}

/// The brokers whose lease has not lapsed, by node ID.
pub async fn live_brokers(db: &Db) -> Result<Vec<BrokerInfo>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT node_id, epoch, host, port, rack, listeners FROM brokers
             WHERE lease_until > now() ORDER BY node_id",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(BrokerInfo {
                node_id: r.try_get(0)?,
                epoch: r.try_get(1)?,
                host: r.try_get(2)?,
                port: r.try_get(3)?,
                rack: r.try_get(4)?,
                listeners: listeners_of(&r.try_get(5)?),
            })
        })
        .collect()
}

/// Inside a writing transaction: the registration is still current (same epoch, lease not
/// lapsed). The row stays share-locked until the transaction ends, so no new registration of
/// this node ID can slip in between.
pub async fn check_current(
    tx: &tokio_postgres::Transaction<'_>,
    reg: Registration,
) -> Result<(), DbError> {
    let row = tx
        .query_opt(
            "SELECT 1 FROM brokers WHERE node_id = $1 AND epoch = $2 AND lease_until > now() FOR SHARE",
            &[&reg.node_id, &reg.epoch],
        )
        .await?;
    match row {
        Some(_) => Ok(()),
        None => Err(DbError::Fenced {
            node_id: reg.node_id,
            epoch: reg.epoch,
        }),
    }
}
