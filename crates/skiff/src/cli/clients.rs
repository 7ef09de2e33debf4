//! `skiff clients` / `skiff clients show ID`: the broker's client-instance view, read from its
//! admin HTTP listener (`GET /clients`, `GET /clients/{id}`) with a tiny HTTP/1.1 client.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{CmdResult, Failure, exit, print_json, print_table};

/// Options of `skiff clients`.
#[derive(Args, Debug, Clone)]
pub struct ClientsArgs {
    /// The broker's admin HTTP address (config `admin.listen`).
    #[arg(long, default_value = "http://127.0.0.1:9644", global = true)]
    pub admin: String,
}

#[derive(Subcommand, Debug)]
pub enum ClientsCommand {
    /// Show one client instance: connections, memberships, telemetry and latest metrics.
    #[command(
        after_help = "Examples:\n  skiff clients show AAAAAAAAAAAAAAAAAAAAAA\n  \
                            skiff clients show AAAAAAAAAAAAAAAAAAAAAA --json"
    )]
    Show {
        /// The client instance ID (22 characters of URL-safe base64).
        id: String,
    },
}

/// The largest response body accepted.
const MAX_BODY: usize = 64 * 1024 * 1024;

pub async fn run(
    json: bool,
    timeout_ms: u64,
    args: ClientsArgs,
    command: Option<ClientsCommand>,
) -> CmdResult {
    let timeout = Duration::from_millis(timeout_ms);
    match command {
        None => {
            let value = get_json(&args.admin, "/clients", timeout).await?;
            if json {
                print_json(&value);
            } else {
                print_list(&value);
            }
        }
        Some(ClientsCommand::Show { id }) => {
            if id.is_empty()
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
            {
                return Err(Failure::usage(format!(
                    "{id:?} is not a client instance ID (URL-safe base64)"
                )));
            }
            let value = get_json(&args.admin, &format!("/clients/{id}"), timeout).await?;
            if json {
                print_json(&value);
            } else {
                print_show(&value);
            }
        }
    }
    Ok(())
}

fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// Splits `http://host:port[/prefix]` (or `host:port`) into the address and the path prefix.
fn parse_base(base: &str) -> Result<(String, String), Failure> {
    let rest = if let Some(r) = base.strip_prefix("http://") {
        r
    } else if base.starts_with("https://") {
        return Err(Failure::usage("--admin: https is not supported"));
    } else {
        base
    };
    let (host, prefix) = match rest.find('/') {
        Some(i) => (
            rest.get(..i).unwrap_or_default(),
            rest.get(i..).unwrap_or_default(),
        ),
        None => (rest, ""),
    };
    if host.is_empty() {
        return Err(Failure::usage(format!("--admin {base:?}: no host")));
    }
    let host = if host
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    Ok((host, prefix.trim_end_matches('/').to_string()))
}

/// GETs `path` from the admin listener and parses the JSON body.
async fn get_json(base: &str, path: &str, timeout: Duration) -> Result<Value, Failure> {
    let (addr, prefix) = parse_base(base)?;
    let (status, body) = tokio::time::timeout(timeout, get(&addr, &format!("{prefix}{path}")))
        .await
        .map_err(|_| fail(exit::UNREACHABLE, format!("admin {base}: timed out")))??;
    let text = String::from_utf8_lossy(&body);
    match status {
        200 => serde_json::from_slice(&body)
            .map_err(|e| fail(exit::FAILURE, format!("admin {base}{path}: not JSON ({e})"))),
        404 => Err(fail(
            exit::NOT_FOUND,
            format!("admin {base}{path}: {}", text.trim()),
        )),
        400 => Err(fail(
            exit::USAGE,
            format!("admin {base}{path}: {}", text.trim()),
        )),
        _ => Err(fail(
            exit::FAILURE,
            format!("admin {base}{path}: HTTP {status}: {}", text.trim()),
        )),
    }
}

/// One HTTP/1.1 GET with `Connection: close`; returns the status and the (de-chunked) body.
async fn get(addr: &str, path: &str) -> Result<(u16, Vec<u8>), Failure> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| fail(exit::UNREACHABLE, format!("admin {addr}: {e}")))?;
    let host = addr;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nUser-Agent: skiff-cli\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| fail(exit::UNREACHABLE, format!("admin {addr}: {e}")))?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| fail(exit::UNREACHABLE, format!("admin {addr}: {e}")))?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if raw.len() > MAX_BODY {
            return Err(fail(
                exit::FAILURE,
                format!("admin {addr}: response too large"),
            ));
        }
    }
    parse_response(&raw)
        .ok_or_else(|| fail(exit::FAILURE, format!("admin {addr}: bad HTTP response")))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Parses an HTTP/1.x response: status code and body (content-length, chunked or close-delimited).
fn parse_response(raw: &[u8]) -> Option<(u16, Vec<u8>)> {
    let end = find(raw, b"\r\n\r\n")?;
    let head = std::str::from_utf8(raw.get(..end)?).ok()?;
    let body = raw.get(end + 4..)?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let mut parts = status_line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let status: u16 = parts.next()?.parse().ok()?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().ok();
        }
    }
    if chunked {
        return dechunk(body).map(|b| (status, b));
    }
    match length {
        Some(n) => Some((status, body.get(..n)?.to_vec())),
        None => Some((status, body.to_vec())),
    }
}

fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = find(body, b"\r\n")?;
        let size_text = std::str::from_utf8(body.get(..line_end)?).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        body = body.get(line_end + 2..)?;
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
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
            "TELEMETRY SUBSCRIPTION",
            "LAST PUSH",
            "REJECTIONS",
        ],
        &rows,
    );
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
            let differs = m.get("member_id_differs").and_then(Value::as_bool) == Some(true);
            vec![
                text(m.get("group").unwrap_or(&Value::Null)),
                text(m.get("protocol").unwrap_or(&Value::Null)),
                format!(
                    "{}{}",
                    text(m.get("member_id").unwrap_or(&Value::Null)),
                    if differs { " (differs)" } else { "" }
                ),
                text(m.get("member_epoch").unwrap_or(&Value::Null)),
                assigned,
            ]
        })
        .collect();
    print_table(
        &["GROUP", "PROTOCOL", "MEMBER ID", "EPOCH", "ASSIGNED"],
        &rows,
    );

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_and_chunked_responses() {
        let raw = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n[]";
        assert_eq!(parse_response(raw), Some((200, b"[]".to_vec())));
        let raw =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[1\r\n1\r\n]\r\n0\r\n\r\n";
        assert_eq!(parse_response(raw), Some((200, b"[1]".to_vec())));
        assert_eq!(parse_response(b"garbage"), None);
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert_eq!(parse_response(raw), None);
    }

    #[test]
    fn parses_admin_base() {
        let ok = |s: &str| parse_base(s).ok();
        assert_eq!(
            ok("http://127.0.0.1:9644"),
            Some(("127.0.0.1:9644".into(), String::new()))
        );
        assert_eq!(
            ok("localhost:1/x/"),
            Some(("localhost:1".into(), "/x".into()))
        );
        assert_eq!(ok("http://h"), Some(("h:80".into(), String::new())));
        assert!(ok("https://h").is_none());
    }
}
