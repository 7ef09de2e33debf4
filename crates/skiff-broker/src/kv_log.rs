//! A compacted key-value log on a `skiff-log` partition: the broker's internal store for group
//! state and committed offsets (what Kafka keeps in `__consumer_offsets`).
//!
//! Each change is a record (key, value) in a record batch; a null value deletes the key. On open
//! the whole log is replayed, the last value of each key winning. When the log has grown to
//! several times its live size it is rewritten: the live records go to a fresh log in a
//! temporary directory, which then replaces the old one by rename.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Context, Result};
use bytes::Bytes;
use skiff_log::{FlushPolicy, GroupCommitter, LogConfig, PartitionLog};
use skiff_records::{RecordBatchBuilder, RecordBatches};

/// Rewrite when the log holds this many times more bytes than the live records (and at least
/// `COMPACT_MIN_BYTES`).
const COMPACT_RATIO: u64 = 4;
const COMPACT_MIN_BYTES: u64 = 16 * 1024 * 1024;
/// Replay reads this much at a time.
const REPLAY_CHUNK: usize = 1024 * 1024;

/// The live key-value pairs and the log they are stored in.
pub struct KvLog {
    dir: PathBuf,
    config: LogConfig,
    log: Arc<Mutex<PartitionLog>>,
    committer: Option<Arc<GroupCommitter>>,
    live_bytes: u64,
    live: BTreeMap<Bytes, usize>,
}

impl KvLog {
    /// Opens (creating if needed) the log in `dir` and returns it with every live pair.
    /// Must run inside a tokio runtime when `flush` is `Always` (the group committer is a task).
    pub fn open(dir: &Path, flush: FlushPolicy) -> Result<(KvLog, BTreeMap<Bytes, Bytes>)> {
        let config = LogConfig {
            segment_bytes: 64 * 1024 * 1024,
            segment_ms: None,
            retention_ms: None,
            retention_bytes: None,
            flush,
            ..LogConfig::default()
        };
        // A crash during compaction may leave the fresh copy behind; the old log is still whole.
        let staging = staging_dir(dir);
        if staging.exists() {
            std::fs::remove_dir_all(&staging)
                .with_context(|| format!("removing {}", staging.display()))?;
        }
        let log = PartitionLog::open(dir, config.clone())
            .with_context(|| format!("opening {}", dir.display()))?;
        let pairs = replay(&log)?;
        let live: BTreeMap<Bytes, usize> = pairs
            .iter()
            .map(|(k, v)| (k.clone(), k.len() + v.len()))
            .collect();
        let live_bytes = live.values().map(|n| *n as u64).sum();
        let log = Arc::new(Mutex::new(log));
        let committer = (flush == FlushPolicy::Always)
            .then(|| Arc::new(GroupCommitter::spawn(Arc::clone(&log))));
        Ok((
            KvLog {
                dir: dir.to_path_buf(),
                config,
                log,
                committer,
                live_bytes,
                live,
            },
            pairs,
        ))
    }

    /// Appends changes (a `None` value deletes the key). Returns the end offset to pass to
    /// [`KvLog::wait_durable`]. Compacts first when the log has grown too large.
    pub fn append(&mut self, changes: &[(Bytes, Option<Bytes>)]) -> Result<i64> {
        if changes.is_empty() {
            return Ok(self.lock().log_end_offset());
        }
        for (key, value) in changes {
            match value {
                Some(v) => {
                    let size = key.len() + v.len();
                    if let Some(old) = self.live.insert(key.clone(), size) {
                        self.live_bytes -= old as u64;
                    }
                    self.live_bytes += size as u64;
                }
                None => {
                    if let Some(old) = self.live.remove(key) {
                        self.live_bytes -= old as u64;
                    }
                }
            }
        }
        let batch = build_batch(changes)?;
        let end = {
            let mut log = self.lock();
            let info = log
                .append(batch, crate::clock::now_ms())
                .context("appending to the group log")?;
            info.last_offset + 1
        };
        Ok(end)
    }

    /// The group committer that makes appends durable (present with `flush = always`).
    pub fn committer_arc(&self) -> Option<Arc<GroupCommitter>> {
        self.committer.clone()
    }

