//! The `skiff` command. `skiff broker` runs a Kafka-compatible broker on an embedded durable log.

mod cli;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{CommandFactory, Parser, Subcommand};
use skiff_broker::{BrokerConfig, Overrides};

/// mimalloc keeps freed pages for reuse: the broker allocates and frees a megabyte-sized buffer
/// per produced or fetched batch, and with glibc's malloc those came back from the kernel as
/// fresh pages each time (a page fault and a page clear per 4 KiB, ~13% of the broker's time).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "skiff",
    version,
    about = "A Kafka-compatible broker where a client instance has one identity everywhere",
    after_help = "Examples:\n  skiff broker --data-dir ./data\n  skiff topic create orders --partitions 3\n  skiff topic --create --topic orders --partitions 3 --bootstrap-server localhost:9092   # Kafka's flags work too\n  seq 1 1000 | skiff produce orders\n  skiff consume orders --group billing --from-beginning --max 1000\n  skiff consume jobs --share-group workers --ack accept --max 10\n  skiff group describe billing --json\n  skiff topic list --bootstrap broker:9093 --command-config client.properties\n  skiff user set alice --mechanism SCRAM-SHA-512 --password-file alice.pw\n  skiff acl add --allow-principal User:alice --operation READ --topic orders\n\nA --command-config file holds Kafka's client properties for TLS and SASL, for example:\n  security.protocol=SASL_SSL\n  sasl.mechanism=SCRAM-SHA-512\n  sasl.username=alice\n  sasl.password=alice-secret\n  ssl.ca.location=/etc/skiff/ca.pem\n\nExit codes (client commands):\n  0 success, 1 failure, 2 bad usage, 3 broker unreachable, 4 topic/group/user not found,\n  5 topic already exists, 6 request rejected by the broker, 7 authentication failed"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker (default: 127.0.0.1:9092, data in ./skiff-data).
    #[command(
        after_help = "Examples:\n  skiff broker\n  skiff broker --listen 0.0.0.0:9092 --advertise kafka.local:9092\n  skiff broker --config skiff.toml --set num.partitions=6 --set flush=interval --set flush.ms=100"
    )]
    Broker {
        /// Listener address, HOST:PORT (an IP address).
        #[arg(long)]
        listen: Option<String>,
        /// Address given to clients in Metadata, HOST:PORT.
        #[arg(long)]
        advertise: Option<String>,
        /// Data directory.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// TOML config file with Kafka-style keys.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Node ID.
        #[arg(long)]
        node_id: Option<i32>,
        /// Any config key, KEY=VALUE (repeatable); wins over the file.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// The metadata file is lost: register the topics of the partition directories again
        /// (their configs return to the defaults) instead of refusing to start.
        #[arg(long)]
        rebuild_metadata: bool,
    },
    /// Create, list, describe, alter and delete topics.
    #[command(
        after_help = "Kafka's kafka-topics forms are accepted: --create, --list, --describe, --alter and --delete\n\
                      stand for the subcommands, and --topic T for the positional name, e.g.\n  \
                      skiff topic --describe --topic orders --bootstrap-server localhost:9092"
    )]
    Topic {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::topic::TopicCommand,
    },
    /// Write lines from stdin or a file as records.
    Produce {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(flatten)]
        args: cli::produce::ProduceArgs,
    },
    /// Print records of a topic (alone, in a consumer group, or in a share group).
    Consume {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(flatten)]
        args: cli::consume::ConsumeArgs,
    },
    /// List, describe and delete groups; reset consumer groups' offsets; set and delete share
    /// groups' offsets.
    #[command(
        after_help = "Kafka's kafka-consumer-groups forms are accepted: --list, --describe, --delete and\n\
                      --reset-offsets stand for the subcommands, and --group G for the positional name, e.g.\n  \
                      skiff group --reset-offsets --group billing --topic orders --to-earliest --execute"
    )]
    Group {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::group::GroupCommand,
    },
    /// SCRAM users: set, list and delete credentials, through a broker or in a stopped
    /// broker's data directory.
    User {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::user::UserCommand,
    },
    /// Client quotas: set and list them (kafka-configs' users and clients, and client
    /// instances).
    Quota {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::quota::QuotaCommand,
    },
    /// ACLs: add, list and remove them (kafka-acls' flags).
    Acl {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::acl::AclCommand,
    },
    /// Prepare and inspect a cluster's PostgreSQL (cluster mode): `init` applies the schema,
    /// `status` shows the live brokers and what the cluster holds.
    Cluster {
        #[command(flatten)]
        args: cli::cluster::ClusterArgs,
        #[command(subcommand)]
        command: cli::cluster::ClusterCommand,
    },
    /// Print a shell completion script on stdout.
    #[command(
        after_help = "Examples:\n  skiff completions bash > /etc/bash_completion.d/skiff\n  skiff completions zsh > \"${fpath[1]}/_skiff\"\n  skiff completions fish > ~/.config/fish/completions/skiff.fish"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Client instances the broker knows (from its admin HTTP listener): IDs, connections,
    /// groups, telemetry and KIP-1313 rejections.
    #[command(
        after_help = "Examples:\n  skiff clients\n  skiff clients --admin http://127.0.0.1:9644 --json\n  skiff clients show AAAAAAAAAAAAAAAAAAAAAA\n  \
                      skiff clients --admin https://broker:9644 --admin-ca-file ca.pem --admin-token-file admin.token"
    )]
    Clients {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(flatten)]
        args: cli::clients::ClientsArgs,
        #[command(subcommand)]
        command: Option<cli::clients::ClientsCommand>,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse_from(kafka_action_forms(std::env::args_os().collect()));
    match cli.command {
        Command::Broker {
            listen,
            advertise,
            data_dir,
            config,
            node_id,
            set,
            rebuild_metadata,
        } => {
            let mut pairs = Vec::new();
            if rebuild_metadata {
                pairs.push(("metadata.rebuild".to_string(), "true".to_string()));
            }
            for item in set {
                let Some((k, v)) = item.split_once('=') else {
                    bail!("--set {item:?}: expected KEY=VALUE");
                };
                pairs.push((k.trim().to_string(), v.trim().to_string()));
            }
            let overrides = Overrides {
                listen,
                advertise,
                data_dir,
                node_id,
                set: pairs,
            };
            let config = BrokerConfig::load(config.as_deref(), &overrides)?;
            run_broker(config)
        }
        Command::Topic { conn, command } => {
            std::process::exit(cli::run(cli::topic::run(conn, command)))
        }
        Command::Produce { conn, args } => {
            std::process::exit(cli::run(cli::produce::run(conn, args)))
        }
        Command::Consume { conn, args } => {
            std::process::exit(cli::run(cli::consume::run(conn, args)))
        }
        Command::Group { conn, command } => {
            std::process::exit(cli::run(cli::group::run(conn, command)))
        }
        Command::User { conn, command } => {
            std::process::exit(cli::run(cli::user::run(conn, command)))
        }
        Command::Acl { conn, command } => {
            std::process::exit(cli::run(cli::acl::run(conn, command)))
        }
        Command::Quota { conn, command } => {
            std::process::exit(cli::run(cli::quota::run(conn, command)))
        }
        Command::Cluster { args, command } => {
            std::process::exit(cli::run(cli::cluster::run(args, command)))
        }
        Command::Completions { shell } => {
            // Into a buffer first: clap_complete panics when its writer fails (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "skiff", &mut script);
            let mut out = std::io::stdout().lock();
            match out.write_all(&script).and_then(|()| out.flush()) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                Err(e) => Err(e).context("writing the completion script"),
            }
        }
        Command::Clients {
            conn,
            args,
            command,
        } => std::process::exit(cli::run(cli::clients::run(
            conn.json,
            conn.timeout_ms,
            args,
            command,
        ))),
    }
}

