//! `skiff topic create|list|describe|delete`.

use clap::Subcommand;
use serde_json::json;
use skiff_client::{Admin, NewTopic};

use super::{CmdResult, Conn, Failure, print_json, print_table};

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    #[command(
        after_help = "Examples:\n  skiff topic create orders --partitions 6\n  skiff topic create logs --config retention.ms=3600000"
    )]
    Create {
        name: String,
        /// Number of partitions (-1: the broker's num.partitions).
        #[arg(long, short = 'p', default_value_t = -1, allow_negative_numbers = true)]
        partitions: i32,
        /// Replication factor (-1: the broker's default).
        #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
        replication_factor: i16,
        /// Topic config KEY=VALUE (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// List topics.
    #[command(
        after_help = "Examples:\n  skiff topic list\n  skiff topic list --json\n  skiff topic list --bootstrap broker:9093 --command-config client.properties"
    )]
    List,
    /// Show a topic's partitions, leaders and offsets.
    #[command(after_help = "Examples:\n  skiff topic describe orders")]
    Describe { name: String },
    /// Delete topics.
    #[command(after_help = "Examples:\n  skiff topic delete orders logs")]
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

pub async fn run(conn: Conn, command: TopicCommand) -> CmdResult {
    let admin = Admin::new(conn.client()?);
    let result = execute(&admin, &conn, command).await;
    // Closing sends the terminating telemetry push (KIP-714) when the broker asked for metrics.
    admin.client().close().await;
    result
}

async fn execute(admin: &Admin, conn: &Conn, command: TopicCommand) -> CmdResult {
    match command {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => {
            let mut topic = NewTopic::new(name.clone(), partitions);
            topic.replication_factor = replication_factor;
            for item in configs {
                let (k, v) = item.split_once('=').ok_or_else(|| {
                    Failure::usage(format!("--config {item:?}: expected KEY=VALUE"))
                })?;
                topic.configs.push((k.to_string(), v.to_string()));
            }
            let created = admin.create_topics(&[topic]).await?;
            let id = created
                .first()
                .map(|(_, id)| id.to_string())
                .unwrap_or_default();
            if conn.json {
                print_json(&json!({"name": name, "id": id}));
            } else {
                println!("created topic {name} (id {id})");
            }
        }
        TopicCommand::List => {
            let topics = admin.list_topics().await?;
            if conn.json {
                print_json(&json!(
                    topics
                        .iter()
                        .map(|t| json!({
                            "name": t.name,
                            "id": t.id.to_string(),
                            "partitions": t.partitions.len(),
                            "internal": t.internal,
                        }))
                        .collect::<Vec<_>>()
                ));
            } else {
                let rows: Vec<Vec<String>> = topics
                    .iter()
                    .map(|t| {
                        vec![
                            t.name.clone(),
                            t.partitions.len().to_string(),
                            t.id.to_string(),
                        ]
                    })
                    .collect();
                print_table(&["TOPIC", "PARTITIONS", "ID"], &rows);
            }
        }
        TopicCommand::Describe { name } => {
            let d = admin.describe_topic(&name).await?;
            let leader = |p: i32| d.metadata.partition(p).map(|m| m.leader).unwrap_or(-1);
            if conn.json {
                print_json(&json!({
                    "name": d.metadata.name,
                    "id": d.metadata.id.to_string(),
                    "internal": d.metadata.internal,
                    "partitions": d.offsets.iter().map(|(p, lo, hi)| json!({
                        "partition": p,
                        "leader": leader(*p),
                        "earliest": lo,
                        "latest": hi,
                    })).collect::<Vec<_>>(),
                }));
            } else {
                println!(
                    "topic {} (id {}, {} partitions)",
                    d.metadata.name,
                    d.metadata.id,
                    d.metadata.partitions.len()
                );
                let rows: Vec<Vec<String>> = d
                    .offsets
                    .iter()
                    .map(|(p, lo, hi)| {
                        vec![
                            p.to_string(),
                            leader(*p).to_string(),
                            lo.to_string(),
                            hi.to_string(),
                            (hi - lo).max(0).to_string(),
                        ]
                    })
                    .collect();
                print_table(
                    &["PARTITION", "LEADER", "EARLIEST", "LATEST", "RECORDS"],
                    &rows,
                );
            }
        }
        TopicCommand::Delete { names } => {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            admin.delete_topics(&refs).await?;
            if conn.json {
                print_json(&json!({"deleted": names}));
            } else {
                for n in names {
                    println!("deleted topic {n}");
                }
            }
        }
    }
    Ok(())
}
