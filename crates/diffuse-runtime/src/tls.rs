//! TLS for diffuse's own connections: the dispatcher's API, worker sessions and metrics, and the
//! workers' peer data servers, with rustls and its `ring` provider (the one reqwest already
//! compiles; no second provider).
//!
//! - [`server_config`] reads a PEM certificate chain and its private key (`--tls-cert`,
//!   `--tls-key`) and checks that they belong together; [`crate::server::serve`] then wraps each
//!   accepted connection in it.
//! - [`Trust`] is what a client trusts: the built-in (webpki) and system roots, as reqwest does,
//!   plus a site's CA from a PEM bundle (`--tls-ca`, `DIFFUSE_TLS_CA`). It configures reqwest
//!   clients ([`Trust::reqwest`]) and the worker's WebSocket ([`Trust::client_config`]).
//! - [`describe`] turns a connection error into one line naming its causes, with what to do when
//!   TLS was the reason ([`tls_failure`] tells such errors apart, so they are not retried).
//!
//! There are no client certificates: the tokens still authenticate every request
//! (docs/security.md). Key material is never logged or put in an error message: errors
//! ([`TlsError`]) name the file and what it should hold.

use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A server's TLS settings: its certificate chain and key.
pub type ServerTls = Arc<rustls::ServerConfig>;

/// Why TLS settings were refused. Each names the file (never its content) and what it should
/// hold.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read the {what} {}", path.display())]
    Read {
        /// `TLS certificate`, `TLS key` or `TLS CA file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A certificate file is not PEM.
    #[error("the {what} {} is not valid PEM: {error}", path.display())]
    NotPem {
        /// `TLS certificate` or `TLS CA file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        error: pem::Error,
    },
    /// A certificate file holds no certificate.
    #[error(
        "the {what} {} holds no certificate (expected PEM: -----BEGIN CERTIFICATE-----)",
        path.display()
    )]
    NoCertificate {
        /// `TLS certificate` or `TLS CA file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no private key.
    #[error(
        "the TLS key {} holds no private key (expected PEM: -----BEGIN PRIVATE KEY-----, \
         RSA PRIVATE KEY or EC PRIVATE KEY)",
        path.display()
    )]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The key file's PEM is damaged (its content is not shown).
    #[error("the TLS key {} is not a valid PEM private key", path.display())]
    BadKey {
        /// The file.
        path: PathBuf,
    },
    /// The key belongs to another certificate.
    #[error(
        "the TLS key {} does not match the certificate {}",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        /// The key file.
        key: PathBuf,
        /// The certificate file.
        cert: PathBuf,
    },
    /// rustls refused the certificate and key (a key of a kind `ring` cannot use, say).
    #[error(
        "the TLS certificate {} and key {} cannot be used: {error}",
        cert.display(),
        key.display()
    )]
    Unusable {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        error: rustls::Error,
    },
    /// A certificate of the CA bundle cannot be a trust root.
    #[error(
        "the TLS CA file {}: certificate {index} cannot be a root: {error}",
        path.display()
    )]
    NotARoot {
        /// The CA bundle.
        path: PathBuf,
        /// Which certificate, from 1.
        index: usize,
        /// What rustls said.
        error: rustls::Error,
    },
    /// The crypto provider supports none of the protocol versions (not expected with `ring`).
    #[error("TLS: {0}")]
    Provider(rustls::Error),
}

/// The one crypto provider: `ring`.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Read a file, naming it in the error.
fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// The certificates of a PEM file, in order; an error names the file.
fn read_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::NotPem {
            what,
            path: path.to_path_buf(),
            error,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1). The error names the file and never
/// shows its content.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path, "TLS key")?;
    let path = path.to_path_buf();
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoKey { path },
        _ => TlsError::BadKey { path },
    })
}

/// A server's TLS settings from a PEM certificate chain (the server's certificate first, then
/// any intermediates) and its PEM private key. Refused, naming the file: an unreadable or empty
/// file, a key that does not match the certificate, a key of a kind `ring` cannot use.
pub fn server_config(cert: &Path, key: &Path) -> Result<ServerTls, TlsError> {
    let certs = read_certs(cert, "TLS certificate")?;
    let key_der = read_key(key)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Provider)?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                TlsError::KeyMismatch {
                    key: key.to_path_buf(),
                    cert: cert.to_path_buf(),
                }
            }
            error => TlsError::Unusable {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
                error,
            },
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// What a client trusts: the built-in (webpki) and system roots, and a site's CA if given.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    /// The PEM bundle of extra roots, and its certificates.
    extra: Option<(PathBuf, Vec<CertificateDer<'static>>)>,
}

