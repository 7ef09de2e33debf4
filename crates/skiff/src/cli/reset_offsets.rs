//! `skiff group reset-offsets`: kafka-consumer-groups' `--reset-offsets`. The new offsets are
//! resolved with ListOffsets (earliest, latest, by time), kept within each partition's
//! [log start, log end], printed as a plan (`--dry-run`, the default) or committed as Kafka's
//! tool does (`--execute`: OffsetCommit with generation -1 and no member, only while the group
//! has no members).

use std::collections::BTreeMap;

use clap::Args;
use serde_json::json;
use skiff_client::{Admin, Error, TopicPartition};

use super::{CmdResult, Conn, Failure, GroupArg, exit, print_json, print_table};

/// `skiff group reset-offsets`.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("reset_to").required(true).args(["to_earliest", "to_latest", "to_datetime", "to_offset", "shift_by"])))]
pub struct ResetOffsets {
    #[command(flatten)]
    pub group: GroupArg,
    /// TOPIC (every partition) or TOPIC:P[,P...] (repeatable).
    #[arg(
        long = "topic",
        value_name = "TOPIC[:P,...]",
        required_unless_present = "all_topics"
    )]
    topics: Vec<String>,
    /// Every topic the group has committed offsets on.
    #[arg(long, conflicts_with = "topics")]
    all_topics: bool,
    /// Each partition's log start offset.
    #[arg(long)]
    to_earliest: bool,
    /// Each partition's log end offset.
    #[arg(long)]
    to_latest: bool,
    /// The first offset whose timestamp is at or after this time: YYYY-MM-DDTHH:MM:SS[.sss]
    /// with an optional zone (Z, +HH:MM); UTC without one.
    #[arg(long, value_name = "ISO8601")]
    to_datetime: Option<String>,
    /// This offset.
    #[arg(long, value_name = "N")]
    to_offset: Option<i64>,
    /// The committed offset moved by N (negative: back).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift_by: Option<i64>,
    /// Only print the plan (the default).
    #[arg(long, conflicts_with = "execute")]
    dry_run: bool,
    /// Commit the new offsets.
    #[arg(long)]
    execute: bool,
}

/// Where each partition goes.
enum Target {
    Earliest,
    Latest,
    /// Milliseconds since the epoch.
    Datetime(i64),
    Offset(i64),
    ShiftBy(i64),
}

impl ResetOffsets {
    fn target(&self) -> Result<Target, Failure> {
        Ok(if self.to_earliest {
            Target::Earliest
        } else if self.to_latest {
            Target::Latest
        } else if let Some(text) = &self.to_datetime {
            Target::Datetime(
                parse_datetime(text)
                    .map_err(|why| Failure::usage(format!("--to-datetime {text:?}: {why}")))?,
            )
        } else if let Some(n) = self.to_offset {
            Target::Offset(n)
        } else if let Some(n) = self.shift_by {
            Target::ShiftBy(n)
        } else {
            return Err(Failure::usage(
                "give one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by",
            ));
        })
    }
}

