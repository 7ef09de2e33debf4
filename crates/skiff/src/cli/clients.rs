//! `skiff clients` / `skiff clients show ID` / `skiff clients events ID [--follow]`: the broker's
//! client-instance view and an instance's journal, read from its admin HTTP listener
//! (`GET /clients`, `GET /clients/{id}`, `GET /clients/{id}/events`) over `http://` or
//! `https://`, with the listener's bearer token when it asks for one.

pub(crate) mod admin_http;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;

use self::admin_http::AdminHttp;
use super::{CmdResult, Failure, print_json, print_table};

/// Options of `skiff clients`.
#[derive(Args, Debug, Clone)]
pub struct ClientsArgs {
    /// The broker's admin HTTP address (config `admin.listen`): http://HOST:PORT, or
    /// https://HOST:PORT when the listener has TLS (`admin.ssl.*`).
    #[arg(long, default_value = "http://127.0.0.1:9644", global = true)]
    pub admin: String,
    /// PEM CA bundle that an https:// admin listener's certificate must chain to (default: the
    /// system's CAs).
    #[arg(long, value_name = "PATH", global = true)]
    pub admin_ca_file: Option<PathBuf>,
    /// A file holding the admin listener's bearer token (`admin.token.file`; surrounding
    /// whitespace is not part of it).
    #[arg(
        long,
        value_name = "PATH",
        env = "SKIFF_ADMIN_TOKEN_FILE",
        global = true
    )]
    pub admin_token_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum ClientsCommand {
    /// Show one client instance: connections, memberships, telemetry and latest metrics.
    #[command(
        after_help = "Examples:\n  skiff clients show AAAAAAAAAAAAAAAAAAAAAA\n  \
                            skiff clients show AAAAAAAAAAAAAAAAAAAAAA --json"
    )]
    Show {
        /// The client instance ID: Kafka's 22 characters of URL-safe base64, or the same UUID
        /// as standard base64 or (hyphenated) hex.
        id: String,
    },
    /// The journal of one client instance, oldest first: connections, groups, producers,
    /// transactions, telemetry, throttling (GET /clients/{id}/events; this broker's alone).
    #[command(
        after_help = "Examples:\n  skiff clients events AAAAAAAAAAAAAAAAAAAAAA\n  \
                            skiff clients events AAAAAAAAAAAAAAAAAAAAAA --follow\n  \
                            skiff clients events 0b1e3f52-6a1c-4d7e-9f00-1234567890ab --since 1767225600000 --json"
    )]
    Events {
        /// The client instance ID (any encoding of its UUID, as for `show`).
        id: String,
        /// Only events at or after this time (milliseconds since the epoch).
        #[arg(long, value_name = "MS")]
        since: Option<i64>,
        /// Keep printing events as they happen, until interrupted.
        #[arg(long, short = 'f')]
        follow: bool,
    },
}

/// Lists the client instances, or shows one, as tables or (`json`) as the admin listener's JSON.
pub async fn run(
    json: bool,
    timeout_ms: u64,
    args: ClientsArgs,
    command: Option<ClientsCommand>,
) -> CmdResult {
    let admin = AdminHttp::new(
        &args.admin,
        args.admin_ca_file.as_deref(),
        args.admin_token_file.as_deref(),
        Duration::from_millis(timeout_ms),
    )?;
    match command {
        None => {
            let value = admin.get_json("/clients").await?;
            if json {
                print_json(&value);
            } else {
                print_list(&value);
            }
        }
        Some(ClientsCommand::Show { id }) => {
            let id = instance_id(&id)?;
            let value = admin.get_json(&format!("/clients/{id}")).await?;
            if json {
                print_json(&value);
            } else {
                print_show(&value);
            }
        }
        Some(ClientsCommand::Events { id, since, follow }) => {
            let id = instance_id(&id)?;
            events(&admin, &id, since, follow, json, timeout_ms).await?;
        }
    }
    Ok(())
}

