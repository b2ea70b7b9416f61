//! What went wrong reading or writing persistent storage: the one error every backend returns.

use thiserror::Error;

/// What went wrong reading persistent storage.
#[derive(Debug, Error)]
pub enum StorageError {
    /// The object does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The URI cannot be served by any backend.
    #[error("unsupported URI '{0}' (expected file://, s3://, http:// or https://)")]
    Unsupported(String),
    /// The worker's rules forbid reading it (input roots, task user).
    #[error("{uri}: {why}")]
    Refused {
        /// Object URI.
        uri: String,
        /// Which rule.
        why: String,
    },
    /// The disk the object was being written to is full.
    #[error("{}: no space left on the cache's disk", crate::uri::redacted(.0))]
    NoSpace(String),
    /// Anything else (network, permissions, credentials).
    #[error("{}: {message}", crate::uri::redacted(uri))]
    Other {
        /// Object URI.
        uri: String,
        /// What the backend said.
        message: String,
    },
}