/// `TOPIC` or `TOPIC:P[,P...]`: the topic and the partitions named (none: every partition).
fn parse_topic_spec(spec: &str) -> Result<(String, Vec<i32>), Failure> {
    let Some((topic, parts)) = spec.rsplit_once(':') else {
        return Ok((spec.to_string(), Vec::new()));
    };
    let partitions = parts
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<i32>()
                .ok()
                .filter(|p| *p >= 0)
                .ok_or_else(|| {
                    Failure::usage(format!(
                        "--topic {spec:?}: expected TOPIC or TOPIC:PARTITION[,PARTITION...]"
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if topic.is_empty() {
        return Err(Failure::usage(format!("--topic {spec:?}: no topic name")));
    }
    Ok((topic.to_string(), partitions))
}

/// One planned partition: its offsets now and the new committed offset.
struct Planned {
    tp: TopicPartition,
    committed: Option<i64>,
    new_offset: i64,
}

pub async fn run(admin: &Admin, conn: &Conn, args: ResetOffsets) -> CmdResult {
    let group = args.group.name().to_string();
    let target = args.target()?;
    // A group that does not exist yet has no members and no offsets: Kafka's tool resets it
    // (the commit creates it).
    let (members, committed, group_type) = match admin.describe_group(&group).await {
        Ok(d) => (d.members.len(), d.offsets, d.group_type),
        Err(Error::Broker { code: 69, .. }) => (0, Vec::new(), String::new()),
        Err(e) => return Err(e.into()),
    };
    if group_type == "share" {
        return Err(Failure::usage(format!(
            "group {group} is a share group: use skiff group share-offsets set"
        )));
    }
    let committed: BTreeMap<TopicPartition, i64> = committed.into_iter().collect();

    // The topics and partitions named, in order, without repeats.
    let specs: Vec<(String, Vec<i32>)> = if args.all_topics {
        let mut topics: Vec<String> = committed.keys().map(|tp| tp.topic.clone()).collect();
        topics.dedup();
        if topics.is_empty() {
            return Err(Failure {
                code: exit::NOT_FOUND,
                message: format!("group {group} has no committed offsets (--all-topics)"),
            });
        }
        topics.into_iter().map(|t| (t, Vec::new())).collect()
    } else {
        args.topics
            .iter()
            .map(|s| parse_topic_spec(s))
            .collect::<Result<_, _>>()?
    };
    // (partition, log start, log end) of each chosen partition.
    let mut chosen: Vec<(TopicPartition, i64, i64)> = Vec::new();
    for (topic, partitions) in &specs {
        let d = admin.describe_topic(topic).await?;
        for p in partitions {
            if !d.offsets.iter().any(|(q, _, _)| q == p) {
                return Err(Failure {
                    code: exit::NOT_FOUND,
                    message: format!("topic {topic} has no partition {p}"),
                });
            }
        }
        for (p, earliest, latest) in &d.offsets {
            let tp = TopicPartition::new(topic.clone(), *p);
            if (partitions.is_empty() || partitions.contains(p))
                && !chosen.iter().any(|(t, _, _)| *t == tp)
            {
                chosen.push((tp, *earliest, *latest));
            }
        }
    }
    let by_time: BTreeMap<TopicPartition, i64> = match target {
        Target::Datetime(ms) => {
            let tps: Vec<TopicPartition> = chosen.iter().map(|(tp, _, _)| tp.clone()).collect();
            admin.list_offsets(&tps, ms).await?.into_iter().collect()
        }
        _ => BTreeMap::new(),
    };
    let mut plan: Vec<Planned> = Vec::new();
    for (tp, earliest, latest) in chosen {
        let current = committed.get(&tp).copied();
        let wanted = match target {
            Target::Earliest => earliest,
            Target::Latest => latest,
            // No record at or after the time: the log end, as Kafka's tool does.
            Target::Datetime(_) => by_time
                .get(&tp)
                .copied()
                .filter(|o| *o >= 0)
                .unwrap_or(latest),
            Target::Offset(n) => n,
            Target::ShiftBy(n) => current
                .ok_or_else(|| Failure {
                    code: exit::FAILURE,
                    message: format!(
                        "cannot shift the offset of {tp}: group {group} has no committed offset there"
                    ),
                })?
                .saturating_add(n),
        };
        let new_offset = wanted.clamp(earliest, latest.max(earliest));
        if new_offset != wanted && !conn.json {
            eprintln!(
                "note: {tp}: offset {wanted} is outside [{earliest}, {latest}]; using {new_offset}"
            );
        }
        plan.push(Planned {
            tp,
            committed: current,
            new_offset,
        });
    }

    if args.execute {
        if members > 0 {
            return Err(Failure {
                code: exit::REJECTED,
                message: format!(
                    "group {group} has {members} member(s): offsets can only be reset while it \
                     has none (stop its consumers first)"
                ),
            });
        }
        let offsets: Vec<(TopicPartition, i64)> =
            plan.iter().map(|p| (p.tp.clone(), p.new_offset)).collect();
        admin.commit_group_offsets(&group, &offsets).await?;
    } else if members > 0 {
        eprintln!("note: group {group} has {members} member(s); --execute needs it to have none");
    }

    if conn.json {
        print_json(&json!({
            "group": group,
            "executed": args.execute,
            "offsets": plan.iter().map(|p| json!({
                "topic": p.tp.topic,
                "partition": p.tp.partition,
                "committed": p.committed,
                "new_offset": p.new_offset,
            })).collect::<Vec<_>>(),
        }));
    } else {
        let rows: Vec<Vec<String>> = plan
            .iter()
            .map(|p| {
                vec![
                    group.clone(),
                    p.tp.topic.clone(),
                    p.tp.partition.to_string(),
                    p.new_offset.to_string(),
                ]
            })
            .collect();
        print_table(&["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], &rows);
        if !args.execute {
            eprintln!("(dry run: nothing committed; add --execute to commit these offsets)");
        }
    }
    Ok(())
}

/// `YYYY-MM-DD[THH:MM[:SS[.fff]]][Z|+HH:MM|-HH:MM|+HHMM]` (a space may stand for the T) as
/// milliseconds since the epoch; without a zone, UTC.
pub fn parse_datetime(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let (date, time) = match text.split_once(['T', 't', ' ']) {
        Some((d, t)) => (d, t),
        None => (text, ""),
    };
    let mut fields = date.splitn(3, '-');
    let number = |s: Option<&str>, what: &str| -> Result<i64, String> {
        s.filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| format!("bad {what}; expected YYYY-MM-DDTHH:MM:SS[.sss][Z|+HH:MM]"))
    };
    let year = number(fields.next(), "year")?;
    let month = number(fields.next(), "month")?;
    let day = number(fields.next(), "day")?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(format!("{date} is not a date"));
    }
    // The zone: Z, or a sign after the clock time.
    let (clock, offset_minutes) = if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else if let Some(at) = time.rfind(['+', '-']) {
        let (clock, zone) = time.split_at(at);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let digits: String = zone.chars().skip(1).filter(|c| *c != ':').collect();
        if digits.len() != 4 && digits.len() != 2 {
            return Err(format!("bad zone {zone:?}; expected Z, +HH:MM or +HHMM"));
        }
        let hours = number(digits.get(..2), "zone hours")?;
        let minutes = number(
            digits.get(2..).filter(|m| !m.is_empty()).or(Some("0")),
            "zone minutes",
        )?;
        if hours > 23 || minutes > 59 {
            return Err(format!("bad zone {zone:?}"));
        }
        (clock, sign * (hours * 60 + minutes))
    } else {
        (time, 0)
    };
    let mut ms_of_day = 0;
    if !clock.is_empty() {
        let mut parts = clock.splitn(3, ':');
        let hour = number(parts.next(), "hour")?;
        let minute = number(parts.next(), "minute")?;
        let (second, millis) = match parts.next() {
            None => (0, 0),
            Some(s) => {
                let (whole, fraction) = s.split_once(['.', ',']).unwrap_or((s, ""));
                let second = number(Some(whole), "second")?;
                let millis = if fraction.is_empty() {
                    0
                } else {
                    let digits: String = fraction.chars().chain("000".chars()).take(3).collect();
                    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(format!("bad fraction of a second {fraction:?}"));
                    }
                    number(Some(&digits), "milliseconds")?
                };
                (second, millis)
            }
        };
        if hour > 23 || minute > 59 || second > 60 {
            return Err(format!("{clock} is not a time of day"));
        }
        ms_of_day = ((hour * 60 + minute) * 60 + second) * 1000 + millis;
    }
    Ok(days_from_civil(year, month, day) * 86_400_000 + ms_of_day - offset_minutes * 60_000)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_datetime("1970-01-01"), Ok(0));
        assert_eq!(
            parse_datetime("2024-05-01T12:30:15.250Z"),
            Ok(1_714_566_615_250)
        );
        assert_eq!(
            parse_datetime("2024-05-01T14:30:15.25+02:00"),
            Ok(1_714_566_615_250)
        );
        assert_eq!(
            parse_datetime("2024-05-01T12:30:15.250"),
            Ok(1_714_566_615_250)
        );
        assert_eq!(
            parse_datetime("2024-05-01T07:30:15.250-0500"),
            Ok(1_714_566_615_250)
        );
        assert_eq!(parse_datetime("2000-02-29T00:00"), Ok(951_782_400_000));
        for bad in [
            "",
            "2024-13-01",
            "2023-02-29",
            "2024-05-01T25:00",
            "yesterday",
            "2024-05-01T10:00+5",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn topic_specs() {
        assert_eq!(
            parse_topic_spec("orders").ok(),
            Some(("orders".to_string(), vec![]))
        );
        assert_eq!(
            parse_topic_spec("orders:0,2").ok(),
            Some(("orders".to_string(), vec![0, 2]))
        );
        assert!(parse_topic_spec("orders:x").is_err());
        assert!(parse_topic_spec(":1").is_err());
    }
}
