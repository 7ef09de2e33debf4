//! The object store through both schemes the cluster takes: `file://` (a directory) and `s3://`
//! against a real S3-compatible server (moto's server mode, started by skiff-testkit).

use bytes::Bytes;
use skiff_cluster::objects::{Credentials, Objects, S3Options};
use skiff_testkit::s3::{self, S3Server};

async fn round_trip(objects: &Objects) {
    let key = objects.new_key(3, 17);
    assert!(key.contains("objects/3-17-"), "{key}");
    let body = Bytes::from((0..=255u8).cycle().take(100_000).collect::<Vec<u8>>());
    objects.put(&key, body.clone()).await.expect("put");
    assert_eq!(
        objects.get_range(&key, 1000..1010).await.expect("range"),
        body.slice(1000..1010)
    );
    assert_eq!(
        objects.get_range(&key, 0..100_000).await.expect("whole"),
        body
    );
    let listed = objects.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, key);
    assert!(listed[0].last_modified_ms > 0);
    objects.delete(&key).await.expect("delete");
    objects.delete(&key).await.expect("deleting twice is fine");
    assert!(objects.list().await.expect("list").is_empty());
    assert!(objects.get_range(&key, 0..1).await.is_err());
}

#[tokio::test]
async fn a_shared_directory() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/cluster-objects", dir.path().display());
    let objects = Objects::open(&url, &S3Options::default()).expect("open");
    round_trip(&objects).await;
}

#[tokio::test]
async fn an_s3_compatible_server() {
    let Some(server) = S3Server::start().expect("start moto_server") else {
        return;
    };
    server.create_bucket("skiff").await.expect("bucket");
    let options = S3Options {
        endpoint: Some(server.endpoint()),
        region: Some(s3::REGION.into()),
        credentials: Some(Credentials {
            access_key_id: s3::ACCESS_KEY_ID.into(),
            secret_access_key: s3::SECRET_ACCESS_KEY.into(),
            session_token: None,
        }),
    };
    let objects = Objects::open("s3://skiff/cluster-a", &options).expect("open");
    round_trip(&objects).await;
    // Another prefix in the same bucket is another cluster's: not listed.
    let other = Objects::open("s3://skiff/cluster-b", &options).expect("open");
    let key = other.new_key(1, 1);
    other.put(&key, Bytes::from_static(b"x")).await.unwrap();
    assert!(objects.list().await.unwrap().is_empty());
    assert_eq!(other.list().await.unwrap().len(), 1);
}
