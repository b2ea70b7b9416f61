//! Test certificates: a CA made in the test, and a server certificate it signed for
//! `localhost` and `127.0.0.1`, written as PEM files; and a second CA and key that belong to
//! nothing of these (for refusals).
//!
//! Made with the `rcgen` crate (a dev-dependency, on the `ring` provider the workspace already
//! builds) rather than the `openssl` command: nothing outside Cargo has to be installed, and the
//! files are the same on every machine whatever its OpenSSL version.

#![allow(dead_code)] // each test crate uses a different part

use std::path::{Path, PathBuf};

/// PEM files in a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    /// The CA's certificate (what clients are given with --tls-ca).
    pub ca: PathBuf,
    /// The server certificate (for `localhost` and `127.0.0.1`), signed by the CA.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// Another CA's certificate: trusting it is not trusting `ca`.
    pub other_ca: PathBuf,
    /// Another key: it does not match `cert`.
    pub other_key: PathBuf,
}

impl Pki {
    pub fn new() -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = |name: &str| {
            let key = KeyPair::generate().expect("CA key");
            let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, name);
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            (p.self_signed(&key).expect("self-signed CA"), key)
        };
        let (ca_cert, ca_key) = ca("diffuse test CA");
        let (other_cert, other_key) = ca("another CA");
        let key = KeyPair::generate().expect("server key");
        let mut p = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("server params");
        p.distinguished_name.push(DnType::CommonName, "localhost");
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = p.signed_by(&key, &ca_cert, &ca_key).expect("signed");
        let write = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write PEM");
            path
        };
        let pki = Pki {
            ca: write("ca.pem", ca_cert.pem()),
            cert: write("cert.pem", cert.pem()),
            key: write("key.pem", key.serialize_pem()),
            other_ca: write("other-ca.pem", other_cert.pem()),
            other_key: write("other-key.pem", other_key.serialize_pem()),
            dir,
        };
        // As an operator would keep them: a key readable by its owner only.
        use std::os::unix::fs::PermissionsExt;
        for k in [&pki.key, &pki.other_key] {
            std::fs::set_permissions(k, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
        pki
    }

    /// A line of the key's base64 body: no output may ever show it.
    pub fn key_material(&self) -> String {
        let text = std::fs::read_to_string(&self.key).expect("key");
        text.lines().nth(1).expect("a body line").to_string()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The flags of a server with this certificate, trusting this CA.
    pub fn server_flags(&self) -> Vec<String> {
        let s = |p: &Path| p.display().to_string();
        vec![
            "--tls-cert".into(),
            s(&self.cert),
            "--tls-key".into(),
            s(&self.key),
            "--tls-ca".into(),
            s(&self.ca),
        ]
    }

    /// A blocking HTTP client trusting this CA.
    pub fn http(&self) -> reqwest::blocking::Client {
        let pem = std::fs::read(&self.ca).expect("CA");
        reqwest::blocking::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(30))
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("CA PEM"))
            .build()
            .expect("HTTP client")
    }
}
