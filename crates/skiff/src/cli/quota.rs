//! `skiff quota set|list`: client quotas (kafka-configs' `--entity-type users|clients`), through
//! AlterClientQuotas and DescribeClientQuotas, with Skiff's `--client-instance-id` entity.

use clap::{Args, Subcommand};
use serde_json::json;
use skiff_client::Admin;

use super::{CmdResult, Conn, Failure, print_json, print_table};

#[derive(Subcommand, Debug)]
pub enum QuotaCommand {
    /// Set or remove quotas of one entity.
    #[command(
        after_help = "Examples:\n  skiff quota set --client-id app --set producer_byte_rate=1048576\n  \
                      skiff quota set --user alice --client-id-default --set consumer_byte_rate=2097152\n  \
                      skiff quota set --client-instance-id fKyDTSoUQIypXvmIVOg3tg --set producer_byte_rate=10240\n  \
                      skiff quota set --user-default --delete request_percentage"
    )]
    Set {
        #[command(flatten)]
        entity: EntityArgs,
        /// A quota KEY=VALUE (producer_byte_rate, consumer_byte_rate, request_percentage,
        /// controller_mutation_rate);
        /// repeatable (kafka-configs' --add-config).
        #[arg(long = "set", alias = "add-config", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// A quota key to remove; repeatable (kafka-configs' --delete-config).
        #[arg(long = "delete", alias = "delete-config", value_name = "KEY")]
        delete: Vec<String>,
    },
    /// List quotas: every one, or those of the entity parts given.
    #[command(
        after_help = "Examples:\n  skiff quota list\n  skiff quota list --client-id app --json"
    )]
    List {
        #[command(flatten)]
        entity: EntityArgs,
    },
}

/// The entity: a user and/or a client ID (each a name or the default), or one client instance.
#[derive(Args, Debug, Default)]
pub struct EntityArgs {
    /// A user (the principal's name).
    #[arg(long, conflicts_with = "user_default")]
    user: Option<String>,
    /// Every user without a quota of its own.
    #[arg(long)]
    user_default: bool,
    /// A client ID.
    #[arg(long, conflicts_with = "client_id_default")]
    client_id: Option<String>,
    /// Every client ID without a quota of its own.
    #[arg(long)]
    client_id_default: bool,
    /// One client instance (its KIP-1313 ID); stands alone.
    #[arg(long, conflicts_with_all = ["user", "user_default", "client_id", "client_id_default"])]
    client_instance_id: Option<String>,
}

impl EntityArgs {
    fn parts(&self) -> Vec<(&'static str, Option<&str>)> {
        let mut parts = Vec::new();
        if let Some(u) = &self.user {
            parts.push(("user", Some(u.as_str())));
        } else if self.user_default {
            parts.push(("user", None));
        }
        if let Some(c) = &self.client_id {
            parts.push(("client-id", Some(c.as_str())));
        } else if self.client_id_default {
            parts.push(("client-id", None));
        }
        if let Some(i) = &self.client_instance_id {
            parts.push(("client-instance-id", Some(i.as_str())));
        }
        parts
    }
}

fn entity_text(entity: &[(String, Option<String>)]) -> String {
    entity
        .iter()
        .map(|(kind, name)| format!("{kind}={}", name.as_deref().unwrap_or("<default>")))
        .collect::<Vec<_>>()
        .join(",")
}

pub async fn run(conn: Conn, command: QuotaCommand) -> CmdResult {
    let admin = Admin::new(conn.client()?);
    let result = execute(&admin, &conn, command).await;
    admin.client().close().await;
    result
}

async fn execute(admin: &Admin, conn: &Conn, command: QuotaCommand) -> CmdResult {
    match command {
        QuotaCommand::Set {
            entity,
            set,
            delete,
        } => {
            let parts = entity.parts();
            if parts.is_empty() {
                return Err(Failure::usage(
                    "name an entity: --user/--user-default, --client-id/--client-id-default, or --client-instance-id",
                ));
            }
            let mut changes: Vec<(String, Option<f64>)> = Vec::new();
            for kv in &set {
                let Some((key, value)) = kv.split_once('=') else {
                    return Err(Failure::usage(format!("--set {kv}: expected KEY=VALUE")));
                };
                let value: f64 = value
                    .trim()
                    .parse()
                    .map_err(|_| Failure::usage(format!("--set {kv}: not a number")))?;
                changes.push((key.trim().to_string(), Some(value)));
            }
            changes.extend(delete.iter().map(|k| (k.clone(), None)));
            if changes.is_empty() {
                return Err(Failure::usage("nothing to change: give --set or --delete"));
            }
            let changes: Vec<(&str, Option<f64>)> =
                changes.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            admin.alter_client_quotas(&parts, &changes).await?;
            if conn.json {
                print_json(&json!({"altered": true}));
            }
        }
        QuotaCommand::List { entity } => {
            let quotas = admin.describe_client_quotas(&entity.parts(), false).await?;
            if conn.json {
                print_json(&json!(
                    quotas
                        .iter()
                        .map(|q| json!({
                            "entity": q.entity.iter().map(|(k, n)| json!({"type": k, "name": n})).collect::<Vec<_>>(),
                            "quotas": q.values.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
                        }))
                        .collect::<Vec<_>>()
                ));
            } else {
                let rows: Vec<Vec<String>> = quotas
                    .iter()
                    .map(|q| {
                        vec![
                            entity_text(&q.entity),
                            q.values
                                .iter()
                                .map(|(k, v)| format!("{k}={v}"))
                                .collect::<Vec<_>>()
                                .join(","),
                        ]
                    })
                    .collect();
                print_table(&["ENTITY", "QUOTAS"], &rows);
            }
        }
    }
    Ok(())
}
