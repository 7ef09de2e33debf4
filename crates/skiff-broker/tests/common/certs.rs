//! Test certificates made with rcgen: a CA, a server certificate for 127.0.0.1, client
//! certificates with a chosen subject, written as PEM files the broker reads; and a TLS client.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A certificate authority that signs test certificates.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate with its key, both PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Issued {
    /// The key then the certificate in one file (Kafka's PEM keystore).
    pub fn write_keystore(&self, path: &Path) {
        std::fs::write(path, format!("{}{}", self.key_pem, self.cert_pem)).expect("write keystore");
    }
}

impl TestCa {
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

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self) -> Issued {
        self.issue(&[("CN", "skiff-test-broker")], &["127.0.0.1", "localhost"])
    }

    /// A certificate whose subject has these (type, value) parts, most general first as the
    /// certificate encodes them (`[("O", "Acme"), ("CN", "alice")]` reads `CN=alice,O=Acme`).
    pub fn client(&self, subject: &[(&str, &str)]) -> Issued {
        self.issue(subject, &[])
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

    pub fn write(&self, path: &Path) {
        std::fs::write(path, &self.pem).expect("write CA");
    }
}

/// Files for a TLS listener in `dir`: `broker.pem` (key + chain) and `ca.pem`.
pub fn listener_files(dir: &Path, ca: &TestCa) -> (PathBuf, PathBuf) {
    let keystore = dir.join("broker.pem");
    let truststore = dir.join("ca.pem");
    ca.server().write_keystore(&keystore);
    ca.write(&truststore);
    (keystore, truststore)
}

/// A rustls client configuration trusting `ca_pem`, presenting `identity` when given.
pub fn client_config(ca_pem: &str, identity: Option<&Issued>) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
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
            let chain = CertificateDer::pem_slice_iter(issued.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("chain");
            let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).expect("key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client cert")
        }
    };
    Arc::new(config)
}

/// Connects over TLS; the error is the handshake's.
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
    use rustls::pki_types::pem::PemObject;
    let chain = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("chain");
    let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server certificate");
    Arc::new(config)
}
