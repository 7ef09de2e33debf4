//! Cluster mode's keys: `cluster.metadata` (PostgreSQL) and `cluster.objects` (object storage)
//! turn it on together; the others tune it.

use std::collections::BTreeMap;

use anyhow::{Result, bail};

use super::parse_num;

/// Cluster mode's settings (`None` in [`super::BrokerConfig::cluster`]: the embedded log).
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `cluster.metadata`: `postgres://user:pass@host:port/db[?sslmode=...]`.
    pub metadata_url: String,
    /// `cluster.objects`: `s3://bucket/prefix` or `file:///shared/dir`.
    pub objects_url: String,
    /// `s3.endpoint`, `s3.region` (credentials come from the AWS environment and files).
    pub s3: skiff_cluster::objects::S3Options,
    /// `broker.rack`.
    pub rack: Option<String>,
    /// `produce.commit.interval.ms` (250): how long produced batches gather before their
    /// object is uploaded and committed.
    pub commit_interval_ms: u64,
    /// `produce.buffer.max.bytes` (8 MiB): an object is cut sooner when this much gathered.
    pub buffer_max_bytes: usize,
    /// `fetch.cache.max.bytes` (256 MiB): object bytes kept for fetches.
    pub fetch_cache_max_bytes: usize,
    /// `cluster.lease.ms` (10,000): a broker silent this long is dead to the others; it renews
    /// every third of it.
    pub lease_ms: u64,
    /// `cluster.object.grace.ms` (60,000): how long an object nothing refers to is kept for
    /// readers in flight (and how old an uncommitted upload must be before it is removed).
    pub object_grace_ms: u64,
    /// `cluster.metadata.pool.size` (16): PostgreSQL connections per broker.
    pub pool_size: usize,
    /// `cluster.transaction.hanging.ms` (30,000): how long a transaction may stay open on a
    /// partition without its coordinator having it in progress there before it is closed.
    pub hanging_txn_ms: u64,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The metadata URL may hold a password.
        f.debug_struct("ClusterConfig")
            .field("objects_url", &self.objects_url)
            .field("commit_interval_ms", &self.commit_interval_ms)
            .finish_non_exhaustive()
    }
}

impl ClusterConfig {
    /// Settings for `metadata_url` and `objects_url` with every default.
    pub fn new(metadata_url: impl Into<String>, objects_url: impl Into<String>) -> ClusterConfig {
        ClusterConfig {
            metadata_url: metadata_url.into(),
            objects_url: objects_url.into(),
            s3: Default::default(),
            rack: None,
            commit_interval_ms: 250,
            buffer_max_bytes: 8 * 1024 * 1024,
            fetch_cache_max_bytes: 256 * 1024 * 1024,
            lease_ms: 10_000,
            object_grace_ms: 60_000,
            pool_size: 16,
            hanging_txn_ms: 30_000,
        }
    }
}

/// Takes the cluster keys out of `entries`.
pub(super) fn take_cluster(
    entries: &mut BTreeMap<String, String>,
) -> Result<Option<ClusterConfig>> {
    let metadata = entries.remove("cluster.metadata");
    let objects = entries.remove("cluster.objects");
    let endpoint = entries.remove("s3.endpoint");
    let region = entries.remove("s3.region");
    let rack = entries.remove("broker.rack");
    let mut num = |key: &str, min: i64, max: i64| -> Result<Option<i64>> {
        entries
            .remove(key)
            .map(|v| parse_num(&v, key, min, max))
            .transpose()
    };
    let interval = num("produce.commit.interval.ms", 1, 60_000)?;
    let buffer = num("produce.buffer.max.bytes", 1024, 1 << 30)?;
    let cache = num("fetch.cache.max.bytes", 0, 1 << 40)?;
    let lease = num("cluster.lease.ms", 1_000, 600_000)?;
    let grace = num("cluster.object.grace.ms", 0, 86_400_000)?;
    let pool = num("cluster.metadata.pool.size", 2, 1_000)?;
    let hanging = num("cluster.transaction.hanging.ms", 1_000, 86_400_000)?;
    let (metadata, objects) = match (metadata, objects) {
        (None, None) => {
            if endpoint.is_some() || region.is_some() || interval.is_some() || buffer.is_some() {
                bail!("s3.* and produce.* cluster keys need cluster.metadata and cluster.objects");
            }
            return Ok(None);
        }
        (Some(m), Some(o)) => (m, o),
        (Some(_), None) => {
            bail!("cluster.metadata needs cluster.objects (s3://bucket/prefix or file:///dir)")
        }
        (None, Some(_)) => bail!("cluster.objects needs cluster.metadata (postgres://...)"),
    };
    if !(metadata.starts_with("postgres://") || metadata.starts_with("postgresql://")) {
        bail!("cluster.metadata must be a postgres:// URL");
    }
    if !(objects.starts_with("s3://") || objects.starts_with("file://")) {
        bail!("cluster.objects must be an s3:// or file:// URL");
    }
    let mut config = ClusterConfig::new(metadata, objects);
    config.s3.endpoint = endpoint;
    config.s3.region = region;
    config.rack = rack.filter(|r| !r.is_empty());
    if let Some(v) = interval {
        config.commit_interval_ms = v as u64;
    }
    if let Some(v) = buffer {
        config.buffer_max_bytes = v as usize;
    }
    if let Some(v) = cache {
        config.fetch_cache_max_bytes = v as usize;
    }
    if let Some(v) = lease {
        config.lease_ms = v as u64;
    }
    if let Some(v) = grace {
        config.object_grace_ms = v as u64;
    }
    if let Some(v) = pool {
        config.pool_size = v as usize;
    }
    if let Some(v) = hanging {
        config.hanging_txn_ms = v as u64;
    }
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn off_without_keys_on_with_both() {
        assert!(take_cluster(&mut entries(&[])).unwrap().is_none());
        let mut e = entries(&[
            ("cluster.metadata", "postgres://u:secret@h:5432/db"),
            ("cluster.objects", "s3://b/p"),
            ("s3.endpoint", "http://127.0.0.1:9000"),
            ("produce.commit.interval.ms", "10"),
            ("broker.rack", "r1"),
        ]);
        let c = take_cluster(&mut e).unwrap().unwrap();
        assert!(e.is_empty());
        assert_eq!(c.commit_interval_ms, 10);
        assert_eq!(c.buffer_max_bytes, 8 * 1024 * 1024);
        assert_eq!(c.rack.as_deref(), Some("r1"));
        assert_eq!(c.s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert!(!format!("{c:?}").contains("secret"));
    }

    #[test]
    fn halves_and_bad_urls_are_refused() {
        for pairs in [
            vec![("cluster.metadata", "postgres://h/db")],
            vec![("cluster.objects", "s3://b")],
            vec![
                ("cluster.metadata", "mysql://h/db"),
                ("cluster.objects", "s3://b"),
            ],
            vec![
                ("cluster.metadata", "postgres://h/db"),
                ("cluster.objects", "gs://b"),
            ],
            vec![("s3.endpoint", "http://x")],
            vec![
                ("cluster.metadata", "postgres://h/db"),
                ("cluster.objects", "s3://b"),
                ("produce.commit.interval.ms", "0"),
            ],
        ] {
            assert!(take_cluster(&mut entries(&pairs)).is_err(), "{pairs:?}");
        }
    }
}
