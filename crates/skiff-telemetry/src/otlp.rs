//! OpenTelemetry `MetricsData` decoding (prost types from `opentelemetry-proto`) and flattening
//! into one sample per data point.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
pub use opentelemetry_proto::tonic::metrics::v1::MetricsData;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, metric::Data, number_data_point,
};
use serde::Serialize;

/// Decodes a (decompressed) PushTelemetry payload. prost bounds nesting (recursion limit 100) and
/// never allocates more than the input holds.
pub fn decode_metrics_data(bytes: &[u8]) -> Result<MetricsData, prost::DecodeError> {
    <MetricsData as prost::Message>::decode(bytes)
}

/// The shape of a metric, as far as the latest-value store and Prometheus care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricKind {
    Gauge,
    /// A monotonic sum.
    Counter,
    /// A non-monotonic sum.
    UpDownCounter,
    /// A histogram or exponential histogram (count and sum kept).
    Histogram,
    /// A summary (count and sum kept).
    Summary,
}

/// The value of one series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricValue {
    Number(f64),
    Distribution { count: u64, sum: f64 },
}

/// One data point of a push, flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub kind: MetricKind,
    /// Delta temporality: the value adds to what was there (sums and histograms).
    pub delta: bool,
    pub attributes: BTreeMap<String, String>,
    pub value: MetricValue,
    pub time_unix_nano: u64,
}

/// Flattens every data point of every metric. Points without a value are skipped.
pub fn samples(data: &MetricsData) -> Vec<Sample> {
    let mut out = Vec::new();
    let metrics = data
        .resource_metrics
        .iter()
        .flat_map(|rm| rm.scope_metrics.iter())
        .flat_map(|sm| sm.metrics.iter());
    for metric in metrics {
        let name = &metric.name;
        let Some(data) = &metric.data else { continue };
        let mut push = |kind, delta, attrs: &[KeyValue], value, time_unix_nano| {
            out.push(Sample {
                name: name.clone(),
                kind,
                delta,
                attributes: attributes(attrs),
                value,
                time_unix_nano,
            })
        };
        let is_delta = |t: i32| t == AggregationTemporality::Delta as i32;
        match data {
            Data::Gauge(gauge) => {
                for p in &gauge.data_points {
                    if let Some(v) = number(p.value) {
                        push(MetricKind::Gauge, false, &p.attributes, v, p.time_unix_nano);
                    }
                }
            }
            Data::Sum(sum) => {
                let kind = if sum.is_monotonic {
                    MetricKind::Counter
                } else {
                    MetricKind::UpDownCounter
                };
                let delta = is_delta(sum.aggregation_temporality);
                for p in &sum.data_points {
                    if let Some(v) = number(p.value) {
                        push(kind, delta, &p.attributes, v, p.time_unix_nano);
                    }
                }
            }
            Data::Histogram(h) => {
                let delta = is_delta(h.aggregation_temporality);
                for p in &h.data_points {
                    let value = MetricValue::Distribution {
                        count: p.count,
                        sum: p.sum.unwrap_or(0.0),
                    };
                    push(
                        MetricKind::Histogram,
                        delta,
                        &p.attributes,
                        value,
                        p.time_unix_nano,
                    );
                }
            }
            Data::ExponentialHistogram(h) => {
                let delta = is_delta(h.aggregation_temporality);
                for p in &h.data_points {
                    let value = MetricValue::Distribution {
                        count: p.count,
                        sum: p.sum.unwrap_or(0.0),
                    };
                    push(
                        MetricKind::Histogram,
                        delta,
                        &p.attributes,
                        value,
                        p.time_unix_nano,
                    );
                }
            }
            Data::Summary(s) => {
                for p in &s.data_points {
                    let value = MetricValue::Distribution {
                        count: p.count,
                        sum: p.sum,
                    };
                    push(
                        MetricKind::Summary,
                        false,
                        &p.attributes,
                        value,
                        p.time_unix_nano,
                    );
                }
            }
        }
    }
    out
}

fn number(value: Option<number_data_point::Value>) -> Option<MetricValue> {
    match value? {
        number_data_point::Value::AsDouble(d) => Some(MetricValue::Number(d)),
        number_data_point::Value::AsInt(i) => Some(MetricValue::Number(i as f64)),
    }
}

/// Attributes as text; the first of duplicate keys wins.
pub fn attributes(attrs: &[KeyValue]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for kv in attrs {
        if let Some(value) = kv.value.as_ref().and_then(any_value_text) {
            out.entry(kv.key.clone()).or_insert(value);
        }
    }
    out
}

/// An attribute value as text: strings as-is, scalars in decimal, bytes in hex, arrays and maps in
/// a compact bracketed form. Empty values are skipped.
pub fn any_value_text(value: &AnyValue) -> Option<String> {
    let mut out = String::new();
    write_any_value(value.value.as_ref()?, &mut out);
    Some(out)
}

