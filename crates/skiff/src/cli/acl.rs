//! `skiff acl add|list|remove`: ACLs with kafka-acls' flags, through CreateAcls, DescribeAcls
//! and DeleteAcls.

use std::collections::BTreeSet;

use clap::{Args, Subcommand};
use serde_json::json;
use skiff_auth::acl::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation,
    AclPermissionType, CLUSTER_NAME, PatternType, ResourcePattern, ResourcePatternFilter,
    ResourceType, WILDCARD_HOST,
};
use skiff_client::Admin;

use super::{CmdResult, Conn, Failure, print_json, print_table};

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Add an ACL for every principal, operation and resource given.
    #[command(
        after_help = "Examples:\n  skiff acl add --allow-principal User:alice --operation READ --operation DESCRIBE --topic orders\n  \
                      skiff acl add --allow-principal User:app --operation WRITE --topic orders- --resource-pattern-type prefixed\n  \
                      skiff acl add --deny-principal User:mallory --operation ALL --cluster --host 10.0.0.7\n  \
                      skiff acl add --allow-principal User:billing --operation READ --group billing --command-config admin.properties"
    )]
    Add(AclArgs),
    /// List the ACLs that match: every one without flags.
    #[command(
        after_help = "Examples:\n  skiff acl list\n  skiff acl list --topic orders --resource-pattern-type match\n  \
                      skiff acl list --allow-principal User:alice --json"
    )]
    List(AclArgs),
    /// Remove the ACLs that match, on the resources given.
    #[command(
        after_help = "Examples:\n  skiff acl remove --allow-principal User:alice --operation READ --topic orders\n  \
                      skiff acl remove --topic orders- --resource-pattern-type prefixed\n  \
                      skiff acl remove --group billing --resource-pattern-type any"
    )]
    Remove(AclArgs),
}

/// kafka-acls' flags. For `list` and `remove`, a flag not given matches anything.
#[derive(Args, Debug, Default)]
pub struct AclArgs {
    /// A principal the ACLs allow, TYPE:NAME (User:alice; User:* for every user); repeatable.
    #[arg(long = "allow-principal", value_name = "PRINCIPAL")]
    allow_principals: Vec<String>,
    /// A principal the ACLs deny; repeatable.
    #[arg(long = "deny-principal", value_name = "PRINCIPAL")]
    deny_principals: Vec<String>,
    /// An operation: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION,
    /// DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE or ALL; repeatable.
    #[arg(long = "operation", value_name = "OPERATION")]
    operations: Vec<AclOperation>,
    /// A topic; repeatable.
    #[arg(long = "topic", value_name = "TOPIC")]
    topics: Vec<String>,
    /// A consumer group; repeatable.
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
    /// A transactional ID; repeatable.
    #[arg(long = "transactional-id", value_name = "ID")]
    transactional_ids: Vec<String>,
    /// How the resource names apply: literal (the default) or prefixed; `list` and `remove` also
    /// take any (either, this exact name) and match (every ACL that applies to the name).
    #[arg(long = "resource-pattern-type", value_name = "TYPE")]
    pattern_type: Option<PatternType>,
    /// The client address the ACLs apply to: `add` defaults to * (any host); `list` and
    /// `remove` match any host unless given.
    #[arg(long)]
    host: Option<String>,
}

impl AclArgs {
    /// The resources given, as (type, name).
    fn resources(&self) -> Vec<(ResourceType, &str)> {
        let named = [
            (ResourceType::Topic, &self.topics),
            (ResourceType::Group, &self.groups),
            (ResourceType::TransactionalId, &self.transactional_ids),
        ];
        let mut resources: Vec<(ResourceType, &str)> = named
            .into_iter()
            .flat_map(|(resource_type, names)| {
                names.iter().map(move |name| (resource_type, name.as_str()))
            })
            .collect();
        if self.cluster {
            resources.push((ResourceType::Cluster, CLUSTER_NAME));
        }
        resources
    }

    /// The principals given, with the permission each gets.
    fn principals(&self) -> Vec<(&str, AclPermissionType)> {
        let allowed = self
            .allow_principals
            .iter()
            .map(|p| (p.as_str(), AclPermissionType::Allow));
        let denied = self
            .deny_principals
            .iter()
            .map(|p| (p.as_str(), AclPermissionType::Deny));
        allowed.chain(denied).collect()
    }

