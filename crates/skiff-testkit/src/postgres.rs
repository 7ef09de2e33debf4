//! A throwaway PostgreSQL server: initdb into a temporary directory, pg_ctl start on
//! 127.0.0.1 with an ephemeral port, one database per test, stopped and removed when dropped.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use skiff_testkit::postgres::Postgres;
//! let Some(pg) = Postgres::start()? else {
//!     return Ok(()); // skipped: PostgreSQL is not installed here
//! };
//! let url = pg.database("my_test").await?; // postgres://postgres@127.0.0.1:PORT/my_test
//! # Ok(())
//! # }
//! ```

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context, bail};
use tempfile::TempDir;

use crate::{TIMEOUT, free_port, log_tail, missing, poll_until, port_open};

/// How many ports `start` tries when another process takes the one it picked.
const PORT_ATTEMPTS: usize = 4;

/// A PostgreSQL server of its own: a data directory in a temporary directory, listening on
/// 127.0.0.1 only. Dropping it stops the server (`pg_ctl stop -m immediate`) and removes the
/// directory.
pub struct Postgres {
    /// The directory holding `initdb`, `pg_ctl` and `postgres`.
    bin: PathBuf,
    runner: Runner,
    /// Holds `data/` (the cluster), the Unix socket and `postgres.log`.
    dir: TempDir,
    port: u16,
    running: bool,
}

impl Postgres {
    /// Creates and starts a server, or returns `Ok(None)` (after one `skipped:` line on stderr)
    /// when PostgreSQL is not installed and the run does not require it
    /// ([`crate::services_required`]). Blocks for the server's start (about a second).
    pub fn start() -> anyhow::Result<Option<Postgres>> {
        Postgres::start_with(None)
    }

    /// [`Postgres::start`] with TLS on (`ssl = on`) and this server certificate and key (PEM):
    /// clients may then connect with `sslmode=require`.
    pub fn start_tls(identity: &crate::certs::Issued) -> anyhow::Result<Option<Postgres>> {
        Postgres::start_with(Some(identity))
    }