fn write_any_value(value: &any_value::Value, out: &mut String) {
    match value {
        any_value::Value::StringValue(s) => out.push_str(s),
        any_value::Value::BoolValue(b) => out.push_str(if *b { "true" } else { "false" }),
        any_value::Value::IntValue(i) => out.push_str(&i.to_string()),
        any_value::Value::DoubleValue(d) => out.push_str(&d.to_string()),
        any_value::Value::BytesValue(bytes) => {
            for b in bytes {
                let _ = write!(out, "{b:02x}");
            }
        }
        any_value::Value::ArrayValue(array) => {
            out.push('[');
            for (i, item) in array
                .values
                .iter()
                .filter_map(|v| v.value.as_ref())
                .enumerate()
            {
                if i > 0 {
                    out.push(',');
                }
                write_any_value(item, out);
            }
            out.push(']');
        }
        any_value::Value::KvlistValue(list) => {
            out.push('{');
            for (i, kv) in list.values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&kv.key);
                out.push('=');
                if let Some(v) = kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    write_any_value(v, out);
                }
            }
            out.push('}');
        }
        any_value::Value::StringValueStrindex(i) => {
            let _ = write!(out, "#{i}");
        }
    }
}

#[cfg(test)]
pub(crate) mod test_data {
    //! Builders for OTLP payloads in tests.
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::metrics::v1::{
        Gauge, Histogram, HistogramDataPoint, Metric, MetricsData, NumberDataPoint,
        ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point,
    };

    pub fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.to_string(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.to_string())),
            }),
            ..Default::default()
        }
    }

    pub fn number_point(attrs: Vec<KeyValue>, value: f64, time: u64) -> NumberDataPoint {
        NumberDataPoint {
            attributes: attrs,
            time_unix_nano: time,
            value: Some(number_data_point::Value::AsDouble(value)),
            ..Default::default()
        }
    }

    pub fn gauge(name: &str, points: Vec<NumberDataPoint>) -> Metric {
        Metric {
            name: name.to_string(),
            data: Some(Data::Gauge(Gauge {
                data_points: points,
            })),
            ..Default::default()
        }
    }

    pub fn delta_counter(name: &str, points: Vec<NumberDataPoint>) -> Metric {
        Metric {
            name: name.to_string(),
            data: Some(Data::Sum(Sum {
                data_points: points,
                aggregation_temporality: 1,
                is_monotonic: true,
            })),
            ..Default::default()
        }
    }

    pub fn delta_histogram(name: &str, attrs: Vec<KeyValue>, count: u64, sum: f64) -> Metric {
        Metric {
            name: name.to_string(),
            data: Some(Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    attributes: attrs,
                    count,
                    sum: Some(sum),
                    time_unix_nano: 7,
                    ..Default::default()
                }],
                aggregation_temporality: 1,
            })),
            ..Default::default()
        }
    }

    pub fn metrics_data(metrics: Vec<Metric>) -> MetricsData {
        MetricsData {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    pub fn encode(data: &MetricsData) -> Vec<u8> {
        prost::Message::encode_to_vec(data)
    }
}

#[cfg(test)]
mod tests {
    use super::test_data::*;
    use super::*;

    #[test]
    fn flattens_gauges_sums_and_histograms() {
        let data = metrics_data(vec![
            gauge(
                "org.apache.kafka.producer.node.request.latency.avg",
                vec![number_point(vec![kv("node.id", "1")], 2.5, 10)],
            ),
            delta_counter("c", vec![number_point(vec![], 3.0, 11)]),
            delta_histogram("h", vec![kv("a", "b")], 4, 10.0),
        ]);
        let decoded = decode_metrics_data(&encode(&data)).unwrap();
        assert_eq!(decoded, data);
        let s = samples(&decoded);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].kind, MetricKind::Gauge);
        assert!(!s[0].delta);
        assert_eq!(
            s[0].attributes.get("node.id").map(String::as_str),
            Some("1")
        );
        assert_eq!(s[0].value, MetricValue::Number(2.5));
        assert_eq!(s[1].kind, MetricKind::Counter);
        assert!(s[1].delta);
        assert_eq!(
            s[2].value,
            MetricValue::Distribution {
                count: 4,
                sum: 10.0
            }
        );
    }

    #[test]
    fn attribute_values_render_as_text() {
        let v = |value| AnyValue { value: Some(value) };
        assert_eq!(
            any_value_text(&v(any_value::Value::IntValue(-3))).unwrap(),
            "-3"
        );
        assert_eq!(
            any_value_text(&v(any_value::Value::BoolValue(true))).unwrap(),
            "true"
        );
        assert_eq!(
            any_value_text(&v(any_value::Value::BytesValue(vec![0, 255]))).unwrap(),
            "00ff"
        );
        assert_eq!(any_value_text(&AnyValue { value: None }), None);
    }

    #[test]
    fn garbage_does_not_decode() {
        assert!(decode_metrics_data(b"\xff\xff\xff\xff").is_err());
        assert!(decode_metrics_data(b"test-data").is_err());
    }
}
