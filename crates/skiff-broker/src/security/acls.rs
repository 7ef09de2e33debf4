//! The ACLs and the authorizer in force: Kafka's StandardAuthorizer (`skiff-auth`) over the ACLs
//! kept in `data.dir/acls.json`, replaced crash-safely on every change (in cluster mode, the
//! cluster's `acls` document in PostgreSQL, which every broker mirrors). Denials are counted and
//! logged once per (principal, operation, resource) a minute.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use skiff_auth::acl::{
    AclBinding, AclBindingFilter, AclOperation, Authorizer, AuthorizerConfig, ResourceType,
};
use skiff_auth::principal::KafkaPrincipal;

use crate::cluster::documents::SharedDocuments;
use crate::config::AuthorizerSettings;

/// The ACL file, inside the data directory.
pub const ACLS_FILE: &str = "acls.json";

/// How often one (principal, operation, resource) denial is logged.
const DENIAL_LOG_INTERVAL_MS: i64 = 60_000;
/// Denials remembered for the log's rate limit; beyond that the memory is cleared.
const DENIALS_REMEMBERED: usize = 10_000;

#[derive(Serialize, Deserialize)]
struct StoredFile {
    version: u32,
    acls: Vec<AclBinding>,
}

type DenialKey = (String, AclOperation, ResourceType, String);

/// The ACLs, the authorizer that checks against them, and the denial log.
pub struct Acls {
    path: PathBuf,
    config: AuthorizerConfig,
    /// Cluster mode: where changes go.
    shared: Option<Arc<dyn SharedDocuments>>,
    authorizer: RwLock<Authorizer>,
    logged: Mutex<HashMap<DenialKey, i64>>,
    /// Checks denied since start.
    pub denials: AtomicU64,
}

impl Acls {
    /// Reads the ACLs of a data directory (none when the file does not exist yet); with
    /// `shared` (cluster mode), changes go to the cluster's document instead, and the ACLs come
    /// from it ([`Acls::mirror`]).
    pub fn open(
        data_dir: &Path,
        settings: &AuthorizerSettings,
        shared: Option<Arc<dyn SharedDocuments>>,
    ) -> Result<Acls> {
        let path = data_dir.join(ACLS_FILE);
        let config = AuthorizerConfig {
            super_users: settings.super_users.clone(),
            allow_everyone_if_no_acl_found: settings.allow_everyone_if_no_acl_found,
        };
        let authorizer = match (&shared, std::fs::read(&path)) {
            (Some(_), _) => Authorizer::new(config.clone()),
            (None, Ok(text)) => {
                decode(&config, &text).with_context(|| format!("{} is damaged", path.display()))?
            }
            (None, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                Authorizer::new(config.clone())
            }
            (None, Err(e)) => {
                return Err(e).with_context(|| format!("reading {}", path.display()));
            }
        };
        Ok(Acls {
            path,
            config,
            shared,
            authorizer: RwLock::new(authorizer),
            logged: Mutex::new(HashMap::new()),
            denials: AtomicU64::new(0),
        })
    }

    /// Cluster mode: the ACLs are now these (the cluster's document, as just read).
    pub fn mirror(&self, body: &[u8]) -> Result<()> {
        let authorizer = decode(&self.config, body)?;
        *self.authorizer.write().unwrap_or_else(|e| e.into_inner()) = authorizer;
        Ok(())
    }

    /// Whether `principal` connecting from `host` may do `operation` on the resource; a denial
    /// is counted and (rate-limited) logged with the client instance ID.
    pub fn authorize(
        &self,
        check: &Check<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let allowed =
            self.read()
                .authorize(check.principal, check.host, operation, resource_type, name);
        if !allowed {
            self.denied(check, operation, resource_type, name);
        }
        allowed
    }

    /// Whether the principal may do `operation` on some resource of the type (Kafka's
    /// `authorizeByResourceType`; no denial is logged, as it only chooses an error).
    pub fn authorize_any(
        &self,
        check: &Check<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        self.read().authorize_by_resource_type(
            check.principal,
            check.host,
            operation,
            resource_type,
        )
    }

