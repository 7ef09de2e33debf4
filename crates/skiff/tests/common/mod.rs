//! Test harness: the real `skiff` binary, as a `skiff broker` child on ephemeral ports and as
//! client commands against it, each bounded in time.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_skiff");

/// A `skiff broker` child, killed when dropped.
pub struct Broker {
    child: Child,
    /// The first listener's address.
    pub addr: String,
    pub dir: tempfile::TempDir,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `skiff broker` on port 0 and learns its address from the startup log line. No admin
/// listener: its default port (9644) would collide between tests running in parallel.
pub fn start_broker() -> Broker {
    start_broker_with(&["--set", "admin.listen=none"])
}

/// `start_broker` with extra broker arguments.
pub fn start_broker_with(extra: &[&str]) -> Broker {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args = vec!["--listen", "127.0.0.1:0", "--set", "num.partitions=2"];
    args.extend_from_slice(extra);
    spawn_broker(dir, &args)
}

/// Starts `skiff broker ARGS` on the data directory `dir`, and learns its first listener's
/// address from the startup log line.
pub fn spawn_broker(dir: tempfile::TempDir, args: &[&str]) -> Broker {
    let mut child = Command::new(BIN)
        .arg("broker")
        .args(args)
        .arg("--data-dir")
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn skiff broker");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    let early = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let early_lines = std::sync::Arc::clone(&early);
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !sent && let Ok(mut kept) = early_lines.lock() {
                kept.push(line.clone());
            }
            if !sent && line.contains("skiff broker started") {
                let clean: String = strip_ansi(&line);
                if let Some(addr) = clean
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("listen="))
                {
                    let _ = tx.send(addr.to_string());
                    sent = true;
                }
            }
            // Keep draining so the broker never blocks on a full pipe.
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|e| {
            let said = early.lock().map(|l| l.join("\n")).unwrap_or_default();
            panic!("the broker did not report its address ({e}); it said:\n{said}")
        });
    Broker { child, addr, dir }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A client command against `broker`.
pub fn skiff(broker: &Broker, args: &[&str]) -> Output {
    skiff_stdin(broker, args, None)
}

/// A client command against `broker`, with `stdin` as its input.
pub fn skiff_stdin(broker: &Broker, args: &[&str], stdin: Option<&str>) -> Output {
    skiff_at(&broker.addr, args, stdin)
}

/// A client command against the listener at `bootstrap`.
pub fn skiff_at(bootstrap: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .args(["--bootstrap", bootstrap])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn skiff");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    wait_bounded(child)
}

/// Waits for a child at most 30 s (then kills it and fails).
pub fn wait_bounded(child: Child) -> Output {
    let (tx, rx) = mpsc::channel();
    let id = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            let _ = Command::new("kill").arg(id.to_string()).status();
            panic!("skiff command timed out");
        }
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A free local port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}
