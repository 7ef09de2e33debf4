//! `skiff consume TOPIC`: prints records on stdout; rate and lag on stderr.

use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use skiff_client::{Consumer, ConsumerConfig, IsolationLevel, OffsetReset, TopicPartition};

use super::{CmdResult, Conn, print_json};

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  skiff consume orders --from-beginning\n  skiff consume orders --group billing --max 100\n  skiff consume orders --from-beginning --json --idle-exit-ms 2000 | jq .value\n  skiff consume orders --bootstrap broker:9093 --command-config client.properties"
)]
pub struct ConsumeArgs {
    /// Topic to read.
    pub topic: String,
    /// Join this consumer group (KIP-848); without it every partition is read directly.
    #[arg(long, short = 'g')]
    pub group: Option<String>,
    /// Start at the earliest offset when there is no committed one (default: latest).
    #[arg(long)]
    pub from_beginning: bool,
    /// Stop after this many records.
    #[arg(long)]
    pub max: Option<u64>,
    /// Stop once no record arrived for this long (ms).
    #[arg(long)]
    pub idle_exit_ms: Option<u64>,
    /// Print KEY<TAB>VALUE instead of VALUE.
    #[arg(long)]
    pub print_key: bool,
    /// Hide the rate/lag line on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Also print records of open and aborted transactions (default: committed ones only).
    #[arg(long)]
    pub read_uncommitted: bool,
}

fn text(b: &Option<bytes::Bytes>) -> Option<String> {
    b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())
}

pub async fn run(conn: Conn, args: ConsumeArgs) -> CmdResult {
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
        consumer.subscribe(&[args.topic.as_str()])?;
    } else {
        let topic = client.topic(&args.topic).await?;
        let tps: Vec<TopicPartition> = topic
            .partitions
            .iter()
            .map(|p| TopicPartition::new(args.topic.clone(), p.partition))
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
                } else if args.print_key {
                    println!(
                        "{}\t{}",
                        text(&r.key).unwrap_or_default(),
                        text(&r.value).unwrap_or_default()
                    );
                } else {
                    println!("{}", text(&r.value).unwrap_or_default());
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
