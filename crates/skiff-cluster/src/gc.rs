//! Collecting objects: those no batch refers to any more (after their grace period, for readers
//! in flight), and those uploaded but never committed (a broker died between the upload and the
//! commit, or the commit failed), which PostgreSQL does not know at all.

use crate::db::{Db, DbError};
use crate::log;
use crate::objects::{Objects, ObjectsError};

/// A collection failure.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Objects(#[from] ObjectsError),
}

/// Deletes objects no batch has referred to for `grace_ms`, then forgets their rows; returns
/// how many went. An object the store fails to delete keeps its row (tried again next time).
pub async fn delete_unused(db: &Db, objects: &Objects, grace_ms: i64) -> Result<usize, GcError> {
    let unused = log::unused_objects(db, grace_ms, 1000).await?;
    let mut deleted = Vec::new();
    for (id, key) in unused {
        match objects.delete(&key).await {
            Ok(()) => deleted.push(id),
            Err(e) => tracing::warn!(object = %key, error = %e, "deleting an object failed"),
        }
    }
    if deleted.is_empty() {
        return Ok(0);
    }
    Ok(log::forget_objects(db, &deleted).await? as usize)
}

/// Deletes the objects under the cluster's prefix last written before `cutoff_ms` that
/// PostgreSQL does not know; returns how many went. `cutoff_ms` must leave uploads in flight
/// alone: a commit lands within moments of its upload, so an hour's or a grace period's margin
/// is plenty.
pub async fn sweep_uncommitted(
    db: &Db,
    objects: &Objects,
    cutoff_ms: i64,
) -> Result<usize, GcError> {
    let old: Vec<String> = objects
        .list()
        .await?
        .into_iter()
        .filter(|o| o.last_modified_ms < cutoff_ms)
        .map(|o| o.key)
        .collect();
    let mut removed = 0;
    for chunk in old.chunks(500) {
        let known = log::known_objects(db, chunk).await?;
        for key in chunk.iter().filter(|k| !known.contains(*k)) {
            objects.delete(key).await?;
            tracing::info!(object = %key, "removed an object that was never committed");
            removed += 1;
        }
    }
    Ok(removed)
}
