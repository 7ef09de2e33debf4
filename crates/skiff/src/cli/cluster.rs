//! `skiff cluster init|status`: prepare and inspect a cluster's PostgreSQL (and object store)
//! without a broker. `init` applies the schema (as every broker does at start, under the same
//! advisory lock) and fixes the cluster ID; with `--objects` it also checks that the object
//! store takes, returns and deletes an object.

use clap::{Args, Subcommand};
use serde_json::json;
use skiff_cluster::Db;
use skiff_cluster::objects::{Objects, S3Options};

use super::{CmdResult, Failure, exit, print_json, print_table};

#[derive(Args, Debug)]
pub struct ClusterArgs {
    /// The cluster's PostgreSQL: postgres://user:pass@host:port/db[?sslmode=...]
    /// (or SKIFF_CLUSTER_METADATA, which keeps a password out of the process list).
    #[arg(
        long,
        env = "SKIFF_CLUSTER_METADATA",
        value_name = "URL",
        global = true
    )]
    pub metadata: Option<String>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Apply the schema and fix the cluster ID (safe to run again, and beside running brokers).
    #[command(
        after_help = "Examples:\n  skiff cluster init --metadata postgres://skiff@db:5432/skiff\n  \
                      skiff cluster init --metadata postgres://skiff@db:5432/skiff --objects s3://bucket/skiff --s3-endpoint http://minio:9000"
    )]
    Init {
        /// Also check this object store (s3://bucket/prefix or file:///dir).
        #[arg(long, value_name = "URL")]
        objects: Option<String>,
        /// The S3 endpoint (a server that is not AWS).
        #[arg(long, value_name = "URL")]
        s3_endpoint: Option<String>,
        /// The S3 region.
        #[arg(long)]
        s3_region: Option<String>,
    },
    /// The schema version, cluster ID, live brokers, and what the cluster holds.
    #[command(
        after_help = "Examples:\n  skiff cluster status --metadata postgres://skiff@db:5432/skiff\n  skiff cluster status --json"
    )]
    Status,
}

fn failure(context: &str, e: impl std::fmt::Display) -> Failure {
    Failure {
        code: exit::UNREACHABLE,
        message: format!("{context}: {e}"),
    }
}

pub async fn run(args: ClusterArgs, command: ClusterCommand) -> CmdResult {
    let Some(metadata) = &args.metadata else {
        return Err(Failure::usage(
            "--metadata postgres://... (or SKIFF_CLUSTER_METADATA) is required",
        ));
    };
    let db = Db::new(metadata, 2).map_err(|e| Failure::usage(e.to_string()))?;
    match command {
        ClusterCommand::Init {
            objects,
            s3_endpoint,
            s3_region,
        } => {
            let (before, after) = skiff_cluster::schema::migrate(&db)
                .await
                .map_err(|e| failure("applying the schema", e))?;
            let candidate = skiff_protocol_cluster_id();
            let cluster_id = skiff_cluster::schema::cluster_id(&db, &candidate)
                .await
                .map_err(|e| failure("reading the cluster ID", e))?;
            let mut checked = None;
            if let Some(url) = &objects {
                let store = Objects::open(
                    url,
                    &S3Options {
                        endpoint: s3_endpoint,
                        region: s3_region,
                        credentials: None,
                    },
                )
                .map_err(|e| Failure::usage(e.to_string()))?;
                let key = store.new_key(-1, 0);
                store
                    .put(&key, bytes::Bytes::from_static(b"skiff cluster init"))
                    .await
                    .map_err(|e| failure("writing a test object", e))?;
                let back = store
                    .get_range(&key, 0..18)
                    .await
                    .map_err(|e| failure("reading the test object", e))?;
                store
                    .delete(&key)
                    .await
                    .map_err(|e| failure("deleting the test object", e))?;
                if back.as_ref() != b"skiff cluster init" {
                    return Err(failure("the object store", "returned other bytes"));
                }
                checked = Some(url.clone());
            }
            if args.json {
                print_json(&json!({
                    "schema_version_before": before,
                    "schema_version": after,
                    "cluster_id": cluster_id,
                    "objects_checked": checked,
                }));
            } else {
                if before == after {
                    println!("schema: version {after} (already current)");
                } else {
                    println!("schema: version {before} -> {after}");
                }
                println!("cluster ID: {cluster_id}");
                if let Some(url) = checked {
                    println!("object store: {url} takes, returns and deletes objects");
                }
            }
            Ok(())
        }
        ClusterCommand::Status => {
            let s = skiff_cluster::status::status(&db)
                .await
                .map_err(|e| failure("reading the cluster", e))?;
            if args.json {
                let brokers: Vec<_> = s
                    .brokers
                    .iter()
                    .map(|b| {
                        json!({"node_id": b.node_id, "epoch": b.epoch, "host": b.host,
                               "port": b.port, "rack": b.rack})
                    })
                    .collect();
                print_json(&json!({
                    "schema_version": s.schema_version,
                    "cluster_id": s.cluster_id,
                    "brokers": brokers,
                    "topics": s.topics,
                    "partitions": s.partitions,
                    "batches": s.batches,
                    "log_bytes": s.log_bytes,
                    "objects": s.objects,
                    "object_bytes": s.object_bytes,
                    "unused_objects": s.unused_objects,
                    "coordinator_shards": s.shards.iter()
                        .map(|(owner, n)| json!({"owner": owner, "shards": n}))
                        .collect::<Vec<_>>(),
                }));
                return Ok(());
            }
            if s.schema_version == 0 {
                println!("no Skiff schema in this database: run `skiff cluster init`");
                return Err(Failure {
                    code: exit::NOT_FOUND,
                    message: "not a Skiff cluster".into(),
                });
            }
            println!(
                "cluster {} (schema version {})",
                s.cluster_id.as_deref().unwrap_or("?"),
                s.schema_version
            );
            println!(
                "{} topics, {} partitions, {} batches ({} bytes in the logs), {} objects ({} bytes, {} unused)",
                s.topics,
                s.partitions,
                s.batches,
                s.log_bytes,
                s.objects,
                s.object_bytes,
                s.unused_objects
            );
            let rows: Vec<Vec<String>> = s
                .brokers
                .iter()
                .map(|b| {
                    vec![
                        b.node_id.to_string(),
                        b.epoch.to_string(),
                        format!("{}:{}", b.host, b.port),
                        b.rack.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            print_table(&["NODE", "EPOCH", "ADDRESS", "RACK"], &rows);
            let owned: Vec<String> = s
                .shards
                .iter()
                .map(|(owner, n)| match owner {
                    Some(node) => format!("node {node}: {n}"),
                    None => format!("unowned: {n}"),
                })
                .collect();
            println!("coordinator shards: {}", owned.join(", "));
            Ok(())
        }
    }
}

/// A fresh cluster ID candidate (Kafka's 22-character form of a random UUID), as a broker
/// makes one.
fn skiff_protocol_cluster_id() -> String {
    skiff_protocol::Uuid::random()
        .unwrap_or(skiff_protocol::Uuid::ONE)
        .to_string()
}
