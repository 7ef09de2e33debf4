//! `skiff produce TOPIC`: one record per input line (stdin or `--file`), optional keys.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::json;
use skiff_client::{Acks, Producer, ProducerConfig, ProducerRecord};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{CmdResult, Conn, Failure, TopicArg, print_json, properties, property_bool};

/// The key separator: `--key-separator`, or Kafka's `parse.key` / `key.separator` properties.
fn key_separator(args: &ProduceArgs) -> Result<Option<String>, Failure> {
    let mut parse_key = false;
    let mut separator = "\t".to_string();
    for (k, v) in properties(&args.properties, &["parse.key", "key.separator"])? {
        match k.as_str() {
            "parse.key" => parse_key = property_bool(&k, &v)?,
            _ => separator = v,
        }
    }
    Ok(if parse_key {
        Some(separator)
    } else {
        args.key_separator.clone()
    })
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum AcksArg {
    #[value(name = "0")]
    Zero,
    #[value(name = "1")]
    One,
    #[value(name = "all")]
    All,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  echo hello | skiff produce greetings\n  skiff produce orders --file orders.txt --key-separator :\n  skiff produce --topic orders --property parse.key=true --property key.separator=: < orders.txt\n  seq 1 100000 | skiff produce numbers --acks 1 --linger-ms 20\n  skiff produce payments --file batch.txt --transactional-id payments-loader\n  echo hello | skiff produce greetings --bootstrap broker:9093 --command-config client.properties"
)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub topic: TopicArg,
    /// Read lines from this file instead of stdin.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Split each line into KEY<SEP>VALUE at the first SEP.
    #[arg(long)]
    pub key_separator: Option<String>,
    /// kafka-console-producer's reader properties (repeatable): parse.key=true|false and
    /// key.separator=SEP (default: a tab); parse.key=true is --key-separator SEP.
    #[arg(
        long = "property",
        value_name = "KEY=VALUE",
        conflicts_with = "key_separator"
    )]
    pub properties: Vec<String>,
    /// Write every record to this partition.
    #[arg(long)]
    pub partition: Option<i32>,
    /// Acknowledgements to wait for.
    #[arg(long, value_enum, default_value = "all")]
    pub acks: AcksArg,
    /// Linger before sending a non-full batch, in ms.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Hide the progress line on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Write all input in one transaction with this transactional ID: committed at the end of
    /// the input, aborted if any record fails (read_committed consumers then see none of it).
    #[arg(long)]
    pub transactional_id: Option<String>,
}

pub async fn run(conn: Conn, args: ProduceArgs) -> CmdResult {
    let key_separator = key_separator(&args)?;
    let topic = args.topic.name().to_string();
    let client = conn.client()?;
    let acks = match args.acks {
        AcksArg::Zero => Acks::None,
        AcksArg::One => Acks::Leader,
        AcksArg::All => Acks::All,
    };
    let producer = Producer::new(
        client.clone(),
        ProducerConfig {
            acks,
            idempotent: acks == Acks::All,
            linger: Duration::from_millis(args.linger_ms),
            transactional_id: args.transactional_id.clone(),
            ..Default::default()
        },
    )
    .await?;
    let transactional = args.transactional_id.is_some();
    if transactional {
        producer.begin_transaction()?;
    }
    let input: Box<dyn tokio::io::AsyncRead + Unpin + Send> = match &args.file {
        Some(path) => Box::new(tokio::fs::File::open(path).await.map_err(|e| Failure {
            code: super::exit::FAILURE,
            message: format!("opening {}: {e}", path.display()),
        })?),
        None => Box::new(tokio::io::stdin()),
    };
    let mut lines = BufReader::new(input).lines();
    let start = Instant::now();
    let mut last_report = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    let mut sent: u64 = 0;
    let mut acked: u64 = 0;
    let mut bytes: u64 = 0;
    let mut first_error: Option<skiff_client::Error> = None;
    while let Some(line) = lines.next_line().await? {
        let (key, value) = match &key_separator {
            Some(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(k.to_string()), v.to_string()),
                None => (None, line),
            },
            None => (None, line),
        };
        bytes += value.len() as u64;
        let mut record = ProducerRecord::new(topic.clone(), value);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(p) = args.partition {
            record = record.partition(p);
        }
        pending.push_back(producer.send(record).await?);
        sent += 1;
        // Bound the number of outstanding futures; collect finished ones in order.
        while pending.len() > 10_000 {
            if let Some(f) = pending.pop_front() {
                match f.await {
                    Ok(_) => acked += 1,
                    Err(e) => first_error = first_error.or(Some(e)),
                }
            }
        }
        if !args.quiet && last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            let secs = start.elapsed().as_secs_f64().max(1e-9);
            eprintln!(
                "produced {sent} records ({:.0} rec/s, {:.2} MiB/s)",
                sent as f64 / secs,
                bytes as f64 / secs / 1048576.0
            );
        }
    }
    producer.flush().await?;
    for f in pending {
        match f.await {
            Ok(_) => acked += 1,
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    if transactional {
        let ended = if first_error.is_some() {
            producer.abort_transaction().await
        } else {
            producer.commit_transaction().await
        };
        if let Err(e) = ended {
            first_error = first_error.or(Some(e));
            acked = 0;
        }
    }
    let closed = producer.close().await;
    client.close().await;
    closed?;
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    if !args.quiet {
        eprintln!(
            "done: {acked}/{sent} records acknowledged in {secs:.2}s ({:.0} rec/s)",
            sent as f64 / secs
        );
    }
    if conn.json {
        print_json(
            &json!({"topic": topic, "records": sent, "acknowledged": acked, "seconds": secs}),
        );
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
