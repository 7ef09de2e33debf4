//! KIP-714 from the client side: with a CLIENT_METRICS subscription created over the protocol, a
//! producer's client pushes its own metrics under its own instance ID (body ID = header ID), and a
//! terminating push arrives when the client closes.

mod common;

use std::time::Duration;

use common::{Proxy, TIMEOUT, TestBroker, client_config};
use skiff_client::{Admin, Client, NewTopic, Producer, ProducerConfig, ProducerRecord};
use skiff_protocol::generated::IncrementalAlterConfigsRequest;
use skiff_protocol::generated::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use skiff_protocol::{ApiKey, Request, Response, error_codes};
use skiff_telemetry::{InstanceView, MetricValue};

const CLIENT_METRICS: i8 = 16;

async fn subscribe(client: &Client, name: &str, metrics: &str, interval_ms: &str) {
    let config = |name: &str, value: &str| AlterableConfig {
        name: name.into(),
        config_operation: 0,
        value: Some(value.into()),
        ..Default::default()
    };
    let request = IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: CLIENT_METRICS,
            resource_name: name.into(),
            configs: vec![
                config("metrics", metrics),
                config("interval.ms", interval_ms),
            ],
            ..Default::default()
        }],
        ..Default::default()
    };
    let response = client
        .call_any(ApiKey::IncrementalAlterConfigs, |_| {
            Request::IncrementalAlterConfigs(request)
        })
        .await
        .expect("IncrementalAlterConfigs");
    let Response::IncrementalAlterConfigs(r) = response else {
        panic!("unexpected {response:?}");
    };
    assert_eq!(r.responses[0].error_code, error_codes::NONE, "{r:?}");
}

fn view(broker: &TestBroker, client: &Client) -> Option<InstanceView> {
    broker
        .running
        .as_ref()
        .expect("running")
        .broker
        .lock_telemetry()
        .instance_view(client.instance_id())
}

fn value(view: &InstanceView, name: &str) -> Option<f64> {
    view.metrics
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| match p.value {
            MetricValue::Number(v) => Some(v),
            _ => None,
        })
}

async fn wait_for(
    broker: &TestBroker,
    client: &Client,
    what: &str,
    ok: impl Fn(&InstanceView) -> bool,
) -> InstanceView {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = view(broker, client)
            && ok(&v)
        {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {:?}",
            view(broker, client)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn producer_client_pushes_its_metrics_under_its_instance_id_and_terminates_on_close() {
    let broker = TestBroker::start().await;
    let bootstrap = broker.addr.to_string();

    let admin = Client::new(client_config(&bootstrap)).expect("admin client");
    subscribe(&admin, "all-kafka", "org.apache.kafka.", "200").await;
    Admin::new(admin.clone())
        .create_topics(&[NewTopic::new("telemetry-topic", 2)])
        .await
        .expect("create topic");
    admin.close().await;

    let client = Client::new(client_config(&bootstrap)).expect("client");
    let producer = Producer::new(client.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    let mut deliveries = Vec::new();
    for i in 0..25 {
        deliveries.push(
            producer
                .send(ProducerRecord::new("telemetry-topic", format!("v{i}")))
                .await
                .expect("send"),
        );
    }
    for d in deliveries {
        d.await.expect("delivered");
    }

    // The instance is known under the client's own ID, subscribed, and its pushes carry the
    // producer's record count (delta sums accumulate) and the connection gauge.
    let v = wait_for(&broker, &client, "metrics pushed", |v| {
        value(v, "org.apache.kafka.client.producer.record.send.total") == Some(25.0)
    })
    .await;
    assert_eq!(v.client_instance_id, client.instance_id().to_string());
    assert!(v.last_successful_push_ms.is_some(), "{v:?}");
    assert_eq!(v.requested_metrics, vec!["org.apache.kafka.".to_string()]);
    assert!(
        value(&v, "org.apache.kafka.client.connection.count").is_some_and(|c| c >= 1.0),
        "{v:?}"
    );
    assert!(!v.terminating, "{v:?}");
    let (sub_id, requested, interval) = client.telemetry_subscription().expect("subscribed");
    assert_eq!(sub_id, v.subscription_id);
    assert_eq!(requested, vec!["org.apache.kafka.".to_string()]);
    assert_eq!(interval, Duration::from_millis(200));

    // Several pushes in a row succeed (no throttling errors recorded).
    let first = v.last_successful_push_ms;
    let v = wait_for(&broker, &client, "a later push", |v| {
        v.last_successful_push_ms > first
    })
    .await;
    assert_eq!(v.last_error_code, error_codes::NONE, "{v:?}");

    producer.close().await.expect("producer close");
    client.close().await;
    let v = wait_for(&broker, &client, "terminating push", |v| v.terminating).await;
    assert_eq!(v.last_error_code, error_codes::NONE, "{v:?}");
    assert_eq!(
        value(&v, "org.apache.kafka.client.producer.record.send.total"),
        Some(25.0)
    );
}

#[tokio::test]
async fn a_client_with_metrics_push_disabled_never_asks() {
    let broker = TestBroker::start().await;
    let bootstrap = broker.addr.to_string();
    let admin = Client::new(client_config(&bootstrap)).expect("admin client");
    subscribe(&admin, "all", "*", "100").await;

    let mut config = client_config(&bootstrap);
    config.enable_metrics_push = false;
    let client = Client::new(config).expect("client");
    client.refresh_metadata(Some(&[])).await.expect("metadata");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(view(&broker, &client).is_none());
    assert!(client.telemetry_subscription().is_none());

    // Unsubscribed clients ask but never push.
    let quiet = Client::new(client_config(&bootstrap)).expect("client");
    subscribe(&admin, "all", "", "100").await;
    quiet.refresh_metadata(Some(&[])).await.expect("metadata");
    let v = wait_for(&broker, &quiet, "subscription fetched", |v| {
        v.last_get_ms.is_some()
    })
    .await;
    assert!(v.requested_metrics.is_empty(), "{v:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(view(&broker, &quiet).is_some_and(|v| v.last_push_ms.is_none()));
    quiet.close().await;
}

#[tokio::test]
async fn a_client_closed_before_its_subscription_arrived_asks_for_it_and_still_reports() {
    let (proxy, broker) = Proxy::with_broker().await;
    let admin = Client::new(client_config(&broker.addr.to_string())).expect("admin client");
    subscribe(&admin, "everything", "*", "60000").await;
    admin.close().await;

    // The background task's GetTelemetrySubscriptions never reaches the broker, so at close the
    // client does not know it is subscribed (as when it closes before the task ever ran).
    proxy.rules(|r| r.drop_telemetry_subscription_requests = 1);
    let client = Client::new(client_config(&proxy.addr.to_string())).expect("client");
    client.refresh_metadata(None).await.expect("metadata");
    let asked = |proxy: &Proxy| {
        proxy
            .seen()
            .iter()
            .filter(|s| {
                s.api == ApiKey::GetTelemetrySubscriptions
                    && s.instance_id == Some(client.instance_id())
            })
            .count()
    };
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while asked(&proxy) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no subscription request"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(client.telemetry_subscription().is_none());

    client.close().await;
    assert_eq!(asked(&proxy), 2, "close asked for the subscription again");
    let v = view(&broker, &client).expect("the instance is known");
    assert!(v.terminating, "{v:?}");
    assert_eq!(v.last_error_code, error_codes::NONE, "{v:?}");
    assert!(v.last_successful_push_ms.is_some(), "{v:?}");
}
