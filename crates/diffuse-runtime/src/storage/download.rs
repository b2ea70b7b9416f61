//! What every backend's read shares: an object's size and version ([`SourceInfo`]), a finished
//! download ([`Download`]), and writing a stream of bytes to a local file while hashing it
//! ([`write_hashed`]).

use super::error::StorageError;
use futures_util::StreamExt;
use std::path::Path;

/// Size and version of a source object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceInfo {
    /// Bytes.
    pub size: u64,
    /// `size:etag` or `size:mtime-in-ms`.
    pub version: String,
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

/// Write a stream of chunks to `dest`, hashing as it goes. `dest` is created new (`O_CREAT |
/// O_EXCL | O_NOFOLLOW`), so a symbolic link there is never written through (an input read
/// uncached goes to `inputs/<i>/<name>`, in a directory the task user owns, where another task
/// of that user could have planted a link to `/etc/cron.d/x`). Whatever is already at `dest` (a
/// planted link, or the cache's own `.part` file left by a transfer that failed) is unlinked
/// first, which removes the entry and never touches what a link points to; if something is
/// planted again between the two, the write fails. Receiving runs on the async task;
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
    use std::os::unix::fs::OpenOptionsExt;
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
        let create = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&path)
        };
        let created = match create() {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(&path)?;
                create()?
            }
            other => other?,
        };
        let mut file = std::io::BufWriter::with_capacity(256 << 10, created);
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
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            // Planted again after it was unlinked: left as it is.
            return other(format!(
                "{} was created by someone else while it was being written (not written through)",
                dest.display()
            ));
        }
        let _ = std::fs::remove_file(dest);
        if e.kind() == std::io::ErrorKind::StorageFull {
            StorageError::NoSpace(uri.to_string())
        } else {
            other(e.to_string())
        }
    })?;
    Ok((written, sha256))
}
