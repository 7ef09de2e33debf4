//! TLS on a listener: a rustls server configuration built from the listener's PEM files, rebuilt
//! when those files change (no restart), and the principal a client certificate maps to.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection, SupportedProtocolVersion};
use skiff_auth::principal::{KafkaPrincipal, SslPrincipalMapper};

use crate::config::{ClientAuth, TlsProtocol, TlsSettings};

/// A listener's TLS: the configuration in force and what it was built from.
pub struct TlsServer {
    settings: TlsSettings,
    mapper: SslPrincipalMapper,
    current: RwLock<Loaded>,
}

struct Loaded {
    config: Arc<ServerConfig>,
    stamp: Vec<FileStamp>,
}

/// What tells a changed file apart: its size, modification time and inode (a replaced file or a
/// moved symlink, as Kubernetes secrets are updated, changes the inode).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

impl TlsServer {
    /// Reads the key, certificate chain and truststore; any problem is an error naming the file.
    pub fn load(settings: &TlsSettings) -> Result<TlsServer> {
        let mapper = SslPrincipalMapper::parse(&settings.principal_mapping_rules)
            .context("ssl.principal.mapping.rules")?;
        let stamp = stamps(settings);
        let config = Arc::new(build(settings)?);
        Ok(TlsServer {
            settings: settings.clone(),
            mapper,
            current: RwLock::new(Loaded { config, stamp }),
        })
    }

    /// The configuration new connections handshake with.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        tokio_rustls::TlsAcceptor::from(Arc::clone(&current.config))
    }

    /// Rebuilds the configuration if a file changed since it was read: `Ok(true)` when the new
    /// one is in force. A file that fails to load leaves the previous configuration in force
    /// (and is tried again at the next change).
    pub fn reload_if_changed(&self) -> Result<bool> {
        let stamp = stamps(&self.settings);
        if self.current.read().unwrap_or_else(|e| e.into_inner()).stamp == stamp {
            return Ok(false);
        }
        let built = build(&self.settings);
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        current.stamp = stamp;
        current.config = Arc::new(built?);
        Ok(true)
    }

    /// The principal of a client certificate on an SSL listener: `User:` and the subject DN as
    /// `ssl.principal.mapping.rules` maps it; `User:ANONYMOUS` without a certificate.
    pub fn principal(&self, connection: &ServerConnection) -> Result<KafkaPrincipal> {
        let Some(certificate) = connection.peer_certificates().and_then(|c| c.first()) else {
            return Ok(KafkaPrincipal::anonymous());
        };
        let dn = skiff_auth::principal::subject_dn(certificate.as_ref())
            .context("reading the client certificate's subject")?;
        let name = self.mapper.map(&dn)?;
        Ok(KafkaPrincipal::user(&name))
    }

    /// The files this listener reads (for the reload watcher's log lines).
    pub fn files(&self) -> Vec<PathBuf> {
        std::iter::once(self.settings.keystore.clone())
            .chain(self.settings.truststore.clone())
            .collect()
    }
}

fn stamps(settings: &TlsSettings) -> Vec<FileStamp> {
    std::iter::once(&settings.keystore)
        .chain(&settings.truststore)
        .map(|path| stamp(path))
        .collect()
}

fn stamp(path: &Path) -> FileStamp {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(meta) => FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode: meta.ino(),
        },
        Err(_) => FileStamp {
            len: 0,
            modified: None,
            inode: 0,
        },
    }
}

/// Builds the rustls configuration a listener's settings describe.
fn build(settings: &TlsSettings) -> Result<ServerConfig> {
    let provider = Arc::new(provider(&settings.cipher_suites)?);
    let versions: Vec<&'static SupportedProtocolVersion> = settings
        .protocols
        .iter()
        .map(|p| match p {
            TlsProtocol::V12 => &rustls::version::TLS12,
            TlsProtocol::V13 => &rustls::version::TLS13,
        })
        .collect();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .context("ssl.enabled.protocols and ssl.cipher.suites have nothing in common")?;
    let builder = match (settings.client_auth, &settings.truststore) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (_, None) => bail!("ssl.client.auth needs ssl.truststore.location"),
        (auth, Some(truststore)) => {
            let roots = Arc::new(read_roots(truststore)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .context("building the client certificate verifier")?,
            )
        }
    };
    let (chain, key) = read_keystore(&settings.keystore)?;
    let mut config = builder
        .with_single_cert(chain, key)
        .with_context(|| format!("{}: key and certificate", settings.keystore.display()))?;
    // The server's order of cipher suites decides (as Java's servers do): `ssl.cipher.suites`
    // as written, or AES-128-GCM first by default.
    config.ignore_client_order = true;
    Ok(config)
}

