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
//!
//! And one rule that always holds: no file on a special file system (`/proc`, `/sys`, `/dev`...:
//! [`super::special`]) is read for a task or written for it, decided on the opened file. A path
//! is resolved first without opening the file (`O_PATH`, never through a `/proc` magic link), so
//! a device or a FIFO is never opened; the file is then opened through that descriptor. A task's
//! output is copied by [`super::output::write_output`], through a temporary file created new.

use super::download::SourceInfo;
use super::error::StorageError;
use rustix::fs::{Mode, OFlags, ResolveFlags};
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
    ///
    /// The path is first resolved without opening the file (`O_PATH`, and never through a
    /// `/proc` magic link), so a device or a FIFO is never opened; the file must be a regular
    /// file on an ordinary file system ([`super::special`]) and pass the rules; only then is it
    /// opened for reading, through the resolved descriptor.
    pub fn open_path(&self, uri: &str, path: &Path) -> Result<std::fs::File, StorageError> {
        let resolved = if self.roots.is_empty() {
            resolve(path, OFlags::PATH).map_err(Denied::Io)
        } else {
            self.open_beneath(path, OFlags::PATH)
                .map_err(|e| self.beneath_denied(e))
        };
        let handle = resolved.map_err(|d| d.error(uri, "the file"))?;
        let meta = check(&handle).map_err(|d| d.error(uri, "the file"))?;
        if let Some((uid, gid, name)) = &self.reader {
            let real = path
                .canonicalize()
                .map_err(|e| Denied::Io(e).error(uri, "the file"))?;
            if !may_read(&real, &meta, *uid, *gid) {
                return Err(StorageError::Refused {
                    uri: uri.to_string(),
                    why: format!("not readable by the task user '{name}'"),
                });
            }
        }
        reopen(&handle, &meta, || {
            if self.roots.is_empty() {
                resolve(path, OFlags::RDONLY).map_err(Denied::Io)
            } else {
                self.open_beneath(path, OFlags::RDONLY)
                    .map_err(|e| self.beneath_denied(e))
            }
        })
        .map_err(|d| d.error(uri, "the file"))
    }

    fn beneath_denied(&self, e: Beneath) -> Denied {
        match e {
            Beneath::Outside => Denied::Outside(
                self.roots
                    .iter()
                    .map(|(g, _)| g.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            Beneath::Io(e) => Denied::Io(e),
        }
    }

    /// Open `path` beneath one of the roots (with `flags`: `O_PATH` or `O_RDONLY`). First as
    /// written; if that leaves every root (an absolute symbolic link, which `RESOLVE_BENEATH`
    /// never follows) or names none, by its real path, which must be inside a root and is again
    /// opened beneath it.
    fn open_beneath(&self, path: &Path, flags: OFlags) -> Result<std::fs::File, Beneath> {
        let mut inside = false;
        for (given, real) in &self.roots {
            let rel = match (path.strip_prefix(given), path.strip_prefix(real)) {
                (Ok(rel), _) | (_, Ok(rel)) => rel,
                _ => continue,
            };
            inside = true;
            match open_under(real, rel, flags)? {
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
                if let Some(f) = open_under(real, rel, flags)? {
                    return Ok(f);
                }
            }
        }
        Err(Beneath::Outside)
    }

    /// With a task user: `src` (a task's output) must be a regular file, not a symbolic link,
    /// and, for a `file://` `uri`, its path (the destination) writable by that user: the file if
    /// it exists, else the nearest existing directory above it, with search permission on every
    /// directory above that. Without a task user every output is allowed here (the source is
    /// still checked when it is copied: [`open_output_source`]).
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
        // An `s3://` destination is the worker's credentials' business, not a path.
        let Some(dest) = crate::uri::file_path(uri) else {
            return Ok(());
        };
        let mut target = dest.as_path();
        while std::fs::symlink_metadata(target).is_err() {
            match target.parent() {
                Some(p) => target = p,
                None => break,
            }
        }
        // A destination on /proc or /sys is refused for what it is, before its permissions.
        let handle = resolve(target, OFlags::PATH).map_err(|e| refused(e.to_string()))?;
        if let Some(fs) = super::special::special_fs(&handle).map_err(|e| refused(e.to_string()))? {
            return Err(Denied::Special(fs).error(uri, "the destination"));
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

    /// The task user's (uid, gid), if tasks run as one: outputs are given to that user.
    pub fn task_user(&self) -> Option<(u32, u32)> {
        self.reader.as_ref().map(|(uid, gid, _)| (*uid, *gid))
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

/// Open `rel` beneath the directory `root` with `openat2(RESOLVE_BENEATH)` and `flags`; `None`
/// if the path leads out of it. Without `openat2` (Linux before 5.6): the real path must be
/// inside `root`, and a final symbolic link is not followed.
fn open_under(root: &Path, rel: &Path, flags: OFlags) -> Result<Option<std::fs::File>, Beneath> {
    let dir = std::fs::File::open(root).map_err(Beneath::Io)?;
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let flags = with_cloexec(flags);
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

/// `flags` and `O_CLOEXEC`, and `O_NOCTTY` unless `O_PATH` (which `openat2` takes only with
/// `O_DIRECTORY`, `O_NOFOLLOW` and `O_CLOEXEC`).
fn with_cloexec(flags: OFlags) -> OFlags {
    if flags.contains(OFlags::PATH) {
        flags | OFlags::CLOEXEC
    } else {
        flags | OFlags::CLOEXEC | OFlags::NOCTTY
    }
}

/// Open the absolute `path` with `flags`, following symbolic links but not `/proc`'s magic links
/// (`/proc/<pid>/root`, `/cwd`, `/exe`, `/fd/N`: they would lead anywhere the worker's own
/// descriptors lead). Without `openat2` (Linux before 5.6) magic links are followed.
pub(super) fn resolve(path: &Path, flags: OFlags) -> std::io::Result<std::fs::File> {
    let flags = with_cloexec(flags);
    match rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        flags,
        Mode::empty(),
        ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => Ok(std::fs::File::from(fd)),
        Err(rustix::io::Errno::NOSYS) => rustix::fs::open(path, flags, Mode::empty())
            .map(std::fs::File::from)
            .map_err(Into::into),
        Err(e) => Err(e.into()),
    }
}

/// Why a file is not read or written for a task.
#[derive(Debug)]
pub(super) enum Denied {
    /// Outside every input root (the roots, as given).
    Outside(String),
    /// On this special file system.
    Special(&'static str),
    /// Not a regular file.
    NotRegular,
    /// Opened as another file than the one checked.
    Changed,
    /// The error of a system call.
    Io(std::io::Error),
}

impl Denied {
    /// The error for `uri`; `what` names the file in messages ("the file", "the task's output").
    pub(super) fn error(self, uri: &str, what: &str) -> StorageError {
        let refused = |why: String| StorageError::Refused {
            uri: uri.to_string(),
            why,
        };
        let other = |message: String| StorageError::Other {
            uri: uri.to_string(),
            message,
        };
        match self {
            Denied::Outside(roots) => refused(format!("outside the input roots ({roots})")),
            Denied::Special(fs) => refused(format!(
                "{what} is on {fs}, a special file system (the kernel's or a process's state, \
                 such as /proc, /sys or /dev): never read or written for a task"
            )),
            Denied::NotRegular => other(format!("{what} is not a regular file")),
            Denied::Changed => other(format!("{what} changed while it was being opened")),
            Denied::Io(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                refused(format!(
                    "{what}: its path goes through a /proc magic link (such as /proc/self/root \
                     or /proc/self/fd/N) or too many symbolic links"
                ))
            }
            Denied::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
                StorageError::NotFound(uri.to_string())
            }
            Denied::Io(e) => other(e.to_string()),
        }
    }
}

/// The metadata of the resolved file `handle`, if it is a regular file on an ordinary file
/// system.
fn check(handle: &std::fs::File) -> Result<std::fs::Metadata, Denied> {
    if let Some(fs) = super::special::special_fs(handle).map_err(Denied::Io)? {
        return Err(Denied::Special(fs));
    }
    let meta = handle.metadata().map_err(Denied::Io)?;
    if !meta.is_file() {
        return Err(Denied::NotRegular);
    }
    Ok(meta)
}

/// Where this process's descriptors are files.
const OWN_FDS: &str = "/proc/self/fd";

/// Open for reading the file that the `O_PATH` descriptor `handle` (with metadata `meta`)
/// resolved to: through `/proc/self/fd/N`, which is that file whatever became of its path;
/// without `/proc`, by `again` (the path resolved a second time), which must give the same file.
fn reopen(
    handle: &std::fs::File,
    meta: &std::fs::Metadata,
    again: impl FnOnce() -> Result<std::fs::File, Denied>,
) -> Result<std::fs::File, Denied> {
    reopen_in(Path::new(OWN_FDS), handle, meta, again)
}

/// [`reopen`] with the descriptors' directory `fds`.
fn reopen_in(
    fds: &Path,
    handle: &std::fs::File,
    meta: &std::fs::Metadata,
    again: impl FnOnce() -> Result<std::fs::File, Denied>,
) -> Result<std::fs::File, Denied> {
    use std::os::fd::AsRawFd;
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY;
    let via = fds.join(handle.as_raw_fd().to_string());
    let file = match rustix::fs::open(&via, flags, Mode::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(rustix::io::Errno::NOENT) => again()?,
        Err(e) => return Err(Denied::Io(e.into())),
    };
    let now = file.metadata().map_err(Denied::Io)?;
    if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) {
        return Err(Denied::Changed);
    }
    Ok(file)
}

/// Open `path` for reading if it is a regular file on an ordinary file system (the source of a
/// task's output: a symbolic link the task made is followed, but not into `/proc` or `/sys`).
fn open_checked(path: &Path) -> Result<std::fs::File, Denied> {
    let handle = resolve(path, OFlags::PATH).map_err(Denied::Io)?;
    let meta = check(&handle)?;
    reopen(&handle, &meta, || {
        resolve(path, OFlags::RDONLY).map_err(Denied::Io)
    })
}

/// Open the task's output `src` (for `uri`, of any scheme) to copy or upload it: a regular file
/// on an ordinary file system, never a device, a FIFO or a file of `/proc` or `/sys` (a symbolic
/// link to `/proc/self/environ` would upload the worker's environment, one to `/dev/zero` would
/// never end).
pub(crate) fn open_output_source(uri: &str, src: &Path) -> Result<std::fs::File, StorageError> {
    open_checked(src).map_err(|d| d.error(uri, "the task's output"))
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
    use std::process::Command;

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

    /// The reason `open` refused `path`, or a panic if it did not.
    #[track_caller]
    fn refusal(a: &FileAccess, path: &str) -> String {
        match a.open(&format!("file://{path}")) {
            Err(StorageError::Refused { why, .. }) => why,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn special_files_are_refused_by_the_file_system_of_the_opened_file() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/proc/self/environ", d.path().join("env")).unwrap();
        std::os::unix::fs::symlink("/proc", d.path().join("proc")).unwrap();
        let all = FileAccess::open_to_all();
        let rooted = FileAccess::confined(&[d.path().to_path_buf()], None).unwrap();
        let env = d.path().join("env").display().to_string();
        let via_dir = format!("{}/proc/self/status", d.path().display());
        for (a, path, why) in [
            (
                &all,
                "/proc/self/environ",
                "on procfs, a special file system",
            ),
            (&all, env.as_str(), "on procfs"),
            (&all, via_dir.as_str(), "on procfs"),
            (&all, "/sys/kernel/uevent_seqnum", "on sysfs"),
            (&all, "/dev/null", "on devtmpfs"),
            (&all, "/proc/self/root/etc/passwd", "/proc magic link"),
            (&all, "/proc/self/cwd", "/proc magic link"),
            (&rooted, env.as_str(), "outside the input roots"),
        ] {
            let got = refusal(a, path);
            assert!(got.contains(why), "{path}: {got}");
        }
        // The FIFO is never opened (opening it would wait for a writer).
        let fifo = d.path().join("fifo");
        assert!(Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let uri = uri(&fifo);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(FileAccess::open_to_all().open(&uri).map(drop)));
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert!(
            matches!(&got, Ok(Err(StorageError::Other { message, .. })) if message.contains("not a regular file")),
            "{got:?}"
        );
    }

    #[test]
    fn reopening_without_proc_needs_the_same_file() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        let handle = resolve(&a, OFlags::PATH).unwrap();
        let meta = handle.metadata().unwrap();
        let no_proc = d.path().join("no-proc");
        let same = reopen_in(&no_proc, &handle, &meta, || {
            Ok(std::fs::File::open(&a).unwrap())
        });
        assert!(same.is_ok());
        let other = reopen_in(&no_proc, &handle, &meta, || {
            Ok(std::fs::File::open(&b).unwrap())
        });
        assert!(matches!(other, Err(Denied::Changed)));
        let mut via_proc = reopen(&handle, &meta, || panic!("/proc is there")).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut via_proc, &mut text).unwrap();
        assert_eq!(text, "a");
    }

    #[test]
    fn with_a_task_user_an_s3_output_is_checked_for_its_source_only() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("o");
        std::fs::write(&src, b"x").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&src, &link).unwrap();
        let a = FileAccess::confined(&[], Some((65534, 65534, "nobody".into()))).unwrap();
        assert_eq!(a.task_user(), Some((65534, 65534)));
        a.check_output("s3://bucket/key", &src).unwrap();
        match a.check_output("s3://bucket/key", &link) {
            Err(StorageError::Refused { why, .. }) => assert!(why.contains("not a regular file")),
            other => panic!("{other:?}"),
        }
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
