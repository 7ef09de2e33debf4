//! `skiff group list|describe|delete`.

use clap::Subcommand;
use serde_json::json;
use skiff_client::{Admin, TopicPartition};

use super::{CmdResult, Conn, print_json, print_table};

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List consumer groups.
    #[command(
        after_help = "Examples:\n  skiff group list\n  skiff group list --json\n  skiff group list --bootstrap broker:9093 --command-config client.properties"
    )]
    List,
    /// Show a group's members, assignments, committed offsets and lag.
    #[command(after_help = "Examples:\n  skiff group describe billing")]
    Describe { group: String },
    /// Delete empty groups.
    #[command(after_help = "Examples:\n  skiff group delete billing")]
    Delete {
        #[arg(required = true)]
        groups: Vec<String>,
    },
}

pub async fn run(conn: Conn, command: GroupCommand) -> CmdResult {
    let admin = Admin::new(conn.client()?);
    let result = execute(&admin, &conn, command).await;
    // Closing sends the terminating telemetry push (KIP-714) when the broker asked for metrics.
    admin.client().close().await;
    result
}

async fn execute(admin: &Admin, conn: &Conn, command: GroupCommand) -> CmdResult {
    match command {
        GroupCommand::List => {
            let groups = admin.list_groups().await?;
            if conn.json {
                print_json(&json!(
                    groups
                        .iter()
                        .map(|g| json!({
                            "group": g.group_id,
                            "state": g.state,
                            "type": g.group_type,
                            "protocol_type": g.protocol_type,
                        }))
                        .collect::<Vec<_>>()
                ));
            } else {
                let rows: Vec<Vec<String>> = groups
                    .iter()
                    .map(|g| vec![g.group_id.clone(), g.group_type.clone(), g.state.clone()])
                    .collect();
                print_table(&["GROUP", "TYPE", "STATE"], &rows);
            }
        }
        GroupCommand::Describe { group } => {
            let d = admin.describe_group(&group).await?;
            // Lag = latest offset - committed offset, per committed partition.
            let mut lags: Vec<(TopicPartition, i64, i64)> = Vec::new();
            for (tp, committed) in &d.offsets {
                let latest = match admin.describe_topic(&tp.topic).await {
                    Ok(t) => t
                        .offsets
                        .iter()
                        .find(|(p, _, _)| *p == tp.partition)
                        .map(|(_, _, hi)| *hi)
                        .unwrap_or(-1),
                    Err(_) => -1,
                };
                lags.push((tp.clone(), *committed, latest));
            }
            if conn.json {
                print_json(&json!({
                    "group": d.group_id,
                    "state": d.state,
                    "type": d.group_type,
                    "epoch": d.group_epoch,
                    "assignor": d.assignor,
                    "members": d.members.iter().map(|m| json!({
                        "member_id": m.member_id,
                        "client_id": m.client_id,
                        "host": m.client_host,
                        "epoch": m.member_epoch,
                        "assignment": m.assignment.iter().map(|tp| tp.to_string()).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                    "offsets": lags.iter().map(|(tp, c, hi)| json!({
                        "topic": tp.topic, "partition": tp.partition, "committed": c, "latest": hi,
                        "lag": if *hi >= 0 { (hi - c).max(0) } else { -1 },
                    })).collect::<Vec<_>>(),
                }));
            } else {
                println!(
                    "group {} ({}, state {}, epoch {}, assignor {})",
                    d.group_id, d.group_type, d.state, d.group_epoch, d.assignor
                );
                let rows: Vec<Vec<String>> = d
                    .members
                    .iter()
                    .map(|m| {
                        vec![
                            m.member_id.clone(),
                            m.member_epoch.to_string(),
                            m.client_id.clone(),
                            m.client_host.clone(),
                            m.assignment
                                .iter()
                                .map(|tp| tp.to_string())
                                .collect::<Vec<_>>()
                                .join(","),
                        ]
                    })
                    .collect();
                print_table(&["MEMBER", "EPOCH", "CLIENT", "HOST", "ASSIGNMENT"], &rows);
                println!();
                let rows: Vec<Vec<String>> = lags
                    .iter()
                    .map(|(tp, c, hi)| {
                        vec![
                            tp.topic.clone(),
                            tp.partition.to_string(),
                            c.to_string(),
                            hi.to_string(),
                            if *hi >= 0 {
                                (hi - c).max(0).to_string()
                            } else {
                                "?".into()
                            },
                        ]
                    })
                    .collect();
                print_table(&["TOPIC", "PARTITION", "COMMITTED", "LATEST", "LAG"], &rows);
            }
        }
        GroupCommand::Delete { groups } => {
            let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
            admin.delete_groups(&refs).await?;
            if conn.json {
                print_json(&json!({"deleted": groups}));
            } else {
                for g in groups {
                    println!("deleted group {g}");
                }
            }
        }
    }
    Ok(())
}