/// rustls' aws-lc-rs provider, with only the named cipher suites when `ssl.cipher.suites` is
/// set. IANA names are used (`TLS_AES_128_GCM_SHA256`, `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`).
/// aws-lc-rs rather than ring (which the clients and outgoing HTTPS use): its AES-GCM on full
/// 16 KiB records costs about a third less on CPUs with AVX-512 (VAES), which took the broker's
/// CPU per MB moved over SASL_SSL down by about a tenth (README, "TLS + SASL").
fn provider(cipher_suites: &[String]) -> Result<CryptoProvider> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if cipher_suites.is_empty() {
        // The server picks by its own order: AES-128-GCM first (as strong as needed, and a
        // quarter cheaper than AES-256-GCM), the rest as rustls orders them.
        provider
            .cipher_suites
            .sort_by_key(|suite| !iana_name(suite).contains("AES_128_GCM"));
        return Ok(provider);
    }
    let available = std::mem::take(&mut provider.cipher_suites);
    for name in cipher_suites {
        let suite = available
            .iter()
            .find(|s| iana_name(s).eq_ignore_ascii_case(name))
            .with_context(|| {
                let names: Vec<String> = available.iter().map(iana_name).collect();
                format!(
                    "ssl.cipher.suites: {name:?} is not supported (supported: {})",
                    names.join(", ")
                )
            })?;
        provider.cipher_suites.push(*suite);
    }
    Ok(provider)
}

/// A suite's IANA name: rustls spells TLS 1.3 suites `TLS13_...` where IANA says `TLS_...`.
fn iana_name(suite: &rustls::SupportedCipherSuite) -> String {
    let name = format!("{:?}", suite.suite());
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

/// The private key and certificate chain of a PEM keystore (Kafka's `ssl.keystore.type=PEM`).
fn read_keystore(path: &Path) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: reading certificates", path.display()))?;
    if chain.is_empty() {
        bail!("{}: no certificate in the file", path.display());
    }
    let key = PrivateKeyDer::from_pem_slice(&pem).with_context(|| {
        format!(
            "{}: no private key (PKCS#8, PKCS#1 or SEC1, not encrypted) in the file",
            path.display()
        )
    })?;
    Ok((chain, key))
}

/// The CA certificates of a PEM truststore.
pub(crate) fn read_roots(path: &Path) -> Result<RootCertStore> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        let certificate =
            certificate.with_context(|| format!("{}: reading certificates", path.display()))?;
        roots
            .add(certificate)
            .with_context(|| format!("{}: a CA certificate", path.display()))?;
    }
    if roots.is_empty() {
        bail!("{}: no certificate in the file", path.display());
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_suites_are_chosen_by_iana_name_and_unknown_ones_refused() {
        let all = provider(&[]).expect("defaults");
        assert!(all.cipher_suites.len() > 2);
        let chosen = provider(&[
            "TLS_AES_128_GCM_SHA256".to_string(),
            "tls_ecdhe_rsa_with_aes_256_gcm_sha384".to_string(),
        ])
        .expect("known names");
        let names: Vec<String> = chosen.cipher_suites.iter().map(iana_name).collect();
        assert_eq!(
            names,
            [
                "TLS_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
            ]
        );
        let error = provider(&["TLS_RSA_WITH_RC4_128_MD5".to_string()]).expect_err("unknown");
        let message = format!("{error:#}");
        assert!(
            message.contains("not supported") && message.contains("TLS_AES_256_GCM_SHA384"),
            "{message}"
        );
    }
}
