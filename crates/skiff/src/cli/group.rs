//! `skiff group list|describe|delete|reset-offsets`, and `skiff group share-offsets set|delete`
//! for KIP-932 share groups.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;
use skiff_client::{Admin, GroupDescription, TopicPartition};

use super::clients::admin_http::AdminHttp;
use super::reset_offsets::ResetOffsets;
use super::{CmdResult, Conn, Failure, GroupArg, GroupsArg, print_json, print_table};

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List groups (consumer, classic and share).
    #[command(
        after_help = "Examples:\n  skiff group list\n  skiff group list --json\n  skiff group list --bootstrap broker:9093 --command-config client.properties"
    )]
    List,
    /// Show a group's members, assignments, committed offsets and lag (a share group: each
    /// share partition's start offset and lag).
    #[command(
        after_help = "Examples:\n  skiff group describe billing\n  skiff group describe --group workers --json\n  \
                      skiff group describe workers --admin https://broker:9644 --admin-ca-file ca.pem"
    )]
    Describe {
        #[command(flatten)]
        group: GroupArg,
        #[command(flatten)]
        admin: AdminView,
    },
    /// Delete empty groups.
    #[command(
        after_help = "Examples:\n  skiff group delete billing\n  skiff group delete --group billing --group audit"
    )]
    Delete {
        #[command(flatten)]
        groups: GroupsArg,
    },
    /// Move a consumer group's committed offsets (kafka-consumer-groups --reset-offsets): the
    /// plan is printed (--dry-run, the default) or committed (--execute, the group must have no
    /// members).
    #[command(
        after_help = "Examples:\n  skiff group reset-offsets --group billing --topic orders --to-earliest\n  \
                      skiff group reset-offsets --group billing --topic orders --to-earliest --execute\n  \
                      skiff group reset-offsets --group billing --topic orders:0,2 --shift-by -100 --execute\n  \
                      skiff group reset-offsets --group billing --all-topics --to-datetime 2024-05-01T00:00:00Z --execute\n\n\
                      Offsets are kept within each partition's [log start, log end]. A --to-datetime without\n\
                      a zone is UTC; a partition with no record at or after it goes to its log end."
    )]
    ResetOffsets(ResetOffsets),
    /// Set or delete a share group's share-partition start offsets (the group must have no
    /// members).
    #[command(subcommand)]
    ShareOffsets(ShareOffsetsCommand),
}

