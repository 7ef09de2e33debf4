//! `skiff topic create|list|describe|alter|delete`.

use clap::Subcommand;
use serde_json::json;
use skiff_client::{Admin, AlterConfigOp, NewTopic};

use super::{CmdResult, Conn, Failure, TopicArg, TopicsArg, print_json, print_table};

/// DescribeConfigs' source of a config set on the topic itself (`DYNAMIC_TOPIC_CONFIG`).
const TOPIC_CONFIG_SOURCE: i8 = 1;

/// `--config KEY=VALUE` items as pairs.
fn config_pairs(items: &[String]) -> Result<Vec<(String, String)>, Failure> {
    items
        .iter()
        .map(|item| {
            item.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.to_string()))
                .ok_or_else(|| Failure::usage(format!("--config {item:?}: expected KEY=VALUE")))
        })
        .collect()
}

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    #[command(
        after_help = "Examples:\n  skiff topic create orders --partitions 6\n  skiff topic create logs --config retention.ms=3600000\n  \
                      skiff topic create --topic orders --partitions 6 --replication-factor 1 --bootstrap-server localhost:9092"
    )]
    Create {
        #[command(flatten)]
        topic: TopicArg,
        /// Number of partitions (-1: the broker's num.partitions).
        #[arg(long, short = 'p', default_value_t = -1, allow_negative_numbers = true)]
        partitions: i32,
        /// Replication factor (-1: the broker's default; a single node honours only 1).
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
    #[command(
        after_help = "Examples:\n  skiff topic describe orders\n  skiff topic describe --topic orders --json"
    )]
    Describe {
        #[command(flatten)]
        topic: TopicArg,
    },
    /// Change a topic's configs (IncrementalAlterConfigs) and grow its partitions
    /// (CreatePartitions).
    #[command(
        after_help = "Examples:\n  skiff topic alter orders --config retention.ms=86400000 --config cleanup.policy=compact\n  \
                      skiff topic alter orders --delete-config retention.ms\n  skiff topic alter --topic orders --partitions 12"
    )]
    Alter {
        #[command(flatten)]
        topic: TopicArg,
        /// Set a topic config, KEY=VALUE (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Return a topic config to its default (repeatable).
        #[arg(long = "delete-config", value_name = "KEY")]
        delete_configs: Vec<String>,
        /// The new total number of partitions (partitions can only be added).
        #[arg(long, short = 'p')]
        partitions: Option<i32>,
    },
    /// Delete topics.
    #[command(
        after_help = "Examples:\n  skiff topic delete orders logs\n  skiff topic delete --topic orders"
    )]
    Delete {
        #[command(flatten)]
        topics: TopicsArg,
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
            topic,
            partitions,
            replication_factor,
            configs,
        } => {
            let name = topic.name().to_string();
            let mut topic = NewTopic::new(name.clone(), partitions);
            topic.replication_factor = replication_factor;
            topic.configs = config_pairs(&configs)?;
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
        TopicCommand::Describe { topic } => {
            let d = admin.describe_topic(topic.name()).await?;
            // The configs set on the topic itself (the rest are the broker's defaults).
            let configs: Vec<(String, String)> = admin
                .describe_topic_configs(topic.name())
                .await?
                .into_iter()
                .filter(|c| c.source == TOPIC_CONFIG_SOURCE)
                .map(|c| {
                    let value = if c.is_sensitive {
                        "(sensitive)".to_string()
                    } else {
                        c.value.unwrap_or_default()
                    };
                    (c.name, value)
                })
                .collect();
            let leader = |p: i32| d.metadata.partition(p).map(|m| m.leader).unwrap_or(-1);
            if conn.json {
                print_json(&json!({
                    "name": d.metadata.name,
                    "id": d.metadata.id.to_string(),
                    "internal": d.metadata.internal,
                    "configs": configs.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
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
                if !configs.is_empty() {
                    let list: Vec<String> =
                        configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    println!("configs: {}", list.join(","));
                }
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
        TopicCommand::Alter {
            topic,
            configs,
            delete_configs,
            partitions,
        } => {
            alter(
                admin,
                conn,
                topic.name(),
                &configs,
                &delete_configs,
                partitions,
            )
            .await?;
        }
        TopicCommand::Delete { topics } => {
            let names = topics.names();
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

/// `skiff topic alter`: the config changes in one IncrementalAlterConfigs, then the partitions.
async fn alter(
    admin: &Admin,
    conn: &Conn,
    name: &str,
    configs: &[String],
    delete_configs: &[String],
    partitions: Option<i32>,
) -> CmdResult {
    let set = config_pairs(configs)?;
    if set.is_empty() && delete_configs.is_empty() && partitions.is_none() {
        return Err(Failure::usage(
            "nothing to alter: give --config KEY=VALUE, --delete-config KEY or --partitions N",
        ));
    }
    let mut changes: Vec<(&str, AlterConfigOp, &str)> = set
        .iter()
        .map(|(k, v)| (k.as_str(), AlterConfigOp::Set, v.as_str()))
        .collect();
    changes.extend(
        delete_configs
            .iter()
            .map(|k| (k.as_str(), AlterConfigOp::Delete, "")),
    );
    if !changes.is_empty() {
        admin.alter_topic_configs(name, &changes).await?;
    }
    if let Some(total) = partitions {
        admin.create_partitions(name, total).await?;
    }
    if conn.json {
        print_json(&json!({
            "name": name,
            "set": set.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "deleted": delete_configs,
            "partitions": partitions,
        }));
    } else {
        for (k, v) in &set {
            println!("topic {name}: set {k}={v}");
        }
        for k in delete_configs {
            println!("topic {name}: deleted {k} (back to the default)");
        }
        if let Some(total) = partitions {
            println!("topic {name}: {total} partitions");
        }
    }
    Ok(())
}
