//! `skiff consume TOPIC`: prints records on stdout; rate and lag on stderr. With
//! `--share-group` it is a KIP-932 share consumer that acknowledges each record it prints.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::json;
use skiff_client::{
    AcknowledgeType, AcknowledgementMode, Consumer, ConsumerConfig, IsolationLevel, OffsetReset,
    ShareConsumer, ShareConsumerConfig, TopicPartition,
};

use super::{CmdResult, Conn, TopicArg, print_json, properties, property_bool};

/// How a record is printed in text mode: its value, or its key, the separator and its value.
struct Format {
    print_key: bool,
    key_separator: String,
}

impl Format {
    /// `--print-key` and the `--property` items (Kafka's print.key and key.separator).
    fn new(args: &ConsumeArgs) -> Result<Format, super::Failure> {
        let mut format = Format {
            print_key: args.print_key,
            key_separator: "\t".to_string(),
        };
        for (k, v) in properties(&args.properties, &["print.key", "key.separator"])? {
            match k.as_str() {
                "print.key" => format.print_key = property_bool(&k, &v)?,
                _ => format.key_separator = v,
            }
        }
        Ok(format)
    }

    fn line(&self, key: &Option<bytes::Bytes>, value: &Option<bytes::Bytes>) -> String {
        let value = text(value).unwrap_or_default();
        if self.print_key {
            format!(
                "{}{}{value}",
                text(key).unwrap_or_default(),
                self.key_separator
            )
        } else {
            value
        }
    }
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  skiff consume orders --from-beginning\n  skiff consume orders --group billing --max 100\n  skiff consume --topic orders --from-beginning --max-messages 10 --property print.key=true --property key.separator=:\n  skiff consume orders --from-beginning --json --idle-exit-ms 2000 | jq .value\n  skiff consume jobs --share-group workers --max 10\n  skiff consume jobs --share-group workers --ack release --json   # look, then give back\n  skiff consume orders --bootstrap broker:9093 --command-config client.properties\n\nWith --share-group (KIP-932; a single-node Skiff broker, or Kafka 4.x) the records of the\ntopic are shared out among the group's members one at a time: each printed record is\nacknowledged with --ack (accept: done; release: to be delivered again, with a higher delivery\ncount; reject: never delivered again), records fetched beyond --max are released, and the JSON\nlines carry each record's delivery_count. Where a new share group starts reading is the group\nconfig share.auto.offset.reset (Kafka's default: latest)."
)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub topic: TopicArg,
    /// Join this consumer group (KIP-848); without it every partition is read directly.
    #[arg(long, short = 'g')]
    pub group: Option<String>,
    /// Join this share group (KIP-932) instead: records are shared out one at a time among its
    /// members and acknowledged one by one.
    #[arg(long, value_name = "GROUP", conflicts_with_all = ["group", "from_beginning", "read_uncommitted"])]
    pub share_group: Option<String>,
    /// With --share-group: how each printed record is acknowledged [default: accept].
    #[arg(long, value_enum, requires = "share_group")]
    pub ack: Option<AckArg>,
    /// Start at the earliest offset when there is no committed one (default: latest).
    #[arg(long)]
    pub from_beginning: bool,
    /// Stop after this many records.
    #[arg(long, visible_alias = "max-messages")]
    pub max: Option<u64>,
    /// Stop once no record arrived for this long (ms).
    #[arg(long)]
    pub idle_exit_ms: Option<u64>,
    /// Print KEY<TAB>VALUE instead of VALUE.
    #[arg(long)]
    pub print_key: bool,
    /// kafka-console-consumer's formatter properties (repeatable): print.key=true|false and
    /// key.separator=SEP (default: a tab).
    #[arg(long = "property", value_name = "KEY=VALUE")]
    pub properties: Vec<String>,
    /// Hide the rate/lag line on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Also print records of open and aborted transactions (default: committed ones only).
    #[arg(long)]
    pub read_uncommitted: bool,
}

/// `--ack`: Kafka's acknowledge types.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckArg {
    /// Processed: never delivered again.
    Accept,
    /// Given back: delivered again (to this or another member).
    Release,
    /// Unprocessable: never delivered again.
    Reject,
}

impl From<AckArg> for AcknowledgeType {
    fn from(a: AckArg) -> Self {
        match a {
            AckArg::Accept => AcknowledgeType::Accept,
            AckArg::Release => AcknowledgeType::Release,
            AckArg::Reject => AcknowledgeType::Reject,
        }
    }
}

fn text(b: &Option<bytes::Bytes>) -> Option<String> {
    b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())
}

