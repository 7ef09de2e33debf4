//! Client subcommands: `topic`, `produce`, `consume`, `group`, `user`, `acl`, built on
//! `skiff-client`.

pub mod acl;
pub mod clients;
pub mod cluster;
pub mod command_config;
pub mod consume;
pub mod group;
pub mod produce;
pub mod quota;
pub mod reset_offsets;
pub mod topic;
pub mod user;

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use skiff_client::{Client, ClientConfig, Error};

/// Exit codes (documented in `skiff --help`).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Any other failure.
    pub const FAILURE: u8 = 1;
    /// Bad usage (clap's own code).
    pub const USAGE: u8 = 2;
    /// The broker could not be reached.
    pub const UNREACHABLE: u8 = 3;
    /// The topic or group does not exist.
    pub const NOT_FOUND: u8 = 4;
    /// The topic already exists.
    pub const EXISTS: u8 = 5;
    /// The broker rejected the request (a Kafka error code).
    pub const REJECTED: u8 = 6;
    /// Authentication failed (SASL credentials, the TLS handshake, or the admin token).
    pub const AUTHENTICATION: u8 = 7;
}

/// Options every client subcommand takes.
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// Bootstrap broker(s), HOST:PORT[,HOST:PORT...].
    #[arg(
        long,
        short = 'b',
        visible_alias = "bootstrap-server",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    pub bootstrap: String,
    /// Print machine-readable JSON on stdout instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Request timeout in milliseconds.
    #[arg(long, default_value_t = 10_000, global = true)]
    pub timeout_ms: u64,
    /// Kafka client properties for TLS and SASL (security.protocol, sasl.mechanism,
    /// sasl.username, sasl.password or sasl.jaas.config, ssl.ca.location, ...), one KEY=VALUE a
    /// line.
    #[arg(long, global = true, value_name = "FILE")]
    pub command_config: Option<PathBuf>,
}

/// One topic, named positionally (`skiff consume orders`) or as Kafka's tools do
/// (`--topic orders`): exactly one of the two.
#[derive(Args, Debug, Clone)]
#[group(id = "topic_arg", required = true, multiple = false)]
pub struct TopicArg {
    /// The topic.
    #[arg(value_name = "TOPIC", id = "topic_name")]
    name: Option<String>,
    /// The topic, as Kafka's tools take it (instead of the positional TOPIC).
    #[arg(long = "topic", value_name = "TOPIC", id = "topic_flag")]
    flag: Option<String>,
}

impl TopicArg {
    pub fn name(&self) -> &str {
        self.name
            .as_deref()
            .or(self.flag.as_deref())
            .unwrap_or_default()
    }
}

/// One group, named positionally or with Kafka's `--group`: exactly one of the two.
#[derive(Args, Debug, Clone)]
#[group(id = "group_arg", required = true, multiple = false)]
pub struct GroupArg {
    /// The group.
    #[arg(value_name = "GROUP", id = "group_name")]
    name: Option<String>,
    /// The group, as Kafka's tools take it (instead of the positional GROUP).
    #[arg(long = "group", short = 'g', value_name = "GROUP", id = "group_flag")]
    flag: Option<String>,
}

impl GroupArg {
    pub fn name(&self) -> &str {
        self.name
            .as_deref()
            .or(self.flag.as_deref())
            .unwrap_or_default()
    }
}

/// Several names, positionally and/or with a repeated Kafka-style flag; at least one.
#[derive(Args, Debug, Clone)]
#[group(id = "topics_arg", required = true, multiple = true)]
pub struct TopicsArg {
    /// The topics.
    #[arg(value_name = "TOPIC", id = "topic_names")]
    names: Vec<String>,
    /// A topic, as Kafka's tools take it (repeatable).
    #[arg(long = "topic", value_name = "TOPIC", id = "topic_flags")]
    flags: Vec<String>,
}

impl TopicsArg {
    pub fn names(self) -> Vec<String> {
        self.names.into_iter().chain(self.flags).collect()
    }
}

/// Several groups, positionally and/or with a repeated `--group`; at least one.
#[derive(Args, Debug, Clone)]
#[group(id = "groups_arg", required = true, multiple = true)]
pub struct GroupsArg {
    /// The groups.
    #[arg(value_name = "GROUP", id = "group_names")]
    names: Vec<String>,
    /// A group, as Kafka's tools take it (repeatable).
    #[arg(long = "group", short = 'g', value_name = "GROUP", id = "group_flags")]
    flags: Vec<String>,
}

impl GroupsArg {
    pub fn names(self) -> Vec<String> {
        self.names.into_iter().chain(self.flags).collect()
    }
}

/// Kafka's `--property KEY=VALUE` items as pairs; `known` lists the keys a command honours,
/// any other key is a usage error (rather than silently ignored).
pub fn properties(items: &[String], known: &[&str]) -> Result<Vec<(String, String)>, Failure> {
    items
        .iter()
        .map(|item| {
            let (k, v) = item.split_once('=').ok_or_else(|| {
                Failure::usage(format!("--property {item:?}: expected KEY=VALUE"))
            })?;
            let k = k.trim();
            if !known.contains(&k) {
                return Err(Failure::usage(format!(
                    "--property {k}: not supported here (supported: {})",
                    known.join(", ")
                )));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// A boolean property value as Kafka reads it (`true`/`false`, any case).
pub fn property_bool(key: &str, value: &str) -> Result<bool, Failure> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(Failure::usage(format!(
            "--property {key}={value}: expected true or false"
        ))),
    }
}

impl Conn {
    pub fn client(&self) -> Result<Client, Failure> {
        let mut config = ClientConfig::new(&self.bootstrap);
        config.client_id = "skiff-cli".into();
        config.request_timeout = Duration::from_millis(self.timeout_ms);
        config.connect_timeout = Duration::from_millis(self.timeout_ms.min(5_000));
        if let Some(path) = &self.command_config {
            config.security = command_config::load(path)?;
        }
        Ok(Client::new(config)?)
    }
}

/// A command failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::Connect { .. } | Error::ConnectionBroken { .. } | Error::Timeout { .. } => {
                exit::UNREACHABLE
            }
            Error::UnknownTopic(_) | Error::UnknownPartition { .. } => exit::NOT_FOUND,
            Error::Broker {
                code: 3 | 69 | 91 | 100,
                ..
            } => exit::NOT_FOUND,
            Error::Broker { code: 36, .. } => exit::EXISTS,
            Error::Broker { .. } | Error::InstanceIdRejected { .. } => exit::REJECTED,
            Error::Config(_) => exit::USAGE,
            Error::Authentication { .. } => exit::AUTHENTICATION,
            _ => exit::FAILURE,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure {
            code: exit::FAILURE,
            message: e.to_string(),
        }
    }
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::USAGE,
            message: message.into(),
        }
    }
}

pub type CmdResult = Result<(), Failure>;

/// Prints rows as an aligned table with a header.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// Prints a JSON value on stdout.
pub fn print_json(value: &serde_json::Value) {
    println!("{value}");
}

/// Runs an async command on a fresh runtime and maps its failure to an exit code.
pub fn run<F>(future: F) -> i32
where
    F: std::future::Future<Output = CmdResult>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return i32::from(exit::FAILURE);
        }
    };
    match runtime.block_on(future) {
        Ok(()) => i32::from(exit::OK),
        Err(failure) => {
            eprintln!("error: {}", failure.message);
            i32::from(failure.code)
        }
    }
}