/// Where `skiff group describe` reads what the Kafka protocol does not carry: the records each
/// share group member holds acquired, from the broker's admin HTTP listener (`GET /groups/{id}`).
#[derive(Args, Debug, Clone)]
pub struct AdminView {
    /// The broker's admin HTTP address (config `admin.listen`), for a share group's acquired
    /// records: http://HOST:PORT, or https://HOST:PORT when the listener has TLS.
    #[arg(long, default_value = "http://127.0.0.1:9644")]
    admin: String,
    /// PEM CA bundle that an https:// admin listener's certificate must chain to.
    #[arg(long, value_name = "PATH")]
    admin_ca_file: Option<PathBuf>,
    /// A file holding the admin listener's bearer token (`admin.token.file`).
    #[arg(long, value_name = "PATH", env = "SKIFF_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum ShareOffsetsCommand {
    /// Set where a share group delivers from (AlterShareGroupOffsets): every record before the
    /// new start offset counts as delivered, nothing is in flight.
    #[command(
        after_help = "Examples:\n  skiff group share-offsets set workers --topic jobs --to-earliest\n  \
                            skiff group share-offsets set workers --topic jobs --partition 0 --to-offset 42"
    )]
    Set(ShareOffsetsSet),
    /// Forget a share group's offsets on topics (DeleteShareGroupOffsets): the next member
    /// starts them by the group's `share.auto.offset.reset`.
    #[command(after_help = "Examples:\n  skiff group share-offsets delete workers --topic jobs")]
    Delete {
        #[command(flatten)]
        group: GroupArg,
        /// A topic (repeat for several).
        #[arg(long = "topic", required = true)]
        topics: Vec<String>,
    },
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("to").required(true).args(["to_earliest", "to_latest", "to_offset"])))]
pub struct ShareOffsetsSet {
    #[command(flatten)]
    group: GroupArg,
    #[arg(long)]
    topic: String,
    /// One partition (default: every partition of the topic).
    #[arg(long)]
    partition: Option<i32>,
    /// The log start offset of each partition.
    #[arg(long)]
    to_earliest: bool,
    /// The end of each partition's log: only records produced from now on are delivered.
    #[arg(long)]
    to_latest: bool,
    /// This offset.
    #[arg(long, value_name = "N")]
    to_offset: Option<i64>,
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
        GroupCommand::Describe { group, admin: view } => {
            let d = admin.describe_group(group.name()).await?;
            if d.group_type == "share" {
                return describe_share(admin, conn, &view, &d).await;
            }
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
        GroupCommand::ShareOffsets(ShareOffsetsCommand::Set(set)) => {
            set_share_offsets(admin, conn, set).await?;
        }
        GroupCommand::ShareOffsets(ShareOffsetsCommand::Delete { group, topics }) => {
            let group = group.name();
            let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
            admin.delete_share_group_offsets(group, &refs).await?;
            if conn.json {
                print_json(&json!({"group": group, "deleted": topics}));
            } else {
                for t in topics {
                    println!("deleted the share offsets of group {group} on topic {t}");
                }
            }
        }
        GroupCommand::ResetOffsets(reset) => super::reset_offsets::run(admin, conn, reset).await?,
        GroupCommand::Delete { groups } => {
            let groups = groups.names();
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

/// A group ID as one path segment: unreserved characters as they are, every other byte
/// percent-encoded.
fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The records each member of share group `group` holds acquired, by member ID, from the admin
/// listener's `GET /groups/{id}`; why not, when it cannot be read.
async fn acquired_records(
    view: &AdminView,
    conn: &Conn,
    group: &str,
) -> Result<BTreeMap<String, u64>, String> {
    let http = AdminHttp::new(
        &view.admin,
        view.admin_ca_file.as_deref(),
        view.admin_token_file.as_deref(),
        Duration::from_millis(conn.timeout_ms),
    )
    .map_err(|f| f.message)?;
    let value = http
        .get_json(&format!("/groups/{}", path_segment(group)))
        .await
        .map_err(|f| f.message)?;
    Ok(value["members"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(|m| {
            Some((
                m["member_id"].as_str()?.to_string(),
                m["acquired_records"].as_u64()?,
            ))
        })
        .collect())
}

/// `skiff group describe` of a share group: its members and assignments with the records each
/// holds acquired (from the admin listener, when it can be read), then each share partition's
/// start offset and lag (DescribeShareGroupOffsets).
async fn describe_share(
    admin: &Admin,
    conn: &Conn,
    view: &AdminView,
    d: &GroupDescription,
) -> CmdResult {
    let offsets = admin
        .describe_share_group_offsets(&d.group_id, None)
        .await?;
    let acquired = match acquired_records(view, conn, &d.group_id).await {
        Ok(acquired) => Some(acquired),
        Err(why) => {
            eprintln!(
                "note: acquired records not shown: the admin listener ({}) could not be read: {why}",
                view.admin
            );
            None
        }
    };
    let held = |member: &str| acquired.as_ref().and_then(|a| a.get(member).copied());
    let opt = |v: Option<i64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
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
                "acquired_records": held(&m.member_id),
            })).collect::<Vec<_>>(),
            "share_offsets": offsets.iter().map(|o| json!({
                "topic": o.partition.topic,
                "partition": o.partition.partition,
                "start_offset": o.start_offset,
                "lag": o.lag,
            })).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
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
                held(&m.member_id).map_or_else(|| "-".to_string(), |n| n.to_string()),
            ]
        })
        .collect();
    print_table(
        &[
            "MEMBER",
            "EPOCH",
            "CLIENT",
            "HOST",
            "ASSIGNMENT",
            "ACQUIRED",
        ],
        &rows,
    );
    println!();
    let rows: Vec<Vec<String>> = offsets
        .iter()
        .map(|o| {
            vec![
                o.partition.topic.clone(),
                o.partition.partition.to_string(),
                opt(o.start_offset),
                opt(o.lag),
            ]
        })
        .collect();
    print_table(&["TOPIC", "PARTITION", "START-OFFSET", "LAG"], &rows);
    Ok(())
}

/// `skiff group share-offsets set`: the new start offsets, resolved from the topic's offsets
/// for `--to-earliest` / `--to-latest`.
async fn set_share_offsets(admin: &Admin, conn: &Conn, set: ShareOffsetsSet) -> CmdResult {
    let topic = admin.describe_topic(&set.topic).await?;
    let mut offsets: Vec<(TopicPartition, i64)> = Vec::new();
    for (partition, earliest, latest) in &topic.offsets {
        if set.partition.is_some_and(|p| p != *partition) {
            continue;
        }
        let offset = match set.to_offset {
            Some(n) => n,
            None if set.to_earliest => *earliest,
            None => *latest,
        };
        offsets.push((TopicPartition::new(set.topic.clone(), *partition), offset));
    }
    if offsets.is_empty() {
        return Err(Failure::usage(format!(
            "topic {} has no partition {}",
            set.topic,
            set.partition.unwrap_or(-1)
        )));
    }
    if let Some(n) = set.to_offset
        && n < 0
    {
        return Err(Failure::usage(format!("--to-offset {n} is negative")));
    }
    admin
        .alter_share_group_offsets(set.group.name(), &offsets)
        .await?;
    if conn.json {
        print_json(&json!({
            "group": set.group.name(),
            "share_offsets": offsets.iter().map(|(tp, o)| json!({
                "topic": tp.topic, "partition": tp.partition, "start_offset": o,
            })).collect::<Vec<_>>(),
        }));
    } else {
        let rows: Vec<Vec<String>> = offsets
            .iter()
            .map(|(tp, o)| vec![tp.topic.clone(), tp.partition.to_string(), o.to_string()])
            .collect();
        print_table(&["TOPIC", "PARTITION", "START-OFFSET"], &rows);
    }
    Ok(())
}
