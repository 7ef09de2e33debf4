//! `client.instance.id.binding`: a client instance ID belongs to the first principal that
//! presents it. With `enforce`, another principal presenting it is answered INVALID_REQUEST (and
//! its telemetry refused); with `warn`, it is served but flagged in the client view.

mod common;

use common::sasl::{scram_login, write_users};
use common::{Client, TestBroker, http_get};
use skiff_auth::scram::ScramMechanism;
use skiff_broker::{InstanceBinding, ListenerConfig, SaslMechanism, SecurityProtocol};
use skiff_protocol::generated::{MetadataRequest, PushTelemetryRequest};
use skiff_protocol::{Response, Uuid, error_codes};

async fn start(binding: InstanceBinding) -> TestBroker {
    TestBroker::start_with(|config| {
        write_users(
            &config.data_dir,
            &[("alice", "alice-pw"), ("mallory", "mallory-pw")],
        );
        config.listeners = vec![ListenerConfig {
            protocol: SecurityProtocol::SaslPlaintext,
            sasl_mechanisms: vec![SaslMechanism::ScramSha512],
            ..ListenerConfig::plaintext("SASL", "127.0.0.1:0".parse().expect("addr"), None)
        }];
        config.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
        config.security.instance_binding = binding;
    })
    .await
}

/// Logs in with KIP-1313 instance ID `id` in every flexible header.
async fn login(tb: &TestBroker, user: &str, id: Uuid) -> Client {
    let mut c = Client::connect(tb.addr).await;
    c.instance_id = Some(id);
    let (code, _) = scram_login(&mut c, ScramMechanism::Sha512, user, &format!("{user}-pw")).await;
    assert_eq!(code, 0);
    c
}