    /// Whether the check would pass, without counting a denial (for `authorized_operations`).
    pub fn allows(
        &self,
        check: &Check<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.read()
            .authorize(check.principal, check.host, operation, resource_type, name)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Authorizer> {
        self.authorizer.read().unwrap_or_else(|e| e.into_inner())
    }

    fn denied(
        &self,
        check: &Check<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) {
        self.denials.fetch_add(1, Ordering::Relaxed);
        let now = crate::clock::now_ms();
        let key = (
            check.principal.to_string(),
            operation,
            resource_type,
            name.to_string(),
        );
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        if logged
            .get(&key)
            .is_some_and(|at| now - at < DENIAL_LOG_INTERVAL_MS)
        {
            return;
        }
        if logged.len() >= DENIALS_REMEMBERED {
            logged.clear();
        }
        logged.insert(key, now);
        tracing::info!(
            principal = %check.principal,
            host = check.host,
            client_instance_id = check.instance_id.map(|id| id.to_string()).as_deref().unwrap_or("none"),
            operation = operation.name(),
            resource_type = resource_type.name(),
            resource = name,
            "authorization denied (logged once a minute per principal, operation and resource)"
        );
    }

    /// Adds ACLs (each already validated) and saves; a failed save changes nothing.
    pub fn create(&self, bindings: Vec<AclBinding>) -> Result<()> {
        self.change(|authorizer| {
            for binding in bindings {
                authorizer.add(binding);
            }
        })
    }

    /// Removes the ACLs each filter matches and saves: what each filter removed.
    pub fn delete(&self, filters: &[AclBindingFilter]) -> Result<Vec<Vec<AclBinding>>> {
        self.change(|authorizer| {
            filters
                .iter()
                .map(|filter| authorizer.remove_matching(filter))
                .collect()
        })
    }

    pub fn describe(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.read().describe(filter)
    }

    fn change<R>(&self, change: impl FnOnce(&mut Authorizer) -> R) -> Result<R> {
        let mut authorizer = self.authorizer.write().unwrap_or_else(|e| e.into_inner());
        let Some(shared) = &self.shared else {
            let mut changed = authorizer.clone();
            let result = change(&mut changed);
            crate::node_file::write_atomically(&self.path, &encode(&changed)?)?;
            *authorizer = changed;
            return Ok(result);
        };
        // Cluster mode: the change applies to the cluster's current ACLs, under their lock.
        let mut change = Some(change);
        let mut outcome = None;
        shared.update(crate::cluster::documents::ACLS, &mut |current| {
            let mut changed = match current {
                Some(body) => decode(&self.config, body)?,
                None => Authorizer::new(self.config.clone()),
            };
            let change = change
                .take()
                .ok_or_else(|| anyhow::anyhow!("an ACL change ran twice"))?;
            let result = change(&mut changed);
            let body = encode(&changed)?;
            outcome = Some((result, changed));
            Ok(body)
        })?;
        let (result, changed) =
            outcome.ok_or_else(|| anyhow::anyhow!("the ACL change did not run"))?;
        *authorizer = changed;
        Ok(result)
    }
}

/// The ACL file's (and the cluster document's) bytes.
fn encode(authorizer: &Authorizer) -> Result<Vec<u8>> {
    let file = StoredFile {
        version: 1,
        acls: authorizer.bindings().cloned().collect(),
    };
    Ok(serde_json::to_vec_pretty(&file)?)
}

/// An authorizer with `config` and the ACLs of a file's (or the cluster document's) bytes.
fn decode(config: &AuthorizerConfig, bytes: &[u8]) -> Result<Authorizer> {
    let file: StoredFile = serde_json::from_slice(bytes)?;
    if file.version != 1 {
        bail!("unknown version {}", file.version);
    }
    let mut authorizer = Authorizer::new(config.clone());
    for binding in file.acls {
        binding.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        authorizer.add(binding);
    }
    Ok(authorizer)
}

/// Who asks, from where: what an authorization check needs of the request.
pub struct Check<'a> {
    pub principal: &'a KafkaPrincipal,
    /// The client's IP address as text.
    pub host: &'a str,
    pub instance_id: Option<skiff_protocol::Uuid>,
}