/// Prints an instance's journal; with `follow`, waits for more (the endpoint's long poll, for
/// half the request timeout at a time) and prints each as it comes.
async fn events(
    admin: &AdminHttp,
    id: &str,
    since: Option<i64>,
    follow: bool,
    json: bool,
    timeout_ms: u64,
) -> CmdResult {
    let mut query = match since {
        Some(ms) => format!("/clients/{id}/events?since={ms}"),
        None => format!("/clients/{id}/events"),
    };
    let value = admin.get_json(&query).await?;
    if !follow {
        if json {
            print_json(&value);
        } else {
            print_events_table(&value);
        }
        return Ok(());
    }
    let wait_ms = (timeout_ms / 2).min(30_000);
    let mut value = value;
    loop {
        for event in arr(&value, "events") {
            if json {
                print_json(event);
            } else {
                println!("{}", event_line(event).join("  "));
            }
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let after = value.get("next_after").and_then(Value::as_u64).unwrap_or(0);
        query = format!("/clients/{id}/events?after={after}&wait_ms={wait_ms}");
        value = admin.get_json(&query).await?;
    }
}

/// An event as printed: seq, time, category, type, summary.
fn event_line(e: &Value) -> Vec<String> {
    vec![
        text(e.get("seq").unwrap_or(&Value::Null)),
        clock(e.get("at_ms").unwrap_or(&Value::Null)),
        text(e.get("category").unwrap_or(&Value::Null)),
        text(e.get("type").unwrap_or(&Value::Null)),
        text(e.get("summary").unwrap_or(&Value::Null)),
    ]
}

fn print_events_table(value: &Value) {
    let rows: Vec<Vec<String>> = arr(value, "events").iter().map(event_line).collect();
    print_table(&["SEQ", "AT", "CATEGORY", "TYPE", "SUMMARY"], &rows);
}

/// Milliseconds since the epoch as a UTC date and time to the millisecond, or `-`.
fn clock(v: &Value) -> String {
    let Some(ms) = v.as_i64() else {
        return "-".into();
    };
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// Days since 1970-01-01 as a (year, month, day) of the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A client instance ID in any encoding of a UUID (Kafka's URL-safe base64, standard base64
/// with or without padding, hyphenated or bare hex), in Kafka's form.
fn instance_id(text: &str) -> Result<String, Failure> {
    skiff_broker::uuid_text::decode(text)
        .map(|(id, _)| id.to_string())
        .ok_or_else(|| {
            Failure::usage(format!(
                "{text:?} is not a client instance ID (a UUID: Kafka's URL-safe base64, standard base64, or hex)"
            ))
        })
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Milliseconds since the epoch as a UTC time of day `HH:MM:SS` plus age, or `-`.
fn when(v: &Value) -> String {
    let Some(ms) = v.as_i64() else {
        return "-".into();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let secs = ms.div_euclid(1000).rem_euclid(86_400);
    let age = (now - ms).max(0) / 1000;
    format!(
        "{:02}:{:02}:{:02}Z ({age}s ago)",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn first_str(items: &[Value], key: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    for item in items {
        if let Some(s) = item.get(key).and_then(Value::as_str)
            && !seen.iter().any(|x| x == s)
        {
            seen.push(s.to_string());
        }
    }
    if seen.is_empty() {
        "-".into()
    } else {
        seen.join(",")
    }
}

/// `{"topic": [0, 1]}` as `topic:0,1` (topics separated by spaces).
fn partitions_text(v: Option<&Value>) -> String {
    v.and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .map(|(topic, parts)| {
                    let ps: Vec<String> = parts
                        .as_array()
                        .map_or(&[][..], Vec::as_slice)
                        .iter()
                        .map(Value::to_string)
                        .collect();
                    format!("{topic}:{}", ps.join(","))
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn arr<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn software(conns: &[Value]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for c in conns {
        let name = c.get("software_name").and_then(Value::as_str);
        let version = c.get("software_version").and_then(Value::as_str);
        let s = match (name, version) {
            (Some(n), Some(v)) => format!("{n}/{v}"),
            (Some(n), None) => n.to_string(),
            _ => continue,
        };
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    if seen.is_empty() {
        "-".into()
    } else {
        seen.join(",")
    }
}

fn telemetry_summary(v: &Value) -> (String, String) {
    let t = v.get("telemetry").unwrap_or(&Value::Null);
    if t.is_null() {
        return ("-".into(), "-".into());
    }
    let requested = arr(t, "requested_metrics");
    let sub = format!(
        "{} ({} metrics, {} ms)",
        text(t.get("subscription_id").unwrap_or(&Value::Null)),
        requested.len(),
        text(t.get("push_interval_ms").unwrap_or(&Value::Null))
    );
    let mut push = when(t.get("last_push_ms").unwrap_or(&Value::Null));
    if t.get("terminating").and_then(Value::as_bool) == Some(true) {
        push.push_str(" terminated");
    }
    (sub, push)
}

/// Records and seconds behind (`lag_records`, `lag_seconds` of a membership, an instance or a
/// partition) as `120 (3599.0 s)`, `0`, or `-` when unknown.
fn lag_text(v: &Value) -> String {
    let records = v.get("lag_records").and_then(Value::as_i64);
    let seconds = v.get("lag_seconds").and_then(Value::as_f64);
    match (records, seconds) {
        (None, _) => "-".into(),
        (Some(0), _) => "0".into(),
        (Some(n), Some(s)) => format!("{n} ({s:.1} s)"),
        (Some(n), None) => n.to_string(),
    }
}

fn print_list(value: &Value) {
    let items = value.as_array().map_or(&[][..], Vec::as_slice);
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|v| {
            let conns = arr(v, "connections");
            let groups: Vec<String> = arr(v, "memberships")
                .iter()
                .map(|m| text(m.get("group").unwrap_or(&Value::Null)))
                .collect();
            let mut client_id = first_str(conns, "client_id");
            if client_id == "-"
                && let Some(id) = v
                    .get("telemetry")
                    .and_then(|t| t.get("client_id"))
                    .and_then(Value::as_str)
            {
                client_id = id.to_string();
            }
            let (sub, push) = telemetry_summary(v);
            vec![
                v.get("client_instance_id")
                    .and_then(Value::as_str)
                    .unwrap_or("(none)")
                    .to_string(),
                client_id,
                software(conns),
                conns.len().to_string(),
                if groups.is_empty() {
                    "-".into()
                } else {
                    groups.join(",")
                },
                lag_text(v),
                sub,
                push,
                arr(v, "kip1313_rejections").len().to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "INSTANCE ID",
            "CLIENT ID",
            "SOFTWARE",
            "CONNECTIONS",
            "GROUPS",
            "LAG",
            "TELEMETRY SUBSCRIPTION",
            "LAST PUSH",
            "REJECTIONS",
        ],
        &rows,
    );
}

/// How a membership's member ID relates to the instance: `same (base64)` when it is the
/// instance's UUID (in that encoding), `differs (hex)` when it is another UUID, `differs`.
fn member_id_form(m: &Value) -> String {
    let aligned = match m.get("aligned").and_then(Value::as_bool) {
        Some(aligned) => aligned,
        // A broker from before `aligned`.
        None => m.get("member_id_differs").and_then(Value::as_bool) == Some(false),
    };
    let verdict = if aligned { "same" } else { "differs" };
    match m.get("member_id_encoding").and_then(Value::as_str) {
        Some(encoding) => format!("{verdict} ({encoding})"),
        None => verdict.to_string(),
    }
}

fn print_show(v: &Value) {
    let id = v
        .get("client_instance_id")
        .and_then(Value::as_str)
        .unwrap_or("(none)");
    let conns = arr(v, "connections");
    println!("client instance {id}");
    println!("  client ID:  {}", first_str(conns, "client_id"));
    println!("  software:   {}", software(conns));
    let (sub, push) = telemetry_summary(v);
    println!("  telemetry:  subscription {sub}, last push {push}");
    println!(
        "  KIP-1313 rejections: {}",
        arr(v, "kip1313_rejections").len()
    );
    println!("  lag:        {}", lag_text(v));

    println!();
    let rows: Vec<Vec<String>> = conns
        .iter()
        .map(|c| {
            let requests = c
                .get("requests")
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .map(|(k, n)| format!("{k}={n}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            vec![
                text(c.get("id").unwrap_or(&Value::Null)),
                text(c.get("peer").unwrap_or(&Value::Null)),
                text(c.get("client_id").unwrap_or(&Value::Null)),
                software(std::slice::from_ref(c)),
                when(c.get("connected_since_ms").unwrap_or(&Value::Null)),
                requests,
            ]
        })
        .collect();
    print_table(
        &[
            "CONNECTION",
            "PEER",
            "CLIENT ID",
            "SOFTWARE",
            "CONNECTED SINCE",
            "REQUESTS",
        ],
        &rows,
    );

    println!();
    let rows: Vec<Vec<String>> = arr(v, "memberships")
        .iter()
        .map(|m| {
            let assigned = partitions_text(m.get("assigned"));
            vec![
                text(m.get("group").unwrap_or(&Value::Null)),
                text(m.get("protocol").unwrap_or(&Value::Null)),
                text(m.get("member_id").unwrap_or(&Value::Null)),
                member_id_form(m),
                text(m.get("member_epoch").unwrap_or(&Value::Null)),
                assigned,
                lag_text(m),
            ]
        })
        .collect();
    print_table(
        &[
            "GROUP",
            "PROTOCOL",
            "MEMBER ID",
            "ID FORM",
            "EPOCH",
            "ASSIGNED",
            "LAG",
        ],
        &rows,
    );
    print_partition_lags(arr(v, "memberships"));

    let producers = arr(v, "producers");
    if !producers.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = producers
            .iter()
            .map(|p| {
                vec![
                    text(p.get("producer_id").unwrap_or(&Value::Null)),
                    text(p.get("producer_epoch").unwrap_or(&Value::Null)),
                    text(p.get("transactional_id").unwrap_or(&Value::Null)),
                    text(p.get("transaction_state").unwrap_or(&Value::Null)),
                    partitions_text(p.get("transaction_partitions")),
                ]
            })
            .collect();
        print_table(
            &[
                "PRODUCER ID",
                "EPOCH",
                "TRANSACTIONAL ID",
                "TRANSACTION",
                "PARTITIONS",
            ],
            &rows,
        );
    }

    let rejections = arr(v, "kip1313_rejections");
    if !rejections.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = rejections
            .iter()
            .map(|r| {
                vec![
                    when(r.get("at_ms").unwrap_or(&Value::Null)),
                    text(r.get("api").unwrap_or(&Value::Null)),
                    text(r.get("reason").unwrap_or(&Value::Null)),
                    text(r.get("expected").unwrap_or(&Value::Null)),
                    text(r.get("received").unwrap_or(&Value::Null)),
                ]
            })
            .collect();
        print_table(&["AT", "API", "REASON", "EXPECTED", "RECEIVED"], &rows);
    }

    let metrics = v
        .get("telemetry")
        .map(|t| arr(t, "metrics"))
        .unwrap_or_default();
    println!();
    let rows: Vec<Vec<String>> = metrics
        .iter()
        .map(|p| {
            let attrs = p
                .get("attributes")
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .map(|(k, a)| format!("{k}={}", text(a)))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            vec![
                text(p.get("name").unwrap_or(&Value::Null)),
                text(p.get("kind").unwrap_or(&Value::Null)),
                text(p.get("value").unwrap_or(&Value::Null)),
                attrs,
            ]
        })
        .collect();
    print_table(&["METRIC", "KIND", "VALUE", "ATTRIBUTES"], &rows);
}

/// Each assigned partition of each membership: its offsets and lag (share members: the share
/// partition's start offset is the committed one).
fn print_partition_lags(memberships: &[Value]) {
    let rows: Vec<Vec<String>> = memberships
        .iter()
        .flat_map(|m| {
            arr(m, "partitions").iter().map(move |p| {
                let field = |key: &str| text(p.get(key).unwrap_or(&Value::Null));
                vec![
                    text(m.get("group").unwrap_or(&Value::Null)),
                    field("topic"),
                    field("partition"),
                    field("committed_offset"),
                    field("high_watermark"),
                    field("last_stable_offset"),
                    field("lag_records"),
                    p.get("lag_seconds")
                        .and_then(Value::as_f64)
                        .map_or_else(|| "-".into(), |s| format!("{s:.1}")),
                ]
            })
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    println!();
    print_table(
        &[
            "GROUP",
            "TOPIC",
            "PARTITION",
            "COMMITTED",
            "HIGH WATERMARK",
            "LAST STABLE",
            "LAG",
            "LAG (S)",
        ],
        &rows,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_times_are_utc_dates() {
        assert_eq!(clock(&Value::from(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            clock(&Value::from(1_767_225_600_123i64)),
            "2026-01-01T00:00:00.123Z"
        );
        assert_eq!(
            clock(&Value::from(951_825_599_999i64)),
            "2000-02-29T11:59:59.999Z"
        );
        assert_eq!(clock(&Value::Null), "-");
    }

    #[test]
    fn lag_as_records_and_seconds() {
        let lag = |v: Value| lag_text(&v);
        assert_eq!(
            lag(serde_json::json!({"lag_records": 120, "lag_seconds": 3599.02})),
            "120 (3599.0 s)"
        );
        assert_eq!(
            lag(serde_json::json!({"lag_records": 7, "lag_seconds": null})),
            "7"
        );
        assert_eq!(
            lag(serde_json::json!({"lag_records": 0, "lag_seconds": 0.0})),
            "0"
        );
        assert_eq!(lag(serde_json::json!({"lag_records": null})), "-");
        assert_eq!(lag(serde_json::json!({})), "-", "a broker from before lag");
    }

    #[test]
    fn instance_ids_in_any_encoding() {
        let kafka = "AAECAwQFBgcICQoLDA0ODw";
        for text in [
            kafka,
            "000102030405060708090a0b0c0d0e0f",
            "00010203-0405-0607-0809-0a0b0c0d0e0f",
        ] {
            assert_eq!(instance_id(text).ok().as_deref(), Some(kafka), "{text}");
        }
        assert!(instance_id("not/an/id").is_err());
    }
}