    /// Whether the log is large enough relative to its live data to be rewritten.
    pub fn needs_compaction(&self) -> bool {
        let size = self.lock().size_in_bytes();
        size > COMPACT_MIN_BYTES && size > COMPACT_RATIO * self.live_bytes.max(1)
    }

    /// Rewrites the log with only the live pairs given (the caller's current state).
    pub fn compact(&mut self, pairs: &[(Bytes, Bytes)]) -> Result<()> {
        let staging = staging_dir(&self.dir);
        if staging.exists() {
            std::fs::remove_dir_all(&staging)?;
        }
        {
            let mut fresh = PartitionLog::open(&staging, self.config.clone())?;
            for chunk in pairs.chunks(1000) {
                let changes: Vec<(Bytes, Option<Bytes>)> = chunk
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .collect();
                fresh.append(build_batch(&changes)?, crate::clock::now_ms())?;
            }
            fresh.flush()?;
        }
        let old = self.dir.with_extension("old");
        let mut log = self.lock();
        std::fs::rename(&self.dir, &old)?;
        std::fs::rename(&staging, &self.dir)?;
        if let Some(parent) = self.dir.parent() {
            std::fs::File::open(parent).and_then(|d| d.sync_all())?;
        }
        *log = PartitionLog::open(&self.dir, self.config.clone())?;
        drop(log);
        std::fs::remove_dir_all(&old)?;
        self.live = pairs
            .iter()
            .map(|(k, v)| (k.clone(), k.len() + v.len()))
            .collect();
        self.live_bytes = self.live.values().map(|n| *n as u64).sum();
        tracing::info!(pairs = pairs.len(), "group log compacted");
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PartitionLog> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn staging_dir(dir: &Path) -> PathBuf {
    dir.with_extension("compacting")
}

fn build_batch(changes: &[(Bytes, Option<Bytes>)]) -> Result<Bytes> {
    let mut builder = RecordBatchBuilder::new();
    let now = crate::clock::now_ms();
    for (key, value) in changes {
        builder
            .append(now, Some(key), value.as_deref(), &[])
            .context("encoding a group log record")?;
    }
    Ok(builder
        .build()
        .context("encoding a group log batch")?
        .into_bytes())
}

fn replay(log: &PartitionLog) -> Result<BTreeMap<Bytes, Bytes>> {
    let mut pairs = BTreeMap::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log
            .read(offset, REPLAY_CHUNK)
            .context("replaying the group log")?;
        if read.records.is_empty() {
            break;
        }
        for batch in RecordBatches::new(read.records) {
            let batch = batch.context("replaying the group log")?;
            let next = batch.next_offset();
            for record in batch.records().context("replaying the group log")? {
                let record = record.context("replaying the group log")?;
                if record.offset < offset {
                    continue;
                }
                let Some(key) = record.key else { continue };
                match record.value {
                    Some(value) => {
                        pairs.insert(key, value);
                    }
                    None => {
                        pairs.remove(&key);
                    }
                }
            }
            offset = offset.max(next);
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[tokio::test]
    async fn last_value_wins_tombstones_delete_and_compaction_keeps_live_pairs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("groups");
        {
            let (mut kv, pairs) = KvLog::open(&path, FlushPolicy::Always).expect("open");
            assert!(pairs.is_empty());
            kv.append(&[(b("a"), Some(b("1"))), (b("b"), Some(b("2")))])
                .expect("append");
            let end = kv
                .append(&[(b("a"), Some(b("3"))), (b("b"), None)])
                .expect("append");
            if let Some(c) = kv.committer_arc() {
                c.wait_durable(end).await.expect("durable");
            }
        }
        let (mut kv, pairs) = KvLog::open(&path, FlushPolicy::Always).expect("reopen");
        assert_eq!(
            pairs.into_iter().collect::<Vec<_>>(),
            vec![(b("a"), b("3"))]
        );
        kv.append(&[(b("c"), Some(b("4")))]).expect("append");
        kv.compact(&[(b("a"), b("3")), (b("c"), b("4"))])
            .expect("compact");
        kv.append(&[(b("d"), Some(b("5")))])
            .expect("append after compaction");
        drop(kv);
        let (_, pairs) = KvLog::open(&path, FlushPolicy::Always).expect("reopen");
        assert_eq!(pairs.len(), 3);
        assert!(!staging_dir(&path).exists());
    }
}
