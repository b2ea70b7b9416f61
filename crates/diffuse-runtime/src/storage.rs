//! Persistent storage through the `object_store` crate: `file://` (a shared POSIX path),
//! `s3://bucket/key` (credentials, region and endpoint from the usual `AWS_*` variables:
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`, `AWS_ENDPOINT` or
//! `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`), and `http(s)://`.
//!
//! Every object has a *version*: its size plus its ETag or modification time. A cached copy
//! whose version differs from the source's is stale and is never served.

use futures_util::StreamExt;
use object_store::{path::Path as StorePath, ObjectMeta, ObjectStore};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
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
    /// Anything else (network, permissions, credentials).
    #[error("{uri}: {message}")]
    Other {
        /// Object URI.
        uri: String,
        /// What the backend said.
        message: String,
    },
}

/// Size and version of a source object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceInfo {
    /// Bytes.
    pub size: u64,
    /// `size:etag` or `size:mtime-in-ms`.
    pub version: String,
}

fn version_of(meta: &ObjectMeta) -> String {
    match &meta.e_tag {
        Some(tag) => format!("{}:{}", meta.size, tag.trim_matches('"')),
        None => format!("{}:{}", meta.size, meta.last_modified.timestamp_millis()),
    }
}

/// A finished download: the source's size and version, bytes written, and their SHA-256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Download {
    /// The source object as read.
    pub info: SourceInfo,
    /// Bytes written to the file.
    pub written: u64,
    /// Lowercase hex SHA-256 of the bytes written, computed as they were written.
    pub sha256: String,
}

/// Write a stream of chunks to `dest`, hashing as it goes. Receiving runs on the async task;
/// writing and hashing each run on their own blocking thread, fed the same reference-counted
/// chunks through bounded channels, so the three overlap on separate cores (hashing a large
/// object costs about as much CPU as writing it; done in series they halved the throughput of
/// a peer fetch, see docs/performance.md).
pub async fn write_hashed<E: std::fmt::Display>(
    uri: &str,
    dest: &Path,
    mut stream: impl futures_util::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
) -> Result<(u64, String), StorageError> {
    use sha2::Digest;
    use std::io::Write;
    let other = |m: String| StorageError::Other {
        uri: uri.to_string(),
        message: m,
    };
    let (write_tx, mut write_rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(32);
    let (hash_tx, mut hash_rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(32);
    let path = dest.to_path_buf();
    // Chunks of at least the buffer's size are written straight through; small ones (the
    // file backend streams 8 KiB chunks) are coalesced.
    let writer = tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
        let mut file = std::io::BufWriter::with_capacity(256 << 10, std::fs::File::create(&path)?);
        let mut written = 0u64;
        while let Some(chunk) = write_rx.blocking_recv() {
            file.write_all(&chunk)?;
            written += chunk.len() as u64;
        }
        file.flush()?;
        Ok(written)
    });
    let hasher = tokio::task::spawn_blocking(move || {
        let mut hasher = sha2::Sha256::new();
        while let Some(chunk) = hash_rx.blocking_recv() {
            hasher.update(&chunk);
        }
        hex::encode(hasher.finalize())
    });
    let mut failed = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => {
                let hashed = hash_tx.send(c.clone()).await;
                if write_tx.send(c).await.is_err() || hashed.is_err() {
                    break; // the writer failed; its error is reported below
                }
            }
            Err(e) => {
                failed = Some(e.to_string());
                break;
            }
        }
    }
    drop((write_tx, hash_tx));
    let written = writer.await.map_err(|e| other(e.to_string()))?;
    let sha256 = hasher.await.map_err(|e| other(e.to_string()))?;
    if let Some(e) = failed {
        let _ = std::fs::remove_file(dest);
        return Err(other(e));
    }
    let written = written.map_err(|e| {
        let _ = std::fs::remove_file(dest);
        other(e.to_string())
    })?;
    Ok((written, sha256))
}

/// Backends by store (scheme + bucket or host), created on first use.
#[derive(Default)]
pub struct Storage {
    stores: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
    /// Shared-storage emulation (`crate::gateway`): read `file://` objects through this
    /// dispatcher URL with this token.
    gateway: Option<(String, String)>,
}

