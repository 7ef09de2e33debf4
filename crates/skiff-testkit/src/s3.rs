//! An S3-compatible server for tests: moto's server mode (`moto_server`, PyPI `moto[server]`,
//! pinned in tests/interop/requirements.txt and installed into `.venv` by `./scripts/test`).
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use skiff_testkit::s3::{self, S3Server};
//! let Some(s3) = S3Server::start()? else {
//!     return Ok(()); // skipped: moto_server is not installed here
//! };
//! s3.create_bucket("skiff-test").await?;
//! // A client points at s3.endpoint() with s3::ACCESS_KEY_ID, s3::SECRET_ACCESS_KEY and
//! // s3::REGION, path-style requests, plain HTTP.
//! # Ok(())
//! # }
//! ```

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{TIMEOUT, free_port, log_tail, missing, poll_until};

/// The access key ID moto accepts (it accepts any; this is the one tests use).
pub const ACCESS_KEY_ID: &str = "testing";
/// The secret access key that goes with [`ACCESS_KEY_ID`].
pub const SECRET_ACCESS_KEY: &str = "testing";
/// The region of every bucket the server makes.
pub const REGION: &str = "us-east-1";

/// The environment variable naming the `moto_server` program, to use one outside `.venv`.
pub const MOTO_SERVER_ENV: &str = "SKIFF_MOTO_SERVER";

/// How many ports `start` tries when another process takes the one it picked.
const PORT_ATTEMPTS: usize = 4;

/// The largest response [`S3Server::request`] reads.
const MAX_RESPONSE: u64 = 256 << 20;

/// Moto checks no signature, but takes a request without an `Authorization` header for an
/// anonymous one (refused on private objects): the test helpers send this one.
const AUTHORIZATION: &str = "AWS4-HMAC-SHA256 Credential=testing/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0000000000000000000000000000000000000000000000000000000000000000";

/// A `moto_server` process on 127.0.0.1, killed (and reaped) when dropped. Its state is in
/// memory: a new server has no buckets.
pub struct S3Server {
    child: Child,
    port: u16,
    /// Holds `moto.log` (the server's stdout and stderr).
    dir: TempDir,
}

/// A response to [`S3Server::request`].
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

