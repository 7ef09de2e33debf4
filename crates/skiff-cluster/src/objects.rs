//! The object store of a cluster, from `cluster.objects`: `s3://bucket/prefix` (any
//! S3-compatible server: `s3.endpoint`, `s3.region`, credentials from the usual AWS environment
//! variables) or `file:///shared/dir` (one host, or a shared filesystem).
//!
//! Objects are write-once: a broker uploads one per commit interval under a fresh key
//! (`<prefix>/objects/<node>-<epoch>-<uuid>`), readers fetch byte ranges, and an object is
//! deleted only when no batch refers to it any more.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use thiserror::Error;

/// An object store failure.
#[derive(Debug, Error)]
pub enum ObjectsError {
    #[error("cluster.objects: {0}")]
    Config(String),
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
}

/// Where and how to reach an S3-compatible server.
///
/// Credentials come, in this order, from [`S3Options::credentials`], the AWS environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, and the container and
/// instance credential providers `object_store` knows), then the shared credentials file
/// (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`; profile `AWS_PROFILE`, else
/// `default`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Options {
    /// `s3.endpoint`: e.g. `http://127.0.0.1:9000` for a server that is not AWS.
    pub endpoint: Option<String>,
    /// `s3.region` (default: `AWS_REGION`, else `us-east-1`).
    pub region: Option<String>,
    /// Explicit credentials, before any other source.
    pub credentials: Option<Credentials>,
}

/// An access key.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// The credentials of `profile` in an AWS shared credentials file (INI: `[profile]` sections of
/// `key = value` lines).
pub fn parse_credentials_file(text: &str, profile: &str) -> Option<Credentials> {
    let mut in_profile = false;
    let mut id = None;
    let mut secret = None;
    let mut token = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_profile = name.trim() == profile;
            continue;
        }
        if !in_profile {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim().to_string();
        match k.trim() {
            "aws_access_key_id" => id = Some(v),
            "aws_secret_access_key" => secret = Some(v),
            "aws_session_token" => token = Some(v),
            _ => {}
        }
    }
    Some(Credentials {
        access_key_id: id?,
        secret_access_key: secret?,
        session_token: token,
    })
}

fn credentials_from_file() -> Option<Credentials> {
    let path = match std::env::var_os("AWS_SHARED_CREDENTIALS_FILE") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::path::PathBuf::from(std::env::var_os("HOME")?).join(".aws/credentials"),
    };
    let text = std::fs::read_to_string(path).ok()?;
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    parse_credentials_file(&text, &profile)
}

/// An object listed by the orphan sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub last_modified_ms: i64,
}

/// The store and the prefix all of this cluster's objects live under.
#[derive(Clone)]
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    url: String,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects").field("url", &self.url).finish()
    }
}

impl Objects {
    /// Opens `cluster.objects`. A `file://` directory is created when missing.
    pub fn open(url: &str, s3: &S3Options) -> Result<Objects, ObjectsError> {
        let parsed =
            url::Url::parse(url).map_err(|e| ObjectsError::Config(format!("{url}: {e}")))?;
        match parsed.scheme() {
            "s3" => {
                let bucket = parsed
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| ObjectsError::Config(format!("{url}: no bucket")))?;
                let mut builder =
                    object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                if let Some(region) = &s3.region {
                    builder = builder.with_region(region);
                } else if std::env::var_os("AWS_REGION").is_none()
                    && std::env::var_os("AWS_DEFAULT_REGION").is_none()
                {
                    builder = builder.with_region("us-east-1");
                }
                let explicit = s3.credentials.clone().or_else(|| {
                    std::env::var_os("AWS_ACCESS_KEY_ID")
                        .is_none()
                        .then(credentials_from_file)
                        .flatten()
                });
                if let Some(c) = explicit {
                    builder = builder
                        .with_access_key_id(c.access_key_id)
                        .with_secret_access_key(c.secret_access_key);
                    if let Some(token) = c.session_token {
                        builder = builder.with_token(token);
                    }
                }
                if let Some(endpoint) = &s3.endpoint {
                    builder = builder
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"))
                        .with_virtual_hosted_style_request(false);
                }
                let store = builder.build()?;
                Ok(Objects {
                    store: Arc::new(store),
                    prefix: parsed.path().trim_matches('/').to_string(),
                    url: url.to_string(),
                })
            }
            "file" => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| ObjectsError::Config(format!("{url}: not a local path")))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| ObjectsError::Config(format!("{}: {e}", dir.display())))?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(&dir)?;
                Ok(Objects {
                    store: Arc::new(store),
                    prefix: String::new(),
                    url: url.to_string(),
                })
            }
            other => Err(ObjectsError::Config(format!(
                "{url}: scheme {other}:// is not supported (s3:// or file://)"
            ))),
        }
    }

    fn under_prefix(&self, rest: &str) -> String {
        if self.prefix.is_empty() {
            rest.to_string()
        } else {
            format!("{}/{rest}", self.prefix)
        }
    }

    /// A fresh key for an object uploaded by broker `node_id` in registration `epoch`.
    pub fn new_key(&self, node_id: i32, epoch: i64) -> String {
        self.under_prefix(&format!(
            "objects/{node_id}-{epoch}-{}",
            uuid::Uuid::new_v4()
        ))
    }

    /// Uploads a whole object.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), ObjectsError> {
        self.store
            .put(&Path::from(key), PutPayload::from_bytes(bytes))
            .await?;
        Ok(())
    }

    /// Reads a byte range of an object.
    pub async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, ObjectsError> {
        Ok(self.store.get_range(&Path::from(key), range).await?)
    }

    /// Deletes an object; one already gone is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), ObjectsError> {
        match self.store.delete(&Path::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every object under this cluster's `objects/` prefix, with when it was written.
    pub async fn list(&self) -> Result<Vec<Listed>, ObjectsError> {
        let prefix = Path::from(self.under_prefix("objects"));
        let listed: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        Ok(listed
            .into_iter()
            .map(|m| Listed {
                key: m.location.to_string(),
                last_modified_ms: m.last_modified.timestamp_millis(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_credentials_file_by_profile() {
        let text = "[default]\naws_access_key_id = A\naws_secret_access_key=B\n\n# c\n[prod]\n\
                    aws_access_key_id = C\naws_secret_access_key = D\naws_session_token = E\n";
        let d = parse_credentials_file(text, "default").unwrap();
        assert_eq!(
            (d.access_key_id.as_str(), d.secret_access_key.as_str()),
            ("A", "B")
        );
        assert_eq!(d.session_token, None);
        let p = parse_credentials_file(text, "prod").unwrap();
        assert_eq!(p.session_token.as_deref(), Some("E"));
        assert!(parse_credentials_file(text, "other").is_none());
        assert!(parse_credentials_file("[default]\naws_access_key_id=A\n", "default").is_none());
        assert!(!format!("{d:?}").contains('B'), "no secret in Debug");
    }

    #[test]
    fn unsupported_urls_are_config_errors() {
        for url in ["gs://b/p", "s3:///nobucket", "nonsense"] {
            assert!(
                matches!(
                    Objects::open(url, &S3Options::default()),
                    Err(ObjectsError::Config(_))
                ),
                "{url}"
            );
        }
    }
}