impl Storage {
    /// A storage client with no backend created yet.
    pub fn new() -> Storage {
        Storage::default()
    }

    /// A storage client that reads `file://` objects through a bandwidth-limited gateway
    /// (`crate::gateway`) at `url`, with the worker `token`.
    pub fn with_gateway(url: String, token: String) -> Storage {
        Storage {
            gateway: Some((url, token)),
            ..Storage::default()
        }
    }

    async fn get_via_gateway(
        &self,
        url: &str,
        token: &str,
        uri: &str,
        dest: &Path,
    ) -> Result<Download, StorageError> {
        let path = uri.strip_prefix("file://").unwrap_or(uri);
        let other = |m: String| StorageError::Other {
            uri: uri.to_string(),
            message: m,
        };
        let resp = reqwest::Client::new()
            .get(format!("{url}/v1/storage{path}"))
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| other(e.to_string()))?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(StorageError::NotFound(uri.to_string()));
        }
        if !resp.status().is_success() {
            return Err(other(format!("storage gateway: status {}", resp.status())));
        }
        let version = resp
            .headers()
            .get("x-diffuse-version")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let (written, sha256) = write_hashed(uri, dest, resp.bytes_stream()).await?;
        Ok(Download {
            info: SourceInfo {
                size: written,
                version,
            },
            written,
            sha256,
        })
    }

    /// The backend and in-store path for a URI.
    fn resolve(&self, uri: &str) -> Result<(Arc<dyn ObjectStore>, StorePath), StorageError> {
        let unsupported = || StorageError::Unsupported(uri.to_string());
        let other = |e: &dyn std::fmt::Display| StorageError::Other {
            uri: uri.to_string(),
            message: e.to_string(),
        };
        let (store_key, path): (String, StorePath) = if let Some(p) = uri.strip_prefix("file://") {
            let path = StorePath::from_absolute_path(p).map_err(|e| other(&e))?;
            ("file".into(), path)
        } else if let Some(rest) = uri.strip_prefix("s3://") {
            let (bucket, key) = rest.split_once('/').ok_or_else(unsupported)?;
            (
                format!("s3://{bucket}"),
                StorePath::parse(key).map_err(|e| other(&e))?,
            )
        } else if uri.starts_with("http://") || uri.starts_with("https://") {
            let url = url::Url::parse(uri).map_err(|e| other(&e))?;
            let base = format!(
                "{}://{}",
                url.scheme(),
                url.host_str().ok_or_else(unsupported)?
            );
            let base = match url.port() {
                Some(p) => format!("{base}:{p}"),
                None => base,
            };
            let path = url.path().trim_start_matches('/');
            (base, StorePath::parse(path).map_err(|e| other(&e))?)
        } else {
            return Err(unsupported());
        };
        let mut stores = self.stores.lock().expect("storage lock");
        if let Some(s) = stores.get(&store_key) {
            return Ok((s.clone(), path));
        }
        let store: Arc<dyn ObjectStore> = if store_key == "file" {
            Arc::new(object_store::local::LocalFileSystem::new())
        } else if let Some(bucket) = store_key.strip_prefix("s3://") {
            let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
            if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
                b = b
                    .with_allow_http(endpoint.starts_with("http://"))
                    .with_endpoint(endpoint);
            }
            Arc::new(b.build().map_err(|e| other(&e))?)
        } else {
            let b = object_store::http::HttpBuilder::new()
                .with_url(store_key.clone())
                .with_client_options(object_store::ClientOptions::new().with_allow_http(true));
            Arc::new(b.build().map_err(|e| other(&e))?)
        };
        stores.insert(store_key, store.clone());
        Ok((store, path))
    }

    fn map_err(uri: &str, e: object_store::Error) -> StorageError {
        match e {
            object_store::Error::NotFound { .. } => StorageError::NotFound(uri.to_string()),
            e => StorageError::Other {
                uri: uri.to_string(),
                message: e.to_string(),
            },
        }
    }

    /// Size and version of the object at `uri`.
    pub async fn head(&self, uri: &str) -> Result<SourceInfo, StorageError> {
        let (store, path) = self.resolve(uri)?;
        let meta = store.head(&path).await.map_err(|e| Self::map_err(uri, e))?;
        Ok(SourceInfo {
            size: meta.size,
            version: version_of(&meta),
        })
    }

    /// Stream the object at `uri` into the file `dest` (created or truncated), hashing it on
    /// the way.
    pub async fn get_to_file(&self, uri: &str, dest: &Path) -> Result<Download, StorageError> {
        if let (Some((url, token)), true) = (&self.gateway, uri.starts_with("file://")) {
            return self.get_via_gateway(url, token, uri, dest).await;
        }
        let (store, path) = self.resolve(uri)?;
        let result = store.get(&path).await.map_err(|e| Self::map_err(uri, e))?;
        let info = SourceInfo {
            size: result.meta.size,
            version: version_of(&result.meta),
        };
        let (written, sha256) = write_hashed(uri, dest, result.into_stream()).await?;
        Ok(Download {
            info,
            written,
            sha256,
        })
    }

    /// Upload the local file `src` to `uri` (task outputs).
    pub async fn put_file(&self, uri: &str, src: &Path) -> Result<(), StorageError> {
        if let Some(dest) = uri.strip_prefix("file://") {
            // A shared POSIX path: copy through a temp name and rename, so readers never see a
            // partial output.
            let dest = Path::new(dest);
            let io = |e: std::io::Error| StorageError::Other {
                uri: uri.to_string(),
                message: e.to_string(),
            };
            if let Some(dir) = dest.parent() {
                tokio::fs::create_dir_all(dir).await.map_err(io)?;
            }
            let tmp = dest.with_extension(format!("diffuse-tmp-{}", std::process::id()));
            tokio::fs::copy(src, &tmp).await.map_err(io)?;
            tokio::fs::rename(&tmp, dest).await.map_err(io)?;
            return Ok(());
        }
        let (store, path) = self.resolve(uri)?;
        let data = tokio::fs::read(src)
            .await
            .map_err(|e| StorageError::Other {
                uri: uri.to_string(),
                message: e.to_string(),
            })?;
        store
            .put(&path, data.into())
            .await
            .map_err(|e| Self::map_err(uri, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_backend_head_get_and_version_change() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.dat");
        std::fs::write(&f, b"hello").unwrap();
        let uri = format!("file://{}", f.display());
        let s = Storage::new();
        let v1 = s.head(&uri).await.unwrap();
        assert_eq!(v1.size, 5);
        let out = dir.path().join("copy");
        let d = s.get_to_file(&uri, &out).await.unwrap();
        assert_eq!((d.written, d.info.clone()), (5, v1.clone()));
        // sha256("hello")
        assert_eq!(
            d.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(std::fs::read(&out).unwrap(), b"hello");
        std::fs::write(&f, b"hello, world").unwrap();
        assert_ne!(
            s.head(&uri).await.unwrap().version,
            v1.version,
            "a changed source has a new version"
        );
        let missing = format!("file://{}/nope", dir.path().display());
        assert!(matches!(
            s.head(&missing).await,
            Err(StorageError::NotFound(_))
        ));
        assert!(matches!(
            s.head("ftp://x/y").await,
            Err(StorageError::Unsupported(_))
        ));
    }

    #[tokio::test]
    async fn http_backend_reads_from_a_real_server() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("obj.bin"), b"served over http").unwrap();
        let app =
            axum::Router::new().fallback_service(tower_http::services::ServeDir::new(dir.path()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let s = Storage::new();
        let uri = format!("http://{addr}/obj.bin");
        let head = s.head(&uri).await.unwrap();
        assert_eq!(head.size, 16);
        let out = dir.path().join("copy");
        let d = s.get_to_file(&uri, &out).await.unwrap();
        assert_eq!((d.written, d.info.version.clone()), (16, head.version));
        assert_eq!(std::fs::read(&out).unwrap(), b"served over http");
        let missing = format!("http://{addr}/nope.bin");
        assert!(
            matches!(s.head(&missing).await, Err(StorageError::NotFound(_))),
            "404 is not found"
        );
    }

    #[tokio::test]
    async fn put_file_writes_outputs_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, b"out").unwrap();
        let dest = dir.path().join("sub/dir/result.txt");
        Storage::new()
            .put_file(&format!("file://{}", dest.display()), &src)
            .await
            .unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"out");
    }
}
