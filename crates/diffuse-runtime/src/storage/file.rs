//! `file://` objects: paths on a shared POSIX file system, read by the worker.
//!
//! Two optional rules confine what a task may name as an input (docs/security.md):
//!
//! * **Input roots** (`--input-root DIR`, repeatable): a path outside every root is refused.
//!   The file is opened with `openat2(2)` and `RESOLVE_BENEATH` relative to the root, so neither
//!   `..` nor a symbolic link inside the root leads out of it. On a kernel without `openat2`
//!   (before Linux 5.6) the path is resolved with `realpath` and checked, then opened without
//!   following a final symbolic link.
//! * **Task user** (`--task-user`): the worker may run as root and its tasks as another user;
//!   then a file is read for a task only if that user could read it itself: search permission
//!   on every directory of its real path and read permission on the file, by the owner, group
//!   and other bits, for the task user's uid and primary gid (tasks run without supplementary
//!   groups). Access control lists are not consulted.

use super::{SourceInfo, StorageError};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Who may read which files for a task.
#[derive(Clone, Debug, Default)]
pub struct FileAccess {
    /// Allowed roots: (as given, real path). Empty: every path.
    roots: Vec<(PathBuf, PathBuf)>,
    /// Read on behalf of this (uid, gid) when set.
    reader: Option<(u32, u32, String)>,
}

impl FileAccess {
    /// Access to every path, with the worker's own permissions.
    pub fn open_to_all() -> FileAccess {
        FileAccess::default()
    }

    /// Only under `roots` (each must exist), and only what `reader` (uid, gid, name) may read.
    pub fn confined(
        roots: &[PathBuf],
        reader: Option<(u32, u32, String)>,
    ) -> std::io::Result<FileAccess> {
        let mut r = Vec::new();
        for root in roots {
            let given = std::path::absolute(root)?;
            let real = given.canonicalize().map_err(|e| {
                std::io::Error::new(e.kind(), format!("input root {}: {e}", root.display()))
            })?;
            if !real.is_dir() {
                return Err(std::io::Error::other(format!(
                    "input root {} is not a directory",
                    root.display()
                )));
            }
            r.push((given, real));
        }
        Ok(FileAccess { roots: r, reader })
    }

    /// Open the file of `uri` for reading, if the rules allow.
    pub fn open(&self, uri: &str) -> Result<std::fs::File, StorageError> {
        let path =
            crate::uri::file_path(uri).ok_or_else(|| StorageError::Unsupported(uri.to_string()))?;
        self.open_path(uri, &path)
    }

    /// Open `path` (the path of `uri`) for reading, if the rules allow.
    pub fn open_path(&self, uri: &str, path: &Path) -> Result<std::fs::File, StorageError> {
        let io = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => StorageError::NotFound(uri.to_string()),
            _ => StorageError::Other {
                uri: uri.to_string(),
                message: e.to_string(),
            },
        };
        let file = if self.roots.is_empty() {
            std::fs::File::open(path).map_err(io)?
        } else {
            self.open_beneath(path).map_err(|e| match e {
                Beneath::Outside => StorageError::Refused {
                    uri: uri.to_string(),
                    why: format!(
                        "outside the input roots ({})",
                        self.roots
                            .iter()
                            .map(|(g, _)| g.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                },
                Beneath::Io(e) => io(e),
            })?
        };
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(StorageError::Other {
                uri: uri.to_string(),
                message: "not a regular file".into(),
            });
        }
        if let Some((uid, gid, name)) = &self.reader {
            let real = path.canonicalize().map_err(io)?;
            if !may_read(&real, &meta, *uid, *gid) {
                return Err(StorageError::Refused {
                    uri: uri.to_string(),
                    why: format!("not readable by the task user '{name}'"),
                });
            }
        }
        Ok(file)
    }

