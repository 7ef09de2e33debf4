//! Several listeners (Kafka's `listeners` / `advertised.listeners`): each connection is answered
//! with the advertised address of the listener it came in on, in Metadata, FindCoordinator and
//! DescribeCluster.

mod common;

use common::{Client, TestBroker};
use skiff_broker::ListenerConfig;
use skiff_protocol::Response;
use skiff_protocol::generated::find_coordinator_request::FindCoordinatorRequest;
use skiff_protocol::generated::{DescribeClusterRequest, MetadataRequest};

/// (host, port) of the broker in Metadata, FindCoordinator (v3 and v4) and DescribeCluster.
async fn told(c: &mut Client) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    match c.call(MetadataRequest::default(), 12).await {
        Response::Metadata(m) => {
            assert_eq!(m.brokers.len(), 1);
            out.push((m.brokers[0].host.to_string(), m.brokers[0].port));
        }
        other => panic!("unexpected {other:?}"),
    }
    let v3 = FindCoordinatorRequest {
        key: "g".into(),
        ..Default::default()
    };
    match c.call(v3, 3).await {
        Response::FindCoordinator(r) => out.push((r.host.to_string(), r.port)),
        other => panic!("unexpected {other:?}"),
    }
    let v4 = FindCoordinatorRequest {
        coordinator_keys: vec!["g".into()],
        ..Default::default()
    };
    match c.call(v4, 4).await {
        Response::FindCoordinator(r) => {
            out.push((r.coordinators[0].host.to_string(), r.coordinators[0].port))
        }
        other => panic!("unexpected {other:?}"),
    }
    let cluster = DescribeClusterRequest {
        endpoint_type: 1,
        ..Default::default()
    };
    match c.call(cluster, 1).await {
        Response::DescribeCluster(r) => {
            out.push((r.brokers[0].host.to_string(), r.brokers[0].port))
        }
        other => panic!("unexpected {other:?}"),
    }
    out
}

#[tokio::test]
async fn each_listener_answers_with_its_own_advertised_address() {
    let tb = TestBroker::start_with(|config| {
        config.listeners = vec![
            ListenerConfig::plaintext(
                "INTERNAL",
                "127.0.0.1:0".parse().expect("addr"),
                Some(("internal.example".into(), 19092)),
            ),
            ListenerConfig::plaintext("EXTERNAL", "127.0.0.1:0".parse().expect("addr"), None),
        ];
    })
    .await;
    let addrs = tb.running.as_ref().expect("running").listener_addrs.clone();
    assert_eq!(
        addrs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["INTERNAL", "EXTERNAL"]
    );
    let (internal, external) = (addrs[0].1, addrs[1].1);
    assert_ne!(internal, external);

    let mut c = Client::connect(internal).await;
    assert_eq!(
        told(&mut c).await,
        vec![("internal.example".to_string(), 19092); 4]
    );
    let mut c = Client::connect(external).await;
    let bound = ("127.0.0.1".to_string(), i32::from(external.port()));
    assert_eq!(told(&mut c).await, vec![bound; 4]);
    tb.stop().await;
}
