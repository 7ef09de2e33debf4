//! The services against themselves: a PostgreSQL server answers, survives stop and start, runs
//! beside others and goes away when dropped; the S3 server stores and returns an object; the
//! certificates make a TLS handshake. A service that is not installed skips its test (outside
//! CI).

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::Context;
use skiff_testkit::TIMEOUT;
use skiff_testkit::certs::{self, TestCa};
use skiff_testkit::postgres::Postgres;
use skiff_testkit::s3::S3Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn select_one(url: &str) -> anyhow::Result<i32> {
    let (client, connection) =
        tokio::time::timeout(TIMEOUT, tokio_postgres::connect(url, tokio_postgres::NoTls))
            .await
            .context("connect: timed out")??;
    let connection = tokio::spawn(connection);
    let row = client.query_one("SELECT 1", &[]).await?;
    drop(client);
    let _ = tokio::time::timeout(TIMEOUT, connection).await;
    Ok(row.get(0))
}

fn refuses(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err()
}

#[tokio::test]
async fn postgres_answers_and_survives_a_restart() -> anyhow::Result<()> {
    let Some(mut pg) = Postgres::start()? else {
        return Ok(());
    };
    let url = pg.database("skiff").await?;
    assert_eq!(
        url,
        format!("postgres://postgres@127.0.0.1:{}/skiff", pg.port())
    );
    assert_eq!(select_one(&url).await?, 1);

    pg.stop()?;
    assert!(
        refuses(pg.port()),
        "stopped, the server refuses connections"
    );
    assert!(select_one(&url).await.is_err());

    pg.start_again()?;
    assert_eq!(select_one(&url).await?, 1, "same port, same databases");
    Ok(())
}

#[tokio::test]
async fn postgres_servers_run_side_by_side_and_go_away_when_dropped() -> anyhow::Result<()> {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(Postgres::start);
        let b = s.spawn(Postgres::start);
        (a.join().expect("start a"), b.join().expect("start b"))
    });
    let (Some(a), Some(b)) = (a?, b?) else {
        return Ok(());
    };
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    for (pg, db) in [(&a, "one"), (&a, "two"), (&b, "one")] {
        assert_eq!(select_one(&pg.database(db).await?).await?, 1);
    }
    assert!(
        a.database("one").await.is_err(),
        "a database is created once"
    );

    let (port, dir) = (a.port(), a.dir().to_path_buf());
    drop(a);
    assert!(refuses(port), "dropped, the server is stopped");
    assert!(!dir.exists(), "dropped, its directory is removed");
    assert_eq!(select_one(&b.url("one")).await?, 1, "the other one runs on");
    Ok(())
}

#[tokio::test]
async fn s3_stores_and_returns_an_object() -> anyhow::Result<()> {
    let Some(s3) = S3Server::start()? else {
        return Ok(());
    };
    assert_eq!(s3.endpoint(), format!("http://127.0.0.1:{}", s3.port()));
    s3.create_bucket("skiff-test").await?;
    assert_eq!(s3.get_object("skiff-test", "a/b c.bin").await?, None);
    let body: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    s3.put_object("skiff-test", "a/b c.bin", &body).await?;
    assert_eq!(s3.get_object("skiff-test", "a/b c.bin").await?, Some(body));
    assert!(
        s3.put_object("no-such-bucket", "k", b"x").await.is_err(),
        "no bucket, no object"
    );

    let port = s3.port();
    drop(s3);
    assert!(refuses(port), "dropped, the server is stopped");
    Ok(())
}

#[tokio::test]
async fn test_certificates_make_a_mutual_tls_handshake() -> anyhow::Result<()> {
    let ca = TestCa::new("testkit CA");
    let server = tokio_rustls::TlsAcceptor::from(certs::server_config(&ca.server()));
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let serving = tokio::spawn(async move {
        // Each connection: the handshake, "hello", the end.
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let server = server.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = server.accept(tcp).await {
                    let _ = tls.write_all(b"hello").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    let alice = ca.client(&[("O", "Acme"), ("CN", "alice")]);
    let mut client = tokio::time::timeout(
        TIMEOUT,
        certs::connect_tls(addr, certs::client_config(&ca.pem, Some(&alice))),
    )
    .await??;
    let mut got = Vec::new();
    tokio::time::timeout(TIMEOUT, client.read_to_end(&mut got)).await??;
    assert_eq!(got, b"hello");

    let stranger = TestCa::new("another CA");
    let refused = tokio::time::timeout(
        TIMEOUT,
        certs::connect_tls(addr, certs::client_config(&stranger.pem, None)),
    )
    .await?;
    assert!(
        refused.is_err(),
        "a client trusting another CA refuses the server"
    );
    serving.abort();

    let dir = tempfile::tempdir()?;
    let (keystore, truststore) = certs::listener_files(dir.path(), &ca);
    assert!(std::fs::read_to_string(keystore)?.contains("PRIVATE KEY"));
    assert_eq!(std::fs::read_to_string(truststore)?, ca.pem);
    let (crt, key) = ca.client_cn("carol").write_pair(dir.path(), "carol");
    assert!(crt.ends_with("carol.crt") && key.ends_with("carol.key"));
    Ok(())
}
