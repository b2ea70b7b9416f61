//! Loading certificates and keys: what is accepted, and what is refused with the file named.
//! [`Pki`] makes a CA and certificates for the tests of this crate (`rcgen`, with `ring`).

use super::{describe, server_config, tls_failure, TlsError, Trust};
use std::path::{Path, PathBuf};

/// A test CA and a server certificate it signed for `localhost` and `127.0.0.1`, as PEM files
/// in a temporary directory; and a second CA that signed nothing of these.
pub(crate) struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub other_ca: PathBuf,
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
            let cert = p.self_signed(&key).expect("self-signed CA");
            (cert, key)
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
        Pki {
            ca: write("ca.pem", ca_cert.pem()),
            cert: write("cert.pem", cert.pem()),
            key: write("key.pem", key.serialize_pem()),
            other_ca: write("other-ca.pem", other_cert.pem()),
            other_key: write("other-key.pem", other_key.serialize_pem()),
            dir,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// The error and its causes on one line, as a user sees it.
fn err(r: Result<impl Sized, TlsError>) -> String {
    match r {
        Ok(_) => panic!("accepted"),
        Err(e) => describe(&e),
    }
}

fn shows(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn a_matching_certificate_and_key_load_and_a_ca_bundle_is_trusted() {
    let pki = Pki::new();
    let config = server_config(&pki.cert, &pki.key).expect("loads");
    assert_eq!(config.alpn_protocols, [b"http/1.1".to_vec()]);
    let trust = Trust::with_ca(&pki.ca).expect("CA loads");
    assert_eq!(trust.ca_file(), Some(pki.ca.as_path()));
    // Two CAs in one bundle.
    let bundle = pki.path("bundle.pem");
    let both = std::fs::read_to_string(&pki.ca).unwrap()
        + &std::fs::read_to_string(&pki.other_ca).unwrap();
    std::fs::write(&bundle, both).unwrap();
    Trust::with_ca(&bundle).expect("a bundle loads");
    assert!(Trust::from_option(None).unwrap().ca_file().is_none());
}

#[test]
fn missing_empty_and_mismatched_files_are_refused_naming_the_file() {
    let pki = Pki::new();
    let missing = pki.path("nope.pem");
    let e = err(server_config(&missing, &pki.key));
    assert!(
        e.contains(&format!(
            "cannot read the TLS certificate {}",
            shows(&missing)
        )),
        "{e}"
    );
    // What the operating system said is kept as the cause.
    assert!(e.contains("No such file or directory"), "{e}");
    assert!(matches!(
        server_config(&missing, &pki.key),
        Err(TlsError::Read {
            what: "TLS certificate",
            ..
        })
    ));
    let e = err(server_config(&pki.cert, &missing));
    assert!(
        e.contains(&format!("cannot read the TLS key {}", shows(&missing))),
        "{e}"
    );
    let e = err(Trust::with_ca(&missing));
    assert!(
        e.contains(&format!("cannot read the TLS CA file {}", shows(&missing))),
        "{e}"
    );

    // The key where the certificate belongs, and the other way round.
    let e = err(server_config(&pki.key, &pki.key));
    assert!(
        e.contains(&format!(
            "the TLS certificate {} holds no certificate",
            shows(&pki.key)
        )),
        "{e}"
    );
    let e = err(server_config(&pki.cert, &pki.cert));
    assert!(
        e.contains(&format!(
            "the TLS key {} holds no private key",
            shows(&pki.cert)
        )),
        "{e}"
    );
    let empty = pki.path("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let e = err(Trust::with_ca(&empty));
    assert!(e.contains("holds no certificate"), "{e}");

    // A key of another certificate.
    let e = err(server_config(&pki.cert, &pki.other_key));
    assert_eq!(
        e,
        format!(
            "the TLS key {} does not match the certificate {}",
            shows(&pki.other_key),
            shows(&pki.cert)
        )
    );

    // A damaged key: refused without showing any of it.
    let key = std::fs::read_to_string(&pki.key).unwrap();
    let body: String = key.lines().nth(1).unwrap().to_string();
    let broken = pki.path("broken-key.pem");
    std::fs::write(&broken, key.replace(&body, &format!("{body}!!"))).unwrap();
    let e = err(server_config(&pki.cert, &broken));
    assert!(
        e.contains(&format!(
            "the TLS key {} is not a valid PEM private key",
            shows(&broken)
        )),
        "{e}"
    );
    assert!(
        !e.contains(&body[..16]),
        "the error shows key material: {e}"
    );
}

#[test]
fn an_error_without_tls_in_it_is_not_a_tls_failure() {
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    assert_eq!(tls_failure(&io), None);
    let wrapped = std::io::Error::other(rustls::Error::InvalidCertificate(
        rustls::CertificateError::UnknownIssuer,
    ));
    assert_eq!(tls_failure(&wrapped), Some(super::TlsFailure::Untrusted));
    let text = super::describe(&wrapped);
    assert!(text.contains("--tls-ca FILE"), "{text}");
}