    /// Open `path` beneath one of the roots. First as written; if that leaves every root (an
    /// absolute symbolic link, which `RESOLVE_BENEATH` never follows) or names none, by its real
    /// path, which must be inside a root and is again opened beneath it.
    fn open_beneath(&self, path: &Path) -> Result<std::fs::File, Beneath> {
        let mut inside = false;
        for (given, real) in &self.roots {
            let rel = match (path.strip_prefix(given), path.strip_prefix(real)) {
                (Ok(rel), _) | (_, Ok(rel)) => rel,
                _ => continue,
            };
            inside = true;
            match open_under(real, rel)? {
                Some(f) => return Ok(f),
                None => break,
            }
        }
        // Whether a path outside the roots exists is not told.
        let resolved = match path.canonicalize() {
            Ok(r) => r,
            Err(e) if inside => return Err(Beneath::Io(e)),
            Err(_) => return Err(Beneath::Outside),
        };
        for (_, real) in &self.roots {
            if let Ok(rel) = resolved.strip_prefix(real) {
                if let Some(f) = open_under(real, rel)? {
                    return Ok(f);
                }
            }
        }
        Err(Beneath::Outside)
    }

    /// With a task user: `src` (a task's output) must be a regular file, not a symbolic link,
    /// and the path of `uri` (its destination) writable by that user: the file if it exists,
    /// else the nearest existing directory above it, with search permission on every directory
    /// above that. Without a task user every output is allowed.
    pub fn check_output(&self, uri: &str, src: &Path) -> Result<(), StorageError> {
        let Some((uid, gid, name)) = &self.reader else {
            return Ok(());
        };
        let refused = |why: String| StorageError::Refused {
            uri: uri.to_string(),
            why,
        };
        match std::fs::symlink_metadata(src) {
            Ok(m) if m.file_type().is_file() => {}
            Ok(_) => return Err(refused("the task's output is not a regular file".into())),
            Err(e) => return Err(refused(format!("the task's output: {e}"))),
        }
        let dest =
            crate::uri::file_path(uri).ok_or_else(|| StorageError::Unsupported(uri.to_string()))?;
        let mut target = dest.as_path();
        while std::fs::symlink_metadata(target).is_err() {
            match target.parent() {
                Some(p) => target = p,
                None => break,
            }
        }
        let real = target.canonicalize().map_err(|e| refused(e.to_string()))?;
        let meta = std::fs::metadata(&real).map_err(|e| refused(e.to_string()))?;
        if !may(&real, &meta, *uid, *gid, 0o2) {
            return Err(refused(format!(
                "{} is not writable by the task user '{name}'",
                real.display()
            )));
        }
        Ok(())
    }

    /// Size and version of the file of `uri`.
    pub fn head(&self, uri: &str) -> Result<SourceInfo, StorageError> {
        let file = self.open(uri)?;
        let meta = file.metadata().map_err(|e| StorageError::Other {
            uri: uri.to_string(),
            message: e.to_string(),
        })?;
        Ok(info_of(&meta))
    }
}

enum Beneath {
    Outside,
    Io(std::io::Error),
}

/// Open `rel` beneath the directory `root` with `openat2(RESOLVE_BENEATH)`; `None` if the path
/// leads out of it. Without `openat2` (Linux before 5.6): the real path must be inside `root`,
/// and a final symbolic link is not followed.
fn open_under(root: &Path, rel: &Path) -> Result<Option<std::fs::File>, Beneath> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let dir = std::fs::File::open(root).map_err(Beneath::Io)?;
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    match rustix::fs::openat2(
        &dir,
        rel,
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => Ok(Some(std::fs::File::from(fd))),
        Err(rustix::io::Errno::XDEV) => Ok(None),
        Err(rustix::io::Errno::NOSYS) => {
            let path = root.join(rel);
            let resolved = path.canonicalize().map_err(Beneath::Io)?;
            if !resolved.starts_with(root) {
                return Ok(None);
            }
            rustix::fs::open(&resolved, flags | OFlags::NOFOLLOW, Mode::empty())
                .map(|fd| Some(std::fs::File::from(fd)))
                .map_err(|e| Beneath::Io(e.into()))
        }
        Err(e) => Err(Beneath::Io(e.into())),
    }
}

