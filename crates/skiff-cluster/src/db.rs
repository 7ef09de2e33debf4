//! The PostgreSQL connection pool of a broker, from `cluster.metadata`
//! (`postgres://user:pass@host:port/db?sslmode=...`).
//!
//! `sslmode=disable` connects in plain text, `prefer` (the default, as libpq's) tries TLS first,
//! `require` insists on it. TLS certificates are verified against the system's roots plus the
//! PEM file named by `sslrootcert=/path` when given.

use std::str::FromStr;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use thiserror::Error;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Config, NoTls};

/// What went wrong talking to PostgreSQL.
#[derive(Debug, Error)]
pub enum DbError {
    #[error("cluster.metadata: {0}")]
    Config(String),
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("PostgreSQL pool: {0}")]
    Pool(String),
    /// This broker's registration is no longer current (its lease lapsed or a newer epoch
    /// registered): it must not write.
    #[error("fenced: broker {node_id} epoch {epoch} is no longer current")]
    Fenced { node_id: i32, epoch: i64 },
    /// A row holds something this version cannot read.
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

impl From<deadpool_postgres::PoolError> for DbError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => DbError::Postgres(e),
            other => DbError::Pool(other.to_string()),
        }
    }
}

/// A pooled client.
pub type Client = deadpool_postgres::Object;

/// The pool and how to open one more connection (LISTEN needs a connection of its own).
#[derive(Clone)]
pub struct Db {
    pool: Pool,
    config: Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("hosts", &self.config.get_hosts())
            .field("dbname", &self.config.get_dbname())
            .finish_non_exhaustive()
    }
}

/// Splits libpq's `sslrootcert` (which tokio-postgres does not know) out of a URL; the rest of
/// the query is kept byte for byte.
fn split_root_cert(url: &str) -> Result<(String, Option<String>), DbError> {
    let parsed = url::Url::parse(url).map_err(|e| DbError::Config(format!("{e}")))?;
    let Some(query) = parsed.query() else {
        return Ok((url.to_string(), None));
    };
    let mut root = None;
    let mut kept = Vec::new();
    for part in query.split('&') {
        match part.strip_prefix("sslrootcert=") {
            Some(value) => {
                root = url::form_urlencoded::parse(format!("v={value}").as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned());
            }
            None => kept.push(part),
        }
    }
    let base = url.split_once('?').map_or(url, |(base, _)| base);
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, root))
}