    /// The ACLs `add` creates: one per resource, principal and operation.
    fn bindings(&self) -> Result<Vec<AclBinding>, Failure> {
        let (resources, principals) = (self.resources(), self.principals());
        if resources.is_empty() {
            return Err(Failure::usage(
                "give a resource: --topic, --group, --transactional-id or --cluster",
            ));
        }
        if principals.is_empty() {
            return Err(Failure::usage(
                "give a principal: --allow-principal or --deny-principal",
            ));
        }
        if self.operations.is_empty() {
            return Err(Failure::usage("give an operation: --operation"));
        }
        let pattern_type = self.pattern_type.unwrap_or(PatternType::Literal);
        if !matches!(pattern_type, PatternType::Literal | PatternType::Prefixed) {
            return Err(Failure::usage(
                "--resource-pattern-type: an ACL is literal or prefixed",
            ));
        }
        let host = self.host.as_deref().unwrap_or(WILDCARD_HOST);
        let mut bindings = Vec::new();
        for (resource_type, name) in &resources {
            for (principal, permission) in &principals {
                for operation in &self.operations {
                    let binding = AclBinding::new(
                        ResourcePattern::new(*resource_type, *name, pattern_type),
                        AccessControlEntry::new(*principal, host, *operation, *permission),
                    );
                    binding.validate().map_err(Failure::usage)?;
                    bindings.push(binding);
                }
            }
        }
        Ok(bindings)
    }

    /// The filters `list` and `remove` send: one per resource, principal and operation given,
    /// each part matching anything when none is.
    fn filters(&self) -> Vec<AclBindingFilter> {
        let patterns: Vec<ResourcePatternFilter> = match self.resources() {
            resources if resources.is_empty() => vec![ResourcePatternFilter {
                pattern_type: self.pattern_type.unwrap_or(PatternType::Any),
                ..ResourcePatternFilter::ANY
            }],
            resources => resources
                .into_iter()
                .map(|(resource_type, name)| ResourcePatternFilter {
                    resource_type,
                    name: Some(name.to_string()),
                    pattern_type: self.pattern_type.unwrap_or(PatternType::Literal),
                })
                .collect(),
        };
        let principals: Vec<(Option<&str>, AclPermissionType)> = match self.principals() {
            principals if principals.is_empty() => vec![(None, AclPermissionType::Any)],
            principals => principals
                .into_iter()
                .map(|(principal, permission)| (Some(principal), permission))
                .collect(),
        };
        let operations = match self.operations.as_slice() {
            [] => &[AclOperation::Any][..],
            operations => operations,
        };
        let mut filters = Vec::new();
        for pattern in &patterns {
            for (principal, permission) in &principals {
                for operation in operations {
                    filters.push(AclBindingFilter {
                        pattern: pattern.clone(),
                        entry: AccessControlEntryFilter {
                            principal: principal.map(str::to_string),
                            host: self.host.clone(),
                            operation: *operation,
                            permission: *permission,
                        },
                    });
                }
            }
        }
        filters
    }
}

pub async fn run(conn: Conn, command: AclCommand) -> CmdResult {
    let admin = Admin::new(conn.client()?);
    let result = execute(&admin, &conn, command).await;
    // Closing sends the terminating telemetry push (KIP-714) when the broker asked for metrics.
    admin.client().close().await;
    result
}

async fn execute(admin: &Admin, conn: &Conn, command: AclCommand) -> CmdResult {
    match command {
        AclCommand::Add(args) => {
            let bindings = args.bindings()?;
            admin.create_acls(&bindings).await?;
            if conn.json {
                print_json(&json!({"added": bindings_json(&bindings)}));
            } else {
                println!("added {} ACLs", bindings.len());
                print_bindings(&bindings);
            }
        }
        AclCommand::List(args) => {
            let mut found = BTreeSet::new();
            for filter in args.filters() {
                found.extend(admin.describe_acls(&filter).await?);
            }
            let found: Vec<AclBinding> = found.into_iter().collect();
            if conn.json {
                print_json(&bindings_json(&found));
            } else {
                print_bindings(&found);
            }
        }
        AclCommand::Remove(args) => {
            if args.resources().is_empty() {
                return Err(Failure::usage(
                    "give the resource to remove ACLs from: --topic, --group, --transactional-id or --cluster",
                ));
            }
            let removed = admin.delete_acls(&args.filters()).await?;
            if conn.json {
                print_json(&json!({"removed": bindings_json(&removed)}));
            } else {
                println!("removed {} ACLs", removed.len());
                print_bindings(&removed);
            }
        }
    }
    Ok(())
}

fn print_bindings(bindings: &[AclBinding]) {
    let rows: Vec<Vec<String>> = bindings
        .iter()
        .map(|b| {
            vec![
                b.pattern.resource_type.to_string(),
                b.pattern.name.clone(),
                b.pattern.pattern_type.to_string(),
                b.entry.principal.clone(),
                b.entry.permission.to_string(),
                b.entry.operation.to_string(),
                b.entry.host.clone(),
            ]
        })
        .collect();
    print_table(
        &[
            "RESOURCE",
            "NAME",
            "PATTERN",
            "PRINCIPAL",
            "PERMISSION",
            "OPERATION",
            "HOST",
        ],
        &rows,
    );
}

