//! The storage emulator: a throttled stand-in for shared storage. The dispatcher serves a
//! `file://` tree at a fixed aggregate bandwidth, shared by every reader in every worker
//! process.
//!
//! This exists for demonstrations and benchmarks on one machine, where the "shared file system"
//! is a local disk that is far faster than a real one under load. With
//! `--storage-bandwidth 200MB/s`, workers read `file://` inputs under the storage root through
//! `GET /v1/storage/<absolute path>` (worker token), and every chunk of every response passes one
//! [`Link`] that moves at most that many bytes per second in total. Size, version and the cache
//! are unaffected; only the time to read from "storage" changes.

use axum::body::Body;
use axum::extract::{Path as AxPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::Mutex;
use tokio::time::Instant;

const CHUNK: usize = 256 * 1024;

/// A link of fixed bandwidth shared by all its users: each chunk reserves its transfer time on
/// the link in arrival order, so the aggregate rate never exceeds the bandwidth.
pub struct Link {
    bytes_per_s: f64,
    next_free: Mutex<Instant>,
}

impl Link {
    /// A link of `bytes_per_s`.
    pub fn new(bytes_per_s: f64) -> Link {
        Link {
            bytes_per_s,
            next_free: Mutex::new(Instant::now()),
        }
    }

    /// Wait until `bytes` have crossed the link.
    pub async fn pass(&self, bytes: usize) {
        let done = {
            let mut next = self.next_free.lock().await;
            let start = (*next).max(Instant::now());
            *next = start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_s);
            *next
        };
        tokio::time::sleep_until(done).await;
    }
}

/// The emulator's state: the tree it serves, the link, and the worker token.
pub struct StorageEmulator {
    /// Only files under this directory are served.
    pub root: PathBuf,
    /// The shared link.
    pub link: Link,
    /// Worker token.
    pub token: String,
}

impl StorageEmulator {
    /// Serve `root` at `bytes_per_s` to holders of `token`.
    pub fn new(root: PathBuf, bytes_per_s: f64, token: String) -> std::io::Result<StorageEmulator> {
        Ok(StorageEmulator {
            root: root.canonicalize()?,
            link: Link::new(bytes_per_s),
            token,
        })
    }
}

/// `GET /v1/storage/{*path}`.
pub async fn serve(
    State(g): State<Arc<StorageEmulator>>,
    AxPath(path): AxPath<String>,
    headers: HeaderMap,
) -> Response {
    let ok = crate::auth::authorized(&headers, &g.token);
    if !ok {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    // Resolve symlinks and `..` first, then require the result to be inside the root.
    let Ok(real) = PathBuf::from("/").join(&path).canonicalize() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if !real.starts_with(&g.root) {
        return StatusCode::NOT_FOUND.into_response();
    }
    // A regular file on an ordinary file system, as a worker reads it (never /proc, /sys, /dev).
    let uri = format!("file://{}", real.display());
    let Ok(file) = crate::storage::file::FileAccess::open_to_all().open_path(&uri, &real) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Ok(meta) = file.metadata() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let info = crate::storage::file::info_of(&meta);
    let file = tokio::fs::File::from_std(file);
    let stream = futures_util::stream::unfold((file, g.clone()), |(mut file, g)| async move {
        let mut buf = vec![0u8; CHUNK];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                g.link.pass(n).await;
                Some((Ok::<_, std::io::Error>(bytes::Bytes::from(buf)), (file, g)))
            }
            Err(e) => Some((Err(e), (file, g))),
        }
    });
    let mut resp = Body::from_stream(stream.boxed()).into_response();
    if let Ok(v) = info.version.parse() {
        resp.headers_mut().insert("x-diffuse-version", v);
    }
    if let Ok(v) = info.size.to_string().parse() {
        resp.headers_mut().insert("content-length", v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn link_caps_aggregate_rate() {
        let link = Arc::new(Link::new(1_000_000.0));
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let l = link.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    l.pass(25_000).await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // 4 readers x 250 KB over a 1 MB/s link: 1 s in total, whatever the interleaving.
        let elapsed = t0.elapsed().as_secs_f64();
        assert!((elapsed - 1.0).abs() < 1e-3, "{elapsed}");
    }
}
