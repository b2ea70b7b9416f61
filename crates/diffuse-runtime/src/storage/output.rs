//! Writing a task's output to a `file://` destination (docs/security.md, "Which files a task may
//! name").
//!
//! The output is copied through a temporary file beside its destination and renamed over it at
//! the end, so readers never see a partial output. Every step is made relative to a directory
//! descriptor that was checked first, never by re-resolving the path:
//!
//! * The nearest existing directory above the destination is opened (`O_PATH`, not through a
//!   `/proc` magic link) and refused if it is on a special file system ([`super::special`])
//!   **before anything is created**: `mkdir` in a cgroup file system makes a cgroup, a kernel
//!   object. The missing directories are then made one by one under it (`mkdirat`), each opened
//!   and checked in turn.
//! * The temporary name is `.<file name>.diffuse-tmp-<pid>-<n>` (`n` counts this process's
//!   outputs), unique for each output of a directory (`a.txt` and `a.csv` do not share one) and
//!   created new (`O_CREAT | O_EXCL`: an existing file or a symbolic link at that name is never
//!   opened, and never removed either, since it may be another writer's: the next `n` is tried).
//! * The mode is the source's permission bits without setuid, setgid and sticky (`mode & 0o777`):
//!   a root worker must not make a setuid copy of what a task left. With a task user the copy is
//!   given to that user (`fchown`) before it is renamed into place.

use super::error::StorageError;
use super::file::{open_output_source, resolve, Denied};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicU64, Ordering};

/// The bytes of an output's name kept in its temporary name (the rest, at most 60 bytes, says
/// whose it is).
const TEMP_NAME_KEPT: usize = 190;

/// How many names a writer tries for its temporary file before it gives up.
const TEMP_TRIES: u32 = 1000;

/// Copy a task's output `src` to the `file://` destination `dest` (of `uri`), owned by `owner`
/// (uid, gid: the task user) if given. See the module documentation for how.
pub fn write_output(
    uri: &str,
    src: &Path,
    dest: &Path,
    owner: Option<(u32, u32)>,
) -> Result<(), StorageError> {
    let io = |e: std::io::Error| StorageError::Other {
        uri: uri.to_string(),
        message: e.to_string(),
    };
    let mut input = open_output_source(uri, src)?;
    let name = dest.file_name().ok_or_else(|| StorageError::Refused {
        uri: uri.to_string(),
        why: "the destination has no file name".into(),
    })?;
    let dir = output_dir(uri, dest.parent().unwrap_or(Path::new("/")))?;
    let (tmp, mut out) = create_temp(&dir, name).map_err(io)?;
    let written = (|| {
        if let Some(fs) = super::special::special_fs(&out).map_err(io)? {
            return Err(Denied::Special(fs).error(uri, "the destination"));
        }
        std::io::copy(&mut input, &mut out).map_err(io)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&out, Some(uid), Some(gid)).map_err(io)?;
        }
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&input.metadata().map_err(io)?.permissions());
        rustix::fs::fchmod(&out, Mode::from_raw_mode(mode & 0o777)).map_err(|e| io(e.into()))?;
        drop(out);
        rustix::fs::renameat(&dir, &tmp, &dir, name).map_err(|e| io(e.into()))
    })();
    if written.is_err() {
        let _ = rustix::fs::unlinkat(&dir, &tmp, rustix::fs::AtFlags::empty());
    }
    written
}

/// The directory `dir` (of an output of `uri`) opened `O_PATH`, made if missing: its nearest
/// existing ancestor is opened and checked first, then each missing directory is made under the
/// one above it and checked.
fn output_dir(uri: &str, dir: &Path) -> Result<std::fs::File, StorageError> {
    let dest_error = |e: std::io::Error| Denied::Io(e).error(uri, "the destination");
    let check = |handle: &std::fs::File| -> Result<(), StorageError> {
        match super::special::special_fs(handle).map_err(dest_error)? {
            Some(fs) => Err(Denied::Special(fs).error(uri, "the destination")),
            None => Ok(()),
        }
    };
    let mut existing = dir;
    while std::fs::symlink_metadata(existing).is_err() {
        match existing.parent() {
            Some(p) => existing = p,
            None => break,
        }
    }
    let mut handle = resolve(existing, OFlags::PATH | OFlags::DIRECTORY).map_err(dest_error)?;
    check(&handle)?;
    let missing = dir.strip_prefix(existing).unwrap_or(Path::new(""));
    for part in missing.components() {
        let Component::Normal(part) = part else {
            return Err(StorageError::Refused {
                uri: uri.to_string(),
                why: format!("the destination's directory {} is not plain", dir.display()),
            });
        };
        match rustix::fs::mkdirat(&handle, part, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(dest_error(e.into())),
        }
        handle = open_dir_at(&handle, part).map_err(dest_error)?;
        check(&handle)?;
    }
    Ok(handle)
}

/// Open the directory `name` in `dir` (`O_PATH`), not through a `/proc` magic link.
fn open_dir_at(dir: impl AsFd, name: &OsStr) -> std::io::Result<std::fs::File> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match rustix::fs::openat2(
        &dir,
        name,
        flags,
        Mode::empty(),
        ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => Ok(fd.into()),
        Err(rustix::io::Errno::NOSYS) => rustix::fs::openat(&dir, name, flags, Mode::empty())
            .map(Into::into)
            .map_err(Into::into),
        Err(e) => Err(e.into()),
    }
}

