//! The real services Skiff's integration tests start, and the certificates they use (dev-only:
//! a dev-dependency of the crates whose tests need it, never a dependency of the broker).
//!
//! - [`postgres::Postgres`]: a throwaway PostgreSQL server (initdb into a temporary directory,
//!   started with pg_ctl; run as the `postgres` user when the tests run as root), with one
//!   database per test through [`postgres::Postgres::database`].
//! - [`s3::S3Server`]: an S3-compatible server, moto's server mode (`moto_server`, from the
//!   `.venv` that `./scripts/test` makes), with fixed test credentials.
//! - [`certs`]: test certificates made with rcgen (a CA, server and client certificates, PEM
//!   files) and rustls client and server configurations built from them.
//!
//! Each service listens on 127.0.0.1 only, on its own ephemeral port and in its own temporary
//! directory, so tests in one binary can each start their own in parallel; each stops (and its
//! directory is removed) when its value is dropped. Every wait is bounded.
//!
//! When a service's programs are not installed, its `start` prints one `skipped: ...` line to
//! stderr and returns `Ok(None)`, so a developer without them still runs the rest of the suite;
//! a run that must have them ([`services_required`]: CI) fails instead.

pub mod certs;
pub mod postgres;
pub mod s3;

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The bound on any single wait for a service (start, stop, a request).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a missing service fails the test rather than skipping it: under CI (`CI` set to a
/// value other than empty or `false`), or when `SKIFF_REQUIRE_TOOLS=1` (`./scripts/test` sets it
/// once everything the suites use is installed).
pub fn services_required() -> bool {
    let ci = std::env::var("CI").unwrap_or_default();
    let ci = !ci.is_empty() && ci != "false";
    ci || std::env::var("SKIFF_REQUIRE_TOOLS").is_ok_and(|v| v == "1")
}

/// `Ok(None)` after printing `skipped: <reason>`, or an error when the run requires services.
fn missing<T>(reason: &str) -> anyhow::Result<Option<T>> {
    if services_required() {
        bail!("{reason}, and this run requires it (CI or SKIFF_REQUIRE_TOOLS=1)");
    }
    eprintln!("skipped: {reason}");
    Ok(None)
}

/// A loopback port that was free a moment ago (bound, then released). Another process may take
/// it before the service binds it: the services retry with a new port when that happens.
fn free_port() -> anyhow::Result<u16> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("bind an ephemeral loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` now.
fn port_open(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Polls `ready` (every 50 ms) until it holds or `TIMEOUT` passes; `gave_up` says why it
/// might not. For readiness that no event announces (a child process's port).
fn poll_until(
    what: &str,
    mut ready: impl FnMut() -> anyhow::Result<bool>,
    gave_up: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if ready()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{what}: not ready after {TIMEOUT:?}; {}", gave_up());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last lines of a log file, for error messages.
fn log_tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(20);
            format!("{}:\n{}", path.display(), lines[start..].join("\n"))
        }
        Err(e) => format!("{} unreadable: {e}", path.display()),
    }
}
