//! The cluster-wide client-instance view, PostgreSQL's side: each broker publishes a JSON
//! summary of its own client instances under its registration ([`publish`]), and any broker
//! reads the other live brokers' latest summaries ([`peer_summaries`]) to merge them with its own
//! (the admin endpoint does the merging).
//!
//! A summary is checked every second and written only when it changed (or at least every ten
//! seconds, and at once after this broker registers again); a failed write is retried at the
//! next check. A summary is kept under the broker's epoch, so a broker that died or was fenced
//! stops being read as soon as its lease lapses.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use skiff_cluster::documents;
use skiff_cluster::membership::Registration;
use tokio::sync::watch;

use super::Cluster;
use crate::shutdown::stopped;

/// How often this broker's summary is compared with what it last published.
const CHECK: Duration = Duration::from_secs(1);
/// The longest a summary goes without being written again, changed or not.
const REFRESH: Duration = Duration::from_secs(10);
/// How long a reader waits for PostgreSQL before it shows only its own clients.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// What was last published: under which registration, which bytes, when.
struct Published {
    reg: Registration,
    bytes: Vec<u8>,
    at: Instant,
}

impl Published {
    /// Whether `bytes` under `reg` need writing now.
    fn stale(last: Option<&Published>, reg: Registration, bytes: &[u8], now: Instant) -> bool {
        last.is_none_or(|p| p.reg != reg || p.bytes != bytes || now - p.at >= REFRESH)
    }
}

/// Publishes `summary()` (this broker's client instances) every second it changed, and at
/// least every ten seconds, until the broker stops. A `Null` summary is not published.
pub async fn publish(
    cluster: Arc<Cluster>,
    summary: impl Fn() -> serde_json::Value + Send + 'static,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut timer = tokio::time::interval(CHECK);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<Published> = None;
    loop {
        tokio::select! {
            _ = timer.tick() => {}
            _ = stopped(&mut shutdown) => return,
        }
        let Some(reg) = cluster.registration() else {
            continue;
        };
        let body = summary();
        if body.is_null() {
            continue;
        }
        let bytes = body.to_string().into_bytes();
        let now = Instant::now();
        if !Published::stale(last.as_ref(), reg, &bytes, now) {
            continue;
        }
        match documents::publish_clients(&cluster.db, reg, &body).await {
            Ok(()) => {
                last = Some(Published {
                    reg,
                    bytes,
                    at: now,
                })
            }
            Err(e) => tracing::debug!(error = %e, "publishing this broker's client summary failed"),
        }
    }
}

/// The other live brokers' latest summaries, by node ID (this broker's own is left out: its
/// live view is newer). An error when PostgreSQL does not answer within two seconds.
pub async fn peer_summaries(cluster: &Cluster) -> anyhow::Result<BTreeMap<i32, serde_json::Value>> {
    let mut all = tokio::time::timeout(READ_TIMEOUT, documents::client_summaries(&cluster.db))
        .await
        .map_err(|_| anyhow::anyhow!("PostgreSQL did not answer within {READ_TIMEOUT:?}"))??;
    all.remove(&cluster.node_id);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_changes_new_registrations_and_refreshes() {
        let reg = Registration {
            node_id: 1,
            epoch: 4,
        };
        let now = Instant::now();
        assert!(Published::stale(None, reg, b"a", now), "never published");
        let last = Published {
            reg,
            bytes: b"a".to_vec(),
            at: now,
        };
        assert!(!Published::stale(Some(&last), reg, b"a", now + CHECK));
        assert!(Published::stale(Some(&last), reg, b"b", now + CHECK));
        let again = Registration { epoch: 5, ..reg };
        assert!(Published::stale(Some(&last), again, b"a", now + CHECK));
        assert!(Published::stale(Some(&last), reg, b"a", now + REFRESH));
    }
}
