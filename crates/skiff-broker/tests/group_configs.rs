//! Group-level config overrides: IncrementalAlterConfigs / DescribeConfigs / ListConfigResources
//! on GROUP resources (Kafka's `ConfigResource.Type.GROUP` = 32), applied by the KIP-848
//! coordinator and kept across a restart.

mod common;

use std::time::{Duration, Instant};

use common::{Client, TIMEOUT, TestBroker};
use skiff_protocol::generated::describe_configs_request::DescribeConfigsResource;
use skiff_protocol::generated::describe_configs_response::DescribeConfigsResult;
use skiff_protocol::generated::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use skiff_protocol::generated::{
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
    DescribeConfigsRequest, IncrementalAlterConfigsRequest, ListConfigResourcesRequest,
};
use skiff_protocol::{Response, error_codes};

const GROUP: i8 = 32;
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SOURCE_GROUP: i8 = 8;
const SOURCE_DEFAULT: i8 = 5;
const HB: &str = "consumer.heartbeat.interval.ms";
const SESSION: &str = "consumer.session.timeout.ms";

/// (key, operation, value).
type Op<'a> = (&'a str, i8, Option<&'a str>);

async fn alter(
    c: &mut Client,
    group: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> (i16, Option<String>) {
    let request = IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: GROUP,
            resource_name: group.into(),
            configs: ops
                .iter()
                .map(|(key, op, value)| AlterableConfig {
                    name: (*key).into(),
                    config_operation: *op,
                    value: value.map(Into::into),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        validate_only,
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::IncrementalAlterConfigs(r) => {
            let r = r.responses.into_iter().next().expect("one resource");
            assert_eq!(r.resource_type, GROUP);
            (r.error_code, r.error_message.map(|m| m.to_string()))
        }
        other => panic!("unexpected {other:?}"),
    }
}

async fn describe(c: &mut Client, group: &str, synonyms: bool) -> DescribeConfigsResult {
    let request = DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type: GROUP,
            resource_name: group.into(),
            configuration_keys: None,
            ..Default::default()
        }],
        include_synonyms: synonyms,
        ..Default::default()
    };
    match c.call(request, 4).await {
        Response::DescribeConfigs(r) => r.results.into_iter().next().expect("one result"),
        other => panic!("unexpected {other:?}"),
    }
}

/// (value, source) of one key.
fn entry(result: &DescribeConfigsResult, key: &str) -> (String, i8) {
    let e = result
        .configs
        .iter()
        .find(|e| &*e.name == key)
        .unwrap_or_else(|| panic!("{key} described"));
    (
        e.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
        e.config_source,
    )
}