/// Size and version of an opened file: `size:inode-mtime-size` (hex; mtime in microseconds),
/// the ETag scheme of Apache and of `object_store`'s local store, so caches filled before this
/// backend existed stay valid.
pub fn info_of(meta: &std::fs::Metadata) -> SourceInfo {
    let mtime_us = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros();
    SourceInfo {
        size: meta.len(),
        version: format!(
            "{}:{:x}-{:x}-{:x}",
            meta.len(),
            meta.ino(),
            mtime_us,
            meta.len()
        ),
    }
}

/// Whether `uid`/`gid` (no supplementary groups) may read the file at the real path `real`:
/// search on every directory above it and read on the file.
fn may_read(real: &Path, file: &std::fs::Metadata, uid: u32, gid: u32) -> bool {
    may(real, file, uid, gid, 0o4)
}

/// Whether `uid`/`gid` have permission `bit` (4 read, 2 write, 1 search) on `real`, and search
/// permission on every directory above it.
fn may(real: &Path, file: &std::fs::Metadata, uid: u32, gid: u32, bit: u32) -> bool {
    let allowed = |m: &std::fs::Metadata, bit: u32| {
        if uid == 0 {
            return true;
        }
        let mode = m.mode();
        if m.uid() == uid {
            mode & (bit << 6) != 0
        } else if m.gid() == gid {
            mode & (bit << 3) != 0
        } else {
            mode & bit != 0
        }
    };
    let mut dir = real.parent();
    while let Some(d) = dir {
        match std::fs::metadata(d) {
            Ok(m) if allowed(&m, 0o1) => {}
            _ => return false,
        }
        dir = d.parent();
    }
    allowed(file, bit) && (bit != 0o2 || !file.is_dir() || allowed(file, 0o1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(p: &Path) -> String {
        crate::uri::canonical(&format!("file://{}", p.display())).unwrap()
    }

    #[test]
    fn roots_confine_dot_dot_and_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/ok"), b"ok").unwrap();
        std::fs::write(d.path().join("secret"), b"no").unwrap();
        std::os::unix::fs::symlink(d.path().join("secret"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(root.join("sub/ok"), root.join("inner")).unwrap();
        let a = FileAccess::confined(std::slice::from_ref(&root), None).unwrap();
        assert!(a.open(&uri(&root.join("sub/ok"))).is_ok());
        assert!(
            a.open(&uri(&root.join("inner"))).is_ok(),
            "a link inside stays inside"
        );
        for outside in [
            d.path().join("secret"),
            root.join("link"),
            PathBuf::from("/etc/passwd"),
            PathBuf::from("/etc/no-such-file"),
        ] {
            match a.open(&uri(&outside)) {
                Err(StorageError::Refused { why, .. }) => {
                    assert!(why.contains("outside the input roots"), "{why}")
                }
                other => panic!("{} opened: {other:?}", outside.display()),
            }
        }
        // `..` in a raw path is resolved by the URI parser: still outside.
        let dotdot = format!("file://{}/../secret", root.display());
        assert!(matches!(
            a.open(&crate::uri::canonical(&dotdot).unwrap()),
            Err(StorageError::Refused { .. })
        ));
        assert!(matches!(
            a.open(&uri(&root.join("missing"))),
            Err(StorageError::NotFound(_))
        ));
    }

    #[test]
    fn permission_bits_decide_for_the_task_user() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        let nobody = Some((65534, 65534, "nobody".to_string()));
        let a = FileAccess::confined(&[], nobody).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(a.open(&uri(&f)).is_ok());
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let owner = f.metadata().unwrap().uid();
        if owner != 65534 {
            assert!(matches!(
                a.open(&uri(&f)),
                Err(StorageError::Refused { .. })
            ));
        }
    }
}
