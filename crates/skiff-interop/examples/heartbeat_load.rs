//! A group-coordinator load generator over the raw protocol (ConsumerGroupHeartbeat v1, KIP-848),
//! so that the coordinator, not a client library, is what is measured.
//!
//! ```sh
//! cargo run --release -p skiff-interop --example heartbeat_load -- load 127.0.0.1:9092 --seconds 5
//! cargo run --release -p skiff-interop --example heartbeat_load -- failover 127.0.0.1:9092,127.0.0.1:9093
//! ```
//!
//! `load ADDR`: `--connections` connections (default 8), each with its own member in its own group
//! of a 8-partition topic, one request in flight per connection:
//!   * churn: each connection joins (member epoch 0) and leaves (-1) again and again, every
//!     request a change of the group's state (stored before it is answered);
//!   * steady: each joins once, then heartbeats with its epoch (no change to store).
//!
//! Prints requests/s and p50/p99 latency of each phase as one line of `key=value`.
//!
//! `failover ADDRS`: joins one member to a group through its coordinator, prints
//! `coordinator=NODE` and waits for a line on stdin (the caller kills that broker), then
//! heartbeats through whatever FindCoordinator names (asking the other addresses) until the group
//! answers again with the same member ID and epoch; prints `recovered_ms=MS`, the time from that
//! stdin line.
//!
//! Figures are printed, never asserted. Loopback targets only; every phase is time-bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use skiff_protocol::generated::create_topics_request::CreatableTopic;
use skiff_protocol::generated::{
    ConsumerGroupHeartbeatRequest, CreateTopicsRequest, FindCoordinatorRequest,
};
use skiff_protocol::header::{encode_request_frame, parse_response_frame};
use skiff_protocol::{ApiKey, FrameReader, Request, Response};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

const TOPIC: &str = "heartbeat-load";
const NOT_COORDINATOR: i16 = 16;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;

struct Conn {
    reader: FrameReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: i32,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Conn, String> {
        let stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
            .await
            .map_err(|_| format!("connecting to {addr} timed out"))?
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (r, w) = stream.into_split();
        Ok(Conn {
            reader: FrameReader::new(r, 64 * 1024 * 1024),
            writer: w,
            next_id: 1,
        })
    }

    async fn call(&mut self, request: Request, version: i16) -> Result<Response, String> {
        let api: ApiKey = request.api_key();
        let id = self.next_id;
        self.next_id += 1;
        let frame = encode_request_frame(&request, version, id, Some("heartbeat-load"), None)
            .map_err(|e| e.to_string())?;
        self.writer
            .write_all(&frame)
            .await
            .map_err(|e| e.to_string())?;
        let frame = tokio::time::timeout(Duration::from_secs(30), self.reader.read_frame())
            .await
            .map_err(|_| "response timed out".to_string())?
            .map_err(|e| e.to_string())?
            .ok_or("connection closed")?;
        parse_response_frame(frame, api, version)
            .map(|(_, r)| r)
            .map_err(|e| e.to_string())
    }

    /// One ConsumerGroupHeartbeat: (error code, member ID, member epoch).
    async fn heartbeat(
        &mut self,
        group: &str,
        member: &str,
        epoch: i32,
    ) -> Result<(i16, String, i32), String> {
        let request = Request::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest {
            group_id: group.into(),
            member_id: member.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: (epoch == 0).then(|| vec![TOPIC.into()]),
            server_assignor: None,
            topic_partitions: (epoch == 0).then(Vec::new),
            ..Default::default()
        });
        match self.call(request, 1).await? {
            Response::ConsumerGroupHeartbeat(r) => Ok((
                r.error_code,
                r.member_id.map(|m| m.to_string()).unwrap_or_default(),
                r.member_epoch,
            )),
            _ => Err("unexpected response to ConsumerGroupHeartbeat".into()),
        }
    }

    /// FindCoordinator v4 for a group: the node's address as the broker advertises it.
    async fn find_coordinator(&mut self, group: &str) -> Result<Option<(i32, String)>, String> {
        let request = Request::FindCoordinator(FindCoordinatorRequest {
            key_type: 0,
            coordinator_keys: vec![group.into()],
            ..Default::default()
        });
        match self.call(request, 4).await? {
            Response::FindCoordinator(r) => Ok(r
                .coordinators
                .first()
                .filter(|c| c.error_code == 0)
                .map(|c| (c.node_id, format!("{}:{}", c.host, c.port)))),
            _ => Err("unexpected response to FindCoordinator".into()),
        }
    }
}

/// A member ID as KIP-1082 clients make them (22 URL-safe base64 characters).
fn member_id(seed: u64) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(std::process::id());
    (0..22)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(ALPHABET[(x % 64) as usize])
        })
        .collect()
}

async fn create_topic(addr: SocketAddr) -> Result<(), String> {
    let mut conn = Conn::open(addr).await?;
    let request = Request::CreateTopics(CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: TOPIC.into(),
            num_partitions: 8,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    });
    match conn.call(request, 5).await? {
        Response::CreateTopics(r) => match r.topics.first().map(|t| t.error_code) {
            Some(0) | Some(36) => Ok(()),
            other => Err(format!("CreateTopics answered {other:?}")),
        },
        _ => Err("unexpected response".into()),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted
        .get(i.min(sorted.len() - 1))
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

/// Runs `connections` tasks of `work` for `seconds`; each returns its latencies.
async fn phase<F, Fut>(connections: usize, seconds: u64, work: F) -> Result<(f64, f64, f64), String>
where
    F: Fn(usize, Instant) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Duration>, String>> + Send + 'static,
{
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..connections)
        .map(|i| tokio::spawn(work(i, deadline)))
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.map_err(|e| e.to_string())??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort();
    Ok((
        all.len() as f64 / elapsed,
        percentile(&all, 0.50),
        percentile(&all, 0.99),
    ))
}

