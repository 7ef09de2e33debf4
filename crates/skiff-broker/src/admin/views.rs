//! The client-instance view: `/clients`, `/clients/{id}` (JSON, read by the `/ui/clients` page
//! too), with each membership's lag ([`super::lag`]); and one group's members, `/groups/{id}`, with the records each share member holds acquired.
//!
//! In cluster mode the view is cluster-wide: every broker publishes a summary of its own client
//! instances (this view, serialized: [`client_summary`], [`publish_clients`]) and the view
//! merges the other live brokers' summaries into this broker's live one ([`merge`]). An instance
//! connected to several brokers is one entry: its connections (each labelled with its broker's
//! node ID) from all of them, its memberships and producer IDs from wherever they are kept, and
//! its telemetry from the broker it pushed to last. Without PostgreSQL the view is this broker's.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use serde::{Deserialize, Serialize};
use skiff_protocol::Uuid;
use tokio::sync::watch;

use super::lag::{Assigned, consumer_positions, figures, learn_cluster_offsets, share_positions};
use crate::clients::{ConnectionRecord, Rejection};
use crate::clock::now_ms;
use crate::groups::Group;
use crate::lag::{self, PartitionLag, Totals};
use crate::state::Broker;
use crate::uuid_text;

/// A group membership of a client instance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(super) struct Membership {
    group: String,
    protocol: Cow<'static, str>,
    member_id: String,
    member_epoch: Option<i32>,
    /// topic name -> partitions (KIP-848 and share members, and classic members of the
    /// consumer protocol: their assignment decoded).
    assigned: BTreeMap<String, Vec<i32>>,
    /// The member ID is not the client instance's UUID in any encoding (KIP-1082 recommends
    /// they be equal); kept for compatibility, the negation of `aligned`.
    member_id_differs: bool,
    /// The member ID is the client instance's UUID, in whatever encoding (see
    /// [`crate::uuid_text`]).
    #[serde(default)]
    aligned: bool,
    /// How the member ID writes a UUID (`kafka-base64url`, `base64`, `base64-padded`,
    /// `base64url-padded`, `uuid-hyphenated`, `hex`), or null when it is not a UUID.
    #[serde(default)]
    member_id_encoding: Option<Cow<'static, str>>,
    /// KIP-932 share members: the records the member holds acquired now (the share-partition
    /// leader's count, over the share partitions loaded on this broker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    acquired_records: Option<u64>,
    /// Each assigned partition: the committed offset (share members: the share partition's
    /// start offset), high watermark, last stable offset and lag (see [`crate::lag`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    partitions: Vec<PartitionLag>,
    /// Records behind over the assigned partitions whose lag is known (null: none is).
    #[serde(default)]
    lag_records: Option<i64>,
    /// The most seconds behind of the assigned partitions (null: unknown for all).
    #[serde(default)]
    lag_seconds: Option<f64>,
}

impl Membership {
    /// Fills in the lag figures of its assigned partitions.
    fn set_lag(&mut self, partitions: Vec<PartitionLag>) {
        let totals = lag::totals(partitions.iter().map(PartitionLag::totals));
        self.partitions = partitions;
        self.lag_records = totals.records;
        self.lag_seconds = totals.seconds;
    }

    fn lag(&self) -> Totals {
        Totals {
            records: self.lag_records,
            seconds: self.lag_seconds,
        }
    }

    /// A share-partition leader's partial entry (cluster mode): records it holds for a member
    /// of a group coordinated elsewhere.
    fn is_partial_share(&self) -> bool {
        self.protocol == "share" && self.member_epoch.is_none()
    }
}

/// A producer ID the client instance was given, with its transaction if it is transactional.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
struct ProducerView {
    producer_id: i64,
    producer_epoch: i16,
    transactional_id: Option<String>,
    /// The coordinator's state of the transactional ID (Empty, Ongoing, ...), while it is
    /// bound to this producer ID.
    transaction_state: Option<Cow<'static, str>>,
    /// topic name -> partitions of the transaction in progress.
    transaction_partitions: BTreeMap<String, Vec<i32>>,
    since_ms: i64,
}

/// An open connection, on the broker `node_id`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
struct ConnectionView {
    node_id: i32,
    #[serde(flatten)]
    record: ConnectionRecord,
}

