//! Test certificates made with rcgen (as skiff-broker's tests make them): a CA, server
//! certificates for chosen names, client certificates with a chosen common name, as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
};

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
    /// The key then the certificate in one file (a broker's PEM keystore).
    pub fn write_keystore(&self, path: &Path) {
        std::fs::write(path, format!("{}{}", self.key_pem, self.cert_pem)).expect("write keystore");
    }

    /// The certificate and the key in two files (a client's `ssl.certificate.location` and
    /// `ssl.key.location`), in `dir` under `name`.
    pub fn write_pair(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write certificate");
        std::fs::write(&key, &self.key_pem).expect("write key");
        (cert, key)
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

    /// A server certificate valid for these host names and IP addresses.
    pub fn server(&self, names: &[&str]) -> Issued {
        self.issue("skiff-test-broker", names)
    }

    /// A client certificate whose subject is `CN=<name>`.
    pub fn client(&self, name: &str) -> Issued {
        self.issue(name, &[])
    }

    fn issue(&self, common_name: &str, names: &[&str]) -> Issued {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Writes the CA certificate to `path`.
    pub fn write(&self, path: &Path) {
        std::fs::write(path, &self.pem).expect("write CA");
    }
}