impl Trust {
    /// The built-in and system roots only.
    pub fn system() -> Trust {
        Trust::default()
    }

    /// Those, plus every certificate of the PEM bundle at `ca` (each must be usable as a root).
    pub fn with_ca(ca: &Path) -> Result<Trust, TlsError> {
        let certs = read_certs(ca, "TLS CA file")?;
        let mut store = rustls::RootCertStore::empty();
        for (i, c) in certs.iter().enumerate() {
            store.add(c.clone()).map_err(|error| TlsError::NotARoot {
                path: ca.to_path_buf(),
                index: i + 1,
                error,
            })?;
        }
        Ok(Trust {
            extra: Some((ca.to_path_buf(), certs)),
        })
    }

    /// [`Trust::with_ca`] if `ca` is given, else [`Trust::system`].
    pub fn from_option(ca: Option<&Path>) -> Result<Trust, TlsError> {
        ca.map_or(Ok(Trust::system()), Trust::with_ca)
    }

    /// The PEM bundle of extra roots, if any.
    pub fn ca_file(&self) -> Option<&Path> {
        self.extra.as_ref().map(|(p, _)| p.as_path())
    }

    /// `builder` trusting the extra roots too (it keeps its built-in ones).
    pub fn reqwest(&self, mut builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        if let Some((_, certs)) = &self.extra {
            for c in certs {
                // Checked as a root by `with_ca`; rustls-backed reqwest parses nothing here.
                if let Ok(cert) = reqwest::Certificate::from_der(c) {
                    builder = builder.add_root_certificate(cert);
                }
            }
        }
        builder
    }

    /// A rustls client configuration with the built-in (webpki) roots, the system's, and the
    /// extra ones (for the worker's WebSocket to the dispatcher).
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if let Some((_, certs)) = &self.extra {
            roots.add_parsable_certificates(certs.iter().cloned());
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(config)
    }
}

/// Why a TLS connection failed, when it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsFailure {
    /// The server's certificate is not signed by a trusted CA (or is expired, revoked...).
    Untrusted,
    /// The certificate does not name the host connected to.
    WrongName,
    /// The server did not answer in TLS (it serves plain HTTP?).
    NotTls,
    /// Anything else in the handshake.
    Other,
}

/// The rustls error in `e`'s chain of causes, if any (it may sit inside an `io::Error`).
fn rustls_error<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        // An `io::Error`'s `source` skips the error it wraps: look inside, through any depth
        // of `io::Error`s (hyper-rustls wraps one in another).
        let mut io = err.downcast_ref::<std::io::Error>();
        while let Some(inner) = io.and_then(|e| e.get_ref()) {
            if let Some(r) = inner.downcast_ref::<rustls::Error>() {
                return Some(r);
            }
            io = inner.downcast_ref::<std::io::Error>();
        }
        cur = err.source();
    }
    None
}

/// Whether `e` (or one of its causes) is a failed TLS handshake, and why.
pub fn tls_failure(e: &(dyn StdError + 'static)) -> Option<TlsFailure> {
    use rustls::CertificateError as C;
    Some(match rustls_error(e)? {
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => TlsFailure::WrongName,
        rustls::Error::InvalidCertificate(_) => TlsFailure::Untrusted,
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            TlsFailure::NotTls
        }
        _ => TlsFailure::Other,
    })
}

/// `e` and its causes on one line (`a: b: c`, repeats dropped), and for a TLS failure what to
/// do about it.
pub fn describe(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = err.source();
    }
    let mut line = parts.join(": ");
    let hint = match tls_failure(e) {
        Some(TlsFailure::Untrusted) => Some(
            "the server's TLS certificate is not trusted: give the CA that signed it with \
             --tls-ca FILE (DIFFUSE_TLS_CA for the client commands)",
        ),
        Some(TlsFailure::WrongName) => Some(
            "the server's TLS certificate does not name the host in the URL: use a name or \
             address it lists",
        ),
        Some(TlsFailure::NotTls) => {
            Some("the server did not answer in TLS: if it serves plain HTTP, use http://")
        }
        Some(TlsFailure::Other) | None => None,
    };
    if let Some(h) = hint {
        line.push_str(" (");
        line.push_str(h);
        line.push(')');
    }
    line
}

#[cfg(test)]
pub(crate) mod tests;