/// A KIP-1313 rejection, by the broker `node_id` (its `connection` is that broker's).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
struct RejectionView {
    node_id: i32,
    #[serde(flatten)]
    rejection: Rejection,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(super) struct InstanceView {
    /// The KIP-1313 client instance ID, or null for a connection without one.
    client_instance_id: Option<String>,
    connections: Vec<ConnectionView>,
    memberships: Vec<Membership>,
    /// Producer IDs InitProducerId handed to it (idempotent and transactional producers).
    producers: Vec<ProducerView>,
    kip1313_rejections: Vec<RejectionView>,
    /// KIP-714: the instance's subscription and latest pushed metrics, if it pushes
    /// (`skiff_telemetry::InstanceView` as JSON).
    telemetry: Option<serde_json::Value>,
    /// With telemetry: whether its telemetry ID is the UUID the instance also goes by as a
    /// KIP-1313 ID (an open connection's) or as a group member ID, in any encoding.
    #[serde(default)]
    telemetry_aligned: Option<bool>,
    /// Records behind over all its memberships, and the most seconds behind (see
    /// [`crate::lag`]); null when unknown.
    #[serde(default)]
    lag_records: Option<i64>,
    #[serde(default)]
    lag_seconds: Option<f64>,
}

/// What a broker publishes of its client instances in cluster mode (read back entry by entry,
/// so that one entry this broker cannot read does not hide the others).
#[derive(Serialize, Deserialize)]
struct Summary<T> {
    instances: Vec<T>,
}

/// A member ID as the client instance ID it should be (KIP-1082), in any of the encodings
/// clients write UUIDs in (librdkafka's standard base64, hyphenated hex, ...).
fn member_uuid(member_id: &str) -> Option<Uuid> {
    uuid_text::decode(member_id).map(|(id, _)| id)
}

/// Whether a member ID is its client instance's UUID (aligned), and how it writes a UUID if
/// it is one.
fn alignment(instance: Option<Uuid>, member_id: &str) -> (bool, Option<Cow<'static, str>>) {
    match uuid_text::decode(member_id) {
        Some((id, encoding)) => (instance == Some(id), Some(Cow::Borrowed(encoding.name()))),
        None => (false, None),
    }
}

/// A membership of `instance` with its alignment filled in.
#[allow(clippy::too_many_arguments)]
fn membership(
    instance: Option<Uuid>,
    group: &str,
    protocol: &'static str,
    member_id: String,
    member_epoch: Option<i32>,
    assigned: BTreeMap<String, Vec<i32>>,
    acquired_records: Option<u64>,
) -> Membership {
    let (aligned, encoding) = alignment(instance, &member_id);
    Membership {
        group: group.to_string(),
        protocol: Cow::Borrowed(protocol),
        member_id,
        member_epoch,
        assigned,
        member_id_differs: !aligned,
        aligned,
        member_id_encoding: encoding,
        acquired_records,
        partitions: Vec::new(),
        lag_records: None,
        lag_seconds: None,
    }
}

/// Topic ID -> partitions as topic name -> partitions (an ID the image does not know as
/// itself).
fn by_name(
    topics: &skiff_group::TopicsImage,
    assignment: &skiff_group::consumer::Assignment,
) -> BTreeMap<String, Vec<i32>> {
    assignment
        .iter()
        .map(|(topic, parts)| {
            let name = topics
                .by_id(*topic)
                .map_or_else(|| topic.to_string(), |(n, _)| n.to_string());
            (name, parts.iter().copied().collect())
        })
        .collect()
}

/// A membership as gathered under the coordinator's lock: its instance, the membership, and
/// its assigned partitions with the member's positions (for the lag figures, read after).
type Gathered = (Option<Uuid>, Membership, Vec<Assigned>);

/// A classic member's assignment as partitions by topic name, when its group speaks the
/// consumer protocol (other protocols' assignments are opaque).
fn classic_assignment(
    group_id: &str,
    protocol_type: Option<&str>,
    bytes: &[u8],
) -> BTreeMap<String, Vec<i32>> {
    if protocol_type != Some(skiff_group::embedded::CONSUMER_PROTOCOL_TYPE) {
        return BTreeMap::new();
    }
    match skiff_group::embedded::decode_assignment(bytes) {
        Ok(assignment) => assignment.partitions,
        Err(e) => {
            tracing::debug!(group = group_id, error = %e.message, "a classic member's assignment is unreadable");
            BTreeMap::new()
        }
    }
}

/// Every membership of the groups this broker coordinates (and, in cluster mode, the share
/// records it leads for groups coordinated elsewhere), with what the lag figures need of the
/// coordinator, copied while its lock is held.
fn gather_memberships(broker: &Broker) -> Vec<Gathered> {
    // Counted before the coordinator's lock is taken: the share-partition leader writes through
    // the coordinator while it holds a share partition's lock.
    let acquired = broker.share.acquired_by_member();
    let inner = broker.groups.lock(broker, now_ms());
    let mut out = Vec::new();
    for (group_id, group) in &inner.groups {
        match group {
            Group::Consumer(g) => {
                for member in g.members() {
                    let id = member.member_id().to_string();
                    let instance = broker
                        .clients
                        .member_instance(group_id, &id)
                        .or_else(|| member_uuid(&id));
                    let assigned = by_name(&inner.topics, member.assigned_partitions());
                    let positions = consumer_positions(&inner, group_id, &assigned);
                    let epoch = Some(member.member_epoch());
                    out.push((
                        instance,
                        membership(
                            instance,
                            group_id,
                            // A classic member of a consumer group (online migration).
                            if member.uses_classic_protocol() {
                                "classic"
                            } else {
                                "consumer"
                            },
                            id,
                            epoch,
                            assigned,
                            None,
                        ),
                        positions,
                    ));
                }
            }
            // KIP-932: the member ID is the share consumer's instance ID (Kafka's clients and
            // Skiff's use it so).
            Group::Share(g) => {
                for member in g.members() {
                    let id = member.member_id().to_string();
                    let instance = broker
                        .clients
                        .member_instance(group_id, &id)
                        .or_else(|| member_uuid(&id));
                    let held = acquired
                        .get(&(group_id.clone(), id.clone()))
                        .copied()
                        .unwrap_or(0);
                    let assigned = by_name(&inner.topics, member.assigned_partitions());
                    // In cluster mode a share partition's state is its leader's, in PostgreSQL:
                    // the coordinator's copy is not current, so no lag is shown from it.
                    let positions = if broker.cluster().is_some() {
                        Vec::new()
                    } else {
                        share_positions(&inner, group_id, &assigned)
                    };
                    let epoch = Some(member.member_epoch());
                    out.push((
                        instance,
                        membership(instance, group_id, "share", id, epoch, assigned, Some(held)),
                        positions,
                    ));
                }
            }
            Group::Classic(g) => {
                for member in g.members() {
                    let id = member.member_id.to_string();
                    let instance = broker.clients.member_instance(group_id, &id);
                    let assigned =
                        classic_assignment(group_id, g.protocol_type(), member.assignment);
                    let positions = consumer_positions(&inner, group_id, &assigned);
                    out.push((
                        instance,
                        membership(instance, group_id, "classic", id, None, assigned, None),
                        positions,
                    ));
                }
            }
        }
    }
    // Cluster mode: the share partitions this broker leads hold records for members of groups
    // coordinated elsewhere; their counts go out as partial memberships (no epoch, no
    // assignment), summed with the coordinator's entry when views are merged.
    if broker.cluster().is_some() {
        for ((group_id, member_id), held) in &acquired {
            if inner.groups.contains_key(group_id) || *held == 0 {
                continue;
            }
            let instance = broker
                .clients
                .member_instance(group_id, member_id)
                .or_else(|| member_uuid(member_id));
            out.push((
                instance,
                membership(
                    instance,
                    group_id,
                    "share",
                    member_id.clone(),
                    None,
                    BTreeMap::new(),
                    Some(*held),
                ),
                Vec::new(),
            ));
        }
    }
    out
}

/// The gathered memberships with their lag figures, read now that the coordinator's lock is
/// released.
fn with_lag(broker: &Broker, gathered: Vec<Gathered>) -> Vec<(Option<Uuid>, Membership)> {
    let now = now_ms();
    gathered
        .into_iter()
        .map(|(instance, mut membership, assigned)| {
            if !assigned.is_empty() {
                membership.set_lag(figures(broker, &assigned, now));
            }
            (instance, membership)
        })
        .collect()
}

/// Every membership this broker knows, with its lag.
pub(super) fn memberships(broker: &Broker) -> Vec<(Option<Uuid>, Membership)> {
    with_lag(broker, gather_memberships(broker))
}

fn producers(broker: &Broker, instance: Uuid) -> Vec<ProducerView> {
    let notes = broker.clients.producers_of(instance);
    if notes.is_empty() {
        return Vec::new();
    }
    let txns = broker.txns.lock();
    notes
        .into_iter()
        .map(|note| {
            let txn = note
                .transactional_id
                .as_deref()
                .and_then(|id| txns.state.get(id))
                .filter(|t| t.producer_id == note.producer_id);
            let mut partitions: BTreeMap<String, Vec<i32>> = Default::default();
            for (topic, index) in txn.map(|t| &t.partitions).into_iter().flatten() {
                partitions.entry(topic.clone()).or_default().push(*index);
            }
            ProducerView {
                producer_id: note.producer_id,
                producer_epoch: txn.map_or(note.producer_epoch, |t| t.producer_epoch),
                transaction_state: txn.map(|t| Cow::Borrowed(t.state.name())),
                transaction_partitions: partitions,
                transactional_id: note.transactional_id,
                since_ms: note.at_ms,
            }
        })
        .collect()
}

/// The KIP-714 view of every instance that pushes (as JSON), by instance ID.
fn telemetry_views(broker: &Broker) -> HashMap<String, serde_json::Value> {
    broker
        .lock_telemetry()
        .instances()
        .into_iter()
        .filter_map(|v| {
            let id = v.client_instance_id.clone();
            match serde_json::to_value(v) {
                Ok(json) => Some((id, json)),
                Err(e) => {
                    tracing::debug!(error = %e, client_instance_id = %id, "telemetry view not shown");
                    None
                }
            }
        })
        .collect()
}

fn rejections(broker: &Broker, instance: Option<Uuid>) -> Vec<RejectionView> {
    let node_id = broker.node_id();
    broker
        .clients
        .rejections_of(instance)
        .into_iter()
        .map(|rejection| RejectionView { node_id, rejection })
        .collect()
}

/// What this broker knows of one client instance, from what it gathered.
fn instance_view(
    broker: &Broker,
    id: Uuid,
    connections: &[ConnectionView],
    members: &[(Option<Uuid>, Membership)],
    telemetry: &HashMap<String, serde_json::Value>,
) -> InstanceView {
    let text = id.to_string();
    InstanceView {
        connections: connections
            .iter()
            .filter(|c| c.record.instance() == Some(&text))
            .cloned()
            .collect(),
        memberships: members
            .iter()
            .filter(|(i, _)| *i == Some(id))
            .map(|(_, m)| m.clone())
            .collect(),
        producers: producers(broker, id),
        kip1313_rejections: rejections(broker, Some(id)),
        telemetry: telemetry.get(&text).cloned(),
        telemetry_aligned: None,
        lag_records: None,
        lag_seconds: None,
        client_instance_id: Some(text),
    }
}

/// Fills in [`InstanceView::telemetry_aligned`] from the entry's connections and memberships.
fn mark_telemetry_alignment(views: &mut [InstanceView]) {
    for view in views {
        view.telemetry_aligned = view.telemetry.as_ref().map(|_| {
            let id = view.client_instance_id.as_deref();
            id.is_some()
                && (view
                    .connections
                    .iter()
                    .any(|c| c.record.client_instance_id.as_deref() == id)
                    || view.memberships.iter().any(|m| m.aligned))
        });
    }
}

/// What `/metrics` counts of identity alignment on this broker.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Alignment {
    /// Group memberships whose member ID is their client instance's UUID, and the others.
    pub memberships_aligned: u64,
    pub memberships_unaligned: u64,
    /// Member IDs by how they write a UUID (`other`: not a UUID).
    pub member_id_encodings: BTreeMap<&'static str, u64>,
    /// Client instances pushing telemetry whose telemetry ID is also their KIP-1313 ID or a
    /// member ID, and the others.
    pub telemetry_aligned: u64,
    pub telemetry_unaligned: u64,
}