fn bindings_json(bindings: &[AclBinding]) -> serde_json::Value {
    json!(
        bindings
            .iter()
            .map(|b| json!({
                "resource_type": b.pattern.resource_type.name(),
                "name": b.pattern.name,
                "pattern_type": b.pattern.pattern_type.name(),
                "principal": b.entry.principal,
                "permission": b.entry.permission.name(),
                "operation": b.entry.operation.name(),
                "host": b.entry.host,
            }))
            .collect::<Vec<_>>()
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Acl {
        #[command(subcommand)]
        command: AclCommand,
    }

    fn args(argv: &[&str]) -> AclArgs {
        let argv = std::iter::once("acl").chain(argv.iter().copied());
        match Acl::try_parse_from(argv).expect("parses").command {
            AclCommand::Add(args) | AclCommand::List(args) | AclCommand::Remove(args) => args,
        }
    }

    #[test]
    fn add_makes_one_binding_per_resource_principal_and_operation() {
        let bindings = args(&[
            "add",
            "--allow-principal",
            "User:alice",
            "--deny-principal",
            "User:mallory",
            "--operation",
            "read",
            "--operation",
            "DESCRIBE",
            "--topic",
            "orders-",
            "--cluster",
            "--resource-pattern-type",
            "prefixed",
        ])
        .bindings()
        .expect("bindings");
        assert_eq!(bindings.len(), 8);
        assert_eq!(
            bindings[0],
            AclBinding::new(
                ResourcePattern::new(ResourceType::Topic, "orders-", PatternType::Prefixed),
                AccessControlEntry::new(
                    "User:alice",
                    "*",
                    AclOperation::Read,
                    AclPermissionType::Allow
                ),
            )
        );
        assert!(bindings.iter().any(|b| b.pattern.name == CLUSTER_NAME
            && b.entry.permission == AclPermissionType::Deny
            && b.entry.operation == AclOperation::Describe));
    }

    #[test]
    fn add_refuses_what_is_missing_or_not_an_acl() {
        let missing_operation = args(&["add", "--allow-principal", "User:a", "--topic", "t"]);
        assert!(missing_operation.bindings().is_err());
        let no_resource = args(&["add", "--allow-principal", "User:a", "--operation", "READ"]);
        assert!(no_resource.bindings().is_err());
        let filter_type = args(&[
            "add",
            "--allow-principal",
            "User:a",
            "--operation",
            "READ",
            "--topic",
            "t",
            "--resource-pattern-type",
            "match",
        ]);
        assert!(filter_type.bindings().is_err());
        let no_colon = args(&[
            "add",
            "--allow-principal",
            "alice",
            "--operation",
            "READ",
            "--topic",
            "t",
        ]);
        let refused = no_colon.bindings().expect_err("refused");
        assert!(refused.message.contains("principal"), "{}", refused.message);
        let parsed = Acl::try_parse_from(["acl", "add", "--operation", "READING"]);
        assert!(parsed.is_err(), "an unknown operation is a usage error");
    }

    #[test]
    fn list_without_flags_matches_everything() {
        assert_eq!(args(&["list"]).filters(), vec![AclBindingFilter::ANY]);
    }

    #[test]
    fn list_and_remove_filters_leave_what_is_not_given_open() {
        let filters = args(&[
            "remove",
            "--topic",
            "orders",
            "--group",
            "billing",
            "--resource-pattern-type",
            "match",
            "--allow-principal",
            "User:alice",
        ])
        .filters();
        assert_eq!(filters.len(), 2);
        assert_eq!(
            filters[0],
            AclBindingFilter {
                pattern: ResourcePatternFilter {
                    resource_type: ResourceType::Topic,
                    name: Some("orders".into()),
                    pattern_type: PatternType::Match,
                },
                entry: AccessControlEntryFilter {
                    principal: Some("User:alice".into()),
                    host: None,
                    operation: AclOperation::Any,
                    permission: AclPermissionType::Allow,
                },
            }
        );
        assert_eq!(filters[1].pattern.resource_type, ResourceType::Group);
        let literal = args(&["list", "--transactional-id", "loader", "--host", "10.0.0.7"]);
        let filters = literal.filters();
        assert_eq!(filters[0].pattern.pattern_type, PatternType::Literal);
        assert_eq!(filters[0].entry.host.as_deref(), Some("10.0.0.7"));
    }
}
