//! Client quotas in the broker (Kafka's `ClientQuotaManager` and KIP-219), with the rules of
//! [`skiff_quota`]: the configured quotas (AlterClientQuotas, kept in `data.dir/client-quotas.json`
//! written crash-safely, or in cluster mode in the cluster's `client-quotas` document that every
//! broker mirrors), and the meters that measure each bucket's rate.
//!
//! Each bucket is metered with a token bucket (KIP-599's measure, which Kafka uses for controller
//! mutations) holding a second's worth of its quota: what runs ahead of the quota is owed, and a
//! request that leaves the bucket in debt is throttled until the debt is paid (at most 11 s at
//! once, Kafka's longest throttle; the rest is owed by the next request). Kafka's byte-rate
//! quotas measure over 11 one-second samples instead, which lets a client burst up to ten
//! seconds' worth whenever the oldest samples expire; the token bucket holds the rate to the
//! quota within a second's worth, and clients see the same throttle times and muting.
//!
//! What is measured, as Kafka measures it: a Produce request's size against
//! `producer_byte_rate`, a Fetch response's record bytes against `consumer_byte_rate` (a
//! throttled fetch answers without its records, as Kafka's throttled response does), and the
//! time a request's handler runs on the connection's worker against `request_percentage` (a
//! percentage of one thread; ApiVersions and SASL are exempt). A throttled response carries its
//! throttle time, and the connection reads nothing more from the client until it has passed
//! (KIP-219); clients too old to throttle themselves (Produce before v6, Fetch before v8) get
//! their response that much later instead. `controller_mutation_rate` (KIP-599) counts the
//! partitions CreateTopics, DeleteTopics and CreatePartitions create or delete, in a token bucket
//! of Kafka's 11-second burst (`handlers::topics`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use anyhow::{Context, Result};
use skiff_quota::entity::{Bucket, Key, Quotas};
use skiff_quota::rate::TokenBucket;

/// The quotas file in the data directory.
pub const QUOTAS_FILE: &str = "client-quotas.json";

/// Meters kept at most; beyond, idle ones are dropped first (a bounded memory whatever the
/// number of client IDs seen).
const MAX_METERS: usize = 100_000;

/// Who a request is from, as quotas see it: the principal's name, the client ID and the KIP-1313
/// instance ID.
#[derive(Debug, Clone)]
pub struct Requester<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
    pub instance: Option<String>,
}

/// Per quota key: responses throttled and the throttle time given.
#[derive(Debug, Default)]
pub struct Throttled {
    pub responses: [AtomicU64; 4],
    pub time_ms: [AtomicU64; 4],
}

fn index(key: Key) -> usize {
    match key {
        Key::ProducerByteRate => 0,
        Key::ConsumerByteRate => 1,
        Key::RequestPercentage => 2,
        Key::ControllerMutationRate => 3,
    }
}

struct Meter {
    bucket: TokenBucket,
    last_ms: i64,
}

/// A bucket may run ahead of its quota by this much of a second's worth (its burst).
const BURST_MS: i64 = 1_000;

/// The longest throttle given at once (Kafka's `quota.window.num` x `quota.window.size`); what
/// is still owed after it is owed by the next request.
const MAX_THROTTLE_MS: i64 = 11_000;

/// A meter's bucket: a second's worth of burst for rates, Kafka's whole quota window (11 s) for
/// controller mutations (KIP-599's token bucket).
fn new_bucket(key: Key, quota: f64, now_ms: i64) -> TokenBucket {
    match key {
        Key::ControllerMutationRate => TokenBucket::new(quota, 11, 1_000, now_ms),
        _ => TokenBucket::new(quota, 1, BURST_MS, now_ms),
    }
}

/// Meters idle this long are dropped first when there are too many.
const IDLE_MS: i64 = 60_000;

/// The configured quotas and the meters of the buckets they are counted in.
pub struct QuotaManager {
    quotas: Mutex<Quotas>,
    meters: Mutex<HashMap<(Key, Bucket), Meter>>,
    pub throttled: Throttled,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The quotas a document or file holds.
pub fn decode(body: &[u8]) -> Result<Quotas> {
    serde_json::from_slice(body).context("client quotas are not valid JSON")
}

pub fn encode(quotas: &Quotas) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(quotas).context("serialising client quotas")
}

impl QuotaManager {
    /// The quotas of `data_dir` (none in cluster mode: they are the cluster's, mirrored once
    /// read).
    pub fn open(data_dir: &Path, cluster: bool) -> Result<QuotaManager> {
        let path = data_dir.join(QUOTAS_FILE);
        let quotas = if cluster {
            Quotas::default()
        } else {
            match std::fs::read(&path) {
                Ok(bytes) => decode(&bytes).with_context(|| format!("{}", path.display()))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Quotas::default(),
                Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
            }
        };
        Ok(QuotaManager {
            quotas: Mutex::new(quotas),
            meters: Mutex::new(HashMap::new()),
            throttled: Throttled::default(),
        })
    }

    /// The configured quotas.
    pub fn quotas(&self) -> Quotas {
        locked(&self.quotas).clone()
    }

    /// The configured quotas are now these (stored, or mirrored from the cluster).
    pub fn set(&self, quotas: Quotas) {
        *locked(&self.quotas) = quotas;
    }

    /// Whether any quota is configured (the common case is none: nothing is measured then).
    pub fn any(&self) -> bool {
        locked(&self.quotas).entities().next().is_some()
    }