pub async fn run(conn: Conn, args: ConsumeArgs) -> CmdResult {
    let format = Format::new(&args)?;
    let topic_name = args.topic.name().to_string();
    if let Some(group) = args.share_group.clone() {
        return run_share(conn, args, group, format, topic_name).await;
    }
    let client = conn.client()?;
    let consumer = Consumer::new(
        client.clone(),
        ConsumerConfig {
            group_id: args.group.clone(),
            auto_offset_reset: if args.from_beginning {
                OffsetReset::Earliest
            } else {
                OffsetReset::Latest
            },
            fetch_max_wait: Duration::from_millis(200),
            auto_commit_interval: Duration::from_secs(1),
            isolation_level: if args.read_uncommitted {
                IsolationLevel::ReadUncommitted
            } else {
                IsolationLevel::ReadCommitted
            },
            ..Default::default()
        },
    )?;
    if args.group.is_some() {
        consumer.subscribe(&[topic_name.as_str()])?;
    } else {
        let topic = client.topic(&topic_name).await?;
        let tps: Vec<TopicPartition> = topic
            .partitions
            .iter()
            .map(|p| TopicPartition::new(topic_name.clone(), p.partition))
            .collect();
        consumer.assign(&tps)?;
    }
    let start = Instant::now();
    let mut last_record = Instant::now();
    let mut last_report = Instant::now();
    let mut count: u64 = 0;
    let result: CmdResult = async {
        loop {
            if args.max.is_some_and(|m| count >= m) {
                break;
            }
            if args
                .idle_exit_ms
                .is_some_and(|ms| last_record.elapsed() >= Duration::from_millis(ms))
            {
                break;
            }
            let poll = consumer.poll(Duration::from_millis(200));
            let records = tokio::select! {
                r = poll => r?,
                _ = tokio::signal::ctrl_c() => break,
            };
            for r in records {
                if args.max.is_some_and(|m| count >= m) {
                    break;
                }
                count += 1;
                last_record = Instant::now();
                if conn.json {
                    print_json(&json!({
                        "topic": r.topic,
                        "partition": r.partition,
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "key": text(&r.key),
                        "value": text(&r.value),
                    }));
                } else {
                    println!("{}", format.line(&r.key, &r.value));
                }
            }
            if !args.quiet && last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                let secs = start.elapsed().as_secs_f64().max(1e-9);
                eprintln!(
                    "consumed {count} records ({:.0} rec/s), lag {}",
                    count as f64 / secs,
                    consumer.lag()
                );
            }
        }
        Ok(())
    }
    .await;
    if args.group.is_some() {
        consumer.commit().await.ok();
    }
    consumer.close().await.ok();
    client.close().await;
    if !args.quiet {
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        eprintln!(
            "done: {count} records in {secs:.2}s ({:.0} rec/s), lag {}",
            count as f64 / secs,
            consumer.lag()
        );
    }
    result
}

/// `--share-group`: a share consumer in explicit mode; each printed record is acknowledged with
/// `--ack`, any record fetched beyond `--max` (or after Ctrl-C) is released.
async fn run_share(
    conn: Conn,
    args: ConsumeArgs,
    group: String,
    format: Format,
    topic_name: String,
) -> CmdResult {
    let client = conn.client()?;
    let ack: AcknowledgeType = args.ack.unwrap_or(AckArg::Accept).into();
    let mut config = ShareConsumerConfig::new(group);
    config.acknowledgement_mode = AcknowledgementMode::Explicit;
    config.fetch_max_wait = Duration::from_millis(200);
    if let Some(max) = args.max {
        // Ask for no more than needed: what is fetched beyond --max goes back with a higher
        // delivery count.
        config.max_poll_records = i32::try_from(max.clamp(1, 500)).unwrap_or(500);
    }
    let consumer = ShareConsumer::new(client.clone(), config)?;
    consumer.subscribe(&[topic_name.as_str()])?;
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.store(true, Ordering::Release);
            }
        })
    };
    let start = Instant::now();
    let mut last_record = Instant::now();
    let mut last_report = Instant::now();
    let mut count: u64 = 0;
    let result: CmdResult = async {
        loop {
            if stop.load(Ordering::Acquire) || args.max.is_some_and(|m| count >= m) {
                break;
            }
            if args
                .idle_exit_ms
                .is_some_and(|ms| last_record.elapsed() >= Duration::from_millis(ms))
            {
                break;
            }
            // Not cancelled by Ctrl-C (the flag is checked between polls), so no acknowledgement
            // is lost half-sent.
            let records = consumer.poll(Duration::from_millis(200)).await?;
            for r in records {
                if stop.load(Ordering::Acquire) || args.max.is_some_and(|m| count >= m) {
                    consumer.acknowledge(&r, AcknowledgeType::Release)?;
                    continue;
                }
                count += 1;
                last_record = Instant::now();
                if conn.json {
                    print_json(&json!({
                        "topic": r.topic,
                        "partition": r.partition,
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "key": text(&r.key),
                        "value": text(&r.value),
                        "delivery_count": r.delivery_count,
                    }));
                } else {
                    println!("{}", format.line(&r.key, &r.value));
                }
                consumer.acknowledge(&r, ack)?;
            }
            if !args.quiet && last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                let secs = start.elapsed().as_secs_f64().max(1e-9);
                eprintln!(
                    "consumed {count} records ({:.0} rec/s)",
                    count as f64 / secs
                );
            }
        }
        // The acknowledgements go out now, each partition's result known, before leaving.
        for (tp, r) in consumer.commit_sync().await? {
            if let Err(e) = r {
                eprintln!("warning: acknowledging records of {tp} failed: {e}");
            }
        }
        Ok(())
    }
    .await;
    watcher.abort();
    if let Err(e) = consumer.close().await {
        eprintln!("warning: closing the share consumer: {e}");
    }
    client.close().await;
    if !args.quiet {
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        eprintln!(
            "done: {count} records in {secs:.2}s ({:.0} rec/s), acknowledged as {ack}",
            count as f64 / secs
        );
    }
    result
}