async fn heartbeat(
    c: &mut Client,
    request: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    match c.call(request, 0).await {
        Response::ConsumerGroupHeartbeat(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

fn join(group: &str) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest {
        group_id: group.into(),
        member_id: "".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 5000,
        subscribed_topic_names: Some(vec!["t".into()]),
        topic_partitions: Some(Vec::new()),
        ..Default::default()
    }
}

async fn member_count(c: &mut Client, group: &str) -> usize {
    let request = ConsumerGroupDescribeRequest {
        group_ids: vec![group.into()],
        ..Default::default()
    };
    match c.call(request, 0).await {
        Response::ConsumerGroupDescribe(r) => r.groups.first().map_or(0, |g| g.members.len()),
        other => panic!("unexpected {other:?}"),
    }
}

async fn listed_groups(c: &mut Client, types: Vec<i8>) -> Vec<String> {
    let request = ListConfigResourcesRequest {
        resource_types: types,
        ..Default::default()
    };
    match c.call(request, 1).await {
        Response::ListConfigResources(r) => r
            .config_resources
            .iter()
            .filter(|r| r.resource_type == GROUP)
            .map(|r| r.resource_name.to_string())
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn heartbeat_interval_override_reaches_members_and_delete_restores_it() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    assert_eq!(
        alter(&mut c, "g", &[(HB, SET, Some("7000"))], false)
            .await
            .0,
        0
    );
    let r = heartbeat(&mut c, join("g")).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.heartbeat_interval_ms, 7000);
    let member = r.member_id.clone().expect("member id");
    // Another group keeps the broker's value.
    let other = heartbeat(&mut c, join("other")).await;
    assert_eq!(other.heartbeat_interval_ms, 5000);

    assert_eq!(alter(&mut c, "g", &[(HB, DELETE, None)], false).await.0, 0);
    let r = heartbeat(
        &mut c,
        ConsumerGroupHeartbeatRequest {
            group_id: "g".into(),
            member_id: member,
            member_epoch: r.member_epoch,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.heartbeat_interval_ms, 5000);
    let d = describe(&mut c, "g", false).await;
    assert_eq!(entry(&d, HB), ("5000".into(), SOURCE_DEFAULT));
    tb.stop().await;
}

#[tokio::test]
async fn short_session_timeout_override_removes_a_silent_member() {
    let tb = TestBroker::start_with(|config| {
        config.groups.consumer_min_session_timeout_ms = 100;
        config.groups.consumer_min_heartbeat_interval_ms = 50;
    })
    .await;
    let mut c = tb.client().await;
    let ops = [(SESSION, SET, Some("400")), (HB, SET, Some("100"))];
    assert_eq!(alter(&mut c, "short", &ops, false).await.0, 0);
    let r = heartbeat(&mut c, join("short")).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.heartbeat_interval_ms, 100);
    // The same join in a group without overrides stays for the broker's 45 s.
    assert_eq!(heartbeat(&mut c, join("long")).await.error_code, 0);
    assert_eq!(member_count(&mut c, "short").await, 1);
    let start = Instant::now();
    while member_count(&mut c, "short").await > 0 {
        assert!(
            start.elapsed() < TIMEOUT,
            "the silent member was not removed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(member_count(&mut c, "long").await, 1);
    tb.stop().await;
}

#[tokio::test]
async fn invalid_values_are_refused_as_kafka_does() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let cases: &[(&[Op], i16, &str)] = &[
        (
            &[("nope", SET, Some("1"))],
            error_codes::INVALID_CONFIG,
            "Unknown group config name: nope",
        ),
        (
            &[(HB, SET, Some("abc"))],
            error_codes::INVALID_CONFIG,
            "Invalid value abc for configuration consumer.heartbeat.interval.ms: Not a number of type INT",
        ),
        (
            &[(HB, SET, Some("4000"))],
            error_codes::INVALID_CONFIG,
            "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms",
        ),
        (
            &[(SESSION, SET, Some("90000"))],
            error_codes::INVALID_CONFIG,
            "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms",
        ),
        (
            &[(HB, APPEND, Some("6000"))],
            error_codes::INVALID_CONFIG,
            "Can't APPEND to key consumer.heartbeat.interval.ms because its type is not LIST.",
        ),
        (
            &[("share.isolation.level", SET, Some("serializable"))],
            error_codes::INVALID_CONFIG,
            "Invalid value serializable for configuration share.isolation.level: String must be one of: read_committed, read_uncommitted",
        ),
    ];
    for (ops, code, message) in cases {
        let (got, got_message) = alter(&mut c, "g", ops, false).await;
        assert_eq!(got, *code, "{ops:?}");
        assert_eq!(got_message.as_deref(), Some(*message), "{ops:?}");
    }
    assert_eq!(
        alter(&mut c, "", &[(HB, SET, Some("6000"))], false).await.0,
        error_codes::INVALID_REQUEST
    );
    // heartbeat < session, checked on the merged config.
    let tb2 = TestBroker::start_with(|config| {
        config.groups.consumer_min_session_timeout_ms = 1000;
        config.groups.consumer_min_heartbeat_interval_ms = 1000;
    })
    .await;
    let mut c2 = tb2.client().await;
    assert_eq!(
        alter(&mut c2, "g", &[(SESSION, SET, Some("3000"))], false).await,
        (
            error_codes::INVALID_CONFIG,
            Some(
                "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
                    .into()
            )
        )
    );
    tb2.stop().await;
    // validate_only stores nothing; nothing was stored by the failures either.
    assert_eq!(
        alter(&mut c, "g", &[(HB, SET, Some("6000"))], true).await.0,
        0
    );
    let d = describe(&mut c, "g", false).await;
    assert_eq!(entry(&d, HB), ("5000".into(), SOURCE_DEFAULT));
    assert!(listed_groups(&mut c, vec![GROUP]).await.is_empty());
    tb.stop().await;
}

#[tokio::test]
async fn describe_shows_overrides_and_defaults_and_they_survive_a_restart() {
    let tb = TestBroker::start().await;
    let mut c = tb.client().await;
    let d = describe(&mut c, "g", true).await;
    assert_eq!(d.error_code, 0);
    assert_eq!(d.configs.len(), 12, "every Kafka group key");
    assert_eq!(entry(&d, SESSION), ("45000".into(), SOURCE_DEFAULT));
    assert_eq!(
        entry(&d, "share.delivery.count.limit"),
        ("5".into(), SOURCE_DEFAULT)
    );
    assert_eq!(
        entry(&d, "share.auto.offset.reset"),
        ("latest".into(), SOURCE_DEFAULT)
    );
    let ops = [
        (SESSION, SET, Some("50000")),
        ("share.auto.offset.reset", SET, Some("by_duration:PT1H")),
        ("streams.num.standby.replicas", SET, Some("1")),
    ];
    assert_eq!(alter(&mut c, "g", &ops, false).await.0, 0);
    let d = describe(&mut c, "g", true).await;
    assert_eq!(entry(&d, SESSION), ("50000".into(), SOURCE_GROUP));
    assert_eq!(
        entry(&d, "share.auto.offset.reset"),
        ("by_duration:PT1H".into(), SOURCE_GROUP)
    );
    assert_eq!(entry(&d, HB), ("5000".into(), SOURCE_DEFAULT));
    let session = d
        .configs
        .iter()
        .find(|e| &*e.name == SESSION)
        .expect("entry");
    assert_eq!(session.config_type, 3);
    assert!(!session.read_only);
    assert_eq!(session.synonyms.len(), 1);
    assert_eq!(session.synonyms[0].source, SOURCE_GROUP);
    assert_eq!(
        listed_groups(&mut c, vec![GROUP]).await,
        vec!["g".to_string()]
    );
    assert_eq!(
        listed_groups(&mut c, Vec::new()).await,
        vec!["g".to_string()]
    );

    let tb = tb.restart().await;
    let mut c = tb.client().await;
    let d = describe(&mut c, "g", false).await;
    assert_eq!(entry(&d, SESSION), ("50000".into(), SOURCE_GROUP));
    assert_eq!(
        entry(&d, "streams.num.standby.replicas"),
        ("1".into(), SOURCE_GROUP)
    );
    assert_eq!(
        listed_groups(&mut c, vec![GROUP]).await,
        vec!["g".to_string()]
    );

    // Deleting every override forgets the group, also after a restart.
    let ops = [
        (SESSION, DELETE, None),
        ("share.auto.offset.reset", DELETE, None),
        ("streams.num.standby.replicas", DELETE, None),
    ];
    assert_eq!(alter(&mut c, "g", &ops, false).await.0, 0);
    let tb = tb.restart().await;
    let mut c = tb.client().await;
    let d = describe(&mut c, "g", false).await;
    assert_eq!(entry(&d, SESSION), ("45000".into(), SOURCE_DEFAULT));
    assert!(listed_groups(&mut c, vec![GROUP]).await.is_empty());
    tb.stop().await;
}