impl S3Server {
    /// Starts a server, or returns `Ok(None)` (after one `skipped:` line on stderr) when
    /// `moto_server` is not installed and the run does not require it
    /// ([`crate::services_required`]). Blocks until the server answers HTTP (about a second).
    pub fn start() -> anyhow::Result<Option<S3Server>> {
        let Some(program) = find_moto_server() else {
            return missing("moto_server not found (./scripts/test installs it into .venv)");
        };
        let mut attempt = 1;
        loop {
            let dir = tempfile::Builder::new()
                .prefix("skiff-s3-")
                .tempdir()
                .context("temporary directory")?;
            let log = dir.path().join("moto.log");
            let log_file =
                std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
            let port = free_port()?;
            let child = Command::new(&program)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(log_file.try_clone()?)
                .stderr(log_file)
                .spawn()
                .with_context(|| format!("spawn {}", program.display()))?;
            // From here on, Drop kills the child (and removes the directory) whatever happens.
            let mut server = S3Server { child, port, dir };
            match server.wait_ready() {
                Ok(()) => return Ok(Some(server)),
                Err(e) => {
                    let taken = std::fs::read_to_string(&log)
                        .is_ok_and(|text| text.contains("already in use"));
                    if !(taken && attempt < PORT_ATTEMPTS) {
                        return Err(e);
                    }
                    eprintln!("moto_server: port {port} was taken; another port");
                    attempt += 1;
                }
            }
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log file (its stdout and stderr).
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join("moto.log")
    }

    /// Creates bucket `name` (S3's rules: 3 to 63 lowercase letters, digits, `-` and `.`).
    pub async fn create_bucket(&self, name: &str) -> anyhow::Result<()> {
        let response = self.request("PUT", &format!("/{name}"), b"").await?;
        if response.status != 200 {
            bail!(
                "create bucket {name}: HTTP {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            );
        }
        Ok(())
    }

    /// Stores `body` as object `key` of `bucket`.
    pub async fn put_object(&self, bucket: &str, key: &str, body: &[u8]) -> anyhow::Result<()> {
        let response = self
            .request("PUT", &format!("/{bucket}/{}", encode_key(key)), body)
            .await?;
        if response.status != 200 {
            bail!(
                "put {bucket}/{key}: HTTP {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            );
        }
        Ok(())
    }

    /// Object `key` of `bucket`, or `None` when there is no such object.
    pub async fn get_object(&self, bucket: &str, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        let response = self
            .request("GET", &format!("/{bucket}/{}", encode_key(key)), b"")
            .await?;
        match response.status {
            200 => Ok(Some(response.body)),
            404 => Ok(None),
            status => bail!(
                "get {bucket}/{key}: HTTP {status}: {}",
                String::from_utf8_lossy(&response.body)
            ),
        }
    }

    /// One path-style HTTP/1.1 request (`path` starts with `/` and may carry a query), with a
    /// test `Authorization` header; bounded by [`crate::TIMEOUT`].
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> anyhow::Result<HttpResponse> {
        let port = self.port;
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
            let head = format!(
                "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
                 Authorization: {AUTHORIZATION}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body).await?;
            stream.flush().await?;
            let mut raw = Vec::new();
            stream.take(MAX_RESPONSE).read_to_end(&mut raw).await?;
            anyhow::Ok(raw)
        };
        let raw = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .with_context(|| format!("{method} {path}: timed out"))?
            .with_context(|| format!("{method} {path}"))?;
        parse_response(&raw).with_context(|| format!("{method} {path}: the response"))
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let port = self.port;
        let log = self.log_file();
        let child = &mut self.child;
        poll_until(
            "moto_server",
            || {
                if let Some(status) = child.try_wait()? {
                    bail!("moto_server exited: {status}; {}", log_tail(&log));
                }
                // Still running once it answers: not another server on a taken port.
                Ok(answers_http(port) && child.try_wait()?.is_none())
            },
            || log_tail(&log),
        )
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `SKIFF_MOTO_SERVER`, else `<workspace>/.venv/bin/moto_server`, else `moto_server` on PATH.
fn find_moto_server() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(MOTO_SERVER_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = workspace.join(".venv/bin/moto_server");
    if venv.is_file() {
        return Some(venv);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("moto_server"))
        .find(|p| p.is_file())
}

/// Whether an HTTP server answers `GET /` on 127.0.0.1:`port` now.
fn answers_http(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200))
    else {
        return false;
    };
    let wait = Some(Duration::from_secs(2));
    if stream.set_read_timeout(wait).is_err() || stream.set_write_timeout(wait).is_err() {
        return false;
    }
    let request = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    // The head of the answer, enough to tell moto (its x-amzn-requestid header) from another
    // server that took the port.
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    head.starts_with("http/") && head.contains("x-amzn-requestid")
}

/// Percent-encodes an object key for a path (keeping `/`).
fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Status and body of a whole HTTP/1.1 response (the connection closed after it).
fn parse_response(raw: &[u8]) -> anyhow::Result<HttpResponse> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        bail!("no end of headers in {} bytes", raw.len());
    };
    let head = std::str::from_utf8(&raw[..end]).context("headers are not UTF-8")?;
    let rest = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("status line {status_line:?}"))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().context("Content-Length")?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    let body = if chunked {
        dechunk(rest)?
    } else {
        match length {
            Some(n) if n > rest.len() => bail!("body cut short: {} of {n} bytes", rest.len()),
            Some(n) => rest[..n].to_vec(),
            None => rest.to_vec(),
        }
    };
    Ok(HttpResponse { status, body })
}

/// The body of a chunked response.
fn dechunk(mut rest: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    // Each round consumes at least the size line, so this ends.
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            bail!("chunk size line not ended");
        };
        let size_text = std::str::from_utf8(&rest[..eol])?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("chunk size {size_text:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            bail!("chunk cut short");
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_with_length_and_chunks() {
        let plain = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").unwrap();
        assert_eq!((plain.status, plain.body.as_slice()), (200, &b"hello"[..]));
        let chunked = parse_response(
            b"HTTP/1.1 404 NOT FOUND\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            (chunked.status, chunked.body.as_slice()),
            (404, &b"abcde"[..])
        );
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
    }

    #[test]
    fn keys_are_percent_encoded() {
        assert_eq!(encode_key("a/b-c_d.e~f"), "a/b-c_d.e~f");
        assert_eq!(encode_key("a b+c?"), "a%20b%2Bc%3F");
    }
}