fn tls_config(root_cert: Option<&str>) -> Result<rustls::ClientConfig, DbError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A system root rustls cannot parse is skipped, as the system's own tools do.
        let _ = roots.add(cert);
    }
    if let Some(path) = root_cert {
        let pem =
            std::fs::read(path).map_err(|e| DbError::Config(format!("sslrootcert {path}: {e}")))?;
        let mut reader = std::io::BufReader::new(pem.as_slice());
        for cert in rustls_pemfile_certs(&mut reader, path)? {
            roots
                .add(cert)
                .map_err(|e| DbError::Config(format!("sslrootcert {path}: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| DbError::Config(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn rustls_pemfile_certs(
    reader: &mut dyn std::io::BufRead,
    path: &str,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, DbError> {
    use rustls::pki_types::pem::PemObject;
    let mut text = Vec::new();
    reader
        .read_to_end(&mut text)
        .map_err(|e| DbError::Config(format!("sslrootcert {path}: {e}")))?;
    rustls::pki_types::CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| DbError::Config(format!("sslrootcert {path}: {e}")))
}

impl Db {
    /// Opens a pool of at most `max_size` connections (lazily: this does not connect).
    pub fn new(url: &str, max_size: usize) -> Result<Db, DbError> {
        Db::with_limits(url, max_size, None)
    }

    /// [`Db::new`]; with `limit_ms`, every session of the pool gets PostgreSQL's
    /// `idle_in_transaction_session_timeout` and `lock_timeout` set to it. A broker paused in
    /// the middle of a commit (SIGSTOP, a frozen VM) would otherwise keep its transaction's row
    /// locks for as long as it is paused, and every broker taking its partitions over would wait
    /// behind them: with these, PostgreSQL ends the paused session (its locks go) and a commit
    /// waiting for a lock gives up (its batches are answered KAFKA_STORAGE_ERROR, and retried).
    pub fn with_limits(url: &str, max_size: usize, limit_ms: Option<u64>) -> Result<Db, DbError> {
        let (url, root_cert) = split_root_cert(url)?;
        let mut config = Config::from_str(&url).map_err(|e| DbError::Config(e.to_string()))?;
        if let Some(ms) = limit_ms {
            let ours = format!("-c idle_in_transaction_session_timeout={ms} -c lock_timeout={ms}");
            let options = match config.get_options() {
                Some(theirs) if !theirs.is_empty() => format!("{theirs} {ours}"),
                _ => ours,
            };
            config.options(&options);
        }
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let (pool, tls) = if config.get_ssl_mode() == SslMode::Disable {
            let manager = Manager::from_config(config.clone(), NoTls, manager_config);
            (Pool::builder(manager).max_size(max_size).build(), None)
        } else {
            let tls =
                tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(root_cert.as_deref())?);
            let manager = Manager::from_config(config.clone(), tls.clone(), manager_config);
            (Pool::builder(manager).max_size(max_size).build(), Some(tls))
        };
        let pool = pool.map_err(|e| DbError::Pool(e.to_string()))?;
        Ok(Db { pool, config, tls })
    }

    /// A connection from the pool.
    pub async fn client(&self) -> Result<Client, DbError> {
        Ok(self.pool.get().await?)
    }

    /// A connection of its own (not pooled) and the future that drives it, for LISTEN: the
    /// caller polls the connection for notifications.
    pub async fn dedicated(
        &self,
    ) -> Result<
        (
            tokio_postgres::Client,
            Box<
                dyn futures::Stream<
                        Item = Result<tokio_postgres::AsyncMessage, tokio_postgres::Error>,
                    > + Send
                    + Unpin,
            >,
        ),
        DbError,
    > {
        match &self.tls {
            None => {
                let (client, mut conn) = self.config.connect(NoTls).await?;
                let stream = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
                Ok((client, Box::new(stream)))
            }
            Some(tls) => {
                let (client, mut conn) = self.config.connect(tls.clone()).await?;
                let stream = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
                Ok((client, Box::new(stream)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslrootcert_is_taken_out_of_the_url() {
        let (url, root) =
            split_root_cert("postgres://u:p@h:5432/db?sslmode=require&sslrootcert=/x/ca.pem")
                .unwrap();
        assert_eq!(url, "postgres://u:p@h:5432/db?sslmode=require");
        assert_eq!(root.as_deref(), Some("/x/ca.pem"));
        let (url, root) = split_root_cert("postgres://h/db").unwrap();
        assert_eq!(url, "postgres://h/db");
        assert!(root.is_none());
    }

    #[test]
    fn session_limits_join_the_urls_options() {
        let db = Db::with_limits(
            "postgres://h/db?options=-c%20search_path%3Dx",
            2,
            Some(1500),
        )
        .unwrap();
        assert_eq!(
            db.config.get_options(),
            Some(
                "-c search_path=x -c idle_in_transaction_session_timeout=1500 -c lock_timeout=1500"
            )
        );
        let db = Db::new("postgres://h/db", 2).unwrap();
        assert_eq!(db.config.get_options(), None);
    }

    #[test]
    fn bad_urls_are_config_errors() {
        assert!(matches!(Db::new("not a url", 4), Err(DbError::Config(_))));
        assert!(matches!(
            Db::new("postgres://h/db?sslmode=sometimes", 4),
            Err(DbError::Config(_))
        ));
    }
}
