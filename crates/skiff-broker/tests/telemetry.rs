//! KIP-714 over TCP: the KIP-1313 alignment of header and body IDs in GetTelemetrySubscriptions
//! and PushTelemetry, and CLIENT_METRICS subscriptions through the config APIs (persisted).

mod common;

use common::TestBroker;
use skiff_protocol::generated::describe_configs_request::DescribeConfigsResource;
use skiff_protocol::generated::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use skiff_protocol::generated::{
    DescribeConfigsRequest, GetTelemetrySubscriptionsRequest, IncrementalAlterConfigsRequest,
    ListConfigResourcesRequest, PushTelemetryRequest,
};
use skiff_protocol::{Response, Uuid, error_codes};

const CLIENT_METRICS: i8 = 16;

async fn get(c: &mut common::Client, header: Option<Uuid>, body: Uuid) -> (i16, Uuid, i32) {
    let request = GetTelemetrySubscriptionsRequest {
        client_instance_id: body,
        ..Default::default()
    };
    match c.call_with_id(request, 0, header).await {
        Response::GetTelemetrySubscriptions(r) => {
            (r.error_code, r.client_instance_id, r.subscription_id)
        }
        other => panic!("unexpected {other:?}"),
    }
}

async fn subscribe(c: &mut common::Client, name: &str, metrics: &str, interval: &str) -> i16 {
    let request = IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: CLIENT_METRICS,
            resource_name: name.into(),
            configs: vec![
                AlterableConfig {
                    name: "metrics".into(),
                    config_operation: 0,
                    value: Some(metrics.into()),
                    ..Default::default()
                },
                AlterableConfig {
                    name: "interval.ms".into(),
                    config_operation: 0,
                    value: Some(interval.into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::IncrementalAlterConfigs(r) => r.responses[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn alignment_table_over_the_wire() {
    let broker = TestBroker::start().await;
    let h = Uuid::random().expect("random");
    let r = Uuid::random().expect("random");

    // Header absent, body zero: the broker assigns an ID and answers it.
    let mut c = broker.client().await;
    let (code, assigned, _) = get(&mut c, None, Uuid::ZERO).await;
    assert_eq!(code, 0);
    assert!(!assigned.is_zero());

    // Header absent, body R: R is used.
    let mut c = broker.client().await;
    assert_eq!(get(&mut c, None, r).await.1, r);

    // Header H, body H: H.
    let mut c = broker.client().await;
    let (code, id, _) = get(&mut c, Some(h), h).await;
    assert_eq!((code, id), (0, h));

    // Header H, body zero or another ID: INVALID_REQUEST, and the answer never carries zero.
    let mut c = broker.client().await;
    let (code, id, _) = get(&mut c, Some(h), Uuid::ZERO).await;
    assert_eq!(code, error_codes::INVALID_REQUEST);
    assert_eq!(id, h);
    let mut c = broker.client().await;
    assert_eq!(
        get(&mut c, Some(h), r).await.0,
        error_codes::INVALID_REQUEST
    );

    // PushTelemetry follows the same rule: with header H, a body ID other than H is rejected.
    let mut c = broker.client().await;
    let push = PushTelemetryRequest {
        client_instance_id: r,
        subscription_id: 0,
        ..Default::default()
    };
    match c.call_with_id(push, 0, Some(h)).await {
        Response::PushTelemetry(p) => assert_eq!(p.error_code, error_codes::INVALID_REQUEST),
        other => panic!("unexpected {other:?}"),
    }
    broker.stop().await;
}

#[tokio::test]
async fn subscriptions_are_config_resources_and_survive_a_restart() {
    let broker = TestBroker::start().await;
    let mut c = broker.client().await;
    let id = Uuid::random().expect("random");
    let (_, _, before) = get(&mut c, Some(id), id).await;
    // KIP-1313: this connection now carries `id`, so every later request must too.
    c.instance_id = Some(id);
    assert_eq!(
        subscribe(&mut c, "all-kafka", "org.apache.kafka.", "1000").await,
        0
    );
    assert_eq!(
        subscribe(&mut c, "bad", "x", "5").await,
        error_codes::INVALID_REQUEST,
        "interval.ms below 100 is refused"
    );

    let describe = DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type: CLIENT_METRICS,
            resource_name: "all-kafka".into(),
            configuration_keys: None,
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(describe.clone(), 4).await {
        Response::DescribeConfigs(r) => {
            let result = &r.results[0];
            assert_eq!(result.error_code, 0);
            let value = |name: &str| {
                result
                    .configs
                    .iter()
                    .find(|e| &*e.name == name)
                    .and_then(|e| e.value.as_deref().map(str::to_string))
            };
            assert_eq!(value("metrics").as_deref(), Some("org.apache.kafka."));
            assert_eq!(value("interval.ms").as_deref(), Some("1000"));
        }
        other => panic!("unexpected {other:?}"),
    }
    match c
        .call(
            ListConfigResourcesRequest {
                resource_types: vec![CLIENT_METRICS],
                ..Default::default()
            },
            1,
        )
        .await
    {
        Response::ListConfigResources(r) => {
            let names: Vec<&str> = r
                .config_resources
                .iter()
                .map(|c| &*c.resource_name)
                .collect();
            assert_eq!(names, vec!["all-kafka"]);
        }
        other => panic!("unexpected {other:?}"),
    }
    // v1 also lists topics (2) and the broker (4).
    c.call(
        skiff_protocol::generated::MetadataRequest {
            topics: Some(vec![
                skiff_protocol::generated::metadata_request::MetadataRequestTopic {
                    name: Some("listed".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        },
        12,
    )
    .await;
    match c
        .call(
            ListConfigResourcesRequest {
                resource_types: vec![2, 4],
                ..Default::default()
            },
            1,
        )
        .await
    {
        Response::ListConfigResources(r) => {
            let listed: Vec<(i8, &str)> = r
                .config_resources
                .iter()
                .map(|c| (c.resource_type, &*c.resource_name))
                .collect();
            assert!(listed.contains(&(2, "listed")), "{listed:?}");
            assert!(listed.contains(&(4, "1")), "{listed:?}");
            assert!(listed.iter().all(|(t, _)| *t == 2 || *t == 4), "{listed:?}");
        }
        other => panic!("unexpected {other:?}"),
    }

    // The subscription changes what this client is asked for, and its subscription ID.
    let mut c2 = broker.client().await;
    let request = GetTelemetrySubscriptionsRequest {
        client_instance_id: id,
        ..Default::default()
    };
    match c2.call_with_id(request, 0, Some(id)).await {
        Response::GetTelemetrySubscriptions(r) => {
            assert_eq!(r.error_code, 0);
            assert_ne!(r.subscription_id, before);
            assert_eq!(r.push_interval_ms, 1000);
            assert_eq!(
                r.requested_metrics
                    .iter()
                    .map(|m| m.to_string())
                    .collect::<Vec<_>>(),
                vec!["org.apache.kafka.".to_string()]
            );
        }
        other => panic!("unexpected {other:?}"),
    }

    let broker = broker.restart().await;
    let mut c = broker.client().await;
    match c.call(describe, 4).await {
        Response::DescribeConfigs(r) => assert_eq!(r.results[0].error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    broker.stop().await;
}

/// Pushed metrics are forwarded to an OTLP/HTTP collector, labelled with the client's identity.
#[tokio::test]
async fn pushes_are_forwarded_to_an_otlp_collector() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::{
        Gauge, Metric, MetricsData, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric,
        number_data_point,
    };
    use prost::Message;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let collector = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let endpoint = format!(
        "http://{}/v1/metrics",
        collector.local_addr().expect("addr")
    );
    let broker = TestBroker::start_with(|config| {
        config.telemetry_otlp_endpoint =
            Some(skiff_broker::otlp::Endpoint::parse(&endpoint).expect("endpoint"));
    })
    .await;
    let mut admin = broker.client().await;
    assert_eq!(subscribe(&mut admin, "all", "*", "100").await, 0);

    let id = Uuid::random().expect("random");
    let mut c = broker.client().await;
    c.instance_id = Some(id);
    let subscription = match c
        .call(
            GetTelemetrySubscriptionsRequest {
                client_instance_id: id,
                ..Default::default()
            },
            0,
        )
        .await
    {
        Response::GetTelemetrySubscriptions(r) => {
            assert_eq!(r.error_code, 0);
            r.subscription_id
        }
        other => panic!("unexpected {other:?}"),
    };
    let metrics = MetricsData {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "org.apache.kafka.client.connection.count".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: vec![NumberDataPoint {
                            value: Some(number_data_point::Value::AsInt(3)),
                            ..Default::default()
                        }],
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let push = PushTelemetryRequest {
        client_instance_id: id,
        subscription_id: subscription,
        compression_type: 0,
        metrics: metrics.encode_to_vec().into(),
        ..Default::default()
    };
    match c.call(push, 0).await {
        Response::PushTelemetry(p) => assert_eq!(p.error_code, 0),
        other => panic!("unexpected {other:?}"),
    }

    let (mut stream, _) = tokio::time::timeout(common::TIMEOUT, collector.accept())
        .await
        .expect("the broker posts in time")
        .expect("accept");
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    let body = loop {
        let n = stream.read(&mut chunk).await.expect("read");
        assert!(n > 0, "request ended early");
        raw.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&raw).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse().ok())
                .expect("content length");
            if raw.len() >= end + 4 + length {
                assert!(text.starts_with("POST /v1/metrics HTTP/1.1"));
                break raw[end + 4..end + 4 + length].to_vec();
            }
        }
    };
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        .await
        .expect("respond");
    let export = ExportMetricsServiceRequest::decode(&body[..]).expect("protobuf");
    let resource = export.resource_metrics[0]
        .resource
        .as_ref()
        .expect("resource");
    let instance = resource
        .attributes
        .iter()
        .find(|kv| kv.key == "client_instance_id")
        .expect("client_instance_id attribute");
    assert_eq!(
        format!("{:?}", instance.value),
        format!(
            "{:?}",
            Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                value: Some(
                    opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                        id.to_string()
                    )
                )
            })
        )
    );
    assert_eq!(
        export.resource_metrics[0].scope_metrics[0].metrics[0].name,
        "org.apache.kafka.client.connection.count"
    );
    broker.stop().await;
}
