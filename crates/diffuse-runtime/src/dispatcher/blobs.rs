//! Blobs: objects a client hands the dispatcher to keep, named by the SHA-256 of their bytes,
//! for function tasks whose client has no shared file system (docs/warm.md): the serialized
//! function (sent once, read by each worker once and cached as `blob://<sha256>`), large
//! arguments, large results.
//!
//! | route | token | what |
//! |---|---|---|
//! | `PUT /v1/blobs/{sha256}` | client or worker | store the body, if its SHA-256 is the name (`201`; `200` if already kept) |
//! | `GET /v1/blobs/{sha256}` | client or worker | the bytes (`HEAD`: whether it is kept, and its size) |
//!
//! A blob is a file `<journal directory>/blobs/<sha256>`, written under a temporary name,
//! synced, then renamed, so a reader sees all of it or nothing. Its name is its version: a
//! worker's cached copy is checked against it, and never goes stale. Blobs not stored or read
//! for [`RETENTION`] are deleted (a task naming one after that fails: input not found).

use super::handle::{ApiError, Handle};
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Blobs unused (neither stored nor read) this long are deleted.
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Largest blob: a request body's limit.
pub const MAX_BLOB: usize = super::MAX_BODY;

/// Where blobs are kept.
#[derive(Clone, Debug)]
pub struct Blobs {
    dir: PathBuf,
}

/// What storing a blob did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stored {
    /// Its name.
    pub sha256: String,
    /// Its size, bytes.
    pub size: u64,
}

fn valid_name(sha: &str) -> bool {
    sha.len() == 64
        && sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Blobs {
    /// Blobs kept in `dir` (made if missing).
    pub fn open(dir: PathBuf) -> std::io::Result<Blobs> {
        std::fs::create_dir_all(&dir)?;
        Ok(Blobs { dir })
    }

    fn path(&self, sha: &str) -> Result<PathBuf, ApiError> {
        if !valid_name(sha) {
            return Err(ApiError::BadRequest(format!(
                "'{sha}' is not a blob's name: 64 lowercase hex digits (the SHA-256 of its bytes)"
            )));
        }
        Ok(self.dir.join(sha))
    }

    /// Keep `bytes` as `sha`, if that is their SHA-256. True: it was new.
    fn store(&self, sha: &str, bytes: &[u8]) -> Result<bool, ApiError> {
        let path = self.path(sha)?;
        let actual = hex::encode(Sha256::digest(bytes));
        if actual != sha {
            return Err(ApiError::BadRequest(format!(
                "the body's SHA-256 is {actual}, not {sha}"
            )));
        }
        if path.exists() {
            touch(&path);
            return Ok(false);
        }
        let tmp = self.dir.join(format!(
            ".{sha}.{}.{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(ApiError::Internal(format!("storing blob {sha}: {e}")));
        }
        Ok(true)
    }

    /// Delete the blobs unused for longer than `retention`; how many.
    pub fn prune(&self, retention: Duration) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let now = SystemTime::now();
        let mut deleted = 0;
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age > retention);
            let name = e.file_name();
            let name = name.to_string_lossy();
            // Temporary files of a store that died half way go too.
            if old && (valid_name(&name) || name.starts_with('.')) {
                deleted += usize::from(std::fs::remove_file(e.path()).is_ok());
            }
        }
        deleted
    }
}

/// Mark a blob used now.
fn touch(path: &std::path::Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// The blob routes.
pub fn routes() -> Router<Handle> {
    Router::new().route(
        "/v1/blobs/{sha256}",
        get(fetch).put(put).layer(DefaultBodyLimit::max(MAX_BLOB)),
    )
}

fn client_or_worker(h: &Handle, headers: &HeaderMap) -> Result<(), ApiError> {
    h.client(headers).or_else(|_| h.worker(headers))
}

async fn put(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(sha): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    client_or_worker(&h, &headers)?;
    let blobs = h.blobs.clone();
    let size = body.len() as u64;
    let name = sha.clone();
    let new = tokio::task::spawn_blocking(move || blobs.store(&name, &body))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    let code = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((code, Json(Stored { sha256: sha, size })).into_response())
}

async fn fetch(
    State(h): State<Handle>,
    headers: HeaderMap,
    Path(sha): Path<String>,
) -> Result<Response, ApiError> {
    client_or_worker(&h, &headers)?;
    let path = h.blobs.path(&sha)?;
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ApiError::NotFound(format!("no blob {sha}")))
        }
        Err(e) => return Err(ApiError::Internal(format!("blob {sha}: {e}"))),
    };
    let size = file
        .metadata()
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .len();
    touch(&path);
    let stream = tokio_util_stream(file);
    Ok((
        [
            ("content-type", "application/octet-stream".to_string()),
            ("content-length", size.to_string()),
            ("x-diffuse-version", sha),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// A file as a stream of chunks.
fn tokio_util_stream(
    file: tokio::fs::File,
) -> impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> {
    futures_util::stream::unfold(Some(file), |file| async move {
        use tokio::io::AsyncReadExt;
        let mut file = file?;
        let mut buf = vec![0u8; 256 << 10];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_is_kept_under_its_digest_only() {
        let dir = tempfile::tempdir().unwrap();
        let b = Blobs::open(dir.path().join("blobs")).unwrap();
        let sha = hex::encode(Sha256::digest(b"hello"));
        assert!(b.store(&sha, b"hello").unwrap());
        assert!(!b.store(&sha, b"hello").unwrap(), "kept already");
        assert_eq!(std::fs::read(b.path(&sha).unwrap()).unwrap(), b"hello");
        let wrong = hex::encode(Sha256::digest(b"other"));
        assert!(matches!(
            b.store(&wrong, b"hello"),
            Err(ApiError::BadRequest(_))
        ));
        for bad in ["../x", "ABC", &sha.to_uppercase(), &sha[..63]] {
            assert!(matches!(b.path(bad), Err(ApiError::BadRequest(_))), "{bad}");
        }
        assert_eq!(b.prune(Duration::from_secs(3600)), 0);
        assert_eq!(b.prune(Duration::ZERO), 1);
        assert!(!b.path(&sha).unwrap().exists());
    }
}
