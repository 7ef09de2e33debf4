//! Small crash-safe files in the data directory: the cluster ID, the leader epoch.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use skiff_protocol::Uuid;

const CLUSTER_ID_FILE: &str = "cluster.id";
const LEADER_EPOCH_FILE: &str = "leader.epoch";

/// The leader epoch of this start: one above the last start's (0 the first time), written
/// before anything is served so that no two starts share an epoch.
pub fn next_leader_epoch(data_dir: &Path) -> Result<i32> {
    let path = data_dir.join(LEADER_EPOCH_FILE);
    let last = match fs::read_to_string(&path) {
        Ok(text) => Some(
            text.trim()
                .parse::<i32>()
                .ok()
                .filter(|e| *e >= 0)
                .with_context(|| format!("{} does not hold a leader epoch", path.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let next = match last {
        Some(e) => e
            .checked_add(1)
            .with_context(|| format!("{} is at the last leader epoch", path.display()))?,
        None => 0,
    };
    write_atomically(&path, format!("{next}\n").as_bytes())?;
    Ok(next)
}

/// Writes `contents` to `path` so that a crash leaves either the old or the new file: write a
/// temporary file, fsync it, rename it over the target, fsync the directory.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .with_context(|| format!("{} has no parent directory", path.display()))?;
    let tmp = path.with_extension("tmp");
    {
        let mut file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        file.write_all(contents)
            .with_context(|| format!("writing {}", tmp.display()))?;
        file.sync_all()
            .with_context(|| format!("syncing {}", tmp.display()))?;
    }
    fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing directory {}", dir.display()))?;
    Ok(())
}

/// The cluster ID of this data directory, created (random, Kafka text form) on first start.
/// A fresh cluster ID (Kafka's 22-character form of a random UUID).
pub fn new_cluster_id() -> String {
    Uuid::random().unwrap_or(Uuid::ONE).to_string()
}

pub fn load_or_create_cluster_id(data_dir: &Path) -> Result<String> {
    let path = data_dir.join(CLUSTER_ID_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            if id.parse::<Uuid>().is_err() {
                bail!("{} does not hold a cluster ID: {id:?}", path.display());
            }
            Ok(id.to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = Uuid::random()?.to_string();
            write_atomically(&path, format!("{id}\n").as_bytes())?;
            Ok(id)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_id_is_created_once_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = load_or_create_cluster_id(dir.path()).expect("create");
        let second = load_or_create_cluster_id(dir.path()).expect("load");
        assert_eq!(first, second);
        assert_eq!(first.len(), 22);
        fs::write(dir.path().join(CLUSTER_ID_FILE), "garbage").expect("write");
        assert!(load_or_create_cluster_id(dir.path()).is_err());
    }
}
