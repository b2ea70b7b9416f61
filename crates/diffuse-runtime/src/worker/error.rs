//! Why a worker stops with an error ([`WorkerError`]): each says what to change.

use std::path::PathBuf;
use std::time::Duration;

/// Why a worker could not start, or stopped without being told to.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// `--task-user` was given to a worker that does not run as root.
    #[error(
        "--task-user needs the worker to run as root (it switches to that user for each task)"
    )]
    TaskUserNeedsRoot,
    /// A directory of the worker's could not be made, locked or given its permissions.
    #[error("{what} {}", path.display())]
    Dir {
        /// What was being done, and to which of its directories (`cannot create the cache
        /// directory`).
        what: &'static str,
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Another worker runs on the same cache directory.
    #[error(
        "the cache directory {} is in use by another worker (waited {waited:.0?})",
        dir.display()
    )]
    CacheDirInUse {
        /// The cache directory.
        dir: PathBuf,
        /// How long this worker waited for the other to leave it.
        waited: Duration,
    },
    /// The cache directory holds something that cannot be opened as a cache.
    #[error("cannot open the cache in {} (--cache-dir)", dir.display())]
    Cache {
        /// The cache directory.
        dir: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// An `--input-root` does not exist or is not a directory.
    #[error("an --input-root cannot be used")]
    InputRoots(#[source] std::io::Error),
    /// The peer data server cannot listen where `--listen` says.
    #[error("--listen {addr}")]
    Listen {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
    /// The HTTP client for peers and storage could not be built (its TLS roots, `--tls-ca`).
    #[error("cannot build the HTTP client for peers and storage (--tls-ca)")]
    Http(#[source] reqwest::Error),
    /// SIGTERM and SIGINT cannot be watched for.
    #[error("cannot watch for SIGTERM and SIGINT")]
    Signals(#[source] std::io::Error),
    /// The dispatcher answered and refused the worker (a wrong token, a URL that is not a
    /// dispatcher, a certificate not trusted): not retried.
    #[error("{0}")]
    Refused(String),
    /// The dispatcher could not be reached for `--reconnect-timeout`.
    #[error("cannot connect to the dispatcher at {dispatcher} (tried for {tried:.0?}): {last}")]
    Unreachable {
        /// The dispatcher's URL (`--url`).
        dispatcher: String,
        /// How long the worker kept trying (`--reconnect-timeout`).
        tried: Duration,
        /// Why the last try failed.
        last: String,
    },
    /// The cache could not be marked clean at shutdown: it is verified at the next start.
    #[error(
        "cannot mark the cache in {} clean (it will be verified at the next start)",
        dir.display()
    )]
    MarkClean {
        /// The cache directory.
        dir: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A blocking step (opening the cache, marking it clean) panicked.
    #[error("a worker thread failed")]
    Thread(#[from] tokio::task::JoinError),
}
