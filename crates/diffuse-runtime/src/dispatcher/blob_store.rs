//! The dispatcher's blob store: files `<journal directory>/blobs/<sha256>`, each written under a
//! temporary name, synced, then renamed, so a reader sees all of it or nothing; pruned when
//! unused for [`RETENTION`]. Served by [`super::blobs`].

use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Blobs unused (neither stored nor read) this long are deleted.
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Largest blob (as a request body's limit, 64 MiB).
pub const MAX_BLOB: usize = 64 << 20;

/// Why a blob cannot be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// Not a blob's name, or bytes that do not have that name.
    #[error("{0}")]
    Invalid(String),
    /// The disk failed.
    #[error("{0}")]
    Io(String),
}

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
    /// Blobs kept in `dir`, made when the first blob is stored (a dispatcher that never gets
    /// one leaves nothing beside its journal).
    pub fn open(dir: PathBuf) -> std::io::Result<Blobs> {
        Ok(Blobs { dir })
    }

    /// The file of the blob `sha` (refused unless `sha` is a blob's name).
    pub fn path(&self, sha: &str) -> Result<PathBuf, BlobError> {
        if !valid_name(sha) {
            return Err(BlobError::Invalid(format!(
                "'{sha}' is not a blob's name: 64 lowercase hex digits (the SHA-256 of its bytes)"
            )));
        }
        Ok(self.dir.join(sha))
    }

    /// Keep `bytes` as `sha`, if that is their SHA-256. True: it was new.
    pub fn store(&self, sha: &str, bytes: &[u8]) -> Result<bool, BlobError> {
        let path = self.path(sha)?;
        let actual = hex::encode(Sha256::digest(bytes));
        if actual != sha {
            return Err(BlobError::Invalid(format!(
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
            std::fs::create_dir_all(&self.dir)?;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(BlobError::Io(format!("storing blob {sha}: {e}")));
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
pub fn touch(path: &std::path::Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
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
            Err(BlobError::Invalid(_))
        ));
        for bad in ["../x", "ABC", &sha.to_uppercase(), &sha[..63]] {
            assert!(matches!(b.path(bad), Err(BlobError::Invalid(_))), "{bad}");
        }
        assert_eq!(b.prune(Duration::from_secs(3600)), 0);
        assert_eq!(b.prune(Duration::ZERO), 1);
        assert!(!b.path(&sha).unwrap().exists());
    }
}
