//! TLS for broker connections: the rustls client configuration built once per client from the
//! PEM files of [`TlsConfig`], and the handshake on a new TCP connection.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::error::{Error, Result};
use crate::security::{EndpointIdentification, TlsConfig};

/// A client's TLS set-up, shared by its connections (cheap to clone).
#[derive(Clone)]
pub(crate) struct TlsClient {
    connector: TlsConnector,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsClient").finish_non_exhaustive()
    }
}

impl TlsClient {
    /// Reads the CA file (or the system's CAs), and the client certificate and key when given;
    /// a file that does not load is a configuration error naming it.
    pub(crate) fn new(config: &TlsConfig) -> Result<TlsClient> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = match &config.ca_location {
            Some(path) => read_roots(path)?,
            None => system_roots()?,
        };
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?;
        let builder = match config.endpoint_identification {
            EndpointIdentification::Https => builder.with_root_certificates(roots),
            EndpointIdentification::None => {
                let verifier = ChainOnlyVerifier {
                    roots,
                    algorithms: provider.signature_verification_algorithms,
                };
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier))
            }
        };
        let tls = match (&config.certificate_location, &config.key_location) {
            (Some(certificate), Some(key)) => builder
                .with_client_auth_cert(read_chain(certificate)?, read_key(key)?)
                .map_err(|e| {
                    Error::Config(format!(
                        "{} and {}: {e}",
                        certificate.display(),
                        key.display()
                    ))
                })?,
            _ => builder.with_no_client_auth(),
        };
        Ok(TlsClient {
            connector: TlsConnector::from(Arc::new(tls)),
        })
    }

    /// The TLS handshake on `tcp`, checking the certificate against `addr`'s host. A refused
    /// handshake is [`Error::Authentication`].
    pub(crate) async fn connect(
        &self,
        addr: &str,
        tcp: TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = server_name(addr)?;
        self.connector
            .connect(name, tcp)
            .await
            .map_err(|e| Error::Authentication {
                broker: addr.to_string(),
                reason: format!("TLS handshake failed: {e}"),
            })
    }
}

/// The host part of `host:port` (`[v6]:port` too) as a TLS server name: a DNS name or an IP
/// address, which the certificate must then name.
fn server_name(addr: &str) -> Result<ServerName<'static>> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .map_err(|e| Error::Config(format!("{addr}: not a TLS server name: {e}")))
}

/// Checks that the broker's certificate chains to a trusted CA and is in date, whatever host it
/// names (`ssl.endpoint.identification.algorithm = none`).
#[derive(Debug)]
struct ChainOnlyVerifier {
    roots: RootCertStore,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let certificate = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &certificate,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, certificate, signature, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, certificate, signature, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

fn read_file(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| Error::Config(format!("reading the {what} {}: {e}", path.display())))
}

/// The CA certificates of a PEM file.
fn read_roots(path: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for certificate in read_chain(path)? {
        roots
            .add(certificate)
            .map_err(|e| Error::Config(format!("{}: a CA certificate: {e}", path.display())))?;
    }
    Ok(roots)
}

/// The operating system's CA certificates (librdkafka's default when `ssl.ca.location` is unset).
fn system_roots() -> Result<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(Error::Config(
            "TLS: no CA certificate found on this system; set ssl.ca.location".into(),
        ));
    }
    Ok(roots)
}

/// The certificates of a PEM file, at least one.
fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let pem = read_file(path, "certificate file")?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Config(format!("{}: reading certificates: {e}", path.display())))?;
    if chain.is_empty() {
        return Err(Error::Config(format!(
            "{}: no certificate in the file",
            path.display()
        )));
    }
    Ok(chain)
}

/// The private key of a PEM file.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let pem = read_file(path, "key file")?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        Error::Config(format!(
            "{}: no private key (PKCS#8, PKCS#1 or SEC1, not encrypted): {e}",
            path.display()
        ))
    })
}
