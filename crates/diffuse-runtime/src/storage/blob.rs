//! `blob://SHA256`: blobs the dispatcher keeps (`PUT /v1/blobs/{sha256}`, docs/warm.md), read by
//! workers from the dispatcher they are connected to, with the worker token. A blob's name is
//! its version and its digest: what is read is checked against it.

use super::download::{write_hashed, Download, SourceInfo};
use super::error::StorageError;
use super::throttle::{throttled, Throttle};
use std::path::Path;

/// Where blobs are read: the dispatcher's URL, the worker token, an HTTP client that trusts
/// the dispatcher's certificate.
#[derive(Clone, Debug)]
pub struct BlobSource {
    /// The dispatcher's base URL.
    pub url: String,
    /// The worker token.
    pub token: String,
    /// The client.
    pub http: reqwest::Client,
}

fn sha_of(uri: &str) -> &str {
    uri.strip_prefix("blob://").unwrap_or(uri)
}

fn other(uri: &str, message: impl std::fmt::Display) -> StorageError {
    StorageError::Other {
        uri: uri.to_string(),
        message: message.to_string(),
    }
}

impl BlobSource {
    fn url_of(&self, uri: &str) -> String {
        format!(
            "{}/v1/blobs/{}",
            self.url.trim_end_matches('/'),
            sha_of(uri)
        )
    }

    /// Its size (its version is its name).
    pub async fn head(&self, uri: &str) -> Result<SourceInfo, StorageError> {
        let resp = self
            .http
            .head(self.url_of(uri))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| other(uri, e))?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(StorageError::NotFound(uri.to_string()));
        }
        if !resp.status().is_success() {
            return Err(other(uri, format!("dispatcher: status {}", resp.status())));
        }
        let size = resp
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .ok_or_else(|| other(uri, "dispatcher: no content-length"))?;
        Ok(SourceInfo {
            size,
            version: sha_of(uri).to_string(),
        })
    }

    /// Store `bytes`; the blob's URI.
    pub async fn put(&self, bytes: Vec<u8>) -> Result<String, StorageError> {
        use sha2::Digest;
        let sha = hex::encode(sha2::Sha256::digest(&bytes));
        let uri = format!("blob://{sha}");
        let resp = self
            .http
            .put(self.url_of(&uri))
            .bearer_auth(&self.token)
            .body(bytes)
            .send()
            .await
            .map_err(|e| other(&uri, e))?;
        if !resp.status().is_success() {
            return Err(other(&uri, format!("dispatcher: status {}", resp.status())));
        }
        Ok(uri)
    }

    /// Read it into `dest`, checking its digest against its name.
    pub async fn get(
        &self,
        uri: &str,
        dest: &Path,
        throttle: &Throttle,
    ) -> Result<Download, StorageError> {
        let resp = self
            .http
            .get(self.url_of(uri))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| other(uri, e))?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(StorageError::NotFound(uri.to_string()));
        }
        if !resp.status().is_success() {
            return Err(other(uri, format!("dispatcher: status {}", resp.status())));
        }
        let (written, sha256) =
            write_hashed(uri, dest, throttled(resp.bytes_stream(), throttle)).await?;
        if sha256 != sha_of(uri) {
            return Err(other(
                uri,
                format!("the bytes read have SHA-256 {sha256}: not this blob"),
            ));
        }
        Ok(Download {
            info: SourceInfo {
                size: written,
                version: sha256.clone(),
            },
            written,
            sha256,
        })
    }
}