async fn metadata_code(c: &mut Client) -> i16 {
    match c.call(MetadataRequest::default(), 12).await {
        Response::Metadata(m) => {
            if m.brokers.is_empty() {
                error_codes::INVALID_REQUEST
            } else {
                0
            }
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn enforce_refuses_an_instance_id_owned_by_another_principal() {
    let tb = start(InstanceBinding::Enforce).await;
    let id = Uuid::from_u128(0x1313);
    let mut alice = login(&tb, "alice", id).await;
    assert_eq!(metadata_code(&mut alice).await, 0);
    // The owner's second connection is fine.
    let mut alice2 = login(&tb, "alice", id).await;
    assert_eq!(metadata_code(&mut alice2).await, 0);

    let mut mallory = login(&tb, "mallory", id).await;
    assert_eq!(
        metadata_code(&mut mallory).await,
        error_codes::INVALID_REQUEST
    );
    // Telemetry naming alice's instance from a connection without a header ID: refused too.
    let mut quiet = login(&tb, "mallory", Uuid::from_u128(9)).await;
    let push = PushTelemetryRequest {
        client_instance_id: id,
        subscription_id: 1,
        ..Default::default()
    };
    match quiet.call(push, 0).await {
        Response::PushTelemetry(r) => assert_eq!(r.error_code, error_codes::INVALID_REQUEST),
        other => panic!("unexpected {other:?}"),
    }
    // Mallory's own ID is hers.
    assert_eq!(metadata_code(&mut quiet).await, 0);
}

#[tokio::test]
async fn warn_serves_but_flags_the_connection() {
    let tb = start(InstanceBinding::Warn).await;
    let id = Uuid::from_u128(0xabc);
    let mut alice = login(&tb, "alice", id).await;
    assert_eq!(metadata_code(&mut alice).await, 0);
    let mut mallory = login(&tb, "mallory", id).await;
    assert_eq!(metadata_code(&mut mallory).await, 0);
    let admin = tb
        .running
        .as_ref()
        .and_then(|r| r.admin_addr)
        .expect("admin");
    let (_, body) = http_get(admin, "/clients").await;
    let views: serde_json::Value = serde_json::from_str(&body).expect("json");
    let flagged: Vec<(String, String)> = views
        .as_array()
        .expect("array")
        .iter()
        .flat_map(|v| v["connections"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| {
            Some((
                c["principal"].as_str()?.to_string(),
                c["instance_id_owner"].as_str()?.to_string(),
            ))
        })
        .collect();
    assert_eq!(
        flagged,
        vec![("User:mallory".to_string(), "User:alice".to_string())]
    );
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert!(
        metrics.contains("skiff_identity_conflicts_total 1"),
        "{metrics}"
    );
}

mod members {
    //! Member IDs belong to the principal that created them (on unless the binding is off).

    use super::*;
    use bytes::Bytes;
    use skiff_protocol::generated::join_group_request::JoinGroupRequestProtocol;
    use skiff_protocol::generated::{
        ConsumerGroupHeartbeatRequest, HeartbeatRequest, JoinGroupRequest,
    };

    fn consumer_heartbeat(group: &str, member: &str, epoch: i32) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest {
            group_id: group.into(),
            member_id: member.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: 5000,
            subscribed_topic_names: (epoch == 0).then(|| vec!["t".into()]),
            topic_partitions: (epoch == 0).then(Vec::new),
            ..Default::default()
        }
    }

    async fn heartbeat_code(c: &mut Client, request: ConsumerGroupHeartbeatRequest) -> (i16, i32) {
        match c.call(request, 1).await {
            Response::ConsumerGroupHeartbeat(r) => (r.error_code, r.member_epoch),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_kip1082_member_id_cannot_be_taken_over_by_another_principal() {
        let tb = start(InstanceBinding::Warn).await;
        let mut alice = login(&tb, "alice", Uuid::from_u128(1)).await;
        let mut mallory = login(&tb, "mallory", Uuid::from_u128(2)).await;
        let member = "AAAAAAAAAAAAAAAAAAAAAQ";
        let (code, epoch) = heartbeat_code(&mut alice, consumer_heartbeat("g", member, 0)).await;
        assert_eq!(code, 0);
        assert!(epoch > 0);
        // KIP-1082 lets a client rejoin its own ID with epoch 0; not someone else's.
        let (code, _) = heartbeat_code(&mut mallory, consumer_heartbeat("g", member, 0)).await;
        assert_eq!(code, error_codes::UNKNOWN_MEMBER_ID);
        let (code, _) = heartbeat_code(&mut mallory, consumer_heartbeat("g", member, epoch)).await;
        assert_eq!(code, error_codes::UNKNOWN_MEMBER_ID);
        // The real member goes on with its epoch.
        let (code, still) =
            heartbeat_code(&mut alice, consumer_heartbeat("g", member, epoch)).await;
        assert_eq!((code, still), (0, epoch));
        // Once it left, the ID is free.
        let (code, _) = heartbeat_code(&mut alice, consumer_heartbeat("g", member, -1)).await;
        assert_eq!(code, 0);
        let (code, _) = heartbeat_code(&mut mallory, consumer_heartbeat("g", member, 0)).await;
        assert_eq!(code, 0);
    }

    #[tokio::test]
    async fn classic_and_static_members_belong_to_their_principal() {
        let tb = TestBroker::start_with(|config| {
            write_users(
                &config.data_dir,
                &[("alice", "alice-pw"), ("mallory", "mallory-pw")],
            );
            config.listeners = vec![ListenerConfig {
                protocol: SecurityProtocol::SaslPlaintext,
                sasl_mechanisms: vec![SaslMechanism::ScramSha512],
                ..ListenerConfig::plaintext("SASL", "127.0.0.1:0".parse().expect("addr"), None)
            }];
            config.groups.classic_initial_rebalance_delay_ms = 0;
            config.security.instance_binding = InstanceBinding::Warn;
        })
        .await;
        let mut alice = login(&tb, "alice", Uuid::from_u128(1)).await;
        let mut mallory = login(&tb, "mallory", Uuid::from_u128(2)).await;
        let join = |member: &str, instance: Option<&str>| JoinGroupRequest {
            group_id: "classic".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            member_id: member.into(),
            group_instance_id: instance.map(Into::into),
            protocol_type: "consumer".into(),
            protocols: vec![JoinGroupRequestProtocol {
                name: "range".into(),
                metadata: Bytes::from_static(b"subscription"),
                ..Default::default()
            }],
            ..Default::default()
        };
        let (member, generation) = match alice.call(join("", Some("alice-1")), 5).await {
            Response::JoinGroup(r) => {
                assert_eq!(r.error_code, 0);
                (r.member_id.to_string(), r.generation_id)
            }
            other => panic!("unexpected {other:?}"),
        };
        let heartbeat = |instance: Option<&str>| HeartbeatRequest {
            group_id: "classic".into(),
            generation_id: generation,
            member_id: member.as_str().into(),
            group_instance_id: instance.map(Into::into),
            ..Default::default()
        };
        for (client, expected) in [
            (&mut mallory, error_codes::UNKNOWN_MEMBER_ID),
            (&mut alice, 0),
        ] {
            match client.call(heartbeat(None), 4).await {
                Response::Heartbeat(r) => assert_eq!(r.error_code, expected),
                other => panic!("unexpected {other:?}"),
            }
        }
        // The static instance ID is alice's too: mallory cannot join as it.
        match mallory.call(join("", Some("alice-1")), 5).await {
            Response::JoinGroup(r) => assert_eq!(r.error_code, error_codes::UNKNOWN_MEMBER_ID),
            other => panic!("unexpected {other:?}"),
        }
    }

    async fn share_heartbeat(
        c: &mut Client,
        r: skiff_protocol::generated::ShareGroupHeartbeatRequest,
    ) -> (i16, i32) {
        match c.call(r, 1).await {
            Response::ShareGroupHeartbeat(r) => (r.error_code, r.member_epoch),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_share_member_id_cannot_be_used_by_another_principal() {
        use skiff_protocol::generated::{
            ShareAcknowledgeRequest, ShareFetchRequest, ShareGroupHeartbeatRequest,
        };
        let tb = start(InstanceBinding::Warn).await;
        let mut alice = login(&tb, "alice", Uuid::from_u128(1)).await;
        let mut mallory = login(&tb, "mallory", Uuid::from_u128(2)).await;
        let member = "AAAAAAAAAAAAAAAAAAAAAQ";
        let heartbeat = |epoch: i32| ShareGroupHeartbeatRequest {
            group_id: "sg".into(),
            member_id: member.into(),
            member_epoch: epoch,
            subscribed_topic_names: (epoch == 0).then(|| vec!["t".into()]),
            ..Default::default()
        };
        let (code, epoch) = share_heartbeat(&mut alice, heartbeat(0)).await;
        assert_eq!(code, 0);
        assert!(epoch > 0);
        let (code, _) = share_heartbeat(&mut mallory, heartbeat(epoch)).await;
        assert_eq!(code, error_codes::UNKNOWN_MEMBER_ID);
        // Nor can another principal open a share session or acknowledge under the ID.
        let fetch = ShareFetchRequest {
            group_id: Some("sg".into()),
            member_id: Some(member.into()),
            share_session_epoch: 0,
            max_records: 10,
            max_bytes: 1 << 20,
            ..Default::default()
        };
        match mallory.call(fetch, 1).await {
            Response::ShareFetch(r) => assert_eq!(r.error_code, error_codes::UNKNOWN_MEMBER_ID),
            other => panic!("unexpected {other:?}"),
        }
        let ack = ShareAcknowledgeRequest {
            group_id: Some("sg".into()),
            member_id: Some(member.into()),
            share_session_epoch: 1,
            ..Default::default()
        };
        match mallory.call(ack, 1).await {
            Response::ShareAcknowledge(r) => {
                assert_eq!(r.error_code, error_codes::UNKNOWN_MEMBER_ID)
            }
            other => panic!("unexpected {other:?}"),
        }
        // The owner goes on; once it left, the ID is free.
        let (code, still) = share_heartbeat(&mut alice, heartbeat(epoch)).await;
        assert_eq!((code, still), (0, epoch));
        let (code, _) = share_heartbeat(&mut alice, heartbeat(-1)).await;
        assert_eq!(code, 0);
        let (code, _) = share_heartbeat(&mut mallory, heartbeat(0)).await;
        assert_eq!(code, 0);
    }
}