/// Counts this broker's memberships (`members`: of the groups it coordinates) and telemetry
/// instances by alignment.
pub(super) fn alignment_counts(
    broker: &Broker,
    members: &[(Option<Uuid>, Membership)],
) -> Alignment {
    let mut counts = Alignment::default();
    for name in uuid_text::Encoding::ALL.map(uuid_text::Encoding::name) {
        counts.member_id_encodings.insert(name, 0);
    }
    counts.member_id_encodings.insert("other", 0);
    // Partial share entries (records led here for a group coordinated elsewhere) are the other
    // broker's memberships.
    let own = members.iter().filter(|(_, m)| !m.is_partial_share());
    for (_, m) in own {
        if m.aligned {
            counts.memberships_aligned += 1;
        } else {
            counts.memberships_unaligned += 1;
        }
        let encoding = uuid_text::decode(&m.member_id).map_or("other", |(_, e)| e.name());
        *counts.member_id_encodings.entry(encoding).or_default() += 1;
    }
    let connected: std::collections::HashSet<String> = broker
        .clients
        .connections()
        .into_iter()
        .filter_map(|c| c.client_instance_id)
        .collect();
    let telemetry: Vec<String> = broker
        .lock_telemetry()
        .instances()
        .into_iter()
        .map(|v| v.client_instance_id)
        .collect();
    for id in telemetry {
        let as_member = id
            .parse::<Uuid>()
            .ok()
            .is_some_and(|u| members.iter().any(|(i, m)| *i == Some(u) && m.aligned));
        if connected.contains(&id) || as_member {
            counts.telemetry_aligned += 1;
        } else {
            counts.telemetry_unaligned += 1;
        }
    }
    counts
}