/// Kafka's tools name the action with a flag (`kafka-topics --create --topic T`,
/// `kafka-consumer-groups --reset-offsets --group G ...`). Under `skiff topic` and `skiff group`,
/// when no subcommand is named, a single such flag becomes the subcommand, so
/// `skiff topic --describe --topic T` is `skiff topic describe --topic T`; anything else is left
/// for clap to judge.
fn kafka_action_forms(mut args: Vec<OsString>) -> Vec<OsString> {
    let actions: &[&str] = match args.get(1).and_then(|a| a.to_str()) {
        Some("topic") => &["create", "list", "describe", "alter", "delete"],
        Some("group") => &["list", "describe", "delete", "reset-offsets"],
        _ => return args,
    };
    let rest = args.get(2..).unwrap_or_default();
    let named = |a: &OsString| {
        a.to_str()
            .is_some_and(|a| actions.contains(&a) || a == "share-offsets" || a == "help")
    };
    if rest.iter().any(named) {
        return args;
    }
    let flags: Vec<(usize, &str)> = rest
        .iter()
        .enumerate()
        .filter_map(|(i, a)| {
            let action = a.to_str()?.strip_prefix("--")?;
            let action = actions.iter().find(|known| **known == action)?;
            Some((i + 2, *action))
        })
        .collect();
    if let [(at, action)] = flags.as_slice() {
        let (at, action) = (*at, OsString::from(*action));
        if at < args.len() {
            args.remove(at);
            args.insert(2, action);
        }
    }
    args
}

fn run_broker(config: BrokerConfig) -> Result<()> {
    raise_descriptor_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let running = skiff_broker::start(config).await?;
        let stop = running.shutdown_handle();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown signal received");
            let _ = stop.send(true);
        });
        running.wait().await
    })
}

/// A partition costs a descriptor (its active segment) and a connection one: the broker raises
/// its soft `RLIMIT_NOFILE` to the hard limit, as Kafka's packaging asks operators to.
fn raise_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return;
    }
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::info!(
            from = ?limit.current,
            to = ?limit.maximum,
            "raised the open-file limit to the hard limit"
        ),
        Err(e) => {
            tracing::warn!(error = %e, soft = ?limit.current, "could not raise the open-file limit")
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