async fn load(addr: SocketAddr, connections: usize, seconds: u64) -> Result<(), String> {
    create_topic(addr).await?;
    // Until the broker coordinates every group used (cluster mode: its shards loaded).
    for i in 0..connections {
        for group in [format!("churn-{i}"), format!("steady-{i}")] {
            let member = member_id(1 << 63 | i as u64);
            let ((code, _, _), _) =
                heartbeat_anywhere(&[addr], &group, &member, 0, Duration::from_secs(30)).await?;
            let left = Conn::open(addr)
                .await?
                .heartbeat(&group, &member, -1)
                .await?;
            if code != 0 || left.0 != 0 {
                return Err(format!("warming up {group}: join {code}, leave {}", left.0));
            }
        }
    }
    let churn = phase(connections, seconds, |i, deadline| async move {
        let mut conn = Conn::open(addr).await?;
        let group = format!("churn-{i}");
        let mut latencies = Vec::new();
        let mut n = 0u64;
        while Instant::now() < deadline {
            n += 1;
            let member = member_id((i as u64) << 32 | n);
            let t = Instant::now();
            let (code, _, _) = conn.heartbeat(&group, &member, 0).await?;
            latencies.push(t.elapsed());
            if code != 0 {
                return Err(format!("join answered {code}"));
            }
            let t = Instant::now();
            let (code, _, _) = conn.heartbeat(&group, &member, -1).await?;
            latencies.push(t.elapsed());
            if code != 0 {
                return Err(format!("leave answered {code}"));
            }
        }
        Ok(latencies)
    })
    .await?;
    let steady = phase(connections, seconds, |i, deadline| async move {
        let mut conn = Conn::open(addr).await?;
        let group = format!("steady-{i}");
        let member = member_id(u64::MAX - i as u64);
        let (code, _, mut epoch) = conn.heartbeat(&group, &member, 0).await?;
        if code != 0 {
            return Err(format!("join answered {code}"));
        }
        let mut latencies = Vec::new();
        while Instant::now() < deadline {
            let t = Instant::now();
            let (code, _, e) = conn.heartbeat(&group, &member, epoch).await?;
            latencies.push(t.elapsed());
            if code != 0 {
                return Err(format!("heartbeat answered {code}"));
            }
            epoch = e;
        }
        Ok(latencies)
    })
    .await?;
    println!(
        "churn_per_s={:.0} churn_p50_ms={:.2} churn_p99_ms={:.2} steady_per_s={:.0} steady_p50_ms={:.2} steady_p99_ms={:.2}",
        churn.0, churn.1, churn.2, steady.0, steady.1, steady.2
    );
    Ok(())
}

/// Heartbeats `group` through its coordinator (asked of any of `addrs`) until answered without
/// a coordinator error; the answer and the coordinator's node ID.
async fn heartbeat_anywhere(
    addrs: &[SocketAddr],
    group: &str,
    member: &str,
    epoch: i32,
    within: Duration,
) -> Result<((i16, String, i32), i32), String> {
    let deadline = Instant::now() + within;
    loop {
        for addr in addrs {
            let Ok(mut conn) = Conn::open(*addr).await else {
                continue;
            };
            let Ok(Some((node, coordinator))) = conn.find_coordinator(group).await else {
                continue;
            };
            let Ok(target) = coordinator.parse::<SocketAddr>() else {
                continue;
            };
            let Ok(mut at) = Conn::open(target).await else {
                continue;
            };
            if let Ok(answer) = at.heartbeat(group, member, epoch).await
                && ![
                    NOT_COORDINATOR,
                    COORDINATOR_LOAD_IN_PROGRESS,
                    COORDINATOR_NOT_AVAILABLE,
                ]
                .contains(&answer.0)
            {
                return Ok((answer, node));
            }
        }
        if Instant::now() > deadline {
            return Err("no coordinator answered in time".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn failover(addrs: Vec<SocketAddr>) -> Result<(), String> {
    create_topic(addrs[0]).await?;
    let group = "failover";
    let member = member_id(7);
    let ((code, _, epoch), node) =
        heartbeat_anywhere(&addrs, group, &member, 0, Duration::from_secs(30)).await?;
    if code != 0 {
        return Err(format!("join answered {code}"));
    }
    println!("coordinator={node}");
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let killed = Instant::now();
    let ((code, m, e), now) =
        heartbeat_anywhere(&addrs, group, &member, epoch, Duration::from_secs(60)).await?;
    if code != 0 || m != member || e != epoch {
        return Err(format!(
            "after failover: code {code}, member {m}, epoch {e}"
        ));
    }
    println!(
        "recovered_ms={} new_coordinator={now}",
        killed.elapsed().as_millis()
    );
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let addrs: Vec<SocketAddr> = args
        .get(1)
        .map(|a| a.split(',').filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_default();
    let result = match (args.first().map(String::as_str), addrs.first()) {
        (Some("load"), Some(addr)) => {
            load(
                *addr,
                value("--connections", 8) as usize,
                value("--seconds", 5),
            )
            .await
        }
        (Some("failover"), Some(_)) => failover(addrs).await,
        _ => Err("usage: heartbeat_load load ADDR [--connections N] [--seconds S] | failover ADDR,ADDR,..".into()),
    };
    if let Err(e) = result {
        eprintln!("heartbeat_load: {e}");
        std::process::exit(1);
    }
}
