//! [`MetricPoint`]: the latest value of one series of one client instance. Its own module so the
//! manager (which keeps the points) and the Prometheus renderer (which reads them) both import it
//! and neither imports the other back.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::otlp::{MetricKind, MetricValue};

/// The latest value of one series of one client instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricPoint {
    pub name: String,
    pub kind: MetricKind,
    pub attributes: BTreeMap<String, String>,
    /// For delta sums and histograms: the running total of the deltas received.
    pub value: MetricValue,
    pub time_unix_nano: u64,
    /// Broker time of the push that last updated it.
    pub updated_ms: i64,
}
