//! Forwards pushed client telemetry to an OTLP/HTTP collector (`telemetry.otlp.endpoint`,
//! e.g. `http://127.0.0.1:4318/v1/metrics`), without any plugin.
//!
//! Each accepted push becomes one `ExportMetricsServiceRequest` (protobuf,
//! `application/x-protobuf`) whose resources carry the client's identity as attributes
//! (`client_instance_id`, `client_id`). Pushes wait in a bounded queue; when the collector is slow
//! or down, newer pushes are dropped and counted rather than piling up in memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use skiff_telemetry::DecodedMetrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Pushes waiting for the collector.
const QUEUE: usize = 256;
const TIMEOUT: Duration = Duration::from_secs(10);

/// Where to send: host, port and path of an `http://` endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint> {
        let Some(rest) = url.strip_prefix("http://") else {
            bail!("{url:?}: only http:// OTLP endpoints are supported");
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/v1/metrics"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().with_context(|| format!("{url:?}: bad port"))?),
            None => (authority, 4318),
        };
        if host.is_empty() {
            bail!("{url:?}: no host");
        }
        Ok(Endpoint {
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }
}

/// The sending side, held by the broker.
pub struct Forwarder {
    queue: mpsc::Sender<DecodedMetrics>,
    pub sent: Arc<AtomicU64>,
    pub dropped: Arc<AtomicU64>,
    pub failed: Arc<AtomicU64>,
}

impl Forwarder {
    /// Starts the forwarding task on the current runtime.
    pub fn start(endpoint: Endpoint) -> Forwarder {
        let (queue, mut rx) = mpsc::channel::<DecodedMetrics>(QUEUE);
        let sent = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (task_sent, task_failed) = (Arc::clone(&sent), Arc::clone(&failed));
        tokio::spawn(async move {
            while let Some(push) = rx.recv().await {
                let body = export_request(push).encode_to_vec();
                match tokio::time::timeout(TIMEOUT, post(&endpoint, &body)).await {
                    Ok(Ok(())) => {
                        task_sent.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(e)) => {
                        task_failed.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %format!("{e:#}"), "OTLP export failed");
                    }
                    Err(_) => {
                        task_failed.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!("OTLP export timed out");
                    }
                }
            }
        });
        Forwarder {
            queue,
            sent,
            dropped: Arc::new(AtomicU64::new(0)),
            failed,
        }
    }

    /// Queues a push; drops it when the queue is full.
    pub fn forward(&self, push: DecodedMetrics) {
        if self.queue.try_send(push).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn string_attribute(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        ..Default::default()
    }
}

/// The push as an OTLP export request, the client's identity added to every resource.
pub fn export_request(push: DecodedMetrics) -> ExportMetricsServiceRequest {
    let mut resource_metrics = push.metrics.resource_metrics;
    for rm in &mut resource_metrics {
        let resource = rm.resource.get_or_insert_with(Default::default);
        resource
            .attributes
            .retain(|kv| kv.key != "client_instance_id");
        resource.attributes.push(string_attribute(
            "client_instance_id",
            push.client_instance_id.to_string(),
        ));
        if let Some(client_id) = &push.client_id
            && !resource.attributes.iter().any(|kv| kv.key == "client_id")
        {
            resource
                .attributes
                .push(string_attribute("client_id", client_id.clone()));
        }
    }
    ExportMetricsServiceRequest { resource_metrics }
}

/// One HTTP/1.1 POST; succeeds on a 2xx status.
async fn post(endpoint: &Endpoint, body: &[u8]) -> Result<()> {
    let mut stream = tokio::net::TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .with_context(|| format!("connecting to {}:{}", endpoint.host, endpoint.port))?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.path,
        endpoint.host,
        endpoint.port,
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    // The status line is all we need; read a bounded amount.
    let mut response = vec![0u8; 1024];
    let n = stream.read(&mut response).await?;
    let text = String::from_utf8_lossy(response.get(..n).unwrap_or_default());
    let status = text.split_whitespace().nth(1).unwrap_or("");
    if !status.starts_with('2') {
        bail!("collector answered {status:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:4318/v1/metrics").ok(),
            Some(Endpoint {
                host: "127.0.0.1".into(),
                port: 4318,
                path: "/v1/metrics".into()
            })
        );
        assert_eq!(
            Endpoint::parse("http://collector")
                .ok()
                .map(|e| (e.port, e.path)),
            Some((4318, "/v1/metrics".to_string()))
        );
        assert!(Endpoint::parse("https://x").is_err());
        assert!(Endpoint::parse("http://:1/").is_err());
    }
}
