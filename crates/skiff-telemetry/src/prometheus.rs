//! Prometheus text exposition (format 0.0.4) of the client instances' latest metrics.
//!
//! One family per metric name (`.` and every other character Prometheus does not allow become
//! `_`), sorted by name; series sorted by client instance, then labels. Labels:
//! `client_instance_id`, `client_id`, then the OTLP data point attributes (names sanitised the same
//! way; an attribute that would shadow the first two, or repeat an earlier one after sanitising,
//! is dropped). Gauges and non-monotonic sums are `gauge`, monotonic sums `counter`, histograms and
//! summaries `summary` with only `_sum` and `_count`. A family whose clients disagree on the kind
//! keeps the kind of its first series and skips the others.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::otlp::{MetricKind, MetricValue};
use crate::point::MetricPoint;

/// The gauge counting client instances, always rendered first.
pub const INSTANCES_METRIC: &str = "skiff_telemetry_instances";

pub(crate) struct InstanceSeries<'a> {
    pub client_instance_id: String,
    pub client_id: String,
    pub points: Vec<&'a MetricPoint>,
}

struct Line<'a> {
    labels: Vec<(String, String)>,
    point: &'a MetricPoint,
}

pub(crate) fn render<'a>(
    instance_count: usize,
    instances: impl Iterator<Item = InstanceSeries<'a>>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# TYPE {INSTANCES_METRIC} gauge");
    let _ = writeln!(out, "{INSTANCES_METRIC} {instance_count}");

    let mut families: BTreeMap<String, Vec<Line<'a>>> = BTreeMap::new();
    for instance in instances {
        for point in instance.points {
            let mut labels = vec![
                (
                    "client_instance_id".to_string(),
                    instance.client_instance_id.clone(),
                ),
                ("client_id".to_string(), instance.client_id.clone()),
            ];
            for (key, value) in &point.attributes {
                let name = sanitize_label_name(key);
                if !labels.iter().any(|(existing, _)| *existing == name) {
                    labels.push((name, value.clone()));
                }
            }
            families
                .entry(sanitize_metric_name(&point.name))
                .or_default()
                .push(Line { labels, point });
        }
    }

    for (name, mut lines) in families {
        lines.sort_by(|a, b| a.labels.cmp(&b.labels));
        let Some(kind) = lines.first().map(|l| l.point.kind) else {
            continue;
        };
        let type_name = match kind {
            MetricKind::Gauge | MetricKind::UpDownCounter => "gauge",
            MetricKind::Counter => "counter",
            MetricKind::Histogram | MetricKind::Summary => "summary",
        };
        let _ = writeln!(out, "# TYPE {name} {type_name}");
        for line in lines.iter().filter(|l| same_shape(l.point.kind, kind)) {
            let labels = render_labels(&line.labels);
            match line.point.value {
                MetricValue::Number(v) => {
                    let _ = writeln!(out, "{name}{labels} {}", format_value(v));
                }
                MetricValue::Distribution { count, sum } => {
                    let _ = writeln!(out, "{name}_sum{labels} {}", format_value(sum));
                    let _ = writeln!(out, "{name}_count{labels} {count}");
                }
            }
        }
    }
    out
}

fn same_shape(a: MetricKind, b: MetricKind) -> bool {
    let group = |k| match k {
        MetricKind::Gauge | MetricKind::UpDownCounter => 0,
        MetricKind::Counter => 1,
        MetricKind::Histogram | MetricKind::Summary => 2,
    };
    group(a) == group(b)
}

fn render_labels(labels: &[(String, String)]) -> String {
    let mut out = String::from("{");
    for (i, (name, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        out.push_str(&escape_label_value(value));
        out.push('"');
    }
    out.push('}');
    out
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`: anything else becomes `_`, a leading digit gets a `_` prefix.
pub fn sanitize_metric_name(name: &str) -> String {
    sanitize(name, true)
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`, the same way.
pub fn sanitize_label_name(name: &str) -> String {
    sanitize(name, false)
}

fn sanitize(name: &str, allow_colon: bool) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || (allow_colon && c == ':') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// Backslash, double quote and line feed are escaped, as the text format requires.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v == f64::INFINITY {
        "+Inf".to_string()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_are_sanitised() {
        assert_eq!(
            sanitize_metric_name("org.apache.kafka.producer.record-queue:time"),
            "org_apache_kafka_producer_record_queue:time"
        );
        assert_eq!(sanitize_label_name("node.id:x"), "node_id_x");
        assert_eq!(sanitize_label_name("1abc"), "_1abc");
        assert_eq!(sanitize_label_name(""), "_");
        assert_eq!(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(2.5), "2.5");
        assert_eq!(format_value(3.0), "3");
    }
}
