//! `/metrics`: the broker's counters and gauges in Prometheus's text format.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use skiff_protocol::ApiKey;

use crate::identity::RejectReason;
use crate::lag::Totals;
use crate::state::Broker;

/// Prometheus text exposition format, version 0.0.4.
pub(super) async fn metrics(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    // Broker metrics, then the latest client telemetry labelled by client instance ID.
    let mut text = render_metrics(&broker);
    text.push_str(&broker.lock_telemetry().render_prometheus());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

pub fn render_metrics(broker: &Broker) -> String {
    let m = &broker.metrics;
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, kind: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    gauge(
        "skiff_connections_open",
        "Open client connections.",
        "gauge",
        m.connections_open.load(Ordering::Relaxed),
    );
    let (sessions, session_partitions) = {
        let sessions = broker.lock_fetch_sessions();
        (sessions.len(), sessions.total_partitions())
    };
    gauge(
        "skiff_fetch_sessions",
        "Incremental fetch sessions held (KIP-227).",
        "gauge",
        sessions as u64,
    );
    gauge(
        "skiff_fetch_session_partitions",
        "Partitions held by all incremental fetch sessions.",
        "gauge",
        session_partitions as u64,
    );
    if broker.config.share_groups_enabled {
        let (sessions, session_partitions) = {
            let sessions = broker.share.lock_sessions();
            (sessions.len(), sessions.total_partitions())
        };
        let (in_flight, acquired) = broker.share.gauges();
        let c = &broker.share.counters;
        let series: [(&str, &str, &str, u64); 9] = [
            (
                "skiff_share_partitions_loaded",
                "Share partitions held in memory (idle ones are unloaded every minute).",
                "gauge",
                broker.share.loaded() as u64,
            ),
            (
                "skiff_share_sessions",
                "Share sessions held (KIP-932 ShareFetch).",
                "gauge",
                sessions as u64,
            ),
            (
                "skiff_share_session_partitions",
                "Partitions held by all share sessions.",
                "gauge",
                session_partitions as u64,
            ),
            (
                "skiff_share_records_in_flight",
                "Records of the loaded share partitions between their start and end offsets.",
                "gauge",
                in_flight,
            ),
            (
                "skiff_share_records_acquired",
                "Records acquired by share consumers now (locked until acknowledged, released or expired).",
                "gauge",
                acquired,
            ),
            (
                "skiff_share_records_acquired_total",
                "Records delivered to share consumers (each delivery counted).",
                "counter",
                c.acquired.load(Ordering::Relaxed),
            ),
            (
                "skiff_share_records_redelivered_total",
                "Deliveries of records delivered before (delivery count above 1).",
                "counter",
                c.redelivered.load(Ordering::Relaxed),
            ),
            (
                "skiff_share_records_acknowledged_total",
                "Records share consumers accepted.",
                "counter",
                c.acknowledged.load(Ordering::Relaxed),
            ),
            (
                "skiff_share_records_archived_total",
                "Records archived: rejected, past the delivery count limit, gaps, or never deliverable (control records, aborted transactions, gone from the log).",
                "counter",
                c.archived.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, kind, value) in series {
            gauge(name, help, kind, value);
        }
    }
    let (transactional_ids, ongoing) = {
        let inner = broker.txns.lock();
        let all = inner.state.all();
        let ongoing = all
            .iter()
            .filter(|t| t.state == skiff_txn::TxnState::Ongoing)
            .count();
        (all.len(), ongoing)
    };
    gauge(
        "skiff_transactional_ids",
        "Transactional IDs the transaction coordinator knows.",
        "gauge",
        transactional_ids as u64,
    );
    gauge(
        "skiff_transactions_ongoing",
        "Transactions in progress (partitions added, not yet committed or aborted).",
        "gauge",
        ongoing as u64,
    );
    let (partitions, offline) = broker
        .all_topics()
        .iter()
        .flat_map(|t| t.partitions.iter())
        .fold((0u64, 0u64), |(all, offline), p| {
            (all + 1, offline + u64::from(p.is_offline()))
        });
    gauge(
        "skiff_partitions",
        "Partitions this broker holds.",
        "gauge",
        partitions,
    );
    gauge(
        "skiff_segment_files_open",
        "Segment files whose descriptor is open (bounded by log.open.files.max; idle partitions hold none).",
        "gauge",
        broker.files.0.open_files() as u64,
    );
    gauge(
        "skiff_segment_file_opens_total",
        "Times a segment file was opened (a growing rate means log.open.files.max is too small for the partitions in use).",
        "counter",
        broker.files.0.opens() as u64,
    );
    gauge(
        "skiff_partitions_offline",
        "Partitions offline after a disk fault (a failed fdatasync or segment write): they answer KAFKA_STORAGE_ERROR to appends until the broker restarts.",
        "gauge",
        offline,
    );
    gauge(
        "skiff_connections_accepted_total",
        "Client connections accepted.",
        "counter",
        m.connections_accepted.load(Ordering::Relaxed),
    );
    gauge(
        "skiff_authorization_denials_total",
        "Requests (or parts of them) refused by the ACL authorizer.",
        "counter",
        broker
            .security
            .acls
            .as_ref()
            .map_or(0, |acls| acls.denials.load(Ordering::Relaxed)),
    );
    gauge(
        "skiff_identity_conflicts_total",
        "Client instance IDs or group member IDs presented by a principal other than their owner (client.instance.id.binding).",
        "counter",
        broker.security.owners.conflicts.load(Ordering::Relaxed),
    );
    gauge(
        "skiff_tls_handshake_failures_total",
        "Connections closed because their TLS handshake failed or timed out (a plaintext client on a TLS port, an untrusted or missing client certificate).",
        "counter",
        m.tls_handshake_failures.load(Ordering::Relaxed),
    );
    let (journal_events, journal_dropped) = broker.journal.sizes();
    gauge(
        "skiff_client_journal_events",
        "Events the client-instance journal holds (client.journal.max.events bounds it).",
        "gauge",
        journal_events as u64,
    );
    gauge(
        "skiff_client_journal_dropped_total",
        "Journal events dropped, oldest first, to stay within the journal's bounds.",
        "counter",
        journal_dropped,
    );
    if let Some(cluster) = broker.cluster() {
        let st = &cluster.stats;
        let series: [(&str, &str, &str, u64); 10] = [
            (
                "skiff_cluster_reads_local_total",
                "Partition reads answered without PostgreSQL (at the high watermark, or from the batches this broker committed last).",
                "counter",
                st.reads_local.load(Ordering::Relaxed),
            ),
            (
                "skiff_cluster_reads_postgres_total",
                "Partition reads that looked batches up in PostgreSQL.",
                "counter",
                st.reads_postgres.load(Ordering::Relaxed),
            ),
            (
                "skiff_cluster_objects_put_total",
                "Objects uploaded by this broker (one per commit interval with batches).",
                "counter",
                st.objects_put.load(Ordering::Relaxed),
            ),
            (
                "skiff_cluster_object_bytes_put_total",
                "Bytes of the objects this broker uploaded.",
                "counter",
                st.bytes_put.load(Ordering::Relaxed),
            ),
            (
                "skiff_cluster_commits_total",
                "Objects this broker committed in PostgreSQL.",
                "counter",
                st.commits.load(Ordering::Relaxed),
            ),
            (
                "skiff_cluster_upload_failures_total",
                "Object uploads that failed (their batches were answered KAFKA_STORAGE_ERROR).",
                "counter",
                st.upload_failures.load(Ordering::Relaxed),
            ),
            (
                "skiff_cluster_commit_failures_total",
                "Commits PostgreSQL did not confirm (their batches were answered KAFKA_STORAGE_ERROR).",
                "counter",
                st.commit_failures.load(Ordering::Relaxed),
            ),
            (
                "skiff_cluster_fetch_cache_hits_total",
                "Batches fetches found in the fetch cache.",
                "counter",
                cluster.cache.hits.load(Ordering::Relaxed),
            ),
            (
                "skiff_cluster_fetch_cache_misses_total",
                "Batches fetches read from the object store.",
                "counter",
                cluster.cache.misses.load(Ordering::Relaxed),
            ),
            (
                "skiff_cluster_fetch_cache_bytes",
                "Bytes held by the fetch cache (fetch.cache.max.bytes bounds it).",
                "gauge",
                cluster.cache.bytes() as u64,
            ),
        ];
        for (name, help, kind, value) in series {
            gauge(name, help, kind, value);
        }
    }
    let _ = writeln!(
        out,
        "# HELP skiff_connections_identified_total Connections whose KIP-1313 identity was fixed, by whether it carries an ID.\n# TYPE skiff_connections_identified_total counter"
    );
    let _ = writeln!(
        out,
        "skiff_connections_identified_total{{client_instance_id=\"present\"}} {}",
        m.connections_with_instance_id.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "skiff_connections_identified_total{{client_instance_id=\"absent\"}} {}",
        m.connections_without_instance_id.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP skiff_sasl_authentications_total SASL authentications and re-authentications, by result.\n# TYPE skiff_sasl_authentications_total counter"
    );
    for (result, counter) in [
        ("succeeded", &m.sasl_successes),
        ("failed", &m.sasl_failures),
    ] {
        let _ = writeln!(
            out,
            "skiff_sasl_authentications_total{{result=\"{result}\"}} {}",
            counter.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "# HELP skiff_kip1313_rejections_total Requests rejected for breaking the connection's client instance ID.\n# TYPE skiff_kip1313_rejections_total counter"
    );
    for reason in RejectReason::ALL {
        let _ = writeln!(
            out,
            "skiff_kip1313_rejections_total{{reason=\"{}\"}} {}",
            reason.label(),
            m.rejections(reason)
        );
    }
    let _ = writeln!(
        out,
        "# HELP skiff_requests_total Requests received, by API.\n# TYPE skiff_requests_total counter"
    );
    for &api in ApiKey::ALL {
        let count = usize::try_from(api.key())
            .ok()
            .and_then(|i| m.requests.get(i))
            .map_or(0, |c| c.load(Ordering::Relaxed));
        if count > 0 {
            let _ = writeln!(
                out,
                "skiff_requests_total{{api=\"{}\"}} {count}",
                api.name()
            );
        }
    }
    let members = super::views::memberships(broker);
    let alignment = super::views::alignment_counts(broker, &members);
    let _ = writeln!(
        out,
        "# HELP skiff_client_memberships Group memberships this broker coordinates, by whether the member ID is the client instance's UUID (in any encoding).\n# TYPE skiff_client_memberships gauge"
    );
    for (label, value) in [
        ("aligned", alignment.memberships_aligned),
        ("unaligned", alignment.memberships_unaligned),
    ] {
        let _ = writeln!(
            out,
            "skiff_client_memberships{{alignment=\"{label}\"}} {value}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP skiff_client_member_id_encodings Group memberships this broker coordinates, by how the member ID writes a UUID (other: not a UUID).\n# TYPE skiff_client_member_id_encodings gauge"
    );
    for (encoding, value) in &alignment.member_id_encodings {
        let _ = writeln!(
            out,
            "skiff_client_member_id_encodings{{encoding=\"{encoding}\"}} {value}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP skiff_client_telemetry_instances Client instances with KIP-714 telemetry, by whether the telemetry ID is also the instance's KIP-1313 ID or a member ID.\n# TYPE skiff_client_telemetry_instances gauge"
    );
    for (label, value) in [
        ("aligned", alignment.telemetry_aligned),
        ("unaligned", alignment.telemetry_unaligned),
    ] {
        let _ = writeln!(
            out,
            "skiff_client_telemetry_instances{{alignment=\"{label}\"}} {value}"
        );
    }
    lag_gauges(
        &mut out,
        &super::views::lag_by_instance(&members),
        broker.config.client_lag_metrics_max_instances,
    );
    broker.quotas.metrics(&mut out);
    out
}

/// The client instances furthest behind, `max` of them per gauge (by records, and by seconds),
/// so that the series stay few however many clients there are.
fn lag_gauges(out: &mut String, lag: &BTreeMap<String, Totals>, max: usize) {
    /// A gauge's name, help, and its value for an instance.
    type LagGauge = (&'static str, &'static str, fn(&Totals) -> Option<f64>);
    let gauges: [LagGauge; 2] = [
        (
            "skiff_client_lag_records",
            "Records behind over a client instance's memberships of the groups this broker coordinates (the client.lag.metrics.max.instances instances furthest behind).",
            |t| t.records.map(|r| r as f64),
        ),
        (
            "skiff_client_lag_seconds",
            "Seconds since the oldest unconsumed record of a client instance's assigned partitions was written (the client.lag.metrics.max.instances instances furthest behind).",
            |t| t.seconds,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        let values = lag.iter().map(|(id, t)| (id.as_str(), value(t)));
        for (id, v) in crate::lag::top(values, max) {
            let _ = writeln!(out, "{name}{{client_instance_id=\"{id}\"}} {v}");
        }
    }
}
