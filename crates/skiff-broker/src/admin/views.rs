//! The client-instance view: `/clients`, `/clients/{id}` (JSON) and the `/ui/clients` page.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Json, Response};
use serde::Serialize;
use skiff_protocol::Uuid;

use crate::clients::{ConnectionRecord, Rejection};
use crate::clock::now_ms;
use crate::groups::Group;
use crate::state::Broker;

/// A group membership of a client instance.
#[derive(Serialize, Clone)]
struct Membership {
    group: String,
    protocol: &'static str,
    member_id: String,
    member_epoch: Option<i32>,
    /// topic name -> partitions (KIP-848 members).
    assigned: std::collections::BTreeMap<String, Vec<i32>>,
    /// The member ID is not the client instance ID (KIP-1082 recommends they be equal).
    member_id_differs: bool,
}

/// A producer ID the client instance was given, with its transaction if it is transactional.
#[derive(Serialize, Clone)]
struct ProducerView {
    producer_id: i64,
    producer_epoch: i16,
    transactional_id: Option<String>,
    /// The coordinator's state of the transactional ID (Empty, Ongoing, ...), while it is
    /// bound to this producer ID.
    transaction_state: Option<&'static str>,
    /// topic name -> partitions of the transaction in progress.
    transaction_partitions: std::collections::BTreeMap<String, Vec<i32>>,
    since_ms: i64,
}

#[derive(Serialize)]
pub(super) struct InstanceView {
    /// The KIP-1313 client instance ID, or null for a connection without one.
    client_instance_id: Option<String>,
    connections: Vec<ConnectionRecord>,
    memberships: Vec<Membership>,
    /// Producer IDs InitProducerId handed to it (idempotent and transactional producers).
    producers: Vec<ProducerView>,
    kip1313_rejections: Vec<Rejection>,
    /// KIP-714: the instance's subscription and latest pushed metrics, if it pushes.
    telemetry: Option<skiff_telemetry::InstanceView>,
}

fn memberships(broker: &Broker) -> Vec<(Option<Uuid>, Membership)> {
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
                        .or_else(|| id.parse().ok());
                    let assigned = member
                        .assigned_partitions()
                        .iter()
                        .map(|(topic, parts)| {
                            let name = inner
                                .topics
                                .by_id(*topic)
                                .map_or_else(|| topic.to_string(), |(n, _)| n.to_string());
                            (name, parts.iter().copied().collect())
                        })
                        .collect();
                    out.push((
                        instance,
                        Membership {
                            group: group_id.clone(),
                            protocol: "consumer",
                            member_epoch: Some(member.member_epoch()),
                            assigned,
                            member_id_differs: instance.is_none_or(|i| i.to_string() != id),
                            member_id: id,
                        },
                    ));
                }
            }
            Group::Classic(g) => {
                for member in g.members() {
                    let id = member.member_id.to_string();
                    let instance = broker.clients.member_instance(group_id, &id);
                    out.push((
                        instance,
                        Membership {
                            group: group_id.clone(),
                            protocol: "classic",
                            member_epoch: None,
                            assigned: Default::default(),
                            member_id_differs: instance.is_none_or(|i| i.to_string() != id),
                            member_id: id,
                        },
                    ));
                }
            }
        }
    }
    out
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
            let mut partitions: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
            for (topic, index) in txn.map(|t| &t.partitions).into_iter().flatten() {
                partitions.entry(topic.clone()).or_default().push(*index);
            }
            ProducerView {
                producer_id: note.producer_id,
                producer_epoch: txn.map_or(note.producer_epoch, |t| t.producer_epoch),
                transaction_state: txn.map(|t| t.state.name()),
                transaction_partitions: partitions,
                transactional_id: note.transactional_id,
                since_ms: note.at_ms,
            }
        })
        .collect()
}

fn instance_views(broker: &Broker) -> Vec<InstanceView> {
    let connections = broker.clients.connections();
    let members = memberships(broker);
    let telemetry: std::collections::HashMap<String, skiff_telemetry::InstanceView> = broker
        .lock_telemetry()
        .instances()
        .into_iter()
        .map(|v| (v.client_instance_id.clone(), v))
        .collect();
    let mut ids = broker.clients.known_instances();
    ids.extend(members.iter().filter_map(|(i, _)| *i));
    ids.extend(broker.clients.producer_instances());
    ids.extend(telemetry.keys().filter_map(|k| k.parse::<Uuid>().ok()));
    ids.sort();
    ids.dedup();
    let mut views: Vec<InstanceView> = ids
        .into_iter()
        .map(|id| {
            let text = id.to_string();
            InstanceView {
                connections: connections
                    .iter()
                    .filter(|c| c.client_instance_id.as_deref() == Some(&text))
                    .cloned()
                    .collect(),
                memberships: members
                    .iter()
                    .filter(|(i, _)| *i == Some(id))
                    .map(|(_, m)| m.clone())
                    .collect(),
                producers: producers(broker, id),
                kip1313_rejections: broker.clients.rejections_of(Some(id)),
                telemetry: telemetry.get(&text).cloned(),
                client_instance_id: Some(text),
            }
        })
        .collect();
    for c in connections
        .iter()
        .filter(|c| c.client_instance_id.is_none())
    {
        views.push(InstanceView {
            client_instance_id: None,
            connections: vec![c.clone()],
            memberships: Vec::new(),
            producers: Vec::new(),
            kip1313_rejections: Vec::new(),
            telemetry: None,
        });
    }
    views
}

