//! Blobs: objects a client hands the dispatcher to keep, named by the SHA-256 of their bytes,
//! for function tasks whose client has no shared file system (docs/warm.md): the serialized
//! function (sent once, read by each worker once and cached as `blob://<sha256>`), large
//! arguments, large results. Kept by [`super::blob_store`].
//!
//! | route | token | what |
//! |---|---|---|
//! | `PUT /v1/blobs/{sha256}` | client or worker | store the body, if its SHA-256 is the name (`201`; `200` if already kept) |
//! | `GET /v1/blobs/{sha256}` | client or worker | the bytes (`HEAD`: whether it is kept, and its size) |
//!
//! A blob's name is its version: a worker's cached copy is checked against it, and never goes
//! stale. Blobs not stored or read for [`super::blob_store::RETENTION`] are deleted (a task naming one after that
//! fails: input not found).

use super::blob_store::{touch, BlobError, Stored, MAX_BLOB};
use super::handle::{ApiError, Handle};
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

impl From<BlobError> for ApiError {
    fn from(e: BlobError) -> ApiError {
        match e {
            BlobError::Invalid(m) => ApiError::BadRequest(m),
            BlobError::Io(m) => ApiError::Internal(m),
        }
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