/// Each client instance's lag over the memberships of the groups this broker coordinates
/// (`members`), by instance ID; instances without a known figure are left out.
pub(super) fn lag_by_instance(members: &[(Option<Uuid>, Membership)]) -> BTreeMap<String, Totals> {
    let mut by_instance: BTreeMap<String, Totals> = BTreeMap::new();
    for (instance, m) in members {
        let (Some(instance), lag) = (instance, m.lag()) else {
            continue;
        };
        if lag == Totals::default() {
            continue;
        }
        let entry = by_instance.entry(instance.to_string()).or_default();
        *entry = lag::totals([*entry, lag]);
    }
    by_instance
}

/// This broker's own view: its client instances by ID, then its connections without one.
fn instance_views(broker: &Broker) -> Vec<InstanceView> {
    instance_views_of(broker, memberships(broker))
}

/// [`instance_views`] with the memberships already gathered.
fn instance_views_of(
    broker: &Broker,
    members: Vec<(Option<Uuid>, Membership)>,
) -> Vec<InstanceView> {
    let node_id = broker.node_id();
    let connections: Vec<ConnectionView> = broker
        .clients
        .connections()
        .into_iter()
        .map(|record| ConnectionView { node_id, record })
        .collect();
    let telemetry = telemetry_views(broker);
    let mut ids = broker.clients.known_instances();
    ids.extend(members.iter().filter_map(|(i, _)| *i));
    ids.extend(broker.clients.producer_instances());
    ids.extend(telemetry.keys().filter_map(|k| k.parse::<Uuid>().ok()));
    ids.extend(connections.iter().filter_map(|c| {
        c.record
            .telemetry_instance_id
            .as_deref()?
            .parse::<Uuid>()
            .ok()
    }));
    ids.sort();
    ids.dedup();
    let mut views: Vec<InstanceView> = ids
        .into_iter()
        .map(|id| instance_view(broker, id, &connections, &members, &telemetry))
        .collect();
    views.extend(
        connections
            .into_iter()
            .filter(|c| c.record.instance().is_none())
            .map(|c| InstanceView {
                client_instance_id: None,
                connections: vec![c],
                memberships: Vec::new(),
                producers: Vec::new(),
                kip1313_rejections: Vec::new(),
                telemetry: None,
                telemetry_aligned: None,
                lag_records: None,
                lag_seconds: None,
            }),
    );
    views
}

/// This broker's client instances as it publishes them in cluster mode (`Null`, not
/// published, if they do not serialize).
fn client_summary(broker: &Broker) -> serde_json::Value {
    let summary = Summary {
        instances: instance_views(broker),
    };
    let mut value = serde_json::to_value(summary).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "this broker's client summary does not serialize");
        serde_json::Value::Null
    });
    if value.to_string().len() > SUMMARY_MAX_BYTES {
        omit_recent_values(&mut value);
    }
    if value.to_string().len() > SUMMARY_MAX_BYTES {
        omit_metrics(&mut value);
    }
    value
}