/// The `n` of the next temporary name.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A new temporary file for the output `name` in `dir`: its name and the file, open for writing.
fn create_temp(
    dir: impl AsFd,
    name: &OsStr,
) -> std::io::Result<(std::ffi::OsString, std::fs::File)> {
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::EXCL
        | OFlags::NOFOLLOW
        | OFlags::CLOEXEC
        | OFlags::NOCTTY;
    let mut last = None;
    for _ in 0..TEMP_TRIES {
        let tmp = temp_name(
            name,
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
        );
        match rustix::fs::openat(&dir, &tmp, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => return Ok((tmp, fd.into())),
            Err(rustix::io::Errno::EXIST) => last = Some(rustix::io::Errno::EXIST),
            Err(e) => return Err(e.into()),
        }
    }
    Err(std::io::Error::other(format!(
        "no free temporary name beside {} after {TEMP_TRIES} tries ({:?})",
        Path::new(name).display(),
        last
    )))
}

/// `.<name>.diffuse-tmp-<pid>-<n>`, with `name` cut to its first [`TEMP_NAME_KEPT`] bytes so
/// that a long output name still leaves a temporary name file systems take (255 bytes).
pub(crate) fn temp_name(name: &OsStr, pid: u32, n: u64) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStrExt;
    let bytes = name.as_bytes();
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(OsStr::from_bytes(&bytes[..bytes.len().min(TEMP_NAME_KEPT)]));
    tmp.push(format!(".diffuse-tmp-{pid}-{n}"));
    tmp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn refusal(r: Result<(), StorageError>) -> String {
        match r {
            Err(StorageError::Refused { why, .. }) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn outputs_never_come_from_or_go_to_special_files_nor_through_a_planted_link() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::write(&src, b"result").unwrap();
        let leak = d.path().join("leak");
        std::os::unix::fs::symlink("/proc/self/environ", &leak).unwrap();
        let out = d.path().join("out/o.txt");
        let why = refusal(write_output("u", &leak, &out, None));
        assert!(why.contains("the task's output is on procfs"), "{why}");
        assert!(!out.exists());
        for dest in ["/proc/self/comm", "/sys/kernel/diffuse-out"] {
            let got = refusal(write_output("u", &src, Path::new(dest), None));
            assert!(got.contains("the destination is on"), "{dest}: {got}");
        }
        // Links at the next temporary names are left alone, never written through.
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"untouched").unwrap();
        let next = NEXT.load(Ordering::Relaxed);
        let planted: Vec<_> = (next..next + 20)
            .map(|n| {
                let tmp = out.parent().unwrap().join(temp_name(
                    OsStr::new("o.txt"),
                    std::process::id(),
                    n,
                ));
                std::os::unix::fs::symlink(&victim, &tmp).unwrap();
                tmp
            })
            .collect();
        write_output("u", &src, &out, None).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
        assert_eq!(std::fs::read(&out).unwrap(), b"result");
        assert!(std::fs::symlink_metadata(&out).unwrap().is_file());
        assert!(planted.iter().all(|p| p.is_symlink()));
    }

    #[test]
    fn outputs_of_one_directory_never_share_a_temporary_file() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        // Large enough that the copies overlap.
        let contents: Vec<(String, Vec<u8>)> = ["a.txt", "a.csv", "a", "a.txt.gz"]
            .iter()
            .enumerate()
            .map(|(i, name)| (name.to_string(), vec![b'a' + i as u8; 8 << 20]))
            .collect();
        for round in 0..3 {
            std::thread::scope(|s| {
                for (name, bytes) in &contents {
                    let src = d.path().join(format!("src-{name}"));
                    std::fs::write(&src, bytes).unwrap();
                    let dest = out.join(name);
                    s.spawn(move || write_output("u", &src, &dest, None).unwrap());
                }
            });
            for (name, bytes) in &contents {
                let got = std::fs::read(out.join(name)).unwrap();
                assert!(
                    got == *bytes,
                    "round {round}: {name} has another output's bytes"
                );
            }
        }
        let left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), contents.len(), "temporary files left: {left:?}");
    }

    #[test]
    fn an_output_with_the_longest_name_is_written() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::write(&src, b"long").unwrap();
        let dest = d.path().join("n".repeat(255));
        write_output("u", &src, &dest, None).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"long");
    }

    #[test]
    fn outputs_lose_setuid_and_setgid_and_go_to_the_task_user() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("sh");
        std::fs::write(&src, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o6755)).unwrap();
        let root = rustix::process::geteuid().is_root();
        let owner = root.then_some((65534, 65534));
        let dest = d.path().join("out/sh");
        write_output("u", &src, &dest, owner).unwrap();
        let meta = std::fs::metadata(&dest).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o755, "mode {:o}", meta.mode());
        if root {
            assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
        } else {
            eprintln!("SKIPPED: the task user's ownership needs root");
        }
    }

    /// The mount point of a cgroup or cgroup2 file system, if one is mounted.
    fn cgroup_mount() -> Option<std::path::PathBuf> {
        let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        table.lines().find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fs = right.split(' ').next()?;
            let at = left.split(' ').nth(4)?;
            (fs == "cgroup" || fs == "cgroup2").then(|| std::path::PathBuf::from(at))
        })
    }

    #[test]
    fn nothing_is_created_on_a_special_file_system_before_the_refusal() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIPPED: making a directory in a cgroup file system needs root");
            return;
        }
        let Some(mount) = cgroup_mount() else {
            eprintln!("SKIPPED: no cgroup file system is mounted");
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::write(&src, b"x").unwrap();
        let made = mount.join(format!(
            "diffuse-test-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        for dest in [made.join("o"), made.join("deeper/o")] {
            let why = refusal(write_output("u", &src, &dest, None));
            let exists = made.exists();
            if exists {
                let _ = std::fs::remove_dir(made.join("deeper"));
                let _ = std::fs::remove_dir(&made);
            }
            assert!(why.contains("the destination is on cgroup"), "{why}");
            assert!(!exists, "{} was made before the refusal", made.display());
        }
    }
}
