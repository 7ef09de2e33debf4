//! Reading partitions in cluster mode: the batch index in PostgreSQL says where a partition's
//! batches are, the object store holds their bytes, and two caches keep both off the network
//! for tailing consumers:
//!
//! - the offsets this broker knows of each partition (from its own commits and the others',
//!   announced by NOTIFY): a fetch at the high watermark is answered without asking PostgreSQL;
//! - [`ObjectCache`]: batches' bytes, bounded by `fetch.cache.max.bytes`, least recently used
//!   out first; the batches this broker committed go in as they are committed.
//!
//! Objects carry no offsets: each batch served gets its base offset (and, on `LogAppendTime`
//! topics, the commit's time) written into its header here.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};
use skiff_cluster::commit::PartitionKey;
use skiff_cluster::log::{FoundBatch, LogChange};
use skiff_protocol::ErrorCode;

use super::Cluster;

/// Batches' bytes by (object, byte offset), least recently used out first.
pub struct ObjectCache {
    max_bytes: usize,
    inner: Mutex<CacheInner>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

#[derive(Default)]
struct CacheInner {
    entries: HashMap<(Arc<str>, u64), (Bytes, u64)>,
    order: BTreeMap<u64, (Arc<str>, u64)>,
    bytes: usize,
    tick: u64,
}

impl ObjectCache {
    pub fn new(max_bytes: usize) -> ObjectCache {
        ObjectCache {
            max_bytes,
            inner: Mutex::new(CacheInner::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn insert(&self, object: Arc<str>, offset: u64, bytes: Bytes) {
        if bytes.len() > self.max_bytes {
            return;
        }
        let mut c = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        c.tick += 1;
        let tick = c.tick;
        if let Some((old, old_tick)) = c.entries.remove(&(Arc::clone(&object), offset)) {
            c.bytes -= old.len();
            c.order.remove(&old_tick);
        }
        c.bytes += bytes.len();
        c.order.insert(tick, (Arc::clone(&object), offset));
        c.entries.insert((object, offset), (bytes, tick));
        while c.bytes > self.max_bytes {
            let Some((_, key)) = c.order.pop_first() else {
                break;
            };
            if let Some((gone, _)) = c.entries.remove(&key) {
                c.bytes -= gone.len();
            }
        }
    }

    pub fn get(&self, object: &str, offset: u64) -> Option<Bytes> {
        let mut c = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (Arc::<str>::from(object), offset);
        c.tick += 1;
        let tick = c.tick;
        let found = match c.entries.get_mut(&key) {
            Some((bytes, t)) => {
                let old = std::mem::replace(t, tick);
                Some((bytes.clone(), old))
            }
            None => None,
        };
        match found {
            Some((bytes, old)) => {
                c.order.remove(&old);
                c.order.insert(tick, key);
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(bytes)
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    pub fn bytes(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
    }
}

/// What this broker knows of a partition's offsets without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub log_start: i64,
    pub high_watermark: i64,
    /// The last stable offset: the first offset of the oldest open transaction, or the high
    /// watermark.
    pub last_stable: i64,
}

/// What this broker knows of partitions' offsets without asking.
#[derive(Default)]
pub struct KnownOffsets {
    inner: Mutex<HashMap<PartitionKey, Known>>,
}

impl KnownOffsets {
    /// Takes in announced changes (offsets only move forward).
    pub fn learn(&self, changes: &[LogChange]) {
        let mut known = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for c in changes {
            let entry = known.entry(c.key).or_insert(Known {
                log_start: c.log_start,
                high_watermark: c.high_watermark,
                last_stable: c.last_stable,
            });
            entry.log_start = entry.log_start.max(c.log_start);
            entry.high_watermark = entry.high_watermark.max(c.high_watermark);
            entry.last_stable = entry.last_stable.max(c.last_stable);
        }
    }

    pub fn get(&self, key: &PartitionKey) -> Option<Known> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .copied()
    }

    /// Forgets everything (after NOTIFY may have been missed).
    pub fn clear(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

/// The latest batches of the partitions this broker wrote, as its commits inserted them: a
/// tailing fetch of a partition this broker leads finds its batches here instead of asking
/// PostgreSQL. A partition's entries are a contiguous run ending at the high watermark this
/// broker committed; when another broker's commit is announced for it (leadership moved), or
/// announcements may have been missed, the partition's entries go.
pub struct RecentIndex {
    inner: Mutex<HashMap<PartitionKey, std::collections::VecDeque<FoundBatch>>>,
    per_partition: usize,
}

impl RecentIndex {
    pub fn new(per_partition: usize) -> RecentIndex {
        RecentIndex {
            inner: Mutex::new(HashMap::new()),
            per_partition,
        }
    }

    /// Adds batches this broker just committed (in offset order).
    pub fn record(&self, key: PartitionKey, batches: Vec<FoundBatch>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let run = inner.entry(key).or_default();
        for b in batches {
            if run
                .back()
                .is_some_and(|last| last.last_offset + 1 != b.base_offset)
            {
                // Not contiguous (another broker wrote in between): start over.
                run.clear();
            }
            run.push_back(b);
            if run.len() > self.per_partition {
                run.pop_front();
            }
        }
    }

    /// Announced changes: a partition advanced past what this broker recorded was written by
    /// another broker, so its entries cannot be trusted to be the whole tail any more.
    pub fn announced(&self, changes: &[LogChange]) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for c in changes {
            let end = inner
                .get(&c.key)
                .and_then(|run| run.back())
                .map(|b| b.last_offset + 1);
            if end.is_some_and(|end| end < c.high_watermark) {
                inner.remove(&c.key);
            }
        }
    }

    pub fn clear(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The batches from the one holding `offset`, up to `max_bytes` (the first whole), when the
    /// entries cover everything from `offset` to `high_watermark`.
    pub fn lookup(
        &self,
        key: &PartitionKey,
        offset: i64,
        high_watermark: i64,
        max_bytes: u64,
    ) -> Option<Vec<FoundBatch>> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let run = inner.get(key)?;
        let first = run.front()?;
        let last = run.back()?;
        if first.base_offset > offset || last.last_offset + 1 != high_watermark {
            return None;
        }
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for b in run.iter().filter(|b| b.last_offset >= offset) {
            if !out.is_empty() && bytes + u64::from(b.byte_size) > max_bytes {
                break;
            }
            bytes += u64::from(b.byte_size);
            out.push(b.clone());
        }
        Some(out)
    }
}

/// One partition read: whole batches, offsets written in.
#[derive(Debug, Clone, Default)]
pub struct Read {
    pub batches: Vec<Bytes>,
    pub log_start: i64,
    pub high_watermark: i64,
    pub last_stable: i64,
    /// read_committed: the aborted transactions the batches overlap (producer ID, first
    /// offset); `None` for read_uncommitted.
    pub aborted: Option<Vec<(i64, i64)>>,
}

impl Read {
    /// The aborted transactions as partition reads give them (read_committed; `None` otherwise).
    pub fn aborted_transactions(&mut self) -> Option<Vec<crate::partition::Aborted>> {
        self.aborted.take().map(|aborted| {
            aborted
                .into_iter()
                .map(|(producer_id, first_offset)| crate::partition::Aborted {
                    producer_id,
                    first_offset,
                })
                .collect()
        })
    }
}

fn storage_error(e: impl std::fmt::Display) -> (ErrorCode, String) {
    (ErrorCode::KAFKA_STORAGE_ERROR, e.to_string())
}

/// Reads a partition from `offset`: whole batches up to `max_bytes` (the first whole even if
/// larger), with the partition's log start, high watermark and last stable offset. A
/// read_committed read stops at the last stable offset and names the aborted transactions
/// its batches overlap.
pub async fn read(
    cluster: &Cluster,
    key: PartitionKey,
    offset: i64,
    max_bytes: usize,
    log_append_time: bool,
    read_committed: bool,
) -> Result<Read, (ErrorCode, String)> {
    let (known, found) = match cluster.known.get(&key) {
        Some(k) if offset >= k.log_start && offset == k.high_watermark => {
            cluster.stats.reads_local.fetch_add(1, Ordering::Relaxed);
            (k, Vec::new())
        }
        Some(k) if read_committed && offset >= k.log_start && offset == k.last_stable => {
            cluster.stats.reads_local.fetch_add(1, Ordering::Relaxed);
            (k, Vec::new())
        }
        Some(k)
            if offset >= k.log_start
                && offset < k.high_watermark
                && let Some(batches) =
                    cluster
                        .recent
                        .lookup(&key, offset, k.high_watermark, max_bytes as u64) =>
        {
            cluster.stats.reads_local.fetch_add(1, Ordering::Relaxed);
            (k, batches)
        }
        _ => {
            cluster.stats.reads_postgres.fetch_add(1, Ordering::Relaxed);
            let found =
                skiff_cluster::log::find_batches(&cluster.db, key, offset, max_bytes as u64, 1000)
                    .await
                    .map_err(storage_error)?;
            let Some((offsets, batches)) = found else {
                return Err((
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    "this partition does not exist".into(),
                ));
            };
            cluster.known.learn(&[LogChange {
                key,
                log_start: offsets.log_start,
                high_watermark: offsets.high_watermark,
                last_stable: offsets.last_stable,
            }]);
            if offset < offsets.log_start || offset > offsets.high_watermark {
                return Err((
                    ErrorCode::OFFSET_OUT_OF_RANGE,
                    format!(
                        "offset {offset} is outside {}..{}",
                        offsets.log_start, offsets.high_watermark
                    ),
                ));
            }
            let known = Known {
                log_start: offsets.log_start,
                high_watermark: offsets.high_watermark,
                last_stable: offsets.last_stable,
            };
            (known, batches)
        }
    };
    let upto = if read_committed {
        known.last_stable
    } else {
        known.high_watermark
    };
    let found: Vec<FoundBatch> = found.into_iter().filter(|b| b.base_offset < upto).collect();
    let batches = load(cluster, &found, log_append_time).await?;
    let aborted = if read_committed
        && batches
            .iter()
            .any(|b| skiff_records::BatchHeader::parse(b).is_ok_and(|h| h.is_transactional()))
    {
        let aborted = skiff_cluster::log::aborted_transactions(&cluster.db, key, offset, upto)
            .await
            .map_err(storage_error)?;
        Some(aborted)
    } else {
        read_committed.then(Vec::new)
    };
    Ok(Read {
        batches,
        log_start: known.log_start,
        high_watermark: known.high_watermark,
        last_stable: known.last_stable,
        aborted,
    })
}

/// The bytes of `batches`, offsets written in, from the cache or the object store (one ranged
/// read per object for what the cache lacks).
pub async fn load(
    cluster: &Cluster,
    batches: &[FoundBatch],
    log_append_time: bool,
) -> Result<Vec<Bytes>, (ErrorCode, String)> {
    let mut parts: Vec<Option<Bytes>> = batches
        .iter()
        .map(|b| cluster.cache.get(&b.object_key, b.byte_offset))
        .collect();
    // The missing ones, one range per object.
    let mut by_object: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (b, part) in batches.iter().zip(&parts) {
        if part.is_none() {
            let end = b.byte_offset + u64::from(b.byte_size);
            let range = by_object
                .entry(b.object_key.as_str())
                .or_insert((b.byte_offset, end));
            range.0 = range.0.min(b.byte_offset);
            range.1 = range.1.max(end);
        }
    }
    for (object, (start, end)) in by_object {
        let bytes = cluster
            .objects
            .get_range(object, start..end)
            .await
            .map_err(storage_error)?;
        if bytes.len() as u64 != end - start {
            return Err(storage_error(format!(
                "object {object} returned {} bytes for {start}..{end}",
                bytes.len()
            )));
        }
        let object_key: Arc<str> = Arc::from(object);
        for (b, part) in batches.iter().zip(parts.iter_mut()) {
            if part.is_none() && b.object_key == object {
                let from = (b.byte_offset - start) as usize;
                let slice = bytes.slice(from..from + b.byte_size as usize);
                cluster
                    .cache
                    .insert(Arc::clone(&object_key), b.byte_offset, slice.clone());
                *part = Some(slice);
            }
        }
    }
    let mut out = Vec::with_capacity(batches.len());
    for (b, part) in batches.iter().zip(parts) {
        let Some(part) = part else {
            return Err(storage_error("a batch's bytes were not read"));
        };
        let mut bytes = BytesMut::from(part.as_ref());
        let mut batch = skiff_records::RecordBatchMut::new(&mut bytes).map_err(|e| {
            storage_error(format!("object {} holds a bad batch: {e}", b.object_key))
        })?;
        batch.set_base_offset(b.base_offset);
        batch.set_partition_leader_epoch(crate::partition::CLUSTER_LEADER_EPOCH);
        if log_append_time && b.log_append_time >= 0 {
            batch.set_log_append_time(b.log_append_time);
        }
        out.push(bytes.freeze());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_the_recently_used_within_its_bound() {
        let cache = ObjectCache::new(10);
        let a: Arc<str> = Arc::from("a");
        cache.insert(Arc::clone(&a), 0, Bytes::from_static(b"1234"));
        cache.insert(Arc::clone(&a), 4, Bytes::from_static(b"5678"));
        assert!(cache.get("a", 0).is_some()); // 0 is now the most recent
        cache.insert(Arc::clone(&a), 8, Bytes::from_static(b"9abc"));
        assert!(cache.get("a", 4).is_none(), "the least recently used went");
        assert!(cache.get("a", 0).is_some());
        assert!(cache.get("a", 8).is_some());
        assert!(cache.bytes() <= 10);
        cache.insert(Arc::clone(&a), 99, Bytes::from(vec![0u8; 11]));
        assert!(
            cache.get("a", 99).is_none(),
            "larger than the whole cache: not kept"
        );
        assert_eq!(cache.hits.load(Ordering::Relaxed), 3);
        assert_eq!(cache.misses.load(Ordering::Relaxed), 2);
    }

    fn found(base: i64, last: i64) -> FoundBatch {
        FoundBatch {
            base_offset: base,
            last_offset: last,
            object_key: "o".into(),
            byte_offset: 0,
            byte_size: 10,
            max_timestamp: 0,
            log_append_time: -1,
        }
    }

    #[test]
    fn the_recent_index_serves_only_a_whole_tail() {
        let index = RecentIndex::new(3);
        let key = PartitionKey {
            topic_id: uuid::Uuid::from_u128(1),
            partition: 0,
        };
        index.record(key, vec![found(0, 4), found(5, 9)]);
        let got = index.lookup(&key, 6, 10, 100).unwrap();
        assert_eq!(
            got.iter().map(|b| b.base_offset).collect::<Vec<_>>(),
            vec![5]
        );
        assert_eq!(
            index.lookup(&key, 0, 10, 15).unwrap().len(),
            1,
            "max bytes, first whole"
        );
        assert!(
            index.lookup(&key, 0, 11, 100).is_none(),
            "the high watermark is further"
        );
        index.record(key, vec![found(10, 10), found(11, 11)]);
        assert!(
            index.lookup(&key, 0, 12, 100).is_none(),
            "only the last three are kept"
        );
        assert_eq!(index.lookup(&key, 5, 12, 100).unwrap().len(), 3);
        // Another broker's commit went further: the entries go.
        index.announced(&[LogChange {
            key,
            log_start: 0,
            high_watermark: 15,
            last_stable: 15,
        }]);
        assert!(index.lookup(&key, 5, 12, 100).is_none());
        // A gap starts a new run.
        index.record(key, vec![found(20, 20)]);
        index.record(key, vec![found(30, 30)]);
        assert!(index.lookup(&key, 20, 31, 100).is_none());
        assert_eq!(index.lookup(&key, 30, 31, 100).unwrap().len(), 1);
    }

    #[test]
    fn known_offsets_only_move_forward() {
        let known = KnownOffsets::default();
        let key = PartitionKey {
            topic_id: uuid::Uuid::from_u128(1),
            partition: 0,
        };
        let change = |s, h| LogChange {
            key,
            log_start: s,
            high_watermark: h,
            last_stable: h,
        };
        known.learn(&[change(0, 10)]);
        known.learn(&[change(2, 5)]);
        assert_eq!(
            known.get(&key),
            Some(Known {
                log_start: 2,
                high_watermark: 10,
                last_stable: 10
            })
        );
        known.clear();
        assert_eq!(known.get(&key), None);
    }
}
