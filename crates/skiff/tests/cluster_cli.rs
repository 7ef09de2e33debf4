//! `skiff cluster init|status` against a real PostgreSQL (skiff-testkit), and a broker started
//! by the binary in cluster mode showing up in `status`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::BIN;
use skiff_testkit::postgres::Postgres;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().expect("run skiff");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn init_prepares_and_status_shows_a_cluster() {
    let Some(pg) = Postgres::start().expect("start PostgreSQL") else {
        return;
    };
    let url = pg.database("cli").await.expect("database");
    let objects = tempfile::tempdir().expect("tempdir");
    let objects_url = format!("file://{}/objects", objects.path().display());

    // Before init: no schema.
    let (code, out, _) = run(&["cluster", "status", "--metadata", &url]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("skiff cluster init"), "{out}");

    let (code, out, err) = run(&[
        "cluster",
        "init",
        "--metadata",
        &url,
        "--objects",
        &objects_url,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("schema: version 0 -> "), "{out}");
    assert!(out.contains("takes, returns and deletes objects"), "{out}");
    let (code, out, _) = run(&["cluster", "init", "--metadata", &url, "--json"]);
    assert_eq!(code, 0);
    let init: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        init["schema_version_before"], init["schema_version"],
        "a second init changes nothing"
    );
    let cluster_id = init["cluster_id"].as_str().expect("cluster id").to_string();

    // A broker of the cluster shows up in status.
    let data = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let mut broker = Command::new(BIN)
        .args([
            "broker",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
            &data.path().display().to_string(),
            "--node-id",
            "7",
            "--set",
            &format!("cluster.metadata={url}"),
            "--set",
            &format!("cluster.objects={objects_url}"),
            "--set",
            "admin.listen=none",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start broker");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        let (code, out, err) = run(&["cluster", "status", "--metadata", &url, "--json"]);
        assert_eq!(code, 0, "{err}");
        let status: serde_json::Value = serde_json::from_str(&out).expect("json");
        // Registered, and owning every coordinator shard (the only broker).
        if status["brokers"].as_array().is_some_and(|b| !b.is_empty())
            && status["coordinator_shards"] == serde_json::json!([{"owner": 7, "shards": 50}])
        {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the broker never registered: {out}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = broker.kill();
    let _ = broker.wait();
    assert_eq!(status["cluster_id"].as_str(), Some(cluster_id.as_str()));
    assert_eq!(status["brokers"][0]["node_id"], 7);
    assert_eq!(status["brokers"][0]["port"], i64::from(port));
    let (code, out, _) = run(&["cluster", "status", "--metadata", &url]);
    assert_eq!(code, 0);
    assert!(out.contains(&cluster_id) && out.contains("NODE"), "{out}");

    // A URL that is not PostgreSQL's is a usage error.
    let (code, _, err) = run(&["cluster", "status", "--metadata", "mysql://x/y"]);
    assert_eq!(code, 2, "{err}");
}
