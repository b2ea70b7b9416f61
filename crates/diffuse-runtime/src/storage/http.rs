//! `http(s)://` objects, fetched with the whole URL: path, query string and user information
//! (sent as basic authentication). The version is the size with the ETag, or with the
//! Last-Modified date when the server sends no ETag.

use super::download::{write_hashed, Download, SourceInfo};
use super::error::StorageError;
use reqwest::header::{HeaderMap, CONTENT_LENGTH, ETAG, LAST_MODIFIED};
use reqwest::StatusCode;
use std::path::Path;
use std::time::Duration;

/// An HTTP client for inputs: connections time out after 10 s and a response that sends
/// nothing for 60 s is abandoned; a large body may take as long as it needs.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .build()
        .expect("HTTP client")
}

fn other(uri: &str, message: impl std::fmt::Display) -> StorageError {
    StorageError::Other {
        uri: crate::uri::redacted(uri).into_owned(),
        message: message.to_string(),
    }
}

fn check(uri: &str, status: StatusCode) -> Result<(), StorageError> {
    match status {
        s if s.is_success() => Ok(()),
        StatusCode::NOT_FOUND | StatusCode::GONE => Err(StorageError::NotFound(
            crate::uri::redacted(uri).into_owned(),
        )),
        s => Err(other(uri, format!("status {s}"))),
    }
}

fn version(uri: &str, size: u64, headers: &HeaderMap) -> Result<String, StorageError> {
    let tag = headers
        .get(ETAG)
        .or_else(|| headers.get(LAST_MODIFIED))
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_matches('"').to_string())
        .ok_or_else(|| {
            other(
                uri,
                "the server sends neither ETag nor Last-Modified: a change of the object could not be noticed",
            )
        })?;
    Ok(format!("{size}:{tag}"))
}

/// Size and version, from a `HEAD` request.
pub async fn head(client: &reqwest::Client, uri: &str) -> Result<SourceInfo, StorageError> {
    let resp = client
        .head(uri)
        .send()
        .await
        .map_err(|e| other(uri, e.without_url()))?;
    check(uri, resp.status())?;
    let size = resp
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| other(uri, "no Content-Length in the answer to HEAD"))?;
    Ok(SourceInfo {
        size,
        version: version(uri, size, resp.headers())?,
    })
}

/// Stream the object into `dest`, hashing it on the way.
pub async fn get(
    client: &reqwest::Client,
    uri: &str,
    dest: &Path,
    throttle: &super::throttle::Throttle,
) -> Result<Download, StorageError> {
    let resp = client
        .get(uri)
        .send()
        .await
        .map_err(|e| other(uri, e.without_url()))?;
    check(uri, resp.status())?;
    let headers = resp.headers().clone();
    let (written, sha256) = write_hashed(
        uri,
        dest,
        super::throttle::throttled(resp.bytes_stream(), throttle),
    )
    .await?;
    Ok(Download {
        info: SourceInfo {
            size: written,
            version: version(uri, written, &headers)?,
        },
        written,
        sha256,
    })
}
