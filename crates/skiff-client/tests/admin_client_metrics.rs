//! Admin client-metrics subscriptions (KIP-714 config resources of type 16) against an in-process
//! Skiff broker: create, describe, change, list, and delete them; a subscription made through the
//! Admin API reaches a client's telemetry subscription.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{TIMEOUT, TestBroker, client, client_config};
use skiff_client::{Admin, AlterConfigOp, Client, ConfigEntry};
use skiff_protocol::error_codes::RESOURCE_NOT_FOUND;
use tokio::time::timeout;

fn as_map(entries: &[ConfigEntry]) -> BTreeMap<String, Option<String>> {
    entries
        .iter()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect()
}

#[tokio::test]
async fn client_metrics_subscriptions_round_trip() {
    let broker = TestBroker::start().await;
    let admin = Admin::new(client(&broker.bootstrap()));

    assert_eq!(
        admin.list_client_metrics().await.expect("list"),
        Vec::<String>::new()
    );

    admin
        .alter_client_metrics(
            "producers",
            &[
                ("metrics", AlterConfigOp::Set, "org.apache.kafka.producer."),
                ("interval.ms", AlterConfigOp::Set, "1000"),
            ],
        )
        .await
        .expect("create producers");
    admin
        .alter_client_metrics("all", &[("metrics", AlterConfigOp::Set, "*")])
        .await
        .expect("create all");
    assert_eq!(
        admin.list_client_metrics().await.expect("list"),
        vec!["all".to_string(), "producers".to_string()]
    );

    let described = admin
        .describe_client_metrics("producers")
        .await
        .expect("describe");
    let map = as_map(&described);
    assert_eq!(
        map.get("metrics"),
        Some(&Some("org.apache.kafka.producer.".to_string())),
        "{described:?}"
    );
    assert_eq!(map.get("interval.ms"), Some(&Some("1000".to_string())));
    let metrics = described
        .iter()
        .find(|e| e.name == "metrics")
        .expect("metrics");
    assert_eq!(metrics.source, 7, "set on the subscription");

    // Append to the list, then change the interval back to its default.
    admin
        .alter_client_metrics(
            "producers",
            &[
                (
                    "metrics",
                    AlterConfigOp::Append,
                    "org.apache.kafka.consumer.",
                ),
                ("interval.ms", AlterConfigOp::Delete, ""),
            ],
        )
        .await
        .expect("alter");
    let map = as_map(
        &admin
            .describe_client_metrics("producers")
            .await
            .expect("describe"),
    );
    assert_eq!(
        map.get("metrics"),
        Some(&Some(
            "org.apache.kafka.producer.,org.apache.kafka.consumer.".to_string()
        ))
    );
    assert_ne!(map.get("interval.ms"), Some(&Some("1000".to_string())));

    // Unknown subscriptions and bad values are the broker's errors, reported as such.
    let missing = admin
        .describe_client_metrics("nope")
        .await
        .expect_err("unknown subscription");
    assert_eq!(missing.code(), Some(RESOURCE_NOT_FOUND), "{missing}");
    let invalid = admin
        .alter_client_metrics("bad", &[("interval.ms", AlterConfigOp::Set, "-5")])
        .await
        .expect_err("invalid interval");
    assert!(invalid.code().is_some(), "{invalid}");
    assert!(
        !admin
            .list_client_metrics()
            .await
            .expect("list")
            .contains(&"bad".to_string())
    );

    broker.stop().await;
}

#[tokio::test]
async fn an_admin_subscription_reaches_a_client() {
    let broker = TestBroker::start().await;
    let bootstrap = broker.bootstrap();
    let admin = Admin::new(client(&bootstrap));
    admin
        .alter_client_metrics(
            "everything",
            &[
                ("metrics", AlterConfigOp::Set, "*"),
                ("interval.ms", AlterConfigOp::Set, "500"),
            ],
        )
        .await
        .expect("subscribe");
    let subscribed = Client::new(client_config(&bootstrap)).expect("client");
    // Any request starts the client's connection and with it the telemetry task.
    subscribed.refresh_metadata(None).await.expect("metadata");
    timeout(TIMEOUT, async {
        while subscribed.telemetry_subscription().is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the client picks up the subscription");
    let (_, requested, interval) = subscribed.telemetry_subscription().expect("subscribed");
    assert_eq!(interval, Duration::from_millis(500), "{requested:?}");
    subscribed.close().await;
    broker.stop().await;
}