    fn start_with(tls: Option<&crate::certs::Issued>) -> anyhow::Result<Option<Postgres>> {
        let Some(bin) = find_binaries() else {
            return missing("PostgreSQL not installed (apt-get install postgresql)");
        };
        let runner = Runner::for_this_process()?;
        // As root the server runs as `postgres`, which must reach the directory: /tmp, not a
        // TMPDIR that may be private to root.
        let parent = match runner {
            Runner::Direct => std::env::temp_dir(),
            _ => PathBuf::from("/tmp"),
        };
        let dir = tempfile::Builder::new()
            .prefix("skiff-postgres-")
            .tempdir_in(&parent)
            .with_context(|| format!("temporary directory in {}", parent.display()))?;
        runner.hand_over(dir.path())?;
        let mut pg = Postgres {
            bin,
            runner,
            dir,
            port: 0,
            running: false,
        };
        pg.init()?;
        if let Some(identity) = tls {
            pg.enable_tls(identity)?;
        }
        let mut attempt = 1;
        loop {
            pg.port = free_port()?;
            match pg.pg_ctl_start() {
                Ok(()) => return Ok(Some(pg)),
                Err(e) if attempt < PORT_ATTEMPTS && pg.port_was_taken() => {
                    eprintln!("postgres: port {} was taken ({e:#}); another port", pg.port);
                    attempt += 1;
                    // Empty the log so the next attempt's failure is judged on its own lines
                    // (never create it here: as root it would be root's, not postgres's).
                    let _ = std::fs::OpenOptions::new()
                        .write(true)
                        .truncate(true)
                        .open(pg.log_file());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary directory: `data/` (the cluster), the Unix socket and `postgres.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// The URL of database `db` as the superuser `postgres` (no password: trust
    /// authentication), `postgres://postgres@127.0.0.1:PORT/db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates database `name` (letters, digits, `_` and `-`; at most 63 bytes).
    pub async fn create_database(&self, name: &str) -> anyhow::Result<()> {
        check_database_name(name)?;
        let (client, connection) = tokio::time::timeout(
            TIMEOUT,
            tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls),
        )
        .await
        .context("connect to postgres: timed out")?
        .context("connect to postgres")?;
        let connection = tokio::spawn(connection);
        let created = tokio::time::timeout(
            TIMEOUT,
            client.batch_execute(&format!("CREATE DATABASE \"{name}\"")),
        )
        .await
        .context("CREATE DATABASE: timed out")?
        .with_context(|| format!("CREATE DATABASE {name}"));
        drop(client);
        // The connection task ends once the client is gone.
        let _ = tokio::time::timeout(TIMEOUT, connection).await;
        created
    }

    /// Creates database `name` and returns its URL (see [`Postgres::url`]): one database per
    /// test keeps tests on one server apart.
    pub async fn database(&self, name: &str) -> anyhow::Result<String> {
        self.create_database(name).await?;
        Ok(self.url(name))
    }

    /// Stops the server (`pg_ctl stop -m fast`), keeping its data directory and port for
    /// [`Postgres::start_again`].
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if !self.running {
            return Ok(());
        }
        self.pg_ctl_stop("fast")?;
        self.running = false;
        Ok(())
    }

    /// Starts the server again on the same data directory and port.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        if self.running {
            return Ok(());
        }
        self.pg_ctl_start()
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Writes the certificate and key into the data directory (the key readable by the server's
    /// user alone, as PostgreSQL insists) and turns `ssl` on.
    fn enable_tls(&self, identity: &crate::certs::Issued) -> anyhow::Result<()> {
        let data = self.data_dir();
        let cert = data.join("server.crt");
        let key = data.join("server.key");
        std::fs::write(&cert, &identity.cert_pem).context("write server.crt")?;
        std::fs::write(&key, &identity.key_pem).context("write server.key")?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
                .context("chmod server.key")?;
        }
        self.runner.hand_over(&cert)?;
        self.runner.hand_over(&key)?;
        let settings = format!(
            "\nssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
            cert.display(),
            key.display()
        );
        let conf = data.join("postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&conf)
            .and_then(|mut f| f.write_all(settings.as_bytes()))
            .with_context(|| format!("append to {}", conf.display()))
    }

    fn init(&self) -> anyhow::Result<()> {
        let data = self.data_dir();
        self.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-A".as_ref(),
                "trust".as_ref(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                // The C locale exists everywhere; the environment's may not be generated.
                "--locale=C".as_ref(),
                "--no-sync".as_ref(),
            ],
        )?;
        // The port is given at each start (-p), the rest here. Appending keeps the file's
        // owner (postgres, when run as root).
        let settings = format!(
            "\n# skiff-testkit\n\
             listen_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{}'\n\
             max_connections = 200\n\
             shared_buffers = 32MB\n\
             fsync = off\n\
             synchronous_commit = off\n\
             full_page_writes = off\n",
            self.dir.path().display()
        );
        let conf = data.join("postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&conf)
            .and_then(|mut f| f.write_all(settings.as_bytes()))
            .with_context(|| format!("append to {}", conf.display()))
    }

    fn pg_ctl_start(&mut self) -> anyhow::Result<()> {
        let data = self.data_dir();
        let log = self.log_file();
        let timeout = TIMEOUT.as_secs().to_string();
        let options = format!("-p {}", self.port);
        let started = self.run(
            "pg_ctl",
            &[
                "start".as_ref(),
                "-D".as_ref(),
                data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-o".as_ref(),
                options.as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                timeout.as_ref(),
                "-s".as_ref(),
            ],
        );
        if let Err(e) = started {
            // pg_ctl may give up waiting on a server that still starts later: stop it.
            let _ = self.pg_ctl_stop("immediate");
            return Err(e.context(log_tail(&log)));
        }
        self.running = true;
        // pg_ctl -w waited for the server to accept connections (on its socket); TCP too.
        let port = self.port;
        poll_until(
            "postgres on 127.0.0.1",
            || Ok(port_open(port)),
            || log_tail(&log),
        )
    }

    fn pg_ctl_stop(&self, mode: &str) -> anyhow::Result<()> {
        let data = self.data_dir();
        let timeout = TIMEOUT.as_secs().to_string();
        self.run(
            "pg_ctl",
            &[
                "stop".as_ref(),
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                mode.as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                timeout.as_ref(),
                "-s".as_ref(),
            ],
        )
        .map(drop)
    }

    /// Whether the last start failed because another process had the port.
    fn port_was_taken(&self) -> bool {
        std::fs::read_to_string(self.log_file()).is_ok_and(|log| log.contains("already in use"))
    }

    /// Runs one of the server's programs (as `postgres` when this process is root).
    fn run(&self, program: &str, args: &[&OsStr]) -> anyhow::Result<Output> {
        let path = self.bin.join(program);
        let output = self
            .runner
            .command(&path, args)
            // The postgres user may not reach the test's working directory.
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("run {}", path.display()))?;
        if !output.status.success() {
            bail!(
                "{program} {}: {}\n{}{}",
                args.iter()
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(output)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if self.running && self.pg_ctl_stop("immediate").is_err() {
            // The postmaster's PID is the first line of postmaster.pid.
            let pid = std::fs::read_to_string(self.data_dir().join("postmaster.pid"))
                .ok()
                .and_then(|s| s.lines().next().map(str::to_owned));
            if let Some(pid) = pid {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        // `dir` (a TempDir) is removed after this.
    }
}

/// How the server's programs run: PostgreSQL refuses to run as root, so as root they run as the
/// `postgres` user.
#[derive(Debug, Clone)]
enum Runner {
    Direct,
    /// `runuser -u postgres -- PROGRAM ARGS`.
    Runuser(PathBuf),
    /// `su postgres -s /bin/sh -c 'PROGRAM ARGS'`.
    Su(PathBuf),
}

impl Runner {
    fn for_this_process() -> anyhow::Result<Runner> {
        if !rustix::process::geteuid().is_root() {
            return Ok(Runner::Direct);
        }
        let exists = Command::new("id")
            .args(["-u", "postgres"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !exists {
            bail!(
                "running as root, and PostgreSQL refuses to run as root; there is no `postgres` \
                 user to run it as (the postgresql package creates it)"
            );
        }
        let candidates = [
            find_program("runuser").map(Runner::Runuser),
            find_program("su").map(Runner::Su),
        ];
        for runner in candidates.into_iter().flatten() {
            let works = runner
                .command(Path::new("true"), &[])
                .current_dir("/")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if works {
                return Ok(runner);
            }
        }
        bail!("running as root, and neither runuser nor su runs a command as `postgres`")
    }

    fn command(&self, program: &Path, args: &[&OsStr]) -> Command {
        match self {
            Runner::Direct => {
                let mut command = Command::new(program);
                command.args(args);
                command
            }
            Runner::Runuser(runuser) => {
                let mut command = Command::new(runuser);
                command
                    .args(["-u", "postgres", "--"])
                    .arg(program)
                    .args(args);
                command
            }
            Runner::Su(su) => {
                let mut line = shell_quote(program.as_os_str());
                for arg in args {
                    line.push(" ");
                    line.push(shell_quote(arg));
                }
                let mut command = Command::new(su);
                command.args(["postgres", "-s", "/bin/sh", "-c"]).arg(line);
                command
            }
        }
    }

    /// Makes `dir` the postgres user's when the server runs as postgres.
    fn hand_over(&self, dir: &Path) -> anyhow::Result<()> {
        if matches!(self, Runner::Direct) {
            return Ok(());
        }
        let status = Command::new("chown")
            .arg("postgres:")
            .arg(dir)
            .stdin(Stdio::null())
            .status()
            .context("run chown")?;
        if !status.success() {
            bail!("chown postgres: {}: {status}", dir.display());
        }
        Ok(())
    }
}

/// `'...'` for /bin/sh.
fn shell_quote(s: &OsStr) -> OsString {
    let text = s.to_string_lossy().replace('\'', r"'\''");
    OsString::from(format!("'{text}'"))
}

fn check_database_name(name: &str) -> anyhow::Result<()> {
    let fine = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !fine {
        bail!("database name {name:?}: use 1 to 63 letters, digits, `_` or `-`");
    }
    Ok(())
}

const PROGRAMS: [&str; 3] = ["initdb", "pg_ctl", "postgres"];

/// The directory holding `initdb`, `pg_ctl` and `postgres`: Debian's
/// `/usr/lib/postgresql/VERSION/bin` (highest version first), else one on PATH.
fn find_binaries() -> Option<PathBuf> {
    let has_all = |dir: &Path| PROGRAMS.iter().all(|p| dir.join(p).is_file());
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let version: Option<Vec<u32>> = name
                .to_str()?
                .split('.')
                .map(|part| part.parse().ok())
                .collect();
            Some((version?, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    let debian = versions.into_iter().map(|(_, bin)| bin);
    let path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    debian.chain(path).find(|dir| has_all(dir))
}

/// `name` on PATH or in the system directories (root's tools live in sbin).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let system = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from);
    path.into_iter()
        .chain(system)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_names() {
        assert!(check_database_name("skiff").is_ok());
        assert!(check_database_name("test_1-a").is_ok());
        assert!(check_database_name("").is_err());
        assert!(check_database_name("a\"b").is_err());
        assert!(check_database_name("a b").is_err());
        assert!(check_database_name(&"x".repeat(64)).is_err());
    }

    #[test]
    fn quoting_for_sh() {
        assert_eq!(shell_quote(OsStr::new("a b")), "'a b'");
        assert_eq!(shell_quote(OsStr::new("it's")), r"'it'\''s'");
    }
}
