//! [`MetricPoint`]: the latest value of one series of one client instance, and a short ring of
//! its recent values. Its own module so the
//! manager (which keeps the points) and the Prometheus renderer (which reads them) both import it
//! and neither imports the other back.

use std::collections::{BTreeMap, VecDeque};

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
    /// Recent values, oldest first, as (broker time of the push, value): at most
    /// [`HISTORY_POINTS`] of them, kept for the first [`HISTORY_SERIES`] series of an instance
    /// (empty for the others), for the client-instance page's charts.
    #[serde(skip_serializing_if = "VecDeque::is_empty")]
    pub recent: VecDeque<(i64, f64)>,
    /// Whether this series keeps [`MetricPoint::recent`].
    #[serde(skip)]
    pub keeps_recent: bool,
}

/// Values kept per series in [`MetricPoint::recent`].
pub const HISTORY_POINTS: usize = 30;
/// Series per client instance that keep recent values.
pub const HISTORY_SERIES: usize = 64;

impl MetricPoint {
    /// The value a chart plots: the number, or a histogram's mean (`None` before any count).
    pub fn plotted(value: &MetricValue) -> Option<f64> {
        match *value {
            MetricValue::Number(v) => Some(v),
            MetricValue::Distribution { count, sum } => (count > 0).then(|| sum / count as f64),
        }
    }

    /// Notes the current value at `at_ms` in [`MetricPoint::recent`] (one value per push: a
    /// push that updates the series twice keeps the last), dropping the oldest past
    /// [`HISTORY_POINTS`]. Does nothing for a series without history.
    pub fn remember(&mut self, at_ms: i64) {
        if !self.keeps_recent {
            return;
        }
        let Some(value) = Self::plotted(&self.value).filter(|v| v.is_finite()) else {
            return;
        };
        if self.recent.back().is_some_and(|(t, _)| *t == at_ms) {
            self.recent.pop_back();
        }
        if self.recent.len() >= HISTORY_POINTS {
            self.recent.pop_front();
        }
        self.recent.push_back((at_ms, value));
    }
}
