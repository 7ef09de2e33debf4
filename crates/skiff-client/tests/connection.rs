//! The connection layer against a scripted fake broker: ApiVersions fallback (UNSUPPORTED_VERSION
//! with a v0 body), pipelined requests, and a broken connection failing every pending request at
//! once.

use std::time::{Duration, Instant};

use skiff_client::{Client, ClientConfig, Error};
use skiff_protocol::generated::api_versions_response::ApiVersion;
use skiff_protocol::generated::{ApiVersionsResponse, MetadataRequest};
use skiff_protocol::header::{RequestFrame, encode_response_frame};
use skiff_protocol::{ApiKey, FrameReader, Request, Response, error_codes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

fn versions(api_versions_max: i16) -> Vec<ApiVersion> {
    vec![
        ApiVersion {
            api_key: ApiKey::ApiVersions.key(),
            min_version: 0,
            max_version: api_versions_max,
            ..Default::default()
        },
        ApiVersion {
            api_key: ApiKey::Metadata.key(),
            min_version: 0,
            max_version: 12,
            ..Default::default()
        },
    ]
}

#[tokio::test]
async fn api_versions_fallback_then_broken_connection_fails_all_pending_at_once() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (seen_tx, seen_rx) = oneshot::channel::<Vec<(ApiKey, i16, Option<skiff_protocol::Uuid>)>>();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.expect("accept");
        let (read, mut write) = socket.into_split();
        let mut reader = FrameReader::new(read, 1 << 20);
        let mut seen = Vec::new();
        let mut metadata_requests = 0;
        while let Ok(Some(frame)) = reader.read_frame().await {
            let request = RequestFrame::parse(frame).expect("request");
            seen.push((
                request.api_key,
                request.version(),
                request.header.instance_id(),
            ));
            match request.api_key {
                ApiKey::ApiVersions if request.version() > 3 => {
                    // An old broker: UNSUPPORTED_VERSION with a v0 body listing its ranges.
                    let response = Response::ApiVersions(ApiVersionsResponse {
                        error_code: error_codes::UNSUPPORTED_VERSION,
                        api_keys: versions(3),
                        ..Default::default()
                    });
                    let out = encode_response_frame(&response, 0, request.correlation_id())
                        .expect("encode");
                    write.write_all(&out).await.expect("write");
                }
                ApiKey::ApiVersions => {
                    let response = Response::ApiVersions(ApiVersionsResponse {
                        api_keys: versions(3),
                        ..Default::default()
                    });
                    let out = encode_response_frame(
                        &response,
                        request.version(),
                        request.correlation_id(),
                    )
                    .expect("encode");
                    write.write_all(&out).await.expect("write");
                }
                _ => {
                    // Hold the requests unanswered; after the third, drop the connection.
                    metadata_requests += 1;
                    if metadata_requests == 3 {
                        break;
                    }
                }
            }
        }
        let _ = seen_tx.send(seen);
    });

    let mut config = ClientConfig::new(&addr.to_string());
    config.request_timeout = Duration::from_secs(20);
    let client = Client::new(config).expect("client");
    let conn = client
        .connection(-1)
        .await
        .expect("connect with ApiVersions fallback");
    assert_eq!(conn.broker_range(ApiKey::ApiVersions), Some((0, 3)));
    assert_eq!(
        conn.version(ApiKey::Metadata).expect("metadata version"),
        12
    );
    let call = || {
        let conn = conn.clone();
        async move {
            conn.call(
                Request::Metadata(MetadataRequest::default()),
                12,
                Duration::from_secs(20),
            )
            .await
        }
    };
    let started = Instant::now();
    let (a, b, c) = tokio::join!(call(), call(), call());
    let elapsed = started.elapsed();
    for result in [a, b, c] {
        match result {
            Err(Error::ConnectionBroken { api, broker, .. }) => {
                assert_eq!(api, "Metadata");
                assert_eq!(broker, addr.to_string());
            }
            other => panic!("expected a broken-connection error, got {other:?}"),
        }
    }
    assert!(
        elapsed < Duration::from_secs(5),
        "failed at once, not at the timeout: {elapsed:?}"
    );
    assert!(conn.is_broken());

    let seen = tokio::time::timeout(Duration::from_secs(20), seen_rx)
        .await
        .expect("in time")
        .expect("seen");
    assert_eq!(seen[0].0, ApiKey::ApiVersions);
    assert_eq!(seen[0].1, 4);
    assert_eq!(seen[1].0, ApiKey::ApiVersions);
    assert_eq!(
        seen[1].1, 3,
        "retried with the broker's highest ApiVersions version"
    );
    // Every v2-header request (ApiVersions v3+ and Metadata v12) carried the same instance ID.
    assert!(
        seen.iter()
            .all(|(_, _, id)| *id == Some(client.instance_id()))
    );

    // The next request reconnects (and fails to connect: the fake broker is gone) with an
    // error naming the request, after a bounded backoff.
    let err = client.connection(-1).await.expect_err("nothing listens");
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
}