pub(super) async fn clients(State(broker): State<Arc<Broker>>) -> Json<Vec<InstanceView>> {
    Json(instance_views(&broker))
}

pub(super) async fn client(State(broker): State<Arc<Broker>>, Path(id): Path<String>) -> Response {
    let Ok(uuid) = id.parse::<Uuid>() else {
        return (
            StatusCode::BAD_REQUEST,
            "not a Kafka UUID (22 characters of URL-safe base64)",
        )
            .into_response();
    };
    match instance_views(&broker)
        .into_iter()
        .find(|v| v.client_instance_id.as_deref() == Some(&uuid.to_string()))
    {
        Some(view) => Json(view).into_response(),
        None => (StatusCode::NOT_FOUND, "unknown client instance").into_response(),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A server-rendered page: one row per client instance, details below each.
pub(super) async fn ui(State(broker): State<Arc<Broker>>) -> Html<String> {
    let views = instance_views(&broker);
    let mut page = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Skiff clients</title><style>\
         body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}\
         td,th{border:1px solid #bbb;padding:.3em .6em;text-align:left}th{background:#eef}\
         .id{font-family:monospace}.warn{color:#a40}</style></head><body>",
    );
    let _ = write!(
        page,
        "<h1>Client instances</h1><p>Cluster <span class=\"id\">{}</span>, node {}. {} instance(s).</p>",
        escape(&broker.cluster_id),
        broker.node_id(),
        views.len()
    );
    page.push_str("<table id=\"instances\"><tr><th>client instance ID</th><th>client ID</th><th>software</th><th>connections</th><th>groups</th><th>KIP-1313 rejections</th></tr>");
    for v in &views {
        let first = v.connections.first();
        let _ = write!(
            page,
            "<tr><td class=\"id\"><a href=\"#{0}\">{0}</a></td><td>{1}</td><td>{2}</td><td>{3}</td><td>{4}</td><td>{5}</td></tr>",
            escape(v.client_instance_id.as_deref().unwrap_or("(none)")),
            escape(first.and_then(|c| c.client_id.as_deref()).unwrap_or("")),
            escape(&first.map_or(String::new(), |c| format!(
                "{} {}",
                c.software_name.as_deref().unwrap_or(""),
                c.software_version.as_deref().unwrap_or("")
            ))),
            v.connections.len(),
            escape(
                &v.memberships
                    .iter()
                    .map(|m| m.group.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            v.kip1313_rejections.len(),
        );
    }
    page.push_str("</table>");
    for v in &views {
        let id = v.client_instance_id.as_deref().unwrap_or("(none)");
        let _ = write!(page, "<h2 id=\"{0}\" class=\"id\">{0}</h2>", escape(id));
        page.push_str(
            "<table><tr><th>connection</th><th>peer</th><th>listener</th><th>principal</th><th>since (ms)</th><th>requests</th></tr>",
        );
        for c in &v.connections {
            let requests = c
                .requests
                .iter()
                .map(|(api, n)| format!("{api}: {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = write!(
                page,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                c.id,
                escape(&c.peer),
                escape(&c.listener),
                escape(c.principal.as_deref().unwrap_or("(not authenticated)")),
                c.connected_since_ms,
                escape(&requests)
            );
        }
        page.push_str("</table>");
        if !v.memberships.is_empty() {
            page.push_str("<table><tr><th>group</th><th>protocol</th><th>member ID</th><th>epoch</th><th>assigned</th></tr>");
            for m in &v.memberships {
                let assigned = m
                    .assigned
                    .iter()
                    .map(|(t, p)| format!("{t}{p:?}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                let _ = write!(
                    page,
                    "<tr><td>{}</td><td>{}</td><td class=\"id{}\">{}</td><td>{}</td><td>{}</td></tr>",
                    escape(&m.group),
                    m.protocol,
                    if m.member_id_differs { " warn" } else { "" },
                    escape(&m.member_id),
                    m.member_epoch.map_or(String::new(), |e| e.to_string()),
                    escape(&assigned)
                );
            }
            page.push_str("</table>");
        }
        if !v.producers.is_empty() {
            page.push_str("<table><tr><th>producer ID</th><th>epoch</th><th>transactional ID</th><th>transaction</th><th>partitions</th></tr>");
            for p in &v.producers {
                let partitions = p
                    .transaction_partitions
                    .iter()
                    .map(|(t, parts)| format!("{t}{parts:?}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                let _ = write!(
                    page,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    p.producer_id,
                    p.producer_epoch,
                    escape(p.transactional_id.as_deref().unwrap_or("")),
                    p.transaction_state.unwrap_or(""),
                    escape(&partitions)
                );
            }
            page.push_str("</table>");
        }
    }
    page.push_str("</body></html>");
    Html(page)
}
