//! `GET /clients/{id}/events`: one client instance's journal as JSON, in order, for a timeline
//! (`?since=<ms>`: events at or after that time; `?after=<seq>`: events after that one, to
//! follow; `?wait_ms=<ms>`: with nothing to show yet, wait that long, at most 30 s, for the
//! next event).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use serde::Serialize;

use super::views::{not_an_instance_id, path_instance};
use crate::journal::Event;
use crate::state::Broker;

/// The longest `wait_ms` honoured.
const WAIT_MAX_MS: u64 = 30_000;

#[derive(Debug, Default, PartialEq, Eq)]
struct EventsQuery {
    since: Option<i64>,
    after: Option<u64>,
    wait_ms: Option<u64>,
}

impl EventsQuery {
    /// `since=`, `after=` and `wait_ms=` from a query string; another key or a value that is
    /// not a number is an error naming it.
    fn parse(query: Option<&str>) -> Result<EventsQuery, String> {
        let mut parsed = EventsQuery::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = || format!("{key}={value:?}: expected a whole number");
            match key {
                "since" => parsed.since = Some(value.parse().map_err(|_| bad())?),
                "after" => parsed.after = Some(value.parse().map_err(|_| bad())?),
                "wait_ms" => parsed.wait_ms = Some(value.parse().map_err(|_| bad())?),
                other => {
                    return Err(format!(
                        "unknown parameter {other:?} (since, after, wait_ms)"
                    ));
                }
            }
        }
        Ok(parsed)
    }
}

/// One event as the endpoint shows it: the journal's fields (`seq`, `at_ms`, `type` and the
/// type's own fields) with the timeline lane it belongs in and a line for people.
#[derive(Serialize)]
struct EventView {
    #[serde(flatten)]
    event: Event,
    category: &'static str,
    summary: String,
}

#[derive(Serialize)]
struct JournalView {
    client_instance_id: String,
    /// The broker whose journal this is (each broker keeps its own).
    node_id: i32,
    /// What to pass as `after` to get only newer events.
    next_after: u64,
    events: Vec<EventView>,
}

pub(super) async fn events(
    State(broker): State<Arc<Broker>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(instance) = path_instance(&id) else {
        return not_an_instance_id();
    };
    let query = match EventsQuery::parse(query.as_deref()) {
        Ok(query) => query,
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    let wait = Duration::from_millis(query.wait_ms.unwrap_or(0).min(WAIT_MAX_MS));
    let deadline = tokio::time::Instant::now() + wait;
    let mut newest = broker.journal.subscribe();
    let events = loop {
        newest.mark_unchanged();
        let events = broker.journal.events(instance, query.since, query.after);
        if !events.is_empty() || tokio::time::Instant::now() >= deadline {
            break events;
        }
        match tokio::time::timeout_at(deadline, newest.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => break broker.journal.events(instance, query.since, query.after),
        }
    };
    let next_after = events.last().map(|e| e.seq).or(query.after).unwrap_or(0);
    Json(JournalView {
        client_instance_id: instance.to_string(),
        node_id: broker.node_id(),
        next_after,
        events: events
            .into_iter()
            .map(|event| EventView {
                category: event.kind.category(),
                summary: event.kind.summary(),
                event,
            })
            .collect(),
    })
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings() {
        assert_eq!(EventsQuery::parse(None), Ok(EventsQuery::default()));
        assert_eq!(
            EventsQuery::parse(Some("since=5&after=7&wait_ms=100")),
            Ok(EventsQuery {
                since: Some(5),
                after: Some(7),
                wait_ms: Some(100)
            })
        );
        assert_eq!(
            EventsQuery::parse(Some("since=-1&")).map(|q| q.since),
            Ok(Some(-1))
        );
        assert!(EventsQuery::parse(Some("since=x")).is_err());
        assert!(EventsQuery::parse(Some("after=-1")).is_err());
        assert!(EventsQuery::parse(Some("since")).is_err());
        assert!(EventsQuery::parse(Some("other=1")).is_err());
    }
}
