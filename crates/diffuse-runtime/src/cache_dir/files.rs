//! The cache's file operations, each safe against what a node's disk may hold: only regular
//! files opened (a file swapped between `lstat` and `open` is caught by device and inode),
//! real directories, removals of whatever is in the way, directory fsyncs, checksums, and an
//! object's data and meta loaded and checked at open.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of a key: hex SHA-256.
pub(super) const KEY_LEN: usize = 64;
/// Largest meta file read at open (a meta is a URI and three short strings).
pub(super) const MAX_META_BYTES: u64 = 1 << 20;
/// Read buffer of the streaming checksum.
pub(super) const BUF_BYTES: usize = 64 * 1024;

/// What is recorded with each cached object (stored as `objects/<key>.meta`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The object's URI (its key is the hex SHA-256 of this string).
    pub uri: String,
    /// Size in bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 of the content.
    pub sha256: String,
    /// Opaque version of the source (size, mtime or ETag) when it was fetched.
    pub version: String,
    /// Modification time of the data file once committed, in nanoseconds since the epoch (0:
    /// unknown). A data file whose modification time differs has been written to since: it is
    /// fully verified before it is used again, and not served to peers until then.
    #[serde(default)]
    pub modified_ns: u64,
}

/// The key of `uri`: the lowercase hex SHA-256 of its bytes (the object's file name).
pub(super) fn key_of(uri: &str) -> String {
    hex::encode(Sha256::digest(uri.as_bytes()))
}

/// Size and lowercase hex SHA-256 of the file at `path`, read in a streaming fashion.
pub fn sha256_file(path: &Path) -> io::Result<(u64, String)> {
    let mut f = File::open(path)?;
    hash_reader(&mut f)
}

pub(super) fn hash_reader(r: &mut impl Read) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF_BYTES];
    let mut size = 0u64;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// True if `s` is a well-formed key: exactly 64 lowercase hex digits.
pub(super) fn valid_key(s: &str) -> bool {
    s.len() == KEY_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// True if `path` is a regular file (not a symlink) of `size` bytes.
pub(super) fn regular_of_size(path: &Path, size: u64) -> bool {
    fs::symlink_metadata(path).is_ok_and(|md| md.file_type().is_file() && md.len() == size)
}

/// Open `path` only if it is a regular file and not a symlink (`InvalidData` otherwise). On
/// Unix, a swap between the check and the open is detected by comparing device and inode.
pub(super) fn open_regular(path: &Path, write: bool) -> io::Result<File> {
    let before = fs::symlink_metadata(path)?;
    if !before.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    let f = fs::OpenOptions::new().read(true).write(write).open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let after = f.metadata()?;
        if (after.dev(), after.ino()) != (before.dev(), before.ino()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} changed while being opened", path.display()),
            ));
        }
    }
    Ok(f)
}

/// Create `dir` if missing; fail if it exists as anything but a real directory.
pub(super) fn ensure_real_dir(dir: &Path) -> io::Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(md) if md.file_type().is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a directory", dir.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir(dir),
        Err(e) => Err(e),
    }
}

/// Delete everything inside `dir` (symlinks are removed, never followed).
pub(super) fn empty_dir(dir: &Path) -> io::Result<()> {
    for dent in fs::read_dir(dir)? {
        remove_any(&dent?.path());
    }
    Ok(())
}

/// Delete a file, symlink or directory tree at `path` (never following symlinks); errors are
/// logged and otherwise ignored.
pub(super) fn remove_any(path: &Path) {
    let res = match fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    };
    if let Err(e) = res {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cache: cannot remove");
        }
    }
}

/// Delete an object's meta, then its data (so a crash in between leaves data without a meta,
/// which the next open drops).
pub(super) fn remove_object_files(objects: &Path, key: &str) {
    remove_any(&objects.join(format!("{key}.meta")));
    remove_any(&objects.join(key));
}

/// Fsync a directory so renames in it are durable (best effort; a no-op off Unix).
pub(super) fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// Check one object found at open. `Ok((data mtime, meta))` if it is sound, else `Err(uri)`
/// (the URI if its meta could be read) and the caller drops it.
pub(super) fn load_object(
    objects: &Path,
    key: &str,
    verify: bool,
) -> Result<(SystemTime, Meta), Option<String>> {
    let data = objects.join(key);
    let meta_path = objects.join(format!("{key}.meta"));
    let md = fs::symlink_metadata(&data).map_err(|_| None)?;
    if !md.file_type().is_file() {
        return Err(None);
    }
    let meta_md = fs::symlink_metadata(&meta_path).map_err(|_| None)?;
    if !meta_md.file_type().is_file() || meta_md.len() > MAX_META_BYTES {
        return Err(None);
    }
    let mut bytes = Vec::new();
    open_regular(&meta_path, false)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|_| None)?;
    let meta: Meta = serde_json::from_slice(&bytes).map_err(|_| None)?;
    let uri = Some(meta.uri.clone());
    if key_of(&meta.uri) != key || !valid_key(&meta.sha256) || md.len() != meta.size {
        return Err(uri);
    }
    if verify || modified_ns(&md) != meta.modified_ns {
        let (size, sha) = open_regular(&data, false)
            .and_then(|mut f| hash_reader(&mut f))
            .map_err(|_| uri.clone())?;
        if size != meta.size || sha != meta.sha256 {
            return Err(uri);
        }
    }
    let meta = Meta {
        modified_ns: modified_ns(&md),
        ..meta
    };
    Ok((md.modified().unwrap_or(UNIX_EPOCH), meta))
}

/// A file's modification time in nanoseconds since the epoch (0 if unavailable).
pub(super) fn modified_ns(md: &fs::Metadata) -> u64 {
    md.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Whether the data file at `path` is still the regular file of `meta`'s size and modification
/// time (the cheap check made on every use; a full check hashes the content).
pub(super) fn unchanged(path: &Path, meta: &Meta) -> bool {
    fs::symlink_metadata(path).is_ok_and(|md| {
        md.file_type().is_file() && md.len() == meta.size && modified_ns(&md) == meta.modified_ns
    })
}
