//! Documents every broker mirrors in cluster mode: the ACLs, the SCRAM credentials, the
//! CLIENT_METRICS subscriptions and the client quotas, kept whole in PostgreSQL (`skiff_cluster::documents`) in the
//! same encoding a single node keeps in its data directory.
//!
//! A change is made through [`SharedDocuments::update`] (a read-modify-write under the
//! document's row lock, from synchronous handler code) and is then this broker's state; every
//! broker reloads a document whose version moved ([`sync`], on NOTIFY and on the one-second
//! poll, and once before the broker serves).

use std::collections::BTreeMap;

use anyhow::{Result, anyhow};
use skiff_cluster::DbError;

use super::{Cluster, Host};

pub const ACLS: &str = "acls";
pub const CREDENTIALS: &str = "scram-credentials";
pub const CLIENT_METRICS: &str = "client-metrics";
pub const CLIENT_QUOTAS: &str = "client-quotas";

/// A change of a document: its current bytes (`None`: never written) to its new bytes.
pub type Change<'a> = dyn FnMut(Option<&[u8]>) -> Result<Vec<u8>> + 'a;

/// Where shared documents are changed: what the security state and the telemetry handler write
/// through in cluster mode.
pub trait SharedDocuments: Send + Sync {
    /// Runs `change` on the document's current bytes (`None`: never written) under its lock
    /// and stores what it returns; an error from `change` stores nothing.
    fn update(&self, name: &str, change: &mut Change<'_>) -> Result<()>;
}

impl SharedDocuments for Cluster {
    fn update(&self, name: &str, change: &mut Change<'_>) -> Result<()> {
        let reg = self
            .registration()
            .ok_or_else(|| anyhow!("this broker is not registered in the cluster right now"))?;
        // Callers hold the document's local lock: PostgreSQL is waited for on the side thread.
        let version = self
            .sync_db
            .block_on(skiff_cluster::documents::update(
                self.sync_db.db(),
                reg,
                name,
                change,
            ))
            .map_err(|e| anyhow!("{e}"))??;
        self.seen_document(name, version);
        Ok(())
    }
}

impl Cluster {
    fn seen_document(&self, name: &str, version: i64) {
        let mut seen = self
            .documents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = seen.entry(name.to_string()).or_insert(0);
        *known = (*known).max(version);
    }
}

/// Reloads every document whose version moved since this broker last read it.
pub async fn sync(host: &dyn Host, cluster: &Cluster) -> Result<(), DbError> {
    let versions = skiff_cluster::documents::versions(&cluster.db).await?;
    let stale: Vec<String> = {
        let seen = cluster
            .documents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        versions
            .iter()
            .filter(|(name, version)| seen.get(*name).is_none_or(|s| s < version))
            .map(|(name, _)| name.clone())
            .collect()
    };
    for name in stale {
        if let Some((body, version)) = skiff_cluster::documents::read(&cluster.db, &name).await? {
            if !body.is_empty() {
                host.mirror_document(&name, &body);
            }
            cluster.seen_document(&name, version);
        }
    }
    Ok(())
}

/// The versions last read, by document (for `Cluster`).
pub type Seen = std::sync::Mutex<BTreeMap<String, i64>>;