/// The telemetry metrics of a summary's instances (for changing them in place).
fn summary_metrics(
    summary: &mut serde_json::Value,
) -> impl Iterator<Item = &mut serde_json::Value> {
    summary
        .get_mut("instances")
        .and_then(serde_json::Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(|instance| instance.get_mut("telemetry")?.get_mut("metrics"))
}

/// Leaves out the series' recent values (the charts of the broker the client pushes to still
/// have them), the first thing to go from a summary that is too large.
fn omit_recent_values(summary: &mut serde_json::Value) {
    for metrics in summary_metrics(summary) {
        for point in metrics.as_array_mut().into_iter().flatten() {
            if let Some(point) = point.as_object_mut() {
                point.remove("recent");
            }
        }
    }
}

/// A summary larger than this is published without its instances' latest metric values (their
/// telemetry says `metrics_omitted`; this broker's own view still has them).
const SUMMARY_MAX_BYTES: usize = 4 << 20;

fn omit_metrics(summary: &mut serde_json::Value) {
    let instances = summary
        .get_mut("instances")
        .and_then(serde_json::Value::as_array_mut);
    for instance in instances.into_iter().flatten() {
        if let Some(telemetry) = instance
            .get_mut("telemetry")
            .and_then(serde_json::Value::as_object_mut)
        {
            telemetry.insert("metrics".into(), serde_json::Value::Array(Vec::new()));
            telemetry.insert("metrics_omitted".into(), serde_json::Value::Bool(true));
        }
    }
}

/// Publishes this broker's client instances for the other brokers' views until the broker
/// stops (cluster mode; on a single node it returns at once).
pub(crate) async fn publish_clients(broker: Arc<Broker>, shutdown: watch::Receiver<bool>) {
    let Some(cluster) = broker.cluster().cloned() else {
        return;
    };
    crate::cluster::clients::publish(cluster, move || client_summary(&broker), shutdown).await;
}

/// Another broker's published summary as views; entries this broker cannot read are left out.
fn decode_summary(node_id: i32, body: serde_json::Value) -> Vec<InstanceView> {
    let summary: Summary<serde_json::Value> = match serde_json::from_value(body) {
        Ok(summary) => summary,
        Err(e) => {
            tracing::debug!(node_id, error = %e, "a broker's client summary is unreadable");
            return Vec::new();
        }
    };
    summary
        .instances
        .into_iter()
        .filter_map(|entry| {
            serde_json::from_value::<InstanceView>(entry)
                .map_err(|e| {
                    tracing::debug!(node_id, error = %e, "an entry of a broker's client summary is unreadable");
                })
                .ok()
        })
        .map(|mut view| {
            // A broker from before `aligned` sends `member_id_differs` alone.
            for m in &mut view.memberships {
                m.aligned = !m.member_id_differs;
            }
            view
        })
        .collect()
}

/// Adds the items of `more` that `into` does not have yet.
/// One entry per share membership (group, member ID): the records held acquired on every
/// broker summed, the epoch and assignment from the coordinator's entry (cluster mode, where
/// each share-partition leader reports what it holds).
fn fold_share_memberships(memberships: &mut Vec<Membership>) {
    let mut folded: Vec<Membership> = Vec::with_capacity(memberships.len());
    for m in memberships.drain(..) {
        let same = folded.iter_mut().find(|f| {
            f.protocol == "share"
                && m.protocol == "share"
                && f.group == m.group
                && f.member_id == m.member_id
        });
        match same {
            Some(f) => {
                f.acquired_records = match (f.acquired_records, m.acquired_records) {
                    (Some(a), Some(b)) => Some(a.saturating_add(b)),
                    (a, b) => a.or(b),
                };
                if f.member_epoch.is_none() {
                    f.member_epoch = m.member_epoch;
                    f.assigned = m.assigned;
                    f.partitions = m.partitions;
                    f.lag_records = m.lag_records;
                    f.lag_seconds = m.lag_seconds;
                    f.member_id_differs = m.member_id_differs;
                    f.aligned = m.aligned;
                    f.member_id_encoding = m.member_id_encoding;
                }
            }
            None => folded.push(m),
        }
    }
    *memberships = folded;
}

fn union<T: PartialEq>(into: &mut Vec<T>, more: Vec<T>) {
    for item in more {
        if !into.contains(&item) {
            into.push(item);
        }
    }
}

/// When a telemetry view was last pushed to (then fetched from): the newer view wins.
fn pushed(telemetry: &serde_json::Value) -> (Option<i64>, Option<i64>) {
    let at = |key: &str| telemetry.get(key).and_then(serde_json::Value::as_i64);
    (at("last_push_ms"), at("last_get_ms"))
}

/// The telemetry view pushed to last (`a` on a tie), or whichever there is.
fn latest(a: Option<serde_json::Value>, b: Option<serde_json::Value>) -> Option<serde_json::Value> {
    match (a, b) {
        (Some(a), Some(b)) if pushed(&b) > pushed(&a) => Some(b),
        (a, b) => a.or(b),
    }
}

/// Where an entry goes in the view: see [`InstanceView::order`].
type OrderKey = (bool, Option<Uuid>, Option<String>, Option<(i32, u64)>);

impl InstanceView {
    /// Takes in another broker's view of the same client instance.
    fn absorb(&mut self, other: InstanceView) {
        self.connections.extend(other.connections);
        self.connections.sort_by_key(|c| (c.node_id, c.record.id));
        union(&mut self.memberships, other.memberships);
        fold_share_memberships(&mut self.memberships);
        union(&mut self.producers, other.producers);
        self.producers.sort_by_key(|p| (p.since_ms, p.producer_id));
        union(&mut self.kip1313_rejections, other.kip1313_rejections);
        self.kip1313_rejections.sort_by_key(|r| r.rejection.at_ms);
        self.telemetry = latest(self.telemetry.take(), other.telemetry);
    }

    /// Instances by ID first (in ID order), then connections without one (by broker, then
    /// connection).
    fn order(&self) -> OrderKey {
        let id = self.client_instance_id.as_deref();
        (
            id.is_none(),
            id.and_then(|i| i.parse().ok()),
            id.map(str::to_string),
            self.connections.first().map(|c| (c.node_id, c.record.id)),
        )
    }
}

/// Merges other brokers' views into this broker's: one entry per client instance ID (see
/// [`InstanceView::absorb`]); connections without an ID stay one entry each.
fn merge(
    local: Vec<InstanceView>,
    peers: impl IntoIterator<Item = Vec<InstanceView>>,
) -> Vec<InstanceView> {
    let mut merged: Vec<InstanceView> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for view in local.into_iter().chain(peers.into_iter().flatten()) {
        let at = view
            .client_instance_id
            .as_ref()
            .and_then(|id| index.get(id))
            .copied();
        match at.and_then(|at| merged.get_mut(at)) {
            Some(entry) => entry.absorb(view),
            None => {
                if let Some(id) = &view.client_instance_id {
                    index.insert(id.clone(), merged.len());
                }
                merged.push(view);
            }
        }
    }
    merged.sort_by_cached_key(InstanceView::order);
    merged
}

/// The view shown: this broker's, merged in cluster mode with the other live brokers'
/// summaries (this broker's alone when PostgreSQL does not answer).
async fn views(broker: &Broker) -> Vec<InstanceView> {
    let mut views = gathered(broker).await;
    mark_telemetry_alignment(&mut views);
    mark_lag(&mut views);
    views
}

/// Fills in each entry's lag totals from its memberships.
fn mark_lag(views: &mut [InstanceView]) {
    for view in views {
        let totals = lag::totals(view.memberships.iter().map(Membership::lag));
        view.lag_records = totals.records;
        view.lag_seconds = totals.seconds;
    }
}

async fn gathered(broker: &Broker) -> Vec<InstanceView> {
    let Some(cluster) = broker.cluster() else {
        return instance_views(broker);
    };
    let peers = crate::cluster::clients::peer_summaries(cluster).await;
    // Offsets of assigned partitions this broker has not heard of yet, asked for first.
    let gathered = gather_memberships(broker);
    let assigned: Vec<Assigned> = gathered.iter().flat_map(|(_, _, a)| a.clone()).collect();
    learn_cluster_offsets(broker, &assigned).await;
    let local = instance_views_of(broker, with_lag(broker, gathered));
    match peers {
        Ok(peers) => merge(
            local,
            peers
                .into_iter()
                .map(|(node_id, body)| decode_summary(node_id, body)),
        ),
        Err(e) => {
            tracing::debug!(error = %format!("{e:#}"), "reading the other brokers' client summaries failed; showing this broker's");
            local
        }
    }
}

pub(super) async fn clients(State(broker): State<Arc<Broker>>) -> Json<Vec<InstanceView>> {
    Json(views(&broker).await)
}

/// A group as `GET /groups/{id}` shows it.
#[derive(Serialize, Debug)]
struct GroupView {
    group: String,
    #[serde(rename = "type")]
    group_type: &'static str,
    state: &'static str,
    members: Vec<GroupMemberView>,
}

/// A member of a group, with the client instance it belongs to.
#[derive(Serialize, Debug)]
struct GroupMemberView {
    client_instance_id: Option<String>,
    #[serde(flatten)]
    membership: Membership,
}

/// `GET /groups/{id}` (the ID percent-encoded): one group as this broker's coordinator holds it,
/// its members with their client instances, epochs and assignments, and for a share group's
/// members the records each holds acquired now (the Kafka protocol's ShareGroupDescribe has no
/// field for them; `skiff group describe` reads them here). 404 for a group this broker does
/// not have.
pub(super) async fn group(State(broker): State<Arc<Broker>>, Path(id): Path<String>) -> Response {
    // Cluster mode: the other brokers' share-partition leaders' counts, from their summaries.
    let mut elsewhere: HashMap<String, u64> = HashMap::new();
    if let Some(cluster) = broker.cluster()
        && let Ok(peers) = crate::cluster::clients::peer_summaries(cluster).await
    {
        for (node_id, body) in peers {
            for view in decode_summary(node_id, body) {
                for m in view.memberships {
                    if m.group == id && m.protocol == "share" {
                        let n = elsewhere.entry(m.member_id).or_default();
                        *n = n.saturating_add(m.acquired_records.unwrap_or(0));
                    }
                }
            }
        }
    }
    let members: Vec<GroupMemberView> = memberships(&broker)
        .into_iter()
        // This broker's own partial entries (records it leads for a group coordinated
        // elsewhere) are not this group's members here.
        .filter(|(_, m)| m.group == id && !m.is_partial_share())
        .map(|(instance, mut membership)| {
            if let Some(n) = elsewhere.get(&membership.member_id) {
                membership.acquired_records =
                    Some(membership.acquired_records.unwrap_or(0).saturating_add(*n));
            }
            GroupMemberView {
                client_instance_id: instance.map(|i| i.to_string()),
                membership,
            }
        })
        .collect();
    let found = {
        let inner = broker.groups.lock(&broker, now_ms());
        inner
            .groups
            .get(&id)
            .map(|g| (g.type_name(), g.state_name()))
    };
    match found {
        Some((group_type, state)) => Json(GroupView {
            group: id,
            group_type,
            state,
            members,
        })
        .into_response(),
        None => (StatusCode::NOT_FOUND, "unknown group").into_response(),
    }
}

/// The ID of a `/clients/{id}` path, in any encoding of a UUID (see [`crate::uuid_text`]).
pub(super) fn path_instance(id: &str) -> Option<Uuid> {
    uuid_text::decode(id).map(|(id, _)| id)
}

/// The answer to a `/clients/{id}` path whose ID is no UUID.
pub(super) fn not_an_instance_id() -> Response {
    (
        StatusCode::BAD_REQUEST,
        "not a client instance ID (a UUID as Kafka's URL-safe base64, standard base64, or hex)",
    )
        .into_response()
}

pub(super) async fn client(State(broker): State<Arc<Broker>>, Path(id): Path<String>) -> Response {
    let Some(uuid) = path_instance(&id) else {
        return not_an_instance_id();
    };
    let id = uuid.to_string();
    match views(&broker)
        .await
        .into_iter()
        .find(|v| v.client_instance_id.as_deref() == Some(&id))
    {
        Some(view) => Json(view).into_response(),
        None => (StatusCode::NOT_FOUND, "unknown client instance").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn connection(node_id: i32, id: u64, instance: Option<Uuid>) -> ConnectionView {
        let peer = "127.0.0.1:5000".parse().expect("addr");
        let mut record = ConnectionRecord::new(id, peer, "PLAINTEXT", 10);
        record.count(skiff_protocol::ApiKey::Metadata, Some("app"));
        record.client_instance_id = instance.map(|i| i.to_string());
        ConnectionView { node_id, record }
    }

    fn membership(group: &str, member_id: &str) -> Membership {
        Membership {
            group: group.into(),
            protocol: Cow::Borrowed("consumer"),
            member_id: member_id.into(),
            member_epoch: Some(3),
            assigned: BTreeMap::from([("t".to_string(), vec![0, 1])]),
            member_id_differs: false,
            aligned: true,
            member_id_encoding: None,
            acquired_records: None,
            partitions: Vec::new(),
            lag_records: None,
            lag_seconds: None,
        }
    }

    fn producer(producer_id: i64, since_ms: i64) -> ProducerView {
        ProducerView {
            producer_id,
            producer_epoch: 0,
            transactional_id: None,
            transaction_state: None,
            transaction_partitions: BTreeMap::new(),
            since_ms,
        }
    }

    fn telemetry(last_push_ms: Option<i64>, client_id: &str) -> serde_json::Value {
        json!({"client_id": client_id, "last_push_ms": last_push_ms, "last_get_ms": 1, "metrics": []})
    }

    fn instance(id: Uuid, connections: Vec<ConnectionView>) -> InstanceView {
        InstanceView {
            client_instance_id: Some(id.to_string()),
            connections,
            memberships: Vec::new(),
            producers: Vec::new(),
            kip1313_rejections: Vec::new(),
            telemetry: None,
            telemetry_aligned: None,
            lag_records: None,
            lag_seconds: None,
        }
    }

    fn anonymous(connection: ConnectionView) -> InstanceView {
        InstanceView {
            client_instance_id: None,
            connections: vec![connection],
            ..instance(Uuid::from_u128(0), Vec::new())
        }
    }

    fn full(id: Uuid, node_id: i32) -> InstanceView {
        let mut view = instance(id, vec![connection(node_id, 4, Some(id))]);
        view.memberships = vec![membership("g", &id.to_string())];
        view.producers = vec![producer(1000, 20)];
        view.kip1313_rejections = vec![RejectionView {
            node_id,
            rejection: Rejection {
                at_ms: 30,
                connection: 4,
                api: Cow::Borrowed("Produce"),
                reason: Cow::Borrowed("different_id"),
                expected: Some(id.to_string()),
                received: Some(Uuid::from_u128(99).to_string()),
            },
        }];
        view.telemetry = Some(telemetry(Some(40), "app"));
        view
    }

    fn summary_of(views: Vec<InstanceView>) -> serde_json::Value {
        serde_json::to_value(Summary { instances: views }).expect("serializes")
    }

    #[test]
    fn a_summary_round_trips() {
        let a = Uuid::from_u128(7);
        let views = vec![full(a, 2), anonymous(connection(2, 5, None))];
        let body = summary_of(views.clone());
        assert_eq!(body["instances"][0]["connections"][0]["node_id"], 2);
        assert_eq!(
            body["instances"][0]["connections"][0]["requests"]["Metadata"],
            1
        );
        assert_eq!(decode_summary(2, body), views);
    }

    #[test]
    fn unreadable_summaries_and_entries_are_left_out() {
        let a = Uuid::from_u128(7);
        let mut body = summary_of(vec![full(a, 2)]);
        if let Some(list) = body["instances"].as_array_mut() {
            list.push(json!({"client_instance_id": 5}));
        }
        assert_eq!(decode_summary(2, body), vec![full(a, 2)]);
        assert!(decode_summary(2, json!([1, 2])).is_empty());
        assert!(decode_summary(2, serde_json::Value::Null).is_empty());
    }

    #[test]
    fn share_memberships_sum_what_every_leader_holds() {
        let a = Uuid::from_u128(1);
        let share = |epoch: Option<i32>, held: u64| Membership {
            group: "sg".into(),
            protocol: Cow::Borrowed("share"),
            member_id: a.to_string(),
            member_epoch: epoch,
            assigned: if epoch.is_some() {
                BTreeMap::from([("t".to_string(), vec![0, 1])])
            } else {
                BTreeMap::new()
            },
            member_id_differs: false,
            aligned: true,
            member_id_encoding: None,
            acquired_records: Some(held),
            partitions: Vec::new(),
            lag_records: None,
            lag_seconds: None,
        };
        // A leader's partial entry first, then the coordinator's, then another leader's.
        let mut here = instance(a, Vec::new());
        here.memberships = vec![share(None, 4)];
        let mut coordinator = instance(a, Vec::new());
        coordinator.memberships = vec![share(Some(7), 2), membership("g", "c")];
        let mut other = instance(a, Vec::new());
        other.memberships = vec![share(None, 3)];
        let merged = merge(vec![here], [vec![coordinator], vec![other]]);
        assert_eq!(merged.len(), 1);
        assert_eq!(
            merged[0].memberships,
            vec![share(Some(7), 9), membership("g", "c")],
            "one share membership, with the coordinator's epoch and assignment"
        );
    }

    #[test]
    fn merges_one_instance_across_brokers() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut local = full(a, 1);
        local.telemetry = None;
        let mut remote = full(a, 2);
        remote.memberships.push(membership("other", "m"));
        remote.producers.push(producer(2000, 10));
        let merged = merge(
            vec![local.clone(), anonymous(connection(1, 9, None))],
            [vec![
                remote.clone(),
                anonymous(connection(2, 3, None)),
                instance(b, Vec::new()),
            ]],
        );
        let ids: Vec<Option<String>> = merged
            .iter()
            .map(|v| v.client_instance_id.clone())
            .collect();
        assert_eq!(
            ids,
            vec![Some(a.to_string()), Some(b.to_string()), None, None]
        );
        let entry = &merged[0];
        let on: Vec<(i32, u64)> = entry
            .connections
            .iter()
            .map(|c| (c.node_id, c.record.id))
            .collect();
        assert_eq!(
            on,
            vec![(1, 4), (2, 4)],
            "each connection labelled with its node"
        );
        assert_eq!(
            entry.memberships,
            vec![membership("g", &a.to_string()), membership("other", "m")],
            "equal memberships once"
        );
        assert_eq!(
            entry.producers,
            vec![producer(2000, 10), producer(1000, 20)]
        );
        assert_eq!(
            entry.kip1313_rejections.len(),
            2,
            "rejections by different brokers"
        );
        assert_eq!(entry.telemetry, remote.telemetry, "the only telemetry");
        let anonymous_on: Vec<(i32, u64)> = merged[2..]
            .iter()
            .map(|v| (v.connections[0].node_id, v.connections[0].record.id))
            .collect();
        assert_eq!(anonymous_on, vec![(1, 9), (2, 3)]);
    }

    #[test]
    fn telemetry_pushed_to_last_wins() {
        let a = Uuid::from_u128(1);
        let with = |push: Option<i64>, client: &str| {
            let mut view = instance(a, Vec::new());
            view.telemetry = Some(telemetry(push, client));
            view
        };
        let merged = merge(vec![with(Some(5), "old")], [vec![with(Some(8), "new")]]);
        assert_eq!(merged[0].telemetry, Some(telemetry(Some(8), "new")));
        let merged = merge(vec![with(Some(8), "here")], [vec![with(Some(5), "there")]]);
        assert_eq!(merged[0].telemetry, Some(telemetry(Some(8), "here")));
        let merged = merge(vec![with(None, "fetched")], [vec![with(Some(1), "pushed")]]);
        assert_eq!(merged[0].telemetry, Some(telemetry(Some(1), "pushed")));
        let merged = merge(vec![with(Some(3), "here")], [vec![with(Some(3), "tie")]]);
        assert_eq!(
            merged[0].telemetry,
            Some(telemetry(Some(3), "here")),
            "a tie keeps ours"
        );
    }

    #[test]
    fn member_ids_in_either_base64_alphabet_are_instance_ids() {
        let id = Uuid::from_u128(0xfbef_ffff_0000_0000_0000_0000_0000_0000);
        let url_safe = id.to_string();
        assert!(
            url_safe.contains('-') && url_safe.contains('_'),
            "{url_safe}"
        );
        let standard = url_safe.replace('-', "+").replace('_', "/");
        assert_eq!(member_uuid(&url_safe), Some(id));
        assert_eq!(member_uuid(&standard), Some(id), "librdkafka's form");
        assert_eq!(member_uuid("not a uuid"), None);
    }

    #[test]
    fn a_member_id_in_any_encoding_is_aligned() {
        let id = Uuid::from_u128(0xfbef_ffff_1234_5678_9abc_def0_0fed_cba9);
        let other = Uuid::from_u128(7);
        for encoding in uuid_text::Encoding::ALL {
            let text = encoding.encode(id);
            let (aligned, name) = alignment(Some(id), &text);
            assert!(aligned, "{text}");
            assert_eq!(name.as_deref(), Some(encoding.name()), "{text}");
            let m = super::membership(
                Some(id),
                "g",
                "consumer",
                text,
                Some(1),
                BTreeMap::new(),
                None,
            );
            assert!(m.aligned && !m.member_id_differs);
            // Someone else's UUID is a UUID, not this instance's.
            assert!(!alignment(Some(other), &encoding.encode(id)).0);
        }
        assert_eq!(alignment(Some(id), "consumer-1-xyz"), (false, None));
        assert!(!alignment(None, &id.to_string()).0);
        let classic = super::membership(
            Some(id),
            "g",
            "classic",
            "c-1".into(),
            None,
            BTreeMap::new(),
            None,
        );
        assert!(classic.member_id_differs && classic.member_id_encoding.is_none());
    }

    #[test]
    fn telemetry_is_aligned_when_the_instance_goes_by_its_id_elsewhere() {
        let a = Uuid::from_u128(1);
        let mut connected = instance(a, vec![connection(1, 4, Some(a))]);
        connected.telemetry = Some(telemetry(Some(1), "app"));
        let mut member = instance(a, Vec::new());
        member.memberships = vec![membership("g", &a.to_string())];
        member.telemetry = Some(telemetry(Some(1), "app"));
        let mut alone = instance(a, Vec::new());
        alone.telemetry = Some(telemetry(Some(1), "app"));
        let mut unaligned_member = alone.clone();
        let mut m = membership("g", "x");
        m.aligned = false;
        unaligned_member.memberships = vec![m];
        let without = instance(a, vec![connection(1, 4, Some(a))]);
        let mut views = vec![connected, member, alone, unaligned_member, without];
        mark_telemetry_alignment(&mut views);
        let marks: Vec<Option<bool>> = views.iter().map(|v| v.telemetry_aligned).collect();
        assert_eq!(
            marks,
            vec![Some(true), Some(true), Some(false), Some(false), None]
        );
    }

    #[test]
    fn without_peers_the_local_view_is_unchanged() {
        let local = vec![
            full(Uuid::from_u128(1), 1),
            full(Uuid::from_u128(2), 1),
            anonymous(connection(1, 9, None)),
        ];
        assert_eq!(merge(local.clone(), Vec::new()), local);
    }

    #[test]
    fn an_oversized_summary_leaves_the_metric_values_out() {
        let mut summary = serde_json::json!({"instances": [
            {"client_instance_id": "a", "telemetry": {"metrics": [{"name": "x"}], "subscription_id": 1}},
            {"client_instance_id": "b", "telemetry": null},
        ]});
        let mut with_recent = summary.clone();
        with_recent["instances"][0]["telemetry"]["metrics"][0]["recent"] = json!([[1, 2.0]]);
        omit_recent_values(&mut with_recent);
        assert_eq!(with_recent, summary, "only the recent values go first");
        omit_metrics(&mut summary);
        assert_eq!(
            summary["instances"][0]["telemetry"],
            serde_json::json!({"metrics": [], "metrics_omitted": true, "subscription_id": 1})
        );
        assert!(summary["instances"][1]["telemetry"].is_null());
    }
}
