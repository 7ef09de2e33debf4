//! Test certificates made with rcgen: a CA, server certificates (for 127.0.0.1 and localhost,
//! or chosen names), client certificates with a chosen subject, written as PEM files the broker
//! and the clients read; and rustls client and server configurations built from them.
//!
//! Test helpers: every failure panics.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The names [`TestCa::server`] certifies.
pub const LOOPBACK_NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// The common name of the server certificates.
const SERVER_CN: &str = "skiff-test-broker";

/// A certificate authority that signs test certificates.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub pem: String,
}

/// A certificate with its key, both PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Issued {
    /// The key then the certificate in one file (Kafka's PEM keystore, a broker's
    /// `ssl.keystore.location`).
    pub fn write_keystore(&self, path: &Path) {
        std::fs::write(path, format!("{}{}", self.key_pem, self.cert_pem)).expect("write keystore");
    }

    /// The certificate and the key in two files (a client's `ssl.certificate.location` and
    /// `ssl.key.location`), in `dir` as `<name>.crt` and `<name>.key`.
    pub fn write_pair(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write certificate");
        std::fs::write(&key, &self.key_pem).expect("write key");
        (cert, key)
    }
}

impl TestCa {
    /// A new self-signed CA whose subject is `CN=<name>`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("self-signed");
        TestCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost ([`LOOPBACK_NAMES`]).
    pub fn server(&self) -> Issued {
        self.server_for(&LOOPBACK_NAMES)
    }

    /// A server certificate valid for these host names and IP addresses.
    pub fn server_for(&self, names: &[&str]) -> Issued {
        self.issue(&[("CN", SERVER_CN)], names)
    }

    /// A client certificate whose subject has these (type, value) parts, most general first as
    /// the certificate encodes them (`[("O", "Acme"), ("CN", "alice")]` reads
    /// `CN=alice,O=Acme`). Types: CN, O, OU, C, L, ST.
    pub fn client(&self, subject: &[(&str, &str)]) -> Issued {
        self.issue(subject, &[])
    }

    /// A client certificate whose subject is `CN=<name>`.
    pub fn client_cn(&self, name: &str) -> Issued {
        self.client(&[("CN", name)])
    }

    fn issue(&self, subject: &[(&str, &str)], names: &[&str]) -> Issued {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name = DistinguishedName::new();
        for (kind, value) in subject {
            let kind = match *kind {
                "CN" => DnType::CommonName,
                "O" => DnType::OrganizationName,
                "OU" => DnType::OrganizationalUnitName,
                "C" => DnType::CountryName,
                "L" => DnType::LocalityName,
                "ST" => DnType::StateOrProvinceName,
                other => panic!("no DN type {other} in the test helper"),
            };
            params.distinguished_name.push(kind, *value);
        }
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Writes the CA certificate to `path` (a truststore).
    pub fn write(&self, path: &Path) {
        std::fs::write(path, &self.pem).expect("write CA");
    }
}

/// Files for a TLS listener in `dir`: `broker.pem` (key + certificate for 127.0.0.1 and
/// localhost) and `ca.pem`; returns (keystore, truststore).
pub fn listener_files(dir: &Path, ca: &TestCa) -> (PathBuf, PathBuf) {
    let keystore = dir.join("broker.pem");
    let truststore = dir.join("ca.pem");
    ca.server().write_keystore(&keystore);
    ca.write(&truststore);
    (keystore, truststore)
}

/// A rustls client configuration trusting `ca_pem`, presenting `identity` when given.
pub fn client_config(ca_pem: &str, identity: Option<&Issued>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA pem")).expect("add CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some(issued) => {
            let (chain, key) = chain_and_key(issued);
            builder
                .with_client_auth_cert(chain, key)
                .expect("client cert")
        }
    };
    Arc::new(config)
}

/// Connects to `addr` over TLS, checking the server's certificate for 127.0.0.1; the error is
/// the connection's or the handshake's.
pub async fn connect_tls(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").expect("server name");
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
}

/// A rustls server configuration presenting `identity` (for test servers the broker calls).
pub fn server_config(identity: &Issued) -> Arc<rustls::ServerConfig> {
    let (chain, key) = chain_and_key(identity);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server certificate");
    Arc::new(config)
}

fn chain_and_key(issued: &Issued) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let chain = CertificateDer::pem_slice_iter(issued.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("chain");
    let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).expect("key");
    (chain, key)
}