    /// Records `value` for `key` of `who` at `now_ms` and returns the throttle time its bucket
    /// is owed (0 without a quota).
    pub fn record(&self, key: Key, who: &Requester<'_>, value: f64, now_ms: i64) -> i64 {
        let resolved =
            locked(&self.quotas).resolve(key, who.user, who.client_id, who.instance.as_deref());
        let Some((quota, bucket)) = resolved else {
            return 0;
        };
        let mut meters = locked(&self.meters);
        if meters.len() >= MAX_METERS && !meters.contains_key(&(key, bucket.clone())) {
            meters.retain(|_, m| now_ms - m.last_ms < IDLE_MS);
            if meters.len() >= MAX_METERS {
                return 0;
            }
        }
        let meter = meters.entry((key, bucket)).or_insert_with(|| Meter {
            bucket: new_bucket(key, quota, now_ms),
            last_ms: now_ms,
        });
        meter.bucket.record(value, quota, now_ms);
        meter.last_ms = now_ms;
        let throttle = meter.bucket.throttle_ms(quota, now_ms).min(MAX_THROTTLE_MS);
        if throttle > 0 {
            let i = index(key);
            self.throttled.responses[i].fetch_add(1, Ordering::Relaxed);
            self.throttled.time_ms[i].fetch_add(throttle.unsigned_abs(), Ordering::Relaxed);
        }
        throttle
    }

    /// Whether the bucket `who` counts `key` in is in debt now (KIP-599's strict check before a
    /// controller mutation); `false` without a quota.
    pub fn exceeded(&self, key: Key, who: &Requester<'_>, now_ms: i64) -> bool {
        let resolved =
            locked(&self.quotas).resolve(key, who.user, who.client_id, who.instance.as_deref());
        let Some((quota, bucket)) = resolved else {
            return false;
        };
        locked(&self.meters)
            .get_mut(&(key, bucket))
            .is_some_and(|m| m.bucket.exceeded(quota, now_ms))
    }

    /// How long the bucket `who` counts `key` in is throttled now, without counting anything.
    pub fn throttle(&self, key: Key, who: &Requester<'_>, now_ms: i64) -> i64 {
        let resolved =
            locked(&self.quotas).resolve(key, who.user, who.client_id, who.instance.as_deref());
        let Some((quota, bucket)) = resolved else {
            return 0;
        };
        locked(&self.meters).get_mut(&(key, bucket)).map_or(0, |m| {
            m.bucket.throttle_ms(quota, now_ms).min(MAX_THROTTLE_MS)
        })
    }

    /// `/metrics` lines: throttled responses and throttle time per quota key.
    pub fn metrics(&self, out: &mut String) {
        use std::fmt::Write;
        out.push_str("# HELP skiff_quota_throttled_responses_total Responses throttled by a client quota, by quota key.\n# TYPE skiff_quota_throttled_responses_total counter\n");
        for key in Key::ALL {
            let _ = writeln!(
                out,
                "skiff_quota_throttled_responses_total{{quota=\"{}\"}} {}",
                key.name(),
                self.throttled.responses[index(key)].load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP skiff_quota_throttle_time_ms_total Throttle time given by client quotas, by quota key.\n# TYPE skiff_quota_throttle_time_ms_total counter\n");
        for key in Key::ALL {
            let _ = writeln!(
                out,
                "skiff_quota_throttle_time_ms_total{{quota=\"{}\"}} {}",
                key.name(),
                self.throttled.time_ms[index(key)].load(Ordering::Relaxed)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_quota::entity::{CLIENT_ID, CLIENT_INSTANCE_ID, Entity, Op};

    fn who<'a>(client_id: &'a str, instance: Option<&'a str>) -> Requester<'a> {
        Requester {
            user: "ANONYMOUS",
            client_id,
            instance: instance.map(str::to_string),
        }
    }

    #[test]
    fn a_bucket_over_its_quota_is_throttled_and_others_are_not() {
        let dir = std::path::Path::new("/nonexistent-skiff-quota-test");
        let m = QuotaManager::open(dir, true).expect("open");
        assert!(!m.any());
        assert_eq!(
            m.record(Key::ProducerByteRate, &who("app", None), 1e9, 0),
            0
        );
        let mut q = Quotas::default();
        let op = |v: f64| Op {
            key: "producer_byte_rate".into(),
            value: v,
            remove: false,
        };
        q.alter(
            &Entity::from_parts(&[(CLIENT_INSTANCE_ID, Some("i1"))]).expect("entity"),
            &[op(1_000.0)],
        )
        .expect("alter");
        q.alter(
            &Entity::from_parts(&[(CLIENT_ID, Some("app"))]).expect("entity"),
            &[op(1_000_000.0)],
        )
        .expect("alter");
        m.set(q);
        // 100 KB at once: ten times what a 1 KB/s instance may do over ten seconds.
        let t = m.record(Key::ProducerByteRate, &who("app", Some("i1")), 100_000.0, 0);
        assert!(t > 0);
        // Its sibling (same client ID, another instance) is measured against the client ID's.
        assert_eq!(
            m.record(Key::ProducerByteRate, &who("app", Some("i2")), 100_000.0, 0),
            0
        );
        let mut text = String::new();
        m.metrics(&mut text);
        assert!(
            text.contains("skiff_quota_throttled_responses_total{quota=\"producer_byte_rate\"} 1")
        );
    }
}
